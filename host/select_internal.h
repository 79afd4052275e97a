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

/* clkv_select_topk with the rows' k given by `rule` (NULL: the public behaviour;
 * args->k_per_row must then be absent). */
clkv_status clkv__select_topk_rule(clkv_context *ctx, const clkv_select_topk_args *args,
                                   const clkv__keep_rule *rule, cl_event *done);

#endif
