/* Option parsing shared by the bench commands (attention-decode, -window, -sparse,
 * -quant, score, compress, longflow): the timing, device and output options every one
 * of them takes, with one spelling, range and error message. */
#ifndef CLKV_TOOLS_BENCH_COMMON_H
#define CLKV_TOOLS_BENCH_COMMON_H

#include <stdint.h>

#include "bench_util.h"

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
} bench_common_opts;

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
