/* Option parsing shared by the bench commands (attention-decode, -window, -sparse,
 * -quant, score, compress, longflow): the timing, device, output and shape options every
 * one of them takes, with one spelling, range and error message. */
#ifndef CLKV_TOOLS_BENCH_COMMON_H
#define CLKV_TOOLS_BENCH_COMMON_H

#include <stdint.h>

#include "bench_util.h"
#include "clkv.h"

/* Where a command stores the shared options; a NULL pointer means the command does not
 * take that option (it is then reported as unknown by the caller). */
typedef struct bench_common_opts {
    int64_t *iters;      /* --iters N: calls per timed batch, [1, iters_max] */
    int64_t iters_max;   /* upper bound of --iters */
    int64_t *repeats;    /* --repeats N: timed batches, [1, repeats_max] */
    int64_t repeats_max; /* upper bound of --repeats */
    int64_t *warmup;     /* --warmup N: untimed calls first, [0, 1000000] */
    int64_t *bw_runs;    /* --bw-runs N: bandwidth probe runs, [1, bw_runs_max] */
    int64_t bw_runs_max; /* upper bound of --bw-runs */
    const char **device; /* --device SEL */
    tool_format *format; /* --format text|json|csv */
    /* The problem shape. Lists hold up to BENCH_MAX_LIST values; batch_max and len_max
     * must be set with their list, a zero q_heads_max .. dim_max takes the default named. */
    int64_t *batch;       /* --batch N[,N..]: values in [1, batch_max], count in *nbatch */
    int *nbatch;          /* (set to -1 on a bad value) */
    int64_t batch_max;    /* upper bound of --batch values */
    int64_t *len;         /* --len N[,N..]: values in [1, len_max], count in *nlen */
    int *nlen;            /* (set to -1 on a bad value) */
    int64_t len_max;      /* upper bound of --len values */
    int64_t *q_heads;     /* --q-heads N: [1, q_heads_max] */
    int64_t q_heads_max;  /* 0: 4096 */
    int64_t *kv_heads;    /* --kv-heads N: [1, kv_heads_max] */
    int64_t kv_heads_max; /* 0: 4096 */
    int64_t *dim;         /* --dim N: [dim_min, dim_max] */
    int64_t dim_min;      /* 0: 1 */
    int64_t dim_max;      /* 0: 4096 */
    clkv_dtype *dtype;    /* --dtype f32|f16|bf16 */
    int *nhd;             /* --layout hnd|nhd: 1 for nhd */
    int64_t *splits;      /* --splits N: [0, 1 << 20], 0 = auto */
} bench_common_opts;

/* Capacity of the --batch and --len lists. */
#define BENCH_MAX_LIST 16

/* Parses argv[*i] (and its value, advancing *i) if it is one of the shared options.
 * 0: not a shared option; 1: parsed; -1: a shared option with a bad or missing value
 * (message on stderr). */
int bench_common_option(int argc, char **argv, int *i, const bench_common_opts *c);

/* --layout value (m: opt_value's result for it): hnd or nhd into *nhd. 0 on success,
 * 1 on a bad or missing value (message on stderr for a bad one). */
int bench_parse_layout(int m, const char *v, int *nhd);

/* The GQA shape check of the bench options: 0 when hq is a multiple of hkv, else -1
 * (message on stderr). */
int bench_check_heads(int64_t hq, int64_t hkv);

#endif /* CLKV_TOOLS_BENCH_COMMON_H */
