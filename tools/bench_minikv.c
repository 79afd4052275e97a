/* `clkv bench minikv-prefill`: the MiniKV two-pass prefill (include/clkv/minikv.h) on
 * random data: pass 1 (clkv_attention_window with T = len and LSE), pass 2 (clkv_score
 * H2O column sums from that LSE) and the whole clkv_minikv_prefill (both passes plus the
 * heavy-hitter / recent-window selection), each timed on its own; TFLOP/s. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "cli.h"
#include "runtime/internal.h"
#include "tool_data.h"

#define MAX_REPEATS 1000
#define SEED_Q 311u
#define SEED_K 322u
#define SEED_V 333u

void usage_bench_minikv(FILE *f) {
    fprintf(f,
            "usage: clkv bench minikv-prefill [options]\n"
            "\n"
            "Times the MiniKV two-pass prefill of one layer on random data (every sequence\n"
            "holds len tokens, all of them query rows): pass 1 = causal attention with LSE\n"
            "(clkv_attention_window, T = len), pass 2 = cumulative attention column sums\n"
            "recomputing the logits from LSE (clkv_score, H2O), and the whole\n"
            "clkv_minikv_prefill call (both passes + heavy/recent selection, default 25%%/25%%).\n"
            "\n"
            "options:\n"
            "  --batch N        sequences B                                (default 1)\n"
            "  --len N          prompt tokens per sequence                 (default 8192)\n"
            "  --heads N        query heads Hq                             (default 32)\n"
            "  --kv-heads N     KV heads Hkv (Hq %% Hkv == 0)                (default 8)\n"
            "  --dim N          head dim D: 64, 128, 256                   (default 128)\n"
            "  --dtype T        f32 | f16 | bf16 for q, K, V and o         (default bf16)\n"
            "  --iters N        back-to-back calls per timed batch          (default 5)\n"
            "  --repeats N      timed batches; the median is reported       (default 5)\n"
            "  --warmup N       untimed calls after the first               (default 1)\n"
            "  --device SEL     \"P:D\", \"gpu\", \"cpu\" or a name substring\n"
            "  --format F       text | json                                 (default text)\n"
            "\n"
            "FLOPs: attention 4*D per visible (query, key) pair, B*Hq*len*(len+1)/2 pairs\n"
            "(causal; what flash attention does); pass 2 recomputes QK^T: 2*D per pair. The\n"
            "'total' TFLOP/s divides the attention FLOPs by the whole call, the figure to set\n"
            "against a flash-attention forward (e.g. tools/bench_torch_prefill.py). Check: the\n"
            "counts equal clkv_minikv_budget and every row of A_cumul sums to len (each query's\n"
            "probabilities sum to 1) within 1e-3 relative.\n");
}

typedef struct mk_opts {
    int64_t batch, len, hq, hkv, dim, iters, repeats, warmup;
    clkv_dtype dtype;
    const char *device;
    tool_format format;
} mk_opts;

static int parse_opts(int argc, char **argv, mk_opts *o) {
    memset(o, 0, sizeof *o);
    o->batch = 1, o->len = 8192, o->hq = 32, o->hkv = 8, o->dim = 128;
    o->iters = 5, o->repeats = 5, o->warmup = 1;
    o->dtype = CLKV_BF16;
    o->format = TOOL_FMT_TEXT;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int m, bad = 0;
        if (opt_is_help(argv[i])) {
            usage_bench_minikv(stdout);
            return 1;
        } else if ((m = opt_value(argc, argv, &i, "--batch", &v)) != 0) {
            bad = m < 0 || parse_int("--batch", v, 1, 1 << 16, &o->batch) != 0;
        } else if ((m = opt_value(argc, argv, &i, "--len", &v)) != 0) {
            bad = m < 0 || parse_int("--len", v, 1, ((int64_t)1 << 31) - 1, &o->len) != 0;
        } else if ((m = opt_value(argc, argv, &i, "--heads", &v)) != 0) {
            bad = m < 0 || parse_int("--heads", v, 1, 4096, &o->hq) != 0;
        } else if ((m = opt_value(argc, argv, &i, "--kv-heads", &v)) != 0) {
            bad = m < 0 || parse_int("--kv-heads", v, 1, 4096, &o->hkv) != 0;
        } else if ((m = opt_value(argc, argv, &i, "--dim", &v)) != 0) {
            bad = m < 0 || parse_int("--dim", v, 1, 4096, &o->dim) != 0;
        } else if ((m = opt_value(argc, argv, &i, "--dtype", &v)) != 0) {
            bad = m < 0 || parse_float_dtype("--dtype", v, &o->dtype) != 0;
        } else if ((m = opt_value(argc, argv, &i, "--iters", &v)) != 0) {
            bad = m < 0 || parse_int("--iters", v, 1, 100000, &o->iters) != 0;
        } else if ((m = opt_value(argc, argv, &i, "--repeats", &v)) != 0) {
            bad = m < 0 || parse_int("--repeats", v, 1, MAX_REPEATS, &o->repeats) != 0;
        } else if ((m = opt_value(argc, argv, &i, "--warmup", &v)) != 0) {
            bad = m < 0 || parse_int("--warmup", v, 0, 100000, &o->warmup) != 0;
        } else if ((m = opt_value(argc, argv, &i, "--device", &v)) != 0) {
            bad = m < 0;
            o->device = v;
        } else if ((m = opt_value(argc, argv, &i, "--format", &v)) != 0) {
            bad = m < 0 || tool_parse_format("--format", v, &o->format) != 0;
        } else {
            fprintf(stderr, "clkv bench minikv-prefill: unknown option '%s'\n", argv[i]);
            bad = 1;
        }
        if (bad)
            return -1;
    }
    if (o->hq % o->hkv != 0) {
        fprintf(stderr, "clkv: --heads %lld is not a multiple of --kv-heads %lld\n",
                (long long)o->hq, (long long)o->hkv);
        return -1;
    }
    if (o->format == TOOL_FMT_CSV) {
        fprintf(stderr, "clkv bench minikv-prefill: --format csv is not supported\n");
        return -1;
    }
    return 0;
}

typedef struct mk_bufs {
    cl_mem q, k, v, o, lse, acum, idx, counts;
} mk_bufs;

static void free_bufs(mk_bufs *b) {
    cl_mem *all[8] = {&b->q, &b->k, &b->v, &b->o, &b->lse, &b->acum, &b->idx, &b->counts};
    for (int i = 0; i < 8; i++)
        tool_release(all[i]);
}

/* One of the three timed operations. */
typedef enum mk_op { OP_PASS1 = 0, OP_PASS2 = 1, OP_TOTAL = 2 } mk_op;

typedef struct mk_calls {
    clkv_attention_window_args att;
    clkv_score_args score;
    clkv_minikv_prefill_args prefill;
} mk_calls;

static clkv_status call(clkv_context *ctx, const mk_calls *c, mk_op op) {
    if (op == OP_PASS1)
        return clkv_attention_window(ctx, &c->att, NULL);
    if (op == OP_PASS2)
        return clkv_score(ctx, &c->score, NULL);
    return clkv_minikv_prefill(ctx, &c->prefill, NULL);
}

static clkv_status time_batch(clkv_context *ctx, const mk_calls *c, mk_op op, int n, double *per) {
    const double t0 = tool_now();
    for (int i = 0; i < n; i++) {
        clkv_status st = call(ctx, c, op);
        if (st != CLKV_OK)
            return st;
    }
    clkv_status st = clkv_context_finish(ctx);
    *per = (tool_now() - t0) / (n > 0 ? n : 1);
    return st;
}

static clkv_status time_op(clkv_context *ctx, const mk_calls *c, mk_op op, const mk_opts *o,
                           double *median, double *first) {
    double warm, per[MAX_REPEATS];
    clkv_status st = time_batch(ctx, c, op, 1, first);
    if (st == CLKV_OK && o->warmup > 0)
        st = time_batch(ctx, c, op, (int)o->warmup, &warm);
    for (int i = 0; i < (int)o->repeats && st == CLKV_OK; i++)
        st = time_batch(ctx, c, op, (int)o->iters, &per[i]);
    if (st == CLKV_OK)
        *median = tool_median(per, (int)o->repeats);
    return st;
}

/* Counts vs clkv_minikv_budget; the last sequence's first A_cumul row sums to len. */
static clkv_status check(clkv_context *ctx, const mk_opts *o, const mk_bufs *b, int *pass,
                         double *rel_err) {
    const int64_t B = o->batch, L = o->len;
    int32_t *cnt = malloc((size_t)B * 4);
    float *row = malloc((size_t)L * 4);
    clkv_status st = CLKV_OK;
    if (!cnt || !row)
        st = clkv__fail(ctx, CLKV_ERR_OUT_OF_HOST_MEMORY, "check: out of host memory");
    if (st == CLKV_OK)
        st = tool_read(ctx, b->counts, cnt, (size_t)B * 4);
    if (st == CLKV_OK) {
        cl_int err = clEnqueueReadBuffer(clkv_context_queue(ctx), b->acum, CL_TRUE,
                                         (size_t)((B - 1) * o->hkv * L) * 4, (size_t)L * 4, row, 0,
                                         NULL, NULL);
        if (err != CL_SUCCESS)
            st = clkv__fail_cl(ctx, err, "check: reading a_cumul");
    }
    *pass = 0;
    *rel_err = NAN;
    if (st == CLKV_OK) {
        const int64_t want = clkv_minikv_budget(L, 0.25, 0.25, -1, NULL, NULL);
        int ok = 1;
        for (int64_t i = 0; i < B; i++)
            ok &= cnt[i] == want;
        double s = 0.0;
        for (int64_t j = 0; j < L; j++)
            s += row[j];
        *rel_err = fabs(s - (double)L) / (double)L;
        *pass = ok && *rel_err <= 1e-3;
    }
    free(cnt);
    free(row);
    return st;
}

int bench_minikv(int argc, char **argv) {
    mk_opts o;
    const int pr = parse_opts(argc, argv, &o);
    if (pr != 0) {
        if (pr < 0)
            usage_bench_minikv(stderr);
        return pr > 0 ? TOOL_EXIT_OK : TOOL_EXIT_USAGE;
    }
    clkv_context *ctx = NULL;
    clkv_status st = clkv_context_create(o.device, &ctx);
    if (st != CLKV_OK)
        return report_failure(NULL, st, "clkv_context_create");
    const clkv_device_info *info = clkv_context_device_info(ctx);
    const int64_t B = o.batch, Hq = o.hq, Hkv = o.hkv, D = o.dim, L = o.len;
    const int64_t K = clkv_minikv_budget(L, 0.25, 0.25, -1, NULL, NULL);
    const uint64_t es = clkv_dtype_size(o.dtype);
    const uint64_t nq = (uint64_t)(B * Hq * L * D), nkv = (uint64_t)(B * Hkv * L * D);
    mk_bufs b;
    memset(&b, 0, sizeof b);
    const char *what = "allocation";
    st = tool_buffer(ctx, "q", nq * es, &b.q);
    if (st == CLKV_OK)
        st = tool_buffer(ctx, "k", nkv * es, &b.k);
    if (st == CLKV_OK)
        st = tool_buffer(ctx, "v", nkv * es, &b.v);
    if (st == CLKV_OK)
        st = tool_buffer(ctx, "o", nq * es, &b.o);
    if (st == CLKV_OK)
        st = tool_buffer(ctx, "lse", (uint64_t)(B * Hq * L) * 4, &b.lse);
    if (st == CLKV_OK)
        st = tool_buffer(ctx, "a_cumul", (uint64_t)(B * Hkv * L) * 4, &b.acum);
    if (st == CLKV_OK)
        st = tool_buffer(ctx, "indices", (uint64_t)(B * Hkv * K) * 4, &b.idx);
    if (st == CLKV_OK)
        st = tool_buffer(ctx, "counts", (uint64_t)B * 4, &b.counts);
    if (st == CLKV_OK)
        st = tool_fill_random(ctx, b.q, o.dtype, nq, SEED_Q, 4.0f);
    if (st == CLKV_OK)
        st = tool_fill_random(ctx, b.k, o.dtype, nkv, SEED_K, 1.0f);
    if (st == CLKV_OK)
        st = tool_fill_random(ctx, b.v, o.dtype, nkv, SEED_V, 1.0f);
    mk_calls c;
    c.prefill = (clkv_minikv_prefill_args)CLKV_MINIKV_PREFILL_ARGS_INIT;
    c.prefill.q = clkv_tensor_4d(b.q, o.dtype, B, Hq, L, D);
    c.prefill.k = clkv_tensor_4d(b.k, o.dtype, B, Hkv, L, D);
    c.prefill.v = clkv_tensor_4d(b.v, o.dtype, B, Hkv, L, D);
    c.prefill.o = clkv_tensor_4d(b.o, o.dtype, B, Hq, L, D);
    c.prefill.lse = clkv_tensor_3d(b.lse, CLKV_F32, B, Hq, L);
    c.prefill.a_cumul = clkv_tensor_3d(b.acum, CLKV_F32, B, Hkv, L);
    c.prefill.indices = clkv_tensor_3d(b.idx, CLKV_I32, B, Hkv, K);
    c.prefill.counts = clkv_tensor_1d(b.counts, CLKV_I32, B);
    c.att = (clkv_attention_window_args)CLKV_ATTENTION_WINDOW_ARGS_INIT;
    c.att.q = c.prefill.q, c.att.k = c.prefill.k, c.att.v = c.prefill.v;
    c.att.o = c.prefill.o, c.att.lse = c.prefill.lse;
    c.score = (clkv_score_args)CLKV_SCORE_ARGS_INIT;
    c.score.method = CLKV_SCORE_H2O;
    c.score.q = c.prefill.q, c.score.k = c.prefill.k, c.score.lse = c.prefill.lse;
    c.score.scores = c.prefill.a_cumul;
    c.score.pool = CLKV_POOL_NONE;
    c.score.protect = 0;
    size_t ws = 0;
    if (st == CLKV_OK) {
        what = "clkv_minikv_prefill_workspace_size";
        st = clkv_minikv_prefill_workspace_size(ctx, &c.prefill, &ws);
    }
    double t[3] = {NAN, NAN, NAN}, first[3] = {NAN, NAN, NAN};
    const char *names[3] = {"pass1", "pass2", "total"};
    for (int op = 0; op < 3 && st == CLKV_OK; op++) {
        fprintf(stderr, "[bench] timing %s...\n", names[op]);
        what = op == OP_PASS1   ? "clkv_attention_window"
               : op == OP_PASS2 ? "clkv_score"
                                : "clkv_minikv_prefill";
        st = time_op(ctx, &c, (mk_op)op, &o, &t[op], &first[op]);
    }
    int pass = 0;
    double rel = NAN;
    if (st == CLKV_OK) {
        what = "check";
        st = check(ctx, &o, &b, &pass, &rel);
    }
    free_bufs(&b);
    if (st != CLKV_OK) {
        const int rc = report_failure(ctx, st, what);
        clkv_context_destroy(ctx);
        return rc;
    }
    const double pairs = (double)(B * Hq) * (double)L * (double)(L + 1) / 2.0;
    const double f_att = 4.0 * (double)D * pairs, f_qk = 2.0 * (double)D * pairs;
    /* the selection's share: total minus the two passes timed alone (noise may make the
     * difference slightly negative: shown as 0) */
    const double sel_s = fmax(0.0, t[2] - t[0] - t[1]);
    if (o.format == TOOL_FMT_JSON) {
        tool_record r;
        tool_record_init(&r);
        tool_record_str(&r, "op", "minikv-prefill");
        tool_record_str(&r, "device", info->device_name);
        tool_record_str(&r, "platform", info->platform_name);
        tool_record_str(&r, "dtype", clkv_dtype_name(o.dtype));
        tool_record_int(&r, "batch", B);
        tool_record_int(&r, "q_heads", Hq);
        tool_record_int(&r, "kv_heads", Hkv);
        tool_record_int(&r, "dim", D);
        tool_record_int(&r, "len", L);
        tool_record_num(&r, "pass1_us", t[0] * 1e6);
        tool_record_num(&r, "pass2_us", t[1] * 1e6);
        tool_record_num(&r, "total_us", t[2] * 1e6);
        tool_record_num(&r, "select_us_est", sel_s * 1e6);
        tool_record_num(&r, "pass1_tflops", f_att / t[0] * 1e-12);
        tool_record_num(&r, "pass2_tflops", f_qk / t[1] * 1e-12);
        tool_record_num(&r, "total_attention_tflops", f_att / t[2] * 1e-12);
        tool_record_num(&r, "first_call_ms", first[2] * 1e3);
        tool_record_int(&r, "workspace_bytes", (long long)ws);
        tool_record_str(&r, "check", pass ? "pass" : "fail");
        tool_record_num(&r, "acumul_row_sum_rel_err", rel);
        tool_json_begin(stdout);
        tool_json_item(stdout, &r, 0);
        tool_json_end(stdout);
    } else {
        printf("device: %s | %s | driver %s | %u CUs\n", info->device_name, info->platform_name,
               info->driver_version, info->compute_units);
        printf("minikv-prefill: %s, B=%lld Hq=%lld Hkv=%lld D=%lld len=%lld, %lld iters x %lld "
               "repeats (median)\n",
               clkv_dtype_name(o.dtype), (long long)B, (long long)Hq, (long long)Hkv, (long long)D,
               (long long)L, (long long)o.iters, (long long)o.repeats);
        printf("  pass 1 (attention + LSE)   %11.1f us  %8.3f TFLOP/s\n", t[0] * 1e6,
               f_att / t[0] * 1e-12);
        printf("  pass 2 (A_cumul, QK^T)     %11.1f us  %8.3f TFLOP/s\n", t[1] * 1e6,
               f_qk / t[1] * 1e-12);
        printf("  total (+ selection)        %11.1f us  %8.3f TFLOP/s of attention work "
               "(selection ~%.1f us)\n",
               t[2] * 1e6, f_att / t[2] * 1e-12, sel_s * 1e6);
        printf("  workspace %.1f MiB, first call %.1f ms, check %s (A_cumul row sum rel err "
               "%.2e)\n",
               (double)ws / (1024.0 * 1024.0), first[2] * 1e3, pass ? "pass" : "FAIL", rel);
    }
    clkv_context_destroy(ctx);
    return pass ? TOOL_EXIT_OK : TOOL_EXIT_FAIL;
}
