/* `clkv demo`: the project's main job on one device, as a list of steps (`demo_steps`,
 * one line each). Each step (tools/demo_<family>.c) builds a synthetic long-context
 * problem, runs clkv on it, checks the result against a double-precision host reference
 * (SPEC §0.2 tolerances) or a stated expected property, and reports time (and bandwidth
 * where it means something) in one row, a note and its own small table. */
#include <stdio.h>
#include <string.h>

#include "bandwidth.h"
#include "bench_util.h"
#include "cli.h"
#include "demo.h"

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

/* ---- the step list ---- */

typedef struct demo_step {
    const char *name;
    demo_fn run;
    const void *cfg_cpu; /* configuration on CPUs and other non-GPU devices */
    const void *cfg_gpu;
} demo_step;

static const demo_step demo_steps[] = {
    {"decode-attention", demo_decode, &demo_decode_cpu, &demo_decode_gpu},
    {"decode-attention-nhd", demo_decode, &demo_decode_nhd_cpu, &demo_decode_nhd_gpu},
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
