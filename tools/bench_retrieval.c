/* `clkv bench retrieval`: the ParisKV retrieval pipeline (SPEC §4) per stage and per
 * decode step, on random data. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "cli.h"
#include "decode_setup.h"
#include "host/pariskv_retrieve_internal.h"

#define MAX_LIST 16

void usage_bench_retrieval(FILE *f) {
    fprintf(f,
            "usage: clkv bench retrieval [options]\n"
            "\n"
            "Prefills a ParisKV index (clkv_pariskv_index) over a random K/V cache of each\n"
            "length and times, median over --repeats:\n"
            "  collide    Stage I: centroid ranking + collision scores with the fused histogram\n"
            "  select     candidate threshold + ordered compaction\n"
            "  rerank     Stage II RSQ-IP scores + final top-k\n"
            "            (these three: kernel time from OpenCL profiling events)\n"
            "  search     clkv_pariskv_index_search: query transform + the search kernels\n"
            "  sparse     clkv_attention_sparse over sink + top-k + local\n"
            "  gather     --offload only: clkv_offload_gather of the top-k rows (K and V) from\n"
            "             the host-resident store\n"
            "  step       clkv_pariskv_index_step: append, search, (gather,) sparse attention\n"
            "            (these four: host clock around --iters back-to-back calls)\n"
            "  step_host  the host clock around the step calls alone: the host time of a step\n"
            "             (validation, kernel lookups, arguments, enqueues)\n"
            "\n"
            "options (lists are comma-separated):\n"
            "  --batch N           sequences B                      (default 1)\n"
            "  --len N[,N..]       prefill length of every sequence (default 32768,131072)\n"
            "  --q-heads N         query heads Hq                   (default 32)\n"
            "  --kv-heads N        KV heads Hkv                     (default 8)\n"
            "  --dim N             head dim D: 64, 128, 256         (default 128)\n"
            "  --dtype T           f32 | f16 | bf16 for q, K, V, o  (default bf16)\n"
            "  --top-k N           retrieved tokens                 (default 100)\n"
            "  --iters N           calls per timed batch            (default 20)\n"
            "  --repeats N         timed batches / profiled runs    (default 11)\n"
            "  --device SEL        device selector (default: $CLKV_DEVICE, first GPU, first CPU)\n"
            "  --offload           retrieval zone K/V in a host-resident store (cfg.kv_store,\n"
            "                      clkv_offload_store_create AUTO: zero-copy on NVIDIA)\n"
            "  --per-kernel        also print each search kernel's median time (profiling\n"
            "                      events; 0 = not enqueued on this path)\n"
            "\n"
            "The zone is len - 4 - 512 tokens (sink 4, local 512); (beta, rho) follow the length\n"
            "schedule, so C = 0.1 * zone candidates beyond 30K tokens.\n");
}

typedef struct retr_opts {
    int64_t len[MAX_LIST];
    int nlen;
    int64_t batch, hq, hkv, dim, top_k, iters, repeats;
    clkv_dtype dtype;
    const char *device;
    int offload, per_kernel;
} retr_opts;

static int parse_opts(int argc, char **argv, retr_opts *o) {
    o->len[0] = 32768;
    o->len[1] = 131072;
    o->nlen = 2;
    o->batch = 1;
    o->hq = 32;
    o->hkv = 8;
    o->dim = 128;
    o->top_k = 100;
    o->iters = 20;
    o->repeats = 11;
    o->dtype = CLKV_BF16;
    o->device = NULL;
    o->offload = 0;
    o->per_kernel = 0;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int m, bad = 0;
        if (opt_is_help(argv[i])) {
            usage_bench_retrieval(stdout);
            return 1;
        } else if ((m = opt_value(argc, argv, &i, "--len", &v)) != 0) {
            bad = m < 0 ||
                  (o->nlen = parse_int_list("--len", v, 1, INT32_MAX / 2, o->len, MAX_LIST)) < 0;
        } else if ((m = opt_value(argc, argv, &i, "--batch", &v)) != 0) {
            bad = m < 0 || parse_int("--batch", v, 1, 4096, &o->batch) != 0;
        } else if ((m = opt_value(argc, argv, &i, "--q-heads", &v)) != 0) {
            bad = m < 0 || parse_int("--q-heads", v, 1, 4096, &o->hq) != 0;
        } else if ((m = opt_value(argc, argv, &i, "--kv-heads", &v)) != 0) {
            bad = m < 0 || parse_int("--kv-heads", v, 1, 4096, &o->hkv) != 0;
        } else if ((m = opt_value(argc, argv, &i, "--dim", &v)) != 0) {
            bad = m < 0 || parse_int("--dim", v, 1, 4096, &o->dim) != 0;
        } else if ((m = opt_value(argc, argv, &i, "--top-k", &v)) != 0) {
            bad = m < 0 || parse_int("--top-k", v, 1, 65536, &o->top_k) != 0;
        } else if ((m = opt_value(argc, argv, &i, "--iters", &v)) != 0) {
            bad = m < 0 || parse_int("--iters", v, 1, 100000, &o->iters) != 0;
        } else if ((m = opt_value(argc, argv, &i, "--repeats", &v)) != 0) {
            bad = m < 0 || parse_int("--repeats", v, 1, 1000, &o->repeats) != 0;
        } else if ((m = opt_value(argc, argv, &i, "--dtype", &v)) != 0) {
            bad = m < 0 || parse_float_dtype("--dtype", v, &o->dtype) != 0;
        } else if (strcmp(argv[i], "--offload") == 0) {
            o->offload = 1;
        } else if (strcmp(argv[i], "--per-kernel") == 0) {
            o->per_kernel = 1;
        } else if ((m = opt_value(argc, argv, &i, "--device", &v)) != 0) {
            bad = m < 0;
            o->device = v;
        } else {
            fprintf(stderr, "clkv bench retrieval: unknown option '%s'\n", argv[i]);
            bad = 1;
        }
        if (bad)
            return -1;
    }
    if (o->hq % o->hkv != 0) {
        fprintf(stderr, "clkv: --q-heads %lld is not a multiple of --kv-heads %lld\n",
                (long long)o->hq, (long long)o->hkv);
        return -1;
    }
    return 0;
}

/* Seconds between the start of `a` and the end of `b` (profiling). */
static double span(cl_event a, cl_event b) {
    cl_ulong t0 = 0, t1 = 0;
    if (!a || !b)
        return 0.0;
    clGetEventProfilingInfo(a, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL);
    clGetEventProfilingInfo(b, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
    return t1 > t0 ? (double)(t1 - t0) * 1e-9 : 0.0;
}

typedef struct retr_result {
    double collide, select, rerank, search, sparse, gather, step; /* seconds, medians */
    double step_host;                 /* host time per step (time_calls), median */
    double kernel[PKV_SEARCH_EVENTS]; /* each search kernel alone (0: not enqueued) */
    int64_t zone, cand;
} retr_result;

static const char *const KERNEL_NAMES[PKV_SEARCH_EVENTS] = {
    "rank", "collide", "threshold", "compact", "rerank", "collect", "topk"};

/* Each stage's (and kernel's) median over `repeats` profiled searches. */
static clkv_status profile_stages(clkv_context *ctx, clkv_pariskv_index *ix, const clkv_tensor *q,
                                  const clkv_tensor *idx, int repeats, retr_result *r) {
    enum { NT = 3 + PKV_SEARCH_EVENTS };
    double *t = (double *)calloc((size_t)repeats * NT, sizeof(double));
    if (!t)
        return CLKV_ERR_OUT_OF_HOST_MEMORY;
    clkv_status st = CLKV_OK;
    for (int i = 0; i < repeats && st == CLKV_OK; i++) {
        cl_event ev[PKV_SEARCH_EVENTS];
        st = clkv__pariskv_index_search_profiled(ctx, ix, q, idx, ev);
        if (st == CLKV_OK)
            st = clkv_context_finish(ctx);
        if (st == CLKV_OK) {
            /* stages: rank..collide, threshold..compact, rerank..top-k */
            t[i] = span(ev[0], ev[1]);
            t[repeats + i] = span(ev[2] ? ev[2] : ev[3], ev[3] ? ev[3] : ev[2]);
            t[2 * repeats + i] = span(ev[4] ? ev[4] : ev[6], ev[6]);
            for (int e = 0; e < PKV_SEARCH_EVENTS; e++)
                t[(3 + e) * repeats + i] = span(ev[e], ev[e]);
        }
        for (int e = 0; e < PKV_SEARCH_EVENTS; e++)
            if (ev[e])
                clReleaseEvent(ev[e]);
    }
    if (st == CLKV_OK) {
        r->collide = tool_median(t, repeats);
        r->select = tool_median(t + repeats, repeats);
        r->rerank = tool_median(t + 2 * repeats, repeats);
        for (int e = 0; e < PKV_SEARCH_EVENTS; e++)
            r->kernel[e] = tool_median(t + (3 + e) * repeats, repeats);
    }
    free(t);
    return st;
}

typedef clkv_status (*retr_call)(clkv_context *ctx, void *user, int i);

/* Median over `repeats` batches of `iters` calls (host clock, finish after each batch),
 * after one untimed warm-up call; *host_median (may be NULL): the same clock around the
 * calls alone, i.e. the host time of a call while the device runs the earlier ones. */
static clkv_status time_calls(clkv_context *ctx, retr_call f, void *user, int iters, int repeats,
                              double *median, double *host_median) {
    double *t = (double *)calloc(2 * (size_t)repeats, sizeof(double));
    if (!t)
        return CLKV_ERR_OUT_OF_HOST_MEMORY;
    double *h = t + repeats;
    int n = 0;
    clkv_status st = f(ctx, user, n++);
    if (st == CLKV_OK)
        st = clkv_context_finish(ctx);
    for (int r = 0; r < repeats && st == CLKV_OK; r++) {
        const double t0 = tool_now();
        for (int i = 0; i < iters && st == CLKV_OK; i++)
            st = f(ctx, user, n++);
        h[r] = (tool_now() - t0) / iters;
        if (st == CLKV_OK)
            st = clkv_context_finish(ctx);
        t[r] = (tool_now() - t0) / iters;
    }
    if (st == CLKV_OK) {
        *median = tool_median(t, repeats);
        if (host_median)
            *host_median = tool_median(h, repeats);
    }
    free(t);
    return st;
}

typedef struct retr_state {
    clkv_pariskv_index *ix;
    clkv_tensor q, idx;
    clkv_attention_sparse_args sparse;
    clkv_offload_store *store;
    clkv_offload_gather_args gather;
    clkv_pariskv_step_args step;
    cl_mem step_lens; /* [steps][B] int32: the device lengths of each step */
    int64_t B;
} retr_state;

static clkv_status call_search(clkv_context *ctx, void *u, int i) {
    (void)i;
    retr_state *s = (retr_state *)u;
    return clkv_pariskv_index_search(ctx, s->ix, &s->q, &s->idx, NULL);
}

static clkv_status call_sparse(clkv_context *ctx, void *u, int i) {
    (void)i;
    return clkv_attention_sparse(ctx, &((retr_state *)u)->sparse, NULL);
}

static clkv_status call_gather(clkv_context *ctx, void *u, int i) {
    (void)i;
    retr_state *s = (retr_state *)u;
    return clkv_offload_gather(ctx, s->store, &s->gather, NULL);
}

static clkv_status call_step(clkv_context *ctx, void *u, int i) {
    retr_state *s = (retr_state *)u;
    /* lengths += 1: step i reads row i of the lengths of all steps, uploaded beforehand, as
     * an engine keeps its lengths on the device (a host write per step would add the
     * driver's ~9 us enqueue cost of clEnqueueWriteBuffer to each timed step) */
    s->step.lengths = clkv_tensor_1d(s->step_lens, CLKV_I32, s->B);
    s->step.lengths.offset = (uint64_t)i * (uint64_t)s->B * 4u;
    return clkv_pariskv_index_step(ctx, s->ix, &s->step, NULL);
}

static clkv_status run_len(clkv_context *ctx, const retr_opts *o, int64_t len, retr_result *r) {
    const int64_t steps = 1 + o->iters * o->repeats;
    tool_decode_shape sh = {o->batch, o->hq,    o->hkv,   o->dim, len + steps + 8,
                            o->dtype, o->dtype, o->dtype, 0};
    tool_decode_bufs bufs;
    memset(&bufs, 0, sizeof bufs);
    retr_state s;
    memset(&s, 0, sizeof s);
    s.B = o->batch;
    int32_t *lens = (int32_t *)calloc((size_t)o->batch, sizeof(int32_t));
    int64_t *hl = (int64_t *)calloc((size_t)o->batch, sizeof(int64_t));
    int32_t *step_lens = (int32_t *)calloc((size_t)(steps * o->batch), sizeof(int32_t));
    cl_mem idx_buf = NULL, sel_buf[2] = {NULL, NULL};
    clkv_status st = (lens && hl && step_lens) ? CLKV_OK : CLKV_ERR_OUT_OF_HOST_MEMORY;
    for (int64_t b = 0; st == CLKV_OK && b < o->batch; b++) {
        lens[b] = (int32_t)len;
        hl[b] = len;
        for (int64_t i = 0; i < steps; i++)
            step_lens[i * o->batch + b] = (int32_t)(len + i + 1);
    }
    if (st == CLKV_OK) {
        cl_int err;
        s.step_lens =
            clCreateBuffer(clkv_context_cl_context(ctx), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                           (size_t)(steps * o->batch) * 4, step_lens, &err);
        st = err;
    }
    if (st == CLKV_OK)
        st = tool_decode_alloc(ctx, &sh, 0, &bufs);
    if (st == CLKV_OK)
        st = tool_decode_fill_device(ctx, &sh, &bufs, lens);
    clkv_pariskv_index_config cfg = CLKV_PARISKV_INDEX_CONFIG_INIT;
    cfg.batch = o->batch;
    cfg.q_heads = o->hq;
    cfg.kv_heads = o->hkv;
    cfg.head_dim = o->dim;
    cfg.capacity = sh.L;
    cfg.top_k = o->top_k;
    if (st == CLKV_OK && o->offload) {
        clkv_offload_store_desc sd = CLKV_OFFLOAD_STORE_DESC_INIT;
        sd.batch = o->batch;
        sd.kv_heads = o->hkv;
        sd.capacity = sh.L;
        sd.head_dim = o->dim;
        sd.dtype = o->dtype;
        st = clkv_offload_store_create(ctx, &sd, &s.store);
        cfg.kv_store = s.store;
        clkv_offload_store_info info;
        if (st == CLKV_OK && clkv_offload_store_get_info(s.store, &info) == CLKV_OK)
            fprintf(stderr,
                    "[bench] offload store: %s, host_nv=%d, %d buffer(s) per tensor, %.2f GiB\n",
                    info.mode == CLKV_OFFLOAD_STAGING ? "staging" : "kernel-read", info.host_nv,
                    info.num_buffers, (double)info.bytes / (1024.0 * 1024.0 * 1024.0));
    }
    if (st == CLKV_OK)
        st = clkv_pariskv_index_create(ctx, &cfg, &s.ix);
    clkv_attention_decode_args da;
    tool_decode_args(&sh, &bufs, sh.L, 0, &da);
    if (st == CLKV_OK)
        st = clkv_pariskv_index_prefill_kv(ctx, s.ix, &da.k, &da.v, hl);
    if (st == CLKV_OK) {
        cl_int err;
        idx_buf = clCreateBuffer(clkv_context_cl_context(ctx), CL_MEM_READ_WRITE,
                                 (size_t)(o->batch * o->hkv * o->top_k) * 4, NULL, &err);
        st = err;
    }
    if (st == CLKV_OK)
        st = clkv_context_finish(ctx);
    if (st == CLKV_OK) {
        s.q = da.q;
        s.idx = clkv_tensor_3d(idx_buf, CLKV_I32, o->batch, o->hkv, o->top_k);
        r->zone = clkv_pariskv_index_zone_length(s.ix, 0);
        int32_t plan[8];
        const int64_t zn = r->zone;
        clkv_pariskv_plan(&zn, 1, o->top_k, 0, 0, plan, &r->cand);
        fprintf(stderr, "[bench] len %lld: zone %lld, candidates %lld; profiling stages...\n",
                (long long)len, (long long)r->zone, (long long)r->cand);
        st = profile_stages(ctx, s.ix, &s.q, &s.idx, (int)o->repeats, r);
    }
    if (st == CLKV_OK)
        st = time_calls(ctx, call_search, &s, (int)o->iters, (int)o->repeats, &r->search, NULL);
    if (st == CLKV_OK) {
        clkv_attention_sparse_args sa = CLKV_ATTENTION_SPARSE_ARGS_INIT;
        sa.q = da.q;
        sa.k = da.k;
        sa.v = da.v;
        sa.lengths = da.lengths;
        sa.idx = s.idx;
        sa.o = da.o;
        sa.max_length = len;
        sa.sink = cfg.sink;
        sa.local = cfg.local;
        s.sparse = sa;
        st = time_calls(ctx, call_sparse, &s, (int)o->iters, (int)o->repeats, &r->sparse, NULL);
    }
    if (st == CLKV_OK && o->offload) {
        const size_t bytes =
            (size_t)(o->batch * o->hkv * o->top_k * o->dim) * clkv_dtype_size(o->dtype);
        for (int t = 0; t < 2 && st == CLKV_OK; t++) {
            cl_int err;
            sel_buf[t] =
                clCreateBuffer(clkv_context_cl_context(ctx), CL_MEM_READ_WRITE, bytes, NULL, &err);
            st = err;
        }
        s.gather.idx = s.idx;
        s.gather.k_out = clkv_tensor_4d(sel_buf[0], o->dtype, o->batch, o->hkv, o->top_k, o->dim);
        s.gather.v_out = clkv_tensor_4d(sel_buf[1], o->dtype, o->batch, o->hkv, o->top_k, o->dim);
        if (st == CLKV_OK)
            st = time_calls(ctx, call_gather, &s, (int)o->iters, (int)o->repeats, &r->gather, NULL);
    }
    if (st == CLKV_OK) {
        clkv_pariskv_step_args sa = CLKV_PARISKV_STEP_ARGS_INIT;
        sa.q = da.q;
        sa.k = da.k;
        sa.v = da.v;
        sa.lengths = da.lengths;
        sa.o = da.o;
        s.step = sa;
        st =
            time_calls(ctx, call_step, &s, (int)o->iters, (int)o->repeats, &r->step, &r->step_host);
    }
    clkv_context_finish(ctx);
    clkv_pariskv_index_destroy(s.ix);
    clkv_offload_store_destroy(s.store);
    if (idx_buf)
        clReleaseMemObject(idx_buf);
    if (s.step_lens)
        clReleaseMemObject(s.step_lens);
    for (int t = 0; t < 2; t++)
        if (sel_buf[t])
            clReleaseMemObject(sel_buf[t]);
    tool_decode_free(&bufs);
    free(lens);
    free(hl);
    free(step_lens);
    return st;
}

int bench_retrieval(int argc, char **argv) {
    retr_opts o;
    const int pr = parse_opts(argc, argv, &o);
    if (pr != 0) {
        if (pr < 0)
            usage_bench_retrieval(stderr);
        return pr > 0 ? TOOL_EXIT_OK : TOOL_EXIT_USAGE;
    }
    clkv_context *ctx = NULL;
    clkv_status st = clkv_context_create(o.device, &ctx);
    if (st != CLKV_OK)
        return report_failure(NULL, st, "clkv_context_create");
    const clkv_device_info *info = clkv_context_device_info(ctx);
    printf("device: %s | %s | driver %s | %u CUs\n", info->device_name, info->platform_name,
           info->driver_version, info->compute_units);
    printf("retrieval: B=%lld Hq=%lld Hkv=%lld D=%lld %s, top_k=%lld, sink 4, local 512, zone "
           "K/V in %s; medians in us\n",
           (long long)o.batch, (long long)o.hq, (long long)o.hkv, (long long)o.dim,
           clkv_dtype_name(o.dtype), (long long)o.top_k,
           o.offload ? "host memory (--offload)" : "device memory");
    printf("%9s %9s %8s %9s %9s %9s %9s %9s %9s %9s %9s\n", "len", "zone", "cand", "collide",
           "select", "rerank", "search", "sparse", "gather", "step", "step_host");
    fflush(stdout);
    int failed = 0;
    for (int i = 0; i < o.nlen; i++) {
        retr_result r;
        memset(&r, 0, sizeof r);
        st = run_len(ctx, &o, o.len[i], &r);
        if (st != CLKV_OK) {
            report_failure(ctx, st, "bench retrieval");
            failed = 1;
            continue;
        }
        char gather[32];
        if (o.offload)
            snprintf(gather, sizeof gather, "%.1f", r.gather * 1e6);
        else
            snprintf(gather, sizeof gather, "-");
        printf("%9lld %9lld %8lld %9.1f %9.1f %9.1f %9.1f %9.1f %9s %9.1f %9.1f\n",
               (long long)o.len[i], (long long)r.zone, (long long)r.cand, r.collide * 1e6,
               r.select * 1e6, r.rerank * 1e6, r.search * 1e6, r.sparse * 1e6, gather, r.step * 1e6,
               r.step_host * 1e6);
        if (o.per_kernel) {
            printf("%9s kernels:", "");
            for (int e = 0; e < PKV_SEARCH_EVENTS; e++)
                printf(" %s %.1f", KERNEL_NAMES[e], r.kernel[e] * 1e6);
            printf("\n");
        }
        fflush(stdout);
    }
    clkv_context_destroy(ctx);
    return failed ? TOOL_EXIT_FAIL : TOOL_EXIT_OK;
}
