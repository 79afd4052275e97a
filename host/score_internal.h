/* Shared between host/score*.c; not installed. */
#ifndef CLKV_HOST_SCORE_INTERNAL_H
#define CLKV_HOST_SCORE_INTERNAL_H

#include "clkv/score.h"

/* The protected token count clkv_score uses for `a` (the method default resolved);
 * a->q must be valid for window methods. */
int64_t clkv__score_protect(const clkv_score_args *a);

#endif
