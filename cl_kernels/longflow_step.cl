/* LongFlow one-launch step (SPEC §2.3; host/longflow_step.c): the part shared by its two
 * attention forms, included by attention_window_mma.cl (longflow_step_mma: 16-row tiles in
 * local memory) and attention_window_keyrows.cl (longflow_step_keyrows: keys on the mma M
 * dimension, K/V loaded straight into registers), both built with -DLONGFLOW=1.
 *
 * Work-groups [0, n_attn) are attention work-groups (group t = (bh * num_splits + split) *
 * n_qtiles + qtile): each stores the new token if its split holds the victim slot, writes
 * its split's partial state (m, l, acc) per query head and, per (query head, slot), the
 * base-2 score logit y = z*log2(e) + log2 ||v||_1 (-inf for a masked slot) into
 * ws[y_off + (b*Hq + h)*S + slot], then arrives (lf_step_arrive). The last n_score
 * work-groups are scorers (lf_step_score). The score work is n_items chunks of
 * spt * WG_SIZE slots (item = map * n_chunks + chunk); scorer s takes the items s,
 * s + n_score, ... For each it waits (lane 0 polls) until every attention work-group of
 * the item's map has arrived. Attention work-groups never wait, and the host keeps n_score
 * below the number of compute units (each holds at least one work-group), so at least one
 * work-group slot always runs attention work: the waits end whatever order the device
 * starts work-groups in. After arriving (partials, score logits and the victim's position
 * released by the arrival), the last attention work-group of a (sequence, KV head) merges its
 * splits into o and lse (a step only). A scorer merges the split (m, l) of the map's heads
 * into LSE_h, scores its slots as mean_h exp2(y - LSE_h) (never above ||v||_1: no overflow
 * for any logit), folds the chunk's best victim candidate (as longflow_finish.cl: empty
 * slots first, then the smallest score, ties to the lower slot, protected slots never) into
 * the map's 64-bit best word (an atomic max of the complemented lf_cand_pack) and arrives;
 * the last scorer of a map takes the word (leaving 0) as the map's victim and, in a step,
 * advances next_pos (per-KV-head mode: the last map of the sequence). Every counter is back
 * at 0 when the kernel ends: a (sequence, KV head)'s counter is reset by its merger, a
 * map's arrival and chunk counters and best word by its last scorer, a sequence's map
 * counter by its last map. Counters (int32, zero between launches): ctr[unit_off + b*Hkv +
 * kvh], ctr[arr_off + map], ctr[scd_off + map], ctr[bat_off + b]; the best words are the
 * ulong ctr[c64_off + 2 map] (c64_off even).
 * Synchronisation as CUDA's grid barrier: a work-group barrier, then one lane's gpu-scope
 * release atomic (the barrier orders the other work-items' writes before it); one lane
 * polls with acquire loads, then the barrier. The 64-bit best word instead of an array of
 * chunk candidates reduced by the last scorer, one gpu-scope fence per work-group instead
 * of one per work-item, and polls every 32 ns instead of 128 took the step from 78.9-79.2
 * to 78.1-78.3 us (H200, B 2, Hq 32 / Hkv 8, D 128, bf16, per-layer, S 32K; 14.1 -> 13.4 us
 * at S 1K); release / acquire atomics instead of those fences then took it to 77.3 (from
 * 78.0 in the same run; docs/performance.md has the runs).
 *
 * The includer defines KV_DTYPE, Q_T, KV_T, HEAD_DIM, WG_SIZE, UNROLL and PER_HEAD; build
 * option LF_NH: the heads a map averages (Hq per-layer, G per-KV-head). The includer
 * includes kernel_args.cl first (a fragment includes no other file). */

#ifndef LF_NH
#error "longflow_step.cl needs LF_NH"
#endif
/* Score logits in flight per work-item: LF_SPB slots x LF_HB heads (64 values). */
#define LF_HB (LF_NH < 64 ? LF_NH : 64)
#define LF_SPB (64 / LF_HB)

/* The step's synchronisation (gpu scope): an acquire load (a poll), a release increment
 * without result (an arrival), an acquire-release increment returning the old value (an
 * arrival that asks whether it is the last). */
inline int lf_ld_acquire(__global const int *p) {
    int x;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(x) : "l"(p) : "memory");
    return x;
}
inline void lf_red_release(__global int *p) {
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(p) : "memory");
}
inline int lf_inc_acq_rel(__global int *p) {
    int x;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(x) : "l"(p) : "memory");
    return x;
}
/* L2 policies of the score logits: the keyrows attention stores them to be kept
 * (evict_last) while the K/V stream passes through L2, so the scorers find them there
 * instead of in DRAM (H200, B 2, S 32K: the step 80.1-80.4 -> 78.8-79.1 us; K/V loads marked
 * evict_first as well: 79.9-80.4); the scorers read them as evict_first, so they do not
 * stay in L2 after the step. */
inline ulong lf_policy_keep(void) {
    ulong p;
    asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
    return p;
}
inline ulong lf_policy_drop(void) {
    ulong p;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
    return p;
}
inline void lf_store_keep(__global float *p, float x, ulong pol) {
    asm volatile("st.global.L2::cache_hint.f32 [%0], %1, %2;" ::"l"(p), "f"(x), "l"(pol)
                 : "memory");
}
inline float lf_load_drop(__global const float *p, ulong pol) {
    float x;
    asm volatile("ld.global.L2::cache_hint.f32 %0, [%1], %2;"
                 : "=f"(x)
                 : "l"(p), "l"(pol)
                 : "memory");
    return x;
}

/* Victim candidates (as longflow_finish.cl): idx -1 is none; else the smaller key wins
 * (empty slots have key -1, below every score), ties to the lower slot. */
inline int lf_cand_better(float ka, int ia, float kb, int ib) {
    if (ia < 0)
        return 0;
    if (ib < 0)
        return 1;
    return ka < kb || (ka == kb && ia < ib);
}

/* A candidate as one 64-bit word ordered as lf_cand_better for real keys: the key's bits
 * mapped to an order-preserving uint (high half), then the slot (low half), so the smaller
 * word is the better candidate. (A NaN key ranks above every number; lf_cand_better keeps
 * whichever candidate came first.) */
inline ulong lf_cand_pack(float key, int idx) {
    const uint u = as_uint(key);
    const uint ord = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ((ulong)ord << 32) | (uint)idx;
}
/* *p = max(*p, x) (fire and forget) */
inline void lf_cand_max64(__global ulong *p, ulong x) {
    asm volatile("red.global.max.u64 [%0], %1;" ::"l"(p), "l"(x) : "memory");
}
/* *p, leaving 0 */
inline ulong lf_take64(__global ulong *p) {
    ulong x;
    asm volatile("atom.global.exch.b64 %0, [%1], 0;" : "=l"(x) : "l"(p) : "memory");
    return x;
}

/* The work-group's best (key, idx), returned to every work-item (a total order, so the
 * warp butterfly leaves every lane with its warp's best). */
inline void lf_cand_reduce(float *key, int *idx, __local float *rk, __local int *ri) {
    const int lid = (int)get_local_id(0);
    float kb = *key;
    int ib = *idx;
    for (int o = 16; o > 0; o >>= 1) {
        const float k2 = clkv_shfl_xor(kb, o);
        const int i2 = as_int(clkv_shfl_xor(as_float(ib), o));
        if (lf_cand_better(k2, i2, kb, ib)) {
            kb = k2;
            ib = i2;
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE); /* earlier readers of rk / ri are done */
    if (lid % 32 == 0) {
        rk[lid / 32] = kb;
        ri[lid / 32] = ib;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    kb = rk[0];
    ib = ri[0];
    for (int w = 1; w < WG_SIZE / 32; w++)
        if (lf_cand_better(rk[w], ri[w], kb, ib)) {
            kb = rk[w];
            ib = ri[w];
        }
    *key = kb;
    *idx = ib;
}

/* o and lse of the G heads of (b, kvh) from the splits' partial states (the last attention
 * work-group of the pair, after its acquiring arrival): an online merge over batches of eight
 * splits, each batch's loads in flight together. */
inline void lf_merge(__global const float *ws, long ml_off, int b, int kvh, int Hq, int G,
                     int num_splits, __global void *o, int o_dt, long o_off, long o_sb, long o_sh,
                     __global float *lse, long lse_off, long lse_sb, long lse_sh, int has_lse) {
    for (int e = (int)get_local_id(0); e < G * (HEAD_DIM / 4); e += WG_SIZE) {
        const int r = e / (HEAD_DIM / 4), c4 = e % (HEAD_DIM / 4);
        const int h = kvh * G + r;
        const long idx0 = ((long)b * Hq + h) * num_splits;
        float mx = -INFINITY, sum = 0.0f, f2;
        float4 x = (float4)(0.0f);
        for (int s0 = 0; s0 < num_splits; s0 += 8) {
            float2 ml[8];
            float4 a[8];
            UNROLL
            for (int j = 0; j < 8; j++) {
                const int sp = min(s0 + j, num_splits - 1);
                ml[j] = vload2(0, ws + ml_off + (idx0 + sp) * 2);
                a[j] = vload4(0, ws + (idx0 + sp) * HEAD_DIM + c4 * 4);
            }
            UNROLL
            for (int j = 0; j < 8; j++) {
                if (s0 + j >= num_splits || ml[j].x == -INFINITY)
                    continue;
                const float f1 = clkv_softmax_merge(&mx, &sum, ml[j].x, ml[j].y, &f2);
                x = fma((float4)(f2), a[j], x * f1);
            }
        }
        x *= sum > 0.0f ? 1.0f / sum : 0.0f;
        const long orow = o_off + (long)b * o_sb + (long)h * o_sh + c4 * 4;
        clkv_store_dt(o, o_dt, orow, x.x);
        clkv_store_dt(o, o_dt, orow + 1, x.y);
        clkv_store_dt(o, o_dt, orow + 2, x.z);
        clkv_store_dt(o, o_dt, orow + 3, x.w);
        if (has_lse && c4 == 0)
            lse[lse_off + (long)b * lse_sb + (long)h * lse_sh] =
                sum > 0.0f ? (mx + log2(sum)) * CLKV_LN2 : -INFINITY;
    }
}

/* LF_SPB slots (rounds kk0 .. kk0 + LF_SPB - 1 of the chunk) x LF_HB heads (t0 ..) of score
 * logits (plain loads: after the acquiring poll, and no line of them was read on this
 * multiprocessor before they were final), 0 outside the chunk or the heads; with load_pos
 * the slots' positions too (-1 outside the chunk). Loads that skip L1 (L1::no_allocate,
 * .cg, .cs) changed nothing: H100, B 2, S 1024 / 32K, two alternations, per-layer
 * 15.04-15.33 / 116.8-117.5 against 15.25-15.39 / 116.9-117.0 us (2026-11-27). */
inline void lf_load_y(float (*yv)[LF_HB], int *pv, int load_pos, __global const float *yb,
                      __global const int *prow, int S, int first, int end, int kk0, int t0,
                      int lid) {
    const ulong pol = lf_policy_drop();
    UNROLL
    for (int j = 0; j < LF_SPB; j++) {
        const int i = first + (kk0 + j) * WG_SIZE + lid;
        if (load_pos)
            pv[j] = i < end ? prow[i] : -1;
        UNROLL
        for (int t = 0; t < LF_HB; t++)
            yv[j][t] =
                i < end && t0 + t < LF_NH ? lf_load_drop(yb + (long)(t0 + t) * S + i, pol) : 0.0f;
    }
}

/* One score item: chunk `chunk` (slots [first, first + spt * WG_SIZE)) of slot map m. */
inline void lf_score_item(int m, int chunk, __global const int *pos, __global int *victim,
                          __global int *next_pos, int do_write, int Hq, int G, int n_qtiles, int S,
                          int num_splits, __global const float *ws, long ml_off, long y_off,
                          __global int *ctr, int arr_off, int scd_off, int bat_off, int protect,
                          int n_chunks, int spt, __global float *scores, long sc_off, long sc_sb,
                          long sc_sh, int has_scores, __global int *vout, long vo_off, long vo_sb,
                          long vo_sh, int has_vout, int c64_off, __local float *lse2,
                          __local float *rk, __local int *ri, __local int *flag) {
    const int lid = (int)get_local_id(0);
    const int Hkv = Hq / G, Hm = PER_HEAD ? Hkv : 1;
    const int b = m / Hm, u = m % Hm;
    const int hf = PER_HEAD ? u * G : 0;
    const int n_map = (PER_HEAD ? 1 : Hkv) * n_qtiles * num_splits;
    __global const int *prow = pos + (long)m * S;
    const int vold = victim[m], np = next_pos[b];
    /* newest position: the one this step writes (at vold), or after a load the last one */
    const long prot_from = (long)(do_write ? np : np - 1) - protect + 1;
    const int first = chunk * spt * WG_SIZE, end = min(first + spt * WG_SIZE, S);
    __global const float *yb = ws + y_off + ((long)b * Hq + hf) * S;
    __global const float *pml = ws + ml_off;
    int pv[LF_SPB]; /* positions of the batch's slots: stable in a step but for vold */
    UNROLL
    for (int j = 0; j < LF_SPB; j++) {
        const int i = first + j * WG_SIZE + lid;
        pv[j] = i < end ? prow[i] : -1;
    }

    if (lid == 0) {
        while (lf_ld_acquire(ctr + arr_off + m) < n_map)
            asm volatile("nanosleep.u32 32;" ::: "memory");
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    /* the first score logits, in flight while the LSEs are merged */
    float yv[LF_SPB][LF_HB];
    lf_load_y(yv, pv, 0, yb, prow, S, first, end, 0, 0, lid); /* positions: loaded above */
    /* LSE (base 2) of each head from its splits: tph lanes per head, then a butterfly */
    int tph = 1;
    while (tph < 32 && tph * 2 * LF_NH <= WG_SIZE)
        tph *= 2;
    const int r = lid % tph;
    for (int t0 = 0; t0 < LF_NH; t0 += WG_SIZE / tph) {
        const int t = t0 + lid / tph;
        float mm = -INFINITY, ll = 0.0f, f2;
        if (t < LF_NH) {
            const long base = ((long)b * Hq + hf + t) * num_splits;
            for (int s0 = r; s0 < num_splits; s0 += 4 * tph) {
                float2 ml[4];
                UNROLL
                for (int j = 0; j < 4; j++)
                    ml[j] = vload2(0, pml + (base + min(s0 + j * tph, num_splits - 1)) * 2);
                UNROLL
                for (int j = 0; j < 4; j++)
                    if (s0 + j * tph < num_splits)
                        (void)clkv_softmax_merge(&mm, &ll, ml[j].x, ml[j].y, &f2);
            }
        }
        for (int o = tph / 2; o > 0; o >>= 1) {
            const float m2 = clkv_shfl_xor(mm, o), l2 = clkv_shfl_xor(ll, o);
            (void)clkv_softmax_merge(&mm, &ll, m2, l2, &f2);
        }
        if (r == 0 && t < LF_NH)
            lse2[t] = ll > 0.0f ? mm + log2(ll) : -INFINITY;
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    const float inv_nh = 1.0f / (float)LF_NH;
    float best_key = 0.0f;
    int best_idx = -1;
    for (int kk0 = 0; kk0 < spt; kk0 += LF_SPB) {
        float sum[LF_SPB];
        UNROLL
        for (int j = 0; j < LF_SPB; j++)
            sum[j] = 0.0f;
        for (int t0 = 0; t0 < LF_NH; t0 += LF_HB) {
            if (kk0 > 0 || t0 > 0)
                lf_load_y(yv, pv, t0 == 0, yb, prow, S, first, end, kk0, t0, lid);
            UNROLL
            for (int j = 0; j < LF_SPB; j++) {
                UNROLL
                for (int t = 0; t < LF_HB; t++)
                    if (t0 + t < LF_NH)
                        sum[j] += exp2(yv[j][t] - lse2[t0 + t]);
            }
        }
        UNROLL
        for (int j = 0; j < LF_SPB; j++) {
            const int i = first + (kk0 + j) * WG_SIZE + lid;
            if (kk0 + j >= spt || i >= end)
                continue;
            int p = pv[j];
            if (do_write && i == vold)
                p = np;                           /* the token this step wrote */
            float score = -INFINITY, key = -1.0f; /* empty: key -1, below every score */
            int idx = i;
            if (p >= 0) {
                score = sum[j] * inv_nh;
                key = score;
                if ((long)p >= prot_from)
                    idx = -1;
            }
            if (has_scores)
                scores[sc_off + (long)b * sc_sb + (long)u * sc_sh + i] = score;
            if (lf_cand_better(key, idx, best_key, best_idx)) {
                best_key = key;
                best_idx = idx;
            }
        }
    }
    lf_cand_reduce(&best_key, &best_idx, rk, ri);
    __global ulong *best64 = (__global ulong *)(ctr + c64_off) + m;
    if (lid == 0) {
        if (best_idx >= 0)
            lf_cand_max64(best64, ~lf_cand_pack(best_key, best_idx));
        *flag = lf_inc_acq_rel(ctr + scd_off + m) == n_chunks - 1;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (!*flag)
        return;
    /* the last scorer of the map: its victim from the best word (left at 0) */
    if (lid == 0) {
        const ulong wd = ~lf_take64(best64);
        /* no candidate only if the map breaks its invariants: keep the old victim */
        const int nv = wd != ~(ulong)0 ? (int)(uint)wd : vold;
        victim[m] = nv;
        if (has_vout)
            vout[vo_off + (long)b * vo_sb + (long)u * vo_sh] = nv;
        atomic_xchg(ctr + arr_off + m, 0);
        atomic_xchg(ctr + scd_off + m, 0);
        if (do_write) {
#if PER_HEAD
            if (atomic_inc(ctr + bat_off + b) == Hkv - 1) {
                atomic_xchg(ctr + bat_off + b, 0);
                next_pos[b] = np + 1;
            }
#else
            next_pos[b] = np + 1;
#endif
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE); /* *flag and rk / ri are reused by the next item */
}

/* The step kernel's parameters (both forms): its buffers, then its scalars as one struct
 * (see kernel_args.cl; the kernels unpack it into constants named as the fields). */
#define LF_STEP_PARAMS                                                                             \
    __global const Q_T *q, __global const void *kn, __global const void *vn, __global KV_T *k,     \
        __global KV_T *v, __global int *pos, __global int *victim, __global int *next_pos,         \
        __global float *ws, __global int *ctr, __global void *o, __global float *lse,              \
        __global float *scores, __global int *vout, const lf_step_scalars P

#if KV_DTYPE == CLKV_DT_BF16
#define ONES16X2 0x3f803f80u /* two 1.0 in bf16 */
#else
#define ONES16X2 0x3c003c00u /* two 1.0 in f16 */
#endif

/* Bit l set when lane l's predicate is non-zero. */
inline uint lf_ballot(int p) {
    uint r;
    asm volatile("{ .reg .pred q; setp.ne.s32 q, %1, 0; vote.sync.ballot.b32 %0, q, -1; }"
                 : "=r"(r)
                 : "r"(p));
    return r;
}

/* 16-byte chunk c (elements 8c .. 8c + 7) of the new token's row at element offset `row`
 * of x (dtype code dt) as the cache stores it (RNE to KV_DTYPE). */
inline uint4 lf_new_chunk(__global const void *x, int dt, long row, int c) {
    uint w[4];
    UNROLL
    for (int i = 0; i < 4; i++) {
        const long e = row + c * 8 + 2 * i;
        w[i] = CLKV_ROUND16X2(KV_DTYPE)(clkv_load_dt(x, dt, e), clkv_load_dt(x, dt, e + 1));
    }
    return (uint4)(w[0], w[1], w[2], w[3]);
}

/* A scorer work-group (gid >= n_attn): its items, one after the other. scratch: at least
 * LF_NH + 2 * WG_SIZE / 32 words of local memory. */
inline void lf_step_score(int gid, __global const int *pos, __global int *victim,
                          __global int *next_pos, __global float *ws, __global int *ctr,
                          __global float *scores, __global int *vout, const lf_step_scalars P,
                          __local float *scratch, __local int *flag) {
    KARGS_UNPACK(LF_STEP)
    __local float *lse2 = scratch;
    __local float *rk = lse2 + LF_NH;
    __local int *ri = (__local int *)(rk + WG_SIZE / 32);
    for (int it = gid - n_attn; it < n_items; it += n_score)
        lf_score_item(it / n_chunks, it % n_chunks, pos, victim, next_pos, do_write, Hq, G,
                      n_qtiles, S, num_splits, ws, ml_off, y_off, ctr, arr_off, scd_off, bat_off,
                      protect, n_chunks, spt, scores, sc_off, sc_sb, sc_sh, has_scores, vout,
                      vo_off, vo_sb, vo_sh, has_vout, c64_off, lse2, rk, ri, flag);
}

/* An attention work-group of (sequence x KV head) bh after its partial state and score
 * logits are written: release them, arrive, and where it is the last of bh in a step,
 * merge bh's splits into o and lse. */
inline void lf_step_arrive(int bh, __global float *ws, __global int *ctr, __global void *o,
                           __global float *lse, const lf_step_scalars P, __local int *flag) {
    KARGS_UNPACK(LF_STEP)
    const int lid = (int)get_local_id(0);
    const int Hkv = Hq / G, b = bh / Hkv;
    const int per_bh = n_qtiles * num_splits;
    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
    if (lid == 0) {
        lf_red_release(ctr + arr_off + (PER_HEAD ? bh : b));
        int last = 0;
        if (do_write) {
            last = lf_inc_acq_rel(ctr + unit_off + bh) == per_bh - 1;
            if (last)
                atomic_xchg(ctr + unit_off + bh, 0);
        }
        *flag = last;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (!*flag)
        return;
    lf_merge(ws, ml_off, b, bh % Hkv, Hq, G, num_splits, o, o_dt, o_off, o_sb, o_sh, lse, lse_off,
             lse_sb, lse_sh, has_lse);
}
