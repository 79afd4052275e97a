/* ParisKV Stage II (SPEC §4): RSQ-IP rerank of the candidates and the final top-k.
 *
 * Defines (host/pariskv_rerank.c):
 *   HEAD_DIM  D (64, 128, 256)
 *   SUB_M     subspace dim m; NBLK = D / m
 *   W_DTYPE   dtype code of the weights
 *   WG        work-group size (a power of two)
 *   CODES_U32 1: code rows are 4-byte aligned (read as uint words)
 *   KH_BITS   bits of the score key in the Stage II histogram (KH_BINS = 2^KH_BITS bins)
 *   KBUF_CAP  capacity (a power of two) of a row's buffer of scores at or above the
 *             threshold bin
 *   KH_COARSE 1: the row state also holds a 64-bin histogram of the top 6 key bits, so
 *             pkv_topk_collect finds the threshold bin from 64 + 64 bins instead of KH_BINS
 *   TK_RANK   > 0: pkv_topk selects from a buffer of at most TK_RANK entries by counting
 *             ranks (no sort); larger buffers use the bitonic sort
 *   RR_VEC, RR_ITEMS, RR_NOHIST: pkv_rerank variants (see there)
 *   TC_NARROW 1 (with KH_COARSE): pkv_topk_collect scans the 64 coarse and 64 fine bins
 *             with 64 work-items (6 steps instead of log2(WG)) and appends through a
 *             local counter instead of a work-group scan (the buffer is unordered: pkv_topk
 *             orders by key, then index); 0: the previous work-group-wide scans
 *   TC_ITEMS  (TC_NARROW) scores per work-item of pkv_topk_collect (WG * TC_ITEMS per
 *             work-group: fewer work-groups repeating the bin search)
 *   PKC_WSCAN 1 (NVIDIA only, else ignored): warp-shuffle scans (pariskv_scan.cl), and the
 *             collection's bin search in one warp (pkr_thr_level)
 *   RR_PART   the kernels a program holds: 1 pkv_rerank (needs HEAD_DIM, SUB_M, W_DTYPE,
 *             CODES_U32, RR_*), 2 pkv_topk_collect + pkv_topk (none of those), 0 (default)
 *             all three. Split, the top-k program serves every head dim, subspace dim and
 *             weight dtype (PoCL compiles every kernel of a program, and the top-k kernels
 *             are the larger part).
 *
 * Final top-k: pkv_rerank scores the candidates and histograms the top KH_BITS bits of
 * each score's order-preserving key per row (global atomics from per-work-group
 * histograms); pkv_topk_collect (many work-groups per row) finds the bin holding the
 * k-th largest key and appends every (key, candidate index) at or above it to the row's
 * buffer; pkv_topk (one work-group per row) sorts that small buffer and writes the top-k.
 * When the buffer would overflow (many scores in the threshold bin, e.g. ties), pkv_topk
 * instead runs an exact radix select over the row's C_b scores.
 *
 * Plan (int32 [8, B] row-major): row 0 = n_b, rows 1..6 = tiers, row 7 = C_b.
 */

#define NBLK (HEAD_DIM / SUB_M)
#define W_T CLKV_STORAGE(W_DTYPE)
#define TK_WG WG
#define SCAN_WG WG
#include "pariskv_scan.cl"
#include "pariskv_topk.cl"
#include "kernel_args.cl"
#define KH_PER (KH_BINS > WG ? KH_BINS / WG : 1) /* bins per work-item in the bin scan */
#ifndef KH_COARSE
#define KH_COARSE 0
#endif
#if KH_COARSE && WG < KH_CBINS
#error "KH_COARSE needs WG >= 64"
#endif
#ifndef TC_NARROW
#define TC_NARROW 0
#endif
#if TC_NARROW && !KH_COARSE
#error "TC_NARROW needs KH_COARSE"
#endif
#ifndef TC_ITEMS
#define TC_ITEMS 1
#endif
#if TC_ITEMS > 1 && !TC_NARROW
#error "TC_ITEMS needs TC_NARROW"
#endif

/* Exclusive scan of one uint per work-item over work-items [0, n) (n a power of two
 * <= WG; the others get 0); *total gets the sum. All work-items must call it. */
inline uint pkr_scan_n(__local uint *tmp, uint v, int n, uint *total) {
    const int lid = (int)get_local_id(0);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid < n)
        tmp[lid] = v;
    for (int s = 1; s < n; s <<= 1) {
        barrier(CLK_LOCAL_MEM_FENCE);
        const uint add = lid < n && lid >= s ? tmp[lid - s] : 0u;
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid < n)
            tmp[lid] += add;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    *total = tmp[n - 1];
    return lid < n ? tmp[lid] - v : 0u;
}

#ifndef RR_PART
#define RR_PART 0
#endif

#if RR_PART != 2
#ifndef RR_VEC
#define RR_VEC 0
#endif
#ifndef RR_ITEMS
#define RR_ITEMS 1
#endif
#ifndef RR_NOHIST
#define RR_NOHIST 0
#endif
#define RR_SPAN (WG * RR_ITEMS) /* candidates per pkv_rerank work-group */
#if RR_VEC
#if SUB_M != 8
#error "RR_VEC needs SUB_M == 8"
#endif
#define RR_PB (NBLK < 16 ? NBLK : 16) /* blocks per piece (8 coordinates = 1 code word each) */
#define RR_WV CLKV_VEC16(W_DTYPE)     /* weights per 16 bytes */
#define RR_NC (RR_PB / 4)             /* 16-byte code vectors per piece */
#define RR_NW (RR_PB / RR_WV)         /* 16-byte weight vectors per piece */
#if RR_PB % RR_WV
#error "RR_VEC needs whole 16-byte weight vectors per piece"
#endif

/* acc after the blocks of piece pc (RR_PB blocks from block pc * RR_PB) of one candidate,
 * from its loaded code and weight vectors: the f32 operations of the scalar path in the
 * same order (dot over the block's coordinates, then acc += w * dot). */
inline float pkr_piece(float acc, int pc, const uint4 *cv, const uint4 *wv,
                       __local const float4 *q4, __local const float *av) {
    _Pragma("unroll") for (int k = 0; k < RR_PB; k++) {
        const int blk = pc * RR_PB + k;
        const uint4 c = cv[k >> 2];
        const uint x = (k & 3) == 0 ? c.s0 : (k & 3) == 1 ? c.s1 : (k & 3) == 2 ? c.s2 : c.s3;
        const float4 qa = q4[2 * blk], qb = q4[2 * blk + 1];
        const float qq[8] = {qa.s0, qa.s1, qa.s2, qa.s3, qb.s0, qb.s1, qb.s2, qb.s3};
        float dot = 0.0f;
        _Pragma("unroll") for (int jj = 0; jj < 8; jj++) {
            dot += av[(x >> (4 * jj)) & 0xfu] * qq[jj];
        }
        acc += CLKV_RAW_ELEM(W_DTYPE)(wv[k / RR_WV], k % RR_WV) * dot;
    }
    return acc;
}
#endif

/* s^ of candidate j: q_norm * sum_blk w_blk * sum_j v_j q~_j (f32, in coordinate order),
 * and the row's histogram of the top KH_BITS bits of the score keys (kh: KH_WORDS words
 * per row, zeroed by pkv_rank; with KH_COARSE also the coarse bins).
 * RR_VEC 1 (SUB_M == 8, code and weight rows 16-byte aligned, RR_PB a multiple of the
 * weights per 16 bytes): a work-item issues all code and weight loads of its candidates as
 * 16-byte vectors (per piece of 128 coordinates) before the math. The scalar path (0)
 * issues one dependent 4-byte load per block and weight: each of those warp instructions
 * touches 32 scattered rows (H100, 1M tokens: 190.8 -> 79.2 us). Same scores either way.
 * RR_ITEMS (with RR_VEC): candidates per work-item, j0 + it * WG + lid, loads of all issued
 * together (2: half the work-groups, so half the histogram zeroing and flushes).
 * RR_NOHIST 1 (for measuring only): no score histogram; each work-group adds its candidate
 * count to bin 0 (and coarse bin 0), so the collection takes every score (or pkv_topk
 * runs its exact radix select): same top-k through a slower selection.
 * Where the time goes (H100, 1M tokens, 105K candidates per row, 8 rows, f16 weights,
 * 2026-11-27; 71.1-71.5 us): without the histogram 65.5-65.9 us, with the weights not
 * loaded 62.4-62.8 us, loads without the math 58.7-59.4 us, so the gather of 96 bytes per
 * candidate from scattered rows is most of it. Not a gain: codes and weights interleaved
 * in one row of 96 / 128 bytes (one buffer, strided descriptors; 72.6 / 77.5 us), and a
 * grid-stride loop that loads the next candidate's rows during the current one's math (1,
 * 2, 4, 8 work-groups per compute unit: 92.6 / 75.0 / 70.4 / 75.0 us; steps within the
 * spread). Also slower (H200, 1M tokens, 2026-11-28, two alternations in one run, 58.2-58.6
 * us here): 4 lanes per candidate (each lane 16 bytes of codes and its 4 weights, so a warp
 * load covers 8 whole rows; the block dots summed in local memory in the same order), with
 * 4x the work-groups 133.0 / 133.2 us, with 4 candidates per lane in rounds (all loads
 * issued first, same work-groups) 110.0 / 110.4 us.
 * Grid (ceil(max_cand / RR_SPAN) * WG, Hkv, B), local (WG). */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
pkv_rerank(__global const float *qr, __global const float *qn, __global const uchar *codes,
           __global const W_T *wts, __global const int *plan, __global const int *cand,
           __global float *cs, __global uint *kh, const pkv_rerank_scalars P, float8 lev) {
    KARGS_UNPACK(PKV_RERANK)
    __local float4 q4[HEAD_DIM / 4];
    __local float *q = (__local float *)q4;
    __local float av[16]; /* signed levels by nibble: av[8 + t] = a[t], av[t] = -a[t] */
#if !RR_NOHIST
    __local uint hist[KH_BINS];
#if KH_COARSE
    __local uint coarse[KH_CBINS];
#endif
#endif
    const int lid = (int)get_local_id(0);
    const int h = (int)get_group_id(1), b = (int)get_group_id(2);
    const int C = clamp(plan[plan_off + 7 * B + b], 0, max_cand);
    const int j0 = (int)get_group_id(0) * RR_SPAN;
    for (int i = lid; i < HEAD_DIM; i += WG)
        q[i] = qr[qr_off + b * qr_sb + h * qr_sh + i];
#if !RR_NOHIST
    for (int i = lid; i < KH_BINS; i += WG)
        hist[i] = 0;
#if KH_COARSE
    for (int i = lid; i < KH_CBINS; i += WG)
        coarse[i] = 0;
#endif
#endif
    if (lid < 16) {
        const float l[8] = {lev.s0, lev.s1, lev.s2, lev.s3, lev.s4, lev.s5, lev.s6, lev.s7};
        av[lid] = lid >= 8 ? l[lid - 8] : -l[lid];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const float qnorm = qn[qn_off + b * qn_sb + h * qn_sh];
    __global const int *crow_idx = cand + ca_off + b * ca_sb + h * ca_sh;
    __global const uchar *cbase = codes + cd_off + b * cd_sb + h * cd_sh;
    const long wbase = w_off + b * w_sb + h * w_sh;
    __global float *srow = cs + cs_off + b * cs_sb + h * cs_sh;
#if RR_VEC
    int jv[RR_ITEMS];
    long pv[RR_ITEMS];
    float acc[RR_ITEMS];
    _Pragma("unroll") for (int it = 0; it < RR_ITEMS; it++) {
        jv[it] = j0 + it * WG + lid;
        pv[it] = jv[it] < C ? crow_idx[jv[it]] : 0;
        acc[it] = 0.0f;
    }
    for (int pc = 0; pc < NBLK / RR_PB; pc++) {
        uint4 cv[RR_ITEMS][RR_NC], wv[RR_ITEMS][RR_NW];
        _Pragma("unroll") for (int it = 0; it < RR_ITEMS; it++) {
            if (jv[it] < C) {
                __global const uint4 *cr = (__global const uint4 *)(cbase + pv[it] * cd_sl);
                __global const uint4 *wr = (__global const uint4 *)(wts + wbase + pv[it] * w_sl);
                _Pragma("unroll") for (int i = 0; i < RR_NC; i++) {
                    cv[it][i] = cr[pc * RR_NC + i];
                }
                _Pragma("unroll") for (int i = 0; i < RR_NW; i++) {
                    wv[it][i] = wr[pc * RR_NW + i];
                }
            }
        }
        _Pragma("unroll") for (int it = 0; it < RR_ITEMS; it++) {
            if (jv[it] < C)
                acc[it] = pkr_piece(acc[it], pc, cv[it], wv[it], q4, av);
        }
    }
    _Pragma("unroll") for (int it = 0; it < RR_ITEMS; it++) {
        if (jv[it] < C) {
            const float sv = qnorm * acc[it];
            srow[jv[it]] = sv;
#if !RR_NOHIST
            atomic_inc(&hist[pkr_key(sv) >> (32 - KH_BITS)]);
#endif
        }
    }
#else
    const int j = j0 + lid;
    if (j < C) {
        const long p = crow_idx[j];
        __global const uchar *row = cbase + p * cd_sl;
        const long wrow = wbase + p * w_sl;
        float acc = 0.0f;
        for (int blk = 0; blk < NBLK; blk++) {
            float dot = 0.0f;
#if CODES_U32 && SUB_M == 8
            const uint x = ((__global const uint *)row)[blk];
            for (int jj = 0; jj < 8; jj++) {
                dot += av[(x >> (4 * jj)) & 0xfu] * q[blk * 8 + jj];
            }
#else
            for (int jj = 0; jj < SUB_M; jj++) {
                const int c = blk * SUB_M + jj;
                dot += av[(row[c >> 1] >> (4 * (c & 1))) & 0xfu] * q[c];
            }
#endif
            acc += CLKV_LOAD(W_DTYPE)(wts, wrow + blk) * dot;
        }
        const float sv = qnorm * acc;
        srow[j] = sv;
#if !RR_NOHIST
        atomic_inc(&hist[pkr_key(sv) >> (32 - KH_BITS)]);
#endif
    }
#endif
    __global uint *kr = kh + kh_off + ((long)b * get_num_groups(1) + h) * KH_WORDS;
#if RR_NOHIST
    const int n = clamp(C - j0, 0, RR_SPAN);
    if (lid == 0 && n > 0) {
        atomic_add(&kr[0], (uint)n);
#if KH_COARSE
        atomic_add(&kr[KH_BINS], (uint)n);
#endif
    }
#else
    /* The coarse bins are summed in local memory first: one global atomic per coarse bin
     * and work-group. With one per nonzero fine bin, the few coarse bins that hold the
     * scores took tens of atomics from every work-group (H100, 1M tokens, one candidate
     * per work-item: 80.4 -> 69.4 us). Not the cost, measured in the same setting before
     * that: the local increments (one per distinct bin of a warp through match.any, 80.7
     * -> 82.1 us) and the local histogram's size (two 16-bit counts per word, no change). */
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int i = lid; i < (j0 < C ? KH_BINS : 0); i += WG) {
        const uint x = hist[i];
        if (x) {
            atomic_add(&kr[i], x);
#if KH_COARSE
            atomic_add(&coarse[i >> (KH_BITS - 6)], x);
#endif
        }
    }
#if KH_COARSE
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int i = lid; i < (j0 < C ? KH_CBINS : 0); i += WG)
        if (coarse[i])
            atomic_add(&kr[KH_BINS + i], coarse[i]);
#endif
#endif
}

#endif /* RR_PART != 2 */

#if RR_PART != 1
/* The threshold bin of a row: the largest bin t with #(keys in bins >= t) >= kk (kk > 0);
 * *cnt gets that count. All work-items must call it; kr: the row's histogram. */
inline int pkr_thr_bin(__global const uint *kr, __local ulong *tmp, __local int *sh, uint kk,
                       uint *cnt) {
    const int lid = (int)get_local_id(0);
    /* work-item lid holds bins KH_BINS-1 - (lid*KH_PER + r), r ascending: descending bins */
    uint x[KH_PER];
    uint sum = 0;
    for (int r = 0; r < KH_PER; r++) {
        const int d = lid * KH_PER + r;
        x[r] = d < KH_BINS ? kr[KH_BINS - 1 - d] : 0u;
        sum += x[r];
    }
    ulong total;
    ulong cum = pkc_scan(tmp, sum, &total);
    if (cum < kk && cum + sum >= kk)
        for (int r = 0; r < KH_PER; r++) {
            if (cum + x[r] >= kk) {
                sh[0] = KH_BINS - 1 - (lid * KH_PER + r);
                sh[1] = (int)(cum + x[r]);
                break;
            }
            cum += x[r];
        }
    barrier(CLK_LOCAL_MEM_FENCE);
    *cnt = (uint)sh[1];
    return sh[0];
}

#if KH_COARSE
/* One level of pkr_thr_bin_coarse over n <= 64 bins in descending order: bin p (p = 0 the
 * highest) is g[top - p], `above` keys lie in the bins above them. Finds the p where the
 * count of keys at or above the bin first reaches kk: sh[0] = p, sh[1] = the keys above
 * bin p, sh[2] = those in it; sh is left as the caller set it (before the call) when no
 * bin reaches kk. All work-items must call it.
 * PKC_WSCAN (NVIDIA): one warp, two bins per lane, a shuffle scan and one barrier (H100,
 * 1M tokens: pkv_topk_collect 10.4 -> 8.3 us against the 64-wide Hillis-Steele scan in
 * local memory, 12 barriers of the 1024-wide work-group; a work-group-wide pkc_scan, 32
 * warp totals summed per work-item, took 14.4 us); else that Hillis-Steele scan
 * (TC_NARROW) or a work-group-wide one. */
#if KH_BINS / KH_CBINS > 64
#error "pkr_thr_level scans at most 64 bins"
#endif
inline void pkr_thr_level(__global const uint *g, int top, int n, uint kk, uint above,
                          __local ulong *tmp, __local int *sh) {
    const int lid = (int)get_local_id(0);
#if PKC_WSCAN
    (void)tmp;
    if (lid < 32) {
        const int p0 = 2 * lid, p1 = p0 + 1;
        const uint x0 = p0 < n ? g[top - p0] : 0u, x1 = p1 < n ? g[top - p1] : 0u;
        const uint sum = x0 + x1;
        const uint c0 = clkv_warp_scan_u32(sum) - sum + above, c1 = c0 + x0;
        if (c0 < kk && c1 >= kk) {
            sh[0] = p0;
            sh[1] = (int)c0;
            sh[2] = (int)x0;
        } else if (c1 < kk && c1 + x1 >= kk) {
            sh[0] = p1;
            sh[1] = (int)c1;
            sh[2] = (int)x1;
        }
    }
#else
    const uint x = lid < n ? g[top - lid] : 0u;
#if TC_NARROW
    uint total;
    const uint cum = pkr_scan_n((__local uint *)tmp, x, n, &total) + above;
#else
    ulong total;
    const ulong cum = pkc_scan(tmp, x, &total) + above;
#endif
    if (lid < n && cum < kk && cum + x >= kk) {
        sh[0] = lid;
        sh[1] = (int)cum;
        sh[2] = (int)x;
    }
#endif
    barrier(CLK_LOCAL_MEM_FENCE);
}

/* As pkr_thr_bin from the coarse histogram (KH_CBINS bins of the top 6 key bits, right
 * after the fine bins) and then the KH_BINS / KH_CBINS fine bins of the coarse bin found:
 * 2 * 64 words read instead of KH_BINS. sh: 3 ints. */
inline int pkr_thr_bin_coarse(__global const uint *kr, __local ulong *tmp, __local int *sh, uint kk,
                              uint *cnt) {
    const int lid = (int)get_local_id(0);
    const int fine = KH_BINS / KH_CBINS;
    /* Defaults for a row with fewer than kk keys (C = 0: nothing found): bin 0, so the
     * fine bins read below stay inside the row. */
    barrier(CLK_LOCAL_MEM_FENCE); /* earlier readers of sh are done */
    if (lid == 0) {
        sh[0] = KH_CBINS - 1;
        sh[1] = 0;
        sh[2] = 0;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    pkr_thr_level(kr + KH_BINS, KH_CBINS - 1, KH_CBINS, kk, 0u, tmp, sh);
    const int cb = KH_CBINS - 1 - sh[0];
    const uint above = (uint)sh[1]; /* keys in the coarse bins above cb */
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid == 0) {
        sh[0] = fine - 1;
        sh[1] = (int)above;
        sh[2] = 0;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    pkr_thr_level(kr, cb * fine + fine - 1, fine, kk, above, tmp, sh);
    *cnt = (uint)(sh[1] + sh[2]);
    return cb * fine + fine - 1 - sh[0];
}
#endif

/* Appends (key, candidate index) of every score whose key is in the threshold bin or
 * above to the row's buffer kbuf (KBUF_CAP ulongs per row, unordered; sorted by
 * pkv_topk); nothing when the count exceeds KBUF_CAP (pkv_topk then selects over the whole
 * row). kh[row][KH_CNT] counts the appended entries, kh[row][KH_CNT + 1] gets the count.
 * Grid (ceil(max_cand / (WG * TC_ITEMS)) * WG, Hkv, B), local (WG). */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
pkv_topk_collect(__global const float *cs, __global const int *plan, __global uint *kh,
                 const pkv_rerank_scalars P) {
    KARGS_UNPACK(PKV_RERANK)
    __global ulong *kbuf = (__global ulong *)kh;
    __local ulong tmp[WG];
    __local int sh[3];
    __local uint l_base;
    const int lid = (int)get_local_id(0);
    const int h = (int)get_group_id(1), b = (int)get_group_id(2);
    const int C = clamp(plan[plan_off + 7 * B + b], 0, max_cand);
    const int kk = min(top_k, C);
    const int j0 = (int)get_group_id(0) * (WG * TC_ITEMS);
    const long row = (long)b * get_num_groups(1) + h;
    __global uint *kr = kh + kh_off + row * KH_WORDS;
    /* No early return: every work-item reaches every barrier (uniform flags instead). */
    const int active = j0 < C && kk > 0;
#if TC_NARROW
    __local uint l_cnt;
    if (lid == 0)
        l_cnt = 0;
    /* the scores first (their loads overlap the bin search) */
    uint key[TC_ITEMS];
    for (int it = 0; it < TC_ITEMS; it++) {
        const int j = j0 + it * WG + lid;
        key[it] = active && j < C ? pkr_key(cs[cs_off + b * cs_sb + h * cs_sh + j]) : 0u;
    }
#endif
    uint cnt = 0;
#if KH_COARSE
    const int t = pkr_thr_bin_coarse(kr, tmp, sh, (uint)max(kk, 1), &cnt);
#else
    const int t = pkr_thr_bin(kr, tmp, sh, (uint)max(kk, 1), &cnt);
#endif
    if (active && j0 == 0 && lid == 0)
        kr[KH_CNT + 1] = cnt;
#if TC_NARROW
    /* slots in any order (l_cnt zeroed before the barriers of the bin search) */
    int take[TC_ITEMS];
    uint slot[TC_ITEMS];
    for (int it = 0; it < TC_ITEMS; it++) {
        const int j = j0 + it * WG + lid;
        take[it] = active && cnt <= KBUF_CAP && j < C && (int)(key[it] >> (32 - KH_BITS)) >= t;
        slot[it] = take[it] ? atomic_inc(&l_cnt) : 0u;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid == 0 && l_cnt)
        l_base = atomic_add(&kr[KH_CNT], l_cnt);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int it = 0; it < TC_ITEMS; it++) /* sort key: larger score, then lower index first */
        if (take[it] && l_base + slot[it] < KBUF_CAP)
            kbuf[kb_off + row * KBUF_CAP + l_base + slot[it]] =
                ((ulong)(~key[it]) << 32) | (uint)(j0 + it * WG + lid);
#else
    const int j = active && cnt <= KBUF_CAP ? j0 + lid : C;
    uint key = 0;
    if (j < C)
        key = pkr_key(cs[cs_off + b * cs_sb + h * cs_sh + j]);
    const int take = j < C && (int)(key >> (32 - KH_BITS)) >= t;
    ulong total;
    const uint slot = (uint)pkc_scan(tmp, (ulong)take, &total); /* in index order */
    if (lid == 0 && total)
        l_base = atomic_add(&kr[KH_CNT], (uint)total);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (take && l_base + slot < KBUF_CAP) /* sort key: larger score, then lower index first */
        kbuf[kb_off + row * KBUF_CAP + l_base + slot] = ((ulong)(~key) << 32) | (uint)j;
#endif
}

/* Final top-k per (b, h) (pkr_topk_row in pariskv_topk.cl): idx gets the row's top-k
 * positions ascending, then -1 up to top_k. Grid (WG, Hkv, B), local (WG). */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
pkv_topk(__global const float *cs, __global const int *cand, __global const int *plan,
         __global int *idx, __global const uint *kh, const pkv_rerank_scalars P) {
    KARGS_UNPACK(PKV_RERANK)
    __global const ulong *kbuf = (__global const ulong *)kh;
    __local ulong big[TK_BIG];
    __local ulong tmp[WG];
    __local uint sel[TK_RANK > 0 ? TK_RANK : 1];
    __local uint sh[2];
    const int h = (int)get_group_id(1), b = (int)get_group_id(2);
    const int C = clamp(plan[plan_off + 7 * B + b], 0, max_cand);
    const long row = (long)b * get_num_groups(1) + h;
    const uint nbuf = C > 0 && top_k > 0 ? kh[kh_off + row * KH_WORDS + KH_CNT + 1] : 0u;
    pkr_topk_row(cs + cs_off + b * cs_sb + h * cs_sh, cand + ca_off + b * ca_sb + h * ca_sh, C,
                 top_k, idx + ix_off + b * ix_sb + h * ix_sh, nbuf, kbuf + kb_off + row * KBUF_CAP,
                 big, tmp, sel, sh);
}
#endif /* RR_PART != 1 */
