/* Budget policies: uniform and PyramidKV layer budgets (host arithmetic) and the
 * head-adaptive AdaKV split of one layer (validation and launch of cl_kernels/budget.cl). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clkv/budget.h"
#include "runtime/internal.h"

#define KERNEL_FILE "budget.cl"
#define ADA_BINS 2048
#define ADA_MAX_HKV 256
#define MAX_LAYERS 65536
#define MAX_BETA 1024

/* ---- layer budgets ---- */

clkv_status clkv_budget_uniform(int64_t num_layers, int64_t budget, int64_t *out) {
    if (!out)
        return clkv__fail(NULL, CLKV_ERR_ARG_NULL, "out: output array is NULL");
    if (num_layers < 1 || num_layers > MAX_LAYERS)
        return clkv__fail(NULL, CLKV_ERR_ARG_RANGE, "num_layers: %lld is outside [1, %d]",
                          (long long)num_layers, MAX_LAYERS);
    if (budget < 0 || budget > INT32_MAX)
        return clkv__fail(NULL, CLKV_ERR_ARG_RANGE, "budget: %lld is outside [0, 2^31-1]",
                          (long long)budget);
    for (int64_t l = 0; l < num_layers; l++)
        out[l] = budget;
    return CLKV_OK;
}

/* r_l = num_l / den with num_l = A * ((2 beta - 1)(N - 1) - (2 beta - 2) l) and
 * den = beta (N - 1): below 2^31 * 2^11 * 2^16 = 2^58, exact in int64. */
static int64_t pyramid_num(int64_t N, int64_t A, int64_t beta, int64_t l) {
    return A * ((2 * beta - 1) * (N - 1) - (2 * beta - 2) * l);
}

clkv_status clkv_budget_pyramid(int64_t num_layers, int64_t avg_budget, int64_t beta,
                                int64_t *out) {
    if (!out)
        return clkv__fail(NULL, CLKV_ERR_ARG_NULL, "out: output array is NULL");
    if (num_layers < 1 || num_layers > MAX_LAYERS)
        return clkv__fail(NULL, CLKV_ERR_ARG_RANGE, "num_layers: %lld is outside [1, %d]",
                          (long long)num_layers, MAX_LAYERS);
    if (avg_budget < 0 || avg_budget > INT32_MAX)
        return clkv__fail(NULL, CLKV_ERR_ARG_RANGE, "avg_budget: %lld is outside [0, 2^31-1]",
                          (long long)avg_budget);
    if (beta < 1 || beta > MAX_BETA)
        return clkv__fail(NULL, CLKV_ERR_ARG_RANGE, "beta: %lld is outside [1, %d]",
                          (long long)beta, MAX_BETA);
    const int64_t N = num_layers, A = avg_budget;
    if (N == 1) {
        out[0] = A;
        return CLKV_OK;
    }
    const int64_t den = beta * (N - 1);
    int64_t sum = 0;
    for (int64_t l = 0; l < N; l++) {
        out[l] = pyramid_num(N, A, beta, l) / den;
        sum += out[l];
    }
    const int64_t R = N * A - sum; /* sum of the fractional parts: an integer in [0, N) */
    if (R <= 0)
        return CLKV_OK;
    /* T = the R-th largest remainder: the largest t with #{l : rem_l >= t} >= R. */
    int64_t lo = 0, hi = den - 1;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo + 1) / 2;
        int64_t cnt = 0;
        for (int64_t l = 0; l < N; l++)
            cnt += pyramid_num(N, A, beta, l) % den >= mid;
        if (cnt >= R)
            lo = mid;
        else
            hi = mid - 1;
    }
    int64_t left = R;
    for (int64_t l = 0; l < N; l++) /* strictly above the threshold */
        if (pyramid_num(N, A, beta, l) % den > lo) {
            out[l]++;
            left--;
        }
    for (int64_t l = 0; l < N && left > 0; l++) /* at the threshold: lower layers first */
        if (pyramid_num(N, A, beta, l) % den == lo) {
            out[l]++;
            left--;
        }
    return CLKV_OK;
}

/* ---- AdaKV ---- */

typedef struct ada_plan {
    int64_t B, H, N, rows;
    int max_len, wg, floor_k;
    int64_t chunk1, chunk2, nch1, nch2;
    size_t r_bytes, s_bytes, h_bytes, c_bytes;
} ada_plan;

static clkv_status validate(clkv_context *ctx, const clkv_budget_adakv_args *a) {
    clkv_status st;
    const uint32_t i32 = CLKV_DTYPE_BIT(CLKV_I32);
    if ((st = clkv__check_tensor(ctx, &a->scores, "scores", 3, CLKV_DTYPE_BIT(CLKV_F32))) ||
        (st = clkv__check_optional_tensor(ctx, &a->lengths, "lengths", 1, i32)) ||
        (st = clkv__check_tensor(ctx, &a->k_per_row, "k_per_row", 2, i32)))
        return st;
    const int64_t B = a->scores.dims[0], H = a->scores.dims[1], N = a->scores.dims[2];
    if ((st = clkv__check_dim(ctx, &a->k_per_row, "k_per_row", 0, B, "batch of scores")) ||
        (st = clkv__check_dim(ctx, &a->k_per_row, "k_per_row", 1, H, "KV heads of scores")))
        return st;
    if (a->lengths.buf &&
        (st = clkv__check_dim(ctx, &a->lengths, "lengths", 0, B, "batch of scores")))
        return st;
    if (a->k < 0 || a->k > INT32_MAX)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "k: %lld is outside [0, 2^31-1]",
                          (long long)a->k);
    if (!(a->alpha >= 0.0 && a->alpha <= 1.0))
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "alpha: %g is outside [0, 1]", a->alpha);
    if (a->max_length < -1 || a->max_length > N)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "max_length: %lld is outside [-1, N = %lld]",
                          (long long)a->max_length, (long long)N);
    if (H > ADA_MAX_HKV)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "scores: Hkv = %lld exceeds %d KV heads",
                          (long long)H, ADA_MAX_HKV);
    if (N > INT32_MAX || (H > 0 && N > INT32_MAX / H) || (H > 0 && B > INT32_MAX / H))
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE,
                          "scores: Hkv*N = %lld*%lld or B*Hkv = %lld*%lld exceeds 2^31-1",
                          (long long)H, (long long)N, (long long)B, (long long)H);
    if (a->k_per_row.buf == a->scores.buf || a->k_per_row.buf == a->lengths.buf)
        return clkv__fail(ctx, CLKV_ERR_ARG_UNSUPPORTED,
                          "k_per_row: shares a buffer with %s (the output must not alias an "
                          "input)",
                          a->k_per_row.buf == a->scores.buf ? "scores" : "lengths");
    return CLKV_OK;
}

static int64_t chunk_for(const clkv_context *ctx, int64_t items, int64_t rows, int wg) {
    const int gpu = ctx->info.kind == CLKV_DEVICE_KIND_GPU;
    const int64_t target =
        (int64_t)(ctx->info.compute_units ? ctx->info.compute_units : 1) * (gpu ? 8 : 2);
    int64_t per_row = rows ? (target + rows - 1) / rows : 1;
    if (per_row < 1)
        per_row = 1;
    const int64_t len = items > 0 ? items : 1;
    int64_t chunk = (len + per_row - 1) / per_row;
    const int64_t min_chunk = (int64_t)wg * 16;
    if (chunk < min_chunk)
        chunk = min_chunk;
    /* CLKV_BUDGET_CHUNK forces the chunk length (tests: many chunks per row on any device) */
    const char *force = getenv("CLKV_BUDGET_CHUNK");
    if (force && *force && atoll(force) > 0)
        chunk = atoll(force);
    return (chunk + wg - 1) / wg * wg;
}

static void plan_launch(clkv_context *ctx, const clkv_budget_adakv_args *a, ada_plan *p) {
    memset(p, 0, sizeof *p);
    p->B = a->scores.dims[0];
    p->H = a->scores.dims[1];
    p->N = a->scores.dims[2];
    p->rows = p->B * p->H;
    p->max_len = (int)(a->max_length < 0 ? p->N : a->max_length);
    int wg = 256;
    while ((uint64_t)wg > ctx->info.max_work_group_size && wg > 1)
        wg /= 2;
    p->wg = wg;
    double f = floor(a->alpha * (double)a->k);
    p->floor_k = (int)(f < 0.0 ? 0.0 : f > (double)a->k ? (double)a->k : f);
    const int64_t items2 = p->H * (int64_t)p->max_len;
    p->chunk1 = chunk_for(ctx, p->max_len, p->rows, wg);
    p->chunk2 = chunk_for(ctx, items2, p->B, wg);
    p->nch1 = p->max_len > 0 ? (p->max_len + p->chunk1 - 1) / p->chunk1 : 1;
    p->nch2 = items2 > 0 ? (items2 + p->chunk2 - 1) / p->chunk2 : 1;
    p->r_bytes = clkv__ws_align((size_t)p->rows * 16);
    p->s_bytes = clkv__ws_align((size_t)p->B * 16);
    p->h_bytes = clkv__ws_align((size_t)p->rows * ADA_BINS * 4);
    p->c_bytes = clkv__ws_align((size_t)p->rows * 4);
}

static clkv_status check_common(clkv_context *ctx, const clkv_budget_adakv_args *args) {
    if (!ctx || !args)
        return clkv__fail_entry(ctx, args);
    return validate(ctx, args);
}

clkv_status clkv_budget_adakv_workspace_size(clkv_context *ctx, const clkv_budget_adakv_args *args,
                                             size_t *bytes) {
    clkv_status st = check_common(ctx, args);
    if (st != CLKV_OK)
        return st;
    if (!bytes)
        return clkv__fail(ctx, CLKV_ERR_ARG_NULL, "bytes: output pointer is NULL");
    ada_plan p;
    plan_launch(ctx, args, &p);
    *bytes = p.rows ? p.r_bytes + p.s_bytes + p.h_bytes + p.c_bytes : 0;
    return CLKV_OK;
}

clkv_status clkv_budget_adakv(clkv_context *ctx, const clkv_budget_adakv_args *args,
                              cl_event *done) {
    clkv_status st = check_common(ctx, args);
    if (st != CLKV_OK)
        return st;
    ada_plan p;
    plan_launch(ctx, args, &p);
    if (p.rows == 0)
        return clkv__marker(ctx, done);

    clkv_defs defs;
    clkv__defs_init(&defs);
    clkv__defs_int(&defs, "ADA_WG", p.wg);
    clkv__defs_int(&defs, "ADA_MAX_HKV", ADA_MAX_HKV);
    cl_kernel k_init, k_hist, k_scan, k_count, k_write;
    if ((st = clkv__get_kernel(ctx, KERNEL_FILE, &defs, "ada_init", &k_init)) ||
        (st = clkv__get_kernel(ctx, KERNEL_FILE, &defs, "ada_hist", &k_hist)) ||
        (st = clkv__get_kernel(ctx, KERNEL_FILE, &defs, "ada_scan", &k_scan)) ||
        (st = clkv__get_kernel(ctx, KERNEL_FILE, &defs, "ada_count", &k_count)) ||
        (st = clkv__get_kernel(ctx, KERNEL_FILE, &defs, "ada_write", &k_write)))
        return st;
    if ((st = clkv__check_local_mem(ctx, k_hist, "ada_hist", 0)) ||
        (st = clkv__check_local_mem(ctx, k_scan, "ada_scan", 0)) ||
        (st = clkv__check_local_mem(ctx, k_count, "ada_count", 0)))
        return st;
    cl_mem ws;
    if ((st = clkv__workspace(ctx, p.r_bytes + p.s_bytes + p.h_bytes + p.c_bytes, &ws)))
        return st;
    /* Four scratch arrays in the one workspace buffer, addressed by uint offsets. */
    const cl_long r_off = 0, s_off = (cl_long)(p.r_bytes / 4),
                  h_off = (cl_long)((p.r_bytes + p.s_bytes) / 4),
                  c_off = (cl_long)((p.r_bytes + p.s_bytes + p.h_bytes) / 4);
    const clkv_tensor *sc = &args->scores;
    const cl_mem s_buf = sc->buf, len_buf = args->lengths.buf, o_buf = args->k_per_row.buf;
    const cl_long sc_off = clkv__elem_offset(sc), s_sb = sc->strides[0], s_sh = sc->strides[1];
    const cl_long len_off = len_buf ? clkv__elem_offset(&args->lengths) : 0;
    const cl_long o_off = clkv__elem_offset(&args->k_per_row), o_sb = args->k_per_row.strides[0],
                  o_sh = args->k_per_row.strides[1];
    const cl_int has_len = len_buf != NULL, max_len = p.max_len, Hkv = (cl_int)p.H,
                 kk = (cl_int)args->k, fk = p.floor_k, rows = (cl_int)p.rows;

    clkv__log(ctx,
              "budget_adakv: B=%lld Hkv=%lld N=%lld max_len=%d k=%d floor=%d wg=%d chunk1=%lld "
              "(x%lld) chunk2=%lld (x%lld)",
              (long long)p.B, (long long)p.H, (long long)p.N, p.max_len, (int)kk, (int)fk, p.wg,
              (long long)p.chunk1, (long long)p.nch1, (long long)p.chunk2, (long long)p.nch2);

    const size_t loc[2] = {(size_t)p.wg, 1};
    const size_t g_rows[2] = {(size_t)p.wg, (size_t)p.rows};
    const size_t g_seq[2] = {(size_t)p.wg, (size_t)p.B};
    const size_t g_h1[2] = {(size_t)(p.nch1 * p.wg), (size_t)p.rows};
    const size_t g_h2[2] = {(size_t)(p.nch2 * p.wg), (size_t)p.B};

    st = clkv__set_args(ctx, k_init, "ada_init", 12, CLKV_ARG(len_buf), CLKV_ARG(len_off),
                        CLKV_ARG(has_len), CLKV_ARG(max_len), CLKV_ARG(Hkv), CLKV_ARG(kk),
                        CLKV_ARG(fk), CLKV_ARG(ws), CLKV_ARG(r_off), CLKV_ARG(s_off),
                        CLKV_ARG(h_off), CLKV_ARG(c_off));
    if (st == CLKV_OK)
        st = clkv__enqueue(ctx, k_init, "ada_init", 2, g_rows, loc, NULL);
    /* MSB-first passes over the 64-bit keys: 11, 11, 10 bits of each 32-bit word. */
    static const cl_int shifts[6] = {53, 42, 32, 21, 10, 0}, bits[6] = {11, 11, 10, 11, 11, 10};
    for (cl_int phase = fk > 0 ? 1 : 2; phase <= 2 && st == CLKV_OK; phase++) {
        const cl_long st_off = phase == 1 ? r_off : s_off;
        const cl_long chunk = phase == 1 ? p.chunk1 : p.chunk2;
        for (int pass = 0; pass < 6 && st == CLKV_OK; pass++) {
            const cl_int shift = shifts[pass], nbits = bits[pass];
            st = clkv__set_args(ctx, k_hist, "ada_hist", 17, CLKV_ARG(s_buf), CLKV_ARG(sc_off),
                                CLKV_ARG(s_sb), CLKV_ARG(s_sh), CLKV_ARG(Hkv), CLKV_ARG(len_buf),
                                CLKV_ARG(len_off), CLKV_ARG(has_len), CLKV_ARG(max_len),
                                CLKV_ARG(ws), CLKV_ARG(r_off), CLKV_ARG(st_off), CLKV_ARG(h_off),
                                CLKV_ARG(phase), CLKV_ARG(chunk), CLKV_ARG(shift), CLKV_ARG(nbits));
            if (st == CLKV_OK)
                st = clkv__enqueue(ctx, k_hist, "ada_hist", 2, phase == 1 ? g_h1 : g_h2, loc, NULL);
            if (st == CLKV_OK)
                st = clkv__set_args(ctx, k_scan, "ada_scan", 4, CLKV_ARG(ws), CLKV_ARG(st_off),
                                    CLKV_ARG(h_off), CLKV_ARG(shift));
            if (st == CLKV_OK)
                st = clkv__enqueue(ctx, k_scan, "ada_scan", 2, phase == 1 ? g_rows : g_seq, loc,
                                   NULL);
        }
    }
    const cl_long chunk2 = p.chunk2;
    if (st == CLKV_OK)
        st = clkv__set_args(ctx, k_count, "ada_count", 14, CLKV_ARG(s_buf), CLKV_ARG(sc_off),
                            CLKV_ARG(s_sb), CLKV_ARG(s_sh), CLKV_ARG(Hkv), CLKV_ARG(len_buf),
                            CLKV_ARG(len_off), CLKV_ARG(has_len), CLKV_ARG(max_len), CLKV_ARG(ws),
                            CLKV_ARG(r_off), CLKV_ARG(s_off), CLKV_ARG(c_off), CLKV_ARG(chunk2));
    if (st == CLKV_OK)
        st = clkv__enqueue(ctx, k_count, "ada_count", 2, g_h2, loc, NULL);
    if (st == CLKV_OK)
        st = clkv__set_args(ctx, k_write, "ada_write", 8, CLKV_ARG(ws), CLKV_ARG(c_off),
                            CLKV_ARG(rows), CLKV_ARG(Hkv), CLKV_ARG(o_buf), CLKV_ARG(o_off),
                            CLKV_ARG(o_sb), CLKV_ARG(o_sh));
    if (st == CLKV_OK) {
        const size_t gw = ((size_t)p.rows + p.wg - 1) / p.wg * p.wg, lw = (size_t)p.wg;
        st = clkv__enqueue(ctx, k_write, "ada_write", 1, &gw, &lw, done);
    }
    return st;
}
