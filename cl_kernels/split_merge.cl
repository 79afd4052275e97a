/* In-kernel split merge of the split-K decode kernels (NVIDIA only: PTX fences), a kernel
 * fragment included by attention_window_keyrows.cl and attention_sparse.cl (SP_LASTIDX). It
 * replaces the merge kernel (attention_merge.cl) where a (sequence, head range) has few
 * splits: the launch it saves costs more than one work-group reading the partial states
 * back.
 *
 * The includer defines WG_SIZE, HEAD_DIM, O_DTYPE and O_T; partial states use the merge
 * kernel's layout: acc [B, Hq, splits, D] from part_acc, then (m, l) pairs
 * [B, Hq, splits, 2] from part_acc + ml_off, base-2 logits. */

#define SM_MAX 256 /* most (head, split) states of one merge (local weights) */
#ifndef SM_BATCH
#define SM_BATCH 16 /* accumulator loads of one output column in flight together */
#endif

/* 16 bytes of a split's state that another work-group of this launch wrote (after its
 * fence): ld.global.cg, cached in L2 only (L1 is not coherent across compute units). */
inline float4 split_merge_ld4(__global const float *p) {
    float4 r;
    asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(r.x), "=f"(r.y), "=f"(r.z), "=f"(r.w)
                 : "l"(p));
    return r;
}

/* Called by every work-item of each of the num_splits work-groups of one (sequence b,
 * heads [h0, h0 + nh)) once their partial states are stored (nh * num_splits <= SM_MAX):
 * the work-group makes them visible device-wide (fence) and takes a ticket; the one that
 * draws the last ticket reads every split's state back (past the L1: volatile and
 * ld.global.cg loads), writes o and lse (natural log) and returns the ticket counter to 0
 * for the next launch.
 * Local memory: is_last (one int), w (2 * SM_MAX floats), hl (nh floats). The (m, l) pairs are
 * read once, in parallel, into per-split weights; each output column then sums its splits
 * SM_BATCH at a time, the 16-byte loads of those in flight together. */
inline void split_merge_fused(__global float *part_acc, long ml_off, int num_splits, int Hq, int b,
                              int h0, int nh, __global int *ticket, __global O_T *o, long o_off,
                              long o_sb, long o_sh, __global float *lse, long lse_off, long lse_sb,
                              long lse_sh, int has_lse, __local int *is_last, __local float *w,
                              __local float *hl) {
    const int lid = (int)get_local_id(0);
    asm volatile("fence.acq_rel.gpu;" ::: "memory");
    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
    if (lid == 0) {
        const int last = atomic_inc(ticket) == num_splits - 1;
        if (last)
            *ticket = 0; /* every split has arrived: ready for the next launch */
        *is_last = last;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (!*is_last)
        return;
    asm volatile("fence.acq_rel.gpu;" ::: "memory");
    __global volatile const float *pa = part_acc;
    const long base = (long)b * Hq + h0; /* (head, split) state i = base * num_splits + i */
    const int ns = nh * num_splits;
    __local float *wl = w + SM_MAX; /* l of each state */
    for (int i = lid; i < ns; i += WG_SIZE) {
        w[i] = pa[ml_off + (base * num_splits + i) * 2];
        wl[i] = pa[ml_off + (base * num_splits + i) * 2 + 1];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid < nh) { /* head lid: common maximum, weights exp2(m - max), sum of l */
        float mx = -INFINITY;
        for (int sp = 0; sp < num_splits; sp++)
            mx = fmax(mx, w[lid * num_splits + sp]);
        float sum = 0.0f;
        for (int sp = 0; sp < num_splits; sp++) {
            const int i = lid * num_splits + sp;
            const float wg = w[i] == -INFINITY ? 0.0f : exp2(w[i] - mx);
            sum = fma(wl[i], wg, sum);
            w[i] = wg;
        }
        hl[lid] = sum;
        if (has_lse)
            lse[lse_off + (long)b * lse_sb + (long)(h0 + lid) * lse_sh] =
                sum > 0.0f ? (mx + log2(sum)) * CLKV_LN2 : -INFINITY;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int e = lid; e < nh * (HEAD_DIM / 4); e += WG_SIZE) {
        const int r = e / (HEAD_DIM / 4), c4 = e % (HEAD_DIM / 4);
        const long a0 = (base + r) * num_splits * HEAD_DIM + c4 * 4;
        float4 x = (float4)(0.0f);
        for (int s0 = 0; s0 < num_splits; s0 += SM_BATCH) {
            float4 a[SM_BATCH];
            _Pragma("unroll") for (int j = 0; j < SM_BATCH; j++) {
                const long ai = a0 + (long)min(s0 + j, num_splits - 1) * HEAD_DIM;
                a[j] = split_merge_ld4(part_acc + ai);
            }
            _Pragma("unroll") for (int j = 0; j < SM_BATCH; j++) {
                const float wg = s0 + j < num_splits ? w[r * num_splits + s0 + j] : 0.0f;
                x = fma((float4)(wg), a[j], x);
            }
        }
        const float sum = hl[r];
        x *= sum > 0.0f ? 1.0f / sum : 0.0f;
        const long orow = o_off + (long)b * o_sb + (long)(h0 + r) * o_sh + c4 * 4;
        CLKV_STORE(O_DTYPE)(o, orow, x.x);
        CLKV_STORE(O_DTYPE)(o, orow + 1, x.y);
        CLKV_STORE(O_DTYPE)(o, orow + 2, x.z);
        CLKV_STORE(O_DTYPE)(o, orow + 3, x.w);
    }
}
