/* clkv attention operators (SPEC §1).
 */
#ifndef CLKV_ATTENTION_H
#define CLKV_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#include "clkv/context.h"
#include "clkv/status.h"
#include "clkv/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Decode attention (SPEC §1.1), flash-decoding style.
 *
 * For every sequence b and query head h (KV head h / G, G = Hq / Hkv):
 *   z_j = scale * <q[b,h], K[b,h/G,j]>            for j < len[b, h/G]
 *   LSE = log(sum_j exp(z_j))                        (natural log)
 *   o[b,h] = sum_j exp(z_j - LSE) * V[b,h/G,j]
 * where len[b, kvh] = lengths[b] for [B] lengths (every KV head of a sequence has the
 * same length) or lengths[b, kvh] for [B, Hkv] lengths (a cache compacted with a
 * different kept count per head, e.g. clkv_compact_kv after clkv_budget_adakv).
 * A (sequence, KV head) with length 0 gives o = 0 and LSE = -inf for its G query heads
 * (never NaN).
 *
 * Tensors (strides in elements, last dim contiguous):
 *   q       [B, Hq, D]       f32 | f16 | bf16
 *   k, v    [B, Hkv, L, D]   f32 | f16 | bf16, same dtype for both. HND ([B,H,L,D] storage)
 *                            or NHD ([B,L,H,D] storage, see clkv_tensor_4d_nhd) or any
 *                            other strides.
 *   lengths [B] or [B, Hkv]  i32, device buffer, 0 <= lengths <= min(L, max_length)
 *                            (values outside are clamped to [0, max_length]); [B, Hkv]
 *                            may have any stride for b (e.g. the new_lengths of
 *                            clkv_compact_kv). Absent (buf NULL): every sequence has
 *                            max_length tokens.
 *   o       [B, Hq, D]       f32 | f16 | bf16 (any of them, independent of q and k/v)
 *   lse     [B, Hq]          f32, optional (buf NULL: not computed)
 * D must be 64, 128 or 256. Hq must be a multiple of Hkv.
 * The launch is sized by max_length alone; with per-head lengths each work-group reads
 * the length of its (sequence, KV head) once, so [B] and [B, Hkv] cost the same.
 *
 * Arithmetic is f32 (16-bit inputs are widened exactly); the K/V range of each KV head
 * is split over work-groups (split-K) whose partial (max, sum, acc) are merged by a
 * second kernel, with the split count chosen from the device's compute units and
 * max_length. Each work-group reads a K/V tile once for all G query heads of its KV head
 * (up to 8 at a time; a group of more than 8 heads reads K/V ceil(G/8) times).
 * Scratch memory comes from the context's workspace (see
 * clkv_attention_decode_workspace_size); the call enqueues two kernels on the
 * context's queue and returns without waiting.
 *
 * On NVIDIA with q and K/V both f16 or both bf16, lengths [B] (or absent), num_splits = 0
 * and D 64 or 128 (any length) or D 256 with B * max_length >= 8192, decode runs as
 * clkv_attention_window with T = 1 on its tensor-core kernel (same results within the tolerances of
 * SPEC §0.2; measurably faster, see the README's performance section). CLKV_DECODE_MMA=0 in the
 * environment (read when the context is created) keeps decode on its own kernel.
 */
typedef struct clkv_attention_decode_args {
    clkv_tensor q;
    clkv_tensor k;
    clkv_tensor v;
    clkv_tensor lengths;
    clkv_tensor o;
    clkv_tensor lse;
    /* Host-side upper bound of lengths[] (<= L), used to size the launch so a decode loop
     * never reads device memory back. -1: L. Lengths above it are clamped to it. */
    int64_t max_length;
    /* Softmax scale; 0 means 1/sqrt(D). Must be finite. */
    float scale;
    /* Split count; 0 chooses from the device and max_length. Forced values are clamped
     * to [1, max_length] (used by tests and benchmarks). */
    int32_t num_splits;
} clkv_attention_decode_args;

#define CLKV_ATTENTION_DECODE_ARGS_INIT                                                            \
    {                                                                                              \
        .q = {0}, .k = {0}, .v = {0}, .lengths = {0}, .o = {0}, .lse = {0}, .max_length = -1,      \
        .scale = 0.0f, .num_splits = 0                                                             \
    }

/* Validate `args` and enqueue decode attention. `done` (optional) receives an event
 * that completes with the last kernel; the caller releases it.
 * Errors (nothing enqueued, nothing written): CLKV_ERR_ARG_NULL (ctx, args, a required
 * buffer), CLKV_ERR_ARG_DTYPE, CLKV_ERR_ARG_SHAPE (dims disagree, Hq % Hkv != 0,
 * lengths neither [B] nor [B, Hkv]),
 * CLKV_ERR_ARG_UNSUPPORTED (D not in {64, 128, 256}), CLKV_ERR_ARG_RANGE (max_length >
 * L, non-finite scale, negative num_splits), CLKV_ERR_ARG_STRIDE, CLKV_ERR_ARG_ALIGNMENT,
 * CLKV_ERR_ARG_BUFFER_SIZE, CLKV_ERR_ARG_OVERFLOW; build and launch failures as OpenCL
 * codes (build log in clkv_last_build_log), CLKV_ERR_LOCAL_MEMORY. */
clkv_status clkv_attention_decode(clkv_context *ctx, const clkv_attention_decode_args *args,
                                  cl_event *done);

/* Bytes of workspace clkv_attention_decode(ctx, args) will use (validates args the same
 * way). Pass the result to clkv_context_reserve_workspace to preallocate. */
clkv_status clkv_attention_decode_workspace_size(clkv_context *ctx,
                                                 const clkv_attention_decode_args *args,
                                                 size_t *bytes);

/* Window / prefill attention with LSE (SPEC §1.2), causal, GQA-native, memory-linear.
 *
 * The T query rows of sequence b are its LAST T positions: row t has position
 *   pos(b, t) = len[b] - T + t
 * and sees the keys j <= pos(b, t) (j < len[b]). A row with pos < 0 (a sequence shorter
 * than T) has no key: o = 0 and lse = -inf. For every query head h (KV head h / G):
 *   z_j = scale * <Q[b,h,t], K[b,h/G,j]>,  LSE = log(sum_{j<=pos} exp(z_j)),
 *   O[b,h,t] = sum_{j<=pos} exp(z_j - LSE) * V[b,h/G,j]
 * T = W (an observation window, up to 64 and beyond) is the memory-bound case DropKV,
 * SnapKV and the other window scorers start from; T = len is full causal prefill.
 *
 * Tensors (strides in elements, last dim contiguous):
 *   q       [B, Hq, T, D]    f32 | f16 | bf16 (HND, NHD-style [B,T,Hq,D] storage via
 *                            strides, or any strides)
 *   k, v    [B, Hkv, L, D]   f32 | f16 | bf16, same dtype for both, any strides
 *   lengths [B]              i32, device, optional, 0 <= lengths[b] <= max_length.
 *                            Absent: every sequence has max_length tokens.
 *   o       [B, Hq, T, D]    f32 | f16 | bf16, any strides (independent of q and k/v)
 *   lse     [B, Hq, T]       f32, optional (buf NULL: not computed); natural log
 * D must be 64, 128 or 256; Hq a multiple of Hkv. T = 0 or B = 0 enqueues nothing (the
 * event, if asked for, is a marker). T may exceed L (the leading rows then have no key).
 * Lengths above max_length are clamped to it.
 *
 * Arithmetic is f32 (16-bit inputs widened exactly, o rounded to nearest even). A
 * work-group owns a tile of query rows of one (sequence, KV head) -- all G heads of the
 * group times consecutive window positions -- and streams that KV head's K/V through local
 * memory once per tile, skipping the keys no row of the tile can see (causal). The key
 * range is split over work-groups (split-K) when there are too few row tiles to fill the
 * device (small T: the memory-bound window case); their partial (max, sum, acc) states go
 * to the context's workspace and a second kernel merges them. With one split (typical for
 * prefill) a single kernel writes o and lse and no workspace is used.
 * On NVIDIA, with q and K/V both f16 or both bf16 and D 64, 128 or 256, the products run on
 * the tensor cores (exact 16-bit products, f32 accumulation; the attention weights as a
 * 16-bit high part plus a 16-bit residual, ~16 significant bits), within the same
 * tolerances. With T = 1, G <= 8 (decode) and D 64 or 128 that kernel puts the keys on the mma rows
 * and the G query heads (padded to 8) on the columns, which halves the tensor-core products per
 * key; its splits take interleaved key tiles (split s: tiles s, s + splits, ...), and where splits
 * x G <= 64 the last work-group of each (sequence, KV head) merges the splits (one launch; a small
 * context-owned counter buffer, allocated on first use, keeps the tickets). Above 4K tokens in all
 * (B x max_length), its lanes load the K bytes their tensor-core fragments need straight into
 * registers and each warp copies its V rows one tile ahead into local stages of its own (8 warps
 * per work-group, no barriers in the key loop); shorter caches stage K/V through local memory
 * with cp.async shared by the work-group. The order in which keys are combined differs between
 * these forms, so results may differ in the last bits (within the tolerances). In the environment
 * (read once per process): CLKV_DECODE_KEYROWS=0 keeps the 16-row form, CLKV_DECODE_FUSED_MERGE=0
 * the separate merge kernel, CLKV_DECODE_INTERLEAVE=0 contiguous key ranges per split,
 * CLKV_DECODE_DIRECT=0 the local-memory staging at every length (CLKV_DECODE_DIRECT_WARPS=4|16
 * other work-groups), CLKV_DECODE_PREFETCH=0 the register-load form without requesting the next key
 * tile's K while the current tile is computed, CLKV_DECODE_VASYNC=0 V loaded into registers like K.
 */
typedef struct clkv_attention_window_args {
    clkv_tensor q;
    clkv_tensor k;
    clkv_tensor v;
    clkv_tensor lengths;
    clkv_tensor o;
    clkv_tensor lse;
    /* Host-side upper bound of lengths[] (<= L). -1: L. */
    int64_t max_length;
    /* Softmax scale; 0 means 1/sqrt(D). Must be finite. */
    float scale;
    /* Key-split count; 0 chooses from the device, T and max_length. Forced values are
     * clamped to [1, max_length] (tests and benchmarks); a forced count whose partial
     * states do not fit one device buffer fails with CLKV_ERR_DEVICE_LIMIT. */
    int32_t num_splits;
} clkv_attention_window_args;

#define CLKV_ATTENTION_WINDOW_ARGS_INIT                                                            \
    {                                                                                              \
        .q = {0}, .k = {0}, .v = {0}, .lengths = {0}, .o = {0}, .lse = {0}, .max_length = -1,      \
        .scale = 0.0f, .num_splits = 0                                                             \
    }

/* Validate `args` and enqueue window attention. `done` (optional) receives an event that
 * completes with the last kernel; the caller releases it.
 * Errors (nothing enqueued, nothing written): as clkv_attention_decode -- CLKV_ERR_ARG_NULL
 * (ctx, args, a required buffer), CLKV_ERR_ARG_DTYPE, CLKV_ERR_ARG_SHAPE (dims disagree,
 * including q, o and lse on T; Hq % Hkv != 0), CLKV_ERR_ARG_UNSUPPORTED (D not in {64, 128,
 * 256}), CLKV_ERR_ARG_RANGE (max_length outside [-1, L], non-finite scale, negative
 * num_splits, G*T >= 2^31), CLKV_ERR_ARG_STRIDE, CLKV_ERR_ARG_ALIGNMENT,
 * CLKV_ERR_ARG_BUFFER_SIZE, CLKV_ERR_ARG_OVERFLOW -- and CLKV_ERR_DEVICE_LIMIT (workspace
 * larger than one buffer), CLKV_ERR_LOCAL_MEMORY, OpenCL build and launch codes. */
clkv_status clkv_attention_window(clkv_context *ctx, const clkv_attention_window_args *args,
                                  cl_event *done);

/* Bytes of workspace clkv_attention_window(ctx, args) will use (0 when it runs as one
 * kernel); validates args the same way. Pass it to clkv_context_reserve_workspace to
 * preallocate. */
clkv_status clkv_attention_window_workspace_size(clkv_context *ctx,
                                                 const clkv_attention_window_args *args,
                                                 size_t *bytes);

/* Sparse decode attention (SPEC §1.3): one query per (b, query head) over a token SET of
 * its KV head instead of the whole prefix.
 *
 * For sequence b (n = len[b]) and KV head g = h / G, the attended set is the union of
 *   the sink range   [0, min(sink, n)),
 *   the local range  [max(0, n - local), n),
 *   the index list   idx[b, g, 0 .. n_idx): entries < 0 are unused slots; entries >= n are
 *                    ignored; an entry inside a dense range or repeated in the list
 *                    counts once (the set is a set).
 * Over that set S: z_j = scale * <q[b,h], K[b,g,j]>, LSE = log(sum_{j in S} exp(z_j)),
 * o[b,h] = sum_{j in S} exp(z_j - LSE) V[b,g,j]. An empty set gives o = 0, lse = -inf.
 *
 * Tensors (strides in elements, last dim contiguous):
 *   q       [B, Hq, D]       f32 | f16 | bf16
 *   k, v    [B, Hkv, L, D]   f32 | f16 | bf16, same dtype, any strides
 *   lengths [B]              i32, device, optional (absent: max_length for all)
 *   idx     [B, Hkv, NI]     i32, device, any order (optional: absent = dense ranges only)
 *   o       [B, Hq, D]       f32 | f16 | bf16
 *   lse     [B, Hq]          f32, optional
 * D must be 64, 128 or 256; Hq a multiple of Hkv. lengths[b] above max_length are
 * clamped to it; sink and local larger than n simply cover the whole prefix. idx needs no
 * order and may hold any int32 (INT32_MIN .. INT32_MAX); n_idx = 0 is allowed.
 *
 * Work: the attended list of each (b, KV head) — sink, local, then the n_idx entries —
 * is split over work-groups (split-K, partials merged by a second kernel as in decode
 * attention), so a single sequence with top-k 100 + local 512 + sink 4 still spreads over
 * the whole GPU. Each work-group reads a K/V row once for all G query heads (up to 8 at
 * a time). Only rows of the set are read: rows outside it may hold anything (even NaN).
 * Duplicates: an idx entry counts only if no earlier entry of the same list has the same
 * value (first occurrence wins, so results do not depend on the work split); found with
 * a local-memory hash set (at most 32 KiB), O(n_idx) expected time per work-group, for
 * n_idx up to 4096; beyond that an O(n_idx) scan per entry (O(n_idx^2) per (b, KV head):
 * correct but slow — keep n_idx <= 4096 for speed).
 * The summation order depends on list positions, so the same set given in another order
 * agrees within f32 rounding, and the same call repeated is bit-identical.
 * Scratch memory comes from the context's workspace (clkv_attention_sparse_workspace_size).
 *
 * Selected rows from elsewhere (optional, k_sel / v_sel): when k_sel.buf is set, the K/V
 * row of idx entry i is read from k_sel[b, g, i] / v_sel[b, g, i] instead of
 * k[b, g, idx[b, g, i]] / v[b, g, idx[b, g, i]] (e.g. rows gathered from a host-resident
 * store by clkv_offload_gather with the same idx); the dense ranges still come from k / v.
 * Which entries count (range, dense-range overlap, duplicates) is still decided by the idx
 * VALUES exactly as above, and a duplicate entry's row is never read, so only the rows of
 * counted entries need to be valid. The list order and arithmetic are unchanged: with
 * k_sel[b, g, i] == k[b, g, idx[b, g, i]] (same for v) the result is bit-identical to the
 * call without k_sel. Shapes: k_sel, v_sel [B, Hkv, NI, D], the dtype of k, any strides;
 * both or neither; they need idx. Zero-initialised fields (the INIT macro, or code written
 * before these fields existed that zero-initialises the struct) mean "absent".
 */
typedef struct clkv_attention_sparse_args {
    clkv_tensor q;
    clkv_tensor k;
    clkv_tensor v;
    clkv_tensor lengths;
    clkv_tensor idx;
    clkv_tensor o;
    clkv_tensor lse;
    /* Host-side upper bound of lengths[] (<= L). -1: L. */
    int64_t max_length;
    /* Dense ranges: the first `sink` and the last `local` tokens (>= 0). */
    int64_t sink;
    int64_t local;
    /* Softmax scale; 0 means 1/sqrt(D). Must be finite. */
    float scale;
    /* Optional rows of the idx entries [B, Hkv, NI, D] (see above); buf NULL: absent. */
    clkv_tensor k_sel;
    clkv_tensor v_sel;
} clkv_attention_sparse_args;

#define CLKV_ATTENTION_SPARSE_ARGS_INIT                                                            \
    {                                                                                              \
        .q = {0}, .k = {0}, .v = {0}, .lengths = {0}, .idx = {0}, .o = {0}, .lse = {0},            \
        .max_length = -1, .sink = 0, .local = 0, .scale = 0.0f, .k_sel = {0}, .v_sel = {           \
            0                                                                                      \
        }                                                                                          \
    }

/* Validate `args` and enqueue sparse decode attention; `done` (optional) receives the
 * completion event. Errors (nothing enqueued, nothing written) as clkv_attention_decode,
 * plus: CLKV_ERR_ARG_DTYPE (idx not i32; k_sel / v_sel not the dtype of k),
 * CLKV_ERR_ARG_SHAPE (idx not [B, Hkv, NI]; k_sel / v_sel not [B, Hkv, NI, D]),
 * CLKV_ERR_ARG_NULL (only one of k_sel / v_sel; k_sel without idx), CLKV_ERR_ARG_RANGE
 * (negative sink or local; max_length + n_idx > 2^31-1). */
clkv_status clkv_attention_sparse(clkv_context *ctx, const clkv_attention_sparse_args *args,
                                  cl_event *done);

/* Bytes of workspace clkv_attention_sparse(ctx, args) will use. */
clkv_status clkv_attention_sparse_workspace_size(clkv_context *ctx,
                                                 const clkv_attention_sparse_args *args,
                                                 size_t *bytes);

#ifdef __cplusplus
}
#endif

#endif /* CLKV_ATTENTION_H */
