/* ParisKV Lloyd-Max levels (SPEC §4) and splitmix64 signs, computed on the host. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "clkv/pariskv.h"
#include "runtime/internal.h"

#define LM_TOL 1e-13
#define LM_MAX_ITERS 200000

/* Unnormalized CDF of X = sqrt(Y), Y ~ Beta(1/2, (m-1)/2), up to the constant factor
 * 2 / B(1/2, (m-1)/2): with x = sin(theta),
 *   F(x) = int_0^x (1 - s^2)^((m-3)/2) ds = int_0^theta cos^(m-2)(p) dp = I_{m-2}(theta),
 *   I_0 = theta, I_1 = sin(theta), I_n = cos^(n-1) sin / n + (n-1)/n I_{n-2}. */
static double lm_cdf(int m, double x) {
    if (x <= 0.0)
        return 0.0;
    if (x > 1.0)
        x = 1.0;
    const double s = x, c = sqrt(fmax(0.0, 1.0 - x * x)), th = asin(x);
    const int n = m - 2;
    double prev = (n % 2 == 0) ? th : s; /* I_0 or I_1 */
    for (int k = (n % 2 == 0) ? 2 : 3; k <= n; k += 2)
        prev = pow(c, k - 1) * s / k + (double)(k - 1) / k * prev;
    return prev;
}

/* Unnormalized first moment int_0^x s f(s) ds = (1 - cos^(m-1)(theta)) / (m-1). */
static double lm_moment(int m, double x) {
    if (x <= 0.0)
        return 0.0;
    if (x > 1.0)
        x = 1.0;
    const double c = sqrt(fmax(0.0, 1.0 - x * x));
    return (1.0 - pow(c, m - 1)) / (m - 1);
}

static clkv_status compute_levels(int m, double tau[7], double a[8]) {
    double edges[9], cdf[9], mom[9];
    for (int t = 0; t < 7; t++)
        tau[t] = (t + 1) / 8.0;
    for (int it = 0; it < LM_MAX_ITERS; it++) {
        edges[0] = 0.0;
        edges[8] = 1.0;
        for (int t = 0; t < 7; t++)
            edges[t + 1] = tau[t];
        for (int t = 0; t <= 8; t++) {
            cdf[t] = lm_cdf(m, edges[t]);
            mom[t] = lm_moment(m, edges[t]);
        }
        for (int t = 0; t < 8; t++) {
            const double mass = cdf[t + 1] - cdf[t];
            a[t] = mass > 0.0 ? (mom[t + 1] - mom[t]) / mass : 0.5 * (edges[t] + edges[t + 1]);
        }
        double moved = 0.0;
        for (int t = 0; t < 7; t++) {
            const double nt = 0.5 * (a[t] + a[t + 1]);
            moved = fmax(moved, fabs(nt - tau[t]));
            tau[t] = nt;
        }
        if (moved <= LM_TOL) {
            /* final conditional means for the converged thresholds */
            for (int t = 0; t < 7; t++)
                edges[t + 1] = tau[t];
            for (int t = 0; t <= 8; t++) {
                cdf[t] = lm_cdf(m, edges[t]);
                mom[t] = lm_moment(m, edges[t]);
            }
            for (int t = 0; t < 8; t++)
                a[t] = (mom[t + 1] - mom[t]) / (cdf[t + 1] - cdf[t]);
            return CLKV_OK;
        }
    }
    return CLKV_ERR_INTERNAL;
}

void clkv_pariskv_levels_published_m8(clkv_pariskv_levels *out) {
    static const float tau[7] = {0.0843f, 0.1698f, 0.2578f, 0.3499f, 0.4487f, 0.5585f, 0.6901f};
    static const float a[8] = {0.0420f, 0.1266f, 0.2130f, 0.3025f,
                               0.3973f, 0.5001f, 0.6169f, 0.7633f};
    if (!out)
        return;
    out->m = 8;
    memcpy(out->tau, tau, sizeof tau);
    memcpy(out->a, a, sizeof a);
}

clkv_status clkv_pariskv_levels_compute(int32_t m, clkv_pariskv_levels *out) {
    if (!out)
        return clkv__fail(NULL, CLKV_ERR_ARG_NULL, "out: levels pointer is NULL");
    if (m < CLKV_PARISKV_MIN_M || m > CLKV_PARISKV_MAX_M)
        return clkv__fail(NULL, CLKV_ERR_ARG_RANGE, "m: %d is outside [2, 8]", (int)m);
    double tau[7], a[8];
    if (compute_levels(m, tau, a) != CLKV_OK)
        return clkv__fail(NULL, CLKV_ERR_INTERNAL,
                          "m: Lloyd-Max iteration for m = %d did not converge", (int)m);
    out->m = m;
    for (int t = 0; t < 7; t++)
        out->tau[t] = (float)tau[t];
    for (int t = 0; t < 8; t++)
        out->a[t] = (float)a[t];
    return CLKV_OK;
}

clkv_status clkv_pariskv_levels_default(int32_t m, int computed_m8, clkv_pariskv_levels *out) {
    if (!out)
        return clkv__fail(NULL, CLKV_ERR_ARG_NULL, "out: levels pointer is NULL");
    if (m == 8 && !computed_m8) {
        clkv_pariskv_levels_published_m8(out);
        return CLKV_OK;
    }
    return clkv_pariskv_levels_compute(m, out);
}

clkv_status clkv_pariskv_signs_from_seed(uint64_t seed, int64_t D, int8_t *signs) {
    if (!signs)
        return clkv__fail(NULL, CLKV_ERR_ARG_NULL, "signs: output pointer is NULL");
    if (D < 1 || D > 65536)
        return clkv__fail(NULL, CLKV_ERR_ARG_RANGE, "D: %lld is outside [1, 65536]", (long long)D);
    uint64_t state = seed;
    for (int64_t i = 0; i < D; i++) {
        uint64_t z = (state += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        signs[i] = (z >> 63) ? (int8_t)-1 : (int8_t)1;
    }
    return CLKV_OK;
}
