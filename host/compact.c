/* clkv_compact_kv: validation and launch of the row gather (cl_kernels/compact.cl). */
#include <stdio.h>
#include <string.h>

#include "clkv/select.h"
#include "runtime/internal.h"

#define KERNEL_FILE "compact.cl"
#define CWG 64
#define IWG 256 /* work-group size of the in-place copy (one work-group per row) */
#define PER 4   /* elements per work-item per chunk of the in-place copy */

#define ANY_DTYPES                                                                                 \
    (CLKV_FLOAT_DTYPES | CLKV_DTYPE_BIT(CLKV_I32) | CLKV_DTYPE_BIT(CLKV_U8) |                      \
     CLKV_DTYPE_BIT(CLKV_U32))

static clkv_status check_like(clkv_context *ctx, const clkv_tensor *t, const char *name,
                              const clkv_tensor *ref, const char *ref_name, int nd) {
    clkv_status st;
    for (int i = 0; i < nd; i++)
        if (i != 2 && (st = clkv__check_dim(ctx, t, name, i, ref->dims[i], ref_name)))
            return st;
    return CLKV_OK;
}

static clkv_status check_not_alias(clkv_context *ctx, const clkv_tensor *dst, const char *dname,
                                   const clkv_tensor *src, const char *sname) {
    if (dst->buf && src->buf && dst->buf == src->buf)
        return clkv__fail(ctx, CLKV_ERR_ARG_UNSUPPORTED,
                          "%s: same buffer as %s; only a destination and its own source may "
                          "share a buffer (in-place compaction)",
                          dname, sname);
    return CLKV_OK;
}

/* 1 when dst is its source's own view (same buffer, offset, strides; Lout <= L): the
 * in-place case. */
static int same_view(const clkv_tensor *dst, const clkv_tensor *src) {
    if (!dst->buf || dst->buf != src->buf || dst->offset != src->offset || dst->ndim != src->ndim ||
        dst->dims[2] > src->dims[2])
        return 0;
    for (int i = 0; i < dst->ndim; i++)
        if (dst->strides[i] != src->strides[i])
            return 0;
    return 1;
}

/* dst shares src's buffer: accepted only as exactly src's view (in place). */
static clkv_status check_inplace(clkv_context *ctx, const clkv_tensor *dst, const char *dname,
                                 const clkv_tensor *src, const char *sname) {
    if (!dst->buf || dst->buf != src->buf || same_view(dst, src))
        return CLKV_OK;
    return clkv__fail(ctx, CLKV_ERR_ARG_UNSUPPORTED,
                      "%s: same buffer as %s but not the same view; in-place compaction needs "
                      "the same offset and strides and Lout <= L (partial overlap is not "
                      "supported)",
                      dname, sname);
}

static clkv_status validate(clkv_context *ctx, const clkv_compact_kv_args *a) {
    clkv_status st;
    const uint32_t i32 = CLKV_DTYPE_BIT(CLKV_I32);
    if ((st = clkv__check_tensor(ctx, &a->k_src, "k_src", 4, CLKV_FLOAT_DTYPES)) ||
        (st = clkv__check_tensor(ctx, &a->v_src, "v_src", 4, CLKV_FLOAT_DTYPES)) ||
        (st = clkv__check_tensor(ctx, &a->indices, "indices", 3, i32)) ||
        (st = clkv__check_optional_tensor(ctx, &a->counts, "counts", 2, i32)) ||
        (st = clkv__check_tensor(ctx, &a->k_dst, "k_dst", 4, CLKV_FLOAT_DTYPES)) ||
        (st = clkv__check_tensor(ctx, &a->v_dst, "v_dst", 4, CLKV_FLOAT_DTYPES)) ||
        (st = clkv__check_optional_tensor(ctx, &a->new_lengths, "new_lengths", 2, i32)) ||
        (st = clkv__check_optional_tensor(ctx, &a->meta_src, "meta_src", 3, ANY_DTYPES)) ||
        (st = clkv__check_optional_tensor(ctx, &a->meta_dst, "meta_dst", 3, ANY_DTYPES)) ||
        (st = clkv__check_optional_tensor(ctx, &a->flags, "flags", 1, i32)))
        return st;
    if (a->flags.buf && (st = clkv__check_dim(ctx, &a->flags, "flags", 0, 1, "one int32 word")))
        return st;
    const clkv_tensor *ks = &a->k_src;
    const int64_t B = ks->dims[0], H = ks->dims[1], L = ks->dims[2], D = ks->dims[3];
    const int64_t K = a->indices.dims[2], Lout = a->k_dst.dims[2];
    if ((st = clkv__check_dim(ctx, &a->v_src, "v_src", 0, B, "batch of k_src")) ||
        (st = clkv__check_dim(ctx, &a->v_src, "v_src", 1, H, "heads of k_src")) ||
        (st = clkv__check_dim(ctx, &a->v_src, "v_src", 2, L, "tokens of k_src")) ||
        (st = check_like(ctx, &a->k_dst, "k_dst", ks, "must match k_src", 4)) ||
        (st = check_like(ctx, &a->v_dst, "v_dst", &a->v_src, "must match v_src", 4)) ||
        (st = clkv__check_dim(ctx, &a->v_dst, "v_dst", 2, Lout, "tokens of k_dst")) ||
        (st = clkv__check_dim(ctx, &a->indices, "indices", 0, B, "batch of k_src")) ||
        (st = clkv__check_dim(ctx, &a->indices, "indices", 1, H, "heads of k_src")))
        return st;
    if (a->k_dst.dtype != ks->dtype)
        return clkv__fail(ctx, CLKV_ERR_ARG_DTYPE, "k_dst: dtype %s differs from k_src's %s",
                          clkv_dtype_name(a->k_dst.dtype), clkv_dtype_name(ks->dtype));
    if (a->v_dst.dtype != a->v_src.dtype)
        return clkv__fail(ctx, CLKV_ERR_ARG_DTYPE, "v_dst: dtype %s differs from v_src's %s",
                          clkv_dtype_name(a->v_dst.dtype), clkv_dtype_name(a->v_src.dtype));
    if (K > Lout)
        return clkv__fail(ctx, CLKV_ERR_ARG_SHAPE,
                          "indices: dims[2] = K = %lld exceeds the destination capacity Lout = "
                          "%lld of k_dst",
                          (long long)K, (long long)Lout);
    if (a->counts.buf && ((st = clkv__check_dim(ctx, &a->counts, "counts", 0, B, "batch")) ||
                          (st = clkv__check_dim(ctx, &a->counts, "counts", 1, H, "heads"))))
        return st;
    if (a->new_lengths.buf &&
        ((st = clkv__check_dim(ctx, &a->new_lengths, "new_lengths", 0, B, "batch")) ||
         (st = clkv__check_dim(ctx, &a->new_lengths, "new_lengths", 1, H, "heads"))))
        return st;
    if (!a->meta_src.buf != !a->meta_dst.buf)
        return clkv__fail(ctx, CLKV_ERR_ARG_NULL, "%s: required when %s is given",
                          a->meta_src.buf ? "meta_dst" : "meta_src",
                          a->meta_src.buf ? "meta_src" : "meta_dst");
    if (a->meta_src.buf) {
        if ((st = clkv__check_dim(ctx, &a->meta_src, "meta_src", 0, B, "batch of k_src")) ||
            (st = clkv__check_dim(ctx, &a->meta_src, "meta_src", 1, H, "heads of k_src")) ||
            (st = clkv__check_dim(ctx, &a->meta_src, "meta_src", 2, L, "tokens of k_src")) ||
            (st = clkv__check_dim(ctx, &a->meta_dst, "meta_dst", 0, B, "batch of k_src")) ||
            (st = clkv__check_dim(ctx, &a->meta_dst, "meta_dst", 1, H, "heads of k_src")) ||
            (st = clkv__check_dim(ctx, &a->meta_dst, "meta_dst", 2, Lout, "tokens of k_dst")))
            return st;
        if (a->meta_dst.dtype != a->meta_src.dtype)
            return clkv__fail(ctx, CLKV_ERR_ARG_DTYPE,
                              "meta_dst: dtype %s differs from "
                              "meta_src's %s",
                              clkv_dtype_name(a->meta_dst.dtype),
                              clkv_dtype_name(a->meta_src.dtype));
    }
    if (L > INT32_MAX || Lout > INT32_MAX || D > INT32_MAX || B * H > INT32_MAX ||
        (H > 0 && B > INT32_MAX / H))
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE,
                          "k_src: L = %lld, Lout = %lld, D = %lld or B*H = %lld*%lld exceed "
                          "2^31-1",
                          (long long)L, (long long)Lout, (long long)D, (long long)B, (long long)H);
    /* A destination may share a buffer only with its own source, as the same view. */
    const clkv_tensor *dsts[3] = {&a->k_dst, &a->v_dst, &a->meta_dst};
    const char *dnames[3] = {"k_dst", "v_dst", "meta_dst"};
    const clkv_tensor *srcs[5] = {&a->k_src, &a->v_src, &a->meta_src, &a->indices, &a->counts};
    const char *snames[5] = {"k_src", "v_src", "meta_src", "indices", "counts"};
    for (int d = 0; d < 3; d++)
        for (int s = 0; s < 5; s++)
            if ((st = s == d ? check_inplace(ctx, dsts[d], dnames[d], srcs[s], snames[s])
                             : check_not_alias(ctx, dsts[d], dnames[d], srcs[s], snames[s])))
                return st;
    if ((st = check_not_alias(ctx, &a->new_lengths, "new_lengths", &a->indices, "indices")) ||
        (st = check_not_alias(ctx, &a->new_lengths, "new_lengths", &a->counts, "counts")))
        return st;
    const clkv_tensor *others[8] = {&a->k_src,  &a->v_src, &a->meta_src, &a->indices,
                                    &a->counts, &a->k_dst, &a->v_dst,    &a->new_lengths};
    const char *onames[8] = {"k_src",  "v_src", "meta_src", "indices",
                             "counts", "k_dst", "v_dst",    "new_lengths"};
    for (int o = 0; o < 8; o++)
        if ((st = check_not_alias(ctx, &a->flags, "flags", others[o], onames[o])))
            return st;
    return CLKV_OK;
}

/* In place: one work-group per (b, h) row walks it in ascending chunks (compact.cl). */
static clkv_status launch_inplace(clkv_context *ctx, const clkv_tensor *t,
                                  const clkv_compact_kv_args *a, cl_mem ws, int is_meta) {
    clkv_status st;
    clkv_defs defs;
    clkv__defs_init(&defs);
    clkv__defs_int(&defs, "ESIZE", clkv_dtype_size(t->dtype));
    clkv__defs_int(&defs, "CWG", CWG);
    clkv__defs_int(&defs, "PER", PER);
    cl_kernel kc;
    if ((st = clkv__get_kernel(ctx, KERNEL_FILE, &defs, "compact_inplace", &kc)))
        return st;
    const int64_t B = a->k_src.dims[0], H = a->k_src.dims[1];
    const cl_long off = clkv__elem_offset(t), sb = t->strides[0], sh = t->strides[1],
                  sl = is_meta ? 1 : t->strides[2];
    const cl_long i_off = clkv__elem_offset(&a->indices), i_sb = a->indices.strides[0],
                  i_sh = a->indices.strides[1];
    const cl_int D = is_meta ? 1 : (cl_int)t->dims[3], Hc = (cl_int)H;
    st = clkv__set_args(ctx, kc, "compact_inplace", 12, CLKV_ARG(t->buf), CLKV_ARG(off),
                        CLKV_ARG(sb), CLKV_ARG(sh), CLKV_ARG(sl), CLKV_ARG(a->indices.buf),
                        CLKV_ARG(i_off), CLKV_ARG(i_sb), CLKV_ARG(i_sh), CLKV_ARG(ws), CLKV_ARG(D),
                        CLKV_ARG(Hc));
    if (st != CLKV_OK)
        return st;
    size_t wg = IWG;
    while (wg > ctx->info.max_work_group_size && wg > 1)
        wg /= 2;
    const size_t g[2] = {wg, (size_t)(B * H)}, l[2] = {wg, 1};
    return clkv__launch(ctx, kc, "compact_inplace", 2, g, l, 0, NULL);
}

static clkv_status launch_copy(clkv_context *ctx, const clkv_tensor *src, const clkv_tensor *dst,
                               const clkv_compact_kv_args *a, cl_mem ws, int is_meta,
                               cl_event *done) {
    clkv_status st;
    if (same_view(dst, src))
        return launch_inplace(ctx, dst, a, ws, is_meta);
    clkv_defs defs;
    clkv__defs_init(&defs);
    clkv__defs_int(&defs, "ESIZE", clkv_dtype_size(src->dtype));
    clkv__defs_int(&defs, "CWG", CWG);
    clkv__defs_int(&defs, "PER", PER);
    cl_kernel kc;
    if ((st = clkv__get_kernel(ctx, KERNEL_FILE, &defs, "compact_copy", &kc)))
        return st;
    const int64_t B = a->k_src.dims[0], H = a->k_src.dims[1], K = a->indices.dims[2];
    const cl_long s_off = clkv__elem_offset(src), s_sb = src->strides[0], s_sh = src->strides[1],
                  s_sl = is_meta ? 1 : src->strides[2];
    const cl_long d_off = clkv__elem_offset(dst), d_sb = dst->strides[0], d_sh = dst->strides[1],
                  d_sl = is_meta ? 1 : dst->strides[2];
    const cl_long i_off = clkv__elem_offset(&a->indices), i_sb = a->indices.strides[0],
                  i_sh = a->indices.strides[1];
    const cl_int L = (cl_int)a->k_src.dims[2], D = is_meta ? 1 : (cl_int)src->dims[3],
                 Hc = (cl_int)H;
    st = clkv__set_args(ctx, kc, "compact_copy", 18, CLKV_ARG(src->buf), CLKV_ARG(s_off),
                        CLKV_ARG(s_sb), CLKV_ARG(s_sh), CLKV_ARG(s_sl), CLKV_ARG(dst->buf),
                        CLKV_ARG(d_off), CLKV_ARG(d_sb), CLKV_ARG(d_sh), CLKV_ARG(d_sl),
                        CLKV_ARG(a->indices.buf), CLKV_ARG(i_off), CLKV_ARG(i_sb), CLKV_ARG(i_sh),
                        CLKV_ARG(ws), CLKV_ARG(L), CLKV_ARG(D), CLKV_ARG(Hc));
    if (st != CLKV_OK)
        return st;
    const size_t g[3] = {is_meta ? 1 : CWG, (size_t)K, (size_t)(B * H)};
    const size_t l[3] = {is_meta ? 1 : CWG, 1, 1};
    return clkv__launch(ctx, kc, "compact_copy", 3, g, l, 0, done);
}

clkv_status clkv_compact_kv(clkv_context *ctx, const clkv_compact_kv_args *args, cl_event *done) {
    if (!ctx || !args)
        return clkv__fail_entry(ctx, args);
    clkv_status st = validate(ctx, args);
    if (st != CLKV_OK)
        return st;
    const int64_t B = args->k_src.dims[0], H = args->k_src.dims[1], K = args->indices.dims[2];
    const int64_t rows = B * H;
    if (rows == 0)
        return clkv__marker(ctx, done);
    clkv_defs defs;
    clkv__defs_init(&defs);
    clkv__defs_int(&defs, "ESIZE", 4);
    clkv__defs_int(&defs, "CWG", CWG);
    clkv__defs_int(&defs, "PER", PER);
    cl_kernel kl;
    if ((st = clkv__get_kernel(ctx, KERNEL_FILE, &defs, "compact_lengths", &kl)))
        return st;
    cl_mem ws;
    if ((st = clkv__workspace(ctx, clkv__ws_align((size_t)rows * 4), &ws)))
        return st;
    const cl_mem c_buf = args->counts.buf, n_buf = args->new_lengths.buf;
    const cl_long i_off = clkv__elem_offset(&args->indices), i_sb = args->indices.strides[0],
                  i_sh = args->indices.strides[1];
    const cl_long c_off = c_buf ? clkv__elem_offset(&args->counts) : 0,
                  c_sb = c_buf ? args->counts.strides[0] : 0,
                  c_sh = c_buf ? args->counts.strides[1] : 0;
    const cl_long n_off = n_buf ? clkv__elem_offset(&args->new_lengths) : 0,
                  n_sb = n_buf ? args->new_lengths.strides[0] : 0,
                  n_sh = n_buf ? args->new_lengths.strides[1] : 0;
    const cl_int Kc = (cl_int)K, has_counts = c_buf != NULL, has_new = n_buf != NULL,
                 Hc = (cl_int)H;
    const cl_int inplace = same_view(&args->k_dst, &args->k_src) ||
                           same_view(&args->v_dst, &args->v_src) ||
                           same_view(&args->meta_dst, &args->meta_src);
    const cl_int Lc = (cl_int)args->k_src.dims[2], has_flags = args->flags.buf != NULL;
    const cl_mem f_buf = args->flags.buf;
    const cl_long f_off = f_buf ? clkv__elem_offset(&args->flags) : 0;
    st = clkv__set_args(
        ctx, kl, "compact_lengths", 22, CLKV_ARG(args->indices.buf), CLKV_ARG(i_off),
        CLKV_ARG(i_sb), CLKV_ARG(i_sh), CLKV_ARG(Kc), CLKV_ARG(c_buf), CLKV_ARG(c_off),
        CLKV_ARG(c_sb), CLKV_ARG(c_sh), CLKV_ARG(has_counts), CLKV_ARG(n_buf), CLKV_ARG(n_off),
        CLKV_ARG(n_sb), CLKV_ARG(n_sh), CLKV_ARG(has_new), CLKV_ARG(Hc), CLKV_ARG(ws),
        CLKV_ARG(inplace), CLKV_ARG(Lc), CLKV_ARG(f_buf), CLKV_ARG(f_off), CLKV_ARG(has_flags));
    const size_t gl[2] = {CWG, (size_t)rows}, ll[2] = {CWG, 1};
    if (st == CLKV_OK)
        st = clkv__launch(ctx, kl, "compact_lengths", 2, gl, ll, 0, NULL);
    if (K == 0 || st != CLKV_OK) { /* nothing to copy */
        if (st == CLKV_OK)
            st = clkv__marker(ctx, done);
        return st;
    }
    const int has_meta = args->meta_src.buf != NULL;
    if (st == CLKV_OK && args->k_src.dims[3] > 0)
        st = launch_copy(ctx, &args->k_src, &args->k_dst, args, ws, 0, NULL);
    if (st == CLKV_OK && args->v_src.dims[3] > 0)
        st = launch_copy(ctx, &args->v_src, &args->v_dst, args, ws, 0, NULL);
    if (st == CLKV_OK && has_meta)
        st = launch_copy(ctx, &args->meta_src, &args->meta_dst, args, ws, 1, NULL);
    if (st == CLKV_OK)
        st = clkv__marker(ctx, done);
    return st;
}
