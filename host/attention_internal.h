/* Internal links between the attention operators (not public API). */
#ifndef CLKV_HOST_ATTENTION_INTERNAL_H
#define CLKV_HOST_ATTENTION_INTERNAL_H

#include "clkv/attention.h"

/* Which tensor-core kernel clkv_attention_window(ctx, a) would run: 0 none (portable),
 * 1 attention_window_mma.cl, 2 its decode form attention_window_keyrows.cl (T = 1, G <= 8);
 * `a` must already be valid. */
int clkv__window_uses_tensor_cores(clkv_context *ctx, const clkv_attention_window_args *a);

#endif /* CLKV_HOST_ATTENTION_INTERNAL_H */
