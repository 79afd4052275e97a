/* clkv_attention_sparse: validation, launch geometry, split-K partials over the attended
 * token set (cl_kernels/attention_sparse.cl) and the decode merge kernel. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host/attention_common.h"
#include "host/attention_internal.h"
#include "runtime/internal.h"

#include "cl_kernels/kernel_args.cl" /* after the OpenCL types */

#define KERNEL_FILE "attention_sparse.cl"
#define MAX_GROUP 8
#define MAX_HASH_SLOTS 8192
/* The ParisKV step's plan: most splits per (sequence, KV head) (its in-kernel merge holds
 * G x splits <= 256 weights in local memory) and most idx entries (a local copy of the
 * top-k). */
#define STEP_MAX_SPLITS 32
#define STEP_MAX_NI CLKV_SPARSE_STEP_MAX_NI

typedef struct sparse_plan {
    int64_t B, Hq, Hkv, G, L, D, NI;
    int max_len, sink, local;
    float scale;
    int group, nhg;
    int epl, tpr, wg, unroll, vec_aligned, sel;
    int hash_slots;
    int64_t total; /* upper bound of the attended list length of a (b, kv head) */
    int splits, chunk;
    int step; /* the ParisKV step's plan (SP_LASTIDX): the last split takes idx, see below */
    size_t part_acc_bytes, part_ml_bytes;
} sparse_plan;

static clkv_status validate(clkv_context *ctx, const clkv_attention_sparse_args *a) {
    clkv_status st;
    if ((st = clkv__check_tensor(ctx, &a->q, "q", 3, CLKV_FLOAT_DTYPES)) ||
        (st = clkv__check_tensor(ctx, &a->k, "k", 4, CLKV_FLOAT_DTYPES)) ||
        (st = clkv__check_tensor(ctx, &a->v, "v", 4, CLKV_FLOAT_DTYPES)) ||
        (st = clkv__check_tensor(ctx, &a->o, "o", 3, CLKV_FLOAT_DTYPES)) ||
        (st = clkv__check_optional_tensor(ctx, &a->lse, "lse", 2, CLKV_DTYPE_BIT(CLKV_F32))) ||
        (st = clkv__check_optional_tensor(ctx, &a->lengths, "lengths", 1,
                                          CLKV_DTYPE_BIT(CLKV_I32))) ||
        (st = clkv__check_optional_tensor(ctx, &a->idx, "idx", 3, CLKV_DTYPE_BIT(CLKV_I32))))
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
    if (a->idx.buf && ((st = clkv__check_dim(ctx, &a->idx, "idx", 0, B, "batch of q")) ||
                       (st = clkv__check_dim(ctx, &a->idx, "idx", 1, Hkv, "KV heads of k"))))
        return st;
    if ((st = clkv__attn_check_sizes(ctx, B, Hq, Hkv, L, a->max_length)))
        return st;
    const int64_t NI = a->idx.buf ? a->idx.dims[2] : 0;
    const int64_t ml = a->max_length < 0 ? L : a->max_length;
    if (NI > INT32_MAX - ml)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE,
                          "idx: n_idx = %lld plus max_length = %lld exceeds 2^31-1 list entries",
                          (long long)NI, (long long)ml);
    if (a->k_sel.buf || a->v_sel.buf) {
        if (!a->k_sel.buf || !a->v_sel.buf)
            return clkv__fail(ctx, CLKV_ERR_ARG_NULL, "%s: k_sel and v_sel go together",
                              a->k_sel.buf ? "v_sel" : "k_sel");
        if (!a->idx.buf)
            return clkv__fail(ctx, CLKV_ERR_ARG_NULL, "idx: k_sel / v_sel need idx");
        const int64_t want[4] = {B, Hkv, NI, D};
        const char *why[4] = {"batch of q", "KV heads of k", "n_idx of idx", "head dim of q"};
        for (int t = 0; t < 2; t++) {
            const clkv_tensor *x = t == 0 ? &a->k_sel : &a->v_sel;
            const char *name = t == 0 ? "k_sel" : "v_sel";
            if ((st = clkv__check_tensor(ctx, x, name, 4, CLKV_DTYPE_BIT(a->k.dtype))))
                return st;
            for (int i = 0; i < 4; i++)
                if ((st = clkv__check_dim(ctx, x, name, i, want[i], why[i])))
                    return st;
        }
    }
    if (a->sink < 0)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "sink: %lld is negative", (long long)a->sink);
    if (a->local < 0)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "local: %lld is negative", (long long)a->local);
    if ((st = clkv__attn_check_scale(ctx, a->scale)))
        return st;
    return CLKV_OK;
}

/* A tuning override from the context (see clkv_decode_tuning), else the default. */
static int tuned(int override, int fallback) {
    return override >= 0 ? override : fallback;
}

static size_t reduction_local_bytes(const sparse_plan *p) {
    int nrg = p->wg / p->tpr;
    int red_rows = nrg > 1 ? nrg / 2 : 1;
    return (size_t)nrg * p->group * 2 * 4 + (size_t)red_rows * p->group * p->D * 4;
}

static clkv_status plan_launch(clkv_context *ctx, const clkv_attention_sparse_args *a, int step,
                               sparse_plan *p) {
    memset(p, 0, sizeof *p);
    p->step = step;
    p->B = a->q.dims[0];
    p->Hq = a->q.dims[1];
    p->D = a->q.dims[2];
    p->Hkv = a->k.dims[1];
    p->L = a->k.dims[2];
    p->NI = a->idx.buf ? a->idx.dims[2] : 0;
    p->G = p->Hkv ? p->Hq / p->Hkv : 1;
    p->max_len = (int)(a->max_length < 0 ? p->L : a->max_length);
    p->sink = (int)(a->sink < p->max_len ? a->sink : p->max_len);
    p->local = (int)(a->local < p->max_len ? a->local : p->max_len);
    p->scale = a->scale != 0.0f ? a->scale : (float)(1.0 / sqrt((double)p->D));
    p->group = (int)(p->G < MAX_GROUP ? p->G : MAX_GROUP);
    if (p->group < 1)
        p->group = 1;
    p->nhg = (int)((p->G + p->group - 1) / p->group);

    const clkv_device_info *dev = &ctx->info;
    const clkv_decode_tuning *tune = &ctx->decode_tuning; /* CLKV_DECODE_EPL/WG/UNROLL */
    const uint32_t esize = clkv_dtype_size(a->k.dtype);
    if (dev->nvidia_ptx) {
        /* As decode attention: fewer, fatter lanes when few heads share a row (fewer
         * shuffles per row); more lanes for large groups so q and acc stay in registers.
         * 128 lanes hold 128 / TPR gathered rows in flight, two per row-group. */
        p->epl = tuned(tune->epl, p->group <= 4 ? 16 : 8);
        p->wg = tuned(tune->wg, 128);
        p->unroll = tuned(tune->unroll, 2);
    } else {
        /* One lane per row (the CPU compiler vectorizes the element loops); a forced EPL
         * < D runs the multi-lane path with local-memory row sums (tests). */
        p->epl = tuned(tune->epl, (int)p->D);
        p->wg = tuned(tune->wg, dev->kind == CLKV_DEVICE_KIND_CPU ? 16 : 64);
        p->unroll = tuned(tune->unroll, 1);
    }
    const int vw = (int)(16 / esize);
    if (p->epl <= 0 || p->D % p->epl != 0 || p->unroll < 1 || p->wg < 1)
        return clkv__fail(ctx, CLKV_ERR_INTERNAL,
                          "sparse attention: bad geometry EPL=%d WG=%d UNROLL=%d for D=%lld",
                          p->epl, p->wg, p->unroll, (long long)p->D);
    p->tpr = (int)(p->D / p->epl);
    while (reduction_local_bytes(p) > dev->local_mem_bytes / 2 && p->wg > p->tpr * 2)
        p->wg /= 2;
    if ((size_t)p->wg > dev->max_work_group_size)
        p->wg = (int)dev->max_work_group_size / p->tpr * p->tpr;
    if (p->unroll > p->tpr)
        p->unroll = p->tpr;
    if (p->tpr > 32 || (p->tpr & (p->tpr - 1)) != 0 || (p->tpr > 1 && p->epl % vw != 0) ||
        p->wg < p->tpr || p->wg % p->tpr != 0)
        return clkv__fail(ctx, CLKV_ERR_INTERNAL,
                          "sparse attention: bad geometry EPL=%d WG=%d UNROLL=%d for D=%lld",
                          p->epl, p->wg, p->unroll, (long long)p->D);
    p->vec_aligned = clkv__rows_aligned(&a->k, vw) && clkv__rows_aligned(&a->v, vw);
    p->sel = a->k_sel.buf != NULL;
    if (p->sel)
        p->vec_aligned = p->vec_aligned && clkv__rows_aligned(&a->k_sel, vw) &&
                         clkv__rows_aligned(&a->v_sel, vw);

    /* Duplicate detection: a local hash set of at least 2 NI slots (load <= 1/2) while
     * it fits the device's local memory next to the tile arrays (it shares its memory
     * with the row-group reduction) and MAX_HASH_SLOTS, i.e. NI <= 4096; else the
     * O(NI)-per-entry scan. */
    p->hash_slots = 0;
    if (p->NI > 1) {
        /* three sizes only (fewer program variants): load factor <= 1/2 */
        const int64_t slots = 2 * p->NI <= 256 ? 256 : 2 * p->NI <= 1024 ? 1024 : MAX_HASH_SLOTS;
        const size_t tile_bytes = (size_t)(p->wg / p->tpr) * p->unroll * 2 * 4 + 64;
        if (2 * p->NI <= MAX_HASH_SLOTS && (size_t)slots * 4 + tile_bytes <= dev->local_mem_bytes)
            p->hash_slots = (int)slots;
    }

    /* Split-K over the attended list: a few work-groups per compute unit, each at least
     * one tile (NRG * UNROLL list positions) long. */
    const int64_t dense =
        (int64_t)p->sink + p->local < p->max_len ? (int64_t)p->sink + p->local : p->max_len;
    p->total = dense + p->NI;
    const int64_t tile = (int64_t)(p->wg / p->tpr) * p->unroll;
    const int64_t units = p->B * p->Hkv * p->nhg;
    const int gpu = dev->kind == CLKV_DEVICE_KIND_GPU;
    const int64_t target = (int64_t)dev->compute_units * tuned(tune->waves, gpu ? 4 : 2);
    const int64_t len = p->total > 0 ? p->total : 1;
    int64_t splits = units > 0 ? (target + units - 1) / units : 1;
    const int64_t max_splits = (len + tile - 1) / tile;
    if (splits > max_splits)
        splits = max_splits;
    if (splits > CLKV_ATTN_MERGE_MAX_SPLITS)
        splits = CLKV_ATTN_MERGE_MAX_SPLITS;
    if (splits < 1)
        splits = 1;
    int64_t chunk = (len + splits - 1) / splits;
    chunk = (chunk + tile - 1) / tile * tile;
    p->chunk = (int)chunk;
    p->splits = (int)((len + chunk - 1) / chunk);
    if (step) {
        /* A tile costs several microseconds of latency in one work-group, so each split
         * takes one tile where that keeps the splits at most STEP_MAX_SPLITS (the merge
         * reads every split back); the idx entries and the dense positions get splits of
         * their own. */
        if (!a->idx.buf || p->nhg != 1 || p->NI < 1 || p->NI > STEP_MAX_NI)
            return clkv__fail(ctx, CLKV_ERR_INTERNAL,
                              "sparse attention of the ParisKV step: needs idx with 1..%d "
                              "entries and at most %d query heads per KV head",
                              STEP_MAX_NI, MAX_GROUP);
        const int64_t per = (dense + p->NI + tile * (STEP_MAX_SPLITS - 2) - 1) /
                            (tile * (STEP_MAX_SPLITS - 2)); /* tiles per split */
        p->chunk = (int)(per * tile);
        p->hash_slots = 0; /* the step's idx entries are distinct: no duplicate detection */
        p->splits = (int)((dense + p->chunk - 1) / p->chunk + (p->NI + p->chunk - 1) / p->chunk);
    }
    p->part_acc_bytes = clkv__ws_align((size_t)(p->B * p->Hq * p->splits * p->D) * 4);
    p->part_ml_bytes = clkv__ws_align((size_t)(p->B * p->Hq * p->splits) * 2 * 4);
    return CLKV_OK;
}

static clkv_status check_common(clkv_context *ctx, const clkv_attention_sparse_args *args) {
    if (!ctx || !args)
        return clkv__fail_entry(ctx, args);
    return validate(ctx, args);
}

clkv_status clkv_attention_sparse_workspace_size(clkv_context *ctx,
                                                 const clkv_attention_sparse_args *args,
                                                 size_t *bytes) {
    clkv_status st = check_common(ctx, args);
    if (st != CLKV_OK)
        return st;
    if (!bytes)
        return clkv__fail(ctx, CLKV_ERR_ARG_NULL, "bytes: output pointer is NULL");
    sparse_plan p;
    if ((st = plan_launch(ctx, args, 0, &p)) != CLKV_OK)
        return st;
    *bytes = (p.B && p.Hq) ? p.part_acc_bytes + p.part_ml_bytes : 0;
    return CLKV_OK;
}

/* Build, set up and enqueue the partial kernel (SP_LASTIDX with the step's plan, SP_TOPK
 * with tk) and, unless it merges its own splits, the merge kernel; partial states in `part`
 * (NULL: the context workspace). */
static clkv_status launch(clkv_context *ctx, const clkv_attention_sparse_args *args,
                          const sparse_plan *pp, const clkv__topk_src *tk, cl_mem part,
                          cl_event *done) {
    const sparse_plan p = *pp;
    clkv_status st;
    /* The step's plan merges its few splits itself where fences are available. */
    const int fused = p.step && ctx->info.nvidia_ptx;
    clkv_defs defs;
    clkv__defs_init(&defs);
    clkv__attn_rows_defs(&defs, args->q.dtype, args->k.dtype, p.D, p.group, p.epl, p.wg, p.unroll,
                         p.vec_aligned);
    clkv__defs_int(&defs, "HASH_SLOTS", p.hash_slots);
    clkv__defs_int(&defs, "SEL_ROWS", p.sel);
    if (p.step) {
        clkv__defs_int(&defs, "SP_LASTIDX", 1);
        clkv__defs_int(&defs, "O_DTYPE", args->o.dtype);
        clkv__defs_int(&defs, "FUSED_MERGE", fused);
    }
    if (tk) {
        clkv__defs_int(&defs, "SP_TOPK", 1);
        clkv__defs_int(&defs, "TK_NI", (int)p.NI);
        clkv__defs_int(&defs, "KH_BITS", tk->kh_bits);
        clkv__defs_int(&defs, "KBUF_CAP", tk->kbuf_cap);
        clkv__defs_int(&defs, "TK_RANK", tk->tk_rank);
    }
    cl_kernel kp, km = NULL;
    if ((st = clkv__get_kernel(ctx, KERNEL_FILE, &defs, "attention_sparse_partial", &kp)) ||
        (!fused && (st = clkv__attn_merge_kernel(ctx, args->o.dtype, p.D, &km))))
        return st;
    cl_mem ws = part, tickets = NULL;
    if (!ws && (st = clkv__workspace(ctx, p.part_acc_bytes + p.part_ml_bytes, &ws)))
        return st;
    if (fused && (st = clkv__counters(ctx, (size_t)(p.B * p.Hkv), &tickets)))
        return st;
    const cl_long ml_off = (cl_long)(p.part_acc_bytes / 4);

    /* The partial kernel takes its scalars as one struct (cl_kernels/kernel_args.cl says
     * why). Selected rows (SEL_ROWS); absent: k / v stand in (never read). */
    const clkv_tensor *KS = p.sel ? &args->k_sel : &args->k, *VS = p.sel ? &args->v_sel : &args->v;
    const cl_mem len_buf = args->lengths.buf;
    /* Without idx the kernel still needs a valid buffer argument: it never reads it. */
    const cl_mem idx_buf = args->idx.buf ? args->idx.buf : args->q.buf;
    sparse_scalars P;
    memset(&P, 0, sizeof P);
    P.q_off = clkv__elem_offset(&args->q), P.q_sb = args->q.strides[0];
    P.q_sh = args->q.strides[1];
    P.k_off = clkv__elem_offset(&args->k), P.k_sb = args->k.strides[0];
    P.k_sh = args->k.strides[1], P.k_sl = args->k.strides[2];
    P.v_off = clkv__elem_offset(&args->v), P.v_sb = args->v.strides[0];
    P.v_sh = args->v.strides[1], P.v_sl = args->v.strides[2];
    P.ks_off = clkv__elem_offset(KS), P.ks_sb = KS->strides[0], P.ks_sh = KS->strides[1];
    P.ks_sl = KS->strides[2];
    P.vs_off = clkv__elem_offset(VS), P.vs_sb = VS->strides[0], P.vs_sh = VS->strides[1];
    P.vs_sl = VS->strides[2];
    P.len_off = len_buf ? clkv__elem_offset(&args->lengths) : 0;
    if (args->idx.buf) {
        P.idx_off = clkv__elem_offset(&args->idx);
        P.idx_sb = args->idx.strides[0], P.idx_sh = args->idx.strides[1];
    }
    P.ml_off = ml_off;
    P.has_lengths = len_buf != NULL, P.max_len = p.max_len, P.n_idx = (cl_int)p.NI;
    P.sink = p.sink, P.local_len = p.local, P.Hq = (cl_int)p.Hq, P.G = (cl_int)p.G;
    P.nhg = p.nhg, P.chunk = p.chunk, P.num_splits = p.splits;
    P.scale_log2 = p.scale * 1.4426950408889634f;
    const cl_mem lse_buf = args->lse.buf;
    if (p.step) {
        P.o_off = clkv__elem_offset(&args->o), P.o_sb = args->o.strides[0];
        P.o_sh = args->o.strides[1];
        if (lse_buf) {
            P.lse_off = clkv__elem_offset(&args->lse), P.lse_sb = args->lse.strides[0];
            P.lse_sh = args->lse.strides[1];
        }
        P.has_lse = lse_buf != NULL;
    }
    if (tk) {
        P.cs_off = tk->cs_off, P.cs_sb = tk->cs_sb, P.cs_sh = tk->cs_sh;
        P.ca_off = tk->ca_off, P.ca_sb = tk->ca_sb, P.ca_sh = tk->ca_sh;
        P.plan_off = tk->plan_off, P.max_cand = tk->max_cand;
        P.kh_off = tk->kh_off, P.kb_off = tk->kb_off;
    }
    st = clkv__set_args(ctx, kp, "attention_sparse_partial", 9, CLKV_ARG(args->q.buf),
                        CLKV_ARG(args->k.buf), CLKV_ARG(args->v.buf), CLKV_ARG(KS->buf),
                        CLKV_ARG(VS->buf), CLKV_ARG(len_buf), CLKV_ARG(idx_buf), CLKV_ARG(ws),
                        CLKV_ARG(P));
    if (st == CLKV_OK && p.step) {
        const cl_mem tix = tickets ? tickets : ws; /* never used without the fused merge */
        st = clkv__set_args_at(ctx, kp, "attention_sparse_partial", 9, 3, CLKV_ARG(args->o.buf),
                               CLKV_ARG(lse_buf), CLKV_ARG(tix));
    }
    if (st == CLKV_OK && tk)
        st = clkv__set_args_at(ctx, kp, "attention_sparse_partial", 12, 5, CLKV_ARG(tk->cs),
                               CLKV_ARG(tk->cand), CLKV_ARG(tk->plan), CLKV_ARG(tk->ws),
                               CLKV_ARG(tk->ws));
    const cl_int splits = p.splits, Hq = (cl_int)p.Hq;
    if (st == CLKV_OK && km)
        st = clkv__attn_set_merge_args(ctx, km, ws, ml_off, splits, Hq, &args->o, &args->lse);
    if (st == CLKV_OK &&
        (st = clkv__check_local_mem(ctx, kp, "attention_sparse_partial", 0)) == CLKV_OK && km)
        st = clkv__check_local_mem(ctx, km, "attention_decode_merge", 0);
    if (st == CLKV_OK) {
        const size_t gp[3] = {(size_t)p.splits * p.wg, (size_t)(p.Hkv * p.nhg), (size_t)p.B};
        const size_t lp[3] = {(size_t)p.wg, 1, 1};
        clkv__log(ctx,
                  "attention_sparse: B=%lld Hq=%lld Hkv=%lld D=%lld NI=%lld max_len=%d sink=%d "
                  "local=%d group=%d epl=%d wg=%d unroll=%d aligned=%d hash=%d sel=%d "
                  "splits=%d chunk=%d step=%d topk=%d fused_merge=%d",
                  (long long)p.B, (long long)p.Hq, (long long)p.Hkv, (long long)p.D,
                  (long long)p.NI, p.max_len, p.sink, p.local, p.group, p.epl, p.wg, p.unroll,
                  p.vec_aligned, p.hash_slots, p.sel, p.splits, p.chunk, p.step, tk != NULL, fused);
        st = clkv__enqueue(ctx, kp, "attention_sparse_partial", 3, gp, lp, km ? NULL : done);
    }
    if (st == CLKV_OK && km)
        st = clkv__attn_enqueue_merge(ctx, km, p.B, p.Hq, done);
    return st;
}

/* Validate, plan (the step's plan when `step`) and launch. */
static clkv_status run(clkv_context *ctx, const clkv_attention_sparse_args *args, int step,
                       const clkv__topk_src *tk, cl_mem part, cl_event *done) {
    clkv_status st = check_common(ctx, args);
    if (st != CLKV_OK)
        return st;
    sparse_plan p;
    if ((st = plan_launch(ctx, args, step, &p)) != CLKV_OK)
        return st;
    if (p.B == 0 || p.Hq == 0)
        return clkv__marker(ctx, done);
    return launch(ctx, args, &p, tk, part, done);
}

clkv_status clkv_attention_sparse(clkv_context *ctx, const clkv_attention_sparse_args *args,
                                  cl_event *done) {
    return run(ctx, args, 0, NULL, NULL, done);
}

clkv_status clkv__attention_sparse_step_part_bytes(clkv_context *ctx,
                                                   const clkv_attention_sparse_args *a,
                                                   size_t *bytes) {
    clkv_status st = check_common(ctx, a);
    if (st != CLKV_OK)
        return st;
    sparse_plan p;
    if ((st = plan_launch(ctx, a, 1, &p)) != CLKV_OK)
        return st;
    *bytes = (p.B && p.Hq) ? p.part_acc_bytes + p.part_ml_bytes : 0;
    return CLKV_OK;
}

clkv_status clkv__attention_sparse_step(clkv_context *ctx, const clkv_attention_sparse_args *a,
                                        const clkv__topk_src *tk, cl_mem part, cl_event *done) {
    if (!part)
        return clkv__fail(ctx, CLKV_ERR_INTERNAL, "sparse attention of the step: part is NULL");
    if (tk && a && a->k_sel.buf)
        return clkv__fail(ctx, CLKV_ERR_INTERNAL,
                          "sparse attention of the step: the top-k attends k / v, not k_sel");
    return run(ctx, a, 1, tk, part, done);
}
