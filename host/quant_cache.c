/* Quantized KV cache (SPEC §3): creation, views, reset and appends (kernels in
 * cl_kernels/quant.cl, section "quantized KV cache appends"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host/quant_cache_internal.h"

#define KERNEL_FILE "quant.cl"
#define APPEND_WG 64

static int bits_ok(int b) {
    return b == 2 || b == 4 || b == 8;
}

/* a * b into *out unless it overflows int64 (both >= 0). */
static int mul_ok(int64_t a, int64_t b, int64_t *out) {
    if (a != 0 && b > INT64_MAX / a)
        return 0;
    *out = a * b;
    return 1;
}

static clkv_status validate_create(clkv_context *ctx, const clkv_quant_cache_create_args *a) {
    if (a->batch < 1 || a->batch > 65535)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "batch: %lld is outside [1, 65535]",
                          (long long)a->batch);
    if (a->kv_heads < 1 || a->kv_heads > 65535)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "kv_heads: %lld is outside [1, 65535]",
                          (long long)a->kv_heads);
    if (a->head_dim != 64 && a->head_dim != 128 && a->head_dim != 256)
        return clkv__fail(ctx, CLKV_ERR_ARG_UNSUPPORTED, "head_dim: %lld, supported: 64, 128, 256",
                          (long long)a->head_dim);
    if (!bits_ok(a->k_bits))
        return clkv__fail(ctx, CLKV_ERR_ARG_UNSUPPORTED, "k_bits: %d, supported: 2, 4, 8",
                          a->k_bits);
    if (!bits_ok(a->v_bits))
        return clkv__fail(ctx, CLKV_ERR_ARG_UNSUPPORTED, "v_bits: %d, supported: 2, 4, 8",
                          a->v_bits);
    if (a->group != 16 && a->group != 32 && a->group != 64 && a->group != 128)
        return clkv__fail(ctx, CLKV_ERR_ARG_UNSUPPORTED, "group: %d, supported: 16, 32, 64, 128",
                          a->group);
    if (a->head_dim % a->group != 0)
        return clkv__fail(ctx, CLKV_ERR_ARG_UNSUPPORTED,
                          "group: %d does not divide head_dim = %lld (values are grouped along "
                          "channels)",
                          a->group, (long long)a->head_dim);
    if (a->residual < a->group || a->residual % a->group != 0 || a->residual > 65536)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE,
                          "residual: %d is not a positive multiple of group = %d (at most 65536)",
                          a->residual, a->group);
    if (a->capacity < 1 || a->capacity > INT32_MAX - 65536)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "capacity: %lld is outside [1, 2^31 - 65537]",
                          (long long)a->capacity);
    if (a->res_dtype != CLKV_F16 && a->res_dtype != CLKV_BF16 && a->res_dtype != CLKV_F32)
        return clkv__fail(ctx, CLKV_ERR_ARG_DTYPE, "res_dtype: %s, supported: f16, bf16, f32",
                          clkv_dtype_name(a->res_dtype));
    if (a->meta_dtype != CLKV_F16 && a->meta_dtype != CLKV_F32)
        return clkv__fail(ctx, CLKV_ERR_ARG_DTYPE, "meta_dtype: %s, supported: f16, f32",
                          clkv_dtype_name(a->meta_dtype));
    return CLKV_OK;
}

/* Byte sizes of the ten buffers, in the order of the struct's cl_mem fields. */
enum { NBUF = 10 };

static clkv_status buffer_sizes(clkv_context *ctx, const clkv_quant_cache_create_args *a,
                                int64_t cq, int64_t bytes[NBUF]) {
    const int64_t bh = a->batch * a->kv_heads, D = a->head_dim, G = a->group;
    const int64_t pk = 32 / a->k_bits, pv = 32 / a->v_bits;
    const int64_t msz = clkv_dtype_size(a->meta_dtype), rsz = clkv_dtype_size(a->res_dtype);
    int64_t t = 0;
    for (int i = 0; i < NBUF; i++)
        bytes[i] = 0;
    int ok = mul_ok(bh, cq / pk, &t) && mul_ok(t, D * 4, &bytes[0]);
    ok = ok && mul_ok(bh, cq / G, &t) && mul_ok(t, D * msz, &bytes[1]);
    bytes[2] = bytes[1];
    ok = ok && mul_ok(bh, cq, &t) && mul_ok(t, D / pv * 4, &bytes[3]);
    ok = ok && mul_ok(bh, cq, &t) && mul_ok(t, D / G * msz, &bytes[4]);
    bytes[5] = bytes[4];
    ok = ok && mul_ok(bh, a->residual, &t) && mul_ok(t, D * rsz, &bytes[6]);
    bytes[7] = bytes[6];
    bytes[8] = 2 * a->batch * 4;
    bytes[9] = 4;
    if (!ok)
        return clkv__fail(ctx, CLKV_ERR_ARG_OVERFLOW,
                          "capacity: %lld tokens x %lld sequences x %lld heads overflow 64-bit "
                          "byte counts",
                          (long long)a->capacity, (long long)a->batch, (long long)a->kv_heads);
    for (int i = 0; i < NBUF; i++)
        if ((uint64_t)bytes[i] > ctx->info.max_alloc_bytes)
            return clkv__fail(ctx, CLKV_ERR_DEVICE_LIMIT,
                              "capacity: a cache buffer of %lld bytes exceeds the device's "
                              "largest allocation (%llu bytes)",
                              (long long)bytes[i], (unsigned long long)ctx->info.max_alloc_bytes);
    return CLKV_OK;
}

static cl_mem *buffer_slot(clkv_quant_cache *c, int i) {
    cl_mem *slots[NBUF] = {&c->k_codes, &c->k_scale, &c->k_min, &c->v_codes, &c->v_scale,
                           &c->v_min,   &c->k_res,   &c->v_res, &c->counts,  &c->flags};
    return slots[i];
}

void clkv_quant_cache_destroy(clkv_quant_cache *cache) {
    if (!cache)
        return;
    for (int i = 0; i < NBUF; i++)
        if (*buffer_slot(cache, i))
            clReleaseMemObject(*buffer_slot(cache, i));
    free(cache);
}

/* Zero counts and flags on the queue. */
static clkv_status zero_state(clkv_quant_cache *c, cl_event *done) {
    const cl_int zero = 0;
    cl_command_queue q = c->ctx->queue;
    cl_int err = clEnqueueFillBuffer(q, c->counts, &zero, sizeof zero, 0,
                                     (size_t)(2 * c->cfg.batch * 4), 0, NULL, NULL);
    if (err == CL_SUCCESS)
        err = clEnqueueFillBuffer(q, c->flags, &zero, sizeof zero, 0, 4, 0, NULL, done);
    if (err != CL_SUCCESS)
        return clkv__fail_cl(c->ctx, err, "quant cache: clEnqueueFillBuffer");
    c->max_len = 0;
    return CLKV_OK;
}

clkv_status clkv_quant_cache_create(clkv_context *ctx, const clkv_quant_cache_create_args *args,
                                    clkv_quant_cache **out) {
    if (!ctx || !args)
        return clkv__fail_entry(ctx, args);
    if (!out)
        return clkv__fail(ctx, CLKV_ERR_ARG_NULL, "out: output pointer is NULL");
    clkv_status st = validate_create(ctx, args);
    if (st)
        return st;
    const int64_t cq = args->capacity - args->capacity % args->residual;
    int64_t bytes[NBUF];
    if ((st = buffer_sizes(ctx, args, cq, bytes)))
        return st;
    clkv_quant_cache *c = calloc(1, sizeof *c);
    if (!c)
        return clkv__fail(ctx, CLKV_ERR_OUT_OF_HOST_MEMORY, "quant cache: out of host memory");
    c->ctx = ctx;
    c->cfg = *args;
    c->cq = cq;
    const char *wg = getenv("CLKV_QUANT_WG");
    if (wg) {
        const int v = atoi(wg);
        c->attn_wg = (v == 64 || v == 128 || v == 256) ? v : 0;
    }
    for (int i = 0; i < NBUF; i++) {
        cl_int err;
        /* OpenCL has no empty buffers: an empty quantized part gets a placeholder word. */
        const size_t n = bytes[i] > 0 ? (size_t)bytes[i] : 16;
        *buffer_slot(c, i) = clCreateBuffer(ctx->cl_ctx, CL_MEM_READ_WRITE, n, NULL, &err);
        if (err != CL_SUCCESS) {
            clkv_quant_cache_destroy(c);
            return clkv__fail_cl(ctx, err, "quant cache: clCreateBuffer");
        }
    }
    if ((st = zero_state(c, NULL))) {
        clkv_quant_cache_destroy(c);
        return st;
    }
    clkv__log(ctx,
              "quant cache: B=%lld Hkv=%lld D=%lld capacity=%lld (quantized %lld) k_bits=%d "
              "v_bits=%d group=%d residual=%d res=%s meta=%s",
              (long long)args->batch, (long long)args->kv_heads, (long long)args->head_dim,
              (long long)args->capacity, (long long)cq, args->k_bits, args->v_bits, args->group,
              args->residual, clkv_dtype_name(args->res_dtype), clkv_dtype_name(args->meta_dtype));
    *out = c;
    return CLKV_OK;
}

clkv_status clkv_quant_cache_reset(clkv_quant_cache *cache, cl_event *done) {
    if (!cache)
        return clkv__fail(NULL, CLKV_ERR_ARG_NULL, "cache: quantized cache is NULL");
    return zero_state(cache, done);
}

clkv_status clkv_quant_cache_view_get(const clkv_quant_cache *cache, clkv_quant_cache_view *out) {
    if (!cache)
        return clkv__fail(NULL, CLKV_ERR_ARG_NULL, "cache: quantized cache is NULL");
    if (!out)
        return clkv__fail(cache->ctx, CLKV_ERR_ARG_NULL, "out: output pointer is NULL");
    const clkv_quant_cache_create_args *a = &cache->cfg;
    const int64_t B = a->batch, H = a->kv_heads, D = a->head_dim, G = a->group, cq = cache->cq;
    const clkv_dtype md = a->meta_dtype;
    memset(out, 0, sizeof *out);
    out->k_codes = clkv_tensor_4d(cache->k_codes, CLKV_U32, B, H, cq / (32 / a->k_bits), D);
    out->k_scale = clkv_tensor_4d(cache->k_scale, md, B, H, cq / G, D);
    out->k_min = clkv_tensor_4d(cache->k_min, md, B, H, cq / G, D);
    out->v_codes = clkv_tensor_4d(cache->v_codes, CLKV_U32, B, H, cq, D / (32 / a->v_bits));
    out->v_scale = clkv_tensor_4d(cache->v_scale, md, B, H, cq, D / G);
    out->v_min = clkv_tensor_4d(cache->v_min, md, B, H, cq, D / G);
    out->k_res = clkv_tensor_4d(cache->k_res, a->res_dtype, B, H, a->residual, D);
    out->v_res = clkv_tensor_4d(cache->v_res, a->res_dtype, B, H, a->residual, D);
    out->n_quant = clkv_tensor_1d(cache->counts, CLKV_I32, B);
    out->n_res = clkv_tensor_1d(cache->counts, CLKV_I32, B);
    out->n_res.offset = (uint64_t)B * 4;
    out->flags = clkv_tensor_1d(cache->flags, CLKV_I32, 1);
    out->config = *a;
    out->quant_capacity = cq;
    out->max_length = cache->max_len;
    return CLKV_OK;
}

/* ---- append ---- */

static clkv_status validate_append(clkv_quant_cache *c, const clkv_quant_cache_append_args *a) {
    clkv_context *ctx = c->ctx;
    const clkv_quant_cache_create_args *cfg = &c->cfg;
    clkv_status st;
    if ((st = clkv__check_tensor(ctx, &a->k, "k", 4, CLKV_FLOAT_DTYPES)) ||
        (st = clkv__check_tensor(ctx, &a->v, "v", 4, CLKV_FLOAT_DTYPES)) ||
        (st = clkv__check_optional_tensor(ctx, &a->counts, "counts", 1, CLKV_DTYPE_BIT(CLKV_I32))))
        return st;
    if ((st = clkv__check_dim(ctx, &a->k, "k", 0, cfg->batch, "batch of the cache")) ||
        (st = clkv__check_dim(ctx, &a->k, "k", 1, cfg->kv_heads, "KV heads of the cache")) ||
        (st = clkv__check_dim(ctx, &a->k, "k", 3, cfg->head_dim, "head dim of the cache")))
        return st;
    for (int i = 0; i < 4; i++)
        if ((st = clkv__check_dim(ctx, &a->v, "v", i, a->k.dims[i], "must match k")))
            return st;
    if (a->counts.buf &&
        (st = clkv__check_dim(ctx, &a->counts, "counts", 0, cfg->batch, "batch of the cache")))
        return st;
    const int64_t n = a->k.dims[2];
    if (n > INT32_MAX)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "k: n = dims[2] = %lld exceeds 2^31-1",
                          (long long)n);
    if (c->max_len + n > cfg->capacity)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE,
                          "capacity: appending n = %lld tokens to sequences of up to %lld "
                          "tokens (host-side bound) exceeds the capacity of %lld tokens",
                          (long long)n, (long long)c->max_len, (long long)cfg->capacity);
    return CLKV_OK;
}

typedef struct append_kernels {
    cl_kernel quant, residual, advance; /* n > 1 */
    cl_kernel token;                    /* n = 1: the three steps in one launch */
} append_kernels;

static clkv_status get_kernels(clkv_quant_cache *c, const clkv_quant_cache_append_args *a,
                               int64_t n, append_kernels *k) {
    clkv_defs d;
    clkv__defs_init(&d);
    clkv__defs_int(&d, "X_DTYPE", a->k.dtype);
    clkv__defs_int(&d, "V_DTYPE", a->v.dtype);
    clkv__defs_int(&d, "META_DTYPE", c->cfg.meta_dtype);
    clkv__defs_int(&d, "RES_DTYPE", c->cfg.res_dtype);
    clkv_status st;
    k->quant = k->residual = k->advance = k->token = NULL;
    if (n == 1)
        return clkv__get_kernel(c->ctx, KERNEL_FILE, &d, "cache_append_token", &k->token);
    if ((st = clkv__get_kernel(c->ctx, KERNEL_FILE, &d, "cache_quant", &k->quant)) ||
        (st = clkv__get_kernel(c->ctx, KERNEL_FILE, &d, "cache_write_residual", &k->residual)) ||
        (st = clkv__get_kernel(c->ctx, KERNEL_FILE, &d, "cache_advance", &k->advance)))
        return st;
    return CLKV_OK;
}

static clkv_status launch_1d(clkv_context *ctx, cl_kernel kern, const char *name, int64_t items,
                             cl_event *done) {
    size_t wg = APPEND_WG;
    if (wg > ctx->info.max_work_group_size)
        wg = ctx->info.max_work_group_size;
    const size_t gsz = (size_t)((items + (int64_t)wg - 1) / (int64_t)wg) * wg;
    return clkv__launch(ctx, kern, name, 1, &gsz, &wg, 0, done);
}

/* The kernel arguments shared by cache_quant and cache_write_residual: both appended
 * tensors with their cache buffers (10 each), then the per-sequence counts (5). */
typedef struct side_args {
    cl_mem x;
    cl_long off, sb, sh, sn;
    cl_mem res, codes, scale, minv;
    cl_int bits;
} side_args;

static side_args side_of(const clkv_quant_cache *c, const clkv_tensor *x, int keys) {
    side_args s = {.x = x->buf,
                   .off = clkv__elem_offset(x),
                   .sb = x->strides[0],
                   .sh = x->strides[1],
                   .sn = x->strides[2],
                   .res = keys ? c->k_res : c->v_res,
                   .codes = keys ? c->k_codes : c->v_codes,
                   .scale = keys ? c->k_scale : c->v_scale,
                   .minv = keys ? c->k_min : c->v_min,
                   .bits = keys ? c->cfg.k_bits : c->cfg.v_bits};
    return s;
}

#define SIDE_ARGS(s)                                                                               \
    CLKV_ARG((s).x), CLKV_ARG((s).off), CLKV_ARG((s).sb), CLKV_ARG((s).sh), CLKV_ARG((s).sn),      \
        CLKV_ARG((s).res), CLKV_ARG((s).codes), CLKV_ARG((s).scale), CLKV_ARG((s).minv),           \
        CLKV_ARG((s).bits)

clkv_status clkv_quant_cache_append(clkv_quant_cache *cache,
                                    const clkv_quant_cache_append_args *args, cl_event *done) {
    if (!cache)
        return clkv__fail(NULL, CLKV_ERR_ARG_NULL, "cache: quantized cache is NULL");
    if (!args)
        return clkv__fail(cache->ctx, CLKV_ERR_ARG_NULL, "args: argument struct is NULL");
    clkv_status st = validate_append(cache, args);
    if (st)
        return st;
    clkv_context *ctx = cache->ctx;
    const clkv_quant_cache_create_args *cfg = &cache->cfg;
    const int64_t n = args->k.dims[2];
    if (n == 0)
        return clkv__marker(ctx, done);
    append_kernels k;
    if ((st = get_kernels(cache, args, n, &k)))
        return st;
    const side_args sk = side_of(cache, &args->k, 1), sv = side_of(cache, &args->v, 0);
    const cl_mem cnt = args->counts.buf;
    const cl_long cnt_off = cnt ? clkv__elem_offset(&args->counts) : 0, CQ = cache->cq;
    const cl_int has_cnt = cnt != NULL, nn = (cl_int)n, B = (cl_int)cfg->batch,
                 H = (cl_int)cfg->kv_heads, D = (cl_int)cfg->head_dim, NR = cfg->residual,
                 group = cfg->group;
    const int64_t bh = cfg->batch * cfg->kv_heads;

    /* 1. quantize the blocks the append can complete (the residual holds at most n_r - 1
     * tokens, so at most (n_r - 1 + n) / n_r blocks) */
    const int64_t nb = (cfg->residual - 1 + n) / cfg->residual;
    const cl_long nk = bh * nb * (cfg->residual / cfg->group) * cfg->head_dim;
    const cl_long nq_total = nk + bh * nb * cfg->residual * (cfg->head_dim / cfg->group);
    const cl_int NB = (cl_int)nb;
    /* 2. the residual receives at most n_r - 1 of the appended tokens, the last ones */
    const int64_t nrw = n < cfg->residual - 1 ? n : cfg->residual - 1;
    const cl_long nr_total = 2 * bh * nrw * cfg->head_dim;
    const cl_int NRW = (cl_int)nrw;
    clkv__log(ctx, "quant cache append: n=%lld counts=%d blocks<=%lld residual<=%lld bound=%lld",
              (long long)n, cnt != NULL, (long long)nb, (long long)nrw, (long long)cache->max_len);

    if (k.token) { /* n = 1 (decode): one launch, its last work-group advances the counters */
        const cl_long nrt = 2 * bh * cfg->head_dim, total = nq_total + nrt;
        cl_mem ticket;
        if ((st = clkv__counters(ctx, 1, &ticket)) ||
            (st = clkv__set_args(ctx, k.token, "cache_append_token", 35, SIDE_ARGS(sk),
                                 SIDE_ARGS(sv), CLKV_ARG(cnt), CLKV_ARG(cnt_off), CLKV_ARG(has_cnt),
                                 CLKV_ARG(cache->counts), CLKV_ARG(cache->flags), CLKV_ARG(nk),
                                 CLKV_ARG(nq_total), CLKV_ARG(total), CLKV_ARG(B), CLKV_ARG(H),
                                 CLKV_ARG(D), CLKV_ARG(NR), CLKV_ARG(CQ), CLKV_ARG(group),
                                 CLKV_ARG(ticket))) ||
            (st = launch_1d(ctx, k.token, "cache_append_token", total, done)))
            return st;
        cache->max_len += n;
        return CLKV_OK;
    }
    if ((st = clkv__set_args(ctx, k.quant, "cache_quant", 35, SIDE_ARGS(sk), SIDE_ARGS(sv),
                             CLKV_ARG(cnt), CLKV_ARG(cnt_off), CLKV_ARG(has_cnt), CLKV_ARG(nn),
                             CLKV_ARG(cache->counts), CLKV_ARG(cache->flags), CLKV_ARG(nk),
                             CLKV_ARG(nq_total), CLKV_ARG(B), CLKV_ARG(H), CLKV_ARG(D),
                             CLKV_ARG(NR), CLKV_ARG(NB), CLKV_ARG(CQ), CLKV_ARG(group))) ||
        (st = launch_1d(ctx, k.quant, "cache_quant", nq_total, NULL)))
        return st;
    if (nr_total > 0 &&
        ((st =
              clkv__set_args(ctx, k.residual, "cache_write_residual", 31, SIDE_ARGS(sk),
                             SIDE_ARGS(sv), CLKV_ARG(cnt), CLKV_ARG(cnt_off), CLKV_ARG(has_cnt),
                             CLKV_ARG(nn), CLKV_ARG(cache->counts), CLKV_ARG(nr_total), CLKV_ARG(B),
                             CLKV_ARG(H), CLKV_ARG(D), CLKV_ARG(NR), CLKV_ARG(NRW))) ||
         (st = launch_1d(ctx, k.residual, "cache_write_residual", nr_total, NULL))))
        return st;
    /* 3. advance the counters */
    if ((st = clkv__set_args(ctx, k.advance, "cache_advance", 7, CLKV_ARG(cnt), CLKV_ARG(cnt_off),
                             CLKV_ARG(has_cnt), CLKV_ARG(nn), CLKV_ARG(cache->counts), CLKV_ARG(B),
                             CLKV_ARG(NR))) ||
        (st = launch_1d(ctx, k.advance, "cache_advance", cfg->batch, done)))
        return st;
    cache->max_len += n;
    return CLKV_OK;
}
