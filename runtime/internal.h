/* Internal runtime interface shared by runtime/, host/, tools/ and tests/.
 * Not installed; not part of the public API. */
#ifndef CLKV_RUNTIME_INTERNAL_H
#define CLKV_RUNTIME_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "clkv.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define CLKV_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define CLKV_PRINTF(a, b)
#endif

#define CLKV_ERROR_MAX 2048

struct clkv_program_entry; /* runtime/program_cache.c */

/* Launch-parameter overrides for decode attention, read from CLKV_DECODE_* once per
 * context (benchmarks and tuning; not API). -1: the library's choice. */
typedef struct clkv_decode_tuning {
    int epl, wg, unroll, stages, cp_async, waves, min_chunk;
    int tensor_cores; /* CLKV_DECODE_MMA: 0 keeps decode off the tensor-core window kernel */
} clkv_decode_tuning;

struct clkv_context {
    cl_platform_id platform;
    cl_device_id device;
    cl_context cl_ctx;
    cl_command_queue queue;
    clkv_device_info info;

    char last_error[CLKV_ERROR_MAX];
    char *build_log; /* of the last failed build, malloc'd */

    struct clkv_program_entry *programs; /* in-memory program cache (linked list) */
    struct clkv_kernel_memo *memo;       /* (file, -D set, kernel) -> kernel, see get_kernel */
    clkv_cache_stats stats;
    int disk_cache_enabled;
    int disk_cache_default; /* CLKV_CACHE unset: the platform decides (runtime/context.c) */
    char cache_dir[1024];

    cl_mem workspace;
    size_t workspace_bytes;

    cl_mem counters; /* see clkv__counters */
    size_t counters_count;

    int log_enabled;
    /* CLKV_BUILD_OPTIONS at creation (kernel development: e.g. -cl-nv-verbose), appended to
     * every build's options and so part of both cache keys; "" when unset or longer than
     * 255 characters */
    char build_options[256];
    clkv_decode_tuning decode_tuning;
    /* CLKV_CP_L2 (NVIDIA): L2 prefetch size in bytes (64 | 128 | 256) that the 16-byte
     * cp.async copies of common.cl ask for, 0 none; passed to every build as -DCLKV_CP_L2.
     * Default 128: on the H100 bf16 decode at B 1/8 x 32K/128K ran 1.3-1.4 % faster than
     * without a hint (256: 1.0-2.3 %; window attention at 128K 1.4 %), the quantized
     * decode unchanged (one run, 2026-11-25). Re-checked on the H200 (2026-11-28, commit
     * 0370c31, two alternations of 128 / 256 / none in one run, µs): decode B 8 128K
     * 972.4-972.8 / 981.5-983.0 / 985.5-987.7, B 1 128K 131.6-132.0 / 132.3-133.2 /
     * 133.0-134.3; DropKV call at 128K 340.3 / 341.9-343.6 / 345.2-345.6; 2-bit decode B 8
     * 128K 305.6-306.4 / 308.1 / 306.6-308.4; LongFlow step (B 2, 32K) 77.2-77.7 either way. */
    int cp_l2;
};

/* ---- errors and logging (runtime/status.c) ---- */

/* Record a message for `ctx` (or the thread-local message when ctx is NULL) and return
 * `status`. The message should name the argument and the problem. */
clkv_status clkv__fail(clkv_context *ctx, clkv_status status, const char *fmt, ...)
    CLKV_PRINTF(3, 4);

/* The failure of a public entry point called with ctx, its argument struct or (workspace
 * queries) its bytes output NULL: CLKV_ERR_ARG_NULL naming the first one that is NULL
 * ("ctx", "args", "bytes"). Call only when one of them is NULL. */
clkv_status clkv__fail_entry(clkv_context *ctx, const void *args);
clkv_status clkv__fail_ws_entry(clkv_context *ctx, const void *args, const size_t *bytes);

/* Record "what: CL_ERROR_NAME (code)" for an OpenCL failure and return `err`. */
clkv_status clkv__fail_cl(clkv_context *ctx, cl_int err, const char *what);

/* Debug log to stderr when CLKV_LOG=1 (ctx may be NULL: then the environment decides). */
void clkv__log(const clkv_context *ctx, const char *fmt, ...) CLKV_PRINTF(2, 3);

/* Integer value of the environment variable `name` (atoi), or `fallback` when it is unset
 * or empty. For the tuning / test knobs (CLKV_*), not API. */
int clkv__env_int(const char *name, int fallback);

/* ---- kernel sources (runtime/kernel_sources.c) ---- */

/* The text of cl_kernels/<file> (embedded, or read from $CLKV_KERNEL_DIR). *text is
 * malloc'd and NUL-terminated; the caller frees it. CLKV_ERR_KERNEL_SOURCE if absent. */
clkv_status clkv__kernel_source(clkv_context *ctx, const char *file, char **text, size_t *len);

/* ---- -D option sets ---- */

#define CLKV_DEFS_MAX 32

/* A -D set as (name, integer value) pairs; the option text "-DNAME=VALUE" is only written
 * when a kernel is not yet in the context's kernel memo (see clkv__get_kernel), so that a
 * launch that finds its kernel pays no formatting. */
typedef struct clkv_defs {
    int count;
    const char *names[CLKV_DEFS_MAX]; /* string literals (see clkv__defs_int) */
    long long values[CLKV_DEFS_MAX];
} clkv_defs;

void clkv__defs_init(clkv_defs *d);
/* Add NAME=VALUE. NAME must be a string literal: the kernel memo keeps and compares the
 * pointer, which identifies the text only for storage that lives as long as the process
 * (the macro rejects anything but a literal at compile time). Silently ignores overflow of
 * the table: the program key then still includes everything added before; the table is
 * large enough for every kernel in the library. */
#define clkv__defs_int(d, name, value) clkv__defs_add((d), "" name "", (value))
void clkv__defs_add(clkv_defs *d, const char *literal_name, long long value);

/* ---- programs and kernels (runtime/program_cache.c) ---- */

/* The kernel `kernel_name` from cl_kernels/<file> built with the prelude common.cl and
 * the given -D set (plus the context's own defines, e.g. CLKV_NVIDIA_PTX). Programs are
 * cached in memory per context and on disk; the returned kernel is owned by the cache
 * (do not release it). A build failure returns CL_BUILD_PROGRAM_FAILURE with the log in
 * clkv_last_build_log(ctx). */
clkv_status clkv__get_kernel(clkv_context *ctx, const char *file, const clkv_defs *defs,
                             const char *kernel_name, cl_kernel *out);

/* Drop the in-memory program cache (tests use it to exercise the disk cache). */
void clkv__program_cache_clear(clkv_context *ctx);

/* Path of the on-disk cache file for a program (tests corrupt it on purpose). Returns 0
 * and fills `path` (size `cap`) when the disk cache is enabled. */
int clkv__disk_cache_path(clkv_context *ctx, const char *file, const clkv_defs *defs, char *path,
                          size_t cap);

/* ---- launching (runtime/launch.c) ---- */

/* Set kernel arguments 0 .. nargs - 1 (clkv__set_args) or first .. first + nargs - 1
 * (clkv__set_args_at): nargs pairs of (size_t size, const void *ptr). */
clkv_status clkv__set_args(clkv_context *ctx, cl_kernel kernel, const char *label, int nargs, ...);
clkv_status clkv__set_args_at(clkv_context *ctx, cl_kernel kernel, const char *label, int first,
                              int nargs, ...);
#define CLKV_ARG(x) sizeof(x), (const void *)&(x)

/* Check the kernel's local memory (static + `dynamic_local` bytes) against the device,
 * then enqueue it on ctx->queue. `local` may be NULL. `done` (may be NULL) receives the
 * event. CLKV_ERR_LOCAL_MEMORY names the kernel and both sizes. */
clkv_status clkv__launch(clkv_context *ctx, cl_kernel kernel, const char *label, cl_uint dims,
                         const size_t *global, const size_t *local, size_t dynamic_local,
                         cl_event *done);

/* Enqueue without the local-memory check, for operators that checked every kernel of a
 * launch sequence up front (so a failing check never leaves it half enqueued). */
clkv_status clkv__enqueue(clkv_context *ctx, cl_kernel kernel, const char *label, cl_uint dims,
                          const size_t *global, const size_t *local, cl_event *done);

/* When `done` is not NULL, enqueue a marker that completes after all work enqueued so far
 * and return it there: the completion event of a call that enqueued nothing of its own,
 * or of a sequence whose last kernel is not the natural one to hand back. */
clkv_status clkv__marker(clkv_context *ctx, cl_event *done);

/* Local-memory check alone. */
clkv_status clkv__check_local_mem(clkv_context *ctx, cl_kernel kernel, const char *label,
                                  size_t dynamic_local);

/* ---- workspace (runtime/workspace.c) ---- */

/* A workspace buffer of at least `bytes` (grown on demand, reused across calls). */
clkv_status clkv__workspace(clkv_context *ctx, size_t bytes, cl_mem *out);

/* A buffer of at least `count` int32 counters that are all 0 between clkv calls (zeroed
 * when created or grown, with a fill enqueued on the context's queue; every kernel that
 * counts in it returns each counter it used to 0 before it completes). For "last
 * work-group to arrive" schemes. Not part of the workspace: it keeps its state. */
clkv_status clkv__counters(clkv_context *ctx, size_t count, cl_mem *out);

/* ---- fills (runtime/fill.c) ---- */

/* Enqueue a fill of bytes [offset, offset + bytes) of buf with the 32-bit `value` repeated
 * (offset and bytes multiples of 4; `done` may be NULL). Any range of any buffer: ranges
 * past the first 4 GiB go to a kernel instead of clEnqueueFillBuffer (see runtime/fill.c). */
clkv_status clkv__fill_u32(clkv_context *ctx, cl_mem buf, uint64_t offset, uint64_t bytes,
                           uint32_t value, cl_event *done);

/* Round `bytes` up to the workspace sub-allocation alignment (256). */
size_t clkv__ws_align(size_t bytes);

/* ---- tensor validation (runtime/tensor.c) ---- */

#define CLKV_DTYPE_BIT(d) (1u << (unsigned)(d))
#define CLKV_FLOAT_DTYPES                                                                          \
    (CLKV_DTYPE_BIT(CLKV_F32) | CLKV_DTYPE_BIT(CLKV_F16) | CLKV_DTYPE_BIT(CLKV_BF16))

/* Checks a required tensor: buf non-NULL, dtype in `dtype_mask`, ndim == `ndim`, dims >= 0,
 * strides >= 0 with the last == 1, offset a multiple of the element size, the highest byte
 * touched fits in 64 bits and in the buffer (CL_MEM_SIZE). Messages start with `name`. */
clkv_status clkv__check_tensor(clkv_context *ctx, const clkv_tensor *t, const char *name, int ndim,
                               uint32_t dtype_mask);

/* Same, but an absent tensor (buf NULL) is accepted (returns CLKV_OK). */
clkv_status clkv__check_optional_tensor(clkv_context *ctx, const clkv_tensor *t, const char *name,
                                        int ndim, uint32_t dtype_mask);

/* Requires t->dims[i] == expected; message "name: dims[i] = X, expected E (why)". */
clkv_status clkv__check_dim(clkv_context *ctx, const clkv_tensor *t, const char *name, int i,
                            int64_t expected, const char *why);

/* One past the highest byte the descriptor touches (0 for an empty tensor); returns -1
 * on 64-bit overflow. */
int clkv__tensor_extent(const clkv_tensor *t, uint64_t *bytes);

/* Byte offset in elements (offset / element size), as kernels take it. */
cl_long clkv__elem_offset(const clkv_tensor *t);

/* 1 when offset and every stride except the last are multiples of `elems` elements, so
 * rows may be read with `elems`-wide aligned vector loads. */
int clkv__rows_aligned(const clkv_tensor *t, int64_t elems);

/* ---- device (runtime/device.c) ---- */

/* Fill ctx->info (and probe inline PTX on NVIDIA). */
clkv_status clkv__device_probe(clkv_context *ctx);

/* Enumerate all (platform, device) pairs; used by `clkv devices` and selection.
 * Returns the number found (0 if none); fills up to `cap` entries. */
typedef struct clkv_device_ref {
    cl_platform_id platform;
    cl_device_id device;
    int platform_index;
    int device_index;
    cl_device_type type;
} clkv_device_ref;
int clkv__enumerate_devices(clkv_device_ref *refs, int cap);

/* The index into refs of the device `selector` picks (NULL/"": $CLKV_DEVICE, else default
 * rule), or -1 with a message in `why`. */
int clkv__select_device(const clkv_device_ref *refs, int n, const char *selector, char *why,
                        size_t why_cap);

/* ---- hashing (runtime/sha256.c) ---- */

typedef struct clkv_sha256 {
    uint32_t h[8];
    uint64_t total;
    uint8_t buf[64];
    size_t used;
} clkv_sha256;

void clkv__sha256_init(clkv_sha256 *s);
void clkv__sha256_update(clkv_sha256 *s, const void *data, size_t n);
void clkv__sha256_final(clkv_sha256 *s, uint8_t out[32]);
void clkv__sha256(const void *data, size_t n, uint8_t out[32]);

#ifdef __cplusplus
}
#endif

#endif /* CLKV_RUNTIME_INTERNAL_H */
