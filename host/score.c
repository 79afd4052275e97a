/* clkv_score: method names, validation, launch of the scorer kernels
 * (cl_kernels/score_window.cl, score_window_mma.cl, score_h2o_mma.cl, score_key.cl,
 * score_pool.cl). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clkv/score.h"
#include "host/score_internal.h"
#include "runtime/internal.h"

#define SMALL_WG 64
#define QT_ROWS 16

static const char *const g_names[CLKV_SCORE_METHOD_COUNT] = {
    "dropkv", "snapkv", "andpro", "criticalkv", "h2o", "diffkv", "knorm", "keydiff", "streamingllm",
};

clkv_status clkv_score_method_from_name(const char *name, clkv_score_method *out) {
    if (!name)
        return clkv__fail(NULL, CLKV_ERR_ARG_NULL, "name: method name is NULL");
    if (!out)
        return clkv__fail(NULL, CLKV_ERR_ARG_NULL, "out: output pointer is NULL");
    for (int i = 0; i < CLKV_SCORE_METHOD_COUNT; i++)
        if (strcmp(name, g_names[i]) == 0) {
            *out = (clkv_score_method)i;
            return CLKV_OK;
        }
    return clkv__fail(NULL, CLKV_ERR_ARG_RANGE,
                      "name: unknown scoring method \"%.64s\"; valid: dropkv, snapkv, andpro, "
                      "criticalkv, h2o, diffkv, knorm, keydiff, streamingllm",
                      name);
}

const char *clkv_score_method_name(clkv_score_method method) {
    return (int)method >= 0 && (int)method < CLKV_SCORE_METHOD_COUNT ? g_names[method] : "?";
}

int clkv_score_method_uses_window(clkv_score_method m) {
    return (int)m >= 0 && (int)m <= (int)CLKV_SCORE_DIFFKV;
}

static int needs_v(clkv_score_method m) {
    return m == CLKV_SCORE_DROPKV || m == CLKV_SCORE_ANDPRO || m == CLKV_SCORE_CRITICALKV;
}

static int needs_a(clkv_score_method m) {
    return m == CLKV_SCORE_DROPKV || m == CLKV_SCORE_ANDPRO;
}

/* Everything a launch needs, derived from validated arguments. */
typedef struct score_plan {
    clkv_score_method method;
    int window;
    int64_t B, Hq, Hkv, G, L, D, W;
    int max_len;
    int64_t row_len;
    float scale;
    int pool, pool_k, pool_excl_window;
    int64_t protect;
    /* window kernel geometry */
    int tpr, wg, kpr, vec_aligned;
    /* tensor-core window kernel (score_window_mma.cl): rows per stage, keys per work-group */
    int mma, mma_rs, mma_chunk, mma_prefetch, mma_ilv, mma_short;
    int mma_wp; /* query rows per head (DiffKV: padded) */
    /* tensor-core H2O kernel (score_h2o_mma.cl): keys per warp, rows per stage, stages,
     * row pieces (NSPLIT) and rows per piece */
    int h2o, h2o_kw, h2o_rt, h2o_nstg, h2o_split, h2o_rps;
    /* keydiff */
    int chunk, nchunks;
    /* workspace layout (bytes) */
    size_t raw_bytes, vnorm_bytes, part_bytes;
} score_plan;

static int supported_window_dim(int64_t d) {
    return d == 64 || d == 128 || d == 256;
}

static clkv_status validate(clkv_context *ctx, const clkv_score_args *a) {
    clkv_status st;
    const clkv_score_method m = a->method;
    if ((int)m < 0 || (int)m >= CLKV_SCORE_METHOD_COUNT)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "method: %d is not a clkv_score_method (0..%d)",
                          (int)m, CLKV_SCORE_METHOD_COUNT - 1);
    const int win = clkv_score_method_uses_window(m);
    if ((st = clkv__check_tensor(ctx, &a->k, "k", 4, CLKV_FLOAT_DTYPES)) ||
        (st = clkv__check_tensor(ctx, &a->scores, "scores", 3, CLKV_DTYPE_BIT(CLKV_F32))) ||
        (st =
             clkv__check_optional_tensor(ctx, &a->lengths, "lengths", 1, CLKV_DTYPE_BIT(CLKV_I32))))
        return st;
    const int64_t B = a->k.dims[0], Hkv = a->k.dims[1], L = a->k.dims[2], D = a->k.dims[3];
    if ((st = clkv__check_dim(ctx, &a->scores, "scores", 0, B, "batch of k")) ||
        (st = clkv__check_dim(ctx, &a->scores, "scores", 1, Hkv, "KV heads of k")) ||
        (st = clkv__check_dim(ctx, &a->scores, "scores", 2, L, "tokens of k")))
        return st;
    if (a->lengths.buf && (st = clkv__check_dim(ctx, &a->lengths, "lengths", 0, B, "batch of k")))
        return st;
    if (needs_v(m)) {
        if ((st = clkv__check_tensor(ctx, &a->v, "v", 4, CLKV_FLOAT_DTYPES)))
            return st;
        if (a->v.dtype != a->k.dtype)
            return clkv__fail(ctx, CLKV_ERR_ARG_DTYPE, "v: dtype %s differs from k's %s",
                              clkv_dtype_name(a->v.dtype), clkv_dtype_name(a->k.dtype));
        for (int i = 0; i < 4; i++)
            if ((st = clkv__check_dim(ctx, &a->v, "v", i, a->k.dims[i], "must match k")))
                return st;
    }
    if (a->pbar.buf && m != CLKV_SCORE_CRITICALKV)
        return clkv__fail(ctx, CLKV_ERR_ARG_UNSUPPORTED,
                          "pbar: only the criticalkv method has a pbar output (method %s)",
                          clkv_score_method_name(m));
    if (a->w_o.buf && m != CLKV_SCORE_CRITICALKV)
        return clkv__fail(ctx, CLKV_ERR_ARG_UNSUPPORTED,
                          "w_o: only the criticalkv method uses W_O (method %s)",
                          clkv_score_method_name(m));
    if (a->pbar.buf &&
        ((st = clkv__check_tensor(ctx, &a->pbar, "pbar", 3, CLKV_DTYPE_BIT(CLKV_F32))) ||
         (st = clkv__check_dim(ctx, &a->pbar, "pbar", 0, B, "batch of k")) ||
         (st = clkv__check_dim(ctx, &a->pbar, "pbar", 1, Hkv, "KV heads of k")) ||
         (st = clkv__check_dim(ctx, &a->pbar, "pbar", 2, L, "tokens of k"))))
        return st;
    if (win) {
        if ((st = clkv__check_tensor(ctx, &a->q, "q", 4, CLKV_FLOAT_DTYPES)) ||
            (st = clkv__check_tensor(ctx, &a->lse, "lse", 3, CLKV_DTYPE_BIT(CLKV_F32))))
            return st;
        const int64_t Hq = a->q.dims[1], W = a->q.dims[2];
        if (!supported_window_dim(D))
            return clkv__fail(ctx, CLKV_ERR_ARG_UNSUPPORTED,
                              "k: head dim D = %lld, supported by the window scorers: 64, 128, "
                              "256",
                              (long long)D);
        if ((st = clkv__check_dim(ctx, &a->q, "q", 0, B, "batch of k")) ||
            (st = clkv__check_dim(ctx, &a->q, "q", 3, D, "head dim of k")))
            return st;
        if (W < 1)
            return clkv__fail(ctx, CLKV_ERR_ARG_SHAPE, "q: dims[2] = W = %lld, expected >= 1",
                              (long long)W);
        if (Hq < 1 || Hkv < 1 || Hq % Hkv != 0)
            return clkv__fail(
                ctx, CLKV_ERR_ARG_SHAPE,
                "q: Hq = %lld is not a positive multiple of k's Hkv = %lld (GQA needs Hq %% "
                "Hkv == 0)",
                (long long)Hq, (long long)Hkv);
        if ((st = clkv__check_dim(ctx, &a->lse, "lse", 0, B, "batch of q")) ||
            (st = clkv__check_dim(ctx, &a->lse, "lse", 1, Hq, "query heads of q")) ||
            (st = clkv__check_dim(ctx, &a->lse, "lse", 2, W, "window rows of q")))
            return st;
        if (Hq * W > INT32_MAX)
            return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "q: Hq * W = %lld exceeds 2^31-1",
                              (long long)(Hq * W));
        if (needs_a(m)) {
            if ((st = clkv__check_tensor(ctx, &a->a, "a", 4, CLKV_FLOAT_DTYPES)))
                return st;
            for (int i = 0; i < 4; i++)
                if ((st = clkv__check_dim(ctx, &a->a, "a", i, a->q.dims[i], "must match q")))
                    return st;
        }
        if (a->w_o.buf) {
            if ((st = clkv__check_tensor(ctx, &a->w_o, "w_o", 3, CLKV_FLOAT_DTYPES)) ||
                (st = clkv__check_dim(ctx, &a->w_o, "w_o", 0, Hq, "query heads of q")) ||
                (st = clkv__check_dim(ctx, &a->w_o, "w_o", 1, D, "head dim of k")))
                return st;
            if (a->w_o.dims[2] < 1 || a->w_o.dims[2] > INT32_MAX)
                return clkv__fail(ctx, CLKV_ERR_ARG_SHAPE,
                                  "w_o: dims[2] = Dm = %lld, expected 1..2^31-1",
                                  (long long)a->w_o.dims[2]);
        }
    } else if (D < 1 || D > 1024) {
        return clkv__fail(ctx, CLKV_ERR_ARG_UNSUPPORTED, "k: head dim D = %lld, expected 1..1024",
                          (long long)D);
    }
    if (a->max_length < -1 || a->max_length > L)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "max_length: %lld is outside [-1, L = %lld]",
                          (long long)a->max_length, (long long)L);
    if (L > INT32_MAX || B > 65535 || Hkv > 65535 || B * Hkv * L > ((int64_t)1 << 40))
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE,
                          "k: L = %lld, B = %lld, Hkv = %lld exceed the supported 2^31-1 tokens, "
                          "65535 sequences, 65535 heads",
                          (long long)L, (long long)B, (long long)Hkv);
    if (!isfinite(a->scale))
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "scale: %g is not finite", (double)a->scale);
    if (a->pool < CLKV_POOL_DEFAULT || a->pool > CLKV_POOL_MAX)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "pool: %d is not a clkv_pool_mode",
                          (int)a->pool);
    if (a->pool_kernel != 0 &&
        (a->pool_kernel < 1 || a->pool_kernel > 255 || a->pool_kernel % 2 == 0))
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE,
                          "pool_kernel: %d, expected 0 (method default) or odd in 1..255",
                          (int)a->pool_kernel);
    if (a->protect < -1)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "protect: %lld, expected -1 (default) or >= 0",
                          (long long)a->protect);
    if (!(a->dropkv_eps > 0.0f) || !isfinite(a->dropkv_eps))
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "dropkv_eps: %g, expected positive and finite",
                          (double)a->dropkv_eps);
    if (a->dropkv_round_p != 0 && a->dropkv_round_p != 1)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "dropkv_round_p: %d, expected 0 or 1",
                          (int)a->dropkv_round_p);
    if (a->keydiff_raw_mean != 0 && a->keydiff_raw_mean != 1)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "keydiff_raw_mean: %d, expected 0 or 1",
                          (int)a->keydiff_raw_mean);
    if (a->sink < 0 || a->recent < 0)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "%s: %lld is negative",
                          a->sink < 0 ? "sink" : "recent",
                          (long long)(a->sink < 0 ? a->sink : a->recent));
    return CLKV_OK;
}

/* Launch overrides of the window scorer (tuning and tests), -1 = not yet read, 0 = the
 * library's choice. $CLKV_SCORE_TPR (lanes per key row), $CLKV_SCORE_WG (work-group
 * size) and $CLKV_SCORE_KPR (keys per row-group) are read once per process; tests set
 * the lanes with clkv__score_force_tpr. Invalid combinations fall back to the defaults. */
static int g_force_tpr = -1, g_force_wg = -1, g_force_kpr = -1;

void clkv__score_force_tpr(int tpr) {
    g_force_tpr = tpr > 0 ? tpr : 0;
}

static int env_once(int *slot, const char *name) {
    if (*slot < 0) {
        const char *s = getenv(name);
        *slot = s && *s && atoi(s) > 0 ? atoi(s) : 0;
    }
    return *slot;
}

static int forced_tpr(void) {
    return env_once(&g_force_tpr, "CLKV_SCORE_TPR");
}

/* $CLKV_SCORE_MMA (read once per process): unset or nonzero = the tensor-core window
 * kernel where it applies, 0 = always the portable kernel. */
static int mma_env(void) {
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("CLKV_SCORE_MMA");
        v = !(e && *e && atoi(e) == 0);
    }
    return v;
}

/* Tuning overrides of the tensor-core kernel, read once per process (-1: the default):
 * $CLKV_SCORE_MMA_PREFETCH (0..3: when the next tile's K/V is requested, see plan_mma),
 * $CLKV_SCORE_MMA_SHORT (0/1: the kernel's SHORT_CHAINS),
 * $CLKV_SCORE_MMA_TILES (64-key tiles per work-group, 1..256) and $CLKV_SCORE_MMA_ILV (0/1:
 * contiguous or interleaved tiles per work-group; default: see launch_window). */
static int mma_tune(const char *name, int lo, int hi) {
    const char *e = getenv(name);
    const int x = e && *e ? atoi(e) : -1;
    return x >= lo && x <= hi ? x : -1;
}
static int g_mma_prefetch = -2, g_mma_tiles = -2, g_mma_ilv = -2, g_mma_short = -2;

#define MMA_LOCAL_MAX 40960 /* staged query rows, bytes (static local memory <= 48 KiB) */
#define MMA_KT 64           /* keys per tile of score_window_mma */

/* Tensor-core window scorer: NVIDIA PTX, 16-bit q and K/V of one dtype, D 64 / 128 / 256, no
 * forced lane split. DiffKV's per-head sums meet where the head changes, at most twice per row
 * block (its halves, the C fragment rows g and g + 8), so each head's W rows are padded to a
 * multiple of 8 (this is the one place of that rule; the kernel gets it as DIFFKV_WP and
 * checks the head per half only where it is not a multiple of 16). H200, bf16 Hq 32 / Hkv 8,
 * D 128, W 64, 16K / 128K: 142.6 / 539.3 us against 1353.1 / 9877.4 on the portable kernel
 * (2026-11-28); 89 / 347 us since the grid below counts the work-groups that fit. Padding to
 * 8, DIFFKV_WP a build constant (the row's head by a constant division, no table), against
 * padding to 16 in the kernel with a staged table of heads (651c7a4; 128K, two alternations
 * each, 2026-11-28): W 8 133.3-133.9 -> 105.8-105.9 us, W 16 133.5-134.1 -> 128.9-129.8, W 24
 * 198.0-199.6 -> 186.3-186.5, W 40 262.6-265.6 -> 248.6-248.9, W 64 349.7-351.9 ->
 * 324.3-325.1 (docs/performance.md: **DiffKV rows padded to 8**). Rows per stage: the query
 * rows of a KV head rounded up to 16, at most what fits the local-memory budget (more rows:
 * several stages per tile). */
static void plan_mma(clkv_context *ctx, const clkv_score_args *a, score_plan *p) {
    const clkv_dtype dt = a->k.dtype;
    if (!ctx->info.nvidia_ptx || !mma_env() || forced_tpr() > 0 || a->q.dtype != dt ||
        (dt != CLKV_F16 && dt != CLKV_BF16) || (p->D != 64 && p->D != 128 && p->D != 256))
        return;
    const int64_t per_row = p->D * 2 * (needs_a(p->method) ? 3 : 1);
    const int64_t wp = p->method == CLKV_SCORE_DIFFKV ? (p->W + 7) / 8 * 8 : p->W;
    p->mma_wp = (int)wp;
    const int64_t rows16 = (p->G * wp + 15) / 16 * 16;
    /* The rows of a KV head staged at once where they fit: past MMA_LOCAL_MAX up to half
     * the device's static local memory (two work-groups a compute unit), since rows staged
     * in several rounds are restaged for every tile, one tile per work-group. H200, 128K
     * keys, scorer alone: DropKV bf16 Hq 32 / Hkv 8, D 256, W 8 (32 rows of 1536 bytes; two
     * rounds at 40 KiB) 1366 -> 330.5 us; the window output makes a row 3x q's bytes. D 128,
     * Hq 128 / Hkv 8 (G 16: 128 rows of 768 bytes, three rounds): DropKV scorer + pooling
     * 1892 -> 511 us, the full call 2293 -> 933 us (Hq 96: 813, Hq 64: 523, Hq 32 unchanged,
     * 346; 2026-11-28). */
    int64_t budget = MMA_LOCAL_MAX;
    const int64_t half = (int64_t)(ctx->info.static_local_mem_bytes / 2) - 4096;
    if (rows16 * per_row > budget && half > budget)
        budget = rows16 * per_row < half ? rows16 * per_row : half;
    int64_t rs_max = budget / per_row / 16 * 16;
    if (rs_max > 256) /* (DiffKV's default G * W = 4 x 64 rows in one stage) */
        rs_max = 256;
    p->mma = 1;
    p->mma_rs = (int)(rows16 < rs_max ? rows16 : rs_max);
    /* about 4 work-groups per compute unit (one wave; the staged rows are read once per
     * work-group), fewer where their staged rows leave room for fewer (static local memory:
     * the rows, their LSE / position / ||a||^2, and about 1 KiB the driver reserves per
     * work-group), 4..64 tiles each. With 4 assumed where 3 fit (G 4 x W 64 = 256 rows of
     * 256 bytes, 66 KiB), 512 work-groups ran in 1.3 waves on the H200 (bf16 Hq 32 / Hkv 8,
     * D 128, two alternations with the old grid in one run, 16K / 128K keys): SnapKV W 64
     * 117.6-118.3 / 406.3-411.7 -> 81.5 / 302.3-303.4 us, DiffKV W 64 131.8-132.0 /
     * 486.9-497.9 -> 89.0-89.4 / 346.7-348.6; DropKV Hq 128 (G 16, 128 rows of 768 bytes: 2
     * a unit) at 128K 503.2-503.8 -> 450.6-453.6 (2026-11-28). H200, DropKV bf16
     * Hq 32 / Hkv 8 D 128 W 8: at 128K 32 tiles per work-group measured 185 us, 16 tiles 198 us, 8
     * tiles 221 us; at 16K 4 tiles 45 us, 8 tiles 49 us. H100, same shape, DropKV scorer at 128K
     * (2026-11-27): 8 / 16 / 21 / 26 / 32 / 64 / 128 tiles 249-251 / 232 / 262-263 / 297-299 /
     * 220-223 / 258-260 / 410-413 us; with 21 or 26 tiles and a register cap (-cl-nv-maxrregcount
     * 96, 80 or 72, so that more work-groups could be resident) no better, at 32 tiles unchanged:
     * the driver (580.159.04) ignores that option for kernels with reqd_work_group_size, as this
     * one has (ptxas through CLKV_BUILD_OPTIONS=-cl-nv-verbose: 125 registers with any cap).
     * Without the attribute (a CLKV_KERNEL_DIR copy) the cap applies and spills: H200, DropKV
     * scorer alone at 128K, two rounds (2026-11-28, session 32), 125 registers and 32 tiles
     * 163.4-164.0 us; 96 registers (140 bytes spilled) and 25 tiles (5 work-groups a unit)
     * 213.7-215.0; 80 (368 bytes) and 21 tiles 306.9-309.6; 72 (480 bytes) and 18 tiles
     * 347.9-348.5. */
    const int64_t tiles = (p->max_len + MMA_KT - 1) / MMA_KT;
    const int64_t wg_local = (int64_t)p->mma_rs * (per_row + (needs_a(p->method) ? 12 : 8)) + 1024;
    int64_t per_cu = (int64_t)ctx->info.static_local_mem_bytes / wg_local;
    if (per_cu > 4)
        per_cu = 4;
    /* registers: DropKV at D 256 takes 206 a lane (2 work-groups a unit; H200, 128K keys,
     * two alternations: 32 tiles a work-group 307.1 / 312.5 us, 63 tiles 290.1 / 300.2) */
    if (p->D == 256 && needs_a(p->method) && per_cu > 2)
        per_cu = 2;
    if (per_cu < 1)
        per_cu = 1;
    const int64_t target =
        (int64_t)(ctx->info.compute_units ? ctx->info.compute_units : 1) * per_cu;
    int64_t per = (tiles * p->B * p->Hkv + target - 1) / target;
    if (per < 4)
        per = 4;
    if (per > 64)
        per = 64;
    /* Rows staged in several rounds (long prompts, H2O with T = len): one tile per
     * work-group, so the causal skip of rounds before a tile's keys balances the work
     * (H200, bf16, Hq 32 / Hkv 8, D 128, T = 8192: 8.9 ms against 27.5 ms with 4 tiles). */
    if (rows16 > rs_max)
        per = 1;
    if (g_mma_tiles == -2)
        g_mma_tiles = mma_tune("CLKV_SCORE_MMA_TILES", 1, 256);
    if (g_mma_tiles > 0)
        per = g_mma_tiles;
    p->mma_chunk = (int)(per * MMA_KT);
    if (g_mma_prefetch == -2)
        g_mma_prefetch = mma_tune("CLKV_SCORE_MMA_PREFETCH", 0, 3);
    /* When the next tile's K/V is requested (PREFETCH in score_window_mma.cl). H200, bf16
     * Hq 32 / Hkv 8, D 128, W 8, 128K keys, scorer alone, two alternations in one run
     * (2026-11-28), PREFETCH 0 / 2 / 3: DropKV 186.9-187.0 / 180.7-181.2 / 190.4-190.8 us,
     * SnapKV 98.9-99.2 / 95.1-96.8 / 93.2-93.8, AnDPro 162.2-162.6 / 161.9 / 164.7-165.2,
     * CriticalKV 155.9-156.9 / 199.2-199.9 / 154.1-155.2. $CLKV_SCORE_MMA_PREFETCH forces
     * one (1: the full register double buffer, slower everywhere measured). 3 keeps the
     * scores of every row block of a stage in registers: only up to 32 rows a stage. */
    const int pf =
        p->method == CLKV_SCORE_DROPKV ? 2
        : (p->method == CLKV_SCORE_SNAPKV || p->method == CLKV_SCORE_CRITICALKV) && p->mma_rs <= 32
            ? 3
            : 0;
    p->mma_prefetch = g_mma_prefetch >= 0 ? g_mma_prefetch : pf;
    if (p->method == CLKV_SCORE_DIFFKV && p->mma_prefetch == 3) /* per-head sums: 0..2 only */
        p->mma_prefetch = 0;
    /* SHORT_CHAINS (score_window_mma.cl has the measurements): AnDPro only */
    if (g_mma_short == -2)
        g_mma_short = mma_tune("CLKV_SCORE_MMA_SHORT", 0, 1);
    p->mma_short = g_mma_short >= 0 ? g_mma_short : p->method == CLKV_SCORE_ANDPRO;
    if (g_mma_ilv == -2)
        g_mma_ilv = mma_tune("CLKV_SCORE_MMA_ILV", 0, 1);
    p->mma_ilv = g_mma_ilv; /* -1: the default (launch_window) */
}

/* Tuning overrides of the H2O tensor-core kernel, read once per process (-1: default):
 * $CLKV_SCORE_H2O_MMA (0: the window kernels instead), $CLKV_SCORE_H2O_KW (keys per warp,
 * 16 | 32), $CLKV_SCORE_H2O_RT (query rows per stage, 32 | 64 | 128), $CLKV_SCORE_H2O_NSTG
 * (stages in flight, 2 | 3), $CLKV_SCORE_H2O_SPLIT (row pieces, 1..64). */
static int g_h2o_env = -2, g_h2o_kw = -2, g_h2o_rt = -2, g_h2o_nstg = -2, g_h2o_split = -2;

#define H2O_MIN_ROWS 64     /* G * T from which H2O takes score_h2o_mma */
#define H2O_LOCAL_MAX 49152 /* static local memory of one work-group, bytes */

/* H2O with many query rows (the MiniKV prefill: T = the prompt): the key tile stays in
 * registers and the rows stream by (score_h2o_mma.cl), on NVIDIA with 16-bit q and K of
 * one dtype and D 64 / 128 / 256. The causal triangle is balanced by cutting the row range into
 * pieces when the tiles alone would not fill the GPU for a few waves. */
static void plan_h2o(clkv_context *ctx, const clkv_score_args *a, score_plan *p) {
    const clkv_dtype dt = a->k.dtype;
    if (g_h2o_env == -2) {
        const char *e = getenv("CLKV_SCORE_H2O_MMA");
        g_h2o_env = !(e && *e && atoi(e) == 0);
        g_h2o_kw = mma_tune("CLKV_SCORE_H2O_KW", 16, 32);
        g_h2o_rt = mma_tune("CLKV_SCORE_H2O_RT", 32, 128);
        g_h2o_nstg = mma_tune("CLKV_SCORE_H2O_NSTG", 2, 3);
        g_h2o_split = mma_tune("CLKV_SCORE_H2O_SPLIT", 1, 64);
    }
    if (p->method != CLKV_SCORE_H2O || !ctx->info.nvidia_ptx || !mma_env() || !g_h2o_env ||
        forced_tpr() > 0 || a->q.dtype != dt || (dt != CLKV_F16 && dt != CLKV_BF16) ||
        (p->D != 64 && p->D != 128 && p->D != 256) || p->G * p->W < H2O_MIN_ROWS)
        return;
    /* D 256: the key tile and the stages of 64 rows need 68 KiB, which NVIDIA's static
     * local memory holds. H200, bf16 Hq 16 / Hkv 8, T 8192 (MiniKV pass 2, 2026-11-28):
     * 32 keys a warp 1021.6 us, 16 keys 1317.8 (32-row stages 1317.7), the window scorer
     * 9924.9 */
    const int d256 = p->D == 256;
    int kw = 32, rt = 64, nstg = p->D == 64 ? 3 : 2;
    int64_t budget = H2O_LOCAL_MAX;
    if (d256 && ctx->info.static_local_mem_bytes > (uint64_t)budget)
        budget = (int64_t)ctx->info.static_local_mem_bytes;
    if (g_h2o_kw == 16 || g_h2o_kw == 32)
        kw = g_h2o_kw;
    if (g_h2o_rt == 32 || g_h2o_rt == 64 || g_h2o_rt == 128)
        rt = g_h2o_rt;
    if (g_h2o_nstg > 0)
        nstg = g_h2o_nstg;
    const int64_t row16 = (p->D + 8) * 2;
    const int64_t tile_rows = 4 * kw > nstg * rt ? 4 * kw : nstg * rt;
    if (tile_rows * row16 + (int64_t)nstg * rt * 4 > budget) /* knobs too large */
        kw = d256 ? 16 : 32, rt = d256 ? 32 : 64, nstg = 2;  /* fits 48 KiB */
    p->mma = 0;
    p->h2o = 1;
    p->h2o_kw = kw;
    p->h2o_rt = rt;
    p->h2o_nstg = nstg;
    /* Pieces: unit (tile, piece) does at most rows/split rows; the tiles alone give
     * `units` work-groups whose work falls linearly from all rows to ~0 (causal), i.e.
     * units/2 full ones. Aim at ~6 waves of full-length units, about 4 resident
     * work-groups per compute unit; pieces of at least 8 stages. (H200, bf16, Hq 32 /
     * Hkv 8, D 128, T = 8192, an earlier version of the kernel: 1 piece 2.46 ms, 3 pieces
     * 1.66 ms, 6 pieces 1.46 ms, 12 pieces 1.37 ms; this one: 6 pieces 1.08 ms, 12 (the
     * default there) 1.03 ms, 16 1.01 ms. Keys per warp 16: 1.4x slower than 32.) */
    const int64_t rows = p->G * p->W;
    const int64_t tiles = (p->max_len + 4 * kw - 1) / (4 * kw);
    const int64_t units = tiles * p->B * p->Hkv > 0 ? tiles * p->B * p->Hkv : 1;
    const int64_t wave = (int64_t)(ctx->info.compute_units ? ctx->info.compute_units : 1) * 4;
    int64_t split = (12 * wave + units - 1) / units - 1;
    if (split > rows / (8 * rt))
        split = rows / (8 * rt);
    if (split > 16)
        split = 16;
    if (g_h2o_split > 0)
        split = g_h2o_split;
    if (split < 1)
        split = 1;
    int64_t rps = (rows + split - 1) / split;
    rps = (rps + rt - 1) / rt * rt;
    split = (rows + rps - 1) / rps;
    p->h2o_split = (int)split;
    p->h2o_rps = (int)rps;
}

int64_t clkv__score_protect(const clkv_score_args *a) {
    if (a->protect >= 0)
        return a->protect;
    const int win = clkv_score_method_uses_window(a->method);
    return win && a->method != CLKV_SCORE_H2O ? a->q.dims[2] : 0;
}

static void plan_launch(clkv_context *ctx, const clkv_score_args *a, score_plan *p) {
    memset(p, 0, sizeof *p);
    const clkv_score_method m = a->method;
    p->method = m;
    p->window = clkv_score_method_uses_window(m);
    p->B = a->k.dims[0];
    p->Hkv = a->k.dims[1];
    p->L = a->k.dims[2];
    p->D = a->k.dims[3];
    p->Hq = p->window ? a->q.dims[1] : p->Hkv;
    p->G = p->Hkv ? p->Hq / p->Hkv : 1;
    p->W = p->window ? a->q.dims[2] : 0;
    p->max_len = (int)(a->max_length < 0 ? p->L : a->max_length);
    p->row_len = p->max_len > 0 ? p->max_len : 1;
    p->scale = a->scale != 0.0f ? a->scale : (float)(1.0 / sqrt((double)p->D));

    int pool = CLKV_POOL_NONE, pool_k = 1;
    if (m == CLKV_SCORE_DROPKV) {
        pool = CLKV_POOL_AVG;
        pool_k = 11;
    } else if (m == CLKV_SCORE_SNAPKV || m == CLKV_SCORE_CRITICALKV) {
        pool = CLKV_POOL_AVG;
        pool_k = 5;
        p->pool_excl_window = 1;
    }
    if (m == CLKV_SCORE_STREAMINGLLM)
        pool = CLKV_POOL_NONE;
    else if (a->pool != CLKV_POOL_DEFAULT)
        pool = a->pool;
    if (a->pool_kernel > 0)
        pool_k = a->pool_kernel;
    if (pool_k == 1)
        pool = CLKV_POOL_NONE;
    p->pool = pool;
    p->pool_k = pool == CLKV_POOL_NONE ? 1 : pool_k;
    p->protect = clkv__score_protect(a);

    const clkv_device_info *dev = &ctx->info;
    if (p->window) {
        const int forced = forced_tpr();
        const int fwg = env_once(&g_force_wg, "CLKV_SCORE_WG");
        const int fkpr = env_once(&g_force_kpr, "CLKV_SCORE_KPR");
        if (forced > 0 && forced <= QT_ROWS && (forced & (forced - 1)) == 0 && p->D % forced == 0) {
            p->tpr = forced;
            p->wg = 64;
            p->kpr = forced >= 8 ? 4 : 2;
        } else if (dev->nvidia_ptx) {
            /* 8 elements per lane (16 at D = 256: row blocks of at most QT_ROWS lanes);
             * 4 keys per row-group amortize the staging of the query rows over more keys
             * (32 keys per work-group at D = 128). */
            p->tpr = (int)(p->D / 8 < QT_ROWS ? p->D / 8 : QT_ROWS);
            p->wg = 128;
            p->kpr = p->D / p->tpr > 8 ? 2 : 4;
        } else {
            p->tpr = 1;
            p->wg = dev->kind == CLKV_DEVICE_KIND_CPU ? 16 : 64;
            p->kpr = 1;
        }
        if (fwg > 0 && fwg % p->tpr == 0 && (uint64_t)fwg <= dev->max_work_group_size &&
            (fwg & (fwg - 1)) == 0)
            p->wg = fwg;
        if (fkpr > 0 && fkpr <= 8)
            p->kpr = fkpr;
        const uint32_t esize = clkv_dtype_size(a->k.dtype);
        const int64_t vw = 16 / esize;
        const int epl = (int)(p->D / p->tpr);
        p->vec_aligned = p->tpr > 1 && epl % vw == 0 && clkv__rows_aligned(&a->k, vw) &&
                         (!needs_v(m) || clkv__rows_aligned(&a->v, vw));
        plan_mma(ctx, a, p);
        plan_h2o(ctx, a, p);
    }
    if (m == CLKV_SCORE_KEYDIFF) {
        const int64_t units = p->B * p->Hkv > 0 ? p->B * p->Hkv : 1;
        const int64_t target = (int64_t)(dev->compute_units ? dev->compute_units : 1) * 4;
        int64_t per = (target + units - 1) / units;
        if (per > 64)
            per = 64;
        int64_t chunk = (p->max_len + per - 1) / (per ? per : 1);
        if (chunk < 256)
            chunk = 256;
        p->chunk = (int)chunk;
        p->nchunks = (int)((p->max_len + chunk - 1) / chunk);
        if (p->nchunks < 1)
            p->nchunks = 1;
    }
    const size_t cells = (size_t)(p->B * p->Hkv * p->row_len);
    p->raw_bytes = clkv__ws_align(cells * 4);
    p->vnorm_bytes = m == CLKV_SCORE_CRITICALKV ? clkv__ws_align(cells * 4) : 0;
    p->part_bytes = m == CLKV_SCORE_KEYDIFF
                        ? clkv__ws_align((size_t)(p->B * p->Hkv * p->nchunks * p->D) * 4)
                        : 0;
    if (p->h2o && p->h2o_split > 1)
        p->part_bytes = clkv__ws_align(cells * (size_t)p->h2o_split * 4);
}

static clkv_status check_common(clkv_context *ctx, const clkv_score_args *args) {
    if (!ctx || !args)
        return clkv__fail_entry(ctx, args);
    return validate(ctx, args);
}

clkv_status clkv_score_workspace_size(clkv_context *ctx, const clkv_score_args *args,
                                      size_t *bytes) {
    clkv_status st = check_common(ctx, args);
    if (st != CLKV_OK)
        return st;
    if (!bytes)
        return clkv__fail(ctx, CLKV_ERR_ARG_NULL, "bytes: output pointer is NULL");
    score_plan p;
    plan_launch(ctx, args, &p);
    *bytes = p.B && p.Hkv && p.L ? p.raw_bytes + p.vnorm_bytes + p.part_bytes : 0;
    return CLKV_OK;
}

/* Common (b, kv head) tensor arguments. */
typedef struct tens4 {
    cl_mem buf;
    cl_long off, sb, sh, sl;
} tens4;

static tens4 t4(const clkv_tensor *t) {
    tens4 r = {t->buf, 0, 0, 0, 0};
    if (!t->buf)
        return r;
    r.off = clkv__elem_offset(t);
    r.sb = t->strides[0];
    r.sh = t->ndim > 1 ? t->strides[1] : 0;
    r.sl = t->ndim > 2 ? t->strides[2] : 0;
    return r;
}

static clkv_status launch_window(clkv_context *ctx, const clkv_score_args *a, const score_plan *p,
                                 cl_mem ws, cl_long raw_off, cl_long vnorm_off) {
    const clkv_score_method m = a->method;
    const int write_vnorm = m == CLKV_SCORE_CRITICALKV && !a->w_o.buf;
    const int nv = needs_v(m) && (m != CLKV_SCORE_CRITICALKV || write_vnorm);
    clkv_defs defs;
    clkv__defs_init(&defs);
    clkv__defs_int(&defs, "METHOD", m);
    clkv__defs_int(&defs, "Q_DTYPE", a->q.dtype);
    clkv__defs_int(&defs, "KV_DTYPE", a->k.dtype);
    clkv__defs_int(&defs, "A_DTYPE", needs_a(m) ? (int)a->a.dtype : 0);
    clkv__defs_int(&defs, "HEAD_DIM", p->D);
    if (p->mma) {
        clkv__defs_int(&defs, "RS", p->mma_rs);
        clkv__defs_int(&defs, "PREFETCH", p->mma_prefetch);
        clkv__defs_int(&defs, "SHORT_CHAINS", p->mma_short);
        if (m == CLKV_SCORE_DIFFKV) /* a build per padded W: the rows' heads by constants */
            clkv__defs_int(&defs, "DIFFKV_WP", p->mma_wp);
        /* the tile's row-lane sums as a reduce-scatter: DropKV only (score_window_mma.cl) */
        clkv__defs_int(&defs, "ROWSUM_SCATTER", m == CLKV_SCORE_DROPKV);
        /* Interleaved tiles where the kernel streams K and V (DropKV, AnDPro, CriticalKV
         * with ||v||_1): DropKV bf16 Hq 32 / Hkv 8 D 128 W 8 at 128K, three alternations in
         * one run each, full call 370.2-372.3 -> 366.6-369.0 us on an H200 (scorer 191.0-192.6
         * -> 187.5-189.1) and 444.1-445.4 -> 441.8-444.2 us on an H100 (2026-11-27); SnapKV,
         * K only, 100.2-101.2 -> 102.6-103.8 us on that H200, so K-only scorers keep runs of
         * `chunk` keys. $CLKV_SCORE_MMA_ILV=0/1 forces either. */
        clkv__defs_int(&defs, "SCORE_ILV", p->mma_ilv >= 0 ? p->mma_ilv : nv);
        clkv__defs_int(&defs, "KV_ALIGNED",
                       clkv__rows_aligned(&a->k, 8) && (!nv || clkv__rows_aligned(&a->v, 8)));
    } else {
        clkv__defs_int(&defs, "WG_SIZE", p->wg);
        clkv__defs_int(&defs, "TPR", p->tpr);
        clkv__defs_int(&defs, "KPR", p->kpr);
        clkv__defs_int(&defs, "QT", QT_ROWS);
        clkv__defs_int(&defs, "VEC_ALIGNED", p->vec_aligned);
    }
    clkv__defs_int(&defs, "NEED_V", nv);
    clkv__defs_int(&defs, "NEED_A", needs_a(m));
    clkv__defs_int(&defs, "ROUND_P", m == CLKV_SCORE_DROPKV && a->dropkv_round_p);
    clkv__defs_int(&defs, "WRITE_VNORM", write_vnorm);
    const char *kname = p->mma ? "score_window_mma" : "score_window";
    cl_kernel kw;
    clkv_status st = clkv__get_kernel(ctx, p->mma ? "score_window_mma.cl" : "score_window.cl",
                                      &defs, kname, &kw);
    if (st)
        return st;
    const tens4 q = t4(&a->q), k = t4(&a->k), lse = t4(&a->lse);
    const tens4 v = nv ? t4(&a->v) : k, aa = needs_a(m) ? t4(&a->a) : q;
    const cl_long q_st = a->q.strides[2], lse_st = a->lse.strides[2],
                  a_st = needs_a(m) ? a->a.strides[2] : q_st;
    const cl_mem len_buf = a->lengths.buf;
    const cl_long len_off = len_buf ? clkv__elem_offset(&a->lengths) : 0;
    const cl_int has_len = len_buf != NULL, max_len = p->max_len, Hkv = (cl_int)p->Hkv,
                 G = (cl_int)p->G, W = (cl_int)p->W;
    const cl_float scale_log2 = p->scale * 1.4426950408889634f, eps = a->dropkv_eps;
    const cl_long row_len = p->row_len;
    const cl_int chunk = p->mma_chunk;
    st = clkv__set_args(ctx, kw, kname, p->mma ? 39 : 38, CLKV_ARG(q.buf), CLKV_ARG(q.off),
                        CLKV_ARG(q.sb), CLKV_ARG(q.sh), CLKV_ARG(q_st), CLKV_ARG(k.buf),
                        CLKV_ARG(k.off), CLKV_ARG(k.sb), CLKV_ARG(k.sh), CLKV_ARG(k.sl),
                        CLKV_ARG(v.buf), CLKV_ARG(v.off), CLKV_ARG(v.sb), CLKV_ARG(v.sh),
                        CLKV_ARG(v.sl), CLKV_ARG(lse.buf), CLKV_ARG(lse.off), CLKV_ARG(lse.sb),
                        CLKV_ARG(lse.sh), CLKV_ARG(lse_st), CLKV_ARG(aa.buf), CLKV_ARG(aa.off),
                        CLKV_ARG(aa.sb), CLKV_ARG(aa.sh), CLKV_ARG(a_st), CLKV_ARG(len_buf),
                        CLKV_ARG(len_off), CLKV_ARG(has_len), CLKV_ARG(max_len), CLKV_ARG(Hkv),
                        CLKV_ARG(G), CLKV_ARG(W), CLKV_ARG(scale_log2), CLKV_ARG(eps), CLKV_ARG(ws),
                        CLKV_ARG(raw_off), CLKV_ARG(vnorm_off), CLKV_ARG(row_len), CLKV_ARG(chunk));
    if (st)
        return st;
    if (p->mma) {
        const size_t g[3] = {(size_t)((p->max_len + chunk - 1) / chunk) * 128, (size_t)p->Hkv,
                             (size_t)p->B};
        const size_t l[3] = {128, 1, 1};
        if (g[0] == 0)
            return CLKV_OK;
        clkv__log(ctx, "score_window_mma: method=%s RS=%d chunk=%d groups=%zu", g_names[m],
                  p->mma_rs, chunk, g[0] / 128);
        return clkv__launch(ctx, kw, "score_window_mma", 3, g, l, 0, NULL);
    }
    const int64_t tile = (int64_t)(p->wg / p->tpr) * p->kpr;
    const size_t g[3] = {(size_t)((p->max_len + tile - 1) / tile) * p->wg, (size_t)p->Hkv,
                         (size_t)p->B};
    const size_t l[3] = {(size_t)p->wg, 1, 1};
    if (g[0] == 0)
        return CLKV_OK;
    clkv__log(ctx, "score_window: method=%s TPR=%d WG=%d KPR=%d tiles=%zu", g_names[m], p->tpr,
              p->wg, p->kpr, g[0] / p->wg);
    return clkv__launch(ctx, kw, "score_window", 3, g, l, 0, NULL);
}

/* H2O on the tensor cores (score_h2o_mma.cl): raw scores directly (one piece) or partial
 * sums per row piece in the workspace at part_off plus score_h2o_reduce. */
static clkv_status launch_h2o(clkv_context *ctx, const clkv_score_args *a, const score_plan *p,
                              cl_mem ws, cl_long raw_off, cl_long part_off) {
    clkv_defs defs;
    clkv__defs_init(&defs);
    clkv__defs_int(&defs, "Q_DTYPE", a->q.dtype);
    clkv__defs_int(&defs, "KV_DTYPE", a->k.dtype);
    clkv__defs_int(&defs, "HEAD_DIM", p->D);
    clkv__defs_int(&defs, "KW", p->h2o_kw);
    clkv__defs_int(&defs, "RT", p->h2o_rt);
    clkv__defs_int(&defs, "NSTG", p->h2o_nstg);
    clkv__defs_int(&defs, "Q_ALIGNED", clkv__rows_aligned(&a->q, 8));
    clkv__defs_int(&defs, "KV_ALIGNED", clkv__rows_aligned(&a->k, 8));
    cl_kernel kh, kr = NULL;
    clkv_status st = clkv__get_kernel(ctx, "score_h2o_mma.cl", &defs, "score_h2o_mma", &kh);
    if (!st && p->h2o_split > 1)
        st = clkv__get_kernel(ctx, "score_h2o_mma.cl", &defs, "score_h2o_reduce", &kr);
    if (st)
        return st;
    const tens4 q = t4(&a->q), k = t4(&a->k), lse = t4(&a->lse);
    const cl_long q_st = a->q.strides[2], lse_st = a->lse.strides[2], row_len = p->row_len;
    const cl_mem len_buf = a->lengths.buf;
    const cl_long len_off = len_buf ? clkv__elem_offset(&a->lengths) : 0;
    const cl_int has_len = len_buf != NULL, max_len = p->max_len, Hkv = (cl_int)p->Hkv,
                 G = (cl_int)p->G, T = (cl_int)p->W, nsplit = p->h2o_split, rps = p->h2o_rps;
    const cl_float scale_log2 = p->scale * 1.4426950408889634f;
    st = clkv__set_args(ctx, kh, "score_h2o_mma", 29, CLKV_ARG(q.buf), CLKV_ARG(q.off),
                        CLKV_ARG(q.sb), CLKV_ARG(q.sh), CLKV_ARG(q_st), CLKV_ARG(k.buf),
                        CLKV_ARG(k.off), CLKV_ARG(k.sb), CLKV_ARG(k.sh), CLKV_ARG(k.sl),
                        CLKV_ARG(lse.buf), CLKV_ARG(lse.off), CLKV_ARG(lse.sb), CLKV_ARG(lse.sh),
                        CLKV_ARG(lse_st), CLKV_ARG(len_buf), CLKV_ARG(len_off), CLKV_ARG(has_len),
                        CLKV_ARG(max_len), CLKV_ARG(Hkv), CLKV_ARG(G), CLKV_ARG(T),
                        CLKV_ARG(scale_log2), CLKV_ARG(nsplit), CLKV_ARG(rps), CLKV_ARG(ws),
                        CLKV_ARG(raw_off), CLKV_ARG(part_off), CLKV_ARG(row_len));
    if (st)
        return st;
    const int64_t kt = 4 * p->h2o_kw, tiles = (p->max_len + kt - 1) / kt;
    if (tiles == 0)
        return CLKV_OK;
    const size_t g[3] = {(size_t)(tiles * nsplit) * 128, (size_t)p->Hkv, (size_t)p->B};
    const size_t l[3] = {128, 1, 1};
    clkv__log(ctx, "score_h2o_mma: KW=%d RT=%d NSTG=%d split=%d rows/piece=%d tiles=%lld",
              p->h2o_kw, p->h2o_rt, p->h2o_nstg, nsplit, rps, (long long)tiles);
    if ((st = clkv__launch(ctx, kh, "score_h2o_mma", 3, g, l, 0, NULL)) || nsplit == 1)
        return st;
    st = clkv__set_args(ctx, kr, "score_h2o_reduce", 11, CLKV_ARG(len_buf), CLKV_ARG(len_off),
                        CLKV_ARG(has_len), CLKV_ARG(max_len), CLKV_ARG(Hkv), CLKV_ARG(G),
                        CLKV_ARG(nsplit), CLKV_ARG(ws), CLKV_ARG(raw_off), CLKV_ARG(part_off),
                        CLKV_ARG(row_len));
    if (st)
        return st;
    const size_t gr[3] = {(size_t)((p->max_len + 127) / 128) * 128, (size_t)p->Hkv, (size_t)p->B};
    return clkv__launch(ctx, kr, "score_h2o_reduce", 3, gr, l, 0, NULL);
}

/* Value rows per local tile of score_vo_norm: about 32 KiB of f32 rows, at most SMALL_WG. */
static int key_tile(int64_t D) {
    int64_t tk = 8192 / D;
    if (tk > SMALL_WG)
        tk = SMALL_WG;
    return tk < 1 ? 1 : (int)tk;
}

static clkv_status launch_vo_norm(clkv_context *ctx, const clkv_score_args *a, const score_plan *p,
                                  cl_mem ws, cl_long vnorm_off) {
    clkv_defs defs;
    clkv__defs_init(&defs);
    clkv__defs_int(&defs, "KV_DTYPE", a->k.dtype);
    clkv__defs_int(&defs, "HEAD_DIM", p->D);
    clkv__defs_int(&defs, "WG_SIZE", SMALL_WG);
    clkv__defs_int(&defs, "TK", key_tile(p->D));
    clkv__defs_int(&defs, "KEYDIFF", 0);
    clkv__defs_int(&defs, "RAW_MEAN", 0);
    clkv__defs_int(&defs, "WO_DTYPE", a->w_o.dtype);
    clkv__defs_int(&defs, "MT", p->D > 128 ? 8 : 16); /* tile + W_O stage <= ~41 KiB */
    cl_kernel kn;
    clkv_status st = clkv__get_kernel(ctx, "score_key.cl", &defs, "score_vo_norm", &kn);
    if (st)
        return st;
    const tens4 v = t4(&a->v);
    const cl_long wo_off = clkv__elem_offset(&a->w_o), wo_sh = a->w_o.strides[0],
                  wo_sd = a->w_o.strides[1];
    const cl_int Dm = (cl_int)a->w_o.dims[2];
    const cl_mem len_buf = a->lengths.buf;
    const cl_long len_off = len_buf ? clkv__elem_offset(&a->lengths) : 0, row_len = p->row_len;
    const cl_int has_len = len_buf != NULL, max_len = p->max_len, Hkv = (cl_int)p->Hkv,
                 G = (cl_int)p->G;
    st = clkv__set_args(ctx, kn, "score_vo_norm", 19, CLKV_ARG(v.buf), CLKV_ARG(v.off),
                        CLKV_ARG(v.sb), CLKV_ARG(v.sh), CLKV_ARG(v.sl), CLKV_ARG(a->w_o.buf),
                        CLKV_ARG(wo_off), CLKV_ARG(wo_sh), CLKV_ARG(wo_sd), CLKV_ARG(Dm),
                        CLKV_ARG(len_buf), CLKV_ARG(len_off), CLKV_ARG(has_len), CLKV_ARG(max_len),
                        CLKV_ARG(Hkv), CLKV_ARG(G), CLKV_ARG(ws), CLKV_ARG(vnorm_off),
                        CLKV_ARG(row_len));
    if (st)
        return st;
    const int tk = key_tile(p->D);
    const size_t g[3] = {(size_t)((p->max_len + tk - 1) / tk) * SMALL_WG, (size_t)p->Hkv,
                         (size_t)p->B};
    const size_t l[3] = {SMALL_WG, 1, 1};
    if (g[0] == 0)
        return CLKV_OK;
    return clkv__launch(ctx, kn, "score_vo_norm", 3, g, l, 0, NULL);
}

/* Work-group shape of the KNorm / KeyDiff kernels (score_key.cl; H200, bf16 Hkv 8, D 128,
 * `clkv bench score` at 16K / 128K, 2026-11-28: KNorm 21.1 / 101.2 us, KeyDiff 48.2 / 240.6
 * (33.0 / 164.5 since the partial kernel's row norms are summed once per row),
 * against 350.7 / 934.7 at 128K for the earlier staged form): lpr work-items per key
 * row (a power of two covering the row's 16-byte chunks), ru rows per work-item and round,
 * rounds of wg / lpr * ru rows per score_key work-group (about 4 work-groups per compute
 * unit in all, at most 16 rounds). $CLKV_SCORE_KEY_WG (read per call; 64 or 256, tests)
 * sets the work-group size: 64 makes rows of more than 64 chunks take several chunks per
 * work-item, as on devices with smaller work-groups. */
typedef struct key_shape {
    int wg, lpr, ru, rounds, vec;
} key_shape;

static key_shape plan_key_shape(clkv_context *ctx, const clkv_score_args *a, const score_plan *p) {
    key_shape s;
    s.wg = ctx->info.max_work_group_size >= 256 ? 256 : SMALL_WG;
    if (clkv__env_int("CLKV_SCORE_KEY_WG", 0) == SMALL_WG)
        s.wg = SMALL_WG;
    const int64_t epc = 16 / (int64_t)clkv_dtype_size(a->k.dtype);
    const int64_t cpr = (p->D + epc - 1) / epc;
    s.lpr = 1;
    while (s.lpr < cpr && s.lpr < s.wg)
        s.lpr *= 2;
    const int64_t ncl = (cpr + s.lpr - 1) / s.lpr;
    s.ru = ncl >= 8 ? 1 : (int)(8 / ncl);
    const int64_t rows = (int64_t)(s.wg / s.lpr) * s.ru;
    const int64_t target = (int64_t)(ctx->info.compute_units ? ctx->info.compute_units : 1) * 4;
    int64_t rounds = (p->B * p->Hkv * p->max_len + rows * target - 1) / (rows * target);
    s.rounds = (int)(rounds < 1 ? 1 : rounds > 16 ? 16 : rounds);
    s.vec = p->D % epc == 0 && clkv__rows_aligned(&a->k, epc);
    return s;
}

static clkv_status launch_key(clkv_context *ctx, const clkv_score_args *a, const score_plan *p,
                              cl_mem ws, cl_long raw_off, cl_long part_off) {
    const int keydiff = a->method == CLKV_SCORE_KEYDIFF;
    const key_shape ks = plan_key_shape(ctx, a, p);
    clkv_defs defs;
    clkv__defs_init(&defs);
    clkv__defs_int(&defs, "KV_DTYPE", a->k.dtype);
    clkv__defs_int(&defs, "HEAD_DIM", p->D);
    clkv__defs_int(&defs, "WG_SIZE", ks.wg);
    clkv__defs_int(&defs, "LPR", ks.lpr);
    clkv__defs_int(&defs, "RU", ks.ru);
    clkv__defs_int(&defs, "ROUNDS", ks.rounds);
    clkv__defs_int(&defs, "VEC", ks.vec);
    clkv__defs_int(&defs, "KEYDIFF", keydiff);
    clkv__defs_int(&defs, "RAW_MEAN", keydiff && a->keydiff_raw_mean);
    cl_kernel kk, kp = NULL;
    clkv_status st = clkv__get_kernel(ctx, "score_key.cl", &defs, "score_key", &kk);
    if (!st && keydiff)
        st = clkv__get_kernel(ctx, "score_key.cl", &defs, "score_keydiff_partial", &kp);
    if (st)
        return st;
    const tens4 k = t4(&a->k);
    const cl_mem len_buf = a->lengths.buf;
    const cl_long len_off = len_buf ? clkv__elem_offset(&a->lengths) : 0, row_len = p->row_len;
    const cl_int has_len = len_buf != NULL, max_len = p->max_len, Hkv = (cl_int)p->Hkv,
                 chunk = p->chunk, nchunks = p->nchunks;
    const size_t l[3] = {(size_t)ks.wg, 1, 1};
    if (p->max_len == 0)
        return CLKV_OK;
    if (keydiff) {
        st = clkv__set_args(ctx, kp, "score_keydiff_partial", 14, CLKV_ARG(k.buf), CLKV_ARG(k.off),
                            CLKV_ARG(k.sb), CLKV_ARG(k.sh), CLKV_ARG(k.sl), CLKV_ARG(len_buf),
                            CLKV_ARG(len_off), CLKV_ARG(has_len), CLKV_ARG(max_len), CLKV_ARG(Hkv),
                            CLKV_ARG(chunk), CLKV_ARG(nchunks), CLKV_ARG(ws), CLKV_ARG(part_off));
        const size_t g[3] = {(size_t)p->nchunks * (size_t)ks.wg, (size_t)p->Hkv, (size_t)p->B};
        if (!st)
            st = clkv__launch(ctx, kp, "score_keydiff_partial", 3, g, l, 0, NULL);
        if (st)
            return st;
    }
    st = clkv__set_args(ctx, kk, "score_key", 15, CLKV_ARG(k.buf), CLKV_ARG(k.off), CLKV_ARG(k.sb),
                        CLKV_ARG(k.sh), CLKV_ARG(k.sl), CLKV_ARG(len_buf), CLKV_ARG(len_off),
                        CLKV_ARG(has_len), CLKV_ARG(max_len), CLKV_ARG(Hkv), CLKV_ARG(nchunks),
                        CLKV_ARG(ws), CLKV_ARG(part_off), CLKV_ARG(raw_off), CLKV_ARG(row_len));
    if (st)
        return st;
    const int64_t per_wg = (int64_t)(ks.wg / ks.lpr) * ks.ru * ks.rounds;
    const size_t g[3] = {(size_t)((p->max_len + per_wg - 1) / per_wg) * (size_t)ks.wg,
                         (size_t)p->Hkv, (size_t)p->B};
    return clkv__launch(ctx, kk, "score_key", 3, g, l, 0, NULL);
}

static clkv_status launch_finalize(clkv_context *ctx, const clkv_score_args *a, const score_plan *p,
                                   cl_mem ws, cl_long raw_off, cl_long vnorm_off, cl_event *done) {
    clkv_defs defs;
    clkv__defs_init(&defs);
    clkv__defs_int(&defs, "POOL", p->pool);
    clkv__defs_int(&defs, "POOL_K", p->pool_k);
    clkv__defs_int(&defs, "CRITICAL", a->method == CLKV_SCORE_CRITICALKV);
    clkv__defs_int(&defs, "STREAMING", a->method == CLKV_SCORE_STREAMINGLLM);
    clkv__defs_int(&defs, "WG_SIZE", SMALL_WG);
    cl_kernel kf;
    clkv_status st = clkv__get_kernel(ctx, "score_pool.cl", &defs, "score_finalize", &kf);
    if (st)
        return st;
    const cl_mem len_buf = a->lengths.buf;
    const cl_long len_off = len_buf ? clkv__elem_offset(&a->lengths) : 0, row_len = p->row_len;
    const cl_int has_len = len_buf != NULL, max_len = p->max_len, Hkv = (cl_int)p->Hkv,
                 L = (cl_int)p->L, W = (cl_int)p->W, excl = p->pool_excl_window;
    const cl_long protect = p->protect, sink = a->sink, recent = a->recent;
    const tens4 s = t4(&a->scores), pb = t4(&a->pbar);
    const cl_mem pb_buf = pb.buf ? pb.buf : s.buf;
    const cl_int has_pbar = pb.buf != NULL;
    st = clkv__set_args(ctx, kf, "score_finalize", 24, CLKV_ARG(ws), CLKV_ARG(raw_off),
                        CLKV_ARG(vnorm_off), CLKV_ARG(row_len), CLKV_ARG(len_buf),
                        CLKV_ARG(len_off), CLKV_ARG(has_len), CLKV_ARG(max_len), CLKV_ARG(Hkv),
                        CLKV_ARG(L), CLKV_ARG(W), CLKV_ARG(excl), CLKV_ARG(protect), CLKV_ARG(sink),
                        CLKV_ARG(recent), CLKV_ARG(s.buf), CLKV_ARG(s.off), CLKV_ARG(s.sb),
                        CLKV_ARG(s.sh), CLKV_ARG(pb_buf), CLKV_ARG(pb.off), CLKV_ARG(pb.sb),
                        CLKV_ARG(pb.sh), CLKV_ARG(has_pbar));
    if (st)
        return st;
    const size_t g[3] = {(size_t)((p->L + SMALL_WG - 1) / SMALL_WG) * SMALL_WG, (size_t)p->Hkv,
                         (size_t)p->B};
    const size_t l[3] = {SMALL_WG, 1, 1};
    return clkv__launch(ctx, kf, "score_finalize", 3, g, l, 0, done);
}

/* Everything of clkv_score but score_finalize; *ws_out receives the workspace (NULL when
 * there is nothing to score). */
static clkv_status score_raw(clkv_context *ctx, const clkv_score_args *args, score_plan *pp,
                             cl_mem *ws_out) {
    *ws_out = NULL;
    clkv_status st = check_common(ctx, args);
    if (st != CLKV_OK)
        return st;
    score_plan p;
    plan_launch(ctx, args, &p);
    *pp = p;
    if (p.B == 0 || p.Hkv == 0 || p.L == 0)
        return CLKV_OK;
    cl_mem ws;
    if ((st = clkv__workspace(ctx, p.raw_bytes + p.vnorm_bytes + p.part_bytes, &ws)))
        return st;
    const cl_long raw_off = 0, vnorm_off = (cl_long)(p.raw_bytes / 4),
                  part_off = (cl_long)((p.raw_bytes + p.vnorm_bytes) / 4);
    const clkv_score_method m = args->method;
    if (p.window) {
        if (m == CLKV_SCORE_CRITICALKV && args->w_o.buf &&
            (st = launch_vo_norm(ctx, args, &p, ws, vnorm_off)))
            return st;
        if ((st = p.h2o ? launch_h2o(ctx, args, &p, ws, raw_off, part_off)
                        : launch_window(ctx, args, &p, ws, raw_off, vnorm_off)))
            return st;
    } else if (m == CLKV_SCORE_KNORM || m == CLKV_SCORE_KEYDIFF) {
        if ((st = launch_key(ctx, args, &p, ws, raw_off, part_off)))
            return st;
    }
    *ws_out = ws;
    return CLKV_OK;
}

clkv_status clkv_score(clkv_context *ctx, const clkv_score_args *args, cl_event *done) {
    score_plan p;
    cl_mem ws;
    clkv_status st = score_raw(ctx, args, &p, &ws);
    if (st != CLKV_OK)
        return st;
    if (!ws)
        return clkv__marker(ctx, done);
    return launch_finalize(ctx, args, &p, ws, 0, (cl_long)(p.raw_bytes / 4), done);
}

int clkv__score_fusable(clkv_score_method m) {
    return (int)m >= 0 && (int)m < CLKV_SCORE_METHOD_COUNT && m != CLKV_SCORE_CRITICALKV &&
           m != CLKV_SCORE_STREAMINGLLM;
}

clkv_status clkv__score_unpooled(clkv_context *ctx, const clkv_score_args *args,
                                 clkv__select_fuse *fuse) {
    if (args && !clkv__score_fusable(args->method))
        return clkv__fail(ctx, CLKV_ERR_ARG_UNSUPPORTED,
                          "method: %s has its own final step (internal)",
                          clkv_score_method_name(args->method));
    score_plan p;
    cl_mem ws;
    clkv_status st = score_raw(ctx, args, &p, &ws);
    if (st != CLKV_OK)
        return st;
    memset(fuse, 0, sizeof *fuse);
    fuse->raw = ws;
    fuse->raw_off = 0;
    fuse->row_len = p.row_len;
    fuse->protect = p.protect;
    fuse->L = (int)p.L;
    fuse->W = (int)p.W;
    fuse->excl = p.pool_excl_window;
    fuse->pool = p.pool;
    fuse->pool_k = p.pool_k;
    fuse->ws_base = p.raw_bytes + p.vnorm_bytes + p.part_bytes;
    return CLKV_OK;
}
