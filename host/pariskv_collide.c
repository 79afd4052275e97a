/* ParisKV Stage I (SPEC §4): the host-side schedule and plan (tiers, candidate counts,
 * computed in double), and the launches of centroid ranking, collision scoring with its
 * fused histogram, threshold selection and candidate compaction (cl_kernels/
 * pariskv_collide.cl). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "host/pariskv_retrieve_internal.h"
#include "cl_kernels/kernel_args.cl" /* after the OpenCL types */

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

/* pkv_rank's RANK_QT fields (the raw query, its group size, q_norm) and buffer arguments
 * 5..7: the raw query, the signs, q_norm. */
static clkv_status set_rank_query_args(clkv_context *ctx, cl_kernel kr,
                                       const clkv_pariskv_search_args *a, const pkv_search_plan *p,
                                       pkv_rank_scalars *P) {
    const clkv_tensor *Q = p->q_raw, *QN = &a->q_norm;
    P->q_off = clkv__elem_offset(Q), P->q_sb = Q->strides[0], P->q_sh = Q->strides[1];
    P->G = (cl_int)(Q->dims[1] / p->Hkv), P->has_qn = 1;
    P->qn_off = clkv__elem_offset(QN), P->qn_sb = QN->strides[0], P->qn_sh = QN->strides[1];
    return clkv__set_args_at(ctx, kr, "pkv_rank", 5, 3, CLKV_ARG(Q->buf), CLKV_ARG(p->signs),
                             CLKV_ARG(QN->buf));
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

    /* Scalars as structs (cl_kernels/kernel_args.cl says why); every workspace part is
     * addressed through the one `ws` argument. */
    const clkv_tensor *QR = &a->q_rot, *CN = &a->counts, *ID = &a->ids, *PL = &a->plan;
    const cl_long plan_off = clkv__elem_offset(PL);
    const cl_long ch_off = (cl_long)(p->off_hist / 4), rh_off = (cl_long)(p->off_rowhist / 4);
    /* Stage II's per-row score histogram and counters (zeroed by pkv_rank) */
    const cl_long kh_off = (cl_long)(p->off_khist / 4);
    /* S lives in the workspace as [B, Hkv, s_row] of 1 or 2 bytes. */
    const cl_long s_es = p->s_wide ? 2 : 1;
    const cl_long s_off = (cl_long)p->off_s / s_es, s_sh = (cl_long)p->s_row,
                  s_sb = (cl_long)(p->Hkv * p->s_row);

    pkv_rank_scalars R;
    memset(&R, 0, sizeof R);
    R.qr_off = clkv__elem_offset(QR), R.qr_sb = QR->strides[0], R.qr_sh = QR->strides[1];
    R.c_off = clkv__elem_offset(CN), R.c_sb = CN->strides[0], R.c_sh = CN->strides[1];
    R.c_sblk = CN->strides[2];
    R.plan_off = plan_off, R.bonus_off = (cl_long)p->off_bonus, R.rh_off = rh_off;
    R.kh_off = kh_off;
    R.B = (cl_int)p->B, R.Hkv = (cl_int)p->Hkv, R.kh_len = PKV_KHIST_WORDS;
    if (p->q_raw && (st = set_rank_query_args(ctx, kr, a, p, &R)))
        return st;

    const clkv_tensor *DB = &a->collide_scores;
    const cl_mem dbg = DB->buf;
    pkv_collide_scalars C;
    memset(&C, 0, sizeof C);
    C.id_off = clkv__elem_offset(ID), C.id_sb = ID->strides[0], C.id_sh = ID->strides[1];
    C.id_sl = ID->strides[2];
    C.plan_off = plan_off, C.bonus_off = (cl_long)p->off_bonus;
    C.s_off = s_off, C.s_sb = s_sb, C.s_sh = s_sh;
    if (dbg) {
        C.dbg_off = clkv__elem_offset(DB), C.dbg_sb = DB->strides[0], C.dbg_sh = DB->strides[1];
    }
    C.ch_off = ch_off, C.rh_off = rh_off;
    C.B = (cl_int)p->B, C.zone_start = (cl_int)p->zone_start, C.max_zone = (cl_int)p->max_zone;
    C.has_dbg = dbg != NULL, C.nchunks = p->nchunks;

    /* Candidates: the caller's tensor or the workspace [B, Hkv, max_cand]. */
    const cl_mem cand = a->candidates.buf ? a->candidates.buf : ws;
    pkv_select_scalars S;
    memset(&S, 0, sizeof S);
    S.ch_off = ch_off, S.rh_off = rh_off, S.plan_off = plan_off;
    S.ci_off = (cl_long)(p->off_cinfo / 4);
    if (a->candidates.buf) {
        S.cd_off = clkv__elem_offset(&a->candidates), S.cd_sb = a->candidates.strides[0];
        S.cd_sh = a->candidates.strides[1], S.fill_cand = (cl_int)a->candidates.dims[2];
    } else {
        S.cd_off = (cl_long)(p->off_cand / 4), S.cd_sb = p->Hkv * p->max_cand;
        S.cd_sh = p->max_cand;
    }
    S.s_off = s_off, S.s_sb = s_sb, S.s_sh = s_sh;
    S.nchunks = p->nchunks, S.B = (cl_int)p->B, S.Hkv = (cl_int)p->Hkv;
    S.max_cand = (cl_int)p->max_cand;
    S.zone_start = (cl_int)p->zone_start, S.max_zone = (cl_int)p->max_zone;

    if ((st = clkv__set_args(ctx, kr, "pkv_rank", 5, CLKV_ARG(QR->buf), CLKV_ARG(CN->buf),
                             CLKV_ARG(PL->buf), CLKV_ARG(ws), CLKV_ARG(R))) ||
        (st = clkv__set_args(ctx, kc, "pkv_collide", 5, CLKV_ARG(ID->buf), CLKV_ARG(PL->buf),
                             CLKV_ARG(ws), CLKV_ARG(dbg), CLKV_ARG(C))) ||
        (kt && (st = clkv__set_args(ctx, kt, "pkv_threshold", 4, CLKV_ARG(ws), CLKV_ARG(PL->buf),
                                    CLKV_ARG(cand), CLKV_ARG(S)))) ||
        (st = clkv__set_args(ctx, kp, "pkv_compact", 4, CLKV_ARG(ws), CLKV_ARG(PL->buf),
                             CLKV_ARG(cand), CLKV_ARG(S))))
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
