/* Shared between host/score*.c; not installed. */
#ifndef CLKV_HOST_SCORE_INTERNAL_H
#define CLKV_HOST_SCORE_INTERNAL_H

#include "clkv/score.h"

/* The protected token count clkv_score uses for `a` (the method default resolved);
 * a->q must be valid for window methods. */
int64_t clkv__score_protect(const clkv_score_args *a);

/* Force the lanes per key row of the window scorer (a power of two <= 16 dividing D;
 * 0: the library's choice). Tests use it to run the lane-split path on any device;
 * $CLKV_SCORE_TPR sets the same, read once per process. */
void clkv__score_force_tpr(int tpr);

/* Stages of clkv_evict_keep_set, for per-stage timing (`clkv bench dropkv --breakdown`):
 * a mask of CLKV__EVICT_ATTENTION | CLKV__EVICT_SCORE | CLKV__EVICT_KEEP; 0 (the default)
 * runs all. A call that skips a stage reads whatever its predecessor left in the
 * workspace (benchmarking only; results are meaningless unless the mask is 0). Process
 * wide, not thread-safe. */
#define CLKV__EVICT_ATTENTION 1
#define CLKV__EVICT_SCORE 2
#define CLKV__EVICT_KEEP 4
void clkv__evict_set_stages(int mask);

#endif
