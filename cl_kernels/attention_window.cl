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

#define D4 (HEAD_DIM / 4)     /* float4 columns of a row */
#define LD4 (D4 + 1)          /* padded row of the Q and K tiles (float4 units) */
#define S_RT (WG_SIZE / S_CT) /* lanes along the rows of a score tile */
#define KPT (KT / S_CT)       /* keys per lane in the score tile */
#define RPT1 (QT / S_RT)      /* rows per lane in the score tile */
#define O_RT (WG_SIZE / O_CT) /* lanes along the rows of the output tile */
#define CPT (D4 / O_CT)       /* float4 columns per lane in the output tile */
#define RPT3 (QT / O_RT)      /* rows per lane in the output tile */

#if WG_SIZE % S_CT != 0 || KT % S_CT != 0 || QT % S_RT != 0 || WG_SIZE % O_CT != 0 ||              \
    D4 % O_CT != 0 || QT % O_RT != 0 || QT > WG_SIZE
#error "attention_window: inconsistent tile parameters"
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

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void attention_window_partial(
    __global const Q_T *q, long q_off, long q_sb, long q_sh, long q_st, __global const KV_T *k,
    long k_off, long k_sb, long k_sh, long k_sl, __global const KV_T *v, long v_off, long v_sb,
    long v_sh, long v_sl, __global const int *lengths, long len_off, int has_lengths, int max_len,
    int T, int Hq, int G, int n_qtiles, int chunk, int num_splits, float scale_log2, int direct,
    __global O_T *o, long o_off, long o_sb, long o_sh, long o_st, __global float *lse, long lse_off,
    long lse_sb, long lse_sh, long lse_st, int has_lse, __global float *part_acc, long ml_off) {
    __local float4 qs[QT][LD4];
    __local float4 ks[KT][LD4];
    __local float4 vs[KT][D4];
    __local float ss[QT][KT + 1];
    __local int row_pos[QT];
    __local float row_m[QT], row_l[QT], row_alpha[QT];

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
        row_m[lid] = -INFINITY;
        row_l[lid] = 0.0f;
    }
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

    const int kbeg = split * chunk;
    const int kend = min(kbeg + chunk, last_pos + 1);

    /* Lane coordinates of the score and output tiles. */
    const int sx = lid % S_CT, sy = lid / S_CT;
    const int ox = lid % O_CT, oy = lid / O_CT;
    float4 acc[RPT3][CPT];
    for (int a = 0; a < RPT3; a++)
        for (int c = 0; c < CPT; c++)
            acc[a][c] = (float4)(0.0f);

    const long kb = k_off + (long)b * k_sb + (long)kvh * k_sh;
    const long vb = v_off + (long)b * v_sb + (long)kvh * v_sh;
    for (int j0 = kbeg; j0 < kend; j0 += KT) {
        barrier(CLK_LOCAL_MEM_FENCE); /* previous tile fully consumed (and Q tile stored) */
        for (int e = lid; e < KT * D4; e += WG_SIZE) {
            const int j = e / D4, c = e % D4;
            float4 kx = (float4)(0.0f), vx = (float4)(0.0f);
            if (j0 + j < kend) { /* rows past the range stay 0: 0 * garbage never occurs */
                kx = LOAD4(KV_DTYPE)(k, kb + (long)(j0 + j) * k_sl + c * 4);
                vx = LOAD4(KV_DTYPE)(v, vb + (long)(j0 + j) * v_sl + c * 4);
            }
            ks[j][c] = kx;
            vs[j][c] = vx;
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        /* Scores with the causal mask. */
        {
            float s[RPT1][KPT];
            for (int a = 0; a < RPT1; a++)
                for (int u = 0; u < KPT; u++)
                    s[a][u] = 0.0f;
            for (int c = 0; c < D4; c++) {
                float4 kx[KPT];
                for (int u = 0; u < KPT; u++)
                    kx[u] = ks[sx + u * S_CT][c];
                for (int a = 0; a < RPT1; a++) {
                    const float4 qx = qs[sy + a * S_RT][c];
                    for (int u = 0; u < KPT; u++)
                        s[a][u] += dot4(qx, kx[u]);
                }
            }
            for (int a = 0; a < RPT1; a++) {
                const int r = sy + a * S_RT;
                const int pos = row_pos[r];
                for (int u = 0; u < KPT; u++) {
                    const int j = j0 + sx + u * S_CT;
                    ss[r][sx + u * S_CT] = (j < kend && j <= pos) ? s[a][u] : -INFINITY;
                }
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        /* Online softmax, one lane per row: scores become weights. */
        if (lid < QT) {
            const float m_old = row_m[lid];
            float mx = m_old;
            for (int j = 0; j < KT; j++)
                mx = fmax(mx, ss[lid][j]);
            float alpha = 1.0f, sum = 0.0f;
            if (mx != -INFINITY) {
                alpha = m_old == -INFINITY ? 0.0f : exp2(m_old - mx);
                for (int j = 0; j < KT; j++) {
                    const float p = exp2(ss[lid][j] - mx); /* exp2(-inf) = 0 */
                    ss[lid][j] = p;
                    sum += p;
                }
            } else {
                for (int j = 0; j < KT; j++)
                    ss[lid][j] = 0.0f;
            }
            row_m[lid] = mx;
            row_l[lid] = row_l[lid] * alpha + sum;
            row_alpha[lid] = alpha;
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        /* acc = alpha * acc + P V */
        for (int a = 0; a < RPT3; a++) {
            const float al = row_alpha[oy + a * O_RT];
            for (int c = 0; c < CPT; c++)
                acc[a][c] *= al;
        }
        for (int j = 0; j < KT; j++) {
            float4 vx[CPT];
            for (int c = 0; c < CPT; c++)
                vx[c] = vs[j][ox + c * O_CT];
            for (int a = 0; a < RPT3; a++) {
                const float p = ss[oy + a * O_RT][j];
                for (int c = 0; c < CPT; c++)
                    acc[a][c] = fma((float4)(p), vx[c], acc[a][c]);
            }
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    /* Results: final (one split) or the split's partial state. */
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
            for (int c = 0; c < CPT; c++)
                store4(o, orow + (ox + c * O_CT) * 4, acc[a][c] * inv);
        } else {
            const long idx = (((long)b * Hq + h) * T + t) * num_splits + split;
            for (int c = 0; c < CPT; c++)
                vstore4(acc[a][c], 0, part_acc + idx * HEAD_DIM + (ox + c * O_CT) * 4);
        }
    }
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
 * One lane per (row, float4 column); rows are (b, h, t) in row-major order. */
__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void
attention_window_merge(__global const float *part_acc, long ml_off, int num_splits, int Hq, int T,
                       long n_rows, __global O_T *o, long o_off, long o_sb, long o_sh, long o_st,
                       __global float *lse, long lse_off, long lse_sb, long lse_sh, long lse_st,
                       int has_lse) {
    const long gid = (long)get_global_id(0);
    const long row = gid / D4;
    const int c = (int)(gid % D4);
    if (row >= n_rows)
        return;
    const int t = (int)(row % T);
    const int h = (int)((row / T) % Hq);
    const int b = (int)(row / ((long)T * Hq));
    __global const float *ml = part_acc + ml_off + row * num_splits * 2;
    float mx = -INFINITY;
    for (int s = 0; s < num_splits; s++)
        mx = fmax(mx, ml[s * 2]);
    float sum = 0.0f;
    float4 a = (float4)(0.0f);
    if (mx != -INFINITY) {
        for (int s = 0; s < num_splits; s++) {
            const float ms = ml[s * 2];
            if (ms == -INFINITY)
                continue;
            const float w = exp2(ms - mx);
            sum = fma(ml[s * 2 + 1], w, sum);
            a = fma((float4)(w), vload4(c, part_acc + (row * num_splits + s) * HEAD_DIM), a);
        }
    }
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    store4(o, o_off + (long)b * o_sb + (long)h * o_sh + (long)t * o_st + c * 4, a * inv);
    if (has_lse && c == 0)
        lse[lse_off + (long)b * lse_sb + (long)h * lse_sh + (long)t * lse_st] =
            sum > 0.0f ? (mx + log2(sum)) * CLKV_LN2 : -INFINITY;
}
