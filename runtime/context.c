/* Context lifetime: own or wrapped OpenCL objects, device record, cache settings. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/internal.h"

#define MAX_DEVICES 64

/* CLKV_CACHE: "0"/"off"/"OFF" = no disk cache, any other non-empty value = disk cache on
 * every platform, unset or empty = the platform's default (resolve_disk_cache). */
static void configure_cache(clkv_context *ctx) {
    const char *v = getenv("CLKV_CACHE");
    const int set = v && *v;
    ctx->disk_cache_enabled =
        !(set && (strcmp(v, "0") == 0 || strcmp(v, "off") == 0 || strcmp(v, "OFF") == 0));
    ctx->disk_cache_default = !set;
    const char *dir = getenv("CLKV_CACHE_DIR");
    const char *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    if (dir && *dir)
        snprintf(ctx->cache_dir, sizeof ctx->cache_dir, "%s", dir);
    else if (xdg && *xdg)
        snprintf(ctx->cache_dir, sizeof ctx->cache_dir, "%s/clkv", xdg);
    else if (home && *home)
        snprintf(ctx->cache_dir, sizeof ctx->cache_dir, "%s/.cache/clkv", home);
    else
        ctx->disk_cache_enabled = 0;
}

/* After the device probe: PoCL keeps its own cache of compiled kernels (keyed by source,
 * options and device), and handing out a program binary makes it compile every kernel of
 * the program first, on top of the compile the first launch of each kernel does anyway
 * (a program of select.cl: 1.1 s to build, 58 s more for its binary; test_score_evict
 * from empty caches 211 s with the disk cache, 72 s without; warm 1.9 / 3.0 s). So the
 * disk cache is off on PoCL unless CLKV_CACHE asks for it. */
static void resolve_disk_cache(clkv_context *ctx) {
    if (ctx->disk_cache_default && ctx->disk_cache_enabled &&
        strstr(ctx->info.platform_name, "Portable Computing Language") != NULL) {
        ctx->disk_cache_enabled = 0;
        clkv__log(ctx, "program cache: no disk cache on PoCL (its own kernel cache serves; "
                       "CLKV_CACHE=1 turns it on)");
    }
}

int clkv__env_int(const char *name, int fallback) {
    const char *s = getenv(name);
    return (s && *s) ? atoi(s) : fallback;
}

static void read_decode_tuning(clkv_decode_tuning *t) {
    t->epl = clkv__env_int("CLKV_DECODE_EPL", -1);
    t->wg = clkv__env_int("CLKV_DECODE_WG", -1);
    t->unroll = clkv__env_int("CLKV_DECODE_UNROLL", -1);
    t->stages = clkv__env_int("CLKV_DECODE_STAGES", -1);
    t->cp_async = clkv__env_int("CLKV_DECODE_CPASYNC", -1);
    t->waves = clkv__env_int("CLKV_DECODE_WAVES", -1);
    t->min_chunk = clkv__env_int("CLKV_DECODE_MIN_CHUNK", -1);
    t->tensor_cores = clkv__env_int("CLKV_DECODE_MMA", -1);
}

static clkv_context *context_alloc(void) {
    clkv_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return NULL;
    const char *log = getenv("CLKV_LOG");
    ctx->log_enabled = log && *log && strcmp(log, "0") != 0;
    configure_cache(ctx);
    read_decode_tuning(&ctx->decode_tuning);
    ctx->cp_l2 = clkv__env_int("CLKV_CP_L2", 128);
    const char *opts = getenv("CLKV_BUILD_OPTIONS");
    const size_t opts_len = opts ? strlen(opts) : 0;
    if (opts && opts_len < sizeof ctx->build_options)
        memcpy(ctx->build_options, opts, opts_len + 1);
    else if (opts) /* a cut option list would build with half an option: none instead */
        clkv__log(ctx, "CLKV_BUILD_OPTIONS ignored: longer than %zu characters",
                  sizeof ctx->build_options - 1);
    return ctx;
}

/* Copies the context's last message to the thread slot, for callers that get no ctx. */
static clkv_status fail_create(clkv_context *ctx, clkv_status st) {
    if (ctx) {
        clkv__fail(NULL, st, "%s", ctx->last_error);
        clkv_context_destroy(ctx);
    }
    return st;
}

clkv_status clkv_context_create(const char *selector, clkv_context **out) {
    if (!out)
        return clkv__fail(NULL, CLKV_ERR_ARG_NULL, "out: pointer for the new context is NULL");
    *out = NULL;
    clkv_device_ref refs[MAX_DEVICES];
    int n = clkv__enumerate_devices(refs, MAX_DEVICES);
    if (n == 0)
        return clkv__fail(NULL, CLKV_ERR_NO_DEVICE,
                          "no OpenCL platform or device found (install an ICD, e.g. "
                          "pocl-opencl-icd; scripts/install-deps.sh does)");
    char why[512] = "";
    int i = clkv__select_device(refs, n, selector, why, sizeof why);
    if (i < 0)
        return clkv__fail(NULL, CLKV_ERR_ARG_DEVICE, "%s", why);

    clkv_context *ctx = context_alloc();
    if (!ctx)
        return clkv__fail(NULL, CLKV_ERR_OUT_OF_HOST_MEMORY, "context allocation");
    ctx->platform = refs[i].platform;
    ctx->device = refs[i].device;
    cl_int err;
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)ctx->platform, 0};
    ctx->cl_ctx = clCreateContext(props, 1, &ctx->device, NULL, NULL, &err);
    if (err != CL_SUCCESS) {
        ctx->cl_ctx = NULL;
        return fail_create(ctx, clkv__fail_cl(ctx, err, "clCreateContext"));
    }
    ctx->queue = clCreateCommandQueue(ctx->cl_ctx, ctx->device, CL_QUEUE_PROFILING_ENABLE, &err);
    if (err != CL_SUCCESS) {
        ctx->queue = NULL;
        return fail_create(ctx, clkv__fail_cl(ctx, err, "clCreateCommandQueue"));
    }
    clkv_status st = clkv__device_probe(ctx);
    if (st != CLKV_OK)
        return fail_create(ctx, st);
    resolve_disk_cache(ctx);
    clkv__log(ctx, "context: platform %d device %d (%s)", refs[i].platform_index,
              refs[i].device_index, ctx->info.device_name);
    *out = ctx;
    return CLKV_OK;
}

clkv_status clkv_context_create_from_cl(cl_context context, cl_device_id device,
                                        cl_command_queue queue, clkv_context **out) {
    if (!out)
        return clkv__fail(NULL, CLKV_ERR_ARG_NULL, "out: pointer for the new context is NULL");
    *out = NULL;
    if (!context)
        return clkv__fail(NULL, CLKV_ERR_ARG_NULL, "context: cl_context is NULL");
    if (!device)
        return clkv__fail(NULL, CLKV_ERR_ARG_NULL, "device: cl_device_id is NULL");
    if (!queue)
        return clkv__fail(NULL, CLKV_ERR_ARG_NULL, "queue: cl_command_queue is NULL");
    cl_context qctx = NULL;
    cl_device_id qdev = NULL;
    cl_command_queue_properties qprops = 0;
    cl_int err = clGetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof qctx, &qctx, NULL);
    if (err == CL_SUCCESS)
        err = clGetCommandQueueInfo(queue, CL_QUEUE_DEVICE, sizeof qdev, &qdev, NULL);
    if (err == CL_SUCCESS)
        err = clGetCommandQueueInfo(queue, CL_QUEUE_PROPERTIES, sizeof qprops, &qprops, NULL);
    if (err != CL_SUCCESS)
        return clkv__fail(NULL, err, "queue: not a valid command queue (%s)",
                          clkv_status_string(err));
    if (qctx != context || qdev != device)
        return clkv__fail(NULL, CLKV_ERR_ARG_RANGE,
                          "queue: belongs to another context or device than the ones passed");
    if (qprops & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE)
        return clkv__fail(NULL, CLKV_ERR_ARG_RANGE,
                          "queue: is out-of-order; clkv needs an in-order queue");
    cl_platform_id platform = NULL;
    err = clGetDeviceInfo(device, CL_DEVICE_PLATFORM, sizeof platform, &platform, NULL);
    if (err != CL_SUCCESS)
        return clkv__fail(NULL, err, "device: not a valid device (%s)", clkv_status_string(err));

    clkv_context *ctx = context_alloc();
    if (!ctx)
        return clkv__fail(NULL, CLKV_ERR_OUT_OF_HOST_MEMORY, "context allocation");
    /* Retained here, released in destroy: the caller's reference counts end as they began. */
    clRetainContext(context);
    clRetainCommandQueue(queue);
    ctx->cl_ctx = context;
    ctx->queue = queue;
    ctx->device = device;
    ctx->platform = platform;
    clkv_status st = clkv__device_probe(ctx);
    if (st != CLKV_OK)
        return fail_create(ctx, st);
    resolve_disk_cache(ctx);
    *out = ctx;
    return CLKV_OK;
}

void clkv_context_destroy(clkv_context *ctx) {
    if (!ctx)
        return;
    clkv__program_cache_clear(ctx);
    if (ctx->workspace)
        clReleaseMemObject(ctx->workspace);
    if (ctx->counters)
        clReleaseMemObject(ctx->counters);
    if (ctx->queue)
        clReleaseCommandQueue(ctx->queue);
    if (ctx->cl_ctx)
        clReleaseContext(ctx->cl_ctx);
    free(ctx->build_log);
    free(ctx);
}

clkv_status clkv_context_finish(clkv_context *ctx) {
    if (!ctx)
        return clkv__fail(NULL, CLKV_ERR_ARG_NULL, "ctx: context is NULL");
    cl_int err = clFinish(ctx->queue);
    return err == CL_SUCCESS ? CLKV_OK : clkv__fail_cl(ctx, err, "clFinish");
}

const clkv_device_info *clkv_context_device_info(const clkv_context *ctx) {
    return ctx ? &ctx->info : NULL;
}

cl_context clkv_context_cl_context(const clkv_context *ctx) {
    return ctx ? ctx->cl_ctx : NULL;
}

cl_command_queue clkv_context_queue(const clkv_context *ctx) {
    return ctx ? ctx->queue : NULL;
}

cl_device_id clkv_context_device(const clkv_context *ctx) {
    return ctx ? ctx->device : NULL;
}

clkv_status clkv_context_cache_stats(const clkv_context *ctx, clkv_cache_stats *out) {
    if (!ctx)
        return clkv__fail(NULL, CLKV_ERR_ARG_NULL, "ctx: context is NULL");
    if (!out)
        return clkv__fail((clkv_context *)ctx, CLKV_ERR_ARG_NULL, "out: stats pointer is NULL");
    *out = ctx->stats;
    return CLKV_OK;
}
