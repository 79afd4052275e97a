/* clkv_pariskv_encode / clkv_pariskv_query_transform (SPEC §4): validation, sign and
 * level preparation, launch. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "host/pariskv_internal.h"

#define KERNEL_FILE "pariskv_encode.cl"
#define TARGET_WG 128

static int is_supported_dim(int64_t d) {
    return d == 64 || d == 128 || d == 256;
}

/* SRHT for D in {64, 128, 256}; the dense rotation for D not a power of two, up to
 * CLKV_PARISKV_DENSE_MAX_D. */
static clkv_status check_head_dim(clkv_context *ctx, const char *name, int64_t D) {
    if (is_supported_dim(D))
        return CLKV_OK;
    if (clkv__pariskv_is_dense(D) && D >= 2 && D <= CLKV_PARISKV_DENSE_MAX_D)
        return CLKV_OK;
    return clkv__fail(ctx, CLKV_ERR_ARG_UNSUPPORTED,
                      "%s: head dim D = %lld, supported: 64, 128, 256 (fast Hadamard) or a "
                      "non-power-of-two D in [2, %d] (dense rotation)",
                      name, (long long)D, CLKV_PARISKV_DENSE_MAX_D);
}

/* Explicit sigma only exists for the SRHT. */
static clkv_status check_signs_path(clkv_context *ctx, const int8_t *signs, int64_t D) {
    if (signs && clkv__pariskv_is_dense(D))
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE,
                          "signs: explicit sigma applies to the power-of-two (SRHT) transform; "
                          "D = %lld uses the dense rotation generated from seed (pass NULL)",
                          (long long)D);
    return CLKV_OK;
}

/* Bit j of word j/32 set when sigma_j = -1. */
clkv_status clkv__pariskv_pack_signs(clkv_context *ctx, const int8_t *signs, uint64_t seed,
                                     int64_t D, cl_uint8 *out) {
    int8_t gen[256];
    memset(out, 0, sizeof *out);
    if (!signs) {
        clkv_pariskv_signs_from_seed(seed, D, gen);
        signs = gen;
    }
    for (int64_t j = 0; j < D; j++) {
        if (signs[j] != 1 && signs[j] != -1)
            return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "signs: signs[%lld] = %d is not +1 or -1",
                              (long long)j, (int)signs[j]);
        if (signs[j] == -1)
            out->s[j >> 5] |= 1u << (j & 31);
    }
    return CLKV_OK;
}

static clkv_status check_levels(clkv_context *ctx, const clkv_pariskv_levels *l, int32_t m) {
    if (l->m != m)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "levels: levels->m = %d differs from m = %d",
                          (int)l->m, (int)m);
    for (int t = 0; t < CLKV_PARISKV_NUM_THRESHOLDS; t++)
        if (!(l->tau[t] > 0.0f && l->tau[t] < 1.0f) || (t > 0 && !(l->tau[t] > l->tau[t - 1])))
            return clkv__fail(ctx, CLKV_ERR_ARG_RANGE,
                              "levels: tau[%d] = %g is not in (0, 1) and increasing", t,
                              (double)l->tau[t]);
    for (int t = 0; t < CLKV_PARISKV_NUM_LEVELS; t++)
        if (!(l->a[t] > 0.0f && l->a[t] <= 1.0f) || (t > 0 && !(l->a[t] > l->a[t - 1])))
            return clkv__fail(ctx, CLKV_ERR_ARG_RANGE,
                              "levels: a[%d] = %g is not in (0, 1] and increasing", t,
                              (double)l->a[t]);
    return CLKV_OK;
}

/* ---------------------------------------------------------------------------------- */
/* Encode                                                                             */
/* ---------------------------------------------------------------------------------- */

/* D/2 work-items transform one vector; a work-group takes `kpw` vectors (about
 * TARGET_WG work-items, within the device's limit). */
static clkv_status vectors_per_group(clkv_context *ctx, const char *name, int64_t D, int *kpw,
                                     int *wg) {
    const int tpk = (int)(D / 2);
    if ((size_t)tpk > ctx->info.max_work_group_size)
        return clkv__fail(ctx, CLKV_ERR_DEVICE_LIMIT,
                          "%s: D = %lld needs work-groups of %d, the device allows %zu", name,
                          (long long)D, tpk, (size_t)ctx->info.max_work_group_size);
    int k = TARGET_WG / tpk > 0 ? TARGET_WG / tpk : 1;
    while (k > 1 && (size_t)(k * tpk) > ctx->info.max_work_group_size)
        k /= 2;
    *kpw = k;
    *wg = k * tpk;
    return CLKV_OK;
}

static clkv_status validate_encode(clkv_context *ctx, const clkv_pariskv_encode_args *a) {
    clkv_status st;
    if ((st = clkv__check_tensor(ctx, &a->k, "k", 4, CLKV_FLOAT_DTYPES)) ||
        (st = clkv__check_optional_tensor(ctx, &a->lengths, "lengths", 1,
                                          CLKV_DTYPE_BIT(CLKV_I32))) ||
        (st = clkv__check_tensor(ctx, &a->ids, "ids", 4, CLKV_DTYPE_BIT(CLKV_U8))) ||
        (st = clkv__check_tensor(ctx, &a->codes, "codes", 4, CLKV_DTYPE_BIT(CLKV_U8))) ||
        (st = clkv__check_tensor(ctx, &a->weights, "weights", 4, CLKV_FLOAT_DTYPES)) ||
        (st = clkv__check_optional_tensor(ctx, &a->counts, "counts", 4, CLKV_DTYPE_BIT(CLKV_U32))))
        return st;
    const int64_t B = a->k.dims[0], Hkv = a->k.dims[1], L = a->k.dims[2], D = a->k.dims[3];
    if ((st = check_head_dim(ctx, "k", D)))
        return st;
    if (a->m < CLKV_PARISKV_MIN_M || a->m > CLKV_PARISKV_MAX_M)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "m: %d is outside [2, 8]", (int)a->m);
    if (D % a->m != 0)
        return clkv__fail(ctx, CLKV_ERR_ARG_SHAPE, "m: %d does not divide the head dim D = %lld",
                          (int)a->m, (long long)D);
    if (a->m % 2 != 0)
        return clkv__fail(ctx, CLKV_ERR_ARG_SHAPE,
                          "m: %d is odd; a code byte holds two coordinates of one block, so m "
                          "must be even",
                          (int)a->m);
    if ((st = check_signs_path(ctx, a->signs, D)))
        return st;
    const int64_t nblk = D / a->m;
    const struct {
        const clkv_tensor *t;
        const char *name;
        int64_t last;
    } outs[3] = {
        {&a->ids, "ids", nblk}, {&a->codes, "codes", D / 2}, {&a->weights, "weights", nblk}};
    for (int i = 0; i < 3; i++) {
        if ((st = clkv__check_dim(ctx, outs[i].t, outs[i].name, 0, B, "batch of k")) ||
            (st = clkv__check_dim(ctx, outs[i].t, outs[i].name, 1, Hkv, "KV heads of k")) ||
            (st = clkv__check_dim(ctx, outs[i].t, outs[i].name, 2, L, "tokens of k")) ||
            (st = clkv__check_dim(ctx, outs[i].t, outs[i].name, 3, outs[i].last,
                                  i == 1 ? "D / 2" : "nblocks = D / m")))
            return st;
    }
    if (a->counts.buf &&
        ((st = clkv__check_dim(ctx, &a->counts, "counts", 0, B, "batch of k")) ||
         (st = clkv__check_dim(ctx, &a->counts, "counts", 1, Hkv, "KV heads of k")) ||
         (st = clkv__check_dim(ctx, &a->counts, "counts", 2, nblk, "nblocks = D / m")) ||
         (st = clkv__check_dim(ctx, &a->counts, "counts", 3, (int64_t)1 << a->m, "2^m"))))
        return st;
    if (a->lengths.buf && (st = clkv__check_dim(ctx, &a->lengths, "lengths", 0, B, "batch of k")))
        return st;
    if (B > 65535 || Hkv > 65535 || L > INT32_MAX)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE,
                          "k: B = %lld, Hkv = %lld, L = %lld exceed the supported 65535 sequences, "
                          "65535 heads, 2^31-1 tokens",
                          (long long)B, (long long)Hkv, (long long)L);
    const int64_t end = a->end < 0 ? L : a->end;
    if (a->end < -1 || end > L)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "end: %lld is outside [-1, L = %lld]",
                          (long long)a->end, (long long)L);
    if (a->start < 0 || a->start > end)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "start: %lld is outside [0, end = %lld]",
                          (long long)a->start, (long long)end);
    if (a->levels && (st = check_levels(ctx, a->levels, a->m)))
        return st;
    return CLKV_OK;
}

clkv_status clkv_pariskv_encode(clkv_context *ctx, const clkv_pariskv_encode_args *args,
                                cl_event *done) {
    if (!ctx || !args)
        return clkv__fail_entry(ctx, args);
    clkv_status st = validate_encode(ctx, args);
    if (st != CLKV_OK)
        return st;
    const int64_t B = args->k.dims[0], Hkv = args->k.dims[1], L = args->k.dims[2],
                  D = args->k.dims[3];
    const int dense = clkv__pariskv_is_dense(D);
    cl_uint8 signs = {{0}};
    if (!dense && (st = clkv__pariskv_pack_signs(ctx, args->signs, args->seed, D, &signs)))
        return st;
    clkv_pariskv_levels lv;
    if (args->levels)
        lv = *args->levels;
    else if ((st = clkv_pariskv_levels_default(args->m, args->computed_m8, &lv)))
        return clkv__fail(ctx, st, "levels: %s", clkv_last_error(NULL));

    const int64_t end = args->end < 0 ? L : args->end;
    const int64_t n = end - args->start;
    if (B == 0 || Hkv == 0 || n == 0)
        return clkv__marker(ctx, done);
    if (dense)
        return clkv__pariskv_encode_dense(ctx, args, &lv, done);

    int kpw = 0, wg = 0;
    if ((st = vectors_per_group(ctx, "k", D, &kpw, &wg)))
        return st;

    clkv_defs defs;
    clkv__defs_init(&defs);
    clkv__defs_int(&defs, "PARISKV_QUERY", 0);
    clkv__defs_int(&defs, "IN_DTYPE", args->k.dtype);
    clkv__defs_int(&defs, "W_DTYPE", args->weights.dtype);
    clkv__defs_int(&defs, "HEAD_DIM", D);
    clkv__defs_int(&defs, "SUB_M", args->m);
    clkv__defs_int(&defs, "KPW", kpw);
    cl_kernel kern;
    if ((st = clkv__get_kernel(ctx, KERNEL_FILE, &defs, "pariskv_encode", &kern)))
        return st;

    cl_float8 tau, lev;
    for (int t = 0; t < 8; t++) {
        tau.s[t] = t < 7 ? lv.tau[t] : 2.0f;
        lev.s[t] = lv.a[t];
    }
    const clkv_tensor *K = &args->k, *I = &args->ids, *C = &args->codes, *W = &args->weights,
                      *N = &args->counts;
    const cl_long k_off = clkv__elem_offset(K), k_sb = K->strides[0], k_sh = K->strides[1],
                  k_sl = K->strides[2];
    const cl_mem len_buf = args->lengths.buf;
    const cl_long len_off = len_buf ? clkv__elem_offset(&args->lengths) : 0;
    const cl_int has_len = len_buf != NULL, start = (cl_int)args->start, endi = (cl_int)end;
    const cl_long i_off = clkv__elem_offset(I), i_sb = I->strides[0], i_sh = I->strides[1],
                  i_sl = I->strides[2];
    const cl_long c_off = clkv__elem_offset(C), c_sb = C->strides[0], c_sh = C->strides[1],
                  c_sl = C->strides[2];
    const cl_long w_off = clkv__elem_offset(W), w_sb = W->strides[0], w_sh = W->strides[1],
                  w_sl = W->strides[2];
    const cl_mem n_buf = N->buf;
    const cl_long n_off = n_buf ? clkv__elem_offset(N) : 0, n_sb = n_buf ? N->strides[0] : 0,
                  n_sh = n_buf ? N->strides[1] : 0, n_sblk = n_buf ? N->strides[2] : 0;
    const cl_int has_counts = n_buf != NULL;
    st = clkv__set_args(ctx, kern, "pariskv_encode", 34, CLKV_ARG(K->buf), CLKV_ARG(k_off),
                        CLKV_ARG(k_sb), CLKV_ARG(k_sh), CLKV_ARG(k_sl), CLKV_ARG(len_buf),
                        CLKV_ARG(len_off), CLKV_ARG(has_len), CLKV_ARG(start), CLKV_ARG(endi),
                        CLKV_ARG(signs), CLKV_ARG(tau), CLKV_ARG(lev), CLKV_ARG(I->buf),
                        CLKV_ARG(i_off), CLKV_ARG(i_sb), CLKV_ARG(i_sh), CLKV_ARG(i_sl),
                        CLKV_ARG(C->buf), CLKV_ARG(c_off), CLKV_ARG(c_sb), CLKV_ARG(c_sh),
                        CLKV_ARG(c_sl), CLKV_ARG(W->buf), CLKV_ARG(w_off), CLKV_ARG(w_sb),
                        CLKV_ARG(w_sh), CLKV_ARG(w_sl), CLKV_ARG(n_buf), CLKV_ARG(n_off),
                        CLKV_ARG(n_sb), CLKV_ARG(n_sh), CLKV_ARG(n_sblk), CLKV_ARG(has_counts));
    if (st != CLKV_OK)
        return st;
    const size_t groups = (size_t)((n + kpw - 1) / kpw);
    const size_t gs[3] = {groups * (size_t)wg, (size_t)Hkv, (size_t)B};
    const size_t ls[3] = {(size_t)wg, 1, 1};
    clkv__log(ctx, "pariskv_encode: B=%lld Hkv=%lld D=%lld m=%d tokens=[%lld,%lld) kpw=%d wg=%d",
              (long long)B, (long long)Hkv, (long long)D, (int)args->m, (long long)args->start,
              (long long)end, kpw, wg);
    return clkv__launch(ctx, kern, "pariskv_encode", 3, gs, ls, 0, done);
}

/* ---------------------------------------------------------------------------------- */
/* Query transform                                                                    */
/* ---------------------------------------------------------------------------------- */

static clkv_status validate_query(clkv_context *ctx, const clkv_pariskv_query_args *a) {
    clkv_status st;
    if ((st = clkv__check_tensor(ctx, &a->q, "q", 3, CLKV_FLOAT_DTYPES)) ||
        (st = clkv__check_tensor(ctx, &a->q_rot, "q_rot", 3, CLKV_DTYPE_BIT(CLKV_F32))) ||
        (st = clkv__check_optional_tensor(ctx, &a->q_norm, "q_norm", 2, CLKV_DTYPE_BIT(CLKV_F32))))
        return st;
    const int64_t B = a->q.dims[0], Hq = a->q.dims[1], D = a->q.dims[2];
    const int64_t Hkv = a->q_rot.dims[1];
    if ((st = check_head_dim(ctx, "q", D)) || (st = check_signs_path(ctx, a->signs, D)))
        return st;
    if ((st = clkv__check_dim(ctx, &a->q_rot, "q_rot", 0, B, "batch of q")) ||
        (st = clkv__check_dim(ctx, &a->q_rot, "q_rot", 2, D, "head dim of q")))
        return st;
    if (a->q_norm.buf &&
        ((st = clkv__check_dim(ctx, &a->q_norm, "q_norm", 0, B, "batch of q")) ||
         (st = clkv__check_dim(ctx, &a->q_norm, "q_norm", 1, Hkv, "KV heads of q_rot"))))
        return st;
    if (Hkv == 0 && Hq > 0)
        return clkv__fail(ctx, CLKV_ERR_ARG_SHAPE, "q_rot: dims[1] = Hkv = 0 with Hq = %lld",
                          (long long)Hq);
    if (Hkv > 0 && Hq % Hkv != 0)
        return clkv__fail(ctx, CLKV_ERR_ARG_SHAPE,
                          "q: Hq = %lld is not a multiple of q_rot's Hkv = %lld", (long long)Hq,
                          (long long)Hkv);
    if (B > 65535 || Hq > 65535)
        return clkv__fail(
            ctx, CLKV_ERR_ARG_RANGE,
            "q: B = %lld, Hq = %lld exceed the supported 65535 sequences, 65535 heads",
            (long long)B, (long long)Hq);
    return CLKV_OK;
}

clkv_status clkv_pariskv_query_transform(clkv_context *ctx, const clkv_pariskv_query_args *args,
                                         cl_event *done) {
    if (!ctx || !args)
        return clkv__fail_entry(ctx, args);
    clkv_status st = validate_query(ctx, args);
    if (st != CLKV_OK)
        return st;
    const int64_t B = args->q.dims[0], Hq = args->q.dims[1], D = args->q.dims[2],
                  Hkv = args->q_rot.dims[1];
    const int dense = clkv__pariskv_is_dense(D);
    cl_uint8 signs = {{0}};
    if (!dense && (st = clkv__pariskv_pack_signs(ctx, args->signs, args->seed, D, &signs)))
        return st;
    if (B == 0 || Hkv == 0)
        return clkv__marker(ctx, done);
    if (dense)
        return clkv__pariskv_query_dense(ctx, args, done);
    int kpw = 0, wg = 0;
    if ((st = vectors_per_group(ctx, "q", D, &kpw, &wg)))
        return st;
    clkv_defs defs;
    clkv__defs_init(&defs);
    clkv__defs_int(&defs, "PARISKV_QUERY", 1);
    clkv__defs_int(&defs, "IN_DTYPE", args->q.dtype);
    clkv__defs_int(&defs, "HEAD_DIM", D);
    clkv__defs_int(&defs, "KPW", kpw);
    cl_kernel kern;
    if ((st = clkv__get_kernel(ctx, KERNEL_FILE, &defs, "pariskv_query_transform", &kern)))
        return st;
    const clkv_tensor *Q = &args->q, *R = &args->q_rot, *NQ = &args->q_norm;
    const cl_long q_off = clkv__elem_offset(Q), q_sb = Q->strides[0], q_sh = Q->strides[1];
    const cl_int hkv = (cl_int)Hkv, G = (cl_int)(Hq / Hkv);
    const cl_long r_off = clkv__elem_offset(R), r_sb = R->strides[0], r_sh = R->strides[1];
    const cl_mem qn_buf = NQ->buf;
    const cl_long qn_off = qn_buf ? clkv__elem_offset(NQ) : 0, qn_sb = qn_buf ? NQ->strides[0] : 0,
                  qn_sh = qn_buf ? NQ->strides[1] : 0;
    const cl_int has_qn = qn_buf != NULL;
    st = clkv__set_args(ctx, kern, "pariskv_query_transform", 16, CLKV_ARG(Q->buf), CLKV_ARG(q_off),
                        CLKV_ARG(q_sb), CLKV_ARG(q_sh), CLKV_ARG(hkv), CLKV_ARG(G), CLKV_ARG(signs),
                        CLKV_ARG(R->buf), CLKV_ARG(r_off), CLKV_ARG(r_sb), CLKV_ARG(r_sh),
                        CLKV_ARG(qn_buf), CLKV_ARG(qn_off), CLKV_ARG(qn_sb), CLKV_ARG(qn_sh),
                        CLKV_ARG(has_qn));
    if (st != CLKV_OK)
        return st;
    const size_t gs[2] = {(size_t)((Hkv + kpw - 1) / kpw) * (size_t)wg, (size_t)B};
    const size_t ls[2] = {(size_t)wg, 1};
    return clkv__launch(ctx, kern, "pariskv_query_transform", 2, gs, ls, 0, done);
}
