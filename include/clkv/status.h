/* clkv status codes.
 *
 * Every public function returns a clkv_status: 0 on success, negative on error.
 *  - OpenCL error codes are returned verbatim (CL_OUT_OF_RESOURCES = -5,
 *    CL_BUILD_PROGRAM_FAILURE = -11, ...); clkv_status_string() gives their CL_* name.
 *  - Argument errors are in [-2099, -2000]: nothing was enqueued or written.
 *  - Library errors are in [-3099, -3000].
 * The message of the last failure (naming the argument and the problem, or carrying the
 * driver's build log) is available from clkv_last_error().
 */
#ifndef CLKV_STATUS_H
#define CLKV_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef int clkv_status;

#define CLKV_OK 0

/* Argument errors. */
#define CLKV_ERR_ARG_NULL (-2000)        /* a required pointer, handle or buffer is NULL */
#define CLKV_ERR_ARG_DTYPE (-2001)       /* a tensor's dtype is not accepted here */
#define CLKV_ERR_ARG_SHAPE (-2002)       /* dims disagree with each other or with the op */
#define CLKV_ERR_ARG_STRIDE (-2003)      /* last dim not contiguous, negative or bad stride */
#define CLKV_ERR_ARG_RANGE (-2004)       /* a scalar is out of its documented range */
#define CLKV_ERR_ARG_UNSUPPORTED (-2005) /* a valid value this build does not implement */
#define CLKV_ERR_ARG_BUFFER_SIZE (-2006) /* a buffer is smaller than its descriptor touches */
#define CLKV_ERR_ARG_OVERFLOW (-2007)    /* a size or byte count overflows 64 bits */
#define CLKV_ERR_ARG_ALIGNMENT (-2008)   /* byte offset not a multiple of the element size */
#define CLKV_ERR_ARG_DEVICE (-2009)      /* CLKV_DEVICE / selector names no usable device */

/* Library errors. */
#define CLKV_ERR_OUT_OF_HOST_MEMORY (-3000) /* malloc failed */
#define CLKV_ERR_NO_DEVICE (-3001)          /* no OpenCL platform or device at all */
#define CLKV_ERR_LOCAL_MEMORY (-3002)  /* a kernel needs more local memory than the device has */
#define CLKV_ERR_KERNEL_SOURCE (-3003) /* a kernel source is missing (CLKV_KERNEL_DIR) */
#define CLKV_ERR_INTERNAL (-3004)      /* an invariant of the library broke: a bug */
#define CLKV_ERR_DEVICE_LIMIT (-3005)  /* the work exceeds a device limit (allocation size) */

/* Name of a status code: "CLKV_OK", "CL_OUT_OF_RESOURCES", "CLKV_ERR_ARG_SHAPE", ...
 * Unknown codes give "CLKV_UNKNOWN_STATUS". Never NULL; the string is static. */
const char *clkv_status_string(clkv_status status);

#ifdef __cplusplus
}
#endif

#endif /* CLKV_STATUS_H */
