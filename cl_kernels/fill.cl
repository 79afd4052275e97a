/* Fill of a buffer range with a repeated 32-bit value (runtime/fill.c), for ranges that
 * clEnqueueFillBuffer does not serve reliably (see there). The index is 64-bit, so any
 * range of a buffer works. */
__kernel void clkv_fill_u32(__global uint *dst, ulong first, ulong n, uint value) {
    const ulong step = get_global_size(0);
    for (ulong i = get_global_id(0); i < n; i += step)
        dst[first + i] = value;
}
