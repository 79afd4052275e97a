/* Device-side fills of buffer ranges with a repeated 32-bit value. */
#include "runtime/internal.h"

/* clEnqueueFillBuffer is used where the range ends within the first CLKV_FILL_KERNEL_MIB
 * MiB of the buffer (default 4096, read per call; 0 sends every fill to the kernel, which
 * is how the tests exercise it), the fill kernel beyond. NVIDIA's OpenCL (driver
 * 580.159.04, H200, 2026-11-28, a plain OpenCL program with a 4-byte pattern): one fill of
 * 8 GiB never completed, and 1 GiB fills covering 8.5 GiB failed with
 * CL_INVALID_COMMAND_QUEUE once a fill started at 8 GiB; fills ending at 4 GiB (+ 4 bytes)
 * and 1 GiB pieces up to 8 GiB completed. */
clkv_status clkv__fill_u32(clkv_context *ctx, cl_mem buf, uint64_t offset, uint64_t bytes,
                           uint32_t value, cl_event *done) {
    if (offset % 4 != 0 || bytes % 4 != 0)
        return clkv__fail(ctx, CLKV_ERR_INTERNAL,
                          "fill: offset %llu and size %llu must be multiples of 4",
                          (unsigned long long)offset, (unsigned long long)bytes);
    if (bytes == 0)
        return clkv__marker(ctx, done);
    const int mib = clkv__env_int("CLKV_FILL_KERNEL_MIB", 4096);
    if (offset + bytes <= (uint64_t)(mib < 0 ? 4096 : mib) << 20) {
        const cl_uint pattern = value;
        const cl_int err = clEnqueueFillBuffer(ctx->queue, buf, &pattern, sizeof pattern,
                                               (size_t)offset, (size_t)bytes, 0, NULL, done);
        return err == CL_SUCCESS ? CLKV_OK : clkv__fail_cl(ctx, err, "clEnqueueFillBuffer");
    }
    clkv_defs defs;
    clkv__defs_init(&defs);
    cl_kernel k = NULL;
    clkv_status st = clkv__get_kernel(ctx, "fill.cl", &defs, "clkv_fill_u32", &k);
    const cl_ulong first = offset / 4, n = bytes / 4;
    const cl_uint v = value;
    if (st == CLKV_OK)
        st = clkv__set_args(ctx, k, "clkv_fill_u32", 4, CLKV_ARG(buf), CLKV_ARG(first), CLKV_ARG(n),
                            CLKV_ARG(v));
    if (st != CLKV_OK)
        return st;
    const size_t local = ctx->info.max_work_group_size >= 256 ? 256 : 1;
    uint64_t groups = (n + local - 1) / local;
    const uint64_t cap = (uint64_t)(ctx->info.compute_units ? ctx->info.compute_units : 1) * 32;
    if (groups > cap)
        groups = cap; /* the kernel loops over the rest */
    const size_t global = (size_t)(groups * local);
    return clkv__launch(ctx, k, "clkv_fill_u32", 1, &global, &local, 0, done);
}
