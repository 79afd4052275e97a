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
 *   RR_PER    candidates per work-item in pkv_rerank / pkv_topk_collect (a work-group
 *             covers WG * RR_PER candidates: j0 + r * WG + lid, r < RR_PER)
 *   RR_TABLE  1: pkv_rerank looks up a per-work-group table tq[c][nibble] = v(nibble) * q~_c
 *             (one local load per coordinate); 0: level and q~ loads and a multiply
 *   RR_LANES  work-items per candidate in pkv_rerank (1, or a divisor of NBLK and WG):
 *             each takes NBLK / RR_LANES consecutive blocks (contiguous code bytes and
 *             weights, so the lanes of a candidate read one span), the partial sums are
 *             added in lane order through local memory
 *   CODES_V16 1: code rows are 16-byte aligned and D / 2 is a multiple of 16 (uint4 loads)
 *   KH_COARSE 1: the row state also holds a 64-bin histogram of the top 6 key bits, so the
 *             threshold bin is found from 64 + 64 bins instead of KH_BINS
 *   TK_RANK   > 0: pkv_topk selects from a buffer of at most TK_RANK entries by counting
 *             ranks (no sort); larger buffers use the bitonic sort
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
#define NSUB (WG >= 32 ? WG / 32 : 1) /* top-k sub-histograms */
#define KH_BINS (1 << KH_BITS)
#define KH_CBINS 64                 /* coarse bins (top 6 key bits), used when KH_COARSE */
#define KH_CNT (KH_BINS + KH_CBINS) /* then: appended count, count at/above the thr bin */
#define KH_WORDS (KH_CNT + 2)
#define KH_PER (KH_BINS > WG ? KH_BINS / WG : 1) /* bins per work-item in the bin scan */
#ifndef RR_PER
#define RR_PER 1
#endif
#ifndef RR_TABLE
#define RR_TABLE 0
#endif
#ifndef CODES_V16
#define CODES_V16 0
#endif
#ifndef KH_COARSE
#define KH_COARSE 0
#endif
#ifndef RR_LANES
#define RR_LANES 1
#endif
#if NBLK % RR_LANES != 0 || WG % RR_LANES != 0
#error "RR_LANES must divide NBLK and WG"
#endif
#define BPL (NBLK / RR_LANES) /* blocks per lane */
#define CPP (WG / RR_LANES)   /* candidates per pass of a work-group */
#define TQ_CSTRIDE (HEAD_DIM / RR_LANES)
/* Table slot of (coordinate c, nibble): the rows of c and c ^ 1 swap in every other lane's
 * coordinate range, so the RR_LANES lanes of a candidate (same coordinate offset, ranges
 * TQ_CSTRIDE apart) hit both halves of the banks. A permutation of [0, 16 * HEAD_DIM). */
#define TQ_IDX(c, nib) ((((c) ^ (((c) / TQ_CSTRIDE) & 1)) << 4) + (nib))
#ifndef TK_RANK
#define TK_RANK 0
#endif
#if KH_COARSE && WG < KH_CBINS
#error "KH_COARSE needs WG >= 64"
#endif

/* Exclusive scan of one ulong per work-item over the work-group; *total gets the sum. */
inline ulong pkr_scan(__local ulong *tmp, ulong v, ulong *total) {
    const int lid = (int)get_local_id(0);
    barrier(CLK_LOCAL_MEM_FENCE);
    tmp[lid] = v;
    for (int s = 1; s < WG; s <<= 1) {
        barrier(CLK_LOCAL_MEM_FENCE);
        const ulong add = lid >= s ? tmp[lid - s] : 0;
        barrier(CLK_LOCAL_MEM_FENCE);
        tmp[lid] += add;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    *total = tmp[WG - 1];
    return tmp[lid] - v;
}

/* Order-preserving map of f32 to uint (larger float -> larger key; -0 == +0). */
inline uint pkr_key(float x) {
    uint u = as_uint(x);
    if ((u & 0x7fffffffu) == 0)
        u = 0;
    return (u >> 31) ? ~u : (u | 0x80000000u);
}

/* Part of the dot product of one candidate's code row with q~ over the BPL blocks
 * blk0 .. blk0 + BPL - 1 (f32, blocks and coordinates in order):
 * sum_blk w_blk * sum_j v_j q~_j. `tq` (RR_TABLE) holds v(nibble) * q~_c at
 * TQ_IDX(c, nibble); otherwise `q` and the signed levels `av` (av[8 + t] = a[t],
 * av[t] = -a[t]). */
inline float pkr_score(__global const uchar *row, __global const W_T *wts, long wrow, int blk0,
                       __local const float *tq, __local const float *q, __local const float *av) {
    float acc = 0.0f;
#if SUB_M == 8 && (CODES_V16 || CODES_U32)
#if CODES_V16 && BPL % 4 == 0
    for (int w4 = 0; w4 < BPL / 4; w4++) {
        const uint4 x4 = ((__global const uint4 *)row)[blk0 / 4 + w4];
        const uint xs[4] = {x4.s0, x4.s1, x4.s2, x4.s3};
        for (int u = 0; u < 4; u++) {
            const int blk = blk0 + 4 * w4 + u;
            const uint x = xs[u];
#else
    {
        for (int u = 0; u < BPL; u++) {
            const int blk = blk0 + u;
            const uint x = ((__global const uint *)row)[blk];
#endif
            float dot = 0.0f;
            for (int jj = 0; jj < 8; jj++) {
#if RR_TABLE
                dot += tq[TQ_IDX(blk * 8 + jj, (x >> (4 * jj)) & 0xfu)];
#else
                dot += av[(x >> (4 * jj)) & 0xfu] * q[blk * 8 + jj];
#endif
            }
            acc += CLKV_LOAD(W_DTYPE)(wts, wrow + blk) * dot;
        }
    }
#else
    for (int blk = blk0; blk < blk0 + BPL; blk++) {
        float dot = 0.0f;
        for (int jj = 0; jj < SUB_M; jj++) {
            const int c = blk * SUB_M + jj;
            const uint nib = (row[c >> 1] >> (4 * (c & 1))) & 0xfu;
#if RR_TABLE
            dot += tq[TQ_IDX(c, nib)];
#else
            dot += av[nib] * q[c];
#endif
        }
        acc += CLKV_LOAD(W_DTYPE)(wts, wrow + blk) * dot;
    }
#endif
    return acc;
}

/* s^ of candidate j: q_norm * sum_blk w_blk * sum_j v_j q~_j (f32, in coordinate order),
 * and the row's histogram of the top KH_BITS bits of the score keys (kh: KH_WORDS words
 * per row, zeroed before Stage II; with KH_COARSE also the 64 coarse bins).
 * A work-group scores CPP * RR_PER candidates (CPP = WG / RR_LANES per pass).
 * Grid (ceil(max_cand / (CPP * RR_PER)) * WG, Hkv, B), local (WG). */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
pkv_rerank(__global const float *qr, long qr_off, long qr_sb, long qr_sh, __global const float *qn,
           long qn_off, long qn_sb, long qn_sh, __global const uchar *codes, long cd_off,
           long cd_sb, long cd_sh, long cd_sl, __global const W_T *wts, long w_off, long w_sb,
           long w_sh, long w_sl, float8 lev, __global const int *plan, long plan_off, int B,
           int max_cand, __global const int *cand, long ca_off, long ca_sb, long ca_sh,
           __global float *cs, long cs_off, long cs_sb, long cs_sh, __global uint *kh,
           long kh_off) {
#if RR_TABLE
    __local float tq[HEAD_DIM * 16];
    __local float *q = 0, *av = 0;
#else
    __local float q[HEAD_DIM];
    __local float av[16]; /* signed levels by nibble: av[8 + t] = a[t], av[t] = -a[t] */
    __local float *tq = 0;
#endif
    __local uint hist[KH_BINS];
    const int lid = (int)get_local_id(0);
    const int h = (int)get_group_id(1), b = (int)get_group_id(2);
    const int C = clamp(plan[plan_off + 7 * B + b], 0, max_cand);
    const int j0 = (int)get_group_id(0) * CPP * RR_PER;
    const float l[8] = {lev.s0, lev.s1, lev.s2, lev.s3, lev.s4, lev.s5, lev.s6, lev.s7};
#if RR_TABLE
    for (int i = lid; i < HEAD_DIM * 16; i += WG) {
        const int nib = i & 15;
        const float a = nib >= 8 ? l[nib - 8] : -l[nib];
        tq[TQ_IDX(i >> 4, nib)] = a * qr[qr_off + b * qr_sb + h * qr_sh + (i >> 4)];
    }
#else
    for (int i = lid; i < HEAD_DIM; i += WG)
        q[i] = qr[qr_off + b * qr_sb + h * qr_sh + i];
    if (lid < 16)
        av[lid] = lid >= 8 ? l[lid - 8] : -l[lid];
#endif
    for (int i = lid; i < KH_BINS; i += WG)
        hist[i] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    const float qnorm = qn[qn_off + b * qn_sb + h * qn_sh];
#if RR_LANES > 1
    __local float part[WG];
    const int ql = lid % RR_LANES;
    for (int r = 0; r < RR_PER; r++) { /* uniform loop: barriers inside */
        const int j = j0 + r * CPP + lid / RR_LANES;
        float ps = 0.0f;
        if (j < C) {
            const long p = cand[ca_off + b * ca_sb + h * ca_sh + j];
            __global const uchar *row = codes + cd_off + b * cd_sb + h * cd_sh + p * cd_sl;
            const long wrow = w_off + b * w_sb + h * w_sh + p * w_sl;
            ps = pkr_score(row, wts, wrow, ql * BPL, tq, q, av);
        }
        part[lid] = ps;
        barrier(CLK_LOCAL_MEM_FENCE);
        if (ql == 0 && j < C) {
            float acc = part[lid];
            for (int u = 1; u < RR_LANES; u++)
                acc += part[lid + u];
            const float sv = qnorm * acc;
            cs[cs_off + b * cs_sb + h * cs_sh + j] = sv;
            atomic_inc(&hist[pkr_key(sv) >> (32 - KH_BITS)]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
#else
    for (int r = 0; r < RR_PER; r++) {
        const int j = j0 + r * WG + lid;
        if (j < C) {
            const long p = cand[ca_off + b * ca_sb + h * ca_sh + j];
            __global const uchar *row = codes + cd_off + b * cd_sb + h * cd_sh + p * cd_sl;
            const long wrow = w_off + b * w_sb + h * w_sh + p * w_sl;
            const float sv = qnorm * pkr_score(row, wts, wrow, 0, tq, q, av);
            cs[cs_off + b * cs_sb + h * cs_sh + j] = sv;
            atomic_inc(&hist[pkr_key(sv) >> (32 - KH_BITS)]);
        }
    }
#endif
    barrier(CLK_LOCAL_MEM_FENCE);
    __global uint *kr = kh + kh_off + ((long)b * get_num_groups(1) + h) * KH_WORDS;
    for (int i = lid; i < (j0 < C ? KH_BINS : 0); i += WG) {
        const uint x = hist[i];
        if (x) {
            atomic_add(&kr[i], x);
#if KH_COARSE
            atomic_add(&kr[KH_BINS + (i >> (KH_BITS - 6))], x);
#endif
        }
    }
}

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
    ulong cum = pkr_scan(tmp, sum, &total);
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
/* As pkr_thr_bin from the coarse histogram (KH_CBINS bins of the top 6 key bits, right
 * after the fine bins) and then the KH_BINS / KH_CBINS fine bins of the coarse bin found:
 * 2 * 64 words read instead of KH_BINS. */
inline int pkr_thr_bin_coarse(__global const uint *kr, __local ulong *tmp, __local int *sh, uint kk,
                              uint *cnt) {
    const int lid = (int)get_local_id(0);
    const int fine = KH_BINS / KH_CBINS;
    /* Defaults for a row with fewer than kk keys (C = 0: nothing found): bin 0, so the
     * fine bins read below stay inside the row. Ordered before the scan's writes by its
     * first barrier. */
    if (lid == 0) {
        sh[0] = 0;
        sh[1] = 0;
    }
    /* coarse bins in descending order, one per work-item */
    uint x = lid < KH_CBINS ? kr[KH_BINS + KH_CBINS - 1 - lid] : 0u;
    ulong total;
    ulong cum = pkr_scan(tmp, x, &total);
    if (lid < KH_CBINS && cum < kk && cum + x >= kk) {
        sh[0] = KH_CBINS - 1 - lid;
        sh[1] = (int)cum; /* keys in the coarse bins above */
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const int cb = sh[0];
    const uint above = (uint)sh[1];
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid == 0) {
        sh[0] = cb * fine;
        sh[1] = (int)above;
    }
    /* fine bins of coarse bin cb, descending (fine <= WG: one per work-item) */
    x = lid < fine ? kr[cb * fine + fine - 1 - lid] : 0u;
    cum = pkr_scan(tmp, x, &total) + above;
    if (lid < fine && cum < kk && cum + x >= kk) {
        sh[0] = cb * fine + fine - 1 - lid;
        sh[1] = (int)(cum + x);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    *cnt = (uint)sh[1];
    return sh[0];
}
#endif

/* Appends (key, candidate index) of every score whose key is in the threshold bin or
 * above to the row's buffer kbuf (KBUF_CAP ulongs per row, unordered; sorted by
 * pkv_topk); nothing when the count exceeds KBUF_CAP (pkv_topk then selects over the whole
 * row). kh[row][KH_CNT] counts the appended entries, kh[row][KH_CNT + 1] gets the count.
 * Grid (ceil(max_cand / WG) * WG, Hkv, B), local (WG). */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
pkv_topk_collect(__global const float *cs, long cs_off, long cs_sb, long cs_sh,
                 __global const int *plan, long plan_off, int B, int max_cand, int top_k,
                 __global uint *kh, long kh_off, __global ulong *kbuf, long kb_off) {
    __local ulong tmp[WG];
    __local int sh[2];
    __local uint l_base;
    const int lid = (int)get_local_id(0);
    const int h = (int)get_group_id(1), b = (int)get_group_id(2);
    const int C = clamp(plan[plan_off + 7 * B + b], 0, max_cand);
    const int kk = min(top_k, C);
    const int j0 = (int)get_group_id(0) * WG * RR_PER;
    const long row = (long)b * get_num_groups(1) + h;
    __global uint *kr = kh + kh_off + row * KH_WORDS;
    /* No early return: every work-item reaches every barrier (uniform flags instead). */
    const int active = j0 < C && kk > 0;
    uint cnt = 0;
#if KH_COARSE
    const int t = pkr_thr_bin_coarse(kr, tmp, sh, (uint)max(kk, 1), &cnt);
#else
    const int t = pkr_thr_bin(kr, tmp, sh, (uint)max(kk, 1), &cnt);
#endif
    if (active && j0 == 0 && lid == 0)
        kr[KH_CNT + 1] = cnt;
    const int use = active && cnt <= KBUF_CAP;
    uint key[RR_PER];
    int take[RR_PER];
    uint ntake = 0;
    for (int r = 0; r < RR_PER; r++) {
        const int j = j0 + r * WG + lid;
        key[r] = use && j < C ? pkr_key(cs[cs_off + b * cs_sb + h * cs_sh + j]) : 0u;
        take[r] = use && j < C && (int)(key[r] >> (32 - KH_BITS)) >= t;
        ntake += (uint)take[r];
    }
    ulong total;
    uint slot = (uint)pkr_scan(tmp, (ulong)ntake, &total);
    if (lid == 0 && total)
        l_base = atomic_add(&kr[KH_CNT], (uint)total);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int r = 0; r < RR_PER; r++) {
        const int j = j0 + r * WG + lid;
        /* sort key: larger score, then lower index first */
        if (take[r] && l_base + slot < KBUF_CAP)
            kbuf[kb_off + row * KBUF_CAP + l_base + slot] = ((ulong)(~key[r]) << 32) | (uint)j;
        slot += (uint)take[r];
    }
}

/* Ascending bitonic sort of v[0..n) in local memory (n a power of two); all work-items. */
inline void pkr_bitonic(__local ulong *v, int n) {
    const int lid = (int)get_local_id(0);
    for (int k = 2; k <= n; k <<= 1)
        for (int s = k >> 1; s > 0; s >>= 1) {
            for (int i = lid; i < n; i += WG) {
                const int o = i ^ s;
                if (o > i) {
                    const ulong x = v[i], y = v[o];
                    if ((x > y) == ((i & k) == 0)) {
                        v[i] = y;
                        v[o] = x;
                    }
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
}

/* Final top-k per (b, h) over the C_b candidate scores: ties at the k-th key take the
 * lowest candidate indices (lowest positions). idx gets positions ascending, then -1 up to
 * top_k. Fast path: sort the row's buffer from pkv_topk_collect (count <= KBUF_CAP);
 * otherwise an exact radix select (4 passes of 8 bits) and an ordered compaction over the
 * row. Grid (WG, Hkv, B), local (WG). */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
pkv_topk(__global const float *cs, long cs_off, long cs_sb, long cs_sh, __global const int *cand,
         long ca_off, long ca_sb, long ca_sh, __global const int *plan, long plan_off, int B,
         int max_cand, int top_k, __global int *idx, long ix_off, long ix_sb, long ix_sh,
         __global const uint *kh, long kh_off, __global const ulong *kbuf, long kb_off) {
    /* The sort buffer, or (slow path) one 256-bin histogram per 32 work-items: the keys of
     * one row mostly share their high bytes, so a single histogram would serialize every
     * work-item on one counter. */
    __local ulong big[KBUF_CAP > NSUB * 128 ? KBUF_CAP : NSUB * 128];
    __local uint *hist = (__local uint *)big;
    __local uint sh_prefix, sh_need;
    __local ulong tmp[WG];
    const int lid = (int)get_local_id(0);
    const int h = (int)get_group_id(1), b = (int)get_group_id(2);
    const int C = clamp(plan[plan_off + 7 * B + b], 0, max_cand);
    const int kk = min(top_k, C);
    const long row = (long)b * get_num_groups(1) + h;
    __global const int *cd = cand + ca_off + b * ca_sb + h * ca_sh;
    __global int *out = idx + ix_off + b * ix_sb + h * ix_sh;
    const uint nbuf = kk > 0 ? kh[kh_off + row * KH_WORDS + KH_CNT + 1] : 0u;
    /* Fast path (the buffer holds the row's keys at or above the threshold bin) or the
     * exact radix select over the row; the barriers stay in uniform loops either way. */
#if TK_RANK
    /* Counting rank over a small buffer: entry e's rank = #entries smaller (all distinct:
     * the index is in the low bits); the kk best go to sel[rank], and each of them is
     * written at its rank among the selected candidate indices (= positions ascending). */
    __local uint sel[TK_RANK];
    const int rank_path = kk > 0 && nbuf <= TK_RANK;
    if (rank_path) {
        __global const ulong *kb0 = kbuf + kb_off + row * KBUF_CAP;
        for (int i = lid; i < (int)nbuf; i += WG)
            big[i] = kb0[i];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (rank_path)
        for (int i = lid; i < (int)nbuf; i += WG) {
            const ulong e = big[i];
            int r = 0;
            for (int l = 0; l < (int)nbuf; l++)
                r += big[l] < e;
            if (r < kk)
                sel[r] = (uint)e;
        }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (rank_path)
        for (int i = lid; i < kk; i += WG) {
            const uint ji = sel[i];
            int r = 0;
            for (int l = 0; l < kk; l++)
                r += sel[l] < ji;
            out[r] = cd[ji];
        }
    barrier(CLK_LOCAL_MEM_FENCE);
    const int fast = kk > 0 && nbuf <= KBUF_CAP && !rank_path;
    const int done_fast = rank_path || fast;
#else
    const int fast = kk > 0 && nbuf <= KBUF_CAP;
    const int done_fast = fast;
#endif
    int n = fast ? 1 : 0;
    while (fast && n < (int)nbuf)
        n <<= 1;
    __global const ulong *kb = kbuf + kb_off + row * KBUF_CAP;
    for (int i = lid; i < n; i += WG)
        big[i] = i < (int)nbuf ? kb[i] : ~(ulong)0;
    barrier(CLK_LOCAL_MEM_FENCE);
    pkr_bitonic(big, n); /* the first kk: the top-k, ties by lowest index */
    int n2 = fast ? 1 : 0;
    while (fast && n2 < kk)
        n2 <<= 1;
    for (int i = lid; i < n2; i += WG) /* in place: each entry by one work-item */
        big[i] = i < kk ? (big[i] & 0xffffffffu) : ~(ulong)0;
    barrier(CLK_LOCAL_MEM_FENCE);
    pkr_bitonic(big, n2); /* candidate indices ascending = positions ascending */
    for (int i = lid; i < (fast ? kk : 0); i += WG)
        out[i] = cd[(int)big[i]];
    barrier(CLK_LOCAL_MEM_FENCE);
    const int ks = done_fast ? 0 : kk; /* what the radix select takes */
    {
        __global const float *s = cs + cs_off + b * cs_sb + h * cs_sh;
        uint prefix = 0, mask = 0, need = (uint)ks;
        if (ks > 0) {
            for (int shift = 24; shift >= 0; shift -= 8) {
                for (int i = lid; i < NSUB * 256; i += WG)
                    hist[i] = 0;
                barrier(CLK_LOCAL_MEM_FENCE);
                __local uint *mine = hist + (lid / 32) * 256;
                for (int j = lid; j < C; j += WG) {
                    const uint key = pkr_key(s[j]);
                    if ((key & mask) == prefix)
                        atomic_inc(&mine[(key >> shift) & 0xffu]);
                }
                barrier(CLK_LOCAL_MEM_FENCE);
#if WG >= 256
                { /* bins in descending order, one per work-item: the bin where the count of
                   * larger keys reaches `need` */
                    const int v = 255 - lid;
                    uint x = 0;
                    if (lid < 256)
                        for (int q = 0; q < NSUB; q++)
                            x += hist[q * 256 + v];
                    ulong tot;
                    const ulong above = pkr_scan(tmp, x, &tot);
                    if (lid < 256 && above < need && above + x >= need) {
                        sh_prefix = prefix | ((uint)v << shift);
                        sh_need = need - (uint)above;
                    }
                }
#else
                if (lid == 0) {
                    uint cum = 0;
                    for (int v = 255; v >= 0; v--) {
                        uint x = 0;
                        for (int q = 0; q < NSUB; q++)
                            x += hist[q * 256 + v];
                        if (cum + x >= need) {
                            sh_prefix = prefix | ((uint)v << shift);
                            sh_need = need - cum;
                            break;
                        }
                        cum += x;
                    }
                }
#endif
                barrier(CLK_LOCAL_MEM_FENCE);
                prefix = sh_prefix;
                need = sh_need;
                mask |= 0xffu << shift;
            }
        }
        /* prefix: the kk-th largest key; need: how many of its ties to take (first ones). */
        const int per = (C + WG - 1) / WG;
        const int j0 = lid * per, j1 = min(C, j0 + per);
        uint gt = 0, eq = 0;
        if (ks > 0)
            for (int j = j0; j < j1; j++) {
                const uint key = pkr_key(s[j]);
                gt += key > prefix;
                eq += key == prefix;
            }
        ulong total;
        const ulong ex = pkr_scan(tmp, ((ulong)gt << 32) | eq, &total);
        uint gt_run = (uint)(ex >> 32), eq_run = (uint)(ex & 0xffffffffu);
        if (ks > 0)
            for (int j = j0; j < j1; j++) {
                const uint key = pkr_key(s[j]);
                const int isgt = key > prefix, iseq = key == prefix;
                if (isgt || (iseq && eq_run < need))
                    out[gt_run + min(eq_run, need)] = cd[j];
                gt_run += isgt;
                eq_run += iseq;
            }
    }
    for (int j = kk + lid; j < top_k; j += WG)
        out[j] = -1;
}
