/* clkv LongFlow: fused decode attention + one-token eviction over a static cache
 * (SPEC §2.3, LongFlow paper, Alg. 1 of its appendix).
 *
 * The cache has S slots per (sequence, KV head), preallocated. Each decode step
 *   (a) writes the new token's K/V into the slot chosen by the previous step (the
 *       "victim") and records its position in the slot -> position map,
 *   (b) runs ONE pass over all S slots computing the decode output (running-max
 *       softmax, split-K + merge) and every slot's importance
 *           score_i = (1/|H|) * sum_{h in H} p_{h,i} * ||v_{h/G,i}||_1,
 *       p_{h,i} = exp(z_{h,i} - LSE_h) the softmax weight of slot i for query head h,
 *       over H = all Hq query heads (per-layer mode) or the G heads of the slot's KV
 *       head (per-KV-head mode),
 *   (c) picks the next victim: the lowest-index EMPTY slot if there is one, otherwise the
 *       valid, unprotected slot of smallest score, ties to the lower slot index.
 * so the work per step is constant. Everything stays on the device; a step enqueues one
 * kernel (NVIDIA with a 16-bit cache, D 64 / 128 / 256 and q of the cache dtype: attention,
 * scores and victim in one launch) or two, and never waits for the device.
 *
 * Slot state. pos[b, u, i] (i32) is the position (0-based token index in the sequence)
 * held by slot i, or -1 when the slot is empty ("mask off": it takes no part in
 * attention). u is 0 in per-layer mode (one map per sequence, shared by all KV heads)
 * and the KV head in per-KV-head mode. next_pos[b] is the position the next step's token
 * gets. victim[b, u] is the slot the next step writes.
 *
 * Protection. The newest `protect` positions are never chosen as the victim: a valid
 * slot is protected when its position is >= newest - protect + 1, where newest is the
 * position written by this step (after a load: the last prompt position, next_pos - 1).
 * Default protect = 1: the token just written survives at least one more step (evicting
 * it at once would discard the token the model just produced). protect = 0 is the
 * authors' kernel exactly: the argmin runs over every valid slot, the new token
 * included. 0 <= protect < S, so a full cache always has an unprotected slot.
 *
 * Numerics. All arithmetic is f32 with running-max softmax (on NVIDIA with a 16-bit
 * cache, D 64/128/256 and q of the cache dtype the products run on the tensor cores: 16-bit
 * operands, exact products, f32 accumulation, the softmax weights split into two 16-bit
 * parts); the score is ranked in the linear domain as exp(z - LSE + log ||v||_1) with the
 * final per-head LSE, so no logit
 * magnitude overflows (the authors' kernel uses exp(z) without a max and overflows for
 * |z| > ~88). A slot whose score underflows f32 scores 0 (ties then go to the lower
 * index).
 *
 * Lifetime. The cache keeps a pointer to the context it was created on, which must
 * outlive it; all its work goes to that context's in-order queue.
 */
#ifndef CLKV_LONGFLOW_H
#define CLKV_LONGFLOW_H

#include <stddef.h>
#include <stdint.h>

#include "clkv/context.h"
#include "clkv/status.h"
#include "clkv/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct clkv_longflow_cache clkv_longflow_cache;

typedef enum clkv_longflow_mode {
    /* The authors' code: one victim slot per sequence, shared by all KV heads; the score
     * is averaged over all Hq query heads. Slot map [B, 1, S]. */
    CLKV_LONGFLOW_PER_LAYER = 0,
    /* A victim per (sequence, KV head); the score is averaged over the G query heads of
     * that KV head. Slot map [B, Hkv, S]. */
    CLKV_LONGFLOW_PER_KV_HEAD = 1,
} clkv_longflow_mode;

typedef struct clkv_longflow_cache_create_args {
    int64_t batch;    /* B >= 1 */
    int64_t q_heads;  /* Hq >= 1, a multiple of kv_heads, at most 1024 */
    int64_t kv_heads; /* Hkv >= 1 */
    int64_t head_dim; /* D: 64, 128 or 256 */
    int64_t slots;    /* S >= 2: the budget, slots per (sequence, KV head) */
    clkv_dtype dtype; /* K/V storage: CLKV_F32, CLKV_F16 or CLKV_BF16 */
    clkv_longflow_mode mode;
    int32_t protect; /* newest positions never evicted, 0 <= protect < S; default 1 */
} clkv_longflow_cache_create_args;

#define CLKV_LONGFLOW_CACHE_CREATE_ARGS_INIT                                                       \
    {                                                                                              \
        .batch = 0, .q_heads = 0, .kv_heads = 0, .head_dim = 0, .slots = 0, .dtype = CLKV_BF16,    \
        .mode = CLKV_LONGFLOW_PER_LAYER, .protect = 1                                              \
    }

/* Create a cache on `ctx`: allocates K, V [B, Hkv, S, D] (dtype), the slot map, victims,
 * next positions and a small synchronisation buffer, and enqueues their initialisation
 * on the context's queue: every slot empty (pos = -1, K = V = 0), victim 0, next
 * position 0. A cache that is never loaded therefore starts an empty sequence at
 * position 0.
 * Errors (nothing allocated): CLKV_ERR_ARG_NULL (ctx, args, out), CLKV_ERR_ARG_RANGE
 * (a size < 1, protect outside [0, S-1], Hq > 1024, B > 65535, S > 2^31-1, unknown
 * mode), CLKV_ERR_ARG_SHAPE (Hq % Hkv != 0), CLKV_ERR_ARG_UNSUPPORTED (D),
 * CLKV_ERR_ARG_DTYPE, CLKV_ERR_ARG_OVERFLOW, CLKV_ERR_DEVICE_LIMIT (K or V larger than
 * one buffer may be), OpenCL allocation errors. */
clkv_status clkv_longflow_cache_create(clkv_context *ctx,
                                       const clkv_longflow_cache_create_args *args,
                                       clkv_longflow_cache **out);

/* Release the cache's buffers. Accepts NULL. Does not wait for enqueued work. */
void clkv_longflow_cache_destroy(clkv_longflow_cache *cache);

/* Descriptors of the cache's own device buffers (owned by the cache; valid until
 * destroy), so callers can read or fill them directly. With cache NULL: an absent
 * tensor (buf NULL).
 *   k, v            [B, Hkv, S, D]  the cache dtype, contiguous
 *   positions       [B, Hm, S]      i32, -1 = empty slot (Hm = 1 per-layer, Hkv per-KV-head)
 *   victims         [B, Hm]         i32, the slot the next step writes
 *   next_positions  [B]             i32, the position of the next step's token
 * A caller that edits them keeps the invariants: positions of one map distinct,
 * victims in [0, S). */
clkv_tensor clkv_longflow_cache_k(const clkv_longflow_cache *cache);
clkv_tensor clkv_longflow_cache_v(const clkv_longflow_cache *cache);
clkv_tensor clkv_longflow_cache_positions(const clkv_longflow_cache *cache);
clkv_tensor clkv_longflow_cache_victims(const clkv_longflow_cache *cache);
clkv_tensor clkv_longflow_cache_next_positions(const clkv_longflow_cache *cache);

/* Fill the cache from a prompt.
 *
 * For sequence b with n = clamp(lengths[b], 0, max_length) prompt tokens, slot i of map
 * u holds prompt token
 *   indices[b, u, i]   when indices are given (entries -1, outside [0, n), or i >= K
 *                      leave the slot empty); in per-layer mode Hsel = 1 and the list is
 *                      shared by all KV heads, in per-KV-head mode Hsel = Hkv;
 *   i                  without indices, for i < n (needs max_length <= S).
 * K/V rows of kept tokens are converted to the cache dtype (RNE); empty slots get K = V
 * = 0 and pos = -1; pos = the prompt token index; next_pos[b] = n.
 * Prompts longer than the budget are compressed first: pass the kept indices of a scorer
 * (the SPEC's SnapKV, window 32, pool 5) as produced by clkv_select_topk (ascending,
 * -1 padded). Entries must be distinct.
 *
 * First victim: the lowest-index empty slot; if a map has none, the argmin of the step
 * score computed with `q` (the last prompt token's query, as if a step without a new
 * token had run, protecting the newest `protect` prompt positions); without q, the
 * lowest-index unprotected slot.
 *
 * Tensors (strides in elements, last dim contiguous):
 *   k, v     [B, Hkv, Lp, D]  f32 | f16 | bf16, same dtype, any strides (HND/NHD)
 *   lengths  [B]              i32, device, optional (absent: n = max_length)
 *   indices  [B, Hsel, K]     i32, optional, K <= S
 *   q        [B, Hq, D]       f32 | f16 | bf16, optional
 * Two kernels are enqueued (the copy and the victim choice), three with q (the step's
 * score pass without a write); scratch from the context workspace.
 */
typedef struct clkv_longflow_load_args {
    clkv_tensor k;
    clkv_tensor v;
    clkv_tensor lengths;
    clkv_tensor indices;
    clkv_tensor q;
    /* Host-side upper bound of lengths[] (<= Lp). -1: Lp. */
    int64_t max_length;
    /* Softmax scale for q; 0 means 1/sqrt(D). Must be finite. */
    float scale;
} clkv_longflow_load_args;

#define CLKV_LONGFLOW_LOAD_ARGS_INIT                                                               \
    {                                                                                              \
        .k = {0}, .v = {0}, .lengths = {0}, .indices = {0}, .q = {0}, .max_length = -1,            \
        .scale = 0.0f                                                                              \
    }

/* Errors (nothing enqueued, nothing written): CLKV_ERR_ARG_NULL (cache, args, k, v),
 * CLKV_ERR_ARG_DTYPE, CLKV_ERR_ARG_SHAPE (dims disagree with the cache or each other,
 * indices dims[1] != Hsel, K > S), CLKV_ERR_ARG_RANGE (max_length outside [-1, Lp],
 * max_length > S without indices, non-finite scale), CLKV_ERR_ARG_STRIDE,
 * CLKV_ERR_ARG_ALIGNMENT, CLKV_ERR_ARG_BUFFER_SIZE, CLKV_ERR_ARG_OVERFLOW; build and
 * launch failures as OpenCL codes. */
clkv_status clkv_longflow_cache_load(clkv_longflow_cache *cache,
                                     const clkv_longflow_load_args *args, cl_event *done);

/* One decode step (see the top of this file).
 *
 * Tensors (strides in elements, last dim contiguous):
 *   q             [B, Hq, D]   f32 | f16 | bf16
 *   k_new, v_new  [B, Hkv, D]  f32 | f16 | bf16, same dtype (stored rounded to the cache
 *                              dtype; attention uses the stored values)
 *   o             [B, Hq, D]   f32 | f16 | bf16, the attention output over the S slots
 *                              after the write
 *   lse           [B, Hq]      f32, optional: natural-log LSE of the step
 *   scores        [B, Hm, S]   f32, optional: every slot's score after the pass
 *                              (-inf for empty slots; protected slots get their score too)
 *   victims       [B, Hm]      i32, optional: the slot the NEXT step will write (the
 *                              cache keeps its own copy, see clkv_longflow_cache_victims)
 * Every sequence advances by one token per step.
 */
typedef struct clkv_longflow_step_args {
    clkv_tensor q;
    clkv_tensor k_new;
    clkv_tensor v_new;
    clkv_tensor o;
    clkv_tensor lse;
    clkv_tensor scores;
    clkv_tensor victims;
    /* Softmax scale; 0 means 1/sqrt(D). Must be finite. */
    float scale;
} clkv_longflow_step_args;

#define CLKV_LONGFLOW_STEP_ARGS_INIT                                                               \
    {                                                                                              \
        .q = {0}, .k_new = {0}, .v_new = {0}, .o = {0}, .lse = {0}, .scores = {0}, .victims = {0}, \
        .scale = 0.0f                                                                              \
    }

/* Validate and enqueue one step: one kernel where the tensor-core path applies (see the top
 * of this file), otherwise two (write + attention/score partials over split-K chunks;
 * merge + score + victim argmin). `done` (optional) receives an event that completes with
 * the last kernel; the caller releases it.
 * Errors (nothing enqueued, nothing written): CLKV_ERR_ARG_NULL (cache, args, q, k_new,
 * v_new, o), CLKV_ERR_ARG_DTYPE, CLKV_ERR_ARG_SHAPE (dims disagree with the cache),
 * CLKV_ERR_ARG_RANGE (non-finite scale), CLKV_ERR_ARG_STRIDE, CLKV_ERR_ARG_ALIGNMENT,
 * CLKV_ERR_ARG_BUFFER_SIZE, CLKV_ERR_ARG_OVERFLOW; build and launch failures as OpenCL
 * codes, CLKV_ERR_LOCAL_MEMORY. */
clkv_status clkv_longflow_step(clkv_longflow_cache *cache, const clkv_longflow_step_args *args,
                               cl_event *done);

/* Bytes of context workspace a step (and a load) uses: the split-K partials
 * (B*Hq*splits*(D+2) f32), the per-(query head, slot) score logits (B*Hq*S f32) and the
 * victim candidates of the score chunks; fixed at cache creation. Pass it to
 * clkv_context_reserve_workspace to preallocate. Nothing lives in the workspace between
 * calls. Errors: CLKV_ERR_ARG_NULL. */
clkv_status clkv_longflow_step_workspace_size(const clkv_longflow_cache *cache, size_t *bytes);

#ifdef __cplusplus
}
#endif

#endif /* CLKV_LONGFLOW_H */
