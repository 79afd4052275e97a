/* Budget policies (SPEC §2.4, §3): clkv_budget_uniform, clkv_budget_pyramid against the
 * reference (tests/ref/ref_budget.c) and their invariants (exact sums, monotone, within
 * one unit of the real schedule); clkv_budget_adakv on the default device ($CLKV_DEVICE;
 * PoCL CPU in CI) against the reference per-head counts over shapes, lengths (0, 1,
 * shorter than the budget, clamped to max_length), floors (alpha 0, 0.2, 1), heavy ties,
 * NaN / +-0 / +-inf, strided scores and many chunks per row; the documented hand-off to
 * clkv_select_topk (the same kept set); a whole compression round trip (AdaKV, select,
 * in-place compaction, decode with per-head lengths); bad inputs of every function.
 *
 * Reproduce a failure with CLKV_TEST_SEED=<seed printed>.
 */
#include "util/test_util.h"
#include "ref/ref_attention.h"
#include "ref/ref_budget.h"
#include "ref/ref_select.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_SEED 0xB0D6E7ull

static clkv_context *g_ctx;

/* ------------------------------------------------------------------------------------ */
/* Layer budgets                                                                        */
/* ------------------------------------------------------------------------------------ */

static void check_pyramid(int64_t N, int64_t A, int64_t beta) {
    int64_t *got = (int64_t *)tu_malloc((size_t)N * sizeof(int64_t));
    int64_t *exp = (int64_t *)tu_malloc((size_t)N * sizeof(int64_t));
    int64_t *num = (int64_t *)tu_malloc((size_t)N * sizeof(int64_t));
    int64_t den = 0;
    tu_set_case("pyramid N=%" PRId64 " A=%" PRId64 " beta=%" PRId64, N, A, beta);
    TU_CHECK_OK(NULL, clkv_budget_pyramid(N, A, beta, got));
    if (ref_budget_pyramid(N, A, beta, exp, num, &den) != 0)
        TU_FAIL("reference rejected the case (test bug)");
    int64_t sum = 0;
    for (int64_t l = 0; l < N; l++) {
        if (got[l] != exp[l])
            TU_FAIL("layer %" PRId64 ": %" PRId64 ", reference %" PRId64, l, got[l], exp[l]);
        if (l > 0 && got[l] > got[l - 1])
            TU_FAIL("not non-increasing: layer %" PRId64 " has %" PRId64 " > %" PRId64, l, got[l],
                    got[l - 1]);
        /* |out - r| < 1 with r = num / den, in integers: |out * den - num| < den */
        const int64_t diff = got[l] * den - num[l];
        if (diff <= -den || diff >= den)
            TU_FAIL("layer %" PRId64 ": %" PRId64 " is 1 or more away from %" PRId64 "/%" PRId64, l,
                    got[l], num[l], den);
        sum += got[l];
    }
    if (sum != N * A)
        TU_FAIL("sum %" PRId64 ", expected N*A = %" PRId64, sum, N * A);
    if (N > 1) { /* SPEC §3 end points: top A/beta, bottom 2A - A/beta (rounded) */
        const double top = (double)A / (double)beta, bottom = 2.0 * (double)A - top;
        if (fabs((double)got[N - 1] - top) >= 1.0 || fabs((double)got[0] - bottom) >= 1.0)
            TU_FAIL("end points %" PRId64 " .. %" PRId64 ", expected ~%g .. ~%g", got[0],
                    got[N - 1], bottom, top);
    }
    free(got);
    free(exp);
    free(num);
}

static void test_pyramid(void **state) {
    (void)state;
    check_pyramid(1, 100, 7);
    check_pyramid(2, 100, 7);
    check_pyramid(32, 1024, 7); /* MiniKV-style: 32 layers */
    check_pyramid(32, 0, 7);
    check_pyramid(32, 1, 7);
    check_pyramid(32, 13, 7);
    check_pyramid(40, 512, 1); /* beta = 1: uniform */
    check_pyramid(80, 2047, 20);
    check_pyramid(3, 5, 2);
    check_pyramid(65536, INT32_MAX, 1024); /* extremes: no overflow */
    {
        int64_t out[7];
        TU_CHECK_OK(NULL, clkv_budget_pyramid(7, 70, 1, out));
        for (int l = 0; l < 7; l++)
            assert_int_equal(out[l], 70);
        /* worked example: N = 3, A = 7, beta = 7: r = 13, 7, 1 */
        TU_CHECK_OK(NULL, clkv_budget_pyramid(3, 7, 7, out));
        assert_int_equal(out[0], 13);
        assert_int_equal(out[1], 7);
        assert_int_equal(out[2], 1);
        /* N = 2, A = 3, beta = 2: r = 4.5, 1.5 -> 5, 1 (equal fractions: lower layer) */
        TU_CHECK_OK(NULL, clkv_budget_pyramid(2, 3, 2, out));
        assert_int_equal(out[0], 5);
        assert_int_equal(out[1], 1);
    }
    tu_rng rng;
    tu_rng_seed(&rng, tu_seed(DEFAULT_SEED), 1);
    for (int i = 0; i < 300; i++)
        check_pyramid(tu_rng_int(&rng, 1, 130), tu_rng_int(&rng, 0, 5000), tu_rng_int(&rng, 1, 30));
    tu_set_case("%s", "");
}

static void test_uniform(void **state) {
    (void)state;
    int64_t out[5] = {0};
    tu_set_case("uniform");
    TU_CHECK_OK(NULL, clkv_budget_uniform(5, 77, out));
    for (int l = 0; l < 5; l++)
        assert_int_equal(out[l], 77);
    tu_set_case("%s", "");
}

static void expect_host_reject(clkv_status st, clkv_status want, const char *name,
                               const int64_t *out, size_t n, const char *what) {
    tu_expect_status(NULL, st, want, name, what);
    for (size_t i = 0; out && i < n; i++)
        if (out[i] != -5)
            TU_FAIL("out[%zu] was written (%" PRId64 ")", i, out[i]);
}

static void test_layer_bad_inputs(void **state) {
    (void)state;
    int64_t out[4] = {-5, -5, -5, -5};
#define HBAD(call, want, name) expect_host_reject(call, want, name, out, 4, #call)
    HBAD(clkv_budget_pyramid(4, 10, 7, NULL), CLKV_ERR_ARG_NULL, "out");
    HBAD(clkv_budget_pyramid(0, 10, 7, out), CLKV_ERR_ARG_RANGE, "num_layers");
    HBAD(clkv_budget_pyramid(65537, 10, 7, out), CLKV_ERR_ARG_RANGE, "num_layers");
    HBAD(clkv_budget_pyramid(4, -1, 7, out), CLKV_ERR_ARG_RANGE, "avg_budget");
    HBAD(clkv_budget_pyramid(4, (int64_t)INT32_MAX + 1, 7, out), CLKV_ERR_ARG_RANGE, "avg_budget");
    HBAD(clkv_budget_pyramid(4, 10, 0, out), CLKV_ERR_ARG_RANGE, "beta");
    HBAD(clkv_budget_pyramid(4, 10, 1025, out), CLKV_ERR_ARG_RANGE, "beta");
    HBAD(clkv_budget_uniform(4, 10, NULL), CLKV_ERR_ARG_NULL, "out");
    HBAD(clkv_budget_uniform(0, 10, out), CLKV_ERR_ARG_RANGE, "num_layers");
    HBAD(clkv_budget_uniform(4, -3, out), CLKV_ERR_ARG_RANGE, "budget");
#undef HBAD
    tu_set_case("%s", "");
}

/* ------------------------------------------------------------------------------------ */
/* AdaKV                                                                                */
/* ------------------------------------------------------------------------------------ */

typedef enum score_mode {
    SC_NORMAL = 0, /* N(0, 1) */
    SC_TIES,       /* integers 0..3: heavy ties inside and across heads */
    SC_SPECIAL,    /* N(0, 1) with NaN, +-0, +-inf sprinkled */
    SC_CONST,      /* every score equal */
    SC_SKEWED,     /* N(0, 1) + 3 * head: higher heads dominate, floors bind */
} score_mode;

typedef struct ada_case {
    const char *name;
    int64_t B, H, N, k;
    double alpha;
    int has_lengths;
    int32_t lens[3];
    int64_t max_length; /* -1: N */
    score_mode mode;
    int64_t row_pad; /* extra elements between score rows (strided view) */
    int64_t chunk;   /* CLKV_BUDGET_CHUNK, 0: the library's choice */
} ada_case;

static const ada_case g_ada[] = {
    {"ada_b3_h8_n1000_k64_lens", 3, 8, 1000, 64, 0.2, 1, {1000, 37, 0}, -1, SC_NORMAL, 0, 0},
    {"ada_b2_h4_n300_k50_ties", 2, 4, 300, 50, 0.2, 1, {300, 120, 0}, -1, SC_TIES, 3, 0},
    {"ada_b2_h4_n300_k50_ties_alpha0", 2, 4, 300, 50, 0.0, 0, {0}, -1, SC_TIES, 0, 0},
    {"ada_b1_h8_n257_k40_alpha1", 1, 8, 257, 40, 1.0, 0, {0}, -1, SC_NORMAL, 0, 0},
    {"ada_b3_h2_n500_k100_special", 3, 2, 500, 100, 0.3, 1, {500, 1, 99}, 400, SC_SPECIAL, 5, 0},
    {"ada_b2_h8_n600_k70_const", 2, 8, 600, 70, 0.2, 1, {600, 333, 0}, -1, SC_CONST, 0, 0},
    {"ada_b1_h1_n999_k123_mqa", 1, 1, 999, 123, 0.2, 0, {0}, -1, SC_NORMAL, 0, 0},
    {"ada_b2_h16_n100_k0", 2, 16, 100, 0, 0.2, 0, {0}, -1, SC_NORMAL, 0, 0},
    {"ada_b2_h4_n64_k1000_all", 2, 4, 64, 1000, 0.2, 1, {64, 10, 0}, -1, SC_NORMAL, 0, 0},
    {"ada_b2_h8_n3000_k256_chunks", 2, 8, 3000, 256, 0.2, 1, {2999, 1500, 0}, -1, SC_TIES, 1, 256},
    {"ada_b2_h8_n500_k64_skewed_floor", 2, 8, 500, 64, 0.2, 1, {500, 200, 0}, -1, SC_SKEWED, 0, 0},
    {"ada_b1_h4_n700_k100_skewed_alpha05", 1, 4, 700, 100, 0.5, 0, {0}, -1, SC_SKEWED, 7, 0},
    {"ada_b1_h8_n100000_k2048_long", 1, 8, 100000, 2048, 0.2, 0, {0}, 90001, SC_NORMAL, 0, 0},
};

static void fill_scores(tu_rng *rng, score_mode mode, float *s, size_t n, int64_t H,
                        int64_t stride) {
    for (size_t i = 0; i < n; i++) {
        switch (mode) {
        case SC_SKEWED:
            s[i] = (float)(tu_rng_normal(rng) + 3.0 * (double)((int64_t)(i / (size_t)stride) % H));
            break;
        case SC_TIES:
            s[i] = (float)tu_rng_int(rng, 0, 3);
            break;
        case SC_CONST:
            s[i] = 0.5f;
            break;
        case SC_SPECIAL: {
            const int64_t r = tu_rng_int(rng, 0, 19);
            s[i] = r == 0   ? NAN
                   : r == 1 ? -0.0f
                   : r == 2 ? 0.0f
                   : r == 3 ? INFINITY
                   : r == 4 ? -INFINITY
                            : (float)tu_rng_normal(rng);
            break;
        }
        default:
            s[i] = (float)tu_rng_normal(rng);
            break;
        }
    }
}

/* Per-sequence effective lengths and the reference counts [B, H]. */
static void ada_reference(const ada_case *c, const float *s, int64_t stride, int32_t *eff,
                          int32_t *exp, uint8_t *kept) {
    const int64_t maxlen = c->max_length < 0 ? c->N : c->max_length;
    const int64_t f = (int64_t)floor(c->alpha * (double)c->k);
    for (int64_t b = 0; b < c->B; b++) {
        int64_t n = c->has_lengths ? c->lens[b] : maxlen;
        n = n < 0 ? 0 : n > maxlen ? maxlen : n;
        eff[b] = (int32_t)n;
        if (ref_budget_adakv(s + b * c->H * stride, c->H, stride, n, c->k, f, exp + b * c->H,
                             kept ? kept + b * c->H * stride : NULL) != 0)
            TU_FAIL("reference rejected the case (test bug)");
    }
}

/* Release the buffers of scores, lengths and k_per_row. */
static void release_adakv(const clkv_budget_adakv_args *a) {
    tu_release(a->scores.buf);
    tu_release(a->lengths.buf);
    tu_release(a->k_per_row.buf);
}

static void run_ada(void **state) {
    const ada_case *c = (const ada_case *)*state;
    const int64_t B = c->B, H = c->H, N = c->N, stride = N + c->row_pad;
    const size_t ns = (size_t)(B * H * stride);
    tu_rng rng;
    tu_rng_seed(&rng, tu_seed(DEFAULT_SEED), 100 + (uint64_t)(c - g_ada));
    tu_set_case("%s (B=%" PRId64 " Hkv=%" PRId64 " N=%" PRId64 " k=%" PRId64
                " alpha=%g max_length=%" PRId64 ")",
                c->name, B, H, N, c->k, c->alpha, c->max_length);
    float *s = (float *)tu_malloc(ns * sizeof(float));
    fill_scores(&rng, c->mode, s, ns, H, stride);
    int32_t eff[3], *exp = (int32_t *)tu_malloc((size_t)(B * H) * sizeof(int32_t));
    int32_t *got = (int32_t *)tu_malloc((size_t)(B * H) * sizeof(int32_t));
    const double t0 = tu_now();
    ada_reference(c, s, stride, eff, exp, NULL);
    const double t_ref = tu_now() - t0;

    clkv_budget_adakv_args a = CLKV_BUDGET_ADAKV_ARGS_INIT;
    const int64_t sdims[3] = {B, H, stride}, kdims[2] = {B, H}, bdims[1] = {B};
    a.scores = tu_tensor_upload(g_ctx, s, CLKV_F32, 3, sdims, 12, 8);
    a.scores.dims[2] = N; /* rows padded to `stride` */
    if (c->has_lengths)
        a.lengths = tu_tensor_upload_i32(g_ctx, c->lens, 1, bdims, 4, 4);
    a.k_per_row = tu_tensor_alloc(g_ctx, CLKV_I32, 2, kdims, 8, 12);
    a.max_length = c->max_length;
    a.k = c->k;
    a.alpha = c->alpha;
    char chunk[32];
    if (c->chunk) {
        snprintf(chunk, sizeof chunk, "%" PRId64, c->chunk);
        setenv("CLKV_BUDGET_CHUNK", chunk, 1);
    }
    size_t ws = 0;
    cl_event ev = NULL;
    TU_CHECK_OK(g_ctx, clkv_budget_adakv_workspace_size(g_ctx, &a, &ws));
    const double t1 = tu_now();
    TU_CHECK_OK(g_ctx, clkv_budget_adakv(g_ctx, &a, &ev));
    assert_non_null(ev);
    TU_CHECK_CL(clWaitForEvents(1, &ev));
    clReleaseEvent(ev);
    const double t_run = tu_now() - t1;
    unsetenv("CLKV_BUDGET_CHUNK");
    if (clkv_context_workspace_bytes(g_ctx) < ws)
        TU_FAIL("workspace holds %zu bytes, workspace_size said %zu",
                clkv_context_workspace_bytes(g_ctx), ws);
    tu_assert_written_exactly(g_ctx, &a.k_per_row, "k_per_row");
    tu_buffer_read(g_ctx, a.k_per_row.buf, 8, got, (size_t)(B * H) * sizeof(int32_t));
    for (int64_t b = 0; b < B; b++) {
        int64_t total = 0;
        for (int64_t h = 0; h < H; h++) {
            const int32_t g = got[b * H + h], e = exp[b * H + h];
            if (g != e)
                TU_FAIL("k_per_row[%" PRId64 ", %" PRId64 "] = %d, reference %d (n = %d)", b, h, g,
                        e, eff[b]);
            total += g;
        }
        const int64_t want = H * (c->k < eff[b] ? c->k : eff[b]);
        if (total != want)
            TU_FAIL("sequence %" PRId64 " keeps %" PRId64 " tokens, expected Hkv*min(k, n) = "
                    "%" PRId64,
                    b, total, want);
    }
    printf("[ case     ] %-40s device %.3f s, reference %.3f s\n", c->name, t_run, t_ref);
    release_adakv(&a);
    free(s);
    free(exp);
    free(got);
    tu_set_case("%s", "");
}

/* The documented hand-off: clkv_budget_adakv over scores [B, H, N] (f32) with per-sequence
 * lengths and budget k, then clkv_select_topk with its k_per_row into indices [B, H, cap].
 * The caller releases a->scores, a->lengths, a->k_per_row and sa->indices. */
static void run_ada_then_select(const float *s, const int32_t *lens, int64_t B, int64_t H,
                                int64_t N, int64_t k, int64_t cap, clkv_budget_adakv_args *a,
                                clkv_select_topk_args *sa) {
    const int64_t sdims[3] = {B, H, N}, kdims[2] = {B, H}, bdims[1] = {B}, idims[3] = {B, H, cap};
    *a = (clkv_budget_adakv_args)CLKV_BUDGET_ADAKV_ARGS_INIT;
    a->scores = tu_tensor_upload(g_ctx, s, CLKV_F32, 3, sdims, 0, 0);
    a->lengths = tu_tensor_upload_i32(g_ctx, lens, 1, bdims, 0, 0);
    a->k_per_row = tu_tensor_alloc(g_ctx, CLKV_I32, 2, kdims, 0, 0);
    a->k = k;
    TU_CHECK_OK(g_ctx, clkv_budget_adakv(g_ctx, a, NULL));
    *sa = (clkv_select_topk_args)CLKV_SELECT_TOPK_ARGS_INIT;
    sa->scores = a->scores;
    sa->lengths = a->lengths;
    sa->k_per_row = a->k_per_row;
    sa->indices = tu_tensor_alloc(g_ctx, CLKV_I32, 3, idims, 0, 0);
    sa->k = cap;
    TU_CHECK_OK(g_ctx, clkv_select_topk(g_ctx, sa, NULL));
}

/* clkv_select_topk with AdaKV's k_per_row keeps exactly the tokens AdaKV kept. */
static void test_ada_then_select(void **state) {
    (void)state;
    const ada_case c = {"ada_then_select", 2, 4, 400, 60, 0.2, 1, {400, 90, 0}, -1, SC_TIES, 0, 0};
    const int64_t B = c.B, H = c.H, N = c.N, cap = 4 * 60; /* a head may take up to Hkv*k */
    tu_rng rng;
    tu_rng_seed(&rng, tu_seed(DEFAULT_SEED), 500);
    tu_set_case("ada_then_select (B=2 Hkv=4 N=400 k=60, ties)");
    float *s = (float *)tu_malloc((size_t)(B * H * N) * sizeof(float));
    fill_scores(&rng, SC_TIES, s, (size_t)(B * H * N), H, N);
    for (int64_t i = 0; i < N; i++) /* head 0 of sequence 0 dominates: it takes > k */
        s[i] += 2.0f;
    int32_t eff[3], exp[8];
    uint8_t *kept = (uint8_t *)tu_malloc((size_t)(B * H * N));
    ada_reference(&c, s, N, eff, exp, kept);
    if (exp[0] <= c.k)
        TU_FAIL("test setup: head 0 should exceed k (%d)", exp[0]);
    clkv_budget_adakv_args a;
    clkv_select_topk_args sa;
    run_ada_then_select(s, c.lens, B, H, N, c.k, cap, &a, &sa);
    int32_t *idx = (int32_t *)tu_malloc((size_t)(B * H * cap) * sizeof(int32_t));
    tu_buffer_read(g_ctx, sa.indices.buf, 0, idx, (size_t)(B * H * cap) * sizeof(int32_t));
    for (int64_t r = 0; r < B * H; r++) {
        int64_t m = 0;
        while (m < cap && idx[r * cap + m] >= 0)
            m++;
        if (m != exp[r])
            TU_FAIL("row %" PRId64 ": select kept %" PRId64 ", AdaKV %d", r, m, exp[r]);
        for (int64_t i = 0; i < m; i++)
            if (!kept[r * N + idx[r * cap + i]])
                TU_FAIL("row %" PRId64 ": token %d selected but not kept by AdaKV", r,
                        idx[r * cap + i]);
    }
    release_adakv(&a);
    tu_release(sa.indices.buf);
    free(s);
    free(kept);
    free(idx);
    tu_set_case("%s", "");
}

/* Compression round trip of one layer: AdaKV budgets, per-head top-k, in-place
 * compaction with new_lengths [B, Hkv], then decode attention with those per-head lengths
 * equals the reference attention over each head's kept tokens. */
static void test_round_trip(void **state) {
    (void)state;
    const int64_t B = 2, Hq = 8, H = 2, N = 300, D = 64, k = 40, cap = 80;
    const int32_t lens[2] = {300, 25};
    tu_rng rng;
    tu_rng_seed(&rng, tu_seed(DEFAULT_SEED), 600);
    tu_set_case("round trip (B=2 Hq=8 Hkv=2 N=300 D=64 k=40, bf16 NHD cache)");
    const size_t nkv = (size_t)(B * H * N * D), nq = (size_t)(B * Hq * D);
    float *kk = (float *)tu_malloc(nkv * sizeof(float)), *vv = (float *)tu_malloc(nkv * 4);
    float *q = (float *)tu_malloc(nq * sizeof(float)),
          *s = (float *)tu_malloc((size_t)(B * H * N) * 4);
    tu_fill_normal(&rng, kk, nkv, 0.0, 1.0);
    tu_fill_normal(&rng, vv, nkv, 0.0, 1.0);
    tu_fill_normal(&rng, q, nq, 0.0, 1.0);
    tu_fill_normal(&rng, s, (size_t)(B * H * N), 0.0, 1.0);
    tu_round_array(CLKV_BF16, kk, nkv);
    tu_round_array(CLKV_BF16, vv, nkv);
    for (int64_t j = 0; j < N; j++) /* head 1 of sequence 0 matters more */
        s[N + j] += 1.0f;
    const int64_t kdims[2] = {B, H}, qdims[3] = {B, Hq, D};
    clkv_budget_adakv_args a;
    clkv_select_topk_args sa;
    run_ada_then_select(s, lens, B, H, N, k, cap, &a, &sa);
    clkv_compact_kv_args ca = CLKV_COMPACT_KV_ARGS_INIT;
    ca.k_src = tu_kv_tensor(g_ctx, kk, CLKV_BF16, B, H, N, D, TU_NHD);
    ca.v_src = tu_kv_tensor(g_ctx, vv, CLKV_BF16, B, H, N, D, TU_NHD);
    ca.k_dst = ca.k_src;
    ca.v_dst = ca.v_src;
    ca.indices = sa.indices;
    ca.new_lengths = tu_tensor_alloc(g_ctx, CLKV_I32, 2, kdims, 0, 0);
    TU_CHECK_OK(g_ctx, clkv_compact_kv(g_ctx, &ca, NULL));
    clkv_attention_decode_args da = CLKV_ATTENTION_DECODE_ARGS_INIT;
    da.q = tu_tensor_upload(g_ctx, q, CLKV_F32, 3, qdims, 0, 0);
    da.k = ca.k_src;
    da.v = ca.v_src;
    da.lengths = ca.new_lengths;
    da.o = tu_tensor_alloc(g_ctx, CLKV_F32, 3, qdims, 0, 0);
    TU_CHECK_OK(g_ctx, clkv_attention_decode(g_ctx, &da, NULL));
    TU_CHECK_OK(g_ctx, clkv_context_finish(g_ctx));

    /* reference: per (b, kv head) the kept tokens (ascending) of the original cache */
    int32_t eff[2], cnt[4];
    const ada_case c = {"", B, H, N, k, 0.2, 1, {300, 25, 0}, -1, SC_NORMAL, 0, 0};
    uint8_t *kept = (uint8_t *)tu_malloc((size_t)(B * H * N));
    ada_reference(&c, s, N, eff, cnt, kept);
    float *o = (float *)tu_malloc(nq * sizeof(float));
    double *o_ref = (double *)tu_malloc(nq * sizeof(double));
    float *kc = (float *)tu_malloc((size_t)(N * D) * 4),
          *vc = (float *)tu_malloc((size_t)(N * D) * 4);
    const int64_t G = Hq / H;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            int32_t m = 0;
            for (int64_t j = 0; j < N; j++)
                if (kept[(b * H + h) * N + j]) {
                    memcpy(kc + m * D, kk + ((b * H + h) * N + j) * D, (size_t)D * 4);
                    memcpy(vc + m * D, vv + ((b * H + h) * N + j) * D, (size_t)D * 4);
                    m++;
                }
            assert_int_equal(m, cnt[b * H + h]);
            if (ref_attention_decode(1, G, 1, N, D, q + (b * Hq + h * G) * D, kc, vc, &m,
                                     1.0 / sqrt((double)D), o_ref + (b * Hq + h * G) * D,
                                     NULL) != 0)
                TU_FAIL("reference rejected the case (test bug)");
        }
    tu_tensor_read(g_ctx, &da.o, o);
    tu_assert_close("o after compression", o, o_ref, nq, tu_tol_for(CLKV_F32), 3, qdims);
    int32_t nl[4];
    tu_buffer_read(g_ctx, ca.new_lengths.buf, 0, nl, sizeof nl);
    for (int r = 0; r < 4; r++)
        assert_int_equal(nl[r], cnt[r]);
    release_adakv(&a);
    tu_release(sa.indices.buf);
    tu_release(ca.k_src.buf);
    tu_release(ca.v_src.buf);
    tu_release(ca.new_lengths.buf);
    tu_release(da.q.buf);
    tu_release(da.o.buf);
    free(kk);
    free(vv);
    free(q);
    free(s);
    free(kept);
    free(o);
    free(o_ref);
    free(kc);
    free(vc);
    tu_set_case("%s", "");
}

static void test_ada_bad_inputs(void **state) {
    (void)state;
    float s[2 * 3 * 16] = {0};
    const int32_t lens[2] = {16, 3};
    const int64_t sdims[3] = {2, 3, 16}, kdims[2] = {2, 3}, bdims[1] = {2};
    clkv_budget_adakv_args base = CLKV_BUDGET_ADAKV_ARGS_INIT, a;
    base.scores = tu_tensor_upload(g_ctx, s, CLKV_F32, 3, sdims, 0, 0);
    base.lengths = tu_tensor_upload_i32(g_ctx, lens, 1, bdims, 0, 0);
    base.k_per_row = tu_tensor_alloc(g_ctx, CLKV_I32, 2, kdims, 0, 0);
    base.k = 4;
    const cl_mem out = base.k_per_row.buf;
    const int64_t bigdims[2] = {2, 300};
    const clkv_tensor big = tu_tensor_alloc(g_ctx, CLKV_I32, 2, bigdims, 0, 0);
    cl_event ev = NULL;
    size_t bytes;
    tu_expect_reject(g_ctx, clkv_budget_adakv(NULL, &base, &ev), CLKV_ERR_ARG_NULL, "ctx", NULL, ev,
                     "ctx");
    tu_expect_reject(g_ctx, clkv_budget_adakv(g_ctx, NULL, &ev), CLKV_ERR_ARG_NULL, "args", out, ev,
                     "args");
    tu_expect_reject(g_ctx, clkv_budget_adakv_workspace_size(g_ctx, &base, NULL), CLKV_ERR_ARG_NULL,
                     "bytes", out, NULL, "bytes");
#define BAD(mut, want, name)                                                                       \
    do {                                                                                           \
        a = base;                                                                                  \
        mut;                                                                                       \
        ev = NULL;                                                                                 \
        tu_expect_reject(g_ctx, clkv_budget_adakv(g_ctx, &a, &ev), want, name, out, ev, #mut);     \
        tu_expect_reject(g_ctx, clkv_budget_adakv_workspace_size(g_ctx, &a, &bytes), want, name,   \
                         out, NULL, #mut " (workspace_size)");                                     \
    } while (0)
    BAD(a.scores.buf = NULL, CLKV_ERR_ARG_NULL, "scores");
    BAD(a.k_per_row.buf = NULL, CLKV_ERR_ARG_NULL, "k_per_row");
    BAD(a.scores.dtype = CLKV_F16, CLKV_ERR_ARG_DTYPE, "scores");
    BAD(a.lengths.dtype = CLKV_U32, CLKV_ERR_ARG_DTYPE, "lengths");
    BAD(a.k_per_row.dtype = CLKV_F32, CLKV_ERR_ARG_DTYPE, "k_per_row");
    BAD(a.scores.ndim = 2, CLKV_ERR_ARG_SHAPE, "scores");
    BAD(a.k_per_row.dims[1] = 2, CLKV_ERR_ARG_SHAPE, "k_per_row");
    BAD(a.k_per_row.dims[0] = 1, CLKV_ERR_ARG_SHAPE, "k_per_row");
    BAD(a.lengths.dims[0] = 1, CLKV_ERR_ARG_SHAPE, "lengths");
    BAD(a.k = -1, CLKV_ERR_ARG_RANGE, "k");
    BAD(a.k = (int64_t)INT32_MAX + 1, CLKV_ERR_ARG_RANGE, "k");
    BAD(a.alpha = -0.1, CLKV_ERR_ARG_RANGE, "alpha");
    BAD(a.alpha = 1.5, CLKV_ERR_ARG_RANGE, "alpha");
    BAD(a.alpha = NAN, CLKV_ERR_ARG_RANGE, "alpha");
    BAD(a.max_length = 17, CLKV_ERR_ARG_RANGE, "max_length");
    BAD(a.max_length = -2, CLKV_ERR_ARG_RANGE, "max_length");
    BAD((a.scores.dims[1] = 300, a.scores.strides[1] = 0, a.k_per_row = big), CLKV_ERR_ARG_RANGE,
        "scores"); /* Hkv > 256 */
    BAD(a.k_per_row.strides[1] = 2, CLKV_ERR_ARG_STRIDE, "k_per_row");
    BAD(a.scores.strides[2] = 2, CLKV_ERR_ARG_STRIDE, "scores");
    BAD(a.scores.offset = 2, CLKV_ERR_ARG_ALIGNMENT, "scores");
    BAD(a.scores.offset = 4, CLKV_ERR_ARG_BUFFER_SIZE, "scores");
    BAD(a.k_per_row.strides[0] = INT64_MAX / 2, CLKV_ERR_ARG_OVERFLOW, "k_per_row");
    BAD((a.k_per_row.buf = base.scores.buf, a.scores.dims[1] = 1, a.k_per_row.dims[1] = 1),
        CLKV_ERR_ARG_UNSUPPORTED, "k_per_row");
#undef BAD
    tu_set_case("ada bad inputs baseline");
    TU_CHECK_OK(g_ctx, clkv_budget_adakv(g_ctx, &base, NULL));
    int32_t got[6];
    tu_buffer_read(g_ctx, out, 0, got, sizeof got);
    /* all scores equal: sequence 0 keeps 4 per head, sequence 1 (n = 3) all 3 */
    for (int i = 0; i < 6; i++)
        assert_int_equal(got[i], i < 3 ? 4 : 3);
    release_adakv(&base);
    tu_release(big.buf);
    tu_set_case("%s", "");
}

int main(void) {
    tu_suite suite = {0};
    tu_suite_add(&suite, "pyramid", test_pyramid, NULL);
    tu_suite_add(&suite, "uniform", test_uniform, NULL);
    tu_suite_add(&suite, "layer_bad_inputs", test_layer_bad_inputs, NULL);
    tu_suite_add(&suite, "ada_bad_inputs", test_ada_bad_inputs, NULL);
    TU_SUITE_ADD_CASES(&suite, g_ada, run_ada);
    tu_suite_add(&suite, "ada_then_select", test_ada_then_select, NULL);
    tu_suite_add(&suite, "round_trip", test_round_trip, NULL);
    return tu_suite_run(&suite, "budget", &g_ctx, DEFAULT_SEED);
}
