/* `clkv bench attention-window`: window / prefill attention (SPEC §1.2) timing, K+V
 * bandwidth against the device's streaming read, and TFLOP/s. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bandwidth.h"
#include "bench_common.h"
#include "bench_harness.h"
#include "bench_util.h"
#include "cli.h"
#include "reference.h"
#include "runtime/internal.h"
#include "tool_data.h"

#define SEED_Q 111u
#define SEED_K 122u
#define SEED_V 133u

void usage_bench_window(FILE *f) {
    fprintf(f,
            "usage: clkv bench attention-window [options]\n"
            "\n"
            "Times clkv_attention_window on random data: the last T positions of every\n"
            "sequence attend causally to its len tokens (T = --window, or T = len with\n"
            "--prefill). Reports the K+V read bandwidth, also as a percentage of the device's\n"
            "streaming-read bandwidth measured in the same run, and the attention TFLOP/s.\n"
            "\n"
            "options (lists are comma-separated; every (batch, len) pair is run):\n"
            "  --batch N[,N..]     sequences B                           (default 1)\n"
            "  --len N[,N..]       tokens per sequence (= L)             (default 16384)\n"
            "  --window N          query rows T per sequence             (default 8)\n"
            "  --prefill           T = len (full causal prefill)\n"
            "  --q-heads N         query heads Hq                        (default 32)\n"
            "  --kv-heads N        KV heads Hkv (Hq %% Hkv == 0)           (default 8)\n"
            "  --dim N             head dim D: 64, 128, 256              (default 128)\n"
            "  --dtype T           f32 | f16 | bf16 for q, K, V and o    (default bf16)\n"
            "  --layout L          K/V hnd ([B,H,L,D]) | nhd ([B,L,H,D])  (default hnd)\n"
            "  --splits N          force the split-K count, 0 = auto      (default 0)\n"
            "  --lse               also compute the LSE output\n"
            "  --iters N           back-to-back calls per timed batch     (default 20)\n"
            "  --repeats N         timed batches; the median is reported  (default 9)\n"
            "  --warmup N          untimed calls after the first          (default 3)\n"
            "  --bw-runs N         timed runs of the bandwidth probe      (default 7)\n"
            "  --no-check          skip the CPU reference check (rows 0, T/2, T-1 of the\n"
            "                      last sequence's first and last KV head)\n"
            "  --device SEL        \"P:D\", \"gpu\", \"cpu\" or a name substring\n"
            "  --format F          text | json | csv                      (default text)\n"
            "\n"
            "Time per call: the host clock around each batch of --iters calls and a finish,\n"
            "divided by --iters; median (and min) over --repeats batches. Bytes: B*Hkv*len*D*2*\n"
            "element size (K and V once). FLOPs: 4*D per (query row, visible key) pair, i.e.\n"
            "4*B*Hq*D*sum_t (len-T+t+1) (causal). Progress on stderr, results on stdout.\n");
}

typedef struct window_opts {
    int64_t batch[BENCH_MAX_LIST], len[BENCH_MAX_LIST];
    int nbatch, nlen;
    int64_t window, hq, hkv, dim;
    int prefill;
    clkv_dtype dtype;
    int nhd;
    int64_t splits, iters, repeats, warmup, bw_runs;
    int lse, check;
    const char *device;
    tool_format format;
} window_opts;

static int parse_opts(int argc, char **argv, window_opts *o) {
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
                                      .batch_max = 1 << 16,
                                      .len = o->len,
                                      .nlen = &o->nlen,
                                      .len_max = INT32_MAX,
                                      .q_heads = &o->hq,
                                      .kv_heads = &o->hkv,
                                      .dim = &o->dim,
                                      .dtype = &o->dtype,
                                      .nhd = &o->nhd,
                                      .splits = &o->splits};
    memset(o, 0, sizeof *o);
    o->batch[0] = 1;
    o->nbatch = 1;
    o->len[0] = 16384;
    o->nlen = 1;
    o->window = 8;
    o->hq = 32;
    o->hkv = 8;
    o->dim = 128;
    o->dtype = CLKV_BF16;
    o->iters = 20;
    o->repeats = 9;
    o->warmup = 3;
    o->bw_runs = 7;
    o->check = 1;
    o->format = TOOL_FMT_TEXT;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int m, bad = 0;
        if (opt_is_help(argv[i])) {
            usage_bench_window(stdout);
            return 1;
        } else if ((m = opt_value(argc, argv, &i, "--window", &v)) != 0) {
            bad = m < 0 || parse_int("--window", v, 1, INT32_MAX, &o->window) != 0;
        } else if ((m = bench_common_option(argc, argv, &i, &common)) != 0) {
            bad = m < 0;
        } else if (strcmp(argv[i], "--prefill") == 0) {
            o->prefill = 1;
        } else if (strcmp(argv[i], "--lse") == 0) {
            o->lse = 1;
        } else if (strcmp(argv[i], "--no-check") == 0) {
            o->check = 0;
        } else {
            fprintf(stderr, "clkv bench attention-window: unknown option '%s'\n", argv[i]);
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

/* One benchmarked shape. */
typedef struct wshape {
    int64_t B, Hq, Hkv, D, L, T;
    clkv_dtype dtype;
    int nhd;
} wshape;

typedef struct wbufs {
    cl_mem q, k, v, o, lse, lengths;
} wbufs;

typedef struct wresult {
    int64_t B, L, T;
    clkv_status status;
    char error[256];
    tool_timing t;
    uint64_t kv_bytes, workspace_bytes;
    double flops, gbps, pct, tflops;
    const char *check;
    double check_err;
} wresult;

static void free_bufs(wbufs *b) {
    tool_release(&b->q);
    tool_release(&b->k);
    tool_release(&b->v);
    tool_release(&b->o);
    tool_release(&b->lse);
    tool_release(&b->lengths);
}

static clkv_status alloc_bufs(clkv_context *ctx, const wshape *s, int with_lse, wbufs *b) {
    const uint64_t es = clkv_dtype_size(s->dtype);
    const uint64_t nq = (uint64_t)(s->B * s->Hq * s->T * s->D);
    const uint64_t nkv = (uint64_t)(s->B * s->Hkv * s->L * s->D);
    memset(b, 0, sizeof *b);
    clkv_status st = tool_buffer(ctx, "q", nq * es, &b->q);
    if (st == CLKV_OK)
        st = tool_buffer(ctx, "k", nkv * es, &b->k);
    if (st == CLKV_OK)
        st = tool_buffer(ctx, "v", nkv * es, &b->v);
    if (st == CLKV_OK)
        st = tool_buffer(ctx, "o", nq * es, &b->o);
    if (st == CLKV_OK && with_lse)
        st = tool_buffer(ctx, "lse", (uint64_t)(s->B * s->Hq * s->T) * 4, &b->lse);
    if (st == CLKV_OK)
        st = tool_buffer(ctx, "lengths", (uint64_t)s->B * 4, &b->lengths);
    if (st == CLKV_OK)
        st = tool_fill_random(ctx, b->q, s->dtype, nq, SEED_Q, 4.0f);
    if (st == CLKV_OK)
        st = tool_fill_random(ctx, b->k, s->dtype, nkv, SEED_K, 1.0f);
    if (st == CLKV_OK)
        st = tool_fill_random(ctx, b->v, s->dtype, nkv, SEED_V, 1.0f);
    if (st == CLKV_OK) {
        int32_t *lens = malloc((size_t)s->B * sizeof *lens);
        if (!lens)
            st = clkv__fail(ctx, CLKV_ERR_OUT_OF_HOST_MEMORY, "lengths: out of host memory");
        for (int64_t i = 0; lens && i < s->B; i++)
            lens[i] = (int32_t)s->L;
        if (st == CLKV_OK)
            st = tool_write(ctx, b->lengths, lens, (size_t)s->B * sizeof *lens);
        free(lens);
    }
    if (st == CLKV_OK)
        st = clkv_context_finish(ctx);
    if (st != CLKV_OK)
        free_bufs(b);
    return st;
}

static clkv_attention_window_args make_args(const wshape *s, const wbufs *b, int32_t splits) {
    clkv_attention_window_args a = CLKV_ATTENTION_WINDOW_ARGS_INIT;
    a.q = clkv_tensor_4d(b->q, s->dtype, s->B, s->Hq, s->T, s->D);
    if (s->nhd) {
        a.k = clkv_tensor_4d_nhd(b->k, s->dtype, s->B, s->Hkv, s->L, s->D);
        a.v = clkv_tensor_4d_nhd(b->v, s->dtype, s->B, s->Hkv, s->L, s->D);
    } else {
        a.k = clkv_tensor_4d(b->k, s->dtype, s->B, s->Hkv, s->L, s->D);
        a.v = clkv_tensor_4d(b->v, s->dtype, s->B, s->Hkv, s->L, s->D);
    }
    a.lengths = clkv_tensor_1d(b->lengths, CLKV_I32, s->B);
    a.o = clkv_tensor_4d(b->o, s->dtype, s->B, s->Hq, s->T, s->D);
    a.lse = b->lse ? clkv_tensor_3d(b->lse, CLKV_F32, s->B, s->Hq, s->T) : clkv_tensor_none();
    a.num_splits = splits;
    return a;
}

static clkv_status call_window(clkv_context *ctx, const void *arg) {
    return clkv_attention_window(ctx, (const clkv_attention_window_args *)arg, NULL);
}

/* Rows 0, T/2, T-1 of sequence B-1 for its first and last KV head against the double
 * reference, inputs regenerated from the fill seeds. */
static clkv_status check(clkv_context *ctx, const wshape *s, const wbufs *b, tool_compare *c) {
    const int64_t G = s->Hq / s->Hkv, D = s->D, L = s->L, T = s->T, bb = s->B - 1;
    const uint64_t nq = (uint64_t)(s->B * s->Hq * T * D);
    const uint64_t es = clkv_dtype_size(s->dtype);
    void *o_img = malloc((size_t)(nq * es));
    float *lse_img = b->lse ? malloc((size_t)(s->B * s->Hq * T) * 4) : NULL;
    float *k = malloc((size_t)(L * D) * sizeof(float)), *v = malloc((size_t)(L * D) * 4);
    float *q = malloc((size_t)(G * D) * 4);
    double *oref = malloc((size_t)(G * D) * sizeof(double)), *lref = malloc((size_t)G * 8);
    clkv_status st = CLKV_OK;
    if (!o_img || (b->lse && !lse_img) || !k || !v || !q || !oref || !lref)
        st = clkv__fail(ctx, CLKV_ERR_OUT_OF_HOST_MEMORY, "check: out of host memory");
    if (st == CLKV_OK)
        st = tool_read(ctx, b->o, o_img, (size_t)(nq * es));
    if (st == CLKV_OK && lse_img)
        st = tool_read(ctx, b->lse, lse_img, (size_t)(s->B * s->Hq * T) * 4);
    const int64_t heads[2] = {0, s->Hkv - 1};
    const int64_t rows[3] = {0, T / 2, T - 1};
    const double scale = 1.0 / sqrt((double)D);
    for (int ih = 0; ih < (s->Hkv > 1 ? 2 : 1) && st == CLKV_OK; ih++) {
        const int64_t h = heads[ih];
        for (int64_t j = 0; j < L; j++) {
            for (int64_t d = 0; d < D; d++) {
                const int64_t idx = s->nhd ? ((bb * L + j) * s->Hkv + h) * D + d
                                           : ((bb * s->Hkv + h) * L + j) * D + d;
                k[j * D + d] =
                    tool_round_to(s->dtype, tool_rand_value((uint64_t)idx, SEED_K, 1.0f));
                v[j * D + d] =
                    tool_round_to(s->dtype, tool_rand_value((uint64_t)idx, SEED_V, 1.0f));
            }
        }
        for (int ir = 0; ir < 3; ir++) {
            const int64_t t = rows[ir];
            if (ir > 0 && t == rows[ir - 1])
                continue;
            for (int64_t g = 0; g < G; g++) {
                for (int64_t d = 0; d < D; d++) {
                    const int64_t idx = ((bb * s->Hq + h * G + g) * T + t) * D + d;
                    q[g * D + d] =
                        tool_round_to(s->dtype, tool_rand_value((uint64_t)idx, SEED_Q, 4.0f));
                }
            }
            tool_ref_decode_group(q, k, v, L - T + t + 1, D, D, (int)G, scale, oref, lref);
            for (int64_t g = 0; g < G; g++) {
                const int64_t row = (bb * s->Hq + h * G + g) * T + t;
                for (int64_t d = 0; d < D; d++)
                    tool_compare_value(c, tool_load(o_img, s->dtype, (size_t)(row * D + d)),
                                       oref[g * D + d]);
                if (lse_img)
                    tool_compare_lse(c, lse_img[row], lref[g]);
            }
        }
    }
    free(o_img);
    free(lse_img);
    free(k);
    free(v);
    free(q);
    free(oref);
    free(lref);
    return st;
}

static void run_shape(clkv_context *ctx, const window_opts *o, const tool_bandwidth *bw,
                      wresult *r) {
    const wshape s = {.B = r->B,
                      .Hq = o->hq,
                      .Hkv = o->hkv,
                      .D = o->dim,
                      .L = r->L,
                      .T = r->T,
                      .dtype = o->dtype,
                      .nhd = o->nhd};
    wbufs b;
    const char *what = "allocation";
    r->check = "skipped";
    r->check_err = NAN;
    r->kv_bytes = (uint64_t)(s.B * s.Hkv * s.L * s.D) * 2u * clkv_dtype_size(s.dtype);
    /* visible (row, key) pairs: sum over t of max(0, L - T + t + 1) */
    double pairs = 0.0;
    for (int64_t t = 0; t < s.T; t++) {
        const int64_t n = s.L - s.T + t + 1;
        pairs += n > 0 ? (double)n : 0.0;
    }
    r->flops = 4.0 * (double)s.D * (double)(s.B * s.Hq) * pairs;
    clkv_status st = alloc_bufs(ctx, &s, o->lse, &b);
    if (st == CLKV_OK) {
        clkv_attention_window_args a = make_args(&s, &b, (int32_t)o->splits);
        char label[96];
        size_t ws = 0;
        snprintf(label, sizeof label, "[bench] B=%lld L=%lld T=%lld", (long long)s.B,
                 (long long)s.L, (long long)s.T);
        what = "clkv_attention_window_workspace_size";
        st = clkv_attention_window_workspace_size(ctx, &a, &ws);
        r->workspace_bytes = ws;
        if (st == CLKV_OK) {
            what = "clkv_attention_window";
            st = bench_time_call(ctx, call_window, &a, (int)o->iters, (int)o->repeats,
                                 (int)o->warmup, label, &r->t);
        }
        if (st == CLKV_OK && o->check) {
            tool_compare c;
            tool_compare_init(&c, s.dtype);
            what = "check";
            st = check(ctx, &s, &b, &c);
            if (st == CLKV_OK) {
                r->check = tool_compare_pass(&c) ? "pass" : "fail";
                r->check_err = c.max_abs_err;
            }
        }
        free_bufs(&b);
    }
    if (st != CLKV_OK) {
        r->status = st;
        bench_error_text(ctx, st, what, r->error, sizeof r->error);
        return;
    }
    r->gbps = (double)r->kv_bytes / r->t.median_s * 1e-9;
    r->pct = 100.0 * r->gbps / bw->gbps_median;
    r->tflops = r->flops / r->t.median_s * 1e-12;
}

static void fill_record(tool_record *rec, const bench_session *s, const window_opts *o,
                        const wresult *r) {
    bench_record_begin(rec, s, "attention-window");
    tool_record_str(rec, "dtype", clkv_dtype_name(o->dtype));
    tool_record_str(rec, "layout", o->nhd ? "nhd" : "hnd");
    tool_record_int(rec, "batch", r->B);
    tool_record_int(rec, "q_heads", o->hq);
    tool_record_int(rec, "kv_heads", o->hkv);
    tool_record_int(rec, "dim", o->dim);
    tool_record_int(rec, "len", r->L);
    tool_record_int(rec, "window", r->T);
    tool_record_int(rec, "prefill", o->prefill);
    tool_record_int(rec, "splits", o->splits);
    tool_record_int(rec, "lse", o->lse);
    tool_record_int(rec, "iters", o->iters);
    tool_record_int(rec, "repeats", o->repeats);
    bench_record_timing(rec, &r->t);
    tool_record_int(rec, "kv_bytes", (long long)r->kv_bytes);
    tool_record_int(rec, "workspace_bytes", (long long)r->workspace_bytes);
    tool_record_num(rec, "gbps", r->gbps);
    tool_record_num(rec, "read_bw_gbps", s->bw.gbps_median);
    tool_record_num(rec, "pct_read_bw", r->pct);
    tool_record_num(rec, "flops", r->flops);
    tool_record_num(rec, "tflops", r->tflops);
    tool_record_str(rec, "check", r->check);
    tool_record_num(rec, "check_max_abs_err", r->check_err);
    bench_record_status(rec, r->status, r->error);
}

int bench_window(int argc, char **argv) {
    window_opts o;
    const int pr = parse_opts(argc, argv, &o);
    if (pr != 0) {
        if (pr < 0)
            usage_bench_window(stderr);
        return pr > 0 ? TOOL_EXIT_OK : TOOL_EXIT_USAGE;
    }
    bench_session s;
    const int rc = bench_open(&s, o.device, o.format, (int)o.bw_runs);
    if (rc != TOOL_EXIT_OK)
        return rc;
    if (o.format == TOOL_FMT_TEXT) {
        bench_print_device(&s);
        bench_print_bandwidth(&s);
        printf("attention-window: %s %s, Hq=%lld Hkv=%lld D=%lld, T=%s, splits=%s%s, %lld iters "
               "x %lld repeats\n",
               clkv_dtype_name(o.dtype), o.nhd ? "nhd" : "hnd", (long long)o.hq, (long long)o.hkv,
               (long long)o.dim, o.prefill ? "len (prefill)" : "window",
               o.splits ? "forced" : "auto", o.lse ? ", +lse" : "", (long long)o.iters,
               (long long)o.repeats);
        printf("%5s %8s %8s %11s %11s %9s %9s %9s %9s %9s %6s\n", "B", "L", "T", "median_us",
               "min_us", "KV_MB", "GB/s", "%readBW", "TFLOP/s", "first_ms", "check");
        fflush(stdout);
    }
    tool_record rec;
    for (int ib = 0; ib < o.nbatch; ib++) {
        for (int il = 0; il < o.nlen; il++) {
            wresult r;
            memset(&r, 0, sizeof r);
            r.B = o.batch[ib];
            r.L = o.len[il];
            r.T = o.prefill ? r.L : o.window;
            r.t.first_call_s = r.t.median_s = r.t.min_s = NAN;
            r.gbps = r.pct = r.tflops = NAN;
            run_shape(s.ctx, &o, &s.bw, &r);
            if (r.status != CLKV_OK || strcmp(r.check, "fail") == 0)
                s.failed = 1;
            if (r.status != CLKV_OK)
                fprintf(stderr, "clkv: B=%lld L=%lld T=%lld failed: %s\n", (long long)r.B,
                        (long long)r.L, (long long)r.T, r.error);
            fill_record(&rec, &s, &o, &r);
            if (r.status == CLKV_OK)
                bench_emit_row(
                    &s, &rec, "%5lld %8lld %8lld %11.2f %11.2f %9.2f %9.1f %9.1f %9.2f %9.1f %6s\n",
                    (long long)r.B, (long long)r.L, (long long)r.T, r.t.median_s * 1e6,
                    r.t.min_s * 1e6, (double)r.kv_bytes * 1e-6, r.gbps, r.pct, r.tflops,
                    r.t.first_call_s * 1e3, r.check);
            else
                bench_emit_row(&s, &rec, "%5lld %8lld %8lld  error: %s\n", (long long)r.B,
                               (long long)r.L, (long long)r.T, r.error);
        }
    }
    return bench_close(&s);
}
