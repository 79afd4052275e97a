/* clkv ParisKV retrieval (SPEC §4, paper 002): Stage I collision scoring, candidate
 * selection, Stage II RSQ-IP rerank, final top-k, and a per-layer retrieval index that
 * runs the whole decode step on the device.
 *
 * Inputs come from the encoder (clkv/pariskv.h): per key the centroid ids, 4-bit codes
 * and weights, per (b, KV head) the per-centroid key counts of the retrieval zone, and
 * per (b, KV head) the transformed group-mean query (clkv_pariskv_query_transform).
 *
 * Retrieval zone. Token positions [zone_start, zone_start + n_b) of sequence b (zone_start
 * is the attention sink, the same for every sequence; n_b per sequence). Only keys of the
 * zone are scored, and `counts` must count exactly the zone's keys.
 *
 * Stage I (collision), per (b, KV head h) and subspace blk, with q~ = q_rot[b, h]:
 *   score(c) = sum_j (bit j of c ? +q~_{blk*m+j} : -q~_{blk*m+j}), f32, j = 0..m-1 in order
 *   c' ranks better than c  <=>  score(c') > score(c) or (score(c') == score(c) and c' < c)
 *   before(c) = sum of counts[b, h, blk, c'] over the c' ranked better than c
 *   bonus(c)  = #{t : before(c) < T_t}, t = 0..5
 *   S_i = sum_blk bonus(ids[b, h, zone_start + i, blk])            in [0, 6 * nblocks]
 * with the tiers T_t = ceil((n_b * rho) * r_t), r = {0.05, 0.15, 0.30, 0.50, 0.75, 1.0},
 * evaluated on the host in double (clkv_pariskv_plan). S is an exact integer.
 *
 * Candidate selection: C_b = min(n_b, max(ceil(beta * n_b), top_k)) zone tokens with the
 * largest S; ties at the threshold value are taken in increasing position order
 * (deterministic). Implemented as a per-chunk histogram over the 6*nblocks+1 values of S
 * (fused into the collision kernel), a threshold pass and an ordered compaction: the
 * candidate list holds positions in increasing order.
 *
 * Stage II (RSQ-IP rerank), for every candidate i:
 *   s^_i = q_norm[b, h] * sum_blk w_{i,blk} * sum_j v_{i,blk,j} q~_{blk*m+j}
 * with v_j = (sign bit ? +1 : -1) * a[t_j] from the 4-bit codes and the Lloyd-Max
 * levels a[] (f32). The final top_k of s^ (ties: lower position first) is returned in
 * increasing position order, padded with -1 when C_b < top_k (only when n_b < top_k).
 *
 * Ragged batches: every per-sequence quantity (n_b, the tiers, C_b) lives in a small
 * device "plan" tensor computed on the host from host-known zone lengths
 * (clkv_pariskv_plan) and uploaded by the caller when a length changes; inside the
 * ParisKV decode loop zone lengths change only when an update buffer is flushed (every
 * `update` steps), so no per-step transfer is needed. The retrieval index below does
 * this itself.
 */
#ifndef CLKV_PARISKV_RETRIEVE_H
#define CLKV_PARISKV_RETRIEVE_H

#include <stddef.h>
#include <stdint.h>

#include "clkv/attention.h"
#include "clkv/context.h"
#include "clkv/offload.h"
#include "clkv/pariskv.h"
#include "clkv/status.h"
#include "clkv/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CLKV_PARISKV_NUM_TIERS 6
/* Rows of a plan tensor: n, T_0 .. T_5, C. */
#define CLKV_PARISKV_PLAN_ROWS 8
#define CLKV_PARISKV_DEFAULT_TOP_K 100
#define CLKV_PARISKV_DEFAULT_SINK 4
#define CLKV_PARISKV_DEFAULT_LOCAL 512
#define CLKV_PARISKV_DEFAULT_UPDATE 512
#define CLKV_PARISKV_DENSE_MIN 2000

/* ------------------------------------------------------------------------------------ */
/* Host-side schedule and plan                                                          */
/* ------------------------------------------------------------------------------------ */

/* The authors' adaptive ratios (SPEC §4) for a retrieval zone of n tokens:
 * n < 5000: (0.5, 0.5); n < 10000: (0.25, 0.3); n < 30000: (0.2, 0.25); else (0.1, 0.2).
 * ("5K" etc. read as 5000, 10000, 30000.) Either output pointer may be NULL. */
void clkv_pariskv_default_ratios(int64_t n, double *beta, double *rho);

/* Fill a plan for B sequences with zone lengths n[0..B): plan is [CLKV_PARISKV_PLAN_ROWS,
 * B] int32 row-major (row r holds field r of every sequence, so row 7 is a contiguous
 * [B] vector):
 *   plan[0*B + b]       = n_b
 *   plan[(1+t)*B + b]   = T_t = ceil((n_b * rho_b) * r_t)      (double, t = 0..5)
 *   plan[7*B + b]       = C_b = min(n_b, max(ceil(beta_b * n_b), top_k))
 * beta_b, rho_b: the given `beta` and `rho` when both are > 0, else
 * clkv_pariskv_default_ratios(n_b). *max_candidates (optional) receives max_b C_b.
 * Errors (plan untouched): CLKV_ERR_ARG_NULL (n or plan with B > 0), CLKV_ERR_ARG_RANGE
 * (B < 0, n_b outside [0, 2^31-1], top_k outside [0, 2^31-1], exactly one of beta/rho
 * positive, beta or rho > 1, rho < beta, a NaN). */
clkv_status clkv_pariskv_plan(const int64_t *n, int64_t B, int64_t top_k, double beta, double rho,
                              int32_t *plan, int64_t *max_candidates);

/* ------------------------------------------------------------------------------------ */
/* Search: Stage I + candidate selection + Stage II + top-k                             */
/* ------------------------------------------------------------------------------------ */

/* Tensors (strides in elements, last dim contiguous; m = subspace dim, nblk = D / m):
 *   q_rot      [B, Hkv, D]          f32   (clkv_pariskv_query_transform)
 *   q_norm     [B, Hkv]             f32   (||group-mean query||; only scales s^, so it
 *                                         does not change the selection)
 *   ids        [B, Hkv, L, nblk]    u8    (clkv_pariskv_encode)
 *   codes      [B, Hkv, L, D/2]     u8
 *   weights    [B, Hkv, L, nblk]    f32 | f16 | bf16
 *   counts     [B, Hkv, nblk, 2^m]  u32   per-centroid key counts of the zone
 *   plan       [8, B]               i32   device copy of clkv_pariskv_plan's output
 *   idx        [B, Hkv, top_k]      i32   output: positions (zone_start + i), ascending,
 *                                         -1 padded
 * Optional outputs (buf NULL: not written; they exist for tests and analysis):
 *   collide_scores   [B, Hkv, Z]    i32   S_i of zone token i, i < n_b (Z >= max_zone)
 *   candidates       [B, Hkv, Cm]   i32   the C_b candidate positions ascending, then -1
 *                                         (Cm >= max_candidates)
 *   candidate_scores [B, Hkv, Cm]   f32   s^ of candidates[.., j], j < C_b (rest untouched)
 * Requirements: D as the encoder (64, 128, 256, or an even D in [2, 512] that is not a
 * power of two); m in 2..8 dividing D; zone_start + max_zone <= L;
 * the plan's n_b <= max_zone and C_b <= max_candidates (the host bounds size the launch;
 * larger device values are clamped to them).
 *
 * Work: 7 kernels (centroid rank, collide + histogram, threshold, compaction, rerank,
 * threshold-bin collection, top-k), 6 when the compaction work-groups fit in about one
 * wave (at most 8 per compute unit: then each finds the threshold and its output base
 * itself); scratch from the context workspace (clkv_pariskv_search_workspace_size).
 * Nothing blocks.
 */
typedef struct clkv_pariskv_search_args {
    clkv_tensor q_rot;
    clkv_tensor q_norm;
    clkv_tensor ids;
    clkv_tensor codes;
    clkv_tensor weights;
    clkv_tensor counts;
    clkv_tensor plan;
    clkv_tensor idx;
    clkv_tensor collide_scores;
    clkv_tensor candidates;
    clkv_tensor candidate_scores;
    /* First position of the retrieval zone (the sink size), >= 0. */
    int64_t zone_start;
    /* Host upper bound of n_b; -1: L - zone_start. */
    int64_t max_zone;
    /* Host upper bound of C_b; -1: max_zone. */
    int64_t max_candidates;
    /* Final k (the last dim of idx), >= 0. */
    int64_t top_k;
    /* Subspace dim used by the encoder. */
    int32_t m;
    /* Levels used by the encoder (levels->m == m), or NULL for
     * clkv_pariskv_levels_default(m, computed_m8). */
    const clkv_pariskv_levels *levels;
    int32_t computed_m8;
} clkv_pariskv_search_args;

#define CLKV_PARISKV_SEARCH_ARGS_INIT                                                              \
    {                                                                                              \
        .q_rot = {0}, .q_norm = {0}, .ids = {0}, .codes = {0}, .weights = {0}, .counts = {0},      \
        .plan = {0}, .idx = {0}, .collide_scores = {0}, .candidates = {0},                         \
        .candidate_scores = {0}, .zone_start = 0, .max_zone = -1, .max_candidates = -1,            \
        .top_k = CLKV_PARISKV_DEFAULT_TOP_K, .m = CLKV_PARISKV_DEFAULT_M, .levels = NULL,          \
        .computed_m8 = 0                                                                           \
    }

/* Validate `args` and enqueue the search. `done` (optional) receives an event completing
 * with the last kernel. Errors (nothing enqueued, nothing written): CLKV_ERR_ARG_NULL,
 * CLKV_ERR_ARG_DTYPE, CLKV_ERR_ARG_SHAPE (dims disagree, m does not divide D),
 * CLKV_ERR_ARG_UNSUPPORTED (D not as above), CLKV_ERR_ARG_RANGE (m outside
 * 2..8, zone_start < 0, max_zone / max_candidates / top_k out of range, zone beyond L,
 * bad levels, sizes beyond 2^31-1), CLKV_ERR_ARG_STRIDE, CLKV_ERR_ARG_ALIGNMENT,
 * CLKV_ERR_ARG_BUFFER_SIZE, CLKV_ERR_ARG_OVERFLOW; OpenCL codes, CLKV_ERR_LOCAL_MEMORY
 * and CLKV_ERR_DEVICE_LIMIT for build / launch failures. */
clkv_status clkv_pariskv_search(clkv_context *ctx, const clkv_pariskv_search_args *args,
                                cl_event *done);

/* Bytes of workspace clkv_pariskv_search(ctx, args) uses (validates args the same way). */
clkv_status clkv_pariskv_search_workspace_size(clkv_context *ctx,
                                               const clkv_pariskv_search_args *args, size_t *bytes);

/* ------------------------------------------------------------------------------------ */
/* Retrieval index: one per layer                                                       */
/* ------------------------------------------------------------------------------------ */

/* A per-layer ParisKV index over a caller-owned K/V cache [B, Hkv, L, D].
 *
 * Regions of sequence b (len_b tokens, positions):
 *   sink      [0, s_b)                          s_b = min(sink, len_b)
 *   zone      [s_b, s_b + n_b)                  encoded, searched (Stage I/II)
 *   local     the next up to `local` tokens      attended densely
 *   update    the newest tokens after them       attended densely (< `update` tokens)
 * At prefill n_b = max(0, len_b - sink - local). Each step appends one token to every
 * sequence; when a sequence's dense tail (local + update) reaches local + update tokens,
 * its oldest `update` tail tokens move into the zone: they are encoded incrementally
 * (clkv_pariskv_encode over that range, counts updated), and the index's device plan is
 * refreshed (a non-blocking write of 8*B ints, once per `update` steps). Lengths are
 * tracked on the host from the prefill lengths and the number of steps, so the decode
 * loop never reads device memory.
 *
 * The index owns its code storage (ids, codes, weights [B, Hkv, capacity, ..], counts,
 * plan, q_rot, q_norm, the retrieved indices; created once), not the K/V cache; searches
 * use the context workspace only within one call. Memory: B * Hkv * capacity * (D/m +
 * D/2 + D/m * weight size) bytes (D = 128, m = 8, f16 weights: 112 bytes per token and
 * KV head). The caller writes the new
 * token's K/V at position len_b (the length before the step) and keeps a device lengths
 * buffer [B] that equals the index's lengths (clkv_pariskv_index_length) at every call.
 *
 * Host-resident retrieval zone (cfg.kv_store, SPEC §4 Offload). NULL (default): every row
 * is read from the caller's device cache, as above. Non-NULL: a store made by
 * clkv_offload_store_create on the same context with the index's B, Hkv, D, a capacity
 * >= the index capacity, and the dtype of the K/V cache (checked at prefill and each
 * step). The caller owns the store (create it before the index, destroy it after); the
 * index writes it and reads it, nothing else should write it while the index is used.
 *   Layout: store row t of (b, h) = token position t of sequence b, KV head h; only
 *   the zone positions [s_b, s_b + n_b) are written (and read).
 *   Writes: the zone rows of the cache are copied into the store when they enter the
 *   zone: at prefill (clkv_pariskv_index_prefill_kv, which therefore needs v) and when
 *   a step flushes the update buffer (the spilled rows), enqueued right after their
 *   encoding (device-to-host copies; no blocking).
 *   Reads: a sparse step gathers the rows of the retrieved positions idx from the store
 *   (clkv_offload_gather: on NVIDIA a kernel reading the host-located buffers directly,
 *   zero-copy; on devices without kernel-readable host memory a CPU copy of the
 *   selected rows into a pinned staging area plus one write per sequence, which reads
 *   idx back and so waits for the search) into index-owned device buffers
 *   [B, Hkv, top_k, D] (extra device memory: 2 * B * Hkv * top_k * D * element size), and
 *   the sparse attention reads those rows for the idx entries
 *   (clkv_attention_sparse_args.k_sel / v_sel) and the sink and dense tail (local window +
 *   update buffer) from the device cache.
 *   So after a token has entered the zone (the step or prefill that moved it has been
 *   enqueued), sparse steps never read its cache row again; dense steps (below the
 *   dense threshold) still attend the whole cache, and the cache must hold a token until
 *   it has entered the zone. Results are bit-identical to the same index without a
 *   store (the attention sees the same values in the same order).
 */
typedef struct clkv_pariskv_index clkv_pariskv_index;

typedef struct clkv_pariskv_index_config {
    int64_t batch;                     /* B, >= 1 */
    int64_t q_heads;                   /* Hq, a multiple of kv_heads */
    int64_t kv_heads;                  /* Hkv, >= 1 */
    int64_t head_dim;                  /* D: 64, 128, 256 */
    int64_t capacity;                  /* L: positions of the caller's cache, >= 1 */
    int32_t m;                         /* subspace dim (2, 4, 8 dividing D) */
    uint64_t seed;                     /* sigma seed (used when signs is NULL) */
    const int8_t *signs;               /* explicit sigma (D entries), copied, or NULL */
    const clkv_pariskv_levels *levels; /* explicit levels (copied), or NULL: default */
    int32_t computed_m8;
    clkv_dtype weight_dtype; /* storage of the weights (default f16) */
    int64_t sink, local, update, top_k;
    /* Zone ratios: both > 0 fixes them, else the length schedule. */
    double beta, rho;
    /* Dense attention while len_b < max(dense_min, sink + local + 2*top_k) for EVERY
     * sequence of the batch; otherwise the sparse path for all (a sequence in the sparse
     * path whose zone is empty attends its dense ranges only, which is its whole
     * prefix). */
    int64_t dense_min;
    /* Host-resident store of the zone's K/V (see above), borrowed; NULL: device cache. */
    clkv_offload_store *kv_store;
} clkv_pariskv_index_config;

#define CLKV_PARISKV_INDEX_CONFIG_INIT                                                             \
    {                                                                                              \
        .batch = 1, .q_heads = 0, .kv_heads = 0, .head_dim = 128, .capacity = 0,                   \
        .m = CLKV_PARISKV_DEFAULT_M, .seed = 0, .signs = NULL, .levels = NULL, .computed_m8 = 0,   \
        .weight_dtype = CLKV_F16, .sink = CLKV_PARISKV_DEFAULT_SINK,                               \
        .local = CLKV_PARISKV_DEFAULT_LOCAL, .update = CLKV_PARISKV_DEFAULT_UPDATE,                \
        .top_k = CLKV_PARISKV_DEFAULT_TOP_K, .beta = 0.0, .rho = 0.0,                              \
        .dense_min = CLKV_PARISKV_DENSE_MIN, .kv_store = NULL                                      \
    }

/* Create an index (allocates its device buffers; counts zeroed). *out = NULL on error.
 * Errors: CLKV_ERR_ARG_NULL, CLKV_ERR_ARG_RANGE (a config field out of range: batch,
 * heads, capacity, sink/local/update/top_k < 0, update < 1, beta/rho; kv_store of another
 * context or with a capacity below the index's), CLKV_ERR_ARG_SHAPE (Hq % Hkv; kv_store
 * B, Hkv or D differ), CLKV_ERR_ARG_UNSUPPORTED (D), CLKV_ERR_ARG_DTYPE (weight_dtype),
 * OpenCL allocation errors. */
clkv_status clkv_pariskv_index_create(clkv_context *ctx, const clkv_pariskv_index_config *cfg,
                                      clkv_pariskv_index **out);

/* Release everything (NULL is accepted). Finish the queue first if calls using the index
 * are in flight (only the index's own pending plan upload is waited for). */
void clkv_pariskv_index_destroy(clkv_pariskv_index *index);

/* Prefill: lengths[b] (host, 0 <= lengths[b] <= capacity) tokens of k [B, Hkv, L, D]
 * (f32 | f16 | bf16, L == capacity, any strides) are in the cache. Resets the index and
 * encodes every zone in bulk. Errors as clkv_pariskv_encode plus CLKV_ERR_ARG_RANGE
 * (a length), and CLKV_ERR_ARG_NULL ("v") for an index with a kv_store (it needs the
 * values: use clkv_pariskv_index_prefill_kv). */
clkv_status clkv_pariskv_index_prefill(clkv_context *ctx, clkv_pariskv_index *index,
                                       const clkv_tensor *k, const int64_t *lengths);

/* Prefill with the values too: as clkv_pariskv_index_prefill, and with a kv_store the
 * zone rows of k and v ([B, Hkv, L, D], the same shape rules; both the store's dtype) are
 * copied into the store. v may be NULL without a store (then it is not read; when given it
 * is validated). Errors: as clkv_pariskv_index_prefill, plus CLKV_ERR_ARG_SHAPE /
 * CLKV_ERR_ARG_STRIDE / ... for v, CLKV_ERR_ARG_DTYPE (k or v not the store's dtype). */
clkv_status clkv_pariskv_index_prefill_kv(clkv_context *ctx, clkv_pariskv_index *index,
                                          const clkv_tensor *k, const clkv_tensor *v,
                                          const int64_t *lengths);

/* Current host-side length of sequence b (-1 when b is out of range or index is NULL). */
int64_t clkv_pariskv_index_length(const clkv_pariskv_index *index, int64_t b);
/* Current zone length n_b (-1 when out of range). */
int64_t clkv_pariskv_index_zone_length(const clkv_pariskv_index *index, int64_t b);

/* Search with query q [B, Hq, D] (f32 | f16 | bf16): the group-mean query transform,
 * then clkv_pariskv_search over the current zones; idx [B, Hkv, top_k] i32 receives
 * positions (ascending, -1 padded). Errors: argument errors as clkv_pariskv_search. */
clkv_status clkv_pariskv_index_search(clkv_context *ctx, clkv_pariskv_index *index,
                                      const clkv_tensor *q, const clkv_tensor *idx, cl_event *done);

/* One decode step. Before the call the caller has written the new token's K/V of every
 * sequence at position len_b (len_b = clkv_pariskv_index_length before the call) and set
 * lengths[b] = len_b + 1 on the device. The step
 *   1. appends the token (host lengths + 1; flushes full update buffers into the zone),
 *   2. dense path: clkv_attention_decode over [0, len_b + 1);
 *      sparse path: clkv_pariskv_index_search, then clkv_attention_sparse over
 *      sink + retrieved top_k + the dense tail (local + update buffer),
 * writing o [B, Hq, D] and the optional lse [B, Hq]. On GPUs, where Hq / Hkv <= 8 and
 * top_k <= 1024, the sparse path runs its own launch plan of the same computation (the
 * retrieved positions are distinct: no duplicate detection; one-tile splits, merged inside
 * the kernel on NVIDIA; on NVIDIA with the zone in device memory the search's final top-k
 * runs in the same launch), so o / lse may differ from a clkv_attention_sparse call in the last
 * bits (summation order) while the positions are the same; with or without kv_store the
 * results are bit-identical. `idx_out` (optional, [B, Hkv,
 * top_k] i32) receives the retrieved positions of the sparse path (untouched on the dense
 * path). With a kv_store the sparse path gathers the retrieved rows from the store first
 * (and a flush copies the spilled rows into it), see the index description.
 * Errors: argument errors of the operators used, CLKV_ERR_ARG_DTYPE (k or v not the
 * kv_store's dtype), and CLKV_ERR_ARG_RANGE when a sequence would exceed the capacity
 * (nothing appended then). */
typedef struct clkv_pariskv_step_args {
    clkv_tensor q;
    clkv_tensor k;
    clkv_tensor v;
    clkv_tensor lengths;
    clkv_tensor o;
    clkv_tensor lse;
    clkv_tensor idx_out;
    float scale; /* 0: 1/sqrt(D) */
} clkv_pariskv_step_args;

#define CLKV_PARISKV_STEP_ARGS_INIT                                                                \
    {                                                                                              \
        .q = {0}, .k = {0}, .v = {0}, .lengths = {0}, .o = {0}, .lse = {0}, .idx_out = {0},        \
        .scale = 0.0f                                                                              \
    }

clkv_status clkv_pariskv_index_step(clkv_context *ctx, clkv_pariskv_index *index,
                                    const clkv_pariskv_step_args *args, cl_event *done);

/* 1 when the next step (with lengths + 1) takes the sparse path, 0 when dense, -1 for a
 * NULL index. */
int clkv_pariskv_index_next_is_sparse(const clkv_pariskv_index *index);

#ifdef __cplusplus
}
#endif

#endif /* CLKV_PARISKV_RETRIEVE_H */
