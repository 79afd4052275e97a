/* Plain C references of ParisKV retrieval (SPEC §4), written from the SPEC and
 * independent of the kernels: centroids are ordered by a full sort, candidates and the
 * final top-k by sorting (value, then index), Stage II scores in double. */
#ifndef CLKV_TEST_REF_PARISKV_RETRIEVE_H
#define CLKV_TEST_REF_PARISKV_RETRIEVE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Tiers T[6] = ceil((n*rho)*r_t) and C = min(n, max(ceil(beta*n), top_k)); beta/rho <= 0
 * use the length schedule. */
void ref_pariskv_tiers(int64_t n, double beta, double rho, int64_t top_k, int64_t T[6], int64_t *C);

/* Per-centroid counts of n key rows (ids rows of nblk bytes, row stride `stride`):
 * counts[blk * 2^m + c]. */
void ref_pariskv_counts(int m, int64_t nblk, const uint8_t *ids, int64_t stride, int64_t n,
                        uint32_t *counts);

/* Collision scores S[0..n) of one (b, kv head): q_rot (D floats as stored), the key ids
 * rows, counts (as above), tiers T. Centroid scores are f32 sums in index order. */
void ref_pariskv_collide(int m, int64_t nblk, const float *q_rot, const uint8_t *ids,
                         int64_t stride, int64_t n, const uint32_t *counts, const int64_t T[6],
                         int32_t *S);

/* The C zone indices with the largest S, ties by lower index; written ascending. */
void ref_pariskv_candidates(const int32_t *S, int64_t n, int64_t C, int32_t *out);

/* s^ of one key: q_norm * sum_blk w_blk sum_j v_j q_rot_j (double), codes row (D/2 bytes)
 * and weights row (nblk values as stored); *mag gets the same sum of absolute terms. */
double ref_pariskv_rerank_score(int64_t D, int m, const float a[8], const float *q_rot,
                                double q_norm, const uint8_t *codes, const float *w, double *mag);

/* The k largest of s[0..n) (ties: lower index), positions written ascending; returns
 * min(k, n). */
int64_t ref_pariskv_topk(const double *s, int64_t n, int64_t k, int32_t *out);

#ifdef __cplusplus
}
#endif

#endif /* CLKV_TEST_REF_PARISKV_RETRIEVE_H */
