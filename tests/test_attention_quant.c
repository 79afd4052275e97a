/* clkv_attention_quant_decode (include/clkv/quant_cache.h) against the double-precision
 * decode-attention reference (tests/ref/ref_attention.c) run over the dequantised cache
 * (tests/ref/ref_quant_cache.c: the device's codes and metadata read back and dequantised
 * with the rule x^ = f32(f32(q*s) + m), followed by the residual), with the SPEC §0.2
 * tolerances of the output dtype and 1e-4 on the LSE.
 *
 * Cases spread GQA shapes (32/8, 14/2, 8/8, 16/1 with more than 8 heads per KV head, 4/4
 * and 10/2 with empty heads in the tensor-core kernel's groups of 4), D
 * 64/128/256, bits 2/4/8 (keys and values different too), groups 16..128, residual,
 * metadata, q and o dtypes, mixed per-sequence lengths incl. 0 and 1, lengths ending
 * inside the quantized part's last tile or the residual, forced and automatic split
 * counts, an explicit scale, byte offsets with guards on the outputs (every element
 * written, nothing outside). Bad inputs for every argument.
 */
#include "util/test_util.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clkv/quant_cache.h"
#include "ref/ref_attention.h"
#include "ref/ref_quant_cache.h"

#define DEFAULT_SEED 0xA77E9CA4Eull

static clkv_context *g_ctx;

typedef struct acase {
    const char *name;
    int64_t B, Hq, Hkv, D;
    int k_bits, v_bits, group, nr;
    clkv_dtype res_dt, meta_dt, q_dt, o_dt;
    int32_t prefill[4]; /* per-sequence prefill counts */
    int decode_steps;   /* then this many steps of 1 token for sequences with len > 0 */
    int want_lse;
    int num_splits;
    float scale;
    int wg; /* CLKV_QUANT_WG for the cache (GPU work-group sizes on this device); 0: default */
    int per_step; /* check after the prefill and after every decode step */
    float kmag;   /* keys scaled by this (0: 1) */
} acase;

/* name, B, Hq, Hkv, D, k_bits, v_bits, group, n_r, residual, meta, q, o dtypes,
 * prefill counts, decode steps, lse, num_splits, scale, work-group size, per step */
/* clang-format off */
static const acase k_cases[] = {
    {"gqa32_8_d128_k2v2_g16", 2, 32, 8, 128, 2, 2, 16, 128,
     CLKV_F16, CLKV_F16, CLKV_BF16, CLKV_F32, {300, 0}, 2, 1, 0, 0.0f, 0, 0, 0.0f},
    {"gqa14_2_d64_k4v4_g32", 3, 14, 2, 64, 4, 4, 32, 64,
     CLKV_BF16, CLKV_F32, CLKV_F16, CLKV_BF16, {1, 200, 64}, 1, 1, 0, 0.0f, 0, 0, 0.0f},
    {"mha8_8_d256_k8v8_g64", 2, 8, 8, 256, 8, 8, 64, 128,
     CLKV_F32, CLKV_F16, CLKV_F32, CLKV_F16, {129, 0}, 0, 0, 0, 0.0f, 0, 0, 0.0f},
    {"gqa8_2_d128_k4v2_g128_splits5", 1, 8, 2, 128, 4, 2, 128, 128,
     CLKV_F16, CLKV_F16, CLKV_F32, CLKV_F32, {700}, 3, 1, 5, 0.0f, 0, 0, 0.0f},
    {"gqa4_1_d128_k2v2_long_auto", 1, 4, 1, 128, 2, 2, 16, 128,
     CLKV_BF16, CLKV_F16, CLKV_BF16, CLKV_F32, {4999}, 1, 1, 0, 0.0f, 0, 0, 0.0f},
    {"gqa16_1_d64_k2v4_g16_nhg2", 2, 16, 1, 64, 2, 4, 16, 32,
     CLKV_F16, CLKV_F32, CLKV_F32, CLKV_F32, {90, 33}, 2, 1, 3, 0.3f, 0, 0, 0.0f},
    {"gqa4_2_d256_k8v2_g32_residual_only", 2, 4, 2, 256, 8, 2, 32, 128,
     CLKV_BF16, CLKV_F16, CLKV_F16, CLKV_BF16, {100, 1}, 1, 1, 0, 0.0f, 0, 0, 0.0f},
    {"all_empty", 2, 8, 2, 64, 2, 2, 16, 32,
     CLKV_F16, CLKV_F16, CLKV_F32, CLKV_F32, {0, 0}, 0, 1, 0, 0.0f, 0, 0, 0.0f},
    {"wg128_gqa32_8_d128_k2v4_g32", 2, 32, 8, 128, 2, 4, 32, 128,
     CLKV_BF16, CLKV_F16, CLKV_BF16, CLKV_F32, {1000, 517}, 1, 1, 0, 0.0f, 128, 0, 0.0f},
    {"wg256_gqa8_4_d256_k4v8_g16", 1, 8, 4, 256, 4, 8, 16, 64,
     CLKV_F16, CLKV_F32, CLKV_F16, CLKV_F32, {1500}, 2, 1, 0, 0.0f, 256, 0, 0.0f},
    {"wg256_gqa8_1_d64_k8v2_g64_splits7_ktok4", 3, 8, 1, 64, 8, 2, 64, 64,
     CLKV_F32, CLKV_F16, CLKV_F32, CLKV_F32, {640, 0, 77}, 1, 1, 7, 0.0f, 256, 0, 0.0f},
    {"decode_loop_gqa8_2_d128_k2v2_g16_nr32", 3, 8, 2, 128, 2, 2, 16, 32,
     CLKV_BF16, CLKV_F16, CLKV_BF16, CLKV_F32, {30, 1, 63}, 5, 1, 0, 0.0f, 0, 1, 0.0f},
    /* 16-bit o, D 64/128/256, 2-bit codes or 4-bit codes with groups of 64+, or 4-bit codes
     * with smaller groups in launches too small for the CUDA-core kernel to fill the
     * device: the tensor-core kernel on NVIDIA (CLKV_LOG=1 logs "tensor-core" per call) */
    {"mma_gqa32_8_d128_k2v2_g16", 2, 32, 8, 128, 2, 2, 16, 128,
     CLKV_BF16, CLKV_F16, CLKV_BF16, CLKV_BF16, {3000, 1500}, 1, 1, 0, 0.0f, 0, 0, 0.0f},
    {"mma_gqa8_1_d64_k4v2_g64_nhg2", 3, 8, 1, 64, 4, 2, 64, 64,
     CLKV_F16, CLKV_F32, CLKV_F16, CLKV_F16, {700, 0, 129}, 2, 1, 0, 0.0f, 0, 0, 0.0f},
    {"mma_gqa6_2_d128_k2v4_g128_splits9", 1, 6, 2, 128, 2, 4, 128, 128,
     CLKV_F16, CLKV_F16, CLKV_F32, CLKV_BF16, {1000}, 1, 1, 9, 0.2f, 0, 0, 0.0f},
    {"mma_gqa16_4_d128_k4v4_g64_mixed", 4, 16, 4, 128, 4, 4, 64, 128,
     CLKV_F32, CLKV_F16, CLKV_BF16, CLKV_F16, {2048, 1, 0, 333}, 1, 1, 0, 0.0f, 0, 0, 0.0f},
    {"mma_gqa4_1_d128_k2v2_g16_long", 1, 4, 1, 128, 2, 2, 16, 128,
     CLKV_BF16, CLKV_F16, CLKV_BF16, CLKV_F16, {20000}, 1, 1, 0, 0.0f, 0, 0, 0.0f},
    {"mma_decode_loop_gqa4_2_d64_k2v2_g16_nr16", 2, 8, 2, 64, 2, 2, 16, 16,
     CLKV_F16, CLKV_F16, CLKV_F16, CLKV_BF16, {47, 16}, 3, 1, 0, 0.0f, 0, 1, 0.0f},
    {"mma_decode_loop_gqa4_1_d64_k4v4_g64_nr64", 1, 4, 1, 64, 4, 4, 64, 64,
     CLKV_BF16, CLKV_F16, CLKV_BF16, CLKV_F16, {62}, 3, 1, 0, 0.0f, 0, 1, 0.0f},
    /* (cases are appended: a case's random stream is its index) */
    {"mma_small_gqa8_2_d128_k4v4_g16", 1, 8, 2, 128, 4, 4, 16, 128,
     CLKV_BF16, CLKV_F16, CLKV_BF16, CLKV_BF16, {900}, 1, 1, 0, 0.0f, 0, 0, 0.0f},
    /* key operand scaling into the f16 range: tiny keys with a large scale, huge keys
     * with a tiny scale (logits of ordinary size either way) */
    {"mma_tiny_keys_gqa8_2_d128_k2v2_g32", 1, 8, 2, 128, 2, 2, 32, 128,
     CLKV_BF16, CLKV_F16, CLKV_BF16, CLKV_F16, {700}, 1, 1, 0, 400.0f, 0, 0, 1e-3f},
    {"mma_huge_keys_gqa4_1_d64_k4v2_g64", 2, 4, 1, 64, 4, 2, 64, 64,
     CLKV_F16, CLKV_F32, CLKV_F16, CLKV_BF16, {500, 260}, 1, 1, 0, 2e-4f, 0, 0, 3e3f},
    /* n_r 512: up to 32 residual tiles over the tensor-core kernel's 4 residual splits
     * (8 tiles each); one sequence all residual until its first flush */
    {"mma_big_residual_gqa8_2_d128_k2v2_g128_nr512", 2, 8, 2, 128, 2, 2, 128, 512,
     CLKV_BF16, CLKV_F16, CLKV_BF16, CLKV_BF16, {1400, 511}, 2, 1, 0, 0.0f, 0, 0, 0.0f},
    /* heads of a tensor-core work-group left empty: one query head per KV head (3 of 4
     * empty), and 5 per KV head (a second group with one head) */
    {"mma_mha4_4_d128_k2v2_g32", 2, 4, 4, 128, 2, 2, 32, 128,
     CLKV_BF16, CLKV_F16, CLKV_BF16, CLKV_BF16, {700, 129}, 1, 1, 0, 0.0f, 0, 0, 0.0f},
    {"mma_gqa10_2_d64_k4v4_g64_nhg2", 1, 10, 2, 64, 4, 4, 64, 64,
     CLKV_F16, CLKV_F16, CLKV_F16, CLKV_F16, {900}, 2, 1, 0, 0.0f, 0, 0, 0.0f},
    /* D 256 on the tensor cores: 8 channels a lane in the key operand, 16 value m-tiles */
    {"mma_gqa8_2_d256_k2v2_g128", 2, 8, 2, 256, 2, 2, 128, 128,
     CLKV_BF16, CLKV_F16, CLKV_BF16, CLKV_BF16, {1100, 300}, 2, 1, 0, 0.0f, 0, 0, 0.0f},
    {"mma_gqa4_1_d256_k4v2_g32_mixed", 3, 4, 1, 256, 4, 2, 32, 64,
     CLKV_F16, CLKV_F32, CLKV_F16, CLKV_F16, {700, 0, 129}, 1, 1, 0, 0.0f, 0, 0, 0.0f},
    {"mma_gqa8_2_d256_k4v4_g64_tiny_keys", 1, 8, 2, 256, 4, 4, 64, 128,
     CLKV_BF16, CLKV_F16, CLKV_BF16, CLKV_F16, {900}, 1, 1, 0, 400.0f, 0, 0, 1e-3f},
};
/* clang-format on */

/* Device state of the cache as a ref_qcache. */
static void read_state(clkv_quant_cache *cache, ref_qcache *s) {
    clkv_quant_cache_view v;
    TU_CHECK_OK(g_ctx, clkv_quant_cache_view_get(cache, &v));
    const clkv_quant_cache_create_args *c = &v.config;
    if (ref_qcache_alloc(s, c->batch, c->kv_heads, c->head_dim, v.quant_capacity, c->residual,
                         c->k_bits, c->v_bits, c->group))
        TU_FAIL("ref_qcache_alloc");
    const clkv_tensor *raw[4] = {&v.k_codes, &v.v_codes, &v.n_quant, &v.n_res};
    void *raw_out[4] = {s->k_codes, s->v_codes, s->n_quant, s->n_res};
    for (int i = 0; i < 4; i++)
        if (tu_tensor_numel(raw[i]))
            tu_buffer_read(g_ctx, raw[i]->buf, (size_t)raw[i]->offset, raw_out[i],
                           (size_t)tu_tensor_numel(raw[i]) * 4);
    const clkv_tensor *fl[6] = {&v.k_scale, &v.k_min, &v.v_scale, &v.v_min, &v.k_res, &v.v_res};
    float *fl_out[6] = {s->k_scale, s->k_min, s->v_scale, s->v_min, s->k_res, s->v_res};
    for (int i = 0; i < 6; i++)
        if (tu_tensor_numel(fl[i]))
            tu_tensor_read(g_ctx, fl[i], fl_out[i]);
}

static void append_random(clkv_quant_cache *cache, tu_rng *r, int64_t B, int64_t H, int64_t D,
                          int64_t n, const int32_t *counts, float kmag) {
    const size_t nx = (size_t)(B * H * n * D);
    float *k = tu_malloc(nx * 4), *v = tu_malloc(nx * 4);
    for (size_t i = 0; i < nx; i++) {
        k[i] = (float)((0.3 + 0.01 * (double)(i % (size_t)D) + tu_rng_normal(r)) * kmag);
        v[i] = (float)tu_rng_normal(r);
    }
    clkv_quant_cache_append_args a = CLKV_QUANT_CACHE_APPEND_ARGS_INIT;
    a.k = tu_kv_tensor(g_ctx, k, CLKV_BF16, B, H, n, D, TU_HND);
    a.v = tu_kv_tensor(g_ctx, v, CLKV_BF16, B, H, n, D, TU_NHD);
    const int64_t dims[1] = {B};
    a.counts = tu_tensor_upload_i32(g_ctx, counts, 1, dims, 0, 0);
    TU_CHECK_OK(g_ctx, clkv_quant_cache_append(cache, &a, NULL));
    TU_CHECK_OK(g_ctx, clkv_context_finish(g_ctx));
    tu_release(a.k.buf);
    tu_release(a.v.buf);
    tu_release(a.counts.buf);
    free(k);
    free(v);
}

/* Attention over the cache's current device state against the reference; len_want[b]
 * is the expected token count of sequence b. `strided_q`: q is a view of the first Hq
 * heads of a [B, Hq + 1, D] tensor whose extra head holds huge values. */
static void check_attention(clkv_quant_cache *cache, const acase *c, tu_rng *rng,
                            const int32_t *len_want, int strided_q) {
    const int64_t B = c->B, Hq = c->Hq, Hkv = c->Hkv, D = c->D;
    ref_qcache st;
    read_state(cache, &st);
    int64_t L = 1;
    for (int64_t b = 0; b < B; b++)
        L = len_want[b] + 1 > L ? len_want[b] + 1 : L;
    float *kd = tu_malloc((size_t)(B * Hkv * L * D) * 4),
          *vd = tu_malloc((size_t)(B * Hkv * L * D) * 4);
    int32_t len[4];
    ref_qcache_dequant(&st, L, kd, vd, len);
    for (int64_t b = 0; b < B; b++)
        if (len[b] != len_want[b])
            TU_FAIL("sequence %lld holds %d tokens, expected %d", (long long)b, len[b],
                    len_want[b]);
    const size_t nq = (size_t)(B * Hq * D);
    const int64_t hq_alloc = strided_q ? Hq + 1 : Hq;
    float *q = tu_malloc((size_t)(B * hq_alloc * D) * 4), *qr = tu_malloc(nq * 4);
    tu_fill_normal(rng, q, (size_t)(B * hq_alloc * D), 0.0, 1.0);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < hq_alloc; h++)
            for (int64_t d = 0; d < D; d++) {
                float *x = &q[(b * hq_alloc + h) * D + d];
                if (h == Hq)
                    *x = 3.0e4f; /* never read */
                *x = tu_round_dtype(c->q_dt, *x);
                if (h < Hq)
                    qr[(b * Hq + h) * D + d] = *x;
            }
    const double scale = c->scale != 0.0f ? (double)c->scale : 1.0 / sqrt((double)D);
    double *ro = tu_malloc(nq * sizeof(double)), *rl = tu_malloc((size_t)(B * Hq) * sizeof(double));
    if (ref_attention_decode(B, Hq, Hkv, L, D, qr, kd, vd, len, scale, ro, rl))
        TU_FAIL("reference rejected the case");

    const int64_t qd[3] = {B, Hq, D}, qa[3] = {B, hq_alloc, D}, ld[2] = {B, Hq};
    clkv_attention_quant_decode_args a = CLKV_ATTENTION_QUANT_DECODE_ARGS_INIT;
    a.q = tu_tensor_upload(g_ctx, q, c->q_dt, 3, qa, 32, 0);
    a.q.dims[1] = Hq;
    a.o = tu_tensor_alloc(g_ctx, c->o_dt, 3, qd, 16, 64);
    if (c->want_lse)
        a.lse = tu_tensor_alloc(g_ctx, CLKV_F32, 2, ld, 8, 32);
    a.scale = c->scale;
    a.num_splits = c->num_splits;
    cl_event ev = NULL;
    TU_CHECK_OK(g_ctx, clkv_attention_quant_decode(cache, &a, &ev));
    if (!ev)
        TU_FAIL("no completion event");
    TU_CHECK_CL(clWaitForEvents(1, &ev));
    clReleaseEvent(ev);

    float *go = tu_malloc(nq * 4);
    tu_tensor_read(g_ctx, &a.o, go);
    tu_assert_written_exactly(g_ctx, &a.o, "o");
    tu_assert_close("o", go, ro, nq, tu_tol_for(c->o_dt), 3, qd);
    if (c->want_lse) {
        float *gl = tu_malloc((size_t)(B * Hq) * 4);
        tu_tensor_read(g_ctx, &a.lse, gl);
        tu_assert_written_exactly(g_ctx, &a.lse, "lse");
        tu_assert_lse("lse", gl, rl, (size_t)(B * Hq), TU_LSE_ATOL, 2, ld);
        free(gl);
    }
    tu_release(a.q.buf);
    tu_release(a.o.buf);
    tu_release(a.lse.buf);
    free(go), free(ro), free(rl), free(q), free(qr), free(kd), free(vd);
    ref_qcache_free(&st);
}

/* Prefill, decode steps, attention at the end (per_step: after the prefill and after
 * every step, a decode loop that crosses residual flushes). */
static void run_case(const acase *c, uint64_t stream) {
    tu_set_case("%s", c->name);
    const int64_t B = c->B, Hkv = c->Hkv, D = c->D;
    tu_rng rng;
    tu_rng_seed(&rng, tu_seed(DEFAULT_SEED), stream);
    int64_t maxp = 0;
    for (int64_t b = 0; b < B; b++)
        maxp = c->prefill[b] > maxp ? c->prefill[b] : maxp;
    clkv_quant_cache_create_args cfg = CLKV_QUANT_CACHE_CREATE_ARGS_INIT;
    cfg.batch = B, cfg.kv_heads = Hkv, cfg.head_dim = D;
    cfg.capacity = maxp + c->decode_steps + 5;
    cfg.k_bits = c->k_bits, cfg.v_bits = c->v_bits, cfg.group = c->group, cfg.residual = c->nr;
    cfg.res_dtype = c->res_dt, cfg.meta_dtype = c->meta_dt;
    clkv_quant_cache *cache;
    /* a case's own work-group size replaces an externally set CLKV_QUANT_WG for its
     * cache only (so the whole suite can also run at another default size) */
    char wg[16], prev[16] = "";
    const char *env = getenv("CLKV_QUANT_WG");
    if (env)
        snprintf(prev, sizeof prev, "%s", env);
    snprintf(wg, sizeof wg, "%d", c->wg);
    if (c->wg)
        setenv("CLKV_QUANT_WG", wg, 1);
    const clkv_status cst = clkv_quant_cache_create(g_ctx, &cfg, &cache);
    if (env)
        setenv("CLKV_QUANT_WG", prev, 1);
    else
        unsetenv("CLKV_QUANT_WG");
    TU_CHECK_OK(g_ctx, cst);
    int32_t len[4], step[4];
    for (int64_t b = 0; b < B; b++) {
        len[b] = c->prefill[b];
        step[b] = c->prefill[b] > 0;
    }
    if (maxp > 0)
        append_random(cache, &rng, B, Hkv, D, maxp, c->prefill, c->kmag != 0.0f ? c->kmag : 1.0f);
    if (c->per_step)
        check_attention(cache, c, &rng, len, 1);
    for (int s = 0; s < c->decode_steps; s++) {
        append_random(cache, &rng, B, Hkv, D, 1, step, c->kmag != 0.0f ? c->kmag : 1.0f);
        for (int64_t b = 0; b < B; b++)
            len[b] += step[b];
        if (c->per_step) {
            tu_set_case("%s: after decode step %d", c->name, s);
            check_attention(cache, c, &rng, len, s % 2);
        }
    }
    if (!c->per_step)
        check_attention(cache, c, &rng, len, 0);
    clkv_quant_cache_destroy(cache);
}

static void test_case(void **state) {
    const acase *c = (const acase *)*state;
    run_case(c, (uint64_t)(c - k_cases) + 1);
}

/* ------------------------------------------------------------------------------------ */
/* Bad inputs                                                                           */
/* ------------------------------------------------------------------------------------ */

static void test_validation(void **state) {
    (void)state;
    tu_set_case("attention_quant validation");
    clkv_quant_cache_create_args cfg = CLKV_QUANT_CACHE_CREATE_ARGS_INIT;
    cfg.batch = 2, cfg.kv_heads = 2, cfg.head_dim = 64, cfg.capacity = 64, cfg.residual = 32;
    clkv_quant_cache *cache;
    TU_CHECK_OK(g_ctx, clkv_quant_cache_create(g_ctx, &cfg, &cache));
    cl_mem qb = tu_buffer_create(g_ctx, 2 * 8 * 64 * 4),
           ob = tu_buffer_create(g_ctx, 2 * 8 * 64 * 4);
    cl_mem lb = tu_buffer_create(g_ctx, 2 * 8 * 4);
    clkv_attention_quant_decode_args ok = CLKV_ATTENTION_QUANT_DECODE_ARGS_INIT, a;
    ok.q = clkv_tensor_3d(qb, CLKV_F32, 2, 8, 64);
    ok.o = clkv_tensor_3d(ob, CLKV_F32, 2, 8, 64);
    ok.lse = clkv_tensor_2d(lb, CLKV_F32, 2, 8);
    {
        float zero = 0.0f;
        TU_CHECK_CL(clEnqueueFillBuffer(clkv_context_queue(g_ctx), qb, &zero, 4, 0, 2 * 8 * 64 * 4,
                                        0, NULL, NULL));
    }
    TU_CHECK_OK(g_ctx, clkv_attention_quant_decode(cache, &ok, NULL)); /* baseline */
    TU_CHECK_OK(g_ctx, clkv_context_finish(g_ctx));
    {
        float o[2 * 8 * 64], l[16];
        tu_buffer_read(g_ctx, ob, 0, o, sizeof o);
        tu_buffer_read(g_ctx, lb, 0, l, sizeof l);
        for (int i = 0; i < 2 * 8 * 64; i++)
            if (o[i] != 0.0f)
                TU_FAIL("empty cache: o[%d] = %g, expected 0", i, (double)o[i]);
        for (int i = 0; i < 16; i++)
            if (!(isinf(l[i]) && l[i] < 0))
                TU_FAIL("empty cache: lse[%d] = %g, expected -inf", i, (double)l[i]);
    }
#define BADQ(stmt, want, name)                                                                     \
    do {                                                                                           \
        a = ok;                                                                                    \
        stmt;                                                                                      \
        tu_buffer_poison(g_ctx, ob, 0, tu_buffer_size(ob));                                        \
        tu_buffer_poison(g_ctx, lb, 0, tu_buffer_size(lb));                                        \
        cl_event ev_ = NULL;                                                                       \
        const clkv_status st_ = clkv_attention_quant_decode(cache, &a, &ev_);                      \
        if (st_ != (want))                                                                         \
            TU_FAIL("%s: returned %s, expected %s (\"%s\")", #stmt, clkv_status_string(st_),       \
                    clkv_status_string(want), clkv_last_error(g_ctx));                             \
        if (!tu_msg_names(clkv_last_error(g_ctx), (name)))                                         \
            TU_FAIL("%s: message \"%s\" does not name %s", #stmt, clkv_last_error(g_ctx), (name)); \
        if (ev_)                                                                                   \
            TU_FAIL("%s: a rejected call returned an event", #stmt);                               \
        TU_CHECK_OK(g_ctx, clkv_context_finish(g_ctx));                                            \
        tu_assert_buffer_poison(g_ctx, ob, "o buffer");                                            \
        tu_assert_buffer_poison(g_ctx, lb, "lse buffer");                                          \
    } while (0)
    BADQ(a.q.buf = NULL, CLKV_ERR_ARG_NULL, "q");
    BADQ(a.o.buf = NULL, CLKV_ERR_ARG_NULL, "o");
    BADQ(a.q.dtype = CLKV_I32, CLKV_ERR_ARG_DTYPE, "q");
    BADQ(a.o.dtype = CLKV_U8, CLKV_ERR_ARG_DTYPE, "o");
    BADQ(a.lse.dtype = CLKV_F16, CLKV_ERR_ARG_DTYPE, "lse");
    BADQ(a.q.dims[0] = 1, CLKV_ERR_ARG_SHAPE, "q");
    BADQ((a.q.dims[2] = 32, a.q.strides[1] = 32), CLKV_ERR_ARG_SHAPE, "q");
    BADQ(a.o.dims[1] = 4, CLKV_ERR_ARG_SHAPE, "o");
    BADQ(a.lse.dims[1] = 4, CLKV_ERR_ARG_SHAPE, "lse");
    BADQ((a.q.dims[1] = 3, a.o.dims[1] = 3, a.lse.dims[1] = 3), CLKV_ERR_ARG_SHAPE, "q");
    BADQ(a.q.ndim = 4, CLKV_ERR_ARG_SHAPE, "q");
    BADQ(a.o.strides[2] = 3, CLKV_ERR_ARG_STRIDE, "o");
    BADQ(a.o.offset = 3, CLKV_ERR_ARG_ALIGNMENT, "o");
    BADQ(a.q.offset = 1 << 20, CLKV_ERR_ARG_BUFFER_SIZE, "q");
    BADQ(a.o.strides[0] = INT64_MAX / 2, CLKV_ERR_ARG_OVERFLOW, "o");
    BADQ(a.scale = INFINITY, CLKV_ERR_ARG_RANGE, "scale");
    BADQ(a.num_splits = -1, CLKV_ERR_ARG_RANGE, "num_splits");
#undef BADQ
    /* workspace query: NULL bytes rejected; the size reported covers the call */
    size_t ws = 0;
    clkv_status st = clkv_attention_quant_decode_workspace_size(cache, &ok, NULL);
    if (st != CLKV_ERR_ARG_NULL || !tu_msg_names(clkv_last_error(g_ctx), "bytes"))
        TU_FAIL("workspace_size NULL bytes: %s \"%s\"", clkv_status_string(st),
                clkv_last_error(g_ctx));
    a = ok, a.num_splits = -2;
    st = clkv_attention_quant_decode_workspace_size(cache, &a, &ws);
    if (st != CLKV_ERR_ARG_RANGE || !tu_msg_names(clkv_last_error(g_ctx), "num_splits"))
        TU_FAIL("workspace_size bad args: %s", clkv_status_string(st));
    a = ok, a.num_splits = 37;
    TU_CHECK_OK(g_ctx, clkv_attention_quant_decode_workspace_size(cache, &a, &ws));
    if (ws < (size_t)(2 * 8 * 64 * 4))
        TU_FAIL("workspace_size %zu is too small for even one split", ws);
    TU_CHECK_OK(g_ctx, clkv_context_reserve_workspace(g_ctx, ws));
    const size_t before = clkv_context_workspace_bytes(g_ctx);
    TU_CHECK_OK(g_ctx, clkv_attention_quant_decode(cache, &a, NULL));
    TU_CHECK_OK(g_ctx, clkv_context_finish(g_ctx));
    if (clkv_context_workspace_bytes(g_ctx) != before)
        TU_FAIL("the call grew the workspace beyond the reported size");
    st = clkv_attention_quant_decode(NULL, &ok, NULL);
    if (st != CLKV_ERR_ARG_NULL || !tu_msg_names(clkv_last_error(NULL), "cache"))
        TU_FAIL("NULL cache: %s \"%s\"", clkv_status_string(st), clkv_last_error(NULL));
    st = clkv_attention_quant_decode(cache, NULL, NULL);
    if (st != CLKV_ERR_ARG_NULL || !tu_msg_names(clkv_last_error(g_ctx), "args"))
        TU_FAIL("NULL args: %s \"%s\"", clkv_status_string(st), clkv_last_error(g_ctx));
    tu_release(qb);
    tu_release(ob);
    tu_release(lb);
    clkv_quant_cache_destroy(cache);
}

int main(void) {
    tu_suite s = {0};
    tu_suite_add(&s, "validation", test_validation, NULL);
    TU_SUITE_ADD_CASES(&s, k_cases, test_case);
    return tu_suite_run(&s, "test_attention_quant", &g_ctx, DEFAULT_SEED);
}
