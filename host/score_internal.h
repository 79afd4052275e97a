/* Shared between host/score*.c; not installed. */
#ifndef CLKV_HOST_SCORE_INTERNAL_H
#define CLKV_HOST_SCORE_INTERNAL_H

#include "clkv/score.h"
#include "host/select_internal.h"

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
/* clkv_score without its final kernel (score_finalize): enqueues the scorer and fills
 * `fuse` with where its raw rows lie and how they become scores, for the keep-set's fused
 * first kernel. Only for methods whose final step is the plain pooling and protection
 * (clkv__score_fusable). Validates like clkv_score. */
int clkv__score_fusable(clkv_score_method m);
clkv_status clkv__score_unpooled(clkv_context *ctx, const clkv_score_args *args,
                                 clkv__select_fuse *fuse);

/* clkv_keep_set whose one-stage selection computes args->scores from a scorer's raw rows
 * (`fuse`, from clkv__score_unpooled), where the selection can pool them (its chunked
 * pipeline or select_row's resident form): clkv__keep_set_poolable(ctx, args) says
 * whether it applies. */
int clkv__keep_set_poolable(clkv_context *ctx, const clkv_keep_set_args *args);
clkv_status clkv__keep_set_fused(clkv_context *ctx, const clkv_keep_set_args *args,
                                 const clkv__select_fuse *fuse, cl_event *done);

#define CLKV__EVICT_ATTENTION 1
#define CLKV__EVICT_SCORE 2
#define CLKV__EVICT_KEEP 4
void clkv__evict_set_stages(int mask);

#endif
