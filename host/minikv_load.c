/* clkv_minikv_load_cache (include/clkv/minikv.h): the MiniKV selection gathered by
 * clkv_compact_kv (out of place into one workspace region, or in place) and appended to
 * a quantized cache with clkv_quant_cache_append. */
#include <string.h>

#include "clkv/minikv.h"
#include "clkv/select.h"
#include "host/quant_cache_internal.h"
#include "runtime/internal.h"

typedef struct load_steps {
    clkv_compact_kv_args compact;
    clkv_quant_cache_append_args append;
    size_t region0;     /* the compaction's own workspace */
    size_t inter_bytes; /* the gathered rows above it (0 in place) */
} load_steps;

static clkv_tensor ws_rows(cl_mem ws, size_t off, clkv_dtype dt, int64_t B, int64_t H, int64_t K,
                           int64_t D) {
    clkv_tensor t = clkv_tensor_4d(ws, dt, B, H, K, D);
    t.offset = off;
    return t;
}

static size_t rows_bytes(const clkv_tensor *t, int64_t B, int64_t H, int64_t K, int64_t D) {
    return clkv__ws_align((size_t)(B * H * K * D) * clkv_dtype_size(t->dtype));
}

static void build_steps(const clkv_minikv_load_args *a, cl_mem ws, load_steps *s) {
    memset(s, 0, sizeof *s);
    const int64_t B = a->k.dims[0], H = a->k.dims[1], D = a->k.dims[3], K = a->indices.dims[2];
    s->region0 = clkv__ws_align((size_t)(B * H) * 4); /* clkv_compact_kv's row counts */
    s->compact = (clkv_compact_kv_args)CLKV_COMPACT_KV_ARGS_INIT;
    s->compact.k_src = a->k;
    s->compact.v_src = a->v;
    s->compact.indices = a->indices;
    if (a->in_place) {
        s->compact.k_dst = a->k;
        s->compact.v_dst = a->v;
        s->compact.k_dst.dims[2] = K; /* Lout = K <= L, same view otherwise */
        s->compact.v_dst.dims[2] = K;
    } else {
        size_t off = s->region0;
        s->compact.k_dst = ws_rows(ws, off, a->k.dtype, B, H, K, D);
        off += rows_bytes(&a->k, B, H, K, D);
        s->compact.v_dst = ws_rows(ws, off, a->v.dtype, B, H, K, D);
        off += rows_bytes(&a->v, B, H, K, D);
        s->inter_bytes = off - s->region0;
    }
    s->append = (clkv_quant_cache_append_args)CLKV_QUANT_CACHE_APPEND_ARGS_INIT;
    s->append.k = s->compact.k_dst;
    s->append.v = s->compact.v_dst;
    s->append.counts = a->counts;
}

/* Everything the two steps would reject, checked before either is enqueued. */
static clkv_status validate(clkv_quant_cache *c, const clkv_minikv_load_args *a) {
    clkv_context *ctx = c->ctx;
    clkv_status st;
    if ((st = clkv__check_tensor(ctx, &a->k, "k", 4, CLKV_FLOAT_DTYPES)) ||
        (st = clkv__check_tensor(ctx, &a->v, "v", 4, CLKV_FLOAT_DTYPES)) ||
        (st = clkv__check_tensor(ctx, &a->indices, "indices", 3, CLKV_DTYPE_BIT(CLKV_I32))) ||
        (st = clkv__check_tensor(ctx, &a->counts, "counts", 1, CLKV_DTYPE_BIT(CLKV_I32))))
        return st;
    if (a->in_place != 0 && a->in_place != 1)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "in_place: %d is not 0 or 1", (int)a->in_place);
    if (a->in_place &&
        (a->k.buf == a->v.buf || a->indices.buf == a->k.buf || a->indices.buf == a->v.buf ||
         a->counts.buf == a->k.buf || a->counts.buf == a->v.buf))
        return clkv__fail(ctx, CLKV_ERR_ARG_UNSUPPORTED,
                          "in_place: k and v must be separate buffers, not shared with each "
                          "other, indices or counts");
    const clkv_quant_cache_create_args *cfg = &c->cfg;
    if ((st = clkv__check_dim(ctx, &a->k, "k", 0, cfg->batch, "the cache's batch")) ||
        (st = clkv__check_dim(ctx, &a->k, "k", 1, cfg->kv_heads, "the cache's kv_heads")) ||
        (st = clkv__check_dim(ctx, &a->k, "k", 3, cfg->head_dim, "the cache's head_dim")))
        return st;
    for (int i = 0; i < 4; i++)
        if ((st = clkv__check_dim(ctx, &a->v, "v", i, a->k.dims[i], "as k")))
            return st;
    if ((st = clkv__check_dim(ctx, &a->indices, "indices", 0, cfg->batch, "the cache's batch")) ||
        (st = clkv__check_dim(ctx, &a->indices, "indices", 1, cfg->kv_heads,
                              "the cache's kv_heads")) ||
        (st = clkv__check_dim(ctx, &a->counts, "counts", 0, cfg->batch, "the cache's batch")))
        return st;
    const int64_t K = a->indices.dims[2];
    if (K > INT32_MAX)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "indices: dims[2] = %lld exceeds 2^31-1",
                          (long long)K);
    if (a->in_place && K > a->k.dims[2])
        return clkv__fail(ctx, CLKV_ERR_ARG_SHAPE,
                          "indices: dims[2] = %lld exceeds L = %lld of k (in place)", (long long)K,
                          (long long)a->k.dims[2]);
    if (c->max_len + K > cfg->capacity)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE,
                          "capacity: the cache holds up to %lld tokens and %lld may be in it "
                          "already; the K = %lld selected tokens do not fit",
                          (long long)cfg->capacity, (long long)c->max_len, (long long)K);
    return CLKV_OK;
}

/* Validate (both steps included) and lay out the workspace. */
static clkv_status plan(clkv_quant_cache *c, const clkv_minikv_load_args *a, load_steps *s,
                        size_t *total) {
    clkv_status st;
    if ((st = validate(c, a)))
        return st;
    build_steps(a, NULL, s);
    *total = s->region0 + s->inter_bytes;
    cl_mem ws;
    if ((st = clkv__workspace(c->ctx, *total, &ws)))
        return st;
    build_steps(a, ws, s);
    return CLKV_OK;
}

clkv_status clkv_minikv_load_cache_workspace_size(clkv_quant_cache *cache,
                                                  const clkv_minikv_load_args *args,
                                                  size_t *bytes) {
    if (!cache)
        return clkv__fail(NULL, CLKV_ERR_ARG_NULL, "cache: quantized cache is NULL");
    if (!args)
        return clkv__fail(cache->ctx, CLKV_ERR_ARG_NULL, "args: argument struct is NULL");
    if (!bytes)
        return clkv__fail(cache->ctx, CLKV_ERR_ARG_NULL, "bytes: output pointer is NULL");
    load_steps s;
    size_t total = 0;
    clkv_status st = plan(cache, args, &s, &total);
    if (st == CLKV_OK)
        *bytes = total;
    return st;
}

clkv_status clkv_minikv_load_cache(clkv_quant_cache *cache, const clkv_minikv_load_args *args,
                                   cl_event *done) {
    if (!cache)
        return clkv__fail(NULL, CLKV_ERR_ARG_NULL, "cache: quantized cache is NULL");
    if (!args)
        return clkv__fail(cache->ctx, CLKV_ERR_ARG_NULL, "args: argument struct is NULL");
    load_steps s;
    size_t total = 0;
    clkv_status st = plan(cache, args, &s, &total);
    if (st)
        return st;
    if ((st = clkv_compact_kv(cache->ctx, &s.compact, NULL)))
        return st;
    return clkv_quant_cache_append(cache, &s.append, done);
}
