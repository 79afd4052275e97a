/* H2O / MiniKV cumulative attention (SPEC §2.2, pass 2 of the MiniKV prefill) on the
 * tensor cores, for long query ranges: A_cumul[j] = (1/G) sum over the G heads of a KV
 * head and the T query rows t (position pos = n - T + t) of p_j(t) = exp(z_j(t) - LSE(t)),
 * causal (pairs with j > pos contribute 0). The NVIDIA companion of score_window_mma.cl
 * (whose work-groups restage every query row per key tile): here the key tile stays in
 * registers and the query rows stream through local memory.
 *
 * Work decomposition: a work-group (4 warps) owns KT = 4 * KW keys [k0, k0 + KT) of one
 * (b, KV head); warp w owns keys [k0 + w KW, k0 + w KW + KW). The tile's K rows are staged
 * once in local memory and each warp keeps its keys as mma B fragments in registers
 * (ldmatrix, loaded once). The query rows of the KV head are ordered position-major,
 * row R = t * G + g (head kvh * G + g, query row t), so the rows that can see the tile
 * form one range starting at R = (k0 - (n - T)) * G; they stream through local memory in
 * stages of RT rows (cp.async, NSTG stages in flight) together with their LSE. Per 16-row
 * block and 8-key n-tile: S = Q K^T (m16n8k16, f32 accumulation), p = exp2(S * scale *
 * log2(e) - LSE * log2(e)) on the C fragments (mask j <= pos only where a block meets the
 * diagonal; padded rows and rows with LSE = -inf get p = 0), summed into per-lane column
 * sums; at the end a butterfly over the 8 row lanes gives each key's sum.
 *
 * Balance of the causal triangle: the row range [0, G * T) is cut into NSPLIT pieces of
 * `rows_per_split` rows (host choice, from the grid size); unit (tile, piece) sums the
 * rows of its piece the tile can see. With NSPLIT = 1 the work-group writes the scores
 * (times 1/G); otherwise it writes its partial sums (zeros for a piece the tile cannot
 * see) to part[b, kvh, piece, j] and score_h2o_reduce adds the pieces. Units are ordered
 * tile-major (tile 0, the longest, first).
 *
 * -D set:
 *   Q_DTYPE == KV_DTYPE (f16 | bf16), HEAD_DIM 64 | 128 | 256
 *   KW          keys per warp: 16 | 32 (KT = 4 KW keys per work-group)
 *   RT          query rows per stage: 32 | 64 | 128
 *   NSTG        stages in flight (2 | 3)
 *   Q_ALIGNED   1: q rows 16-byte aligned (cp.async); 0: plain loads into the same stages
 *   KV_ALIGNED  1: K rows 16-byte aligned (cp.async); 0: plain loads
 */
#define WG_SIZE 128
#define KT (4 * KW)
#define LDH (HEAD_DIM + 8) /* padded 16-bit row of a local tile (conflict-free ldmatrix) */
#define ROW16 (LDH / 8)    /* padded row in 16-byte units */
#define CH (HEAD_DIM / 8)  /* 16-byte chunks of a row */
#define NKS (HEAD_DIM / 16)
#define NNT (KW / 8) /* 8-key n-tiles per warp */
#define STAGE16 (RT * ROW16)
#define SMEM16 ((KT > NSTG * RT ? KT : NSTG * RT) * ROW16)
#define UNROLL _Pragma("unroll")

#if (HEAD_DIM != 64 && HEAD_DIM != 128 && HEAD_DIM != 256) || (KW != 16 && KW != 32) ||            \
    RT % 16 != 0 || RT > WG_SIZE || NSTG < 2
#error "score_h2o_mma: unsupported parameters"
#endif
#if Q_DTYPE != KV_DTYPE || KV_DTYPE == CLKV_DT_F32 || !defined(CLKV_NVIDIA_PTX)
#error "score_h2o_mma needs NVIDIA PTX and f16 / bf16 q and K of one dtype"
#endif

#define Q_T CLKV_STORAGE(Q_DTYPE)
#define KV_T CLKV_STORAGE(KV_DTYPE)
#define MMA CLKV_MMA(KV_DTYPE)

/* Stage of the row pipeline: rows r0 .. r0 + RT - 1 of the KV head; rows at or past r_hi
 * copy row r_lo instead (valid memory at q_lo / lse_lo; their LSE is ignored: p = 0).
 * Work-item lid copies 16-byte chunk lid % CH of rows lid / CH + m * RSTEP: the (t, g) of
 * its first row from one division, then stepped by RSTEP rows = dq query rows + dr heads. */
#define RSTEP (WG_SIZE / CH)
inline void issue_rows(__local uint4 *qs, __local float *ls, __global const Q_T *q, long qb,
                       long q_sh, long q_st, long q_lo, __global const float *lse, long lb,
                       long lse_sh, long lse_st, long lse_lo, int G, int dq, int dr, int r0,
                       int r_hi, int lid) {
    const int c = lid % CH;
    int R = r0 + lid / CH;
    int t = R / G, g = R - t * G;
    _Pragma("unroll 1") for (int m = 0; m < RT / RSTEP; m++) { /* registers */
        const long off = R < r_hi ? (long)g * q_sh + (long)t * q_st : q_lo;
        __global const ushort *src = (__global const ushort *)q + qb + off + c * 8;
        __local uint4 *dst = qs + (lid / CH + m * RSTEP) * ROW16 + c;
#if Q_ALIGNED
        clkv_cp_async16(dst, (__global const uchar *)src);
#else
        *dst = clkv_load_raw_u16(src, 0);
#endif
        R += RSTEP;
        t += dq;
        g += dr;
        if (g >= G) {
            g -= G;
            t++;
        }
    }
    if (lid < RT) {
        const int Rl = r0 + lid;
        const int tl = Rl / G, gl = Rl - tl * G;
        const long off = Rl < r_hi ? (long)gl * lse_sh + (long)tl * lse_st : lse_lo;
        clkv_cp_async4((__local int *)(ls + lid), (__global const int *)(lse + lb + off));
    }
}

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void
score_h2o_mma(__global const Q_T *q, long q_off, long q_sb, long q_sh, long q_st,
              __global const KV_T *k, long k_off, long k_sb, long k_sh, long k_sl,
              __global const float *lse, long lse_off, long lse_sb, long lse_sh, long lse_st,
              __global const int *lengths, long len_off, int has_len, int max_len, int Hkv, int G,
              int T, float scale_log2, int nsplit, int rows_per_split, __global float *ws,
              long raw_off, long part_off, long row_len) {
    __local uint4 smem[SMEM16];
    __local float lse_s[NSTG][RT];

    const int lid = (int)get_local_id(0);
    const int lane = lid % 32, w = lid / 32;
    const int fg = lane >> 2, ft = lane & 3;
    const int unit = (int)get_group_id(0);
    const int tile = unit / nsplit, piece = unit % nsplit;
    const int kvh = (int)get_group_id(1), b = (int)get_group_id(2);
    int n = max_len;
    if (has_len)
        n = clamp(lengths[len_off + b], 0, max_len);
    const int k0 = tile * KT;
    if (k0 >= n)
        return; /* uniform over the work-group */
    const int kend = min(k0 + KT, n);
    const int rows = G * T;
    const int pos0 = n - T; /* position of query row t = 0 */
    int r_lo = max(k0 - pos0, 0) * G, r_hi = rows;
    __global float *out;
    if (nsplit > 1) {
        r_lo = max(r_lo, piece * rows_per_split);
        r_hi = min(rows, (piece + 1) * rows_per_split);
        out = ws + part_off + (((long)b * Hkv + kvh) * nsplit + piece) * row_len;
        if (r_lo >= r_hi) { /* this piece precedes the tile's keys: a zero partial sum */
            if (lid < kend - k0)
                out[k0 + lid] = 0.0f;
            return;
        }
    } else {
        out = ws + raw_off + ((long)b * Hkv + kvh) * row_len;
    }

    /* K tile -> local memory -> B fragments of this warp's keys (rows past n repeat n - 1) */
    const long kb = k_off + (long)b * k_sb + (long)kvh * k_sh;
    for (int i = lid; i < KT * CH; i += WG_SIZE) {
        const int r = i / CH, c = i % CH;
        const int j = min(k0 + r, n - 1);
        __global const ushort *src = (__global const ushort *)k + kb + (long)j * k_sl + c * 8;
#if KV_ALIGNED
        clkv_cp_async16(smem + r * ROW16 + c, (__global const uchar *)src);
#else
        smem[r * ROW16 + c] = clkv_load_raw_u16(src, 0);
#endif
    }
    clkv_cp_async_commit();
    CLKV_CP_ASYNC_WAIT(0);
    barrier(CLK_LOCAL_MEM_FENCE);
    const int mi = lane >> 3, mr = lane & 7;
    uint kf[NNT / 2][NKS][4]; /* [0..1]: b0 b1 of n-tile 2 np, [2..3]: of n-tile 2 np + 1 */
    {
        __local const ushort *ks = (__local const ushort *)smem;
        const int k_row = w * KW + (mi >> 1) * 8 + mr, k_col = (mi & 1) * 8;
        UNROLL
        for (int np = 0; np < NNT / 2; np++) {
            UNROLL
            for (int kk = 0; kk < NKS; kk++)
                clkv_ldmatrix4(kf[np][kk], ks + (k_row + np * 16) * LDH + kk * 16 + k_col);
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE); /* the local tile is reused by the row stages */

    const int j0 = k0 + w * KW; /* this warp's first key */
    const int live = j0 < kend; /* uniform over the warp */
    float acc[NNT][2];
    UNROLL
    for (int nt = 0; nt < NNT; nt++)
        acc[nt][0] = acc[nt][1] = 0.0f;

    const long qb = q_off + (long)b * q_sb + (long)kvh * G * q_sh;
    const long lb = lse_off + (long)b * lse_sb + (long)kvh * G * lse_sh;
    const int nst = (r_hi - r_lo + RT - 1) / RT;
    /* row -> (query row t, head g) without divisions in the loops: steps of RSTEP, 16 and
     * RT rows as (query rows, heads) */
    const int t_lo = r_lo / G, g_lo = r_lo - t_lo * G;
    const long q_lo = (long)g_lo * q_sh + (long)t_lo * q_st;
    const long lse_lo = (long)g_lo * lse_sh + (long)t_lo * lse_st;
    const int dq = RSTEP / G, dr = RSTEP % G, dq16 = 16 / G, dr16 = 16 % G, dqs = RT / G,
              drs = RT % G;
    const int tail16 = 15 / G + 1; /* t(R + 15) - t(R) <= tail16 for any row R */
    int ts = t_lo, gs = g_lo;      /* (t, g) of the stage's first row */
    /* ldmatrix row address of this lane inside a 16-row block (A fragments a0..a3) */
    const int a_row = (mi & 1) * 8 + mr, a_col = (mi >> 1) * 8;

    UNROLL
    for (int s = 0; s < NSTG - 1; s++) {
        if (s < nst)
            issue_rows(smem + s * STAGE16, lse_s[s], q, qb, q_sh, q_st, q_lo, lse, lb, lse_sh,
                       lse_st, lse_lo, G, dq, dr, r_lo + s * RT, r_hi, lid);
        clkv_cp_async_commit(); /* empty groups keep the group count uniform */
    }
    for (int s = 0; s < nst; s++) {
        const int buf = s % NSTG;
        const int ahead = s + NSTG - 1;
        if (ahead < nst)
            issue_rows(smem + (ahead % NSTG) * STAGE16, lse_s[ahead % NSTG], q, qb, q_sh, q_st,
                       q_lo, lse, lb, lse_sh, lse_st, lse_lo, G, dq, dr, r_lo + ahead * RT, r_hi,
                       lid);
        clkv_cp_async_commit();
        CLKV_CP_ASYNC_WAIT(NSTG - 1); /* stage s has landed (this lane's copies) */
        barrier(CLK_LOCAL_MEM_FENCE);
        if (live) {
            __local const ushort *qs = (__local const ushort *)(smem + buf * STAGE16);
            const int rs0 = r_lo + s * RT;
            int tb = ts, gb = gs; /* (t, g) of the block's first row R0 */
            for (int rb = 0; rb < RT / 16; rb++) {
                const int R0 = rs0 + rb * 16;
                if (R0 >= r_hi)
                    break;
                const int pmin = pos0 + tb; /* the block's first position */
                const int gb0 = gb;
                tb += dq16;
                gb += dr16;
                if (gb >= G) {
                    gb -= G;
                    tb++;
                }
                /* causal skip (uniform over the warp): even the block's last position
                 * (at most pmin + tail16) precedes the warp's keys */
                if (pmin + tail16 < j0)
                    continue;
                float sc[NNT][4];
                UNROLL
                for (int nt = 0; nt < NNT; nt++) {
                    UNROLL
                    for (int i = 0; i < 4; i++)
                        sc[nt][i] = 0.0f;
                }
                /* A fragments one k-step ahead of the products (the PTX wrappers are
                 * volatile: their order is the issue order) */
                __local const ushort *qa = qs + (rb * 16 + a_row) * LDH + a_col;
                uint af[2][4];
                clkv_ldmatrix4(af[0], qa);
                UNROLL
                for (int kk = 0; kk < NKS; kk++) {
                    if (kk + 1 < NKS)
                        clkv_ldmatrix4(af[(kk + 1) & 1], qa + (kk + 1) * 16);
                    const uint *a = af[kk & 1];
                    UNROLL
                    for (int np = 0; np < NNT / 2; np++) {
                        MMA(sc[2 * np], a[0], a[1], a[2], a[3], kf[np][kk][0], kf[np][kk][1]);
                        MMA(sc[2 * np + 1], a[0], a[1], a[2], a[3], kf[np][kk][2], kf[np][kk][3]);
                    }
                }
                /* this lane's rows: R0 + fg and R0 + fg + 8 */
                const int ra = R0 + fg, rbw = ra + 8;
                const float xa = lse_s[buf][rb * 16 + fg], xb = lse_s[buf][rb * 16 + fg + 8];
                const float l2a = ra < r_hi && xa > -INFINITY ? xa * CLKV_LOG2E : INFINITY;
                const float l2b = rbw < r_hi && xb > -INFINITY ? xb * CLKV_LOG2E : INFINITY;
                if (pmin >= j0 + KW - 1) {
                    /* every row of the block sees every key of the warp (all keys < n) */
                    UNROLL
                    for (int nt = 0; nt < NNT; nt++) {
                        acc[nt][0] += clkv_exp2_ftz(fma(sc[nt][0], scale_log2, -l2a)) +
                                      clkv_exp2_ftz(fma(sc[nt][2], scale_log2, -l2b));
                        acc[nt][1] += clkv_exp2_ftz(fma(sc[nt][1], scale_log2, -l2a)) +
                                      clkv_exp2_ftz(fma(sc[nt][3], scale_log2, -l2b));
                    }
                } else {
                    /* rows R0 + fg and R0 + fg + 8 (exact; only blocks on the diagonal) */
                    const int pa = pmin + (gb0 + fg) / G, pb = pmin + (gb0 + fg + 8) / G;
                    UNROLL
                    for (int nt = 0; nt < NNT; nt++) {
                        UNROLL
                        for (int i = 0; i < 4; i++) {
                            const int j = j0 + nt * 8 + 2 * ft + (i & 1);
                            const int pos = i < 2 ? pa : pb;
                            const float l2 = i < 2 ? l2a : l2b;
                            acc[nt][i & 1] +=
                                j <= pos ? clkv_exp2_ftz(fma(sc[nt][i], scale_log2, -l2)) : 0.0f;
                        }
                    }
                }
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* the stage may be refilled */
        ts += dqs;
        gs += drs;
        if (gs >= G) {
            gs -= G;
            ts++;
        }
    }
    CLKV_CP_ASYNC_WAIT(0);
    if (!live)
        return;
    /* sum over the 8 row lanes (g) of each column; lanes g = 0 hold keys 8 nt + 2 ft + c */
    const float f = nsplit > 1 ? 1.0f : 1.0f / (float)G;
    UNROLL
    for (int nt = 0; nt < NNT; nt++) {
        UNROLL
        for (int c = 0; c < 2; c++) {
            float x = acc[nt][c];
            x += clkv_shfl_xor(x, 4);
            x += clkv_shfl_xor(x, 8);
            x += clkv_shfl_xor(x, 16);
            const int j = j0 + nt * 8 + 2 * ft + c;
            if (fg == 0 && j < kend)
                out[j] = x * f;
        }
    }
}

/* raw[b, kvh, j] = (1/G) sum over the pieces of part[b, kvh, piece, j], j < n. */
__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void
score_h2o_reduce(__global const int *lengths, long len_off, int has_len, int max_len, int Hkv,
                 int G, int nsplit, __global float *ws, long raw_off, long part_off, long row_len) {
    const int j = (int)get_global_id(0);
    const int kvh = (int)get_group_id(1), b = (int)get_group_id(2);
    int n = max_len;
    if (has_len)
        n = clamp(lengths[len_off + b], 0, max_len);
    if (j >= n)
        return;
    const long bh = (long)b * Hkv + kvh;
    __global const float *p = ws + part_off + bh * nsplit * row_len + j;
    float s = 0.0f;
    for (int i = 0; i < nsplit; i++)
        s += p[(long)i * row_len];
    ws[raw_off + bh * row_len + j] = s * (1.0f / (float)G);
}
