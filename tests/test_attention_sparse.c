/* clkv_attention_sparse (SPEC §1.3) against the double-precision reference
 * (tests/ref/ref_sparse.c) on the default device ($CLKV_DEVICE; PoCL CPU in CI).
 *
 * Cases cover D 64/128/256, f32/f16/bf16 storage (also mixed q/kv/o dtypes), GQA 32/8,
 * 14/2, 8/8 and 32/2 (G = 16: two head groups), B = 1 and 3, HND/NHD caches, lengths
 * 0/1/short/long and absent, max_length < L, sink/local larger than n, and idx lists with
 * duplicates, out-of-range values (>= n, INT32_MAX), -1 and other negatives, entries
 * inside the dense ranges, unsorted or sorted, absent, empty (NI = 0), one entry, all
 * equal, and NI large enough for the hash set (3000) and beyond it (the scan, 5000).
 *
 * Every K/V row OUTSIDE the attended set of its (b, kv head) holds NaN, so reading any
 * row that is not in the set poisons the result. Outputs are poisoned first, placed at
 * an offset with guard bytes after them; afterwards every element must be written and
 * every guard byte still poison. A test that counted a duplicate twice moves o by about
 * 1/|S| (far above the tolerance).
 *
 * Reproduce a failure with CLKV_TEST_SEED=<seed printed>.
 */
#include "util/test_util.h"
#include "ref/ref_sparse.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_SEED 0x5BA25E0A77E2026ull

typedef enum idx_mode {
    IDX_ABSENT = 0, /* no idx tensor */
    IDX_MIXED,      /* random: valid, duplicates, dense-range hits, -1, >= n, extremes */
    IDX_SORTED,     /* ascending unique values in [0, n) */
    IDX_ALL_SAME,   /* every entry the same valid token */
    IDX_INVALID,    /* only -1, negatives, >= n */
    IDX_NARROW,     /* values from a small range: many duplicates across tiles/splits */
} idx_mode;

typedef struct scase {
    const char *name;
    int64_t B, Hq, Hkv, D, L;
    clkv_dtype qdt, kvdt, odt;
    tu_layout layout;
    int want_lse;
    int has_lengths;
    int32_t lens[3];
    int64_t max_length; /* -1: L */
    int64_t sink, local;
    int64_t NI; /* entries per (b, kv head) */
    idx_mode mode;
    int64_t idx_pad; /* extra int32 between (b, kv head) rows of idx (stride NI + pad) */
    int odd_offsets; /* q, k, v at odd element offsets (unaligned rows) */
    float scale;
} scase;

#define F32 CLKV_F32
#define F16 CLKV_F16
#define BF16 CLKV_BF16

/* clang-format off */
static const scase g_cases[] = {
    {"d64_f32_h8x8_len300_mixed", 1, 8, 8, 64, 300, F32, F32, F32, TU_HND, 1, 1, {300}, -1,
     4, 32, 40, IDX_MIXED, 0, 0, 0.0f},
    {"d128_bf16_h32x8_b3_len2000_1_0_mixed_nhd", 3, 32, 8, 128, 2000, BF16, BF16, BF16, TU_NHD,
     1, 1, {2000, 1, 0}, -1, 4, 64, 100, IDX_MIXED, 0, 0, 0.0f},
    {"d256_f16_h14x2_b3_local_exceeds_some_n", 3, 14, 2, 256, 700, F16, F16, F16, TU_HND, 1, 1,
     {700, 17, 5}, -1, 16, 600, 64, IDX_MIXED, 3, 0, 0.0f},
    {"d128_f32_h14x2_b3_sink_local_exceed_n", 3, 14, 2, 128, 500, F32, F32, F32, TU_NHD, 1, 1,
     {500, 3, 1}, -1, 1000, 1000, 20, IDX_MIXED, 0, 0, 0.0f},
    {"d64_bf16_h32x8_b3_no_idx", 3, 32, 8, 64, 400, BF16, BF16, F32, TU_HND, 1, 1,
     {400, 0, 9}, -1, 4, 16, 0, IDX_ABSENT, 0, 0, 0.0f},
    {"d128_f16_h8x8_ni0", 1, 8, 8, 128, 256, F16, F16, F32, TU_HND, 1, 1, {256}, -1, 2, 8, 0,
     IDX_MIXED, 0, 0, 0.0f},
    {"d64_f32_h32x8_b3_empty_set", 3, 32, 8, 64, 64, F32, F32, F32, TU_HND, 1, 1, {50, 0, 20},
     -1, 0, 0, 30, IDX_INVALID, 0, 0, 0.0f},
    {"d128_bf16_h14x2_all_same_ni300", 1, 14, 2, 128, 1000, BF16, BF16, BF16, TU_NHD, 1, 1,
     {1000}, -1, 4, 8, 300, IDX_ALL_SAME, 0, 0, 0.0f},
    {"d64_f16_h8x8_b3_narrow_ni3000_hash", 3, 8, 8, 64, 8192, F16, F16, F32, TU_HND, 1, 1,
     {8192, 2500, 40}, -1, 4, 64, 3000, IDX_NARROW, 0, 0, 0.0f},
    {"d64_f32_h8x1_mixed_ni5000_scan", 1, 8, 1, 64, 6000, F32, F32, F32, TU_HND, 1, 1, {6000},
     -1, 4, 64, 5000, IDX_MIXED, 0, 0, 0.0f},
    {"d256_bf16_h8x8_b3_sorted_nolse", 3, 8, 8, 256, 900, BF16, BF16, BF16, TU_HND, 0, 1,
     {900, 450, 2}, -1, 1, 33, 77, IDX_SORTED, 0, 0, 0.0f},
    {"d128_f32_h32x2_G16_mixed", 1, 32, 2, 128, 1500, F32, F32, F32, TU_HND, 1, 1, {1500}, -1,
     4, 100, 150, IDX_MIXED, 0, 0, 0.0f},
    {"d256_f32_h14x2_b3_nolengths_maxlen600_odd", 3, 14, 2, 256, 800, F32, F32, F16, TU_NHD, 1,
     0, {0}, 600, 3, 50, 90, IDX_MIXED, 0, 1, 0.0f},
    {"d64_qf32_kvf16_obf16_h32x8_b3_scale", 3, 32, 8, 64, 333, F32, F16, BF16, TU_HND, 1, 1,
     {333, 1, 100}, -1, 4, 20, 50, IDX_MIXED, 5, 0, 0.3f},
    {"d128_bf16_h8x8_len1_only_idx", 3, 8, 8, 128, 16, BF16, BF16, F32, TU_NHD, 1, 1,
     {1, 1, 0}, -1, 0, 0, 3, IDX_MIXED, 0, 0, 0.0f},
    {"d128_f16_h32x8_invalid_idx_dense_only", 1, 32, 8, 128, 1200, F16, F16, F16, TU_HND, 1, 1,
     {1111}, -1, 4, 512, 100, IDX_INVALID, 0, 1, 0.0f},
    {"d64_bf16_h14x2_b3_narrow_ni1000_lengths_clamped", 3, 14, 2, 64, 3000, BF16, BF16, BF16,
     TU_HND, 1, 1, {3000, 2999, 700}, 2000, 4, 128, 1000, IDX_NARROW, 0, 0, 0.0f},
};
/* clang-format on */

#define N_CASES (sizeof g_cases / sizeof g_cases[0])

static clkv_context *g_ctx;
static double g_total_seconds;

/* Fill one (b, kv head) row of NI idx entries for a sequence of n tokens. */
static void gen_idx(tu_rng *r, idx_mode mode, int64_t n, int64_t L, int64_t sink, int64_t local,
                    int32_t *out, int64_t NI) {
    for (int64_t i = 0; i < NI; i++) {
        int32_t t = -1;
        switch (mode) {
        case IDX_ABSENT:
            break;
        case IDX_MIXED: {
            const int64_t kind = tu_rng_int(r, 0, 19);
            if (kind == 0) {
                t = -1;
            } else if (kind == 1) {
                t = (int32_t)tu_rng_int(r, INT32_MIN, -2);
            } else if (kind == 2) {
                t = (int32_t)tu_rng_int(r, n, L + 50);
            } else if (kind == 3) {
                t = INT32_MAX;
            } else if (kind == 4 && i > 0) {
                t = out[tu_rng_int(r, 0, i - 1)]; /* repeat an earlier entry */
            } else if (kind == 5 && n > 0) {
                /* inside a dense range (or anywhere when they are empty) */
                t = (int32_t)(tu_rng_int(r, 0, 1) && sink > 0
                                  ? tu_rng_int(r, 0, (sink < n ? sink : n) - 1)
                                  : tu_rng_int(r, n - (local < n && local > 0 ? local : 1), n - 1));
            } else if (n > 0) {
                t = (int32_t)tu_rng_int(r, 0, n - 1);
            }
            break;
        }
        case IDX_SORTED:
            t = n > 0 ? (int32_t)((i * n) / (NI > 0 ? NI : 1)) : -1;
            if (i > 0 && t <= out[i - 1]) {
                t = -1; /* n < NI: pad with unused slots */
            }
            break;
        case IDX_ALL_SAME:
            t = n > 0 ? (int32_t)(n / 2) : -1;
            break;
        case IDX_INVALID: {
            const int64_t kind = tu_rng_int(r, 0, 2);
            t = kind == 0   ? -1
                : kind == 1 ? (int32_t)tu_rng_int(r, -1000, -1)
                            : (int32_t)tu_rng_int(r, n, n + 1000);
            break;
        }
        case IDX_NARROW:
            t = n > 0 ? (int32_t)tu_rng_int(r, 0, (n < 600 ? n : 600) - 1) : -1;
            if (n > 0 && tu_rng_int(r, 0, 9) == 0) {
                t = (int32_t)tu_rng_int(r, 0, n - 1);
            }
            break;
        }
        out[i] = t;
    }
}

/* The same call with the idx entries' rows taken from k_sel / v_sel [B, Hkv, NI, D] (the
 * case's layout, so NHD cases give strided rows): row i holds K/V of idx[i] when entry i
 * is counted (first occurrence, in [s_end, l_lo)), else NaN; in the cache copies every
 * row outside the dense ranges is NaN. So reading a wrong row from either side poisons
 * the result, and the output must equal `o_ref_bits` (the call without k_sel) bit for
 * bit: same values, same list order. */
static void check_selected_rows(const scase *c, const clkv_attention_sparse_args *base,
                                const float *k, const float *v, const int32_t *idx,
                                const int32_t *eff, const float *o_ref_bits) {
    const int64_t B = c->B, Hq = c->Hq, Hkv = c->Hkv, D = c->D, L = c->L, NI = c->NI;
    const size_t nkv = (size_t)(B * Hkv * L * D), nsel = (size_t)(B * Hkv * NI * D) + 1;
    const size_t nq = (size_t)(B * Hq * D);
    float *k2 = (float *)tu_malloc(nkv * sizeof(float));
    float *v2 = (float *)tu_malloc(nkv * sizeof(float));
    float *ks = (float *)tu_malloc(nsel * sizeof(float));
    float *vs = (float *)tu_malloc(nsel * sizeof(float));
    float *o2 = (float *)tu_malloc(nq * sizeof(float));
    for (int64_t b = 0; b < B; b++) {
        const int64_t n = eff[b], s_end = c->sink < n ? c->sink : n;
        const int64_t l_lo = n - c->local > s_end ? n - c->local : s_end;
        for (int64_t h = 0; h < Hkv; h++) {
            const size_t kvrow = (size_t)((b * Hkv + h) * L);
            for (int64_t j = 0; j < L; j++) {
                const int dense = j < s_end || (j >= l_lo && j < n);
                for (int64_t d = 0; d < D; d++) {
                    const size_t e = (kvrow + (size_t)j) * (size_t)D + (size_t)d;
                    k2[e] = dense ? k[e] : NAN;
                    v2[e] = dense ? v[e] : NAN;
                }
            }
            const int32_t *row = idx + (size_t)((b * Hkv + h) * NI);
            for (int64_t i = 0; i < NI; i++) {
                const int32_t t = row[i];
                int counted = t >= s_end && t < l_lo;
                for (int64_t r = 0; r < i && counted; r++) {
                    counted = row[r] != t;
                }
                for (int64_t d = 0; d < D; d++) {
                    const size_t e = ((size_t)((b * Hkv + h) * NI + i)) * (size_t)D + (size_t)d;
                    const size_t src = (kvrow + (size_t)(counted ? t : 0)) * (size_t)D + (size_t)d;
                    ks[e] = counted ? k[src] : NAN;
                    vs[e] = counted ? v[src] : NAN;
                }
            }
        }
    }
    clkv_attention_sparse_args a = *base;
    const size_t kes = tu_dtype_size(c->kvdt);
    a.k = tu_kv_tensor_offset(g_ctx, k2, c->kvdt, B, Hkv, L, D, c->layout, base->k.offset);
    a.v = tu_kv_tensor_offset(g_ctx, v2, c->kvdt, B, Hkv, L, D, c->layout, base->v.offset);
    a.k_sel = tu_kv_tensor_offset(g_ctx, ks, c->kvdt, B, Hkv, NI, D, c->layout, 2 * kes);
    a.v_sel = tu_kv_tensor_offset(g_ctx, vs, c->kvdt, B, Hkv, NI, D, c->layout, 0);
    tu_buffer_poison(g_ctx, a.o.buf, 0, tu_buffer_size(a.o.buf));
    TU_CHECK_OK(g_ctx, clkv_attention_sparse(g_ctx, &a, NULL));
    tu_tensor_read(g_ctx, &a.o, o2);
    for (size_t i = 0; i < nq; i++) {
        if (tu_f32_bits(o2[i]) != tu_f32_bits(o_ref_bits[i])) {
            TU_FAIL("k_sel/v_sel: o flat %zu = %.9g, without k_sel %.9g (must be bit-equal)", i,
                    (double)o2[i], (double)o_ref_bits[i]);
        }
    }
    tu_release(a.k.buf);
    tu_release(a.v.buf);
    tu_release(a.k_sel.buf);
    tu_release(a.v_sel.buf);
    free(k2);
    free(v2);
    free(ks);
    free(vs);
    free(o2);
}

static void run_case(void **state) {
    const scase *c = (const scase *)*state;
    const size_t ci = (size_t)(c - g_cases);
    const uint64_t seed = tu_seed(DEFAULT_SEED);
    const int64_t B = c->B, Hq = c->Hq, Hkv = c->Hkv, D = c->D, L = c->L, NI = c->NI;
    const int64_t maxlen = c->max_length < 0 ? L : c->max_length;
    const size_t nq = (size_t)(B * Hq * D), nkv = (size_t)(B * Hkv * L * D);
    const int has_idx = c->mode != IDX_ABSENT;
    const int64_t q_off = c->odd_offsets ? 1 : 0, k_off = c->odd_offsets ? 3 : 0,
                  v_off = c->odd_offsets ? 5 : 0, o_off = 7, lse_off = 3, idx_off = 2;
    int32_t eff[3], dev_lens[3];
    tu_rng rng;
    clkv_attention_sparse_args args = CLKV_ATTENTION_SPARSE_ARGS_INIT;
    clkv_tensor tq, tk, tv, tlen, tidx, to, tlse;
    cl_event ev = NULL;
    size_t ws_bytes = 0;
    double t0 = tu_now();

    tu_set_case("%s (B=%" PRId64 " Hq=%" PRId64 " Hkv=%" PRId64 " D=%" PRId64 " L=%" PRId64
                " q=%s kv=%s o=%s %s lengths=%s {%d,%d,%d} max_length=%" PRId64 " sink=%" PRId64
                " local=%" PRId64 " NI=%" PRId64 " mode=%d pad=%" PRId64 " odd=%d scale=%g)",
                c->name, B, Hq, Hkv, D, L, clkv_dtype_name(c->qdt), clkv_dtype_name(c->kvdt),
                clkv_dtype_name(c->odt), tu_layout_name(c->layout),
                c->has_lengths ? "buffer" : "absent", c->lens[0], c->lens[1], c->lens[2],
                c->max_length, c->sink, c->local, NI, (int)c->mode, c->idx_pad, c->odd_offsets,
                (double)c->scale);
    assert_true(B >= 1 && B <= 3);
    tu_rng_seed(&rng, seed, (uint64_t)ci + 1);
    for (int64_t b = 0; b < B; b++) {
        const int32_t want = c->has_lengths ? c->lens[b] : (int32_t)maxlen;
        dev_lens[b] = want;
        eff[b] = want > (int32_t)maxlen ? (int32_t)maxlen : want;
    }

    float *q = (float *)tu_malloc(nq * sizeof(float));
    float *k = (float *)tu_malloc(nkv * sizeof(float));
    float *v = (float *)tu_malloc(nkv * sizeof(float));
    const int64_t istride = NI + c->idx_pad;
    int32_t *idx = (int32_t *)tu_calloc((size_t)(B * Hkv * NI) + 1, sizeof(int32_t));
    int32_t *idx_dev = (int32_t *)tu_calloc((size_t)(B * Hkv * istride) + 1, sizeof(int32_t));
    uint8_t *mask = (uint8_t *)tu_malloc((size_t)L + 1);
    tu_fill_normal(&rng, q, nq, 0.0, 1.0);
    tu_fill_normal(&rng, k, nkv, 0.0, 1.0);
    tu_fill_normal(&rng, v, nkv, 0.0, 1.0);
    tu_round_array(c->qdt, q, nq);
    tu_round_array(c->kvdt, k, nkv);
    tu_round_array(c->kvdt, v, nkv);
    for (int64_t b = 0; b < B; b++) {
        for (int64_t h = 0; h < Hkv; h++) {
            int32_t *row = idx + (size_t)((b * Hkv + h) * NI);
            gen_idx(&rng, c->mode, eff[b], L, c->sink, c->local, row, NI);
            for (int64_t i = 0; i < istride; i++) {
                idx_dev[(b * Hkv + h) * istride + i] = i < NI ? row[i] : -7;
            }
            /* rows outside the attended set: NaN (must never be read) */
            ref_sparse_set(eff[b], c->sink, c->local, has_idx ? row : NULL, NI, mask);
            for (int64_t j = 0; j < L; j++) {
                if (j < eff[b] && mask[j]) {
                    continue;
                }
                for (int64_t d = 0; d < D; d++) {
                    k[(size_t)(((b * Hkv + h) * L + j) * D + d)] = NAN;
                    v[(size_t)(((b * Hkv + h) * L + j) * D + d)] = NAN;
                }
            }
        }
    }

    {
        const int64_t qdims[3] = {B, Hq, D}, ldims[2] = {B, Hq}, bdims[1] = {B};
        const int64_t idims[3] = {B, Hkv, istride};
        const size_t qes = tu_dtype_size(c->qdt), kes = tu_dtype_size(c->kvdt),
                     oes = tu_dtype_size(c->odt);
        tq = tu_tensor_upload(g_ctx, q, c->qdt, 3, qdims, (uint64_t)q_off * qes, 6);
        tk = tu_kv_tensor_offset(g_ctx, k, c->kvdt, B, Hkv, L, D, c->layout, (uint64_t)k_off * kes);
        tv = tu_kv_tensor_offset(g_ctx, v, c->kvdt, B, Hkv, L, D, c->layout, (uint64_t)v_off * kes);
        tlen = c->has_lengths ? tu_tensor_upload_i32(g_ctx, dev_lens, 1, bdims, 0, 0)
                              : clkv_tensor_none();
        if (has_idx) {
            tidx = tu_tensor_upload_i32(g_ctx, idx_dev, 3, idims, (uint64_t)idx_off * 4, 8);
            tidx.dims[2] = NI; /* a [B, Hkv, NI] view with row stride NI + pad */
        } else {
            tidx = clkv_tensor_none();
        }
        to = tu_tensor_alloc(g_ctx, c->odt, 3, qdims, (uint64_t)o_off * oes, 11 * oes);
        tlse = c->want_lse ? tu_tensor_alloc(g_ctx, CLKV_F32, 2, ldims, (uint64_t)lse_off * 4, 20)
                           : clkv_tensor_none();
    }
    args.q = tq;
    args.k = tk;
    args.v = tv;
    args.lengths = tlen;
    args.idx = tidx;
    args.o = to;
    args.lse = tlse;
    args.max_length = c->max_length;
    args.sink = c->sink;
    args.local = c->local;
    args.scale = c->scale;

    TU_CHECK_OK(g_ctx, clkv_attention_sparse_workspace_size(g_ctx, &args, &ws_bytes));
    TU_CHECK_OK(g_ctx, clkv_attention_sparse(g_ctx, &args, &ev));
    tu_expect_completed(g_ctx, ev, ws_bytes, "clkv_attention_sparse");
    tu_assert_written_exactly(g_ctx, &to, "o");
    if (c->want_lse) {
        tu_assert_written_exactly(g_ctx, &tlse, "lse");
    }

    double *o_ref = (double *)tu_malloc(nq * sizeof(double));
    double *lse_ref = (double *)tu_malloc((size_t)(B * Hq) * sizeof(double));
    const double scale_ref = c->scale != 0.0f ? (double)c->scale : 1.0 / sqrt((double)D);
    if (ref_attention_sparse(B, Hq, Hkv, L, D, q, k, v, eff, has_idx ? idx : NULL, NI, c->sink,
                             c->local, scale_ref, o_ref, lse_ref) != 0) {
        TU_FAIL("reference rejected the case (test bug)");
    }
    float *o_got = (float *)tu_malloc(nq * sizeof(float));
    tu_tensor_read(g_ctx, &to, o_got);
    {
        const int64_t odims[3] = {B, Hq, D};
        char what[64];
        snprintf(what, sizeof what, "o (%s)", clkv_dtype_name(c->odt));
        tu_assert_close(what, o_got, o_ref, nq, tu_tol_for(c->odt), 3, odims);
    }
    if (c->want_lse) {
        const int64_t ldims[2] = {B, Hq};
        float *lse_got = (float *)tu_malloc((size_t)(B * Hq) * sizeof(float));
        tu_tensor_read(g_ctx, &tlse, lse_got);
        tu_assert_lse("lse", lse_got, lse_ref, (size_t)(B * Hq), TU_LSE_ATOL, 2, ldims);
        free(lse_got);
    }
    /* An empty set gives exactly 0. */
    for (size_t i = 0; i < nq; i++) {
        if (isinf(lse_ref[i / (size_t)D]) && o_got[i] != 0.0f) {
            TU_FAIL("o flat %zu = %g for an empty set, expected 0", i, (double)o_got[i]);
        }
    }
    /* k_sel / v_sel on every second case (each check builds another kernel variant) */
    if (has_idx && ci % 2 == 0) {
        check_selected_rows(c, &args, k, v, idx, eff, o_got);
    }
    const double dt = tu_now() - t0;
    printf("[ case     ] %-52s %6.2f s\n", c->name, dt);
    g_total_seconds += dt;

    tu_release(tq.buf);
    tu_release(tk.buf);
    tu_release(tv.buf);
    tu_release(tlen.buf);
    tu_release(tidx.buf);
    tu_release(to.buf);
    tu_release(tlse.buf);
    free(q);
    free(k);
    free(v);
    free(idx);
    free(idx_dev);
    free(mask);
    free(o_ref);
    free(lse_ref);
    free(o_got);
    tu_set_case("%s", "");
}

/* The reference's set on hand-made inputs. */
static void test_reference_set(void **state) {
    uint8_t mask[10];
    const int32_t idx[8] = {5, 5, -1, 0, 9, 12, INT32_MAX, 3};
    (void)state;
    tu_set_case("reference set");
    /* n = 10, sink 2 {0,1}, local 3 {7,8,9}, idx adds {5, 3}: 7 tokens */
    assert_int_equal(ref_sparse_set(10, 2, 3, idx, 8, mask), 7);
    assert_int_equal(mask[5] + mask[3] + mask[0] + mask[9] + mask[4] + mask[6], 4);
    /* sink/local beyond n: everything, once */
    assert_int_equal(ref_sparse_set(4, 100, 100, idx, 8, mask), 4);
    assert_int_equal(ref_sparse_set(0, 4, 4, idx, 8, mask), 0);
    assert_int_equal(ref_sparse_set(10, 0, 0, NULL, 0, mask), 0);
    tu_set_case("%s", "");
}

/* Duplicates count once, whatever the order: the same set given as a unique ascending
 * list and as the list reversed with every entry repeated (shuffled) agree within f32
 * tolerance, across many tiles and splits; the same call twice is bit-identical. */
static void test_dedupe_order_invariant(void **state) {
    const uint64_t seed = tu_seed(DEFAULT_SEED);
    const int64_t B = 1, Hq = 8, Hkv = 2, D = 128, L = 4096, NI = 600;
    const size_t nq = (size_t)(B * Hq * D), nkv = (size_t)(B * Hkv * L * D);
    const int64_t qdims[3] = {B, Hq, D}, idims[3] = {B, Hkv, 2 * NI};
    tu_rng rng;
    float *q = (float *)tu_malloc(nq * sizeof(float));
    float *k = (float *)tu_malloc(nkv * sizeof(float));
    float *v = (float *)tu_malloc(nkv * sizeof(float));
    float *o1 = (float *)tu_malloc(nq * sizeof(float));
    float *o2 = (float *)tu_malloc(nq * sizeof(float));
    int32_t *uniq = (int32_t *)tu_malloc((size_t)(B * Hkv * 2 * NI) * sizeof(int32_t));
    int32_t *dup = (int32_t *)tu_malloc((size_t)(B * Hkv * 2 * NI) * sizeof(int32_t));
    clkv_attention_sparse_args a = CLKV_ATTENTION_SPARSE_ARGS_INIT;
    (void)state;
    tu_set_case("dedupe order invariance (D=128 f32 Hq=8 Hkv=2 L=4096 NI=600, x2 repeated)");
    tu_rng_seed(&rng, seed, 5000);
    tu_fill_normal(&rng, q, nq, 0.0, 1.0);
    tu_fill_normal(&rng, k, nkv, 0.0, 1.0);
    tu_fill_normal(&rng, v, nkv, 0.0, 1.0);
    for (int64_t h = 0; h < Hkv; h++) {
        int32_t *u = uniq + h * 2 * NI, *d = dup + h * 2 * NI;
        for (int64_t i = 0; i < NI; i++) {
            u[i] = (int32_t)(17 + 6 * i + h); /* unique, ascending, outside the dense ranges */
            u[NI + i] = -1;
        }
        for (int64_t i = 0; i < NI; i++) {
            d[i] = u[NI - 1 - i];        /* reversed */
            d[NI + i] = u[(i * 7) % NI]; /* every entry again, shuffled */
        }
    }
    a.q = tu_tensor_upload(g_ctx, q, CLKV_F32, 3, qdims, 0, 0);
    a.k = tu_kv_tensor(g_ctx, k, CLKV_F32, B, Hkv, L, D, TU_HND);
    a.v = tu_kv_tensor(g_ctx, v, CLKV_F32, B, Hkv, L, D, TU_HND);
    a.o = tu_tensor_alloc(g_ctx, CLKV_F32, 3, qdims, 0, 0);
    a.sink = 4;
    a.local = 64;
    a.idx = tu_tensor_upload_i32(g_ctx, uniq, 3, idims, 0, 0);
    TU_CHECK_OK(g_ctx, clkv_attention_sparse(g_ctx, &a, NULL));
    tu_tensor_read(g_ctx, &a.o, o1);
    tu_release(a.idx.buf);
    a.idx = tu_tensor_upload_i32(g_ctx, dup, 3, idims, 0, 0);
    TU_CHECK_OK(g_ctx, clkv_attention_sparse(g_ctx, &a, NULL));
    tu_tensor_read(g_ctx, &a.o, o2);
    {
        double *o1d = (double *)tu_malloc(nq * sizeof(double));
        for (size_t i = 0; i < nq; i++) {
            o1d[i] = (double)o1[i];
        }
        /* the summation order differs (positions in the list), so compare within f32
         * tolerance; a duplicate counted twice would be off by ~1/1200 relative weight */
        tu_assert_close("o (duplicated+reversed vs unique)", o2, o1d, nq, tu_tol_for(CLKV_F32), 3,
                        qdims);
        free(o1d);
    }
    TU_CHECK_OK(g_ctx, clkv_attention_sparse(g_ctx, &a, NULL));
    tu_tensor_read(g_ctx, &a.o, o1);
    if (memcmp(o1, o2, nq * sizeof(float)) != 0) {
        TU_FAIL("two identical calls gave different outputs");
    }
    tu_release(a.q.buf);
    tu_release(a.k.buf);
    tu_release(a.v.buf);
    tu_release(a.o.buf);
    tu_release(a.idx.buf);
    free(q);
    free(k);
    free(v);
    free(o1);
    free(o2);
    free(uniq);
    free(dup);
    tu_set_case("%s", "");
}

/* The multi-lane (NVIDIA-shaped) code path on any device: a second context with the
 * CLKV_DECODE_EPL / WG / UNROLL launch overrides (read at context creation) makes several
 * lanes share each K/V row, with row sums through local memory where there is no warp
 * shuffle. Runs a few cases covering aligned/unaligned rows, TPR 4..16 and G = 16;
 * CLKV_DECODE_WAVES=64 also splits every list over many work-groups (GPU-like), so
 * duplicates are found across splits. */
static void test_multilane(void **state) {
    static const char *const names[] = {"d64_f32_h8x8_len300_mixed", "d128_f32_h32x2_G16_mixed",
                                        "d256_f32_h14x2_b3_nolengths_maxlen600_odd",
                                        "d128_bf16_h8x8_len1_only_idx"};
    static const char *const epl[] = {"16", "8"};
    clkv_context *saved = g_ctx;
    (void)state;
    for (int e = 0; e < 2; e++) {
        setenv("CLKV_DECODE_EPL", epl[e], 1);
        setenv("CLKV_DECODE_WG", "64", 1);
        setenv("CLKV_DECODE_UNROLL", "2", 1);
        setenv("CLKV_DECODE_WAVES", "64", 1);
        clkv_context *ctx = tu_context_create();
        unsetenv("CLKV_DECODE_WAVES");
        unsetenv("CLKV_DECODE_EPL");
        unsetenv("CLKV_DECODE_WG");
        unsetenv("CLKV_DECODE_UNROLL");
        g_ctx = ctx;
        for (size_t n = 0; n < sizeof names / sizeof names[0]; n++) {
            for (size_t i = 0; i < N_CASES; i++) {
                if (strcmp(g_cases[i].name, names[n]) == 0) {
                    void *st = (void *)&g_cases[i];
                    printf("[ multilane] EPL=%s ", epl[e]);
                    run_case(&st);
                }
            }
        }
        g_ctx = saved;
        clkv_context_destroy(ctx);
    }
}

/* ---- bad inputs: every error path of clkv_attention_sparse / _workspace_size ---- */

typedef struct bad_fixture {
    cl_mem q, k, v, len, idx, o, lse, idx_f32;
} bad_fixture;

/* A valid call: B=2, Hq=8, Hkv=2, L=64, D=64, f32, lengths, idx [2, 2, 5], lse. */
static clkv_attention_sparse_args bad_base(const bad_fixture *f) {
    clkv_attention_sparse_args a = CLKV_ATTENTION_SPARSE_ARGS_INIT;
    a.q = clkv_tensor_3d(f->q, CLKV_F32, 2, 8, 64);
    a.k = clkv_tensor_4d(f->k, CLKV_F32, 2, 2, 64, 64);
    a.v = clkv_tensor_4d(f->v, CLKV_F32, 2, 2, 64, 64);
    a.lengths = clkv_tensor_1d(f->len, CLKV_I32, 2);
    a.idx = clkv_tensor_3d(f->idx, CLKV_I32, 2, 2, 5);
    a.o = clkv_tensor_3d(f->o, CLKV_F32, 2, 8, 64);
    a.lse = clkv_tensor_2d(f->lse, CLKV_F32, 2, 8);
    a.sink = 2;
    a.local = 8;
    return a;
}

static void expect_bad_at(int line, const bad_fixture *f, clkv_context *ctx,
                          const clkv_attention_sparse_args *a, clkv_status want, const char *name,
                          const char *label) {
    cl_event ev = NULL;
    size_t bytes = 0;
    tu_set_case("bad input: %s (line %d)", label, line);
    tu_buffer_poison(g_ctx, f->o, 0, tu_buffer_size(f->o));
    tu_buffer_poison(g_ctx, f->lse, 0, tu_buffer_size(f->lse));
    clkv_status st = clkv_attention_sparse(ctx, a, &ev);
    if (st != want) {
        TU_FAIL("clkv_attention_sparse returned %s, expected %s (\"%s\")", clkv_status_string(st),
                clkv_status_string(want), clkv_last_error(ctx));
    }
    if (!tu_msg_names(clkv_last_error(ctx), name)) {
        TU_FAIL("message \"%s\" does not name \"%s\"", clkv_last_error(ctx), name);
    }
    if (ev != NULL) {
        TU_FAIL("a rejected call returned an event");
    }
    TU_CHECK_OK(g_ctx, clkv_context_finish(g_ctx));
    tu_assert_buffer_poison(g_ctx, f->o, "o after a rejected call");
    tu_assert_buffer_poison(g_ctx, f->lse, "lse after a rejected call");
    st = clkv_attention_sparse_workspace_size(ctx, a, &bytes);
    if (st != want || !tu_msg_names(clkv_last_error(ctx), name)) {
        TU_FAIL("clkv_attention_sparse_workspace_size returned %s (\"%s\"), expected %s naming "
                "\"%s\"",
                clkv_status_string(st), clkv_last_error(ctx), clkv_status_string(want), name);
    }
}
#define EXPECT_BAD(ctx, a, want, name, label)                                                      \
    expect_bad_at(__LINE__, &f, (ctx), (a), (want), (name), (label))

static void test_bad_inputs(void **state) {
    bad_fixture f;
    const int32_t lens[2] = {64, 10};
    const int32_t idx[20] = {3, 3, -1, 70, 5, 9, 9, 9, 0, 1, 3, 3, -1, 70, 5, 9, 9, 9, 0, 1};
    clkv_attention_sparse_args a;
    (void)state;
    f.q = tu_buffer_create(g_ctx, 2 * 8 * 64 * 4);
    f.k = tu_buffer_create(g_ctx, 2 * 2 * 64 * 64 * 4);
    f.v = tu_buffer_create(g_ctx, 2 * 2 * 64 * 64 * 4);
    f.len = tu_buffer_from_host(g_ctx, lens, sizeof lens);
    f.idx = tu_buffer_from_host(g_ctx, idx, sizeof idx);
    f.idx_f32 = tu_buffer_create(g_ctx, sizeof idx);
    f.o = tu_buffer_create(g_ctx, 2 * 8 * 64 * 4);
    f.lse = tu_buffer_create(g_ctx, 2 * 8 * 4);
    {
        float *ones = (float *)tu_malloc(2 * 2 * 64 * 64 * 4);
        for (size_t i = 0; i < 2 * 2 * 64 * 64; i++) {
            ones[i] = 0.5f;
        }
        tu_buffer_write(g_ctx, f.q, 0, ones, 2 * 8 * 64 * 4);
        tu_buffer_write(g_ctx, f.k, 0, ones, 2 * 2 * 64 * 64 * 4);
        tu_buffer_write(g_ctx, f.v, 0, ones, 2 * 2 * 64 * 64 * 4);
        free(ones);
    }
    /* the base call is valid */
    tu_set_case("bad input fixture: valid call");
    a = bad_base(&f);
    TU_CHECK_OK(g_ctx, clkv_attention_sparse(g_ctx, &a, NULL));
    TU_CHECK_OK(g_ctx, clkv_context_finish(g_ctx));

    a = bad_base(&f);
    EXPECT_BAD(NULL, &a, CLKV_ERR_ARG_NULL, "ctx", "ctx NULL");
    EXPECT_BAD(g_ctx, NULL, CLKV_ERR_ARG_NULL, "args", "args NULL");
    const char *const bufs[] = {"q", "k", "v", "o"};
    for (int i = 0; i < 4; i++) {
        a = bad_base(&f);
        clkv_tensor *t = i == 0 ? &a.q : i == 1 ? &a.k : i == 2 ? &a.v : &a.o;
        t->buf = NULL;
        EXPECT_BAD(g_ctx, &a, CLKV_ERR_ARG_NULL, bufs[i], "required buffer NULL");
    }
    a = bad_base(&f);
    a.idx.dtype = CLKV_F32;
    a.idx.buf = f.idx_f32;
    EXPECT_BAD(g_ctx, &a, CLKV_ERR_ARG_DTYPE, "idx", "idx f32");
    a = bad_base(&f);
    a.lse.dtype = CLKV_F16;
    EXPECT_BAD(g_ctx, &a, CLKV_ERR_ARG_DTYPE, "lse", "lse f16");
    a = bad_base(&f);
    a.lengths.dtype = CLKV_U32;
    EXPECT_BAD(g_ctx, &a, CLKV_ERR_ARG_DTYPE, "lengths", "lengths u32");
    a = bad_base(&f);
    a.v.dtype = CLKV_F16;
    EXPECT_BAD(g_ctx, &a, CLKV_ERR_ARG_DTYPE, "v", "v dtype differs from k");
    a = bad_base(&f);
    a.q.dtype = CLKV_I32;
    EXPECT_BAD(g_ctx, &a, CLKV_ERR_ARG_DTYPE, "q", "q i32");
    a = bad_base(&f);
    a.idx = clkv_tensor_3d(f.idx, CLKV_I32, 1, 2, 5);
    EXPECT_BAD(g_ctx, &a, CLKV_ERR_ARG_SHAPE, "idx", "idx batch");
    a = bad_base(&f);
    a.idx = clkv_tensor_3d(f.idx, CLKV_I32, 2, 1, 5);
    EXPECT_BAD(g_ctx, &a, CLKV_ERR_ARG_SHAPE, "idx", "idx kv heads");
    a = bad_base(&f);
    a.idx = clkv_tensor_2d(f.idx, CLKV_I32, 2, 10);
    EXPECT_BAD(g_ctx, &a, CLKV_ERR_ARG_SHAPE, "idx", "idx 2-D");
    a = bad_base(&f);
    a.idx = clkv_tensor_3d(f.idx, CLKV_I32, 2, 2, 6);
    EXPECT_BAD(g_ctx, &a, CLKV_ERR_ARG_BUFFER_SIZE, "idx", "idx larger than its buffer");
    a = bad_base(&f);
    a.idx.strides[2] = 2;
    EXPECT_BAD(g_ctx, &a, CLKV_ERR_ARG_STRIDE, "idx", "idx last stride 2");
    a = bad_base(&f);
    a.idx.offset = 2;
    EXPECT_BAD(g_ctx, &a, CLKV_ERR_ARG_ALIGNMENT, "idx", "idx offset not a multiple of 4");
    a = bad_base(&f);
    a.q = clkv_tensor_3d(f.q, CLKV_F32, 2, 6, 64);
    a.o = clkv_tensor_3d(f.o, CLKV_F32, 2, 6, 64);
    a.lse = clkv_tensor_2d(f.lse, CLKV_F32, 2, 6);
    a.k = clkv_tensor_4d(f.k, CLKV_F32, 2, 4, 32, 64);
    a.v = clkv_tensor_4d(f.v, CLKV_F32, 2, 4, 32, 64);
    a.idx = clkv_tensor_3d(f.idx, CLKV_I32, 2, 4, 2);
    EXPECT_BAD(g_ctx, &a, CLKV_ERR_ARG_SHAPE, "Hq", "Hq %% Hkv != 0");
    a = bad_base(&f);
    a.o = clkv_tensor_3d(f.o, CLKV_F32, 2, 4, 64);
    EXPECT_BAD(g_ctx, &a, CLKV_ERR_ARG_SHAPE, "o", "o heads");
    a = bad_base(&f);
    a.q = clkv_tensor_3d(f.q, CLKV_F32, 2, 8, 32);
    a.o = clkv_tensor_3d(f.o, CLKV_F32, 2, 8, 32);
    a.k = clkv_tensor_4d(f.k, CLKV_F32, 2, 2, 64, 32);
    a.v = clkv_tensor_4d(f.v, CLKV_F32, 2, 2, 64, 32);
    EXPECT_BAD(g_ctx, &a, CLKV_ERR_ARG_UNSUPPORTED, "D", "D = 32");
    a = bad_base(&f);
    a.sink = -1;
    EXPECT_BAD(g_ctx, &a, CLKV_ERR_ARG_RANGE, "sink", "sink negative");
    a = bad_base(&f);
    a.local = -5;
    EXPECT_BAD(g_ctx, &a, CLKV_ERR_ARG_RANGE, "local", "local negative");
    a = bad_base(&f);
    a.scale = NAN;
    EXPECT_BAD(g_ctx, &a, CLKV_ERR_ARG_RANGE, "scale", "scale NaN");
    a = bad_base(&f);
    a.max_length = 65;
    EXPECT_BAD(g_ctx, &a, CLKV_ERR_ARG_RANGE, "max_length", "max_length > L");
    a = bad_base(&f);
    a.max_length = -2;
    EXPECT_BAD(g_ctx, &a, CLKV_ERR_ARG_RANGE, "max_length", "max_length -2");
    a = bad_base(&f);
    /* L = 2^31-1 tokens (stride 0 keeps the descriptors inside the small buffers) */
    a.k.dims[2] = INT32_MAX;
    a.k.strides[2] = 0;
    a.v.dims[2] = INT32_MAX;
    a.v.strides[2] = 0;
    a.lengths = clkv_tensor_none();
    EXPECT_BAD(g_ctx, &a, CLKV_ERR_ARG_RANGE, "idx", "n_idx + max_length > 2^31-1");
    /* k_sel / v_sel: [2, 2, 5, 64] f32 views of the k buffer */
    a = bad_base(&f);
    a.k_sel = clkv_tensor_4d(f.k, CLKV_F32, 2, 2, 5, 64);
    EXPECT_BAD(g_ctx, &a, CLKV_ERR_ARG_NULL, "v_sel", "k_sel without v_sel");
    a = bad_base(&f);
    a.v_sel = clkv_tensor_4d(f.v, CLKV_F32, 2, 2, 5, 64);
    EXPECT_BAD(g_ctx, &a, CLKV_ERR_ARG_NULL, "k_sel", "v_sel without k_sel");
    a = bad_base(&f);
    a.k_sel = clkv_tensor_4d(f.k, CLKV_F32, 2, 2, 5, 64);
    a.v_sel = clkv_tensor_4d(f.v, CLKV_F32, 2, 2, 5, 64);
    a.idx = clkv_tensor_none();
    EXPECT_BAD(g_ctx, &a, CLKV_ERR_ARG_NULL, "idx", "k_sel without idx");
    a = bad_base(&f);
    a.k_sel = clkv_tensor_4d(f.k, CLKV_F32, 2, 2, 4, 64);
    a.v_sel = clkv_tensor_4d(f.v, CLKV_F32, 2, 2, 5, 64);
    EXPECT_BAD(g_ctx, &a, CLKV_ERR_ARG_SHAPE, "k_sel", "k_sel rows != n_idx");
    a = bad_base(&f);
    a.k_sel = clkv_tensor_4d(f.k, CLKV_F32, 2, 2, 5, 64);
    a.v_sel = clkv_tensor_4d(f.v, CLKV_F32, 2, 1, 5, 64);
    EXPECT_BAD(g_ctx, &a, CLKV_ERR_ARG_SHAPE, "v_sel", "v_sel kv heads");
    a = bad_base(&f);
    a.k_sel = clkv_tensor_4d(f.k, CLKV_F16, 2, 2, 5, 64);
    a.v_sel = clkv_tensor_4d(f.v, CLKV_F32, 2, 2, 5, 64);
    EXPECT_BAD(g_ctx, &a, CLKV_ERR_ARG_DTYPE, "k_sel", "k_sel dtype differs from k");
    a = bad_base(&f);
    a.k_sel = clkv_tensor_4d(f.k, CLKV_F32, 2, 2, 5, 64);
    a.v_sel = clkv_tensor_4d(f.v, CLKV_F32, 2, 2, 5, 64);
    a.v_sel.offset = 2;
    EXPECT_BAD(g_ctx, &a, CLKV_ERR_ARG_ALIGNMENT, "v_sel", "v_sel offset not a multiple of 4");
    a = bad_base(&f);
    {
        tu_set_case("bad input: bytes NULL");
        clkv_status st = clkv_attention_sparse_workspace_size(g_ctx, &a, NULL);
        if (st != CLKV_ERR_ARG_NULL || !tu_msg_names(clkv_last_error(g_ctx), "bytes")) {
            TU_FAIL("workspace_size(bytes NULL) returned %s (\"%s\")", clkv_status_string(st),
                    clkv_last_error(g_ctx));
        }
    }
    tu_release(f.q);
    tu_release(f.k);
    tu_release(f.v);
    tu_release(f.len);
    tu_release(f.idx);
    tu_release(f.idx_f32);
    tu_release(f.o);
    tu_release(f.lse);
    tu_set_case("%s", "");
}

static void print_timing(void) {
    printf("[ timing   ] attention sparse cases: %.2f s in total\n", g_total_seconds);
}

int main(void) {
    tu_suite s = {0};
    tu_suite_add(&s, "reference_set", test_reference_set, NULL);
    TU_SUITE_ADD_CASES(&s, g_cases, run_case);
    tu_suite_add(&s, "dedupe_order_invariant", test_dedupe_order_invariant, NULL);
    tu_suite_add(&s, "multilane_portable", test_multilane, NULL);
    tu_suite_add(&s, "bad_inputs", test_bad_inputs, NULL);
    s.at_end = print_timing;
    return tu_suite_run(&s, "attention_sparse", &g_ctx, DEFAULT_SEED);
}
