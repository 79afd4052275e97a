/* Synthetic data for the clkv tool. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "runtime/internal.h"
#include "tool_data.h"

/* Keep in sync with clkv_tool_mix / clkv_tool_hash in cl_kernels/bandwidth.cl. */
static uint32_t tool_mix(uint32_t h) {
    h ^= h >> 16;
    h *= 0x85EBCA6Bu;
    h ^= h >> 13;
    h *= 0xC2B2AE35u;
    h ^= h >> 16;
    return h;
}

static uint32_t tool_hash(uint64_t index, uint32_t seed) {
    uint32_t hi = tool_mix((uint32_t)(index >> 32) + seed * 0x9E3779B9u + 0x7F4A7C15u);
    return tool_mix((uint32_t)index ^ hi);
}

float tool_rand_value(uint64_t index, uint32_t seed, float scale) {
    uint32_t h = tool_hash(index, seed);
    float u = (float)(h >> 8) * (1.0f / 8388608.0f) - 1.0f;
    return u * scale;
}

uint16_t tool_f32_to_bf16(float x) {
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    if ((b & 0x7FFFFFFFu) > 0x7F800000u) {
        return (uint16_t)((b >> 16) | 0x40u);
    }
    b += 0x7FFFu + ((b >> 16) & 1u);
    return (uint16_t)(b >> 16);
}

float tool_bf16_to_f32(uint16_t h) {
    uint32_t b = (uint32_t)h << 16;
    float x;
    memcpy(&x, &b, sizeof x);
    return x;
}

uint16_t tool_f32_to_f16(float x) {
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    uint16_t sign = (uint16_t)((b >> 16) & 0x8000u);
    uint32_t ax = b & 0x7FFFFFFFu;
    if (ax > 0x7F800000u) {
        return (uint16_t)(sign | 0x7E00u);
    }
    if (ax >= 0x477FF000u) { /* >= 65520 rounds to infinity */
        return (uint16_t)(sign | 0x7C00u);
    }
    if (ax >= 0x38800000u) { /* normal: >= 2^-14 */
        uint32_t r = ax - 0x38000000u;
        r += 0xFFFu + ((r >> 13) & 1u);
        return (uint16_t)(sign | (r >> 13));
    }
    if (ax <= 0x33000000u) { /* <= 2^-25: rounds to zero (the tie goes to even 0) */
        return sign;
    }
    uint32_t e = ax >> 23;
    uint32_t m = (ax & 0x7FFFFFu) | 0x800000u;
    uint32_t shift = 126u - e; /* 14..24 */
    uint32_t q = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) {
        q++;
    }
    return (uint16_t)(sign | q);
}

float tool_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1Fu;
    uint32_t m = h & 0x3FFu;
    uint32_t b;
    if (e == 0x1F) {
        b = sign | 0x7F800000u | (m << 13);
    } else if (e != 0) {
        b = sign | ((e + 112u) << 23) | (m << 13);
    } else if (m == 0) {
        b = sign;
    } else {
        float v = ldexpf((float)m, -24);
        return sign ? -v : v;
    }
    float x;
    memcpy(&x, &b, sizeof x);
    return x;
}

float tool_round_to(clkv_dtype dtype, float x) {
    switch (dtype) {
    case CLKV_BF16:
        return tool_bf16_to_f32(tool_f32_to_bf16(x));
    case CLKV_F16:
        return tool_f16_to_f32(tool_f32_to_f16(x));
    default:
        return x;
    }
}

void tool_store(void *dst, clkv_dtype dtype, size_t i, float x) {
    switch (dtype) {
    case CLKV_BF16:
        ((uint16_t *)dst)[i] = tool_f32_to_bf16(x);
        break;
    case CLKV_F16:
        ((uint16_t *)dst)[i] = tool_f32_to_f16(x);
        break;
    default:
        ((float *)dst)[i] = x;
        break;
    }
}

float tool_load(const void *src, clkv_dtype dtype, size_t i) {
    switch (dtype) {
    case CLKV_BF16:
        return tool_bf16_to_f32(((const uint16_t *)src)[i]);
    case CLKV_F16:
        return tool_f16_to_f32(((const uint16_t *)src)[i]);
    default:
        return ((const float *)src)[i];
    }
}

clkv_status tool_buffer(clkv_context *ctx, const char *name, uint64_t bytes, cl_mem *out) {
    *out = NULL;
    const clkv_device_info *info = clkv_context_device_info(ctx);
    if (bytes == 0) {
        bytes = 1;
    }
    if (bytes > info->max_alloc_bytes || bytes > (uint64_t)SIZE_MAX) {
        return clkv__fail(ctx, CLKV_ERR_DEVICE_LIMIT,
                          "%s: %llu bytes exceed the device's largest allocation (%llu bytes)",
                          name, (unsigned long long)bytes,
                          (unsigned long long)info->max_alloc_bytes);
    }
    cl_int err = CL_SUCCESS;
    cl_mem m =
        clCreateBuffer(clkv_context_cl_context(ctx), CL_MEM_READ_WRITE, (size_t)bytes, NULL, &err);
    if (err != CL_SUCCESS || !m) {
        char what[160];
        snprintf(what, sizeof what, "clCreateBuffer(%s, %llu bytes)", name,
                 (unsigned long long)bytes);
        return clkv__fail_cl(ctx, err != CL_SUCCESS ? err : CL_OUT_OF_RESOURCES, what);
    }
    *out = m;
    return CLKV_OK;
}

clkv_status tool_fill_random(clkv_context *ctx, cl_mem buf, clkv_dtype dtype, uint64_t count,
                             uint32_t seed, float scale) {
    if (count == 0) {
        return CLKV_OK;
    }
    clkv_defs defs;
    clkv__defs_init(&defs);
    cl_kernel k = NULL;
    clkv_status st = clkv__get_kernel(ctx, "bandwidth.cl", &defs, "clkv_tool_fill", &k);
    if (st != CLKV_OK) {
        return st;
    }
    cl_ulong n = count;
    cl_int dt = (cl_int)dtype;
    cl_uint sd = seed;
    cl_float sc = scale;
    st = clkv__set_args(ctx, k, "clkv_tool_fill", 5, CLKV_ARG(buf), CLKV_ARG(n), CLKV_ARG(dt),
                        CLKV_ARG(sd), CLKV_ARG(sc));
    if (st != CLKV_OK) {
        return st;
    }
    const clkv_device_info *info = clkv_context_device_info(ctx);
    size_t local = info->kind == CLKV_DEVICE_KIND_GPU ? 256 : 16;
    if (local > info->max_work_group_size) {
        local = (size_t)info->max_work_group_size;
    }
    uint64_t groups = (count + local - 1) / local;
    uint64_t max_groups = (uint64_t)(info->compute_units ? info->compute_units : 1) *
                          (info->kind == CLKV_DEVICE_KIND_GPU ? 64u : 8u);
    if (groups > max_groups) {
        groups = max_groups; /* the kernel loops over the rest */
    }
    size_t global = (size_t)(groups * local);
    return clkv__launch(ctx, k, "clkv_tool_fill", 1, &global, &local, 0, NULL);
}

clkv_status tool_write(clkv_context *ctx, cl_mem buf, const void *src, size_t bytes) {
    cl_int err =
        clEnqueueWriteBuffer(clkv_context_queue(ctx), buf, CL_TRUE, 0, bytes, src, 0, NULL, NULL);
    return err == CL_SUCCESS ? CLKV_OK : clkv__fail_cl(ctx, err, "clEnqueueWriteBuffer");
}

clkv_status tool_read(clkv_context *ctx, cl_mem buf, void *dst, size_t bytes) {
    cl_int err =
        clEnqueueReadBuffer(clkv_context_queue(ctx), buf, CL_TRUE, 0, bytes, dst, 0, NULL, NULL);
    return err == CL_SUCCESS ? CLKV_OK : clkv__fail_cl(ctx, err, "clEnqueueReadBuffer");
}

void tool_release(cl_mem *buf) {
    if (*buf) {
        clReleaseMemObject(*buf);
        *buf = NULL;
    }
}
