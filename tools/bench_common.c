/* Option parsing shared by the bench commands (see bench_common.h). */
#include "bench_common.h"

#include <stdio.h>
#include <string.h>

#include "cli.h"

/* "--name N" into *out (when out is not NULL) with N in [lo, hi]: 0 when argv[*i] is
 * another option, 1 when parsed, -1 on a bad or missing value. */
static int int_option(int argc, char **argv, int *i, const char *name, int64_t lo, int64_t hi,
                      int64_t *out) {
    const char *v = NULL;
    const int m = out ? opt_value(argc, argv, i, name, &v) : 0;
    if (m == 0)
        return 0;
    return m < 0 || parse_int(name, v, lo, hi, out) != 0 ? -1 : 1;
}

/* "--name N[,N..]" into out[0..*count) (when out is not NULL), values in [1, hi]. */
static int list_option(int argc, char **argv, int *i, const char *name, int64_t hi, int64_t *out,
                       int *count) {
    const char *v = NULL;
    const int m = out ? opt_value(argc, argv, i, name, &v) : 0;
    if (m == 0)
        return 0;
    return m < 0 || (*count = parse_int_list(name, v, 1, hi, out, BENCH_MAX_LIST)) < 0 ? -1 : 1;
}

static int64_t or_default(int64_t v, int64_t dflt) {
    return v ? v : dflt;
}

int bench_common_option(int argc, char **argv, int *i, const bench_common_opts *c) {
    const char *v = NULL;
    int m;
    if ((m = int_option(argc, argv, i, "--iters", 1, c->iters_max, c->iters)) != 0 ||
        (m = int_option(argc, argv, i, "--repeats", 1, c->repeats_max, c->repeats)) != 0 ||
        (m = int_option(argc, argv, i, "--warmup", 0, 1000000, c->warmup)) != 0 ||
        (m = int_option(argc, argv, i, "--bw-runs", 1, c->bw_runs_max, c->bw_runs)) != 0)
        return m;
    if (c->device && (m = opt_value(argc, argv, i, "--device", &v)) != 0) {
        *c->device = v;
        return m < 0 ? -1 : 1;
    }
    if (c->format && (m = opt_value(argc, argv, i, "--format", &v)) != 0)
        return m < 0 || tool_parse_format("--format", v, c->format) != 0 ? -1 : 1;
    if ((m = list_option(argc, argv, i, "--batch", c->batch_max, c->batch, c->nbatch)) != 0 ||
        (m = list_option(argc, argv, i, "--len", c->len_max, c->len, c->nlen)) != 0 ||
        (m = int_option(argc, argv, i, "--q-heads", 1, or_default(c->q_heads_max, 4096),
                        c->q_heads)) != 0 ||
        (m = int_option(argc, argv, i, "--kv-heads", 1, or_default(c->kv_heads_max, 4096),
                        c->kv_heads)) != 0 ||
        (m = int_option(argc, argv, i, "--dim", or_default(c->dim_min, 1),
                        or_default(c->dim_max, 4096), c->dim)) != 0 ||
        (m = int_option(argc, argv, i, "--splits", 0, 1 << 20, c->splits)) != 0)
        return m;
    if (c->dtype && (m = opt_value(argc, argv, i, "--dtype", &v)) != 0)
        return m < 0 || parse_float_dtype("--dtype", v, c->dtype) != 0 ? -1 : 1;
    if (c->nhd && (m = opt_value(argc, argv, i, "--layout", &v)) != 0)
        return bench_parse_layout(m, v, c->nhd) != 0 ? -1 : 1;
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
