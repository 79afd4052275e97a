/* Window-attention scorers (SPEC §2.1, §2.2): DropKV, SnapKV, AnDPro, CriticalKV (pbar
 * and ||v||_1), H2O cumulative attention, DiffKV significance. One kernel, specialised
 * by -D METHOD.
 *
 * Work decomposition: a work-group owns a tile of NRG * KPR keys of one (b, KV head).
 * A row-group of TPR lanes holds KPR key rows (and value rows) in registers, each lane
 * EPL elements of a row. The G*W query rows of the KV head (row r = g*W + t: head
 * kvh*G + g, window row t) are staged in local memory QT rows at a time (pre-scaled by
 * scale*log2(e)), with the window outputs a (DropKV, AnDPro) and LSE; for every staged
 * row and held key, the logit is recomputed, p = exp(z - LSE), and the method's quantity
 * accumulated. Rows go in blocks of TPR: a transposed butterfly over the row-group's lanes
 * leaves each lane with the full dot products of one row of the block, so exchanges and
 * exp() are not repeated on every lane (DiffKV, whose group max needs per-group sums,
 * goes row by row). K and V are read once.
 *
 * -D set:
 *   METHOD      0 DropKV, 1 SnapKV, 2 AnDPro, 3 CriticalKV, 4 H2O, 5 DiffKV
 *   Q_DTYPE, KV_DTYPE, A_DTYPE   dtype codes (A_DTYPE only with NEED_A)
 *   HEAD_DIM    64 | 128 | 256
 *   WG_SIZE, TPR (lanes per key row), KPR (keys per row-group), QT (rows per stage)
 *   NEED_V, NEED_A, ROUND_P (DropKV: p~ rounded to KV_DTYPE in the weight),
 *   WRITE_VNORM (CriticalKV without W_O: ||v_j||_1), VEC_ALIGNED (16-byte row loads)
 * The raw (unpooled) score of token j goes to raw[(b*Hkv + kvh)*row_len + j] for j < n.
 */
#define M_DROPKV 0
#define M_SNAPKV 1
#define M_ANDPRO 2
#define M_CRITICALKV 3
#define M_H2O 4
#define M_DIFFKV 5

#define Q_T CLKV_STORAGE(Q_DTYPE)
#define KV_T CLKV_STORAGE(KV_DTYPE)
#if NEED_A
#define A_T CLKV_STORAGE(A_DTYPE)
#else
#define A_T float
#endif

#define EPL (HEAD_DIM / TPR)
#define NRG (WG_SIZE / TPR)
#define TILE_KEYS (NRG * KPR)

#if TPR > 1 && VEC_ALIGNED
/* Lane ln owns 16-byte chunks c*TPR + ln of the row: each load instruction of a
 * row-group covers a contiguous span. */
#define VW CLKV_VEC16(KV_DTYPE)
#define NCH (EPL / VW)
#define ELEM(c, j, ln) (((c)*TPR + (ln)) * VW + (j))
#else
/* Element loads; lanes interleave by element so consecutive lanes read consecutive
 * elements (TPR = 1: one lane holds the whole row). */
#define VW 1
#define NCH EPL
#define ELEM(c, j, ln) ((c)*TPR + (ln))
#endif

#if TPR > 1
#define UNROLL_LOOP _Pragma("unroll")
#else
#define UNROLL_LOOP
#endif

#if QT % TPR != 0
#error "QT must be a multiple of TPR (row blocks of TPR rows)"
#endif

#if TPR > 1 && !defined(CLKV_NVIDIA_PTX)
#define ROW_SUM_LOCAL 1
#else
#define ROW_SUM_LOCAL 0
#endif

/* Sum over the TPR lanes of a row-group; every lane gets the same value. Called by all
 * work-items of the work-group uniformly (the portable path uses barriers). */
inline float row_sum(float x, __local float *buf, int lid, int ln) {
#if TPR == 1
    (void)buf;
    (void)lid;
    (void)ln;
    return x;
#elif !ROW_SUM_LOCAL
    (void)buf;
    (void)lid;
    (void)ln;
    UNROLL_LOOP
    for (int o = TPR / 2; o > 0; o >>= 1)
        x += clkv_shfl_xor(x, o);
    return x;
#else
    barrier(CLK_LOCAL_MEM_FENCE);
    buf[lid] = x;
    barrier(CLK_LOCAL_MEM_FENCE);
    float s = 0.0f;
    UNROLL_LOOP
    for (int i = 0; i < TPR; i++)
        s += buf[lid - ln + i];
    return s;
#endif
}

/* x of lane (ln ^ o) of the same row-group (o < TPR); called uniformly. */
__attribute__((always_inline)) inline float xor_lane(float x, int o, __local float *buf, int lid) {
#if TPR == 1
    (void)o;
    (void)buf;
    (void)lid;
    return x;
#elif !ROW_SUM_LOCAL
    (void)buf;
    (void)lid;
    return clkv_shfl_xor(x, o);
#else
    barrier(CLK_LOCAL_MEM_FENCE);
    buf[lid] = x;
    barrier(CLK_LOCAL_MEM_FENCE);
    return buf[lid ^ o];
#endif
}

/* v[i] (i < TPR) is this lane's partial sum for row i of a block; returns the sum over
 * the row-group's lanes for row ln. Butterfly: at half-size h the lane keeps the half of
 * its rows selected by bit h of ln and sends the other half to lane ln ^ h. */
__attribute__((always_inline)) inline float transpose_sum(float *v, __local float *buf, int lid,
                                                          int ln) {
    UNROLL_LOOP
    for (int h = TPR / 2; h >= 1; h >>= 1) {
        /* u = 1 keeps the upper half. The halves are blended arithmetically (exact for
         * u in {0, 1}) rather than selected, so compilers cannot turn the choice into a
         * dynamically indexed load that keeps v out of registers. */
        const float u = (ln & h) != 0 ? 1.0f : 0.0f;
        UNROLL_LOOP
        for (int i = 0; i < h; i++) {
            const float lo = v[i], hi = v[i + h];
            const float keep = fma(u, hi, fma(-u, lo, lo));
            const float send = fma(u, lo, fma(-u, hi, hi));
            v[i] = keep + xor_lane(send, h, buf, lid);
        }
    }
    return v[0];
}

/* One key row into registers as f32 (elements ELEM(c, j, ln) of the row). */
inline void load_row(__global const KV_T *p, long row, int ln, float *out) {
#if VW > 1
    UNROLL_LOOP
    for (int c = 0; c < NCH; c++) {
        const uint4 raw = clkv_load_raw_aligned(p, (row + ELEM(c, 0, ln)) * (long)sizeof(KV_T));
        UNROLL_LOOP
        for (int j = 0; j < VW; j++)
            out[c * VW + j] = CLKV_RAW_ELEM(KV_DTYPE)(raw, j);
    }
#else
    UNROLL_LOOP
    for (int c = 0; c < NCH; c++)
        out[c] = CLKV_LOAD(KV_DTYPE)(p, row + ELEM(c, 0, ln));
#endif
}

#if ROUND_P
inline float round_to_kv(float x) {
#if KV_DTYPE == CLKV_DT_BF16
    return clkv_bf16_to_f32(clkv_f32_to_bf16(x));
#elif KV_DTYPE == CLKV_DT_F16
    ushort h; /* 16-bit storage only: no half variables without cl_khr_fp16 */
    vstore_half_rte(x, 0, (__private half *)&h);
    return vload_half(0, (const __private half *)&h);
#else
    return x;
#endif
}
#endif

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void score_window(
    __global const Q_T *q, long q_off, long q_sb, long q_sh, long q_st, __global const KV_T *k,
    long k_off, long k_sb, long k_sh, long k_sl, __global const KV_T *v, long v_off, long v_sb,
    long v_sh, long v_sl, __global const float *lse, long lse_off, long lse_sb, long lse_sh,
    long lse_st, __global const A_T *a, long a_off, long a_sb, long a_sh, long a_st,
    __global const int *lengths, long len_off, int has_len, int max_len, int Hkv, int G, int W,
    float scale_log2, float eps, __global float *raw, long raw_off, long vnorm_off, long row_len) {
    const int lid = (int)get_local_id(0);
    const int rg = lid / TPR, ln = lid % TPR;
    const int tile0 = (int)get_group_id(0) * TILE_KEYS;
    const int kvh = (int)get_group_id(1);
    const int b = (int)get_group_id(2);
    int n = max_len;
    if (has_len)
        n = clamp(lengths[len_off + b], 0, max_len);
    if (tile0 >= n)
        return; /* uniform over the work-group */

    __local float q_loc[QT][HEAD_DIM];
#if NEED_A
    __local float a_loc[QT][HEAD_DIM];
#endif
    __local float lse_loc[QT];
    __local int pos_loc[QT];
#if ROW_SUM_LOCAL
    __local float rs_buf[WG_SIZE];
#else
    __local float *rs_buf = 0;
#endif

    int jk[KPR];
    int valid[KPR];
    float kx[KPR][EPL];
#if NEED_V
    float vx[KPR][EPL];
#endif
    const long kb = k_off + (long)b * k_sb + (long)kvh * k_sh;
    const long vb = v_off + (long)b * v_sb + (long)kvh * v_sh;
    UNROLL_LOOP
    for (int kk = 0; kk < KPR; kk++) {
        jk[kk] = tile0 + kk * NRG + rg;
        valid[kk] = jk[kk] < n;
        const int jj = valid[kk] ? jk[kk] : tile0; /* in bounds, uniform loads */
        load_row(k, kb + (long)jj * k_sl, ln, kx[kk]);
#if NEED_V
        load_row(v, vb + (long)jj * v_sl, ln, vx[kk]);
#endif
    }

    float acc[KPR];
#if METHOD == M_DIFFKV
    float best[KPR];
    int cur_g = 0;
#endif
    UNROLL_LOOP
    for (int kk = 0; kk < KPR; kk++) {
        acc[kk] = 0.0f;
#if METHOD == M_DIFFKV
        best[kk] = 0.0f;
#endif
    }

    const int rows = G * W;
    for (int r0 = 0; r0 < rows; r0 += QT) {
        /* Skip a stage whose rows all precede the tile's first key (causal). */
        const int r1 = min(r0 + QT, rows) - 1;
        const int tmax = (r1 / W != r0 / W) ? W - 1 : r1 % W;
        if (n - W + tmax < tile0)
            continue;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int i = lid; i < QT * HEAD_DIM; i += WG_SIZE) {
            const int r = i / HEAD_DIM, e = i % HEAD_DIM, rr = r0 + r;
            float qv = 0.0f, av = 0.0f;
            if (rr < rows) {
                const int h = kvh * G + rr / W, t = rr % W;
                qv = CLKV_LOAD(Q_DTYPE)(q, q_off + (long)b * q_sb + (long)h * q_sh +
                                               (long)t * q_st + e) *
                     scale_log2;
#if NEED_A
                av = CLKV_LOAD(A_DTYPE)(a, a_off + (long)b * a_sb + (long)h * a_sh +
                                               (long)t * a_st + e);
#endif
            }
            q_loc[r][e] = qv;
#if NEED_A
            a_loc[r][e] = av;
#else
            (void)av;
#endif
        }
        for (int i = lid; i < QT; i += WG_SIZE) {
            const int rr = r0 + i;
            float l = -INFINITY;
            int pos = -1;
            if (rr < rows) {
                const int h = kvh * G + rr / W, t = rr % W;
                l = lse[lse_off + (long)b * lse_sb + (long)h * lse_sh + (long)t * lse_st] *
                    CLKV_LOG2E;
                pos = n - W + t;
            }
            lse_loc[i] = l;
            pos_loc[i] = pos;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        const int nr = min(QT, rows - r0);
#if METHOD == M_DIFFKV
        /* DiffKV takes a max over the group of per-group sums: one row at a time, every
         * lane holding the full logit. */
        for (int r = 0; r < nr; r++) {
            const int pos = pos_loc[r];
            const float l2 = lse_loc[r];
            const int g = (r0 + r) / W;
            if (g != cur_g) {
                UNROLL_LOOP
                for (int kk = 0; kk < KPR; kk++) {
                    best[kk] = fmax(best[kk], acc[kk]);
                    acc[kk] = 0.0f;
                }
                cur_g = g;
            }
            UNROLL_LOOP
            for (int kk = 0; kk < KPR; kk++) {
                float d = 0.0f;
                UNROLL_LOOP
                for (int c = 0; c < NCH; c++)
                    UNROLL_LOOP
                for (int j = 0; j < VW; j++)
                    d = fma(q_loc[r][ELEM(c, j, ln)], kx[kk][c * VW + j], d);
                d = row_sum(d, rs_buf, lid, ln);
                acc[kk] += (valid[kk] && jk[kk] <= pos && l2 > -INFINITY) ? exp2(d - l2) : 0.0f;
            }
        }
#else
        /* Blocks of TPR rows: each lane forms the partial dot products of all TPR rows,
         * a transposed butterfly leaves lane ln with the full logit of row rb + ln (TPR - 1
         * exchanges for TPR rows instead of log2(TPR) per row), and each lane handles its
         * own row's p and method term. Stage rows past nr are zero with pos = -1 (p = 0). */
        for (int rb = 0; rb < nr; rb += TPR) {
            const int rl = rb + ln;
            const int pos = pos_loc[rl];
            const float l2 = lse_loc[rl];
            UNROLL_LOOP
            for (int kk = 0; kk < KPR; kk++) {
                float part[TPR];
                UNROLL_LOOP
                for (int i = 0; i < TPR; i++) {
                    float d = 0.0f;
                    UNROLL_LOOP
                    for (int c = 0; c < NCH; c++)
                        UNROLL_LOOP
                    for (int j = 0; j < VW; j++)
                        d = fma(q_loc[rb + i][ELEM(c, j, ln)], kx[kk][c * VW + j], d);
                    part[i] = d;
                }
                const float z = transpose_sum(part, rs_buf, lid, ln);
                const float p =
                    (valid[kk] && jk[kk] <= pos && l2 > -INFINITY) ? exp2(z - l2) : 0.0f;
#if METHOD == M_DROPKV
                UNROLL_LOOP
                for (int i = 0; i < TPR; i++) {
                    float dd = 0.0f;
                    UNROLL_LOOP
                    for (int c = 0; c < NCH; c++)
                        UNROLL_LOOP
                    for (int j = 0; j < VW; j++) {
                        const float df = a_loc[rb + i][ELEM(c, j, ln)] - vx[kk][c * VW + j];
                        dd = fma(df, df, dd);
                    }
                    part[i] = dd;
                }
                const float d2 = transpose_sum(part, rs_buf, lid, ln);
                float pt = clamp(p, 0.0f, 1.0f);
#if ROUND_P
                pt = round_to_kv(pt);
#endif
                const float w = pt / (1.0f - pt + eps);
                acc[kk] = fma(w * w, d2, acc[kk]);
#elif METHOD == M_ANDPRO
                UNROLL_LOOP
                for (int i = 0; i < TPR; i++) {
                    float dv = 0.0f;
                    UNROLL_LOOP
                    for (int c = 0; c < NCH; c++)
                        UNROLL_LOOP
                    for (int j = 0; j < VW; j++)
                        dv = fma(a_loc[rb + i][ELEM(c, j, ln)], vx[kk][c * VW + j], dv);
                    part[i] = dv;
                }
                acc[kk] = fma(p, transpose_sum(part, rs_buf, lid, ln), acc[kk]);
#else
                acc[kk] += p;
#endif
            }
        }
#endif
    }

#if METHOD != M_DIFFKV
    /* each lane summed its own rows: add the lanes up */
    UNROLL_LOOP
    for (int kk = 0; kk < KPR; kk++)
        acc[kk] = row_sum(acc[kk], rs_buf, lid, ln);
#endif

#if WRITE_VNORM
    float l1[KPR];
    UNROLL_LOOP
    for (int kk = 0; kk < KPR; kk++) {
        float s = 0.0f;
        UNROLL_LOOP
        for (int e = 0; e < EPL; e++)
            s += fabs(vx[kk][e]);
        l1[kk] = row_sum(s, rs_buf, lid, ln);
    }
#endif
    if (ln != 0)
        return;
    __global float *out = raw + raw_off + ((long)b * Hkv + kvh) * row_len;
    UNROLL_LOOP
    for (int kk = 0; kk < KPR; kk++) {
        if (!valid[kk])
            continue;
#if METHOD == M_DIFFKV
        const float s = fmax(best[kk], acc[kk]) / (float)min(W, n - jk[kk]);
#elif METHOD == M_SNAPKV || METHOD == M_CRITICALKV
        const float s = acc[kk] / ((float)G * (float)W);
#else
        const float s = acc[kk] / (float)G;
#endif
        out[jk[kk]] = s;
#if WRITE_VNORM
        out[vnorm_off + jk[kk]] = l1[kk];
#endif
    }
}
