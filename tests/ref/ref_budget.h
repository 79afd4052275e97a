/* Plain C references of the budget policies (SPEC §2.4, §3), written from the
 * definitions with sorts, independent of host/budget.c and cl_kernels/budget.cl. */
#ifndef CLKV_REF_BUDGET_H
#define CLKV_REF_BUDGET_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* PyramidKV layer budgets: the linear schedule r_l from 2A - A/beta (layer 0, bottom) to
 * A/beta (layer N-1, top), in exact rationals r_l = num_l / den; floors, then one more
 * unit for each of the N*A - sum floors layers with the largest fractional parts (ties:
 * lower layer). Also returns num_l / den through `num` and `den` when not NULL (for
 * checks of |out - r| < 1). Returns 0, or -1 on bad arguments / allocation failure. */
int ref_budget_pyramid(int64_t N, int64_t A, int64_t beta, int64_t *out, int64_t *num,
                       int64_t *den);

/* AdaKV counts of one sequence: scores [Hkv, stride] row-major (row h at h * stride),
 * n valid tokens per head, per-head budget k, floor f (already floor(alpha * k)).
 *   1. head h keeps its best min(f, n) (score desc, NaN last, -0 == +0, index asc);
 *   2. the best Hkv*min(k, n) - Hkv*min(f, n) remaining (h, j) of all heads, ordered
 *      by (score desc, NaN last, j asc, h asc), are kept too.
 * counts[h] = kept tokens of head h; kept (optional, [Hkv * stride] bytes) gets 1 for
 * kept (h, j), 0 otherwise. Returns 0, or -1 on bad arguments / allocation failure. */
int ref_budget_adakv(const float *scores, int64_t Hkv, int64_t stride, int64_t n, int64_t k,
                     int64_t f, int32_t *counts, uint8_t *kept);

#ifdef __cplusplus
}
#endif

#endif /* CLKV_REF_BUDGET_H */
