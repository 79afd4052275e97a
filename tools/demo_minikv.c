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
#include "demo_util.h"
#include "reference.h"
#include "tool_data.h"

typedef struct demo_minikv_cfg {
    demo_problem_spec p; /* L = the longest prompt */
    int followups;
    double min_needles;
    int iters, repeats;
} demo_minikv_cfg;

const demo_minikv_cfg demo_minikv_cpu = {.p = DEMO_NEEDLE_SPEC(1024, 1024, 700, 8, 7.0f, 900u),
                                         .followups = 3,
                                         .min_needles = 0.9,
                                         .iters = 3,
                                         .repeats = 3};
const demo_minikv_cfg demo_minikv_gpu = {.p = DEMO_NEEDLE_SPEC(16384, 16384, 10000, 32, 7.0f, 900u),
                                         .followups = 3,
                                         .min_needles = 0.9,
                                         .iters = 50,
                                         .repeats = 9};

int demo_minikv(demo_env *env, const void *vcfg, demo_row *row) {
    const demo_minikv_cfg *cfg = vcfg;
    clkv_context *ctx = env->ctx;
    demo_problem p;
    clkv_status st = demo_problem_create(ctx, &cfg->p, &p);
    if (st != CLKV_OK) {
        return report_failure(ctx, st, "minikv: problem");
    }
    const int64_t B = p.s.B, Hq = p.s.Hq, Hkv = p.s.Hkv, D = p.s.D, L = p.s.L;
    int64_t total = 0;
    const int64_t T = demo_problem_max_length(&p, &total);
    const int64_t K = clkv_minikv_budget(T, 0.25, 0.25, -1, NULL, NULL);
    demo_row_shape(row, &p, "prompt", "");
    snprintf(row->dtype, sizeof row->dtype, "bf16->K2V2");
    const int64_t qn = B * Hq * D, F = cfg->followups;
    float *qp = demo_problem_queries(&p, T, 3000);
    float *qf = demo_problem_followups(&p, F, 4000);
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
    const demo_buffer bufs[] = {
        {"minikv prompt q", CLKV_BF16, B * Hq * T * D, qp, &dqp},
        {"minikv follow-up q", CLKV_BF16, F * qn, qf, &dqf},
        {"minikv prefill o", CLKV_BF16, B * Hq * T * D, NULL, &dop},
        {"minikv indices", CLKV_I32, B * Hkv * K, NULL, &didx},
        {"minikv counts", CLKV_I32, B, NULL, &dcnt},
        {"minikv o", CLKV_BF16, qn, NULL, &dout},
    };
    const size_t nbufs = sizeof bufs / sizeof bufs[0];
    if (st == CLKV_OK) {
        what = "minikv: buffers";
        st = demo_buffers(ctx, bufs, nbufs);
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
                    in_recent += li[i] >= n - recent && li[i] < n;
                }
                lists_ok &= demo_list_valid(li, c, n) && in_recent == recent;
                needles += p.s.needles;
                needles_kept += demo_needles_kept(&p, bh, li, c);
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
    demo_quant_call qc = {.cache = cache};
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
        demo_ref_attention_kv(&p, kd, vd, cnt, qq, ref2);
        demo_compare(&cd, o_host, CLKV_BF16, ref2, qn);
    }
    if (st == CLKV_OK) {
        what = "clkv_attention_quant_decode (timed)";
        st = demo_time(ctx, demo_call_quant_decode, &qc, cfg->iters, cfg->repeats, &t_dec);
    }
    const uint64_t qbytes = st == CLKV_OK ? demo_quant_cache_bytes(cache) : 0;
    clkv_quant_cache_destroy(cache);
    demo_buffers_release(bufs, nbufs);
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
    demo_row_result(row, t_dec * 1e6,
                    cd.max_abs_err > cp.max_abs_err ? cd.max_abs_err : cp.max_abs_err,
                    tool_compare_pass(&cp) && counts_ok && lists_ok && needles_ok &&
                        tool_compare_pass(&cd) && isfinite(err_q) && cd.count > 0);
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
