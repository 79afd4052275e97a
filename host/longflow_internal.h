/* LongFlow static cache: the object and the launch plan shared by
 * host/longflow_cache.c (create, load) and host/longflow_step.c (step). Not installed. */
#ifndef CLKV_HOST_LONGFLOW_INTERNAL_H
#define CLKV_HOST_LONGFLOW_INTERNAL_H

#include "runtime/internal.h"

#define LF_MAX_GROUP 8
#define LF_FIN_WG 256
#define LF_MAX_SPLITS 1024
#define LF_UNIT_HEADS_MAX 1024 /* Hq limit: per-head LSEs of a map in local memory */

/* Launch geometry of a step, fixed at cache creation (the work per step is constant). */
typedef struct lf_plan {
    int group, nhg;       /* query heads per work-group, head groups per KV head */
    int epl, tpr, wg;     /* elements per lane, lanes per row, work-group size */
    int unroll;           /* rows per row-group per loop iteration */
    int cp_async, stages; /* K/V tiles staged in local memory (cp.async on NVIDIA) */
    int splits, chunk;    /* split-K over the S slots */
    int n_chunks;         /* finish work-groups per slot map */
    int chunk_slots, hl;  /* slots per finish work-group, lanes sharing a slot's heads */
    /* The tensor-core partial (attention_window_mma.cl with -DLONGFLOW): NVIDIA, 16-bit
     * cache, D 64 or 128, q of the cache dtype; its own split-K. */
    int mma;                               /* available for this cache */
    int mma_qt, mma_nwk, mma_kw, mma_nstg; /* tile parameters (see the kernel) */
    int mma_qtiles, mma_splits, mma_chunk; /* row tiles, split-K over the S slots */
    /* The one-launch step (longflow_step_mma, or longflow_step_keyrows where keyrows): the
     * attention, the merge, scores and victim in one kernel: sc_attn attention
     * work-groups, then sc_wgs scorers over sc_chunks chunks of sc_spt * step_wg slots per
     * map, work-groups of step_wg work-items. */
    int fused, sc_attn, sc_wgs, sc_spt, sc_chunks, step_wg;
    /* The step's attention in attention_window_keyrows.cl's DIRECT form (G <= 8; keys on
     * the mma M dimension, K/V straight into registers): kr_nw warps of mma_kw keys, one
     * row tile (mma_qtiles = 1), its own split-K in mma_splits / mma_chunk. */
    int keyrows, kr_nw, kr_interleave;
    size_t acc_bytes;  /* workspace: split acc [B, Hq, splits, D] f32 (largest plan) */
    size_t ml_bytes;   /* split (m, l) [B, Hq, splits, 2] f32 */
    size_t y_bytes;    /* score logits [B, Hq, S] f32 */
    size_t cand_bytes; /* chunk candidates [B, Hm, n_chunks, 2] i32 */
} lf_plan;

struct clkv_longflow_cache {
    clkv_context *ctx;
    int64_t B, Hq, Hkv, G, D, S, Hm;
    clkv_dtype dtype;
    clkv_longflow_mode mode;
    int protect;
    cl_mem k, v;     /* [B, Hkv, S, D] */
    cl_mem pos;      /* [B, Hm, S] i32 */
    cl_mem victim;   /* [B, Hm] i32 */
    cl_mem next_pos; /* [B] i32 */
    /* i32, zero between calls: [0, B*Hm) the finish kernel's arrivals, then the
     * counters of longflow_step_mma (lf__counter_offsets) */
    cl_mem counters;
    lf_plan plan;
};

/* Fill c->plan from the cache shape and the device. */
clkv_status lf__plan(clkv_longflow_cache *c);

/* Layout of c->counters (int32 elements): the finish kernel's [B*Hm] arrivals at 0, then
 * the one-launch step's [B*Hkv] arrivals per (sequence, KV head), [B*Hm] arrivals and [B*Hm]
 * scored chunks per slot map, [B] maps done per sequence, and from the next even element
 * [B*Hm] 64-bit words: each map's best victim candidate (0 between launches). */
typedef struct lf_counter_layout {
    int unit, arr, scd, bat, c64;
    size_t total;
} lf_counter_layout;
lf_counter_layout lf__counter_layout(const clkv_longflow_cache *c);

/* Total workspace bytes of a step. */
size_t lf__workspace_bytes(const clkv_longflow_cache *c);

/* What lf__enqueue_pass runs: a step (write + outputs), or after a load the victim
 * choice with q (scores from q, no write, no outputs) or without (mode 2). */
/* A 3-D kernel, its arguments set, to enqueue before the pass (load's copy kernel). */
typedef struct lf_pre {
    cl_kernel kernel;
    const char *label;
    const size_t *global, *local;
} lf_pre;

typedef struct lf_pass {
    int mode; /* 0 step, 1 load with q, 2 load without q */
    const clkv_tensor *q, *k_new, *v_new, *o, *lse, *scores, *victims;
    float scale;       /* resolved (non-zero) */
    const lf_pre *pre; /* may be NULL */
} lf_pass;

/* Build both kernels, set their arguments and check their local memory, then enqueue
 * p->pre (if any) and them (mode 2: the finish kernel only), so that nothing is
 * enqueued when a build or check fails. Arguments must have been validated. */
clkv_status lf__enqueue_pass(clkv_longflow_cache *c, const lf_pass *p, cl_event *done);

#endif /* CLKV_HOST_LONGFLOW_INTERNAL_H */
