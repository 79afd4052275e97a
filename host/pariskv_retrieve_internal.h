/* Internal interface between the ParisKV retrieval host files (not installed):
 * the launch plan of one search and the two halves that enqueue it. */
#ifndef CLKV_HOST_PARISKV_RETRIEVE_INTERNAL_H
#define CLKV_HOST_PARISKV_RETRIEVE_INTERNAL_H

#include "clkv/pariskv_retrieve.h"
#include "host/attention_internal.h"
#include "runtime/internal.h"

/* Sizes and workspace layout of one validated clkv_pariskv_search call. */
typedef struct pkv_search_plan {
    int64_t B, Hkv, L, D, nblk, zone_start, max_zone, max_cand, top_k;
    int m, nc, nbins, s_wide;
    int wg, per_item, chunk, nchunks;
    int64_t s_row; /* entries per (b, KV head) row of S in the workspace */
    int wg2;       /* work-group size of Stage II (rerank, top-k) */
    /* CLKV_PARISKV_LEGACY=1 in the environment: the previous Stage I (per-chunk
     * histograms, the threshold kernel summing bins per chunk, always 7 kernels), kept to
     * measure against; 0: the default (per-chunk suffix counts; 6 kernels when the
     * threshold is fused). */
    int legacy;
    /* 1: no threshold kernel, the compaction work-groups find threshold and bases (when
     * they fit in about one wave; two more scans per work-group otherwise cost more than
     * the launch) */
    int fused_thr;
    /* Stage I kernel variants (cl_kernels/pariskv_collide.cl): collide_v = COLLIDE_V
     * (CLKV_PARISKV_COLLIDE; 0 where the id rows are not 4-byte words or in the legacy
     * path), ids_vec16 = IDS_VEC16, cv_tok_max = CV_TOK_MAX (0: none). */
    int collide_v, ids_vec16, cv_tok_max;
    /* On by default (CLKV_PARISKV_FAST_TOPK=0 turns it off): Stage II keeps a coarse
     * 64-bin score histogram (the collection finds the threshold bin from 128 bins instead
     * of 4096) and the top-k ranks buffers of <= PKV_TOPK_RANK_MAX entries by counting
     * instead of two bitonic sorts. H100, 1024-wide Stage II work-groups, same run: step
     * 118.7 -> 111.0 us at 128K and 345.6 -> 333.0 us at 1M tokens. */
    int fast_topk;
    clkv_pariskv_levels levels;
    /* Set by the caller before stage 1 is prepared (zeroed by the validation): q_raw
     * [B, Hq, D] and the packed SRHT signs make pkv_rank transform the group-mean query
     * itself (RANK_QT, cl_kernels/pariskv_collide.cl; args->q_rot / q_norm are written,
     * not read); NULL: args->q_rot holds the transformed query. */
    const clkv_tensor *q_raw;
    cl_uint8 signs;
    /* Workspace byte offsets (each 256-aligned) and the total. */
    size_t off_bonus, off_s, off_hist, off_rowhist, off_cinfo, off_cand, off_cs, off_khist,
        off_kbuf, total;
} pkv_search_plan;

/* Stage II final top-k (cl_kernels/pariskv_rerank.cl): per (b, KV head) row a histogram
 * of the top PKV_KHIST_BITS bits of the score keys (PKV_KHIST_BINS words), a coarse
 * histogram of the top 6 bits (64 words) and two counters (PKV_KHIST_WORDS words per
 * row), and a buffer of PKV_KBUF_CAP
 * (key, candidate) pairs (8 bytes each) for the scores at or above the threshold bin. */
#define PKV_KHIST_BITS 12
#define PKV_KHIST_BINS (1 << PKV_KHIST_BITS)
#define PKV_KHIST_WORDS (PKV_KHIST_BINS + 64 + 2)
#define PKV_KBUF_CAP 4096
/* pkv_topk ranks buffers of at most this many entries by counting (no sort). */
#define PKV_TOPK_RANK_MAX 1024

/* The kernels of one search (owned by the program cache); rerank_items, collect_items:
 * candidates per work-item of pkv_rerank, pkv_topk_collect; rerank_wg: pkv_rerank's
 * work-group size (set by clkv__pariskv_stage2_prepare). */
typedef struct pkv_search_kernels {
    cl_kernel rank, collide, threshold, compact, rerank, collect, topk;
    int rerank_items, collect_items, rerank_wg;
} pkv_search_kernels;

/* `ev` (optional): events of the stage's kernels (stage 1: 4 = rank, collide, threshold,
 * compact; stage 2: 3 = rerank, collection, top-k), NULL where a kernel was not enqueued. Each
 * stage in two steps, so every kernel is built, has its arguments set and passes the local-memory
 * check before anything is enqueued. Stage I (rank, collide with the histogram, threshold,
 * compaction) writes candidates to args->candidates when given, else to the workspace at
 * p->off_cand. Stage II (rerank, top-k) writes args->idx. */
clkv_status clkv__pariskv_stage1_prepare(clkv_context *ctx, const clkv_pariskv_search_args *args,
                                         const pkv_search_plan *p, cl_mem ws,
                                         pkv_search_kernels *k);
clkv_status clkv__pariskv_stage1_enqueue(clkv_context *ctx, const pkv_search_plan *p,
                                         const pkv_search_kernels *k, cl_event *ev);
clkv_status clkv__pariskv_stage2_prepare(clkv_context *ctx, const clkv_pariskv_search_args *args,
                                         const pkv_search_plan *p, cl_mem ws,
                                         pkv_search_kernels *k);
clkv_status clkv__pariskv_stage2_enqueue(clkv_context *ctx, const pkv_search_plan *p,
                                         const pkv_search_kernels *k, cl_event *done, cl_event *ev);

/* Where the final top-k of a search planned as *p with workspace ws reads its inputs, and
 * its build options (shared by pkv_topk and the decode step's sparse attention). */
void clkv__pariskv_topk_src(const clkv_pariskv_search_args *args, const pkv_search_plan *p,
                            cl_mem ws, clkv__topk_src *tk);

/* clkv_pariskv_search with the decode step's options. q_raw (with signs; see
 * pkv_search_plan.q_raw; the caller checked clkv__pariskv_rank_can_transform and q_raw's
 * shape): the first kernel also transforms the query into args->q_rot / q_norm. tk: no
 * final top-k kernel (and no `done` event); *tk tells a top-k that runs next where its
 * inputs are (the decode step's clkv__attention_sparse_step, which writes args->idx).
 * ev: as clkv__pariskv_search_profiled. */
clkv_status clkv__pariskv_search_ex(clkv_context *ctx, const clkv_pariskv_search_args *args,
                                    const clkv_tensor *q_raw, const cl_uint8 *signs,
                                    clkv__topk_src *tk, cl_event *done, cl_event *ev);

/* 1 when clkv__pariskv_search_ex can take the raw query (q_raw, signs) instead of a
 * transformed one for subspace dim m and head dim D: D a power of two with D / 2 <= 2^m
 * (pkv_rank's work-items run the transform). */
int clkv__pariskv_rank_can_transform(int64_t D, int m);

/* clkv_pariskv_search with one event per kernel for profiling (benchmarks): ev[0..6] =
 * rank, collide, threshold, compact, rerank, collection, top-k (NULL where a kernel was
 * not enqueued, e.g. the threshold kernel outside the legacy path); the caller releases
 * them. */
#define PKV_SEARCH_EVENTS 7
clkv_status clkv__pariskv_search_profiled(clkv_context *ctx, const clkv_pariskv_search_args *args,
                                          cl_event ev[PKV_SEARCH_EVENTS]);

/* clkv_pariskv_index_search with the per-kernel events of the search (as above; the
 * query transform is not included). */
clkv_status clkv__pariskv_index_search_profiled(clkv_context *ctx, clkv_pariskv_index *index,
                                                const clkv_tensor *q, const clkv_tensor *idx,
                                                cl_event ev[PKV_SEARCH_EVENTS]);

#endif /* CLKV_HOST_PARISKV_RETRIEVE_INTERNAL_H */
