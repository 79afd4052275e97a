/* Window / prefill attention with LSE (SPEC §1.2): causal, GQA-native, tiled.
 *
 * Build options (set by host/attention_window.c):
 *   Q_DTYPE, KV_DTYPE, O_DTYPE  dtype codes of q, K/V, o
 *   HEAD_DIM                    D (64, 128, 256)
 *   WG_SIZE                     work-group size
 *   QT                          query rows per work-group tile
 *   KT                          keys per local-memory K/V tile
 *   S_CT                        lanes along the keys of a score tile (divides KT and WG_SIZE)
 *   O_CT                        lanes along the float4 columns of the output tile
 *   MMA                         NVIDIA only (needs CLKV_NVIDIA_PTX; q and K/V both f16 or
 *                               both bf16): Q K^T and P V on the tensor cores with
 *                               mma.sync m16n8k16 (f32 accumulation); tiles stay in local
 *                               memory as 16-bit values; P is split into a 16-bit high
 *                               part and a 16-bit residual (two products), so the weights
 *                               keep ~16 significant bits and o stays within f32
 *                               tolerance. Opt-in from the host.
 *
 * Query rows. The G query heads of one KV head and the T window positions form G*T rows
 * R = t * G + g (t the position index, g the head inside the group); a work-group owns QT
 * consecutive rows of one (sequence, KV head), so every K/V tile it loads into local
 * memory serves all heads and positions of its rows (one K/V read per tile of rows: the
 * GQA saving of decode, and the Q reuse of a flash-attention tile). Row R sees the keys
 * j <= pos = len - T + t; rows with pos < 0 see none.
 *
 * Key splits. The key range [0, len) is cut into chunks of `chunk` keys (split-K, grid
 * dimension 1); a work-group processes the keys of its chunk up to the last position its
 * rows can see (causal skipping: in prefill the early row tiles stop early). With one
 * split (`direct` = 1) it writes o and lse itself; otherwise it writes its partial state
 * (m, l, acc) and attention_window_merge combines the splits.
 *
 * Per key tile: the K/V tile is loaded (widened to f32) into local memory; each lane
 * computes a block of the scores S = Q K^T (base-2 logits: q is pre-scaled by
 * scale * log2 e) with the causal mask applied; one lane per row updates the row's online
 * softmax state (m, l) and turns its scores into weights P; each lane then adds P V to
 * its block of output rows x float4 columns held in registers. */

#define Q_T CLKV_STORAGE(Q_DTYPE)
#define KV_T CLKV_STORAGE(KV_DTYPE)
#define O_T CLKV_STORAGE(O_DTYPE)
#include "kernel_args.cl"

#define D4 (HEAD_DIM / 4)     /* float4 columns of a row */
#define LD4 (D4 + 1)          /* padded row of the Q and K tiles (float4 units) */
#define S_RT (WG_SIZE / S_CT) /* lanes along the rows of a score tile */
#define KPT (KT / S_CT)       /* keys per lane in the score tile */
#define RPT1 (QT / S_RT)      /* rows per lane in the score tile */
#define O_RT (WG_SIZE / O_CT) /* lanes along the rows of the output tile */
#define CPT (D4 / O_CT)       /* float4 columns per lane in the output tile */
#define RPT3 (QT / O_RT)      /* rows per lane in the output tile */
#define TPR2 (WG_SIZE / QT)   /* softmax lanes per row */

#ifndef MMA
#define MMA 0
#endif

#if MMA
#define KVV ushort4 /* raw 16-bit values */
#define KV_ZERO ((ushort4)(0))
#define KV_LOAD(p, i) vload4(0, (__global const ushort *)(p) + (i))
#define KV_PUT(tile, j, c, x) vstore4((x), 0, &(tile)[j][(c)*4])
#else
#define KVV float4 /* widened to f32 */
#define KV_ZERO ((float4)(0.0f))
#define KV_LOAD(p, i) LOAD4(KV_DTYPE)((p), (i))
#define KV_PUT(tile, j, c, x) ((tile)[j][c] = (x))
#endif
#define NLD (KT * D4 / WG_SIZE) /* vectors of a K/V tile per lane */
/* Loops over register arrays are unrolled so the arrays stay in registers. */
#define UNROLL _Pragma("unroll")

#if (KT * D4) % WG_SIZE != 0
#error "attention_window: a K/V tile must split evenly over the lanes"
#endif

#if WG_SIZE % QT != 0 || KT % (WG_SIZE / QT) != 0
#error "attention_window: the softmax lanes of a row must split KT evenly"
#endif

#if !MMA && (WG_SIZE % S_CT != 0 || KT % S_CT != 0 || QT % S_RT != 0 || WG_SIZE % O_CT != 0 ||     \
             D4 % O_CT != 0 || QT % O_RT != 0 || QT > WG_SIZE)
#error "attention_window: inconsistent tile parameters"
#endif

#if MMA
#if Q_DTYPE != KV_DTYPE || KV_DTYPE == CLKV_DT_F32
#error "MMA needs f16 or bf16 q and K/V of the same dtype"
#endif
#define NW (WG_SIZE / 32)              /* warps */
#define LDH (HEAD_DIM + 8)             /* padded 16-bit row of the Q, K, V tiles */
#define MT (QT / 16)                   /* 16-row blocks of the tile */
#define NST (MT * (KT / 8))            /* 16 x 8 score blocks */
#define NOT (MT * (HEAD_DIM / 8) / NW) /* 16 x 8 output blocks per warp */
#if QT % 16 != 0 || KT % 16 != 0 || NST % NW != 0 || (MT * (HEAD_DIM / 8)) % NW != 0 ||            \
    (HEAD_DIM / 8) % NOT != 0 || QT > WG_SIZE
#error "attention_window: inconsistent MMA tile parameters"
#endif
#ifdef CLKV_NVIDIA_PTX
#define MMA_EMU 0
#if KV_DTYPE == CLKV_DT_BF16
#define MMA_TYPE "bf16"
#else
#define MMA_TYPE "f16"
#endif

/* D (16 x 8, f32) += A (16 x 16) B (16 x 8), 16-bit operands packed in pairs (lower index
 * in the low half); g = lane / 4, t = lane % 4: a0 = A[g][2t..], a1 = A[g+8][2t..],
 * a2 = A[g][2t+8..], a3 = A[g+8][2t+8..], b0 = B[2t..][g], b1 = B[2t+8..][g],
 * c = D[g][2t], D[g][2t+1], D[g+8][2t], D[g+8][2t+1]. */
inline void mma16816(__local uint *xch, float *c, uint a0, uint a1, uint a2, uint a3, uint b0,
                     uint b1) {
    (void)xch;
    float d0, d1, d2, d3;
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." MMA_TYPE "." MMA_TYPE ".f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};"
                 : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]),
                   "f"(c[2]), "f"(c[3]));
    c[0] = d0;
    c[1] = d1;
    c[2] = d2;
    c[3] = d3;
}

inline ushort f32_to_f16_bits(float x) {
    ushort h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
    return h;
}
#else
/* Portable emulation of the same warp-level product through local memory (every lane of
 * the work-group calls it the same number of times), so the fragment logic of the MMA
 * path is verified on any device. Slow: for tests only. */
#define MMA_EMU 1

inline float emu_elem(uint word, int hi_half) {
    const uint h = hi_half ? word >> 16 : word & 0xffffu;
#if KV_DTYPE == CLKV_DT_BF16
    return as_float(h << 16);
#else
    return clkv_f16_bits_to_f32(h);
#endif
}

inline void mma16816(__local uint *xch, float *c, uint a0, uint a1, uint a2, uint a3, uint b0,
                     uint b1) {
    const int lid = (int)get_local_id(0), lane = lid % 32;
    __local uint *x = xch + (lid / 32) * 32 * 6;
    const int g = lane >> 2, t = lane & 3;
    x[lane * 6 + 0] = a0;
    x[lane * 6 + 1] = a1;
    x[lane * 6 + 2] = a2;
    x[lane * 6 + 3] = a3;
    x[lane * 6 + 4] = b0;
    x[lane * 6 + 5] = b1;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int i = 0; i < 4; i++) {
        const int row = g + (i >> 1) * 8, col = 2 * t + (i & 1);
        float sum = c[i];
        for (int kk = 0; kk < 16; kk++) {
            const int la = (row % 8) * 4 + (kk % 8) / 2, ra = (kk < 8 ? 0 : 2) + (row >= 8);
            const int lb = col * 4 + (kk % 8) / 2, rb = 4 + (kk >= 8);
            sum = fma(emu_elem(x[la * 6 + ra], kk & 1), emu_elem(x[lb * 6 + rb], kk & 1), sum);
        }
        c[i] = sum;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}

inline ushort f32_to_f16_bits(float x) {
    ushort h;
    vstore_half_rte(x, 0, (__private half *)&h);
    return h;
}
#endif

/* A weight p in [0, 1] as 16-bit high part + 16-bit residual: p ~= hi + lo to about 16
 * significant bits. */
inline void split16(float p, uint *hi, uint *lo) {
#if KV_DTYPE == CLKV_DT_BF16
    const uint h = as_uint(p) & 0xffff0000u; /* truncation: p - h is exact */
    *hi = h >> 16;
    *lo = (uint)clkv_f32_to_bf16(p - as_float(h));
#else
    const ushort h = f32_to_f16_bits(p);
    *hi = h;
    *lo = f32_to_f16_bits(p - clkv_f16_bits_to_f32(h));
#endif
}

/* Two 16-bit elements at [row][col], [row][col + 1] of a local tile (col even). */
#define PAIR(tile, row, col) (*(__local const uint *)&(tile)[row][col])
#endif

/* Four consecutive elements of a buffer of dtype code `dt`, widened to f32. vloadN needs
 * only element alignment. */
inline float4 load4_0(__global const float *p, long i) {
    return vload4(0, p + i);
}
inline float4 load4_1(__global const half *p, long i) {
    return vload_half4(0, p + i);
}
inline float4 load4_2(__global const ushort *p, long i) {
    const uint4 u = convert_uint4(vload4(0, p + i)) << 16;
    return as_float4(u);
}
#define LOAD4(dt) CLKV_CAT(load4_, dt)

inline void store4(__global O_T *p, long i, float4 x) {
    CLKV_STORE(O_DTYPE)(p, i, x.x);
    CLKV_STORE(O_DTYPE)(p, i + 1, x.y);
    CLKV_STORE(O_DTYPE)(p, i + 2, x.z);
    CLKV_STORE(O_DTYPE)(p, i + 3, x.w);
}

inline float dot4(float4 a, float4 b) {
    return fma(a.x, b.x, fma(a.y, b.y, fma(a.z, b.z, a.w * b.w)));
}

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void
attention_window_partial(__global const Q_T *q, __global const KV_T *k, __global const KV_T *v,
                         __global const int *lengths, __global O_T *o, __global float *lse,
                         __global float *part_acc, const window_scalars P) {
    KARGS_UNPACK(WINDOW)
#if MMA
    __local ushort qs[QT][LDH];
    __local ushort ks[KT][LDH];
    __local ushort vs[KT][LDH];
#else
    __local float4 qs[QT][LD4];
    __local float4 ks[KT][LD4];
    __local float4 vs[KT][D4];
#endif
    __local float ss[QT][KT + 1];
#if MMA
    __local uint xch[MMA_EMU ? NW * 32 * 6 : 1]; /* emulation exchange area */
#endif
    __local int row_pos[QT];
    __local float row_m[QT], row_l[QT], row_alpha[QT];
    __local float pmax[QT][TPR2], psum[QT][TPR2];

    const int lid = (int)get_local_id(0);
    /* heaviest (latest) row tiles first: they see the most keys */
    const int qtile = n_qtiles - 1 - (int)get_group_id(0);
    const int split = (int)get_group_id(1);
    const int bh = (int)get_group_id(2);
    const int Hkv = Hq / G;
    const int b = bh / Hkv, kvh = bh % Hkv;
    const int rows = G * T;
    const int r0 = qtile * QT;

    int len = max_len;
    if (has_lengths)
        len = clamp(lengths[len_off + b], 0, max_len);

    /* Row positions and the Q tile (pre-scaled, f32). */
    int last_pos = -1;
    for (int r = 0; r < QT; r++) {
        const int R = r0 + r;
        const int pos = R < rows ? len - T + R / G : -1;
        last_pos = max(last_pos, pos);
    }
    if (lid < QT) {
        const int R = r0 + lid;
        row_pos[lid] = R < rows ? len - T + R / G : -1;
    }
#if MMA
    /* raw 16-bit rows (the scale is applied to the f32 scores) */
    for (int e = lid; e < QT * D4; e += WG_SIZE) {
        const int r = e / D4, c = e % D4;
        const int R = r0 + r;
        ushort4 x = (ushort4)(0);
        if (R < rows) {
            const int t = R / G, h = kvh * G + R % G;
            x = vload4(0, (__global const ushort *)q + q_off + (long)b * q_sb + (long)h * q_sh +
                              (long)t * q_st + c * 4);
        }
        vstore4(x, 0, &qs[r][c * 4]);
    }
#else
    for (int e = lid; e < QT * D4; e += WG_SIZE) {
        const int r = e / D4, c = e % D4;
        const int R = r0 + r;
        float4 x = (float4)(0.0f);
        if (R < rows) {
            const int t = R / G, h = kvh * G + R % G;
            x = LOAD4(Q_DTYPE)(q,
                               q_off + (long)b * q_sb + (long)h * q_sh + (long)t * q_st + c * 4) *
                scale_log2;
        }
        qs[r][c] = x;
    }
#endif

    /* softmax lanes: TPR2 per row */
    const int r2 = lid / TPR2, part = lid % TPR2;
    float m_run = -INFINITY, l_run = 0.0f;

    const int kbeg = split * chunk;
    const int kend = min(kbeg + chunk, last_pos + 1);

#if MMA
    /* Fragment coordinates: warp w owns output blocks (mt_o, nt_o0 + u), u < NOT. */
    const int lane = lid % 32, w = lid / 32;
    const int fg = lane >> 2, ft = lane & 3;
    const int mt_o = w * NOT / (HEAD_DIM / 8), nt_o0 = w * NOT % (HEAD_DIM / 8);
    float acc[NOT][4];
    UNROLL
    for (int u = 0; u < NOT; u++) {
        UNROLL
        for (int i = 0; i < 4; i++)
            acc[u][i] = 0.0f;
    }
#else
    /* Lane coordinates of the score and output tiles. */
    const int sx = lid % S_CT, sy = lid / S_CT;
    const int ox = lid % O_CT, oy = lid / O_CT;
    float4 acc[RPT3][CPT];
    UNROLL
    for (int a = 0; a < RPT3; a++) {
        UNROLL
        for (int c = 0; c < CPT; c++)
            acc[a][c] = (float4)(0.0f);
    }
#endif

    const long kb = k_off + (long)b * k_sb + (long)kvh * k_sh;
    const long vb = v_off + (long)b * v_sb + (long)kvh * v_sh;
    /* K/V tile loads: NLD 4-element vectors of K and of V per lane, staged in registers
     * one tile ahead. Rows past the key range stay 0 (never 0 * garbage). */
    KVV kpre[NLD], vpre[NLD];
#define PREFETCH(jstart)                                                                           \
    UNROLL for (int i = 0; i < NLD; i++) {                                                         \
        const int e = lid + i * WG_SIZE, j = (jstart) + e / D4, c = e % D4;                        \
        kpre[i] = KV_ZERO;                                                                         \
        vpre[i] = KV_ZERO;                                                                         \
        if (j < kend) {                                                                            \
            kpre[i] = KV_LOAD(k, kb + (long)j * k_sl + c * 4);                                     \
            vpre[i] = KV_LOAD(v, vb + (long)j * v_sl + c * 4);                                     \
        }                                                                                          \
    }
    if (kbeg < kend)
        PREFETCH(kbeg);
    for (int j0 = kbeg; j0 < kend; j0 += KT) {
        barrier(CLK_LOCAL_MEM_FENCE); /* previous tile fully consumed (and Q tile stored) */
        UNROLL
        for (int i = 0; i < NLD; i++) {
            const int e = lid + i * WG_SIZE;
            KV_PUT(ks, e / D4, e % D4, kpre[i]);
            KV_PUT(vs, e / D4, e % D4, vpre[i]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        /* the next tile's loads are in flight while this one is computed */
        if (j0 + KT < kend)
            PREFETCH(j0 + KT);
#if MMA

        /* Scores S = Q K^T on the tensor cores, scaled, with the causal mask. */
        for (int st = w; st < NST; st += NW) {
            const int mt = st / (KT / 8), nt = st % (KT / 8);
            float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            for (int kk = 0; kk < HEAD_DIM; kk += 16) {
                const int ra = mt * 16 + fg, kc = kk + 2 * ft;
                mma16816(xch, c, PAIR(qs, ra, kc), PAIR(qs, ra + 8, kc), PAIR(qs, ra, kc + 8),
                         PAIR(qs, ra + 8, kc + 8), PAIR(ks, nt * 8 + fg, kc),
                         PAIR(ks, nt * 8 + fg, kc + 8));
            }
            UNROLL
            for (int i = 0; i < 4; i++) {
                const int r = mt * 16 + fg + (i >> 1) * 8, jl = nt * 8 + 2 * ft + (i & 1);
                const int j = j0 + jl;
                ss[r][jl] = (j < kend && j <= row_pos[r]) ? c[i] * scale_log2 : -INFINITY;
            }
        }
#else
        /* Scores with the causal mask. */
        {
            float s[RPT1][KPT];
            UNROLL
            for (int a = 0; a < RPT1; a++) {
                UNROLL
                for (int u = 0; u < KPT; u++)
                    s[a][u] = 0.0f;
            }
            for (int c = 0; c < D4; c++) {
                float4 kx[KPT];
                UNROLL
                for (int u = 0; u < KPT; u++)
                    kx[u] = ks[sx + u * S_CT][c];
                UNROLL
                for (int a = 0; a < RPT1; a++) {
                    const float4 qx = qs[sy + a * S_RT][c];
                    UNROLL
                    for (int u = 0; u < KPT; u++)
                        s[a][u] += dot4(qx, kx[u]);
                }
            }
            UNROLL
            for (int a = 0; a < RPT1; a++) {
                const int r = sy + a * S_RT;
                const int pos = row_pos[r];
                UNROLL
                for (int u = 0; u < KPT; u++) {
                    const int j = j0 + sx + u * S_CT;
                    ss[r][sx + u * S_CT] = (j < kend && j <= pos) ? s[a][u] : -INFINITY;
                }
            }
        }
#endif
        barrier(CLK_LOCAL_MEM_FENCE);

        /* Online softmax, TPR2 lanes per row (keys interleaved): the row maximum of the
         * tile, then weights, their partial sums and the rescale factor of the row. Every
         * lane of a row keeps the same (m, l) in registers. */
        {
            float mx = -INFINITY;
            for (int i = 0; i < KT / TPR2; i++)
                mx = fmax(mx, ss[r2][part + i * TPR2]);
            pmax[r2][part] = mx;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        {
            float mx = m_run, alpha = 1.0f, sum = 0.0f;
            for (int i = 0; i < TPR2; i++)
                mx = fmax(mx, pmax[r2][i]);
            if (mx != -INFINITY) {
                alpha = m_run == -INFINITY ? 0.0f : exp2(m_run - mx);
                for (int i = 0; i < KT / TPR2; i++) {
                    const float pw = exp2(ss[r2][part + i * TPR2] - mx); /* exp2(-inf) = 0 */
                    ss[r2][part + i * TPR2] = pw;
                    sum += pw;
                }
            } else {
                for (int i = 0; i < KT / TPR2; i++)
                    ss[r2][part + i * TPR2] = 0.0f;
            }
            m_run = mx;
            l_run *= alpha;
            psum[r2][part] = sum;
            if (part == 0)
                row_alpha[r2] = alpha;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int i = 0; i < TPR2; i++)
            l_run += psum[r2][i];

            /* acc = alpha * acc + P V */
#if MMA
        {
            const float al0 = row_alpha[mt_o * 16 + fg], al1 = row_alpha[mt_o * 16 + fg + 8];
            UNROLL
            for (int u = 0; u < NOT; u++) {
                acc[u][0] *= al0;
                acc[u][1] *= al0;
                acc[u][2] *= al1;
                acc[u][3] *= al1;
            }
        }
        for (int kk = 0; kk < KT; kk += 16) {
            /* A = P rows mt_o*16 .. +15, keys kk .. kk+15, as high + residual parts */
            const int ra = mt_o * 16 + fg, kc = kk + 2 * ft;
            const float pa[8] = {ss[ra][kc],         ss[ra][kc + 1],    ss[ra + 8][kc],
                                 ss[ra + 8][kc + 1], ss[ra][kc + 8],    ss[ra][kc + 9],
                                 ss[ra + 8][kc + 8], ss[ra + 8][kc + 9]};
            uint hi[8], lo[8];
            UNROLL
            for (int i = 0; i < 8; i++)
                split16(pa[i], &hi[i], &lo[i]);
            const uint ah0 = hi[0] | hi[1] << 16, ah1 = hi[2] | hi[3] << 16,
                       ah2 = hi[4] | hi[5] << 16, ah3 = hi[6] | hi[7] << 16;
            const uint al0 = lo[0] | lo[1] << 16, al1 = lo[2] | lo[3] << 16,
                       al2 = lo[4] | lo[5] << 16, al3 = lo[6] | lo[7] << 16;
            UNROLL
            for (int u = 0; u < NOT; u++) {
                const int col = (nt_o0 + u) * 8 + fg;
                const uint b0 = (uint)vs[kc][col] | (uint)vs[kc + 1][col] << 16;
                const uint b1 = (uint)vs[kc + 8][col] | (uint)vs[kc + 9][col] << 16;
                mma16816(xch, acc[u], ah0, ah1, ah2, ah3, b0, b1);
                mma16816(xch, acc[u], al0, al1, al2, al3, b0, b1);
            }
        }
#else
        UNROLL
        for (int a = 0; a < RPT3; a++) {
            const float al = row_alpha[oy + a * O_RT];
            UNROLL
            for (int c = 0; c < CPT; c++)
                acc[a][c] *= al;
        }
        for (int j = 0; j < KT; j++) {
            float4 vx[CPT];
            UNROLL
            for (int c = 0; c < CPT; c++)
                vx[c] = vs[j][ox + c * O_CT];
            UNROLL
            for (int a = 0; a < RPT3; a++) {
                const float p = ss[oy + a * O_RT][j];
                UNROLL
                for (int c = 0; c < CPT; c++)
                    acc[a][c] = fma((float4)(p), vx[c], acc[a][c]);
            }
        }
#endif
    }
    if (part == 0) {
        row_m[r2] = m_run;
        row_l[r2] = l_run;
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    /* Results: final (one split) or the split's partial state. */
#if MMA
    UNROLL
    for (int hf = 0; hf < 2; hf++) {
        const int r = mt_o * 16 + fg + hf * 8;
        const int R = r0 + r;
        if (R >= rows)
            continue;
        const int t = R / G, h = kvh * G + R % G;
        const float l = row_l[r];
        const float inv = direct ? (l > 0.0f ? 1.0f / l : 0.0f) : 1.0f;
        const long orow = o_off + (long)b * o_sb + (long)h * o_sh + (long)t * o_st;
        const long idx = (((long)b * Hq + h) * T + t) * num_splits + split;
        UNROLL
        for (int u = 0; u < NOT; u++) {
            const int col = (nt_o0 + u) * 8 + 2 * ft;
            const float x0 = acc[u][hf * 2] * inv, x1 = acc[u][hf * 2 + 1] * inv;
            if (direct) {
                CLKV_STORE(O_DTYPE)(o, orow + col, x0);
                CLKV_STORE(O_DTYPE)(o, orow + col + 1, x1);
            } else {
                part_acc[idx * HEAD_DIM + col] = x0;
                part_acc[idx * HEAD_DIM + col + 1] = x1;
            }
        }
    }
#else
    UNROLL
    for (int a = 0; a < RPT3; a++) {
        const int r = oy + a * O_RT;
        const int R = r0 + r;
        if (R >= rows)
            continue;
        const int t = R / G, h = kvh * G + R % G;
        const float l = row_l[r];
        if (direct) {
            const float inv = l > 0.0f ? 1.0f / l : 0.0f;
            const long orow = o_off + (long)b * o_sb + (long)h * o_sh + (long)t * o_st;
            UNROLL
            for (int c = 0; c < CPT; c++)
                store4(o, orow + (ox + c * O_CT) * 4, acc[a][c] * inv);
        } else {
            const long idx = (((long)b * Hq + h) * T + t) * num_splits + split;
            UNROLL
            for (int c = 0; c < CPT; c++)
                vstore4(acc[a][c], 0, part_acc + idx * HEAD_DIM + (ox + c * O_CT) * 4);
        }
    }
#endif
    if (lid < QT && r0 + lid < rows) {
        const int R = r0 + lid;
        const int t = R / G, h = kvh * G + R % G;
        const float m = row_m[lid], l = row_l[lid];
        if (direct) {
            if (has_lse)
                lse[lse_off + (long)b * lse_sb + (long)h * lse_sh + (long)t * lse_st] =
                    l > 0.0f ? (m + log2(l)) * CLKV_LN2 : -INFINITY;
        } else {
            const long idx = (((long)b * Hq + h) * T + t) * num_splits + split;
            part_acc[ml_off + idx * 2] = m;
            part_acc[ml_off + idx * 2 + 1] = l;
        }
    }
}

/* Combine the splits of each row: m* = max m_s, l* = sum e^(m_s - m*) l_s,
 * o = sum e^(m_s - m*) acc_s / l*, lse = m* + log l* (base 2 inside, natural log out).
 * One work-group per row (rows are (b, h, t) in row-major order): its lanes are MSG split
 * groups x D4 float4 columns, so the splits are read in parallel (a lane per column that
 * walked every split serially made the merge latency-bound for many splits). */
#define MSG (WG_SIZE / D4) /* split groups of the merge */
#define MB 4               /* splits per lane and iteration of the merge */
#if WG_SIZE % D4 != 0
#error "attention_window_merge: D / 4 must divide the work-group size"
#endif
__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void
attention_window_merge(__global const float *part_acc, long ml_off, int num_splits, int Hq, int T,
                       long n_rows, __global O_T *o, long o_off, long o_sb, long o_sh, long o_st,
                       __global float *lse, long lse_off, long lse_sb, long lse_sh, long lse_st,
                       int has_lse) {
    __local float red[WG_SIZE];
    __local float4 racc[MSG][D4];
    __local float rsum[MSG][D4];
    const long row = (long)get_group_id(0);
    const int lid = (int)get_local_id(0);
    const int c = lid % D4, sg = lid / D4;
    (void)n_rows; /* the grid has exactly n_rows work-groups */
    __global const float *ml = part_acc + ml_off + row * num_splits * 2;
    /* m* over all splits: strided lane maxima, then a tree in local memory */
    float mx = -INFINITY;
    for (int s = lid; s < num_splits; s += WG_SIZE)
        mx = fmax(mx, ml[s * 2]);
    red[lid] = mx;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int n = WG_SIZE / 2; n > 0; n /= 2) {
        if (lid < n)
            red[lid] = fmax(red[lid], red[lid + n]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    mx = red[0];
    float sum = 0.0f;
    float4 a = (float4)(0.0f);
    if (mx != -INFINITY) {
        /* MB splits of the lane per iteration, their loads issued together, instead of one
         * split per iteration waiting for its loads (H100, DropKV window T 8 at 128K, 33
         * splits, profiled: 8.55 -> 7.61 us) */
        for (int s0 = sg; s0 < num_splits; s0 += MSG * MB) {
            float ms[MB], ls[MB];
            float4 av[MB];
            for (int j = 0; j < MB; j++) {
                const int s = min(s0 + j * MSG, num_splits - 1);
                ms[j] = s0 + j * MSG < num_splits ? ml[s * 2] : -INFINITY;
                ls[j] = ml[s * 2 + 1];
                av[j] = vload4(c, part_acc + (row * num_splits + s) * HEAD_DIM);
            }
            for (int j = 0; j < MB; j++) {
                if (ms[j] == -INFINITY)
                    continue;
                const float w = exp2(ms[j] - mx);
                sum = fma(ls[j], w, sum);
                a = fma((float4)(w), av[j], a);
            }
        }
    }
    racc[sg][c] = a;
    rsum[sg][c] = sum;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (sg == 0) {
        for (int i = 1; i < MSG; i++) {
            a += racc[i][c];
            sum += rsum[i][c];
        }
        const int t = (int)(row % T);
        const int h = (int)((row / T) % Hq);
        const int b = (int)(row / ((long)T * Hq));
        const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
        store4(o, o_off + (long)b * o_sb + (long)h * o_sh + (long)t * o_st + c * 4, a * inv);
        if (has_lse && c == 0)
            lse[lse_off + (long)b * lse_sb + (long)h * lse_sh + (long)t * lse_st] =
                sum > 0.0f ? (mx + log2(sum)) * CLKV_LN2 : -INFINITY;
    }
}
