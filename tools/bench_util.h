/* Timing, statistics and machine-readable output for the clkv tool. */
#ifndef CLKV_TOOLS_BENCH_UTIL_H
#define CLKV_TOOLS_BENCH_UTIL_H

#include <stdint.h>
#include <stdio.h>

/* Monotonic wall clock in seconds. */
double tool_now(void);

/* Median of v[0..n) (v is not modified; n >= 1). The mean of the two middle values for
 * even n. */
double tool_median(const double *v, int n);
double tool_min(const double *v, int n);
double tool_max(const double *v, int n);

typedef enum tool_format { TOOL_FMT_TEXT = 0, TOOL_FMT_JSON = 1, TOOL_FMT_CSV = 2 } tool_format;

/* "text" | "json" | "csv"; 0 on success, -1 (message on stderr) otherwise. */
int tool_parse_format(const char *opt, const char *s, tool_format *out);

/* One field of an output record. */
typedef enum tool_field_kind { TOOL_STR = 0, TOOL_INT = 1, TOOL_NUM = 2 } tool_field_kind;

typedef struct tool_field {
    const char *key;
    tool_field_kind kind;
    const char *s;
    long long i;
    double d;
} tool_field;

#define TOOL_FIELD_MAX 48

/* A record under construction: append fields, then print. Strings are copied. */
typedef struct tool_record {
    int n;
    tool_field f[TOOL_FIELD_MAX];
    char strings[TOOL_FIELD_MAX][128];
} tool_record;

void tool_record_init(tool_record *r);
void tool_record_str(tool_record *r, const char *key, const char *value);
void tool_record_int(tool_record *r, const char *key, long long value);
void tool_record_num(tool_record *r, const char *key, double value);

/* JSON: records as an array, one object per line. Call begin, then item for each record
 * (index = 0, 1, ...), then end. Non-finite numbers are written as null. */
void tool_json_begin(FILE *f);
void tool_json_item(FILE *f, const tool_record *r, int index);
void tool_json_end(FILE *f);

/* CSV: a header line from the record's keys, then one line per record. */
void tool_csv_header(FILE *f, const tool_record *r);
void tool_csv_row(FILE *f, const tool_record *r);

/* Progress on stderr: a line prefix, then one dot per step, then a newline. */
void tool_progress_begin(const char *label);
void tool_progress_step(int done, int total);
void tool_progress_end(void);

#endif /* CLKV_TOOLS_BENCH_UTIL_H */
