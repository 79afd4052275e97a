/* `clkv bench score` (one scorer, clkv_score) and `clkv bench dropkv` / `clkv bench evict`
 * (the full eviction step, clkv_evict_keep_set: window attention + scorer + pooling +
 * keep-set): median time and the bytes-read floor against the device's measured
 * streaming-read bandwidth. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bandwidth.h"
#include "bench_common.h"
#include "bench_util.h"
#include "cli.h"
#include "host/score_internal.h"
#include "host/select_internal.h"
#include "runtime/internal.h"
#include "tool_data.h"

#define MAX_LIST 16
#define MAX_REPEATS 1000

void usage_bench_score(FILE *f) {
    fprintf(f,
            "usage: clkv bench score   [options]   one scorer (clkv_score)\n"
            "       clkv bench dropkv  [options]   full DropKV eviction step\n"
            "       clkv bench evict   [options]   full eviction step of --method\n"
            "\n"
            "score: times clkv_score alone; its LSE (and window outputs a) are computed once\n"
            "beforehand with clkv_attention_window. dropkv/evict: time clkv_evict_keep_set\n"
            "(window attention + scorer + pooling + keep-set).\n"
            "\n"
            "options (lists are comma-separated; every (batch, len) pair is run):\n"
            "  --method NAME       dropkv snapkv andpro criticalkv h2o diffkv knorm keydiff\n"
            "                      streamingllm                          (default dropkv)\n"
            "  --batch N[,N..]     sequences B                           (default 1)\n"
            "  --len N[,N..]       tokens per sequence (= L)             (default 16384,131072)\n"
            "  --window N          window queries W (h2o: W = len)       (default 8)\n"
            "  --q-heads N         query heads Hq                        (default 32)\n"
            "  --kv-heads N        KV heads Hkv                          (default 8)\n"
            "  --dim N             head dim D: 64, 128, 256              (default 128)\n"
            "  --dtype T           f32 | f16 | bf16 for q, K, V          (default bf16)\n"
            "  --layout L          K/V hnd | nhd                         (default hnd)\n"
            "  --ratio R           keep ratio (dropkv/evict)             (default 0.1)\n"
            "  --breakdown         dropkv/evict: also time each stage alone (window\n"
            "                      attention, scorer + pooling, keep-set), same layout\n"
            "  --keep-kernels      dropkv/evict: device time of each selection kernel\n"
            "                      (profiling events; full call and keep-set alone)\n"
            "                      and the host time to enqueue one call\n"
            "  --iters N           back-to-back calls per timed batch     (default 20)\n"
            "  --repeats N         timed batches; the median is reported  (default 9)\n"
            "  --warmup N          untimed calls after the first          (default 3)\n"
            "  --bw-runs N         timed runs of the bandwidth probe      (default 7)\n"
            "  --device SEL        \"P:D\", \"gpu\", \"cpu\" or a name substring\n"
            "  --format F          text | json | csv                      (default text)\n"
            "\n"
            "Bytes: what the call must read from the cache: the scorer K (+ V for dropkv, andpro,\n"
            "criticalkv; nothing for streamingllm), plus K+V for the full step's window attention\n"
            "(dropkv: 2*bytes(K+V)). floor_us =\n"
            "bytes / measured streaming-read bandwidth; %%floor = floor_us / median_us. Numerical\n"
            "correctness is covered by the test suites (test_score, test_score_evict).\n");
}

typedef struct sopts {
    int full, breakdown, keep_kernels;
    clkv_score_method method;
    int64_t batch[MAX_LIST], len[MAX_LIST];
    int nbatch, nlen;
    int64_t window, hq, hkv, dim, iters, repeats, warmup, bw_runs;
    double ratio;
    clkv_dtype dtype;
    int nhd;
    const char *device;
    tool_format format;
} sopts;

static int parse_opts(int argc, char **argv, sopts *o) {
    const bench_common_opts common = {.iters = &o->iters,
                                      .iters_max = 1000000,
                                      .repeats = &o->repeats,
                                      .repeats_max = MAX_REPEATS,
                                      .warmup = &o->warmup,
                                      .bw_runs = &o->bw_runs,
                                      .bw_runs_max = 64,
                                      .device = &o->device,
                                      .format = &o->format};
    memset(o, 0, sizeof *o);
    o->method = CLKV_SCORE_DROPKV;
    o->batch[0] = 1;
    o->nbatch = 1;
    o->len[0] = 16384;
    o->len[1] = 131072;
    o->nlen = 2;
    o->window = 8;
    o->hq = 32;
    o->hkv = 8;
    o->dim = 128;
    o->dtype = CLKV_BF16;
    o->ratio = 0.1;
    o->iters = 20;
    o->repeats = 9;
    o->warmup = 3;
    o->bw_runs = 7;
    o->format = TOOL_FMT_TEXT;
    const int64_t big = (int64_t)1 << 31;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int m, bad = 0;
        if (opt_is_help(argv[i])) {
            usage_bench_score(stdout);
            return 1;
        } else if ((m = opt_value(argc, argv, &i, "--method", &v)) != 0) {
            bad = m < 0 || clkv_score_method_from_name(v, &o->method) != CLKV_OK;
            if (m > 0 && bad)
                fprintf(stderr, "clkv: --method: %s\n", clkv_last_error(NULL));
        } else if ((m = opt_value(argc, argv, &i, "--batch", &v)) != 0) {
            bad = m < 0 ||
                  (o->nbatch = parse_int_list("--batch", v, 1, 1 << 16, o->batch, MAX_LIST)) < 0;
        } else if ((m = opt_value(argc, argv, &i, "--len", &v)) != 0) {
            bad = m < 0 || (o->nlen = parse_int_list("--len", v, 1, big - 1, o->len, MAX_LIST)) < 0;
        } else if ((m = opt_value(argc, argv, &i, "--window", &v)) != 0) {
            bad = m < 0 || parse_int("--window", v, 1, big - 1, &o->window) != 0;
        } else if ((m = opt_value(argc, argv, &i, "--q-heads", &v)) != 0) {
            bad = m < 0 || parse_int("--q-heads", v, 1, 4096, &o->hq) != 0;
        } else if ((m = opt_value(argc, argv, &i, "--kv-heads", &v)) != 0) {
            bad = m < 0 || parse_int("--kv-heads", v, 1, 4096, &o->hkv) != 0;
        } else if ((m = opt_value(argc, argv, &i, "--dim", &v)) != 0) {
            bad = m < 0 || parse_int("--dim", v, 1, 4096, &o->dim) != 0;
        } else if ((m = opt_value(argc, argv, &i, "--dtype", &v)) != 0) {
            bad = m < 0 || parse_float_dtype("--dtype", v, &o->dtype) != 0;
        } else if ((m = opt_value(argc, argv, &i, "--layout", &v)) != 0) {
            bad = bench_parse_layout(m, v, &o->nhd);
        } else if ((m = opt_value(argc, argv, &i, "--ratio", &v)) != 0) {
            char *end = NULL;
            o->ratio = m > 0 ? strtod(v, &end) : 0.0;
            bad = m < 0 || !end || *end || !(o->ratio >= 0.0 && o->ratio <= 1.0);
            if (m > 0 && bad)
                fprintf(stderr, "clkv: --ratio: '%s' is not a number in [0, 1]\n", v);
        } else if (strcmp(argv[i], "--breakdown") == 0) {
            o->breakdown = 1;
        } else if (strcmp(argv[i], "--keep-kernels") == 0) {
            o->keep_kernels = 1;
        } else if ((m = bench_common_option(argc, argv, &i, &common)) != 0) {
            bad = m < 0;
        } else {
            fprintf(stderr, "clkv bench: unknown option '%s'\n", argv[i]);
            bad = 1;
        }
        if (bad)
            return -1;
    }
    if (bench_check_heads(o->hq, o->hkv) != 0)
        return -1;
    return 0;
}

static int reads_v(clkv_score_method m) {
    return m == CLKV_SCORE_DROPKV || m == CLKV_SCORE_ANDPRO || m == CLKV_SCORE_CRITICALKV;
}

typedef struct sbufs {
    cl_mem q, k, v, lengths, lse, a, scores, pbar, indices, counts;
} sbufs;

static void free_bufs(sbufs *b) {
    cl_mem *all[] = {&b->q, &b->k,      &b->v,    &b->lengths, &b->lse,
                     &b->a, &b->scores, &b->pbar, &b->indices, &b->counts};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        tool_release(all[i]);
}

typedef struct sresult {
    int64_t B, L, W;
    clkv_status status;
    char error[256];
    double first_s, median_s, min_s;
    double stage_us[3]; /* --breakdown: attention, scorer + pooling, keep-set (medians) */
    /* --keep-kernels, [0] full call, [1] keep-set alone: mean device us of each selection
     * kernel and of their span (-1 calls: not the chunked path), host enqueue us per call */
    double kern_us[2][SELECT_PROF_KERNELS + 1], host_us[2];
    int kern_calls[2];
    int64_t cand_min, cand_max; /* --keep-kernels: keys in the top-12-bit bin of rank c */
    uint64_t bytes;
    double floor_us, pct, gbps;
} sresult;

/* One timed call of the benchmarked operation. */
typedef struct sop {
    int full;
    clkv_score_args score;
    clkv_evict_args evict;
} sop;

static clkv_status call(clkv_context *ctx, const sop *op) {
    return op->full ? clkv_evict_keep_set(ctx, &op->evict, NULL)
                    : clkv_score(ctx, &op->score, NULL);
}

static clkv_status time_batch(clkv_context *ctx, const sop *op, int n, double *per) {
    const double t0 = tool_now();
    for (int i = 0; i < n; i++) {
        clkv_status st = call(ctx, op);
        if (st != CLKV_OK)
            return st;
    }
    clkv_status st = clkv_context_finish(ctx);
    *per = (tool_now() - t0) / (n > 0 ? n : 1);
    return st;
}

/* The chunked selection's candidate count per row (keys in the top-12-bit bin holding
 * rank c, c = min(k, L)) from the scores the full call left behind: min and max over
 * the rows into r. */
static clkv_status count_candidates(clkv_context *ctx, cl_mem scores, int64_t rows, int64_t L,
                                    int64_t c, sresult *r) {
    float *h = malloc((size_t)(rows * L) * sizeof *h);
    uint32_t *bins = calloc(4096, sizeof *bins);
    clkv_status st = h && bins ? tool_read(ctx, scores, h, (size_t)(rows * L) * sizeof *h)
                               : clkv__fail(ctx, CLKV_ERR_OUT_OF_HOST_MEMORY, "scores: host copy");
    r->cand_min = INT64_MAX;
    r->cand_max = 0;
    for (int64_t row = 0; row < rows && !st; row++) {
        memset(bins, 0, 4096 * sizeof *bins);
        for (int64_t i = 0; i < L; i++) {
            uint32_t u;
            memcpy(&u, &h[row * L + i], sizeof u);
            uint32_t key = 0u; /* NaN */
            if ((u & 0x7fffffffu) <= 0x7f800000u) {
                u = u == 0x80000000u ? 0u : u;
                key = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
            }
            bins[key >> 20]++;
        }
        int64_t above = 0;
        for (int bin = 4095; bin >= 0; bin--) {
            if (above + bins[bin] >= c) {
                r->cand_min = bins[bin] < r->cand_min ? bins[bin] : r->cand_min;
                r->cand_max = bins[bin] > r->cand_max ? bins[bin] : r->cand_max;
                break;
            }
            above += bins[bin];
        }
    }
    free(h);
    free(bins);
    return st;
}

static void run_shape(clkv_context *ctx, const sopts *o, const tool_bandwidth *bw, sresult *r) {
    const clkv_score_method m = o->method;
    const int win = clkv_score_method_uses_window(m);
    const int64_t B = r->B, Hq = o->hq, Hkv = o->hkv, D = o->dim, L = r->L;
    const int64_t W = m == CLKV_SCORE_H2O ? L : o->window;
    r->W = win ? W : 0;
    const uint64_t es = clkv_dtype_size(o->dtype);
    const uint64_t nkv = (uint64_t)(B * Hkv * L * D), nq = (uint64_t)(B * Hq * W * D);
    const int need_a = m == CLKV_SCORE_DROPKV || m == CLKV_SCORE_ANDPRO;
    sbufs b;
    memset(&b, 0, sizeof b);
    const char *what = "allocation";
    clkv_status st = tool_buffer(ctx, "k", nkv * es, &b.k);
    if (!st)
        st = tool_buffer(ctx, "v", nkv * es, &b.v);
    if (!st)
        st = tool_buffer(ctx, "lengths", (uint64_t)B * 4, &b.lengths);
    if (!st)
        st = tool_buffer(ctx, "scores", (uint64_t)(B * Hkv * L) * 4, &b.scores);
    if (!st && m == CLKV_SCORE_CRITICALKV)
        st = tool_buffer(ctx, "pbar", (uint64_t)(B * Hkv * L) * 4, &b.pbar);
    if (!st && win) {
        st = tool_buffer(ctx, "q", nq * es, &b.q);
        if (!st)
            st = tool_buffer(ctx, "lse", (uint64_t)(B * Hq * W) * 4, &b.lse);
        if (!st)
            st = tool_buffer(ctx, "a", need_a ? nq * 4 : (uint64_t)D * 4, &b.a);
        if (!st)
            st = tool_fill_random(ctx, b.q, o->dtype, nq, 211u, 4.0f);
    }
    if (!st)
        st = tool_fill_random(ctx, b.k, o->dtype, nkv, 222u, 1.0f);
    if (!st)
        st = tool_fill_random(ctx, b.v, o->dtype, nkv, 233u, 1.0f);
    if (!st) {
        int32_t *lens = malloc((size_t)B * sizeof *lens);
        if (!lens)
            st = clkv__fail(ctx, CLKV_ERR_OUT_OF_HOST_MEMORY, "lengths: out of host memory");
        for (int64_t i = 0; lens && i < B; i++)
            lens[i] = (int32_t)L;
        if (!st)
            st = tool_write(ctx, b.lengths, lens, (size_t)B * sizeof *lens);
        free(lens);
    }
    sop op;
    memset(&op, 0, sizeof op);
    op.full = o->full;
    clkv_score_args *s = &op.score;
    *s = (clkv_score_args)CLKV_SCORE_ARGS_INIT;
    s->method = m;
    if (o->nhd) {
        s->k = clkv_tensor_4d_nhd(b.k, o->dtype, B, Hkv, L, D);
        s->v = clkv_tensor_4d_nhd(b.v, o->dtype, B, Hkv, L, D);
    } else {
        s->k = clkv_tensor_4d(b.k, o->dtype, B, Hkv, L, D);
        s->v = clkv_tensor_4d(b.v, o->dtype, B, Hkv, L, D);
    }
    s->lengths = clkv_tensor_1d(b.lengths, CLKV_I32, B);
    if (win)
        s->q = clkv_tensor_4d(b.q, o->dtype, B, Hq, W, D);
    if (!st && win && !o->full) { /* the scorer's inputs, once, untimed */
        what = "clkv_attention_window (inputs)";
        clkv_attention_window_args w = CLKV_ATTENTION_WINDOW_ARGS_INIT;
        w.q = s->q;
        w.k = s->k;
        w.v = s->v;
        w.lengths = s->lengths;
        w.lse = clkv_tensor_3d(b.lse, CLKV_F32, B, Hq, W);
        w.o = clkv_tensor_4d(b.a, CLKV_F32, B, Hq, W, D);
        if (!need_a) /* output not needed: one discarded row */
            w.o.strides[0] = w.o.strides[1] = w.o.strides[2] = 0;
        st = clkv_attention_window(ctx, &w, NULL);
        s->lse = w.lse;
        if (need_a)
            s->a = w.o;
    }
    if (!st)
        st = clkv_context_finish(ctx);
    s->scores = clkv_tensor_3d(b.scores, CLKV_F32, B, Hkv, L);
    if (b.pbar)
        s->pbar = clkv_tensor_3d(b.pbar, CLKV_F32, B, Hkv, L);
    if (o->full) {
        const int64_t K = clkv_keep_count(L, o->ratio, -1, win && m != CLKV_SCORE_H2O ? W : 4);
        if (!st)
            st = tool_buffer(ctx, "indices", (uint64_t)(B * Hkv * K) * 4, &b.indices);
        if (!st)
            st = tool_buffer(ctx, "counts", (uint64_t)(B * Hkv) * 4, &b.counts);
        op.evict = (clkv_evict_args)CLKV_EVICT_ARGS_INIT;
        op.evict.score = *s;
        op.evict.indices = clkv_tensor_3d(b.indices, CLKV_I32, B, Hkv, K);
        op.evict.counts = clkv_tensor_2d(b.counts, CLKV_I32, B, Hkv);
        op.evict.ratio = o->ratio;
    }
    const uint64_t kv = nkv * es;
    /* the scorer reads K (and V); the full step's window attention reads K+V first */
    const uint64_t scorer = m == CLKV_SCORE_STREAMINGLLM ? 0 : kv * (reads_v(m) ? 2 : 1);
    r->bytes = o->full && win ? 2 * kv + scorer : scorer;
    if (!st) {
        what = o->full ? "clkv_evict_keep_set" : "clkv_score";
        double warm = 0.0, per[MAX_REPEATS];
        st = time_batch(ctx, &op, 1, &r->first_s);
        if (!st && o->warmup > 0)
            st = time_batch(ctx, &op, (int)o->warmup, &warm);
        for (int i = 0; i < (int)o->repeats && !st; i++)
            st = time_batch(ctx, &op, (int)o->iters, &per[i]);
        if (!st) {
            r->median_s = tool_median(per, (int)o->repeats);
            r->min_s = tool_min(per, (int)o->repeats);
        }
        /* each stage alone, on the intermediates the full calls above left behind */
        static const int stage_mask[3] = {CLKV__EVICT_ATTENTION, CLKV__EVICT_SCORE,
                                          CLKV__EVICT_KEEP};
        for (int sg = 0; sg < 3 && o->full && o->breakdown && !st; sg++) {
            clkv__evict_set_stages(stage_mask[sg]);
            st = time_batch(ctx, &op, (int)(o->warmup > 0 ? o->warmup : 1), &warm);
            for (int i = 0; i < (int)o->repeats && !st; i++)
                st = time_batch(ctx, &op, (int)o->iters, &per[i]);
            clkv__evict_set_stages(0);
            if (!st)
                r->stage_us[sg] = tool_median(per, (int)o->repeats) * 1e6;
        }
    }
    if (o->full && o->keep_kernels && !st)
        st = count_candidates(ctx, b.scores, B * Hkv, L, op.evict.indices.dims[2], r);
    for (int sg = 0; sg < 2 && o->full && o->keep_kernels && !st; sg++) {
        clkv__evict_set_stages(sg ? CLKV__EVICT_KEEP : 0);
        double h = 0.0;
        const int n = (int)o->iters;
        for (int i = 0; i < n && !st; i++) { /* host enqueue time, then the queue drained */
            const double t0 = tool_now();
            st = call(ctx, &op);
            h += tool_now() - t0;
            if (!st)
                st = clkv_context_finish(ctx);
        }
        r->host_us[sg] = h / n * 1e6;
        clkv__select_profile(1);
        for (int i = 0; i < n && !st; i++)
            st = call(ctx, &op);
        double us[SELECT_PROF_KERNELS + 1];
        const int calls = clkv__select_profile_take(us);
        clkv__select_profile(0);
        clkv__evict_set_stages(0);
        r->kern_calls[sg] = calls;
        for (int j = 0; j <= SELECT_PROF_KERNELS; j++)
            r->kern_us[sg][j] = calls ? us[j] / calls : NAN;
    }
    free_bufs(&b);
    if (st) {
        const char *msg = clkv_last_error(ctx);
        r->status = st;
        snprintf(r->error, sizeof r->error, "%s: %s: %s", what, clkv_status_string(st),
                 msg ? msg : "");
        return;
    }
    r->floor_us = (double)r->bytes / (bw->gbps_median * 1e9) * 1e6;
    r->pct = 100.0 * r->floor_us / (r->median_s * 1e6);
    r->gbps = (double)r->bytes / r->median_s * 1e-9;
}

static int bench_common(int argc, char **argv, int full, int force_dropkv) {
    sopts o;
    const int pr = parse_opts(argc, argv, &o);
    if (pr != 0) {
        if (pr < 0)
            usage_bench_score(stderr);
        return pr > 0 ? TOOL_EXIT_OK : TOOL_EXIT_USAGE;
    }
    o.full = full;
    if (force_dropkv)
        o.method = CLKV_SCORE_DROPKV;
    clkv_context *ctx = NULL;
    clkv_status st = clkv_context_create(o.device, &ctx);
    if (st != CLKV_OK)
        return report_failure(NULL, st, "clkv_context_create");
    const clkv_device_info *info = clkv_context_device_info(ctx);
    fprintf(stderr, "[bench] device: %s (%s); measuring streaming-read bandwidth...\n",
            info->device_name, info->platform_name);
    tool_bandwidth bw;
    st = tool_measure_bandwidth(ctx, (int)o.bw_runs, &bw);
    if (st != CLKV_OK) {
        const int rc = report_failure(ctx, st, "bandwidth measurement");
        clkv_context_destroy(ctx);
        return rc;
    }
    const char *op = full ? "evict" : "score";
    if (o.format == TOOL_FMT_TEXT) {
        printf("device: %s | %s | %u CUs | streaming read %.1f GB/s\n", info->device_name,
               info->platform_name, info->compute_units, bw.gbps_median);
        printf("%s %s: %s %s, Hq=%lld Hkv=%lld D=%lld, %lld iters x %lld repeats\n", op,
               clkv_score_method_name(o.method), clkv_dtype_name(o.dtype), o.nhd ? "nhd" : "hnd",
               (long long)o.hq, (long long)o.hkv, (long long)o.dim, (long long)o.iters,
               (long long)o.repeats);
        printf("%5s %8s %8s %11s %11s %10s %9s %10s %7s %9s\n", "B", "L", "W", "median_us",
               "min_us", "MB_read", "GB/s", "floor_us", "%floor", "first_ms");
        fflush(stdout);
    }
    int failed = 0, index = 0;
    tool_record rec;
    for (int ib = 0; ib < o.nbatch; ib++)
        for (int il = 0; il < o.nlen; il++) {
            sresult r;
            memset(&r, 0, sizeof r);
            r.B = o.batch[ib];
            r.L = o.len[il];
            r.first_s = r.median_s = r.min_s = NAN;
            r.stage_us[0] = r.stage_us[1] = r.stage_us[2] = NAN;
            run_shape(ctx, &o, &bw, &r);
            if (r.status != CLKV_OK) {
                failed = 1;
                fprintf(stderr, "clkv: B=%lld L=%lld failed: %s\n", (long long)r.B, (long long)r.L,
                        r.error);
            }
            tool_record_init(&rec);
            tool_record_str(&rec, "op", op);
            tool_record_str(&rec, "method", clkv_score_method_name(o.method));
            tool_record_str(&rec, "device", info->device_name);
            tool_record_str(&rec, "dtype", clkv_dtype_name(o.dtype));
            tool_record_str(&rec, "layout", o.nhd ? "nhd" : "hnd");
            tool_record_int(&rec, "batch", r.B);
            tool_record_int(&rec, "q_heads", o.hq);
            tool_record_int(&rec, "kv_heads", o.hkv);
            tool_record_int(&rec, "dim", o.dim);
            tool_record_int(&rec, "len", r.L);
            tool_record_int(&rec, "window", r.W);
            tool_record_num(&rec, "ratio", o.ratio);
            tool_record_num(&rec, "median_us", r.median_s * 1e6);
            tool_record_num(&rec, "min_us", r.min_s * 1e6);
            tool_record_num(&rec, "first_call_ms", r.first_s * 1e3);
            tool_record_int(&rec, "bytes_read", (long long)r.bytes);
            tool_record_num(&rec, "gbps", r.gbps);
            tool_record_num(&rec, "read_bw_gbps", bw.gbps_median);
            tool_record_num(&rec, "floor_us", r.floor_us);
            tool_record_num(&rec, "pct_floor", r.pct);
            if (o.breakdown && full) {
                tool_record_num(&rec, "attention_us", r.stage_us[0]);
                tool_record_num(&rec, "score_pool_us", r.stage_us[1]);
                tool_record_num(&rec, "keep_set_us", r.stage_us[2]);
            }
            tool_record_str(&rec, "status", r.status == CLKV_OK ? "ok" : "error");
            tool_record_str(&rec, "error", r.error);
            if (o.format == TOOL_FMT_JSON) {
                if (index == 0)
                    tool_json_begin(stdout);
                tool_json_item(stdout, &rec, index);
            } else if (o.format == TOOL_FMT_CSV) {
                if (index == 0)
                    tool_csv_header(stdout, &rec);
                tool_csv_row(stdout, &rec);
            } else if (r.status == CLKV_OK) {
                printf("%5lld %8lld %8lld %11.2f %11.2f %10.2f %9.1f %10.2f %7.1f %9.1f\n",
                       (long long)r.B, (long long)r.L, (long long)r.W, r.median_s * 1e6,
                       r.min_s * 1e6, (double)r.bytes * 1e-6, r.gbps, r.floor_us, r.pct,
                       r.first_s * 1e3);
                if (o.keep_kernels && full)
                    printf("      selection candidates per row: %lld .. %lld\n",
                           (long long)r.cand_min, (long long)r.cand_max);
                for (int sg = 0; sg < 2 && o.keep_kernels && full; sg++)
                    printf("      %s: host enqueue %.2f us/call; selection kernels (%d calls) "
                           "%.2f / %.2f / %.2f us (3-kernel: hist1 / cand / write, 2-kernel: "
                           "hist_sort / write, row: select_row), "
                           "span %.2f us\n",
                           sg ? "keep-set alone" : "full call", r.host_us[sg], r.kern_calls[sg],
                           r.kern_us[sg][0], r.kern_us[sg][1], r.kern_us[sg][2], r.kern_us[sg][3]);
                if (o.breakdown && full)
                    printf("      stages alone: attention %.2f us, scorer + pooling %.2f us, "
                           "keep-set %.2f us (sum %.2f)\n",
                           r.stage_us[0], r.stage_us[1], r.stage_us[2],
                           r.stage_us[0] + r.stage_us[1] + r.stage_us[2]);
            } else {
                printf("%5lld %8lld  error: %s\n", (long long)r.B, (long long)r.L, r.error);
            }
            fflush(stdout);
            index++;
        }
    if (o.format == TOOL_FMT_JSON)
        tool_json_end(stdout);
    clkv_context_destroy(ctx);
    return failed ? TOOL_EXIT_FAIL : TOOL_EXIT_OK;
}

int bench_score(int argc, char **argv) {
    return bench_common(argc, argv, 0, 0);
}

int bench_dropkv(int argc, char **argv) {
    return bench_common(argc, argv, 1, 1);
}

int bench_evict(int argc, char **argv) {
    return bench_common(argc, argv, 1, 0);
}
