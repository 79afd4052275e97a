/* KV compaction (SPEC §2.4): gather rows of a [B, H, L, D] tensor by an index list into
 * a dense [B, H, Lout, D] tensor; host side in host/compact.c.
 *
 * -D: ESIZE (element bytes: 1, 2 or 4; the copy is a bit copy), CWG (work-group size of
 * compact_lengths and compact_copy, a power of two). */

#if ESIZE == 4
#define ELEM uint
#elif ESIZE == 2
#define ELEM ushort
#else
#define ELEM uchar
#endif

/* Per row: m = clamp(counts[b, h], 0, K), or (no counts) the position of the first
 * negative index (K if none). Written to m_out[row] and, if wanted, new_len[b, h].
 * Global: (CWG, rows). */
__kernel void compact_lengths(__global const int *idx, long i_off, long i_sb, long i_sh, int K,
                              __global const int *counts, long c_off, long c_sb, long c_sh,
                              int has_counts, __global int *new_len, long n_off, long n_sb,
                              long n_sh, int has_new_len, int H, __global int *m_out) {
    __local int first;
    const uint row = get_global_id(1);
    const uint lid = get_local_id(0);
    const int b = (int)(row / (uint)H), h = (int)(row % (uint)H);
    if (lid == 0)
        first = K;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (!has_counts) {
        __global const int *p = idx + i_off + b * i_sb + h * i_sh;
        for (int i = (int)lid; i < K; i += CWG)
            if (p[i] < 0) {
                atomic_min(&first, i);
                break;
            }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid != 0)
        return;
    int m = has_counts ? clamp(counts[c_off + b * c_sb + h * c_sh], 0, K) : first;
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
