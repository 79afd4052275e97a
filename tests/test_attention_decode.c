/* clkv_attention_decode (SPEC §1.1) against the double-precision reference
 * (tests/ref/ref_attention.c) on the default device ($CLKV_DEVICE; PoCL CPU in CI).
 *
 * Case selection: not the Cartesian product. The nine "matrix" cases form a Latin square
 * over (D, dtype, head config), so every pair of those three factors occurs once; the
 * other factors (B, lengths, layout, LSE, lengths buffer absent, max_length < L, forced
 * split counts, explicit scale, byte offsets, output dtype) are spread over them and over
 * a few extra cases, and the "edge" cases cover numerics (uniform attention, logits near
 * +-1024, 1e-20 magnitudes, one dominant token, NaN in the unused cache tail).
 *
 * Every call: outputs poisoned first (tu_tensor_alloc), placed at a non-zero byte offset
 * with guard bytes after them; afterwards every element must have been written and every
 * guard byte must still be poison. K/V rows past the valid length hold garbage (1000, or
 * NaN in the *_nan_tail cases) that would change the result if it were read.
 *
 * Reproduce a failure with CLKV_TEST_SEED=<seed printed>; CLKV_TEST_FILTER=<substring>
 * (cmocka's own filter) runs only the matching cases.
 */
#include "util/test_util.h"
#include "ref/ref_attention.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_SEED 0xC1C0DEC0DE2024ull

typedef enum data_mode {
    DATA_RANDOM = 0, /* q, k, v ~ N(0, 1) */
    DATA_EQUAL_KEYS, /* every valid key of a (b, kv head) is the same vector */
    DATA_HUGE_POS,   /* logits ~ +1024 +- a few, computed exactly in f32 */
    DATA_HUGE_NEG,   /* logits ~ -1024 +- a few */
    DATA_STEP_POS,   /* logits +1024 on every 4th token, +992 elsewhere (two key vectors) */
    DATA_STEP_NEG,   /* logits -1024 on every 4th token, -992 elsewhere */
    DATA_TINY,       /* q, k, v ~ 1e-20 * N(0, 1) */
    DATA_DOMINANT,   /* one token per (b, kv head) has a logit ~25 above the rest */
} data_mode;

typedef enum tail_mode {
    TAIL_GARBAGE = 0, /* rows past the valid length hold 1000 */
    TAIL_NAN,         /* ... hold NaN */
} tail_mode;

typedef enum offset_mode {
    OFF_NONE = 0,
    OFF_ODD,     /* q, k, v at odd element offsets (unaligned rows) */
    OFF_ALIGNED, /* q, k, v at 256-byte-multiple offsets */
} offset_mode;

typedef struct dcase {
    const char *name;
    int64_t B, Hq, Hkv, D, L;
    clkv_dtype qdt, kvdt, odt;
    tu_layout layout;
    int want_lse;
    int has_lengths;
    int32_t lens[3];
    int64_t max_length; /* -1: default (L) */
    float scale;        /* 0: default */
    int32_t num_splits; /* 0: default */
    offset_mode offset;
    data_mode data;
    tail_mode tail;
} dcase;

#define F32 CLKV_F32
#define F16 CLKV_F16
#define BF16 CLKV_BF16

/* clang-format off */
static const dcase g_cases[] = {
    /* ---- Latin square over D x dtype x (Hq, Hkv) ---- */
    {"m1_d64_f32_h8x8_len17", 1, 8, 8, 64, 17, F32, F32, F32, TU_HND, 1, 1, {17}, -1, 0.0f, 0,
     OFF_NONE, DATA_RANDOM, TAIL_GARBAGE},
    {"m2_d64_f16_h32x8_b3_len0_1_17_nhd_split2", 3, 32, 8, 64, 24, F16, F16, F16, TU_NHD, 1, 1,
     {0, 1, 17}, -1, 0.0f, 2, OFF_NONE, DATA_RANDOM, TAIL_GARBAGE},
    {"m3_d64_bf16_h14x2_len1000_nolengths_split7_outf32", 1, 14, 2, 64, 1000, BF16, BF16, F32,
     TU_HND, 1, 0, {0}, -1, 0.0f, 7, OFF_NONE, DATA_RANDOM, TAIL_GARBAGE},
    {"m4_d128_f32_h32x8_b3_len1000_0_999_nhd_scale_split100000", 3, 32, 8, 128, 1024, F32, F32,
     F32, TU_NHD, 1, 1, {1000, 0, 999}, -1, 0.37f, 100000, OFF_NONE, DATA_RANDOM, TAIL_GARBAGE},
    {"m5_d128_f16_h14x2_len4099_outbf16", 1, 14, 2, 128, 4099, F16, F16, BF16, TU_HND, 1, 1,
     {4099}, -1, 0.0f, 0, OFF_NONE, DATA_RANDOM, TAIL_GARBAGE},
    {"m6_d128_bf16_h8x8_b3_len0_17_4099_nhd_split1", 3, 8, 8, 128, 4099, BF16, BF16, BF16,
     TU_NHD, 1, 1, {0, 17, 4099}, -1, 0.0f, 1, OFF_NONE, DATA_RANDOM, TAIL_GARBAGE},
    {"m7_d256_f32_h14x2_b3_nolengths_maxlen1000_L1500_oddoffset_outf16", 3, 14, 2, 256, 1500,
     F32, F32, F16, TU_HND, 1, 0, {0}, 1000, 0.0f, 0, OFF_ODD, DATA_RANDOM, TAIL_GARBAGE},
    {"m8_d256_f16_h8x8_len4099_nhd_scale_split7_nolse", 1, 8, 8, 256, 4099, F16, F16, F16,
     TU_NHD, 0, 1, {4099}, -1, 0.05f, 7, OFF_NONE, DATA_RANDOM, TAIL_GARBAGE},
    {"m9_d256_bf16_h32x8_b3_len0_17_4099_L4104_alignedoffset", 3, 32, 8, 256, 4104, BF16, BF16,
     BF16, TU_HND, 1, 1, {0, 17, 4099}, -1, 0.0f, 0, OFF_ALIGNED, DATA_RANDOM, TAIL_GARBAGE},
    /* ---- other factors and interactions ---- */
    {"x1_d128_bf16_h32x8_b3_maxlen1000_L2048_outf32_nhd_split7", 3, 32, 8, 128, 2048, BF16, BF16,
     F32, TU_NHD, 1, 1, {1000, 1, 17}, 1000, 0.0f, 7, OFF_NONE, DATA_RANDOM, TAIL_GARBAGE},
    {"x2_d64_qf32_kvf16_outbf16_h14x2_len17", 1, 14, 2, 64, 17, F32, F16, BF16, TU_HND, 1, 1,
     {17}, -1, 0.0f, 0, OFF_NONE, DATA_RANDOM, TAIL_GARBAGE},
    {"x3_d128_f32_h8x8_len0_only", 1, 8, 8, 128, 64, F32, F32, F32, TU_HND, 1, 1, {0}, -1, 0.0f,
     0, OFF_NONE, DATA_RANDOM, TAIL_GARBAGE},
    {"x4_d64_f32_h32x8_b3_nolengths_maxlen0", 3, 32, 8, 64, 16, F32, F32, F32, TU_HND, 1, 0, {0},
     0, 0.0f, 0, OFF_NONE, DATA_RANDOM, TAIL_GARBAGE},
    {"x5_d128_f16_h32x8_b3_lengths_clamped_to_maxlen_outf32", 3, 32, 8, 128, 1500, F16, F16, F32,
     TU_HND, 1, 1, {1500, 200, 1000}, 1000, 0.0f, 0, OFF_NONE, DATA_RANDOM, TAIL_GARBAGE},
    {"x6_d256_bf16_h8x8_len1_split2", 1, 8, 8, 256, 8, BF16, BF16, BF16, TU_HND, 1, 1, {1}, -1,
     0.0f, 2, OFF_NONE, DATA_RANDOM, TAIL_GARBAGE},
    {"x7_d64_f16_h14x2_b3_len1_1000_17_nhd_split7_nolse_oddoffset", 3, 14, 2, 64, 1000, F16, F16,
     F16, TU_NHD, 0, 1, {1, 1000, 17}, -1, 0.0f, 7, OFF_ODD, DATA_RANDOM, TAIL_GARBAGE},
    {"x8_d256_bf16_h32x8_len1000_nhd_outf16", 1, 32, 8, 256, 1000, BF16, BF16, F16, TU_NHD, 1, 1,
     {1000}, -1, 0.0f, 0, OFF_NONE, DATA_RANDOM, TAIL_GARBAGE},
    {"x9_d128_f32_h14x2_b3_len17_4099_1_outbf16_split2", 3, 14, 2, 128, 4099, F32, F32, BF16,
     TU_HND, 1, 1, {17, 4099, 1}, -1, 0.0f, 2, OFF_NONE, DATA_RANDOM, TAIL_GARBAGE},
    /* GQA groups above 8 heads (K/V read ceil(G/8) times): G = 16 and G = 12 */
    {"g1_d128_f32_h32x2_G16_len1000_split7", 1, 32, 2, 128, 1000, F32, F32, F32, TU_HND, 1, 1,
     {1000}, -1, 0.0f, 7, OFF_NONE, DATA_RANDOM, TAIL_GARBAGE},
    {"g2_d64_bf16_h24x2_G12_b3_nhd", 3, 24, 2, 64, 400, BF16, BF16, BF16, TU_NHD, 1, 1,
     {0, 333, 17}, -1, 0.0f, 0, OFF_NONE, DATA_RANDOM, TAIL_GARBAGE},
    /* Long caches (B * max_length >= 16K tokens, automatic splits): on NVIDIA routed to the
     * window operator's decode kernel (attention_window_keyrows.cl: G = 4, G = 7 padded to 8,
     * G = 1; its DIRECT form: 16-byte register loads and, at odd offsets, element loads;
     * many splits, some past the length). 16-bit caches of at most 4K tokens in all and
     * automatic splits (e2, e4) take its cp.async form. */
    {"l1_d128_bf16_h32x8_len16400", 1, 32, 8, 128, 16400, BF16, BF16, BF16, TU_HND, 1, 1,
     {16400}, -1, 0.0f, 0, OFF_NONE, DATA_RANDOM, TAIL_GARBAGE},
    {"l2_d64_f16_h14x2_b2_len9000_3_nhd_odd_outf32_nolse_nan_tail", 2, 14, 2, 64, 9000, F16, F16,
     F32, TU_NHD, 0, 1, {9000, 3}, -1, 0.0f, 0, OFF_ODD, DATA_RANDOM, TAIL_NAN},
    {"l3_dominant_d128_f16_h8x8_b2_len12000_9000", 2, 8, 8, 128, 12000, F16, F16, F16, TU_HND, 1,
     1, {12000, 9000}, -1, 0.0f, 0, OFF_NONE, DATA_DOMINANT, TAIL_GARBAGE},
    /* D 256 with 16-bit K/V: on NVIDIA the window operator's keyrows kernel (DIRECT form,
     * V through local stages) where rows are 16-byte aligned, else its 16-row kernel (the
     * odd offsets of l4), and NaN past the lengths */
    {"l4_d256_bf16_h16x4_b2_len9000_4100_odd_outf32_nan_tail", 2, 16, 4, 256, 9000, BF16, BF16,
     F32, TU_HND, 1, 1, {9000, 4100}, -1, 0.0f, 0, OFF_ODD, DATA_RANDOM, TAIL_NAN},
    {"l5_d256_f16_h32x8_len16500_nhd", 1, 32, 8, 256, 16500, F16, F16, F16, TU_NHD, 1, 1,
     {16500}, -1, 0.0f, 0, OFF_NONE, DATA_RANDOM, TAIL_GARBAGE},
    /* the same at G 8 (a full mma N dimension) with NaN past the lengths, and at G 1 */
    {"l6_d256_bf16_h16x2_b2_len8300_5000_aligned_nan_tail", 2, 16, 2, 256, 8300, BF16, BF16,
     BF16, TU_HND, 1, 1, {8300, 5000}, -1, 0.0f, 0, OFF_ALIGNED, DATA_RANDOM, TAIL_NAN},
    {"l7_d256_f16_h8x8_len8193_outf32", 1, 8, 8, 256, 8193, F16, F16, F32, TU_HND, 0, 1,
     {8193}, -1, 0.0f, 0, OFF_NONE, DATA_RANDOM, TAIL_GARBAGE},
    /* ---- edge numerics ---- */
    {"e1_equal_keys_d128_f32_h32x8_len1000_split7", 1, 32, 8, 128, 1000, F32, F32, F32, TU_HND,
     1, 1, {1000}, -1, 0.0f, 7, OFF_NONE, DATA_EQUAL_KEYS, TAIL_GARBAGE},
    {"e2_equal_keys_d64_bf16_h8x8_b3_nhd", 3, 8, 8, 64, 300, BF16, BF16, BF16, TU_NHD, 1, 1,
     {300, 1, 77}, -1, 0.0f, 0, OFF_NONE, DATA_EQUAL_KEYS, TAIL_GARBAGE},
    {"e3_huge_pos_logits_d128_f32_h14x2_split7", 1, 14, 2, 128, 600, F32, F32, F32, TU_HND, 1, 1,
     {600}, -1, 1.0f, 7, OFF_NONE, DATA_HUGE_POS, TAIL_GARBAGE},
    {"e4_huge_neg_logits_d64_bf16_h32x8_b3_nhd", 3, 32, 8, 64, 300, BF16, BF16, F32, TU_NHD, 1, 1,
     {300, 17, 0}, -1, 1.0f, 0, OFF_NONE, DATA_HUGE_NEG, TAIL_GARBAGE},
    {"e5_step_pos_logits_d256_f16_h8x8_split2", 1, 8, 8, 256, 256, F16, F16, F16, TU_HND, 1, 1,
     {256}, -1, 0.5f, 2, OFF_NONE, DATA_STEP_POS, TAIL_GARBAGE},
    {"e5b_step_neg_logits_d128_f32_h32x8_b3_split7", 3, 32, 8, 128, 600, F32, F32, F32, TU_NHD, 1,
     1, {600, 1, 0}, -1, 1.0f, 7, OFF_NONE, DATA_STEP_NEG, TAIL_GARBAGE},
    {"e6_tiny_d128_f32_h14x2_split7", 1, 14, 2, 128, 500, F32, F32, F32, TU_HND, 1, 1, {500}, -1,
     0.0f, 7, OFF_NONE, DATA_TINY, TAIL_GARBAGE},
    {"e7_tiny_d256_bf16_h8x8_b3_nhd", 3, 8, 8, 256, 100, BF16, BF16, F32, TU_NHD, 1, 1,
     {100, 3, 0}, -1, 0.0f, 0, OFF_NONE, DATA_TINY, TAIL_GARBAGE},
    {"e8_dominant_d128_f32_h32x8_len2000_split7", 1, 32, 8, 128, 2000, F32, F32, F32, TU_HND, 1, 1,
     {2000}, -1, 0.0f, 7, OFF_NONE, DATA_DOMINANT, TAIL_GARBAGE},
    {"e9_dominant_d64_f16_h14x2_b3", 3, 14, 2, 64, 500, F16, F16, F16, TU_HND, 1, 1,
     {500, 250, 1}, -1, 0.0f, 0, OFF_NONE, DATA_DOMINANT, TAIL_GARBAGE},
    {"e10_nan_tail_d128_f32_h32x8_b3", 3, 32, 8, 128, 512, F32, F32, F32, TU_HND, 1, 1,
     {5, 300, 0}, -1, 0.0f, 0, OFF_NONE, DATA_RANDOM, TAIL_NAN},
    {"e11_nan_tail_d64_bf16_h8x8_b3_maxlen511_nhd_split7", 3, 8, 8, 64, 512, BF16, BF16, BF16,
     TU_NHD, 1, 1, {1, 511, 0}, 511, 0.0f, 7, OFF_NONE, DATA_RANDOM, TAIL_NAN},
    {"e12_nan_tail_d256_f16_h14x2_nolengths_maxlen600", 1, 14, 2, 256, 700, F16, F16, F32, TU_HND,
     1, 0, {0}, 600, 0.0f, 0, OFF_NONE, DATA_RANDOM, TAIL_NAN},
};
/* clang-format on */

static clkv_context *g_ctx;
static double g_total_seconds;

static const char *data_name(data_mode m) {
    switch (m) {
    case DATA_RANDOM:
        return "random";
    case DATA_EQUAL_KEYS:
        return "equal-keys";
    case DATA_HUGE_POS:
        return "huge+";
    case DATA_HUGE_NEG:
        return "huge-";
    case DATA_STEP_POS:
        return "step+";
    case DATA_STEP_NEG:
        return "step-";
    case DATA_TINY:
        return "tiny";
    case DATA_DOMINANT:
        return "dominant";
    }
    return "?";
}

/* Element offsets of q, k, v (inputs) and o, lse (outputs) for the case. Outputs always
 * sit at a non-zero offset with guards after them. */
static void case_offsets(const dcase *c, int64_t *q_off, int64_t *k_off, int64_t *v_off,
                         int64_t *o_off, int64_t *lse_off) {
    switch (c->offset) {
    case OFF_ODD:
        *q_off = 1;
        *k_off = 3;
        *v_off = 5;
        *o_off = 7;
        *lse_off = 3;
        break;
    case OFF_ALIGNED:
        *q_off = 128;
        *k_off = 256;
        *v_off = 512;
        *o_off = 64;
        *lse_off = 64;
        break;
    default:
        *q_off = 0;
        *k_off = 0;
        *v_off = 0;
        *o_off = 16;
        *lse_off = 8;
        break;
    }
}

/* Fill q, K, V (logical, row-major) for the case; K/V rows j >= eff[b] get the tail
 * value. Values are rounded to their storage dtypes afterwards by the caller. */
static void generate(const dcase *c, tu_rng *r, const int32_t *eff, float *q, float *k, float *v) {
    const int64_t B = c->B, Hq = c->Hq, Hkv = c->Hkv, D = c->D, L = c->L, G = Hq / Hkv;
    const float tail = c->tail == TAIL_NAN ? NAN : 1000.0f;
    const double scale = c->scale != 0.0f ? (double)c->scale : 1.0 / sqrt((double)D);
    const size_t nq = (size_t)(B * Hq * D);

    if (c->data == DATA_HUGE_POS || c->data == DATA_HUGE_NEG || c->data == DATA_STEP_POS ||
        c->data == DATA_STEP_NEG) {
        /* q = +-qv (a power of two), k in {2, 127/64} (HUGE) or {2, 1} (STEP): every
         * product and partial sum of <q, k> is exact in f32, |scale * <q, k>| <= 1024.
         * HUGE: random keys, logits spread over a few units around +-1024.
         * STEP: key j is all 2 when j % 4 == 1 (|z| = 1024), else 2 with D/16 coordinates
         * set to 1 (|z| = 992): the softmax is uniform over one group of identical keys and
         * the others have relative weight e^-32, so o does not depend on f32 logit
         * rounding. */
        const double qv = 1024.0 / (scale * 2.0 * (double)D);
        const int pos = c->data == DATA_HUGE_POS || c->data == DATA_STEP_POS;
        const int step = c->data == DATA_STEP_POS || c->data == DATA_STEP_NEG;
        const float qs = (float)(pos ? qv : -qv);
        for (size_t i = 0; i < nq; i++) {
            q[i] = qs;
        }
        for (int64_t bh = 0; bh < B * Hkv; bh++) {
            for (int64_t j = 0; j < L; j++) {
                float *kr = k + (size_t)((bh * L + j) * D);
                for (int64_t d = 0; d < D; d++) {
                    if (step) {
                        kr[d] = (j % 4 != 1 && d < D / 16) ? 1.0f : 2.0f;
                    } else {
                        kr[d] = (tu_rng_u64(r) >> 63) ? 2.0f : 127.0f / 64.0f;
                    }
                }
            }
        }
        tu_fill_normal(r, v, (size_t)(B * Hkv * L * D), 0.0, 1.0);
    } else {
        const double mag = c->data == DATA_TINY ? 1e-20 : 1.0;
        /* Only valid rows need random data; the tail is overwritten below. */
        tu_fill_normal(r, q, nq, 0.0, mag);
        for (int64_t b = 0; b < B; b++) {
            for (int64_t h = 0; h < Hkv; h++) {
                size_t base = (size_t)(((b * Hkv + h) * L) * D);
                size_t nvalid = (size_t)eff[b] * (size_t)D;
                tu_fill_normal(r, k + base, nvalid, 0.0, mag);
                tu_fill_normal(r, v + base, nvalid, 0.0, mag);
            }
        }
        if (c->data == DATA_EQUAL_KEYS) {
            for (int64_t bh = 0; bh < B * Hkv; bh++) {
                float *k0 = k + (size_t)(bh * L * D);
                for (int64_t j = 1; j < L; j++) {
                    memcpy(k0 + j * D, k0, (size_t)D * sizeof(float));
                }
            }
        }
        if (c->data == DATA_DOMINANT) {
            /* The G query heads of a KV head share a direction u (plus 10 % noise); one
             * token per (b, kv head) has k = c*u with scale*c*|u|^2 = 25. */
            for (int64_t b = 0; b < B; b++) {
                for (int64_t hk = 0; hk < Hkv; hk++) {
                    float *u = q + (size_t)((b * Hq + hk * G) * D);
                    double uu = 0.0;
                    int64_t jstar;
                    for (int64_t g = 1; g < G; g++) {
                        float *qg = q + (size_t)((b * Hq + hk * G + g) * D);
                        for (int64_t d = 0; d < D; d++) {
                            qg[d] = u[d] + 0.1f * qg[d];
                        }
                    }
                    for (int64_t d = 0; d < D; d++) {
                        uu += (double)u[d] * (double)u[d];
                    }
                    if (eff[b] == 0) {
                        continue;
                    }
                    jstar = (eff[b] * 2) / 3; /* inside a later split */
                    {
                        float *kr = k + (size_t)(((b * Hkv + hk) * L + jstar) * D);
                        double cst = 25.0 / (scale * uu);
                        for (int64_t d = 0; d < D; d++) {
                            kr[d] = (float)(cst * (double)u[d]);
                        }
                    }
                }
            }
        }
    }
    /* rows past the valid length: garbage that must not be read */
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

static void run_case(void **state) {
    const dcase *c = (const dcase *)*state;
    const size_t idx = (size_t)(c - g_cases);
    const uint64_t seed = tu_seed(DEFAULT_SEED);
    const int64_t B = c->B, Hq = c->Hq, Hkv = c->Hkv, D = c->D, L = c->L;
    const int64_t maxlen = c->max_length < 0 ? L : c->max_length;
    const size_t nq = (size_t)(B * Hq * D), nkv = (size_t)(B * Hkv * L * D);
    int64_t q_off, k_off, v_off, o_off, lse_off;
    int32_t eff[3], dev_lens[3];
    tu_rng rng;
    float *q, *k, *v, *o_got, *lse_got = NULL;
    double *o_ref, *lse_ref;
    double t0, t_gen, t_up, t_run, t_ref, scale_ref, dz;
    double *spread;
    clkv_tensor tq, tk, tv, tlen, to, tlse;
    clkv_attention_decode_args args = CLKV_ATTENTION_DECODE_ARGS_INIT;
    size_t ws_bytes = 0;
    cl_event ev = NULL;
    tu_tol tol;
    char what[256];

    tu_set_case("%s (B=%" PRId64 " Hq=%" PRId64 " Hkv=%" PRId64 " D=%" PRId64 " L=%" PRId64
                " q=%s kv=%s o=%s %s lse=%d lengths=%s {%d,%d,%d} max_length=%" PRId64
                " scale=%g splits=%d offsets=%d data=%s tail=%s)",
                c->name, B, Hq, Hkv, D, L, clkv_dtype_name(c->qdt), clkv_dtype_name(c->kvdt),
                clkv_dtype_name(c->odt), tu_layout_name(c->layout), c->want_lse,
                c->has_lengths ? "buffer" : "absent", c->lens[0], c->lens[1], c->lens[2],
                c->max_length, (double)c->scale, c->num_splits, (int)c->offset, data_name(c->data),
                c->tail == TAIL_NAN ? "NaN" : "1000");
    assert_true(B >= 1 && B <= 3);
    tu_rng_seed(&rng, seed, (uint64_t)idx + 1);
    case_offsets(c, &q_off, &k_off, &v_off, &o_off, &lse_off);

    /* Effective lengths: the lengths buffer clamped to max_length, or max_length. */
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

    /* Device tensors */
    t0 = tu_now();
    {
        int64_t qdims[3] = {B, Hq, D};
        int64_t odims[3] = {B, Hq, D};
        int64_t ldims[2] = {B, Hq};
        int64_t bdims[1] = {B};
        size_t qes = tu_dtype_size(c->qdt), kes = tu_dtype_size(c->kvdt);
        size_t oes = tu_dtype_size(c->odt);
        tq = tu_tensor_upload(g_ctx, q, c->qdt, 3, qdims, (uint64_t)q_off * qes, 6);
        tk = tu_kv_tensor_offset(g_ctx, k, c->kvdt, B, Hkv, L, D, c->layout, (uint64_t)k_off * kes);
        tv = tu_kv_tensor_offset(g_ctx, v, c->kvdt, B, Hkv, L, D, c->layout, (uint64_t)v_off * kes);
        tlen = c->has_lengths ? tu_tensor_upload_i32(g_ctx, dev_lens, 1, bdims, 0, 0)
                              : clkv_tensor_none();
        to = tu_tensor_alloc(g_ctx, c->odt, 3, odims, (uint64_t)o_off * oes, 11 * oes);
        tlse = c->want_lse
                   ? tu_tensor_alloc(g_ctx, CLKV_F32, 2, ldims, (uint64_t)lse_off * 4, 5 * 4)
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

    TU_CHECK_OK(g_ctx, clkv_attention_decode_workspace_size(g_ctx, &args, &ws_bytes));

    t0 = tu_now();
    TU_CHECK_OK(g_ctx, clkv_attention_decode(g_ctx, &args, &ev));
    tu_expect_completed(g_ctx, ev, ws_bytes, "clkv_attention_decode");
    t_run = tu_now() - t0;

    /* Outputs written exactly: all elements, nothing around them. */
    tu_assert_written_exactly(g_ctx, &to, "o");
    if (c->want_lse) {
        tu_assert_written_exactly(g_ctx, &tlse, "lse");
    }

    /* Reference */
    t0 = tu_now();
    o_ref = (double *)tu_malloc(nq * sizeof(double));
    lse_ref = (double *)tu_malloc((size_t)(B * Hq) * sizeof(double));
    scale_ref = c->scale != 0.0f ? (double)c->scale : 1.0 / sqrt((double)D);
    spread = (double *)tu_malloc(nq * sizeof(double));
    if (ref_attention_decode_ex(B, Hq, Hkv, L, D, q, k, v, eff, scale_ref, o_ref, lse_ref,
                                spread) != 0) {
        TU_FAIL("reference rejected the case (test bug)");
    }
    /* Logit error allowance for |z| ~ 1e3 (SPEC §0.2 tolerances assume well-conditioned
     * logits): an f32 kernel computes z = s<q, k> (typically pre-scaled by log2 e) with
     * rounding errors ~ 2^-24 * sqrt(D) * |z|; allow 4x that per logit, dz. To first order
     * it moves o by <= 2 dz spread (spread = sum_j p_j |v_j - o|) and LSE by <= dz. Zero
     * for every other data mode. */
    dz = 0.0;
    if (c->data == DATA_HUGE_POS || c->data == DATA_HUGE_NEG || c->data == DATA_STEP_POS ||
        c->data == DATA_STEP_NEG) {
        double zmax = 0.0;
        for (int64_t b = 0; b < B; b++) {
            for (int64_t h = 0; h < Hq; h++) {
                double qq = 0.0;
                for (int64_t d = 0; d < D; d++) {
                    double x = (double)q[(size_t)((b * Hq + h) * D + d)];
                    qq += x * x;
                }
                for (int64_t j = 0; j < eff[b]; j++) {
                    const float *kr = k + (size_t)(((b * Hkv + h / (Hq / Hkv)) * L + j) * D);
                    double kk = 0.0;
                    for (int64_t d = 0; d < D; d++) {
                        kk += (double)kr[d] * (double)kr[d];
                    }
                    if (fabs(scale_ref) * sqrt(qq * kk) > zmax) {
                        zmax = fabs(scale_ref) * sqrt(qq * kk);
                    }
                }
            }
        }
        dz = ldexp(sqrt((double)D) + 1.0, -22) * zmax;
    }
    for (size_t i = 0; i < nq; i++) {
        /* STEP data: o is insensitive to logit errors; keep the SPEC tolerance. */
        spread[i] =
            (c->data == DATA_STEP_POS || c->data == DATA_STEP_NEG) ? 0.0 : 2.0 * dz * spread[i];
    }
    t_ref = tu_now() - t0;

    o_got = (float *)tu_malloc(nq * sizeof(float));
    tu_tensor_read(g_ctx, &to, o_got);
    tol = tu_tol_for(c->odt);
    if (c->data == DATA_TINY) {
        tol.atol *= 1e-20; /* outputs are ~1e-20: keep the check relative */
    }
    {
        int64_t odims[3] = {B, Hq, D};
        snprintf(what, sizeof what, "o (%s)", clkv_dtype_name(c->odt));
        tu_assert_close_ex(what, o_got, o_ref, nq, tol, dz > 0.0 ? spread : NULL, 3, odims);
    }
    if (c->want_lse) {
        int64_t ldims[2] = {B, Hq};
        lse_got = (float *)tu_malloc((size_t)(B * Hq) * sizeof(float));
        tu_tensor_read(g_ctx, &tlse, lse_got);
        tu_assert_lse("lse", lse_got, lse_ref, (size_t)(B * Hq), TU_LSE_ATOL + dz, 2, ldims);
    }
    /* Empty sequences: exactly zero output (the tolerance would accept tiny values). */
    for (int64_t b = 0; b < B; b++) {
        if (eff[b] != 0) {
            continue;
        }
        for (int64_t i = 0; i < Hq * D; i++) {
            float x = o_got[(size_t)(b * Hq * D + i)];
            if (x != 0.0f) {
                TU_FAIL("o[%" PRId64 ", %" PRId64 ", %" PRId64 "] = %g for an empty sequence, "
                        "expected 0",
                        b, i / D, i % D, (double)x);
            }
        }
    }

    printf("[ case     ] %-62s %6.2f s (gen %.2f, upload %.2f, kernel %.2f, ref %.2f)\n", c->name,
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

/* The same call twice on the same inputs gives bit-identical outputs (no races in the
 * split-K merge), and a second call with a different split count agrees within
 * tolerance. */
static void test_repeatable(void **state) {
    const uint64_t seed = tu_seed(DEFAULT_SEED);
    const int64_t B = 3, Hq = 32, Hkv = 8, D = 128, L = 700;
    const int32_t lens[3] = {700, 333, 1};
    const size_t nq = (size_t)(B * Hq * D), nkv = (size_t)(B * Hkv * L * D);
    int64_t qdims[3] = {B, Hq, D}, ldims[2] = {B, Hq}, bdims[1] = {B};
    tu_rng rng;
    float *q = (float *)tu_malloc(nq * sizeof(float));
    float *k = (float *)tu_malloc(nkv * sizeof(float));
    float *v = (float *)tu_malloc(nkv * sizeof(float));
    float *o1 = (float *)tu_malloc(nq * sizeof(float));
    float *o2 = (float *)tu_malloc(nq * sizeof(float));
    float *l1 = (float *)tu_malloc((size_t)(B * Hq) * sizeof(float));
    float *l2 = (float *)tu_malloc((size_t)(B * Hq) * sizeof(float));
    double *o1d = (double *)tu_malloc(nq * sizeof(double));
    clkv_attention_decode_args args = CLKV_ATTENTION_DECODE_ARGS_INIT;
    clkv_tensor to, tlse;
    (void)state;

    tu_set_case("repeatable (B=3 Hq=32 Hkv=8 D=128 L=700 f32, default splits then 3)");
    tu_rng_seed(&rng, seed, 1000);
    tu_fill_normal(&rng, q, nq, 0.0, 1.0);
    tu_fill_normal(&rng, k, nkv, 0.0, 1.0);
    tu_fill_normal(&rng, v, nkv, 0.0, 1.0);
    args.q = tu_tensor_upload(g_ctx, q, CLKV_F32, 3, qdims, 0, 0);
    args.k = tu_kv_tensor(g_ctx, k, CLKV_F32, B, Hkv, L, D, TU_HND);
    args.v = tu_kv_tensor(g_ctx, v, CLKV_F32, B, Hkv, L, D, TU_HND);
    args.lengths = tu_tensor_upload_i32(g_ctx, lens, 1, bdims, 0, 0);
    to = tu_tensor_alloc(g_ctx, CLKV_F32, 3, qdims, 0, 0);
    tlse = tu_tensor_alloc(g_ctx, CLKV_F32, 2, ldims, 0, 0);
    args.o = to;
    args.lse = tlse;

    TU_CHECK_OK(g_ctx, clkv_attention_decode(g_ctx, &args, NULL));
    TU_CHECK_OK(g_ctx, clkv_context_finish(g_ctx));
    tu_tensor_read(g_ctx, &to, o1);
    tu_tensor_read(g_ctx, &tlse, l1);
    tu_buffer_poison(g_ctx, to.buf, 0, tu_buffer_size(to.buf));
    tu_buffer_poison(g_ctx, tlse.buf, 0, tu_buffer_size(tlse.buf));
    TU_CHECK_OK(g_ctx, clkv_attention_decode(g_ctx, &args, NULL));
    TU_CHECK_OK(g_ctx, clkv_context_finish(g_ctx));
    tu_tensor_read(g_ctx, &to, o2);
    tu_tensor_read(g_ctx, &tlse, l2);
    if (memcmp(o1, o2, nq * sizeof(float)) != 0 ||
        memcmp(l1, l2, (size_t)(B * Hq) * sizeof(float)) != 0) {
        size_t i = 0;
        while (i < nq && memcmp(&o1[i], &o2[i], sizeof(float)) == 0) {
            i++;
        }
        TU_FAIL("two identical calls differ (first o difference at flat index %zu: %.9g vs "
                "%.9g)",
                i, i < nq ? (double)o1[i] : 0.0, i < nq ? (double)o2[i] : 0.0);
    }
    /* different split count: same result within f32 tolerance */
    args.num_splits = 3;
    TU_CHECK_OK(g_ctx, clkv_attention_decode(g_ctx, &args, NULL));
    TU_CHECK_OK(g_ctx, clkv_context_finish(g_ctx));
    tu_tensor_read(g_ctx, &to, o2);
    for (size_t i = 0; i < nq; i++) {
        o1d[i] = (double)o1[i];
    }
    tu_assert_close("o (splits 3 vs default)", o2, o1d, nq, tu_tol_for(CLKV_F32), 3, qdims);

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
    tu_set_case("%s", "");
}

/* Per-(sequence, KV head) lengths [B, Hkv]: every KV head of a sequence has its own
 * valid length (a cache compacted with per-head kept counts). The reference runs per
 * (b, kv head) slice with that slice's length. Cases cover 0, 1, full L, lengths above
 * max_length (clamped), a strided lengths view, forced splits, GQA G = 1, 4, 8. */
typedef struct phcase {
    const char *name;
    int64_t B, Hq, Hkv, D, L, max_length;
    clkv_dtype dt;
    tu_layout layout;
    int32_t num_splits;
    int64_t len_stride; /* stride of dim 0 of the lengths view (>= Hkv) */
} phcase;

static void test_per_head_lengths(void **state) {
    static const phcase cases[] = {
        {"ph_d128_bf16_nhd_h16x4_b2", 2, 16, 4, 128, 300, -1, CLKV_BF16, TU_NHD, 0, 4},
        {"ph_d64_f16_hnd_h8x8_b3_maxlen200_split5_strided", 3, 8, 8, 64, 257, 200, CLKV_F16, TU_HND,
         5, 11},
        {"ph_d256_f32_hnd_h16x2_b1", 1, 16, 2, 256, 1100, -1, CLKV_F32, TU_HND, 0, 2},
    };
    const uint64_t seed = tu_seed(DEFAULT_SEED);
    (void)state;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const phcase *c = &cases[ci];
        const int64_t B = c->B, Hq = c->Hq, Hkv = c->Hkv, D = c->D, L = c->L, G = Hq / Hkv;
        const int64_t maxlen = c->max_length < 0 ? L : c->max_length;
        const size_t nq = (size_t)(B * Hq * D), nkv = (size_t)(B * Hkv * L * D);
        int64_t qdims[3] = {B, Hq, D}, ldims[2] = {B, Hq};
        int64_t lbuf_dims[2] = {B, c->len_stride};
        tu_rng rng;
        clkv_attention_decode_args args = CLKV_ATTENTION_DECODE_ARGS_INIT;
        float *q = (float *)tu_malloc(nq * sizeof(float));
        float *k = (float *)tu_malloc(nkv * sizeof(float));
        float *v = (float *)tu_malloc(nkv * sizeof(float));
        float *o_got = (float *)tu_malloc(nq * sizeof(float));
        float *lse_got = (float *)tu_malloc((size_t)(B * Hq) * sizeof(float));
        double *o_ref = (double *)tu_malloc(nq * sizeof(double));
        double *lse_ref = (double *)tu_malloc((size_t)(B * Hq) * sizeof(double));
        int32_t *dev = (int32_t *)tu_malloc((size_t)(B * c->len_stride) * sizeof(int32_t));
        int32_t *eff = (int32_t *)tu_malloc((size_t)(B * Hkv) * sizeof(int32_t));

        tu_set_case("%s (B=%" PRId64 " Hq=%" PRId64 " Hkv=%" PRId64 " D=%" PRId64 " L=%" PRId64
                    " max_length=%" PRId64 " %s %s splits=%d)",
                    c->name, B, Hq, Hkv, D, L, c->max_length, clkv_dtype_name(c->dt),
                    tu_layout_name(c->layout), (int)c->num_splits);
        tu_rng_seed(&rng, seed, 2000 + ci);
        for (int64_t i = 0; i < B * c->len_stride; i++) {
            dev[i] = -7; /* padding of the strided view: never read */
        }
        for (int64_t b = 0; b < B; b++) {
            for (int64_t h = 0; h < Hkv; h++) {
                const int64_t r = b * Hkv + h;
                int32_t n;
                switch (r % 5) {
                case 0:
                    n = 0;
                    break;
                case 1:
                    n = 1;
                    break;
                case 2:
                    n = (int32_t)L;
                    break; /* above max_length when max_length < L */
                default:
                    n = (int32_t)tu_rng_int(&rng, 2, maxlen);
                    break;
                }
                dev[b * c->len_stride + h] = n;
                eff[r] = n > (int32_t)maxlen ? (int32_t)maxlen : n;
            }
        }
        tu_fill_normal(&rng, q, nq, 0.0, 1.0);
        tu_fill_normal(&rng, k, nkv, 0.0, 1.0);
        tu_fill_normal(&rng, v, nkv, 0.0, 1.0);
        /* rows past each head's valid length: garbage that would show if read */
        for (int64_t r = 0; r < B * Hkv; r++) {
            for (int64_t j = eff[r]; j < L; j++) {
                for (int64_t d = 0; d < D; d++) {
                    k[(size_t)((r * L + j) * D + d)] = 1000.0f;
                    v[(size_t)((r * L + j) * D + d)] = 1000.0f;
                }
            }
        }
        tu_round_array(c->dt, q, nq);
        tu_round_array(c->dt, k, nkv);
        tu_round_array(c->dt, v, nkv);

        args.q = tu_tensor_upload(g_ctx, q, c->dt, 3, qdims, 0, 0);
        args.k = tu_kv_tensor(g_ctx, k, c->dt, B, Hkv, L, D, c->layout);
        args.v = tu_kv_tensor(g_ctx, v, c->dt, B, Hkv, L, D, c->layout);
        args.lengths = tu_tensor_upload_i32(g_ctx, dev, 2, lbuf_dims, 0, 0);
        args.lengths.dims[1] = Hkv; /* [B, Hkv] view with row stride len_stride */
        args.o = tu_tensor_alloc(g_ctx, CLKV_F32, 3, qdims, 0, 0);
        args.lse = tu_tensor_alloc(g_ctx, CLKV_F32, 2, ldims, 0, 0);
        args.max_length = c->max_length;
        args.num_splits = c->num_splits;
        TU_CHECK_OK(g_ctx, clkv_attention_decode(g_ctx, &args, NULL));
        TU_CHECK_OK(g_ctx, clkv_context_finish(g_ctx));
        tu_assert_written_exactly(g_ctx, &args.o, "o");
        tu_assert_written_exactly(g_ctx, &args.lse, "lse");
        tu_tensor_read(g_ctx, &args.o, o_got);
        tu_tensor_read(g_ctx, &args.lse, lse_got);

        /* reference per (b, kv head): a B = 1, Hkv = 1 problem with G query heads */
        for (int64_t b = 0; b < B; b++) {
            for (int64_t h = 0; h < Hkv; h++) {
                const size_t qo = (size_t)((b * Hq + h * G) * D);
                const size_t ko = (size_t)((b * Hkv + h) * L * D);
                if (ref_attention_decode(1, G, 1, L, D, q + qo, k + ko, v + ko, &eff[b * Hkv + h],
                                         1.0 / sqrt((double)D), o_ref + qo,
                                         lse_ref + (size_t)(b * Hq + h * G)) != 0) {
                    TU_FAIL("reference rejected the case (test bug)");
                }
            }
        }
        tu_assert_close("o", o_got, o_ref, nq, tu_tol_for(CLKV_F32), 3, qdims);
        tu_assert_lse("lse", lse_got, lse_ref, (size_t)(B * Hq), TU_LSE_ATOL, 2, ldims);
        for (int64_t r = 0; r < B * Hkv; r++) {
            for (int64_t i = 0; eff[r] == 0 && i < G * D; i++) {
                if (o_got[(size_t)(r * G * D + i)] != 0.0f) {
                    TU_FAIL("o of empty (b, kv head) %" PRId64 " is %g, expected 0", r,
                            (double)o_got[(size_t)(r * G * D + i)]);
                }
            }
        }

        tu_release(args.q.buf);
        tu_release(args.k.buf);
        tu_release(args.v.buf);
        tu_release(args.lengths.buf);
        tu_release(args.o.buf);
        tu_release(args.lse.buf);
        free(q);
        free(k);
        free(v);
        free(o_got);
        free(lse_got);
        free(o_ref);
        free(lse_ref);
        free(dev);
        free(eff);
    }
    tu_set_case("%s", "");
}

/* Bad per-head lengths: wrong head count, wrong rank, nothing written. */
static void test_per_head_lengths_rejected(void **state) {
    const int64_t B = 2, Hq = 8, Hkv = 2, D = 64, L = 16;
    int64_t qdims[3] = {B, Hq, D};
    int32_t lens[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    int64_t ldims[2] = {B, 4};
    float *q = (float *)tu_calloc((size_t)(B * Hq * D), sizeof(float));
    float *kv = (float *)tu_calloc((size_t)(B * Hkv * L * D), sizeof(float));
    clkv_attention_decode_args args = CLKV_ATTENTION_DECODE_ARGS_INIT;
    clkv_status st;
    (void)state;
    tu_set_case("per-head lengths rejected");
    args.q = tu_tensor_upload(g_ctx, q, CLKV_F32, 3, qdims, 0, 0);
    args.k = tu_kv_tensor(g_ctx, kv, CLKV_F32, B, Hkv, L, D, TU_HND);
    args.v = tu_kv_tensor(g_ctx, kv, CLKV_F32, B, Hkv, L, D, TU_HND);
    args.o = tu_tensor_alloc(g_ctx, CLKV_F32, 3, qdims, 0, 0);
    args.lengths = tu_tensor_upload_i32(g_ctx, lens, 2, ldims, 0, 0); /* [B, 4], Hkv = 2 */
    st = clkv_attention_decode(g_ctx, &args, NULL);
    assert_int_equal(st, CLKV_ERR_ARG_SHAPE);
    assert_true(tu_msg_names(clkv_last_error(g_ctx), "lengths"));
    args.lengths = clkv_tensor_3d(args.lengths.buf, CLKV_I32, B, Hkv, 1);
    st = clkv_attention_decode(g_ctx, &args, NULL);
    assert_int_equal(st, CLKV_ERR_ARG_SHAPE);
    assert_true(tu_msg_names(clkv_last_error(g_ctx), "lengths"));
    args.lengths = clkv_tensor_2d(args.lengths.buf, CLKV_I32, B, Hkv);
    args.lengths.strides[1] = 2; /* head dim not contiguous */
    st = clkv_attention_decode(g_ctx, &args, NULL);
    assert_int_equal(st, CLKV_ERR_ARG_STRIDE);
    assert_true(tu_msg_names(clkv_last_error(g_ctx), "lengths"));
    TU_CHECK_OK(g_ctx, clkv_context_finish(g_ctx));
    tu_assert_buffer_poison(g_ctx, args.o.buf, "o");
    /* the valid [B, Hkv] view of the same buffer is accepted */
    args.lengths = clkv_tensor_2d(args.lengths.buf, CLKV_I32, B, Hkv);
    TU_CHECK_OK(g_ctx, clkv_attention_decode(g_ctx, &args, NULL));
    TU_CHECK_OK(g_ctx, clkv_context_finish(g_ctx));
    tu_release(args.q.buf);
    tu_release(args.k.buf);
    tu_release(args.v.buf);
    tu_release(args.o.buf);
    tu_release(args.lengths.buf);
    free(q);
    free(kv);
    tu_set_case("%s", "");
}

/* The host conversions the references rely on, against IEEE facts. */
static void test_dtype_helpers(void **state) {
    (void)state;
    tu_set_case("dtype helpers");
    /* f16: every non-NaN bit pattern round-trips; NaNs stay NaN. */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = tu_f16_to_f32((uint16_t)h);
        uint16_t back = tu_f32_to_f16(f);
        int is_nan = ((h & 0x7C00u) == 0x7C00u) && (h & 0x3FFu);
        if (is_nan ? !isnan(f) || !(((back & 0x7C00u) == 0x7C00u) && (back & 0x3FFu)) : back != h) {
            TU_FAIL("f16 0x%04x -> %g -> 0x%04x", (unsigned)h, (double)f, (unsigned)back);
        }
    }
    for (uint32_t b = 0; b < 65536; b++) {
        float f = tu_bf16_to_f32((uint16_t)b);
        uint16_t back = tu_f32_to_bf16(f);
        int is_nan = ((b & 0x7F80u) == 0x7F80u) && (b & 0x7Fu);
        if (is_nan ? !isnan(f) || !isnan(tu_bf16_to_f32(back)) : back != b) {
            TU_FAIL("bf16 0x%04x -> %g -> 0x%04x", (unsigned)b, (double)f, (unsigned)back);
        }
    }
    /* f16 known values, rounding to nearest even, subnormals and overflow */
    assert_int_equal(tu_f32_to_f16(1.0f), 0x3C00);
    assert_int_equal(tu_f32_to_f16(-2.0f), 0xC000);
    assert_int_equal(tu_f32_to_f16(65504.0f), 0x7BFF);
    assert_int_equal(tu_f32_to_f16(65519.99f), 0x7BFF);
    assert_int_equal(tu_f32_to_f16(65520.0f), 0x7C00);
    assert_int_equal(tu_f32_to_f16(1e9f), 0x7C00);
    assert_int_equal(tu_f32_to_f16(-INFINITY), 0xFC00);
    assert_true((tu_f32_to_f16(NAN) & 0x7FFF) > 0x7C00);
    assert_int_equal(tu_f32_to_f16(ldexpf(1.0f, -24)), 0x0001);        /* smallest subnormal */
    assert_int_equal(tu_f32_to_f16(ldexpf(1.0f, -25)), 0x0000);        /* tie -> even (0) */
    assert_int_equal(tu_f32_to_f16(ldexpf(1.5f, -25)), 0x0001);        /* above the tie */
    assert_int_equal(tu_f32_to_f16(ldexpf(3.0f, -25)), 0x0002);        /* 1.5 ulp: tie -> even */
    assert_int_equal(tu_f32_to_f16(ldexpf(5.0f, -25)), 0x0002);        /* 2.5 ulp: tie -> even */
    assert_int_equal(tu_f32_to_f16(ldexpf(1.0f, -14)), 0x0400);        /* smallest normal */
    assert_int_equal(tu_f32_to_f16(ldexpf(1023.5f, -24)), 0x0400);     /* rounds up to normal */
    assert_int_equal(tu_f32_to_f16(1.0f + ldexpf(1.0f, -11)), 0x3C00); /* tie -> even */
    assert_int_equal(tu_f32_to_f16(1.0f + ldexpf(3.0f, -11)), 0x3C02); /* tie -> even */
    assert_int_equal(tu_f32_to_f16(-0.0f), 0x8000);
    assert_true(tu_f16_to_f32(0x0001) == ldexpf(1.0f, -24));
    assert_true(tu_f16_to_f32(0x7BFF) == 65504.0f);
    /* bf16 */
    assert_int_equal(tu_f32_to_bf16(1.0f), 0x3F80);
    assert_int_equal(tu_f32_to_bf16(tu_f32_from_bits(0x3F808000u)), 0x3F80); /* tie -> even */
    assert_int_equal(tu_f32_to_bf16(tu_f32_from_bits(0x3F818000u)), 0x3F82); /* tie -> even */
    assert_int_equal(tu_f32_to_bf16(tu_f32_from_bits(0x3F808001u)), 0x3F81);
    assert_int_equal(tu_f32_to_bf16(tu_f32_from_bits(0x7F7FFFFFu)), 0x7F80); /* -> inf */
    assert_true(isnan(tu_bf16_to_f32(tu_f32_to_bf16(tu_f32_from_bits(0x7F800001u)))));
    assert_true(isnan(tu_bf16_to_f32(tu_f32_to_bf16(tu_f32_from_bits(0xFF800001u)))));
    assert_true(tu_bf16_to_f32(0x3F80) == 1.0f);
    /* tolerance helper semantics */
    {
        float got[3] = {1.0f, -INFINITY, 2.0f};
        double ref[3] = {1.0 + 0.9e-4, -INFINITY, 2.0};
        tu_cmp cmp = tu_compare(got, ref, 3, tu_tol_for(CLKV_F32));
        assert_int_equal(cmp.n_bad, 0);
        ref[0] = 1.0 + 2e-4;
        cmp = tu_compare(got, ref, 3, tu_tol_for(CLKV_F32));
        assert_int_equal(cmp.n_bad, 1);
        assert_int_equal(cmp.worst, 0);
        ref[0] = 1.0;
        ref[1] = -1e30;
        cmp = tu_compare(got, ref, 3, tu_tol_for(CLKV_F32));
        assert_int_equal(cmp.n_bad, 1);
        got[1] = NAN;
        ref[1] = 0.0;
        cmp = tu_compare(got, ref, 3, tu_tol_for(CLKV_BF16));
        assert_int_equal(cmp.n_bad, 1);
    }
    assert_true(tu_msg_names("k: dims[0] = 3", "k"));
    assert_true(tu_msg_names("bad max_length (5)", "max_length"));
    assert_false(tu_msg_names("kernel failed", "k"));
    assert_false(tu_msg_names("max_lengths", "max_length"));
    tu_set_case("%s", "");
}

/* The reference itself on hand-computable inputs (so a reference bug cannot hide a
 * kernel bug). */
static void test_reference_selfcheck(void **state) {
    /* B=1, Hq=2, Hkv=1, L=3, D=1 ... D must be >= 1; use D=2 */
    const float q[4] = {1.0f, 0.0f, 0.0f, 0.0f}; /* head 0: (1,0); head 1: (0,0) */
    const float k[6] = {0.0f, 0.0f, 1.0f, 0.0f, 2.0f, 0.0f};
    const float v[6] = {1.0f, 0.0f, 0.0f, 1.0f, 0.0f, 0.0f};
    const int32_t len[1] = {3};
    const int32_t len0[1] = {0};
    double o[4], lse[2];
    double e0 = 1.0, e1 = exp(1.0), e2 = exp(2.0), s = e0 + e1 + e2;
    (void)state;
    tu_set_case("reference self-check");
    assert_int_equal(ref_attention_decode(1, 2, 1, 3, 2, q, k, v, len, 1.0, o, lse), 0);
    assert_true(fabs(o[0] - e0 / s) < 1e-15);
    assert_true(fabs(o[1] - e1 / s) < 1e-15);
    assert_true(fabs(lse[0] - log(s)) < 1e-15);
    assert_true(fabs(o[2] - 1.0 / 3.0) < 1e-15); /* head 1: uniform */
    assert_true(fabs(o[3] - 1.0 / 3.0) < 1e-15);
    assert_true(fabs(lse[1] - log(3.0)) < 1e-15);
    /* huge logits: scale 1000 -> z = 0, 1000, 2000: no overflow */
    assert_int_equal(ref_attention_decode(1, 2, 1, 3, 2, q, k, v, len, 1000.0, o, lse), 0);
    assert_true(isfinite(o[0]) && isfinite(lse[0]));
    assert_true(fabs(lse[0] - 2000.0) < 1e-9);
    assert_true(fabs(o[0] - 0.0) < 1e-300 + 1e-12 && fabs(o[1] - exp(-1000.0)) < 1e-12);
    /* empty */
    assert_int_equal(ref_attention_decode(1, 2, 1, 3, 2, q, k, v, len0, 1.0, o, lse), 0);
    assert_true(o[0] == 0.0 && o[1] == 0.0 && isinf(lse[0]) && lse[0] < 0);
    /* Hq % Hkv != 0 */
    assert_int_equal(ref_attention_decode(1, 3, 2, 3, 2, q, k, v, len, 1.0, o, lse), -1);
    tu_set_case("%s", "");
}

static void print_timing(void) {
    printf("[ timing   ] attention decode cases: %.2f s in total\n", g_total_seconds);
}

int main(void) {
    tu_suite s = {0};
    tu_suite_add(&s, "dtype_helpers", test_dtype_helpers, NULL);
    tu_suite_add(&s, "reference_selfcheck", test_reference_selfcheck, NULL);
    TU_SUITE_ADD_CASES(&s, g_cases, run_case);
    tu_suite_add(&s, "repeatable_and_split_invariant", test_repeatable, NULL);
    tu_suite_add(&s, "per_head_lengths", test_per_head_lengths, NULL);
    tu_suite_add(&s, "per_head_lengths_rejected", test_per_head_lengths_rejected, NULL);
    s.at_end = print_timing;
    return tu_suite_run(&s, "attention_decode", &g_ctx, DEFAULT_SEED);
}
