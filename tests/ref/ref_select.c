/* Reference top-k selection: a sort by (rank, index), no cleverness. */
#include "ref/ref_select.h"

#include <math.h>
#include <stdlib.h>

typedef struct ref_item {
    float v;
    int32_t i;
} ref_item;

static int g_largest; /* qsort has no context argument; the tests are single-threaded */

/* Negative when a goes first. */
static int cmp_rank(const void *pa, const void *pb) {
    const ref_item *a = (const ref_item *)pa, *b = (const ref_item *)pb;
    int na = isnan(a->v) != 0, nb = isnan(b->v) != 0;
    if (na != nb)
        return na ? 1 : -1; /* NaN last */
    if (!na && a->v != b->v) {
        int a_first = g_largest ? a->v > b->v : a->v < b->v;
        return a_first ? -1 : 1;
    }
    return a->i < b->i ? -1 : (a->i > b->i ? 1 : 0);
}

static int cmp_index(const void *pa, const void *pb) {
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    return a < b ? -1 : (a > b ? 1 : 0);
}

int64_t ref_select_topk(const float *scores, int64_t n, int64_t k, int largest, int32_t *out) {
    if (n < 0 || k < 0 || n > INT32_MAX || (n > 0 && (!scores || !out)))
        return -1;
    int64_t c = k < n ? k : n;
    if (c == 0)
        return 0;
    ref_item *items = (ref_item *)malloc((size_t)n * sizeof *items);
    if (!items)
        return -1;
    for (int64_t i = 0; i < n; i++) {
        items[i].v = scores[i];
        items[i].i = (int32_t)i;
    }
    g_largest = largest != 0;
    qsort(items, (size_t)n, sizeof *items, cmp_rank);
    for (int64_t i = 0; i < c; i++)
        out[i] = items[i].i;
    free(items);
    qsort(out, (size_t)c, sizeof *out, cmp_index);
    return c;
}
