/* Split merge of the split-K decode kernels (decode, sparse and quantized decode
 * attention; host side clkv__attn_merge_kernel in host/attention_common.c): partial states
 * acc [B, Hq, splits, D] then (m, l) pairs [B, Hq, splits, 2] (base-2 logits) -> o and the
 * optional LSE (natural log). Its own file so that every partial-kernel variant shares one
 * merge program per (o dtype, D).
 *
 * Build options: O_DTYPE, HEAD_DIM, MERGE_WG (work-group size), MAX_SPLITS (most splits
 * per sequence: the local weight table). */

#define O_T CLKV_STORAGE(O_DTYPE)

/* One work-group per (query head, sequence) combines the splits' (m, l, acc). The split
 * weights exp2(m_s - m*) / l* are computed once into local memory; then MERGE_WG / (D/4)
 * "split lanes" each sum a strided subset of the splits' acc rows with float4 loads, and
 * the lanes are added up in local memory. Every loop is short, so a single sequence with
 * hundreds of splits does not serialize on memory latency. (Warp-shuffle reductions and
 * the loads of 4 splits per lane issued together: H100, after the 2-bit quantized decode
 * kernel (17-65 splits), 5.2-7.2 us against 5.5-7.7 us profiled and the decode within its
 * spread, so not kept, 2026-11-27.) */
#define MERGE_Q (HEAD_DIM / 4)           /* float4 columns per acc row */
#define MERGE_LANES (MERGE_WG / MERGE_Q) /* splits summed in parallel */

__kernel __attribute__((reqd_work_group_size(MERGE_WG, 1, 1))) void
attention_decode_merge(__global const float *part_acc, long ml_off, int num_splits, int Hq,
                       __global O_T *o, long o_off, long o_sb, long o_sh, __global float *lse,
                       long lse_off, long lse_sb, long lse_sh, int has_lse) {
    __global const float *part_ml = part_acc + ml_off;
    const int h = (int)get_group_id(0);
    const int b = (int)get_group_id(1);
    const int lid = (int)get_local_id(0);
    const long base = ((long)b * Hq + h) * num_splits;
    __local float weight[MAX_SPLITS];
    __local float red[MERGE_WG];
    __local float4 lanes[MERGE_LANES][MERGE_Q];

    float mx = -INFINITY;
    for (int s = lid; s < num_splits; s += MERGE_WG)
        mx = fmax(mx, part_ml[(base + s) * 2]);
    red[lid] = mx;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int span = MERGE_WG / 2; span > 0; span >>= 1) {
        if (lid < span)
            red[lid] = fmax(red[lid], red[lid + span]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    mx = red[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    float sum = 0.0f;
    for (int s = lid; s < num_splits; s += MERGE_WG) {
        const float ms = part_ml[(base + s) * 2];
        const float w = ms == -INFINITY ? 0.0f : exp2(ms - mx);
        weight[s] = w;
        sum += part_ml[(base + s) * 2 + 1] * w;
    }
    red[lid] = sum;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int span = MERGE_WG / 2; span > 0; span >>= 1) {
        if (lid < span)
            red[lid] += red[lid + span];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    sum = red[0];
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
        CLKV_STORE(O_DTYPE)(o, orow, a.x);
        CLKV_STORE(O_DTYPE)(o, orow + 1, a.y);
        CLKV_STORE(O_DTYPE)(o, orow + 2, a.z);
        CLKV_STORE(O_DTYPE)(o, orow + 3, a.w);
    }
    if (has_lse && lid == 0)
        lse[lse_off + (long)b * lse_sb + (long)h * lse_sh] =
            sum > 0.0f ? (mx + log2(sum)) * CLKV_LN2 : -INFINITY;
}
