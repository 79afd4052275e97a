/* Shared between host/select.c and the tests; not installed. */
#ifndef CLKV_HOST_SELECT_INTERNAL_H
#define CLKV_HOST_SELECT_INTERNAL_H

#include "clkv/select.h"

/* Force the kernel path of clkv_select_topk (tests: both paths on every shape):
 * 0 = the library's choice, 1 = one work-group per row (select_row), 2 = the chunked
 * multi-kernel pipeline. Process wide, not thread-safe; $CLKV_SELECT_ROW (read once per
 * process) sets 1 ("1") or 2 ("0") too. */
void clkv__select_force_path(int path);

/* clkv_keep_set's row count, computed inside the selection kernels instead of by a
 * separate launch: k_row = clkv_keep_count(n, ratio, budget, window) (clamped to k). */
typedef struct clkv__keep_rule {
    double ratio;
    int64_t budget;
    int64_t window;
} clkv__keep_rule;

/* A scorer's raw rows and final step, for a selection that computes the scores itself
 * (clkv_evict_keep_set: the keep-set's first kernel pools the raw scores and writes
 * args->scores, instead of a separate score_finalize launch). Row r = b * H + h of the
 * raw scores starts at element raw_off + r * row_len of `raw`; the final score of token
 * j is clkv_pooled_score (common.cl) with P = excl ? max(n - W, 0) : n. The selection's
 * own workspace then starts at byte ws_base of the context workspace (above the raw
 * rows, which live in the same buffer). */
typedef struct clkv__select_fuse {
    cl_mem raw;
    cl_long raw_off, row_len, protect;
    int L, W, excl, pool, pool_k;
    size_t ws_base;
} clkv__select_fuse;

/* clkv_select_topk with the rows' k given by `rule` (NULL: the public behaviour;
 * args->k_per_row must then be absent) and, optionally, the scores computed from a
 * scorer's raw rows (`fuse`, only where clkv__select_topk_poolable says 1). */
clkv_status clkv__select_topk_rule(clkv_context *ctx, const clkv_select_topk_args *args,
                                   const clkv__keep_rule *rule, const clkv__select_fuse *fuse,
                                   cl_event *done);

/* 1 when clkv_select_topk(ctx, args) can take a `fuse` of raw rows as long as the
 * scores (dims[2]): on the chunked pipeline or in select_row's resident form; 0 for the
 * streaming select_row. args must be valid. */
int clkv__select_topk_poolable(clkv_context *ctx, const clkv_select_topk_args *args);

/* Per-kernel device times of the chunked pipeline (bench --keep-kernels): while on, each
 * chunked selection waits for its kernels (profiling events) and adds their durations
 * up. on = 1 starts (and zeroes the sums), 0 stops. clkv__select_profile_take: the
 * number of profiled calls, the summed microseconds of each of its SELECT_PROF_KERNELS
 * kernels (unused slots 0), us[SELECT_PROF_KERNELS] the summed span from the first
 * kernel's start to the last one's end; then zeroes the sums. Not thread-safe. */
#define SELECT_PROF_KERNELS 3
void clkv__select_profile(int on);
int clkv__select_profile_take(double us[SELECT_PROF_KERNELS + 1]);

#endif
