/* Final step of every scorer: pooling of the raw scores over [0, P), protection of the
 * last `protect` tokens (+inf), the -inf tail j >= n, and the method's last formula
 * (CriticalKV: (pbar + 1e-4) * vnorm; StreamingLLM: sinks and recent tokens +inf, the
 * position j otherwise). One work-item per (b, KV head, token j < L).
 *
 * -D set: POOL (0 none, 1 avg, 2 max), POOL_K (odd kernel size), CRITICAL (0/1),
 * STREAMING (0/1), WG_SIZE.
 */
__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void
score_finalize(__global const float *ws, long raw_off, long vnorm_off, long row_len,
               __global const int *lengths, long len_off, int has_len, int max_len, int Hkv, int L,
               int W, int pool_excl_window, long protect, long sink, long recent,
               __global float *scores, long s_off, long s_sb, long s_sh, __global float *pbar,
               long p_off, long p_sb, long p_sh, int has_pbar) {
    const int j = (int)get_global_id(0);
    const int kvh = (int)get_global_id(1);
    const int b = (int)get_global_id(2);
    if (j >= L)
        return;
    int n = max_len;
    if (has_len)
        n = clamp(lengths[len_off + b], 0, max_len);
    const __global float *rawrow = ws + raw_off + ((long)b * Hkv + kvh) * row_len;
#if STREAMING
    float val;
    if (j >= n)
        val = -INFINITY;
    else if ((long)j >= (long)n - protect)
        val = INFINITY;
    else
        val = ((long)j < sink || (long)j >= (long)n - recent) ? INFINITY : (float)j;
#else
    (void)sink;
    (void)recent;
    const int P = pool_excl_window ? max(n - W, 0) : n;
    float val = clkv_pooled_score(rawrow, 0, j, n, P, protect, POOL, POOL_K);
#endif
#if CRITICAL
    const float pb = val;
    if (isfinite(val))
        val = (val + 1e-4f) * rawrow[vnorm_off + j];
    if (has_pbar)
        pbar[p_off + (long)b * p_sb + (long)kvh * p_sh + j] = pb;
#else
    (void)vnorm_off;
    (void)pbar;
    (void)p_off;
    (void)p_sb;
    (void)p_sh;
    (void)has_pbar;
#endif
    scores[s_off + (long)b * s_sb + (long)kvh * s_sh + j] = val;
}
