/* The LongFlow static cache object: create / destroy, buffer accessors, and
 * clkv_longflow_cache_load (cl_kernels/longflow_load.cl + the first victim choice). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host/longflow_internal.h"

#define LOAD_FILE "longflow_load.cl"
#define LOAD_WG 256

static clkv_status validate_create(clkv_context *ctx, const clkv_longflow_cache_create_args *a) {
    const int64_t vals[5] = {a->batch, a->q_heads, a->kv_heads, a->head_dim, a->slots};
    static const char *const names[5] = {"batch", "q_heads", "kv_heads", "head_dim", "slots"};
    for (int i = 0; i < 5; i++)
        if (vals[i] < 1)
            return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "%s: %lld is below 1", names[i],
                              (long long)vals[i]);
    if (a->head_dim != 64 && a->head_dim != 128 && a->head_dim != 256)
        return clkv__fail(ctx, CLKV_ERR_ARG_UNSUPPORTED,
                          "head_dim: D = %lld, supported: 64, 128, 256", (long long)a->head_dim);
    if (a->q_heads % a->kv_heads != 0)
        return clkv__fail(ctx, CLKV_ERR_ARG_SHAPE,
                          "q_heads: Hq = %lld is not a multiple of kv_heads = %lld",
                          (long long)a->q_heads, (long long)a->kv_heads);
    if (a->q_heads > LF_UNIT_HEADS_MAX)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "q_heads: %lld exceeds the supported %d",
                          (long long)a->q_heads, LF_UNIT_HEADS_MAX);
    if (a->batch > 65535)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "batch: %lld exceeds the supported 65535",
                          (long long)a->batch);
    if (a->slots < 2 || a->slots > INT32_MAX)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "slots: S = %lld is outside [2, 2^31-1]",
                          (long long)a->slots);
    if (a->protect < 0 || a->protect >= a->slots)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE,
                          "protect: %d is outside [0, S-1 = %lld] (a full cache needs an "
                          "unprotected slot)",
                          (int)a->protect, (long long)(a->slots - 1));
    if (a->dtype != CLKV_F32 && a->dtype != CLKV_F16 && a->dtype != CLKV_BF16)
        return clkv__fail(ctx, CLKV_ERR_ARG_DTYPE,
                          "dtype: %s is not a K/V storage dtype "
                          "(f32, f16, bf16)",
                          clkv_dtype_name(a->dtype));
    if (a->mode != CLKV_LONGFLOW_PER_LAYER && a->mode != CLKV_LONGFLOW_PER_KV_HEAD)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "mode: %d is not a clkv_longflow_mode",
                          (int)a->mode);
    /* B*Hkv*S*D*esize and B*Hq*S*4 (workspace) in 64 bits: each factor < 2^32, S < 2^31. */
    const double kv = (double)a->batch * (double)a->kv_heads * (double)a->slots *
                      (double)a->head_dim * (double)clkv_dtype_size(a->dtype);
    const double ys = (double)a->batch * (double)a->q_heads * (double)a->slots * 4.0;
    if (kv > 9.0e18 || ys > 9.0e18)
        return clkv__fail(ctx, CLKV_ERR_ARG_OVERFLOW, "slots: the cache size overflows 64 bits");
    if (kv > (double)ctx->info.max_alloc_bytes)
        return clkv__fail(ctx, CLKV_ERR_DEVICE_LIMIT,
                          "slots: K (and V) need %.0f bytes but one buffer may hold at most %llu",
                          kv, (unsigned long long)ctx->info.max_alloc_bytes);
    return CLKV_OK;
}

static clkv_status alloc_fill(clkv_longflow_cache *c, cl_mem *out, size_t bytes, cl_int pattern) {
    cl_int err;
    *out = clCreateBuffer(c->ctx->cl_ctx, CL_MEM_READ_WRITE, bytes, NULL, &err);
    if (err != CL_SUCCESS)
        return clkv__fail_cl(c->ctx, err, "longflow cache: clCreateBuffer");
    return clkv__fill_u32(c->ctx, *out, 0, bytes, (uint32_t)pattern, NULL);
}

clkv_status clkv_longflow_cache_create(clkv_context *ctx,
                                       const clkv_longflow_cache_create_args *args,
                                       clkv_longflow_cache **out) {
    if (!ctx || !args)
        return clkv__fail_entry(ctx, args);
    if (!out)
        return clkv__fail(ctx, CLKV_ERR_ARG_NULL, "out: output pointer is NULL");
    clkv_status st = validate_create(ctx, args);
    if (st != CLKV_OK)
        return st;
    clkv_longflow_cache *c = calloc(1, sizeof *c);
    if (!c)
        return clkv__fail(ctx, CLKV_ERR_OUT_OF_HOST_MEMORY, "longflow cache: out of host memory");
    c->ctx = ctx;
    c->B = args->batch;
    c->Hq = args->q_heads;
    c->Hkv = args->kv_heads;
    c->G = c->Hq / c->Hkv;
    c->D = args->head_dim;
    c->S = args->slots;
    c->mode = args->mode;
    c->Hm = c->mode == CLKV_LONGFLOW_PER_KV_HEAD ? c->Hkv : 1;
    c->dtype = args->dtype;
    c->protect = args->protect;
    if ((st = lf__plan(c)) != CLKV_OK) {
        free(c);
        return st;
    }
    const size_t kv_bytes = (size_t)(c->B * c->Hkv * c->S * c->D) * clkv_dtype_size(c->dtype);
    const size_t map_bytes = (size_t)(c->B * c->Hm * c->S) * 4;
    const size_t n_counters = lf__counter_layout(c).total;
    if ((st = alloc_fill(c, &c->k, kv_bytes, 0)) || (st = alloc_fill(c, &c->v, kv_bytes, 0)) ||
        (st = alloc_fill(c, &c->pos, map_bytes, -1)) ||
        (st = alloc_fill(c, &c->victim, (size_t)(c->B * c->Hm) * 4, 0)) ||
        (st = alloc_fill(c, &c->next_pos, (size_t)c->B * 4, 0)) ||
        (st = alloc_fill(c, &c->counters, n_counters * 4, 0))) {
        clkv_longflow_cache_destroy(c);
        return st;
    }
    clkv__log(ctx, "longflow cache: B=%lld Hq=%lld Hkv=%lld D=%lld S=%lld %s mode=%d protect=%d",
              (long long)c->B, (long long)c->Hq, (long long)c->Hkv, (long long)c->D,
              (long long)c->S, clkv_dtype_name(c->dtype), (int)c->mode, c->protect);
    *out = c;
    return CLKV_OK;
}

void clkv_longflow_cache_destroy(clkv_longflow_cache *cache) {
    if (!cache)
        return;
    cl_mem bufs[6] = {cache->k,      cache->v,        cache->pos,
                      cache->victim, cache->next_pos, cache->counters};
    for (int i = 0; i < 6; i++)
        if (bufs[i])
            clReleaseMemObject(bufs[i]);
    free(cache);
}

clkv_tensor clkv_longflow_cache_k(const clkv_longflow_cache *c) {
    return c ? clkv_tensor_4d(c->k, c->dtype, c->B, c->Hkv, c->S, c->D) : clkv_tensor_none();
}

clkv_tensor clkv_longflow_cache_v(const clkv_longflow_cache *c) {
    return c ? clkv_tensor_4d(c->v, c->dtype, c->B, c->Hkv, c->S, c->D) : clkv_tensor_none();
}

clkv_tensor clkv_longflow_cache_positions(const clkv_longflow_cache *c) {
    return c ? clkv_tensor_3d(c->pos, CLKV_I32, c->B, c->Hm, c->S) : clkv_tensor_none();
}

clkv_tensor clkv_longflow_cache_victims(const clkv_longflow_cache *c) {
    return c ? clkv_tensor_2d(c->victim, CLKV_I32, c->B, c->Hm) : clkv_tensor_none();
}

clkv_tensor clkv_longflow_cache_next_positions(const clkv_longflow_cache *c) {
    return c ? clkv_tensor_1d(c->next_pos, CLKV_I32, c->B) : clkv_tensor_none();
}

static clkv_status validate_load(clkv_longflow_cache *c, const clkv_longflow_load_args *a) {
    clkv_context *ctx = c->ctx;
    clkv_status st;
    if ((st = clkv__check_tensor(ctx, &a->k, "k", 4, CLKV_FLOAT_DTYPES)) ||
        (st = clkv__check_tensor(ctx, &a->v, "v", 4, CLKV_FLOAT_DTYPES)) ||
        (st = clkv__check_optional_tensor(ctx, &a->lengths, "lengths", 1,
                                          CLKV_DTYPE_BIT(CLKV_I32))) ||
        (st = clkv__check_optional_tensor(ctx, &a->indices, "indices", 3,
                                          CLKV_DTYPE_BIT(CLKV_I32))) ||
        (st = clkv__check_optional_tensor(ctx, &a->q, "q", 3, CLKV_FLOAT_DTYPES)))
        return st;
    if (a->v.dtype != a->k.dtype)
        return clkv__fail(ctx, CLKV_ERR_ARG_DTYPE, "v: dtype %s differs from k's %s",
                          clkv_dtype_name(a->v.dtype), clkv_dtype_name(a->k.dtype));
    const int64_t Lp = a->k.dims[2];
    if ((st = clkv__check_dim(ctx, &a->k, "k", 0, c->B, "batch of the cache")) ||
        (st = clkv__check_dim(ctx, &a->k, "k", 1, c->Hkv, "KV heads of the cache")) ||
        (st = clkv__check_dim(ctx, &a->k, "k", 3, c->D, "head dim of the cache")))
        return st;
    for (int i = 0; i < 4; i++)
        if ((st = clkv__check_dim(ctx, &a->v, "v", i, a->k.dims[i], "must match k")))
            return st;
    if (a->lengths.buf &&
        (st = clkv__check_dim(ctx, &a->lengths, "lengths", 0, c->B, "batch of the cache")))
        return st;
    if (a->indices.buf &&
        ((st = clkv__check_dim(ctx, &a->indices, "indices", 0, c->B, "batch of the cache")) ||
         (st = clkv__check_dim(ctx, &a->indices, "indices", 1, c->Hm,
                               c->Hm == 1 ? "one shared list in per-layer mode"
                                          : "one list per KV head in per-KV-head mode"))))
        return st;
    if (a->indices.buf && a->indices.dims[2] > c->S)
        return clkv__fail(ctx, CLKV_ERR_ARG_SHAPE,
                          "indices: dims[2] = %lld kept tokens exceed the S = %lld slots",
                          (long long)a->indices.dims[2], (long long)c->S);
    if (a->q.buf) {
        const int64_t qd[3] = {c->B, c->Hq, c->D};
        for (int i = 0; i < 3; i++)
            if ((st = clkv__check_dim(ctx, &a->q, "q", i, qd[i], "shape of the cache's queries")))
                return st;
    }
    if (Lp > INT32_MAX)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "k: Lp = %lld exceeds 2^31-1 tokens",
                          (long long)Lp);
    if (a->max_length < -1 || a->max_length > Lp)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "max_length: %lld is outside [-1, Lp = %lld]",
                          (long long)a->max_length, (long long)Lp);
    const int64_t max_len = a->max_length < 0 ? Lp : a->max_length;
    if (!a->indices.buf && max_len > c->S)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE,
                          "max_length: %lld prompt tokens exceed the S = %lld slots and no "
                          "indices were given (compress the prompt first)",
                          (long long)max_len, (long long)c->S);
    if (!isfinite(a->scale))
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "scale: %g is not finite", (double)a->scale);
    return CLKV_OK;
}

clkv_status clkv_longflow_cache_load(clkv_longflow_cache *cache,
                                     const clkv_longflow_load_args *args, cl_event *done) {
    if (!cache)
        return clkv__fail(NULL, CLKV_ERR_ARG_NULL, "cache: LongFlow cache is NULL");
    clkv_context *ctx = cache->ctx;
    if (!args)
        return clkv__fail(ctx, CLKV_ERR_ARG_NULL, "args: argument struct is NULL");
    clkv_status st = validate_load(cache, args);
    if (st != CLKV_OK)
        return st;
    const int has_idx = args->indices.buf != NULL, has_len = args->lengths.buf != NULL;
    clkv_defs defs;
    clkv__defs_init(&defs);
    clkv__defs_int(&defs, "SRC_DTYPE", args->k.dtype);
    clkv__defs_int(&defs, "KV_DTYPE", cache->dtype);
    clkv__defs_int(&defs, "HEAD_DIM", cache->D);
    clkv__defs_int(&defs, "PER_HEAD", cache->mode == CLKV_LONGFLOW_PER_KV_HEAD);
    clkv__defs_int(&defs, "HAS_INDICES", has_idx);
    clkv__defs_int(&defs, "HAS_LENGTHS", has_len);
    cl_kernel kl;
    if ((st = clkv__get_kernel(ctx, LOAD_FILE, &defs, "longflow_load", &kl)) != CLKV_OK)
        return st;
    const cl_long sk_off = clkv__elem_offset(&args->k), sk_sb = args->k.strides[0],
                  sk_sh = args->k.strides[1], sk_sl = args->k.strides[2];
    const cl_long sv_off = clkv__elem_offset(&args->v), sv_sb = args->v.strides[0],
                  sv_sh = args->v.strides[1], sv_sl = args->v.strides[2];
    const cl_mem len_buf = args->lengths.buf, ix_buf = args->indices.buf;
    const cl_long len_off = has_len ? clkv__elem_offset(&args->lengths) : 0;
    const cl_long ix_off = has_idx ? clkv__elem_offset(&args->indices) : 0,
                  ix_sb = has_idx ? args->indices.strides[0] : 0,
                  ix_sh = has_idx ? args->indices.strides[1] : 0;
    const cl_int max_len = (cl_int)(args->max_length < 0 ? args->k.dims[2] : args->max_length);
    const cl_int n_idx = has_idx ? (cl_int)args->indices.dims[2] : 0;
    const cl_int Hkv = (cl_int)cache->Hkv, S = (cl_int)cache->S;
    st = clkv__set_args(ctx, kl, "longflow_load", 24, CLKV_ARG(args->k.buf), CLKV_ARG(sk_off),
                        CLKV_ARG(sk_sb), CLKV_ARG(sk_sh), CLKV_ARG(sk_sl), CLKV_ARG(args->v.buf),
                        CLKV_ARG(sv_off), CLKV_ARG(sv_sb), CLKV_ARG(sv_sh), CLKV_ARG(sv_sl),
                        CLKV_ARG(len_buf), CLKV_ARG(len_off), CLKV_ARG(max_len), CLKV_ARG(ix_buf),
                        CLKV_ARG(ix_off), CLKV_ARG(ix_sb), CLKV_ARG(ix_sh), CLKV_ARG(n_idx),
                        CLKV_ARG(cache->k), CLKV_ARG(cache->v), CLKV_ARG(cache->pos),
                        CLKV_ARG(cache->next_pos), CLKV_ARG(Hkv), CLKV_ARG(S));
    if (st == CLKV_OK)
        st = clkv__check_local_mem(ctx, kl, "longflow_load", 0);
    if (st != CLKV_OK)
        return st;
    lf_pass ps = {0};
    ps.mode = args->q.buf ? 1 : 2;
    ps.q = &args->q;
    ps.scale = args->scale != 0.0f ? args->scale : (float)(1.0 / sqrt((double)cache->D));
    const size_t total = (size_t)(cache->S * cache->D);
    const size_t gl[3] = {(total + LOAD_WG - 1) / LOAD_WG * LOAD_WG, (size_t)cache->Hkv,
                          (size_t)cache->B};
    const size_t ll[3] = {LOAD_WG, 1, 1};
    const lf_pre pre = {kl, "longflow_load", gl, ll};
    /* The pass enqueues the load kernel first, once its own kernels are ready. */
    ps.pre = &pre;
    return lf__enqueue_pass(cache, &ps, done);
}
