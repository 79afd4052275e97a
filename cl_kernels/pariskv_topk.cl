/* ParisKV Stage II final top-k of one (b, KV head) row, as a function of one work-group
 * (SPEC §4): a kernel fragment included by pariskv_rerank.cl (pkv_topk, the search's last
 * kernel) and by attention_sparse.cl (SP_TOPK: the decode step's sparse attention selects
 * its own rows first, one launch less).
 *
 * The includer includes pariskv_scan.cl first (pkc_scan, with SCAN_WG = TK_WG: fragments
 * include nothing themselves) and defines TK_WG (work-group size, a power of two),
 * KH_BITS, KBUF_CAP and TK_RANK (see pariskv_rerank.cl), and optionally TK_OUT, the address
 * space of the output positions (default __global). Row state written by pkv_rerank /
 * pkv_topk_collect: a histogram of the top KH_BITS bits of the score keys (KH_BINS words),
 * a coarse histogram of the top 6 bits (KH_CBINS words), then the appended count and the
 * count at or above the threshold bin (KH_WORDS words per row); and a buffer of up to
 * KBUF_CAP (key << 32 | candidate index) pairs. */

#define KH_BINS (1 << KH_BITS)
#define KH_CBINS 64                 /* coarse bins (top 6 key bits), used when KH_COARSE */
#define KH_CNT (KH_BINS + KH_CBINS) /* then: appended count, count at/above the thr bin */
#define KH_WORDS (KH_CNT + 2)
#define TK_NSUB (TK_WG >= 32 ? TK_WG / 32 : 1) /* radix-select sub-histograms */
/* Local ulongs pkr_topk_row needs in `big`: the sort buffer, or (slow path) one 256-bin
 * histogram per 32 work-items (the keys of one row mostly share their high bytes, so a
 * single histogram would serialize every work-item on one counter). */
#define TK_BIG (KBUF_CAP > TK_NSUB * 128 ? KBUF_CAP : TK_NSUB * 128)
#ifndef TK_RANK
#define TK_RANK 0
#endif
#ifndef TK_OUT
#define TK_OUT __global
#endif

#ifndef SCAN_WG /* pkc_scan */
#error "include pariskv_scan.cl (SCAN_WG = TK_WG) before pariskv_topk.cl"
#endif

/* Order-preserving map of f32 to uint (larger float -> larger key; -0 == +0). */
inline uint pkr_key(float x) {
    uint u = as_uint(x);
    if ((u & 0x7fffffffu) == 0)
        u = 0;
    return (u >> 31) ? ~u : (u | 0x80000000u);
}

/* Ascending bitonic sort of v[0..n) in local memory (n a power of two); all work-items. */
inline void pkr_bitonic(__local ulong *v, int n) {
    const int lid = (int)get_local_id(0);
    for (int k = 2; k <= n; k <<= 1)
        for (int s = k >> 1; s > 0; s >>= 1) {
            for (int i = lid; i < n; i += TK_WG) {
                const int o = i ^ s;
                if (o > i) {
                    const ulong x = v[i], y = v[o];
                    if ((x > y) == ((i & k) == 0)) {
                        v[i] = y;
                        v[o] = x;
                    }
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
}

/* Final top-k of one row over its C candidate scores s[0..C) (candidates cd[0..C)): ties
 * at the k-th key take the lowest candidate indices (lowest positions). out gets the
 * positions ascending, then -1 up to top_k. nbuf: the row's buffer count (kb, from
 * pkv_topk_collect). Fast path: rank (nbuf <= TK_RANK) or sort the buffer (nbuf <=
 * KBUF_CAP); otherwise an exact radix select (4 passes of 8 bits) and an ordered
 * compaction over the row. Measured and dropped (H100, 1M tokens, in the decode step's
 * sparse kernel, 2026-11-27): loading the first 256 buffer entries before nbuf is known
 * (25.0 -> 24.6 us, the step within its spread); buffer entries holding positions instead
 * of candidate indices, so no gather of the winners' positions here (-1.3 us, but the
 * collection took 1.4 us more loading the positions); a radix step before the counting
 * rank (the entries of the buffer's worst 12-bit key digit histogrammed by the next 8
 * bits, only those of the sub-digit holding rank kk ranked among themselves, with local
 * atomics and a work-group scan): 24.2-24.3 -> 28.0 us (H100, 2026-11-27; the same
 * kernel without the rank loop at all, a timing-only build, took 22.0-22.2 us, so the
 * counting rank costs under 3 us there). Every work-item calls it (the
 * barriers stay in uniform loops);
 * local memory: big[TK_BIG], tmp[TK_WG], sel[TK_RANK] (TK_RANK > 0), sh[2]. The writes
 * to out are by several work-items: a caller that reads them back needs a barrier with a
 * fence. */
inline void pkr_topk_row(__global const float *s, __global const int *cd, int C, int top_k,
                         TK_OUT int *out, uint nbuf, __global const ulong *kb, __local ulong *big,
                         __local ulong *tmp, __local uint *sel, __local uint *sh) {
    __local uint *hist = (__local uint *)big;
    const int lid = (int)get_local_id(0);
    const int kk = min(top_k, C);
    if (kk <= 0)
        nbuf = 0u;
#if TK_RANK
    /* Counting rank over a small buffer: entry e's rank = #entries smaller (all distinct:
     * the index is in the low bits); the kk best go to sel[rank], and each of them is
     * written at its rank among the selected candidate indices (= positions ascending). */
    const int rank_path = kk > 0 && nbuf <= TK_RANK;
    if (rank_path)
        for (int i = lid; i < (int)nbuf; i += TK_WG)
            big[i] = kb[i];
    barrier(CLK_LOCAL_MEM_FENCE);
    if (rank_path) {
        /* pad to a multiple of 4 with keys above every entry (read 4 at a time below) */
        for (int i = (int)nbuf + lid; i < (((int)nbuf + 3) & ~3); i += TK_WG)
            big[i] = ~(ulong)0;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (rank_path)
        for (int i = lid; i < (int)nbuf; i += TK_WG) {
            const ulong e = big[i];
            int r = 0;
            for (int l = 0; l < (int)nbuf; l += 4) {
                const ulong4 x = vload4(0, big + l);
                r += (x.s0 < e) + (x.s1 < e) + (x.s2 < e) + (x.s3 < e);
            }
            if (r < kk)
                sel[r] = (uint)e;
        }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (rank_path)
        for (int i = lid; i < kk; i += TK_WG) {
            const uint ji = sel[i];
            int r = 0;
            for (int l = 0; l < kk; l++)
                r += sel[l] < ji;
            out[r] = cd[ji];
        }
    barrier(CLK_LOCAL_MEM_FENCE);
    const int fast = kk > 0 && nbuf <= KBUF_CAP && !rank_path;
    const int done_fast = rank_path || fast;
#else
    (void)sel;
    const int fast = kk > 0 && nbuf <= KBUF_CAP;
    const int done_fast = fast;
#endif
    int n = fast ? 1 : 0;
    while (fast && n < (int)nbuf)
        n <<= 1;
    for (int i = lid; i < n; i += TK_WG)
        big[i] = i < (int)nbuf ? kb[i] : ~(ulong)0;
    barrier(CLK_LOCAL_MEM_FENCE);
    pkr_bitonic(big, n); /* the first kk: the top-k, ties by lowest index */
    int n2 = fast ? 1 : 0;
    while (fast && n2 < kk)
        n2 <<= 1;
    for (int i = lid; i < n2; i += TK_WG) /* in place: each entry by one work-item */
        big[i] = i < kk ? (big[i] & 0xffffffffu) : ~(ulong)0;
    barrier(CLK_LOCAL_MEM_FENCE);
    pkr_bitonic(big, n2); /* candidate indices ascending = positions ascending */
    for (int i = lid; i < (fast ? kk : 0); i += TK_WG)
        out[i] = cd[(int)big[i]];
    barrier(CLK_LOCAL_MEM_FENCE);
    const int ks = done_fast ? 0 : kk; /* what the radix select takes */
    uint prefix = 0, mask = 0, need = (uint)ks;
    if (ks > 0) {
        for (int shift = 24; shift >= 0; shift -= 8) {
            for (int i = lid; i < TK_NSUB * 256; i += TK_WG)
                hist[i] = 0;
            barrier(CLK_LOCAL_MEM_FENCE);
            __local uint *mine = hist + (lid / 32) * 256;
            for (int j = lid; j < C; j += TK_WG) {
                const uint key = pkr_key(s[j]);
                if ((key & mask) == prefix)
                    atomic_inc(&mine[(key >> shift) & 0xffu]);
            }
            barrier(CLK_LOCAL_MEM_FENCE);
#if TK_WG >= 256
            { /* bins in descending order, one per work-item: the bin where the count of
               * larger keys reaches `need` */
                const int v = 255 - lid;
                uint x = 0;
                if (lid < 256)
                    for (int q = 0; q < TK_NSUB; q++)
                        x += hist[q * 256 + v];
                ulong tot;
                const ulong above = pkc_scan(tmp, x, &tot);
                if (lid < 256 && above < need && above + x >= need) {
                    sh[0] = prefix | ((uint)v << shift);
                    sh[1] = need - (uint)above;
                }
            }
#else
            if (lid == 0) {
                uint cum = 0;
                for (int v = 255; v >= 0; v--) {
                    uint x = 0;
                    for (int q = 0; q < TK_NSUB; q++)
                        x += hist[q * 256 + v];
                    if (cum + x >= need) {
                        sh[0] = prefix | ((uint)v << shift);
                        sh[1] = need - cum;
                        break;
                    }
                    cum += x;
                }
            }
#endif
            barrier(CLK_LOCAL_MEM_FENCE);
            prefix = sh[0];
            need = sh[1];
            mask |= 0xffu << shift;
        }
    }
    /* prefix: the kk-th largest key; need: how many of its ties to take (first ones). */
    const int per = (C + TK_WG - 1) / TK_WG;
    const int j0 = lid * per, j1 = min(C, j0 + per);
    uint gt = 0, eq = 0;
    if (ks > 0)
        for (int j = j0; j < j1; j++) {
            const uint key = pkr_key(s[j]);
            gt += key > prefix;
            eq += key == prefix;
        }
    ulong total;
    const ulong ex = pkc_scan(tmp, ((ulong)gt << 32) | eq, &total);
    uint gt_run = (uint)(ex >> 32), eq_run = (uint)(ex & 0xffffffffu);
    if (ks > 0)
        for (int j = j0; j < j1; j++) {
            const uint key = pkr_key(s[j]);
            const int isgt = key > prefix, iseq = key == prefix;
            if (isgt || (iseq && eq_run < need))
                out[gt_run + min(eq_run, need)] = cd[j];
            gt_run += isgt;
            eq_run += iseq;
        }
    for (int j = kk + lid; j < top_k; j += TK_WG)
        out[j] = -1;
}
