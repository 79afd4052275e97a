/* Internal links between the attention operators (not public API). */
#ifndef CLKV_HOST_ATTENTION_INTERNAL_H
#define CLKV_HOST_ATTENTION_INTERNAL_H

#include "clkv/attention.h"

/* 1 when clkv_attention_window(ctx, a) would run the tensor-core kernel
 * (attention_window_mma.cl); `a` must already be valid. */
int clkv__window_uses_tensor_cores(clkv_context *ctx, const clkv_attention_window_args *a);

#endif /* CLKV_HOST_ATTENTION_INTERNAL_H */
