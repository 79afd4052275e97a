/* Keep-set helpers (SPEC §2.1 last part, §2.2 CriticalKV two-stage selection).
 * -D set: WG_SIZE. */

/* Per (b, h): keep = min(n, max(base, window, 1)) with base = (long)(ratio * n) or the
 * absolute budget (>= 0); k1 = (long)(keep * first_stage_ratio) when two_stage. */
__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void
keep_counts(__global const int *lengths, long len_off, int has_len, int max_len, int H, int rows,
            ulong ratio_bits, float ratio_f, long budget, long window, ulong r1_bits, float r1_f,
            int two_stage, __global int *ws, long krow_off, long k1_off) {
    const int row = (int)get_global_id(0);
    if (row >= rows)
        return;
    const int b = row / H;
    const int n = has_len ? clamp(lengths[len_off + b], 0, max_len) : max_len;
    const long keep = clkv_keep_rule(n, ratio_bits, ratio_f, budget, window);
    ws[krow_off + row] = (int)keep;
    if (two_stage)
        ws[k1_off + row] = (int)min(clkv_scaled_floor(r1_bits, r1_f, keep), keep);
}

/* dst[b, h, j] = src[b, h, j] for j < N (dense copy of the score rows). */
__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void
keep_copy(__global const float *src, long s_off, long s_sb, long s_sh, int H, int N,
          __global float *dst, long d_off) {
    const int j = (int)get_global_id(0), h = (int)get_global_id(1), b = (int)get_global_id(2);
    if (j >= N)
        return;
    dst[d_off + ((long)b * H + h) * N + j] = src[s_off + (long)b * s_sb + (long)h * s_sh + j];
}

/* First-stage winners get FLT_MAX (below the +inf of protected tokens). */
__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void
keep_boost(__global const int *idx, long i_off, int K1, int H, int N, __global float *dst,
           long d_off) {
    const int i = (int)get_global_id(0), h = (int)get_global_id(1), b = (int)get_global_id(2);
    if (i >= K1)
        return;
    const int j = idx[i_off + ((long)b * H + h) * K1 + i];
    if (j < 0 || j >= N)
        return;
    __global float *p = dst + d_off + ((long)b * H + h) * N + j;
    if (*p != INFINITY)
        *p = FLT_MAX;
}
