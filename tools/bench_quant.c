/* `clkv bench attention-quant`: fused decode attention over a quantized KV cache
 * (clkv_attention_quant_decode) against 16-bit decode attention (clkv_attention_decode,
 * bf16) on the same data in the same run, both against the device's streaming-read
 * bandwidth. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bandwidth.h"
#include "bench_common.h"
#include "bench_util.h"
#include "cli.h"
#include "decode_setup.h"

#define MAX_LIST 16
#define MAX_REPEATS 1000

static void usage_bench_quant(FILE *f) {
    fprintf(f,
            "usage: clkv bench attention-quant [options]\n"
            "\n"
            "Fills a quantized cache (clkv_quant_cache_append of random bf16 K/V of L tokens per\n"
            "sequence: L - L %% residual quantized, the rest in the residual), then times\n"
            "clkv_attention_quant_decode and, on the same K/V, clkv_attention_decode in bf16.\n"
            "Reports the bytes the quantized call reads (codes + metadata + residual) per\n"
            "second, also as a percentage of the streaming-read bandwidth measured in the same\n"
            "run, and the speedup over the bf16 call.\n"
            "\n"
            "options (lists are comma-separated; every (batch, len) pair is run):\n"
            "  --bits N            2 | 4 | 8, keys and values              (default 2)\n"
            "  --k-bits N, --v-bits N   separate widths                    (default --bits)\n"
            "  --group N           16 | 32 | 64 | 128                      (default 16)\n"
            "  --residual N        n_r, a multiple of --group              (default 128)\n"
            "  --meta T            f16 | f32 (scale, min)                  (default f16)\n"
            "  --batch N[,N..]     sequences B                             (default 1)\n"
            "  --len N[,N..]       tokens per sequence L                   (default 32768)\n"
            "  --q-heads N         query heads Hq                          (default 32)\n"
            "  --kv-heads N        KV heads Hkv                            (default 8)\n"
            "  --dim N             head dim D: 64, 128, 256                (default 128)\n"
            "  --splits N          force the split count, 0 = auto         (default 0)\n"
            "  --no-baseline       skip the bf16 clkv_attention_decode comparison\n"
            "  --iters N           back-to-back calls per timed batch       (default 100)\n"
            "  --repeats N         timed batches; the median is reported    (default 15)\n"
            "  --warmup N          untimed calls after the first            (default 10)\n"
            "  --bw-runs N         timed runs of the bandwidth probe        (default 7)\n"
            "  --device SEL        \"P:D\", \"gpu\", \"cpu\" or a name substring\n"
            "  --format F          text | json | csv                        (default text)\n");
}

typedef struct quant_opts {
    int64_t batch[MAX_LIST], len[MAX_LIST];
    int nbatch, nlen;
    int64_t k_bits, v_bits, group, residual, hq, hkv, dim, splits;
    int64_t iters, repeats, warmup, bw_runs;
    clkv_dtype meta;
    int baseline;
    const char *device;
    tool_format format;
} quant_opts;

static int parse_opts(int argc, char **argv, quant_opts *o) {
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
    o->batch[0] = 1, o->nbatch = 1, o->len[0] = 32768, o->nlen = 1;
    o->k_bits = o->v_bits = -1;
    o->group = 16, o->residual = 128, o->hq = 32, o->hkv = 8, o->dim = 128;
    o->iters = 100, o->repeats = 15, o->warmup = 10, o->bw_runs = 7;
    o->meta = CLKV_F16;
    o->baseline = 1;
    int64_t bits = 2;
    const int64_t big = (int64_t)1 << 31;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int m, bad = 0;
        if (opt_is_help(argv[i])) {
            usage_bench_quant(stdout);
            return 1;
        } else if ((m = opt_value(argc, argv, &i, "--bits", &v)) != 0) {
            bad = m < 0 || parse_int("--bits", v, 2, 8, &bits) != 0;
        } else if ((m = opt_value(argc, argv, &i, "--k-bits", &v)) != 0) {
            bad = m < 0 || parse_int("--k-bits", v, 2, 8, &o->k_bits) != 0;
        } else if ((m = opt_value(argc, argv, &i, "--v-bits", &v)) != 0) {
            bad = m < 0 || parse_int("--v-bits", v, 2, 8, &o->v_bits) != 0;
        } else if ((m = opt_value(argc, argv, &i, "--group", &v)) != 0) {
            bad = m < 0 || parse_int("--group", v, 16, 128, &o->group) != 0;
        } else if ((m = opt_value(argc, argv, &i, "--residual", &v)) != 0) {
            bad = m < 0 || parse_int("--residual", v, 16, 65536, &o->residual) != 0;
        } else if ((m = opt_value(argc, argv, &i, "--meta", &v)) != 0) {
            bad = m < 0 || parse_float_dtype("--meta", v, &o->meta) != 0;
        } else if ((m = opt_value(argc, argv, &i, "--batch", &v)) != 0) {
            bad = m < 0 ||
                  (o->nbatch = parse_int_list("--batch", v, 1, 65535, o->batch, MAX_LIST)) < 0;
        } else if ((m = opt_value(argc, argv, &i, "--len", &v)) != 0) {
            bad = m < 0 || (o->nlen = parse_int_list("--len", v, 1, big, o->len, MAX_LIST)) < 0;
        } else if ((m = opt_value(argc, argv, &i, "--q-heads", &v)) != 0) {
            bad = m < 0 || parse_int("--q-heads", v, 1, 4096, &o->hq) != 0;
        } else if ((m = opt_value(argc, argv, &i, "--kv-heads", &v)) != 0) {
            bad = m < 0 || parse_int("--kv-heads", v, 1, 4096, &o->hkv) != 0;
        } else if ((m = opt_value(argc, argv, &i, "--dim", &v)) != 0) {
            bad = m < 0 || parse_int("--dim", v, 1, 4096, &o->dim) != 0;
        } else if ((m = opt_value(argc, argv, &i, "--splits", &v)) != 0) {
            bad = m < 0 || parse_int("--splits", v, 0, 1 << 20, &o->splits) != 0;
        } else if ((m = bench_common_option(argc, argv, &i, &common)) != 0) {
            bad = m < 0;
        } else if (strcmp(argv[i], "--no-baseline") == 0) {
            o->baseline = 0;
        } else {
            fprintf(stderr, "clkv bench attention-quant: unknown option '%s'\n", argv[i]);
            bad = 1;
        }
        if (bad)
            return -1;
    }
    if (o->k_bits < 0)
        o->k_bits = bits;
    if (o->v_bits < 0)
        o->v_bits = bits;
    const int64_t *bits_opts[2] = {&o->k_bits, &o->v_bits};
    for (int i = 0; i < 2; i++)
        if (*bits_opts[i] != 2 && *bits_opts[i] != 4 && *bits_opts[i] != 8) {
            fprintf(stderr, "clkv: bits %lld: must be 2, 4 or 8\n", (long long)*bits_opts[i]);
            return -1;
        }
    if (o->meta != CLKV_F16 && o->meta != CLKV_F32) {
        fprintf(stderr, "clkv: --meta %s: must be f16 or f32\n", clkv_dtype_name(o->meta));
        return -1;
    }
    if (bench_check_heads(o->hq, o->hkv) != 0)
        return -1;
    return 0;
}

/* ---- timing of any call ---- */

typedef clkv_status (*bench_call)(void *arg);

static clkv_status time_batch(clkv_context *ctx, bench_call f, void *arg, int n, double *per) {
    const double t0 = tool_now();
    for (int i = 0; i < n; i++) {
        clkv_status st = f(arg);
        if (st != CLKV_OK)
            return st;
    }
    clkv_status st = clkv_context_finish(ctx);
    *per = (tool_now() - t0) / n;
    return st;
}

static clkv_status time_call(clkv_context *ctx, bench_call f, void *arg, const quant_opts *o,
                             tool_timing *t) {
    double per[MAX_REPEATS], warm;
    t->iters = (int)o->iters;
    t->repeats = (int)o->repeats;
    clkv_status st = time_batch(ctx, f, arg, 1, &t->first_call_s);
    if (st == CLKV_OK && o->warmup > 0)
        st = time_batch(ctx, f, arg, (int)o->warmup, &warm);
    for (int r = 0; r < t->repeats && st == CLKV_OK; r++)
        st = time_batch(ctx, f, arg, t->iters, &per[r]);
    if (st == CLKV_OK) {
        t->median_s = tool_median(per, t->repeats);
        t->min_s = tool_min(per, t->repeats);
    }
    return st;
}

typedef struct quant_call {
    clkv_quant_cache *cache;
    clkv_attention_quant_decode_args a;
} quant_call;

static clkv_status call_quant(void *arg) {
    quant_call *c = arg;
    return clkv_attention_quant_decode(c->cache, &c->a, NULL);
}

typedef struct decode_call {
    clkv_context *ctx;
    clkv_attention_decode_args a;
} decode_call;

static clkv_status call_decode(void *arg) {
    decode_call *c = arg;
    return clkv_attention_decode(c->ctx, &c->a, NULL);
}

/* ---- one shape ---- */

typedef struct quant_result {
    int64_t B, L;
    clkv_status status;
    char error[256];
    tool_timing tq, td;
    uint64_t q_bytes, kv16_bytes;
    double q_gbps, q_pct, d_gbps, d_pct, speedup;
} quant_result;

/* Bytes of codes, metadata and residual the quantized call reads (each work-group reads
 * its KV head's data once per group of <= 8 query heads). */
static uint64_t quant_bytes_read(const quant_opts *o, int64_t B, int64_t L) {
    const int64_t nr = o->residual, nq = L - L % nr, nres = L % nr, D = o->dim, G = o->group;
    const int64_t msz = clkv_dtype_size(o->meta);
    const int64_t g = o->hq / o->hkv, nhg = (g + 7) / 8;
    const int64_t per_head = nq * D * o->k_bits / 8 + nq / G * D * 2 * msz +
                             nq * D * o->v_bits / 8 + nq * (D / G) * 2 * msz + nres * D * 2 * 2;
    return (uint64_t)(B * o->hkv * nhg * per_head);
}

static void run_shape(clkv_context *ctx, const quant_opts *o, const tool_bandwidth *bw,
                      quant_result *r) {
    tool_decode_shape s = {.B = r->B,
                           .Hq = o->hq,
                           .Hkv = o->hkv,
                           .D = o->dim,
                           .L = r->L,
                           .q_dtype = CLKV_BF16,
                           .kv_dtype = CLKV_BF16,
                           .o_dtype = CLKV_BF16,
                           .nhd = 0};
    tool_decode_bufs bufs;
    int32_t *lengths = malloc((size_t)r->B * sizeof *lengths);
    clkv_quant_cache *cache = NULL;
    const char *what = "allocation";
    clkv_status st = lengths ? CLKV_OK : CLKV_ERR_OUT_OF_HOST_MEMORY;
    for (int64_t b = 0; st == CLKV_OK && b < r->B; b++)
        lengths[b] = (int32_t)r->L;
    if (st == CLKV_OK)
        st = tool_decode_alloc(ctx, &s, 0, &bufs);
    if (st != CLKV_OK) {
        free(lengths);
        r->status = st;
        snprintf(r->error, sizeof r->error, "%s: %s: %s", what, clkv_status_string(st),
                 clkv_last_error(ctx));
        return;
    }
    r->kv16_bytes = tool_decode_kv_bytes_read(&s, lengths);
    r->q_bytes = quant_bytes_read(o, r->B, r->L);
    what = "random fill";
    st = tool_decode_fill_device(ctx, &s, &bufs, lengths);
    if (st == CLKV_OK) {
        what = "clkv_quant_cache_create";
        clkv_quant_cache_create_args ca = CLKV_QUANT_CACHE_CREATE_ARGS_INIT;
        ca.batch = r->B, ca.kv_heads = o->hkv, ca.head_dim = o->dim, ca.capacity = r->L;
        ca.k_bits = (int32_t)o->k_bits, ca.v_bits = (int32_t)o->v_bits;
        ca.group = (int32_t)o->group, ca.residual = (int32_t)o->residual;
        ca.res_dtype = CLKV_BF16, ca.meta_dtype = o->meta;
        st = clkv_quant_cache_create(ctx, &ca, &cache);
    }
    if (st == CLKV_OK) {
        what = "clkv_quant_cache_append";
        clkv_quant_cache_append_args aa = CLKV_QUANT_CACHE_APPEND_ARGS_INIT;
        aa.k = clkv_tensor_4d(bufs.k, CLKV_BF16, r->B, o->hkv, r->L, o->dim);
        aa.v = clkv_tensor_4d(bufs.v, CLKV_BF16, r->B, o->hkv, r->L, o->dim);
        const double t0 = tool_now();
        st = clkv_quant_cache_append(cache, &aa, NULL);
        if (st == CLKV_OK)
            st = clkv_context_finish(ctx);
        fprintf(stderr, "[bench] B=%lld L=%lld: cache filled in %.1f ms\n", (long long)r->B,
                (long long)r->L, (tool_now() - t0) * 1e3);
    }
    if (st == CLKV_OK) {
        what = "clkv_attention_quant_decode";
        quant_call qc = {.cache = cache};
        clkv_attention_quant_decode_args qa = CLKV_ATTENTION_QUANT_DECODE_ARGS_INIT;
        qa.q = clkv_tensor_3d(bufs.q, CLKV_BF16, r->B, o->hq, o->dim);
        qa.o = clkv_tensor_3d(bufs.o, CLKV_BF16, r->B, o->hq, o->dim);
        qa.num_splits = (int32_t)o->splits;
        qc.a = qa;
        st = time_call(ctx, call_quant, &qc, o, &r->tq);
    }
    if (st == CLKV_OK && o->baseline) {
        what = "clkv_attention_decode";
        decode_call dc = {.ctx = ctx};
        tool_decode_args(&s, &bufs, r->L, 0, &dc.a);
        st = time_call(ctx, call_decode, &dc, o, &r->td);
    }
    clkv_quant_cache_destroy(cache);
    tool_decode_free(&bufs);
    free(lengths);
    if (st != CLKV_OK) {
        r->status = st;
        snprintf(r->error, sizeof r->error, "%s: %s: %s", what, clkv_status_string(st),
                 clkv_last_error(ctx));
        return;
    }
    r->q_gbps = (double)r->q_bytes / r->tq.median_s * 1e-9;
    r->q_pct = 100.0 * r->q_gbps / bw->gbps_median;
    if (o->baseline) {
        r->d_gbps = (double)r->kv16_bytes / r->td.median_s * 1e-9;
        r->d_pct = 100.0 * r->d_gbps / bw->gbps_median;
        r->speedup = r->td.median_s / r->tq.median_s;
    }
}

static void fill_record(tool_record *rec, const clkv_device_info *info, const quant_opts *o,
                        const tool_bandwidth *bw, const quant_result *r) {
    tool_record_init(rec);
    tool_record_str(rec, "op", "attention-quant");
    tool_record_str(rec, "device", info->device_name);
    tool_record_str(rec, "platform", info->platform_name);
    tool_record_int(rec, "k_bits", o->k_bits);
    tool_record_int(rec, "v_bits", o->v_bits);
    tool_record_int(rec, "group", o->group);
    tool_record_int(rec, "residual", o->residual);
    tool_record_str(rec, "meta", clkv_dtype_name(o->meta));
    tool_record_int(rec, "batch", r->B);
    tool_record_int(rec, "q_heads", o->hq);
    tool_record_int(rec, "kv_heads", o->hkv);
    tool_record_int(rec, "dim", o->dim);
    tool_record_int(rec, "len", r->L);
    tool_record_int(rec, "splits", o->splits);
    tool_record_num(rec, "median_us", r->tq.median_s * 1e6);
    tool_record_num(rec, "min_us", r->tq.min_s * 1e6);
    tool_record_num(rec, "first_call_ms", r->tq.first_call_s * 1e3);
    tool_record_int(rec, "bytes_read", (long long)r->q_bytes);
    tool_record_num(rec, "gbps", r->q_gbps);
    tool_record_num(rec, "read_bw_gbps", bw->gbps_median);
    tool_record_num(rec, "pct_read_bw", r->q_pct);
    tool_record_num(rec, "bf16_median_us", r->td.median_s * 1e6);
    tool_record_int(rec, "bf16_kv_bytes", (long long)r->kv16_bytes);
    tool_record_num(rec, "bf16_gbps", r->d_gbps);
    tool_record_num(rec, "bf16_pct_read_bw", r->d_pct);
    tool_record_num(rec, "speedup", r->speedup);
    tool_record_str(rec, "status", r->status == CLKV_OK ? "ok" : "error");
    tool_record_str(rec, "error", r->error);
}

int bench_attention_quant(int argc, char **argv) {
    quant_opts o;
    const int pr = parse_opts(argc, argv, &o);
    if (pr != 0) {
        if (pr < 0)
            usage_bench_quant(stderr);
        return pr > 0 ? TOOL_EXIT_OK : TOOL_EXIT_USAGE;
    }
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
    if (o.format == TOOL_FMT_TEXT) {
        printf("device: %s | %s | driver %s | %u CUs\n", info->device_name, info->platform_name,
               info->driver_version, info->compute_units);
        printf("streaming read: %.1f GB/s (median of %d runs, %s)\n", bw.gbps_median, bw.runs,
               bw.method);
        printf("attention-quant: K%lld V%lld group %lld residual %lld meta %s, Hq=%lld Hkv=%lld "
               "D=%lld, q/o bf16, splits=%s, %lld iters x %lld repeats; baseline: "
               "clkv_attention_decode bf16\n",
               (long long)o.k_bits, (long long)o.v_bits, (long long)o.group, (long long)o.residual,
               clkv_dtype_name(o.meta), (long long)o.hq, (long long)o.hkv, (long long)o.dim,
               o.splits ? "forced" : "auto", (long long)o.iters, (long long)o.repeats);
        printf("%5s %8s %10s %9s %8s %8s %10s %8s %8s %8s\n", "B", "L", "quant_us", "quant_MB",
               "GB/s", "%readBW", "bf16_us", "GB/s", "%readBW", "speedup");
        fflush(stdout);
    }
    int failed = 0, index = 0;
    tool_record rec;
    for (int ib = 0; ib < o.nbatch; ib++)
        for (int il = 0; il < o.nlen; il++) {
            quant_result r;
            memset(&r, 0, sizeof r);
            r.B = o.batch[ib];
            r.L = o.len[il];
            r.tq.median_s = r.tq.min_s = r.tq.first_call_s = NAN;
            r.td.median_s = r.td.min_s = r.td.first_call_s = NAN;
            r.d_gbps = r.d_pct = r.speedup = NAN;
            run_shape(ctx, &o, &bw, &r);
            if (r.status != CLKV_OK) {
                failed = 1;
                fprintf(stderr, "clkv: B=%lld L=%lld failed: %s\n", (long long)r.B, (long long)r.L,
                        r.error);
            }
            fill_record(&rec, info, &o, &bw, &r);
            if (o.format == TOOL_FMT_JSON) {
                if (index == 0)
                    tool_json_begin(stdout);
                tool_json_item(stdout, &rec, index);
            } else if (o.format == TOOL_FMT_CSV) {
                if (index == 0)
                    tool_csv_header(stdout, &rec);
                tool_csv_row(stdout, &rec);
            } else if (r.status == CLKV_OK) {
                printf("%5lld %8lld %10.2f %9.2f %8.1f %8.1f %10.2f %8.1f %8.1f %8.2f\n",
                       (long long)r.B, (long long)r.L, r.tq.median_s * 1e6,
                       (double)r.q_bytes * 1e-6, r.q_gbps, r.q_pct, r.td.median_s * 1e6, r.d_gbps,
                       r.d_pct, r.speedup);
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
