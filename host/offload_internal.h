/* Private layout of clkv_offload_store, shared by host/offload_store.c (lifecycle, write)
 * and host/gather_rows.c (gather). Not installed. */
#ifndef CLKV_HOST_OFFLOAD_INTERNAL_H
#define CLKV_HOST_OFFLOAD_INTERNAL_H

#include "clkv/offload.h"
#include "runtime/internal.h"

struct clkv_offload_store {
    clkv_context *ctx;
    int64_t B, Hkv, cap, D;
    clkv_dtype dtype;
    uint32_t esize;
    clkv_offload_mode mode; /* KERNEL_READ or STAGING */
    int host_nv;
    int nbuf;    /* buffers per tensor */
    int64_t spb; /* slices per buffer */
    uint64_t row_bytes, slice_bytes;
    cl_mem *buf[2];         /* [0] K, [1] V: nbuf buffers each */
    unsigned char **map[2]; /* staging: persistently mapped host pointers */
    cl_mem stage;           /* staging: pinned gather area (mapped) */
    unsigned char *stage_map;
    size_t stage_bytes;
    int32_t *idx_host; /* staging: idx read back */
    size_t idx_cap;
};

/* Which rectangular transfer clkv__offload_rows performs. */
typedef enum offload_xfer {
    XFER_COPY_TO_STORE = 0, /* device tensor -> store buffer (clEnqueueCopyBufferRect) */
    XFER_READ_TO_HOST,      /* device tensor -> host memory (clEnqueueReadBufferRect) */
    XFER_WRITE_FROM_HOST,   /* host memory -> device tensor (clEnqueueWriteBufferRect) */
} offload_xfer;

/* Transfer the rows [t0, t0 + T) of KV heads [h0, h0 + nh) of sequence b of the 4-D
 * tensor `t` ([B, H, T_all, D], any strides) to/from contiguous slices: head h's rows
 * start at `other_off + (h - h0) * other_slice + (t - t0) * row_bytes` of `other_buf`
 * (store buffer) or `other_host` (host memory). Uses one 3-D rectangle when the strides
 * allow it, else one 2-D rectangle per head. Non-blocking. */
clkv_status clkv__offload_rows(clkv_context *ctx, offload_xfer op, const clkv_tensor *t, int64_t b,
                               int64_t h0, int64_t nh, int64_t t0, int64_t T, cl_mem other_buf,
                               unsigned char *other_host, size_t other_off, size_t other_slice,
                               size_t row_bytes, cl_event *ev);

/* The checks every store call starts with: ctx, store and args non-NULL (args: the call's
 * argument struct), the store made on ctx. CLKV_OK or the error (message recorded). */
clkv_status clkv__offload_check_call(clkv_context *ctx, const clkv_offload_store *s,
                                     const void *args);

/* Enqueue the copy of rows [src_t0, src_t0 + T) of sequences [b0, b1) of the device
 * tensors k, v ([B, Hkv, *, D], the store's B, Hkv, D and dtype, any strides with rows
 * not overlapping when T > 1) into store rows [dst_start, dst_start + T) of the same
 * sequences (clkv_offload_write without the validation, which the caller has done: also
 * src_t0 + T <= k/v dims[2] and dst_start + T <= capacity). Non-blocking; `done`
 * (optional) completes with the last copy. */
clkv_status clkv__offload_write_rows(clkv_context *ctx, clkv_offload_store *s, const clkv_tensor *k,
                                     const clkv_tensor *v, int64_t b0, int64_t b1, int64_t src_t0,
                                     int64_t T, int64_t dst_start, cl_event *done);

#endif /* CLKV_HOST_OFFLOAD_INTERNAL_H */
