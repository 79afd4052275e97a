/* KV compaction (SPEC §2.4): gather rows of a [B, H, L, D] tensor by an index list into
 * a dense [B, H, Lout, D] tensor; host side in host/compact.c.
 *
 * -D: ESIZE (element bytes: 1, 2 or 4; the copy is a bit copy), CWG (work-group size of
 * compact_lengths and compact_copy, a power of two), PER (elements each work-item of
 * compact_inplace holds per chunk; that kernel takes any work-group size). */

/* Bit of the optional flags word (same value as in include/clkv/select.h). */
#define CLKV_COMPACT_FLAG_NOT_ASCENDING 1

#if ESIZE == 4
#define ELEM uint
#elif ESIZE == 2
#define ELEM ushort
#else
#define ELEM uchar
#endif

/* Per row: m = clamp(counts[b, h], 0, K), or (no counts) the position of the first
 * negative index (K if none). Written to m_out[row] and, if wanted, new_len[b, h].
 * check_ascending (some tensor is compacted in place): a row whose first m indices are
 * not strictly ascending inside [0, L) gets m_out = 0 (nothing copied: in place the row
 * stays as it was), new_len untouched, and CLKV_COMPACT_FLAG_NOT_ASCENDING ORed into
 * flags[0] when has_flags. Global: (CWG, rows). */
__kernel void compact_lengths(__global const int *idx, long i_off, long i_sb, long i_sh, int K,
                              __global const int *counts, long c_off, long c_sb, long c_sh,
                              int has_counts, __global int *new_len, long n_off, long n_sb,
                              long n_sh, int has_new_len, int H, __global int *m_out,
                              int check_ascending, int L, __global int *flags, long f_off,
                              int has_flags) {
    __local int first, bad;
    const uint row = get_global_id(1);
    const uint lid = get_local_id(0);
    const int b = (int)(row / (uint)H), h = (int)(row % (uint)H);
    __global const int *p = idx + i_off + b * i_sb + h * i_sh;
    if (lid == 0) {
        first = K;
        bad = 0;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (!has_counts) {
        for (int i = (int)lid; i < K; i += CWG)
            if (p[i] < 0) {
                atomic_min(&first, i);
                break;
            }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    int m = has_counts ? clamp(counts[c_off + b * c_sb + h * c_sh], 0, K) : first;
    if (check_ascending) {
        for (int i = (int)lid; i < m; i += CWG) {
            const int j = p[i];
            if (j < 0 || j >= L || (i > 0 && j <= p[i - 1])) {
                bad = 1; /* benign race: every writer stores 1 */
                break;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid != 0)
        return;
    if (bad) {
        m_out[row] = 0;
        if (has_flags)
            atomic_or(flags + f_off, CLKV_COMPACT_FLAG_NOT_ASCENDING);
        return;
    }
    m_out[row] = m;
    if (has_new_len)
        new_len[n_off + b * n_sb + h * n_sh] = m;
}

/* dst[b, h, i, :] = src[b, h, idx[b, h, i], :] for i < m[row] and a valid index.
 * Global: (CWG, K, rows), one work-group per destination row. */
__kernel void compact_copy(__global const ELEM *src, long s_off, long s_sb, long s_sh, long s_sl,
                           __global ELEM *dst, long d_off, long d_sb, long d_sh, long d_sl,
                           __global const int *idx, long i_off, long i_sb, long i_sh,
                           __global const int *m_in, int L, int D, int H) {
    const uint i = get_global_id(1);
    const uint row = get_global_id(2);
    const uint lid = get_local_id(0);
    if ((int)i >= m_in[row])
        return;
    const int b = (int)(row / (uint)H), h = (int)(row % (uint)H);
    const int j = idx[i_off + b * i_sb + h * i_sh + i];
    if (j < 0 || j >= L)
        return;
    __global const ELEM *s = src + s_off + b * s_sb + h * s_sh + j * s_sl;
    __global ELEM *d = dst + d_off + b * d_sb + h * d_sh + (long)i * d_sl;
    for (int e = (int)lid; e < D; e += CWG)
        d[e] = s[e];
}

/* In place (dst and src are the same view): dst[b, h, i, :] = src[b, h, idx[b, h, i], :]
 * for i < m[row], with idx strictly ascending (checked by compact_lengths, which sets m =
 * 0 otherwise), hence i <= idx[i]. One work-group per row walks the row's m * D
 * destination elements in ascending chunks of (work-group size) * PER: every work-item loads its
 * elements of the chunk into registers, a barrier, then stores them. A store of chunk c
 * goes to rows <= the last row r of c, and every later load reads rows idx[i'] >= i' >= r
 * (row r itself only in elements c did not store), so no load sees a stored value and no
 * store overwrites a value not yet loaded. Global: (WG, rows), any work-group size WG. */
__kernel void compact_inplace(__global ELEM *buf, long off, long sb, long sh, long sl,
                              __global const int *idx, long i_off, long i_sb, long i_sh,
                              __global const int *m_in, int D, int H) {
    const uint row = get_global_id(1);
    const int lid = (int)get_local_id(0);
    const int wg = (int)get_local_size(0);
    const int m = m_in[row];
    const int b = (int)(row / (uint)H), h = (int)(row % (uint)H);
    __global const int *p = idx + i_off + b * i_sb + h * i_sh;
    __global ELEM *base = buf + off + b * sb + h * sh;
    const long total = (long)m * D;
    for (long c0 = 0; c0 < total; c0 += (long)wg * PER) {
        ELEM val[PER];
        for (int u = 0; u < PER; u++) {
            const long t = c0 + (long)u * wg + lid;
            if (t < total) {
                const int i = (int)(t / D), e = (int)(t % D);
                const int j = p[i];
                if (j != i) /* rows already in place (e.g. a kept prefix) are not moved */
                    val[u] = base[(long)j * sl + e];
            }
        }
        barrier(CLK_GLOBAL_MEM_FENCE);
        for (int u = 0; u < PER; u++) {
            const long t = c0 + (long)u * wg + lid;
            if (t < total) {
                const int i = (int)(t / D), e = (int)(t % D);
                if (p[i] != i)
                    base[(long)i * sl + e] = val[u];
            }
        }
    }
}
