/* Plain C reference of the quantized KV cache (SPEC §3, include/clkv/quant_cache.h),
 * written from the specification: after a token history of T[b] tokens per sequence,
 * the quantized part holds tokens [0, T - T % n_r) quantized with the KIVI rule (keys per
 * channel, values per token; ref_quant.h) and the residual holds the rest. The contents
 * depend only on the history, so this reference never models individual appends.
 * Also the dequantised view of a cache state for the attention reference. */
#ifndef CLKV_TEST_REF_QUANT_CACHE_H
#define CLKV_TEST_REF_QUANT_CACHE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A cache state in the cache's own layouts (see quant_cache.h), metadata as f32 values,
 * residual as f32 values. CQ quantized slots per sequence. All arrays malloc'd. */
typedef struct ref_qcache {
    int64_t B, H, D, CQ, NR;
    int k_bits, v_bits, group;
    uint32_t *k_codes;      /* [B,H,CQ/Pk,D] */
    float *k_scale, *k_min; /* [B,H,CQ/group,D] */
    uint32_t *v_codes;      /* [B,H,CQ,D/Pv] */
    float *v_scale, *v_min; /* [B,H,CQ,D/group] */
    float *k_res, *v_res;   /* [B,H,NR,D] */
    int32_t *n_quant, *n_res;
    double *k_quot, *v_quot; /* [B,H,CQ,D] exact quotients (tie detection); reference only */
    int flags;               /* OR of the quantizer flags */
} ref_qcache;

/* Allocate an empty state (everything zero). Returns 0, -1 on bad sizes. */
int ref_qcache_alloc(ref_qcache *c, int64_t B, int64_t H, int64_t D, int64_t CQ, int64_t NR,
                     int k_bits, int v_bits, int group);
void ref_qcache_free(ref_qcache *c);

/* The expected state after the history k_hist, v_hist ([B,H,Lh,D] row-major, values as
 * the residual stores them) of T[b] tokens (T[b] <= Lh, T[b] - T[b] % NR <= CQ).
 * meta_f16 selects f16 (scale, min). Fills the quotients. c must come from
 * ref_qcache_alloc. */
void ref_qcache_build(ref_qcache *c, const float *k_hist, const float *v_hist, int64_t Lh,
                      const int64_t *T, int meta_f16);

/* Dequantised keys and values of a state as [B,H,L,D] (L >= max_b n_quant + n_res): token
 * t < n_quant is f32(f32(code*s) + m), the others the residual slot t - n_quant; tokens at
 * or past the length are 0. len[b] = n_quant[b] + n_res[b]. */
void ref_qcache_dequant(const ref_qcache *c, int64_t L, float *k, float *v, int32_t *len);

#ifdef __cplusplus
}
#endif

#endif /* CLKV_TEST_REF_QUANT_CACHE_H */
