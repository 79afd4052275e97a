/* Reference of the quantized KV cache (SPEC §3); see ref_quant_cache.h. */
#include "ref/ref_quant_cache.h"

#include <stdlib.h>
#include <string.h>

#include "ref/ref_quant.h"

int ref_qcache_alloc(ref_qcache *c, int64_t B, int64_t H, int64_t D, int64_t CQ, int64_t NR,
                     int k_bits, int v_bits, int group) {
    memset(c, 0, sizeof *c);
    if (B < 1 || H < 1 || D < 1 || CQ < 0 || NR < 1 || group < 1 || CQ % NR || NR % group ||
        D % group)
        return -1;
    c->B = B, c->H = H, c->D = D, c->CQ = CQ, c->NR = NR;
    c->k_bits = k_bits, c->v_bits = v_bits, c->group = group;
    const size_t bh = (size_t)(B * H), pk = (size_t)(32 / k_bits), pv = (size_t)(32 / v_bits);
    const size_t cq = (size_t)CQ, d = (size_t)D, g = (size_t)group;
    c->k_codes = calloc(bh * (cq / pk) * d + 1, 4);
    c->k_scale = calloc(bh * (cq / g) * d + 1, 4);
    c->k_min = calloc(bh * (cq / g) * d + 1, 4);
    c->v_codes = calloc(bh * cq * (d / pv) + 1, 4);
    c->v_scale = calloc(bh * cq * (d / g) + 1, 4);
    c->v_min = calloc(bh * cq * (d / g) + 1, 4);
    c->k_res = calloc(bh * (size_t)NR * d, 4);
    c->v_res = calloc(bh * (size_t)NR * d, 4);
    c->n_quant = calloc((size_t)B, 4);
    c->n_res = calloc((size_t)B, 4);
    c->k_quot = calloc(bh * cq * d + 1, sizeof(double));
    c->v_quot = calloc(bh * cq * d + 1, sizeof(double));
    if (!c->k_codes || !c->k_scale || !c->k_min || !c->v_codes || !c->v_scale || !c->v_min ||
        !c->k_res || !c->v_res || !c->n_quant || !c->n_res || !c->k_quot || !c->v_quot) {
        ref_qcache_free(c);
        return -1;
    }
    return 0;
}

void ref_qcache_free(ref_qcache *c) {
    free(c->k_codes), free(c->k_scale), free(c->k_min);
    free(c->v_codes), free(c->v_scale), free(c->v_min);
    free(c->k_res), free(c->v_res), free(c->n_quant), free(c->n_res);
    free(c->k_quot), free(c->v_quot);
    memset(c, 0, sizeof *c);
}

void ref_qcache_build(ref_qcache *c, const float *k_hist, const float *v_hist, int64_t Lh,
                      const int64_t *T, int meta_f16) {
    const int64_t D = c->D, CQ = c->CQ, NR = c->NR, G = c->group;
    const int64_t pk = 32 / c->k_bits, pv = 32 / c->v_bits;
    c->flags = 0;
    for (int64_t b = 0; b < c->B; b++) {
        const int64_t nq = T[b] - T[b] % NR, nres = T[b] % NR;
        c->n_quant[b] = (int32_t)nq;
        c->n_res[b] = (int32_t)nres;
        for (int64_t h = 0; h < c->H; h++) {
            const int64_t bh = b * c->H + h;
            const float *kx = k_hist + bh * Lh * D, *vx = v_hist + bh * Lh * D;
            if (nq > 0) {
                c->flags |=
                    ref_quant_keys(kx, 1, 1, nq, D, c->k_bits, (int)G, meta_f16,
                                   c->k_codes + bh * (CQ / pk) * D, c->k_scale + bh * (CQ / G) * D,
                                   c->k_min + bh * (CQ / G) * D, c->k_quot + bh * CQ * D);
                c->flags |= ref_quant_values(vx, 1, 1, nq, D, c->v_bits, (int)G, meta_f16,
                                             c->v_codes + bh * CQ * (D / pv),
                                             c->v_scale + bh * CQ * (D / G),
                                             c->v_min + bh * CQ * (D / G), c->v_quot + bh * CQ * D);
            }
            memcpy(c->k_res + bh * NR * D, kx + nq * D, (size_t)(nres * D) * 4);
            memcpy(c->v_res + bh * NR * D, vx + nq * D, (size_t)(nres * D) * 4);
        }
    }
}

void ref_qcache_dequant(const ref_qcache *c, int64_t L, float *k, float *v, int32_t *len) {
    const int64_t D = c->D, CQ = c->CQ, NR = c->NR, G = c->group;
    const int64_t pk = 32 / c->k_bits, pv = 32 / c->v_bits;
    memset(k, 0, (size_t)(c->B * c->H * L * D) * 4);
    memset(v, 0, (size_t)(c->B * c->H * L * D) * 4);
    for (int64_t b = 0; b < c->B; b++) {
        const int64_t nq = c->n_quant[b], nres = c->n_res[b];
        len[b] = (int32_t)(nq + nres);
        for (int64_t h = 0; h < c->H; h++) {
            const int64_t bh = b * c->H + h;
            float *ko = k + bh * L * D, *vo = v + bh * L * D;
            if (nq > 0) {
                ref_dequant_keys(c->k_codes + bh * (CQ / pk) * D, c->k_scale + bh * (CQ / G) * D,
                                 c->k_min + bh * (CQ / G) * D, 1, 1, nq, D, c->k_bits, (int)G, ko);
                ref_dequant_values(c->v_codes + bh * CQ * (D / pv), c->v_scale + bh * CQ * (D / G),
                                   c->v_min + bh * CQ * (D / G), 1, 1, nq, D, c->v_bits, (int)G,
                                   vo);
            }
            memcpy(ko + nq * D, c->k_res + bh * NR * D, (size_t)(nres * D) * 4);
            memcpy(vo + nq * D, c->v_res + bh * NR * D, (size_t)(nres * D) * 4);
        }
    }
}
