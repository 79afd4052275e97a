/* clkv_attention_decode: validation, kernel-variant choice, split-K sizing, launch. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host/attention_internal.h"
#include "host/attention_common.h"
#include "runtime/internal.h"

#define KERNEL_FILE "attention_decode.cl"
#define MAX_GROUP 8

/* Everything the launch needs, derived from validated arguments. */
typedef struct decode_plan {
    int64_t B, Hq, Hkv, G, L, D;
    int max_len;
    float scale;
    int group, nhg;  /* query heads per work-group, head groups per KV head */
    int epl, tpr;    /* elements per lane, lanes per row */
    int wg, unroll;  /* work-group size, rows per row-group per iteration */
    int vec_aligned; /* K/V rows 16-byte aligned */
    int cp_async;    /* NVIDIA: K/V tiles streamed into shared memory with cp.async */
    int stages;      /* tiles in flight per work-group (cp_async only) */
    int splits, chunk;
    size_t part_acc_bytes, part_ml_bytes;
} decode_plan;

static clkv_status validate(clkv_context *ctx, const clkv_attention_decode_args *a) {
    clkv_status st;
    if (a->lengths.buf && a->lengths.ndim != 1 && a->lengths.ndim != 2)
        return clkv__fail(ctx, CLKV_ERR_ARG_SHAPE,
                          "lengths: ndim = %d, expected 1 ([B]) or 2 ([B, Hkv])",
                          (int)a->lengths.ndim);
    if ((st = clkv__check_tensor(ctx, &a->q, "q", 3, CLKV_FLOAT_DTYPES)) ||
        (st = clkv__check_tensor(ctx, &a->k, "k", 4, CLKV_FLOAT_DTYPES)) ||
        (st = clkv__check_tensor(ctx, &a->v, "v", 4, CLKV_FLOAT_DTYPES)) ||
        (st = clkv__check_tensor(ctx, &a->o, "o", 3, CLKV_FLOAT_DTYPES)) ||
        (st = clkv__check_optional_tensor(ctx, &a->lse, "lse", 2, CLKV_DTYPE_BIT(CLKV_F32))) ||
        (st = clkv__check_optional_tensor(ctx, &a->lengths, "lengths",
                                          a->lengths.buf && a->lengths.ndim == 2 ? 2 : 1,
                                          CLKV_DTYPE_BIT(CLKV_I32))))
        return st;
    const int64_t B = a->q.dims[0], Hq = a->q.dims[1], D = a->q.dims[2];
    const int64_t Hkv = a->k.dims[1], L = a->k.dims[2];
    if ((st = clkv__attn_check_kv(ctx, &a->k, &a->v, B, D)))
        return st;
    if ((st = clkv__check_dim(ctx, &a->o, "o", 0, B, "batch of q")) ||
        (st = clkv__check_dim(ctx, &a->o, "o", 1, Hq, "query heads of q")) ||
        (st = clkv__check_dim(ctx, &a->o, "o", 2, D, "head dim of q")))
        return st;
    if (a->lse.buf && ((st = clkv__check_dim(ctx, &a->lse, "lse", 0, B, "batch of q")) ||
                       (st = clkv__check_dim(ctx, &a->lse, "lse", 1, Hq, "query heads of q"))))
        return st;
    if (a->lengths.buf && (st = clkv__check_dim(ctx, &a->lengths, "lengths", 0, B, "batch of q")))
        return st;
    if (a->lengths.buf && a->lengths.ndim == 2 &&
        (st = clkv__check_dim(ctx, &a->lengths, "lengths", 1, Hkv,
                              "KV heads of k (per-(sequence, head) lengths)")))
        return st;
    if ((st = clkv__attn_check_sizes(ctx, B, Hq, Hkv, L, a->max_length)))
        return st;
    if ((st = clkv__attn_check_scale(ctx, a->scale)))
        return st;
    if (a->num_splits < 0)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "num_splits: %d is negative (0 = automatic)",
                          (int)a->num_splits);
    return CLKV_OK;
}

/* A tuning override from the context (see clkv_decode_tuning), else the default. */
static int tuned(int override, int fallback) {
    return override >= 0 ? override : fallback;
}

static size_t reduction_local_bytes(const decode_plan *p) {
    int nrg = p->wg / p->tpr;
    int red_rows = nrg > 1 ? nrg / 2 : 1;
    return (size_t)nrg * p->group * 2 * 4 + (size_t)red_rows * p->group * p->D * 4;
}

/* Shared memory of the cp.async stages: K and V tiles of NRG * UNROLL rows each. */
static size_t stage_local_bytes(const decode_plan *p, uint32_t esize) {
    if (!p->cp_async)
        return 0;
    return (size_t)p->stages * 2 * (size_t)(p->wg / p->tpr) * p->unroll * (size_t)p->D * esize;
}

/* Per-work-group stage budget: large enough to keep HBM busy, small enough for two or
 * more work-groups per multiprocessor. */
#define STAGE_BUDGET (96 * 1024)

static clkv_status plan_launch(clkv_context *ctx, const clkv_attention_decode_args *a,
                               decode_plan *p) {
    memset(p, 0, sizeof *p);
    p->B = a->q.dims[0];
    p->Hq = a->q.dims[1];
    p->D = a->q.dims[2];
    p->Hkv = a->k.dims[1];
    p->L = a->k.dims[2];
    p->G = p->Hkv ? p->Hq / p->Hkv : 1;
    p->max_len = (int)(a->max_length < 0 ? p->L : a->max_length);
    p->scale = a->scale != 0.0f ? a->scale : (float)(1.0 / sqrt((double)p->D));
    p->group = (int)(p->G < MAX_GROUP ? p->G : MAX_GROUP);
    if (p->group < 1)
        p->group = 1;
    p->nhg = (int)((p->G + p->group - 1) / p->group);

    const clkv_device_info *dev = &ctx->info;
    const clkv_decode_tuning *tune = &ctx->decode_tuning;
    if (dev->nvidia_ptx) {
        /* Fewer, fatter lanes when few heads share a row (fewer shuffles per row); more
         * lanes for large groups so q and acc fit in registers. */
        p->epl = tuned(tune->epl, p->group <= 4 ? 16 : 8);
        p->wg = tuned(tune->wg, 128);
        p->unroll = tuned(tune->unroll, 4);
    } else {
        p->epl = (int)p->D;
        p->wg = dev->kind == CLKV_DEVICE_KIND_CPU ? 16 : 64;
        p->unroll = 1;
    }
    p->tpr = (int)(p->D / p->epl);
    if (p->epl <= 0 || p->D % p->epl != 0 || p->tpr > 32 || p->wg % p->tpr != 0 || p->unroll < 1)
        return clkv__fail(ctx, CLKV_ERR_INTERNAL,
                          "decode attention: bad tuning EPL=%d WG=%d UNROLL=%d for D=%lld", p->epl,
                          p->wg, p->unroll, (long long)p->D);
    while (reduction_local_bytes(p) > dev->local_mem_bytes && p->wg > p->tpr * 2)
        p->wg /= 2;
    if ((size_t)p->wg > dev->max_work_group_size)
        p->wg = (int)dev->max_work_group_size / p->tpr * p->tpr;

    const uint32_t esize = clkv_dtype_size(a->k.dtype);
    const int64_t vw = 16 / esize;
    p->vec_aligned = clkv__rows_aligned(&a->k, vw) && clkv__rows_aligned(&a->v, vw);
    p->cp_async = dev->nvidia_ptx && p->tpr > 1 && p->vec_aligned && tuned(tune->cp_async, 1) != 0;
    p->stages = tuned(tune->stages, 3);
    if (p->stages < 2)
        p->stages = 2;
    while (p->cp_async && p->unroll > 1 && stage_local_bytes(p, esize) > STAGE_BUDGET)
        p->unroll /= 2;
    while (p->cp_async && p->stages > 2 && stage_local_bytes(p, esize) > STAGE_BUDGET)
        p->stages--;

    /* Split-K: on a GPU, several work-groups per compute unit (waves), bounded by a
     * minimum chunk length and by at least one work-group per compute unit. */
    const int nrg = p->wg / p->tpr;
    const int64_t rows_per_iter = (int64_t)nrg * p->unroll;
    const int64_t units = p->B * p->Hkv * p->nhg;
    const int gpu = dev->kind == CLKV_DEVICE_KIND_GPU;
    const int64_t waves = tuned(tune->waves, gpu ? 8 : 2);
    const int64_t target = (int64_t)dev->compute_units * waves;
    const int64_t round_rows = rows_per_iter * 4; /* chunks are whole loop iterations */
    const int64_t min_rows = tuned(tune->min_chunk, gpu ? 1024 : 64);
    const int64_t chunk_rows = ((min_rows > round_rows ? min_rows : round_rows) + round_rows - 1) /
                               round_rows * round_rows;
    const int64_t len = p->max_len > 0 ? p->max_len : 1;
    int64_t splits = a->num_splits > 0 ? a->num_splits : (target + units - 1) / (units ? units : 1);
    if (a->num_splits <= 0) {
        /* Long chunks amortize the per-work-group merge of row-group states (on an H100,
         * 1024 rows beat 256 and 512 at 134 MB of K+V) ... */
        const int64_t cap = (len + chunk_rows - 1) / chunk_rows;
        if (splits > cap)
            splits = cap;
        /* ... but a short cache must still give every compute unit a work-group, with
         * chunks of at least four loop iterations. */
        int64_t floor_splits = ((int64_t)dev->compute_units + units - 1) / units;
        const int64_t small_cap = (len + round_rows - 1) / round_rows;
        if (floor_splits > small_cap)
            floor_splits = small_cap;
        if (splits < floor_splits)
            splits = floor_splits;
    }
    if (splits > len)
        splits = len;
    if (splits > CLKV_ATTN_MERGE_MAX_SPLITS)
        splits = CLKV_ATTN_MERGE_MAX_SPLITS;
    if (splits < 1)
        splits = 1;
    int64_t chunk = (len + splits - 1) / splits;
    if (a->num_splits <= 0) /* whole loop iterations per split */
        chunk = (chunk + rows_per_iter - 1) / rows_per_iter * rows_per_iter;
    p->chunk = (int)chunk;
    p->splits = (int)((len + chunk - 1) / chunk);
    p->part_acc_bytes = clkv__ws_align((size_t)(p->B * p->Hq * p->splits * p->D) * 4);
    p->part_ml_bytes = clkv__ws_align((size_t)(p->B * p->Hq * p->splits) * 2 * 4);
    return CLKV_OK;
}

static clkv_status check_common(clkv_context *ctx, const clkv_attention_decode_args *args) {
    if (!ctx || !args)
        return clkv__fail_entry(ctx, args);
    return validate(ctx, args);
}

/* Decode is window attention with T = 1: the one query row sits at position len - 1 and sees
 * every key. Where the window operator runs its tensor-core kernel (NVIDIA, q and K/V both
 * f16 or both bf16, D 64, 128 or 256), that kernel reads K/V at 71-93 % of the streaming-read
 * bandwidth against 57-77 % for the CUDA-core kernel of this file (H200, bf16, Hq 32 / Hkv 8,
 * D 128, B 1-8, L 32K-128K, 2026-11-22), so decode is routed there. Not for per-head lengths
 * [B, Hkv], a forced split count or, at D 256, B * max_length < 8K tokens (below: these stay
 * on this file's kernel; CLKV_DECODE_MMA=1 routes the last case too), nor with
 * CLKV_DECODE_MMA=0. Fills `w` and returns 1 when routed. D 256 had no keyrows kernel then;
 * its 16-row window kernel against this file's (H200, bf16 Hq 32 / Hkv 8, 2026-11-28): B 1
 * 32K / 128K 79.5 / 268.6 against 90.0 / 321.5 us, B 8 520.8 / 2015.2 against 657.0 /
 * 2595.2 us (88-94 % of the read bandwidth at 128K against 73-74 %). Since 2026-11-28
 * (session 31) the keyrows kernel's DIRECT form serves D 256 above 4K tokens in all: B 1
 * 32K / 128K 71.5 / 251.1, B 8 491 / 1935 us (83-98 %). Those calls route whatever their
 * size (kind 2 below); the 8K bound now holds only where the window operator would run its
 * 16-row kernel (4K tokens or fewer in all, rows not 16-byte aligned). Re-measured
 * 2026-11-28 (session 32), keyrows against this file's kernel (CLKV_DECODE_MMA=0): B 1
 * 4608 / 6144 tokens 16.6 / 18.6 against 23.9 / 31.3 us, B 2 2560 / 3072 17.7 / 18.7
 * against 32.2 / 38.4; CLKV_DECODE_MMA=1 changed nothing there (B 1 4608-12288, B 2
 * 2560-4096 within 0.3 us). */
static int route_to_window(clkv_context *ctx, const clkv_attention_decode_args *a,
                           clkv_attention_window_args *w) {
    if (!ctx->info.nvidia_ptx || ctx->decode_tuning.tensor_cores == 0 || a->num_splits != 0 ||
        (a->lengths.buf && a->lengths.ndim != 1))
        return 0;
    *w = (clkv_attention_window_args)CLKV_ATTENTION_WINDOW_ARGS_INIT;
    const int64_t D = a->q.dims[2];
    w->q = a->q;
    w->q.ndim = 4;
    w->q.dims[2] = 1;
    w->q.dims[3] = D;
    w->q.strides[2] = D;
    w->q.strides[3] = 1;
    w->o = a->o;
    w->o.ndim = 4;
    w->o.dims[2] = 1;
    w->o.dims[3] = D;
    w->o.strides[2] = D;
    w->o.strides[3] = 1;
    if (a->lse.buf) {
        w->lse = a->lse;
        w->lse.ndim = 3;
        w->lse.dims[2] = 1;
        w->lse.strides[2] = 1;
    }
    w->k = a->k;
    w->v = a->v;
    w->lengths = a->lengths;
    w->max_length = a->max_length;
    w->scale = a->scale;
    const int kind = clkv__window_uses_tensor_cores(ctx, w);
    /* Where the window operator runs its 16-row kernel (kind 1: no keyrows kernel for the
     * shape), small caches may stay here: launch-bound either way. The keyrows kernel (kind
     * 2) takes every size (H200 B 1, L 4K 16.3 us against 18.5 us here). H200, bf16,
     * 2026-11-28, µs here against the 16-row kernel: G 16 (Hq 64 / Hkv 4, D 128) B 1 1K /
     * 4K / 8K 18.8 / 26.2 / 39.1 against 16.0 / 16.3 / 16.5 (G 12, Hq 96 / Hkv 8: 19.2 /
     * 47.8 / 79.7 against 17.4 / 16.6 / 16.6), so G > 8 always routes; D 256
     * (Hq 32 / Hkv 8) B 1 1K / 4K / 8K 16.2 / 22.8 / 37.7 against 23.8 / 24.5 / 31.7, B 2 4K
     * 47.2 against 31.0, so D 256 routes from 8K tokens in all (B x max_length). Other
     * kind-1 cases (CLKV_DECODE_KEYROWS=0) keep the earlier 16K (19-20 us here at B 1 4K
     * against 17-26 us). */
    const int64_t max_len = a->max_length < 0 ? a->k.dims[2] : a->max_length;
    const int64_t G = a->q.dims[1] / (a->k.dims[1] > 0 ? a->k.dims[1] : 1);
    const int64_t min_tokens = D == 256 ? 8192 : G > 8 ? 0 : 16384;
    if (kind == 1 && ctx->decode_tuning.tensor_cores < 0 && a->q.dims[0] * max_len < min_tokens)
        return 0;
    return kind != 0;
}

clkv_status clkv_attention_decode_workspace_size(clkv_context *ctx,
                                                 const clkv_attention_decode_args *args,
                                                 size_t *bytes) {
    clkv_status st = check_common(ctx, args);
    if (st != CLKV_OK)
        return st;
    if (!bytes)
        return clkv__fail(ctx, CLKV_ERR_ARG_NULL, "bytes: output pointer is NULL");
    clkv_attention_window_args w;
    if (route_to_window(ctx, args, &w))
        return clkv_attention_window_workspace_size(ctx, &w, bytes);
    decode_plan p;
    if ((st = plan_launch(ctx, args, &p)) != CLKV_OK)
        return st;
    *bytes = (p.B && p.Hq) ? p.part_acc_bytes + p.part_ml_bytes : 0;
    return CLKV_OK;
}

clkv_status clkv_attention_decode(clkv_context *ctx, const clkv_attention_decode_args *args,
                                  cl_event *done) {
    clkv_status st = check_common(ctx, args);
    if (st != CLKV_OK)
        return st;
    clkv_attention_window_args w;
    if (route_to_window(ctx, args, &w))
        return clkv_attention_window(ctx, &w, done);
    decode_plan p;
    if ((st = plan_launch(ctx, args, &p)) != CLKV_OK)
        return st;
    if (p.B == 0 || p.Hq == 0) /* nothing to compute; still hand back a completion event */
        return clkv__marker(ctx, done);

    clkv_defs defs;
    clkv__defs_init(&defs);
    clkv__attn_rows_defs(&defs, args->q.dtype, args->k.dtype, p.D, p.group, p.epl, p.wg, p.unroll,
                         p.vec_aligned);
    clkv__defs_int(&defs, "CP_ASYNC", p.cp_async);
    clkv__defs_int(&defs, "STAGES", p.cp_async ? p.stages : 0);
    cl_kernel kp, km;
    if ((st = clkv__get_kernel(ctx, KERNEL_FILE, &defs, "attention_decode_partial", &kp)) ||
        (st = clkv__attn_merge_kernel(ctx, args->o.dtype, p.D, &km)))
        return st;
    cl_mem ws;
    if ((st = clkv__workspace(ctx, p.part_acc_bytes + p.part_ml_bytes, &ws)))
        return st;

    /* Both partial arrays live in the workspace: acc first, then (m, l) pairs. */
    const cl_long ml_off = (cl_long)(p.part_acc_bytes / 4);

    const cl_mem len_buf = args->lengths.buf;
    /* lengths [B] or [B, Hkv]: element b * len_sb + kvh * len_sh (len_sh = 0 for [B]). */
    const cl_long len_off = len_buf ? clkv__elem_offset(&args->lengths) : 0,
                  len_sb = len_buf ? args->lengths.strides[0] : 0,
                  len_sh = len_buf && args->lengths.ndim == 2 ? args->lengths.strides[1] : 0;
    const cl_int has_len = len_buf != NULL, max_len = p.max_len, Hq = (cl_int)p.Hq, G = (cl_int)p.G,
                 nhg = p.nhg, chunk = p.chunk, splits = p.splits;
    const cl_float scale_log2 = p.scale * 1.4426950408889634f;
    st = clkv__attn_set_qkv_args(ctx, kp, "attention_decode_partial", &args->q, &args->k, &args->v);
    if (st == CLKV_OK)
        st = clkv__set_args_at(ctx, kp, "attention_decode_partial", CLKV_ATTN_QKV_NARGS, 14,
                               CLKV_ARG(len_buf), CLKV_ARG(len_off), CLKV_ARG(len_sb),
                               CLKV_ARG(len_sh), CLKV_ARG(has_len), CLKV_ARG(max_len), CLKV_ARG(Hq),
                               CLKV_ARG(G), CLKV_ARG(nhg), CLKV_ARG(chunk), CLKV_ARG(splits),
                               CLKV_ARG(scale_log2), CLKV_ARG(ws), CLKV_ARG(ml_off));
    if (st == CLKV_OK)
        st = clkv__attn_set_merge_args(ctx, km, ws, ml_off, splits, Hq, &args->o, &args->lse);
    /* Both kernels pass the local-memory check before either is enqueued. */
    if (st == CLKV_OK &&
        (st = clkv__check_local_mem(ctx, kp, "attention_decode_partial", 0)) == CLKV_OK)
        st = clkv__check_local_mem(ctx, km, "attention_decode_merge", 0);
    if (st == CLKV_OK) {
        const size_t gp[3] = {(size_t)p.splits * p.wg, (size_t)(p.Hkv * p.nhg), (size_t)p.B};
        const size_t lp[3] = {(size_t)p.wg, 1, 1};
        clkv__log(ctx,
                  "attention_decode: B=%lld Hq=%lld Hkv=%lld D=%lld max_len=%d group=%d epl=%d "
                  "wg=%d unroll=%d aligned=%d cp_async=%d stages=%d splits=%d chunk=%d",
                  (long long)p.B, (long long)p.Hq, (long long)p.Hkv, (long long)p.D, p.max_len,
                  p.group, p.epl, p.wg, p.unroll, p.vec_aligned, p.cp_async, p.stages, p.splits,
                  p.chunk);
        st = clkv__enqueue(ctx, kp, "attention_decode_partial", 3, gp, lp, NULL);
    }
    if (st == CLKV_OK)
        st = clkv__attn_enqueue_merge(ctx, km, p.B, p.Hq, done);
    return st;
}
