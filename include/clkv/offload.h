/* clkv host-resident K/V store (SPEC §4 "Offload").
 *
 * The full-precision K/V rows of a long context (e.g. ParisKV's retrieval zone) live in
 * host memory; each decode step only the selected rows travel to the device:
 *
 *   clkv_offload_store_create    allocate the store (host memory, several buffers if needed)
 *   clkv_offload_write           copy rows of device K/V tensors into the store
 *   clkv_offload_gather          rows idx [B, Hkv, NI] of the store -> device [B, Hkv, NI, D]
 *   clkv_offload_store_destroy   free it (accepts NULL)
 *
 * Storage: for each of K and V, `batch * kv_heads` slices of `capacity` rows of
 * `head_dim` elements of `dtype` (row r of slice (b, h) is token r of sequence b, KV head
 * h). Whole slices are spread over several OpenCL buffers when one buffer cannot hold
 * them all (NVIDIA caps a single allocation at 1/4 of device memory, and
 * CL_DEVICE_MAX_MEM_ALLOC_SIZE elsewhere); a single slice must fit in one buffer.
 *
 * Paths (same results either way):
 *  - kernel read (zero-copy): the store's buffers are host memory that kernels read
 *    directly, and a gather is one kernel per 4 buffers, fully asynchronous. On NVIDIA
 *    the buffers come from clCreateBufferNV(..., CL_MEM_LOCATION_HOST_NV, ...)
 *    (extension cl_nv_create_buffer, looked up at run time with
 *    clGetExtensionFunctionAddressForPlatform); on CPU devices (PoCL) and devices with
 *    host-unified memory from CL_MEM_ALLOC_HOST_PTR buffers.
 *  - staging: elsewhere (or when forced) the store is pinned host memory
 *    (CL_MEM_ALLOC_HOST_PTR buffers kept mapped) that no kernel touches; a gather reads
 *    idx back to the host (this waits for the queue), copies the selected rows on the CPU
 *    into a pinned staging area and enqueues one pinned write per sequence to the output
 *    tensors. The staging area grows on demand (to the largest B * Hkv * NI * D seen) and
 *    is reused.
 *
 * A store belongs to the context it was created on and is used by one thread at a time
 * with it. Nothing of it lives in the context workspace.
 */
#ifndef CLKV_OFFLOAD_H
#define CLKV_OFFLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "clkv/context.h"
#include "clkv/status.h"
#include "clkv/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct clkv_offload_store clkv_offload_store;

typedef enum clkv_offload_mode {
    CLKV_OFFLOAD_AUTO = 0,        /* kernel read where the device can read host memory */
    CLKV_OFFLOAD_KERNEL_READ = 1, /* force the kernel-read path (on an NVIDIA GPU without
                                     cl_nv_create_buffer the driver then mirrors the store
                                     in device memory: for tests only) */
    CLKV_OFFLOAD_STAGING = 2,     /* force the pinned staging path */
} clkv_offload_mode;

typedef struct clkv_offload_store_desc {
    int64_t batch;    /* B >= 1 */
    int64_t kv_heads; /* Hkv >= 1 */
    int64_t capacity; /* tokens per (b, kv head), >= 1, <= 2^31-1 */
    int64_t head_dim; /* D, 1 .. 4096 */
    clkv_dtype dtype; /* f32 | f16 | bf16 */
    clkv_offload_mode mode;
    /* Largest size of one buffer in bytes; 0: the device's limit
     * (CL_DEVICE_MAX_MEM_ALLOC_SIZE). Smaller values split the store over more buffers
     * (tests use it to exercise the split on small stores). */
    uint64_t max_buffer_bytes;
} clkv_offload_store_desc;

#define CLKV_OFFLOAD_STORE_DESC_INIT                                                               \
    {                                                                                              \
        .batch = 0, .kv_heads = 0, .capacity = 0, .head_dim = 0, .dtype = CLKV_BF16,               \
        .mode = CLKV_OFFLOAD_AUTO, .max_buffer_bytes = 0                                           \
    }

/* Create a store on `ctx`. The memory is not initialised (rows never written hold
 * unspecified values).
 * Errors: CLKV_ERR_ARG_NULL (ctx, desc, out), CLKV_ERR_ARG_RANGE (a size out of range,
 * unknown mode), CLKV_ERR_ARG_DTYPE (dtype not f32/f16/bf16), CLKV_ERR_ARG_OVERFLOW (byte
 * counts beyond 64 bits), CLKV_ERR_DEVICE_LIMIT (one slice is larger than
 * max_buffer_bytes / the device's largest buffer), CLKV_ERR_OUT_OF_HOST_MEMORY, OpenCL
 * allocation errors (everything allocated so far is freed; *out is set to NULL). */
clkv_status clkv_offload_store_create(clkv_context *ctx, const clkv_offload_store_desc *desc,
                                      clkv_offload_store **out);

/* Free the store's buffers. Accepts NULL. Work still enqueued that uses the store must
 * have completed (call clkv_context_finish first). */
void clkv_offload_store_destroy(clkv_offload_store *store);

typedef struct clkv_offload_store_info {
    clkv_offload_mode mode;    /* the path in use: KERNEL_READ or STAGING */
    int32_t host_nv;           /* 1: buffers from clCreateBufferNV(CL_MEM_LOCATION_HOST_NV) */
    int32_t num_buffers;       /* buffers per tensor (K and V each) */
    int64_t slices_per_buffer; /* (b, kv head) slices per buffer; slice s in buffer s / this */
    uint64_t bytes;            /* host bytes of K and V together */
} clkv_offload_store_info;

/* Describe the store. Errors: CLKV_ERR_ARG_NULL. */
clkv_status clkv_offload_store_get_info(const clkv_offload_store *store,
                                        clkv_offload_store_info *info);

/* Write rows: for every b < B, h < Hkv, t < T
 *   store.K[b, h, dst_start + t] = k[b, h, t],  store.V[b, h, dst_start + t] = v[b, h, t]
 * Tensors: k, v [B, Hkv, T, D], device buffers, the store's dtype, any strides (HND, NHD,
 * a window of a larger cache...). 0 <= dst_start, dst_start + T <= capacity. Enqueued as
 * rectangular buffer copies (one per sequence and buffer) on the context's queue, or as
 * plain copies per head (per row where rows are not contiguous) where a rectangle would
 * touch bytes past the first 4 GiB of a buffer (NVIDIA's OpenCL misplaces such rectangles
 * without an error); returns without waiting. `done` (optional) completes with the last
 * copy.
 * Errors (nothing enqueued): CLKV_ERR_ARG_NULL (ctx, store, args, k, v),
 * CLKV_ERR_ARG_RANGE (store of another context, dst_start out of range),
 * CLKV_ERR_ARG_DTYPE, CLKV_ERR_ARG_SHAPE (dims differ from the store's B, Hkv, D or
 * between k and v), the tensor checks (STRIDE, ALIGNMENT, BUFFER_SIZE, OVERFLOW); OpenCL
 * codes for enqueue failures. */
typedef struct clkv_offload_write_args {
    clkv_tensor k;
    clkv_tensor v;
    int64_t dst_start;
} clkv_offload_write_args;

#define CLKV_OFFLOAD_WRITE_ARGS_INIT                                                               \
    { .k = {0}, .v = {0}, .dst_start = 0 }

clkv_status clkv_offload_write(clkv_context *ctx, clkv_offload_store *store,
                               const clkv_offload_write_args *args, cl_event *done);

/* Gather rows: for every b < B, h < Hkv, i < NI, with t = idx[b, h, i]
 *   k_out[b, h, i] = store.K[b, h, t],  v_out[b, h, i] = store.V[b, h, t]
 * and zero rows for t < 0 or t >= capacity (unused slots; the store keeps no lengths).
 * Tensors: idx [B, Hkv, NI] i32 device; k_out, v_out [B, Hkv, NI, D] device, the store's
 * dtype, any strides (v_out may be absent: buf NULL gathers K only). NI may be 0.
 * Kernel-read path: enqueues the gather kernel(s) and returns. Staging path: blocks
 * until idx is read back (all earlier work on the queue), then enqueues the writes.
 * `done` (optional) completes when the outputs are written.
 * Errors (nothing enqueued or written): CLKV_ERR_ARG_NULL, CLKV_ERR_ARG_RANGE (store of
 * another context), CLKV_ERR_ARG_DTYPE, CLKV_ERR_ARG_SHAPE, the tensor checks; OpenCL
 * codes for enqueue/transfer failures, CLKV_ERR_OUT_OF_HOST_MEMORY. */
typedef struct clkv_offload_gather_args {
    clkv_tensor idx;
    clkv_tensor k_out;
    clkv_tensor v_out;
} clkv_offload_gather_args;

#define CLKV_OFFLOAD_GATHER_ARGS_INIT                                                              \
    {                                                                                              \
        .idx = {0}, .k_out = {0}, .v_out = { 0 }                                                   \
    }

clkv_status clkv_offload_gather(clkv_context *ctx, clkv_offload_store *store,
                                const clkv_offload_gather_args *args, cl_event *done);

#ifdef __cplusplus
}
#endif

#endif /* CLKV_OFFLOAD_H */
