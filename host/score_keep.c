/* clkv_keep_set: the selection with per-row keep counts computed on the device (inside
 * the selection kernels; with the CriticalKV first stage, by keep_counts beforehand,
 * cl_kernels/score_keep.cl). */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "clkv/score.h"
#include "clkv/select.h"
#include "host/select_internal.h"
#include "runtime/internal.h"

#define KEEP_WG 64

int64_t clkv_keep_count(int64_t n, double ratio, int64_t budget, int64_t window) {
    if (n <= 0)
        return 0;
    int64_t k = budget >= 0 ? budget : (int64_t)(ratio * (double)n);
    if (k < window)
        k = window;
    if (k < 1)
        k = 1;
    return k < n ? k : n;
}

typedef struct keep_plan {
    int64_t B, H, N;
    int max_len;
    int64_t kmax, k1max;
    int two_stage;
    size_t sel_bytes; /* the selection's own workspace, at offset 0 */
    size_t krow_bytes, k1_bytes, idx1_bytes, dense_bytes;
} keep_plan;

static clkv_status validate(clkv_context *ctx, const clkv_keep_set_args *a, keep_plan *p) {
    clkv_status st;
    const uint32_t i32 = CLKV_DTYPE_BIT(CLKV_I32);
    if ((st = clkv__check_tensor(ctx, &a->scores, "scores", 3, CLKV_DTYPE_BIT(CLKV_F32))) ||
        (st = clkv__check_tensor(ctx, &a->indices, "indices", 3, i32)) ||
        (st = clkv__check_optional_tensor(ctx, &a->pbar, "pbar", 3, CLKV_DTYPE_BIT(CLKV_F32))) ||
        (st = clkv__check_optional_tensor(ctx, &a->lengths, "lengths", 1, i32)) ||
        (st = clkv__check_optional_tensor(ctx, &a->counts, "counts", 2, i32)))
        return st;
    const int64_t B = a->scores.dims[0], H = a->scores.dims[1], N = a->scores.dims[2];
    if (a->pbar.buf)
        for (int i = 0; i < 3; i++)
            if ((st = clkv__check_dim(ctx, &a->pbar, "pbar", i, a->scores.dims[i],
                                      "must match scores")))
                return st;
    if (!isfinite(a->ratio) || a->ratio < 0.0 || a->ratio > 1.0)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "ratio: %g is outside [0, 1]", a->ratio);
    if (!isfinite(a->first_stage_ratio) || a->first_stage_ratio < 0.0 || a->first_stage_ratio > 1.0)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "first_stage_ratio: %g is outside [0, 1]",
                          a->first_stage_ratio);
    if (a->window < 0)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "window: %lld is negative",
                          (long long)a->window);
    if (a->max_length < -1 || a->max_length > N)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "max_length: %lld is outside [-1, N = %lld]",
                          (long long)a->max_length, (long long)N);
    if (N > INT32_MAX || B > 65535 || H > 65535)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE,
                          "scores: N = %lld, B = %lld or H = %lld beyond 2^31-1 / 65535",
                          (long long)N, (long long)B, (long long)H);
    memset(p, 0, sizeof *p);
    p->B = B;
    p->H = H;
    p->N = N;
    p->max_len = (int)(a->max_length < 0 ? N : a->max_length);
    /* keep is nondecreasing in n, so the longest sequence bounds every row */
    p->kmax = clkv_keep_count(p->max_len, a->ratio, a->budget, a->window);
    if (a->indices.dims[2] < p->kmax)
        return clkv__fail(ctx, CLKV_ERR_ARG_SHAPE,
                          "indices: dims[2] = %lld, but a sequence of max_length = %d tokens "
                          "keeps %lld",
                          (long long)a->indices.dims[2], p->max_len, (long long)p->kmax);
    p->two_stage = a->pbar.buf != NULL;
    p->k1max = p->two_stage ? (int64_t)((double)p->kmax * a->first_stage_ratio) : 0;
    if (p->k1max > p->kmax)
        p->k1max = p->kmax;
    const size_t rows = (size_t)(B * H);
    p->krow_bytes = clkv__ws_align(rows * 4);
    p->k1_bytes = p->two_stage ? clkv__ws_align(rows * 4) : 0;
    p->idx1_bytes = p->two_stage ? clkv__ws_align(rows * (size_t)(p->k1max ? p->k1max : 1) * 4) : 0;
    p->dense_bytes = p->two_stage ? clkv__ws_align(rows * (size_t)(N ? N : 1) * 4) : 0;

    /* The selections' own workspace need (validates their shapes too). */
    clkv_select_topk_args s = CLKV_SELECT_TOPK_ARGS_INIT;
    s.scores = a->scores;
    s.lengths = a->lengths;
    s.indices = a->indices;
    s.counts = a->counts;
    s.max_length = a->max_length;
    s.k = a->indices.dims[2];
    size_t need = 0;
    if ((st = clkv_select_topk_workspace_size(ctx, &s, &need)))
        return st;
    if (p->two_stage && p->k1max > 0) {
        size_t need1 = 0;
        s.scores = a->pbar;
        s.counts = clkv_tensor_none();
        s.indices.dims[2] = p->k1max; /* a smaller view of the caller's buffer: sizes only */
        s.k = p->k1max;
        if ((st = clkv_select_topk_workspace_size(ctx, &s, &need1)))
            return st;
        if (need1 > need)
            need = need1;
    }
    p->sel_bytes = clkv__ws_align(need);
    return CLKV_OK;
}

static size_t total_bytes(const keep_plan *p) {
    return p->sel_bytes + p->krow_bytes + p->k1_bytes + p->idx1_bytes + p->dense_bytes;
}

clkv_status clkv_keep_set_workspace_size(clkv_context *ctx, const clkv_keep_set_args *args,
                                         size_t *bytes) {
    if (!ctx || !args)
        return clkv__fail_entry(ctx, args);
    keep_plan p;
    clkv_status st = validate(ctx, args, &p);
    if (st)
        return st;
    if (!bytes)
        return clkv__fail(ctx, CLKV_ERR_ARG_NULL, "bytes: output pointer is NULL");
    *bytes = (p.B * p.H) > 0 ? total_bytes(&p) : 0;
    return CLKV_OK;
}

static clkv_tensor ws_tensor(cl_mem ws, size_t byte_off, clkv_dtype dt, int ndim, int64_t d0,
                             int64_t d1, int64_t d2) {
    clkv_tensor t = ndim == 2 ? clkv_tensor_2d(ws, dt, d0, d1) : clkv_tensor_3d(ws, dt, d0, d1, d2);
    t.offset = byte_off;
    return t;
}

static cl_ulong dbits(double x) {
    cl_ulong u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* The one-stage selection's arguments (the final selection of clkv_keep_set without
 * pbar). */
static clkv_select_topk_args one_stage_args(const clkv_keep_set_args *args) {
    clkv_select_topk_args fin = CLKV_SELECT_TOPK_ARGS_INIT;
    fin.scores = args->scores;
    fin.lengths = args->lengths;
    fin.indices = args->indices;
    fin.counts = args->counts;
    fin.max_length = args->max_length;
    fin.k = args->indices.dims[2];
    return fin;
}

int clkv__keep_set_poolable(clkv_context *ctx, const clkv_keep_set_args *args) {
    if (args->pbar.buf)
        return 0;
    const clkv_select_topk_args fin = one_stage_args(args);
    return clkv__select_topk_poolable(ctx, &fin);
}

static clkv_status keep_set(clkv_context *ctx, const clkv_keep_set_args *args,
                            const clkv__select_fuse *fuse, cl_event *done) {
    if (!ctx || !args)
        return clkv__fail_entry(ctx, args);
    keep_plan p;
    clkv_status st = validate(ctx, args, &p);
    if (st)
        return st;
    if (fuse && p.two_stage)
        return clkv__fail(ctx, CLKV_ERR_ARG_UNSUPPORTED,
                          "pbar: the two-stage keep-set does not pool raw scores (internal)");
    if (p.B * p.H == 0)
        return clkv__marker(ctx, done);
    cl_kernel kc = NULL, kcopy = NULL, kboost = NULL;
    clkv_defs defs;
    clkv__defs_init(&defs);
    clkv__defs_int(&defs, "WG_SIZE", KEEP_WG);
    if (p.two_stage &&
        ((st = clkv__get_kernel(ctx, "score_keep.cl", &defs, "keep_counts", &kc)) ||
         (st = clkv__get_kernel(ctx, "score_keep.cl", &defs, "keep_copy", &kcopy)) ||
         (st = clkv__get_kernel(ctx, "score_keep.cl", &defs, "keep_boost", &kboost))))
        return st;
    cl_mem ws;
    if ((st = clkv__workspace(ctx, (fuse ? clkv__ws_align(fuse->ws_base) : 0) + total_bytes(&p),
                              &ws)))
        return st;
    const size_t krow_at = p.sel_bytes, k1_at = krow_at + p.krow_bytes,
                 idx1_at = k1_at + p.k1_bytes, dense_at = idx1_at + p.idx1_bytes;

    /* The selections, described up front and validated before anything is enqueued. */
    clkv_select_topk_args fin = CLKV_SELECT_TOPK_ARGS_INIT, first = CLKV_SELECT_TOPK_ARGS_INIT;
    fin.scores = p.two_stage ? ws_tensor(ws, dense_at, CLKV_F32, 3, p.B, p.H, p.N) : args->scores;
    fin.lengths = args->lengths;
    /* one stage: the selection computes each row's keep count itself (no keep_counts
     * launch); two stages: keep_counts writes both counts first */
    if (p.two_stage)
        fin.k_per_row = ws_tensor(ws, krow_at, CLKV_I32, 2, p.B, p.H, 0);
    fin.indices = args->indices;
    fin.counts = args->counts;
    fin.max_length = args->max_length;
    fin.k = args->indices.dims[2];
    size_t unused;
    if ((st = clkv_select_topk_workspace_size(ctx, &fin, &unused)))
        return st;
    const int stage1 = p.two_stage && p.k1max > 0;
    if (stage1) {
        first.scores = args->pbar;
        first.lengths = args->lengths;
        first.k_per_row = ws_tensor(ws, k1_at, CLKV_I32, 2, p.B, p.H, 0);
        first.indices = ws_tensor(ws, idx1_at, CLKV_I32, 3, p.B, p.H, p.k1max);
        first.max_length = args->max_length;
        first.k = p.k1max;
        if ((st = clkv_select_topk_workspace_size(ctx, &first, &unused)))
            return st;
    }

    const cl_mem len_buf = args->lengths.buf;
    const cl_long len_off = len_buf ? clkv__elem_offset(&args->lengths) : 0;
    const cl_int has_len = len_buf != NULL, max_len = p.max_len, H = (cl_int)p.H,
                 rows = (cl_int)(p.B * p.H), two = p.two_stage;
    const cl_ulong rbits = dbits(args->ratio), r1bits = dbits(args->first_stage_ratio);
    const cl_float rf = (cl_float)args->ratio, r1f = (cl_float)args->first_stage_ratio;
    const cl_long budget = args->budget < 0 ? -1 : args->budget, window = args->window,
                  krow_off = (cl_long)(krow_at / 4), k1_off = (cl_long)(k1_at / 4);
    st = !p.two_stage
             ? CLKV_OK
             : clkv__set_args(ctx, kc, "keep_counts", 16, CLKV_ARG(len_buf), CLKV_ARG(len_off),
                              CLKV_ARG(has_len), CLKV_ARG(max_len), CLKV_ARG(H), CLKV_ARG(rows),
                              CLKV_ARG(rbits), CLKV_ARG(rf), CLKV_ARG(budget), CLKV_ARG(window),
                              CLKV_ARG(r1bits), CLKV_ARG(r1f), CLKV_ARG(two), CLKV_ARG(ws),
                              CLKV_ARG(krow_off), CLKV_ARG(k1_off));
    const size_t gc[1] = {(size_t)(rows + KEEP_WG - 1) / KEEP_WG * KEEP_WG}, lc[1] = {KEEP_WG};
    if (!st && p.two_stage)
        st = clkv__launch(ctx, kc, "keep_counts", 1, gc, lc, 0, NULL);
    if (!st && p.two_stage) {
        const cl_long s_off = clkv__elem_offset(&args->scores), s_sb = args->scores.strides[0],
                      s_sh = args->scores.strides[1], d_off = (cl_long)(dense_at / 4),
                      i_off = (cl_long)(idx1_at / 4);
        const cl_int N = (cl_int)p.N, K1 = (cl_int)p.k1max;
        const size_t l3[3] = {KEEP_WG, 1, 1};
        const size_t g3[3] = {(size_t)(p.N + KEEP_WG - 1) / KEEP_WG * KEEP_WG, (size_t)p.H,
                              (size_t)p.B};
        st = clkv__set_args(ctx, kcopy, "keep_copy", 8, CLKV_ARG(args->scores.buf), CLKV_ARG(s_off),
                            CLKV_ARG(s_sb), CLKV_ARG(s_sh), CLKV_ARG(H), CLKV_ARG(N), CLKV_ARG(ws),
                            CLKV_ARG(d_off));
        if (!st && p.N > 0)
            st = clkv__launch(ctx, kcopy, "keep_copy", 3, g3, l3, 0, NULL);
        if (!st && stage1) {
            st = clkv_select_topk(ctx, &first, NULL);
            const size_t gb[3] = {(size_t)(p.k1max + KEEP_WG - 1) / KEEP_WG * KEEP_WG, (size_t)p.H,
                                  (size_t)p.B};
            if (!st)
                st = clkv__set_args(ctx, kboost, "keep_boost", 7, CLKV_ARG(ws), CLKV_ARG(i_off),
                                    CLKV_ARG(K1), CLKV_ARG(H), CLKV_ARG(N), CLKV_ARG(ws),
                                    CLKV_ARG(d_off));
            if (!st)
                st = clkv__launch(ctx, kboost, "keep_boost", 3, gb, l3, 0, NULL);
        }
    }
    const clkv__keep_rule rule = {args->ratio, args->budget, args->window};
    if (!st)
        st = clkv__select_topk_rule(ctx, &fin, p.two_stage ? NULL : &rule, fuse, done);
    return st;
}

clkv_status clkv_keep_set(clkv_context *ctx, const clkv_keep_set_args *args, cl_event *done) {
    return keep_set(ctx, args, NULL, done);
}

clkv_status clkv__keep_set_fused(clkv_context *ctx, const clkv_keep_set_args *args,
                                 const clkv__select_fuse *fuse, cl_event *done) {
    return keep_set(ctx, args, fuse, done);
}
