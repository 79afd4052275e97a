/* clkv_longflow_step: validation, the step's launch plan and the pass that load also uses to
 * choose its first victim: two kernels (cl_kernels/longflow_partial.cl or the tensor-core
 * partial, then longflow_finish.cl), or on NVIDIA with a 16-bit cache one (attention, merge,
 * scores and victim: longflow_step_keyrows of attention_window_keyrows.cl for G <= 8,
 * longflow_step_mma of attention_window_mma.cl otherwise; both share longflow_step.cl). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host/longflow_internal.h"

#include "cl_kernels/kernel_args.cl" /* after the OpenCL types */

#define PARTIAL_FILE "longflow_partial.cl"
#define FINISH_FILE "longflow_finish.cl"
#define MMA_FILE "attention_window_mma.cl"         /* -DLONGFLOW=1: longflow_partial_mma */
#define KEYROWS_FILE "attention_window_keyrows.cl" /* -DLONGFLOW=1: longflow_step_keyrows */

/* Launch-parameter overrides CLKV_LONGFLOW_EPL / _WG / _UNROLL / _SPLITS / _CPASYNC /
 * _STAGES / _SCORE_LANES / _SCORE_ROUNDS / _SCORE_WGS / _FUSED (benchmarks,
 * tuning, tests of the multi-lane layout and of split-K on CPUs; not API), read once per
 * cache creation. */
static int env_int(const char *name, int fallback) {
    const char *s = getenv(name);
    if (!s || !*s)
        return fallback;
    char *end;
    long v = strtol(s, &end, 10);
    return (*end == '\0' && v >= 0 && v <= 4096) ? (int)v : fallback;
}

static size_t reduction_local_bytes(const lf_plan *p, int64_t D) {
    const int nrg = p->wg / p->tpr;
    const int red_rows = nrg > 1 ? nrg / 2 : 1;
    return (size_t)nrg * p->group * 2 * 4 + (size_t)red_rows * p->group * (size_t)D * 4 +
           (size_t)p->wg * 4;
}

/* Local memory of the staged tiles: STAGES x NRG * UNROLL rows of K and V, and their slot
 * positions. */
static size_t stage_bytes(const lf_plan *p, int64_t D, size_t esize) {
    const size_t rows = (size_t)p->stages * (size_t)(p->wg / p->tpr) * p->unroll;
    return rows * (2 * (size_t)D * esize + 4);
}

#define LF_STAGE_BUDGET (96 * 1024) /* two or more work-groups per multiprocessor */

/* Slots per split of the tensor-core step's attention (both forms): `units` work-groups
 * per split over the cache's (sequence, KV head, row tile)s, tiles of kt slots. Splits:
 * one wave of two work-groups per compute unit, each of at least
 * CLKV_LONGFLOW_MMA_MIN_CHUNK slots (default 128), at most LF_MAX_SPLITS, or
 * CLKV_LONGFLOW_MMA_SPLITS where set; then whole tiles per split unless the count is forced
 * (tests force any chunk length). */
static int64_t step_chunk(const clkv_longflow_cache *c, int64_t units, int64_t kt) {
    int64_t splits = 2 * (int64_t)c->ctx->info.compute_units / units;
    const int64_t min_chunk = env_int("CLKV_LONGFLOW_MMA_MIN_CHUNK", 128);
    const int64_t mc = min_chunk > 0 ? min_chunk : 1;
    if (splits > (c->S + mc - 1) / mc)
        splits = (c->S + mc - 1) / mc;
    const int forced = env_int("CLKV_LONGFLOW_MMA_SPLITS", 0);
    if (forced > 0)
        splits = forced;
    if (splits > LF_MAX_SPLITS)
        splits = LF_MAX_SPLITS;
    if (splits < 1)
        splits = 1;
    int64_t chunk = (c->S + splits - 1) / splits;
    if (forced <= 0)
        chunk = (chunk + kt - 1) / kt * kt;
    return chunk;
}

/* The step's attention in the keyrows DIRECT form (attention_window_keyrows.cl,
 * -DLONGFLOW=1, longflow_step_keyrows), as decode attention runs it: G <= 8 query heads of a
 * KV head are the mma N dimension, each warp loads its 32 keys' K/V chunks straight into
 * registers (no local tiles, no barriers in the slot loop); kr_nw = 4 warps per work-group;
 * split-K as decode's rule (two work-groups per compute unit in all, chunks of at least 128
 * slots, whole tiles). Only for the one-launch step (it has no two-kernel form):
 * CLKV_LONGFLOW_FUSED=0 or CLKV_LONGFLOW_KEYROWS=0 keep the 16-row form of
 * attention_window_mma.cl. H200, B 2, Hq 32 / Hkv 8, D 128, bf16, per-layer, 2026-11-28 (us
 * per step at S 32K, decode on the same cache 70.3-71.3): 16-row form 88.2-88.5; this form
 * with 8 warps 84.3-85.3 (16 splits: two waves of 256 work-groups; 8 splits 80.7-80.9), with
 * 4 warps 80.4-81.7. Slower: 16 keys a warp (89.5-92.0), 16 warps (160, the registers do not
 * fit), 24 / 32 splits at 4 warps (95.0-95.5 / 84.6-84.8), interleaved splits (no change).
 * Diagnostic builds at 4 warps (CLKV_KERNEL_DIR): without the scorers 76.0-76.4, without
 * them and the arrival (fence, counters, merge of o) 72.2-73.1, without the score-logit
 * stores or the slot-position loads no faster. Overrides (tuning):
 * CLKV_LONGFLOW_KEYROWS_WARPS (4 | 8), CLKV_LONGFLOW_MMA_KW (16 | 32),
 * CLKV_LONGFLOW_MMA_MIN_CHUNK, CLKV_LONGFLOW_MMA_SPLITS (as for the 16-row form),
 * CLKV_LONGFLOW_INTERLEAVE=1 (split s takes the slot tiles s, s + splits, ...). */
static void plan_keyrows(clkv_longflow_cache *c) {
    lf_plan *p = &c->plan;
    const clkv_device_info *dev = &c->ctx->info;
    if (c->G > 8 || c->D == 256 || env_int("CLKV_LONGFLOW_KEYROWS", 1) == 0 ||
        env_int("CLKV_LONGFLOW_FUSED", 1) == 0)
        return;
    const int nw = env_int("CLKV_LONGFLOW_KEYROWS_WARPS", 4) == 8 ? 8 : 4;
    const int kw = env_int("CLKV_LONGFLOW_MMA_KW", 32) == 16 ? 16 : 32;
    /* combine area (nw x 8 queries x (D + 4) f32), warp (m, l), the new token's K and V */
    const size_t local = (size_t)nw * 8 * (size_t)(c->D + 4) * 4 + (size_t)nw * 8 * 2 * 4 +
                         (size_t)2 * (size_t)c->D * 2 + 16;
    if ((size_t)(32 * nw) > dev->max_work_group_size || local > dev->static_local_mem_bytes)
        return;
    /* one wave: two 4-warp work-groups per compute unit */
    const int64_t chunk = step_chunk(c, c->B * c->Hkv, (int64_t)nw * kw);
    p->keyrows = 1;
    p->kr_interleave = env_int("CLKV_LONGFLOW_INTERLEAVE", 0) != 0;
    p->kr_nw = nw;
    p->mma_kw = kw;
    p->mma_qtiles = 1;
    p->mma_chunk = (int)chunk;
    p->mma_splits = (int)((c->S + chunk - 1) / chunk);
    p->step_wg = 32 * nw;
}

/* The tensor-core partial (attention_window_mma.cl, -DLONGFLOW=1): where inline PTX works,
 * the cache is f16 / bf16 and D is 64, 128 or 256, unless CLKV_LONGFLOW_MMA=0. A step or load
 * takes it when q has the cache dtype (the mma operands are 16-bit), the CUDA-core kernel
 * otherwise. Tiles as the window operator's: QT = 16, 32 or 64 query heads per row tile
 * (G padded), 4 warps, 64-slot tiles, 2 stages. Split-K:
 * one wave of two work-groups per compute unit (two fit its local memory; the score
 * products and the slot mask make a tile's work longer than decode's, so a second
 * work-group hides it: H200, B 2, S 32K, the partial kernel with the first version of
 * this kernel: 8 splits 143 us, 16 splits 92 us; now 16 splits ~84 us), chunks of
 * at least MIN_CHUNK slots (default 128: S = 1024 at B = 2 spreads over 128
 * work-groups). Overrides (tuning): CLKV_LONGFLOW_MMA_KW (16 | 32 | 64),
 * CLKV_LONGFLOW_MMA_STAGES (2..8), CLKV_LONGFLOW_MMA_MIN_CHUNK, CLKV_LONGFLOW_MMA_SPLITS. */
static void plan_mma(clkv_longflow_cache *c) {
    lf_plan *p = &c->plan;
    const clkv_device_info *dev = &c->ctx->info;
    p->mma = dev->nvidia_ptx && c->dtype != CLKV_F32 &&
             (c->D == 64 || c->D == 128 || c->D == 256) && env_int("CLKV_LONGFLOW_MMA", 1) != 0;
    if (!p->mma)
        return;
    p->mma_qt = c->G <= 16 ? 16 : c->G <= 32 ? 32 : 64;
    p->mma_nwk = 4 / (p->mma_qt / 16);
    p->mma_kw = 64 / p->mma_nwk;
    /* D 256: at most 32 slots a warp, 16 where warps share a row block, q fragments in
     * local memory (the kernel's Q_LOCAL), as the window operator plans it. H200, B 2, Hq
     * 32 / Hkv 8, bf16, per-layer, S 1024 / 32K (2026-11-28): 18.5 / 171.9 us against 29.5
     * / 224.1 on the CUDA-core kernels (decode on the same cache 17.0 / 141.3) */
    const int d256 = c->D == 256;
    if (d256)
        p->mma_kw = p->mma_nwk == 1 ? 32 : 16;
    const int kw_env = env_int("CLKV_LONGFLOW_MMA_KW", 0);
    if (kw_env == 16 || kw_env == 32 || kw_env == 64)
        p->mma_kw = kw_env;
    const int kt = p->mma_nwk * p->mma_kw;
    const size_t stage = 2 * (size_t)kt * (size_t)(c->D + 8) * 2;
    int nstg = 2; /* H200, B 2, S 32K: 2 stages 82.6 / 83.4 us, 3 stages 86.6 / 84.5 */
    const int st_env = env_int("CLKV_LONGFLOW_MMA_STAGES", 0);
    if (st_env >= 2 && st_env <= 8)
        nstg = st_env;
    /* the kernel's other __local arrays: warp (m, l), staged positions, norms, new row,
     * staged score logits (4 warps x 16 rows x (KW + 1)), q fragments at D 256 */
    const size_t extra = (size_t)p->mma_nwk * p->mma_qt * 2 * 4 + (size_t)8 * kt * 4 +
                         (size_t)4 * p->mma_kw * 4 + (size_t)c->D * 4 +
                         (size_t)4 * 16 * (p->mma_kw + 1) * 4 +
                         (d256 ? (size_t)p->mma_qt * (size_t)c->D * 2 : 16);
    while (nstg > 2 && nstg * stage + extra > dev->static_local_mem_bytes)
        nstg--;
    p->mma_nstg = nstg;
    /* the stages also hold the final combine of the warps' accumulators (64 rows x D f32) */
    if (nstg * stage < (size_t)64 * (size_t)c->D * 4 ||
        nstg * stage + extra > dev->static_local_mem_bytes) {
        p->mma = 0;
        return;
    }
    p->mma_qtiles = (int)((c->G + p->mma_qt - 1) / p->mma_qt);
    const int64_t chunk = step_chunk(c, c->B * c->Hkv * p->mma_qtiles, kt);
    p->mma_chunk = (int)chunk;
    p->mma_splits = (int)((c->S + chunk - 1) / chunk);
    p->step_wg = 128;
    plan_keyrows(c);
    /* The one-launch step: B * Hm * sc_chunks score chunks of sc_spt * step_wg slots, taken by
     * sc_wgs scorer work-groups, fewer than the compute units (a scorer may wait for
     * attention work-groups, which then always have a work-group slot; see the kernel); a
     * chunk per scorer where that fits. CLKV_LONGFLOW_SCORE_ROUNDS sets spt (tests of
     * several chunks per map), CLKV_LONGFLOW_SCORE_WGS lowers the scorer count (tests of
     * several items per scorer), CLKV_LONGFLOW_FUSED=0 keeps two kernels. H100, B 2, Hq 32 /
     * Hkv 8, D 128, bf16, one run (us per step, two kernels -> one): per-layer S 1K 18.4 ->
     * 18.7 / 17.6, S 32K 123.4 -> 120.4 / 120.1; per-KV-head 19.4 -> 15.5, 125.9 -> 121.2
     * (decode 13-15 and ~100.5). Per-KV-head S 32K with 8 or 64 rounds per chunk instead of
     * the default 32: 134.4 / 127.6. */
    const int64_t n_attn = c->B * c->Hkv * p->mma_qtiles * p->mma_splits;
    /* Two 4-warp keyrows work-groups always fit a compute unit (at most 255 registers a
     * lane, 17 KiB of local memory each), so there up to 2 cu - 1 scorers leave a slot to the
     * attention; each then scores fewer slots (H200, B 2, per-layer, S 32K: measured in
     * docs/performance.md, **LongFlow in the keyrows form**). */
    const int64_t cu = (int64_t)dev->compute_units;
    const int64_t slots = p->keyrows && p->kr_nw == 4 ? 2 * cu : cu;
    const int64_t maps = c->B * c->Hm, scorers_max = slots - 1, wg = p->step_wg;
    int64_t spt = (maps * c->S + wg * scorers_max - 1) / (wg * (scorers_max > 0 ? scorers_max : 1));
    const int rounds = env_int("CLKV_LONGFLOW_SCORE_ROUNDS", 0);
    if (rounds > 0)
        spt = rounds;
    const int64_t spt_max = (c->S + wg - 1) / wg;
    if (spt > spt_max)
        spt = spt_max;
    if (spt < 1)
        spt = 1;
    p->sc_spt = (int)spt;
    p->sc_chunks = (int)((c->S + spt * wg - 1) / (spt * wg));
    const int64_t items = maps * p->sc_chunks;
    p->sc_wgs = (int)(items < scorers_max ? items : scorers_max);
    const int wgs = env_int("CLKV_LONGFLOW_SCORE_WGS", 0); /* tests: several items per scorer */
    if (wgs > 0 && wgs < p->sc_wgs)
        p->sc_wgs = wgs;
    p->fused = env_int("CLKV_LONGFLOW_FUSED", 1) != 0 && scorers_max >= 1 &&
               n_attn + p->sc_wgs <= INT32_MAX && items <= INT32_MAX;
    p->sc_attn = p->fused ? (int)n_attn : 0;
    if (p->keyrows && !p->fused) /* (a device of one compute unit) the CUDA-core kernels */
        p->mma = p->keyrows = 0;
}

clkv_status lf__plan(clkv_longflow_cache *c) {
    lf_plan *p = &c->plan;
    const clkv_device_info *dev = &c->ctx->info;
    memset(p, 0, sizeof *p);
    p->group = (int)(c->G < LF_MAX_GROUP ? c->G : LF_MAX_GROUP);
    p->nhg = (int)((c->G + p->group - 1) / p->group);
    if (dev->nvidia_ptx) {
        /* Several lanes per row (warp shuffles), as decode attention. */
        p->epl = p->group <= 4 ? 16 : 8;
        p->wg = 128;
        p->unroll = 2;
    } else {
        p->epl = (int)c->D;
        p->wg = dev->kind == CLKV_DEVICE_KIND_CPU ? 16 : 64;
        p->unroll = 1;
    }
    p->epl = env_int("CLKV_LONGFLOW_EPL", p->epl);
    p->wg = env_int("CLKV_LONGFLOW_WG", p->wg);
    p->unroll = env_int("CLKV_LONGFLOW_UNROLL", p->unroll);
    const int vw = 16 / (int)clkv_dtype_size(c->dtype);
    if (p->epl < 1 || p->wg < 1 || p->unroll < 1 || c->D % p->epl != 0 ||
        (c->D / p->epl > 1 && p->epl % vw != 0) || c->D / p->epl > 32 ||
        p->wg % (int)(c->D / p->epl) != 0 || p->unroll > 8)
        return clkv__fail(c->ctx, CLKV_ERR_ARG_RANGE,
                          "CLKV_LONGFLOW_EPL/WG/UNROLL: EPL=%d WG=%d UNROLL=%d do not fit D=%lld "
                          "and %s (EPL divides D, a multiple of %d when below D, D/EPL <= 32 "
                          "divides WG, 1 <= UNROLL <= 8)",
                          p->epl, p->wg, p->unroll, (long long)c->D, clkv_dtype_name(c->dtype), vw);
    p->tpr = (int)(c->D / p->epl);
    while (reduction_local_bytes(p, c->D) > dev->local_mem_bytes && p->wg > p->tpr * 2)
        p->wg /= 2;
    if ((size_t)p->wg > dev->max_work_group_size)
        p->wg = (int)dev->max_work_group_size / p->tpr * p->tpr;
    /* Staged K/V tiles (as decode attention): the default on NVIDIA; elsewhere only on
     * request (CLKV_LONGFLOW_CPASYNC=1, tests of the layout with plain copies). */
    p->cp_async = p->tpr > 1 && env_int("CLKV_LONGFLOW_CPASYNC", dev->nvidia_ptx ? 1 : 0) == 1;
    p->stages = env_int("CLKV_LONGFLOW_STAGES", 3);
    if (p->stages < 2)
        p->stages = 2;
    const size_t esize = clkv_dtype_size(c->dtype);
    while (p->cp_async && p->unroll > 1 && stage_bytes(p, c->D, esize) > LF_STAGE_BUDGET)
        p->unroll /= 2;
    while (p->cp_async && p->stages > 2 && stage_bytes(p, c->D, esize) > LF_STAGE_BUDGET)
        p->stages--;
    if (p->cp_async && stage_bytes(p, c->D, esize) > dev->static_local_mem_bytes)
        p->cp_async = 0;

    /* Split-K over the S slots as decode attention: on a GPU several work-groups per
     * compute unit, chunks of at least 1024 rows, but at least one work-group per
     * compute unit; chunks are whole loop iterations. */
    const int nrg = p->wg / p->tpr;
    const int64_t rows_per_iter = (int64_t)nrg * p->unroll;
    const int64_t units = c->B * c->Hkv * p->nhg;
    const int gpu = dev->kind == CLKV_DEVICE_KIND_GPU;
    const int64_t target = (int64_t)dev->compute_units * (gpu ? 8 : 2);
    const int64_t round_rows = rows_per_iter * 4;
    const int64_t min_rows = gpu ? 1024 : 64;
    const int64_t chunk_rows = ((min_rows > round_rows ? min_rows : round_rows) + round_rows - 1) /
                               round_rows * round_rows;
    const int64_t len = c->S;
    int64_t splits = (target + units - 1) / units;
    const int64_t cap = (len + chunk_rows - 1) / chunk_rows;
    if (splits > cap)
        splits = cap;
    int64_t floor_splits = ((int64_t)dev->compute_units + units - 1) / units;
    const int64_t small_cap = (len + round_rows - 1) / round_rows;
    if (floor_splits > small_cap)
        floor_splits = small_cap;
    if (splits < floor_splits)
        splits = floor_splits;
    if (splits > LF_MAX_SPLITS)
        splits = LF_MAX_SPLITS;
    if (splits < 1)
        splits = 1;
    const int forced = env_int("CLKV_LONGFLOW_SPLITS", 0); /* tests: any chunk length */
    if (forced > 0)
        splits = forced < len ? forced : len;
    int64_t chunk = (len + splits - 1) / splits;
    if (forced <= 0)
        chunk = (chunk + rows_per_iter - 1) / rows_per_iter * rows_per_iter;
    p->chunk = (int)chunk;
    p->splits = (int)((len + chunk - 1) / chunk);
    /* Score geometry of the finish kernel: hl lanes share the heads of a slot, FIN_WG / hl
     * slots per round, `rounds` rounds per work-group. On a GPU: enough (slot, lane)
     * work-items to fill the device (but no more lanes than heads, and at most 8: on an
     * H200, 8 beat 32 and 1 at B=2, Hq=32, S=1024, per-layer), about four
     * work-groups per compute unit. On CPUs (tests): small chunks, so that maps of a few
     * dozen slots already span several work-groups and rounds. */
    const int64_t nh = c->mode == CLKV_LONGFLOW_PER_KV_HEAD ? c->G : c->Hq;
    const int64_t map_slots = c->B * c->Hm * c->S;
    int64_t rounds;
    if (gpu) {
        const int64_t fill = (int64_t)dev->compute_units * 2048;
        p->hl = 1;
        while (p->hl * 2 <= nh && p->hl * 2 <= 8 && map_slots * p->hl * 2 <= fill)
            p->hl *= 2;
        const int64_t per_wg = (int64_t)LF_FIN_WG * dev->compute_units * 4;
        rounds = (map_slots * p->hl + per_wg - 1) / per_wg;
    } else {
        p->hl = 16;
        rounds = 2;
    }
    p->hl = env_int("CLKV_LONGFLOW_SCORE_LANES", p->hl);
    rounds = env_int("CLKV_LONGFLOW_SCORE_ROUNDS", (int)(rounds < 64 ? rounds : 64));
    if (p->hl < 1 || p->hl > LF_FIN_WG || (p->hl & (p->hl - 1)) != 0 || rounds < 1)
        return clkv__fail(c->ctx, CLKV_ERR_ARG_RANGE,
                          "CLKV_LONGFLOW_SCORE_LANES/ROUNDS: %d lanes (a power of two <= %d), %lld "
                          "rounds (>= 1)",
                          p->hl, LF_FIN_WG, (long long)rounds);
    int64_t cs = (int64_t)(LF_FIN_WG / p->hl) * rounds;
    if (cs > c->S)
        cs = c->S;
    p->chunk_slots = (int)cs;
    p->n_chunks = (int)((c->S + cs - 1) / cs);
    plan_mma(c);
    const int64_t max_splits = p->mma && p->mma_splits > p->splits ? p->mma_splits : p->splits;
    p->acc_bytes = clkv__ws_align((size_t)(c->B * c->Hq * max_splits * c->D) * 4);
    p->ml_bytes = clkv__ws_align((size_t)(c->B * c->Hq * max_splits) * 2 * 4);
    p->y_bytes = clkv__ws_align((size_t)(c->B * c->Hq * c->S) * 4);
    /* the finish kernel's chunk candidates (the one-launch step keeps one word per map in
     * the counters instead) */
    p->cand_bytes = clkv__ws_align((size_t)(c->B * c->Hm * p->n_chunks) * 2 * 4);
    return CLKV_OK;
}

lf_counter_layout lf__counter_layout(const clkv_longflow_cache *c) {
    lf_counter_layout l;
    l.unit = (int)(c->B * c->Hm);
    l.arr = l.unit + (int)(c->B * c->Hkv);
    l.scd = l.arr + (int)(c->B * c->Hm);
    l.bat = l.scd + (int)(c->B * c->Hm);
    l.c64 = (l.bat + (int)c->B + 1) / 2 * 2; /* 8-byte aligned */
    l.total = (size_t)l.c64 + 2 * (size_t)(c->B * c->Hm);
    return l;
}

size_t lf__workspace_bytes(const clkv_longflow_cache *c) {
    return c->plan.acc_bytes + c->plan.ml_bytes + c->plan.y_bytes + c->plan.cand_bytes;
}

/* The output arguments both step kernels take: o, lse, scores, victims (see opt_tensor),
 * o's dtype code and a has-flag for each optional one. */
typedef struct lf_out_args {
    cl_mem o_buf, lse_buf, sc_buf, vo_buf;
    cl_int o_dt, has_lse, has_sc, has_vo;
    cl_long o_off, o_sb, o_sh, lse_off, lse_sb, lse_sh, sc_off, sc_sb, sc_sh, vo_off, vo_sb, vo_sh;
} lf_out_args;

/* An optional tensor as kernels take it: buffer, element offset and the strides of dims
 * 0 and 1 (NULL / 0 when absent). */
static void opt_tensor(const clkv_tensor *t, cl_mem *buf, cl_long *off, cl_long *sb, cl_long *sh) {
    const int has = t && t->buf;
    *buf = t ? t->buf : NULL;
    *off = has ? clkv__elem_offset(t) : 0;
    *sb = has ? (cl_long)t->strides[0] : 0;
    *sh = has ? (cl_long)t->strides[1] : 0;
}

static lf_out_args out_args(const lf_pass *ps) {
    lf_out_args a;
    opt_tensor(ps->o, &a.o_buf, &a.o_off, &a.o_sb, &a.o_sh);
    opt_tensor(ps->lse, &a.lse_buf, &a.lse_off, &a.lse_sb, &a.lse_sh);
    opt_tensor(ps->scores, &a.sc_buf, &a.sc_off, &a.sc_sb, &a.sc_sh);
    opt_tensor(ps->victims, &a.vo_buf, &a.vo_off, &a.vo_sb, &a.vo_sh);
    a.o_dt = ps->o && ps->o->buf ? (cl_int)ps->o->dtype : 0;
    a.has_lse = a.lse_buf != NULL;
    a.has_sc = a.sc_buf != NULL;
    a.has_vo = a.vo_buf != NULL;
    return a;
}

/* All arguments of the one-launch step kernel (longflow_step_mma or longflow_step_keyrows,
 * `name`): its 14 buffers, then its scalars as one struct (cl_kernels/kernel_args.cl says
 * why). */
static clkv_status set_step_args(clkv_longflow_cache *c, const lf_pass *ps, cl_kernel k,
                                 const char *name, cl_mem ws, cl_long ml_off, cl_long y_off) {
    const lf_plan *p = &c->plan;
    const lf_counter_layout l = lf__counter_layout(c);
    const lf_out_args a = out_args(ps);
    lf_step_scalars P;
    memset(&P, 0, sizeof P);
    P.do_write = ps->mode == 0;
    P.Hq = (cl_int)c->Hq;
    P.G = (cl_int)c->G;
    P.n_qtiles = p->mma_qtiles;
    P.S = (cl_int)c->S;
    P.chunk = p->mma_chunk;
    P.num_splits = p->mma_splits;
    P.scale_log2 = ps->scale * 1.4426950408889634f;
    P.ml_off = ml_off;
    P.y_off = y_off;
    cl_mem q_buf, kn_buf, vn_buf;
    opt_tensor(ps->q, &q_buf, &P.q_off, &P.q_sb, &P.q_sh);
    opt_tensor(ps->k_new, &kn_buf, &P.kn_off, &P.kn_sb, &P.kn_sh);
    opt_tensor(ps->v_new, &vn_buf, &P.vn_off, &P.vn_sb, &P.vn_sh);
    P.n_dt = kn_buf ? (cl_int)ps->k_new->dtype : 0;
    P.n_attn = p->sc_attn;
    P.n_score = p->sc_wgs;
    P.n_items = (cl_int)(c->B * c->Hm) * p->sc_chunks;
    P.unit_off = l.unit;
    P.arr_off = l.arr;
    P.scd_off = l.scd;
    P.bat_off = l.bat;
    P.c64_off = l.c64;
    P.protect = c->protect;
    P.n_chunks = p->sc_chunks;
    P.spt = p->sc_spt;
    P.o_dt = a.o_dt;
    P.o_off = a.o_off, P.o_sb = a.o_sb, P.o_sh = a.o_sh;
    P.lse_off = a.lse_off, P.lse_sb = a.lse_sb, P.lse_sh = a.lse_sh, P.has_lse = a.has_lse;
    P.sc_off = a.sc_off, P.sc_sb = a.sc_sb, P.sc_sh = a.sc_sh, P.has_scores = a.has_sc;
    P.vo_off = a.vo_off, P.vo_sb = a.vo_sb, P.vo_sh = a.vo_sh, P.has_vout = a.has_vo;
    return clkv__set_args(c->ctx, k, name, 15, CLKV_ARG(q_buf), CLKV_ARG(kn_buf), CLKV_ARG(vn_buf),
                          CLKV_ARG(c->k), CLKV_ARG(c->v), CLKV_ARG(c->pos), CLKV_ARG(c->victim),
                          CLKV_ARG(c->next_pos), CLKV_ARG(ws), CLKV_ARG(c->counters),
                          CLKV_ARG(a.o_buf), CLKV_ARG(a.lse_buf), CLKV_ARG(a.sc_buf),
                          CLKV_ARG(a.vo_buf), CLKV_ARG(P));
}

/* Arguments of the two-kernel step's partial kernel: longflow_partial_mma (use_mma) or
 * longflow_partial. */
static clkv_status set_partial_args(clkv_longflow_cache *c, const lf_pass *ps, cl_kernel k,
                                    int use_mma, cl_mem ws, cl_long ml_off, cl_long y_off) {
    const lf_plan *p = &c->plan;
    cl_mem q_buf, kn_buf, vn_buf;
    cl_long q_off, q_sb, q_sh, kn_off, kn_sb, kn_sh, vn_off, vn_sb, vn_sh;
    opt_tensor(ps->q, &q_buf, &q_off, &q_sb, &q_sh);
    opt_tensor(ps->k_new, &kn_buf, &kn_off, &kn_sb, &kn_sh);
    opt_tensor(ps->v_new, &vn_buf, &vn_off, &vn_sb, &vn_sh);
    const cl_int q_dt = q_buf ? (cl_int)ps->q->dtype : 0,
                 n_dt = kn_buf ? (cl_int)ps->k_new->dtype : 0;
    const cl_int do_write = ps->mode == 0;
    const cl_float scale_log2 = ps->scale * 1.4426950408889634f;
    const cl_int Hq = (cl_int)c->Hq, Hkv = (cl_int)c->Hkv, G = (cl_int)c->G, S = (cl_int)c->S,
                 nhg = p->nhg, n_qtiles = p->mma_qtiles;
    if (use_mma) {
        const cl_int chunk = p->mma_chunk, splits = p->mma_splits;
        return clkv__set_args(
            c->ctx, k, "longflow_partial_mma", 29, CLKV_ARG(q_buf), CLKV_ARG(q_off), CLKV_ARG(q_sb),
            CLKV_ARG(q_sh), CLKV_ARG(kn_buf), CLKV_ARG(n_dt), CLKV_ARG(kn_off), CLKV_ARG(kn_sb),
            CLKV_ARG(kn_sh), CLKV_ARG(vn_buf), CLKV_ARG(vn_off), CLKV_ARG(vn_sb), CLKV_ARG(vn_sh),
            CLKV_ARG(c->k), CLKV_ARG(c->v), CLKV_ARG(c->pos), CLKV_ARG(c->victim),
            CLKV_ARG(c->next_pos), CLKV_ARG(do_write), CLKV_ARG(Hq), CLKV_ARG(G),
            CLKV_ARG(n_qtiles), CLKV_ARG(S), CLKV_ARG(chunk), CLKV_ARG(splits),
            CLKV_ARG(scale_log2), CLKV_ARG(ws), CLKV_ARG(ml_off), CLKV_ARG(y_off));
    }
    const cl_int chunk = p->chunk, splits = p->splits;
    return clkv__set_args(
        c->ctx, k, "longflow_partial", 31, CLKV_ARG(q_buf), CLKV_ARG(q_dt), CLKV_ARG(q_off),
        CLKV_ARG(q_sb), CLKV_ARG(q_sh), CLKV_ARG(kn_buf), CLKV_ARG(n_dt), CLKV_ARG(kn_off),
        CLKV_ARG(kn_sb), CLKV_ARG(kn_sh), CLKV_ARG(vn_buf), CLKV_ARG(vn_off), CLKV_ARG(vn_sb),
        CLKV_ARG(vn_sh), CLKV_ARG(c->k), CLKV_ARG(c->v), CLKV_ARG(c->pos), CLKV_ARG(c->victim),
        CLKV_ARG(c->next_pos), CLKV_ARG(do_write), CLKV_ARG(Hq), CLKV_ARG(Hkv), CLKV_ARG(G),
        CLKV_ARG(nhg), CLKV_ARG(S), CLKV_ARG(chunk), CLKV_ARG(splits), CLKV_ARG(scale_log2),
        CLKV_ARG(ws), CLKV_ARG(ml_off), CLKV_ARG(y_off));
}

clkv_status lf__enqueue_pass(clkv_longflow_cache *c, const lf_pass *ps, cl_event *done) {
    clkv_context *ctx = c->ctx;
    const lf_plan *p = &c->plan;
    clkv_status st;
    /* The dtypes of q, k_new/v_new and o are kernel arguments (read once per work-group
     * or once per step), so a load's pass and steps of any activation dtype share one
     * program per cache configuration. The tensor-core partial where the plan has it and q
     * has the cache dtype; with it, where the plan allows, the whole pass in one launch
     * (longflow_step_mma, no finish kernel). */
    const int use_mma = p->mma && ps->mode != 2 && ps->q && ps->q->dtype == c->dtype;
    const int fused = use_mma && p->fused;
    const char *mma_name = !fused       ? "longflow_partial_mma"
                           : p->keyrows ? "longflow_step_keyrows"
                                        : "longflow_step_mma";
    cl_kernel kp = NULL, kf = NULL;
    if (use_mma) { /* the tensor-core forms: 16-bit q, K/V and o of the cache dtype */
        clkv_defs dm;
        clkv__defs_init(&dm);
        clkv__defs_int(&dm, "LONGFLOW", 1);
        clkv__defs_int(&dm, "Q_DTYPE", c->dtype);
        clkv__defs_int(&dm, "KV_DTYPE", c->dtype);
        clkv__defs_int(&dm, "O_DTYPE", c->dtype);
        clkv__defs_int(&dm, "HEAD_DIM", c->D);
        clkv__defs_int(&dm, "KW", p->mma_kw);
        clkv__defs_int(&dm, "KV_ALIGNED", 1);
        clkv__defs_int(&dm, "PER_HEAD", c->mode == CLKV_LONGFLOW_PER_KV_HEAD);
        clkv__defs_int(&dm, "LF_NH", c->mode == CLKV_LONGFLOW_PER_KV_HEAD ? c->G : c->Hq);
        const int keyrows = fused && p->keyrows;
        if (keyrows) {
            clkv__defs_int(&dm, "NSTG", 1);
            clkv__defs_int(&dm, "DIRECT", 1);
            clkv__defs_int(&dm, "NW", p->kr_nw);
            clkv__defs_int(&dm, "INTERLEAVE", p->kr_interleave);
        } else {
            clkv__defs_int(&dm, "QT", p->mma_qt);
            clkv__defs_int(&dm, "NWK", p->mma_nwk);
            clkv__defs_int(&dm, "NSTG", p->mma_nstg);
            clkv__defs_int(&dm, "P_LO", 1);
        }
        if ((st = clkv__get_kernel(ctx, keyrows ? KEYROWS_FILE : MMA_FILE, &dm, mma_name, &kp)) !=
            CLKV_OK)
            return st;
    } else if (ps->mode != 2) {
        clkv_defs dp;
        clkv__defs_init(&dp);
        clkv__defs_int(&dp, "KV_DTYPE", c->dtype);
        clkv__defs_int(&dp, "HEAD_DIM", c->D);
        clkv__defs_int(&dp, "GROUP", p->group);
        clkv__defs_int(&dp, "EPL", p->epl);
        clkv__defs_int(&dp, "WG_SIZE", p->wg);
        clkv__defs_int(&dp, "UNROLL", p->unroll);
        clkv__defs_int(&dp, "PER_HEAD", c->mode == CLKV_LONGFLOW_PER_KV_HEAD);
        clkv__defs_int(&dp, "CP_ASYNC", p->cp_async);
        clkv__defs_int(&dp, "STAGES", p->cp_async ? p->stages : 0);
        if ((st = clkv__get_kernel(ctx, PARTIAL_FILE, &dp, "longflow_partial", &kp)) != CLKV_OK)
            return st;
    }
    if (!fused) {
        clkv_defs df;
        clkv__defs_init(&df);
        clkv__defs_int(&df, "HEAD_DIM", c->D);
        clkv__defs_int(&df, "PER_HEAD", c->mode == CLKV_LONGFLOW_PER_KV_HEAD);
        clkv__defs_int(&df, "FIN_WG", LF_FIN_WG);
        clkv__defs_int(&df, "MAX_SPLITS", LF_MAX_SPLITS);
        clkv__defs_int(&df, "UNIT_HEADS_MAX", LF_UNIT_HEADS_MAX);
        if ((st = clkv__get_kernel(ctx, FINISH_FILE, &df, "longflow_finish", &kf)) != CLKV_OK)
            return st;
    }
    cl_mem ws;
    if ((st = clkv__workspace(ctx, lf__workspace_bytes(c), &ws)) != CLKV_OK)
        return st;
    const cl_long ml_off = (cl_long)(p->acc_bytes / 4);
    const cl_long y_off = (cl_long)((p->acc_bytes + p->ml_bytes) / 4);
    const cl_long cand_off = (cl_long)((p->acc_bytes + p->ml_bytes + p->y_bytes) / 4);
    const cl_int Hq = (cl_int)c->Hq, Hkv = (cl_int)c->Hkv, G = (cl_int)c->G, S = (cl_int)c->S,
                 splits = use_mma ? p->mma_splits : p->splits;

    if (kp) {
        st = fused ? set_step_args(c, ps, kp, mma_name, ws, ml_off, y_off)
                   : set_partial_args(c, ps, kp, use_mma, ws, ml_off, y_off);
        if (st == CLKV_OK)
            st = clkv__check_local_mem(ctx, kp, use_mma ? mma_name : "longflow_partial", 0);
        if (st != CLKV_OK)
            return st;
    }
    if (fused) {
        if (ps->pre && (st = clkv__enqueue(ctx, ps->pre->kernel, ps->pre->label, 3, ps->pre->global,
                                           ps->pre->local, NULL)) != CLKV_OK)
            return st;
        const size_t n_attn = (size_t)p->sc_attn, n_score = (size_t)p->sc_wgs;
        const size_t gp[1] = {(n_attn + n_score) * (size_t)p->step_wg};
        const size_t lp[1] = {(size_t)p->step_wg};
        clkv__log(ctx,
                  "longflow: B=%lld Hq=%lld Hkv=%lld D=%lld S=%lld mode=%d pass=%d one launch, "
                  "%s (qt=%d nwk=%d kw=%d stages=%d qtiles=%d) splits=%d chunk=%d, "
                  "%zu attention + %zu score work-groups of %d (%d chunks of %d slots per map)",
                  (long long)c->B, (long long)c->Hq, (long long)c->Hkv, (long long)c->D,
                  (long long)c->S, (int)c->mode, ps->mode, p->keyrows ? "keyrows" : "mma",
                  p->keyrows ? 8 : p->mma_qt, p->keyrows ? p->kr_nw : p->mma_nwk, p->mma_kw,
                  p->keyrows ? 0 : p->mma_nstg, p->mma_qtiles, p->mma_splits, p->mma_chunk, n_attn,
                  n_score, p->step_wg, p->sc_chunks, p->sc_spt * p->step_wg);
        return clkv__enqueue(ctx, kp, mma_name, 1, gp, lp, done);
    }
    {
        const cl_int n_merge = ps->mode == 0 ? (cl_int)(c->B * c->Hq) : 0, n_chunks = p->n_chunks,
                     chunk_slots = p->chunk_slots, hl = p->hl;
        const lf_out_args a = out_args(ps);
        const cl_int mode = ps->mode, protect = c->protect;
        st = clkv__set_args(
            ctx, kf, "longflow_finish", 39, CLKV_ARG(ws), CLKV_ARG(ml_off), CLKV_ARG(y_off),
            CLKV_ARG(cand_off), CLKV_ARG(splits), CLKV_ARG(Hq), CLKV_ARG(Hkv), CLKV_ARG(G),
            CLKV_ARG(S), CLKV_ARG(n_merge), CLKV_ARG(n_chunks), CLKV_ARG(chunk_slots), CLKV_ARG(hl),
            CLKV_ARG(a.o_buf), CLKV_ARG(a.o_dt), CLKV_ARG(a.o_off), CLKV_ARG(a.o_sb),
            CLKV_ARG(a.o_sh), CLKV_ARG(a.lse_buf), CLKV_ARG(a.lse_off), CLKV_ARG(a.lse_sb),
            CLKV_ARG(a.lse_sh), CLKV_ARG(a.has_lse), CLKV_ARG(c->pos), CLKV_ARG(c->victim),
            CLKV_ARG(c->next_pos), CLKV_ARG(c->counters), CLKV_ARG(mode), CLKV_ARG(protect),
            CLKV_ARG(a.sc_buf), CLKV_ARG(a.sc_off), CLKV_ARG(a.sc_sb), CLKV_ARG(a.sc_sh),
            CLKV_ARG(a.has_sc), CLKV_ARG(a.vo_buf), CLKV_ARG(a.vo_off), CLKV_ARG(a.vo_sb),
            CLKV_ARG(a.vo_sh), CLKV_ARG(a.has_vo));
        if (st == CLKV_OK)
            st = clkv__check_local_mem(ctx, kf, "longflow_finish", 0);
        if (st != CLKV_OK)
            return st;
        if (ps->pre && (st = clkv__enqueue(ctx, ps->pre->kernel, ps->pre->label, 3, ps->pre->global,
                                           ps->pre->local, NULL)) != CLKV_OK)
            return st;
        if (kp && use_mma) {
            const size_t gp[3] = {(size_t)p->mma_qtiles * 128, (size_t)p->mma_splits,
                                  (size_t)(c->B * c->Hkv)};
            const size_t lp[3] = {128, 1, 1};
            clkv__log(ctx,
                      "longflow: B=%lld Hq=%lld Hkv=%lld D=%lld S=%lld mode=%d pass=%d mma "
                      "(qt=%d nwk=%d kw=%d stages=%d qtiles=%d) splits=%d chunk=%d "
                      "score_chunks=%d x %d slots, %d lanes",
                      (long long)c->B, (long long)c->Hq, (long long)c->Hkv, (long long)c->D,
                      (long long)c->S, (int)c->mode, ps->mode, p->mma_qt, p->mma_nwk, p->mma_kw,
                      p->mma_nstg, p->mma_qtiles, p->mma_splits, p->mma_chunk, p->n_chunks,
                      p->chunk_slots, p->hl);
            if ((st = clkv__enqueue(ctx, kp, "longflow_partial_mma", 3, gp, lp, NULL)) != CLKV_OK)
                return st;
        } else if (kp) {
            const size_t gp[3] = {(size_t)p->splits * p->wg, (size_t)(c->Hkv * p->nhg),
                                  (size_t)c->B};
            const size_t lp[3] = {(size_t)p->wg, 1, 1};
            clkv__log(ctx,
                      "longflow: B=%lld Hq=%lld Hkv=%lld D=%lld S=%lld mode=%d pass=%d group=%d "
                      "epl=%d wg=%d unroll=%d cp_async=%d stages=%d splits=%d chunk=%d "
                      "score_chunks=%d x %d slots, %d lanes",
                      (long long)c->B, (long long)c->Hq, (long long)c->Hkv, (long long)c->D,
                      (long long)c->S, (int)c->mode, ps->mode, p->group, p->epl, p->wg, p->unroll,
                      p->cp_async, p->stages, p->splits, p->chunk, p->n_chunks, p->chunk_slots,
                      p->hl);
            if ((st = clkv__enqueue(ctx, kp, "longflow_partial", 3, gp, lp, NULL)) != CLKV_OK)
                return st;
        }
        const size_t gf[1] = {((size_t)n_merge + (size_t)(c->B * c->Hm * n_chunks)) * LF_FIN_WG};
        const size_t lf[1] = {LF_FIN_WG};
        return clkv__enqueue(ctx, kf, "longflow_finish", 1, gf, lf, done);
    }
}

static clkv_status validate_step(clkv_longflow_cache *c, const clkv_longflow_step_args *a) {
    clkv_context *ctx = c->ctx;
    clkv_status st;
    if ((st = clkv__check_tensor(ctx, &a->q, "q", 3, CLKV_FLOAT_DTYPES)) ||
        (st = clkv__check_tensor(ctx, &a->k_new, "k_new", 3, CLKV_FLOAT_DTYPES)) ||
        (st = clkv__check_tensor(ctx, &a->v_new, "v_new", 3, CLKV_FLOAT_DTYPES)) ||
        (st = clkv__check_tensor(ctx, &a->o, "o", 3, CLKV_FLOAT_DTYPES)) ||
        (st = clkv__check_optional_tensor(ctx, &a->lse, "lse", 2, CLKV_DTYPE_BIT(CLKV_F32))) ||
        (st =
             clkv__check_optional_tensor(ctx, &a->scores, "scores", 3, CLKV_DTYPE_BIT(CLKV_F32))) ||
        (st =
             clkv__check_optional_tensor(ctx, &a->victims, "victims", 2, CLKV_DTYPE_BIT(CLKV_I32))))
        return st;
    if (a->v_new.dtype != a->k_new.dtype)
        return clkv__fail(ctx, CLKV_ERR_ARG_DTYPE, "v_new: dtype %s differs from k_new's %s",
                          clkv_dtype_name(a->v_new.dtype), clkv_dtype_name(a->k_new.dtype));
    const int64_t qd[3] = {c->B, c->Hq, c->D}, kd[3] = {c->B, c->Hkv, c->D};
    static const char *const why[3] = {"batch of the cache", "heads of the cache",
                                       "head dim of the cache"};
    for (int i = 0; i < 3; i++)
        if ((st = clkv__check_dim(ctx, &a->q, "q", i, qd[i], why[i])) ||
            (st = clkv__check_dim(ctx, &a->k_new, "k_new", i, kd[i], why[i])) ||
            (st = clkv__check_dim(ctx, &a->v_new, "v_new", i, kd[i], why[i])) ||
            (st = clkv__check_dim(ctx, &a->o, "o", i, qd[i], why[i])))
            return st;
    if (a->lse.buf && ((st = clkv__check_dim(ctx, &a->lse, "lse", 0, c->B, why[0])) ||
                       (st = clkv__check_dim(ctx, &a->lse, "lse", 1, c->Hq, why[1]))))
        return st;
    if (a->scores.buf &&
        ((st = clkv__check_dim(ctx, &a->scores, "scores", 0, c->B, why[0])) ||
         (st = clkv__check_dim(ctx, &a->scores, "scores", 1, c->Hm, "slot maps of the cache")) ||
         (st = clkv__check_dim(ctx, &a->scores, "scores", 2, c->S, "slots of the cache"))))
        return st;
    if (a->victims.buf &&
        ((st = clkv__check_dim(ctx, &a->victims, "victims", 0, c->B, why[0])) ||
         (st = clkv__check_dim(ctx, &a->victims, "victims", 1, c->Hm, "slot maps of the cache"))))
        return st;
    if (!isfinite(a->scale))
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "scale: %g is not finite", (double)a->scale);
    return CLKV_OK;
}

clkv_status clkv_longflow_step(clkv_longflow_cache *cache, const clkv_longflow_step_args *args,
                               cl_event *done) {
    if (!cache)
        return clkv__fail(NULL, CLKV_ERR_ARG_NULL, "cache: LongFlow cache is NULL");
    if (!args)
        return clkv__fail(cache->ctx, CLKV_ERR_ARG_NULL, "args: argument struct is NULL");
    clkv_status st = validate_step(cache, args);
    if (st != CLKV_OK)
        return st;
    lf_pass ps = {0};
    ps.mode = 0;
    ps.q = &args->q;
    ps.k_new = &args->k_new;
    ps.v_new = &args->v_new;
    ps.o = &args->o;
    ps.lse = &args->lse;
    ps.scores = &args->scores;
    ps.victims = &args->victims;
    ps.scale = args->scale != 0.0f ? args->scale : (float)(1.0 / sqrt((double)cache->D));
    return lf__enqueue_pass(cache, &ps, done);
}

clkv_status clkv_longflow_step_workspace_size(const clkv_longflow_cache *cache, size_t *bytes) {
    if (!cache)
        return clkv__fail(NULL, CLKV_ERR_ARG_NULL, "cache: LongFlow cache is NULL");
    if (!bytes)
        return clkv__fail(cache->ctx, CLKV_ERR_ARG_NULL, "bytes: output pointer is NULL");
    *bytes = lf__workspace_bytes(cache);
    return CLKV_OK;
}
