/* MiniKV (include/clkv/minikv.h) on the default device ($CLKV_DEVICE; PoCL CPU in CI),
 * against tests/ref/ref_minikv.c (cumulative attention, budgets, selection),
 * tests/ref/ref_attention.c (pass 1) and tests/ref/ref_quant_cache.c (the loaded cache).
 *
 * - Prefill: o and lse vs the window-attention reference, a_cumul vs the double column
 *   sums (|x - ref| <= 2e-4 |ref| + 1e-6: every term p = exp(z - LSE) carries the f32
 *   error of z and of LSE, a few 1e-6 relative at these logit sizes), the selection as
 *   sets (SPEC §0.2: the recent window exactly; heavy hitters may differ only between
 *   tokens whose reference scores are within 1e-5 relative of the threshold), counts
 *   exact, lists ascending with -1 padding. Lengths 1, 15, 16, 17, 1000, 4099 (not
 *   multiples of a tile), left-padded batches, GQA 1/2/4/8, D 64/128/256, f32/f16/bf16,
 *   HND/NHD, pyramid heavy budgets.
 * - End to end: prefill -> clkv_minikv_load_cache (out of place and in place) -> one
 *   decode append -> clkv_attention_quant_decode; the cache state must equal the KIVI
 *   quantisation of the selected tokens (codes +-1 only at .5 ties), and the output the
 *   double attention over the dequantised cache.
 * - Bad inputs of every public function: status, message naming the argument, nothing
 *   written.
 *
 * Reproduce a failure with CLKV_TEST_SEED=<seed printed>.
 */
#include "util/test_util.h"
#include "ref/ref_attention.h"
#include "ref/ref_minikv.h"
#include "ref/ref_quant_cache.h"

#include "clkv/minikv.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_SEED 0x3117C0DEull

static clkv_context *g_ctx;

/* ------------------------------------------------------------------------------------ */
/* Prefill cases                                                                        */
/* ------------------------------------------------------------------------------------ */

typedef struct pcase {
    const char *name;
    int64_t B, Hq, Hkv, T, L, D;
    clkv_dtype dt, o_dt;
    tu_layout layout;
    int32_t lens[4]; /* -1: no lengths tensor (all T) */
    int want_lse, want_acumul, want_counts;
    int64_t heavy_budget;
    double heavy_ratio, recent_ratio;
    double q_sd;        /* query scale: larger = peakier attention */
    int64_t acumul_pad; /* > 0: a_cumul rows padded by this many elements (strided view) */
} pcase;

static const pcase k_cases[] = {
    {"len1_15_16_17_gqa4_d64_f32",
     4,
     8,
     2,
     17,
     17,
     64,
     CLKV_F32,
     CLKV_F32,
     TU_HND,
     {1, 15, 16, 17},
     1,
     1,
     1,
     -1,
     0.25,
     0.25,
     1.0,
     0},
    {"len1000_999_mha_d128_bf16_nhd",
     2,
     4,
     4,
     1000,
     1003,
     128,
     CLKV_BF16,
     CLKV_BF16,
     TU_NHD,
     {1000, 999},
     0,
     1,
     1,
     -1,
     0.25,
     0.25,
     1.5,
     0},
    {"len4099_gqa2_d64_f16",
     1,
     2,
     1,
     4099,
     4099,
     64,
     CLKV_F16,
     CLKV_F16,
     TU_HND,
     {-1},
     1,
     1,
     0,
     -1,
     0.25,
     0.25,
     1.0,
     0},
    {"gqa8_d256_f32_pyramid_budget",
     2,
     16,
     2,
     33,
     40,
     256,
     CLKV_F32,
     CLKV_F32,
     TU_HND,
     {33, 20},
     1,
     0,
     1,
     5,
     0.25,
     0.25,
     2.0,
     0},
    {"len0_and_small_bf16_ratios",
     3,
     4,
     2,
     40,
     40,
     128,
     CLKV_BF16,
     CLKV_F32,
     TU_NHD,
     {0, 3, 40},
     1,
     1,
     1,
     -1,
     0.1,
     0.3,
     1.0,
     7},
};

/* GQA 32/8 bf16 prompts with mixed lengths: pass 2 takes the tensor-core H2O kernel on
 * NVIDIA (score_h2o_mma.cl, several row pieces); only there (on a CPU device the
 * references alone take minutes). */
static const pcase k_mma_cases[] = {
    {"mma_len1000_17_gqa4_h32x8_d128_bf16",
     2,
     32,
     8,
     1000,
     1000,
     128,
     CLKV_BF16,
     CLKV_BF16,
     TU_HND,
     {1000, 17},
     1,
     1,
     1,
     -1,
     0.25,
     0.25,
     1.0,
     0},
    {"mma_len4099_gqa4_h4x1_d64_f16",
     1,
     4,
     1,
     4099,
     4099,
     64,
     CLKV_F16,
     CLKV_F16,
     TU_NHD,
     {4099},
     1,
     1,
     1,
     -1,
     0.25,
     0.25,
     1.5,
     0},
};

/* The selection of one row vs the reference (see the file comment). */
static void check_row(const int32_t *got, int64_t K, const double *aref, int64_t n, int64_t heavy,
                      int64_t recent, int64_t b, int64_t h) {
    const int64_t kept = heavy + recent;
    for (int64_t i = 0; i < K; i++) {
        if (i < kept) {
            if (got[i] < 0 || got[i] >= n || (i > 0 && got[i] <= got[i - 1]))
                TU_FAIL("indices[%lld, %lld, %lld] = %d: not an ascending list inside [0, %lld)",
                        (long long)b, (long long)h, (long long)i, got[i], (long long)n);
        } else if (got[i] != -1) {
            TU_FAIL("indices[%lld, %lld, %lld] = %d, expected -1 padding", (long long)b,
                    (long long)h, (long long)i, got[i]);
        }
    }
    /* recent window: the last `recent` entries */
    for (int64_t i = 0; i < recent; i++)
        if (got[heavy + i] != n - recent + i)
            TU_FAIL("row (%lld, %lld): recent slot %lld holds %d, expected %lld", (long long)b,
                    (long long)h, (long long)i, got[heavy + i], (long long)(n - recent + i));
    const int64_t m = n - recent;
    float *af = tu_malloc((size_t)(m > 0 ? m : 1) * 4);
    for (int64_t j = 0; j < m; j++)
        af[j] = (float)aref[j];
    int32_t *want = tu_malloc((size_t)(kept > 0 ? kept : 1) * 4);
    if (ref_minikv_select(af, n, heavy, recent, want) != kept)
        TU_FAIL("reference selection failed");
    double thr = INFINITY;
    for (int64_t i = 0; i < heavy; i++)
        thr = aref[want[i]] < thr ? aref[want[i]] : thr;
    char *in_ref = tu_calloc((size_t)(m > 0 ? m : 1), 1),
         *in_got = tu_calloc((size_t)(m > 0 ? m : 1), 1);
    for (int64_t i = 0; i < heavy; i++) {
        in_ref[want[i]] = 1;
        in_got[got[i]] = 1;
    }
    for (int64_t j = 0; j < m; j++)
        if (in_ref[j] != in_got[j] && !(fabs(aref[j] - thr) <= 1e-5 * fabs(thr)))
            TU_FAIL("row (%lld, %lld): token %lld %s, A_cumul %.9g vs threshold %.9g", (long long)b,
                    (long long)h, (long long)j,
                    in_got[j] ? "selected but not in the reference" : "missing", aref[j], thr);
    free(af), free(want), free(in_ref), free(in_got);
}

static void run_prefill(const pcase *c, uint64_t stream) {
    tu_set_case("%s", c->name);
    const double t0 = tu_now();
    const int64_t B = c->B, Hq = c->Hq, Hkv = c->Hkv, T = c->T, L = c->L, D = c->D;
    tu_rng rng;
    tu_rng_seed(&rng, tu_seed(DEFAULT_SEED), stream);
    const size_t nq = (size_t)(B * Hq * T * D), nk = (size_t)(B * Hkv * L * D);
    float *q = tu_malloc(nq * 4), *k = tu_malloc(nk * 4), *v = tu_malloc(nk * 4);
    tu_fill_normal(&rng, q, nq, 0.0, c->q_sd);
    tu_fill_normal(&rng, k, nk, 0.0, 1.0);
    tu_fill_normal(&rng, v, nk, 0.0, 1.0);
    tu_round_array(c->dt, q, nq);
    tu_round_array(c->dt, k, nk);
    tu_round_array(c->dt, v, nk);
    const int has_len = c->lens[0] >= 0;
    int32_t lens[4];
    for (int64_t b = 0; b < B; b++)
        lens[b] = has_len ? c->lens[b] : (int32_t)T;
    const double scale = 1.0 / sqrt((double)D);

    const int64_t qd[4] = {B, Hq, T, D}, ld[3] = {B, Hq, T}, ad[3] = {B, Hkv, L}, bd[1] = {B};
    int64_t kmax =
        clkv_minikv_budget(T, c->heavy_ratio, c->recent_ratio, c->heavy_budget, NULL, NULL);
    const int64_t K = kmax + 3; /* capacity above the need: padding checked */
    const int64_t id[3] = {B, Hkv, K};
    clkv_minikv_prefill_args a = CLKV_MINIKV_PREFILL_ARGS_INIT;
    a.q = tu_tensor_upload(g_ctx, q, c->dt, 4, qd, 64, 32);
    a.k = tu_kv_tensor_offset(g_ctx, k, c->dt, B, Hkv, L, D, c->layout, 16);
    a.v = tu_kv_tensor(g_ctx, v, c->dt, B, Hkv, L, D, c->layout);
    if (has_len)
        a.lengths = tu_tensor_upload_i32(g_ctx, lens, 1, bd, 4, 0);
    a.o = tu_tensor_alloc(g_ctx, c->o_dt, 4, qd, 32, 64);
    if (c->want_lse)
        a.lse = tu_tensor_alloc(g_ctx, CLKV_F32, 3, ld, 8, 16);
    if (c->want_acumul && c->acumul_pad > 0) { /* rows of L + pad elements, 16-byte offset */
        const int64_t rs = L + c->acumul_pad;
        a.a_cumul = clkv_tensor_3d(tu_buffer_create(g_ctx, (size_t)(B * Hkv * rs) * 4 + 16),
                                   CLKV_F32, B, Hkv, L);
        a.a_cumul.offset = 16;
        a.a_cumul.strides[0] = Hkv * rs;
        a.a_cumul.strides[1] = rs;
    } else if (c->want_acumul) {
        a.a_cumul = tu_tensor_alloc(g_ctx, CLKV_F32, 3, ad, 4, 16);
    }
    a.indices = tu_tensor_alloc(g_ctx, CLKV_I32, 3, id, 12, 16);
    if (c->want_counts)
        a.counts = tu_tensor_alloc(g_ctx, CLKV_I32, 1, bd, 4, 8);
    a.heavy_ratio = c->heavy_ratio;
    a.recent_ratio = c->recent_ratio;
    a.heavy_budget = c->heavy_budget;
    /* a reserved workspace of the queried size is enough: the call allocates nothing */
    size_t ws = 0;
    TU_CHECK_OK(g_ctx, clkv_minikv_prefill_workspace_size(g_ctx, &a, &ws));
    TU_CHECK_OK(g_ctx, clkv_context_reserve_workspace(g_ctx, ws));
    const size_t ws_before = clkv_context_workspace_bytes(g_ctx);
    cl_event ev = NULL;
    TU_CHECK_OK(g_ctx, clkv_minikv_prefill(g_ctx, &a, &ev));
    if (clkv_context_workspace_bytes(g_ctx) != ws_before)
        TU_FAIL("the workspace grew from %zu to %zu bytes although %zu were reserved", ws_before,
                clkv_context_workspace_bytes(g_ctx), ws);
    if (!ev)
        TU_FAIL("no completion event");
    TU_CHECK_CL(clWaitForEvents(1, &ev));
    clReleaseEvent(ev);
    const double t1 = tu_now();

    /* pass 1 */
    double *ro = tu_malloc(nq * sizeof(double)), *rl = tu_malloc((size_t)(B * Hq * T) * 8);
    if (ref_attention_window(B, Hq, Hkv, T, L, D, q, k, v, lens, scale, ro, rl, NULL))
        TU_FAIL("window reference rejected the case");
    float *go = tu_malloc(nq * 4);
    tu_tensor_read(g_ctx, &a.o, go);
    tu_assert_written_exactly(g_ctx, &a.o, "o");
    tu_assert_close("o", go, ro, nq, tu_tol_for(c->o_dt), 4, qd);
    if (c->want_lse) {
        float *gl = tu_malloc((size_t)(B * Hq * T) * 4);
        tu_tensor_read(g_ctx, &a.lse, gl);
        tu_assert_written_exactly(g_ctx, &a.lse, "lse");
        tu_assert_lse("lse", gl, rl, (size_t)(B * Hq * T), TU_LSE_ATOL, 3, ld);
        free(gl);
    }
    /* pass 2 */
    const size_t na = (size_t)(B * Hkv * L);
    double *ra = tu_malloc(na * sizeof(double));
    if (ref_minikv_acumul(B, Hq, Hkv, T, L, D, q, k, lens, scale, ra))
        TU_FAIL("a_cumul reference rejected the case");
    if (c->want_acumul) {
        float *ga = tu_malloc(na * 4);
        tu_tensor_read(g_ctx, &a.a_cumul, ga);
        tu_assert_written_exactly(g_ctx, &a.a_cumul, "a_cumul");
        const tu_tol tol = {2e-4, 1e-6};
        tu_assert_close("a_cumul", ga, ra, na, tol, 3, ad);
        free(ga);
    }
    /* selection */
    int32_t *gi = tu_malloc((size_t)(B * Hkv * K) * 4);
    tu_buffer_read(g_ctx, a.indices.buf, (size_t)a.indices.offset, gi, (size_t)(B * Hkv * K) * 4);
    tu_assert_written_exactly(g_ctx, &a.indices, "indices");
    int32_t gc[4] = {0};
    if (c->want_counts) {
        tu_buffer_read(g_ctx, a.counts.buf, (size_t)a.counts.offset, gc, (size_t)B * 4);
        tu_assert_written_exactly(g_ctx, &a.counts, "counts");
    }
    for (int64_t b = 0; b < B; b++) {
        int64_t heavy, recent;
        const int64_t kept = ref_minikv_budget(lens[b], c->heavy_ratio, c->recent_ratio,
                                               c->heavy_budget, &heavy, &recent);
        if (c->want_counts && gc[b] != kept)
            TU_FAIL("counts[%lld] = %d, expected %lld", (long long)b, gc[b], (long long)kept);
        for (int64_t h = 0; h < Hkv; h++)
            check_row(gi + (b * Hkv + h) * K, K, ra + (b * Hkv + h) * L, lens[b], heavy, recent, b,
                      h);
    }
    print_message("  %-36s device %.2f s, check %.2f s\n", c->name, t1 - t0, tu_now() - t1);
    tu_release(a.q.buf), tu_release(a.k.buf), tu_release(a.v.buf), tu_release(a.lengths.buf);
    tu_release(a.o.buf), tu_release(a.lse.buf), tu_release(a.a_cumul.buf);
    tu_release(a.indices.buf), tu_release(a.counts.buf);
    free(q), free(k), free(v), free(ro), free(rl), free(go), free(ra), free(gi);
}

static void test_prefill(void **state) {
    const pcase *c = (const pcase *)*state;
    run_prefill(c, (uint64_t)(c - k_cases) + 1);
}

static void test_prefill_mma(void **state) {
    const pcase *c = (const pcase *)*state;
    if (!clkv_context_device_info(g_ctx)->nvidia_ptx) {
        print_message("  %s: runs on NVIDIA only (tensor-core H2O shapes)\n", c->name);
        skip();
    }
    run_prefill(c, (uint64_t)(c - k_mma_cases) + 101);
}

/* Exact ties (SPEC §0.2): key 0 is an attention sink (logit 150 for every query), every
 * other key has logit 0, so p_j = exp(-150) underflows to 0 in f32 and A_cumul[j] = 0
 * exactly for j >= 1 on the device (and in the f32-rounded reference): the heavy hitters
 * are token 0 plus the LOWEST indices among the tied zeros. Compared exactly. */
static void test_ties(void **state) {
    (void)state;
    tu_set_case("ties: lower index wins");
    const int64_t B = 1, Hq = 4, Hkv = 2, T = 100, D = 64;
    const size_t nq = (size_t)(B * Hq * T * D), nk = (size_t)(B * Hkv * T * D);
    float *q = tu_calloc(nq, 4), *k = tu_calloc(nk, 4), *v = tu_malloc(nk * 4);
    const float c = sqrtf(1200.0f); /* scale 1/8: z_0 = 1200 / 8 = 150 */
    for (size_t r = 0; r < (size_t)(B * Hq * T); r++)
        q[r * D] = c;
    for (int64_t h = 0; h < Hkv; h++)
        k[(size_t)(h * T * D)] = c;
    tu_rng rng;
    tu_rng_seed(&rng, tu_seed(DEFAULT_SEED), 77);
    tu_fill_normal(&rng, v, nk, 0.0, 1.0);
    const int64_t qd[4] = {B, Hq, T, D}, ad[3] = {B, Hkv, T}, id[3] = {B, Hkv, 50};
    clkv_minikv_prefill_args a = CLKV_MINIKV_PREFILL_ARGS_INIT;
    a.q = tu_tensor_upload(g_ctx, q, CLKV_F32, 4, qd, 0, 0);
    a.k = tu_kv_tensor(g_ctx, k, CLKV_F32, B, Hkv, T, D, TU_HND);
    a.v = tu_kv_tensor(g_ctx, v, CLKV_F32, B, Hkv, T, D, TU_HND);
    a.o = tu_tensor_alloc(g_ctx, CLKV_F32, 4, qd, 0, 0);
    a.a_cumul = tu_tensor_alloc(g_ctx, CLKV_F32, 3, ad, 0, 0);
    a.indices = tu_tensor_alloc(g_ctx, CLKV_I32, 3, id, 0, 0);
    TU_CHECK_OK(g_ctx, clkv_minikv_prefill(g_ctx, &a, NULL));
    TU_CHECK_OK(g_ctx, clkv_context_finish(g_ctx));
    float ga[2 * 100];
    int32_t gi[2 * 50];
    tu_tensor_read(g_ctx, &a.a_cumul, ga);
    tu_buffer_read(g_ctx, a.indices.buf, 0, gi, sizeof gi);
    for (int64_t h = 0; h < Hkv; h++) {
        if (fabsf(ga[h * T] - (float)T) > 1e-3f * (float)T)
            TU_FAIL("A_cumul[%lld][0] = %g, expected %lld", (long long)h, (double)ga[h * T],
                    (long long)T);
        for (int64_t j = 1; j < T; j++)
            if (ga[h * T + j] != 0.0f)
                TU_FAIL("A_cumul[%lld][%lld] = %g, expected exactly 0", (long long)h, (long long)j,
                        (double)ga[h * T + j]);
        for (int64_t i = 0; i < 50; i++) {
            const int32_t want = i < 25 ? (int32_t)i : (int32_t)(75 + i - 25);
            if (gi[h * 50 + i] != want)
                TU_FAIL("indices[%lld][%lld] = %d, expected %d (ties: lower index first)",
                        (long long)h, (long long)i, gi[h * 50 + i], want);
        }
    }
    tu_release(a.q.buf), tu_release(a.k.buf), tu_release(a.v.buf), tu_release(a.o.buf);
    tu_release(a.a_cumul.buf), tu_release(a.indices.buf);
    free(q), free(k), free(v);
}

/* ------------------------------------------------------------------------------------ */
/* Budgets (host helpers)                                                               */
/* ------------------------------------------------------------------------------------ */

static void test_budgets(void **state) {
    (void)state;
    tu_set_case("budgets");
    const int64_t ns[] = {0, 1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 1000, 4099, 131072, 2147483647};
    const double ratios[] = {0.0, 0.1, 0.25, 0.3, 0.5, 1.0};
    const int64_t hbs[] = {-1, 0, 3, 1000000};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
        for (size_t hr = 0; hr < 6; hr++)
            for (size_t rr = 0; rr < 6; rr++)
                for (size_t hb = 0; hb < 4; hb++) {
                    int64_t h1, r1, h2, r2;
                    const int64_t k1 =
                        clkv_minikv_budget(ns[i], ratios[hr], ratios[rr], hbs[hb], &h1, &r1);
                    const int64_t k2 =
                        ref_minikv_budget(ns[i], ratios[hr], ratios[rr], hbs[hb], &h2, &r2);
                    if (k1 != k2 || h1 != h2 || r1 != r2)
                        TU_FAIL("n %lld ratios %g/%g budget %lld: (%lld, %lld), expected (%lld, "
                                "%lld)",
                                (long long)ns[i], ratios[hr], ratios[rr], (long long)hbs[hb],
                                (long long)h1, (long long)r1, (long long)h2, (long long)r2);
                    if (ns[i] >= 1 && k1 < 1)
                        TU_FAIL("n %lld keeps nothing", (long long)ns[i]);
                }
    /* defaults: floor(n / 4) each, exactly; n = 1 keeps its last token */
    int64_t h, r;
    if (clkv_minikv_budget(4099, 0.25, 0.25, -1, &h, &r) != 2048 || h != 1024 || r != 1024)
        TU_FAIL("n 4099: heavy %lld recent %lld", (long long)h, (long long)r);
    if (clkv_minikv_budget(1, 0.25, 0.25, -1, &h, &r) != 1 || h != 0 || r != 1)
        TU_FAIL("n 1: heavy %lld recent %lld", (long long)h, (long long)r);
    if (clkv_minikv_budget(-1, 0.25, 0.25, -1, NULL, NULL) != -1 ||
        clkv_minikv_budget(10, 1.5, 0.25, -1, NULL, NULL) != -1 ||
        clkv_minikv_budget(10, 0.25, NAN, -1, NULL, NULL) != -1 ||
        clkv_minikv_budget(10, 0.25, 0.25, -2, NULL, NULL) != -1)
        TU_FAIL("invalid budget arguments accepted");
    /* pyramid: 32 layers of a 4096-token prompt, beta 7: sum preserved, bottom the most */
    int64_t pb[32];
    TU_CHECK_OK(NULL, clkv_minikv_pyramid_budgets(32, 4096, 0.25, 7, pb));
    int64_t sum = 0;
    for (int l = 0; l < 32; l++) {
        sum += pb[l];
        if (l > 0 && pb[l] > pb[l - 1])
            TU_FAIL("pyramid not non-increasing at layer %d", l);
    }
    if (sum != 32 * 1024 || pb[31] != 146 || pb[0] != 1902)
        TU_FAIL("pyramid: sum %lld (want %d), top %lld (want 1024/7 = 146), bottom %lld (want "
                "2048 - 146 = 1902)",
                (long long)sum, 32 * 1024, (long long)pb[31], (long long)pb[0]);
    int64_t untouched[2] = {-7, -7};
    if (clkv_minikv_pyramid_budgets(2, 4096, 0.25, 7, NULL) != CLKV_ERR_ARG_NULL ||
        !tu_msg_names(clkv_last_error(NULL), "out"))
        TU_FAIL("pyramid out NULL: %s", clkv_last_error(NULL));
    if (clkv_minikv_pyramid_budgets(2, -1, 0.25, 7, untouched) != CLKV_ERR_ARG_RANGE ||
        !tu_msg_names(clkv_last_error(NULL), "n"))
        TU_FAIL("pyramid n -1: %s", clkv_last_error(NULL));
    if (clkv_minikv_pyramid_budgets(2, 10, 2.0, 7, untouched) != CLKV_ERR_ARG_RANGE ||
        !tu_msg_names(clkv_last_error(NULL), "heavy_ratio"))
        TU_FAIL("pyramid heavy_ratio 2: %s", clkv_last_error(NULL));
    if (clkv_minikv_pyramid_budgets(0, 10, 0.25, 7, untouched) != CLKV_ERR_ARG_RANGE ||
        clkv_minikv_pyramid_budgets(2, 10, 0.25, 0, untouched) != CLKV_ERR_ARG_RANGE)
        TU_FAIL("pyramid num_layers 0 / beta 0 accepted");
    if (untouched[0] != -7 || untouched[1] != -7)
        TU_FAIL("a rejected pyramid call wrote its output");
}

/* ------------------------------------------------------------------------------------ */
/* End to end: prefill -> load -> decode                                                */
/* ------------------------------------------------------------------------------------ */

typedef struct ecase {
    const char *name;
    int64_t B, Hq, Hkv, T, D;
    clkv_dtype dt, res_dt;
    int32_t lens[2];
    int in_place;
} ecase;

static const ecase k_e2e[] = {
    {"e2e_gqa4_d128_bf16_lens300_171", 2, 8, 2, 300, 128, CLKV_BF16, CLKV_F16, {300, 171}, 0},
    {"e2e_mha_d64_f16_len1000_in_place", 1, 2, 2, 1000, 64, CLKV_F16, CLKV_F16, {1000, 0}, 1},
    {"e2e_gqa2_d64_f32_bf16res_lens77_1", 2, 4, 2, 77, 64, CLKV_F32, CLKV_BF16, {77, 1}, 0},
};

static void read_f(const clkv_tensor *t, float *out) {
    if (tu_tensor_numel(t))
        tu_tensor_read(g_ctx, t, out);
}

static void read_raw(const clkv_tensor *t, void *out) {
    if (tu_tensor_numel(t))
        tu_buffer_read(g_ctx, t->buf, (size_t)t->offset, out, (size_t)tu_tensor_numel(t) * 4);
}

static int near_tie(double quot) {
    const double f = quot - floor(quot);
    return fabs(f - 0.5) < 1e-4;
}

/* Device cache vs reference state: counters, residual and metadata exact, codes exact
 * except +-1 at a .5 tie of the reference quotient. */
static void compare_cache(clkv_quant_cache *cache, const ref_qcache *r, ref_qcache *g) {
    clkv_quant_cache_view v;
    TU_CHECK_OK(g_ctx, clkv_quant_cache_view_get(cache, &v));
    if (ref_qcache_alloc(g, r->B, r->H, r->D, r->CQ, r->NR, r->k_bits, r->v_bits, r->group))
        TU_FAIL("ref_qcache_alloc");
    read_raw(&v.k_codes, g->k_codes), read_raw(&v.v_codes, g->v_codes);
    read_raw(&v.n_quant, g->n_quant), read_raw(&v.n_res, g->n_res);
    read_f(&v.k_scale, g->k_scale), read_f(&v.k_min, g->k_min);
    read_f(&v.v_scale, g->v_scale), read_f(&v.v_min, g->v_min);
    read_f(&v.k_res, g->k_res), read_f(&v.v_res, g->v_res);
    const int64_t D = r->D, CQ = r->CQ, NR = r->NR, Gq = r->group, per = 32 / r->k_bits;
    for (int64_t b = 0; b < r->B; b++) {
        if (g->n_quant[b] != r->n_quant[b] || g->n_res[b] != r->n_res[b])
            TU_FAIL("sequence %lld: (n_quant, n_res) = (%d, %d), expected (%d, %d)", (long long)b,
                    g->n_quant[b], g->n_res[b], r->n_quant[b], r->n_res[b]);
        const int64_t nq = r->n_quant[b], nr = r->n_res[b];
        for (int64_t h = 0; h < r->H; h++) {
            const int64_t bh = b * r->H + h;
            for (int64_t t = 0; t < nq; t++)
                for (int64_t d = 0; d < D; d++) {
                    const size_t kw = (size_t)((bh * (CQ / per) + t / per) * D + d),
                                 vw = (size_t)((bh * CQ + t) * (D / per) + d / per);
                    const int ks = (int)(t % per) * r->k_bits, vs = (int)(d % per) * r->v_bits;
                    const unsigned mask = (1u << r->k_bits) - 1u;
                    const int ka = (int)((r->k_codes[kw] >> ks) & mask),
                              kb = (int)((g->k_codes[kw] >> ks) & mask);
                    const int va = (int)((r->v_codes[vw] >> vs) & mask),
                              vb = (int)((g->v_codes[vw] >> vs) & mask);
                    const size_t qi = (size_t)((bh * CQ + t) * D + d);
                    if (ka != kb && !(abs(ka - kb) == 1 && near_tie(r->k_quot[qi])))
                        TU_FAIL("key code (bh %lld, token %lld, ch %lld): %d, expected %d",
                                (long long)bh, (long long)t, (long long)d, kb, ka);
                    if (va != vb && !(abs(va - vb) == 1 && near_tie(r->v_quot[qi])))
                        TU_FAIL("value code (bh %lld, token %lld, ch %lld): %d, expected %d",
                                (long long)bh, (long long)t, (long long)d, vb, va);
                }
            const size_t km = (size_t)(bh * (CQ / Gq) * D), vm = (size_t)(bh * CQ * (D / Gq)),
                         rs = (size_t)(bh * NR * D);
            if (memcmp(r->k_scale + km, g->k_scale + km, (size_t)(nq / Gq * D) * 4) ||
                memcmp(r->k_min + km, g->k_min + km, (size_t)(nq / Gq * D) * 4) ||
                memcmp(r->v_scale + vm, g->v_scale + vm, (size_t)(nq * (D / Gq)) * 4) ||
                memcmp(r->v_min + vm, g->v_min + vm, (size_t)(nq * (D / Gq)) * 4))
                TU_FAIL("quantisation metadata of (b %lld, h %lld) differs", (long long)b,
                        (long long)h);
            if (memcmp(r->k_res + rs, g->k_res + rs, (size_t)(nr * D) * 4) ||
                memcmp(r->v_res + rs, g->v_res + rs, (size_t)(nr * D) * 4))
                TU_FAIL("residual of (b %lld, h %lld) differs", (long long)b, (long long)h);
        }
    }
}

static void run_e2e(const ecase *c, uint64_t stream) {
    tu_set_case("%s", c->name);
    const int64_t B = c->B, Hq = c->Hq, Hkv = c->Hkv, T = c->T, L = c->T, D = c->D;
    tu_rng rng;
    tu_rng_seed(&rng, tu_seed(DEFAULT_SEED), 100 + stream);
    const size_t nq = (size_t)(B * Hq * T * D), nk = (size_t)(B * Hkv * L * D);
    float *q = tu_malloc(nq * 4), *k = tu_malloc(nk * 4), *v = tu_malloc(nk * 4);
    tu_fill_normal(&rng, q, nq, 0.0, 1.5);
    for (size_t i = 0; i < nk; i++) { /* per-channel offsets, as real keys have */
        k[i] = (float)(0.5 * sin((double)(i % (size_t)D)) + tu_rng_normal(&rng));
        v[i] = (float)tu_rng_normal(&rng);
    }
    tu_round_array(c->dt, q, nq);
    tu_round_array(c->dt, k, nk);
    tu_round_array(c->dt, v, nk);
    const int64_t K = clkv_minikv_budget(T, 0.25, 0.25, -1, NULL, NULL);
    const int64_t qd[4] = {B, Hq, T, D}, bd[1] = {B}, id[3] = {B, Hkv, K};
    clkv_minikv_prefill_args a = CLKV_MINIKV_PREFILL_ARGS_INIT;
    a.q = tu_tensor_upload(g_ctx, q, c->dt, 4, qd, 0, 0);
    a.k = tu_kv_tensor(g_ctx, k, c->dt, B, Hkv, L, D, TU_HND);
    a.v = tu_kv_tensor(g_ctx, v, c->dt, B, Hkv, L, D, TU_NHD);
    a.lengths = tu_tensor_upload_i32(g_ctx, c->lens, 1, bd, 0, 0);
    a.o = tu_tensor_alloc(g_ctx, CLKV_F32, 4, qd, 0, 0);
    a.indices = tu_tensor_alloc(g_ctx, CLKV_I32, 3, id, 0, 0);
    a.counts = tu_tensor_alloc(g_ctx, CLKV_I32, 1, bd, 0, 0);
    TU_CHECK_OK(g_ctx, clkv_minikv_prefill(g_ctx, &a, NULL));

    clkv_quant_cache_create_args cfg = CLKV_QUANT_CACHE_CREATE_ARGS_INIT; /* 2-bit, 16, 128 */
    cfg.batch = B, cfg.kv_heads = Hkv, cfg.head_dim = D, cfg.capacity = K + 8;
    cfg.res_dtype = c->res_dt;
    clkv_quant_cache *cache;
    TU_CHECK_OK(g_ctx, clkv_quant_cache_create(g_ctx, &cfg, &cache));
    clkv_minikv_load_args la = CLKV_MINIKV_LOAD_ARGS_INIT;
    la.k = a.k, la.v = a.v, la.indices = a.indices, la.counts = a.counts;
    la.in_place = c->in_place;
    TU_CHECK_OK(g_ctx, clkv_minikv_load_cache(cache, &la, NULL));
    /* one decode token through the residual */
    const size_t n1 = (size_t)(B * Hkv * D);
    float *k1 = tu_malloc(n1 * 4), *v1 = tu_malloc(n1 * 4);
    tu_fill_normal(&rng, k1, n1, 0.0, 1.0);
    tu_fill_normal(&rng, v1, n1, 0.0, 1.0);
    tu_round_array(CLKV_BF16, k1, n1);
    tu_round_array(CLKV_BF16, v1, n1);
    int32_t one[2];
    for (int64_t b = 0; b < B; b++)
        one[b] = c->lens[b] > 0;
    clkv_quant_cache_append_args ap = CLKV_QUANT_CACHE_APPEND_ARGS_INIT;
    ap.k = tu_kv_tensor(g_ctx, k1, CLKV_BF16, B, Hkv, 1, D, TU_HND);
    ap.v = tu_kv_tensor(g_ctx, v1, CLKV_BF16, B, Hkv, 1, D, TU_HND);
    ap.counts = tu_tensor_upload_i32(g_ctx, one, 1, bd, 0, 0);
    TU_CHECK_OK(g_ctx, clkv_quant_cache_append(cache, &ap, NULL));
    const int64_t dd[3] = {B, Hq, D};
    float *qdec = tu_malloc((size_t)(B * Hq * D) * 4);
    tu_fill_normal(&rng, qdec, (size_t)(B * Hq * D), 0.0, 1.0);
    tu_round_array(CLKV_BF16, qdec, (size_t)(B * Hq * D));
    clkv_attention_quant_decode_args da = CLKV_ATTENTION_QUANT_DECODE_ARGS_INIT;
    da.q = tu_tensor_upload(g_ctx, qdec, CLKV_BF16, 3, dd, 0, 0);
    da.o = tu_tensor_alloc(g_ctx, CLKV_F32, 3, dd, 0, 0);
    TU_CHECK_OK(g_ctx, clkv_attention_quant_decode(cache, &da, NULL));
    TU_CHECK_OK(g_ctx, clkv_context_finish(g_ctx));

    /* the selection (checked against the reference sets), then the expected history */
    int32_t *gi = tu_malloc((size_t)(B * Hkv * K) * 4), gc[2];
    tu_buffer_read(g_ctx, a.indices.buf, 0, gi, (size_t)(B * Hkv * K) * 4);
    tu_buffer_read(g_ctx, a.counts.buf, 0, gc, (size_t)B * 4);
    double *ra = tu_malloc((size_t)(B * Hkv * L) * 8);
    if (ref_minikv_acumul(B, Hq, Hkv, T, L, D, q, k, c->lens, 1.0 / sqrt((double)D), ra))
        TU_FAIL("reference rejected the case");
    const int64_t Lh = K + 1;
    float *kh = tu_calloc((size_t)(B * Hkv * Lh * D), 4),
          *vh = tu_calloc((size_t)(B * Hkv * Lh * D), 4);
    int64_t hist[2];
    for (int64_t b = 0; b < B; b++) {
        int64_t heavy, recent;
        const int64_t kept = ref_minikv_budget(c->lens[b], 0.25, 0.25, -1, &heavy, &recent);
        if (gc[b] != kept)
            TU_FAIL("counts[%lld] = %d, expected %lld", (long long)b, gc[b], (long long)kept);
        hist[b] = kept + one[b];
        for (int64_t h = 0; h < Hkv; h++) {
            const int32_t *row = gi + (b * Hkv + h) * K;
            check_row(row, K, ra + (b * Hkv + h) * L, c->lens[b], heavy, recent, b, h);
            for (int64_t i = 0; i <= kept; i++)
                for (int64_t d = 0; d < D; d++) {
                    const size_t dst = (size_t)(((b * Hkv + h) * Lh + i) * D + d);
                    const float kx = i < kept ? k[((b * Hkv + h) * L + row[i]) * D + d]
                                              : k1[(b * Hkv + h) * D + d];
                    const float vx = i < kept ? v[((b * Hkv + h) * L + row[i]) * D + d]
                                              : v1[(b * Hkv + h) * D + d];
                    if (i == kept && !one[b])
                        continue;
                    kh[dst] = tu_round_dtype(c->res_dt, kx);
                    vh[dst] = tu_round_dtype(c->res_dt, vx);
                }
        }
    }
    ref_qcache r, g;
    clkv_quant_cache_view view;
    TU_CHECK_OK(g_ctx, clkv_quant_cache_view_get(cache, &view));
    if (ref_qcache_alloc(&r, B, Hkv, D, view.quant_capacity, 128, 2, 2, 16))
        TU_FAIL("ref_qcache_alloc");
    ref_qcache_build(&r, kh, vh, Lh, hist, 1);
    compare_cache(cache, &r, &g);
    /* decode output vs attention over the dequantised device cache */
    float *kd = tu_malloc((size_t)(B * Hkv * Lh * D) * 4),
          *vd = tu_malloc((size_t)(B * Hkv * Lh * D) * 4);
    int32_t len[2];
    ref_qcache_dequant(&g, Lh, kd, vd, len);
    double *ro = tu_malloc((size_t)(B * Hq * D) * 8);
    if (ref_attention_decode(B, Hq, Hkv, Lh, D, qdec, kd, vd, len, 1.0 / sqrt((double)D), ro, NULL))
        TU_FAIL("decode reference rejected the case");
    float *go = tu_malloc((size_t)(B * Hq * D) * 4);
    tu_tensor_read(g_ctx, &da.o, go);
    tu_assert_close("decode o", go, ro, (size_t)(B * Hq * D), tu_tol_for(CLKV_F32), 3, dd);

    ref_qcache_free(&r), ref_qcache_free(&g);
    clkv_quant_cache_destroy(cache);
    tu_release(a.q.buf), tu_release(a.k.buf), tu_release(a.v.buf), tu_release(a.lengths.buf);
    tu_release(a.o.buf), tu_release(a.indices.buf), tu_release(a.counts.buf);
    tu_release(ap.k.buf), tu_release(ap.v.buf), tu_release(ap.counts.buf);
    tu_release(da.q.buf), tu_release(da.o.buf);
    free(q), free(k), free(v), free(k1), free(v1), free(qdec), free(gi), free(ra);
    free(kh), free(vh), free(kd), free(vd), free(ro), free(go);
}

static void test_e2e(void **state) {
    const ecase *c = (const ecase *)*state;
    run_e2e(c, (uint64_t)(c - k_e2e) + 1);
}

/* ------------------------------------------------------------------------------------ */
/* Bad inputs                                                                           */
/* ------------------------------------------------------------------------------------ */

#define EXPECT_REJECT(call, want, name)                                                            \
    do {                                                                                           \
        const clkv_status st_ = (call);                                                            \
        if (st_ != (want))                                                                         \
            TU_FAIL("%s: returned %s, expected %s (\"%s\")", #call, clkv_status_string(st_),       \
                    clkv_status_string(want), clkv_last_error(g_ctx));                             \
        if (!tu_msg_names(clkv_last_error(g_ctx), (name)))                                         \
            TU_FAIL("%s: message \"%s\" does not name %s", #call, clkv_last_error(g_ctx), (name)); \
    } while (0)

static void test_prefill_validation(void **state) {
    (void)state;
    tu_set_case("minikv_prefill validation");
    const int64_t B = 2, Hq = 4, Hkv = 2, T = 32, D = 64;
    const int64_t qd[4] = {B, Hq, T, D}, kd[4] = {B, Hkv, T, D}, ld[3] = {B, Hq, T},
                  ad[3] = {B, Hkv, T}, id[3] = {B, Hkv, 16}, bd[1] = {B};
    clkv_minikv_prefill_args ok = CLKV_MINIKV_PREFILL_ARGS_INIT, a;
    ok.q = tu_tensor_alloc(g_ctx, CLKV_F32, 4, qd, 0, 0);
    ok.k = tu_tensor_alloc(g_ctx, CLKV_F32, 4, kd, 0, 0);
    ok.v = tu_tensor_alloc(g_ctx, CLKV_F32, 4, kd, 0, 0);
    ok.o = tu_tensor_alloc(g_ctx, CLKV_F32, 4, qd, 0, 0);
    ok.lse = tu_tensor_alloc(g_ctx, CLKV_F32, 3, ld, 0, 0);
    ok.a_cumul = tu_tensor_alloc(g_ctx, CLKV_F32, 3, ad, 0, 0);
    ok.indices = tu_tensor_alloc(g_ctx, CLKV_I32, 3, id, 0, 0);
    ok.counts = tu_tensor_alloc(g_ctx, CLKV_I32, 1, bd, 0, 0);
    {
        const int32_t lens[2] = {32, 7};
        ok.lengths = tu_tensor_upload_i32(g_ctx, lens, 1, bd, 0, 0);
    }
    const cl_mem outs[5] = {ok.o.buf, ok.lse.buf, ok.a_cumul.buf, ok.indices.buf, ok.counts.buf};
    const char *onames[5] = {"o", "lse", "a_cumul", "indices", "counts"};
    size_t bytes = 0;
    TU_CHECK_OK(g_ctx, clkv_minikv_prefill_workspace_size(g_ctx, &ok, &bytes));
    if (bytes == 0)
        TU_FAIL("workspace size 0");
#define BADP(stmt, want, name)                                                                     \
    do {                                                                                           \
        a = ok;                                                                                    \
        stmt;                                                                                      \
        size_t b_ = 0;                                                                             \
        EXPECT_REJECT(clkv_minikv_prefill_workspace_size(g_ctx, &a, &b_), want, name);             \
        cl_event ev_ = NULL;                                                                       \
        EXPECT_REJECT(clkv_minikv_prefill(g_ctx, &a, &ev_), want, name);                           \
        if (ev_)                                                                                   \
            TU_FAIL("%s: a rejected call returned an event", #stmt);                               \
        TU_CHECK_OK(g_ctx, clkv_context_finish(g_ctx));                                            \
        for (int i_ = 0; i_ < 5; i_++)                                                             \
            tu_assert_buffer_poison(g_ctx, outs[i_], onames[i_]);                                  \
    } while (0)
    BADP(a.q.buf = NULL, CLKV_ERR_ARG_NULL, "q");
    BADP(a.k.buf = NULL, CLKV_ERR_ARG_NULL, "k");
    BADP(a.v.buf = NULL, CLKV_ERR_ARG_NULL, "v");
    BADP(a.o.buf = NULL, CLKV_ERR_ARG_NULL, "o");
    BADP(a.q.dtype = CLKV_I32, CLKV_ERR_ARG_DTYPE, "q");
    BADP(a.v.dtype = CLKV_F16, CLKV_ERR_ARG_DTYPE, "v");
    BADP(a.lse.dtype = CLKV_F16, CLKV_ERR_ARG_DTYPE, "lse");
    BADP(a.a_cumul.dtype = CLKV_F16, CLKV_ERR_ARG_DTYPE, "a_cumul");
    BADP(a.indices.dtype = CLKV_F32, CLKV_ERR_ARG_DTYPE, "indices");
    BADP(a.counts.dtype = CLKV_F32, CLKV_ERR_ARG_DTYPE, "counts");
    BADP(a.lengths.dtype = CLKV_F32, CLKV_ERR_ARG_DTYPE, "lengths");
    BADP(a.q.dims[1] = 3, CLKV_ERR_ARG_SHAPE, "q");
    BADP(a.o.dims[2] = 16, CLKV_ERR_ARG_SHAPE, "o");
    BADP(a.a_cumul.dims[1] = 1, CLKV_ERR_ARG_SHAPE, "a_cumul");
    BADP(a.a_cumul.dims[2] = 16, CLKV_ERR_ARG_SHAPE, "a_cumul");
    BADP(a.indices.dims[0] = 1, CLKV_ERR_ARG_SHAPE, "indices");
    BADP((a.indices.dims[2] = 15, a.indices.strides[1] = 15, a.indices.strides[0] = 30),
         CLKV_ERR_ARG_SHAPE, "indices");
    BADP(a.counts.dims[0] = 1, CLKV_ERR_ARG_SHAPE, "counts");
    BADP(a.indices.buf = NULL, CLKV_ERR_ARG_SHAPE, "counts");
    BADP(a.lse.dims[2] = 16, CLKV_ERR_ARG_SHAPE, "lse");
    BADP((a.k.dims[3] = 48, a.v.dims[3] = 48, a.q.dims[3] = 48, a.o.dims[3] = 48),
         CLKV_ERR_ARG_UNSUPPORTED, "D");
    BADP(a.heavy_ratio = 1.5, CLKV_ERR_ARG_RANGE, "heavy_ratio");
    BADP(a.heavy_ratio = NAN, CLKV_ERR_ARG_RANGE, "heavy_ratio");
    BADP(a.recent_ratio = -0.1, CLKV_ERR_ARG_RANGE, "recent_ratio");
    BADP(a.heavy_budget = -2, CLKV_ERR_ARG_RANGE, "heavy_budget");
    BADP(a.max_length = 33, CLKV_ERR_ARG_RANGE, "max_length");
    BADP(a.max_length = -2, CLKV_ERR_ARG_RANGE, "max_length");
    BADP((a.q.dims[2] = 16, a.o.dims[2] = 16, a.lse.dims[2] = 16, a.max_length = 32),
         CLKV_ERR_ARG_SHAPE, "max_length");
    BADP(a.scale = INFINITY, CLKV_ERR_ARG_RANGE, "scale");
    BADP(a.k.strides[3] = 2, CLKV_ERR_ARG_STRIDE, "k");
    BADP(a.o.offset = 2, CLKV_ERR_ARG_ALIGNMENT, "o");
    BADP(a.q.offset = 4096, CLKV_ERR_ARG_BUFFER_SIZE, "q");
    BADP(a.a_cumul.offset = 64, CLKV_ERR_ARG_BUFFER_SIZE, "a_cumul");
    EXPECT_REJECT(clkv_minikv_prefill(g_ctx, NULL, NULL), CLKV_ERR_ARG_NULL, "args");
    EXPECT_REJECT(clkv_minikv_prefill_workspace_size(g_ctx, &ok, NULL), CLKV_ERR_ARG_NULL, "bytes");
    if (clkv_minikv_prefill(NULL, &ok, NULL) != CLKV_ERR_ARG_NULL ||
        !tu_msg_names(clkv_last_error(NULL), "ctx"))
        TU_FAIL("NULL ctx: %s", clkv_last_error(NULL));
    /* the baseline still works after all of that */
    TU_CHECK_OK(g_ctx, clkv_minikv_prefill(g_ctx, &ok, NULL));
    TU_CHECK_OK(g_ctx, clkv_context_finish(g_ctx));
    tu_release(ok.q.buf), tu_release(ok.k.buf), tu_release(ok.v.buf), tu_release(ok.o.buf);
    tu_release(ok.lse.buf), tu_release(ok.a_cumul.buf), tu_release(ok.indices.buf);
    tu_release(ok.counts.buf), tu_release(ok.lengths.buf);
}

static void test_load_validation(void **state) {
    (void)state;
    tu_set_case("minikv_load_cache validation");
    const int64_t B = 2, Hkv = 2, L = 40, D = 64, K = 20;
    clkv_quant_cache_create_args cfg = CLKV_QUANT_CACHE_CREATE_ARGS_INIT;
    cfg.batch = B, cfg.kv_heads = Hkv, cfg.head_dim = D, cfg.capacity = 30, cfg.residual = 16;
    clkv_quant_cache *cache;
    TU_CHECK_OK(g_ctx, clkv_quant_cache_create(g_ctx, &cfg, &cache));
    const int64_t kd[4] = {B, Hkv, L, D}, id[3] = {B, Hkv, K}, bd[1] = {B};
    float *kv = tu_calloc((size_t)(B * Hkv * L * D), 4);
    int32_t idx[B * Hkv * K], cnt[B];
    for (int i = 0; i < B * Hkv * K; i++)
        idx[i] = (i % K) * 2;
    cnt[0] = (int32_t)K, cnt[1] = 5;
    clkv_minikv_load_args ok = CLKV_MINIKV_LOAD_ARGS_INIT, a;
    ok.k = tu_kv_tensor(g_ctx, kv, CLKV_BF16, B, Hkv, L, D, TU_HND);
    ok.v = tu_kv_tensor(g_ctx, kv, CLKV_BF16, B, Hkv, L, D, TU_HND);
    ok.indices = tu_tensor_upload_i32(g_ctx, idx, 3, id, 0, 0);
    ok.counts = tu_tensor_upload_i32(g_ctx, cnt, 1, bd, 0, 0);
    (void)kd;
    clkv_quant_cache_view view;
    TU_CHECK_OK(g_ctx, clkv_quant_cache_view_get(cache, &view));
#define BADL(stmt, want, name)                                                                     \
    do {                                                                                           \
        a = ok;                                                                                    \
        stmt;                                                                                      \
        size_t b_ = 0;                                                                             \
        EXPECT_REJECT(clkv_minikv_load_cache_workspace_size(cache, &a, &b_), want, name);          \
        cl_event ev_ = NULL;                                                                       \
        EXPECT_REJECT(clkv_minikv_load_cache(cache, &a, &ev_), want, name);                        \
        if (ev_)                                                                                   \
            TU_FAIL("%s: a rejected call returned an event", #stmt);                               \
        TU_CHECK_OK(g_ctx, clkv_context_finish(g_ctx));                                            \
        int32_t c_[2];                                                                             \
        tu_buffer_read(g_ctx, view.n_quant.buf, (size_t)view.n_quant.offset, c_, 8);               \
        if (c_[0] || c_[1])                                                                        \
            TU_FAIL("%s: the rejected call changed the cache", #stmt);                             \
    } while (0)
    BADL(a.k.buf = NULL, CLKV_ERR_ARG_NULL, "k");
    BADL(a.v.buf = NULL, CLKV_ERR_ARG_NULL, "v");
    BADL(a.indices.buf = NULL, CLKV_ERR_ARG_NULL, "indices");
    BADL(a.counts.buf = NULL, CLKV_ERR_ARG_NULL, "counts");
    BADL(a.k.dtype = CLKV_I32, CLKV_ERR_ARG_DTYPE, "k");
    BADL(a.indices.dtype = CLKV_F32, CLKV_ERR_ARG_DTYPE, "indices");
    BADL(a.counts.dtype = CLKV_U8, CLKV_ERR_ARG_DTYPE, "counts");
    BADL(a.k.dims[0] = 1, CLKV_ERR_ARG_SHAPE, "k");
    BADL(a.v.dims[2] = 39, CLKV_ERR_ARG_SHAPE, "v");
    BADL(a.indices.dims[1] = 1, CLKV_ERR_ARG_SHAPE, "indices");
    BADL(a.counts.dims[0] = 1, CLKV_ERR_ARG_SHAPE, "counts");
    BADL((a.k.dims[3] = 32, a.v.dims[3] = 32), CLKV_ERR_ARG_SHAPE, "k");
    BADL(a.in_place = 2, CLKV_ERR_ARG_RANGE, "in_place");
    BADL((a.in_place = 1, a.v = a.k), CLKV_ERR_ARG_UNSUPPORTED, "in_place");
    BADL(a.k.strides[3] = 3, CLKV_ERR_ARG_STRIDE, "k");
    BADL(a.indices.offset = 4096, CLKV_ERR_ARG_BUFFER_SIZE, "indices");
    EXPECT_REJECT(clkv_minikv_load_cache(cache, NULL, NULL), CLKV_ERR_ARG_NULL, "args");
    EXPECT_REJECT(clkv_minikv_load_cache_workspace_size(cache, &ok, NULL), CLKV_ERR_ARG_NULL,
                  "bytes");
    if (clkv_minikv_load_cache(NULL, &ok, NULL) != CLKV_ERR_ARG_NULL ||
        !tu_msg_names(clkv_last_error(NULL), "cache"))
        TU_FAIL("NULL cache: %s", clkv_last_error(NULL));
    /* capacity: 20 fit once, not twice */
    TU_CHECK_OK(g_ctx, clkv_minikv_load_cache(cache, &ok, NULL));
    TU_CHECK_OK(g_ctx, clkv_context_finish(g_ctx));
    EXPECT_REJECT(clkv_minikv_load_cache(cache, &ok, NULL), CLKV_ERR_ARG_RANGE, "capacity");
    int32_t c2[2];
    tu_buffer_read(g_ctx, view.n_quant.buf, (size_t)view.n_quant.offset, c2, 8);
    int32_t r2[2];
    tu_buffer_read(g_ctx, view.n_res.buf, (size_t)view.n_res.offset, r2, 8);
    if (c2[0] + r2[0] != K || c2[1] + r2[1] != 5)
        TU_FAIL("after one load: lengths %d, %d, expected %lld, 5", c2[0] + r2[0], c2[1] + r2[1],
                (long long)K);
    clkv_quant_cache_destroy(cache);
    tu_release(ok.k.buf), tu_release(ok.v.buf), tu_release(ok.indices.buf);
    tu_release(ok.counts.buf);
    free(kv);
}

int main(void) {
    tu_suite s = {0};
    tu_suite_add(&s, "budgets", test_budgets, NULL);
    tu_suite_add(&s, "prefill_validation", test_prefill_validation, NULL);
    tu_suite_add(&s, "load_validation", test_load_validation, NULL);
    tu_suite_add(&s, "ties_lower_index_wins", test_ties, NULL);
    TU_SUITE_ADD_CASES(&s, k_cases, test_prefill);
    TU_SUITE_ADD_CASES(&s, k_mma_cases, test_prefill_mma);
    TU_SUITE_ADD_CASES(&s, k_e2e, test_e2e);
    return tu_suite_run(&s, "test_minikv", &g_ctx, DEFAULT_SEED);
}
