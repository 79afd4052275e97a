/* LongFlow static cache (SPEC §2.3): clkv_longflow_cache_* and clkv_longflow_step on
 * the default device ($CLKV_DEVICE; PoCL CPU in CI) against the double-precision
 * step-by-step reference tests/ref/ref_longflow.c.
 *
 * Every scenario creates a cache, optionally loads a prompt (with or without kept-index
 * lists, with or without the last prompt query), then runs N steps with random q, k_new,
 * v_new and checks after EVERY step: o (SPEC §0.2 tolerance of its dtype), lse (1e-4
 * absolute), the victims the step returns, and on some steps every slot's score (1e-4
 * relative + 1e-6 of the largest score). At the end the whole cache state (K, V, slot
 * map, victims, next positions) must equal the reference's bit for bit.
 *
 * Victims: a kernel choice that differs from the reference's is accepted only when both
 * are candidates and their reference scores are within 1e-5 relative (SPEC §0.2), or both
 * are below 1e-30 (f32 exp2 underflows there: the kernel scores 0 and takes the lower
 * index, the reference still orders 1e-60 and 1e-80). The reference then continues from
 * the kernel's choice so the run stays comparable; the number of such ties is printed.
 *
 * Reproduce a failure with CLKV_TEST_SEED=<seed printed>.
 */
#include "util/test_util.h"
#include "ref/ref_longflow.h"

#include "clkv/longflow.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_SEED 0x10F70F702025ull

#define F32 CLKV_F32
#define F16 CLKV_F16
#define BF16 CLKV_BF16
#define PL CLKV_LONGFLOW_PER_LAYER
#define PH CLKV_LONGFLOW_PER_KV_HEAD

static clkv_context *g_ctx;

static int group_setup(void **state) {
    (void)state;
    return tu_group_setup((void **)&g_ctx);
}

static int group_teardown(void **state) {
    (void)state;
    return tu_group_teardown((void **)&g_ctx);
}

typedef enum load_mode {
    LOAD_NONE = 0, /* start from the empty cache */
    LOAD_PLAIN,    /* prompt tokens 0..n-1 into slots 0..n-1 */
    LOAD_INDICES,  /* kept-index lists (ascending, -1 padded) */
    LOAD_HOLES,    /* kept-index lists with -1 holes in the middle and bad entries */
} load_mode;

typedef enum data_mode {
    DATA_NORMAL = 0, /* N(0, 1) */
    DATA_HUGE,       /* exact f32 logits with |z| up to ~300 */
} data_mode;

typedef struct lcase {
    const char *name;
    int64_t B, Hq, Hkv, D, S;
    clkv_dtype kvdt, qdt, ndt, odt, pdt; /* cache, q, k_new/v_new, o, prompt */
    clkv_longflow_mode mode;
    int protect;
    load_mode load;
    int load_q; /* pass the last prompt query at load */
    tu_layout layout;
    int32_t lens[3]; /* prompt lengths */
    int64_t Lp;      /* prompt capacity */
    int steps;
    float scale;
    data_mode data;
    int nan_empty;      /* NaN written into the empty slots after load */
    const char *epl;    /* CLKV_LONGFLOW_EPL override (multi-lane layout), NULL: default */
    const char *wg;     /* CLKV_LONGFLOW_WG override */
    const char *splits; /* CLKV_LONGFLOW_SPLITS override (split-K on a 2-core CPU) */
} lcase;

/* clang-format off */
static const lcase g_cases[] = {
    /* the long runs: 2,000 steps, both modes */
    {"long_perlayer_bf16_d64_h4x2_b2_s64", 2, 4, 2, 64, 64, BF16, BF16, BF16, BF16, BF16, PL, 1,
     LOAD_PLAIN, 1, TU_HND, {40, 64, 0}, 80, 2000, 0.0f, DATA_NORMAL, 0, NULL, NULL, NULL},
    {"long_perhead_f16_d64_h4x2_b2_s64", 2, 4, 2, 64, 64, F16, F32, F16, F32, F32, PH, 1,
     LOAD_INDICES, 1, TU_NHD, {100, 30, 0}, 120, 2000, 0.0f, DATA_NORMAL, 0, NULL, NULL, "5"},
    /* dtypes x D x heads x batch x load variants (each a kernel variant of its own) */
    {"m1_f16_d128_h8x2_b3_indices_q", 3, 8, 2, 128, 100, F16, F16, F16, F16, BF16, PL, 2,
     LOAD_INDICES, 1, TU_NHD, {300, 1, 0}, 300, 40, 0.0f, DATA_NORMAL, 0, NULL, NULL, NULL},
    {"m2_bf16_d256_h16x2_G8_b2_perhead", 2, 16, 2, 256, 70, BF16, F32, BF16, F32, F16, PH, 1,
     LOAD_PLAIN, 1, TU_HND, {70, 5, 0}, 70, 30, 0.3f, DATA_NORMAL, 0, NULL, NULL, NULL},
    {"m3_f32_d256_h12x1_G12_b1_indices", 1, 12, 1, 256, 50, F32, BF16, F32, BF16, F32, PL, 3,
     LOAD_INDICES, 0, TU_HND, {200}, 200, 30, 0.0f, DATA_NORMAL, 0, NULL, NULL, "7"},
    {"m4_bf16_d128_h6x6_b3_perhead_holes_nan", 3, 6, 6, 128, 33, BF16, BF16, F32, BF16, BF16, PH,
     1, LOAD_HOLES, 0, TU_NHD, {33, 17, 1}, 40, 40, 0.0f, DATA_NORMAL, 1, NULL, NULL, NULL},
    {"m5_f32_d128_h8x2_b2_perhead_holes_q_nan", 2, 8, 2, 128, 24, F32, F32, F32, F32, F32, PH, 2,
     LOAD_HOLES, 1, TU_HND, {60, 24, 0}, 60, 30, 0.0f, DATA_NORMAL, 1, NULL, NULL, "4"},
    /* kernel variants of the long runs with other shapes (no new programs) */
    {"m6_bf16_d64_h4x2_b3_s37_noload", 3, 4, 2, 64, 37, BF16, BF16, BF16, BF16, BF16, PL, 1,
     LOAD_NONE, 0, TU_HND, {0, 0, 0}, 1, 45, 0.0f, DATA_NORMAL, 0, NULL, NULL, NULL},
    {"m7_bf16_d64_h4x2_b1_s16_len0_protect3", 1, 4, 2, 64, 16, BF16, BF16, BF16, BF16, BF16, PL,
     3, LOAD_PLAIN, 1, TU_NHD, {0}, 8, 40, 0.0f, DATA_NORMAL, 0, NULL, NULL, NULL},
    {"m8_f16_d64_h4x2_b3_perhead_len1_full_noq", 3, 4, 2, 64, 20, F16, F32, F16, F32, F32, PH, 0,
     LOAD_INDICES, 0, TU_HND, {1, 50, 20}, 50, 30, 0.0f, DATA_NORMAL, 0, NULL, NULL, NULL},
    /* numerics: logits of magnitude ~200 (the authors' exp(z) overflows at ~88) */
    {"huge_logits_bf16_d64_h4x2_b2", 2, 4, 2, 64, 48, BF16, BF16, BF16, BF16, BF16, PL, 1,
     LOAD_PLAIN, 1, TU_HND, {48, 20, 0}, 48, 60, 0.125f, DATA_HUGE, 0, NULL, NULL, "6"},
    {"huge_logits_f16_d64_h4x2_perhead_outf32", 1, 4, 2, 64, 32, F16, F32, F16, F32, F32, PH, 1,
     LOAD_INDICES, 1, TU_HND, {32}, 32, 40, 0.125f, DATA_HUGE, 0, NULL, NULL, NULL},
    /* the multi-lane (warp) layout of GPUs, emulated through local memory on CPUs */
    {"lanes_bf16_d64_epl16_h2x2_b2_perhead", 2, 2, 2, 64, 40, BF16, BF16, BF16, BF16, BF16, PH, 1,
     LOAD_INDICES, 1, TU_HND, {40, 3, 0}, 40, 12, 0.0f, DATA_NORMAL, 0, "16", "32", "3"},
};
/* clang-format on */

#define N_CASES (sizeof g_cases / sizeof g_cases[0])

/* q [B, Hq, D], k/v [.., D] rows with the case's data. */
static void fill(const lcase *c, tu_rng *r, float *x, size_t n, int is_q) {
    if (c->data == DATA_HUGE) {
        /* q = +-64, k in {+-1, +-2}: every product and partial sum is exact in f32, and
         * scale = 1/8 at D = 64 keeps z = scale * <q, k> exact: |z| up to ~300. */
        for (size_t i = 0; i < n; i++) {
            uint64_t u = tu_rng_u64(r);
            float mag = is_q ? 64.0f : ((u >> 62) & 1 ? 2.0f : 1.0f);
            x[i] = (u >> 63) ? -mag : mag;
        }
    } else {
        tu_fill_normal(r, x, n, 0.0, 1.0);
    }
}

/* Round to `first` (the dtype a tensor is uploaded in), then to the cache dtype. */
static void round2(clkv_dtype first, clkv_dtype cache, float *x, size_t n) {
    tu_round_array(first, x, n);
    tu_round_array(cache, x, n);
}

/* Kept-index lists [B, Hm, K] for the case (K = S). */
static int32_t *make_indices(const lcase *c, tu_rng *r, int64_t Hm, const int32_t *n) {
    const int64_t S = c->S;
    int32_t *idx = (int32_t *)tu_malloc((size_t)(c->B * Hm * S) * sizeof(int32_t));
    for (int64_t b = 0; b < c->B; b++) {
        for (int64_t u = 0; u < Hm; u++) {
            int32_t *row = idx + (b * Hm + u) * S;
            /* keep a random ascending subset of min(n, S - 2 - u) tokens (a map with empty
             * slots) or, for the first map of sequence 0, a full map when n >= S */
            int64_t want = n[b] < S - 2 - u ? n[b] : S - 2 - u;
            if (b == 0 && u == 0 && n[b] >= S)
                want = S;
            if (want < 0)
                want = 0;
            int64_t kept = 0;
            for (int64_t t = 0; t < n[b] && kept < want; t++) {
                /* select t with probability (want - kept) / (n - t) */
                if (tu_rng_uniform(r) * (double)(n[b] - t) < (double)(want - kept))
                    row[kept++] = (int32_t)t;
            }
            for (int64_t i = kept; i < S; i++)
                row[i] = -1;
            if (c->load == LOAD_HOLES && kept >= 3) {
                /* holes: a -1 in the middle, an entry >= n and one < -1 (both mean empty) */
                row[1] = -1;
                row[kept - 1] = n[b] + 5;
                if (kept >= 4)
                    row[2] = -7;
            }
        }
    }
    return idx;
}

static void read_i32(clkv_tensor t, int32_t *out, size_t n) {
    tu_buffer_read(g_ctx, t.buf, (size_t)t.offset, out, n * sizeof(int32_t));
}

/* Compare the device cache state with the reference, exactly. */
static void check_state(clkv_longflow_cache *cache, const ref_lf_cache *rc, int check_victims_too,
                        const char *when) {
    const size_t nkv = (size_t)(rc->B * rc->Hkv * rc->S * rc->D);
    const size_t nmap = (size_t)(rc->B * rc->Hm * rc->S), nv = (size_t)(rc->B * rc->Hm);
    float *k = (float *)tu_malloc(nkv * sizeof(float)),
          *v = (float *)tu_malloc(nkv * sizeof(float));
    int32_t *pos = (int32_t *)tu_malloc(nmap * sizeof(int32_t));
    int32_t *vic = (int32_t *)tu_malloc(nv * sizeof(int32_t));
    int32_t np[3];
    clkv_tensor tk = clkv_longflow_cache_k(cache), tv = clkv_longflow_cache_v(cache);
    tu_tensor_read(g_ctx, &tk, k);
    tu_tensor_read(g_ctx, &tv, v);
    read_i32(clkv_longflow_cache_positions(cache), pos, nmap);
    read_i32(clkv_longflow_cache_victims(cache), vic, nv);
    read_i32(clkv_longflow_cache_next_positions(cache), np, (size_t)rc->B);
    for (size_t i = 0; i < nmap; i++)
        if (pos[i] != rc->pos[i])
            TU_FAIL("%s: positions[%zu] = %d, reference %d", when, i, pos[i], rc->pos[i]);
    for (size_t i = 0; i < nv && check_victims_too; i++)
        if (vic[i] != rc->victim[i])
            TU_FAIL("%s: victims[%zu] = %d, reference %d", when, i, vic[i], rc->victim[i]);
    for (int64_t b = 0; b < rc->B; b++)
        if (np[b] != rc->next_pos[b])
            TU_FAIL("%s: next_positions[%d] = %d, reference %d", when, (int)b, np[b],
                    rc->next_pos[b]);
    for (size_t i = 0; i < nkv; i++) {
        const int64_t slot = (int64_t)(i / (size_t)rc->D) % rc->S;
        const int64_t kh = (int64_t)(i / (size_t)(rc->D * rc->S)) % rc->Hkv;
        const int64_t b = (int64_t)(i / (size_t)(rc->D * rc->S * rc->Hkv));
        const int64_t u = rc->per_head ? kh : 0;
        if (rc->pos[(b * rc->Hm + u) * rc->S + slot] < 0)
            continue; /* empty slots may hold anything (the NaN cases write NaN there) */
        if (tu_f32_bits(k[i]) != tu_f32_bits(rc->k[i]) ||
            tu_f32_bits(v[i]) != tu_f32_bits(rc->v[i]))
            TU_FAIL("%s: cache K/V element %zu = (%g, %g), reference (%g, %g)", when, i,
                    (double)k[i], (double)v[i], (double)rc->k[i], (double)rc->v[i]);
    }
    free(k);
    free(v);
    free(pos);
    free(vic);
}

/* Check the step's victims against the reference's choice (see the file comment);
 * on an accepted tie the reference continues from the kernel's choice. */
static int check_victims(ref_lf_cache *rc, const int32_t *got, const double *scores, int step) {
    int ties = 0;
    for (int64_t b = 0; b < rc->B; b++) {
        for (int64_t u = 0; u < rc->Hm; u++) {
            const int64_t mu = b * rc->Hm + u;
            const int32_t want = rc->victim[mu], kv = got[mu];
            /* the position just written sits at the slot of this step's write */
            const int64_t newest = rc->next_pos[b] - 1;
            if (kv == want)
                continue;
            if (kv < 0 || kv >= rc->S || rc->pos[mu * rc->S + want] < 0 ||
                !ref_lf_candidate(rc, b, u, kv, newest) || rc->pos[mu * rc->S + kv] < 0)
                TU_FAIL("step %d: victim[%d][%d] = %d, reference %d (not an allowed tie)", step,
                        (int)b, (int)u, kv, want);
            const double sk = scores[mu * rc->S + kv], sr = scores[mu * rc->S + want];
            const double big = fabs(sk) > fabs(sr) ? fabs(sk) : fabs(sr);
            if (!(fabs(sk - sr) <= 1e-5 * big || (sk <= 1e-30 && sr <= 1e-30)))
                TU_FAIL("step %d: victim[%d][%d] = %d (score %.9g), reference %d (score %.9g)",
                        step, (int)b, (int)u, kv, sk, want, sr);
            rc->victim[mu] = kv;
            ties++;
        }
    }
    return ties;
}

static void set_env(const char *name, const char *value) {
    if (value)
        setenv(name, value, 1);
    else
        unsetenv(name);
}

static void run_case(void **state) {
    const lcase *c = (const lcase *)*state;
    const size_t cidx = (size_t)(c - g_cases);
    const uint64_t seed = tu_seed(DEFAULT_SEED);
    const int64_t B = c->B, Hq = c->Hq, Hkv = c->Hkv, D = c->D, S = c->S, Lp = c->Lp;
    const int64_t Hm = c->mode == PH ? Hkv : 1;
    const double scale = c->scale != 0.0f ? (double)c->scale : 1.0 / sqrt((double)D);
    const size_t nq = (size_t)(B * Hq * D), nn = (size_t)(B * Hkv * D);
    const size_t nmap = (size_t)(B * Hm * S);
    tu_rng rng;
    ref_lf_cache rc;
    clkv_longflow_cache *cache = NULL;
    int32_t n[3] = {0, 0, 0};
    double t0 = tu_now();
    int ties = 0;

    tu_set_case("%s (B=%" PRId64 " Hq=%" PRId64 " Hkv=%" PRId64 " D=%" PRId64 " S=%" PRId64
                " cache=%s q=%s new=%s o=%s prompt=%s %s mode=%d protect=%d load=%d q@load=%d "
                "steps=%d)",
                c->name, B, Hq, Hkv, D, S, clkv_dtype_name(c->kvdt), clkv_dtype_name(c->qdt),
                clkv_dtype_name(c->ndt), clkv_dtype_name(c->odt), clkv_dtype_name(c->pdt),
                tu_layout_name(c->layout), (int)c->mode, c->protect, (int)c->load, c->load_q,
                c->steps);
    tu_rng_seed(&rng, seed, (uint64_t)cidx + 1);
    /* a plain load (no indices) takes at most S prompt tokens: max_length = min(Lp, S) */
    const int64_t max_len = c->load == LOAD_PLAIN && Lp > S ? S : Lp;
    for (int64_t b = 0; b < B; b++)
        n[b] = c->lens[b] < (int32_t)max_len ? c->lens[b] : (int32_t)max_len;

    set_env("CLKV_LONGFLOW_EPL", c->epl);
    set_env("CLKV_LONGFLOW_WG", c->wg);
    set_env("CLKV_LONGFLOW_SPLITS", c->splits);
    clkv_longflow_cache_create_args ca = CLKV_LONGFLOW_CACHE_CREATE_ARGS_INIT;
    ca.batch = B;
    ca.q_heads = Hq;
    ca.kv_heads = Hkv;
    ca.head_dim = D;
    ca.slots = S;
    ca.dtype = c->kvdt;
    ca.mode = c->mode;
    ca.protect = c->protect;
    clkv_status cst = clkv_longflow_cache_create(g_ctx, &ca, &cache);
    set_env("CLKV_LONGFLOW_EPL", NULL);
    set_env("CLKV_LONGFLOW_WG", NULL);
    set_env("CLKV_LONGFLOW_SPLITS", NULL);
    TU_CHECK_OK(g_ctx, cst);
    assert_int_equal(ref_lf_init(&rc, B, Hq, Hkv, D, S, c->mode == PH, c->protect), 0);

    if (c->load != LOAD_NONE) {
        const size_t np = (size_t)(B * Hkv * Lp * D);
        float *pk = (float *)tu_malloc(np * sizeof(float)),
              *pv = (float *)tu_malloc(np * sizeof(float));
        float *pq = (float *)tu_malloc(nq * sizeof(float));
        int32_t *idx = NULL;
        const int64_t bdims[1] = {B}, qdims[3] = {B, Hq, D};
        fill(c, &rng, pk, np, 0);
        tu_fill_normal(&rng, pv, np, 0.0, 1.0);
        fill(c, &rng, pq, nq, 1);
        tu_round_array(c->pdt, pk, np);
        tu_round_array(c->pdt, pv, np);
        tu_round_array(c->qdt, pq, nq);
        clkv_longflow_load_args la = CLKV_LONGFLOW_LOAD_ARGS_INIT;
        la.k = tu_kv_tensor_offset(g_ctx, pk, c->pdt, B, Hkv, Lp, D, c->layout, 64);
        la.v = tu_kv_tensor(g_ctx, pv, c->pdt, B, Hkv, Lp, D, c->layout);
        la.lengths = tu_tensor_upload_i32(g_ctx, c->lens, 1, bdims, 4, 0);
        la.max_length = max_len;
        la.scale = c->scale;
        if (c->load_q)
            la.q = tu_tensor_upload(g_ctx, pq, c->qdt, 3, qdims, 0, 0);
        if (c->load == LOAD_INDICES || c->load == LOAD_HOLES) {
            const int64_t idims[3] = {B, Hm, S};
            idx = make_indices(c, &rng, Hm, n);
            la.indices = tu_tensor_upload_i32(g_ctx, idx, 3, idims, 8, 0);
        }
        cl_event ev = NULL;
        TU_CHECK_OK(g_ctx, clkv_longflow_cache_load(cache, &la, &ev));
        assert_non_null(ev);
        TU_CHECK_CL(clWaitForEvents(1, &ev));
        clReleaseEvent(ev);
        tu_round_array(c->kvdt, pk, np);
        tu_round_array(c->kvdt, pv, np);
        double *lsc = (double *)tu_malloc(nmap * sizeof(double));
        int32_t lvic[3 * 8];
        assert_int_equal(ref_lf_load(&rc, pk, pv, Lp, n, idx, S, c->load_q ? pq : NULL, scale, lsc),
                         0);
        check_state(cache, &rc, 0, "after load");
        read_i32(clkv_longflow_cache_victims(cache), lvic, (size_t)(B * Hm));
        ties += check_victims(&rc, lvic, lsc, -1);
        free(lsc);
        tu_release(la.k.buf);
        tu_release(la.v.buf);
        tu_release(la.lengths.buf);
        tu_release(la.q.buf);
        tu_release(la.indices.buf);
        free(pk);
        free(pv);
        free(pq);
        free(idx);
    }
    if (c->nan_empty) {
        /* empty slots hold NaN: they must take no part in attention */
        int32_t *pos = (int32_t *)tu_malloc(nmap * sizeof(int32_t));
        const size_t es = tu_dtype_size(c->kvdt);
        uint8_t *nanrow = (uint8_t *)tu_malloc((size_t)D * es);
        for (int64_t e = 0; e < D; e++)
            tu_store(c->kvdt, nanrow, (size_t)e, NAN);
        read_i32(clkv_longflow_cache_positions(cache), pos, nmap);
        for (int64_t b = 0; b < B; b++)
            for (int64_t kh = 0; kh < Hkv; kh++)
                for (int64_t i = 0; i < S; i++)
                    if (pos[(b * Hm + (Hm > 1 ? kh : 0)) * S + i] < 0) {
                        const size_t off = (size_t)(((b * Hkv + kh) * S + i) * D) * es;
                        tu_buffer_write(g_ctx, clkv_longflow_cache_k(cache).buf, off, nanrow,
                                        (size_t)D * es);
                        tu_buffer_write(g_ctx, clkv_longflow_cache_v(cache).buf, off, nanrow,
                                        (size_t)D * es);
                    }
        free(pos);
        free(nanrow);
    }

    /* step buffers, reused */
    const int64_t qdims[3] = {B, Hq, D}, ndims[3] = {B, Hkv, D}, ldims[2] = {B, Hq},
                  sdims[3] = {B, Hm, S}, vdims[2] = {B, Hm};
    float *q = (float *)tu_malloc(nq * sizeof(float));
    float *kn = (float *)tu_malloc(nn * sizeof(float)),
          *vn = (float *)tu_malloc(nn * sizeof(float));
    float *o_got = (float *)tu_malloc(nq * sizeof(float));
    float *lse_got = (float *)tu_malloc((size_t)(B * Hq) * sizeof(float));
    float *sc_got = (float *)tu_malloc(nmap * sizeof(float));
    double *o_ref = (double *)tu_malloc(nq * sizeof(double));
    double *lse_ref = (double *)tu_malloc((size_t)(B * Hq) * sizeof(double));
    double *sc_ref = (double *)tu_malloc(nmap * sizeof(double));
    double *spread = (double *)tu_malloc(nq * sizeof(double));
    double *dz = (double *)tu_malloc((size_t)(B * Hq) * sizeof(double));
    int32_t vic[3 * 8];
    clkv_longflow_step_args sa = CLKV_LONGFLOW_STEP_ARGS_INIT;
    sa.q = tu_tensor_alloc(g_ctx, c->qdt, 3, qdims, 0, 0);
    sa.k_new = tu_tensor_alloc(g_ctx, c->ndt, 3, ndims, 0, 0);
    sa.v_new = tu_tensor_alloc(g_ctx, c->ndt, 3, ndims, 0, 0);
    sa.o = tu_tensor_alloc(g_ctx, c->odt, 3, qdims, 16, 32);
    sa.lse = tu_tensor_alloc(g_ctx, F32, 2, ldims, 8, 16);
    sa.victims = tu_tensor_alloc(g_ctx, CLKV_I32, 2, vdims, 4, 16);
    clkv_tensor scores = tu_tensor_alloc(g_ctx, F32, 3, sdims, 4, 16);
    sa.scale = c->scale;
    const tu_tol tol = tu_tol_for(c->odt);
    assert_true(B * Hm <= 3 * 8);

    for (int st = 0; st < c->steps; st++) {
        const int with_scores = st < 3 || st % 97 == 0 || st == c->steps - 1;
        char what[96];
        fill(c, &rng, q, nq, 1);
        fill(c, &rng, kn, nn, 0);
        tu_fill_normal(&rng, vn, nn, 0.0, 1.0);
        tu_round_array(c->qdt, q, nq);
        {
            void *pq = tu_pack(c->qdt, q, nq), *pk = tu_pack(c->ndt, kn, nn),
                 *pv = tu_pack(c->ndt, vn, nn);
            tu_buffer_write(g_ctx, sa.q.buf, 0, pq, nq * tu_dtype_size(c->qdt));
            tu_buffer_write(g_ctx, sa.k_new.buf, 0, pk, nn * tu_dtype_size(c->ndt));
            tu_buffer_write(g_ctx, sa.v_new.buf, 0, pv, nn * tu_dtype_size(c->ndt));
            free(pq);
            free(pk);
            free(pv);
        }
        round2(c->ndt, c->kvdt, kn, nn);
        round2(c->ndt, c->kvdt, vn, nn);
        sa.scores = with_scores ? scores : clkv_tensor_none();
        TU_CHECK_OK(g_ctx, clkv_longflow_step(cache, &sa, NULL));
        assert_int_equal(ref_lf_step_ex(&rc, q, kn, vn, scale, o_ref, lse_ref, sc_ref, spread, dz),
                         0);
        tu_tensor_read(g_ctx, &sa.o, o_got);
        tu_tensor_read(g_ctx, &sa.lse, lse_got);
        read_i32(sa.victims, vic, (size_t)(B * Hm));
        snprintf(what, sizeof what, "o (step %d)", st);
        if (c->data == DATA_HUGE) {
            /* |z| ~ 200: f32 logits are inexact; allow 2 * dz * spread (ref_longflow.h) */
            for (size_t i = 0; i < nq; i++)
                spread[i] *= 2.0 * dz[i / (size_t)D];
            tu_assert_close_ex(what, o_got, o_ref, nq, tol, spread, 3, qdims);
        } else {
            tu_assert_close(what, o_got, o_ref, nq, tol, 3, qdims);
        }
        snprintf(what, sizeof what, "lse (step %d)", st);
        tu_assert_lse(what, lse_got, lse_ref, (size_t)(B * Hq), TU_LSE_ATOL, 2, ldims);
        if (with_scores) {
            double mx = 0.0;
            for (size_t i = 0; i < nmap; i++)
                if (isfinite(sc_ref[i]) && sc_ref[i] > mx)
                    mx = sc_ref[i];
            tu_tensor_read(g_ctx, &scores, sc_got);
            snprintf(what, sizeof what, "scores (step %d)", st);
            tu_assert_close(what, sc_got, sc_ref, nmap, ((tu_tol){1e-4, 1e-6 * mx}), 3, sdims);
        }
        ties += check_victims(&rc, vic, sc_ref, st);
    }
    tu_assert_written_exactly(g_ctx, &sa.o, "o");
    tu_assert_written_exactly(g_ctx, &sa.lse, "lse");
    tu_assert_written_exactly(g_ctx, &sa.victims, "victims");
    check_state(cache, &rc, 1, "after the steps");
    printf("[ timing   ] %s: %d steps in %.2f s, %d victim ties accepted\n", c->name, c->steps,
           tu_now() - t0, ties);

    tu_release(sa.q.buf);
    tu_release(sa.k_new.buf);
    tu_release(sa.v_new.buf);
    tu_release(sa.o.buf);
    tu_release(sa.lse.buf);
    tu_release(sa.victims.buf);
    tu_release(scores.buf);
    free(q);
    free(kn);
    free(vn);
    free(o_got);
    free(lse_got);
    free(sc_got);
    free(o_ref);
    free(lse_ref);
    free(sc_ref);
    free(spread);
    free(dz);
    ref_lf_free(&rc);
    clkv_longflow_cache_destroy(cache);
}

int main(void) {
    struct CMUnitTest tests[64];
    size_t nt = 0;
    printf("[ seed     ] 0x%016" PRIx64 " (set CLKV_TEST_SEED to change)\n", tu_seed(DEFAULT_SEED));
    memset(tests, 0, sizeof tests);
    for (size_t i = 0; i < N_CASES; i++) {
        tests[nt].name = g_cases[i].name;
        tests[nt].test_func = run_case;
        tests[nt].initial_state = (void *)&g_cases[i];
        nt++;
    }
    return _cmocka_run_group_tests("longflow", tests, nt, group_setup, group_teardown);
}
