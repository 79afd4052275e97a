/* Internal interface of the ParisKV encoder's dense-rotation path (non-power-of-two D):
 * host/pariskv_rotation.c (R from the seed, its upload) and host/pariskv_dense.c (pack,
 * CLBlast SGEMM, encode). Not installed. */
#ifndef CLKV_HOST_PARISKV_INTERNAL_H
#define CLKV_HOST_PARISKV_INTERNAL_H

#include "clkv/pariskv.h"
#include "runtime/internal.h"

/* Largest head dim of the dense path (R is D x D, generated in O(D^3), then cached). */
#define CLKV_PARISKV_DENSE_MAX_D 512

/* 1 when D takes the dense path (not a power of two). */
int clkv__pariskv_is_dense(int64_t D);

/* Enqueue a non-blocking write of R (f32, row-major D x D, from the seed) into `buf` at
 * byte `offset`; the host copy is freed when the write completes. */
clkv_status clkv__pariskv_upload_rotation(clkv_context *ctx, uint64_t seed, int64_t D, cl_mem buf,
                                          size_t offset);

/* The SRHT signs (from `signs`, D entries of +-1, or from the seed when NULL) as the
 * kernels' bit mask (bit j set for -1). CLKV_ERR_ARG_RANGE for an entry not +-1. */
clkv_status clkv__pariskv_pack_signs(clkv_context *ctx, const int8_t *signs, uint64_t seed,
                                     int64_t D, cl_uint8 *out);

/* Validated arguments in, kernels enqueued. */
clkv_status clkv__pariskv_encode_dense(clkv_context *ctx, const clkv_pariskv_encode_args *args,
                                       const clkv_pariskv_levels *lv, cl_event *done);
clkv_status clkv__pariskv_query_dense(clkv_context *ctx, const clkv_pariskv_query_args *args,
                                      cl_event *done);

#endif /* CLKV_HOST_PARISKV_INTERNAL_H */
