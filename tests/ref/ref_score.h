/* Plain C double-precision references of the eviction scorers (SPEC §2.1, §2.2) and of
 * the keep-set formula, written from the SPEC and include/clkv/score.h, independent of
 * the kernels. Inputs are the values as stored on the device (rounded), row-major in
 * their logical layouts. */
#ifndef CLKV_TEST_REF_SCORE_H
#define CLKV_TEST_REF_SCORE_H

#include <stdint.h>

#include "clkv.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ref_score_cfg {
    clkv_score_method method;
    int64_t B, Hq, Hkv, L, D, W; /* W = rows of q (window methods) */
    const float *q;              /* [B, Hq, W, D] */
    const float *k, *v;          /* [B, Hkv, L, D] */
    const float *lse;            /* [B, Hq, W] as given to the kernel */
    const float *a;              /* [B, Hq, W, D] as given to the kernel */
    const float *w_o;            /* [Hq, D, Dm] or NULL */
    int64_t Dm;
    const int32_t *len; /* [B] (already clamped to max_length) */
    double scale;       /* the resolved scale */
    double eps;
    int round_p;          /* DropKV: round p~ to kv_dtype in the weight */
    clkv_dtype kv_dtype;  /* for round_p */
    int pool;             /* resolved: 0 none, 1 avg, 2 max */
    int pool_k;           /* odd */
    int pool_excl_window; /* pool domain [0, n - W) instead of [0, n) */
    int64_t protect, sink, recent;
    int keydiff_raw_mean;
} ref_score_cfg;

/* scores [B, Hkv, L] (-inf for j >= n, +inf protected), tau [B, Hkv, L] the absolute
 * tolerance beyond 1e-4*|ref| (SPEC §0.2: the DropKV formula of §2.1, a cancellation
 * allowance for signed sums; 0 for infinities), pbar [B, Hkv, L] (CriticalKV, may be
 * NULL). Returns 0 or -1. */
int ref_score(const ref_score_cfg *c, double *scores, double *tau, double *pbar);

/* keep = min(n, max((int64)(ratio*n), window, 1)) or with an absolute budget >= 0. */
int64_t ref_keep_count(int64_t n, double ratio, int64_t budget, int64_t window);

#ifdef __cplusplus
}
#endif

#endif /* CLKV_TEST_REF_SCORE_H */
