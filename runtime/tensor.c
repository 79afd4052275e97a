/* Tensor descriptor constructors and the validation helpers every operator uses. */
#include <stdio.h>
#include <string.h>

#include "runtime/internal.h"

uint32_t clkv_dtype_size(clkv_dtype dtype) {
    switch (dtype) {
    case CLKV_F32:
    case CLKV_I32:
    case CLKV_U32:
        return 4;
    case CLKV_F16:
    case CLKV_BF16:
        return 2;
    case CLKV_U8:
        return 1;
    }
    return 0;
}

const char *clkv_dtype_name(clkv_dtype dtype) {
    switch (dtype) {
    case CLKV_F32:
        return "f32";
    case CLKV_F16:
        return "f16";
    case CLKV_BF16:
        return "bf16";
    case CLKV_I32:
        return "i32";
    case CLKV_U8:
        return "u8";
    case CLKV_U32:
        return "u32";
    }
    return "?";
}

static clkv_tensor make(cl_mem buf, clkv_dtype dtype, int ndim, const int64_t *dims) {
    clkv_tensor t;
    memset(&t, 0, sizeof t);
    t.buf = buf;
    t.dtype = dtype;
    t.ndim = ndim;
    int64_t stride = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        t.dims[i] = dims[i];
        t.strides[i] = stride;
        stride *= dims[i] > 0 ? dims[i] : 1;
    }
    return t;
}

clkv_tensor clkv_tensor_1d(cl_mem buf, clkv_dtype dtype, int64_t d0) {
    int64_t d[1] = {d0};
    return make(buf, dtype, 1, d);
}

clkv_tensor clkv_tensor_2d(cl_mem buf, clkv_dtype dtype, int64_t d0, int64_t d1) {
    int64_t d[2] = {d0, d1};
    return make(buf, dtype, 2, d);
}

clkv_tensor clkv_tensor_3d(cl_mem buf, clkv_dtype dtype, int64_t d0, int64_t d1, int64_t d2) {
    int64_t d[3] = {d0, d1, d2};
    return make(buf, dtype, 3, d);
}

clkv_tensor clkv_tensor_4d(cl_mem buf, clkv_dtype dtype, int64_t d0, int64_t d1, int64_t d2,
                           int64_t d3) {
    int64_t d[4] = {d0, d1, d2, d3};
    return make(buf, dtype, 4, d);
}

clkv_tensor clkv_tensor_4d_nhd(cl_mem buf, clkv_dtype dtype, int64_t B, int64_t H, int64_t L,
                               int64_t D) {
    /* Storage [B, L, H, D]; logical view [B, H, L, D]. */
    int64_t storage[4] = {B, L, H, D};
    clkv_tensor s = make(buf, dtype, 4, storage);
    clkv_tensor t = s;
    t.dims[1] = H;
    t.dims[2] = L;
    t.strides[1] = s.strides[2];
    t.strides[2] = s.strides[1];
    return t;
}

clkv_tensor clkv_tensor_none(void) {
    clkv_tensor t;
    memset(&t, 0, sizeof t);
    return t;
}

int clkv__tensor_extent(const clkv_tensor *t, uint64_t *bytes) {
    uint64_t esize = clkv_dtype_size(t->dtype);
    uint64_t last = 0; /* index of the highest element touched */
    for (int i = 0; i < t->ndim; i++) {
        if (t->dims[i] == 0) {
            *bytes = 0;
            return 0;
        }
    }
    for (int i = 0; i < t->ndim; i++) {
        uint64_t term;
        if (__builtin_mul_overflow((uint64_t)(t->dims[i] - 1), (uint64_t)t->strides[i], &term) ||
            __builtin_add_overflow(last, term, &last))
            return -1;
    }
    uint64_t end;
    if (__builtin_add_overflow(last, (uint64_t)1, &end) ||
        __builtin_mul_overflow(end, esize, &end) || __builtin_add_overflow(end, t->offset, &end))
        return -1;
    *bytes = end;
    return 0;
}

cl_long clkv__elem_offset(const clkv_tensor *t) {
    return (cl_long)(t->offset / clkv_dtype_size(t->dtype));
}

int clkv__rows_aligned(const clkv_tensor *t, int64_t elems) {
    if (clkv__elem_offset(t) % elems != 0)
        return 0;
    for (int i = 0; i < t->ndim - 1; i++)
        if (t->strides[i] % elems != 0)
            return 0;
    return 1;
}

static void dtype_list(uint32_t mask, char *out, size_t cap) {
    out[0] = '\0';
    for (int d = 0; d <= CLKV_U32; d++) {
        if (mask & CLKV_DTYPE_BIT(d)) {
            size_t n = strlen(out);
            snprintf(out + n, cap - n, "%s%s", n ? "|" : "", clkv_dtype_name((clkv_dtype)d));
        }
    }
}

clkv_status clkv__check_tensor(clkv_context *ctx, const clkv_tensor *t, const char *name, int ndim,
                               uint32_t dtype_mask) {
    if (!t)
        return clkv__fail(ctx, CLKV_ERR_ARG_NULL, "%s: descriptor is NULL", name);
    if (!t->buf)
        return clkv__fail(ctx, CLKV_ERR_ARG_NULL, "%s: buffer is NULL (required)", name);
    if (clkv_dtype_size(t->dtype) == 0 || !(dtype_mask & CLKV_DTYPE_BIT(t->dtype))) {
        char allowed[64];
        dtype_list(dtype_mask, allowed, sizeof allowed);
        return clkv__fail(ctx, CLKV_ERR_ARG_DTYPE, "%s: dtype %s (%d) not accepted, expected %s",
                          name, clkv_dtype_name(t->dtype), (int)t->dtype, allowed);
    }
    if (t->ndim != ndim)
        return clkv__fail(ctx, CLKV_ERR_ARG_SHAPE, "%s: ndim = %d, expected %d", name, (int)t->ndim,
                          ndim);
    for (int i = 0; i < ndim; i++) {
        if (t->dims[i] < 0)
            return clkv__fail(ctx, CLKV_ERR_ARG_SHAPE, "%s: dims[%d] = %lld is negative", name, i,
                              (long long)t->dims[i]);
        if (t->strides[i] < 0)
            return clkv__fail(ctx, CLKV_ERR_ARG_STRIDE, "%s: strides[%d] = %lld is negative", name,
                              i, (long long)t->strides[i]);
    }
    if (t->strides[ndim - 1] != 1)
        return clkv__fail(ctx, CLKV_ERR_ARG_STRIDE,
                          "%s: strides[%d] = %lld, the last dim must be contiguous (stride 1)",
                          name, ndim - 1, (long long)t->strides[ndim - 1]);
    if (t->offset % clkv_dtype_size(t->dtype) != 0)
        return clkv__fail(ctx, CLKV_ERR_ARG_ALIGNMENT,
                          "%s: byte offset %llu is not a multiple of the %s element size %u", name,
                          (unsigned long long)t->offset, clkv_dtype_name(t->dtype),
                          clkv_dtype_size(t->dtype));
    uint64_t extent;
    if (clkv__tensor_extent(t, &extent) != 0)
        return clkv__fail(ctx, CLKV_ERR_ARG_OVERFLOW,
                          "%s: the byte extent of dims/strides overflows 64 bits", name);
    size_t size = 0;
    cl_int err = clGetMemObjectInfo(t->buf, CL_MEM_SIZE, sizeof size, &size, NULL);
    if (err != CL_SUCCESS)
        return clkv__fail(ctx, err, "%s: buffer is not a valid cl_mem (%s)", name,
                          clkv_status_string(err));
    if (extent > (uint64_t)size)
        return clkv__fail(ctx, CLKV_ERR_ARG_BUFFER_SIZE,
                          "%s: descriptor touches %llu bytes but the buffer holds %llu", name,
                          (unsigned long long)extent, (unsigned long long)size);
    return CLKV_OK;
}

clkv_status clkv__check_optional_tensor(clkv_context *ctx, const clkv_tensor *t, const char *name,
                                        int ndim, uint32_t dtype_mask) {
    if (!t || !t->buf)
        return CLKV_OK;
    return clkv__check_tensor(ctx, t, name, ndim, dtype_mask);
}

clkv_status clkv__check_dim(clkv_context *ctx, const clkv_tensor *t, const char *name, int i,
                            int64_t expected, const char *why) {
    if (t->dims[i] == expected)
        return CLKV_OK;
    return clkv__fail(ctx, CLKV_ERR_ARG_SHAPE, "%s: dims[%d] = %lld, expected %lld (%s)", name, i,
                      (long long)t->dims[i], (long long)expected, why);
}
