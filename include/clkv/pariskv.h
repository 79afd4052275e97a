/* clkv ParisKV retrieval (SPEC §4, paper 002): the encoder.
 *
 * This header covers the first stage of ParisKV: the key/query transform, the per-
 * subspace centroid ids, 4-bit direction codes, reranking weights and per-centroid key
 * counts. Stage I/II retrieval (collision scoring, candidate selection, RSQ-IP rerank)
 * builds on these outputs and is not part of this header yet.
 *
 * Transform (SPEC §4). For a key k of head dim D:
 *   k^ = k / ||k||,   k~ = R k^
 * with an orthogonal D x D matrix R chosen by D:
 *  - D in {64, 128, 256} (SRHT): R = (1/sqrt(D)) H_D diag(sigma), H_D the Walsh-Hadamard
 *    matrix in natural (Sylvester) order, H[i][j] = (-1)^popcount(i & j), applied by a
 *    fast Walsh-Hadamard transform (O(D log D)) in local memory, and sigma a +-1 vector
 *    (clkv_pariskv_signs_from_seed, or given by the caller).
 *  - D not a power of two, 2 <= D <= 512 (dense rotation): R =
 *    clkv_pariskv_rotation_matrix(seed, D), a Haar-random orthogonal matrix, applied to a
 *    batch of keys as one SGEMM (CLBlast) Y = X R^T. R is generated on the host (O(D^3)
 *    double arithmetic: about 2 ms at D = 160) once per (seed, D) and cached in f32 for
 *    the process (the 4 most recent pairs, thread-safe); each call uploads it into the
 *    context workspace. Keys are processed in chunks of at most 32 MiB of f32 rows.
 *    Explicit signs do not apply (signs must be NULL); the seed selects R.
 *  - other powers of two (32, 512, ...): CLKV_ERR_ARG_UNSUPPORTED.
 *
 * Subspaces: k~ is cut into nblocks = D / m blocks of m consecutive coordinates
 * (block b holds coordinates [b*m, (b+1)*m)); m must be even, divide D and be in 2..8
 * (with a power-of-two D that means m in {2, 4, 8}; default 8; D = 96 also allows 6,
 * D = 160 only 2, 4, 8). Per block:
 *   r_b = ||k~_b||,  u_b = k~_b / r_b
 *   centroid id  = sum_j [u_{b,j} >= 0] << j            (one byte, j = 0..m-1)
 *   code nibble  = ([u_{b,j} >= 0] << 3) | t_j,  t_j = #{i : tau[i] < |u_{b,j}|} (0..7)
 *   v_{b,j}      = (u_{b,j} >= 0 ? +1 : -1) * a[t_j]
 *   alpha_b      = <v_b, u_b>,   weight w_b = ||k|| * r_b / alpha_b
 * A zero block (r_b = 0) has u_b = 0: id = 2^m - 1 (all sign bits set), every nibble 0x8
 * (t = 0) and w_b = 0. A zero key is all zero blocks. Keys holding Inf/NaN give
 * unspecified (but in-bounds) results.
 *
 * Numerics: the kernels compute in f32 (16-bit inputs widened exactly). They scale the
 * key by a power of two (exactly) so its largest magnitude lies in [0.5, 1) before the
 * transform, so keys of any finite magnitude (1e-30 .. 1e30) neither overflow nor
 * underflow, and computes u_b as y_b / ||y_b|| from
 * the transformed (unnormalized) vector y, which equals k~_b / r_b up to rounding. Codes
 * therefore agree with an exact evaluation except where |u_j| lies within f32 rounding
 * (~1e-6) of a threshold or u_j within ~1e-7 of zero. The dense rotation's f32 GEMM
 * (R rounded to f32, D-term sums) moves u by up to ~1e-5 at D = 160: codes agree with an
 * exact evaluation except within that distance of a threshold or of zero.
 */
#ifndef CLKV_PARISKV_H
#define CLKV_PARISKV_H

#include <stddef.h>
#include <stdint.h>

#include "clkv/context.h"
#include "clkv/status.h"
#include "clkv/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CLKV_PARISKV_MIN_M 2
#define CLKV_PARISKV_MAX_M 8
#define CLKV_PARISKV_DEFAULT_M 8
#define CLKV_PARISKV_NUM_LEVELS 8     /* 3-bit magnitude */
#define CLKV_PARISKV_NUM_THRESHOLDS 7 /* tau[0..6] */

/* ------------------------------------------------------------------------------------ */
/* Quantization levels (host only)                                                      */
/* ------------------------------------------------------------------------------------ */

/* Lloyd-Max levels of the magnitude X = |u_j| of one coordinate of a random unit vector
 * in R^m: X = sqrt(Y), Y ~ Beta(1/2, (m-1)/2), density on [0, 1]
 *   f(x) = 2 (1 - x^2)^((m-3)/2) / B(1/2, (m-1)/2).
 * Strictly increasing: 0 < a[0] < tau[0] < a[1] < ... < tau[6] < a[7] < 1, with
 * tau[t] = (a[t] + a[t+1]) / 2 and a[t] = E[X | tau[t-1] <= X < tau[t]] (tau[-1] = 0,
 * tau[7] = 1). The kernels compare |u_j| with these f32 values. */
typedef struct clkv_pariskv_levels {
    int32_t m;                              /* subspace dimension, 2..8 */
    float tau[CLKV_PARISKV_NUM_THRESHOLDS]; /* thresholds, increasing */
    float a[CLKV_PARISKV_NUM_LEVELS];       /* reconstruction levels, increasing */
} clkv_pariskv_levels;

/* The published ParisKV table for m = 8 (the authors' values, SPEC §4):
 *   tau = [0.0843, 0.1698, 0.2578, 0.3499, 0.4487, 0.5585, 0.6901]
 *   a   = [0.0420, 0.1266, 0.2130, 0.3025, 0.3973, 0.5001, 0.6169, 0.7633] */
void clkv_pariskv_levels_published_m8(clkv_pariskv_levels *out);

/* Lloyd-Max levels for subspace dim m (2..8), computed in double on the host:
 * starting from the thresholds tau[t] = (t+1)/8, alternate conditional means and midpoints until
 * no value moves by more than 1e-13 (at most 200000 iterations; deterministic). The
 * integrals are evaluated after the substitution x = sin(theta), which turns the
 * density's endpoint singularity (x -> 1 for m = 2) into the smooth integrand
 * cos(theta)^(m-2) d(theta); both the mass, int cos^(m-2), and the first moment,
 * int sin cos^(m-2) = -cos^(m-1)/(m-1), have closed forms (the mass by the usual
 * reduction formula), so no quadrature error enters. For m = 8 the result is
 *   tau = [0.0853, 0.1716, 0.2603, 0.3528, 0.4516, 0.5612, 0.6921]
 *   a   = [0.0425, 0.1280, 0.2152, 0.3053, 0.4003, 0.5030, 0.6193, 0.7648].
 * Errors: CLKV_ERR_ARG_NULL (out), CLKV_ERR_ARG_RANGE (m outside 2..8),
 * CLKV_ERR_INTERNAL (no convergence: does not happen for m in 2..8). */
clkv_status clkv_pariskv_levels_compute(int32_t m, clkv_pariskv_levels *out);

/* The levels the encoder uses by default: the published table for m = 8 (unless
 * `computed_m8` is non-zero), the computed levels for every other m. Errors as
 * clkv_pariskv_levels_compute. */
clkv_status clkv_pariskv_levels_default(int32_t m, int computed_m8, clkv_pariskv_levels *out);

/* ------------------------------------------------------------------------------------ */
/* Random signs                                                                         */
/* ------------------------------------------------------------------------------------ */

/* sigma from a 64-bit seed: splitmix64 with state `seed` (state += 0x9E3779B97F4A7C15,
 * then the usual mix), one output per coordinate in order; sigma[i] = -1 when the top
 * bit (bit 63) of output i is 1, +1 when it is 0. Writes D values (+1 / -1).
 * Errors: CLKV_ERR_ARG_NULL (signs), CLKV_ERR_ARG_RANGE (D < 1 or D > 65536). */
clkv_status clkv_pariskv_signs_from_seed(uint64_t seed, int64_t D, int8_t *signs);

/* ------------------------------------------------------------------------------------ */
/* Dense rotation (non-power-of-two D)                                                  */
/* ------------------------------------------------------------------------------------ */

/* The D x D orthogonal matrix of the dense transform, row-major in R (D*D doubles):
 * k~ = R k^. Definition (so other encoders can reproduce it):
 *  1. uniforms u_0, u_1, ...: output i of splitmix64 with state `seed` (as
 *     clkv_pariskv_signs_from_seed) shifted right by 11, times 2^-53, in [0, 1);
 *  2. normals by Box-Muller on consecutive pairs: r = sqrt(-2 ln(1 - u_{2p})),
 *     n_{2p} = r cos(2 pi u_{2p+1}), n_{2p+1} = r sin(2 pi u_{2p+1});
 *  3. the Gaussian matrix G[i][j] = n_{i*D + j};
 *  4. G = Q T its QR factorization with the diagonal of T positive (Householder in
 *     double, then the columns of Q sign-fixed), which makes Q unique and Haar-distributed;
 *     R = Q.
 * Orthogonal to double rounding (|R R^T - I| ~ 1e-15). Errors: CLKV_ERR_ARG_NULL (R),
 * CLKV_ERR_ARG_RANGE (D outside [1, 512]), CLKV_ERR_OUT_OF_HOST_MEMORY; messages via
 * clkv_last_error(NULL). */
clkv_status clkv_pariskv_rotation_matrix(uint64_t seed, int64_t D, double *R);

/* ------------------------------------------------------------------------------------ */
/* Key encoder                                                                          */
/* ------------------------------------------------------------------------------------ */

/* Encode keys (SPEC §4 "Transform", "Subspaces", "Centroid id", "4-bit code").
 *
 * Tensors (strides in elements, last dim contiguous, any other strides: HND, NHD, ...):
 *   k        [B, Hkv, L, D]        f32 | f16 | bf16. D in {64, 128, 256} or not a power
 *                                  of two, up to 512 (see "Transform").
 *   lengths  [B]                   i32, device buffer, optional (buf NULL: every
 *                                  sequence has L tokens); values are clamped to [0, L].
 *   ids      [B, Hkv, L, nblocks]  u8: centroid id of token i, block b
 *   codes    [B, Hkv, L, D/2]      u8: byte c holds coordinate 2c in its low nibble and
 *                                  coordinate 2c+1 in its high nibble (coordinates of
 *                                  k~; block b is bytes [b*m/2, (b+1)*m/2))
 *   weights  [B, Hkv, L, nblocks]  f32 | f16 | bf16 (stored with round-to-nearest-even)
 *   counts   [B, Hkv, nblocks, 2^m] u32, optional (buf NULL: not maintained):
 *                                  counts[b, h, blk, c] is incremented (atomically) once
 *                                  for every encoded key of (b, h) whose id in block blk
 *                                  is c. The caller zeroes it once (e.g.
 *                                  clEnqueueFillBuffer) before the first encode.
 * nblocks = D / m.
 *
 * Which tokens: token i of sequence b is encoded when start <= i < end and
 * i < lengths[b]. Exactly the rows of those tokens are written in ids, codes and
 * weights; other rows are left untouched. So encoding [0, n) at once (prefill) and
 * encoding [0, n1), then [n1, n) (incremental append) leave identical ids, codes,
 * weights and counts.
 *
 * sigma (SRHT only): `signs` (host memory, D entries, each +1 or -1, read during the call)
 * when not NULL, else clkv_pariskv_signs_from_seed(seed, D). Dense rotation: R from the
 * seed, signs must be NULL. Levels: `levels` (m must match)
 * when not NULL, else clkv_pariskv_levels_default(m, computed_m8).
 */
typedef struct clkv_pariskv_encode_args {
    clkv_tensor k;
    clkv_tensor lengths;
    clkv_tensor ids;
    clkv_tensor codes;
    clkv_tensor weights;
    clkv_tensor counts;
    /* Token range [start, end); end = -1 means L. 0 <= start <= end <= L. */
    int64_t start;
    int64_t end;
    /* Subspace dimension (2..8, must divide D). */
    int32_t m;
    /* Seed of sigma (used when signs is NULL). */
    uint64_t seed;
    /* Explicit sigma (D entries of +1/-1), or NULL. */
    const int8_t *signs;
    /* Explicit levels (levels->m must equal m), or NULL for the default. */
    const clkv_pariskv_levels *levels;
    /* Non-zero: use the computed (not the published) levels for m = 8 when levels is
     * NULL. */
    int32_t computed_m8;
} clkv_pariskv_encode_args;

#define CLKV_PARISKV_ENCODE_ARGS_INIT                                                              \
    {                                                                                              \
        .k = {0}, .lengths = {0}, .ids = {0}, .codes = {0}, .weights = {0}, .counts = {0},         \
        .start = 0, .end = -1, .m = CLKV_PARISKV_DEFAULT_M, .seed = 0, .signs = NULL,              \
        .levels = NULL, .computed_m8 = 0                                                           \
    }

/* Validate `args` and enqueue the encoder (SRHT: one kernel, no workspace; dense
 * rotation: per chunk a pack kernel, one CLBlast SGEMM and the encode kernel, scratch in
 * the context workspace). `done` (optional) receives an event that completes with the
 * last kernel; the caller releases it.
 * Errors (nothing enqueued, nothing written): CLKV_ERR_ARG_NULL (ctx, args, a required
 * buffer), CLKV_ERR_ARG_DTYPE, CLKV_ERR_ARG_SHAPE (dims disagree; m does not divide D
 * or is odd), CLKV_ERR_ARG_UNSUPPORTED (D a power of two outside {64, 128, 256}, or above
 * 512), CLKV_ERR_ARG_RANGE (m outside 2..8, start/end outside 0 <= start <= end <= L, a
 * sign not +-1, signs given with a dense-rotation D, levels->m != m or levels not strictly
 * increasing in (0, 1), B, Hkv or L beyond 65535 / 65535 / 2^31-1), CLKV_ERR_ARG_STRIDE,
 * CLKV_ERR_ARG_ALIGNMENT, CLKV_ERR_ARG_BUFFER_SIZE, CLKV_ERR_ARG_OVERFLOW; build and launch
 * failures as OpenCL codes. */
clkv_status clkv_pariskv_encode(clkv_context *ctx, const clkv_pariskv_encode_args *args,
                                cl_event *done);

/* ------------------------------------------------------------------------------------ */
/* Query transform                                                                      */
/* ------------------------------------------------------------------------------------ */

/* The query side of the transform (SPEC §4 "Query"): for every sequence b and KV head h,
 *   q_mean = (1/G) sum_{g < G} q[b, h*G + g]       (f32, heads summed in order)
 *   q_norm[b, h] = ||q_mean||
 *   q_rot[b, h]  = R (q_mean / ||q_mean||)          (0 when q_mean = 0)
 * with the same R (sigma) as the keys. G = Hq / Hkv.
 *
 * Tensors:
 *   q       [B, Hq, D]    f32 | f16 | bf16, D in {64, 128, 256} or not a power of two
 *                         up to 512 (dense rotation R from the seed; signs must be NULL)
 *   q_rot   [B, Hkv, D]   f32
 *   q_norm  [B, Hkv]      f32, optional (buf NULL: not written)
 */
typedef struct clkv_pariskv_query_args {
    clkv_tensor q;
    clkv_tensor q_rot;
    clkv_tensor q_norm;
    /* Seed of sigma (used when signs is NULL). */
    uint64_t seed;
    /* Explicit sigma (D entries of +1/-1), or NULL. */
    const int8_t *signs;
} clkv_pariskv_query_args;

#define CLKV_PARISKV_QUERY_ARGS_INIT                                                               \
    { .q = {0}, .q_rot = {0}, .q_norm = {0}, .seed = 0, .signs = NULL }

/* Validate `args` and enqueue the query transform (SRHT: one kernel, no workspace; dense
 * rotation: pack kernel, CLBlast SGEMM, normalization kernel, workspace scratch).
 * Errors (nothing enqueued, nothing written): CLKV_ERR_ARG_NULL, CLKV_ERR_ARG_DTYPE,
 * CLKV_ERR_ARG_SHAPE (dims disagree, Hkv = 0 with Hq > 0, Hq % Hkv != 0),
 * CLKV_ERR_ARG_UNSUPPORTED (D a power of two outside {64, 128, 256}, or above 512),
 * CLKV_ERR_ARG_RANGE (a sign not +-1, signs given with a dense-rotation D, B or Hq
 * beyond 65535), CLKV_ERR_ARG_STRIDE, CLKV_ERR_ARG_ALIGNMENT,
 * CLKV_ERR_ARG_BUFFER_SIZE, CLKV_ERR_ARG_OVERFLOW; OpenCL codes for build and launch
 * failures. */
clkv_status clkv_pariskv_query_transform(clkv_context *ctx, const clkv_pariskv_query_args *args,
                                         cl_event *done);

#ifdef __cplusplus
}
#endif

#endif /* CLKV_PARISKV_H */
