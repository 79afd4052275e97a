/* Sparse decode attention (SPEC §1.3): split-K partials over an attended token SET; the
 * partials are merged by attention_decode_merge (attention_merge.cl), so they use its
 * layout: acc [B, Hq, splits, D] then (m, l) pairs [B, Hq, splits, 2], base-2 logits.
 *
 * Build options (set by host/attention_sparse.c):
 *   Q_DTYPE, KV_DTYPE   dtype codes of q and K/V
 *   HEAD_DIM            D (64, 128, 256)
 *   GROUP               query heads served per work-group (<= G, <= 8)
 *   EPL                 head-dim elements per lane; TPR = D / EPL lanes share one row
 *                       (TPR > 1 needs the NVIDIA warp-shuffle path)
 *   WG_SIZE             work-group size; NRG = WG_SIZE / TPR rows in flight
 *   UNROLL              rows per row-group per tile (TILE = NRG * UNROLL list positions)
 *   VEC_ALIGNED         1: K/V rows are 16-byte aligned (vector loads)
 *   HASH_SLOTS          0: duplicate idx entries are found by scanning the earlier
 *                       entries in global memory (O(NI) per entry, for very large NI);
 *                       else a power of two > NI: size of the local-memory hash set
 *   SEL_ROWS            1: the row of idx entry i is row i of ks / vs ([B, Hkv, NI, D],
 *                       e.g. gathered from a host-resident store) instead of row idx[i]
 *                       of k / v; which entries count is still decided by the idx values
 *   SP_LASTIDX          1: the ParisKV decode step's plan (one head group per KV head,
 *                       distinct idx entries: no duplicate detection, HASH_SLOTS 0):
 *                       no split mixes dense and idx positions; the last
 *                       ceil(n_idx / chunk) splits of each (sequence, KV head) take the
 *                       idx entries (chunk each), the others the dense positions
 *   SP_TOPK             1 (SP_LASTIDX, SEL_ROWS 0): each idx split first runs the search's
 *                       final top-k (pkr_topk_row, pariskv_topk.cl, with KH_BITS, KBUF_CAP,
 *                       TK_RANK as the search's pkv_topk; TK_NI = n_idx) from the search
 *                       workspace into local memory (all of them the same; the first
 *                       writes idx): one launch instead of the top-k kernel and this one
 *   FUSED_MERGE         (SP_LASTIDX, NVIDIA) 1: the last work-group of a (sequence, KV
 *                       head) to finish merges the splits into o / lse (split_merge.cl,
 *                       O_DTYPE), no merge kernel. The step with a host-resident zone
 *                       (SEL_ROWS) runs the same plan and merge, so both placements give
 *                       bit-identical results.
 *
 * The attended list of a (sequence b, KV head g) with n = len[b] is virtual:
 *   positions [0, s_end)               tokens 0 .. s_end-1            (sink, s_end = min(sink, n))
 *   positions [s_end, nd)              tokens l_start .. n-1          (local, l_start =
 *                                      max(n - local, s_end), nd = s_end + n - l_start)
 *   positions [nd, nd + NI)            idx[b, g, i], kept when 0 <= t < n, t is in neither
 *                                      dense range, and no earlier entry i' < i has the
 *                                      same value (first occurrence wins: deterministic)
 * A work-group handles one (split, KV head, head group, sequence) and the list positions
 * [split * chunk, (split + 1) * chunk) of it, TILE positions at a time: the tile's tokens
 * are resolved into local memory, then row-groups of TPR lanes read each K/V row once for
 * all GROUP query heads and keep an online softmax per head; the row-groups are merged at
 * the end through local memory.
 *
 * Duplicate detection (HASH_SLOTS > 0): a local-memory open-addressing hash set holds
 * every valid idx value at list positions before the current tile (the entries of earlier
 * splits are inserted first, O(entries before the chunk) per work-group; then each tile
 * adds its own after use). An entry is a duplicate when its value is in the set or
 * equals an earlier entry of the same tile (a scan of at most TILE - 1 local values). */

#if HEAD_DIM / EPL > 1 && !defined(CLKV_NVIDIA_PTX)
/* Several lanes per row without warp shuffles: row sums go through local memory with
 * work-group barriers (every lane reaches them: the row loop is uniform). Slow; it runs
 * the multi-lane code path on devices without PTX (tests force it on PoCL). */
#define SP_LDS_SUM 1
#else
#define SP_LDS_SUM 0
#endif
#ifndef SEL_ROWS
#define SEL_ROWS 0
#endif
#ifndef SP_LASTIDX
#define SP_LASTIDX 0
#endif
#ifndef SP_TOPK
#define SP_TOPK 0
#endif
#ifndef FUSED_MERGE
#define FUSED_MERGE 0
#endif
#if SP_TOPK && (SEL_ROWS || !SP_LASTIDX)
#error "SP_TOPK needs SP_LASTIDX and attends rows of k / v in place (SEL_ROWS 0)"
#endif
#if SP_TOPK
#define TK_WG WG_SIZE
#define TK_OUT __local
#define SCAN_WG WG_SIZE
#include "pariskv_scan.cl"
#include "pariskv_topk.cl"
#endif
#if SP_LASTIDX
#define O_T CLKV_STORAGE(O_DTYPE)
#endif
#if SP_LASTIDX && FUSED_MERGE
#include "split_merge.cl"
#endif

/* TPR, NRG, RED_ROWS, VW, NCH, ELEM, UNROLL_LOOP and rows_merge_store; UNROLL_LOOP stays
 * empty with SP_LDS_SUM (barriers inside unrolled loops multiply PoCL's barrier regions) */
#define ROWS_NO_UNROLL SP_LDS_SUM
#include "decode_rows.cl"
#include "kernel_args.cl"

#define TILE (NRG * UNROLL)
#define KV_T CLKV_STORAGE(KV_DTYPE)
#define Q_T CLKV_STORAGE(Q_DTYPE)
#define RED_WORDS (NRG * GROUP * 2 + RED_ROWS * GROUP * HEAD_DIM)
#define LDS_WORDS_ (HASH_SLOTS > RED_WORDS ? HASH_SLOTS : RED_WORDS)
#if SP_TOPK && 2 * TK_BIG > LDS_WORDS_
#define LDS_WORDS (2 * TK_BIG) /* the top-k's buffer shares this memory too */
#else
#define LDS_WORDS LDS_WORDS_
#endif

#if TILE > WG_SIZE
#error "TILE must not exceed WG_SIZE (one list position per work-item when resolving)"
#endif

/* Sum of x over the TPR lanes of a row-group (every lane gets it). `buf` (WG_SIZE floats
 * of local memory) is used only by the portable multi-lane path. */
inline float sp_row_sum(float x, __local float *buf, int lid) {
#if SP_LDS_SUM
    barrier(CLK_LOCAL_MEM_FENCE);
    buf[lid] = x;
    barrier(CLK_LOCAL_MEM_FENCE);
    const int base = lid - lid % TPR;
    x = 0.0f;
    for (int i = 0; i < TPR; i++)
        x += buf[base + i];
#elif TPR > 1
    (void)buf;
    (void)lid;
    UNROLL_LOOP
    for (int o = TPR / 2; o > 0; o >>= 1)
        x += clkv_shfl_xor(x, o);
#else
    (void)buf;
    (void)lid;
#endif
    return x;
}

#if TPR > 1
inline uint4 sp_load_chunk(__global const KV_T *p, long row, int c, int ln) {
    long e = row + (long)ELEM(c, 0, ln);
#if VEC_ALIGNED
    return clkv_load_raw_aligned(p, e * (long)sizeof(KV_T));
#elif KV_DTYPE == CLKV_DT_F32
    return clkv_load_raw_u32((__global const uint *)p, e);
#else
    return clkv_load_raw_u16((__global const ushort *)p, e);
#endif
}
#endif

#if HASH_SLOTS > 0
#define HASH_EMPTY (-1)
inline uint sp_hash(int t) {
    return ((uint)t * 2654435761u) & (uint)(HASH_SLOTS - 1);
}

/* Insert t (>= 0); the table never fills (HASH_SLOTS > NI >= entries inserted). */
inline void sp_hash_insert(volatile __local int *tab, int t) {
    uint s = sp_hash(t);
    for (;;) {
        const int old = atomic_cmpxchg(&tab[s], HASH_EMPTY, t);
        if (old == HASH_EMPTY || old == t)
            return;
        s = (s + 1u) & (uint)(HASH_SLOTS - 1);
    }
}

/* Lookup; only called while no work-item inserts (barrier-separated phases). */
inline int sp_hash_contains(volatile __local const int *tab, int t) {
    uint s = sp_hash(t);
    for (;;) {
        const int v = tab[s];
        if (v == t)
            return 1;
        if (v == HASH_EMPTY)
            return 0;
        s = (s + 1u) & (uint)(HASH_SLOTS - 1);
    }
}
#endif

/* Idx value t if it is a candidate (in [0, n) and outside the dense ranges), else -1.
 * Candidacy depends on the value only, so equal values agree. */
inline int sp_candidate(int t, int n, int s_end, int l_lo) {
    return (t >= s_end && t < l_lo && t < n) ? t : -1;
}

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void attention_sparse_partial(
    __global const Q_T *q, __global const KV_T *k, __global const KV_T *v, __global const KV_T *ks,
    __global const KV_T *vs, __global const int *lengths, __global int *idx,
    __global float *part_acc, const sparse_scalars P
#if SP_LASTIDX
    ,
    __global O_T *o, __global float *lse, __global int *tickets
#endif
#if SP_TOPK
    ,
    __global const float *cs, __global const int *cand, __global const int *plan,
    __global const uint *kh, __global const ulong *kbuf
#endif
) {
    KARGS_UNPACK(SPARSE)
    __global float *part_ml = part_acc + ml_off;
    const int lid = (int)get_local_id(0);

    const int split = (int)get_group_id(0);
    const int kvh = (int)get_group_id(1) / nhg;
    const int hg = (int)get_group_id(1) % nhg;
    const int b = (int)get_group_id(2);
    const int rg = lid / TPR;
    const int ln = lid % TPR;

    /* hash set during the loop, reduction afterwards (SP_TOPK: the top-k's buffer before) */
    __local ulong lds64[(LDS_WORDS + 1) / 2];
    __local uint *lds = (__local uint *)lds64;
#if SP_TOPK
    __local ulong tk_tmp[WG_SIZE];
    __local uint tk_sel[TK_RANK > 0 ? TK_RANK : 1];
    __local uint tk_sh[2];
    __local int tk_pos[TK_NI]; /* the row's top-k positions (idx splits) */
#endif
#if SP_LASTIDX && FUSED_MERGE
    __local int is_last;
    __local float merge_w[2 * SM_MAX], merge_l[GROUP];
#endif
    __local int tile_raw[TILE]; /* candidate values of the tile's idx entries (else -1) */
    __local int tile_tok[TILE]; /* token of each tile position, -1: skip */
    __local int tile_first[1];  /* first tile position with a kept token, TILE: none */
#if SEL_ROWS
    __local int tile_sel[TILE]; /* row of ks / vs for idx entries, -1: row tile_tok of k / v */
#endif
    __local float sum_buf[SP_LDS_SUM ? WG_SIZE : 1]; /* portable multi-lane row sums */

    int n = max_len;
    if (has_lengths)
        n = clamp(lengths[len_off + b], 0, max_len);
    const int s_end = min(sink, n);
    const int l_lo = max(n - local_len, s_end); /* idx values >= l_lo are in the local range */
    const int nd = s_end + (n - l_lo);
    const int total = nd + n_idx;
#if SP_LASTIDX
    /* The last ceil(n_idx / chunk) splits take the idx entries [j * chunk, (j + 1) *
     * chunk) (positions nd + those), the others the dense positions [0, nd). */
    const int nds = num_splits - (n_idx + chunk - 1) / chunk;
    const int is_idx = split >= nds;
    const int p0 = is_idx ? nd + (split - nds) * chunk : split * chunk;
    const int p1 = min(p0 + chunk, is_idx ? total : nd);
#else
    const int p0 = split * chunk;
    const int p1 = min(p0 + chunk, total);
#endif
#if SP_TOPK
    __global int *iw = idx + idx_off + (long)b * idx_sb + (long)kvh * idx_sh;
    if (is_idx) { /* uniform over the work-group */
        const int C = clamp(plan[plan_off + 7 * (int)get_num_groups(2) + b], 0, max_cand);
        const long row = (long)b * get_num_groups(1) + kvh;
        const uint nbuf = C > 0 ? kh[kh_off + row * KH_WORDS + KH_CNT + 1] : 0u;
        pkr_topk_row(cs + cs_off + b * cs_sb + kvh * cs_sh, cand + ca_off + b * ca_sb + kvh * ca_sh,
                     C, n_idx, tk_pos, nbuf, kbuf + kb_off + row * KBUF_CAP, lds64, tk_tmp, tk_sel,
                     tk_sh);
        barrier(CLK_LOCAL_MEM_FENCE); /* tk_pos written, lds64 free */
        if (split == nds)
            for (int i = lid; i < n_idx; i += WG_SIZE)
                iw[i] = tk_pos[i];
    }
#define SP_IDX(i) (tk_pos[i])
#else
#define SP_IDX(i) (ip[i])
#endif
    __global const int *ip = idx + idx_off + (long)b * idx_sb + (long)kvh * idx_sh;
#if SP_TOPK
    (void)ip; /* the idx entries are read from tk_pos */
#endif

#if HASH_SLOTS > 0
    volatile __local int *tab = (volatile __local int *)lds;
    if (p0 < p1 && p1 > nd) {
        for (int s = lid; s < HASH_SLOTS; s += WG_SIZE)
            tab[s] = HASH_EMPTY;
        barrier(CLK_LOCAL_MEM_FENCE);
        const int i_first = clamp(p0 - nd, 0, n_idx);
        for (int i = lid; i < i_first; i += WG_SIZE) {
            const int t = sp_candidate(SP_IDX(i), n, s_end, l_lo);
            if (t >= 0)
                sp_hash_insert(tab, t);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
#endif

    const int h0 = kvh * G + hg * GROUP;
    const int ng = min(GROUP, G - hg * GROUP);
    float qr[GROUP][EPL], m[GROUP], l[GROUP], acc[GROUP][EPL];
    rows_start(qr, m, l, acc, q, Q_DTYPE, q_off + (long)b * q_sb, q_sh, h0, ng, ln, scale_log2);
    const long kb = k_off + (long)b * k_sb + (long)kvh * k_sh;
    const long vb = v_off + (long)b * v_sb + (long)kvh * v_sh;
#if SEL_ROWS
    const long ksb = ks_off + (long)b * ks_sb + (long)kvh * ks_sh;
    const long vsb = vs_off + (long)b * vs_sb + (long)kvh * vs_sh;
/* Base pointer and element offset of the K (V) row of tile position tp with token tt. */
#define SP_SEL(tp) (tile_sel[tp])
#define SP_KP(si) ((si) >= 0 ? ks : k)
#define SP_VP(si) ((si) >= 0 ? vs : v)
#define SP_KROW(tt, si) ((si) >= 0 ? ksb + (long)(si)*ks_sl : kb + (long)(tt)*k_sl)
#define SP_VROW(tt, si) ((si) >= 0 ? vsb + (long)(si)*vs_sl : vb + (long)(tt)*v_sl)
#else
#define SP_SEL(tp) (-1)
#define SP_KP(si) (k)
#define SP_VP(si) (v)
#define SP_KROW(tt, si) (kb + (long)(tt)*k_sl)
#define SP_VROW(tt, si) (vb + (long)(tt)*v_sl)
    (void)ks;
    (void)vs;
    (void)ks_off;
    (void)ks_sb;
    (void)ks_sh;
    (void)ks_sl;
    (void)vs_off;
    (void)vs_sb;
    (void)vs_sh;
    (void)vs_sl;
#endif

    for (int tb = p0; tb < p1; tb += TILE) {
        /* 1. candidate value of each idx position of the tile */
        if (lid < TILE) {
            const int p = tb + lid;
            int raw = -1;
            if (p < p1 && p >= nd)
                raw = sp_candidate(SP_IDX(p - nd), n, s_end, l_lo);
            tile_raw[lid] = raw;
        }
        if (lid == 0)
            *tile_first = TILE;
        barrier(CLK_LOCAL_MEM_FENCE);
        /* 2. resolve tokens: dense positions map directly; an idx entry is dropped when an
         * earlier entry has the same value */
        if (lid < TILE) {
            const int p = tb + lid;
            int tok = -1;
#if SEL_ROWS
            int sel = -1;
#endif
            if (p < p1) {
                if (p < s_end) {
                    tok = p;
                } else if (p < nd) {
                    tok = l_lo + (p - s_end);
                } else {
                    tok = tile_raw[lid];
                    if (tok >= 0) {
#if SP_LASTIDX
                        /* the step's idx entries (its search's top-k) are distinct */
#elif HASH_SLOTS > 0
                        if (sp_hash_contains(tab, tok))
                            tok = -1;
                        for (int r = 0; r < lid && tok >= 0; r++)
                            if (tile_raw[r] == tok)
                                tok = -1;
#else
                        for (int i = 0; i < p - nd && tok >= 0; i++)
                            if (SP_IDX(i) == tok)
                                tok = -1;
#endif
                    }
#if SEL_ROWS
                    sel = p - nd;
#endif
                }
            }
            tile_tok[lid] = tok;
#if SEL_ROWS
            tile_sel[lid] = sel;
#endif
            if (tok >= 0)
                atomic_min(tile_first, lid);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
#if HASH_SLOTS > 0
        /* 3. the tile's candidates join the set for later tiles (nobody reads it now) */
        if (lid < TILE && tile_raw[lid] >= 0 && tb + TILE < p1)
            sp_hash_insert(tab, tile_raw[lid]);
#endif
        /* 4. attention over the tile's rows: row-group rg takes rows rg, rg + NRG, ...
         * Skipped positions load the tile's first kept row instead (in bounds, and every
         * lane of a warp runs the same shuffles) and are masked. */
        const int first = *tile_first;
        if (first < TILE) {
            const int any_tok = tile_tok[first];
            const int any_sel = SP_SEL(first);
            float s[UNROLL][GROUP];
            int valid[UNROLL];
#if TPR > 1
            uint4 kr[UNROLL][NCH], vr[UNROLL][NCH];
            UNROLL_LOOP
            for (int u = 0; u < UNROLL; u++) {
                const int tok = tile_tok[u * NRG + rg];
                valid[u] = tok >= 0;
                const int tt = valid[u] ? tok : any_tok;
                const int si = valid[u] ? SP_SEL(u * NRG + rg) : any_sel;
                __global const KV_T *kp = SP_KP(si), *vp = SP_VP(si);
                const long krow = SP_KROW(tt, si), vrow = SP_VROW(tt, si);
                UNROLL_LOOP
                for (int c = 0; c < NCH; c++) {
                    kr[u][c] = sp_load_chunk(kp, krow, c, ln);
                    vr[u][c] = sp_load_chunk(vp, vrow, c, ln);
                }
            }
            UNROLL_LOOP
            for (int u = 0; u < UNROLL; u++) {
                float kx[EPL];
                UNROLL_LOOP
                for (int c = 0; c < NCH; c++) {
                    UNROLL_LOOP
                    for (int j = 0; j < VW; j++)
                        kx[c * VW + j] = CLKV_RAW_ELEM(KV_DTYPE)(kr[u][c], j);
                }
                UNROLL_LOOP
                for (int g = 0; g < GROUP; g++) {
                    float d = 0.0f;
                    UNROLL_LOOP
                    for (int e = 0; e < EPL; e++)
                        d = fma(qr[g][e], kx[e], d);
                    d = sp_row_sum(d, sum_buf, lid);
                    s[u][g] = valid[u] ? d : -INFINITY;
                }
            }
#else
            int rows[UNROLL], sels[UNROLL];
            for (int u = 0; u < UNROLL; u++) {
                const int tok = tile_tok[u * NRG + rg];
                valid[u] = tok >= 0;
                rows[u] = valid[u] ? tok : any_tok;
                sels[u] = valid[u] ? SP_SEL(u * NRG + rg) : any_sel;
                __global const KV_T *kp = SP_KP(sels[u]);
                const long krow = SP_KROW(rows[u], sels[u]);
                float d[GROUP];
                rows_dot_lane(qr, kp, krow, d);
                for (int g = 0; g < GROUP; g++)
                    s[u][g] = valid[u] ? d[g] : -INFINITY;
            }
#endif
            rows_rescale(s, m, l, acc);
            UNROLL_LOOP
            for (int u = 0; u < UNROLL; u++) {
                float p[GROUP];
                rows_probs(s[u], valid[u], m, l, p);
#if TPR > 1
                rows_acc_chunks(acc, p, vr[u]);
#else
                rows_acc_lane(acc, p, SP_VP(sels[u]), SP_VROW(rows[u], sels[u]));
#endif
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* tile arrays and hash inserts done before reuse */
    }

    /* Merge the NRG row-group states (the hash set is dead: its memory is reused: red_ml
     * [NRG][GROUP][2], then red_acc [RED_ROWS][GROUP][D]) and store the split's partial. */
    rows_merge_store(acc, m, l, rg, ln, (__local float *)lds,
                     (__local float *)lds + NRG * GROUP * 2, ng, part_acc, part_ml,
                     ((long)b * Hq + h0) * num_splits + split, num_splits);
#if SP_LASTIDX && FUSED_MERGE
    split_merge_fused(part_acc, ml_off, num_splits, Hq, b, h0, ng,
                      tickets + (long)b * get_num_groups(1) + kvh, o, o_off, o_sb, o_sh, lse,
                      lse_off, lse_sb, lse_sh, has_lse, &is_last, merge_w, merge_l);
#elif SP_LASTIDX
    (void)o;
    (void)o_off;
    (void)o_sb;
    (void)o_sh;
    (void)lse;
    (void)lse_off;
    (void)lse_sb;
    (void)lse_sh;
    (void)has_lse;
    (void)tickets;
#endif
}
