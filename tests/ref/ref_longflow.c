/* Double-precision reference of the LongFlow static cache (SPEC §2.3); see
 * ref_longflow.h. */
#include "ref/ref_longflow.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int ref_lf_init(ref_lf_cache *c, int64_t B, int64_t Hq, int64_t Hkv, int64_t D, int64_t S,
                int per_head, int protect) {
    memset(c, 0, sizeof *c);
    if (B < 1 || Hq < 1 || Hkv < 1 || D < 1 || S < 1 || Hq % Hkv != 0 || protect < 0) {
        return -1;
    }
    c->B = B;
    c->Hq = Hq;
    c->Hkv = Hkv;
    c->D = D;
    c->S = S;
    c->per_head = per_head;
    c->Hm = per_head ? Hkv : 1;
    c->protect = protect;
    c->k = (float *)calloc((size_t)(B * Hkv * S * D), sizeof(float));
    c->v = (float *)calloc((size_t)(B * Hkv * S * D), sizeof(float));
    c->pos = (int32_t *)malloc((size_t)(B * c->Hm * S) * sizeof(int32_t));
    c->victim = (int32_t *)calloc((size_t)(B * c->Hm), sizeof(int32_t));
    c->next_pos = (int32_t *)calloc((size_t)B, sizeof(int32_t));
    if (!c->k || !c->v || !c->pos || !c->victim || !c->next_pos) {
        ref_lf_free(c);
        return -1;
    }
    for (int64_t i = 0; i < B * c->Hm * S; i++) {
        c->pos[i] = -1;
    }
    return 0;
}

void ref_lf_free(ref_lf_cache *c) {
    free(c->k);
    free(c->v);
    free(c->pos);
    free(c->victim);
    free(c->next_pos);
    memset(c, 0, sizeof *c);
}

int ref_lf_candidate(const ref_lf_cache *c, int64_t b, int64_t u, int64_t i, int64_t newest) {
    const int32_t p = c->pos[(b * c->Hm + u) * c->S + i];
    return p < 0 || (int64_t)p < newest - c->protect + 1;
}

int32_t ref_lf_choose(const ref_lf_cache *c, int64_t b, int64_t u, const double *scores,
                      int64_t newest) {
    const int32_t *prow = c->pos + (b * c->Hm + u) * c->S;
    const double *srow = scores + (b * c->Hm + u) * c->S;
    int32_t best = -1;
    for (int64_t i = 0; i < c->S; i++) {
        if (prow[i] < 0) {
            return (int32_t)i;
        }
    }
    for (int64_t i = 0; i < c->S; i++) {
        if (!ref_lf_candidate(c, b, u, i, newest)) {
            continue;
        }
        if (best < 0 || srow[i] < srow[best]) {
            best = (int32_t)i;
        }
    }
    return best;
}

/* Attention of q over the valid slots (o, lse may be NULL) and the slot scores
 * score[b,u,i] = mean over the map's heads of p_{h,i} * ||v_{h/G,i}||_1. */
static int attend(const ref_lf_cache *c, const float *q, double scale, double *o, double *lse,
                  double *scores, double *spread, double *dz) {
    const int64_t B = c->B, Hq = c->Hq, Hkv = c->Hkv, D = c->D, S = c->S, G = Hq / Hkv;
    double *z = (double *)malloc((size_t)S * sizeof(double));
    if (!z) {
        return -1;
    }
    for (int64_t i = 0; i < B * c->Hm * S; i++) {
        scores[i] = c->pos[i] < 0 ? -INFINITY : 0.0;
    }
    for (int64_t b = 0; b < B; b++) {
        for (int64_t h = 0; h < Hq; h++) {
            const int64_t kh = h / G, u = c->per_head ? kh : 0;
            const int64_t nh = c->per_head ? G : Hq;
            const int32_t *prow = c->pos + (b * c->Hm + u) * S;
            const float *qr = q + (b * Hq + h) * D;
            const float *kb = c->k + (b * Hkv + kh) * S * D;
            const float *vb = c->v + (b * Hkv + kh) * S * D;
            double m = -INFINITY, l = 0.0, ls;
            for (int64_t i = 0; i < S; i++) {
                double d = 0.0;
                if (prow[i] < 0) {
                    z[i] = -INFINITY;
                    continue;
                }
                for (int64_t e = 0; e < D; e++) {
                    d += (double)qr[e] * (double)kb[i * D + e];
                }
                z[i] = scale * d;
                if (z[i] > m) {
                    m = z[i];
                }
            }
            for (int64_t i = 0; i < S; i++) {
                if (prow[i] >= 0) {
                    l += exp(z[i] - m);
                }
            }
            ls = l > 0.0 ? m + log(l) : -INFINITY;
            if (dz) {
                double qn = 0.0, kmax = 0.0;
                for (int64_t e = 0; e < D; e++) {
                    qn += (double)qr[e] * (double)qr[e];
                }
                for (int64_t i = 0; i < S; i++) {
                    double kn = 0.0;
                    if (prow[i] < 0) {
                        continue;
                    }
                    for (int64_t e = 0; e < D; e++) {
                        kn += (double)kb[i * D + e] * (double)kb[i * D + e];
                    }
                    kmax = kn > kmax ? kn : kmax;
                }
                dz[b * Hq + h] =
                    ldexp(1.0, -20) * sqrt((double)D) * fabs(scale) * sqrt(qn) * sqrt(kmax);
            }
            if (lse) {
                lse[b * Hq + h] = ls;
            }
            if (o) {
                memset(o + (b * Hq + h) * D, 0, (size_t)D * sizeof(double));
            }
            for (int64_t i = 0; i < S; i++) {
                double p, n1 = 0.0;
                if (prow[i] < 0) {
                    continue;
                }
                p = exp(z[i] - ls);
                for (int64_t e = 0; e < D; e++) {
                    n1 += fabs((double)vb[i * D + e]);
                    if (o) {
                        o[(b * Hq + h) * D + e] += p * (double)vb[i * D + e];
                    }
                }
                scores[(b * c->Hm + u) * S + i] += p * n1 / (double)nh;
            }
            if (spread && o) {
                for (int64_t e = 0; e < D; e++) {
                    double sp = 0.0;
                    for (int64_t i = 0; i < S; i++) {
                        if (prow[i] >= 0) {
                            sp += exp(z[i] - ls) *
                                  fabs((double)vb[i * D + e] - o[(b * Hq + h) * D + e]);
                        }
                    }
                    spread[(b * Hq + h) * D + e] = sp;
                }
            }
        }
    }
    free(z);
    return 0;
}

int ref_lf_load(ref_lf_cache *c, const float *k, const float *v, int64_t Lp, const int32_t *n,
                const int32_t *idx, int64_t K, const float *q, double scale, double *scores) {
    const int64_t B = c->B, Hkv = c->Hkv, D = c->D, S = c->S;
    double *sc = scores ? scores : (double *)malloc((size_t)(B * c->Hm * S) * sizeof(double));
    if (!sc) {
        return -1;
    }
    for (int64_t b = 0; b < B; b++) {
        if (n[b] < 0 || n[b] > Lp) {
            if (!scores) {
                free(sc);
            }
            return -1;
        }
        for (int64_t kh = 0; kh < Hkv; kh++) {
            const int64_t u = c->per_head ? kh : 0;
            for (int64_t i = 0; i < S; i++) {
                int64_t t = idx ? (i < K ? idx[(b * c->Hm + u) * K + i] : -1) : i;
                float *kd = c->k + ((b * Hkv + kh) * S + i) * D;
                float *vd = c->v + ((b * Hkv + kh) * S + i) * D;
                if (t < 0 || t >= n[b]) {
                    t = -1;
                }
                for (int64_t e = 0; e < D; e++) {
                    kd[e] = t >= 0 ? k[((b * Hkv + kh) * Lp + t) * D + e] : 0.0f;
                    vd[e] = t >= 0 ? v[((b * Hkv + kh) * Lp + t) * D + e] : 0.0f;
                }
                c->pos[(b * c->Hm + u) * S + i] = (int32_t)t;
            }
        }
        c->next_pos[b] = n[b];
    }
    if (q) {
        if (attend(c, q, scale, NULL, NULL, sc, NULL, NULL) != 0) {
            if (!scores) {
                free(sc);
            }
            return -1;
        }
    } else {
        for (int64_t i = 0; i < B * c->Hm * S; i++) {
            sc[i] = c->pos[i] < 0 ? -INFINITY : 0.0;
        }
    }
    for (int64_t b = 0; b < B; b++) {
        for (int64_t u = 0; u < c->Hm; u++) {
            c->victim[b * c->Hm + u] = ref_lf_choose(c, b, u, sc, c->next_pos[b] - 1);
        }
    }
    if (!scores) {
        free(sc);
    }
    return 0;
}

int ref_lf_step(ref_lf_cache *c, const float *q, const float *knew, const float *vnew, double scale,
                double *o, double *lse, double *scores) {
    return ref_lf_step_ex(c, q, knew, vnew, scale, o, lse, scores, NULL, NULL);
}

int ref_lf_step_ex(ref_lf_cache *c, const float *q, const float *knew, const float *vnew,
                   double scale, double *o, double *lse, double *scores, double *spread,
                   double *dz) {
    const int64_t B = c->B, Hkv = c->Hkv, D = c->D, S = c->S;
    for (int64_t b = 0; b < B; b++) {
        for (int64_t kh = 0; kh < Hkv; kh++) {
            const int64_t u = c->per_head ? kh : 0;
            const int32_t slot = c->victim[b * c->Hm + u];
            if (slot < 0 || slot >= S) {
                return -1;
            }
            memcpy(c->k + ((b * Hkv + kh) * S + slot) * D, knew + (b * Hkv + kh) * D,
                   (size_t)D * sizeof(float));
            memcpy(c->v + ((b * Hkv + kh) * S + slot) * D, vnew + (b * Hkv + kh) * D,
                   (size_t)D * sizeof(float));
            c->pos[(b * c->Hm + u) * S + slot] = c->next_pos[b];
        }
    }
    if (attend(c, q, scale, o, lse, scores, spread, dz) != 0) {
        return -1;
    }
    for (int64_t b = 0; b < B; b++) {
        for (int64_t u = 0; u < c->Hm; u++) {
            int32_t nv = ref_lf_choose(c, b, u, scores, c->next_pos[b]);
            if (nv >= 0) {
                c->victim[b * c->Hm + u] = nv;
            }
        }
        c->next_pos[b]++;
    }
    return 0;
}
