/* Per-context scratch workspace: one device buffer, grown on demand and reused, so the
 * steady-state hot path allocates nothing. A buffer released while enqueued kernels
 * still use it stays alive until they finish (OpenCL reference semantics). */
#include "runtime/internal.h"

#define WS_ALIGN 256

size_t clkv__ws_align(size_t bytes) {
    return (bytes + WS_ALIGN - 1) / WS_ALIGN * WS_ALIGN;
}

clkv_status clkv__workspace(clkv_context *ctx, size_t bytes, cl_mem *out) {
    if (bytes == 0)
        bytes = WS_ALIGN;
    if (ctx->workspace && ctx->workspace_bytes >= bytes) {
        *out = ctx->workspace;
        return CLKV_OK;
    }
    if (bytes > ctx->info.max_alloc_bytes)
        return clkv__fail(ctx, CLKV_ERR_DEVICE_LIMIT,
                          "workspace: %zu bytes needed but one buffer may hold at most %llu", bytes,
                          (unsigned long long)ctx->info.max_alloc_bytes);
    /* Grow geometrically so a slowly growing workload reallocates rarely. */
    size_t want = ctx->workspace_bytes * 2 > bytes ? ctx->workspace_bytes * 2 : bytes;
    if (want > ctx->info.max_alloc_bytes)
        want = bytes;
    cl_int err;
    cl_mem buf = clCreateBuffer(ctx->cl_ctx, CL_MEM_READ_WRITE, want, NULL, &err);
    if (err != CL_SUCCESS)
        return clkv__fail(ctx, err, "workspace: allocating %zu bytes failed: %s", want,
                          clkv_status_string(err));
    if (ctx->workspace)
        clReleaseMemObject(ctx->workspace);
    ctx->workspace = buf;
    ctx->workspace_bytes = want;
    clkv__log(ctx, "workspace: grown to %zu bytes", want);
    *out = buf;
    return CLKV_OK;
}

clkv_status clkv__counters(clkv_context *ctx, size_t count, cl_mem *out) {
    if (count == 0)
        count = 1;
    if (ctx->counters && ctx->counters_count >= count) {
        *out = ctx->counters;
        return CLKV_OK;
    }
    size_t want = count < 1024 ? 1024 : count;
    if (want > ctx->info.max_alloc_bytes / 4)
        return clkv__fail(ctx, CLKV_ERR_DEVICE_LIMIT,
                          "counters: %zu counters exceed the largest buffer (%llu bytes)", want,
                          (unsigned long long)ctx->info.max_alloc_bytes);
    cl_int err;
    cl_mem buf = clCreateBuffer(ctx->cl_ctx, CL_MEM_READ_WRITE, want * 4, NULL, &err);
    if (err != CL_SUCCESS)
        return clkv__fail(ctx, err, "counters: allocating %zu bytes failed: %s", want * 4,
                          clkv_status_string(err));
    const cl_int zero = 0;
    err = clEnqueueFillBuffer(ctx->queue, buf, &zero, sizeof zero, 0, want * 4, 0, NULL, NULL);
    if (err != CL_SUCCESS) {
        clReleaseMemObject(buf);
        return clkv__fail_cl(ctx, err, "counters: zero fill");
    }
    if (ctx->counters)
        clReleaseMemObject(ctx->counters);
    ctx->counters = buf;
    ctx->counters_count = want;
    *out = buf;
    return CLKV_OK;
}

size_t clkv_context_workspace_bytes(const clkv_context *ctx) {
    return ctx ? ctx->workspace_bytes : 0;
}

clkv_status clkv_context_reserve_workspace(clkv_context *ctx, size_t bytes) {
    if (!ctx)
        return clkv__fail(NULL, CLKV_ERR_ARG_NULL, "ctx: context is NULL");
    cl_mem unused;
    return clkv__workspace(ctx, bytes, &unused);
}
