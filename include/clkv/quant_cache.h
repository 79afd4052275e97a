/* clkv quantized KV cache (KIVI / MiniKV style, SPEC §3) and fused decode attention over
 * it.
 *
 * One clkv_quant_cache holds the K/V cache of one layer for B sequences and Hkv KV heads:
 *   - a quantized part: keys quantized per channel (a group = `group` consecutive tokens
 *     of one channel), values per token (a group = `group` consecutive channels of one
 *     token), b-bit codes packed LSB first into uint32 words, exactly the formats of
 *     clkv_quant_keys / clkv_quant_values (include/clkv/quant.h), with (scale, min) in
 *     f16 (default) or f32;
 *   - a residual of the newest tokens in a 16-bit (or f32) dtype, fewer than `residual`
 *     (n_r) tokens per sequence.
 *
 * Token semantics (per sequence b, with T[b] tokens appended so far):
 *   n_quant[b] = T[b] - T[b] % n_r   tokens [0, n_quant) are quantized,
 *   n_res[b]   = T[b] % n_r          tokens [n_quant, T) are in the residual, slot
 *                                    t - n_quant.
 * Tokens enter the residual; when it holds n_r tokens it is quantized as one block (keys
 * and values together, as MiniKV does) and emptied. An append of many tokens (prefill)
 * quantizes every n_r block it completes directly and leaves the tokens after the last
 * complete block in the residual; so the cache contents depend only on the token
 * history, never on how it was cut into appends. Every appended value is first rounded
 * to the residual dtype (RNE), also when its block is quantized in the same call: the
 * quantizer always sees the residual-precision value. Since n_r is a multiple of
 * `group`, the residual never holds a complete key group that belongs to a complete
 * block, and quantized key groups never straddle blocks.
 *
 * Device memory owned by the cache (row-major, strides in elements; P = 32 / bits codes
 * per word; Cq = capacity - capacity % n_r quantized token slots per sequence):
 *   k_codes  u32       [B, Hkv, Cq / Pk, D]        word w of channel d: tokens Pk*w + i
 *   k_scale  meta      [B, Hkv, Cq / group, D]     per key group and channel
 *   k_min    meta      [B, Hkv, Cq / group, D]
 *   v_codes  u32       [B, Hkv, Cq, D / Pv]        word w of token t: channels Pv*w + i
 *   v_scale  meta      [B, Hkv, Cq, D / group]     per token and channel group
 *   v_min    meta      [B, Hkv, Cq, D / group]
 *   k_res    res dtype [B, Hkv, n_r, D]            residual keys, slot s = token n_quant+s
 *   v_res    res dtype [B, Hkv, n_r, D]
 *   counts   i32       [2, B]                      row 0: n_quant[b], row 1: n_res[b]
 *   flags    i32       [1]                         sticky out-of-range flags (below)
 * Only the first n_quant / n_res tokens of a sequence are defined; the rest is
 * uninitialised. clkv_quant_cache_view hands out descriptors of all of these (for tests,
 * tools and callers that run their own kernels over the cache).
 *
 * The counters live on the device, so appends with per-sequence counts that exist only
 * on the device need no host round-trip. The host keeps an upper bound of max_b T[b]
 * (every append adds its host-side maximum n to it, whatever the device counts were):
 * an append whose n would take the bound above `capacity` is rejected with
 * CLKV_ERR_ARG_RANGE before anything is enqueued, and attention sizes its launch from
 * the bound. A caller whose real lengths grow more slowly than the bound can call
 * clkv_quant_cache_reset (empties every sequence) when it starts new sequences.
 *
 * Out-of-range inputs follow clkv/quant.h: a key or value group with a NaN/inf input,
 * or with |x| > 65504 under f16 metadata, is stored as s = m = 0 with codes 0 (it
 * dequantizes to zeros) and the cache's `flags` word gets CLKV_QUANT_FLAG_NONFINITE /
 * CLKV_QUANT_FLAG_F16_RANGE. The flags word is zeroed at creation and by reset and is
 * never cleared otherwise; read it through the view when convenient. (A residual dtype
 * of f16 turns |x| > 65504 into inf in the residual; such tokens are flagged when their
 * block is quantized.)
 *
 * Every function validates all arguments before enqueuing anything (nothing is written
 * on failure; the message, from clkv_last_error(ctx) of the cache's context, names the
 * argument), enqueues on the context's in-order queue and returns without waiting.
 * `done` (optional) receives an event completing with the call's last command; the
 * caller releases it. A cache is used by one thread at a time, like its context.
 */
#ifndef CLKV_QUANT_CACHE_H
#define CLKV_QUANT_CACHE_H

#include <stdint.h>

#include "clkv/context.h"
#include "clkv/quant.h"
#include "clkv/status.h"
#include "clkv/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct clkv_quant_cache clkv_quant_cache;

/* Configuration of a quantized cache. */
typedef struct clkv_quant_cache_create_args {
    int64_t batch;         /* B >= 1 sequences */
    int64_t kv_heads;      /* Hkv >= 1 */
    int64_t head_dim;      /* D: 64, 128 or 256 */
    int64_t capacity;      /* tokens per sequence (quantized + residual), >= 1 */
    int32_t k_bits;        /* 2, 4 or 8; default 2 (MiniKV) */
    int32_t v_bits;        /* 2, 4 or 8; default 2 */
    int32_t group;         /* Gq: 16, 32, 64 or 128, dividing D; default 16 (MiniKV) */
    int32_t residual;      /* n_r: a positive multiple of group; default 128 */
    clkv_dtype res_dtype;  /* residual storage: f16, bf16 or f32; default f16 */
    clkv_dtype meta_dtype; /* (scale, min) storage: f16 (default) or f32 */
} clkv_quant_cache_create_args;

#define CLKV_QUANT_CACHE_CREATE_ARGS_INIT                                                          \
    {                                                                                              \
        .batch = 0, .kv_heads = 0, .head_dim = 0, .capacity = 0, .k_bits = 2, .v_bits = 2,         \
        .group = 16, .residual = 128, .res_dtype = CLKV_F16, .meta_dtype = CLKV_F16                \
    }

/* Allocate the cache's device buffers on ctx's device (empty: every sequence holds 0
 * tokens; the zeroing of counts and flags is enqueued on ctx's queue) and return it in
 * *out. The cache keeps ctx (which must outlive it) and uses ctx's workspace.
 * A capacity below n_r is allowed (nothing is ever quantized then).
 * Errors: CLKV_ERR_ARG_NULL (ctx, args, out), CLKV_ERR_ARG_RANGE (batch or kv_heads
 * outside [1, 65535], capacity outside [1, 2^31 - 65537], residual not a positive
 * multiple of group or above 65536), CLKV_ERR_ARG_UNSUPPORTED (head_dim, k_bits,
 * v_bits, group not supported, group not dividing head_dim), CLKV_ERR_ARG_DTYPE
 * (res_dtype, meta_dtype),
 * CLKV_ERR_ARG_OVERFLOW (sizes overflow 64 bits), CLKV_ERR_DEVICE_LIMIT (a buffer above
 * the device's CL_DEVICE_MAX_MEM_ALLOC_SIZE), OpenCL allocation errors. On error *out is
 * left unchanged. */
clkv_status clkv_quant_cache_create(clkv_context *ctx, const clkv_quant_cache_create_args *args,
                                    clkv_quant_cache **out);

/* Release every buffer of the cache and free it. Safe while enqueued work still uses the
 * cache (OpenCL keeps released buffers alive until the commands using them complete);
 * descriptors from clkv_quant_cache_view_get become invalid. NULL is accepted. */
void clkv_quant_cache_destroy(clkv_quant_cache *cache);

/* Empty every sequence (device counters and flags zeroed on the queue; host bound 0).
 * Errors: CLKV_ERR_ARG_NULL (cache). */
clkv_status clkv_quant_cache_reset(clkv_quant_cache *cache, cl_event *done);

/* Descriptors of the cache's device buffers (layouts in the file comment) and its
 * configuration. The buffers stay owned by the cache. */
typedef struct clkv_quant_cache_view {
    clkv_tensor k_codes, k_scale, k_min;
    clkv_tensor v_codes, v_scale, v_min;
    clkv_tensor k_res, v_res;
    clkv_tensor n_quant;                 /* i32 [B]: row 0 of the counts buffer */
    clkv_tensor n_res;                   /* i32 [B]: row 1 of the counts buffer */
    clkv_tensor flags;                   /* i32 [1] */
    clkv_quant_cache_create_args config; /* as created, defaults resolved */
    int64_t quant_capacity;              /* Cq */
    int64_t max_length;                  /* the host-side upper bound of max_b T[b] */
} clkv_quant_cache_view;

/* Fill *out. Errors: CLKV_ERR_ARG_NULL (cache, out). */
clkv_status clkv_quant_cache_view_get(const clkv_quant_cache *cache, clkv_quant_cache_view *out);

/* Append tokens to every sequence.
 *   k, v    [B, Hkv, n, D]   f32 | f16 | bf16 (each its own dtype), any strides with the
 *                            last dim contiguous (HND or NHD batches); n >= 0 is the
 *                            host-side maximum count.
 *   counts  [B]              i32 device buffer, optional: sequence b appends its first
 *                            clamp(counts[b], 0, n) tokens (so a batch of prompts of
 *                            different lengths, or a decode step where some sequences
 *                            are idle). Absent: every sequence appends n tokens.
 * Enqueues three small kernels in order (quantize the keys and values of the blocks the
 * append completes, write the new residual, advance the counters); their sizes are
 * bounded by the host-side n, not by the cache length. n = 1 (a decode step) does the
 * three in one launch (its last work-group to finish advances the counters). n = 0
 * enqueues nothing (done gets a marker).
 * Errors: CLKV_ERR_ARG_NULL (cache, args, k, v), CLKV_ERR_ARG_DTYPE, CLKV_ERR_ARG_SHAPE
 * (k/v/counts dims disagree with the cache), CLKV_ERR_ARG_RANGE (n above 2^31-1, or the
 * host bound + n above capacity: "capacity"), CLKV_ERR_ARG_STRIDE,
 * CLKV_ERR_ARG_ALIGNMENT, CLKV_ERR_ARG_BUFFER_SIZE, CLKV_ERR_ARG_OVERFLOW; build and
 * launch failures as OpenCL codes. */
typedef struct clkv_quant_cache_append_args {
    clkv_tensor k;
    clkv_tensor v;
    clkv_tensor counts;
} clkv_quant_cache_append_args;

#define CLKV_QUANT_CACHE_APPEND_ARGS_INIT                                                          \
    {                                                                                              \
        .k = {0}, .v = {0}, .counts = { 0 }                                                        \
    }

clkv_status clkv_quant_cache_append(clkv_quant_cache *cache,
                                    const clkv_quant_cache_append_args *args, cl_event *done);

/* Fused decode attention over the cache (SPEC §1.1 over [quantized | residual], §3).
 *
 * For sequence b (T = n_quant[b] + n_res[b] tokens, read on the device) and query head h
 * (KV head h / G, G = Hq / Hkv), with the dequantised keys and values
 *   k^_t = code * s + m for t < n_quant (the values clkv_dequant_keys/values produce),
 *   and the stored residual values for the other t:
 *   z_t = scale * <q[b,h], k^_t>,  LSE = log(sum_t exp(z_t)),
 *   o[b,h] = sum_t exp(z_t - LSE) * v^_t.
 * T = 0 gives o = 0 and lse = -inf. Accuracy: the attention of a double-precision
 * reference over the dequantised cache within the SPEC §0.2 attention tolerances of o's
 * dtype (LSE 1e-4 absolute). The kernel factors the dequantisation out of the dot
 * products (sum_d code_d * (q_d s_d) + sum_d q_d m_d for keys, per-token p * s and p * m
 * for values), so it never forms the rounded k^ / v^ elements themselves.
 * Tensors:
 *   q    [B, Hq, D]   f32 | f16 | bf16, any strides (last dim contiguous)
 *   o    [B, Hq, D]   f32 | f16 | bf16
 *   lse  [B, Hq]      f32, optional
 * One split-K launch covers the quantized part and the residual: each work-group streams
 * the codes and metadata of a token range of one KV head once for up to 8 query heads
 * (G > 8 reads them ceil(G/8) times), decoding the codes on the fly; a second kernel (the
 * decode-attention merge) combines the splits. The split count comes from the device's
 * compute units and the cache's host-side length bound. Scratch comes from the context
 * workspace. (Tuning knob, read when a cache is created, not API: CLKV_QUANT_WG = 64,
 * 128 or 256 sets the work-group size of this kernel; default 128 on GPUs, 64 else.)
 * On NVIDIA GPUs (inline PTX) a tensor-core kernel (mma.sync m16n8k16, f16 for keys and
 * bf16 for values, codes turned into operands in registers, cp.async staging) replaces the
 * partial kernel when D is 64, 128 or 256, o is f16 or bf16, and the codes are 2-bit, or 4-bit
 * with a group of 32 or more, or 4-bit in groups of 16 when the CUDA-core kernel would
 * launch fewer work-groups than compute units (where it measured faster). It serves up to
 * 4 query heads per read of the codes (G > 4 reads them ceil(G/4) times), each warp is one
 * split (the split count is padded to a multiple of 4 with empty splits; the 4 warps of a
 * work-group merge their states before the merge kernel; one more work-group per (sequence,
 * KV head, head group) walks the residual, so a forced num_splits counts the quantized
 * part's splits), and its products keep about 22
 * significant bits of q*s (f16 high part + f16 rest, scaled by a power of two per key
 * group) and 16 of p*s (bf16 high part + bf16 rest; per-group sums in f32): within the
 * tolerances of 16-bit outputs, which is why f32 outputs always take the CUDA-core
 * kernel. Knobs read once per process (tuning and tests, not API):
 * CLKV_QUANT_MMA = 0 disables it, 2 takes it wherever it applies,
 * CLKV_QUANT_MMA_WARPS (automatic splits aim at this many warps per compute unit, default
 * 64), CLKV_QUANT_MMA_MINTOK (shortest automatic split, default 256 tokens),
 * CLKV_QUANT_MMA_STAGES (16-token tiles in flight per warp, default 3 with 4-bit keys and
 * values, 4 otherwise), CLKV_QUANT_MMA_RES_SPLITS = 0 (the residual walked by the last
 * quantized split instead, the previous plan).
 * Errors: CLKV_ERR_ARG_NULL (cache, args, q, o), CLKV_ERR_ARG_DTYPE, CLKV_ERR_ARG_SHAPE
 * (dims disagree with the cache, Hq % Hkv != 0), CLKV_ERR_ARG_RANGE (non-finite scale,
 * negative num_splits, Hq above 65535), CLKV_ERR_ARG_STRIDE, CLKV_ERR_ARG_ALIGNMENT,
 * CLKV_ERR_ARG_BUFFER_SIZE, CLKV_ERR_ARG_OVERFLOW; build and launch failures as OpenCL
 * codes, CLKV_ERR_LOCAL_MEMORY. */
typedef struct clkv_attention_quant_decode_args {
    clkv_tensor q;
    clkv_tensor o;
    clkv_tensor lse;
    float scale; /* softmax scale; 0 means 1/sqrt(D). Must be finite. */
    /* Split count; 0: automatic. Forced values are clamped to [1, length bound] and the
     * splits rounded up to a multiple of 16 tokens, so the count used may be smaller. */
    int32_t num_splits;
} clkv_attention_quant_decode_args;

#define CLKV_ATTENTION_QUANT_DECODE_ARGS_INIT                                                      \
    { .q = {0}, .o = {0}, .lse = {0}, .scale = 0.0f, .num_splits = 0 }

clkv_status clkv_attention_quant_decode(clkv_quant_cache *cache,
                                        const clkv_attention_quant_decode_args *args,
                                        cl_event *done);

/* Bytes of context workspace clkv_attention_quant_decode(cache, args) would use now
 * (they grow with the cache's host-side length bound); validates args the same way.
 * Pass the result to clkv_context_reserve_workspace to preallocate. Errors: as
 * clkv_attention_quant_decode, plus CLKV_ERR_ARG_NULL for bytes. */
clkv_status clkv_attention_quant_decode_workspace_size(clkv_quant_cache *cache,
                                                       const clkv_attention_quant_decode_args *args,
                                                       size_t *bytes);

#ifdef __cplusplus
}
#endif

#endif /* CLKV_QUANT_CACHE_H */
