/* Streaming-read bandwidth of a device, measured with cl_kernels/bandwidth.cl, as the
 * yardstick benchmarks report their achieved bandwidth against. */
#ifndef CLKV_TOOLS_BANDWIDTH_H
#define CLKV_TOOLS_BANDWIDTH_H

#include <stdint.h>

#include "clkv.h"

typedef struct tool_bandwidth {
    uint64_t bytes;       /* buffer size read per launch */
    int runs;             /* timed batches */
    int launches_per_run; /* back-to-back launches per timed batch */
    double gbps_median;   /* 1e9 bytes/s, median over runs */
    double gbps_best;     /* best run */
    const char *method;   /* "strided" (GPU) or "blocked" (CPU) */
} tool_bandwidth;

/* Buffer size: min(4 GiB, max_alloc/2, global/4) on GPUs (launch gaps stay under 1 % of a
 * launch), min(256 MiB, ...) on CPUs (far beyond their caches, and keeps the measurement
 * short). */
uint64_t tool_bandwidth_buffer_bytes(const clkv_device_info *info);

/* Measure the device's float4 streaming-read bandwidth: fill the buffer, warm up, then
 * `runs` timed batches (host wall clock around back-to-back launches + clFinish; the
 * batch length is chosen to last >= ~20 ms). Releases everything it allocates. */
clkv_status tool_measure_bandwidth(clkv_context *ctx, int runs, tool_bandwidth *out);

/* Time per launch of the same probe reading exactly `bytes` (rounded up to 16): batches of
 * `iters` back-to-back launches + finish, median over `repeats` batches, as the operator
 * benchmarks time their calls. It is the floor of a one-launch kernel that streams those
 * bytes once, launch gap and ramp included (below ~100 MB on a GPU these are a visible part
 * of the time, so the large-buffer bandwidth above overstates what such a read can reach).
 * NaN in *median_s for 0 bytes or beyond 32 GiB. Releases everything it allocates. */
clkv_status tool_time_read(clkv_context *ctx, uint64_t bytes, int iters, int repeats,
                           double *median_s);

#endif /* CLKV_TOOLS_BANDWIDTH_H */
