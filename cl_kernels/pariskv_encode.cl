/* ParisKV encoder (SPEC §4): SRHT of keys / group-mean queries, centroid ids, 4-bit
 * codes, weights and per-centroid counts.
 *
 * Defines (set by host/pariskv_encode.c):
 *   IN_DTYPE      dtype code of k (encode) or q (query)
 *   HEAD_DIM      D, a power of two (64, 128, 256)
 *   KPW           vectors per work-group (one row of TPK = D/2 lanes each)
 *   PARISKV_QUERY 1: build pariskv_query_transform; 0: build pariskv_encode
 *   SUB_M         subspace dim m (encode only; divides D, 2..8)
 *   W_DTYPE       dtype code of the weights (encode only)
 *
 *   DENSE_ROT     1: the dense-rotation kernels (any D up to 512; see below) instead
 *
 * SRHT (DENSE_ROT 0): each row of TPK lanes holds one vector in local memory (lane t owns
 * coordinates t and t + TPK), scales it exactly by a power of two so its largest
 * magnitude is in [0.5, 1) (no overflow or underflow for any finite input), applies the
 * signs and runs the in-place fast Walsh-Hadamard transform (natural order:
 * H[i][j] = (-1)^popcount(i & j)).
 *
 * Dense rotation (DENSE_ROT 1, D not a power of two): pariskv_pack writes each vector
 * (a key, or the group mean of the query heads), scaled the same way, as a row of a
 * dense f32 matrix X with its exponent (and norm); the host multiplies Y = X R^T with
 * CLBlast SGEMM; pariskv_encode_dense encodes the rows of Y block by block (the same
 * block encoder as the SRHT path) and pariskv_query_finish normalizes query rows.
 */

#define TPK (HEAD_DIM / 2)
#define WG (TPK * KPW)
#define IN_T CLKV_STORAGE(IN_DTYPE)

#include "pariskv_srht.cl"

#if !PARISKV_QUERY
#define NBLK (HEAD_DIM / SUB_M)
#define W_T CLKV_STORAGE(W_DTYPE)

/* Encode one block from its transformed coordinates y (any common positive scale c):
 * u = y / ||y||, id, 4-bit codes, alpha = <v, u>, weight w = 2^ex * ||y|| / (rdiv *
 * alpha) — rdiv undoes the scale of the transform (sqrt(D) for the unnormalized
 * Hadamard, 1 for an orthonormal matrix), 2^ex the power-of-two scaling of the input.
 * Writes the id byte, SUB_M/2 code bytes, the weight, and counts the id. */
inline void pkv_encode_block(const float *y, float rdiv, int ex, float8 tau, float8 lev,
                             __global uchar *idp, __global uchar *cp, __global W_T *wts, long wi,
                             __global uint *counts, long cbase, int has_counts) {
    const float av[8] = {lev.s0, lev.s1, lev.s2, lev.s3, lev.s4, lev.s5, lev.s6, lev.s7};
    float ss = 0.0f;
    for (int j = 0; j < SUB_M; j++)
        ss += y[j] * y[j];
    uint id = 0;
    uint nib[SUB_M];
    float alpha = 0.0f;
    const float nrm = sqrt(ss);
    for (int j = 0; j < SUB_M; j++) {
        const float u = ss > 0.0f ? y[j] / nrm : 0.0f;
        const uint pos = u >= 0.0f;
        const float mag = fabs(u);
        const uint tc = (uint)(tau.s0 < mag) + (uint)(tau.s1 < mag) + (uint)(tau.s2 < mag) +
                        (uint)(tau.s3 < mag) + (uint)(tau.s4 < mag) + (uint)(tau.s5 < mag) +
                        (uint)(tau.s6 < mag);
        id |= pos << j;
        nib[j] = (pos << 3) | tc;
        alpha += av[tc] * mag;
    }
    const float w = ss > 0.0f ? ldexp(nrm / (rdiv * alpha), ex) : 0.0f;
    *idp = (uchar)id;
    for (int j = 0; j < SUB_M; j += 2)
        cp[j / 2] = (uchar)(nib[j] | (nib[j + 1] << 4));
    CLKV_STORE(W_DTYPE)(wts, wi, w);
    if (has_counts)
        atomic_inc(counts + cbase + id);
}
#endif

#if DENSE_ROT

#define PACK_WG 64
#define PACK_EPL ((HEAD_DIM + PACK_WG - 1) / PACK_WG)

/* One work-group per row rl of the chunk [r0, r0 + rows): row r = (b * Hkv + h) * n + i
 * is token start + i of (b, h) (keys: G = 1), or the mean of the G query heads of KV head
 * h (queries: n = 1). X[rl] = v * 2^-ex with the exponent making max |v| * 2^-ex lie in
 * [0.5, 1) (0 for rows past the sequence length), ex_out[rl] = ex, nrm_out[rl] = ||X[rl]||.
 * Grid: (rows * PACK_WG). */
__kernel __attribute__((reqd_work_group_size(PACK_WG, 1, 1))) void
pariskv_pack(__global const IN_T *src, long s_off, long s_sb, long s_sh, long s_sl, long s_sg,
             int G, int Hkv, int n, int start, int end, __global const int *lengths, long len_off,
             int has_len, long r0, __global float *ws, long x_off, long ex_off, long nrm_off) {
    __global float *X = ws + x_off;
    __global int *ex_out = (__global int *)(ws + ex_off);
    __global float *nrm_out = ws + nrm_off;
    __local float red[PACK_WG];
    const int lid = (int)get_local_id(0);
    const long rl = (long)get_group_id(0);
    const long r = r0 + rl;
    const long b = r / ((long)Hkv * n), rem = r % ((long)Hkv * n);
    const long h = rem / n, tok = start + rem % n;
    int lim = end;
    if (has_len)
        lim = min(lim, max(lengths[len_off + b], 0));
    const int valid = tok < (long)lim;
    const long base = s_off + b * s_sb + h * s_sh + tok * s_sl;
    float v[PACK_EPL];
    float mx = 0.0f;
    for (int e = 0; e < PACK_EPL; e++) {
        const int d = lid + e * PACK_WG;
        float acc = 0.0f;
        if (valid && d < HEAD_DIM) {
            for (int g = 0; g < G; g++)
                acc += CLKV_LOAD(IN_DTYPE)(src, base + g * s_sg + d);
            acc /= (float)G;
        }
        v[e] = acc;
        mx = fmax(mx, fabs(acc));
    }
    mx = pkv_row_reduce(red, mx, lid, lid, PACK_WG, 0); /* the work-group is one row */
    int ex = 0;
    if (mx > 0.0f)
        frexp(mx, &ex);
    float ss = 0.0f;
    for (int e = 0; e < PACK_EPL; e++) {
        const int d = lid + e * PACK_WG;
        if (d < HEAD_DIM) {
            const float x = ldexp(v[e], -ex);
            X[rl * HEAD_DIM + d] = x;
            ss += x * x;
        }
    }
    ss = pkv_row_reduce(red, ss, lid, lid, PACK_WG, 1);
    if (lid == 0) {
        ex_out[rl] = ex;
        nrm_out[rl] = sqrt(ss);
    }
}

#if PARISKV_QUERY

/* Row rl of the chunk (r = r0 + rl = b * Hkv + h): q_rot[b, h] = Y[rl] / ||X[rl]|| (R is
 * orthonormal: ||Y|| = ||X||), q_norm[b, h] = ||q_mean||. Grid: (ceil(D / 64) * 64, rows). */
__kernel void pariskv_query_finish(__global const float *ws, long y_off, long ex_off, long nrm_off,
                                   long r0, int Hkv, __global float *qr, long qr_off, long qr_sb,
                                   long qr_sh, __global float *qn, long qn_off, long qn_sb,
                                   long qn_sh, int has_qn) {
    __global const float *Y = ws + y_off;
    __global const int *exs = (__global const int *)(ws + ex_off);
    __global const float *nrms = ws + nrm_off;
    const int d = (int)get_global_id(0);
    const long rl = (long)get_global_id(1);
    if (d >= HEAD_DIM)
        return;
    const long r = r0 + rl, b = r / Hkv, h = r % Hkv;
    const float nrm = nrms[rl];
    qr[qr_off + b * qr_sb + h * qr_sh + d] = nrm > 0.0f ? Y[rl * HEAD_DIM + d] / nrm : 0.0f;
    if (has_qn && d == 0)
        qn[qn_off + b * qn_sb + h * qn_sh] = ldexp(nrm, exs[rl]);
}

#else

/* One work-item per (row, block) of the chunk: block t of Y[rl] (= R X[rl]).
 * Grid: (ceil(rows * NBLK / 64) * 64). */
__kernel void pariskv_encode_dense(__global const float *ws, long y_off, long ex_off, long r0,
                                   long rows, int Hkv, int n, int start, int end,
                                   __global const int *lengths, long len_off, int has_len,
                                   float8 tau, float8 lev, __global uchar *ids, long id_off,
                                   long id_sb, long id_sh, long id_sl, __global uchar *codes,
                                   long cd_off, long cd_sb, long cd_sh, long cd_sl,
                                   __global W_T *wts, long w_off, long w_sb, long w_sh, long w_sl,
                                   __global uint *counts, long c_off, long c_sb, long c_sh,
                                   long c_sblk, int has_counts) {
    __global const float *Y = ws + y_off;
    __global const int *exs = (__global const int *)(ws + ex_off);
    const long gid = (long)get_global_id(0);
    if (gid >= rows * NBLK)
        return;
    const long rl = gid / NBLK;
    const int t = (int)(gid % NBLK);
    const long r = r0 + rl;
    const long b = r / ((long)Hkv * n), rem = r % ((long)Hkv * n);
    const long h = rem / n, tok = start + rem % n;
    int lim = end;
    if (has_len)
        lim = min(lim, max(lengths[len_off + b], 0));
    if (tok >= (long)lim)
        return;
    float y[SUB_M];
    for (int j = 0; j < SUB_M; j++)
        y[j] = Y[rl * HEAD_DIM + t * SUB_M + j];
    pkv_encode_block(y, 1.0f, exs[rl], tau, lev,
                     ids + id_off + b * id_sb + h * id_sh + tok * id_sl + t,
                     codes + cd_off + b * cd_sb + h * cd_sh + tok * cd_sl + t * (SUB_M / 2), wts,
                     w_off + b * w_sb + h * w_sh + tok * w_sl + t, counts,
                     c_off + b * c_sb + h * c_sh + (long)t * c_sblk, has_counts);
}

#endif
#elif PARISKV_QUERY

/* One row per (b, KV head): q_mean -> ||q_mean||, R q_mean / ||q_mean||.
 * Grid: (ceil(Hkv / KPW) * WG, B). */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
pariskv_query_transform(__global const IN_T *q, long q_off, long q_sb, long q_sh, int Hkv, int G,
                        uint8 signs, __global float *qr, long qr_off, long qr_sb, long qr_sh,
                        __global float *qn, long qn_off, long qn_sb, long qn_sh, int has_qn) {
    __local float xs[KPW * HEAD_DIM];
    __local float red[WG];
    const int lid = (int)get_local_id(0);
    const int kr = lid / TPK, t = lid % TPK;
    const int h = (int)get_group_id(0) * KPW + kr;
    const long b = (long)get_group_id(1);
    const int valid = h < Hkv;
    float scale, qnorm;
    pkv_query_row(q, q_off + b * q_sb + (long)h * G * q_sh, q_sh, G, valid, signs,
                  xs + kr * HEAD_DIM, red, lid, t, &scale, &qnorm);
    if (!valid)
        return;
    __local float *x = xs + kr * HEAD_DIM;
    __global float *o = qr + qr_off + b * qr_sb + (long)h * qr_sh;
    o[t] = x[t] * scale;
    o[t + TPK] = x[t + TPK] * scale;
    if (has_qn && t == 0)
        qn[qn_off + b * qn_sb + (long)h * qn_sh] = qnorm;
}

#else /* encode */

/* One row per key. Grid: (ceil((end - start) / KPW) * WG, Hkv, B). */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
pariskv_encode(__global const IN_T *k, long k_off, long k_sb, long k_sh, long k_sl,
               __global const int *lengths, long len_off, int has_len, int start, int end,
               uint8 signs, float8 tau, float8 lev, __global uchar *ids, long id_off, long id_sb,
               long id_sh, long id_sl, __global uchar *codes, long cd_off, long cd_sb, long cd_sh,
               long cd_sl, __global W_T *wts, long w_off, long w_sb, long w_sh, long w_sl,
               __global uint *counts, long c_off, long c_sb, long c_sh, long c_sblk,
               int has_counts) {
    __local float xs[KPW * HEAD_DIM];
    __local float red[WG];
    const int lid = (int)get_local_id(0);
    const int kr = lid / TPK, t = lid % TPK;
    const long h = (long)get_group_id(1), b = (long)get_group_id(2);
    const long tok = (long)start + (long)get_group_id(0) * KPW + kr;
    int lim = end;
    if (has_len)
        lim = min(lim, max(lengths[len_off + b], 0));
    const int valid = tok < (long)lim;

    float v0 = 0.0f, v1 = 0.0f;
    if (valid) {
        const long base = k_off + b * k_sb + h * k_sh + tok * k_sl;
        v0 = CLKV_LOAD(IN_DTYPE)(k, base + t);
        v1 = CLKV_LOAD(IN_DTYPE)(k, base + t + TPK);
    }
    int ex;
    (void)pkv_pow2_scale(red, &v0, &v1, lid, t, &ex);
    __local float *x = xs + kr * HEAD_DIM;
    x[t] = as_float(as_uint(v0) ^ pkv_sign_bit(signs, t));
    x[t + TPK] = as_float(as_uint(v1) ^ pkv_sign_bit(signs, t + TPK));
    pkv_fwht(x, t);
    if (!valid || t >= NBLK)
        return;

    /* Lane t encodes block t of this key: y_b = x[t*m .. t*m + m). */
    float y[SUB_M];
    for (int j = 0; j < SUB_M; j++)
        y[j] = x[t * SUB_M + j];
    pkv_encode_block(y, sqrt((float)HEAD_DIM), ex, tau, lev,
                     ids + id_off + b * id_sb + h * id_sh + tok * id_sl + t,
                     codes + cd_off + b * cd_sb + h * cd_sh + tok * cd_sl + t * (SUB_M / 2), wts,
                     w_off + b * w_sb + h * w_sh + tok * w_sl + t, counts,
                     c_off + b * c_sb + h * c_sh + (long)t * c_sblk, has_counts);
}

#endif
