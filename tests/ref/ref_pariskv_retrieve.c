/* Plain C references of ParisKV retrieval (SPEC §4); see ref_pariskv_retrieve.h. */
#include "ref/ref_pariskv_retrieve.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const double R_T[6] = {0.05, 0.15, 0.30, 0.50, 0.75, 1.0};

void ref_pariskv_tiers(int64_t n, double beta, double rho, int64_t top_k, int64_t T[6],
                       int64_t *C) {
    if (!(beta > 0.0 && rho > 0.0)) {
        if (n < 5000) {
            beta = 0.5;
            rho = 0.5;
        } else if (n < 10000) {
            beta = 0.25;
            rho = 0.3;
        } else if (n < 30000) {
            beta = 0.2;
            rho = 0.25;
        } else {
            beta = 0.1;
            rho = 0.2;
        }
    }
    for (int t = 0; t < 6; t++)
        T[t] = (int64_t)ceil(((double)n * rho) * R_T[t]);
    int64_t c = (int64_t)ceil(beta * (double)n);
    if (c < top_k)
        c = top_k;
    *C = c < n ? c : n;
}

void ref_pariskv_counts(int m, int64_t nblk, const uint8_t *ids, int64_t stride, int64_t n,
                        uint32_t *counts) {
    const int nc = 1 << m;
    memset(counts, 0, sizeof(uint32_t) * (size_t)(nblk * nc));
    for (int64_t i = 0; i < n; i++)
        for (int64_t b = 0; b < nblk; b++)
            counts[b * nc + ids[i * stride + b]]++;
}

typedef struct cent {
    float score;
    int id;
} cent;

static int cent_cmp(const void *x, const void *y) {
    const cent *a = x, *b = y;
    if (a->score != b->score)
        return a->score > b->score ? -1 : 1;
    return a->id - b->id;
}

void ref_pariskv_collide(int m, int64_t nblk, const float *q_rot, const uint8_t *ids,
                         int64_t stride, int64_t n, const uint32_t *counts, const int64_t T[6],
                         int32_t *S) {
    const int nc = 1 << m;
    cent *order = malloc(sizeof(cent) * (size_t)nc);
    uint8_t *bonus = malloc((size_t)(nblk * nc));
    for (int64_t b = 0; b < nblk; b++) {
        for (int c = 0; c < nc; c++) {
            float s = 0.0f; /* f32, coordinates in index order (SPEC) */
            for (int j = 0; j < m; j++) {
                const float q = q_rot[b * m + j];
                s = ((c >> j) & 1) ? s + q : s - q;
            }
            order[c].score = s;
            order[c].id = c;
        }
        qsort(order, (size_t)nc, sizeof(cent), cent_cmp);
        int64_t before = 0;
        for (int r = 0; r < nc; r++) {
            /* keys in strictly better-ranked centroids: the prefix before rank r */
            int bon = 0;
            for (int t = 0; t < 6; t++)
                bon += before < T[t];
            bonus[b * nc + order[r].id] = (uint8_t)bon;
            before += counts[b * nc + order[r].id];
        }
    }
    for (int64_t i = 0; i < n; i++) {
        int32_t s = 0;
        for (int64_t b = 0; b < nblk; b++)
            s += bonus[b * nc + ids[i * stride + b]];
        S[i] = s;
    }
    free(order);
    free(bonus);
}

typedef struct item {
    double v;
    int64_t i;
} item;

static int item_cmp(const void *x, const void *y) {
    const item *a = x, *b = y;
    if (a->v != b->v)
        return a->v > b->v ? -1 : 1;
    return a->i < b->i ? -1 : (a->i > b->i);
}

static int i32_cmp(const void *x, const void *y) {
    const int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    return (a > b) - (a < b);
}

static int64_t select_sorted(item *it, int64_t n, int64_t k, int32_t *out) {
    qsort(it, (size_t)n, sizeof(item), item_cmp);
    const int64_t c = k < n ? k : n;
    for (int64_t j = 0; j < c; j++)
        out[j] = (int32_t)it[j].i;
    qsort(out, (size_t)c, sizeof(int32_t), i32_cmp);
    return c;
}

void ref_pariskv_candidates(const int32_t *S, int64_t n, int64_t C, int32_t *out) {
    item *it = malloc(sizeof(item) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) {
        it[i].v = S[i];
        it[i].i = i;
    }
    select_sorted(it, n, C, out);
    free(it);
}

double ref_pariskv_rerank_score(int64_t D, int m, const float a[8], const float *q_rot,
                                double q_norm, const uint8_t *codes, const float *w, double *mag) {
    double acc = 0.0, am = 0.0;
    for (int64_t b = 0; b < D / m; b++) {
        double dot = 0.0, dm = 0.0;
        for (int j = 0; j < m; j++) {
            const int64_t c = b * m + j;
            const unsigned nib = (codes[c / 2] >> (4 * (c % 2))) & 0xfu;
            const double v = (nib & 8u) ? (double)a[nib & 7u] : -(double)a[nib & 7u];
            dot += v * q_rot[c];
            dm += fabs(v * q_rot[c]);
        }
        acc += (double)w[b] * dot;
        am += fabs((double)w[b]) * dm;
    }
    *mag = fabs(q_norm) * am;
    return q_norm * acc;
}

int64_t ref_pariskv_topk(const double *s, int64_t n, int64_t k, int32_t *out) {
    item *it = malloc(sizeof(item) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) {
        it[i].v = s[i];
        it[i].i = i;
    }
    const int64_t c = select_sorted(it, n, k, out);
    free(it);
    return c;
}
