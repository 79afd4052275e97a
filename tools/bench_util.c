/* Timing, statistics and machine-readable output for the clkv tool. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"

double tool_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double tool_median(const double *v, int n) {
    if (n <= 0) {
        return NAN;
    }
    double small[64];
    double *tmp = n <= 64 ? small : malloc((size_t)n * sizeof *tmp);
    if (!tmp) {
        return NAN;
    }
    memcpy(tmp, v, (size_t)n * sizeof *tmp);
    qsort(tmp, (size_t)n, sizeof *tmp, cmp_double);
    double m = (n % 2) ? tmp[n / 2] : 0.5 * (tmp[n / 2 - 1] + tmp[n / 2]);
    if (tmp != small) {
        free(tmp);
    }
    return m;
}

double tool_min(const double *v, int n) {
    double m = n > 0 ? v[0] : NAN;
    for (int i = 1; i < n; i++) {
        m = v[i] < m ? v[i] : m;
    }
    return m;
}

double tool_max(const double *v, int n) {
    double m = n > 0 ? v[0] : NAN;
    for (int i = 1; i < n; i++) {
        m = v[i] > m ? v[i] : m;
    }
    return m;
}

int tool_parse_format(const char *opt, const char *s, tool_format *out) {
    if (strcmp(s, "text") == 0) {
        *out = TOOL_FMT_TEXT;
    } else if (strcmp(s, "json") == 0) {
        *out = TOOL_FMT_JSON;
    } else if (strcmp(s, "csv") == 0) {
        *out = TOOL_FMT_CSV;
    } else {
        fprintf(stderr, "clkv: %s: '%s' is not one of text, json, csv\n", opt, s);
        return -1;
    }
    return 0;
}

void tool_record_init(tool_record *r) {
    r->n = 0;
}

static tool_field *record_add(tool_record *r, const char *key, tool_field_kind kind) {
    if (r->n >= TOOL_FIELD_MAX) {
        return NULL;
    }
    tool_field *f = &r->f[r->n];
    memset(f, 0, sizeof *f);
    f->key = key;
    f->kind = kind;
    r->n++;
    return f;
}

void tool_record_str(tool_record *r, const char *key, const char *value) {
    int idx = r->n;
    tool_field *f = record_add(r, key, TOOL_STR);
    if (f) {
        snprintf(r->strings[idx], sizeof r->strings[idx], "%s", value ? value : "");
        f->s = r->strings[idx];
    }
}

void tool_record_int(tool_record *r, const char *key, long long value) {
    tool_field *f = record_add(r, key, TOOL_INT);
    if (f) {
        f->i = value;
    }
}

void tool_record_num(tool_record *r, const char *key, double value) {
    tool_field *f = record_add(r, key, TOOL_NUM);
    if (f) {
        f->d = value;
    }
}

static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            fprintf(f, "\\%c", *p);
        } else if (*p < 0x20) {
            fprintf(f, "\\u%04x", *p);
        } else {
            fputc(*p, f);
        }
    }
    fputc('"', f);
}

void tool_json_begin(FILE *f) {
    fputs("[\n", f);
}

void tool_json_item(FILE *f, const tool_record *r, int index) {
    fputs(index > 0 ? ",\n  {" : "  {", f);
    for (int i = 0; i < r->n; i++) {
        const tool_field *fl = &r->f[i];
        if (i > 0) {
            fputs(", ", f);
        }
        json_string(f, fl->key);
        fputs(": ", f);
        if (fl->kind == TOOL_STR) {
            json_string(f, fl->s);
        } else if (fl->kind == TOOL_INT) {
            fprintf(f, "%lld", fl->i);
        } else if (isfinite(fl->d)) {
            fprintf(f, "%.6g", fl->d);
        } else {
            fputs("null", f);
        }
    }
    fputc('}', f);
}

void tool_json_end(FILE *f) {
    fputs("\n]\n", f);
}

static void csv_string(FILE *f, const char *s) {
    if (strpbrk(s, ",\"\n") == NULL) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (const char *p = s; *p; p++) {
        if (*p == '"') {
            fputc('"', f);
        }
        fputc(*p, f);
    }
    fputc('"', f);
}

void tool_csv_header(FILE *f, const tool_record *r) {
    for (int i = 0; i < r->n; i++) {
        if (i > 0) {
            fputc(',', f);
        }
        csv_string(f, r->f[i].key);
    }
    fputc('\n', f);
}

void tool_csv_row(FILE *f, const tool_record *r) {
    for (int i = 0; i < r->n; i++) {
        const tool_field *fl = &r->f[i];
        if (i > 0) {
            fputc(',', f);
        }
        if (fl->kind == TOOL_STR) {
            csv_string(f, fl->s);
        } else if (fl->kind == TOOL_INT) {
            fprintf(f, "%lld", fl->i);
        } else if (isfinite(fl->d)) {
            fprintf(f, "%.6g", fl->d);
        }
    }
    fputc('\n', f);
}

void tool_progress_begin(const char *label) {
    fprintf(stderr, "%s ", label);
    fflush(stderr);
}

void tool_progress_step(int done, int total) {
    (void)total;
    fputc(done % 5 == 0 ? '|' : '.', stderr);
    fflush(stderr);
}

void tool_progress_end(void) {
    fputc('\n', stderr);
    fflush(stderr);
}
