/* clkv_offload_gather: selected rows of a host-resident K/V store -> device tensors.
 * Kernel-read path (cl_kernels/gather_rows.cl) or pinned staging copy. */
#include <stdlib.h>
#include <string.h>

#include "host/offload_internal.h"

#define KERNEL_FILE "gather_rows.cl"
#define GATHER_WG 128
#define BUFS_PER_LAUNCH 4

static clkv_status validate(clkv_context *ctx, const clkv_offload_store *s,
                            const clkv_offload_gather_args *a) {
    clkv_status st;
    const uint32_t mask = CLKV_DTYPE_BIT(s->dtype);
    if ((st = clkv__check_tensor(ctx, &a->idx, "idx", 3, CLKV_DTYPE_BIT(CLKV_I32))) ||
        (st = clkv__check_tensor(ctx, &a->k_out, "k_out", 4, mask)) ||
        (st = clkv__check_optional_tensor(ctx, &a->v_out, "v_out", 4, mask)))
        return st;
    if ((st = clkv__check_dim(ctx, &a->idx, "idx", 0, s->B, "batch of the store")) ||
        (st = clkv__check_dim(ctx, &a->idx, "idx", 1, s->Hkv, "KV heads of the store")))
        return st;
    const int64_t NI = a->idx.dims[2];
    if (NI > INT32_MAX)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "idx: n_idx = %lld exceeds 2^31-1",
                          (long long)NI);
    const int64_t want[4] = {s->B, s->Hkv, NI, s->D};
    const char *why[4] = {"batch of the store", "KV heads of the store", "n_idx of idx",
                          "head dim of the store"};
    for (int t = 0; t < 2; t++) {
        const clkv_tensor *o = t == 0 ? &a->k_out : &a->v_out;
        const char *name = t == 0 ? "k_out" : "v_out";
        if (!o->buf)
            continue;
        for (int i = 0; i < 4; i++)
            if ((st = clkv__check_dim(ctx, o, name, i, want[i], why[i])))
                return st;
        if (NI > 1 && o->strides[2] < s->D)
            return clkv__fail(ctx, CLKV_ERR_ARG_STRIDE,
                              "%s: row stride %lld is smaller than D = %lld (overlapping rows)",
                              name, (long long)o->strides[2], (long long)s->D);
    }
    return CLKV_OK;
}

/* Widest word (16, 4 or the element size) dividing the row size and every byte offset
 * and stride of the outputs. */
static int copy_bytes(const clkv_offload_store *s, const clkv_offload_gather_args *a) {
    static const int cand[2] = {16, 4};
    for (int c = 0; c < 2; c++) {
        const uint64_t w = (uint64_t)cand[c];
        int ok = s->row_bytes % w == 0;
        for (int t = 0; t < 2 && ok; t++) {
            const clkv_tensor *o = t == 0 ? &a->k_out : &a->v_out;
            if (!o->buf)
                continue;
            ok = o->offset % w == 0;
            for (int i = 0; i < 3 && ok; i++)
                ok = ((uint64_t)o->strides[i] * s->esize) % w == 0;
        }
        if (ok)
            return cand[c];
    }
    return (int)s->esize;
}

static clkv_status gather_kernel(clkv_context *ctx, clkv_offload_store *s,
                                 const clkv_offload_gather_args *a, cl_event *done) {
    const int wb = copy_bytes(s, a);
    const int64_t row_words = (int64_t)(s->row_bytes / (uint64_t)wb);
    int lpr = 1;
    while (lpr < row_words && lpr < 32)
        lpr *= 2;
    int wg = GATHER_WG;
    if ((size_t)wg > ctx->info.max_work_group_size)
        wg = (int)ctx->info.max_work_group_size;
    if (lpr > wg)
        lpr = wg;
    clkv_defs defs;
    clkv__defs_init(&defs);
    clkv__defs_int(&defs, "COPY_BYTES", wb);
    clkv__defs_int(&defs, "ROW_WORDS", row_words);
    clkv__defs_int(&defs, "LPR", lpr);
    clkv__defs_int(&defs, "WG_SIZE", wg);
    cl_kernel kern;
    clkv_status st = clkv__get_kernel(ctx, KERNEL_FILE, &defs, "gather_rows", &kern);
    if (st != CLKV_OK)
        return st;
    if ((st = clkv__check_local_mem(ctx, kern, "gather_rows", 0)) != CLKV_OK)
        return st;
    const clkv_tensor *I = &a->idx, *K = &a->k_out, *V = a->v_out.buf ? &a->v_out : &a->k_out;
    /* output offsets and strides in words of `wb` bytes */
    const cl_long idx_off = clkv__elem_offset(I), idx_sb = I->strides[0], idx_sh = I->strides[1];
    const cl_long ko_off = (cl_long)(K->offset / (uint64_t)wb),
                  ko_sb = (cl_long)((uint64_t)K->strides[0] * s->esize / (uint64_t)wb),
                  ko_sh = (cl_long)((uint64_t)K->strides[1] * s->esize / (uint64_t)wb),
                  ko_sl = (cl_long)((uint64_t)K->strides[2] * s->esize / (uint64_t)wb);
    const cl_long vo_off = (cl_long)(V->offset / (uint64_t)wb),
                  vo_sb = (cl_long)((uint64_t)V->strides[0] * s->esize / (uint64_t)wb),
                  vo_sh = (cl_long)((uint64_t)V->strides[1] * s->esize / (uint64_t)wb),
                  vo_sl = (cl_long)((uint64_t)V->strides[2] * s->esize / (uint64_t)wb);
    const cl_long spb = s->spb;
    const cl_int cap = (cl_int)s->cap, Hkv = (cl_int)s->Hkv, n_idx = (cl_int)I->dims[2],
                 has_v = a->v_out.buf != NULL;
    const int64_t NI = I->dims[2];
    const int rpw = wg / lpr;
    const size_t gs[3] = {(size_t)((NI + rpw - 1) / rpw) * (size_t)wg, (size_t)s->Hkv,
                          (size_t)s->B};
    const size_t ls[3] = {(size_t)wg, 1, 1};
    const int launches = (s->nbuf + BUFS_PER_LAUNCH - 1) / BUFS_PER_LAUNCH;
    clkv__log(ctx,
              "offload_gather: kernel-read NI=%lld word=%d row_words=%lld lpr=%d wg=%d "
              "launches=%d",
              (long long)NI, wb, (long long)row_words, lpr, wg, launches);
    for (int l = 0; l < launches; l++) {
        const cl_int base = l * BUFS_PER_LAUNCH;
        const cl_int nhere = s->nbuf - base < BUFS_PER_LAUNCH ? s->nbuf - base : BUFS_PER_LAUNCH;
        cl_mem kb[BUFS_PER_LAUNCH], vb[BUFS_PER_LAUNCH];
        for (int i = 0; i < BUFS_PER_LAUNCH; i++) {
            kb[i] = s->buf[0][base + (i < nhere ? i : 0)];
            vb[i] = s->buf[1][base + (i < nhere ? i : 0)];
        }
        st = clkv__set_args(ctx, kern, "gather_rows", 29, CLKV_ARG(kb[0]), CLKV_ARG(kb[1]),
                            CLKV_ARG(kb[2]), CLKV_ARG(kb[3]), CLKV_ARG(vb[0]), CLKV_ARG(vb[1]),
                            CLKV_ARG(vb[2]), CLKV_ARG(vb[3]), CLKV_ARG(base), CLKV_ARG(nhere),
                            CLKV_ARG(spb), CLKV_ARG(cap), CLKV_ARG(Hkv), CLKV_ARG(I->buf),
                            CLKV_ARG(idx_off), CLKV_ARG(idx_sb), CLKV_ARG(idx_sh), CLKV_ARG(n_idx),
                            CLKV_ARG(K->buf), CLKV_ARG(ko_off), CLKV_ARG(ko_sb), CLKV_ARG(ko_sh),
                            CLKV_ARG(ko_sl), CLKV_ARG(V->buf), CLKV_ARG(vo_off), CLKV_ARG(vo_sb),
                            CLKV_ARG(vo_sh), CLKV_ARG(vo_sl), CLKV_ARG(has_v));
        if (st == CLKV_OK)
            st =
                clkv__enqueue(ctx, kern, "gather_rows", 3, gs, ls, l == launches - 1 ? done : NULL);
        if (st != CLKV_OK)
            return st;
    }
    return CLKV_OK;
}

/* Grow a host-side array / the pinned staging area (old contents not kept). */
static clkv_status ensure_staging(clkv_context *ctx, clkv_offload_store *s, size_t idx_n,
                                  size_t bytes) {
    if (idx_n > s->idx_cap) {
        int32_t *p = (int32_t *)malloc(idx_n * sizeof(int32_t));
        if (!p)
            return clkv__fail(ctx, CLKV_ERR_OUT_OF_HOST_MEMORY,
                              "offload_gather: out of host memory for %zu indices", idx_n);
        free(s->idx_host);
        s->idx_host = p;
        s->idx_cap = idx_n;
    }
    if (bytes <= s->stage_bytes)
        return CLKV_OK;
    /* The queue is idle here (idx was read back blocking), so the old area is unused. */
    if (s->stage) {
        clEnqueueUnmapMemObject(ctx->queue, s->stage, s->stage_map, 0, NULL, NULL);
        clFinish(ctx->queue);
        clReleaseMemObject(s->stage);
        s->stage = NULL;
        s->stage_map = NULL;
        s->stage_bytes = 0;
    }
    cl_int err;
    cl_mem b =
        clCreateBuffer(ctx->cl_ctx, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, bytes, NULL, &err);
    if (err != CL_SUCCESS)
        return clkv__fail(ctx, err, "offload_gather: pinned staging area of %zu bytes: %s", bytes,
                          clkv_status_string(err));
    unsigned char *m = (unsigned char *)clEnqueueMapBuffer(
        ctx->queue, b, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, bytes, 0, NULL, NULL, &err);
    if (err != CL_SUCCESS) {
        clReleaseMemObject(b);
        return clkv__fail(ctx, err, "offload_gather: mapping the staging area: %s",
                          clkv_status_string(err));
    }
    s->stage = b;
    s->stage_map = m;
    s->stage_bytes = bytes;
    return CLKV_OK;
}

static clkv_status gather_staging(clkv_context *ctx, clkv_offload_store *s,
                                  const clkv_offload_gather_args *a, cl_event *done) {
    const int64_t NI = a->idx.dims[2], BH = s->B * s->Hkv;
    const int ntens = a->v_out.buf ? 2 : 1;
    const size_t rb = (size_t)s->row_bytes;
    const size_t per_tensor = (size_t)BH * (size_t)NI * rb;
    if (NI == 0)
        return clkv__marker(ctx, done);
    clkv_status st = ensure_staging(ctx, s, (size_t)BH * (size_t)NI, per_tensor * (size_t)ntens);
    if (st != CLKV_OK)
        return st;
    /* 1. idx back to the host (waits for the producer of idx on the in-order queue) */
    const clkv_tensor *I = &a->idx;
    for (int64_t b = 0; b < s->B; b++) {
        for (int64_t h = 0; h < s->Hkv; h++) {
            const size_t off = (size_t)(I->offset + ((uint64_t)b * (uint64_t)I->strides[0] +
                                                     (uint64_t)h * (uint64_t)I->strides[1]) *
                                                        4);
            cl_int err = clEnqueueReadBuffer(ctx->queue, I->buf, CL_FALSE, off, (size_t)NI * 4,
                                             s->idx_host + (size_t)(b * s->Hkv + h) * (size_t)NI, 0,
                                             NULL, NULL);
            if (err != CL_SUCCESS)
                return clkv__fail_cl(ctx, err, "clEnqueueReadBuffer (offload_gather idx)");
        }
    }
    cl_int err = clFinish(ctx->queue);
    if (err != CL_SUCCESS)
        return clkv__fail_cl(ctx, err, "clFinish (offload_gather idx)");
    /* 2. CPU gather from the pinned store into the pinned staging area */
    for (int t = 0; t < ntens; t++) {
        unsigned char *dst = s->stage_map + (size_t)t * per_tensor;
        for (int64_t sl = 0; sl < BH; sl++) {
            const unsigned char *src =
                s->map[t][sl / s->spb] + (size_t)(sl % s->spb) * s->slice_bytes;
            for (int64_t i = 0; i < NI; i++) {
                const int32_t ti = s->idx_host[(size_t)sl * (size_t)NI + (size_t)i];
                unsigned char *d = dst + ((size_t)sl * (size_t)NI + (size_t)i) * rb;
                if (ti >= 0 && ti < s->cap)
                    memcpy(d, src + (size_t)ti * rb, rb);
                else
                    memset(d, 0, rb);
            }
        }
    }
    /* 3. pinned writes into the output tensors */
    for (int t = 0; t < ntens; t++) {
        const clkv_tensor *o = t == 0 ? &a->k_out : &a->v_out;
        for (int64_t b = 0; b < s->B; b++) {
            const int last = t == ntens - 1 && b == s->B - 1;
            st = clkv__offload_rows(ctx, XFER_WRITE_FROM_HOST, o, b, 0, s->Hkv, 0, NI, NULL,
                                    s->stage_map + (size_t)t * per_tensor,
                                    (size_t)(b * s->Hkv) * (size_t)NI * rb, (size_t)NI * rb, rb,
                                    last ? done : NULL);
            if (st != CLKV_OK)
                return st;
        }
    }
    return CLKV_OK;
}

clkv_status clkv_offload_gather(clkv_context *ctx, clkv_offload_store *s,
                                const clkv_offload_gather_args *args, cl_event *done) {
    clkv_status st = clkv__offload_check_call(ctx, s, args);
    if (st == CLKV_OK)
        st = validate(ctx, s, args);
    if (st != CLKV_OK)
        return st;
    if (args->idx.dims[2] == 0)
        return clkv__marker(ctx, done);
    return s->mode == CLKV_OFFLOAD_STAGING ? gather_staging(ctx, s, args, done)
                                           : gather_kernel(ctx, s, args, done);
}
