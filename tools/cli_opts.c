/* Option parsing helpers of the clkv command-line tool. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int opt_is_help(const char *arg) {
    return strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0;
}

int opt_value(int argc, char **argv, int *i, const char *name, const char **val) {
    const char *arg = argv[*i];
    size_t n = strlen(name);
    if (strncmp(arg, name, n) != 0) {
        return 0;
    }
    if (arg[n] == '=') {
        *val = arg + n + 1;
        return 1;
    }
    if (arg[n] != '\0') {
        return 0;
    }
    if (*i + 1 >= argc) {
        fprintf(stderr, "clkv: option %s needs a value\n", name);
        return -1;
    }
    *i += 1;
    *val = argv[*i];
    return 1;
}

int parse_int(const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (s[0] == '\0' || end == s || *end != '\0' || errno != 0 || v < lo || v > hi) {
        fprintf(stderr, "clkv: %s: '%s' is not an integer in [%lld, %lld]\n", opt, s, (long long)lo,
                (long long)hi);
        return -1;
    }
    *out = (int64_t)v;
    return 0;
}

int parse_int_list(const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out, int cap) {
    int count = 0;
    const char *p = s;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        char item[64];
        if (n == 0 || n >= sizeof item) {
            fprintf(stderr, "clkv: %s: bad list '%s'\n", opt, s);
            return -1;
        }
        if (count >= cap) {
            fprintf(stderr, "clkv: %s: at most %d values\n", opt, cap);
            return -1;
        }
        memcpy(item, p, n);
        item[n] = '\0';
        if (parse_int(opt, item, lo, hi, &out[count]) != 0) {
            return -1;
        }
        count++;
        if (!comma) {
            break;
        }
        p = comma + 1;
    }
    return count;
}

int parse_float_dtype(const char *opt, const char *s, clkv_dtype *out) {
    if (strcmp(s, "f32") == 0) {
        *out = CLKV_F32;
    } else if (strcmp(s, "f16") == 0) {
        *out = CLKV_F16;
    } else if (strcmp(s, "bf16") == 0) {
        *out = CLKV_BF16;
    } else {
        fprintf(stderr, "clkv: %s: '%s' is not one of f32, f16, bf16\n", opt, s);
        return -1;
    }
    return 0;
}

int report_failure(const clkv_context *ctx, clkv_status st, const char *what) {
    const char *msg = clkv_last_error(ctx);
    fprintf(stderr, "clkv: %s failed: %s (%d)%s%s\n", what, clkv_status_string(st), st,
            msg && msg[0] ? ": " : "", msg ? msg : "");
    if (ctx && st == CL_BUILD_PROGRAM_FAILURE) {
        const char *log = clkv_last_build_log(ctx);
        if (log && log[0]) {
            fprintf(stderr, "build log:\n%s\n", log);
        }
    }
    return TOOL_EXIT_FAIL;
}
