/* Plain C double-precision references of the attention operators (SPEC §1), written
 * from the SPEC, independent of the kernels. */
#ifndef CLKV_TEST_REF_ATTENTION_H
#define CLKV_TEST_REF_ATTENTION_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Decode attention (SPEC §1.1), accumulated in double.
 *
 * Inputs are the values as stored on the device (already rounded to the storage dtype,
 * hence exact as floats), row-major:
 *   q   [B, Hq, D]
 *   k,v [B, Hkv, L, D]   logical layout, whatever the device layout
 *   len [B]              valid tokens per sequence (0 <= len[b] <= L); NULL: all L
 *   scale                softmax scale (the caller passes 1/sqrt(D) for the default)
 * Outputs:
 *   o   [B, Hq, D]       o[b,h] = sum_{j < len[b]} exp(z_j - LSE) v[b, h/G, j]
 *   lse [B, Hq]          LSE = log(sum_j exp(z_j)), natural log; may be NULL
 * with z_j = scale * <q[b,h], k[b,h/G,j]> (computed in double), G = Hq / Hkv.
 * len[b] = 0 gives o = 0 and lse = -inf. The softmax subtracts the maximum logit first,
 * so logits of any magnitude neither overflow nor underflow to 0/0.
 * Returns 0, or -1 for invalid arguments (Hq % Hkv != 0, len out of [0, L], a size <= 0
 * where positive is required). */
int ref_attention_decode(int64_t B, int64_t Hq, int64_t Hkv, int64_t L, int64_t D, const float *q,
                         const float *k, const float *v, const int32_t *len, double scale,
                         double *o, double *lse);

/* Same, plus the sensitivity of o to errors in the logits (may be NULL):
 *   spread[b,h,d] = sum_j p_j |v[b,h/G,j,d] - o[b,h,d]|
 * To first order, logits computed with absolute errors |dz_j| <= dz move o[b,h,d] by at
 * most 2 * dz * spread[b,h,d] (and LSE by at most dz). Tests use it where f32 logits
 * cannot be exact (|z| ~ 1e3). */
int ref_attention_decode_ex(int64_t B, int64_t Hq, int64_t Hkv, int64_t L, int64_t D,
                            const float *q, const float *k, const float *v, const int32_t *len,
                            double scale, double *o, double *lse, double *spread);

/* Window / prefill attention (SPEC §1.2), accumulated in double.
 *
 * Inputs as stored on the device (rounded to their storage dtypes), row-major:
 *   q   [B, Hq, T, D]    row t of sequence b is position pos = len[b] - T + t
 *   k,v [B, Hkv, L, D]   logical layout
 *   len [B]              valid tokens per sequence (0 <= len[b] <= L); NULL: all L
 * Outputs:
 *   o   [B, Hq, T, D]    o[b,h,t] = sum_{j <= pos} exp(z_j - LSE) v[b, h/G, j]
 *   lse [B, Hq, T]       LSE = log(sum_{j <= pos} exp(z_j)); may be NULL
 * with z_j = scale * <q[b,h,t], k[b,h/G,j]> (causal: only keys j <= pos). A row with
 * pos < 0 gives o = 0 and lse = -inf. `spread` (may be NULL) as in
 * ref_attention_decode_ex, per row: sum_j p_j |v_j - o|.
 * Returns 0, or -1 for invalid arguments. */
int ref_attention_window(int64_t B, int64_t Hq, int64_t Hkv, int64_t T, int64_t L, int64_t D,
                         const float *q, const float *k, const float *v, const int32_t *len,
                         double scale, double *o, double *lse, double *spread);

#ifdef __cplusplus
}
#endif

#endif /* CLKV_TEST_REF_ATTENTION_H */
