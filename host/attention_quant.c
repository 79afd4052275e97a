/* clkv_attention_quant_decode: validation, split-K sizing and launch of
 * cl_kernels/attention_quant.cl (CUDA cores, every device) or
 * cl_kernels/attention_quant_mma.cl (tensor cores, NVIDIA), merged by the decode-attention
 * merge kernel. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host/attention_common.h"
#include "host/quant_cache_internal.h"
#include "cl_kernels/kernel_args.cl" /* after the OpenCL types */

#define KERNEL_FILE "attention_quant.cl"
#define MMA_FILE "attention_quant_mma.cl"
#define MMA_HEADS 4 /* query heads per work-group of the tensor-core kernel */
#define MMA_WARPS 4 /* warps (= splits) per work-group of the tensor-core kernel */
#define MAX_GROUP 8

typedef struct quant_plan {
    int64_t B, Hq, Hkv, G, D;
    int max_len;
    float scale;
    int group, nhg, wg, ktok;
    int splits, chunk;
    int rsplits, rchunk; /* tensor-core kernel: the first rsplits splits walk the residual in
                          * chunks of rchunk tokens, the others the quantized part */
    int merge_splits;    /* partial states per (sequence, query head) the merge combines */
    int mma; /* the tensor-core kernel (each warp one split, MMA_WARPS per work-group) */
    size_t part_acc_bytes, part_ml_bytes;
} quant_plan;

/* Knobs of the tensor-core kernel, read once per process (tuning and tests, not API):
 *   CLKV_QUANT_MMA=0        always the CUDA-core kernel
 *   CLKV_QUANT_MMA=2        the tensor-core kernel wherever it applies (not only where it
 *                           measured faster)
 *   CLKV_QUANT_MMA_WARPS=N  automatic splits aim at N warps per compute unit (default 64)
 *   CLKV_QUANT_MMA_MINTOK=N no automatic split shorter than N tokens (default 256); where
 *                           the length limits the split count, splits of about 2N tokens
 *                           at 2-bit and 4-bit codes, see plan_mma
 *   CLKV_QUANT_MMA_STAGES=N 16-token tiles in flight per warp, 1..8 (default 0: 3 with
 *                           4-bit keys and values, 4 otherwise; see mma_stages)
 *   CLKV_QUANT_MMA_RES_SPLITS=0  no splits of the residual's own: the last split walks it
 *                           after its quantized tiles (the previous plan; default 1) */
static int env_int(const char *name, int def, int lo, int hi) {
    const char *e = getenv(name);
    if (!e || !*e)
        return def;
    const long v = strtol(e, NULL, 10);
    return v < lo ? lo : v > hi ? hi : (int)v;
}
typedef struct mma_knobs {
    int enabled, warps, mintok, stages, res_splits;
} mma_knobs;
static const mma_knobs *knobs(void) {
    static mma_knobs k;
    static int done;
    if (!done) { /* a context is used by one thread at a time; racing readers agree */
        k.enabled = env_int("CLKV_QUANT_MMA", 1, 0, 2);
        k.warps = env_int("CLKV_QUANT_MMA_WARPS", 64, 1, 256);
        k.mintok = env_int("CLKV_QUANT_MMA_MINTOK", 256, 16, 1 << 20);
        k.stages = env_int("CLKV_QUANT_MMA_STAGES", 0, 0, 8);
        k.res_splits = env_int("CLKV_QUANT_MMA_RES_SPLITS", 1, 0, 1);
        done = 1;
    }
    return &k;
}

/* Tiles in flight per warp of the tensor-core kernel. 3 with 4-bit keys and values, 4
 * otherwise (H100, Hq 32 / Hkv 8, D 128, groups of 128, two alternations in one run,
 * 2026-11-27, after the kernel's copy addressing was simplified: 4-bit with 3 stages against
 * 4, B 1 128K 73.4 / 74.9 against 72.3 / 71.9 us, B 8 32K 135.3 / 134.9 against 147.4 /
 * 148.6, B 8 128K 443.3 / 443.3 against 442.9 / 445.6; 2-bit with 3 against 4, B 1 128K
 * 56.2 / 57.0 against 56.5 / 57.0, B 8 32K 97.4 / 98.9 against 98.8 / 99.4, B 8 128K 333.4
 * / 335.5 against 329.0 / 328.6). On the H200 (2026-11-28, session 32; ptxas through
 * CLKV_BUILD_OPTIONS=-cl-nv-verbose) the 4-bit kernel with 3 stages takes 128 registers and
 * 46.7 KB of local memory (4 work-groups a unit), with 2 stages 96 registers and 35.3 KB (5),
 * yet the extra resident warps did not help: B 1 128K 60.6-61.6 us with 3 stages against
 * 63.6-64.0 with 2 (automatic splits), and forced 320 / 384 / 448 splits (enough for the
 * fifth work-group) 65.9-71.2 against 67.8-69.6; B 8 128K 371-374 against 383-385 (two
 * rounds; -cl-nv-maxrregcount=96 left the 3-stage kernel at 128 registers and its times
 * unchanged: the driver ignores it for kernels with reqd_work_group_size). The 2-bit kernel with
 * 320 or 384 splits: 56.2-58.4 us against 51.3-51.9 automatic. So the quantized decode at B 1 is
 * bound by each warp's tile latency, not by the resident warps. */
static int mma_stages(const clkv_quant_cache *c) {
    if (knobs()->stages > 0)
        return knobs()->stages;
    return c->cfg.k_bits == 4 && c->cfg.v_bits == 4 ? 3 : 4;
}

/* The tensor-core kernel applies on NVIDIA (inline PTX) to D 64 / 128 / 256, 2- or 4-bit keys
 * and values and a 16-bit o: its products keep ~22 significant bits of q*s (f16 high part
 * + f16 rest) and ~16 of p*s (bf16 + bf16), within the tolerance of 16-bit outputs but not
 * of f32 ones.
 * Returns 0 where it does not apply, 1 where it is taken, 2 where it is taken only when the
 * CUDA-core kernel would leave the device underfilled (plan_launch). Measured (H100, Hq 32
 * / Hkv 8, D 128, B 1 and 8, 32K and 128K tokens): it wins with 2-bit keys and values at
 * every group size and with groups of 32+ tokens / channels (4-bit, groups of 32: 35.5 /
 * 105.6 / 217.3 / 633.8 us at B 1 32K / B 1 128K / B 8 32K / B 8 128K against 34.7 / 163.8
 * / 271.6 / 1005.1 on the CUDA cores); 4-bit codes with groups of 16 are mixed (B 8 32K
 * 328 vs 286 us, B 8 128K 937 vs 1071) and stay on the CUDA cores except where those
 * would leave the device underfilled. D 256 (H200, bf16 Hq 32 / Hkv 8, groups of 128,
 * 2026-11-28), B 1 / B 8 at 128K: 2-bit 104.1 / 664.4 us against 260.8 / 1831.2 on the CUDA
 * cores, 4-bit 121.8 / 779.8 against 292.8 / 1918.6 (bf16 decode 265-266 / 1966-1988 us;
 * 179 / 184 registers, no spills). */
static int use_mma(const clkv_quant_cache *c, const clkv_attention_quant_decode_args *a) {
    const clkv_quant_cache_create_args *cfg = &c->cfg;
    const int bits_ok =
        (cfg->k_bits == 2 || cfg->k_bits == 4) && (cfg->v_bits == 2 || cfg->v_bits == 4);
    if (!c->ctx->info.nvidia_ptx || !knobs()->enabled || !bits_ok ||
        (cfg->head_dim != 64 && cfg->head_dim != 128 && cfg->head_dim != 256) ||
        (a->o.dtype != CLKV_F16 && a->o.dtype != CLKV_BF16))
        return 0;
    const int faster = (cfg->k_bits == 2 && cfg->v_bits == 2) || cfg->group >= 32;
    return faster || knobs()->enabled == 2 ? 1 : 2;
}

static clkv_status validate(clkv_quant_cache *c, const clkv_attention_quant_decode_args *a) {
    clkv_context *ctx = c->ctx;
    const clkv_quant_cache_create_args *cfg = &c->cfg;
    clkv_status st;
    if ((st = clkv__check_tensor(ctx, &a->q, "q", 3, CLKV_FLOAT_DTYPES)) ||
        (st = clkv__check_tensor(ctx, &a->o, "o", 3, CLKV_FLOAT_DTYPES)) ||
        (st = clkv__check_optional_tensor(ctx, &a->lse, "lse", 2, CLKV_DTYPE_BIT(CLKV_F32))))
        return st;
    const int64_t Hq = a->q.dims[1];
    if ((st = clkv__check_dim(ctx, &a->q, "q", 0, cfg->batch, "batch of the cache")) ||
        (st = clkv__check_dim(ctx, &a->q, "q", 2, cfg->head_dim, "head dim of the cache")) ||
        (st = clkv__check_dim(ctx, &a->o, "o", 0, cfg->batch, "batch of the cache")) ||
        (st = clkv__check_dim(ctx, &a->o, "o", 1, Hq, "query heads of q")) ||
        (st = clkv__check_dim(ctx, &a->o, "o", 2, cfg->head_dim, "head dim of the cache")))
        return st;
    if (a->lse.buf && ((st = clkv__check_dim(ctx, &a->lse, "lse", 0, cfg->batch, "batch")) ||
                       (st = clkv__check_dim(ctx, &a->lse, "lse", 1, Hq, "query heads of q"))))
        return st;
    if (Hq < 1 || Hq % cfg->kv_heads != 0)
        return clkv__fail(ctx, CLKV_ERR_ARG_SHAPE,
                          "q: Hq = %lld is not a positive multiple of the cache's Hkv = %lld",
                          (long long)Hq, (long long)cfg->kv_heads);
    if (Hq > 65535)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "q: Hq = %lld exceeds 65535", (long long)Hq);
    if (!isfinite(a->scale))
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "scale: %g is not finite", (double)a->scale);
    if (a->num_splits < 0)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "num_splits: %d is negative (0 = automatic)",
                          (int)a->num_splits);
    return CLKV_OK;
}

/* Tensor-core kernel sizing (p's shape fields set). */
static void plan_mma(const clkv_quant_cache *c, const clkv_attention_quant_decode_args *a,
                     quant_plan *p) {
    const clkv_device_info *dev = &c->ctx->info;
    p->ktok = 0;
    /* one split per warp, chunks of whole 16-token tiles (automatic: at least mintok
     * tokens, about `warps` warps per compute unit over all (sequence, KV head, head
     * group) units); the splits of a unit padded to whole work-groups */
    const mma_knobs *kn = knobs();
    p->mma = 1;
    p->group = MMA_HEADS;
    p->nhg = (int)((p->G + MMA_HEADS - 1) / MMA_HEADS);
    p->wg = 32 * MMA_WARPS;
    const int64_t units = p->B * p->Hkv * p->nhg;
    const int64_t bound = p->max_len > 0 ? p->max_len : 1;
    /* The residual (fewer than n_r tokens, on the CUDA cores) gets one work-group of its
     * own per unit, the first, its tiles dealt to the 4 warps in runs of rchunk tokens
     * (cl_kernels/attention_quant_mma.cl says why). Where the quantized splits fill whole
     * rounds of work-groups (`round` below), that work-group is one of the round: two
     * more work-groups per unit beyond a round cost up to 18 us (H100, 4-bit, B 1 128K,
     * empty residual: 91.6 against 73.4 us, 2026-11-27). */
    const int rwarps = kn->res_splits ? MMA_WARPS : 0;
    p->rsplits = rwarps;
    p->rchunk = rwarps ? (int)(((c->cfg.residual + 15) / 16 + rwarps - 1) / rwarps * 16) : 0;
    /* The quantized splits then cover the quantized part only: n_quant is a multiple of n_r
     * at most the length bound (with the whole bound, 127 residual tokens added a split and
     * at times a work-group per unit: H100, 2-bit, B 1 128K 67.5 against 56.5 us). */
    int64_t len = rwarps ? bound / c->cfg.residual * c->cfg.residual : bound;
    if (len < 1)
        len = 1;
    int64_t splits = a->num_splits;
    if (splits <= 0) {
        const int64_t target = (int64_t)dev->compute_units * kn->warps;
        splits = (target + units - 1) / units;
        /* Too few tokens for that many splits of `lt` tokens: splits of lt tokens, but at
         * least one round of work-groups (`per_cu` per compute unit) in splits of at least
         * mintok. 2-bit codes: lt = 2 mintok, 4 per unit (H100, groups of 128, against
         * splits of mintok: B 1 128K 63.8 -> 58.7 us, B 2 128K 110.9 -> 104.8, B 8 32K
         * 110.0 -> 104.3, B 8 128K unchanged). 4-bit keys and values: lt = 2 mintok and 2
         * per unit. H200, groups of 128, two alternations in one run (2026-11-28, us,
         * against lt = 4 mintok): B 1 32K / 128K 24.1-24.6 / 60.3-61.2 against 24.5-24.6 /
         * 65.8-66.3, B 2 47.8-48.3 / 109.8-112.5 against 50.9-51.0 / 109.9-110.5, B 4
         * 60.3-61.6 / 201.5-205.7 against 83.9 / 202.1-202.6, B 8 110.6-116.2 / 376.5-377.7
         * against 111.0-115.4 / 387.0-392.4; CLKV_QUANT_MMA_MINTOK=192 with lt = 4 mintok
         * (768 tokens) was mixed (B 4 32K 66.5-66.7, B 8 32K 138.7-145.3, B 1 128K
         * 66.6-67.3). lt = 4 mintok came from the H100 and an earlier kernel (2026-11-27:
         * against lt = mintok and 4 per unit, B 1 128K 79.1 / 78.6 -> 75.1 / 75.6 us, B 2 32K
         * 49.1 / 49.0 -> 44.7 / 44.8; a forced sweep at B 1 128K there: 512 splits 78.8, 256
         * 84.1, 192 80.4, 128 75.0); not re-measured on the H100.
         * Other widths: lt = mintok * 8 / (k_bits + v_bits), 4 per unit. */
        const int bits = c->cfg.k_bits + c->cfg.v_bits;
        const int four = bits == 8;
        const int64_t lt =
            four ? 2 * (int64_t)kn->mintok : ((int64_t)kn->mintok * 8 / bits + 15) / 16 * 16;
        const int64_t cap = (len + lt - 1) / lt;
        if (splits > cap) {
            const int64_t per_cu = four ? 2 : 4;
            int64_t round =
                ((int64_t)dev->compute_units * per_cu * MMA_WARPS + units - 1) / units - rwarps;
            if (round < 1)
                round = 1;
            const int64_t cap_short = (len + kn->mintok - 1) / kn->mintok;
            const int64_t floor_splits = round < cap_short ? round : cap_short;
            splits = cap > floor_splits ? cap : floor_splits;
        }
    }
    if (splits > len)
        splits = len;
    if (splits > CLKV_ATTN_MERGE_MAX_SPLITS * MMA_WARPS - rwarps)
        splits = CLKV_ATTN_MERGE_MAX_SPLITS * MMA_WARPS - rwarps;
    if (splits < 1)
        splits = 1;
    int64_t chunk = (len + splits - 1) / splits;
    chunk = (chunk + 15) / 16 * 16;
    splits = (len + chunk - 1) / chunk;
    p->chunk = (int)chunk;
    p->splits = p->rsplits + (int)((splits + MMA_WARPS - 1) / MMA_WARPS * MMA_WARPS);
    /* the warps of a work-group merge their states in local memory: one partial state
     * per work-group. Not kept: the merge of those states by the last work-group of each
     * (sequence, KV head, head group), after a fence and a ticket, as the decode kernel
     * does (split_merge.cl) instead of the merge kernel. H100, 2-bit, groups of 128, two
     * runs, us at B 1 32K / B 1 128K / B 8 32K / B 8 128K: merge kernel 22.4-22.5 /
     * 55.1-55.4 / 97.5-98.8 / 328.3-328.9; fused 23.4-23.6 / 59.6-60.1 / 99.0-100.2 /
     * 334.1-336.0 (the states read with 16-byte ld.global.cg in batches of 16 splits, each
     * head's weights by a warp; with volatile loads 24.3 / 61.8 / 99.7 / 343.9); the kernel
     * without any merge 19.4-19.5 / 52.2 / 94.2-94.3 / 324.9-325.8, with the fence and
     * ticket alone 20.3-20.6 / 52.9-53.5. One work-group reading back 17-65 states of 4
     * heads is slower than the merge kernel's launch (2026-11-27). */
    p->merge_splits = p->splits / MMA_WARPS;
    p->part_acc_bytes = clkv__ws_align((size_t)(p->B * p->Hq * p->merge_splits * p->D) * 4);
    p->part_ml_bytes = clkv__ws_align((size_t)(p->B * p->Hq * p->merge_splits) * 2 * 4);
}

static void plan_cuda(const clkv_quant_cache *c, const clkv_attention_quant_decode_args *a,
                      quant_plan *p) {
    const clkv_device_info *dev = &c->ctx->info;
    p->group = (int)(p->G < MAX_GROUP ? p->G : MAX_GROUP);
    p->nhg = (int)((p->G + p->group - 1) / p->group);
    const int gpu = dev->kind == CLKV_DEVICE_KIND_GPU;
    p->wg = c->attn_wg ? c->attn_wg : (gpu ? 128 : 64);
    /* the V phase needs WG a multiple of D / (32 / v_bits) (at most 64) */
    while ((size_t)p->wg > dev->max_work_group_size && p->wg > 64)
        p->wg /= 2;

    /* Tokens per lane in the K phase: 16 (a channel's code words, scale/min loads and
     * q*s products serve that many tokens; on the H200, 16 beat 8 and 4 at B = 1 and
     * matched 8 at B = 8) while the lane's logits (KTOK x heads) fit in 64 registers and
     * the tile's probability table (WG * KTOK x heads padded to 4) in 32 KiB of local
     * memory. */
    const int gp = (p->group + 3) & ~3;
    p->ktok = 16;
    while (p->ktok > 4 && (p->ktok * gp > 64 || (size_t)p->wg * p->ktok * gp * 4 > 32768))
        p->ktok /= 2;
    const int64_t tile = (int64_t)p->wg * p->ktok;

    /* Split-K: enough work-groups to fill the device a few times over, but no split
     * shorter than a tile (the K phase would leave lanes idle); chunks of whole tiles.
     * Forced counts: chunks of a multiple of 16 tokens (a lane's tokens share one key
     * group and code word run). */
    const int64_t units = p->B * p->Hkv * p->nhg;
    const int64_t target = (int64_t)dev->compute_units * (gpu ? 8 : 2);
    const int64_t len = p->max_len > 0 ? p->max_len : 1;
    int64_t splits = a->num_splits > 0 ? a->num_splits : (target + units - 1) / units;
    if (a->num_splits <= 0) {
        const int64_t cap = (len + tile - 1) / tile;
        if (splits > cap)
            splits = cap;
    }
    if (splits > len)
        splits = len;
    if (splits > CLKV_ATTN_MERGE_MAX_SPLITS)
        splits = CLKV_ATTN_MERGE_MAX_SPLITS;
    if (splits < 1)
        splits = 1;
    int64_t chunk = (len + splits - 1) / splits;
    const int64_t round = a->num_splits <= 0 ? tile : 16;
    chunk = (chunk + round - 1) / round * round;
    p->chunk = (int)chunk;
    p->splits = (int)((len + chunk - 1) / chunk);
    p->rsplits = p->rchunk = 0;
    p->merge_splits = p->splits;
    p->part_acc_bytes = clkv__ws_align((size_t)(p->B * p->Hq * p->splits * p->D) * 4);
    p->part_ml_bytes = clkv__ws_align((size_t)(p->B * p->Hq * p->splits) * 2 * 4);
}

static void plan_launch(const clkv_quant_cache *c, const clkv_attention_quant_decode_args *a,
                        quant_plan *p) {
    memset(p, 0, sizeof *p);
    p->B = c->cfg.batch;
    p->Hq = a->q.dims[1];
    p->Hkv = c->cfg.kv_heads;
    p->G = p->Hq / p->Hkv;
    p->D = c->cfg.head_dim;
    p->max_len = (int)c->max_len;
    p->scale = a->scale != 0.0f ? a->scale : (float)(1.0 / sqrt((double)p->D));
    const int mma = use_mma(c, a);
    if (mma == 1) {
        plan_mma(c, a, p);
        return;
    }
    plan_cuda(c, a, p);
    if (mma == 2 &&
        (int64_t)p->splits * p->B * p->Hkv * p->nhg < (int64_t)c->ctx->info.compute_units)
        plan_mma(c, a, p);
}

static clkv_status check_common(clkv_quant_cache *cache,
                                const clkv_attention_quant_decode_args *args) {
    if (!cache)
        return clkv__fail(NULL, CLKV_ERR_ARG_NULL, "cache: quantized cache is NULL");
    if (!args)
        return clkv__fail(cache->ctx, CLKV_ERR_ARG_NULL, "args: argument struct is NULL");
    return validate(cache, args);
}

clkv_status clkv_attention_quant_decode_workspace_size(clkv_quant_cache *cache,
                                                       const clkv_attention_quant_decode_args *args,
                                                       size_t *bytes) {
    clkv_status st = check_common(cache, args);
    if (st)
        return st;
    if (!bytes)
        return clkv__fail(cache->ctx, CLKV_ERR_ARG_NULL, "bytes: output pointer is NULL");
    quant_plan p;
    plan_launch(cache, args, &p);
    *bytes = p.part_acc_bytes + p.part_ml_bytes;
    return CLKV_OK;
}

clkv_status clkv_attention_quant_decode(clkv_quant_cache *cache,
                                        const clkv_attention_quant_decode_args *args,
                                        cl_event *done) {
    clkv_status st = check_common(cache, args);
    if (st)
        return st;
    clkv_context *ctx = cache->ctx;
    quant_plan p;
    plan_launch(cache, args, &p);
    const clkv_quant_cache_create_args *cfg = &cache->cfg;

    clkv_defs defs;
    clkv__defs_init(&defs);
    clkv__defs_int(&defs, "Q_DTYPE", args->q.dtype);
    clkv__defs_int(&defs, "RES_DTYPE", cfg->res_dtype);
    clkv__defs_int(&defs, "META_DTYPE", cfg->meta_dtype);
    clkv__defs_int(&defs, "HEAD_DIM", p.D);
    clkv__defs_int(&defs, "KBITS", cfg->k_bits);
    clkv__defs_int(&defs, "VBITS", cfg->v_bits);
    clkv__defs_int(&defs, "GQ", cfg->group);
    const char *kname = p.mma ? "attention_quant_mma_partial" : "attention_quant_partial";
    if (p.mma) {
        clkv__defs_int(&defs, "NST", mma_stages(cache));
    } else {
        clkv__defs_int(&defs, "GROUP", p.group);
        clkv__defs_int(&defs, "WG_SIZE", p.wg);
        clkv__defs_int(&defs, "KTOK", p.ktok);
    }
    cl_kernel kp, km;
    if ((st = clkv__get_kernel(ctx, p.mma ? MMA_FILE : KERNEL_FILE, &defs, kname, &kp)) ||
        (st = clkv__attn_merge_kernel(ctx, args->o.dtype, p.D, &km)))
        return st;
    if ((st = clkv__check_local_mem(ctx, kp, kname, 0)) ||
        (st = clkv__check_local_mem(ctx, km, "attention_decode_merge", 0)))
        return st;
    cl_mem ws;
    if ((st = clkv__workspace(ctx, p.part_acc_bytes + p.part_ml_bytes, &ws)))
        return st;

    /* The partial kernel takes its scalars as one struct (cl_kernels/kernel_args.cl says
     * why). */
    quant_scalars P;
    memset(&P, 0, sizeof P);
    P.q_off = clkv__elem_offset(&args->q), P.q_sb = args->q.strides[0];
    P.q_sh = args->q.strides[1], P.CQ = cache->cq, P.ml_off = (cl_long)(p.part_acc_bytes / 4);
    P.B = (cl_int)p.B, P.Hkv = (cl_int)p.Hkv, P.NR = cfg->residual, P.Hq = (cl_int)p.Hq;
    P.G = (cl_int)p.G, P.nhg = p.nhg, P.chunk = p.chunk, P.num_splits = p.splits;
    P.rsplits = p.rsplits, P.rchunk = p.rchunk;
    P.scale_log2 = p.scale * 1.4426950408889634f;
    st = clkv__set_args(ctx, kp, kname, 12, CLKV_ARG(args->q.buf), CLKV_ARG(cache->k_codes),
                        CLKV_ARG(cache->k_scale), CLKV_ARG(cache->k_min), CLKV_ARG(cache->v_codes),
                        CLKV_ARG(cache->v_scale), CLKV_ARG(cache->v_min), CLKV_ARG(cache->k_res),
                        CLKV_ARG(cache->v_res), CLKV_ARG(cache->counts), CLKV_ARG(ws), CLKV_ARG(P));
    if (st == CLKV_OK)
        st = clkv__attn_set_merge_args(ctx, km, ws, P.ml_off, p.merge_splits, P.Hq, &args->o,
                                       &args->lse);
    if (st)
        return st;
    clkv__log(ctx,
              "attention_quant_decode: %s B=%lld Hq=%lld Hkv=%lld D=%lld bound=%d k_bits=%d "
              "v_bits=%d group=%d wg=%d ktok=%d splits=%d chunk=%d (residual: %d splits of %d)",
              p.mma ? "tensor-core" : "cuda-core", (long long)p.B, (long long)p.Hq,
              (long long)p.Hkv, (long long)p.D, p.max_len, cfg->k_bits, cfg->v_bits, p.group, p.wg,
              p.ktok, p.splits, p.chunk, p.rsplits, p.rchunk);
    const size_t wgs = p.mma ? (size_t)p.splits / MMA_WARPS : (size_t)p.splits;
    const size_t gp[3] = {wgs * p.wg, (size_t)(p.Hkv * p.nhg), (size_t)p.B};
    const size_t lp[3] = {(size_t)p.wg, 1, 1};
    if ((st = clkv__enqueue(ctx, kp, kname, 3, gp, lp, NULL)))
        return st;
    return clkv__attn_enqueue_merge(ctx, km, p.B, p.Hq, done);
}
