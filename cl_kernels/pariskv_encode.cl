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
 * Each row of TPK lanes holds one vector in local memory (lane t owns coordinates t and
 * t + TPK), scales it exactly by a power of two so its largest magnitude is in
 * [0.5, 1) (no overflow or underflow for any finite input), applies the signs and runs the in-place
 * fast Walsh-Hadamard transform (natural order: H[i][j] = (-1)^popcount(i & j)).
 */

#define TPK (HEAD_DIM / 2)
#define WG (TPK * KPW)
#define IN_T CLKV_STORAGE(IN_DTYPE)

/* Sign bit (bit 31 set when sigma_j = -1) of coordinate j from the packed mask. */
inline uint pkv_sign_bit(uint8 s, int j) {
    const int w = j >> 5;
    const uint word = w == 0   ? s.s0
                      : w == 1 ? s.s1
                      : w == 2 ? s.s2
                      : w == 3 ? s.s3
                      : w == 4 ? s.s4
                      : w == 5 ? s.s5
                      : w == 6 ? s.s6
                               : s.s7;
    return ((word >> (j & 31)) & 1u) << 31;
}

/* Maximum (op 0) or sum (op 1) of red[] over the TPK lanes of each row; every lane gets
 * the row's result. All lanes of the work-group must call it. */
inline float pkv_row_reduce(__local float *red, float v, int lid, int t, int op) {
    barrier(CLK_LOCAL_MEM_FENCE);
    red[lid] = v;
    for (int s = TPK / 2; s > 0; s >>= 1) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (t < s)
            red[lid] = op == 0 ? fmax(red[lid], red[lid + s]) : red[lid] + red[lid + s];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    return red[lid - t];
}

/* x <- H x on the row `x` (HEAD_DIM floats), lane t doing one butterfly per stage.
 * Starts and ends with a barrier. */
inline void pkv_fwht(__local float *x, int t) {
    for (int h = 1; h < HEAD_DIM; h <<= 1) {
        barrier(CLK_LOCAL_MEM_FENCE);
        const int i = ((t & ~(h - 1)) << 1) | (t & (h - 1));
        const float p = x[i], q = x[i + h];
        x[i] = p + q;
        x[i + h] = p - q;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}

#if PARISKV_QUERY

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
    float v0 = 0.0f, v1 = 0.0f;
    if (valid) {
        const long base = q_off + b * q_sb + (long)h * G * q_sh;
        for (int g = 0; g < G; g++) {
            v0 += CLKV_LOAD(IN_DTYPE)(q, base + g * q_sh + t);
            v1 += CLKV_LOAD(IN_DTYPE)(q, base + g * q_sh + t + TPK);
        }
        v0 /= (float)G;
        v1 /= (float)G;
    }
    const float mx = pkv_row_reduce(red, fmax(fabs(v0), fabs(v1)), lid, t, 0);
    int ex = 0;
    if (mx > 0.0f) {
        frexp(mx, &ex); /* scale by 2^-ex: exact, max magnitude in [0.5, 1) */
        v0 = ldexp(v0, -ex);
        v1 = ldexp(v1, -ex);
    }
    const float ss = pkv_row_reduce(red, v0 * v0 + v1 * v1, lid, t, 1);
    __local float *x = xs + kr * HEAD_DIM;
    x[t] = as_float(as_uint(v0) ^ pkv_sign_bit(signs, t));
    x[t + TPK] = as_float(as_uint(v1) ^ pkv_sign_bit(signs, t + TPK));
    pkv_fwht(x, t);
    if (!valid)
        return;
    const float nrm = sqrt(ss);
    const float scale = mx > 0.0f ? 1.0f / (sqrt((float)HEAD_DIM) * nrm) : 0.0f;
    __global float *o = qr + qr_off + b * qr_sb + (long)h * qr_sh;
    o[t] = x[t] * scale;
    o[t + TPK] = x[t + TPK] * scale;
    if (has_qn && t == 0)
        qn[qn_off + b * qn_sb + (long)h * qn_sh] = ldexp(nrm, ex);
}

#else /* encode */

#define NBLK (HEAD_DIM / SUB_M)
#define W_T CLKV_STORAGE(W_DTYPE)

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
    const float mx = pkv_row_reduce(red, fmax(fabs(v0), fabs(v1)), lid, t, 0);
    int ex = 0;
    if (mx > 0.0f) {
        frexp(mx, &ex); /* scale by 2^-ex: exact, max magnitude in [0.5, 1) */
        v0 = ldexp(v0, -ex);
        v1 = ldexp(v1, -ex);
    }
    __local float *x = xs + kr * HEAD_DIM;
    x[t] = as_float(as_uint(v0) ^ pkv_sign_bit(signs, t));
    x[t + TPK] = as_float(as_uint(v1) ^ pkv_sign_bit(signs, t + TPK));
    pkv_fwht(x, t);
    if (!valid || t >= NBLK)
        return;

    /* Lane t encodes block t of this key: y_b = x[t*m .. t*m + m). */
    const float av[8] = {lev.s0, lev.s1, lev.s2, lev.s3, lev.s4, lev.s5, lev.s6, lev.s7};
    float y[SUB_M];
    float ss = 0.0f;
    for (int j = 0; j < SUB_M; j++) {
        y[j] = x[t * SUB_M + j];
        ss += y[j] * y[j];
    }
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
    const float w = ss > 0.0f ? ldexp(nrm / (sqrt((float)HEAD_DIM) * alpha), ex) : 0.0f;

    ids[id_off + b * id_sb + h * id_sh + tok * id_sl + t] = (uchar)id;
    __global uchar *cp = codes + cd_off + b * cd_sb + h * cd_sh + tok * cd_sl + t * (SUB_M / 2);
    for (int j = 0; j < SUB_M; j += 2)
        cp[j / 2] = (uchar)(nib[j] | (nib[j + 1] << 4));
    CLKV_STORE(W_DTYPE)(wts, w_off + b * w_sb + h * w_sh + tok * w_sl + t, w);
    if (has_counts)
        atomic_inc(counts + c_off + b * c_sb + h * c_sh + (long)t * c_sblk + id);
}

#endif
