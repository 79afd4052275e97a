/* Reference of KIVI-style quantization (SPEC §3); see ref_quant.h. */
#include "ref/ref_quant.h"

#include <math.h>

#include "util/test_util.h"

static float meta_round(float x, int meta_f16) {
    return meta_f16 ? tu_f16_to_f32(tu_f32_to_f16(x)) : x;
}

int ref_quant_group(const float *x, ptrdiff_t stride, int n, int bits, int meta_f16, uint8_t *q,
                    float *s, float *m, double *quot) {
    const float qmax = (float)((1 << bits) - 1);
    int flags = 0;
    float mn = INFINITY, mx = -INFINITY;
    for (int i = 0; i < n; i++) {
        const float v = x[(ptrdiff_t)i * stride];
        if (!isfinite(v)) {
            flags |= REF_QUANT_FLAG_NONFINITE;
        } else if (meta_f16 && fabsf(v) > 65504.0f) {
            flags |= REF_QUANT_FLAG_F16_RANGE;
        }
        if (v < mn) {
            mn = v;
        }
        if (v > mx) {
            mx = v;
        }
    }
    const float range = mx - mn;
    if (flags == 0 && !isfinite(range)) {
        flags = REF_QUANT_FLAG_NONFINITE;
    }
    if (flags != 0) {
        *s = 0.0f;
        *m = 0.0f;
    } else {
        const float scale = range / qmax;
        *s = meta_round(scale, meta_f16);
        *m = meta_round(mn, meta_f16);
    }
    for (int i = 0; i < n; i++) {
        const float v = x[(ptrdiff_t)i * stride];
        if (*s == 0.0f) {
            q[i] = 0;
            if (quot) {
                quot[i] = 0.0;
            }
            continue;
        }
        const float diff = v - *m;
        const float qf = rintf(diff / *s);
        q[i] = (uint8_t)(qf < 0.0f ? 0.0f : (qf > qmax ? qmax : qf));
        if (quot) {
            quot[i] = ((double)v - (double)*m) / (double)*s;
        }
    }
    return flags;
}

int ref_quant_keys(const float *x, int64_t B, int64_t H, int64_t N, int64_t D, int bits, int group,
                   int meta_f16, uint32_t *codes, float *scale, float *min, double *quot) {
    const int per = 32 / bits;
    const int64_t NG = N / group, NW = N / per;
    uint8_t q[256];
    double qt[256];
    int flags = 0;
    for (int64_t bh = 0; bh < B * H; bh++) {
        for (int64_t g = 0; g < NG; g++) {
            for (int64_t d = 0; d < D; d++) {
                const float *xg = x + (bh * N + g * group) * D + d;
                float s, m;
                flags |= ref_quant_group(xg, (ptrdiff_t)D, group, bits, meta_f16, q, &s, &m, qt);
                scale[(bh * NG + g) * D + d] = s;
                min[(bh * NG + g) * D + d] = m;
                for (int t = 0; t < group; t++) {
                    const int64_t n = g * group + t;
                    uint32_t *w = &codes[(bh * NW + n / per) * D + d];
                    if (n % per == 0) {
                        *w = 0;
                    }
                    *w |= (uint32_t)q[t] << (bits * (int)(n % per));
                    if (quot) {
                        quot[(bh * N + n) * D + d] = qt[t];
                    }
                }
            }
        }
    }
    return flags;
}

int ref_quant_values(const float *x, int64_t B, int64_t H, int64_t N, int64_t D, int bits,
                     int group, int meta_f16, uint32_t *codes, float *scale, float *min,
                     double *quot) {
    const int per = 32 / bits;
    const int64_t DG = D / group, DW = D / per;
    uint8_t q[256];
    double qt[256];
    int flags = 0;
    for (int64_t r = 0; r < B * H * N; r++) {
        for (int64_t j = 0; j < DG; j++) {
            float s, m;
            flags |=
                ref_quant_group(x + r * D + j * group, 1, group, bits, meta_f16, q, &s, &m, qt);
            scale[r * DG + j] = s;
            min[r * DG + j] = m;
            for (int t = 0; t < group; t++) {
                const int64_t c = j * group + t;
                uint32_t *w = &codes[r * DW + c / per];
                if (c % per == 0) {
                    *w = 0;
                }
                *w |= (uint32_t)q[t] << (bits * (int)(c % per));
                if (quot) {
                    quot[r * D + c] = qt[t];
                }
            }
        }
    }
    return flags;
}

static float deq(unsigned q, float s, float m) {
    const float qs = (float)q * s;
    return qs + m;
}

void ref_dequant_keys(const uint32_t *codes, const float *scale, const float *min, int64_t B,
                      int64_t H, int64_t N, int64_t D, int bits, int group, float *out) {
    const int per = 32 / bits;
    const int64_t NG = N / group, NW = N / per;
    for (int64_t bh = 0; bh < B * H; bh++) {
        for (int64_t n = 0; n < N; n++) {
            for (int64_t d = 0; d < D; d++) {
                const int64_t mi = (bh * NG + n / group) * D + d;
                const unsigned q =
                    ref_code(codes[(bh * NW + n / per) * D + d], bits, (int)(n % per));
                out[(bh * N + n) * D + d] = deq(q, scale[mi], min[mi]);
            }
        }
    }
}

void ref_dequant_values(const uint32_t *codes, const float *scale, const float *min, int64_t B,
                        int64_t H, int64_t N, int64_t D, int bits, int group, float *out) {
    const int per = 32 / bits;
    const int64_t DG = D / group, DW = D / per;
    for (int64_t r = 0; r < B * H * N; r++) {
        for (int64_t c = 0; c < D; c++) {
            const int64_t mi = r * DG + c / group;
            const unsigned q = ref_code(codes[r * DW + c / per], bits, (int)(c % per));
            out[r * D + c] = deq(q, scale[mi], min[mi]);
        }
    }
}
