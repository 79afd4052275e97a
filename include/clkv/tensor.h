/* clkv tensor descriptors (SPEC §0.1).
 *
 * A descriptor names an OpenCL buffer, a byte offset into it, a dtype and up to 4 dims
 * with per-dim strides in elements. The last dim is contiguous (stride 1); the other
 * strides are free, so [B, H, L, D] ("HND") and [B, L, H, D] ("NHD") caches both work
 * without copies. A descriptor is plain data: it owns nothing.
 *
 * An optional tensor argument is "absent" when its buf is NULL.
 */
#ifndef CLKV_TENSOR_H
#define CLKV_TENSOR_H

#include <stdint.h>

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum clkv_dtype {
    CLKV_F32 = 0,
    CLKV_F16 = 1,  /* IEEE binary16, converted with vload_half/vstore_half (RNE) */
    CLKV_BF16 = 2, /* bfloat16: f32 -> bf16 rounds to nearest even, NaN stays NaN */
    CLKV_I32 = 3,
    CLKV_U8 = 4,
    CLKV_U32 = 5,
} clkv_dtype;

#define CLKV_MAX_DIMS 4

typedef struct clkv_tensor {
    cl_mem buf;
    uint64_t offset; /* bytes; a multiple of the element size */
    clkv_dtype dtype;
    int32_t ndim; /* 1..4 */
    int64_t dims[CLKV_MAX_DIMS];
    int64_t strides[CLKV_MAX_DIMS]; /* elements; strides[ndim-1] must be 1 */
} clkv_tensor;

/* Size of one element in bytes (0 for an unknown dtype). */
uint32_t clkv_dtype_size(clkv_dtype dtype);

/* "f32", "f16", "bf16", "i32", "u8", "u32"; "?" for an unknown dtype. */
const char *clkv_dtype_name(clkv_dtype dtype);

/* Contiguous (row-major) descriptors at offset 0. */
clkv_tensor clkv_tensor_1d(cl_mem buf, clkv_dtype dtype, int64_t d0);
clkv_tensor clkv_tensor_2d(cl_mem buf, clkv_dtype dtype, int64_t d0, int64_t d1);
clkv_tensor clkv_tensor_3d(cl_mem buf, clkv_dtype dtype, int64_t d0, int64_t d1, int64_t d2);
clkv_tensor clkv_tensor_4d(cl_mem buf, clkv_dtype dtype, int64_t d0, int64_t d1, int64_t d2,
                           int64_t d3);

/* A [B, H, L, D] view of a cache stored as [B, L, H, D] ("NHD"): dims are B, H, L, D and
 * the strides are those of the NHD storage. */
clkv_tensor clkv_tensor_4d_nhd(cl_mem buf, clkv_dtype dtype, int64_t B, int64_t H, int64_t L,
                               int64_t D);

/* An absent (optional, not wanted) tensor. */
clkv_tensor clkv_tensor_none(void);

#ifdef __cplusplus
}
#endif

#endif /* CLKV_TENSOR_H */
