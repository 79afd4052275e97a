/* The clkv command-line tool: command entry points and option parsing helpers. */
#ifndef CLKV_TOOLS_CLI_H
#define CLKV_TOOLS_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "clkv.h"

/* Exit codes of the tool. */
#define TOOL_EXIT_OK 0
#define TOOL_EXIT_FAIL 1  /* a clkv call failed, a check failed */
#define TOOL_EXIT_USAGE 2 /* unknown command or option, bad option value */

/* Commands: argv[0] is the command name ("devices", "bench", "demo"). */
int cmd_devices(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int bench_compress(int argc, char **argv); /* tools/bench_compress.c */
/* `clkv bench attention-quant` (tools/bench_quant.c); argv[0] is "attention-quant". */
int bench_attention_quant(int argc, char **argv);

void usage_devices(FILE *f);
void usage_bench(FILE *f);
void usage_bench_decode(FILE *f);
int bench_longflow(int argc, char **argv); /* tools/bench_longflow.c */
void usage_bench_longflow(FILE *f);
void usage_bench_window(FILE *f);
/* `clkv bench attention-window` (tools/bench_window.c). */
int bench_window(int argc, char **argv);
/* `clkv bench minikv-prefill` (tools/bench_minikv.c). */
void usage_bench_minikv(FILE *f);
int bench_minikv(int argc, char **argv);
/* `clkv bench score | dropkv | evict` (tools/bench_score.c). */
void usage_bench_score(FILE *f);
int bench_score(int argc, char **argv);
int bench_dropkv(int argc, char **argv);
int bench_evict(int argc, char **argv);
void usage_bench_retrieval(FILE *f);
int bench_retrieval(int argc, char **argv); /* tools/bench_retrieval.c */
void usage_bench_sparse(FILE *f);
int bench_sparse(int argc, char **argv); /* tools/bench_sparse.c */
void usage_demo(FILE *f);

/* 1 when argv[i] is "-h" or "--help". */
int opt_is_help(const char *arg);

/* Matches argv[*i] against "--name VALUE" or "--name=VALUE". Returns 1 and sets *val
 * (advancing *i past a separate value) on a match, 0 when argv[*i] is another option,
 * -1 (with a message on stderr) when the value is missing. */
int opt_value(int argc, char **argv, int *i, const char *name, const char **val);

/* Integer in [lo, hi]; 0 on success, -1 (message on stderr naming `opt`) otherwise. */
int parse_int(const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out);

/* Comma-separated integers in [lo, hi]; returns the count (1..cap) or -1. */
int parse_int_list(const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out, int cap);

/* "f32" | "f16" | "bf16"; 0 on success, -1 otherwise. */
int parse_float_dtype(const char *opt, const char *s, clkv_dtype *out);

/* Print "what: STATUS_NAME (code): last error" to stderr; returns TOOL_EXIT_FAIL. */
int report_failure(const clkv_context *ctx, clkv_status st, const char *what);

#endif /* CLKV_TOOLS_CLI_H */
