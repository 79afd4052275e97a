/* clkv_evict_keep_set (window attention + scorer + keep-set in one call) on the default
 * device. Each case runs the same eviction step twice: once through the composite call
 * (intermediates in the context workspace) and once step by step with caller-owned
 * buffers (clkv_attention_window -> clkv_score -> clkv_keep_set). The kernels and
 * launch geometry are the same, so kept indices, counts and the optional scores/pbar
 * outputs must agree exactly: this checks the workspace layout of the composite call
 * (no intermediate overwritten by a step's own scratch). The steps themselves are checked
 * against the double references in test_score.c (including score -> keep-set against
 * the reference scores with the SPEC §0.2 set rule) and test_attention_window.c; the
 * counts here are checked against the keep formula. The "fused" cases force the chunked
 * selection, where the composite call pools the raw scores inside the keep-set's first
 * kernel instead of score_finalize: same scores bit for bit, same selection.
 */
#include "util/test_util.h"
#include "ref/ref_attention.h"
#include "ref/ref_score.h"
#include "ref/ref_select.h"

#include "clkv/score.h"
#include "host/select_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_SEED 0xE71C7E71C7ull

static clkv_context *g_ctx;

typedef struct ecase {
    const char *name;
    const char *method; /* by name */
    int64_t B, Hq, Hkv, D, W, L;
    clkv_dtype dt;
    int32_t lens[2];
    double ratio;
    int64_t budget;
    int want_scores; /* scores (and pbar) as caller outputs */
    int chunked;     /* the chunked selection (2048-token chunks): the composite call pools
                      * the raw scores in the keep-set's first kernel (fused path) */
    int64_t max_len; /* max_length, 0: default (L) */
} ecase;

/* clang-format off */
static const ecase g_cases[] = {
    {"evict_dropkv_bf16_h8x2_len500_77", "dropkv", 2, 8, 2, 64, 8, 500, CLKV_BF16, {500, 77}, 0.1, -1, 1, 0, 0},
    {"evict_snapkv_f16_h14x2_w16_len4101_16", "snapkv", 2, 14, 2, 128, 16, 4101, CLKV_F16, {4101, 16}, 0.2, -1, 0, 0, 0},
    {"evict_andpro_f32_h8x8_budget40", "andpro", 1, 8, 8, 64, 8, 300, CLKV_F32, {300}, 0.1, 40, 0, 0, 0},
    {"evict_criticalkv_bf16_two_stage", "criticalkv", 2, 8, 2, 64, 8, 400, CLKV_BF16, {400, 9}, 0.25, -1, 1, 0, 0},
    {"evict_diffkv_bf16_w64", "diffkv", 1, 8, 2, 128, 64, 700, CLKV_BF16, {700}, 0.3, -1, 0, 0, 0},
    {"evict_h2o_f32_T200", "h2o", 2, 4, 2, 64, 200, 200, CLKV_F32, {200, 120}, 0.25, -1, 1, 0, 0},
    {"evict_knorm_bf16", "knorm", 2, 8, 8, 128, 0, 1000, CLKV_BF16, {1000, 1}, 0.1, -1, 0, 0, 0},
    {"evict_keydiff_f16", "keydiff", 1, 2, 2, 64, 0, 600, CLKV_F16, {600}, 0.1, -1, 1, 0, 0},
    {"evict_streamingllm", "streamingllm", 2, 2, 2, 64, 0, 100, CLKV_F32, {100, 30}, 0.2, -1, 0, 0, 0},
    {"evict_dropkv_bf16_fused_len4101_77", "dropkv", 2, 8, 2, 64, 8, 4101, CLKV_BF16, {4101, 77}, 0.1, -1, 1, 1, 0},
    {"evict_snapkv_f16_fused_maxlen3000", "snapkv", 2, 8, 2, 128, 16, 4101, CLKV_F16, {2999, 16}, 0.2, -1, 1, 1, 3000},
    {"evict_knorm_f32_fused_budget", "knorm", 1, 2, 2, 64, 0, 3000, CLKV_F32, {3000}, 0.1, 700, 0, 1, 0},
};
/* clang-format on */

static void run_case(void **state) {
    const ecase *c = (const ecase *)*state;
    tu_set_case("%s", c->name);
    clkv_score_method m;
    TU_CHECK_OK(NULL, clkv_score_method_from_name(c->method, &m));
    const int win = clkv_score_method_uses_window(m);
    const int64_t B = c->B, Hq = win ? c->Hq : c->Hkv, Hkv = c->Hkv, D = c->D, L = c->L;
    const int64_t W = win ? c->W : 1;
    tu_rng rng;
    tu_rng_seed(&rng, tu_seed(DEFAULT_SEED), (uint64_t)(c - g_cases) + 1);
    const size_t nkv = (size_t)(B * Hkv * L * D), nq = (size_t)(B * Hq * W * D);
    float *k = (float *)tu_malloc(nkv * sizeof(float));
    float *v = (float *)tu_malloc(nkv * sizeof(float));
    float *q = (float *)tu_malloc(nq * sizeof(float));
    tu_fill_normal(&rng, k, nkv, 0.0, 1.0);
    tu_fill_normal(&rng, v, nkv, 0.0, 1.0);
    tu_fill_normal(&rng, q, nq, 0.0, 2.0);
    tu_round_array(c->dt, k, nkv);
    tu_round_array(c->dt, v, nkv);
    tu_round_array(c->dt, q, nq);
    const int64_t bd[1] = {B}, qd[4] = {B, Hq, W, D}, ld[3] = {B, Hq, W}, sd[3] = {B, Hkv, L};
    const int64_t K = clkv_keep_count(L, c->ratio, c->budget, W > 1 || win ? W : 0) + 2;
    const int64_t id[3] = {B, Hkv, K}, cd[2] = {B, Hkv};

    clkv_evict_args e = CLKV_EVICT_ARGS_INIT;
    e.method_name = c->method;
    e.score.method = (clkv_score_method)0; /* overridden by the name */
    e.score.k = tu_kv_tensor(g_ctx, k, c->dt, B, Hkv, L, D, TU_HND);
    e.score.v = tu_kv_tensor(g_ctx, v, c->dt, B, Hkv, L, D, TU_NHD);
    e.score.lengths = tu_tensor_upload_i32(g_ctx, c->lens, 1, bd, 0, 0);
    if (win)
        e.score.q = tu_tensor_upload(g_ctx, q, c->dt, 4, qd, 0, 0);
    if (c->want_scores) {
        e.score.scores = tu_tensor_alloc(g_ctx, CLKV_F32, 3, sd, 4, 4);
        if (m == CLKV_SCORE_CRITICALKV)
            e.score.pbar = tu_tensor_alloc(g_ctx, CLKV_F32, 3, sd, 4, 4);
    }
    e.indices = tu_tensor_alloc(g_ctx, CLKV_I32, 3, id, 8, 8);
    e.counts = tu_tensor_alloc(g_ctx, CLKV_I32, 2, cd, 8, 8);
    e.ratio = c->ratio;
    e.budget = c->budget;
    if (c->max_len > 0)
        e.score.max_length = c->max_len;
    if (c->chunked) {
        clkv__select_force_path(2);
        setenv("CLKV_SELECT_CHUNK", "2048", 1);
    }
    size_t wsb = 0;
    TU_CHECK_OK(g_ctx, clkv_evict_keep_set_workspace_size(g_ctx, &e, &wsb));
    cl_event ev = NULL;
    TU_CHECK_OK(g_ctx, clkv_evict_keep_set(g_ctx, &e, &ev));
    assert_non_null(ev);
    TU_CHECK_CL(clWaitForEvents(1, &ev));
    clReleaseEvent(ev);
    assert_true(clkv_context_workspace_bytes(g_ctx) >= wsb);

    /* step by step with caller buffers */
    clkv_score_args s = e.score;
    s.method = m;
    s.scores = tu_tensor_alloc(g_ctx, CLKV_F32, 3, sd, 0, 0);
    s.pbar = m == CLKV_SCORE_CRITICALKV ? tu_tensor_alloc(g_ctx, CLKV_F32, 3, sd, 0, 0)
                                        : clkv_tensor_none();
    clkv_tensor o = {0}, lse = {0};
    if (win) {
        clkv_attention_window_args w = CLKV_ATTENTION_WINDOW_ARGS_INIT;
        w.q = e.score.q;
        w.k = e.score.k;
        w.v = e.score.v;
        w.lengths = e.score.lengths;
        w.max_length = e.score.max_length;
        o = tu_tensor_alloc(g_ctx, CLKV_F32, 4, qd, 0, 0);
        lse = tu_tensor_alloc(g_ctx, CLKV_F32, 3, ld, 0, 0);
        w.o = o;
        w.lse = lse;
        TU_CHECK_OK(g_ctx, clkv_attention_window(g_ctx, &w, NULL));
        s.lse = lse;
        if (m == CLKV_SCORE_DROPKV || m == CLKV_SCORE_ANDPRO)
            s.a = o;
    }
    TU_CHECK_OK(g_ctx, clkv_score(g_ctx, &s, NULL));
    clkv_keep_set_args ks = CLKV_KEEP_SET_ARGS_INIT;
    ks.scores = s.scores;
    ks.pbar = s.pbar;
    ks.lengths = e.score.lengths;
    ks.max_length = e.score.max_length;
    ks.indices = tu_tensor_alloc(g_ctx, CLKV_I32, 3, id, 0, 0);
    ks.counts = tu_tensor_alloc(g_ctx, CLKV_I32, 2, cd, 0, 0);
    ks.ratio = c->ratio;
    ks.budget = c->budget;
    ks.window = m == CLKV_SCORE_STREAMINGLLM ? 4 : (win && m != CLKV_SCORE_H2O ? W : 0);
    TU_CHECK_OK(g_ctx, clkv_keep_set(g_ctx, &ks, NULL));
    if (c->chunked) {
        clkv__select_force_path(0);
        unsetenv("CLKV_SELECT_CHUNK");
    }

    const size_t ni = (size_t)(B * Hkv * K), ns = (size_t)(B * Hkv * L);
    float *g1 = (float *)tu_malloc((ni > ns ? ni : ns) * sizeof(float));
    float *g2 = (float *)tu_malloc((ni > ns ? ni : ns) * sizeof(float));
#define SAME(t1, t2, n, what)                                                                      \
    do {                                                                                           \
        tu_tensor_read(g_ctx, &(t1), g1);                                                          \
        tu_tensor_read(g_ctx, &(t2), g2);                                                          \
        for (size_t i = 0; i < (n); i++)                                                           \
            if (memcmp(&g1[i], &g2[i], sizeof(float)) != 0)                                        \
                TU_FAIL("%s[%zu]: composite %g, step by step %g", what, i, (double)g1[i],          \
                        (double)g2[i]);                                                            \
    } while (0)
    SAME(e.indices, ks.indices, ni, "indices");
    SAME(e.counts, ks.counts, (size_t)(B * Hkv), "counts");
    tu_assert_written_exactly(g_ctx, &e.indices, "indices");
    tu_assert_written_exactly(g_ctx, &e.counts, "counts");
    if (c->want_scores) {
        SAME(e.score.scores, s.scores, ns, "scores");
        tu_assert_written_exactly(g_ctx, &e.score.scores, "scores");
        if (m == CLKV_SCORE_CRITICALKV)
            SAME(e.score.pbar, s.pbar, ns, "pbar");
    }
#undef SAME
    /* counts follow the keep formula */
    tu_tensor_read(g_ctx, &e.counts, g1);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hkv; h++)
            assert_int_equal((int64_t)g1[b * Hkv + h],
                             ref_keep_count(c->lens[b], c->ratio, c->budget, ks.window));
    free(g1), free(g2), free(k), free(v), free(q);
    tu_release(e.score.k.buf), tu_release(e.score.v.buf), tu_release(e.score.q.buf);
    tu_release(e.score.lengths.buf), tu_release(e.score.scores.buf), tu_release(e.score.pbar.buf);
    tu_release(e.indices.buf), tu_release(e.counts.buf), tu_release(s.scores.buf);
    tu_release(s.pbar.buf), tu_release(o.buf), tu_release(lse.buf), tu_release(ks.indices.buf);
    tu_release(ks.counts.buf);
}

static void expect_reject(clkv_status st, clkv_status want, const char *name, cl_mem out,
                          cl_event ev, const char *what) {
    const clkv_context *mctx = strcmp(name, "ctx") == 0 ? NULL : g_ctx;
    tu_set_case("bad input: %s", what);
    if (st != want)
        TU_FAIL("status %s (%d), expected %s; message: %s", clkv_status_string(st), st,
                clkv_status_string(want), clkv_last_error(mctx));
    if (!tu_msg_names(clkv_last_error(mctx), name))
        TU_FAIL("message \"%s\" does not name \"%s\"", clkv_last_error(mctx), name);
    assert_null(ev);
    clFinish(clkv_context_queue(g_ctx));
    if (out)
        tu_assert_buffer_poison(g_ctx, out, what);
}

static void test_evict_bad_inputs(void **state) {
    (void)state;
    const int64_t B = 1, Hq = 4, Hkv = 2, D = 64, W = 4, L = 40;
    float *z = (float *)tu_calloc((size_t)(B * Hkv * L * D), sizeof(float));
    const int64_t qd[4] = {B, Hq, W, D}, id[3] = {B, Hkv, 8}, cd[2] = {B, Hkv}, sd[3] = {B, Hkv, L};
    clkv_evict_args base = CLKV_EVICT_ARGS_INIT;
    base.score.method = CLKV_SCORE_DROPKV;
    base.score.q = tu_tensor_upload(g_ctx, z, CLKV_F32, 4, qd, 0, 0);
    base.score.k = tu_kv_tensor(g_ctx, z, CLKV_F32, B, Hkv, L, D, TU_HND);
    base.score.v = tu_kv_tensor(g_ctx, z, CLKV_F32, B, Hkv, L, D, TU_HND);
    base.score.scores = tu_tensor_alloc(g_ctx, CLKV_F32, 3, sd, 0, 0);
    base.indices = tu_tensor_alloc(g_ctx, CLKV_I32, 3, id, 0, 0);
    base.counts = tu_tensor_alloc(g_ctx, CLKV_I32, 2, cd, 0, 0);
    const cl_mem out = base.indices.buf;
    clkv_evict_args a;
    cl_event ev = NULL;
    size_t bytes;
    expect_reject(clkv_evict_keep_set(NULL, &base, &ev), CLKV_ERR_ARG_NULL, "ctx", NULL, ev, "ctx");
    expect_reject(clkv_evict_keep_set(g_ctx, NULL, &ev), CLKV_ERR_ARG_NULL, "args", out, ev,
                  "args");
    expect_reject(clkv_evict_keep_set_workspace_size(g_ctx, &base, NULL), CLKV_ERR_ARG_NULL,
                  "bytes", out, NULL, "bytes");
#define BAD(mut, want, name)                                                                       \
    do {                                                                                           \
        a = base;                                                                                  \
        mut;                                                                                       \
        ev = NULL;                                                                                 \
        expect_reject(clkv_evict_keep_set(g_ctx, &a, &ev), want, name, out, ev, #mut);             \
        expect_reject(clkv_evict_keep_set_workspace_size(g_ctx, &a, &bytes), want, name, out,      \
                      NULL, #mut " (workspace_size)");                                             \
        tu_assert_buffer_poison(g_ctx, base.counts.buf, #mut " (counts)");                         \
        tu_assert_buffer_poison(g_ctx, base.score.scores.buf, #mut " (scores)");                   \
    } while (0)
    BAD(a.method_name = "dropKV", CLKV_ERR_ARG_RANGE, "name");
    BAD(a.score.method = (clkv_score_method)-3, CLKV_ERR_ARG_RANGE, "method");
    BAD(a.score.lse = base.score.scores, CLKV_ERR_ARG_UNSUPPORTED, "lse");
    BAD(a.score.a = base.score.q, CLKV_ERR_ARG_UNSUPPORTED, "a");
    BAD(a.score.q.buf = NULL, CLKV_ERR_ARG_NULL, "q");
    BAD(a.score.k.buf = NULL, CLKV_ERR_ARG_NULL, "k");
    BAD(a.score.v.buf = NULL, CLKV_ERR_ARG_NULL, "v");
    BAD(a.indices.buf = NULL, CLKV_ERR_ARG_NULL, "indices");
    BAD(a.score.q.dims[1] = 3, CLKV_ERR_ARG_SHAPE, "q");
    BAD(a.score.k.dtype = CLKV_I32, CLKV_ERR_ARG_DTYPE, "k");
    BAD(a.score.scores.dims[2] = 39, CLKV_ERR_ARG_SHAPE, "scores");
    BAD(a.indices.dims[2] = 3, CLKV_ERR_ARG_SHAPE, "indices");
    BAD(a.ratio = 2.0, CLKV_ERR_ARG_RANGE, "ratio");
    BAD(a.score.pool_kernel = 2, CLKV_ERR_ARG_RANGE, "pool_kernel");
    BAD(a.score.max_length = 41, CLKV_ERR_ARG_RANGE, "max_length");
#undef BAD
    tu_set_case("evict bad inputs baseline");
    TU_CHECK_OK(g_ctx, clkv_evict_keep_set(g_ctx, &base, NULL));
    clFinish(clkv_context_queue(g_ctx));
    tu_release(base.score.q.buf), tu_release(base.score.k.buf), tu_release(base.score.v.buf);
    tu_release(base.score.scores.buf), tu_release(base.indices.buf), tu_release(base.counts.buf);
    free(z);
}

int main(void) {
    tu_suite s = {0};
    tu_suite_add(&s, "evict_bad_inputs", test_evict_bad_inputs, NULL);
    TU_SUITE_ADD_CASES(&s, g_cases, run_case);
    return tu_suite_run(&s, "score_evict", &g_ctx, DEFAULT_SEED);
}
