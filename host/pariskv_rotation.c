/* The dense random rotation of the ParisKV encoder for non-power-of-two D (SPEC §4): a
 * Haar-random orthogonal matrix generated on the host, in double, from the seed; its f32
 * copy is cached per process and uploaded into the workspace per call. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "host/pariskv_internal.h"

int clkv__pariskv_is_dense(int64_t D) {
    return D > 0 && (D & (D - 1)) != 0;
}

/* splitmix64: state += golden ratio, then the usual mix (as clkv_pariskv_signs_from_seed). */
static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

clkv_status clkv_pariskv_rotation_matrix(uint64_t seed, int64_t D, double *R) {
    if (!R)
        return clkv__fail(NULL, CLKV_ERR_ARG_NULL, "R: output pointer is NULL");
    if (D < 1 || D > CLKV_PARISKV_DENSE_MAX_D)
        return clkv__fail(NULL, CLKV_ERR_ARG_RANGE, "D: %lld is outside [1, %d]", (long long)D,
                          CLKV_PARISKV_DENSE_MAX_D);
    const size_t n = (size_t)D;
    double *A = (double *)malloc(n * n * sizeof(double)); /* Gaussian, then Householder */
    double *v = (double *)malloc(n * sizeof(double));
    double *w = (double *)malloc(n * sizeof(double));
    double *diag = (double *)malloc(n * sizeof(double));
    if (!A || !v || !w || !diag) {
        free(A);
        free(v);
        free(w);
        free(diag);
        return clkv__fail(NULL, CLKV_ERR_OUT_OF_HOST_MEMORY, "R: out of host memory");
    }
    /* G[i][j] = normal number i * D + j: Box-Muller on pairs of uniforms
     * u = (splitmix64 >> 11) * 2^-53, r = sqrt(-2 ln(1 - u0)), n0 = r cos(2 pi u1),
     * n1 = r sin(2 pi u1). */
    uint64_t st = seed;
    const double two_pi = 6.283185307179586476925286766559;
    for (size_t i = 0; i < n * n; i += 2) {
        const double u0 = (double)(splitmix64(&st) >> 11) * 0x1.0p-53;
        const double u1 = (double)(splitmix64(&st) >> 11) * 0x1.0p-53;
        const double r = sqrt(-2.0 * log(1.0 - u0));
        A[i] = r * cos(two_pi * u1);
        if (i + 1 < n * n)
            A[i + 1] = r * sin(two_pi * u1);
    }
    /* Householder QR, G = Q T: reflector k (unit vector v_k, zero above row k) is kept in
     * row k of V; A becomes T. */
    double *V = (double *)calloc(n * n, sizeof(double)); /* V[k][i]: reflector k, i >= k */
    if (!V) {
        free(A);
        free(v);
        free(w);
        free(diag);
        return clkv__fail(NULL, CLKV_ERR_OUT_OF_HOST_MEMORY, "R: out of host memory");
    }
    for (size_t k = 0; k < n; k++) {
        double norm2 = 0.0;
        for (size_t i = k; i < n; i++)
            norm2 += A[i * n + k] * A[i * n + k];
        const double norm = sqrt(norm2);
        const double alpha = A[k * n + k] > 0.0 ? -norm : norm; /* no cancellation */
        double vn2 = 0.0;
        for (size_t i = k; i < n; i++) {
            v[i] = A[i * n + k] - (i == k ? alpha : 0.0);
            vn2 += v[i] * v[i];
        }
        diag[k] = alpha; /* T[k][k] after the reflection */
        if (vn2 == 0.0)  /* column already in place (probability 0) */
            continue;
        const double vinv = 1.0 / sqrt(vn2);
        for (size_t i = k; i < n; i++) {
            v[i] *= vinv;
            V[k * n + i] = v[i];
        }
        /* A[k:, k:] -= 2 v (v^T A[k:, k:]), row by row (row-major: contiguous) */
        for (size_t j = k; j < n; j++)
            w[j] = 0.0;
        for (size_t i = k; i < n; i++)
            for (size_t j = k; j < n; j++)
                w[j] += v[i] * A[i * n + j];
        for (size_t i = k; i < n; i++)
            for (size_t j = k; j < n; j++)
                A[i * n + j] -= 2.0 * v[i] * w[j];
    }
    /* Q = H_0 H_1 ... H_{n-1} I, applied right to left; then the sign fix Q diag(sign T_kk)
     * makes T's diagonal positive, so (Q, T) is the unique QR factorization of G and Q is
     * Haar-distributed. */
    memset(R, 0, n * n * sizeof(double));
    for (size_t i = 0; i < n; i++)
        R[i * n + i] = 1.0;
    for (size_t kk = n; kk-- > 0;) {
        /* R[kk:, kk:] -= 2 v (v^T R[kk:, kk:]); R[kk:, :kk] is still zero here */
        const double *vk = V + kk * n;
        for (size_t j = kk; j < n; j++)
            w[j] = 0.0;
        for (size_t i = kk; i < n; i++)
            for (size_t j = kk; j < n; j++)
                w[j] += vk[i] * R[i * n + j];
        for (size_t i = kk; i < n; i++)
            for (size_t j = kk; j < n; j++)
                R[i * n + j] -= 2.0 * vk[i] * w[j];
    }
    for (size_t k = 0; k < n; k++)
        if (diag[k] < 0.0)
            for (size_t i = 0; i < n; i++)
                R[i * n + k] = -R[i * n + k];
    free(A);
    free(v);
    free(w);
    free(diag);
    free(V);
    return CLKV_OK;
}

/* The f32 matrices of the last few (seed, D) pairs, shared by all contexts of the process
 * (the query transform runs every decode step; regenerating R costs O(D^3)). */
#define ROT_CACHE_SLOTS 4
static struct {
    uint64_t seed, used;
    int64_t D;
    float *R;
} g_rot[ROT_CACHE_SLOTS];
static uint64_t g_rot_clock;
static pthread_mutex_t g_rot_lock = PTHREAD_MUTEX_INITIALIZER;

/* Copy R(seed, D) in f32 into `out` (D*D floats) from the cache, else compute and cache. */
static clkv_status rotation_f32(clkv_context *ctx, uint64_t seed, int64_t D, float *out) {
    const size_t n2 = (size_t)D * (size_t)D;
    pthread_mutex_lock(&g_rot_lock);
    for (int i = 0; i < ROT_CACHE_SLOTS; i++) {
        if (g_rot[i].R && g_rot[i].seed == seed && g_rot[i].D == D) {
            memcpy(out, g_rot[i].R, n2 * sizeof(float));
            g_rot[i].used = ++g_rot_clock;
            pthread_mutex_unlock(&g_rot_lock);
            return CLKV_OK;
        }
    }
    pthread_mutex_unlock(&g_rot_lock);
    double *Rd = (double *)malloc(n2 * sizeof(double));
    if (!Rd)
        return clkv__fail(ctx, CLKV_ERR_OUT_OF_HOST_MEMORY, "rotation: out of host memory");
    clkv_status st = clkv_pariskv_rotation_matrix(seed, D, Rd);
    if (st != CLKV_OK) {
        free(Rd);
        return clkv__fail(ctx, st, "rotation: %s", clkv_last_error(NULL));
    }
    for (size_t i = 0; i < n2; i++)
        out[i] = (float)Rd[i];
    free(Rd);
    float *keep = (float *)malloc(n2 * sizeof(float));
    if (!keep) /* not cached: fine */
        return CLKV_OK;
    memcpy(keep, out, n2 * sizeof(float));
    pthread_mutex_lock(&g_rot_lock);
    int victim = 0;
    for (int i = 1; i < ROT_CACHE_SLOTS; i++)
        if (g_rot[i].used < g_rot[victim].used)
            victim = i;
    free(g_rot[victim].R);
    g_rot[victim].R = keep;
    g_rot[victim].seed = seed;
    g_rot[victim].D = D;
    g_rot[victim].used = ++g_rot_clock;
    pthread_mutex_unlock(&g_rot_lock);
    return CLKV_OK;
}

static void CL_CALLBACK free_host_copy(cl_event ev, cl_int status, void *p) {
    (void)ev;
    (void)status;
    free(p);
}

clkv_status clkv__pariskv_upload_rotation(clkv_context *ctx, uint64_t seed, int64_t D, cl_mem buf,
                                          size_t offset) {
    const size_t n = (size_t)D;
    float *Rf = (float *)malloc(n * n * sizeof(float));
    if (!Rf)
        return clkv__fail(ctx, CLKV_ERR_OUT_OF_HOST_MEMORY, "rotation: out of host memory");
    clkv_status st = rotation_f32(ctx, seed, D, Rf);
    if (st != CLKV_OK) {
        free(Rf);
        return st;
    }
    cl_event ev = NULL;
    cl_int err = clEnqueueWriteBuffer(ctx->queue, buf, CL_FALSE, offset, n * n * sizeof(float), Rf,
                                      0, NULL, &ev);
    if (err != CL_SUCCESS) {
        free(Rf);
        return clkv__fail_cl(ctx, err, "clEnqueueWriteBuffer (rotation matrix)");
    }
    /* The host copy must outlive the transfer: free it from the completion callback (or,
     * if no callback can be registered, after waiting). */
    if (clSetEventCallback(ev, CL_COMPLETE, free_host_copy, Rf) != CL_SUCCESS) {
        clWaitForEvents(1, &ev);
        free(Rf);
    }
    clReleaseEvent(ev);
    return CLKV_OK;
}
