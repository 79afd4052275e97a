/* Top-k selection per (b, h) row (SPEC §2.4), host side in host/select.c.
 *
 * Keys: a score maps to an order-preserving uint32 (larger key = better): -0.0 becomes
 * +0.0, the sign bit is flipped for non-negatives and all bits inverted for negatives;
 * SELECT_SMALLEST inverts the key; NaN maps to 0, below every number in both modes.
 * Numbers never map to 0 or 0xFFFFFFFF (the keys of -inf / +inf are 0x007FFFFF /
 * 0xFF800000, or the inverse), so T = 0xFFFFFFFF selects nothing.
 *
 * Row count: c = min(k_row, n) with k_row = k, k_per_row[b, h] clamped to [0, k], or (has_rule,
 * clkv_keep_set) the keep rule clkv_keep_rule(n) of common.cl.
 *
 * Row state (STATE_WORDS uints per row in the workspace): [0] prefix / threshold key T,
 * [1] rank still wanted inside the prefix (after the last pass: ties at T to take),
 * [2] c = min(k_row, n), [3] done (1: T and take are final), [4] arrival counter of the
 * row's chunk work-groups (0 between kernels).
 *
 * Pipeline (5 kernels): init; 3 radix passes of 11/11/10 bits (hist); count (per chunk:
 * keys > T, keys == T). Rows are split into chunks of CHUNK elements, one work-group per
 * (chunk, row). The per-row step after a pass (the digit scan after hist, the exclusive
 * scan of the chunk counts after count) is done by the LAST work-group of the row to
 * finish (threadfence-reduction pattern: each work-group publishes its results, fences,
 * and counts itself in with an atomic; the one that sees nchunks - 1 reads everything
 * back with atomics), which saves a launch per pass. Then write (ordered compaction,
 * position order).
 *
 * -D: SEL_WG (work-group size, power of two <= 256), SELECT_SMALLEST (0/1),
 * PER_ITEM (consecutive elements per work-item in the write kernel).
 */

#define BINS 2048
#define STATE_WORDS 8

/* Orders this work-item's earlier global writes and atomics before its later ones,
 * device-wide (CUDA __threadfence). */
inline void sel_fence(void) {
#ifdef CLKV_NVIDIA_PTX
    asm volatile("membar.gl;" ::: "memory");
#else
    mem_fence(CLK_GLOBAL_MEM_FENCE);
#endif
}

/* Every work-item of a chunk work-group calls it after its global writes: returns 1 in
 * the whole work-group iff it is the last of the row's nchunks work-groups to arrive
 * (the counter is then reset for the next kernel). flag is a __local uint. */
inline int sel_arrive(__global uint *counter, uint nchunks, __local uint *flag) {
    barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
    if (get_local_id(0) == 0) {
        sel_fence();
        const uint prev = atomic_inc(counter);
        const uint last = prev == nchunks - 1u;
        if (last)
            atomic_xchg(counter, 0u);
        *flag = last;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const int last = *flag != 0u;
    if (last)
        sel_fence();
    return last;
}

inline uint sel_key(float f) {
    uint u = as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return 0u;
    if (u == 0x80000000u)
        u = 0u;
    uint k = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
#if SELECT_SMALLEST
    k = ~k;
#endif
    return k;
}

/* Exclusive prefix sum of x over the work-group; *total receives the sum. Every
 * work-item must call it. s has SEL_WG entries. */
inline uint sel_scan(uint x, __local uint *s, uint *total) {
    const uint lid = get_local_id(0);
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
}

__kernel void select_init(__global const int *lens, long len_off, int has_len, int max_len,
                          __global const int *kbuf, long k_off, long k_sb, long k_sh, int has_krow,
                          int K, int H, __global uint *ws, long st_off, long h_off, int has_rule,
                          ulong ratio_bits, float ratio_f, long budget, long window) {
    __global uint *state = ws + st_off, *hist = ws + h_off;
    const uint row = get_global_id(1);
    const uint lid = get_local_id(0);
    for (uint i = lid; i < BINS; i += SEL_WG)
        hist[(size_t)row * BINS + i] = 0u;
    if (lid != 0)
        return;
    const int b = (int)(row / (uint)H), h = (int)(row % (uint)H);
    int n = max_len;
    if (has_len)
        n = clamp(lens[len_off + b], 0, max_len);
    int kr = K;
    if (has_rule) /* the keep-set's own count (clkv_keep_set) */
        kr = (int)min(clkv_keep_rule(n, ratio_bits, ratio_f, budget, window), (long)K);
    else if (has_krow)
        kr = clamp(kbuf[k_off + b * k_sb + h * k_sh], 0, K);
    const int c = min(kr, n);
    __global uint *st = state + (size_t)row * STATE_WORDS;
    st[2] = (uint)c;
    st[4] = 0u;
    if (c == 0) { /* nothing: T above every key */
        st[0] = 0xffffffffu;
        st[1] = 0u;
        st[3] = 1u;
    } else if (c == n) { /* everything: T = 0 (lowest key), take all ties */
        st[0] = 0u;
        st[1] = (uint)n;
        st[3] = 1u;
    } else {
        st[0] = 0u;
        st[1] = (uint)c;
        st[3] = 0u;
    }
}

/* Local histogram increment. On NVIDIA the lanes of a warp holding the same bin add once
 * (match.any): pass 1 sees few distinct exponents, whose bins would otherwise serialize.
 * bin == BINS means "no increment"; every lane of the warp must call it (uniform loop). */
inline void sel_hist_add(__local uint *lh, uint bin) {
#ifdef CLKV_NVIDIA_PTX
    uint peers, lane;
    asm volatile("match.any.sync.b32 %0, %1, 0xffffffff;" : "=r"(peers) : "r"(bin));
    asm("mov.u32 %0, %%laneid;" : "=r"(lane));
    if (bin < BINS && (peers & ((1u << lane) - 1u)) == 0u)
        atomic_add(&lh[bin], (uint)popcount(peers));
#else
    if (bin < BINS)
        atomic_inc(&lh[bin]);
#endif
}

/* Histogram of a tile of SEL_WG * PER_ITEM keys starting at t0 (item lid: keys
 * t0 + j * SEL_WG + lid, coalesced): all PER_ITEM loads are issued before the first
 * increment (one dependent load per iteration would leave a work-group a few KiB in
 * flight). Keys whose bits above `mask` differ from prefix are not counted. */
inline void sel_hist_tile(__global const float *p, long t0, long end, uint prefix, uint mask,
                          uint shift, uint dmask, __local uint *lh) {
    const uint lid = get_local_id(0);
    uint keys[PER_ITEM];
    _Pragma("unroll") for (int j = 0; j < PER_ITEM; j++) {
        const long i = t0 + (long)j * SEL_WG + lid;
        keys[j] = i < end ? sel_key(p[i]) : 0u;
    }
    _Pragma("unroll") for (int j = 0; j < PER_ITEM; j++) {
        const long i = t0 + (long)j * SEL_WG + lid;
        const uint bin =
            (i < end && (keys[j] & mask) == prefix) ? (keys[j] >> shift) & dmask : BINS;
        sel_hist_add(lh, bin);
    }
}

/* Finds the digit holding the wanted rank (counting from the top), extends the prefix,
 * reduces the rank by the count above it, and clears the histogram (read and cleared
 * with atomics: other work-groups wrote it). Run by one work-group of the row. */
inline void sel_scan_digit(__global uint *st, __global uint *gh, int shift, int last,
                           __local uint *s) {
    const uint lid = get_local_id(0);
    const uint r = st[1];
    const uint per = BINS / SEL_WG;
    /* item lid owns positions lid*per .. lid*per + per - 1 of the descending bin order */
    uint h[BINS / SEL_WG];
    uint sum = 0u;
    for (uint j = 0; j < per; j++) {
        uint bin = BINS - 1u - (lid * per + j);
        h[j] = atomic_xchg(&gh[bin], 0u);
        sum += h[j];
    }
    uint total;
    uint cum = sel_scan(sum, s, &total);
    for (uint j = 0; j < per; j++) {
        uint bin = BINS - 1u - (lid * per + j);
        if (cum < r && r <= cum + h[j]) {
            st[0] |= bin << shift;
            st[1] = r - cum;
            if (last)
                st[3] = 1u;
        }
        cum += h[j];
    }
}

/* Histogram of the digit (key >> shift) & (2^nbits - 1) of the keys whose bits above
 * shift + nbits equal the row's prefix; the row's last work-group then scans it
 * (sel_scan_digit). Global: (nchunks * SEL_WG, rows). */
__kernel void select_hist(__global const float *scores, long s_off, long s_sb, long s_sh, int H,
                          __global uint *ws, long st_off, long h_off, __global const int *lens,
                          long len_off, int has_len, int max_len, int chunk, int nchunks, int shift,
                          int nbits, int last) {
    __local uint lh[BINS];
    __local uint s[SEL_WG];
    __local uint flag;
    __global uint *state = ws + st_off;
    __global uint *hist = ws + h_off;
    const uint row = get_global_id(1);
    const uint lid = get_local_id(0);
    __global uint *st = state + (size_t)row * STATE_WORDS;
    if (st[3])
        return; /* uniform over the row: no work-group of it arrives */
    const int b = (int)(row / (uint)H), h = (int)(row % (uint)H);
    int n = max_len;
    if (has_len)
        n = clamp(lens[len_off + b], 0, max_len);
    const long start = (long)get_group_id(0) * chunk;
    const long end = min((long)n, start + chunk);
    __global uint *gh = hist + (size_t)row * BINS;
    if (start < end) { /* uniform over the work-group */
        for (uint i = lid; i < BINS; i += SEL_WG)
            lh[i] = 0u;
        barrier(CLK_LOCAL_MEM_FENCE);
        const uint prefix = st[0];
        const uint top = (uint)(shift + nbits);
        const uint mask = top >= 32u ? 0u : ~((1u << top) - 1u);
        const uint dmask = (1u << nbits) - 1u;
        __global const float *p = scores + s_off + b * s_sb + h * s_sh;
        /* uniform trip count (sel_hist_add needs whole warps) */
        for (long t0 = start; t0 < end; t0 += (long)SEL_WG * PER_ITEM)
            sel_hist_tile(p, t0, end, prefix, mask, (uint)shift, dmask, lh);
        barrier(CLK_LOCAL_MEM_FENCE);
        for (uint i = lid; i < BINS; i += SEL_WG) {
            uint v = lh[i];
            if (v)
                atomic_add(&gh[i], v);
        }
    }
    if (sel_arrive(st + 4, (uint)nchunks, &flag))
        sel_scan_digit(st, gh, shift, last, s);
}

/* Per row, by its last work-group: exclusive scans over the chunks of (selected count,
 * ties before), read back with atomics (other work-groups wrote them), and the row's
 * count. */
inline void sel_offsets(__global uint *st, __global uint *cc, int nchunks, __global int *counts,
                        long c_off, long c_sb, long c_sh, int has_counts, int b, int h,
                        __local uint *s) {
    const uint lid = get_local_id(0);
    const uint take = st[1];
    uint gt_base = 0u, eq_base = 0u;
    for (int t0 = 0; t0 < nchunks; t0 += SEL_WG) {
        const int j = t0 + (int)lid;
        __global uint *o = cc + (size_t)j * 2;
        uint gt = 0u, eq = 0u;
        if (j < nchunks) {
            gt = atomic_add(o, 0u);
            eq = atomic_add(o + 1, 0u);
        }
        uint tgt, teq;
        uint gt_ex = sel_scan(gt, s, &tgt) + gt_base;
        uint eq_ex = sel_scan(eq, s, &teq) + eq_base;
        if (j < nchunks) {
            o[0] = gt_ex + min(eq_ex, take); /* output offset of the chunk */
            o[1] = eq_ex;                    /* ties at T before the chunk */
        }
        gt_base += tgt;
        eq_base += teq;
    }
    if (has_counts && lid == 0)
        counts[c_off + b * c_sb + h * c_sh] = (int)st[2];
}

/* Per chunk: the number of keys > T and == T; the row's last work-group then turns them
 * into output offsets (sel_offsets). Global: (nchunks * SEL_WG, rows). */
__kernel void select_count(__global const float *scores, long s_off, long s_sb, long s_sh, int H,
                           __global uint *ws, long st_off, long cc_off, __global const int *lens,
                           long len_off, int has_len, int max_len, int chunk, int nchunks,
                           __global int *counts, long c_off, long c_sb, long c_sh, int has_counts) {
    __local uint s[SEL_WG];
    __local uint flag;
    __global uint *state = ws + st_off;
    __global uint *cc = ws + cc_off;
    const uint row = get_global_id(1);
    const uint lid = get_local_id(0);
    const int b = (int)(row / (uint)H), h = (int)(row % (uint)H);
    int n = max_len;
    if (has_len)
        n = clamp(lens[len_off + b], 0, max_len);
    const long start = (long)get_group_id(0) * chunk;
    const long end = min((long)n, start + chunk);
    __global uint *st = state + (size_t)row * STATE_WORDS;
    const uint T = st[0];
    __global const float *p = scores + s_off + b * s_sb + h * s_sh;
    uint gt = 0u, eq = 0u;
    for (long t0 = start; t0 < end; t0 += (long)SEL_WG * PER_ITEM) {
        uint keys[PER_ITEM];
        _Pragma("unroll") for (int j = 0; j < PER_ITEM; j++) {
            const long i = t0 + (long)j * SEL_WG + lid;
            keys[j] = i < end ? sel_key(p[i]) : 0u;
        }
        _Pragma("unroll") for (int j = 0; j < PER_ITEM; j++) {
            if (t0 + (long)j * SEL_WG + lid < end) {
                gt += keys[j] > T;
                eq += keys[j] == T;
            }
        }
    }
    uint tgt, teq;
    sel_scan(gt, s, &tgt);
    sel_scan(eq, s, &teq);
    __global uint *rcc = cc + (size_t)row * nchunks * 2;
    if (lid == 0) {
        rcc[get_group_id(0) * 2] = tgt;
        rcc[get_group_id(0) * 2 + 1] = teq;
    }
    if (sel_arrive(st + 4, (uint)nchunks, &flag))
        sel_offsets(st, rcc, nchunks, counts, c_off, c_sb, c_sh, has_counts, b, h, s);
}

/* Ordered compaction of [start, end) of a row: writes the indices of the keys > T and of
 * the first `take` ties at T (counting eq_before ties before start) at dst[out ..], in
 * position order. Tiles of SEL_WG * PER_ITEM elements; item lid owns PER_ITEM consecutive
 * ones. gt and eq counts of a tile are < 2^16, packed into one scan. Every work-item must
 * call it. */
inline void sel_write_range(__global const float *p, long start, long end, uint T, uint take,
                            uint out, uint eq_before, __global int *dst, __local uint *s) {
    const uint lid = get_local_id(0);
    for (long t0 = start; t0 < end; t0 += (long)SEL_WG * PER_ITEM) {
        const long i0 = t0 + (long)lid * PER_ITEM;
        uint keys[PER_ITEM];
        uint gt = 0u, eq = 0u;
        for (int j = 0; j < PER_ITEM; j++) {
            long i = i0 + j;
            uint key = i < end ? sel_key(p[i]) : 0u;
            keys[j] = key;
            if (i < end) {
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
            long i = i0 + j;
            if (i >= end)
                break;
            uint key = keys[j];
            int sel = key > T;
            if (key == T) {
                sel = eq_rank < take;
                eq_rank++;
            }
            if (sel)
                dst[pos++] = (int)i;
        }
        uint tgt = tot & 0xffffu, teq = tot >> 16;
        out += tgt + (min(eq_before + teq, take) - min(eq_before, take));
        eq_before += teq;
    }
}

/* Ordered compaction: each work-group writes its chunk's selected indices at the
 * chunk's offset, in position order; then fills the row's slots [c, K) with -1.
 * Global: (nchunks * SEL_WG, rows). */
__kernel void select_write(__global const float *scores, long s_off, long s_sb, long s_sh, int H,
                           __global const uint *ws, long st_off, long cc_off,
                           __global const int *lens, long len_off, int has_len, int max_len,
                           int chunk, int nchunks, __global int *idx, long i_off, long i_sb,
                           long i_sh, int K) {
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
    sel_write_range(p, start, end, T, take, cc[o], cc[o + 1], dst, s);
    for (long sl = (long)c + (long)g * SEL_WG + lid; sl < K; sl += (long)nchunks * SEL_WG)
        dst[sl] = -1;
}

/* The whole selection of one row in one work-group (rows short enough that one
 * work-group streams them faster than the multi-kernel pipeline launches; host/select.c
 * decides): c = min(k_row, n), three radix passes over the row with a local histogram,
 * the digit scans, then the ordered compaction, the -1 padding and the count.
 * Global: (SEL_WG, rows). */
__kernel void select_row(__global const float *scores, long s_off, long s_sb, long s_sh, int H,
                         __global const int *lens, long len_off, int has_len, int max_len,
                         __global const int *kbuf, long k_off, long k_sb, long k_sh, int has_krow,
                         int K, __global int *idx, long i_off, long i_sb, long i_sh,
                         __global int *counts, long c_off, long c_sb, long c_sh, int has_counts,
                         int has_rule, ulong ratio_bits, float ratio_f, long budget, long window) {
    __local uint lh[BINS];
    __local uint s[SEL_WG];
    __local uint res[2];
    const uint row = get_group_id(1);
    const uint lid = get_local_id(0);
    const int b = (int)(row / (uint)H), h = (int)(row % (uint)H);
    int n = max_len;
    if (has_len)
        n = clamp(lens[len_off + b], 0, max_len);
    int kr = K;
    if (has_rule) /* the keep-set's own count (clkv_keep_set) */
        kr = (int)min(clkv_keep_rule(n, ratio_bits, ratio_f, budget, window), (long)K);
    else if (has_krow)
        kr = clamp(kbuf[k_off + b * k_sb + h * k_sh], 0, K);
    const int c = min(kr, n);
    __global const float *p = scores + s_off + b * s_sb + h * s_sh;
    __global int *dst = idx + i_off + b * i_sb + h * i_sh;
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
            /* uniform trip count: sel_hist_add needs whole warps */
            for (long t0 = 0; t0 < n; t0 += (long)SEL_WG * PER_ITEM)
                sel_hist_tile(p, t0, (long)n, prefix, mask, shift, dmask, lh);
            barrier(CLK_LOCAL_MEM_FENCE);
            /* item lid owns positions lid*per .. lid*per + per - 1 of the descending order */
            const uint per = BINS / SEL_WG;
            uint hv[BINS / SEL_WG];
            uint sum = 0u;
            for (uint j = 0; j < per; j++) {
                hv[j] = lh[BINS - 1u - (lid * per + j)];
                sum += hv[j];
            }
            uint total;
            uint cum = sel_scan(sum, s, &total);
            for (uint j = 0; j < per; j++) {
                const uint bin = BINS - 1u - (lid * per + j);
                if (cum < r && r <= cum + hv[j]) {
                    res[0] = prefix | bin << shift;
                    res[1] = r - cum;
                }
                cum += hv[j];
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            prefix = res[0];
            r = res[1];
        }
        T = prefix;
        take = r;
    }
    sel_write_range(p, 0, (long)n, T, take, 0u, 0u, dst, s);
    for (long sl = (long)c + lid; sl < K; sl += SEL_WG)
        dst[sl] = -1;
    if (has_counts && lid == 0)
        counts[c_off + b * c_sb + h * c_sh] = c;
}
