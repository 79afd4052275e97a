/* Key-only scorers (SPEC §2.2): KNorm (-||k_j||) and KeyDiff (-cos(k_j, mu)), and the
 * CriticalKV value norm through the output projection, (1/G) sum_h ||v_j W_O^h||_1.
 *
 * -D set: KV_DTYPE, HEAD_DIM (any D >= 1), WG_SIZE, TK (key rows per local tile, <= WG_SIZE),
 * KEYDIFF (0 KNorm / 1 KeyDiff),
 * RAW_MEAN (KeyDiff mu of raw keys), WO_DTYPE, MT (W_O columns per stage).
 * Raw scores go to raw[(b*Hkv + kvh)*row_len + j]; KeyDiff's per-chunk partial sums of
 * mu to part[((b*Hkv + kvh)*nchunks + c)*HEAD_DIM + e].
 */
#define KV_T CLKV_STORAGE(KV_DTYPE)

inline int seq_len(__global const int *lengths, long len_off, int has_len, int max_len, int b) {
    return has_len ? clamp(lengths[len_off + b], 0, max_len) : max_len;
}

/* Tiles of TK key rows are staged in local memory with coalesced loads along D (rows
 * padded by one float so that per-token loops over a row do not collide in banks). */
inline void stage_rows(__local float (*tile)[HEAD_DIM + 1], __global const KV_T *k, long kb,
                       long k_sl, int t0, int cnt, int lid) {
    for (int i = lid; i < cnt * HEAD_DIM; i += WG_SIZE) {
        const int r = i / HEAD_DIM, e = i % HEAD_DIM;
        tile[r][e] = CLKV_LOAD(KV_DTYPE)(k, kb + (long)(t0 + r) * k_sl + e);
    }
}

/* KeyDiff pass 1: per chunk of tokens, sum_i k_i / ||k_i|| (or sum_i k_i). Per tile: one
 * work-item per token computes its inverse norm, then the work-items sweep the dims. */
__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void
score_keydiff_partial(__global const KV_T *k, long k_off, long k_sb, long k_sh, long k_sl,
                      __global const int *lengths, long len_off, int has_len, int max_len, int Hkv,
                      int chunk, int nchunks, __global float *part, long part_off) {
    const int lid = (int)get_local_id(0);
    const int c = (int)get_group_id(0), kvh = (int)get_group_id(1), b = (int)get_group_id(2);
    const int n = seq_len(lengths, len_off, has_len, max_len, b);
    const int start = c * chunk, end = min(start + chunk, n);
    const long kb = k_off + (long)b * k_sb + (long)kvh * k_sh;
    __local float tile[TK][HEAD_DIM + 1];
    __local float inv[TK];
    float accd[(HEAD_DIM + WG_SIZE - 1) / WG_SIZE];
    for (int i = 0; i < (HEAD_DIM + WG_SIZE - 1) / WG_SIZE; i++)
        accd[i] = 0.0f;
    for (int t0 = start; t0 < end; t0 += TK) {
        const int cnt = min(TK, end - t0);
        barrier(CLK_LOCAL_MEM_FENCE);
        stage_rows(tile, k, kb, k_sl, t0, cnt, lid);
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid < cnt) {
#if RAW_MEAN
            inv[lid] = 1.0f;
#else
            float s = 0.0f;
            for (int e = 0; e < HEAD_DIM; e++)
                s = fma(tile[lid][e], tile[lid][e], s);
            inv[lid] = s > 0.0f ? 1.0f / sqrt(s) : 0.0f;
#endif
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int i = 0; i * WG_SIZE + lid < HEAD_DIM; i++) {
            const int e = i * WG_SIZE + lid;
            float s = accd[i];
            for (int u = 0; u < cnt; u++)
                s = fma(tile[u][e], inv[u], s);
            accd[i] = s;
        }
    }
    __global float *out = part + part_off + (((long)b * Hkv + kvh) * nchunks + c) * HEAD_DIM;
    for (int i = 0; i * WG_SIZE + lid < HEAD_DIM; i++)
        out[i * WG_SIZE + lid] = accd[i];
}

/* Pass 2 (and KNorm): a work-group per tile of TK tokens, one work-item per token. */
__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void
score_key(__global const KV_T *k, long k_off, long k_sb, long k_sh, long k_sl,
          __global const int *lengths, long len_off, int has_len, int max_len, int Hkv, int nchunks,
          __global float *ws, long part_off, long raw_off, long row_len) {
    const int lid = (int)get_local_id(0);
    const int kvh = (int)get_group_id(1), b = (int)get_group_id(2);
    const int tile0 = (int)get_group_id(0) * TK;
    const int n = seq_len(lengths, len_off, has_len, max_len, b);
    if (tile0 >= n)
        return; /* uniform */
    const long kb = k_off + (long)b * k_sb + (long)kvh * k_sh;
    __local float tile[TK][HEAD_DIM + 1];
#if KEYDIFF
    __local float mu[HEAD_DIM];
    __local float red[WG_SIZE];
    const __global float *pp = ws + part_off + ((long)b * Hkv + kvh) * nchunks * HEAD_DIM;
    float sq = 0.0f;
    for (int e = lid; e < HEAD_DIM; e += WG_SIZE) {
        float s = 0.0f;
        for (int c = 0; c < nchunks; c++)
            s += pp[(long)c * HEAD_DIM + e];
        s /= (float)n;
        mu[e] = s;
        sq = fma(s, s, sq);
    }
    red[lid] = sq;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int span = WG_SIZE / 2; span > 0; span >>= 1) {
        if (lid < span)
            red[lid] += red[lid + span];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float mu_norm = sqrt(red[0]);
#endif
    const int cnt = min(TK, n - tile0);
    stage_rows(tile, k, kb, k_sl, tile0, cnt, lid);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid >= cnt)
        return;
    float kk = 0.0f, km = 0.0f;
    for (int e = 0; e < HEAD_DIM; e++) {
        const float x = tile[lid][e];
        kk = fma(x, x, kk);
#if KEYDIFF
        km = fma(x, mu[e], km);
#endif
    }
    float s;
#if KEYDIFF
    const float den = sqrt(kk) * mu_norm;
    s = den > 0.0f ? -(km / den) : 0.0f;
#else
    (void)km;
    s = -sqrt(kk);
#endif
    ws[raw_off + ((long)b * Hkv + kvh) * row_len + tile0 + lid] = s;
}

/* CriticalKV value norm through W_O: vnorm[j] = (1/G) sum_{h in group} sum_m
 * |sum_d v_j[d] W_O[h, d, m]|. A work-group stages TK value rows (coalesced) and W_O
 * MT columns at a time in local memory; one work-item per token. */
__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void
score_vo_norm(__global const KV_T *v, long v_off, long v_sb, long v_sh, long v_sl,
              __global const CLKV_STORAGE(WO_DTYPE) * wo, long wo_off, long wo_sh, long wo_sd,
              int Dm, __global const int *lengths, long len_off, int has_len, int max_len, int Hkv,
              int G, __global float *ws, long vnorm_off, long row_len) {
    const int lid = (int)get_local_id(0);
    const int kvh = (int)get_group_id(1), b = (int)get_group_id(2);
    const int tile0 = (int)get_group_id(0) * TK;
    const int n = seq_len(lengths, len_off, has_len, max_len, b);
    if (tile0 >= n)
        return; /* uniform */
    __local float tile[TK][HEAD_DIM + 1];
    __local float wt[HEAD_DIM][MT];
    const int cnt = min(TK, n - tile0);
    stage_rows(tile, v, v_off + (long)b * v_sb + (long)kvh * v_sh, v_sl, tile0, cnt, lid);
    const int row = min(lid, TK - 1);
    float total = 0.0f;
    for (int g = 0; g < G; g++) {
        const long hb = wo_off + (long)(kvh * G + g) * wo_sh;
        for (int m0 = 0; m0 < Dm; m0 += MT) {
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int i = lid; i < HEAD_DIM * MT; i += WG_SIZE) {
                const int d = i / MT, m = i % MT;
                wt[d][m] =
                    m0 + m < Dm ? CLKV_LOAD(WO_DTYPE)(wo, hb + (long)d * wo_sd + m0 + m) : 0.0f;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int m = 0; m < MT; m++) {
                float s = 0.0f;
                for (int d = 0; d < HEAD_DIM; d++)
                    s = fma(tile[row][d], wt[d][m], s);
                total += fabs(s);
            }
        }
    }
    if (lid < cnt)
        ws[vnorm_off + ((long)b * Hkv + kvh) * row_len + tile0 + lid] = total / (float)G;
}
