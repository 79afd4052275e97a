/* Kernels of the clkv command-line tool (tools/): the streaming-read bandwidth probe and
 * a counter-based random fill for benchmark inputs. Not used by the library itself. */

/* Streaming read, GPU form: a grid-stride loop so that consecutive work-items read
 * consecutive float4 (coalesced). Each work-item sums its float4 loads and writes one
 * float so that the loads are live. BW_UNROLL loads in flight per work-item (H100, 4 GiB,
 * 2026-11-27: 4 loads 3043-3054 GB/s, 8 loads 3097 GB/s, above what PyTorch's bf16 decode
 * streams at B 8 128K, 3.08 TB/s; PTX loads asking for an L2 prefetch of 128 or 256 bytes
 * changed nothing). */
#ifndef BW_UNROLL
#define BW_UNROLL 8
#endif
__kernel void clkv_tool_read_strided(__global const float4 *src, uint n4, __global float *out) {
    uint gid = (uint)get_global_id(0);
    uint step = (uint)get_global_size(0);
    float4 a[BW_UNROLL];
    for (int u = 0; u < BW_UNROLL; u++)
        a[u] = (float4)(0.0f);
    uint i = gid;
    for (; i + (BW_UNROLL - 1u) * step < n4; i += BW_UNROLL * step) {
        float4 x[BW_UNROLL];
        for (int u = 0; u < BW_UNROLL; u++)
            x[u] = src[i + u * step];
        for (int u = 0; u < BW_UNROLL; u++)
            a[u] += x[u];
    }
    for (; i < n4; i += step) {
        a[0] += src[i];
    }
    for (int u = 1; u < BW_UNROLL; u++)
        a[0] += a[u];
    out[gid] = (a[0].x + a[0].y) + (a[0].z + a[0].w);
}

/* Streaming read, CPU form: each work-item reads one contiguous block (one stream per
 * core, which hardware prefetchers follow). */
__kernel void clkv_tool_read_blocked(__global const float4 *src, uint n4, uint per_item,
                                     __global float *out) {
    uint gid = (uint)get_global_id(0);
    uint begin = gid * per_item;
    uint end = begin + per_item < n4 ? begin + per_item : n4;
    float4 a0 = (float4)(0.0f), a1 = (float4)(0.0f);
    uint i = begin;
    for (; i + 1u < end; i += 2u) {
        a0 += src[i];
        a1 += src[i + 1u];
    }
    if (i < end) {
        a0 += src[i];
    }
    float4 a = a0 + a1;
    out[gid] = (a.x + a.y) + (a.z + a.w);
}

/* Keep in sync with tool_mix / tool_hash / tool_rand_value in tools/tool_data.c. */
static inline uint clkv_tool_mix(uint h) {
    h ^= h >> 16;
    h *= 0x85EBCA6Bu;
    h ^= h >> 13;
    h *= 0xC2B2AE35u;
    h ^= h >> 16;
    return h;
}

/* dst[i] = scale * u(i, seed) rounded to dtype (0 f32, 1 f16, 2 bf16; RNE), for i < n. */
__kernel void clkv_tool_fill(__global uchar *dst, ulong n, int dtype, uint seed, float scale) {
    ulong step = get_global_size(0);
    for (ulong i = get_global_id(0); i < n; i += step) {
        uint hi = clkv_tool_mix((uint)(i >> 32) + seed * 0x9E3779B9u + 0x7F4A7C15u);
        uint h = clkv_tool_mix((uint)i ^ hi);
        float u = (float)(h >> 8) * (1.0f / 8388608.0f) - 1.0f;
        float x = u * scale;
        if (dtype == 0) {
            ((__global float *)dst)[i] = x;
        } else if (dtype == 1) {
            vstore_half_rte(x, (size_t)i, (__global half *)dst);
        } else {
            uint b = as_uint(x);
            if ((b & 0x7FFFFFFFu) > 0x7F800000u) {
                b = (b >> 16) | 0x40u;
            } else {
                b = (b + 0x7FFFu + ((b >> 16) & 1u)) >> 16;
            }
            ((__global ushort *)dst)[i] = (ushort)b;
        }
    }
}
