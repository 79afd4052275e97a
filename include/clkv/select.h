/* clkv selection and compaction (SPEC §2.4): per-(b, head) top-k of a score row and the
 * gather of the kept tokens of a K/V cache into a dense cache.
 */
#ifndef CLKV_SELECT_H
#define CLKV_SELECT_H

#include <stddef.h>
#include <stdint.h>

#include "clkv/context.h"
#include "clkv/status.h"
#include "clkv/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Top-k selection per (b, h) row of a score tensor.
 *
 * For every sequence b and head h, with n = the valid length of sequence b and
 * kr = the row's k (see k / k_per_row), select c = min(kr, n) of the scores
 * scores[b, h, 0 .. n): the c largest (largest != 0, default) or the c smallest.
 * "k > n" is not an error: the row then selects all of its n tokens.
 *
 * Order and ties (SPEC §0.2), deterministic: scores are compared by value; among equal
 * scores the lower token index wins (is kept first), whatever the device or launch
 * geometry. -0.0 and +0.0 compare equal (a tie, decided by index). NaN scores rank below
 * every number in both modes: they are selected only when fewer than c non-NaN scores
 * exist, lowest indices first. +-inf are ordinary extreme values.
 *
 * Output: indices[b, h, 0 .. c) hold the selected token indices in ASCENDING POSITION
 * ORDER (what clkv_compact_kv needs to preserve order); indices[b, h, c .. K) = -1. The
 * optional counts[b, h] receives c.
 *
 * Tensors (strides in elements, last dim contiguous):
 *   scores    [B, H, N]   f32 (any strides for b and h)
 *   lengths   [B]         i32, device, optional. n = clamp(lengths[b], 0, max_length).
 *                         Absent: n = max_length for every sequence.
 *   k_per_row [B, H]      i32, device, optional: row k = clamp(k_per_row[b, h], 0, k).
 *                         Absent: every row uses k.
 *   indices   [B, H, K]   i32, K == k: the output (also the capacity for k_per_row).
 *   counts    [B, H]      i32, optional output.
 * N may be up to 2^31 - 1 (SPEC asks for 2^24).
 *
 * Algorithm: exact radix select on the f32 bit pattern mapped to an order-preserving
 * uint32, which yields the c-th best key T and the number of ties at T to take, then an
 * ordered compaction writing indices in position order. No sort. Rows of at most 8192
 * tokens (max_length) run in ONE kernel, one work-group per row (three histogram passes
 * of 11/11/10 bits in local memory; the row is read 4 times). Longer rows are split over
 * many work-groups so a single long row fills the device. Up to 32 chunks of one tile
 * (2048 tokens on a GPU, i.e. rows up to 64K tokens there), two kernels: per chunk a
 * histogram of the top 12 key bits plus the chunk's keys sorted by that bin and a
 * bin-start table, the row's last work-group to finish then resolving T and the ties
 * among the keys of the bin holding rank c (read from each chunk's run; two 10-bit
 * passes over local batches of 4096) and the per-chunk output offsets; the compaction.
 * Longer rows, three kernels: the histogram; the keys of the bin holding rank c appended
 * to a candidate list while the keys above it are counted per chunk, the row's last
 * work-group resolving T, the ties and the offsets (in local memory for up to 4096
 * candidates); the compaction. The scores are read 2 or 3 times, plus the candidates
 * (the whole row when all scores are equal).
 * Scratch (state, per-chunk counts, candidate lists of up to a row each: 8 bytes per
 * token; the 2-kernel path: 4 bytes per token of sorted keys plus 8 KiB of bin starts per
 * chunk) comes from the context's workspace (see clkv_select_topk_workspace_size), the
 * row histograms from the context's zeroed counter buffer (returned to zero). Nothing
 * blocks.
 */
typedef struct clkv_select_topk_args {
    clkv_tensor scores;
    clkv_tensor lengths;
    clkv_tensor k_per_row;
    clkv_tensor indices;
    clkv_tensor counts;
    /* Host-side upper bound of lengths[] (<= N), sizes the launch. -1: N. */
    int64_t max_length;
    /* Host k (>= 0): the last dim of indices; the bound of k_per_row. */
    int64_t k;
    /* 1: select the largest scores (default); 0: the smallest. */
    int32_t largest;
} clkv_select_topk_args;

#define CLKV_SELECT_TOPK_ARGS_INIT                                                                 \
    {                                                                                              \
        .scores = {0}, .lengths = {0}, .k_per_row = {0}, .indices = {0}, .counts = {0},            \
        .max_length = -1, .k = 0, .largest = 1                                                     \
    }

/* Validate `args` and enqueue the selection. `done` (optional) receives an event that
 * completes with the last kernel; the caller releases it.
 * Errors (nothing enqueued, nothing written): CLKV_ERR_ARG_NULL (ctx, args, scores,
 * indices), CLKV_ERR_ARG_DTYPE, CLKV_ERR_ARG_SHAPE (dims disagree; indices dims[2] != k),
 * CLKV_ERR_ARG_RANGE (k < 0, max_length outside [-1, N], N, B*H or k beyond 2^31-1),
 * CLKV_ERR_ARG_STRIDE, CLKV_ERR_ARG_ALIGNMENT, CLKV_ERR_ARG_BUFFER_SIZE,
 * CLKV_ERR_ARG_OVERFLOW; workspace and launch failures as OpenCL codes or
 * CLKV_ERR_DEVICE_LIMIT / CLKV_ERR_LOCAL_MEMORY. */
clkv_status clkv_select_topk(clkv_context *ctx, const clkv_select_topk_args *args, cl_event *done);

/* Bytes of workspace clkv_select_topk(ctx, args) will use (validates args the same way). */
clkv_status clkv_select_topk_workspace_size(clkv_context *ctx, const clkv_select_topk_args *args,
                                            size_t *bytes);

/* Compaction: gather the kept rows of K and V (and optionally one per-token metadata
 * tensor) into a dense destination cache, in index order.
 *
 * For every (b, h), with m = the row's count (see counts) and i < m:
 *   k_dst[b, h, i, :] = k_src[b, h, indices[b, h, i], :]   (bit copy, any float dtype)
 *   v_dst[b, h, i, :] = v_src[b, h, indices[b, h, i], :]
 *   meta_dst[b, h, i] = meta_src[b, h, indices[b, h, i]]    (when meta_src is given)
 *   new_lengths[b, h] = m                                    (when new_lengths is given)
 * Indices from clkv_select_topk are ascending, so the kept tokens keep their order. Any
 * order is accepted (duplicates too): the copy follows the index list. An index outside
 * [0, L) inside the first m entries copies nothing (that destination row keeps its
 * previous content); destination rows m .. Lout are never written.
 *
 * Tensors (strides in elements, last dim contiguous; HND, NHD or any other strides):
 *   k_src, v_src   [B, H, L, D]     f32 | f16 | bf16 (k and v may differ)
 *   k_dst, v_dst   [B, H, Lout, D]  same dtype as k_src / v_src; K <= Lout
 *   indices        [B, H, K]        i32, device
 *   counts         [B, H]           i32, device, optional: m = clamp(counts[b, h], 0, K).
 *                                   Absent: m = the position of the first negative entry
 *                                   of the row (K if none), i.e. the -1 padding of
 *                                   clkv_select_topk ends the list.
 *   new_lengths    [B, H]           i32, optional output.
 *   meta_src       [B, H, L]        optional: any dtype (f32, f16, bf16, i32, u8, u32)
 *   meta_dst       [B, H, Lout]     same dtype as meta_src; required iff meta_src given.
 *
 * In place: a destination may be its own source (k_dst the same view as k_src: same
 * cl_mem, offset and strides, Lout <= L; likewise v_dst / v_src and meta_dst / meta_src;
 * each pair independently). Then every row's first m indices must be STRICTLY ASCENDING
 * inside [0, L) (what clkv_select_topk produces), so that destination row i <= indices[i]:
 * one work-group per (b, h) row moves the row in ascending chunks, loading a chunk
 * before storing it, and never overwrites a row it has yet to read. The check runs on
 * the device (the call stays asynchronous): a row whose list is not strictly ascending
 * inside [0, L) is left completely untouched (K, V, meta and new_lengths[b, h]) and
 * CLKV_COMPACT_FLAG_NOT_ASCENDING is ORed into the optional flags word. Rows m .. Lout of
 * an in-place destination keep their old (source) content. In place moves every row
 * inside one work-group (B*H work-groups in all), which is slower on a GPU than the
 * out-of-place gather (one work-group per kept row); use it to save the memory of a
 * second cache.
 * Any other sharing of a cl_mem between a destination (or new_lengths, flags) and
 * another tensor is rejected with CLKV_ERR_ARG_UNSUPPORTED (overlapping sub-buffers are
 * the caller's responsibility).
 *
 *   flags          [1]              i32, optional, device: sticky (never cleared by the
 *                                   library, like quant.h's flags); bit
 *                                   CLKV_COMPACT_FLAG_NOT_ASCENDING as above. Only in
 *                                   place calls set it.
 *
 * Errors (nothing enqueued, nothing written): CLKV_ERR_ARG_NULL, CLKV_ERR_ARG_DTYPE,
 * CLKV_ERR_ARG_SHAPE, CLKV_ERR_ARG_RANGE (sizes beyond 2^31-1), CLKV_ERR_ARG_UNSUPPORTED
 * (a destination sharing a buffer other than as its own source's view, flags or
 * new_lengths sharing a buffer with another tensor), CLKV_ERR_ARG_STRIDE,
 * CLKV_ERR_ARG_ALIGNMENT, CLKV_ERR_ARG_BUFFER_SIZE, CLKV_ERR_ARG_OVERFLOW; launch failures
 * as OpenCL codes. Uses B*H*4 bytes (rounded up to 256) of workspace. */
#define CLKV_COMPACT_FLAG_NOT_ASCENDING 1

typedef struct clkv_compact_kv_args {
    clkv_tensor k_src;
    clkv_tensor v_src;
    clkv_tensor indices;
    clkv_tensor counts;
    clkv_tensor k_dst;
    clkv_tensor v_dst;
    clkv_tensor new_lengths;
    clkv_tensor meta_src;
    clkv_tensor meta_dst;
    clkv_tensor flags; /* optional [1] i32 (in-place checks) */
} clkv_compact_kv_args;

#define CLKV_COMPACT_KV_ARGS_INIT                                                                  \
    {                                                                                              \
        .k_src = {0}, .v_src = {0}, .indices = {0}, .counts = {0}, .k_dst = {0}, .v_dst = {0},     \
        .new_lengths = {0}, .meta_src = {0}, .meta_dst = {0}, .flags = {                           \
            0                                                                                      \
        }                                                                                          \
    }

clkv_status clkv_compact_kv(clkv_context *ctx, const clkv_compact_kv_args *args, cl_event *done);

#ifdef __cplusplus
}
#endif

#endif /* CLKV_SELECT_H */
