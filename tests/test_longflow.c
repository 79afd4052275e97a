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
 * Also: bad inputs of every public function (status code, the message names the
 * argument, nothing written), the fill order of empty slots and the protection of the
 * newest token checked explicitly, and a load from clkv_select_topk's index lists. The
 * GPU layouts (several lanes per row, staged K/V tiles) run on CPUs through
 * CLKV_LONGFLOW_EPL / _WG / _CPASYNC overrides, split-K through CLKV_LONGFLOW_SPLITS, the
 * finish kernel's GPU score geometries (one lane per slot, more lanes than heads) through
 * _SCORE_LANES / _SCORE_ROUNDS. An override given to the whole run (e.g.
 * CLKV_LONGFLOW_CPASYNC=0) applies to every case that sets none.
 *
 * On NVIDIA (16-bit cache, q of the cache dtype, D 64 / 128) the one-kernel step runs the
 * cases with G <= 8 in its keyrows form and the G 20 / 80 cases in its 16-row form
 * (CLKV_LONGFLOW_KEYROWS=0 runs every such case in the latter).
 *
 * Reproduce a failure with CLKV_TEST_SEED=<seed printed>.
 */
#include "util/test_util.h"
#include "ref/ref_longflow.h"

#include "clkv/longflow.h"
#include "clkv/select.h"

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
    int nan_empty;       /* NaN written into the empty slots after load */
    const char *epl;     /* CLKV_LONGFLOW_EPL override (multi-lane layout), NULL: default */
    const char *wg;      /* CLKV_LONGFLOW_WG override */
    const char *splits;  /* CLKV_LONGFLOW_SPLITS override (split-K on a 2-core CPU) */
    const char *cpasync; /* CLKV_LONGFLOW_CPASYNC: staged K/V tiles (plain copies on CPUs) */
    const char *lanes;   /* CLKV_LONGFLOW_SCORE_LANES: finish lanes per slot (GPU: 1..8) */
    const char *rounds;  /* CLKV_LONGFLOW_SCORE_ROUNDS: finish slot rounds per work-group
                            (NVIDIA one-kernel step: score chunks of rounds x its
                            work-group size slots, 128 by default) */
    const char *fused;   /* CLKV_LONGFLOW_FUSED: "0" keeps the two-kernel step on NVIDIA */
    const char *scorers; /* CLKV_LONGFLOW_SCORE_WGS: scorer work-groups of the one-kernel step */
} lcase;

/* clang-format off */
static const lcase g_cases[] = {
    /* the long runs: 2,000 steps, both modes */
    {"long_perlayer_bf16_d64_h4x2_b2_s64", 2, 4, 2, 64, 64, BF16, BF16, BF16, BF16, BF16, PL, 1,
     LOAD_PLAIN, 1, TU_HND, {40, 64, 0}, 80, 2000, 0.0f, DATA_NORMAL, 0, NULL, NULL, NULL, NULL, "1", "1", NULL, NULL},
    {"long_perhead_f16_d64_h4x2_b2_s64", 2, 4, 2, 64, 64, F16, F16, F16, F32, F32, PH, 1,
     LOAD_INDICES, 1, TU_NHD, {100, 30, 0}, 120, 2000, 0.0f, DATA_NORMAL, 0, NULL, NULL, "5", NULL, "8", "1", NULL, NULL},
    /* dtypes x D x heads x batch x load variants (each a kernel variant of its own) */
    {"m1_f16_d128_h8x2_b3_indices_q", 3, 8, 2, 128, 100, F16, F16, F16, F16, BF16, PL, 2,
     LOAD_INDICES, 1, TU_NHD, {300, 1, 0}, 300, 40, 0.0f, DATA_NORMAL, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL},
    {"m2_bf16_d256_h16x2_G8_b2_perhead", 2, 16, 2, 256, 70, BF16, F32, BF16, F32, F16, PH, 1,
     LOAD_PLAIN, 1, TU_HND, {70, 5, 0}, 70, 30, 0.3f, DATA_NORMAL, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL},
    {"m3_f32_d256_h12x1_G12_b1_indices", 1, 12, 1, 256, 50, F32, BF16, F32, BF16, F32, PL, 3,
     LOAD_INDICES, 0, TU_HND, {200}, 200, 30, 0.0f, DATA_NORMAL, 0, NULL, NULL, "7", NULL, NULL, NULL, NULL, NULL},
    {"m4_bf16_d128_h6x6_b3_perhead_holes_nan", 3, 6, 6, 128, 33, BF16, BF16, F32, BF16, BF16, PH,
     1, LOAD_HOLES, 0, TU_NHD, {33, 17, 1}, 40, 40, 0.0f, DATA_NORMAL, 1, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL},
    {"m5_f32_d128_h8x2_b2_perhead_holes_q_nan", 2, 8, 2, 128, 24, F32, F32, F32, F32, F32, PH, 2,
     LOAD_HOLES, 1, TU_HND, {60, 24, 0}, 60, 30, 0.0f, DATA_NORMAL, 1, NULL, NULL, "4", NULL, NULL, NULL, NULL, NULL},
    /* kernel variants of the long runs with other shapes (no new programs) */
    {"m6_bf16_d64_h4x2_b3_s37_noload", 3, 4, 2, 64, 37, BF16, BF16, BF16, BF16, BF16, PL, 1,
     LOAD_NONE, 0, TU_HND, {0, 0, 0}, 1, 45, 0.0f, DATA_NORMAL, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL},
    {"m7_bf16_d64_h4x2_b1_s16_len0_protect3", 1, 4, 2, 64, 16, BF16, BF16, BF16, BF16, BF16, PL,
     3, LOAD_PLAIN, 1, TU_NHD, {0}, 8, 40, 0.0f, DATA_NORMAL, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL},
    {"m8_f16_d64_h4x2_b3_perhead_len1_full_noq", 3, 4, 2, 64, 20, F16, F32, F16, F32, F32, PH, 0,
     LOAD_INDICES, 0, TU_HND, {1, 50, 20}, 50, 30, 0.0f, DATA_NORMAL, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL},
    /* numerics: logits of magnitude ~200 (the authors' exp(z) overflows at ~88) */
    {"huge_logits_bf16_d64_h4x2_b2", 2, 4, 2, 64, 48, BF16, BF16, BF16, BF16, BF16, PL, 1,
     LOAD_PLAIN, 1, TU_HND, {48, 20, 0}, 48, 60, 0.125f, DATA_HUGE, 0, NULL, NULL, "6", NULL, NULL, NULL, "0", NULL},
    {"huge_logits_f16_d64_h4x2_perhead_outf32", 1, 4, 2, 64, 32, F16, F16, F32, F32, F32, PH, 1,
     LOAD_INDICES, 1, TU_HND, {32}, 32, 40, 0.125f, DATA_HUGE, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL},
    /* shapes of the NVIDIA tensor-core partial (q of the cache dtype): row tiles of 32 and
     * 64 query heads (G 20, G 80 = two row tiles), several splits of a long map; two more
     * finish geometries (80 heads on one lane, 6 rounds); in the one-kernel step two score
     * chunks per map (S 150 and S 1000), one scorer for eight items (G 20) */
    {"g20_bf16_d128_h40x2_b2_perhead_s150", 2, 40, 2, 128, 150, BF16, BF16, BF16, BF16, BF16, PH,
     1, LOAD_INDICES, 1, TU_HND, {200, 90, 0}, 200, 12, 0.0f, DATA_NORMAL, 1, NULL, NULL, "3", NULL, NULL, NULL, NULL, "1"},
    {"g80_f16_d64_h80x1_b1_s70", 1, 80, 1, 64, 70, F16, F16, F16, F16, F16, PL, 1, LOAD_PLAIN, 1,
     TU_HND, {50}, 70, 10, 0.0f, DATA_NORMAL, 0, NULL, NULL, NULL, NULL, "1", "3", NULL, NULL},
    {"s1000_bf16_d128_h8x2_b2", 2, 8, 2, 128, 1000, BF16, BF16, BF16, F32, BF16, PL, 1,
     LOAD_PLAIN, 1, TU_NHD, {1000, 700, 0}, 1000, 8, 0.0f, DATA_NORMAL, 0, NULL, NULL, NULL, NULL, "2", "6", NULL, NULL},
    /* D 256 on the tensor cores (q fragments in local memory): 16-row tiles in the
     * one-kernel step, 32-row tiles (G 20) in the two-kernel step */
    {"d256_bf16_h8x2_b2_s300", 2, 8, 2, 256, 300, BF16, BF16, BF16, BF16, BF16, PL, 1,
     LOAD_PLAIN, 1, TU_HND, {300, 120, 0}, 300, 12, 0.0f, DATA_NORMAL, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL},
    {"d256_f16_h40x2_b1_perhead_nan_twokernel", 1, 40, 2, 256, 90, F16, F16, F32, F16, F16, PH, 1,
     LOAD_INDICES, 1, TU_NHD, {150}, 150, 10, 0.0f, DATA_NORMAL, 1, NULL, NULL, NULL, NULL, NULL, NULL, "0", NULL},
    /* the multi-lane (warp) layout of GPUs, emulated through local memory on CPUs */
    {"lanes_bf16_d64_epl16_h2x2_b2_perhead", 2, 2, 2, 64, 40, BF16, BF16, BF16, BF16, BF16, PH, 1,
     LOAD_INDICES, 1, TU_HND, {40, 3, 0}, 40, 12, 0.0f, DATA_NORMAL, 0, "16", "32", "3", NULL, NULL, NULL, NULL, NULL},
    /* ... with K/V tiles staged in local memory (the NVIDIA cp.async layout) */
    {"tiles_f16_d128_epl16_h4x2_b2_s45", 2, 4, 2, 128, 45, F16, F16, F16, F16, F16, PL, 1,
     LOAD_PLAIN, 1, TU_HND, {45, 7, 0}, 45, 12, 0.0f, DATA_NORMAL, 0, "16", "64", "2", "1", NULL, NULL, NULL, NULL},
};
/* clang-format on */

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

/* A case's launch override; NULL restores the value the suite started with, so that an
 * override given to the whole run (e.g. CLKV_LONGFLOW_CPASYNC=0 ctest ...) applies to
 * every case that sets none. */
static void set_env(const char *name, const char *value) {
    enum { MAXV = 10 };
    static struct {
        const char *name;
        char *outer; /* NULL: unset at start */
    } saved[MAXV];
    static int nsaved;
    int i = 0;
    while (i < nsaved && strcmp(saved[i].name, name) != 0)
        i++;
    if (i == nsaved && nsaved < MAXV) {
        const char *o = getenv(name);
        saved[i].name = name;
        saved[i].outer = o ? strdup(o) : NULL;
        nsaved++;
    }
    if (!value && i < nsaved)
        value = saved[i].outer;
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
    set_env("CLKV_LONGFLOW_MMA_SPLITS", c->splits); /* the tensor-core partial (NVIDIA) */
    set_env("CLKV_LONGFLOW_CPASYNC", c->cpasync);
    set_env("CLKV_LONGFLOW_SCORE_LANES", c->lanes);
    set_env("CLKV_LONGFLOW_SCORE_ROUNDS", c->rounds);
    set_env("CLKV_LONGFLOW_FUSED", c->fused);
    set_env("CLKV_LONGFLOW_SCORE_WGS", c->scorers);
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
    set_env("CLKV_LONGFLOW_MMA_SPLITS", NULL);
    set_env("CLKV_LONGFLOW_CPASYNC", NULL);
    set_env("CLKV_LONGFLOW_SCORE_LANES", NULL);
    set_env("CLKV_LONGFLOW_SCORE_ROUNDS", NULL);
    set_env("CLKV_LONGFLOW_FUSED", NULL);
    set_env("CLKV_LONGFLOW_SCORE_WGS", NULL);
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

/* ------------------------------------------------------------------------------------ */
/* Explicit behaviour: empty slots first, the newest token protected                     */
/* ------------------------------------------------------------------------------------ */

/* One step with q, k_new random and v_new = 0 (the new token's score is 0, the smallest
 * possible: only protection keeps it); returns the victims [B, Hm]. */
static void zero_v_step(clkv_longflow_cache *cache, clkv_longflow_step_args *sa, tu_rng *r,
                        int64_t nq, int64_t nn, int32_t *vic, int64_t nvic) {
    float *q = (float *)tu_malloc((size_t)nq * sizeof(float));
    float *k = (float *)tu_malloc((size_t)nn * sizeof(float));
    float *z = (float *)tu_calloc((size_t)nn, sizeof(float));
    tu_fill_normal(r, q, (size_t)nq, 0.0, 1.0);
    tu_fill_normal(r, k, (size_t)nn, 0.0, 1.0);
    tu_buffer_write(g_ctx, sa->q.buf, 0, q, (size_t)nq * sizeof(float));
    tu_buffer_write(g_ctx, sa->k_new.buf, 0, k, (size_t)nn * sizeof(float));
    tu_buffer_write(g_ctx, sa->v_new.buf, 0, z, (size_t)nn * sizeof(float));
    TU_CHECK_OK(g_ctx, clkv_longflow_step(cache, sa, NULL));
    read_i32(sa->victims, vic, (size_t)nvic);
    free(q);
    free(k);
    free(z);
}

static void test_fill_order_and_protection(void **state) {
    (void)state;
    const int64_t B = 2, Hq = 4, Hkv = 2, D = 64, S = 8, Lp = 8;
    tu_rng rng;
    tu_rng_seed(&rng, tu_seed(DEFAULT_SEED), 1000);
    for (int mode = 0; mode < 2; mode++) {
        const int64_t Hm = mode ? Hkv : 1;
        tu_set_case("fill order and protection, mode %d", mode);
        clkv_longflow_cache_create_args ca = CLKV_LONGFLOW_CACHE_CREATE_ARGS_INIT;
        ca.batch = B;
        ca.q_heads = Hq;
        ca.kv_heads = Hkv;
        ca.head_dim = D;
        ca.slots = S;
        ca.dtype = F32;
        ca.mode = mode ? PH : PL;
        clkv_longflow_cache *cache = NULL;
        TU_CHECK_OK(g_ctx, clkv_longflow_cache_create(g_ctx, &ca, &cache));
        /* sequence 0 keeps prompt tokens {0, 2, 5} in slots 0, 2, 5 of every map (holes 1, 3,
         * 4, 6, 7); sequence 1 keeps nothing */
        const size_t np = (size_t)(B * Hkv * Lp * D);
        float *pk = (float *)tu_malloc(np * sizeof(float));
        tu_fill_normal(&rng, pk, np, 0.0, 1.0);
        int32_t idx[2 * 2 * 8], lens[2] = {8, 0};
        for (int64_t i = 0; i < B * Hm * S; i++) {
            const int64_t slot = i % S;
            idx[i] =
                (i / (Hm * S) == 0 && (slot == 0 || slot == 2 || slot == 5)) ? (int32_t)slot : -1;
        }
        const int64_t idims[3] = {B, Hm, S}, bdims[1] = {B};
        clkv_longflow_load_args la = CLKV_LONGFLOW_LOAD_ARGS_INIT;
        la.k = tu_kv_tensor(g_ctx, pk, F32, B, Hkv, Lp, D, TU_HND);
        la.v = la.k;
        la.lengths = tu_tensor_upload_i32(g_ctx, lens, 1, bdims, 0, 0);
        la.indices = tu_tensor_upload_i32(g_ctx, idx, 3, idims, 0, 0);
        TU_CHECK_OK(g_ctx, clkv_longflow_cache_load(cache, &la, NULL));
        int32_t vic[4], prev[4];
        read_i32(clkv_longflow_cache_victims(cache), prev, (size_t)(B * Hm));
        for (int64_t m = 0; m < B * Hm; m++)
            if (prev[m] != (m < Hm ? 1 : 0))
                TU_FAIL("after load: victim of map %d = %d, expected the lowest empty slot %d",
                        (int)m, prev[m], m < Hm ? 1 : 0);
        const int64_t qd[3] = {B, Hq, D}, nd[3] = {B, Hkv, D}, vd[2] = {B, Hm};
        clkv_longflow_step_args sa = CLKV_LONGFLOW_STEP_ARGS_INIT;
        sa.q = tu_tensor_alloc(g_ctx, F32, 3, qd, 0, 0);
        sa.k_new = tu_tensor_alloc(g_ctx, F32, 3, nd, 0, 0);
        sa.v_new = tu_tensor_alloc(g_ctx, F32, 3, nd, 0, 0);
        sa.o = tu_tensor_alloc(g_ctx, F32, 3, qd, 0, 0);
        sa.victims = tu_tensor_alloc(g_ctx, CLKV_I32, 2, vd, 0, 0);
        /* the empty slots fill lowest first: 1, 3, 4, 6, 7 (sequence 0), 0..7 (sequence 1) */
        static const int32_t order0[] = {1, 3, 4, 6, 7};
        for (int st = 0; st < 30; st++) {
            zero_v_step(cache, &sa, &rng, B * Hq * D, B * Hkv * D, vic, B * Hm);
            for (int64_t m = 0; m < B * Hm; m++) {
                const int seq0 = m < Hm;
                const int filling = seq0 ? st < 4 : st < 7;
                if (filling && vic[m] != (seq0 ? order0[st + 1] : st + 1))
                    TU_FAIL("step %d: map %d victim %d, expected the next empty slot %d", st,
                            (int)m, vic[m], seq0 ? order0[st + 1] : st + 1);
                if (vic[m] == prev[m])
                    TU_FAIL("step %d: map %d chose slot %d, the token it just wrote (score 0) "
                            "which protect = 1 must keep",
                            st, (int)m, vic[m]);
                prev[m] = vic[m];
            }
        }
        tu_release(la.k.buf);
        tu_release(la.lengths.buf);
        tu_release(la.indices.buf);
        tu_release(sa.q.buf);
        tu_release(sa.k_new.buf);
        tu_release(sa.v_new.buf);
        tu_release(sa.o.buf);
        tu_release(sa.victims.buf);
        free(pk);
        clkv_longflow_cache_destroy(cache);
    }
}

/* ------------------------------------------------------------------------------------ */
/* Validation                                                                           */
/* ------------------------------------------------------------------------------------ */

/* Expect `st` to be `want` with a message naming `name` (on ctx, or the thread-local
 * message when mctx is NULL); `out` (may be NULL) must still be poison. */
static void expect_reject(clkv_status st, clkv_status want, const char *name,
                          const clkv_context *mctx, cl_mem out, const char *what) {
    tu_set_case("bad input: %s", what);
    if (st != want)
        TU_FAIL("status %s (%d), expected %s; message: %s", clkv_status_string(st), st,
                clkv_status_string(want), clkv_last_error(mctx));
    if (!tu_msg_names(clkv_last_error(mctx), name))
        TU_FAIL("message \"%s\" does not name \"%s\"", clkv_last_error(mctx), name);
    clFinish(clkv_context_queue(g_ctx));
    if (out)
        tu_assert_buffer_poison(g_ctx, out, what);
}

/* The cache still holds its initial state: every slot empty, victims 0, position 0. */
static void assert_untouched(clkv_longflow_cache *cache, int64_t nmap, int64_t B, int64_t Hm) {
    int32_t pos[2 * 2 * 16], vic[4], np[2];
    read_i32(clkv_longflow_cache_positions(cache), pos, (size_t)nmap);
    read_i32(clkv_longflow_cache_victims(cache), vic, (size_t)(B * Hm));
    read_i32(clkv_longflow_cache_next_positions(cache), np, (size_t)B);
    for (int64_t i = 0; i < nmap; i++)
        if (pos[i] != -1)
            TU_FAIL("a rejected call wrote positions[%d] = %d", (int)i, pos[i]);
    for (int64_t i = 0; i < B * Hm; i++)
        if (vic[i] != 0)
            TU_FAIL("a rejected call wrote victims[%d] = %d", (int)i, vic[i]);
    for (int64_t b = 0; b < B; b++)
        if (np[b] != 0)
            TU_FAIL("a rejected call wrote next_positions[%d] = %d", (int)b, np[b]);
}

static void test_bad_inputs(void **state) {
    (void)state;
    const int64_t B = 2, Hq = 4, Hkv = 2, D = 64, S = 16, Lp = 20, Hm = 2;
    clkv_longflow_cache_create_args cbase = CLKV_LONGFLOW_CACHE_CREATE_ARGS_INIT;
    cbase.batch = B;
    cbase.q_heads = Hq;
    cbase.kv_heads = Hkv;
    cbase.head_dim = D;
    cbase.slots = S;
    cbase.dtype = BF16;
    cbase.mode = PH;
    clkv_longflow_cache_create_args ca;
    clkv_longflow_cache *sentinel = (clkv_longflow_cache *)&ca, *out;

    /* ---- create ---- */
    out = sentinel;
    expect_reject(clkv_longflow_cache_create(NULL, &cbase, &out), CLKV_ERR_ARG_NULL, "ctx", NULL,
                  NULL, "create ctx");
    expect_reject(clkv_longflow_cache_create(g_ctx, NULL, &out), CLKV_ERR_ARG_NULL, "args", g_ctx,
                  NULL, "create args");
    expect_reject(clkv_longflow_cache_create(g_ctx, &cbase, NULL), CLKV_ERR_ARG_NULL, "out", g_ctx,
                  NULL, "create out");
#define BADC(mut, want, name)                                                                      \
    do {                                                                                           \
        ca = cbase;                                                                                \
        mut;                                                                                       \
        out = sentinel;                                                                            \
        expect_reject(clkv_longflow_cache_create(g_ctx, &ca, &out), want, name, g_ctx, NULL,       \
                      "create " #mut);                                                             \
        if (out != sentinel)                                                                       \
            TU_FAIL("a rejected create wrote *out");                                               \
    } while (0)
    BADC(ca.batch = 0, CLKV_ERR_ARG_RANGE, "batch");
    BADC(ca.batch = 70000, CLKV_ERR_ARG_RANGE, "batch");
    BADC(ca.q_heads = 0, CLKV_ERR_ARG_RANGE, "q_heads");
    BADC(ca.kv_heads = -1, CLKV_ERR_ARG_RANGE, "kv_heads");
    BADC(ca.head_dim = 96, CLKV_ERR_ARG_UNSUPPORTED, "head_dim");
    BADC(ca.q_heads = 5, CLKV_ERR_ARG_SHAPE, "q_heads");
    BADC((ca.q_heads = 2048, ca.kv_heads = 1), CLKV_ERR_ARG_RANGE, "q_heads");
    BADC(ca.slots = 1, CLKV_ERR_ARG_RANGE, "slots");
    BADC(ca.slots = (int64_t)1 << 40, CLKV_ERR_ARG_RANGE, "slots");
    BADC(ca.protect = -1, CLKV_ERR_ARG_RANGE, "protect");
    BADC(ca.protect = 16, CLKV_ERR_ARG_RANGE, "protect");
    BADC(ca.dtype = CLKV_I32, CLKV_ERR_ARG_DTYPE, "dtype");
    BADC(ca.mode = (clkv_longflow_mode)7, CLKV_ERR_ARG_RANGE, "mode");
    BADC((ca.slots = INT32_MAX, ca.batch = 60000), CLKV_ERR_DEVICE_LIMIT, "slots");
#undef BADC

    /* ---- accessors, destroy, workspace size ---- */
    tu_set_case("NULL cache accessors");
    assert_null(clkv_longflow_cache_k(NULL).buf);
    assert_null(clkv_longflow_cache_v(NULL).buf);
    assert_null(clkv_longflow_cache_positions(NULL).buf);
    assert_null(clkv_longflow_cache_victims(NULL).buf);
    assert_null(clkv_longflow_cache_next_positions(NULL).buf);
    clkv_longflow_cache_destroy(NULL);
    size_t bytes = 0;
    expect_reject(clkv_longflow_step_workspace_size(NULL, &bytes), CLKV_ERR_ARG_NULL, "cache", NULL,
                  NULL, "workspace_size cache");

    clkv_longflow_cache *cache = NULL;
    TU_CHECK_OK(g_ctx, clkv_longflow_cache_create(g_ctx, &cbase, &cache));
    expect_reject(clkv_longflow_step_workspace_size(cache, NULL), CLKV_ERR_ARG_NULL, "bytes", g_ctx,
                  NULL, "workspace_size bytes");
    TU_CHECK_OK(g_ctx, clkv_longflow_step_workspace_size(cache, &bytes));
    assert_true(bytes > 0);
    {
        clkv_tensor t = clkv_longflow_cache_k(cache);
        assert_int_equal(t.dtype, BF16);
        assert_int_equal(t.ndim, 4);
        assert_int_equal(t.dims[2], S);
        t = clkv_longflow_cache_positions(cache);
        assert_int_equal(t.dims[1], Hm);
    }

    /* ---- load ---- */
    const size_t np = (size_t)(B * Hkv * Lp * D);
    float *pk = (float *)tu_calloc(np, sizeof(float));
    int32_t lens[2] = {5, 20}, idx[2 * 2 * 16];
    for (int i = 0; i < 2 * 2 * 16; i++)
        idx[i] = i % 16;
    const int64_t bdims[1] = {B}, idims[3] = {B, Hm, S}, qdims[3] = {B, Hq, D};
    clkv_longflow_load_args lbase = CLKV_LONGFLOW_LOAD_ARGS_INIT, la;
    lbase.k = tu_kv_tensor(g_ctx, pk, BF16, B, Hkv, Lp, D, TU_HND);
    lbase.v = tu_kv_tensor(g_ctx, pk, BF16, B, Hkv, Lp, D, TU_NHD);
    lbase.lengths = tu_tensor_upload_i32(g_ctx, lens, 1, bdims, 0, 64);
    lbase.indices = tu_tensor_upload_i32(g_ctx, idx, 3, idims, 0, 512);
    lbase.q = tu_tensor_upload(g_ctx, pk, F32, 3, qdims, 0, 0);
    expect_reject(clkv_longflow_cache_load(NULL, &lbase, NULL), CLKV_ERR_ARG_NULL, "cache", NULL,
                  NULL, "load cache");
    expect_reject(clkv_longflow_cache_load(cache, NULL, NULL), CLKV_ERR_ARG_NULL, "args", g_ctx,
                  NULL, "load args");
#define BADL(mut, want, name)                                                                      \
    do {                                                                                           \
        la = lbase;                                                                                \
        mut;                                                                                       \
        cl_event ev = NULL;                                                                        \
        expect_reject(clkv_longflow_cache_load(cache, &la, &ev), want, name, g_ctx, NULL,          \
                      "load " #mut);                                                               \
        assert_null(ev);                                                                           \
    } while (0)
    BADL(la.k.buf = NULL, CLKV_ERR_ARG_NULL, "k");
    BADL(la.v.buf = NULL, CLKV_ERR_ARG_NULL, "v");
    BADL(la.k.dtype = CLKV_I32, CLKV_ERR_ARG_DTYPE, "k");
    BADL(la.v.dtype = F16, CLKV_ERR_ARG_DTYPE, "v");
    BADL(la.k.dims[0] = 1, CLKV_ERR_ARG_SHAPE, "k");
    BADL(la.k.dims[1] = 1, CLKV_ERR_ARG_SHAPE, "k");
    BADL(la.k.dims[3] = 32, CLKV_ERR_ARG_SHAPE, "k");
    BADL(la.v.dims[2] = 10, CLKV_ERR_ARG_SHAPE, "v");
    BADL(la.lengths.dtype = F32, CLKV_ERR_ARG_DTYPE, "lengths");
    BADL(la.lengths.dims[0] = 3, CLKV_ERR_ARG_SHAPE, "lengths");
    BADL(la.indices.dims[1] = 1, CLKV_ERR_ARG_SHAPE, "indices");
    BADL(la.indices.dtype = CLKV_U32, CLKV_ERR_ARG_DTYPE, "indices");
    BADL((la.indices.dims[2] = 17, la.indices.strides[1] = 17, la.indices.strides[0] = 34),
         CLKV_ERR_ARG_SHAPE, "indices");
    BADL(la.q.dims[1] = 2, CLKV_ERR_ARG_SHAPE, "q");
    BADL(la.q.dtype = CLKV_U8, CLKV_ERR_ARG_DTYPE, "q");
    BADL(la.max_length = -2, CLKV_ERR_ARG_RANGE, "max_length");
    BADL(la.max_length = 21, CLKV_ERR_ARG_RANGE, "max_length");
    BADL(la.indices.buf = NULL, CLKV_ERR_ARG_RANGE, "max_length");
    BADL(la.scale = INFINITY, CLKV_ERR_ARG_RANGE, "scale");
    BADL(la.k.strides[3] = 2, CLKV_ERR_ARG_STRIDE, "k");
    BADL(la.k.offset = 1, CLKV_ERR_ARG_ALIGNMENT, "k");
    BADL(la.k.offset = 2, CLKV_ERR_ARG_BUFFER_SIZE, "k");
    BADL(la.v.strides[0] = INT64_MAX, CLKV_ERR_ARG_OVERFLOW, "v");
#undef BADL
    assert_untouched(cache, B * Hm * S, B, Hm);

    /* ---- step ---- */
    const int64_t ndims[3] = {B, Hkv, D}, ldims[2] = {B, Hq}, sdims[3] = {B, Hm, S},
                  vdims[2] = {B, Hm};
    clkv_longflow_step_args sbase = CLKV_LONGFLOW_STEP_ARGS_INIT, sa;
    sbase.q = lbase.q;
    sbase.k_new = tu_tensor_upload(g_ctx, pk, BF16, 3, ndims, 0, 0);
    sbase.v_new = tu_tensor_upload(g_ctx, pk, BF16, 3, ndims, 0, 0);
    sbase.o = tu_tensor_alloc(g_ctx, BF16, 3, qdims, 0, 0);
    sbase.lse = tu_tensor_alloc(g_ctx, F32, 2, ldims, 0, 0);
    sbase.scores = tu_tensor_alloc(g_ctx, F32, 3, sdims, 0, 0);
    sbase.victims = tu_tensor_alloc(g_ctx, CLKV_I32, 2, vdims, 0, 0);
    expect_reject(clkv_longflow_step(NULL, &sbase, NULL), CLKV_ERR_ARG_NULL, "cache", NULL,
                  sbase.o.buf, "step cache");
    expect_reject(clkv_longflow_step(cache, NULL, NULL), CLKV_ERR_ARG_NULL, "args", g_ctx,
                  sbase.o.buf, "step args");
#define BADS(mut, want, name)                                                                      \
    do {                                                                                           \
        sa = sbase;                                                                                \
        mut;                                                                                       \
        cl_event ev = NULL;                                                                        \
        expect_reject(clkv_longflow_step(cache, &sa, &ev), want, name, g_ctx, sbase.o.buf,         \
                      "step " #mut);                                                               \
        assert_null(ev);                                                                           \
        tu_assert_buffer_poison(g_ctx, sbase.lse.buf, "lse");                                      \
        tu_assert_buffer_poison(g_ctx, sbase.scores.buf, "scores");                                \
        tu_assert_buffer_poison(g_ctx, sbase.victims.buf, "victims");                              \
    } while (0)
    BADS(sa.q.buf = NULL, CLKV_ERR_ARG_NULL, "q");
    BADS(sa.k_new.buf = NULL, CLKV_ERR_ARG_NULL, "k_new");
    BADS(sa.v_new.buf = NULL, CLKV_ERR_ARG_NULL, "v_new");
    BADS(sa.o.buf = NULL, CLKV_ERR_ARG_NULL, "o");
    BADS(sa.q.dtype = CLKV_I32, CLKV_ERR_ARG_DTYPE, "q");
    BADS(sa.v_new.dtype = F16, CLKV_ERR_ARG_DTYPE, "v_new");
    BADS(sa.o.dtype = CLKV_U32, CLKV_ERR_ARG_DTYPE, "o");
    BADS(sa.lse.dtype = F16, CLKV_ERR_ARG_DTYPE, "lse");
    BADS(sa.scores.dtype = BF16, CLKV_ERR_ARG_DTYPE, "scores");
    BADS(sa.victims.dtype = F32, CLKV_ERR_ARG_DTYPE, "victims");
    BADS(sa.q.dims[0] = 1, CLKV_ERR_ARG_SHAPE, "q");
    BADS(sa.q.dims[1] = 2, CLKV_ERR_ARG_SHAPE, "q");
    BADS(sa.k_new.dims[1] = 1, CLKV_ERR_ARG_SHAPE, "k_new");
    BADS(sa.v_new.dims[2] = 32, CLKV_ERR_ARG_SHAPE, "v_new");
    BADS(sa.o.dims[2] = 32, CLKV_ERR_ARG_SHAPE, "o");
    BADS(sa.lse.dims[1] = 2, CLKV_ERR_ARG_SHAPE, "lse");
    BADS(sa.scores.dims[1] = 1, CLKV_ERR_ARG_SHAPE, "scores");
    BADS(sa.scores.dims[2] = 15, CLKV_ERR_ARG_SHAPE, "scores");
    BADS(sa.victims.dims[1] = 1, CLKV_ERR_ARG_SHAPE, "victims");
    BADS(sa.q.ndim = 2, CLKV_ERR_ARG_SHAPE, "q");
    BADS(sa.scale = NAN, CLKV_ERR_ARG_RANGE, "scale");
    BADS(sa.o.strides[2] = 3, CLKV_ERR_ARG_STRIDE, "o");
    BADS(sa.o.offset = 2, CLKV_ERR_ARG_BUFFER_SIZE, "o");
    BADS(sa.k_new.strides[0] = INT64_MAX, CLKV_ERR_ARG_OVERFLOW, "k_new");
#undef BADS
    assert_untouched(cache, B * Hm * S, B, Hm);

    /* and the baselines work */
    tu_set_case("bad inputs baseline");
    TU_CHECK_OK(g_ctx, clkv_longflow_cache_load(cache, &lbase, NULL));
    TU_CHECK_OK(g_ctx, clkv_longflow_step(cache, &sbase, NULL));
    tu_assert_written_exactly(g_ctx, &sbase.o, "o");
    tu_assert_written_exactly(g_ctx, &sbase.scores, "scores");
    tu_release(lbase.k.buf);
    tu_release(lbase.v.buf);
    tu_release(lbase.lengths.buf);
    tu_release(lbase.indices.buf);
    tu_release(lbase.q.buf);
    tu_release(sbase.k_new.buf);
    tu_release(sbase.v_new.buf);
    tu_release(sbase.o.buf);
    tu_release(sbase.lse.buf);
    tu_release(sbase.scores.buf);
    tu_release(sbase.victims.buf);
    free(pk);
    clkv_longflow_cache_destroy(cache);
}

/* ------------------------------------------------------------------------------------ */
/* Load from clkv_select_topk's output (the chain SnapKV scores -> top-k -> load)        */
/* ------------------------------------------------------------------------------------ */

static void test_load_from_topk(void **state) {
    (void)state;
    const int64_t B = 2, Hq = 4, Hkv = 2, D = 64, S = 24, Lp = 90;
    tu_rng rng;
    tu_rng_seed(&rng, tu_seed(DEFAULT_SEED), 2000);
    for (int mode = 0; mode < 2; mode++) {
        const int64_t Hm = mode ? Hkv : 1;
        const size_t np = (size_t)(B * Hkv * Lp * D), nmap = (size_t)(B * Hm * S);
        tu_set_case("load from clkv_select_topk, mode %d", mode);
        float *pk = (float *)tu_malloc(np * sizeof(float)),
              *pv = (float *)tu_malloc(np * sizeof(float));
        float *sc = (float *)tu_malloc((size_t)(B * Hm * Lp) * sizeof(float));
        float *q = (float *)tu_malloc((size_t)(B * Hq * D) * sizeof(float));
        int32_t lens[2] = {90, 17}, *idx = (int32_t *)tu_malloc(nmap * sizeof(int32_t));
        tu_fill_normal(&rng, pk, np, 0.0, 1.0);
        tu_fill_normal(&rng, pv, np, 0.0, 1.0);
        tu_fill_normal(&rng, sc, (size_t)(B * Hm * Lp), 0.0, 1.0);
        tu_fill_normal(&rng, q, (size_t)(B * Hq * D), 0.0, 1.0);
        tu_round_array(BF16, pk, np);
        tu_round_array(BF16, pv, np);
        const int64_t bdims[1] = {B}, sdims[3] = {B, Hm, Lp}, idims[3] = {B, Hm, S},
                      qdims[3] = {B, Hq, D};
        clkv_select_topk_args ta = CLKV_SELECT_TOPK_ARGS_INIT;
        ta.scores = tu_tensor_upload(g_ctx, sc, F32, 3, sdims, 0, 0);
        ta.lengths = tu_tensor_upload_i32(g_ctx, lens, 1, bdims, 0, 0);
        ta.indices = tu_tensor_alloc(g_ctx, CLKV_I32, 3, idims, 0, 0);
        ta.k = S;
        TU_CHECK_OK(g_ctx, clkv_select_topk(g_ctx, &ta, NULL));

        clkv_longflow_cache_create_args ca = CLKV_LONGFLOW_CACHE_CREATE_ARGS_INIT;
        ca.batch = B;
        ca.q_heads = Hq;
        ca.kv_heads = Hkv;
        ca.head_dim = D;
        ca.slots = S;
        ca.dtype = BF16;
        ca.mode = mode ? PH : PL;
        clkv_longflow_cache *cache = NULL;
        TU_CHECK_OK(g_ctx, clkv_longflow_cache_create(g_ctx, &ca, &cache));
        clkv_longflow_load_args la = CLKV_LONGFLOW_LOAD_ARGS_INIT;
        la.k = tu_kv_tensor(g_ctx, pk, BF16, B, Hkv, Lp, D, TU_NHD);
        la.v = tu_kv_tensor(g_ctx, pv, BF16, B, Hkv, Lp, D, TU_HND);
        la.lengths = ta.lengths;
        la.indices = ta.indices;
        la.q = tu_tensor_upload(g_ctx, q, F32, 3, qdims, 0, 0);
        TU_CHECK_OK(g_ctx, clkv_longflow_cache_load(cache, &la, NULL));

        /* the reference loads the same lists (read back: top-k is tested on its own) */
        read_i32(ta.indices, idx, nmap);
        for (int64_t m = 0; m < B * Hm; m++) /* the format load expects: ascending, -1 tail */
            for (int64_t i = 1; i < S; i++)
                if (idx[m * S + i] >= 0 && idx[m * S + i] <= idx[m * S + i - 1])
                    TU_FAIL("top-k list %d is not ascending at %d", (int)m, (int)i);
        ref_lf_cache rc;
        double *lsc = (double *)tu_malloc(nmap * sizeof(double));
        int32_t vic[4];
        assert_int_equal(ref_lf_init(&rc, B, Hq, Hkv, D, S, mode, 1), 0);
        assert_int_equal(ref_lf_load(&rc, pk, pv, Lp, lens, idx, S, q, 1.0 / sqrt((double)D), lsc),
                         0);
        check_state(cache, &rc, 0, "after a load from top-k");
        read_i32(clkv_longflow_cache_victims(cache), vic, (size_t)(B * Hm));
        check_victims(&rc, vic, lsc, -1);
        ref_lf_free(&rc);
        clkv_longflow_cache_destroy(cache);
        tu_release(ta.scores.buf);
        tu_release(ta.lengths.buf);
        tu_release(ta.indices.buf);
        tu_release(la.k.buf);
        tu_release(la.v.buf);
        tu_release(la.q.buf);
        free(pk);
        free(pv);
        free(sc);
        free(q);
        free(idx);
        free(lsc);
    }
}

int main(void) {
    tu_suite s = {0};
    tu_suite_add(&s, "bad_inputs", test_bad_inputs, NULL);
    tu_suite_add(&s, "load_from_topk", test_load_from_topk, NULL);
    tu_suite_add(&s, "fill_order_and_protection", test_fill_order_and_protection, NULL);
    TU_SUITE_ADD_CASES(&s, g_cases, run_case);
    return tu_suite_run(&s, "longflow", &g_ctx, DEFAULT_SEED);
}
