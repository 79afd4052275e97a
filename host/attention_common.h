/* Argument checks shared by the dense attention operators (decode, window, sparse): the
 * parts of their validation that are identical, with one set of status codes and
 * messages; and the split-merge launch arguments they (and the quantized decode) share. Each
 * operator keeps its own checks (tensor ranks, o / lse shapes, extra arguments) around these. Not
 * public API. */
#ifndef CLKV_HOST_ATTENTION_COMMON_H
#define CLKV_HOST_ATTENTION_COMMON_H

#include <stdint.h>

#include "clkv/tensor.h"
#include "runtime/internal.h"

/* K/V against q: v's dtype equals k's (CLKV_ERR_ARG_DTYPE, names v), the head dim D of q
 * is 64, 128 or 256 (CLKV_ERR_ARG_UNSUPPORTED, names q), k is [B, *, *, D] and v has
 * k's dims (CLKV_ERR_ARG_SHAPE, names k / v). k and v must be checked tensors of rank 4. */
clkv_status clkv__attn_check_kv(clkv_context *ctx, const clkv_tensor *k, const clkv_tensor *v,
                                int64_t B, int64_t D);

/* Sizes: Hkv > 0 where Hq > 0 and Hq a multiple of Hkv (GQA; CLKV_ERR_ARG_SHAPE, names
 * k / q), max_length in [-1, L] and L, B, Hq within the kernels' int ranges
 * (CLKV_ERR_ARG_RANGE, names max_length / k). */
clkv_status clkv__attn_check_sizes(clkv_context *ctx, int64_t B, int64_t Hq, int64_t Hkv, int64_t L,
                                   int64_t max_length);

/* The softmax scale is finite (CLKV_ERR_ARG_RANGE, names scale). */
clkv_status clkv__attn_check_scale(clkv_context *ctx, float scale);

/* The split merge of the split-K decode kernels (attention_decode_merge,
 * cl_kernels/attention_merge.cl): work-groups of CLKV_ATTN_MERGE_WG, at most
 * CLKV_ATTN_MERGE_MAX_SPLITS partial states per (sequence, query head). */
#define CLKV_ATTN_MERGE_WG 256
#define CLKV_ATTN_MERGE_MAX_SPLITS 1024

/* The merge kernel for outputs of dtype o_dtype and head dim D (one program per pair). */
clkv_status clkv__attn_merge_kernel(clkv_context *ctx, clkv_dtype o_dtype, int64_t D,
                                    cl_kernel *km);

/* Enqueue the merge over B sequences x Hq query heads (arguments set before). */
clkv_status clkv__attn_enqueue_merge(clkv_context *ctx, cl_kernel km, int64_t B, int64_t Hq,
                                     cl_event *done);

/* Kernel arguments first .. first + 8 of k: o [B, Hq, D] (buffer, element offset, batch and
 * head strides), then lse [B, Hq] the same way (a NULL buffer and zeros when lse->buf is
 * NULL) and has_lse; `label` names the kernel in errors. */
clkv_status clkv__attn_set_out_args(clkv_context *ctx, cl_kernel k, const char *label, int first,
                                    const clkv_tensor *o, const clkv_tensor *lse);

/* Arguments of the merge kernel: the partials at ws (acc first, (m, l) pairs at ml_off
 * floats), `splits` per (sequence, query head), Hq heads, written to o [B, Hq, D] and,
 * when lse->buf is set, lse [B, Hq]. */
clkv_status clkv__attn_set_merge_args(clkv_context *ctx, cl_kernel km, cl_mem ws, cl_long ml_off,
                                      cl_int splits, cl_int Hq, const clkv_tensor *o,
                                      const clkv_tensor *lse);

/* The first CLKV_ATTN_QKV_NARGS arguments of the split-K decode kernels over a [B, H, L, D]
 * cache (attention_decode_partial, attention_sparse_partial): q [B, Hq, D] as (buffer,
 * element offset, batch stride, head stride), then k and v [B, Hkv, L, D] as (buffer,
 * offset, batch, head and row strides). */
#define CLKV_ATTN_QKV_NARGS 14
clkv_status clkv__attn_set_qkv_args(clkv_context *ctx, cl_kernel kernel, const char *label,
                                    const clkv_tensor *q, const clkv_tensor *k,
                                    const clkv_tensor *v);

/* The build options of those kernels' row-group layout (cl_kernels/decode_rows.cl):
 * Q_DTYPE, KV_DTYPE, HEAD_DIM, GROUP, EPL, WG_SIZE, UNROLL, VEC_ALIGNED. */
void clkv__attn_rows_defs(clkv_defs *defs, clkv_dtype q_dtype, clkv_dtype kv_dtype, int64_t D,
                          int group, int epl, int wg, int unroll, int vec_aligned);

#endif /* CLKV_HOST_ATTENTION_COMMON_H */
