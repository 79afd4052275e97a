/* Synthetic data for the clkv tool: a counter-based random generator shared by the host
 * and the device fill kernel (cl_kernels/bandwidth.cl), 16-bit conversions, buffers. */
#ifndef CLKV_TOOLS_TOOL_DATA_H
#define CLKV_TOOLS_TOOL_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "clkv.h"

/* scale * u, u uniform in [-1, 1) with 2^-23 resolution: the value element `index` of a
 * tensor filled with `seed` has before rounding to its storage dtype. Exactly the value
 * clkv_tool_fill (cl_kernels/bandwidth.cl) computes when scale is a power of two. */
float tool_rand_value(uint64_t index, uint32_t seed, float scale);

/* Conversions (round to nearest even; NaN stays NaN). */
uint16_t tool_f32_to_bf16(float x);
float tool_bf16_to_f32(uint16_t b);
uint16_t tool_f32_to_f16(float x);
float tool_f16_to_f32(uint16_t h);

/* x after a store to and a load from `dtype` storage (f32, f16, bf16). */
float tool_round_to(clkv_dtype dtype, float x);

/* Store / load element i of a host array in `dtype` storage. */
void tool_store(void *dst, clkv_dtype dtype, size_t i, float x);
float tool_load(const void *src, clkv_dtype dtype, size_t i);

/* clCreateBuffer of `bytes` (at least 1) on ctx, READ_WRITE. Fails with
 * CLKV_ERR_DEVICE_LIMIT (message naming `name`) when bytes exceed the device's largest
 * allocation. */
clkv_status tool_buffer(clkv_context *ctx, const char *name, uint64_t bytes, cl_mem *out);

/* Fill `count` elements of `dtype` at the start of buf with tool_rand_value(i, seed, scale)
 * rounded to dtype, on the device (kernel clkv_tool_fill). Asynchronous. */
clkv_status tool_fill_random(clkv_context *ctx, cl_mem buf, clkv_dtype dtype, uint64_t count,
                             uint32_t seed, float scale);

/* Blocking host -> device / device -> host copies of `bytes` at offset 0. */
clkv_status tool_write(clkv_context *ctx, cl_mem buf, const void *src, size_t bytes);
clkv_status tool_read(clkv_context *ctx, cl_mem buf, void *dst, size_t bytes);

/* clReleaseMemObject when non-NULL, then NULL. */
void tool_release(cl_mem *buf);

#endif /* CLKV_TOOLS_TOOL_DATA_H */
