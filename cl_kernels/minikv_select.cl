/* MiniKV selection preparation (include/clkv/minikv.h): per (b, KV head) the budgets
 * from the sequence length and the selection scores that make one top-k pick the recent
 * window plus the heavy hitters outside it. Host side in host/minikv.c.
 *
 * Budgets (exact integer arithmetic, identical to clkv_minikv_budget on the host):
 *   frac(R, n) = (n * R) >> 24, R = round(ratio * 2^24) <= 2^24, n < 2^31
 *   recent = frac(r_recent, n)
 *   heavy  = min(heavy_budget >= 0 ? heavy_budget : frac(r_heavy, n), n - recent)
 *   n >= 1 and heavy + recent == 0: recent = 1
 * Selection score of token j < n: +inf inside the recent window [n - recent, n) (above
 * every A_cumul, which is at most the number of query rows), else A_cumul[j]; so the
 * top (heavy + recent) of the row is the window plus the `heavy` best outside it.
 *
 * Global (ceil(max(max_len, 1) / WG) * WG, Hkv, B), local (WG, 1, 1). Work-item j = 0 of
 * a row writes kpr[kpr_off + b * Hkv + h] = heavy + recent, and of KV head 0 counts[b] (optional).
 */

inline long minikv_frac(long n, ulong r) {
    return (long)(((ulong)n * r) >> 24);
}

__kernel void minikv_select_prep(__global const float *acum, long a_off, long a_sb, long a_sh,
                                 __global const int *lengths, long len_off, int has_len,
                                 int max_len, int Hkv, ulong r_heavy, ulong r_recent,
                                 long heavy_budget, __global float *sel, long sel_off, long sel_row,
                                 __global int *kpr, long kpr_off, __global int *counts, long c_off,
                                 int has_counts) {
    const int j = (int)get_global_id(0);
    const int h = (int)get_global_id(1);
    const int b = (int)get_global_id(2);
    int n = max_len;
    if (has_len)
        n = clamp(lengths[len_off + b], 0, max_len);
    long recent = minikv_frac(n, r_recent);
    long heavy = heavy_budget >= 0 ? heavy_budget : minikv_frac(n, r_heavy);
    heavy = min(heavy, (long)n - recent);
    if (n >= 1 && heavy + recent == 0)
        recent = 1;
    if (j == 0) {
        kpr[kpr_off + b * Hkv + h] = (int)(heavy + recent);
        if (has_counts && h == 0)
            counts[c_off + b] = (int)(heavy + recent);
    }
    if (j >= n)
        return;
    const float s =
        (long)j >= (long)n - recent ? INFINITY : acum[a_off + (long)b * a_sb + (long)h * a_sh + j];
    sel[sel_off + ((long)b * Hkv + h) * sel_row + j] = s;
}
