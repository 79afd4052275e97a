/* Top-k selection per (b, h) row (SPEC §2.4), host side in host/select.c.
 *
 * Keys: a score maps to an order-preserving uint32 (larger key = better): -0.0 becomes
 * +0.0, the sign bit is flipped for non-negatives and all bits inverted for negatives;
 * the kernel argument key_flip = 0xFFFFFFFF (smallest first) inverts it (an argument, not
 * a -D: one program serves both orders); NaN maps to 0, below every number in both modes.
 * Numbers never map to 0 or 0xFFFFFFFF (the keys of -inf / +inf are 0x007FFFFF /
 * 0xFF800000, or the inverse), so T = 0xFFFFFFFF selects nothing.
 *
 * Row count: c = min(k_row, n) with k_row = k, k_per_row[b, h] clamped to [0, k], or (has_rule,
 * clkv_keep_set) the keep rule clkv_keep_rule(n) of common.cl. The selection is every key
 * > T plus the first `take` keys == T in position order, T the c-th best key.
 *
 * Chunked pipeline (3 kernels, rows split into chunks of `chunk` elements, one work-group
 * per (chunk, row)):
 *   select_hist1  histogram of the top H1_BITS key bits (local, then added into the row's
 *                 histogram in the context's zeroed counter buffer); the row's LAST
 *                 work-group to finish (threadfence-reduction pattern: each work-group
 *                 publishes, fences and counts itself in with an atomic) reads and clears
 *                 the histogram and finds the bin holding rank c.
 *   select_cand   per chunk: the keys above that bin are counted, the keys inside it (the
 *                 candidates) appended to the row's candidate list ({key, index}, any
 *                 order); the row's last work-group reads the list once into local memory
 *                 (up to CAND_LOCAL; longer lists are re-read from the workspace) and finds
 *                 T and `take` among the candidates (two 10-bit radix passes), their
 *                 per-chunk counts of keys > T and == T, and the per-chunk output offsets
 *                 (exclusive scans).
 *   select_write  ordered compaction (position order) and the -1 padding.
 * Scores are read 3 times plus the candidates (typically a few % of the row; all of it
 * when every score is equal). Rows with c == 0 or c == n skip the search (T fixed).
 *
 * Row state (STATE_WORDS uints per row in the workspace): [0] bin prefix, then T;
 * [1] rank still wanted inside the bin, then the ties at T to take; [2] c; [3] 1: T and
 * take already final (c == 0 or c == n). Counter buffer, CTR_WORDS per row, all zero
 * between calls: [0, H1_BINS) the histogram, CTR_ARRIVE1 / CTR_ARRIVE2 the arrival
 * counters of the two kernels, CTR_CAND the candidate count.
 *
 * 2-kernel chunked pipeline (rows of at most SORT_MAX_CH one-tile chunks; host/select.c
 * chooses): select_hist_sort (the histogram as select_hist1, besides each chunk's keys
 * sorted by their top-H1_BITS bin and its bin-start table; the row's last work-group
 * resolves T, take and the per-chunk offsets from the runs of the rank-c bin, see the
 * kernel), then select_write. Scores are read twice plus the candidates.
 *
 * select_row: the whole selection of one row in one work-group (short rows), the row
 * staged in local memory and held in registers (ROW_RES keys per work-item) or, for any
 * length, streamed from global memory in each pass (ROW_RES 0).
 *
 * -D: SEL_WG (work-group size, power of two <= 256; select_row up to 1024),
 * PER_ITEM (consecutive elements per work-item in the write kernel), FUSE_POOL (0/1:
 * select_hist1 / select_hist_sort / select_row first compute the scores from a scorer's
 * raw rows; the pooling mode and kernel size are the arguments pool / pool_k, see
 * clkv_pooled_score in common.cl, so every scorer's pooling shares one program), ROW_RES
 * (select_row's resident keys per work-item, 0 = streaming), SEL_AGG (0/1,
 * default 0; 1: warp-aggregated local histogram increments on NVIDIA), SEL_HREAD (0/1,
 * default 1: select_hist1's last work-group reads the row histogram in one batch instead
 * of an atomic exchange per bin), SEL_CG (0/1, default 1: cross-work-group reads with
 * ld.global.cg on NVIDIA instead of volatile loads).
 */

/* SEL_PIPE: the kernels a program holds (PoCL compiles every kernel of a program):
 * 1 select_row, 2 select_hist_sort + select_write, 3 select_hist1 + select_cand +
 * select_write, 0 (default) all of them. */
#ifndef SEL_PIPE
#define SEL_PIPE 0
#endif

#define BINS 2048 /* select_row: 11/11/10-bit passes */
#define STATE_WORDS 8
#define H1_BITS 12
#define H1_BINS 4096
#define H1_SHIFT 20  /* 32 - H1_BITS */
#define LO_BINS 1024 /* the candidates' two 10-bit passes */
#define CTR_WORDS 4100
#define CTR_ARRIVE1 4096
#define CTR_ARRIVE2 4097
#define CTR_CAND 4098
#define SEL_CW 256            /* chunks per round of the per-chunk candidate counts */
#define SEL_NOBIN 0xffffffffu /* sel_hist_add: no increment */
#define CAND_LOCAL 4096       /* candidates resolved in local memory (more: from the list) */
#define CAND_BATCH 8          /* candidate loads in flight per work-item */

/* Loads of data other work-groups of this launch wrote (after their fence and arrival):
 * past the non-coherent L1. NVIDIA with SEL_CG (default): ld.global.cg (cached in L2
 * only); otherwise volatile loads. */
#ifndef SEL_CG
#define SEL_CG 1
#endif
#if defined(CLKV_NVIDIA_PTX) && SEL_CG
inline uint sel_ld(__global const uint *p) {
    uint v;
    asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}
inline uint2 sel_ld2(__global const uint2 *p) {
    uint a, b;
    asm volatile("ld.global.cg.v2.u32 {%0, %1}, [%2];" : "=r"(a), "=r"(b) : "l"(p));
    return (uint2)(a, b);
}
#else
inline uint sel_ld(__global const uint *p) {
    return *(volatile __global const uint *)p;
}
inline uint2 sel_ld2(__global const uint2 *p) {
    return *(volatile __global const uint2 *)p;
}
#endif

/* Every work-item of a chunk work-group calls it after its global writes: returns 1 in
 * the whole work-group iff it is the last of the row's nchunks work-groups to arrive
 * (the counter is then reset for the next kernel). flag is a __local uint. */
inline int sel_arrive(__global uint *counter, uint nchunks, __local uint *flag) {
    barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
    if (get_local_id(0) == 0) {
        clkv_fence_device();
        const uint prev = atomic_inc(counter);
        const uint last = prev == nchunks - 1u;
        if (last)
            atomic_xchg(counter, 0u);
        *flag = last;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const int last = *flag != 0u;
    if (last)
        clkv_fence_device();
    return last;
}

inline uint sel_key(float f, uint flip) {
    uint u = as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return 0u;
    if (u == 0x80000000u)
        u = 0u;
    const uint k = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return k ^ flip;
}

/* Exclusive prefix sum of x over the work-group; *total receives the sum. Every
 * work-item must call it. s has SEL_WG entries. */
inline uint sel_scan(uint x, __local uint *s, uint *total) {
    const uint lid = get_local_id(0);
#if defined(CLKV_NVIDIA_PTX) && SEL_WG % 32 == 0
    /* warp scans, then the warp totals: 2 barriers instead of 2 log2(SEL_WG) + 2 */
    const uint w = lid >> 5, inc = clkv_warp_scan_u32(x);
    if ((lid & 31u) == 31u)
        s[w] = inc;
    barrier(CLK_LOCAL_MEM_FENCE);
    uint before = 0u, tot = 0u;
    for (uint i = 0; i < SEL_WG / 32; i++) {
        const uint t = s[i];
        before += i < w ? t : 0u;
        tot += t;
    }
    *total = tot;
    barrier(CLK_LOCAL_MEM_FENCE);
    return before + inc - x;
#else
    s[lid] = x;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint off = 1; off < SEL_WG; off <<= 1) {
        uint v = lid >= off ? s[lid - off] : 0u;
        barrier(CLK_LOCAL_MEM_FENCE);
        s[lid] += v;
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    uint incl = s[lid];
    *total = s[SEL_WG - 1];
    barrier(CLK_LOCAL_MEM_FENCE);
    return incl - x;
#endif
}

/* The row's count c = min(k_row, n) (see the top). */
inline int sel_row_count(int n, int b, int h, __global const int *kbuf, long k_off, long k_sb,
                         long k_sh, int has_krow, int K, int has_rule, ulong ratio_bits,
                         float ratio_f, long budget, long window) {
    int kr = K;
    if (has_rule) /* the keep-set's own count (clkv_keep_set) */
        kr = (int)min(clkv_keep_rule(n, ratio_bits, ratio_f, budget, window), (long)K);
    else if (has_krow)
        kr = clamp(kbuf[k_off + b * k_sb + h * k_sh], 0, K);
    return min(kr, n);
}

/* Local histogram increment. On NVIDIA (SEL_AGG) the lanes of a warp holding the same bin
 * add once (match.any): few distinct exponents would otherwise serialize on their bins.
 * bin == SEL_NOBIN means "no increment"; every lane of the warp must call it (uniform
 * loop). */
#ifndef SEL_AGG
#define SEL_AGG 0
#endif
#ifndef SEL_HREAD
#define SEL_HREAD 1
#endif
inline void sel_hist_add(__local uint *lh, uint bin) {
#if defined(CLKV_NVIDIA_PTX) && SEL_AGG
    uint peers, lane;
    asm volatile("match.any.sync.b32 %0, %1, 0xffffffff;" : "=r"(peers) : "r"(bin));
    asm("mov.u32 %0, %%laneid;" : "=r"(lane));
    if (bin != SEL_NOBIN && (peers & ((1u << lane) - 1u)) == 0u)
        atomic_add(&lh[bin], (uint)popcount(peers));
#else
    if (bin != SEL_NOBIN)
        atomic_inc(&lh[bin]);
#endif
}

/* Histogram of a tile of SEL_WG * PER_ITEM keys starting at t0 (item lid: keys
 * t0 + j * SEL_WG + lid, coalesced): all PER_ITEM loads are issued before the first
 * increment (one dependent load per iteration would leave a work-group a few KiB in
 * flight). Keys whose bits under `mask` differ from prefix are not counted. */
inline void sel_hist_tile(__global const float *p, long t0, long end, uint prefix, uint mask,
                          uint shift, uint dmask, __local uint *lh, uint key_flip) {
    const uint lid = get_local_id(0);
    uint keys[PER_ITEM];
    _Pragma("unroll") for (int j = 0; j < PER_ITEM; j++) {
        const long i = t0 + (long)j * SEL_WG + lid;
        keys[j] = i < end ? sel_key(p[i], key_flip) : 0u;
    }
    _Pragma("unroll") for (int j = 0; j < PER_ITEM; j++) {
        const long i = t0 + (long)j * SEL_WG + lid;
        const uint bin =
            (i < end && (keys[j] & mask) == prefix) ? (keys[j] >> shift) & dmask : SEL_NOBIN;
        sel_hist_add(lh, bin);
    }
}

/* In the local histogram lh[0, nbins) (nbins a multiple of SEL_WG), the bin holding rank
 * r (1-based, counted from the top bin down): res[0] = the bin, res[1] = r minus the keys
 * in the bins above it. Every work-item calls it; res is valid after it returns. */
inline void sel_find_digit(__local const uint *lh, uint nbins, uint r, __local uint *s,
                           __local uint *res) {
    const uint lid = get_local_id(0);
    const uint per = nbins / SEL_WG;
    /* item lid owns positions lid*per .. lid*per + per - 1 of the descending bin order */
    uint sum = 0u;
    for (uint j = 0; j < per; j++)
        sum += lh[nbins - 1u - (lid * per + j)];
    uint total;
    uint cum = sel_scan(sum, s, &total);
    for (uint j = 0; j < per; j++) {
        const uint bin = nbins - 1u - (lid * per + j);
        const uint hv = lh[bin];
        if (cum < r && r <= cum + hv) {
            res[0] = bin;
            res[1] = r - cum;
        }
        cum += hv;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}

/* The row's last work-group: its counter histogram rc[0, H1_BINS) (added into by the
 * row's work-groups, which fenced before arriving) into lh, one batched read past the
 * non-coherent L1 (H1_BINS / SEL_WG loads in flight per work-item, not one atomic round
 * trip each), and the nonzero bins cleared for the next call. lh is complete after a
 * barrier. */
inline void sel_hist_take(__global uint *rc, __local uint *lh) {
    const uint lid = get_local_id(0);
    uint hv[H1_BINS / SEL_WG];
    _Pragma("unroll") for (int j = 0; j < H1_BINS / SEL_WG; j++) {
        hv[j] = sel_ld(rc + lid + (uint)j * SEL_WG);
    }
    _Pragma("unroll") for (int j = 0; j < H1_BINS / SEL_WG; j++) {
        lh[lid + (uint)j * SEL_WG] = hv[j];
        if (hv[j])
            rc[lid + (uint)j * SEL_WG] = 0u;
    }
}

#if FUSE_POOL
#define POOL_HALO 127 /* pool_kernel <= 255 (host/score.c) */
#define POOL_TILE (SEL_WG * PER_ITEM + 2 * POOL_HALO)
#define POOL_NX ((POOL_TILE + SEL_WG - 1) / SEL_WG)
CLKV_POOLED_SCORE_DEF(sel_pooled_tile, __local, CLKV_IX_SAME)

/* Final scores of a tile's tokens i = t0 + j * SEL_WG + lid < wend from the scorer's raw row
 * (clkv_pooled_score's formula, as score_finalize) into v[j] and out[i]. The raw taps the
 * tile needs, [t0 - pool_k / 2, t0 + tile + pool_k / 2) within [0, max(P, wend)), are first
 * staged in tl with all loads in flight: pooled straight from global memory, each score's
 * taps were dependent round trips (60 % of select_hist1's stall samples at 128K, H200
 * profile). H200: select_hist_sort at 16K 22.3 -> 20.9 us; select_hist1 at 128K stayed at
 * 18.5 us (its flush, arrival and last work-group bind it). Every work-item calls it
 * (barriers); tl holds POOL_TILE floats. */
inline void sel_pool_tile(float *v, __global float *out, __global const float *rawrow, long t0,
                          long wend, int n, int P, long protect, int pool, int pool_k,
                          __local float *tl) {
    const int lid = (int)get_local_id(0);
    const long h = pool ? pool_k / 2 : 0;
    const long s0 = max(t0 - h, 0L), s1 = min(t0 + SEL_WG * PER_ITEM + h, max((long)P, wend));
    barrier(CLK_LOCAL_MEM_FENCE); /* the previous tile's readers are done */
    float x[POOL_NX];
    _Pragma("unroll") for (int k = 0; k < POOL_NX; k++) {
        const long i = s0 + k * SEL_WG + lid;
        x[k] = i < s1 ? rawrow[i] : 0.0f;
    }
    _Pragma("unroll") for (int k = 0; k < POOL_NX; k++) {
        if (s0 + k * SEL_WG + lid < s1)
            tl[k * SEL_WG + lid] = x[k];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    _Pragma("unroll") for (int j = 0; j < PER_ITEM; j++) {
        const long i = t0 + (long)j * SEL_WG + lid;
        v[j] = 0.0f;
        if (i < wend) {
            v[j] = sel_pooled_tile(tl, s0, (int)i, n, P, protect, pool, pool_k);
            out[i] = v[j];
        }
    }
}

/* The fused first kernel's tile (FUSE_POOL): final scores of [t0, wend) computed from the
 * scorer's raw row (sel_pool_tile) and written out; the keys of those below `end` (= n)
 * histogrammed like sel_hist_tile. */
inline void sel_pool_hist_tile(__global float *out, __global const float *rawrow, long t0, long end,
                               long wend, int n, int P, long protect, int pool, int pool_k,
                               __local uint *lh, __local float *tl, uint key_flip) {
    const uint lid = get_local_id(0);
    float v[PER_ITEM];
    sel_pool_tile(v, out, rawrow, t0, wend, n, P, protect, pool, pool_k, tl);
    _Pragma("unroll") for (int j = 0; j < PER_ITEM; j++) {
        const long i = t0 + (long)j * SEL_WG + lid;
        sel_hist_add(lh, i < end ? sel_key(v[j], key_flip) >> H1_SHIFT : SEL_NOBIN);
    }
}
#endif

#if SEL_PIPE == 0 || SEL_PIPE == 3
/* Kernel 1: histogram of the top H1_BITS bits of the chunk's keys into the row's counter
 * histogram; the row's last work-group finds the bin of rank c (see the top).
 * FUSE_POOL (clkv_evict_keep_set): the scores are first computed from the scorer's raw
 * rows (raw + raw_off + row * row_len; the scorer's pooling and protection, pool /
 * pool_k, W, excl, protect as score_finalize) and written to `scores` for every token
 * j < L; the grid then covers ceil(L / chunk) >= nchunks chunks, the ones past nchunks
 * only writing. Without FUSE_POOL the raw arguments are unused.
 * Global: (nchunks * SEL_WG, rows), FUSE_POOL: (ceil(L / chunk) * SEL_WG, rows). */
__kernel void select_hist1(__global float *scores, long s_off, long s_sb, long s_sh, int H,
                           __global const int *lens, long len_off, int has_len, int max_len,
                           __global const int *kbuf, long k_off, long k_sb, long k_sh, int has_krow,
                           int K, int has_rule, ulong ratio_bits, float ratio_f, long budget,
                           long window, __global uint *ws, long st_off, __global uint *ctr,
                           int chunk, int nchunks, __global const float *raw, long raw_off,
                           long row_len, int L, int W, int excl, long protect, int pool, int pool_k,
                           uint key_flip) {
    __local uint lh[H1_BINS];
    __local uint s[SEL_WG];
    __local uint res[2];
    __local uint flag;
#if FUSE_POOL
    __local float tl[POOL_TILE];
#endif
    const uint row = get_global_id(1);
    const uint lid = get_local_id(0);
    const uint g = get_group_id(0);
    const int b = (int)(row / (uint)H), h = (int)(row % (uint)H);
    int n = max_len;
    if (has_len)
        n = clamp(lens[len_off + b], 0, max_len);
    const int c = sel_row_count(n, b, h, kbuf, k_off, k_sb, k_sh, has_krow, K, has_rule, ratio_bits,
                                ratio_f, budget, window);
    __global uint *st = ws + st_off + (size_t)row * STATE_WORDS;
    __global float *p = scores + s_off + b * s_sb + h * s_sh;
    const long start = (long)g * chunk;
    const long end = min((long)n, start + chunk);
#if FUSE_POOL
    const long wend = min((long)L, start + chunk);
    __global const float *rawrow = raw + raw_off + (long)row * row_len;
    const int P = excl ? max(n - W, 0) : n;
#else
    (void)raw, (void)raw_off, (void)row_len, (void)L, (void)W, (void)excl, (void)protect,
        (void)pool, (void)pool_k;
    const long wend = end;
#endif
    if (c == 0 || c == n || (int)g >= nchunks) { /* uniform over the work-group */
#if FUSE_POOL
        for (long i = start + lid; i < wend; i += SEL_WG)
            p[i] = clkv_pooled_score(rawrow, 0, (int)i, n, P, protect, pool, pool_k);
#endif
        /* c == 0 or c == n (uniform over the row): T fixed, no search */
        if ((c == 0 || c == n) && g == 0 && lid == 0) {
            st[0] = c == 0 ? 0xffffffffu : 0u; /* nothing / everything (T = lowest key) */
            st[1] = c == 0 ? 0u : (uint)n;
            st[2] = (uint)c;
            st[3] = 1u;
        }
        return;
    }
    __global uint *rc = ctr + (size_t)row * CTR_WORDS;
    if (start < wend) { /* uniform over the work-group */
        for (uint i = lid; i < H1_BINS; i += SEL_WG)
            lh[i] = 0u;
        barrier(CLK_LOCAL_MEM_FENCE);
        /* uniform trip count (sel_hist_add needs whole warps) */
        for (long t0 = start; t0 < wend; t0 += (long)SEL_WG * PER_ITEM)
#if FUSE_POOL
            sel_pool_hist_tile(p, rawrow, t0, end, wend, n, P, protect, pool, pool_k, lh, tl,
                               key_flip);
#else
            sel_hist_tile(p, t0, end, 0u, 0u, H1_SHIFT, H1_BINS - 1u, lh, key_flip);
#endif
        barrier(CLK_LOCAL_MEM_FENCE);
        for (uint i = lid; i < H1_BINS; i += SEL_WG) {
            const uint v = lh[i];
            if (v)
                atomic_add(&rc[i], v);
        }
    }
    if (sel_arrive(rc + CTR_ARRIVE1, (uint)nchunks, &flag)) {
        /* read and clear the row's histogram (other work-groups added into it) */
#if SEL_HREAD
        sel_hist_take(rc, lh);
#else
        for (uint i = lid; i < H1_BINS; i += SEL_WG)
            lh[i] = atomic_xchg(&rc[i], 0u);
#endif
        barrier(CLK_LOCAL_MEM_FENCE);
        sel_find_digit(lh, H1_BINS, (uint)c, s, res);
        if (lid == 0) {
            st[0] = res[0] << H1_SHIFT;
            st[1] = res[1];
            st[2] = (uint)c;
            st[3] = 0u;
        }
    }
}

/* Candidate i of a row: {key, index}, from the local copy (use_local) or from the global
 * list (written by other work-groups of this launch: read past the non-coherent L1). */
inline uint2 sel_cand_get(int use_local, __local const uint2 *cl, __global const uint2 *cg,
                          uint i) {
    return use_local ? cl[i] : sel_ld2(cg + i);
}

/* Radix pass over the row's m candidates: histogram of (key >> shift) & (LO_BINS - 1) of
 * the keys whose bits under `mask` equal prefix. CAND_BATCH loads per work-item are
 * issued before their increments. */
inline void sel_cand_hist(int use_local, __local const uint2 *cl, __global const uint2 *cg, uint m,
                          uint prefix, uint mask, uint shift, __local uint *lh) {
    const uint lid = get_local_id(0);
    for (uint i = lid; i < LO_BINS; i += SEL_WG)
        lh[i] = 0u;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint i0 = 0; i0 < m; i0 += SEL_WG * CAND_BATCH) { /* uniform trip count */
        uint keys[CAND_BATCH];
        _Pragma("unroll") for (int u = 0; u < CAND_BATCH; u++) {
            const uint i = i0 + u * SEL_WG + lid;
            keys[u] = i < m ? sel_cand_get(use_local, cl, cg, i).x : 0u;
        }
        _Pragma("unroll") for (int u = 0; u < CAND_BATCH; u++) {
            const uint i = i0 + u * SEL_WG + lid;
            const uint bin = i < m && (keys[u] & mask) == prefix
                                 ? (keys[u] >> shift) & (LO_BINS - 1u)
                                 : SEL_NOBIN;
            sel_hist_add(lh, bin);
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}
#endif

#if SEL_PIPE == 0 || SEL_PIPE == 3
/* Kernel 2: per chunk, the keys above the row's bin (or, T final, > T and == T) into
 * cc[row][chunk] and the keys inside the bin appended to the row's candidate list
 * ({key, index} pairs); the row's last work-group then finds T and take among the
 * candidates (in local memory when at most CAND_LOCAL) and turns the chunk counts into
 * output offsets: cc[row][chunk] = {out offset, ties at T before the chunk}.
 * Global: (nchunks * SEL_WG, rows). */
__kernel void select_cand(__global const float *scores, long s_off, long s_sb, long s_sh, int H,
                          __global const int *lens, long len_off, int has_len, int max_len,
                          __global uint *ws, long st_off, long cc_off, long cand_off,
                          __global uint *ctr, int chunk, int nchunks, __global int *counts,
                          long c_off, long c_sb, long c_sh, int has_counts, uint key_flip) {
    __local uint lh[LO_BINS];
    __local uint gtl[SEL_CW], eql[SEL_CW];
    __local uint2 cl[CAND_LOCAL];
    __local uint s[SEL_WG];
    __local uint res[2];
    __local uint flag, lcnt, lbase;
    const uint row = get_global_id(1);
    const uint lid = get_local_id(0);
    const uint g = get_group_id(0);
    const int b = (int)(row / (uint)H), h = (int)(row % (uint)H);
    int n = max_len;
    if (has_len)
        n = clamp(lens[len_off + b], 0, max_len);
    __global uint *st = ws + st_off + (size_t)row * STATE_WORDS;
    const uint st0 = st[0], done = st[3];
    const uint dT = st0 >> H1_SHIFT; /* the bin (search rows) */
    __global uint *rc = ctr + (size_t)row * CTR_WORDS;
    __global uint *rcc = ws + cc_off + (size_t)row * nchunks * 2;
    __global uint2 *cand = (__global uint2 *)(ws + cand_off) + (size_t)row * max_len;
    __global const float *p = scores + s_off + b * s_sb + h * s_sh;
    const long start = (long)g * chunk;
    const long end = min((long)n, start + chunk);
    uint gt = 0u, eq = 0u;
    for (long t0 = start; t0 < end; t0 += (long)SEL_WG * PER_ITEM) { /* uniform */
        uint keys[PER_ITEM];
        _Pragma("unroll") for (int j = 0; j < PER_ITEM; j++) {
            const long i = t0 + (long)j * SEL_WG + lid;
            keys[j] = i < end ? sel_key(p[i], key_flip) : 0u;
        }
        uint mine = 0u;
        _Pragma("unroll") for (int j = 0; j < PER_ITEM; j++) {
            if (t0 + (long)j * SEL_WG + lid < end) {
                if (done) {
                    gt += keys[j] > st0;
                    eq += keys[j] == st0;
                } else {
                    gt += (keys[j] >> H1_SHIFT) > dT;
                    mine += (keys[j] >> H1_SHIFT) == dT;
                }
            }
        }
        if (!done) { /* uniform over the row: append this tile's candidates */
            if (lid == 0)
                lcnt = 0u;
            barrier(CLK_LOCAL_MEM_FENCE);
            uint at = mine ? atomic_add(&lcnt, mine) : 0u;
            barrier(CLK_LOCAL_MEM_FENCE);
            if (lid == 0)
                lbase = lcnt ? atomic_add(&rc[CTR_CAND], lcnt) : 0u;
            barrier(CLK_LOCAL_MEM_FENCE);
            at += lbase;
            _Pragma("unroll") for (int j = 0; j < PER_ITEM; j++) {
                const long i = t0 + (long)j * SEL_WG + lid;
                if (i < end && (keys[j] >> H1_SHIFT) == dT)
                    cand[at++] = (uint2)(keys[j], (uint)i);
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
    }
    uint tgt, teq;
    sel_scan(gt, s, &tgt);
    sel_scan(eq, s, &teq);
    if (lid == 0) {
        rcc[g * 2] = tgt;
        rcc[g * 2 + 1] = teq;
    }
    clkv_fence_device(); /* the candidates and counts before the arrival */
    if (!sel_arrive(rc + CTR_ARRIVE2, (uint)nchunks, &flag))
        return;

    /* the row's last work-group */
    uint T = st0, take = st[1];
    if (!done) {
        if (lid == 0)
            res[0] = atomic_xchg(&rc[CTR_CAND], 0u);
        barrier(CLK_LOCAL_MEM_FENCE);
        const uint m = res[0];
        barrier(CLK_LOCAL_MEM_FENCE);
        const int use_local = m <= CAND_LOCAL;
        if (use_local) { /* one batched read of the list */
            for (uint i0 = 0; i0 < m; i0 += SEL_WG * CAND_BATCH) {
                uint2 c[CAND_BATCH];
                _Pragma("unroll") for (int u = 0; u < CAND_BATCH; u++) {
                    const uint i = i0 + u * SEL_WG + lid;
                    c[u] = i < m ? sel_ld2(cand + i) : (uint2)(0u, 0u);
                }
                _Pragma("unroll") for (int u = 0; u < CAND_BATCH; u++) {
                    const uint i = i0 + u * SEL_WG + lid;
                    if (i < m)
                        cl[i] = c[u];
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        /* bits H1_SHIFT-1 .. 10, then 9 .. 0 (every candidate shares the top bits) */
        sel_cand_hist(use_local, cl, cand, m, 0u, 0u, 10u, lh);
        sel_find_digit(lh, LO_BINS, take, s, res);
        const uint prefix = st0 | res[0] << 10;
        const uint r2 = res[1];
        sel_cand_hist(use_local, cl, cand, m, prefix, 0xfffffc00u, 0u, lh);
        sel_find_digit(lh, LO_BINS, r2, s, res);
        T = prefix | res[0];
        take = res[1];
        /* per-chunk counts of the candidates > T and == T, SEL_CW chunks per round */
        uint gt_base = 0u, eq_base = 0u;
        for (int w0 = 0; w0 < nchunks; w0 += SEL_CW) {
            for (uint i = lid; i < SEL_CW; i += SEL_WG)
                gtl[i] = eql[i] = 0u;
            barrier(CLK_LOCAL_MEM_FENCE);
            for (uint i0 = 0; i0 < m; i0 += SEL_WG * CAND_BATCH) {
                uint2 c[CAND_BATCH];
                _Pragma("unroll") for (int u = 0; u < CAND_BATCH; u++) {
                    const uint i = i0 + u * SEL_WG + lid;
                    c[u] = i < m ? sel_cand_get(use_local, cl, cand, i) : (uint2)(0u, 0u);
                }
                _Pragma("unroll") for (int u = 0; u < CAND_BATCH; u++) {
                    const uint i = i0 + u * SEL_WG + lid;
                    const int ch = (int)(c[u].y / (uint)chunk) - w0;
                    if (i < m && ch >= 0 && ch < SEL_CW && c[u].x >= T)
                        atomic_inc(c[u].x > T ? &gtl[ch] : &eql[ch]);
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int t0 = w0; t0 < min(w0 + SEL_CW, nchunks); t0 += SEL_WG) {
                const int j = t0 + (int)lid;
                const int live = j < min(w0 + SEL_CW, nchunks);
                const uint cg = live ? sel_ld(rcc + j * 2) + gtl[j - w0] : 0u;
                const uint ce = live ? eql[j - w0] : 0u;
                uint tg, te;
                const uint g_ex = sel_scan(cg, s, &tg) + gt_base;
                const uint e_ex = sel_scan(ce, s, &te) + eq_base;
                if (live) {
                    rcc[j * 2] = g_ex + min(e_ex, take);
                    rcc[j * 2 + 1] = e_ex;
                }
                gt_base += tg;
                eq_base += te;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
    } else {
        uint gt_base = 0u, eq_base = 0u;
        for (int t0 = 0; t0 < nchunks; t0 += SEL_WG) {
            const int j = t0 + (int)lid;
            const uint cg = j < nchunks ? sel_ld(rcc + j * 2) : 0u;
            const uint ce = j < nchunks ? sel_ld(rcc + j * 2 + 1) : 0u;
            uint tg, te;
            const uint g_ex = sel_scan(cg, s, &tg) + gt_base;
            const uint e_ex = sel_scan(ce, s, &te) + eq_base;
            if (j < nchunks) {
                rcc[j * 2] = g_ex + min(e_ex, take);
                rcc[j * 2 + 1] = e_ex;
            }
            gt_base += tg;
            eq_base += te;
        }
    }
    if (lid == 0) {
        st[0] = T;
        st[1] = take;
        if (has_counts)
            counts[c_off + b * c_sb + h * c_sh] = (int)st[2];
    }
}
#endif

/* ---- select_hist_sort: the 2-kernel pipeline's first kernel (chunk = one tile) ---- */

#define SORT_TILE (SEL_WG * PER_ITEM) /* the chunk length of select_hist_sort */
#define SORT_MAX_CH 512               /* chunks per row (host: longer rows go 3-kernel) */
#define TAB_WORDS (H1_BINS / 2)       /* uints per chunk of the bin-start table */
/* one local array for both phases (uints): chunk phase: the histogram / bin starts
 * [0, H1_BINS), the sorted keys after it; tail: the candidate keys [0, CAND_LOCAL), the
 * 10-bit histogram (then the per-chunk counts), the runs' first candidate numbers and
 * starts */
#define SORT_TAIL_LMEM (CAND_LOCAL + LO_BINS + 2 * SORT_MAX_CH)
#define SORT_LMEM (SORT_TAIL_LMEM > H1_BINS + SORT_TILE ? SORT_TAIL_LMEM : H1_BINS + SORT_TILE)

/* The position of a key in its bin's run: lp[bin]++ (the old value). On NVIDIA (SEL_AGG)
 * the lanes of a warp holding the same bin take consecutive positions with one atomic.
 * Every lane of the warp must call it (uniform loop); bin == SEL_NOBIN: no position (the
 * result is meaningless). */
inline uint sel_bin_pos(__local uint *lp, uint bin) {
#if defined(CLKV_NVIDIA_PTX) && SEL_AGG
    uint peers, lane, base = 0u, b;
    asm volatile("match.any.sync.b32 %0, %1, 0xffffffff;" : "=r"(peers) : "r"(bin));
    asm("mov.u32 %0, %%laneid;" : "=r"(lane));
    const uint below = peers & ((1u << lane) - 1u);
    const uint leader = (uint)popcount((peers & (~peers + 1u)) - 1u); /* lowest peer lane */
    if (bin != SEL_NOBIN && below == 0u)
        base = atomic_add(&lp[bin], (uint)popcount(peers));
    asm volatile("shfl.sync.idx.b32 %0, %1, %2, 0x1f, 0xffffffff;"
                 : "=r"(b)
                 : "r"(base), "r"(leader));
    return b + (uint)popcount(below);
#else
    return bin != SEL_NOBIN ? atomic_inc(&lp[bin]) : 0u;
#endif
}

/* The run (chunk) of candidate i: the last j < nch with coff[j] <= i (coff ascending). */
inline uint sel_run_of(__local const uint *coff, uint nch, uint i) {
    uint lo = 0u, hi = nch;
    while (hi - lo > 1u) {
        const uint mid = (lo + hi) >> 1;
        if (coff[mid] <= i)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* Candidates [i0, i0 + cnt) of a row (cnt <= CAND_LOCAL; the concatenation of the chunks'
 * runs keys[j * chunk + cst[j] + (0 .. coff[j + 1] - coff[j]))) into cl[0, cnt), loads
 * batched. Every work-item calls it; cl is complete after a barrier. */
inline void sel_runs_read(__global const uint *keys, __local const uint *coff,
                          __local const uint *cst, uint nch, uint chunk, uint i0, uint cnt,
                          __local uint *cl) {
    const uint lid = get_local_id(0);
    for (uint b0 = 0; b0 < cnt; b0 += SEL_WG * CAND_BATCH) {
        uint v[CAND_BATCH];
        _Pragma("unroll") for (int u = 0; u < CAND_BATCH; u++) {
            const uint i = b0 + u * SEL_WG + lid;
            uint j = 0u;
            if (i < cnt)
                j = sel_run_of(coff, nch, i0 + i);
            v[u] = i < cnt ? sel_ld(keys + (size_t)j * chunk + cst[j] + (i0 + i - coff[j])) : 0u;
        }
        _Pragma("unroll") for (int u = 0; u < CAND_BATCH; u++) {
            const uint i = b0 + u * SEL_WG + lid;
            if (i < cnt)
                cl[i] = v[u];
        }
    }
}

#if SEL_PIPE == 0 || SEL_PIPE == 2
/* Kernel 1 of 2 (the host's choice for rows of at most SORT_MAX_CH chunks; chunk must be
 * SORT_TILE): per chunk, like select_hist1, the histogram of the top H1_BITS key bits
 * into the row's counter histogram; besides, the chunk's keys sorted by that bin,
 * descending (any order inside a bin), into its slot of the key buffer (ws + cand_off:
 * row r, chunk j at (r * nchunks + j) * chunk), and the start of each bin's run (the keys
 * in higher bins) into its bin-start table (ws + tab_off, TAB_WORDS uints per (row,
 * chunk), bins 2i / 2i + 1 in the low / high 16 bits of word i). The row's last
 * work-group then finds the bin b of rank c, the runs of b in every chunk (the
 * candidates), T and take among them (two 10-bit radix passes over local batches of
 * CAND_LOCAL candidates: one read when they fit), the per-chunk counts of candidates > T
 * and == T and from them (keys above b per chunk = the run start of b) the per-chunk
 * output offsets cc[row][chunk] = {out offset, ties at T before the chunk}, T, take and
 * the count. Rows with c == 0 or c == n write their fixed state and offsets directly.
 * FUSE_POOL as select_hist1. Then select_write. Global: as select_hist1. */
__kernel void select_hist_sort(__global float *scores, long s_off, long s_sb, long s_sh, int H,
                               __global const int *lens, long len_off, int has_len, int max_len,
                               __global const int *kbuf, long k_off, long k_sb, long k_sh,
                               int has_krow, int K, int has_rule, ulong ratio_bits, float ratio_f,
                               long budget, long window, __global uint *ws, long st_off,
                               __global uint *ctr, int chunk, int nchunks,
                               __global const float *raw, long raw_off, long row_len, int L, int W,
                               int excl, long protect, int pool, int pool_k, long cc_off,
                               long cand_off, long tab_off, __global int *counts, long c_off,
                               long c_sb, long c_sh, int has_counts, uint key_flip) {
    __local uint lm[SORT_LMEM];
    __local uint s[SEL_WG];
    __local uint res[2];
    __local uint flag;
#if FUSE_POOL
    __local float tl[POOL_TILE];
#endif
    const uint row = get_global_id(1);
    const uint lid = get_local_id(0);
    const uint g = get_group_id(0);
    const int b = (int)(row / (uint)H), h = (int)(row % (uint)H);
    int n = max_len;
    if (has_len)
        n = clamp(lens[len_off + b], 0, max_len);
    const int c = sel_row_count(n, b, h, kbuf, k_off, k_sb, k_sh, has_krow, K, has_rule, ratio_bits,
                                ratio_f, budget, window);
    __global uint *st = ws + st_off + (size_t)row * STATE_WORDS;
    __global uint *rcc = ws + cc_off + (size_t)row * nchunks * 2;
    __global float *p = scores + s_off + b * s_sb + h * s_sh;
    const long start = (long)g * chunk;
    const long end = min((long)n, start + chunk);
#if FUSE_POOL
    const long wend = min((long)L, start + chunk);
    __global const float *rawrow = raw + raw_off + (long)row * row_len;
    const int P = excl ? max(n - W, 0) : n;
#else
    (void)raw, (void)raw_off, (void)row_len, (void)L, (void)W, (void)excl, (void)protect,
        (void)pool, (void)pool_k;
#endif
    if (c == 0 || c == n || (int)g >= nchunks) { /* uniform over the work-group */
#if FUSE_POOL
        for (long i = start + lid; i < wend; i += SEL_WG)
            p[i] = clkv_pooled_score(rawrow, 0, (int)i, n, P, protect, pool, pool_k);
#endif
        /* c == 0 or c == n: T fixed (nothing / everything), every chunk its own offset */
        if ((c == 0 || c == n) && (int)g < nchunks && lid == 0) {
            rcc[g * 2] = c == 0 ? 0u : (uint)start;
            rcc[g * 2 + 1] = 0u;
            if (g == 0) {
                st[0] = c == 0 ? 0xffffffffu : 0u;
                st[1] = c == 0 ? 0u : (uint)n;
                st[2] = (uint)c;
                st[3] = 1u;
                if (has_counts)
                    counts[c_off + b * c_sb + h * c_sh] = c;
            }
        }
        return;
    }
    __global uint *rc = ctr + (size_t)row * CTR_WORDS;
    __global uint *skeys = ws + cand_off + (size_t)row * nchunks * chunk;
    __global uint *tab = ws + tab_off + (size_t)row * nchunks * TAB_WORDS;
    __local uint *lh = lm, *ls = lm + H1_BINS;
    for (uint i = lid; i < H1_BINS; i += SEL_WG)
        lh[i] = 0u;
    barrier(CLK_LOCAL_MEM_FENCE);
    /* the chunk's keys (one tile), then their histogram */
    uint keys[PER_ITEM], bins[PER_ITEM];
#if FUSE_POOL
    float v[PER_ITEM];
    sel_pool_tile(v, p, rawrow, start, wend, n, P, protect, pool, pool_k, tl);
#endif
    _Pragma("unroll") for (int j = 0; j < PER_ITEM; j++) {
        const long i = start + (long)j * SEL_WG + lid;
#if FUSE_POOL
        keys[j] = sel_key(v[j], key_flip);
#else
        keys[j] = i < end ? sel_key(p[i], key_flip) : 0u;
#endif
    }
    _Pragma("unroll") for (int j = 0; j < PER_ITEM; j++) {
        const long i = start + (long)j * SEL_WG + lid;
        bins[j] = i < end ? keys[j] >> H1_SHIFT : SEL_NOBIN;
        sel_hist_add(lh, bins[j]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    /* into the row's histogram; lh becomes the bins' run starts (descending bin order):
     * item lid owns the descending positions lid * per .. lid * per + per - 1 */
    {
        const uint per = H1_BINS / SEL_WG;
        uint sum = 0u, total;
        for (uint j = 0; j < per; j++)
            sum += lh[H1_BINS - 1u - (lid * per + j)];
        uint cum = sel_scan(sum, s, &total);
        for (uint j = 0; j < per; j++) {
            const uint bin = H1_BINS - 1u - (lid * per + j);
            const uint v = lh[bin];
            if (v)
                atomic_add(&rc[bin], v);
            lh[bin] = cum;
            cum += v;
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint i = lid; i < TAB_WORDS; i += SEL_WG)
        tab[(size_t)g * TAB_WORDS + i] = lh[2 * i] | lh[2 * i + 1] << 16;
    barrier(CLK_LOCAL_MEM_FENCE);
    _Pragma("unroll") for (int j = 0; j < PER_ITEM; j++) {
        const uint pos = sel_bin_pos(lh, bins[j]);
        if (bins[j] != SEL_NOBIN)
            ls[pos] = keys[j];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const uint clen = (uint)max(end - start, 0L);
    for (uint i = lid; i < clen; i += SEL_WG)
        skeys[(size_t)g * chunk + i] = ls[i];
    clkv_fence_device(); /* the keys, table and histogram before the arrival */
    if (!sel_arrive(rc + CTR_ARRIVE1, (uint)nchunks, &flag))
        return;

    /* the row's last work-group: the row histogram and the bin b holding rank c */
    sel_hist_take(rc, lh);
    barrier(CLK_LOCAL_MEM_FENCE);
    sel_find_digit(lh, H1_BINS, (uint)c, s, res);
    const uint bsel = res[0], rank = res[1];
    /* each chunk's run of bin bsel: cst = its start (= the chunk's keys above the bin),
     * coff = the run's first candidate number */
    __local uint *cl = lm, *lo = lm + CAND_LOCAL; /* over lh: sel_find_digit is done */
    __local uint *coff = lo + LO_BINS, *cst = coff + SORT_MAX_CH;
    const uint nch = (uint)nchunks, uchunk = (uint)chunk;
    uint m = 0u;
    for (uint j0 = 0; j0 < nch; j0 += SEL_WG) {
        const uint j = j0 + lid;
        uint a = 0u, e = 0u;
        const long cs = (long)j * chunk;
        if (j < nch && cs < n) {
            const uint wa = sel_ld(tab + (size_t)j * TAB_WORDS + (bsel >> 1));
            a = (bsel & 1u) ? wa >> 16 : wa & 0xffffu;
            if (bsel > 0u) {
                const uint we = sel_ld(tab + (size_t)j * TAB_WORDS + ((bsel - 1u) >> 1));
                e = ((bsel - 1u) & 1u) ? we >> 16 : we & 0xffffu;
            } else {
                e = (uint)min((long)chunk, (long)n - cs);
            }
        }
        uint tot;
        const uint ex = sel_scan(e - a, s, &tot) + m;
        if (j < nch) {
            coff[j] = ex;
            cst[j] = a;
        }
        m += tot;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    /* candidates in batches of CAND_LOCAL (one batch, read once, when they fit); passes
     * 0 and 1: bits H1_SHIFT-1 .. 10, then 9 .. 0 (every candidate shares the top bits),
     * pass 2: per-chunk counts of the candidates > T ([0, nch)) and == T ([SORT_MAX_CH,
     * ..)) */
    const uint nb = (m + CAND_LOCAL - 1u) / CAND_LOCAL;
    uint prefix = bsel << H1_SHIFT, r = rank, T = 0u, take = 0u;
    for (int pass = 0; pass < 3; pass++) {
        for (uint i = lid; i < LO_BINS; i += SEL_WG)
            lo[i] = 0u;
        for (uint bi = 0; bi < nb; bi++) {
            const uint i0 = bi * CAND_LOCAL, cnt = min(m - i0, (uint)CAND_LOCAL);
            if (pass == 0 || nb > 1u) {
                barrier(CLK_LOCAL_MEM_FENCE); /* cl free */
                sel_runs_read(skeys, coff, cst, nch, uchunk, i0, cnt, cl);
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            for (uint k0 = 0; k0 < cnt; k0 += SEL_WG) { /* uniform trip count */
                const uint i = k0 + lid;
                const uint key = i < cnt ? cl[i] : 0u;
                uint bin = SEL_NOBIN;
                if (i < cnt && pass == 0)
                    bin = (key >> 10) & (LO_BINS - 1u);
                else if (i < cnt && pass == 1 && (key & 0xfffffc00u) == prefix)
                    bin = key & (LO_BINS - 1u);
                else if (i < cnt && pass == 2 && key >= T)
                    bin = sel_run_of(coff, nch, i0 + i) + (key > T ? 0u : SORT_MAX_CH);
                sel_hist_add(lo, bin);
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (pass < 2) {
            sel_find_digit(lo, LO_BINS, r, s, res);
            prefix |= res[0] << (pass == 0 ? 10u : 0u);
            r = res[1];
            T = prefix;
            take = r;
        }
    }
    /* output offsets: exclusive scans over the chunks */
    uint gt_base = 0u, eq_base = 0u;
    for (uint j0 = 0; j0 < nch; j0 += SEL_WG) {
        const uint j = j0 + lid;
        const int live = j < nch;
        const uint cg = live ? cst[j] + lo[j] : 0u;
        const uint ce = live ? lo[SORT_MAX_CH + j] : 0u;
        uint tg, te;
        const uint g_ex = sel_scan(cg, s, &tg) + gt_base;
        const uint e_ex = sel_scan(ce, s, &te) + eq_base;
        if (live) {
            rcc[j * 2] = g_ex + min(e_ex, take);
            rcc[j * 2 + 1] = e_ex;
        }
        gt_base += tg;
        eq_base += te;
    }
    if (lid == 0) {
        st[0] = T;
        st[1] = take;
        st[2] = (uint)c;
        st[3] = 0u;
        if (has_counts)
            counts[c_off + b * c_sb + h * c_sh] = c;
    }
}
#endif

/* Ordered compaction of [start, end) of a row: writes the indices of the keys > T and of
 * the first `take` ties at T (counting eq_before ties before start) at dst[out ..], in
 * position order. Tiles of SEL_WG * PER_ITEM elements; item lid owns PER_ITEM consecutive
 * ones. gt and eq counts of a tile are < 2^16, packed into one scan. Every work-item must
 * call it. */
inline void sel_write_range(__global const float *p, long start, long end, uint T, uint take,
                            uint out, uint eq_before, __global int *dst, __local uint *s,
                            uint key_flip) {
    const uint lid = get_local_id(0);
    /* 32-bit positions from start (a row has fewer than 2^31 keys; unsigned, so the last
     * tile's end cannot overflow): select_write takes 58 registers instead of 65, so 4 of its
     * 256-wide work-groups fit a compute unit, not 3. H200, DropKV / SnapKV at 128K keys (8
     * rows of 64 chunks), two rounds: select_write 8.2-8.6 -> 7.4-7.8 us of device time; the
     * whole calls within their spread (2026-11-28, session 32). */
    __global const float *pr = p + start;
    const uint len = end > start ? (uint)(end - start) : 0u, first = (uint)start;
    for (uint t0 = 0u; t0 < len; t0 += SEL_WG * PER_ITEM) {
        const uint i0 = t0 + lid * PER_ITEM;
        uint keys[PER_ITEM];
        uint gt = 0u, eq = 0u;
        for (int j = 0; j < PER_ITEM; j++) {
            const uint i = i0 + j;
            const uint key = i < len ? sel_key(pr[i], key_flip) : 0u;
            keys[j] = key;
            if (i < len) {
                gt += key > T;
                eq += key == T;
            }
        }
        uint tot;
        uint ex = sel_scan(gt | (eq << 16), s, &tot);
        uint gt_ex = ex & 0xffffu, eq_ex = ex >> 16;
        /* ties already taken before this item, and the output position of its first pick */
        uint eq_rank = eq_before + eq_ex;
        uint pos = out + gt_ex + (min(eq_rank, take) - min(eq_before, take));
        for (int j = 0; j < PER_ITEM; j++) {
            const uint i = i0 + j;
            if (i >= len)
                break;
            uint key = keys[j];
            int sel = key > T;
            if (key == T) {
                sel = eq_rank < take;
                eq_rank++;
            }
            if (sel)
                dst[pos++] = (int)(first + i);
        }
        uint tgt = tot & 0xffffu, teq = tot >> 16;
        out += tgt + (min(eq_before + teq, take) - min(eq_before, take));
        eq_before += teq;
    }
}

#if SEL_PIPE != 1
/* Ordered compaction: each work-group writes its chunk's selected indices at the
 * chunk's offset, in position order; then fills the row's slots [c, K) with -1.
 * Global: (nchunks * SEL_WG, rows). */
__kernel void select_write(__global const float *scores, long s_off, long s_sb, long s_sh, int H,
                           __global const uint *ws, long st_off, long cc_off,
                           __global const int *lens, long len_off, int has_len, int max_len,
                           int chunk, int nchunks, __global int *idx, long i_off, long i_sb,
                           long i_sh, int K, uint key_flip) {
    __local uint s[SEL_WG];
    __global const uint *state = ws + st_off, *cc = ws + cc_off;
    const uint row = get_global_id(1);
    const uint lid = get_local_id(0);
    const uint g = get_group_id(0);
    const int b = (int)(row / (uint)H), h = (int)(row % (uint)H);
    int n = max_len;
    if (has_len)
        n = clamp(lens[len_off + b], 0, max_len);
    __global const uint *st = state + (size_t)row * STATE_WORDS;
    const uint T = st[0], take = st[1], c = st[2];
    const size_t o = ((size_t)row * nchunks + g) * 2;
    const long start = (long)g * chunk;
    const long end = min((long)n, start + chunk);
    __global const float *p = scores + s_off + b * s_sb + h * s_sh;
    __global int *dst = idx + i_off + b * i_sb + h * i_sh;
    sel_write_range(p, start, end, T, take, cc[o], cc[o + 1], dst, s, key_flip);
    for (long sl = (long)c + (long)g * SEL_WG + lid; sl < K; sl += (long)nchunks * SEL_WG)
        dst[sl] = -1;
}
#endif

#if SEL_PIPE == 0 || SEL_PIPE == 1
#ifndef ROW_RES
#define ROW_RES 0
#endif
#if ROW_RES && SEL_WG * ROW_RES > 65535
#error "ROW_RES: the write's packed 16-bit counts need SEL_WG * ROW_RES < 65536"
#endif
#if ROW_RES
#define ROW_CAP (SEL_WG * ROW_RES)
/* a row staged in local memory: element i at SEL_PAD(i), so that a warp's striped
 * (lanes at consecutive i) and blocked (lane t at t * ROW_RES + j, ROW_RES a power of two
 * up to 32) accesses hit distinct banks */
#define SEL_PAD(i) ((i) + ((i) >> 5))
CLKV_POOLED_SCORE_DEF(sel_pooled_local, __local, SEL_PAD)
/* select_row's ordered compaction from the resident keys: work-item lid holds positions
 * i0 .. i0 + ROW_RES - 1 (i0 = lid * ROW_RES) of the row, so one work-group scan of its
 * counts of keys > T and == T gives its first output slot. */
inline void sel_write_resident(const uint *kr, long i0, long end, uint T, uint take,
                               __global int *dst, __local uint *s) {
    uint gt = 0u, eq = 0u;
    _Pragma("unroll") for (int j = 0; j < ROW_RES; j++) {
        if (i0 + j < end) {
            gt += kr[j] > T;
            eq += kr[j] == T;
        }
    }
    uint tot;
    const uint ex = sel_scan(gt | (eq << 16), s, &tot);
    uint eq_rank = ex >> 16; /* ties at T before this work-item's keys */
    uint pos = (ex & 0xffffu) + min(eq_rank, take);
    _Pragma("unroll") for (int j = 0; j < ROW_RES; j++) {
        const uint key = kr[j];
        int sel = i0 + j < end && key > T;
        if (i0 + j < end && key == T) {
            sel = eq_rank < take;
            eq_rank++;
        }
        if (sel)
            dst[pos++] = (int)(i0 + j);
    }
}
#endif

/* The whole selection of one row in one work-group (rows short enough that one
 * work-group does them faster than the multi-kernel pipeline; host/select.c decides):
 * c = min(k_row, n), three radix passes (11 / 11 / 10 bits) with a local histogram and
 * the digit scans, then the ordered compaction, the -1 padding and the count.
 * ROW_RES > 0 (rows of at most SEL_WG * ROW_RES tokens): work-item lid holds the keys of
 * positions lid * ROW_RES .. + ROW_RES - 1 in registers, read once; the passes count
 * them from there. With FUSE_POOL the scores are first computed from the scorer's raw
 * row and written for every token j < L, as select_hist1 does (the raw arguments as
 * there; L <= SEL_WG * ROW_RES). ROW_RES 0: every pass streams the row from global
 * memory (any length; FUSE_POOL must be 0).
 * Global: (SEL_WG, rows). */
#if ROW_RES
#define SEL_ROW_ATTR __attribute__((reqd_work_group_size(SEL_WG, 1, 1)))
#else
#define SEL_ROW_ATTR
#endif
__kernel SEL_ROW_ATTR void
select_row(__global float *scores, long s_off, long s_sb, long s_sh, int H,
           __global const int *lens, long len_off, int has_len, int max_len,
           __global const int *kbuf, long k_off, long k_sb, long k_sh, int has_krow, int K,
           __global int *idx, long i_off, long i_sb, long i_sh, __global int *counts, long c_off,
           long c_sb, long c_sh, int has_counts, int has_rule, ulong ratio_bits, float ratio_f,
           long budget, long window, uint key_flip, __global const float *raw, long raw_off,
           long row_len, int L, int W, int excl, long protect, int pool, int pool_k) {
    __local uint lh[BINS];
    __local uint s[SEL_WG];
    __local uint res[2];
#if ROW_RES
    __local float rl[ROW_CAP + ROW_CAP / 32];
#endif
    const uint row = get_group_id(1);
    const uint lid = get_local_id(0);
    const int b = (int)(row / (uint)H), h = (int)(row % (uint)H);
    int n = max_len;
    if (has_len)
        n = clamp(lens[len_off + b], 0, max_len);
    const int c = sel_row_count(n, b, h, kbuf, k_off, k_sb, k_sh, has_krow, K, has_rule, ratio_bits,
                                ratio_f, budget, window);
    __global float *p = scores + s_off + b * s_sb + h * s_sh;
    __global int *dst = idx + i_off + b * i_sb + h * i_sh;
#if ROW_RES
    /* the row (FUSE_POOL: the raw row, then its scores) staged in local memory with
     * coalesced loads, then each work-item's ROW_RES consecutive keys into registers */
    const long i0 = (long)lid * ROW_RES;
    uint kr[ROW_RES];
#if FUSE_POOL
    __global const float *src = raw + raw_off + (long)row * row_len;
    const int P = excl ? max(n - W, 0) : n, sn = L;
#else
    (void)raw, (void)raw_off, (void)row_len, (void)L, (void)W, (void)excl, (void)protect,
        (void)pool, (void)pool_k;
    __global const float *src = p;
    const int sn = n;
#endif
    {
        float x[ROW_RES];
        _Pragma("unroll") for (int j = 0; j < ROW_RES; j++) {
            const int i = j * SEL_WG + (int)lid;
            x[j] = i < sn ? src[i] : 0.0f;
        }
        _Pragma("unroll") for (int j = 0; j < ROW_RES; j++) {
            rl[SEL_PAD(j * SEL_WG + (int)lid)] = x[j];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
#if FUSE_POOL
        /* the scores of tokens j < L, written out and over the raw row once all are made */
        _Pragma("unroll") for (int j = 0; j < ROW_RES; j++) {
            const int i = j * SEL_WG + (int)lid;
            x[j] = i < L ? sel_pooled_local(rl, 0, i, n, P, protect, pool, pool_k) : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        _Pragma("unroll") for (int j = 0; j < ROW_RES; j++) {
            const int i = j * SEL_WG + (int)lid;
            rl[SEL_PAD(i)] = x[j];
            if (i < L)
                p[i] = x[j];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
#endif
    }
    _Pragma("unroll") for (int j = 0; j < ROW_RES; j++) {
        kr[j] = sel_key(rl[SEL_PAD((int)i0 + j)], key_flip); /* positions >= n never count */
    }
#else
#if FUSE_POOL
#error "select_row: FUSE_POOL needs ROW_RES"
#endif
    (void)raw, (void)raw_off, (void)row_len, (void)L, (void)W, (void)excl, (void)protect,
        (void)pool, (void)pool_k;
#endif
    uint T = 0u, take = (uint)n; /* c == n: everything */
    if (c == 0) {
        T = 0xffffffffu;
        take = 0u;
    } else if (c < n) {
        uint prefix = 0u, r = (uint)c;
        for (int pass = 0; pass < 3; pass++) {
            const uint shift = pass == 0 ? 21u : pass == 1 ? 10u : 0u;
            const uint nbits = pass == 2 ? 10u : 11u;
            const uint top = shift + nbits;
            const uint mask = top >= 32u ? 0u : ~((1u << top) - 1u);
            const uint dmask = (1u << nbits) - 1u;
            for (uint i = lid; i < BINS; i += SEL_WG)
                lh[i] = 0u;
            barrier(CLK_LOCAL_MEM_FENCE);
#if ROW_RES
            _Pragma("unroll") for (int j = 0; j < ROW_RES; j++) {
                const uint bin =
                    i0 + j < n && (kr[j] & mask) == prefix ? (kr[j] >> shift) & dmask : SEL_NOBIN;
                sel_hist_add(lh, bin);
            }
#else
            /* uniform trip count: sel_hist_add needs whole warps */
            for (long t0 = 0; t0 < n; t0 += (long)SEL_WG * PER_ITEM)
                sel_hist_tile(p, t0, (long)n, prefix, mask, shift, dmask, lh, key_flip);
#endif
            barrier(CLK_LOCAL_MEM_FENCE);
            sel_find_digit(lh, BINS, r, s, res);
            prefix |= res[0] << shift;
            r = res[1];
        }
        T = prefix;
        take = r;
    }
#if ROW_RES
    sel_write_resident(kr, i0, (long)n, T, take, dst, s);
#else
    sel_write_range(p, 0, (long)n, T, take, 0u, 0u, dst, s, key_flip);
#endif
    for (long sl = (long)c + lid; sl < K; sl += SEL_WG)
        dst[sl] = -1;
    if (has_counts && lid == 0)
        counts[c_off + b * c_sb + h * c_sh] = c;
}
#endif
