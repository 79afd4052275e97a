/* LongFlow fused decode step (SPEC §2.3), kernel 2 of 2: longflow_finish.
 *
 * Work-groups [0, n_merge): merge the splits of one (sequence, query head) of
 * cl_kernels/longflow_partial.cl into o and LSE (as attention_decode_merge). The others:
 * one (sequence, slot map, chunk of chunk_slots slots) each: recompute the LSE of the
 * heads the map averages from the split partials, score the chunk's slots as
 * mean_h exp2(y - LSE2_h) (never above ||v||_1, so no overflow for any logit), keep the
 * chunk's best victim candidate; the last work-group of a map to finish (atomic counter
 * in the cache object, zero between calls) reduces the candidates into the map's victim,
 * resets the counter and (in a step) advances next_pos.
 *
 * Build options (o's dtype is a kernel argument): HEAD_DIM, PER_HEAD, FIN_WG (work-group size),
 * MAX_SPLITS, UNIT_HEADS_MAX (most heads a map averages). The score geometry is run-time
 * (host/longflow_step.c): chunk_slots slots per work-group, hl (a power of two dividing
 * FIN_WG) lanes sharing the heads of a slot, so FIN_WG / hl slots per round. */

#if FIN_WG % 32 != 0
#error "FIN_WG must be a multiple of 32 (warps)"
#endif
#if MAX_SPLITS < FIN_WG
#error "the merge weights double as the LSE tree scratch: MAX_SPLITS >= FIN_WG"
#endif

#define MERGE_Q (HEAD_DIM / 4)
#define MERGE_LANES (FIN_WG / MERGE_Q)

/* Order of victim candidates: an idx of -1 is no candidate; otherwise the smaller key
 * wins (empty slots have key -1, below every score), ties to the lower slot index. */
inline int cand_better(float ka, int ia, float kb, int ib) {
    if (ia < 0)
        return 0;
    if (ib < 0)
        return 1;
    return ka < kb || (ka == kb && ia < ib);
}

/* Reduce (key, idx) candidates of the work-group into rk[0], ri[0] (visible to every
 * work-item on return). On NVIDIA a warp butterfly (cand_better is a total order on
 * candidates, so every lane ends with its warp's best), then one lane over the warps;
 * elsewhere a tree in local memory. */
inline void cand_reduce(__local float *rk, __local int *ri, float key, int idx) {
    const int lid = (int)get_local_id(0);
#ifdef CLKV_NVIDIA_PTX
    for (int o = 16; o > 0; o >>= 1) {
        const float k2 = clkv_shfl_xor(key, o);
        const int i2 = as_int(clkv_shfl_xor(as_float(idx), o));
        if (cand_better(k2, i2, key, idx)) {
            key = k2;
            idx = i2;
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE); /* earlier readers of rk / ri are done */
    if (lid % 32 == 0) {
        rk[lid / 32] = key;
        ri[lid / 32] = idx;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid == 0) {
        for (int w = 1; w < FIN_WG / 32; w++)
            if (cand_better(rk[w], ri[w], key, idx)) {
                key = rk[w];
                idx = ri[w];
            }
        rk[0] = key;
        ri[0] = idx;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#else
    rk[lid] = key;
    ri[lid] = idx;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int span = FIN_WG / 2; span > 0; span >>= 1) {
        if (lid < span && cand_better(rk[lid + span], ri[lid + span], rk[lid], ri[lid])) {
            rk[lid] = rk[lid + span];
            ri[lid] = ri[lid + span];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
#endif
}

/* Max (is_max) or sum of x over the work-group, returned to every work-item; `red` holds
 * FIN_WG floats. On NVIDIA a warp butterfly, then the warps' values. */
inline float wg_reduce(float x, __local float *red, int is_max) {
    const int lid = (int)get_local_id(0);
    barrier(CLK_LOCAL_MEM_FENCE); /* earlier readers of red are done */
#ifdef CLKV_NVIDIA_PTX
    for (int o = 16; o > 0; o >>= 1) {
        const float y = clkv_shfl_xor(x, o);
        x = is_max ? fmax(x, y) : x + y;
    }
    if (lid % 32 == 0)
        red[lid / 32] = x;
    barrier(CLK_LOCAL_MEM_FENCE);
    x = red[0];
    for (int w = 1; w < FIN_WG / 32; w++)
        x = is_max ? fmax(x, red[w]) : x + red[w];
#else
    red[lid] = x;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int span = FIN_WG / 2; span > 0; span >>= 1) {
        if (lid < span)
            red[lid] = is_max ? fmax(red[lid], red[lid + span]) : red[lid] + red[lid + span];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    x = red[0];
#endif
    return x;
}

/* The scores and victim candidate of one chunk of one slot map; the last work-group of
 * the map reduces the candidates of all its chunks (see the top of the file). */
void score_map(__global float *ws, long ml_off, long y_off, long cand_off, int num_splits, int Hq,
               int Hkv, int G, int S, int n_merge, int n_chunks, int chunk_slots, int hl,
               __global const int *pos, __global int *victim, __global int *next_pos,
               __global int *counters, int mode, int protect, __global float *scores, long sc_off,
               long sc_sb, long sc_sh, int has_scores, __global int *vout, long vo_off, long vo_sb,
               long vo_sh, int has_vout, __local float *red, __local float *red_l,
               __local int *red_i, __local float *lse2, __local int *last) {
    __global const float *part_ml = ws + ml_off;
    __global const float *ys = ws + y_off;
    __global int *cand = (__global int *)(ws + cand_off);
    const int lid = (int)get_local_id(0);
    const int gid = (int)get_group_id(0);
    /* ---- scores and victim of one chunk of one slot map ---- */
    const int Hm = PER_HEAD ? Hkv : 1;
    const int sid = gid - n_merge;
    const int chunk = sid % n_chunks;
    const int bu = sid / n_chunks;
    const int b = bu / Hm, u = bu % Hm;
    const int nh = PER_HEAD ? G : Hq;
    const int hf = PER_HEAD ? u * G : 0;
    __global const int *prow = pos + (long)bu * S;
    const int vold = victim[bu]; /* read before this work-group arrives below */
    const int newest = mode == 0 ? prow[vold] : next_pos[b] - 1;
    const long prot_from = (long)newest - protect + 1;

    if (mode != 2) {
        /* LSE of each averaged head from its split partials: tph work-items per head
         * merge strided subsets of the splits, then a tree over the tph partials. */
        int tph = 1;
        while (tph * 2 * nh <= FIN_WG)
            tph *= 2;
        const int hpb = FIN_WG / tph; /* heads per block */
        const int r = lid % tph;
        for (int t0 = 0; t0 < nh; t0 += hpb) {
            const int t = t0 + lid / tph;
            float mm = -INFINITY, ll = 0.0f, f2;
            if (t < nh) {
                const long base = ((long)b * Hq + hf + t) * num_splits;
                for (int s = r; s < num_splits; s += tph)
                    (void)clkv_softmax_merge(&mm, &ll, part_ml[(base + s) * 2],
                                             part_ml[(base + s) * 2 + 1], &f2);
            }
            red[lid] = mm;
            red_l[lid] = ll;
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int span = tph / 2; span > 0; span >>= 1) {
                if (r < span) {
                    mm = red[lid];
                    ll = red_l[lid];
                    (void)clkv_softmax_merge(&mm, &ll, red[lid + span], red_l[lid + span], &f2);
                    red[lid] = mm;
                    red_l[lid] = ll;
                }
                barrier(CLK_LOCAL_MEM_FENCE);
            }
            if (r == 0 && t < nh)
                lse2[t] = red_l[lid] > 0.0f ? red[lid] + log2(red_l[lid]) : -INFINITY;
            barrier(CLK_LOCAL_MEM_FENCE);
        }
    }
    /* The chunk's slots in rounds of FIN_WG / hl slots: lane r of a slot sums the heads
     * r, r + hl, ... (consecutive work-items read consecutive slots of one head), then
     * lane 0 adds the lanes up, classifies the slot and keeps its best candidate. The
     * round count is uniform over the work-group (barriers inside). */
    const float inv_nh = 1.0f / (float)nh;
    const int spr = FIN_WG / hl; /* slots per round */
    const int lane = lid / spr, so = lid % spr;
    const int first = chunk * chunk_slots;
    const int last_slot = min(first + chunk_slots, S);
    float best_key = 0.0f;
    int best_idx = -1;
    for (int base = first; base < last_slot; base += spr) {
        const int i = base + so;
        const int p = i < last_slot ? prow[i] : -1;
        float part = 0.0f;
        if (mode != 2 && p >= 0) {
            __global const float *yrow = ys + ((long)b * Hq + hf) * S + i;
#pragma unroll 4
            for (int t = lane; t < nh; t += hl)
                part += exp2(yrow[(long)t * S] - lse2[t]);
        }
        red[lid] = part;
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lane == 0 && i < last_slot) {
            float score = -INFINITY, key = -1.0f; /* empty: key -1, below every score */
            int idx = i;
            if (p >= 0) {
                float sum = part;
                for (int r = 1; r < hl; r++)
                    sum += red[lid + r * spr];
                score = sum * inv_nh;
                key = score;
                if ((long)p >= prot_from)
                    idx = -1;
            }
            if (has_scores)
                scores[sc_off + (long)b * sc_sb + (long)u * sc_sh + i] = score;
            if (cand_better(key, idx, best_key, best_idx)) {
                best_key = key;
                best_idx = idx;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* red is rewritten next round */
    }
    barrier(CLK_LOCAL_MEM_FENCE); /* red is reused below */
    cand_reduce(red, red_i, best_key, best_idx);
    if (lid == 0) {
        __global int *cr = cand + ((long)bu * n_chunks + chunk) * 2;
        atomic_xchg(cr, as_int(red[0]));
        atomic_xchg(cr + 1, red_i[0]);
        clkv_fence_device();
        *last = atomic_inc(counters + bu) == n_chunks - 1;
    }
    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
    /* The last work-group of this map reduces every chunk's candidate. All work-groups
     * run the (cheap) reduction so that no barrier sits in a branch the compiler cannot
     * prove uniform (PoCL miscompiles that pattern). */
    const int is_last = *last;
    best_key = 0.0f;
    best_idx = -1;
    if (is_last) {
        for (int c = lid; c < n_chunks; c += FIN_WG) {
            __global int *cr = cand + ((long)bu * n_chunks + c) * 2;
            const float kc = as_float(atomic_add(cr, 0));
            const int ic = atomic_add(cr + 1, 0);
            if (cand_better(kc, ic, best_key, best_idx)) {
                best_key = kc;
                best_idx = ic;
            }
        }
    }
    cand_reduce(red, red_i, best_key, best_idx);
    if (is_last && lid == 0) {
        /* No candidate only if the map breaks its invariants: keep the old victim. */
        const int nv = red_i[0] >= 0 ? red_i[0] : vold;
        victim[bu] = nv;
        if (has_vout)
            vout[vo_off + (long)b * vo_sb + (long)u * vo_sh] = nv;
        atomic_xchg(counters + bu, 0);
        if (mode == 0 && u == 0)
            next_pos[b] = next_pos[b] + 1;
    }
}

/* mode: 0 step (newest position = the one just written at the old victim slot;
 * advances next_pos), 1 load with scores from a query, 2 load without (every valid
 * slot scores 0). */
__kernel __attribute__((reqd_work_group_size(FIN_WG, 1, 1))) void
longflow_finish(__global float *ws, long ml_off, long y_off, long cand_off, int num_splits, int Hq,
                int Hkv, int G, int S, int n_merge, int n_chunks, int chunk_slots, int hl,
                __global void *o, int o_dt, long o_off, long o_sb, long o_sh, __global float *lse,
                long lse_off, long lse_sb, long lse_sh, int has_lse, __global const int *pos,
                __global int *victim, __global int *next_pos, __global int *counters, int mode,
                int protect, __global float *scores, long sc_off, long sc_sb, long sc_sh,
                int has_scores, __global int *vout, long vo_off, long vo_sb, long vo_sh,
                int has_vout) {
    __global const float *part_acc = ws;
    __global const float *part_ml = ws + ml_off;
    __global const float *ys = ws + y_off;
    __global int *cand = (__global int *)(ws + cand_off);
    const int lid = (int)get_local_id(0);
    const int gid = (int)get_group_id(0);
    __local float weight[MAX_SPLITS];
    __local float red[FIN_WG];
    __local int red_i[FIN_WG];
    __local float4 lanes[MERGE_LANES][MERGE_Q];
    __local float lse2[UNIT_HEADS_MAX];
    __local int last;

    if (gid < n_merge) {
        const int h = gid % Hq, b = gid / Hq;
        const long base = ((long)b * Hq + h) * num_splits;
        float mx = -INFINITY;
        for (int s = lid; s < num_splits; s += FIN_WG)
            mx = fmax(mx, part_ml[(base + s) * 2]);
        mx = wg_reduce(mx, red, 1);
        float sum = 0.0f;
        for (int s = lid; s < num_splits; s += FIN_WG) {
            const float ms = part_ml[(base + s) * 2];
            const float w = ms == -INFINITY ? 0.0f : exp2(ms - mx);
            weight[s] = w;
            sum += part_ml[(base + s) * 2 + 1] * w;
        }
        sum = wg_reduce(sum, red, 0);
        const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
        const int lane = lid / MERGE_Q, col = lid % MERGE_Q;
        float4 a = (float4)(0.0f);
        for (int s = lane; s < num_splits; s += MERGE_LANES) {
            const float w = weight[s];
            if (w != 0.0f)
                a = fma((float4)(w), vload4(col, part_acc + (base + s) * HEAD_DIM), a);
        }
        lanes[lane][col] = a;
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lane == 0) {
            for (int r = 1; r < MERGE_LANES; r++)
                a += lanes[r][col];
            a *= inv;
            const long orow = o_off + (long)b * o_sb + (long)h * o_sh + col * 4;
            clkv_store_dt(o, o_dt, orow, a.x);
            clkv_store_dt(o, o_dt, orow + 1, a.y);
            clkv_store_dt(o, o_dt, orow + 2, a.z);
            clkv_store_dt(o, o_dt, orow + 3, a.w);
        }
        if (has_lse && lid == 0)
            lse[lse_off + (long)b * lse_sb + (long)h * lse_sh] =
                sum > 0.0f ? (mx + log2(sum)) * CLKV_LN2 : -INFINITY;
    } else {
        score_map(ws, ml_off, y_off, cand_off, num_splits, Hq, Hkv, G, S, n_merge, n_chunks,
                  chunk_slots, hl, pos, victim, next_pos, counters, mode, protect, scores, sc_off,
                  sc_sb, sc_sh, has_scores, vout, vo_off, vo_sb, vo_sh, has_vout, red, weight,
                  red_i, lse2, &last);
    }
}
