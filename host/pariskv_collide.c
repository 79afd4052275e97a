/* ParisKV Stage I (SPEC §4): the host-side schedule and plan (tiers, candidate counts,
 * computed in double), and the launches of centroid ranking, collision scoring with its
 * fused histogram, threshold selection and candidate compaction (cl_kernels/
 * pariskv_collide.cl). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "host/pariskv_retrieve_internal.h"

#define KERNEL_FILE "pariskv_collide.cl"

static const double TIER_R[CLKV_PARISKV_NUM_TIERS] = {0.05, 0.15, 0.30, 0.50, 0.75, 1.0};

void clkv_pariskv_default_ratios(int64_t n, double *beta, double *rho) {
    double b, r;
    if (n < 5000) {
        b = 0.5;
        r = 0.5;
    } else if (n < 10000) {
        b = 0.25;
        r = 0.3;
    } else if (n < 30000) {
        b = 0.2;
        r = 0.25;
    } else {
        b = 0.1;
        r = 0.2;
    }
    if (beta)
        *beta = b;
    if (rho)
        *rho = r;
}

clkv_status clkv_pariskv_plan(const int64_t *n, int64_t B, int64_t top_k, double beta, double rho,
                              int32_t *plan, int64_t *max_candidates) {
    if (B < 0)
        return clkv__fail(NULL, CLKV_ERR_ARG_RANGE, "B: %lld is negative", (long long)B);
    if (B > 0 && !n)
        return clkv__fail(NULL, CLKV_ERR_ARG_NULL, "n: zone lengths pointer is NULL");
    if (B > 0 && !plan)
        return clkv__fail(NULL, CLKV_ERR_ARG_NULL, "plan: output pointer is NULL");
    if (top_k < 0 || top_k > INT32_MAX)
        return clkv__fail(NULL, CLKV_ERR_ARG_RANGE, "top_k: %lld is outside [0, 2^31-1]",
                          (long long)top_k);
    if (isnan(beta) || isnan(rho))
        return clkv__fail(NULL, CLKV_ERR_ARG_RANGE, "beta: beta or rho is NaN");
    const int fixed = beta > 0.0 && rho > 0.0;
    if (!fixed && (beta > 0.0 || rho > 0.0))
        return clkv__fail(NULL, CLKV_ERR_ARG_RANGE,
                          "rho: beta = %g and rho = %g: give both (> 0) or neither", beta, rho);
    if (fixed && (beta > 1.0 || rho > 1.0 || rho < beta))
        return clkv__fail(NULL, CLKV_ERR_ARG_RANGE,
                          "rho: beta = %g, rho = %g must satisfy 0 < beta <= rho <= 1", beta, rho);
    for (int64_t b = 0; b < B; b++)
        if (n[b] < 0 || n[b] > INT32_MAX)
            return clkv__fail(NULL, CLKV_ERR_ARG_RANGE, "n: n[%lld] = %lld is outside [0, 2^31-1]",
                              (long long)b, (long long)n[b]);
    int64_t cmax = 0;
    for (int64_t b = 0; b < B; b++) {
        double be = beta, rh = rho;
        if (!fixed)
            clkv_pariskv_default_ratios(n[b], &be, &rh);
        const double nb = (double)n[b];
        plan[b] = (int32_t)n[b];
        for (int t = 0; t < CLKV_PARISKV_NUM_TIERS; t++)
            plan[(1 + t) * B + b] = (int32_t)ceil((nb * rh) * TIER_R[t]);
        int64_t c = (int64_t)ceil(be * nb);
        if (c < top_k)
            c = top_k;
        if (c > n[b])
            c = n[b];
        plan[7 * B + b] = (int32_t)c;
        if (c > cmax)
            cmax = c;
    }
    if (max_candidates)
        *max_candidates = cmax;
    return CLKV_OK;
}

/* pkv_rank's RANK_QT arguments 20..30: the raw query, its group size, the signs, q_norm. */
static clkv_status set_rank_query_args(clkv_context *ctx, cl_kernel kr,
                                       const clkv_pariskv_search_args *a,
                                       const pkv_search_plan *p) {
    const clkv_tensor *Q = p->q_raw, *QN = &a->q_norm;
    const cl_long q_off = clkv__elem_offset(Q), q_sb = Q->strides[0], q_sh = Q->strides[1];
    const cl_int G = (cl_int)(Q->dims[1] / p->Hkv), has_qn = 1;
    const cl_long qn_off = clkv__elem_offset(QN), qn_sb = QN->strides[0], qn_sh = QN->strides[1];
    return clkv__set_args_at(ctx, kr, "pkv_rank", 20, 11, CLKV_ARG(Q->buf), CLKV_ARG(q_off),
                             CLKV_ARG(q_sb), CLKV_ARG(q_sh), CLKV_ARG(G), CLKV_ARG(p->signs),
                             CLKV_ARG(QN->buf), CLKV_ARG(qn_off), CLKV_ARG(qn_sb), CLKV_ARG(qn_sh),
                             CLKV_ARG(has_qn));
}

clkv_status clkv__pariskv_stage1_prepare(clkv_context *ctx, const clkv_pariskv_search_args *a,
                                         const pkv_search_plan *p, cl_mem ws,
                                         pkv_search_kernels *k) {
    clkv_defs defs;
    clkv__defs_init(&defs);
    clkv__defs_int(&defs, "SUB_M", p->m);
    clkv__defs_int(&defs, "NBLK", p->nblk);
    clkv__defs_int(&defs, "WG", p->wg);
    clkv__defs_int(&defs, "PER_ITEM", p->per_item);
    clkv__defs_int(&defs, "IDS_U32", clkv__rows_aligned(&a->ids, 4) && p->nblk % 4 == 0);
    clkv__defs_int(&defs, "S_WIDE", p->s_wide);
    clkv__defs_int(&defs, "SUFFIX", !p->legacy);
    clkv__defs_int(&defs, "FUSED_THR", p->fused_thr);
    clkv__defs_int(&defs, "COLLIDE_V", p->collide_v);
    clkv__defs_int(&defs, "IDS_VEC16", p->ids_vec16);
    if (p->cv_tok_max)
        clkv__defs_int(&defs, "CV_TOK_MAX", p->cv_tok_max);
    clkv__defs_int(&defs, "PKC_WSCAN", !p->legacy && clkv__env_int("CLKV_PARISKV_WSCAN", 1));
    /* pkv_rank with the query transform: its own program (the other kernels do not
     * depend on the query's dtype or D) */
    clkv_defs rdefs = defs;
    if (p->q_raw) {
        clkv__defs_int(&rdefs, "RANK_QT", 1);
        clkv__defs_int(&rdefs, "HEAD_DIM", p->D);
        clkv__defs_int(&rdefs, "IN_DTYPE", p->q_raw->dtype);
    }
    cl_kernel kr, kc, kt = NULL, kp;
    clkv_status st;
    k->rank = k->collide = k->threshold = k->compact = NULL;
    if ((st = clkv__get_kernel(ctx, KERNEL_FILE, &rdefs, "pkv_rank", &kr)) ||
        (st = clkv__get_kernel(ctx, KERNEL_FILE, &defs, "pkv_collide", &kc)) ||
        (!p->fused_thr && (st = clkv__get_kernel(ctx, KERNEL_FILE, &defs, "pkv_threshold", &kt))) ||
        (st = clkv__get_kernel(ctx, KERNEL_FILE, &defs, "pkv_compact", &kp)))
        return st;

    const cl_int B = (cl_int)p->B, Hkv = (cl_int)p->Hkv, zone_start = (cl_int)p->zone_start,
                 max_zone = (cl_int)p->max_zone, max_cand = (cl_int)p->max_cand,
                 nchunks = p->nchunks;
    const clkv_tensor *QR = &a->q_rot, *CN = &a->counts, *ID = &a->ids, *PL = &a->plan;
    const cl_long qr_off = clkv__elem_offset(QR), qr_sb = QR->strides[0], qr_sh = QR->strides[1];
    const cl_long c_off = clkv__elem_offset(CN), c_sb = CN->strides[0], c_sh = CN->strides[1],
                  c_sblk = CN->strides[2];
    const cl_long plan_off = clkv__elem_offset(PL);
    const cl_long bonus_off = (cl_long)p->off_bonus;
    const cl_long id_off = clkv__elem_offset(ID), id_sb = ID->strides[0], id_sh = ID->strides[1],
                  id_sl = ID->strides[2];
    /* S lives in the workspace as [B, Hkv, s_row] of 1 or 2 bytes. */
    const cl_long s_es = p->s_wide ? 2 : 1;
    const cl_long s_off = (cl_long)p->off_s / s_es, s_sh = (cl_long)p->s_row,
                  s_sb = (cl_long)(p->Hkv * p->s_row);
    const clkv_tensor *DB = &a->collide_scores;
    const cl_mem dbg = DB->buf;
    const cl_long dbg_off = dbg ? clkv__elem_offset(DB) : 0, dbg_sb = dbg ? DB->strides[0] : 0,
                  dbg_sh = dbg ? DB->strides[1] : 0;
    const cl_int has_dbg = dbg != NULL;
    const cl_long ch_off = (cl_long)(p->off_hist / 4), ci_off = (cl_long)(p->off_cinfo / 4),
                  rh_off = (cl_long)(p->off_rowhist / 4);
    /* Candidates: the caller's tensor or the workspace [B, Hkv, max_cand]. */
    const cl_mem cand = a->candidates.buf ? a->candidates.buf : ws;
    const cl_long cd_off =
        a->candidates.buf ? clkv__elem_offset(&a->candidates) : (cl_long)(p->off_cand / 4);
    const cl_long cd_sb = a->candidates.buf ? a->candidates.strides[0] : p->Hkv * p->max_cand;
    const cl_long cd_sh = a->candidates.buf ? a->candidates.strides[1] : p->max_cand;
    const cl_int fill_cand = a->candidates.buf ? (cl_int)a->candidates.dims[2] : 0;
    /* Stage II's per-row score histogram and counters (zeroed by pkv_threshold). */
    const cl_long kh_off = (cl_long)(p->off_khist / 4);
    const cl_int kh_len = PKV_KHIST_WORDS;

    if ((st = clkv__set_args(ctx, kr, "pkv_rank", 20, CLKV_ARG(QR->buf), CLKV_ARG(qr_off),
                             CLKV_ARG(qr_sb), CLKV_ARG(qr_sh), CLKV_ARG(CN->buf), CLKV_ARG(c_off),
                             CLKV_ARG(c_sb), CLKV_ARG(c_sh), CLKV_ARG(c_sblk), CLKV_ARG(PL->buf),
                             CLKV_ARG(plan_off), CLKV_ARG(B), CLKV_ARG(Hkv), CLKV_ARG(ws),
                             CLKV_ARG(bonus_off), CLKV_ARG(ws), CLKV_ARG(rh_off), CLKV_ARG(ws),
                             CLKV_ARG(kh_off), CLKV_ARG(kh_len))) ||
        (p->q_raw && (st = set_rank_query_args(ctx, kr, a, p))) ||
        (st = clkv__set_args(
             ctx, kc, "pkv_collide", 26, CLKV_ARG(ID->buf), CLKV_ARG(id_off), CLKV_ARG(id_sb),
             CLKV_ARG(id_sh), CLKV_ARG(id_sl), CLKV_ARG(PL->buf), CLKV_ARG(plan_off), CLKV_ARG(B),
             CLKV_ARG(zone_start), CLKV_ARG(max_zone), CLKV_ARG(ws), CLKV_ARG(bonus_off),
             CLKV_ARG(ws), CLKV_ARG(s_off), CLKV_ARG(s_sb), CLKV_ARG(s_sh), CLKV_ARG(dbg),
             CLKV_ARG(dbg_off), CLKV_ARG(dbg_sb), CLKV_ARG(dbg_sh), CLKV_ARG(has_dbg), CLKV_ARG(ws),
             CLKV_ARG(ch_off), CLKV_ARG(nchunks), CLKV_ARG(ws), CLKV_ARG(rh_off))) ||
        (kt && (st = clkv__set_args(
                    ctx, kt, "pkv_threshold", 20, CLKV_ARG(ws), CLKV_ARG(ch_off), CLKV_ARG(nchunks),
                    CLKV_ARG(ws), CLKV_ARG(rh_off), CLKV_ARG(PL->buf), CLKV_ARG(plan_off),
                    CLKV_ARG(B), CLKV_ARG(Hkv), CLKV_ARG(max_cand), CLKV_ARG(ws), CLKV_ARG(ci_off),
                    CLKV_ARG(cand), CLKV_ARG(cd_off), CLKV_ARG(cd_sb), CLKV_ARG(cd_sh),
                    CLKV_ARG(fill_cand), CLKV_ARG(ws), CLKV_ARG(kh_off), CLKV_ARG(kh_len)))) ||
        (st = clkv__set_args(
             ctx, kp, "pkv_compact", 22, CLKV_ARG(ws), CLKV_ARG(s_off), CLKV_ARG(s_sb),
             CLKV_ARG(s_sh), CLKV_ARG(PL->buf), CLKV_ARG(plan_off), CLKV_ARG(zone_start),
             CLKV_ARG(max_zone), CLKV_ARG(ws), CLKV_ARG(ci_off), CLKV_ARG(nchunks), CLKV_ARG(cand),
             CLKV_ARG(cd_off), CLKV_ARG(cd_sb), CLKV_ARG(cd_sh), CLKV_ARG(ws), CLKV_ARG(ch_off),
             CLKV_ARG(ws), CLKV_ARG(rh_off), CLKV_ARG(B), CLKV_ARG(max_cand), CLKV_ARG(fill_cand))))
        return st;
    if ((st = clkv__check_local_mem(ctx, kr, "pkv_rank", 0)) ||
        (st = clkv__check_local_mem(ctx, kc, "pkv_collide", 0)) ||
        (kt && (st = clkv__check_local_mem(ctx, kt, "pkv_threshold", 0))) ||
        (st = clkv__check_local_mem(ctx, kp, "pkv_compact", 0)))
        return st;
    k->rank = kr;
    k->collide = kc;
    k->threshold = kt;
    k->compact = kp;
    return CLKV_OK;
}

clkv_status clkv__pariskv_stage1_enqueue(clkv_context *ctx, const pkv_search_plan *p,
                                         const pkv_search_kernels *k, cl_event *ev) {
    clkv_status st;
    const size_t g_rank[3] = {(size_t)p->nc, (size_t)p->nblk, (size_t)(p->B * p->Hkv)};
    const size_t l_rank[3] = {(size_t)p->nc, 1, 1};
    const size_t g_chunk[3] = {(size_t)p->nchunks * (size_t)p->wg, (size_t)p->Hkv, (size_t)p->B};
    const size_t l_wg[3] = {(size_t)p->wg, 1, 1};
    const size_t g_thr[2] = {(size_t)p->wg, (size_t)(p->B * p->Hkv)};
    clkv__log(ctx,
              "pariskv stage1: B=%lld Hkv=%lld nblk=%lld m=%d zone=[%lld,+%lld) cand<=%lld "
              "chunks=%d wg=%d per_item=%d legacy=%d fused_thr=%d collide_v=%d vec16=%d tok_max=%d",
              (long long)p->B, (long long)p->Hkv, (long long)p->nblk, p->m,
              (long long)p->zone_start, (long long)p->max_zone, (long long)p->max_cand, p->nchunks,
              p->wg, p->per_item, p->legacy, p->fused_thr, p->collide_v, p->ids_vec16,
              p->cv_tok_max);
    if ((st = clkv__enqueue(ctx, k->rank, "pkv_rank", 3, g_rank, l_rank, ev ? &ev[0] : NULL)) ||
        (st = clkv__enqueue(ctx, k->collide, "pkv_collide", 3, g_chunk, l_wg, ev ? &ev[1] : NULL)))
        return st;
    /* The threshold kernel (chunk bases, -1 fill), then the compaction when there are
     * candidates; fused: the compaction finds its own threshold and base (and fills the
     * -1 tail), so it always runs. */
    if (!p->fused_thr && (st = clkv__enqueue(ctx, k->threshold, "pkv_threshold", 2, g_thr, l_wg,
                                             ev ? &ev[2] : NULL)))
        return st;
    if (p->max_cand > 0 || p->fused_thr)
        st = clkv__enqueue(ctx, k->compact, "pkv_compact", 3, g_chunk, l_wg, ev ? &ev[3] : NULL);
    return st;
}
