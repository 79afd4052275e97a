/* clkv KIVI-style asymmetric b-bit quantization (SPEC §3) and DiffKV per-token
 * precisions.
 *
 * Rule (exact, per group x of `group` elements):
 *   mn = min x, mx = max x                                  (f32)
 *   scale = f32(f32(mx - mn) / (2^bits - 1))                (correctly rounded division)
 *   s = meta(scale), m = meta(mn)       meta = f16 (RNE) or f32, by the dtype of `scale`
 *   q = clamp(rint(f32(x - m) / s), 0, 2^bits - 1)          (f32 subtraction, correctly
 *                                                            rounded division by the stored
 *                                                            s and m read back as f32,
 *                                                            rint = round half to even)
 *   s == 0 (constant group, or a scale below the f16 range) gives q = 0.
 *   Dequantization: x^ = f32(f32(q * s) + m) (no fused multiply-add), stored to the output
 *   dtype with round to nearest even.
 * The device computes every division with a correction step (fma residuals) that makes
 * it correctly rounded on every device (NVIDIA's default OpenCL `/` is not), so codes
 * are bit-identical to a host computing the rule in IEEE f32; the one exception is a
 * device that flushes f32 subnormals, where groups whose range or quotients are
 * subnormal may differ.
 *
 * Packing: 32/bits codes per uint32, code i of a word in bits [bits*i, bits*i + bits)
 * (LSB first). bits in {2, 4, 8}; group in {16, 32, 64, 128, 256} (256 allows one group per D = 256
 * row).
 *
 * Out-of-range inputs (device-side detection, the API stays asynchronous): the kernels
 * OR bits into an optional int32 `flags` word on the device and write a flagged group
 * as s = 0, m = 0, all codes 0 (it dequantizes to zeros; never inf/NaN):
 *   CLKV_QUANT_FLAG_F16_RANGE  an input with |x| > 65504 while the metadata is f16
 *                              (SPEC §3: such a call is rejected);
 *   CLKV_QUANT_FLAG_NONFINITE  a NaN or infinite input, or (f32 metadata) a group whose
 *                              mx - mn overflows f32.
 * The flags word is never cleared by the library (sticky, like floating-point exception
 * flags): zero it once (e.g. clEnqueueFillBuffer), run any number of calls, and read it
 * when convenient. With f16 metadata `flags` is required unless the caller promises
 * `inputs_in_f16_range = 1` (then out-of-range groups are still written as zeros, but
 * nobody is told).
 *
 * All tensors: strides in elements, last dim contiguous (stride 1), any other strides
 * (HND [B,H,N,D] and NHD [B,N,H,D] storage both work; outputs may be views into a larger
 * cache). Every call validates everything before enqueueing, enqueues on the context's
 * in-order queue and returns without waiting; `done` (optional) receives an event that
 * completes with the last kernel (the caller releases it).
 *
 * Errors (nothing enqueued, nothing written): CLKV_ERR_ARG_NULL (ctx, args, a required
 * buffer, flags missing with f16 metadata), CLKV_ERR_ARG_DTYPE, CLKV_ERR_ARG_SHAPE (dims
 * disagree with the layouts below, N not a multiple of group for keys, D not a multiple of
 * group for values/tokens), CLKV_ERR_ARG_UNSUPPORTED (bits not in {2,4,8}, group not in
 * {16,32,64,128,256}), CLKV_ERR_ARG_RANGE (B*H, N or D above 2^31-1), CLKV_ERR_ARG_STRIDE,
 * CLKV_ERR_ARG_ALIGNMENT, CLKV_ERR_ARG_BUFFER_SIZE, CLKV_ERR_ARG_OVERFLOW; build and launch
 * failures as OpenCL codes.
 */
#ifndef CLKV_QUANT_H
#define CLKV_QUANT_H

#include <stdint.h>

#include "clkv/context.h"
#include "clkv/status.h"
#include "clkv/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CLKV_QUANT_FLAG_F16_RANGE 1
#define CLKV_QUANT_FLAG_NONFINITE 2

/* Arguments of clkv_quant_keys and clkv_quant_values (P = 32 / bits codes per word).
 *
 * clkv_quant_keys (per channel; a group = `group` consecutive tokens of one channel):
 *   input   [B, H, N, D]          f32 | f16 | bf16; N a multiple of group (so of P)
 *   codes   [B, H, N / P, D]      u32: word w of channel d holds tokens P*w + i, i < P
 *   scale   [B, H, N / group, D]  f16 | f32 (chooses the metadata precision)
 *   min     [B, H, N / group, D]  same dtype as scale
 * clkv_quant_values (per token; a group = `group` consecutive channels of one token):
 *   input   [B, H, N, D]          f32 | f16 | bf16; D a multiple of group
 *   codes   [B, H, N, D / P]      u32: word w of token n holds channels P*w + i, i < P
 *   scale   [B, H, N, D / group]  f16 | f32
 *   min     [B, H, N, D / group]  same dtype as scale
 * Both:
 *   flags   [1]                   i32, optional (see the file comment); required with f16
 *                                 metadata unless inputs_in_f16_range = 1.
 */
typedef struct clkv_quant_args {
    clkv_tensor input;
    clkv_tensor codes;
    clkv_tensor scale;
    clkv_tensor min;
    clkv_tensor flags;
    int32_t bits;  /* 2, 4 or 8; default 2 (MiniKV) */
    int32_t group; /* 16, 32, 64, 128 or 256; default 16 (MiniKV) */
    /* 1: the caller promises |x| <= 65504 (only matters with f16 metadata and no flags). */
    int32_t inputs_in_f16_range;
} clkv_quant_args;

#define CLKV_QUANT_ARGS_INIT                                                                       \
    {                                                                                              \
        .input = {0}, .codes = {0}, .scale = {0}, .min = {0}, .flags = {0}, .bits = 2,             \
        .group = 16, .inputs_in_f16_range = 0                                                      \
    }

clkv_status clkv_quant_keys(clkv_context *ctx, const clkv_quant_args *args, cl_event *done);
clkv_status clkv_quant_values(clkv_context *ctx, const clkv_quant_args *args, cl_event *done);

/* Arguments of clkv_dequant_keys and clkv_dequant_values: codes, scale and min in the
 * layouts of the matching quantizer above, with B, H, N, D taken from `out`:
 *   out     [B, H, N, D]   f32 | f16 | bf16 (x^ rounded to nearest even)
 * bits and group must be those used to quantize. Keys: N a multiple of group; values: D a
 * multiple of group. */
typedef struct clkv_dequant_args {
    clkv_tensor codes;
    clkv_tensor scale;
    clkv_tensor min;
    clkv_tensor out;
    int32_t bits;  /* default 2 */
    int32_t group; /* default 16 */
} clkv_dequant_args;

#define CLKV_DEQUANT_ARGS_INIT                                                                     \
    { .codes = {0}, .scale = {0}, .min = {0}, .out = {0}, .bits = 2, .group = 16 }

clkv_status clkv_dequant_keys(clkv_context *ctx, const clkv_dequant_args *args, cl_event *done);
clkv_status clkv_dequant_values(clkv_context *ctx, const clkv_dequant_args *args, cl_event *done);

/* DiffKV per-token precision (SPEC §3 last bullet, §5): K and V of each token quantized
 * per token, each with its own (scale, min) per `group`-channel group and its own bit
 * width. It is exactly clkv_quant_values applied to k (kbits) and to v (vbits), validated
 * together and enqueued as two kernels:
 *   k, v                 [B, H, N, D]              f32 | f16 | bf16 (each its own dtype)
 *   k_codes              [B, H, N, D / (32/kbits)] u32
 *   k_scale, k_min       [B, H, N, D / group]      f16 | f32
 *   v_codes              [B, H, N, D / (32/vbits)] u32
 *   v_scale, v_min       [B, H, N, D / group]      f16 | f32 (may differ from k's)
 *   flags                [1] i32, optional, shared by both (see the file comment)
 * Levels: K8V4 (high, the default) and K4V2 (low); any kbits, vbits in {2, 4, 8} work.
 * group: 0 (default) means D (one (scale, min) per token and head; D must then be one of
 * 16, 32, 64, 128, 256); otherwise 16, 32, 64, 128 or 256 dividing D. Dequantize with
 * clkv_dequant_values (bits = kbits or vbits, group = the resolved group). */
typedef struct clkv_quant_tokens_args {
    clkv_tensor k;
    clkv_tensor v;
    clkv_tensor k_codes;
    clkv_tensor k_scale;
    clkv_tensor k_min;
    clkv_tensor v_codes;
    clkv_tensor v_scale;
    clkv_tensor v_min;
    clkv_tensor flags;
    int32_t kbits; /* default 8 */
    int32_t vbits; /* default 4 */
    int32_t group; /* 0 (default): D */
    int32_t inputs_in_f16_range;
} clkv_quant_tokens_args;

#define CLKV_QUANT_TOKENS_ARGS_INIT                                                                \
    {                                                                                              \
        .k = {0}, .v = {0}, .k_codes = {0}, .k_scale = {0}, .k_min = {0}, .v_codes = {0},          \
        .v_scale = {0}, .v_min = {0}, .flags = {0}, .kbits = 8, .vbits = 4, .group = 0,            \
        .inputs_in_f16_range = 0                                                                   \
    }

clkv_status clkv_quant_tokens(clkv_context *ctx, const clkv_quant_tokens_args *args,
                              cl_event *done);

#ifdef __cplusplus
}
#endif

#endif /* CLKV_QUANT_H */
