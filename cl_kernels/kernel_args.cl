/* Scalar arguments passed as one struct by value, for kernels whose launches are
 * host-bound at small shapes: host files include this file as a C header and the kernels
 * as a fragment, so both sides see one field list in one order (eight-byte fields first,
 * then an even count of four-byte ones: no padding on either side). A kernel unpacks the
 * fields into constants of the same names (KARGS_UNPACK, at the end of this file), so its
 * body reads as with separate parameters.
 * Why: NVIDIA's clEnqueueNDRangeKernel costs about 0.07 us of host time per scalar
 * argument and 0.27 us per buffer (H100, driver 580.159.04, empty kernels, best of 5 x
 * 1000 enqueues in two runs: 12 buffers + 49 scalars 11.0 / 15.0 us per enqueue, the same
 * 49 scalars as one struct 7.5 / 10.6 us; 2 buffers + 59 scalars 7.9 / 11.8 us against
 * 3.8 / 5.3 us). */
#ifndef CLKV_KERNEL_ARGS_CL
#define CLKV_KERNEL_ARGS_CL

#ifdef __OPENCL_VERSION__
#define KARGS_LONG_T long
#define KARGS_INT_T int
#define KARGS_FLOAT_T float
#else
#define KARGS_LONG_T cl_long
#define KARGS_INT_T cl_int
#define KARGS_FLOAT_T cl_float
#endif
#define KARGS_DECL_LONG(n) KARGS_LONG_T n;
#define KARGS_DECL_INT(n) KARGS_INT_T n;
#define KARGS_DECL_FLOAT(n) KARGS_FLOAT_T n;
#define KARGS_UNPACK_LONG(n) const long n = P.n;
#define KARGS_UNPACK_INT(n) const int n = P.n;
#define KARGS_UNPACK_FLOAT(n) const float n = P.n;

/* (clang-format reflows the field lists and struct macros below differently on every pass) */
/* clang-format off */
/* attention_window_partial (attention_window.cl, attention_window_mma.cl,
 * attention_window_keyrows.cl; host/attention_window.c), after its buffers q, k, v,
 * lengths, o, lse, part_acc (the keyrows kernel takes tickets after the struct) */
#define WINDOW_LONG_FIELDS(X)                                                                      \
    X(q_off)                                                                                       \
    X(q_sb)                                                                                        \
    X(q_sh) X(q_st) X(k_off) X(k_sb) X(k_sh) X(k_sl) X(v_off) X(v_sb) X(v_sh) X(v_sl) X(len_off)   \
        X(o_off) X(o_sb) X(o_sh) X(o_st) X(lse_off) X(lse_sb) X(lse_sh) X(lse_st) X(ml_off)
#define WINDOW_INT_FIELDS(X)                                                                       \
    X(has_lengths)                                                                                 \
    X(max_len) X(T) X(Hq) X(G) X(n_qtiles) X(chunk) X(num_splits) X(direct) X(has_lse) X(pad_)
#define WINDOW_FLOAT_FIELDS(X) X(scale_log2)

/* attention_sparse_partial (attention_sparse.cl; host/attention_sparse.c), after its
 * buffers q, k, v, ks, vs, lengths, idx, part_acc (then o, lse, tickets where SP_LASTIDX,
 * then cs, cand, plan, kh, kbuf where SP_TOPK; fields of absent buffers are 0) */
#define SPARSE_LONG_FIELDS(X)                                                                      \
    X(q_off)                                                                                       \
    X(q_sb) X(q_sh) X(k_off) X(k_sb) X(k_sh) X(k_sl) X(v_off) X(v_sb) X(v_sh) X(v_sl) X(ks_off)    \
        X(ks_sb) X(ks_sh) X(ks_sl) X(vs_off) X(vs_sb) X(vs_sh) X(vs_sl) X(len_off) X(idx_off)      \
            X(idx_sb) X(idx_sh) X(ml_off) X(o_off) X(o_sb) X(o_sh) X(lse_off) X(lse_sb) X(lse_sh)  \
                X(cs_off) X(cs_sb) X(cs_sh) X(ca_off) X(ca_sb) X(ca_sh) X(plan_off) X(kh_off)      \
                    X(kb_off)
#define SPARSE_INT_FIELDS(X)                                                                       \
    X(has_lengths)                                                                                 \
    X(max_len) X(n_idx) X(sink) X(local_len) X(Hq) X(G) X(nhg) X(chunk) X(num_splits) X(has_lse)   \
        X(max_cand) X(pad_)
#define SPARSE_FLOAT_FIELDS(X) X(scale_log2)

/* longflow_step_mma (attention_window_mma.cl with -DLONGFLOW=1; host/longflow_step.c),
 * after its 14 buffers */
#define LF_STEP_LONG_FIELDS(X)                                                                     \
    X(q_off)                                                                                       \
    X(q_sb)                                                                                        \
    X(q_sh) X(kn_off) X(kn_sb) X(kn_sh) X(vn_off) X(vn_sb) X(vn_sh) X(ml_off) X(y_off)             \
        X(o_off) X(o_sb) X(o_sh) X(lse_off) X(lse_sb) X(lse_sh) X(sc_off) X(sc_sb) X(sc_sh)        \
            X(vo_off) X(vo_sb) X(vo_sh)
#define LF_STEP_INT_FIELDS(X)                                                                      \
    X(n_dt)                                                                                        \
    X(do_write)                                                                                    \
    X(Hq) X(G) X(n_qtiles) X(S) X(chunk) X(num_splits) X(n_attn) X(n_score) X(n_items) X(unit_off) \
        X(arr_off) X(scd_off) X(bat_off) X(protect) X(n_chunks) X(spt) X(o_dt) X(has_lse)          \
            X(has_scores) X(has_vout) X(c64_off)
#define LF_STEP_FLOAT_FIELDS(X) X(scale_log2)

/* ParisKV Stage I (pariskv_collide.cl; host/pariskv_collide.c). The workspace (bonus
 * tables, S, histograms, chunk info, Stage II's state) is one buffer argument `ws` of each
 * kernel; the *_off fields locate the parts in it, in elements of each part's type. */
/* pkv_rank, after its buffers qr, cnt, plan, ws (then qin, signs, qn where RANK_QT) */
#define PKV_RANK_LONG_FIELDS(X)                                                                    \
    X(qr_off)                                                                                      \
    X(qr_sb)                                                                                       \
    X(qr_sh) X(c_off) X(c_sb) X(c_sh) X(c_sblk) X(plan_off) X(bonus_off) X(rh_off) X(kh_off)       \
        X(q_off) X(q_sb) X(q_sh) X(qn_off) X(qn_sb) X(qn_sh)
#define PKV_RANK_INT_FIELDS(X) X(B) X(Hkv) X(kh_len) X(G) X(has_qn) X(pad_)
/* pkv_collide, after its buffers ids, plan, ws, dbg */
#define PKV_COLLIDE_LONG_FIELDS(X)                                                                 \
    X(id_off)                                                                                      \
    X(id_sb)                                                                                       \
    X(id_sh) X(id_sl) X(plan_off) X(bonus_off) X(s_off) X(s_sb) X(s_sh) X(dbg_off) X(dbg_sb)       \
        X(dbg_sh) X(ch_off) X(rh_off)
#define PKV_COLLIDE_INT_FIELDS(X) X(B) X(zone_start) X(max_zone) X(has_dbg) X(nchunks) X(pad_)
/* pkv_threshold and pkv_compact, after their buffers (threshold: ws, plan, cand; compact:
 * ws, plan, cand) */
#define PKV_SELECT_LONG_FIELDS(X)                                                                  \
    X(ch_off)                                                                                      \
    X(rh_off) X(plan_off) X(ci_off) X(cd_off) X(cd_sb) X(cd_sh) X(s_off) X(s_sb) X(s_sh)
#define PKV_SELECT_INT_FIELDS(X)                                                                   \
    X(nchunks)                                                                                     \
    X(B) X(Hkv) X(max_cand) X(fill_cand) X(zone_start) X(max_zone) X(pad_)

/* ParisKV Stage II (pariskv_rerank.cl; host/pariskv_rerank.c): pkv_rerank after its
 * buffers qr, qn, codes, wts, plan, cand, cs, ws (and the levels after the struct);
 * pkv_topk_collect after cs, plan, ws; pkv_topk after cs, cand, plan, idx, ws */
#define PKV_RERANK_LONG_FIELDS(X)                                                                  \
    X(qr_off)                                                                                      \
    X(qr_sb)                                                                                       \
    X(qr_sh) X(qn_off) X(qn_sb) X(qn_sh) X(cd_off) X(cd_sb) X(cd_sh) X(cd_sl) X(w_off) X(w_sb)     \
        X(w_sh) X(w_sl) X(plan_off) X(ca_off) X(ca_sb) X(ca_sh) X(cs_off) X(cs_sb) X(cs_sh)        \
            X(kh_off) X(kb_off) X(ix_off) X(ix_sb) X(ix_sh)
#define PKV_RERANK_INT_FIELDS(X) X(B) X(max_cand) X(top_k) X(pad_)

/* attention_quant_partial and attention_quant_mma_partial (attention_quant.cl,
 * attention_quant_mma.cl; host/attention_quant.c), after their buffers q, kc, ks, km, vc,
 * vs, vm, kr, vr, counts, part_acc */
#define QUANT_LONG_FIELDS(X) X(q_off) X(q_sb) X(q_sh) X(CQ) X(ml_off)
#define QUANT_INT_FIELDS(X)                                                                        \
    X(B) X(Hkv) X(NR) X(Hq) X(G) X(nhg) X(chunk) X(num_splits) X(rsplits) X(rchunk) X(pad_)
#define QUANT_FLOAT_FIELDS(X) X(scale_log2)

/* The structs: per kernel family F, the lists F_LONG_FIELDS, F_INT_FIELDS and
 * F_FLOAT_FIELDS (eight-byte fields first; the four-byte ones an even count, pad_ where
 * needed); a kernel unpacks them with KARGS_UNPACK(F). */
#define KARGS_STRUCT(name, F)                                                                      \
    typedef struct name {                                                                          \
        F##_LONG_FIELDS(KARGS_DECL_LONG)                                                           \
        F##_INT_FIELDS(KARGS_DECL_INT)                                                             \
        F##_FLOAT_FIELDS(KARGS_DECL_FLOAT)                                                         \
    } name;
#define KARGS_UNPACK(F)                                                                            \
    F##_LONG_FIELDS(KARGS_UNPACK_LONG)                                                             \
    F##_INT_FIELDS(KARGS_UNPACK_INT)                                                               \
    F##_FLOAT_FIELDS(KARGS_UNPACK_FLOAT)
#define PKV_RANK_FLOAT_FIELDS(X)
#define PKV_COLLIDE_FLOAT_FIELDS(X)
#define PKV_SELECT_FLOAT_FIELDS(X)
#define PKV_RERANK_FLOAT_FIELDS(X)
KARGS_STRUCT(window_scalars, WINDOW)
KARGS_STRUCT(sparse_scalars, SPARSE)
KARGS_STRUCT(lf_step_scalars, LF_STEP)
KARGS_STRUCT(quant_scalars, QUANT)
KARGS_STRUCT(pkv_rank_scalars, PKV_RANK)
KARGS_STRUCT(pkv_collide_scalars, PKV_COLLIDE)
KARGS_STRUCT(pkv_select_scalars, PKV_SELECT)
KARGS_STRUCT(pkv_rerank_scalars, PKV_RERANK)

/* clang-format on */

#endif
