/* ParisKV Stage I (SPEC §4): centroid ranking, collision scores S_i with a fused
 * per-chunk histogram, threshold selection and ordered candidate compaction.
 *
 * Defines (host/pariskv_collide.c):
 *   SUB_M     subspace dim m (2..8); NC = 2^m centroids per subspace
 *   NBLK      subspaces per key (D / m)
 *   WG        work-group size of the collide / threshold / compact kernels
 *   PER_ITEM  tokens per work-item in a chunk (chunk = WG * PER_ITEM tokens)
 *   IDS_U32   1: id rows are 4-byte aligned (read as uint words)
 *   S_WIDE    1: S is stored as ushort (6 * NBLK > 255), 0: uchar
 *   SUFFIX    1: pkv_collide stores per-chunk SUFFIX counts (#S >= v) instead of the
 *             per-chunk histogram, so a chunk's (#S > thr, #S == thr) is two loads
 *   FUSED_THR 1 (needs SUFFIX): no pkv_threshold kernel: every pkv_compact work-group finds
 *             the threshold from the row histogram and its output base from the suffix
 *             counts of the earlier chunks (for launches of about one wave: each
 *             work-group pays two more scans); 0: pkv_threshold writes the chunk bases
 *   COLLIDE_V 0: the previous pkv_collide loop (one token after the other: load its ids,
 *             look up, store); 1 (needs IDS_U32): a work-item issues the id loads of
 *             CV_TOK tokens (16-byte loads with IDS_VEC16) before any lookup, and the
 *             per-chunk suffix counts come from a parallel scan. (A bonus table packed in
 *             nibbles, conflict-free lookups, was slower on H100: 63.5 -> 90.7 us at 1M
 *             tokens, the extra shifts and masks cost more than the bank conflicts; one
 *             histogram increment per distinct S of a warp (match.any) was no faster either:
 *             63.2 / 64.2 -> 64.9 / 64.9 us. Nibble tables in registers, looked up with
 *             shfl.sync.idx, a rotation and a shift: 61.6 -> 72.5 us. Diagnostic builds on
 *             the same H100, 1M tokens: lookups made conflict-free broadcasts 60.8 us,
 *             histogram increments made conflict-free 64.3 us, so neither the bank conflicts
 *             nor the atomics bound the kernel; its 134 MB id stream does (the same-bytes
 *             read probe takes ~49 us). Nor do the 8 MB of S stores: without them 60.5-61.1
 *             us against 61.7-61.8 (same H100, two alternations, 2026-11-27). On the H200
 *             the lookups bind it instead: 56 us, 48.8 with conflict-free lookups, 43-45
 *             with none, 85 with the nibble table; docs/performance.md, **ParisKV
 *             collision on the H200**.)
 *   IDS_VEC16 1: id rows are 16-byte aligned and NBLK % 16 == 0 (uint4 loads)
 *   CV_TOK_MAX (optional, COLLIDE_V) cap on CV_TOK, the tokens whose ids are loaded first
 *             (H100, 1M tokens: 4 -> 62.1 us, 8 (no cap) 65.4 us, 2 62.7 us; the next
 *             tokens' ids loaded during the current ones' lookups, two alternations:
 *             60.8-64.2 us against 61.3-63.9, no gain, 2026-11-27)
 *   PKC_WSCAN 1 (NVIDIA only, else ignored): work-group scans through warp shuffles
 *   RANK_QT   1: pkv_rank also does the query transform (pariskv_srht.cl; needs HEAD_DIM
 *             with D / 2 <= NC and IN_DTYPE): every work-group transforms its KV head's
 *             group-mean query, the block-0 work-group writes q_rot and q_norm (one launch
 *             instead of pariskv_query_transform and pkv_rank)
 *
 * Plan (int32 [8, B] row-major): row 0 = n_b, rows 1..6 = T_0..T_5, row 7 = C_b.
 */

#ifndef FUSED_THR
#define FUSED_THR 0
#endif
#ifndef SUFFIX
#define SUFFIX 0
#endif
#if FUSED_THR && !SUFFIX
#error "FUSED_THR needs SUFFIX"
#endif
#ifndef COLLIDE_V
#define COLLIDE_V 0
#endif
#ifndef IDS_VEC16
#define IDS_VEC16 0
#endif
#if COLLIDE_V && !IDS_U32
#error "COLLIDE_V needs IDS_U32"
#endif
#define NC (1 << SUB_M)
#ifndef RANK_QT
#define RANK_QT 0
#endif
#if RANK_QT
#define TPK (HEAD_DIM / 2)
#define IN_T CLKV_STORAGE(IN_DTYPE)
#if TPK > NC
#error "RANK_QT needs D / 2 <= 2^m work-items"
#endif
#include "pariskv_srht.cl"
#endif
#define NBINS (6 * NBLK + 1)
#define CHUNK (WG * PER_ITEM)
#define CSUB (WG >= 32 ? WG / 32 : 1) /* collide sub-histograms */
#if S_WIDE
#define S_T ushort
#else
#define S_T uchar
#endif

#define SCAN_WG WG
#include "kernel_args.cl"
#include "pariskv_scan.cl"

/* The threshold of a row from its histogram tot[NBINS] (local) and C: the smallest value
 * thr with #(S > thr) < C <= #(S >= thr), take = C - #(S > thr) ties at thr; C = 0 gives
 * thr = NBINS, take = 0 (nothing selected). All work-items must call it. */
inline void pkc_threshold(__local const uint *tot, int C, __local ulong *tmp, __local int *sh,
                          int *thr, int *take) {
    const int lid = (int)get_local_id(0);
#if NBINS <= WG
    if (lid == 0) {
        sh[0] = NBINS;
        sh[1] = 0;
    }
    { /* values in descending order, one per work-item */
        const int v = NBINS - 1 - lid;
        const uint x = lid < NBINS ? tot[v] : 0u;
        ulong total;
        const ulong above = pkc_scan(tmp, x, &total);
        if (C > 0 && lid < NBINS && above < (ulong)C && above + x >= (ulong)C) {
            sh[0] = v;
            sh[1] = C - (int)above;
        }
    }
#else
    if (lid == 0) {
        int t = NBINS, tk = 0;
        uint cum = 0;
        if (C > 0) {
            for (int v = NBINS - 1; v >= 0; v--) {
                if (cum + tot[v] >= (uint)C) {
                    t = v;
                    tk = C - (int)cum;
                    break;
                }
                cum += tot[v];
            }
        }
        sh[0] = t;
        sh[1] = tk;
    }
#endif
    barrier(CLK_LOCAL_MEM_FENCE);
    *thr = sh[0];
    *take = sh[1];
}

/* Bonus table per (b, h, blk): bonus[c] = #{t : before(c) < T_t}; also zeroes the row
 * histograms and the row's Stage II state (k_hist, kh_len words per row).
 * Grid (NC, NBLK, B * Hkv), local (NC). (H100, about 11 us at any length, whatever the
 * ranking: the same with a bitonic sort of (score, index) and a scan of the counts, 12 us
 * with the counting loop split over 4 work-items per centroid, 20 us with float4 / uint4
 * reads and 1 work-item per centroid. Profiled after an idle queue at 1M tokens, where it
 * takes 12-14 us: 8.3 us returning at once, 8.9 us without the counting loop, 11.3 us
 * without the query transform; 23-25 us reading (score, count) as float2 unrolled 16
 * times. In a step (back to back, 1M tokens): 10.7 us, 5.0 us returning at once, 7.9 us
 * without the counting loop; 32-bit counts, unrolled by 8 or not: 10.5-10.9 us
 * (2026-11-27). The ranking run inside pkv_collide instead, no launch of its own
 * (jobs taken through a ticket by the work-groups as they start, every work-group then
 * waiting on its row's count of finished tables with its first ids in flight): back to
 * back, the search at 1M tokens 181.6 / 181.8 us against 175.0 / 175.6, and at 32K, where
 * pkv_collide has fewer work-groups than jobs, 26.7-27.2 us against 13 + 11.5 for the two
 * kernels (H100, 2026-11-27).) */
__kernel __attribute__((reqd_work_group_size(NC, 1, 1))) void
pkv_rank(__global float *qr, __global const uint *cnt, __global const int *plan, __global uint *ws,
         const pkv_rank_scalars P
#if RANK_QT
         ,
         __global const IN_T *qin, uint8 signs, __global float *qn
#endif
) {
    KARGS_UNPACK(PKV_RANK)
    __global uchar *bonus = (__global uchar *)ws;
    __global uint *rowhist = ws, *k_hist = ws;
    __local float sc[NC];
    __local uint ct[NC];
    const int c = (int)get_local_id(0), blk = (int)get_group_id(1), bh = (int)get_group_id(2);
    const int b = bh / Hkv, h = bh % Hkv;
    if (blk == 0) { /* the row histogram pkv_collide accumulates into, Stage II's state */
        for (int v = c; v < NBINS; v += NC)
            rowhist[rh_off + (long)bh * NBINS + v] = 0;
        for (int v = c; v < kh_len; v += NC)
            k_hist[kh_off + (long)bh * kh_len + v] = 0;
    }
    ulong tier[6]; /* T_t, loaded while the scores are formed */
    for (int t = 0; t < 6; t++)
        tier[t] = (ulong)max(plan[plan_off + (1 + t) * B + b], 0);
#if RANK_QT
    /* this KV head's rotated query, the same arithmetic as pariskv_query_transform */
    __local float xq[HEAD_DIM];
    float qscale, qnorm;
    pkv_query_row(qin, q_off + b * q_sb + (long)h * G * q_sh, q_sh, G, 1, signs, xq, sc, c, c,
                  &qscale, &qnorm);
    if (blk == 0 && c < TPK) {
        __global float *o = qr + qr_off + b * qr_sb + h * qr_sh;
        o[c] = xq[c] * qscale;
        o[c + TPK] = xq[c + TPK] * qscale;
        if (has_qn && c == 0)
            qn[qn_off + b * qn_sb + (long)h * qn_sh] = qnorm;
    }
    float s = 0.0f;
    for (int j = 0; j < SUB_M; j++) {
        const float qj = xq[blk * SUB_M + j] * qscale;
        s += ((c >> j) & 1) ? qj : -qj;
    } /* sc, the reduction's scratch, is free again: pkv_fwht ended with a barrier */
#else
    __global const float *q = qr + qr_off + b * qr_sb + h * qr_sh + blk * SUB_M;
    float s = 0.0f;
    for (int j = 0; j < SUB_M; j++)
        s += ((c >> j) & 1) ? q[j] : -q[j];
#endif
    sc[c] = s;
    ct[c] = cnt[c_off + b * c_sb + h * c_sh + blk * c_sblk + c];
    barrier(CLK_LOCAL_MEM_FENCE);
    ulong before = 0;
    for (int o = 0; o < NC; o++) {
        const float so = sc[o];
        if (so > s || (so == s && o < c))
            before += ct[o];
    }
    int bonus_c = 0;
    for (int t = 0; t < 6; t++)
        bonus_c += before < tier[t];
    bonus[bonus_off + ((long)bh * NBLK + blk) * NC + c] = (uchar)bonus_c;
}

#if COLLIDE_V
#define NW (NBLK / 4) /* id words per token */
/* tokens whose id words a work-item loads before their lookups (<= 64 words in flight) */
#if NW <= 4
#define CV_TOK_ 16
#elif NW <= 8
#define CV_TOK_ 8
#elif NW <= 16
#define CV_TOK_ 4
#elif NW <= 32
#define CV_TOK_ 2
#else
#define CV_TOK_ 1
#endif
#if defined(CV_TOK_MAX) && CV_TOK_MAX < CV_TOK_ /* host cap (a power of two) */
#undef CV_TOK_
#define CV_TOK_ CV_TOK_MAX
#endif
#define CV_TOK (CV_TOK_ < PER_ITEM ? CV_TOK_ : PER_ITEM)
#if PER_ITEM % CV_TOK
#error "PER_ITEM must be a multiple of CV_TOK"
#endif
#endif
#define CV_LOOK(blk, id) ((uint)tab[(blk)*NC + (id)])

/* S_i for the zone tokens of one chunk, the chunk's histogram of S, and its sum over the
 * chunks of the row (global atomics into rowhist).
 * Grid (nchunks * WG, Hkv, B), local (WG). Token i = chunk*CHUNK + r*WG + lid (coalesced
 * id rows). */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
pkv_collide(__global const uchar *ids, __global const int *plan, __global uint *ws,
            __global int *dbg, const pkv_collide_scalars P) {
    KARGS_UNPACK(PKV_COLLIDE)
    __global const uchar *bonus = (__global const uchar *)ws;
    __global S_T *sc = (__global S_T *)ws;
    __global uint *chist = ws, *rowhist = ws;
    __local uchar tab[NBLK * NC];
    __local uint hist[CSUB * NBINS]; /* one histogram per 32 work-items (less contention) */
    const int lid = (int)get_local_id(0), chunk = (int)get_group_id(0);
    const int h = (int)get_group_id(1), b = (int)get_group_id(2);
    const int Hkv = (int)get_num_groups(1);
    const long bh = (long)b * Hkv + h;
    for (int i = lid; i < NBLK * NC; i += WG)
        tab[i] = bonus[bonus_off + bh * (NBLK * NC) + i];
    for (int i = lid; i < CSUB * NBINS; i += WG)
        hist[i] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    __local uint *mine = hist + (lid / 32) * NBINS;
    const int n = clamp(plan[plan_off + b], 0, max_zone);
    __global const uchar *base = ids + id_off + b * id_sb + h * id_sh;
#if COLLIDE_V
    for (int r0 = 0; r0 < PER_ITEM; r0 += CV_TOK) {
        if (chunk * CHUNK + r0 * WG >= n) /* uniform over the work-group */
            break;
        uint xw[CV_TOK][NW];
        for (int r = 0; r < CV_TOK; r++) { /* every load first */
            const int i = chunk * CHUNK + (r0 + r) * WG + lid;
            __global const uint *rw =
                (__global const uint *)(base + (long)(zone_start + min(i, n - 1)) * id_sl);
#if IDS_VEC16
            for (int w = 0; w < NW; w += 4) {
                /* read once: clkv_load_stream16 (H100, 1M tokens, pkv_collide 61.0-62.6
                 * -> 58.9-59.2 us against plain loads, profiled, four runs of 20 launches,
                 * 2026-11-27; for pkv_rerank's scattered code and weight rows the same
                 * load was slower, 71.5-71.8 -> 78.5-79.1 us, with or without L2::64B) */
                const uint4 v = clkv_load_stream16(rw, (long)w * 4);
                xw[r][w] = v.s0;
                xw[r][w + 1] = v.s1;
                xw[r][w + 2] = v.s2;
                xw[r][w + 3] = v.s3;
            }
#else
            for (int w = 0; w < NW; w++)
                xw[r][w] = rw[w];
#endif
        }
        for (int r = 0; r < CV_TOK; r++) {
            const int i = chunk * CHUNK + (r0 + r) * WG + lid;
            if (i < n) {
                uint S = 0;
                for (int w = 0; w < NW; w++) {
                    const uint x = xw[r][w];
                    S += (CV_LOOK(4 * w + 0, x & 0xffu) + CV_LOOK(4 * w + 1, (x >> 8) & 0xffu)) +
                         (CV_LOOK(4 * w + 2, (x >> 16) & 0xffu) + CV_LOOK(4 * w + 3, x >> 24));
                }
                sc[s_off + b * s_sb + h * s_sh + i] = (S_T)S;
                if (has_dbg)
                    dbg[dbg_off + b * dbg_sb + h * dbg_sh + i] = (int)S;
                atomic_inc(&mine[S]);
            }
        }
    }
#else
    for (int r = 0; r < PER_ITEM; r++) {
        const int i = chunk * CHUNK + r * WG + lid;
        if (i >= n)
            break;
        __global const uchar *row = base + (long)(zone_start + i) * id_sl;
        uint S = 0;
#if IDS_U32
        __global const uint *rw = (__global const uint *)row;
        for (int w = 0; w < NBLK / 4; w++) {
            const uint x = rw[w];
            S += tab[(4 * w + 0) * NC + (x & 0xffu)] + tab[(4 * w + 1) * NC + ((x >> 8) & 0xffu)] +
                 tab[(4 * w + 2) * NC + ((x >> 16) & 0xffu)] + tab[(4 * w + 3) * NC + (x >> 24)];
        }
#else
        for (int blk = 0; blk < NBLK; blk++)
            S += tab[blk * NC + row[blk]];
#endif
        sc[s_off + b * s_sb + h * s_sh + i] = (S_T)S;
        if (has_dbg)
            dbg[dbg_off + b * dbg_sb + h * dbg_sh + i] = (int)S;
        atomic_inc(&mine[S]);
    }
#endif
    barrier(CLK_LOCAL_MEM_FENCE);
    __global uint *out = chist + ch_off + (bh * nchunks + chunk) * NBINS;
#if SUFFIX
    /* the chunk's histogram into hist[0 .. NBINS) (bin i is only touched by work-item i
     * mod WG), then suffix counts #(S >= i) */
    for (int i = lid; i < NBINS; i += WG) {
        uint x = 0;
        for (int q = 0; q < CSUB; q++)
            x += hist[q * NBINS + i];
        hist[i] = x;
        if (x)
            atomic_add(rowhist + rh_off + bh * NBINS + i, x);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#if COLLIDE_V && NBINS <= WG
    /* suffix sums in log2(NBINS) steps (work-item i holds bin i); as the total minus
     * pkc_scan's warp-shuffle prefix sums (one more local array) pkv_collide took 67.4 /
     * 68.9 us against 61.6 / 61.7 (H100, 1M tokens, 2026-11-27) */
    for (int st = 1; st < NBINS; st <<= 1) {
        const uint add = lid + st < NBINS ? hist[lid + st] : 0u;
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid < NBINS)
            hist[lid] += add;
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid < NBINS)
        out[lid] = hist[lid];
#else
    for (int i = lid; i < NBINS; i += WG) {
        uint x = 0;
        for (int v = i; v < NBINS; v++)
            x += hist[v];
        out[i] = x;
    }
#endif
#else
    for (int i = lid; i < NBINS; i += WG) {
        uint x = 0;
        for (int q = 0; q < CSUB; q++)
            x += hist[q * NBINS + i];
        out[i] = x;
        if (x)
            atomic_add(rowhist + rh_off + bh * NBINS + i, x);
    }
#endif
}

/* Threshold per (b, h): the smallest value thr such that #(S > thr) < C <= #(S >= thr),
 * take = C - #(S > thr) ties at thr; then per chunk the output base and the number of its
 * ties to take (ties in position order). Writes cinfo[chunk] = (base, ties, thr, -).
 * Grid (WG, B * Hkv), local (WG). */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
pkv_threshold(__global uint *ws, __global const int *plan, __global int *cand,
              const pkv_select_scalars P) {
    KARGS_UNPACK(PKV_SELECT)
    __global const uint *chist = ws, *rowhist = ws;
    __global int *cinfo = (__global int *)ws;
    __local uint tot[NBINS];
    __local int sh[2];
    __local ulong tmp[WG];
    const int lid = (int)get_local_id(0), bh = (int)get_group_id(1);
    const int b = bh / Hkv, h = bh % Hkv;
    __global const uint *hh = chist + ch_off + (long)bh * nchunks * NBINS;
    for (int v = lid; v < NBINS; v += WG)
        tot[v] = rowhist[rh_off + (long)bh * NBINS + v];
    barrier(CLK_LOCAL_MEM_FENCE);
    const int C = clamp(plan[plan_off + 7 * B + b], 0, max_cand);
    int thr, take;
    pkc_threshold(tot, C, tmp, sh, &thr, &take);
    __global int *ci = cinfo + ci_off + (long)bh * nchunks * 4;
    /* Chunks in rounds of WG: (gt, eq) per chunk, scanned in chunk order. */
    ulong carry = 0; /* gt sum in the high 32 bits, eq sum in the low 32 bits */
    for (int c0 = 0; c0 < nchunks; c0 += WG) {
        const int c = c0 + lid;
        uint gt = 0, eq = 0;
        if (c < nchunks) {
#if SUFFIX
            gt = thr + 1 < NBINS ? hh[(long)c * NBINS + thr + 1] : 0u;
            eq = thr < NBINS ? hh[(long)c * NBINS + thr] - gt : 0u;
#else
            for (int v = thr + 1; v < NBINS; v++)
                gt += hh[(long)c * NBINS + v];
            eq = thr < NBINS ? hh[(long)c * NBINS + thr] : 0;
#endif
        }
        ulong total;
        const ulong ex = pkc_scan(tmp, ((ulong)gt << 32) | eq, &total) + carry;
        if (c < nchunks) {
            const int gt_before = (int)(ex >> 32), eq_before = (int)(ex & 0xffffffffu);
            const int ties_before = min(eq_before, take);
            const int ties = clamp(take - eq_before, 0, (int)eq);
            ci[c * 4 + 0] = gt_before + ties_before;
            ci[c * 4 + 1] = ties;
            ci[c * 4 + 2] = thr;
            ci[c * 4 + 3] = 0;
        }
        carry += total;
    }
    if (fill_cand)
        for (int j = C + lid; j < fill_cand; j += WG)
            cand[cd_off + b * cd_sb + h * cd_sh + j] = -1;
}

/* Ordered compaction of one chunk: token i is selected when S_i > thr, or S_i == thr and
 * it is among the chunk's first `ties` tokens at thr. Work-item lid takes the PER_ITEM
 * consecutive tokens chunk*CHUNK + lid*PER_ITEM + r in whole vector loads (S rows are
 * padded to 32 entries), keeps them as two bit masks (> thr, == thr) and writes only its
 * selected tokens, lowest first: about a tenth of them, so the per-token work is a compare
 * and a shift (H100, 1M tokens: 20.6 -> 18.8 us against one token at a time, 14.2 us with
 * PER_ITEM 16). Writes positions zone_start + i.
 * FUSED_THR: thr and the ties to take come from the row histogram, the chunk's output base
 * and ties from the suffix counts of chunks 0 .. chunk (chist), and chunk 0 fills
 * candidates [C, fill_cand) with -1; else (thr, base, ties) come from pkv_threshold
 * (cinfo). Grid (nchunks * WG, Hkv, B), local (WG). */
#if PER_ITEM >= 16 /* S entries per vector load */
#define PKC_VW 16
#elif PER_ITEM == 8
#define PKC_VW 8
#elif PER_ITEM == 4
#define PKC_VW 4
#endif
#if PER_ITEM != 4 && PER_ITEM != 8 && PER_ITEM != 16 && PER_ITEM != 32
#error "PER_ITEM must be 4, 8, 16 or 32 (one bit-mask word)"
#endif
#define PKC_SV CLKV_CAT(S_T, PKC_VW)
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
pkv_compact(__global const uint *ws, __global const int *plan, __global int *cand,
            const pkv_select_scalars P) {
    KARGS_UNPACK(PKV_SELECT)
    __global const S_T *sc = (__global const S_T *)ws;
    __global const int *cinfo = (__global const int *)ws;
    __global const uint *chist = ws, *rowhist = ws;
    __local ulong tmp[WG];
    const int lid = (int)get_local_id(0), chunk = (int)get_group_id(0);
    const int h = (int)get_group_id(1), b = (int)get_group_id(2);
    const long bh = (long)b * Hkv + h;
    const int n = clamp(plan[plan_off + b], 0, max_zone);
    const int i0 = chunk * CHUNK + lid * PER_ITEM;
    /* S first (in flight during the threshold work); a row holds whole vectors up to its
     * padded end, the entries past n are masked below */
    __global const PKC_SV *s = (__global const PKC_SV *)(sc + s_off + b * s_sb + h * s_sh);
    PKC_SV x[PER_ITEM / PKC_VW];
    _Pragma("unroll") for (int k = 0; k < PER_ITEM / PKC_VW; k++) {
        x[k] = i0 < n ? s[i0 / PKC_VW + k] : (PKC_SV)(0);
    }
#if FUSED_THR
    __local uint tot[NBINS];
    __local int sh[2];
    for (int v = lid; v < NBINS; v += WG)
        tot[v] = rowhist[rh_off + bh * NBINS + v];
    barrier(CLK_LOCAL_MEM_FENCE);
    const int C = clamp(plan[plan_off + 7 * B + b], 0, max_cand);
    int thr, take;
    pkc_threshold(tot, C, tmp, sh, &thr, &take);
    /* (gt, eq) of the earlier chunks from their suffix counts */
    __global const uint *suf = chist + ch_off + bh * nchunks * NBINS;
    uint gt_b = 0, eq_b = 0;
    for (int c = lid; c < chunk; c += WG) {
        const uint a = thr + 1 < NBINS ? suf[(long)c * NBINS + thr + 1] : 0u;
        gt_b += a;
        eq_b += thr < NBINS ? suf[(long)c * NBINS + thr] - a : 0u;
    }
    ulong before;
    pkc_scan(tmp, ((ulong)gt_b << 32) | eq_b, &before);
    const int gt_before = (int)(before >> 32), eq_before = (int)(before & 0xffffffffu);
    const uint own_gt = thr + 1 < NBINS ? suf[(long)chunk * NBINS + thr + 1] : 0u;
    const int own_eq = thr < NBINS ? (int)(suf[(long)chunk * NBINS + thr] - own_gt) : 0;
    const int base = gt_before + min(eq_before, take);
    const int ties = clamp(take - eq_before, 0, own_eq);
    if (chunk == 0 && fill_cand)
        for (int j = C + lid; j < fill_cand; j += WG)
            cand[cd_off + b * cd_sb + h * cd_sh + j] = -1;
#else
    __global const int *ci = cinfo + ci_off + (bh * nchunks + chunk) * 4;
    const int base = ci[0], ties = ci[1], thr = ci[2];
#endif
    S_T v[PER_ITEM];
    _Pragma("unroll") for (int k = 0; k < PER_ITEM / PKC_VW; k++) {
        CLKV_CAT(vstore, PKC_VW)(x[k], k, v);
    }
    const int nv = clamp(n - i0, 0, PER_ITEM);
    uint gtm = 0, eqm = 0;
    _Pragma("unroll") for (int r = 0; r < PER_ITEM; r++) {
        gtm |= (uint)((int)v[r] > thr && r < nv) << r;
        eqm |= (uint)((int)v[r] == thr && r < nv) << r;
    }
    const uint gt = popcount(gtm), eq = popcount(eqm);
    ulong total;
    const ulong ex = pkc_scan(tmp, ((ulong)gt << 32) | eq, &total);
    const int gt_run = (int)(ex >> 32), eq_run = (int)(ex & 0xffffffffu);
    /* keep this work-item's first max(0, ties - eq_run) ties */
    for (int drop = (int)eq - clamp(ties - eq_run, 0, (int)eq); drop > 0; drop--)
        eqm &= ~(0x80000000u >> clz(eqm));
    uint sel = gtm | eqm;
    __global int *out = cand + cd_off + b * cd_sb + h * cd_sh + base + gt_run + min(eq_run, ties);
    for (int o = 0; sel; o++) {
        const uint low = sel & (0u - sel);
        out[o] = zone_start + i0 + (31 - (int)clz(low));
        sel ^= low;
    }
}
