/* clkv_attention_window (SPEC §1.2) against the double-precision reference
 * (tests/ref/ref_attention.c, ref_attention_window) on the default device ($CLKV_DEVICE;
 * PoCL CPU in CI), plus the argument validation of clkv_attention_window and
 * clkv_attention_window_workspace_size.
 *
 * Case selection: not the Cartesian product. The nine "matrix" cases form a Latin square
 * over (D, dtype, head config), so every pair of those three factors occurs once; the
 * other factors (B, T in {1, 8, 64, len}, lengths {0, 1, T-1, T, T+1, 100, 4101} mixed in
 * one batch, K/V layout HND/NHD, q/o layout [B,H,T,D] or [B,T,H,D], LSE present/absent,
 * lengths buffer absent, max_length < L, forced split counts, explicit scale, byte
 * offsets, output dtype) are spread over them and over a few extra cases; the "edge"
 * cases cover numerics (logits near +-1024, 1e-20 magnitudes, NaN in the unused cache
 * tail, T > L).
 *
 * Every call: outputs poisoned first, placed at a non-zero byte offset with guard bytes
 * after them; afterwards every element must have been written and every guard byte must
 * still be poison. K/V rows past the valid length hold garbage (1000, or NaN in the
 * *_nan_tail cases) that would change the result if it were read.
 *
 * Reproduce a failure with CLKV_TEST_SEED=<seed printed>.
 */
#include "util/test_util.h"
#include "ref/ref_attention.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_SEED 0xC1C0DE0A11D0ull

typedef enum data_mode {
    DATA_RANDOM = 0, /* q, k, v ~ N(0, 1) */
    DATA_HUGE_POS,   /* logits ~ +1024 +- a few, computed exactly in f32 */
    DATA_HUGE_NEG,   /* logits ~ -1024 +- a few */
    DATA_TINY,       /* q, k, v ~ 1e-20 * N(0, 1) */
} data_mode;

typedef enum tail_mode {
    TAIL_GARBAGE = 0, /* rows past the valid length hold 1000 */
    TAIL_NAN,         /* ... hold NaN */
} tail_mode;

typedef struct wcase {
    const char *name;
    int64_t B, Hq, Hkv, D, L, T;
    clkv_dtype qdt, kvdt, odt;
    tu_layout kv_layout; /* K/V storage */
    tu_layout qo_layout; /* q and o storage: HND [B,H,T,D] or NHD [B,T,H,D] */
    int want_lse;
    int has_lengths;
    int32_t lens[3];
    int64_t max_length; /* -1: default (L) */
    float scale;        /* 0: default */
    int32_t num_splits; /* 0: default */
    int odd_offsets;    /* q, k, v, o at odd element offsets */
    data_mode data;
    tail_mode tail;
} wcase;

#define F32 CLKV_F32
#define F16 CLKV_F16
#define BF16 CLKV_BF16
#define HND TU_HND
#define NHD TU_NHD

/* clang-format off */
static const wcase g_cases[] = {
    /* ---- Latin square over D x dtype x (Hq, Hkv) ---- */
    {"m1_d64_f32_h8x8_T8_len17", 1, 8, 8, 64, 17, 8, F32, F32, F32, HND, HND, 1, 1, {17}, -1,
     0.0f, 0, 0, DATA_RANDOM, TAIL_GARBAGE},
    {"m2_d64_f16_h32x8_b3_T8_len0_7_9_kvnhd_split2", 3, 32, 8, 64, 24, 8, F16, F16, F16, NHD,
     HND, 1, 1, {0, 7, 9}, -1, 0.0f, 2, 0, DATA_RANDOM, TAIL_GARBAGE},
    {"m3_d64_bf16_h14x2_prefill300_nolengths_outf32", 1, 14, 2, 64, 300, 300, BF16, BF16, F32,
     HND, HND, 1, 0, {0}, -1, 0.0f, 0, 0, DATA_RANDOM, TAIL_GARBAGE},
    {"m4_d128_f32_h32x8_b3_T64_len100_63_65_nhd_scale_split5", 3, 32, 8, 128, 128, 64, F32, F32,
     F32, NHD, NHD, 1, 1, {100, 63, 65}, -1, 0.37f, 5, 0, DATA_RANDOM, TAIL_GARBAGE},
    {"m5_d128_f16_h8x2_T64_len4101_outbf16", 1, 8, 2, 128, 4101, 64, F16, F16, BF16, HND, HND, 1,
     1, {4101}, -1, 0.0f, 0, 0, DATA_RANDOM, TAIL_GARBAGE},
    {"m6_d128_bf16_h8x8_b3_T1_len0_1_1000_nhd_split1", 3, 8, 8, 128, 1000, 1, BF16, BF16, BF16,
     NHD, HND, 1, 1, {0, 1, 1000}, -1, 0.0f, 1, 0, DATA_RANDOM, TAIL_GARBAGE},
    {"m7_d256_f32_h14x2_b3_T8_nolengths_maxlen100_L150_odd_outf16", 3, 14, 2, 256, 150, 8, F32,
     F32, F16, HND, HND, 1, 0, {0}, 100, 0.0f, 0, 1, DATA_RANDOM, TAIL_GARBAGE},
    {"m8_d256_f16_h8x8_prefill200_qonhd_scale_nolse", 1, 8, 8, 256, 200, 200, F16, F16, F16, HND,
     NHD, 0, 1, {200}, -1, 0.05f, 0, 0, DATA_RANDOM, TAIL_GARBAGE},
    {"m9_d256_bf16_h32x8_b3_T64_len64_0_200_split3", 3, 32, 8, 256, 200, 64, BF16, BF16, BF16,
     NHD, HND, 1, 1, {64, 0, 200}, -1, 0.0f, 3, 0, DATA_RANDOM, TAIL_GARBAGE},
    /* ---- other factors and interactions ---- */
    {"x1_d128_f32_h32x8_b3_prefill130_len130_1_64", 3, 32, 8, 128, 130, 130, F32, F32, F32, HND,
     HND, 1, 1, {130, 1, 64}, -1, 0.0f, 0, 0, DATA_RANDOM, TAIL_GARBAGE},
    {"x2_d64_qf32_kvf16_outbf16_h14x2_T8_len8", 1, 14, 2, 64, 8, 8, F32, F16, BF16, HND, HND, 1,
     1, {8}, -1, 0.0f, 0, 0, DATA_RANDOM, TAIL_GARBAGE},
    {"x3_d128_f32_h8x8_b3_nolengths_maxlen0", 3, 8, 8, 128, 16, 8, F32, F32, F32, HND, HND, 1, 0,
     {0}, 0, 0.0f, 0, 0, DATA_RANDOM, TAIL_GARBAGE},
    {"x4_d64_bf16_h32x2_G16_T8_len777_qonhd", 1, 32, 2, 64, 777, 8, BF16, BF16, F32, HND, NHD, 1,
     1, {777}, -1, 0.0f, 0, 0, DATA_RANDOM, TAIL_GARBAGE},
    {"x5_d128_f16_h14x2_b2_T16_L10_len10_5", 2, 14, 2, 128, 10, 16, F16, F16, F32, HND, HND, 1,
     1, {10, 5}, -1, 0.0f, 0, 0, DATA_RANDOM, TAIL_GARBAGE},
    {"x6_d64_f32_h8x2_prefill257_split4_odd", 1, 8, 2, 64, 257, 257, F32, F32, F32, NHD, NHD, 1,
     1, {257}, -1, 0.0f, 4, 1, DATA_RANDOM, TAIL_GARBAGE},
    {"x7_d256_bf16_h14x2_b3_T8_len1_8_100_split7_nolse", 3, 14, 2, 256, 100, 8, BF16, BF16, F16,
     HND, HND, 0, 1, {1, 8, 100}, -1, 0.0f, 7, 0, DATA_RANDOM, TAIL_GARBAGE},
    {"x8_d128_bf16_h32x8_b2_T8_lengths_clamped_maxlen300", 2, 32, 8, 128, 400, 8, BF16, BF16,
     BF16, NHD, HND, 1, 1, {400, 299}, 300, 0.0f, 0, 0, DATA_RANDOM, TAIL_GARBAGE},
    {"x9_d64_f16_h8x8_b3_prefill100_len100_7_99_split100000", 3, 8, 8, 64, 100, 100, F16, F16,
     F32, HND, HND, 1, 1, {100, 7, 99}, -1, 0.0f, 100000, 0, DATA_RANDOM, TAIL_GARBAGE},
    /* 16-bit q/K/V at odd offsets: on NVIDIA the tensor-core kernel without cp.async, with
     * 16 rows (4 warps on the keys) + splits + f32 output, and 32 rows + automatic splits */
    {"x10_d128_bf16_h32x8_b2_T4_len300_77_odd_split3_outf32", 2, 32, 8, 128, 300, 4, BF16, BF16,
     F32, HND, HND, 1, 1, {300, 77}, -1, 0.0f, 3, 1, DATA_RANDOM, TAIL_GARBAGE},
    {"x11_d64_f16_h16x4_T8_len1000_odd_kvnhd", 1, 16, 4, 64, 1000, 8, F16, F16, F16, NHD, HND, 1,
     1, {1000}, -1, 0.0f, 0, 1, DATA_RANDOM, TAIL_GARBAGE},
    /* T = 1 with 16-bit q/K/V: on NVIDIA the decode kernel (attention_window_keyrows.cl),
     * G = 7 padded to 8 at odd offsets (plain loads) with q/o [B,T,H,D], G = 4 with forced
     * splits and NaN past the lengths */
    {"x12_d64_f16_h14x2_b3_T1_len0_1_4101_odd_qonhd_outf32", 3, 14, 2, 64, 4101, 1, F16, F16,
     F32, HND, NHD, 1, 1, {0, 1, 4101}, -1, 0.0f, 0, 1, DATA_RANDOM, TAIL_GARBAGE},
    {"x13_d128_bf16_h32x8_b2_T1_len3000_17_kvnhd_split5_nolse_nan_tail", 2, 32, 8, 128, 3000, 1,
     BF16, BF16, BF16, NHD, HND, 0, 1, {3000, 17}, -1, 0.0f, 5, 0, DATA_RANDOM, TAIL_NAN},
    /* D 256, 16-bit K/V, f32 output and LSE: the window of a DropKV scorer at D 256 (on
     * NVIDIA the portable kernel, or the in-file mma variant with CLKV_WINDOW_MMA=1) */
    {"x14_d256_bf16_h32x8_T8_len700_split4_outf32", 1, 32, 8, 256, 700, 8, BF16, BF16, F32, HND,
     HND, 1, 1, {700}, -1, 0.0f, 4, 0, DATA_RANDOM, TAIL_GARBAGE},
    /* D 256 with 16 rows (4 warps on the keys; T = 1 has no keyrows kernel at D 256) at odd
     * offsets (plain loads), automatic splits, NaN past the lengths */
    {"x15_d256_f16_h8x2_b2_T1_len1500_33_odd_kvnhd_nan_tail", 2, 8, 2, 256, 1500, 1, F16, F16,
     F16, NHD, HND, 1, 1, {1500, 33}, -1, 0.0f, 0, 1, DATA_RANDOM, TAIL_NAN},
    /* ---- edge numerics ---- */
    {"e1_huge_pos_d128_f32_h14x2_T8_len600_split7", 1, 14, 2, 128, 600, 8, F32, F32, F32, HND,
     HND, 1, 1, {600}, -1, 1.0f, 7, 0, DATA_HUGE_POS, TAIL_GARBAGE},
    {"e2_huge_neg_d64_bf16_h32x8_b2_prefill150_nhd", 2, 32, 8, 64, 150, 150, BF16, BF16, F32, NHD,
     HND, 1, 1, {150, 17}, -1, 1.0f, 0, 0, DATA_HUGE_NEG, TAIL_GARBAGE},
    {"e3_tiny_d128_f32_h14x2_T64_len500", 1, 14, 2, 128, 500, 64, F32, F32, F32, HND, HND, 1, 1,
     {500}, -1, 0.0f, 0, 0, DATA_TINY, TAIL_GARBAGE},
    {"e4_nan_tail_d128_f32_h32x8_b3_T8", 3, 32, 8, 128, 512, 8, F32, F32, F32, HND, HND, 1, 1,
     {5, 300, 0}, -1, 0.0f, 0, 0, DATA_RANDOM, TAIL_NAN},
    {"e6_huge_pos_d128_bf16_h8x2_T1_len700_split3", 1, 8, 2, 128, 700, 1, BF16, BF16, F32, HND,
     HND, 1, 1, {700}, -1, 1.0f, 3, 0, DATA_HUGE_POS, TAIL_GARBAGE},
    {"e7_huge_neg_d256_bf16_h16x4_T8_len900_split2", 1, 16, 4, 256, 900, 8, BF16, BF16, F32, HND,
     HND, 1, 1, {900}, -1, 1.0f, 2, 0, DATA_HUGE_NEG, TAIL_GARBAGE},
    {"e5_nan_tail_d64_bf16_h8x8_b3_prefill_maxlen70_split3", 3, 8, 8, 64, 80, 70, BF16, BF16,
     BF16, NHD, HND, 1, 1, {70, 1, 33}, 70, 0.0f, 3, 0, DATA_RANDOM, TAIL_NAN},
};
/* clang-format on */

static clkv_context *g_ctx;
static double g_total_seconds;

static const char *data_name(data_mode m) {
    switch (m) {
    case DATA_RANDOM:
        return "random";
    case DATA_HUGE_POS:
        return "huge+";
    case DATA_HUGE_NEG:
        return "huge-";
    case DATA_TINY:
        return "tiny";
    }
    return "?";
}

/* Fill q [B,Hq,T,D], K, V [B,Hkv,L,D] (logical); K/V rows j >= eff[b] get the tail value. */
static void generate(const wcase *c, tu_rng *r, const int32_t *eff, float *q, float *k, float *v) {
    const int64_t B = c->B, Hq = c->Hq, Hkv = c->Hkv, D = c->D, L = c->L, T = c->T;
    const float tail = c->tail == TAIL_NAN ? NAN : 1000.0f;
    const double scale = c->scale != 0.0f ? (double)c->scale : 1.0 / sqrt((double)D);
    const size_t nq = (size_t)(B * Hq * T * D);

    if (c->data == DATA_HUGE_POS || c->data == DATA_HUGE_NEG) {
        /* q = +-qv (a power of two), k in {2, 127/64}: every product and partial sum of
         * <q, k> is exact in f32 and |scale * <q, k>| <= 1024. */
        const double qv = 1024.0 / (scale * 2.0 * (double)D);
        const float qs = (float)(c->data == DATA_HUGE_POS ? qv : -qv);
        for (size_t i = 0; i < nq; i++) {
            q[i] = qs;
        }
        for (size_t i = 0; i < (size_t)(B * Hkv * L * D); i++) {
            k[i] = (tu_rng_u64(r) >> 63) ? 2.0f : 127.0f / 64.0f;
        }
        tu_fill_normal(r, v, (size_t)(B * Hkv * L * D), 0.0, 1.0);
    } else {
        const double mag = c->data == DATA_TINY ? 1e-20 : 1.0;
        tu_fill_normal(r, q, nq, 0.0, mag);
        for (int64_t b = 0; b < B; b++) {
            for (int64_t h = 0; h < Hkv; h++) {
                size_t base = (size_t)(((b * Hkv + h) * L) * D);
                size_t nvalid = (size_t)eff[b] * (size_t)D;
                tu_fill_normal(r, k + base, nvalid, 0.0, mag);
                tu_fill_normal(r, v + base, nvalid, 0.0, mag);
            }
        }
    }
    for (int64_t b = 0; b < B; b++) {
        for (int64_t h = 0; h < Hkv; h++) {
            for (int64_t j = eff[b]; j < L; j++) {
                size_t base = (size_t)((((b * Hkv + h) * L) + j) * D);
                for (int64_t d = 0; d < D; d++) {
                    k[base + (size_t)d] = tail;
                    v[base + (size_t)d] = tail;
                }
            }
        }
    }
}

/* A poisoned output [B, H, T, D] (HND) or stored [B, T, H, D] (NHD), starting at element
 * `off`, with guard bytes after it. */
static clkv_tensor alloc_output(clkv_dtype dt, int64_t B, int64_t H, int64_t T, int64_t D,
                                tu_layout layout, int64_t off) {
    const size_t es = tu_dtype_size(dt);
    const size_t n = (size_t)(B * H * T * D);
    cl_mem buf = tu_buffer_create(g_ctx, (size_t)off * es + n * es + 11 * es);
    clkv_tensor t = layout == TU_NHD ? clkv_tensor_4d_nhd(buf, dt, B, H, T, D)
                                     : clkv_tensor_4d(buf, dt, B, H, T, D);
    t.offset = (uint64_t)off * es;
    return t;
}

static void run_case(void **state) {
    const wcase *c = (const wcase *)*state;
    const size_t idx = (size_t)(c - g_cases);
    const uint64_t seed = tu_seed(DEFAULT_SEED);
    const int64_t B = c->B, Hq = c->Hq, Hkv = c->Hkv, D = c->D, L = c->L, T = c->T;
    const int64_t maxlen = c->max_length < 0 ? L : c->max_length;
    const size_t nq = (size_t)(B * Hq * T * D), nkv = (size_t)(B * Hkv * L * D);
    const size_t nrow = (size_t)(B * Hq * T);
    const int64_t q_off = c->odd_offsets ? 1 : 0, k_off = c->odd_offsets ? 3 : 0,
                  v_off = c->odd_offsets ? 5 : 0, o_off = c->odd_offsets ? 7 : 16, lse_off = 8;
    int32_t eff[3], dev_lens[3];
    tu_rng rng;
    float *q, *k, *v, *o_got, *lse_got = NULL;
    double *o_ref, *lse_ref, *spread;
    double t0, t_gen, t_up, t_run, t_ref, scale_ref, dz;
    clkv_tensor tq, tk, tv, tlen, to, tlse;
    clkv_attention_window_args args = CLKV_ATTENTION_WINDOW_ARGS_INIT;
    size_t ws_bytes = 0;
    cl_event ev = NULL;
    tu_tol tol;
    char what[256];

    tu_set_case("%s (B=%" PRId64 " Hq=%" PRId64 " Hkv=%" PRId64 " D=%" PRId64 " L=%" PRId64
                " T=%" PRId64 " q=%s kv=%s o=%s kv:%s qo:%s lse=%d lengths=%s {%d,%d,%d} "
                "max_length=%" PRId64 " scale=%g splits=%d odd=%d data=%s tail=%s)",
                c->name, B, Hq, Hkv, D, L, T, clkv_dtype_name(c->qdt), clkv_dtype_name(c->kvdt),
                clkv_dtype_name(c->odt), tu_layout_name(c->kv_layout), tu_layout_name(c->qo_layout),
                c->want_lse, c->has_lengths ? "buffer" : "absent", c->lens[0], c->lens[1],
                c->lens[2], c->max_length, (double)c->scale, c->num_splits, c->odd_offsets,
                data_name(c->data), c->tail == TAIL_NAN ? "NaN" : "1000");
    assert_true(B >= 1 && B <= 3);
    tu_rng_seed(&rng, seed, (uint64_t)idx + 1);

    for (int64_t b = 0; b < B; b++) {
        int32_t want = c->has_lengths ? c->lens[b] : (int32_t)maxlen;
        dev_lens[b] = want;
        eff[b] = want > (int32_t)maxlen ? (int32_t)maxlen : want;
    }

    t0 = tu_now();
    q = (float *)tu_malloc(nq * sizeof(float));
    k = (float *)tu_malloc(nkv * sizeof(float));
    v = (float *)tu_malloc(nkv * sizeof(float));
    generate(c, &rng, eff, q, k, v);
    tu_round_array(c->qdt, q, nq);
    tu_round_array(c->kvdt, k, nkv);
    tu_round_array(c->kvdt, v, nkv);
    t_gen = tu_now() - t0;

    t0 = tu_now();
    {
        int64_t ldims[3] = {B, Hq, T};
        int64_t bdims[1] = {B};
        size_t qes = tu_dtype_size(c->qdt), kes = tu_dtype_size(c->kvdt);
        tq =
            tu_kv_tensor_offset(g_ctx, q, c->qdt, B, Hq, T, D, c->qo_layout, (uint64_t)q_off * qes);
        tk = tu_kv_tensor_offset(g_ctx, k, c->kvdt, B, Hkv, L, D, c->kv_layout,
                                 (uint64_t)k_off * kes);
        tv = tu_kv_tensor_offset(g_ctx, v, c->kvdt, B, Hkv, L, D, c->kv_layout,
                                 (uint64_t)v_off * kes);
        tlen = c->has_lengths ? tu_tensor_upload_i32(g_ctx, dev_lens, 1, bdims, 0, 0)
                              : clkv_tensor_none();
        to = alloc_output(c->odt, B, Hq, T, D, c->qo_layout, o_off);
        tlse = c->want_lse
                   ? tu_tensor_alloc(g_ctx, CLKV_F32, 3, ldims, (uint64_t)lse_off * 4, 5 * 4)
                   : clkv_tensor_none();
    }
    t_up = tu_now() - t0;

    args.q = tq;
    args.k = tk;
    args.v = tv;
    args.lengths = tlen;
    args.o = to;
    args.lse = tlse;
    args.max_length = c->max_length;
    args.scale = c->scale;
    args.num_splits = c->num_splits;

    TU_CHECK_OK(g_ctx, clkv_attention_window_workspace_size(g_ctx, &args, &ws_bytes));

    t0 = tu_now();
    TU_CHECK_OK(g_ctx, clkv_attention_window(g_ctx, &args, &ev));
    tu_expect_completed(g_ctx, ev, ws_bytes, "clkv_attention_window");
    t_run = tu_now() - t0;
    tu_assert_written_exactly(g_ctx, &to, "o");
    if (c->want_lse) {
        tu_assert_written_exactly(g_ctx, &tlse, "lse");
    }

    t0 = tu_now();
    o_ref = (double *)tu_malloc(nq * sizeof(double));
    lse_ref = (double *)tu_malloc(nrow * sizeof(double));
    spread = (double *)tu_malloc(nq * sizeof(double));
    scale_ref = c->scale != 0.0f ? (double)c->scale : 1.0 / sqrt((double)D);
    if (ref_attention_window(B, Hq, Hkv, T, L, D, q, k, v, eff, scale_ref, o_ref, lse_ref,
                             spread) != 0) {
        TU_FAIL("reference rejected the case (test bug)");
    }
    /* Logit error allowance for |z| ~ 1e3 (as in test_attention_decode): f32 logits carry
     * rounding errors ~ 2^-24 * sqrt(D) * |z|; allow 4x that per logit (dz), which moves o
     * by <= 2 dz spread and LSE by <= dz. Zero for the other data modes. */
    dz = 0.0;
    if (c->data == DATA_HUGE_POS || c->data == DATA_HUGE_NEG) {
        double qq = 0.0, kk = 0.0;
        for (int64_t d = 0; d < D; d++) {
            qq += (double)q[d] * (double)q[d];
            kk += 4.0;
        }
        dz = ldexp(sqrt((double)D) + 1.0, -22) * fabs(scale_ref) * sqrt(qq * kk);
    }
    for (size_t i = 0; i < nq; i++) {
        spread[i] = 2.0 * dz * spread[i];
    }
    t_ref = tu_now() - t0;

    o_got = (float *)tu_malloc(nq * sizeof(float));
    tu_tensor_read(g_ctx, &to, o_got);
    tol = tu_tol_for(c->odt);
    if (c->data == DATA_TINY) {
        tol.atol *= 1e-20;
    }
    {
        int64_t odims[4] = {B, Hq, T, D};
        snprintf(what, sizeof what, "o (%s)", clkv_dtype_name(c->odt));
        tu_assert_close_ex(what, o_got, o_ref, nq, tol, dz > 0.0 ? spread : NULL, 4, odims);
    }
    if (c->want_lse) {
        int64_t ldims[3] = {B, Hq, T};
        lse_got = (float *)tu_malloc(nrow * sizeof(float));
        tu_tensor_read(g_ctx, &tlse, lse_got);
        tu_assert_lse("lse", lse_got, lse_ref, nrow, TU_LSE_ATOL + dz, 3, ldims);
    }
    /* Rows without keys: exactly zero output. */
    for (size_t row = 0; row < nrow; row++) {
        const int64_t b = (int64_t)row / (Hq * T), t = (int64_t)row % T;
        if (eff[b] - T + t >= 0) {
            continue;
        }
        for (int64_t d = 0; d < D; d++) {
            float x = o_got[row * (size_t)D + (size_t)d];
            if (x != 0.0f) {
                TU_FAIL("o[%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "] = %g for a row "
                        "without keys, expected 0",
                        b, ((int64_t)row / T) % Hq, t, d, (double)x);
            }
        }
    }

    printf("[ case     ] %-58s %6.2f s (gen %.2f, upload %.2f, kernel %.2f, ref %.2f)\n", c->name,
           t_gen + t_up + t_run + t_ref, t_gen, t_up, t_run, t_ref);
    g_total_seconds += t_gen + t_up + t_run + t_ref;

    tu_release(tq.buf);
    tu_release(tk.buf);
    tu_release(tv.buf);
    tu_release(tlen.buf);
    tu_release(to.buf);
    tu_release(tlse.buf);
    free(q);
    free(k);
    free(v);
    free(o_got);
    free(lse_got);
    free(o_ref);
    free(lse_ref);
    free(spread);
    tu_set_case("%s", "");
}

/* The same call twice gives bit-identical outputs (no races), and other split counts
 * (including the one-split direct path) agree within tolerance. */
static void test_repeatable(void **state) {
    const uint64_t seed = tu_seed(DEFAULT_SEED);
    const int64_t B = 2, Hq = 32, Hkv = 8, D = 128, L = 700, T = 8;
    const int32_t lens[2] = {700, 333};
    const size_t nq = (size_t)(B * Hq * T * D), nkv = (size_t)(B * Hkv * L * D);
    const size_t nrow = (size_t)(B * Hq * T);
    int64_t qdims[4] = {B, Hq, T, D}, ldims[3] = {B, Hq, T}, bdims[1] = {B};
    const int32_t splits[3] = {1, 3, 64};
    tu_rng rng;
    float *q = (float *)tu_malloc(nq * sizeof(float));
    float *k = (float *)tu_malloc(nkv * sizeof(float));
    float *v = (float *)tu_malloc(nkv * sizeof(float));
    float *o1 = (float *)tu_malloc(nq * sizeof(float));
    float *o2 = (float *)tu_malloc(nq * sizeof(float));
    float *l1 = (float *)tu_malloc(nrow * sizeof(float));
    float *l2 = (float *)tu_malloc(nrow * sizeof(float));
    double *o1d = (double *)tu_malloc(nq * sizeof(double));
    double *l1d = (double *)tu_malloc(nrow * sizeof(double));
    clkv_attention_window_args args = CLKV_ATTENTION_WINDOW_ARGS_INIT;
    clkv_tensor to, tlse;
    (void)state;

    tu_set_case("repeatable (B=2 Hq=32 Hkv=8 D=128 L=700 T=8 f32, default splits, then 1/3/64)");
    tu_rng_seed(&rng, seed, 1000);
    tu_fill_normal(&rng, q, nq, 0.0, 1.0);
    tu_fill_normal(&rng, k, nkv, 0.0, 1.0);
    tu_fill_normal(&rng, v, nkv, 0.0, 1.0);
    args.q = tu_tensor_upload(g_ctx, q, CLKV_F32, 4, qdims, 0, 0);
    args.k = tu_kv_tensor(g_ctx, k, CLKV_F32, B, Hkv, L, D, TU_HND);
    args.v = tu_kv_tensor(g_ctx, v, CLKV_F32, B, Hkv, L, D, TU_HND);
    args.lengths = tu_tensor_upload_i32(g_ctx, lens, 1, bdims, 0, 0);
    to = tu_tensor_alloc(g_ctx, CLKV_F32, 4, qdims, 0, 0);
    tlse = tu_tensor_alloc(g_ctx, CLKV_F32, 3, ldims, 0, 0);
    args.o = to;
    args.lse = tlse;

    TU_CHECK_OK(g_ctx, clkv_attention_window(g_ctx, &args, NULL));
    TU_CHECK_OK(g_ctx, clkv_context_finish(g_ctx));
    tu_tensor_read(g_ctx, &to, o1);
    tu_tensor_read(g_ctx, &tlse, l1);
    tu_buffer_poison(g_ctx, to.buf, 0, tu_buffer_size(to.buf));
    tu_buffer_poison(g_ctx, tlse.buf, 0, tu_buffer_size(tlse.buf));
    TU_CHECK_OK(g_ctx, clkv_attention_window(g_ctx, &args, NULL));
    TU_CHECK_OK(g_ctx, clkv_context_finish(g_ctx));
    tu_tensor_read(g_ctx, &to, o2);
    tu_tensor_read(g_ctx, &tlse, l2);
    if (memcmp(o1, o2, nq * sizeof(float)) != 0 || memcmp(l1, l2, nrow * sizeof(float)) != 0) {
        TU_FAIL("two identical calls differ");
    }
    for (size_t i = 0; i < nq; i++) {
        o1d[i] = (double)o1[i];
    }
    for (size_t i = 0; i < nrow; i++) {
        l1d[i] = (double)l1[i];
    }
    for (int s = 0; s < 3; s++) {
        char what[64];
        args.num_splits = splits[s];
        TU_CHECK_OK(g_ctx, clkv_attention_window(g_ctx, &args, NULL));
        TU_CHECK_OK(g_ctx, clkv_context_finish(g_ctx));
        tu_tensor_read(g_ctx, &to, o2);
        tu_tensor_read(g_ctx, &tlse, l2);
        snprintf(what, sizeof what, "o (splits %d vs default)", splits[s]);
        tu_assert_close(what, o2, o1d, nq, tu_tol_for(CLKV_F32), 4, qdims);
        snprintf(what, sizeof what, "lse (splits %d vs default)", splits[s]);
        tu_assert_lse(what, l2, l1d, nrow, TU_LSE_ATOL, 3, ldims);
    }

    tu_release(args.q.buf);
    tu_release(args.k.buf);
    tu_release(args.v.buf);
    tu_release(args.lengths.buf);
    tu_release(to.buf);
    tu_release(tlse.buf);
    free(q);
    free(k);
    free(v);
    free(o1);
    free(o2);
    free(l1);
    free(l2);
    free(o1d);
    free(l1d);
    tu_set_case("%s", "");
}

/* The reference on hand-computable inputs: causal rows of a window. */
static void test_reference_selfcheck(void **state) {
    /* B=1, Hq=1, Hkv=1, L=3, T=2, D=2: rows are positions 1 and 2. */
    const float q[4] = {1.0f, 0.0f, 0.0f, 0.0f};
    const float k[6] = {0.0f, 0.0f, 1.0f, 0.0f, 2.0f, 0.0f};
    const float v[6] = {1.0f, 0.0f, 0.0f, 1.0f, 5.0f, 5.0f};
    const int32_t len3[1] = {3}, len1[1] = {1};
    double o[4], lse[2];
    const double e0 = 1.0, e1 = exp(1.0);
    (void)state;
    tu_set_case("reference self-check");
    assert_int_equal(ref_attention_window(1, 1, 1, 2, 3, 2, q, k, v, len3, 1.0, o, lse, NULL), 0);
    /* row 0 (position 1) sees keys 0 and 1 only (z = 0, 1) */
    assert_true(fabs(o[0] - e0 / (e0 + e1)) < 1e-15);
    assert_true(fabs(o[1] - e1 / (e0 + e1)) < 1e-15);
    assert_true(fabs(lse[0] - log(e0 + e1)) < 1e-15);
    /* row 1 (position 2), q = 0: uniform over the three keys */
    assert_true(fabs(o[2] - 2.0) < 1e-15 && fabs(o[3] - 2.0) < 1e-15);
    assert_true(fabs(lse[1] - log(3.0)) < 1e-15);
    /* len 1: row 0 is position -1 (no key), row 1 position 0 */
    assert_int_equal(ref_attention_window(1, 1, 1, 2, 3, 2, q, k, v, len1, 1.0, o, lse, NULL), 0);
    assert_true(o[0] == 0.0 && o[1] == 0.0 && isinf(lse[0]) && lse[0] < 0);
    assert_true(fabs(o[2] - 1.0) < 1e-15 && fabs(o[3]) < 1e-15 && fabs(lse[1]) < 1e-15);
    assert_int_equal(ref_attention_window(1, 3, 2, 2, 3, 2, q, k, v, len3, 1.0, o, lse, NULL), -1);
    tu_set_case("%s", "");
}

/* ------------------------------------------------------------------------------------ */
/* Argument validation of both functions                                                */
/* ------------------------------------------------------------------------------------ */

#define VB 2
#define VHQ 8
#define VHKV 2
#define VL 64
#define VT 8
#define VD 64
#define VSLACK 4

static cl_mem g_q, g_k, g_v, g_len, g_o, g_lse;

static void bad_fixture_create(void) {
    tu_rng rng;
    const size_t nkv = (size_t)VB * VHKV * VL * VD * VSLACK;
    const int32_t lens[VB] = {VL, 17};
    float *tmp = (float *)tu_malloc(nkv * sizeof(float));
    tu_rng_seed(&rng, tu_seed(DEFAULT_SEED), 77);
    tu_fill_normal(&rng, tmp, nkv, 0.0, 1.0);
    g_q = tu_buffer_from_host(g_ctx, tmp, (size_t)VB * VHQ * VT * VD * VSLACK * sizeof(float));
    g_k = tu_buffer_from_host(g_ctx, tmp, nkv * sizeof(float));
    g_v = tu_buffer_from_host(g_ctx, tmp, nkv * sizeof(float));
    g_len = tu_buffer_from_host(g_ctx, lens, sizeof lens);
    g_o = tu_buffer_create(g_ctx, (size_t)VB * VHQ * VT * VD * VSLACK * sizeof(float));
    g_lse = tu_buffer_create(g_ctx, (size_t)VB * VHQ * VT * VSLACK * sizeof(float));
    free(tmp);
}

static void bad_fixture_release(void) {
    tu_release(g_q);
    tu_release(g_k);
    tu_release(g_v);
    tu_release(g_len);
    tu_release(g_o);
    tu_release(g_lse);
}

static clkv_attention_window_args base_args(void) {
    clkv_attention_window_args a = CLKV_ATTENTION_WINDOW_ARGS_INIT;
    a.q = clkv_tensor_4d(g_q, CLKV_F32, VB, VHQ, VT, VD);
    a.k = clkv_tensor_4d(g_k, CLKV_F32, VB, VHKV, VL, VD);
    a.v = clkv_tensor_4d(g_v, CLKV_F32, VB, VHKV, VL, VD);
    a.lengths = clkv_tensor_1d(g_len, CLKV_I32, VB);
    a.o = clkv_tensor_4d(g_o, CLKV_F32, VB, VHQ, VT, VD);
    a.lse = clkv_tensor_3d(g_lse, CLKV_F32, VB, VHQ, VT);
    return a;
}

static void poison_outputs(void) {
    tu_buffer_poison(g_ctx, g_o, 0, tu_buffer_size(g_o));
    tu_buffer_poison(g_ctx, g_lse, 0, tu_buffer_size(g_lse));
}

static void check_names(const char *file, int line, const char *label, const char *fn,
                        const char *msg, const char *name) {
    if (msg == NULL || !tu_msg_names(msg, name)) {
        tu_fail_at(file, line, "%s: %s: message \"%s\" does not name \"%s\"", label, fn,
                   msg ? msg : "(null)", name);
    }
}

/* The bad call through both functions: expected status, message naming `name`, no
 * event, outputs untouched. */
static void expect_reject_at(const char *file, int line, const char *label, clkv_context *ctx,
                             const clkv_attention_window_args *a, clkv_status want,
                             const char *name) {
    cl_event ev = NULL;
    size_t bytes = 0;
    clkv_status st;
    tu_set_case("%s", label);
    poison_outputs();
    st = clkv_attention_window(ctx, a, &ev);
    if (st != want) {
        tu_fail_at(file, line,
                   "%s: clkv_attention_window returned %s (%d), expected %s (%d); "
                   "message \"%s\"",
                   label, clkv_status_string(st), st, clkv_status_string(want), want,
                   clkv_last_error(ctx));
    }
    check_names(file, line, label, "clkv_attention_window", clkv_last_error(ctx), name);
    if (ev != NULL) {
        clReleaseEvent(ev);
        tu_fail_at(file, line, "%s: the rejected call returned an event", label);
    }
    TU_CHECK_CL(clFinish(clkv_context_queue(g_ctx)));
    tu_assert_buffer_poison(g_ctx, g_o, "o buffer after the rejected call");
    tu_assert_buffer_poison(g_ctx, g_lse, "lse buffer after the rejected call");
    st = clkv_attention_window_workspace_size(ctx, a, &bytes);
    if (st != want) {
        tu_fail_at(file, line,
                   "%s: clkv_attention_window_workspace_size returned %s (%d), expected %s (%d)",
                   label, clkv_status_string(st), st, clkv_status_string(want), want);
    }
    check_names(file, line, label, "clkv_attention_window_workspace_size", clkv_last_error(ctx),
                name);
    tu_set_case("%s", "");
}
#define REJECT(label, a, want, name)                                                               \
    expect_reject_at(__FILE__, __LINE__, (label), g_ctx, (a), (want), (name))

static void test_bad_inputs(void **state) {
    clkv_attention_window_args a;
    cl_mem small;
    size_t bytes = 0;
    (void)state;
    bad_fixture_create();

    /* the fixture itself is valid */
    a = base_args();
    poison_outputs();
    TU_CHECK_OK(g_ctx, clkv_attention_window_workspace_size(g_ctx, &a, &bytes));
    TU_CHECK_OK(g_ctx, clkv_attention_window(g_ctx, &a, NULL));
    TU_CHECK_OK(g_ctx, clkv_context_finish(g_ctx));
    tu_assert_written_exactly(g_ctx, &a.o, "fixture o");
    tu_assert_written_exactly(g_ctx, &a.lse, "fixture lse");

    /* NULLs */
    a = base_args();
    expect_reject_at(__FILE__, __LINE__, "ctx NULL", NULL, &a, CLKV_ERR_ARG_NULL, "ctx");
    REJECT("args NULL", NULL, CLKV_ERR_ARG_NULL, "args");
    a = base_args();
    a.q.buf = NULL;
    REJECT("q.buf NULL", &a, CLKV_ERR_ARG_NULL, "q");
    a = base_args();
    a.k.buf = NULL;
    REJECT("k.buf NULL", &a, CLKV_ERR_ARG_NULL, "k");
    a = base_args();
    a.v.buf = NULL;
    REJECT("v.buf NULL", &a, CLKV_ERR_ARG_NULL, "v");
    a = base_args();
    a.o.buf = NULL;
    REJECT("o.buf NULL", &a, CLKV_ERR_ARG_NULL, "o");
    a = base_args();
    tu_set_case("workspace_size bytes NULL");
    if (clkv_attention_window_workspace_size(g_ctx, &a, NULL) != CLKV_ERR_ARG_NULL) {
        TU_FAIL("workspace_size(bytes NULL) did not return CLKV_ERR_ARG_NULL");
    }
    check_names(__FILE__, __LINE__, "bytes NULL", "clkv_attention_window_workspace_size",
                clkv_last_error(g_ctx), "bytes");

    /* dtypes */
    a = base_args();
    a.q.dtype = CLKV_I32;
    REJECT("q i32", &a, CLKV_ERR_ARG_DTYPE, "q");
    a = base_args();
    a.k.dtype = CLKV_U8;
    REJECT("k u8", &a, CLKV_ERR_ARG_DTYPE, "k");
    a = base_args();
    a.v.dtype = CLKV_F16;
    REJECT("v f16 with k f32", &a, CLKV_ERR_ARG_DTYPE, "v");
    a = base_args();
    a.o.dtype = CLKV_U32;
    REJECT("o u32", &a, CLKV_ERR_ARG_DTYPE, "o");
    a = base_args();
    a.lse.dtype = CLKV_F16;
    REJECT("lse f16", &a, CLKV_ERR_ARG_DTYPE, "lse");
    a = base_args();
    a.lengths.dtype = CLKV_F32;
    REJECT("lengths f32", &a, CLKV_ERR_ARG_DTYPE, "lengths");

    /* shapes */
    a = base_args();
    a.q = clkv_tensor_3d(g_q, CLKV_F32, VB, VHQ, VD);
    REJECT("q 3-d", &a, CLKV_ERR_ARG_SHAPE, "q");
    a = base_args();
    a.lse = clkv_tensor_2d(g_lse, CLKV_F32, VB, VHQ);
    REJECT("lse 2-d", &a, CLKV_ERR_ARG_SHAPE, "lse");
    a = base_args();
    a.k.dims[0] = VB - 1;
    REJECT("k batch 1", &a, CLKV_ERR_ARG_SHAPE, "k");
    a = base_args();
    a.v.dims[2] = VL - 1;
    REJECT("v L differs from k", &a, CLKV_ERR_ARG_SHAPE, "v");
    a = base_args();
    a.o.dims[2] = VT + 1;
    REJECT("o T differs from q", &a, CLKV_ERR_ARG_SHAPE, "o");
    a = base_args();
    a.o.dims[1] = VHQ / 2;
    REJECT("o Hq differs from q", &a, CLKV_ERR_ARG_SHAPE, "o");
    a = base_args();
    a.lse.dims[2] = VT - 1;
    REJECT("lse T differs from q", &a, CLKV_ERR_ARG_SHAPE, "lse");
    a = base_args();
    a.lengths.dims[0] = VB - 1;
    REJECT("lengths B - 1", &a, CLKV_ERR_ARG_SHAPE, "lengths");
    a = base_args();
    a.q.dims[1] = 5;
    a.o.dims[1] = 5;
    a.lse.dims[1] = 5;
    REJECT("Hq 5 with Hkv 2", &a, CLKV_ERR_ARG_SHAPE, "q");
    a = base_args();
    a.q.dims[3] = 96;
    a.o.dims[3] = 96;
    a.k.dims[3] = 96;
    a.v.dims[3] = 96;
    REJECT("D = 96", &a, CLKV_ERR_ARG_UNSUPPORTED, "q");

    /* ranges */
    a = base_args();
    a.max_length = VL + 1;
    REJECT("max_length L + 1", &a, CLKV_ERR_ARG_RANGE, "max_length");
    a = base_args();
    a.max_length = -2;
    REJECT("max_length -2", &a, CLKV_ERR_ARG_RANGE, "max_length");
    a = base_args();
    a.scale = NAN;
    REJECT("scale NaN", &a, CLKV_ERR_ARG_RANGE, "scale");
    a = base_args();
    a.scale = INFINITY;
    REJECT("scale inf", &a, CLKV_ERR_ARG_RANGE, "scale");
    a = base_args();
    a.num_splits = -1;
    REJECT("num_splits -1", &a, CLKV_ERR_ARG_RANGE, "num_splits");

    /* strides, alignment, buffer sizes, overflow */
    a = base_args();
    a.q.strides[3] = 2;
    REJECT("q last stride 2", &a, CLKV_ERR_ARG_STRIDE, "q");
    a = base_args();
    a.o.strides[0] = -1;
    REJECT("o negative stride", &a, CLKV_ERR_ARG_STRIDE, "o");
    a = base_args();
    a.lse.strides[2] = 0;
    REJECT("lse last stride 0", &a, CLKV_ERR_ARG_STRIDE, "lse");
    a = base_args();
    a.k.offset = 2;
    REJECT("k offset 2 bytes", &a, CLKV_ERR_ARG_ALIGNMENT, "k");
    a = base_args();
    a.o.offset = 6;
    REJECT("o offset 6 bytes", &a, CLKV_ERR_ARG_ALIGNMENT, "o");
    small = tu_buffer_create(g_ctx, (size_t)VB * VHKV * VL * VD * sizeof(float) - 4);
    a = base_args();
    a.v.buf = small;
    REJECT("v buffer short", &a, CLKV_ERR_ARG_BUFFER_SIZE, "v");
    a = base_args();
    a.q.offset = tu_buffer_size(g_q) - 4 * (uint64_t)VD; /* one row fits, the rest not */
    REJECT("q past the buffer end", &a, CLKV_ERR_ARG_BUFFER_SIZE, "q");
    tu_release(small);
    small = tu_buffer_create(g_ctx, 4);
    a = base_args();
    a.lengths.buf = small;
    REJECT("lengths buffer short", &a, CLKV_ERR_ARG_BUFFER_SIZE, "lengths");
    a = base_args();
    a.lse.buf = small;
    REJECT("lse buffer short", &a, CLKV_ERR_ARG_BUFFER_SIZE, "lse");
    tu_release(small);
    a = base_args();
    a.k.strides[0] = INT64_MAX / 2;
    REJECT("k batch stride overflows", &a, CLKV_ERR_ARG_OVERFLOW, "k");

    /* the context is still usable */
    a = base_args();
    poison_outputs();
    TU_CHECK_OK(g_ctx, clkv_attention_window(g_ctx, &a, NULL));
    TU_CHECK_OK(g_ctx, clkv_context_finish(g_ctx));
    tu_assert_written_exactly(g_ctx, &a.o, "fixture o after the bad calls");
    bad_fixture_release();
}

static void print_timing(void) {
    printf("[ timing   ] attention window cases: %.2f s in total\n", g_total_seconds);
}

int main(void) {
    tu_suite s = {0};
    tu_suite_add(&s, "reference_selfcheck", test_reference_selfcheck, NULL);
    tu_suite_add(&s, "bad_inputs", test_bad_inputs, NULL);
    TU_SUITE_ADD_CASES(&s, g_cases, run_case);
    tu_suite_add(&s, "repeatable_and_split_invariant", test_repeatable, NULL);
    s.at_end = print_timing;
    return tu_suite_run(&s, "attention_window", &g_ctx, DEFAULT_SEED);
}
