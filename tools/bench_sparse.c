/* `clkv bench attention-sparse`: sparse decode attention (SPEC 1.3) over sink + top-k +
 * local tokens of long caches, and optionally the gather of the top-k rows from a
 * host-resident store (include/clkv/offload.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "bench_util.h"
#include "cli.h"
#include "decode_setup.h"
#include "tool_data.h"

#define MAX_LIST 16

void usage_bench_sparse(FILE *f) {
    fprintf(f, "usage: clkv bench attention-sparse [options]\n"
               "\n"
               "Times clkv_attention_sparse on random data: every sequence attends to its first\n"
               "--sink tokens, its last --local tokens and --topk distinct random tokens between\n"
               "them (per KV head), the ParisKV decode pattern. Reports the time per call.\n"
               "\n"
               "options (lists are comma-separated; every (batch, len) pair is run):\n"
               "  --batch N[,N..]     sequences B                           (default 1)\n"
               "  --len N[,N..]       cache length of every sequence        (default 131072)\n"
               "  --topk N            index entries per (sequence, KV head)  (default 100)\n"
               "  --local N           local window                           (default 512)\n"
               "  --sink N            sink tokens                            (default 4)\n"
               "  --q-heads N         query heads Hq                        (default 32)\n"
               "  --kv-heads N        KV heads Hkv                          (default 8)\n"
               "  --dim N             head dim D: 64, 128, 256              (default 128)\n"
               "  --dtype T           f32 | f16 | bf16 for q, K, V and o    (default bf16)\n"
               "  --layout L          hnd | nhd                             (default hnd)\n"
               "  --offload           also time clkv_offload_gather of the top-k K/V rows from a\n"
               "                      host-resident store of --len tokens (zero-copy on NVIDIA)\n"
               "  --iters N           back-to-back calls per timed batch     (default 200)\n"
               "  --repeats N         timed batches; the median is reported  (default 15)\n"
               "  --warmup N          untimed calls after the first          (default 20)\n"
               "  --no-check          skip the CPU reference checks (last sequence: the output\n"
               "                      of KV head 0; with --offload the gathered rows of KV\n"
               "                      heads 0 and Hkv-1, exact)\n"
               "  --device SEL        \"P:D\", \"gpu\", \"cpu\" or a name substring\n"
               "  --format F          text | json | csv                      (default text)\n"
               "\n"
               "Time per call: the host clock around each batch of --iters calls and a finish,\n"
               "divided by --iters; median (and min) over --repeats batches.\n");
}

typedef struct sparse_opts {
    int64_t batch[MAX_LIST], len[MAX_LIST];
    int nbatch, nlen;
    int64_t topk, local, sink, hq, hkv, dim;
    clkv_dtype dtype;
    int nhd, offload, check;
    int64_t iters, repeats, warmup;
    const char *device;
    tool_format format;
} sparse_opts;

static int parse_opts(int argc, char **argv, sparse_opts *o) {
    const bench_common_opts common = {.iters = &o->iters,
                                      .iters_max = 1000000,
                                      .repeats = &o->repeats,
                                      .repeats_max = 1000,
                                      .warmup = &o->warmup,
                                      .device = &o->device,
                                      .format = &o->format};
    memset(o, 0, sizeof *o);
    o->batch[0] = 1;
    o->nbatch = 1;
    o->len[0] = 131072;
    o->nlen = 1;
    o->topk = 100;
    o->local = 512;
    o->sink = 4;
    o->hq = 32;
    o->hkv = 8;
    o->dim = 128;
    o->dtype = CLKV_BF16;
    o->check = 1;
    o->iters = 200;
    o->repeats = 15;
    o->warmup = 20;
    o->format = TOOL_FMT_TEXT;
    const int64_t big = INT32_MAX;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int m, bad = 0;
        if (opt_is_help(argv[i])) {
            usage_bench_sparse(stdout);
            return 1;
        } else if ((m = opt_value(argc, argv, &i, "--batch", &v)) != 0) {
            bad = m < 0 ||
                  (o->nbatch = parse_int_list("--batch", v, 1, 1 << 16, o->batch, MAX_LIST)) < 0;
        } else if ((m = opt_value(argc, argv, &i, "--len", &v)) != 0) {
            bad = m < 0 || (o->nlen = parse_int_list("--len", v, 1, big, o->len, MAX_LIST)) < 0;
        } else if ((m = opt_value(argc, argv, &i, "--topk", &v)) != 0) {
            bad = m < 0 || parse_int("--topk", v, 0, 1 << 20, &o->topk) != 0;
        } else if ((m = opt_value(argc, argv, &i, "--local", &v)) != 0) {
            bad = m < 0 || parse_int("--local", v, 0, big, &o->local) != 0;
        } else if ((m = opt_value(argc, argv, &i, "--sink", &v)) != 0) {
            bad = m < 0 || parse_int("--sink", v, 0, big, &o->sink) != 0;
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
        } else if ((m = bench_common_option(argc, argv, &i, &common)) != 0) {
            bad = m < 0;
        } else if (strcmp(argv[i], "--offload") == 0) {
            o->offload = 1;
        } else if (strcmp(argv[i], "--no-check") == 0) {
            o->check = 0;
        } else {
            fprintf(stderr, "clkv bench attention-sparse: unknown option '%s'\n", argv[i]);
            bad = 1;
        }
        if (bad)
            return -1;
    }
    if (bench_check_heads(o->hq, o->hkv) != 0)
        return -1;
    return 0;
}

typedef struct sparse_result {
    int64_t B, L, rows; /* rows: attended tokens per (sequence, KV head) */
    clkv_status status;
    char error[256];
    tool_timing t, tg;
    const char *check;
    double check_err;
    int gather_mode; /* -1: not run */
} sparse_result;

typedef clkv_status (*timed_fn)(clkv_context *ctx, const void *arg);

static clkv_status call_sparse(clkv_context *ctx, const void *arg) {
    return clkv_attention_sparse(ctx, (const clkv_attention_sparse_args *)arg, NULL);
}

typedef struct gather_call {
    clkv_offload_store *store;
    clkv_offload_gather_args g;
} gather_call;

static clkv_status call_gather(clkv_context *ctx, const void *arg) {
    const gather_call *c = (const gather_call *)arg;
    return clkv_offload_gather(ctx, c->store, &c->g, NULL);
}

static clkv_status time_calls(clkv_context *ctx, timed_fn fn, const void *arg, const sparse_opts *o,
                              tool_timing *t) {
    double t0 = tool_now();
    clkv_status st = fn(ctx, arg);
    if (st == CLKV_OK)
        st = clkv_context_finish(ctx);
    t->first_call_s = tool_now() - t0;
    for (int64_t i = 0; st == CLKV_OK && i < o->warmup; i++)
        st = fn(ctx, arg);
    if (st == CLKV_OK)
        st = clkv_context_finish(ctx);
    double *per = (double *)malloc((size_t)o->repeats * sizeof(double));
    if (!per)
        return CLKV_ERR_OUT_OF_HOST_MEMORY;
    for (int64_t r = 0; st == CLKV_OK && r < o->repeats; r++) {
        t0 = tool_now();
        for (int64_t i = 0; st == CLKV_OK && i < o->iters; i++)
            st = fn(ctx, arg);
        if (st == CLKV_OK)
            st = clkv_context_finish(ctx);
        per[r] = (tool_now() - t0) / (double)o->iters;
    }
    if (st == CLKV_OK) {
        t->median_s = tool_median(per, (int)o->repeats);
        t->min_s = tool_min(per, (int)o->repeats);
        t->iters = (int)o->iters;
        t->repeats = (int)o->repeats;
    }
    free(per);
    return st;
}

/* Host value of K/V element (b, h, j, d) as stored. */
static double kv_value(const tool_decode_shape *s, uint32_t seed, int64_t b, int64_t h, int64_t j,
                       int64_t d) {
    return (double)tool_round_to(
        s->kv_dtype,
        tool_rand_value((uint64_t)tool_decode_kv_index(s, b, h, j, d), seed, TOOL_SCALE_KV));
}

/* Reference for sequence b, query heads of KV head 0, over the set built the same way
 * the kernel defines it; returns the largest |o - ref| / tolerance ratio (> 1: fail). */
static double check_sparse(clkv_context *ctx, const tool_decode_shape *s, const sparse_opts *o,
                           const tool_decode_bufs *bufs, const int32_t *idx, int64_t b,
                           clkv_status *st) {
    const int64_t L = s->L, D = s->D, G = s->Hq / s->Hkv, n = L;
    unsigned char *mask = (unsigned char *)calloc((size_t)n, 1);
    const size_t osz = (size_t)(s->B * s->Hq * D);
    float *og = (float *)malloc(osz * sizeof(float));
    void *raw = malloc(osz * 4);
    double worst = 0.0;
    *st = CLKV_OK;
    if (!mask || !og || !raw) {
        *st = CLKV_ERR_OUT_OF_HOST_MEMORY;
        goto done;
    }
    *st = tool_read(ctx, bufs->o, raw, osz * clkv_dtype_size(s->o_dtype));
    if (*st != CLKV_OK)
        goto done;
    for (size_t i = 0; i < osz; i++)
        og[i] = tool_load(raw, s->o_dtype, i);
    for (int64_t j = 0; j < n; j++)
        mask[j] = j < o->sink || j >= n - o->local;
    for (int64_t i = 0; i < o->topk; i++) {
        const int32_t t = idx[(b * s->Hkv + 0) * o->topk + i];
        if (t >= 0 && t < n)
            mask[t] = 1;
    }
    const double scale = 1.0 / sqrt((double)D);
    for (int64_t g = 0; g < G; g++) {
        const int64_t h = g; /* KV head 0 */
        double m = -INFINITY, sum = 0.0;
        double *acc = (double *)calloc((size_t)D, sizeof(double));
        double *qv = (double *)malloc((size_t)D * sizeof(double));
        if (!acc || !qv) {
            free(acc);
            free(qv);
            *st = CLKV_ERR_OUT_OF_HOST_MEMORY;
            goto done;
        }
        for (int64_t d = 0; d < D; d++)
            qv[d] = (double)tool_round_to(
                s->q_dtype,
                tool_rand_value((uint64_t)((b * s->Hq + h) * D + d), TOOL_SEED_Q, TOOL_SCALE_Q));
        for (int pass = 0; pass < 2; pass++) {
            for (int64_t j = 0; j < n; j++) {
                if (!mask[j])
                    continue;
                double z = 0.0;
                for (int64_t d = 0; d < D; d++)
                    z += qv[d] * kv_value(s, TOOL_SEED_K, b, 0, j, d);
                z *= scale;
                if (pass == 0) {
                    m = z > m ? z : m;
                } else {
                    const double w = exp(z - m);
                    sum += w;
                    for (int64_t d = 0; d < D; d++)
                        acc[d] += w * kv_value(s, TOOL_SEED_V, b, 0, j, d);
                }
            }
        }
        const double rtol = s->o_dtype == CLKV_F32 ? 1e-4 : s->o_dtype == CLKV_F16 ? 2e-3 : 1e-2;
        const double atol = s->o_dtype == CLKV_F32 ? 1e-5 : s->o_dtype == CLKV_F16 ? 1e-4 : 1e-3;
        for (int64_t d = 0; d < D; d++) {
            const double ref = acc[d] / sum;
            const double got = og[(size_t)((b * s->Hq + h) * D + d)];
            const double ratio = fabs(got - ref) / (atol + rtol * fabs(ref));
            worst = ratio > worst || isnan(got) ? (isnan(got) ? INFINITY : ratio) : worst;
        }
        free(acc);
        free(qv);
    }
done:
    free(mask);
    free(og);
    free(raw);
    return worst;
}

/* The gathered rows of sequence b, KV heads 0 and Hkv - 1 (a copy: exact), against the
 * K/V values regenerated from the seeds at the same indices (zero rows for indices out of
 * range). Returns the number of wrong elements (0: pass). */
static int64_t check_gather(clkv_context *ctx, const tool_decode_shape *s, const sparse_opts *o,
                            cl_mem gk, cl_mem gv, const int32_t *idx, int64_t b, clkv_status *st) {
    const size_t es = clkv_dtype_size(s->kv_dtype), row = (size_t)s->D * es;
    const size_t head_bytes = (size_t)o->topk * row;
    unsigned char *got = (unsigned char *)malloc(head_bytes ? head_bytes : 1);
    int64_t bad = 0;
    *st = got ? CLKV_OK : CLKV_ERR_OUT_OF_HOST_MEMORY;
    const int64_t heads[2] = {0, s->Hkv - 1};
    for (int t = 0; t < 2 && *st == CLKV_OK; t++) {
        for (int hi = 0; hi < (s->Hkv > 1 ? 2 : 1) && *st == CLKV_OK; hi++) {
            const int64_t h = heads[hi];
            const size_t off = (size_t)((b * s->Hkv + h) * o->topk) * row;
            const cl_int err = clEnqueueReadBuffer(clkv_context_queue(ctx), t ? gv : gk, CL_TRUE,
                                                   off, head_bytes, got, 0, NULL, NULL);
            if (err != CL_SUCCESS) {
                *st = err;
                break;
            }
            for (int64_t i = 0; i < o->topk; i++) {
                const int32_t j = idx[(b * s->Hkv + h) * o->topk + i];
                for (int64_t d = 0; d < s->D; d++) {
                    const double want = j >= 0 && j < s->L
                                            ? kv_value(s, t ? TOOL_SEED_V : TOOL_SEED_K, b, h, j, d)
                                            : 0.0;
                    bad += tool_load(got, s->kv_dtype, (size_t)(i * s->D + d)) != want;
                }
            }
        }
    }
    free(got);
    return bad;
}

static void run_shape(clkv_context *ctx, const sparse_opts *o, sparse_result *r) {
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
    int32_t *lengths = (int32_t *)malloc((size_t)r->B * sizeof(int32_t));
    const size_t nidx = (size_t)(r->B * o->hkv * o->topk);
    int32_t *idx = (int32_t *)malloc((nidx + 1) * sizeof(int32_t));
    cl_mem idx_buf = NULL;
    clkv_offload_store *store = NULL;
    cl_mem gk = NULL, gv = NULL;
    const char *what = "allocation";
    clkv_status st = CLKV_OK;
    r->check = "skipped";
    r->check_err = NAN;
    r->gather_mode = -1;
    r->t.median_s = r->t.min_s = r->t.first_call_s = NAN;
    r->tg.median_s = r->tg.min_s = r->tg.first_call_s = NAN;
    if (!lengths || !idx) {
        st = CLKV_ERR_OUT_OF_HOST_MEMORY;
        goto out;
    }
    for (int64_t b = 0; b < r->B; b++)
        lengths[b] = (int32_t)r->L;
    /* top-k distinct tokens of [sink, L - local) per (b, h): a stride walk from a
     * pseudo-random start with a stride coprime to the range */
    {
        const int64_t lo = o->sink < r->L ? o->sink : r->L;
        const int64_t hi = r->L - o->local > lo ? r->L - o->local : lo;
        const int64_t span = hi - lo;
        uint64_t x = 0x9E3779B97F4A7C15ull;
        for (size_t i = 0; i < (size_t)(r->B * o->hkv); i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            int64_t stride = span > 1 ? (int64_t)((x >> 20) % (uint64_t)span) | 1 : 1;
            while (span > 1 && stride > 1) { /* gcd(stride, span) == 1 */
                int64_t a = stride, c = span;
                while (c) {
                    const int64_t t = a % c;
                    a = c;
                    c = t;
                }
                if (a == 1)
                    break;
                stride += 2;
                if (stride >= span)
                    stride = 1;
            }
            const int64_t start = span > 0 ? (int64_t)((x >> 33) % (uint64_t)span) : 0;
            for (int64_t k = 0; k < o->topk; k++)
                idx[i * (size_t)o->topk + (size_t)k] =
                    k < span ? (int32_t)(lo + (start + k * stride) % span) : -1;
        }
    }
    r->rows = 0;
    {
        const int64_t dense = o->sink + o->local < r->L ? o->sink + o->local : r->L;
        const int64_t span = r->L - dense;
        r->rows = dense + (o->topk < span ? o->topk : span);
    }
    st = tool_decode_alloc(ctx, &s, 0, &bufs);
    if (st != CLKV_OK)
        goto out;
    what = "random fill";
    st = tool_decode_fill_device(ctx, &s, &bufs, lengths);
    if (st == CLKV_OK) {
        cl_int err;
        idx_buf = clCreateBuffer(clkv_context_cl_context(ctx), CL_MEM_READ_ONLY,
                                 (nidx + 1) * sizeof(int32_t), NULL, &err);
        st = err == CL_SUCCESS ? tool_write(ctx, idx_buf, idx, nidx * sizeof(int32_t)) : err;
    }
    clkv_attention_sparse_args a = CLKV_ATTENTION_SPARSE_ARGS_INIT;
    {
        clkv_attention_decode_args d;
        tool_decode_args(&s, &bufs, r->L, 0, &d);
        a.q = d.q;
        a.k = d.k;
        a.v = d.v;
        a.lengths = d.lengths;
        a.o = d.o;
        a.max_length = r->L;
    }
    a.idx = clkv_tensor_3d(idx_buf, CLKV_I32, r->B, o->hkv, o->topk);
    a.sink = o->sink;
    a.local = o->local;
    if (st == CLKV_OK) {
        what = "clkv_attention_sparse";
        st = time_calls(ctx, call_sparse, &a, o, &r->t);
    }
    if (st == CLKV_OK && o->check) {
        what = "check";
        r->check_err = check_sparse(ctx, &s, o, &bufs, idx, r->B - 1, &st);
        r->check = r->check_err <= 1.0 ? "pass" : "fail";
    }
    if (st == CLKV_OK && o->offload) {
        what = "offload store";
        clkv_offload_store_desc sd = CLKV_OFFLOAD_STORE_DESC_INIT;
        sd.batch = r->B;
        sd.kv_heads = o->hkv;
        sd.capacity = r->L;
        sd.head_dim = o->dim;
        sd.dtype = o->dtype;
        st = clkv_offload_store_create(ctx, &sd, &store);
        if (st == CLKV_OK) {
            clkv_offload_store_info info;
            clkv_offload_store_get_info(store, &info);
            r->gather_mode = info.host_nv ? 2 : (int)info.mode;
            clkv_offload_write_args w = CLKV_OFFLOAD_WRITE_ARGS_INIT;
            w.k = a.k;
            w.v = a.v;
            what = "clkv_offload_write";
            st = clkv_offload_write(ctx, store, &w, NULL);
        }
        const size_t gbytes =
            (size_t)(r->B * o->hkv * (o->topk ? o->topk : 1) * o->dim) * clkv_dtype_size(o->dtype);
        cl_int err = CL_SUCCESS;
        if (st == CLKV_OK) {
            gk =
                clCreateBuffer(clkv_context_cl_context(ctx), CL_MEM_READ_WRITE, gbytes, NULL, &err);
            if (err == CL_SUCCESS)
                gv = clCreateBuffer(clkv_context_cl_context(ctx), CL_MEM_READ_WRITE, gbytes, NULL,
                                    &err);
            st = err;
        }
        if (st == CLKV_OK) {
            gather_call gc;
            gc.store = store;
            gc.g.idx = a.idx;
            gc.g.k_out = clkv_tensor_4d(gk, o->dtype, r->B, o->hkv, o->topk, o->dim);
            gc.g.v_out = clkv_tensor_4d(gv, o->dtype, r->B, o->hkv, o->topk, o->dim);
            what = "clkv_offload_gather";
            st = time_calls(ctx, call_gather, &gc, o, &r->tg);
            if (st == CLKV_OK && o->check) {
                what = "gather check";
                const int64_t bad = check_gather(ctx, &s, o, gk, gv, idx, r->B - 1, &st);
                if (bad != 0) {
                    r->check = "fail";
                    fprintf(stderr, "[bench] B=%lld L=%lld: %lld gathered elements wrong\n",
                            (long long)r->B, (long long)r->L, (long long)bad);
                }
            }
        }
    }
    tool_decode_free(&bufs);
out:
    clkv_context_finish(ctx);
    clkv_offload_store_destroy(store);
    tool_release(&gk);
    tool_release(&gv);
    tool_release(&idx_buf);
    free(lengths);
    free(idx);
    r->status = st;
    r->error[0] = '\0';
    if (st != CLKV_OK) {
        const char *msg = clkv_last_error(ctx);
        snprintf(r->error, sizeof r->error, "%s: %s: %s", what, clkv_status_string(st),
                 msg ? msg : "");
    }
}

static const char *gather_mode_name(int m) {
    return m == 2                          ? "host-nv"
           : m == CLKV_OFFLOAD_KERNEL_READ ? "kernel-read"
           : m == CLKV_OFFLOAD_STAGING     ? "staging"
                                           : "-";
}

static void fill_record(tool_record *rec, const clkv_device_info *info, const sparse_opts *o,
                        const sparse_result *r) {
    tool_record_init(rec);
    tool_record_str(rec, "op", "attention-sparse");
    tool_record_str(rec, "device", info->device_name);
    tool_record_str(rec, "platform", info->platform_name);
    tool_record_str(rec, "dtype", clkv_dtype_name(o->dtype));
    tool_record_str(rec, "layout", o->nhd ? "nhd" : "hnd");
    tool_record_int(rec, "batch", r->B);
    tool_record_int(rec, "q_heads", o->hq);
    tool_record_int(rec, "kv_heads", o->hkv);
    tool_record_int(rec, "dim", o->dim);
    tool_record_int(rec, "len", r->L);
    tool_record_int(rec, "topk", o->topk);
    tool_record_int(rec, "local", o->local);
    tool_record_int(rec, "sink", o->sink);
    tool_record_int(rec, "attended_rows", r->rows);
    tool_record_num(rec, "median_us", r->t.median_s * 1e6);
    tool_record_num(rec, "min_us", r->t.min_s * 1e6);
    tool_record_num(rec, "first_call_ms", r->t.first_call_s * 1e3);
    tool_record_str(rec, "gather_mode", gather_mode_name(r->gather_mode));
    tool_record_num(rec, "gather_median_us", r->tg.median_s * 1e6);
    tool_record_num(rec, "gather_min_us", r->tg.min_s * 1e6);
    tool_record_str(rec, "check", r->check);
    tool_record_num(rec, "check_err_ratio", r->check_err);
    tool_record_str(rec, "status", r->status == CLKV_OK ? "ok" : "error");
    tool_record_str(rec, "error", r->error);
}

int bench_sparse(int argc, char **argv) {
    sparse_opts o;
    const int pr = parse_opts(argc, argv, &o);
    if (pr != 0) {
        if (pr < 0)
            usage_bench_sparse(stderr);
        return pr > 0 ? TOOL_EXIT_OK : TOOL_EXIT_USAGE;
    }
    clkv_context *ctx = NULL;
    clkv_status st = clkv_context_create(o.device, &ctx);
    if (st != CLKV_OK)
        return report_failure(NULL, st, "clkv_context_create");
    const clkv_device_info *info = clkv_context_device_info(ctx);
    if (o.format == TOOL_FMT_TEXT) {
        printf("device: %s | %s | driver %s | %u CUs\n", info->device_name, info->platform_name,
               info->driver_version, info->compute_units);
        printf("attention-sparse: %s %s, Hq=%lld Hkv=%lld D=%lld, sink=%lld topk=%lld "
               "local=%lld, %lld iters x %lld repeats\n",
               clkv_dtype_name(o.dtype), o.nhd ? "nhd" : "hnd", (long long)o.hq, (long long)o.hkv,
               (long long)o.dim, (long long)o.sink, (long long)o.topk, (long long)o.local,
               (long long)o.iters, (long long)o.repeats);
        printf("%5s %9s %6s %11s %11s %9s %12s %12s %6s\n", "B", "L", "rows", "median_us", "min_us",
               "first_ms", "gather_us", "gather_mode", "check");
        fflush(stdout);
    }
    int failed = 0, index = 0;
    tool_record rec;
    for (int ib = 0; ib < o.nbatch; ib++) {
        for (int il = 0; il < o.nlen; il++) {
            sparse_result r;
            memset(&r, 0, sizeof r);
            r.B = o.batch[ib];
            r.L = o.len[il];
            run_shape(ctx, &o, &r);
            if (r.status != CLKV_OK || strcmp(r.check, "fail") == 0)
                failed = 1;
            if (r.status != CLKV_OK)
                fprintf(stderr, "clkv: B=%lld L=%lld failed: %s\n", (long long)r.B, (long long)r.L,
                        r.error);
            fill_record(&rec, info, &o, &r);
            if (o.format == TOOL_FMT_JSON) {
                if (index == 0)
                    tool_json_begin(stdout);
                tool_json_item(stdout, &rec, index);
            } else if (o.format == TOOL_FMT_CSV) {
                if (index == 0)
                    tool_csv_header(stdout, &rec);
                tool_csv_row(stdout, &rec);
            } else if (r.status == CLKV_OK) {
                printf("%5lld %9lld %6lld %11.2f %11.2f %9.1f %12.2f %12s %6s\n", (long long)r.B,
                       (long long)r.L, (long long)r.rows, r.t.median_s * 1e6, r.t.min_s * 1e6,
                       r.t.first_call_s * 1e3, r.tg.median_s * 1e6, gather_mode_name(r.gather_mode),
                       r.check);
            } else {
                printf("%5lld %9lld  error: %s\n", (long long)r.B, (long long)r.L, r.error);
            }
            fflush(stdout);
            index++;
        }
    }
    if (o.format == TOOL_FMT_JSON)
        tool_json_end(stdout);
    clkv_context_destroy(ctx);
    return failed ? TOOL_EXIT_FAIL : TOOL_EXIT_OK;
}
