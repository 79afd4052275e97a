/* Fused decode attention over a quantized KV cache on the tensor cores (NVIDIA): the
 * variant of attention_quant_partial (cl_kernels/attention_quant.cl) that
 * host/attention_quant.c picks where CLKV_NVIDIA_PTX is defined, D is 64 or 128, both code
 * widths are 2 or 4 bits and o is 16-bit (and where it measured faster; see use_mma there).
 * Same arguments as that kernel, except that every warp is one split of the token range:
 * work-group x holds the splits 4x .. 4x + 3 of one (sequence, KV head, head group) and
 * merges their states in local memory into partial state x of num_splits / 4 (the layout
 * attention_decode_merge reads).
 *
 * Build options: Q_DTYPE, RES_DTYPE, META_DTYPE, HEAD_DIM, KBITS, VBITS, GQ (as in
 * attention_quant.cl); NST (default 4): tiles in flight per warp (cp.async stages in local
 * memory: key and value codes, value metadata, and the key metadata of a tile that starts
 * a key group).
 *
 * A warp walks its token range in tiles of 16 tokens (a tile lies in one key group and is
 * all quantized or all residual: n_quant is a multiple of GQ >= 16 and splits start at
 * multiples of 16). Codes become mma operands directly: code c of b bits placed in the top
 * mantissa bits of bf16 1.0 reads x = 1 + c / 2^b (exact), and with S = 2^b s the
 * dequantised value c s + m is x S + (m - S) (the factoring of attention_quant.cl).
 *   Keys: S^T (16 tokens x 8 columns) = X (tokens x channels) * B, B[c][col] = q'_c S_c of
 *     the column's head, q' = q * scale * log2(e). B depends on the key group, so a warp
 *     forms it in local memory whenever its tile enters a new group, with the group's
 *     logit constant sum_c q'_c m_c - sum_c r_c (r_c = the value of q'_c S_c the bf16
 *     hi/lo operand holds) summed in f32 over the warp and added to the product: the
 *     product's sum_c 1 * r_c cancels exactly, so only the (c / 2^b) r_c terms carry the
 *     operand's rounding.
 *   Values: O^T (16 channels x 8 columns) += X^T (channels x tokens) * B,
 *     B[t][col] = p_t S_t,group of the column's head; the minimum term sum_t p_t (m - S)_t
 *     is summed per (group, head) on the CUDA cores.
 *   The 8 columns of every product are the 4 query heads of the work-group (G <= 4 per
 *     head group) as a bf16 high part (columns 0-3, the f32 value truncated to bf16) and
 *     the bf16-rounded rest (columns 4-7): a product keeps ~16 significant bits of q'S and
 *     p S (relative error <= 2^-16 per term; within the tolerance of 16-bit outputs, not of
 *     f32 outputs, which stay on the CUDA-core kernel). The two column halves are added
 *     after each product.
 * Row orders inside a tile (free for mma, chosen so one code word serves a lane's rows):
 *   key rows g, g + 8 = tokens 2g, 2g + 1 (2-bit: codes 2g, 2g + 1 of a word) or g, g + 8
 *   (4-bit: code g of two word rows); value rows g, g + 8 = channels 2g, 2g + 1 (2-bit) or
 *   g, g + 8 (4-bit) of a 16-channel m-tile. Key k-steps: lane t owns channels 4t .. 4t + 3
 *   of a 16-channel step (one 16-byte load of code words); value k = token of the tile.
 * Residual tiles (16-bit or f32 tokens, fewer than n_r per sequence) are computed on the
 * CUDA cores into the same fragments. The online softmax works on the fragments (a lane
 * holds two tokens of two heads; maxima by shuffles over the 8 row lanes, only when a
 * logit exceeds the running maximum by more than LAZY_M).
 *
 * Cost (earlier measurement, H200, 2-bit, G = 4, groups of 16): about 700 warp
 * instructions per 16-token tile, of which ~45 % form the bf16 hi/lo operands (q'S per
 * key group, p S per token and value group) and ~25 % turn codes into operands. ptxas
 * (sm_90a, D 128, f16 metadata, NST 4): 118 registers at 2-bit groups of 16, 96 at 2-bit
 * groups of 128 (5 work-groups per SM), 168 at 4-bit groups of 32. The kernel is issue-
 * and latency-bound at 20-50 % of the read bandwidth (H100), not bandwidth-bound. A
 * variant stepping two tiles per iteration (two independent key products, one softmax
 * per 32 tokens) measured 2-10 % slower on the H100 and was dropped. */

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
    (HEAD_DIM + 16)   /* 16-bit entries per column of the key operand (pad: 8-byte                 \
                       * fragment reads without bank conflicts) */
#define KW4 (16 / KP) /* key code word rows per tile (1 or 2) */
#define VW4 (NW / 4)  /* uint4 of value words per token */
#define UNROLL _Pragma("unroll")
#define LAZY_M 8.0f /* slack of the lazy running maxima (log2 units) */

#if (HEAD_DIM != 64 && HEAD_DIM != 128) || (KBITS != 2 && KBITS != 4) ||                           \
    (VBITS != 2 && VBITS != 4) || !defined(CLKV_NVIDIA_PTX) || GQ < 16
#error "attention_quant_mma: D 64/128, 2- or 4-bit codes, NVIDIA PTX"
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
#define STG_N (KC_N + VC_N + 2 * VM_N + 2 * KM_N)

typedef CLKV_STORAGE(Q_DTYPE) q_t;
typedef CLKV_STORAGE(RES_DTYPE) res_t;
typedef CLKV_STORAGE(META_DTYPE) meta_t;
#define LOAD_META CLKV_LOAD(META_DTYPE)
#define LOAD_RES CLKV_LOAD(RES_DTYPE)

#define BF16_ONE2 0x3F803F80u
/* A lane's codes as bf16 mma operands. A lane reads code index 2g, 2g + 1 (2-bit) or g
 * (4-bit) of a word: bits 4g .. 4g + 3, nibble g % 2 of byte g / 2. gather(x, y) moves that
 * byte of x to byte 0 and of y to byte 2 (one prmt with the lane's selector); a rotation by
 * a lane constant then puts the wanted code at the top mantissa bits of each 16-bit half
 * (bits 5-6 for 2 bits, 3-6 for 4 bits; a rotation right by one is a left rotation by 31)
 * and the mask keeps it under bf16 1.0: x = 1 + c / 2^b. */
inline uint gather(uint x, uint y, uint sel) {
    uint d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(x), "r"(y), "r"(sel));
    return d;
}
#define CODES2(u, rot) ((rotate((u), (rot)) & 0x00600060u) | BF16_ONE2)
#define CODES4(u, rot) ((rotate((u), (rot)) & 0x00780078u) | BF16_ONE2)

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
#if VBITS == 2
#define VROW_CH(r) ((r) < 8 ? 2 * (r) : 2 * ((r)-8) + 1)
#else
#define VROW_CH(r) (r)
#endif

/* Copy the quantized data of the tile at token `base` into stage st (the key metadata
 * only when with_km): 16-byte cp.async chunks, lane-strided. */
inline void issue_tile(__local uint4 *st, int lane, int base, int with_km, __global const uint *kcb,
                       __global const meta_t *ksb, __global const meta_t *kmb,
                       __global const uint *vcb, __global const meta_t *vsb,
                       __global const meta_t *vmb) {
    __global const uchar *src = (__global const uchar *)(kcb + (long)(base / KP) * HEAD_DIM);
    for (int i = lane; i < KC_N; i += 32)
        clkv_cp_async16(st + i, src + 16 * i);
    src = (__global const uchar *)(vcb + (long)base * NW);
    for (int i = lane; i < VC_N; i += 32)
        clkv_cp_async16(st + KC_N + i, src + 16 * i);
    __global const uchar *s0 = (__global const uchar *)(vsb + (long)base * DG);
    __global const uchar *s1 = (__global const uchar *)(vmb + (long)base * DG);
    for (int i = lane; i < 2 * VM_N; i += 32)
        clkv_cp_async16(st + KC_N + VC_N + i, i < VM_N ? s0 + 16 * i : s1 + 16 * (i - VM_N));
    if (with_km) {
        s0 = (__global const uchar *)(ksb + (long)(base / GQ) * HEAD_DIM);
        s1 = (__global const uchar *)(kmb + (long)(base / GQ) * HEAD_DIM);
        for (int i = lane; i < 2 * KM_N; i += 32)
            clkv_cp_async16(st + KC_N + VC_N + 2 * VM_N + i,
                            i < KM_N ? s0 + 16 * i : s1 + 16 * (i - KM_N));
    }
}

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void attention_quant_mma_partial(
    __global const q_t *q, long q_off, long q_sb, long q_sh, __global const uint *kc,
    __global const meta_t *ks, __global const meta_t *km, __global const uint *vc,
    __global const meta_t *vs, __global const meta_t *vm, __global const res_t *kr,
    __global const res_t *vr, __global const int *counts, int B, int Hkv, long CQ, int NR, int Hq,
    int G, int nhg, int chunk, int num_splits, float scale_log2, __global float *part_acc,
    long ml_off) {
    __local uint2 bsm[NWARP][8 * LDB / 4]; /* key operand B [8 columns][LDB] (bf16) */
    __local float psm[NWARP][16 * HP];     /* probabilities of the tile [token][head] */
    __local float fsm[NWARP][HP];          /* rescale factors of the tile per head */
    __local float4 vsm[NWARP][2][4 * DG];  /* value S and m - S [token][group] */
    __local float csm[NWARP][HP * DG];     /* minimum terms at the end */
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
    const int start = split * chunk;
    const int end = min(start + chunk, len);
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
    __local float *vss = (__local float *)vsm[wid][0];
    __local float *vms = (__local float *)vsm[wid][1];

    /* lane roles: C fragments hold heads ha, ha + 1 (column part ft / 2); B fragments
     * column fg = head fg % 4, part fg / 4 */
    const int ha = 2 * (ft & 1);
    const int hb = fg & 3, pb = fg >> 2;
    const int tok_a = KROW_TOK(fg), tok_b = KROW_TOK(fg + 8);
    /* code gathering constants (see gather): byte g / 2 of x and y, rotations */
    const uint gsel = (uint)(fg >> 1) | (uint)((fg >> 1) + 4) << 8;
    const uint odd = (uint)(fg & 1);
    const uint rot_a = odd ? 1u : 5u, rot_b = odd ? 31u : 3u; /* 2-bit codes 2g, 2g + 1 */
    const uint rot_4 = odd ? 31u : 3u;                        /* 4-bit code g */

    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    float acc[NMT][4], cmv[DG];
    UNROLL
    for (int t = 0; t < NMT; t++)
        UNROLL
    for (int i = 0; i < 4; i++)
        acc[t][i] = 0.0f;
    UNROLL
    for (int g = 0; g < DG; g++)
        cmv[g] = 0.0f;
    int kgrp = -1;                /* key group whose operand is in bs */
    float kc0 = 0.0f, kc1 = 0.0f; /* its logit constants of heads ha, ha + 1 */

    const int ntiles = end > start ? (end - start + 15) / 16 : 0;
    UNROLL
    for (int i = 0; i < NST - 1; i++) {
        const int bi = start + 16 * i;
        if (i < ntiles && bi < nq)
            issue_tile(stg[wid][i], lane, bi, i == 0 || bi % GQ == 0, kcb, ksb, kmb, vcb, vsb, vmb);
        clkv_cp_async_commit(); /* empty groups keep the count uniform */
    }
    for (int it = 0; it < ntiles; it++) {
        const int base = start + 16 * it;
        {
            const int ia = it + NST - 1, ba = start + 16 * ia;
            if (ia < ntiles && ba < nq)
                issue_tile(stg[wid][ia % NST], lane, ba, ia == 0 || ba % GQ == 0, kcb, ksb, kmb,
                           vcb, vsb, vmb);
            clkv_cp_async_commit();
        }
        CLKV_CP_ASYNC_WAIT(NST - 1); /* this lane's copies of tile it have landed */
        clkv_warp_sync();            /* and every lane's */
        __local const uint4 *st = stg[wid][it % NST];
        const int quant = base < nq;
        float z[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (quant) {
            /* ---- value metadata as f32 S and m - S ---- */
            __local const meta_t *vmr = (__local const meta_t *)(st + KC_N + VC_N);
            for (int e = lane; e < 16 * DG; e += 32) {
                const float S = LOAD_META_L(vmr, e) * (float)(1 << VBITS);
                vss[e] = S;
                vms[e] = LOAD_META_L(vmr, 16 * DG + e) - S;
            }
            /* ---- the key operand of this group (q' S hi/lo) and its constant ----
             * The constant sum_c q'_c m_c - sum_c r_c, with r_c = hi + lo the value of q'_c S_c
             * the operand holds, is summed in f32 over the warp: with the rows' 1 in
             * x = 1 + c / 2^b it cancels the operand's own rounding, so a logit carries the
             * hi/lo error only on its (c / 2^b) q'S terms. */
            const int grp = base / GQ;
            if (grp != kgrp) {
                kgrp = grp;
                __local const meta_t *kmr = (__local const meta_t *)(st + KC_N + VC_N + 2 * VM_N);
                float cz[HP];
                UNROLL
                for (int h = 0; h < HP; h++)
                    cz[h] = 0.0f;
                float S[CPL], M[CPL];
                UNROLL
                for (int j = 0; j < CPL; j++) {
                    S[j] = LOAD_META_L(kmr, lane * CPL + j) * (float)(1 << KBITS);
                    M[j] = LOAD_META_L(kmr, HEAD_DIM + lane * CPL + j);
                }
                UNROLL
                for (int h = 0; h < HP; h++) {
                    /* q' of the lane's channels lane * CPL + j (re-read: fewer live registers) */
                    float qk[CPL];
#if CPL == 4
                    const float4 q4 = qsm4[h][lane];
                    qk[0] = q4.x, qk[1] = q4.y, qk[2] = q4.z, qk[3] = q4.w;
#else
                    const float2 q2 = ((__local const float2 *)qsm4[h])[lane];
                    qk[0] = q2.x, qk[1] = q2.y;
#endif
                    UNROLL
                    for (int j = 0; j < CPL; j += 2) {
                        const float y0 = qk[j] * S[j], y1 = qk[j + 1] * S[j + 1];
                        const float h0 = split_part(y0, 0), h1 = split_part(y1, 0);
                        const uint lo = clkv_bf16x2_rn(y0 - h0, y1 - h1);
                        const int e = lane * CPL + j;
                        bs32[(h * LDB + e) / 2] = clkv_bf16x2_rn(h0, h1); /* exact */
                        bs32[((h + 4) * LDB + e) / 2] = lo;
                        cz[h] = fma(qk[j], M[j], cz[h]) - (h0 + as_float(lo << 16));
                        cz[h] = fma(qk[j + 1], M[j + 1], cz[h]) - (h1 + as_float(lo & 0xffff0000u));
                    }
                }
                UNROLL
                for (int o = 1; o < 32; o <<= 1)
                    UNROLL
                for (int h = 0; h < HP; h++)
                    cz[h] += shfl(cz[h], o);
                kc0 = (ft & 1) ? cz[2] : cz[0]; /* heads ha, ha + 1 of the C fragments */
                kc1 = (ft & 1) ? cz[3] : cz[1];
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
                a0 = CODES2(u01, rot_a), a1 = CODES2(u01, rot_b);
                a2 = CODES2(u23, rot_a), a3 = CODES2(u23, rot_b);
#else
                const uint4 w1 = st[HEAD_DIM / 4 + 4 * s + ft];
                a0 = CODES4(gather(w0.x, w0.y, gsel), rot_4);
                a1 = CODES4(gather(w1.x, w1.y, gsel), rot_4);
                a2 = CODES4(gather(w0.z, w0.w, gsel), rot_4);
                a3 = CODES4(gather(w1.z, w1.w, gsel), rot_4);
#endif
                const uint2 bf = bcol[4 * s];
                clkv_mma_bf16(d[s & 1], a0, a1, a2, a3, bf.x, bf.y);
            }
            UNROLL
            for (int i = 0; i < 4; i++) {
                const float x = d[0][i] + d[1][i];
                z[i] = x + shfl(x, 2) + ((i & 1) ? kc1 : kc0);
            }
        } else {
            /* ---- residual logits on the CUDA cores (lanes of column part 0) ---- */
            if (ft < 2) {
                const long ra = min(base + tok_a, end - 1) - nq;
                const long rb = min(base + tok_b, end - 1) - nq;
                for (int c = 0; c < HEAD_DIM; c++) {
                    const float xa = LOAD_RES(krb, ra * HEAD_DIM + c);
                    const float xb = LOAD_RES(krb, rb * HEAD_DIM + c);
                    const float q0 = qsm[ha][c], q1 = qsm[ha + 1][c];
                    z[0] = fma(q0, xa, z[0]);
                    z[1] = fma(q1, xa, z[1]);
                    z[2] = fma(q0, xb, z[2]);
                    z[3] = fma(q1, xb, z[3]);
                }
            }
            UNROLL
            for (int i = 0; i < 4; i++)
                z[i] += shfl(z[i], 2);
        }

        /* ---- online softmax on the fragments ---- */
        /* Lazy maxima: the reference m of a head moves only when a logit of the tile
         * exceeds it by more than LAZY_M (log2 units); otherwise the tile's
         * probabilities exp2(z - m) stay below 2^LAZY_M and the accumulators keep their
         * scale (the state (m, l, acc) means acc * 2^m whatever m is). Once the maxima
         * settle, a tile costs one vote instead of the shuffle reductions, the factor
         * exchange and the rescale. */
        if (base + tok_a >= end)
            z[0] = z[1] = -INFINITY;
        if (base + tok_b >= end)
            z[2] = z[3] = -INFINITY;
        const int grow = warp_any(fmax(z[0], z[2]) > m0 + LAZY_M || fmax(z[1], z[3]) > m1 + LAZY_M);
        float f0 = 1.0f, f1 = 1.0f;
        if (grow) {
            float mx0 = fmax(z[0], z[2]), mx1 = fmax(z[1], z[3]);
            UNROLL
            for (int o = 4; o < 32; o <<= 1) {
                mx0 = fmax(mx0, shfl(mx0, o));
                mx1 = fmax(mx1, shfl(mx1, o));
            }
            mx0 = fmax(mx0, m0);
            mx1 = fmax(mx1, m1);
            f0 = m0 == -INFINITY ? 0.0f : clkv_exp2_ftz(m0 - mx0);
            f1 = m1 == -INFINITY ? 0.0f : clkv_exp2_ftz(m1 - mx1);
            m0 = mx0;
            m1 = mx1;
            if (ft < 2 && fg == 0) {
                fs[ha] = f0;
                fs[ha + 1] = f1;
            }
        }
        const float bs0 = m0 == -INFINITY ? 0.0f : m0;
        const float bs1 = m1 == -INFINITY ? 0.0f : m1;
        const float p0 = clkv_exp2_ftz(z[0] - bs0), p1 = clkv_exp2_ftz(z[1] - bs1);
        const float p2 = clkv_exp2_ftz(z[2] - bs0), p3 = clkv_exp2_ftz(z[3] - bs1);
        l0 = fma(l0, f0, p0 + p2);
        l1 = fma(l1, f1, p1 + p3);
        if (ft < 2) {
            ps[tok_a * HP + ha] = p0;
            ps[tok_a * HP + ha + 1] = p1;
            ps[tok_b * HP + ha] = p2;
            ps[tok_b * HP + ha + 1] = p3;
        }
        clkv_warp_sync();

        /* ---- values ---- */
        if (grow) { /* rescale the accumulators to the moved maxima */
            const float fb = fs[hb];
            UNROLL
            for (int t = 0; t < NMT; t++) {
                acc[t][0] *= f0;
                acc[t][1] *= f1;
                acc[t][2] *= f0;
                acc[t][3] *= f1;
            }
            UNROLL
            for (int g = 0; g < DG; g++)
                cmv[g] *= fb;
        }
        if (quant) {
            float pk[4];
            int tkk[4];
            UNROLL
            for (int k = 0; k < 4; k++) {
                tkk[k] = 2 * ft + (k & 1) + 8 * (k >> 1);
                pk[k] = ps[tkk[k] * HP + hb];
            }
            uint vb0 = 0u, vb1 = 0u;
            float vS[4][4], vM[4][4];
            uint4 vw[4];
            UNROLL
            for (int t = 0; t < NMT; t++) {
                if ((16 * t) % GQ == 0) { /* a new value group: B = p S (hi/lo), min terms */
                    const int grp = (16 * t) / GQ;
#if DG % 4 == 0
                    if (grp % 4 == 0) { /* S, m - S of the lane's tokens, groups grp .. +3 */
                        UNROLL
                        for (int k = 0; k < 4; k++) {
                            const float4 a = vsm[wid][0][tkk[k] * (DG / 4) + grp / 4];
                            const float4 c = vsm[wid][1][tkk[k] * (DG / 4) + grp / 4];
                            vS[k][0] = a.x, vS[k][1] = a.y, vS[k][2] = a.z, vS[k][3] = a.w;
                            vM[k][0] = c.x, vM[k][1] = c.y, vM[k][2] = c.z, vM[k][3] = c.w;
                        }
                    }
#else
                    UNROLL
                    for (int k = 0; k < 4; k++) {
                        vS[k][grp % 4] = vss[tkk[k] * DG + grp];
                        vM[k][grp % 4] = vms[tkk[k] * DG + grp];
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
                }
                /* value words of tokens 2t, 2t+1, 2t+8, 2t+9 (one 16-byte load serves 4
                 * m-tiles at 2 bits, 2 at 4 bits) */
                if (t % (VBITS == 2 ? 4 : 2) == 0) {
                    UNROLL
                    for (int k = 0; k < 4; k++)
                        vw[k] = st[KC_N + tkk[k] * (NW / 4) + (VBITS == 2 ? t / 4 : t / 2)];
                }
                uint w[4][2];
                UNROLL
                for (int k = 0; k < 4; k++) {
#if VBITS == 2
                    const uint4 v4 = vw[k];
                    w[k][0] = (t % 4) == 0   ? v4.x
                              : (t % 4) == 1 ? v4.y
                              : (t % 4) == 2 ? v4.z
                                             : v4.w;
#else
                    const uint4 v4 = vw[k];
                    w[k][0] = (t % 2) == 0 ? v4.x : v4.z;
                    w[k][1] = (t % 2) == 0 ? v4.y : v4.w;
#endif
                }
                uint a0, a1, a2, a3;
#if VBITS == 2
                const uint u01 = gather(w[0][0], w[1][0], gsel);
                const uint u23 = gather(w[2][0], w[3][0], gsel);
                a0 = CODES2(u01, rot_a), a1 = CODES2(u01, rot_b);
                a2 = CODES2(u23, rot_a), a3 = CODES2(u23, rot_b);
#else
                a0 = CODES4(gather(w[0][0], w[1][0], gsel), rot_4);
                a1 = CODES4(gather(w[0][1], w[1][1], gsel), rot_4);
                a2 = CODES4(gather(w[2][0], w[3][0], gsel), rot_4);
                a3 = CODES4(gather(w[2][1], w[3][1], gsel), rot_4);
#endif
                clkv_mma_bf16(acc[t], a0, a1, a2, a3, vb0, vb1);
            }
        } else if (ft < 2) {
            /* residual values on the CUDA cores (lanes of column part 0) */
            const int nt = min(16, end - base);
            for (int k = 0; k < nt; k++) {
                const float q0 = ps[k * HP + ha], q1 = ps[k * HP + ha + 1];
                __global const res_t *row = vrb + (long)(base + k - nq) * HEAD_DIM;
                UNROLL
                for (int t = 0; t < NMT; t++) {
                    const float xa = LOAD_RES(row, 16 * t + VROW_CH(fg));
                    const float xb = LOAD_RES(row, 16 * t + VROW_CH(fg + 8));
                    acc[t][0] = fma(q0, xa, acc[t][0]);
                    acc[t][1] = fma(q1, xa, acc[t][1]);
                    acc[t][2] = fma(q0, xb, acc[t][2]);
                    acc[t][3] = fma(q1, xb, acc[t][3]);
                }
            }
        }
        clkv_warp_sync(); /* ps, fs, vss, vms and the stage are refilled next */
    }
    CLKV_CP_ASYNC_WAIT(0);

    /* ---- the split's partial state, merged over the work-group's warps ---- */
    UNROLL
    for (int o = 4; o < 32; o <<= 1) {
        l0 += shfl(l0, o);
        l1 += shfl(l1, o);
    }
    UNROLL
    for (int t = 0; t < NMT; t++)
        UNROLL
    for (int i = 0; i < 4; i++)
        acc[t][i] += shfl(acc[t][i], 2);
    UNROLL
    for (int g = 0; g < DG; g++) {
        float c = cmv[g];
        c += shfl(c, 1);
        c += shfl(c, 2);
        if (ft == 0 && pb == 0)
            csm[wid][hb * DG + g] = c;
    }
    clkv_warp_sync(); /* csm written; every lane is past its last read of bs and ps */
    /* the warp's state into its own key-operand and probability space: xs[head][channel]
     * (HP * HEAD_DIM floats <= 8 * LDB 16-bit entries), (m, l) per head in ps */
    __local float *xs = (__local float *)bs;
    if (ft < 2) {
        UNROLL
        for (int e = 0; e < 2; e++) {
            const int h = ha + e;
            UNROLL
            for (int t = 0; t < NMT; t++) {
                const int ca = 16 * t + VROW_CH(fg), cb = 16 * t + VROW_CH(fg + 8);
                xs[h * HEAD_DIM + ca] = acc[t][e] + csm[wid][h * DG + ca / GQ];
                xs[h * HEAD_DIM + cb] = acc[t][2 + e] + csm[wid][h * DG + cb / GQ];
            }
            if (fg == 0) {
                ps[2 * h] = e ? m1 : m0;
                ps[2 * h + 1] = e ? l1 : l0;
            }
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
