/* KIVI-style quantization on the device (SPEC §3) against the plain C reference
 * (tests/ref/ref_quant.c), and argument validation of every function of clkv/quant.h.
 *
 * Every quantization case checks: codes and packing bit-exact (a difference of 1 only
 * where the exact quotient is within 1e-4 of a .5 tie, SPEC §3), scale and min exactly
 * equal, the device flags word equal to the reference's, every output element written
 * and nothing outside it (poisoned buffers with guards), the device dequantization equal
 * to the reference dequantization of the device codes after output rounding, and the
 * reconstruction error within s/2 + the metadata rounding of (s, m).
 *
 * Program variants: quant.cl is built once per (float dtype, metadata dtype): 6 builds.
 */
#include "util/test_util.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clkv/quant.h"
#include "ref/ref_quant.h"

#define DEFAULT_SEED 0x51A7C0DEu

static clkv_context *g_ctx;
static const clkv_dtype k_float_dtypes[3] = {CLKV_F32, CLKV_F16, CLKV_BF16};
static const int k_bits[3] = {2, 4, 8};
static const int k_groups[4] = {16, 32, 64, 128};

/* ------------------------------------------------------------------------------------ */
/* One quantize + dequantize case                                                       */
/* ------------------------------------------------------------------------------------ */

typedef struct qcase {
    int keys; /* 1 keys (per channel), 0 values (per token) */
    clkv_dtype in_dtype, meta_dtype, out_dtype;
    tu_layout layout;
    int64_t B, H, N, D;
    int bits, group;
} qcase;

typedef struct qout { /* device results, host copies (caller frees) */
    uint32_t *codes;
    float *scale, *min;
    int flags;
} qout;

static void read_u32(const clkv_tensor *t, uint32_t *out) {
    tu_buffer_read(g_ctx, t->buf, (size_t)t->offset, out,
                   (size_t)tu_tensor_numel(t) * sizeof(uint32_t));
}

/* Quantize `x` (logical [B,H,N,D], already representable in in_dtype) on the device and
 * check everything against the reference. Returns the device results in *res if not NULL. */
static void check_case(const qcase *c, const float *x, int expect_flags, qout *res) {
    const int64_t B = c->B, H = c->H, N = c->N, D = c->D;
    const int per = 32 / c->bits, meta_f16 = c->meta_dtype == CLKV_F16;
    const size_t nx = (size_t)(B * H * N * D);
    int64_t cd[4] = {B, H, N, D}, md[4] = {B, H, N, D};
    if (c->keys) {
        cd[2] = N / per;
        md[2] = N / c->group;
    } else {
        cd[3] = D / per;
        md[3] = D / c->group;
    }
    const size_t ncode = (size_t)(cd[0] * cd[1] * cd[2] * cd[3]);
    const size_t nmeta = (size_t)(md[0] * md[1] * md[2] * md[3]);

    uint32_t *rc = tu_malloc(ncode * 4), *gc = tu_malloc(ncode * 4);
    float *rs = tu_malloc(nmeta * 4), *rm = tu_malloc(nmeta * 4);
    float *gs = tu_malloc(nmeta * 4), *gm = tu_malloc(nmeta * 4);
    double *quot = tu_malloc(nx * sizeof(double));
    float *xhat = tu_malloc(nx * 4), *gout = tu_malloc(nx * 4);
    const int rflags =
        c->keys ? ref_quant_keys(x, B, H, N, D, c->bits, c->group, meta_f16, rc, rs, rm, quot)
                : ref_quant_values(x, B, H, N, D, c->bits, c->group, meta_f16, rc, rs, rm, quot);
    if (rflags != expect_flags)
        TU_FAIL("reference flags %d, the test expected %d", rflags, expect_flags);

    clkv_tensor tx = tu_kv_tensor_offset(g_ctx, x, c->in_dtype, B, H, N, D, c->layout,
                                         2 * tu_dtype_size(c->in_dtype));
    clkv_tensor tc = tu_tensor_alloc(g_ctx, CLKV_U32, 4, cd, 16, 64);
    clkv_tensor ts = tu_tensor_alloc(g_ctx, c->meta_dtype, 4, md, 8, 32);
    clkv_tensor tm = tu_tensor_alloc(g_ctx, c->meta_dtype, 4, md, 4, 32);
    const int32_t zero = 0;
    const int64_t fd[1] = {1};
    clkv_tensor tf = tu_tensor_upload_i32(g_ctx, &zero, 1, fd, 4, 8);

    clkv_quant_args qa = CLKV_QUANT_ARGS_INIT;
    qa.input = tx;
    qa.codes = tc;
    qa.scale = ts;
    qa.min = tm;
    qa.flags = tf;
    qa.bits = c->bits;
    qa.group = c->group;
    cl_event ev = NULL;
    TU_CHECK_OK(g_ctx,
                c->keys ? clkv_quant_keys(g_ctx, &qa, &ev) : clkv_quant_values(g_ctx, &qa, &ev));
    if (ev == NULL)
        TU_FAIL("no event returned");
    TU_CHECK_CL(clWaitForEvents(1, &ev));
    clReleaseEvent(ev);
    tu_assert_written_exactly(g_ctx, &tc, "codes");
    tu_assert_written_exactly(g_ctx, &ts, "scale");
    tu_assert_written_exactly(g_ctx, &tm, "min");
    int32_t gflags = -1;
    tu_buffer_read(g_ctx, tf.buf, 4, &gflags, 4);
    if (gflags != rflags)
        TU_FAIL("flags: device %d, reference %d", (int)gflags, rflags);
    read_u32(&tc, gc);
    tu_tensor_read(g_ctx, &ts, gs);
    tu_tensor_read(g_ctx, &tm, gm);

    for (size_t i = 0; i < nmeta; i++) {
        if (!(gs[i] == rs[i]) || !(gm[i] == rm[i]))
            TU_FAIL("meta %zu: device (s %.9g, m %.9g), reference (s %.9g, m %.9g)", i,
                    (double)gs[i], (double)gm[i], (double)rs[i], (double)rm[i]);
    }
    /* codes: unpack both, compare element by element in logical [B,H,N,D] order */
    size_t near_tie = 0;
    for (int64_t bh = 0; bh < B * H; bh++) {
        for (int64_t n = 0; n < N; n++) {
            for (int64_t d = 0; d < D; d++) {
                size_t wi;
                int sh;
                if (c->keys) {
                    wi = (size_t)((bh * (N / per) + n / per) * D + d);
                    sh = (int)(n % per);
                } else {
                    wi = (size_t)((bh * N + n) * (D / per) + d / per);
                    sh = (int)(d % per);
                }
                const unsigned g = ref_code(gc[wi], c->bits, sh), r = ref_code(rc[wi], c->bits, sh);
                if (g == r)
                    continue;
                const size_t xi = (size_t)((bh * N + n) * D + d);
                const double qt = quot[xi], frac = qt - floor(qt);
                if ((g + 1 == r || r + 1 == g) && fabs(frac - 0.5) < 1e-4) {
                    near_tie++;
                    continue;
                }
                TU_FAIL("code (bh %" PRId64 ", n %" PRId64 ", d %" PRId64
                        "): device %u, reference %u (x %.9g, quotient %.9g)",
                        bh, n, d, g, r, (double)x[xi], qt);
            }
        }
    }
    if (near_tie > 0)
        print_message("    %zu codes differ by 1 at a .5 tie (allowed)\n", near_tie);

    /* dequantize the device codes on the device */
    const int64_t od[4] = {B, H, N, D};
    clkv_tensor to =
        tu_tensor_alloc(g_ctx, c->out_dtype, 4, od, 2 * tu_dtype_size(c->out_dtype), 32);
    clkv_dequant_args da = CLKV_DEQUANT_ARGS_INIT;
    da.codes = tc;
    da.scale = ts;
    da.min = tm;
    da.out = to;
    da.bits = c->bits;
    da.group = c->group;
    TU_CHECK_OK(g_ctx, c->keys ? clkv_dequant_keys(g_ctx, &da, NULL)
                               : clkv_dequant_values(g_ctx, &da, NULL));
    TU_CHECK_OK(g_ctx, clkv_context_finish(g_ctx));
    tu_assert_written_exactly(g_ctx, &to, "dequantized out");
    tu_tensor_read(g_ctx, &to, gout);
    if (c->keys)
        ref_dequant_keys(gc, gs, gm, B, H, N, D, c->bits, c->group, xhat);
    else
        ref_dequant_values(gc, gs, gm, B, H, N, D, c->bits, c->group, xhat);
    const double qmax = (double)((1 << c->bits) - 1);
    for (size_t i = 0; i < nx; i++) {
        const float want = tu_round_dtype(c->out_dtype, xhat[i]);
        if (!isfinite(gout[i]) || !(gout[i] == want))
            TU_FAIL("dequantized %zu: device %.9g, reference %.9g", i, (double)gout[i],
                    (double)want);
        /* reconstruction bound (flagged groups are zeros by definition) */
        const int64_t n = (int64_t)(i / (size_t)D) % N, d = (int64_t)(i % (size_t)D);
        const int64_t bh = (int64_t)(i / (size_t)(N * D));
        const size_t mi = c->keys ? (size_t)((bh * (N / c->group) + n / c->group) * D + d)
                                  : (size_t)((bh * N + n) * (D / c->group) + d / c->group);
        if (rflags != 0 && gs[mi] == 0.0f && gm[mi] == 0.0f)
            continue;
        /* the group's exact mn and scale, recomputed from x */
        double mn = INFINITY, mx = -INFINITY;
        for (int t = 0; t < c->group; t++) {
            const size_t xi = c->keys ? (size_t)((bh * N + (n / c->group) * c->group + t) * D + d)
                                      : (size_t)((bh * N + n) * D + (d / c->group) * c->group + t);
            mn = fmin(mn, (double)x[xi]);
            mx = fmax(mx, (double)x[xi]);
        }
        const double scale = (mx - mn) / qmax;
        const double bound = gs[mi] / 2.0 + fabs((double)gm[mi] - mn) +
                             qmax * fabs((double)gs[mi] - scale) +
                             4.0 * FLT_EPSILON * (fabs((double)x[i]) + fabs(mn) + fabs(mx));
        if (fabs((double)xhat[i] - (double)x[i]) > bound)
            TU_FAIL("reconstruction %zu: x %.9g, x^ %.9g, error %.3g > bound %.3g (s %.9g m %.9g)",
                    i, (double)x[i], (double)xhat[i], fabs((double)xhat[i] - (double)x[i]), bound,
                    (double)gs[mi], (double)gm[mi]);
    }

    if (res) {
        res->codes = gc;
        res->scale = gs;
        res->min = gm;
        res->flags = gflags;
        gc = NULL;
        gs = gm = NULL;
    }
    tu_release(tx.buf);
    tu_release(tc.buf);
    tu_release(ts.buf);
    tu_release(tm.buf);
    tu_release(tf.buf);
    tu_release(to.buf);
    free(rc);
    free(gc);
    free(rs);
    free(rm);
    free(gs);
    free(gm);
    free(quot);
    free(xhat);
    free(gout);
}

static void qout_free(qout *o) {
    free(o->codes);
    free(o->scale);
    free(o->min);
}

/* KIVI-like data: per-channel offsets and scales (outlier channels), normal noise. */
static void gen_kv(tu_rng *r, float *x, int64_t rows, int64_t D, clkv_dtype dt) {
    for (int64_t d = 0; d < D; d++) {
        const double off = tu_rng_range(r, -4, 4),
                     sd = (d % 17 == 3) ? 20.0 : tu_rng_range(r, 0.1, 2);
        for (int64_t i = 0; i < rows; i++)
            x[i * D + d] = (float)(off + sd * tu_rng_normal(r));
    }
    tu_round_array(dt, x, (size_t)(rows * D));
}

/* ------------------------------------------------------------------------------------ */
/* Matrix: every (bits, group), both layouts, for one (kind, input dtype, meta dtype)    */
/* ------------------------------------------------------------------------------------ */

typedef struct mcase {
    const char *name;
    int keys;
    clkv_dtype in_dtype, meta_dtype;
} mcase;

static mcase g_mcases[12];
static char g_mnames[12][64];

static void test_matrix(void **state) {
    const mcase *m = (const mcase *)*state;
    const int64_t B = 2, H = 2, N = 128, D = 128;
    const size_t nx = (size_t)(B * H * N * D);
    float *x = tu_malloc(nx * 4);
    tu_rng rng;
    tu_rng_seed(&rng, tu_seed(DEFAULT_SEED), (uint64_t)(m - g_mcases) + 1);
    int idx = 0;
    for (int li = 0; li < 2; li++) {
        for (int bi = 0; bi < 3; bi++) {
            for (int gi = 0; gi < 4; gi++, idx++) {
                qcase c = {.keys = m->keys,
                           .in_dtype = m->in_dtype,
                           .meta_dtype = m->meta_dtype,
                           .out_dtype = k_float_dtypes[(idx + (int)m->in_dtype) % 3],
                           .layout = li ? TU_NHD : TU_HND,
                           .B = B,
                           .H = H,
                           .N = N,
                           .D = D,
                           .bits = k_bits[bi],
                           .group = k_groups[gi]};
                tu_set_case("%s %s bits=%d group=%d out=%s", m->name, tu_layout_name(c.layout),
                            c.bits, c.group, clkv_dtype_name(c.out_dtype));
                gen_kv(&rng, x, B * H * N, D, m->in_dtype);
                check_case(&c, x, 0, NULL);
            }
        }
    }
    tu_set_case("%s", "");
    free(x);
}

/* ------------------------------------------------------------------------------------ */
/* Planted cases                                                                        */
/* ------------------------------------------------------------------------------------ */

/* Constant groups: s = 0, m = the stored value, codes 0, x^ = m exactly, no inf/NaN. */
static void test_constant_groups(void **state) {
    (void)state;
    const int64_t N = 32, D = 32;
    const float consts[6] = {0.0f, 1.5f, -65504.0f, 65504.0f, 1e-3f, -7.25f};
    float *x = tu_malloc((size_t)(N * D) * 4);
    tu_rng rng;
    tu_rng_seed(&rng, tu_seed(DEFAULT_SEED), 100);
    for (int keys = 0; keys < 2; keys++) {
        for (int mf = 0; mf < 2; mf++) {
            const clkv_dtype meta = mf ? CLKV_F32 : CLKV_F16;
            gen_kv(&rng, x, N, D, CLKV_F32);
            /* keys: channels 0..5 constant; values: tokens 0..5 constant */
            for (int k = 0; k < 6; k++)
                for (int64_t i = 0; i < (keys ? N : D); i++)
                    x[keys ? i * D + k : k * D + i] = consts[k];
            if (mf) /* f32 metadata admits large constants */
                for (int64_t i = 0; i < (keys ? N : D); i++)
                    x[keys ? i * D + 6 : 6 * D + i] = 1e30f;
            qcase c = {keys, CLKV_F32, meta, CLKV_F32, TU_HND, 1, 1, N, D, 4, 16};
            tu_set_case("constant groups %s meta=%s", keys ? "keys" : "values",
                        clkv_dtype_name(meta));
            qout o;
            check_case(&c, x, 0, &o);
            for (int k = 0; k < 6 + mf; k++) {
                const float want = k < 6 ? tu_round_dtype(meta, consts[k]) : 1e30f;
                /* group 0 of channel k (keys) / of token k (values) */
                const size_t mi = keys ? (size_t)k : (size_t)k * (size_t)(D / 16);
                if (o.scale[mi] != 0.0f || o.min[mi] != want)
                    TU_FAIL("constant %d: s %.9g (want 0), m %.9g (want %.9g)", k,
                            (double)o.scale[mi], (double)o.min[mi], (double)want);
                const size_t wi = keys ? (size_t)k : (size_t)k * (size_t)(D / 8);
                if (o.codes[wi] != 0u)
                    TU_FAIL("constant %d: code word 0x%08x, want 0", k, o.codes[wi]);
            }
            qout_free(&o);
        }
    }
    tu_set_case("%s", "");
    free(x);
}

/* Tiny groups: values 1e-6 apart, around 1 and around 0. */
static void test_tiny_groups(void **state) {
    (void)state;
    const int64_t N = 64, D = 64;
    float *x = tu_malloc((size_t)(N * D) * 4);
    for (int keys = 0; keys < 2; keys++) {
        for (int mf = 0; mf < 2; mf++) {
            for (int bi = 0; bi < 3; bi++) {
                for (int64_t n = 0; n < N; n++)
                    for (int64_t d = 0; d < D; d++) {
                        const int64_t t = keys ? n : d;
                        const float base = (d % 2 == 0) ? 1.0f : 0.0f;
                        x[n * D + d] = base + (float)((double)(t % 16) * 1e-6);
                    }
                if (!keys) /* per-token base for values */
                    for (int64_t n = 0; n < N; n++)
                        for (int64_t d = 0; d < D; d++)
                            x[n * D + d] =
                                ((n % 2 == 0) ? 1.0f : 0.0f) + (float)((double)(d % 16) * 1e-6);
                qcase c = {
                    keys,       CLKV_F32, mf ? CLKV_F32 : CLKV_F16, CLKV_F32, TU_HND, 1, 1, N, D,
                    k_bits[bi], 16};
                tu_set_case("tiny groups %s meta=%s bits=%d", keys ? "keys" : "values",
                            clkv_dtype_name(c.meta_dtype), c.bits);
                check_case(&c, x, 0, NULL);
            }
        }
    }
    tu_set_case("%s", "");
    free(x);
}

/* Exact .5 ties: rint must round half to even. mn = 0, mx = 2^b - 1 gives s = 1; the
 * planted values k + 0.5 have quotient exactly k + 0.5. */
static void test_ties(void **state) {
    (void)state;
    const int64_t N = 16, D = 16;
    float x[16 * 16];
    for (int keys = 0; keys < 2; keys++) {
        for (int bi = 0; bi < 3; bi++) {
            const int bits = k_bits[bi], qmax = (1 << bits) - 1;
            for (int64_t g = 0; g < 16; g++) {     /* group g: channel (keys) / token (values) */
                for (int64_t t = 0; t < 16; t++) { /* element t of the group */
                    float v;
                    if (t == 0)
                        v = 0.0f;
                    else if (t == 1)
                        v = (float)qmax;
                    else
                        v = (float)((t + g) % qmax) + 0.5f;
                    x[keys ? t * D + g : g * D + t] = v - (float)(g % 3); /* shift: m = -(g%3) */
                }
            }
            for (int mf = 0; mf < 2; mf++) {
                qcase c = {keys, CLKV_F32, mf ? CLKV_F32 : CLKV_F16, CLKV_F32, TU_NHD, 1, 1, N, D,
                           bits, 16};
                tu_set_case("ties %s bits=%d meta=%s", keys ? "keys" : "values", bits,
                            clkv_dtype_name(c.meta_dtype));
                qout o;
                check_case(&c, x, 0, &o);
                const int per = 32 / bits;
                for (int64_t g = 0; g < 16; g++) {
                    for (int64_t t = 2; t < 16; t++) {
                        const int k = (int)((t + g) % qmax), want = (k % 2 == 0) ? k : k + 1;
                        const size_t wi =
                            keys ? (size_t)((t / per) * D + g) : (size_t)(g * (D / per) + t / per);
                        const unsigned got = ref_code(o.codes[wi], bits, (int)(t % per));
                        if (got != (unsigned)want)
                            TU_FAIL("tie %d.5 (group %" PRId64 "): code %u, want %d (half to even)",
                                    k, g, got, want);
                    }
                }
                qout_free(&o);
            }
        }
    }
    tu_set_case("%s", "");
}

/* |x| > 65504 with f16 metadata is flagged on the device; with f32 metadata it is fine.
 * NaN is flagged with either. A flagged group is written as zeros. */
static void test_large_magnitude(void **state) {
    (void)state;
    const int64_t N = 32, D = 32;
    float *x = tu_malloc((size_t)(N * D) * 4);
    tu_rng rng;
    tu_rng_seed(&rng, tu_seed(DEFAULT_SEED), 200);
    for (int keys = 0; keys < 2; keys++) {
        gen_kv(&rng, x, N, D, CLKV_F32);
        x[3 * D + 5] = 70000.0f;
        qcase c = {keys, CLKV_F32, CLKV_F16, CLKV_F32, TU_HND, 1, 1, N, D, 2, 16};
        tu_set_case("large %s f16 meta", keys ? "keys" : "values");
        qout o;
        check_case(&c, x, CLKV_QUANT_FLAG_F16_RANGE, &o);
        const size_t mi = keys ? 5 : (size_t)(3 * (D / 16));
        if (o.scale[mi] != 0.0f || o.min[mi] != 0.0f || o.flags != CLKV_QUANT_FLAG_F16_RANGE)
            TU_FAIL("flagged group: s %g m %g flags %d", (double)o.scale[mi], (double)o.min[mi],
                    o.flags);
        qout_free(&o);
        c.meta_dtype = CLKV_F32;
        tu_set_case("large %s f32 meta", keys ? "keys" : "values");
        check_case(&c, x, 0, NULL);
        x[7 * D + 9] = NAN;
        c.meta_dtype = CLKV_F16;
        tu_set_case("large+NaN %s f16 meta", keys ? "keys" : "values");
        check_case(&c, x, CLKV_QUANT_FLAG_F16_RANGE | CLKV_QUANT_FLAG_NONFINITE, NULL);
        c.meta_dtype = CLKV_F32;
        x[3 * D + 5] = 3e38f; /* mx - mn overflows f32 with f32 metadata */
        x[3 * D + (keys ? 5 : 6)] = 3e38f;
        x[(keys ? 4 : 3) * D + (keys ? 5 : 7)] = -3e38f;
        tu_set_case("overflow+NaN %s f32 meta", keys ? "keys" : "values");
        check_case(&c, x, CLKV_QUANT_FLAG_NONFINITE, NULL);
    }
    /* the promise replaces the flags word */
    gen_kv(&rng, x, N, D, CLKV_F32);
    const int64_t dims[4] = {1, 1, N, D}, cd[4] = {1, 1, N, D / 16}, md[4] = {1, 1, N, D / 16};
    clkv_tensor tx = tu_kv_tensor(g_ctx, x, CLKV_F32, 1, 1, N, D, TU_HND);
    clkv_quant_args qa = CLKV_QUANT_ARGS_INIT;
    qa.input = tx;
    qa.codes = tu_tensor_alloc(g_ctx, CLKV_U32, 4, cd, 0, 0);
    qa.scale = tu_tensor_alloc(g_ctx, CLKV_F16, 4, md, 0, 0);
    qa.min = tu_tensor_alloc(g_ctx, CLKV_F16, 4, md, 0, 0);
    (void)dims;
    tu_set_case("no flags with f16 metadata");
    if (clkv_quant_values(g_ctx, &qa, NULL) != CLKV_ERR_ARG_NULL ||
        !tu_msg_names(clkv_last_error(g_ctx), "flags"))
        TU_FAIL("missing flags not rejected: %s", clkv_last_error(g_ctx));
    qa.inputs_in_f16_range = 1;
    TU_CHECK_OK(g_ctx, clkv_quant_values(g_ctx, &qa, NULL));
    TU_CHECK_OK(g_ctx, clkv_context_finish(g_ctx));
    tu_assert_written_exactly(g_ctx, &qa.codes, "codes (promise)");
    tu_release(tx.buf);
    tu_release(qa.codes.buf);
    tu_release(qa.scale.buf);
    tu_release(qa.min.buf);
    tu_set_case("%s", "");
    free(x);
}

/* Keys with group 256 and values with one group per D = 256 row. */
static void test_group256(void **state) {
    (void)state;
    const int64_t N = 256, D = 256;
    float *x = tu_malloc((size_t)(N * D) * 4);
    tu_rng rng;
    tu_rng_seed(&rng, tu_seed(DEFAULT_SEED), 300);
    for (int keys = 0; keys < 2; keys++) {
        gen_kv(&rng, x, N, D, CLKV_BF16);
        qcase c = {keys, CLKV_BF16, CLKV_F16, CLKV_BF16, TU_NHD, 1, 1, N, D, 4, 256};
        tu_set_case("group 256 %s", keys ? "keys" : "values");
        check_case(&c, x, 0, NULL);
    }
    tu_set_case("%s", "");
    free(x);
}

/* DiffKV per-token precisions: K8V4 and K4V2, group D (default) and 32. */
static void test_tokens(void **state) {
    (void)state;
    const int64_t B = 2, H = 2, N = 24, D = 128;
    const size_t nx = (size_t)(B * H * N * D);
    float *k = tu_malloc(nx * 4), *v = tu_malloc(nx * 4);
    tu_rng rng;
    tu_rng_seed(&rng, tu_seed(DEFAULT_SEED), 400);
    const int levels[2][2] = {{8, 4}, {4, 2}};
    for (int li = 0; li < 2; li++) {
        for (int gi = 0; gi < 2; gi++) {
            const int kb = levels[li][0], vb = levels[li][1], group = gi ? 32 : 0;
            const int G = group ? group : (int)D;
            const clkv_dtype kdt = CLKV_BF16, vdt = CLKV_F16, kmeta = CLKV_F16, vmeta = CLKV_F32;
            tu_set_case("tokens K%dV%d group=%d", kb, vb, group);
            gen_kv(&rng, k, B * H * N, D, kdt);
            gen_kv(&rng, v, B * H * N, D, vdt);
            const int64_t kcd[4] = {B, H, N, D / (32 / kb)}, vcd[4] = {B, H, N, D / (32 / vb)},
                          md[4] = {B, H, N, D / G}, fd[1] = {1};
            const int32_t zero = 0;
            clkv_quant_tokens_args a = CLKV_QUANT_TOKENS_ARGS_INIT;
            a.k = tu_kv_tensor(g_ctx, k, kdt, B, H, N, D, TU_NHD);
            a.v = tu_kv_tensor(g_ctx, v, vdt, B, H, N, D, TU_HND);
            a.k_codes = tu_tensor_alloc(g_ctx, CLKV_U32, 4, kcd, 4, 16);
            a.v_codes = tu_tensor_alloc(g_ctx, CLKV_U32, 4, vcd, 4, 16);
            a.k_scale = tu_tensor_alloc(g_ctx, kmeta, 4, md, 2, 16);
            a.k_min = tu_tensor_alloc(g_ctx, kmeta, 4, md, 2, 16);
            a.v_scale = tu_tensor_alloc(g_ctx, vmeta, 4, md, 4, 16);
            a.v_min = tu_tensor_alloc(g_ctx, vmeta, 4, md, 4, 16);
            a.flags = tu_tensor_upload_i32(g_ctx, &zero, 1, fd, 0, 0);
            a.kbits = kb;
            a.vbits = vb;
            a.group = group;
            if (li == 0 && gi == 0) { /* the defaults are K8V4, group D */
                clkv_quant_tokens_args dflt = CLKV_QUANT_TOKENS_ARGS_INIT;
                assert_int_equal(dflt.kbits, 8);
                assert_int_equal(dflt.vbits, 4);
                assert_int_equal(dflt.group, 0);
            }
            cl_event ev = NULL;
            TU_CHECK_OK(g_ctx, clkv_quant_tokens(g_ctx, &a, &ev));
            TU_CHECK_CL(clWaitForEvents(1, &ev));
            clReleaseEvent(ev);
            const clkv_tensor *outs[6] = {&a.k_codes, &a.v_codes, &a.k_scale,
                                          &a.k_min,   &a.v_scale, &a.v_min};
            for (int i = 0; i < 6; i++)
                tu_assert_written_exactly(g_ctx, outs[i], "tokens output");
            for (int which = 0; which < 2; which++) {
                const int bits = which ? vb : kb;
                const float *x = which ? v : k;
                const clkv_tensor *tc = which ? &a.v_codes : &a.k_codes;
                const clkv_tensor *ts = which ? &a.v_scale : &a.k_scale;
                const clkv_tensor *tm = which ? &a.v_min : &a.k_min;
                const size_t ncode = (size_t)tu_tensor_numel(tc),
                             nmeta = (size_t)tu_tensor_numel(ts);
                uint32_t *rc = tu_malloc(ncode * 4), *gc = tu_malloc(ncode * 4);
                float *rs = tu_malloc(nmeta * 4), *rm = tu_malloc(nmeta * 4);
                float *gs = tu_malloc(nmeta * 4), *gm = tu_malloc(nmeta * 4);
                float *gout = tu_malloc(nx * 4), *xhat = tu_malloc(nx * 4);
                ref_quant_values(x, B, H, N, D, bits, G, ts->dtype == CLKV_F16, rc, rs, rm, NULL);
                read_u32(tc, gc);
                tu_tensor_read(g_ctx, ts, gs);
                tu_tensor_read(g_ctx, tm, gm);
                for (size_t i = 0; i < ncode; i++)
                    if (gc[i] != rc[i])
                        TU_FAIL("%s code word %zu: 0x%08x, reference 0x%08x", which ? "v" : "k", i,
                                gc[i], rc[i]);
                for (size_t i = 0; i < nmeta; i++)
                    if (gs[i] != rs[i] || gm[i] != rm[i])
                        TU_FAIL("%s meta %zu differs", which ? "v" : "k", i);
                const int64_t od[4] = {B, H, N, D};
                clkv_dequant_args da = CLKV_DEQUANT_ARGS_INIT;
                da.codes = *tc;
                da.scale = *ts;
                da.min = *tm;
                da.out = tu_tensor_alloc(g_ctx, CLKV_F32, 4, od, 0, 16);
                da.bits = bits;
                da.group = G;
                TU_CHECK_OK(g_ctx, clkv_dequant_values(g_ctx, &da, NULL));
                tu_tensor_read(g_ctx, &da.out, gout);
                ref_dequant_values(rc, rs, rm, B, H, N, D, bits, G, xhat);
                for (size_t i = 0; i < nx; i++)
                    if (gout[i] != xhat[i])
                        TU_FAIL("%s dequant %zu: %.9g vs %.9g", which ? "v" : "k", i,
                                (double)gout[i], (double)xhat[i]);
                tu_release(da.out.buf);
                free(rc);
                free(gc);
                free(rs);
                free(rm);
                free(gs);
                free(gm);
                free(gout);
                free(xhat);
            }
            int32_t fl = -1;
            tu_buffer_read(g_ctx, a.flags.buf, 0, &fl, 4);
            assert_int_equal(fl, 0);
            tu_release(a.k.buf);
            tu_release(a.v.buf);
            for (int i = 0; i < 6; i++)
                tu_release(outs[i]->buf);
            tu_release(a.flags.buf);
        }
    }
    tu_set_case("%s", "");
    free(k);
    free(v);
}

/* The reference itself on hand-computed groups. */
static void test_reference_selfcheck(void **state) {
    (void)state;
    uint8_t q[4];
    float s, m;
    double qt[4];
    const float a[4] = {0.0f, 1.0f, 2.0f, 3.0f};
    assert_int_equal(ref_quant_group(a, 1, 4, 2, 1, q, &s, &m, qt), 0);
    assert_true(s == 1.0f && m == 0.0f && q[0] == 0 && q[1] == 1 && q[2] == 2 && q[3] == 3);
    const float b[4] = {0.0f, 0.5f, 2.5f, 3.0f}; /* ties 0.5 -> 0, 2.5 -> 2 */
    ref_quant_group(b, 1, 4, 2, 1, q, &s, &m, qt);
    assert_true(q[1] == 0 && q[2] == 2 && q[3] == 3);
    const float c[4] = {2.0f, 2.0f, 2.0f, 2.0f};
    ref_quant_group(c, 1, 4, 4, 1, q, &s, &m, qt);
    assert_true(s == 0.0f && m == 2.0f && q[0] == 0 && q[3] == 0);
    /* f16 rounding of the metadata: range 1, 4 bits: scale 1/15 -> f16 */
    const float d[2] = {0.0f, 1.0f};
    ref_quant_group(d, 1, 2, 4, 1, q, &s, &m, qt);
    assert_true(s == tu_f16_to_f32(tu_f32_to_f16(1.0f / 15.0f)) && s != 1.0f / 15.0f);
    assert_true(q[1] == 15);
    /* packing: keys, 2 bits: tokens 0..15 of channel 0 in one word, LSB first */
    float x[16];
    uint32_t codes[1];
    float sc[1], mn[1];
    for (int i = 0; i < 16; i++)
        x[i] = (float)(i % 4);
    ref_quant_keys(x, 1, 1, 16, 1, 2, 16, 1, codes, sc, mn, NULL);
    assert_true(codes[0] == 0xE4E4E4E4u);
}

/* ------------------------------------------------------------------------------------ */
/* Argument validation                                                                  */
/* ------------------------------------------------------------------------------------ */

#define VN 32
#define VD 64
static cl_mem g_x, g_codes, g_scale, g_min, g_flags, g_out;

static void vfix_create(void) {
    float *x = tu_calloc((size_t)(VN * VD * 4), 4);
    g_x = tu_buffer_from_host(g_ctx, x, (size_t)(VN * VD) * 4);
    free(x);
    g_codes = tu_buffer_create(g_ctx, (size_t)(VN * VD) * 4);
    g_scale = tu_buffer_create(g_ctx, (size_t)(VN * VD) * 4);
    g_min = tu_buffer_create(g_ctx, (size_t)(VN * VD) * 4);
    g_out = tu_buffer_create(g_ctx, (size_t)(VN * VD) * 4);
    const int32_t zero[4] = {0, 0, 0, 0}; /* room for the 2-word shape mutation */
    g_flags = tu_buffer_from_host(g_ctx, zero, sizeof zero);
}

static void vfix_release(void) {
    tu_release(g_x);
    tu_release(g_codes);
    tu_release(g_scale);
    tu_release(g_min);
    tu_release(g_out);
    tu_release(g_flags);
}

/* Valid keys args: input [1,1,32,64] f32, bits 4 (P 8), group 16, f16 meta. */
static clkv_quant_args vkeys(void) {
    clkv_quant_args a = CLKV_QUANT_ARGS_INIT;
    a.input = clkv_tensor_4d(g_x, CLKV_F32, 1, 1, VN, VD);
    a.codes = clkv_tensor_4d(g_codes, CLKV_U32, 1, 1, VN / 8, VD);
    a.scale = clkv_tensor_4d(g_scale, CLKV_F16, 1, 1, VN / 16, VD);
    a.min = clkv_tensor_4d(g_min, CLKV_F16, 1, 1, VN / 16, VD);
    a.flags = clkv_tensor_1d(g_flags, CLKV_I32, 1);
    a.bits = 4;
    a.group = 16;
    return a;
}

static clkv_quant_args vvalues(void) {
    clkv_quant_args a = vkeys();
    a.codes = clkv_tensor_4d(g_codes, CLKV_U32, 1, 1, VN, VD / 8);
    a.scale = clkv_tensor_4d(g_scale, CLKV_F16, 1, 1, VN, VD / 16);
    a.min = clkv_tensor_4d(g_min, CLKV_F16, 1, 1, VN, VD / 16);
    return a;
}

static clkv_dequant_args dq_of(const clkv_quant_args *q) {
    clkv_dequant_args d = CLKV_DEQUANT_ARGS_INIT;
    d.codes = q->codes;
    d.scale = q->scale;
    d.min = q->min;
    d.out = clkv_tensor_4d(g_out, CLKV_F16, 1, 1, VN, VD);
    d.bits = q->bits;
    d.group = q->group;
    return d;
}

static clkv_quant_tokens_args vtokens(void) {
    clkv_quant_tokens_args a = CLKV_QUANT_TOKENS_ARGS_INIT; /* K8V4, group D = 64 */
    a.k = clkv_tensor_4d(g_x, CLKV_F32, 1, 1, VN, VD);
    a.v = clkv_tensor_4d(g_x, CLKV_F32, 1, 1, VN, VD);
    a.k_codes = clkv_tensor_4d(g_codes, CLKV_U32, 1, 1, VN, VD / 4);
    a.v_codes = clkv_tensor_4d(g_out, CLKV_U32, 1, 1, VN, VD / 8);
    a.k_scale = clkv_tensor_4d(g_scale, CLKV_F32, 1, 1, VN, 1);
    a.k_min = clkv_tensor_4d(g_min, CLKV_F32, 1, 1, VN, 1);
    /* v metadata after k's in the same buffers */
    a.v_scale = clkv_tensor_4d(g_scale, CLKV_F16, 1, 1, VN, 1);
    a.v_scale.offset = 1024;
    a.v_min = clkv_tensor_4d(g_min, CLKV_F16, 1, 1, VN, 1);
    a.v_min.offset = 1024;
    a.flags = clkv_tensor_1d(g_flags, CLKV_I32, 1);
    return a;
}

typedef enum fn_kind { FN_QKEYS, FN_QVALUES, FN_DQKEYS, FN_DQVALUES, FN_TOKENS } fn_kind;
static const char *const k_fn_names[5] = {"clkv_quant_keys", "clkv_quant_values",
                                          "clkv_dequant_keys", "clkv_dequant_values",
                                          "clkv_quant_tokens"};

static clkv_status call_fn(fn_kind f, clkv_context *ctx, const void *a, cl_event *ev) {
    switch (f) {
    case FN_QKEYS:
        return clkv_quant_keys(ctx, (const clkv_quant_args *)a, ev);
    case FN_QVALUES:
        return clkv_quant_values(ctx, (const clkv_quant_args *)a, ev);
    case FN_DQKEYS:
        return clkv_dequant_keys(ctx, (const clkv_dequant_args *)a, ev);
    case FN_DQVALUES:
        return clkv_dequant_values(ctx, (const clkv_dequant_args *)a, ev);
    default:
        return clkv_quant_tokens(ctx, (const clkv_quant_tokens_args *)a, ev);
    }
}

static void poison_all(void) {
    cl_mem outs[4] = {g_codes, g_scale, g_min, g_out};
    for (int i = 0; i < 4; i++)
        tu_buffer_poison(g_ctx, outs[i], 0, tu_buffer_size(outs[i]));
}

static void expect_reject_at(int line, const char *label, fn_kind f, clkv_context *ctx,
                             const void *a, clkv_status want, const char *name) {
    cl_event ev = NULL;
    tu_set_case("%s: %s", k_fn_names[f], label);
    poison_all();
    const clkv_status st = call_fn(f, ctx, a, &ev);
    if (st != want)
        tu_fail_at(__FILE__, line, "returned %s (%d), expected %s; message \"%s\"",
                   clkv_status_string(st), st, clkv_status_string(want), clkv_last_error(ctx));
    if (!tu_msg_names(clkv_last_error(ctx), name))
        tu_fail_at(__FILE__, line, "message \"%s\" does not name %s", clkv_last_error(ctx), name);
    if (ev != NULL) {
        clReleaseEvent(ev);
        tu_fail_at(__FILE__, line, "the rejected call returned an event");
    }
    TU_CHECK_CL(clFinish(clkv_context_queue(g_ctx)));
    tu_assert_buffer_poison(g_ctx, g_codes, "codes buffer");
    tu_assert_buffer_poison(g_ctx, g_scale, "scale buffer");
    tu_assert_buffer_poison(g_ctx, g_min, "min buffer");
    tu_assert_buffer_poison(g_ctx, g_out, "out buffer");
}
#define REJECT(label, f, a, want, name) expect_reject_at(__LINE__, label, f, g_ctx, a, want, name)
/* var = base with `mutation` applied (parenthesised when it has commas) is rejected. */
#define REJECT_MUT(label, f, var, base, mutation, want, name)                                      \
    do {                                                                                           \
        var = base, mutation;                                                                      \
        REJECT(label, f, &var, want, name);                                                        \
    } while (0)

static void expect_ok(fn_kind f, const void *a) {
    tu_set_case("%s: baseline", k_fn_names[f]);
    TU_CHECK_OK(g_ctx, call_fn(f, g_ctx, a, NULL));
    TU_CHECK_OK(g_ctx, clkv_context_finish(g_ctx));
}

/* Every function: `base` runs, NULL args and a NULL ctx are rejected. */
static void reject_null_args(fn_kind f, const void *base) {
    expect_ok(f, base);
    REJECT("NULL args", f, NULL, CLKV_ERR_ARG_NULL, "args");
    expect_reject_at(__LINE__, "NULL ctx", f, NULL, base, CLKV_ERR_ARG_NULL, "ctx");
}

/* Mutations shared by the two quantizers (input/codes/scale/min/flags/bits/group). */
static void reject_quant_common(fn_kind f, const clkv_quant_args *base) {
    clkv_quant_args a;
    reject_null_args(f, base);
    REJECT_MUT("input NULL", f, a, *base, a.input.buf = NULL, CLKV_ERR_ARG_NULL, "input");
    REJECT_MUT("codes NULL", f, a, *base, a.codes.buf = NULL, CLKV_ERR_ARG_NULL, "codes");
    REJECT_MUT("scale NULL", f, a, *base, a.scale.buf = NULL, CLKV_ERR_ARG_NULL, "scale");
    REJECT_MUT("min NULL", f, a, *base, a.min.buf = NULL, CLKV_ERR_ARG_NULL, "min");
    REJECT_MUT("flags NULL with f16 meta", f, a, *base, a.flags.buf = NULL, CLKV_ERR_ARG_NULL,
               "flags");
    REJECT_MUT("input i32", f, a, *base, a.input.dtype = CLKV_I32, CLKV_ERR_ARG_DTYPE, "input");
    REJECT_MUT("codes i32", f, a, *base, a.codes.dtype = CLKV_I32, CLKV_ERR_ARG_DTYPE, "codes");
    REJECT_MUT("scale bf16", f, a, *base, (a.scale.dtype = CLKV_BF16, a.min.dtype = CLKV_BF16),
               CLKV_ERR_ARG_DTYPE, "scale");
    REJECT_MUT("min dtype differs", f, a, *base, a.min.dtype = CLKV_F32, CLKV_ERR_ARG_DTYPE, "min");
    REJECT_MUT("flags f32", f, a, *base, a.flags.dtype = CLKV_F32, CLKV_ERR_ARG_DTYPE, "flags");
    REJECT_MUT("flags 2 words", f, a, *base, (a.flags.dims[0] = 2, a.flags.strides[0] = 1),
               CLKV_ERR_ARG_SHAPE, "flags");
    REJECT_MUT("bits 3", f, a, *base, a.bits = 3, CLKV_ERR_ARG_UNSUPPORTED, "bits");
    REJECT_MUT("bits 0", f, a, *base, a.bits = 0, CLKV_ERR_ARG_UNSUPPORTED, "bits");
    REJECT_MUT("group 24", f, a, *base, a.group = 24, CLKV_ERR_ARG_UNSUPPORTED, "group");
    REJECT_MUT("input 3-d", f, a, *base, a.input.ndim = 3, CLKV_ERR_ARG_SHAPE, "input");
    REJECT_MUT("input last stride 2", f, a, *base, a.input.strides[3] = 2, CLKV_ERR_ARG_STRIDE,
               "input");
    REJECT_MUT("codes misaligned", f, a, *base, a.codes.offset = 2, CLKV_ERR_ARG_ALIGNMENT,
               "codes");
    REJECT_MUT("buffer too small", f, a, *base,
               (a.codes.dims[0] = 1000, a.input.dims[0] = 1000, a.scale.dims[0] = 1000,
                a.min.dims[0] = 1000),
               CLKV_ERR_ARG_BUFFER_SIZE, "input");
    REJECT_MUT("overflow", f, a, *base,
               (a.input.strides[0] = INT64_MAX / 2, a.input.dims[0] = 4, a.codes.dims[0] = 4,
                a.scale.dims[0] = 4, a.min.dims[0] = 4),
               CLKV_ERR_ARG_OVERFLOW, "input");
    REJECT_MUT("scale shape", f, a, *base, a.scale.dims[3] += 1, CLKV_ERR_ARG_SHAPE, "scale");
    REJECT_MUT("min shape", f, a, *base, a.min.dims[2] += 1, CLKV_ERR_ARG_SHAPE, "min");
    REJECT_MUT("codes heads", f, a, *base, a.codes.dims[1] = 2, CLKV_ERR_ARG_SHAPE, "codes");
    /* f32 metadata needs no flags; f16 with the promise neither */
    a = *base, a.flags.buf = NULL, a.inputs_in_f16_range = 1;
    expect_ok(f, &a);
}

static void test_validation(void **state) {
    (void)state;
    vfix_create();
    clkv_quant_args k = vkeys(), v = vvalues(), a;
    reject_quant_common(FN_QKEYS, &k);
    reject_quant_common(FN_QVALUES, &v);
    /* keys: N not a multiple of group; codes packed along tokens */
    REJECT_MUT("N % group", FN_QKEYS, a, k,
               (a.input.dims[2] = 24, a.scale.dims[2] = 1, a.min.dims[2] = 1, a.codes.dims[2] = 3),
               CLKV_ERR_ARG_SHAPE, "input");
    REJECT_MUT("codes tokens", FN_QKEYS, a, k, a.codes.dims[2] = VN / 16, CLKV_ERR_ARG_SHAPE,
               "codes");
    /* values: D not a multiple of group */
    REJECT_MUT("D % group", FN_QVALUES, a, v, a.group = 128, CLKV_ERR_ARG_SHAPE, "input");
    REJECT_MUT("codes words", FN_QVALUES, a, v, a.codes.dims[3] = VD / 4, CLKV_ERR_ARG_SHAPE,
               "codes");

    /* dequant */
    for (int kv = 0; kv < 2; kv++) {
        const fn_kind f = kv ? FN_DQVALUES : FN_DQKEYS;
        const clkv_dequant_args base = dq_of(kv ? &v : &k);
        clkv_dequant_args d;
        reject_null_args(f, &base);
        REJECT_MUT("out NULL", f, d, base, d.out.buf = NULL, CLKV_ERR_ARG_NULL, "out");
        REJECT_MUT("codes NULL", f, d, base, d.codes.buf = NULL, CLKV_ERR_ARG_NULL, "codes");
        REJECT_MUT("out u32", f, d, base, d.out.dtype = CLKV_U32, CLKV_ERR_ARG_DTYPE, "out");
        REJECT_MUT("min dtype differs", f, d, base, d.scale.dtype = CLKV_F32, CLKV_ERR_ARG_DTYPE,
                   "min");
        REJECT_MUT("bits 16", f, d, base, d.bits = 16, CLKV_ERR_ARG_UNSUPPORTED, "bits");
        REJECT_MUT("group 8", f, d, base, d.group = 8, CLKV_ERR_ARG_UNSUPPORTED, "group");
        REJECT_MUT("bits disagree with codes", f, d, base, d.bits = 2, CLKV_ERR_ARG_SHAPE, "codes");
        REJECT_MUT("buffer too small", f, d, base,
                   (d.out.dims[0] = 1000, d.codes.dims[0] = 1000, d.scale.dims[0] = 1000,
                    d.min.dims[0] = 1000),
                   CLKV_ERR_ARG_BUFFER_SIZE, "out");
        REJECT_MUT("overflow", f, d, base,
                   (d.out.strides[1] = INT64_MAX / 2, d.out.dims[1] = 4, d.codes.dims[1] = 4,
                    d.scale.dims[1] = 4, d.min.dims[1] = 4),
                   CLKV_ERR_ARG_OVERFLOW, "out");
    }

    /* tokens */
    const clkv_quant_tokens_args tb = vtokens();
    clkv_quant_tokens_args t;
    reject_null_args(FN_TOKENS, &tb);
    REJECT_MUT("v NULL", FN_TOKENS, t, tb, t.v.buf = NULL, CLKV_ERR_ARG_NULL, "v");
    REJECT_MUT("k u8", FN_TOKENS, t, tb, t.k.dtype = CLKV_U8, CLKV_ERR_ARG_DTYPE, "k");
    REJECT_MUT("v_min dtype", FN_TOKENS, t, tb, t.v_min.dtype = CLKV_F32, CLKV_ERR_ARG_DTYPE,
               "v_min");
    REJECT_MUT("kbits 6", FN_TOKENS, t, tb, t.kbits = 6, CLKV_ERR_ARG_UNSUPPORTED, "kbits");
    REJECT_MUT("vbits 1", FN_TOKENS, t, tb, t.vbits = 1, CLKV_ERR_ARG_UNSUPPORTED, "vbits");
    REJECT_MUT("group 128 > D", FN_TOKENS, t, tb, t.group = 128, CLKV_ERR_ARG_SHAPE, "k");
    REJECT_MUT("k_codes for 4 bits", FN_TOKENS, t, tb, t.k_codes.dims[3] = VD / 8,
               CLKV_ERR_ARG_SHAPE, "k_codes");
    REJECT_MUT("v_scale groups", FN_TOKENS, t, tb, t.v_scale.dims[3] = 2, CLKV_ERR_ARG_SHAPE,
               "v_scale");
    REJECT_MUT(
        "v tokens differ from k", FN_TOKENS, t, tb,
        (t.v.dims[2] = 16, t.v_codes.dims[2] = 16, t.v_scale.dims[2] = 16, t.v_min.dims[2] = 16),
        CLKV_ERR_ARG_SHAPE, "v");
    REJECT_MUT("flags NULL (v meta f16)", FN_TOKENS, t, tb, t.flags.buf = NULL, CLKV_ERR_ARG_NULL,
               "flags");
    REJECT_MUT("group D = 48", FN_TOKENS, t, tb, (t.k.dims[3] = 48, t.v.dims[3] = 48),
               CLKV_ERR_ARG_UNSUPPORTED, "group");
    REJECT_MUT("buffer too small", FN_TOKENS, t, tb,
               (t.k_min.dims[0] = 1000, t.k.dims[0] = 1000, t.v.dims[0] = 1000,
                t.k_codes.dims[0] = 1000, t.k_scale.dims[0] = 1000),
               CLKV_ERR_ARG_BUFFER_SIZE, "k");
    expect_ok(FN_TOKENS, &tb);
    tu_set_case("%s", "");
    vfix_release();
}

/* ------------------------------------------------------------------------------------ */

int main(void) {
    tu_suite suite = {0};
    tu_suite_add(&suite, "reference_selfcheck", test_reference_selfcheck, NULL);
    tu_suite_add(&suite, "validation", test_validation, NULL);
    int mi = 0;
    for (int keys = 1; keys >= 0; keys--) {
        for (int di = 0; di < 3; di++) {
            for (int mf = 0; mf < 2; mf++, mi++) {
                mcase *m = &g_mcases[mi];
                m->keys = keys;
                m->in_dtype = k_float_dtypes[di];
                m->meta_dtype = mf ? CLKV_F32 : CLKV_F16;
                snprintf(g_mnames[mi], sizeof g_mnames[mi], "%s_%s_meta_%s",
                         keys ? "keys" : "values", clkv_dtype_name(m->in_dtype),
                         clkv_dtype_name(m->meta_dtype));
                m->name = g_mnames[mi];
                tu_suite_add(&suite, m->name, test_matrix, m);
            }
        }
    }
    tu_suite_add(&suite, "constant_groups", test_constant_groups, NULL);
    tu_suite_add(&suite, "tiny_groups", test_tiny_groups, NULL);
    tu_suite_add(&suite, "round_half_even_ties", test_ties, NULL);
    tu_suite_add(&suite, "large_magnitude_and_nonfinite", test_large_magnitude, NULL);
    tu_suite_add(&suite, "group_256", test_group256, NULL);
    tu_suite_add(&suite, "diffkv_tokens", test_tokens, NULL);
    return tu_suite_run(&suite, "quant", &g_ctx, DEFAULT_SEED);
}
