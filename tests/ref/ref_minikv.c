/* MiniKV references (ref_minikv.h), written from include/clkv/minikv.h and the SPEC. */
#include "ref_minikv.h"

#include <math.h>
#include <stdlib.h>

#include "ref_select.h"

int ref_minikv_acumul(int64_t B, int64_t Hq, int64_t Hkv, int64_t T, int64_t L, int64_t D,
                      const float *q, const float *k, const int32_t *len, double scale, double *a) {
    if (B < 0 || Hq <= 0 || Hkv <= 0 || Hq % Hkv || T < 0 || L < 0 || D <= 0)
        return -1;
    const int64_t G = Hq / Hkv;
    double *z = malloc((size_t)(L > 0 ? L : 1) * sizeof(double));
    if (!z)
        return -1;
    for (int64_t b = 0; b < B; b++) {
        const int64_t n = len ? len[b] : T;
        if (n < 0 || n > L || n > T) {
            free(z);
            return -1;
        }
        for (int64_t g = 0; g < Hkv; g++) {
            double *row = a + (b * Hkv + g) * L;
            for (int64_t j = 0; j < L; j++)
                row[j] = j < n ? 0.0 : -INFINITY;
            for (int64_t hh = 0; hh < G; hh++) {
                const int64_t h = g * G + hh;
                for (int64_t t = 0; t < T; t++) {
                    const int64_t pos = n - T + t;
                    if (pos < 0)
                        continue;
                    const float *qr = q + ((b * Hq + h) * T + t) * D;
                    double m = -INFINITY;
                    for (int64_t j = 0; j <= pos; j++) {
                        const float *kr = k + ((b * Hkv + g) * L + j) * D;
                        double d = 0.0;
                        for (int64_t e = 0; e < D; e++)
                            d += (double)qr[e] * (double)kr[e];
                        z[j] = scale * d;
                        m = z[j] > m ? z[j] : m;
                    }
                    double s = 0.0;
                    for (int64_t j = 0; j <= pos; j++)
                        s += exp(z[j] - m);
                    const double lse = m + log(s);
                    for (int64_t j = 0; j <= pos; j++)
                        row[j] += exp(z[j] - lse) / (double)G;
                }
            }
        }
    }
    free(z);
    return 0;
}

static int64_t frac(int64_t n, double ratio) {
    const uint64_t r = (uint64_t)llround(ratio * 16777216.0);
    return (int64_t)(((uint64_t)n * r) >> 24);
}

int64_t ref_minikv_budget(int64_t n, double heavy_ratio, double recent_ratio, int64_t heavy_budget,
                          int64_t *heavy, int64_t *recent) {
    int64_t r = frac(n, recent_ratio);
    int64_t h = heavy_budget >= 0 ? heavy_budget : frac(n, heavy_ratio);
    if (h > n - r)
        h = n - r;
    if (n >= 1 && h + r == 0)
        r = 1;
    if (heavy)
        *heavy = h;
    if (recent)
        *recent = r;
    return h + r;
}

int64_t ref_minikv_select(const float *a, int64_t n, int64_t heavy, int64_t recent, int32_t *out) {
    if (n < 0 || heavy < 0 || recent < 0 || heavy + recent > n)
        return -1;
    int64_t c = ref_select_topk(a, n - recent, heavy, 1, out);
    if (c < 0)
        return -1;
    for (int64_t j = n - recent; j < n; j++)
        out[c++] = (int32_t)j;
    return c;
}
