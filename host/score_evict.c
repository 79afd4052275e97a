/* clkv_evict_keep_set: window attention + scorer + keep-set in one call, intermediates in
 * one workspace region placed above the region the three steps use themselves. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clkv/attention.h"
#include "clkv/score.h"
#include "host/score_internal.h"
#include "runtime/internal.h"

/* The three steps' arguments with their intermediates at byte offset `base` of ws. */
typedef struct evict_steps {
    int window;
    clkv_attention_window_args att;
    clkv_score_args score;
    clkv_keep_set_args keep;
    size_t inter_bytes;
} evict_steps;

static clkv_tensor ws_view(cl_mem ws, size_t off, int ndim, const int64_t *dims) {
    clkv_tensor t = {0};
    t.buf = ws;
    t.offset = off;
    t.dtype = CLKV_F32;
    t.ndim = ndim;
    int64_t stride = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        t.dims[i] = dims[i];
        t.strides[i] = stride;
        stride *= dims[i];
    }
    return t;
}

static int needs_a(clkv_score_method m) {
    return m == CLKV_SCORE_DROPKV || m == CLKV_SCORE_ANDPRO;
}

/* Fill the step arguments for intermediates at [base, base + inter_bytes) of ws. The
 * caller's own tensors are taken as given (the steps validate them). */
static void build_steps(const clkv_evict_args *e, clkv_score_method m, cl_mem ws, size_t base,
                        evict_steps *s) {
    memset(s, 0, sizeof *s);
    const clkv_score_args *sa = &e->score;
    s->window = clkv_score_method_uses_window(m);
    const int64_t B = sa->k.dims[0], Hkv = sa->k.dims[1], L = sa->k.dims[2], D = sa->k.dims[3];
    const int64_t Hq = s->window ? sa->q.dims[1] : 0, W = s->window ? sa->q.dims[2] : 0;
    size_t off = base;
    s->score = *sa;
    s->score.method = m;
    if (s->window) {
        const int64_t ld[3] = {B, Hq, W}, od[4] = {B, Hq, W, D};
        s->att = (clkv_attention_window_args)CLKV_ATTENTION_WINDOW_ARGS_INIT;
        s->att.q = sa->q;
        s->att.k = sa->k;
        s->att.v = sa->v;
        s->att.lengths = sa->lengths;
        s->att.max_length = sa->max_length;
        s->att.scale = sa->scale;
        s->att.lse = ws_view(ws, off, 3, ld);
        off += clkv__ws_align((size_t)(B * Hq * W) * 4);
        if (needs_a(m)) {
            s->att.o = ws_view(ws, off, 4, od);
            off += clkv__ws_align((size_t)(B * Hq * W * D) * 4);
        } else { /* output not needed: one discarded row (stride-0 view) */
            s->att.o = ws_view(ws, off, 4, od);
            s->att.o.strides[0] = s->att.o.strides[1] = s->att.o.strides[2] = 0;
            off += clkv__ws_align((size_t)D * 4);
        }
        s->score.lse = s->att.lse;
        if (needs_a(m))
            s->score.a = s->att.o;
    }
    const int64_t sd[3] = {B, Hkv, L};
    if (!sa->scores.buf) {
        s->score.scores = ws_view(ws, off, 3, sd);
        off += clkv__ws_align((size_t)(B * Hkv * L) * 4);
    }
    if (m == CLKV_SCORE_CRITICALKV && !sa->pbar.buf) {
        s->score.pbar = ws_view(ws, off, 3, sd);
        off += clkv__ws_align((size_t)(B * Hkv * L) * 4);
    }
    s->keep = (clkv_keep_set_args)CLKV_KEEP_SET_ARGS_INIT;
    s->keep.scores = s->score.scores;
    s->keep.pbar = m == CLKV_SCORE_CRITICALKV ? s->score.pbar : clkv_tensor_none();
    s->keep.lengths = sa->lengths;
    s->keep.indices = e->indices;
    s->keep.counts = e->counts;
    s->keep.max_length = sa->max_length;
    s->keep.ratio = e->ratio;
    s->keep.budget = e->budget;
    s->keep.first_stage_ratio = e->first_stage_ratio;
    if (m == CLKV_SCORE_STREAMINGLLM)
        s->keep.window = sa->sink + sa->recent;
    else if (s->window)
        s->keep.window = clkv__score_protect(&s->score);
    s->inter_bytes = off - base;
}

/* Validate everything and compute the layout: region0 (the steps' own workspace) and
 * the intermediates above it. Grows the workspace (allocation only). */
static clkv_status plan(clkv_context *ctx, const clkv_evict_args *e, evict_steps *s,
                        size_t *total) {
    clkv_status st;
    clkv_score_method m = e->score.method;
    if (e->method_name && (st = clkv_score_method_from_name(e->method_name, &m)))
        return clkv__fail(ctx, st, "%s", clkv_last_error(NULL));
    if (e->score.lse.buf || e->score.a.buf)
        return clkv__fail(ctx, CLKV_ERR_ARG_UNSUPPORTED,
                          "%s: computed by clkv_evict_keep_set; pass it absent",
                          e->score.lse.buf ? "lse" : "a");
    if ((int)m < 0 || (int)m >= CLKV_SCORE_METHOD_COUNT)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "method: %d is not a clkv_score_method", (int)m);
    /* Shapes needed to size the intermediates: checked by the steps, but make sure the
     * dims read below are meaningful first. */
    if ((st = clkv__check_tensor(ctx, &e->score.k, "k", 4, CLKV_FLOAT_DTYPES)))
        return st;
    if (clkv_score_method_uses_window(m) &&
        (st = clkv__check_tensor(ctx, &e->score.q, "q", 4, CLKV_FLOAT_DTYPES)))
        return st;
    cl_mem ws;
    build_steps(e, m, NULL, 0, s);
    if ((st = clkv__workspace(ctx, s->inter_bytes, &ws)))
        return st;
    /* Size the steps with the intermediates at offset 0 (validates them too). */
    build_steps(e, m, ws, 0, s);
    size_t need = 0, b = 0;
    if (s->window) {
        if ((st = clkv_attention_window_workspace_size(ctx, &s->att, &b)))
            return st;
        need = b > need ? b : need;
    }
    /* the scorer's raw rows and the keep-set's scratch side by side: the fused path (the
     * keep-set pools the raw rows itself) reads the one while writing the other */
    size_t sb = 0;
    if ((st = clkv_score_workspace_size(ctx, &s->score, &sb)))
        return st;
    if ((st = clkv_keep_set_workspace_size(ctx, &s->keep, &b)))
        return st;
    b += clkv__ws_align(sb);
    need = b > need ? b : need;
    const size_t region0 = clkv__ws_align(need);
    *total = region0 + s->inter_bytes;
    if ((st = clkv__workspace(ctx, *total, &ws)))
        return st;
    build_steps(e, m, ws, region0, s);
    /* final descriptors, validated again before anything is enqueued */
    if (s->window && (st = clkv_attention_window_workspace_size(ctx, &s->att, &b)))
        return st;
    if ((st = clkv_score_workspace_size(ctx, &s->score, &b)) ||
        (st = clkv_keep_set_workspace_size(ctx, &s->keep, &b)))
        return st;
    return CLKV_OK;
}

clkv_status clkv_evict_keep_set_workspace_size(clkv_context *ctx, const clkv_evict_args *args,
                                               size_t *bytes) {
    if (!ctx || !args || !bytes)
        return clkv__fail_ws_entry(ctx, args, bytes);
    evict_steps s;
    size_t total = 0;
    clkv_status st = plan(ctx, args, &s, &total);
    if (st == CLKV_OK)
        *bytes = total;
    return st;
}

static int g_stages = 0;

/* $CLKV_EVICT_FUSE (read once per process): unset or nonzero = the keep-set pools the
 * scorer's raw rows in its first kernel where it can (one launch less); 0 = score_finalize
 * then the keep-set. */
static int fuse_env(void) {
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("CLKV_EVICT_FUSE");
        v = !(e && *e && atoi(e) == 0);
    }
    return v;
}

void clkv__evict_set_stages(int mask) {
    g_stages = mask & (CLKV__EVICT_ATTENTION | CLKV__EVICT_SCORE | CLKV__EVICT_KEEP);
}

clkv_status clkv_evict_keep_set(clkv_context *ctx, const clkv_evict_args *args, cl_event *done) {
    if (!ctx || !args)
        return clkv__fail_entry(ctx, args);
    evict_steps s;
    size_t total = 0;
    clkv_status st = plan(ctx, args, &s, &total);
    if (st)
        return st;
    const int stages = g_stages ? g_stages : 7;
    if (s.window && (stages & CLKV__EVICT_ATTENTION) &&
        (st = clkv_attention_window(ctx, &s.att, NULL)))
        return st;
    const clkv_tensor *k = &s.score.k;
    if ((stages & CLKV__EVICT_SCORE) && (stages & CLKV__EVICT_KEEP) && fuse_env() &&
        clkv__score_fusable(s.score.method) && !s.keep.pbar.buf &&
        k->dims[0] * k->dims[1] * k->dims[2] > 0 && clkv__keep_set_poolable(ctx, &s.keep)) {
        clkv__select_fuse f;
        if ((st = clkv__score_unpooled(ctx, &s.score, &f)))
            return st;
        return clkv__keep_set_fused(ctx, &s.keep, &f, done);
    }
    if ((stages & CLKV__EVICT_SCORE) && (st = clkv_score(ctx, &s.score, NULL)))
        return st;
    if (stages & CLKV__EVICT_KEEP)
        return clkv_keep_set(ctx, &s.keep, done);
    return clkv__marker(ctx, done);
}
