/* Double-precision CPU reference of decode attention. */
#include <math.h>
#include <stdlib.h>

#include "reference.h"

void tool_ref_decode_group(const float *q, const float *k, const float *v, int64_t n,
                           int64_t kv_row_stride, int64_t D, int G, double scale, double *o,
                           double *lse) {
    for (int g = 0; g < G; g++) {
        const float *qg = q + (int64_t)g * D;
        double *og = o + (int64_t)g * D;
        for (int64_t d = 0; d < D; d++) {
            og[d] = 0.0;
        }
        if (n <= 0) {
            lse[g] = -INFINITY;
            continue;
        }
        /* Pass 1: the maximum logit. Pass 2: weights and the weighted sum of V. */
        double m = -INFINITY;
        for (int64_t j = 0; j < n; j++) {
            const float *kj = k + j * kv_row_stride;
            double z = 0.0;
            for (int64_t d = 0; d < D; d++) {
                z += (double)qg[d] * (double)kj[d];
            }
            z *= scale;
            m = z > m ? z : m;
        }
        double l = 0.0;
        for (int64_t j = 0; j < n; j++) {
            const float *kj = k + j * kv_row_stride;
            const float *vj = v + j * kv_row_stride;
            double z = 0.0;
            for (int64_t d = 0; d < D; d++) {
                z += (double)qg[d] * (double)kj[d];
            }
            double p = exp(z * scale - m);
            l += p;
            for (int64_t d = 0; d < D; d++) {
                og[d] += p * (double)vj[d];
            }
        }
        for (int64_t d = 0; d < D; d++) {
            og[d] /= l;
        }
        lse[g] = m + log(l);
    }
}

void tool_attention_tolerance(clkv_dtype dtype, double *rtol, double *atol) {
    switch (dtype) {
    case CLKV_BF16:
        *rtol = 1e-2;
        *atol = 1e-3;
        break;
    case CLKV_F16:
        *rtol = 2e-3;
        *atol = 1e-4;
        break;
    default:
        *rtol = 1e-4;
        *atol = 1e-5;
        break;
    }
}

void tool_compare_init(tool_compare *c, clkv_dtype out_dtype) {
    tool_attention_tolerance(out_dtype, &c->rtol, &c->atol);
    c->max_abs_err = 0.0;
    c->worst_ratio = 0.0;
    c->max_lse_err = 0.0;
    c->count = 0;
    c->bad = 0;
    c->lse_bad = 0;
}

void tool_compare_value(tool_compare *c, double x, double ref) {
    double err = fabs(x - ref);
    double bound = c->atol + c->rtol * fabs(ref);
    c->count++;
    if (!(err <= bound)) { /* NaN counts as a failure */
        c->bad++;
    }
    if (isnan(err)) {
        c->max_abs_err = INFINITY;
        c->worst_ratio = INFINITY;
        return;
    }
    if (err > c->max_abs_err) {
        c->max_abs_err = err;
    }
    if (err / bound > c->worst_ratio) {
        c->worst_ratio = err / bound;
    }
}

void tool_compare_lse(tool_compare *c, double x, double ref) {
    if (isinf(ref) && ref < 0) {
        if (!(isinf(x) && x < 0)) {
            c->lse_bad++;
        }
        return;
    }
    double err = fabs(x - ref);
    if (!(err <= 1e-4)) {
        c->lse_bad++;
    }
    if (isnan(err)) {
        c->max_lse_err = INFINITY;
    } else if (err > c->max_lse_err) {
        c->max_lse_err = err;
    }
}

int tool_compare_pass(const tool_compare *c) {
    return c->bad == 0 && c->lse_bad == 0;
}
