/* clkv_offload_store: host-resident K/V rows (SPEC §4 Offload) — allocation (NVIDIA
 * host-located buffers, or pinned ALLOC_HOST_PTR buffers), rectangular transfers, and
 * clkv_offload_write. The gather is in host/gather_rows.c. */
#include <stdlib.h>
#include <string.h>

#include "host/offload_internal.h"

/* cl_nv_create_buffer (not in the Khronos headers of every distribution). */
typedef cl_bitfield clkv_mem_flags_nv;
#define CLKV_MEM_LOCATION_HOST_NV (1 << 0)
typedef cl_mem(CL_API_CALL *create_buffer_nv_fn)(cl_context, cl_mem_flags, clkv_mem_flags_nv,
                                                 size_t, void *, cl_int *);

static int device_has_extension(cl_device_id dev, const char *name) {
    size_t n = 0;
    if (clGetDeviceInfo(dev, CL_DEVICE_EXTENSIONS, 0, NULL, &n) != CL_SUCCESS || n == 0)
        return 0;
    char *s = (char *)malloc(n + 1);
    if (!s)
        return 0;
    int found = 0;
    if (clGetDeviceInfo(dev, CL_DEVICE_EXTENSIONS, n, s, NULL) == CL_SUCCESS) {
        s[n] = '\0';
        const size_t len = strlen(name);
        for (const char *p = strstr(s, name); p && !found; p = strstr(p + 1, name))
            found = (p == s || p[-1] == ' ') && (p[len] == ' ' || p[len] == '\0');
    }
    free(s);
    return found;
}

static create_buffer_nv_fn lookup_create_buffer_nv(clkv_context *ctx) {
    if (!device_has_extension(ctx->device, "cl_nv_create_buffer"))
        return NULL;
    return (create_buffer_nv_fn)clGetExtensionFunctionAddressForPlatform(ctx->platform,
                                                                         "clCreateBufferNV");
}

static int device_reads_host_memory(clkv_context *ctx) {
    if (ctx->info.kind == CLKV_DEVICE_KIND_CPU)
        return 1;
    cl_bool unified = CL_FALSE;
    if (clGetDeviceInfo(ctx->device, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof unified, &unified,
                        NULL) != CL_SUCCESS)
        return 0;
    return unified == CL_TRUE;
}

void clkv_offload_store_destroy(clkv_offload_store *s) {
    if (!s)
        return;
    for (int t = 0; t < 2; t++) {
        for (int i = 0; s->buf[t] && i < s->nbuf; i++) {
            if (!s->buf[t][i])
                continue;
            if (s->map[t] && s->map[t][i])
                clEnqueueUnmapMemObject(s->ctx->queue, s->buf[t][i], s->map[t][i], 0, NULL, NULL);
        }
    }
    if (s->stage && s->stage_map)
        clEnqueueUnmapMemObject(s->ctx->queue, s->stage, s->stage_map, 0, NULL, NULL);
    clFinish(s->ctx->queue); /* the unmaps complete before the buffers go */
    for (int t = 0; t < 2; t++) {
        for (int i = 0; s->buf[t] && i < s->nbuf; i++)
            if (s->buf[t][i])
                clReleaseMemObject(s->buf[t][i]);
        free(s->buf[t]);
        free(s->map[t]);
    }
    if (s->stage)
        clReleaseMemObject(s->stage);
    free(s->idx_host);
    free(s);
}

static clkv_status validate_desc(clkv_context *ctx, const clkv_offload_store_desc *d) {
    if (d->batch < 1 || d->batch > 65535)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "batch: %lld is outside [1, 65535]",
                          (long long)d->batch);
    if (d->kv_heads < 1 || d->kv_heads > 65535)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "kv_heads: %lld is outside [1, 65535]",
                          (long long)d->kv_heads);
    if (d->capacity < 1 || d->capacity > INT32_MAX)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "capacity: %lld is outside [1, 2^31-1]",
                          (long long)d->capacity);
    if (d->head_dim < 1 || d->head_dim > 4096)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "head_dim: %lld is outside [1, 4096]",
                          (long long)d->head_dim);
    if ((unsigned)d->dtype > 31u || !(CLKV_FLOAT_DTYPES & CLKV_DTYPE_BIT(d->dtype)))
        return clkv__fail(ctx, CLKV_ERR_ARG_DTYPE, "dtype: %s (%d) is not f32, f16 or bf16",
                          clkv_dtype_name(d->dtype), (int)d->dtype);
    if (d->mode != CLKV_OFFLOAD_AUTO && d->mode != CLKV_OFFLOAD_KERNEL_READ &&
        d->mode != CLKV_OFFLOAD_STAGING)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "mode: %d is not a clkv_offload_mode",
                          (int)d->mode);
    const uint64_t row = (uint64_t)d->head_dim * clkv_dtype_size(d->dtype);
    const uint64_t slices = (uint64_t)d->batch * (uint64_t)d->kv_heads;
    if ((uint64_t)d->capacity > UINT64_MAX / row / slices / 2)
        return clkv__fail(ctx, CLKV_ERR_ARG_OVERFLOW,
                          "capacity: %lld rows of %llu bytes in %llu slices overflow 64 bits",
                          (long long)d->capacity, (unsigned long long)row,
                          (unsigned long long)slices);
    return CLKV_OK;
}

clkv_status clkv_offload_store_create(clkv_context *ctx, const clkv_offload_store_desc *desc,
                                      clkv_offload_store **out) {
    if (!ctx)
        return clkv__fail(NULL, CLKV_ERR_ARG_NULL, "ctx: context is NULL");
    if (!out)
        return clkv__fail(ctx, CLKV_ERR_ARG_NULL, "out: output pointer is NULL");
    *out = NULL;
    if (!desc)
        return clkv__fail(ctx, CLKV_ERR_ARG_NULL, "desc: store description is NULL");
    clkv_status st = validate_desc(ctx, desc);
    if (st != CLKV_OK)
        return st;

    const uint32_t esize = clkv_dtype_size(desc->dtype);
    const uint64_t row_bytes = (uint64_t)desc->head_dim * esize;
    const uint64_t slice_bytes = row_bytes * (uint64_t)desc->capacity;
    uint64_t max_buf = ctx->info.max_alloc_bytes;
    if (desc->max_buffer_bytes > 0 && desc->max_buffer_bytes < max_buf)
        max_buf = desc->max_buffer_bytes;
    if (slice_bytes > max_buf)
        return clkv__fail(ctx, CLKV_ERR_DEVICE_LIMIT,
                          "capacity: one (b, kv head) slice needs %llu bytes but one buffer may "
                          "hold at most %llu",
                          (unsigned long long)slice_bytes, (unsigned long long)max_buf);
    const int64_t slices = desc->batch * desc->kv_heads;
    int64_t spb = (int64_t)(max_buf / slice_bytes);
    if (spb > slices)
        spb = slices;
    const int64_t nbuf = (slices + spb - 1) / spb;

    create_buffer_nv_fn create_nv = NULL;
    clkv_offload_mode mode = desc->mode;
    if (mode != CLKV_OFFLOAD_STAGING)
        create_nv = lookup_create_buffer_nv(ctx);
    if (mode == CLKV_OFFLOAD_AUTO)
        mode = (create_nv || device_reads_host_memory(ctx)) ? CLKV_OFFLOAD_KERNEL_READ
                                                            : CLKV_OFFLOAD_STAGING;

    clkv_offload_store *s = (clkv_offload_store *)calloc(1, sizeof *s);
    if (!s)
        return clkv__fail(ctx, CLKV_ERR_OUT_OF_HOST_MEMORY, "offload store: out of host memory");
    s->ctx = ctx;
    s->B = desc->batch;
    s->Hkv = desc->kv_heads;
    s->cap = desc->capacity;
    s->D = desc->head_dim;
    s->dtype = desc->dtype;
    s->esize = esize;
    s->mode = mode;
    s->host_nv = create_nv != NULL;
    s->nbuf = (int)nbuf;
    s->spb = spb;
    s->row_bytes = row_bytes;
    s->slice_bytes = slice_bytes;
    for (int t = 0; t < 2; t++) {
        s->buf[t] = (cl_mem *)calloc((size_t)nbuf, sizeof(cl_mem));
        s->map[t] = (unsigned char **)calloc((size_t)nbuf, sizeof(unsigned char *));
        if (!s->buf[t] || !s->map[t]) {
            clkv_offload_store_destroy(s);
            return clkv__fail(ctx, CLKV_ERR_OUT_OF_HOST_MEMORY,
                              "offload store: out of host memory");
        }
    }
    for (int t = 0; t < 2; t++) {
        for (int64_t i = 0; i < nbuf; i++) {
            const int64_t n_here = (i == nbuf - 1) ? slices - i * spb : spb;
            const size_t bytes = (size_t)((uint64_t)n_here * slice_bytes);
            cl_int err = CL_SUCCESS;
            if (create_nv)
                s->buf[t][i] = create_nv(ctx->cl_ctx, CL_MEM_READ_WRITE, CLKV_MEM_LOCATION_HOST_NV,
                                         bytes, NULL, &err);
            else
                s->buf[t][i] = clCreateBuffer(
                    ctx->cl_ctx, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, bytes, NULL, &err);
            if (err == CL_SUCCESS && mode == CLKV_OFFLOAD_STAGING)
                s->map[t][i] = (unsigned char *)clEnqueueMapBuffer(
                    ctx->queue, s->buf[t][i], CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, bytes, 0,
                    NULL, NULL, &err);
            if (err != CL_SUCCESS) {
                clkv_offload_store_destroy(s);
                return clkv__fail(ctx, err,
                                  "offload store: allocating buffer %lld of %lld (%zu bytes, %s) "
                                  "failed: %s",
                                  (long long)i, (long long)nbuf, bytes,
                                  create_nv ? "clCreateBufferNV host" : "ALLOC_HOST_PTR",
                                  clkv_status_string(err));
            }
        }
    }
    clkv__log(ctx,
              "offload store: B=%lld Hkv=%lld capacity=%lld D=%lld %s mode=%s host_nv=%d "
              "buffers=%lld x2 slices/buffer=%lld",
              (long long)s->B, (long long)s->Hkv, (long long)s->cap, (long long)s->D,
              clkv_dtype_name(s->dtype), mode == CLKV_OFFLOAD_STAGING ? "staging" : "kernel-read",
              s->host_nv, (long long)nbuf, (long long)spb);
    *out = s;
    return CLKV_OK;
}

clkv_status clkv_offload_store_get_info(const clkv_offload_store *s,
                                        clkv_offload_store_info *info) {
    if (!s)
        return clkv__fail(NULL, CLKV_ERR_ARG_NULL, "store: store is NULL");
    if (!info)
        return clkv__fail(s->ctx, CLKV_ERR_ARG_NULL, "info: output pointer is NULL");
    info->mode = s->mode;
    info->host_nv = s->host_nv;
    info->num_buffers = s->nbuf;
    info->slices_per_buffer = s->spb;
    info->bytes = 2 * s->slice_bytes * (uint64_t)(s->B * s->Hkv);
    return CLKV_OK;
}

/* NVIDIA's OpenCL (driver 580.159.04, H200, 2026-11-28) takes the buffer origin of
 * clEnqueue{Copy,Read,Write}BufferRect modulo 4 GiB without an error (4 KB rectangles right
 * at 4095.9 MiB, wrong from 4096 MiB; the plain copies, reads and writes right at 8.75 GiB).
 * So clkv__offload_rows uses rectangles only where every byte they touch in a buffer lies
 * below CLKV_RECT_LIMIT_MIB MiB (default 4096, read per call; 0 sends every transfer to the
 * plain calls, which is how the tests exercise them), and plain calls per contiguous run
 * else. Where rows are not contiguous (an NHD cache) that is one call per (row, head): a
 * prefill write of 1M tokens x 8 heads would be 8M enqueues. Rectangles on a sub-buffer
 * that starts near the rows might avoid it; not measured yet. */

/* One contiguous run: `bytes` at t_off of the tensor's buffer <-> o_off of the other side. */
static cl_int xfer_run(clkv_context *ctx, offload_xfer op, cl_mem t_buf, size_t t_off,
                       cl_mem other_buf, unsigned char *other_host, size_t o_off, size_t bytes,
                       cl_event *e) {
    if (op == XFER_COPY_TO_STORE)
        return clEnqueueCopyBuffer(ctx->queue, t_buf, other_buf, t_off, o_off, bytes, 0, NULL, e);
    if (op == XFER_READ_TO_HOST)
        return clEnqueueReadBuffer(ctx->queue, t_buf, CL_FALSE, t_off, bytes, other_host + o_off, 0,
                                   NULL, e);
    return clEnqueueWriteBuffer(ctx->queue, t_buf, CL_FALSE, t_off, bytes, other_host + o_off, 0,
                                NULL, e);
}

clkv_status clkv__offload_rows(clkv_context *ctx, offload_xfer op, const clkv_tensor *t, int64_t b,
                               int64_t h0, int64_t nh, int64_t t0, int64_t T, cl_mem other_buf,
                               unsigned char *other_host, size_t other_off, size_t other_slice,
                               size_t row_bytes, cl_event *ev) {
    const size_t es = clkv_dtype_size(t->dtype);
    const size_t base = (size_t)t->offset +
                        ((size_t)b * (size_t)t->strides[0] + (size_t)h0 * (size_t)t->strides[1] +
                         (size_t)t0 * (size_t)t->strides[2]) *
                            es;
    const size_t sp = (size_t)t->strides[1] * es;
    /* Row pitch; a single row may have any stride (callers reject overlapping rows). */
    const size_t rp = T == 1 ? row_bytes : (size_t)t->strides[2] * es;
    /* One 3-D rectangle when the tensor's head pitch is a multiple of its row pitch and
     * covers T rows (what clEnqueue*Rect require); else a 2-D rectangle per head. */
    const int one_rect = nh == 1 || (sp % rp == 0 && sp >= (size_t)T * rp);
    const int64_t nrect = one_rect ? 1 : nh;
    if (T == 0 || nh == 0)
        return clkv__marker(ctx, ev);
    /* the last byte + 1 touched in the tensor's buffer and in the store buffer */
    const size_t t_end = base + (size_t)(nh - 1) * sp + (size_t)(T - 1) * rp + row_bytes;
    const size_t o_end = other_off + (size_t)(nh - 1) * other_slice + (size_t)T * row_bytes;
    const int mib = clkv__env_int("CLKV_RECT_LIMIT_MIB", 4096);
    const uint64_t limit = (uint64_t)(mib < 0 ? 4096 : mib) << 20;
    if (t_end > limit || (op == XFER_COPY_TO_STORE && o_end > limit)) {
        /* plain calls: one per head where its rows are contiguous, else one per row */
        const int64_t runs = rp == row_bytes ? 1 : T;
        const size_t run_bytes = rp == row_bytes ? (size_t)T * row_bytes : row_bytes;
        for (int64_t h = 0; h < nh; h++)
            for (int64_t r = 0; r < runs; r++) {
                const int last = h == nh - 1 && r == runs - 1;
                const cl_int err = xfer_run(
                    ctx, op, t->buf, base + (size_t)h * sp + (size_t)r * rp, other_buf, other_host,
                    other_off + (size_t)h * other_slice + (size_t)r * row_bytes, run_bytes,
                    last ? ev : NULL);
                if (err != CL_SUCCESS)
                    return clkv__fail_cl(ctx, err, "offload rows: plain buffer transfer");
            }
        return CLKV_OK;
    }
    for (int64_t r = 0; r < nrect; r++) {
        const size_t tb = base + (size_t)r * sp;
        const size_t ob = other_off + (size_t)r * other_slice;
        const size_t region[3] = {row_bytes, (size_t)T, one_rect ? (size_t)nh : 1};
        const size_t t_origin[3] = {tb, 0, 0}, o_origin[3] = {ob, 0, 0};
        /* A 2-D rectangle takes slice pitch 0 (computed); a 3-D one the real pitches. */
        const size_t t_sp = one_rect && nh > 1 ? sp : 0;
        const size_t o_sp = one_rect && nh > 1 ? other_slice : 0;
        const size_t t_rp = rp;
        cl_event *e = (r == nrect - 1) ? ev : NULL;
        cl_int err;
        const char *what;
        if (op == XFER_COPY_TO_STORE) {
            err = clEnqueueCopyBufferRect(ctx->queue, t->buf, other_buf, t_origin, o_origin, region,
                                          t_rp, t_sp, row_bytes, o_sp, 0, NULL, e);
            what = "clEnqueueCopyBufferRect (tensor -> offload store)";
        } else if (op == XFER_READ_TO_HOST) {
            const size_t zero[3] = {0, 0, 0};
            err = clEnqueueReadBufferRect(ctx->queue, t->buf, CL_FALSE, t_origin, zero, region,
                                          t_rp, t_sp, row_bytes, o_sp, other_host + ob, 0, NULL, e);
            what = "clEnqueueReadBufferRect (tensor -> pinned host rows)";
        } else {
            const size_t zero[3] = {0, 0, 0};
            err =
                clEnqueueWriteBufferRect(ctx->queue, t->buf, CL_FALSE, t_origin, zero, region, t_rp,
                                         t_sp, row_bytes, o_sp, other_host + ob, 0, NULL, e);
            what = "clEnqueueWriteBufferRect (pinned staging -> tensor)";
        }
        if (err != CL_SUCCESS)
            return clkv__fail_cl(ctx, err, what);
    }
    return CLKV_OK;
}

static clkv_status validate_write(clkv_context *ctx, const clkv_offload_store *s,
                                  const clkv_offload_write_args *a) {
    clkv_status st;
    const uint32_t mask = CLKV_DTYPE_BIT(s->dtype);
    if ((st = clkv__check_tensor(ctx, &a->k, "k", 4, mask)) ||
        (st = clkv__check_tensor(ctx, &a->v, "v", 4, mask)))
        return st;
    if ((st = clkv__check_dim(ctx, &a->k, "k", 0, s->B, "batch of the store")) ||
        (st = clkv__check_dim(ctx, &a->k, "k", 1, s->Hkv, "KV heads of the store")) ||
        (st = clkv__check_dim(ctx, &a->k, "k", 3, s->D, "head dim of the store")))
        return st;
    for (int i = 0; i < 4; i++)
        if ((st = clkv__check_dim(ctx, &a->v, "v", i, a->k.dims[i], "must match k")))
            return st;
    const int64_t T = a->k.dims[2];
    for (int i = 0; i < 2; i++) {
        const clkv_tensor *t = i == 0 ? &a->k : &a->v;
        if (T > 1 && t->strides[2] < s->D)
            return clkv__fail(ctx, CLKV_ERR_ARG_STRIDE,
                              "%s: row stride %lld is smaller than D = %lld (overlapping rows)",
                              i == 0 ? "k" : "v", (long long)t->strides[2], (long long)s->D);
    }
    if (a->dst_start < 0 || a->dst_start > s->cap - T)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE,
                          "dst_start: %lld + %lld rows exceeds the store's capacity %lld",
                          (long long)a->dst_start, (long long)T, (long long)s->cap);
    return CLKV_OK;
}

clkv_status clkv__offload_check_call(clkv_context *ctx, const clkv_offload_store *s,
                                     const void *args) {
    if (!ctx)
        return clkv__fail(NULL, CLKV_ERR_ARG_NULL, "ctx: context is NULL");
    if (!s)
        return clkv__fail(ctx, CLKV_ERR_ARG_NULL, "store: store is NULL");
    if (!args)
        return clkv__fail(ctx, CLKV_ERR_ARG_NULL, "args: argument struct is NULL");
    if (s->ctx != ctx)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "store: created on another context");
    return CLKV_OK;
}

clkv_status clkv__offload_write_rows(clkv_context *ctx, clkv_offload_store *s, const clkv_tensor *k,
                                     const clkv_tensor *v, int64_t b0, int64_t b1, int64_t src_t0,
                                     int64_t T, int64_t dst_start, cl_event *done) {
    if (T == 0 || b1 <= b0)
        return clkv__marker(ctx, done);
    const offload_xfer op =
        s->mode == CLKV_OFFLOAD_STAGING ? XFER_READ_TO_HOST : XFER_COPY_TO_STORE;
    const size_t row_off = (size_t)dst_start * (size_t)s->row_bytes;
    for (int t = 0; t < 2; t++) {
        const clkv_tensor *src = t == 0 ? k : v;
        for (int64_t b = b0; b < b1; b++) {
            /* the heads of sequence b, in runs that share a buffer */
            for (int64_t h0 = 0; h0 < s->Hkv;) {
                const int64_t slice = b * s->Hkv + h0, bi = slice / s->spb,
                              in_buf = slice - bi * s->spb;
                int64_t nh = s->spb - in_buf;
                if (nh > s->Hkv - h0)
                    nh = s->Hkv - h0;
                const int last = t == 1 && b == b1 - 1 && h0 + nh == s->Hkv;
                clkv_status st = clkv__offload_rows(
                    ctx, op, src, b, h0, nh, src_t0, T, s->buf[t][bi], s->map[t][bi],
                    (size_t)in_buf * s->slice_bytes + row_off, (size_t)s->slice_bytes,
                    (size_t)s->row_bytes, last ? done : NULL);
                if (st != CLKV_OK)
                    return st;
                h0 += nh;
            }
        }
    }
    return CLKV_OK;
}

clkv_status clkv_offload_write(clkv_context *ctx, clkv_offload_store *s,
                               const clkv_offload_write_args *args, cl_event *done) {
    clkv_status st = clkv__offload_check_call(ctx, s, args);
    if (st == CLKV_OK)
        st = validate_write(ctx, s, args);
    if (st != CLKV_OK)
        return st;
    return clkv__offload_write_rows(ctx, s, &args->k, &args->v, 0, s->B, 0, args->k.dims[2],
                                    args->dst_start, done);
}
