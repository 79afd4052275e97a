/* clkv eviction scorers (SPEC §2.1, §2.2) and the keep-set of an eviction step.
 *
 * A scorer produces one f32 retention score per (sequence b, KV head, token j):
 * LARGER = KEEP. Methods are reachable by enum and by name ("dropkv", "snapkv", ...),
 * so an engine can switch methods from configuration.
 *
 * Conventions shared by all methods:
 *   - n = len[b]. Entries j >= n (up to L) are written as -inf, so a top-k over the
 *     full row never picks them.
 *   - GQA: a token's score aggregates the G = Hq / Hkv query heads of its KV head by the
 *     MEAN (DiffKV: MAX). The cache is never repeated per query head.
 *   - Window methods read the W window queries q [B, Hq, W, D] whose rows are the LAST W
 *     positions of each sequence (row t has position pos = n - W + t, exactly as
 *     clkv_attention_window), causal: row t sees keys j <= pos; a row with pos < 0 sees
 *     nothing. They also need that call's LSE [B, Hq, W] (and, for DropKV and AnDPro,
 *     its output a [B, Hq, W, D]), which the caller normally gets from
 *     clkv_attention_window on the same q, K, V. With p_j(t) = exp(z_j(t) - LSE(t)),
 *     z_j(t) = scale * <q_t, k_j>, a pair (t, j) with j > pos(t) contributes 0.
 *   - "Protection": the last `protect` tokens of a sequence score +inf (above every
 *     other score). "Pooling": a centred, stride-1 1-D pooling of the raw scores of
 *     the tokens [0, P) (P per method, below), kernel size `pool_kernel` (odd):
 *     CLKV_POOL_AVG sums the in-range taps and divides by the kernel size (out-of-range
 *     taps count as zeros: PyTorch avg_pool1d with count_include_pad=True);
 *     CLKV_POOL_MAX takes the max of the in-range taps. Tokens in [P, n) that are not
 *     protected keep their raw score.
 *
 * Methods (raw score of token j; defaults in brackets):
 *   DROPKV (§2.1): mean_g sum_t (p~/(1 - p~ + eps))^2 * ||a_t - v_j||^2, p~ = p clamped
 *     to [0, 1] (optionally rounded to the K/V dtype, weight only: dropkv_round_p),
 *     eps [1e-6]. ||a - v||^2 is computed as the direct difference (never the
 *     expansion), in f32. [pool avg, kernel 11, P = n; protect W]
 *   SNAPKV: mean_g mean_t p_j(t) (divided by W whether or not row t sees j).
 *     [pool avg, kernel 5, P = n - W (the window is excluded, as the SnapKV code);
 *     protect W]
 *   CRITICALKV: pbar = the pooled SnapKV score (as SNAPKV, same pooling/protection) and
 *     score = (pbar + 1e-4) * (1/G) sum_{h in group} ||v_j W_O^h||_1, W_O^h = w_o[h]
 *     [D, Dm] (without w_o: ||v_j||_1). Protected tokens score +inf in both outputs.
 *     The optional `pbar` output feeds the two-stage selection of clkv_keep_set.
 *   ANDPRO: mean_g sum_t p_j(t) <a_t, v_j>. [no pooling, P = n; protect W]
 *   H2O (MiniKV cumulative attention): mean_g sum_{rows t} p_j(t) where q holds ALL
 *     prompt queries (W = T = the prompt length, normally max_length; rows are still the
 *     last T positions). Query rows are streamed in tiles: memory linear in T,
 *     compute O(T * L). [no pooling; protect 0]
 *   DIFFKV significance (§5): max_g (sum_t p_j(t)) / min(W, n - j) with the last W
 *     (normally 64) prompt queries. [no pooling; protect W]
 *   KNORM: -||k_j||. [no pooling; protect 0]
 *   KEYDIFF: -cos(k_j, mu), mu = mean_{i<n} k_i / ||k_i|| (keydiff_raw_mean = 0,
 *     kvpress) or the mean of raw keys (keydiff_raw_mean = 1); a zero key or a zero mu
 *     gives cos = 0. [no pooling; protect 0]
 *   STREAMINGLLM: +inf for the first `sink` [4] and the last `recent` [0] tokens, the
 *     position j (as f32) for the others, so a keep-set of budget k keeps the sinks and
 *     the most recent tokens: StreamingLLM's cache for that budget. No pooling.
 *
 * Tensors (strides in elements, last dim contiguous):
 *   q       [B, Hq, W, D]  f32 | f16 | bf16 (window methods)
 *   k, v    [B, Hkv, L, D] f32 | f16 | bf16, same dtype, any strides. k is required by
 *                          every method (it gives B, Hkv, L, D; STREAMINGLLM does not
 *                          read it); v is read by DROPKV, ANDPRO, CRITICALKV only and
 *                          may be absent for the others
 *   lengths [B]            i32, device, optional: n = clamp(len[b], 0, max_length);
 *                          absent: every sequence has max_length tokens
 *   lse     [B, Hq, W]     f32 (window methods)
 *   a       [B, Hq, W, D]  f32 | f16 | bf16 (DROPKV, ANDPRO)
 *   w_o     [Hq, D, Dm]    f32 | f16 | bf16, optional (CRITICALKV)
 *   scores  [B, Hkv, L]    f32 output
 *   pbar    [B, Hkv, L]    f32 output, optional, CRITICALKV only
 * D must be 64, 128 or 256 (window methods); 1..1024 for the key methods.
 *
 * Kernels: the window methods run one streaming kernel (cl_kernels/score_window.cl,
 * specialised by -D METHOD): every work-group owns a tile of keys of one (b, KV head),
 * holds those K (and V) rows in registers and loops over the G*W query rows staged in
 * local memory in tiles, recomputing z and p; each K/V row is read once per call. A
 * second small kernel (cl_kernels/score_pool.cl) pools, protects and writes the -inf
 * tail. Raw scores live in the context workspace between the two (see
 * clkv_score_workspace_size). Nothing blocks.
 */
#ifndef CLKV_SCORE_H
#define CLKV_SCORE_H

#include <stddef.h>
#include <stdint.h>

#include "clkv/context.h"
#include "clkv/status.h"
#include "clkv/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum clkv_score_method {
    CLKV_SCORE_DROPKV = 0,
    CLKV_SCORE_SNAPKV = 1,
    CLKV_SCORE_ANDPRO = 2,
    CLKV_SCORE_CRITICALKV = 3,
    CLKV_SCORE_H2O = 4,
    CLKV_SCORE_DIFFKV = 5,
    CLKV_SCORE_KNORM = 6,
    CLKV_SCORE_KEYDIFF = 7,
    CLKV_SCORE_STREAMINGLLM = 8,
} clkv_score_method;

#define CLKV_SCORE_METHOD_COUNT 9

/* Pooling modes; CLKV_POOL_DEFAULT picks the method's default. */
typedef enum clkv_pool_mode {
    CLKV_POOL_DEFAULT = -1,
    CLKV_POOL_NONE = 0,
    CLKV_POOL_AVG = 1,
    CLKV_POOL_MAX = 2,
} clkv_pool_mode;

/* Method by name: "dropkv", "snapkv", "andpro", "criticalkv", "h2o", "diffkv", "knorm",
 * "keydiff", "streamingllm" (case-sensitive). Errors: CLKV_ERR_ARG_NULL (name, out),
 * CLKV_ERR_ARG_RANGE for an unknown name (the message lists the valid ones; read it with
 * clkv_last_error(NULL)). */
clkv_status clkv_score_method_from_name(const char *name, clkv_score_method *out);

/* The name of a method, "?" for an unknown value. */
const char *clkv_score_method_name(clkv_score_method method);

/* 1 when the method reads window queries / LSE (DROPKV, SNAPKV, ANDPRO, CRITICALKV,
 * H2O, DIFFKV), 0 otherwise (or unknown). */
int clkv_score_method_uses_window(clkv_score_method method);

typedef struct clkv_score_args {
    clkv_score_method method;
    clkv_tensor q;
    clkv_tensor k;
    clkv_tensor v;
    clkv_tensor lengths;
    clkv_tensor lse;
    clkv_tensor a;
    clkv_tensor w_o;
    clkv_tensor scores;
    clkv_tensor pbar;
    /* Host-side upper bound of lengths[] (<= L). -1: L. */
    int64_t max_length;
    /* Softmax scale; 0 means 1/sqrt(D). Must be finite (the scale lse was computed with). */
    float scale;
    /* Pooling: mode (CLKV_POOL_DEFAULT = the method's) and kernel size (0 = the method's
     * default; otherwise odd, 1..255). */
    int32_t pool;
    int32_t pool_kernel;
    /* Protected last tokens: -1 = the method's default (W for DROPKV, SNAPKV, ANDPRO,
     * CRITICALKV, DIFFKV; 0 otherwise), else >= 0. */
    int64_t protect;
    /* DROPKV: eps (> 0, finite) and whether p~ is rounded to the K/V dtype in the weight. */
    float dropkv_eps;
    int32_t dropkv_round_p;
    /* KEYDIFF: 0 = mean of normalized keys (default), 1 = mean of raw keys. */
    int32_t keydiff_raw_mean;
    /* STREAMINGLLM: sink and recent token counts (>= 0). */
    int64_t sink;
    int64_t recent;
} clkv_score_args;

#define CLKV_SCORE_ARGS_INIT                                                                       \
    {                                                                                              \
        .method = CLKV_SCORE_DROPKV, .q = {0}, .k = {0}, .v = {0}, .lengths = {0}, .lse = {0},     \
        .a = {0}, .w_o = {0}, .scores = {0}, .pbar = {0}, .max_length = -1, .scale = 0.0f,         \
        .pool = CLKV_POOL_DEFAULT, .pool_kernel = 0, .protect = -1, .dropkv_eps = 1e-6f,           \
        .dropkv_round_p = 0, .keydiff_raw_mean = 0, .sink = 4, .recent = 0                         \
    }

/* Validate `args` and enqueue the scorer. `done` (optional) receives an event that
 * completes with the last kernel; the caller releases it.
 * On NVIDIA the window methods run on the tensor cores when q and K/V are f16 or bf16 of one
 * dtype and D is 64, 128 or 256 (DropKV then forms ||a - v||^2 as ||a||^2 + ||v||^2 - 2<a, v>
 * clamped at 0, SPEC §2.1; DiffKV pads each head's W window rows to a multiple of 8 with
 * empty rows, so W 5 costs the products of 8); $CLKV_SCORE_MMA=0 selects the
 * portable kernel. H2O with G * W >= 64 query rows (the MiniKV prefill, W = the prompt)
 * takes a third kernel there instead (cl_kernels/score_h2o_mma.cl: key tiles in registers,
 * query rows streamed, long row ranges cut into pieces whose partial sums are added in the
 * workspace); $CLKV_SCORE_H2O_MMA=0 selects the window kernels.
 * Results agree within the SPEC §2.1 tolerance either way.
 * Errors (nothing enqueued, nothing written): CLKV_ERR_ARG_NULL (ctx, args, a tensor the
 * method needs), CLKV_ERR_ARG_DTYPE, CLKV_ERR_ARG_SHAPE (dims disagree, Hq % Hkv != 0,
 * W < 1), CLKV_ERR_ARG_UNSUPPORTED (D not in {64, 128, 256} for a window method, D
 * outside 1..1024 for KNORM/KEYDIFF, pbar or w_o given to a method without them),
 * CLKV_ERR_ARG_RANGE (unknown method or
 * pool mode, even or out-of-range pool_kernel, protect < -1, sink/recent < 0, eps not
 * positive and finite, max_length outside [-1, L], non-finite scale),
 * CLKV_ERR_ARG_STRIDE, CLKV_ERR_ARG_ALIGNMENT, CLKV_ERR_ARG_BUFFER_SIZE,
 * CLKV_ERR_ARG_OVERFLOW; build/launch failures as OpenCL codes, CLKV_ERR_LOCAL_MEMORY. */
clkv_status clkv_score(clkv_context *ctx, const clkv_score_args *args, cl_event *done);

/* Bytes of workspace clkv_score(ctx, args) will use (validates args the same way). */
clkv_status clkv_score_workspace_size(clkv_context *ctx, const clkv_score_args *args,
                                      size_t *bytes);

/* Keep-set of an eviction step (SPEC §2.1, last part): per (b, KV head) with n = len[b],
 *   keep = min(n, max((int64)(ratio * (double)n), window, 1))    (budget < 0)
 *   keep = min(n, max(budget, window, 1))                         (budget >= 0)
 * (n = 0 keeps 0; n <= window keeps all), computed on the device (no read-back; the
 * products in double on devices with cl_khr_fp64 -- NVIDIA, PoCL -- in f32 otherwise). The
 * `keep` largest scores are kept (ties: lower index), their indices written in ascending
 * position order to indices[b, h, 0 .. keep), the rest of the row -1; counts[b, h] =
 * keep (optional). Run it on the output of clkv_score, whose protection makes the last
 * `window` tokens kept.
 *
 * Two-stage selection (CriticalKV, SPEC §2.2), when pbar is given: the first
 * k1 = (int64)(keep * first_stage_ratio) tokens are chosen by pbar alone (largest), then
 * the remaining keep - k1 by score among the others (the first-stage tokens are given
 * the score FLT_MAX, below the +inf of protected tokens, before the final selection).
 *
 * Tensors:
 *   scores  [B, H, N] f32 (any strides for b, h)
 *   pbar    [B, H, N] f32, optional
 *   lengths [B]       i32, device, optional (absent: max_length)
 *   indices [B, H, K] i32 output; K must be >= the keep of a sequence of max_length
 *   counts  [B, H]    i32 output, optional
 * Uses clkv_select_topk (twice with pbar) and the context workspace (see
 * clkv_keep_set_workspace_size). Errors as clkv_select_topk, plus CLKV_ERR_ARG_RANGE
 * (ratio outside [0, 1] or not finite, window < 0, first_stage_ratio outside [0, 1])
 * and CLKV_ERR_ARG_SHAPE (K too small for max_length). */
typedef struct clkv_keep_set_args {
    clkv_tensor scores;
    clkv_tensor pbar;
    clkv_tensor lengths;
    clkv_tensor indices;
    clkv_tensor counts;
    int64_t max_length;       /* -1: N */
    double ratio;             /* [0.1] used when budget < 0 */
    int64_t budget;           /* [-1] absolute budget per row when >= 0 */
    int64_t window;           /* [0] lower bound of keep (the protected window W) */
    double first_stage_ratio; /* [0.5] two-stage selection only */
} clkv_keep_set_args;

#define CLKV_KEEP_SET_ARGS_INIT                                                                    \
    {                                                                                              \
        .scores = {0}, .pbar = {0}, .lengths = {0}, .indices = {0}, .counts = {0},                 \
        .max_length = -1, .ratio = 0.1, .budget = -1, .window = 0, .first_stage_ratio = 0.5        \
    }

clkv_status clkv_keep_set(clkv_context *ctx, const clkv_keep_set_args *args, cl_event *done);

/* Bytes of workspace clkv_keep_set(ctx, args) will use. */
clkv_status clkv_keep_set_workspace_size(clkv_context *ctx, const clkv_keep_set_args *args,
                                         size_t *bytes);

/* The keep count of the formula above for one sequence of n tokens (host helper; also
 * what sizes `indices`). */
int64_t clkv_keep_count(int64_t n, double ratio, int64_t budget, int64_t window);

/* One eviction step in one call: window attention (clkv_attention_window on the window
 * queries, giving LSE and, for DROPKV/ANDPRO, the window outputs a), the scorer
 * (clkv_score), then the keep-set (clkv_keep_set; CriticalKV with its two-stage
 * selection). Key methods (KNORM, KEYDIFF, STREAMINGLLM) skip the attention.
 *
 *   score      the scorer's arguments: method (or method_name), q, k, v, lengths, w_o,
 *              max_length, scale and the scorer options. score.lse and score.a must be
 *              absent (computed here); score.scores and score.pbar are optional outputs
 *              (absent: kept in the workspace only).
 *   method_name  non-NULL: the method by name (overrides score.method).
 *   indices, counts, ratio, budget, first_stage_ratio: as clkv_keep_set, whose `window`
 *              is the scorer's protected count (W for the window methods by default,
 *              sink + recent for STREAMINGLLM, else 0).
 *
 * Intermediates (lse [B, Hq, W], a [B, Hq, W, D] f32, scores and pbar [B, Hkv, L] f32)
 * live in ONE workspace region above the one the three steps use themselves; see
 * clkv_evict_keep_set_workspace_size. For the methods that do not need a, the window
 * attention's output goes to a single discarded D-element row (a stride-0 view), so
 * H2O's all-query attention stays memory-linear. All steps are validated before anything
 * is enqueued; errors as the three calls (the messages name their arguments, e.g.
 * "q", "k", "indices"), plus CLKV_ERR_ARG_UNSUPPORTED when score.lse or score.a is
 * given and CLKV_ERR_ARG_RANGE for an unknown method_name. */
typedef struct clkv_evict_args {
    clkv_score_args score;
    const char *method_name;
    clkv_tensor indices;
    clkv_tensor counts;
    double ratio;
    int64_t budget;
    double first_stage_ratio;
} clkv_evict_args;

#define CLKV_EVICT_ARGS_INIT                                                                       \
    {                                                                                              \
        .score = CLKV_SCORE_ARGS_INIT, .method_name = NULL, .indices = {0}, .counts = {0},         \
        .ratio = 0.1, .budget = -1, .first_stage_ratio = 0.5                                       \
    }

clkv_status clkv_evict_keep_set(clkv_context *ctx, const clkv_evict_args *args, cl_event *done);

/* Bytes of workspace clkv_evict_keep_set(ctx, args) will use. */
clkv_status clkv_evict_keep_set_workspace_size(clkv_context *ctx, const clkv_evict_args *args,
                                               size_t *bytes);

#ifdef __cplusplus
}
#endif

#endif /* CLKV_SCORE_H */
