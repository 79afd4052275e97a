/* LongFlow fused decode step over a static cache (SPEC §2.3), kernel 1 of 2 (the second
 * is cl_kernels/longflow_finish.cl). Its tensor-core variant for NVIDIA with 16-bit caches
 * (same workspace contract) is longflow_partial_mma in attention_window_mma.cl.
 *
 * longflow_partial: one work-group per (sequence, KV head, head group, split) of the S
 * slots. The work-group whose range holds the victim slot first stores the new token
 * there; then one read of every K/V row of the range serves all GROUP query heads:
 * split-K softmax partials (m, l, acc) as flash-decoding, plus per (query head, slot) the
 * base-2 score logit  y = z*log2(e) + log2 ||v||_1  (-inf for an empty slot), which the
 * finish kernel turns into the slot's score with the final LSE.
 *
 * Build options (host/longflow_step.c):
 *   KV_DTYPE                               dtype code of the cache (q and k_new/v_new
 *                                          dtypes are kernel arguments: q is read once
 *                                          per work-group, the new token once per step)
 *   HEAD_DIM, GROUP, EPL, WG_SIZE, UNROLL  as in attention_decode.cl (TPR = D / EPL lanes
 *                                          per row; NRG = WG_SIZE / TPR rows in flight)
 *   PER_HEAD                               1: one slot map / victim per KV head
 *   CP_ASYNC, STAGES                       1: K/V tiles staged in local memory, STAGES in
 *                                          flight (cp.async on NVIDIA)
 * The cache itself is contiguous [B, Hkv, S, D], so rows are always 16-byte aligned.
 * Logits are base 2 (q is pre-scaled by scale * log2 e). */

#define KV_T CLKV_STORAGE(KV_DTYPE)

/* TPR, NRG, RED_ROWS, VW, NCH, ELEM, UNROLL_LOOP and rows_merge_store */
#include "decode_rows.cl"

/* Sum over the TPR lanes of a row-group; every lane of the work-group must call it. On
 * NVIDIA a warp butterfly; elsewhere (tests of the multi-lane layout on CPUs) through
 * local memory. Every lane receives the same value. */
inline float row_sum(float x, __local float *scratch) {
#if TPR > 1
#ifdef CLKV_NVIDIA_PTX
    UNROLL_LOOP
    for (int o = TPR / 2; o > 0; o >>= 1)
        x += clkv_shfl_xor(x, o);
#else
    const int lid = (int)get_local_id(0);
    barrier(CLK_LOCAL_MEM_FENCE);
    scratch[lid] = x;
    barrier(CLK_LOCAL_MEM_FENCE);
    const int first = lid / TPR * TPR;
    x = 0.0f;
    for (int i = 0; i < TPR; i++)
        x += scratch[first + i];
#endif
#endif
    return x;
}

/* A value rounded to the cache dtype, as the cache stores it. */
inline float round_kv(float x) {
#if KV_DTYPE == CLKV_DT_BF16
    return clkv_bf16_to_f32(clkv_f32_to_bf16(x));
#elif KV_DTYPE == CLKV_DT_F16
    ushort h;
    vstore_half_rte(x, 0, (__private half *)&h);
    return vload_half(0, (const __private half *)&h);
#else
    return x;
#endif
}

/* A lane's part of a cache row is kept as loaded (RAW_T x NCH: 16-byte raw vectors with
 * several lanes per row, as attention_decode.cl; f32 elements with one lane per row) and
 * widened element by element at use, which halves the registers of 16-bit rows. */
#if TPR > 1
#define RAW_T uint4
#define RAW_GET(r, e) CLKV_RAW_ELEM(KV_DTYPE)((r)[(e) / VW], (e) % VW)
#else
#define RAW_T float
#define RAW_GET(r, e) ((r)[e])
#endif

/* The lane's part of cache row `row` (element offset). */
inline void load_raw_row(__global const KV_T *p, long row, int ln, RAW_T *r) {
#if TPR > 1
    UNROLL_LOOP
    for (int c = 0; c < NCH; c++)
        r[c] = clkv_load_raw_aligned(p, (row + ELEM(c, 0, ln)) * (long)sizeof(KV_T));
#else
    for (int e = 0; e < EPL; e++)
        r[e] = CLKV_LOAD(KV_DTYPE)(p, row + e);
#endif
}

#if TPR > 1 && KV_DTYPE != CLKV_DT_F32
/* The cache dtype's bits of x (RNE). */
inline uint kv_bits(float x) {
#if KV_DTYPE == CLKV_DT_BF16
    return (uint)clkv_f32_to_bf16(x);
#else
    ushort h;
    vstore_half_rte(x, 0, (__private half *)&h);
    return (uint)h;
#endif
}
#endif

#if TPR > 1
/* The lane's part of the new token's row (dtype `dt`), rounded to the cache dtype and
 * packed as the cache stores it. */
inline void new_raw_row(__global const void *p, int dt, long row, int ln, RAW_T *r) {
    UNROLL_LOOP
    for (int c = 0; c < NCH; c++) {
        uint w[4];
        UNROLL_LOOP
        for (int i = 0; i < 4; i++) {
#if KV_DTYPE == CLKV_DT_F32
            w[i] = as_uint(clkv_load_dt(p, dt, row + ELEM(c, i, ln)));
#else
            w[i] = kv_bits(clkv_load_dt(p, dt, row + ELEM(c, 2 * i, ln))) |
                   (kv_bits(clkv_load_dt(p, dt, row + ELEM(c, 2 * i + 1, ln))) << 16);
#endif
        }
        r[c] = (uint4)(w[0], w[1], w[2], w[3]);
    }
}
#endif

#if CP_ASYNC
/* K/V tiles of TILE rows streamed into local memory, STAGES tiles in flight (the scheme
 * of attention_decode.cl): on NVIDIA with cp.async, so the bytes in flight do not depend
 * on registers; elsewhere (tests of this layout on CPUs) with plain copies. */
#if TPR == 1
#error "CP_ASYNC needs several lanes per row (TPR > 1)"
#endif
#define TILE (NRG * UNROLL)
#define KV_BYTES (KV_DTYPE == CLKV_DT_F32 ? 4 : 2)
#define ROW_U4 (HEAD_DIM * KV_BYTES / 16) /* 16-byte chunks per row */

/* Copy tile rows [first, first + TILE) of K and V, and their slot positions, into one
 * stage; rows at or past `end` copy row `start` (valid memory, masked later). Staging
 * the positions keeps the loop free of dependent global loads. */
inline void lf_issue_tile(__local uint4 *sk, __local uint4 *sv, __local int *sp,
                          __global const KV_T *k, __global const KV_T *v, __global const int *prow,
                          long kb, int first, int start, int end, int lid) {
    for (int i = lid; i < TILE * ROW_U4; i += WG_SIZE) {
        const int r = i / ROW_U4, c = i % ROW_U4;
        const int j = first + r < end ? first + r : start;
        clkv_cp_async16(sk + i, (__global const uchar *)(k + kb + (long)j * HEAD_DIM) + c * 16);
        clkv_cp_async16(sv + i, (__global const uchar *)(v + kb + (long)j * HEAD_DIM) + c * 16);
    }
    for (int r = lid; r < TILE; r += WG_SIZE)
        clkv_cp_async4(sp + r, prow + (first + r < end ? first + r : start));
}

#endif

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void longflow_partial(
    __global const void *q, int q_dt, long q_off, long q_sb, long q_sh, __global const void *kn,
    int n_dt, long kn_off, long kn_sb, long kn_sh, __global const void *vn, long vn_off, long vn_sb,
    long vn_sh, __global KV_T *k, __global KV_T *v, __global int *pos, __global const int *victim,
    __global const int *next_pos, int do_write, int Hq, int Hkv, int G, int nhg, int S, int chunk,
    int num_splits, float scale_log2, __global float *ws, long ml_off, long y_off) {
    __global float *part_acc = ws;
    __global float *part_ml = ws + ml_off;
    __global float *ys = ws + y_off;
    __local float scratch[WG_SIZE];
    const int lid = (int)get_local_id(0);
    const int split = (int)get_group_id(0);
    const int kvh = (int)get_group_id(1) / nhg;
    const int hg = (int)get_group_id(1) % nhg;
    const int b = (int)get_group_id(2);
    const int rg = lid / TPR;
    const int ln = lid % TPR;
    const int Hm = PER_HEAD ? Hkv : 1;
    const int u = PER_HEAD ? kvh : 0;
    const int vslot = do_write ? victim[b * Hm + u] : -1;
    const int start = split * chunk;
    const int end = min(start + chunk, S);
    const int h0 = kvh * G + hg * GROUP;
    const int ng = min(GROUP, G - hg * GROUP);
    /* score logits of head h0 + ln (+ TPR, ...): [b, h, slot] rows */
    __global float *ylane = ys + ((long)b * Hq + h0 + ln) * S;
    const long kb = ((long)b * Hkv + kvh) * S * HEAD_DIM; /* same for v */
    __global int *prow = pos + ((long)b * Hm + u) * S;
    const long knrow = kn_off + (long)b * kn_sb + (long)kvh * kn_sh;
    const long vnrow = vn_off + (long)b * vn_sb + (long)kvh * vn_sh;

    /* (a) The work-group(s) of head group 0 whose range holds the victim slot store the
     * new token; every work-group reads the victim row from k_new/v_new instead of the
     * cache, so no ordering between work-groups is needed. */
    if (vslot >= start && vslot < end && hg == 0) {
        for (int e = lid; e < HEAD_DIM; e += WG_SIZE) {
            CLKV_STORE(KV_DTYPE)
            (k, kb + (long)vslot * HEAD_DIM + e, clkv_load_dt(kn, n_dt, knrow + e));
            CLKV_STORE(KV_DTYPE)
            (v, kb + (long)vslot * HEAD_DIM + e, clkv_load_dt(vn, n_dt, vnrow + e));
        }
#if PER_HEAD
        const int map_writer = lid == 0;
#else
        const int map_writer = lid == 0 && kvh == 0; /* one writer per slot map */
#endif
        if (map_writer)
            prow[vslot] = next_pos[b];
    }
    /* The victim row as the cache stores it, in local memory in the lanes' raw layout,
     * for the work-groups whose range holds it: the loop then replaces that row from
     * here, with no k_new/v_new addressing live in it. */
    __local RAW_T new_k[NCH * TPR], new_v[NCH * TPR];
    if (vslot >= start && vslot < end) {
#if TPR > 1
        if (rg == 0) {
            RAW_T r[NCH];
            new_raw_row(kn, n_dt, knrow, ln, r);
            UNROLL_LOOP
            for (int c = 0; c < NCH; c++)
                new_k[c * TPR + ln] = r[c];
            new_raw_row(vn, n_dt, vnrow, ln, r);
            UNROLL_LOOP
            for (int c = 0; c < NCH; c++)
                new_v[c * TPR + ln] = r[c];
        }
#else
        for (int e = lid; e < HEAD_DIM; e += WG_SIZE) {
            new_k[e] = round_kv(clkv_load_dt(kn, n_dt, knrow + e));
            new_v[e] = round_kv(clkv_load_dt(vn, n_dt, vnrow + e));
        }
#endif
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    float qr[GROUP][EPL], m[GROUP], l[GROUP], acc[GROUP][EPL];
    rows_start(qr, m, l, acc, q, q_dt, q_off + (long)b * q_sb, q_sh, h0, ng, ln, scale_log2);

#if CP_ASYNC
    __local uint4 stage_k[STAGES][TILE * ROW_U4];
    __local uint4 stage_v[STAGES][TILE * ROW_U4];
    __local int stage_p[STAGES][TILE];
    const int ntiles = end > start ? (end - start + TILE - 1) / TILE : 0;
    for (int t = 0; t < STAGES - 1; t++) {
        if (t < ntiles)
            lf_issue_tile(stage_k[t], stage_v[t], stage_p[t], k, v, prow, kb, start + t * TILE,
                          start, end, lid);
        clkv_cp_async_commit(); /* empty groups keep the group count uniform */
    }
    for (int t = 0; t < ntiles; t++) {
        const int ahead = t + STAGES - 1;
        if (ahead < ntiles)
            lf_issue_tile(stage_k[ahead % STAGES], stage_v[ahead % STAGES], stage_p[ahead % STAGES],
                          k, v, prow, kb, start + ahead * TILE, start, end, lid);
        clkv_cp_async_commit();
        CLKV_CP_ASYNC_WAIT(STAGES - 1); /* tile t has landed (for this work-item's copies) */
        barrier(CLK_LOCAL_MEM_FENCE);
        const int base = start + t * TILE;
        __local const uint4 *tk = stage_k[t % STAGES];
        __local const uint4 *tv = stage_v[t % STAGES];
        __local const int *tp = stage_p[t % STAGES];
#else
    for (int base = start; base < end; base += NRG * UNROLL) {
#endif
        float s[UNROLL][GROUP];
        RAW_T kr[UNROLL][NCH], vr[UNROLL][NCH];
        int valid[UNROLL], in[UNROLL];
        /* All rows' loads first, branch-free (the victim row too: its cache copy may be
         * being overwritten and is replaced below), so they are all in flight at once. */
        UNROLL_LOOP
        for (int uu = 0; uu < UNROLL; uu++) {
            const int j = base + uu * NRG + rg;
            in[uu] = j < end;
#if CP_ASYNC
            UNROLL_LOOP
            for (int c = 0; c < NCH; c++) {
                kr[uu][c] = tk[(uu * NRG + rg) * ROW_U4 + c * TPR + ln];
                vr[uu][c] = tv[(uu * NRG + rg) * ROW_U4 + c * TPR + ln];
            }
            const int pj = tp[uu * NRG + rg];
#else
            const int jj = in[uu] ? j : start; /* keep loads in bounds and uniform */
            load_raw_row(k, kb + (long)jj * HEAD_DIM, ln, kr[uu]);
            load_raw_row(v, kb + (long)jj * HEAD_DIM, ln, vr[uu]);
            const int pj = prow[jj];
#endif
            valid[uu] = in[uu] && (j == vslot || pj >= 0);
        }
        UNROLL_LOOP
        for (int uu = 0; uu < UNROLL; uu++) {
            const int j = base + uu * NRG + rg;
            if (j == vslot) { /* the new token, as the cache stores it */
                UNROLL_LOOP
                for (int c = 0; c < NCH; c++) {
                    kr[uu][c] = new_k[c * TPR + ln];
                    vr[uu][c] = new_v[c * TPR + ln];
                }
            }
            /* an empty slot's V (whatever it holds, even NaN) must not reach acc */
            UNROLL_LOOP
            for (int c = 0; c < NCH; c++)
                vr[uu][c] = valid[uu] ? vr[uu][c] : (RAW_T)(0);
            UNROLL_LOOP
            for (int g = 0; g < GROUP; g++) {
                float d = 0.0f;
                UNROLL_LOOP
                for (int e = 0; e < EPL; e++)
                    d = fma(qr[g][e], RAW_GET(kr[uu], e), d);
                d = row_sum(d, scratch);
                s[uu][g] = valid[uu] ? d : -INFINITY;
            }
        }
        rows_rescale(s, m, l, acc);
        UNROLL_LOOP
        for (int uu = 0; uu < UNROLL; uu++) {
            float p[GROUP];
            rows_probs(s[uu], valid[uu], m, l, p);
            /* ||v||_1 from the V elements widened for the accumulation anyway */
            float nv = 0.0f;
            UNROLL_LOOP
            for (int e = 0; e < EPL; e++) {
                const float vx = RAW_GET(vr[uu], e);
                nv += fabs(vx);
                UNROLL_LOOP
                for (int g = 0; g < GROUP; g++)
                    acc[g][e] = fma(p[g], vx, acc[g][e]);
            }
            nv = row_sum(nv, scratch);
            const float lv = log2(nv);
            /* Score logits y = z + log2 ||v||_1: lane ln of the row stores heads ln,
             * ln + TPR, ... (every lane holds every head's dot product after row_sum), so a
             * row-group issues one store per TPR heads instead of one per head. */
            const int j = base + uu * NRG + rg;
            UNROLL_LOOP
            for (int g0 = 0; g0 < GROUP; g0 += TPR) {
                float yv = -INFINITY;
                UNROLL_LOOP
                for (int g = g0; g < GROUP && g < g0 + TPR; g++)
                    yv = g - g0 == ln ? s[uu][g] + lv : yv;
                const int g = g0 + ln;
                if (in[uu] && g < ng)
                    ylane[(long)g0 * S + j] = valid[uu] ? yv : -INFINITY;
            }
        }
#if CP_ASYNC
        barrier(CLK_LOCAL_MEM_FENCE); /* the stage is refilled next iteration */
#endif
    }

    /* Merge the NRG row-group states and store the split's partial. */
    __local float red_ml[NRG * GROUP * 2];
#if CP_ASYNC && RED_ROWS * GROUP * HEAD_DIM * 4 <= STAGES * TILE * ROW_U4 * 16
    /* The K tiles are done with (every copy issued has landed, the last iteration ended
     * with a barrier): their memory holds the reduction, so a work-group needs less local
     * memory and more of them fit on a multiprocessor. */
    __local float *red_acc = (__local float *)stage_k;
#else
    __local float red_acc[RED_ROWS * GROUP * HEAD_DIM];
#endif
    rows_merge_store(acc, m, l, rg, ln, red_ml, red_acc, ng, part_acc, part_ml,
                     ((long)b * Hq + h0) * num_splits + split, num_splits);
}
