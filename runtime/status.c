/* Status names, per-context error messages and the debug log. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/internal.h"

/* Message of the last failure in a call that had no context (context creation). */
static _Thread_local char thread_error[CLKV_ERROR_MAX];

#define NAME(x)                                                                                    \
    case x:                                                                                        \
        return #x

static const char *cl_error_name(clkv_status s) {
    switch (s) {
        NAME(CL_DEVICE_NOT_FOUND);
        NAME(CL_DEVICE_NOT_AVAILABLE);
        NAME(CL_COMPILER_NOT_AVAILABLE);
        NAME(CL_MEM_OBJECT_ALLOCATION_FAILURE);
        NAME(CL_OUT_OF_RESOURCES);
        NAME(CL_OUT_OF_HOST_MEMORY);
        NAME(CL_PROFILING_INFO_NOT_AVAILABLE);
        NAME(CL_MEM_COPY_OVERLAP);
        NAME(CL_IMAGE_FORMAT_MISMATCH);
        NAME(CL_IMAGE_FORMAT_NOT_SUPPORTED);
        NAME(CL_BUILD_PROGRAM_FAILURE);
        NAME(CL_MAP_FAILURE);
        NAME(CL_MISALIGNED_SUB_BUFFER_OFFSET);
        NAME(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST);
        NAME(CL_COMPILE_PROGRAM_FAILURE);
        NAME(CL_LINKER_NOT_AVAILABLE);
        NAME(CL_LINK_PROGRAM_FAILURE);
        NAME(CL_DEVICE_PARTITION_FAILED);
        NAME(CL_KERNEL_ARG_INFO_NOT_AVAILABLE);
        NAME(CL_INVALID_VALUE);
        NAME(CL_INVALID_DEVICE_TYPE);
        NAME(CL_INVALID_PLATFORM);
        NAME(CL_INVALID_DEVICE);
        NAME(CL_INVALID_CONTEXT);
        NAME(CL_INVALID_QUEUE_PROPERTIES);
        NAME(CL_INVALID_COMMAND_QUEUE);
        NAME(CL_INVALID_HOST_PTR);
        NAME(CL_INVALID_MEM_OBJECT);
        NAME(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR);
        NAME(CL_INVALID_IMAGE_SIZE);
        NAME(CL_INVALID_SAMPLER);
        NAME(CL_INVALID_BINARY);
        NAME(CL_INVALID_BUILD_OPTIONS);
        NAME(CL_INVALID_PROGRAM);
        NAME(CL_INVALID_PROGRAM_EXECUTABLE);
        NAME(CL_INVALID_KERNEL_NAME);
        NAME(CL_INVALID_KERNEL_DEFINITION);
        NAME(CL_INVALID_KERNEL);
        NAME(CL_INVALID_ARG_INDEX);
        NAME(CL_INVALID_ARG_VALUE);
        NAME(CL_INVALID_ARG_SIZE);
        NAME(CL_INVALID_KERNEL_ARGS);
        NAME(CL_INVALID_WORK_DIMENSION);
        NAME(CL_INVALID_WORK_GROUP_SIZE);
        NAME(CL_INVALID_WORK_ITEM_SIZE);
        NAME(CL_INVALID_GLOBAL_OFFSET);
        NAME(CL_INVALID_EVENT_WAIT_LIST);
        NAME(CL_INVALID_EVENT);
        NAME(CL_INVALID_OPERATION);
        NAME(CL_INVALID_GL_OBJECT);
        NAME(CL_INVALID_BUFFER_SIZE);
        NAME(CL_INVALID_MIP_LEVEL);
        NAME(CL_INVALID_GLOBAL_WORK_SIZE);
        NAME(CL_INVALID_PROPERTY);
        NAME(CL_INVALID_IMAGE_DESCRIPTOR);
        NAME(CL_INVALID_COMPILER_OPTIONS);
        NAME(CL_INVALID_LINKER_OPTIONS);
        NAME(CL_INVALID_DEVICE_PARTITION_COUNT);
    case -1001:
        return "CL_PLATFORM_NOT_FOUND_KHR";
    default:
        return NULL;
    }
}

const char *clkv_status_string(clkv_status s) {
    switch (s) {
        NAME(CLKV_OK);
        NAME(CLKV_ERR_ARG_NULL);
        NAME(CLKV_ERR_ARG_DTYPE);
        NAME(CLKV_ERR_ARG_SHAPE);
        NAME(CLKV_ERR_ARG_STRIDE);
        NAME(CLKV_ERR_ARG_RANGE);
        NAME(CLKV_ERR_ARG_UNSUPPORTED);
        NAME(CLKV_ERR_ARG_BUFFER_SIZE);
        NAME(CLKV_ERR_ARG_OVERFLOW);
        NAME(CLKV_ERR_ARG_ALIGNMENT);
        NAME(CLKV_ERR_ARG_DEVICE);
        NAME(CLKV_ERR_OUT_OF_HOST_MEMORY);
        NAME(CLKV_ERR_NO_DEVICE);
        NAME(CLKV_ERR_LOCAL_MEMORY);
        NAME(CLKV_ERR_KERNEL_SOURCE);
        NAME(CLKV_ERR_INTERNAL);
        NAME(CLKV_ERR_DEVICE_LIMIT);
    default:
        break;
    }
    const char *cl = cl_error_name(s);
    return cl ? cl : "CLKV_UNKNOWN_STATUS";
}
#undef NAME

const char *clkv_version_string(void) {
    return "0.1.0";
}

static char *error_slot(clkv_context *ctx) {
    return ctx ? ctx->last_error : thread_error;
}

clkv_status clkv__fail(clkv_context *ctx, clkv_status status, const char *fmt, ...) {
    char *dst = error_slot(ctx);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dst, CLKV_ERROR_MAX, fmt, ap);
    va_end(ap);
    clkv__log(ctx, "error %s: %s", clkv_status_string(status), dst);
    return status;
}

clkv_status clkv__fail_entry(clkv_context *ctx, const void *args) {
    if (!ctx)
        return clkv__fail(NULL, CLKV_ERR_ARG_NULL, "ctx: context is NULL");
    if (!args)
        return clkv__fail(ctx, CLKV_ERR_ARG_NULL, "args: argument struct is NULL");
    return clkv__fail(ctx, CLKV_ERR_INTERNAL, "clkv__fail_entry called with ctx and args set");
}

clkv_status clkv__fail_ws_entry(clkv_context *ctx, const void *args, const size_t *bytes) {
    if (!ctx || !args)
        return clkv__fail_entry(ctx, args);
    if (!bytes)
        return clkv__fail(ctx, CLKV_ERR_ARG_NULL, "bytes: output pointer is NULL");
    return clkv__fail(ctx, CLKV_ERR_INTERNAL, "clkv__fail_ws_entry called with nothing NULL");
}

clkv_status clkv__fail_cl(clkv_context *ctx, cl_int err, const char *what) {
    return clkv__fail(ctx, err, "%s: %s (%d)", what, clkv_status_string(err), (int)err);
}

const char *clkv_last_error(const clkv_context *ctx) {
    return ctx ? ctx->last_error : thread_error;
}

const char *clkv_last_build_log(const clkv_context *ctx) {
    return (ctx && ctx->build_log) ? ctx->build_log : "";
}

static int env_log_enabled(void) {
    const char *v = getenv("CLKV_LOG");
    return v && *v && strcmp(v, "0") != 0;
}

void clkv__log(const clkv_context *ctx, const char *fmt, ...) {
    if (!(ctx ? ctx->log_enabled : env_log_enabled()))
        return;
    va_list ap;
    va_start(ap, fmt);
    fputs("[clkv] ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}
