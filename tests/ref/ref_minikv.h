/* Plain C references of MiniKV (include/clkv/minikv.h; SPEC §2.2, §3), written from the
 * definitions, accumulated in double. */
#ifndef CLKV_TEST_REF_MINIKV_H
#define CLKV_TEST_REF_MINIKV_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Cumulative attention (causal column sums, SPEC §2.2), from the stored inputs:
 *   q   [B, Hq, T, D]   row t of sequence b is position pos = len[b] - T + t
 *   k   [B, Hkv, L, D]
 *   len [B]             (NULL: all T)
 * a[b, g, j] = (1/G) sum_{h in group g} sum_{t: pos >= j} exp(z_j(t) - LSE(t)) for j < n,
 * -inf for n <= j < L; z_j(t) = scale <q[b,h,t], k[b,g,j]>, LSE over keys j <= pos.
 * Returns 0, or -1 for invalid arguments. */
int ref_minikv_acumul(int64_t B, int64_t Hq, int64_t Hkv, int64_t T, int64_t L, int64_t D,
                      const float *q, const float *k, const int32_t *len, double scale, double *a);

/* Budgets of one sequence of n tokens: recent = floor(n * R_r / 2^24), heavy =
 * min(heavy_budget >= 0 ? heavy_budget : floor(n * R_h / 2^24), n - recent) with
 * R = round(ratio * 2^24); if n >= 1 and both are 0, recent = 1. Returns heavy + recent. */
int64_t ref_minikv_budget(int64_t n, double heavy_ratio, double recent_ratio, int64_t heavy_budget,
                          int64_t *heavy, int64_t *recent);

/* Selection of one row: the recent window [n - recent, n) plus the `heavy` largest of
 * a[0 .. n - recent) (ties: lower index; ref_select_topk), ascending, into out (room for
 * heavy + recent). Returns the count, -1 on failure. */
int64_t ref_minikv_select(const float *a, int64_t n, int64_t heavy, int64_t recent, int32_t *out);

#ifdef __cplusplus
}
#endif

#endif /* CLKV_TEST_REF_MINIKV_H */
