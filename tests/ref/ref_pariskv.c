/* ParisKV encoder reference (SPEC §4), plain C in double. */
#include "ref/ref_pariskv.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void ref_pariskv_signs(uint64_t seed, int64_t D, int8_t *signs) {
    uint64_t x = seed;
    for (int64_t i = 0; i < D; i++) {
        x += 0x9E3779B97F4A7C15ull;
        uint64_t z = x;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z = z ^ (z >> 31);
        signs[i] = (int8_t)((z >> 63) ? -1 : 1);
    }
}

static int popcount64(uint64_t v) {
    int c = 0;
    while (v) {
        v &= v - 1;
        c++;
    }
    return c;
}

void ref_pariskv_rotate(int64_t D, const int8_t *signs, const double *x, double *y) {
    const double s = 1.0 / sqrt((double)D);
    for (int64_t i = 0; i < D; i++) {
        double acc = 0.0;
        for (int64_t j = 0; j < D; j++) {
            const double h = (popcount64((uint64_t)(i & j)) & 1) ? -1.0 : 1.0;
            acc += h * signs[j] * x[j];
        }
        y[i] = s * acc;
    }
}

double ref_pariskv_weight(int m, const float a[8], double knorm, double r_b, const double *u_b,
                          const uint8_t *codes, int64_t b) {
    if (r_b == 0.0)
        return 0.0;
    double alpha = 0.0;
    for (int j = 0; j < m; j++) {
        const int64_t c = b * m + j;
        const unsigned nib = (codes[c / 2] >> ((c & 1) ? 4 : 0)) & 0xFu;
        const double v = ((nib & 8u) ? 1.0 : -1.0) * (double)a[nib & 7u];
        alpha += v * u_b[j];
    }
    return knorm * r_b / alpha;
}

void ref_pariskv_apply(int64_t D, const double *R, const double *x, double *y) {
    for (int64_t i = 0; i < D; i++) {
        double acc = 0.0;
        for (int64_t j = 0; j < D; j++)
            acc += R[i * D + j] * x[j];
        y[i] = acc;
    }
}

/* The SPEC's encoder with either rotation: R (dense) when not NULL, else the SRHT. */
static void encode_key(int64_t D, int m, const int8_t *signs, const double *R, const float tau[7],
                       const float a[8], const float *k, double *knorm, double *u, double *r,
                       uint8_t *ids, uint8_t *codes, double *w) {
    double *kh = (double *)calloc((size_t)D * 2, sizeof(double));
    if (!kh)
        return;
    double *kt = kh + D;
    double n2 = 0.0;
    for (int64_t j = 0; j < D; j++)
        n2 += (double)k[j] * (double)k[j];
    const double nk = sqrt(n2);
    *knorm = nk;
    /* k~ = R k / ||k|| (R linear): rotating the stored values first keeps sums of
     * integer-valued keys exact, so blocks that are zero in exact arithmetic are zero. */
    for (int64_t j = 0; j < D; j++)
        kh[j] = (double)k[j];
    if (R)
        ref_pariskv_apply(D, R, kh, kt);
    else
        ref_pariskv_rotate(D, signs, kh, kt);
    for (int64_t j = 0; j < D; j++)
        kt[j] = nk > 0.0 ? kt[j] / nk : 0.0;
    memset(codes, 0, (size_t)(D / 2));
    const int64_t nblk = D / m;
    for (int64_t b = 0; b < nblk; b++) {
        double ss = 0.0;
        for (int j = 0; j < m; j++)
            ss += kt[b * m + j] * kt[b * m + j];
        const double rb = sqrt(ss);
        r[b] = rb;
        unsigned id = 0;
        for (int j = 0; j < m; j++) {
            const int64_t c = b * m + j;
            const double uj = rb > 0.0 ? kt[c] / rb : 0.0;
            u[c] = uj;
            const unsigned pos = uj >= 0.0;
            unsigned t = 0;
            for (int i = 0; i < 7; i++)
                t += (double)tau[i] < fabs(uj);
            id |= pos << j;
            codes[c / 2] |= (uint8_t)(((pos << 3) | t) << ((c & 1) ? 4 : 0));
        }
        ids[b] = (uint8_t)id;
    }
    for (int64_t b = 0; b < nblk; b++)
        w[b] = ref_pariskv_weight(m, a, nk, r[b], u + b * m, codes, b);
    free(kh);
}

void ref_pariskv_encode_key(int64_t D, int m, const int8_t *signs, const float tau[7],
                            const float a[8], const float *k, double *knorm, double *u, double *r,
                            uint8_t *ids, uint8_t *codes, double *w) {
    encode_key(D, m, signs, NULL, tau, a, k, knorm, u, r, ids, codes, w);
}

void ref_pariskv_encode_key_dense(int64_t D, int m, const double *R, const float tau[7],
                                  const float a[8], const float *k, double *knorm, double *u,
                                  double *r, uint8_t *ids, uint8_t *codes, double *w) {
    encode_key(D, m, NULL, R, tau, a, k, knorm, u, r, ids, codes, w);
}

void ref_pariskv_dense_matrix(uint64_t seed, int64_t D, double *R) {
    const size_t n = (size_t)D;
    double *G = (double *)malloc(n * n * sizeof(double));
    if (!G)
        return;
    uint64_t x = seed;
    for (size_t i = 0; i < n * n; i += 2) {
        double u[2];
        for (int t = 0; t < 2; t++) {
            x += 0x9E3779B97F4A7C15ull;
            uint64_t z = x;
            z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
            z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
            z = z ^ (z >> 31);
            u[t] = (double)(z >> 11) / 9007199254740992.0; /* 2^53 */
        }
        const double rad = sqrt(-2.0 * log(1.0 - u[0]));
        const double th = 2.0 * 3.14159265358979323846 * u[1];
        G[i] = rad * cos(th);
        if (i + 1 < n * n)
            G[i + 1] = rad * sin(th);
    }
    /* modified Gram-Schmidt on the columns: column j of R = normalized residual of
     * column j of G against columns 0..j-1 (twice, for accuracy) */
    for (size_t j = 0; j < n; j++) {
        for (size_t i = 0; i < n; i++)
            R[i * n + j] = G[i * n + j];
        for (int pass = 0; pass < 2; pass++)
            for (size_t c = 0; c < j; c++) {
                double dot = 0.0;
                for (size_t i = 0; i < n; i++)
                    dot += R[i * n + c] * R[i * n + j];
                for (size_t i = 0; i < n; i++)
                    R[i * n + j] -= dot * R[i * n + c];
            }
        double nn = 0.0;
        for (size_t i = 0; i < n; i++)
            nn += R[i * n + j] * R[i * n + j];
        nn = sqrt(nn);
        for (size_t i = 0; i < n; i++)
            R[i * n + j] /= nn;
    }
    free(G);
}

static void query(int64_t B, int64_t Hq, int64_t Hkv, int64_t D, const int8_t *signs,
                  const double *R, const float *q, double *q_rot, double *q_norm) {
    const int64_t G = Hq / Hkv;
    double *mean = (double *)malloc((size_t)D * sizeof(double));
    if (!mean)
        return;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hkv; h++) {
            double n2 = 0.0;
            for (int64_t j = 0; j < D; j++) {
                double s = 0.0;
                for (int64_t g = 0; g < G; g++)
                    s += q[((b * Hq) + h * G + g) * D + j];
                mean[j] = s / (double)G;
                n2 += mean[j] * mean[j];
            }
            const double nrm = sqrt(n2);
            q_norm[b * Hkv + h] = nrm;
            for (int64_t j = 0; j < D; j++)
                mean[j] = nrm > 0.0 ? mean[j] / nrm : 0.0;
            if (R)
                ref_pariskv_apply(D, R, mean, q_rot + (b * Hkv + h) * D);
            else
                ref_pariskv_rotate(D, signs, mean, q_rot + (b * Hkv + h) * D);
        }
    free(mean);
}

void ref_pariskv_query(int64_t B, int64_t Hq, int64_t Hkv, int64_t D, const int8_t *signs,
                       const float *q, double *q_rot, double *q_norm) {
    query(B, Hq, Hkv, D, signs, NULL, q, q_rot, q_norm);
}

void ref_pariskv_query_dense(int64_t B, int64_t Hq, int64_t Hkv, int64_t D, const double *R,
                             const float *q, double *q_rot, double *q_norm) {
    query(B, Hq, Hkv, D, NULL, R, q, q_rot, q_norm);
}
