/* Gather of host-resident K/V rows (SPEC §4 Offload), kernel-read path: the store's
 * buffers are host memory the device reads directly (NVIDIA CL_MEM_LOCATION_HOST_NV, or a
 * CPU device), so only the selected rows cross the bus.
 *
 * Build options (set by host/gather_rows.c):
 *   COPY_BYTES   bytes moved per load/store: 16 (uint4), 4 (uint) or 2 (ushort); divides
 *                the row size, the output offsets and strides (in bytes)
 *   ROW_WORDS    words of COPY_BYTES per row (D * element size / COPY_BYTES)
 *   LPR          lanes per row (a power of two <= WG_SIZE)
 *   WG_SIZE      work-group size; RPW = WG_SIZE / LPR rows per work-group
 *
 * Store layout: slice s = b * Hkv + h lives in buffer s / spb (of the up to 4 buffers
 * passed to one launch, buffer index - buf_base), at row ((s % spb) * cap + t). One launch
 * serves the slices of its buffers; entries t < 0 or t >= cap give zero rows, written by
 * the launch that owns the slice, so every output row is written exactly once. */

#if COPY_BYTES == 16
#define WORD_T uint4
#define WORD_ZERO ((uint4)(0u))
#elif COPY_BYTES == 4
#define WORD_T uint
#define WORD_ZERO 0u
#else
#define WORD_T ushort
#define WORD_ZERO ((ushort)0)
#endif
#define RPW (WG_SIZE / LPR)

inline __global const WORD_T *pick(int i, __global const WORD_T *b0, __global const WORD_T *b1,
                                   __global const WORD_T *b2, __global const WORD_T *b3) {
    return i == 0 ? b0 : i == 1 ? b1 : i == 2 ? b2 : b3;
}

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void
gather_rows(__global const WORD_T *k0, __global const WORD_T *k1, __global const WORD_T *k2,
            __global const WORD_T *k3, __global const WORD_T *v0, __global const WORD_T *v1,
            __global const WORD_T *v2, __global const WORD_T *v3, int buf_base, int nbuf_here,
            long spb, int cap, int Hkv, __global const int *idx, long idx_off, long idx_sb,
            long idx_sh, int n_idx, __global WORD_T *ko, long ko_off, long ko_sb, long ko_sh,
            long ko_sl, __global WORD_T *vo, long vo_off, long vo_sb, long vo_sh, long vo_sl,
            int has_v) {
    const int lid = (int)get_local_id(0);
    const int i = (int)get_group_id(0) * RPW + lid / LPR;
    const int lane = lid % LPR;
    const int h = (int)get_group_id(1);
    const int b = (int)get_group_id(2);
    const long s = (long)b * Hkv + h;
    const int bi = (int)(s / spb) - buf_base;
    if (i >= n_idx || bi < 0 || bi >= nbuf_here)
        return;
    const int t = idx[idx_off + (long)b * idx_sb + (long)h * idx_sh + i];
    const int valid = t >= 0 && t < cap;
    const long src = ((s % spb) * (long)cap + (valid ? t : 0)) * ROW_WORDS;
    const long kd = ko_off + (long)b * ko_sb + (long)h * ko_sh + (long)i * ko_sl;
    const long vd = vo_off + (long)b * vo_sb + (long)h * vo_sh + (long)i * vo_sl;
    __global const WORD_T *ks = pick(bi, k0, k1, k2, k3);
    __global const WORD_T *vs = pick(bi, v0, v1, v2, v3);
    for (int w = lane; w < ROW_WORDS; w += LPR) {
        ko[kd + w] = valid ? ks[src + w] : WORD_ZERO;
        if (has_v)
            vo[vd + w] = valid ? vs[src + w] : WORD_ZERO;
    }
}
