/* clkv prelude: prepended to every kernel file by the program cache.
 *
 * Storage dtypes use the codes of clkv_dtype: 0 f32, 1 f16, 2 bf16. All arithmetic is
 * f32; 16-bit values are widened exactly and narrowed with round-to-nearest-even.
 * CLKV_NVIDIA_PTX is defined by the host only where inline PTX was verified to work;
 * every PTX helper has a portable path. */

#define CLKV_DT_F32 0
#define CLKV_DT_F16 1
#define CLKV_DT_BF16 2

#define CLKV_CAT_(a, b) a##b
#define CLKV_CAT(a, b) CLKV_CAT_(a, b)

/* Storage type of a dtype code: CLKV_STORAGE(KV_DTYPE) with -DKV_DTYPE=2 gives ushort. */
#define CLKV_STORAGE_0 float
#define CLKV_STORAGE_1 half
#define CLKV_STORAGE_2 ushort
#define CLKV_STORAGE(dt) CLKV_CAT(CLKV_STORAGE_, dt)

/* Elements per 16-byte vector of a dtype code. */
#define CLKV_VEC16_0 4
#define CLKV_VEC16_1 8
#define CLKV_VEC16_2 8
#define CLKV_VEC16(dt) CLKV_CAT(CLKV_VEC16_, dt)

#define CLKV_LOG2E 1.4426950408889634f
#define CLKV_LN2 0.6931471805599453f

/* ---- scalar conversions ---- */

inline float clkv_bf16_to_f32(ushort x) {
    return as_float((uint)x << 16);
}

inline ushort clkv_f32_to_bf16(float f) {
    uint u = as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (ushort)((u >> 16) | 0x40u); /* NaN stays NaN (quiet) */
    return (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

inline float clkv_f16_bits_to_f32(uint h) {
#ifdef CLKV_NVIDIA_PTX
    float f;
    ushort hs = (ushort)h;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(hs));
    return f;
#else
    ushort hs = (ushort)h;
    return vload_half(0, (const __private half *)&hs);
#endif
}

/* Load element i of a buffer of dtype code `dt` as f32. */
inline float clkv_load_0(__global const float *p, long i) {
    return p[i];
}
inline float clkv_load_1(__global const half *p, long i) {
    return vload_half((size_t)i, p);
}
inline float clkv_load_2(__global const ushort *p, long i) {
    return clkv_bf16_to_f32(p[i]);
}
#define CLKV_LOAD(dt) CLKV_CAT(clkv_load_, dt)

/* Store f32 x as element i of a buffer of dtype code `dt` (RNE). */
inline void clkv_store_0(__global float *p, long i, float x) {
    p[i] = x;
}
inline void clkv_store_1(__global half *p, long i, float x) {
    vstore_half_rte(x, (size_t)i, p);
}
inline void clkv_store_2(__global ushort *p, long i, float x) {
    p[i] = clkv_f32_to_bf16(x);
}
#define CLKV_STORE(dt) CLKV_CAT(clkv_store_, dt)

/* The same with the dtype code a run-time value (buffers whose dtype is a kernel
 * argument; with a constant code the compiler keeps one path). */
inline float clkv_load_dt(__global const void *p, int dt, long i) {
    if (dt == CLKV_DT_F16)
        return vload_half((size_t)i, (__global const half *)p);
    if (dt == CLKV_DT_BF16)
        return clkv_bf16_to_f32(((__global const ushort *)p)[i]);
    return ((__global const float *)p)[i];
}
inline void clkv_store_dt(__global void *p, int dt, long i, float x) {
    if (dt == CLKV_DT_F16)
        vstore_half_rte(x, (size_t)i, (__global half *)p);
    else if (dt == CLKV_DT_BF16)
        ((__global ushort *)p)[i] = clkv_f32_to_bf16(x);
    else
        ((__global float *)p)[i] = x;
}

/* ---- 16-byte raw vectors: loaded once, widened element by element at use ---- */

/* Word j (0..3) of a raw 16-byte vector; j must be a compile-time constant after
 * unrolling so the selection folds away (as for the element accessors below). */
inline uint clkv_u4_word(uint4 r, int j) {
    return j == 0 ? r.s0 : j == 1 ? r.s1 : j == 2 ? r.s2 : r.s3;
}

/* Element j (0 <= j < CLKV_VEC16(dt)) of a raw 16-byte vector as f32. j must be a
 * compile-time constant after unrolling so the selection folds away. */
inline float clkv_raw_elem_0(uint4 r, int j) {
    return as_float(clkv_u4_word(r, j));
}
inline float clkv_raw_elem_1(uint4 r, int j) {
    const uint w = clkv_u4_word(r, j >> 1);
    return clkv_f16_bits_to_f32((j & 1) ? (w >> 16) : (w & 0xffffu));
}
inline float clkv_raw_elem_2(uint4 r, int j) {
    const uint w = clkv_u4_word(r, j >> 1);
    return as_float((j & 1) ? (w & 0xffff0000u) : (w << 16));
}
#define CLKV_RAW_ELEM(dt) CLKV_CAT(clkv_raw_elem_, dt)

/* 16 bytes starting at element i of p, which must be 16-byte aligned. */
inline uint4 clkv_load_raw_aligned(__global const void *p, long byte_off) {
    return *(__global const uint4 *)((__global const uchar *)p + byte_off);
}

/* 16 aligned bytes of a stream that is read once: on NVIDIA a load that does not allocate
 * in L1 and asks L2 for 256 bytes (score_window_mma.cl and pariskv_collide.cl have the
 * measurements); elsewhere a plain load. Re-checked on the H200 (bf16 Hq 32 / Hkv 8, D 128,
 * two alternations in one run each, 2026-11-28, µs; 256 bytes -> 128): decode B 8 128K
 * 972.0-973.3 -> 969.5-970.3, B 1 128K 131.2-132.1 -> 131.0-131.6, KeyDiff at 128K
 * 164.0-164.3 -> 161.8-163.3, but SnapKV 85.9-86.2 -> 86.9-87.3 and the DropKV call, AnDPro,
 * KNorm and pkv_collide within the spread: not a change. Without a prefetch size decode took
 * 3 % longer (B 8 128K 999-1000); ld.global.nc measured as the plain load. */
inline uint4 clkv_load_stream16(__global const void *p, long byte_off) {
#ifdef CLKV_NVIDIA_PTX
    uint4 r;
    asm("ld.global.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
        : "l"((__global const uchar *)p + byte_off));
    return r;
#else
    return clkv_load_raw_aligned(p, byte_off);
#endif
}

/* The same 16 bytes assembled from element loads, for rows that are not 16-byte aligned. */
inline uint4 clkv_load_raw_u16(__global const ushort *p, long i) {
    return (uint4)((uint)p[i] | ((uint)p[i + 1] << 16), (uint)p[i + 2] | ((uint)p[i + 3] << 16),
                   (uint)p[i + 4] | ((uint)p[i + 5] << 16),
                   (uint)p[i + 6] | ((uint)p[i + 7] << 16));
}
inline uint4 clkv_load_raw_u32(__global const uint *p, long i) {
    return (uint4)(p[i], p[i + 1], p[i + 2], p[i + 3]);
}

/* ---- cross-lane sums inside a warp (NVIDIA) ---- */
#ifdef CLKV_NVIDIA_PTX
inline float clkv_shfl_xor(float x, int lane_mask) {
    float r;
    asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;"
                 : "=f"(r)
                 : "f"(x), "r"(lane_mask));
    return r;
}
/* x of lane src (0..31) of the warp. */
inline float clkv_shfl_idx(float x, int src) {
    float r;
    asm volatile("shfl.sync.idx.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(r) : "f"(x), "r"(src));
    return r;
}
/* Inclusive prefix sum of x over the lanes of a full warp (lane order). */
inline uint clkv_warp_scan_u32(uint x) {
    const uint lane = get_local_id(0) & 31u;
    for (uint d = 1; d < 32u; d <<= 1) {
        uint t;
        asm volatile("shfl.sync.up.b32 %0, %1, %2, 0, 0xffffffff;" : "=r"(t) : "r"(x), "r"(d));
        if (lane >= d)
            x += t;
    }
    return x;
}
#endif

/* ---- tensor-core helpers (NVIDIA, sm_80+) ----
 * clkv_mma_bf16 / clkv_mma_f16: c (16 x 8, f32) += A (16 x 16) B (16 x 8), mma.sync
 * m16n8k16 with the fragment layouts of PLATFORM.md (g = lane / 4, t = lane % 4;
 * a0 = A[g][2t..2t+1], a1 = A[g+8][2t..], a2 = A[g][2t+8..], a3 = A[g+8][2t+8..];
 * b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g]; c0..c3 = C[g][2t], C[g][2t+1], C[g+8][2t],
 * C[g+8][2t+1]; 16-bit pairs packed with the lower index in the low half).
 * clkv_bf16x2_rn(lo, hi): two f32 rounded to bf16 (RNE) and packed.
 * clkv_warp_sync(): the lanes of a warp reconverge; their local-memory writes before it
 * are visible to the warp after it.
 * clkv_ldmatrix4(_trans): four 8 x 8 16-bit matrices; lane l gives the row address of
 * matrix l / 8, row l % 8 (`.trans` transposes each matrix). Local addresses must be
 * 16-byte aligned. */
#ifdef CLKV_NVIDIA_PTX
inline void clkv_mma_bf16(float *c, uint a0, uint a1, uint a2, uint a3, uint b0, uint b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
inline void clkv_mma_f16(float *c, uint a0, uint a1, uint a2, uint a3, uint b0, uint b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
/* The mma of a 16-bit dtype code (CLKV_DT_F16 or CLKV_DT_BF16). */
#define CLKV_MMA_1 clkv_mma_f16
#define CLKV_MMA_2 clkv_mma_bf16
#define CLKV_MMA(dt) CLKV_CAT(CLKV_MMA_, dt)

inline void clkv_ldmatrix4(uint *r, __local const void *row) {
    const uint a = (uint)(size_t)row;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a)
                 : "memory");
}
inline void clkv_ldmatrix4_trans(uint *r, __local const void *row) {
    const uint a = (uint)(size_t)row;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a)
                 : "memory");
}
inline uint clkv_bf16x2_rn(float lo, float hi) {
    uint r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
inline void clkv_warp_sync(void) {
    asm volatile("bar.warp.sync 0xffffffff;" ::: "memory");
}
#endif

/* 2^x with subnormal results flushed to 0 (one MUFU.EX2 on NVIDIA; native_exp2 there may
 * add a subnormal range fix-up around it). Relative error ~2^-22. */
inline float clkv_exp2_ftz(float x) {
#ifdef CLKV_NVIDIA_PTX
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
#else
    return native_exp2(x);
#endif
}

/* 1 / x with subnormal inputs and results flushed to 0 (one MUFU.RCP on NVIDIA;
 * native_recip there keeps a subnormal fix-up around it). Relative error ~2^-23. */
inline float clkv_rcp_ftz(float x) {
#ifdef CLKV_NVIDIA_PTX
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
#else
    return native_recip(x);
#endif
}

/* ---- asynchronous global -> local copies (cp.async, sm_80+) ----
 * A tile pipeline issues clkv_cp_async16/4 per work-item, closes each stage with
 * clkv_cp_async_commit() and waits with CLKV_CP_ASYNC_WAIT(n): every group but the n most
 * recent ones of this work-item has landed (n is a compile-time constant, e.g. STAGES - 1).
 * A barrier is still needed before other work-items read the data. The portable path copies
 * synchronously, so commit and wait are no-ops there. */
#ifdef CLKV_NVIDIA_PTX
/* CLKV_CP_L2 (set by the runtime): the L2 prefetch size the 16-byte copies ask for */
#if defined(CLKV_CP_L2) && CLKV_CP_L2 == 256
#define CLKV_CP_ASYNC16_OP "cp.async.cg.shared.global.L2::256B"
#elif defined(CLKV_CP_L2) && CLKV_CP_L2 == 128
#define CLKV_CP_ASYNC16_OP "cp.async.cg.shared.global.L2::128B"
#elif defined(CLKV_CP_L2) && CLKV_CP_L2 == 64
#define CLKV_CP_ASYNC16_OP "cp.async.cg.shared.global.L2::64B"
#else
#define CLKV_CP_ASYNC16_OP "cp.async.cg.shared.global"
#endif
/* the same copy to a 32-bit shared-window address (NVIDIA only: for pipelines that keep
 * their stage addresses as numbers, see attention_quant_mma.cl) */
inline void clkv_cp_async16_sa(uint dst, __global const uchar *src) {
    asm volatile(CLKV_CP_ASYNC16_OP " [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
inline void clkv_cp_async16(__local uint4 *dst, __global const uchar *src) {
    clkv_cp_async16_sa((uint)(size_t)dst, src);
}
/* 4-byte copy (sources whose alignment is only 4 bytes; goes through L1). */
inline void clkv_cp_async4(__local int *dst, __global const int *src) {
    const uint d = (uint)(size_t)dst;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(d), "l"(src) : "memory");
}
inline void clkv_cp_async_commit(void) {
    asm volatile("cp.async.commit_group;" ::: "memory");
}
#define CLKV_CP_ASYNC_WAIT(n) asm volatile("cp.async.wait_group %0;" ::"n"(n) : "memory")
#else
inline void clkv_cp_async16(__local uint4 *dst, __global const uchar *src) {
    *dst = *(__global const uint4 *)src;
}
inline void clkv_cp_async4(__local int *dst, __global const int *src) {
    *dst = *src;
}
inline void clkv_cp_async_commit(void) {}
#define CLKV_CP_ASYNC_WAIT(n) ((void)0)
#endif

/* ---- device-wide ordering, for "last work-group to arrive" schemes ---- */

/* Orders this work-item's earlier global memory operations before its later ones,
 * device-wide (CUDA __threadfence): call it before the barrier that precedes the arrival
 * atomic. */
inline void clkv_fence_device(void) {
#ifdef CLKV_NVIDIA_PTX
    asm volatile("membar.gl;" ::: "memory");
#else
    mem_fence(CLK_GLOBAL_MEM_FENCE);
#endif
}

/* ---- online softmax (base-2 logits) ---- */

/* Merge partial state (m2, l2) into (m, l): returns the factor the old accumulator must
 * be multiplied by; *f2 receives the factor for the second accumulator. m = -inf marks
 * an empty state; two empty states stay empty without NaN. */
inline float clkv_softmax_merge(float *m, float *l, float m2, float l2, float *f2) {
    float mn = fmax(*m, m2);
    float f1 = (*m == -INFINITY) ? 0.0f : exp2(*m - mn);
    float g = (m2 == -INFINITY) ? 0.0f : exp2(m2 - mn);
    *l = *l * f1 + l2 * g;
    *m = mn;
    *f2 = g;
    return f1;
}

#ifdef cl_khr_fp64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

/* (long)(x * (double)n) as the host computes it; x arrives as the bits of a double (and
 * as a float for devices without fp64, where the product is rounded in f32 instead). */
inline long clkv_scaled_floor(ulong x_bits, float x_f, long n) {
#ifdef cl_khr_fp64
    (void)x_f;
    return (long)(as_double(x_bits) * (double)n);
#else
    (void)x_bits;
    return (long)(x_f * (float)n);
#endif
}

/* Keep count of an eviction keep-set for n tokens (clkv_keep_count, score.h):
 * min(n, max(base, window, 1)), base = (long)(ratio * n) or the budget when >= 0. */
inline long clkv_keep_rule(long n, ulong ratio_bits, float ratio_f, long budget, long window) {
    long keep = budget >= 0 ? budget : clkv_scaled_floor(ratio_bits, ratio_f, n);
    keep = max(keep, window);
    keep = max(keep, 1L);
    return min(keep, n);
}

/* Final score of token j < L of a scorer's raw row (SPEC §2.1 / §2.2 pooling): -inf past
 * the n valid tokens, +inf for the last `protect` of them, otherwise the raw scores pooled
 * over [0, P) (pool 1 avg: sum of the in-range taps / pool_k; 2 max; 0 none), centred,
 * stride 1; tokens j >= P keep their raw score. score_finalize (score_pool.cl) and the
 * keep-set's fused first kernel (select.cl) both use it, so their scores are identical.
 * Element i of the row is row[IX(i - base)] (base 0 for a whole row in global memory);
 * CLKV_POOLED_SCORE_DEF(NAME, AS, IX) defines the same function over address space AS
 * (select.cl: a row or a tile staged in local memory). */
#define CLKV_POOLED_SCORE_DEF(NAME, AS, IX)                                                        \
    inline float NAME(AS const float *row, long base, int j, int n, int P, long protect, int pool, \
                      int pool_k) {                                                                \
        if (j >= n)                                                                                \
            return -INFINITY;                                                                      \
        if ((long)j >= (long)n - protect)                                                          \
            return INFINITY;                                                                       \
        if (pool == 0 || j >= P)                                                                   \
            return row[IX(j - base)];                                                              \
        const int lo = max(j - pool_k / 2, 0), hi = min(j + pool_k / 2, P - 1);                    \
        if (pool == 1) {                                                                           \
            float s = 0.0f;                                                                        \
            for (int i = lo; i <= hi; i++)                                                         \
                s += row[IX(i - base)];                                                            \
            return s / (float)pool_k;                                                              \
        }                                                                                          \
        float m = -INFINITY;                                                                       \
        for (int i = lo; i <= hi; i++)                                                             \
            m = fmax(m, row[IX(i - base)]);                                                        \
        return m;                                                                                  \
    }
#define CLKV_IX_SAME(i) (i)
CLKV_POOLED_SCORE_DEF(clkv_pooled_score, __global, CLKV_IX_SAME)

/* ---- warp-level tensor-core helpers (NVIDIA, sm_80+) ----
 * Fragment layouts of mma.sync m16n8k16 (g = lane / 4, t = lane % 4, 16-bit pairs packed
 * with the lower index in the low half): a0 = {A[g][2t], A[g][2t+1]}, a1 = rows g + 8,
 * a2 = columns 2t + 8, a3 = both; b0 = {B[2t][g], B[2t+1][g]}, b1 = rows 2t + 8;
 * c0 = C[g][2t], c1 = C[g][2t+1], c2 = C[g+8][2t], c3 = C[g+8][2t+1]. Names end in the
 * dtype code of the 16-bit operands (1 f16, 2 bf16); the mma and ldmatrix wrappers are
 * above (CLKV_MMA(dt), clkv_ldmatrix4). */
#ifdef CLKV_NVIDIA_PTX
/* Two values rounded to the nearest 16-bit values, packed (lower index low). */
inline uint clkv_round16x2_1(float p0, float p1) {
    uint r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(p1), "f"(p0));
    return r;
}
inline uint clkv_round16x2_2(float p0, float p1) {
    return clkv_bf16x2_rn(p0, p1);
}
#define CLKV_ROUND16X2(dt) CLKV_CAT(clkv_round16x2_, dt)

/* Two values in [0, 1] (attention weights) as packed 16-bit high parts and packed 16-bit
 * residuals: hi + lo carries ~16 significant bits, so products with both keep f32-level
 * accuracy. */
inline void clkv_split16x2_1(float p0, float p1, uint *hi, uint *lo) {
    const uint h = clkv_round16x2_1(p0, p1);
    *hi = h;
    *lo = clkv_round16x2_1(p0 - clkv_f16_bits_to_f32(h & 0xffffu),
                           p1 - clkv_f16_bits_to_f32(h >> 16));
}
inline void clkv_split16x2_2(float p0, float p1, uint *hi, uint *lo) {
    const uint h0 = as_uint(p0) & 0xffff0000u, h1 = as_uint(p1) & 0xffff0000u; /* exact rest */
    *hi = (h0 >> 16) | h1;
    *lo = clkv_round16x2_2(p0 - as_float(h0), p1 - as_float(h1));
}
#define CLKV_SPLIT16X2(dt) CLKV_CAT(clkv_split16x2_, dt)
#endif

/* Copy key rows [first, first + rows) of 16-bit K and V (row strides k_sl, v_sl elements,
 * `chunks` 16-byte chunks per row) into local tiles whose rows are `row16` 16-byte units
 * apart, the `nthreads` work-items of the group sharing the copies. Rows at or past `end`
 * copy row `first` instead (valid memory; their scores must be masked). aligned: every
 * row starts 16-byte aligned (cp.async where available); otherwise plain loads. */
inline void clkv_issue_kv_tile(__local uint4 *sk, __local uint4 *sv, __global const ushort *k,
                               __global const ushort *v, long kb, long vb, long k_sl, long v_sl,
                               int first, int end, int lid, int rows, int chunks, int row16,
                               int nthreads, int aligned) {
    for (int i = lid; i < rows * chunks; i += nthreads) {
        const int r = i / chunks, c = i % chunks;
        const int j = first + r < end ? first + r : first;
        __global const ushort *kp = k + kb + (long)j * k_sl + c * 8;
        __global const ushort *vp = v + vb + (long)j * v_sl + c * 8;
        if (aligned) {
            clkv_cp_async16(sk + r * row16 + c, (__global const uchar *)kp);
            clkv_cp_async16(sv + r * row16 + c, (__global const uchar *)vp);
        } else {
            sk[r * row16 + c] = clkv_load_raw_u16(kp, 0);
            sv[r * row16 + c] = clkv_load_raw_u16(vp, 0);
        }
    }
}
