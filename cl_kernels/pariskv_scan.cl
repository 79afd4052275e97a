/* ParisKV work-group scans, a kernel fragment included by pariskv_collide.cl (Stage I),
 * pariskv_rerank.cl and attention_sparse.cl (SP_TOPK), the last two for pariskv_topk.cl's
 * final top-k. The includer defines SCAN_WG (work-group size, a power of two) and
 * optionally PKC_WSCAN (1: warp-shuffle scans where CLKV_NVIDIA_PTX is defined). */
#ifndef PKC_WSCAN
#define PKC_WSCAN 0
#endif
#if PKC_WSCAN && !(defined(CLKV_NVIDIA_PTX) && SCAN_WG % 32 == 0)
#undef PKC_WSCAN
#define PKC_WSCAN 0
#endif

#if PKC_WSCAN
/* Lane l gets x of lane l - d (its own x for l < d); NVIDIA warps of 32. */
inline uint pkc_shfl_up(uint x, int d) {
    uint r;
    asm volatile("shfl.sync.up.b32 %0, %1, %2, 0, 0xffffffff;" : "=r"(r) : "r"(x), "r"(d));
    return r;
}
#endif

/* Exclusive scan of one ulong per work-item over the work-group; *total gets the sum. All
 * work-items must call it. PKC_WSCAN (NVIDIA): shuffle scans inside each warp of 32 and
 * one pass over the warp totals (2 barriers); else Hillis-Steele in `tmp` (SCAN_WG entries,
 * 2 log2(SCAN_WG) + 2 barriers). */
inline ulong pkc_scan(__local ulong *tmp, ulong v, ulong *total) {
    const int lid = (int)get_local_id(0);
#if PKC_WSCAN
    const int lane = lid & 31, warp = lid >> 5;
    ulong inc = v;
    for (int d = 1; d < 32; d <<= 1) {
        const uint lo = pkc_shfl_up((uint)inc, d), hi = pkc_shfl_up((uint)(inc >> 32), d);
        if (lane >= d)
            inc += ((ulong)hi << 32) | lo;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lane == 31)
        tmp[warp] = inc;
    barrier(CLK_LOCAL_MEM_FENCE);
    ulong before = 0, tot = 0;
    for (int w = 0; w < SCAN_WG / 32; w++) {
        const ulong t = tmp[w];
        before += w < warp ? t : 0;
        tot += t;
    }
    *total = tot;
    return before + inc - v;
#else
    barrier(CLK_LOCAL_MEM_FENCE);
    tmp[lid] = v;
    for (int s = 1; s < SCAN_WG; s <<= 1) {
        barrier(CLK_LOCAL_MEM_FENCE);
        const ulong add = lid >= s ? tmp[lid - s] : 0;
        barrier(CLK_LOCAL_MEM_FENCE);
        tmp[lid] += add;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    *total = tmp[SCAN_WG - 1];
    return tmp[lid] - v;
#endif
}
