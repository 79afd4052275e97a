/* KIVI-style asymmetric b-bit quantization (SPEC §3); see include/clkv/quant.h.
 *
 * -D X_DTYPE     dtype code of the float tensor: the input of quant_*, the output of
 *                dequant_* (0 f32, 1 f16, 2 bf16)
 * -D META_DTYPE  dtype code of scale/min (0 f32, 1 f16)
 * bits and group are kernel arguments (one program serves every (bits, group)).
 * Launches are 1-D over all work items (padded to the work-group size); the fastest
 * index is the channel (keys) or the word/group of a token (values), so neighbouring
 * work items touch neighbouring addresses. */

/* x^ = q*s + m must be two roundings, as the rule and the host reference say. */
#pragma OPENCL FP_CONTRACT OFF

#ifndef X_DTYPE
#error "X_DTYPE must be defined"
#endif
#ifndef META_DTYPE
#error "META_DTYPE must be defined"
#endif

typedef CLKV_STORAGE(X_DTYPE) x_t;
typedef CLKV_STORAGE(META_DTYPE) meta_t;
#define LOAD_X CLKV_LOAD(X_DTYPE)
#define STORE_X CLKV_STORE(X_DTYPE)
#define LOAD_META CLKV_LOAD(META_DTYPE)
#define STORE_META CLKV_STORE(META_DTYPE)

#define FLAG_F16_RANGE 1
#define FLAG_NONFINITE 2

/* Correctly rounded a / b (round to nearest) for finite a, b with b != 0. `/` may be off
 * by a few ulps (NVIDIA's default); the candidates around it are compared by their
 * residuals a - q*b, computed with fma (one rounding). Within one ulp of a/b the residual
 * is exact (no underflow), and exact halfway quotients do not exist for division, so the
 * candidate with the smaller |residual| is the correctly rounded quotient. */
inline float quant_div_rn(float a, float b) {
    float q = a / b;
    if (!isfinite(q))
        return q;
    for (int it = 0; it < 4; it++) {
        float r = fabs(fma(-q, b, a));
        float up = nextafter(q, INFINITY), dn = nextafter(q, -INFINITY);
        float ru = fabs(fma(-up, b, a)), rd = fabs(fma(-dn, b, a));
        if (ru < r)
            q = up;
        else if (rd < r)
            q = dn;
        else
            break;
    }
    return q;
}

/* The f32 value of the stored metadata (f16: RNE round trip). */
inline float quant_meta_round(float x) {
#if META_DTYPE == CLKV_DT_F16
    ushort h;
    vstore_half_rte(x, 0, (__private half *)&h);
    return vload_half(0, (const __private half *)&h);
#else
    return x;
#endif
}

/* Flag bits of one input value. */
inline uint quant_check(float v) {
    if (!isfinite(v))
        return FLAG_NONFINITE;
#if META_DTYPE == CLKV_DT_F16
    if (fabs(v) > 65504.0f)
        return FLAG_F16_RANGE;
#endif
    return 0;
}

/* Group parameters from (mn, mx, flags so far): the stored s and m as f32 (0, 0 for a
 * flagged group). Returns the final flags. */
inline uint quant_params(float mn, float mx, uint bad, float qmax, float *s, float *m) {
    float range = mx - mn;
    if (!bad && !isfinite(range))
        bad = FLAG_NONFINITE;
    if (bad) {
        *s = 0.0f;
        *m = 0.0f;
        return bad;
    }
    *s = quant_meta_round(quant_div_rn(range, qmax));
    *m = quant_meta_round(mn);
    return 0;
}

inline uint quant_code(float x, float s, float m, float qmax) {
    if (s == 0.0f)
        return 0u;
    float q = rint(quant_div_rn(x - m, s));
    q = fmin(fmax(q, 0.0f), qmax); /* fmax(NaN, 0) = 0 */
    return (uint)q;
}

inline void quant_raise(__global int *flags, long f_off, int has_flags, uint bad) {
    if (bad && has_flags)
        atomic_or(flags + f_off, (int)bad);
}

/* Keys, per channel. Item (bh, g, d): group g (tokens [g*group, (g+1)*group)) of
 * channel d. total = B*H * (N/group) * D. */
__kernel void quant_keys(__global const x_t *x, long x_off, long x_sb, long x_sh, long x_sn,
                         __global uint *codes, long c_off, long c_sb, long c_sh, long c_sn,
                         __global meta_t *scale, long s_off, long s_sb, long s_sh, long s_sn,
                         __global meta_t *minv, long m_off, long m_sb, long m_sh, long m_sn,
                         __global int *flags, long f_off, int has_flags, long total, int H, int D,
                         int NG, int bits, int group) {
    const long idx = get_global_id(0);
    if (idx >= total)
        return;
    const int d = (int)(idx % D);
    const long rest = idx / D;
    const int g = (int)(rest % NG);
    const int bh = (int)(rest / NG);
    const int b = bh / H, h = bh % H;
    const int per = 32 / bits;
    const float qmax = (float)((1 << bits) - 1);

    const long xb = x_off + b * x_sb + h * x_sh + (long)g * group * x_sn + d;
    float mn = INFINITY, mx = -INFINITY;
    uint bad = 0;
    for (int t = 0; t < group; t++) {
        float v = LOAD_X(x, xb + t * x_sn);
        bad |= quant_check(v);
        mn = fmin(mn, v);
        mx = fmax(mx, v);
    }
    float s, m;
    bad = quant_params(mn, mx, bad, qmax, &s, &m);
    STORE_META(scale, s_off + b * s_sb + h * s_sh + g * s_sn + d, s);
    STORE_META(minv, m_off + b * m_sb + h * m_sh + g * m_sn + d, m);

    const long cb = c_off + b * c_sb + h * c_sh + (long)(g * (group / per)) * c_sn + d;
    for (int w = 0; w < group / per; w++) {
        uint word = 0;
        for (int i = 0; i < per; i++) {
            float v = LOAD_X(x, xb + (long)(w * per + i) * x_sn);
            word |= quant_code(v, s, m, qmax) << (bits * i);
        }
        codes[cb + w * c_sn] = word;
    }
    quant_raise(flags, f_off, has_flags, bad);
}

/* Values (and DiffKV tokens), per token. Item (bh, n, j): channel group j of token n.
 * total = B*H * N * (D/group). */
__kernel void quant_values(__global const x_t *x, long x_off, long x_sb, long x_sh, long x_sn,
                           __global uint *codes, long c_off, long c_sb, long c_sh, long c_sn,
                           __global meta_t *scale, long s_off, long s_sb, long s_sh, long s_sn,
                           __global meta_t *minv, long m_off, long m_sb, long m_sh, long m_sn,
                           __global int *flags, long f_off, int has_flags, long total, int H, int N,
                           int DG, int bits, int group) {
    const long idx = get_global_id(0);
    if (idx >= total)
        return;
    const int j = (int)(idx % DG);
    const long rest = idx / DG;
    const int n = (int)(rest % N);
    const int bh = (int)(rest / N);
    const int b = bh / H, h = bh % H;
    const int per = 32 / bits;
    const float qmax = (float)((1 << bits) - 1);

    const long xb = x_off + b * x_sb + h * x_sh + n * x_sn + (long)j * group;
    float mn = INFINITY, mx = -INFINITY;
    uint bad = 0;
    for (int t = 0; t < group; t++) {
        float v = LOAD_X(x, xb + t);
        bad |= quant_check(v);
        mn = fmin(mn, v);
        mx = fmax(mx, v);
    }
    float s, m;
    bad = quant_params(mn, mx, bad, qmax, &s, &m);
    STORE_META(scale, s_off + b * s_sb + h * s_sh + n * s_sn + j, s);
    STORE_META(minv, m_off + b * m_sb + h * m_sh + n * m_sn + j, m);

    const long cb = c_off + b * c_sb + h * c_sh + n * c_sn + (long)j * (group / per);
    for (int w = 0; w < group / per; w++) {
        uint word = 0;
        for (int i = 0; i < per; i++) {
            float v = LOAD_X(x, xb + w * per + i);
            word |= quant_code(v, s, m, qmax) << (bits * i);
        }
        codes[cb + w] = word;
    }
    quant_raise(flags, f_off, has_flags, bad);
}

inline float dequant_one(uint word, int i, int bits, float s, float m) {
    const uint mask = (1u << bits) - 1u;
    float q = (float)((word >> (bits * i)) & mask);
    float qs = q * s;
    return qs + m;
}

/* Keys: item (bh, w, d) expands word w of channel d (P tokens). total = B*H*(N/P)*D. */
__kernel void dequant_keys(__global const uint *codes, long c_off, long c_sb, long c_sh, long c_sn,
                           __global const meta_t *scale, long s_off, long s_sb, long s_sh,
                           long s_sn, __global const meta_t *minv, long m_off, long m_sb, long m_sh,
                           long m_sn, __global x_t *out, long o_off, long o_sb, long o_sh,
                           long o_sn, long total, int H, int D, int NW, int bits, int group) {
    const long idx = get_global_id(0);
    if (idx >= total)
        return;
    const int d = (int)(idx % D);
    const long rest = idx / D;
    const int w = (int)(rest % NW);
    const int bh = (int)(rest / NW);
    const int b = bh / H, h = bh % H;
    const int per = 32 / bits;
    const int g = w * per / group;
    const float s = LOAD_META(scale, s_off + b * s_sb + h * s_sh + g * s_sn + d);
    const float m = LOAD_META(minv, m_off + b * m_sb + h * m_sh + g * m_sn + d);
    const uint word = codes[c_off + b * c_sb + h * c_sh + w * c_sn + d];
    const long ob = o_off + b * o_sb + h * o_sh + (long)w * per * o_sn + d;
    for (int i = 0; i < per; i++)
        STORE_X(out, ob + i * o_sn, dequant_one(word, i, bits, s, m));
}

/* Values: item (bh, n, w) expands word w of token n (P channels). total = B*H*N*(D/P). */
__kernel void dequant_values(__global const uint *codes, long c_off, long c_sb, long c_sh,
                             long c_sn, __global const meta_t *scale, long s_off, long s_sb,
                             long s_sh, long s_sn, __global const meta_t *minv, long m_off,
                             long m_sb, long m_sh, long m_sn, __global x_t *out, long o_off,
                             long o_sb, long o_sh, long o_sn, long total, int H, int N, int NW,
                             int bits, int group) {
    const long idx = get_global_id(0);
    if (idx >= total)
        return;
    const int w = (int)(idx % NW);
    const long rest = idx / NW;
    const int n = (int)(rest % N);
    const int bh = (int)(rest / N);
    const int b = bh / H, h = bh % H;
    const int per = 32 / bits;
    const int j = w * per / group;
    const float s = LOAD_META(scale, s_off + b * s_sb + h * s_sh + n * s_sn + j);
    const float m = LOAD_META(minv, m_off + b * m_sb + h * m_sh + n * m_sn + j);
    const uint word = codes[c_off + b * c_sb + h * c_sh + n * c_sn + w];
    const long ob = o_off + b * o_sb + h * o_sh + n * o_sn + (long)w * per;
    for (int i = 0; i < per; i++)
        STORE_X(out, ob + i, dequant_one(word, i, bits, s, m));
}

/* ---- quantized KV cache appends (include/clkv/quant_cache.h) ----
 *
 * Built with -D RES_DTYPE (residual storage dtype) and -D V_DTYPE (dtype of the appended
 * v) besides X_DTYPE (dtype of the appended k) and META_DTYPE. The cache's own buffers
 * are contiguous in the layouts of the header, indexed here from (sequence*Hkv + head) =
 * bh. counts is [2, B]: n_quant, then n_res. Sequence b appends c = clamp(cnt[b], 0, n)
 * tokens (n without cnt) after its t_old = n_quant + n_res tokens; n_quant is a multiple
 * of NR, so the blocks completed by the append are blocks n_quant/NR + blk with
 * (blk + 1)*NR <= t_new - n_quant. Their tokens come from the residual (positions < t_old,
 * slot p - n_quant) or from the input (rounded to the residual dtype first, so the result
 * does not depend on how the token history was cut into appends). Three kernels run in
 * this order on the in-order queue: quantize (keys and values; reads the old residual),
 * write the new residual, advance the counters; a one-token append (decode) runs all three
 * steps in one launch, cache_append_token. */
#ifdef RES_DTYPE
#ifndef V_DTYPE
#error "V_DTYPE must be defined with RES_DTYPE"
#endif
typedef CLKV_STORAGE(RES_DTYPE) res_t;
typedef CLKV_STORAGE(V_DTYPE) xv_t;
#define LOAD_RES CLKV_LOAD(RES_DTYPE)
#define STORE_RES CLKV_STORE(RES_DTYPE)
#define LOAD_XV CLKV_LOAD(V_DTYPE)

/* x rounded to the residual dtype (RNE), as f32. */
inline float cache_round_res(float x) {
#if RES_DTYPE == CLKV_DT_F16
    ushort h;
    vstore_half_rte(x, 0, (__private half *)&h);
    return vload_half(0, (const __private half *)&h);
#elif RES_DTYPE == CLKV_DT_BF16
    return clkv_bf16_to_f32(clkv_f32_to_bf16(x));
#else
    return x;
#endif
}

/* One appended tensor (k or v) and the cache buffers it goes to. */
#define CACHE_SIDE_PARAMS(T, s)                                                                    \
    __global const T *s##x, long s##x_off, long s##x_sb, long s##x_sh, long s##x_sn,               \
        __global res_t *s##res, __global uint *s##codes, __global meta_t *s##scale,                \
        __global meta_t *s##minv, int s##bits

/* Element c of token p of sequence b, head h: from the residual (p < t_old) or from row
 * p - t_old of the input, rounded to the residual dtype. */
#define CACHE_SRC(LOAD, s, b, h, bh, p, c)                                                         \
    ((p) < t_old ? LOAD_RES(s##res, ((long)(bh)*NR + ((p)-nq)) * D + (c))                          \
                 : cache_round_res(LOAD(s##x, s##x_off + (long)(b)*s##x_sb + (long)(h)*s##x_sh +   \
                                                  (long)((p)-t_old) * s##x_sn + (c))))

/* Per-sequence state: n_quant, t_old and t_new. */
inline void cache_state(__global const int *counts, __global const int *cnt, long cnt_off,
                        int has_cnt, int n, int B, int b, int *nq, int *t_old, int *t_new) {
    *nq = counts[b];
    *t_old = *nq + counts[B + b];
    *t_new = *t_old + (has_cnt ? clamp(cnt[cnt_off + b], 0, n) : n);
}

/* Quantize the blocks the append completes. Items [0, nk): keys, item (bh, blk, kg, d) =
 * key group kg (group tokens) of channel d in completed block blk; items [nk, total):
 * values, item (bh, blk, r, j) = channel group j of token r of block blk.
 * nk = B*Hkv * NB * (NR/group) * D, total = nk + B*Hkv * NB * NR * (D/group). */
inline void cache_quant_item(long idx, CACHE_SIDE_PARAMS(x_t, k_), CACHE_SIDE_PARAMS(xv_t, v_),
                             __global const int *cnt, long cnt_off, int has_cnt, int n,
                             __global const int *counts, __global int *flags, long nk, int B, int H,
                             int D, int NR, int NB, long CQ, int group) {
    const int keys = idx < nk;
    int b, h, bh, blk, a, e; /* keys: a = kg, e = d; values: a = r, e = j */
    if (keys) {
        e = (int)(idx % D);
        idx /= D;
        a = (int)(idx % (NR / group));
        idx /= NR / group;
    } else {
        idx -= nk;
        e = (int)(idx % (D / group));
        idx /= D / group;
        a = (int)(idx % NR);
        idx /= NR;
    }
    blk = (int)(idx % NB);
    bh = (int)(idx / NB);
    b = bh / H, h = bh % H;
    int nq, t_old, t_new;
    cache_state(counts, cnt, cnt_off, has_cnt, n, B, b, &nq, &t_old, &t_new);
    if (nq + (blk + 1) * NR > t_new)
        return;
    const int bits = keys ? k_bits : v_bits;
    const int per = 32 / bits;
    const float qmax = (float)((1 << bits) - 1);
    /* keys: token p0 + t, channel e; values: token p0, channel e*group + t */
    const int p0 = nq + blk * NR + (keys ? a * group : a);
#define ELEM(t)                                                                                    \
    (keys ? CACHE_SRC(LOAD_X, k_, b, h, bh, p0 + (t), e)                                           \
          : CACHE_SRC(LOAD_XV, v_, b, h, bh, p0, e * group + (t)))
    float mn = INFINITY, mx = -INFINITY;
    uint bad = 0;
    for (int t = 0; t < group; t++) {
        const float v = ELEM(t);
        bad |= quant_check(v);
        mn = fmin(mn, v);
        mx = fmax(mx, v);
    }
    float s, m;
    bad = quant_params(mn, mx, bad, qmax, &s, &m);
    long mi, cb, cstride;
    __global meta_t *scale = keys ? k_scale : v_scale;
    __global meta_t *minv = keys ? k_minv : v_minv;
    __global uint *codes = keys ? k_codes : v_codes;
    if (keys) {
        mi = ((long)bh * (CQ / group) + p0 / group) * D + e;
        cb = ((long)bh * (CQ / per) + p0 / per) * D + e;
        cstride = D;
    } else {
        mi = ((long)bh * CQ + p0) * (D / group) + e;
        cb = ((long)bh * CQ + p0) * (D / per) + (long)e * (group / per);
        cstride = 1;
    }
    STORE_META(scale, mi, s);
    STORE_META(minv, mi, m);
    for (int w = 0; w < group / per; w++) {
        uint word = 0;
        for (int i = 0; i < per; i++)
            word |= quant_code(ELEM(w * per + i), s, m, qmax) << (bits * i);
        codes[cb + w * cstride] = word;
    }
#undef ELEM
    quant_raise(flags, 0, 1, bad);
}

#define CACHE_SIDE_ARGS(s)                                                                         \
    s##x, s##x_off, s##x_sb, s##x_sh, s##x_sn, s##res, s##codes, s##scale, s##minv, s##bits

__kernel void cache_quant(CACHE_SIDE_PARAMS(x_t, k_), CACHE_SIDE_PARAMS(xv_t, v_),
                          __global const int *cnt, long cnt_off, int has_cnt, int n,
                          __global const int *counts, __global int *flags, long nk, long total,
                          int B, int H, int D, int NR, int NB, long CQ, int group) {
    const long idx = get_global_id(0);
    if (idx < total)
        cache_quant_item(idx, CACHE_SIDE_ARGS(k_), CACHE_SIDE_ARGS(v_), cnt, cnt_off, has_cnt, n,
                         counts, flags, nk, B, H, D, NR, NB, CQ, group);
}

/* Items (kv, bh, r, d): the appended tokens that end up in the residual are the last
 * min(c, t_new % NR) of the c appended; item r handles the r-th from the end, of k
 * (kv = 0) or v (kv = 1). total = 2 * B*Hkv * NRW * D, NRW = min(n, NR - 1). */
inline void cache_residual_item(long idx, CACHE_SIDE_PARAMS(x_t, k_), CACHE_SIDE_PARAMS(xv_t, v_),
                                __global const int *cnt, long cnt_off, int has_cnt, int n,
                                __global const int *counts, int B, int H, int D, int NR, int NRW) {
    const int d = (int)(idx % D);
    idx /= D;
    const int r = (int)(idx % NRW);
    idx /= NRW;
    const int bh = (int)(idx % ((long)B * H));
    const int kv = (int)(idx / ((long)B * H));
    const int b = bh / H, h = bh % H;
    int nq, t_old, t_new;
    cache_state(counts, cnt, cnt_off, has_cnt, n, B, b, &nq, &t_old, &t_new);
    const int c = t_new - t_old, nres = t_new % NR;
    if (r >= min(c, nres))
        return;
    const long jn = c - 1 - r;     /* appended token */
    const int slot = nres - 1 - r; /* = t_old + jn - (t_new - nres) */
    const long ri = ((long)bh * NR + slot) * D + d;
    if (kv == 0)
        STORE_RES(k_res, ri,
                  cache_round_res(LOAD_X(k_x, k_x_off + (long)b * k_x_sb + (long)h * k_x_sh +
                                                  jn * k_x_sn + d)));
    else
        STORE_RES(v_res, ri,
                  cache_round_res(LOAD_XV(v_x, v_x_off + (long)b * v_x_sb + (long)h * v_x_sh +
                                                   jn * v_x_sn + d)));
}

__kernel void cache_write_residual(CACHE_SIDE_PARAMS(x_t, k_), CACHE_SIDE_PARAMS(xv_t, v_),
                                   __global const int *cnt, long cnt_off, int has_cnt, int n,
                                   __global const int *counts, long total, int B, int H, int D,
                                   int NR, int NRW) {
    const long idx = get_global_id(0);
    if (idx < total)
        cache_residual_item(idx, CACHE_SIDE_ARGS(k_), CACHE_SIDE_ARGS(v_), cnt, cnt_off, has_cnt, n,
                            counts, B, H, D, NR, NRW);
}

/* Advance the counters of sequence b. */
inline void cache_advance_seq(int b, __global const int *cnt, long cnt_off, int has_cnt, int n,
                              __global int *counts, int B, int NR) {
    int nq, t_old, t_new;
    cache_state(counts, cnt, cnt_off, has_cnt, n, B, b, &nq, &t_old, &t_new);
    counts[b] = t_new - t_new % NR;
    counts[B + b] = t_new % NR;
}

/* Item b: advance the counters (the last kernel of an append). */
__kernel void cache_advance(__global const int *cnt, long cnt_off, int has_cnt, int n,
                            __global int *counts, int B, int NR) {
    const int b = (int)get_global_id(0);
    if (b < B)
        cache_advance_seq(b, cnt, cnt_off, has_cnt, n, counts, B, NR);
}

/* A one-token append (n = 1) in one launch: items [0, nq_total) are cache_quant's (NB = 1),
 * items [nq_total, total) cache_write_residual's (NRW = 1). For n = 1 they touch disjoint
 * data: a token that completes its block is quantized with the residual it reads and is
 * not written to the residual, any other token only goes to the residual. Every item has
 * read the counters before its work-group arrives at the ticket (an atomic counter, 0
 * between launches); the last work-group to arrive advances the counters and returns the
 * ticket to 0. Why: a decode step's append was three launches, which NVIDIA's host cost
 * per launch made slower than the attention it feeds at small batches. */
__kernel void cache_append_token(CACHE_SIDE_PARAMS(x_t, k_), CACHE_SIDE_PARAMS(xv_t, v_),
                                 __global const int *cnt, long cnt_off, int has_cnt,
                                 __global int *counts, __global int *flags, long nk, long nq_total,
                                 long total, int B, int H, int D, int NR, long CQ, int group,
                                 __global int *ticket) {
    __local int is_last;
    const long idx = get_global_id(0);
    if (idx < nq_total)
        cache_quant_item(idx, CACHE_SIDE_ARGS(k_), CACHE_SIDE_ARGS(v_), cnt, cnt_off, has_cnt, 1,
                         counts, flags, nk, B, H, D, NR, 1, CQ, group);
    else if (idx < total)
        cache_residual_item(idx - nq_total, CACHE_SIDE_ARGS(k_), CACHE_SIDE_ARGS(v_), cnt, cnt_off,
                            has_cnt, 1, counts, B, H, D, NR, 1);
    barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
    if (get_local_id(0) == 0) {
        clkv_fence_device();
        const int last = atomic_inc(ticket) == (int)get_num_groups(0) - 1;
        if (last)
            *ticket = 0;
        is_last = last;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (is_last)
        for (int b = (int)get_local_id(0); b < B; b += (int)get_local_size(0))
            cache_advance_seq(b, cnt, cnt_off, has_cnt, 1, counts, B, NR);
}
#endif /* RES_DTYPE */
