/* Decode (T = 1) attention on the tensor cores with the KEYS on the mma M dimension: the
 * NVIDIA variant of attention_window_partial for one query row per query head and G <= 8
 * query heads per KV head (same arguments and the same split / partial-state conventions
 * as attention_window.cl, whose merge kernel combines its splits).
 *
 * attention_window_mma.cl pads the G query rows of a decode step to 16 mma rows; here the
 * G queries (padded to 8) are the mma N dimension instead, so a warp issues per 16 keys
 *   S^T (16 keys x 8 queries)  = K (A: 16 keys x 16 dims, ldmatrix from the K tile)
 *                                x Q^T (B: kept in registers for the whole kernel):  D/16 mma
 *   O^T (D x 8 queries)       += V^T (A: 16 dims x 16 keys, ldmatrix.trans of the V tile)
 *                                x P^T (B: 16 keys x 8 queries), P = hi + lo:      2 D/16 mma
 * against 2 D/16 + 2 D/8 with the queries as rows. Lane (g, t) holds the scores of keys g,
 * g + 8 for queries 2t, 2t + 1 (C fragment): the online softmax is per C-fragment column,
 * reduced over the 8 lanes that share t. The C fragment of S^T, packed to 16-bit pairs, is
 * the transpose of the B fragment P^T needs: each 8 x 8 block is transposed in registers
 * (movmatrix, or two shuffles where MOVMATRIX = 0).
 *
 * Build options (set by host/attention_window.c, only where CLKV_NVIDIA_PTX is defined):
 *   Q_DTYPE, KV_DTYPE, O_DTYPE  dtype codes; q and K/V both f16 or both bf16
 *   HEAD_DIM                    D (64, 128; 256 in the DIRECT form with VASYNC and KW 16)
 *   KW                          keys per warp per tile (16, 32); a tile has KT = NW KW keys
 *   NSTG                        K/V tiles in flight (cp.async stages)
 *   KV_ALIGNED                  1: every K/V row starts 16-byte aligned (cp.async);
 *                               0: plain loads into the same local tiles
 *   MOVMATRIX                   1 (default): movmatrix.trans; 0: shuffles
 *   FUSED_MERGE                 1: with several splits, the last work-group of a (sequence,
 *                               KV head) to finish merges the splits' partial states into
 *                               o and lse (no merge kernel); 0 (default): partial states only
 *   INTERLEAVE                  1: split s takes the key tiles s, s + num_splits, ... (the
 *                               splits of a head read neighbouring memory at any moment);
 *                               0: split s takes keys [s chunk, (s + 1) chunk) (the -D
 *                               default; the host passes 1 unless CLKV_DECODE_INTERLEAVE=0)
 *   DIRECT                      1: no local K/V tiles: each lane loads the 16-byte chunks
 *                               its mma fragments need straight into registers (below);
 *                               0 (the -D default): cp.async stages + ldmatrix; the host
 *                               passes 1 for caches over 4K tokens unless
 *                               CLKV_DECODE_DIRECT=0
 *   NW                          warps per work-group (4; with DIRECT also 8 or 16)
 *   PREFETCH                    DIRECT only: 1 (the -D default): the next tile's K is
 *                               loaded as soon as S has consumed this tile's (below);
 *                               0: at the top of its iteration (CLKV_DECODE_PREFETCH=0)
 *   VASYNC                      DIRECT, KV_ALIGNED and not LONGFLOW: 0 (the -D default):
 *                               V straight into registers like K; 2 or 3: each warp copies
 *                               its V rows into VASYNC local stages of its own (cp.async,
 *                               VASYNC - 1 tiles ahead) and reads V^T by ldmatrix.trans (the
 *                               host passes 2 unless CLKV_DECODE_VASYNC says otherwise;
 *                               measured below the DIRECT paragraph)
 *   LONGFLOW                    1 (needs DIRECT, no FUSED_MERGE): build the LongFlow step
 *                               kernel longflow_step_keyrows instead (SPEC §2.3;
 *                               host/longflow_step.c; the scorers and the merge are in
 *                               longflow_step.cl, which also takes PER_HEAD and LF_NH).
 *                               On top of decode, per K/V tile: the slot positions (one
 *                               per lane, requested with the tile's K) give the warp's
 *                               slot mask by a ballot; masked rows' V is zeroed; the
 *                               new token's K/V rows are patched into the registers of the
 *                               lanes that loaded the victim slot; ||v||_1 of each slot
 *                               comes from the tensor cores (the V^T blocks of O^T,
 *                               transposed, times ones) in the layout of the logits, and
 *                               each lane stores the score logits of its slots.
 *
 * Warp w takes the keys [w KW, w KW + KW) of every K/V tile; the NW warps combine their
 * (m, l, acc) through local memory at the end and the work-group writes o and lse (one
 * split) or its partial state, query by query (coalesced). With FUSED_MERGE, each
 * work-group then makes its partial state visible device-wide (fence), takes a ticket from
 * tickets[b * Hkv + kvh] (atomic), and the one that draws the last ticket reads every
 * split's state back (volatile loads, past the L1), writes o and lse as
 * attention_window_merge does and returns the counter to 0 for the next call.
 *
 * DIRECT: the warps share nothing until the final combine, so there are no barriers in
 * the key loop and a warp's loads stay in flight while other warps compute. The dims of
 * a reduction may be taken in any order as long as both operands agree, which lets every
 * lane load whole 16-byte chunks of a row:
 *   K (A of S^T, rows = keys): lane (g, t) loads keys g and g + 8 of a 16-key block,
 *     chunks t, t + 4, t + 8, ... (4 lanes cover 64 contiguous bytes of a key per load);
 *     k-step kk takes dims 8 c + 4 (kk & 1) + {0, 1} (k-index 2t, 2t + 1) and + {2, 3}
 *     (2t + 8, 2t + 9) of chunk c = 4 (kk >> 1) + t, and Q^T's B fragment the same dims.
 *   V (A of O^T = V^T P^T, rows = dims, k-index = keys): lane (g, t) loads keys 2t,
 *     2t + 1, 2t + 8, 2t + 9, chunks g, g + 8, ... (8 lanes cover 128 contiguous bytes of
 *     a key) and pairs the same dim of two keys with a byte permute; mma row g of 16-dim
 *     block n is dim vdim(g, n), row g + 8 is vdim(g, n + D / 16).
 *   V with VASYNC: the warp's V rows of tile t + 1 are copied (cp.async, 16 bytes a lane,
 *     padded rows) while it computes tile t, so a tile's V is in flight a whole tile ahead
 *     without holding registers; O^T's A fragments come by ldmatrix.trans (dims in order).
 *     The warps still share nothing (a warp's stages are its own: bar.warp.sync, no
 *     barriers). H200, bf16 Hq 32 / Hkv 8, D 128, 2026-11-28, `clkv bench attention-decode
 *     --iters 50 --repeats 5`, alternating in one run (µs, V in registers -> VASYNC 2):
 *     B 8 128K 977.2-979.6 -> 971.0-975.0 (three runs), B 8 32K 252.4-253.3 -> 249.5-250.7,
 *     B 8 4K 40.2-40.3 -> 39.7, B 2 32K (LongFlow's bench) 71.2-71.4 -> 69.6-69.8; B 1
 *     32K / 128K within the spread (130.6-131.7 against 130.8-132.0 at 128K). 3 stages
 *     (209 KiB of local memory) were slower: B 8 128K 1050, B 1 128K 139. Not kept: with
 *     16 keys a warp (128 registers instead of 235) and two work-groups per compute unit
 *     (twice the splits), B 8 128K 977-981; 16 warps x 16 keys, B 8 128K 967-969 but B 1
 *     128K 132-132.5; 4 warps, twice the splits, B 8 128K 1041. The LongFlow step
 *     (4 warps, two work-groups per unit; V's new-token row patched and masked rows zeroed
 *     in the stage) was slower with it: B 2, S 32K, per-layer 77.4-77.9 -> 78.2-78.6 µs (at
 *     S 1024 13.4-13.7 -> 12.7-12.9), and with 8 warps and 8 splits 78.3-78.9 either way.
 *   D 256 runs only in this form, 16 keys a warp (254 registers a lane, no spills; ptxas
 *     via tools/profile/cuda_replay). H200, bf16 Hq 32 / Hkv 8, two alternations in one run
 *     against the 16-row kernel (attention_window_mma.cl, CLKV_DECODE_KEYROWS=0), µs: B 1
 *     32K / 128K 71.5-71.6 / 251.1-251.2 against 78.8-79.0 / 267.5-267.9, B 8 490.7-491.6 /
 *     1934.2-1936.0 against 519.1-519.2 / 1999.4-2006.6 (83-98 % of the read bandwidth). */

#define Q_T CLKV_STORAGE(Q_DTYPE)
#define KV_T CLKV_STORAGE(KV_DTYPE)
#define O_T CLKV_STORAGE(O_DTYPE)

#ifndef DIRECT
#define DIRECT 0
#endif
#ifndef PREFETCH
#define PREFETCH 1
#endif
#ifndef NW
#define NW 4 /* warps, all along the keys */
#endif
#define WG_SIZE (NW * 32)
#define QN 8                /* queries of the mma N dimension (G padded) */
#define KT (NW * KW)        /* keys of a K/V tile */
#define LDH (HEAD_DIM + 8)  /* padded 16-bit row of a local K/V tile (conflict-free) */
#define ROW16 (LDH / 8)     /* padded row in 16-byte units */
#define CH (HEAD_DIM / 8)   /* 16-byte chunks of a row */
#define TILE16 (KT * ROW16) /* one K or V tile in 16-byte units */
#define NKS (HEAD_DIM / 16) /* k-steps of S^T = K Q^T, and 16-dim blocks of O^T */
#define NMT (KW / 16)       /* 16-key blocks of a warp per tile */
#define CLD (HEAD_DIM + 4)  /* f32 row of the combine area (conflict-free stores) */
#define UNROLL _Pragma("unroll")

#if (KW != 16 && KW != 32) || (HEAD_DIM != 64 && HEAD_DIM != 128 && HEAD_DIM != 256)
#error "attention_window_keyrows: inconsistent tile parameters"
#endif
#if Q_DTYPE != KV_DTYPE || KV_DTYPE == CLKV_DT_F32 || !defined(CLKV_NVIDIA_PTX)
#error "attention_window_keyrows needs NVIDIA PTX and f16 / bf16 q and K/V of one dtype"
#endif
#if !DIRECT && NSTG * 2 * KT * LDH * 2 < NW * QN * CLD * 4
#error "attention_window_keyrows: the combine area does not fit into the stages"
#endif
#if (!DIRECT && NW != 4) || (DIRECT && NW != 4 && NW != 8 && NW != 16)
#error "attention_window_keyrows: unsupported warp count"
#endif
#ifndef MOVMATRIX
#define MOVMATRIX 1
#endif
#ifndef FUSED_MERGE
#define FUSED_MERGE 0
#endif
#ifndef INTERLEAVE
#define INTERLEAVE 0
#endif
#ifndef LONGFLOW
#define LONGFLOW 0
#endif
#ifndef VASYNC
#define VASYNC 0
#endif
#if VASYNC && (!DIRECT || !KV_ALIGNED || LONGFLOW || VASYNC > 3)
#error "attention_window_keyrows: VASYNC needs DIRECT and KV_ALIGNED, not LONGFLOW, 2-3 stages"
#endif
/* D 256 only in the DIRECT form with V in local stages and 16 keys a warp: K's registers
 * (64 a lane) next to the 64 accumulators and the 32 of q */
#if HEAD_DIM == 256 && (!VASYNC || KW != 16)
#error "attention_window_keyrows: D 256 needs VASYNC and 16 keys a warp"
#endif
/* VASYNC local memory: per warp, VASYNC stages of KW padded V rows; after the key loop the
 * same memory is the combine area */
#define VSTG16 (KW * ROW16)
#define VSM16 (NW * VASYNC * VSTG16 > NW * QN * CLD / 4 ? NW * VASYNC * VSTG16 : NW * QN * CLD / 4)
#if LONGFLOW && (!DIRECT || FUSED_MERGE)
#error "attention_window_keyrows: LONGFLOW needs DIRECT, without FUSED_MERGE"
#endif
#if FUSED_MERGE
#include "split_merge.cl"
#endif
#include "kernel_args.cl"
#if LONGFLOW
#include "longflow_step.cl"
#endif

#define mma16816 CLKV_MMA(KV_DTYPE)
#define split16x2 CLKV_SPLIT16X2(KV_DTYPE)

/* Transpose of an 8 x 8 16-bit block held as one packed pair per lane (lane (g, t): row g,
 * columns 2t, 2t + 1) into the same layout. */
inline uint transpose8x8(uint x, int lane) {
#if MOVMATRIX
    (void)lane;
    uint r;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(r) : "r"(x));
    return r;
#else
    /* element [2t][g] sits in lane (2t, g / 2), half g % 2; [2t + 1][g] in lane (2t + 1, g / 2) */
    const int g = lane >> 2, t = lane & 3;
    const uint src0 = (uint)(8 * t + (g >> 1)), src1 = src0 + 4;
    uint r0, r1;
    asm volatile("shfl.sync.idx.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=r"(r0) : "r"(x), "r"(src0));
    asm volatile("shfl.sync.idx.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=r"(r1) : "r"(x), "r"(src1));
    const uint sh = (uint)(g & 1) * 16u;
    return ((r0 >> sh) & 0xffffu) | ((r1 >> sh) & 0xffffu) << 16;
#endif
}

/* max / sum over the 8 lanes that share lane % 4 (one column of a C fragment) */
inline float col_max(float x) {
    x = fmax(x, clkv_shfl_xor(x, 4));
    x = fmax(x, clkv_shfl_xor(x, 8));
    return fmax(x, clkv_shfl_xor(x, 16));
}
inline float col_sum(float x) {
    x += clkv_shfl_xor(x, 4);
    x += clkv_shfl_xor(x, 8);
    return x + clkv_shfl_xor(x, 16);
}

/* Packed pair q[row][col], q[row][col + 1] (raw 16-bit values), 0 for padding queries. */
inline uint q_pair(__global const Q_T *q, long rowbase, int valid, int col) {
    if (!valid)
        return 0u;
    __global const ushort *p = (__global const ushort *)q + rowbase + col;
    return (uint)p[0] | (uint)p[1] << 16;
}

#if DIRECT
/* mma row dim of V^T for lane group g and fragment index u in [0, D / 8) */
#define VDIM(g, u) (8 * ((g) + 8 * ((u) / 8)) + (u) % 8)

/* 16-byte chunk c of 16-bit row `row` (elements from base, row stride sl) */
inline uint4 kv_chunk(__global const ushort *p, long base, int row, long sl, int c) {
#if KV_ALIGNED
    return clkv_load_stream16(p, (base + (long)row * sl) * 2 + c * 16);
#else
    return clkv_load_raw_u16(p, base + (long)row * sl + c * 8);
#endif
}

/* element e of two 8-element chunks, packed (x's low) */
inline uint pair_elem(uint4 x, uint4 y, int e) {
    const uint a = clkv_u4_word(x, e >> 1), b = clkv_u4_word(y, e >> 1);
    return (e & 1) ? (a >> 16) | (b & 0xffff0000u) : (a & 0xffffu) | (b << 16);
}

/* This lane's chunks of the warp's keys from key j (rows past the end read row kend - 1):
 * kr[NMT][2][CH / 4] (K rows g, g + 8 of each 16-key block), vr[NMT][4][D / 64] (V rows
 * 2t, 2t + 1, 2t + 8, 2t + 9). */
#define DIRECT_LOAD_K(j)                                                                           \
    do {                                                                                           \
        UNROLL for (int mt = 0; mt < NMT; mt++) {                                                  \
            UNROLL for (int h = 0; h < 2; h++) {                                                   \
                const int row = min((j) + mt * 16 + fg + 8 * h, kend - 1);                         \
                UNROLL for (int i = 0; i < CH / 4; i++) kr[mt][h][i] =                             \
                    kv_chunk(k16, kb, row, k_sl, 4 * i + ft);                                      \
            }                                                                                      \
        }                                                                                          \
    } while (0)
#define DIRECT_LOAD_V(j)                                                                           \
    do {                                                                                           \
        UNROLL for (int mt = 0; mt < NMT; mt++) {                                                  \
            UNROLL for (int kq = 0; kq < 4; kq++) {                                                \
                const int row = min((j) + mt * 16 + 2 * ft + (kq & 1) + 8 * (kq >> 1), kend - 1);  \
                UNROLL for (int i = 0; i < HEAD_DIM / 64; i++) vr[mt][kq][i] =                     \
                    kv_chunk(v16, vb, row, v_sl, fg + 8 * i);                                      \
            }                                                                                      \
        }                                                                                          \
    } while (0)
#endif

#if LONGFLOW
/* The LongFlow step in one launch (longflow_step.cl): work-groups [0, n_attn) are
 * (sequence x KV head, split) pairs, bh * num_splits + split, over contiguous chunks of the
 * S slots; the rest are scorers. */
__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void
longflow_step_keyrows(LF_STEP_PARAMS) {
    KARGS_UNPACK(LF_STEP)
    __local float cmb[NW * QN * CLD];
    __local float wm[NW][QN], wl[NW][QN];
    __local uint4 new_k[CH], new_v[CH];
    __local int flag;
    const int gid = (int)get_group_id(0);
    if (gid >= n_attn) { /* a scorer; its local arrays live in the combine area */
        lf_step_score(gid, pos, victim, next_pos, ws, ctr, scores, vout, P, cmb, &flag);
        return;
    }
    const int lid = (int)get_local_id(0);
    const int lane = lid % 32, w = lid / 32;
    const int fg = lane >> 2, ft = lane & 3;
    const int split = gid % num_splits, bh = gid / num_splits;
    const int Hkv = Hq / G;
    const int b = bh / Hkv, kvh = bh % Hkv;
    const int Hm = PER_HEAD ? Hkv : 1, u = PER_HEAD ? kvh : 0;
    const int vslot = do_write ? victim[b * Hm + u] : -1;
#if INTERLEAVE /* split s takes the slot tiles s, s + num_splits, ... (as decode) */
    (void)chunk;
    const int kend = S, ntot = (S + KT - 1) / KT;
    const int ntiles = split < ntot ? (ntot - split + num_splits - 1) / num_splits : 0;
#define TILE_KEY(t) (((t)*num_splits + split) * KT)
    const int has_victim = vslot >= 0 && (vslot / KT) % num_splits == split;
#else
    const int kbeg = split * chunk;
    const int kend = min(kbeg + chunk, S);
    const int ntiles = kend > kbeg ? (kend - kbeg + KT - 1) / KT : 0;
#define TILE_KEY(t) (kbeg + (t)*KT)
    const int has_victim = vslot >= kbeg && vslot < kend;
#endif
    const long kb = ((long)b * Hkv + kvh) * S * HEAD_DIM, vb = kb; /* contiguous cache */
    const long k_sl = HEAD_DIM, v_sl = HEAD_DIM;
    __global float *part_acc = ws;

    __global int *prow = pos + ((long)b * Hm + u) * S;
    /* score logits of this (sequence, KV head): yb[r * S + slot] for its query head r */
    __global float *yb = ws + y_off + ((long)b * Hq + kvh * G) * S;
    const ulong ypol = lf_policy_keep(); /* see lf_policy_keep */
#else
__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void
attention_window_partial(__global const Q_T *q, __global const KV_T *k, __global const KV_T *v,
                         __global const int *lengths, __global O_T *o, __global float *lse,
                         __global float *part_acc, const window_scalars P, __global int *tickets) {
    KARGS_UNPACK(WINDOW)
#if VASYNC
    __local uint4 vsm[VSM16];
    __local float *cmb = (__local float *)vsm;
#elif DIRECT
    __local float cmb[NW * QN * CLD];
#else
    __local uint4 smem[NSTG * 2 * TILE16];
#endif
    __local float wm[NW][QN], wl[NW][QN];
    __local int is_last;
#if FUSED_MERGE
    __local float merge_w[2 * SM_MAX], merge_l[QN];
#endif
    (void)q_st;
    (void)n_qtiles;
    (void)o_st;
    (void)lse_st;
    (void)tickets;

    const int lid = (int)get_local_id(0);
    const int lane = lid % 32, w = lid / 32;
    const int fg = lane >> 2, ft = lane & 3;
    const int split = (int)get_group_id(1);
    const int bh = (int)get_group_id(2);
    const int Hkv = Hq / G;
    const int b = bh / Hkv, kvh = bh % Hkv;

    /* T = 1: the query sits at position len - 1 and sees keys [0, len) */
    int len = max_len;
    if (has_lengths)
        len = clamp(lengths[len_off + b], 0, max_len);
#if INTERLEAVE
    /* split s takes key tiles s, s + num_splits, ...: the splits of a head stream side by side */
    (void)chunk;
    const int kend = len, ntot = (len + KT - 1) / KT;
    const int ntiles = split < ntot ? (ntot - split + num_splits - 1) / num_splits : 0;
#define TILE_KEY(t) (((t)*num_splits + split) * KT)
#else
    const int kbeg = split * chunk;
    const int kend = min(kbeg + chunk, len);
    const int ntiles = kend > kbeg ? (kend - kbeg + KT - 1) / KT : 0;
#define TILE_KEY(t) (kbeg + (t)*KT)
#endif
    const long kb = k_off + (long)b * k_sb + (long)kvh * k_sh;
    const long vb = v_off + (long)b * v_sb + (long)kvh * v_sh;
#endif /* LONGFLOW */

    /* Q^T as B fragments: lane (g, t) holds query g, dims 2t, 2t + 1 (+ 8) of each k-step */
    uint qf[NKS][2];
    {
        const long qa = q_off + (long)b * q_sb + (long)(kvh * G + fg) * q_sh;
        UNROLL
        for (int s = 0; s < NKS; s++) {
#if DIRECT
            const int col = 8 * (4 * (s >> 1) + ft) + 4 * (s & 1);
            qf[s][0] = q_pair(q, qa, fg < G, col);
            qf[s][1] = q_pair(q, qa, fg < G, col + 2);
#else
            qf[s][0] = q_pair(q, qa, fg < G, s * 16 + 2 * ft);
            qf[s][1] = q_pair(q, qa, fg < G, s * 16 + 2 * ft + 8);
#endif
        }
    }

    /* O^T: acc[n] is the C fragment of dims 16 n .. 16 n + 15 x the 8 queries */
    float acc[NKS][4];
    UNROLL
    for (int n = 0; n < NKS; n++) {
        UNROLL
        for (int i = 0; i < 4; i++)
            acc[n][i] = 0.0f;
    }
    /* this lane's queries 2t (suffix 0) and 2t + 1 (suffix 1); l: this lane's part */
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;

#if !DIRECT
    /* ldmatrix row addresses of this lane inside a stage (16-bit units): K blocks as A
     * (matrix i: keys + 8 (i & 1), dims + 8 (i >> 1)), V blocks as A of V^T via .trans
     * (matrix i: keys + 8 (i >> 1), dims + 8 (i & 1)) */
    const int mi = lane >> 3, mr = lane & 7;
    const int k_row = w * KW + (mi & 1) * 8 + mr, k_col = (mi >> 1) * 8;
    const int v_row = w * KW + (mi >> 1) * 8 + mr, v_col = (mi & 1) * 8;
#endif
    __global const ushort *k16 = (__global const ushort *)k;
    __global const ushort *v16 = (__global const ushort *)v;

#if KV_ALIGNED && !DIRECT
    UNROLL
    for (int t = 0; t < NSTG - 1; t++) {
        if (t < ntiles)
            clkv_issue_kv_tile(smem + (2 * t) * TILE16, smem + (2 * t + 1) * TILE16, k16, v16, kb,
                               vb, k_sl, v_sl, TILE_KEY(t), kend, lid, KT, CH, ROW16, WG_SIZE, 1);
        clkv_cp_async_commit(); /* empty groups keep the group count uniform */
    }
#endif
#if DIRECT
    /* With PREFETCH, tile t + 1's K is requested as soon as S has consumed tile t's: those
     * loads stay in flight through the softmax and O^T (same registers). H200, bf16 Hq 32 /
     * Hkv 8, D 128, 2026-11-28, two alternations in one run, B 8 128K 976.0-976.5 -> 958.7-
     * 960.0 us, B 1 128K 131.3-132.3 -> 129.8-130.5, B 8 32K 251.7-252.7 -> 247.8-249.3, B 1
     * 32K 40.3-40.5 either way. Slower: also the next tile's V after O^T (B 8 128K 1048-1050;
     * a first form of it compiled to 255 registers), or its first 16 keys' V (1040), or
     * either at 16 keys a warp (1011 / 1065); at 16 keys a warp a register cap
     * (-cl-nv-maxrregcount 128, meant to fit two work-groups per compute unit) changed
     * nothing (1041.5 against 1041.1-1043.2): the driver ignores that option for kernels with
     * reqd_work_group_size, as this one has (ptxas counts, session 32, host/score.c).
     * docs/performance.md has the sweep. */
    uint4 kr[NMT][2][CH / 4];
#if !VASYNC
    uint4 vr[NMT][4][HEAD_DIM / 64];
#endif
#if PREFETCH
    if (ntiles > 0)
        DIRECT_LOAD_K(TILE_KEY(0) + w * KW);
#endif
#endif
#if VASYNC
    /* this warp's stages; copies: lane l takes chunk l % CH of keys l / CH + 32 / CH * i;
     * ldmatrix.trans rows as in the cp.async form (matrix i: keys + 8 (i >> 1), dims + 8
     * (i & 1)) */
    __local uint4 *vst = vsm + w * VASYNC * VSTG16;
    const int vmi = lane >> 3, vmr = lane & 7;
    const int vrow = (vmi >> 1) * 8 + vmr, vcol = (vmi & 1) * 8;
#define VASYNC_ISSUE(t)                                                                            \
    do {                                                                                           \
        const int vj = TILE_KEY(t) + w * KW;                                                       \
        __local uint4 *vd = vst + ((t) % VASYNC) * VSTG16;                                         \
        UNROLL for (int i = 0; i < KW * CH / 32; i++) {                                            \
            const int r = lane / CH + (32 / CH) * i;                                               \
            const int row = min(vj + r, kend - 1);                                                 \
            clkv_cp_async16(vd + r * ROW16 + lane % CH,                                            \
                            (__global const uchar *)(v16 + vb + (long)row * v_sl) +                \
                                (lane % CH) * 16);                                                 \
        }                                                                                          \
    } while (0)
    UNROLL
    for (int t = 0; t < VASYNC - 1; t++) {
        if (t < ntiles)
            VASYNC_ISSUE(t);
        clkv_cp_async_commit(); /* empty groups keep the group count uniform */
    }
#endif
#if LONGFLOW
    /* lane l: the position held by slot j + l of the warp's keys (requested with their K) */
#define LF_POS(j) prow[min((j) + min(lane, KW - 1), kend - 1)]
#if PREFETCH
    int pnext = ntiles > 0 ? LF_POS(TILE_KEY(0) + w * KW) : -1;
#endif
    /* The new token (after the first tile's loads are in flight): stored by the work-group
     * whose split holds the victim slot, which also keeps it (as stored) to patch into its
     * registers where a lane loaded that row (the loads may see the old row or the new
     * one). Every slot of a split is read by this work-group alone, so nothing waits on the
     * global writes. (The same loop stands in attention_window_mma.cl: one helper for both
     * made the per-KV-head step 2 us slower, H200, S 32K, 2026-11-28.) */
    if (has_victim) { /* uniform */
        const long knrow = kn_off + (long)b * kn_sb + (long)kvh * kn_sh;
        const long vnrow = vn_off + (long)b * vn_sb + (long)kvh * vn_sh;
        for (int c = lid; c < CH; c += WG_SIZE) {
            const uint4 rk = lf_new_chunk(kn, n_dt, knrow, c);
            const uint4 rv = lf_new_chunk(vn, n_dt, vnrow, c);
            new_k[c] = rk;
            new_v[c] = rv;
            *(__global uint4 *)(k + kb + (long)vslot * HEAD_DIM + c * 8) = rk;
            *(__global uint4 *)(v + vb + (long)vslot * HEAD_DIM + c * 8) = rv;
        }
#if PER_HEAD
        if (lid == 0)
#else
        if (lid == 0 && kvh == 0) /* one writer per slot map */
#endif
            prow[vslot] = next_pos[b];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#endif
    for (int t = 0; t < ntiles; t++) {
        const int j0 = TILE_KEY(t) + w * KW; /* first key of this warp */
#if DIRECT
#if !PREFETCH
        DIRECT_LOAD_K(j0);
#endif
#if VASYNC
        clkv_warp_sync(); /* every lane has read the stage refilled now (tile t - 1's) */
        if (t + VASYNC - 1 < ntiles)
            VASYNC_ISSUE(t + VASYNC - 1);
        clkv_cp_async_commit();
#else
        DIRECT_LOAD_V(j0);
#endif
#endif
#if LONGFLOW
#if PREFETCH
        const int pcur = pnext;
#else
        const int pcur = LF_POS(j0);
#endif
        if (vslot >= j0 && vslot < j0 + KW) { /* uniform: rows of the new token, as stored */
            UNROLL
            for (int mt = 0; mt < NMT; mt++) {
                UNROLL
                for (int h = 0; h < 2; h++)
                    if (min(j0 + mt * 16 + fg + 8 * h, kend - 1) == vslot) {
                        UNROLL
                        for (int i = 0; i < CH / 4; i++)
                            kr[mt][h][i] = new_k[4 * i + ft];
                    }
                UNROLL
                for (int kq = 0; kq < 4; kq++)
                    if (min(j0 + mt * 16 + 2 * ft + (kq & 1) + 8 * (kq >> 1), kend - 1) == vslot) {
                        UNROLL
                        for (int i = 0; i < HEAD_DIM / 64; i++)
                            vr[mt][kq][i] = new_v[fg + 8 * i];
                    }
            }
        }
#endif
#if !DIRECT
        const int st = t % NSTG;
#if KV_ALIGNED
        const int ahead = t + NSTG - 1;
        if (ahead < ntiles)
            clkv_issue_kv_tile(smem + (2 * (ahead % NSTG)) * TILE16,
                               smem + (2 * (ahead % NSTG) + 1) * TILE16, k16, v16, kb, vb, k_sl,
                               v_sl, TILE_KEY(ahead), kend, lid, KT, CH, ROW16, WG_SIZE, 1);
        clkv_cp_async_commit();
        CLKV_CP_ASYNC_WAIT(NSTG - 1); /* tile t has landed (this lane's copies) */
#else
        clkv_issue_kv_tile(smem + (2 * st) * TILE16, smem + (2 * st + 1) * TILE16, k16, v16, kb, vb,
                           k_sl, v_sl, TILE_KEY(t), kend, lid, KT, CH, ROW16, WG_SIZE, 0);
#endif
        barrier(CLK_LOCAL_MEM_FENCE);
        __local const ushort *ks = (__local const ushort *)(smem + (2 * st) * TILE16);
        __local const ushort *vs = (__local const ushort *)(smem + (2 * st + 1) * TILE16);
#endif

        /* S^T = K Q^T for the warp's KW keys x 8 queries */
        float s[NMT][4];
        UNROLL
        for (int mt = 0; mt < NMT; mt++) {
            UNROLL
            for (int i = 0; i < 4; i++)
                s[mt][i] = 0.0f;
            UNROLL
            for (int kk = 0; kk < NKS; kk++) {
                uint af[4];
#if DIRECT
                const uint4 x0 = kr[mt][0][kk >> 1], x1 = kr[mt][1][kk >> 1];
                af[0] = (kk & 1) ? x0.z : x0.x;
                af[1] = (kk & 1) ? x1.z : x1.x;
                af[2] = (kk & 1) ? x0.w : x0.y;
                af[3] = (kk & 1) ? x1.w : x1.y;
#else
                clkv_ldmatrix4(af, ks + (k_row + mt * 16) * LDH + kk * 16 + k_col);
#endif
                mma16816(s[mt], af[0], af[1], af[2], af[3], qf[kk][0], qf[kk][1]);
            }
        }
#if DIRECT && PREFETCH
        DIRECT_LOAD_K(TILE_KEY(t + 1) + w * KW); /* past the end: row kend - 1 (no branch) */
#endif
#if LONGFLOW
#if PREFETCH
        pnext = LF_POS(TILE_KEY(t + 1) + w * KW);
#endif
        /* slot mask, bit kl: key j0 + kl is in the split and holds a position or is the
         * victim; masked rows' V (may hold NaN) is zeroed before O^T reads it */
        const uint okm =
            lf_ballot(lane < KW && j0 + lane < kend && (pcur >= 0 || j0 + lane == vslot));
        if (okm != (KW == 32 ? 0xffffffffu : 0xffffu)) { /* uniform */
            UNROLL
            for (int mt = 0; mt < NMT; mt++) {
                UNROLL
                for (int kq = 0; kq < 4; kq++)
                    if (!((okm >> (mt * 16 + 2 * ft + (kq & 1) + 8 * (kq >> 1))) & 1u)) {
                        UNROLL
                        for (int i = 0; i < HEAD_DIM / 64; i++)
                            vr[mt][kq][i] = (uint4)(0u);
                    }
            }
        }
#define KEY_OK(kl) ((okm >> (kl)) & 1u)
#else
#define KEY_OK(kl) (j0 + (kl) < kend)
#endif

        /* scale, mask the keys past the split (and LongFlow's masked slots), online
         * softmax per query (column) */
        float mx0 = -INFINITY, mx1 = -INFINITY;
        UNROLL
        for (int mt = 0; mt < NMT; mt++) {
            UNROLL
            for (int i = 0; i < 4; i++) {
                const float x =
                    KEY_OK(mt * 16 + fg + (i >> 1) * 8) ? s[mt][i] * scale_log2 : -INFINITY;
                s[mt][i] = x;
                if (i & 1)
                    mx1 = fmax(mx1, x);
                else
                    mx0 = fmax(mx0, x);
            }
        }
        mx0 = fmax(col_max(mx0), m0);
        mx1 = fmax(col_max(mx1), m1);
        const float base0 = mx0 == -INFINITY ? 0.0f : mx0;
        const float base1 = mx1 == -INFINITY ? 0.0f : mx1;
        /* ex2.approx (native_exp2): ~2 ulp, exp2(-inf) = 0. clkv_exp2_ftz here (one MUFU.EX2,
         * no subnormal fix-up) made the LongFlow step slower (H200, B 2, 32K slots, two
         * alternations: 77.4 / 77.8 -> 79.6 / 79.8 us; decode unchanged; 2026-11-28). */
        const float al0 = native_exp2(m0 - base0), al1 = native_exp2(m1 - base1);
        m0 = mx0;
        m1 = mx1;
        l0 *= al0;
        l1 *= al1;
        UNROLL
        for (int n = 0; n < NKS; n++) {
            acc[n][0] *= al0;
            acc[n][1] *= al1;
            acc[n][2] *= al0;
            acc[n][3] *= al1;
        }

#if LONGFLOW
        /* ||v||_1 of the warp's keys (below): nv[mt][0] key fg, nv[mt][2] key fg + 8 of
         * 16-key block mt, as the logits */
        float nv[NMT][4];
        UNROLL
        for (int mt = 0; mt < NMT; mt++) {
            UNROLL
            for (int i = 0; i < 4; i++)
                nv[mt][i] = 0.0f;
        }
#endif
#if VASYNC
        CLKV_CP_ASYNC_WAIT(VASYNC - 1); /* tile t's V has landed (this lane's copies) */
        clkv_warp_sync();
        __local const ushort *vs = (__local const ushort *)(vst + (t % VASYNC) * VSTG16);
#endif
        /* O^T += V^T P^T, 16 keys at a time */
        UNROLL
        for (int mt = 0; mt < NMT; mt++) {
            const float p0 = native_exp2(s[mt][0] - base0), p1 = native_exp2(s[mt][1] - base1);
            const float p2 = native_exp2(s[mt][2] - base0), p3 = native_exp2(s[mt][3] - base1);
            l0 += p0 + p2;
            l1 += p1 + p3;
            /* rows g (keys 0-7) and g + 8 (keys 8-15) of the block, split, then transposed
             * into the B fragments {P^T[2t][g], P^T[2t + 1][g]} (+ 8) */
            uint h0, lo0, h1, lo1;
            split16x2(p0, p1, &h0, &lo0);
            split16x2(p2, p3, &h1, &lo1);
            const uint bh0 = transpose8x8(h0, lane), bh1 = transpose8x8(h1, lane);
            const uint bl0 = transpose8x8(lo0, lane), bl1 = transpose8x8(lo1, lane);
            UNROLL
            for (int n = 0; n < NKS; n++) {
                uint af[4];
#if VASYNC
                clkv_ldmatrix4_trans(af, vs + (vrow + mt * 16) * LDH + n * 16 + vcol);
#elif DIRECT
                /* rows g / g + 8 of dim block n: fragment indices n and n + NKS */
                const int u0 = n, u1 = n + NKS;
                af[0] = pair_elem(vr[mt][0][u0 / 8], vr[mt][1][u0 / 8], u0 % 8);
                af[1] = pair_elem(vr[mt][0][u1 / 8], vr[mt][1][u1 / 8], u1 % 8);
                af[2] = pair_elem(vr[mt][2][u0 / 8], vr[mt][3][u0 / 8], u0 % 8);
                af[3] = pair_elem(vr[mt][2][u1 / 8], vr[mt][3][u1 / 8], u1 % 8);
#else
            clkv_ldmatrix4_trans(af, vs + (v_row + mt * 16) * LDH + n * 16 + v_col);
#endif
                mma16816(acc[n], af[0], af[1], af[2], af[3], bh0, bh1);
                mma16816(acc[n], af[0], af[1], af[2], af[3], bl0, bl1);
#if LONGFLOW
                /* ||v||_1 on the tensor cores: each 8 x 8 block of V^T (dims x keys),
                 * transposed, is a block of |V| with keys as rows (lane (g, t): key g or
                 * g + 8, two dims), so |V| (16 keys x these 16 dims) x ones sums a key's
                 * dims into the rows of S^T's layout; the NKS blocks cover every dim once */
                mma16816(nv[mt], transpose8x8(af[0] & 0x7fff7fffu, lane),
                         transpose8x8(af[2] & 0x7fff7fffu, lane),
                         transpose8x8(af[1] & 0x7fff7fffu, lane),
                         transpose8x8(af[3] & 0x7fff7fffu, lane), ONES16X2, ONES16X2);
#endif
            }
        }
#if LONGFLOW
        /* score logits y = x + log2 ||v||_1 of the G real queries (-inf: masked slot) */
        UNROLL
        for (int mt = 0; mt < NMT; mt++) {
            UNROLL
            for (int i = 0; i < 4; i++) {
                const int kl = mt * 16 + fg + (i >> 1) * 8, c = 2 * ft + (i & 1);
                if (c < G && j0 + kl < kend)
                    lf_store_keep(yb + (long)c * S + j0 + kl,
                                  KEY_OK(kl) ? s[mt][i] + native_log2(nv[mt][i & 2]) : -INFINITY,
                                  ypol);
            }
        }
#endif
#if !DIRECT
        barrier(CLK_LOCAL_MEM_FENCE); /* the stage may be refilled */
#endif
#undef KEY_OK
    }
#if (KV_ALIGNED && !DIRECT) || VASYNC
    CLKV_CP_ASYNC_WAIT(0); /* no copy may land in the combine area */
#endif

    /* Combine the NW warps: m* = max m_w, l* = sum 2^(m_w - m*) l_w, per query. */
    l0 = col_sum(l0);
    l1 = col_sum(l1);
    const int c0 = 2 * ft, c1 = c0 + 1; /* this lane's queries */
    if (fg == 0) {
        wm[w][c0] = m0;
        wm[w][c1] = m1;
        wl[w][c0] = l0;
        wl[w][c1] = l1;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    float ms0 = -INFINITY, ms1 = -INFINITY;
    UNROLL
    for (int i = 0; i < NW; i++) {
        ms0 = fmax(ms0, wm[i][c0]);
        ms1 = fmax(ms1, wm[i][c1]);
    }
    const float f0 = m0 == -INFINITY ? 0.0f : exp2(m0 - ms0);
    const float f1 = m1 == -INFINITY ? 0.0f : exp2(m1 - ms1);
#if DIRECT && !VASYNC
#define ODIM0(n) VDIM(fg, n)
#define ODIM1(n) VDIM(fg, (n) + NKS)
#else
#if !DIRECT
    __local float *cmb = (__local float *)smem; /* [NW][QN][CLD] */
#endif
#define ODIM0(n) ((n)*16 + fg)
#define ODIM1(n) ((n)*16 + fg + 8)
#endif
    UNROLL
    for (int n = 0; n < NKS; n++) {
        cmb[(w * QN + c0) * CLD + ODIM0(n)] = acc[n][0] * f0;
        cmb[(w * QN + c1) * CLD + ODIM0(n)] = acc[n][1] * f1;
        cmb[(w * QN + c0) * CLD + ODIM1(n)] = acc[n][2] * f0;
        cmb[(w * QN + c1) * CLD + ODIM1(n)] = acc[n][3] * f1;
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    /* Per query: final (one split) or this split's partial state. */
    for (int e = lid; e < G * (HEAD_DIM / 4); e += WG_SIZE) {
        const int r = e / (HEAD_DIM / 4), c4 = e % (HEAD_DIM / 4);
        float ms = -INFINITY, l = 0.0f;
        for (int i = 0; i < NW; i++)
            ms = fmax(ms, wm[i][r]);
        float4 x = (float4)(0.0f);
        for (int i = 0; i < NW; i++) {
            const float mw = wm[i][r];
            if (mw != -INFINITY)
                l += wl[i][r] * exp2(mw - ms);
            x += vload4(c4, cmb + (i * QN + r) * CLD);
        }
        const int h = kvh * G + r;
#if !LONGFLOW /* LongFlow: always the partial state (lf_step_arrive merges) */
        if (direct) {
            x *= l > 0.0f ? 1.0f / l : 0.0f;
            const long orow = o_off + (long)b * o_sb + (long)h * o_sh + c4 * 4;
            CLKV_STORE(O_DTYPE)(o, orow, x.x);
            CLKV_STORE(O_DTYPE)(o, orow + 1, x.y);
            CLKV_STORE(O_DTYPE)(o, orow + 2, x.z);
            CLKV_STORE(O_DTYPE)(o, orow + 3, x.w);
            if (has_lse && c4 == 0)
                lse[lse_off + (long)b * lse_sb + (long)h * lse_sh] =
                    l > 0.0f ? (ms + log2(l)) * CLKV_LN2 : -INFINITY;
        } else
#endif
        {
            const long idx = ((long)b * Hq + h) * num_splits + split;
            vstore4(x, 0, part_acc + idx * HEAD_DIM + c4 * 4);
            if (c4 == 0) {
                part_acc[ml_off + idx * 2] = ms;
                part_acc[ml_off + idx * 2 + 1] = l;
            }
        }
    }
#if LONGFLOW
    lf_step_arrive(bh, ws, ctr, o, lse, P, &flag);
#undef LF_POS
#endif
#if FUSED_MERGE
    if (direct)
        return;
    split_merge_fused(part_acc, ml_off, num_splits, Hq, b, kvh * G, G, tickets + bh, o, o_off, o_sb,
                      o_sh, lse, lse_off, lse_sb, lse_sh, has_lse, &is_last, merge_w, merge_l);
#endif
#undef TILE_KEY
}
