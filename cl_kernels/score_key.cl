/* Key-only scorers (SPEC §2.2): KNorm (-||k_j||) and KeyDiff (-cos(k_j, mu)), and the
 * CriticalKV value norm through the output projection, (1/G) sum_h ||v_j W_O^h||_1.
 *
 * -D set: KV_DTYPE, HEAD_DIM (any D >= 1), WG_SIZE; for KNorm / KeyDiff (score_key,
 * score_keydiff_partial) LPR (work-items per row), RU (rows per work-item and round), ROUNDS
 * (rounds per work-group of score_key), VEC (1: rows 16-byte aligned, HEAD_DIM a multiple of
 * the 16-byte chunk), KEYDIFF (0 KNorm / 1 KeyDiff), RAW_MEAN (KeyDiff mu of raw keys); for
 * the W_O norm (score_vo_norm) TK (key rows per local tile, <= WG_SIZE), WO_DTYPE, MT (W_O
 * columns per stage).
 * Raw scores go to raw[(b*Hkv + kvh)*row_len + j]; KeyDiff's per-chunk partial sums of
 * mu to part[((b*Hkv + kvh)*nchunks + c)*HEAD_DIM + e].
 */
#define KV_T CLKV_STORAGE(KV_DTYPE)

inline int seq_len(__global const int *lengths, long len_off, int has_len, int max_len, int b) {
    return has_len ? clamp(lengths[len_off + b], 0, max_len) : max_len;
}

#ifdef LPR
/* KNorm / KeyDiff: a work-group of WG_SIZE work-items reads RP rows at a time, LPR
 * work-items per row (host: a power of two >= the row's CPR 16-byte chunks, at most
 * WG_SIZE), work-item `lane` of a row its chunks lane, lane + LPR, ...: consecutive
 * work-items read consecutive 16 bytes of a row (coalesced; 16-byte loads where VEC), and
 * each holds RU rows of a round in flight. The per-row partial sums meet in local memory
 * (ps: one per work-item and row of the round). The earlier form staged 64 rows per
 * work-group of 64 with 2-byte loads and then summed each row in one work-item: on an H200
 * (bf16, Hkv 8, D 128, 128K keys, `clkv bench score`, with the pooling kernel) KNorm took
 * 350.7 us and KeyDiff 934.7 us against read floors of 58 / 116 us (2026-11-28). Not kept:
 * the row sums by butterfly shuffles over the row's lanes (NVIDIA; no barriers in the
 * rounds, every load of a round issued first), same machine and command, two alternations:
 * KNorm 80.5-81.0 -> 82.6-83.4 us, KeyDiff 222.0-222.6 -> 283.0-283.5 us. Nor score_key's
 * next round of rows requested (raw 16-byte chunks) before the round's sums meet: same
 * machine and command after the KeyDiff pass-1 change below, two alternations, KNorm 16K
 * 16.0-18.1 -> 19.5-20.0 us, 128K 80.0-81.0 -> 80.6-81.4, KeyDiff 128K 163.3-164.5 ->
 * 176.3, B 4 NHD 709.2-712.8 -> 704.1-704.7. */
#define EPC CLKV_VEC16(KV_DTYPE)         /* elements per 16-byte chunk */
#define CPR ((HEAD_DIM + EPC - 1) / EPC) /* chunks per row */
#define NCL ((CPR + LPR - 1) / LPR)      /* chunks per work-item and row */
#define RP (WG_SIZE / LPR)               /* rows per work-group pass */
#define ROWS (RP * RU)                   /* rows per round */
#define UNROLL _Pragma("unroll")
#if LPR > WG_SIZE || WG_SIZE % LPR != 0
#error "score_key: LPR must divide WG_SIZE"
#endif

/* Elements of chunk c of the row starting at element `row` (0 past HEAD_DIM). */
inline void key_chunk(__global const KV_T *k, long row, int c, float *x) {
#if VEC
    const uint4 r = clkv_load_stream16(k, (row + (long)c * EPC) * (long)sizeof(KV_T));
    UNROLL
    for (int j = 0; j < EPC; j++)
        x[j] = CLKV_RAW_ELEM(KV_DTYPE)(r, j);
#else
    UNROLL
    for (int j = 0; j < EPC; j++) {
        const int e = c * EPC + j;
        x[j] = e < HEAD_DIM ? CLKV_LOAD(KV_DTYPE)(k, row + e) : 0.0f;
    }
#endif
}

/* Row t's chunks of this work-item into x (zeros past the row or past `end`). */
inline void key_row(__global const KV_T *k, long kb, long k_sl, int t, int end, int lane,
                    float (*x)[EPC]) {
    UNROLL
    for (int i = 0; i < NCL; i++) {
        const int ch = lane + i * LPR;
        if (t < end && ch < CPR) {
            key_chunk(k, kb + (long)t * k_sl, ch, x[i]);
        } else {
            UNROLL
            for (int j = 0; j < EPC; j++)
                x[i][j] = 0.0f;
        }
    }
}

/* Sum of the LPR partials of row r of a round (ps[r * LPR + lane]). */
inline float row_sum(__local const float *ps, int r) {
    float s = 0.0f;
    for (int i = 0; i < LPR; i++)
        s += ps[r * LPR + (i + r) % LPR]; /* rotated start: rows of a warp in distinct banks */
    return s;
}

/* KeyDiff pass 1: per chunk of tokens, sum_i k_i / ||k_i|| (or sum_i k_i with RAW_MEAN)
 * into part[b, kvh, chunk, :]. Per round each work-item loads its RU rows' chunks, their
 * squared norms meet in ps, and it adds its elements times the rows' inverse norms; the RP
 * row groups' sums meet in local memory at the end. */
__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void
score_keydiff_partial(__global const KV_T *k, long k_off, long k_sb, long k_sh, long k_sl,
                      __global const int *lengths, long len_off, int has_len, int max_len, int Hkv,
                      int chunk, int nchunks, __global float *part, long part_off) {
    const int lid = (int)get_local_id(0), lane = lid % LPR, rr = lid / LPR;
    const int c = (int)get_group_id(0), kvh = (int)get_group_id(1), b = (int)get_group_id(2);
    const int n = seq_len(lengths, len_off, has_len, max_len, b);
    const int start = c * chunk, end = min(start + chunk, n);
    const long kb = k_off + (long)b * k_sb + (long)kvh * k_sh;
#if !RAW_MEAN
    __local float ps[ROWS * LPR];
    __local float rinv[ROWS]; /* 1 / ||k|| of each row of the round */
#endif
    __local float red[RP * NCL * LPR * EPC];
    float acc[NCL][EPC];
    UNROLL
    for (int i = 0; i < NCL; i++)
        UNROLL
    for (int j = 0; j < EPC; j++)
        acc[i][j] = 0.0f;
    for (int t0 = start; t0 < end; t0 += ROWS) {
        float x[RU][NCL][EPC];
        UNROLL
        for (int u = 0; u < RU; u++)
            key_row(k, kb, k_sl, t0 + u * RP + rr, end, lane, x[u]);
#if RAW_MEAN
        UNROLL
        for (int u = 0; u < RU; u++)
            UNROLL
        for (int i = 0; i < NCL; i++)
            UNROLL
        for (int j = 0; j < EPC; j++)
            acc[i][j] += x[u][i][j];
#else
        UNROLL
        for (int u = 0; u < RU; u++) {
            float ss = 0.0f;
            UNROLL
            for (int i = 0; i < NCL; i++)
                UNROLL
            for (int j = 0; j < EPC; j++)
                ss = fma(x[u][i][j], x[u][i][j], ss);
            ps[(u * RP + rr) * LPR + lane] = ss;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        /* one work-item per row sums its partials into rinv; before, each of the row's LPR
         * work-items did, LPR times the local-memory reads. H200, bf16 Hq 32 / Hkv 8,
         * D 128, `clkv bench score --method keydiff`, whole KeyDiff call, two alternations
         * (2026-11-28): 16K 45.1-48.2 -> 33.0-34.8 us, 128K 223.7 -> 164.5-165.0 (floor of
         * the two passes 116), B 4 NHD at 128K 941.1-942.4 -> 714.5-714.7, D 64 at 128K
         * 122.1-123.5 -> 99.2-99.3. */
        for (int r = lid; r < ROWS; r += WG_SIZE) {
            const float s = row_sum(ps, r);
            rinv[r] = s > 0.0f ? 1.0f / sqrt(s) : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* (ps and rinv are rewritten after the next one) */
        UNROLL
        for (int u = 0; u < RU; u++) {
            const float inv = rinv[u * RP + rr];
            UNROLL
            for (int i = 0; i < NCL; i++)
                UNROLL
            for (int j = 0; j < EPC; j++)
                acc[i][j] = fma(x[u][i][j], inv, acc[i][j]);
        }
#endif
    }
    /* the RP row groups' sums: red[rr][chunk lane + i * LPR][element] */
    UNROLL
    for (int i = 0; i < NCL; i++)
        UNROLL
    for (int j = 0; j < EPC; j++)
        red[(rr * NCL * LPR + i * LPR + lane) * EPC + j] = acc[i][j];
    barrier(CLK_LOCAL_MEM_FENCE);
    __global float *out = part + part_off + (((long)b * Hkv + kvh) * nchunks + c) * HEAD_DIM;
    for (int e = lid; e < HEAD_DIM; e += WG_SIZE) {
        float s = 0.0f;
        for (int g = 0; g < RP; g++)
            s += red[g * NCL * LPR * EPC + e];
        out[e] = s;
    }
}

/* Pass 2 (and KNorm): a work-group per ROUNDS rounds of ROWS tokens; per round each
 * work-item loads its RU rows' chunks, the partial sums (||k||^2 and, for KeyDiff, <k, mu>)
 * meet in ps / pm and work-item r < ROWS writes row r's score. */
__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void
score_key(__global const KV_T *k, long k_off, long k_sb, long k_sh, long k_sl,
          __global const int *lengths, long len_off, int has_len, int max_len, int Hkv, int nchunks,
          __global float *ws, long part_off, long raw_off, long row_len) {
    const int lid = (int)get_local_id(0), lane = lid % LPR, rr = lid / LPR;
    const int kvh = (int)get_group_id(1), b = (int)get_group_id(2);
    const int tile0 = (int)get_group_id(0) * (ROWS * ROUNDS);
    const int n = seq_len(lengths, len_off, has_len, max_len, b);
    if (tile0 >= n)
        return; /* uniform */
    const int tend = min(tile0 + ROWS * ROUNDS, n);
    const long kb = k_off + (long)b * k_sb + (long)kvh * k_sh;
    __local float ps[ROWS * LPR];
#if KEYDIFF
    __local float pm[ROWS * LPR];
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
    float mv[NCL][EPC]; /* this work-item's elements of mu */
    UNROLL
    for (int i = 0; i < NCL; i++)
        UNROLL
    for (int j = 0; j < EPC; j++) {
        const int e = (lane + i * LPR) * EPC + j;
        mv[i][j] = e < HEAD_DIM ? mu[e] : 0.0f;
    }
#endif
    for (int t0 = tile0; t0 < tend; t0 += ROWS) {
        UNROLL
        for (int u = 0; u < RU; u++) {
            float x[NCL][EPC];
            key_row(k, kb, k_sl, t0 + u * RP + rr, tend, lane, x);
            float ss = 0.0f, sm = 0.0f;
            UNROLL
            for (int i = 0; i < NCL; i++)
                UNROLL
            for (int j = 0; j < EPC; j++) {
                ss = fma(x[i][j], x[i][j], ss);
#if KEYDIFF
                sm = fma(x[i][j], mv[i][j], sm);
#endif
            }
            ps[(u * RP + rr) * LPR + lane] = ss;
#if KEYDIFF
            pm[(u * RP + rr) * LPR + lane] = sm;
#else
            (void)sm;
#endif
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int r = lid; r < ROWS; r += WG_SIZE) { /* row r of the round: token t0 + r */
            const int t = t0 + r;
            if (t < tend) {
                const float kk = row_sum(ps, r);
                float s;
#if KEYDIFF
                const float km = row_sum(pm, r);
                const float den = sqrt(kk) * mu_norm;
                s = den > 0.0f ? -(km / den) : 0.0f;
#else
                s = -sqrt(kk);
#endif
                ws[raw_off + ((long)b * Hkv + kvh) * row_len + t] = s;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* ps is rewritten next round */
    }
}
#endif /* LPR */

#ifdef MT
/* Tiles of TK key rows are staged in local memory with coalesced loads along D (rows
 * padded by one float so that per-token loops over a row do not collide in banks). */
inline void stage_rows(__local float (*tile)[HEAD_DIM + 1], __global const KV_T *k, long kb,
                       long k_sl, int t0, int cnt, int lid) {
    for (int i = lid; i < cnt * HEAD_DIM; i += WG_SIZE) {
        const int r = i / HEAD_DIM, e = i % HEAD_DIM;
        tile[r][e] = CLKV_LOAD(KV_DTYPE)(k, kb + (long)(t0 + r) * k_sl + e);
    }
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
#endif /* MT */
