/* `clkv demo` step "quant-cache": 2-bit and 4-bit KIVI-style caches (clkv/quant_cache.h,
 * key/value groups of 32, residual n_r = 128) filled from a bf16 cache with ragged
 * lengths, fused quantized decode attention against clkv_attention_decode on the 16-bit
 * cache.
 *
 * Checks (the step fails when any does):
 *   - the 16-bit call matches the double reference (SPEC §0.2 bf16 tolerance);
 *   - each quantized call matches a double reference over the cache's OWN dequantised
 *     contents (codes and (scale, min) read back through clkv_quant_cache_view and
 *     dequantised on the host as the header specifies), same tolerance: the kernel
 *     computes attention over what the cache holds;
 *   - the quantization error vs the full-precision reference is finite, below
 *     max_rel_err for 4-bit and larger for 2-bit than for 4-bit (fewer levels, more
 *     error), and the memory is what the formats give (codes + metadata + residual). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "demo.h"
#include "demo_util.h"
#include "reference.h"
#include "tool_data.h"

typedef struct demo_quant_cfg {
    demo_problem_spec p;
    int32_t group, residual;
    double max_rel_err_4bit; /* bound on ||o_4bit - ref|| / ||ref|| */
    int iters, repeats;
} demo_quant_cfg;

const demo_quant_cfg demo_quant_cpu = {.p = DEMO_NEEDLE_SPEC(4196, 4196, 2500, 16, 6.0f, 100u),
                                       .group = 32,
                                       .residual = 128,
                                       .max_rel_err_4bit = 0.2,
                                       .iters = 3,
                                       .repeats = 3};
const demo_quant_cfg demo_quant_gpu = {.p = DEMO_NEEDLE_SPEC(32868, 32868, 20000, 16, 6.0f, 100u),
                                       .group = 32,
                                       .residual = 128,
                                       .max_rel_err_4bit = 0.2,
                                       .iters = 50,
                                       .repeats = 9};

typedef struct decode_call {
    clkv_context *ctx;
    clkv_attention_decode_args a;
} decode_call;

static clkv_status call_decode(void *arg) {
    decode_call *c = arg;
    return clkv_attention_decode(c->ctx, &c->a, NULL);
}

clkv_status demo_quant_dequant(clkv_context *ctx, const clkv_quant_cache *cache,
                               const demo_problem *p, const int32_t *tokens, float *k, float *v) {
    clkv_quant_cache_view w;
    clkv_status st = clkv_quant_cache_view_get(cache, &w);
    if (st != CLKV_OK) {
        return st;
    }
    const clkv_tensor *ts[8] = {&w.k_codes, &w.k_scale, &w.k_min, &w.v_codes,
                                &w.v_scale, &w.v_min,   &w.k_res, &w.v_res};
    void *h[8] = {0};
    for (int i = 0; i < 8 && st == CLKV_OK; i++) {
        h[i] = demo_read_tensor(ctx, ts[i], &st);
    }
    if (st == CLKV_OK) {
        const int64_t Hkv = p->s.Hkv, D = p->s.D, L = p->s.L, Cq = w.quant_capacity;
        const int32_t kb = w.config.k_bits, vb = w.config.v_bits, grp = w.config.group;
        const int32_t nr = w.config.residual, pk = 32 / kb, pv = 32 / vb;
        const uint32_t *kc = h[0], *vc = h[3];
        for (int64_t b = 0; b < p->s.B; b++) {
            const int64_t T = tokens[b], nq = T - T % nr;
            for (int64_t hh = 0; hh < Hkv; hh++) {
                const int64_t bh = b * Hkv + hh;
                for (int64_t t = 0; t < T; t++) {
                    float *kr = k + (bh * L + t) * D, *vr = v + (bh * L + t) * D;
                    for (int64_t d = 0; d < D; d++) {
                        if (t < nq) {
                            const uint32_t kw = kc[(bh * (Cq / pk) + t / pk) * D + d];
                            const uint32_t kq = (kw >> ((t % pk) * kb)) & ((1u << kb) - 1u);
                            const size_t km = (size_t)((bh * (Cq / grp) + t / grp) * D + d);
                            const float ks = tool_load(h[1], w.k_scale.dtype, km);
                            const float kmin = tool_load(h[2], w.k_min.dtype, km);
                            const float kt = (float)kq * ks;
                            kr[d] = kt + kmin;
                            const uint32_t vw = vc[(bh * Cq + t) * (D / pv) + d / pv];
                            const uint32_t vq = (vw >> ((d % pv) * vb)) & ((1u << vb) - 1u);
                            const size_t vm = (size_t)((bh * Cq + t) * (D / grp) + d / grp);
                            const float vs = tool_load(h[4], w.v_scale.dtype, vm);
                            const float vmin = tool_load(h[5], w.v_min.dtype, vm);
                            const float vt = (float)vq * vs;
                            vr[d] = vt + vmin;
                        } else {
                            const size_t r = (size_t)((bh * nr + (t - nq)) * D + d);
                            kr[d] = tool_load(h[6], w.k_res.dtype, r);
                            vr[d] = tool_load(h[7], w.v_res.dtype, r);
                        }
                    }
                }
            }
        }
    }
    for (int i = 0; i < 8; i++) {
        free(h[i]);
    }
    return st;
}

int demo_quant(demo_env *env, const void *vcfg, demo_row *row) {
    const demo_quant_cfg *cfg = vcfg;
    clkv_context *ctx = env->ctx;
    demo_problem p;
    clkv_status st = demo_problem_create(ctx, &cfg->p, &p);
    if (st != CLKV_OK) {
        return report_failure(ctx, st, "quant-cache: problem");
    }
    const int64_t B = p.s.B, Hq = p.s.Hq, Hkv = p.s.Hkv, D = p.s.D, L = p.s.L;
    demo_row_shape(row, &p, "len", "");
    snprintf(row->dtype, sizeof row->dtype, "bf16 vs K2V2/K4V4");
    const int64_t qn = B * Hq * D;
    float *q = malloc((size_t)qn * sizeof(float));
    double *ref = malloc((size_t)qn * sizeof(double));
    double *ref_q = malloc((size_t)qn * sizeof(double));
    void *o_host = malloc((size_t)qn * 2);
    float *kd = calloc((size_t)(B * Hkv * L * D), sizeof(float));
    float *vd = calloc((size_t)(B * Hkv * L * D), sizeof(float));
    cl_mem dq = NULL, dout = NULL;
    const char *what = "quant-cache: host memory";
    if (!q || !ref || !ref_q || !o_host || !kd || !vd) {
        st = CLKV_ERR_OUT_OF_HOST_MEMORY;
    }
    if (st == CLKV_OK) {
        what = "quant-cache: buffers";
        demo_problem_query(&p, 0, 0.3, q);
        demo_ref_attention(&p, q, NULL, 0, NULL, ref, NULL);
        st = demo_upload(ctx, "demo q", q, qn, CLKV_BF16, &dq);
    }
    if (st == CLKV_OK) {
        st = tool_buffer(ctx, "demo o", (uint64_t)qn * 2, &dout);
    }
    /* 16-bit baseline. */
    decode_call dc = {.ctx = ctx};
    clkv_attention_decode_args da = CLKV_ATTENTION_DECODE_ARGS_INIT;
    da.q = clkv_tensor_3d(dq, CLKV_BF16, B, Hq, D);
    da.k = clkv_tensor_4d(p.dk, CLKV_BF16, B, Hkv, L, D);
    da.v = clkv_tensor_4d(p.dv, CLKV_BF16, B, Hkv, L, D);
    da.lengths = clkv_tensor_1d(p.dlen, CLKV_I32, B);
    da.o = clkv_tensor_3d(dout, CLKV_BF16, B, Hq, D);
    dc.a = da;
    double t16 = NAN;
    tool_compare c16;
    tool_compare_init(&c16, CLKV_BF16);
    double err16 = NAN;
    if (st == CLKV_OK) {
        what = "quant-cache: clkv_attention_decode";
        st = demo_time(ctx, call_decode, &dc, cfg->iters, cfg->repeats, &t16);
    }
    if (st == CLKV_OK) {
        st = tool_read(ctx, dout, o_host, (size_t)qn * 2);
    }
    if (st == CLKV_OK) {
        demo_compare(&c16, o_host, CLKV_BF16, ref, qn);
        err16 = demo_rel_err(o_host, CLKV_BF16, ref, qn);
    }
    uint64_t bytes16 = 0;
    for (int64_t b = 0; b < B; b++) {
        bytes16 += (uint64_t)p.s.lengths[b] * (uint64_t)(Hkv * D * 2 * 2);
    }
    const uint64_t cap16 = (uint64_t)(B * Hkv * L * D * 2 * 2);
    demo_row_line(row, "%-8s %12s %9s %10s %10s %12s %8s %s", "cache", "bytes", "vs 16-bit",
                  "us/call", "speedup", "rel.err", "worst", "check vs own dequantised cache");
    demo_row_line(row, "%-8s %12llu %8.3fx %10.1f %10s %12.3g %8s %s", "bf16",
                  (unsigned long long)cap16, 1.0, t16 * 1e6, "1.00", err16, "-",
                  tool_compare_pass(&c16) ? "(vs double reference) ok" : "(vs double) FAIL");
    int pass = st == CLKV_OK && tool_compare_pass(&c16);
    double rel[2] = {NAN, NAN}, tq[2] = {NAN, NAN};
    double worst = c16.max_abs_err;
    const int bits[2] = {2, 4};
    for (int ib = 0; ib < 2 && st == CLKV_OK; ib++) {
        clkv_quant_cache *cache = NULL;
        clkv_quant_cache_create_args ca = CLKV_QUANT_CACHE_CREATE_ARGS_INIT;
        ca.batch = B, ca.kv_heads = Hkv, ca.head_dim = D, ca.capacity = L;
        ca.k_bits = ca.v_bits = bits[ib];
        ca.group = cfg->group, ca.residual = cfg->residual;
        ca.res_dtype = CLKV_BF16, ca.meta_dtype = CLKV_F16;
        what = "quant-cache: clkv_quant_cache_create";
        st = clkv_quant_cache_create(ctx, &ca, &cache);
        if (st == CLKV_OK) {
            what = "quant-cache: clkv_quant_cache_append";
            clkv_quant_cache_append_args aa = CLKV_QUANT_CACHE_APPEND_ARGS_INIT;
            aa.k = da.k;
            aa.v = da.v;
            aa.counts = da.lengths;
            st = clkv_quant_cache_append(cache, &aa, NULL);
        }
        demo_quant_call qc = {.cache = cache};
        clkv_attention_quant_decode_args qa = CLKV_ATTENTION_QUANT_DECODE_ARGS_INIT;
        qa.q = da.q;
        qa.o = da.o;
        qc.a = qa;
        if (st == CLKV_OK) {
            what = "quant-cache: clkv_attention_quant_decode";
            st = demo_time(ctx, demo_call_quant_decode, &qc, cfg->iters, cfg->repeats, &tq[ib]);
        }
        if (st == CLKV_OK) {
            st = tool_read(ctx, dout, o_host, (size_t)qn * 2);
        }
        if (st == CLKV_OK) {
            what = "quant-cache: view read-back";
            st = demo_quant_dequant(ctx, cache, &p, p.s.lengths, kd, vd);
        }
        if (st == CLKV_OK) {
            const uint64_t qbytes = demo_quant_cache_bytes(cache);
            /* The reference over the cache's own contents (the dequantised K/V). */
            demo_ref_attention_kv(&p, kd, vd, NULL, q, ref_q);
            tool_compare cq;
            tool_compare_init(&cq, CLKV_BF16);
            demo_compare(&cq, o_host, CLKV_BF16, ref_q, qn);
            rel[ib] = demo_rel_err(o_host, CLKV_BF16, ref, qn);
            worst = cq.max_abs_err > worst ? cq.max_abs_err : worst;
            pass = pass && tool_compare_pass(&cq) && isfinite(rel[ib]);
            char name[16];
            snprintf(name, sizeof name, "K%dV%d", bits[ib], bits[ib]);
            demo_row_line(row, "%-8s %12llu %8.3fx %10.1f %9.2fx %12.3g %8.3g %s", name,
                          (unsigned long long)qbytes, (double)qbytes / (double)cap16, tq[ib] * 1e6,
                          t16 / tq[ib], rel[ib], cq.worst_ratio,
                          tool_compare_pass(&cq) ? "ok" : "FAIL");
        }
        clkv_quant_cache_destroy(cache);
    }
    free(q);
    free(ref);
    free(ref_q);
    free(o_host);
    free(kd);
    free(vd);
    tool_release(&dq);
    tool_release(&dout);
    demo_problem_free(&p);
    if (st != CLKV_OK) {
        return report_failure(ctx, st, what);
    }
    const int order_ok = rel[0] > rel[1] && rel[1] <= cfg->max_rel_err_4bit;
    pass = pass && order_ok;
    demo_row_result(row, tq[0] * 1e6, worst, pass);
    snprintf(row->note, sizeof row->note,
             "us/call = K2V2; group 32, n_r 128; rel.err vs full bf16 reference: 2-bit %.3g > "
             "4-bit %.3g <= %.2g %s; bf16 reads %.1f MB",
             rel[0], rel[1], cfg->max_rel_err_4bit, order_ok ? "(ok)" : "(FAILED)",
             (double)bytes16 * 1e-6);
    return TOOL_EXIT_OK;
}
