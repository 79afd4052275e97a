/* Plain C references of the ParisKV encoder (SPEC §4), written from the SPEC,
 * independent of the kernels: the rotation is the O(D^2) product with the definition
 * H[i][j] = (-1)^popcount(i & j) (no fast transform), computed in double. */
#ifndef CLKV_TEST_REF_PARISKV_H
#define CLKV_TEST_REF_PARISKV_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* sigma from splitmix64(seed): sigma[i] = -1 when bit 63 of output i is set, else +1. */
void ref_pariskv_signs(uint64_t seed, int64_t D, int8_t *signs);

/* y = (1/sqrt(D)) H_D diag(signs) x, H in natural (Sylvester) order. */
void ref_pariskv_rotate(int64_t D, const int8_t *signs, const double *x, double *y);

/* One key k (D floats as stored) with subspace dim m (divides D):
 *   knorm = ||k||, u[D] = the unit block directions (u_b = k~_b / r_b, 0 for a zero block),
 *   r[D/m] = block norms of k~, ids[D/m], codes[D/2] (SPEC layout), w[D/m] weights.
 * Codes compare |u_j| (double) with (double)tau[i] strictly, exactly as the SPEC. */
void ref_pariskv_encode_key(int64_t D, int m, const int8_t *signs, const float tau[7],
                            const float a[8], const float *k, double *knorm, double *u, double *r,
                            uint8_t *ids, uint8_t *codes, double *w);

/* Weight of block b from given codes (as the device stored them): ||k|| r_b / alpha_b,
 * alpha_b = sum_j sign_j a[t_j] u_{b,j}; 0 when r_b = 0. */
double ref_pariskv_weight(int m, const float a[8], double knorm, double r_b, const double *u_b,
                          const uint8_t *codes, int64_t b);

/* Dense rotation (SPEC §4, D not a power of two), from its definition in
 * include/clkv/pariskv.h: uniforms from splitmix64(seed) >> 11 * 2^-53, Box-Muller pairs,
 * G[i][j] = normal i*D + j, R = the Q of G = QT with T's diagonal positive — here by
 * modified Gram-Schmidt over G's columns in double (positive diagonal by construction),
 * an algorithm independent of the library's Householder QR. R row-major D x D. */
void ref_pariskv_dense_matrix(uint64_t seed, int64_t D, double *R);

/* y = R x for a row-major D x D matrix R. */
void ref_pariskv_apply(int64_t D, const double *R, const double *x, double *y);

/* ref_pariskv_encode_key with the dense rotation R (D x D) instead of the SRHT. */
void ref_pariskv_encode_key_dense(int64_t D, int m, const double *R, const float tau[7],
                                  const float a[8], const float *k, double *knorm, double *u,
                                  double *r, uint8_t *ids, uint8_t *codes, double *w);

/* ref_pariskv_query with the dense rotation R. */
void ref_pariskv_query_dense(int64_t B, int64_t Hq, int64_t Hkv, int64_t D, const double *R,
                             const float *q, double *q_rot, double *q_norm);

/* Query transform: q [B, Hq, D] row-major; q_rot [B, Hkv, D], q_norm [B, Hkv].
 * Mean over the G = Hq/Hkv heads of each KV head, normalized and rotated (0 if zero). */
void ref_pariskv_query(int64_t B, int64_t Hq, int64_t Hkv, int64_t D, const int8_t *signs,
                       const float *q, double *q_rot, double *q_norm);

#ifdef __cplusplus
}
#endif

#endif /* CLKV_TEST_REF_PARISKV_H */
