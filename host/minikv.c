/* MiniKV two-pass prefill with selection (include/clkv/minikv.h): pass 1
 * clkv_attention_window (T = the prompt), pass 2 clkv_score H2O (column sums recomputing
 * the logits from LSE), then minikv_select_prep + clkv_select_topk. Intermediates live in
 * one workspace region above the region the steps use themselves. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "clkv/attention.h"
#include "clkv/budget.h"
#include "clkv/minikv.h"
#include "clkv/score.h"
#include "clkv/select.h"
#include "runtime/internal.h"

#define KERNEL_FILE "minikv_select.cl"
#define PREP_WG 256

/* ratio in [0, 1] -> round(ratio * 2^24) (the budget fraction's fixed-point form). */
static uint64_t ratio_fixed(double ratio) {
    return (uint64_t)llround(ratio * 16777216.0);
}

static int64_t frac_of(int64_t n, uint64_t r) {
    return (int64_t)(((uint64_t)n * r) >> 24);
}

static int ratio_ok(double r) {
    return isfinite(r) && r >= 0.0 && r <= 1.0;
}

int64_t clkv_minikv_budget(int64_t n, double heavy_ratio, double recent_ratio, int64_t heavy_budget,
                           int64_t *heavy, int64_t *recent) {
    if (n < 0 || n > INT32_MAX || !ratio_ok(heavy_ratio) || !ratio_ok(recent_ratio) ||
        heavy_budget < -1)
        return -1;
    int64_t r = frac_of(n, ratio_fixed(recent_ratio));
    int64_t h = heavy_budget >= 0 ? heavy_budget : frac_of(n, ratio_fixed(heavy_ratio));
    if (h > n - r)
        h = n - r;
    if (n >= 1 && h + r == 0)
        r = 1;
    if (heavy)
        *heavy = h;
    if (recent)
        *recent = r;
    return h + r;
}

clkv_status clkv_minikv_pyramid_budgets(int64_t num_layers, int64_t n, double heavy_ratio,
                                        int64_t beta, int64_t *out) {
    if (!out)
        return clkv__fail(NULL, CLKV_ERR_ARG_NULL, "out: output array is NULL");
    if (n < 0 || n > INT32_MAX)
        return clkv__fail(NULL, CLKV_ERR_ARG_RANGE, "n: %lld is outside [0, 2^31-1]", (long long)n);
    if (!ratio_ok(heavy_ratio))
        return clkv__fail(NULL, CLKV_ERR_ARG_RANGE, "heavy_ratio: %g is not in [0, 1]",
                          heavy_ratio);
    return clkv_budget_pyramid(num_layers, frac_of(n, ratio_fixed(heavy_ratio)), beta, out);
}

/* ---- prefill ---- */

typedef struct prefill_steps {
    clkv_attention_window_args att;
    clkv_score_args score;
    clkv_select_topk_args topk;
    clkv_tensor a_cumul; /* caller's or workspace */
    clkv_tensor sel;     /* [B, Hkv, max(max_len, 1)] f32, workspace */
    clkv_tensor kpr;     /* [B, Hkv] i32, workspace */
    int64_t max_len;
    int select;
    size_t inter_bytes;
} prefill_steps;

static clkv_tensor ws_view(cl_mem ws, size_t off, clkv_dtype dt, int ndim, const int64_t *dims) {
    clkv_tensor t = {0};
    t.buf = ws;
    t.offset = off;
    t.dtype = dt;
    t.ndim = ndim;
    int64_t stride = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        t.dims[i] = dims[i];
        t.strides[i] = stride;
        stride *= dims[i];
    }
    return t;
}

/* The step arguments with the intermediates at [base, base + inter_bytes) of ws. */
static void build_steps(const clkv_minikv_prefill_args *a, cl_mem ws, size_t base,
                        prefill_steps *s) {
    memset(s, 0, sizeof *s);
    const int64_t B = a->k.dims[0], Hkv = a->k.dims[1], L = a->k.dims[2];
    const int64_t Hq = a->q.dims[1], T = a->q.dims[2];
    s->max_len = a->max_length < 0 ? T : a->max_length;
    s->select = a->indices.buf != NULL;
    size_t off = base;

    s->att = (clkv_attention_window_args)CLKV_ATTENTION_WINDOW_ARGS_INIT;
    s->att.q = a->q;
    s->att.k = a->k;
    s->att.v = a->v;
    s->att.lengths = a->lengths;
    s->att.o = a->o;
    s->att.lse = a->lse;
    s->att.max_length = s->max_len;
    s->att.scale = a->scale;
    if (!a->lse.buf) {
        const int64_t d[3] = {B, Hq, T};
        s->att.lse = ws_view(ws, off, CLKV_F32, 3, d);
        off += clkv__ws_align((size_t)(B * Hq * T) * 4);
    }

    s->a_cumul = a->a_cumul;
    if (!a->a_cumul.buf) {
        const int64_t d[3] = {B, Hkv, L};
        s->a_cumul = ws_view(ws, off, CLKV_F32, 3, d);
        off += clkv__ws_align((size_t)(B * Hkv * L) * 4);
    }
    s->score = (clkv_score_args)CLKV_SCORE_ARGS_INIT;
    s->score.method = CLKV_SCORE_H2O;
    s->score.q = a->q;
    s->score.k = a->k;
    s->score.lengths = a->lengths;
    s->score.lse = s->att.lse;
    s->score.scores = s->a_cumul;
    s->score.max_length = s->max_len;
    s->score.scale = a->scale;
    s->score.pool = CLKV_POOL_NONE;
    s->score.protect = 0;

    if (s->select) {
        const int64_t row = s->max_len > 0 ? s->max_len : 1;
        const int64_t sd[3] = {B, Hkv, row}, kd[2] = {B, Hkv};
        s->sel = ws_view(ws, off, CLKV_F32, 3, sd);
        off += clkv__ws_align((size_t)(B * Hkv * row) * 4);
        s->kpr = ws_view(ws, off, CLKV_I32, 2, kd);
        off += clkv__ws_align((size_t)(B * Hkv) * 4);
        s->topk = (clkv_select_topk_args)CLKV_SELECT_TOPK_ARGS_INIT;
        s->topk.scores = s->sel;
        s->topk.lengths = a->lengths;
        s->topk.k_per_row = s->kpr;
        s->topk.indices = a->indices;
        s->topk.max_length = s->max_len;
        s->topk.k = a->indices.dims[2];
        s->topk.largest = 1;
    }
    s->inter_bytes = off - base;
}

/* The caller-facing checks the steps do not make (or would name differently). */
static clkv_status check_own(clkv_context *ctx, const clkv_minikv_prefill_args *a) {
    clkv_status st;
    if ((st = clkv__check_tensor(ctx, &a->q, "q", 4, CLKV_FLOAT_DTYPES)) ||
        (st = clkv__check_tensor(ctx, &a->k, "k", 4, CLKV_FLOAT_DTYPES)) ||
        (st = clkv__check_tensor(ctx, &a->v, "v", 4, CLKV_FLOAT_DTYPES)) ||
        (st = clkv__check_tensor(ctx, &a->o, "o", 4, CLKV_FLOAT_DTYPES)))
        return st;
    const int64_t B = a->k.dims[0], Hkv = a->k.dims[1], L = a->k.dims[2], T = a->q.dims[2];
    if (!ratio_ok(a->heavy_ratio))
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "heavy_ratio: %g is not in [0, 1]",
                          a->heavy_ratio);
    if (!ratio_ok(a->recent_ratio))
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "recent_ratio: %g is not in [0, 1]",
                          a->recent_ratio);
    if (a->heavy_budget < -1 || a->heavy_budget > INT32_MAX)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE,
                          "heavy_budget: %lld is outside [-1, 2^31-1] (-1: heavy_ratio)",
                          (long long)a->heavy_budget);
    if (a->max_length < -1 || a->max_length > L)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "max_length: %lld is outside [-1, L = %lld]",
                          (long long)a->max_length, (long long)L);
    const int64_t max_len = a->max_length < 0 ? T : a->max_length;
    if (max_len > T)
        return clkv__fail(ctx, CLKV_ERR_ARG_SHAPE,
                          "max_length: %lld exceeds the T = %lld query rows of q (every prompt "
                          "query must be present)",
                          (long long)max_len, (long long)T);
    if (max_len > L)
        return clkv__fail(ctx, CLKV_ERR_ARG_SHAPE,
                          "k: dims[2] = %lld, expected >= %lld (max_length)", (long long)L,
                          (long long)max_len);
    if (max_len > INT32_MAX)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "max_length: %lld exceeds 2^31-1",
                          (long long)max_len);
    if ((st =
             clkv__check_optional_tensor(ctx, &a->a_cumul, "a_cumul", 3, CLKV_DTYPE_BIT(CLKV_F32))))
        return st;
    if (a->a_cumul.buf &&
        ((st = clkv__check_dim(ctx, &a->a_cumul, "a_cumul", 0, B, "B of k")) ||
         (st = clkv__check_dim(ctx, &a->a_cumul, "a_cumul", 1, Hkv, "Hkv of k")) ||
         (st = clkv__check_dim(ctx, &a->a_cumul, "a_cumul", 2, L, "L of k"))))
        return st;
    if ((st = clkv__check_optional_tensor(ctx, &a->indices, "indices", 3,
                                          CLKV_DTYPE_BIT(CLKV_I32))) ||
        (st = clkv__check_optional_tensor(ctx, &a->counts, "counts", 1, CLKV_DTYPE_BIT(CLKV_I32))))
        return st;
    if (a->counts.buf && !a->indices.buf)
        return clkv__fail(ctx, CLKV_ERR_ARG_SHAPE,
                          "counts: given without indices (the selection is off)");
    if (a->indices.buf) {
        const int64_t need = clkv_minikv_budget(max_len, a->heavy_ratio, a->recent_ratio,
                                                a->heavy_budget, NULL, NULL);
        if ((st = clkv__check_dim(ctx, &a->indices, "indices", 0, B, "B of k")) ||
            (st = clkv__check_dim(ctx, &a->indices, "indices", 1, Hkv, "Hkv of k")))
            return st;
        if (a->indices.dims[2] < need)
            return clkv__fail(ctx, CLKV_ERR_ARG_SHAPE,
                              "indices: dims[2] = %lld, but a sequence of max_length = %lld "
                              "tokens keeps %lld (clkv_minikv_budget)",
                              (long long)a->indices.dims[2], (long long)max_len, (long long)need);
        if (a->counts.buf && (st = clkv__check_dim(ctx, &a->counts, "counts", 0, B, "B of k")))
            return st;
        if (a->counts.buf && a->counts.buf == a->indices.buf)
            return clkv__fail(ctx, CLKV_ERR_ARG_UNSUPPORTED,
                              "counts: shares its buffer with indices");
    }
    return CLKV_OK;
}

static clkv_status steps_ws(clkv_context *ctx, const prefill_steps *s, size_t *need) {
    clkv_status st;
    size_t b = 0, m = 0;
    if ((st = clkv_attention_window_workspace_size(ctx, &s->att, &b)))
        return st;
    m = b > m ? b : m;
    if ((st = clkv_score_workspace_size(ctx, &s->score, &b)))
        return st;
    m = b > m ? b : m;
    if (s->select) {
        if ((st = clkv_select_topk_workspace_size(ctx, &s->topk, &b)))
            return st;
        m = b > m ? b : m;
    }
    *need = m;
    return CLKV_OK;
}

/* Validate everything and lay out the workspace (allocation only, nothing enqueued). */
static clkv_status plan(clkv_context *ctx, const clkv_minikv_prefill_args *a, prefill_steps *s,
                        size_t *total) {
    clkv_status st;
    if ((st = check_own(ctx, a)))
        return st;
    cl_mem ws;
    build_steps(a, NULL, 0, s);
    if ((st = clkv__workspace(ctx, s->inter_bytes, &ws)))
        return st;
    build_steps(a, ws, 0, s);
    size_t need = 0;
    if ((st = steps_ws(ctx, s, &need)))
        return st;
    const size_t region0 = clkv__ws_align(need);
    *total = region0 + s->inter_bytes;
    if ((st = clkv__workspace(ctx, *total, &ws)))
        return st;
    build_steps(a, ws, region0, s);
    return steps_ws(ctx, s, &need); /* final descriptors validated again */
}

clkv_status clkv_minikv_prefill_workspace_size(clkv_context *ctx,
                                               const clkv_minikv_prefill_args *args,
                                               size_t *bytes) {
    if (!ctx || !args || !bytes)
        return clkv__fail_ws_entry(ctx, args, bytes);
    prefill_steps s;
    size_t total = 0;
    clkv_status st = plan(ctx, args, &s, &total);
    if (st == CLKV_OK)
        *bytes = total;
    return st;
}

static clkv_status get_prep(clkv_context *ctx, cl_kernel *kn) {
    clkv_defs defs;
    clkv__defs_init(&defs);
    return clkv__get_kernel(ctx, KERNEL_FILE, &defs, "minikv_select_prep", kn);
}

static clkv_status launch_prep(clkv_context *ctx, cl_kernel kn, const clkv_minikv_prefill_args *a,
                               const prefill_steps *s) {
    clkv_status st;
    const int64_t B = a->k.dims[0], Hkv = a->k.dims[1];
    const cl_long a_off = clkv__elem_offset(&s->a_cumul), a_sb = s->a_cumul.strides[0],
                  a_sh = s->a_cumul.strides[1];
    const cl_mem len_buf = a->lengths.buf ? a->lengths.buf : s->kpr.buf; /* unread if absent */
    const cl_long len_off = a->lengths.buf ? clkv__elem_offset(&a->lengths) : 0;
    const cl_int has_len = a->lengths.buf != NULL, max_len = (cl_int)s->max_len, Hc = (cl_int)Hkv,
                 has_counts = a->counts.buf != NULL;
    const cl_ulong r_heavy = ratio_fixed(a->heavy_ratio), r_recent = ratio_fixed(a->recent_ratio);
    const cl_long hb = a->heavy_budget;
    const cl_long sel_off = clkv__elem_offset(&s->sel), sel_row = s->sel.strides[1];
    const cl_mem c_buf = a->counts.buf ? a->counts.buf : s->kpr.buf;
    const cl_long c_off = a->counts.buf ? clkv__elem_offset(&a->counts) : 0;
    const cl_long kpr_off = clkv__elem_offset(&s->kpr);
    st = clkv__set_args(ctx, kn, "minikv_select_prep", 20, CLKV_ARG(s->a_cumul.buf),
                        CLKV_ARG(a_off), CLKV_ARG(a_sb), CLKV_ARG(a_sh), CLKV_ARG(len_buf),
                        CLKV_ARG(len_off), CLKV_ARG(has_len), CLKV_ARG(max_len), CLKV_ARG(Hc),
                        CLKV_ARG(r_heavy), CLKV_ARG(r_recent), CLKV_ARG(hb), CLKV_ARG(s->sel.buf),
                        CLKV_ARG(sel_off), CLKV_ARG(sel_row), CLKV_ARG(s->kpr.buf),
                        CLKV_ARG(kpr_off), CLKV_ARG(c_buf), CLKV_ARG(c_off), CLKV_ARG(has_counts));
    if (st != CLKV_OK)
        return st;
    const size_t n = (size_t)(s->max_len > 0 ? s->max_len : 1);
    const size_t g[3] = {(n + PREP_WG - 1) / PREP_WG * PREP_WG, (size_t)Hkv, (size_t)B};
    const size_t l[3] = {PREP_WG, 1, 1};
    return clkv__launch(ctx, kn, "minikv_select_prep", 3, g, l, 0, NULL);
}

clkv_status clkv_minikv_prefill(clkv_context *ctx, const clkv_minikv_prefill_args *args,
                                cl_event *done) {
    if (!ctx || !args)
        return clkv__fail_entry(ctx, args);
    prefill_steps s;
    size_t total = 0;
    clkv_status st = plan(ctx, args, &s, &total);
    if (st)
        return st;
    if (args->k.dims[0] == 0 || args->k.dims[1] == 0)
        return clkv__marker(ctx, done);
    /* the selection kernel is built before anything is enqueued */
    cl_kernel prep = NULL;
    if (s.select && (st = get_prep(ctx, &prep)))
        return st;
    if ((st = clkv_attention_window(ctx, &s.att, NULL)))
        return st;
    if ((st = clkv_score(ctx, &s.score, s.select ? NULL : done)))
        return st;
    if (!s.select)
        return CLKV_OK;
    if ((st = launch_prep(ctx, prep, args, &s)))
        return st;
    return clkv_select_topk(ctx, &s.topk, done);
}
