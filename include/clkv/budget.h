/* clkv budget policies (SPEC §2.4, §3): how many tokens each layer and each KV head of a
 * layer keeps when a cache is compressed.
 *
 *   uniform    every (layer, head) keeps the same budget          clkv_budget_uniform
 *   PyramidKV  per-layer budgets, linear from bottom to top,      clkv_budget_pyramid
 *              total preserved
 *   AdaKV      per-head budgets inside one layer: the layer's     clkv_budget_adakv
 *              Hkv * k best scores over all heads, with a
 *              per-head floor (device kernels, no read-back)
 *
 * Layer budgets are small host arrays (one integer per layer) computed once per model
 * configuration; the head-adaptive split depends on the scores and runs on the device.
 * A typical prefill-time compression of one layer:
 *   clkv_budget_adakv(scores, k)       -> k_per_row [B, Hkv] on the device
 *   clkv_select_topk(scores, k_per_row, capacity) -> ascending indices per head
 *   clkv_compact_kv(indices)           -> dense cache + new_lengths [B, Hkv]
 *   clkv_attention_decode(lengths = new_lengths [B, Hkv]) for every later step.
 */
#ifndef CLKV_BUDGET_H
#define CLKV_BUDGET_H

#include <stddef.h>
#include <stdint.h>

#include "clkv/context.h"
#include "clkv/status.h"
#include "clkv/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Uniform budgets: out[l] = budget for every layer l < num_layers.
 * Errors (out untouched; message in clkv_last_error(NULL)): CLKV_ERR_ARG_NULL (out),
 * CLKV_ERR_ARG_RANGE (num_layers outside [1, 65536], budget outside [0, 2^31-1]). */
clkv_status clkv_budget_uniform(int64_t num_layers, int64_t budget, int64_t *out);

/* PyramidKV budgets (SPEC §2.4, §3): layer 0 is the BOTTOM layer (the first one after
 * the embeddings) and gets the most; the top layer num_layers - 1 the least. With
 * N = num_layers, A = avg_budget, the real-valued schedule is linear in l:
 *   r_0 = 2A - A/beta (bottom),  r_{N-1} = A/beta (top),
 *   r_l = r_0 - (r_0 - r_{N-1}) * l / (N - 1),       sum_l r_l = N * A exactly;
 * beta = 7 gives SPEC §3's MiniKV schedule (top heavy/7, bottom 2*heavy - heavy/7);
 * beta = 1 is uniform. N = 1 gives out[0] = A.
 * Integer rounding (exact rational arithmetic, no floating point): out[l] = floor(r_l),
 * then the remaining N*A - sum floor(r_l) units (fewer than N) go one each to the layers
 * with the largest fractional parts of r_l, lower layer first among equal fractions.
 * Hence sum_l out[l] == N * A exactly, |out[l] - r_l| < 1, and out is non-increasing
 * from bottom to top.
 * Errors (out untouched; message in clkv_last_error(NULL)): CLKV_ERR_ARG_NULL (out),
 * CLKV_ERR_ARG_RANGE (num_layers outside [1, 65536], avg_budget outside [0, 2^31-1],
 * beta outside [1, 1024]). */
clkv_status clkv_budget_pyramid(int64_t num_layers, int64_t avg_budget, int64_t beta, int64_t *out);

/* Head-adaptive budgets of one layer (AdaKV), on the device.
 *
 * For every sequence b, with n = clamp(lengths[b], 0, max_length) (max_length when
 * lengths is absent), k = the per-head budget and the per-head floor
 *   f = floor(alpha * k)   (computed in double on the host; alpha = 0.2 as in AdaKV)
 * the layer keeps Hkv * min(k, n) tokens in all:
 *   1. every head h keeps its own best min(f, n) tokens (the floor that stops one head
 *      from being starved);
 *   2. the remaining Hkv * (min(k, n) - min(f, n)) slots go to the best remaining
 *      (head, token) pairs of the whole layer;
 * and k_per_row[b, h] = the number of kept tokens of head h. Budgets are capped by the
 * available tokens: n < k keeps every token of every head (k_per_row = n); n = 0 gives 0.
 * A head may receive up to min(n, Hkv * k) tokens (size the indices / destination
 * capacity accordingly, or accept clkv_select_topk's clamp to its k).
 *
 * Order and ties (deterministic, SPEC §0.2): larger score = better (retention scores);
 * NaN ranks below every number; -0.0 == +0.0. Within a head, equal scores are taken in
 * ascending token index; across heads in step 2, equal scores are taken in ascending
 * token index, and for the same token index the lower head first. Consequently, for
 * every head, the kept tokens are exactly the first k_per_row[b, h] of the head's own
 * order (score desc, index asc): clkv_select_topk with k_per_row (and the same
 * lengths, max_length, largest = 1) returns precisely the tokens this policy kept.
 *
 * Tensors (strides in elements, last dim contiguous):
 *   scores    [B, Hkv, N]  f32, device (any strides for b and h)
 *   lengths   [B]          i32, device, optional
 *   k_per_row [B, Hkv]     i32, device, output (every element written)
 * Limits: Hkv <= 256, Hkv * N <= 2^31 - 1.
 *
 * Algorithm: two exact radix selections over unique 64-bit keys (score key, then token
 * position), so ties need no ordered pass: per (b, h) the floor threshold, then per b
 * the layer threshold with the floor tokens forced in, then per-head counts. Rows are
 * split over many work-groups (one long sequence fills the device). About 27 kernels
 * are enqueued (fewer with alpha * k < 1), the scores are read up to 13 times (passes
 * stop early on the device once a threshold is exact, typically after 3 passes per
 * phase); scratch comes from the context's workspace
 * (clkv_budget_adakv_workspace_size). Nothing blocks. */
typedef struct clkv_budget_adakv_args {
    clkv_tensor scores;
    clkv_tensor lengths;
    clkv_tensor k_per_row;
    /* Host-side upper bound of lengths[] (<= N), sizes the launch. -1: N. */
    int64_t max_length;
    /* Per-head budget k >= 0 (the layer keeps Hkv * k tokens when n >= k). */
    int64_t k;
    /* Floor fraction in [0, 1]: each head first keeps floor(alpha * k) of its own best.
     * 0.2 by default (AdaKV's safeguard); 0 = pure global top Hkv * k; 1 = uniform. */
    double alpha;
} clkv_budget_adakv_args;

#define CLKV_BUDGET_ADAKV_ARGS_INIT                                                                \
    { .scores = {0}, .lengths = {0}, .k_per_row = {0}, .max_length = -1, .k = 0, .alpha = 0.2 }

/* Validate `args` and enqueue the allocation. `done` (optional) receives an event that
 * completes with the last kernel; the caller releases it.
 * Errors (nothing enqueued, nothing written): CLKV_ERR_ARG_NULL (ctx, args, scores,
 * k_per_row), CLKV_ERR_ARG_DTYPE, CLKV_ERR_ARG_SHAPE (dims disagree), CLKV_ERR_ARG_RANGE
 * (k outside [0, 2^31-1], alpha outside [0, 1] or NaN, max_length outside [-1, N],
 * Hkv > 256, Hkv * N or B * Hkv beyond 2^31-1), CLKV_ERR_ARG_STRIDE,
 * CLKV_ERR_ARG_ALIGNMENT, CLKV_ERR_ARG_BUFFER_SIZE, CLKV_ERR_ARG_OVERFLOW,
 * CLKV_ERR_ARG_UNSUPPORTED (k_per_row shares a buffer with scores or lengths); launch
 * failures as OpenCL codes or CLKV_ERR_LOCAL_MEMORY. */
clkv_status clkv_budget_adakv(clkv_context *ctx, const clkv_budget_adakv_args *args,
                              cl_event *done);

/* Bytes of workspace clkv_budget_adakv(ctx, args) will use (validates args the same way). */
clkv_status clkv_budget_adakv_workspace_size(clkv_context *ctx, const clkv_budget_adakv_args *args,
                                             size_t *bytes);

#ifdef __cplusplus
}
#endif

#endif /* CLKV_BUDGET_H */
