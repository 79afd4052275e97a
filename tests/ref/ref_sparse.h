/* Plain C double-precision reference of sparse decode attention (SPEC §1.3), written
 * from the SPEC (a membership mask over the tokens), independent of the kernels. */
#ifndef CLKV_TEST_REF_SPARSE_H
#define CLKV_TEST_REF_SPARSE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The attended set of one (b, kv head) as a 0/1 mask over tokens [0, n):
 *   [0, min(sink, n)) ∪ [max(0, n - local), n) ∪ {idx[i] : 0 <= idx[i] < n}
 * (negative and >= n entries ignored, repeats and overlaps count once). `mask` holds n
 * bytes. Returns the set size. */
int64_t ref_sparse_set(int64_t n, int64_t sink, int64_t local, const int32_t *idx, int64_t NI,
                       uint8_t *mask);

/* Sparse decode attention over that set, accumulated in double. Inputs as stored on the
 * device, logical row-major:
 *   q [B, Hq, D], k, v [B, Hkv, L, D], len [B] (NULL: all L), idx [B, Hkv, NI] (NULL or
 *   NI = 0: dense ranges only)
 * Outputs o [B, Hq, D] and lse [B, Hq] (may be NULL): z_j = scale <q, k_j>,
 * LSE = log sum_{j in S} exp(z_j), o = sum_{j in S} exp(z_j - LSE) v_j; an empty set gives
 * o = 0, lse = -inf. Returns 0, or -1 for invalid arguments. */
int ref_attention_sparse(int64_t B, int64_t Hq, int64_t Hkv, int64_t L, int64_t D, const float *q,
                         const float *k, const float *v, const int32_t *len, const int32_t *idx,
                         int64_t NI, int64_t sink, int64_t local, double scale, double *o,
                         double *lse);

#ifdef __cplusplus
}
#endif

#endif /* CLKV_TEST_REF_SPARSE_H */
