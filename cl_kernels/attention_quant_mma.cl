/* Fused decode attention over a quantized KV cache on the tensor cores (NVIDIA): the
 * variant of attention_quant_partial (cl_kernels/attention_quant.cl) that
 * host/attention_quant.c picks where CLKV_NVIDIA_PTX is defined, D is 64, 128 or 256, both code
 * widths are 2 or 4 bits and o is 16-bit (and where it measured faster; see use_mma there).
 * Same arguments as that kernel, except that every warp is one split of the token range
 * (the residual's splits first, see below):
 * work-group x holds the splits 4x .. 4x + 3 of one (sequence, KV head, head group) and
 * merges their states in local memory into partial state x of num_splits / 4 (the layout
 * attention_decode_merge reads).
 *
 * Build options: Q_DTYPE, RES_DTYPE, META_DTYPE, HEAD_DIM, KBITS, VBITS, GQ (as in
 * attention_quant.cl); NST (the host passes 3 at 4-bit keys and values, 4 otherwise;
 * default 4): tiles in flight per warp (cp.async stages in local memory: key and value
 * codes, value metadata, and the key metadata of a tile that starts a key group).
 *
 * A warp walks its token range in tiles of 16 tokens (a tile lies in one key group and is
 * all quantized or all residual: n_quant is a multiple of GQ >= 16 and splits start at
 * multiples of 16). Codes become mma operands directly, with few instructions (a gather
 * of one byte from two words, at most a rotation, one mask):
 *   Keys: S^T (16 tokens x 8 columns) = X (tokens x channels) * B. A lane's code c,
 *     masked in place inside a 16-bit half (bit p = 0..6), is the f16 subnormal
 *     c 2^(p - 24), exact (the tensor cores take subnormal operands); B[c][col] =
 *     q'_c s_c 2^-sg of the column's head (q' = q * scale * log2(e)), with sg per (group,
 *     head) from the exponents of max |q'| and of the group's max s so that |B| < 2^15
 *     (f16 range). A warp forms B in local memory whenever its tile enters a new key
 *     group; a logit is product * 2^(24 - p + sg) + sum_c q'_c m_c (summed in f32 over the
 *     warp), with no cancellation.
 *   Values: O^T (16 channels x 8 columns) += X^T (channels x tokens) * B, B[t][col] =
 *     p_t s_t,group of the column's head (bf16: p s may exceed the f16 range). Codes are
 *     bf16 x = 1 + c 2^(p - 7) (p = 2 / 4 for 2-bit rows g / g + 8, 0 / 3 for 4-bit): a
 *     row's value is (acc - sum_t B_t) 2^(7 - p) + sum_t p_t m_t, the two sums per (value
 *     group, head) on the CUDA cores, sum_t B_t from the operand as it is held, so the
 *     unit part cancels exactly.
 *   The 8 columns of every product are the 4 query heads of the work-group (G <= 4 per
 *     head group), head h as a high part (column 2 h) and the rounded rest (2 h + 1): f16
 *     round + f16 rest for keys (~22 significant bits), bf16 truncation + bf16 rest for
 *     values (~16 bits; within the tolerance of 16-bit outputs, not of f32 outputs, which
 *     stay on the CUDA-core kernel). So the C fragments of a lane (columns 2 t, 2 t + 1)
 *     are both parts of head t, added in the lane (no exchange between lanes).
 * Row orders (free for mma, chosen so a lane reads few shared-memory bytes):
 *   key rows g, g + 8 = tokens 2g, 2g + 1 (2-bit: codes 2g, 2g + 1 of a word) or g, g + 8
 *   (4-bit: code g of two word rows); key k-steps: lane t owns channels 4t .. 4t + 3 of a
 *   16-channel step (one 16-byte load of code words). Value m-tile t lies in value group
 *   t / VGT and its rows g, g + 8 are channels VCH(t, g) + 0 / 1, so that lane group g
 *   reads one run of its value group's codes per token (one word at 2-bit groups of 128
 *   instead of the whole 32-byte row); value k = token of the tile. In a stage the value
 *   codes of token t start SKW(t) chunks late so these reads hit distinct banks (an
 *   unskewed layout had 2- and 4-way bank conflicts and cost 10 % / 40 % of the 2- / 4-bit
 *   time).
 * Residual tiles (16-bit or f32 tokens, fewer than n_r per sequence) are computed on the
 * CUDA cores into the same fragments (values scaled by 2^(p - 7) like the codes' rows), by
 * all 32 lanes (two halves of the channels, or of the tokens, for two heads, exchanged
 * between lanes ft and ft ^ 2), on splits of their own: the first rsplits splits (the host
 * gives one work-group, dispatched first, each warp a run of rchunk tokens), the quantized
 * splits after them. A residual tile costs a few
 * microseconds of load latency; walked by the last split after its quantized tiles, as
 * before, the residual set the kernel's time (H100, 2-bit, groups of 128, B 1 4K / 32K:
 * 19.4 / 22.9 us with an empty residual, 76.2 / 78.6 us with 127 tokens in it). Dealing the
 * residual's tiles to the quantized splits instead (a first tile loop, or a second pass
 * over the loop) took 113-127 registers instead of 96 and 5-25 % more time at 2-bit.
 * 16-byte residual key loads (two per token in flight) made a full residual free at B 1
 * 32K (23.7 us; it costs up to 15 us now) but the kernel 8-10 % slower at B 1 128K and
 * B 8, so the scalar loads stay.
 * The online softmax works on the fragments (a lane holds two tokens of one head; maxima
 * by shuffles over the 8 row lanes, only when a logit exceeds the running maximum by more
 * than LAZY_M).
 *
 * Cost (H100, D 128, G 4, B 8, 128K tokens, groups of 128; ptxas sm_90: 128 registers,
 * 4 work-groups per SM): about 380 warp instructions per 16-token tile in the steady
 * state (16 mma). Issuing the copies from running pointers and shared addresses computed
 * once (see copy_plan) cut the copy issue from ~57 to ~40 instructions per tile and the
 * registers to 96 at 2-bit codes (ptxas sm_90), and the time by 3-6 % (H100, two
 * alternations: 2-bit B 1 128K 58.5 / 58.2 -> 56.5 / 57.0 us, B 8 32K 104.3 / 104.3 ->
 * 98.8 / 99.4, B 8 128K 349.8 / 351.7 -> 329.0 / 328.6; 4-bit with 3 stages B 1 128K
 * 74.8 / 75.4 -> 73.4 / 74.9, B 8 32K 140.9 / 139.5 -> 135.3 / 134.9, B 8 128K 459.3 /
 * 457.2 -> 443.3 / 443.3; 2026-11-27). Streaming the same bytes with no arithmetic takes
 * ~65 % of the kernel's time; local-memory reads, registers per thread (96-136), stages in
 * flight (2-4) and work-group counts changed the time by less than 3 % each, so the rest
 * is instruction issue and per-tile latency. A variant stepping two tiles per iteration
 * (two independent key products, one softmax per 32 tokens) measured 2-10 % slower on the
 * H100 and was dropped; so was keeping the key operand's fragments in registers (+10 %,
 * register pressure; tried again after the copy change: back to 128 registers, 2-bit B 8
 * 128K 377.6 / 377.1 against 337.7 / 326.7 us, B 1 128K 60.8 / 61.3 against 57.0 / 57.4).
 * Profiled (Nsight Compute on the kernel's PTX replayed through the CUDA driver; H100, 2-bit,
 * B 1 128K, 2026-11-28): 399 instructions per tile, issue slots 56 % busy, 3.3 resident
 * warps per scheduler, stalls mostly fixed-latency waits and a busy ALU pipe (LOP3 / PRMT /
 * SHF: 130 of the 328 instructions of a steady-state tile). Head-major product columns
 * (2 h, 2 h + 1; before: high parts in columns 0-3, rests in 4-7, so a lane held two heads'
 * halves and added its partner lane's by a shuffle) removed the logits' shuffles, half of
 * the softmax and the accumulators' final shuffles, and the key constants' sum became a
 * reduce-scatter (7 shuffles instead of 20; without it the driver's compile of the 4-bit
 * kernel spilled in the key-group block and ran B 8 5-7 % slower). H100, groups of 128, two
 * alternations in one run: 2-bit B 1 32K / 128K 22.6 / 55.5-56.0 -> 21.5-21.7 / 53.1-53.3,
 * B 8 32K / 128K 98.9-99.3 / 328.5-333.8 -> 93.6-93.7 / 306.0-312.0 us; 4-bit B 1 26.4-27.0
 * / 74.0-74.9 -> 24.4 / 66.9-67.3, B 8 134.6-135.3 / 442.3-443.0 -> 135.4-136.0 /
 * 437.8-438.4; full residual (127 tokens, B 8 32K) 118.6 -> 112.3, groups of 16 (B 1 128K)
 * 117.5 -> 111.0. Tried with it and dropped: 2-bit value codes masked in place at bits 0-1
 * (p = 0, one shift fewer per two operands): the unit part's cancellation then loses the
 * f16 output tolerance (test_attention_quant, tiny keys). */

#include "kernel_args.cl"

#define HP 4 /* query heads per work-group */
#define NWARP 4
#define WG_SIZE (32 * NWARP)
#define KP (32 / KBITS)
#define VP (32 / VBITS)
#define NW (HEAD_DIM / VP)  /* value words per token */
#define DG (HEAD_DIM / GQ)  /* value groups per token */
#define NKS (HEAD_DIM / 16) /* k-steps of the key product */
#define NMT (HEAD_DIM / 16) /* m-tiles of the value product */
#define CPL (HEAD_DIM / 32) /* channels per lane when forming the key operand */
#define LDB                                                                                        \
    (HEAD_DIM + 16)  /* 16-bit entries per column of the key operand (pad: 8-byte                  \
                      * fragment reads without bank conflicts) */
#define VW4 (NW / 4) /* uint4 of value words per token */
#define UNROLL _Pragma("unroll")
#define UNROLL4 _Pragma("unroll 4")
#define LAZY_M 8.0f   /* slack of the lazy running maxima (log2 units) */
#define M_INIT -1e30f /* running maximum before the first logit (written out as -inf) */

#if (HEAD_DIM != 64 && HEAD_DIM != 128 && HEAD_DIM != 256) || (KBITS != 2 && KBITS != 4) ||        \
    (VBITS != 2 && VBITS != 4) || !defined(CLKV_NVIDIA_PTX) || GQ < 16
#error "attention_quant_mma: D 64/128/256, 2- or 4-bit codes, NVIDIA PTX"
#endif
#ifndef NST
#define NST 4
#endif
#if META_DTYPE == CLKV_DT_F16
#define MSZ 2
#define LOAD_META_L(p, i) vload_half((size_t)(i), (p))
#elif META_DTYPE == CLKV_DT_F32
#define MSZ 4
#define LOAD_META_L(p, i) ((p)[i])
#else
#error "attention_quant_mma: f16 or f32 metadata"
#endif
/* one stage, in 16-byte chunks: key codes, value codes, value (scale, min), key (scale,
 * min) of the tile's group */
#define KC_N (HEAD_DIM * KBITS / 8)
#define VC_N (HEAD_DIM * VBITS / 8)
#define VM_N (DG * MSZ)
#define KM_N (HEAD_DIM * MSZ / 16)
/* In a stage the value codes of token t start SKW(t) chunks late, so that the reads of
 * the tokens 2 ft + c (ft = 0..3) by one warp hit distinct banks. */
#define SKW(t) (VW4 == 1 ? 0 : 2 * ((t) / (8 / VW4)))
#define VC_SP (VC_N + SKW(15))     /* chunks of the skewed value codes */
#define VM_OFF (KC_N + VC_SP)      /* value scales, then minima */
#define KM_OFF (VM_OFF + 2 * VM_N) /* key scales, then minima of the tile's group */
#define STG_N (KM_OFF + 2 * KM_N)

typedef CLKV_STORAGE(Q_DTYPE) q_t;
typedef CLKV_STORAGE(RES_DTYPE) res_t;
typedef CLKV_STORAGE(META_DTYPE) meta_t;
#define LOAD_RES CLKV_LOAD(RES_DTYPE)

#define BF16_ONE2 0x3F803F80u
/* gather(x, y, sel): byte sel & 3 of x to byte 0 and byte (sel >> 8) - 4 of y to byte 2
 * (one prmt), so each 16-bit half holds one code byte of one word; the codes are then
 * masked in place (keys, f16 subnormals) or rotated and masked under bf16 1.0 (values). */
inline uint gather(uint x, uint y, uint sel) {
    uint d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(x), "r"(y), "r"(sel));
    return d;
}
/* (a & m) | o in one LOP3 (the compiler splits it in two when m and o are both
 * immediates) */
inline uint and_or(uint a, uint m, uint o) {
    uint d;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(m), "r"(o));
    return d;
}
/* value codes as bf16 1 + c 2^(p - 7): p = 2 / 4 (2-bit rows g / g + 8), 0 / 3 (4-bit) */
#define VCODE2_A(r) and_or((r), 0x000C000Cu, BF16_ONE2)
#define VCODE2_B(r) and_or((r), 0x00300030u, BF16_ONE2)
#define VCODE4(u) and_or((u), 0x00780078u, BF16_ONE2)

/* 2^e as a float, e clamped to the normal range */
inline float pow2i(int e) {
    return as_float((uint)(clamp(e, -126, 127) + 127) << 23);
}
/* unbiased exponent of x >= 0 (-127 for 0 and subnormals) */
inline int expo(float x) {
    return (int)(as_uint(x) >> 23) - 127;
}

/* f32 split for the column halves: part 0 the bf16 truncation, part 1 the rest */
inline float split_part(float y, int part) {
    const float hi = as_float(as_uint(y) & 0xffff0000u);
    return part ? y - hi : hi;
}

/* nonzero on every lane when p is nonzero on some lane of the warp */
inline int warp_any(int p) {
    int r;
    asm volatile("{\n\t.reg .pred p, q;\n\tsetp.ne.s32 p, %1, 0;\n\t"
                 "vote.sync.any.pred q, p, 0xffffffff;\n\tselp.s32 %0, 1, 0, q;\n\t}"
                 : "=r"(r)
                 : "r"(p));
    return r;
}

inline float shfl(float x, int m) {
    return clkv_shfl_xor(x, m);
}

/* Key row r of a tile (0..15) -> token of the tile; value row r of an m-tile -> channel */
#if KBITS == 2
#define KROW_TOK(r) ((r) < 8 ? 2 * (r) : 2 * ((r)-8) + 1)
#else
#define KROW_TOK(r) (r)
#endif
/* Value product rows: m-tile t lies in value group t / VGT; its rows g and g + 8 are the
 * channels VCH(t, g) and VCH(t, g) + 1. Lane group g so holds, per token and value group,
 * one run of LBITS code bits (LCH channels): NWT words per token instead of whole rows. */
#define VGT (GQ / 16)           /* m-tiles per value group */
#define LCH (GQ / 8)            /* channels of a value group per lane group */
#define LBITS (LCH * VBITS)     /* their code bits per token: 4 .. 64 */
#define NWG ((LBITS + 31) / 32) /* words of them */
#define WPG (GQ * VBITS / 32)   /* words of a value group per token */
#define NWT (DG * NWG)          /* words per token a lane reads */
#define VCH(t, g) (((t) / VGT) * GQ + (g)*LCH + 2 * ((t) % VGT))
#if VBITS == 2
#define VFA 32.0f /* 2^(7 - p): row g's codes at bits 2-3 of the bf16 operand */
#define VFB 8.0f  /* row g + 8's at bits 4-5 */
#else
#define VFA 128.0f /* bits 0-3 */
#define VFB 16.0f  /* bits 3-6 */
#endif

/* The copies of one tile (16-byte cp.async chunks): chunk i of a tile is key codes
 * (i < KC_N), value codes, value scales, value minima; in global memory each of the four is
 * contiguous per tile and the next tile's lies one fixed stride further. Lane l copies the
 * chunks l, l + 32, ... of every tile. A warp issues its tiles in order, so per such round
 * the plan keeps a source pointer at the next tile to issue (advanced by the round's
 * stride after each tile) and the chunk's byte offset in a stage; the stages are addressed
 * by 32-bit shared-window addresses computed once. (Computed from the tile index per
 * copy, as before, the issue took ~57 instructions per tile instead of ~40: the compiler
 * rebuilt the local-memory base from the CTA id and the thread id every iteration.) */
#define TILE_N (KC_N + VC_N + 2 * VM_N)
#define NRND ((TILE_N + 31) / 32)
#define STG_BYTES (16 * STG_N)
typedef struct copy_plan {
    __global const uchar *src[NRND];
    uint stride[NRND];
    uint dst[NRND]; /* byte offset in a stage */
} copy_plan;

inline void plan_copies(copy_plan *cp, int lane, long tile0, __global const uint *kcb,
                        __global const uint *vcb, __global const meta_t *vsb,
                        __global const meta_t *vmb) {
    UNROLL
    for (int r = 0; r < NRND; r++) {
        const int i = lane + 32 * r;
        __global const uchar *s = (__global const uchar *)kcb + 16 * i;
        uint n = KC_N;
        int d = i;
        if (i >= KC_N + VC_N + VM_N) {
            s = (__global const uchar *)vmb + 16 * (i - KC_N - VC_N - VM_N);
            n = VM_N;
            d = i - KC_N - VC_N + VM_OFF;
        } else if (i >= KC_N + VC_N) {
            s = (__global const uchar *)vsb + 16 * (i - KC_N - VC_N);
            n = VM_N;
            d = i - KC_N - VC_N + VM_OFF;
        } else if (i >= KC_N) {
            s = (__global const uchar *)vcb + 16 * (i - KC_N);
            n = VC_N;
            d = i + SKW((i - KC_N) / VW4);
        }
        cp->src[r] = s + tile0 * (16 * (long)n);
        cp->stride[r] = 16 * n;
        cp->dst[r] = 16u * (uint)d;
    }
}

/* Copy the plan's next tile, `tile`, into the stage at shared address st (and the key
 * metadata of its group when with_km), then advance the plan to the following tile. */
inline void issue_tile(uint st, int lane, copy_plan *cp, int tile, int with_km,
                       __global const meta_t *ksb, __global const meta_t *kmb) {
    UNROLL
    for (int r = 0; r < NRND; r++) {
        if (TILE_N % 32 == 0 || r < NRND - 1 || lane + 32 * r < TILE_N)
            clkv_cp_async16_sa(st + cp->dst[r], cp->src[r]);
        cp->src[r] += cp->stride[r];
    }
    if (with_km) {
        const long g = (long)tile * 16 / GQ * HEAD_DIM;
        __global const uchar *s0 = (__global const uchar *)(ksb + g);
        __global const uchar *s1 = (__global const uchar *)(kmb + g);
        for (int i = lane; i < 2 * KM_N; i += 32)
            clkv_cp_async16_sa(st + 16u * (uint)(KM_OFF + i),
                               i < KM_N ? s0 + 16 * i : s1 + 16 * (i - KM_N));
    }
}

/* The value words of token tok that a lane of word offset lw0 reads: vw[G * NWG + j] is
 * word j of its run in value group G. */
inline void load_vwords(uint *vw, __local const uint4 *st, int tok, int lw0) {
    __local const uint4 *row4 = st + KC_N + tok * VW4 + SKW(tok);
#if NWT == NW /* every word (2-bit, groups of 16): whole rows, a chunk when first used */
    (void)row4;
#elif NWG == 2
    __local const uint *row = (__local const uint *)row4;
    UNROLL
    for (int G = 0; G < DG; G++) {
        const uint2 x = *(__local const uint2 *)(row + G * WPG + lw0);
        vw[2 * G] = x.x, vw[2 * G + 1] = x.y;
    }
#else
    __local const uint *row = (__local const uint *)row4;
    UNROLL
    for (int G = 0; G < DG; G++)
        vw[G] = row[G * WPG + lw0];
#endif
}

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void attention_quant_mma_partial(
    __global const q_t *q, __global const uint *kc, __global const meta_t *ks,
    __global const meta_t *km, __global const uint *vc, __global const meta_t *vs,
    __global const meta_t *vm, __global const res_t *kr, __global const res_t *vr,
    __global const int *counts, __global float *part_acc, const quant_scalars P) {
    KARGS_UNPACK(QUANT)
    __local uint2 bsm[NWARP][8 * LDB / 4]; /* key operand B [8 columns][LDB] (bf16) */
    __local float psm[NWARP][16 * HP];     /* probabilities of the tile [token][head] */
    __local float fsm[NWARP][HP];          /* rescale factors of the tile per head */
#if DG % 4 == 0
    __local float4 vsm[NWARP][2][4 * DG]; /* value scales and minima [token][group] (f32) */
#endif
    __local float csm[NWARP][2][HP * DG];  /* value minimum and unit terms at the end */
    __local int qex[NWARP][HP];            /* exponent of max |q'| per head */
    __local float4 qsm4[HP][HEAD_DIM / 4]; /* q' of the work-group's heads */
    __local uint4 stg[NWARP][NST][STG_N];  /* tiles in flight */

    __local float(*qsm)[HEAD_DIM] = (__local float(*)[HEAD_DIM])qsm4;
    __global float *part_ml = part_acc + ml_off;
    const int lid = (int)get_local_id(0);
    const int lane = lid & 31, wid = lid >> 5;
    const int fg = lane >> 2, ft = lane & 3;
    const int split = (int)get_group_id(0) * NWARP + wid;
    const int kvh = (int)get_group_id(1) / nhg;
    const int hg = (int)get_group_id(1) % nhg;
    const int b = (int)get_group_id(2);
    const int nq = counts[b];
    const int len = nq + counts[B + b];
    /* rsplits > 0: splits [0, rsplits) walk the residual in chunks of rchunk, the others
     * the quantized tokens in chunks of `chunk` (see the file comment); rsplits = 0: chunks
     * of `chunk` over all tokens */
    const int qs = split - rsplits; /* quantized split, when >= 0 */
    const int start = qs < 0 ? nq + split * rchunk : qs * chunk;
    const int end = qs < 0 ? min(start + rchunk, len) : min(start + chunk, rsplits ? nq : len);
    const int h0 = kvh * G + hg * HP;
    const int ng = min(HP, G - hg * HP);

    for (int i = lid; i < HP * HEAD_DIM; i += WG_SIZE) {
        const int g = i / HEAD_DIM, d = i % HEAD_DIM;
        qsm[g][d] =
            g < ng ? CLKV_LOAD(Q_DTYPE)(q, q_off + (long)b * q_sb + (long)(h0 + g) * q_sh + d) *
                         scale_log2
                   : 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE); /* the only work-group barrier */

    const long bh = (long)b * Hkv + kvh;
    __global const uint *kcb = kc + bh * (CQ / KP) * HEAD_DIM;
    __global const meta_t *ksb = ks + bh * (CQ / GQ) * HEAD_DIM;
    __global const meta_t *kmb = km + bh * (CQ / GQ) * HEAD_DIM;
    __global const uint *vcb = vc + bh * CQ * NW;
    __global const meta_t *vsb = vs + bh * CQ * DG;
    __global const meta_t *vmb = vm + bh * CQ * DG;
    __global const res_t *krb = kr + bh * NR * HEAD_DIM;
    __global const res_t *vrb = vr + bh * NR * HEAD_DIM;
    __local uint2 *bs = bsm[wid];
    __local uint *bs32 = (__local uint *)bs;
    __local float *ps = psm[wid];
    __local float *fs = fsm[wid];
#if DG % 4 == 0
    __local float *vss = (__local float *)vsm[wid][0];
    __local float *vms = (__local float *)vsm[wid][1];
#endif

    /* lane roles: product column c is head c / 2, part c % 2 (high part, rest), so a
     * lane's C fragments hold both parts of head ft (columns 2 ft, 2 ft + 1) and its B
     * fragments column fg: head hb, part pb */
    const int hb = fg >> 1, pb = fg & 1;
    const int tok_a = KROW_TOK(fg), tok_b = KROW_TOK(fg + 8);
    /* code gathering constants (see gather): byte g / 2 of x and y, rotations */
    const uint gsel = (uint)(fg >> 1) | (uint)((fg >> 1) + 4) << 8;
    const uint odd = (uint)(fg & 1);
    /* key codes: the lane's code of row g (g + 8) sits at bit kpa (kpb) of each gathered
     * half; masked alone it is the f16 subnormal c 2^(kp - 24) */
    const int kpa = 4 * (int)odd, kpb = KBITS == 2 ? kpa + 2 : kpa;
    const uint kcm_a = ((KBITS == 2 ? 3u : 15u) << kpa) * 0x10001u;
    const uint kcm_b = KBITS == 2 ? kcm_a << 2 : kcm_a;
    /* value codes: the lane's run of each group starts at bit lbo of word lw0 (+ the
     * group's words); the gather selector of its first byte; 2-bit codes at a nibble's
     * bits 0-3 are rotated left by 2, at bits 4-7 right by 2 */
    const int lbo = (fg * LBITS) % 32, lw0 = (fg * LBITS) / 32;
    const uint vsel0 = (uint)(lbo / 8) | (uint)(lbo / 8 + 4) << 8;
    const uint vrot2 = (lbo % 8) ? 30u : 2u;

    /* exponent of max |q'| per head (scales the key operand into the f16 range) */
    UNROLL
    for (int h = 0; h < HP; h++) {
        float mx = 0.0f;
        UNROLL
        for (int j = 0; j < CPL; j++)
            mx = fmax(mx, fabs(qsm[h][lane * CPL + j]));
        UNROLL
        for (int o = 1; o < 32; o <<= 1)
            mx = fmax(mx, shfl(mx, o));
        if (lane == 0)
            qex[wid][h] = expo(mx);
    }

    /* running maxima start at M_INIT, finite, so exp2(M_INIT - m) is 0 with no test */
    float mh = M_INIT, lh = 0.0f; /* running maximum and sum of head ft */
    float acc[NMT][4], cmv[DG], cms[DG];
    UNROLL
    for (int t = 0; t < NMT; t++)
        UNROLL
    for (int i = 0; i < 4; i++)
        acc[t][i] = 0.0f;
    UNROLL
    for (int g = 0; g < DG; g++)
        cmv[g] = cms[g] = 0.0f;
    int kgrp = -1;                /* key group whose operand is in bs */
    float kz = 0.0f;              /* its logit constant of head ft */
    float kfa = 0.0f, kfb = 0.0f; /* and the product scales of rows g, g + 8 */

    const int ntiles = end > start ? (end - start + 15) / 16 : 0;
    copy_plan cp;
    plan_copies(&cp, lane, start / 16, kcb, vcb, vsb, vmb);
    /* shared-window address of this warp's stage 0, passed through a shuffle so that the
     * compiler holds it rather than rebuilding it from the CTA and thread ids in the loop
     * (the copy issue of the SASS no longer reads them; not timed without the shuffle) */
    const uint stg_sa = as_uint(shfl(as_float((uint)(size_t)stg[wid][0]), 0));
    UNROLL
    for (int i = 0; i < NST - 1; i++) {
        const int bi = start + 16 * i;
        if (i < ntiles && bi < nq)
            issue_tile(stg_sa + (uint)i * STG_BYTES, lane, &cp, bi / 16, i == 0 || bi % GQ == 0,
                       ksb, kmb);
        clkv_cp_async_commit(); /* empty groups keep the count uniform */
    }
    uint issue_off = (NST - 1) * STG_BYTES; /* stage of tile it + NST - 1 */
    for (int it = 0; it < ntiles; it++) {
        const int base = start + 16 * it;
        {
            const int ia = it + NST - 1, ba = start + 16 * ia;
            if (ia < ntiles && ba < nq)
                issue_tile(stg_sa + issue_off, lane, &cp, ba / 16, ia == 0 || ba % GQ == 0, ksb,
                           kmb);
            clkv_cp_async_commit();
            issue_off = issue_off == (NST - 1) * STG_BYTES ? 0u : issue_off + STG_BYTES;
        }
        CLKV_CP_ASYNC_WAIT(NST - 1); /* this lane's copies of tile it have landed */
        clkv_warp_sync();            /* and every lane's */
        __local const uint4 *st = stg[wid][it % NST];
        const int quant = base < nq;
        uint vw[4][NWT];            /* the lane's value words of tokens tkk[k] */
        float za = 0.0f, zb = 0.0f; /* logits of tokens tok_a, tok_b, head ft */
        if (quant) {
#if NWT <= 2
            UNROLL
            for (int k = 0; k < 4; k++)
                load_vwords(vw[k], st, 2 * ft + (k & 1) + 8 * (k >> 1), lw0);
#endif
#if DG % 4 == 0
            /* ---- value metadata as f32, for 16-byte reads of 4 groups ---- */
            __local const meta_t *vmr = (__local const meta_t *)(st + VM_OFF);
            for (int e = lane; e < 16 * DG; e += 32) {
                vss[e] = LOAD_META_L(vmr, e);
                vms[e] = LOAD_META_L(vmr, 16 * DG + e);
            }
#endif
            /* ---- the key operand of this group and its constants ----
             * B[c][head] = q'_c s_c 2^-sg (f16 high part, f16 rest), sg per head from the
             * exponents of max |q'| and of the group's max s so that |B| < 2^15; the logit
             * constant sum_c q'_c m_c is summed in f32 over the warp. */
            const int grp = base / GQ;
            if (grp != kgrp) {
                kgrp = grp;
                __local const meta_t *kmr = (__local const meta_t *)(st + KM_OFF);
                float S[CPL], M[CPL], smax = 0.0f;
                UNROLL
                for (int j = 0; j < CPL; j++) {
                    S[j] = LOAD_META_L(kmr, lane * CPL + j);
                    M[j] = LOAD_META_L(kmr, HEAD_DIM + lane * CPL + j);
                    smax = fmax(smax, S[j]);
                }
                UNROLL
                for (int o = 1; o < 32; o <<= 1)
                    smax = fmax(smax, shfl(smax, o));
                const int es = expo(smax);
                float cz[HP];
                UNROLL
                for (int h = 0; h < HP; h++) {
                    const float inv = pow2i(-clamp(qex[wid][h] + es - 13, -100, 100));
                    /* q' of the lane's channels lane * CPL + j (re-read: fewer live registers) */
                    float qk[CPL];
#if CPL >= 4
                    UNROLL
                    for (int j = 0; j < CPL; j += 4) {
                        const float4 q4 = qsm4[h][lane * (CPL / 4) + j / 4];
                        qk[j] = q4.x, qk[j + 1] = q4.y, qk[j + 2] = q4.z, qk[j + 3] = q4.w;
                    }
#else
                    const float2 q2 = ((__local const float2 *)qsm4[h])[lane];
                    qk[0] = q2.x, qk[1] = q2.y;
#endif
                    cz[h] = 0.0f;
                    UNROLL
                    for (int j = 0; j < CPL; j += 2) {
                        uint hi, lo;
                        clkv_split16x2_1(qk[j] * S[j] * inv, qk[j + 1] * S[j + 1] * inv, &hi, &lo);
                        const int e = lane * CPL + j;
                        bs32[(2 * h * LDB + e) / 2] = hi;
                        bs32[((2 * h + 1) * LDB + e) / 2] = lo;
                        cz[h] = fma(qk[j], M[j], cz[h]);
                        cz[h] = fma(qk[j + 1], M[j + 1], cz[h]);
                    }
                }
                /* head ft's constant summed over the warp: a reduce-scatter over the 4 lanes
                 * of a row group (the pair of heads, then the head), then a sum over the 8
                 * groups (7 shuffles instead of 20) */
                const int hp = ft & 2;
                const float c0 = (hp ? cz[2] : cz[0]) + shfl(hp ? cz[0] : cz[2], 2);
                const float c1 = (hp ? cz[3] : cz[1]) + shfl(hp ? cz[1] : cz[3], 2);
                kz = ((ft & 1) ? c1 : c0) + shfl((ft & 1) ? c0 : c1, 1);
                UNROLL
                for (int o = 4; o < 32; o <<= 1)
                    kz += shfl(kz, o);
                const int sgh = clamp(qex[wid][ft] + es - 13, -100, 100);
                kfa = pow2i(24 - kpa + sgh);
                kfb = pow2i(24 - kpb + sgh);
                clkv_warp_sync();
            }

            /* ---- logits: 16 tokens x 8 columns ---- */
            /* two accumulators (even / odd k-steps) halve the dependent mma chain */
            float d[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
            __local const uint2 *bcol = bs + (fg * LDB + 4 * ft) / 4;
            UNROLL
            for (int s = 0; s < NKS; s++) {
                uint a0, a1, a2, a3;
                const uint4 w0 = st[4 * s + ft];
#if KBITS == 2
                const uint u01 = gather(w0.x, w0.y, gsel);
                const uint u23 = gather(w0.z, w0.w, gsel);
                a0 = u01 & kcm_a, a1 = u01 & kcm_b;
                a2 = u23 & kcm_a, a3 = u23 & kcm_b;
#else
                const uint4 w1 = st[HEAD_DIM / 4 + 4 * s + ft];
                a0 = gather(w0.x, w0.y, gsel) & kcm_a;
                a1 = gather(w1.x, w1.y, gsel) & kcm_a;
                a2 = gather(w0.z, w0.w, gsel) & kcm_a;
                a3 = gather(w1.z, w1.w, gsel) & kcm_a;
#endif
                const uint2 bf = bcol[4 * s];
                clkv_mma_f16(d[s & 1], a0, a1, a2, a3, bf.x, bf.y);
            }
            za = fma((d[0][0] + d[1][0]) + (d[0][1] + d[1][1]), kfa, kz);
            zb = fma((d[0][2] + d[1][2]) + (d[0][3] + d[1][3]), kfb, kz);
        } else {
            /* ---- residual logits on the CUDA cores: lanes ft and ft ^ 2 (same tokens) sum
             * one half of the channels each for both their heads and swap the other's ---- */
            {
                const long ra = min(base + tok_a, end - 1) - nq;
                const long rb = min(base + tok_b, end - 1) - nq;
                const int c0 = (ft >> 1) * (HEAD_DIM / 2);
                float oa = 0.0f, ob = 0.0f; /* head ft ^ 2, for lane ft ^ 2 */
                /* unrolled by 4: loads in flight (by 16, and 2 for the values, the kernel took
                 * 128 registers instead of 116 and 5-19 % more time, H100) */
                UNROLL4
                for (int c = c0; c < c0 + HEAD_DIM / 2; c++) {
                    const float xa = LOAD_RES(krb, ra * HEAD_DIM + c);
                    const float xb = LOAD_RES(krb, rb * HEAD_DIM + c);
                    const float q0 = qsm[ft][c], q1 = qsm[ft ^ 2][c];
                    za = fma(q0, xa, za);
                    oa = fma(q1, xa, oa);
                    zb = fma(q0, xb, zb);
                    ob = fma(q1, xb, ob);
                }
                za += shfl(oa, 2);
                zb += shfl(ob, 2);
            }
        }

        /* ---- online softmax on the fragments ---- */
        /* Lazy maxima: the reference m of a head moves only when a logit of the tile
         * exceeds it by more than LAZY_M (log2 units); otherwise the tile's
         * probabilities exp2(z - m) stay below 2^LAZY_M and the accumulators keep their
         * scale (the state (m, l, acc) means acc * 2^m whatever m is). Once the maxima
         * settle, a tile costs one vote instead of the shuffle reductions, the factor
         * exchange and the rescale. */
        if (base + 16 > end) { /* the split's last tile, partly past its end (uniform) */
            if (base + tok_a >= end)
                za = -INFINITY;
            if (base + tok_b >= end)
                zb = -INFINITY;
        }
        const int grow = warp_any(fmax(za, zb) > mh + LAZY_M);
        float f = 1.0f;
        if (grow) {
            float mx = fmax(za, zb);
            UNROLL
            for (int o = 4; o < 32; o <<= 1)
                mx = fmax(mx, shfl(mx, o));
            mx = fmax(mx, mh);
            f = clkv_exp2_ftz(mh - mx);
            mh = mx;
            if (fg == 0)
                fs[ft] = f;
        }
        const float p_a = clkv_exp2_ftz(za - mh), p_b = clkv_exp2_ftz(zb - mh);
        lh = fma(lh, f, p_a + p_b);
        ps[tok_a * HP + ft] = p_a;
        ps[tok_b * HP + ft] = p_b;
        clkv_warp_sync();

        /* ---- values ---- */
        if (grow) { /* rescale the accumulators to the moved maxima */
            const float fb = fs[hb];
            UNROLL
            for (int t = 0; t < NMT; t++)
                UNROLL
            for (int i = 0; i < 4; i++)
                acc[t][i] *= f;
            UNROLL
            for (int g = 0; g < DG; g++) {
                cmv[g] *= fb;
                cms[g] *= fb;
            }
        }
        if (quant) {
            float pk[4];
            int tkk[4];
            UNROLL
            for (int k = 0; k < 4; k++) {
                tkk[k] = 2 * ft + (k & 1) + 8 * (k >> 1);
                pk[k] = ps[tkk[k] * HP + hb];
            }
#if NWT > 2
            UNROLL
            for (int k = 0; k < 4; k++)
                load_vwords(vw[k], st, tkk[k], lw0);
#endif
            uint vb0 = 0u, vb1 = 0u;
            float vS[4][4], vM[4][4];
            UNROLL
            for (int t = 0; t < NMT; t++) {
                if ((16 * t) % GQ == 0) { /* a new value group: B = p s (hi/lo), sums */
                    const int grp = (16 * t) / GQ;
#if DG % 4 == 0
                    if (grp % 4 == 0) { /* s, m of the lane's tokens, groups grp .. +3 */
                        UNROLL
                        for (int k = 0; k < 4; k++) {
                            const float4 a = vsm[wid][0][tkk[k] * (DG / 4) + grp / 4];
                            const float4 c = vsm[wid][1][tkk[k] * (DG / 4) + grp / 4];
                            vS[k][0] = a.x, vS[k][1] = a.y, vS[k][2] = a.z, vS[k][3] = a.w;
                            vM[k][0] = c.x, vM[k][1] = c.y, vM[k][2] = c.z, vM[k][3] = c.w;
                        }
                    }
#else
                    /* fewer than 4 groups: straight from the stage */
                    __local const meta_t *vmr = (__local const meta_t *)(st + VM_OFF);
                    UNROLL
                    for (int k = 0; k < 4; k++) {
                        vS[k][grp % 4] = LOAD_META_L(vmr, tkk[k] * DG + grp);
                        vM[k][grp % 4] = LOAD_META_L(vmr, 16 * DG + tkk[k] * DG + grp);
                    }
#endif
                    float r[4];
                    UNROLL
                    for (int k = 0; k < 4; k++) {
                        r[k] = split_part(pk[k] * vS[k][grp % 4], pb);
                        cmv[grp] = fma(pk[k], vM[k][grp % 4], cmv[grp]);
                    }
                    vb0 = clkv_bf16x2_rn(r[0], r[1]);
                    vb1 = clkv_bf16x2_rn(r[2], r[3]);
                    /* the unit part of x adds the operand as it is held */
                    cms[grp] += (as_float(vb0 << 16) + as_float(vb0 & 0xffff0000u)) +
                                (as_float(vb1 << 16) + as_float(vb1 & 0xffff0000u));
                }
                /* codes of rows g, g + 8 (channels VCH(t, g) + 0 / 1) of tokens tkk[k] */
                const int tt = t % VGT;
                const int wi = (t / VGT) * NWG + (LBITS >= 32 ? 2 * tt * VBITS / 32 : 0);
                const uint sel = LBITS >= 32 ? (uint)((2 * tt * VBITS) % 32 / 8) * 0x0101u + 0x0400u
                                             : vsel0 + (uint)(2 * tt * VBITS / 8) * 0x0101u;
#if NWT == NW
                if (t % 4 == 0) {
                    UNROLL
                    for (int k = 0; k < 4; k++) {
                        const uint4 x = st[KC_N + tkk[k] * VW4 + SKW(tkk[k]) + t / 4];
                        vw[k][t] = x.x, vw[k][t + 1] = x.y, vw[k][t + 2] = x.z, vw[k][t + 3] = x.w;
                    }
                }
#endif
                const uint u01 = gather(vw[0][wi], vw[1][wi], sel);
                const uint u23 = gather(vw[2][wi], vw[3][wi], sel);
                uint a0, a1, a2, a3;
#if VBITS == 2
                const uint rot = LBITS >= 8 ? ((4 * tt) % 8 ? 30u : 2u) : vrot2;
                const uint r01 = rotate(u01, rot), r23 = rotate(u23, rot);
                a0 = VCODE2_A(r01), a1 = VCODE2_B(r01);
                a2 = VCODE2_A(r23), a3 = VCODE2_B(r23);
#else
                a0 = and_or(u01, 0x000F000Fu, BF16_ONE2), a1 = VCODE4(u01 >> 1);
                a2 = and_or(u23, 0x000F000Fu, BF16_ONE2), a3 = VCODE4(u23 >> 1);
#endif
                clkv_mma_bf16(acc[t], a0, a1, a2, a3, vb0, vb1);
            }
        } else {
            /* residual values on the CUDA cores: lanes ft and ft ^ 2 (same channels) take
             * every other token for both their heads. The rest-part columns (folded into the
             * high part first) collect the other head's sums, which the two lanes then swap:
             * no registers beyond the accumulators. */
            const int nt = min(16, end - base);
            UNROLL
            for (int t = 0; t < NMT; t++) {
                acc[t][0] += acc[t][1];
                acc[t][2] += acc[t][3];
                acc[t][1] = acc[t][3] = 0.0f;
            }
            for (int k = ft >> 1; k < nt; k += 2) {
                const float q0 = ps[k * HP + ft], q1 = ps[k * HP + (ft ^ 2)];
                const float q0a = q0 * (1.0f / VFA), q1a = q1 * (1.0f / VFA);
                const float q0b = q0 * (1.0f / VFB), q1b = q1 * (1.0f / VFB);
                __global const res_t *row = vrb + (long)(base + k - nq) * HEAD_DIM;
                UNROLL
                for (int t = 0; t < NMT; t++) {
                    const float xa = LOAD_RES(row, VCH(t, fg));
                    const float xb = LOAD_RES(row, VCH(t, fg) + 1);
                    acc[t][0] = fma(q0a, xa, acc[t][0]);
                    acc[t][1] = fma(q1a, xa, acc[t][1]);
                    acc[t][2] = fma(q0b, xb, acc[t][2]);
                    acc[t][3] = fma(q1b, xb, acc[t][3]);
                }
            }
            UNROLL
            for (int t = 0; t < NMT; t++) {
                acc[t][0] += shfl(acc[t][1], 2);
                acc[t][2] += shfl(acc[t][3], 2);
                acc[t][1] = acc[t][3] = 0.0f;
            }
        }
        clkv_warp_sync(); /* ps, fs, the value metadata and the stage are refilled next */
    }
    CLKV_CP_ASYNC_WAIT(0);

    /* ---- the split's partial state, merged over the work-group's warps ---- */
    UNROLL
    for (int o = 4; o < 32; o <<= 1)
        lh += shfl(lh, o);
    UNROLL
    for (int g = 0; g < DG; g++) {
        float c = cmv[g], u = cms[g];
        c += shfl(c, 1);
        c += shfl(c, 2);
        u += shfl(u, 1);
        u += shfl(u, 2);
        u += shfl(u, 4); /* both operand parts */
        if (ft == 0 && pb == 0) {
            csm[wid][0][hb * DG + g] = c;
            csm[wid][1][hb * DG + g] = u;
        }
    }
    clkv_warp_sync(); /* csm written; every lane is past its last read of bs and ps */
    /* the warp's state into its own key-operand and probability space: xs[head][channel]
     * (HP * HEAD_DIM floats <= 8 * LDB 16-bit entries), (m, l) per head in ps */
    __local float *xs = (__local float *)bs;
    {
        const int h = ft;
        UNROLL
        for (int t = 0; t < NMT; t++) {
            const int ca = VCH(t, fg), cb = ca + 1;
            const int ga = h * DG + ca / GQ, gb = h * DG + cb / GQ;
            xs[h * HEAD_DIM + ca] =
                (acc[t][0] + acc[t][1] - csm[wid][1][ga]) * VFA + csm[wid][0][ga];
            xs[h * HEAD_DIM + cb] =
                (acc[t][2] + acc[t][3] - csm[wid][1][gb]) * VFB + csm[wid][0][gb];
        }
        if (fg == 0) {
            ps[2 * h] = mh == M_INIT ? -INFINITY : mh;
            ps[2 * h + 1] = lh;
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    /* (m, l, acc) of the NWARP warps -> one partial state of the work-group */
    const int wsplit = (int)get_group_id(0);
    const int nws = num_splits / NWARP;
    for (int i = lid; i < HP * HEAD_DIM; i += WG_SIZE) {
        const int h = i / HEAD_DIM, c = i % HEAD_DIM;
        if (h >= ng)
            continue;
        float mw[NWARP], mx = -INFINITY;
        UNROLL
        for (int w = 0; w < NWARP; w++) {
            mw[w] = psm[w][2 * h];
            mx = fmax(mx, mw[w]);
        }
        float x = 0.0f, l = 0.0f;
        UNROLL
        for (int w = 0; w < NWARP; w++) {
            const float f = mw[w] == -INFINITY ? 0.0f : exp2(mw[w] - mx);
            x = fma(f, ((__local const float *)bsm[w])[h * HEAD_DIM + c], x);
            l = fma(f, psm[w][2 * h + 1], l);
        }
        const long idx = ((long)b * Hq + h0 + h) * nws + wsplit;
        part_acc[idx * HEAD_DIM + c] = x;
        if (c == 0) {
            part_ml[idx * 2] = mx;
            part_ml[idx * 2 + 1] = l;
        }
    }
}
