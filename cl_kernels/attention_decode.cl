/* Decode attention (SPEC §1.1), flash-decoding: split-K partials, merged by
 * attention_decode_merge (attention_merge.cl).
 *
 * Build options (set by host/attention_decode.c):
 *   Q_DTYPE, KV_DTYPE           dtype codes of q, K/V
 *   HEAD_DIM                    D (64, 128, 256)
 *   GROUP                       query heads served per work-group (<= G, <= 8)
 *   EPL                         head-dim elements held per lane; TPR = D / EPL lanes
 *                               cooperate on one K/V row (TPR > 1 needs warp shuffles)
 *   WG_SIZE                     work-group size; NRG = WG_SIZE / TPR rows in flight
 *   UNROLL                      rows per row-group per loop iteration
 *   VEC_ALIGNED                 1: K/V rows are 16-byte aligned (vector loads)
 *   CP_ASYNC, STAGES            NVIDIA only: stream K/V tiles of NRG * UNROLL rows into
 *                               shared memory with cp.async, STAGES tiles in flight, so
 *                               the bytes in flight do not depend on register pressure
 *
 * Lengths: element b * len_sb + kvh * len_sh of `lengths` (len_sh = 0 for per-sequence
 * [B] lengths, the stride of the head dim for per-(sequence, KV head) [B, Hkv] lengths),
 * read once per work-group.
 *
 * A work-group handles one (sequence, KV head, head group, split): it reads each K/V row
 * of its token range once and uses it for all GROUP query heads (the GQA saving). Each
 * row-group of TPR lanes keeps its own online-softmax state, so the main loop needs no
 * barrier; the row-groups are merged once at the end through local memory. Logits are
 * kept in base 2 (q is pre-scaled by scale * log2 e). */

#define KV_T CLKV_STORAGE(KV_DTYPE)
#define Q_T CLKV_STORAGE(Q_DTYPE)

/* TPR, NRG, RED_ROWS, VW, NCH, ELEM, UNROLL_LOOP and rows_merge_store */
#include "decode_rows.cl"

#if TPR > 1 && !defined(CLKV_NVIDIA_PTX)
#error "TPR > 1 (several lanes per K/V row) needs the NVIDIA warp-shuffle path"
#endif

inline float row_sum(float x) {
#if TPR > 1
    UNROLL_LOOP
    for (int o = TPR / 2; o > 0; o >>= 1)
        x += clkv_shfl_xor(x, o);
#endif
    return x;
}

#if TPR > 1
inline uint4 load_chunk(__global const KV_T *p, long row, int c, int ln) {
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

#if CP_ASYNC
#if !defined(CLKV_NVIDIA_PTX) || !VEC_ALIGNED || TPR == 1
#error "CP_ASYNC needs the NVIDIA PTX path with 16-byte aligned rows"
#endif
#define TILE (NRG * UNROLL)
#define ROW_U4 (HEAD_DIM * (int)sizeof(KV_T) / 16) /* 16-byte chunks per row */

/* Issue the copies of tile rows [first, first + TILE) of K and V into one stage; rows at
 * or past `end` copy row `start` instead (valid memory, masked later). */
inline void issue_tile(__local uint4 *sk, __local uint4 *sv, __global const KV_T *k,
                       __global const KV_T *v, long kb, long vb, long k_sl, long v_sl, int first,
                       int start, int end, int lid) {
    for (int i = lid; i < TILE * ROW_U4; i += WG_SIZE) {
        const int r = i / ROW_U4, c = i % ROW_U4;
        const int j = first + r < end ? first + r : start;
        clkv_cp_async16(sk + i, (__global const uchar *)(k + kb + (long)j * k_sl) + c * 16);
        clkv_cp_async16(sv + i, (__global const uchar *)(v + vb + (long)j * v_sl) + c * 16);
    }
}
#endif

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void
attention_decode_partial(__global const Q_T *q, long q_off, long q_sb, long q_sh,
                         __global const KV_T *k, long k_off, long k_sb, long k_sh, long k_sl,
                         __global const KV_T *v, long v_off, long v_sb, long v_sh, long v_sl,
                         __global const int *lengths, long len_off, long len_sb, long len_sh,
                         int has_lengths, int max_len, int Hq, int G, int nhg, int chunk,
                         int num_splits, float scale_log2, __global float *part_acc, long ml_off) {
    __global float *part_ml = part_acc + ml_off;
    const int lid = (int)get_local_id(0);
    const int split = (int)get_group_id(0);
    const int kvh = (int)get_group_id(1) / nhg;
    const int hg = (int)get_group_id(1) % nhg;
    const int b = (int)get_group_id(2);
    const int rg = lid / TPR;
    const int ln = lid % TPR;

    int len = max_len;
    if (has_lengths)
        len = clamp(lengths[len_off + b * len_sb + kvh * len_sh], 0, max_len);
    const int start = split * chunk;
    const int end = min(start + chunk, len);
    const int h0 = kvh * G + hg * GROUP;
    const int ng = min(GROUP, G - hg * GROUP);

    float qr[GROUP][EPL], m[GROUP], l[GROUP], acc[GROUP][EPL];
    rows_start(qr, m, l, acc, q, Q_DTYPE, q_off + (long)b * q_sb, q_sh, h0, ng, ln, scale_log2);

    const long kb = k_off + (long)b * k_sb + (long)kvh * k_sh;
    const long vb = v_off + (long)b * v_sb + (long)kvh * v_sh;
#if CP_ASYNC
    __local uint4 stage_k[STAGES][TILE * ROW_U4];
    __local uint4 stage_v[STAGES][TILE * ROW_U4];
    const int ntiles = end > start ? (end - start + TILE - 1) / TILE : 0;
    for (int t = 0; t < STAGES - 1; t++) {
        if (t < ntiles)
            issue_tile(stage_k[t], stage_v[t], k, v, kb, vb, k_sl, v_sl, start + t * TILE, start,
                       end, lid);
        clkv_cp_async_commit(); /* empty groups keep the group count uniform */
    }
    for (int t = 0; t < ntiles; t++) {
        const int ahead = t + STAGES - 1;
        if (ahead < ntiles)
            issue_tile(stage_k[ahead % STAGES], stage_v[ahead % STAGES], k, v, kb, vb, k_sl, v_sl,
                       start + ahead * TILE, start, end, lid);
        clkv_cp_async_commit();
        CLKV_CP_ASYNC_WAIT(STAGES - 1); /* tile t has landed (for this thread's copies) */
        barrier(CLK_LOCAL_MEM_FENCE);
        const int base = start + t * TILE;
        __local const uint4 *tk = stage_k[t % STAGES];
        __local const uint4 *tv = stage_v[t % STAGES];
#else
    for (int base = start; base < end; base += NRG * UNROLL) {
#endif
        float s[UNROLL][GROUP];
        int valid[UNROLL];
#if TPR > 1
        uint4 kr[UNROLL][NCH], vr[UNROLL][NCH];
        UNROLL_LOOP
        for (int u = 0; u < UNROLL; u++) {
            const int j = base + u * NRG + rg;
            valid[u] = j < end;
#if CP_ASYNC
            UNROLL_LOOP
            for (int c = 0; c < NCH; c++) {
                kr[u][c] = tk[(u * NRG + rg) * ROW_U4 + c * TPR + ln];
                vr[u][c] = tv[(u * NRG + rg) * ROW_U4 + c * TPR + ln];
            }
#else
            const int jj = valid[u] ? j : start; /* keep loads in bounds and uniform */
            UNROLL_LOOP
            for (int c = 0; c < NCH; c++) {
                kr[u][c] = load_chunk(k, kb + (long)jj * k_sl, c, ln);
                vr[u][c] = load_chunk(v, vb + (long)jj * v_sl, c, ln);
            }
#endif
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
                d = row_sum(d);
                s[u][g] = valid[u] ? d : -INFINITY;
            }
        }
#else
        UNROLL_LOOP
        for (int u = 0; u < UNROLL; u++) {
            const int j = base + u * NRG + rg;
            valid[u] = j < end;
            const long row = kb + (long)(valid[u] ? j : start) * k_sl;
            float d[GROUP];
            rows_dot_lane(qr, k, row, d);
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
            rows_acc_lane(acc, p, v, vb + (long)(valid[u] ? base + u * NRG + rg : start) * v_sl);
#endif
        }
#if CP_ASYNC
        barrier(CLK_LOCAL_MEM_FENCE); /* the stage is refilled next iteration */
#endif
    }

    /* Merge the NRG row-group states and store the split's partial. */
    __local float red_ml[NRG * GROUP * 2];
    __local float red_acc[RED_ROWS * GROUP * HEAD_DIM];
    rows_merge_store(acc, m, l, rg, ln, red_ml, red_acc, ng, part_acc, part_ml,
                     ((long)b * Hq + h0) * num_splits + split, num_splits);
}
