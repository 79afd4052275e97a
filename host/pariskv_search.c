/* clkv_pariskv_search (SPEC §4): validation, launch plan and workspace layout, then
 * Stage I (host/pariskv_collide.c) and Stage II (host/pariskv_rerank.c). */
#include <stdio.h>
#include <string.h>

#include "host/pariskv_retrieve_internal.h"

#define SEARCH_WG 256
#define PER_ITEM 16
/* Compaction work-groups per compute unit up to which the threshold is fused into it
 * (H100, 1M tokens, 4096 work-groups: fused 35.5 us, threshold + compaction 6.8 + 21.1;
 * with 1024 work-groups, CLKV_PARISKV_PER_ITEM=32, fused 18.2 us against 5.7 + 14.3 but
 * the same step time; with the default 2048, fused 21.6 us against 5.8 + 14.5 and the
 * step 196.7 / 197.1 us against 192.7 / 193.1, 2026-11-27). The threshold run by the last
 * pkv_collide work-group of each row instead (a ticket after a device-wide fence) was
 * slower: pkv_collide 64.0 -> 70.9 us at 1M tokens against the 6.1 us kernel it saves
 * (H100, 2026-11-27). So was a decoupled look-back in pkv_compact for the larger launches
 * (chunks taken by per-row tickets, each work-group publishing its counts, one warp summing
 * the earlier chunks' words 32 at a time): 31.5 us against 5.7 + 14.1 at 1M tokens (H100,
 * two runs, 2026-11-27). */
#define FUSED_WAVE_WGS 8

/* Environment switches read per search: CLKV_PARISKV_LEGACY=1 (the previous Stage I,
 * kept to measure against) and CLKV_PARISKV_FAST_TOPK=0 (the previous Stage II selection:
 * per-row score histogram and radix top-k instead of the coarse bin + counting rank).
 * Stage I kernel variants (name unset or empty -> default; see pariskv_collide.cl):
 *   CLKV_PARISKV_COLLIDE    pkv_collide: 0 the previous token-by-token loop, 1 (default)
 *                           id loads of several tokens issued first (16-byte loads where
 *                           aligned) and a parallel suffix scan
 *   CLKV_PARISKV_IDS_VEC    0: pkv_collide reads ids as 4-byte words even where 16-byte
 *                           loads are possible (the path of other row alignments)
 *   CLKV_PARISKV_COLLIDE_TOK  cap on the tokens a pkv_collide work-item loads ids for
 *                           before looking up: 1, 2, 4 (default), 8; other values: no cap
 *                           (up to 16 tokens, <= 64 words)
 *   CLKV_PARISKV_WSCAN      work-group scans of Stage I, the collection and pkv_topk: 1
 *                           (default) warp shuffles on NVIDIA, 0 Hillis-Steele in local
 *                           memory (the only path elsewhere)
 *   CLKV_PARISKV_PER_ITEM   tokens per work-item of pkv_collide / pkv_compact: 4, 8, 16
 *                           (default), 32 (chunk = 256 * that; H100, 1M tokens, same run, 8
 *                           -> 16: pkv_collide 62.6 -> 62.8 us, pkv_threshold 6.7 -> 5.6,
 *                           pkv_compact 17.8 -> 14.1, search 186.5 -> 181.4) */
#define COLLIDE_DEFAULT 1
#define COLLIDE_TOK_DEFAULT 4

static clkv_status check_dims(clkv_context *ctx, const clkv_tensor *t, const char *name,
                              const int64_t *want, const char *const *why, int n) {
    clkv_status st;
    for (int i = 0; i < n; i++)
        if (want[i] >= 0 && (st = clkv__check_dim(ctx, t, name, i, want[i], why[i])))
            return st;
    return CLKV_OK;
}

static clkv_status check_levels(clkv_context *ctx, const clkv_pariskv_levels *l, int32_t m) {
    if (l->m != m)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "levels: levels->m = %d differs from m = %d",
                          (int)l->m, (int)m);
    for (int t = 0; t < CLKV_PARISKV_NUM_LEVELS; t++)
        if (!(l->a[t] > 0.0f && l->a[t] <= 1.0f) || (t > 0 && !(l->a[t] > l->a[t - 1])))
            return clkv__fail(ctx, CLKV_ERR_ARG_RANGE,
                              "levels: a[%d] = %g is not in (0, 1] and increasing", t,
                              (double)l->a[t]);
    return CLKV_OK;
}

static clkv_status validate_search(clkv_context *ctx, const clkv_pariskv_search_args *a,
                                   pkv_search_plan *p) {
    memset(p, 0, sizeof *p);
    clkv_status st;
    const uint32_t u8 = CLKV_DTYPE_BIT(CLKV_U8), i32 = CLKV_DTYPE_BIT(CLKV_I32),
                   f32 = CLKV_DTYPE_BIT(CLKV_F32);
    if ((st = clkv__check_tensor(ctx, &a->q_rot, "q_rot", 3, f32)) ||
        (st = clkv__check_tensor(ctx, &a->q_norm, "q_norm", 2, f32)) ||
        (st = clkv__check_tensor(ctx, &a->ids, "ids", 4, u8)) ||
        (st = clkv__check_tensor(ctx, &a->codes, "codes", 4, u8)) ||
        (st = clkv__check_tensor(ctx, &a->weights, "weights", 4, CLKV_FLOAT_DTYPES)) ||
        (st = clkv__check_tensor(ctx, &a->counts, "counts", 4, CLKV_DTYPE_BIT(CLKV_U32))) ||
        (st = clkv__check_tensor(ctx, &a->plan, "plan", 2, i32)) ||
        (st = clkv__check_tensor(ctx, &a->idx, "idx", 3, i32)) ||
        (st = clkv__check_optional_tensor(ctx, &a->collide_scores, "collide_scores", 3, i32)) ||
        (st = clkv__check_optional_tensor(ctx, &a->candidates, "candidates", 3, i32)) ||
        (st = clkv__check_optional_tensor(ctx, &a->candidate_scores, "candidate_scores", 3, f32)))
        return st;
    const int64_t B = a->q_rot.dims[0], Hkv = a->q_rot.dims[1], D = a->q_rot.dims[2];
    const int64_t L = a->ids.dims[2];
    /* Every head dim the encoder produces codes for (SRHT or dense rotation). */
    const int pow2 = D > 0 && (D & (D - 1)) == 0;
    if (D < 2 || D > 512 || D % 2 != 0 || (pow2 && D != 64 && D != 128 && D != 256))
        return clkv__fail(ctx, CLKV_ERR_ARG_UNSUPPORTED,
                          "q_rot: head dim D = %lld, supported: 64, 128, 256 and even D in "
                          "[2, 512] that is not a power of two (as the encoder)",
                          (long long)D);
    if (a->m < CLKV_PARISKV_MIN_M || a->m > CLKV_PARISKV_MAX_M)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "m: %d is outside [2, 8]", (int)a->m);
    if (D % a->m != 0)
        return clkv__fail(ctx, CLKV_ERR_ARG_SHAPE, "m: %d does not divide the head dim D = %lld",
                          (int)a->m, (long long)D);
    const int64_t nblk = D / a->m, nc = (int64_t)1 << a->m;
    {
        const char *w3[4] = {"batch of q_rot", "KV heads of q_rot", "tokens of ids", "D / m"};
        const int64_t dq[2] = {B, Hkv};
        const int64_t di[4] = {B, Hkv, -1, nblk}, dc[4] = {B, Hkv, L, D / 2},
                      dw[4] = {B, Hkv, L, nblk}, dn[4] = {B, Hkv, nblk, nc};
        const char *wc[4] = {"batch of q_rot", "KV heads of q_rot", "tokens of ids", "D / 2"};
        const char *wn[4] = {"batch of q_rot", "KV heads of q_rot", "D / m", "2^m"};
        const char *wp[2] = {"CLKV_PARISKV_PLAN_ROWS", "batch of q_rot"};
        const int64_t dp[2] = {CLKV_PARISKV_PLAN_ROWS, B}, dx[3] = {B, Hkv, a->top_k};
        const char *wx[3] = {"batch of q_rot", "KV heads of q_rot", "top_k"};
        if ((st = check_dims(ctx, &a->q_norm, "q_norm", dq, w3, 2)) ||
            (st = check_dims(ctx, &a->ids, "ids", di, w3, 4)) ||
            (st = check_dims(ctx, &a->codes, "codes", dc, wc, 4)) ||
            (st = check_dims(ctx, &a->weights, "weights", dw, w3, 4)) ||
            (st = check_dims(ctx, &a->counts, "counts", dn, wn, 4)) ||
            (st = check_dims(ctx, &a->plan, "plan", dp, wp, 2)) ||
            (st = check_dims(ctx, &a->idx, "idx", dx, wx, 3)))
            return st;
    }
    if (B > 65535 || Hkv > 65535 || L > INT32_MAX)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE,
                          "ids: B = %lld, Hkv = %lld, L = %lld exceed 65535, 65535, 2^31-1",
                          (long long)B, (long long)Hkv, (long long)L);
    if (a->zone_start < 0 || a->zone_start > L)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "zone_start: %lld is outside [0, L = %lld]",
                          (long long)a->zone_start, (long long)L);
    const int64_t max_zone = a->max_zone < 0 ? L - a->zone_start : a->max_zone;
    if (a->max_zone < -1 || a->zone_start + max_zone > L)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE,
                          "max_zone: %lld with zone_start = %lld exceeds L = %lld",
                          (long long)a->max_zone, (long long)a->zone_start, (long long)L);
    const int64_t max_cand = a->max_candidates < 0 ? max_zone : a->max_candidates;
    if (a->max_candidates < -1 || max_cand > max_zone)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE,
                          "max_candidates: %lld is outside [-1, max_zone = %lld]",
                          (long long)a->max_candidates, (long long)max_zone);
    if (a->top_k < 0 || a->top_k > INT32_MAX)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "top_k: %lld is outside [0, 2^31-1]",
                          (long long)a->top_k);
    const struct {
        const clkv_tensor *t;
        const char *name;
        int64_t min_last;
    } opt[3] = {{&a->collide_scores, "collide_scores", max_zone},
                {&a->candidates, "candidates", max_cand},
                {&a->candidate_scores, "candidate_scores", max_cand}};
    for (int i = 0; i < 3; i++) {
        if (!opt[i].t->buf)
            continue;
        const int64_t d[2] = {B, Hkv};
        const char *w[2] = {"batch of q_rot", "KV heads of q_rot"};
        if ((st = check_dims(ctx, opt[i].t, opt[i].name, d, w, 2)))
            return st;
        if (opt[i].t->dims[2] < opt[i].min_last)
            return clkv__fail(ctx, CLKV_ERR_ARG_SHAPE, "%s: dims[2] = %lld is below %lld",
                              opt[i].name, (long long)opt[i].t->dims[2],
                              (long long)opt[i].min_last);
    }
    if (a->levels) {
        if ((st = check_levels(ctx, a->levels, a->m)))
            return st;
        p->levels = *a->levels;
    } else if ((st = clkv_pariskv_levels_default(a->m, a->computed_m8, &p->levels))) {
        return clkv__fail(ctx, st, "levels: %s", clkv_last_error(NULL));
    }

    p->B = B;
    p->Hkv = Hkv;
    p->L = L;
    p->D = D;
    p->nblk = nblk;
    p->m = a->m;
    p->nc = (int)nc;
    p->nbins = (int)(6 * nblk + 1);
    p->s_wide = 6 * nblk > 255;
    p->zone_start = a->zone_start;
    /* S rows padded to 32 entries: pkv_compact reads whole vectors (PER_ITEM <= 32) */
    p->s_row = (max_zone + 31) / 32 * 32;
    p->max_zone = max_zone;
    p->max_cand = max_cand;
    p->top_k = a->top_k;
    int wg = SEARCH_WG;
    while ((size_t)wg > ctx->info.max_work_group_size && wg > 1)
        wg /= 2;
    if ((size_t)nc > ctx->info.max_work_group_size)
        return clkv__fail(ctx, CLKV_ERR_DEVICE_LIMIT,
                          "m: %d needs work-groups of %lld, the device allows %zu", (int)a->m,
                          (long long)nc, (size_t)ctx->info.max_work_group_size);
    p->wg = wg;
    p->legacy = clkv__env_int("CLKV_PARISKV_LEGACY", 0) != 0;
    p->fast_topk = clkv__env_int("CLKV_PARISKV_FAST_TOPK", 1) != 0;
    /* Stage II: the top-k runs one work-group per (b, KV head) over C_b candidates; on GPUs
     * 1024 work-items (4x fewer serial iterations per radix pass than 256). */
    int wg2 = ctx->info.kind == CLKV_DEVICE_KIND_GPU ? 1024 : SEARCH_WG;
    while ((size_t)wg2 > ctx->info.max_work_group_size && wg2 > 1)
        wg2 /= 2;
    p->wg2 = wg2;
    const int pi = clkv__env_int("CLKV_PARISKV_PER_ITEM", PER_ITEM);
    p->per_item = pi == 4 || pi == 8 || pi == 16 || pi == 32 ? pi : PER_ITEM;
    {
        const int u32 = clkv__rows_aligned(&a->ids, 4) && nblk % 4 == 0;
        const int cv = clkv__env_int("CLKV_PARISKV_COLLIDE", COLLIDE_DEFAULT);
        p->collide_v = !p->legacy && u32 && cv == 1;
        p->ids_vec16 = p->collide_v && clkv__rows_aligned(&a->ids, 16) && nblk % 16 == 0 &&
                       clkv__env_int("CLKV_PARISKV_IDS_VEC", 1) != 0;
        const int tok = clkv__env_int("CLKV_PARISKV_COLLIDE_TOK", COLLIDE_TOK_DEFAULT);
        p->cv_tok_max = tok == 1 || tok == 2 || tok == 4 || tok == 8 ? tok : 0;
    }
    p->chunk = wg * p->per_item;
    p->nchunks = (int)((max_zone + p->chunk - 1) / p->chunk);
    if (p->nchunks < 1)
        p->nchunks = 1;
    p->fused_thr = !p->legacy && (uint64_t)(B * Hkv) * (uint64_t)p->nchunks <=
                                     (uint64_t)FUSED_WAVE_WGS * ctx->info.compute_units;
    const size_t rows = (size_t)(B * Hkv);
    size_t off = 0;
    p->off_bonus = off;
    off += clkv__ws_align(rows * (size_t)(nblk * nc));
    p->off_s = off;
    off += clkv__ws_align(rows * (size_t)p->s_row * (p->s_wide ? 2 : 1));
    p->off_hist = off;
    off += clkv__ws_align(rows * (size_t)p->nchunks * (size_t)p->nbins * 4);
    p->off_rowhist = off;
    off += clkv__ws_align(rows * (size_t)p->nbins * 4);
    p->off_cinfo = off;
    off += clkv__ws_align(rows * (size_t)p->nchunks * 16);
    p->off_cand = off;
    if (!a->candidates.buf)
        off += clkv__ws_align(rows * (size_t)max_cand * 4);
    p->off_cs = off;
    if (!a->candidate_scores.buf)
        off += clkv__ws_align(rows * (size_t)max_cand * 4);
    p->off_kbuf = off;
    off += clkv__ws_align(rows * PKV_KBUF_CAP * 8);
    p->off_khist = off;
    off += clkv__ws_align(rows * PKV_KHIST_WORDS * 4);
    p->total = off;
    return CLKV_OK;
}

clkv_status clkv_pariskv_search_workspace_size(clkv_context *ctx,
                                               const clkv_pariskv_search_args *args,
                                               size_t *bytes) {
    if (!ctx || !args || !bytes)
        return clkv__fail_ws_entry(ctx, args, bytes);
    pkv_search_plan p;
    clkv_status st = validate_search(ctx, args, &p);
    if (st == CLKV_OK)
        *bytes = p.total;
    return st;
}

int clkv__pariskv_rank_can_transform(int64_t D, int m) {
    return D >= 2 && (D & (D - 1)) == 0 && D / 2 <= ((int64_t)1 << m);
}

clkv_status clkv__pariskv_search_ex(clkv_context *ctx, const clkv_pariskv_search_args *args,
                                    const clkv_tensor *q_raw, const cl_uint8 *signs,
                                    clkv__topk_src *tk, cl_event *done, cl_event *ev) {
    for (int i = 0; ev && i < PKV_SEARCH_EVENTS; i++)
        ev[i] = NULL; /* kernels not enqueued leave theirs NULL */
    if (!ctx || !args)
        return clkv__fail_entry(ctx, args);
    pkv_search_plan p;
    clkv_status st = validate_search(ctx, args, &p);
    if (st != CLKV_OK)
        return st;
    if (q_raw && signs) {
        if (!clkv__pariskv_rank_can_transform(p.D, p.m))
            return clkv__fail(ctx, CLKV_ERR_INTERNAL,
                              "search: pkv_rank cannot transform D = %lld queries with m = %d",
                              (long long)p.D, p.m);
        p.q_raw = q_raw;
        p.signs = *signs;
    }
    cl_mem ws;
    if ((st = clkv__workspace(ctx, p.total, &ws)))
        return st;
    if (tk)
        clkv__pariskv_topk_src(args, &p, ws, tk);
    if (p.B == 0 || p.Hkv == 0)
        return tk ? CLKV_OK : clkv__marker(ctx, done);
    pkv_search_kernels k;
    if ((st = clkv__pariskv_stage1_prepare(ctx, args, &p, ws, &k)) ||
        (st = clkv__pariskv_stage2_prepare(ctx, args, &p, ws, &k)))
        return st;
    if (tk)
        k.topk = NULL; /* the caller's kernel runs the top-k */
    if ((st = clkv__pariskv_stage1_enqueue(ctx, &p, &k, ev)))
        return st;
    return clkv__pariskv_stage2_enqueue(ctx, &p, &k, done, ev ? ev + 4 : NULL);
}

static clkv_status search_impl(clkv_context *ctx, const clkv_pariskv_search_args *args,
                               cl_event *done, cl_event *ev) {
    return clkv__pariskv_search_ex(ctx, args, NULL, NULL, NULL, done, ev);
}

clkv_status clkv_pariskv_search(clkv_context *ctx, const clkv_pariskv_search_args *args,
                                cl_event *done) {
    return search_impl(ctx, args, done, NULL);
}

clkv_status clkv__pariskv_search_profiled(clkv_context *ctx, const clkv_pariskv_search_args *args,
                                          cl_event ev[PKV_SEARCH_EVENTS]) {
    return search_impl(ctx, args, NULL, ev);
}
