/* Plain C double-precision reference of the LongFlow static cache (SPEC §2.3), written
 * from the SPEC and include/clkv/longflow.h, independent of the kernels. */
#ifndef CLKV_TEST_REF_LONGFLOW_H
#define CLKV_TEST_REF_LONGFLOW_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The cache state, all on the host. K/V hold the values as the cache stores them (the
 * caller rounds them to the cache dtype). Hm = 1 (per-layer) or Hkv (per-KV-head). */
typedef struct ref_lf_cache {
    int64_t B, Hq, Hkv, D, S, Hm;
    int per_head, protect;
    float *k, *v;      /* [B, Hkv, S, D] */
    int32_t *pos;      /* [B, Hm, S], -1 = empty */
    int32_t *victim;   /* [B, Hm] */
    int32_t *next_pos; /* [B] */
} ref_lf_cache;

/* An empty cache (every slot empty, victims 0, next positions 0). Returns 0, or -1 for
 * invalid sizes or out of memory. */
int ref_lf_init(ref_lf_cache *c, int64_t B, int64_t Hq, int64_t Hkv, int64_t D, int64_t S,
                int per_head, int protect);
void ref_lf_free(ref_lf_cache *c);

/* Fill from a prompt: k, v [B, Hkv, Lp, D] (values as stored in the cache), n[b] prompt
 * tokens, idx [B, Hm, K] kept-token lists or NULL (then slot i = token i < n[b]); q
 * [B, Hq, D] or NULL chooses the first victim of a full map (see longflow.h). scores
 * (may be NULL) receives the [B, Hm, S] scores the victim choice used. Returns 0/-1. */
int ref_lf_load(ref_lf_cache *c, const float *k, const float *v, int64_t Lp, const int32_t *n,
                const int32_t *idx, int64_t K, const float *q, double scale, double *scores);

/* One step: write knew/vnew [B, Hkv, D] (as stored) into the victim slots at position
 * next_pos, attention of q [B, Hq, D] over all valid slots into o [B, Hq, D] and lse
 * [B, Hq] (natural log), scores [B, Hm, S] (-inf for empty slots), then choose the next
 * victims (c->victim) and advance next_pos. Returns 0/-1. */
int ref_lf_step(ref_lf_cache *c, const float *q, const float *knew, const float *vnew, double scale,
                double *o, double *lse, double *scores);

/* Same, plus (may be NULL) the sensitivity of o to logit errors, spread [B, Hq, D] =
 * sum_i p_i |v_i - o|: f32 logits off by at most dz move o by at most 2 * dz * spread to
 * first order (tests use it where |z| ~ 200 makes f32 logits inexact), and dz [B, Hq] =
 * 2^-20 * sqrt(D) * scale * ||q|| * max_i ||k_i|| over the valid slots (SPEC §2.1's bound
 * of an f32 logit error). */
int ref_lf_step_ex(ref_lf_cache *c, const float *q, const float *knew, const float *vnew,
                   double scale, double *o, double *lse, double *scores, double *spread,
                   double *dz);

/* 1 when slot i of map (b, u) could be the victim given the map's newest position:
 * valid and unprotected, or empty. */
int ref_lf_candidate(const ref_lf_cache *c, int64_t b, int64_t u, int64_t i, int64_t newest);

/* The victim rule on given scores: the lowest empty slot, else the argmin of the scores
 * of valid unprotected slots, ties to the lower index; -1 when there is none. */
int32_t ref_lf_choose(const ref_lf_cache *c, int64_t b, int64_t u, const double *scores,
                      int64_t newest);

#ifdef __cplusplus
}
#endif

#endif /* CLKV_TEST_REF_LONGFLOW_H */
