/* Plain C reference of top-k selection (SPEC §2.4, ties §0.2), written from the
 * definition: stable order by (score better first, index ascending), first k, then by
 * index. Scores compare by value (-0.0 == +0.0); NaN ranks below every number in both
 * modes. */
#ifndef CLKV_REF_SELECT_H
#define CLKV_REF_SELECT_H

#include <stdint.h>

/* Select min(k, n) of scores[0..n) (largest != 0: the largest, else the smallest); write
 * the chosen indices in ascending order to out (room for min(k, n)). Returns the count,
 * or -1 on bad arguments / allocation failure. */
int64_t ref_select_topk(const float *scores, int64_t n, int64_t k, int largest, int32_t *out);

#endif /* CLKV_REF_SELECT_H */
