/* `clkv bench compress`: one layer's cache compression pipeline, step by step:
 * clkv_budget_adakv -> clkv_select_topk (k_per_row) -> clkv_compact_kv (out of place and
 * in place) -> clkv_attention_decode over the compacted cache with [B, Hkv] lengths. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "bench_harness.h"
#include "bench_util.h"
#include "cli.h"
#include "runtime/internal.h"

#define NSTEPS 5

static void usage_bench_compress(FILE *f) {
    fprintf(f,
            "usage: clkv bench compress [options]\n"
            "\n"
            "Times the steps of compressing one layer's K/V cache on random data: AdaKV\n"
            "per-head budgets (clkv_budget_adakv), per-head top-k (clkv_select_topk with\n"
            "k_per_row), compaction out of place and in place (clkv_compact_kv), and decode\n"
            "attention over the compacted cache with per-head lengths [B, Hkv].\n"
            "\n"
            "options (lists are comma-separated; every (batch, len) pair is run):\n"
            "  --batch N[,N..]     sequences B                            (default 1)\n"
            "  --len N[,N..]       prompt length L of every sequence      (default 32768)\n"
            "  --q-heads N         query heads Hq                         (default 32)\n"
            "  --kv-heads N        KV heads Hkv (<= 256, Hq %% Hkv == 0)    (default 8)\n"
            "  --dim N             head dim D: 64, 128, 256               (default 128)\n"
            "  --dtype T           f32 | f16 | bf16 for K, V, q and o     (default bf16)\n"
            "  --layout L          hnd ([B,H,L,D]) | nhd ([B,L,H,D])       (default hnd)\n"
            "  --budget K          average kept tokens per head k         (default 1024)\n"
            "  --alpha A           AdaKV per-head floor fraction (x100)   (default 20)\n"
            "  --iters N           back-to-back calls per timed batch     (default 20)\n"
            "  --repeats N         timed batches; the median is reported  (default 7)\n"
            "  --device SEL        \"P:D\", \"gpu\", \"cpu\" or a name substring\n"
            "  --format F          text | json | csv                      (default text)\n"
            "\n"
            "Time per call: the host clock around each batch of --iters calls and a finish,\n"
            "divided by --iters; median over --repeats batches. Compaction GB/s counts the kept\n"
            "rows of K and V read once and written once. Check: every sequence keeps exactly\n"
            "Hkv*min(k, L) tokens and every head's new length equals its budget.\n");
}

typedef struct compress_opts {
    int64_t batch[BENCH_MAX_LIST], len[BENCH_MAX_LIST];
    int nbatch, nlen;
    int64_t hq, hkv, dim, budget, alpha_pct, iters, repeats;
    clkv_dtype dtype;
    int nhd;
    const char *device;
    tool_format format;
} compress_opts;

static int parse_opts(int argc, char **argv, compress_opts *o) {
    const bench_common_opts common = {.iters = &o->iters,
                                      .iters_max = 100000,
                                      .repeats = &o->repeats,
                                      .repeats_max = 1000,
                                      .device = &o->device,
                                      .format = &o->format,
                                      .batch = o->batch,
                                      .nbatch = &o->nbatch,
                                      .batch_max = 65535,
                                      .len = o->len,
                                      .nlen = &o->nlen,
                                      .len_max = INT32_MAX / 256,
                                      .q_heads = &o->hq,
                                      .kv_heads = &o->hkv,
                                      .kv_heads_max = 256,
                                      .dim = &o->dim,
                                      .dim_min = 64,
                                      .dim_max = 256,
                                      .dtype = &o->dtype,
                                      .nhd = &o->nhd};
    memset(o, 0, sizeof *o);
    o->batch[0] = 1;
    o->nbatch = 1;
    o->len[0] = 32768;
    o->nlen = 1;
    o->hq = 32;
    o->hkv = 8;
    o->dim = 128;
    o->budget = 1024;
    o->alpha_pct = 20;
    o->iters = 20;
    o->repeats = 7;
    o->dtype = CLKV_BF16;
    o->format = TOOL_FMT_TEXT;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int m, bad = 0;
        if (opt_is_help(argv[i])) {
            usage_bench_compress(stdout);
            return 1;
        } else if ((m = opt_value(argc, argv, &i, "--budget", &v)) != 0) {
            bad = m < 0 || parse_int("--budget", v, 1, INT32_MAX, &o->budget) != 0;
        } else if ((m = opt_value(argc, argv, &i, "--alpha", &v)) != 0) {
            bad = m < 0 || parse_int("--alpha", v, 0, 100, &o->alpha_pct) != 0;
        } else if ((m = bench_common_option(argc, argv, &i, &common)) != 0) {
            bad = m < 0;
        } else {
            fprintf(stderr, "clkv bench compress: unknown option '%s'\n", argv[i]);
            bad = 1;
        }
        if (bad)
            return -1;
    }
    if (bench_check_heads(o->hq, o->hkv) != 0)
        return -1;
    return 0;
}

/* Device buffers of one (B, L) shape. */
typedef struct compress_bufs {
    cl_mem scores, k, v, kpr, idx, kd, vd, newlen, q, o;
} compress_bufs;

typedef struct compress_calls {
    clkv_budget_adakv_args ada;
    clkv_select_topk_args sel;
    clkv_compact_kv_args out, in;
    clkv_attention_decode_args dec;
} compress_calls;

static const char *const g_step_names[NSTEPS] = {"adakv", "select", "compact", "compact_inplace",
                                                 "decode"};

static clkv_status call_step(clkv_context *ctx, const compress_calls *c, int step) {
    switch (step) {
    case 0:
        return clkv_budget_adakv(ctx, &c->ada, NULL);
    case 1:
        return clkv_select_topk(ctx, &c->sel, NULL);
    case 2:
        return clkv_compact_kv(ctx, &c->out, NULL);
    case 3:
        return clkv_compact_kv(ctx, &c->in, NULL);
    default:
        return clkv_attention_decode(ctx, &c->dec, NULL);
    }
}

/* One pipeline step as a bench_call_fn. */
typedef struct step_call {
    const compress_calls *c;
    int step;
} step_call;

static clkv_status call_one_step(clkv_context *ctx, const void *arg) {
    const step_call *sc = (const step_call *)arg;
    return call_step(ctx, sc->c, sc->step);
}

static cl_mem make_buffer(clkv_context *ctx, size_t bytes, clkv_status *st) {
    cl_int err = CL_SUCCESS;
    if (*st != CLKV_OK)
        return NULL;
    cl_mem m = clCreateBuffer(clkv_context_cl_context(ctx), CL_MEM_READ_WRITE, bytes ? bytes : 4,
                              NULL, &err);
    if (err != CL_SUCCESS)
        *st = err;
    return m;
}

static clkv_status fill_pattern(clkv_context *ctx, cl_mem m, size_t bytes, uint32_t pattern) {
    return clkv__fill_u32(ctx, m, 0, bytes & ~(size_t)3, pattern, NULL);
}

static clkv_tensor kv_view(cl_mem m, clkv_dtype dt, const compress_opts *o, int64_t B, int64_t L) {
    return o->nhd ? clkv_tensor_4d_nhd(m, dt, B, o->hkv, L, o->dim)
                  : clkv_tensor_4d(m, dt, B, o->hkv, L, o->dim);
}

typedef struct compress_result {
    clkv_status status;
    char error[256];
    double us[NSTEPS];
    double compact_gbps, inplace_gbps;
    const char *check;
} compress_result;

static void run_shape(clkv_context *ctx, const compress_opts *o, int64_t B, int64_t L,
                      compress_result *r) {
    const int64_t H = o->hkv, D = o->dim, k = o->budget;
    const int64_t cap = L < H * k ? L : H * k; /* a head may take up to Hkv * k tokens */
    const size_t es = clkv_dtype_size(o->dtype);
    const size_t kv_bytes = (size_t)(B * H * L * D) * es, kd_bytes = (size_t)(B * H * cap * D) * es;
    compress_bufs b;
    memset(&b, 0, sizeof b);
    clkv_status st = CLKV_OK;
    b.scores = make_buffer(ctx, (size_t)(B * H * L) * 4, &st);
    b.k = make_buffer(ctx, kv_bytes, &st);
    b.v = make_buffer(ctx, kv_bytes, &st);
    b.kpr = make_buffer(ctx, (size_t)(B * H) * 4, &st);
    b.idx = make_buffer(ctx, (size_t)(B * H * cap) * 4, &st);
    b.kd = make_buffer(ctx, kd_bytes, &st);
    b.vd = make_buffer(ctx, kd_bytes, &st);
    b.newlen = make_buffer(ctx, (size_t)(B * H) * 4, &st);
    b.q = make_buffer(ctx, (size_t)(B * o->hq * D) * es, &st);
    b.o = make_buffer(ctx, (size_t)(B * o->hq * D) * es, &st);
    float *s = st == CLKV_OK ? (float *)malloc((size_t)(B * H * L) * 4) : NULL;
    if (st == CLKV_OK && !s)
        st = CLKV_ERR_OUT_OF_HOST_MEMORY;
    if (st == CLKV_OK) {
        uint64_t x = 0x9E3779B97F4A7C15ull;
        for (int64_t i = 0; i < B * H * L; i++) { /* xorshift scores in [0, 1) */
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            s[i] = (float)((x >> 40) * (1.0 / 16777216.0));
        }
        st = clEnqueueWriteBuffer(clkv_context_queue(ctx), b.scores, CL_TRUE, 0,
                                  (size_t)(B * H * L) * 4, s, 0, NULL, NULL);
    }
    if (st == CLKV_OK)
        st = fill_pattern(ctx, b.k, kv_bytes, 0x3c003c00u); /* 1.0 in f16 / small in bf16 */
    if (st == CLKV_OK)
        st = fill_pattern(ctx, b.v, kv_bytes, 0x3f803f80u);
    if (st == CLKV_OK)
        st = fill_pattern(ctx, b.q, (size_t)(B * o->hq * D) * es, 0x3c003c00u);
    compress_calls c;
    memset(&c, 0, sizeof c);
    clkv_budget_adakv_args ada = CLKV_BUDGET_ADAKV_ARGS_INIT;
    ada.scores = clkv_tensor_3d(b.scores, CLKV_F32, B, H, L);
    ada.k_per_row = clkv_tensor_2d(b.kpr, CLKV_I32, B, H);
    ada.k = k;
    ada.alpha = (double)o->alpha_pct / 100.0;
    c.ada = ada;
    clkv_select_topk_args sel = CLKV_SELECT_TOPK_ARGS_INIT;
    sel.scores = ada.scores;
    sel.k_per_row = ada.k_per_row;
    sel.indices = clkv_tensor_3d(b.idx, CLKV_I32, B, H, cap);
    sel.k = cap;
    c.sel = sel;
    clkv_compact_kv_args out = CLKV_COMPACT_KV_ARGS_INIT;
    out.k_src = kv_view(b.k, o->dtype, o, B, L);
    out.v_src = kv_view(b.v, o->dtype, o, B, L);
    out.indices = sel.indices;
    out.k_dst = kv_view(b.kd, o->dtype, o, B, cap);
    out.v_dst = kv_view(b.vd, o->dtype, o, B, cap);
    out.new_lengths = clkv_tensor_2d(b.newlen, CLKV_I32, B, H);
    c.out = out;
    c.in = out;
    c.in.k_dst = out.k_src;
    c.in.v_dst = out.v_src;
    c.in.new_lengths = clkv_tensor_none();
    clkv_attention_decode_args dec = CLKV_ATTENTION_DECODE_ARGS_INIT;
    dec.q = clkv_tensor_3d(b.q, o->dtype, B, o->hq, D);
    dec.k = out.k_dst;
    dec.v = out.v_dst;
    dec.lengths = out.new_lengths;
    dec.o = clkv_tensor_3d(b.o, o->dtype, B, o->hq, D);
    c.dec = dec;

    /* one pass of the pipeline, then the check */
    r->check = "fail";
    for (int step = 0; step < NSTEPS && st == CLKV_OK; step++)
        st = call_step(ctx, &c, step);
    if (st == CLKV_OK)
        st = clkv_context_finish(ctx);
    int32_t *kpr = st == CLKV_OK ? (int32_t *)malloc((size_t)(B * H) * 8) : NULL;
    if (kpr) {
        int32_t *nl = kpr + B * H;
        st = clEnqueueReadBuffer(clkv_context_queue(ctx), b.kpr, CL_TRUE, 0, (size_t)(B * H) * 4,
                                 kpr, 0, NULL, NULL);
        if (st == CLKV_OK)
            st = clEnqueueReadBuffer(clkv_context_queue(ctx), b.newlen, CL_TRUE, 0,
                                     (size_t)(B * H) * 4, nl, 0, NULL, NULL);
        int ok = st == CLKV_OK;
        for (int64_t bi = 0; bi < B && ok; bi++) {
            int64_t sum = 0;
            for (int64_t h = 0; h < H; h++) {
                sum += kpr[bi * H + h];
                ok = ok && nl[bi * H + h] == (kpr[bi * H + h] < cap ? kpr[bi * H + h] : cap);
            }
            ok = ok && sum == H * (k < L ? k : L);
        }
        r->check = ok ? "pass" : "fail";
        free(kpr);
    }
    for (int step = 0; step < NSTEPS && st == CLKV_OK; step++) {
        const step_call sc = {&c, step};
        tool_timing t;
        st = bench_time_call(ctx, call_one_step, &sc, (int)o->iters, (int)o->repeats, 0, NULL, &t);
        r->us[step] = t.median_s * 1e6;
    }
    if (st == CLKV_OK) {
        const double moved = 2.0 * 2.0 * (double)(B * H * (k < L ? k : L)) * (double)D * (double)es;
        r->compact_gbps = moved / (r->us[2] * 1e-6) * 1e-9;
        r->inplace_gbps = moved / (r->us[3] * 1e-6) * 1e-9;
    }
    r->status = st;
    if (st != CLKV_OK)
        bench_error_text(ctx, st, NULL, r->error, sizeof r->error);
    free(s);
    cl_mem all[10] = {b.scores, b.k, b.v, b.kpr, b.idx, b.kd, b.vd, b.newlen, b.q, b.o};
    for (int i = 0; i < 10; i++)
        if (all[i])
            clReleaseMemObject(all[i]);
}

int bench_compress(int argc, char **argv) {
    compress_opts o;
    int pr = parse_opts(argc, argv, &o);
    if (pr != 0)
        return pr > 0 ? TOOL_EXIT_OK : TOOL_EXIT_USAGE;
    bench_session s;
    const int rc = bench_open(&s, o.device, o.format, 0);
    if (rc != TOOL_EXIT_OK)
        return rc;
    const clkv_device_info *info = s.info;
    if (o.format == TOOL_FMT_TEXT) {
        printf("device: %s | %s | %u CUs\n", info->device_name, info->platform_name,
               info->compute_units);
        printf("compress: %s %s, Hq=%lld Hkv=%lld D=%lld, budget k=%lld per head, alpha=%.2f, "
               "%lld iters x %lld repeats (median us per call)\n",
               clkv_dtype_name(o.dtype), o.nhd ? "nhd" : "hnd", (long long)o.hq, (long long)o.hkv,
               (long long)o.dim, (long long)o.budget, o.alpha_pct / 100.0, (long long)o.iters,
               (long long)o.repeats);
        printf("%5s %8s %10s %10s %10s %8s %10s %8s %10s %6s\n", "B", "L", "adakv_us", "select_us",
               "compact_us", "GB/s", "inplace_us", "GB/s", "decode_us", "check");
    }
    for (int ib = 0; ib < o.nbatch; ib++)
        for (int il = 0; il < o.nlen; il++) {
            const int64_t B = o.batch[ib], L = o.len[il];
            compress_result r;
            memset(&r, 0, sizeof r);
            run_shape(s.ctx, &o, B, L, &r);
            s.failed |= r.status != CLKV_OK || strcmp(r.check, "pass") != 0;
            tool_record rec;
            tool_record_init(&rec);
            tool_record_str(&rec, "op", "compress");
            tool_record_str(&rec, "device", info->device_name);
            tool_record_str(&rec, "dtype", clkv_dtype_name(o.dtype));
            tool_record_str(&rec, "layout", o.nhd ? "nhd" : "hnd");
            tool_record_int(&rec, "batch", B);
            tool_record_int(&rec, "len", L);
            tool_record_int(&rec, "q_heads", o.hq);
            tool_record_int(&rec, "kv_heads", o.hkv);
            tool_record_int(&rec, "dim", o.dim);
            tool_record_int(&rec, "budget", o.budget);
            tool_record_num(&rec, "alpha", o.alpha_pct / 100.0);
            for (int i = 0; i < NSTEPS; i++) {
                char key[48];
                snprintf(key, sizeof key, "%s_us", g_step_names[i]);
                tool_record_num(&rec, key, r.us[i]);
            }
            tool_record_num(&rec, "compact_gbps", r.compact_gbps);
            tool_record_num(&rec, "inplace_gbps", r.inplace_gbps);
            tool_record_str(&rec, "check", r.check);
            bench_record_status(&rec, r.status, r.error);
            if (r.status == CLKV_OK)
                bench_emit_row(&s, &rec,
                               "%5lld %8lld %10.1f %10.1f %10.1f %8.1f %10.1f %8.1f %10.1f %6s\n",
                               (long long)B, (long long)L, r.us[0], r.us[1], r.us[2],
                               r.compact_gbps, r.us[3], r.inplace_gbps, r.us[4], r.check);
            else
                bench_emit_row(&s, &rec, "%5lld %8lld  error: %s\n", (long long)B, (long long)L,
                               r.error);
        }
    return bench_close(&s);
}
