/* Double-precision reference of sparse decode attention (SPEC §1.3); see ref_sparse.h. */
#include "ref/ref_sparse.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int64_t ref_sparse_set(int64_t n, int64_t sink, int64_t local, const int32_t *idx, int64_t NI,
                       uint8_t *mask) {
    int64_t count = 0;
    for (int64_t j = 0; j < n; j++) {
        mask[j] = (uint8_t)(j < sink || j >= n - local);
    }
    for (int64_t i = 0; idx != NULL && i < NI; i++) {
        if (idx[i] >= 0 && idx[i] < n) {
            mask[idx[i]] = 1;
        }
    }
    for (int64_t j = 0; j < n; j++) {
        count += mask[j];
    }
    return count;
}

int ref_attention_sparse(int64_t B, int64_t Hq, int64_t Hkv, int64_t L, int64_t D, const float *q,
                         const float *k, const float *v, const int32_t *len, const int32_t *idx,
                         int64_t NI, int64_t sink, int64_t local, double scale, double *o,
                         double *lse) {
    if (B < 0 || Hq <= 0 || Hkv <= 0 || L < 0 || D <= 0 || Hq % Hkv != 0 || NI < 0 || sink < 0 ||
        local < 0) {
        return -1;
    }
    for (int64_t b = 0; b < B; b++) {
        if (len != NULL && (len[b] < 0 || len[b] > L)) {
            return -1;
        }
    }
    const int64_t G = Hq / Hkv;
    uint8_t *mask = (uint8_t *)malloc((size_t)(L > 0 ? L : 1));
    double *z = (double *)malloc((size_t)(L > 0 ? L : 1) * sizeof(double));
    if (mask == NULL || z == NULL) {
        free(mask);
        free(z);
        return -1;
    }
    for (int64_t b = 0; b < B; b++) {
        const int64_t n = len != NULL ? (int64_t)len[b] : L;
        for (int64_t hk = 0; hk < Hkv; hk++) {
            const int32_t *ib = idx != NULL ? idx + (size_t)((b * Hkv + hk) * NI) : NULL;
            const int64_t count = ref_sparse_set(n, sink, local, ib, NI, mask);
            const float *kb = k + (size_t)((b * Hkv + hk) * L * D);
            const float *vb = v + (size_t)((b * Hkv + hk) * L * D);
            for (int64_t h = hk * G; h < (hk + 1) * G; h++) {
                const float *qv = q + (size_t)((b * Hq + h) * D);
                double *ov = o + (size_t)((b * Hq + h) * D);
                double m = -INFINITY, sum = 0.0;
                memset(ov, 0, (size_t)D * sizeof(double));
                if (count == 0) {
                    if (lse != NULL) {
                        lse[b * Hq + h] = -INFINITY;
                    }
                    continue;
                }
                for (int64_t j = 0; j < n; j++) {
                    if (!mask[j]) {
                        continue;
                    }
                    double dot = 0.0;
                    for (int64_t d = 0; d < D; d++) {
                        dot += (double)qv[d] * (double)kb[j * D + d];
                    }
                    z[j] = scale * dot;
                    if (z[j] > m) {
                        m = z[j];
                    }
                }
                for (int64_t j = 0; j < n; j++) {
                    if (!mask[j]) {
                        continue;
                    }
                    const double w = exp(z[j] - m);
                    sum += w;
                    for (int64_t d = 0; d < D; d++) {
                        ov[d] += w * (double)vb[j * D + d];
                    }
                }
                for (int64_t d = 0; d < D; d++) {
                    ov[d] /= sum;
                }
                if (lse != NULL) {
                    lse[b * Hq + h] = m + log(sum);
                }
            }
        }
    }
    free(mask);
    free(z);
    return 0;
}
