/* Window / prefill attention (SPEC §1.2) on the tensor cores: the NVIDIA variant of
 * attention_window_partial (same arguments, same row / split / partial-state conventions
 * as attention_window.cl, whose merge kernel combines its splits), FlashAttention-2 style.
 *
 * Build options (set by host/attention_window.c, only where CLKV_NVIDIA_PTX is defined):
 *   Q_DTYPE, KV_DTYPE, O_DTYPE  dtype codes; q and K/V both f16 or both bf16
 *   HEAD_DIM                    D (64, 128, 256)
 *   QT                          query rows per work-group: 16 * NWQ
 *   NWK                         warps along the keys (NWQ * NWK = 4 warps, 128 lanes)
 *   KW                          keys per warp per tile (16, 32, 64); a tile has KT = NWK * KW
 *   NSTG                        K/V tiles in flight (cp.async stages)
 *   KV_ALIGNED                  1: every K/V row starts 16-byte aligned (cp.async);
 *                               0: plain loads into the same local tiles
 *   P_LO                        1 (default): hi + lo split of P; 0: P rounded once (below)
 *   LONGFLOW                    1: build longflow_partial_mma (below) instead of
 *                               attention_window_partial; with PER_HEAD (LongFlow slot maps)
 *
 * Warp w owns the 16 rows wq = w % NWQ of the tile and the keys [wk * KW, wk * KW + KW) of
 * every K/V tile (wk = w / NWQ). Its q rows stay in registers as mma A fragments; per tile
 * S = Q K^T (m16n8k16, f32 accumulation, K fragments by ldmatrix) stays in registers as C
 * fragments, the online softmax works on them (row max / sum over the 4 lanes of a row by
 * shuffles), and the weights P -- the C fragment of S is the A fragment of P V -- are
 * multiplied by V fragments (ldmatrix.trans), split into a 16-bit high part and a 16-bit
 * residual (two products, ~16 significant bits, so o keeps f32 tolerance). The NWK warps of a
 * row block combine their (m, l, acc) through local memory at the end; the work-group then
 * writes o and lse (one split) or its partial state, row by row (coalesced). */

#define Q_T CLKV_STORAGE(Q_DTYPE)
#define KV_T CLKV_STORAGE(KV_DTYPE)
#define O_T CLKV_STORAGE(O_DTYPE)

#define WG_SIZE 128
#define NWQ (QT / 16)
#define KT (NWK * KW)
#define LDH (HEAD_DIM + 8)  /* padded 16-bit row of a local K/V tile (conflict-free) */
#define ROW16 (LDH / 8)     /* padded row in 16-byte units */
#define CH (HEAD_DIM / 8)   /* 16-byte chunks of a row */
#define TILE16 (KT * ROW16) /* one K or V tile in 16-byte units */
#define NKS (HEAD_DIM / 16) /* k-steps of Q K^T */
#define NNT (HEAD_DIM / 8)  /* n-tiles of P V (output columns / 8) */
#define NST (KW / 8)        /* n-tiles of a warp's scores */
#define UNROLL _Pragma("unroll")

#ifndef LONGFLOW
#define LONGFLOW 0
#endif
#include "kernel_args.cl" /* the scalars of both entry kernels */

#if NWQ * NWK != 4 || (KW != 16 && KW != 32 && KW != 64) ||                                        \
    (HEAD_DIM != 64 && HEAD_DIM != 128 && HEAD_DIM != 256)
#error "attention_window_mma: inconsistent tile parameters"
#endif
/* Q_LOCAL: the q fragments of each row block in local memory (qsm, QT * HEAD_DIM * 2 bytes),
 * read per k-step, instead of NKS x 4 registers a lane. At D 256 the registers (64 for q
 * next to 128 accumulators) would not fit; the host counts qsm when it sizes the tiles. */
#ifndef Q_LOCAL
#define Q_LOCAL (HEAD_DIM == 256)
#endif
#if Q_DTYPE != KV_DTYPE || KV_DTYPE == CLKV_DT_F32 || !defined(CLKV_NVIDIA_PTX)
#error "attention_window_mma needs NVIDIA PTX and f16 / bf16 q and K/V of one dtype"
#endif
#if NSTG * 2 * KT * LDH * 2 < NWK * QT * HEAD_DIM * 4
#error "attention_window_mma: the combine area does not fit into the stages"
#endif

/* c (16 x 8, f32) += A (16 x 16) B (16 x 8), the ldmatrix loads and the P split /
 * rounding: cl_kernels/common.cl */
#define mma16816 CLKV_MMA(KV_DTYPE)
#define ldmatrix4 clkv_ldmatrix4
#define ldmatrix4_trans clkv_ldmatrix4_trans
#define split16x2 CLKV_SPLIT16X2(KV_DTYPE)
#define round16x2 CLKV_ROUND16X2(KV_DTYPE)

inline ushort f32_to_f16_bits(float x) {
    ushort h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
    return h;
}

/* P_LO (default 1): P as a 16-bit high part plus a 16-bit residual (two products), so o
 * keeps f32 tolerance. P_LO = 0 (host opt-in, 16-bit o only): P rounded once to the K/V
 * dtype as FlashAttention does -- a third fewer tensor-core products, but errors up to
 * ~2.5x the test tolerance of 16-bit outputs on cancelling rows (measured on an H200). */
#ifndef P_LO
#define P_LO 1
#endif

inline float quad_max(float x) {
    x = fmax(x, clkv_shfl_xor(x, 1));
    return fmax(x, clkv_shfl_xor(x, 2));
}
inline float quad_sum(float x) {
    x += clkv_shfl_xor(x, 1);
    return x + clkv_shfl_xor(x, 2);
}

/* Copy key rows [first, first + KT) of K and V into one stage (see clkv_issue_kv_tile). */
/* One tile's online-softmax step on the C fragments (rows a = g and b = g + 8 of a lane):
 * mx_a / mx_b are the tile's row maxima over this lane's logits s (base 2, -inf where
 * masked); the running maxima m move to the row maxima, l and acc are rescaled, and s
 * becomes exp2(s - m) with its sums added to l. clkv_exp2_ftz (one MUFU.EX2; ~2 ulp,
 * exp2(-inf) = 0, results below 2^-126 flushed to 0; native_exp2 keeps a subnormal
 * fix-up around it): H200, two alternations (2026-11-28), MiniKV prefill pass 1 at 8K
 * 2812.3 / 2811.8 -> 2790.7 / 2789.3 us, DropKV's window attention at 128K 148.3 / 149.0
 * -> 148.0 / 148.6 us. */
inline void frag_softmax(float s[NST][4], float acc[NNT][4], float mx_a, float mx_b, float *m_a,
                         float *m_b, float *l_a, float *l_b) {
    mx_a = fmax(quad_max(mx_a), *m_a);
    mx_b = fmax(quad_max(mx_b), *m_b);
    const float base_a = mx_a == -INFINITY ? 0.0f : mx_a;
    const float base_b = mx_b == -INFINITY ? 0.0f : mx_b;
    const float al_a = clkv_exp2_ftz(*m_a - base_a), al_b = clkv_exp2_ftz(*m_b - base_b);
    *m_a = mx_a;
    *m_b = mx_b;
    float la = *l_a * al_a, lb = *l_b * al_b;
    UNROLL
    for (int n = 0; n < NNT; n++) {
        acc[n][0] *= al_a;
        acc[n][1] *= al_a;
        acc[n][2] *= al_b;
        acc[n][3] *= al_b;
    }
    UNROLL
    for (int n = 0; n < NST; n++) {
        s[n][0] = clkv_exp2_ftz(s[n][0] - base_a);
        s[n][1] = clkv_exp2_ftz(s[n][1] - base_a);
        s[n][2] = clkv_exp2_ftz(s[n][2] - base_b);
        s[n][3] = clkv_exp2_ftz(s[n][3] - base_b);
        la += s[n][0] + s[n][1];
        lb += s[n][2] + s[n][3];
    }
    *l_a = la;
    *l_b = lb;
}

/* acc += P V over the warp's KW keys of a stage: k-step kk covers keys 16 kk .. 16 kk + 15,
 * P from the exponentiated fragments s (16-bit high part, with P_LO also the rest), V rows
 * from the stage's V tile vs by ldmatrix.trans at (v_row, v_col). */
inline void frag_pv(float acc[NNT][4], float s[NST][4], __local const ushort *vs, int v_row,
                    int v_col) {
    UNROLL
    for (int kk = 0; kk < KW / 16; kk++) {
        uint ph[4];
#if P_LO
        uint pl[4];
        split16x2(s[2 * kk][0], s[2 * kk][1], &ph[0], &pl[0]);
        split16x2(s[2 * kk][2], s[2 * kk][3], &ph[1], &pl[1]);
        split16x2(s[2 * kk + 1][0], s[2 * kk + 1][1], &ph[2], &pl[2]);
        split16x2(s[2 * kk + 1][2], s[2 * kk + 1][3], &ph[3], &pl[3]);
#else
        ph[0] = round16x2(s[2 * kk][0], s[2 * kk][1]);
        ph[1] = round16x2(s[2 * kk][2], s[2 * kk][3]);
        ph[2] = round16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        ph[3] = round16x2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#endif
        UNROLL
        for (int n = 0; n < NNT; n += 2) {
            uint bf[4];
            ldmatrix4_trans(bf, vs + (v_row + kk * 16) * LDH + n * 8 + v_col);
            mma16816(acc[n], ph[0], ph[1], ph[2], ph[3], bf[0], bf[1]);
            mma16816(acc[n + 1], ph[0], ph[1], ph[2], ph[3], bf[2], bf[3]);
#if P_LO
            mma16816(acc[n], pl[0], pl[1], pl[2], pl[3], bf[0], bf[1]);
            mma16816(acc[n + 1], pl[0], pl[1], pl[2], pl[3], bf[2], bf[3]);
#endif
        }
    }
}

/* The first half of combining the NWK key warps of a row block: each warp's (m, l) of its
 * rows la = local row of fragment row a, la + 8 into wm / wl, and its accumulators scaled
 * to the rows' common maximum into cmb [NWK][QT][HEAD_DIM] (the stage area). Work-group
 * barriers inside: every work-item calls it. */
inline void warps_to_local(__local float (*wm)[QT], __local float (*wl)[QT], __local float *cmb,
                           float acc[NNT][4], float m_a, float m_b, float l_a, float l_b, int la,
                           int wk, int ft) {
    l_a = quad_sum(l_a);
    l_b = quad_sum(l_b);
    const int lb = la + 8;
    if (ft == 0) {
        wm[wk][la] = m_a;
        wm[wk][lb] = m_b;
        wl[wk][la] = l_a;
        wl[wk][lb] = l_b;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    float ms_a = -INFINITY, ms_b = -INFINITY;
    UNROLL
    for (int i = 0; i < NWK; i++) {
        ms_a = fmax(ms_a, wm[i][la]);
        ms_b = fmax(ms_b, wm[i][lb]);
    }
    const float f_a = m_a == -INFINITY ? 0.0f : exp2(m_a - ms_a);
    const float f_b = m_b == -INFINITY ? 0.0f : exp2(m_b - ms_b);
    UNROLL
    for (int n = 0; n < NNT; n++) {
        const int col = n * 8 + 2 * ft;
        vstore2((float2)(acc[n][0] * f_a, acc[n][1] * f_a), 0,
                cmb + ((long)wk * QT + la) * HEAD_DIM + col);
        vstore2((float2)(acc[n][2] * f_b, acc[n][3] * f_b), 0,
                cmb + ((long)wk * QT + lb) * HEAD_DIM + col);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}

/* The second half for local row r, columns 4 c4 .. 4 c4 + 3: the row's state over the NWK
 * warps, (*ms, *l) and the returned unnormalized accumulator (scaled to 2^*ms). */
inline float4 local_row_state(__local const float (*wm)[QT], __local const float (*wl)[QT],
                              __local const float *cmb, int r, int c4, float *ms, float *l) {
    float mx = -INFINITY, sum = 0.0f;
    for (int i = 0; i < NWK; i++)
        mx = fmax(mx, wm[i][r]);
    float4 x = (float4)(0.0f);
    for (int i = 0; i < NWK; i++) {
        const float mw = wm[i][r];
        if (mw != -INFINITY)
            sum += wl[i][r] * exp2(mw - mx);
        x += vload4(c4, cmb + ((long)i * QT + r) * HEAD_DIM);
    }
    *ms = mx;
    *l = sum;
    return x;
}

inline void issue_tile(__local uint4 *sk, __local uint4 *sv, __global const KV_T *k,
                       __global const KV_T *v, long kb, long vb, long k_sl, long v_sl, int first,
                       int end, int lid) {
    clkv_issue_kv_tile(sk, sv, (__global const ushort *)k, (__global const ushort *)v, kb, vb, k_sl,
                       v_sl, first, end, lid, KT, CH, ROW16, WG_SIZE, KV_ALIGNED);
}

/* Packed pair q[row][col], q[row][col + 1] (raw 16-bit values), 0 outside the rows. */
inline uint q_pair(__global const Q_T *q, long rowbase, int valid, int col) {
    if (!valid)
        return 0u;
    __global const ushort *p = (__global const ushort *)q + rowbase + col;
    return (uint)p[0] | (uint)p[1] << 16;
}

#if !LONGFLOW
__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void
attention_window_partial(__global const Q_T *q, __global const KV_T *k, __global const KV_T *v,
                         __global const int *lengths, __global O_T *o, __global float *lse,
                         __global float *part_acc, const window_scalars P) {
    KARGS_UNPACK(WINDOW)
    __local uint4 smem[NSTG * 2 * TILE16];
    __local float wm[NWK][QT], wl[NWK][QT];
#if Q_LOCAL
    __local uint4 qsm[NWQ][NKS][32]; /* [row block][k-step][lane]: conflict-free reads */
#endif

    const int lid = (int)get_local_id(0);
    const int lane = lid % 32, w = lid / 32;
    const int wq = w % NWQ, wk = w / NWQ;
    const int fg = lane >> 2, ft = lane & 3;
    const int qtile = n_qtiles - 1 - (int)get_group_id(0); /* heaviest row tiles first */
    const int split = (int)get_group_id(1);
    const int bh = (int)get_group_id(2);
    const int Hkv = Hq / G;
    const int b = bh / Hkv, kvh = bh % Hkv;
    const int rows = G * T;
    const int r0 = qtile * QT;

    int len = max_len;
    if (has_lengths)
        len = clamp(lengths[len_off + b], 0, max_len);
    const int last_row = min(r0 + QT, rows) - 1;
    const int last_pos = len - T + last_row / G;
    const int kbeg = split * chunk;
    const int kend = min(kbeg + chunk, last_pos + 1);
    const int ntiles = kend > kbeg ? (kend - kbeg + KT - 1) / KT : 0;

    /* This lane's two rows (g and g + 8 of the warp's block): positions and q fragments. */
    const int ra = r0 + wq * 16 + fg, rb = ra + 8;
    const int pos_a = ra < rows ? len - T + ra / G : -1;
    const int pos_b = rb < rows ? len - T + rb / G : -1;
#if Q_LOCAL
    if (wk == 0) { /* read after the first tile's barrier */
        const int ha = kvh * G + ra % G, hb = kvh * G + rb % G;
        const long qa = q_off + (long)b * q_sb + (long)ha * q_sh + (long)(ra / G) * q_st;
        const long qb = q_off + (long)b * q_sb + (long)hb * q_sh + (long)(rb / G) * q_st;
        for (int s = 0; s < NKS; s++)
            qsm[wq][s][lane] = (uint4)(q_pair(q, qa, ra < rows, s * 16 + 2 * ft),
                                       q_pair(q, qb, rb < rows, s * 16 + 2 * ft),
                                       q_pair(q, qa, ra < rows, s * 16 + 2 * ft + 8),
                                       q_pair(q, qb, rb < rows, s * 16 + 2 * ft + 8));
    }
#else
    uint qf[NKS][4];
    {
        const int ha = kvh * G + ra % G, hb = kvh * G + rb % G;
        const long qa = q_off + (long)b * q_sb + (long)ha * q_sh + (long)(ra / G) * q_st;
        const long qb = q_off + (long)b * q_sb + (long)hb * q_sh + (long)(rb / G) * q_st;
        UNROLL
        for (int s = 0; s < NKS; s++) {
            qf[s][0] = q_pair(q, qa, ra < rows, s * 16 + 2 * ft);
            qf[s][1] = q_pair(q, qb, rb < rows, s * 16 + 2 * ft);
            qf[s][2] = q_pair(q, qa, ra < rows, s * 16 + 2 * ft + 8);
            qf[s][3] = q_pair(q, qb, rb < rows, s * 16 + 2 * ft + 8);
        }
    }
#endif

    float acc[NNT][4];
    UNROLL
    for (int n = 0; n < NNT; n++) {
        UNROLL
        for (int i = 0; i < 4; i++)
            acc[n][i] = 0.0f;
    }
    float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f; /* l: this lane's part */

    const long kb = k_off + (long)b * k_sb + (long)kvh * k_sh;
    const long vb = v_off + (long)b * v_sb + (long)kvh * v_sh;
    /* ldmatrix row addresses of this lane inside a stage (16-bit units) */
    const int mi = lane >> 3, mr = lane & 7;
    const int k_row = wk * KW + (mi >> 1) * 8 + mr, k_col = (mi & 1) * 8;
    const int v_row = wk * KW + (mi & 1) * 8 + mr, v_col = (mi >> 1) * 8;

#if KV_ALIGNED
    UNROLL
    for (int t = 0; t < NSTG - 1; t++) {
        if (t < ntiles)
            issue_tile(smem + (2 * t) * TILE16, smem + (2 * t + 1) * TILE16, k, v, kb, vb, k_sl,
                       v_sl, kbeg + t * KT, kend, lid);
        clkv_cp_async_commit(); /* empty groups keep the group count uniform */
    }
#endif
    for (int t = 0; t < ntiles; t++) {
        const int st = t % NSTG;
#if KV_ALIGNED
        const int ahead = t + NSTG - 1;
        if (ahead < ntiles)
            issue_tile(smem + (2 * (ahead % NSTG)) * TILE16,
                       smem + (2 * (ahead % NSTG) + 1) * TILE16, k, v, kb, vb, k_sl, v_sl,
                       kbeg + ahead * KT, kend, lid);
        clkv_cp_async_commit();
        CLKV_CP_ASYNC_WAIT(NSTG - 1); /* tile t has landed (this lane's copies) */
#else
        issue_tile(smem + (2 * st) * TILE16, smem + (2 * st + 1) * TILE16, k, v, kb, vb, k_sl, v_sl,
                   kbeg + t * KT, kend, lid);
#endif
        barrier(CLK_LOCAL_MEM_FENCE);
        __local const ushort *ks = (__local const ushort *)(smem + (2 * st) * TILE16);
        __local const ushort *vs = (__local const ushort *)(smem + (2 * st + 1) * TILE16);
        const int j0 = kbeg + t * KT + wk * KW; /* first key of this warp */

        /* S = Q K^T for the warp's 16 rows x KW keys */
        float s[NST][4];
        UNROLL
        for (int n = 0; n < NST; n++) {
            UNROLL
            for (int i = 0; i < 4; i++)
                s[n][i] = 0.0f;
        }
#if Q_LOCAL
        UNROLL
        for (int kk = 0; kk < NKS; kk++) { /* each q fragment read once per tile */
            const uint4 qv = qsm[wq][kk][lane];
            UNROLL
            for (int n = 0; n < NST; n += 2) {
                uint bf[4];
                ldmatrix4(bf, ks + (k_row + n * 8) * LDH + kk * 16 + k_col);
                mma16816(s[n], qv.x, qv.y, qv.z, qv.w, bf[0], bf[1]);
                mma16816(s[n + 1], qv.x, qv.y, qv.z, qv.w, bf[2], bf[3]);
            }
        }
#else
        UNROLL
        for (int n = 0; n < NST; n += 2) {
            UNROLL
            for (int kk = 0; kk < NKS; kk++) {
                uint bf[4];
                ldmatrix4(bf, ks + (k_row + n * 8) * LDH + kk * 16 + k_col);
                mma16816(s[n], qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3], bf[0], bf[1]);
                mma16816(s[n + 1], qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3], bf[2], bf[3]);
            }
        }
#endif

        /* scale, causal mask, online softmax on the fragments */
        float mx_a = -INFINITY, mx_b = -INFINITY;
        UNROLL
        for (int n = 0; n < NST; n++) {
            UNROLL
            for (int i = 0; i < 4; i++) {
                const int j = j0 + n * 8 + 2 * ft + (i & 1);
                const int pos = i < 2 ? pos_a : pos_b;
                const float x = (j < kend && j <= pos) ? s[n][i] * scale_log2 : -INFINITY;
                s[n][i] = x;
                if (i < 2)
                    mx_a = fmax(mx_a, x);
                else
                    mx_b = fmax(mx_b, x);
            }
        }
        frag_softmax(s, acc, mx_a, mx_b, &m_a, &m_b, &l_a, &l_b);
        frag_pv(acc, s, vs, v_row, v_col);
        barrier(CLK_LOCAL_MEM_FENCE); /* the stage may be refilled */
    }
#if KV_ALIGNED
    CLKV_CP_ASYNC_WAIT(0); /* no copy may land in the combine area */
#endif

    /* Combine the NWK warps of each row block: m* = max m_w, l* = sum 2^(m_w - m*) l_w. */
    __local float *cmb = (__local float *)smem; /* [NWK][QT][HEAD_DIM] */
    warps_to_local(wm, wl, cmb, acc, m_a, m_b, l_a, l_b, wq * 16 + fg, wk, ft);

    /* Row-wise results: final (one split) or this split's partial state. */
    for (int e = lid; e < QT * (HEAD_DIM / 4); e += WG_SIZE) {
        const int r = e / (HEAD_DIM / 4), c4 = e % (HEAD_DIM / 4);
        const int R = r0 + r;
        if (R >= rows)
            continue;
        float ms, l;
        float4 x = local_row_state(wm, wl, cmb, r, c4, &ms, &l);
        const int tpos = R / G, h = kvh * G + R % G;
        if (direct) {
            x *= l > 0.0f ? 1.0f / l : 0.0f;
            const long orow = o_off + (long)b * o_sb + (long)h * o_sh + (long)tpos * o_st + c4 * 4;
            CLKV_STORE(O_DTYPE)(o, orow, x.x);
            CLKV_STORE(O_DTYPE)(o, orow + 1, x.y);
            CLKV_STORE(O_DTYPE)(o, orow + 2, x.z);
            CLKV_STORE(O_DTYPE)(o, orow + 3, x.w);
            if (has_lse && c4 == 0)
                lse[lse_off + (long)b * lse_sb + (long)h * lse_sh + (long)tpos * lse_st] =
                    l > 0.0f ? (ms + log2(l)) * CLKV_LN2 : -INFINITY;
        } else {
            const long idx = (((long)b * Hq + h) * T + tpos) * num_splits + split;
            vstore4(x, 0, part_acc + idx * HEAD_DIM + c4 * 4);
            if (c4 == 0) {
                part_acc[ml_off + idx * 2] = ms;
                part_acc[ml_off + idx * 2 + 1] = l;
            }
        }
    }
}
#endif /* !LONGFLOW */

#if LONGFLOW
/* ---- LongFlow fused step on the tensor cores (SPEC §2.3; host/longflow_step.c) ----
 *
 * lf_attend: the attention part of a step with the tiles, fragments and online softmax
 * above, T = 1: the G query heads of a KV head are the rows (padded to QT). One
 * work-group per (row tile, split of the S slots, sequence x KV head). Two kernels run it:
 * longflow_partial_mma, the partial kernel of cl_kernels/longflow_partial.cl (same
 * workspace contract, followed by the finish kernel), and longflow_step_mma (below), the
 * whole step in one launch. On top of decode:
 *  - the new token: the work-group of row tile 0 whose split holds the victim slot stores
 *    k_new / v_new there (and, one writer per slot map, the slot's position); every
 *    work-group whose split holds it patches the victim row of its local tile with the
 *    new token as the cache stores it, after the tile has landed, so nothing depends on
 *    the order of global writes and reads (no host sync inside a step);
 *  - the slot mask: a slot takes part when it holds a position (staged with its tile) or
 *    is the victim; a masked row's V is zeroed in the tile (it may hold NaN);
 *  - ||v||_1 per slot from the V tile in local memory (a tensor-core product of ones and
 *    |V|^T, which lands in the layout of the score fragments), and per (query head, slot) the
 *    base-2 score logit y = z*log2(e) + log2 ||v||_1 (-inf for a masked slot) into
 *    ws[y_off + (b*Hq + h)*S + slot], which the finish kernel or the scorers of
 *    longflow_step_mma turn into scores. A warp stages its tile's logits in local memory
 *    (ysm) and stores each head's run of KW slots with consecutive lanes, instead of two
 *    4-byte stores per lane and n-tile from the fragments (each filling half of 4 sectors):
 *    H100, B 2, Hq 32 / Hkv 8, bf16, S 32K, two alternations, per-layer 118.7 / 118.8 ->
 *    117.1 / 117.1 us, per-KV-head 121.4 / 121.4 -> 118.5 / 119.4 (S 1024 unchanged,
 *    15.3-16.2 us). The logits' 8 MB still cost the step about 8 us there: without
 *    storing them it took 109.8-110.4 us (decode on the same cache 97 us).
 * Build options: KV_DTYPE (f16 | bf16; Q_DTYPE = O_DTYPE = KV_DTYPE), HEAD_DIM, QT, NWK,
 * KW, NSTG, KV_ALIGNED = 1 (the cache is contiguous), P_LO, PER_HEAD, LF_NH. */

#define NMW ((KW + 31) / 32) /* 32-key words of a warp's slot mask */
#define YLD (KW + 1)         /* row of a warp's staged score logits (ysm: 4 warps x 16 rows) */

#include "longflow_step.cl" /* lf_ballot, lf_new_chunk, the scorers */

/* The arguments of the attention part (both kernels below start with them). */
#define LF_ATT_PARAMS                                                                              \
    __global const Q_T *q, long q_off, long q_sb, long q_sh, __global const void *kn, int n_dt,    \
        long kn_off, long kn_sb, long kn_sh, __global const void *vn, long vn_off, long vn_sb,     \
        long vn_sh, __global KV_T *k, __global KV_T *v, __global int *pos, __global int *victim,   \
        __global int *next_pos, int do_write, int Hq, int G, int n_qtiles, int S, int chunk,       \
        int num_splits, float scale_log2, __global float *ws, long ml_off, long y_off
#define LF_ATT_ARGS                                                                                \
    q, q_off, q_sb, q_sh, kn, n_dt, kn_off, kn_sb, kn_sh, vn, vn_off, vn_sb, vn_sh, k, v, pos,     \
        victim, next_pos, do_write, Hq, G, n_qtiles, S, chunk, num_splits, scale_log2, ws, ml_off, \
        y_off

/* The attention part of a step for row tile `qtile`, split `split` of the slots and
 * sequence x KV head `bh` (see above): the new token, then this split's partial state
 * (m, l, acc) per row and the score logits of its slots into the workspace. */
inline void lf_attend(LF_ATT_PARAMS, int qtile, int split, int bh, __local uint4 *smem,
                      __local int (*spos)[KT], __local float (*wm)[QT], __local float (*wl)[QT],
                      __local uint4 *new_k, __local uint4 *new_v, __local float *ysm,
                      __local uint4 *qsm, int keep_y) {
    const int lid = (int)get_local_id(0);
    const int lane = lid % 32, w = lid / 32;
    const int wq = w % NWQ, wk = w / NWQ;
    const int fg = lane >> 2, ft = lane & 3;
    const int Hkv = Hq / G;
    const int b = bh / Hkv, kvh = bh % Hkv;
    const int rows = G;
    const int r0 = qtile * QT;
    const int Hm = PER_HEAD ? Hkv : 1;
    const int u = PER_HEAD ? kvh : 0;
    const int vslot = do_write ? victim[b * Hm + u] : -1;
    const int kbeg = split * chunk;
    const int kend = min(kbeg + chunk, S);
    const int ntiles = kend > kbeg ? (kend - kbeg + KT - 1) / KT : 0;
    const int has_victim = vslot >= kbeg && vslot < kend;
    const long kb = ((long)b * Hkv + kvh) * S * HEAD_DIM; /* same for v */
    __global int *prow = pos + ((long)b * Hm + u) * S;

    /* the first tiles and q are in flight before the new token is handled */
    UNROLL
    for (int t = 0; t < NSTG - 1; t++) {
        if (t < ntiles) {
            issue_tile(smem + (2 * t) * TILE16, smem + (2 * t + 1) * TILE16, k, v, kb, kb, HEAD_DIM,
                       HEAD_DIM, kbeg + t * KT, kend, lid);
            for (int r = lid; r < KT; r += WG_SIZE)
                clkv_cp_async4(&spos[t][r], prow + min(kbeg + t * KT + r, kend - 1));
        }
        clkv_cp_async_commit(); /* empty groups keep the group count uniform */
    }

    /* This lane's two rows (heads g and g + 8 of the warp's block) as q fragments. */
    const int ra = r0 + wq * 16 + fg, rb = ra + 8;
#if Q_LOCAL
    if (wk == 0) { /* read after the first tile's barrier */
        const long qa = q_off + (long)b * q_sb + (long)(kvh * G + min(ra, rows - 1)) * q_sh;
        const long qb = q_off + (long)b * q_sb + (long)(kvh * G + min(rb, rows - 1)) * q_sh;
        for (int s = 0; s < NKS; s++)
            qsm[(wq * NKS + s) * 32 + lane] =
                (uint4)(q_pair(q, qa, ra < rows, s * 16 + 2 * ft),
                        q_pair(q, qb, rb < rows, s * 16 + 2 * ft),
                        q_pair(q, qa, ra < rows, s * 16 + 2 * ft + 8),
                        q_pair(q, qb, rb < rows, s * 16 + 2 * ft + 8));
    }
#else
    (void)qsm;
    uint qf[NKS][4];
    {
        const long qa = q_off + (long)b * q_sb + (long)(kvh * G + min(ra, rows - 1)) * q_sh;
        const long qb = q_off + (long)b * q_sb + (long)(kvh * G + min(rb, rows - 1)) * q_sh;
        UNROLL
        for (int s = 0; s < NKS; s++) {
            qf[s][0] = q_pair(q, qa, ra < rows, s * 16 + 2 * ft);
            qf[s][1] = q_pair(q, qb, rb < rows, s * 16 + 2 * ft);
            qf[s][2] = q_pair(q, qa, ra < rows, s * 16 + 2 * ft + 8);
            qf[s][3] = q_pair(q, qb, rb < rows, s * 16 + 2 * ft + 8);
        }
    }
#endif
    /* (a) the new token: stored by one work-group, staged (as stored) by every one whose
     * split holds the victim */
    if (has_victim) {
        const long knrow = kn_off + (long)b * kn_sb + (long)kvh * kn_sh;
        const long vnrow = vn_off + (long)b * vn_sb + (long)kvh * vn_sh;
        for (int c = lid; c < CH; c += WG_SIZE) {
            const uint4 rk = lf_new_chunk(kn, n_dt, knrow, c);
            const uint4 rv = lf_new_chunk(vn, n_dt, vnrow, c);
            new_k[c] = rk;
            new_v[c] = rv;
            if (qtile == 0) {
                *(__global uint4 *)(k + kb + (long)vslot * HEAD_DIM + c * 8) = rk;
                *(__global uint4 *)(v + kb + (long)vslot * HEAD_DIM + c * 8) = rv;
            }
        }
#if PER_HEAD
        const int map_writer = qtile == 0 && lid == 0;
#else
        const int map_writer = qtile == 0 && lid == 0 && kvh == 0; /* one writer per map */
#endif
        if (map_writer)
            prow[vslot] = next_pos[b];
    }

    /* score logits: the warp's 16 rows staged in ysw, then rows [0, nyr) stored from
     * yrow (heads kvh * G + r0 + wq * 16 + r), [b, h, slot] */
    __local float *ysw = ysm + w * (16 * YLD);
    const int nyr = clamp(rows - (r0 + wq * 16), 0, 16);
    __global float *yrow = ws + y_off + ((long)b * Hq + kvh * G + r0 + wq * 16) * S;
    const ulong ypol = keep_y ? lf_policy_keep() : 0; /* see lf_policy_keep */

    float acc[NNT][4];
    UNROLL
    for (int n = 0; n < NNT; n++) {
        UNROLL
        for (int i = 0; i < 4; i++)
            acc[n][i] = 0.0f;
    }
    float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f; /* l: this lane's part */

    const int mi = lane >> 3, mr = lane & 7;
    const int k_row = wk * KW + (mi >> 1) * 8 + mr, k_col = (mi & 1) * 8;
    const int v_row = wk * KW + (mi & 1) * 8 + mr, v_col = (mi >> 1) * 8;

    for (int t = 0; t < ntiles; t++) {
        const int st = t % NSTG;
        const int ahead = t + NSTG - 1;
        if (ahead < ntiles) {
            const int sa = ahead % NSTG;
            issue_tile(smem + (2 * sa) * TILE16, smem + (2 * sa + 1) * TILE16, k, v, kb, kb,
                       HEAD_DIM, HEAD_DIM, kbeg + ahead * KT, kend, lid);
            for (int r = lid; r < KT; r += WG_SIZE)
                clkv_cp_async4(&spos[sa][r], prow + min(kbeg + ahead * KT + r, kend - 1));
        }
        clkv_cp_async_commit();
        CLKV_CP_ASYNC_WAIT(NSTG - 1); /* tile t has landed (this lane's copies) */
        barrier(CLK_LOCAL_MEM_FENCE);
        __local uint4 *k4 = smem + (2 * st) * TILE16;
        __local uint4 *v4 = smem + (2 * st + 1) * TILE16;
        const int tfirst = kbeg + t * KT;
        if (has_victim && vslot >= tfirst && vslot < tfirst + KT) { /* uniform */
            const int r = vslot - tfirst;
            for (int c = lid; c < CH; c += WG_SIZE) {
                k4[r * ROW16 + c] = new_k[c];
                v4[r * ROW16 + c] = new_v[c];
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        __local const ushort *ks = (__local const ushort *)k4;
        __local const ushort *vs = (__local const ushort *)v4;
        const int j0 = tfirst + wk * KW; /* first key of this warp */

        /* The warp's slot mask (bit kl of word kl / 32: key j0 + kl takes part): in range
         * and holding a position, or the victim. Masked rows' V (may hold NaN) is zeroed
         * before any product reads it, by every warp reading those rows (equal values). */
        uint okm[NMW];
        int any_masked = 0;
        UNROLL
        for (int wd = 0; wd < NMW; wd++) {
            const int kl = wd * 32 + lane, j = j0 + kl;
            const int ok = kl < KW && j < kend && (j == vslot || spos[st][wk * KW + kl] >= 0);
            okm[wd] = lf_ballot(ok);
            any_masked |= okm[wd] != (KW - wd * 32 >= 32 ? 0xffffffffu : (1u << (KW % 32)) - 1u);
        }
        if (any_masked) { /* uniform over the warp */
            for (int i = lane; i < KW * CH; i += 32) {
                const int kl = i / CH;
                if (!((okm[kl / 32] >> (kl % 32)) & 1u))
                    v4[(wk * KW + kl) * ROW16 + i % CH] = (uint4)(0u);
            }
            clkv_warp_sync();
        }

        /* S = Q K^T for the warp's 16 rows x KW keys */
        float s[NST][4];
        UNROLL
        for (int n = 0; n < NST; n++) {
            UNROLL
            for (int i = 0; i < 4; i++)
                s[n][i] = 0.0f;
        }
        /* ||v||_1 of the keys as the same product with A = ones and B = |V|^T: nv[n][i]
         * (i < 2) is the norm of key n * 8 + 2 ft + i, as the score fragments index keys */
        float nv[NST][4];
        UNROLL
        for (int n = 0; n < NST; n++) {
            UNROLL
            for (int i = 0; i < 4; i++)
                nv[n][i] = 0.0f;
        }
#if Q_LOCAL
        UNROLL
        for (int kk = 0; kk < NKS; kk++) { /* each q fragment read once per tile */
            const uint4 qv = qsm[(wq * NKS + kk) * 32 + lane];
            UNROLL
            for (int n = 0; n < NST; n += 2) {
                uint bf[4], bv[4];
                ldmatrix4(bf, ks + (k_row + n * 8) * LDH + kk * 16 + k_col);
                ldmatrix4(bv, vs + (k_row + n * 8) * LDH + kk * 16 + k_col);
                mma16816(s[n], qv.x, qv.y, qv.z, qv.w, bf[0], bf[1]);
                mma16816(s[n + 1], qv.x, qv.y, qv.z, qv.w, bf[2], bf[3]);
#else
        UNROLL
        for (int n = 0; n < NST; n += 2) {
            UNROLL
            for (int kk = 0; kk < NKS; kk++) {
                uint bf[4], bv[4];
                ldmatrix4(bf, ks + (k_row + n * 8) * LDH + kk * 16 + k_col);
                ldmatrix4(bv, vs + (k_row + n * 8) * LDH + kk * 16 + k_col);
                mma16816(s[n], qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3], bf[0], bf[1]);
                mma16816(s[n + 1], qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3], bf[2], bf[3]);
#endif
                mma16816(nv[n], ONES16X2, ONES16X2, ONES16X2, ONES16X2, bv[0] & 0x7fff7fffu,
                         bv[1] & 0x7fff7fffu);
                mma16816(nv[n + 1], ONES16X2, ONES16X2, ONES16X2, ONES16X2, bv[2] & 0x7fff7fffu,
                         bv[3] & 0x7fff7fffu);
            }
        }

        /* scale, slot mask, score logits, online softmax on the fragments */
        float mx_a = -INFINITY, mx_b = -INFINITY;
        UNROLL
        for (int n = 0; n < NST; n++) {
            UNROLL
            for (int i = 0; i < 4; i++) {
                const int kl = n * 8 + 2 * ft + (i & 1);
                const int valid = (okm[kl / 32] >> (kl % 32)) & 1u;
                const float lv = native_log2(nv[n][i & 1]); /* lg2.approx: ~2 ulp */
                const float x = valid ? s[n][i] * scale_log2 : -INFINITY;
                s[n][i] = x;
                const int yr = i < 2 ? fg : fg + 8; /* staged only where it is stored */
                if (yr < nyr)
                    ysw[yr * YLD + kl] = valid ? x + lv : -INFINITY;
                if (i < 2)
                    mx_a = fmax(mx_a, x);
                else
                    mx_b = fmax(mx_b, x);
            }
        }
        clkv_warp_sync();
        for (int e = lane; e < nyr * KW; e += 32) {
            const int r = e / KW, kl = e % KW;
            if (j0 + kl < kend) {
                if (keep_y) /* the one-launch step: kept in L2 for its scorers */
                    lf_store_keep(yrow + (long)r * S + j0 + kl, ysw[r * YLD + kl], ypol);
                else
                    yrow[(long)r * S + j0 + kl] = ysw[r * YLD + kl];
            }
        }
        frag_softmax(s, acc, mx_a, mx_b, &m_a, &m_b, &l_a, &l_b);
        frag_pv(acc, s, vs, v_row, v_col);
        barrier(CLK_LOCAL_MEM_FENCE); /* the stage may be refilled */
    }
    CLKV_CP_ASYNC_WAIT(0); /* no copy may land in the combine area */

    /* Combine the NWK warps of each row block, then this split's partial state per row. */
    __local float *cmb = (__local float *)smem; /* [NWK][QT][HEAD_DIM] */
    warps_to_local(wm, wl, cmb, acc, m_a, m_b, l_a, l_b, wq * 16 + fg, wk, ft);
    for (int e = lid; e < QT * (HEAD_DIM / 4); e += WG_SIZE) {
        const int r = e / (HEAD_DIM / 4), c4 = e % (HEAD_DIM / 4);
        const int R = r0 + r;
        if (R >= rows)
            continue;
        float ms, l;
        float4 x = local_row_state(wm, wl, cmb, r, c4, &ms, &l);
        const long idx = ((long)b * Hq + kvh * G + R) * num_splits + split;
        vstore4(x, 0, ws + idx * HEAD_DIM + c4 * 4);
        if (c4 == 0) {
            ws[ml_off + idx * 2] = ms;
            ws[ml_off + idx * 2 + 1] = l;
        }
    }
}

/* Two-kernel step: this kernel, then longflow_finish.cl (CLKV_LONGFLOW_FUSED=0). */
__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void
longflow_partial_mma(LF_ATT_PARAMS) {
    __local uint4 smem[NSTG * 2 * TILE16];
    __local int spos[NSTG][KT];
    __local float wm[NWK][QT], wl[NWK][QT];
    __local uint4 new_k[CH], new_v[CH];
    __local float ysm[4 * 16 * YLD];
    __local uint4 qsm[Q_LOCAL ? NWQ * NKS * 32 : 1]; /* [row block][k-step][lane] */
    lf_attend(LF_ATT_ARGS, (int)get_group_id(0), (int)get_group_id(1), (int)get_group_id(2), smem,
              spos, wm, wl, new_k, new_v, ysm, qsm, 0);
}

/* The whole step in one launch (longflow_step.cl): attention work-groups run lf_attend,
 * the last n_score work-groups score. */
__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void
longflow_step_mma(LF_STEP_PARAMS) {
    KARGS_UNPACK(LF_STEP)
    __local uint4 smem[NSTG * 2 * TILE16];
    __local int spos[NSTG][KT];
    __local float wm[NWK][QT], wl[NWK][QT];
    __local uint4 new_k[CH], new_v[CH];
    __local float ysm[4 * 16 * YLD];
    __local uint4 qsm[Q_LOCAL ? NWQ * NKS * 32 : 1]; /* [row block][k-step][lane] */
    __local int flag;
    const int gid = (int)get_group_id(0);
    if (gid >= n_attn) { /* a scorer; its local arrays live in the (unused) tile stages */
        lf_step_score(gid, pos, victim, next_pos, ws, ctr, scores, vout, P, (__local float *)smem,
                      &flag);
        return;
    }
    const int per_bh = n_qtiles * num_splits;
    const int bh = gid / per_bh, split = (gid / n_qtiles) % num_splits, qtile = gid % n_qtiles;
    lf_attend(LF_ATT_ARGS, qtile, split, bh, smem, spos, wm, wl, new_k, new_v, ysm, qsm, 1);
    lf_step_arrive(bh, ws, ctr, o, lse, P, &flag);
}
#endif /* LONGFLOW */
