/* Streaming-read bandwidth probe. */
#include <math.h>
#include <string.h>

#include "bandwidth.h"
#include "bench_util.h"
#include "runtime/internal.h"
#include "tool_data.h"

#define MIB (1024ull * 1024ull)

uint64_t tool_bandwidth_buffer_bytes(const clkv_device_info *info) {
    /* GPUs: 4 GiB, so launch gaps stay under 1 % of a timed launch (a 1 GiB buffer read
     * 2-4 % below what NVIDIA's driver streams: 4.34-4.44 against 4.50-4.68 TB/s on an H200). */
    uint64_t cap = info->kind == CLKV_DEVICE_KIND_GPU ? 4096 * MIB : 256 * MIB;
    uint64_t b = cap;
    if (info->max_alloc_bytes / 2 < b) {
        b = info->max_alloc_bytes / 2;
    }
    if (info->global_mem_bytes / 4 < b) {
        b = info->global_mem_bytes / 4;
    }
    b &= ~(uint64_t)(MIB - 1); /* whole MiB */
    if (b < MIB) {
        b = MIB;
    }
    return b;
}

typedef struct bw_launch {
    cl_kernel kernel;
    size_t global;
    size_t local;
} bw_launch;

static clkv_status bw_setup(clkv_context *ctx, cl_mem src, cl_mem out, uint64_t bytes,
                            const char *name, size_t items, size_t local, bw_launch *l) {
    clkv_defs defs;
    clkv__defs_init(&defs);
    clkv_status st = clkv__get_kernel(ctx, "bandwidth.cl", &defs, name, &l->kernel);
    if (st != CLKV_OK) {
        return st;
    }
    cl_uint n4 = (cl_uint)(bytes / 16);
    if (strcmp(name, "clkv_tool_read_strided") == 0) {
        st = clkv__set_args(ctx, l->kernel, name, 3, CLKV_ARG(src), CLKV_ARG(n4), CLKV_ARG(out));
    } else {
        cl_uint per_item = (cl_uint)((n4 + items - 1) / items);
        st = clkv__set_args(ctx, l->kernel, name, 4, CLKV_ARG(src), CLKV_ARG(n4),
                            CLKV_ARG(per_item), CLKV_ARG(out));
    }
    l->global = items;
    l->local = local;
    return st;
}

static clkv_status bw_time(clkv_context *ctx, const bw_launch *l, int launches, double *secs) {
    double t0 = tool_now();
    for (int i = 0; i < launches; i++) {
        clkv_status st =
            clkv__launch(ctx, l->kernel, "bandwidth read", 1, &l->global, &l->local, 0, NULL);
        if (st != CLKV_OK) {
            return st;
        }
    }
    clkv_status st = clkv_context_finish(ctx);
    *secs = (tool_now() - t0) / launches;
    return st;
}

/* The probe's kernel, its launch geometry and buffers for one byte count. */
typedef struct bw_probe {
    cl_mem src, sink;
    bw_launch launch;
} bw_probe;

static void bw_close(clkv_context *ctx, bw_probe *p) {
    clkv_context_finish(ctx);
    tool_release(&p->src);
    tool_release(&p->sink);
}

/* Allocate and fill a source of `bytes` (a multiple of 16), build the probe kernel, set its
 * arguments and run it twice untimed (code generation on CPUs, first-touch). */
static clkv_status bw_open(clkv_context *ctx, uint64_t bytes, bw_probe *p) {
    const clkv_device_info *info = clkv_context_device_info(ctx);
    const int is_gpu = info->kind == CLKV_DEVICE_KIND_GPU;
    size_t local, items;
    uint32_t cus = info->compute_units ? info->compute_units : 1;
    if (is_gpu) {
        local = 256 <= info->max_work_group_size ? 256 : (size_t)info->max_work_group_size;
        items = (size_t)cus * 8 * local; /* 8 groups of 256 per compute unit */
    } else {
        local = 1;
        items = (size_t)cus * 4;
    }
    memset(p, 0, sizeof *p);
    clkv_status st = tool_buffer(ctx, "bandwidth source", bytes, &p->src);
    if (st == CLKV_OK) {
        st = tool_buffer(ctx, "bandwidth sink", (uint64_t)items * sizeof(float), &p->sink);
    }
    if (st == CLKV_OK) {
        /* Touch every page (a never-written buffer may read from a shared zero page) with
         * 1.0f; clkv__fill_u32 serves sources past 4 GiB (NVIDIA's clEnqueueFillBuffer
         * hung on 8 GiB, see runtime/fill.c). */
        st = clkv__fill_u32(ctx, p->src, 0, bytes, 0x3F800000u, NULL);
    }
    const char *name = is_gpu ? "clkv_tool_read_strided" : "clkv_tool_read_blocked";
    if (st == CLKV_OK) {
        st = bw_setup(ctx, p->src, p->sink, bytes, name, items, local, &p->launch);
    }
    double secs = 0.0;
    for (int i = 0; i < 2 && st == CLKV_OK; i++) {
        st = bw_time(ctx, &p->launch, 1, &secs);
    }
    if (st != CLKV_OK) {
        bw_close(ctx, p);
    }
    return st;
}

clkv_status tool_measure_bandwidth(clkv_context *ctx, int runs, tool_bandwidth *out) {
    const clkv_device_info *info = clkv_context_device_info(ctx);
    int is_gpu = info->kind == CLKV_DEVICE_KIND_GPU;
    uint64_t bytes = tool_bandwidth_buffer_bytes(info);
    if (runs < 1) {
        runs = 1;
    }
    if (runs > 64) {
        runs = 64;
    }
    out->bytes = bytes;
    out->runs = runs;
    out->method = is_gpu ? "strided" : "blocked";
    out->gbps_median = NAN;
    out->gbps_best = NAN;
    out->launches_per_run = 1;

    bw_probe p;
    clkv_status st = bw_open(ctx, bytes, &p);
    if (st != CLKV_OK) {
        return st;
    }
    double first = 0.0;
    st = bw_time(ctx, &p.launch, 1, &first);
    if (st == CLKV_OK) {
        int launches = first > 0.0 ? (int)ceil(0.02 / first) : 20;
        launches = launches < 1 ? 1 : (launches > 50 ? 50 : launches);
        out->launches_per_run = launches;
        double gbps[64];
        for (int r = 0; r < runs && st == CLKV_OK; r++) {
            double secs = 0.0;
            st = bw_time(ctx, &p.launch, launches, &secs);
            gbps[r] = (double)bytes / secs * 1e-9;
        }
        if (st == CLKV_OK) {
            out->gbps_median = tool_median(gbps, runs);
            out->gbps_best = tool_max(gbps, runs);
        }
    }
    bw_close(ctx, &p);
    return st;
}

clkv_status tool_time_read(clkv_context *ctx, uint64_t bytes, int iters, int repeats,
                           double *median_s) {
    *median_s = NAN;
    bytes = (bytes + 15) & ~(uint64_t)15;
    /* The strided probe steps a 32-bit float4 index past the end by up to BW_UNROLL grid
     * strides before its loop test: keep the count at half the index range. */
    if (bytes == 0 || bytes / 16 > UINT32_MAX / 2) {
        return CLKV_OK; /* nothing to read, or beyond the probe's index range */
    }
    iters = iters < 1 ? 1 : iters;
    repeats = repeats < 1 ? 1 : (repeats > 64 ? 64 : repeats);
    bw_probe p;
    clkv_status st = bw_open(ctx, bytes, &p);
    if (st != CLKV_OK) {
        return st;
    }
    double t[64];
    for (int r = 0; r < repeats && st == CLKV_OK; r++) {
        st = bw_time(ctx, &p.launch, iters, &t[r]);
    }
    if (st == CLKV_OK) {
        *median_s = tool_median(t, repeats);
    }
    bw_close(ctx, &p);
    return st;
}
