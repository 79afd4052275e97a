/* ParisKV SRHT helpers (SPEC §4 transform), a kernel fragment included by
 * pariskv_encode.cl (keys, and the query transform kernel) and pariskv_collide.cl
 * (pkv_rank with RANK_QT: the query transform inside the ranking kernel, one launch less).
 * The includer defines HEAD_DIM (a power of two), TPK = HEAD_DIM / 2 and IN_DTYPE / IN_T
 * (the query dtype, for pkv_query_row). A row of the transform is TPK lanes t (lane t owns
 * coordinates t and t + TPK); lanes with t >= TPK may take part in the barriers. */

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

/* Maximum (op 0) or sum (op 1) of v over the `width` lanes t of each row (width a power of
 * two; work-item lid is lane t of the row starting at lid - t); every lane gets the row's
 * result. All lanes of the work-group must call it. */
inline float pkv_row_reduce(__local float *red, float v, int lid, int t, int width, int op) {
    barrier(CLK_LOCAL_MEM_FENCE);
    red[lid] = v;
    for (int s = width / 2; s > 0; s >>= 1) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (t < s)
            red[lid] = op == 0 ? fmax(red[lid], red[lid + s]) : red[lid] + red[lid + s];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    return red[lid - t];
}

/* Scale a row held as the pair (v0, v1) of each of its TPK lanes exactly by 2^-ex, ex the
 * exponent that puts the row's largest magnitude in [0.5, 1) (0 where that magnitude is not
 * above 0), and return that magnitude (before scaling). All lanes of the work-group must call
 * it (pkv_row_reduce). */
inline float pkv_pow2_scale(__local float *red, float *v0, float *v1, int lid, int t, int *ex) {
    const float mx = pkv_row_reduce(red, fmax(fabs(*v0), fabs(*v1)), lid, t, TPK, 0);
    *ex = 0;
    if (mx > 0.0f) {
        frexp(mx, ex);
        *v0 = ldexp(*v0, -*ex);
        *v1 = ldexp(*v1, -*ex);
    }
    return mx;
}

/* x <- H x on the row `x` (HEAD_DIM floats), lane t < TPK doing one butterfly per stage
 * (lanes t >= TPK only take the barriers). Starts and ends with a barrier. */
inline void pkv_fwht(__local float *x, int t) {
    for (int h = 1; h < HEAD_DIM; h <<= 1) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (t < TPK) {
            const int i = ((t & ~(h - 1)) << 1) | (t & (h - 1));
            const float p = x[i], q = x[i + h];
            x[i] = p + q;
            x[i + h] = p - q;
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}

/* The group-mean query of one KV head (G query heads from row `base` of q, stride q_sh;
 * `valid` 0: a zero row) scaled exactly by a power of two (max |v| in [0.5, 1)), sign
 * flipped and Hadamard transformed into the local row x (HEAD_DIM floats, unnormalized);
 * *scale: the factor that makes x[i] * scale the normalized rotated query
 * (1 / (sqrt(D) ||q_mean 2^-ex||), 0 for a zero row), *qnorm: ||q_mean||. Every lane of
 * the work-group calls it (barriers; `red` holds one float per work-item). */
inline void pkv_query_row(__global const IN_T *q, long base, long q_sh, int G, int valid,
                          uint8 signs, __local float *x, __local float *red, int lid, int t,
                          float *scale, float *qnorm) {
    float v0 = 0.0f, v1 = 0.0f;
    if (valid && t < TPK) {
        for (int g = 0; g < G; g++) {
            v0 += CLKV_LOAD(IN_DTYPE)(q, base + g * q_sh + t);
            v1 += CLKV_LOAD(IN_DTYPE)(q, base + g * q_sh + t + TPK);
        }
        v0 /= (float)G;
        v1 /= (float)G;
    }
    int ex;
    const float mx = pkv_pow2_scale(red, &v0, &v1, lid, t, &ex);
    const float ss = pkv_row_reduce(red, v0 * v0 + v1 * v1, lid, t, TPK, 1);
    if (t < TPK) {
        x[t] = as_float(as_uint(v0) ^ pkv_sign_bit(signs, t));
        x[t + TPK] = as_float(as_uint(v1) ^ pkv_sign_bit(signs, t + TPK));
    }
    pkv_fwht(x, t);
    const float nrm = sqrt(ss);
    *scale = mx > 0.0f ? 1.0f / (sqrt((float)HEAD_DIM) * nrm) : 0.0f;
    *qnorm = ldexp(nrm, ex);
}
