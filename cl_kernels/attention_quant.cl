/* Fused decode attention over a quantized KV cache (include/clkv/quant_cache.h): the
 * split-K partial kernel. The splits are combined by attention_decode_merge
 * (cl_kernels/attention_decode.cl), whose partial layout this kernel writes:
 * part_acc[((b*Hq + h)*num_splits + split)*D + d], part_ml at ml_off + 2*idx = (m, l) with
 * base-2 logits.
 *
 * Build options (set by host/attention_quant.c):
 *   Q_DTYPE, RES_DTYPE, META_DTYPE  dtype codes of q, the residual, the (scale, min)
 *   HEAD_DIM                        D (64, 128, 256)
 *   KBITS, VBITS, GQ                code widths and the quantization group
 *   GROUP                           query heads per work-group (<= 8)
 *   WG_SIZE                         work-group size (a multiple of D / (32 / VBITS));
 *                                   a tile is 2 * WG_SIZE tokens
 *
 * A work-group handles one (sequence, KV head, head group, split) and walks its token
 * range in tiles of 2 * WG_SIZE tokens (the range starts at an even token). Per tile:
 *   K phase: lane t owns tokens 2t, 2t + 1 of the tile and computes their GROUP logits,
 *            dequantising their keys channel by channel (k^ = code*s + m, two roundings
 *            as the dequant rule) from the packed words (lanes of one word read the same
 *            address: one transaction) or from the residual rows; the logits go to local
 *            memory.
 *   V phase: lane (slice, w) owns value word w (Pv channels) and the tokens
 *            slice, slice + NS, ... of the tile; it keeps an online-softmax state per
 *            head and accumulates p * v^ for its Pv channels. Value words of a token are
 *            contiguous, so the NW lanes of a slice read one contiguous row.
 * Codes and metadata are read once per work-group for all GROUP heads. Finally the NS
 * slice states are merged through local memory and written as the split's partial. */

/* x^ = q*s + m must be two roundings (the dequant rule); dot products use explicit fma. */
#pragma OPENCL FP_CONTRACT OFF

#define KP (32 / KBITS)
#define VP (32 / VBITS)
#define KMASK ((1u << KBITS) - 1u)
#define VMASK ((1u << VBITS) - 1u)
#define NW (HEAD_DIM / VP)  /* value words per token */
#define NS (WG_SIZE / NW)   /* token slices of the V phase */
#define KT 2                /* tokens per lane in the K phase */
#define TILE (WG_SIZE * KT) /* tokens per tile */
#define DG (HEAD_DIM / GQ)  /* value groups per token */

#if WG_SIZE % NW != 0
#error "WG_SIZE must be a multiple of D / (32 / VBITS)"
#endif

typedef CLKV_STORAGE(Q_DTYPE) q_t;
typedef CLKV_STORAGE(RES_DTYPE) res_t;
typedef CLKV_STORAGE(META_DTYPE) meta_t;
#define LOAD_RES CLKV_LOAD(RES_DTYPE)

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

/* Four consecutive metadata values (element i must be a multiple of 4 elements). */
#if META_DTYPE == CLKV_DT_F16
#define LOAD_META4(p, i) vload_half4(0, (p) + (i))
#else
#define LOAD_META4(p, i) vload4(0, (p) + (i))
#endif

/* (float)c for c < 2^23, exactly, without an int-to-float conversion (a quarter- or
 * eighth-rate instruction on GPUs): the bits of 2^23 + c, minus 2^23. */
inline float code_to_f32(uint c) {
    return as_float(c | 0x4B000000u) - 8388608.0f;
}

inline float dq(uint word, int shift, uint mask, float s, float m) {
    const float qs = code_to_f32((word >> shift) & mask) * s;
    return qs + m;
}

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void attention_quant_partial(
    __global const q_t *q, long q_off, long q_sb, long q_sh, __global const uint *kc,
    __global const meta_t *ks, __global const meta_t *km, __global const uint *vc,
    __global const meta_t *vs, __global const meta_t *vm, __global const res_t *kr,
    __global const res_t *vr, __global const int *counts, int B, int Hkv, long CQ, int NR, int Hq,
    int G, int nhg, int chunk, int num_splits, float scale_log2, __global float *part_acc,
    long ml_off) {
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
    const int h0 = kvh * G + hg * GROUP;
    const int ng = min(GROUP, G - hg * GROUP);

    /* q of the GROUP heads, pre-scaled, read as float4 (one local load per 4 channels) */
    __local float4 ql4[GROUP][HEAD_DIM / 4];
    __local float *ql = (__local float *)ql4;
    __local float zl[GROUP][TILE];
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

    float m[GROUP], l[GROUP], acc[GROUP][VP];
#pragma unroll
    for (int g = 0; g < GROUP; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
#pragma unroll
        for (int i = 0; i < VP; i++)
            acc[g][i] = 0.0f;
    }

    for (int base = start; base < end; base += TILE) {
        /* ---- K phase: lane lid, tokens p and p + 1 (p even relative to the split and
         * n_quant even, so both share one code word and one key group: the code and
         * metadata loads and the q reads serve two tokens) ---- */
        const int p = base + lid * KT;
        if (p < end) {
            float z0[GROUP], z1[GROUP];
#pragma unroll
            for (int g = 0; g < GROUP; g++)
                z0[g] = z1[g] = 0.0f;
            if (p < nq) {
                __global const uint *crow = kcb + (long)(p / KP) * HEAD_DIM;
                __global const meta_t *srow = ksb + (long)(p / GQ) * HEAD_DIM;
                __global const meta_t *mrow = kmb + (long)(p / GQ) * HEAD_DIM;
                const int sh0 = (p % KP) * KBITS, sh1 = sh0 + KBITS;
#pragma unroll 4
                for (int d = 0; d < HEAD_DIM; d += 4) {
                    const uint4 c4 = vload4(0, crow + d);
                    const float4 s4 = LOAD_META4(srow, d);
                    const float4 m4 = LOAD_META4(mrow, d);
                    const float a0 = dq(c4.x, sh0, KMASK, s4.x, m4.x);
                    const float a1 = dq(c4.y, sh0, KMASK, s4.y, m4.y);
                    const float a2 = dq(c4.z, sh0, KMASK, s4.z, m4.z);
                    const float a3 = dq(c4.w, sh0, KMASK, s4.w, m4.w);
                    const float b0 = dq(c4.x, sh1, KMASK, s4.x, m4.x);
                    const float b1 = dq(c4.y, sh1, KMASK, s4.y, m4.y);
                    const float b2 = dq(c4.z, sh1, KMASK, s4.z, m4.z);
                    const float b3 = dq(c4.w, sh1, KMASK, s4.w, m4.w);
#pragma unroll
                    for (int g = 0; g < GROUP; g++) {
                        const float4 qv = ql4[g][d / 4];
                        float za = z0[g], zb = z1[g];
                        za = fma(qv.x, a0, za);
                        zb = fma(qv.x, b0, zb);
                        za = fma(qv.y, a1, za);
                        zb = fma(qv.y, b1, zb);
                        za = fma(qv.z, a2, za);
                        zb = fma(qv.z, b2, zb);
                        za = fma(qv.w, a3, za);
                        zb = fma(qv.w, b3, zb);
                        z0[g] = za;
                        z1[g] = zb;
                    }
                }
            } else {
                /* the second row is clamped into the valid range (its logit is unused) */
                __global const res_t *row0 = krb + (long)(p - nq) * HEAD_DIM;
                __global const res_t *row1 = krb + (long)(min(p + 1, end - 1) - nq) * HEAD_DIM;
                for (int d = 0; d < HEAD_DIM; d += 4) {
                    const float4 x0 = LOAD_RES4(row0, d), x1 = LOAD_RES4(row1, d);
#pragma unroll
                    for (int g = 0; g < GROUP; g++) {
                        const float4 qv = ql4[g][d / 4];
                        float za = z0[g], zb = z1[g];
                        za = fma(qv.x, x0.x, za);
                        zb = fma(qv.x, x1.x, zb);
                        za = fma(qv.y, x0.y, za);
                        zb = fma(qv.y, x1.y, zb);
                        za = fma(qv.z, x0.z, za);
                        zb = fma(qv.z, x1.z, zb);
                        za = fma(qv.w, x0.w, za);
                        zb = fma(qv.w, x1.w, zb);
                        z0[g] = za;
                        z1[g] = zb;
                    }
                }
            }
#pragma unroll
            for (int g = 0; g < GROUP; g++) {
                zl[g][lid * KT] = z0[g];
                zl[g][lid * KT + 1] = z1[g];
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        /* ---- V phase: lane (slice, w), tokens base + slice + i*NS ---- */
        const int nt = min(TILE, end - base);
#pragma unroll
        for (int g = 0; g < GROUP; g++) {
            float mb = -INFINITY;
            for (int t = slice; t < nt; t += NS)
                mb = fmax(mb, zl[g][t]);
            if (mb > m[g]) {
                const float f = m[g] == -INFINITY ? 0.0f : exp2(m[g] - mb);
                l[g] *= f;
#pragma unroll
                for (int i = 0; i < VP; i++)
                    acc[g][i] *= f;
                m[g] = mb;
            }
        }
        for (int t = slice; t < nt; t += NS) {
            const int pt = base + t;
            float pg[GROUP];
#pragma unroll
            for (int g = 0; g < GROUP; g++) {
                pg[g] = exp2(zl[g][t] - m[g]);
                l[g] += pg[g];
            }
            if (pt < nq) {
                const uint word = vcb[(long)pt * NW + w];
                const long mi = (long)pt * DG + (w * VP) / GQ;
                const float s = LOAD_META(vsb, mi), mm = LOAD_META(vmb, mi);
#pragma unroll
                for (int i = 0; i < VP; i++) {
                    const float x = dq(word, i * VBITS, VMASK, s, mm);
#pragma unroll
                    for (int g = 0; g < GROUP; g++)
                        acc[g][i] = fma(pg[g], x, acc[g][i]);
                }
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
        barrier(CLK_LOCAL_MEM_FENCE); /* zl is refilled by the next tile */
    }

    /* ---- merge the NS slice states, one head at a time ---- */
    __local float red_ml[NS][GROUP][2];
    __local float red_acc[NS][HEAD_DIM];
    if (w == 0) {
#pragma unroll
        for (int g = 0; g < GROUP; g++) {
            red_ml[slice][g][0] = m[g];
            red_ml[slice][g][1] = l[g];
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int g = 0; g < GROUP; g++) {
        float mx = -INFINITY;
        for (int r = 0; r < NS; r++)
            mx = fmax(mx, red_ml[r][g][0]);
        float sum = 0.0f;
        for (int r = 0; r < NS; r++) {
            const float mr = red_ml[r][g][0];
            sum += mr == -INFINITY ? 0.0f : red_ml[r][g][1] * exp2(mr - mx);
        }
        const float f = m[g] == -INFINITY ? 0.0f : exp2(m[g] - mx);
#pragma unroll
        for (int i = 0; i < VP; i++)
            red_acc[slice][w * VP + i] = acc[g][i] * f;
        barrier(CLK_LOCAL_MEM_FENCE);
        if (g < ng) {
            const long idx = ((long)b * Hq + h0 + g) * num_splits + split;
            for (int d = lid; d < HEAD_DIM; d += WG_SIZE) {
                float a = 0.0f;
                for (int r = 0; r < NS; r++)
                    a += red_acc[r][d];
                part_acc[idx * HEAD_DIM + d] = a;
            }
            if (lid == 0) {
                part_ml[idx * 2] = mx;
                part_ml[idx * 2 + 1] = sum;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}
