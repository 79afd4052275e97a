/* clkv context: the device, its in-order command queue, the program cache and the
 * scratch workspace every operator uses.
 *
 * A context is used by one thread at a time. Distinct contexts are independent and may
 * share the on-disk program cache (writes are atomic, reads are verified).
 *
 * Environment variables read at context creation:
 *   CLKV_DEVICE      device choice when the caller passes no selector (see below)
 *   CLKV_CACHE_DIR   directory of the on-disk program cache
 *                    (default: $XDG_CACHE_HOME/clkv, else $HOME/.cache/clkv)
 *   CLKV_CACHE       "0"/"off" disables the on-disk program cache; any other value
 *                    enables it on every platform. Unset: on, except on PoCL, which keeps
 *                    its own cache of compiled kernels and would compile every kernel of a
 *                    program to hand out its binary
 *   CLKV_KERNEL_DIR  development override: load the .cl files from this directory
 *                    instead of the copies embedded in the library
 *   CLKV_LOG         "1" prints a debug log to stderr (device choice, program-cache
 *                    hits/misses/rebuilds, build logs, launch geometry); silent by default
 */
#ifndef CLKV_CONTEXT_H
#define CLKV_CONTEXT_H

#include <stddef.h>
#include <stdint.h>

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#include "clkv/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct clkv_context clkv_context;

typedef enum clkv_device_kind {
    CLKV_DEVICE_KIND_OTHER = 0,
    CLKV_DEVICE_KIND_CPU = 1,
    CLKV_DEVICE_KIND_GPU = 2,
} clkv_device_kind;

/* What clkv knows about a context's device; filled once at context creation. */
typedef struct clkv_device_info {
    char platform_name[128];
    char platform_version[128];
    char device_name[128];
    char vendor[128];
    char driver_version[64];
    clkv_device_kind kind;
    uint32_t compute_units;
    uint64_t max_work_group_size;
    uint64_t local_mem_bytes;        /* CL_DEVICE_LOCAL_MEM_SIZE: the dynamic __local limit */
    uint64_t static_local_mem_bytes; /* largest static __local a kernel may declare */
    uint64_t max_alloc_bytes;        /* CL_DEVICE_MAX_MEM_ALLOC_SIZE: one buffer at most */
    uint64_t global_mem_bytes;
    uint32_t warp_width;       /* SIMD width (CL_DEVICE_WARP_SIZE_NV on NVIDIA), 1 if unknown */
    int nvidia_ptx;            /* 1: inline PTX (shfl.sync) compiled and is used */
    int compute_capability[2]; /* NVIDIA major.minor, else {0, 0} */
} clkv_device_info;

/* Create a context on the device named by `selector`, or, when selector is NULL or "",
 * by $CLKV_DEVICE, or else the first GPU, else the first CPU, over all platforms.
 * A selector is one of:
 *   "P:D"      platform index P, device index D (as `clkv devices` lists them)
 *   "gpu"/"cpu" the first device of that type
 *   any other string: the first device whose device or platform name contains it
 *              (case-insensitive), e.g. "nvidia", "pocl", "H200".
 * Errors: CLKV_ERR_ARG_NULL (out NULL), CLKV_ERR_NO_DEVICE (no OpenCL device at all),
 * CLKV_ERR_ARG_DEVICE (the selector matches nothing), OpenCL errors from context or
 * queue creation. The message is available from clkv_last_error(NULL). */
clkv_status clkv_context_create(const char *selector, clkv_context **out);

/* Wrap a caller's OpenCL objects (the embedding case). clkv retains them for the
 * context's lifetime and releases exactly what it retained; it never changes or
 * destroys them. `queue` must be an in-order queue of `context` on `device`; all clkv
 * work is enqueued on it. Errors: CLKV_ERR_ARG_NULL, CLKV_ERR_ARG_RANGE (queue is
 * out-of-order, or belongs to another context/device), OpenCL errors. */
clkv_status clkv_context_create_from_cl(cl_context context, cl_device_id device,
                                        cl_command_queue queue, clkv_context **out);

/* Release everything the context created or retained. Accepts NULL. Does not wait for
 * enqueued work beyond what clReleaseCommandQueue implies; call clkv_context_finish
 * first if results are still needed. */
void clkv_context_destroy(clkv_context *ctx);

/* Blocks until all work clkv enqueued on the context's queue has completed. */
clkv_status clkv_context_finish(clkv_context *ctx);

/* The message of the last failure on `ctx` ("k: 5000 exceeds len[3] = 4096"), or, with
 * ctx NULL, of the last failure of this thread in a call that had no context
 * (context creation). Empty string when there was none. Valid until the next call. */
const char *clkv_last_error(const clkv_context *ctx);

/* Build log of the last program build that failed on `ctx` (empty if none). */
const char *clkv_last_build_log(const clkv_context *ctx);

/* Accessors. The objects stay owned by the context. */
const clkv_device_info *clkv_context_device_info(const clkv_context *ctx);
cl_context clkv_context_cl_context(const clkv_context *ctx);
cl_command_queue clkv_context_queue(const clkv_context *ctx);
cl_device_id clkv_context_device(const clkv_context *ctx);

/* Program-cache counters, for diagnostics and tests. */
typedef struct clkv_cache_stats {
    uint64_t memory_hits;   /* program found in the context's in-memory cache */
    uint64_t disk_hits;     /* program loaded from a verified on-disk binary */
    uint64_t disk_rejected; /* on-disk entry found but corrupt/truncated/mismatched */
    uint64_t builds;        /* programs built from source */
} clkv_cache_stats;

clkv_status clkv_context_cache_stats(const clkv_context *ctx, clkv_cache_stats *out);

/* Bytes currently held by the context's scratch workspace (grows on demand, reused). */
size_t clkv_context_workspace_bytes(const clkv_context *ctx);

/* Grow the workspace to at least `bytes` now, so that later calls allocate nothing.
 * Errors: CLKV_ERR_ARG_NULL, CLKV_ERR_DEVICE_LIMIT (more than one buffer may hold),
 * OpenCL allocation errors. */
clkv_status clkv_context_reserve_workspace(clkv_context *ctx, size_t bytes);

#ifdef __cplusplus
}
#endif

#endif /* CLKV_CONTEXT_H */
