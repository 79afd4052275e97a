/* Decode-attention problems for the tool (bench and demo): buffers, arguments, timing and
 * the reference check of device results. */
#ifndef CLKV_TOOLS_DECODE_SETUP_H
#define CLKV_TOOLS_DECODE_SETUP_H

#include <stdint.h>

#include "bench_harness.h"
#include "clkv.h"

typedef struct tool_decode_shape {
    int64_t B, Hq, Hkv, D, L;
    clkv_dtype q_dtype, kv_dtype, o_dtype;
    int nhd; /* K/V stored [B, L, Hkv, D] instead of [B, Hkv, L, D] */
} tool_decode_shape;

typedef struct tool_decode_bufs {
    cl_mem q, k, v, o, lse, lengths;
} tool_decode_bufs;

/* Seeds of the synthetic inputs (tool_rand_value); q is scaled by 4 so the softmax is
 * neither flat nor one-hot. */
#define TOOL_SEED_Q 11u
#define TOOL_SEED_K 22u
#define TOOL_SEED_V 33u
#define TOOL_SCALE_Q 4.0f
#define TOOL_SCALE_KV 1.0f

/* Element counts. */
int64_t tool_decode_q_elems(const tool_decode_shape *s);
int64_t tool_decode_kv_elems(const tool_decode_shape *s);

/* Bytes of K+V that attention over lengths[] reads: sum_b len[b] * Hkv * D * 2 * elem. */
uint64_t tool_decode_kv_bytes_read(const tool_decode_shape *s, const int32_t *lengths);

/* Storage index of K/V element (b, h, j, d) in the shape's layout. */
int64_t tool_decode_kv_index(const tool_decode_shape *s, int64_t b, int64_t h, int64_t j,
                             int64_t d);

/* Allocate q, k, v, o, lengths (and lse when with_lse). On failure everything allocated
 * is released and the message is on ctx. */
clkv_status tool_decode_alloc(clkv_context *ctx, const tool_decode_shape *s, int with_lse,
                              tool_decode_bufs *b);
void tool_decode_free(tool_decode_bufs *b);

/* Fill q, k, v on the device with the seeds above, write lengths, wait. */
clkv_status tool_decode_fill_device(clkv_context *ctx, const tool_decode_shape *s,
                                    const tool_decode_bufs *b, const int32_t *lengths);

/* The argument struct for the shape and buffers. */
void tool_decode_args(const tool_decode_shape *s, const tool_decode_bufs *b, int64_t max_length,
                      int32_t num_splits, clkv_attention_decode_args *a);

/* bench_time_call (bench_harness.h) of clkv_attention_decode with arguments a. */
clkv_status tool_decode_time(clkv_context *ctx, const clkv_attention_decode_args *a, int warmup,
                             int iters, int repeats, const char *label, tool_timing *t);

/* Read o (and lse if present) back and compare sequences `b_list` (count nb) against the
 * double reference, regenerating the inputs from the seeds (device-filled data). */
typedef struct tool_compare tool_compare;
clkv_status tool_decode_check(clkv_context *ctx, const tool_decode_shape *s,
                              const tool_decode_bufs *b, const int32_t *lengths,
                              const int64_t *b_list, int nb, const int64_t *kvh_list, int nkvh,
                              tool_compare *c);

#endif /* CLKV_TOOLS_DECODE_SETUP_H */
