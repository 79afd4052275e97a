/* clkv_select_topk and clkv_compact_kv (SPEC §2.4) on the default device ($CLKV_DEVICE;
 * PoCL CPU in CI), against tests/ref/ref_select.c.
 *
 * Selection results are compared EXACTLY (same index list, same order): with the
 * deterministic tie rule (SPEC §0.2: lower index wins) there is one right answer.
 * Outputs are poisoned, placed at byte offsets with guard bytes after them; every element
 * must be written (indices: the selection then -1 padding) and no guard byte touched.
 * Scores are strided (row padding) and the padding plus the tail past each sequence's
 * length hold +-inf / NaN that would change the result if read.
 * Compaction is checked bit for bit on the whole destination buffer image: kept rows are
 * the source rows, everything else still poison.
 *
 * Reproduce a failure with CLKV_TEST_SEED=<seed printed>.
 */
#include "util/test_util.h"
#include "ref/ref_select.h"

#include "clkv/select.h"
#include "host/select_internal.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_SEED 0x5E1EC7ED2024ull

static clkv_context *g_ctx;

/* ------------------------------------------------------------------------------------ */
/* Selection runner                                                                     */
/* ------------------------------------------------------------------------------------ */

typedef struct sel_run {
    int64_t B, H, N, pad; /* scores [B, H, N], row stride N + pad */
    const float *scores;  /* logical [B][H][N] */
    const int32_t *lens;  /* [B] or NULL */
    int64_t max_length;   /* -1: N */
    int64_t k;
    const int32_t *krow; /* [B*H] or NULL */
    int largest;
    int want_counts;
} sel_run;

#define S_OFF_ELEMS 3 /* scores start at an odd element offset */

static void run_select_path(const sel_run *r) {
    clkv_context *ctx = g_ctx;
    const int64_t B = r->B, H = r->H, N = r->N, RS = N + r->pad, k = r->k;
    const int64_t maxlen = r->max_length < 0 ? N : r->max_length;
    const size_t nscore = (size_t)(S_OFF_ELEMS + B * H * RS);
    float *img = (float *)tu_malloc((nscore ? nscore : 1) * sizeof(float));
    for (size_t i = 0; i < nscore; i++) /* junk that must never be read */
        img[i] = (i % 3 == 0) ? INFINITY : (i % 3 == 1 ? -INFINITY : NAN);
    for (int64_t row = 0; row < B * H; row++)
        memcpy(img + S_OFF_ELEMS + row * RS, r->scores + row * N, (size_t)N * sizeof(float));
    clkv_tensor ts = {0};
    ts.buf = tu_buffer_from_host(ctx, img, nscore * sizeof(float));
    ts.offset = S_OFF_ELEMS * sizeof(float);
    ts.dtype = CLKV_F32;
    ts.ndim = 3;
    ts.dims[0] = B;
    ts.dims[1] = H;
    ts.dims[2] = N;
    ts.strides[0] = H * RS;
    ts.strides[1] = RS;
    ts.strides[2] = 1;
    free(img);

    const int64_t idims[3] = {B, H, k}, cdims[2] = {B, H}, bdims[1] = {B};
    clkv_select_topk_args a = CLKV_SELECT_TOPK_ARGS_INIT;
    a.scores = ts;
    a.indices = tu_tensor_alloc(ctx, CLKV_I32, 3, idims, 64, 64);
    if (r->want_counts)
        a.counts = tu_tensor_alloc(ctx, CLKV_I32, 2, cdims, 8, 16);
    if (r->lens)
        a.lengths = tu_tensor_upload_i32(ctx, r->lens, 1, bdims, 4, 8);
    if (r->krow)
        a.k_per_row = tu_tensor_upload_i32(ctx, r->krow, 2, cdims, 12, 8);
    a.max_length = r->max_length;
    a.k = k;
    a.largest = r->largest;

    size_t ws = 0;
    TU_CHECK_OK(ctx, clkv_select_topk_workspace_size(ctx, &a, &ws));
    cl_event ev = NULL;
    TU_CHECK_OK(ctx, clkv_select_topk(ctx, &a, &ev));
    assert_non_null(ev);
    TU_CHECK_CL(clWaitForEvents(1, &ev));
    clReleaseEvent(ev);

    const size_t nidx = (size_t)(B * H * k);
    int32_t *got = (int32_t *)tu_malloc((nidx ? nidx : 1) * sizeof(int32_t));
    if (nidx)
        tu_buffer_read(ctx, a.indices.buf, 64, got, nidx * sizeof(int32_t));
    int32_t counts[64];
    assert_true(B * H <= 64);
    if (r->want_counts)
        tu_buffer_read(ctx, a.counts.buf, 8, counts, (size_t)(B * H) * sizeof(int32_t));
    int32_t *want = (int32_t *)tu_malloc((size_t)(k > 0 ? k : 1) * sizeof(int32_t));
    for (int64_t b = 0; b < B; b++) {
        int64_t n = maxlen;
        if (r->lens)
            n = r->lens[b] < 0 ? 0 : (r->lens[b] > maxlen ? maxlen : r->lens[b]);
        for (int64_t h = 0; h < H; h++) {
            const int64_t row = b * H + h;
            int64_t kr = k;
            if (r->krow)
                kr = r->krow[row] < 0 ? 0 : (r->krow[row] > k ? k : r->krow[row]);
            int64_t c = ref_select_topk(r->scores + row * N, n, kr, r->largest, want);
            assert_true(c >= 0);
            const int32_t *g = got + row * k;
            for (int64_t i = 0; i < k; i++) {
                int32_t e = i < c ? want[i] : -1;
                if (g[i] != e)
                    TU_FAIL("b=%" PRId64 " h=%" PRId64 " n=%" PRId64 " k_row=%" PRId64
                            ": indices[%" PRId64 "] = %d, expected %d (score %g vs %g)",
                            b, h, n, kr, i, g[i], e,
                            g[i] >= 0 && g[i] < N ? (double)r->scores[row * N + g[i]] : 0.0,
                            e >= 0 ? (double)r->scores[row * N + e] : 0.0);
            }
            if (r->want_counts && counts[row] != (int32_t)c)
                TU_FAIL("b=%" PRId64 " h=%" PRId64 ": counts = %d, expected %" PRId64, b, h,
                        counts[row], c);
        }
    }
    if (nidx)
        tu_assert_written_exactly(ctx, &a.indices, "indices");
    if (r->want_counts)
        tu_assert_written_exactly(ctx, &a.counts, "counts");
    free(want);
    free(got);
    tu_release(ts.buf);
    tu_release(a.indices.buf);
    tu_release(a.counts.buf);
    tu_release(a.lengths.buf);
    tu_release(a.k_per_row.buf);
}

/* Every case on both kernel paths: one work-group per row and the chunked pipeline. */
static void run_select(const sel_run *r) {
    for (int path = 1; path <= 2; path++) {
        clkv__select_force_path(path);
        run_select_path(r);
    }
    clkv__select_force_path(0);
}

/* One row (B = H = 1) of n scores, every k of {0, 1, n-1, n, n+5}, both modes. */
static void sweep_k(const float *s, int64_t n, const char *what) {
    const int64_t ks[5] = {0, 1, n - 1, n, n + 5};
    for (int largest = 0; largest <= 1; largest++)
        for (int i = 0; i < 5; i++) {
            if (ks[i] < 0)
                continue;
            tu_set_case("%s n=%" PRId64 " k=%" PRId64 " largest=%d", what, n, ks[i], largest);
            sel_run r = {.B = 1,
                         .H = 1,
                         .N = n,
                         .pad = 5,
                         .scores = s,
                         .max_length = -1,
                         .k = ks[i],
                         .largest = largest,
                         .want_counts = 1};
            run_select(&r);
        }
}

static void test_select_sizes(void **state) {
    (void)state;
    const int64_t ns[6] = {0, 1, 7, 1000, 4096 + 5, 100000};
    tu_rng rng;
    tu_rng_seed(&rng, tu_seed(DEFAULT_SEED), 1);
    float *s = (float *)tu_malloc(100000 * sizeof(float));
    for (int i = 0; i < 6; i++) {
        tu_fill_normal(&rng, s, (size_t)ns[i], 0.0, 1.0);
        sweep_k(s, ns[i], "normal");
    }
    /* a middle k too, both modes */
    for (int largest = 0; largest <= 1; largest++) {
        tu_set_case("normal n=100000 k=31337 largest=%d", largest);
        sel_run r = {.B = 1,
                     .H = 1,
                     .N = 100000,
                     .pad = 0,
                     .scores = s,
                     .max_length = -1,
                     .k = 31337,
                     .largest = largest,
                     .want_counts = 0};
        run_select(&r);
    }
    free(s);
}

static void test_select_ties(void **state) {
    (void)state;
    tu_rng rng;
    tu_rng_seed(&rng, tu_seed(DEFAULT_SEED), 2);
    const int64_t n = 4096 + 5;
    float *s = (float *)tu_malloc(100000 * sizeof(float));
    /* all equal: the lowest indices win in both modes */
    for (int64_t i = 0; i < n; i++)
        s[i] = 0.25f;
    sweep_k(s, n, "all-equal");
    for (int largest = 0; largest <= 1; largest++) {
        tu_set_case("all-equal n=%" PRId64 " k=1000 largest=%d", n, largest);
        sel_run r = {.B = 1,
                     .H = 1,
                     .N = n,
                     .pad = 3,
                     .scores = s,
                     .max_length = -1,
                     .k = 1000,
                     .largest = largest,
                     .want_counts = 1};
        run_select(&r);
    }
    /* many ties at the threshold: 5 distinct values over 100000 tokens */
    for (int64_t i = 0; i < 100000; i++)
        s[i] = (float)tu_rng_int(&rng, 0, 4) - 2.0f;
    const int64_t kk[3] = {1, 37000, 99999};
    for (int largest = 0; largest <= 1; largest++)
        for (int i = 0; i < 3; i++) {
            /* 49 chunks of 2048 on a GPU: the library's choice (3 kernels), and on NVIDIA
             * the 2-kernel pipeline forced (candidate batches read from global memory; other
             * devices keep 3 kernels) */
            setenv("CLKV_SELECT_KERNELS", largest ? "2" : "", 1);
            tu_set_case("5-valued n=100000 k=%" PRId64 " largest=%d CLKV_SELECT_KERNELS=%s", kk[i],
                        largest, largest ? "2" : "default");
            sel_run r = {.B = 1,
                         .H = 1,
                         .N = 100000,
                         .pad = 1,
                         .scores = s,
                         .max_length = -1,
                         .k = kk[i],
                         .largest = largest,
                         .want_counts = 1};
            run_select(&r);
        }
    unsetenv("CLKV_SELECT_KERNELS");
    free(s);
}

static void test_select_special_values(void **state) {
    (void)state;
    tu_rng rng;
    tu_rng_seed(&rng, tu_seed(DEFAULT_SEED), 3);
    const float specials[] = {0.0f,    -0.0f,    INFINITY, -INFINITY, 3.0e38f,   -3.0e38f,
                              FLT_MAX, -FLT_MAX, 1e-45f,   -1e-45f,   1.17e-38f, -1.17e-38f,
                              NAN,     -NAN,     1.0f,     -1.0f,     1e-30f,    -1e-30f};
    const int nsp = (int)(sizeof specials / sizeof specials[0]);
    const int64_t n = 1000;
    float s[1000];
    for (int64_t i = 0; i < n; i++)
        s[i] = specials[tu_rng_int(&rng, 0, nsp - 1)];
    sweep_k(s, n, "specials");
    const int64_t kk[4] = {50, 200, 500, 900};
    for (int largest = 0; largest <= 1; largest++)
        for (int i = 0; i < 4; i++) {
            tu_set_case("specials n=1000 k=%" PRId64 " largest=%d", kk[i], largest);
            sel_run r = {.B = 1,
                         .H = 1,
                         .N = n,
                         .pad = 2,
                         .scores = s,
                         .max_length = -1,
                         .k = kk[i],
                         .largest = largest,
                         .want_counts = 1};
            run_select(&r);
        }
    /* only zeros of both signs: equal, so index order decides */
    for (int64_t i = 0; i < n; i++)
        s[i] = (i % 3 == 0) ? 0.0f : -0.0f;
    for (int largest = 0; largest <= 1; largest++) {
        tu_set_case("signed zeros n=1000 k=333 largest=%d", largest);
        sel_run r = {.B = 1,
                     .H = 1,
                     .N = n,
                     .pad = 2,
                     .scores = s,
                     .max_length = -1,
                     .k = 333,
                     .largest = largest,
                     .want_counts = 1};
        run_select(&r);
    }
}

static void test_select_batch(void **state) {
    (void)state;
    tu_rng rng;
    tu_rng_seed(&rng, tu_seed(DEFAULT_SEED), 4);
    const int64_t B = 3, H = 2, N = 5000;
    float *s = (float *)tu_malloc((size_t)(B * H * N) * sizeof(float));
    tu_fill_normal(&rng, s, (size_t)(B * H * N), 0.0, 1.0);
    /* quantize one row heavily so it has ties */
    for (int64_t i = 0; i < N; i++)
        s[3 * N + i] = floorf(s[3 * N + i] * 4.0f);
    /* garbage past the lengths: would win in either mode if read */
    const int32_t lens[3] = {4500, 0, 777};
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = lens[b]; i < N; i++)
                s[(b * H + h) * N + i] = (i & 1) ? INFINITY : -INFINITY;
    const int32_t krow[6] = {100, -3, 5, 2000, 7000, 0};
    for (int largest = 0; largest <= 1; largest++) {
        setenv("CLKV_SELECT_CHUNK", largest ? "2048" : "", 1); /* 3 chunks per row */
        tu_set_case("B=3 H=2 lens {4500,0,777} max_length 4600 k=1000 largest=%d", largest);
        sel_run r = {.B = B,
                     .H = H,
                     .N = N,
                     .pad = 7,
                     .scores = s,
                     .lens = lens,
                     .max_length = 4600,
                     .k = 1000,
                     .largest = largest,
                     .want_counts = 1};
        run_select(&r);
        tu_set_case("B=3 H=2 lens, k_per_row {100,-3,5,2000,7000,0} k=1000 largest=%d", largest);
        r.krow = krow;
        run_select(&r);
        tu_set_case("B=3 H=2 lens {4500,0,777} max_length 600 (clamps) k=700 largest=%d", largest);
        sel_run r2 = {.B = B,
                      .H = H,
                      .N = N,
                      .pad = 0,
                      .scores = s,
                      .lens = lens,
                      .max_length = 600,
                      .k = 700,
                      .largest = largest,
                      .want_counts = 1};
        run_select(&r2);
    }
    unsetenv("CLKV_SELECT_CHUNK");
    /* no lengths buffer: every row uses max_length */
    tu_set_case("B=3 H=2 no lengths max_length 300 k=64");
    for (int64_t i = 0; i < B * H * N; i++)
        s[i] = (float)tu_rng_normal(&rng);
    sel_run r3 = {.B = B,
                  .H = H,
                  .N = N,
                  .pad = 1,
                  .scores = s,
                  .max_length = 300,
                  .k = 64,
                  .largest = 1,
                  .want_counts = 0};
    run_select(&r3);
    free(s);
}

static void test_select_large(void **state) {
    (void)state;
    tu_rng rng;
    tu_rng_seed(&rng, tu_seed(DEFAULT_SEED), 5);
    const int64_t n = (1 << 20) + 3;
    float *s = (float *)tu_malloc((size_t)n * sizeof(float));
    /* bf16-rounded normals: many exact ties everywhere, including at the threshold */
    tu_fill_normal(&rng, s, (size_t)n, 0.0, 1.0);
    tu_round_array(CLKV_BF16, s, (size_t)n);
    tu_set_case("n=2^20+3 k=2^19+11 largest=1");
    double t0 = tu_now();
    sel_run r = {.B = 1,
                 .H = 1,
                 .N = n,
                 .pad = 0,
                 .scores = s,
                 .max_length = -1,
                 .k = (1 << 19) + 11,
                 .largest = 1,
                 .want_counts = 1};
    run_select(&r);
    printf("[ timing   ] select n=2^20+3 (incl. reference and transfers): %.3f s\n", tu_now() - t0);
    /* forced short chunks: 513 chunks in the row (more than one scan tile of chunk
     * offsets), ties spread over many chunks */
    setenv("CLKV_SELECT_CHUNK", "2048", 1);
    tu_set_case("n=2^20+3 k=2^19+11 largest=0 CLKV_SELECT_CHUNK=2048");
    r.largest = 0;
    run_select(&r);
    unsetenv("CLKV_SELECT_CHUNK");
    free(s);
}

/* ------------------------------------------------------------------------------------ */
/* Compaction                                                                           */
/* ------------------------------------------------------------------------------------ */

#define CB 2
#define CH 3
#define CL 40
#define CD 64
#define CLOUT 24
#define CK 20

/* A [B, H, Lout, D] destination in `layout`, all poison, at a byte offset, guards after. */
static clkv_tensor alloc_dst(clkv_dtype dt, tu_layout layout, int64_t D) {
    clkv_tensor t;
    if (layout == TU_HND) {
        const int64_t dims[4] = {CB, CH, CLOUT, D};
        t = tu_tensor_alloc(g_ctx, dt, 4, dims, 32, 64);
    } else {
        const int64_t dims[4] = {CB, CLOUT, CH, D};
        t = tu_tensor_alloc(g_ctx, dt, 4, dims, 32, 64);
        t.dims[1] = CH;
        t.dims[2] = CLOUT;
        t.strides[0] = CLOUT * CH * D;
        t.strides[1] = D;
        t.strides[2] = CH * D;
    }
    return t;
}

/* Expected image of a destination buffer: poison except rows i < m[row] with a valid
 * index, which hold the source row's stored bytes. */
static void check_dst(const clkv_tensor *dst, const float *src_logical, int64_t D,
                      const int32_t *idx, const int32_t *m, const char *what) {
    size_t bytes = 0;
    uint8_t *img = tu_buffer_read_all(g_ctx, dst->buf, &bytes);
    uint8_t *exp = (uint8_t *)tu_malloc(bytes);
    tu_poison_host(exp, bytes, 0);
    const size_t es = tu_dtype_size(dst->dtype);
    for (int64_t b = 0; b < CB; b++)
        for (int64_t h = 0; h < CH; h++)
            for (int64_t i = 0; i < m[b * CH + h]; i++) {
                int32_t j = idx[(b * CH + h) * CK + i];
                if (j < 0 || j >= CL)
                    continue;
                for (int64_t d = 0; d < D; d++) {
                    size_t off = (size_t)dst->offset +
                                 (size_t)(b * dst->strides[0] + h * dst->strides[1] +
                                          i * dst->strides[2] + d * (dst->ndim == 4 ? 1 : 0)) *
                                     es;
                    tu_store(dst->dtype, exp + off, 0,
                             src_logical[((b * CH + h) * CL + j) * D + d]);
                }
            }
    for (size_t i = 0; i < bytes; i++)
        if (img[i] != exp[i])
            TU_FAIL("%s: byte %zu of the destination buffer is 0x%02x, expected 0x%02x", what, i,
                    img[i], exp[i]);
    free(exp);
    free(img);
}

typedef struct compact_case {
    const char *name;
    clkv_dtype dt;
    tu_layout layout;
    int use_counts;
    clkv_dtype meta_dt; /* CLKV_U32 + 1 = no meta */
} compact_case;

#define NO_META ((clkv_dtype)99)

static const compact_case g_compact[] = {
    {"compact_f32_hnd_minus1", CLKV_F32, TU_HND, 0, CLKV_I32},
    {"compact_f16_nhd_minus1", CLKV_F16, TU_NHD, 0, CLKV_F16},
    {"compact_bf16_hnd_counts", CLKV_BF16, TU_HND, 1, CLKV_U8},
    {"compact_f32_nhd_counts", CLKV_F32, TU_NHD, 1, NO_META},
    {"compact_f16_hnd_counts", CLKV_F16, TU_HND, 1, CLKV_BF16},
    {"compact_bf16_nhd_minus1", CLKV_BF16, TU_NHD, 0, CLKV_F32},
};

static void run_compact(void **state) {
    const compact_case *c = (const compact_case *)*state;
    tu_rng rng;
    tu_rng_seed(&rng, tu_seed(DEFAULT_SEED), 100 + (uint64_t)(c - g_compact));
    tu_set_case("%s", c->name);
    const size_t nkv = (size_t)CB * CH * CL * CD;
    float *k = (float *)tu_malloc(nkv * sizeof(float));
    float *v = (float *)tu_malloc(nkv * sizeof(float));
    tu_fill_normal(&rng, k, nkv, 0.0, 1.0);
    tu_fill_normal(&rng, v, nkv, 0.0, 3.0);
    tu_round_array(c->dt, k, nkv);
    tu_round_array(c->dt, v, nkv);
    /* index lists: ascending subsets of varying size, -1 padded (or junk after counts) */
    int32_t idx[CB * CH * CK], counts[CB * CH], m[CB * CH];
    const int32_t sizes[CB * CH] = {0, CK, 7, 1, 13, CK};
    for (int row = 0; row < CB * CH; row++) {
        int32_t cnt = 0;
        for (int32_t j = 0; j < CL && cnt < sizes[row]; j++) {
            int64_t left = CL - j, need = sizes[row] - cnt;
            if (tu_rng_int(&rng, 1, left) <= need)
                idx[row * CK + cnt++] = j;
        }
        for (int32_t i = cnt; i < CK; i++)
            idx[row * CK + i] = c->use_counts ? (int32_t)tu_rng_int(&rng, 0, CL - 1) : -1;
        counts[row] = cnt;
        m[row] = cnt;
    }
    if (c->use_counts) { /* clamping: a count above K uses all K entries */
        counts[1] = CK + 10;
        m[1] = CK;
        /* an out-of-range index inside the count is skipped */
        idx[4 * CK + 3] = CL + 5;
    }
    clkv_compact_kv_args a = CLKV_COMPACT_KV_ARGS_INIT;
    a.k_src = tu_kv_tensor(g_ctx, k, c->dt, CB, CH, CL, CD, c->layout);
    a.v_src = tu_kv_tensor(g_ctx, v, c->dt, CB, CH, CL, CD, c->layout);
    const int64_t idims[3] = {CB, CH, CK}, cdims[2] = {CB, CH};
    a.indices = tu_tensor_upload_i32(g_ctx, idx, 3, idims, 16, 8);
    if (c->use_counts)
        a.counts = tu_tensor_upload_i32(g_ctx, counts, 2, cdims, 0, 0);
    a.k_dst = alloc_dst(c->dt, c->layout, CD);
    a.v_dst = alloc_dst(c->dt, c->layout, CD);
    a.new_lengths = tu_tensor_alloc(g_ctx, CLKV_I32, 2, cdims, 4, 12);
    float meta[CB * CH * CL];
    if (c->meta_dt != NO_META) {
        for (int i = 0; i < CB * CH * CL; i++)
            meta[i] =
                c->meta_dt == CLKV_U8 ? (float)(i % 251) : (float)tu_rng_int(&rng, -9999, 9999);
        tu_round_array(c->meta_dt, meta, CB * CH * CL);
        const int64_t ms[3] = {CB, CH, CL}, md[3] = {CB, CH, CLOUT};
        a.meta_src = tu_tensor_upload(g_ctx, meta, c->meta_dt, 3, ms, 4, 4);
        a.meta_dst = tu_tensor_alloc(g_ctx, c->meta_dt, 3, md, 4, 8);
    }
    cl_event ev = NULL;
    TU_CHECK_OK(g_ctx, clkv_compact_kv(g_ctx, &a, &ev));
    assert_non_null(ev);
    TU_CHECK_CL(clWaitForEvents(1, &ev));
    clReleaseEvent(ev);
    check_dst(&a.k_dst, k, CD, idx, m, "k_dst");
    check_dst(&a.v_dst, v, CD, idx, m, "v_dst");
    if (c->meta_dt != NO_META) {
        /* meta is [B, H, Lout]: treat it as rows of one element */
        check_dst(&a.meta_dst, meta, 1, idx, m, "meta_dst");
    }
    int32_t nl[CB * CH];
    tu_buffer_read(g_ctx, a.new_lengths.buf, 4, nl, sizeof nl);
    for (int row = 0; row < CB * CH; row++)
        if (nl[row] != m[row])
            TU_FAIL("new_lengths[%d] = %d, expected %d", row, nl[row], m[row]);
    tu_assert_written_exactly(g_ctx, &a.new_lengths, "new_lengths");
    tu_release(a.k_src.buf);
    tu_release(a.v_src.buf);
    tu_release(a.indices.buf);
    tu_release(a.counts.buf);
    tu_release(a.k_dst.buf);
    tu_release(a.v_dst.buf);
    tu_release(a.new_lengths.buf);
    tu_release(a.meta_src.buf);
    tu_release(a.meta_dst.buf);
    free(k);
    free(v);
}

/* Select on the device, then compact with the -1 padding ending each list. */
static void test_select_then_compact(void **state) {
    (void)state;
    tu_rng rng;
    tu_rng_seed(&rng, tu_seed(DEFAULT_SEED), 200);
    tu_set_case("select_then_compact f16 NHD");
    const size_t nkv = (size_t)CB * CH * CL * CD;
    float *k = (float *)tu_malloc(nkv * sizeof(float));
    tu_fill_normal(&rng, k, nkv, 0.0, 1.0);
    tu_round_array(CLKV_F16, k, nkv);
    float sc[CB * CH * CL];
    tu_fill_normal(&rng, sc, CB * CH * CL, 0.0, 1.0);
    const int32_t lens[CB] = {CL, 9};
    const int64_t sdims[3] = {CB, CH, CL}, idims[3] = {CB, CH, CK}, cdims[2] = {CB, CH},
                  bdims[1] = {CB};
    clkv_select_topk_args sa = CLKV_SELECT_TOPK_ARGS_INIT;
    sa.scores = tu_tensor_upload(g_ctx, sc, CLKV_F32, 3, sdims, 0, 0);
    sa.lengths = tu_tensor_upload_i32(g_ctx, lens, 1, bdims, 0, 0);
    sa.indices = tu_tensor_alloc(g_ctx, CLKV_I32, 3, idims, 0, 0);
    sa.k = CK;
    TU_CHECK_OK(g_ctx, clkv_select_topk(g_ctx, &sa, NULL));
    clkv_compact_kv_args a = CLKV_COMPACT_KV_ARGS_INIT;
    a.k_src = tu_kv_tensor(g_ctx, k, CLKV_F16, CB, CH, CL, CD, TU_NHD);
    a.v_src = tu_kv_tensor(g_ctx, k, CLKV_F16, CB, CH, CL, CD, TU_NHD);
    a.indices = sa.indices;
    a.k_dst = alloc_dst(CLKV_F16, TU_NHD, CD);
    a.v_dst = alloc_dst(CLKV_F16, TU_NHD, CD);
    a.new_lengths = tu_tensor_alloc(g_ctx, CLKV_I32, 2, cdims, 0, 0);
    TU_CHECK_OK(g_ctx, clkv_compact_kv(g_ctx, &a, NULL));
    int32_t idx[CB * CH * CK], m[CB * CH], nl[CB * CH];
    for (int b = 0; b < CB; b++)
        for (int h = 0; h < CH; h++) {
            int row = b * CH + h;
            int64_t c = ref_select_topk(sc + row * CL, lens[b], CK, 1, idx + row * CK);
            m[row] = (int32_t)c;
        }
    check_dst(&a.k_dst, k, CD, idx, m, "k_dst");
    check_dst(&a.v_dst, k, CD, idx, m, "v_dst");
    tu_buffer_read(g_ctx, a.new_lengths.buf, 0, nl, sizeof nl);
    for (int row = 0; row < CB * CH; row++)
        if (nl[row] != m[row])
            TU_FAIL("new_lengths[%d] = %d, expected %d", row, nl[row], m[row]);
    tu_release(sa.scores.buf);
    tu_release(sa.lengths.buf);
    tu_release(sa.indices.buf);
    tu_release(a.k_src.buf);
    tu_release(a.v_src.buf);
    tu_release(a.k_dst.buf);
    tu_release(a.v_dst.buf);
    tu_release(a.new_lengths.buf);
    free(k);
}

/* ------------------------------------------------------------------------------------ */
/* Validation                                                                           */
/* ------------------------------------------------------------------------------------ */

/* Expect `st` to be `want` with a message naming `name`; `out` must still be poison. */
static void expect_reject(clkv_status st, clkv_status want, const char *name, cl_mem out,
                          cl_event ev, const char *what) {
    /* a NULL context leaves its message in the thread-local slot */
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

static void test_select_bad_inputs(void **state) {
    (void)state;
    const float sc[2 * 2 * 64] = {0};
    const int32_t lens[2] = {64, 3};
    const int64_t sdims[3] = {2, 2, 64}, idims[3] = {2, 2, 8}, cdims[2] = {2, 2}, bdims[1] = {2};
    clkv_tensor scores = tu_tensor_upload(g_ctx, sc, CLKV_F32, 3, sdims, 0, 0);
    clkv_tensor len = tu_tensor_upload_i32(g_ctx, lens, 1, bdims, 0, 64);
    clkv_tensor idx = tu_tensor_alloc(g_ctx, CLKV_I32, 3, idims, 0, 0);
    clkv_tensor cnt = tu_tensor_alloc(g_ctx, CLKV_I32, 2, cdims, 0, 64);
    clkv_select_topk_args base = CLKV_SELECT_TOPK_ARGS_INIT;
    base.scores = scores;
    base.lengths = len;
    base.indices = idx;
    base.counts = cnt;
    base.k = 8;
    clkv_select_topk_args a;
    cl_event ev = NULL;
    size_t bytes;

    expect_reject(clkv_select_topk(NULL, &base, &ev), CLKV_ERR_ARG_NULL, "ctx", NULL, ev, "ctx");
    expect_reject(clkv_select_topk(g_ctx, NULL, &ev), CLKV_ERR_ARG_NULL, "args", idx.buf, ev,
                  "args");
    expect_reject(clkv_select_topk_workspace_size(g_ctx, &base, NULL), CLKV_ERR_ARG_NULL, "bytes",
                  idx.buf, NULL, "bytes");
#define BAD(mut, want, name)                                                                       \
    do {                                                                                           \
        a = base;                                                                                  \
        mut;                                                                                       \
        ev = NULL;                                                                                 \
        expect_reject(clkv_select_topk(g_ctx, &a, &ev), want, name, idx.buf, ev, #mut);            \
        expect_reject(clkv_select_topk_workspace_size(g_ctx, &a, &bytes), want, name, idx.buf,     \
                      NULL, #mut " (workspace_size)");                                             \
        tu_assert_buffer_poison(g_ctx, cnt.buf, #mut " (counts)");                                 \
    } while (0)
    BAD(a.scores.buf = NULL, CLKV_ERR_ARG_NULL, "scores");
    BAD(a.indices.buf = NULL, CLKV_ERR_ARG_NULL, "indices");
    BAD(a.scores.dtype = CLKV_F16, CLKV_ERR_ARG_DTYPE, "scores");
    BAD(a.indices.dtype = CLKV_U32, CLKV_ERR_ARG_DTYPE, "indices");
    BAD(a.lengths.dtype = CLKV_F32, CLKV_ERR_ARG_DTYPE, "lengths");
    BAD(a.counts.dtype = CLKV_F32, CLKV_ERR_ARG_DTYPE, "counts");
    BAD(a.scores.ndim = 2, CLKV_ERR_ARG_SHAPE, "scores");
    BAD(a.k = 7, CLKV_ERR_ARG_SHAPE, "indices");
    BAD(a.k = -1, CLKV_ERR_ARG_RANGE, "k");
    BAD(a.indices.dims[0] = 1, CLKV_ERR_ARG_SHAPE, "indices");
    BAD(a.lengths.dims[0] = 3, CLKV_ERR_ARG_SHAPE, "lengths");
    BAD(a.counts.dims[1] = 3, CLKV_ERR_ARG_SHAPE, "counts");
    BAD((a.k_per_row = cnt, a.k_per_row.dims[0] = 1), CLKV_ERR_ARG_SHAPE, "k_per_row");
    BAD(a.max_length = 65, CLKV_ERR_ARG_RANGE, "max_length");
    BAD(a.max_length = -2, CLKV_ERR_ARG_RANGE, "max_length");
    BAD(a.largest = 2, CLKV_ERR_ARG_RANGE, "largest");
    BAD(a.scores.strides[2] = 2, CLKV_ERR_ARG_STRIDE, "scores");
    BAD(a.scores.offset = 2, CLKV_ERR_ARG_ALIGNMENT, "scores");
    BAD(a.scores.offset = 4, CLKV_ERR_ARG_BUFFER_SIZE, "scores");
    BAD(a.indices.strides[0] = INT64_MAX / 2, CLKV_ERR_ARG_OVERFLOW, "indices");
#undef BAD
    /* and the baseline works */
    tu_set_case("bad inputs baseline");
    TU_CHECK_OK(g_ctx, clkv_select_topk(g_ctx, &base, NULL));
    int32_t got[2 * 2 * 8];
    tu_buffer_read(g_ctx, idx.buf, 0, got, sizeof got);
    for (int i = 0; i < 2 * 2 * 8; i++) /* all scores equal: the first indices */
        assert_int_equal(got[i], i >= 16 ? (i % 8 < 3 ? i % 8 : -1) : i % 8);
    tu_release(scores.buf);
    tu_release(len.buf);
    tu_release(idx.buf);
    tu_release(cnt.buf);
}

static void test_compact_bad_inputs(void **state) {
    (void)state;
    const size_t nkv = (size_t)CB * CH * CL * CD;
    float *z = (float *)tu_calloc(nkv, sizeof(float));
    int32_t idxv[CB * CH * CK];
    for (int i = 0; i < CB * CH * CK; i++)
        idxv[i] = i % CK;
    const int64_t idims[3] = {CB, CH, CK}, cdims[2] = {CB, CH}, ms[3] = {CB, CH, CL},
                  md[3] = {CB, CH, CLOUT};
    clkv_compact_kv_args base = CLKV_COMPACT_KV_ARGS_INIT;
    base.k_src = tu_kv_tensor(g_ctx, z, CLKV_F32, CB, CH, CL, CD, TU_HND);
    base.v_src = tu_kv_tensor(g_ctx, z, CLKV_F32, CB, CH, CL, CD, TU_HND);
    base.indices = tu_tensor_upload_i32(g_ctx, idxv, 3, idims, 0, 0);
    base.k_dst = alloc_dst(CLKV_F32, TU_HND, CD);
    base.v_dst = alloc_dst(CLKV_F32, TU_HND, CD);
    base.new_lengths = tu_tensor_alloc(g_ctx, CLKV_I32, 2, cdims, 0, 0);
    base.meta_src = tu_tensor_upload(g_ctx, z, CLKV_U8, 3, ms, 0, 0);
    base.meta_dst = tu_tensor_alloc(g_ctx, CLKV_U8, 3, md, 0, 1024);
    clkv_compact_kv_args a;
    cl_event ev = NULL;
    cl_mem out = base.k_dst.buf;
    expect_reject(clkv_compact_kv(NULL, &base, &ev), CLKV_ERR_ARG_NULL, "ctx", NULL, ev, "ctx");
    expect_reject(clkv_compact_kv(g_ctx, NULL, &ev), CLKV_ERR_ARG_NULL, "args", out, ev, "args");
#define BAD(mut, want, name)                                                                       \
    do {                                                                                           \
        a = base;                                                                                  \
        mut;                                                                                       \
        ev = NULL;                                                                                 \
        expect_reject(clkv_compact_kv(g_ctx, &a, &ev), want, name, out, ev, #mut);                 \
        tu_assert_buffer_poison(g_ctx, base.v_dst.buf, #mut " (v_dst)");                           \
        tu_assert_buffer_poison(g_ctx, base.new_lengths.buf, #mut " (new_lengths)");               \
        tu_assert_buffer_poison(g_ctx, base.meta_dst.buf, #mut " (meta_dst)");                     \
    } while (0)
    BAD(a.k_src.buf = NULL, CLKV_ERR_ARG_NULL, "k_src");
    BAD(a.v_src.buf = NULL, CLKV_ERR_ARG_NULL, "v_src");
    BAD(a.indices.buf = NULL, CLKV_ERR_ARG_NULL, "indices");
    BAD(a.k_dst.buf = NULL, CLKV_ERR_ARG_NULL, "k_dst");
    BAD(a.v_dst.buf = NULL, CLKV_ERR_ARG_NULL, "v_dst");
    BAD(a.meta_dst.buf = NULL, CLKV_ERR_ARG_NULL, "meta_dst");
    BAD(a.k_src.dtype = CLKV_I32, CLKV_ERR_ARG_DTYPE, "k_src");
    BAD(a.k_dst.dtype = CLKV_F16, CLKV_ERR_ARG_DTYPE, "k_dst");
    BAD(a.v_dst.dtype = CLKV_BF16, CLKV_ERR_ARG_DTYPE, "v_dst");
    BAD(a.meta_dst.dtype = CLKV_I32, CLKV_ERR_ARG_DTYPE, "meta_dst");
    BAD(a.indices.dtype = CLKV_F32, CLKV_ERR_ARG_DTYPE, "indices");
    BAD(a.new_lengths.dtype = CLKV_U32, CLKV_ERR_ARG_DTYPE, "new_lengths");
    BAD(a.v_src.dims[2] = CL - 1, CLKV_ERR_ARG_SHAPE, "v_src");
    BAD(a.k_dst.dims[3] = CD / 2, CLKV_ERR_ARG_SHAPE, "k_dst");
    BAD(a.v_dst.dims[2] = CLOUT - 1, CLKV_ERR_ARG_SHAPE, "v_dst");
    BAD(a.indices.dims[1] = 1, CLKV_ERR_ARG_SHAPE, "indices");
    BAD((a.k_dst.dims[2] = CK - 1, a.v_dst.dims[2] = CK - 1), CLKV_ERR_ARG_SHAPE, "indices");
    BAD((a.counts = a.new_lengths, a.counts.buf = base.indices.buf, a.counts.dims[0] = 1),
        CLKV_ERR_ARG_SHAPE, "counts");
    BAD(a.new_lengths.dims[1] = 1, CLKV_ERR_ARG_SHAPE, "new_lengths");
    BAD(a.meta_src.dims[2] = CLOUT, CLKV_ERR_ARG_SHAPE, "meta_src");
    BAD(a.k_dst.buf = base.k_src.buf, CLKV_ERR_ARG_UNSUPPORTED, "k_dst");
    BAD(a.v_dst.buf = base.v_src.buf, CLKV_ERR_ARG_UNSUPPORTED, "v_dst");
    BAD(a.k_src.strides[3] = 0, CLKV_ERR_ARG_STRIDE, "k_src");
    BAD(a.v_dst.offset = 2, CLKV_ERR_ARG_ALIGNMENT, "v_dst");
    BAD(a.k_dst.offset = 32 + 4 * 64 + 4, CLKV_ERR_ARG_BUFFER_SIZE, "k_dst");
    BAD(a.k_src.strides[0] = INT64_MAX / 2, CLKV_ERR_ARG_OVERFLOW, "k_src");
#undef BAD
    tu_set_case("compact bad inputs baseline");
    TU_CHECK_OK(g_ctx, clkv_compact_kv(g_ctx, &base, NULL));
    clFinish(clkv_context_queue(g_ctx));
    tu_release(base.k_src.buf);
    tu_release(base.v_src.buf);
    tu_release(base.indices.buf);
    tu_release(base.k_dst.buf);
    tu_release(base.v_dst.buf);
    tu_release(base.new_lengths.buf);
    tu_release(base.meta_src.buf);
    tu_release(base.meta_dst.buf);
    free(z);
}

/* ------------------------------------------------------------------------------------ */
/* In-place compaction                                                                  */
/* ------------------------------------------------------------------------------------ */

typedef struct inplace_case {
    const char *name;
    int64_t B, H, L, D, Lout, K;
    clkv_dtype dt;
    tu_layout layout;
    clkv_dtype meta_dt; /* NO_META: none */
    int v_out_of_place; /* V compacted out of place in the same call */
    int use_counts;
} inplace_case;

static const inplace_case g_inplace[] = {
    {"inplace_f16_nhd_d128", 2, 4, 300, 128, 300, 300, CLKV_F16, TU_NHD, CLKV_U8, 0, 0},
    {"inplace_bf16_hnd_d64_lout", 1, 8, 1000, 64, 700, 700, CLKV_BF16, TU_HND, NO_META, 1, 1},
    {"inplace_f32_hnd_d256_meta_i32", 3, 2, 129, 256, 129, 100, CLKV_F32, TU_HND, CLKV_I32, 0, 1},
    {"inplace_f16_nhd_d80_rows_split", 2, 3, 257, 80, 257, 257, CLKV_F16, TU_NHD, CLKV_F32, 1, 0},
};

/* Byte position of element (b, h, l, d) of a descriptor. */
static size_t elem_pos(const clkv_tensor *t, int64_t b, int64_t h, int64_t l, int64_t d) {
    int64_t e = b * t->strides[0] + h * t->strides[1] + l * (t->ndim == 4 ? t->strides[2] : 1) + d;
    return (size_t)t->offset + (size_t)e * tu_dtype_size(t->dtype);
}

/* Host expectation of an in-place compaction of `t` whose buffer image was `orig`: rows
 * i < m[row] become the original rows idx[row][i] (idx ascending, all valid). */
static void expect_inplace(const clkv_tensor *t, const uint8_t *orig, uint8_t *exp, int64_t B,
                           int64_t H, int64_t D, int64_t K, const int32_t *idx, const int32_t *m) {
    const size_t es = tu_dtype_size(t->dtype);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < m[b * H + h]; i++) {
                const int32_t j = idx[(b * H + h) * K + i];
                for (int64_t d = 0; d < D; d++)
                    memcpy(exp + elem_pos(t, b, h, i, d), orig + elem_pos(t, b, h, j, d), es);
            }
}

static void assert_bytes_equal(const uint8_t *got, const uint8_t *exp, size_t n, const char *what) {
    for (size_t i = 0; i < n; i++)
        if (got[i] != exp[i])
            TU_FAIL("%s: byte %zu is 0x%02x, expected 0x%02x", what, i, got[i], exp[i]);
}

static void run_inplace(void **state) {
    const inplace_case *c = (const inplace_case *)*state;
    const int64_t B = c->B, H = c->H, L = c->L, D = c->D, K = c->K, rows = B * H;
    const size_t nkv = (size_t)(B * H * L * D);
    tu_rng rng;
    tu_rng_seed(&rng, tu_seed(DEFAULT_SEED), 300 + (uint64_t)(c - g_inplace));
    tu_set_case("%s (B=%" PRId64 " H=%" PRId64 " L=%" PRId64 " D=%" PRId64 " Lout=%" PRId64
                " K=%" PRId64 " %s %s)",
                c->name, B, H, L, D, c->Lout, K, clkv_dtype_name(c->dt), tu_layout_name(c->layout));
    float *k = (float *)tu_malloc(nkv * sizeof(float));
    float *v = (float *)tu_malloc(nkv * sizeof(float));
    float *meta = (float *)tu_malloc((size_t)(B * H * L) * sizeof(float));
    int32_t *idx = (int32_t *)tu_malloc((size_t)(rows * K) * sizeof(int32_t));
    int32_t *m = (int32_t *)tu_malloc((size_t)rows * sizeof(int32_t));
    int32_t *nl = (int32_t *)tu_malloc((size_t)rows * sizeof(int32_t));
    tu_fill_normal(&rng, k, nkv, 0.0, 1.0);
    tu_fill_normal(&rng, v, nkv, 0.0, 2.0);
    for (int64_t i = 0; i < B * H * L; i++)
        meta[i] = (float)((i * 7) % 200);
    /* ascending index lists: empty, one, all K (identity prefix when K == L), dense
     * (90 %) and sparse (10 %) random subsets; -1 padded or junk after counts */
    for (int64_t r = 0; r < rows; r++) {
        int64_t want;
        switch (r % 5) {
        case 0:
            want = 0;
            break;
        case 1:
            want = 1;
            break;
        case 2:
            want = K;
            break;
        case 3:
            want = (K * 9) / 10;
            break;
        default:
            want = K / 10 + 1;
            break;
        }
        int64_t cnt = 0;
        for (int64_t j = 0; j < L && cnt < want; j++)
            if (tu_rng_int(&rng, 1, L - j) <= want - cnt)
                idx[r * K + cnt++] = (int32_t)j;
        m[r] = (int32_t)cnt;
        for (int64_t i = cnt; i < K; i++)
            idx[r * K + i] = c->use_counts ? (int32_t)tu_rng_int(&rng, 0, L - 1) : -1;
    }
    const int64_t idims[3] = {B, H, K}, cdims[2] = {B, H}, mdims[3] = {B, H, L};
    clkv_compact_kv_args a = CLKV_COMPACT_KV_ARGS_INIT, o = CLKV_COMPACT_KV_ARGS_INIT;
    /* out of place first, from a separate copy of the cache */
    o.k_src = tu_kv_tensor(g_ctx, k, c->dt, B, H, L, D, c->layout);
    o.v_src = tu_kv_tensor(g_ctx, v, c->dt, B, H, L, D, c->layout);
    o.k_dst = tu_kv_tensor(g_ctx, v, c->dt, B, H, L, D, c->layout);
    o.v_dst = tu_kv_tensor(g_ctx, k, c->dt, B, H, L, D, c->layout);
    o.k_dst.dims[2] = o.v_dst.dims[2] = c->Lout;
    o.indices = tu_tensor_upload_i32(g_ctx, idx, 3, idims, 0, 0);
    if (c->use_counts)
        o.counts = tu_tensor_upload_i32(g_ctx, m, 2, cdims, 0, 0);
    TU_CHECK_OK(g_ctx, clkv_compact_kv(g_ctx, &o, NULL));
    /* in place */
    a.k_src = tu_kv_tensor(g_ctx, k, c->dt, B, H, L, D, c->layout);
    a.k_dst = a.k_src;
    a.k_dst.dims[2] = c->Lout;
    a.v_src = tu_kv_tensor(g_ctx, v, c->dt, B, H, L, D, c->layout);
    if (c->v_out_of_place) {
        a.v_dst = tu_kv_tensor(g_ctx, k, c->dt, B, H, L, D, c->layout);
        a.v_dst.dims[2] = c->Lout;
    } else {
        a.v_dst = a.v_src;
        a.v_dst.dims[2] = c->Lout;
    }
    if (c->meta_dt != NO_META) {
        a.meta_src = tu_tensor_upload(g_ctx, meta, c->meta_dt, 3, mdims, 8, 8);
        a.meta_dst = a.meta_src;
        a.meta_dst.dims[2] = c->Lout;
    }
    a.indices = o.indices;
    a.counts = o.counts;
    a.new_lengths = tu_tensor_alloc(g_ctx, CLKV_I32, 2, cdims, 0, 0);
    const int32_t zero = 0;
    const int64_t fdims[1] = {1};
    a.flags = tu_tensor_upload_i32(g_ctx, &zero, 1, fdims, 0, 0);
    size_t kb = 0, vb = 0, mb = 0;
    uint8_t *k_orig = tu_buffer_read_all(g_ctx, a.k_src.buf, &kb);
    uint8_t *v_orig = tu_buffer_read_all(g_ctx, a.v_dst.buf, &vb);
    uint8_t *m_orig = c->meta_dt != NO_META ? tu_buffer_read_all(g_ctx, a.meta_src.buf, &mb) : NULL;
    cl_event ev = NULL;
    TU_CHECK_OK(g_ctx, clkv_compact_kv(g_ctx, &a, &ev));
    assert_non_null(ev);
    TU_CHECK_CL(clWaitForEvents(1, &ev));
    clReleaseEvent(ev);

    /* host expectation, whole buffer images */
    uint8_t *exp = (uint8_t *)tu_malloc(kb > vb ? (kb > mb ? kb : mb) : (vb > mb ? vb : mb));
    size_t n = 0;
    uint8_t *got = tu_buffer_read_all(g_ctx, a.k_dst.buf, &n);
    memcpy(exp, k_orig, kb);
    expect_inplace(&a.k_dst, k_orig, exp, B, H, D, K, idx, m);
    assert_bytes_equal(got, exp, kb, "k (in place)");
    free(got);
    if (!c->v_out_of_place) {
        got = tu_buffer_read_all(g_ctx, a.v_dst.buf, &n);
        memcpy(exp, v_orig, vb);
        expect_inplace(&a.v_dst, v_orig, exp, B, H, D, K, idx, m);
        assert_bytes_equal(got, exp, vb, "v (in place)");
        free(got);
    }
    if (m_orig) {
        got = tu_buffer_read_all(g_ctx, a.meta_dst.buf, &n);
        memcpy(exp, m_orig, mb);
        expect_inplace(&a.meta_dst, m_orig, exp, B, H, 1, K, idx, m);
        assert_bytes_equal(got, exp, mb, "meta (in place)");
        free(got);
    }
    /* equal to the out-of-place result on every kept row (K and V) */
    {
        const size_t es = tu_dtype_size(c->dt);
        uint8_t *ip_k = tu_buffer_read_all(g_ctx, a.k_dst.buf, &n);
        uint8_t *ip_v = tu_buffer_read_all(g_ctx, a.v_dst.buf, &n);
        uint8_t *op_k = tu_buffer_read_all(g_ctx, o.k_dst.buf, &n);
        uint8_t *op_v = tu_buffer_read_all(g_ctx, o.v_dst.buf, &n);
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t i = 0; i < m[b * H + h]; i++)
                    if (memcmp(ip_k + elem_pos(&a.k_dst, b, h, i, 0),
                               op_k + elem_pos(&o.k_dst, b, h, i, 0), (size_t)D * es) != 0 ||
                        memcmp(ip_v + elem_pos(&a.v_dst, b, h, i, 0),
                               op_v + elem_pos(&o.v_dst, b, h, i, 0), (size_t)D * es) != 0)
                        TU_FAIL("row (%" PRId64 ", %" PRId64 ", %" PRId64
                                ") differs between in-place and out-of-place compaction",
                                b, h, i);
        free(ip_k);
        free(ip_v);
        free(op_k);
        free(op_v);
    }
    tu_buffer_read(g_ctx, a.new_lengths.buf, 0, nl, (size_t)rows * sizeof(int32_t));
    for (int64_t r = 0; r < rows; r++)
        if (nl[r] != m[r])
            TU_FAIL("new_lengths[%" PRId64 "] = %d, expected %d", r, nl[r], m[r]);
    int32_t fl = -1;
    tu_buffer_read(g_ctx, a.flags.buf, 0, &fl, sizeof fl);
    if (fl != 0)
        TU_FAIL("flags = %d after an in-place call with ascending lists, expected 0", fl);

    tu_release(o.k_src.buf);
    tu_release(o.v_src.buf);
    tu_release(o.k_dst.buf);
    tu_release(o.v_dst.buf);
    tu_release(o.indices.buf);
    tu_release(o.counts.buf);
    tu_release(a.k_src.buf);
    tu_release(a.v_src.buf);
    if (c->v_out_of_place)
        tu_release(a.v_dst.buf);
    tu_release(a.meta_src.buf);
    tu_release(a.new_lengths.buf);
    tu_release(a.flags.buf);
    free(k_orig);
    free(v_orig);
    free(m_orig);
    free(exp);
    free(k);
    free(v);
    free(meta);
    free(idx);
    free(m);
    free(nl);
    tu_set_case("%s", "");
}

/* In place with lists that are not strictly ascending inside [0, L): those rows are left
 * untouched (incl. new_lengths), the flag is raised, the other rows are compacted. Out
 * of place, the same lists are legal and leave the flag alone. */
static void test_inplace_not_ascending(void **state) {
    (void)state;
    enum { B = 1, H = 5, L = 48, D = 64, K = 6 };
    tu_set_case("inplace_not_ascending");
    tu_rng rng;
    tu_rng_seed(&rng, tu_seed(DEFAULT_SEED), 400);
    float *k = (float *)tu_malloc((size_t)(B * H * L * D) * sizeof(float));
    tu_fill_normal(&rng, k, (size_t)(B * H * L * D), 0.0, 1.0);
    const int32_t idx[H * K] = {
        1,  3,  5,  7,  9,  11, /* row 0: ascending: compacted */
        4,  2,  6,  8,  10, 12, /* row 1: descending pair */
        0,  3,  3,  5,  -1, -1, /* row 2: duplicate */
        2,  5,  L,  -1, -1, -1, /* row 3: index L (outside [0, L)) before the -1 */
        10, 20, 30, 40, 47, -1, /* row 4: ascending: compacted */
    };
    const int32_t m_ok[H] = {6, 0, 0, 0, 5};
    const int64_t idims[3] = {B, H, K}, cdims[2] = {B, H}, fdims[1] = {1};
    const int32_t zero = 0;
    clkv_compact_kv_args a = CLKV_COMPACT_KV_ARGS_INIT;
    a.k_src = tu_kv_tensor(g_ctx, k, CLKV_F32, B, H, L, D, TU_HND);
    a.k_dst = a.k_src;
    a.v_src = tu_kv_tensor(g_ctx, k, CLKV_F32, B, H, L, D, TU_NHD);
    a.v_dst = a.v_src;
    a.indices = tu_tensor_upload_i32(g_ctx, idx, 3, idims, 0, 0);
    a.new_lengths = tu_tensor_alloc(g_ctx, CLKV_I32, 2, cdims, 0, 0);
    a.flags = tu_tensor_upload_i32(g_ctx, &zero, 1, fdims, 4, 4);
    size_t kb = 0, vb = 0, n = 0;
    uint8_t *k_orig = tu_buffer_read_all(g_ctx, a.k_src.buf, &kb);
    uint8_t *v_orig = tu_buffer_read_all(g_ctx, a.v_src.buf, &vb);
    TU_CHECK_OK(g_ctx, clkv_compact_kv(g_ctx, &a, NULL));
    uint8_t *exp = (uint8_t *)tu_malloc(kb > vb ? kb : vb);
    uint8_t *got = tu_buffer_read_all(g_ctx, a.k_src.buf, &n);
    memcpy(exp, k_orig, kb);
    expect_inplace(&a.k_dst, k_orig, exp, B, H, D, K, idx, m_ok);
    assert_bytes_equal(got, exp, kb, "k (in place, HND)");
    free(got);
    got = tu_buffer_read_all(g_ctx, a.v_src.buf, &n);
    memcpy(exp, v_orig, vb);
    expect_inplace(&a.v_dst, v_orig, exp, B, H, D, K, idx, m_ok);
    assert_bytes_equal(got, exp, vb, "v (in place, NHD)");
    free(got);
    int32_t nl[H], fl[3];
    tu_buffer_read(g_ctx, a.new_lengths.buf, 0, nl, sizeof nl);
    assert_int_equal(nl[0], 6);
    assert_int_equal(nl[4], 5);
    for (int r = 1; r <= 3; r++)
        if (!tu_is_poison(nl, (size_t)r * 4, 4))
            TU_FAIL("new_lengths[%d] = %d was written for a rejected row", r, nl[r]);
    tu_buffer_read(g_ctx, a.flags.buf, 0, fl, sizeof fl);
    if (fl[1] != CLKV_COMPACT_FLAG_NOT_ASCENDING)
        TU_FAIL("flags = %d, expected CLKV_COMPACT_FLAG_NOT_ASCENDING", fl[1]);
    if (!tu_is_poison(fl, 0, 4) || !tu_is_poison(fl, 8, 4))
        TU_FAIL("bytes around the flags word were written");
    /* out of place: the same lists are fine and the flag stays 0 */
    tu_buffer_write(g_ctx, a.flags.buf, 4, &zero, sizeof zero);
    clkv_compact_kv_args o = a;
    o.k_dst = tu_kv_tensor(g_ctx, k, CLKV_F32, B, H, L, D, TU_HND);
    o.v_dst = tu_kv_tensor(g_ctx, k, CLKV_F32, B, H, L, D, TU_HND);
    TU_CHECK_OK(g_ctx, clkv_compact_kv(g_ctx, &o, NULL));
    tu_buffer_read(g_ctx, a.flags.buf, 0, fl, sizeof fl);
    assert_int_equal(fl[1], 0);
    tu_buffer_read(g_ctx, a.new_lengths.buf, 0, nl, sizeof nl);
    assert_int_equal(nl[1], 6);
    assert_int_equal(nl[2], 4);
    assert_int_equal(nl[3], 3);
    tu_release(o.k_dst.buf);
    tu_release(o.v_dst.buf);
    tu_release(a.k_src.buf);
    tu_release(a.v_src.buf);
    tu_release(a.indices.buf);
    tu_release(a.new_lengths.buf);
    tu_release(a.flags.buf);
    free(k_orig);
    free(v_orig);
    free(exp);
    free(k);
    tu_set_case("%s", "");
}

/* Bad in-place and flags arguments: each rejected naming the argument, nothing written. */
static void test_inplace_bad_inputs(void **state) {
    (void)state;
    const size_t nkv = (size_t)CB * CH * CL * CD;
    float *z = (float *)tu_calloc(nkv, sizeof(float));
    int32_t idxv[CB * CH * CK];
    for (int i = 0; i < CB * CH * CK; i++)
        idxv[i] = i % CK;
    const int64_t idims[3] = {CB, CH, CK}, cdims[2] = {CB, CH}, fdims[1] = {1};
    clkv_compact_kv_args base = CLKV_COMPACT_KV_ARGS_INIT, a;
    base.k_src = tu_kv_tensor(g_ctx, z, CLKV_F32, CB, CH, CL, CD, TU_HND);
    base.k_dst = base.k_src;
    base.v_src = tu_kv_tensor(g_ctx, z, CLKV_F32, CB, CH, CL, CD, TU_NHD);
    base.v_dst = base.v_src;
    base.indices = tu_tensor_upload_i32(g_ctx, idxv, 3, idims, 0, 0);
    base.new_lengths = tu_tensor_alloc(g_ctx, CLKV_I32, 2, cdims, 0, 0);
    base.flags = tu_tensor_alloc(g_ctx, CLKV_I32, 1, fdims, 0, 60);
    cl_event ev = NULL;
    cl_mem out = base.new_lengths.buf;
#define BAD(mut, want, name)                                                                       \
    do {                                                                                           \
        a = base;                                                                                  \
        mut;                                                                                       \
        ev = NULL;                                                                                 \
        expect_reject(clkv_compact_kv(g_ctx, &a, &ev), want, name, out, ev, #mut);                 \
        tu_assert_buffer_poison(g_ctx, base.flags.buf, #mut " (flags)");                           \
    } while (0)
    BAD((a.k_dst.offset += 4 * CD, a.k_dst.dims[2] = a.v_dst.dims[2] = CL - 1),
        CLKV_ERR_ARG_UNSUPPORTED, "k_dst");                          /* shifted by one row */
    BAD(a.v_dst.strides[2] = CD, CLKV_ERR_ARG_UNSUPPORTED, "v_dst"); /* other view of v */
    BAD((a.k_src.dims[2] = a.v_src.dims[2] = CL - 1), CLKV_ERR_ARG_UNSUPPORTED, "k_dst");
    BAD(a.k_dst = base.v_src, CLKV_ERR_ARG_UNSUPPORTED, "k_dst");
    BAD(a.flags.dtype = CLKV_F32, CLKV_ERR_ARG_DTYPE, "flags");
    BAD(a.flags.dims[0] = 2, CLKV_ERR_ARG_SHAPE, "flags");
    BAD(a.flags = clkv_tensor_2d(base.flags.buf, CLKV_I32, 1, 1), CLKV_ERR_ARG_SHAPE, "flags");
    BAD(a.flags.buf = base.indices.buf, CLKV_ERR_ARG_UNSUPPORTED, "flags");
    BAD(a.flags.buf = base.k_src.buf, CLKV_ERR_ARG_UNSUPPORTED, "flags");
    BAD(a.flags.buf = base.new_lengths.buf, CLKV_ERR_ARG_UNSUPPORTED, "flags");
#undef BAD
    tu_set_case("inplace bad inputs baseline");
    TU_CHECK_OK(g_ctx, clkv_compact_kv(g_ctx, &base, NULL));
    clFinish(clkv_context_queue(g_ctx));
    tu_release(base.k_src.buf);
    tu_release(base.v_src.buf);
    tu_release(base.indices.buf);
    tu_release(base.new_lengths.buf);
    tu_release(base.flags.buf);
    free(z);
}

int main(void) {
    tu_suite s = {0};
    tu_suite_add(&s, "select_bad_inputs", test_select_bad_inputs, NULL);
    tu_suite_add(&s, "compact_bad_inputs", test_compact_bad_inputs, NULL);
    tu_suite_add(&s, "select_sizes", test_select_sizes, NULL);
    tu_suite_add(&s, "select_ties", test_select_ties, NULL);
    tu_suite_add(&s, "select_special_values", test_select_special_values, NULL);
    tu_suite_add(&s, "select_batch", test_select_batch, NULL);
    tu_suite_add(&s, "select_large", test_select_large, NULL);
    TU_SUITE_ADD_CASES(&s, g_compact, run_compact);
    tu_suite_add(&s, "select_then_compact", test_select_then_compact, NULL);
    TU_SUITE_ADD_CASES(&s, g_inplace, run_inplace);
    tu_suite_add(&s, "inplace_not_ascending", test_inplace_not_ascending, NULL);
    tu_suite_add(&s, "inplace_bad_inputs", test_inplace_bad_inputs, NULL);
    return tu_suite_run(&s, "select", &g_ctx, DEFAULT_SEED);
}
