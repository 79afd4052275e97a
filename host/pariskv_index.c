/* ParisKV retrieval index (SPEC §4 "Decode"): the per-layer state object, prefill (bulk
 * encoding of the zones), the incremental flush of the update buffer into the zone,
 * index search, and the decode step (dense or sparse attention).
 *
 * Bookkeeping (all on the host, so the decode loop never reads device memory):
 *   tail    the dense tail (local window + update buffer) length, the same for every
 *           sequence: `local` after prefill, +1 per step, back to `local` when it reaches
 *           local + update (a flush);
 *   n_b     = max(0, len_b - sink - tail): the zone of sequence b, [sink, sink + n_b).
 * So at every step the sparse attention's dense ranges are the first `sink` and the
 * last `tail` tokens of every sequence, and a sequence without a zone is covered by them
 * entirely.
 *
 * Host-resident zone (cfg->kv_store): zone rows are copied into the store (store row =
 * token position) as they enter the zone (prefill, flush), in the same launch sequence
 * as their encoding; a sparse step gathers the rows of the retrieved positions from the
 * store into k_sel / v_sel [B, Hkv, top_k, D] (index-owned device buffers) and the sparse
 * attention reads the idx entries from there (clkv_attention_sparse_args.k_sel). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host/offload_internal.h"
#include "host/pariskv_internal.h"
#include "host/pariskv_retrieve_internal.h"

struct clkv_pariskv_index {
    int64_t B, Hq, Hkv, D, L, nblk;
    int32_t m;
    int8_t signs[256];
    cl_uint8 sign_bits; /* signs as the kernels' bit mask (pkv_rank's query transform) */
    clkv_pariskv_levels levels;
    clkv_dtype wdt;
    int64_t sink, local, update, top_k, dense_min;
    double beta, rho;

    cl_mem ids, codes, weights, counts, plan, q_rot, q_norm, idx, ends;
    clkv_offload_store *store; /* borrowed, or NULL */
    cl_mem k_sel, v_sel;       /* store: gathered rows [B, Hkv, max(top_k, 1), D] */
    cl_mem part;               /* partial states of the fused sparse step (grown on demand) */
    size_t part_bytes;
    int64_t *len;  /* host lengths */
    int64_t *zone; /* host zone lengths */
    int64_t *old;  /* scratch: zone lengths before a flush */
    int32_t *plan_host, *ends_host;
    cl_event plan_evt; /* the last non-blocking write from plan_host / ends_host */
    int64_t tail, max_cand;
    int prefilled;
};

static int64_t dense_threshold(const clkv_pariskv_index *x) {
    const int64_t t = x->sink + x->local + 2 * x->top_k;
    return t > x->dense_min ? t : x->dense_min;
}

static clkv_tensor t4(cl_mem buf, clkv_dtype dt, int64_t a, int64_t b, int64_t c, int64_t d) {
    return clkv_tensor_4d(buf, dt, a, b, c, d);
}

void clkv_pariskv_index_destroy(clkv_pariskv_index *x) {
    if (!x)
        return;
    if (x->plan_evt) {
        clWaitForEvents(1, &x->plan_evt);
        clReleaseEvent(x->plan_evt);
    }
    cl_mem *bufs[] = {&x->ids,    &x->codes, &x->weights, &x->counts, &x->plan,  &x->q_rot,
                      &x->q_norm, &x->idx,   &x->ends,    &x->k_sel,  &x->v_sel, &x->part};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (*bufs[i])
            clReleaseMemObject(*bufs[i]);
    free(x->len);
    free(x->zone);
    free(x->old);
    free(x->plan_host);
    free(x->ends_host);
    free(x);
}

static clkv_status validate_config(clkv_context *ctx, const clkv_pariskv_index_config *c) {
    if (c->batch < 1 || c->batch > 65535)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "batch: %lld is outside [1, 65535]",
                          (long long)c->batch);
    if (c->kv_heads < 1 || c->kv_heads > 65535 || c->q_heads < 1 || c->q_heads > 65535)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE,
                          "kv_heads: q_heads = %lld, kv_heads = %lld must be in [1, 65535]",
                          (long long)c->q_heads, (long long)c->kv_heads);
    if (c->q_heads % c->kv_heads != 0)
        return clkv__fail(ctx, CLKV_ERR_ARG_SHAPE, "q_heads: %lld is not a multiple of %lld",
                          (long long)c->q_heads, (long long)c->kv_heads);
    if (c->head_dim != 64 && c->head_dim != 128 && c->head_dim != 256)
        return clkv__fail(ctx, CLKV_ERR_ARG_UNSUPPORTED, "head_dim: %lld, supported: 64, 128, 256",
                          (long long)c->head_dim);
    if (c->m < CLKV_PARISKV_MIN_M || c->m > CLKV_PARISKV_MAX_M || c->head_dim % c->m != 0)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "m: %d is outside [2, 8] or does not divide D",
                          (int)c->m);
    if (c->capacity < 1 || c->capacity > INT32_MAX)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "capacity: %lld is outside [1, 2^31-1]",
                          (long long)c->capacity);
    if (c->sink < 0 || c->local < 0 || c->top_k < 0 || c->top_k > INT32_MAX || c->update < 1 ||
        c->dense_min < 0 || c->sink > INT32_MAX || c->local > INT32_MAX || c->update > INT32_MAX)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE,
                          "update: sink = %lld, local = %lld, update = %lld, top_k = %lld, "
                          "dense_min = %lld out of range (>= 0, update >= 1)",
                          (long long)c->sink, (long long)c->local, (long long)c->update,
                          (long long)c->top_k, (long long)c->dense_min);
    if (c->weight_dtype != CLKV_F32 && c->weight_dtype != CLKV_F16 && c->weight_dtype != CLKV_BF16)
        return clkv__fail(ctx, CLKV_ERR_ARG_DTYPE, "weight_dtype: %s, expected f32, f16 or bf16",
                          clkv_dtype_name(c->weight_dtype));
    const int64_t one = 1;
    int32_t plan[8];
    if (clkv_pariskv_plan(&one, 1, c->top_k, c->beta, c->rho, plan, NULL) != CLKV_OK)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "%s", clkv_last_error(NULL));
    if (c->signs)
        for (int64_t j = 0; j < c->head_dim; j++)
            if (c->signs[j] != 1 && c->signs[j] != -1)
                return clkv__fail(ctx, CLKV_ERR_ARG_RANGE,
                                  "signs: signs[%lld] = %d is not +1 or -1", (long long)j,
                                  (int)c->signs[j]);
    if (c->levels && c->levels->m != c->m)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "levels: levels->m = %d differs from m = %d",
                          (int)c->levels->m, (int)c->m);
    const clkv_offload_store *s = c->kv_store;
    if (s) {
        if (s->ctx != ctx)
            return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "kv_store: created on another context");
        if (s->B != c->batch || s->Hkv != c->kv_heads || s->D != c->head_dim)
            return clkv__fail(ctx, CLKV_ERR_ARG_SHAPE,
                              "kv_store: B = %lld, Hkv = %lld, D = %lld differ from the index's "
                              "%lld, %lld, %lld",
                              (long long)s->B, (long long)s->Hkv, (long long)s->D,
                              (long long)c->batch, (long long)c->kv_heads, (long long)c->head_dim);
        if (s->cap < c->capacity)
            return clkv__fail(ctx, CLKV_ERR_ARG_RANGE,
                              "kv_store: capacity %lld is smaller than the index capacity %lld",
                              (long long)s->cap, (long long)c->capacity);
    }
    return CLKV_OK;
}

clkv_status clkv_pariskv_index_create(clkv_context *ctx, const clkv_pariskv_index_config *cfg,
                                      clkv_pariskv_index **out) {
    if (out)
        *out = NULL;
    if (!ctx)
        return clkv__fail(NULL, CLKV_ERR_ARG_NULL, "ctx: context is NULL");
    if (!cfg)
        return clkv__fail(ctx, CLKV_ERR_ARG_NULL, "cfg: config is NULL");
    if (!out)
        return clkv__fail(ctx, CLKV_ERR_ARG_NULL, "out: output pointer is NULL");
    clkv_status st = validate_config(ctx, cfg);
    if (st != CLKV_OK)
        return st;
    clkv_pariskv_index *x = (clkv_pariskv_index *)calloc(1, sizeof *x);
    if (!x)
        return clkv__fail(ctx, CLKV_ERR_OUT_OF_HOST_MEMORY, "index: out of host memory");
    x->B = cfg->batch;
    x->Hq = cfg->q_heads;
    x->Hkv = cfg->kv_heads;
    x->D = cfg->head_dim;
    x->L = cfg->capacity;
    x->m = cfg->m;
    x->nblk = x->D / x->m;
    x->wdt = cfg->weight_dtype;
    x->sink = cfg->sink;
    x->local = cfg->local;
    x->update = cfg->update;
    x->top_k = cfg->top_k;
    x->dense_min = cfg->dense_min;
    x->beta = cfg->beta;
    x->rho = cfg->rho;
    x->tail = x->local;
    if (cfg->signs)
        memcpy(x->signs, cfg->signs, (size_t)x->D);
    else
        clkv_pariskv_signs_from_seed(cfg->seed, x->D, x->signs);
    if ((st = clkv__pariskv_pack_signs(ctx, x->signs, 0, x->D, &x->sign_bits))) {
        clkv_pariskv_index_destroy(x);
        return st;
    }
    if (cfg->levels)
        x->levels = *cfg->levels;
    else if ((st = clkv_pariskv_levels_default(x->m, cfg->computed_m8, &x->levels))) {
        clkv_pariskv_index_destroy(x);
        return clkv__fail(ctx, st, "levels: %s", clkv_last_error(NULL));
    }
    x->len = (int64_t *)calloc((size_t)x->B, sizeof(int64_t));
    x->zone = (int64_t *)calloc((size_t)x->B, sizeof(int64_t));
    x->old = (int64_t *)calloc((size_t)x->B, sizeof(int64_t));
    x->plan_host = (int32_t *)calloc((size_t)(8 * x->B), sizeof(int32_t));
    x->ends_host = (int32_t *)calloc((size_t)x->B, sizeof(int32_t));
    if (!x->len || !x->zone || !x->old || !x->plan_host || !x->ends_host) {
        clkv_pariskv_index_destroy(x);
        return clkv__fail(ctx, CLKV_ERR_OUT_OF_HOST_MEMORY, "index: out of host memory");
    }
    x->store = cfg->kv_store;
    const size_t rows = (size_t)(x->B * x->Hkv);
    const size_t kk = (size_t)(x->top_k > 0 ? x->top_k : 1);
    const size_t sel_bytes =
        x->store ? rows * kk * (size_t)x->D * clkv_dtype_size(x->store->dtype) : 0;
    const size_t sizes[11] = {rows * (size_t)(x->L * x->nblk),
                              rows * (size_t)(x->L * x->D / 2),
                              rows * (size_t)(x->L * x->nblk) * clkv_dtype_size(x->wdt),
                              rows * (size_t)(x->nblk << x->m) * 4,
                              (size_t)(8 * x->B) * 4,
                              rows * (size_t)x->D * 4,
                              rows * 4,
                              rows * kk * 4,
                              (size_t)x->B * 4,
                              sel_bytes,
                              sel_bytes};
    cl_mem *bufs[11] = {&x->ids,    &x->codes, &x->weights, &x->counts, &x->plan, &x->q_rot,
                        &x->q_norm, &x->idx,   &x->ends,    &x->k_sel,  &x->v_sel};
    for (int i = 0; i < 11; i++) {
        cl_int err;
        if (sizes[i] == 0)
            continue;
        *bufs[i] =
            clCreateBuffer(clkv_context_cl_context(ctx), CL_MEM_READ_WRITE, sizes[i], NULL, &err);
        if (err != CL_SUCCESS) {
            clkv_pariskv_index_destroy(x);
            return clkv__fail_cl(ctx, err, "index: clCreateBuffer");
        }
    }
    *out = x;
    return CLKV_OK;
}

int64_t clkv_pariskv_index_length(const clkv_pariskv_index *x, int64_t b) {
    return x && b >= 0 && b < x->B ? x->len[b] : -1;
}

int64_t clkv_pariskv_index_zone_length(const clkv_pariskv_index *x, int64_t b) {
    return x && b >= 0 && b < x->B ? x->zone[b] : -1;
}

int clkv_pariskv_index_next_is_sparse(const clkv_pariskv_index *x) {
    if (!x)
        return -1;
    int64_t mx = 0;
    for (int64_t b = 0; b < x->B; b++)
        mx = x->len[b] + 1 > mx ? x->len[b] + 1 : mx;
    return mx >= dense_threshold(x);
}

/* Plan (and, for prefill, zone ends) to the device: non-blocking writes from host arrays
 * that are not touched again before the previous write completed. */
static clkv_status upload_plan(clkv_context *ctx, clkv_pariskv_index *x, int with_ends) {
    if (x->plan_evt) { /* long complete in a decode loop (`update` steps ago) */
        clFlush(clkv_context_queue(ctx));
        clWaitForEvents(1, &x->plan_evt);
        clReleaseEvent(x->plan_evt);
        x->plan_evt = NULL;
    }
    clkv_status st =
        clkv_pariskv_plan(x->zone, x->B, x->top_k, x->beta, x->rho, x->plan_host, &x->max_cand);
    if (st != CLKV_OK)
        return clkv__fail(ctx, st, "plan: %s", clkv_last_error(NULL));
    cl_int err;
    if (with_ends) {
        for (int64_t b = 0; b < x->B; b++)
            x->ends_host[b] = (int32_t)(x->sink + x->zone[b]);
        err = clEnqueueWriteBuffer(clkv_context_queue(ctx), x->ends, CL_FALSE, 0, (size_t)x->B * 4,
                                   x->ends_host, 0, NULL, NULL);
        if (err != CL_SUCCESS)
            return clkv__fail_cl(ctx, err, "index: write of the zone ends");
    }
    err = clEnqueueWriteBuffer(clkv_context_queue(ctx), x->plan, CL_FALSE, 0,
                               (size_t)(8 * x->B) * 4, x->plan_host, 0, NULL, &x->plan_evt);
    if (err != CL_SUCCESS)
        return clkv__fail_cl(ctx, err, "index: write of the plan");
    return CLKV_OK;
}

/* Encoder arguments over the index storage for sequences [b0, b0 + nb) of k. */
static clkv_pariskv_encode_args encode_args(const clkv_pariskv_index *x, const clkv_tensor *k,
                                            int64_t b0, int64_t nb) {
    clkv_pariskv_encode_args a = CLKV_PARISKV_ENCODE_ARGS_INIT;
    a.k = *k;
    a.ids = t4(x->ids, CLKV_U8, x->B, x->Hkv, x->L, x->nblk);
    a.codes = t4(x->codes, CLKV_U8, x->B, x->Hkv, x->L, x->D / 2);
    a.weights = t4(x->weights, x->wdt, x->B, x->Hkv, x->L, x->nblk);
    a.counts = t4(x->counts, CLKV_U32, x->B, x->Hkv, x->nblk, (int64_t)1 << x->m);
    clkv_tensor *ts[5] = {&a.k, &a.ids, &a.codes, &a.weights, &a.counts};
    for (int i = 0; i < 5; i++) {
        ts[i]->offset += (uint64_t)(b0 * ts[i]->strides[0]) * clkv_dtype_size(ts[i]->dtype);
        ts[i]->dims[0] = nb;
    }
    a.m = x->m;
    a.signs = x->signs;
    a.levels = &x->levels;
    return a;
}

static clkv_status check_k(clkv_context *ctx, const clkv_pariskv_index *x, const clkv_tensor *k,
                           const char *name) {
    clkv_status st;
    if ((st = clkv__check_tensor(ctx, k, name, 4, CLKV_FLOAT_DTYPES)) ||
        (st = clkv__check_dim(ctx, k, name, 0, x->B, "index batch")) ||
        (st = clkv__check_dim(ctx, k, name, 1, x->Hkv, "index KV heads")) ||
        (st = clkv__check_dim(ctx, k, name, 2, x->L, "index capacity")) ||
        (st = clkv__check_dim(ctx, k, name, 3, x->D, "index head dim")))
        return st;
    return CLKV_OK;
}

/* With a store, k and v must have its dtype. */
static clkv_status check_store_dtype(clkv_context *ctx, const clkv_pariskv_index *x,
                                     const clkv_tensor *t, const char *name) {
    if (x->store && t->dtype != x->store->dtype)
        return clkv__fail(ctx, CLKV_ERR_ARG_DTYPE, "%s: dtype %s differs from the kv_store's %s",
                          name, clkv_dtype_name(t->dtype), clkv_dtype_name(x->store->dtype));
    return CLKV_OK;
}

/* Copy the zone rows [sink + from[b], sink + x->zone[b]) of every sequence (from NULL:
 * the whole zone) of the cache k, v into the store: one batch-wide copy when every
 * sequence has the same range, else one per sequence with a non-empty range. */
static clkv_status store_zone_rows(clkv_context *ctx, clkv_pariskv_index *x, const clkv_tensor *k,
                                   const clkv_tensor *v, const int64_t *from) {
    int same = 1;
    for (int64_t b = 1; b < x->B; b++)
        same = same && x->zone[b] == x->zone[0] && (!from || from[b] == from[0]);
    for (int64_t b = 0; b < x->B; b++) {
        const int64_t f = from ? from[b] : 0, T = x->zone[b] - f;
        if (T <= 0) {
            if (same)
                break;
            continue;
        }
        const clkv_status st = clkv__offload_write_rows(ctx, x->store, k, v, b, same ? x->B : b + 1,
                                                        x->sink + f, T, x->sink + f, NULL);
        if (st != CLKV_OK || same)
            return st;
    }
    return CLKV_OK;
}

clkv_status clkv_pariskv_index_prefill(clkv_context *ctx, clkv_pariskv_index *x,
                                       const clkv_tensor *k, const int64_t *lengths) {
    if (!ctx)
        return clkv__fail(NULL, CLKV_ERR_ARG_NULL, "ctx: context is NULL");
    return clkv_pariskv_index_prefill_kv(ctx, x, k, NULL, lengths);
}

clkv_status clkv_pariskv_index_prefill_kv(clkv_context *ctx, clkv_pariskv_index *x,
                                          const clkv_tensor *k, const clkv_tensor *v,
                                          const int64_t *lengths) {
    if (!ctx)
        return clkv__fail(NULL, CLKV_ERR_ARG_NULL, "ctx: context is NULL");
    if (!x)
        return clkv__fail(ctx, CLKV_ERR_ARG_NULL, "index: index is NULL");
    if (!k)
        return clkv__fail(ctx, CLKV_ERR_ARG_NULL, "k: tensor pointer is NULL");
    if (!v && x->store)
        return clkv__fail(ctx, CLKV_ERR_ARG_NULL,
                          "v: the index has a kv_store, so prefill needs v "
                          "(clkv_pariskv_index_prefill_kv)");
    if (!lengths)
        return clkv__fail(ctx, CLKV_ERR_ARG_NULL, "lengths: host lengths pointer is NULL");
    clkv_status st = check_k(ctx, x, k, "k");
    if (st == CLKV_OK && v)
        st = check_k(ctx, x, v, "v");
    if (st == CLKV_OK)
        st = check_store_dtype(ctx, x, k, "k");
    if (st == CLKV_OK && v)
        st = check_store_dtype(ctx, x, v, "v");
    if (st != CLKV_OK)
        return st;
    for (int64_t b = 0; b < x->B; b++)
        if (lengths[b] < 0 || lengths[b] > x->L)
            return clkv__fail(ctx, CLKV_ERR_ARG_RANGE,
                              "lengths: lengths[%lld] = %lld is outside [0, capacity = %lld]",
                              (long long)b, (long long)lengths[b], (long long)x->L);
    int64_t nmax = 0;
    x->tail = x->local;
    for (int64_t b = 0; b < x->B; b++) {
        x->len[b] = lengths[b];
        const int64_t n = lengths[b] - x->sink - x->tail;
        x->zone[b] = n > 0 ? n : 0;
        nmax = x->zone[b] > nmax ? x->zone[b] : nmax;
    }
    const cl_uint zero = 0;
    cl_int err =
        clEnqueueFillBuffer(clkv_context_queue(ctx), x->counts, &zero, 4, 0,
                            (size_t)(x->B * x->Hkv * (x->nblk << x->m)) * 4, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return clkv__fail_cl(ctx, err, "index: clearing the counts");
    if ((st = upload_plan(ctx, x, 1)))
        return st;
    x->prefilled = 1;
    if (nmax == 0)
        return CLKV_OK;
    clkv_pariskv_encode_args a = encode_args(x, k, 0, x->B);
    a.lengths = clkv_tensor_1d(x->ends, CLKV_I32, x->B);
    a.start = x->sink;
    a.end = x->sink + nmax;
    if ((st = clkv_pariskv_encode(ctx, &a, NULL)))
        return st;
    return x->store ? store_zone_rows(ctx, x, k, v, NULL) : CLKV_OK;
}

/* Search args over the index storage (q_rot / q_norm already computed). */
static clkv_pariskv_search_args search_args(const clkv_pariskv_index *x, const clkv_tensor *idx) {
    clkv_pariskv_search_args s = CLKV_PARISKV_SEARCH_ARGS_INIT;
    s.q_rot = clkv_tensor_3d(x->q_rot, CLKV_F32, x->B, x->Hkv, x->D);
    s.q_norm = clkv_tensor_2d(x->q_norm, CLKV_F32, x->B, x->Hkv);
    s.ids = t4(x->ids, CLKV_U8, x->B, x->Hkv, x->L, x->nblk);
    s.codes = t4(x->codes, CLKV_U8, x->B, x->Hkv, x->L, x->D / 2);
    s.weights = t4(x->weights, x->wdt, x->B, x->Hkv, x->L, x->nblk);
    s.counts = t4(x->counts, CLKV_U32, x->B, x->Hkv, x->nblk, (int64_t)1 << x->m);
    s.plan = clkv_tensor_2d(x->plan, CLKV_I32, 8, x->B);
    s.idx = *idx;
    int64_t nmax = 0;
    for (int64_t b = 0; b < x->B; b++)
        nmax = x->zone[b] > nmax ? x->zone[b] : nmax;
    s.zone_start = x->sink < x->L ? x->sink : x->L;
    s.max_zone = nmax;
    s.max_candidates = x->max_cand;
    s.top_k = x->top_k;
    s.m = x->m;
    s.levels = &x->levels;
    return s;
}

static clkv_status check_q(clkv_context *ctx, const clkv_pariskv_index *x, const clkv_tensor *q) {
    clkv_status st;
    if ((st = clkv__check_tensor(ctx, q, "q", 3, CLKV_FLOAT_DTYPES)) ||
        (st = clkv__check_dim(ctx, q, "q", 0, x->B, "index batch")) ||
        (st = clkv__check_dim(ctx, q, "q", 1, x->Hq, "index query heads")) ||
        (st = clkv__check_dim(ctx, q, "q", 2, x->D, "index head dim")))
        return st;
    return CLKV_OK;
}

/* x->part holds at least `bytes` (the fused sparse step's partial states). */
static clkv_status ensure_part(clkv_context *ctx, clkv_pariskv_index *x, size_t bytes) {
    if (x->part && x->part_bytes >= bytes)
        return CLKV_OK;
    cl_int err;
    cl_mem buf = clCreateBuffer(clkv_context_cl_context(ctx), CL_MEM_READ_WRITE,
                                bytes > 0 ? bytes : 256, NULL, &err);
    if (err != CL_SUCCESS)
        return clkv__fail_cl(ctx, err, "index: clCreateBuffer of the step's partial states");
    if (x->part)
        clReleaseMemObject(x->part);
    x->part = buf;
    x->part_bytes = bytes;
    return CLKV_OK;
}

/* Query transform + search, both validated before either is enqueued; `ev` (optional):
 * profile the search kernels instead of returning `done`; `tk` (optional): leave the final
 * top-k to the caller (clkv__pariskv_search_ex). */
static clkv_status search(clkv_context *ctx, clkv_pariskv_index *x, const clkv_tensor *q,
                          const clkv_tensor *idx, cl_event *done, cl_event *ev,
                          clkv__topk_src *tk) {
    clkv_pariskv_search_args s = search_args(x, idx);
    /* On GPUs the search's first kernel transforms the query (one launch less; the search
     * validates everything before it enqueues). Not on CPUs: every pkv_rank work-group
     * repeats the transform, which costs a CPU more than the launch (PoCL, 2 cores: step
     * 5.0 -> 5.3 ms at 4K tokens). CLKV_PARISKV_RANK_QT=0: never, 1: on every device. */
    const int qt_env = clkv__env_int("CLKV_PARISKV_RANK_QT", -1);
    const int rank_qt = qt_env > 0 || (qt_env < 0 && ctx->info.kind == CLKV_DEVICE_KIND_GPU);
    if (rank_qt && clkv__pariskv_rank_can_transform(x->D, x->m))
        return clkv__pariskv_search_ex(ctx, &s, q, &x->sign_bits, tk, done, ev);
    size_t ws;
    clkv_status st = clkv_pariskv_search_workspace_size(ctx, &s, &ws);
    if (st != CLKV_OK)
        return st;
    clkv_pariskv_query_args qa = CLKV_PARISKV_QUERY_ARGS_INIT;
    qa.q = *q;
    qa.q_rot = s.q_rot;
    qa.q_norm = s.q_norm;
    qa.signs = x->signs;
    if ((st = clkv_pariskv_query_transform(ctx, &qa, NULL)))
        return st;
    return clkv__pariskv_search_ex(ctx, &s, NULL, NULL, tk, done, ev);
}

clkv_status clkv_pariskv_index_search(clkv_context *ctx, clkv_pariskv_index *x,
                                      const clkv_tensor *q, const clkv_tensor *idx,
                                      cl_event *done) {
    if (!ctx)
        return clkv__fail(NULL, CLKV_ERR_ARG_NULL, "ctx: context is NULL");
    if (!x)
        return clkv__fail(ctx, CLKV_ERR_ARG_NULL, "index: index is NULL");
    if (!q)
        return clkv__fail(ctx, CLKV_ERR_ARG_NULL, "q: tensor pointer is NULL");
    if (!idx)
        return clkv__fail(ctx, CLKV_ERR_ARG_NULL, "idx: tensor pointer is NULL");
    if (!x->prefilled)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "index: not prefilled yet");
    clkv_status st = check_q(ctx, x, q);
    if (st != CLKV_OK)
        return st;
    return search(ctx, x, q, idx, done, NULL, NULL);
}

clkv_status clkv__pariskv_index_search_profiled(clkv_context *ctx, clkv_pariskv_index *x,
                                                const clkv_tensor *q, const clkv_tensor *idx,
                                                cl_event ev[PKV_SEARCH_EVENTS]) {
    clkv_status st = check_q(ctx, x, q);
    if (st != CLKV_OK)
        return st;
    return search(ctx, x, q, idx, NULL, ev, NULL);
}

clkv_status clkv_pariskv_index_step(clkv_context *ctx, clkv_pariskv_index *x,
                                    const clkv_pariskv_step_args *a, cl_event *done) {
    if (!ctx)
        return clkv__fail(NULL, CLKV_ERR_ARG_NULL, "ctx: context is NULL");
    if (!x)
        return clkv__fail(ctx, CLKV_ERR_ARG_NULL, "index: index is NULL");
    if (!a)
        return clkv__fail(ctx, CLKV_ERR_ARG_NULL, "args: argument struct is NULL");
    if (!x->prefilled)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "index: not prefilled yet");
    clkv_status st;
    if ((st = check_q(ctx, x, &a->q)) || (st = check_k(ctx, x, &a->k, "k")) ||
        (st = check_k(ctx, x, &a->v, "v")) ||
        (st = clkv__check_tensor(ctx, &a->lengths, "lengths", 1, CLKV_DTYPE_BIT(CLKV_I32))) ||
        (st = clkv__check_dim(ctx, &a->lengths, "lengths", 0, x->B, "index batch")) ||
        (st = check_store_dtype(ctx, x, &a->k, "k")) ||
        (st = check_store_dtype(ctx, x, &a->v, "v")))
        return st;
    const int64_t K = x->top_k;
    if (a->idx_out.buf &&
        ((st = clkv__check_tensor(ctx, &a->idx_out, "idx_out", 3, CLKV_DTYPE_BIT(CLKV_I32))) ||
         (st = clkv__check_dim(ctx, &a->idx_out, "idx_out", 0, x->B, "index batch")) ||
         (st = clkv__check_dim(ctx, &a->idx_out, "idx_out", 1, x->Hkv, "index KV heads")) ||
         (st = clkv__check_dim(ctx, &a->idx_out, "idx_out", 2, K, "top_k"))))
        return st;
    int64_t mx = 0;
    for (int64_t b = 0; b < x->B; b++) {
        if (x->len[b] + 1 > x->L)
            return clkv__fail(ctx, CLKV_ERR_ARG_RANGE,
                              "index: sequence %lld is full (length %lld = capacity)", (long long)b,
                              (long long)x->len[b]);
        mx = x->len[b] + 1 > mx ? x->len[b] + 1 : mx;
    }
    const int sparse = mx >= dense_threshold(x);
    /* New bookkeeping (committed only once everything validated). */
    int64_t tail = x->tail + 1;
    const int flush = tail >= x->local + x->update;
    if (flush)
        tail = x->local;

    /* Validate the attention call (and the search) before enqueuing anything. */
    clkv_attention_sparse_args sa = CLKV_ATTENTION_SPARSE_ARGS_INIT;
    clkv_attention_decode_args da = CLKV_ATTENTION_DECODE_ARGS_INIT;
    const clkv_tensor idx =
        a->idx_out.buf ? a->idx_out : clkv_tensor_3d(x->idx, CLKV_I32, x->B, x->Hkv, K);
    size_t ws;
    /* On GPUs the step's sparse attention is clkv__attention_sparse_step (one-tile splits
     * for latency, merged in the kernel on NVIDIA) where the heads allow, and on NVIDIA
     * with the zone in device memory it also runs the search's final top-k (one launch for
     * both; CLKV_PARISKV_STEP_TOPK=0: the search's top-k kernel first). That kernel needs
     * about 44 KB of local memory: it is measured and tested on NVIDIA only, where static
     * local memory may exceed 48 KB. CPUs keep clkv_attention_sparse: the many small
     * splits cost a CPU more than launches do (PoCL, 2 cores: step 3.8 -> 5.0 ms at 4K
     * tokens), and PoCL takes minutes to compile the kernel with the top-k (barriers of the
     * top-k's loops and of the attention's tile loop in one function).
     * CLKV_PARISKV_STEP_SPARSE=0: never, 1: on every device (tests; the top-k still only
     * on NVIDIA). */
    const int gpu = ctx->info.kind == CLKV_DEVICE_KIND_GPU;
    const int sp_env = clkv__env_int("CLKV_PARISKV_STEP_SPARSE", -1);
    const int step_plan = sparse && K > 0 && K <= CLKV_SPARSE_STEP_MAX_NI && x->Hq / x->Hkv <= 8 &&
                          (sp_env > 0 || (sp_env < 0 && gpu));
    const int fuse_topk = step_plan && !x->store && ctx->info.nvidia_ptx &&
                          clkv__env_int("CLKV_PARISKV_STEP_TOPK", 1) != 0;
    if (sparse) {
        sa.q = a->q;
        sa.k = a->k;
        sa.v = a->v;
        sa.lengths = a->lengths;
        sa.idx = idx;
        sa.o = a->o;
        sa.lse = a->lse;
        sa.max_length = mx;
        sa.sink = x->sink;
        sa.local = tail;
        sa.scale = a->scale;
        if (x->store && K > 0) {
            const clkv_dtype sdt = x->store->dtype;
            sa.k_sel = t4(x->k_sel, sdt, x->B, x->Hkv, K, x->D);
            sa.v_sel = t4(x->v_sel, sdt, x->B, x->Hkv, K, x->D);
        }
        if ((st = step_plan ? clkv__attention_sparse_step_part_bytes(ctx, &sa, &ws)
                            : clkv_attention_sparse_workspace_size(ctx, &sa, &ws)))
            return st;
        if (step_plan && ws > x->part_bytes) {
            /* (re)allocate for the longest dense tail (local + update buffer) and the cache
             * length, so the buffer is not grown again as the tail grows */
            clkv_attention_sparse_args most = sa;
            most.local = x->local + x->update;
            most.max_length = sa.k.dims[2];
            size_t most_bytes;
            if ((st = clkv__attention_sparse_step_part_bytes(ctx, &most, &most_bytes)) ||
                (st = ensure_part(ctx, x, most_bytes > ws ? most_bytes : ws)))
                return st;
        }
    } else {
        da.q = a->q;
        da.k = a->k;
        da.v = a->v;
        da.lengths = a->lengths;
        da.o = a->o;
        da.lse = a->lse;
        da.max_length = mx;
        da.scale = a->scale;
        if ((st = clkv_attention_decode_workspace_size(ctx, &da, &ws)))
            return st;
    }

    /* Commit the append; flush grown zones into the index (incremental encoding). */
    for (int64_t b = 0; b < x->B; b++)
        x->len[b]++;
    x->tail = tail;
    if (flush) {
        int64_t s0 = -1, e0 = -1, same = 1;
        int64_t *old = x->old;
        for (int64_t b = 0; b < x->B; b++) {
            old[b] = x->zone[b];
            const int64_t n = x->len[b] - x->sink - x->tail;
            x->zone[b] = n > 0 ? n : 0;
            const int64_t s = x->sink + old[b], e = x->sink + x->zone[b];
            if (b == 0) {
                s0 = s;
                e0 = e;
            } else if (s != s0 || e != e0) {
                same = 0;
            }
        }
        if (same && e0 > s0) { /* one call for the whole batch */
            clkv_pariskv_encode_args ea = encode_args(x, &a->k, 0, x->B);
            ea.start = s0;
            ea.end = e0;
            st = clkv_pariskv_encode(ctx, &ea, NULL);
        } else if (!same) {
            for (int64_t b = 0; b < x->B && st == CLKV_OK; b++) {
                if (x->zone[b] == old[b])
                    continue;
                clkv_pariskv_encode_args ea = encode_args(x, &a->k, b, 1);
                ea.start = x->sink + old[b];
                ea.end = x->sink + x->zone[b];
                st = clkv_pariskv_encode(ctx, &ea, NULL);
            }
        }
        if (st == CLKV_OK && x->store)
            st = store_zone_rows(ctx, x, &a->k, &a->v, old);
        if (st == CLKV_OK)
            st = upload_plan(ctx, x, 0);
        if (st != CLKV_OK)
            return st;
    }
    if (!sparse)
        return clkv_attention_decode(ctx, &da, done);
    if (fuse_topk) {
        clkv__topk_src tk;
        if ((st = search(ctx, x, &a->q, &idx, NULL, NULL, &tk)))
            return st;
        return clkv__attention_sparse_step(ctx, &sa, &tk, x->part, done);
    }
    if ((st = search(ctx, x, &a->q, &idx, NULL, NULL, NULL)))
        return st;
    if (x->store && K > 0) {
        /* the retrieved rows from host memory (zero rows for -1 padding, never attended) */
        clkv_offload_gather_args ga = CLKV_OFFLOAD_GATHER_ARGS_INIT;
        ga.idx = idx;
        ga.k_out = sa.k_sel;
        ga.v_out = sa.v_sel;
        if ((st = clkv_offload_gather(ctx, x->store, &ga, NULL)))
            return st;
    }
    return step_plan ? clkv__attention_sparse_step(ctx, &sa, NULL, x->part, done)
                     : clkv_attention_sparse(ctx, &sa, done);
}
