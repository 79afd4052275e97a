/* Window-attention scorers on the tensor cores (SPEC §2.1, §2.2): the NVIDIA variant of
 * score_window (same arguments plus `chunk`, same raw-score layout) for DropKV, SnapKV,
 * AnDPro, CriticalKV, H2O and DiffKV with 16-bit q and K/V of one dtype.
 *
 * Work decomposition: a work-group (4 warps) walks `chunk` keys of one (b, KV head) in
 * tiles of 64 keys; warp w owns keys [16 w, 16 w + 16) of every tile. The warp loads its
 * keys' K (and V) rows straight from global memory into registers as mma B fragments:
 * lane (g, t) of the fragment layout (g = lane / 4, t = lane % 4) reads 16-byte chunks
 * 4 s + t of key row g, which are the B fragments of k-steps 2 s and 2 s + 1 under a fixed
 * permutation of the head dimension (below). The query rows r = g' * WP + t' of the KV
 * head (head kvh * G + g', window row t' < W; WP = W, for DiffKV DIFFKV_WP with rows
 * t' >= W empty) are staged once per stage in local memory,
 * already in A-fragment order under the same permutation (q raw 16-bit; the f32 window
 * output a split into a 16-bit high part and a 16-bit residual, so <a, v> keeps ~16
 * significant bits), with LSE * log2(e), the row position and ||a||^2 (f32).
 *
 * Per 16-row block and 8-key n-tile: S = Q K^T and (DropKV, AnDPro) D = A V^T =
 * A_hi V^T + A_lo V^T (m16n8k16, f32 accumulation). On the C fragments: p = exp2(S *
 * scale*log2(e) - LSE*log2(e)) with the causal mask; DropKV adds w^2 * max(0, ||a||^2 +
 * ||v||^2 - 2 <a, v>) with w = p~ / (1 - p~ + eps) (SPEC §2.1's expansion), AnDPro p * <a, v>,
 * the others p. Each lane sums its rows; the sum over the rows of a key (the M dimension)
 * is a butterfly over the 8 row lanes at the end of the tile (ROWSUM_SCATTER: a
 * reduce-scatter).
 *
 * Head-dimension permutation: for k-step kk = 2 s + h, the fragment's logical column
 * 2 t + i (i < 2) is element 8 (4 s + t) + 4 h + i of the row and logical column
 * 2 t + 8 + i is element 8 (4 s + t) + 4 h + 2 + i; so the words w0..w3 of a 16-byte
 * chunk are {b0, b1} of k-step 2 s and {b0, b1} of k-step 2 s + 1. A dot product does
 * not depend on the order of its terms, so S and <a, v> are unchanged.
 *
 * -D set:
 *   METHOD      0 DropKV, 1 SnapKV, 2 AnDPro, 3 CriticalKV, 4 H2O, 5 DiffKV (each head's
 *               rows padded to DIFFKV_WP, a multiple of 8, so that each half of a row
 *               block, the rows g or g + 8 of the C fragments, lies in one head: the
 *               per-head sums meet over the row lanes whenever the head changes, their
 *               maximum is kept per key. With DIFFKV_WP % 16 == 8 (HALF_HEADS) the head is
 *               checked before each half of a row block's epilogue (rows g, then g + 8),
 *               else once per row block: the check per half costs where a block lies in one
 *               head (H200, bf16 Hq 32 / Hkv 8, D 128, 128K keys, every W per half: W 8 133
 *               -> 108.2-109.2 us, W 24 198 -> 183.2, but W 64 347-349 -> 388.0-388.4).)
 *   DIFFKV_WP   DiffKV: rows per head, W rounded up by the host (host/score.c)
 *   Q_DTYPE == KV_DTYPE (f16 | bf16), A_DTYPE (with NEED_A)
 *   HEAD_DIM    64 | 128 | 256
 *   RS          query rows per stage (multiple of 16)
 *   NEED_V, NEED_A, ROUND_P, WRITE_VNORM   as in score_window.cl
 *   KV_ALIGNED  1: K/V rows 16-byte aligned (vector loads); 0: element loads
 *   SCORE_ILV   1: interleaved tiles (see the kernel); 0: each work-group a run of `chunk`
 *               keys
 *   ROWSUM_SCATTER  1: a tile's sums meet over the row lanes in a reduce-scatter (4 shuffles,
 *               each lane stores one key) instead of a butterfly (12; lanes g = 0 store).
 *               H200, bf16 Hq 32 / Hkv 8, D 128, 128K keys, two alternations, scatter
 *               against butterfly: DropKV W 8 163.2-165.3 / 165.5-167.2 us, Hq 128 (G 16)
 *               431.3-435.6 / 449.4-455.5; but SnapKV W 64 308.7-309.1 / 302.4-303.9,
 *               AnDPro 162.5-164.3 / 160.2-161.5 (DiffKV sums per head). The host sets it
 *               for DropKV.
 *   PREFETCH    when the next tile's K/V fragments are requested: 0 at the top of its
 *               iteration; 1 at the top of this one (twice the fragment registers; slower
 *               on the H100 and the H200: fewer resident warps); 2 after the last row
 *               block's products (K and V are dead then), so the loads overlap that
 *               block's epilogue and the tile's reduction; 3 the products of every row
 *               block first (S, then D), the next K requested after S and the next V after
 *               D, then the epilogues (with ||v|| computed just before D). The host picks
 *               per method (host/score.c has the measurements).
 * Profile (Nsight Compute on the replayed PTX, tools/profile; H200, DropKV at 128K, PREFETCH
 * 2, before the single-test logits below; 2026-11-28): 126 registers, 14.5 resident warps per unit,
 * DRAM 66 %, issue slots 55 % busy, ~1270 warp instructions per 16-key tile (96 mma); stalls mostly
 * fixed-latency dependencies (30 %) and short scoreboard (20 %: local-memory reads, shuffles),
 * global-memory waits 5 %: the warps are latency-bound, not waiting on DRAM. Not kept: the next
 * tile's (or the 2nd / 4th next) K and V rows requested into L2 by the bulk-copy unit
 * (cp.async.bulk.prefetch.L2, one 256-byte row per lane, sm_90): H200, bf16 Hq 32 / Hkv 8, W 8,
 * 128K keys, two alternations in one run (2026-11-28), DropKV 186.8 -> 208-223 us (306 four tiles
 * ahead), SnapKV 99.0 -> 112-115 us, with PREFETCH 0 or 2. Not kept either: 32 keys per warp (a
 * 128-key tile; for SnapKV twice the bytes in flight per warp at the same register count as
 * DropKV's 16): same day, 128K keys, SnapKV 93.0 -> 118.3-120.3 us, DropKV 179.5 -> 230.3,
 * CriticalKV 155.9 -> 157.6, AnDPro 162.8 -> 173.6; nor more, shorter work-groups for SnapKV (16 /
 * 8 tiles each: 105.2 / 101.0 us). Nor streaming each warp's K/V rows through two cp.async stages
 * in local memory (64 KiB per work-group, fragments read back conflict-free): H200, DropKV bf16 Hq
 * 32 / Hkv 8, W 8, 128K keys, scorer 188.7 -> 271.9 / 275.7 us; SnapKV 104.9 -> 117.0, AnDPro 162.8
 * -> 238.5 (2026-11-27): the stages halve the resident warps (SnapKV, which reads only K, ran at 55
 * % of read bandwidth there). On the H100 it was bound neither by its arithmetic nor by the read
 * bandwidth (DropKV at 128K: 78 % of it; load_chunk has the measurements), which was read as a
 * limit of its loads in flight (16 resident warps, one 16-key tile of K and V each); the H200
 * profile above (global-memory waits 5 %) and the 32-key tiles (slower) say instead that
 * instruction latencies bind it. Not kept either (H100, DropKV bf16 Hq 32 / Hkv 8, D 128, W 8,
 * 2026-11-27): a FlashAttention-2 style variant for G * W <= 64 rows as attention_window_mma.cl
 * streams its tiles (64-key K/V tiles in 3 cp.async stages shared by the 4 warps, B fragments by
 * ldmatrix, q and a_hi / a_lo fragments in registers, 214-220 registers, 2 work-groups per
 * compute unit): scorer at 128K 228.5-229.7 us against 220.4-221.6 (at 16K 43.3-44.0
 * against 46.6-49.0), the full call 465-472 against 443-447 us; ||v||^2 once per key
 * through local memory (one more barrier per tile) 235.7, a fast division 234, one
 * work-group per compute unit 271 us. It passed test_score on NVIDIA.
 */
#define M_DROPKV 0
#define M_SNAPKV 1
#define M_ANDPRO 2
#define M_CRITICALKV 3
#define M_H2O 4
#define M_DIFFKV 5

#define Q_T CLKV_STORAGE(Q_DTYPE)
#define KV_T CLKV_STORAGE(KV_DTYPE)
#if NEED_A
#define A_T CLKV_STORAGE(A_DTYPE)
#else
#define A_T float
#endif

#define WG_SIZE 128
#define KW 16               /* keys per warp per tile */
#define KT (4 * KW)         /* keys per tile */
#define NKS (HEAD_DIM / 16) /* k-steps */
#define NCK (HEAD_DIM / 32) /* 16-byte chunks per lane per key row */
#define NRB (RS / 16)       /* row blocks per stage */
#define UNROLL _Pragma("unroll")
/* SHORT_CHAINS 1: A_lo V^T accumulated apart from A_hi V^T (mma chains half as long). With
 * native_exp2 for p as well (which on NVIDIA is exp2's code: both keep a subnormal fix-up
 * around ex2.approx), H200, bf16 Hq 32 / Hkv 8, W 8, 128K keys, two alternations
 * (2026-11-28): AnDPro 166.0 / 166.9 -> 163.1 / 161.7 us, DropKV 165.7 / 165.2 -> 167.8 /
 * 167.8, SnapKV and CriticalKV within 1 %. Since p comes from clkv_exp2_ftz for every
 * method (p_factor), SHORT_CHAINS is the split alone; that has not been measured apart. */
#ifndef SHORT_CHAINS
#define SHORT_CHAINS 0
#endif
#if SHORT_CHAINS
#define DLO dl
#else
#define DLO d
#endif

#if (HEAD_DIM != 64 && HEAD_DIM != 128 && HEAD_DIM != 256) || RS % 16 != 0 || METHOD > M_DIFFKV
#error "score_window_mma: unsupported parameters"
#endif
#if METHOD == M_DIFFKV && PREFETCH == 3
#error "score_window_mma: DiffKV's per-head sums take PREFETCH 0..2"
#endif
#if Q_DTYPE != KV_DTYPE || KV_DTYPE == CLKV_DT_F32 || !defined(CLKV_NVIDIA_PTX)
#error "score_window_mma needs NVIDIA PTX and f16 / bf16 q and K/V of one dtype"
#endif

/* c (16 x 8, f32) += A (16 x 16) B (16 x 8); fragments as in PLATFORM.md (common.cl). */
inline void mma16816(float *c, uint4 a, uint b0, uint b1) {
    CLKV_MMA(KV_DTYPE)(c, a.x, a.y, a.z, a.w, b0, b1);
}

inline float f16_bits(ushort h) {
    return clkv_f16_bits_to_f32(h);
}

/* x rounded to the nearest 16-bit value of KV_DTYPE (raw bits). */
inline ushort to16(float x) {
#if KV_DTYPE == CLKV_DT_BF16
    return clkv_f32_to_bf16(x);
#else
    ushort h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
    return h;
#endif
}
inline float from16(ushort h) {
#if KV_DTYPE == CLKV_DT_BF16
    return clkv_bf16_to_f32(h);
#else
    return f16_bits(h);
#endif
}

/* Element e of a raw 16-byte chunk (8 16-bit values) as f32; e constant after unrolling. */
inline float chunk_elem(uint4 r, int e) {
    const uint w = (e >> 1) == 0 ? r.x : (e >> 1) == 1 ? r.y : (e >> 1) == 2 ? r.z : r.w;
    const ushort h = (ushort)((e & 1) ? (w >> 16) : (w & 0xffffu));
    return from16(h);
}

/* A 16-byte chunk of a K/V row. Aligned rows: clkv_load_stream16 (every K/V byte is read
 * once: no L1 allocation, L2 asked for the row's 256 bytes). H100, bf16 Hq 32 / Hkv 8,
 * D 128, W 8, against plain loads, two or three alternations in one run (2026-11-27): DropKV
 * full call 16K / 128K 108.6-109.0 / 456.6-457.2 -> 105.2-105.6 / 445.7-445.9 us, scorers
 * alone at 128K DropKV 222.4-223.5 -> 220.2-220.3, SnapKV 123.8-124.0 -> 113.9-114.5,
 * AnDPro 220.7-220.9 -> 215.1-216.2, CriticalKV 217.5-218.2 -> 211.5-214.2. Without the L2
 * hint: DropKV 227.6-229.4, SnapKV 116.8-116.9; the L2 hint alone (L1 allocating) or
 * ld.global.nc: within the spread. Not a gain either: prefetch.global.L2 of the rows one,
 * two or four tiles ahead (DropKV 222 -> 239-350 us at 128K), the register prefetch
 * (PREFETCH 1: 228.1-228.3 us). The kernel is not bound by its arithmetic on the H100:
 * without the score epilogue, the A_lo V^T products or ||v||^2 the scorer took 221.1-223.2
 * us against 221.8-222.5 (medians of two alternations). */
inline uint4 load_chunk(__global const KV_T *p, long elem) {
#if KV_ALIGNED
    return clkv_load_stream16(p, elem * 2);
#else
    return clkv_load_raw_u16((__global const ushort *)p, elem);
#endif
}

#if METHOD == M_DROPKV || WRITE_VNORM
/* ||v||^2 (DropKV) or ||v||_1 of key j0 + 8 nt + fg (summed over the 4 lanes of fg): stored
 * at outv[j] (WRITE_VNORM), and for DropKV returned for the keys of this lane's C columns,
 * vc[nt][c] = key 8 nt + 2 ft + c. Every lane of the warp calls it (shuffles). */
inline void v_norms(uint4 (*vf)[NCK], int live, int j0, int c1, int fg, int ft,
                    __global float *outv, float (*vc)[2]) {
    float vn[2];
    UNROLL
    for (int nt = 0; nt < 2; nt++) {
        float s2 = 0.0f;
        if (live) {
            UNROLL
            for (int s = 0; s < NCK; s++)
                UNROLL
            for (int e = 0; e < 8; e++) {
                const float x = chunk_elem(vf[nt][s], e);
#if METHOD == M_DROPKV
                s2 = fma(x, x, s2);
#else
                s2 += fabs(x);
#endif
            }
        }
        s2 += clkv_shfl_xor(s2, 1);
        vn[nt] = s2 + clkv_shfl_xor(s2, 2);
    }
#if WRITE_VNORM
    if (live && ft == 0) {
        UNROLL
        for (int nt = 0; nt < 2; nt++) {
            const int j = j0 + nt * 8 + fg;
            if (j < c1)
                outv[j] = vn[nt];
        }
    }
#else
    (void)outv;
    (void)c1;
    (void)j0;
#endif
#if METHOD == M_DROPKV
    UNROLL
    for (int nt = 0; nt < 2; nt++) {
        vc[nt][0] = clkv_shfl_idx(vn[nt], (2 * ft) * 4);
        vc[nt][1] = clkv_shfl_idx(vn[nt], (2 * ft + 1) * 4);
    }
#else
    (void)vc;
#endif
}
#define V_NORMS(lv) v_norms(vf, (lv), j0, c1, fg, ft, out + vnorm_off, vc)
#else
#define V_NORMS(lv) ((void)0)
#endif

/* The factor of a (row, key) term that depends on p alone: DropKV w^2 with w = p~ / (1 - p~ +
 * eps) (SPEC §2.1), the others p. The division is a reciprocal with subnormals flushed
 * (one MUFU.RCP, ~2^-23; test_score's tolerance is far above it), as p itself comes from
 * clkv_exp2_ftz (one MUFU.EX2): exp2, native_exp2 and native_divide each kept a subnormal
 * fix-up of 4-6 instructions around theirs (SASS). H200, bf16 Hq 32 / Hkv 8, W 8, 128K keys
 * (2026-11-28): IEEE division -> native_divide, DropKV 181.2 / 180.7 -> 178.7 / 179.1 us;
 * exp2 and native_divide -> the two ftz forms, two alternations, DropKV 164.8 / 164.8 ->
 * 161.4 / 160.7, SnapKV 86.5 / 87.3 -> 85.1 / 85.3, AnDPro 162.6 / 162.7 -> 157.6 / 157.3,
 * CriticalKV within 1 %. Not kept (same run): ||v||^2 on the tensor cores (the two n-tiles'
 * B fragments side by side are the A fragment of the 16 keys, so V V^T's diagonal blocks
 * hold the norms: 16 more mma per tile instead of 64 unpacks and fmas per lane): DropKV
 * 163.1 / 164.2 us, the tensor pipe's extra work costing more than the ALU work saved. */
inline float p_factor(float p, float eps) {
#if METHOD == M_DROPKV
    float pt = clamp(p, 0.0f, 1.0f);
#if ROUND_P
    pt = from16(to16(pt));
#endif
    const float wt = pt * clkv_rcp_ftz(1.0f - pt + eps);
    return wt * wt;
#else
    (void)eps;
    return p;
#endif
}

/* The latest key position that any of the window rows lo .. hi (row r = head r / WP, window
 * row r % WP, empty from W on) weighs: a row's last key is n - W + r % WP (causal), and rows
 * of two heads cover the whole window. */
inline int rows_last_key(int lo, int hi, int n, int W, int WP) {
    return lo / WP != hi / WP ? n - 1 : n - W + min(hi % WP, W - 1);
}

/* The factor of a (row, key) term that depends on the key's V (a term is p_factor(p) times
 * it): DropKV max(0, ||a||^2 + ||v||^2 - 2 <a, v>) (d = <a, v>, an = ||a||^2, vn =
 * ||v||^2), AnDPro <a, v>; the methods that sum p have none (add_term ignores it). */
inline float v_factor(float d, float an, float vn) {
#if METHOD == M_DROPKV
    return fmax(an + vn - 2.0f * d, 0.0f);
#elif METHOD == M_ANDPRO
    (void)an, (void)vn;
    return d;
#else
    (void)d, (void)an, (void)vn;
    return 1.0f;
#endif
}

/* A key's sum after one (row, key) term: f = p_factor(p), vf = v_factor(...). */
inline float add_term(float acc, float f, float vf) {
#if METHOD == M_DROPKV || METHOD == M_ANDPRO
    return fma(f, vf, acc);
#else
    (void)vf;
    return acc + f;
#endif
}
/* v_factor's operands where the method has them, else 0 (the argument is not evaluated) */
#if NEED_A
#define TERM_D(x) (x)
#else
#define TERM_D(x) 0.0f
#endif
#if METHOD == M_DROPKV
#define TERM_AN(x) (x)
#define TERM_VN(x) (x)
#else
#define TERM_AN(x) 0.0f
#define TERM_VN(x) 0.0f
#endif

/* The sums of a lane's four C columns (acc[nt][c], keys 8 nt + 2 t + c of the warp) added
 * over the 8 row lanes (g = fg, lane bits 2..4) as a reduce-scatter: each level sends the
 * half of the values the partner keeps, so 4 shuffles instead of a butterfly's 12. The lane
 * gets the column nt = fg >> 2, c = (fg >> 1) & 1 (lanes fg and fg ^ 1 hold the same sum). */
inline float rowlane_sum_scatter(float (*acc)[2], int fg) {
    const int b2 = fg >> 2, b1 = (fg >> 1) & 1;
    float y[2];
    UNROLL
    for (int c = 0; c < 2; c++) {
        const float send = b2 ? acc[0][c] : acc[1][c], keep = b2 ? acc[1][c] : acc[0][c];
        y[c] = keep + clkv_shfl_xor(send, 16);
    }
    const float send = b1 ? y[0] : y[1], keep = b1 ? y[1] : y[0];
    const float z = keep + clkv_shfl_xor(send, 8);
    return z + clkv_shfl_xor(z, 4);
}

#if METHOD == M_DIFFKV && !defined(DIFFKV_WP)
#error "DiffKV needs DIFFKV_WP, the padded rows per head (host/score.c)"
#endif
#if METHOD == M_DIFFKV
#define HALF_HEADS (DIFFKV_WP % 16 != 0)
#else
#define HALF_HEADS 0
#endif
#ifndef ROWSUM_SCATTER
#define ROWSUM_SCATTER 0
#endif

/* Sum over the 8 row lanes (g) of a column: every lane of the warp gets it. */
inline float rowlane_sum(float x) {
    x += clkv_shfl_xor(x, 4);
    x += clkv_shfl_xor(x, 8);
    return x + clkv_shfl_xor(x, 16);
}

#if METHOD == M_DIFFKV
/* DiffKV: the sums of one head's rows (acc, per row lane) added over the row lanes, kept as
 * the maximum over the heads (best), acc cleared for the next head. Every lane calls it.
 * (Stashing four heads' sums and adding them in one reduce-scatter, 18 shuffles instead of
 * 48, was slower where a row block lies in one head: H200, bf16 Hq 32 / Hkv 8, D 128, 128K
 * keys, two alternations against the kernel before DIFFKV_WP, W 64 349.5-352.3 ->
 * 375.2-376.8 us, W 16 133.7-134.1 -> 137.7-138.7; W 8, two heads per row block, 102 against
 * 106-111 for this flush.) */
inline void diffkv_flush(float (*acc)[2], float (*best)[2]) {
    UNROLL
    for (int nt = 0; nt < 2; nt++)
        UNROLL
    for (int c = 0; c < 2; c++) {
        best[nt][c] = fmax(best[nt][c], rowlane_sum(acc[nt][c]));
        acc[nt][c] = 0.0f;
    }
}
#endif

/* Fragments of keys j0 .. j0 + 15 of one of K, V (rows past n read row n - 1; masked later). */
inline void load_rows(__global const KV_T *x, long xb, long x_sl, int j0, int n, int fg, int ft,
                      uint4 (*xf)[NCK]) {
    UNROLL
    for (int nt = 0; nt < 2; nt++) {
        const int j = min(j0 + nt * 8 + fg, n - 1);
        UNROLL
        for (int c = 0; c < NCK; c++)
            xf[nt][c] = load_chunk(x, xb + (long)j * x_sl + (4 * c + ft) * 8);
    }
}

/* K (and V) fragments of keys j0 .. j0 + 15. */
inline void load_tile(__global const KV_T *k, __global const KV_T *v, long kb, long vb, long k_sl,
                      long v_sl, int j0, int n, int fg, int ft, uint4 (*kf)[NCK],
                      uint4 (*vf)[NCK]) {
    load_rows(k, kb, k_sl, j0, n, fg, ft, kf);
#if NEED_V
    load_rows(v, vb, v_sl, j0, n, fg, ft, vf);
#else
    (void)v;
    (void)vb;
    (void)v_sl;
    (void)vf;
#endif
}

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void
score_window_mma(__global const Q_T *q, long q_off, long q_sb, long q_sh, long q_st,
                 __global const KV_T *k, long k_off, long k_sb, long k_sh, long k_sl,
                 __global const KV_T *v, long v_off, long v_sb, long v_sh, long v_sl,
                 __global const float *lse, long lse_off, long lse_sb, long lse_sh, long lse_st,
                 __global const A_T *a, long a_off, long a_sb, long a_sh, long a_st,
                 __global const int *lengths, long len_off, int has_len, int max_len, int Hkv,
                 int G, int W, float scale_log2, float eps, __global float *raw, long raw_off,
                 long vnorm_off, long row_len, int chunk) {
    __local uint4 q_loc[NRB][NKS][32];
#if NEED_A
    __local uint4 ah_loc[NRB][NKS][32];
    __local uint4 al_loc[NRB][NKS][32];
    __local float an_loc[RS];
#endif
    __local float lse_loc[RS];
    __local int pos_loc[RS];
    __local int pmax_loc[NRB];

    const int lid = (int)get_local_id(0);
    const int lane = lid % 32, w = lid / 32;
    const int fg = lane >> 2, ft = lane & 3;
    const int kvh = (int)get_group_id(1);
    const int b = (int)get_group_id(2);
    int n = max_len;
    if (has_len)
        n = clamp(lengths[len_off + b], 0, max_len);
#if SCORE_ILV
    /* interleaved: work-group x takes the tiles x, x + groups, x + 2 groups, ... (chunk
     * only sizes the grid), so the work-groups of a head read neighbouring tiles at any
     * moment */
    (void)chunk;
    const int c0 = (int)get_group_id(0) * KT;
    const int c1 = n;
    const int tstep = (int)get_num_groups(0) * KT;
#else
    const int c0 = (int)get_group_id(0) * chunk;
    const int c1 = min(c0 + chunk, n);
    const int tstep = KT;
#endif
    if (c0 >= c1)
        return; /* uniform over the work-group */

#if METHOD == M_DIFFKV
    const int WP = DIFFKV_WP;
#else
    const int WP = W;
#endif
    const int rows = G * WP;
    const int nstage = (rows + RS - 1) / RS;
    const long kb = k_off + (long)b * k_sb + (long)kvh * k_sh;
    const long vb = v_off + (long)b * v_sb + (long)kvh * v_sh;
    __global float *out = raw + raw_off + ((long)b * Hkv + kvh) * row_len;
#if METHOD == M_SNAPKV || METHOD == M_CRITICALKV
    const float inv = 1.0f / ((float)G * (float)W);
#elif METHOD == M_DIFFKV
    const float inv = 1.0f; /* the epilogue divides by the rows that see the key */
    (void)inv;
#else
    const float inv = 1.0f / (float)G;
#endif

    /* K (V) fragments of the warp's keys: 16-byte chunk 4 s + ft of key row j0 + 8 nt + fg */
    uint4 kf[2][NCK];
#if NEED_V
    uint4 vf[2][NCK];
#else
    uint4(*vf)[NCK] = 0;
    (void)vf;
#endif
#if PREFETCH >= 2
    if (c0 + w * KW < c1)
        load_tile(k, v, kb, vb, k_sl, v_sl, c0 + w * KW, n, fg, ft, kf, vf);
#elif PREFETCH
    uint4 kn[2][NCK];
#if NEED_V
    uint4 vnx[2][NCK];
#else
    uint4(*vnx)[NCK] = 0;
#endif
    if (c0 + w * KW < c1)
        load_tile(k, v, kb, vb, k_sl, v_sl, c0 + w * KW, n, fg, ft, kn, vnx);
#endif

    for (int tile0 = c0; tile0 < c1; tile0 += tstep) {
        const int j0 = tile0 + w * KW; /* this warp's first key */
        const int live = j0 < c1;      /* uniform over the warp */

#if PREFETCH >= 2
        int requested = 0; /* the next tile's K/V (this tile's were requested by the last) */
        int have_vn = 0;   /* PREFETCH 3: v_norms done */
        (void)have_vn;
#elif PREFETCH
        /* the next tile's rows are requested before this tile's products */
        UNROLL
        for (int nt = 0; nt < 2; nt++) {
            UNROLL
            for (int c = 0; c < NCK; c++) {
                kf[nt][c] = kn[nt][c];
#if NEED_V
                vf[nt][c] = vnx[nt][c];
#endif
            }
        }
        if (j0 + tstep < c1)
            load_tile(k, v, kb, vb, k_sl, v_sl, j0 + tstep, n, fg, ft, kn, vnx);
#else
        if (live)
            load_tile(k, v, kb, vb, k_sl, v_sl, j0, n, fg, ft, kf, vf);
#endif

        float vc[2][2]; /* DropKV: ||v||^2 of this lane's C columns (v_norms) */
        (void)vc;
#if PREFETCH != 3
        V_NORMS(live);
#endif

        float acc[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
#if METHOD == M_DIFFKV
        float best[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}}; /* max over the heads done */
        int cur_h = -1;                                  /* head of the sums in acc */
#endif
        for (int st = 0; st < nstage; st++) {
            const int r0 = st * RS;
            if (nstage > 1) {
                /* causal skip (uniform over the work-group): a stage whose latest query
                 * position precedes the tile's first key contributes p = 0 everywhere */
                if (rows_last_key(r0, min(r0 + RS, rows) - 1, n, W, WP) < tile0)
                    continue;
            }
            if (nstage > 1 || tile0 == c0) {
                /* stage rows r0 .. r0 + RS - 1 in fragment order */
                barrier(CLK_LOCAL_MEM_FENCE);
                /* (a fully unrolled version of this loop measured slower on the H200:
                 * more registers for the whole kernel) */
                for (int i = lid; i < NRB * NKS * 32 * 4; i += WG_SIZE) {
                    const int word = i % 4, ln = (i / 4) % 32, kk = (i / 128) % NKS,
                              rb = i / (128 * NKS);
                    const int g = ln >> 2, t = ln & 3;
                    const int rr = r0 + rb * 16 + g + 8 * (word & 1);
                    const int col = 8 * (4 * (kk >> 1) + t) + 4 * (kk & 1) + 2 * (word >> 1);
                    uint qw = 0u;
#if NEED_A
                    uint hw = 0u, lw = 0u;
#endif
                    if (rr < rows && rr % WP < W) {
                        const int h = kvh * G + rr / WP, tt = rr % WP;
                        __global const ushort *qp = (__global const ushort *)q + q_off +
                                                    (long)b * q_sb + (long)h * q_sh +
                                                    (long)tt * q_st + col;
                        qw = (uint)qp[0] | (uint)qp[1] << 16;
#if NEED_A
                        const long ai =
                            a_off + (long)b * a_sb + (long)h * a_sh + (long)tt * a_st + col;
                        const float x0 = CLKV_LOAD(A_DTYPE)(a, ai);
                        const float x1 = CLKV_LOAD(A_DTYPE)(a, ai + 1);
                        const ushort h0 = to16(x0), h1 = to16(x1);
                        hw = (uint)h0 | (uint)h1 << 16;
                        lw = (uint)to16(x0 - from16(h0)) | (uint)to16(x1 - from16(h1)) << 16;
#endif
                    }
                    ((__local uint *)&q_loc[rb][kk][ln])[word] = qw;
#if NEED_A
                    ((__local uint *)&ah_loc[rb][kk][ln])[word] = hw;
                    ((__local uint *)&al_loc[rb][kk][ln])[word] = lw;
#endif
                }
                /* per row: LSE * log2(e), +inf where the row weighs nothing (padding, LSE
                 * -inf or NaN: exp2(s - inf) = 0), and the last key it weighs (its
                 * position, capped by c1 - 1), so a logit needs one test; per row block
                 * the latest position (the causal skip). Before, three tests per logit
                 * and a 4-shuffle maximum per row block and tile, which the profile
                 * showed as a latency chain: H200, bf16 Hq 32 / Hkv 8, W 8, 128K keys,
                 * two alternations (2026-11-28), DropKV 176.5 / 177.3 -> 165.7 / 165.2
                 * us, SnapKV 92.4 / 93.5 -> 86.8 / 86.6 (AnDPro, CriticalKV within 1 %
                 * with their forms). */
                for (int i = lid; i < RS; i += WG_SIZE) {
                    const int rr = r0 + i;
                    float l2 = INFINITY;
                    int pos = -1;
                    if (rr < rows && rr % WP < W) {
                        const int h = kvh * G + rr / WP, tt = rr % WP;
                        l2 =
                            lse[lse_off + (long)b * lse_sb + (long)h * lse_sh + (long)tt * lse_st] *
                            CLKV_LOG2E;
                        if (!(l2 > -INFINITY))
                            l2 = INFINITY;
                        pos = min(rows_last_key(rr, rr, n, W, WP), c1 - 1);
                    }
                    lse_loc[i] = l2;
                    pos_loc[i] = pos;
                }
                for (int i = lid; i < NRB; i += WG_SIZE) {
                    const int lo = r0 + 16 * i, hi = min(lo + 15, rows - 1);
                    pmax_loc[i] = lo >= rows ? -1 : rows_last_key(lo, hi, n, W, WP);
                }
#if NEED_A
                /* ||a||^2 of each row (f32 a): one warp per row, a butterfly over its lanes */
                for (int i = w; i < RS; i += WG_SIZE / 32) {
                    const int rr = r0 + i;
                    float an = 0.0f;
                    if (rr < rows && rr % WP < W) {
                        const int h = kvh * G + rr / WP, tt = rr % WP;
                        const long ai = a_off + (long)b * a_sb + (long)h * a_sh + (long)tt * a_st;
                        UNROLL
                        for (int e = lane; e < HEAD_DIM; e += 32) {
                            const float x = CLKV_LOAD(A_DTYPE)(a, ai + e);
                            an = fma(x, x, an);
                        }
                    }
                    UNROLL
                    for (int o = 16; o > 0; o >>= 1)
                        an += clkv_shfl_xor(an, o);
                    if (lane == 0)
                        an_loc[i] = an;
                }
#endif
                barrier(CLK_LOCAL_MEM_FENCE);
            }
            if (!live)
                continue;
            const int nrb = min(NRB, (rows - r0 + 15) / 16);
#if PREFETCH == 3
            /* the products of every row block first: K is dead after S and V after D, so
             * (last stage) the next tile's rows are requested before the epilogues */
            const int last = st == nstage - 1;
            int skip[NRB];
            float s3[NRB][2][4];
#if NEED_A
            float d3[NRB][2][4];
#endif
            UNROLL
            for (int rb = 0; rb < NRB; rb++) {
                /* causal skip (uniform over the warp), as in the other form */
                skip[rb] = rb >= nrb || (j0 > n - W && pmax_loc[rb] < j0);
                UNROLL
                for (int nt = 0; nt < 2; nt++) {
                    UNROLL
                    for (int i = 0; i < 4; i++) {
                        s3[rb][nt][i] = 0.0f;
#if NEED_A
                        d3[rb][nt][i] = 0.0f;
#endif
                    }
                }
                if (!skip[rb]) {
                    UNROLL
                    for (int kk = 0; kk < NKS; kk++) {
                        const uint4 qa = q_loc[rb][kk][lane];
                        UNROLL
                        for (int nt = 0; nt < 2; nt++) {
                            const uint4 kc = kf[nt][kk >> 1];
                            mma16816(s3[rb][nt], qa, (kk & 1) ? kc.z : kc.x,
                                     (kk & 1) ? kc.w : kc.y);
                        }
                    }
                }
            }
            if (last && j0 + tstep < c1)
                load_rows(k, kb, k_sl, j0 + tstep, n, fg, ft, kf);
            UNROLL
            for (int rb = 0; rb < NRB; rb++) {
                if (skip[rb])
                    continue;
                UNROLL
                for (int i = 0; i < 4; i++) {
                    const int r = rb * 16 + fg + 8 * (i >> 1);
                    const float l2 = lse_loc[r];
                    const int pos = pos_loc[r];
                    UNROLL
                    for (int nt = 0; nt < 2; nt++) {
                        const int j = j0 + nt * 8 + 2 * ft + (i & 1);
                        const float p =
                            j <= pos ? clkv_exp2_ftz(s3[rb][nt][i] * scale_log2 - l2) : 0.0f;
                        s3[rb][nt][i] = p_factor(p, eps);
                    }
                }
            }
#if METHOD == M_DROPKV || WRITE_VNORM
            if (!have_vn) {
                V_NORMS(1);
                have_vn = 1;
            }
#endif
#if NEED_A
            UNROLL
            for (int rb = 0; rb < NRB; rb++) {
                if (skip[rb])
                    continue;
                UNROLL
                for (int kk = 0; kk < NKS; kk++) {
                    const uint4 ha = ah_loc[rb][kk][lane], la = al_loc[rb][kk][lane];
                    UNROLL
                    for (int nt = 0; nt < 2; nt++) {
                        const uint4 vcn = vf[nt][kk >> 1];
                        const uint v0 = (kk & 1) ? vcn.z : vcn.x, v1 = (kk & 1) ? vcn.w : vcn.y;
                        mma16816(d3[rb][nt], ha, v0, v1);
                        mma16816(d3[rb][nt], la, v0, v1);
                    }
                }
            }
#endif
            if (last) {
#if NEED_V
                if (j0 + tstep < c1)
                    load_rows(v, vb, v_sl, j0 + tstep, n, fg, ft, vf);
#endif
                requested = 1;
            }
            UNROLL
            for (int rb = 0; rb < NRB; rb++) {
                if (skip[rb])
                    continue;
                UNROLL
                for (int i = 0; i < 4; i++) {
                    const float an = TERM_AN(an_loc[rb * 16 + fg + 8 * (i >> 1)]);
                    UNROLL
                    for (int nt = 0; nt < 2; nt++) {
                        const float vfac =
                            v_factor(TERM_D(d3[rb][nt][i]), an, TERM_VN(vc[nt][i & 1]));
                        acc[nt][i & 1] = add_term(acc[nt][i & 1], s3[rb][nt][i], vfac);
                    }
                }
            }
#else
            for (int rb = 0; rb < nrb; rb++) {
                const int rl = rb * 16;
                /* causal skip (uniform): all 16 rows precede the warp's keys, which only
                 * the warps past n - W can see */
                if (j0 > n - W && pmax_loc[rb] < j0)
                    continue;
#if METHOD == M_DIFFKV
#if !HALF_HEADS
                /* DIFFKV_WP is a build constant, so no division (a table of the heads
                 * staged per stage instead: W 16 / 64 at 128K 138.6 / 336.8 -> 129.3 /
                 * 324.7 us, W 40 241.9 -> 248.7; H200, bf16 Hq 32 / Hkv 8, D 128) */
                const int hb = (r0 + rl) / DIFFKV_WP;
                if (hb != cur_h) { /* a row block lies in one head */
                    if (cur_h >= 0)
                        diffkv_flush(acc, best);
                    cur_h = hb;
                }
#endif
#endif
                float s[2][4];
#if NEED_A
                float d[2][4], dl[2][4]; /* SHORT_CHAINS: A_lo V^T apart */
                (void)dl;
#endif
                UNROLL
                for (int nt = 0; nt < 2; nt++) {
                    UNROLL
                    for (int i = 0; i < 4; i++) {
                        s[nt][i] = 0.0f;
#if NEED_A
                        d[nt][i] = dl[nt][i] = 0.0f;
#endif
                    }
                }
                UNROLL
                for (int kk = 0; kk < NKS; kk++) {
                    const uint4 qa = q_loc[rb][kk][lane];
#if NEED_A
                    const uint4 ha = ah_loc[rb][kk][lane], la = al_loc[rb][kk][lane];
#endif
                    UNROLL
                    for (int nt = 0; nt < 2; nt++) {
                        const uint4 kc = kf[nt][kk >> 1];
                        const uint b0 = (kk & 1) ? kc.z : kc.x, b1 = (kk & 1) ? kc.w : kc.y;
                        mma16816(s[nt], qa, b0, b1);
#if NEED_A
                        const uint4 vcn = vf[nt][kk >> 1];
                        const uint v0 = (kk & 1) ? vcn.z : vcn.x, v1 = (kk & 1) ? vcn.w : vcn.y;
                        mma16816(d[nt], ha, v0, v1);
                        mma16816(DLO[nt], la, v0, v1);
#endif
                    }
                }
#if NEED_A && SHORT_CHAINS
                UNROLL
                for (int nt = 0; nt < 2; nt++)
                    UNROLL
                for (int i = 0; i < 4; i++)
                    d[nt][i] += dl[nt][i];
#endif
#if PREFETCH == 2
                /* K and V are dead after the last products of the tile: the next tile's
                 * loads overlap this block's epilogue and the tile's reduction */
                if (st == nstage - 1 && rb == nrb - 1) {
                    if (j0 + tstep < c1)
                        load_tile(k, v, kb, vb, k_sl, v_sl, j0 + tstep, n, fg, ft, kf, vf);
                    requested = 1;
                }
#endif
                UNROLL
                for (int i = 0; i < 4; i++) {
#if HALF_HEADS
                    if ((i & 1) == 0) { /* rows g (i < 2), then rows g + 8: each in one head */
                        const int hh = (r0 + rl + 4 * i) / DIFFKV_WP;
                        if (hh != cur_h) {
                            if (cur_h >= 0)
                                diffkv_flush(acc, best);
                            cur_h = hh;
                        }
                    }
#endif
                    const int r = rl + fg + 8 * (i >> 1);
                    const float l2 = lse_loc[r];
                    const int pos = pos_loc[r];
                    const float an = TERM_AN(an_loc[r]);
                    UNROLL
                    for (int nt = 0; nt < 2; nt++) {
                        const int j = j0 + nt * 8 + 2 * ft + (i & 1);
                        const float p = j <= pos ? clkv_exp2_ftz(s[nt][i] * scale_log2 - l2) : 0.0f;
                        const float vfac = v_factor(TERM_D(d[nt][i]), an, TERM_VN(vc[nt][i & 1]));
                        acc[nt][i & 1] = add_term(acc[nt][i & 1], p_factor(p, eps), vfac);
                    }
                }
            }
#endif
        }
        if (!live)
            continue;
#if PREFETCH == 3 && (METHOD == M_DROPKV || WRITE_VNORM)
        if (!have_vn)
            V_NORMS(live);
#endif
#if PREFETCH >= 2
        if (!requested && j0 + tstep < c1) /* the last row block was skipped (causal) */
            load_tile(k, v, kb, vb, k_sl, v_sl, j0 + tstep, n, fg, ft, kf, vf);
#endif
#if ROWSUM_SCATTER && METHOD != M_DIFFKV
        const float sum = rowlane_sum_scatter(acc, fg);
        if ((fg & 1) == 0) {
            const int j = j0 + (fg >> 2) * 8 + 2 * ft + ((fg >> 1) & 1);
            if (j < c1)
                out[j] = sum * inv;
        }
#else
#if METHOD == M_DIFFKV
        diffkv_flush(acc, best); /* the last head's sums; acc = best over the heads */
        UNROLL
        for (int nt = 0; nt < 2; nt++)
            UNROLL
        for (int c = 0; c < 2; c++)
            acc[nt][c] = best[nt][c];
#else
        /* sum over the 8 row lanes (g) of each column */
        UNROLL
        for (int nt = 0; nt < 2; nt++) {
            UNROLL
            for (int c = 0; c < 2; c++)
                acc[nt][c] = rowlane_sum(acc[nt][c]);
        }
#endif
        if (fg == 0) {
            UNROLL
            for (int nt = 0; nt < 2; nt++) {
                UNROLL
                for (int c = 0; c < 2; c++) {
                    const int j = j0 + nt * 8 + 2 * ft + c;
#if METHOD == M_DIFFKV
                    if (j < c1) /* mean over the window rows that see key j */
                        out[j] = acc[nt][c] / (float)min(W, n - j);
#else
                    if (j < c1)
                        out[j] = acc[nt][c] * inv;
#endif
                }
            }
        }
#endif
    }
}
