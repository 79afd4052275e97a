/* Decode-attention problems for the tool: buffers, arguments, timing, checks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "decode_setup.h"
#include "reference.h"
#include "runtime/internal.h"
#include "tool_data.h"

int64_t tool_decode_q_elems(const tool_decode_shape *s) {
    return s->B * s->Hq * s->D;
}

int64_t tool_decode_kv_elems(const tool_decode_shape *s) {
    return s->B * s->Hkv * s->L * s->D;
}

uint64_t tool_decode_kv_bytes_read(const tool_decode_shape *s, const int32_t *lengths) {
    uint64_t tokens = 0;
    for (int64_t b = 0; b < s->B; b++) {
        tokens += (uint64_t)(lengths[b] < s->L ? lengths[b] : s->L);
    }
    return tokens * (uint64_t)s->Hkv * (uint64_t)s->D * 2u * clkv_dtype_size(s->kv_dtype);
}

int64_t tool_decode_kv_index(const tool_decode_shape *s, int64_t b, int64_t h, int64_t j,
                             int64_t d) {
    if (s->nhd) {
        return ((b * s->L + j) * s->Hkv + h) * s->D + d;
    }
    return ((b * s->Hkv + h) * s->L + j) * s->D + d;
}

clkv_status tool_decode_alloc(clkv_context *ctx, const tool_decode_shape *s, int with_lse,
                              tool_decode_bufs *b) {
    b->q = b->k = b->v = b->o = b->lse = b->lengths = NULL;
    uint64_t qb = (uint64_t)tool_decode_q_elems(s) * clkv_dtype_size(s->q_dtype);
    uint64_t kvb = (uint64_t)tool_decode_kv_elems(s) * clkv_dtype_size(s->kv_dtype);
    uint64_t ob = (uint64_t)tool_decode_q_elems(s) * clkv_dtype_size(s->o_dtype);
    clkv_status st = tool_buffer(ctx, "q", qb, &b->q);
    if (st == CLKV_OK) {
        st = tool_buffer(ctx, "k", kvb, &b->k);
    }
    if (st == CLKV_OK) {
        st = tool_buffer(ctx, "v", kvb, &b->v);
    }
    if (st == CLKV_OK) {
        st = tool_buffer(ctx, "o", ob, &b->o);
    }
    if (st == CLKV_OK && with_lse) {
        st = tool_buffer(ctx, "lse", (uint64_t)(s->B * s->Hq) * sizeof(float), &b->lse);
    }
    if (st == CLKV_OK) {
        st = tool_buffer(ctx, "lengths", (uint64_t)s->B * sizeof(int32_t), &b->lengths);
    }
    if (st != CLKV_OK) {
        tool_decode_free(b);
    }
    return st;
}

void tool_decode_free(tool_decode_bufs *b) {
    tool_release(&b->q);
    tool_release(&b->k);
    tool_release(&b->v);
    tool_release(&b->o);
    tool_release(&b->lse);
    tool_release(&b->lengths);
}

clkv_status tool_decode_fill_device(clkv_context *ctx, const tool_decode_shape *s,
                                    const tool_decode_bufs *b, const int32_t *lengths) {
    clkv_status st = tool_fill_random(ctx, b->q, s->q_dtype, (uint64_t)tool_decode_q_elems(s),
                                      TOOL_SEED_Q, TOOL_SCALE_Q);
    if (st == CLKV_OK) {
        st = tool_fill_random(ctx, b->k, s->kv_dtype, (uint64_t)tool_decode_kv_elems(s),
                              TOOL_SEED_K, TOOL_SCALE_KV);
    }
    if (st == CLKV_OK) {
        st = tool_fill_random(ctx, b->v, s->kv_dtype, (uint64_t)tool_decode_kv_elems(s),
                              TOOL_SEED_V, TOOL_SCALE_KV);
    }
    if (st == CLKV_OK) {
        st = tool_write(ctx, b->lengths, lengths, (size_t)s->B * sizeof(int32_t));
    }
    if (st == CLKV_OK) {
        st = clkv_context_finish(ctx);
    }
    return st;
}

void tool_decode_args(const tool_decode_shape *s, const tool_decode_bufs *b, int64_t max_length,
                      int32_t num_splits, clkv_attention_decode_args *a) {
    clkv_attention_decode_args init = CLKV_ATTENTION_DECODE_ARGS_INIT;
    *a = init;
    a->q = clkv_tensor_3d(b->q, s->q_dtype, s->B, s->Hq, s->D);
    if (s->nhd) {
        a->k = clkv_tensor_4d_nhd(b->k, s->kv_dtype, s->B, s->Hkv, s->L, s->D);
        a->v = clkv_tensor_4d_nhd(b->v, s->kv_dtype, s->B, s->Hkv, s->L, s->D);
    } else {
        a->k = clkv_tensor_4d(b->k, s->kv_dtype, s->B, s->Hkv, s->L, s->D);
        a->v = clkv_tensor_4d(b->v, s->kv_dtype, s->B, s->Hkv, s->L, s->D);
    }
    a->lengths = clkv_tensor_1d(b->lengths, CLKV_I32, s->B);
    a->o = clkv_tensor_3d(b->o, s->o_dtype, s->B, s->Hq, s->D);
    a->lse = b->lse ? clkv_tensor_2d(b->lse, CLKV_F32, s->B, s->Hq) : clkv_tensor_none();
    a->max_length = max_length;
    a->num_splits = num_splits;
}

static clkv_status call_decode(clkv_context *ctx, const void *arg) {
    return clkv_attention_decode(ctx, (const clkv_attention_decode_args *)arg, NULL);
}

clkv_status tool_decode_time(clkv_context *ctx, const clkv_attention_decode_args *a, int warmup,
                             int iters, int repeats, const char *label, tool_timing *t) {
    return bench_time_call(ctx, call_decode, a, iters, repeats, warmup, label, t);
}

/* Host copy of one (b, kv head) problem regenerated from the seeds. */
static void gen_rows(const tool_decode_shape *s, int64_t b, int64_t h, int64_t n, uint32_t seed,
                     float *rows) {
    for (int64_t j = 0; j < n; j++) {
        for (int64_t d = 0; d < s->D; d++) {
            int64_t idx = tool_decode_kv_index(s, b, h, j, d);
            rows[j * s->D + d] =
                tool_round_to(s->kv_dtype, tool_rand_value((uint64_t)idx, seed, TOOL_SCALE_KV));
        }
    }
}

clkv_status tool_decode_check(clkv_context *ctx, const tool_decode_shape *s,
                              const tool_decode_bufs *b, const int32_t *lengths,
                              const int64_t *b_list, int nb, const int64_t *kvh_list, int nkvh,
                              tool_compare *c) {
    int64_t G = s->Hq / s->Hkv;
    size_t q_elems = (size_t)tool_decode_q_elems(s);
    size_t o_bytes = q_elems * clkv_dtype_size(s->o_dtype);
    int64_t maxn = 0;
    for (int i = 0; i < nb; i++) {
        int64_t n = lengths[b_list[i]] < s->L ? lengths[b_list[i]] : s->L;
        maxn = n > maxn ? n : maxn;
    }
    void *o_host = malloc(o_bytes);
    float *lse_host = malloc((size_t)(s->B * s->Hq) * sizeof(float));
    float *q = malloc((size_t)(G * s->D) * sizeof(float));
    float *k = malloc((size_t)((maxn > 0 ? maxn : 1) * s->D) * sizeof(float));
    float *v = malloc((size_t)((maxn > 0 ? maxn : 1) * s->D) * sizeof(float));
    double *ref_o = malloc((size_t)(G * s->D) * sizeof(double));
    double *ref_lse = malloc((size_t)G * sizeof(double));
    clkv_status st = CLKV_OK;
    if (!o_host || !lse_host || !q || !k || !v || !ref_o || !ref_lse) {
        st = clkv__fail(ctx, CLKV_ERR_OUT_OF_HOST_MEMORY, "check: out of host memory");
    }
    if (st == CLKV_OK) {
        st = tool_read(ctx, b->o, o_host, o_bytes);
    }
    if (st == CLKV_OK && b->lse) {
        st = tool_read(ctx, b->lse, lse_host, (size_t)(s->B * s->Hq) * sizeof(float));
    }
    double scale = 1.0 / sqrt((double)s->D);
    for (int ib = 0; ib < nb && st == CLKV_OK; ib++) {
        int64_t bb = b_list[ib];
        int64_t n = lengths[bb] < s->L ? lengths[bb] : s->L;
        for (int ih = 0; ih < nkvh; ih++) {
            int64_t h = kvh_list[ih];
            for (int64_t g = 0; g < G; g++) {
                for (int64_t d = 0; d < s->D; d++) {
                    int64_t idx = ((bb * s->Hq) + h * G + g) * s->D + d;
                    q[g * s->D + d] = tool_round_to(
                        s->q_dtype, tool_rand_value((uint64_t)idx, TOOL_SEED_Q, TOOL_SCALE_Q));
                }
            }
            gen_rows(s, bb, h, n, TOOL_SEED_K, k);
            gen_rows(s, bb, h, n, TOOL_SEED_V, v);
            tool_ref_decode_group(q, k, v, n, s->D, s->D, (int)G, scale, ref_o, ref_lse);
            for (int64_t g = 0; g < G; g++) {
                int64_t row = bb * s->Hq + h * G + g;
                for (int64_t d = 0; d < s->D; d++) {
                    double x = tool_load(o_host, s->o_dtype, (size_t)(row * s->D + d));
                    tool_compare_value(c, x, ref_o[g * s->D + d]);
                }
                if (b->lse) {
                    tool_compare_lse(c, lse_host[row], ref_lse[g]);
                }
            }
        }
    }
    free(o_host);
    free(lse_host);
    free(q);
    free(k);
    free(v);
    free(ref_o);
    free(ref_lse);
    return st;
}
