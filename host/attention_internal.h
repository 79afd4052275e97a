/* Internal links between the attention operators (not public API). */
#ifndef CLKV_HOST_ATTENTION_INTERNAL_H
#define CLKV_HOST_ATTENTION_INTERNAL_H

#include "clkv/attention.h"

/* Which tensor-core kernel clkv_attention_window(ctx, a) would run: 0 none (portable),
 * 1 attention_window_mma.cl, 2 its decode form attention_window_keyrows.cl (T = 1, G <= 8);
 * `a` must already be valid. */
int clkv__window_uses_tensor_cores(clkv_context *ctx, const clkv_attention_window_args *a);

/* Where the ParisKV search left what its final top-k reads (filled by
 * clkv__pariskv_search_ex, host/pariskv_search.c): candidate scores and candidates
 * ([B, Hkv, max_cand] with these element offsets and strides), the plan (C_b in row 7),
 * the score-histogram row state (u32 words from kh_off) and the (key, candidate) buffers
 * (u64 from kb_off) in ws; and the top-k's build options (cl_kernels/pariskv_topk.cl). */
typedef struct clkv__topk_src {
    cl_mem cs, cand, plan, ws;
    cl_long cs_off, cs_sb, cs_sh, ca_off, ca_sb, ca_sh, plan_off, kh_off, kb_off;
    cl_int max_cand;
    int kh_bits, kbuf_cap, tk_rank;
} clkv__topk_src;

/* clkv_attention_sparse for the ParisKV decode step: each (sequence, KV head)'s last split
 * attends the idx positions, the others split the dense ranges, and on NVIDIA the last
 * work-group to finish merges the splits (one launch). With tk, that last split first
 * selects the search's top-k positions from *tk and writes them to a->idx ([B, Hkv,
 * top_k], as the search's own top-k kernel would): the search's last launch is saved too
 * (a->k_sel / v_sel must then be absent). Same arguments and results as
 * clkv_attention_sparse, which must accept `a`, for idx rows without duplicate positions
 * (the search's top-k; no duplicate detection); in addition a->idx is required and
 * Hq / Hkv <= 8 and 1 <= top_k <= CLKV_SPARSE_STEP_MAX_NI (else CLKV_ERR_INTERNAL). Results do not
 * depend on tk or on k_sel (the same splits and arithmetic). The partial states go to `part` (the
 * context workspace holds the search's state), a buffer of at least the bytes
 * clkv__attention_sparse_step_part_bytes reports. */
#define CLKV_SPARSE_STEP_MAX_NI 1024
clkv_status clkv__attention_sparse_step_part_bytes(clkv_context *ctx,
                                                   const clkv_attention_sparse_args *a,
                                                   size_t *bytes);
clkv_status clkv__attention_sparse_step(clkv_context *ctx, const clkv_attention_sparse_args *a,
                                        const clkv__topk_src *tk, cl_mem part, cl_event *done);

#endif /* CLKV_HOST_ATTENTION_INTERNAL_H */
