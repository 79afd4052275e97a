/* clkv_attention_window: validation, tile and split-K sizing, launch. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host/attention_common.h"
#include "runtime/internal.h"

#include "cl_kernels/kernel_args.cl" /* after the OpenCL types */

#define KERNEL_FILE "attention_window.cl"
#define MMA_KERNEL_FILE "attention_window_mma.cl"         /* tensor-core variant (NVIDIA) */
#define KEYROWS_KERNEL_FILE "attention_window_keyrows.cl" /* its decode form (T = 1, G <= 8) */
#define KEYROWS_QN 8 /* queries on the mma N dimension of the keyrows kernel */
#define WG 128

/* Everything the launch needs, derived from validated arguments. */
typedef struct window_plan {
    int64_t B, Hq, Hkv, G, T, L, D;
    int max_len;
    float scale;
    int qt, kt, s_ct, o_ct; /* tile parameters (see attention_window.cl) */
    int mma;                /* tensor-core (mma.sync) variant, or its portable emulation */
    int fa;                 /* attention_window_mma.cl (NVIDIA tensor cores, FA2 style) */
    int fa_qt, fa_nwk, fa_kw, fa_nstg, fa_aligned; /* its tile parameters */
    size_t fa_local;                               /* its static local memory, bytes */
    int keyrows; /* fa with T = 1, G <= 8: attention_window_keyrows.cl (keys as mma rows) */
    int direct;  /* keyrows loading K/V straight into registers (its DIRECT form) */
    int fa_wg;   /* work-group size of the fa kernel (32 fa_nwk) */
    int fused;   /* keyrows with several splits: its last work-group merges them */
    int n_qtiles;
    int vasync; /* DIRECT: V stages per warp in local memory (0: V in registers) */
    int splits, chunk;
    size_t part_acc_bytes, part_ml_bytes;
} window_plan;

static clkv_status validate(clkv_context *ctx, const clkv_attention_window_args *a) {
    clkv_status st;
    if ((st = clkv__check_tensor(ctx, &a->q, "q", 4, CLKV_FLOAT_DTYPES)) ||
        (st = clkv__check_tensor(ctx, &a->k, "k", 4, CLKV_FLOAT_DTYPES)) ||
        (st = clkv__check_tensor(ctx, &a->v, "v", 4, CLKV_FLOAT_DTYPES)) ||
        (st = clkv__check_tensor(ctx, &a->o, "o", 4, CLKV_FLOAT_DTYPES)) ||
        (st = clkv__check_optional_tensor(ctx, &a->lse, "lse", 3, CLKV_DTYPE_BIT(CLKV_F32))) ||
        (st =
             clkv__check_optional_tensor(ctx, &a->lengths, "lengths", 1, CLKV_DTYPE_BIT(CLKV_I32))))
        return st;
    const int64_t B = a->q.dims[0], Hq = a->q.dims[1], T = a->q.dims[2], D = a->q.dims[3];
    const int64_t Hkv = a->k.dims[1], L = a->k.dims[2];
    if ((st = clkv__attn_check_kv(ctx, &a->k, &a->v, B, D)))
        return st;
    if ((st = clkv__check_dim(ctx, &a->o, "o", 0, B, "batch of q")) ||
        (st = clkv__check_dim(ctx, &a->o, "o", 1, Hq, "query heads of q")) ||
        (st = clkv__check_dim(ctx, &a->o, "o", 2, T, "window length T of q")) ||
        (st = clkv__check_dim(ctx, &a->o, "o", 3, D, "head dim of q")))
        return st;
    if (a->lse.buf && ((st = clkv__check_dim(ctx, &a->lse, "lse", 0, B, "batch of q")) ||
                       (st = clkv__check_dim(ctx, &a->lse, "lse", 1, Hq, "query heads of q")) ||
                       (st = clkv__check_dim(ctx, &a->lse, "lse", 2, T, "window length T of q"))))
        return st;
    if (a->lengths.buf && (st = clkv__check_dim(ctx, &a->lengths, "lengths", 0, B, "batch of q")))
        return st;
    if ((st = clkv__attn_check_sizes(ctx, B, Hq, Hkv, L, a->max_length)))
        return st;
    if (T > INT32_MAX || (Hkv > 0 && T * (Hq / Hkv) > INT32_MAX))
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE,
                          "q: T = %lld window rows times the group size exceed 2^31-1",
                          (long long)T);
    if ((st = clkv__attn_check_scale(ctx, a->scale)))
        return st;
    if (a->num_splits < 0)
        return clkv__fail(ctx, CLKV_ERR_ARG_RANGE, "num_splits: %d is negative (0 = automatic)",
                          (int)a->num_splits);
    return CLKV_OK;
}

static int64_t ceil_div(int64_t a, int64_t b) {
    return (a + b - 1) / b;
}

/* Local memory of the partial kernel for the tile parameters (mirrors its __local
 * declarations). */
static size_t partial_local_bytes(int64_t D, int qt, int kt, int mma, int emulated) {
    const size_t common =
        (size_t)qt * (size_t)(kt + 1) * 4 + (size_t)qt * 4 * 4 + (size_t)WG * 2 * 4;
    if (mma)
        return (size_t)(qt + 2 * kt) * (size_t)(D + 8) * 2 + common +
               (emulated ? (size_t)WG / 32 * 32 * 6 * 4 : 4);
    const size_t ld4 = (size_t)D / 4 + 1;
    return (size_t)qt * ld4 * 16 + (size_t)kt * ld4 * 16 + (size_t)kt * (size_t)(D / 4) * 16 +
           common;
}

/* CLKV_WINDOW_MMA (read once per process): unset = the tensor-core kernel
 * (attention_window_mma.cl) where it applies (NVIDIA inline PTX, q and K/V both f16 or both
 * bf16, D 64, 128 or 256), the portable f32 kernel elsewhere; "0" = always the portable kernel;
 * "1" = also the older in-file mma variant where the tensor-core kernel does not apply
 * (on other devices a slow portable emulation of the warp product, to test its logic). */
static int mma_env(void) {
    static int cached = -2;
    if (cached == -2) {
        const char *e = getenv("CLKV_WINDOW_MMA");
        cached = e && e[0] == '1' ? 1 : e && e[0] == '0' ? 0 : -1;
    }
    return cached;
}

/* Tile parameters of the tensor-core kernel: 4 warps, QT = 16 * (4 / NWK) rows (the
 * smallest holding all G*T rows, up to 64), NWK warps along the keys of a tile (small
 * windows: several warps share a row block, so a work-group still streams a wide tile of
 * 64 keys). Measured on an H200 (bf16, D 128): prefill is fastest with 64 keys per warp
 * and 2 stages, the window (memory-bound) with 3 stages. Returns 0 where it does not fit
 * the device. */
/* CLKV_WINDOW_P16=1 (read once): with a 16-bit o, the tensor-core kernel rounds the
 * attention weights once to the K/V dtype instead of keeping a residual (FlashAttention
 * precision: ~25 % faster prefill, but outside the library's tested tolerance). */
static int p16_requested(void) {
    static int cached = -1;
    if (cached < 0) {
        const char *e = getenv("CLKV_WINDOW_P16");
        cached = e && e[0] == '1';
    }
    return cached;
}

/* A tuning override from the environment, read once per process (plan_fa runs on every
 * call, decode steps included). `slot` caches it; INT_MIN = not read yet. */
static int env_int_once(int *slot, const char *name) {
    if (*slot == INT_MIN) {
        const char *e = getenv(name);
        *slot = e ? atoi(e) : 0;
    }
    return *slot;
}

/* A switch read once into *slot (initially -1): on unless the variable starts with '0'. */
static int env_on_once(int *slot, const char *name) {
    if (*slot < 0) {
        const char *e = getenv(name);
        *slot = !(e && e[0] == '0');
    }
    return *slot;
}

/* CLKV_DECODE_KEYROWS (read once per process): unset or not "0" = decode-shaped calls (T = 1,
 * G <= 8) on the tensor cores take attention_window_keyrows.cl (the keys as mma rows, the G
 * queries padded to 8 as columns: half the tensor-core products of the 16-row kernel);
 * "0" = attention_window_mma.cl for them too. */
static int keyrows_env(void) {
    static int cached = -1;
    return env_on_once(&cached, "CLKV_DECODE_KEYROWS");
}

/* CLKV_DECODE_KEYROWS_MOVMATRIX=0 (read once per process): the keyrows kernel transposes the
 * attention weights with warp shuffles instead of movmatrix (a fallback and an A/B knob). */
static int movmatrix_env(void) {
    static int cached = -1;
    return env_on_once(&cached, "CLKV_DECODE_KEYROWS_MOVMATRIX");
}

/* Decode variants of the keyrows kernel measured and dropped (H100 unless stated):
 * slower were more work-groups than compute units (same day as the interleave, interleaved: B 8
 * 128K 4 / 6 / 8 splits 1453-1494 us against 1435-1438 us with 2; B 1 128K 32 / 33 / 48
 * splits 190.4-195.6 against 187.7-189.1 us with 16; 2 instead of 3 stages within the
 * spread) and 8 warps per work-group instead of 4 (128-key tiles, same run: B 1
 * 128K 203.5-204.7 us with 3 stages, 190.1-193.2 with 2, against 190.1-191.4; B 8 128K
 * 1434.0-1446.2 against 1441.6-1442.3).
 * Not a gain: a 1-D grid of one work-group per compute unit over the units' key tiles laid
 * end to end (132 work-groups instead of 8 x 16 = 128 at B 1; work-groups crossing into the
 * next (sequence, KV head), each unit merged by the last of its 17-18 work-groups): B 1 128K
 * 195.5-198.6 against 192.2-192.7 us, B 8 128K 1434.8-1435.2 against 1429.9-1430.5 us.
 * Not a gain either: the splits of a head drawing their key tiles from a per-head counter
 * (atomic tickets, so a work-group on a faster compute unit takes more tiles). One ticket
 * per tile: B 1 128K 188.5 -> 249.4 us, B 8 128K 1425.6 -> 1831.7 us on the H100; the same
 * draws with the tiles kept static cost as much, so it is the atomic's round trip, which
 * the fence of the next work-group barrier waits for. One ticket per 16 / 32 / 64 tiles
 * (H200, two alternations): B 1 128K 139.3-139.9 / 136.3-137.0 / 135.8-135.9 against
 * 134.6-135.5 us, B 8 128K 1050.7-1053.9 / 1037.3-1042.4 / 1037.0-1037.4 against
 * 1018.6-1020.8 us (2026-11-27).
 * More splits were slower on the H200 too (same day, two alternations): B 1 128K 24 / 32 splits
 * 198.7-199.1 / 158.6-159.3 against 133.8 us with 16, B 1 32K 64.2-64.7 / 53.3-53.5 against
 * 40.5-40.6 us; 2 / 4 stages 132.9-133.2 / 136.4-136.5 us at 128K. */

/* Where the decode kernel's time goes (H200, bf16 Hq 32 / Hkv 8, D 128, 2026-11-27;
 * diagnostic builds through CLKV_KERNEL_DIR, not kept): with the math removed (copies,
 * waits and barriers only) B 8 128K takes 980-985 us and B 1 128K 132-133 us, against
 * 996-1022 / 134-138 us for the kernel and 949 / 125 us for the same-bytes streaming probe;
 * with the copies removed, 409 / 58 us. So the cp.async pipeline alone stays 3 % (B 8) to
 * 6 % (B 1) short of the probe, and the math adds 1.5-4 %. Not a gain:
 *   - 2 or 3 resident work-groups per compute unit (16 keys per warp, 2 or 3 stages, B 8 4
 *     or 6 splits: 1027-1049 us; copies only 1007 us; B 1 32 or 48 splits 139-147 us);
 *   - Hopper bulk copies (cp.async.bulk of each 256-byte K and V row into the padded tiles,
 *     one mbarrier per stage instead of cp.async groups): correct, but B 8 128K 2575 us
 *     (1901 copies only) with the default tiles; with 32 keys per warp and 3 stages the
 *     copies alone took 128.5 us at B 1 128K (988 at B 8) yet the kernel 178 / 1395 us;
 *   - 132 instead of 128 work-groups (66 KV heads, 2 splits, B 1 128K: 1.045x the probe
 *     against 1.057x with 64 heads).
 * PyTorch's peer on this machine is cuDNN's sm80 flash kernel (16 x 128 x 128 tiles, 128
 * threads, 86 KB local memory, 183 registers, 256 work-groups: 32 splits at B 1, 4 at B 8,
 * two per compute unit) plus a 2-3 us reduction kernel; its main kernel runs at the probe's
 * time (125.6 us at B 1 128K, 946 us at B 8 128K). */

/* CLKV_DECODE_INTERLEAVE=0 (read once per process): the keyrows kernel's splits take
 * contiguous key ranges instead of interleaved key tiles (split s: tiles s, s + splits, ...).
 * Interleaved, the splits of a head read neighbouring tiles at any moment (H100, bf16 Hq 32 /
 * Hkv 8, D 128, two alternations in one run: B 1 128K 191.8 / 192.3 -> 188.5 / 187.2 us, B 8
 * 128K 1430.6 / 1430.6 -> 1427.1 / 1425.7 us, B 1 and B 8 at 4K / 32K within the spread).
 * The same interleave in the 16-row kernel (attention_window_mma.cl) gained nothing for the
 * DropKV window (T 8, 128K: attention 210.1 / 212.8 against 207.2 / 207.8 us) nor for the
 * LongFlow step's attention (B 2, 32K slots: 118.0 / 118.4 against 118.1 / 118.7 us). */
static int interleave_env(void) {
    static int cached = -1;
    return env_on_once(&cached, "CLKV_DECODE_INTERLEAVE");
}

/* Most partial states (splits x G) the keyrows kernel merges in its last work-group. */
#define FUSED_MAX_STATES 64

/* CLKV_DECODE_FUSED_MERGE=0 (read once per process): the keyrows kernel leaves the merge of
 * its splits to attention_window_merge (a second launch) instead of doing it in the last
 * work-group of each (sequence, KV head). */
static int fused_env(void) {
    static int cached = -1;
    return env_on_once(&cached, "CLKV_DECODE_FUSED_MERGE");
}

/* CLKV_DECODE_DIRECT (read once per process): unset or not "0" = the keyrows kernel's
 * DIRECT form (each lane loads the K/V chunks of its mma fragments straight into registers:
 * no local tiles, no barriers in the key loop) for caches of more than 4K tokens in all
 * (plan_fa), with CLKV_DECODE_DIRECT_WARPS (4, 8 or 16; default 8) warps per work-group;
 * "0" = the cp.async form (4 warps, local stages) everywhere.
 * H100, bf16 Hq 32 / Hkv 8, D 128, 2026-11-28, two alternations in one run (us):
 *   B 1 4K / 32K / 128K: cp.async 10.5-10.7 / 52.6-52.7 / 186.3-186.4, DIRECT 8 warps x 32
 *   keys 12.3-12.7 / 51.7-52.2 / 182.3-182.9;
 *   B 8 4K / 32K / 128K: cp.async 53.0-53.1 / 369.7-370.6 / 1426.5-1428.7, DIRECT 52.0-52.6 /
 *   351.4-352.7 / 1386.7-1388.7 (the streaming probe reading the same bytes: 1385-1386).
 * Slower in a sweep the same day: 8 warps x 16 keys (B 8 128K 1425.7-1426.1, B 1 128K
 * 184.1-184.6), 16 warps x 16 (B 8 128K 1393.0-1393.6 but B 1 4K 14.1-15.2) or x 32 (B 8
 * 128K 1486: 128 registers a lane at 512 work-items), 4 warps with 2-4 work-groups per
 * compute unit (B 8 128K 1523 with 8 splits, B 1 128K 202.6 with 64), 8 warps x 16 with two
 * work-groups per unit (B 1 128K 188.1, B 8 128K 1413.3). */
static int direct_warps(void) {
    static int on = -1, nw = INT_MIN;
    if (!env_on_once(&on, "CLKV_DECODE_DIRECT"))
        return 0;
    const int w = env_int_once(&nw, "CLKV_DECODE_DIRECT_WARPS");
    return w == 4 || w == 16 ? w : 8;
}

/* CLKV_DECODE_PREFETCH (read once per process): unset or not "0" = the DIRECT form requests
 * the next key tile's K while it computes this one (kernel -DPREFETCH, measured there);
 * "0" = at the top of each iteration. */
static int prefetch_env(void) {
    static int cached = -1;
    return env_on_once(&cached, "CLKV_DECODE_PREFETCH");
}

/* CLKV_DECODE_VASYNC (read once per process): V stages per warp of the DIRECT form (kernel
 * -DVASYNC, measured there): 2 unless the variable starts with '0' (none: V straight into
 * registers, as env_on_once reads a switch) or is "3". */
static int vasync_env(void) {
    static int on = -1, stages = INT_MIN;
    if (!env_on_once(&on, "CLKV_DECODE_VASYNC"))
        return 0;
    return env_int_once(&stages, "CLKV_DECODE_VASYNC") == 3 ? 3 : 2;
}

/* The keyrows kernel's DIRECT form: nwk warps of 32 keys (16 with CLKV_WINDOW_FA_KW = 16,
 * and at D 256), each with its V stages (VASYNC, where rows are 16-byte aligned and they fit
 * the device; D 256 runs only with them), whose memory is then the f32 combine area of nwk
 * x 8 queries x (D + 4). Leaves p as it is and returns 0 where the device cannot run it (the
 * cp.async form is planned instead, or at D 256 the 16-row kernel). */
static int plan_direct(clkv_context *ctx, window_plan *p, int nwk, int kw_env) {
    const int kw = kw_env == 16 || p->D == 256 ? 16 : 32;
    const size_t combine = (size_t)nwk * KEYROWS_QN * (size_t)(p->D + 4) * 4;
    const size_t ml = (size_t)nwk * KEYROWS_QN * 2 * 4;
    int vasync = p->fa_aligned ? vasync_env() : 0;
    const size_t vstage = (size_t)nwk * (size_t)kw * (size_t)(p->D + 8) * 2;
    if (vasync && vasync * vstage + ml > ctx->info.static_local_mem_bytes)
        vasync = 0;
    const size_t vstages = (size_t)vasync * vstage;
    const size_t local = (vstages > combine ? vstages : combine) + ml;
    if ((size_t)(32 * nwk) > ctx->info.max_work_group_size ||
        local > ctx->info.static_local_mem_bytes || (p->D == 256 && !vasync))
        return 0;
    p->direct = 1;
    p->fa_nwk = nwk;
    p->fa_wg = 32 * nwk;
    p->fa_kw = kw;
    p->fa_nstg = 1;
    p->vasync = vasync;
    p->fa_local = local;
    return 1;
}

static int plan_fa(clkv_context *ctx, const clkv_attention_window_args *a, window_plan *p) {
    const int64_t rows = p->G * p->T;
    p->fa_aligned = clkv__rows_aligned(&a->k, 8) && clkv__rows_aligned(&a->v, 8);
    /* tuning overrides (keys per warp 16 | 32 | 64, stages 2..8); ignored when invalid */
    static int kw_cached = INT_MIN, st_cached = INT_MIN;
    const int kw_env = env_int_once(&kw_cached, "CLKV_WINDOW_FA_KW"),
              st_env = env_int_once(&st_cached, "CLKV_WINDOW_FA_STAGES");
    /* The keyrows (decode) kernel. Its DIRECT form (D 64, 128, 256) for caches of more than
     * 4K tokens in all; at most 4K keep the cp.async form (D 64 / 128; launch-bound, its
     * 4-warp work-groups finish sooner: H100, B 1 4K: 10.5-10.7 us against 12.3-12.7
     * DIRECT). D 256 elsewhere runs the 16-row kernel. */
    const int decode = p->T == 1 && p->G <= KEYROWS_QN && keyrows_env();
    const int nwd = decode && p->B * (int64_t)p->max_len > 4096 ? direct_warps() : 0;
    p->keyrows = decode;
    p->fa_qt = KEYROWS_QN;
    if (nwd && plan_direct(ctx, p, nwd, kw_env))
        return 1;
    p->keyrows = decode && p->D != 256;
    p->fa_qt = p->keyrows ? KEYROWS_QN : rows <= 16 ? 16 : rows <= 32 ? 32 : 64;
    p->fa_nwk = p->keyrows ? 4 : 4 / (p->fa_qt / 16);
    p->fa_kw = 64 / p->fa_nwk;
    p->fa_wg = WG;
    /* Decode-like shapes (one 16-row block) with at least half a wave of row blocks: 32 keys
     * per warp in 2 stages (H200, T = 1, B 8, L 128K: 1022 us against 1098 us with 16 keys
     * in 3 stages; fewer row blocks, where each work-group owns a compute unit, keep 16
     * keys in 3 stages: B 1, L 32K 43.9 against 49.5 us). H100, bf16 Hq 32 / Hkv 8, D 128,
     * 2026-11-27: 16 keys in 2 stages at B 8 32K took 364.7-367.2 us against 374.9-376.1
     * in a sweep of keys per warp, stages and splits, but 366.3-369.7 against 369.8-370.7
     * when rerun next to the rule, and more at B 16 (4K-64K) and B 8 128K (1431.9 /
     * 1434.7 against 1426.3 / 1426.6 us): not a rule change. */
    const int64_t units = a->q.dims[0] * a->k.dims[1] * ((rows + p->fa_qt - 1) / p->fa_qt);
    const int wide = p->fa_nwk == 4 && units * 2 > (int64_t)ctx->info.compute_units;
    if (wide)
        p->fa_kw = 32;
    /* D 256: 128 accumulators a lane, so at most 32 keys per warp (16 where warps share a
     * row block), 2 stages, and the q fragments in local memory (the kernel's Q_LOCAL; 252
     * registers, no spills). H200, bf16 Hq 32 / Hkv 8, T 8, 16K / 128K keys (2026-11-28):
     * 61.4 / 287.0 us (82.8 % of the read bandwidth at 128K) against 379.6 / 2748.2 on the
     * portable kernel; 32 keys per warp 56.3 / 297.7, 3 stages 61.2 / 352.8, both 56.6 /
     * 303.4. f16 prefill of 4K: 1490 against 22714 us. */
    const int d256 = p->D == 256;
    if (d256)
        p->fa_kw = p->fa_nwk == 1 ? 32 : 16;
    if (kw_env == 16 || kw_env == 32 || (kw_env == 64 && !p->keyrows))
        p->fa_kw = kw_env;
    const size_t kt = (size_t)(p->fa_nwk * p->fa_kw);
    const size_t stage = 2 * kt * (size_t)(p->D + 8) * 2;
    size_t nstg = p->fa_nwk == 1 || wide || d256 ? 2 : 3;
    if (st_env >= 2 && st_env <= 8)
        nstg = (size_t)st_env;
    /* (m, l) of the warps; qsm at D 256 */
    const size_t ml_bytes = (size_t)p->fa_nwk * (size_t)p->fa_qt * 2 * 4 +
                            (d256 ? (size_t)p->fa_qt * (size_t)p->D * 2 : 0);
    /* the stages also hold the final combine of the warps' accumulators: 64 rows x D f32,
     * or for the keyrows kernel 4 warps x 8 queries x (D + 4) f32 */
    const size_t combine = p->keyrows ? (size_t)4 * KEYROWS_QN * (size_t)(p->D + 4) * 4
                                      : (size_t)64 * (size_t)p->D * 4;
    while (nstg > 2 && nstg * stage + ml_bytes > ctx->info.static_local_mem_bytes)
        nstg--; /* devices with less static local memory: fewer stages */
    p->fa_nstg = (int)nstg;
    p->fa_local = nstg * stage + ml_bytes;
    if (nstg * stage < combine)
        return 0;
    return nstg * stage + ml_bytes <= ctx->info.static_local_mem_bytes;
}

static clkv_status plan_launch(clkv_context *ctx, const clkv_attention_window_args *a,
                               window_plan *p) {
    memset(p, 0, sizeof *p);
    p->B = a->q.dims[0];
    p->Hq = a->q.dims[1];
    p->T = a->q.dims[2];
    p->D = a->q.dims[3];
    p->Hkv = a->k.dims[1];
    p->L = a->k.dims[2];
    p->G = p->Hkv ? p->Hq / p->Hkv : 1;
    p->max_len = (int)(a->max_length < 0 ? p->L : a->max_length);
    p->scale = a->scale != 0.0f ? a->scale : (float)(1.0 / sqrt((double)p->D));

    /* Tiles: QT * D = 4096 output values per work-group of 128 lanes (32 f32 accumulators
     * per lane), K/V tiles sized so everything stays within 48 KiB of local memory. */
    const int int16 = a->q.dtype == a->k.dtype && a->k.dtype != CLKV_F32;
    p->fa = int16 && ctx->info.nvidia_ptx && (p->D == 64 || p->D == 128 || p->D == 256) &&
            mma_env() != 0 && plan_fa(ctx, a, p);
    p->keyrows = p->keyrows && p->fa;
    p->direct = p->direct && p->keyrows;
    p->mma = int16 && mma_env() == 1 && !p->fa;
    int qt_max;
    if (p->mma) {
        /* 16-row mma blocks, QT * D = 4096 (more rows cost registers: a ptxas build of
         * the D = 128, 64-row tile needs 255 per lane); 32-key tiles of 16-bit values */
        qt_max = (int)(4096 / p->D);
        p->kt = 32;
        p->o_ct = 32;
    } else if (p->D == 64) {
        qt_max = 64;
        p->kt = 32;
        p->o_ct = 16;
    } else if (p->D == 128) {
        qt_max = 32;
        p->kt = 16;
        p->o_ct = 32;
    } else {
        qt_max = 16;
        p->kt = 8;
        p->o_ct = 32;
    }
    p->s_ct = p->kt;
    const int s_rt = WG / p->s_ct, o_rt = WG / p->o_ct;
    const int qt_min = p->mma ? 16 : s_rt > o_rt ? s_rt : o_rt;
    /* Small windows: the smallest power-of-two tile holding all G*T rows. */
    const int64_t rows = p->G * p->T;
    int qt = qt_min;
    while (qt < qt_max && qt < rows)
        qt *= 2;
    p->qt = qt;
    const size_t lmem =
        partial_local_bytes(p->D, p->qt, p->kt, p->mma, p->mma && !ctx->info.nvidia_ptx);
    if (lmem > ctx->info.local_mem_bytes)
        return clkv__fail(ctx, CLKV_ERR_LOCAL_MEMORY,
                          "attention_window: tiles need %zu bytes of local memory, the device "
                          "has %llu",
                          lmem, (unsigned long long)ctx->info.local_mem_bytes);
    if ((size_t)WG > ctx->info.max_work_group_size)
        return clkv__fail(ctx, CLKV_ERR_DEVICE_LIMIT,
                          "attention_window: needs work-groups of %d, the device allows %llu", WG,
                          (unsigned long long)ctx->info.max_work_group_size);
    p->n_qtiles = (int)(rows > 0 ? ceil_div(rows, p->qt) : 0);
    int kt = p->kt; /* key tile of the partial kernel (the portable parameters above still
                       build the merge kernel) */
    if (p->fa) {
        p->n_qtiles = (int)(rows > 0 ? ceil_div(rows, p->fa_qt) : 0);
        kt = p->fa_nwk * p->fa_kw;
    }

    /* Split-K: enough work-groups to fill the device (a few per compute unit), with
     * chunks of at least min_chunk keys so the partial states stay small next to the K/V
     * bytes. Prefill (many row tiles) gets one split and no merge. */
    const int gpu = ctx->info.kind == CLKV_DEVICE_KIND_GPU;
    const int64_t len = p->max_len > 0 ? p->max_len : 1;
    const int64_t units = p->B * p->Hkv * (int64_t)p->n_qtiles;
    int64_t splits;
    if (a->num_splits > 0) {
        splits = a->num_splits;
    } else {
        /* the tensor-core kernel streams faster per work-group: fewer, longer splits
         * (its partial states would otherwise rival the K/V bytes) */
        const int64_t cu = (int64_t)ctx->info.compute_units;
        const int64_t target = cu * (gpu ? (p->fa ? 2 : 4) : 2);
        /* Decode (keyrows) splits of at least 128 keys, 512 for the other tensor-core
         * forms: at short contexts 512 left most compute units idle (B 2 over 1K keys: 2
         * splits, 32 work-groups). H100, bf16, Hq 32 / Hkv 8, D 128, two runs, 512 -> 128
         * (256 / 64 in between or equal): B 1 1K 12.7 / 12.8 -> 8.2 / 9.4 us, B 1 4K 13.4 /
         * 13.3 -> 11.1 / 11.3, B 2 1K 12.7 / 12.7 -> 8.7 / 8.9; B 1 16K, B 2 4K-16K and B 8
         * 1K-16K unchanged (their splits are capped elsewhere). CLKV_WINDOW_FA_MIN_CHUNK
         * (read once) overrides both for tuning. */
        static int mc_cached = INT_MIN;
        const int mc_env = env_int_once(&mc_cached, "CLKV_WINDOW_FA_MIN_CHUNK");
        const int64_t fa_min = mc_env > 0 ? mc_env : p->keyrows ? 128 : 512;
        const int64_t min_chunk = gpu ? (p->fa ? fa_min : 256) : 512;
        splits = units > 0 ? ceil_div(target, units) : 1;
        /* Tensor-core kernel with few row tiles (a small window): at most one work-group
         * per compute unit, in one wave (H200, T = 8, 8 KV heads: 16 splits 30 us at 16K
         * keys and 146 us at 128K; 24 splits 36 / 171 us, 32 splits 34 / 150 us). */
        if (p->fa && units > 0 && units * 2 <= cu)
            splits = cu / units;
        /* Several row blocks (G * T > 16: window scoring, T = 8 with G = 4): two
         * work-groups per compute unit where two fit its local memory, still one wave
         * (H200, bf16, Hq 32 / Hkv 8, D 128, T = 8, 128K keys: 32 splits 151 us, 16
         * splits 172 us, 24 splits 185 us, 48 splits 192 us). Decode (16 rows) keeps one. */
        if (p->fa && p->fa_qt >= 32 && units > 0 && units * 2 <= cu &&
            2 * p->fa_local <= ctx->info.static_local_mem_bytes &&
            len >= (2 * cu / units) * 1024) /* 16K keys: 16 splits 34.2 us, 32 35.9 us */
            splits = 2 * cu / units;
        /* Re-measured 2026-11-27, DropKV full call at 128K: on the H200 the rule's 33 splits
         * 370.5 / 371.3 us against 389.4 / 391.9 with 16 and 399.3 / 400.4 with 24; on the
         * H100 16 splits ran its window attention faster (201.7 against 208.9 us, one run).
         * The rule stays tuned for the H200. */
        static int sp_cached = INT_MIN;
        const int sp_env = env_int_once(&sp_cached, "CLKV_WINDOW_FA_SPLITS");
        if (p->fa && sp_env > 0) /* tuning override */
            splits = sp_env;
        const int64_t wanted = splits;
        if (splits > ceil_div(len, min_chunk))
            splits = ceil_div(len, min_chunk);
        /* shorter decode chunks must not cost the fused merge (at most FUSED_MAX_STATES
         * states) that 512-key chunks kept: then as many splits as it holds */
        const int64_t s512 = wanted < ceil_div(len, 512) ? wanted : ceil_div(len, 512);
        if (p->keyrows && splits * p->G > FUSED_MAX_STATES && s512 * p->G <= FUSED_MAX_STATES)
            splits = s512 > FUSED_MAX_STATES / p->G ? s512 : FUSED_MAX_STATES / p->G;
        /* keep the partial states within a quarter of the largest buffer */
        const uint64_t per_split = (uint64_t)(p->B * p->Hq * p->T) * (uint64_t)(p->D + 2) * 4;
        while (splits > 1 && per_split * (uint64_t)splits > ctx->info.max_alloc_bytes / 4)
            splits /= 2;
    }
    if (splits > ceil_div(len, kt) && a->num_splits <= 0)
        splits = ceil_div(len, kt);
    if (splits > len)
        splits = len;
    if (splits < 1)
        splits = 1;
    int64_t chunk = ceil_div(len, splits);
    if (a->num_splits <= 0) /* whole key tiles per split */
        chunk = ceil_div(chunk, kt) * kt;
    p->chunk = (int)chunk;
    p->splits = (int)ceil_div(len, chunk);
    /* The fused merge is one work-group reading splits x G partial states back: it saves the
     * merge launch where that is small, and costs more than the launch where it is not (H200,
     * bf16 B 1 L 1K / 4K, 2 splits x G 4 / 8 x 4: 12.8 / 16.3 us against 17.7 / 18.5 us on the
     * decode kernel; f16 B 1 Hq 16 / Hkv 2 L 32K, 64 splits x G 8: 46 us fused against 20 us
     * with the merge kernel; bf16 B 1 Hq 56 / Hkv 8 L 32K, 16 x 7: 49 against 44 us). Since
     * the merge reads the (m, l) pairs in parallel (split_merge.cl), 16 splits x G 4 gain
     * too (H100, bf16 B 1 Hq 32 / Hkv 8, two alternations in one run: 32K 55.8 / 56.1 ->
     * 55.0 / 55.0 us, 128K 191.8 / 192.1 -> 190.0 / 192.1 us); larger products were not
     * measured again. */
    p->fused = p->keyrows && p->splits > 1 && p->splits * p->G <= FUSED_MAX_STATES && fused_env();
    if (p->splits > 1) {
        const uint64_t nrow = (uint64_t)(p->B * p->Hq * p->T) * (uint64_t)p->splits;
        if (nrow > (UINT64_MAX / 8) / (uint64_t)p->D)
            return clkv__fail(ctx, CLKV_ERR_ARG_OVERFLOW,
                              "num_splits: %d splits of %lld rows overflow the workspace size",
                              p->splits, (long long)(p->B * p->Hq * p->T));
        p->part_acc_bytes = clkv__ws_align((size_t)(nrow * (uint64_t)p->D * 4));
        p->part_ml_bytes = clkv__ws_align((size_t)(nrow * 2 * 4));
    }
    return CLKV_OK;
}

int clkv__window_uses_tensor_cores(clkv_context *ctx, const clkv_attention_window_args *a) {
    window_plan p;
    if (plan_launch(ctx, a, &p) != CLKV_OK || !p.fa)
        return 0;
    return p.keyrows ? 2 : 1;
}

static clkv_status check_common(clkv_context *ctx, const clkv_attention_window_args *args) {
    if (!ctx || !args)
        return clkv__fail_entry(ctx, args);
    return validate(ctx, args);
}

clkv_status clkv_attention_window_workspace_size(clkv_context *ctx,
                                                 const clkv_attention_window_args *args,
                                                 size_t *bytes) {
    clkv_status st = check_common(ctx, args);
    if (st != CLKV_OK)
        return st;
    if (!bytes)
        return clkv__fail(ctx, CLKV_ERR_ARG_NULL, "bytes: output pointer is NULL");
    window_plan p;
    if ((st = plan_launch(ctx, args, &p)) != CLKV_OK)
        return st;
    *bytes = (p.B && p.Hq && p.T) ? p.part_acc_bytes + p.part_ml_bytes : 0;
    return CLKV_OK;
}

clkv_status clkv_attention_window(clkv_context *ctx, const clkv_attention_window_args *args,
                                  cl_event *done) {
    clkv_status st = check_common(ctx, args);
    if (st != CLKV_OK)
        return st;
    window_plan p;
    if ((st = plan_launch(ctx, args, &p)) != CLKV_OK)
        return st;
    if (p.B == 0 || p.Hq == 0 || p.T == 0) /* nothing to compute */
        return clkv__marker(ctx, done);

    clkv_defs defs;
    clkv__defs_init(&defs);
    clkv__defs_int(&defs, "Q_DTYPE", args->q.dtype);
    clkv__defs_int(&defs, "KV_DTYPE", args->k.dtype);
    clkv__defs_int(&defs, "O_DTYPE", args->o.dtype);
    clkv__defs_int(&defs, "HEAD_DIM", p.D);
    clkv__defs_int(&defs, "WG_SIZE", WG);
    clkv__defs_int(&defs, "QT", p.qt);
    clkv__defs_int(&defs, "KT", p.kt);
    clkv__defs_int(&defs, "S_CT", p.s_ct);
    clkv__defs_int(&defs, "O_CT", p.o_ct);
    clkv__defs_int(&defs, "MMA", p.mma);
    const int direct = p.splits == 1;
    cl_kernel kp, km = NULL;
    if (p.fa) {
        clkv_defs fdefs;
        clkv__defs_init(&fdefs);
        clkv__defs_int(&fdefs, "Q_DTYPE", args->q.dtype);
        clkv__defs_int(&fdefs, "KV_DTYPE", args->k.dtype);
        clkv__defs_int(&fdefs, "O_DTYPE", args->o.dtype);
        clkv__defs_int(&fdefs, "HEAD_DIM", p.D);
        clkv__defs_int(&fdefs, "KW", p.fa_kw);
        clkv__defs_int(&fdefs, "NSTG", p.fa_nstg);
        clkv__defs_int(&fdefs, "KV_ALIGNED", p.fa_aligned);
        if (p.keyrows) {
            clkv__defs_int(&fdefs, "MOVMATRIX", movmatrix_env());
            clkv__defs_int(&fdefs, "FUSED_MERGE", p.fused);
            clkv__defs_int(&fdefs, "INTERLEAVE", interleave_env());
            if (p.direct) {
                clkv__defs_int(&fdefs, "DIRECT", 1);
                clkv__defs_int(&fdefs, "NW", p.fa_nwk);
                clkv__defs_int(&fdefs, "PREFETCH", prefetch_env());
                if (p.vasync)
                    clkv__defs_int(&fdefs, "VASYNC", p.vasync);
            }
        } else {
            clkv__defs_int(&fdefs, "QT", p.fa_qt);
            clkv__defs_int(&fdefs, "NWK", p.fa_nwk);
            clkv__defs_int(&fdefs, "P_LO", !(p16_requested() && args->o.dtype != CLKV_F32));
        }
        st = clkv__get_kernel(ctx, p.keyrows ? KEYROWS_KERNEL_FILE : MMA_KERNEL_FILE, &fdefs,
                              "attention_window_partial", &kp);
    } else {
        st = clkv__get_kernel(ctx, KERNEL_FILE, &defs, "attention_window_partial", &kp);
    }
    if (st)
        return st;
    /* the merge kernel runs unless the keyrows kernel merges its own splits */
    const int merge = !direct && !p.fused;
    if (merge && (st = clkv__get_kernel(ctx, KERNEL_FILE, &defs, "attention_window_merge", &km)))
        return st;
    cl_mem ws = NULL, tickets = NULL;
    if (!direct && (st = clkv__workspace(ctx, p.part_acc_bytes + p.part_ml_bytes, &ws)))
        return st;
    if (p.fused && (st = clkv__counters(ctx, (size_t)(p.B * p.Hkv), &tickets)))
        return st;

    /* Partial arrays in the workspace: acc first, then (m, l) pairs. The partial kernel
     * takes its scalars as one struct (cl_kernels/kernel_args.cl says why). */
    const cl_long ml_off = (cl_long)(p.part_acc_bytes / 4);
    const cl_mem len_buf = args->lengths.buf, o_buf = args->o.buf, lse_buf = args->lse.buf;
    window_scalars P;
    memset(&P, 0, sizeof P);
    P.q_off = clkv__elem_offset(&args->q);
    P.q_sb = args->q.strides[0], P.q_sh = args->q.strides[1], P.q_st = args->q.strides[2];
    P.k_off = clkv__elem_offset(&args->k);
    P.k_sb = args->k.strides[0], P.k_sh = args->k.strides[1], P.k_sl = args->k.strides[2];
    P.v_off = clkv__elem_offset(&args->v);
    P.v_sb = args->v.strides[0], P.v_sh = args->v.strides[1], P.v_sl = args->v.strides[2];
    P.len_off = len_buf ? clkv__elem_offset(&args->lengths) : 0;
    P.o_off = clkv__elem_offset(&args->o);
    P.o_sb = args->o.strides[0], P.o_sh = args->o.strides[1], P.o_st = args->o.strides[2];
    if (lse_buf) {
        P.lse_off = clkv__elem_offset(&args->lse);
        P.lse_sb = args->lse.strides[0], P.lse_sh = args->lse.strides[1];
        P.lse_st = args->lse.strides[2];
    }
    P.ml_off = ml_off;
    P.has_lengths = len_buf != NULL, P.max_len = p.max_len, P.T = (cl_int)p.T;
    P.Hq = (cl_int)p.Hq, P.G = (cl_int)p.G, P.n_qtiles = p.n_qtiles, P.chunk = p.chunk;
    P.num_splits = p.splits, P.direct = direct, P.has_lse = lse_buf != NULL;
    P.scale_log2 = p.scale * 1.4426950408889634f;
    st = clkv__set_args(ctx, kp, "attention_window_partial", 8, CLKV_ARG(args->q.buf),
                        CLKV_ARG(args->k.buf), CLKV_ARG(args->v.buf), CLKV_ARG(len_buf),
                        CLKV_ARG(o_buf), CLKV_ARG(lse_buf), CLKV_ARG(ws), CLKV_ARG(P));
    if (st == CLKV_OK && p.keyrows)
        st = clkv__set_args_at(ctx, kp, "attention_window_partial", 8, 1, CLKV_ARG(tickets));
    const cl_long n_rows = (cl_long)(p.B * p.Hq * p.T);
    if (st == CLKV_OK && merge)
        st = clkv__set_args(ctx, km, "attention_window_merge", 17, CLKV_ARG(ws), CLKV_ARG(ml_off),
                            CLKV_ARG(P.num_splits), CLKV_ARG(P.Hq), CLKV_ARG(P.T), CLKV_ARG(n_rows),
                            CLKV_ARG(o_buf), CLKV_ARG(P.o_off), CLKV_ARG(P.o_sb), CLKV_ARG(P.o_sh),
                            CLKV_ARG(P.o_st), CLKV_ARG(lse_buf), CLKV_ARG(P.lse_off),
                            CLKV_ARG(P.lse_sb), CLKV_ARG(P.lse_sh), CLKV_ARG(P.lse_st),
                            CLKV_ARG(P.has_lse));
    /* Every kernel passes the local-memory check before any is enqueued. */
    if (st == CLKV_OK)
        st = clkv__check_local_mem(ctx, kp, "attention_window_partial", 0);
    if (st == CLKV_OK && merge)
        st = clkv__check_local_mem(ctx, km, "attention_window_merge", 0);
    if (st == CLKV_OK) {
        const size_t wg = p.fa ? (size_t)p.fa_wg : WG;
        const size_t gp[3] = {(size_t)p.n_qtiles * wg, (size_t)p.splits, (size_t)(p.B * p.Hkv)};
        const size_t lp[3] = {wg, 1, 1};
        clkv__log(ctx,
                  "attention_window: B=%lld Hq=%lld Hkv=%lld T=%lld D=%lld max_len=%d mma=%d "
                  "fa=%d (keyrows=%d direct=%d vasync=%d fused=%d qt=%d nwk=%d kw=%d stages=%d "
                  "aligned=%d) "
                  "qt=%d kt=%d qtiles=%d splits=%d chunk=%d",
                  (long long)p.B, (long long)p.Hq, (long long)p.Hkv, (long long)p.T, (long long)p.D,
                  p.max_len, p.mma, p.fa, p.keyrows, p.direct, p.vasync, p.fused, p.fa_qt, p.fa_nwk,
                  p.fa_kw, p.fa_nstg, p.fa_aligned, p.qt, p.kt, p.n_qtiles, p.splits, p.chunk);
        st = clkv__enqueue(ctx, kp, "attention_window_partial", 3, gp, lp, merge ? NULL : done);
    }
    if (st == CLKV_OK && merge) {
        const size_t gm[1] = {(size_t)n_rows * WG}; /* one work-group per row */
        const size_t lm[1] = {WG};
        st = clkv__enqueue(ctx, km, "attention_window_merge", 1, gm, lm, done);
    }
    return st;
}
