/* Shared pieces of `clkv demo`: row tables, the synthetic needle problem, host
 * references over it, uploads, checks and timing (demo.h, demo_util.h). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "demo.h"
#include "demo_util.h"
#include "reference.h"
#include "runtime/internal.h"
#include "tool_data.h"

void demo_row_line(demo_row *row, const char *fmt, ...) {
    size_t used = strlen(row->table);
    if (used + 2 >= sizeof row->table) {
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(row->table + used, sizeof row->table - used - 1, fmt, ap);
    va_end(ap);
    if (n < 0) {
        row->table[used] = '\0';
        return;
    }
    used = strlen(row->table);
    row->table[used] = '\n';
    row->table[used + 1] = '\0';
}

/* ---- synthetic problem ---- */

static void unit_vector(float *u, int64_t D, uint64_t base, uint32_t seed) {
    double n2 = 0.0;
    for (int64_t d = 0; d < D; d++) {
        u[d] = tool_rand_value(base + (uint64_t)d, seed, 1.0f);
        n2 += (double)u[d] * u[d];
    }
    double inv = n2 > 0.0 ? 1.0 / sqrt(n2) : 0.0;
    for (int64_t d = 0; d < D; d++) {
        u[d] = (float)(u[d] * inv);
    }
}

void *demo_to_dtype(const float *x, int64_t count, clkv_dtype dtype) {
    void *h = malloc((size_t)(count > 0 ? count : 1) * clkv_dtype_size(dtype));
    if (h) {
        for (int64_t i = 0; i < count; i++) {
            tool_store(h, dtype, (size_t)i, x[i]);
        }
    }
    return h;
}

clkv_status demo_upload(clkv_context *ctx, const char *name, const float *x, int64_t count,
                        clkv_dtype dtype, cl_mem *out) {
    void *h = demo_to_dtype(x, count, dtype);
    if (!h) {
        return clkv__fail(ctx, CLKV_ERR_OUT_OF_HOST_MEMORY, "%s: out of host memory", name);
    }
    size_t bytes = (size_t)count * clkv_dtype_size(dtype);
    clkv_status st = tool_buffer(ctx, name, bytes, out);
    if (st == CLKV_OK) {
        st = tool_write(ctx, *out, h, bytes);
    }
    free(h);
    return st;
}

void demo_problem_free(demo_problem *p) {
    free(p->k);
    free(p->v);
    free(p->u0);
    free(p->u1);
    free(p->needles);
    tool_release(&p->dk);
    tool_release(&p->dv);
    tool_release(&p->dlen);
    memset(p, 0, sizeof *p);
}

clkv_status demo_problem_create(clkv_context *ctx, const demo_problem_spec *spec, demo_problem *p) {
    memset(p, 0, sizeof *p);
    for (int64_t b = 0; b < spec->B; b++) {
        if (spec->lengths[b] < 1 || spec->lengths[b] > spec->L ||
            spec->lengths[b] < spec->needles) {
            return clkv__fail(ctx, CLKV_ERR_ARG_RANGE,
                              "demo problem: lengths[%lld] = %d outside [max(1, needles), L]",
                              (long long)b, spec->lengths[b]);
        }
    }
    p->s = *spec;
    const int64_t B = spec->B, Hkv = spec->Hkv, L = spec->L, D = spec->D;
    p->G = spec->Hq / spec->Hkv;
    const int64_t kv = B * Hkv * L * D, nn = spec->needles > 0 ? spec->needles : 1;
    p->k = malloc((size_t)kv * sizeof(float));
    p->v = malloc((size_t)kv * sizeof(float));
    p->u0 = malloc((size_t)(B * Hkv * D) * sizeof(float));
    p->u1 = malloc((size_t)(B * Hkv * D) * sizeof(float));
    p->needles = malloc((size_t)(B * Hkv * nn) * sizeof(int32_t));
    if (!p->k || !p->v || !p->u0 || !p->u1 || !p->needles) {
        demo_problem_free(p);
        return clkv__fail(ctx, CLKV_ERR_OUT_OF_HOST_MEMORY, "demo problem: out of host memory");
    }
    const uint32_t seed = spec->seed;
    for (int64_t i = 0; i < kv; i++) {
        p->k[i] = tool_round_to(spec->dtype, tool_rand_value((uint64_t)i, seed + 1u, 1.0f));
        p->v[i] = tool_round_to(spec->dtype, tool_rand_value((uint64_t)i, seed + 2u, 1.0f));
    }
    for (int64_t bh = 0; bh < B * Hkv; bh++) {
        unit_vector(p->u0 + bh * D, D, (uint64_t)bh * (uint64_t)D, seed + 3u);
        unit_vector(p->u1 + bh * D, D, (uint64_t)bh * (uint64_t)D, seed + 4u);
        const int64_t b = bh / Hkv, n = spec->lengths[b];
        for (int32_t j = 0; j < spec->needles; j++) {
            /* One needle in each of `needles` equal strides of the sequence, near its
             * middle: distinct and ascending. */
            const int64_t stride = n / spec->needles, half = stride / 2 > 0 ? stride / 2 : 1;
            const int64_t pos = j * stride + stride / 2 + ((bh * 7 + j) % 5) % half;
            p->needles[bh * spec->needles + j] = (int32_t)pos;
            const float *u = (j % 2 == 0 ? p->u0 : p->u1) + bh * D;
            float *row = p->k + (bh * L + pos) * D;
            for (int64_t d = 0; d < D; d++) {
                row[d] = tool_round_to(
                    spec->dtype, spec->needle_gain * u[d] +
                                     0.05f * tool_rand_value((uint64_t)((bh * L + pos) * D + d),
                                                             seed + 5u, 1.0f));
            }
        }
    }
    clkv_status st = demo_upload(ctx, "demo K", p->k, kv, spec->dtype, &p->dk);
    if (st == CLKV_OK) {
        st = demo_upload(ctx, "demo V", p->v, kv, spec->dtype, &p->dv);
    }
    if (st == CLKV_OK) {
        st = tool_buffer(ctx, "demo lengths", (uint64_t)B * sizeof(int32_t), &p->dlen);
    }
    if (st == CLKV_OK) {
        st = tool_write(ctx, p->dlen, spec->lengths, (size_t)B * sizeof(int32_t));
    }
    if (st != CLKV_OK) {
        demo_problem_free(p);
    }
    return st;
}

void demo_problem_query(const demo_problem *p, int step, double angle, float *q) {
    const int64_t D = p->s.D, Hq = p->s.Hq;
    const double c = cos(angle), sn = sin(angle);
    for (int64_t b = 0; b < p->s.B; b++) {
        for (int64_t h = 0; h < Hq; h++) {
            const int64_t bh = b * p->s.Hkv + h / p->G;
            for (int64_t d = 0; d < D; d++) {
                const uint64_t idx = (uint64_t)(((int64_t)step * p->s.B * Hq + b * Hq + h) * D + d);
                const double topic = c * p->u0[bh * D + d] + sn * p->u1[bh * D + d];
                const float x =
                    (float)(p->s.query_gain * topic) + tool_rand_value(idx, p->s.seed + 6u, 1.0f);
                q[(b * Hq + h) * D + d] = tool_round_to(p->s.dtype, x);
            }
        }
    }
}

float *demo_problem_queries(const demo_problem *p, int64_t rows, int first_step) {
    const int64_t B = p->s.B, Hq = p->s.Hq, D = p->s.D;
    float *w = malloc((size_t)(B * Hq * rows * D) * sizeof(float));
    float *one = malloc((size_t)(B * Hq * D) * sizeof(float));
    if (!w || !one) {
        free(w);
        free(one);
        return NULL;
    }
    for (int64_t t = 0; t < rows; t++) {
        demo_problem_query(p, (int)(first_step + t),
                           1.5707963 * (double)t / (double)(rows - 1 + !rows), one);
        for (int64_t bh = 0; bh < B * Hq; bh++) {
            memcpy(w + (bh * rows + t) * D, one + bh * D, (size_t)D * sizeof(float));
        }
    }
    free(one);
    return w;
}

void demo_ref_attention(const demo_problem *p, const float *q, const int32_t *pos, int64_t P,
                        const int32_t *n, double *o, double *lse) {
    const int64_t D = p->s.D, L = p->s.L, Hkv = p->s.Hkv, G = p->G;
    float *k = malloc((size_t)((pos ? P : 1) * D) * sizeof(float));
    float *v = malloc((size_t)((pos ? P : 1) * D) * sizeof(float));
    double *l = malloc((size_t)G * sizeof(double));
    if (!k || !v || !l) {
        for (int64_t i = 0; i < p->s.B * p->s.Hq * D; i++) {
            o[i] = NAN;
        }
        free(k);
        free(v);
        free(l);
        return;
    }
    const double scale = 1.0 / sqrt((double)D);
    for (int64_t b = 0; b < p->s.B; b++) {
        for (int64_t h = 0; h < Hkv; h++) {
            const int64_t bh = b * Hkv + h;
            const float *qg = q + (b * p->s.Hq + h * G) * D;
            double *og = o + (b * p->s.Hq + h * G) * D;
            if (!pos) {
                tool_ref_decode_group(qg, p->k + bh * L * D, p->v + bh * L * D, p->s.lengths[b], D,
                                      D, (int)G, scale, og, l);
            } else {
                const int64_t m = n[bh];
                for (int64_t i = 0; i < m; i++) {
                    memcpy(k + i * D, p->k + (bh * L + pos[bh * P + i]) * D,
                           (size_t)D * sizeof(float));
                    memcpy(v + i * D, p->v + (bh * L + pos[bh * P + i]) * D,
                           (size_t)D * sizeof(float));
                }
                tool_ref_decode_group(qg, k, v, m, D, D, (int)G, scale, og, l);
            }
            if (lse) {
                for (int64_t g = 0; g < G; g++) {
                    lse[b * p->s.Hq + h * G + g] = l[g];
                }
            }
        }
    }
    free(k);
    free(v);
    free(l);
}

double demo_rel_err(const void *x, clkv_dtype dtype, const double *ref, int64_t count) {
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < count; i++) {
        const double e = (double)tool_load(x, dtype, (size_t)i) - ref[i];
        num += e * e;
        den += ref[i] * ref[i];
    }
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

/* ---- timing ---- */

#define DEMO_MAX_REPEATS 64

static clkv_status demo_batch(clkv_context *ctx, demo_call f, void *arg, int n, double *per) {
    const double t0 = tool_now();
    clkv_status st = CLKV_OK;
    for (int i = 0; i < n && st == CLKV_OK; i++) {
        st = f(arg);
    }
    if (st == CLKV_OK) {
        st = clkv_context_finish(ctx);
    }
    *per = (tool_now() - t0) / (n > 0 ? n : 1);
    return st;
}

clkv_status demo_time(clkv_context *ctx, demo_call f, void *arg, int iters, int repeats,
                      double *median_s) {
    double per[DEMO_MAX_REPEATS], first;
    repeats = repeats < 1 ? 1 : (repeats > DEMO_MAX_REPEATS ? DEMO_MAX_REPEATS : repeats);
    clkv_status st = demo_batch(ctx, f, arg, 1, &first);
    for (int r = 0; r < repeats && st == CLKV_OK; r++) {
        st = demo_batch(ctx, f, arg, iters, &per[r]);
    }
    *median_s = st == CLKV_OK ? tool_median(per, repeats) : NAN;
    return st;
}

/* Elements of a tensor (product of its dims). */
static int64_t tensor_count(const clkv_tensor *t) {
    int64_t count = 1;
    for (int i = 0; i < t->ndim; i++) {
        count *= t->dims[i];
    }
    return count;
}

void *demo_read_tensor(clkv_context *ctx, const clkv_tensor *t, clkv_status *st) {
    const int64_t count = tensor_count(t);
    const size_t bytes = (size_t)(count > 0 ? count : 1) * clkv_dtype_size(t->dtype);
    void *h = malloc(bytes);
    if (!h) {
        *st = clkv__fail(ctx, CLKV_ERR_OUT_OF_HOST_MEMORY, "demo read: out of host memory");
        return NULL;
    }
    cl_int err = count > 0 ? clEnqueueReadBuffer(clkv_context_queue(ctx), t->buf, CL_TRUE,
                                                 (size_t)t->offset, bytes, h, 0, NULL, NULL)
                           : CL_SUCCESS;
    if (err != CL_SUCCESS) {
        *st = clkv__fail_cl(ctx, err, "clEnqueueReadBuffer");
        free(h);
        return NULL;
    }
    *st = CLKV_OK;
    return h;
}

/* ---- step helpers (demo_util.h) ---- */

void demo_row_shape(demo_row *row, const demo_problem *p, const char *key, const char *suffix) {
    snprintf(row->shape, sizeof row->shape, "B=%lld Hq=%lld Hkv=%lld D=%lld %s={%d,%d}%s",
             (long long)p->s.B, (long long)p->s.Hq, (long long)p->s.Hkv, (long long)p->s.D, key,
             p->s.lengths[0], p->s.B > 1 ? p->s.lengths[1] : 0, suffix);
}

void demo_row_result(demo_row *row, double us_per_call, double max_err, int pass) {
    row->us_per_call = us_per_call;
    row->gbps = NAN;
    row->pct_bw = NAN;
    row->max_err = max_err;
    row->max_lse_err = NAN;
    row->pass = pass;
}

int64_t demo_problem_max_length(const demo_problem *p, int64_t *total) {
    int64_t mx = 0, sum = 0;
    for (int64_t b = 0; b < p->s.B; b++) {
        mx = p->s.lengths[b] > mx ? p->s.lengths[b] : mx;
        sum += p->s.lengths[b];
    }
    if (total) {
        *total = sum;
    }
    return mx;
}

float *demo_problem_followups(const demo_problem *p, int64_t F, int first_step) {
    const int64_t qn = p->s.B * p->s.Hq * p->s.D;
    float *q = malloc((size_t)((F > 0 ? F : 1) * qn) * sizeof(float));
    for (int64_t f = 0; q && f < F; f++) {
        demo_problem_query(p, (int)(first_step + f), 1.5707963 * (double)(f + 1) / (double)(F + 1),
                           q + f * qn);
    }
    return q;
}

void demo_ref_attention_kv(const demo_problem *p, float *k, float *v, const int32_t *lengths,
                           const float *q, double *o) {
    demo_problem t = *p;
    t.k = k;
    t.v = v;
    if (lengths) {
        memcpy(t.s.lengths, lengths, (size_t)t.s.B * sizeof(int32_t));
    }
    demo_ref_attention(&t, q, NULL, 0, NULL, o, NULL);
}

void demo_compare(tool_compare *c, const void *x, clkv_dtype dtype, const double *ref,
                  int64_t count) {
    for (int64_t i = 0; i < count; i++) {
        tool_compare_value(c, tool_load(x, dtype, (size_t)i), ref[i]);
    }
}

int demo_list_valid(const int32_t *li, int64_t c, int64_t n) {
    int ok = 1;
    for (int64_t i = 0; i < c; i++) {
        ok &= li[i] >= 0 && li[i] < n && (i == 0 || li[i] > li[i - 1]);
    }
    return ok;
}

int64_t demo_needles_kept(const demo_problem *p, int64_t bh, const int32_t *li, int64_t c) {
    int64_t kept = 0;
    for (int32_t j = 0; j < p->s.needles; j++) {
        const int32_t pos = p->needles[bh * p->s.needles + j];
        for (int64_t i = 0; i < c; i++) {
            kept += li[i] == pos;
        }
    }
    return kept;
}

clkv_status demo_buffers(clkv_context *ctx, const demo_buffer *list, size_t n) {
    clkv_status st = CLKV_OK;
    for (size_t i = 0; i < n && st == CLKV_OK; i++) {
        const demo_buffer *e = &list[i];
        st = e->host ? demo_upload(ctx, e->name, e->host, e->count, e->dtype, e->out)
                     : tool_buffer(ctx, e->name, (uint64_t)e->count * clkv_dtype_size(e->dtype),
                                   e->out);
    }
    return st;
}

void demo_buffers_release(const demo_buffer *list, size_t n) {
    for (size_t i = 0; i < n; i++) {
        tool_release(list[i].out);
    }
}

clkv_status demo_call_quant_decode(void *arg) {
    demo_quant_call *c = arg;
    return clkv_attention_quant_decode(c->cache, &c->a, NULL);
}

uint64_t demo_quant_cache_bytes(const clkv_quant_cache *cache) {
    clkv_quant_cache_view w;
    if (clkv_quant_cache_view_get(cache, &w) != CLKV_OK) {
        return 0;
    }
    const clkv_tensor *ts[8] = {&w.k_codes, &w.k_scale, &w.k_min, &w.v_codes,
                                &w.v_scale, &w.v_min,   &w.k_res, &w.v_res};
    uint64_t bytes = 0;
    for (int i = 0; i < 8; i++) {
        bytes += (uint64_t)tensor_count(ts[i]) * clkv_dtype_size(ts[i]->dtype);
    }
    return bytes;
}
