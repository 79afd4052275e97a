/* `clkv demo`: the project's main job on one device, as a list of steps. Each step builds
 * a synthetic long-context problem, runs clkv on it, checks the result against the
 * double-precision CPU reference (tools/reference.c, SPEC §0.2 tolerances) and reports
 * time and bandwidth. Later methods (eviction, quantization, retrieval, paged caches) add
 * steps to `demo_steps`. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bandwidth.h"
#include "bench_util.h"
#include "cli.h"
#include "decode_setup.h"
#include "demo.h"
#include "reference.h"

void usage_demo(FILE *f) {
    fprintf(f, "usage: clkv demo [--device SEL] [--step NAME[,NAME..]]\n"
               "\n"
               "Runs each demo step on the device (default: $CLKV_DEVICE, else the first GPU,\n"
               "else the first CPU): synthetic long-context KV caches (smaller on CPUs), the\n"
               "clkv operator, a check against a double-precision CPU reference with the SPEC\n"
               "tolerances, and time per call / GB/s / %% of the streaming-read bandwidth\n"
               "measured in the same run. Exits non-zero when a step fails. --step runs only\n"
               "the named steps.\n"
               "\n"
               "steps:\n"
               "  decode-attention      bf16 HND cache, B=2, Hq=32, Hkv=8, D=128, ragged lengths\n"
               "  decode-attention-nhd  f16 NHD cache, f32 output and LSE, B=3, ragged lengths\n"
               "  eviction              every scorer at a 10%% budget on a needle cache, AdaKV,\n"
               "                        compaction, decode on the compacted cache\n"
               "  quant-cache           2-bit and 4-bit KIVI caches (groups of 32, n_r 128) vs\n"
               "                        the bf16 cache: memory, output error, time per call\n"
               "  minikv                MiniKV prefill (heavy 25%% + recent 25%%) into a 2-bit\n"
               "                        cache, decode; needles kept, error vs full attention\n"
               "  longflow              static LongFlow cache: load a prompt, decode steps;\n"
               "                        outputs, scores, victims vs a host model; us/step\n"
               "  pariskv               ParisKV index over a needle cache, drifting queries:\n"
               "                        recall@100, output vs its set and vs full attention\n");
}

/* ---- decode attention steps ---- */

typedef struct demo_decode_cfg {
    int64_t B, Hq, Hkv, D, L;
    int32_t lengths[DEMO_MAX_B];
    clkv_dtype kv_dtype, o_dtype;
    int nhd, lse, iters, repeats;
} demo_decode_cfg;

static int demo_decode(demo_env *env, const void *vcfg, demo_row *row) {
    const demo_decode_cfg *cfg = vcfg;
    clkv_context *ctx = env->ctx;
    tool_decode_shape s = {.B = cfg->B,
                           .Hq = cfg->Hq,
                           .Hkv = cfg->Hkv,
                           .D = cfg->D,
                           .L = cfg->L,
                           .q_dtype = cfg->kv_dtype,
                           .kv_dtype = cfg->kv_dtype,
                           .o_dtype = cfg->o_dtype,
                           .nhd = cfg->nhd};
    int n = snprintf(row->shape, sizeof row->shape, "B=%lld Hq=%lld Hkv=%lld D=%lld %s len={",
                     (long long)s.B, (long long)s.Hq, (long long)s.Hkv, (long long)s.D,
                     s.nhd ? "nhd" : "hnd");
    for (int64_t b = 0; b < s.B && n > 0 && (size_t)n < sizeof row->shape; b++) {
        n += snprintf(row->shape + n, sizeof row->shape - (size_t)n, "%s%d", b ? "," : "",
                      cfg->lengths[b]);
    }
    if (n > 0 && (size_t)n < sizeof row->shape) {
        snprintf(row->shape + n, sizeof row->shape - (size_t)n, "}");
    }
    snprintf(row->dtype, sizeof row->dtype, "%s->%s%s", clkv_dtype_name(s.kv_dtype),
             clkv_dtype_name(s.o_dtype), cfg->lse ? "+lse" : "");

    tool_decode_bufs bufs;
    clkv_status st = tool_decode_alloc(ctx, &s, cfg->lse, &bufs);
    if (st != CLKV_OK) {
        return report_failure(ctx, st, "demo allocation");
    }
    const char *what = "demo input fill";
    st = tool_decode_fill_device(ctx, &s, &bufs, cfg->lengths);
    int64_t max_len = 0;
    for (int64_t b = 0; b < s.B; b++) {
        max_len = cfg->lengths[b] > max_len ? cfg->lengths[b] : max_len;
    }
    clkv_attention_decode_args a;
    tool_decode_args(&s, &bufs, max_len, 0, &a);
    tool_timing t = {0};
    if (st == CLKV_OK) {
        what = "clkv_attention_decode";
        st = tool_decode_time(ctx, &a, 1, cfg->iters, cfg->repeats, "[demo] timing", &t);
    }
    tool_compare c;
    tool_compare_init(&c, s.o_dtype);
    if (st == CLKV_OK) {
        what = "demo check";
        int64_t bl[DEMO_MAX_B], hl[64];
        for (int64_t b = 0; b < s.B; b++) {
            bl[b] = b;
        }
        int nh = s.Hkv < 64 ? (int)s.Hkv : 64;
        for (int h = 0; h < nh; h++) {
            hl[h] = h;
        }
        st = tool_decode_check(ctx, &s, &bufs, cfg->lengths, bl, (int)s.B, hl, nh, &c);
    }
    tool_decode_free(&bufs);
    if (st != CLKV_OK) {
        return report_failure(ctx, st, what);
    }
    uint64_t bytes = tool_decode_kv_bytes_read(&s, cfg->lengths);
    row->us_per_call = t.median_s * 1e6;
    row->gbps = (double)bytes / t.median_s * 1e-9;
    row->pct_bw = 100.0 * row->gbps / env->bw.gbps_median;
    row->max_err = c.max_abs_err;
    row->max_lse_err = cfg->lse ? c.max_lse_err : NAN;
    row->pass = tool_compare_pass(&c);
    snprintf(row->note, sizeof row->note,
             "%lld values checked, %lld outside |err| <= %g + %g|ref| (worst %.3g of the bound)"
             "%s",
             (long long)c.count, (long long)c.bad, c.atol, c.rtol, c.worst_ratio,
             cfg->lse ? (c.lse_bad ? ", LSE off by > 1e-4" : ", LSE within 1e-4") : "");
    return TOOL_EXIT_OK;
}

/* CPU sizes keep the whole demo around 10-20 s on a 2-core PoCL machine. */
static const demo_decode_cfg decode_cpu = {.B = 2,
                                           .Hq = 32,
                                           .Hkv = 8,
                                           .D = 128,
                                           .L = 8192,
                                           .lengths = {8192, 5000},
                                           .kv_dtype = CLKV_BF16,
                                           .o_dtype = CLKV_BF16,
                                           .nhd = 0,
                                           .lse = 1,
                                           .iters = 3,
                                           .repeats = 3};
static const demo_decode_cfg decode_gpu = {.B = 2,
                                           .Hq = 32,
                                           .Hkv = 8,
                                           .D = 128,
                                           .L = 32768,
                                           .lengths = {32768, 20000},
                                           .kv_dtype = CLKV_BF16,
                                           .o_dtype = CLKV_BF16,
                                           .nhd = 0,
                                           .lse = 1,
                                           .iters = 50,
                                           .repeats = 9};
static const demo_decode_cfg decode_nhd_cpu = {.B = 3,
                                               .Hq = 32,
                                               .Hkv = 8,
                                               .D = 128,
                                               .L = 4096,
                                               .lengths = {4096, 1234, 1},
                                               .kv_dtype = CLKV_F16,
                                               .o_dtype = CLKV_F32,
                                               .nhd = 1,
                                               .lse = 1,
                                               .iters = 3,
                                               .repeats = 3};
static const demo_decode_cfg decode_nhd_gpu = {.B = 3,
                                               .Hq = 32,
                                               .Hkv = 8,
                                               .D = 128,
                                               .L = 16384,
                                               .lengths = {16384, 777, 1},
                                               .kv_dtype = CLKV_F16,
                                               .o_dtype = CLKV_F32,
                                               .nhd = 1,
                                               .lse = 1,
                                               .iters = 50,
                                               .repeats = 9};

/* ---- the step list ---- */

typedef struct demo_step {
    const char *name;
    demo_fn run;
    const void *cfg_cpu; /* configuration on CPUs and other non-GPU devices */
    const void *cfg_gpu;
} demo_step;

static const demo_step demo_steps[] = {
    {"decode-attention", demo_decode, &decode_cpu, &decode_gpu},
    {"decode-attention-nhd", demo_decode, &decode_nhd_cpu, &decode_nhd_gpu},
    {"eviction", demo_evict, &demo_evict_cpu, &demo_evict_gpu},
    {"quant-cache", demo_quant, &demo_quant_cpu, &demo_quant_gpu},
    {"minikv", demo_minikv, &demo_minikv_cpu, &demo_minikv_gpu},
    {"longflow", demo_longflow, &demo_longflow_cpu, &demo_longflow_gpu},
    {"pariskv", demo_pariskv, &demo_pariskv_cpu, &demo_pariskv_gpu},
};

#define DEMO_NSTEPS ((int)(sizeof demo_steps / sizeof demo_steps[0]))

/* 1 when `name` is one of the comma-separated names in `list`. */
static int step_selected(const char *list, const char *name) {
    const size_t n = strlen(name);
    for (const char *s = list; *s;) {
        const char *e = strchr(s, ',');
        const size_t len = e ? (size_t)(e - s) : strlen(s);
        if (len == n && strncmp(s, name, n) == 0) {
            return 1;
        }
        s += len + (e ? 1 : 0);
    }
    return 0;
}

int cmd_demo(int argc, char **argv) {
    const char *device = NULL, *only = NULL;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int m;
        if (opt_is_help(argv[i])) {
            usage_demo(stdout);
            return TOOL_EXIT_OK;
        } else if ((m = opt_value(argc, argv, &i, "--device", &v)) != 0) {
            if (m < 0) {
                usage_demo(stderr);
                return TOOL_EXIT_USAGE;
            }
            device = v;
        } else if ((m = opt_value(argc, argv, &i, "--step", &v)) != 0) {
            if (m < 0) {
                usage_demo(stderr);
                return TOOL_EXIT_USAGE;
            }
            only = v;
        } else {
            fprintf(stderr, "clkv demo: unknown option '%s'\n", argv[i]);
            usage_demo(stderr);
            return TOOL_EXIT_USAGE;
        }
    }
    if (only && !*only) {
        fprintf(stderr, "clkv demo: --step: empty list\n");
        return TOOL_EXIT_USAGE;
    }
    if (only) {
        /* Every name must be a step (checked before the device is touched). */
        for (const char *s = only; *s;) {
            const char *e = strchr(s, ',');
            const size_t len = e ? (size_t)(e - s) : strlen(s);
            int found = 0;
            for (int i = 0; i < DEMO_NSTEPS && !found; i++) {
                found =
                    strlen(demo_steps[i].name) == len && strncmp(demo_steps[i].name, s, len) == 0;
            }
            if (!found) {
                fprintf(stderr, "clkv demo: --step: no step named '%.*s'\n", (int)len, s);
                usage_demo(stderr);
                return TOOL_EXIT_USAGE;
            }
            s += len + (e ? 1 : 0);
        }
    }
    double t_start = tool_now();
    demo_env env;
    memset(&env, 0, sizeof env);
    clkv_status st = clkv_context_create(device, &env.ctx);
    if (st != CLKV_OK) {
        return report_failure(NULL, st, "clkv_context_create");
    }
    env.info = clkv_context_device_info(env.ctx);
    env.gpu = env.info->kind == CLKV_DEVICE_KIND_GPU;
    printf("clkv demo on %s (%s, %s)\n", env.info->device_name, env.info->platform_name,
           env.gpu ? "GPU sizes" : "CPU sizes");
    fflush(stdout);
    st = tool_measure_bandwidth(env.ctx, 5, &env.bw);
    if (st != CLKV_OK) {
        int rc = report_failure(env.ctx, st, "bandwidth measurement");
        clkv_context_destroy(env.ctx);
        return rc;
    }
    printf("streaming-read bandwidth: %.1f GB/s (%.0f MiB buffer, median of %d runs)\n\n",
           env.bw.gbps_median, (double)env.bw.bytes / (1024.0 * 1024.0), env.bw.runs);
    printf("%-22s %-44s %-16s %11s %9s %7s %10s %10s %s\n", "step", "shape", "dtype", "us/call",
           "GB/s", "%BW", "max|err|", "max|dLSE|", "result");
    fflush(stdout);
    int passed = 0, ran = 0, rc = TOOL_EXIT_OK;
    for (int i = 0; i < DEMO_NSTEPS; i++) {
        const demo_step *step = &demo_steps[i];
        if (only && !step_selected(only, step->name)) {
            continue;
        }
        ran++;
        demo_row row;
        memset(&row, 0, sizeof row);
        int src = step->run(&env, env.gpu ? step->cfg_gpu : step->cfg_cpu, &row);
        if (src != TOOL_EXIT_OK) {
            printf("%-22s error (see stderr)\n", step->name);
            rc = TOOL_EXIT_FAIL;
            continue;
        }
        printf("%-22s %-44s %-16s %11.1f %9.2f %7.1f %10.3g %10.3g %s\n", step->name, row.shape,
               row.dtype, row.us_per_call, row.gbps, row.pct_bw, row.max_err, row.max_lse_err,
               row.pass ? "PASS" : "FAIL");
        printf("%-22s   %s\n", "", row.note);
        for (const char *line = row.table; *line;) {
            const char *nl = strchr(line, '\n');
            int len = nl ? (int)(nl - line) : (int)strlen(line);
            printf("%-22s     %.*s\n", "", len, line);
            line += len + (nl ? 1 : 0);
        }
        fflush(stdout);
        if (row.pass) {
            passed++;
        } else {
            rc = TOOL_EXIT_FAIL;
        }
    }
    clkv_context_destroy(env.ctx);
    printf("\ndemo: %s (%d/%d steps passed, %.1f s)\n", rc == TOOL_EXIT_OK ? "PASS" : "FAIL",
           passed, ran, tool_now() - t_start);
    return rc;
}
