/* Double-precision reference of decode attention (SPEC §1.1); see ref_attention.h. */
#include "ref/ref_attention.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int ref_attention_decode(int64_t B, int64_t Hq, int64_t Hkv, int64_t L, int64_t D, const float *q,
                         const float *k, const float *v, const int32_t *len, double scale,
                         double *o, double *lse) {
    return ref_attention_decode_ex(B, Hq, Hkv, L, D, q, k, v, len, scale, o, lse, NULL);
}

int ref_attention_decode_ex(int64_t B, int64_t Hq, int64_t Hkv, int64_t L, int64_t D,
                            const float *q, const float *k, const float *v, const int32_t *len,
                            double scale, double *o, double *lse, double *spread) {
    int64_t G;
    double *z;
    if (B < 0 || Hq <= 0 || Hkv <= 0 || L < 0 || D <= 0 || Hq % Hkv != 0) {
        return -1;
    }
    for (int64_t b = 0; b < B; b++) {
        if (len != NULL && (len[b] < 0 || len[b] > L)) {
            return -1;
        }
    }
    G = Hq / Hkv;
    z = (double *)malloc((size_t)(L > 0 ? L : 1) * sizeof(double));
    if (z == NULL) {
        return -1;
    }
    for (int64_t b = 0; b < B; b++) {
        int64_t n = len != NULL ? (int64_t)len[b] : L;
        for (int64_t h = 0; h < Hq; h++) {
            int64_t hk = h / G;
            const float *qv = q + (size_t)((b * Hq + h) * D);
            const float *kb = k + (size_t)((b * Hkv + hk) * L * D);
            const float *vb = v + (size_t)((b * Hkv + hk) * L * D);
            double *ov = o + (size_t)((b * Hq + h) * D);
            double m = -INFINITY;
            double sum = 0.0;
            double *sp = spread != NULL ? spread + (size_t)((b * Hq + h) * D) : NULL;
            memset(ov, 0, (size_t)D * sizeof(double));
            if (sp != NULL) {
                memset(sp, 0, (size_t)D * sizeof(double));
            }
            if (n == 0) {
                if (lse != NULL) {
                    lse[b * Hq + h] = -INFINITY;
                }
                continue;
            }
            /* logits and their maximum */
            for (int64_t j = 0; j < n; j++) {
                const float *kj = kb + (size_t)(j * D);
                double dot = 0.0;
                for (int64_t d = 0; d < D; d++) {
                    dot += (double)qv[d] * (double)kj[d];
                }
                z[j] = scale * dot;
                if (z[j] > m) {
                    m = z[j];
                }
            }
            /* max-subtracted softmax: every weight is in (0, 1], the sum in [1, n] */
            for (int64_t j = 0; j < n; j++) {
                const float *vj = vb + (size_t)(j * D);
                double w = exp(z[j] - m);
                sum += w;
                for (int64_t d = 0; d < D; d++) {
                    ov[d] += w * (double)vj[d];
                }
            }
            for (int64_t d = 0; d < D; d++) {
                ov[d] /= sum;
            }
            if (sp != NULL) {
                for (int64_t j = 0; j < n; j++) {
                    const float *vj = vb + (size_t)(j * D);
                    double pj = exp(z[j] - m) / sum;
                    for (int64_t d = 0; d < D; d++) {
                        sp[d] += pj * fabs((double)vj[d] - ov[d]);
                    }
                }
            }
            if (lse != NULL) {
                lse[b * Hq + h] = m + log(sum);
            }
        }
    }
    free(z);
    return 0;
}

/* Window / prefill attention (SPEC §1.2): row t of sequence b is position len - T + t and
 * attends causally to keys 0 .. pos; see ref_attention.h. */
int ref_attention_window(int64_t B, int64_t Hq, int64_t Hkv, int64_t T, int64_t L, int64_t D,
                         const float *q, const float *k, const float *v, const int32_t *len,
                         double scale, double *o, double *lse, double *spread) {
    int64_t G;
    double *z;
    if (B < 0 || Hq <= 0 || Hkv <= 0 || T < 0 || L < 0 || D <= 0 || Hq % Hkv != 0) {
        return -1;
    }
    for (int64_t b = 0; b < B; b++) {
        if (len != NULL && (len[b] < 0 || len[b] > L)) {
            return -1;
        }
    }
    G = Hq / Hkv;
    z = (double *)malloc((size_t)(L > 0 ? L : 1) * sizeof(double));
    if (z == NULL) {
        return -1;
    }
    for (int64_t b = 0; b < B; b++) {
        const int64_t n = len != NULL ? (int64_t)len[b] : L;
        for (int64_t h = 0; h < Hq; h++) {
            const float *kb = k + (size_t)((b * Hkv + h / G) * L * D);
            const float *vb = v + (size_t)((b * Hkv + h / G) * L * D);
            for (int64_t t = 0; t < T; t++) {
                const int64_t row = (b * Hq + h) * T + t;
                const int64_t pos = n - T + t; /* last visible key */
                const float *qv = q + (size_t)(row * D);
                double *ov = o + (size_t)(row * D);
                double *sp = spread != NULL ? spread + (size_t)(row * D) : NULL;
                double m = -INFINITY, sum = 0.0;
                memset(ov, 0, (size_t)D * sizeof(double));
                if (sp != NULL) {
                    memset(sp, 0, (size_t)D * sizeof(double));
                }
                if (pos < 0) {
                    if (lse != NULL) {
                        lse[row] = -INFINITY;
                    }
                    continue;
                }
                for (int64_t j = 0; j <= pos; j++) {
                    double dot = 0.0;
                    for (int64_t d = 0; d < D; d++) {
                        dot += (double)qv[d] * (double)kb[j * D + d];
                    }
                    z[j] = scale * dot;
                    if (z[j] > m) {
                        m = z[j];
                    }
                }
                for (int64_t j = 0; j <= pos; j++) {
                    const double w = exp(z[j] - m);
                    sum += w;
                    for (int64_t d = 0; d < D; d++) {
                        ov[d] += w * (double)vb[j * D + d];
                    }
                }
                for (int64_t d = 0; d < D; d++) {
                    ov[d] /= sum;
                }
                if (sp != NULL) {
                    for (int64_t j = 0; j <= pos; j++) {
                        const double pj = exp(z[j] - m) / sum;
                        for (int64_t d = 0; d < D; d++) {
                            sp[d] += pj * fabs((double)vb[j * D + d] - ov[d]);
                        }
                    }
                }
                if (lse != NULL) {
                    lse[row] = m + log(sum);
                }
            }
        }
    }
    free(z);
    return 0;
}
