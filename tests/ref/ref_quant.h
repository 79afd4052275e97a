/* Plain C reference of KIVI-style asymmetric b-bit quantization (SPEC §3), written from
 * the SPEC, independent of the kernels. The rounding rule is defined in f32, so it is
 * computed in IEEE f32 (x86-64 SSE: correctly rounded division, no contraction in ISO C
 * mode); f16 metadata is rounded with tu_f32_to_f16 (round to nearest even). */
#ifndef CLKV_TEST_REF_QUANT_H
#define CLKV_TEST_REF_QUANT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define REF_QUANT_FLAG_F16_RANGE 1
#define REF_QUANT_FLAG_NONFINITE 2

/* One group of n values x[i * stride]. Writes the codes q[i] (0 .. 2^bits - 1), the
 * stored s and m as f32 values (f16-rounded when meta_f16), and, when quot is not NULL,
 * the exact quotient (x - m) / s in double (0 when s == 0), used to recognise .5 ties.
 * A group with a non-finite input, |x| > 65504 with f16 metadata, or (f32) an overflowing
 * mx - mn is written as s = m = 0, codes 0. Returns the flag bits of the group. */
int ref_quant_group(const float *x, ptrdiff_t stride, int n, int bits, int meta_f16, uint8_t *q,
                    float *s, float *m, double *quot);

/* Keys, per channel. x [B,H,N,D] row-major. codes [B,H,N/P,D] (P = 32/bits, packed along
 * tokens), scale/min [B,H,N/group,D]; quot (optional) [B,H,N,D]. Returns OR of flags. */
int ref_quant_keys(const float *x, int64_t B, int64_t H, int64_t N, int64_t D, int bits, int group,
                   int meta_f16, uint32_t *codes, float *scale, float *min, double *quot);

/* Values, per token. codes [B,H,N,D/P] (packed along channels), scale/min [B,H,N,D/group]. */
int ref_quant_values(const float *x, int64_t B, int64_t H, int64_t N, int64_t D, int bits,
                     int group, int meta_f16, uint32_t *codes, float *scale, float *min,
                     double *quot);

/* Dequantization x^ = f32(f32(q*s) + m) into out [B,H,N,D] (f32, before any output
 * rounding); layouts as above. */
void ref_dequant_keys(const uint32_t *codes, const float *scale, const float *min, int64_t B,
                      int64_t H, int64_t N, int64_t D, int bits, int group, float *out);
void ref_dequant_values(const uint32_t *codes, const float *scale, const float *min, int64_t B,
                        int64_t H, int64_t N, int64_t D, int bits, int group, float *out);

/* Code i of a word. */
static inline unsigned ref_code(uint32_t word, int bits, int i) {
    return (unsigned)((word >> (bits * i)) & ((1u << bits) - 1u));
}

#ifdef __cplusplus
}
#endif

#endif /* CLKV_TEST_REF_QUANT_H */
