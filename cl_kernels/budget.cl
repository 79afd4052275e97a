/* Head-adaptive (AdaKV) budget allocation (SPEC §2.4), host side in host/budget.c.
 *
 * Per sequence b of one layer (n = its valid length, Hkv KV heads, per-head budget k,
 * per-head floor f):
 *   phase 1: every head h keeps its own best fh = min(f, n) tokens;
 *   phase 2: the remaining Hkv * min(k, n) - Hkv * fh slots go to the best remaining
 *            (h, j) of all heads, ordered by (score desc, token j asc, head h asc);
 *   output:  k_per_row[b, h] = how many of the kept (h, j) belong to head h.
 *
 * Both phases are exact threshold selections over 64-bit keys that are unique, so ties
 * need no ordered pass:
 *   score key  key32(s): order-preserving uint32 of the f32 score (larger = better;
 *              -0.0 == +0.0; NaN -> 0, below every number; numbers never map to
 *              0xFFFFFFFF);
 *   phase 1    key = key32(s[b,h,j]) << 32 | ~j                 (row (b, h), items j)
 *   phase 2    key = K32 << 32 | ~(j * Hkv + h), K32 = 0xFFFFFFFF for tokens kept in
 *              phase 1 (so they are always taken), key32(s[b,h,j]) otherwise
 *                                                                 (row b, items (h, j))
 * A row keeps the c items with the largest keys; the threshold T (the c-th largest key)
 * is found by an MSB-first radix select of six passes (11, 11, 10 bits of each word),
 * each a histogram (many work-groups per row) and a scan (one work-group per row); a
 * row is done as soon as its digit's bin holds exactly the items still wanted. Then an
 * item is kept iff key >= T (and the row wants c > 0 items).
 *
 * Row state (4 uints per row in the workspace): [0] T high word, [1] T low word,
 * [2] items still wanted within the prefix, [3] flags (bit 0 done, bit 1 empty: keep
 * nothing).
 *
 * -D: ADA_WG (work-group size, a power of two dividing 2048), ADA_MAX_HKV (local head
 * counters of the count kernel). */

#define ADA_BINS 2048
#define ADA_DONE 1u
#define ADA_EMPTY 2u

inline uint ada_key32(float f) {
    uint u = as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return 0u;
    if (u == 0x80000000u)
        u = 0u;
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

inline int ada_len(__global const int *lens, long len_off, int has_len, int max_len, int b) {
    return has_len ? clamp(lens[len_off + b], 0, max_len) : max_len;
}

/* 1 when token (h, j) of sequence b is kept in phase 1 (its row state must be final). */
inline int ada_kept1(__global const uint *rst, ulong key) {
    if (rst[3] & ADA_EMPTY)
        return 0;
    return key >= (((ulong)rst[0] << 32) | (ulong)rst[1]);
}

inline ulong ada_key(int phase, __global const float *sp, long s_sb, long s_sh,
                     __global const uint *rstate, int b, int h, int j, int Hkv) {
    const uint k32 = ada_key32(sp[b * s_sb + h * s_sh + j]);
    const ulong k1 = ((ulong)k32 << 32) | (ulong)(~(uint)j);
    if (phase == 1)
        return k1;
    const int kept = ada_kept1(rstate + ((size_t)b * Hkv + h) * 4, k1);
    return ((ulong)(kept ? 0xffffffffu : k32) << 32) | (ulong)(~(uint)(j * Hkv + h));
}

/* Item i of row `row`: phase 1 rows are (b, h) with items j < n; phase 2 rows are b with
 * items i < Hkv * n, head-major (h = i / n, j = i % n) so reads are coalesced. */
inline void ada_item(int phase, int row, long i, int n, int Hkv, int *b, int *h, int *j) {
    if (phase == 1) {
        *b = row / Hkv;
        *h = row % Hkv;
        *j = (int)i;
    } else {
        *b = row;
        *h = (int)(i / n);
        *j = (int)(i % n);
    }
}

/* Row states of both phases and clean histograms / head counters.
 * Global: (ADA_WG, B * Hkv). */
__kernel void ada_init(__global const int *lens, long len_off, int has_len, int max_len, int Hkv,
                       int k, int f, __global uint *ws, long r_off, long s_off, long h_off,
                       long c_off) {
    const int row = (int)get_global_id(1);
    const int lid = (int)get_local_id(0);
    __global uint *hist = ws + h_off + (size_t)row * ADA_BINS;
    for (int i = lid; i < ADA_BINS; i += ADA_WG)
        hist[i] = 0u;
    if (lid != 0)
        return;
    const int b = row / Hkv, h = row % Hkv;
    const int n = ada_len(lens, len_off, has_len, max_len, b);
    ws[c_off + row] = 0u;
    for (int phase = 1; phase <= 2; phase++) {
        if (phase == 2 && h != 0)
            break;
        __global uint *st = ws + (phase == 1 ? r_off + (long)row * 4 : s_off + (long)b * 4);
        const long items = phase == 1 ? n : (long)Hkv * n;
        const long c = phase == 1 ? min(f, n) : (long)Hkv * min(k, n);
        st[0] = 0u;
        st[1] = 0u;
        st[2] = (uint)c;
        st[3] = c == 0 ? (ADA_DONE | ADA_EMPTY) : c == items ? ADA_DONE : 0u;
    }
}

/* Histogram of digit (key >> shift) & (2^nbits - 1) over the row's items whose key
 * matches the prefix above shift + nbits. Global: (nchunks * ADA_WG, rows). */
__kernel void ada_hist(__global const float *scores, long sc_off, long s_sb, long s_sh, int Hkv,
                       __global const int *lens, long len_off, int has_len, int max_len,
                       __global uint *ws, long r_off, long st_off, long h_off, int phase,
                       long chunk, int shift, int nbits) {
    __local uint lh[ADA_BINS];
    const int row = (int)get_global_id(1);
    const int lid = (int)get_local_id(0);
    __global const uint *st = ws + st_off + (size_t)row * 4;
    if (st[3] & ADA_DONE)
        return; /* uniform over the work-group */
    const int n = ada_len(lens, len_off, has_len, max_len, phase == 1 ? row / Hkv : row);
    const long items = phase == 1 ? n : (long)Hkv * n;
    const long start = (long)get_group_id(0) * chunk;
    const long end = min(items, start + chunk);
    if (start >= end)
        return;
    for (int i = lid; i < ADA_BINS; i += ADA_WG)
        lh[i] = 0u;
    barrier(CLK_LOCAL_MEM_FENCE);
    const ulong prefix = ((ulong)st[0] << 32) | (ulong)st[1];
    const int top = shift + nbits;
    const uint dmask = (1u << nbits) - 1u;
    __global const float *sp = scores + sc_off;
    __global const uint *rstate = ws + r_off;
    for (long i = start + lid; i < end; i += ADA_WG) {
        int b, h, j;
        ada_item(phase, row, i, n, Hkv, &b, &h, &j);
        const ulong key = ada_key(phase, sp, s_sb, s_sh, rstate, b, h, j, Hkv);
        if (top >= 64 || ((key ^ prefix) >> top) == 0)
            atomic_inc(&lh[(uint)(key >> shift) & dmask]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    __global uint *gh = ws + h_off + (size_t)row * ADA_BINS;
    for (int i = lid; i < ADA_BINS; i += ADA_WG) {
        const uint v = lh[i];
        if (v)
            atomic_add(&gh[i], v);
    }
}

/* Find the digit holding the wanted rank (counting from the top bin), extend the
 * prefix, reduce the rank, mark the row done when the bin holds exactly the items still
 * wanted, and clear the histogram. Global: (ADA_WG, rows). */
__kernel void ada_scan(__global uint *ws, long st_off, long h_off, int shift) {
    __local uint part[ADA_WG];
    const int row = (int)get_global_id(1);
    const int lid = (int)get_local_id(0);
    __global uint *st = ws + st_off + (size_t)row * 4;
    if (st[3] & ADA_DONE)
        return;
    __global uint *gh = ws + h_off + (size_t)row * ADA_BINS;
    const int per = ADA_BINS / ADA_WG;
    /* item lid owns bins in descending order: positions lid*per .. lid*per + per - 1 */
    uint hv[ADA_BINS / ADA_WG];
    uint sum = 0u;
    for (int t = 0; t < per; t++) {
        const int bin = ADA_BINS - 1 - (lid * per + t);
        hv[t] = gh[bin];
        gh[bin] = 0u;
        sum += hv[t];
    }
    part[lid] = sum;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int off = 1; off < ADA_WG; off <<= 1) { /* inclusive scan */
        const uint v = lid >= off ? part[lid - off] : 0u;
        barrier(CLK_LOCAL_MEM_FENCE);
        part[lid] += v;
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const uint want = st[2];
    uint cum = part[lid] - sum; /* items in higher bins than this item's first */
    barrier(CLK_GLOBAL_MEM_FENCE);
    for (int t = 0; t < per; t++) {
        const uint bin = (uint)(ADA_BINS - 1 - (lid * per + t));
        if (cum < want && want <= cum + hv[t]) { /* exactly one item of the group */
            const ulong prefix = (((ulong)st[0] << 32) | (ulong)st[1]) | ((ulong)bin << shift);
            st[0] = (uint)(prefix >> 32);
            st[1] = (uint)prefix;
            st[2] = want - cum;
            if (want - cum == hv[t])
                st[3] |= ADA_DONE;
        }
        cum += hv[t];
    }
}

/* Per (b, h): the number of phase-2 items of head h with key >= T (kept). Local head
 * counters, then one global atomic per head and work-group.
 * Global: (nchunks * ADA_WG, B). */
__kernel void ada_count(__global const float *scores, long sc_off, long s_sb, long s_sh, int Hkv,
                        __global const int *lens, long len_off, int has_len, int max_len,
                        __global uint *ws, long r_off, long st_off, long c_off, long chunk) {
    __local uint cnt[ADA_MAX_HKV];
    const int row = (int)get_global_id(1);
    const int lid = (int)get_local_id(0);
    __global const uint *st = ws + st_off + (size_t)row * 4;
    if (st[3] & ADA_EMPTY)
        return;
    const int n = ada_len(lens, len_off, has_len, max_len, row);
    const long items = (long)Hkv * n;
    const long start = (long)get_group_id(0) * chunk;
    const long end = min(items, start + chunk);
    if (start >= end)
        return;
    for (int i = lid; i < Hkv; i += ADA_WG)
        cnt[i] = 0u;
    barrier(CLK_LOCAL_MEM_FENCE);
    const ulong T = ((ulong)st[0] << 32) | (ulong)st[1];
    __global const float *sp = scores + sc_off;
    __global const uint *rstate = ws + r_off;
    for (long i = start + lid; i < end; i += ADA_WG) {
        int b, h, j;
        ada_item(2, row, i, n, Hkv, &b, &h, &j);
        if (ada_key(2, sp, s_sb, s_sh, rstate, b, h, j, Hkv) >= T)
            atomic_inc(&cnt[h]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int i = lid; i < Hkv; i += ADA_WG)
        if (cnt[i])
            atomic_add(&ws[c_off + (long)row * Hkv + i], cnt[i]);
}

/* k_per_row[b, h] = the head's count. Global: (rows rounded up to ADA_WG). */
__kernel void ada_write(__global const uint *ws, long c_off, int rows, int Hkv, __global int *out,
                        long o_off, long o_sb, long o_sh) {
    const int row = (int)get_global_id(0);
    if (row >= rows)
        return;
    out[o_off + (long)(row / Hkv) * o_sb + (long)(row % Hkv) * o_sh] = (int)ws[c_off + row];
}
