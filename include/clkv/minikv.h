/* clkv MiniKV (paper 003; SPEC §2.2, §3): two-pass memory-linear prefill with the
 * cumulative attention A_cumul, the persistent heavy-hitter + recent-window selection,
 * and the hand-off of the selected tokens into a 2-bit quantized cache.
 *
 * A MiniKV prefill of one layer, then decode:
 *   clkv_minikv_prefill      pass 1: causal attention with LSE (clkv_attention_window with
 *                            T = the prompt), pass 2: A_cumul column sums recomputing the
 *                            logits from LSE (clkv_score, method H2O), then the selection
 *                            (heavy hitters outside the recent window + the recent window)
 *                            as ascending token indices per (sequence, KV head).
 *   clkv_minikv_load_cache   gathers the selected K/V rows (clkv_compact_kv, order kept)
 *                            and appends them to a clkv_quant_cache (2-bit, Gq 16, n_r 128
 *                            by default): blocks of n_r tokens are quantized, the tail
 *                            stays in the 16-bit residual.
 *   decode steps             clkv_quant_cache_append of each new token (through the
 *                            residual, as usual) and clkv_attention_quant_decode. The
 *                            selection is never revisited (MiniKV's persistent heavy hitters).
 *
 * Budgets (per sequence b with n = len[b] prompt tokens; identical for every KV head):
 *   frac(ratio, n) = floor(n * R / 2^24) with R = round(ratio * 2^24) (the ratio quantised
 *                    to 2^-24, exact integer arithmetic on host and device; equals
 *                    floor(ratio * n) for every ratio that is a multiple of 2^-24, such as
 *                    the defaults 0.25)
 *   recent = frac(recent_ratio, n)
 *   heavy  = min(heavy_budget >= 0 ? heavy_budget : frac(heavy_ratio, n), n - recent)
 *   if n >= 1 and heavy + recent == 0: recent = 1 (the last token is always kept, so the
 *                    decode cache of a non-empty prompt is never empty; this covers small
 *                    n, e.g. n = 1, 2, 3 with the default ratios)
 *   kept   = heavy + recent            (n = 0 keeps nothing)
 * The recent window is the tokens [n - recent, n). The heavy hitters are the `heavy`
 * largest A_cumul among the tokens [0, n - recent) (ties: the lower index wins, SPEC
 * §0.2; NaN ranks below every number). indices[b, kvh, 0 .. kept) = the union, in
 * ascending position order; indices[b, kvh, kept ..) = -1; counts[b] = kept.
 * clkv_minikv_budget computes the same numbers on the host (to size `indices`).
 *
 * Pyramid budgets (MiniKV-Pyramid, SPEC §3): the recent window stays recent_ratio per
 * layer and the heavy budget is spread over the layers linearly (beta = 7):
 *   int64_t heavy[32];
 *   clkv_minikv_pyramid_budgets(32, prompt_len, 0.25, 7, heavy);
 *   for each layer l: args.heavy_budget = heavy[l]; clkv_minikv_prefill(ctx, &args, NULL);
 * For a batch with different lengths pass the longest prompt (max_length): shorter
 * sequences are capped at n - recent tokens.
 */
#ifndef CLKV_MINIKV_H
#define CLKV_MINIKV_H

#include <stddef.h>
#include <stdint.h>

#include "clkv/context.h"
#include "clkv/quant_cache.h"
#include "clkv/status.h"
#include "clkv/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Two-pass MiniKV prefill of one layer.
 *
 * Positions follow clkv_attention_window with T = the query rows: the T query rows of
 * sequence b are its LAST T positions (row t has position pos = n - T + t, n = len[b];
 * with every length equal to T, the usual prefill, row t is position t; a shorter
 * sequence is left-padded in q, o and lse: rows with pos < 0 give o = 0, lse = -inf).
 * Keys and values are indexed by position (row j of k and v is position j), causal:
 * the query at pos sees keys j <= pos.
 *   o[b,h,t]        = sum_{j <= pos} p_j(t) v[b,h/G,j],  p_j(t) = exp(z_j(t) - LSE(t)),
 *                     z_j(t) = scale * <q[b,h,t], k[b,h/G,j]>
 *   lse[b,h,t]      = LSE(t) = log(sum_{j <= pos} exp(z_j(t)))
 *   a_cumul[b,g,j]  = (1/G) sum_{h in group g} sum_{t: pos(t) >= j} p_j(t)   for j < n
 *                     (SPEC §2.2 column sums, mean over the G query heads of KV head g);
 *                     -inf for n <= j < L.
 * and the selection described in the file comment.
 *
 * Tensors (strides in elements, last dim contiguous; HND, NHD or any other strides):
 *   q        [B, Hq, T, D]   f32 | f16 | bf16
 *   k, v     [B, Hkv, L, D]  f32 | f16 | bf16, same dtype; L >= max_length
 *   lengths  [B]             i32, device, optional: n = clamp(len[b], 0, max_length);
 *                            absent: n = max_length for every sequence
 *   o        [B, Hq, T, D]   f32 | f16 | bf16
 *   lse      [B, Hq, T]      f32, optional output (absent: kept in the workspace)
 *   a_cumul  [B, Hkv, L]     f32, optional output (absent: kept in the workspace)
 *   indices  [B, Hkv, K]     i32, optional output (absent: no selection); K must be at
 *                            least the `kept` of a sequence of max_length tokens
 *                            (clkv_minikv_budget)
 *   counts   [B]             i32, optional output (kept per sequence; needs indices)
 * D must be 64, 128 or 256; Hq a multiple of Hkv; max_length <= T.
 *
 * Cost and memory: pass 1 is flash attention (O(T * L) work, memory linear in T); pass 2
 * streams the query rows of a KV head's whole group once per key tile and recomputes
 * the logits (no [T, L] matrix), skipping rows that precede the tile (causal); the
 * selection is a radix top-k per row (clkv_select_topk). No host read-back: everything
 * per sequence is computed on the device from lengths. Intermediates (lse and a_cumul
 * when not requested, the masked selection scores [B, Hkv, L] f32 and the per-row counts)
 * live in ONE region of the context workspace above the region the steps use
 * themselves (see clkv_minikv_prefill_workspace_size); they are dead when the call's
 * last kernel completes, so nothing outlives the call.
 *
 * Errors (nothing enqueued, nothing written): CLKV_ERR_ARG_NULL (ctx, args, q, k, v, o),
 * CLKV_ERR_ARG_DTYPE, CLKV_ERR_ARG_SHAPE (dims disagree; max_length > T; K too small;
 * counts without indices), CLKV_ERR_ARG_UNSUPPORTED (D), CLKV_ERR_ARG_RANGE (ratios
 * outside [0, 1] or not finite, heavy_budget < -1, max_length outside [-1, L],
 * non-finite scale), CLKV_ERR_ARG_STRIDE, CLKV_ERR_ARG_ALIGNMENT,
 * CLKV_ERR_ARG_BUFFER_SIZE, CLKV_ERR_ARG_OVERFLOW; the messages name the argument
 * (those found by a step name that step's argument, e.g. "q", "scores" for a_cumul);
 * build and launch failures as OpenCL codes. */
typedef struct clkv_minikv_prefill_args {
    clkv_tensor q;
    clkv_tensor k;
    clkv_tensor v;
    clkv_tensor lengths;
    clkv_tensor o;
    clkv_tensor lse;
    clkv_tensor a_cumul;
    clkv_tensor indices;
    clkv_tensor counts;
    /* Host-side upper bound of lengths[] (<= min(T, L)). -1: T. */
    int64_t max_length;
    /* Softmax scale; 0 means 1/sqrt(D). Must be finite. */
    float scale;
    /* Budgets (file comment): heavy and recent ratios of the prompt [0.25, 0.25] and the
     * per-layer heavy override [-1: use heavy_ratio] (pyramid budgets). */
    double heavy_ratio;
    double recent_ratio;
    int64_t heavy_budget;
} clkv_minikv_prefill_args;

#define CLKV_MINIKV_PREFILL_ARGS_INIT                                                              \
    {                                                                                              \
        .q = {0}, .k = {0}, .v = {0}, .lengths = {0}, .o = {0}, .lse = {0}, .a_cumul = {0},        \
        .indices = {0}, .counts = {0}, .max_length = -1, .scale = 0.0f, .heavy_ratio = 0.25,       \
        .recent_ratio = 0.25, .heavy_budget = -1                                                   \
    }

clkv_status clkv_minikv_prefill(clkv_context *ctx, const clkv_minikv_prefill_args *args,
                                cl_event *done);

/* Bytes of workspace clkv_minikv_prefill(ctx, args) will use (validates args the same
 * way). Pass it to clkv_context_reserve_workspace to preallocate. */
clkv_status clkv_minikv_prefill_workspace_size(clkv_context *ctx,
                                               const clkv_minikv_prefill_args *args, size_t *bytes);

/* The budgets of the file comment for one sequence of n tokens (host). heavy and recent
 * may be NULL; returns kept = heavy + recent, or -1 for invalid arguments (n < 0, ratios
 * outside [0, 1] or not finite, heavy_budget < -1). */
int64_t clkv_minikv_budget(int64_t n, double heavy_ratio, double recent_ratio, int64_t heavy_budget,
                           int64_t *heavy, int64_t *recent);

/* MiniKV-Pyramid heavy budgets for num_layers layers of a prompt of n tokens:
 * clkv_budget_pyramid(num_layers, frac(heavy_ratio, n), beta, out) (include/clkv/budget.h;
 * layer 0, the bottom one, gets the most; beta = 7 is MiniKV's). Pass out[l] as
 * heavy_budget of layer l. Errors (out untouched; message in clkv_last_error(NULL)):
 * CLKV_ERR_ARG_NULL (out), CLKV_ERR_ARG_RANGE (n < 0, heavy_ratio, and
 * clkv_budget_pyramid's ranges for num_layers and beta). */
clkv_status clkv_minikv_pyramid_budgets(int64_t num_layers, int64_t n, double heavy_ratio,
                                        int64_t beta, int64_t *out);

/* Load the selection of clkv_minikv_prefill into a quantized cache.
 *
 * For every sequence b the rows k[b, g, indices[b, g, i]], v[...] for i < m are appended
 * to `cache` in index order (clkv_quant_cache_append semantics: the first
 * m - m % n_r tokens are quantized, the rest go to the residual), where
 *   m = clamp(counts[b], 0, K) with counts [B] as clkv_minikv_prefill writes them.
 * The gather copies each row's indices up to its first negative entry (the -1 padding),
 * so counts[b] must not exceed the length of the lists of sequence b (true for the
 * prefill's outputs); rows past a list's end would append unspecified data.
 * Every KV head of a sequence appends the same m tokens (MiniKV's budgets depend on the
 * sequence only), so the cache's per-sequence length is m. Normally the cache is empty
 * (freshly created or reset); otherwise the tokens are appended after its contents.
 *
 * Tensors:
 *   k, v     [B, Hkv, L, D]  f32 | f16 | bf16 (each its own dtype), any strides
 *   indices  [B, Hkv, K]     i32, device (ascending lists: what clkv_minikv_prefill writes)
 *   counts   [B]             i32, device (required: the append is per sequence)
 * B, Hkv and D must match the cache; the cache's host length bound + K must fit its
 * capacity.
 * in_place = 0 (default): the gathered rows go to a [B, Hkv, K, D] scratch region of the
 *   context workspace (2 * B * Hkv * K * D * element size bytes above what the two steps
 *   use; see clkv_minikv_load_cache_workspace_size).
 * in_place = 1: k and v are compacted in place (clkv_compact_kv with the destination =
 *   the source view: their first m rows per head are overwritten, the prefill K/V are
 *   destroyed), no scratch; indices must then be strictly ascending inside [0, L) (rows
 *   that are not are left untouched by the compaction, see clkv_compact_kv, and the
 *   append then stores their first m rows).
 * Errors (nothing enqueued, nothing written): CLKV_ERR_ARG_NULL (cache, args, k, v,
 * indices, counts), CLKV_ERR_ARG_DTYPE, CLKV_ERR_ARG_SHAPE (dims disagree with each other or the
 * cache), CLKV_ERR_ARG_RANGE (in_place not 0/1, "capacity" when the cache cannot hold K
 * more tokens), CLKV_ERR_ARG_UNSUPPORTED (in_place with k and v in one buffer or sharing
 * one with indices/counts), CLKV_ERR_ARG_STRIDE, CLKV_ERR_ARG_ALIGNMENT, CLKV_ERR_ARG_BUFFER_SIZE,
 * CLKV_ERR_ARG_OVERFLOW; launch failures as OpenCL codes. */
typedef struct clkv_minikv_load_args {
    clkv_tensor k;
    clkv_tensor v;
    clkv_tensor indices;
    clkv_tensor counts;
    int32_t in_place;
} clkv_minikv_load_args;

#define CLKV_MINIKV_LOAD_ARGS_INIT                                                                 \
    { .k = {0}, .v = {0}, .indices = {0}, .counts = {0}, .in_place = 0 }

clkv_status clkv_minikv_load_cache(clkv_quant_cache *cache, const clkv_minikv_load_args *args,
                                   cl_event *done);

/* Bytes of the cache context's workspace clkv_minikv_load_cache(cache, args) will use. */
clkv_status clkv_minikv_load_cache_workspace_size(clkv_quant_cache *cache,
                                                  const clkv_minikv_load_args *args, size_t *bytes);

#ifdef __cplusplus
}
#endif

#endif /* CLKV_MINIKV_H */
