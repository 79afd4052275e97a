/* clkv_select_topk: validation, chunking, the radix-select pipeline (cl_kernels/select.cl). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clkv/select.h"
#include "host/select_internal.h"
#include "runtime/internal.h"

#define KERNEL_FILE "select.cl"
#define PER_ITEM 8
#define STATE_WORDS 8  /* per-row state words (cl_kernels/select.cl) */
#define CTR_WORDS 4100 /* per-row words of the context's counter buffer (select.cl) */
#define ROW_PER_ITEM 16
/* select_row with the row staged in local memory and each work-item's ROW_RES
 * consecutive keys in registers (read once; with a fused scorer, pooled there too) for
 * rows of at most row_wg * ROW_RES tokens: 1024 x 8 on a GPU, 256 x 32 elsewhere. Such
 * rows take select_row by default (unless a chunk length is forced; $CLKV_SELECT_ROW_MAX
 * sets another bound: rows longer than the resident form's stream through select_row
 * from global memory in each pass, 512 work-items on a GPU), longer ones the chunked
 * pipeline. H200 (2026-11-28), clkv_evict_keep_set bf16 Hq 32 / Hkv 8 D 128 (8 rows),
 * whole call, two alternations in one run, the previous choice (rows up to 8K streaming
 * through select_row after score_finalize, longer rows chunked with the pooling fused) ->
 * resident (1024 x 8, plain local atomics): DropKV 4K 60.2 / 62.0 -> 52.1 / 53.1 us, 8K
 * 62.8 / 62.9 -> 58.7 / 59.0 (select_row 19.1-20.7 -> 17.4-18.2 us of device time);
 * SnapKV 4K 48.8 -> 45.6, 8K 54.5 -> 49.4. With warp-aggregated increments (match.any)
 * 54.0-55.0 / 62.1-62.5 us; 1024 x 16 keys (16K rows resident): DropKV 4K 58.7, 8K
 * 65.0, 16K 92.6-93.0 against 90.4-90.9 chunked, though SnapKV 16K 75.9 against 83.5;
 * 1024 x 32 keys: 53.7 us of device time at 8K (registers spilled). An earlier form that
 * pooled from global memory inside the row's one work-group took 141 us at 16K (93 us
 * chunked): each score's taps were dependent round trips. */
#define ROW_RES_GPU 8
#define ROW_RES_CPU 32
/* The chunked pipeline's counter histograms: at most this many rows (64 MiB of
 * counters); more rows take select_row. */
#define CHUNKED_MAX_ROWS 4096
/* The 2-kernel chunked pipeline (select_hist_sort + select_write, chunk = one tile)
 * for rows of at most SORT_AUTO_CH chunks, the 3-kernel one (select_hist1, select_cand,
 * select_write) for longer rows or a forced chunk length other than one tile.
 * The 2-kernel one runs on NVIDIA only (see plan_launch); elsewhere every chunked row takes
 * the 3-kernel one. $CLKV_SELECT_KERNELS=2 takes the 2-kernel one up to SORT_MAX_CH chunks
 * (its kernel's limit, SORT_MAX_CH in select.cl), =3 the 3-kernel one everywhere. H100,
 * clkv_evict_keep_set DropKV bf16 Hq 32 / Hkv 8 D 128 (8 rows, 2048-token chunks), whole
 * call, 2-kernel vs 3-kernel, one run: 32K 163.1 vs 166.1 us, 64K 272.0 vs 278.3 us,
 * 128K 499.3 vs 472.3 us (466.1 with plain local atomics), 512K 1776.5 vs 1645.4 us: the
 * 2-kernel first kernel's time grows with the row (65 us at 128K, 25 us at 16K). H200
 * (2026-11-28, both with plain local atomics, two alternations in one run), 2-kernel vs
 * 3-kernel: DropKV 16K 90.9 / 90.8 vs 94.8 / 94.7 us, 32K 127.9 / 127.8 vs 131.5 / 131.3,
 * 64K 205.9 / 206.5 vs 202.2 / 201.4; SnapKV 16K 79.7 / 80.0 vs 80.7 / 81.7, 32K 124.4 /
 * 125.1 vs 109.2 / 111.8, 64K 212.9 / 213.2 vs 169.5 / 170.8; 128K DropKV 339.6 / 342.3
 * (3-kernel) vs 356.1 / 358.2. So the 2-kernel one up to 8 chunks (16K tokens). */
#define SORT_MAX_CH 512
#define SORT_AUTO_CH 8
#define TAB_WORDS 2048 /* uints per (row, chunk) of select_hist_sort's bin-start table */

typedef struct select_plan {
    int64_t B, H, N, rows;
    int max_len, K;
    int row_path, row_wg; /* select_row and its work-group size */
    int row_res;          /* select_row's resident keys per work-item (0: streaming) */
    int64_t row_cap;      /* the longest row the resident form takes */
    int wg, chunk, nchunks;
    int sort; /* the 2-kernel chunked pipeline (select_hist_sort) */
    size_t state_bytes, cc_bytes, cand_bytes, tab_bytes;
} select_plan;

static clkv_status validate(clkv_context *ctx, const clkv_select_topk_args *a) {
    clkv_status st;
    const uint32_t i32 = CLKV_DTYPE_BIT(CLKV_I32);
    if ((st = clkv__check_tensor(ctx, &a->scores, "scores", 3, CLKV_DTYPE_BIT(CLKV_F32))) ||
        (st = clkv__check_tensor(ctx, &a->indices, "indices", 3, i32)) ||
        (st = clkv__check_optional_tensor(ctx, &a->lengths, "lengths", 1, i32)) ||
        (st = clkv__check_optional_tensor(ctx, &a->k_per_row, "k_per_row", 2, i32)) ||
        (st = clkv__check_optional_tensor(ctx, &a->counts, "counts", 2, i32)))
        return st;
    const int64_t B = a->scores.dims[0], H = a->scores.dims[1], N = a->scores.dims[2];
    if (a->k < 0 || a->k > INT32_MAX)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "k: %lld is outside [0, 2^31-1]",
                          (long long)a->k);
    if ((st = clkv__check_dim(ctx, &a->indices, "indices", 0, B, "batch of scores")) ||
        (st = clkv__check_dim(ctx, &a->indices, "indices", 1, H, "heads of scores")) ||
        (st = clkv__check_dim(ctx, &a->indices, "indices", 2, a->k, "k")))
        return st;
    if (a->lengths.buf &&
        (st = clkv__check_dim(ctx, &a->lengths, "lengths", 0, B, "batch of scores")))
        return st;
    if (a->k_per_row.buf &&
        ((st = clkv__check_dim(ctx, &a->k_per_row, "k_per_row", 0, B, "batch of scores")) ||
         (st = clkv__check_dim(ctx, &a->k_per_row, "k_per_row", 1, H, "heads of scores"))))
        return st;
    if (a->counts.buf &&
        ((st = clkv__check_dim(ctx, &a->counts, "counts", 0, B, "batch of scores")) ||
         (st = clkv__check_dim(ctx, &a->counts, "counts", 1, H, "heads of scores"))))
        return st;
    if (a->max_length < -1 || a->max_length > N)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "max_length: %lld is outside [-1, N = %lld]",
                          (long long)a->max_length, (long long)N);
    if (N > INT32_MAX || B * H > INT32_MAX || (H > 0 && B > INT32_MAX / H))
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE,
                          "scores: N = %lld or B*H = %lld*%lld exceeds 2^31-1", (long long)N,
                          (long long)B, (long long)H);
    if (a->largest != 0 && a->largest != 1)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "largest: %d, expected 0 or 1", (int)a->largest);
    return CLKV_OK;
}

static int g_force_path = -1;

/* clkv__select_profile's state */
static int g_prof_on;
static int g_prof_calls;
static double g_prof_us[SELECT_PROF_KERNELS + 1];

void clkv__select_profile(int on) {
    g_prof_on = on != 0;
    g_prof_calls = 0;
    memset(g_prof_us, 0, sizeof g_prof_us);
}

int clkv__select_profile_take(double us[SELECT_PROF_KERNELS + 1]) {
    const int calls = g_prof_calls;
    memcpy(us, g_prof_us, sizeof g_prof_us);
    g_prof_calls = 0;
    memset(g_prof_us, 0, sizeof g_prof_us);
    return calls;
}

/* Waits for the n profiled launches ev[0..n) and adds their times up (see
 * clkv__select_profile); releases the events. */
static clkv_status prof_add(clkv_context *ctx, cl_event *ev, int n) {
    cl_int err = clWaitForEvents((cl_uint)n, ev);
    cl_ulong first = 0, last = 0;
    for (int i = 0; i < n && err == CL_SUCCESS; i++) {
        cl_ulong t0 = 0, t1 = 0;
        err = clGetEventProfilingInfo(ev[i], CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL);
        if (err == CL_SUCCESS)
            err = clGetEventProfilingInfo(ev[i], CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
        if (err == CL_SUCCESS) {
            g_prof_us[i < SELECT_PROF_KERNELS ? i : SELECT_PROF_KERNELS - 1] += (t1 - t0) * 1e-3;
            first = i == 0 ? t0 : first;
            last = t1;
        }
    }
    for (int i = 0; i < n; i++)
        clReleaseEvent(ev[i]);
    if (err != CL_SUCCESS)
        return clkv__fail_cl(ctx, err, "select profiling events");
    g_prof_us[SELECT_PROF_KERNELS] += (last - first) * 1e-3;
    g_prof_calls++;
    return CLKV_OK;
}

void clkv__select_force_path(int path) {
    g_force_path = path == 1 || path == 2 ? path : 0;
}

static int forced_path(void) {
    if (g_force_path < 0) {
        const char *e = getenv("CLKV_SELECT_ROW");
        g_force_path = e && *e ? (e[0] == '0' ? 2 : 1) : 0;
    }
    return g_force_path;
}

/* $CLKV_SELECT_ROW_MAX (read once per process), or -1 (the resident form's bound). */
static int row_max_len(void) {
    static int v = -2;
    if (v == -2) {
        const char *e = getenv("CLKV_SELECT_ROW_MAX");
        v = e && *e && atoi(e) >= 0 ? atoi(e) : -1;
    }
    return v;
}

/* select_row's static local memory in its resident form (cl_kernels/select.cl): the
 * padded staged row, the 11-bit histogram, the scan scratch. */
#define ROW_BINS 2048 /* select_row's histogram bins (BINS in select.cl) */
static uint64_t row_local_bytes(int wg, int res) {
    const uint64_t cap = (uint64_t)wg * res;
    return (cap + cap / 32) * 4 + ROW_BINS * 4 + (uint64_t)wg * 4 + 64;
}

static void plan_launch(clkv_context *ctx, const clkv_select_topk_args *a, select_plan *p) {
    memset(p, 0, sizeof *p);
    p->B = a->scores.dims[0];
    p->H = a->scores.dims[1];
    p->N = a->scores.dims[2];
    p->rows = p->B * p->H;
    p->max_len = (int)(a->max_length < 0 ? p->N : a->max_length);
    p->K = (int)a->k;
    int wg = 256;
    while ((uint64_t)wg > ctx->info.max_work_group_size && wg > 1)
        wg /= 2;
    p->wg = wg;
    /* Enough work-groups to fill the device even for one row; each chunk at least one
     * write tile, and a whole number of tiles. */
    const int gpu = ctx->info.kind == CLKV_DEVICE_KIND_GPU;
    const int64_t target =
        (int64_t)(ctx->info.compute_units ? ctx->info.compute_units : 1) * (gpu ? 8 : 2);
    const int64_t tile = (int64_t)wg * PER_ITEM;
    const int64_t len = p->max_len > 0 ? p->max_len : 1;
    int64_t per_row = p->rows ? (target + p->rows - 1) / p->rows : 1;
    if (per_row < 1)
        per_row = 1;
    int64_t chunk = (len + per_row - 1) / per_row;
    /* CLKV_SELECT_CHUNK forces the chunk length (tests: many chunks per row on any device) */
    const char *force = getenv("CLKV_SELECT_CHUNK");
    const int chunk_forced = force && *force && atoll(force) > 0;
    if (chunk_forced)
        chunk = atoll(force);
    chunk = (chunk + tile - 1) / tile * tile;
    if (chunk < tile)
        chunk = tile;
    /* the 2-kernel pipeline: one tile per chunk. NVIDIA only, where it is measured and
     * tested: PoCL 3.1 miscompiles select_hist_sort. In the loop that places each key in
     * its bin's run (after the histogram's barriers), the compiled work-item loop is
     * unswitched on "key 0 of the work-item is in the row" (start + lid < end) evaluated
     * once, from the registers the previous region's work-item loop left behind, i.e. for
     * the last work-item only. In a chunk shorter than the work-group (the row's tail)
     * that test is false, so no work-item places its first key: the run keeps whatever the
     * local memory held before (x86 disassembly of the PoCL-built kernel, 2026-11-27;
     * with the local memory poisoned first, 100 of 100 calls go wrong with one thread as
     * with two). Before, the stale local data of the previous chunk often equalled the lost
     * keys (all-equal scores): wrong results in 10-90 % of calls only, one index past the
     * row, and once heap corruption through the wrong offsets. The 3-kernel pipeline and
     * select_row have no such loop and pass the same stress on PoCL; NVIDIA's build of
     * this kernel passed 9000 such calls (n = 2053 .. 8197, both orders). */
    const int kernels = clkv__env_int("CLKV_SELECT_KERNELS", 0);
    p->sort = ctx->info.nvidia_ptx && kernels != 3 && (!chunk_forced || chunk == tile) &&
              (len + tile - 1) / tile <= (kernels == 2 ? SORT_MAX_CH : SORT_AUTO_CH);
    if (p->sort)
        chunk = tile;
    p->chunk = (int)(chunk > INT32_MAX / 2 ? INT32_MAX / 2 / tile * tile : chunk);
    p->nchunks = (int)((len + p->chunk - 1) / p->chunk);
    p->state_bytes = clkv__ws_align((size_t)p->rows * STATE_WORDS * 4);
    p->cc_bytes = clkv__ws_align((size_t)p->rows * (size_t)p->nchunks * 2 * 4);
    /* candidate lists ({key, index}): up to a whole row each (all scores equal); the
     * 2-kernel pipeline: every chunk's keys, sorted by bin, and its bin-start table */
    p->cand_bytes = clkv__ws_align(p->sort ? (size_t)p->rows * (size_t)p->nchunks * p->chunk * 4
                                           : (size_t)p->rows * (size_t)len * 8);
    p->tab_bytes =
        p->sort ? clkv__ws_align((size_t)p->rows * (size_t)p->nchunks * TAB_WORDS * 4) : 0;
    /* one work-group per row. Resident form: 1024 lanes holding 8 keys each on a GPU
     * (fewer where its staged row would not fit the device's static local memory);
     * streaming form: 512 lanes on a GPU (registers of 1024 would be tight) */
    int rwg = gpu ? 1024 : 256, swg = gpu ? 512 : 256;
    while ((uint64_t)rwg > ctx->info.max_work_group_size && rwg > 1)
        rwg /= 2;
    while ((uint64_t)swg > ctx->info.max_work_group_size && swg > 1)
        swg /= 2;
    /* $CLKV_SELECT_ROW_RES: resident keys per work-item (1 .. 32, power of two; tuning) */
    int row_res = clkv__env_int("CLKV_SELECT_ROW_RES", gpu ? ROW_RES_GPU : ROW_RES_CPU);
    row_res = row_res < 1 ? 1 : row_res > 32 ? 32 : row_res;
    while (row_res & (row_res - 1))
        row_res &= row_res - 1;
    while (row_res > 1 && row_local_bytes(rwg, row_res) > ctx->info.static_local_mem_bytes)
        row_res /= 2;
    p->row_cap = row_local_bytes(rwg, row_res) <= ctx->info.static_local_mem_bytes
                     ? (int64_t)rwg * row_res
                     : 0;
    const int64_t row_max = row_max_len() >= 0 ? row_max_len() : p->row_cap;
    const int fp = forced_path();
    p->row_path = fp == 1 || (fp == 0 && !chunk_forced && p->max_len <= row_max) ||
                  p->rows > CHUNKED_MAX_ROWS;
    p->row_res = p->row_path && p->max_len <= p->row_cap ? row_res : 0;
    p->row_wg = p->row_res ? rwg : swg;
}

static clkv_status check_common(clkv_context *ctx, const clkv_select_topk_args *args) {
    if (!ctx || !args)
        return clkv__fail_entry(ctx, args);
    return validate(ctx, args);
}

clkv_status clkv_select_topk_workspace_size(clkv_context *ctx, const clkv_select_topk_args *args,
                                            size_t *bytes) {
    clkv_status st = check_common(ctx, args);
    if (st != CLKV_OK)
        return st;
    if (!bytes)
        return clkv__fail(ctx, CLKV_ERR_ARG_NULL, "bytes: output pointer is NULL");
    select_plan p;
    plan_launch(ctx, args, &p);
    *bytes = p.rows ? p.state_bytes + p.cc_bytes + p.cand_bytes + p.tab_bytes : 0;
    return CLKV_OK;
}

/* The one-work-group-per-row kernel (select_row). */
/* The keep rule as kernel arguments (has_rule = 0 without one). */
typedef struct rule_args {
    cl_int has;
    cl_ulong ratio_bits;
    cl_float ratio_f;
    cl_long budget, window;
} rule_args;

static rule_args make_rule(const clkv__keep_rule *r) {
    rule_args a = {0, 0, 0.0f, -1, 0};
    if (r) {
        a.has = 1;
        memcpy(&a.ratio_bits, &r->ratio, sizeof a.ratio_bits);
        a.ratio_f = (cl_float)r->ratio;
        a.budget = r->budget < 0 ? -1 : r->budget;
        a.window = r->window;
    }
    return a;
}

static clkv_status launch_row(clkv_context *ctx, const clkv_select_topk_args *args,
                              const select_plan *p, const rule_args *ra,
                              const clkv__select_fuse *fuse, cl_event *done) {
    clkv_defs defs;
    clkv__defs_init(&defs);
    clkv__defs_int(&defs, "SEL_WG", p->row_wg);
    clkv__defs_int(&defs, "PER_ITEM", ROW_PER_ITEM);
    clkv__defs_int(&defs, "SEL_PIPE", 1);
    clkv__defs_int(&defs, "ROW_RES", p->row_res);
    clkv__defs_int(&defs, "FUSE_POOL", fuse != NULL);
    if (ctx->info.nvidia_ptx) /* histogram increments: as the chunked kernels (below) */
        clkv__defs_int(&defs, "SEL_AGG", clkv__env_int("CLKV_SELECT_AGG", 0) != 0);
    cl_kernel kr;
    clkv_status st = clkv__get_kernel(ctx, KERNEL_FILE, &defs, "select_row", &kr);
    if (st == CLKV_OK)
        st = clkv__check_local_mem(ctx, kr, "select_row", 0);
    if (st)
        return st;
    const clkv_tensor *sc = &args->scores;
    const cl_mem s_buf = sc->buf, len_buf = args->lengths.buf, k_buf = args->k_per_row.buf,
                 i_buf = args->indices.buf, c_buf = args->counts.buf;
    const cl_long s_off = clkv__elem_offset(sc), s_sb = sc->strides[0], s_sh = sc->strides[1];
    const cl_long len_off = len_buf ? clkv__elem_offset(&args->lengths) : 0;
    const cl_long k_off = k_buf ? clkv__elem_offset(&args->k_per_row) : 0,
                  k_sb = k_buf ? args->k_per_row.strides[0] : 0,
                  k_sh = k_buf ? args->k_per_row.strides[1] : 0;
    const cl_long i_off = clkv__elem_offset(&args->indices), i_sb = args->indices.strides[0],
                  i_sh = args->indices.strides[1];
    const cl_long c_off = c_buf ? clkv__elem_offset(&args->counts) : 0,
                  c_sb = c_buf ? args->counts.strides[0] : 0,
                  c_sh = c_buf ? args->counts.strides[1] : 0;
    const cl_int has_len = len_buf != NULL, has_krow = k_buf != NULL, has_counts = c_buf != NULL;
    const cl_int max_len = p->max_len, K = p->K, H = (cl_int)p->H;
    clkv__log(ctx,
              "select_topk (row): B=%lld H=%lld N=%lld max_len=%d k=%d largest=%d wg=%d "
              "resident=%d fused=%d",
              (long long)p->B, (long long)p->H, (long long)p->N, p->max_len, p->K,
              (int)args->largest, p->row_wg, p->row_res, fuse != NULL);
    st = clkv__set_args(ctx, kr, "select_row", 29, CLKV_ARG(s_buf), CLKV_ARG(s_off), CLKV_ARG(s_sb),
                        CLKV_ARG(s_sh), CLKV_ARG(H), CLKV_ARG(len_buf), CLKV_ARG(len_off),
                        CLKV_ARG(has_len), CLKV_ARG(max_len), CLKV_ARG(k_buf), CLKV_ARG(k_off),
                        CLKV_ARG(k_sb), CLKV_ARG(k_sh), CLKV_ARG(has_krow), CLKV_ARG(K),
                        CLKV_ARG(i_buf), CLKV_ARG(i_off), CLKV_ARG(i_sb), CLKV_ARG(i_sh),
                        CLKV_ARG(c_buf), CLKV_ARG(c_off), CLKV_ARG(c_sb), CLKV_ARG(c_sh),
                        CLKV_ARG(has_counts), CLKV_ARG(ra->has), CLKV_ARG(ra->ratio_bits),
                        CLKV_ARG(ra->ratio_f), CLKV_ARG(ra->budget), CLKV_ARG(ra->window));
    const cl_uint key_flip = args->largest ? 0u : 0xffffffffu; /* smallest first: inverted keys */
    /* the scorer's raw rows (FUSE_POOL; unused otherwise) */
    const cl_mem raw_buf = fuse ? fuse->raw : s_buf;
    const cl_long raw_off = fuse ? fuse->raw_off : 0, row_len = fuse ? fuse->row_len : 0,
                  protect = fuse ? fuse->protect : 0;
    const cl_int L = fuse ? fuse->L : 0, W = fuse ? fuse->W : 0, excl = fuse ? fuse->excl : 0,
                 pool = fuse ? fuse->pool : 0, pool_k = fuse ? fuse->pool_k : 1;
    if (!st)
        st = clkv__set_args_at(ctx, kr, "select_row", 29, 10, CLKV_ARG(key_flip), CLKV_ARG(raw_buf),
                               CLKV_ARG(raw_off), CLKV_ARG(row_len), CLKV_ARG(L), CLKV_ARG(W),
                               CLKV_ARG(excl), CLKV_ARG(protect), CLKV_ARG(pool), CLKV_ARG(pool_k));
    if (st)
        return st;
    const size_t g[2] = {(size_t)p->row_wg, (size_t)p->rows}, l[2] = {(size_t)p->row_wg, 1};
    cl_event ev = NULL;
    st = clkv__launch(ctx, kr, "select_row", 2, g, l, 0, g_prof_on ? &ev : done);
    if (st == CLKV_OK && g_prof_on) {
        if (done) {
            clRetainEvent(ev);
            *done = ev;
        }
        st = prof_add(ctx, &ev, 1);
    }
    return st;
}

clkv_status clkv_select_topk(clkv_context *ctx, const clkv_select_topk_args *args, cl_event *done) {
    return clkv__select_topk_rule(ctx, args, NULL, NULL, done);
}

/* Whether select_row's resident form can pool a fused call's raw rows: every token
 * j < L of them gets its score written. */
static int row_poolable(const select_plan *p, int64_t L) {
    return p->row_res > 0 && L <= p->row_cap;
}

int clkv__select_topk_poolable(clkv_context *ctx, const clkv_select_topk_args *args) {
    select_plan p;
    plan_launch(ctx, args, &p);
    return p.rows > 0 && (!p.row_path || row_poolable(&p, p.N));
}

clkv_status clkv__select_topk_rule(clkv_context *ctx, const clkv_select_topk_args *args,
                                   const clkv__keep_rule *rule, const clkv__select_fuse *fuse,
                                   cl_event *done) {
    clkv_status st = check_common(ctx, args);
    if (st != CLKV_OK)
        return st;
    const rule_args ra = make_rule(rule);
    select_plan p;
    plan_launch(ctx, args, &p);
    if (fuse && (p.rows == 0 || (p.row_path && !row_poolable(&p, fuse->L))))
        return clkv__fail(ctx, CLKV_ERR_ARG_UNSUPPORTED,
                          "scores: pooled by the selection only on its chunked path or in "
                          "select_row's resident form (internal)");
    if (p.rows == 0)
        return clkv__marker(ctx, done);
    if (p.row_path)
        return launch_row(ctx, args, &p, &ra, fuse, done);

    clkv_defs defs;
    clkv__defs_init(&defs);
    clkv__defs_int(&defs, "SEL_WG", p.wg);
    clkv__defs_int(&defs, "PER_ITEM", PER_ITEM);
    clkv__defs_int(&defs, "FUSE_POOL", fuse != NULL);
    clkv__defs_int(&defs, "SEL_PIPE", p.sort ? 2 : 3);
    /* Histogram increments and bin positions: plain local atomics ($CLKV_SELECT_AGG=1:
     * warp-aggregated by match.any on NVIDIA, for every selection kernel). H100 at 128K,
     * 3-kernel: 472.3 (aggregated) vs 466.1 us per whole DropKV call, 512K 1645.4 vs
     * 1628.5 us. H200 (2026-11-28, two alternations in one run), 2-kernel, whole call,
     * aggregated vs plain: DropKV 16K 93.8 / 93.2 -> 91.5 / 90.8 us, 32K 132.0 / 130.4 ->
     * 129.6 / 127.3, 64K 210.8 / 209.9 -> 206.6 / 205.3; clkv_evict_keep_set SnapKV 16K
     * 84.3 / 83.8 -> 80.7 / 79.9, 32K 131.8 / 130.8 -> 126.0 / 124.5, 64K 225.8 / 225.8 ->
     * 213.1 / 211.1 (select_hist_sort 24.3 -> 22.5 us at 16K, 37.3 -> 33.7 at 64K).
     * $CLKV_SELECT_HREAD=0: select_hist1's last work-group takes the row histogram with one
     * atomic exchange per bin (before/after timings) */
    clkv__defs_int(&defs, "SEL_HREAD", clkv__env_int("CLKV_SELECT_HREAD", 1) != 0);
    if (ctx->info.nvidia_ptx) { /* only NVIDIA's paths read them: no extra programs elsewhere */
        clkv__defs_int(&defs, "SEL_AGG", clkv__env_int("CLKV_SELECT_AGG", 0) != 0);
        /* $CLKV_SELECT_CG=0: volatile loads instead of ld.global.cg for what other
         * work-groups of the launch wrote */
        clkv__defs_int(&defs, "SEL_CG", clkv__env_int("CLKV_SELECT_CG", 1) != 0);
    }
    /* 2 kernels (select_hist_sort, select_write) or 3 (select_hist1, select_cand, ...) */
    const char *k1_name = p.sort ? "select_hist_sort" : "select_hist1";
    cl_kernel k_hist, k_cand = NULL, k_write;
    if ((st = clkv__get_kernel(ctx, KERNEL_FILE, &defs, k1_name, &k_hist)) ||
        (!p.sort && (st = clkv__get_kernel(ctx, KERNEL_FILE, &defs, "select_cand", &k_cand))) ||
        (st = clkv__get_kernel(ctx, KERNEL_FILE, &defs, "select_write", &k_write)))
        return st;
    if ((st = clkv__check_local_mem(ctx, k_hist, k1_name, 0)) ||
        (!p.sort && (st = clkv__check_local_mem(ctx, k_cand, "select_cand", 0))) ||
        (st = clkv__check_local_mem(ctx, k_write, "select_write", 0)))
        return st;
    cl_mem ws, ctr;
    const size_t base = fuse ? clkv__ws_align(fuse->ws_base) : 0;
    if ((st = clkv__workspace(ctx, base + p.state_bytes + p.cc_bytes + p.cand_bytes + p.tab_bytes,
                              &ws)) ||
        (st = clkv__counters(ctx, (size_t)p.rows * CTR_WORDS, &ctr)))
        return st;
    if (fuse && fuse->raw != ws) /* the raw rows lie in the workspace below `base` */
        return clkv__fail(ctx, CLKV_ERR_ARG_UNSUPPORTED,
                          "scores: raw rows outside the workspace (internal)");
    /* The scratch arrays live in the one workspace buffer, addressed by element offsets
     * (sub-buffers would need CL_DEVICE_MEM_BASE_ADDR_ALIGN alignment). */
    const cl_long st_off = (cl_long)(base / 4), cc_off = (cl_long)((base + p.state_bytes) / 4),
                  cand_off = (cl_long)((base + p.state_bytes + p.cc_bytes) / 4),
                  tab_off = (cl_long)((base + p.state_bytes + p.cc_bytes + p.cand_bytes) / 4);
    const clkv_tensor *sc = &args->scores;
    const cl_mem s_buf = sc->buf, len_buf = args->lengths.buf, k_buf = args->k_per_row.buf,
                 i_buf = args->indices.buf, c_buf = args->counts.buf;
    const cl_long s_off = clkv__elem_offset(sc), s_sb = sc->strides[0], s_sh = sc->strides[1];
    const cl_long len_off = len_buf ? clkv__elem_offset(&args->lengths) : 0;
    const cl_long k_off = k_buf ? clkv__elem_offset(&args->k_per_row) : 0,
                  k_sb = k_buf ? args->k_per_row.strides[0] : 0,
                  k_sh = k_buf ? args->k_per_row.strides[1] : 0;
    const cl_long i_off = clkv__elem_offset(&args->indices), i_sb = args->indices.strides[0],
                  i_sh = args->indices.strides[1];
    const cl_long c_off = c_buf ? clkv__elem_offset(&args->counts) : 0,
                  c_sb = c_buf ? args->counts.strides[0] : 0,
                  c_sh = c_buf ? args->counts.strides[1] : 0;
    const cl_int has_len = len_buf != NULL, has_krow = k_buf != NULL, has_counts = c_buf != NULL;
    const cl_int max_len = p.max_len, K = p.K, H = (cl_int)p.H, chunk = p.chunk,
                 nchunks = p.nchunks;

    clkv__log(ctx,
              "select_topk: B=%lld H=%lld N=%lld max_len=%d k=%d largest=%d wg=%d chunk=%d "
              "nchunks=%d",
              (long long)p.B, (long long)p.H, (long long)p.N, p.max_len, p.K, (int)args->largest,
              p.wg, p.chunk, p.nchunks);

    const size_t chunk_g[2] = {(size_t)p.nchunks * p.wg, (size_t)p.rows};
    const size_t loc[2] = {(size_t)p.wg, 1};
    /* FUSE_POOL: every token j < L gets its score written (chunks past max_len too) */
    const size_t hist_g[2] = {fuse ? (size_t)((fuse->L + (int64_t)p.chunk - 1) / p.chunk) * p.wg
                                   : chunk_g[0],
                              (size_t)p.rows};
    const cl_mem raw_buf = fuse ? fuse->raw : s_buf;
    const cl_long raw_off = fuse ? fuse->raw_off : 0, row_len = fuse ? fuse->row_len : 0,
                  protect = fuse ? fuse->protect : 0;
    const cl_int L = fuse ? fuse->L : 0, W = fuse ? fuse->W : 0, excl = fuse ? fuse->excl : 0,
                 pool = fuse ? fuse->pool : 0, pool_k = fuse ? fuse->pool_k : 1;
    st = clkv__set_args(ctx, k_hist, k1_name, 34, CLKV_ARG(s_buf), CLKV_ARG(s_off), CLKV_ARG(s_sb),
                        CLKV_ARG(s_sh), CLKV_ARG(H), CLKV_ARG(len_buf), CLKV_ARG(len_off),
                        CLKV_ARG(has_len), CLKV_ARG(max_len), CLKV_ARG(k_buf), CLKV_ARG(k_off),
                        CLKV_ARG(k_sb), CLKV_ARG(k_sh), CLKV_ARG(has_krow), CLKV_ARG(K),
                        CLKV_ARG(ra.has), CLKV_ARG(ra.ratio_bits), CLKV_ARG(ra.ratio_f),
                        CLKV_ARG(ra.budget), CLKV_ARG(ra.window), CLKV_ARG(ws), CLKV_ARG(st_off),
                        CLKV_ARG(ctr), CLKV_ARG(chunk), CLKV_ARG(nchunks), CLKV_ARG(raw_buf),
                        CLKV_ARG(raw_off), CLKV_ARG(row_len), CLKV_ARG(L), CLKV_ARG(W),
                        CLKV_ARG(excl), CLKV_ARG(protect), CLKV_ARG(pool), CLKV_ARG(pool_k));
    const cl_uint key_flip = args->largest ? 0u : 0xffffffffu; /* smallest first: inverted keys */
    if (st == CLKV_OK && !p.sort)
        st = clkv__set_args_at(ctx, k_hist, k1_name, 34, 1, CLKV_ARG(key_flip));
    if (st == CLKV_OK && p.sort) { /* select_hist_sort's further arguments */
        const size_t sz[9] = {sizeof cc_off, sizeof cand_off,   sizeof tab_off,
                              sizeof c_buf,  sizeof c_off,      sizeof c_sb,
                              sizeof c_sh,   sizeof has_counts, sizeof key_flip};
        const void *const ptr[9] = {&cc_off, &cand_off, &tab_off,    &c_buf,   &c_off,
                                    &c_sb,   &c_sh,     &has_counts, &key_flip};
        for (cl_uint i = 0; i < 9 && st == CLKV_OK; i++) {
            const cl_int err = clSetKernelArg(k_hist, 34 + i, sz[i], ptr[i]);
            if (err != CL_SUCCESS)
                st = clkv__fail_cl(ctx, err, "clSetKernelArg(select_hist_sort)");
        }
    }
    cl_event ev[3] = {NULL, NULL, NULL};
    const int prof = g_prof_on, nk = p.sort ? 2 : 3;
    if (st == CLKV_OK)
        st = clkv__launch(ctx, k_hist, k1_name, 2, hist_g, loc, 0, prof ? &ev[0] : NULL);
    if (st == CLKV_OK && !p.sort)
        st = clkv__set_args(
            ctx, k_cand, "select_cand", 22, CLKV_ARG(s_buf), CLKV_ARG(s_off), CLKV_ARG(s_sb),
            CLKV_ARG(s_sh), CLKV_ARG(H), CLKV_ARG(len_buf), CLKV_ARG(len_off), CLKV_ARG(has_len),
            CLKV_ARG(max_len), CLKV_ARG(ws), CLKV_ARG(st_off), CLKV_ARG(cc_off), CLKV_ARG(cand_off),
            CLKV_ARG(ctr), CLKV_ARG(chunk), CLKV_ARG(nchunks), CLKV_ARG(c_buf), CLKV_ARG(c_off),
            CLKV_ARG(c_sb), CLKV_ARG(c_sh), CLKV_ARG(has_counts), CLKV_ARG(key_flip));
    if (st == CLKV_OK && !p.sort)
        st = clkv__launch(ctx, k_cand, "select_cand", 2, chunk_g, loc, 0, prof ? &ev[1] : NULL);
    if (st == CLKV_OK)
        st = clkv__set_args(ctx, k_write, "select_write", 20, CLKV_ARG(s_buf), CLKV_ARG(s_off),
                            CLKV_ARG(s_sb), CLKV_ARG(s_sh), CLKV_ARG(H), CLKV_ARG(ws),
                            CLKV_ARG(st_off), CLKV_ARG(cc_off), CLKV_ARG(len_buf),
                            CLKV_ARG(len_off), CLKV_ARG(has_len), CLKV_ARG(max_len),
                            CLKV_ARG(chunk), CLKV_ARG(nchunks), CLKV_ARG(i_buf), CLKV_ARG(i_off),
                            CLKV_ARG(i_sb), CLKV_ARG(i_sh), CLKV_ARG(K), CLKV_ARG(key_flip));
    if (st == CLKV_OK)
        st = clkv__launch(ctx, k_write, "select_write", 2, chunk_g, loc, 0,
                          prof ? &ev[nk - 1] : done);
    if (prof && st == CLKV_OK) {
        if (done) {
            clRetainEvent(ev[nk - 1]);
            *done = ev[nk - 1];
        }
        st = prof_add(ctx, ev, nk);
    } else if (prof) {
        for (int i = 0; i < 3; i++)
            if (ev[i])
                clReleaseEvent(ev[i]);
    }
    return st;
}
