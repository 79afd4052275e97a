/* Double-precision CPU reference of decode attention (SPEC §1.1) for the tool's checks,
 * independent of tests/, and the SPEC §0.2 comparison. */
#ifndef CLKV_TOOLS_REFERENCE_H
#define CLKV_TOOLS_REFERENCE_H

#include <stdint.h>

#include "clkv.h"

/* One KV head and the G query heads that read it:
 *   q   G rows of D floats (row stride D)
 *   k,v n rows of D floats, row j at k + j * kv_row_stride
 * o (G x D) and lse (G) in double; n = 0 gives o = 0, lse = -inf. scale as given. */
void tool_ref_decode_group(const float *q, const float *k, const float *v, int64_t n,
                           int64_t kv_row_stride, int64_t D, int G, double scale, double *o,
                           double *lse);

/* SPEC §0.2 attention-output tolerance for an output stored as `dtype`. */
void tool_attention_tolerance(clkv_dtype dtype, double *rtol, double *atol);

/* Running comparison of outputs against the reference. */
typedef struct tool_compare {
    double rtol, atol;
    double max_abs_err;
    double worst_ratio; /* max |x - ref| / (atol + rtol |ref|); <= 1 passes */
    double max_lse_err;
    int64_t count, bad, lse_bad;
} tool_compare;

void tool_compare_init(tool_compare *c, clkv_dtype out_dtype);
void tool_compare_value(tool_compare *c, double x, double ref);
/* LSE within 1e-4 absolute; -inf must match -inf. */
void tool_compare_lse(tool_compare *c, double x, double ref);
int tool_compare_pass(const tool_compare *c);

#endif /* CLKV_TOOLS_REFERENCE_H */
