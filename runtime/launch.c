/* Kernel arguments, the local-memory budget check and enqueueing. */
#include <stdio.h>

#include "runtime/internal.h"

static clkv_status set_args_va(clkv_context *ctx, cl_kernel kernel, const char *label, int first,
                               int nargs, va_list ap) {
    for (int i = first; i < first + nargs; i++) {
        size_t size = va_arg(ap, size_t);
        const void *ptr = va_arg(ap, const void *);
        cl_int err = clSetKernelArg(kernel, (cl_uint)i, size, ptr);
        if (err != CL_SUCCESS) {
            char what[160];
            snprintf(what, sizeof what, "clSetKernelArg(%s, arg %d)", label, i);
            return clkv__fail_cl(ctx, err, what);
        }
    }
    return CLKV_OK;
}

clkv_status clkv__set_args(clkv_context *ctx, cl_kernel kernel, const char *label, int nargs, ...) {
    va_list ap;
    va_start(ap, nargs);
    const clkv_status st = set_args_va(ctx, kernel, label, 0, nargs, ap);
    va_end(ap);
    return st;
}

clkv_status clkv__set_args_at(clkv_context *ctx, cl_kernel kernel, const char *label, int first,
                              int nargs, ...) {
    va_list ap;
    va_start(ap, nargs);
    const clkv_status st = set_args_va(ctx, kernel, label, first, nargs, ap);
    va_end(ap);
    return st;
}

clkv_status clkv__check_local_mem(clkv_context *ctx, cl_kernel kernel, const char *label,
                                  size_t dynamic_local) {
    cl_ulong used = 0; /* static __local plus any dynamic __local arguments already set */
    cl_int err = clGetKernelWorkGroupInfo(kernel, ctx->device, CL_KERNEL_LOCAL_MEM_SIZE,
                                          sizeof used, &used, NULL);
    if (err != CL_SUCCESS)
        return clkv__fail_cl(ctx, err, "clGetKernelWorkGroupInfo(CL_KERNEL_LOCAL_MEM_SIZE)");
    /* Dynamic __local is capped by CL_DEVICE_LOCAL_MEM_SIZE; static arrays may go up to
     * the device's static limit (larger on NVIDIA). PoCL does not enforce either. */
    uint64_t limit = dynamic_local ? ctx->info.local_mem_bytes : ctx->info.static_local_mem_bytes;
    if (dynamic_local > ctx->info.local_mem_bytes || used > limit)
        return clkv__fail(ctx, CLKV_ERR_LOCAL_MEMORY,
                          "%s: needs %llu bytes of local memory (%zu dynamic) but the device "
                          "allows %llu",
                          label, (unsigned long long)used, dynamic_local,
                          (unsigned long long)limit);
    return CLKV_OK;
}

clkv_status clkv__enqueue(clkv_context *ctx, cl_kernel kernel, const char *label, cl_uint dims,
                          const size_t *global, const size_t *local, cl_event *done) {
    if (ctx->log_enabled)
        clkv__log(ctx, "launch %s: global [%zu %zu %zu] local [%zu %zu %zu]", label, global[0],
                  dims > 1 ? global[1] : 1, dims > 2 ? global[2] : 1, local ? local[0] : 0,
                  (local && dims > 1) ? local[1] : 0, (local && dims > 2) ? local[2] : 0);
    cl_int err =
        clEnqueueNDRangeKernel(ctx->queue, kernel, dims, NULL, global, local, 0, NULL, done);
    if (err != CL_SUCCESS) {
        char what[160];
        snprintf(what, sizeof what, "clEnqueueNDRangeKernel(%s)", label);
        return clkv__fail_cl(ctx, err, what);
    }
    return CLKV_OK;
}

clkv_status clkv__launch(clkv_context *ctx, cl_kernel kernel, const char *label, cl_uint dims,
                         const size_t *global, const size_t *local, size_t dynamic_local,
                         cl_event *done) {
    clkv_status st = clkv__check_local_mem(ctx, kernel, label, dynamic_local);
    if (st != CLKV_OK)
        return st;
    return clkv__enqueue(ctx, kernel, label, dims, global, local, done);
}

clkv_status clkv__marker(clkv_context *ctx, cl_event *done) {
    if (!done)
        return CLKV_OK;
    cl_int err = clEnqueueMarkerWithWaitList(ctx->queue, 0, NULL, done);
    return err == CL_SUCCESS ? CLKV_OK : clkv__fail_cl(ctx, err, "clEnqueueMarker");
}
