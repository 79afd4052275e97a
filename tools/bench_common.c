/* Option parsing shared by the bench commands (see bench_common.h). */
#include "bench_common.h"

#include <stdio.h>
#include <string.h>

#include "cli.h"

int bench_common_option(int argc, char **argv, int *i, const bench_common_opts *c) {
    const char *v = NULL;
    int m;
    if (c->iters && (m = opt_value(argc, argv, i, "--iters", &v)) != 0)
        return m < 0 || parse_int("--iters", v, 1, c->iters_max, c->iters) != 0 ? -1 : 1;
    if (c->repeats && (m = opt_value(argc, argv, i, "--repeats", &v)) != 0)
        return m < 0 || parse_int("--repeats", v, 1, c->repeats_max, c->repeats) != 0 ? -1 : 1;
    if (c->warmup && (m = opt_value(argc, argv, i, "--warmup", &v)) != 0)
        return m < 0 || parse_int("--warmup", v, 0, 1000000, c->warmup) != 0 ? -1 : 1;
    if (c->bw_runs && (m = opt_value(argc, argv, i, "--bw-runs", &v)) != 0)
        return m < 0 || parse_int("--bw-runs", v, 1, c->bw_runs_max, c->bw_runs) != 0 ? -1 : 1;
    if (c->device && (m = opt_value(argc, argv, i, "--device", &v)) != 0) {
        *c->device = v;
        return m < 0 ? -1 : 1;
    }
    if (c->format && (m = opt_value(argc, argv, i, "--format", &v)) != 0)
        return m < 0 || tool_parse_format("--format", v, c->format) != 0 ? -1 : 1;
    return 0;
}

int bench_parse_layout(int m, const char *v, int *nhd) {
    if (m > 0 && (strcmp(v, "hnd") == 0 || strcmp(v, "nhd") == 0)) {
        *nhd = strcmp(v, "nhd") == 0;
        return 0;
    }
    if (m > 0)
        fprintf(stderr, "clkv: --layout: '%s' is not one of hnd, nhd\n", v);
    return 1;
}

int bench_check_heads(int64_t hq, int64_t hkv) {
    if (hq % hkv != 0) {
        fprintf(stderr, "clkv: --q-heads %lld is not a multiple of --kv-heads %lld\n",
                (long long)hq, (long long)hkv);
        return -1;
    }
    return 0;
}
