/* Shared helpers for the clkv cmocka tests; see test_util.h. */
#include "util/test_util.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------------------------ */
/* Failure reporting                                                                    */
/* ------------------------------------------------------------------------------------ */

static char g_case[1024];
static uint64_t g_seed;
static int g_seed_set;

void tu_set_case(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_case, sizeof g_case, fmt, ap);
    va_end(ap);
}

const char *tu_case(void) {
    return g_case;
}

uint64_t tu_seed(uint64_t fallback) {
    if (!g_seed_set) {
        const char *env = getenv("CLKV_TEST_SEED");
        g_seed = fallback;
        if (env != NULL && env[0] != '\0') {
            char *end = NULL;
            unsigned long long v = strtoull(env, &end, 0);
            if (end != NULL && *end == '\0') {
                g_seed = (uint64_t)v;
            } else {
                fprintf(stderr, "test_util: ignoring malformed CLKV_TEST_SEED=\"%s\"\n", env);
            }
        }
        g_seed_set = 1;
    }
    return g_seed;
}

void tu_fail_at(const char *file, int line, const char *fmt, ...) {
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (g_seed_set) {
        print_error("[case: %s; seed: 0x%016" PRIx64 " (rerun with CLKV_TEST_SEED=0x%" PRIx64
                    ")]\n  %s\n",
                    g_case[0] ? g_case : "-", g_seed, g_seed, msg);
    } else {
        print_error("[case: %s]\n  %s\n", g_case[0] ? g_case : "-", msg);
    }
    _fail(file, line);
}

void tu_check_ok_at(const char *file, int line, const clkv_context *ctx, clkv_status st,
                    const char *expr) {
    if (st != CLKV_OK) {
        tu_fail_at(file, line, "%s returned %s (%d): \"%s\"", expr, clkv_status_string(st), (int)st,
                   clkv_last_error(ctx));
    }
}

void tu_check_cl_at(const char *file, int line, cl_int err, const char *expr) {
    if (err != CL_SUCCESS) {
        tu_fail_at(file, line, "%s failed: %s (%d)", expr, clkv_status_string(err), (int)err);
    }
}

static int is_word_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

int tu_msg_names(const char *msg, const char *name) {
    size_t n;
    const char *p;
    if (msg == NULL || name == NULL || name[0] == '\0') {
        return 0;
    }
    n = strlen(name);
    for (p = strstr(msg, name); p != NULL; p = strstr(p + 1, name)) {
        int before_ok = (p == msg) || !is_word_char(p[-1]);
        int after_ok = !is_word_char(p[n]);
        if (before_ok && after_ok) {
            return 1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------------------------ */
/* Context                                                                              */
/* ------------------------------------------------------------------------------------ */

static int g_device_printed;

/* Point the on-disk program cache at $CLKV_TEST_CACHE_ROOT/shared for the duration of one
 * clkv_context_create call (unless the caller set CLKV_CACHE_DIR); returns 1 when it set
 * the variable, so restore_test_cache_dir can unset it again and leave the environment as
 * the test found it. */
static int setup_test_cache_dir(void) {
    const char *root = getenv("CLKV_TEST_CACHE_ROOT");
    const char *dir = getenv("CLKV_CACHE_DIR");
    if (root != NULL && root[0] != '\0' && (dir == NULL || dir[0] == '\0')) {
        char path[1024];
        snprintf(path, sizeof path, "%s/shared", root);
        setenv("CLKV_CACHE_DIR", path, 1);
        return 1;
    }
    return 0;
}

static void restore_test_cache_dir(int was_set) {
    if (was_set) {
        unsetenv("CLKV_CACHE_DIR");
    }
}

/* "[ device   ] platform / device (N CUs)", once per process. */
static void print_device_once(const clkv_context *ctx) {
    if (!g_device_printed) {
        const clkv_device_info *info = clkv_context_device_info(ctx);
        if (info != NULL) {
            printf("[ device   ] %s / %s (%u CUs)\n", info->platform_name, info->device_name,
                   (unsigned)info->compute_units);
        }
        g_device_printed = 1;
    }
}

clkv_context *tu_context_create(void) {
    clkv_context *ctx = NULL;
    clkv_status st;
    int env_set = setup_test_cache_dir();
    st = clkv_context_create(NULL, &ctx);
    restore_test_cache_dir(env_set);
    if (st != CLKV_OK || ctx == NULL) {
        const char *dev = getenv("CLKV_DEVICE");
        TU_FAIL("clkv_context_create(NULL) (CLKV_DEVICE=%s) returned %s (%d): \"%s\"",
                dev ? dev : "(unset)", clkv_status_string(st), (int)st, clkv_last_error(NULL));
    }
    print_device_once(ctx);
    return ctx;
}

int tu_group_setup(void **state) {
    clkv_context *ctx = NULL;
    int env_set = setup_test_cache_dir();
    clkv_status st = clkv_context_create(NULL, &ctx);
    restore_test_cache_dir(env_set);
    if (st != CLKV_OK || ctx == NULL) {
        print_error("clkv_context_create(NULL) returned %s (%d): \"%s\"\n", clkv_status_string(st),
                    (int)st, clkv_last_error(NULL));
        return -1;
    }
    print_device_once(ctx);
    *state = ctx;
    return 0;
}

int tu_group_teardown(void **state) {
    clkv_context_destroy((clkv_context *)*state);
    *state = NULL;
    return 0;
}

/* ------------------------------------------------------------------------------------ */
/* Buffers                                                                              */
/* ------------------------------------------------------------------------------------ */

uint8_t tu_poison_byte(size_t index) {
    return (index & 1u) ? 0x7F : 0xFF;
}

void tu_poison_host(void *p, size_t bytes, size_t first_index) {
    uint8_t *b = (uint8_t *)p;
    for (size_t i = 0; i < bytes; i++) {
        b[i] = tu_poison_byte(first_index + i);
    }
}

int tu_is_poison(const void *img, size_t first_index, size_t n) {
    const uint8_t *b = (const uint8_t *)img;
    for (size_t i = first_index; i < first_index + n; i++) {
        if (b[i] != tu_poison_byte(i)) {
            return 0;
        }
    }
    return 1;
}

void *tu_malloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (p == NULL) {
        TU_FAIL("out of host memory (malloc %zu bytes)", bytes);
    }
    return p;
}

void *tu_calloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (p == NULL) {
        TU_FAIL("out of host memory (calloc %zu x %zu bytes)", n, size);
    }
    return p;
}

cl_mem tu_buffer_create(clkv_context *ctx, size_t bytes) {
    cl_int err = CL_SUCCESS;
    cl_mem buf;
    if (bytes == 0) {
        bytes = 1;
    }
    buf = clCreateBuffer(clkv_context_cl_context(ctx), CL_MEM_READ_WRITE, bytes, NULL, &err);
    if (err != CL_SUCCESS || buf == NULL) {
        TU_FAIL("clCreateBuffer(%zu bytes) failed: %s (%d)", bytes, clkv_status_string(err),
                (int)err);
    }
    tu_buffer_poison(ctx, buf, 0, bytes);
    return buf;
}

cl_mem tu_buffer_from_host(clkv_context *ctx, const void *data, size_t bytes) {
    cl_mem buf = tu_buffer_create(ctx, bytes);
    tu_buffer_write(ctx, buf, 0, data, bytes);
    return buf;
}

void tu_buffer_write(clkv_context *ctx, cl_mem buf, size_t offset, const void *data, size_t bytes) {
    if (bytes == 0) {
        return;
    }
    TU_CHECK_CL(clEnqueueWriteBuffer(clkv_context_queue(ctx), buf, CL_TRUE, offset, bytes, data, 0,
                                     NULL, NULL));
}

void tu_buffer_read(clkv_context *ctx, cl_mem buf, size_t offset, void *data, size_t bytes) {
    if (bytes == 0) {
        return;
    }
    TU_CHECK_CL(clEnqueueReadBuffer(clkv_context_queue(ctx), buf, CL_TRUE, offset, bytes, data, 0,
                                    NULL, NULL));
}

void tu_buffer_poison(clkv_context *ctx, cl_mem buf, size_t offset, size_t bytes) {
    uint8_t *tmp;
    if (bytes == 0) {
        return;
    }
    tmp = (uint8_t *)tu_malloc(bytes);
    tu_poison_host(tmp, bytes, offset);
    tu_buffer_write(ctx, buf, offset, tmp, bytes);
    free(tmp);
}

size_t tu_buffer_size(cl_mem buf) {
    size_t size = 0;
    TU_CHECK_CL(clGetMemObjectInfo(buf, CL_MEM_SIZE, sizeof size, &size, NULL));
    return size;
}

uint8_t *tu_buffer_read_all(clkv_context *ctx, cl_mem buf, size_t *bytes) {
    size_t size = tu_buffer_size(buf);
    uint8_t *img = (uint8_t *)tu_malloc(size);
    tu_buffer_read(ctx, buf, 0, img, size);
    if (bytes != NULL) {
        *bytes = size;
    }
    return img;
}

void tu_release(cl_mem buf) {
    if (buf != NULL) {
        clReleaseMemObject(buf);
    }
}

/* ------------------------------------------------------------------------------------ */
/* Dtype conversion                                                                     */
/* ------------------------------------------------------------------------------------ */

uint32_t tu_f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

float tu_f32_from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Round-to-nearest-even right shift of `m` by `s` (1 <= s <= 31). */
static uint32_t rne_shift(uint32_t m, unsigned s) {
    uint32_t q = m >> s;
    uint32_t rem = m & ((1u << s) - 1u);
    uint32_t half = 1u << (s - 1u);
    if (rem > half || (rem == half && (q & 1u))) {
        q++;
    }
    return q;
}

uint16_t tu_f32_to_f16(float x) {
    uint32_t u = tu_f32_bits(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7FFFFFFFu;
    uint32_t e = a >> 23;          /* biased f32 exponent */
    uint32_t mant = a & 0x7FFFFFu; /* 23-bit fraction */
    if (e == 0xFF) {
        if (mant == 0) {
            return (uint16_t)(sign | 0x7C00u); /* inf */
        }
        /* NaN: keep the top payload bits, force quiet (never becomes inf). */
        return (uint16_t)(sign | 0x7C00u | 0x0200u | (mant >> 13));
    }
    /* |x| >= 65520 (= 65504 + half an ulp, the tie rounds to even = up) overflows. */
    if (a >= 0x477FF000u) {
        return (uint16_t)(sign | 0x7C00u);
    }
    if (e >= 113) {
        /* Normal f16: exponent e - 127 + 15 in [1, 30]. Rounding carries into the
         * exponent naturally (and cannot reach 31 below 65520). */
        uint32_t h = ((e - 112u) << 10) | (mant >> 13);
        uint32_t rem = mant & 0x1FFFu;
        if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) {
            h++;
        }
        return (uint16_t)(sign | h);
    }
    /* Subnormal f16 (or zero): value = m * 2^(e-150) with m the 24-bit significand;
     * in units of 2^-24 that is m >> (126 - e). Below 2^-25 everything rounds to 0. */
    if (e < 102) {
        return sign;
    }
    {
        uint32_t m = mant | 0x800000u; /* e >= 102 > 0: normal f32 */
        uint32_t q = rne_shift(m, 126u - e);
        return (uint16_t)(sign | q); /* q may be 0x400: the smallest normal, correctly */
    }
}

float tu_f16_to_f32(uint16_t h) {
    uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
    uint32_t e = ((uint32_t)h >> 10) & 0x1Fu;
    uint32_t mant = (uint32_t)h & 0x3FFu;
    if (e == 0) {
        /* zero or subnormal: mant * 2^-24, exact in f32 */
        float v = ldexpf((float)mant, -24);
        return sign ? -v : v;
    }
    if (e == 31) {
        return tu_f32_from_bits(sign | 0x7F800000u | (mant << 13));
    }
    return tu_f32_from_bits(sign | ((e + 112u) << 23) | (mant << 13));
}

uint16_t tu_f32_to_bf16(float x) {
    uint32_t u = tu_f32_bits(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) {
        return (uint16_t)((u >> 16) | 0x0040u); /* NaN stays NaN (quiet) */
    }
    /* RNE on the low 16 bits; a carry into the exponent is the correct rounding
     * (up to inf for values at or above the largest bf16 + half an ulp). */
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float tu_bf16_to_f32(uint16_t b) {
    return tu_f32_from_bits((uint32_t)b << 16);
}

size_t tu_dtype_size(clkv_dtype dt) {
    return clkv_dtype_size(dt);
}

float tu_round_dtype(clkv_dtype dt, float x) {
    switch (dt) {
    case CLKV_F32:
        return x;
    case CLKV_F16:
        return tu_f16_to_f32(tu_f32_to_f16(x));
    case CLKV_BF16:
        return tu_bf16_to_f32(tu_f32_to_bf16(x));
    case CLKV_I32:
        return (float)(int32_t)x;
    case CLKV_U32:
        return (float)(uint32_t)x;
    case CLKV_U8:
        return (float)(uint8_t)x;
    }
    return x;
}

void tu_round_array(clkv_dtype dt, float *x, size_t n) {
    if (dt == CLKV_F32) {
        return;
    }
    for (size_t i = 0; i < n; i++) {
        x[i] = tu_round_dtype(dt, x[i]);
    }
}

void tu_store(clkv_dtype dt, void *base, size_t i, float x) {
    switch (dt) {
    case CLKV_F32:
        ((float *)base)[i] = x;
        break;
    case CLKV_F16:
        ((uint16_t *)base)[i] = tu_f32_to_f16(x);
        break;
    case CLKV_BF16:
        ((uint16_t *)base)[i] = tu_f32_to_bf16(x);
        break;
    case CLKV_I32:
        ((int32_t *)base)[i] = (int32_t)x;
        break;
    case CLKV_U32:
        ((uint32_t *)base)[i] = (uint32_t)x;
        break;
    case CLKV_U8:
        ((uint8_t *)base)[i] = (uint8_t)x;
        break;
    }
}

float tu_load(clkv_dtype dt, const void *base, size_t i) {
    switch (dt) {
    case CLKV_F32:
        return ((const float *)base)[i];
    case CLKV_F16:
        return tu_f16_to_f32(((const uint16_t *)base)[i]);
    case CLKV_BF16:
        return tu_bf16_to_f32(((const uint16_t *)base)[i]);
    case CLKV_I32:
        return (float)((const int32_t *)base)[i];
    case CLKV_U32:
        return (float)((const uint32_t *)base)[i];
    case CLKV_U8:
        return (float)((const uint8_t *)base)[i];
    }
    return 0.0f;
}

void *tu_pack(clkv_dtype dt, const float *x, size_t n) {
    void *p = tu_malloc(n * tu_dtype_size(dt));
    for (size_t i = 0; i < n; i++) {
        tu_store(dt, p, i, x[i]);
    }
    return p;
}

/* ------------------------------------------------------------------------------------ */
/* PRNG                                                                                 */
/* ------------------------------------------------------------------------------------ */

uint64_t tu_splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void tu_rng_seed(tu_rng *r, uint64_t seed, uint64_t stream) {
    uint64_t st = seed ^ (stream * 0xD1B54A32D192ED03ull);
    for (int i = 0; i < 4; i++) {
        r->s[i] = tu_splitmix64(&st);
    }
    if ((r->s[0] | r->s[1] | r->s[2] | r->s[3]) == 0) {
        r->s[0] = 1; /* xoshiro's only forbidden state */
    }
    r->has_spare = 0;
    r->spare = 0.0;
}

static uint64_t rotl64(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

uint64_t tu_rng_u64(tu_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl64(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return result;
}

double tu_rng_uniform(tu_rng *r) {
    return (double)(tu_rng_u64(r) >> 11) * 0x1.0p-53;
}

double tu_rng_range(tu_rng *r, double lo, double hi) {
    return lo + (hi - lo) * tu_rng_uniform(r);
}

int64_t tu_rng_int(tu_rng *r, int64_t lo, int64_t hi) {
    uint64_t span = (uint64_t)(hi - lo) + 1u;
    if (span == 0) { /* full 64-bit range */
        return (int64_t)tu_rng_u64(r);
    }
    /* Lemire-free simple rejection for unbiased results */
    uint64_t limit = UINT64_MAX - (UINT64_MAX % span);
    uint64_t x;
    do {
        x = tu_rng_u64(r);
    } while (x >= limit);
    return lo + (int64_t)(x % span);
}

double tu_rng_normal(tu_rng *r) {
    double u1, u2, rad;
    if (r->has_spare) {
        r->has_spare = 0;
        return r->spare;
    }
    do {
        u1 = tu_rng_uniform(r);
    } while (u1 <= 0.0);
    u2 = tu_rng_uniform(r);
    rad = sqrt(-2.0 * log(u1));
    r->spare = rad * sin(6.283185307179586 * u2);
    r->has_spare = 1;
    return rad * cos(6.283185307179586 * u2);
}

void tu_fill_normal(tu_rng *r, float *x, size_t n, double mean, double sd) {
    for (size_t i = 0; i < n; i++) {
        x[i] = (float)(mean + sd * tu_rng_normal(r));
    }
}

void tu_fill_uniform(tu_rng *r, float *x, size_t n, double lo, double hi) {
    for (size_t i = 0; i < n; i++) {
        x[i] = (float)tu_rng_range(r, lo, hi);
    }
}

/* ------------------------------------------------------------------------------------ */
/* Tolerances                                                                           */
/* ------------------------------------------------------------------------------------ */

tu_tol tu_tol_for(clkv_dtype out_dtype) {
    tu_tol t;
    switch (out_dtype) {
    case CLKV_BF16:
        t.rtol = 1e-2;
        t.atol = 1e-3;
        break;
    case CLKV_F16:
        t.rtol = 2e-3;
        t.atol = 1e-4;
        break;
    default:
        t.rtol = 1e-4;
        t.atol = 1e-5;
        break;
    }
    return t;
}

tu_cmp tu_compare(const float *got, const double *ref, size_t n, tu_tol tol) {
    return tu_compare_ex(got, ref, n, tol, NULL);
}

tu_cmp tu_compare_ex(const float *got, const double *ref, size_t n, tu_tol tol,
                     const double *extra_atol) {
    tu_cmp c;
    memset(&c, 0, sizeof c);
    c.n = n;
    c.ratio = -1.0;
    for (size_t i = 0; i < n; i++) {
        double g = (double)got[i];
        double r = ref[i];
        double ratio;
        if (isnan(g) || isnan(r)) {
            ratio = (isnan(g) && isnan(r)) ? 0.0 : INFINITY;
        } else if (isinf(r) || isinf(g)) {
            ratio = (g == r) ? 0.0 : INFINITY;
        } else {
            double allowed =
                tol.atol + (extra_atol != NULL ? extra_atol[i] : 0.0) + tol.rtol * fabs(r);
            double err = fabs(g - r);
            ratio = allowed > 0.0 ? err / allowed : (err > 0.0 ? INFINITY : 0.0);
        }
        if (ratio > 1.0) {
            c.n_bad++;
        }
        if (ratio > c.ratio) {
            c.ratio = ratio;
            c.worst = i;
            c.got = g;
            c.ref = r;
        }
    }
    return c;
}

static void format_index(char *out, size_t cap, size_t flat, int ndim, const int64_t *dims) {
    int64_t idx[8];
    size_t rest = flat;
    size_t used;
    if (ndim <= 0 || ndim > 8 || dims == NULL) {
        snprintf(out, cap, "[%zu]", flat);
        return;
    }
    for (int d = ndim - 1; d >= 0; d--) {
        int64_t dim = dims[d] > 0 ? dims[d] : 1;
        idx[d] = (int64_t)(rest % (size_t)dim);
        rest /= (size_t)dim;
    }
    used = (size_t)snprintf(out, cap, "[%zu] = (", flat);
    for (int d = 0; d < ndim && used < cap; d++) {
        used += (size_t)snprintf(out + used, cap - used, "%s%" PRId64, d ? ", " : "", idx[d]);
    }
    if (used < cap) {
        snprintf(out + used, cap - used, ")");
    }
}

void tu_assert_close_ex_at(const char *file, int line, const char *what, const float *got,
                           const double *ref, size_t n, tu_tol tol, const double *extra_atol,
                           int ndim, const int64_t *dims) {
    tu_cmp c = tu_compare_ex(got, ref, n, tol, extra_atol);
    if (c.n_bad > 0) {
        char idx[256];
        char extra[64] = "";
        format_index(idx, sizeof idx, c.worst, ndim, dims);
        if (extra_atol != NULL) {
            snprintf(extra, sizeof extra, " + %.3g for this element", extra_atol[c.worst]);
        }
        tu_fail_at(file, line,
                   "%s: %zu of %zu elements out of tolerance (rtol %g, atol %g%s); worst %s: "
                   "got %.9g, ref %.9g, |diff| %.3g = %.3g x allowed",
                   what, c.n_bad, c.n, tol.rtol, tol.atol, extra, idx, c.got, c.ref,
                   fabs(c.got - c.ref), c.ratio);
    }
}

void tu_assert_close_at(const char *file, int line, const char *what, const float *got,
                        const double *ref, size_t n, tu_tol tol, int ndim, const int64_t *dims) {
    tu_assert_close_ex_at(file, line, what, got, ref, n, tol, NULL, ndim, dims);
}

void tu_assert_lse_at(const char *file, int line, const char *what, const float *got,
                      const double *ref, size_t n, double atol, int ndim, const int64_t *dims) {
    tu_tol tol;
    tol.rtol = 0.0;
    tol.atol = atol;
    tu_assert_close_at(file, line, what, got, ref, n, tol, ndim, dims);
}

/* ------------------------------------------------------------------------------------ */
/* Tensors                                                                              */
/* ------------------------------------------------------------------------------------ */

int64_t tu_tensor_numel(const clkv_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) {
        n *= t->dims[i];
    }
    return n;
}

static clkv_tensor make_contiguous(cl_mem buf, clkv_dtype dtype, int ndim, const int64_t *dims,
                                   uint64_t offset_bytes) {
    clkv_tensor t;
    int64_t stride = 1;
    memset(&t, 0, sizeof t);
    t.buf = buf;
    t.offset = offset_bytes;
    t.dtype = dtype;
    t.ndim = ndim;
    for (int i = ndim - 1; i >= 0; i--) {
        t.dims[i] = dims[i];
        t.strides[i] = stride;
        stride *= dims[i];
    }
    return t;
}

static size_t numel_of(int ndim, const int64_t *dims) {
    size_t n = 1;
    for (int i = 0; i < ndim; i++) {
        n *= (size_t)dims[i];
    }
    return n;
}

clkv_tensor tu_tensor_alloc(clkv_context *ctx, clkv_dtype dtype, int ndim, const int64_t *dims,
                            uint64_t offset_bytes, size_t guard_after_bytes) {
    size_t es = tu_dtype_size(dtype);
    size_t n = numel_of(ndim, dims);
    cl_mem buf;
    if (ndim < 1 || ndim > CLKV_MAX_DIMS || es == 0 || offset_bytes % es != 0) {
        TU_FAIL("tu_tensor_alloc: bad arguments (ndim %d, dtype %d, offset %" PRIu64 ")", ndim,
                (int)dtype, offset_bytes);
    }
    buf = tu_buffer_create(ctx, (size_t)offset_bytes + n * es + guard_after_bytes);
    return make_contiguous(buf, dtype, ndim, dims, offset_bytes);
}

clkv_tensor tu_tensor_upload(clkv_context *ctx, const float *vals, clkv_dtype dtype, int ndim,
                             const int64_t *dims, uint64_t offset_bytes, size_t guard_after_bytes) {
    clkv_tensor t = tu_tensor_alloc(ctx, dtype, ndim, dims, offset_bytes, guard_after_bytes);
    size_t n = numel_of(ndim, dims);
    void *packed = tu_pack(dtype, vals, n);
    tu_buffer_write(ctx, t.buf, (size_t)offset_bytes, packed, n * tu_dtype_size(dtype));
    free(packed);
    return t;
}

clkv_tensor tu_tensor_upload_i32(clkv_context *ctx, const int32_t *vals, int ndim,
                                 const int64_t *dims, uint64_t offset_bytes,
                                 size_t guard_after_bytes) {
    clkv_tensor t = tu_tensor_alloc(ctx, CLKV_I32, ndim, dims, offset_bytes, guard_after_bytes);
    size_t n = numel_of(ndim, dims);
    tu_buffer_write(ctx, t.buf, (size_t)offset_bytes, vals, n * sizeof(int32_t));
    return t;
}

/* Byte offset of logical element `flat` (row-major over t->dims). */
static size_t elem_byte_offset(const clkv_tensor *t, size_t flat) {
    size_t es = tu_dtype_size(t->dtype);
    size_t off = (size_t)t->offset;
    size_t rest = flat;
    for (int d = t->ndim - 1; d >= 0; d--) {
        size_t dim = (size_t)(t->dims[d] > 0 ? t->dims[d] : 1);
        off += (rest % dim) * (size_t)t->strides[d] * es;
        rest /= dim;
    }
    return off;
}

void tu_tensor_read(clkv_context *ctx, const clkv_tensor *t, float *out) {
    size_t bytes = 0;
    uint8_t *img = tu_buffer_read_all(ctx, t->buf, &bytes);
    size_t n = (size_t)tu_tensor_numel(t);
    size_t es = tu_dtype_size(t->dtype);
    for (size_t i = 0; i < n; i++) {
        size_t off = elem_byte_offset(t, i);
        if (off + es > bytes) {
            free(img);
            TU_FAIL("tu_tensor_read: element %zu at byte %zu is outside the %zu-byte buffer", i,
                    off, bytes);
        }
        out[i] = tu_load(t->dtype, img + off, 0);
    }
    free(img);
}

void tu_expect_completed_at(const char *file, int line, clkv_context *ctx, cl_event ev,
                            size_t ws_bytes, const char *what) {
    if (ev == NULL)
        tu_fail_at(file, line, "%s returned CLKV_OK but no event", what);
    cl_int status = CL_QUEUED;
    cl_int err = clWaitForEvents(1, &ev);
    if (err == CL_SUCCESS)
        err = clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, NULL);
    clReleaseEvent(ev);
    if (err != CL_SUCCESS)
        tu_fail_at(file, line, "%s: waiting for its event failed with %d", what, (int)err);
    if (status != CL_COMPLETE)
        tu_fail_at(file, line, "%s: event status after wait is %d, expected CL_COMPLETE", what,
                   (int)status);
    const clkv_status st = clkv_context_finish(ctx);
    if (st != CLKV_OK)
        tu_fail_at(file, line, "%s: clkv_context_finish: %s", what, clkv_last_error(ctx));
    if (clkv_context_workspace_bytes(ctx) < ws_bytes)
        tu_fail_at(file, line,
                   "%s: workspace holds %zu bytes after the call, workspace_size "
                   "reported %zu",
                   what, clkv_context_workspace_bytes(ctx), ws_bytes);
}

void tu_assert_written_exactly_at(const char *file, int line, clkv_context *ctx,
                                  const clkv_tensor *t, const char *what) {
    size_t bytes = 0;
    uint8_t *img = tu_buffer_read_all(ctx, t->buf, &bytes);
    uint8_t *mask = (uint8_t *)tu_calloc(bytes, 1);
    size_t n = (size_t)tu_tensor_numel(t);
    size_t es = tu_dtype_size(t->dtype);
    int64_t dims[CLKV_MAX_DIMS];
    for (int d = 0; d < t->ndim; d++) {
        dims[d] = t->dims[d];
    }
    for (size_t i = 0; i < n; i++) {
        size_t off = elem_byte_offset(t, i);
        if (off + es > bytes) {
            free(img);
            free(mask);
            tu_fail_at(file, line, "%s: element %zu at byte %zu lies outside the %zu-byte buffer",
                       what, i, off, bytes);
        }
        if (tu_is_poison(img, off, es)) {
            char idx[256];
            format_index(idx, sizeof idx, i, t->ndim, dims);
            free(img);
            free(mask);
            tu_fail_at(file, line, "%s: element %s (byte %zu) was not written (still poison)", what,
                       idx, off);
        }
        memset(mask + off, 1, es);
    }
    for (size_t b = 0; b < bytes; b++) {
        if (!mask[b] && img[b] != tu_poison_byte(b)) {
            uint8_t v = img[b];
            free(img);
            free(mask);
            tu_fail_at(
                file, line,
                "%s: byte %zu of the %zu-byte buffer lies outside the tensor (offset %" PRIu64
                ") but was overwritten (0x%02x, poison 0x%02x)",
                what, b, bytes, t->offset, v, tu_poison_byte(b));
        }
    }
    free(img);
    free(mask);
}

void tu_assert_buffer_poison_at(const char *file, int line, clkv_context *ctx, cl_mem buf,
                                const char *what) {
    size_t bytes = 0;
    uint8_t *img = tu_buffer_read_all(ctx, buf, &bytes);
    for (size_t b = 0; b < bytes; b++) {
        if (img[b] != tu_poison_byte(b)) {
            uint8_t v = img[b];
            free(img);
            tu_fail_at(file, line, "%s: byte %zu of %zu was written (0x%02x, poison 0x%02x)", what,
                       b, bytes, v, tu_poison_byte(b));
        }
    }
    free(img);
}

const char *tu_layout_name(tu_layout layout) {
    return layout == TU_NHD ? "NHD" : "HND";
}

clkv_tensor tu_kv_tensor_offset(clkv_context *ctx, const float *logical, clkv_dtype dtype,
                                int64_t B, int64_t H, int64_t L, int64_t D, tu_layout layout,
                                uint64_t offset_bytes) {
    size_t es = tu_dtype_size(dtype);
    size_t n = (size_t)B * (size_t)H * (size_t)L * (size_t)D;
    uint8_t *packed;
    cl_mem buf;
    clkv_tensor t;
    if (es == 0 || offset_bytes % es != 0) {
        TU_FAIL("tu_kv_tensor_offset: offset %" PRIu64 " not a multiple of %zu", offset_bytes, es);
    }
    packed = (uint8_t *)tu_malloc(n * es);
    for (int64_t b = 0; b < B; b++) {
        for (int64_t h = 0; h < H; h++) {
            for (int64_t l = 0; l < L; l++) {
                size_t src = (size_t)(((b * H + h) * L + l) * D);
                size_t dst = layout == TU_NHD ? (size_t)(((b * L + l) * H + h) * D) : src;
                for (int64_t d = 0; d < D; d++) {
                    tu_store(dtype, packed, dst + (size_t)d, logical[src + (size_t)d]);
                }
            }
        }
    }
    buf = tu_buffer_create(ctx, (size_t)offset_bytes + n * es);
    tu_buffer_write(ctx, buf, (size_t)offset_bytes, packed, n * es);
    free(packed);
    t = layout == TU_NHD ? clkv_tensor_4d_nhd(buf, dtype, B, H, L, D)
                         : clkv_tensor_4d(buf, dtype, B, H, L, D);
    t.offset = offset_bytes;
    return t;
}

clkv_tensor tu_kv_tensor(clkv_context *ctx, const float *logical, clkv_dtype dtype, int64_t B,
                         int64_t H, int64_t L, int64_t D, tu_layout layout) {
    return tu_kv_tensor_offset(ctx, logical, dtype, B, H, L, D, layout, 0);
}

double tu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ------------------------------------------------------------------------------------ */
/* Bad-input checks                                                                     */
/* ------------------------------------------------------------------------------------ */

void tu_expect_status_at(const char *file, int line, const clkv_context *msg_ctx, clkv_status st,
                         clkv_status want, const char *name, const char *what) {
    tu_set_case("bad input: %s", what);
    if (st != want)
        tu_fail_at(file, line, "status %s (%d), expected %s; message: %s", clkv_status_string(st),
                   st, clkv_status_string(want), clkv_last_error(msg_ctx));
    if (!tu_msg_names(clkv_last_error(msg_ctx), name))
        tu_fail_at(file, line, "message \"%s\" does not name \"%s\"", clkv_last_error(msg_ctx),
                   name);
}

void tu_expect_reject_at(const char *file, int line, clkv_context *ctx, clkv_status st,
                         clkv_status want, const char *name, cl_mem out, cl_event ev,
                         const char *what) {
    tu_expect_status_at(file, line, strcmp(name, "ctx") == 0 ? NULL : ctx, st, want, name, what);
    if (ev != NULL) {
        clReleaseEvent(ev);
        tu_fail_at(file, line, "the rejected call returned an event");
    }
    clFinish(clkv_context_queue(ctx));
    if (out)
        tu_assert_buffer_poison_at(file, line, ctx, out, what);
}

/* ------------------------------------------------------------------------------------ */
/* Suites                                                                               */
/* ------------------------------------------------------------------------------------ */

void tu_suite_add(tu_suite *s, const char *name, CMUnitTestFunction fn, void *state) {
    if (s->n >= TU_SUITE_MAX) {
        s->overflow = 1;
        return;
    }
    struct CMUnitTest *t = &s->tests[s->n++];
    memset(t, 0, sizeof *t);
    t->name = name;
    t->test_func = fn;
    t->initial_state = state;
}

static clkv_context **g_suite_ctx;
static void (*g_suite_at_end)(void);

static int suite_setup(void **state) {
    (void)state;
    return tu_group_setup((void **)g_suite_ctx);
}

static int suite_teardown(void **state) {
    (void)state;
    if (g_suite_at_end)
        g_suite_at_end();
    return tu_group_teardown((void **)g_suite_ctx);
}

int tu_suite_run(const tu_suite *s, const char *group, clkv_context **ctx, uint64_t default_seed) {
    printf("[ seed     ] 0x%016" PRIx64 " (set CLKV_TEST_SEED to change)\n", tu_seed(default_seed));
    if (s->overflow) {
        print_error("suite %s: more than %d tests (raise TU_SUITE_MAX)\n", group, TU_SUITE_MAX);
        return 1;
    }
    g_suite_ctx = ctx;
    g_suite_at_end = s->at_end;
    return _cmocka_run_group_tests(group, s->tests, s->n, suite_setup, suite_teardown);
}
