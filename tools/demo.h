/* Shared types of `clkv demo` (tools/cmd_demo.c) and its method steps (tools/demo_*.c):
 * the environment, the printed row, a synthetic long-context problem with planted
 * "needle" tokens, host references and timing. */
#ifndef CLKV_TOOLS_DEMO_H
#define CLKV_TOOLS_DEMO_H

#include <stdint.h>

#include "bandwidth.h"
#include "clkv.h"

typedef struct demo_env {
    clkv_context *ctx;
    const clkv_device_info *info;
    int gpu;
    tool_bandwidth bw;
} demo_env;

/* One printed row: the main line (shape .. result), a one-line note and an optional
 * small table of per-method lines printed under it (demo_row_line). */
typedef struct demo_row {
    char shape[128];
    char dtype[32];
    double us_per_call, gbps, pct_bw, max_err, max_lse_err;
    int pass;
    char note[256];
    char table[4096];
} demo_row;

/* Append one printf-formatted line to row->table (truncated when full). */
void demo_row_line(demo_row *row, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A step: run it with cfg (cfg_cpu on CPUs, cfg_gpu on GPUs), fill row; TOOL_EXIT_OK when
 * it ran (row->pass says whether its check passed), TOOL_EXIT_FAIL on an error (message
 * on stderr). */
typedef int (*demo_fn)(demo_env *env, const void *cfg, demo_row *row);

/* ---- synthetic problem ---- */

#define DEMO_MAX_B 4

/* K/V [B, Hkv, L, D] (HND), queries [B, Hq, D], all generated on the host and rounded to
 * `dtype`. Keys and values are uniform in [-1, 1). Each (b, KV head) has a unit
 * "topic" direction u0 (and a second one u1); `needles` positions per (b, KV head),
 * one in each of `needles` equal strides of the sequence (lengths[b] >= needles), hold keys
 * needle_gain * u (half along u0, half along u1, alternating) plus small noise, so queries along
 * u0/u1 attend to them strongly. */
typedef struct demo_problem_spec {
    int64_t B, Hq, Hkv, D, L;
    int32_t lengths[DEMO_MAX_B];
    clkv_dtype dtype;
    int32_t needles;   /* per (b, KV head); 0: none */
    float needle_gain; /* key norm of a needle, e.g. 6 */
    float query_gain;  /* query component along the topic, e.g. 16 */
    uint32_t seed;
} demo_problem_spec;

typedef struct demo_problem {
    demo_problem_spec s;
    int64_t G;
    float *k, *v;        /* host [B, Hkv, L, D], rounded to dtype */
    float *u0, *u1;      /* [B, Hkv, D] unit topic directions */
    int32_t *needles;    /* [B, Hkv, needles] ascending positions (< lengths[b]) */
    cl_mem dk, dv, dlen; /* device K, V (dtype, HND) and lengths (i32 [B]) */
} demo_problem;

/* Generate and upload. On failure everything is released and the message is on ctx. */
clkv_status demo_problem_create(clkv_context *ctx, const demo_problem_spec *spec, demo_problem *p);
void demo_problem_free(demo_problem *p);

/* Query number `step` [B, Hq, D] (host, rounded to dtype): query_gain * (cos a u0 +
 * sin a u1) + uniform noise, a = angle (radians); different steps differ in the noise. */
void demo_problem_query(const demo_problem *p, int step, double angle, float *q);

/* Query rows [B, Hq, rows, D] (malloc; NULL on failure): row t is
 * demo_problem_query(first_step + t) at an angle spread over [0, pi/2], so the rows see
 * both needle halves (window queries of the scorers, prompt queries of a prefill). */
float *demo_problem_queries(const demo_problem *p, int64_t rows, int first_step);

/* Double reference of decode attention of q [B, Hq, D] over the first n[b, h] tokens of
 * (b, h) listed in `pos` (pos NULL: positions 0 .. lengths[b]-1; else pos [B, Hkv, P]
 * with n[b*Hkv+h] entries used). o [B, Hq, D], lse [B, Hq] (lse may be NULL). */
void demo_ref_attention(const demo_problem *p, const float *q, const int32_t *pos, int64_t P,
                        const int32_t *n, double *o, double *lse);

/* ||x - ref||_2 / ||ref||_2 over `count` values; x in `dtype` host storage. */
double demo_rel_err(const void *x, clkv_dtype dtype, const double *ref, int64_t count);

/* Host buffer of `count` floats converted to `dtype` storage (malloc; NULL on failure). */
void *demo_to_dtype(const float *x, int64_t count, clkv_dtype dtype);

/* Upload `count` floats as `dtype` into a new device buffer. */
clkv_status demo_upload(clkv_context *ctx, const char *name, const float *x, int64_t count,
                        clkv_dtype dtype, cl_mem *out);

/* Blocking read of a contiguous tensor (dims product elements from its offset) into a
 * new host buffer; NULL with *st set (message on ctx) on failure. */
void *demo_read_tensor(clkv_context *ctx, const clkv_tensor *t, clkv_status *st);

/* The contents of a quantized cache (clkv/quant_cache.h) read back through its view and
 * dequantised on the host as the header specifies: K and V [B, Hkv, p->L, D] float, the
 * first tokens[b] tokens of sequence b (the rest untouched). (tools/demo_quant.c) */
clkv_status demo_quant_dequant(clkv_context *ctx, const clkv_quant_cache *cache,
                               const demo_problem *p, const int32_t *tokens, float *k, float *v);

/* ---- timing ---- */

typedef clkv_status (*demo_call)(void *arg);

/* One untimed call, then `repeats` batches of `iters` calls (each batch timed with a
 * finish); *median_s = median per-call time. */
clkv_status demo_time(clkv_context *ctx, demo_call f, void *arg, int iters, int repeats,
                      double *median_s);

/* ---- steps (tools/demo_*.c) ---- */

int demo_decode(demo_env *env, const void *cfg, demo_row *row);
extern const struct demo_decode_cfg demo_decode_cpu, demo_decode_gpu, demo_decode_nhd_cpu,
    demo_decode_nhd_gpu;
int demo_evict(demo_env *env, const void *cfg, demo_row *row);
extern const struct demo_evict_cfg demo_evict_cpu, demo_evict_gpu;
int demo_minikv(demo_env *env, const void *cfg, demo_row *row);
extern const struct demo_minikv_cfg demo_minikv_cpu, demo_minikv_gpu;
int demo_quant(demo_env *env, const void *cfg, demo_row *row);
extern const struct demo_quant_cfg demo_quant_cpu, demo_quant_gpu;
int demo_longflow(demo_env *env, const void *cfg, demo_row *row);
extern const struct demo_longflow_cfg demo_longflow_cpu, demo_longflow_gpu;
int demo_pariskv(demo_env *env, const void *cfg, demo_row *row);
extern const struct demo_pariskv_cfg demo_pariskv_cpu, demo_pariskv_gpu;

#endif /* CLKV_TOOLS_DEMO_H */
