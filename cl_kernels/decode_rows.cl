/* Row-group layout and end-of-split merge shared by the split-K decode partial kernels
 * that read K/V rows on the CUDA cores: attention_decode.cl, attention_sparse.cl and
 * longflow_partial.cl include it (`#include "decode_rows.cl"`, expanded by
 * runtime/program_cache.c before the build).
 *
 * Needs HEAD_DIM, EPL, WG_SIZE, GROUP, UNROLL, KV_DTYPE; ROWS_NO_UNROLL 1 (optional) keeps
 * UNROLL_LOOP empty (loops with barriers inside, on PoCL).
 *
 * A row-group of TPR = HEAD_DIM / EPL lanes reads one K/V row; NRG = WG_SIZE / TPR rows
 * are in flight per work-group. With TPR > 1, lane ln of a row-group owns the 16-byte
 * chunks c * TPR + ln of a row (so each load instruction of a row-group covers a
 * contiguous span of the row): element ELEM(c, j, ln) is entry c * VW + j of the lane's
 * EPL values. With TPR == 1 one lane holds the whole row (plain element loops the CPU
 * compiler vectorizes). */

#define TPR (HEAD_DIM / EPL)
#define NRG (WG_SIZE / TPR)
/* Rows of red_acc rows_merge_store needs: NRG / 2 for its tree, one per warp where the
 * warp's row-groups are summed with shuffles first (ROWS_WARP_SUM). */
#if TPR > 1 && defined(CLKV_NVIDIA_PTX) && WG_SIZE % 32 == 0 && TPR <= 32
#define ROWS_WARP_SUM 1
#define RED_ROWS (NRG / 2 > WG_SIZE / 32 ? NRG / 2 : WG_SIZE / 32)
#else
#define ROWS_WARP_SUM 0
#define RED_ROWS (NRG > 1 ? NRG / 2 : 1)
#endif
#if TPR > 1
#define VW CLKV_VEC16(KV_DTYPE)
#define NCH (EPL / VW)
#define ELEM(c, j, ln) (((c)*TPR + (ln)) * VW + (j))
#if defined(ROWS_NO_UNROLL) && ROWS_NO_UNROLL
#define UNROLL_LOOP
#else
#define UNROLL_LOOP _Pragma("unroll")
#endif
#else
#define VW 1
#define NCH EPL
#define ELEM(c, j, ln) (c)
#define UNROLL_LOOP
#endif

/* Start of a split: the lane's elements of the work-group's query rows, pre-scaled,
 * qr[g] = q[h0 + g] * scale_log2 (row qbase + (h0 + g) * q_sh of q, dtype code q_dt; heads
 * g >= ng are zero), and the empty online-softmax state (m = -inf, l = 0, acc = 0). */
inline void rows_start(float qr[GROUP][EPL], float *m, float *l, float acc[GROUP][EPL],
                       __global const void *q, int q_dt, long qbase, long q_sh, int h0, int ng,
                       int ln, float scale_log2) {
    UNROLL_LOOP
    for (int g = 0; g < GROUP; g++) {
        const long qrow = qbase + (long)min(h0 + g, h0 + ng - 1) * q_sh;
        UNROLL_LOOP
        for (int c = 0; c < NCH; c++) {
            UNROLL_LOOP
            for (int j = 0; j < VW; j++)
                qr[g][c * VW + j] =
                    g < ng ? clkv_load_dt(q, q_dt, qrow + ELEM(c, j, ln)) * scale_log2 : 0.0f;
        }
        m[g] = -INFINITY;
        l[g] = 0.0f;
        UNROLL_LOOP
        for (int e = 0; e < EPL; e++)
            acc[g][e] = 0.0f;
    }
}

/* Online softmax over a batch of UNROLL rows (base-2 logits s[u][g], -inf for a row
 * that does not count): raise each head's running maximum m to the batch's, rescaling l
 * and acc only when it grows (rare after the first rows). Needs UNROLL. */
inline void rows_rescale(float s[UNROLL][GROUP], float *m, float *l, float acc[GROUP][EPL]) {
    UNROLL_LOOP
    for (int g = 0; g < GROUP; g++) {
        float mb = s[0][g];
        UNROLL_LOOP
        for (int u = 1; u < UNROLL; u++)
            mb = fmax(mb, s[u][g]);
        if (mb > m[g]) {
            const float f = m[g] == -INFINITY ? 0.0f : exp2(m[g] - mb);
            l[g] *= f;
            UNROLL_LOOP
            for (int e = 0; e < EPL; e++)
                acc[g][e] *= f;
            m[g] = mb;
        }
    }
}

/* A row's probabilities p[g] = exp2(s[g] - m[g]) (0 when the row is not valid), added
 * into l (after rows_rescale). */
inline void rows_probs(const float *s, int valid, const float *m, float *l, float *p) {
    UNROLL_LOOP
    for (int g = 0; g < GROUP; g++) {
        p[g] = valid ? exp2(s[g] - m[g]) : 0.0f;
        l[g] += p[g];
    }
}

#if TPR == 1
/* One lane per row: d[g] = <q row g, K row> for the row at element `row` of k. */
inline void rows_dot_lane(float qr[GROUP][EPL], __global const CLKV_STORAGE(KV_DTYPE) * k, long row,
                          float *d) {
    for (int g = 0; g < GROUP; g++)
        d[g] = 0.0f;
    for (int e = 0; e < EPL; e++) {
        const float kx = CLKV_LOAD(KV_DTYPE)(k, row + e);
        for (int g = 0; g < GROUP; g++)
            d[g] = fma(qr[g][e], kx, d[g]);
    }
}

/* One lane per row: acc[g] += p[g] * V row, the row at element `row` of v. */
inline void rows_acc_lane(float acc[GROUP][EPL], const float *p,
                          __global const CLKV_STORAGE(KV_DTYPE) * v, long row) {
    for (int e = 0; e < EPL; e++) {
        const float vx = CLKV_LOAD(KV_DTYPE)(v, row + e);
        for (int g = 0; g < GROUP; g++)
            acc[g][e] = fma(p[g], vx, acc[g][e]);
    }
}
#else
/* acc[g] += p[g] * V row, the row held as the lane's NCH 16-byte chunks (raw KV_DTYPE) */
inline void rows_acc_chunks(float acc[GROUP][EPL], const float *p, const uint4 *vr) {
    UNROLL_LOOP
    for (int c = 0; c < NCH; c++) {
        UNROLL_LOOP
        for (int j = 0; j < VW; j++) {
            const float vx = CLKV_RAW_ELEM(KV_DTYPE)(vr[c], j);
            UNROLL_LOOP
            for (int g = 0; g < GROUP; g++)
                acc[g][c * VW + j] = fma(p[g], vx, acc[g][c * VW + j]);
        }
    }
}
#endif

/* Merge the NRG row-group online-softmax states (m, l, acc; base-2 logits) of a
 * work-group: a common maximum per head, then a tree sum of acc through local memory
 * (red_ml: NRG * GROUP * 2 floats, red_acc: RED_ROWS * GROUP * HEAD_DIM floats). Row-group
 * 0 then stores the split's partial of heads g < ng in the layout attention_decode_merge
 * reads: acc at part_acc[(pi0 + g * num_splits) * HEAD_DIM + e], (m, l) at
 * part_ml[(pi0 + g * num_splits) * 2 + {0, 1}]. Every work-item must call it. */
inline void rows_merge_store(float acc[GROUP][EPL], const float *m, const float *l, int rg, int ln,
                             __local float *red_ml, __local float *red_acc, int ng,
                             __global float *part_acc, __global float *part_ml, long pi0,
                             int num_splits) {
    if (ln == 0) {
        for (int g = 0; g < GROUP; g++) {
            red_ml[(rg * GROUP + g) * 2] = m[g];
            red_ml[(rg * GROUP + g) * 2 + 1] = l[g];
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    float mt[GROUP], lt[GROUP];
    UNROLL_LOOP
    for (int g = 0; g < GROUP; g++) {
        float mx = -INFINITY;
        for (int r = 0; r < NRG; r++)
            mx = fmax(mx, red_ml[(r * GROUP + g) * 2]);
        float sum = 0.0f;
        for (int r = 0; r < NRG; r++) {
            const float mr = red_ml[(r * GROUP + g) * 2];
            sum += mr == -INFINITY ? 0.0f : red_ml[(r * GROUP + g) * 2 + 1] * exp2(mr - mx);
        }
        mt[g] = mx;
        lt[g] = sum;
        const float f = m[g] == -INFINITY ? 0.0f : exp2(m[g] - mx);
        UNROLL_LOOP
        for (int e = 0; e < EPL; e++)
            acc[g][e] *= f;
    }
#if ROWS_WARP_SUM
    /* NVIDIA: the row-groups of a warp are summed by butterfly shuffles over the lane bits
     * above TPR; each warp's sum goes to one row of red_acc, and all work-items add the
     * warps' rows and store the partial, consecutive work-items consecutive columns (the
     * tree below had 4 barrier rounds of bank-conflicted local traffic and one row-group
     * storing: ~5 us of a sparse attention work-group, H100). */
    UNROLL_LOOP
    for (int o = TPR; o < 32; o <<= 1) {
        UNROLL_LOOP
        for (int g = 0; g < GROUP; g++) {
            UNROLL_LOOP
            for (int e = 0; e < EPL; e++)
                acc[g][e] += clkv_shfl_xor(acc[g][e], o);
        }
    }
    const int lid_ = rg * TPR + ln, warp = lid_ / 32;
    if (lid_ % 32 < TPR) {
        UNROLL_LOOP
        for (int g = 0; g < GROUP; g++) {
            UNROLL_LOOP
            for (int c = 0; c < NCH; c++) {
                UNROLL_LOOP
                for (int j = 0; j < VW; j++)
                    red_acc[(warp * GROUP + g) * HEAD_DIM + ELEM(c, j, ln)] = acc[g][c * VW + j];
            }
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int e = lid_; e < ng * HEAD_DIM; e += WG_SIZE) {
        const int g = e / HEAD_DIM, d = e % HEAD_DIM;
        float x = 0.0f;
        for (int w = 0; w < WG_SIZE / 32; w++)
            x += red_acc[(w * GROUP + g) * HEAD_DIM + d];
        part_acc[(pi0 + (long)g * num_splits) * HEAD_DIM + d] = x;
    }
    if (lid_ < ng) {
        UNROLL_LOOP
        for (int g = 0; g < GROUP; g++)
            if (g == lid_) {
                part_ml[(pi0 + (long)g * num_splits) * 2] = mt[g];
                part_ml[(pi0 + (long)g * num_splits) * 2 + 1] = lt[g];
            }
    }
#else
    for (int span = NRG / 2; span > 0; span >>= 1) {
        if (rg >= span && rg < 2 * span) {
            for (int g = 0; g < GROUP; g++) {
                UNROLL_LOOP
                for (int c = 0; c < NCH; c++) {
                    UNROLL_LOOP
                    for (int j = 0; j < VW; j++)
                        red_acc[((rg - span) * GROUP + g) * HEAD_DIM + ELEM(c, j, ln)] =
                            acc[g][c * VW + j];
                }
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (rg < span) {
            for (int g = 0; g < GROUP; g++) {
                UNROLL_LOOP
                for (int c = 0; c < NCH; c++) {
                    UNROLL_LOOP
                    for (int j = 0; j < VW; j++)
                        acc[g][c * VW + j] += red_acc[(rg * GROUP + g) * HEAD_DIM + ELEM(c, j, ln)];
                }
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (rg == 0) {
        for (int g = 0; g < ng; g++) {
            const long pi = pi0 + (long)g * num_splits;
            UNROLL_LOOP
            for (int c = 0; c < NCH; c++) {
                UNROLL_LOOP
                for (int j = 0; j < VW; j++)
                    part_acc[pi * HEAD_DIM + ELEM(c, j, ln)] = acc[g][c * VW + j];
            }
            if (ln == 0) {
                part_ml[pi * 2] = mt[g];
                part_ml[pi * 2 + 1] = lt[g];
            }
        }
    }
#endif
}
