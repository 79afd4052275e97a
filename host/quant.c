/* KIVI-style quantization (SPEC §3): validation and launches of cl_kernels/quant.cl. */
#include <stdio.h>
#include <string.h>

#include "clkv/quant.h"
#include "runtime/internal.h"

#define KERNEL_FILE "quant.cl"
#define QUANT_WG 64

#define META_DTYPES (CLKV_DTYPE_BIT(CLKV_F16) | CLKV_DTYPE_BIT(CLKV_F32))

/* One quantize or dequantize operation on one tensor: the argument names used in
 * messages, the tensors, and the shape taken from the float tensor. */
typedef struct qop {
    int keys;    /* 1: per-channel keys layout, 0: per-token values layout */
    int dequant; /* 1: x is the output of a dequantization */
    const clkv_tensor *x, *codes, *scale, *min;
    const char *nx, *ncodes, *nscale, *nmin, *nbits, *ngroup;
    int bits, group;
    int64_t B, H, N, D;
} qop;

static int bits_ok(int b) {
    return b == 2 || b == 4 || b == 8;
}

static int group_ok(int g) {
    return g == 16 || g == 32 || g == 64 || g == 128 || g == 256;
}

static clkv_status check_dims4(clkv_context *ctx, const clkv_tensor *t, const char *name,
                               const int64_t want[4], const char *why) {
    clkv_status st;
    for (int i = 0; i < 4; i++)
        if ((st = clkv__check_dim(ctx, t, name, i, want[i], why)))
            return st;
    return CLKV_OK;
}

/* Everything about one operation except flags. */
static clkv_status validate_op(clkv_context *ctx, qop *op) {
    clkv_status st;
    if ((st = clkv__check_tensor(ctx, op->x, op->nx, 4, CLKV_FLOAT_DTYPES)) ||
        (st = clkv__check_tensor(ctx, op->codes, op->ncodes, 4, CLKV_DTYPE_BIT(CLKV_U32))) ||
        (st = clkv__check_tensor(ctx, op->scale, op->nscale, 4, META_DTYPES)) ||
        (st = clkv__check_tensor(ctx, op->min, op->nmin, 4, META_DTYPES)))
        return st;
    if (op->min->dtype != op->scale->dtype)
        return clkv__fail(ctx, CLKV_ERR_ARG_DTYPE, "%s: dtype %s differs from %s's %s", op->nmin,
                          clkv_dtype_name(op->min->dtype), op->nscale,
                          clkv_dtype_name(op->scale->dtype));
    if (!bits_ok(op->bits))
        return clkv__fail(ctx, CLKV_ERR_ARG_UNSUPPORTED, "%s: %d, supported: 2, 4, 8", op->nbits,
                          op->bits);
    if (!group_ok(op->group))
        return clkv__fail(ctx, CLKV_ERR_ARG_UNSUPPORTED, "%s: %d, supported: 16, 32, 64, 128, 256",
                          op->ngroup, op->group);
    op->B = op->x->dims[0];
    op->H = op->x->dims[1];
    op->N = op->x->dims[2];
    op->D = op->x->dims[3];
    if (op->N > INT32_MAX || op->D > INT32_MAX || (op->H > 0 && op->B > INT32_MAX / op->H))
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE,
                          "%s: B*H = %lld*%lld, N = %lld or D = %lld exceeds 2^31-1", op->nx,
                          (long long)op->B, (long long)op->H, (long long)op->N, (long long)op->D);
    const int64_t per = 32 / op->bits, G = op->group;
    if (op->keys && op->N % G != 0)
        return clkv__fail(ctx, CLKV_ERR_ARG_SHAPE,
                          "%s: N = dims[2] = %lld is not a multiple of %s = %d (keys are grouped "
                          "along tokens)",
                          op->nx, (long long)op->N, op->ngroup, op->group);
    if (!op->keys && op->D % G != 0)
        return clkv__fail(ctx, CLKV_ERR_ARG_SHAPE,
                          "%s: D = dims[3] = %lld is not a multiple of %s = %d (values are grouped "
                          "along channels)",
                          op->nx, (long long)op->D, op->ngroup, op->group);
    const char *why_c = op->keys ? "[B, H, N / (32/bits), D]" : "[B, H, N, D / (32/bits)]";
    const char *why_m = op->keys ? "[B, H, N / group, D]" : "[B, H, N, D / group]";
    int64_t wc[4] = {op->B, op->H, op->N, op->D}, wm[4] = {op->B, op->H, op->N, op->D};
    if (op->keys) {
        wc[2] = op->N / per;
        wm[2] = op->N / G;
    } else {
        wc[3] = op->D / per;
        wm[3] = op->D / G;
    }
    if ((st = check_dims4(ctx, op->codes, op->ncodes, wc, why_c)) ||
        (st = check_dims4(ctx, op->scale, op->nscale, wm, why_m)) ||
        (st = check_dims4(ctx, op->min, op->nmin, wm, why_m)))
        return st;
    return CLKV_OK;
}

static clkv_status check_flags(clkv_context *ctx, const clkv_tensor *flags, int meta_f16,
                               int promise) {
    clkv_status st;
    if ((st = clkv__check_optional_tensor(ctx, flags, "flags", 1, CLKV_DTYPE_BIT(CLKV_I32))))
        return st;
    if (flags->buf && (st = clkv__check_dim(ctx, flags, "flags", 0, 1, "one int32 word")))
        return st;
    if (!flags->buf && meta_f16 && !promise)
        return clkv__fail(ctx, CLKV_ERR_ARG_NULL,
                          "flags: required with f16 metadata (inputs above 65504 are detected on "
                          "the device), or set inputs_in_f16_range = 1");
    return CLKV_OK;
}

static int64_t op_items(const qop *op) {
    const int64_t per = 32 / op->bits;
    if (op->dequant)
        return op->keys ? op->B * op->H * (op->N / per) * op->D
                        : op->B * op->H * op->N * (op->D / per);
    return op->keys ? op->B * op->H * (op->N / op->group) * op->D
                    : op->B * op->H * op->N * (op->D / op->group);
}

/* Enqueue one validated operation. */
static clkv_status launch_op(clkv_context *ctx, const qop *op, const clkv_tensor *flags,
                             cl_event *done) {
    const int64_t items = op_items(op);
    if (items == 0)
        return clkv__marker(ctx, done);
    clkv_defs defs;
    clkv__defs_init(&defs);
    clkv__defs_int(&defs, "X_DTYPE", op->x->dtype);
    clkv__defs_int(&defs, "META_DTYPE", op->scale->dtype);
    const char *name = op->dequant ? (op->keys ? "dequant_keys" : "dequant_values")
                                   : (op->keys ? "quant_keys" : "quant_values");
    cl_kernel kern;
    clkv_status st = clkv__get_kernel(ctx, KERNEL_FILE, &defs, name, &kern);
    if (st)
        return st;

    const cl_long x_off = clkv__elem_offset(op->x), x_sb = op->x->strides[0],
                  x_sh = op->x->strides[1], x_sn = op->x->strides[2];
    const cl_long c_off = clkv__elem_offset(op->codes), c_sb = op->codes->strides[0],
                  c_sh = op->codes->strides[1], c_sn = op->codes->strides[2];
    const cl_long s_off = clkv__elem_offset(op->scale), s_sb = op->scale->strides[0],
                  s_sh = op->scale->strides[1], s_sn = op->scale->strides[2];
    const cl_long m_off = clkv__elem_offset(op->min), m_sb = op->min->strides[0],
                  m_sh = op->min->strides[1], m_sn = op->min->strides[2];
    const cl_long total = items;
    const cl_int H = (cl_int)op->H, N = (cl_int)op->N, D = (cl_int)op->D, bits = op->bits,
                 group = op->group, per = 32 / op->bits;
    if (op->dequant) {
        /* keys: (H, D, N/P); values: (H, N, D/P) */
        const cl_int a1 = op->keys ? D : N, a2 = op->keys ? N / per : D / per;
        st = clkv__set_args(
            ctx, kern, name, 26, CLKV_ARG(op->codes->buf), CLKV_ARG(c_off), CLKV_ARG(c_sb),
            CLKV_ARG(c_sh), CLKV_ARG(c_sn), CLKV_ARG(op->scale->buf), CLKV_ARG(s_off),
            CLKV_ARG(s_sb), CLKV_ARG(s_sh), CLKV_ARG(s_sn), CLKV_ARG(op->min->buf), CLKV_ARG(m_off),
            CLKV_ARG(m_sb), CLKV_ARG(m_sh), CLKV_ARG(m_sn), CLKV_ARG(op->x->buf), CLKV_ARG(x_off),
            CLKV_ARG(x_sb), CLKV_ARG(x_sh), CLKV_ARG(x_sn), CLKV_ARG(total), CLKV_ARG(H),
            CLKV_ARG(a1), CLKV_ARG(a2), CLKV_ARG(bits), CLKV_ARG(group));
    } else {
        /* keys: (H, D, N/group); values: (H, N, D/group) */
        const cl_int a1 = op->keys ? D : N, a2 = op->keys ? N / group : D / group;
        const cl_mem f_buf = flags->buf;
        const cl_long f_off = f_buf ? clkv__elem_offset(flags) : 0;
        const cl_int has_flags = f_buf != NULL;
        st = clkv__set_args(
            ctx, kern, name, 29, CLKV_ARG(op->x->buf), CLKV_ARG(x_off), CLKV_ARG(x_sb),
            CLKV_ARG(x_sh), CLKV_ARG(x_sn), CLKV_ARG(op->codes->buf), CLKV_ARG(c_off),
            CLKV_ARG(c_sb), CLKV_ARG(c_sh), CLKV_ARG(c_sn), CLKV_ARG(op->scale->buf),
            CLKV_ARG(s_off), CLKV_ARG(s_sb), CLKV_ARG(s_sh), CLKV_ARG(s_sn), CLKV_ARG(op->min->buf),
            CLKV_ARG(m_off), CLKV_ARG(m_sb), CLKV_ARG(m_sh), CLKV_ARG(m_sn), CLKV_ARG(f_buf),
            CLKV_ARG(f_off), CLKV_ARG(has_flags), CLKV_ARG(total), CLKV_ARG(H), CLKV_ARG(a1),
            CLKV_ARG(a2), CLKV_ARG(bits), CLKV_ARG(group));
    }
    if (st)
        return st;
    size_t wg = QUANT_WG;
    if (wg > ctx->info.max_work_group_size)
        wg = ctx->info.max_work_group_size;
    const size_t gsz = (size_t)((items + (int64_t)wg - 1) / (int64_t)wg) * wg;
    clkv__log(ctx, "%s: B=%lld H=%lld N=%lld D=%lld bits=%d group=%d items=%lld wg=%zu", name,
              (long long)op->B, (long long)op->H, (long long)op->N, (long long)op->D, op->bits,
              op->group, (long long)items, wg);
    return clkv__launch(ctx, kern, name, 1, &gsz, &wg, 0, done);
}

static clkv_status check_ctx_args(clkv_context *ctx, const void *args) {
    if (!ctx || !args)
        return clkv__fail_entry(ctx, args);
    return CLKV_OK;
}

static clkv_status quant_one(clkv_context *ctx, const clkv_quant_args *a, int keys,
                             cl_event *done) {
    clkv_status st = check_ctx_args(ctx, a);
    if (st)
        return st;
    qop op = {.keys = keys,
              .dequant = 0,
              .x = &a->input,
              .codes = &a->codes,
              .scale = &a->scale,
              .min = &a->min,
              .nx = "input",
              .ncodes = "codes",
              .nscale = "scale",
              .nmin = "min",
              .nbits = "bits",
              .ngroup = "group",
              .bits = a->bits,
              .group = a->group};
    if ((st = validate_op(ctx, &op)) ||
        (st = check_flags(ctx, &a->flags, a->scale.dtype == CLKV_F16, a->inputs_in_f16_range)))
        return st;
    return launch_op(ctx, &op, &a->flags, done);
}

clkv_status clkv_quant_keys(clkv_context *ctx, const clkv_quant_args *args, cl_event *done) {
    return quant_one(ctx, args, 1, done);
}

clkv_status clkv_quant_values(clkv_context *ctx, const clkv_quant_args *args, cl_event *done) {
    return quant_one(ctx, args, 0, done);
}

static clkv_status dequant_one(clkv_context *ctx, const clkv_dequant_args *a, int keys,
                               cl_event *done) {
    clkv_status st = check_ctx_args(ctx, a);
    if (st)
        return st;
    qop op = {.keys = keys,
              .dequant = 1,
              .x = &a->out,
              .codes = &a->codes,
              .scale = &a->scale,
              .min = &a->min,
              .nx = "out",
              .ncodes = "codes",
              .nscale = "scale",
              .nmin = "min",
              .nbits = "bits",
              .ngroup = "group",
              .bits = a->bits,
              .group = a->group};
    if ((st = validate_op(ctx, &op)))
        return st;
    return launch_op(ctx, &op, NULL, done);
}

clkv_status clkv_dequant_keys(clkv_context *ctx, const clkv_dequant_args *args, cl_event *done) {
    return dequant_one(ctx, args, 1, done);
}

clkv_status clkv_dequant_values(clkv_context *ctx, const clkv_dequant_args *args, cl_event *done) {
    return dequant_one(ctx, args, 0, done);
}

clkv_status clkv_quant_tokens(clkv_context *ctx, const clkv_quant_tokens_args *args,
                              cl_event *done) {
    clkv_status st = check_ctx_args(ctx, args);
    if (st)
        return st;
    const clkv_quant_tokens_args *a = args;
    /* The group defaults to D: read D from k once k itself is known to be valid. */
    if ((st = clkv__check_tensor(ctx, &a->k, "k", 4, CLKV_FLOAT_DTYPES)))
        return st;
    int group = a->group;
    if (group == 0) {
        if (a->k.dims[3] > 256 || !group_ok((int)a->k.dims[3]))
            return clkv__fail(ctx, CLKV_ERR_ARG_UNSUPPORTED,
                              "group: 0 (= D) needs D in {16, 32, 64, 128, 256}; k has D = %lld",
                              (long long)a->k.dims[3]);
        group = (int)a->k.dims[3];
    }
    qop ok = {.keys = 0,
              .dequant = 0,
              .x = &a->k,
              .codes = &a->k_codes,
              .scale = &a->k_scale,
              .min = &a->k_min,
              .nx = "k",
              .ncodes = "k_codes",
              .nscale = "k_scale",
              .nmin = "k_min",
              .nbits = "kbits",
              .ngroup = "group",
              .bits = a->kbits,
              .group = group};
    qop ov = ok;
    ov.x = &a->v;
    ov.codes = &a->v_codes;
    ov.scale = &a->v_scale;
    ov.min = &a->v_min;
    ov.nx = "v";
    ov.ncodes = "v_codes";
    ov.nscale = "v_scale";
    ov.nmin = "v_min";
    ov.nbits = "vbits";
    ov.bits = a->vbits;
    if ((st = validate_op(ctx, &ok)) || (st = validate_op(ctx, &ov)))
        return st;
    for (int i = 0; i < 4; i++)
        if ((st = clkv__check_dim(ctx, &a->v, "v", i, a->k.dims[i], "must match k")))
            return st;
    const int f16 = a->k_scale.dtype == CLKV_F16 || a->v_scale.dtype == CLKV_F16;
    if ((st = check_flags(ctx, &a->flags, f16, a->inputs_in_f16_range)))
        return st;
    if ((st = launch_op(ctx, &ok, &a->flags, NULL)))
        return st;
    return launch_op(ctx, &ov, &a->flags, done);
}
