/* Host-resident K/V store (include/clkv/offload.h): clkv_offload_write and
 * clkv_offload_gather on both paths (kernel read, pinned staging), the split over several
 * buffers (forced with a tiny max_buffer_bytes), all dtypes, HND/NHD sources and outputs,
 * odd output offsets, K-only gathers, idx with -1 / >= capacity / INT32_MIN / repeats,
 * NI = 0, rectangle and plain transfers; and every bad-input path.
 *
 * The expected result is a host mirror of the store built from the values written (a
 * copy is exact), so outputs must match bit for bit; outputs start poisoned with guard
 * bytes after them, and every element must be written and every guard left alone. */
#include "util/test_util.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_SEED 0x6A7E2026ull

typedef struct gcase {
    const char *name;
    int64_t B, Hkv, cap, D;
    clkv_dtype dt;
    int64_t slices_per_buffer; /* 0: one buffer; else max_buffer_bytes = this many slices */
    int64_t NI;
    tu_layout src_layout, out_layout;
    int out_odd_offset;
    int with_v;
} gcase;

/* clang-format off */
static const gcase g_cases[] = {
    {"bf16_d128_b2_h3_cap50_3buffers", 2, 3, 50, 128, CLKV_BF16, 2, 37, TU_HND, TU_HND, 0, 1},
    {"f32_d64_b1_h8_cap300_8buffers_nhd_konly", 1, 8, 300, 64, CLKV_F32, 1, 100, TU_NHD, TU_NHD,
     0, 0},
    {"f16_d96_b3_h2_cap40_oddoffset", 3, 2, 40, 96, CLKV_F16, 0, 25, TU_HND, TU_NHD, 1, 1},
    {"bf16_d256_b2_h2_cap64_ni0", 2, 2, 64, 256, CLKV_BF16, 3, 0, TU_HND, TU_HND, 0, 1},
    {"f32_d128_b3_h5_cap33_5buffers_ni1", 3, 5, 33, 128, CLKV_F32, 3, 1, TU_NHD, TU_HND, 0, 1},
};
/* clang-format on */

static clkv_context *g_ctx;

/* A [B, H, T, D] window view (rows [t0, t0 + T)) of a [B, H, L, D] cache descriptor. */
static clkv_tensor window(clkv_tensor t, int64_t t0, int64_t T) {
    t.offset += (uint64_t)t0 * (uint64_t)t.strides[2] * tu_dtype_size(t.dtype);
    t.dims[2] = T;
    return t;
}

static void run_mode(const gcase *c, clkv_offload_mode mode, uint64_t seed) {
    const int64_t B = c->B, H = c->Hkv, cap = c->cap, D = c->D, NI = c->NI;
    const size_t es = tu_dtype_size(c->dt);
    const size_t nstore = (size_t)(B * H * cap * D), nout = (size_t)(B * H * NI * D);
    tu_rng rng;
    tu_rng_seed(&rng, seed, (uint64_t)(c - g_cases) * 2 + (uint64_t)mode);
    tu_set_case("%s mode=%s", c->name, mode == CLKV_OFFLOAD_STAGING ? "staging" : "kernel-read");

    clkv_offload_store_desc desc = CLKV_OFFLOAD_STORE_DESC_INIT;
    desc.batch = B;
    desc.kv_heads = H;
    desc.capacity = cap;
    desc.head_dim = D;
    desc.dtype = c->dt;
    desc.mode = mode;
    desc.max_buffer_bytes = (uint64_t)c->slices_per_buffer * (uint64_t)(cap * D) * es;
    clkv_offload_store *store = NULL;
    TU_CHECK_OK(g_ctx, clkv_offload_store_create(g_ctx, &desc, &store));
    clkv_offload_store_info info;
    TU_CHECK_OK(g_ctx, clkv_offload_store_get_info(store, &info));
    if (info.mode != mode) {
        TU_FAIL("store mode %d, asked for %d", (int)info.mode, (int)mode);
    }
    const int64_t want_bufs =
        c->slices_per_buffer ? (B * H + c->slices_per_buffer - 1) / c->slices_per_buffer : 1;
    if (info.num_buffers != want_bufs || info.bytes != 2 * nstore * es) {
        TU_FAIL("store has %d buffers / %" PRIu64 " bytes, expected %" PRId64 " / %zu",
                (int)info.num_buffers, info.bytes, want_bufs, 2 * nstore * es);
    }

    /* K/V contents, written in two parts: rows [0, split) then [split, cap) from a second
     * cache in the other layout */
    float *kv[2];
    for (int t = 0; t < 2; t++) {
        kv[t] = (float *)tu_malloc(nstore * sizeof(float));
        tu_fill_normal(&rng, kv[t], nstore, 0.0, 1.0);
        tu_round_array(c->dt, kv[t], nstore);
    }
    const int64_t split = cap / 3;
    clkv_tensor src[2][2];
    for (int t = 0; t < 2; t++) {
        src[0][t] = tu_kv_tensor(g_ctx, kv[t], c->dt, B, H, cap, D, c->src_layout);
        src[1][t] = tu_kv_tensor(g_ctx, kv[t], c->dt, B, H, cap, D,
                                 c->src_layout == TU_HND ? TU_NHD : TU_HND);
    }
    clkv_offload_write_args w = CLKV_OFFLOAD_WRITE_ARGS_INIT;
    w.k = window(src[0][0], 0, split);
    w.v = window(src[0][1], 0, split);
    TU_CHECK_OK(g_ctx, clkv_offload_write(g_ctx, store, &w, NULL));
    w.k = window(src[1][0], split, cap - split);
    w.v = window(src[1][1], split, cap - split);
    w.dst_start = split;
    cl_event ev = NULL;
    TU_CHECK_OK(g_ctx, clkv_offload_write(g_ctx, store, &w, &ev));
    TU_CHECK_CL(clWaitForEvents(1, &ev));
    clReleaseEvent(ev);

    /* idx */
    int32_t *idx = (int32_t *)tu_malloc((size_t)(B * H * NI + 1) * sizeof(int32_t));
    for (int64_t i = 0; i < B * H * NI; i++) {
        const int64_t kind = tu_rng_int(&rng, 0, 9);
        idx[i] = kind == 0            ? -1
                 : kind == 1          ? (int32_t)tu_rng_int(&rng, cap, cap + 10)
                 : kind == 2          ? INT32_MIN
                 : kind == 3 && i > 0 ? idx[i - 1]
                                      : (int32_t)tu_rng_int(&rng, 0, cap - 1);
    }
    const int64_t idims[3] = {B, H, NI};
    clkv_tensor tidx = tu_tensor_upload_i32(g_ctx, idx, 3, idims, 8, 8);
    const uint64_t ooff = (c->out_odd_offset ? 3 : 16) * es;
    clkv_tensor out[2];
    for (int t = 0; t < 2; t++) {
        const size_t bytes = ooff + nout * es + 24;
        cl_mem buf = tu_buffer_create(g_ctx, bytes);
        out[t] = c->out_layout == TU_HND ? clkv_tensor_4d(buf, c->dt, B, H, NI, D)
                                         : clkv_tensor_4d_nhd(buf, c->dt, B, H, NI, D);
        out[t].offset = ooff;
    }
    clkv_offload_gather_args g = CLKV_OFFLOAD_GATHER_ARGS_INIT;
    g.idx = tidx;
    g.k_out = out[0];
    g.v_out = c->with_v ? out[1] : clkv_tensor_none();
    ev = NULL;
    TU_CHECK_OK(g_ctx, clkv_offload_gather(g_ctx, store, &g, &ev));
    if (ev == NULL) {
        TU_FAIL("clkv_offload_gather returned no event");
    }
    TU_CHECK_CL(clWaitForEvents(1, &ev));
    clReleaseEvent(ev);
    TU_CHECK_OK(g_ctx, clkv_context_finish(g_ctx));

    float *got = (float *)tu_malloc((nout + 1) * sizeof(float));
    for (int t = 0; t < (c->with_v ? 2 : 1); t++) {
        if (NI > 0) {
            tu_assert_written_exactly(g_ctx, &out[t], t == 0 ? "k_out" : "v_out");
        }
        tu_tensor_read(g_ctx, &out[t], got);
        for (int64_t s = 0; s < B * H; s++) {
            for (int64_t i = 0; i < NI; i++) {
                const int32_t ti = idx[s * NI + i];
                for (int64_t d = 0; d < D; d++) {
                    const float want =
                        (ti >= 0 && ti < cap) ? kv[t][(size_t)((s * cap + ti) * D + d)] : 0.0f;
                    const float x = got[(size_t)((s * NI + i) * D + d)];
                    if (memcmp(&x, &want, sizeof x) != 0) {
                        TU_FAIL("%s[slice %" PRId64 ", %" PRId64 ", %" PRId64 "] = %g, expected "
                                "%g (idx %d)",
                                t == 0 ? "k_out" : "v_out", s, i, d, (double)x, (double)want,
                                (int)ti);
                    }
                }
            }
        }
    }
    if (!c->with_v) {
        tu_assert_buffer_poison(g_ctx, out[1].buf, "v_out (absent: never written)");
    }
    /* A second gather into the same outputs reuses the staging area / kernel. */
    TU_CHECK_OK(g_ctx, clkv_offload_gather(g_ctx, store, &g, NULL));
    TU_CHECK_OK(g_ctx, clkv_context_finish(g_ctx));

    clkv_offload_store_destroy(store);
    for (int t = 0; t < 2; t++) {
        tu_release(src[0][t].buf);
        tu_release(src[1][t].buf);
        tu_release(out[t].buf);
        free(kv[t]);
    }
    tu_release(tidx.buf);
    free(idx);
    free(got);
    tu_set_case("%s", "");
}

/* Both paths, each with the rectangle transfers and with the plain per-run transfers that
 * replace them past 4 GiB (CLKV_RECT_LIMIT_MIB=0 sends every transfer there). */
static void run_case(void **state) {
    const gcase *c = (const gcase *)*state;
    const uint64_t seed = tu_seed(DEFAULT_SEED);
    const char *saved = getenv("CLKV_RECT_LIMIT_MIB");
    char *saved_copy = saved ? strdup(saved) : NULL;
    for (int plain = 0; plain < 2; plain++) {
        if (plain)
            setenv("CLKV_RECT_LIMIT_MIB", "0", 1);
        else
            unsetenv("CLKV_RECT_LIMIT_MIB");
        run_mode(c, CLKV_OFFLOAD_KERNEL_READ, seed);
        run_mode(c, CLKV_OFFLOAD_STAGING, seed);
    }
    if (saved_copy)
        setenv("CLKV_RECT_LIMIT_MIB", saved_copy, 1);
    else
        unsetenv("CLKV_RECT_LIMIT_MIB");
    free(saved_copy);
}

/* AUTO picks a path and reports it; on a CPU device that is the kernel-read path. */
static void test_auto_mode(void **state) {
    clkv_offload_store_desc d = CLKV_OFFLOAD_STORE_DESC_INIT;
    clkv_offload_store *s = NULL;
    clkv_offload_store_info info;
    (void)state;
    tu_set_case("auto mode");
    d.batch = 1;
    d.kv_heads = 2;
    d.capacity = 16;
    d.head_dim = 64;
    TU_CHECK_OK(g_ctx, clkv_offload_store_create(g_ctx, &d, &s));
    TU_CHECK_OK(g_ctx, clkv_offload_store_get_info(s, &info));
    if (info.mode != CLKV_OFFLOAD_KERNEL_READ && info.mode != CLKV_OFFLOAD_STAGING) {
        TU_FAIL("auto resolved to %d", (int)info.mode);
    }
    if (clkv_context_device_info(g_ctx)->kind == CLKV_DEVICE_KIND_CPU &&
        info.mode != CLKV_OFFLOAD_KERNEL_READ) {
        TU_FAIL("auto on a CPU device should read host memory from kernels");
    }
    printf("[ info     ] auto mode: %s, host_nv=%d\n",
           info.mode == CLKV_OFFLOAD_STAGING ? "staging" : "kernel-read", (int)info.host_nv);
    clkv_offload_store_destroy(s);
    clkv_offload_store_destroy(NULL);
    tu_set_case("%s", "");
}

/* ---- bad inputs ---- */

static void expect(clkv_status got, clkv_status want, const clkv_context *ctx, const char *name,
                   const char *label) {
    if (got != want) {
        TU_FAIL("%s: returned %s, expected %s (\"%s\")", label, clkv_status_string(got),
                clkv_status_string(want), clkv_last_error(ctx));
    }
    if (!tu_msg_names(clkv_last_error(ctx), name)) {
        TU_FAIL("%s: message \"%s\" does not name \"%s\"", label, clkv_last_error(ctx), name);
    }
}

static void test_bad_create(void **state) {
    clkv_offload_store *s = (clkv_offload_store *)0x1;
    clkv_offload_store_desc base = CLKV_OFFLOAD_STORE_DESC_INIT, d;
    (void)state;
    tu_set_case("bad create");
    base.batch = 2;
    base.kv_heads = 2;
    base.capacity = 100;
    base.head_dim = 128;
    expect(clkv_offload_store_create(NULL, &base, &s), CLKV_ERR_ARG_NULL, NULL, "ctx", "ctx");
    expect(clkv_offload_store_create(g_ctx, NULL, &s), CLKV_ERR_ARG_NULL, g_ctx, "desc", "desc");
    if (s != NULL) {
        TU_FAIL("*out not cleared on failure");
    }
    expect(clkv_offload_store_create(g_ctx, &base, NULL), CLKV_ERR_ARG_NULL, g_ctx, "out", "out");
    d = base;
    d.batch = 0;
    expect(clkv_offload_store_create(g_ctx, &d, &s), CLKV_ERR_ARG_RANGE, g_ctx, "batch", "b0");
    d = base;
    d.kv_heads = 70000;
    expect(clkv_offload_store_create(g_ctx, &d, &s), CLKV_ERR_ARG_RANGE, g_ctx, "kv_heads", "h");
    d = base;
    d.capacity = 0;
    expect(clkv_offload_store_create(g_ctx, &d, &s), CLKV_ERR_ARG_RANGE, g_ctx, "capacity", "c");
    d = base;
    d.head_dim = 0;
    expect(clkv_offload_store_create(g_ctx, &d, &s), CLKV_ERR_ARG_RANGE, g_ctx, "head_dim", "d");
    d = base;
    d.dtype = CLKV_I32;
    expect(clkv_offload_store_create(g_ctx, &d, &s), CLKV_ERR_ARG_DTYPE, g_ctx, "dtype", "dt");
    d = base;
    d.mode = (clkv_offload_mode)7;
    expect(clkv_offload_store_create(g_ctx, &d, &s), CLKV_ERR_ARG_RANGE, g_ctx, "mode", "mode");
    d = base;
    d.max_buffer_bytes = 100 * 128 * 2 - 1; /* one slice does not fit */
    expect(clkv_offload_store_create(g_ctx, &d, &s), CLKV_ERR_DEVICE_LIMIT, g_ctx, "capacity",
           "slice > buffer");
    d = base;
    d.batch = 65535;
    d.kv_heads = 65535;
    d.capacity = INT32_MAX;
    d.head_dim = 4096;
    d.dtype = CLKV_F32;
    expect(clkv_offload_store_create(g_ctx, &d, &s), CLKV_ERR_ARG_OVERFLOW, g_ctx, "capacity",
           "overflow");
    expect(clkv_offload_store_get_info(NULL, NULL), CLKV_ERR_ARG_NULL, NULL, "store", "info");
    tu_set_case("%s", "");
}

static void test_bad_write_gather(void **state) {
    clkv_offload_store_desc d = CLKV_OFFLOAD_STORE_DESC_INIT;
    clkv_offload_store *s = NULL;
    clkv_offload_store_info info;
    const int64_t B = 2, H = 2, cap = 32, D = 64, NI = 4;
    (void)state;
    tu_set_case("bad write/gather");
    d.batch = B;
    d.kv_heads = H;
    d.capacity = cap;
    d.head_dim = D;
    d.dtype = CLKV_BF16;
    TU_CHECK_OK(g_ctx, clkv_offload_store_create(g_ctx, &d, &s));
    expect(clkv_offload_store_get_info(s, NULL), CLKV_ERR_ARG_NULL, g_ctx, "info", "info NULL");
    TU_CHECK_OK(g_ctx, clkv_offload_store_get_info(s, &info));
    cl_mem kb = tu_buffer_create(g_ctx, (size_t)(B * H * cap * D * 2));
    cl_mem vb = tu_buffer_create(g_ctx, (size_t)(B * H * cap * D * 2));
    cl_mem ib = tu_buffer_create(g_ctx, (size_t)(B * H * NI * 4));
    cl_mem ob = tu_buffer_create(g_ctx, (size_t)(B * H * NI * D * 2));
    cl_mem ob2 = tu_buffer_create(g_ctx, (size_t)(B * H * NI * D * 2));
    tu_buffer_write(g_ctx, ib, 0, (int32_t[16]){0}, (size_t)(B * H * NI * 4));
    clkv_offload_write_args w0 = CLKV_OFFLOAD_WRITE_ARGS_INIT, w;
    w0.k = clkv_tensor_4d(kb, CLKV_BF16, B, H, cap, D);
    w0.v = clkv_tensor_4d(vb, CLKV_BF16, B, H, cap, D);
    clkv_offload_gather_args g0 = CLKV_OFFLOAD_GATHER_ARGS_INIT, g;
    g0.idx = clkv_tensor_3d(ib, CLKV_I32, B, H, NI);
    g0.k_out = clkv_tensor_4d(ob, CLKV_BF16, B, H, NI, D);
    g0.v_out = clkv_tensor_4d(ob2, CLKV_BF16, B, H, NI, D);
    TU_CHECK_OK(g_ctx, clkv_offload_write(g_ctx, s, &w0, NULL));
    TU_CHECK_OK(g_ctx, clkv_offload_gather(g_ctx, s, &g0, NULL));
    TU_CHECK_OK(g_ctx, clkv_context_finish(g_ctx));

    expect(clkv_offload_write(NULL, s, &w0, NULL), CLKV_ERR_ARG_NULL, NULL, "ctx", "w ctx");
    expect(clkv_offload_write(g_ctx, NULL, &w0, NULL), CLKV_ERR_ARG_NULL, g_ctx, "store", "w s");
    expect(clkv_offload_write(g_ctx, s, NULL, NULL), CLKV_ERR_ARG_NULL, g_ctx, "args", "w a");
    w = w0;
    w.k.buf = NULL;
    expect(clkv_offload_write(g_ctx, s, &w, NULL), CLKV_ERR_ARG_NULL, g_ctx, "k", "w k NULL");
    w = w0;
    w.v.dtype = CLKV_F16;
    expect(clkv_offload_write(g_ctx, s, &w, NULL), CLKV_ERR_ARG_DTYPE, g_ctx, "v", "w v dtype");
    w = w0;
    w.k = clkv_tensor_4d(kb, CLKV_BF16, B, H + 1, 8, D);
    expect(clkv_offload_write(g_ctx, s, &w, NULL), CLKV_ERR_ARG_SHAPE, g_ctx, "k", "w k heads");
    w = w0;
    w.v = clkv_tensor_4d(vb, CLKV_BF16, B, H, cap - 1, D);
    expect(clkv_offload_write(g_ctx, s, &w, NULL), CLKV_ERR_ARG_SHAPE, g_ctx, "v", "w v rows");
    w = w0;
    w.dst_start = 1;
    expect(clkv_offload_write(g_ctx, s, &w, NULL), CLKV_ERR_ARG_RANGE, g_ctx, "dst_start",
           "w dst_start + T > cap");
    w = w0;
    w.dst_start = -1;
    expect(clkv_offload_write(g_ctx, s, &w, NULL), CLKV_ERR_ARG_RANGE, g_ctx, "dst_start",
           "w dst_start < 0");
    w = w0;
    w.k.strides[2] = 1;
    expect(clkv_offload_write(g_ctx, s, &w, NULL), CLKV_ERR_ARG_STRIDE, g_ctx, "k",
           "w overlapping rows");

    tu_buffer_poison(g_ctx, ob, 0, tu_buffer_size(ob));
    tu_buffer_poison(g_ctx, ob2, 0, tu_buffer_size(ob2));
    expect(clkv_offload_gather(NULL, s, &g0, NULL), CLKV_ERR_ARG_NULL, NULL, "ctx", "g ctx");
    expect(clkv_offload_gather(g_ctx, NULL, &g0, NULL), CLKV_ERR_ARG_NULL, g_ctx, "store", "g s");
    expect(clkv_offload_gather(g_ctx, s, NULL, NULL), CLKV_ERR_ARG_NULL, g_ctx, "args", "g a");
    g = g0;
    g.idx.buf = NULL;
    expect(clkv_offload_gather(g_ctx, s, &g, NULL), CLKV_ERR_ARG_NULL, g_ctx, "idx", "g idx");
    g = g0;
    g.idx.dtype = CLKV_U32;
    expect(clkv_offload_gather(g_ctx, s, &g, NULL), CLKV_ERR_ARG_DTYPE, g_ctx, "idx", "g idx dt");
    g = g0;
    g.idx = clkv_tensor_3d(ib, CLKV_I32, B, H - 1, NI);
    expect(clkv_offload_gather(g_ctx, s, &g, NULL), CLKV_ERR_ARG_SHAPE, g_ctx, "idx", "g idx h");
    g = g0;
    g.k_out = clkv_tensor_4d(ob, CLKV_BF16, B, H, NI - 1, D);
    expect(clkv_offload_gather(g_ctx, s, &g, NULL), CLKV_ERR_ARG_SHAPE, g_ctx, "k_out",
           "g k_out rows");
    g = g0;
    g.v_out.dtype = CLKV_F32;
    expect(clkv_offload_gather(g_ctx, s, &g, NULL), CLKV_ERR_ARG_DTYPE, g_ctx, "v_out",
           "g v_out dtype");
    g = g0;
    g.k_out = clkv_tensor_4d(ob, CLKV_BF16, B, H, NI, D / 2);
    expect(clkv_offload_gather(g_ctx, s, &g, NULL), CLKV_ERR_ARG_SHAPE, g_ctx, "k_out",
           "g k_out D");
    g = g0;
    g.k_out.offset = 2 * 2 * 2 * 4 * 64; /* past the end of the buffer */
    expect(clkv_offload_gather(g_ctx, s, &g, NULL), CLKV_ERR_ARG_BUFFER_SIZE, g_ctx, "k_out",
           "g k_out too small");
    TU_CHECK_OK(g_ctx, clkv_context_finish(g_ctx));
    tu_assert_buffer_poison(g_ctx, ob, "k_out after rejected gathers");
    tu_assert_buffer_poison(g_ctx, ob2, "v_out after rejected gathers");
    {
        /* a store used with another context */
        clkv_context *other = tu_context_create();
        expect(clkv_offload_gather(other, s, &g0, NULL), CLKV_ERR_ARG_RANGE, other, "store",
               "g other ctx");
        expect(clkv_offload_write(other, s, &w0, NULL), CLKV_ERR_ARG_RANGE, other, "store",
               "w other ctx");
        clkv_context_destroy(other);
    }
    clkv_offload_store_destroy(s);
    tu_release(kb);
    tu_release(vb);
    tu_release(ib);
    tu_release(ob);
    tu_release(ob2);
    tu_set_case("%s", "");
}

int main(void) {
    tu_suite s = {0};
    TU_SUITE_ADD_CASES(&s, g_cases, run_case);
    tu_suite_add(&s, "test_auto_mode", test_auto_mode, NULL);
    tu_suite_add(&s, "test_bad_create", test_bad_create, NULL);
    tu_suite_add(&s, "test_bad_write_gather", test_bad_write_gather, NULL);
    return tu_suite_run(&s, "gather_rows", &g_ctx, DEFAULT_SEED);
}
