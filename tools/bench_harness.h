/* The run harness shared by the `clkv bench` commands: opening the device (context,
 * "[bench] device" progress line, streaming-read bandwidth probe), the device header of
 * the text output, the one timing loop (first call, warm-up, --repeats batches of
 * --iters calls, median/min), the error text of a failed shape, and the result rows in
 * text, JSON or CSV. Option parsing is in bench_common.h; the clkv-free primitives
 * (clock, statistics, records) are in bench_util.h.
 *
 * A command's shape:
 *
 *     bench_session s;
 *     int rc = bench_open(&s, o.device, o.format, (int)o.bw_runs); // 0 for no probe
 *     if (rc != TOOL_EXIT_OK)
 *         return rc;
 *     if (o.format == TOOL_FMT_TEXT) {
 *         bench_print_device(&s);
 *         bench_print_bandwidth(&s);
 *         printf(the command's own header lines);
 *     }
 *     for each shape:
 *         bench_time_call(s.ctx, call_fn, &args, iters, repeats, warmup, label, &t);
 *         (on failure: bench_error_text(s.ctx, st, "what", r.error, sizeof r.error))
 *         s.failed |= shape failed or its check failed;
 *         bench_record_begin(&rec, &s, "op"); tool_record_...(the command's columns);
 *         bench_record_timing(&rec, &t); ...; bench_record_status(&rec, st, r.error);
 *         bench_emit_row(&s, &rec, "the command's text row format", ...);
 *     return bench_close(&s);
 */
#ifndef CLKV_TOOLS_BENCH_HARNESS_H
#define CLKV_TOOLS_BENCH_HARNESS_H

#include <stddef.h>

#include "bandwidth.h"
#include "bench_util.h"
#include "clkv.h"

/* One bench command's run on one device. */
typedef struct bench_session {
    clkv_context *ctx;
    const clkv_device_info *info; /* ctx's device */
    tool_bandwidth bw;            /* the probe's result; all zero when bw_runs was 0 */
    int have_bw;                  /* the probe ran (bw_runs > 0) */
    tool_format format;           /* output format of the rows */
    int rows;                     /* rows emitted so far */
    int failed;                   /* set by the command: bench_close then returns TOOL_EXIT_FAIL */
} bench_session;

/* Create the context for `device` (NULL: $CLKV_DEVICE or the default device) and, when
 * bw_runs > 0, print "[bench] device: NAME (PLATFORM); measuring streaming-read
 * bandwidth..." on stderr and measure the streaming-read bandwidth over bw_runs runs
 * into s->bw. Returns TOOL_EXIT_OK, or the tool exit code after reporting the failure on
 * stderr ("clkv_context_create" / "bandwidth measurement"); nothing is left open then. */
int bench_open(bench_session *s, const char *device, tool_format format, int bw_runs);

/* Text header line "device: NAME | PLATFORM | driver V | N CUs". */
void bench_print_device(const bench_session *s);

/* Text header line "streaming read: G GB/s (median of R runs x N launches over M MiB,
 * METHOD; best G)" when the probe ran; nothing otherwise. */
void bench_print_bandwidth(const bench_session *s);

/* The call being timed: one enqueue of the operator on ctx with its arguments. A call
 * that needs state across calls (a call counter, a growing length) keeps it behind a
 * pointer in arg. */
typedef clkv_status (*bench_call_fn)(clkv_context *ctx, const void *arg);

/* Per-call times of one timed operator. */
typedef struct tool_timing {
    double first_call_s; /* first call + finish (includes the program build) */
    double median_s;     /* median over repeats of the per-call mean of a batch */
    double min_s;        /* fastest batch, per call */
    int iters, repeats;
} tool_timing;

#define BENCH_MAX_REPEATS 1000

/* The timing loop: one call + finish (timed as first_call_s), `warmup` more calls +
 * finish, then `repeats` batches of `iters` back-to-back calls, each batch timed by the
 * host clock around the calls and a finish and divided by iters; median_s and min_s over
 * the batches: 1 + warmup + repeats * iters calls in all. iters is raised to 1, repeats
 * clamped to [1, BENCH_MAX_REPEATS]. With a label, a progress line "LABEL ..." goes to
 * stderr when the batches look longer than ~1.5 s in all; NULL: never. Stops at the
 * first failing call (its status returned, the message on ctx); t's times are NAN for
 * what was not measured. */
clkv_status bench_time_call(clkv_context *ctx, bench_call_fn fn, const void *arg, int iters,
                            int repeats, int warmup, const char *label, tool_timing *t);

/* The error text of a failed shape: "WHAT: STATUS_NAME: last error on ctx", or without
 * "WHAT: " when what is NULL, into buf (size n, always terminated). */
void bench_error_text(const clkv_context *ctx, clkv_status st, const char *what, char *buf,
                      size_t n);

/* The fields a result record starts with (after tool_record_init): "op" (op), "device",
 * "platform" (the session's device). */
void bench_record_begin(tool_record *rec, const bench_session *s, const char *op);

/* "median_us", "min_us", "first_call_ms" of t. */
void bench_record_timing(tool_record *rec, const tool_timing *t);

/* The fields a result record ends with: "status" ("ok" for CLKV_OK, else "error") and
 * "error" (the error text, "" when none). */
void bench_record_status(tool_record *rec, clkv_status st, const char *error);

/* The next result row on stdout: in JSON the record as the next array item (the array
 * opened before the first), in CSV as a line (the header line from the record's keys
 * before the first), in text printf(text_fmt, ...) (the command's own table row); then
 * stdout is flushed. */
void bench_emit_row(bench_session *s, const tool_record *rec, const char *text_fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Close the JSON array (when rows were emitted), destroy the context; returns
 * TOOL_EXIT_FAIL when s->failed was set, else TOOL_EXIT_OK. */
int bench_close(bench_session *s);

#endif /* CLKV_TOOLS_BENCH_HARNESS_H */
