/* `clkv demo` step "eviction": every scorer of clkv/score.h at a 10 % budget on a
 * synthetic cache with planted needle keys (aligned with the window and follow-up
 * queries), then decode attention on the compacted cache.
 *
 * Per method: clkv_evict_keep_set (window attention + scorer + keep-set; AdaKV: the
 * SnapKV scores, clkv_budget_adakv per-head budgets and clkv_select_topk with them),
 * clkv_compact_kv into a dense [B, Hkv, K, D] cache with per-head lengths, and
 * clkv_attention_decode over it for a few follow-up queries.
 *
 * Checks (the step fails when any does):
 *   - kept counts exact: the keep formula of score.h (clkv_keep_count with the method's
 *     protected window) per (sequence, KV head); AdaKV: sum over heads = Hkv * min(k, n);
 *   - kept lists valid: ascending distinct positions inside [0, n);
 *   - StreamingLLM keeps exactly the 4 sinks and the most recent tokens;
 *   - DropKV and SnapKV keep at least min_needles of the needles (their scores see
 *     the window queries, which point at the needles; the budget leaves room for
 *     every needle's 11-token average-pooling neighbourhood, which DropKV's pooling
 *     spreads its score over); H2O at least 0.8 * min_needles: its cumulative attention
 *     sums over ALL prompt queries, most of which do not point at the needles (measured
 *     on an H200 at GPU sizes: 845 of 1024 needles, 82.5 %; 100 % at CPU sizes);
 *   - the decode output on each compacted cache matches a double reference over the
 *     same kept tokens (bf16 tolerance), and its error vs full attention is finite.
 * AdaKV's budget k is one number per call: 10 % of the longest sequence, so a shorter
 * sequence keeps a larger fraction (the kept column shows the total).
 * Reported: kept fraction, needles kept, relative error vs the full cache (max over the
 * follow-up queries), time of the eviction (keep-set + compaction). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "demo.h"
#include "demo_util.h"
#include "reference.h"
#include "tool_data.h"

typedef struct demo_evict_cfg {
    demo_problem_spec p;
    int64_t window;     /* W window queries of the window methods */
    int64_t h2o_rows;   /* prompt query rows H2O reads (the last ones) */
    int followups;      /* follow-up decode queries */
    double min_needles; /* fraction DropKV / SnapKV / H2O must keep */
    int iters, repeats;
} demo_evict_cfg;

const demo_evict_cfg demo_evict_cpu = {.p = DEMO_NEEDLE_SPEC(2048, 2048, 1500, 12, 7.0f, 700u),
                                       .window = 32,
                                       .h2o_rows = 128,
                                       .followups = 4,
                                       .min_needles = 0.9,
                                       .iters = 1,
                                       .repeats = 1};
const demo_evict_cfg demo_evict_gpu = {.p = DEMO_NEEDLE_SPEC(16384, 16384, 10000, 64, 7.0f, 700u),
                                       .window = 32,
                                       .h2o_rows = 16384,
                                       .followups = 4,
                                       .min_needles = 0.9,
                                       .iters = 5,
                                       .repeats = 3};

typedef struct ev_method {
    const char *name;    /* clkv_score_method_from_name */
    const char *label;   /* printed */
    int adakv;           /* AdaKV budgets over this method's scores */
    double needle_scale; /* must keep needle_scale * min_needles of the needles (0: no check) */
} ev_method;

static const ev_method ev_methods[] = {
    {"dropkv", "dropkv", 0, 1.0},
    {"snapkv", "snapkv", 0, 1.0},
    {"h2o", "h2o", 0, 0.8},
    {"streamingllm", "streamingllm", 0, 0},
    {"knorm", "knorm", 0, 0},
    {"keydiff", "keydiff", 0, 0},
    {"criticalkv", "criticalkv", 0, 0},
    {"andpro", "andpro", 0, 0},
    {"snapkv", "snapkv+adakv", 1, 0},
};
#define EV_NMETHODS ((int)(sizeof ev_methods / sizeof ev_methods[0]))

/* Device state of one method's pipeline. */
typedef struct ev_run {
    clkv_context *ctx;
    clkv_evict_args ea;
    int adakv;
    clkv_budget_adakv_args ba;
    clkv_select_topk_args ta;
    clkv_compact_kv_args ca;
} ev_run;

static clkv_status ev_pipeline(void *arg) {
    ev_run *r = arg;
    clkv_status st = clkv_evict_keep_set(r->ctx, &r->ea, NULL);
    if (st == CLKV_OK && r->adakv) {
        st = clkv_budget_adakv(r->ctx, &r->ba, NULL);
        if (st == CLKV_OK) {
            st = clkv_select_topk(r->ctx, &r->ta, NULL);
        }
    }
    if (st == CLKV_OK) {
        st = clkv_compact_kv(r->ctx, &r->ca, NULL);
    }
    return st;
}

int demo_evict(demo_env *env, const void *vcfg, demo_row *row) {
    const demo_evict_cfg *cfg = vcfg;
    clkv_context *ctx = env->ctx;
    demo_problem p;
    clkv_status st = demo_problem_create(ctx, &cfg->p, &p);
    if (st != CLKV_OK) {
        return report_failure(ctx, st, "eviction: problem");
    }
    const int64_t B = p.s.B, Hq = p.s.Hq, Hkv = p.s.Hkv, D = p.s.D, L = p.s.L, W = cfg->window;
    int64_t total_len = 0;
    const int64_t max_len = demo_problem_max_length(&p, &total_len);
    const int64_t TH = cfg->h2o_rows < max_len ? cfg->h2o_rows : max_len;
    const int64_t kada = clkv_keep_count(max_len, 0.1, -1, 0);
    int64_t K = clkv_keep_count(max_len, 0.1, -1, W);
    K = K > Hkv * kada ? K : Hkv * kada;
    K = K < max_len ? K : max_len;
    demo_row_shape(row, &p, "len", " 10%");
    snprintf(row->dtype, sizeof row->dtype, "bf16");
    const int64_t qn = B * Hq * D, F = cfg->followups;
    float *qw = demo_problem_queries(&p, W, 1000), *qh = demo_problem_queries(&p, TH, 1000);
    float *qf = demo_problem_followups(&p, F, 2000);
    double *ref_full = malloc((size_t)(F * qn) * sizeof(double));
    double *ref_kept = malloc((size_t)qn * sizeof(double));
    void *o_host = malloc((size_t)qn * 2);
    int32_t *idx = malloc((size_t)(B * Hkv * K) * sizeof(int32_t));
    int32_t *cnt = malloc((size_t)(B * Hkv) * sizeof(int32_t));
    cl_mem dqw = NULL, dqh = NULL, dqf = NULL, dout = NULL, didx = NULL, dcnt = NULL;
    cl_mem dkd = NULL, dvd = NULL, dnl = NULL, dsc = NULL, dkpr = NULL;
    const char *what = "eviction: host memory";
    if (!qw || !qh || !qf || !ref_full || !ref_kept || !o_host || !idx || !cnt) {
        st = CLKV_ERR_OUT_OF_HOST_MEMORY;
    }
    const demo_buffer bufs[] = {
        {"eviction window q", CLKV_BF16, B * Hq * W * D, qw, &dqw},
        {"eviction h2o q", CLKV_BF16, B * Hq * TH * D, qh, &dqh},
        {"eviction follow-up q", CLKV_BF16, F * qn, qf, &dqf},
        {"eviction o", CLKV_BF16, qn, NULL, &dout},
        {"eviction indices", CLKV_I32, B * Hkv * K, NULL, &didx},
        {"eviction counts", CLKV_I32, B * Hkv, NULL, &dcnt},
        {"eviction k_dst", CLKV_BF16, B * Hkv * K * D, NULL, &dkd},
        {"eviction v_dst", CLKV_BF16, B * Hkv * K * D, NULL, &dvd},
        {"eviction new lengths", CLKV_I32, B * Hkv, NULL, &dnl},
        {"eviction scores", CLKV_F32, B * Hkv * L, NULL, &dsc},
        {"eviction k_per_row", CLKV_I32, B * Hkv, NULL, &dkpr},
    };
    const size_t nbufs = sizeof bufs / sizeof bufs[0];
    if (st == CLKV_OK) {
        what = "eviction: buffers";
        for (int64_t f = 0; f < F; f++) {
            demo_ref_attention(&p, qf + f * qn, NULL, 0, NULL, ref_full + f * qn, NULL);
        }
        st = demo_buffers(ctx, bufs, nbufs);
    }
    const clkv_tensor tk = clkv_tensor_4d(p.dk, CLKV_BF16, B, Hkv, L, D);
    const clkv_tensor tv = clkv_tensor_4d(p.dv, CLKV_BF16, B, Hkv, L, D);
    const clkv_tensor tlen = clkv_tensor_1d(p.dlen, CLKV_I32, B);
    int pass = st == CLKV_OK;
    double worst_err = 0.0, t_first = NAN;
    demo_row_line(row, "%-14s %8s %13s %10s %12s %12s %s", "method", "kept", "needles kept",
                  "evict ms", "rel.err", "vs kept ref", "checks");
    for (int mi = 0; mi < EV_NMETHODS && st == CLKV_OK; mi++) {
        const ev_method *em = &ev_methods[mi];
        ev_run r;
        memset(&r, 0, sizeof r);
        r.ctx = ctx;
        r.adakv = em->adakv;
        clkv_evict_args ea = CLKV_EVICT_ARGS_INIT;
        ea.method_name = em->name;
        what = "clkv_score_method_from_name";
        st = clkv_score_method_from_name(em->name, &ea.score.method);
        if (st != CLKV_OK) {
            break;
        }
        const int h2o = ea.score.method == CLKV_SCORE_H2O;
        const int uses_window = clkv_score_method_uses_window(ea.score.method);
        if (uses_window) {
            ea.score.q = h2o ? clkv_tensor_4d(dqh, CLKV_BF16, B, Hq, TH, D)
                             : clkv_tensor_4d(dqw, CLKV_BF16, B, Hq, W, D);
        }
        ea.score.k = tk;
        ea.score.v = tv;
        ea.score.lengths = tlen;
        ea.score.max_length = max_len;
        ea.score.scores = clkv_tensor_3d(dsc, CLKV_F32, B, Hkv, L);
        ea.indices = clkv_tensor_3d(didx, CLKV_I32, B, Hkv, K);
        ea.counts = clkv_tensor_2d(dcnt, CLKV_I32, B, Hkv);
        ea.ratio = 0.1;
        r.ea = ea;
        /* The protected window of the keep formula (score.h). */
        int64_t win = 0;
        if (ea.score.method == CLKV_SCORE_STREAMINGLLM) {
            win = ea.score.sink + ea.score.recent;
        } else if (uses_window && !h2o) {
            win = W;
        }
        if (em->adakv) {
            clkv_budget_adakv_args ba = CLKV_BUDGET_ADAKV_ARGS_INIT;
            ba.scores = ea.score.scores;
            ba.lengths = tlen;
            ba.k_per_row = clkv_tensor_2d(dkpr, CLKV_I32, B, Hkv);
            ba.max_length = max_len;
            ba.k = kada;
            r.ba = ba;
            clkv_select_topk_args ta = CLKV_SELECT_TOPK_ARGS_INIT;
            ta.scores = ea.score.scores;
            ta.lengths = tlen;
            ta.k_per_row = ba.k_per_row;
            ta.indices = ea.indices;
            ta.counts = ea.counts;
            ta.max_length = max_len;
            ta.k = K;
            r.ta = ta;
        }
        clkv_compact_kv_args ca = CLKV_COMPACT_KV_ARGS_INIT;
        ca.k_src = tk;
        ca.v_src = tv;
        ca.indices = ea.indices;
        ca.counts = ea.counts;
        ca.k_dst = clkv_tensor_4d(dkd, CLKV_BF16, B, Hkv, K, D);
        ca.v_dst = clkv_tensor_4d(dvd, CLKV_BF16, B, Hkv, K, D);
        ca.new_lengths = clkv_tensor_2d(dnl, CLKV_I32, B, Hkv);
        r.ca = ca;
        double t_ev = NAN;
        what = em->label;
        st = demo_time(ctx, ev_pipeline, &r, h2o ? 1 : cfg->iters, cfg->repeats, &t_ev);
        if (st == CLKV_OK) {
            st = tool_read(ctx, didx, idx, (size_t)(B * Hkv * K) * 4);
        }
        if (st == CLKV_OK) {
            st = tool_read(ctx, dcnt, cnt, (size_t)(B * Hkv) * 4);
        }
        if (st != CLKV_OK) {
            break;
        }
        /* Counts, lists, needles, StreamingLLM's exact set. */
        int counts_ok = 1, lists_ok = 1, stream_ok = 1;
        int64_t kept = 0, needles = 0, needles_kept = 0;
        for (int64_t b = 0; b < B; b++) {
            const int64_t n = p.s.lengths[b];
            int64_t sum = 0;
            for (int64_t h = 0; h < Hkv; h++) {
                const int64_t bh = b * Hkv + h, c = cnt[bh];
                const int32_t *li = idx + bh * K;
                sum += c;
                kept += c;
                if (!em->adakv) {
                    counts_ok &= c == clkv_keep_count(n, 0.1, -1, win);
                }
                if (c < 0 || c > K) {
                    lists_ok = 0;
                    continue;
                }
                lists_ok &= demo_list_valid(li, c, n);
                for (int64_t i = c; i < K; i++) {
                    lists_ok &= li[i] == -1;
                }
                if (ea.score.method == CLKV_SCORE_STREAMINGLLM) {
                    const int64_t sink = ea.score.sink < c ? ea.score.sink : c;
                    for (int64_t i = 0; i < c; i++) {
                        const int64_t want = i < sink ? i : n - (c - i);
                        stream_ok &= li[i] == want;
                    }
                }
                needles += p.s.needles;
                needles_kept += demo_needles_kept(&p, bh, li, c);
            }
            if (em->adakv) {
                counts_ok &= sum == Hkv * (kada < n ? kada : n);
            }
        }
        const double nfrac = needles ? (double)needles_kept / (double)needles : 0.0;
        const int needles_ok =
            em->needle_scale == 0.0 || nfrac >= em->needle_scale * cfg->min_needles;
        /* Decode over the compacted cache for each follow-up query. */
        tool_compare ck;
        tool_compare_init(&ck, CLKV_BF16);
        double err = 0.0;
        for (int64_t f = 0; f < F && st == CLKV_OK && lists_ok; f++) {
            clkv_attention_decode_args da = CLKV_ATTENTION_DECODE_ARGS_INIT;
            da.q = clkv_tensor_3d(dqf, CLKV_BF16, B, Hq, D);
            da.q.offset = (uint64_t)(f * qn) * 2;
            da.k = ca.k_dst;
            da.v = ca.v_dst;
            da.lengths = clkv_tensor_2d(dnl, CLKV_I32, B, Hkv);
            da.o = clkv_tensor_3d(dout, CLKV_BF16, B, Hq, D);
            da.max_length = K;
            what = "eviction: clkv_attention_decode on the compacted cache";
            st = clkv_attention_decode(ctx, &da, NULL);
            if (st == CLKV_OK) {
                st = tool_read(ctx, dout, o_host, (size_t)qn * 2);
            }
            if (st != CLKV_OK) {
                break;
            }
            demo_ref_attention(&p, qf + f * qn, idx, K, cnt, ref_kept, NULL);
            demo_compare(&ck, o_host, CLKV_BF16, ref_kept, qn);
            const double e = demo_rel_err(o_host, CLKV_BF16, ref_full + f * qn, qn);
            err = e > err || isnan(e) ? e : err;
        }
        if (st != CLKV_OK) {
            break;
        }
        const int ok = counts_ok && lists_ok && stream_ok && needles_ok && tool_compare_pass(&ck) &&
                       isfinite(err);
        pass = pass && ok;
        if (mi == 0) {
            t_first = t_ev;
        }
        worst_err = ck.max_abs_err > worst_err ? ck.max_abs_err : worst_err;
        char checks[128];
        snprintf(checks, sizeof checks, "%s%s%s%s%s",
                 ok ? "ok" : "FAIL:", counts_ok ? "" : " counts", lists_ok ? "" : " lists",
                 stream_ok ? "" : " streaming-set", needles_ok ? "" : " needles");
        demo_row_line(row, "%-14s %7.2f%% %6lld/%-6lld %10.2f %12.3g %12s %s", em->label,
                      100.0 * (double)kept / (double)(Hkv * total_len), (long long)needles_kept,
                      (long long)needles, t_ev * 1e3, err, tool_compare_pass(&ck) ? "ok" : "FAIL",
                      checks);
    }
    free(qw);
    free(qh);
    free(qf);
    free(ref_full);
    free(ref_kept);
    free(o_host);
    free(idx);
    free(cnt);
    demo_buffers_release(bufs, nbufs);
    demo_problem_free(&p);
    if (st != CLKV_OK) {
        return report_failure(ctx, st, what);
    }
    demo_row_result(row, t_first * 1e6, worst_err, pass);
    snprintf(row->note, sizeof row->note,
             "us/call = dropkv eviction (keep-set + compaction); %d needles per KV head; window "
             "W=%lld, H2O over the last %lld prompt queries; rel.err = max over %d follow-up "
             "queries vs the full cache",
             cfg->p.needles, (long long)W, (long long)TH, cfg->followups);
    return TOOL_EXIT_OK;
}
