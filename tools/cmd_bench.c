/* `clkv bench ...`: operator benchmarks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bandwidth.h"
#include "bench_common.h"
#include "bench_harness.h"
#include "bench_util.h"
#include "cli.h"
#include "decode_setup.h"
#include "reference.h"

/* The benchmarks, one line each (kept in one table so branches adding a benchmark merge
 * without touching each other's lines). */
typedef struct bench_entry {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} bench_entry;

static int bench_decode(int argc, char **argv);

static const bench_entry benches[] = {
    {"attention-decode", bench_decode, "decode attention (SPEC 1.1) vs. streaming-read bandwidth"},
    {"attention-window", bench_window, "window / prefill attention with LSE (SPEC 1.2)"},
    {"attention-quant", bench_attention_quant,
     "decode attention over a quantized KV cache vs bf16"},
    {"attention-sparse", bench_sparse, "sparse decode attention (SPEC 1.3): sink + top-k + local"},
    {"retrieval", bench_retrieval, "ParisKV retrieval stages and decode step (SPEC 4)"},
    {"compress", bench_compress, "AdaKV budgets, top-k, compaction, per-head-length decode"},
    {"score", bench_score, "one eviction scorer (SPEC 2.1/2.2), --method NAME"},
    {"dropkv", bench_dropkv, "full DropKV step: window attention + score + pool + keep-set"},
    {"evict", bench_evict, "full eviction step of --method NAME (see bench score --help)"},
    {"minikv-prefill", bench_minikv, "MiniKV two-pass prefill: pass 1, pass 2, total, TFLOP/s"},
    {"longflow", bench_longflow, "LongFlow step (SPEC 2.3) vs. decode attention, same cache"},
};

void usage_bench(FILE *f) {
    fprintf(f, "usage: clkv bench <benchmark> [options]\n\nbenchmarks (clkv bench NAME --help):\n");
    for (size_t i = 0; i < sizeof benches / sizeof benches[0]; i++)
        fprintf(f, "  %-18s %s\n", benches[i].name, benches[i].summary);
}

void usage_bench_decode(FILE *f) {
    fprintf(f,
            "usage: clkv bench attention-decode [options]\n"
            "\n"
            "Times clkv_attention_decode on random data and reports the K+V read bandwidth it\n"
            "achieves, also as a percentage of the device's streaming-read bandwidth measured in\n"
            "the same run (float4 read kernel, cl_kernels/bandwidth.cl).\n"
            "\n"
            "options (lists are comma-separated; every (batch, len) pair is run):\n"
            "  --batch N[,N..]     sequences B                           (default 1)\n"
            "  --len N[,N..]       cache length L = len[b] of every sequence (default 32768)\n"
            "  --q-heads N         query heads Hq                        (default 32)\n"
            "  --kv-heads N        KV heads Hkv (Hq %% Hkv == 0)           (default 8)\n"
            "  --dim N             head dim D: 64, 128, 256              (default 128)\n"
            "  --dtype T           f32 | f16 | bf16 for q, K, V and o    (default bf16)\n"
            "  --layout L          hnd ([B,H,L,D]) | nhd ([B,L,H,D])      (default hnd)\n"
            "  --splits N          force the split-K count, 0 = auto      (default 0)\n"
            "  --lse               also compute the LSE output\n"
            "  --iters N           back-to-back calls per timed batch     (default 100)\n"
            "  --repeats N         timed batches; the median is reported  (default 15)\n"
            "  --warmup N          untimed calls after the first          (default 10)\n"
            "  --bw-runs N         timed runs of the bandwidth probe      (default 7)\n"
            "  --no-check          skip the CPU reference check of the last sequence's first\n"
            "                      and last KV head\n"
            "  --device SEL        \"P:D\", \"gpu\", \"cpu\" or a name substring (default:\n"
            "                      $CLKV_DEVICE, else the first GPU, else the first CPU)\n"
            "  --format F          text | json | csv                      (default text)\n"
            "\n"
            "Time per call: the host clock around each batch of --iters calls and a finish,\n"
            "divided by --iters; median (and min) over --repeats batches. Bytes: B*Hkv*L*D*2*\n"
            "element size (K and V once). probe_us: the bandwidth probe reading exactly those\n"
            "bytes per launch, timed the same way (the floor of a one-launch streaming read,\n"
            "launch gap and ramp included); %%probe = probe_us / median_us. Progress goes to\n"
            "stderr, results to stdout.\n");
}

typedef struct decode_opts {
    int64_t batch[BENCH_MAX_LIST], len[BENCH_MAX_LIST];
    int nbatch, nlen;
    int64_t hq, hkv, dim;
    clkv_dtype dtype;
    int nhd;
    int64_t splits, iters, repeats, warmup, bw_runs;
    int lse, check;
    const char *device;
    tool_format format;
} decode_opts;

static int parse_decode_opts(int argc, char **argv, decode_opts *o) {
    const bench_common_opts common = {.iters = &o->iters,
                                      .iters_max = 1000000,
                                      .repeats = &o->repeats,
                                      .repeats_max = BENCH_MAX_REPEATS,
                                      .warmup = &o->warmup,
                                      .bw_runs = &o->bw_runs,
                                      .bw_runs_max = 64,
                                      .device = &o->device,
                                      .format = &o->format,
                                      .batch = o->batch,
                                      .nbatch = &o->nbatch,
                                      .batch_max = 1 << 20,
                                      .len = o->len,
                                      .nlen = &o->nlen,
                                      .len_max = (int64_t)1 << 40,
                                      .q_heads = &o->hq,
                                      .kv_heads = &o->hkv,
                                      .dim = &o->dim,
                                      .dtype = &o->dtype,
                                      .nhd = &o->nhd,
                                      .splits = &o->splits};
    o->batch[0] = 1;
    o->nbatch = 1;
    o->len[0] = 32768;
    o->nlen = 1;
    o->hq = 32;
    o->hkv = 8;
    o->dim = 128;
    o->dtype = CLKV_BF16;
    o->nhd = 0;
    o->splits = 0;
    o->iters = 100;
    o->repeats = 15;
    o->warmup = 10;
    o->bw_runs = 7;
    o->lse = 0;
    o->check = 1;
    o->device = NULL;
    o->format = TOOL_FMT_TEXT;
    for (int i = 1; i < argc; i++) {
        int m, bad = 0;
        if (opt_is_help(argv[i])) {
            usage_bench_decode(stdout);
            return 1;
        } else if ((m = bench_common_option(argc, argv, &i, &common)) != 0) {
            bad = m < 0;
        } else if (strcmp(argv[i], "--lse") == 0) {
            o->lse = 1;
        } else if (strcmp(argv[i], "--no-check") == 0) {
            o->check = 0;
        } else {
            fprintf(stderr, "clkv bench attention-decode: unknown option '%s'\n", argv[i]);
            bad = 1;
        }
        if (bad) {
            return -1;
        }
    }
    if (bench_check_heads(o->hq, o->hkv) != 0)
        return -1;
    return 0;
}

typedef struct shape_result {
    int64_t B, L;
    clkv_status status;
    char error[256];
    tool_timing t;
    uint64_t kv_bytes;
    double gbps, gbps_best, pct;
    double probe_s, pct_probe; /* the probe reading kv_bytes once per launch, and median/it */
    const char *check;         /* "pass", "fail", "skipped" */
    double check_err;
    uint64_t workspace_bytes;
} shape_result;

static void run_shape(clkv_context *ctx, const decode_opts *o, const tool_bandwidth *bw,
                      shape_result *r) {
    tool_decode_shape s = {.B = r->B,
                           .Hq = o->hq,
                           .Hkv = o->hkv,
                           .D = o->dim,
                           .L = r->L,
                           .q_dtype = o->dtype,
                           .kv_dtype = o->dtype,
                           .o_dtype = o->dtype,
                           .nhd = o->nhd};
    tool_decode_bufs bufs;
    int32_t *lengths = malloc((size_t)r->B * sizeof *lengths);
    r->status = CLKV_OK;
    r->error[0] = '\0';
    r->check = "skipped";
    r->check_err = NAN;
    r->gbps = r->gbps_best = r->pct = r->probe_s = r->pct_probe = NAN;
    r->kv_bytes = 0;
    if (!lengths) {
        r->status = CLKV_ERR_OUT_OF_HOST_MEMORY;
        snprintf(r->error, sizeof r->error, "out of host memory");
        return;
    }
    if (r->L > INT32_MAX) {
        r->status = CLKV_ERR_ARG_RANGE;
        snprintf(r->error, sizeof r->error, "len %lld does not fit the i32 lengths",
                 (long long)r->L);
        free(lengths);
        return;
    }
    for (int64_t b = 0; b < r->B; b++) {
        lengths[b] = (int32_t)r->L;
    }
    r->kv_bytes = tool_decode_kv_bytes_read(&s, lengths);
    const char *what = "allocation";
    clkv_status st = tool_decode_alloc(ctx, &s, o->lse, &bufs);
    if (st == CLKV_OK) {
        what = "random fill";
        st = tool_decode_fill_device(ctx, &s, &bufs, lengths);
        clkv_attention_decode_args a;
        tool_decode_args(&s, &bufs, r->L, (int32_t)o->splits, &a);
        char label[96];
        snprintf(label, sizeof label, "[bench] B=%lld L=%lld", (long long)r->B, (long long)r->L);
        size_t ws = 0;
        if (st == CLKV_OK) {
            what = "clkv_attention_decode_workspace_size";
            st = clkv_attention_decode_workspace_size(ctx, &a, &ws);
            r->workspace_bytes = ws;
        }
        if (st == CLKV_OK) {
            what = "clkv_attention_decode";
            st = tool_decode_time(ctx, &a, (int)o->warmup, (int)o->iters, (int)o->repeats, label,
                                  &r->t);
        }
        if (st == CLKV_OK && o->check) {
            what = "check";
            tool_compare c;
            tool_compare_init(&c, s.o_dtype);
            int64_t bl[1] = {r->B - 1};
            int64_t hl[2] = {0, o->hkv - 1};
            st = tool_decode_check(ctx, &s, &bufs, lengths, bl, 1, hl, o->hkv > 1 ? 2 : 1, &c);
            if (st == CLKV_OK) {
                r->check = tool_compare_pass(&c) ? "pass" : "fail";
                r->check_err = c.max_abs_err;
            }
        }
        tool_decode_free(&bufs);
    }
    free(lengths);
    if (st == CLKV_OK) { /* a yardstick only: without it (e.g. no memory left) the row stands */
        const clkv_status ps =
            tool_time_read(ctx, r->kv_bytes, (int)o->iters, (int)o->repeats, &r->probe_s);
        if (ps != CLKV_OK) {
            fprintf(stderr, "[bench] B=%lld L=%lld: no same-bytes probe: %s\n", (long long)r->B,
                    (long long)r->L, clkv_last_error(ctx));
            r->probe_s = NAN;
        }
    }
    if (st != CLKV_OK) {
        r->status = st;
        bench_error_text(ctx, st, what, r->error, sizeof r->error);
        return;
    }
    r->gbps = (double)r->kv_bytes / r->t.median_s * 1e-9;
    r->gbps_best = (double)r->kv_bytes / r->t.min_s * 1e-9;
    r->pct = 100.0 * r->gbps / bw->gbps_median;
    r->pct_probe = 100.0 * r->probe_s / r->t.median_s;
}

static void fill_record(tool_record *rec, const bench_session *s, const decode_opts *o,
                        const shape_result *r) {
    bench_record_begin(rec, s, "attention-decode");
    tool_record_str(rec, "dtype", clkv_dtype_name(o->dtype));
    tool_record_str(rec, "layout", o->nhd ? "nhd" : "hnd");
    tool_record_int(rec, "batch", r->B);
    tool_record_int(rec, "q_heads", o->hq);
    tool_record_int(rec, "kv_heads", o->hkv);
    tool_record_int(rec, "dim", o->dim);
    tool_record_int(rec, "len", r->L);
    tool_record_int(rec, "splits", o->splits);
    tool_record_int(rec, "lse", o->lse);
    tool_record_int(rec, "iters", o->iters);
    tool_record_int(rec, "repeats", o->repeats);
    bench_record_timing(rec, &r->t);
    tool_record_int(rec, "kv_bytes", (long long)r->kv_bytes);
    tool_record_int(rec, "workspace_bytes", (long long)r->workspace_bytes);
    tool_record_num(rec, "gbps", r->gbps);
    tool_record_num(rec, "gbps_best", r->gbps_best);
    tool_record_num(rec, "read_bw_gbps", s->bw.gbps_median);
    tool_record_num(rec, "pct_read_bw", r->pct);
    tool_record_num(rec, "probe_same_bytes_us", r->probe_s * 1e6);
    tool_record_num(rec, "pct_probe_same_bytes", r->pct_probe);
    tool_record_str(rec, "check", r->check);
    tool_record_num(rec, "check_max_abs_err", r->check_err);
    bench_record_status(rec, r->status, r->error);
}

static int bench_decode(int argc, char **argv) {
    decode_opts o;
    int pr = parse_decode_opts(argc, argv, &o);
    if (pr != 0) {
        if (pr < 0) {
            usage_bench_decode(stderr);
        }
        return pr > 0 ? TOOL_EXIT_OK : TOOL_EXIT_USAGE;
    }
    bench_session s;
    const int rc = bench_open(&s, o.device, o.format, (int)o.bw_runs);
    if (rc != TOOL_EXIT_OK) {
        return rc;
    }
    if (o.format == TOOL_FMT_TEXT) {
        bench_print_device(&s);
        bench_print_bandwidth(&s);
        printf("attention-decode: %s %s, Hq=%lld Hkv=%lld D=%lld, splits=%s%s, %lld iters x "
               "%lld repeats\n",
               clkv_dtype_name(o.dtype), o.nhd ? "nhd" : "hnd", (long long)o.hq, (long long)o.hkv,
               (long long)o.dim, o.splits ? "forced" : "auto", o.lse ? ", +lse" : "",
               (long long)o.iters, (long long)o.repeats);
        if (o.splits) {
            printf("forced splits: %lld\n", (long long)o.splits);
        }
        printf("%5s %8s %11s %11s %9s %9s %9s %9s %8s %9s %6s\n", "B", "L", "median_us", "min_us",
               "KV_MB", "GB/s", "%readBW", "probe_us", "%probe", "first_ms", "check");
        fflush(stdout);
    }
    tool_record rec;
    for (int ib = 0; ib < o.nbatch; ib++) {
        for (int il = 0; il < o.nlen; il++) {
            shape_result r;
            memset(&r, 0, sizeof r);
            r.B = o.batch[ib];
            r.L = o.len[il];
            r.t.median_s = r.t.min_s = r.t.first_call_s = NAN;
            run_shape(s.ctx, &o, &s.bw, &r);
            if (r.status != CLKV_OK || strcmp(r.check, "fail") == 0) {
                s.failed = 1;
            }
            if (r.status != CLKV_OK) {
                fprintf(stderr, "clkv: B=%lld L=%lld failed: %s\n", (long long)r.B, (long long)r.L,
                        r.error);
            }
            fill_record(&rec, &s, &o, &r);
            if (r.status == CLKV_OK) {
                bench_emit_row(
                    &s, &rec, "%5lld %8lld %11.2f %11.2f %9.2f %9.1f %9.1f %9.2f %8.1f %9.1f %6s\n",
                    (long long)r.B, (long long)r.L, r.t.median_s * 1e6, r.t.min_s * 1e6,
                    (double)r.kv_bytes * 1e-6, r.gbps, r.pct, r.probe_s * 1e6, r.pct_probe,
                    r.t.first_call_s * 1e3, r.check);
            } else {
                bench_emit_row(&s, &rec, "%5lld %8lld  error: %s\n", (long long)r.B, (long long)r.L,
                               r.error);
            }
        }
    }
    return bench_close(&s);
}

int cmd_bench(int argc, char **argv) {
    if (argc < 2) {
        usage_bench(stderr);
        return TOOL_EXIT_USAGE;
    }
    if (opt_is_help(argv[1])) {
        usage_bench(stdout);
        return TOOL_EXIT_OK;
    }
    for (size_t i = 0; i < sizeof benches / sizeof benches[0]; i++)
        if (strcmp(argv[1], benches[i].name) == 0)
            return benches[i].run(argc - 1, argv + 1);
    fprintf(stderr, "clkv bench: unknown benchmark '%s'\n", argv[1]);
    usage_bench(stderr);
    return TOOL_EXIT_USAGE;
}
