/* The quantized-cache object shared by host/quant_cache.c (creation, appends) and
 * host/attention_quant.c (fused decode attention). Not installed. */
#ifndef CLKV_HOST_QUANT_CACHE_INTERNAL_H
#define CLKV_HOST_QUANT_CACHE_INTERNAL_H

#include "clkv/quant_cache.h"
#include "runtime/internal.h"

struct clkv_quant_cache {
    clkv_context *ctx;
    clkv_quant_cache_create_args cfg; /* defaults resolved */
    int64_t cq;                       /* quantized token slots per sequence */
    int64_t max_len;                  /* host-side upper bound of max_b T[b] */
    int attn_wg; /* $CLKV_QUANT_WG at creation (tests, tuning; not API), 0: default */
    cl_mem k_codes, k_scale, k_min, v_codes, v_scale, v_min, k_res, v_res, counts, flags;
};

#endif /* CLKV_HOST_QUANT_CACHE_INTERNAL_H */
