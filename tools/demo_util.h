/* Pieces the method steps of `clkv demo` (tools/demo_*.c) share beyond demo.h: the
 * needle-problem spec they all start from, the shape column, device buffer tables,
 * follow-up queries, references over substituted K/V, output checks, kept-list checks,
 * quantized-cache helpers and the result columns. Implemented in tools/demo_util.c. */
#ifndef CLKV_TOOLS_DEMO_UTIL_H
#define CLKV_TOOLS_DEMO_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "demo.h"
#include "reference.h"

/* The needle problem of the method steps: B = 2, Hq = 32, Hkv = 8, D = 128, bf16 K/V,
 * capacity L, lengths {len0, len1}, `needles` needles of key norm `gain` per (b, KV head),
 * queries of gain 16 along the topics, `seed`. A demo_problem_spec initializer. */
#define DEMO_NEEDLE_SPEC(L_, len0, len1, needles_, gain, seed_)                                    \
    {                                                                                              \
        .B = 2, .Hq = 32, .Hkv = 8, .D = 128, .L = (L_), .lengths = {(len0), (len1)},              \
        .dtype = CLKV_BF16, .needles = (needles_), .needle_gain = (gain), .query_gain = 16.0f,     \
        .seed = (seed_)                                                                            \
    }

/* row->shape = "B=.. Hq=.. Hkv=.. D=.. <key>={len0,len1}<suffix>" (len1 0 when B = 1). */
void demo_row_shape(demo_row *row, const demo_problem *p, const char *key, const char *suffix);

/* The result columns of a step that reports no bandwidth: us/call, max error and pass;
 * GB/s, % of bandwidth and the LSE error are NAN. */
void demo_row_result(demo_row *row, double us_per_call, double max_err, int pass);

/* Longest sequence of the problem; *total (may be NULL) = sum of the lengths. */
int64_t demo_problem_max_length(const demo_problem *p, int64_t *total);

/* F follow-up queries [F, B, Hq, D] (malloc; NULL on failure): query f is
 * demo_problem_query(first_step + f) at the angle pi/2 * (f + 1) / (F + 1). */
float *demo_problem_followups(const demo_problem *p, int64_t F, int first_step);

/* demo_ref_attention of q over other K/V contents: k, v [B, Hkv, p->L, D] (e.g. a cache
 * read back and dequantised) and the first lengths[b] tokens of sequence b (lengths NULL:
 * the problem's lengths). o [B, Hq, D]. */
void demo_ref_attention_kv(const demo_problem *p, float *k, float *v, const int32_t *lengths,
                           const float *q, double *o);

/* tool_compare_value of the `count` values of x (host storage of `dtype`) against ref. */
void demo_compare(tool_compare *c, const void *x, clkv_dtype dtype, const double *ref,
                  int64_t count);

/* 1 when the kept list li[0..c) is ascending (distinct) inside [0, n). */
int demo_list_valid(const int32_t *li, int64_t c, int64_t n);

/* How many of the needles of (b, KV head) bh appear in the kept list li[0..c). */
int64_t demo_needles_kept(const demo_problem *p, int64_t bh, const int32_t *li, int64_t c);

/* A device buffer of a step: `count` elements of `dtype`, uploaded from `host` (count
 * floats converted to dtype, demo_upload) or, host NULL, left uninitialised. */
typedef struct demo_buffer {
    const char *name; /* named in error messages */
    clkv_dtype dtype;
    int64_t count;
    const float *host;
    cl_mem *out;
} demo_buffer;

/* Create the buffers in list order; stops at the first failure (message on ctx). The
 * ones created stay in *out: release them with demo_buffers_release either way. */
clkv_status demo_buffers(clkv_context *ctx, const demo_buffer *list, size_t n);
void demo_buffers_release(const demo_buffer *list, size_t n);

/* A timed quantized decode call (demo_time): clkv_attention_quant_decode(cache, &a). */
typedef struct demo_quant_call {
    clkv_quant_cache *cache;
    clkv_attention_quant_decode_args a;
} demo_quant_call;
clkv_status demo_call_quant_decode(void *arg);

/* Bytes a quantized cache allocated: the eight tensors of its view (codes, scales,
 * minima and residuals of K and V). */
uint64_t demo_quant_cache_bytes(const clkv_quant_cache *cache);

#endif /* CLKV_TOOLS_DEMO_UTIL_H */
