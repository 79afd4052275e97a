/* ParisKV encoder (SPEC §4): Lloyd-Max levels, splitmix64 signs, the SRHT rotation, key
 * encoding (ids, codes, weights, counts) and the query transform, against the plain C
 * reference tests/ref/ref_pariskv.c, on the default device ($CLKV_DEVICE; PoCL in CI).
 *
 * Encode cases: every output is written twice, once in one bulk call into buffers
 * filled with the poison pattern (tu_poison_*), once by incremental calls over token
 * ranges into buffers filled with 0x00. Output bytes of encoded tokens must be identical
 * in both runs (so they were written, and incremental == bulk) and match the reference;
 * every other byte (rows of tokens past lengths[b], the leading offset, guard bytes)
 * must still hold its fill. The u8 outputs cannot be checked against poison alone, since
 * 0xFF / 0x7F are valid ids and codes: the two fills make that check exact.
 *
 * Codes may differ from the reference only where the reference |u_j| lies within 1e-6
 * of a threshold or u_j within 1e-7 of zero (f32 rounding); those are counted and
 * printed, all other nibbles and ids must be equal. Weights are compared with the f32
 * (or storage dtype) tolerance of SPEC §0.2, against the reference weight evaluated with
 * the device's codes.
 */
#include "util/test_util.h"
#include "ref/ref_pariskv.h"
#include "clkv/pariskv.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_SEED 0x9A415C0DEull
#define FILL2 0x00

#define F32 CLKV_F32
#define F16 CLKV_F16
#define BF16 CLKV_BF16

static clkv_context *g_ctx;

/* ------------------------------------------------------------------------------------ */
/* Levels and signs (host)                                                              */
/* ------------------------------------------------------------------------------------ */

static const double SPEC_TAU8[7] = {0.0853, 0.1716, 0.2603, 0.3528, 0.4516, 0.5612, 0.6921};
static const double SPEC_A8[8] = {0.0425, 0.1280, 0.2152, 0.3053, 0.4003, 0.5030, 0.6193, 0.7648};
static const float PUB_TAU8[7] = {0.0843f, 0.1698f, 0.2578f, 0.3499f, 0.4487f, 0.5585f, 0.6901f};
static const float PUB_A8[8] = {0.0420f, 0.1266f, 0.2130f, 0.3025f,
                                0.3973f, 0.5001f, 0.6169f, 0.7633f};

/* E[X | lo <= X < hi] for the density f(x) ~ (1-x^2)^((m-3)/2) by the midpoint rule in
 * theta (x = sin theta): an independent check of the host's closed forms. */
static double cond_mean_numeric(int m, double lo, double hi) {
    const int n = 20000;
    const double t0 = asin(lo), t1 = asin(hi), dt = (t1 - t0) / n;
    double mass = 0.0, mom = 0.0;
    for (int i = 0; i < n; i++) {
        const double th = t0 + (i + 0.5) * dt;
        const double wgt = pow(cos(th), m - 2);
        mass += wgt;
        mom += sin(th) * wgt;
    }
    return mom / mass;
}

static void test_levels(void **state) {
    (void)state;
    clkv_pariskv_levels l;
    TU_CHECK_OK(NULL, clkv_pariskv_levels_compute(8, &l));
    assert_int_equal(l.m, 8);
    for (int t = 0; t < 7; t++)
        if (fabs(l.tau[t] - SPEC_TAU8[t]) > 1e-3)
            TU_FAIL("m=8 tau[%d] = %.6f, SPEC %.4f", t, (double)l.tau[t], SPEC_TAU8[t]);
    for (int t = 0; t < 8; t++)
        if (fabs(l.a[t] - SPEC_A8[t]) > 1e-3)
            TU_FAIL("m=8 a[%d] = %.6f, SPEC %.4f", t, (double)l.a[t], SPEC_A8[t]);
    /* The SPEC's values are rounded to 4 decimals: the computation matches them to that. */
    for (int t = 0; t < 7; t++)
        if (fabs(l.tau[t] - SPEC_TAU8[t]) > 6e-5)
            TU_FAIL("m=8 tau[%d] = %.6f is not %.4f to 4 decimals", t, (double)l.tau[t],
                    SPEC_TAU8[t]);
    for (int m = 2; m <= 8; m++) {
        tu_set_case("m=%d", m);
        TU_CHECK_OK(NULL, clkv_pariskv_levels_compute(m, &l));
        assert_int_equal(l.m, m);
        double prev = 0.0;
        for (int t = 0; t < 8; t++) {
            if (!(l.a[t] > prev && l.a[t] < 1.0))
                TU_FAIL("a[%d] = %g not increasing in (0, 1)", t, (double)l.a[t]);
            prev = l.a[t];
            if (t < 7) {
                if (!(l.tau[t] > l.a[t]))
                    TU_FAIL("tau[%d] = %g <= a[%d]", t, (double)l.tau[t], t);
                if (fabs(l.tau[t] - 0.5 * ((double)l.a[t] + (double)l.a[t + 1])) > 1e-6)
                    TU_FAIL("tau[%d] = %g is not the midpoint of a[%d], a[%d]", t, (double)l.tau[t],
                            t, t + 1);
                prev = l.tau[t];
            }
        }
        /* Fixed point of Lloyd-Max: each level is the conditional mean of its bin. */
        for (int t = 0; t < 8; t++) {
            const double lo = t == 0 ? 0.0 : l.tau[t - 1], hi = t == 7 ? 1.0 : l.tau[t];
            const double cm = cond_mean_numeric(m, lo, hi);
            if (fabs(cm - l.a[t]) > 2e-6)
                TU_FAIL("a[%d] = %.7f, conditional mean of [%g, %g) = %.7f", t, (double)l.a[t], lo,
                        hi, cm);
        }
        if (m == 3) /* uniform density: uniform quantizer */
            for (int t = 0; t < 7; t++)
                if (fabs(l.tau[t] - (t + 1) / 8.0) > 1e-6)
                    TU_FAIL("m=3 tau[%d] = %g, expected %g", t, (double)l.tau[t], (t + 1) / 8.0);
    }
    tu_set_case("%s", "");
}

static void test_levels_default(void **state) {
    (void)state;
    clkv_pariskv_levels d, c;
    TU_CHECK_OK(NULL, clkv_pariskv_levels_default(8, 0, &d));
    assert_int_equal(d.m, 8);
    assert_memory_equal(d.tau, PUB_TAU8, sizeof PUB_TAU8);
    assert_memory_equal(d.a, PUB_A8, sizeof PUB_A8);
    clkv_pariskv_levels_published_m8(&c);
    assert_memory_equal(&c, &d, sizeof c);
    TU_CHECK_OK(NULL, clkv_pariskv_levels_default(8, 1, &d));
    TU_CHECK_OK(NULL, clkv_pariskv_levels_compute(8, &c));
    assert_memory_equal(&c, &d, sizeof c);
    for (int m = 2; m < 8; m++) {
        TU_CHECK_OK(NULL, clkv_pariskv_levels_default(m, 0, &d));
        TU_CHECK_OK(NULL, clkv_pariskv_levels_compute(m, &c));
        assert_memory_equal(&c, &d, sizeof c);
    }
    /* deterministic */
    TU_CHECK_OK(NULL, clkv_pariskv_levels_compute(5, &c));
    TU_CHECK_OK(NULL, clkv_pariskv_levels_compute(5, &d));
    assert_memory_equal(&c, &d, sizeof c);
}

static void test_signs(void **state) {
    (void)state;
    int8_t s[256], r[256];
    /* splitmix64(0) first output is 0xE220A8397B1DCDAF (top bit 1: -1), second
     * 0x6E789E6AA1B965F4 (top bit 0: +1). */
    TU_CHECK_OK(NULL, clkv_pariskv_signs_from_seed(0, 2, s));
    assert_int_equal(s[0], -1);
    assert_int_equal(s[1], 1);
    const uint64_t seeds[3] = {1, 0xDEADBEEFull, tu_seed(DEFAULT_SEED)};
    for (int i = 0; i < 3; i++) {
        TU_CHECK_OK(NULL, clkv_pariskv_signs_from_seed(seeds[i], 256, s));
        uint64_t st = seeds[i];
        int neg = 0;
        for (int j = 0; j < 256; j++) {
            const uint64_t z = tu_splitmix64(&st);
            if (s[j] != ((z >> 63) ? -1 : 1))
                TU_FAIL("seed %" PRIu64 ": signs[%d] = %d, splitmix64 output %016" PRIx64, seeds[i],
                        j, s[j], z);
            neg += s[j] < 0;
        }
        if (neg < 90 || neg > 166)
            TU_FAIL("seed %" PRIu64 ": %d of 256 signs negative", seeds[i], neg);
        ref_pariskv_signs(seeds[i], 256, r);
        assert_memory_equal(s, r, 256);
        /* a prefix is the same sequence */
        TU_CHECK_OK(NULL, clkv_pariskv_signs_from_seed(seeds[i], 64, r));
        assert_memory_equal(s, r, 64);
    }
}

/* ------------------------------------------------------------------------------------ */
/* Query transform and rotation                                                         */
/* ------------------------------------------------------------------------------------ */

typedef struct qcase {
    const char *name;
    int64_t B, Hq, Hkv, D;
    clkv_dtype dt;
    int explicit_signs;
    int zero_group; /* (b=0, h=0): every query head of the group is zero */
} qcase;

static const qcase g_qcases[] = {
    {"query_d64_f32_g1", 1, 4, 4, 64, F32, 0, 0},
    {"query_d128_bf16_b3_g4_zero", 3, 8, 2, 128, BF16, 0, 1},
    {"query_d256_f16_b3_g3_signs", 3, 6, 2, 256, F16, 1, 1},
    {"query_d96_bf16_b3_g4_zero_dense", 3, 8, 2, 96, BF16, 0, 1},
    {"query_d160_f32_g8_dense", 1, 16, 2, 160, F32, 0, 0},
};

static int is_dense(int64_t D) {
    return (D & (D - 1)) != 0;
}

/* The reference's dense rotation for (seed, D), malloc'd. */
static double *ref_dense(uint64_t seed, int64_t D) {
    double *R = (double *)tu_malloc((size_t)(D * D) * sizeof(double));
    ref_pariskv_dense_matrix(seed, D, R);
    return R;
}

static void run_query_case(void **state) {
    const qcase *c = (const qcase *)*state;
    tu_rng rng;
    tu_set_case("%s", c->name);
    tu_rng_seed(&rng, tu_seed(DEFAULT_SEED), 100 + (uint64_t)c->D);
    const size_t nq = (size_t)(c->B * c->Hq * c->D), nr = (size_t)(c->B * c->Hkv * c->D);
    float *q = (float *)tu_malloc(nq * sizeof(float));
    tu_fill_normal(&rng, q, nq, 0.3, 1.0);
    if (c->zero_group)
        memset(q, 0, (size_t)(c->Hq / c->Hkv * c->D) * sizeof(float));
    tu_round_array(c->dt, q, nq);
    int8_t signs[256];
    const uint64_t seed = 0x5EED0000u + (uint64_t)c->D;
    if (c->explicit_signs)
        for (int j = 0; j < c->D; j++)
            signs[j] = (tu_rng_u64(&rng) & 1) ? -1 : 1;
    else
        ref_pariskv_signs(seed, c->D, signs);
    const int64_t qd[3] = {c->B, c->Hq, c->D}, rd[3] = {c->B, c->Hkv, c->D}, nd[2] = {c->B, c->Hkv};
    clkv_pariskv_query_args a = CLKV_PARISKV_QUERY_ARGS_INIT;
    a.q = tu_tensor_upload(g_ctx, q, c->dt, 3, qd, 16, 0);
    a.q_rot = tu_tensor_alloc(g_ctx, F32, 3, rd, 64, 32);
    a.q_norm = tu_tensor_alloc(g_ctx, F32, 2, nd, 4, 16);
    a.seed = seed;
    a.signs = c->explicit_signs ? signs : NULL;
    TU_CHECK_OK(g_ctx, clkv_pariskv_query_transform(g_ctx, &a, NULL));
    TU_CHECK_CL(clFinish(clkv_context_queue(g_ctx)));
    tu_assert_written_exactly(g_ctx, &a.q_rot, "q_rot");
    tu_assert_written_exactly(g_ctx, &a.q_norm, "q_norm");
    float *gr = (float *)tu_malloc(nr * sizeof(float));
    float *gn = (float *)tu_malloc((size_t)(c->B * c->Hkv) * sizeof(float));
    double *rr = (double *)tu_malloc(nr * sizeof(double));
    double *rn = (double *)tu_malloc((size_t)(c->B * c->Hkv) * sizeof(double));
    tu_tensor_read(g_ctx, &a.q_rot, gr);
    tu_tensor_read(g_ctx, &a.q_norm, gn);
    if (is_dense(c->D)) {
        double *R = ref_dense(seed, c->D);
        ref_pariskv_query_dense(c->B, c->Hq, c->Hkv, c->D, R, q, rr, rn);
        free(R);
    } else {
        ref_pariskv_query(c->B, c->Hq, c->Hkv, c->D, signs, q, rr, rn);
    }
    tu_assert_close("q_rot", gr, rr, nr, tu_tol_for(F32), 3, rd);
    tu_assert_close("q_norm", gn, rn, (size_t)(c->B * c->Hkv), tu_tol_for(F32), 2, nd);
    if (c->zero_group) {
        assert_true(gn[0] == 0.0f);
        for (int64_t j = 0; j < c->D; j++)
            assert_true(gr[j] == 0.0f);
    }
    tu_release(a.q.buf);
    tu_release(a.q_rot.buf);
    tu_release(a.q_norm.buf);
    free(q);
    free(gr);
    free(gn);
    free(rr);
    free(rn);
    tu_set_case("%s", "");
}

/* R is orthogonal: with G = 1 the query transform gives R x = ||x|| * q_rot(x), so inner
 * products are preserved (SRHT and dense rotation); the dense R itself satisfies
 * R R^T = I and equals the reference's (Gram-Schmidt) matrix. */
static void test_rotation_orthogonal(void **state) {
    (void)state;
    const int64_t Ds[5] = {64, 128, 256, 96, 160};
    const int64_t H = 6;
    tu_rng rng;
    tu_rng_seed(&rng, tu_seed(DEFAULT_SEED), 7);
    for (int di = 0; di < 5; di++) {
        const int64_t D = Ds[di];
        tu_set_case("orthogonality D=%lld", (long long)D);
        float *x = (float *)tu_malloc((size_t)(H * D) * sizeof(float));
        tu_fill_normal(&rng, x, (size_t)(H * D), 0.0, 2.0);
        const int64_t qd[3] = {1, H, D}, nd[2] = {1, H};
        clkv_pariskv_query_args a = CLKV_PARISKV_QUERY_ARGS_INIT;
        a.q = tu_tensor_upload(g_ctx, x, F32, 3, qd, 0, 0);
        a.q_rot = tu_tensor_alloc(g_ctx, F32, 3, qd, 0, 0);
        a.q_norm = tu_tensor_alloc(g_ctx, F32, 2, nd, 0, 0);
        a.seed = 42;
        TU_CHECK_OK(g_ctx, clkv_pariskv_query_transform(g_ctx, &a, NULL));
        float *r = (float *)tu_malloc((size_t)(H * D) * sizeof(float));
        float n[6];
        tu_tensor_read(g_ctx, &a.q_rot, r);
        tu_tensor_read(g_ctx, &a.q_norm, n);
        for (int64_t i = 0; i < H; i++)
            for (int64_t j = 0; j < H; j++) {
                double dx = 0.0, dr = 0.0, ni = 0.0, nj = 0.0;
                for (int64_t e = 0; e < D; e++) {
                    dx += (double)x[i * D + e] * x[j * D + e];
                    dr += (double)n[i] * r[i * D + e] * (double)n[j] * r[j * D + e];
                    ni += (double)x[i * D + e] * x[i * D + e];
                    nj += (double)x[j * D + e] * x[j * D + e];
                }
                if (fabs(dx - dr) > 1e-5 * sqrt(ni * nj))
                    TU_FAIL("<Rx%lld, Rx%lld> = %.9g, <x, y> = %.9g", (long long)i, (long long)j,
                            dr, dx);
            }
        /* the reference rotation is orthogonal too, in double */
        int8_t s[256];
        double xd[256], yd[256];
        double nx = 0.0, ny = 0.0;
        for (int64_t e = 0; e < D; e++) {
            xd[e] = x[e];
            nx += xd[e] * xd[e];
        }
        if (is_dense(D)) {
            double *Rl = (double *)tu_malloc((size_t)(D * D) * sizeof(double));
            double *Rr = ref_dense(42, D);
            TU_CHECK_OK(NULL, clkv_pariskv_rotation_matrix(42, D, Rl));
            for (int64_t i = 0; i < D; i++)
                for (int64_t j = 0; j < D; j++) {
                    double dot = 0.0;
                    for (int64_t e = 0; e < D; e++)
                        dot += Rl[i * D + e] * Rl[j * D + e];
                    if (fabs(dot - (i == j ? 1.0 : 0.0)) > 1e-5)
                        TU_FAIL("(R R^T)[%lld][%lld] = %.17g", (long long)i, (long long)j, dot);
                    if (fabs(Rl[i * D + j] - Rr[i * D + j]) > 1e-9)
                        TU_FAIL("R[%lld][%lld] = %.17g, reference (Gram-Schmidt) %.17g",
                                (long long)i, (long long)j, Rl[i * D + j], Rr[i * D + j]);
                }
            ref_pariskv_apply(D, Rr, xd, yd);
            /* a different seed gives a different matrix */
            TU_CHECK_OK(NULL, clkv_pariskv_rotation_matrix(43, D, Rl));
            assert_true(fabs(Rl[0] - Rr[0]) > 1e-6 || fabs(Rl[1] - Rr[1]) > 1e-6);
            free(Rl);
            free(Rr);
        } else {
            ref_pariskv_signs(42, D, s);
            ref_pariskv_rotate(D, s, xd, yd);
        }
        for (int64_t e = 0; e < D; e++)
            ny += yd[e] * yd[e];
        assert_true(fabs(nx - ny) <= 1e-12 * nx);
        tu_release(a.q.buf);
        tu_release(a.q_rot.buf);
        tu_release(a.q_norm.buf);
        free(x);
        free(r);
    }
    tu_set_case("%s", "");
}

/* ------------------------------------------------------------------------------------ */
/* Key encoding                                                                         */
/* ------------------------------------------------------------------------------------ */

typedef struct ecase {
    const char *name;
    int64_t B, Hkv, L, D;
    int m;
    clkv_dtype kdt, wdt;
    tu_layout layout;
    int has_lengths;
    int32_t lens[3];
    int levels_mode; /* 0 default, 1 computed_m8, 2 explicit published table */
    int explicit_signs;
} ecase;

/* clang-format off */
static const ecase g_ecases[] = {
    {"enc_d64_f32_m8_hnd", 1, 2, 37, 64, 8, F32, F32, TU_HND, 0, {0}, 0, 0},
    {"enc_d128_f16_m8_nhd_b3_lengths_wf16", 3, 2, 29, 128, 8, F16, F16, TU_NHD, 1, {29, 5, 0}, 0, 0},
    {"enc_d256_bf16_m8_hnd_b3_lengths", 3, 1, 20, 256, 8, BF16, F32, TU_HND, 1, {7, 20, 13}, 0, 0},
    {"enc_d128_bf16_m4_nhd_wbf16", 1, 3, 16, 128, 4, BF16, BF16, TU_NHD, 0, {0}, 0, 1},
    {"enc_d64_f16_m2_hnd_b3", 3, 1, 12, 64, 2, F16, F32, TU_HND, 0, {0}, 0, 0},
    {"enc_d256_f32_m8_nhd_computed_signs", 1, 2, 14, 256, 8, F32, F32, TU_NHD, 0, {0}, 1, 1},
    {"enc_d128_f32_m8_hnd_b3_explicit_levels", 3, 2, 40, 128, 8, F32, F32, TU_HND, 1, {40, 1, 33}, 2, 0},
    /* dense rotation (D not a power of two) */
    {"enc_d96_f32_m8_dense_b3_lengths", 3, 2, 30, 96, 8, F32, F32, TU_HND, 1, {30, 7, 0}, 0, 0},
    {"enc_d96_bf16_m6_dense_nhd_wbf16", 1, 3, 24, 96, 6, BF16, BF16, TU_NHD, 0, {0}, 0, 0},
    {"enc_d160_f16_m8_dense_wf16", 1, 2, 33, 160, 8, F16, F16, TU_HND, 0, {0}, 0, 0},
    {"enc_d160_f32_m4_dense_nhd_b3_computed", 3, 1, 20, 160, 4, F32, F32, TU_NHD, 1, {20, 19, 1}, 1, 0},
    /* 26200 rows: more than one 32 MiB chunk of X and Y (26052 rows at D = 160) */
    {"enc_d160_bf16_m8_dense_two_chunks", 1, 2, 13100, 160, 8, BF16, F32, TU_HND, 0, {0}, 0, 0},
};
/* clang-format on */

/* Token i of a (b, h): */
static void gen_key(tu_rng *r, const ecase *c, const int8_t *signs, int64_t i, float *k) {
    const int64_t D = c->D;
    const int kind = (int)(i % 7);
    if (kind == 3) { /* zero key */
        memset(k, 0, (size_t)D * sizeof(float));
        return;
    }
    if (kind == 5 && !is_dense(D)) {
        /* k = diag(s) H e-combination inside block 0 (or the last block): H diag(s) k =
         * D * coef, so every other block of k~ is exactly zero; entries are small
         * integers, exact in every dtype. */
        int coef[8];
        const int m = c->m;
        const int64_t blk = (i / 7) % 2 ? 0 : D / m - 1;
        for (int j = 0; j < m; j++)
            coef[j] = (int)tu_rng_int(r, -2, 2);
        coef[0] = coef[0] == 0 ? 1 : coef[0];
        for (int64_t e = 0; e < D; e++) {
            int v = 0;
            for (int j = 0; j < m; j++) {
                const int64_t col = blk * m + j;
                uint64_t pc = (uint64_t)(e & col);
                int par = 0;
                while (pc) {
                    par ^= 1;
                    pc &= pc - 1;
                }
                v += par ? -coef[j] : coef[j];
            }
            k[e] = (float)(signs[e] * v);
        }
        return;
    }
    double scale = 1.0;
    if (i % 11 == 2)
        scale = c->kdt == F32 ? 1e-25 : 1e-3;
    else if (i % 13 == 4)
        scale = c->kdt == F32 ? 1e25 : 1e3;
    tu_fill_normal(r, k, (size_t)D, 0.0, scale);
    if (i % 5 == 1) /* one dominant channel (outlier) */
        k[(i * 37) % D] *= 20.0f;
}

/* |u| within f32 error of a threshold, or u of zero: SRHT 1e-6 / 1e-7; the dense
 * rotation's f32 GEMM (R rounded to f32, D-term sums) allows 1e-4. */
static int near_threshold(double u, const float *tau, int dense) {
    if (fabs(u) <= (dense ? 1e-4 : 1e-7))
        return 1;
    for (int t = 0; t < 7; t++)
        if (fabs(fabs(u) - (double)tau[t]) <= (dense ? 1e-4 : 1e-6))
            return 1;
    return 0;
}

/* Fill with byte `fill` (FILL2) or the poison pattern (fill < 0). */
static void fill_buffer(cl_mem buf, int fill) {
    const size_t n = tu_buffer_size(buf);
    if (fill < 0) {
        tu_buffer_poison(g_ctx, buf, 0, n);
        return;
    }
    uint8_t *tmp = (uint8_t *)tu_malloc(n);
    memset(tmp, fill, n);
    tu_buffer_write(g_ctx, buf, 0, tmp, n);
    free(tmp);
}

/* Byte mask of the elements of rows (b, h, i) with encoded[b*L + i] over [B,Hkv,L,X]. */
static uint8_t *element_mask(const clkv_tensor *t, const uint8_t *encoded, size_t nbytes) {
    uint8_t *mask = (uint8_t *)tu_calloc(nbytes, 1);
    const size_t es = tu_dtype_size(t->dtype);
    for (int64_t b = 0; b < t->dims[0]; b++)
        for (int64_t h = 0; h < t->dims[1]; h++)
            for (int64_t i = 0; i < t->dims[2]; i++) {
                if (!encoded[b * t->dims[2] + i])
                    continue;
                for (int64_t x = 0; x < t->dims[3]; x++) {
                    const size_t off =
                        (size_t)t->offset +
                        (size_t)(b * t->strides[0] + h * t->strides[1] + i * t->strides[2] + x) *
                            es;
                    memset(mask + off, 1, es);
                }
            }
    return mask;
}

/* Run 1 (poison fill, bulk) vs run 2 (FILL2, incremental): elements equal, rest intact. */
static void check_two_runs(const clkv_tensor *t1, const clkv_tensor *t2, const uint8_t *encoded,
                           const char *what) {
    size_t n1, n2;
    uint8_t *a = tu_buffer_read_all(g_ctx, t1->buf, &n1);
    uint8_t *b = tu_buffer_read_all(g_ctx, t2->buf, &n2);
    assert_int_equal(n1, n2);
    uint8_t *mask = element_mask(t1, encoded, n1);
    for (size_t i = 0; i < n1; i++) {
        if (mask[i] && a[i] != b[i])
            TU_FAIL("%s: byte %zu differs between bulk (0x%02x) and incremental (0x%02x) "
                    "encoding (or was not written)",
                    what, i, a[i], b[i]);
        if (!mask[i] && (a[i] != tu_poison_byte(i) || b[i] != FILL2))
            TU_FAIL("%s: byte %zu outside the encoded rows was written (0x%02x / 0x%02x)", what, i,
                    a[i], b[i]);
    }
    free(a);
    free(b);
    free(mask);
}

static void run_encode_case(void **state) {
    const ecase *c = (const ecase *)*state;
    const int64_t B = c->B, H = c->Hkv, L = c->L, D = c->D, m = c->m, nblk = D / m, nc = 1 << m;
    tu_rng rng;
    tu_set_case("%s", c->name);
    tu_rng_seed(&rng, tu_seed(DEFAULT_SEED), (uint64_t)(uintptr_t)(c - g_ecases) + 1);

    int8_t signs[256];
    const uint64_t seed = 0xABCD0000ull + (uint64_t)D;
    if (c->explicit_signs)
        for (int j = 0; j < D; j++)
            signs[j] = (tu_rng_u64(&rng) >> 40) & 1 ? -1 : 1;
    else
        TU_CHECK_OK(NULL, clkv_pariskv_signs_from_seed(seed, D, signs));
    clkv_pariskv_levels lv;
    if (c->levels_mode == 1)
        TU_CHECK_OK(NULL, clkv_pariskv_levels_compute((int32_t)m, &lv));
    else
        TU_CHECK_OK(NULL, clkv_pariskv_levels_default((int32_t)m, 0, &lv));

    const size_t nk = (size_t)(B * H * L * D);
    float *k = (float *)tu_malloc(nk * sizeof(float));
    for (int64_t bh = 0; bh < B * H; bh++)
        for (int64_t i = 0; i < L; i++)
            gen_key(&rng, c, signs, i, k + (bh * L + i) * D);
    tu_round_array(c->kdt, k, nk);

    uint8_t *encoded = (uint8_t *)tu_calloc((size_t)(B * L), 1);
    int32_t lens[3];
    for (int64_t b = 0; b < B; b++) {
        lens[b] = c->has_lengths ? c->lens[b] : (int32_t)L;
        for (int64_t i = 0; i < lens[b]; i++)
            encoded[b * L + i] = 1;
    }

    const int64_t od[4] = {B, H, L, nblk}, cd[4] = {B, H, L, D / 2}, nd[4] = {B, H, nblk, nc};
    const int64_t lb[1] = {B};
    clkv_tensor kt = tu_kv_tensor_offset(g_ctx, k, c->kdt, B, H, L, D, c->layout, 64);
    clkv_tensor lt =
        c->has_lengths ? tu_tensor_upload_i32(g_ctx, lens, 1, lb, 4, 4) : clkv_tensor_none();
    clkv_tensor ids[2], codes[2], wts[2], cnt[2];
    const size_t ncnt = (size_t)(B * H * nblk * nc);
    uint32_t *cnt0 = (uint32_t *)tu_malloc(ncnt * 4);
    for (size_t i = 0; i < ncnt; i++)
        cnt0[i] = (uint32_t)(i % 5); /* run 1 counts start from non-zero values */
    for (int r = 0; r < 2; r++) {
        ids[r] = tu_tensor_alloc(g_ctx, CLKV_U8, 4, od, 3, 5);
        codes[r] = tu_tensor_alloc(g_ctx, CLKV_U8, 4, cd, 1, 7);
        wts[r] = tu_tensor_alloc(g_ctx, c->wdt, 4, od, 8 * tu_dtype_size(c->wdt), 6);
        cnt[r] = tu_tensor_alloc(g_ctx, CLKV_U32, 4, nd, 8, 8);
        if (r == 1) {
            fill_buffer(ids[r].buf, FILL2);
            fill_buffer(codes[r].buf, FILL2);
            fill_buffer(wts[r].buf, FILL2);
            fill_buffer(cnt[r].buf, FILL2);
        } else {
            tu_buffer_write(g_ctx, cnt[r].buf, 8, cnt0, ncnt * 4);
        }
    }

    clkv_pariskv_encode_args a = CLKV_PARISKV_ENCODE_ARGS_INIT;
    a.k = kt;
    a.lengths = lt;
    a.m = (int32_t)m;
    a.seed = seed;
    a.signs = c->explicit_signs ? signs : NULL;
    a.computed_m8 = c->levels_mode == 1;
    clkv_pariskv_levels pub;
    clkv_pariskv_levels_published_m8(&pub);
    a.levels = c->levels_mode == 2 ? &pub : NULL;

    /* run 1: bulk, with an event */
    a.ids = ids[0];
    a.codes = codes[0];
    a.weights = wts[0];
    a.counts = cnt[0];
    cl_event ev = NULL;
    const double t0 = tu_now();
    TU_CHECK_OK(g_ctx, clkv_pariskv_encode(g_ctx, &a, &ev));
    assert_non_null(ev);
    TU_CHECK_CL(clWaitForEvents(1, &ev));
    clReleaseEvent(ev);
    const double t1 = tu_now();
    /* run 2: incremental over [0, 1), [1, L/3), [L/3, L/3) (empty), [L/3, L) */
    a.ids = ids[1];
    a.codes = codes[1];
    a.weights = wts[1];
    a.counts = cnt[1];
    const int64_t cuts[5] = {0, 1, L / 3, L / 3, L};
    for (int s = 0; s < 4; s++) {
        a.start = cuts[s];
        a.end = s == 3 ? -1 : cuts[s + 1];
        TU_CHECK_OK(g_ctx, clkv_pariskv_encode(g_ctx, &a, NULL));
    }
    TU_CHECK_CL(clFinish(clkv_context_queue(g_ctx)));

    check_two_runs(&ids[0], &ids[1], encoded, "ids");
    check_two_runs(&codes[0], &codes[1], encoded, "codes");
    check_two_runs(&wts[0], &wts[1], encoded, "weights");

    /* values vs the reference */
    const size_t nid = (size_t)(B * H * L * nblk), ncd = (size_t)(B * H * L * D / 2);
    float *gid = (float *)tu_malloc(nid * sizeof(float));
    float *gcd = (float *)tu_malloc(ncd * sizeof(float));
    float *gw = (float *)tu_malloc(nid * sizeof(float));
    tu_tensor_read(g_ctx, &ids[0], gid);
    tu_tensor_read(g_ctx, &codes[0], gcd);
    tu_tensor_read(g_ctx, &wts[0], gw);
    double *u = (double *)tu_malloc((size_t)D * sizeof(double));
    double *rb = (double *)tu_malloc((size_t)nblk * sizeof(double));
    double *rw = (double *)tu_malloc((size_t)nblk * sizeof(double));
    uint8_t *rid = (uint8_t *)tu_malloc((size_t)nblk), *rcd = (uint8_t *)tu_malloc((size_t)D / 2);
    uint8_t *dcd = (uint8_t *)tu_malloc((size_t)D / 2);
    size_t near_mismatch = 0, compared = 0, zero_blocks = 0;
    const int dense = is_dense(D);
    double *Rd = dense ? ref_dense(seed, D) : NULL;
    const tu_tol wtol = tu_tol_for(c->wdt);
    uint32_t *hist = (uint32_t *)tu_calloc(ncnt, 4);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < L; i++) {
                if (!encoded[b * L + i])
                    continue;
                const int64_t row = (b * H + h) * L + i;
                double knorm;
                if (dense)
                    ref_pariskv_encode_key_dense(D, (int)m, Rd, lv.tau, lv.a, k + row * D, &knorm,
                                                 u, rb, rid, rcd, rw);
                else
                    ref_pariskv_encode_key(D, (int)m, signs, lv.tau, lv.a, k + row * D, &knorm, u,
                                           rb, rid, rcd, rw);
                for (int64_t x = 0; x < D / 2; x++)
                    dcd[x] = (uint8_t)gcd[row * (D / 2) + x];
                for (int64_t blk = 0; blk < nblk; blk++) {
                    const unsigned gi = (unsigned)gid[row * nblk + blk];
                    hist[((b * H + h) * nblk + blk) * nc + gi]++;
                    zero_blocks += rb[blk] == 0.0;
                    int block_near = 0;
                    for (int j = 0; j < m; j++) {
                        const int64_t cc = blk * m + j;
                        const unsigned gn = (dcd[cc / 2] >> ((cc & 1) * 4)) & 15u;
                        const unsigned rn = (rcd[cc / 2] >> ((cc & 1) * 4)) & 15u;
                        const unsigned gbit = (gi >> j) & 1u, rbit = (rid[blk] >> j) & 1u;
                        compared++;
                        if (gn == rn && gbit == rbit)
                            continue;
                        if (!near_threshold(u[cc], lv.tau, dense))
                            TU_FAIL("b=%lld h=%lld token %lld block %lld coord %d: nibble 0x%x "
                                    "(id bit %u), reference 0x%x (id bit %u), u = %.9f",
                                    (long long)b, (long long)h, (long long)i, (long long)blk, j, gn,
                                    gbit, rn, rbit, u[cc]);
                        if ((gn >> 3) != gbit)
                            TU_FAIL("token %lld block %lld coord %d: id bit %u disagrees with "
                                    "the code's sign bit %u",
                                    (long long)i, (long long)blk, j, gbit, gn >> 3);
                        near_mismatch++;
                        block_near = 1;
                    }
                    if (rb[blk] == 0.0 &&
                        (gi != (unsigned)(nc - 1) || gw[row * nblk + blk] != 0.0f))
                        TU_FAIL("token %lld block %lld: zero block gives id %u, w %g", (long long)i,
                                (long long)blk, gi, (double)gw[row * nblk + blk]);
                    const double want = block_near
                                            ? ref_pariskv_weight((int)m, lv.a, knorm, rb[blk],
                                                                 u + blk * m, dcd, blk)
                                            : rw[blk];
                    const double wr = (double)tu_round_dtype(c->wdt, (float)want);
                    const double got = gw[row * nblk + blk];
                    /* relative tolerance: weights span 1e-25 .. 1e27 */
                    if (!(fabs(got - want) <=
                          wtol.rtol * fabs(want) + fabs(wr - want) +
                              wtol.atol * (fabs(want) < 1.0 ? fabs(want) : 1.0)))
                        TU_FAIL("token %lld block %lld: weight %.9g, reference %.9g", (long long)i,
                                (long long)blk, got, want);
                }
            }
    /* counts: run 1 = initial + histogram of the device ids, run 2 = histogram */
    uint32_t *gc = (uint32_t *)tu_malloc(ncnt * 4);
    for (int r = 0; r < 2; r++) {
        tu_buffer_read(g_ctx, cnt[r].buf, 8, gc, ncnt * 4);
        for (size_t x = 0; x < ncnt; x++)
            if (gc[x] != hist[x] + (r == 0 ? cnt0[x] : 0))
                TU_FAIL("counts (%s) [%zu] = %u, expected %u", r ? "incremental" : "bulk", x, gc[x],
                        hist[x] + (r == 0 ? cnt0[x] : 0));
        size_t nb;
        uint8_t *img = tu_buffer_read_all(g_ctx, cnt[r].buf, &nb);
        for (size_t x = 0; x < 8; x++)
            if (img[x] != (r ? FILL2 : tu_poison_byte(x)) ||
                img[nb - 1 - x] != (r ? FILL2 : tu_poison_byte(nb - 1 - x)))
                TU_FAIL("counts (%s): guard bytes written", r ? "incremental" : "bulk");
        free(img);
    }
    if (zero_blocks == 0)
        TU_FAIL("the data has no zero blocks (test generator broken)");
    printf("[ info     ] %s: %zu coordinates, %zu near-threshold code differences, %zu zero "
           "blocks, bulk encode %.3f s\n",
           c->name, compared, near_mismatch, zero_blocks, t1 - t0);
    if (near_mismatch * 1000 > compared)
        TU_FAIL("%zu of %zu codes differ near thresholds: too many", near_mismatch, compared);

    for (int r = 0; r < 2; r++) {
        tu_release(ids[r].buf);
        tu_release(codes[r].buf);
        tu_release(wts[r].buf);
        tu_release(cnt[r].buf);
    }
    tu_release(kt.buf);
    tu_release(lt.buf);
    free(k);
    free(encoded);
    free(cnt0);
    free(gid);
    free(gcd);
    free(gw);
    free(u);
    free(rb);
    free(rw);
    free(rid);
    free(rcd);
    free(dcd);
    free(hist);
    free(gc);
    free(Rd);
    tu_set_case("%s", "");
}

/* ------------------------------------------------------------------------------------ */
/* Bad inputs                                                                           */
/* ------------------------------------------------------------------------------------ */

#define VB 2
#define VH 2
#define VL 8
#define VD 64

static void expect_status_msg(const char *label, clkv_context *ctx, clkv_status got,
                              clkv_status want, const char *name) {
    if (got != want)
        TU_FAIL("%s: returned %s (%d), expected %s (%d); message \"%s\"", label,
                clkv_status_string(got), got, clkv_status_string(want), want, clkv_last_error(ctx));
    if (name && !tu_msg_names(clkv_last_error(ctx), name))
        TU_FAIL("%s: message \"%s\" does not name %s", label, clkv_last_error(ctx), name);
}

typedef struct vfix {
    cl_mem k, len, ids, codes, w, cnt, q, qr, qn;
} vfix;

static clkv_pariskv_encode_args enc_base(const vfix *f) {
    clkv_pariskv_encode_args a = CLKV_PARISKV_ENCODE_ARGS_INIT;
    a.k = clkv_tensor_4d(f->k, F32, VB, VH, VL, VD);
    a.lengths = clkv_tensor_1d(f->len, CLKV_I32, VB);
    a.ids = clkv_tensor_4d(f->ids, CLKV_U8, VB, VH, VL, VD / 8);
    a.codes = clkv_tensor_4d(f->codes, CLKV_U8, VB, VH, VL, VD / 2);
    a.weights = clkv_tensor_4d(f->w, F32, VB, VH, VL, VD / 8);
    a.counts = clkv_tensor_4d(f->cnt, CLKV_U32, VB, VH, VD / 8, 256);
    return a;
}

static void enc_reject(const char *label, const vfix *f, const clkv_pariskv_encode_args *a,
                       clkv_status want, const char *name) {
    cl_mem outs[4] = {f->ids, f->codes, f->w, f->cnt};
    for (int i = 0; i < 4; i++)
        tu_buffer_poison(g_ctx, outs[i], 0, tu_buffer_size(outs[i]));
    cl_event ev = NULL;
    tu_set_case("%s", label);
    expect_status_msg(label, g_ctx, clkv_pariskv_encode(g_ctx, a, &ev), want, name);
    if (ev) {
        clReleaseEvent(ev);
        TU_FAIL("%s: rejected call returned an event", label);
    }
    TU_CHECK_CL(clFinish(clkv_context_queue(g_ctx)));
    for (int i = 0; i < 4; i++)
        tu_assert_buffer_poison(g_ctx, outs[i], label);
    tu_set_case("%s", "");
}

static void test_bad_inputs(void **state) {
    (void)state;
    vfix f;
    const size_t nk = (size_t)VB * VH * VL * 256 * 2;
    float *tmp = (float *)tu_calloc(nk, sizeof(float));
    for (size_t i = 0; i < nk; i++)
        tmp[i] = (float)((i * 7) % 13) - 6.0f;
    int32_t lens[VB] = {VL, 3};
    f.k = tu_buffer_from_host(g_ctx, tmp, nk * 4);
    f.len = tu_buffer_from_host(g_ctx, lens, sizeof lens);
    f.ids = tu_buffer_create(g_ctx, (size_t)VB * VH * VL * VD / 8);
    f.codes = tu_buffer_create(g_ctx, (size_t)VB * VH * VL * VD / 2);
    f.w = tu_buffer_create(g_ctx, (size_t)VB * VH * VL * VD / 8 * 4);
    f.cnt = tu_buffer_create(g_ctx, (size_t)VB * VH * VD / 8 * 256 * 4);
    f.q = tu_buffer_from_host(g_ctx, tmp, (size_t)VB * 8 * 256 * 4);
    f.qr = tu_buffer_create(g_ctx, (size_t)VB * VH * VD * 4);
    f.qn = tu_buffer_create(g_ctx, (size_t)VB * VH * 4);

    /* host functions */
    clkv_pariskv_levels l;
    int8_t s[64];
    expect_status_msg("levels_compute(NULL)", NULL, clkv_pariskv_levels_compute(8, NULL),
                      CLKV_ERR_ARG_NULL, "out");
    expect_status_msg("levels_compute(m=1)", NULL, clkv_pariskv_levels_compute(1, &l),
                      CLKV_ERR_ARG_RANGE, "m");
    expect_status_msg("levels_compute(m=9)", NULL, clkv_pariskv_levels_compute(9, &l),
                      CLKV_ERR_ARG_RANGE, "m");
    expect_status_msg("levels_default(NULL)", NULL, clkv_pariskv_levels_default(8, 0, NULL),
                      CLKV_ERR_ARG_NULL, "out");
    expect_status_msg("levels_default(m=0)", NULL, clkv_pariskv_levels_default(0, 0, &l),
                      CLKV_ERR_ARG_RANGE, "m");
    expect_status_msg("signs(NULL)", NULL, clkv_pariskv_signs_from_seed(1, 64, NULL),
                      CLKV_ERR_ARG_NULL, "signs");
    expect_status_msg("signs(D=0)", NULL, clkv_pariskv_signs_from_seed(1, 0, s), CLKV_ERR_ARG_RANGE,
                      "D");
    clkv_pariskv_levels_published_m8(NULL); /* accepted, no effect */

    /* baseline is valid */
    clkv_pariskv_encode_args a = enc_base(&f), b;
    TU_CHECK_OK(g_ctx, clkv_pariskv_encode(g_ctx, &a, NULL));
    TU_CHECK_CL(clFinish(clkv_context_queue(g_ctx)));

    expect_status_msg("encode(ctx NULL)", NULL, clkv_pariskv_encode(NULL, &a, NULL),
                      CLKV_ERR_ARG_NULL, "ctx");
    enc_reject("encode(args NULL)", &f, NULL, CLKV_ERR_ARG_NULL, "args");
    b = a, b.k.buf = NULL, enc_reject("k NULL", &f, &b, CLKV_ERR_ARG_NULL, "k");
    b = a, b.ids.buf = NULL, enc_reject("ids NULL", &f, &b, CLKV_ERR_ARG_NULL, "ids");
    b = a, b.codes.buf = NULL, enc_reject("codes NULL", &f, &b, CLKV_ERR_ARG_NULL, "codes");
    b = a, b.weights.buf = NULL, enc_reject("weights NULL", &f, &b, CLKV_ERR_ARG_NULL, "weights");
    b = a, b.k.dtype = CLKV_I32, enc_reject("k i32", &f, &b, CLKV_ERR_ARG_DTYPE, "k");
    b = a, b.ids.dtype = CLKV_F32, enc_reject("ids f32", &f, &b, CLKV_ERR_ARG_DTYPE, "ids");
    b = a, b.codes.dtype = CLKV_U32, enc_reject("codes u32", &f, &b, CLKV_ERR_ARG_DTYPE, "codes");
    b = a, b.weights.dtype = CLKV_U8,
    enc_reject("weights u8", &f, &b, CLKV_ERR_ARG_DTYPE, "weights");
    b = a, b.counts.dtype = CLKV_I32,
    enc_reject("counts i32", &f, &b, CLKV_ERR_ARG_DTYPE, "counts");
    b = a, b.lengths.dtype = CLKV_U32,
    enc_reject("lengths u32", &f, &b, CLKV_ERR_ARG_DTYPE, "lengths");
    b = a, b.ids.dims[3] = 7, enc_reject("ids nblocks", &f, &b, CLKV_ERR_ARG_SHAPE, "ids");
    b = a, b.codes.dims[2] = 4, enc_reject("codes L", &f, &b, CLKV_ERR_ARG_SHAPE, "codes");
    b = a, b.weights.dims[0] = 1, enc_reject("weights B", &f, &b, CLKV_ERR_ARG_SHAPE, "weights");
    b = a, b.counts.dims[3] = 128, enc_reject("counts 2^m", &f, &b, CLKV_ERR_ARG_SHAPE, "counts");
    b = a, b.lengths.dims[0] = 1, enc_reject("lengths B", &f, &b, CLKV_ERR_ARG_SHAPE, "lengths");
    b = a, b.m = 3, enc_reject("m=3 does not divide 64", &f, &b, CLKV_ERR_ARG_SHAPE, "m");
    b = a, b.m = 9, enc_reject("m=9", &f, &b, CLKV_ERR_ARG_RANGE, "m");
    b = a, b.m = 1, enc_reject("m=1", &f, &b, CLKV_ERR_ARG_RANGE, "m");
    int8_t oksig[96];
    for (int j = 0; j < 96; j++)
        oksig[j] = 1;
    b = a, b.k = clkv_tensor_4d(f.k, F32, VB, VH, VL, 96), b.signs = oksig;
    enc_reject("D=96 (dense) with explicit signs", &f, &b, CLKV_ERR_ARG_RANGE, "signs");
    b = a, b.k = clkv_tensor_4d(f.k, F32, VB, VH, VL, 96), b.m = 3;
    enc_reject("D=96 m=3 (odd)", &f, &b, CLKV_ERR_ARG_SHAPE, "m");
    b = a, b.k = clkv_tensor_4d(f.k, F32, VB, VH, VL, 512);
    enc_reject("D=512 (power of two, no SRHT kernel)", &f, &b, CLKV_ERR_ARG_UNSUPPORTED, "k");
    b = a, b.k = clkv_tensor_4d(f.k, F32, VB, VH, VL, 1000);
    b.k.strides[0] = b.k.strides[1] = b.k.strides[2] = 0;
    enc_reject("D=1000 (dense above 512)", &f, &b, CLKV_ERR_ARG_UNSUPPORTED, "k");
    {
        double Rtmp[4];
        expect_status_msg("rotation_matrix(R NULL)", NULL,
                          clkv_pariskv_rotation_matrix(1, 96, NULL), CLKV_ERR_ARG_NULL, "R");
        expect_status_msg("rotation_matrix(D=0)", NULL, clkv_pariskv_rotation_matrix(1, 0, Rtmp),
                          CLKV_ERR_ARG_RANGE, "D");
        expect_status_msg("rotation_matrix(D=513)", NULL,
                          clkv_pariskv_rotation_matrix(1, 513, Rtmp), CLKV_ERR_ARG_RANGE, "D");
    }
    b = a, b.k = clkv_tensor_4d(f.k, F32, VB, VH, VL, 32);
    enc_reject("D=32", &f, &b, CLKV_ERR_ARG_UNSUPPORTED, "k");
    b = a, b.start = 5, b.end = 4, enc_reject("start > end", &f, &b, CLKV_ERR_ARG_RANGE, "start");
    b = a, b.start = -1, enc_reject("start < 0", &f, &b, CLKV_ERR_ARG_RANGE, "start");
    b = a, b.end = VL + 1, enc_reject("end > L", &f, &b, CLKV_ERR_ARG_RANGE, "end");
    b = a, b.end = -2, enc_reject("end = -2", &f, &b, CLKV_ERR_ARG_RANGE, "end");
    int8_t badsig[VD];
    for (int j = 0; j < VD; j++)
        badsig[j] = 1;
    badsig[17] = 0;
    b = a, b.signs = badsig, enc_reject("sign 0", &f, &b, CLKV_ERR_ARG_RANGE, "signs");
    clkv_pariskv_levels bl;
    clkv_pariskv_levels_published_m8(&bl);
    bl.m = 4;
    b = a, b.levels = &bl, enc_reject("levels m", &f, &b, CLKV_ERR_ARG_RANGE, "levels");
    clkv_pariskv_levels_published_m8(&bl);
    bl.tau[3] = bl.tau[2];
    b = a, b.levels = &bl,
    enc_reject("levels not increasing", &f, &b, CLKV_ERR_ARG_RANGE, "levels");
    clkv_pariskv_levels_published_m8(&bl);
    bl.a[0] = NAN;
    b = a, b.levels = &bl, enc_reject("levels NaN", &f, &b, CLKV_ERR_ARG_RANGE, "levels");
    b = a, b.ids.strides[3] = 2, enc_reject("ids stride", &f, &b, CLKV_ERR_ARG_STRIDE, "ids");
    b = a, b.weights.offset = 2,
    enc_reject("weights offset", &f, &b, CLKV_ERR_ARG_ALIGNMENT, "weights");
    b = a, b.codes.offset = 1,
    enc_reject("codes buffer size", &f, &b, CLKV_ERR_ARG_BUFFER_SIZE, "codes");
    b = a, b.k.strides[0] = INT64_MAX / 2,
    enc_reject("k overflow", &f, &b, CLKV_ERR_ARG_OVERFLOW, "k");

    /* query transform */
    clkv_pariskv_query_args q = CLKV_PARISKV_QUERY_ARGS_INIT, p;
    q.q = clkv_tensor_3d(f.q, F32, VB, 8, VD);
    q.q_rot = clkv_tensor_3d(f.qr, F32, VB, VH, VD);
    q.q_norm = clkv_tensor_2d(f.qn, F32, VB, VH);
    TU_CHECK_OK(g_ctx, clkv_pariskv_query_transform(g_ctx, &q, NULL));
    TU_CHECK_CL(clFinish(clkv_context_queue(g_ctx)));
    struct {
        const char *label;
        clkv_pariskv_query_args a;
        clkv_status want;
        const char *name;
    } qc[14];
    int nq = 0;
#define QBAD(lbl, mut, w, nm)                                                                      \
    do {                                                                                           \
        p = q;                                                                                     \
        mut;                                                                                       \
        qc[nq].label = lbl;                                                                        \
        qc[nq].a = p;                                                                              \
        qc[nq].want = w;                                                                           \
        qc[nq].name = nm;                                                                          \
        nq++;                                                                                      \
    } while (0)
    QBAD("q NULL", p.q.buf = NULL, CLKV_ERR_ARG_NULL, "q");
    QBAD("q_rot NULL", p.q_rot.buf = NULL, CLKV_ERR_ARG_NULL, "q_rot");
    QBAD("q u8", p.q.dtype = CLKV_U8, CLKV_ERR_ARG_DTYPE, "q");
    QBAD("q_rot f16", p.q_rot.dtype = F16, CLKV_ERR_ARG_DTYPE, "q_rot");
    QBAD("q_norm i32", p.q_norm.dtype = CLKV_I32, CLKV_ERR_ARG_DTYPE, "q_norm");
    QBAD("Hq % Hkv", p.q.dims[1] = 7, CLKV_ERR_ARG_SHAPE, "q");
    QBAD("q_rot D", p.q_rot.dims[2] = 32, CLKV_ERR_ARG_SHAPE, "q_rot");
    QBAD("q_norm Hkv", p.q_norm.dims[1] = 1, CLKV_ERR_ARG_SHAPE, "q_norm");
    QBAD("q D=32", (p.q.dims[2] = 32, p.q_rot.dims[2] = 32), CLKV_ERR_ARG_UNSUPPORTED, "q");
    QBAD("q D=48 (dense) with signs", (p.q.dims[2] = 48, p.q_rot.dims[2] = 48, p.signs = oksig),
         CLKV_ERR_ARG_RANGE, "signs");
    QBAD("q signs", p.signs = badsig, CLKV_ERR_ARG_RANGE, "signs");
    QBAD("q_rot buffer size", p.q_rot.dims[0] = 3, CLKV_ERR_ARG_BUFFER_SIZE, "q_rot");
    QBAD("q_norm offset", p.q_norm.offset = 2, CLKV_ERR_ARG_ALIGNMENT, "q_norm");
    expect_status_msg("query(ctx NULL)", NULL, clkv_pariskv_query_transform(NULL, &q, NULL),
                      CLKV_ERR_ARG_NULL, "ctx");
    tu_buffer_poison(g_ctx, f.qr, 0, tu_buffer_size(f.qr));
    tu_buffer_poison(g_ctx, f.qn, 0, tu_buffer_size(f.qn));
    expect_status_msg("query(args NULL)", g_ctx, clkv_pariskv_query_transform(g_ctx, NULL, NULL),
                      CLKV_ERR_ARG_NULL, "args");
    for (int i = 0; i < nq; i++) {
        cl_event ev = NULL;
        tu_set_case("%s", qc[i].label);
        expect_status_msg(qc[i].label, g_ctx, clkv_pariskv_query_transform(g_ctx, &qc[i].a, &ev),
                          qc[i].want, qc[i].name);
        assert_null(ev);
    }
    TU_CHECK_CL(clFinish(clkv_context_queue(g_ctx)));
    tu_assert_buffer_poison(g_ctx, f.qr, "q_rot after rejected calls");
    tu_assert_buffer_poison(g_ctx, f.qn, "q_norm after rejected calls");
    tu_set_case("%s", "");

    cl_mem all[9] = {f.k, f.len, f.ids, f.codes, f.w, f.cnt, f.q, f.qr, f.qn};
    for (int i = 0; i < 9; i++)
        tu_release(all[i]);
    free(tmp);
}

/* Empty work: B = 0 and an empty token range return OK, an event, and write nothing. */
static void test_empty(void **state) {
    (void)state;
    cl_mem ids = tu_buffer_create(g_ctx, 64), codes = tu_buffer_create(g_ctx, 128),
           w = tu_buffer_create(g_ctx, 64), k = tu_buffer_create(g_ctx, 4 * 64 * 4);
    clkv_pariskv_encode_args a = CLKV_PARISKV_ENCODE_ARGS_INIT;
    a.k = clkv_tensor_4d(k, F32, 1, 1, 4, 64);
    a.ids = clkv_tensor_4d(ids, CLKV_U8, 1, 1, 4, 8);
    a.codes = clkv_tensor_4d(codes, CLKV_U8, 1, 1, 4, 32);
    a.weights = clkv_tensor_4d(w, F16, 1, 1, 4, 8);
    a.start = 2;
    a.end = 2;
    cl_event ev = NULL;
    TU_CHECK_OK(g_ctx, clkv_pariskv_encode(g_ctx, &a, &ev));
    assert_non_null(ev);
    TU_CHECK_CL(clWaitForEvents(1, &ev));
    clReleaseEvent(ev);
    a.start = 0;
    a.end = -1;
    a.k.dims[0] = a.ids.dims[0] = a.codes.dims[0] = a.weights.dims[0] = 0;
    TU_CHECK_OK(g_ctx, clkv_pariskv_encode(g_ctx, &a, NULL));
    TU_CHECK_CL(clFinish(clkv_context_queue(g_ctx)));
    tu_assert_buffer_poison(g_ctx, ids, "ids");
    tu_assert_buffer_poison(g_ctx, codes, "codes");
    tu_assert_buffer_poison(g_ctx, w, "weights");
    tu_release(ids);
    tu_release(codes);
    tu_release(w);
    tu_release(k);
}

int main(void) {
    tu_suite s = {0};
    tu_suite_add(&s, "levels_lloyd_max", test_levels, NULL);
    tu_suite_add(&s, "levels_default_published", test_levels_default, NULL);
    tu_suite_add(&s, "signs_splitmix64", test_signs, NULL);
    tu_suite_add(&s, "rotation_orthogonal", test_rotation_orthogonal, NULL);
    TU_SUITE_ADD_CASES(&s, g_qcases, run_query_case);
    TU_SUITE_ADD_CASES(&s, g_ecases, run_encode_case);
    tu_suite_add(&s, "empty_work", test_empty, NULL);
    tu_suite_add(&s, "bad_inputs", test_bad_inputs, NULL);
    return tu_suite_run(&s, "pariskv_encode", &g_ctx, DEFAULT_SEED);
}
