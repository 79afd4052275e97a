/* The run harness shared by the `clkv bench` commands (see bench_harness.h). */
#include "bench_harness.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "runtime/internal.h"

int bench_open(bench_session *s, const char *device, tool_format format, int bw_runs) {
    memset(s, 0, sizeof *s);
    s->format = format;
    clkv_status st = clkv_context_create(device, &s->ctx);
    if (st != CLKV_OK)
        return report_failure(NULL, st, "clkv_context_create");
    s->info = clkv_context_device_info(s->ctx);
    if (bw_runs > 0) {
        fprintf(stderr, "[bench] device: %s (%s); measuring streaming-read bandwidth...\n",
                s->info->device_name, s->info->platform_name);
        st = tool_measure_bandwidth(s->ctx, bw_runs, &s->bw);
        if (st != CLKV_OK) {
            const int rc = report_failure(s->ctx, st, "bandwidth measurement");
            clkv_context_destroy(s->ctx);
            s->ctx = NULL;
            return rc;
        }
        s->have_bw = 1;
    }
    return TOOL_EXIT_OK;
}

void bench_print_device(const bench_session *s) {
    const clkv_device_info *info = s->info;
    printf("device: %s | %s | driver %s | %u CUs\n", info->device_name, info->platform_name,
           info->driver_version, info->compute_units);
}

void bench_print_bandwidth(const bench_session *s) {
    if (s->have_bw)
        printf("streaming read: %.1f GB/s (median of %d runs x %d launches over %.0f MiB, "
               "%s; best %.1f)\n",
               s->bw.gbps_median, s->bw.runs, s->bw.launches_per_run,
               (double)s->bw.bytes / (1024.0 * 1024.0), s->bw.method, s->bw.gbps_best);
}

/* n back-to-back calls and a finish; the host time per call into *per_call. */
static clkv_status time_batch(clkv_context *ctx, bench_call_fn fn, const void *arg, int n,
                              double *per_call) {
    const double t0 = tool_now();
    for (int i = 0; i < n; i++) {
        const clkv_status st = fn(ctx, arg);
        if (st != CLKV_OK)
            return st;
    }
    const clkv_status st = clkv_context_finish(ctx);
    *per_call = (tool_now() - t0) / (n > 0 ? n : 1);
    return st;
}

clkv_status bench_time_call(clkv_context *ctx, bench_call_fn fn, const void *arg, int iters,
                            int repeats, int warmup, const char *label, tool_timing *t) {
    iters = iters < 1 ? 1 : iters;
    repeats = repeats < 1 ? 1 : (repeats > BENCH_MAX_REPEATS ? BENCH_MAX_REPEATS : repeats);
    t->iters = iters;
    t->repeats = repeats;
    t->first_call_s = t->median_s = t->min_s = NAN;
    clkv_status st = time_batch(ctx, fn, arg, 1, &t->first_call_s);
    double warm = 0.0;
    if (st == CLKV_OK && warmup > 0)
        st = time_batch(ctx, fn, arg, warmup, &warm);
    if (st != CLKV_OK)
        return st;
    double *per = malloc((size_t)repeats * sizeof *per);
    if (!per)
        return clkv__fail(ctx, CLKV_ERR_OUT_OF_HOST_MEMORY, "timing: out of host memory");
    const double est = (warmup > 0 ? warm : t->first_call_s) * iters * repeats;
    const int progress = label != NULL && est > 1.5;
    if (progress)
        tool_progress_begin(label);
    for (int r = 0; r < repeats && st == CLKV_OK; r++) {
        st = time_batch(ctx, fn, arg, iters, &per[r]);
        if (progress)
            tool_progress_step(r + 1, repeats);
    }
    if (progress)
        tool_progress_end();
    if (st == CLKV_OK) {
        t->median_s = tool_median(per, repeats);
        t->min_s = tool_min(per, repeats);
    }
    free(per);
    return st;
}

void bench_error_text(const clkv_context *ctx, clkv_status st, const char *what, char *buf,
                      size_t n) {
    const char *msg = clkv_last_error(ctx);
    if (what)
        snprintf(buf, n, "%s: %s: %s", what, clkv_status_string(st), msg ? msg : "");
    else
        snprintf(buf, n, "%s: %s", clkv_status_string(st), msg ? msg : "");
}

void bench_record_begin(tool_record *rec, const bench_session *s, const char *op) {
    tool_record_init(rec);
    tool_record_str(rec, "op", op);
    tool_record_str(rec, "device", s->info->device_name);
    tool_record_str(rec, "platform", s->info->platform_name);
}

void bench_record_timing(tool_record *rec, const tool_timing *t) {
    tool_record_num(rec, "median_us", t->median_s * 1e6);
    tool_record_num(rec, "min_us", t->min_s * 1e6);
    tool_record_num(rec, "first_call_ms", t->first_call_s * 1e3);
}

void bench_record_status(tool_record *rec, clkv_status st, const char *error) {
    tool_record_str(rec, "status", st == CLKV_OK ? "ok" : "error");
    tool_record_str(rec, "error", error);
}

void bench_emit_row(bench_session *s, const tool_record *rec, const char *text_fmt, ...) {
    if (s->format == TOOL_FMT_JSON) {
        if (s->rows == 0)
            tool_json_begin(stdout);
        tool_json_item(stdout, rec, s->rows);
    } else if (s->format == TOOL_FMT_CSV) {
        if (s->rows == 0)
            tool_csv_header(stdout, rec);
        tool_csv_row(stdout, rec);
    } else {
        va_list ap;
        va_start(ap, text_fmt);
        vprintf(text_fmt, ap);
        va_end(ap);
    }
    fflush(stdout);
    s->rows++;
}

int bench_close(bench_session *s) {
    if (s->format == TOOL_FMT_JSON) {
        if (s->rows == 0)
            tool_json_begin(stdout);
        tool_json_end(stdout);
    }
    clkv_context_destroy(s->ctx);
    s->ctx = NULL;
    return s->failed ? TOOL_EXIT_FAIL : TOOL_EXIT_OK;
}
