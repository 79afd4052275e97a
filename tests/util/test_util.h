/* Shared helpers for the clkv cmocka tests.
 *
 * Every helper that can fail (OpenCL calls, allocation) fails the running cmocka test
 * itself with an informative message, so test code reads straight through. Failure
 * messages are prefixed with the description of the current case (tu_set_case) and the
 * seed in use (tu_seed), so a failure can be reproduced with
 *     CLKV_TEST_SEED=<seed> ./test_xxx
 *
 * Groups of helpers:
 *   - failure reporting:  tu_set_case, TU_FAIL, TU_CHECK_OK, tu_msg_names
 *   - context:            tu_context_create, tu_group_setup / tu_group_teardown
 *   - buffers:            tu_buffer_*, poison pattern (tu_poison_*)
 *   - dtype conversion:   tu_f32_to_f16 / tu_f16_to_f32 / tu_f32_to_bf16 / tu_bf16_to_f32,
 *                         tu_round_dtype, tu_round_array, tu_store, tu_load, tu_pack
 *   - random numbers:     tu_rng (xoshiro256** seeded by splitmix64), uniform / normal
 *   - tolerances:         tu_tol_for (SPEC §0.2), tu_assert_close, tu_assert_lse
 *   - tensors:            tu_tensor_upload / tu_tensor_alloc / tu_tensor_read,
 *                         tu_assert_written_exactly (every element written, guards intact),
 *                         tu_kv_tensor (HND / NHD K/V caches from a logical [B,H,L,D] array)
 *   - bad inputs:         tu_expect_reject (status, message names the argument, no event,
 *                         output untouched)
 *   - suites:             tu_suite_add / TU_SUITE_ADD_CASES / tu_suite_run (test list,
 *                         seed line, group fixtures)
 *
 * Include order: this header includes everything cmocka needs (stdarg, stddef, stdint,
 * setjmp) before <cmocka.h>.
 */
#ifndef CLKV_TEST_UTIL_H
#define CLKV_TEST_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "clkv.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define TU_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define TU_PRINTF(a, b)
#endif

/* ------------------------------------------------------------------------------------ */
/* Failure reporting                                                                    */
/* ------------------------------------------------------------------------------------ */

/* Describe the case now running ("D=128 bf16 Hq=32 Hkv=8 B=3 ..."); every failure message
 * of the helpers below starts with it. An empty description is allowed. */
void tu_set_case(const char *fmt, ...) TU_PRINTF(1, 2);
const char *tu_case(void);

/* The seed of this run: $CLKV_TEST_SEED (decimal or 0x-hex) if set, else `fallback`.
 * Remembered and printed with every failure. */
uint64_t tu_seed(uint64_t fallback);

/* Print "[case ...; seed 0x...] <message>" through cmocka's print_error and fail the
 * running test (does not return). */
void tu_fail_at(const char *file, int line, const char *fmt, ...) TU_PRINTF(3, 4);
#define TU_FAIL(...) tu_fail_at(__FILE__, __LINE__, __VA_ARGS__)

/* Fail unless `expr` (a clkv_status) is CLKV_OK; prints the status name and
 * clkv_last_error(ctx). `ctx` may be NULL (then the thread-local message). */
void tu_check_ok_at(const char *file, int line, const clkv_context *ctx, clkv_status st,
                    const char *expr);
#define TU_CHECK_OK(ctx, expr) tu_check_ok_at(__FILE__, __LINE__, (ctx), (expr), #expr)

/* Fail unless the OpenCL call returned CL_SUCCESS. */
void tu_check_cl_at(const char *file, int line, cl_int err, const char *expr);
#define TU_CHECK_CL(expr) tu_check_cl_at(__FILE__, __LINE__, (expr), #expr)

/* 1 when `msg` contains `name` as a whole word (the characters around it are not
 * letters, digits or '_'), e.g. tu_msg_names("k: dims[0] = 3", "k") == 1 but
 * tu_msg_names("kernel failed", "k") == 0. */
int tu_msg_names(const char *msg, const char *name);

/* ------------------------------------------------------------------------------------ */
/* Context                                                                              */
/* ------------------------------------------------------------------------------------ */

/* A context on the device $CLKV_DEVICE names (selector NULL: the library's default rule;
 * PoCL CPU in CI). Fails the test with clkv_last_error(NULL) on error. The device is
 * printed once per process. If $CLKV_TEST_CACHE_ROOT is set (ctest sets it) and
 * $CLKV_CACHE_DIR is not, the on-disk program cache of the new context goes to
 * $CLKV_TEST_CACHE_ROOT/shared (the environment is restored after the call),
 * so test runs do not touch the user's cache. */
clkv_context *tu_context_create(void);

/* cmocka group fixtures: *state = a context from tu_context_create / destroy it. Return
 * -1 (group setup failure) when no context could be created. */
int tu_group_setup(void **state);
int tu_group_teardown(void **state);

/* ------------------------------------------------------------------------------------ */
/* Buffers (all transfers blocking)                                                     */
/* ------------------------------------------------------------------------------------ */

/* Poison pattern: byte i of a buffer (counted from the start of the buffer) is
 * 0xFF when i is even and 0x7F when odd, i.e. every aligned 16-bit word is 0x7FFF (a NaN
 * in f16 and bf16) and every aligned 32-bit word 0x7FFF7FFF (a NaN in f32, -1-ish
 * garbage as i32). Kernels never produce exactly these NaN payloads, so "still poison"
 * means "not written". */
uint8_t tu_poison_byte(size_t index);
void tu_poison_host(void *p, size_t bytes, size_t first_index);
/* 1 when bytes [first_index, first_index + n) of a buffer image `img` (the whole buffer,
 * starting at index 0) all hold the poison pattern. */
int tu_is_poison(const void *img, size_t first_index, size_t n);

/* New buffer of `bytes` (> 0), filled with poison. */
cl_mem tu_buffer_create(clkv_context *ctx, size_t bytes);
/* New buffer holding a copy of `data`. */
cl_mem tu_buffer_from_host(clkv_context *ctx, const void *data, size_t bytes);
void tu_buffer_write(clkv_context *ctx, cl_mem buf, size_t offset, const void *data, size_t bytes);
void tu_buffer_read(clkv_context *ctx, cl_mem buf, size_t offset, void *data, size_t bytes);
/* Poison bytes [offset, offset + bytes) (phase of the pattern follows the buffer index). */
void tu_buffer_poison(clkv_context *ctx, cl_mem buf, size_t offset, size_t bytes);
size_t tu_buffer_size(cl_mem buf);
/* malloc'd copy of the whole buffer; the caller frees it. */
uint8_t *tu_buffer_read_all(clkv_context *ctx, cl_mem buf, size_t *bytes);
/* Release (NULL is accepted). */
void tu_release(cl_mem buf);

/* malloc / calloc that fail the test instead of returning NULL. */
void *tu_malloc(size_t bytes);
void *tu_calloc(size_t n, size_t size);

/* ------------------------------------------------------------------------------------ */
/* Host dtype conversion (written from the IEEE 754 definitions)                        */
/* ------------------------------------------------------------------------------------ */

/* f32 -> IEEE binary16, round to nearest even; subnormals, overflow to inf (from 65520
 * up), inf and NaN (stays NaN, quiet) handled. */
uint16_t tu_f32_to_f16(float x);
float tu_f16_to_f32(uint16_t h);
/* f32 -> bfloat16, round to nearest even; NaN stays NaN (quiet). */
uint16_t tu_f32_to_bf16(float x);
float tu_bf16_to_f32(uint16_t b); /* exact: bits << 16 */

uint32_t tu_f32_bits(float x);
float tu_f32_from_bits(uint32_t u);

/* Store x as dtype then reload it (f32: identity; i32/u32/u8: truncation toward zero). */
float tu_round_dtype(clkv_dtype dt, float x);
/* Round n values in place, so host references see exactly the stored inputs. */
void tu_round_array(clkv_dtype dt, float *x, size_t n);
/* Element i of a packed array of `dt`. */
void tu_store(clkv_dtype dt, void *base, size_t i, float x);
float tu_load(clkv_dtype dt, const void *base, size_t i);
/* malloc'd packed array of n elements of `dt`. */
void *tu_pack(clkv_dtype dt, const float *x, size_t n);
size_t tu_dtype_size(clkv_dtype dt);

/* ------------------------------------------------------------------------------------ */
/* Deterministic PRNG: xoshiro256** seeded through splitmix64                           */
/* ------------------------------------------------------------------------------------ */

typedef struct tu_rng {
    uint64_t s[4];
    int has_spare;
    double spare;
} tu_rng;

uint64_t tu_splitmix64(uint64_t *state);
/* Seed from (seed, stream): different streams give independent sequences. */
void tu_rng_seed(tu_rng *r, uint64_t seed, uint64_t stream);
uint64_t tu_rng_u64(tu_rng *r);
double tu_rng_uniform(tu_rng *r);                      /* [0, 1), 53 bits */
double tu_rng_range(tu_rng *r, double lo, double hi);  /* [lo, hi) */
int64_t tu_rng_int(tu_rng *r, int64_t lo, int64_t hi); /* [lo, hi] inclusive */
double tu_rng_normal(tu_rng *r);                       /* N(0, 1), Box-Muller */
void tu_fill_normal(tu_rng *r, float *x, size_t n, double mean, double sd);
void tu_fill_uniform(tu_rng *r, float *x, size_t n, double lo, double hi);

/* ------------------------------------------------------------------------------------ */
/* Tolerances (SPEC §0.2)                                                               */
/* ------------------------------------------------------------------------------------ */

typedef struct tu_tol {
    double rtol;
    double atol;
} tu_tol;

/* |x - ref| <= atol + rtol*|ref| with (rtol, atol) by the storage dtype of the output:
 * f32 (1e-4, 1e-5), bf16 (1e-2, 1e-3), f16 (2e-3, 1e-4). */
tu_tol tu_tol_for(clkv_dtype out_dtype);
#define TU_LSE_ATOL 1e-4

typedef struct tu_cmp {
    size_t n;        /* elements compared */
    size_t n_bad;    /* elements out of tolerance (incl. non-finite mismatches) */
    size_t worst;    /* index of the element with the largest error / allowed ratio */
    double ratio;    /* that ratio (> 1 means out of tolerance; inf for NaN) */
    double got, ref; /* the worst element's values */
} tu_cmp;

/* Element-wise check. A NaN in `got` is always bad; an infinite `ref` requires exactly
 * the same infinity in `got`. */
tu_cmp tu_compare(const float *got, const double *ref, size_t n, tu_tol tol);

/* Same with a per-element additional absolute allowance extra_atol[i] (may be NULL):
 * |x - ref| <= atol + extra_atol[i] + rtol*|ref|. */
tu_cmp tu_compare_ex(const float *got, const double *ref, size_t n, tu_tol tol,
                     const double *extra_atol);

/* Fail with the worst element (flat index and, when ndim > 0, its multi-index in `dims`
 * row-major) unless every element is within tolerance. */
void tu_assert_close_at(const char *file, int line, const char *what, const float *got,
                        const double *ref, size_t n, tu_tol tol, int ndim, const int64_t *dims);
#define tu_assert_close(what, got, ref, n, tol, ndim, dims)                                        \
    tu_assert_close_at(__FILE__, __LINE__, (what), (got), (ref), (n), (tol), (ndim), (dims))
/* Same with tu_compare_ex's per-element extra allowance. */
void tu_assert_close_ex_at(const char *file, int line, const char *what, const float *got,
                           const double *ref, size_t n, tu_tol tol, const double *extra_atol,
                           int ndim, const int64_t *dims);
#define tu_assert_close_ex(what, got, ref, n, tol, extra, ndim, dims)                              \
    tu_assert_close_ex_at(__FILE__, __LINE__, (what), (got), (ref), (n), (tol), (extra), (ndim),   \
                          (dims))

/* LSE check: |x - ref| <= atol, ref = -inf requires got = -inf exactly (and got = -inf
 * requires ref = -inf), NaN fails. */
void tu_assert_lse_at(const char *file, int line, const char *what, const float *got,
                      const double *ref, size_t n, double atol, int ndim, const int64_t *dims);
#define tu_assert_lse(what, got, ref, n, atol, ndim, dims)                                         \
    tu_assert_lse_at(__FILE__, __LINE__, (what), (got), (ref), (n), (atol), (ndim), (dims))

/* ------------------------------------------------------------------------------------ */
/* Tensors                                                                              */
/* ------------------------------------------------------------------------------------ */

/* Number of elements of a descriptor (product of dims). */
int64_t tu_tensor_numel(const clkv_tensor *t);

/* A contiguous row-major tensor of `dtype` with dims[0..ndim) in a new buffer of
 * offset_bytes + numel*size + guard_after_bytes bytes: the tensor starts at byte
 * `offset_bytes` (a multiple of the element size), everything else is poison.
 * tu_tensor_upload fills it with `vals` (numel floats, rounded on store); tu_tensor_alloc
 * leaves it all poison (outputs). The caller releases t.buf. */
clkv_tensor tu_tensor_upload(clkv_context *ctx, const float *vals, clkv_dtype dtype, int ndim,
                             const int64_t *dims, uint64_t offset_bytes, size_t guard_after_bytes);
clkv_tensor tu_tensor_alloc(clkv_context *ctx, clkv_dtype dtype, int ndim, const int64_t *dims,
                            uint64_t offset_bytes, size_t guard_after_bytes);
/* Same for int32 data (lengths, indices). */
clkv_tensor tu_tensor_upload_i32(clkv_context *ctx, const int32_t *vals, int ndim,
                                 const int64_t *dims, uint64_t offset_bytes,
                                 size_t guard_after_bytes);

/* Read the elements of `t` (any strides) in logical row-major order as floats
 * (`out` holds numel floats). */
void tu_tensor_read(clkv_context *ctx, const clkv_tensor *t, float *out);

/* Output check: every element of `t` was written (its bytes are no longer poison) and
 * every byte of t.buf outside the elements of `t` is still poison (nothing written
 * outside the extent). Fails naming the first offending element / byte. */
void tu_assert_written_exactly_at(const char *file, int line, clkv_context *ctx,
                                  const clkv_tensor *t, const char *what);
#define tu_assert_written_exactly(ctx, t, what)                                                    \
    tu_assert_written_exactly_at(__FILE__, __LINE__, (ctx), (t), (what))

/* After an operator call that returned CLKV_OK and the event `ev`: ev is not NULL and
 * reaches CL_COMPLETE (it is released), the queue is finished, and the context's
 * workspace holds at least ws_bytes (what the operator's *_workspace_size reported).
 * `what` names the operator in failure messages. */
void tu_expect_completed_at(const char *file, int line, clkv_context *ctx, cl_event ev,
                            size_t ws_bytes, const char *what);
#define tu_expect_completed(ctx, ev, ws_bytes, what)                                               \
    tu_expect_completed_at(__FILE__, __LINE__, (ctx), (ev), (ws_bytes), (what))

/* Fail unless the whole buffer is still poison (an output a failed call must not touch). */
void tu_assert_buffer_poison_at(const char *file, int line, clkv_context *ctx, cl_mem buf,
                                const char *what);
#define tu_assert_buffer_poison(ctx, buf, what)                                                    \
    tu_assert_buffer_poison_at(__FILE__, __LINE__, (ctx), (buf), (what))

typedef enum tu_layout {
    TU_HND = 0, /* storage [B, H, L, D] */
    TU_NHD = 1, /* storage [B, L, H, D] */
} tu_layout;

const char *tu_layout_name(tu_layout layout);

/* A K/V cache from the logical [B, H, L, D] float array `logical` (row-major), stored as
 * `dtype` in `layout`, in a new buffer whose first `offset_bytes` bytes (a multiple of
 * the element size) are poison. Returns the descriptor (clkv_tensor_4d /
 * clkv_tensor_4d_nhd with the offset applied); the caller releases t.buf. */
clkv_tensor tu_kv_tensor_offset(clkv_context *ctx, const float *logical, clkv_dtype dtype,
                                int64_t B, int64_t H, int64_t L, int64_t D, tu_layout layout,
                                uint64_t offset_bytes);
clkv_tensor tu_kv_tensor(clkv_context *ctx, const float *logical, clkv_dtype dtype, int64_t B,
                         int64_t H, int64_t L, int64_t D, tu_layout layout);

/* Monotonic wall clock in seconds (for the timing lines tests print). */
double tu_now(void);

/* ------------------------------------------------------------------------------------ */
/* Bad-input checks                                                                     */
/* ------------------------------------------------------------------------------------ */

/* A rejected call: tu_set_case("bad input: <what>"), `st` is `want` and the message
 * clkv_last_error(msg_ctx) (NULL: the thread-local one) names the argument `name`. */
void tu_expect_status_at(const char *file, int line, const clkv_context *msg_ctx, clkv_status st,
                         clkv_status want, const char *name, const char *what);
#define tu_expect_status(msg_ctx, st, want, name, what)                                            \
    tu_expect_status_at(__FILE__, __LINE__, (msg_ctx), (st), (want), (name), (what))

/* A rejected device call: tu_expect_status with the message of ctx (of NULL, the
 * thread-local one, when name is "ctx": the call got no context), no event was returned
 * (`ev` NULL) and, after a clFinish on ctx's queue, the output buffer `out` (may be NULL)
 * still holds only poison. */
void tu_expect_reject_at(const char *file, int line, clkv_context *ctx, clkv_status st,
                         clkv_status want, const char *name, cl_mem out, cl_event ev,
                         const char *what);
#define tu_expect_reject(ctx, st, want, name, out, ev, what)                                       \
    tu_expect_reject_at(__FILE__, __LINE__, (ctx), (st), (want), (name), (out), (ev), (what))

/* ------------------------------------------------------------------------------------ */
/* Suites                                                                               */
/* ------------------------------------------------------------------------------------ */

#define TU_SUITE_MAX 128

/* The test list of one cmocka group, built in order (zero-initialize it). */
typedef struct tu_suite {
    struct CMUnitTest tests[TU_SUITE_MAX];
    size_t n;
    int overflow;         /* more than TU_SUITE_MAX added: tu_suite_run fails */
    void (*at_end)(void); /* optional: runs after the last test, before the teardown */
} tu_suite;

/* Append a test with its initial *state (may be NULL). */
void tu_suite_add(tu_suite *s, const char *name, CMUnitTestFunction fn, void *state);
/* Append one test per element of the array `cases` (whose elements have a `name` member),
 * each running `fn` with *state = &cases[i]. */
#define TU_SUITE_ADD_CASES(s, cases, fn)                                                           \
    for (size_t tu_i_ = 0; tu_i_ < sizeof(cases) / sizeof((cases)[0]); tu_i_++)                    \
    tu_suite_add((s), (cases)[tu_i_].name, (fn), (void *)&(cases)[tu_i_])

/* Print the seed line ("[ seed     ] 0x... (set CLKV_TEST_SEED to change)", the seed
 * tu_seed(default_seed)), then run the group `group` with tu_group_setup /
 * tu_group_teardown keeping the context in *ctx. Returns cmocka's result (non-zero when
 * a test failed or the list overflowed). */
int tu_suite_run(const tu_suite *s, const char *group, clkv_context **ctx, uint64_t default_seed);

#ifdef __cplusplus
}
#endif

#endif /* CLKV_TEST_UTIL_H */
