/* Fused decode attention over a quantized KV cache (include/clkv/quant_cache.h): the
 * split-K partial kernel. The splits are combined by attention_decode_merge
 * (cl_kernels/attention_merge.cl), whose partial layout this kernel writes:
 * part_acc[((b*Hq + h)*num_splits + split)*D + d], part_ml at ml_off + 2*idx = (m, l) with
 * base-2 logits.
 *
 * Build options (set by host/attention_quant.c):
 *   Q_DTYPE, RES_DTYPE, META_DTYPE  dtype codes of q, the residual, the (scale, min)
 *   HEAD_DIM                        D (64, 128, 256)
 *   KBITS, VBITS, GQ                code widths and the quantization group
 *   GROUP                           query heads per work-group (<= 8)
 *   WG_SIZE                         work-group size (a multiple of D / (32 / VBITS))
 *   KTOK                            tokens per lane in the K phase (4, 8 or 16); a tile is
 *                                   WG_SIZE * KTOK tokens, split ranges start at
 *                                   multiples of 16
 *
 * The arithmetic is factored so that each cached element costs one decode (two integer
 * instructions) and one FMA per query head:
 *   a code c of b bits placed in the top mantissa bits of 1.0f reads x = 1 + c / 2^b
 *   (exact), so with S = 2^b * s the dequantised value c*s + m equals x*S + (m - S).
 *   Keys (s, m per channel and key group): <q, k^> = sum_d x_d * (q_d S_d)
 *   + sum_d q_d (m_d - S_d); the q_d S_d and the constant are formed once per channel for
 *   the lane's KTOK tokens (one key group) and all GROUP heads.
 *   Values (s, m per token and channel group): sum_t p_t v^_td = sum_t x_td * (p_t S_t)
 *   + sum_t p_t (m_t - S_t); a lane's value word lies in one channel group, so the second
 *   sum is one scalar per head and lane.
 * The result is the attention over the dequantised cache up to f32 rounding (not the
 * bit pattern of each dequantised element).
 *
 * A work-group handles one (sequence, KV head, head group, split) and walks its token
 * range in tiles of WG_SIZE * KTOK tokens. Per tile:
 *   K phase: lane l owns tokens l*KTOK .. l*KTOK + KTOK - 1 of the tile (one key group,
 *            one run of code words, all quantized or all residual) and computes their
 *            GROUP logits over all channels;
 *   softmax: the tile maximum per head (work-group reduction) updates the running
 *            maximum; each lane writes exp2(z - m) of its tokens to local memory and
 *            keeps its share of the denominator;
 *   V phase: lane (slice, w) owns value word w (VP channels) and the tokens
 *            slice, slice + NS, ... of the tile and accumulates for all GROUP heads. The
 *            NW lanes of a slice read one contiguous row.
 * Codes and metadata are read once per work-group for all GROUP heads. The running
 * maximum is common to the work-group, so the final merge of the slices is a plain sum. */

#define KP (32 / KBITS)
#define VP (32 / VBITS)
#define NW (HEAD_DIM / VP)        /* value words per token */
#define NS (WG_SIZE / NW)         /* token slices of the V phase */
#define TILE (WG_SIZE * KTOK)     /* tokens per tile */
#define DG (HEAD_DIM / GQ)        /* value groups per token */
#define GP ((GROUP + 3) & ~3)     /* heads padded to float4 in the probability table */
#define KW ((KTOK + KP - 1) / KP) /* code words per channel and lane in the K phase */

#if WG_SIZE % NW != 0
#error "WG_SIZE must be a multiple of D / (32 / VBITS)"
#endif
#if KTOK * GP < VP || KTOK < 4 || 16 % KTOK != 0
#error "KTOK: 4, 8 or 16, and the probability table must hold the final slice merge"
#endif

#include "kernel_args.cl"
typedef CLKV_STORAGE(Q_DTYPE) q_t;
typedef CLKV_STORAGE(RES_DTYPE) res_t;
typedef CLKV_STORAGE(META_DTYPE) meta_t;

/* Four consecutive residual values (element i a multiple of 4 from a row start). */
#if RES_DTYPE == CLKV_DT_F32
#define LOAD_RES4(p, i) vload4(0, (p) + (i))
#elif RES_DTYPE == CLKV_DT_F16
#define LOAD_RES4(p, i) vload_half4(0, (p) + (i))
#else
inline float4 load_bf16x4(__global const ushort *p) {
    const uint4 u = convert_uint4(vload4(0, p));
    return as_float4(u << 16);
}
#define LOAD_RES4(p, i) load_bf16x4((p) + (i))
#endif
#define LOAD_META CLKV_LOAD(META_DTYPE)

/* Element e (a compile-time constant) of a vector. */
#define EL4(v, e) ((e) == 0 ? (v).x : (e) == 1 ? (v).y : (e) == 2 ? (v).z : (v).w)

/* Eight consecutive metadata values: raw 16-byte loads (MW of them; p 16-byte aligned),
 * then the f32 values. */
#if META_DTYPE == CLKV_DT_F16
#define MW 1
#else
#define MW 2
#endif
inline void meta8_load(__global const meta_t *p, uint4 *raw) {
    for (int i = 0; i < MW; i++)
        raw[i] = ((__global const uint4 *)p)[i];
}
inline float meta8_elem(const uint4 *raw, int i) {
#if META_DTYPE == CLKV_DT_F16
    const uint u = EL4(raw[0], i / 2);
    return clkv_f16_bits_to_f32((i & 1) ? u >> 16 : u & 0xffffu);
#else
    return as_float(EL4(raw[i / 4], i % 4));
#endif
}

/* Code i (bits [BITS*i, BITS*i + BITS)) of a word as x = 1 + code / 2^BITS: the code
 * moved to the top mantissa bits of 1.0f (i is a compile-time constant after unrolling,
 * so this is one shift and one 3-input logic op). */
#define TOP(BITS) (23 - (BITS))
#define CODE_X(word, i, BITS)                                                                      \
    as_float(((TOP(BITS) >= (BITS) * (i) ? (word) << (TOP(BITS) - (BITS) * (i))                    \
                                         : (word) >> ((BITS) * (i)-TOP(BITS))) &                   \
              (((1u << (BITS)) - 1u) << TOP(BITS))) |                                              \
             0x3F800000u)
#define KSCALE ((float)(1 << KBITS))
#define VSCALE ((float)(1 << VBITS))

/* Work-group reduction (max or sum) of GROUP values per lane; every lane gets the result.
 * red has WG_SIZE * GP floats; the call ends with a barrier after the last read. */
#define RED_MAX 0
#define RED_SUM 1
inline void wg_reduce(float *v, __local float *red, int lid, int op) {
#if defined(CLKV_NVIDIA_PTX) && WG_SIZE % 32 == 0
    /* warp butterflies, then one value per warp through local memory */
#pragma unroll
    for (int g = 0; g < GROUP; g++)
        for (int o = 16; o > 0; o >>= 1) {
            const float y = clkv_shfl_xor(v[g], o);
            v[g] = op == RED_MAX ? fmax(v[g], y) : v[g] + y;
        }
    if ((lid & 31) == 0)
#pragma unroll
        for (int g = 0; g < GROUP; g++)
            red[g * (WG_SIZE / 32) + lid / 32] = v[g];
    barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
    for (int g = 0; g < GROUP; g++) {
        float r = red[g * (WG_SIZE / 32)];
        for (int i = 1; i < WG_SIZE / 32; i++) {
            const float y = red[g * (WG_SIZE / 32) + i];
            r = op == RED_MAX ? fmax(r, y) : r + y;
        }
        v[g] = r;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#else
#pragma unroll
    for (int g = 0; g < GROUP; g++)
        red[g * WG_SIZE + lid] = v[g];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = WG_SIZE / 2; s > 0; s >>= 1) {
        if (lid < s)
#pragma unroll
            for (int g = 0; g < GROUP; g++) {
                const float a = red[g * WG_SIZE + lid], y = red[g * WG_SIZE + lid + s];
                red[g * WG_SIZE + lid] = op == RED_MAX ? fmax(a, y) : a + y;
            }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
#pragma unroll
    for (int g = 0; g < GROUP; g++)
        v[g] = red[g * WG_SIZE];
    barrier(CLK_LOCAL_MEM_FENCE);
#endif
}

#ifndef KPREF
#define KPREF 1
#endif
/* The K phase's loads for channels d .. d + 7 of the lane's rows. */
#define K_LOAD(d, cw, sr, mr)                                                                      \
    do {                                                                                           \
        _Pragma("unroll") for (int r_ = 0; r_ < KW; r_++) {                                        \
            (cw)[r_][0] = *(__global const uint4 *)(crow + (long)r_ * HEAD_DIM + (d));             \
            (cw)[r_][1] = *(__global const uint4 *)(crow + (long)r_ * HEAD_DIM + (d) + 4);         \
        }                                                                                          \
        meta8_load(srow + (d), sr);                                                                \
        meta8_load(mrow + (d), mr);                                                                \
    } while (0)

/* The V phase's tokens per batch (loads in flight per lane). */
#define VB 4

/* pg[0..GP) = the probabilities of tile token t (local table pl4). */
#define LOAD_P(pg, t)                                                                              \
    do {                                                                                           \
        _Pragma("unroll") for (int g4_ = 0; g4_ < GP / 4; g4_++) {                                 \
            const float4 v4_ = pl4[(t) * (GP / 4) + g4_];                                          \
            (pg)[4 * g4_] = v4_.x, (pg)[4 * g4_ + 1] = v4_.y;                                      \
            (pg)[4 * g4_ + 2] = v4_.z, (pg)[4 * g4_ + 3] = v4_.w;                                  \
        }                                                                                          \
    } while (0)

/* Accumulate a quantized value word (scale s, min m of its channel group) with
 * probabilities pg into acc / cm: acc += x * (p S), cm += p (m - S), S = 2^VBITS s. */
#define V_QUANT(word, s, m, pg)                                                                    \
    do {                                                                                           \
        const uint w_ = (word);                                                                    \
        const float S_ = (s)*VSCALE;                                                               \
        const float mS_ = (m)-S_;                                                                  \
        float ps_[GROUP];                                                                          \
        _Pragma("unroll") for (int g_ = 0; g_ < GROUP; g_++) {                                     \
            ps_[g_] = (pg)[g_] * S_;                                                               \
            cm[g_] = fma((pg)[g_], mS_, cm[g_]);                                                   \
        }                                                                                          \
        _Pragma("unroll") for (int i_ = 0; i_ < VP; i_++) {                                        \
            const float x_ = CODE_X(w_, i_, VBITS);                                                \
            _Pragma("unroll") for (int g_ = 0; g_ < GROUP; g_++) acc[g_][i_] =                     \
                fma(x_, ps_[g_], acc[g_][i_]);                                                     \
        }                                                                                          \
    } while (0)

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void attention_quant_partial(
    __global const q_t *q, __global const uint *kc, __global const meta_t *ks,
    __global const meta_t *km, __global const uint *vc, __global const meta_t *vs,
    __global const meta_t *vm, __global const res_t *kr, __global const res_t *vr,
    __global const int *counts, __global float *part_acc, const quant_scalars P) {
    KARGS_UNPACK(QUANT)
    __global float *part_ml = part_acc + ml_off;
    const int lid = (int)get_local_id(0);
    const int split = (int)get_group_id(0);
    const int kvh = (int)get_group_id(1) / nhg;
    const int hg = (int)get_group_id(1) % nhg;
    const int b = (int)get_group_id(2);
    const int slice = lid / NW, w = lid % NW;

    const int nq = counts[b];
    const int len = nq + counts[B + b];
    const int start = split * chunk;
    const int end = min(start + chunk, len);
    (void)rsplits, (void)rchunk; /* the residual's own splits: tensor-core kernel only */
    const int h0 = kvh * G + hg * GROUP;
    const int ng = min(GROUP, G - hg * GROUP);

    /* q of the GROUP heads in base-2 logit units, as float4 per 4 channels */
    __local float4 ql4[GROUP][HEAD_DIM / 4];
    __local float *ql = (__local float *)ql4;
    /* probabilities of the tile [TILE][GP]; reused for the reductions and the final merge */
    __local float4 pl4[TILE * GP / 4];
    __local float *pl = (__local float *)pl4;
    __local float red[WG_SIZE * GROUP];
    for (int i = lid; i < GROUP * HEAD_DIM; i += WG_SIZE) {
        const int g = i / HEAD_DIM, d = i % HEAD_DIM;
        ql[g * HEAD_DIM + d] =
            g < ng ? CLKV_LOAD(Q_DTYPE)(q, q_off + (long)b * q_sb + (long)(h0 + g) * q_sh + d) *
                         scale_log2
                   : 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    const long bh = (long)b * Hkv + kvh;
    __global const uint *kcb = kc + bh * (CQ / KP) * HEAD_DIM;
    __global const meta_t *ksb = ks + bh * (CQ / GQ) * HEAD_DIM;
    __global const meta_t *kmb = km + bh * (CQ / GQ) * HEAD_DIM;
    __global const uint *vcb = vc + bh * CQ * NW;
    __global const meta_t *vsb = vs + bh * CQ * DG;
    __global const meta_t *vmb = vm + bh * CQ * DG;
    __global const res_t *krb = kr + bh * NR * HEAD_DIM;
    __global const res_t *vrb = vr + bh * NR * HEAD_DIM;

    /* running maximum (common to the work-group), the lane's share of the denominator,
     * the lane's value accumulators and its per-head constant term */
    float m[GROUP], l[GROUP], cm[GROUP], acc[GROUP][VP];
#pragma unroll
    for (int g = 0; g < GROUP; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
        cm[g] = 0.0f;
#pragma unroll
        for (int i = 0; i < VP; i++)
            acc[g][i] = 0.0f;
    }

    for (int base = start; base < end; base += TILE) {
        /* ---- K phase: lane lid, tokens p0 .. p0 + KTOK - 1 ---- */
        const int p0 = base + lid * KTOK;
        float z[KTOK][GROUP];
#pragma unroll
        for (int j = 0; j < KTOK; j++)
#pragma unroll
            for (int g = 0; g < GROUP; g++)
                z[j][g] = 0.0f;
        if (p0 < end && p0 < nq) {
            /* one key group (GQ >= 16 >= KTOK, p0 % KTOK == 0); KW code words per channel,
             * the first pre-shifted to the lane's first code when KTOK < KP */
            __global const uint *crow = kcb + (long)(p0 / KP) * HEAD_DIM;
            __global const meta_t *srow = ksb + (long)(p0 / GQ) * HEAD_DIM;
            __global const meta_t *mrow = kmb + (long)(p0 / GQ) * HEAD_DIM;
            const uint sh0 = KTOK < KP ? (uint)(p0 % KP) * KBITS : 0u;
            float cz[GROUP];
#pragma unroll
            for (int g = 0; g < GROUP; g++)
                cz[g] = 0.0f;
            /* 8 channels per step, every load 16 bytes wide (the lanes of a warp read
             * different rows, so load instructions, not bytes, bound L1); the next step's
             * loads are issued before this step's arithmetic (KPREF) */
            uint4 cw[KW][2], sr[MW], mr[MW];
            K_LOAD(0, cw, sr, mr);
            for (int d = 0; d < HEAD_DIM; d += 8) {
#if KPREF
                uint4 cwn[KW][2], srn[MW], mrn[MW];
                K_LOAD(min(d + 8, HEAD_DIM - 8), cwn, srn, mrn);
#endif
                uint4 cws[KW][2]; /* the lane's first code at bit 0 */
#pragma unroll
                for (int r = 0; r < KW; r++)
                    cws[r][0] = cw[r][0] >> sh0, cws[r][1] = cw[r][1] >> sh0;
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    float4 qv[GROUP];
#pragma unroll
                    for (int g = 0; g < GROUP; g++)
                        qv[g] = ql4[g][d / 4 + h];
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const float S = meta8_elem(sr, 4 * h + e) * KSCALE;
                        const float mS = meta8_elem(mr, 4 * h + e) - S;
                        float qs[GROUP];
#pragma unroll
                        for (int g = 0; g < GROUP; g++) {
                            const float qg = EL4(qv[g], e);
                            qs[g] = qg * S;
                            cz[g] = fma(qg, mS, cz[g]);
                        }
#pragma unroll
                        for (int j = 0; j < KTOK; j++) {
                            const uint word = EL4(cws[j / KP][h], e);
                            const float x = CODE_X(word, j % KP, KBITS);
#pragma unroll
                            for (int g = 0; g < GROUP; g++)
                                z[j][g] = fma(x, qs[g], z[j][g]);
                        }
                    }
                }
#if KPREF
#pragma unroll
                for (int r = 0; r < KW; r++)
                    cw[r][0] = cwn[r][0], cw[r][1] = cwn[r][1];
#pragma unroll
                for (int i = 0; i < MW; i++)
                    sr[i] = srn[i], mr[i] = mrn[i];
#else
                if (d + 8 < HEAD_DIM)
                    K_LOAD(d + 8, cw, sr, mr);
#endif
            }
#pragma unroll
            for (int j = 0; j < KTOK; j++)
#pragma unroll
                for (int g = 0; g < GROUP; g++)
                    z[j][g] += cz[g];
        } else if (p0 < end) {
            /* residual rows (clamped into the valid range; logits past end are unused) */
            for (int d = 0; d < HEAD_DIM; d += 4) {
                float4 qv[GROUP];
#pragma unroll
                for (int g = 0; g < GROUP; g++)
                    qv[g] = ql4[g][d / 4];
#pragma unroll
                for (int j = 0; j < KTOK; j++) {
                    const float4 x =
                        LOAD_RES4(krb + (long)(min(p0 + j, end - 1) - nq) * HEAD_DIM, d);
#pragma unroll
                    for (int g = 0; g < GROUP; g++) {
                        float a = z[j][g];
                        a = fma(qv[g].x, x.x, a);
                        a = fma(qv[g].y, x.y, a);
                        a = fma(qv[g].z, x.z, a);
                        a = fma(qv[g].w, x.w, a);
                        z[j][g] = a;
                    }
                }
            }
        }

        /* ---- softmax: tile maximum, probabilities, denominator shares ---- */
        float mt[GROUP];
#pragma unroll
        for (int g = 0; g < GROUP; g++)
            mt[g] = -INFINITY;
#pragma unroll
        for (int j = 0; j < KTOK; j++) {
            const int ok = p0 + j < end;
#pragma unroll
            for (int g = 0; g < GROUP; g++) {
                z[j][g] = ok ? z[j][g] : -INFINITY;
                mt[g] = fmax(mt[g], z[j][g]);
            }
        }
        wg_reduce(mt, red, lid, RED_MAX);
        float f[GROUP];
#pragma unroll
        for (int g = 0; g < GROUP; g++) {
            const float mn = fmax(m[g], mt[g]);
            f[g] = m[g] == -INFINITY ? 0.0f : exp2(m[g] - mn);
            m[g] = mn;
            l[g] *= f[g];
        }
        if (p0 < end) {
#pragma unroll
            for (int j = 0; j < KTOK; j++) {
                float pj[GP];
#pragma unroll
                for (int g = 0; g < GP; g++)
                    pj[g] = 0.0f;
#pragma unroll
                for (int g = 0; g < GROUP; g++) {
                    pj[g] = exp2(z[j][g] - m[g]);
                    l[g] += pj[g];
                }
#pragma unroll
                for (int g4 = 0; g4 < GP / 4; g4++)
                    pl4[(lid * KTOK + j) * (GP / 4) + g4] =
                        (float4)(pj[4 * g4], pj[4 * g4 + 1], pj[4 * g4 + 2], pj[4 * g4 + 3]);
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        /* ---- V phase: lane (slice, w), tokens base + slice + i*NS ---- */
#pragma unroll
        for (int g = 0; g < GROUP; g++) {
            cm[g] *= f[g];
#pragma unroll
            for (int i = 0; i < VP; i++)
                acc[g][i] *= f[g];
        }
        const int nt = min(TILE, end - base);
        int t = slice;
        /* quantized tokens in batches of VB per lane, the batch's loads issued together
         * (one token at a time leaves the V phase waiting on memory latency) */
        for (; t + (VB - 1) * NS < nt && base + t + (VB - 1) * NS < nq; t += VB * NS) {
            uint word[VB];
            float sv[VB], mv[VB];
#pragma unroll
            for (int u = 0; u < VB; u++) {
                const long pt = base + t + u * NS;
                const long mi = pt * DG + (w * VP) / GQ;
                word[u] = vcb[pt * NW + w];
                sv[u] = LOAD_META(vsb, mi);
                mv[u] = LOAD_META(vmb, mi);
            }
#pragma unroll
            for (int u = 0; u < VB; u++) {
                float pg[GP];
                LOAD_P(pg, t + u * NS);
                V_QUANT(word[u], sv[u], mv[u], pg);
            }
        }
        /* the rest one token at a time (the tile's end, the residual) */
        for (; t < nt; t += NS) {
            const int pt = base + t;
            float pg[GP];
            LOAD_P(pg, t);
            if (pt < nq) {
                const long mi = (long)pt * DG + (w * VP) / GQ;
                V_QUANT(vcb[(long)pt * NW + w], LOAD_META(vsb, mi), LOAD_META(vmb, mi), pg);
            } else {
                __global const res_t *row = vrb + (long)(pt - nq) * HEAD_DIM + w * VP;
#pragma unroll
                for (int i = 0; i < VP; i += 4) {
                    const float4 x = LOAD_RES4(row, i);
#pragma unroll
                    for (int g = 0; g < GROUP; g++) {
                        acc[g][i] = fma(pg[g], x.x, acc[g][i]);
                        acc[g][i + 1] = fma(pg[g], x.y, acc[g][i + 1]);
                        acc[g][i + 2] = fma(pg[g], x.z, acc[g][i + 2]);
                        acc[g][i + 3] = fma(pg[g], x.w, acc[g][i + 3]);
                    }
                }
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* pl is refilled by the next tile */
    }

    /* ---- the split's partial: denominator and slice sums (pl reused), head by head ---- */
    wg_reduce(l, red, lid, RED_SUM);
    for (int g = 0; g < GROUP; g++) {
#pragma unroll
        for (int i = 0; i < VP; i++)
            pl[slice * HEAD_DIM + w * VP + i] = acc[g][i] + cm[g];
        barrier(CLK_LOCAL_MEM_FENCE);
        if (g < ng) {
            const long idx = ((long)b * Hq + h0 + g) * num_splits + split;
            for (int d = lid; d < HEAD_DIM; d += WG_SIZE) {
                float a = 0.0f;
                for (int r = 0; r < NS; r++)
                    a += pl[r * HEAD_DIM + d];
                part_acc[idx * HEAD_DIM + d] = a;
            }
            if (lid == 0) {
                part_ml[idx * 2] = m[g];
                part_ml[idx * 2 + 1] = l[g];
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}
