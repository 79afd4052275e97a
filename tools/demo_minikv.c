/* `clkv demo` step "minikv": MiniKV (clkv/minikv.h) on a needle cache: two-pass prefill
 * over all prompt queries (cumulative attention), heavy hitters 25 % + recent 25 %,
 * hand-off into a 2-bit quantized cache (default groups of 16, n_r 128, bf16 residual),
 * then fused quantized decode attention for a few follow-up queries.
 *
 * Checks (the step fails when any does):
 *   - the prefill's output at the last prompt position of every sequence matches the
 *     double reference of causal attention (bf16 tolerance);
 *   - kept counts equal clkv_minikv_budget; the lists are ascending, inside [0, n) and
 *     contain the whole recent window;
 *   - at least min_needles of the needles are kept (the prompt queries point at them, so
 *     their cumulative attention is high);
 *   - each decode output matches a double reference over the cache's own dequantised
 *     contents (bf16 tolerance) and its error vs full attention is finite.
 * Reported: kept fraction, needles kept, error vs full attention of the 2-bit decode and
 * of exact (16-bit) attention over the same kept tokens, cache bytes vs the 16-bit
 * cache, prefill / load / decode times. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "cli.h"
#include "demo.h"
#include "reference.h"
#include "tool_data.h"

typedef struct demo_minikv_cfg {
    demo_problem_spec p; /* L = the longest prompt */
    int followups;
    double min_needles;
    int iters, repeats;
} demo_minikv_cfg;

const demo_minikv_cfg demo_minikv_cpu = {.p = {.B = 2,
                                               .Hq = 32,
                                               .Hkv = 8,
                                               .D = 128,
                                               .L = 1024,
                                               .lengths = {1024, 700},
                                               .dtype = CLKV_BF16,
                                               .needles = 8,
                                               .needle_gain = 7.0f,
                                               .query_gain = 16.0f,
                                               .seed = 900u},
                                         .followups = 3,
                                         .min_needles = 0.9,
                                         .iters = 3,
                                         .repeats = 3};
const demo_minikv_cfg demo_minikv_gpu = {.p = {.B = 2,
                                               .Hq = 32,
                                               .Hkv = 8,
                                               .D = 128,
                                               .L = 16384,
                                               .lengths = {16384, 10000},
                                               .dtype = CLKV_BF16,
                                               .needles = 32,
                                               .needle_gain = 7.0f,
                                               .query_gain = 16.0f,
                                               .seed = 900u},
                                         .followups = 3,
                                         .min_needles = 0.9,
                                         .iters = 50,
                                         .repeats = 9};

typedef struct qd_call {
    clkv_quant_cache *cache;
    clkv_attention_quant_decode_args a;
} qd_call;

static clkv_status call_quant(void *arg) {
    qd_call *c = arg;
    return clkv_attention_quant_decode(c->cache, &c->a, NULL);
}

static uint64_t tensor_bytes(const clkv_tensor *t) {
    uint64_t n = 1;
    for (int i = 0; i < t->ndim; i++) {
        n *= (uint64_t)t->dims[i];
    }
    return n * clkv_dtype_size(t->dtype);
}

int demo_minikv(demo_env *env, const void *vcfg, demo_row *row) {
    const demo_minikv_cfg *cfg = vcfg;
    clkv_context *ctx = env->ctx;
    demo_problem p;
    clkv_status st = demo_problem_create(ctx, &cfg->p, &p);
    if (st != CLKV_OK) {
        return report_failure(ctx, st, "minikv: problem");
    }
    const int64_t B = p.s.B, Hq = p.s.Hq, Hkv = p.s.Hkv, D = p.s.D, L = p.s.L;
    int64_t T = 0, total = 0;
    for (int64_t b = 0; b < B; b++) {
        T = p.s.lengths[b] > T ? p.s.lengths[b] : T;
        total += p.s.lengths[b];
    }
    const int64_t K = clkv_minikv_budget(T, 0.25, 0.25, -1, NULL, NULL);
    snprintf(row->shape, sizeof row->shape, "B=%lld Hq=%lld Hkv=%lld D=%lld prompt={%d,%d}",
             (long long)B, (long long)Hq, (long long)Hkv, (long long)D, p.s.lengths[0],
             B > 1 ? p.s.lengths[1] : 0);
    snprintf(row->dtype, sizeof row->dtype, "bf16->K2V2");
    const int64_t qn = B * Hq * D, F = cfg->followups;
    float *qp = demo_problem_queries(&p, T, 3000);
    float *qf = malloc((size_t)(F * qn) * sizeof(float));
    float *qlast = malloc((size_t)qn * sizeof(float));
    double *ref = malloc((size_t)qn * sizeof(double));
    double *ref2 = malloc((size_t)qn * sizeof(double));
    void *o_host = malloc((size_t)qn * 2);
    void *op_host = malloc((size_t)(B * Hq * T * D) * 2);
    int32_t *idx = malloc((size_t)(B * Hkv * K) * sizeof(int32_t));
    int32_t *cnt_bh = malloc((size_t)(B * Hkv) * sizeof(int32_t));
    int32_t cnt[DEMO_MAX_B];
    float *kd = calloc((size_t)(B * Hkv * L * D), sizeof(float));
    float *vd = calloc((size_t)(B * Hkv * L * D), sizeof(float));
    cl_mem dqp = NULL, dop = NULL, didx = NULL, dcnt = NULL, dqf = NULL, dout = NULL;
    clkv_quant_cache *cache = NULL;
    const char *what = "minikv: host memory";
    if (!qp || !qf || !qlast || !ref || !ref2 || !o_host || !op_host || !idx || !cnt_bh || !kd ||
        !vd) {
        st = CLKV_ERR_OUT_OF_HOST_MEMORY;
    }
    if (st == CLKV_OK) {
        what = "minikv: buffers";
        for (int64_t f = 0; f < F; f++) {
            demo_problem_query(&p, (int)(4000 + f), 1.5707963 * (double)(f + 1) / (double)(F + 1),
                               qf + f * qn);
        }
        st = demo_upload(ctx, "minikv prompt q", qp, B * Hq * T * D, CLKV_BF16, &dqp);
    }
    if (st == CLKV_OK) {
        st = demo_upload(ctx, "minikv follow-up q", qf, F * qn, CLKV_BF16, &dqf);
    }
    if (st == CLKV_OK) {
        st = tool_buffer(ctx, "minikv prefill o", (uint64_t)(B * Hq * T * D) * 2, &dop);
    }
    if (st == CLKV_OK) {
        st = tool_buffer(ctx, "minikv indices", (uint64_t)(B * Hkv * K) * 4, &didx);
    }
    if (st == CLKV_OK) {
        st = tool_buffer(ctx, "minikv counts", (uint64_t)B * 4, &dcnt);
    }
    if (st == CLKV_OK) {
        st = tool_buffer(ctx, "minikv o", (uint64_t)qn * 2, &dout);
    }
    clkv_minikv_prefill_args pa = CLKV_MINIKV_PREFILL_ARGS_INIT;
    pa.q = clkv_tensor_4d(dqp, CLKV_BF16, B, Hq, T, D);
    pa.k = clkv_tensor_4d(p.dk, CLKV_BF16, B, Hkv, L, D);
    pa.v = clkv_tensor_4d(p.dv, CLKV_BF16, B, Hkv, L, D);
    pa.lengths = clkv_tensor_1d(p.dlen, CLKV_I32, B);
    pa.o = clkv_tensor_4d(dop, CLKV_BF16, B, Hq, T, D);
    pa.indices = clkv_tensor_3d(didx, CLKV_I32, B, Hkv, K);
    pa.counts = clkv_tensor_1d(dcnt, CLKV_I32, B);
    pa.max_length = T;
    double t_prefill = NAN, t_load = NAN, t_dec = NAN;
    if (st == CLKV_OK) {
        what = "clkv_minikv_prefill";
        const double t0 = tool_now();
        st = clkv_minikv_prefill(ctx, &pa, NULL);
        if (st == CLKV_OK) {
            st = clkv_context_finish(ctx);
        }
        t_prefill = tool_now() - t0; /* includes the program builds of a first run */
    }
    if (st == CLKV_OK) {
        st = tool_read(ctx, dop, op_host, (size_t)(B * Hq * T * D) * 2);
    }
    if (st == CLKV_OK) {
        st = tool_read(ctx, didx, idx, (size_t)(B * Hkv * K) * 4);
    }
    if (st == CLKV_OK) {
        st = tool_read(ctx, dcnt, cnt, (size_t)B * 4);
    }
    /* Prefill output at the last position of every sequence (row T - 1). */
    tool_compare cp;
    tool_compare_init(&cp, CLKV_BF16);
    int counts_ok = 1, lists_ok = 1;
    int64_t needles = 0, needles_kept = 0, kept = 0;
    if (st == CLKV_OK) {
        for (int64_t bh = 0; bh < B * Hq; bh++) {
            memcpy(qlast + bh * D, qp + (bh * T + T - 1) * D, (size_t)D * sizeof(float));
        }
        demo_ref_attention(&p, qlast, NULL, 0, NULL, ref, NULL);
        for (int64_t bh = 0; bh < B * Hq; bh++) {
            for (int64_t d = 0; d < D; d++) {
                const double x = tool_load(op_host, CLKV_BF16, (size_t)((bh * T + T - 1) * D + d));
                tool_compare_value(&cp, x, ref[bh * D + d]);
            }
        }
        for (int64_t b = 0; b < B; b++) {
            const int64_t n = p.s.lengths[b];
            int64_t recent = 0;
            counts_ok &= cnt[b] == clkv_minikv_budget(n, 0.25, 0.25, -1, NULL, &recent);
            const int64_t c = cnt[b] < 0 ? 0 : (cnt[b] > K ? K : cnt[b]);
            for (int64_t h = 0; h < Hkv; h++) {
                const int64_t bh = b * Hkv + h;
                const int32_t *li = idx + bh * K;
                cnt_bh[bh] = (int32_t)c;
                kept += c;
                int64_t in_recent = 0;
                for (int64_t i = 0; i < c; i++) {
                    lists_ok &= li[i] >= 0 && li[i] < n && (i == 0 || li[i] > li[i - 1]);
                    in_recent += li[i] >= n - recent && li[i] < n;
                }
                lists_ok &= in_recent == recent;
                for (int32_t j = 0; j < p.s.needles; j++) {
                    needles++;
                    for (int64_t i = 0; i < c; i++) {
                        needles_kept += li[i] == p.needles[bh * p.s.needles + j];
                    }
                }
            }
        }
    }
    /* Hand-off into a 2-bit cache and decode. */
    if (st == CLKV_OK) {
        what = "clkv_quant_cache_create";
        clkv_quant_cache_create_args ca = CLKV_QUANT_CACHE_CREATE_ARGS_INIT;
        ca.batch = B, ca.kv_heads = Hkv, ca.head_dim = D, ca.capacity = K + 256;
        ca.res_dtype = CLKV_BF16;
        st = clkv_quant_cache_create(ctx, &ca, &cache);
    }
    if (st == CLKV_OK) {
        what = "clkv_minikv_load_cache";
        clkv_minikv_load_args la = CLKV_MINIKV_LOAD_ARGS_INIT;
        la.k = pa.k;
        la.v = pa.v;
        la.indices = pa.indices;
        la.counts = pa.counts;
        const double t0 = tool_now();
        st = clkv_minikv_load_cache(cache, &la, NULL);
        if (st == CLKV_OK) {
            st = clkv_context_finish(ctx);
        }
        t_load = tool_now() - t0;
    }
    if (st == CLKV_OK) {
        what = "minikv: cache read-back";
        st = demo_quant_dequant(ctx, cache, &p, cnt, kd, vd);
    }
    tool_compare cd;
    tool_compare_init(&cd, CLKV_BF16);
    double err_q = 0.0, err_sel = 0.0;
    qd_call qc = {.cache = cache};
    for (int64_t f = 0; f < F && st == CLKV_OK; f++) {
        clkv_attention_quant_decode_args qa = CLKV_ATTENTION_QUANT_DECODE_ARGS_INIT;
        qa.q = clkv_tensor_3d(dqf, CLKV_BF16, B, Hq, D);
        qa.q.offset = (uint64_t)(f * qn) * 2;
        qa.o = clkv_tensor_3d(dout, CLKV_BF16, B, Hq, D);
        qc.a = qa;
        what = "clkv_attention_quant_decode";
        st = clkv_attention_quant_decode(cache, &qa, NULL);
        if (st == CLKV_OK) {
            st = tool_read(ctx, dout, o_host, (size_t)qn * 2);
        }
        if (st != CLKV_OK) {
            break;
        }
        const float *qq = qf + f * qn;
        /* Exact attention over the kept tokens (16-bit) and over the whole prompt. */
        demo_ref_attention(&p, qq, idx, K, cnt_bh, ref2, NULL);
        demo_ref_attention(&p, qq, NULL, 0, NULL, ref, NULL);
        double num = 0.0, den = 0.0;
        for (int64_t i = 0; i < qn; i++) {
            num += (ref2[i] - ref[i]) * (ref2[i] - ref[i]);
            den += ref[i] * ref[i];
        }
        const double es = sqrt(num / den);
        err_sel = es > err_sel ? es : err_sel;
        const double eq = demo_rel_err(o_host, CLKV_BF16, ref, qn);
        err_q = eq > err_q || isnan(eq) ? eq : err_q;
        /* The cache's own contents: cache token i of (b, h) is kept token i. */
        float *k0 = p.k, *v0 = p.v;
        int32_t len0[DEMO_MAX_B];
        memcpy(len0, p.s.lengths, sizeof len0);
        p.k = kd, p.v = vd;
        memcpy(p.s.lengths, cnt, (size_t)B * sizeof(int32_t));
        demo_ref_attention(&p, qq, NULL, 0, NULL, ref2, NULL);
        p.k = k0, p.v = v0;
        memcpy(p.s.lengths, len0, sizeof len0);
        for (int64_t i = 0; i < qn; i++) {
            tool_compare_value(&cd, tool_load(o_host, CLKV_BF16, (size_t)i), ref2[i]);
        }
    }
    if (st == CLKV_OK) {
        what = "clkv_attention_quant_decode (timed)";
        st = demo_time(ctx, call_quant, &qc, cfg->iters, cfg->repeats, &t_dec);
    }
    uint64_t qbytes = 0;
    if (st == CLKV_OK) {
        clkv_quant_cache_view w;
        clkv_quant_cache_view_get(cache, &w);
        const clkv_tensor *ts[8] = {&w.k_codes, &w.k_scale, &w.k_min, &w.v_codes,
                                    &w.v_scale, &w.v_min,   &w.k_res, &w.v_res};
        for (int i = 0; i < 8; i++) {
            qbytes += tensor_bytes(ts[i]);
        }
    }
    clkv_quant_cache_destroy(cache);
    cl_mem *bufs[] = {&dqp, &dop, &didx, &dcnt, &dqf, &dout};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        tool_release(bufs[i]);
    }
    free(qp);
    free(qf);
    free(qlast);
    free(ref);
    free(ref2);
    free(o_host);
    free(op_host);
    free(idx);
    free(cnt_bh);
    free(kd);
    free(vd);
    demo_problem_free(&p);
    if (st != CLKV_OK) {
        return report_failure(ctx, st, what);
    }
    const double nfrac = needles ? (double)needles_kept / (double)needles : 0.0;
    const int needles_ok = nfrac >= cfg->min_needles;
    row->pass = tool_compare_pass(&cp) && counts_ok && lists_ok && needles_ok &&
                tool_compare_pass(&cd) && isfinite(err_q) && cd.count > 0;
    row->us_per_call = t_dec * 1e6;
    row->gbps = NAN;
    row->pct_bw = NAN;
    row->max_err = cd.max_abs_err > cp.max_abs_err ? cd.max_abs_err : cp.max_abs_err;
    row->max_lse_err = NAN;
    snprintf(row->note, sizeof row->note,
             "us/call = 2-bit decode over the kept tokens; heavy 25%% + recent 25%%, groups of "
             "16, n_r 128; %d needles per KV head",
             cfg->p.needles);
    const uint64_t full16 = (uint64_t)(total * Hkv * D * 2 * 2);
    demo_row_line(row, "%-32s %s (worst %.3g of bound)", "prefill o at the last position",
                  tool_compare_pass(&cp) ? "ok" : "FAIL", cp.worst_ratio);
    demo_row_line(row, "%-32s %.2f%% of the prompt; counts %s, lists %s", "kept",
                  100.0 * (double)kept / (double)(Hkv * total), counts_ok ? "ok" : "FAIL",
                  lists_ok ? "ok (recent window complete)" : "FAIL");
    demo_row_line(row, "%-32s %lld/%lld (%.3f, need >= %.2f)", "needles kept",
                  (long long)needles_kept, (long long)needles, nfrac, cfg->min_needles);
    demo_row_line(row, "%-32s %s (%lld values, worst %.3g of bound)",
                  "decode vs own dequantised cache", tool_compare_pass(&cd) ? "ok" : "FAIL",
                  (long long)cd.count, cd.worst_ratio);
    demo_row_line(row, "%-32s 2-bit MiniKV %.3g; exact attention over the kept set %.3g",
                  "rel.err vs full attention", err_q, err_sel);
    demo_row_line(row, "%-32s %llu allocated (K + 256 tokens) vs %llu (16-bit prompt): %.3fx",
                  "cache bytes", (unsigned long long)qbytes, (unsigned long long)full16,
                  (double)qbytes / (double)full16);
    demo_row_line(row, "%-32s prefill %.1f ms (incl. first-run builds), load %.2f ms", "time",
                  t_prefill * 1e3, t_load * 1e3);
    return TOOL_EXIT_OK;
}
