/* The quantized KV cache (include/clkv/quant_cache.h) against the plain C reference
 * (tests/ref/ref_quant_cache.c, built on ref_quant): after every append the whole device
 * state (counters, key/value codes and metadata of the quantized part, residual, flags)
 * must equal the reference computed from the token history alone, bit for bit (a code
 * may differ by 1 only where the exact quotient is within 1e-4 of a .5 tie, SPEC §3).
 *
 * Append schedules cover totals 0, n_r - 1, n_r, n_r + 1, several flushes in one call,
 * prefill then decode steps, appends that cross key-group boundaries, per-sequence
 * device counts (incl. 0 and counts above n, which clamp), NHD inputs with byte offsets;
 * every (bits, group) pair appears at least once; input, residual and metadata dtypes
 * vary; out-of-range values raise the flags. Bad inputs for every public function.
 */
#include "util/test_util.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clkv/quant_cache.h"
#include "ref/ref_quant_cache.h"

#define DEFAULT_SEED 0x9CAC4E5EEDull

static clkv_context *g_ctx;

/* ------------------------------------------------------------------------------------ */
/* Device state read-back and comparison                                                */
/* ------------------------------------------------------------------------------------ */

static void read_raw(const clkv_tensor *t, void *out, size_t elem) {
    const size_t n = (size_t)tu_tensor_numel(t);
    if (n)
        tu_buffer_read(g_ctx, t->buf, (size_t)t->offset, out, n * elem);
}

static void read_f(const clkv_tensor *t, float *out) {
    if (tu_tensor_numel(t))
        tu_tensor_read(g_ctx, t, out);
}

/* The device state of `cache` as a ref_qcache (quotients unused). */
static void read_state(clkv_quant_cache *cache, ref_qcache *s, int *flags) {
    clkv_quant_cache_view v;
    TU_CHECK_OK(g_ctx, clkv_quant_cache_view_get(cache, &v));
    const clkv_quant_cache_create_args *c = &v.config;
    if (ref_qcache_alloc(s, c->batch, c->kv_heads, c->head_dim, v.quant_capacity, c->residual,
                         c->k_bits, c->v_bits, c->group))
        TU_FAIL("ref_qcache_alloc");
    read_raw(&v.k_codes, s->k_codes, 4);
    read_f(&v.k_scale, s->k_scale);
    read_f(&v.k_min, s->k_min);
    read_raw(&v.v_codes, s->v_codes, 4);
    read_f(&v.v_scale, s->v_scale);
    read_f(&v.v_min, s->v_min);
    read_f(&v.k_res, s->k_res);
    read_f(&v.v_res, s->v_res);
    read_raw(&v.n_quant, s->n_quant, 4);
    read_raw(&v.n_res, s->n_res, 4);
    read_raw(&v.flags, flags, 4);
}

static int near_tie(double quot) {
    const double f = quot - floor(quot);
    return fabs(f - 0.5) < 1e-4;
}

/* Codes of one kind: `keys` selects the layout. Fails at the first disagreement. */
static void compare_codes(const ref_qcache *r, const ref_qcache *g, int keys, int64_t bh,
                          int64_t nq) {
    const int64_t D = r->D, CQ = r->CQ;
    const int bits = keys ? r->k_bits : r->v_bits, per = 32 / bits;
    const uint32_t *rc = keys ? r->k_codes : r->v_codes, *gc = keys ? g->k_codes : g->v_codes;
    const double *quot = keys ? r->k_quot : r->v_quot;
    for (int64_t t = 0; t < nq; t++)
        for (int64_t d = 0; d < D; d++) {
            size_t wi;
            int sh;
            if (keys) {
                wi = (size_t)((bh * (CQ / per) + t / per) * D + d);
                sh = (int)(t % per) * bits;
            } else {
                wi = (size_t)((bh * CQ + t) * (D / per) + d / per);
                sh = (int)(d % per) * bits;
            }
            const int a = (int)((rc[wi] >> sh) & ((1u << bits) - 1u));
            const int b = (int)((gc[wi] >> sh) & ((1u << bits) - 1u));
            if (a != b && !(abs(a - b) == 1 && near_tie(quot[(size_t)((bh * CQ + t) * D + d)])))
                TU_FAIL("%s code (bh %lld, token %lld, channel %lld): got %d, expected %d",
                        keys ? "key" : "value", (long long)bh, (long long)t, (long long)d, b, a);
        }
}

static void compare_floats(const char *what, const float *r, const float *g, size_t base, size_t n,
                           int64_t bh) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&r[base + i], &g[base + i], 4) != 0)
            TU_FAIL("%s (bh %lld, element %zu): got %.9g, expected %.9g", what, (long long)bh, i,
                    (double)g[base + i], (double)r[base + i]);
}

/* Device state == reference state (valid parts only). */
static void compare_state(const ref_qcache *r, clkv_quant_cache *cache, int want_flags) {
    ref_qcache g;
    int flags = 0;
    read_state(cache, &g, &flags);
    const int64_t D = r->D, CQ = r->CQ, NR = r->NR, G = r->group;
    for (int64_t b = 0; b < r->B; b++) {
        if (g.n_quant[b] != r->n_quant[b] || g.n_res[b] != r->n_res[b])
            TU_FAIL("sequence %lld: counters (%d, %d), expected (%d, %d)", (long long)b,
                    g.n_quant[b], g.n_res[b], r->n_quant[b], r->n_res[b]);
        const int64_t nq = r->n_quant[b], nres = r->n_res[b];
        for (int64_t h = 0; h < r->H; h++) {
            const int64_t bh = b * r->H + h;
            compare_codes(r, &g, 1, bh, nq);
            compare_codes(r, &g, 0, bh, nq);
            compare_floats("k_scale", r->k_scale, g.k_scale, (size_t)(bh * (CQ / G) * D),
                           (size_t)(nq / G * D), bh);
            compare_floats("k_min", r->k_min, g.k_min, (size_t)(bh * (CQ / G) * D),
                           (size_t)(nq / G * D), bh);
            compare_floats("v_scale", r->v_scale, g.v_scale, (size_t)(bh * CQ * (D / G)),
                           (size_t)(nq * (D / G)), bh);
            compare_floats("v_min", r->v_min, g.v_min, (size_t)(bh * CQ * (D / G)),
                           (size_t)(nq * (D / G)), bh);
            compare_floats("k_res", r->k_res, g.k_res, (size_t)(bh * NR * D), (size_t)(nres * D),
                           bh);
            compare_floats("v_res", r->v_res, g.v_res, (size_t)(bh * NR * D), (size_t)(nres * D),
                           bh);
        }
    }
    if (flags != want_flags)
        TU_FAIL("flags %d, expected %d", flags, want_flags);
    ref_qcache_free(&g);
}

/* ------------------------------------------------------------------------------------ */
/* A cache under test with its token history                                            */
/* ------------------------------------------------------------------------------------ */

typedef struct qc {
    clkv_quant_cache_create_args cfg;
    clkv_quant_cache *cache;
    float *k_hist, *v_hist; /* [B,H,cap,D] as the residual stores them */
    int64_t *T;
    tu_rng rng;
    double k_mean, v_mean;
} qc;

static void qc_create(qc *q, const clkv_quant_cache_create_args *cfg, uint64_t stream) {
    memset(q, 0, sizeof *q);
    q->cfg = *cfg;
    TU_CHECK_OK(g_ctx, clkv_quant_cache_create(g_ctx, cfg, &q->cache));
    const size_t n = (size_t)(cfg->batch * cfg->kv_heads * cfg->capacity * cfg->head_dim);
    q->k_hist = tu_calloc(n, 4);
    q->v_hist = tu_calloc(n, 4);
    q->T = tu_calloc((size_t)cfg->batch, sizeof(int64_t));
    tu_rng_seed(&q->rng, tu_seed(DEFAULT_SEED), stream);
    q->k_mean = 0.5, q->v_mean = -0.25;
}

static void qc_destroy(qc *q) {
    clkv_quant_cache_destroy(q->cache);
    free(q->k_hist), free(q->v_hist), free(q->T);
}

/* Append n tokens (per-sequence counts when `counts` is not NULL; entries may be < 0 or
 * > n, they clamp) from k, v in `dt` and `layout`, then update the history. `x_k`/`x_v`
 * may give the data (logical [B,H,n,D]); NULL: random. */
static void qc_append_kv(qc *q, int64_t n, const int32_t *counts, clkv_dtype dt, clkv_dtype vdt,
                         tu_layout layout, const float *x_k, const float *x_v) {
    const clkv_quant_cache_create_args *c = &q->cfg;
    const int64_t B = c->batch, H = c->kv_heads, D = c->head_dim, cap = c->capacity;
    const size_t nx = (size_t)(B * H * n * D);
    float *k = tu_malloc(nx * 4 + 4), *v = tu_malloc(nx * 4 + 4);
    if (x_k) {
        memcpy(k, x_k, nx * 4);
        memcpy(v, x_v, nx * 4);
    } else {
        /* channel-dependent offsets, as real keys have outlier channels */
        for (size_t i = 0; i < nx; i++) {
            const double ch = (double)(i % (size_t)D);
            k[i] = (float)(q->k_mean + 0.02 * ch + tu_rng_normal(&q->rng));
            v[i] = (float)(q->v_mean + tu_rng_normal(&q->rng));
        }
    }
    tu_round_array(dt, k, nx);
    tu_round_array(vdt, v, nx);
    clkv_quant_cache_append_args a = CLKV_QUANT_CACHE_APPEND_ARGS_INIT;
    const uint64_t off = layout == TU_NHD ? 64 : 0;
    cl_mem cbuf = NULL;
    if (n > 0) {
        a.k = tu_kv_tensor_offset(g_ctx, k, dt, B, H, n, D, layout, off);
        a.v = tu_kv_tensor_offset(g_ctx, v, vdt, B, H, n, D, layout, off);
    } else { /* n = 0: a valid empty descriptor on a dummy buffer */
        cl_mem dummy = tu_buffer_create(g_ctx, 16);
        a.k = clkv_tensor_4d(dummy, dt, B, H, 0, D);
        a.v = a.k;
        a.v.dtype = vdt;
        clRetainMemObject(dummy);
    }
    if (counts) {
        const int64_t dims[1] = {B};
        a.counts = tu_tensor_upload_i32(g_ctx, counts, 1, dims, 8, 8);
        cbuf = a.counts.buf;
    }
    cl_event ev = NULL;
    TU_CHECK_OK(g_ctx, clkv_quant_cache_append(q->cache, &a, &ev));
    if (!ev)
        TU_FAIL("append returned no event");
    TU_CHECK_CL(clWaitForEvents(1, &ev));
    clReleaseEvent(ev);
    tu_release(a.k.buf);
    tu_release(a.v.buf);
    tu_release(cbuf);
    const clkv_dtype rdt = c->res_dtype;
    for (int64_t b = 0; b < B; b++) {
        int64_t cnt = counts ? counts[b] : n;
        cnt = cnt < 0 ? 0 : (cnt > n ? n : cnt);
        if (q->T[b] + cnt > cap)
            TU_FAIL("test bug: history overflows capacity");
        for (int64_t h = 0; h < H; h++)
            for (int64_t j = 0; j < cnt; j++)
                for (int64_t d = 0; d < D; d++) {
                    const size_t src = (size_t)(((b * H + h) * n + j) * D + d);
                    const size_t dst = (size_t)(((b * H + h) * cap + q->T[b] + j) * D + d);
                    q->k_hist[dst] = tu_round_dtype(rdt, k[src]);
                    q->v_hist[dst] = tu_round_dtype(rdt, v[src]);
                }
        q->T[b] += cnt;
    }
    free(k);
    free(v);
}

static void qc_append(qc *q, int64_t n, const int32_t *counts, clkv_dtype dt, tu_layout layout,
                      const float *x_k, const float *x_v) {
    qc_append_kv(q, n, counts, dt, dt, layout, x_k, x_v);
}

static void qc_check(qc *q, int want_flags) {
    const clkv_quant_cache_create_args *c = &q->cfg;
    clkv_quant_cache_view v;
    TU_CHECK_OK(g_ctx, clkv_quant_cache_view_get(q->cache, &v));
    ref_qcache r;
    if (ref_qcache_alloc(&r, c->batch, c->kv_heads, c->head_dim, v.quant_capacity, c->residual,
                         c->k_bits, c->v_bits, c->group))
        TU_FAIL("ref_qcache_alloc");
    ref_qcache_build(&r, q->k_hist, q->v_hist, c->capacity, q->T, c->meta_dtype == CLKV_F16);
    if (r.flags != want_flags)
        TU_FAIL("reference flags %d, expected %d (test data)", r.flags, want_flags);
    compare_state(&r, q->cache, want_flags);
    ref_qcache_free(&r);
}

static clkv_quant_cache_create_args base_cfg(int64_t B, int64_t H, int64_t D, int64_t cap, int kb,
                                             int vb, int group, int nr) {
    clkv_quant_cache_create_args a = CLKV_QUANT_CACHE_CREATE_ARGS_INIT;
    a.batch = B, a.kv_heads = H, a.head_dim = D, a.capacity = cap;
    a.k_bits = kb, a.v_bits = vb, a.group = group, a.residual = nr;
    return a;
}

/* ------------------------------------------------------------------------------------ */
/* Cases                                                                                */
/* ------------------------------------------------------------------------------------ */

/* Totals 0, n_r - 1, n_r, n_r + 1, then one call flushing several blocks, then decode. */
static void test_boundaries(void **state) {
    (void)state;
    const clkv_quant_cache_create_args cfg = base_cfg(2, 2, 64, 300, 2, 2, 16, 32);
    qc q;
    qc_create(&q, &cfg, 1);
    const int64_t steps[] = {0, 31, 1, 1, 70, 1, 1, 13, 1, 16, 17};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        tu_set_case("boundaries: step %zu appends %lld (total %lld)", i, (long long)steps[i],
                    (long long)(q.T[0] + steps[i]));
        qc_append(&q, steps[i], NULL, CLKV_F32, TU_HND, NULL, NULL);
        qc_check(&q, 0);
    }
    /* prefill of exactly n_r from empty after a reset */
    TU_CHECK_OK(g_ctx, clkv_quant_cache_reset(q.cache, NULL));
    memset(q.T, 0, 2 * sizeof(int64_t));
    tu_set_case("boundaries: reset then n_r");
    qc_append(&q, 32, NULL, CLKV_BF16, TU_NHD, NULL, NULL);
    qc_check(&q, 0);
    tu_set_case("boundaries: then n_r + 1 at once");
    qc_append(&q, 33, NULL, CLKV_F16, TU_HND, NULL, NULL);
    qc_check(&q, 0);
    qc_destroy(&q);
}

/* Per-sequence device counts: a batch of prompts of different lengths (incl. 0 and a
 * count above n that clamps), then decode steps where some sequences are idle. */
static void test_mixed_counts(void **state) {
    (void)state;
    const clkv_quant_cache_create_args cfg = base_cfg(4, 2, 128, 400, 4, 2, 32, 64);
    qc q;
    qc_create(&q, &cfg, 2);
    const int32_t c0[4] = {5, 0, 150, 64};
    tu_set_case("mixed counts: prefill {5, 0, 150, 64} of n = 150");
    qc_append(&q, 150, c0, CLKV_BF16, TU_NHD, NULL, NULL);
    qc_check(&q, 0);
    const int32_t c1[4] = {1, 1, 0, 1};
    for (int i = 0; i < 3; i++) {
        tu_set_case("mixed counts: decode {1, 1, 0, 1} step %d", i);
        qc_append_kv(&q, 1, c1, CLKV_BF16, i == 1 ? CLKV_F32 : CLKV_BF16, TU_HND, NULL, NULL);
        qc_check(&q, 0);
    }
    const int32_t c2[4] = {-3, 1000, 59, 20};
    tu_set_case("mixed counts: {-3, 1000, 59, 20} of n = 60 (clamped), k f32 / v f16");
    qc_append_kv(&q, 60, c2, CLKV_F32, CLKV_F16, TU_HND, NULL, NULL);
    qc_check(&q, 0);
    clkv_quant_cache_view v;
    TU_CHECK_OK(g_ctx, clkv_quant_cache_view_get(q.cache, &v));
    if (v.max_length != 150 + 3 + 60)
        TU_FAIL("host bound %lld, expected %d", (long long)v.max_length, 150 + 3 + 60);
    qc_destroy(&q);
}

/* A decode run: one token per call (the one-launch append) across two block flushes,
 * some sequences idle on some steps (so the batch's blocks complete at different steps),
 * every dtype of the appended tokens. */
static void test_decode_run(void **state) {
    (void)state;
    const clkv_quant_cache_create_args cfg = base_cfg(3, 2, 64, 200, 2, 4, 16, 32);
    qc q;
    qc_create(&q, &cfg, 3);
    const int32_t c0[3] = {30, 31, 5};
    tu_set_case("decode run: prefill {30, 31, 5}");
    qc_append(&q, 31, c0, CLKV_F16, TU_HND, NULL, NULL);
    qc_check(&q, 0);
    static const clkv_dtype dts[3] = {CLKV_F32, CLKV_F16, CLKV_BF16};
    for (int i = 0; i < 75; i++) {
        const int32_t c[3] = {1, i % 3 != 1, i % 5 == 0 ? 0 : 1};
        tu_set_case("decode run: step %d counts {%d, %d, %d}", i, c[0], c[1], c[2]);
        if (i % 4 == 3)
            qc_append(&q, 1, NULL, dts[i % 3], i % 2 ? TU_NHD : TU_HND, NULL, NULL);
        else
            qc_append_kv(&q, 1, c, dts[i % 3], dts[(i + 1) % 3], TU_HND, NULL, NULL);
        qc_check(&q, 0);
    }
    qc_destroy(&q);
}

/* Every (bits, group) pair; keys and values with different widths; metadata and residual
 * dtypes vary; capacity not a multiple of n_r. */
static void test_bits_groups(void **state) {
    (void)state;
    static const int bits[3] = {2, 4, 8}, groups[4] = {16, 32, 64, 128};
    static const clkv_dtype res[3] = {CLKV_F16, CLKV_BF16, CLKV_F32};
    int i = 0;
    for (int bi = 0; bi < 3; bi++)
        for (int gi = 0; gi < 4; gi++, i++) {
            const int g = groups[gi], nr = g * (gi < 2 ? 2 : 1);
            clkv_quant_cache_create_args cfg =
                base_cfg(1, 2, 128, 3 * nr + 40, bits[bi], bits[(bi + 1) % 3], g, nr);
            cfg.res_dtype = res[i % 3];
            cfg.meta_dtype = i % 2 ? CLKV_F32 : CLKV_F16;
            qc q;
            qc_create(&q, &cfg, 100 + (uint64_t)i);
            tu_set_case("bits %d/%d group %d n_r %d res %s meta %s: prefill", cfg.k_bits,
                        cfg.v_bits, g, nr, clkv_dtype_name(cfg.res_dtype),
                        clkv_dtype_name(cfg.meta_dtype));
            qc_append(&q, 2 * nr + g / 2 + 3, NULL, CLKV_F32, TU_HND, NULL, NULL);
            qc_check(&q, 0);
            tu_set_case("bits %d/%d group %d: decode to the next flush", cfg.k_bits, cfg.v_bits, g);
            qc_append(&q, nr - g / 2 - 3, NULL, CLKV_F32, TU_HND, NULL, NULL);
            qc_check(&q, 0);
            qc_append(&q, 1, NULL, CLKV_F32, TU_HND, NULL, NULL);
            qc_check(&q, 0);
            qc_destroy(&q);
        }
}

/* Constant groups (s = 0) and out-of-range values: f16 metadata with |x| > 65504 (f32
 * residual keeps it) flags F16_RANGE; a NaN flags NONFINITE; flagged groups are zeros. */
static void test_flags(void **state) {
    (void)state;
    clkv_quant_cache_create_args cfg = base_cfg(1, 1, 64, 64, 2, 4, 16, 16);
    cfg.res_dtype = CLKV_F32;
    qc q;
    qc_create(&q, &cfg, 7);
    const size_t n = 16 * 64;
    float *k = tu_malloc(n * 4), *v = tu_malloc(n * 4);
    for (size_t i = 0; i < n; i++) {
        k[i] = 3.0f;                          /* constant key groups */
        v[i] = (float)(i % 64) * 0.25f - 4.f; /* ordinary values */
    }
    tu_set_case("flags: constant key groups");
    qc_append(&q, 16, NULL, CLKV_F32, TU_HND, k, v);
    qc_check(&q, 0);
    k[5 * 64 + 3] = 70000.0f;
    tu_set_case("flags: |x| > 65504 with f16 metadata");
    qc_append(&q, 16, NULL, CLKV_F32, TU_HND, k, v);
    qc_check(&q, 1);
    v[2 * 64 + 9] = NAN;
    k[5 * 64 + 3] = 1.0f;
    tu_set_case("flags: NaN value");
    qc_append(&q, 16, NULL, CLKV_F32, TU_HND, k, v);
    qc_check(&q, 3);
    TU_CHECK_OK(g_ctx, clkv_quant_cache_reset(q.cache, NULL));
    memset(q.T, 0, sizeof(int64_t));
    tu_set_case("flags: reset clears the flags");
    qc_append(&q, 3, NULL, CLKV_F32, TU_HND, NULL, NULL);
    qc_check(&q, 0);
    free(k);
    free(v);
    qc_destroy(&q);
}

/* ------------------------------------------------------------------------------------ */
/* Bad inputs                                                                           */
/* ------------------------------------------------------------------------------------ */

#define EXPECT_STATUS(ctx, expr, want, name)                                                       \
    do {                                                                                           \
        const clkv_status st_ = (expr);                                                            \
        if (st_ != (want))                                                                         \
            TU_FAIL("%s returned %s, expected %s (\"%s\")", #expr, clkv_status_string(st_),        \
                    clkv_status_string(want), clkv_last_error(ctx));                               \
        if (!tu_msg_names(clkv_last_error(ctx), (name)))                                           \
            TU_FAIL("%s: message \"%s\" does not name %s", #expr, clkv_last_error(ctx), (name));   \
    } while (0)

static void test_validation_create(void **state) {
    (void)state;
    tu_set_case("create validation");
    const clkv_quant_cache_create_args ok = base_cfg(2, 2, 64, 100, 2, 2, 16, 32);
    clkv_quant_cache_create_args a;
    clkv_quant_cache *c = (clkv_quant_cache *)(uintptr_t)0x1; /* must stay unchanged */
    EXPECT_STATUS(NULL, clkv_quant_cache_create(NULL, &ok, &c), CLKV_ERR_ARG_NULL, "ctx");
    EXPECT_STATUS(g_ctx, clkv_quant_cache_create(g_ctx, NULL, &c), CLKV_ERR_ARG_NULL, "args");
    EXPECT_STATUS(g_ctx, clkv_quant_cache_create(g_ctx, &ok, NULL), CLKV_ERR_ARG_NULL, "out");
#define BAD(field, value, want, name)                                                              \
    do {                                                                                           \
        a = ok;                                                                                    \
        a.field = value;                                                                           \
        EXPECT_STATUS(g_ctx, clkv_quant_cache_create(g_ctx, &a, &c), want, name);                  \
    } while (0)
    BAD(batch, 0, CLKV_ERR_ARG_RANGE, "batch");
    BAD(kv_heads, -1, CLKV_ERR_ARG_RANGE, "kv_heads");
    BAD(head_dim, 96, CLKV_ERR_ARG_UNSUPPORTED, "head_dim");
    BAD(k_bits, 3, CLKV_ERR_ARG_UNSUPPORTED, "k_bits");
    BAD(v_bits, 16, CLKV_ERR_ARG_UNSUPPORTED, "v_bits");
    BAD(group, 8, CLKV_ERR_ARG_UNSUPPORTED, "group");
    BAD(group, 128, CLKV_ERR_ARG_UNSUPPORTED, "group"); /* does not divide D = 64 */
    BAD(residual, 40, CLKV_ERR_ARG_RANGE, "residual");
    BAD(residual, 0, CLKV_ERR_ARG_RANGE, "residual");
    BAD(capacity, 0, CLKV_ERR_ARG_RANGE, "capacity");
    BAD(res_dtype, CLKV_I32, CLKV_ERR_ARG_DTYPE, "res_dtype");
    BAD(meta_dtype, CLKV_BF16, CLKV_ERR_ARG_DTYPE, "meta_dtype");
    a = ok, a.batch = 65535, a.kv_heads = 65535, a.capacity = INT32_MAX - 70000;
    a.head_dim = 256, a.k_bits = 8;
    EXPECT_STATUS(g_ctx, clkv_quant_cache_create(g_ctx, &a, &c), CLKV_ERR_ARG_OVERFLOW, "capacity");
    a = ok, a.batch = 64, a.kv_heads = 64, a.capacity = 1 << 24, a.head_dim = 256, a.k_bits = 8;
    EXPECT_STATUS(g_ctx, clkv_quant_cache_create(g_ctx, &a, &c), CLKV_ERR_DEVICE_LIMIT, "capacity");
#undef BAD
    if (c != (clkv_quant_cache *)(uintptr_t)0x1)
        TU_FAIL("a failed create changed *out");
    clkv_quant_cache_destroy(NULL);
    EXPECT_STATUS(NULL, clkv_quant_cache_reset(NULL, NULL), CLKV_ERR_ARG_NULL, "cache");
    clkv_quant_cache_view v;
    EXPECT_STATUS(NULL, clkv_quant_cache_view_get(NULL, &v), CLKV_ERR_ARG_NULL, "cache");
    TU_CHECK_OK(g_ctx, clkv_quant_cache_create(g_ctx, &ok, &c));
    EXPECT_STATUS(g_ctx, clkv_quant_cache_view_get(c, NULL), CLKV_ERR_ARG_NULL, "out");
    clkv_quant_cache_destroy(c);
}

/* A rejected append changes nothing: the cache state (and the host bound) stay. */
static void test_validation_append(void **state) {
    (void)state;
    const clkv_quant_cache_create_args cfg = base_cfg(2, 2, 64, 100, 4, 2, 16, 32);
    qc q;
    qc_create(&q, &cfg, 9);
    tu_set_case("append validation: setup");
    qc_append(&q, 40, NULL, CLKV_F16, TU_HND, NULL, NULL);
    const int64_t n = 8;
    cl_mem kb = tu_buffer_create(g_ctx, (size_t)(2 * 2 * n * 64) * 4);
    cl_mem cb = tu_buffer_create(g_ctx, 64);
    clkv_quant_cache_append_args ok = CLKV_QUANT_CACHE_APPEND_ARGS_INIT, a;
    ok.k = clkv_tensor_4d(kb, CLKV_F32, 2, 2, n, 64);
    ok.v = ok.k;
    ok.counts = clkv_tensor_1d(cb, CLKV_I32, 2);
    tu_set_case("append validation");
    EXPECT_STATUS(NULL, clkv_quant_cache_append(NULL, &ok, NULL), CLKV_ERR_ARG_NULL, "cache");
    EXPECT_STATUS(g_ctx, clkv_quant_cache_append(q.cache, NULL, NULL), CLKV_ERR_ARG_NULL, "args");
#define BADA(stmt, want, name)                                                                     \
    do {                                                                                           \
        a = ok;                                                                                    \
        stmt;                                                                                      \
        cl_event ev_ = NULL;                                                                       \
        EXPECT_STATUS(g_ctx, clkv_quant_cache_append(q.cache, &a, &ev_), want, name);              \
        if (ev_)                                                                                   \
            TU_FAIL("a rejected append returned an event");                                        \
    } while (0)
    BADA(a.k.buf = NULL, CLKV_ERR_ARG_NULL, "k");
    BADA(a.v.buf = NULL, CLKV_ERR_ARG_NULL, "v");
    BADA(a.k.dtype = CLKV_U32, CLKV_ERR_ARG_DTYPE, "k");
    BADA(a.v.dtype = CLKV_I32, CLKV_ERR_ARG_DTYPE, "v");
    BADA(a.counts.dtype = CLKV_F32, CLKV_ERR_ARG_DTYPE, "counts");
    BADA(a.counts.dims[0] = 3, CLKV_ERR_ARG_SHAPE, "counts");
    BADA(a.k.dims[0] = 1, CLKV_ERR_ARG_SHAPE, "k");
    BADA(a.k.dims[1] = 1, CLKV_ERR_ARG_SHAPE, "k");
    BADA((a.k.dims[3] = 32, a.k.strides[2] = 32), CLKV_ERR_ARG_SHAPE, "k");
    BADA((a.v.dims[2] = 4, a.v.strides[1] = 4 * 64), CLKV_ERR_ARG_SHAPE, "v");
    BADA(a.k.ndim = 3, CLKV_ERR_ARG_SHAPE, "k");
    BADA(a.v.strides[3] = 2, CLKV_ERR_ARG_STRIDE, "v");
    BADA(a.k.offset = 2, CLKV_ERR_ARG_ALIGNMENT, "k");
    BADA(a.k.offset = 4096 * 16, CLKV_ERR_ARG_BUFFER_SIZE, "k");
    BADA(a.v.strides[0] = INT64_MAX / 2, CLKV_ERR_ARG_OVERFLOW, "v");
    /* capacity: 40 + 61 > 100 (the bound counts n, whatever the device counts are) */
    cl_mem big = tu_buffer_create(g_ctx, (size_t)(2 * 2 * 61 * 64) * 4);
    BADA((a.k = clkv_tensor_4d(big, CLKV_F32, 2, 2, 61, 64), a.v = a.k), CLKV_ERR_ARG_RANGE,
         "capacity");
#undef BADA
    tu_set_case("append validation: state unchanged");
    qc_check(&q, 0);
    /* exactly up to the capacity is fine */
    tu_set_case("append validation: fill to capacity");
    qc_append(&q, 60, NULL, CLKV_F32, TU_HND, NULL, NULL);
    qc_check(&q, 0);
    tu_release(big);
    tu_release(kb);
    tu_release(cb);
    qc_destroy(&q);
}

static int group_setup(void **state) {
    (void)state;
    return tu_group_setup((void **)&g_ctx);
}

static int group_teardown(void **state) {
    (void)state;
    return tu_group_teardown((void **)&g_ctx);
}

int main(void) {
    printf("[ seed     ] 0x%016" PRIx64 " (set CLKV_TEST_SEED to change)\n", tu_seed(DEFAULT_SEED));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_validation_create),
        cmocka_unit_test(test_validation_append),
        cmocka_unit_test(test_boundaries),
        cmocka_unit_test(test_mixed_counts),
        cmocka_unit_test(test_decode_run),
        cmocka_unit_test(test_bits_groups),
        cmocka_unit_test(test_flags),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
