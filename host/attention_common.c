/* Argument checks shared by the dense attention operators (see attention_common.h). */
#include "host/attention_common.h"

#include <math.h>

clkv_status clkv__attn_check_kv(clkv_context *ctx, const clkv_tensor *k, const clkv_tensor *v,
                                int64_t B, int64_t D) {
    clkv_status st;
    if (v->dtype != k->dtype)
        return clkv__fail(ctx, CLKV_ERR_ARG_DTYPE, "v: dtype %s differs from k's %s",
                          clkv_dtype_name(v->dtype), clkv_dtype_name(k->dtype));
    if (D != 64 && D != 128 && D != 256)
        return clkv__fail(ctx, CLKV_ERR_ARG_UNSUPPORTED,
                          "q: head dim D = %lld, supported: 64, 128, 256", (long long)D);
    if ((st = clkv__check_dim(ctx, k, "k", 0, B, "batch of q")) ||
        (st = clkv__check_dim(ctx, k, "k", 3, D, "head dim of q")))
        return st;
    for (int i = 0; i < 4; i++)
        if ((st = clkv__check_dim(ctx, v, "v", i, k->dims[i], "must match k")))
            return st;
    return CLKV_OK;
}

clkv_status clkv__attn_check_sizes(clkv_context *ctx, int64_t B, int64_t Hq, int64_t Hkv, int64_t L,
                                   int64_t max_length) {
    if (Hkv == 0 && Hq > 0)
        return clkv__fail(ctx, CLKV_ERR_ARG_SHAPE, "k: dims[1] = Hkv = 0 with Hq = %lld",
                          (long long)Hq);
    if (Hkv > 0 && Hq % Hkv != 0)
        return clkv__fail(
            ctx, CLKV_ERR_ARG_SHAPE,
            "q: Hq = %lld is not a multiple of k's Hkv = %lld (GQA needs Hq %% Hkv == 0)",
            (long long)Hq, (long long)Hkv);
    if (max_length < -1 || max_length > L)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "max_length: %lld is outside [-1, L = %lld]",
                          (long long)max_length, (long long)L);
    if (L > INT32_MAX || B > 65535 || Hq > 65535)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE,
                          "k: L = %lld, B = %lld, Hq = %lld exceed the supported 2^31-1 tokens, "
                          "65535 sequences, 65535 heads",
                          (long long)L, (long long)B, (long long)Hq);
    return CLKV_OK;
}

clkv_status clkv__attn_check_scale(clkv_context *ctx, float scale) {
    if (!isfinite(scale))
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "scale: %g is not finite", (double)scale);
    return CLKV_OK;
}

clkv_status clkv__attn_set_out_args(clkv_context *ctx, cl_kernel k, const char *label, int first,
                                    const clkv_tensor *o, const clkv_tensor *lse) {
    const cl_mem o_buf = o->buf, lse_buf = lse->buf;
    const cl_long o_off = clkv__elem_offset(o), o_sb = o->strides[0], o_sh = o->strides[1];
    const cl_long lse_off = lse_buf ? clkv__elem_offset(lse) : 0,
                  lse_sb = lse_buf ? lse->strides[0] : 0, lse_sh = lse_buf ? lse->strides[1] : 0;
    const cl_int has_lse = lse_buf != NULL;
    return clkv__set_args_at(ctx, k, label, first, 9, CLKV_ARG(o_buf), CLKV_ARG(o_off),
                             CLKV_ARG(o_sb), CLKV_ARG(o_sh), CLKV_ARG(lse_buf), CLKV_ARG(lse_off),
                             CLKV_ARG(lse_sb), CLKV_ARG(lse_sh), CLKV_ARG(has_lse));
}

clkv_status clkv__attn_set_merge_args(clkv_context *ctx, cl_kernel km, cl_mem ws, cl_long ml_off,
                                      cl_int splits, cl_int Hq, const clkv_tensor *o,
                                      const clkv_tensor *lse) {
    clkv_status st = clkv__set_args(ctx, km, "attention_decode_merge", 4, CLKV_ARG(ws),
                                    CLKV_ARG(ml_off), CLKV_ARG(splits), CLKV_ARG(Hq));
    return st ? st : clkv__attn_set_out_args(ctx, km, "attention_decode_merge", 4, o, lse);
}

clkv_status clkv__attn_merge_kernel(clkv_context *ctx, clkv_dtype o_dtype, int64_t D,
                                    cl_kernel *km) {
    clkv_defs defs;
    clkv__defs_init(&defs);
    clkv__defs_int(&defs, "O_DTYPE", o_dtype);
    clkv__defs_int(&defs, "HEAD_DIM", D);
    clkv__defs_int(&defs, "MERGE_WG", CLKV_ATTN_MERGE_WG);
    clkv__defs_int(&defs, "MAX_SPLITS", CLKV_ATTN_MERGE_MAX_SPLITS);
    return clkv__get_kernel(ctx, "attention_merge.cl", &defs, "attention_decode_merge", km);
}

clkv_status clkv__attn_enqueue_merge(clkv_context *ctx, cl_kernel km, int64_t B, int64_t Hq,
                                     cl_event *done) {
    const size_t gm[2] = {(size_t)Hq * CLKV_ATTN_MERGE_WG, (size_t)B};
    const size_t lm[2] = {CLKV_ATTN_MERGE_WG, 1};
    return clkv__enqueue(ctx, km, "attention_decode_merge", 2, gm, lm, done);
}

clkv_status clkv__attn_set_qkv_args(clkv_context *ctx, cl_kernel kernel, const char *label,
                                    const clkv_tensor *q, const clkv_tensor *k,
                                    const clkv_tensor *v) {
    const cl_long q_off = clkv__elem_offset(q), q_sb = q->strides[0], q_sh = q->strides[1];
    const cl_long k_off = clkv__elem_offset(k), k_sb = k->strides[0], k_sh = k->strides[1],
                  k_sl = k->strides[2];
    const cl_long v_off = clkv__elem_offset(v), v_sb = v->strides[0], v_sh = v->strides[1],
                  v_sl = v->strides[2];
    return clkv__set_args(ctx, kernel, label, CLKV_ATTN_QKV_NARGS, CLKV_ARG(q->buf),
                          CLKV_ARG(q_off), CLKV_ARG(q_sb), CLKV_ARG(q_sh), CLKV_ARG(k->buf),
                          CLKV_ARG(k_off), CLKV_ARG(k_sb), CLKV_ARG(k_sh), CLKV_ARG(k_sl),
                          CLKV_ARG(v->buf), CLKV_ARG(v_off), CLKV_ARG(v_sb), CLKV_ARG(v_sh),
                          CLKV_ARG(v_sl));
}

void clkv__attn_rows_defs(clkv_defs *defs, clkv_dtype q_dtype, clkv_dtype kv_dtype, int64_t D,
                          int group, int epl, int wg, int unroll, int vec_aligned) {
    clkv__defs_int(defs, "Q_DTYPE", q_dtype);
    clkv__defs_int(defs, "KV_DTYPE", kv_dtype);
    clkv__defs_int(defs, "HEAD_DIM", D);
    clkv__defs_int(defs, "GROUP", group);
    clkv__defs_int(defs, "EPL", epl);
    clkv__defs_int(defs, "WG_SIZE", wg);
    clkv__defs_int(defs, "UNROLL", unroll);
    clkv__defs_int(defs, "VEC_ALIGNED", vec_aligned);
}
