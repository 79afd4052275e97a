/* ParisKV encoder, dense-rotation path (SPEC §4: D not a power of two): pack the vectors
 * into a dense f32 matrix X (cl_kernels/pariskv_encode.cl, DENSE_ROT=1), Y = X R^T with
 * CLBlast SGEMM, then the shared block encoder / the query normalization. Rows are
 * processed in chunks so the workspace stays bounded. */
#include <stdio.h>

#include "host/pariskv_internal.h"

#include <clblast_c.h> /* after the clkv headers, which fix CL_TARGET_OPENCL_VERSION */

#define KERNEL_FILE "pariskv_encode.cl"
#define PACK_WG 64
#define CHUNK_BYTES ((size_t)32 << 20) /* X and Y of one chunk */

/* Y[rows, D] = X[rows, D] R^T, all f32 row-major in `ws` at element offsets. */
static clkv_status sgemm_rotate(clkv_context *ctx, cl_mem ws, size_t x_off, size_t r_off,
                                size_t y_off, size_t rows, size_t D) {
    cl_command_queue q = ctx->queue;
    const CLBlastStatusCode s =
        CLBlastSgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeYes, rows, D, D,
                     1.0f, ws, x_off, D, ws, r_off, D, 0.0f, ws, y_off, D, &q, NULL);
    if (s == CLBlastSuccess)
        return CLKV_OK;
    if ((int)s > -100) /* an OpenCL error code, passed through by CLBlast */
        return clkv__fail_cl(ctx, (cl_int)s, "CLBlastSgemm (dense ParisKV rotation)");
    return clkv__fail(ctx, CLKV_ERR_INTERNAL,
                      "CLBlastSgemm (dense ParisKV rotation) failed with CLBlast status %d",
                      (int)s);
}

typedef struct dense_layout {
    size_t r_off, x_off, y_off, ex_off, nrm_off; /* element offsets (4-byte words) */
    size_t bytes;
    int64_t chunk_rows;
} dense_layout;

static dense_layout plan(int64_t rows, int64_t D) {
    dense_layout l;
    int64_t chunk = (int64_t)(CHUNK_BYTES / ((size_t)D * 8 + 8));
    if (chunk < 1)
        chunk = 1;
    if (chunk > rows)
        chunk = rows;
    l.chunk_rows = chunk;
    const size_t w = 4;
    l.r_off = 0;
    l.x_off = clkv__ws_align((size_t)(D * D) * w) / w;
    l.y_off = l.x_off + clkv__ws_align((size_t)(chunk * D) * w) / w;
    l.ex_off = l.y_off + clkv__ws_align((size_t)(chunk * D) * w) / w;
    l.nrm_off = l.ex_off + clkv__ws_align((size_t)chunk * w) / w;
    l.bytes = (l.nrm_off + clkv__ws_align((size_t)chunk * w) / w) * w;
    return l;
}

static void common_defs(clkv_defs *d, int query, clkv_dtype in, int64_t D) {
    clkv__defs_init(d);
    clkv__defs_int(d, "DENSE_ROT", 1);
    clkv__defs_int(d, "PARISKV_QUERY", query);
    clkv__defs_int(d, "IN_DTYPE", in);
    clkv__defs_int(d, "HEAD_DIM", D);
    clkv__defs_int(d, "KPW", 1);
}

/* The pack kernel's source arguments: keys [B, Hkv, L, D] (G = 1) or queries [B, Hq, D]
 * read as [B, Hkv, 1, D] with the G heads of a group at stride q_sh. */
typedef struct pack_src {
    cl_mem buf;
    cl_long off, sb, sh, sl, sg;
    cl_int G, Hkv, n, start, end;
    cl_mem len_buf;
    cl_long len_off;
    cl_int has_len;
} pack_src;

static clkv_status pack_and_rotate(clkv_context *ctx, cl_kernel kp, const pack_src *p,
                                   const dense_layout *l, cl_mem ws, int64_t r0, int64_t rows,
                                   int64_t D) {
    const cl_long r0l = (cl_long)r0, x_off = (cl_long)l->x_off, ex_off = (cl_long)l->ex_off,
                  nrm_off = (cl_long)l->nrm_off;
    clkv_status st = clkv__set_args(
        ctx, kp, "pariskv_pack", 19, CLKV_ARG(p->buf), CLKV_ARG(p->off), CLKV_ARG(p->sb),
        CLKV_ARG(p->sh), CLKV_ARG(p->sl), CLKV_ARG(p->sg), CLKV_ARG(p->G), CLKV_ARG(p->Hkv),
        CLKV_ARG(p->n), CLKV_ARG(p->start), CLKV_ARG(p->end), CLKV_ARG(p->len_buf),
        CLKV_ARG(p->len_off), CLKV_ARG(p->has_len), CLKV_ARG(r0l), CLKV_ARG(ws), CLKV_ARG(x_off),
        CLKV_ARG(ex_off), CLKV_ARG(nrm_off));
    if (st != CLKV_OK)
        return st;
    const size_t gs[1] = {(size_t)rows * PACK_WG}, ls[1] = {PACK_WG};
    if ((st = clkv__enqueue(ctx, kp, "pariskv_pack", 1, gs, ls, NULL)) != CLKV_OK)
        return st;
    return sgemm_rotate(ctx, ws, l->x_off, l->r_off, l->y_off, (size_t)rows, (size_t)D);
}

clkv_status clkv__pariskv_encode_dense(clkv_context *ctx, const clkv_pariskv_encode_args *args,
                                       const clkv_pariskv_levels *lv, cl_event *done) {
    const clkv_tensor *K = &args->k, *I = &args->ids, *C = &args->codes, *W = &args->weights,
                      *N = &args->counts;
    const int64_t B = K->dims[0], Hkv = K->dims[1], L = K->dims[2], D = K->dims[3];
    const int64_t end = args->end < 0 ? L : args->end, n = end - args->start;
    const int64_t rows = B * Hkv * n;
    const dense_layout l = plan(rows, D);

    clkv_defs defs;
    common_defs(&defs, 0, K->dtype, D);
    clkv__defs_int(&defs, "SUB_M", args->m);
    clkv__defs_int(&defs, "W_DTYPE", W->dtype);
    cl_kernel kp, ke;
    clkv_status st;
    if ((st = clkv__get_kernel(ctx, KERNEL_FILE, &defs, "pariskv_pack", &kp)) ||
        (st = clkv__get_kernel(ctx, KERNEL_FILE, &defs, "pariskv_encode_dense", &ke)) ||
        (st = clkv__check_local_mem(ctx, kp, "pariskv_pack", 0)) ||
        (st = clkv__check_local_mem(ctx, ke, "pariskv_encode_dense", 0)))
        return st;
    cl_mem ws;
    if ((st = clkv__workspace(ctx, l.bytes, &ws)) ||
        (st = clkv__pariskv_upload_rotation(ctx, args->seed, D, ws, l.r_off * 4)))
        return st;

    const pack_src ps = {K->buf,
                         clkv__elem_offset(K),
                         K->strides[0],
                         K->strides[1],
                         K->strides[2],
                         0,
                         1,
                         (cl_int)Hkv,
                         (cl_int)n,
                         (cl_int)args->start,
                         (cl_int)end,
                         args->lengths.buf,
                         args->lengths.buf ? clkv__elem_offset(&args->lengths) : 0,
                         args->lengths.buf != NULL};
    cl_float8 tau, lev;
    for (int t = 0; t < 8; t++) {
        tau.s[t] = t < 7 ? lv->tau[t] : 2.0f;
        lev.s[t] = lv->a[t];
    }
    const cl_long y_off = (cl_long)l.y_off, ex_off = (cl_long)l.ex_off;
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
    const int64_t nblk = D / args->m;
    clkv__log(ctx,
              "pariskv_encode (dense rotation): B=%lld Hkv=%lld D=%lld m=%d rows=%lld chunk=%lld",
              (long long)B, (long long)Hkv, (long long)D, (int)args->m, (long long)rows,
              (long long)l.chunk_rows);
    for (int64_t r0 = 0; r0 < rows; r0 += l.chunk_rows) {
        const int64_t nr = rows - r0 < l.chunk_rows ? rows - r0 : l.chunk_rows;
        if ((st = pack_and_rotate(ctx, kp, &ps, &l, ws, r0, nr, D)))
            return st;
        const cl_long r0l = (cl_long)r0, nrl = (cl_long)nr;
        st = clkv__set_args(
            ctx, ke, "pariskv_encode_dense", 35, CLKV_ARG(ws), CLKV_ARG(y_off), CLKV_ARG(ex_off),
            CLKV_ARG(r0l), CLKV_ARG(nrl), CLKV_ARG(ps.Hkv), CLKV_ARG(ps.n), CLKV_ARG(ps.start),
            CLKV_ARG(ps.end), CLKV_ARG(ps.len_buf), CLKV_ARG(ps.len_off), CLKV_ARG(ps.has_len),
            CLKV_ARG(tau), CLKV_ARG(lev), CLKV_ARG(I->buf), CLKV_ARG(i_off), CLKV_ARG(i_sb),
            CLKV_ARG(i_sh), CLKV_ARG(i_sl), CLKV_ARG(C->buf), CLKV_ARG(c_off), CLKV_ARG(c_sb),
            CLKV_ARG(c_sh), CLKV_ARG(c_sl), CLKV_ARG(W->buf), CLKV_ARG(w_off), CLKV_ARG(w_sb),
            CLKV_ARG(w_sh), CLKV_ARG(w_sl), CLKV_ARG(n_buf), CLKV_ARG(n_off), CLKV_ARG(n_sb),
            CLKV_ARG(n_sh), CLKV_ARG(n_sblk), CLKV_ARG(has_counts));
        if (st != CLKV_OK)
            return st;
        const size_t items = (size_t)(nr * nblk);
        const size_t gs[1] = {(items + PACK_WG - 1) / PACK_WG * PACK_WG}, ls[1] = {PACK_WG};
        if ((st = clkv__enqueue(ctx, ke, "pariskv_encode_dense", 1, gs, ls,
                                r0 + nr >= rows ? done : NULL)))
            return st;
    }
    return CLKV_OK;
}

clkv_status clkv__pariskv_query_dense(clkv_context *ctx, const clkv_pariskv_query_args *args,
                                      cl_event *done) {
    const clkv_tensor *Q = &args->q, *R = &args->q_rot, *NQ = &args->q_norm;
    const int64_t B = Q->dims[0], Hq = Q->dims[1], D = Q->dims[2], Hkv = R->dims[1];
    const int64_t rows = B * Hkv;
    const dense_layout l = plan(rows, D);
    clkv_defs defs;
    common_defs(&defs, 1, Q->dtype, D);
    cl_kernel kp, kf;
    clkv_status st;
    if ((st = clkv__get_kernel(ctx, KERNEL_FILE, &defs, "pariskv_pack", &kp)) ||
        (st = clkv__get_kernel(ctx, KERNEL_FILE, &defs, "pariskv_query_finish", &kf)) ||
        (st = clkv__check_local_mem(ctx, kp, "pariskv_pack", 0)) ||
        (st = clkv__check_local_mem(ctx, kf, "pariskv_query_finish", 0)))
        return st;
    cl_mem ws;
    if ((st = clkv__workspace(ctx, l.bytes, &ws)) ||
        (st = clkv__pariskv_upload_rotation(ctx, args->seed, D, ws, l.r_off * 4)))
        return st;
    const cl_int G = (cl_int)(Hq / Hkv);
    const pack_src ps = {Q->buf,
                         clkv__elem_offset(Q),
                         Q->strides[0],
                         Q->strides[1] * G,
                         0,
                         Q->strides[1],
                         G,
                         (cl_int)Hkv,
                         1,
                         0,
                         1,
                         NULL,
                         0,
                         0};
    const cl_long y_off = (cl_long)l.y_off, ex_off = (cl_long)l.ex_off,
                  nrm_off = (cl_long)l.nrm_off;
    const cl_long r_off = clkv__elem_offset(R), r_sb = R->strides[0], r_sh = R->strides[1];
    const cl_mem qn_buf = NQ->buf;
    const cl_long qn_off = qn_buf ? clkv__elem_offset(NQ) : 0, qn_sb = qn_buf ? NQ->strides[0] : 0,
                  qn_sh = qn_buf ? NQ->strides[1] : 0;
    const cl_int has_qn = qn_buf != NULL, hkv = (cl_int)Hkv;
    for (int64_t r0 = 0; r0 < rows; r0 += l.chunk_rows) {
        const int64_t nr = rows - r0 < l.chunk_rows ? rows - r0 : l.chunk_rows;
        if ((st = pack_and_rotate(ctx, kp, &ps, &l, ws, r0, nr, D)))
            return st;
        const cl_long r0l = (cl_long)r0;
        st = clkv__set_args(ctx, kf, "pariskv_query_finish", 15, CLKV_ARG(ws), CLKV_ARG(y_off),
                            CLKV_ARG(ex_off), CLKV_ARG(nrm_off), CLKV_ARG(r0l), CLKV_ARG(hkv),
                            CLKV_ARG(R->buf), CLKV_ARG(r_off), CLKV_ARG(r_sb), CLKV_ARG(r_sh),
                            CLKV_ARG(qn_buf), CLKV_ARG(qn_off), CLKV_ARG(qn_sb), CLKV_ARG(qn_sh),
                            CLKV_ARG(has_qn));
        if (st != CLKV_OK)
            return st;
        const size_t gs[2] = {(size_t)(D + 63) / 64 * 64, (size_t)nr}, ls[2] = {64, 1};
        if ((st = clkv__enqueue(ctx, kf, "pariskv_query_finish", 2, gs, ls,
                                r0 + nr >= rows ? done : NULL)))
            return st;
    }
    return CLKV_OK;
}
