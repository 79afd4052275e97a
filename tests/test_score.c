/* clkv_score (SPEC §2.1, §2.2) and clkv_keep_set against the double-precision references
 * of tests/ref/ref_score.c on the default device ($CLKV_DEVICE; PoCL CPU in CI).
 *
 * Window-method inputs: q, K, V random; the LSE and window outputs a that the scorers
 * take are computed by the reference window attention in double and stored as the
 * kernel receives them (lse f32, a in the case's dtype); the reference scorer then uses
 * exactly those stored values. Scores are compared with |x - ref| <= 1e-4*|ref| + tau
 * (SPEC §0.2; tau per method in ref_score.c, the §2.1 formula for DropKV), plus 1e-20
 * absolute for f32 underflow of tiny probabilities; +-inf must match exactly. Outputs
 * are poisoned, at byte offsets with guard bytes after them: every element must be
 * written (including the -inf tail j >= len up to L) and no guard byte touched. K/V
 * rows past the valid length hold 1000 (would change any score that read them). 16-bit V
 * caches start at an odd element offset (rows not 16-byte aligned: the element-load path
 * of the lane-split kernel); the other tensors are aligned (the 16-byte-load path).
 *
 * The method defaults (pooling, kernel, protection) are written here from the header,
 * independently of host/score.c, so they are tested too.
 *
 * Reproduce a failure with CLKV_TEST_SEED=<seed printed>.
 */
#include "util/test_util.h"
#include "ref/ref_attention.h"
#include "ref/ref_score.h"
#include "ref/ref_select.h"

#include "clkv/score.h"
#include "host/score_internal.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_SEED 0x5C0E5C0E2026ull

static clkv_context *g_ctx;

#define F32 CLKV_F32
#define F16 CLKV_F16
#define BF16 CLKV_BF16

typedef struct scase {
    const char *name;
    clkv_score_method method;
    int64_t B, Hq, Hkv, D, W, L;
    clkv_dtype dt, adt; /* q/K/V dtype, window-output dtype */
    tu_layout layout;
    int32_t lens[2];
    int has_lengths;    /* 0: no lengths buffer, every sequence has max_length */
    int64_t max_length; /* -1 default */
    int pool, pool_k;   /* overrides (CLKV_POOL_DEFAULT / 0 = default) */
    int64_t protect;    /* -1 default */
    int round_p, raw_mean;
    int64_t Dm; /* CriticalKV W_O columns (0: none) */
    int want_pbar;
    int force_tpr;  /* lanes per key row for this case (clkv__score_force_tpr; 0: default) */
    double qscale;  /* q ~ qscale * N(0, 1) */
    int zero_every; /* valid key (and value) rows j % zero_every == 0 set to 0; -1: all; 0: none */
} scase;

/* clang-format off */
static const scase g_cases[] = {
    /* DropKV */
    {"dropkv_h32x8_d128_bf16_len4101_100", CLKV_SCORE_DROPKV, 2, 32, 8, 128, 8, 4101, BF16, F32, TU_HND, {4101, 100}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 2.0, 0},
    {"dropkv_h14x2_d64_f16_nhd_lenW1", CLKV_SCORE_DROPKV, 1, 14, 2, 64, 8, 12, F16, F16, TU_NHD, {9}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 2.0, 0},
    {"dropkv_h8x8_d128_f32_lenW_4101_abf16", CLKV_SCORE_DROPKV, 2, 8, 8, 128, 8, 4101, F32, BF16, TU_HND, {8, 4101}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 1.0, 0},
    {"dropkv_round_p_bf16_len100_1", CLKV_SCORE_DROPKV, 2, 14, 2, 64, 8, 100, BF16, F32, TU_HND, {100, 1}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 1, 0, 0, 0, 0, 4.0, 0},
    {"dropkv_len0_1_maxpool", CLKV_SCORE_DROPKV, 2, 8, 2, 64, 8, 40, F32, F32, TU_HND, {0, 1}, 1, -1, CLKV_POOL_MAX, 0, -1, 0, 0, 0, 0, 0, 1.0, 0},
    {"dropkv_tpr4_d64_f32", CLKV_SCORE_DROPKV, 1, 8, 2, 64, 8, 80, F32, F32, TU_HND, {77}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 4, 2.0, 0},
    {"dropkv_tpr8_d128_bf16_nhd", CLKV_SCORE_DROPKV, 2, 8, 2, 128, 8, 150, BF16, F32, TU_NHD, {150, 33}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 8, 2.0, 0},
    /* the tensor-core scorer's shapes on NVIDIA (portable kernel elsewhere): G*W = 64 and 128 rows staged at once (past 48 KiB), 256 rows in two rounds, round_p at D = 128 */
    {"dropkv_h16x2_d128_f16_nhd_g8_len333", CLKV_SCORE_DROPKV, 1, 16, 2, 128, 8, 340, F16, F32, TU_NHD, {333}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 2.0, 0},
    {"dropkv_h32x2_d128_bf16_g16_len300_45", CLKV_SCORE_DROPKV, 2, 32, 2, 128, 8, 300, BF16, F32, TU_HND, {300, 45}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 2.0, 0},
    {"dropkv_h8x2_d128_f16_w64_len400", CLKV_SCORE_DROPKV, 1, 8, 2, 128, 64, 400, F16, F32, TU_HND, {400}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 2.0, 0},
    {"dropkv_round_p_d128_bf16_g4_len199", CLKV_SCORE_DROPKV, 1, 8, 2, 128, 8, 200, BF16, F32, TU_HND, {199}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 1, 0, 0, 0, 0, 4.0, 0},
    /* D 256 (on NVIDIA the tensor-core scorer with 16 staged rows: two or four stages per tile) */
    {"dropkv_h32x8_d256_bf16_len333_70", CLKV_SCORE_DROPKV, 2, 32, 8, 256, 8, 340, BF16, F32, TU_HND, {333, 70}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 2.0, 0},
    {"dropkv_round_p_d256_f16_nhd_g8_len130_abf16", CLKV_SCORE_DROPKV, 1, 16, 2, 256, 8, 130, F16, BF16, TU_NHD, {130}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 1, 0, 0, 0, 0, 4.0, 0},
    /* SnapKV */
    {"snapkv_h32x8_d128_f16_w16_len4101_65", CLKV_SCORE_SNAPKV, 2, 32, 8, 128, 16, 4101, F16, F32, TU_HND, {4101, 65}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 2.0, 0},
    {"snapkv_h8x8_d64_bf16_nhd_max7", CLKV_SCORE_SNAPKV, 1, 8, 8, 64, 8, 100, BF16, F32, TU_NHD, {100}, 1, -1, CLKV_POOL_MAX, 7, -1, 0, 0, 0, 0, 0, 2.0, 0},
    {"snapkv_d256_bf16", CLKV_SCORE_SNAPKV, 1, 8, 8, 256, 8, 100, BF16, F32, TU_HND, {100}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 2.0, 0},
    {"snapkv_nolengths_maxlen150", CLKV_SCORE_SNAPKV, 1, 8, 2, 64, 8, 200, F32, F32, TU_HND, {0}, 0, 150, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 2.0, 0},
    {"snapkv_tpr16_d128_f16_nvidia_geometry", CLKV_SCORE_SNAPKV, 2, 8, 2, 128, 16, 300, F16, F32, TU_HND, {300, 20}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 16, 2.0, 0},
    {"criticalkv_tpr16_d128_bf16_vnorm_lanes", CLKV_SCORE_CRITICALKV, 1, 8, 2, 128, 8, 200, BF16, F32, TU_NHD, {190}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 1, 16, 2.0, 0},
    {"h2o_tpr8_d64_bf16_T150", CLKV_SCORE_H2O, 1, 4, 2, 64, 150, 150, BF16, F32, TU_HND, {150}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 8, 2.0, 0},
    /* AnDPro */
    {"andpro_h14x2_d128_f32_len100_4101", CLKV_SCORE_ANDPRO, 2, 14, 2, 128, 8, 4101, F32, F32, TU_HND, {100, 4101}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 2.0, 0},
    {"andpro_protect0_avg3_tpr8_bf16", CLKV_SCORE_ANDPRO, 1, 8, 2, 64, 8, 60, BF16, BF16, TU_HND, {60}, 1, -1, CLKV_POOL_AVG, 3, 0, 0, 0, 0, 0, 8, 2.0, 0},
    {"andpro_h16x4_d128_bf16_len300_37", CLKV_SCORE_ANDPRO, 2, 16, 4, 128, 8, 300, BF16, F32, TU_HND, {300, 37}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 2.0, 0},
    {"andpro_h8x2_d256_f16_len200", CLKV_SCORE_ANDPRO, 1, 8, 2, 256, 8, 200, F16, F32, TU_HND, {200}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 2.0, 0},
    /* CriticalKV */
    {"criticalkv_h8x8_d64_bf16_pbar", CLKV_SCORE_CRITICALKV, 2, 8, 8, 64, 16, 100, BF16, F32, TU_HND, {100, 17}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 1, 0, 2.0, 0},
    {"criticalkv_wo_h14x2_d64_f32", CLKV_SCORE_CRITICALKV, 1, 14, 2, 64, 8, 300, F32, F32, TU_NHD, {300}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 40, 1, 0, 2.0, 0},
    {"criticalkv_d256_bf16_nhd_len150_9", CLKV_SCORE_CRITICALKV, 2, 8, 2, 256, 8, 150, BF16, F32, TU_NHD, {150, 9}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 2.0, 0},
    {"criticalkv_wo_d128_bf16_dm37", CLKV_SCORE_CRITICALKV, 2, 8, 2, 128, 8, 90, BF16, F32, TU_HND, {70, 90}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 37, 0, 0, 2.0, 0},
    /* DiffKV */
    {"diffkv_h8x2_d128_bf16_w64_len4101_64", CLKV_SCORE_DIFFKV, 2, 8, 2, 128, 64, 4101, BF16, F32, TU_HND, {4101, 64}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 2.0, 0},
    {"diffkv_h32x8_d64_f16_w64_len65", CLKV_SCORE_DIFFKV, 1, 32, 8, 64, 64, 70, F16, F32, TU_HND, {65}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 2.0, 0},
    {"diffkv_tpr4_d64_f32_w16", CLKV_SCORE_DIFFKV, 1, 8, 2, 64, 16, 50, F32, F32, TU_HND, {50}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 4, 2.0, 0},
    /* on NVIDIA the tensor-core kernel, each head's rows padded to a multiple of 8 (row blocks shared by two heads where W % 16 != 0): 1024 rows in 4 stages (G 16), D 256 with a head across two stages, W 24 / 8 / 5 / 40 (a sequence shorter than W, G 7 with an empty last half block), G 1 / 3 / 6 (head counts that are not a multiple of 4), and G 8 with W 48 or 40 (384 / 320 rows in two stages of 256: head 5 / 6 across the stage boundary, per block / per half block) */
    {"diffkv_h32x2_d128_f16_g16_w64_len300_64", CLKV_SCORE_DIFFKV, 2, 32, 2, 128, 64, 300, F16, F32, TU_HND, {300, 64}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 2.0, 0},
    {"diffkv_h8x2_d256_bf16_nhd_w64_len200", CLKV_SCORE_DIFFKV, 1, 8, 2, 256, 64, 200, BF16, F32, TU_NHD, {200}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 2.0, 0},
    {"diffkv_h8x2_d64_bf16_w24_len130", CLKV_SCORE_DIFFKV, 1, 8, 2, 64, 24, 130, BF16, F32, TU_HND, {130}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 2.0, 0},
    {"diffkv_h32x8_d128_bf16_w8_len4101_5", CLKV_SCORE_DIFFKV, 2, 32, 8, 128, 8, 4101, BF16, F32, TU_HND, {4101, 5}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 2.0, 0},
    {"diffkv_h14x2_d64_f16_nhd_w5_len77", CLKV_SCORE_DIFFKV, 1, 14, 2, 64, 5, 80, F16, F32, TU_NHD, {77}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 2.0, 0},
    {"diffkv_h8x2_d256_f16_w40_len300_41", CLKV_SCORE_DIFFKV, 2, 8, 2, 256, 40, 300, F16, F32, TU_HND, {300, 41}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 2.0, 0},
    {"diffkv_h8x8_d128_bf16_w16_len1000", CLKV_SCORE_DIFFKV, 1, 8, 8, 128, 16, 1000, BF16, F32, TU_HND, {1000}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 2.0, 0},
    {"diffkv_h6x2_d64_bf16_w16_len200", CLKV_SCORE_DIFFKV, 1, 6, 2, 64, 16, 200, BF16, F32, TU_HND, {200}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 2.0, 0},
    {"diffkv_h12x2_d128_f16_w24_len333_30", CLKV_SCORE_DIFFKV, 2, 12, 2, 128, 24, 333, F16, F32, TU_HND, {333, 30}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 2.0, 0},
    {"diffkv_h16x2_d128_bf16_w48_len500_300", CLKV_SCORE_DIFFKV, 2, 16, 2, 128, 48, 500, BF16, F32, TU_HND, {500, 300}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 2.0, 0},
    {"diffkv_h16x2_d64_f16_nhd_w40_len300", CLKV_SCORE_DIFFKV, 1, 16, 2, 64, 40, 300, F16, F32, TU_NHD, {300}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 2.0, 0},
    /* protect 0: the window tokens' own scores, divided by min(W, n - j) < W */
    {"diffkv_protect0_d64_bf16_w16", CLKV_SCORE_DIFFKV, 1, 8, 2, 64, 16, 100, BF16, F32, TU_HND, {90}, 1, -1, CLKV_POOL_DEFAULT, 0, 0, 0, 0, 0, 0, 0, 2.0, 0},
    {"diffkv_protect0_d128_bf16_w8", CLKV_SCORE_DIFFKV, 1, 8, 2, 128, 8, 60, BF16, F32, TU_HND, {43}, 1, -1, CLKV_POOL_DEFAULT, 0, 0, 0, 0, 0, 0, 0, 2.0, 0},
    /* H2O: all prompt queries (T = L); the second sequence is shorter than T */
    {"h2o_h8x2_d64_f32_T300_len300_137", CLKV_SCORE_H2O, 2, 8, 2, 64, 300, 300, F32, F32, TU_HND, {300, 137}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 2.0, 0},
    {"h2o_h14x2_d128_bf16_T200", CLKV_SCORE_H2O, 1, 14, 2, 128, 200, 200, BF16, F32, TU_NHD, {200}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 2.0, 0},
    /* key methods */
    {"knorm_h8_d128_bf16_len4101_0", CLKV_SCORE_KNORM, 2, 8, 8, 128, 0, 4101, BF16, F32, TU_HND, {4101, 0}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 1.0, 0},
    {"keydiff_h2_d64_f16_len100_4101", CLKV_SCORE_KEYDIFF, 2, 2, 2, 64, 0, 4101, F16, F32, TU_HND, {100, 4101}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 1.0, 0},
    {"keydiff_rawmean_d128_f32_nhd", CLKV_SCORE_KEYDIFF, 1, 8, 8, 128, 0, 1000, F32, F32, TU_NHD, {999}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 1, 0, 0, 0, 1.0, 0},
    {"knorm_d256_f32_tile32", CLKV_SCORE_KNORM, 1, 2, 2, 256, 0, 200, F32, F32, TU_NHD, {150}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 1.0, 0},
    {"keydiff_d80_bf16_generic_dim", CLKV_SCORE_KEYDIFF, 2, 3, 3, 80, 0, 300, BF16, F32, TU_HND, {300, 1}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 1.0, 0},
    {"streamingllm_len100_3", CLKV_SCORE_STREAMINGLLM, 2, 2, 2, 64, 0, 120, BF16, F32, TU_HND, {100, 3}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 1.0, 0},
};
/* clang-format on */

/* H2O over long query ranges (T = the prompt): on NVIDIA with 16-bit q/K, D 64/128 and
 * G * T >= 64 these take the tensor-core kernel score_h2o_mma.cl (one row piece or several
 * + the reduction, aligned and unaligned q rows, sequences shorter than T, fewer rows than
 * tokens). The large ones run only where that kernel does (on a CPU device their
 * reference alone takes minutes). */
/* clang-format off */
static const scase g_h2o_cases[] = {
    {"h2o_mma_h32x8_d128_bf16_T17_len17_1", CLKV_SCORE_H2O, 2, 32, 8, 128, 17, 17, BF16, F32, TU_HND, {17, 1}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 2.0, 0},
    {"h2o_mma_h14x2_d64_f16_nhd_T40_len16_15", CLKV_SCORE_H2O, 2, 14, 2, 64, 40, 40, F16, F32, TU_NHD, {16, 15}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 2.0, 0},
    {"h2o_mma_h8x8_d128_bf16_T100_nolengths", CLKV_SCORE_H2O, 1, 8, 8, 128, 100, 100, BF16, F32, TU_HND, {0}, 0, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 3.0, 0},
    /* fewer query rows than tokens (W < n: rows see every key before n - W); one row piece, then two */
    {"h2o_mma_h8x2_d128_bf16_W100_len300_250", CLKV_SCORE_H2O, 2, 8, 2, 128, 100, 300, BF16, F32, TU_HND, {300, 250}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 2.0, 0},
    {"h2o_mma_h8x2_d64_f16_W300_len997", CLKV_SCORE_H2O, 1, 8, 2, 64, 300, 1000, F16, F32, TU_NHD, {997}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 2.0, 0},
    {"h2o_mma_h32x8_d128_bf16_T1000_len1000_15", CLKV_SCORE_H2O, 2, 32, 8, 128, 1000, 1000, BF16, F32, TU_HND, {1000, 15}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 2.0, 0},
    {"h2o_mma_h14x2_d128_f16_T1000_len999", CLKV_SCORE_H2O, 1, 14, 2, 128, 1000, 1000, F16, F32, TU_NHD, {999}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 2.0, 0},
    {"h2o_mma_h8x8_d64_bf16_T4099_len4099_17", CLKV_SCORE_H2O, 2, 8, 8, 64, 4099, 4099, BF16, F32, TU_HND, {4099, 17}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 2.0, 0},
    /* D 256: 64-row stages in static local memory past 48 KiB */
    {"h2o_mma_h16x4_d256_bf16_T300_len300_250", CLKV_SCORE_H2O, 2, 16, 4, 256, 300, 300, BF16, F32, TU_HND, {300, 250}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 2.0, 0},
    {"h2o_mma_h8x2_d256_f16_nhd_T1000_len997", CLKV_SCORE_H2O, 1, 8, 2, 256, 1000, 1000, F16, F32, TU_NHD, {997}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 2.0, 0},
};
/* clang-format on */

/* KNorm / KeyDiff with rows of more 16-byte chunks than work-items per row: work-groups of
 * 64 ($CLKV_SCORE_KEY_WG, as on devices with small work-groups) over D = 1000 f32 rows
 * (250 chunks: 4 per work-item), and D = 36 bf16 rows (not whole chunks: element loads). */
/* clang-format off */
static const scase g_key_wg_cases[] = {
    {"knorm_wg64_d1000_f32_len300_77", CLKV_SCORE_KNORM, 2, 2, 2, 1000, 0, 300, F32, F32, TU_HND, {300, 77}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 1.0, 0},
    {"keydiff_wg64_d1000_f32_nhd_len290", CLKV_SCORE_KEYDIFF, 1, 4, 2, 1000, 0, 300, F32, F32, TU_NHD, {290}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 1.0, 0},
    {"keydiff_d36_bf16_len500_1", CLKV_SCORE_KEYDIFF, 2, 2, 2, 36, 0, 500, BF16, F32, TU_HND, {500, 1}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 1.0, 0},
    /* zero key (and value) rows: every 5th / 3rd / 4th / 7th, or all (mu = 0: every KeyDiff score 0) */
    {"keydiff_zero_rows5_d128_bf16_len700_333", CLKV_SCORE_KEYDIFF, 2, 8, 2, 128, 0, 700, BF16, F32, TU_HND, {700, 333}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 1.0, 5},
    {"knorm_zero_rows3_d64_f32_len150", CLKV_SCORE_KNORM, 1, 4, 2, 64, 0, 200, F32, F32, TU_NHD, {150}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 1.0, 3},
    {"keydiff_rawmean_zero_rows4_d64_f16", CLKV_SCORE_KEYDIFF, 1, 4, 4, 64, 0, 300, F16, F32, TU_HND, {299}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 1, 0, 0, 0, 1.0, 4},
    {"keydiff_all_zero_d64_f16_nhd", CLKV_SCORE_KEYDIFF, 1, 4, 4, 64, 0, 300, F16, F32, TU_NHD, {300}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 1.0, -1},
    {"dropkv_zero_rows7_d64_bf16_len300", CLKV_SCORE_DROPKV, 1, 8, 2, 64, 8, 300, BF16, F32, TU_HND, {300}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 2.0, 7},
};
/* clang-format on */

/* Method defaults as documented in include/clkv/score.h. */
static void resolve_defaults(const scase *c, ref_score_cfg *r) {
    int pool = 0, k = 1, excl = 0;
    int64_t protect = 0;
    switch (c->method) {
    case CLKV_SCORE_DROPKV:
        pool = 1, k = 11, protect = c->W;
        break;
    case CLKV_SCORE_SNAPKV:
    case CLKV_SCORE_CRITICALKV:
        pool = 1, k = 5, excl = 1, protect = c->W;
        break;
    case CLKV_SCORE_ANDPRO:
    case CLKV_SCORE_DIFFKV:
        protect = c->W;
        break;
    default:
        break;
    }
    if (c->pool != CLKV_POOL_DEFAULT)
        pool = c->pool;
    if (c->pool_k > 0)
        k = c->pool_k;
    if (k == 1)
        pool = 0;
    if (c->protect >= 0)
        protect = c->protect;
    r->pool = pool;
    r->pool_k = pool ? k : 1;
    r->pool_excl_window = excl;
    r->protect = protect;
}

typedef struct score_io {
    float *q, *k, *v, *lse, *a, *wo; /* host copies as stored */
    int32_t lens[2];
    double *ref, *tau, *refp;
    clkv_score_args args;
} score_io;

static void free_io(score_io *io) {
    free(io->q), free(io->k), free(io->v), free(io->lse), free(io->a), free(io->wo);
    free(io->ref), free(io->tau), free(io->refp);
    tu_release(io->args.q.buf);
    tu_release(io->args.k.buf);
    tu_release(io->args.v.buf);
    tu_release(io->args.lse.buf);
    tu_release(io->args.a.buf);
    tu_release(io->args.w_o.buf);
    tu_release(io->args.lengths.buf);
    tu_release(io->args.scores.buf);
    tu_release(io->args.pbar.buf);
    memset(io, 0, sizeof *io);
}

/* Build inputs, device tensors and the reference for case c (seed stream `stream`). */
static void setup_case(const scase *c, uint64_t stream, score_io *io) {
    memset(io, 0, sizeof *io);
    const int64_t B = c->B, Hq = c->Hq, Hkv = c->Hkv, D = c->D, L = c->L;
    const int win = clkv_score_method_uses_window(c->method);
    const int64_t W = win ? c->W : 1;
    const int64_t maxlen = c->max_length < 0 ? L : c->max_length;
    tu_rng rng;
    tu_rng_seed(&rng, tu_seed(DEFAULT_SEED), stream);
    const size_t nkv = (size_t)(B * Hkv * L * D), nq = (size_t)(B * Hq * W * D);
    io->k = (float *)tu_malloc(nkv * sizeof(float));
    io->v = (float *)tu_malloc(nkv * sizeof(float));
    io->q = (float *)tu_malloc(nq * sizeof(float));
    tu_fill_normal(&rng, io->k, nkv, 0.0, 1.0);
    tu_fill_normal(&rng, io->v, nkv, 0.0, 1.0);
    tu_fill_normal(&rng, io->q, nq, 0.0, c->qscale);
    for (int64_t b = 0; b < B; b++) {
        int64_t n = c->has_lengths ? c->lens[b] : maxlen;
        io->lens[b] = (int32_t)(n > maxlen ? maxlen : n);
    }
    /* zero rows: ||k|| = 0 (KNorm 0, KeyDiff's cosine 0, and no share of its mean) */
    for (int64_t b = 0; b < B && c->zero_every; b++)
        for (int64_t h = 0; h < Hkv; h++)
            for (int64_t j = 0; j < io->lens[b]; j++)
                if (c->zero_every < 0 || j % c->zero_every == 0)
                    for (int64_t e = 0; e < D; e++) {
                        io->k[((b * Hkv + h) * L + j) * D + e] = 0.0f;
                        io->v[((b * Hkv + h) * L + j) * D + e] = 0.0f;
                    }
    /* rows past the valid length: garbage that would change any score reading it */
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hkv; h++)
            for (int64_t j = io->lens[b]; j < L; j++)
                for (int64_t e = 0; e < D; e++) {
                    io->k[((b * Hkv + h) * L + j) * D + e] = 1000.0f;
                    io->v[((b * Hkv + h) * L + j) * D + e] = 1000.0f;
                }
    tu_round_array(c->dt, io->k, nkv);
    tu_round_array(c->dt, io->v, nkv);
    tu_round_array(c->dt, io->q, nq);
    const double scale = 1.0 / sqrt((double)D);

    clkv_score_args a = CLKV_SCORE_ARGS_INIT;
    a.method = c->method;
    a.k = tu_kv_tensor_offset(g_ctx, io->k, c->dt, B, Hkv, L, D, c->layout, 64);
    if (c->method == CLKV_SCORE_DROPKV || c->method == CLKV_SCORE_ANDPRO ||
        c->method == CLKV_SCORE_CRITICALKV)
        a.v = tu_kv_tensor_offset(g_ctx, io->v, c->dt, B, Hkv, L, D, c->layout,
                                  c->dt == F32 ? 32 : 34); /* 16-bit: rows not 16-byte aligned */
    if (c->has_lengths) {
        const int64_t bd[1] = {B};
        a.lengths = tu_tensor_upload_i32(g_ctx, c->lens, 1, bd, 4, 8);
    }
    a.max_length = c->max_length;
    if (win) {
        const int64_t qd[4] = {B, Hq, W, D}, ld[3] = {B, Hq, W};
        a.q = tu_tensor_upload(g_ctx, io->q, c->dt, 4, qd, 16, 8);
        double *lse = (double *)tu_malloc((size_t)(B * Hq * W) * sizeof(double));
        double *o = (double *)tu_malloc(nq * sizeof(double));
        assert_int_equal(ref_attention_window(B, Hq, Hkv, W, L, D, io->q, io->k, io->v, io->lens,
                                              scale, o, lse, NULL),
                         0);
        io->lse = (float *)tu_malloc((size_t)(B * Hq * W) * sizeof(float));
        io->a = (float *)tu_malloc(nq * sizeof(float));
        for (size_t i = 0; i < (size_t)(B * Hq * W); i++)
            io->lse[i] = (float)lse[i];
        for (size_t i = 0; i < nq; i++)
            io->a[i] = tu_round_dtype(c->adt, (float)o[i]);
        free(lse);
        free(o);
        a.lse = tu_tensor_upload(g_ctx, io->lse, F32, 3, ld, 4, 4);
        if (c->method == CLKV_SCORE_DROPKV || c->method == CLKV_SCORE_ANDPRO)
            a.a = tu_tensor_upload(g_ctx, io->a, c->adt, 4, qd, 8, 8);
        if (c->Dm > 0) {
            const size_t nw = (size_t)(Hq * D * c->Dm);
            const int64_t wd[3] = {Hq, D, c->Dm};
            io->wo = (float *)tu_malloc(nw * sizeof(float));
            tu_fill_normal(&rng, io->wo, nw, 0.0, 0.1);
            tu_round_array(c->dt, io->wo, nw);
            a.w_o = tu_tensor_upload(g_ctx, io->wo, c->dt, 3, wd, 0, 4);
        }
    }
    const int64_t sd[3] = {B, Hkv, L};
    a.scores = tu_tensor_alloc(g_ctx, F32, 3, sd, 16, 32);
    if (c->want_pbar)
        a.pbar = tu_tensor_alloc(g_ctx, F32, 3, sd, 8, 16);
    a.pool = c->pool;
    a.pool_kernel = c->pool_k;
    a.protect = c->protect;
    a.dropkv_round_p = c->round_p;
    a.keydiff_raw_mean = c->raw_mean;
    a.sink = 4;
    a.recent = c->method == CLKV_SCORE_STREAMINGLLM ? 10 : 0;
    io->args = a;

    ref_score_cfg r;
    memset(&r, 0, sizeof r);
    r.method = c->method;
    r.B = B, r.Hq = win ? Hq : Hkv, r.Hkv = Hkv, r.L = L, r.D = D, r.W = win ? W : 0;
    r.q = io->q, r.k = io->k, r.v = io->v, r.lse = io->lse, r.a = io->a, r.w_o = io->wo;
    r.Dm = c->Dm;
    r.len = io->lens;
    r.scale = scale;
    r.eps = 1e-6f;
    r.round_p = c->round_p;
    r.kv_dtype = c->dt;
    r.sink = a.sink, r.recent = a.recent;
    r.keydiff_raw_mean = c->raw_mean;
    resolve_defaults(c, &r);
    const size_t ns = (size_t)(B * Hkv * L);
    io->ref = (double *)tu_malloc(ns * sizeof(double));
    io->tau = (double *)tu_malloc(ns * sizeof(double));
    io->refp = (double *)tu_malloc(ns * sizeof(double));
    assert_int_equal(ref_score(&r, io->ref, io->tau, io->refp), 0);
    for (size_t i = 0; i < ns; i++)
        io->tau[i] += 1e-20;
}

static void run_case_stream(const scase *c, uint64_t stream) {
    tu_set_case("%s", c->name);
    const double t0 = tu_now();
    score_io io;
    setup_case(c, stream, &io);
    const double t1 = tu_now();
    clkv__score_force_tpr(c->force_tpr);
    size_t ws = 0;
    TU_CHECK_OK(g_ctx, clkv_score_workspace_size(g_ctx, &io.args, &ws));
    cl_event ev = NULL;
    clkv_status st = clkv_score(g_ctx, &io.args, &ev);
    clkv__score_force_tpr(0);
    TU_CHECK_OK(g_ctx, st);
    assert_non_null(ev);
    TU_CHECK_CL(clWaitForEvents(1, &ev));
    clReleaseEvent(ev);
    const double t2 = tu_now();
    const size_t ns = (size_t)(c->B * c->Hkv * c->L);
    float *got = (float *)tu_malloc(ns * sizeof(float));
    tu_tensor_read(g_ctx, &io.args.scores, got);
    const int64_t dims[3] = {c->B, c->Hkv, c->L};
    const tu_tol tol = {1e-4, 0.0};
    tu_assert_close_ex("scores", got, io.ref, ns, tol, io.tau, 3, dims);
    tu_assert_written_exactly(g_ctx, &io.args.scores, "scores");
    if (c->want_pbar) {
        tu_tensor_read(g_ctx, &io.args.pbar, got);
        const tu_tol ptol = {1e-4, 1e-20};
        tu_assert_close("pbar", got, io.refp, ns, ptol, 3, dims);
        tu_assert_written_exactly(g_ctx, &io.args.pbar, "pbar");
    }
    printf("[ timing   ] %-44s setup+ref %.2f s, clkv_score %.3f s\n", c->name, t1 - t0, t2 - t1);
    free(got);
    free_io(&io);
}

static void run_case(void **state) {
    const scase *c = (const scase *)*state;
    run_case_stream(c, (uint64_t)(c - g_cases) + 1);
}

static void run_key_wg_case(void **state) {
    const scase *c = (const scase *)*state;
    const int wg64 = strstr(c->name, "_wg64_") != NULL;
    if (wg64)
        setenv("CLKV_SCORE_KEY_WG", "64", 1);
    run_case_stream(c, (uint64_t)(c - g_key_wg_cases) + 2001);
    if (wg64)
        unsetenv("CLKV_SCORE_KEY_WG");
}

static void run_h2o_case(void **state) {
    const scase *c = (const scase *)*state;
    if (c->B * c->Hq * c->W * c->L * c->D > 1000000000 &&
        !clkv_context_device_info(g_ctx)->nvidia_ptx) {
        printf("[ skip     ] %s: runs where the tensor-core H2O kernel does (NVIDIA)\n", c->name);
        skip();
    }
    run_case_stream(c, (uint64_t)(c - g_h2o_cases) + 1001);
}

/* ------------------------------------------------------------------------------------ */
/* Keep-set                                                                             */
/* ------------------------------------------------------------------------------------ */

static void test_keep_formula(void **state) {
    (void)state;
    /* n <= W keeps all; n = 0 keeps 0; ratio floor; budget; window floor; at least 1 */
    const struct {
        int64_t n;
        double ratio;
        int64_t budget, window, want;
    } t[] = {
        {0, 0.1, -1, 8, 0},    {1, 0.1, -1, 8, 1},      {8, 0.1, -1, 8, 8}, {9, 0.1, -1, 8, 8},
        {100, 0.1, -1, 8, 10}, {4101, 0.1, -1, 8, 410}, {5, 0.0, -1, 0, 1}, {100, 0.5, 30, 8, 30},
        {100, 0.5, 3, 8, 8},   {100, 1.0, -1, 0, 100},  {7, 0.3, -1, 0, 2}, {1000, 0.001, -1, 0, 1},
        {20, 0.1, 500, 0, 20}, {3, 0.1, 0, 0, 1},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        tu_set_case("keep n=%" PRId64 " ratio=%g budget=%" PRId64 " W=%" PRId64, t[i].n, t[i].ratio,
                    t[i].budget, t[i].window);
        assert_int_equal(ref_keep_count(t[i].n, t[i].ratio, t[i].budget, t[i].window), t[i].want);
        assert_int_equal(clkv_keep_count(t[i].n, t[i].ratio, t[i].budget, t[i].window), t[i].want);
    }
}

/* Reference keep-set on the device's f32 scores: the one-stage selection, or the
 * two-stage one documented in score.h. Returns the count; out ascending. */
static int64_t ref_keep_set(const float *s, const float *pb, int64_t n, int64_t keep, double r1,
                            int32_t *out) {
    if (!pb)
        return ref_select_topk(s, n, keep, 1, out);
    const int64_t k1 = (int64_t)((double)keep * r1);
    float *boost = (float *)tu_malloc((size_t)(n ? n : 1) * sizeof(float));
    memcpy(boost, s, (size_t)n * sizeof(float));
    int32_t *first = (int32_t *)tu_malloc((size_t)(k1 ? k1 : 1) * sizeof(int32_t));
    const int64_t c1 = ref_select_topk(pb, n, k1, 1, first);
    for (int64_t i = 0; i < c1; i++)
        if (boost[first[i]] != INFINITY)
            boost[first[i]] = FLT_MAX;
    const int64_t c = ref_select_topk(boost, n, keep, 1, out);
    free(boost);
    free(first);
    return c;
}

/* keep-set on given device scores [B, H, N]; compare with the reference exactly. */
static void check_keep_set(const float *scores, const float *pbar, int64_t B, int64_t H, int64_t N,
                           const int32_t *lens, double ratio, int64_t budget, int64_t window) {
    const int64_t sd[3] = {B, H, N}, bd[1] = {B}, cd[2] = {B, H};
    const int64_t K = clkv_keep_count(N, ratio, budget, window) + 3;
    const int64_t id[3] = {B, H, K};
    clkv_keep_set_args a = CLKV_KEEP_SET_ARGS_INIT;
    a.scores = tu_tensor_upload(g_ctx, scores, F32, 3, sd, 4, 4);
    if (pbar)
        a.pbar = tu_tensor_upload(g_ctx, pbar, F32, 3, sd, 8, 4);
    a.lengths = tu_tensor_upload_i32(g_ctx, lens, 1, bd, 0, 4);
    a.indices = tu_tensor_alloc(g_ctx, CLKV_I32, 3, id, 12, 8);
    a.counts = tu_tensor_alloc(g_ctx, CLKV_I32, 2, cd, 4, 4);
    a.ratio = ratio;
    a.budget = budget;
    a.window = window;
    size_t ws = 0;
    TU_CHECK_OK(g_ctx, clkv_keep_set_workspace_size(g_ctx, &a, &ws));
    cl_event ev = NULL;
    TU_CHECK_OK(g_ctx, clkv_keep_set(g_ctx, &a, &ev));
    TU_CHECK_CL(clWaitForEvents(1, &ev));
    clReleaseEvent(ev);
    const size_t ni = (size_t)(B * H * K);
    float *gi = (float *)tu_malloc(ni * sizeof(float));
    float *gc = (float *)tu_malloc((size_t)(B * H) * sizeof(float));
    int32_t *want = (int32_t *)tu_malloc((size_t)(N + 1) * sizeof(int32_t));
    tu_tensor_read(g_ctx, &a.indices, gi);
    tu_tensor_read(g_ctx, &a.counts, gc);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            const int64_t row = b * H + h, n = lens[b];
            const int64_t keep = ref_keep_count(n, ratio, budget, window);
            const int64_t c =
                ref_keep_set(scores + row * N, pbar ? pbar + row * N : NULL, n, keep, 0.5, want);
            if (c != keep || (int64_t)gc[row] != keep)
                TU_FAIL("b=%" PRId64 " h=%" PRId64 " n=%" PRId64 ": count %g, ref %" PRId64
                        " (keep %" PRId64 ")",
                        b, h, n, (double)gc[row], c, keep);
            for (int64_t i = 0; i < K; i++) {
                const int32_t e = i < c ? want[i] : -1;
                if ((int32_t)gi[row * K + i] != e)
                    TU_FAIL("b=%" PRId64 " h=%" PRId64 ": indices[%" PRId64 "] = %d, want %d", b, h,
                            i, (int)gi[row * K + i], e);
            }
        }
    tu_assert_written_exactly(g_ctx, &a.indices, "indices");
    free(gi), free(gc), free(want);
    tu_release(a.scores.buf);
    tu_release(a.pbar.buf);
    tu_release(a.lengths.buf);
    tu_release(a.indices.buf);
    tu_release(a.counts.buf);
}

static void test_keep_set(void **state) {
    (void)state;
    const int64_t B = 2, H = 3, N = 4101;
    tu_rng rng;
    tu_rng_seed(&rng, tu_seed(DEFAULT_SEED), 101);
    float *s = (float *)tu_malloc((size_t)(B * H * N) * sizeof(float));
    float *p = (float *)tu_malloc((size_t)(B * H * N) * sizeof(float));
    tu_fill_normal(&rng, s, (size_t)(B * H * N), 0.0, 1.0);
    tu_fill_normal(&rng, p, (size_t)(B * H * N), 0.0, 1.0);
    for (int64_t i = 0; i < B * H * N; i += 7) /* ties */
        s[i] = 0.5f;
    const int32_t lens_sets[4][2] = {{4101, 100}, {8, 9}, {0, 1}, {4096, 17}};
    for (int t = 0; t < 4; t++) {
        const int32_t *lens = lens_sets[t];
        /* protection like clkv_score: the last W = 8 tokens +inf, the tail -inf */
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t j = 0; j < N; j++) {
                    float *x = &s[(b * H + h) * N + j];
                    float *y = &p[(b * H + h) * N + j];
                    if (j >= lens[b])
                        *x = *y = -INFINITY;
                    else if (j >= lens[b] - 8)
                        *x = *y = INFINITY;
                    else if (!isfinite(*x))
                        *x = 0.25f, *y = 0.125f;
                }
        tu_set_case("keep_set ratio lens %d,%d", lens[0], lens[1]);
        check_keep_set(s, NULL, B, H, N, lens, 0.1, -1, 8);
        tu_set_case("keep_set budget lens %d,%d", lens[0], lens[1]);
        check_keep_set(s, NULL, B, H, N, lens, 0.1, 50, 8);
        tu_set_case("keep_set two-stage lens %d,%d", lens[0], lens[1]);
        check_keep_set(s, p, B, H, N, lens, 0.3, -1, 8);
    }
    free(s);
    free(p);
}

/* Scores of a window case -> keep-set; compared with the reference scores as sets,
 * disagreements allowed only within 1e-5 relative (+ tau) of the selection threshold. */
static void score_then_keep(const scase *cp, uint64_t stream) {
    const scase c = *cp;
    tu_set_case("%s", c.name);
    score_io io;
    setup_case(&c, stream, &io);
    TU_CHECK_OK(g_ctx, clkv_score(g_ctx, &io.args, NULL));
    const int64_t KW = c.method == CLKV_SCORE_H2O ? 0 : c.W; /* the protected window */
    const int64_t B = c.B, H = c.Hkv, L = c.L, K = clkv_keep_count(L, 0.1, -1, KW);
    const int64_t id[3] = {B, H, K};
    clkv_keep_set_args k = CLKV_KEEP_SET_ARGS_INIT;
    k.scores = io.args.scores;
    k.lengths = io.args.lengths;
    k.indices = tu_tensor_alloc(g_ctx, CLKV_I32, 3, id, 0, 0);
    k.window = KW;
    TU_CHECK_OK(g_ctx, clkv_keep_set(g_ctx, &k, NULL));
    float *gi = (float *)tu_malloc((size_t)(B * H * K) * sizeof(float));
    tu_tensor_read(g_ctx, &k.indices, gi);
    int32_t *want = (int32_t *)tu_malloc((size_t)L * sizeof(int32_t));
    float *rf = (float *)tu_malloc((size_t)L * sizeof(float));
    char *in_got = (char *)tu_malloc((size_t)L);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            const int64_t row = b * H + h, n = io.lens[b], keep = ref_keep_count(n, 0.1, -1, KW);
            for (int64_t j = 0; j < n; j++)
                rf[j] = (float)io.ref[row * L + j];
            const int64_t cnt = ref_select_topk(rf, n, keep, 1, want);
            assert_int_equal(cnt, keep);
            double thr = INFINITY;
            for (int64_t i = 0; i < cnt; i++)
                thr = fmin(thr, io.ref[row * L + want[i]]);
            memset(in_got, 0, (size_t)L);
            for (int64_t i = 0; i < K; i++) {
                const int32_t j = (int32_t)gi[row * K + i];
                if (i < keep) {
                    assert_true(j >= 0 && j < n);
                    in_got[j] = 1;
                } else
                    assert_int_equal(j, -1);
            }
            for (int64_t i = 0; i < cnt; i++)
                in_got[want[i]] |= 2;
            for (int64_t j = 0; j < n; j++)
                if (in_got[j] == 1 || in_got[j] == 2) {
                    const double r = io.ref[row * L + j];
                    const double allow =
                        1e-5 * fabs(thr) + 2 * io.tau[row * L + j] + 1e-4 * fabs(r);
                    if (fabs(r - thr) > allow)
                        TU_FAIL("b=%" PRId64 " h=%" PRId64 ": token %" PRId64
                                " (ref %.9g) %s, threshold %.9g",
                                b, h, j, r, in_got[j] == 1 ? "kept, not in ref" : "evicted", thr);
                }
        }
    free(gi), free(want), free(rf), free(in_got);
    tu_release(k.indices.buf);
    free_io(&io);
}

static void test_score_then_keep(void **state) {
    (void)state;
    /* clang-format off */
    static const scase cases[] = {
        {"e2e_dropkv", CLKV_SCORE_DROPKV, 2, 8, 2, 64, 8, 500, BF16, F32, TU_HND, {500, 77}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 2.0, 0},
        {"e2e_snapkv", CLKV_SCORE_SNAPKV, 2, 14, 2, 128, 16, 700, F16, F32, TU_NHD, {700, 40}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 2.0, 0},
        {"e2e_diffkv", CLKV_SCORE_DIFFKV, 1, 8, 2, 64, 64, 600, F32, F32, TU_HND, {600}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 2.0, 0},
        {"e2e_h2o", CLKV_SCORE_H2O, 1, 4, 2, 64, 160, 160, BF16, F32, TU_HND, {160}, 1, -1, CLKV_POOL_DEFAULT, 0, -1, 0, 0, 0, 0, 0, 2.0, 0},
    };
    /* clang-format on */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        score_then_keep(&cases[i], 200 + i);
}

/* DropKV planted case: token 10's value equals the attention output (distance 0), token
 * 40's is far from it; both are equally attended (all keys equal). Evicting one token
 * must evict token 10 and keep token 40. */
static void test_dropkv_planted(void **state) {
    (void)state;
    const int64_t L = 64, D = 64, W = 1;
    tu_set_case("dropkv planted");
    tu_rng rng;
    tu_rng_seed(&rng, tu_seed(DEFAULT_SEED), 300);
    float *k = (float *)tu_malloc((size_t)(L * D) * sizeof(float));
    float *v = (float *)tu_malloc((size_t)(L * D) * sizeof(float));
    float *q = (float *)tu_malloc((size_t)D * sizeof(float));
    tu_fill_normal(&rng, q, (size_t)D, 0.0, 1.0);
    tu_fill_normal(&rng, k, (size_t)D, 0.0, 1.0);
    for (int64_t j = 1; j < L; j++)
        memcpy(k + j * D, k, (size_t)D * sizeof(float));
    tu_fill_normal(&rng, v, (size_t)(L * D), 0.0, 1.0);
    for (int64_t e = 0; e < D; e++)
        v[40 * D + e] += 8.0f; /* far from the mean */
    /* v_10 = mean of the other 63 values, so that a = mean of all = v_10 */
    for (int64_t e = 0; e < D; e++) {
        double s = 0;
        for (int64_t j = 0; j < L; j++)
            if (j != 10)
                s += v[j * D + e];
        v[10 * D + e] = (float)(s / 63.0);
    }
    double a[64], lse[1];
    assert_int_equal(ref_attention_window(1, 1, 1, W, L, D, q, k, v, NULL, 0.125, a, lse, NULL), 0);
    float af[64], lf = (float)lse[0];
    for (int64_t e = 0; e < D; e++)
        af[e] = (float)a[e];
    const int64_t kd[4] = {1, 1, L, D}, qd[4] = {1, 1, 1, D}, ld[3] = {1, 1, 1}, sd[3] = {1, 1, L};
    clkv_score_args s = CLKV_SCORE_ARGS_INIT;
    s.method = CLKV_SCORE_DROPKV;
    s.q = tu_tensor_upload(g_ctx, q, F32, 4, qd, 0, 0);
    s.k = tu_tensor_upload(g_ctx, k, F32, 4, kd, 0, 0);
    s.v = tu_tensor_upload(g_ctx, v, F32, 4, kd, 0, 0);
    s.lse = tu_tensor_upload(g_ctx, &lf, F32, 3, ld, 0, 0);
    s.a = tu_tensor_upload(g_ctx, af, F32, 4, qd, 0, 0);
    s.scores = tu_tensor_alloc(g_ctx, F32, 3, sd, 0, 0);
    s.pool = CLKV_POOL_NONE;
    TU_CHECK_OK(g_ctx, clkv_score(g_ctx, &s, NULL));
    float sc[64];
    tu_tensor_read(g_ctx, &s.scores, sc);
    for (int64_t j = 0; j < L - 1; j++)
        if (j != 10 && !(sc[j] > sc[10]))
            TU_FAIL("score[%" PRId64 "] = %g not above the planted token's %g", j, (double)sc[j],
                    (double)sc[10]);
    const int64_t id[3] = {1, 1, L - 1};
    clkv_keep_set_args ks = CLKV_KEEP_SET_ARGS_INIT;
    ks.scores = s.scores;
    ks.indices = tu_tensor_alloc(g_ctx, CLKV_I32, 3, id, 0, 0);
    ks.budget = L - 1;
    ks.window = W;
    TU_CHECK_OK(g_ctx, clkv_keep_set(g_ctx, &ks, NULL));
    float idx[63];
    tu_tensor_read(g_ctx, &ks.indices, idx);
    int has40 = 0;
    for (int i = 0; i < 63; i++) {
        if ((int)idx[i] == 10)
            TU_FAIL("planted token 10 was kept");
        has40 |= (int)idx[i] == 40;
    }
    assert_true(has40);
    tu_release(s.q.buf), tu_release(s.k.buf), tu_release(s.v.buf), tu_release(s.lse.buf);
    tu_release(s.a.buf), tu_release(s.scores.buf), tu_release(ks.indices.buf);
    free(k), free(v), free(q);
}

/* ------------------------------------------------------------------------------------ */
/* Names and bad inputs                                                                 */
/* ------------------------------------------------------------------------------------ */

static void test_method_names(void **state) {
    (void)state;
    tu_set_case("method names");
    for (int i = 0; i < CLKV_SCORE_METHOD_COUNT; i++) {
        clkv_score_method m;
        TU_CHECK_OK(NULL,
                    clkv_score_method_from_name(clkv_score_method_name((clkv_score_method)i), &m));
        assert_int_equal((int)m, i);
    }
    clkv_score_method m = CLKV_SCORE_SNAPKV;
    assert_int_equal(clkv_score_method_from_name("dropkv", &m), CLKV_OK);
    assert_int_equal(m, CLKV_SCORE_DROPKV);
    assert_int_equal(clkv_score_method_from_name("DropKV", &m), CLKV_ERR_ARG_RANGE);
    assert_true(tu_msg_names(clkv_last_error(NULL), "name"));
    assert_non_null(strstr(clkv_last_error(NULL), "streamingllm"));
    assert_non_null(strstr(clkv_last_error(NULL), "snapkv"));
    assert_int_equal(clkv_score_method_from_name(NULL, &m), CLKV_ERR_ARG_NULL);
    assert_true(tu_msg_names(clkv_last_error(NULL), "name"));
    assert_int_equal(clkv_score_method_from_name("h2o", NULL), CLKV_ERR_ARG_NULL);
    assert_true(tu_msg_names(clkv_last_error(NULL), "out"));
    assert_string_equal(clkv_score_method_name((clkv_score_method)99), "?");
    assert_int_equal(clkv_score_method_uses_window(CLKV_SCORE_H2O), 1);
    assert_int_equal(clkv_score_method_uses_window(CLKV_SCORE_KNORM), 0);
}

static void expect_reject(clkv_status st, clkv_status want, const char *name, cl_mem out,
                          cl_event ev, const char *what) {
    const clkv_context *mctx = strcmp(name, "ctx") == 0 ? NULL : g_ctx;
    tu_set_case("bad input: %s", what);
    if (st != want)
        TU_FAIL("status %s (%d), expected %s; message: %s", clkv_status_string(st), st,
                clkv_status_string(want), clkv_last_error(mctx));
    if (!tu_msg_names(clkv_last_error(mctx), name))
        TU_FAIL("message \"%s\" does not name \"%s\"", clkv_last_error(mctx), name);
    assert_null(ev);
    clFinish(clkv_context_queue(g_ctx));
    if (out)
        tu_assert_buffer_poison(g_ctx, out, what);
}

static void test_score_bad_inputs(void **state) {
    (void)state;
    const scase c = {
        "bad", CLKV_SCORE_CRITICALKV, 2, 4,  2, 64, 4, 32, F32, F32, TU_HND, {32, 5}, 1,
        -1,    CLKV_POOL_DEFAULT,     0, -1, 0, 0,  0, 1,  0,   1.0, 0};
    score_io io;
    setup_case(&c, 400, &io);
    /* DropKV-shaped a tensor for the a checks */
    const int64_t qd[4] = {2, 4, 4, 64};
    clkv_tensor at = tu_tensor_upload(g_ctx, io.a, F32, 4, qd, 0, 0);
    const int64_t wd[3] = {4, 64, 8};
    clkv_tensor wo = tu_tensor_upload(g_ctx, io.q, F32, 3, wd, 0, 0);
    const clkv_score_args base = io.args;
    const cl_mem out = base.scores.buf;
    clkv_score_args a;
    cl_event ev = NULL;
    size_t bytes;
    expect_reject(clkv_score(NULL, &base, &ev), CLKV_ERR_ARG_NULL, "ctx", NULL, ev, "ctx");
    expect_reject(clkv_score(g_ctx, NULL, &ev), CLKV_ERR_ARG_NULL, "args", out, ev, "args");
    expect_reject(clkv_score_workspace_size(g_ctx, &base, NULL), CLKV_ERR_ARG_NULL, "bytes", out,
                  NULL, "bytes");
#define BAD(mut, want, name)                                                                       \
    do {                                                                                           \
        a = base;                                                                                  \
        mut;                                                                                       \
        ev = NULL;                                                                                 \
        expect_reject(clkv_score(g_ctx, &a, &ev), want, name, out, ev, #mut);                      \
        expect_reject(clkv_score_workspace_size(g_ctx, &a, &bytes), want, name, out, NULL,         \
                      #mut " (workspace_size)");                                                   \
        tu_assert_buffer_poison(g_ctx, base.pbar.buf, #mut " (pbar)");                             \
    } while (0)
    BAD(a.method = (clkv_score_method)42, CLKV_ERR_ARG_RANGE, "method");
    BAD(a.k.buf = NULL, CLKV_ERR_ARG_NULL, "k");
    BAD(a.v.buf = NULL, CLKV_ERR_ARG_NULL, "v");
    BAD(a.q.buf = NULL, CLKV_ERR_ARG_NULL, "q");
    BAD(a.lse.buf = NULL, CLKV_ERR_ARG_NULL, "lse");
    BAD(a.scores.buf = NULL, CLKV_ERR_ARG_NULL, "scores");
    BAD((a.method = CLKV_SCORE_DROPKV, a.pbar.buf = NULL), CLKV_ERR_ARG_NULL, "a");
    BAD((a.method = CLKV_SCORE_ANDPRO, a.pbar.buf = NULL, a.a = at, a.a.dims[2] = 3),
        CLKV_ERR_ARG_SHAPE, "a");
    BAD((a.method = CLKV_SCORE_ANDPRO, a.pbar.buf = NULL, a.a = at, a.a.dtype = CLKV_I32),
        CLKV_ERR_ARG_DTYPE, "a");
    BAD(a.method = CLKV_SCORE_SNAPKV, CLKV_ERR_ARG_UNSUPPORTED, "pbar");
    BAD((a.method = CLKV_SCORE_SNAPKV, a.pbar.buf = NULL, a.w_o = wo), CLKV_ERR_ARG_UNSUPPORTED,
        "w_o");
    BAD((a.w_o = wo, a.w_o.dims[0] = 3), CLKV_ERR_ARG_SHAPE, "w_o");
    BAD((a.w_o = wo, a.w_o.dims[1] = 32), CLKV_ERR_ARG_SHAPE, "w_o");
    BAD((a.w_o = wo, a.w_o.dtype = CLKV_I32), CLKV_ERR_ARG_DTYPE, "w_o");
    BAD(a.k.dtype = CLKV_I32, CLKV_ERR_ARG_DTYPE, "k");
    BAD(a.v.dtype = CLKV_F16, CLKV_ERR_ARG_DTYPE, "v");
    BAD(a.q.dtype = CLKV_U8, CLKV_ERR_ARG_DTYPE, "q");
    BAD(a.lse.dtype = CLKV_F16, CLKV_ERR_ARG_DTYPE, "lse");
    BAD(a.scores.dtype = CLKV_BF16, CLKV_ERR_ARG_DTYPE, "scores");
    BAD(a.pbar.dtype = CLKV_I32, CLKV_ERR_ARG_DTYPE, "pbar");
    BAD(a.lengths.dtype = CLKV_F32, CLKV_ERR_ARG_DTYPE, "lengths");
    BAD(a.scores.dims[2] = 31, CLKV_ERR_ARG_SHAPE, "scores");
    BAD(a.pbar.dims[1] = 1, CLKV_ERR_ARG_SHAPE, "pbar");
    BAD(a.v.dims[2] = 31, CLKV_ERR_ARG_SHAPE, "v");
    BAD(a.q.dims[0] = 1, CLKV_ERR_ARG_SHAPE, "q");
    BAD(a.q.dims[1] = 3, CLKV_ERR_ARG_SHAPE, "q");
    BAD(a.q.dims[2] = 0, CLKV_ERR_ARG_SHAPE, "q");
    BAD(a.lse.dims[2] = 3, CLKV_ERR_ARG_SHAPE, "lse");
    BAD(a.lengths.dims[0] = 3, CLKV_ERR_ARG_SHAPE, "lengths");
    BAD((a.k.dims[3] = 32, a.v.dims[3] = 32, a.q.dims[3] = 32), CLKV_ERR_ARG_UNSUPPORTED, "k");
    BAD(a.max_length = 33, CLKV_ERR_ARG_RANGE, "max_length");
    BAD(a.max_length = -2, CLKV_ERR_ARG_RANGE, "max_length");
    BAD(a.scale = INFINITY, CLKV_ERR_ARG_RANGE, "scale");
    BAD(a.pool = 3, CLKV_ERR_ARG_RANGE, "pool");
    BAD(a.pool_kernel = 4, CLKV_ERR_ARG_RANGE, "pool_kernel");
    BAD(a.pool_kernel = 257, CLKV_ERR_ARG_RANGE, "pool_kernel");
    BAD(a.protect = -2, CLKV_ERR_ARG_RANGE, "protect");
    BAD(a.dropkv_eps = 0.0f, CLKV_ERR_ARG_RANGE, "dropkv_eps");
    BAD(a.dropkv_eps = NAN, CLKV_ERR_ARG_RANGE, "dropkv_eps");
    BAD(a.dropkv_round_p = 2, CLKV_ERR_ARG_RANGE, "dropkv_round_p");
    BAD(a.keydiff_raw_mean = -1, CLKV_ERR_ARG_RANGE, "keydiff_raw_mean");
    BAD(a.sink = -1, CLKV_ERR_ARG_RANGE, "sink");
    BAD(a.recent = -1, CLKV_ERR_ARG_RANGE, "recent");
    BAD(a.k.strides[3] = 2, CLKV_ERR_ARG_STRIDE, "k");
    BAD(a.scores.offset = 2, CLKV_ERR_ARG_ALIGNMENT, "scores");
    BAD(a.scores.offset = 64, CLKV_ERR_ARG_BUFFER_SIZE, "scores");
    BAD(a.q.strides[0] = INT64_MAX / 2, CLKV_ERR_ARG_OVERFLOW, "q");
    BAD((a.method = CLKV_SCORE_KNORM, a.pbar.buf = NULL, a.k.dims[3] = 2000, a.k.dims[2] = 1,
         a.scores.dims[2] = 1),
        CLKV_ERR_ARG_UNSUPPORTED, "k");
#undef BAD
    tu_set_case("score bad inputs baseline");
    TU_CHECK_OK(g_ctx, clkv_score(g_ctx, &base, NULL));
    clFinish(clkv_context_queue(g_ctx));
    tu_release(at.buf);
    tu_release(wo.buf);
    free_io(&io);
}

static void test_keep_bad_inputs(void **state) {
    (void)state;
    const int64_t sd[3] = {2, 2, 64}, id[3] = {2, 2, 16}, cd[2] = {2, 2}, bd[1] = {2};
    float sc[2 * 2 * 64];
    for (int i = 0; i < 256; i++)
        sc[i] = (float)(i % 64);
    const int32_t lens[2] = {64, 3};
    clkv_keep_set_args base = CLKV_KEEP_SET_ARGS_INIT;
    base.scores = tu_tensor_upload(g_ctx, sc, F32, 3, sd, 0, 0);
    base.pbar = tu_tensor_upload(g_ctx, sc, F32, 3, sd, 0, 0);
    base.lengths = tu_tensor_upload_i32(g_ctx, lens, 1, bd, 0, 0);
    base.indices = tu_tensor_alloc(g_ctx, CLKV_I32, 3, id, 0, 0);
    base.counts = tu_tensor_alloc(g_ctx, CLKV_I32, 2, cd, 0, 0);
    base.ratio = 0.2;
    base.window = 4;
    const cl_mem out = base.indices.buf;
    clkv_keep_set_args a;
    cl_event ev = NULL;
    size_t bytes;
    expect_reject(clkv_keep_set(NULL, &base, &ev), CLKV_ERR_ARG_NULL, "ctx", NULL, ev, "ctx");
    expect_reject(clkv_keep_set(g_ctx, NULL, &ev), CLKV_ERR_ARG_NULL, "args", out, ev, "args");
    expect_reject(clkv_keep_set_workspace_size(g_ctx, &base, NULL), CLKV_ERR_ARG_NULL, "bytes", out,
                  NULL, "bytes");
#define BAD(mut, want, name)                                                                       \
    do {                                                                                           \
        a = base;                                                                                  \
        mut;                                                                                       \
        ev = NULL;                                                                                 \
        expect_reject(clkv_keep_set(g_ctx, &a, &ev), want, name, out, ev, #mut);                   \
        expect_reject(clkv_keep_set_workspace_size(g_ctx, &a, &bytes), want, name, out, NULL,      \
                      #mut " (workspace_size)");                                                   \
        tu_assert_buffer_poison(g_ctx, base.counts.buf, #mut " (counts)");                         \
    } while (0)
    BAD(a.scores.buf = NULL, CLKV_ERR_ARG_NULL, "scores");
    BAD(a.indices.buf = NULL, CLKV_ERR_ARG_NULL, "indices");
    BAD(a.scores.dtype = CLKV_F16, CLKV_ERR_ARG_DTYPE, "scores");
    BAD(a.pbar.dtype = CLKV_I32, CLKV_ERR_ARG_DTYPE, "pbar");
    BAD(a.indices.dtype = CLKV_F32, CLKV_ERR_ARG_DTYPE, "indices");
    BAD(a.counts.dtype = CLKV_F32, CLKV_ERR_ARG_DTYPE, "counts");
    BAD(a.lengths.dtype = CLKV_U32, CLKV_ERR_ARG_DTYPE, "lengths");
    BAD(a.pbar.dims[2] = 63, CLKV_ERR_ARG_SHAPE, "pbar");
    BAD(a.indices.dims[1] = 1, CLKV_ERR_ARG_SHAPE, "indices");
    BAD(a.counts.dims[0] = 1, CLKV_ERR_ARG_SHAPE, "counts");
    BAD(a.lengths.dims[0] = 1, CLKV_ERR_ARG_SHAPE, "lengths");
    BAD(a.ratio = 0.3, CLKV_ERR_ARG_SHAPE, "indices"); /* keeps 19 > 16 */
    BAD(a.budget = 17, CLKV_ERR_ARG_SHAPE, "indices");
    BAD(a.ratio = 1.5, CLKV_ERR_ARG_RANGE, "ratio");
    BAD(a.ratio = NAN, CLKV_ERR_ARG_RANGE, "ratio");
    BAD(a.first_stage_ratio = -0.1, CLKV_ERR_ARG_RANGE, "first_stage_ratio");
    BAD(a.window = -1, CLKV_ERR_ARG_RANGE, "window");
    BAD(a.max_length = 65, CLKV_ERR_ARG_RANGE, "max_length");
    BAD(a.scores.strides[2] = 3, CLKV_ERR_ARG_STRIDE, "scores");
    BAD(a.indices.offset = 2, CLKV_ERR_ARG_ALIGNMENT, "indices");
    BAD(a.scores.offset = 4, CLKV_ERR_ARG_BUFFER_SIZE, "scores");
    BAD(a.indices.strides[0] = INT64_MAX / 2, CLKV_ERR_ARG_OVERFLOW, "indices");
#undef BAD
    tu_set_case("keep bad inputs baseline");
    TU_CHECK_OK(g_ctx, clkv_keep_set(g_ctx, &base, NULL));
    clFinish(clkv_context_queue(g_ctx));
    tu_release(base.scores.buf), tu_release(base.pbar.buf), tu_release(base.lengths.buf);
    tu_release(base.indices.buf), tu_release(base.counts.buf);
}

int main(void) {
    tu_suite s = {0};
    tu_suite_add(&s, "method_names", test_method_names, NULL);
    tu_suite_add(&s, "score_bad_inputs", test_score_bad_inputs, NULL);
    tu_suite_add(&s, "keep_bad_inputs", test_keep_bad_inputs, NULL);
    tu_suite_add(&s, "keep_formula", test_keep_formula, NULL);
    tu_suite_add(&s, "keep_set", test_keep_set, NULL);
    tu_suite_add(&s, "dropkv_planted", test_dropkv_planted, NULL);
    tu_suite_add(&s, "score_then_keep", test_score_then_keep, NULL);
    TU_SUITE_ADD_CASES(&s, g_cases, run_case);
    TU_SUITE_ADD_CASES(&s, g_h2o_cases, run_h2o_case);
    TU_SUITE_ADD_CASES(&s, g_key_wg_cases, run_key_wg_case);
    return tu_suite_run(&s, "score", &g_ctx, DEFAULT_SEED);
}
