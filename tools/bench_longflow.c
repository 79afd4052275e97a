/* `clkv bench longflow`: one LongFlow step (clkv_longflow_step) on a full static cache,
 * against clkv_attention_decode over the same cache in the same run. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bandwidth.h"
#include "bench_common.h"
#include "bench_util.h"
#include "cli.h"
#include "decode_setup.h"
#include "tool_data.h"

#define MAX_LIST 16

void usage_bench_longflow(FILE *f) {
    fprintf(f,
            "usage: clkv bench longflow [options]\n"
            "\n"
            "Times clkv_longflow_step (write the new token, fused decode + score pass, victim)\n"
            "on a full static cache of random data, and clkv_attention_decode over the same\n"
            "cache (same q, o) in the same run; reports both, the K+V read bandwidth of the\n"
            "step, its percentage of the device's streaming-read bandwidth and step/decode.\n"
            "\n"
            "options (lists are comma-separated; every (batch, slots) pair is run):\n"
            "  --batch N[,N..]     sequences B                            (default 2)\n"
            "  --slots N[,N..]     cache budget S per (sequence, KV head)  (default 1024,32768)\n"
            "  --q-heads N         query heads Hq                         (default 32)\n"
            "  --kv-heads N        KV heads Hkv                           (default 8)\n"
            "  --dim N             head dim D: 64, 128, 256               (default 128)\n"
            "  --dtype T           f32 | f16 | bf16 for q, K, V, new token, o (default bf16)\n"
            "  --mode M            per-layer | per-kv-head                (default per-layer)\n"
            "  --iters N           back-to-back calls per timed batch     (default 100)\n"
            "  --repeats N         timed batches; the median is reported  (default 15)\n"
            "  --warmup N          untimed calls after the first          (default 10)\n"
            "  --bw-runs N         timed runs of the bandwidth probe      (default 7)\n"
            "  --device SEL        \"P:D\", \"gpu\", \"cpu\" or a name substring\n"
            "  --format F          text | json | csv                      (default text)\n"
            "\n"
            "Time per call: the host clock around each batch of --iters calls and a finish,\n"
            "divided by --iters; median over --repeats batches. host_us: the same clock around\n"
            "the calls alone (the host time of a step: validation, kernel lookup, arguments,\n"
            "enqueue), median over the batches. partial_us / finish_us: the\n"
            "step's kernels from profiling events over --iters more back-to-back steps\n"
            "(finish: the duration of the step's last kernel; partial: the gap between two\n"
            "steps' last kernels, i.e. the earlier kernels and the launch gaps). On NVIDIA with\n"
            "a 16-bit cache a step is one kernel (longflow_step_keyrows, or longflow_step_mma\n"
            "with CLKV_LONGFLOW_KEYROWS=0 or G > 8): finish_us is then the\n"
            "whole step kernel and partial_us the launch gap; CLKV_LONGFLOW_FUSED=0 restores\n"
            "the two-kernel step (partial + finish) for comparison. Bytes: B*Hkv*S*D*2*element\n"
            "size (K and V read once). Launch geometry overrides for tuning (read at cache\n"
            "creation): CLKV_LONGFLOW_EPL, CLKV_LONGFLOW_WG, CLKV_LONGFLOW_UNROLL,\n"
            "CLKV_LONGFLOW_SPLITS, CLKV_LONGFLOW_CPASYNC, CLKV_LONGFLOW_STAGES (CUDA-core\n"
            "partial), CLKV_LONGFLOW_MMA (0: never the tensor-core partial),\n"
            "CLKV_LONGFLOW_MMA_KW, CLKV_LONGFLOW_MMA_STAGES, CLKV_LONGFLOW_MMA_MIN_CHUNK,\n"
            "CLKV_LONGFLOW_MMA_SPLITS (tensor-core partial: NVIDIA, f16 / bf16, D 64 / 128),\n"
            "CLKV_LONGFLOW_SCORE_LANES, CLKV_LONGFLOW_SCORE_ROUNDS (finish kernel; in the\n"
            "one-kernel step ROUNDS sets the score chunks: ROUNDS x work-group size slots),\n"
            "CLKV_LONGFLOW_FUSED, CLKV_LONGFLOW_KEYROWS, CLKV_LONGFLOW_KEYROWS_WARPS,\n"
            "CLKV_LONGFLOW_INTERLEAVE. Progress goes to stderr, results to stdout.\n");
}

typedef struct lf_opts {
    int64_t batch[MAX_LIST], slots[MAX_LIST];
    int nbatch, nslots;
    int64_t hq, hkv, dim, iters, repeats, warmup, bw_runs;
    clkv_dtype dtype;
    clkv_longflow_mode mode;
    const char *device;
    tool_format format;
} lf_opts;

static int parse_opts(int argc, char **argv, lf_opts *o) {
    const bench_common_opts common = {.iters = &o->iters,
                                      .iters_max = 1000000,
                                      .repeats = &o->repeats,
                                      .repeats_max = 1000,
                                      .warmup = &o->warmup,
                                      .bw_runs = &o->bw_runs,
                                      .bw_runs_max = 1000,
                                      .device = &o->device,
                                      .format = &o->format};
    memset(o, 0, sizeof *o);
    o->batch[0] = 2;
    o->nbatch = 1;
    o->slots[0] = 1024;
    o->slots[1] = 32768;
    o->nslots = 2;
    o->hq = 32;
    o->hkv = 8;
    o->dim = 128;
    o->iters = 100;
    o->repeats = 15;
    o->warmup = 10;
    o->bw_runs = 7;
    o->dtype = CLKV_BF16;
    o->mode = CLKV_LONGFLOW_PER_LAYER;
    o->format = TOOL_FMT_TEXT;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int m, bad = 0;
        if (opt_is_help(argv[i])) {
            usage_bench_longflow(stdout);
            return 1;
        } else if ((m = opt_value(argc, argv, &i, "--batch", &v)) != 0) {
            bad = m < 0 ||
                  (o->nbatch = parse_int_list("--batch", v, 1, 65535, o->batch, MAX_LIST)) < 0;
        } else if ((m = opt_value(argc, argv, &i, "--slots", &v)) != 0) {
            bad = m < 0 ||
                  (o->nslots = parse_int_list("--slots", v, 2, INT32_MAX, o->slots, MAX_LIST)) < 0;
        } else if ((m = opt_value(argc, argv, &i, "--q-heads", &v)) != 0) {
            bad = m < 0 || parse_int("--q-heads", v, 1, 1024, &o->hq) != 0;
        } else if ((m = opt_value(argc, argv, &i, "--kv-heads", &v)) != 0) {
            bad = m < 0 || parse_int("--kv-heads", v, 1, 1024, &o->hkv) != 0;
        } else if ((m = opt_value(argc, argv, &i, "--dim", &v)) != 0) {
            bad = m < 0 || parse_int("--dim", v, 1, 4096, &o->dim) != 0;
        } else if ((m = opt_value(argc, argv, &i, "--dtype", &v)) != 0) {
            bad = m < 0 || parse_float_dtype("--dtype", v, &o->dtype) != 0;
        } else if ((m = opt_value(argc, argv, &i, "--mode", &v)) != 0) {
            if (m > 0 && strcmp(v, "per-layer") == 0) {
                o->mode = CLKV_LONGFLOW_PER_LAYER;
            } else if (m > 0 && strcmp(v, "per-kv-head") == 0) {
                o->mode = CLKV_LONGFLOW_PER_KV_HEAD;
            } else {
                if (m > 0) {
                    fprintf(stderr, "clkv: --mode: '%s' is not one of per-layer, per-kv-head\n", v);
                }
                bad = 1;
            }
        } else if ((m = bench_common_option(argc, argv, &i, &common)) != 0) {
            bad = m < 0;
        } else {
            fprintf(stderr, "clkv bench longflow: unknown option '%s'\n", argv[i]);
            bad = 1;
        }
        if (bad) {
            return -1;
        }
    }
    return 0;
}

/* Per-call time of `iters` back-to-back steps (host clock around them and a finish). */
/* Per call: the host clock around `iters` calls and a finish, and (host) around the calls
 * alone, i.e. the host time a step costs (validation, kernel lookup, arguments, enqueue)
 * while the GPU runs the earlier steps. */
static clkv_status time_steps(clkv_context *ctx, clkv_longflow_cache *c,
                              const clkv_longflow_step_args *a, int iters, double *per_call,
                              double *host) {
    const double t0 = tool_now();
    for (int i = 0; i < iters; i++) {
        clkv_status st = clkv_longflow_step(c, a, NULL);
        if (st != CLKV_OK) {
            return st;
        }
    }
    const double t1 = tool_now();
    clkv_status st = clkv_context_finish(ctx);
    *per_call = (tool_now() - t0) / iters;
    *host = (t1 - t0) / iters;
    return st;
}

static clkv_status time_step_runs(clkv_context *ctx, clkv_longflow_cache *c,
                                  const clkv_longflow_step_args *a, const lf_opts *o,
                                  tool_timing *t, double *host_s) {
    double warm, host, per[BENCH_MAX_REPEATS], hosts[BENCH_MAX_REPEATS];
    clkv_status st = time_steps(ctx, c, a, 1, &t->first_call_s, &host);
    if (st == CLKV_OK && o->warmup > 0) {
        st = time_steps(ctx, c, a, (int)o->warmup, &warm, &host);
    }
    for (int r = 0; r < o->repeats && st == CLKV_OK; r++) {
        st = time_steps(ctx, c, a, (int)o->iters, &per[r], &hosts[r]);
    }
    if (st == CLKV_OK) {
        t->median_s = tool_median(per, (int)o->repeats);
        t->min_s = tool_min(per, (int)o->repeats);
        *host_s = tool_median(hosts, (int)o->repeats);
    }
    return st;
}

/* Per-kernel split of a step: `n` back-to-back steps, each with the finish kernel's event
 * (the queue has profiling on). finish = median END - START of the finish kernel; partial =
 * median of (this finish's START - the previous finish's END), i.e. the partial kernel plus
 * the launch gaps around it. */
static clkv_status time_kernels(clkv_context *ctx, clkv_longflow_cache *c,
                                const clkv_longflow_step_args *a, int n, double *partial_s,
                                double *finish_s) {
    enum { MAXN = 256 };
    cl_event ev[MAXN];
    double fin[MAXN], gap[MAXN];
    if (n > MAXN)
        n = MAXN;
    if (n < 2)
        n = 2;
    int made = 0;
    clkv_status st = CLKV_OK;
    for (; made < n && st == CLKV_OK; made++) {
        st = clkv_longflow_step(c, a, &ev[made]);
        if (st != CLKV_OK)
            break;
    }
    if (st == CLKV_OK)
        st = clkv_context_finish(ctx);
    cl_ulong prev_end = 0;
    for (int i = 0; i < made; i++) {
        cl_ulong t0 = 0, t1 = 0;
        if (st == CLKV_OK)
            st = clGetEventProfilingInfo(ev[i], CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL);
        if (st == CLKV_OK)
            st = clGetEventProfilingInfo(ev[i], CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
        fin[i] = (double)(t1 - t0) * 1e-9;
        if (i > 0)
            gap[i - 1] = (double)(t0 - prev_end) * 1e-9;
        prev_end = t1;
        clReleaseEvent(ev[i]);
    }
    if (st == CLKV_OK) {
        *finish_s = tool_median(fin, made);
        *partial_s = tool_median(gap, made - 1);
    }
    return st;
}

typedef struct lf_result {
    int64_t B, S;
    clkv_status status;
    char error[256];
    tool_timing step, decode;
    double partial_s, finish_s; /* per-kernel split of a step (time_kernels) */
    double host_s;              /* host time per step (time_steps) */
    uint64_t kv_bytes;
    double gbps, pct, ratio;
} lf_result;

/* A full cache: random K/V, slot i holds position i, next position S, victim 0. */
static clkv_status fill_cache(clkv_context *ctx, clkv_longflow_cache *c, int64_t B, int64_t Hm,
                              int64_t S, int64_t Hkv, int64_t D, clkv_dtype dt) {
    const clkv_tensor k = clkv_longflow_cache_k(c), v = clkv_longflow_cache_v(c);
    const uint64_t n = (uint64_t)(B * Hkv * S * D);
    clkv_status st;
    if ((st = tool_fill_random(ctx, k.buf, dt, n, 11u, 1.0f)) ||
        (st = tool_fill_random(ctx, v.buf, dt, n, 12u, 1.0f)))
        return st;
    int32_t *pos = malloc((size_t)(B * Hm * S) * sizeof *pos);
    int32_t *np = malloc((size_t)B * sizeof *np);
    if (!pos || !np) {
        free(pos);
        free(np);
        return CLKV_ERR_OUT_OF_HOST_MEMORY;
    }
    for (int64_t i = 0; i < B * Hm * S; i++)
        pos[i] = (int32_t)(i % S);
    for (int64_t b = 0; b < B; b++)
        np[b] = (int32_t)S;
    st = tool_write(ctx, clkv_longflow_cache_positions(c).buf, pos,
                    (size_t)(B * Hm * S) * sizeof *pos);
    if (st == CLKV_OK)
        st = tool_write(ctx, clkv_longflow_cache_next_positions(c).buf, np, (size_t)B * sizeof *np);
    free(pos);
    free(np);
    return st;
}

static void run_shape(clkv_context *ctx, const lf_opts *o, const tool_bandwidth *bw, lf_result *r) {
    const int64_t B = r->B, S = r->S, Hq = o->hq, Hkv = o->hkv, D = o->dim;
    const int64_t Hm = o->mode == CLKV_LONGFLOW_PER_KV_HEAD ? Hkv : 1;
    const uint32_t es = clkv_dtype_size(o->dtype);
    cl_mem bq = NULL, bkn = NULL, bvn = NULL, bo = NULL;
    clkv_longflow_cache *c = NULL;
    const char *what = "clkv_longflow_cache_create";
    clkv_longflow_cache_create_args ca = CLKV_LONGFLOW_CACHE_CREATE_ARGS_INIT;
    ca.batch = B;
    ca.q_heads = Hq;
    ca.kv_heads = Hkv;
    ca.head_dim = D;
    ca.slots = S;
    ca.dtype = o->dtype;
    ca.mode = o->mode;
    r->kv_bytes = (uint64_t)(B * Hkv * S * D) * 2u * es;
    clkv_status st = clkv_longflow_cache_create(ctx, &ca, &c);
    if (st == CLKV_OK) {
        what = "buffers";
        if ((st = tool_buffer(ctx, "q", (uint64_t)(B * Hq * D) * es, &bq)) ||
            (st = tool_buffer(ctx, "k_new", (uint64_t)(B * Hkv * D) * es, &bkn)) ||
            (st = tool_buffer(ctx, "v_new", (uint64_t)(B * Hkv * D) * es, &bvn)) ||
            (st = tool_buffer(ctx, "o", (uint64_t)(B * Hq * D) * es, &bo)) ||
            (st = tool_fill_random(ctx, bq, o->dtype, (uint64_t)(B * Hq * D), 13u, 1.0f)) ||
            (st = tool_fill_random(ctx, bkn, o->dtype, (uint64_t)(B * Hkv * D), 14u, 1.0f)) ||
            (st = tool_fill_random(ctx, bvn, o->dtype, (uint64_t)(B * Hkv * D), 15u, 1.0f)) ||
            (st = fill_cache(ctx, c, B, Hm, S, Hkv, D, o->dtype)))
            (void)0;
    }
    if (st == CLKV_OK) {
        char label[96];
        snprintf(label, sizeof label, "[bench] decode B=%lld S=%lld", (long long)B, (long long)S);
        clkv_longflow_step_args sa = CLKV_LONGFLOW_STEP_ARGS_INIT;
        sa.q = clkv_tensor_3d(bq, o->dtype, B, Hq, D);
        sa.k_new = clkv_tensor_3d(bkn, o->dtype, B, Hkv, D);
        sa.v_new = clkv_tensor_3d(bvn, o->dtype, B, Hkv, D);
        sa.o = clkv_tensor_3d(bo, o->dtype, B, Hq, D);
        fprintf(stderr, "[bench] longflow B=%lld S=%lld...\n", (long long)B, (long long)S);
        what = "clkv_longflow_step";
        st = time_step_runs(ctx, c, &sa, o, &r->step, &r->host_s);
        if (st == CLKV_OK)
            st = time_kernels(ctx, c, &sa, (int)o->iters, &r->partial_s, &r->finish_s);
        if (st == CLKV_OK) {
            clkv_attention_decode_args da = CLKV_ATTENTION_DECODE_ARGS_INIT;
            da.q = sa.q;
            da.k = clkv_longflow_cache_k(c);
            da.v = clkv_longflow_cache_v(c);
            da.o = sa.o;
            da.max_length = S;
            what = "clkv_attention_decode";
            st = tool_decode_time(ctx, &da, (int)o->warmup, (int)o->iters, (int)o->repeats, label,
                                  &r->decode);
        }
    }
    if (st != CLKV_OK) {
        r->status = st;
        snprintf(r->error, sizeof r->error, "%s: %s: %s", what, clkv_status_string(st),
                 clkv_last_error(ctx));
    } else {
        r->gbps = (double)r->kv_bytes / r->step.median_s * 1e-9;
        r->pct = 100.0 * r->gbps / bw->gbps_median;
        r->ratio = r->step.median_s / r->decode.median_s;
    }
    clkv_context_finish(ctx);
    tool_release(&bq);
    tool_release(&bkn);
    tool_release(&bvn);
    tool_release(&bo);
    clkv_longflow_cache_destroy(c);
}

static void fill_record(tool_record *rec, const clkv_device_info *info, const lf_opts *o,
                        const tool_bandwidth *bw, const lf_result *r) {
    tool_record_init(rec);
    tool_record_str(rec, "op", "longflow-step");
    tool_record_str(rec, "device", info->device_name);
    tool_record_str(rec, "platform", info->platform_name);
    tool_record_str(rec, "dtype", clkv_dtype_name(o->dtype));
    tool_record_str(rec, "mode", o->mode == CLKV_LONGFLOW_PER_LAYER ? "per-layer" : "per-kv-head");
    tool_record_int(rec, "batch", r->B);
    tool_record_int(rec, "q_heads", o->hq);
    tool_record_int(rec, "kv_heads", o->hkv);
    tool_record_int(rec, "dim", o->dim);
    tool_record_int(rec, "slots", r->S);
    tool_record_int(rec, "iters", o->iters);
    tool_record_int(rec, "repeats", o->repeats);
    tool_record_num(rec, "median_us", r->step.median_s * 1e6);
    tool_record_num(rec, "min_us", r->step.min_s * 1e6);
    tool_record_num(rec, "first_call_ms", r->step.first_call_s * 1e3);
    tool_record_num(rec, "partial_us", r->partial_s * 1e6);
    tool_record_num(rec, "finish_us", r->finish_s * 1e6);
    tool_record_num(rec, "host_us", r->host_s * 1e6);
    tool_record_num(rec, "decode_median_us", r->decode.median_s * 1e6);
    tool_record_num(rec, "ratio_vs_decode", r->ratio);
    tool_record_int(rec, "kv_bytes", (long long)r->kv_bytes);
    tool_record_num(rec, "gbps", r->gbps);
    tool_record_num(rec, "read_bw_gbps", bw->gbps_median);
    tool_record_num(rec, "pct_read_bw", r->pct);
    tool_record_str(rec, "status", r->status == CLKV_OK ? "ok" : "error");
    tool_record_str(rec, "error", r->error);
}

int bench_longflow(int argc, char **argv) {
    lf_opts o;
    int pr = parse_opts(argc, argv, &o);
    if (pr != 0) {
        if (pr < 0) {
            usage_bench_longflow(stderr);
        }
        return pr > 0 ? TOOL_EXIT_OK : TOOL_EXIT_USAGE;
    }
    clkv_context *ctx = NULL;
    clkv_status st = clkv_context_create(o.device, &ctx);
    if (st != CLKV_OK) {
        return report_failure(NULL, st, "clkv_context_create");
    }
    const clkv_device_info *info = clkv_context_device_info(ctx);
    fprintf(stderr, "[bench] device: %s (%s); measuring streaming-read bandwidth...\n",
            info->device_name, info->platform_name);
    tool_bandwidth bw;
    st = tool_measure_bandwidth(ctx, (int)o.bw_runs, &bw);
    if (st != CLKV_OK) {
        int rc = report_failure(ctx, st, "bandwidth measurement");
        clkv_context_destroy(ctx);
        return rc;
    }
    if (o.format == TOOL_FMT_TEXT) {
        printf("device: %s | %s | driver %s | %u CUs\n", info->device_name, info->platform_name,
               info->driver_version, info->compute_units);
        printf("streaming read: %.1f GB/s (median of %d runs)\n", bw.gbps_median, bw.runs);
        printf("longflow step: %s %s, Hq=%lld Hkv=%lld D=%lld, %lld iters x %lld repeats\n",
               clkv_dtype_name(o.dtype),
               o.mode == CLKV_LONGFLOW_PER_LAYER ? "per-layer" : "per-kv-head", (long long)o.hq,
               (long long)o.hkv, (long long)o.dim, (long long)o.iters, (long long)o.repeats);
        printf("%5s %8s %11s %11s %8s %10s %9s %9s %9s %9s %11s %7s\n", "B", "S", "step_us",
               "min_us", "host_us", "partial_us", "finish_us", "KV_MB", "GB/s", "%readBW",
               "decode_us", "ratio");
        fflush(stdout);
    }
    int failed = 0, index = 0;
    tool_record rec;
    for (int ib = 0; ib < o.nbatch; ib++) {
        for (int is = 0; is < o.nslots; is++) {
            lf_result r;
            memset(&r, 0, sizeof r);
            r.B = o.batch[ib];
            r.S = o.slots[is];
            r.step.median_s = r.step.min_s = r.decode.median_s = NAN;
            r.gbps = r.pct = r.ratio = NAN;
            run_shape(ctx, &o, &bw, &r);
            failed |= r.status != CLKV_OK;
            if (r.status != CLKV_OK) {
                fprintf(stderr, "clkv: B=%lld S=%lld failed: %s\n", (long long)r.B, (long long)r.S,
                        r.error);
            }
            fill_record(&rec, info, &o, &bw, &r);
            if (o.format == TOOL_FMT_JSON) {
                if (index == 0) {
                    tool_json_begin(stdout);
                }
                tool_json_item(stdout, &rec, index);
            } else if (o.format == TOOL_FMT_CSV) {
                if (index == 0) {
                    tool_csv_header(stdout, &rec);
                }
                tool_csv_row(stdout, &rec);
            } else if (r.status == CLKV_OK) {
                printf(
                    "%5lld %8lld %11.2f %11.2f %8.2f %10.2f %9.2f %9.2f %9.1f %9.1f %11.2f %7.3f\n",
                    (long long)r.B, (long long)r.S, r.step.median_s * 1e6, r.step.min_s * 1e6,
                    r.host_s * 1e6, r.partial_s * 1e6, r.finish_s * 1e6, (double)r.kv_bytes * 1e-6,
                    r.gbps, r.pct, r.decode.median_s * 1e6, r.ratio);
            } else {
                printf("%5lld %8lld  error: %s\n", (long long)r.B, (long long)r.S, r.error);
            }
            fflush(stdout);
            index++;
        }
    }
    if (o.format == TOOL_FMT_JSON) {
        tool_json_end(stdout);
    }
    clkv_context_destroy(ctx);
    return failed ? TOOL_EXIT_FAIL : TOOL_EXIT_OK;
}
