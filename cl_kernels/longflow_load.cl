/* LongFlow static cache: fill from a prompt (clkv_longflow_cache_load, SPEC §2.3).
 *
 * Build options (host/longflow_cache.c):
 *   SRC_DTYPE, KV_DTYPE  dtype codes of the prompt K/V and of the cache
 *   HEAD_DIM             D
 *   PER_HEAD             1: one slot map per KV head
 *   HAS_INDICES          1: kept-token lists [B, Hsel, K] give the slot contents
 *   HAS_LENGTHS          1: a lengths buffer (else every prompt has max_len tokens)
 *
 * One work-item per (element, slot) of a (sequence, KV head): global size
 * (S * D rounded up, Hkv, B). Slot i receives prompt token t (or nothing: K = V = 0,
 * pos = -1); the map's positions and next_pos are written by the element-0 items. */

#define SRC_T CLKV_STORAGE(SRC_DTYPE)
#define KV_T CLKV_STORAGE(KV_DTYPE)

__kernel void longflow_load(__global const SRC_T *sk, long sk_off, long sk_sb, long sk_sh,
                            long sk_sl, __global const SRC_T *sv, long sv_off, long sv_sb,
                            long sv_sh, long sv_sl, __global const int *lengths, long len_off,
                            int max_len, __global const int *indices, long ix_off, long ix_sb,
                            long ix_sh, int n_idx, __global KV_T *k, __global KV_T *v,
                            __global int *pos, __global int *next_pos, int Hkv, int S) {
    const long gi = (long)get_global_id(0);
    const int kvh = (int)get_global_id(1);
    const int b = (int)get_global_id(2);
    if (gi >= (long)S * HEAD_DIM)
        return;
    const int i = (int)(gi / HEAD_DIM);
    const int e = (int)(gi % HEAD_DIM);
    const int Hm = PER_HEAD ? Hkv : 1;
    const int u = PER_HEAD ? kvh : 0;
#if HAS_LENGTHS
    const int n = clamp(lengths[len_off + b], 0, max_len);
#else
    const int n = max_len;
#endif
#if HAS_INDICES
    int t = i < n_idx ? indices[ix_off + (long)b * ix_sb + (long)u * ix_sh + i] : -1;
#else
    int t = i;
#endif
    if (t < 0 || t >= n)
        t = -1;
    const long dst = (((long)b * Hkv + kvh) * S + i) * HEAD_DIM + e;
    if (t >= 0) {
        CLKV_STORE(KV_DTYPE)
        (k, dst, CLKV_LOAD(SRC_DTYPE)(sk, sk_off + b * sk_sb + kvh * sk_sh + t * sk_sl + e));
        CLKV_STORE(KV_DTYPE)
        (v, dst, CLKV_LOAD(SRC_DTYPE)(sv, sv_off + b * sv_sb + kvh * sv_sh + t * sv_sl + e));
    } else {
        CLKV_STORE(KV_DTYPE)(k, dst, 0.0f);
        CLKV_STORE(KV_DTYPE)(v, dst, 0.0f);
    }
#if PER_HEAD
    const int map_writer = e == 0;
#else
    const int map_writer = e == 0 && kvh == 0; /* one writer per slot map */
#endif
    if (map_writer)
        pos[((long)b * Hm + u) * S + i] = t;
    if (gi == 0 && kvh == 0)
        next_pos[b] = n;
}
