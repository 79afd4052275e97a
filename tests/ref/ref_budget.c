/* Reference budget policies: sorts of the definitions, no cleverness. */
#include "ref/ref_budget.h"
#include "ref/ref_select.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct frac_item {
    int64_t rem, l;
} frac_item;

static int cmp_frac(const void *pa, const void *pb) {
    const frac_item *a = (const frac_item *)pa, *b = (const frac_item *)pb;
    if (a->rem != b->rem)
        return a->rem > b->rem ? -1 : 1; /* larger fraction first */
    return a->l < b->l ? -1 : (a->l > b->l ? 1 : 0);
}

int ref_budget_pyramid(int64_t N, int64_t A, int64_t beta, int64_t *out, int64_t *num,
                       int64_t *den) {
    if (N < 1 || A < 0 || beta < 1 || !out)
        return -1;
    /* r_l = bottom - (bottom - top) * l / (N - 1), bottom = (2 beta - 1) A / beta,
     * top = A / beta; over the common denominator beta * (N - 1) (beta for N = 1). */
    const int64_t d = N == 1 ? 1 : beta * (N - 1);
    frac_item *items = (frac_item *)malloc((size_t)N * sizeof *items);
    if (!items)
        return -1;
    int64_t sum = 0;
    for (int64_t l = 0; l < N; l++) {
        const int64_t bottom = (2 * beta - 1) * A * (N == 1 ? 1 : (N - 1)); /* * d / beta */
        const int64_t drop = N == 1 ? 0 : (2 * beta - 2) * A * l;
        int64_t nl = N == 1 ? A : bottom - drop;
        if (num)
            num[l] = nl;
        out[l] = nl / d;
        items[l].rem = nl % d;
        items[l].l = l;
        sum += out[l];
    }
    if (den)
        *den = d;
    qsort(items, (size_t)N, sizeof *items, cmp_frac);
    const int64_t R = N * A - sum;
    if (R < 0 || R >= N) {
        free(items);
        return -1;
    }
    for (int64_t i = 0; i < R; i++)
        out[items[i].l]++;
    free(items);
    return 0;
}

typedef struct ada_item {
    float v;
    int32_t j, h;
} ada_item;

/* Negative when a goes first: score desc (NaN last, -0 == +0), then j asc, then h asc. */
static int cmp_ada(const void *pa, const void *pb) {
    const ada_item *a = (const ada_item *)pa, *b = (const ada_item *)pb;
    const int na = isnan(a->v) != 0, nb = isnan(b->v) != 0;
    if (na != nb)
        return na ? 1 : -1;
    if (!na && a->v != b->v)
        return a->v > b->v ? -1 : 1;
    if (a->j != b->j)
        return a->j < b->j ? -1 : 1;
    return a->h < b->h ? -1 : (a->h > b->h ? 1 : 0);
}

int ref_budget_adakv(const float *scores, int64_t Hkv, int64_t stride, int64_t n, int64_t k,
                     int64_t f, int32_t *counts, uint8_t *kept) {
    if (Hkv < 0 || n < 0 || n > stride || k < 0 || f < 0 || f > k || !counts)
        return -1;
    const int64_t kn = k < n ? k : n, fn = f < n ? f : n;
    uint8_t *mark = (uint8_t *)calloc((size_t)(Hkv * stride) + 1, 1);
    int32_t *sel = (int32_t *)malloc((size_t)fn * sizeof(int32_t) + 4);
    ada_item *rest = (ada_item *)malloc((size_t)(Hkv * n) * sizeof(ada_item) + 1);
    if (!mark || !sel || !rest) {
        free(mark);
        free(sel);
        free(rest);
        return -1;
    }
    /* 1. the floor: each head's own best min(f, n) */
    for (int64_t h = 0; h < Hkv; h++) {
        counts[h] = 0;
        const int64_t c = ref_select_topk(scores + h * stride, n, fn, 1, sel);
        for (int64_t i = 0; i < c; i++) {
            mark[h * stride + sel[i]] = 1;
            counts[h]++;
        }
    }
    /* 2. the best remaining of the layer */
    int64_t m = 0;
    for (int64_t h = 0; h < Hkv; h++)
        for (int64_t j = 0; j < n; j++)
            if (!mark[h * stride + j]) {
                rest[m].v = scores[h * stride + j];
                rest[m].j = (int32_t)j;
                rest[m].h = (int32_t)h;
                m++;
            }
    qsort(rest, (size_t)m, sizeof *rest, cmp_ada);
    const int64_t R = Hkv * kn - Hkv * fn;
    for (int64_t i = 0; i < R && i < m; i++) {
        mark[rest[i].h * stride + rest[i].j] = 1;
        counts[rest[i].h]++;
    }
    if (kept)
        memcpy(kept, mark, (size_t)(Hkv * stride));
    free(mark);
    free(sel);
    free(rest);
    return 0;
}
