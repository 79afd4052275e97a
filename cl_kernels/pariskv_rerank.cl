/* ParisKV Stage II (SPEC §4): RSQ-IP rerank of the candidates and the final top-k.
 *
 * Defines (host/pariskv_rerank.c):
 *   HEAD_DIM  D (64, 128, 256)
 *   SUB_M     subspace dim m; NBLK = D / m
 *   W_DTYPE   dtype code of the weights
 *   WG        work-group size (a power of two)
 *   CODES_U32 1: code rows are 4-byte aligned (read as uint words)
 *
 * Plan (int32 [8, B] row-major): row 0 = n_b, rows 1..6 = tiers, row 7 = C_b.
 */

#define NBLK (HEAD_DIM / SUB_M)
#define W_T CLKV_STORAGE(W_DTYPE)
#define NSUB (WG >= 32 ? WG / 32 : 1) /* top-k sub-histograms */

/* s^ of candidate j: q_norm * sum_blk w_blk * sum_j v_j q~_j (f32, in coordinate order).
 * Grid (ceil(max_cand / WG) * WG, Hkv, B), local (WG). */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
pkv_rerank(__global const float *qr, long qr_off, long qr_sb, long qr_sh, __global const float *qn,
           long qn_off, long qn_sb, long qn_sh, __global const uchar *codes, long cd_off,
           long cd_sb, long cd_sh, long cd_sl, __global const W_T *wts, long w_off, long w_sb,
           long w_sh, long w_sl, float8 lev, __global const int *plan, long plan_off, int B,
           int max_cand, __global const int *cand, long ca_off, long ca_sb, long ca_sh,
           __global float *cs, long cs_off, long cs_sb, long cs_sh) {
    __local float q[HEAD_DIM];
    __local float av[16]; /* signed levels by nibble: av[8 + t] = a[t], av[t] = -a[t] */
    const int lid = (int)get_local_id(0);
    const int h = (int)get_group_id(1), b = (int)get_group_id(2);
    for (int i = lid; i < HEAD_DIM; i += WG)
        q[i] = qr[qr_off + b * qr_sb + h * qr_sh + i];
    if (lid < 16) {
        const float l[8] = {lev.s0, lev.s1, lev.s2, lev.s3, lev.s4, lev.s5, lev.s6, lev.s7};
        av[lid] = lid >= 8 ? l[lid - 8] : -l[lid];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const int C = clamp(plan[plan_off + 7 * B + b], 0, max_cand);
    const int j = (int)get_global_id(0);
    if (j >= C)
        return;
    const long p = cand[ca_off + b * ca_sb + h * ca_sh + j];
    __global const uchar *row = codes + cd_off + b * cd_sb + h * cd_sh + p * cd_sl;
    const long wrow = w_off + b * w_sb + h * w_sh + p * w_sl;
    float acc = 0.0f;
    for (int blk = 0; blk < NBLK; blk++) {
        float dot = 0.0f;
#if CODES_U32 && SUB_M == 8
        const uint x = ((__global const uint *)row)[blk];
        for (int jj = 0; jj < 8; jj++) {
            dot += av[(x >> (4 * jj)) & 0xfu] * q[blk * 8 + jj];
        }
#else
        for (int jj = 0; jj < SUB_M; jj++) {
            const int c = blk * SUB_M + jj;
            dot += av[(row[c >> 1] >> (4 * (c & 1))) & 0xfu] * q[c];
        }
#endif
        acc += CLKV_LOAD(W_DTYPE)(wts, wrow + blk) * dot;
    }
    cs[cs_off + b * cs_sb + h * cs_sh + j] = qn[qn_off + b * qn_sb + h * qn_sh] * acc;
}

/* Exclusive scan of one ulong per work-item over the work-group; *total gets the sum. */
inline ulong pkr_scan(__local ulong *tmp, ulong v, ulong *total) {
    const int lid = (int)get_local_id(0);
    barrier(CLK_LOCAL_MEM_FENCE);
    tmp[lid] = v;
    for (int s = 1; s < WG; s <<= 1) {
        barrier(CLK_LOCAL_MEM_FENCE);
        const ulong add = lid >= s ? tmp[lid - s] : 0;
        barrier(CLK_LOCAL_MEM_FENCE);
        tmp[lid] += add;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    *total = tmp[WG - 1];
    return tmp[lid] - v;
}

/* Order-preserving map of f32 to uint (larger float -> larger key; -0 == +0). */
inline uint pkr_key(float x) {
    uint u = as_uint(x);
    if ((u & 0x7fffffffu) == 0)
        u = 0;
    return (u >> 31) ? ~u : (u | 0x80000000u);
}

/* Final top-k per (b, h): exact radix select (4 passes of 8 bits) over the C_b candidate
 * scores, then an ordered compaction (ties at the k-th key: lowest candidate index, i.e.
 * lowest position, first). idx gets positions ascending, then -1 up to top_k.
 * Grid (WG, Hkv, B), local (WG). */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
pkv_topk(__global const float *cs, long cs_off, long cs_sb, long cs_sh, __global const int *cand,
         long ca_off, long ca_sb, long ca_sh, __global const int *plan, long plan_off, int B,
         int max_cand, int top_k, __global int *idx, long ix_off, long ix_sb, long ix_sh) {
    /* One 256-bin histogram per 32 work-items: the keys of one row mostly share their high
     * bytes, so a single histogram would serialize every work-item on one counter. */
    __local uint hist[NSUB * 256];
    __local uint sh_prefix, sh_need;
    __local ulong tmp[WG];
    const int lid = (int)get_local_id(0);
    const int h = (int)get_group_id(1), b = (int)get_group_id(2);
    const int C = clamp(plan[plan_off + 7 * B + b], 0, max_cand);
    const int kk = min(top_k, C);
    __global const float *s = cs + cs_off + b * cs_sb + h * cs_sh;
    __global const int *cd = cand + ca_off + b * ca_sb + h * ca_sh;
    __global int *out = idx + ix_off + b * ix_sb + h * ix_sh;
    uint prefix = 0, mask = 0, need = (uint)kk;
    if (kk > 0) {
        for (int shift = 24; shift >= 0; shift -= 8) {
            for (int i = lid; i < NSUB * 256; i += WG)
                hist[i] = 0;
            barrier(CLK_LOCAL_MEM_FENCE);
            __local uint *mine = hist + (lid / 32) * 256;
            for (int j = lid; j < C; j += WG) {
                const uint key = pkr_key(s[j]);
                if ((key & mask) == prefix)
                    atomic_inc(&mine[(key >> shift) & 0xffu]);
            }
            barrier(CLK_LOCAL_MEM_FENCE);
#if WG >= 256
            { /* bins in descending order, one per work-item: the bin where the count of
               * larger keys reaches `need` */
                const int v = 255 - lid;
                uint x = 0;
                if (lid < 256)
                    for (int q = 0; q < NSUB; q++)
                        x += hist[q * 256 + v];
                ulong tot;
                const ulong above = pkr_scan(tmp, x, &tot);
                if (lid < 256 && above < need && above + x >= need) {
                    sh_prefix = prefix | ((uint)v << shift);
                    sh_need = need - (uint)above;
                }
            }
#else
            if (lid == 0) {
                uint cum = 0;
                for (int v = 255; v >= 0; v--) {
                    uint x = 0;
                    for (int q = 0; q < NSUB; q++)
                        x += hist[q * 256 + v];
                    if (cum + x >= need) {
                        sh_prefix = prefix | ((uint)v << shift);
                        sh_need = need - cum;
                        break;
                    }
                    cum += x;
                }
            }
#endif
            barrier(CLK_LOCAL_MEM_FENCE);
            prefix = sh_prefix;
            need = sh_need;
            mask |= 0xffu << shift;
        }
    }
    /* prefix: the kk-th largest key; need: how many of its ties to take (first ones). */
    const int per = (C + WG - 1) / WG;
    const int j0 = lid * per, j1 = min(C, j0 + per);
    uint gt = 0, eq = 0;
    if (kk > 0)
        for (int j = j0; j < j1; j++) {
            const uint key = pkr_key(s[j]);
            gt += key > prefix;
            eq += key == prefix;
        }
    ulong total;
    const ulong ex = pkr_scan(tmp, ((ulong)gt << 32) | eq, &total);
    uint gt_run = (uint)(ex >> 32), eq_run = (uint)(ex & 0xffffffffu);
    if (kk > 0)
        for (int j = j0; j < j1; j++) {
            const uint key = pkr_key(s[j]);
            const int isgt = key > prefix, iseq = key == prefix;
            if (isgt || (iseq && eq_run < need))
                out[gt_run + min(eq_run, need)] = cd[j];
            gt_run += isgt;
            eq_run += iseq;
        }
    for (int j = kk + lid; j < top_k; j += WG)
        out[j] = -1;
}
