/* ParisKV Stage II (SPEC §4): RSQ-IP rerank (with the score histogram), threshold-bin
 * collection and final top-k launches
 * (cl_kernels/pariskv_rerank.cl). */
#include <stdio.h>
#include <string.h>

#include "host/pariskv_retrieve_internal.h"
#include "cl_kernels/kernel_args.cl" /* after the OpenCL types */

#define KERNEL_FILE "pariskv_rerank.cl"
#define COLLECT_ITEMS_DEFAULT 4

/* Environment switches of pkv_rerank, read per search (name unset or empty -> default):
 *   CLKV_PARISKV_RERANK_V       1 (default): 16-byte vector loads of a candidate's codes and
 *                               weights issued before the math (RR_VEC, where m = 8 and the
 *                               rows are 16-byte aligned); 0: the previous scalar kernel
 *   CLKV_PARISKV_RERANK_ITEMS   candidates per work-item with vector loads: 1 (default) or
 *                               2. 2 (half the work-groups, so half the histogram flushes)
 *                               was the default where the grid filled two waves with it,
 *                               while each flush added one global atomic per nonzero fine
 *                               bin to the row's few hot coarse bins; with the coarse bins
 *                               summed per work-group, 1 is faster (H100, pkv_rerank, two
 *                               alternations in one run: 1M tokens 69.4 / 69.1 us against
 *                               71.7 / 71.7 us with 2; 128K 16.5 / 17.3 against 22.0 /
 *                               21.2; 1 without the histogram 65.2 us at 1M)
 *   CLKV_PARISKV_RERANK_NOHIST  1: no score histogram (measuring only: the histogram's cost;
 *                               same top-k through the slower selection path)
 *   CLKV_PARISKV_COLLECT        1 (default, with the fast top-k): pkv_topk_collect scans
 *                               the bins with 64 work-items and appends through a local
 *                               counter (TC_NARROW); 0: the previous work-group-wide scans
 *   CLKV_PARISKV_COLLECT_ITEMS  scores per work-item of that collection: 1, 2, 4 (default),
 *                               8 (H100, 1M tokens: 17.3, 12.5, 9.4, 9.2 us)
 * Also measured and dropped (H100, 1M tokens, 2026-11-27): pkv_rerank appending the
 * candidates of its work-group that may reach the top-k (those in bins at or above its own
 * top_k-th key's) to a per-row list, and the row's last work-group (an arrival ticket)
 * filling pkv_topk's buffer from that list, so no collection launch: pkv_rerank 71.0 ->
 * 87.8 us against the 8.3 us collection, step 191 -> 202 us (the bin search, the append's
 * atomic and the arrival in each of ~800 work-groups).
 * (pkv_rerank in 512- or 256-wide work-groups was slower on H100 at 1M tokens: 73.8 and
 * 82.8 us against 71.6 us with 1024. Also measured at 1M tokens on the H100 and dropped,
 * 2026-11-27: a looping grid of about one work-group per compute unit with the next
 * candidate's loads in flight during the math, 72.1 -> 90.9 us, and 83.4 us with half
 * those work-groups, so the gather is bound by the rate of random accesses the memory
 * serves, not by their latency; each token's codes and weights side by side in one
 * 96-byte record of the index, 71.5 / 76.2 -> 72.3 / 72.9 us; the collection run by the
 * last pkv_rerank work-group of a row (a ticket after a device-wide fence, so no
 * collection launch), 70.7 + 9.6 -> 95.7 us; pkv_rerank selecting its own candidates from
 * S (pkv_compact's arithmetic first in each work-group, so no compaction launch), 71.3 +
 * 14.3 -> 92.9 us, and 104.1 us with 512-wide work-groups.) */

void clkv__pariskv_topk_src(const clkv_pariskv_search_args *a, const pkv_search_plan *p, cl_mem ws,
                            clkv__topk_src *tk) {
    const int own_cand = a->candidates.buf != NULL, own_cs = a->candidate_scores.buf != NULL;
    tk->cand = own_cand ? a->candidates.buf : ws;
    tk->ca_off = own_cand ? clkv__elem_offset(&a->candidates) : (cl_long)p->off_cand / 4;
    tk->ca_sb = own_cand ? a->candidates.strides[0] : p->Hkv * p->max_cand;
    tk->ca_sh = own_cand ? a->candidates.strides[1] : p->max_cand;
    tk->cs = own_cs ? a->candidate_scores.buf : ws;
    tk->cs_off = own_cs ? clkv__elem_offset(&a->candidate_scores) : (cl_long)p->off_cs / 4;
    tk->cs_sb = own_cs ? a->candidate_scores.strides[0] : p->Hkv * p->max_cand;
    tk->cs_sh = own_cs ? a->candidate_scores.strides[1] : p->max_cand;
    tk->plan = a->plan.buf;
    tk->plan_off = clkv__elem_offset(&a->plan);
    tk->max_cand = (cl_int)p->max_cand;
    /* Score histogram + counters (zeroed by Stage I's pkv_rank) and pair buffers. */
    tk->ws = ws;
    tk->kh_off = (cl_long)(p->off_khist / 4);
    tk->kb_off = (cl_long)(p->off_kbuf / 8);
    tk->kh_bits = PKV_KHIST_BITS;
    tk->kbuf_cap = PKV_KBUF_CAP;
    tk->tk_rank = p->fast_topk ? PKV_TOPK_RANK_MAX : 0;
}

clkv_status clkv__pariskv_stage2_prepare(clkv_context *ctx, const clkv_pariskv_search_args *a,
                                         const pkv_search_plan *p, cl_mem ws,
                                         pkv_search_kernels *k) {
    /* two programs (RR_PART, see pariskv_rerank.cl): pkv_rerank, and the top-k kernels,
     * which do not depend on the head dim, subspace dim or weight dtype */
    clkv_defs defs, tdefs;
    clkv__defs_init(&defs);
    clkv__defs_init(&tdefs);
    clkv_defs *both[2] = {&defs, &tdefs};
    /* pkv_rerank's work-group: 256 work-items (the top-k kernels keep wg2, 1024 on GPUs).
     * At 50 registers a work-item, a 1024-wide group left one group (32 warps) per compute
     * unit and 6.24 waves; 256-wide groups fit 5 (40 warps). H100, 1M tokens, 105K
     * candidates per row, two alternations in one run (2026-11-28): rerank kernel 72.1 /
     * 72.1 us with 1024, 62.9 / 62.9 with 512, 62.5 / 61.8 with 256; two candidates per
     * work-item (CLKV_PARISKV_RERANK_ITEMS=2) 75.5-76.0 / 72.4-72.6 / 66.4-66.8; the whole
     * step 185.6 / 187.2 -> 176.3 / 176.4 us; 128K within the spread (15.1-16.1 us).
     * CLKV_PARISKV_RERANK_WG (256, 512, 1024) overrides it. */
    int rwg = p->wg2 < 256 ? p->wg2 : 256;
    const int rwg_env = clkv__env_int("CLKV_PARISKV_RERANK_WG", 0);
    if ((rwg_env == 256 || rwg_env == 512 || rwg_env == 1024) &&
        (size_t)rwg_env <= ctx->info.max_work_group_size)
        rwg = rwg_env;
    for (int i = 0; i < 2; i++) {
        clkv__defs_int(both[i], "RR_PART", i + 1);
        clkv__defs_int(both[i], "WG", i == 0 ? rwg : p->wg2);
        clkv__defs_int(both[i], "KH_BITS", PKV_KHIST_BITS);
        clkv__defs_int(both[i], "KBUF_CAP", PKV_KBUF_CAP);
        /* CLKV_PARISKV_FAST_TOPK=0 turns this off (see pkv_search_plan.fast_topk) */
        clkv__defs_int(both[i], "KH_COARSE", p->fast_topk && p->wg2 >= 64);
    }
    clkv__defs_int(&defs, "HEAD_DIM", p->D);
    clkv__defs_int(&defs, "SUB_M", p->m);
    clkv__defs_int(&defs, "W_DTYPE", a->weights.dtype);
    clkv__defs_int(&defs, "CODES_U32", clkv__rows_aligned(&a->codes, 4));
    const int narrow =
        p->fast_topk && p->wg2 >= 64 && clkv__env_int("CLKV_PARISKV_COLLECT", 1) != 0;
    const int tc_env = clkv__env_int("CLKV_PARISKV_COLLECT_ITEMS", COLLECT_ITEMS_DEFAULT);
    const int tc_items = narrow && (tc_env == 2 || tc_env == 4 || tc_env == 8) ? tc_env : 1;
    clkv__defs_int(&tdefs, "TC_NARROW", narrow);
    /* warp-shuffle scans on NVIDIA: the collection's bin search (pkr_thr_level) and
     * pkv_topk's scans (pkc_scan); CLKV_PARISKV_WSCAN=0 keeps the local-memory ones */
    clkv__defs_int(&tdefs, "PKC_WSCAN", clkv__env_int("CLKV_PARISKV_WSCAN", 1) != 0);
    clkv__defs_int(&tdefs, "TC_ITEMS", tc_items);
    clkv__defs_int(&tdefs, "TK_RANK", p->fast_topk ? PKV_TOPK_RANK_MAX : 0); /* as topk_src */
    const int w_vec = a->weights.dtype == CLKV_F32 ? 4 : 8; /* weights per 16 bytes */
    const int vec = clkv__env_int("CLKV_PARISKV_RERANK_V", 1) != 0 && p->m == 8 &&
                    clkv__rows_aligned(&a->codes, 16) && clkv__rows_aligned(&a->weights, w_vec) &&
                    (p->nblk < 16 ? p->nblk : 16) % w_vec == 0;
    const int items = vec && clkv__env_int("CLKV_PARISKV_RERANK_ITEMS", 1) == 2 ? 2 : 1;
    clkv__defs_int(&defs, "RR_VEC", vec);
    clkv__defs_int(&defs, "RR_ITEMS", items);
    clkv__defs_int(&defs, "RR_NOHIST", clkv__env_int("CLKV_PARISKV_RERANK_NOHIST", 0) != 0);
    cl_kernel kr, kc, kt;
    clkv_status st;
    k->rerank = k->collect = k->topk = NULL;
    if ((st = clkv__get_kernel(ctx, KERNEL_FILE, &defs, "pkv_rerank", &kr)) ||
        (st = clkv__get_kernel(ctx, KERNEL_FILE, &tdefs, "pkv_topk_collect", &kc)) ||
        (st = clkv__get_kernel(ctx, KERNEL_FILE, &tdefs, "pkv_topk", &kt)))
        return st;
    const clkv_tensor *QR = &a->q_rot, *QN = &a->q_norm, *CD = &a->codes, *W = &a->weights,
                      *PL = &a->plan, *IX = &a->idx;
    cl_float8 lev;
    for (int t = 0; t < 8; t++)
        lev.s[t] = p->levels.a[t];
    clkv__topk_src tk;
    clkv__pariskv_topk_src(a, p, ws, &tk);
    const cl_mem cand = tk.cand, cs = tk.cs;
    /* One scalar struct for the three kernels (cl_kernels/kernel_args.cl says why); the
     * score histogram (kh_off, u32) and the pair buffers (kb_off, u64) are in ws. */
    pkv_rerank_scalars P;
    memset(&P, 0, sizeof P);
    P.qr_off = clkv__elem_offset(QR), P.qr_sb = QR->strides[0], P.qr_sh = QR->strides[1];
    P.qn_off = clkv__elem_offset(QN), P.qn_sb = QN->strides[0], P.qn_sh = QN->strides[1];
    P.cd_off = clkv__elem_offset(CD), P.cd_sb = CD->strides[0], P.cd_sh = CD->strides[1];
    P.cd_sl = CD->strides[2];
    P.w_off = clkv__elem_offset(W), P.w_sb = W->strides[0], P.w_sh = W->strides[1];
    P.w_sl = W->strides[2];
    P.plan_off = clkv__elem_offset(PL);
    P.ca_off = tk.ca_off, P.ca_sb = tk.ca_sb, P.ca_sh = tk.ca_sh;
    P.cs_off = tk.cs_off, P.cs_sb = tk.cs_sb, P.cs_sh = tk.cs_sh;
    P.kh_off = tk.kh_off, P.kb_off = tk.kb_off;
    P.ix_off = clkv__elem_offset(IX), P.ix_sb = IX->strides[0], P.ix_sh = IX->strides[1];
    P.B = (cl_int)p->B, P.max_cand = (cl_int)p->max_cand, P.top_k = (cl_int)p->top_k;
    if ((st = clkv__set_args(ctx, kr, "pkv_rerank", 10, CLKV_ARG(QR->buf), CLKV_ARG(QN->buf),
                             CLKV_ARG(CD->buf), CLKV_ARG(W->buf), CLKV_ARG(PL->buf), CLKV_ARG(cand),
                             CLKV_ARG(cs), CLKV_ARG(ws), CLKV_ARG(P), CLKV_ARG(lev))) ||
        (st = clkv__set_args(ctx, kc, "pkv_topk_collect", 4, CLKV_ARG(cs), CLKV_ARG(PL->buf),
                             CLKV_ARG(ws), CLKV_ARG(P))) ||
        (st = clkv__set_args(ctx, kt, "pkv_topk", 6, CLKV_ARG(cs), CLKV_ARG(cand),
                             CLKV_ARG(PL->buf), CLKV_ARG(IX->buf), CLKV_ARG(ws), CLKV_ARG(P))))
        return st;
    if ((st = clkv__check_local_mem(ctx, kr, "pkv_rerank", 0)) ||
        (st = clkv__check_local_mem(ctx, kc, "pkv_topk_collect", 0)) ||
        (st = clkv__check_local_mem(ctx, kt, "pkv_topk", 0)))
        return st;
    k->rerank = kr;
    k->rerank_items = items;
    k->rerank_wg = rwg;
    k->collect = kc;
    k->collect_items = tc_items;
    k->topk = kt;
    return CLKV_OK;
}

clkv_status clkv__pariskv_stage2_enqueue(clkv_context *ctx, const pkv_search_plan *p,
                                         const pkv_search_kernels *k, cl_event *done,
                                         cl_event *ev) {
    clkv_status st;
    const size_t wg = (size_t)p->wg2;
    const size_t l_wg[3] = {wg, 1, 1};
    if (p->max_cand > 0) {
        const size_t cspan = wg * (size_t)k->collect_items; /* scores per work-group */
        const size_t g_rr[3] = {((size_t)p->max_cand + cspan - 1) / cspan * wg, (size_t)p->Hkv,
                                (size_t)p->B};
        const size_t rwg = (size_t)k->rerank_wg;
        const size_t l_r[3] = {rwg, 1, 1};
        const size_t span = rwg * (size_t)k->rerank_items; /* candidates per work-group */
        const size_t g_r[3] = {((size_t)p->max_cand + span - 1) / span * rwg, (size_t)p->Hkv,
                               (size_t)p->B};
        if ((st = clkv__enqueue(ctx, k->rerank, "pkv_rerank", 3, g_r, l_r, ev ? &ev[0] : NULL)) ||
            (st = clkv__enqueue(ctx, k->collect, "pkv_topk_collect", 3, g_rr, l_wg,
                                ev ? &ev[1] : NULL)))
            return st;
    }
    if (!k->topk) /* the caller runs the top-k (the decode step's sparse attention) */
        return clkv__marker(ctx, done);
    const size_t g_tk[3] = {wg, (size_t)p->Hkv, (size_t)p->B};
    /* The top-k kernel is the last one: its event is `done` (or ev[2] when profiling). */
    if ((st = clkv__enqueue(ctx, k->topk, "pkv_topk", 3, g_tk, l_wg, ev ? &ev[2] : done)))
        return st;
    return ev && done ? clkv__marker(ctx, done) : CLKV_OK;
}
