/* Device enumeration, selection (SPEC §6) and the per-context device record. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/internal.h"

#ifndef CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV
#define CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV 0x4000
#define CL_DEVICE_COMPUTE_CAPABILITY_MINOR_NV 0x4001
#define CL_DEVICE_WARP_SIZE_NV 0x4003
#endif

#define MAX_PLATFORMS 16
#define MAX_DEVICES_PER_PLATFORM 32

int clkv__enumerate_devices(clkv_device_ref *refs, int cap) {
    cl_platform_id platforms[MAX_PLATFORMS];
    cl_uint np = 0;
    if (clGetPlatformIDs(MAX_PLATFORMS, platforms, &np) != CL_SUCCESS)
        return 0;
    if (np > MAX_PLATFORMS)
        np = MAX_PLATFORMS;
    int n = 0;
    for (cl_uint p = 0; p < np; p++) {
        cl_device_id devs[MAX_DEVICES_PER_PLATFORM];
        cl_uint nd = 0;
        if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, MAX_DEVICES_PER_PLATFORM, devs, &nd) !=
            CL_SUCCESS)
            continue;
        if (nd > MAX_DEVICES_PER_PLATFORM)
            nd = MAX_DEVICES_PER_PLATFORM;
        for (cl_uint d = 0; d < nd; d++) {
            if (n < cap) {
                refs[n].platform = platforms[p];
                refs[n].device = devs[d];
                refs[n].platform_index = (int)p;
                refs[n].device_index = (int)d;
                refs[n].type = 0;
                clGetDeviceInfo(devs[d], CL_DEVICE_TYPE, sizeof refs[n].type, &refs[n].type, NULL);
            }
            n++;
        }
    }
    return n < cap ? n : cap;
}

static int contains_nocase(const char *hay, const char *needle) {
    size_t n = strlen(needle);
    for (; *hay; hay++) {
        size_t i = 0;
        while (i < n && hay[i] &&
               tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i]))
            i++;
        if (i == n)
            return 1;
    }
    return n == 0;
}

static int first_of_type(const clkv_device_ref *refs, int n, cl_device_type type) {
    for (int i = 0; i < n; i++)
        if (refs[i].type & type)
            return i;
    return -1;
}

int clkv__select_device(const clkv_device_ref *refs, int n, const char *selector, char *why,
                        size_t why_cap) {
    const char *origin = "selector";
    if (!selector || !*selector) {
        selector = getenv("CLKV_DEVICE");
        origin = "CLKV_DEVICE";
    }
    if (n <= 0) {
        snprintf(why, why_cap, "no OpenCL device found (is an ICD such as PoCL installed?)");
        return -1;
    }
    if (!selector || !*selector) {
        int i = first_of_type(refs, n, CL_DEVICE_TYPE_GPU);
        if (i < 0)
            i = first_of_type(refs, n, CL_DEVICE_TYPE_CPU);
        if (i < 0)
            i = 0;
        return i;
    }
    int p, d;
    char extra;
    if (sscanf(selector, "%d:%d%c", &p, &d, &extra) == 2) {
        for (int i = 0; i < n; i++)
            if (refs[i].platform_index == p && refs[i].device_index == d)
                return i;
        snprintf(why, why_cap, "%s \"%s\": no device %d on platform %d", origin, selector, d, p);
        return -1;
    }
    if (strcmp(selector, "gpu") == 0 || strcmp(selector, "cpu") == 0) {
        int i =
            first_of_type(refs, n, selector[0] == 'g' ? CL_DEVICE_TYPE_GPU : CL_DEVICE_TYPE_CPU);
        if (i < 0)
            snprintf(why, why_cap, "%s \"%s\": no device of that type", origin, selector);
        return i;
    }
    for (int i = 0; i < n; i++) {
        char dev[256] = "", plat[256] = "";
        clGetDeviceInfo(refs[i].device, CL_DEVICE_NAME, sizeof dev - 1, dev, NULL);
        clGetPlatformInfo(refs[i].platform, CL_PLATFORM_NAME, sizeof plat - 1, plat, NULL);
        if (contains_nocase(dev, selector) || contains_nocase(plat, selector))
            return i;
    }
    snprintf(why, why_cap,
             "%s \"%s\" matches no device (use \"P:D\", \"gpu\", \"cpu\" or a name substring; "
             "`clkv devices` lists them)",
             origin, selector);
    return -1;
}

static void info_str(cl_device_id d, cl_device_info what, char *out, size_t cap) {
    out[0] = '\0';
    if (clGetDeviceInfo(d, what, cap - 1, out, NULL) != CL_SUCCESS)
        out[0] = '\0';
    out[cap - 1] = '\0';
}

/* A tiny kernel that uses shfl.sync: proves that inline PTX compiles and runs here. */
static const char *ptx_probe_src =
    "__kernel void probe(__global int *out) {\n"
    "  int v = (int)get_local_id(0), r;\n"
    "  asm volatile(\"shfl.sync.bfly.b32 %0, %1, 1, 0x1f, 0xffffffff;\" : \"=r\"(r) : \"r\"(v));\n"
    "  out[get_local_id(0)] = r;\n"
    "}\n";

static int probe_ptx(clkv_context *ctx) {
    cl_int err;
    int ok = 0;
    cl_program p = clCreateProgramWithSource(ctx->cl_ctx, 1, &ptx_probe_src, NULL, &err);
    if (err != CL_SUCCESS)
        return 0;
    cl_kernel k = NULL;
    cl_mem buf = NULL;
    if (clBuildProgram(p, 1, &ctx->device, "", NULL, NULL) != CL_SUCCESS)
        goto out;
    k = clCreateKernel(p, "probe", &err);
    if (err != CL_SUCCESS)
        goto out;
    buf = clCreateBuffer(ctx->cl_ctx, CL_MEM_READ_WRITE, 32 * sizeof(cl_int), NULL, &err);
    if (err != CL_SUCCESS)
        goto out;
    size_t g = 32;
    cl_int res[32];
    if (clSetKernelArg(k, 0, sizeof buf, &buf) != CL_SUCCESS ||
        clEnqueueNDRangeKernel(ctx->queue, k, 1, NULL, &g, &g, 0, NULL, NULL) != CL_SUCCESS ||
        clEnqueueReadBuffer(ctx->queue, buf, CL_TRUE, 0, sizeof res, res, 0, NULL, NULL) !=
            CL_SUCCESS)
        goto out;
    ok = 1;
    for (int i = 0; i < 32; i++)
        ok &= res[i] == (i ^ 1);
out:
    if (buf)
        clReleaseMemObject(buf);
    if (k)
        clReleaseKernel(k);
    clReleaseProgram(p);
    return ok;
}

clkv_status clkv__device_probe(clkv_context *ctx) {
    clkv_device_info *in = &ctx->info;
    cl_device_id d = ctx->device;
    memset(in, 0, sizeof *in);
    clGetPlatformInfo(ctx->platform, CL_PLATFORM_NAME, sizeof in->platform_name - 1,
                      in->platform_name, NULL);
    clGetPlatformInfo(ctx->platform, CL_PLATFORM_VERSION, sizeof in->platform_version - 1,
                      in->platform_version, NULL);
    info_str(d, CL_DEVICE_NAME, in->device_name, sizeof in->device_name);
    info_str(d, CL_DEVICE_VENDOR, in->vendor, sizeof in->vendor);
    info_str(d, CL_DRIVER_VERSION, in->driver_version, sizeof in->driver_version);
    cl_device_type type = 0;
    clGetDeviceInfo(d, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    in->kind = (type & CL_DEVICE_TYPE_GPU)   ? CLKV_DEVICE_KIND_GPU
               : (type & CL_DEVICE_TYPE_CPU) ? CLKV_DEVICE_KIND_CPU
                                             : CLKV_DEVICE_KIND_OTHER;
    cl_uint cu = 0;
    size_t wg = 0;
    cl_ulong lmem = 0, alloc = 0, gmem = 0;
    clGetDeviceInfo(d, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cu, &cu, NULL);
    clGetDeviceInfo(d, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof wg, &wg, NULL);
    clGetDeviceInfo(d, CL_DEVICE_LOCAL_MEM_SIZE, sizeof lmem, &lmem, NULL);
    clGetDeviceInfo(d, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof alloc, &alloc, NULL);
    clGetDeviceInfo(d, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof gmem, &gmem, NULL);
    in->compute_units = cu ? cu : 1;
    in->max_work_group_size = wg ? wg : 1;
    in->local_mem_bytes = lmem;
    in->static_local_mem_bytes = lmem;
    in->max_alloc_bytes = alloc;
    in->global_mem_bytes = gmem;
    in->warp_width = 1;

    int nvidia =
        contains_nocase(in->vendor, "nvidia") || contains_nocase(in->platform_name, "nvidia");
    if (nvidia && in->kind == CLKV_DEVICE_KIND_GPU) {
        cl_uint major = 0, minor = 0, warp = 0;
        if (clGetDeviceInfo(d, CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV, sizeof major, &major, NULL) ==
                CL_SUCCESS &&
            clGetDeviceInfo(d, CL_DEVICE_COMPUTE_CAPABILITY_MINOR_NV, sizeof minor, &minor, NULL) ==
                CL_SUCCESS) {
            in->compute_capability[0] = (int)major;
            in->compute_capability[1] = (int)minor;
        }
        if (clGetDeviceInfo(d, CL_DEVICE_WARP_SIZE_NV, sizeof warp, &warp, NULL) == CL_SUCCESS &&
            warp)
            in->warp_width = warp;
        /* Static __local arrays may exceed the 48 KiB dynamic limit on Volta and later
         * (PLATFORM.md: 232,444 bytes measured on sm_90); older parts keep the limit. */
        if (major >= 9)
            in->static_local_mem_bytes = 227 * 1024;
        else if (major >= 7)
            in->static_local_mem_bytes = 96 * 1024;
        in->nvidia_ptx = in->warp_width == 32 && probe_ptx(ctx);
    }
    clkv__log(ctx,
              "device: %s | %s | %s | driver %s | %u CUs | wg %llu | local %llu (static %llu) | "
              "max alloc %llu | ptx %d",
              in->platform_name, in->device_name, in->vendor, in->driver_version, in->compute_units,
              (unsigned long long)in->max_work_group_size, (unsigned long long)in->local_mem_bytes,
              (unsigned long long)in->static_local_mem_bytes,
              (unsigned long long)in->max_alloc_bytes, in->nvidia_ptx);
    return CLKV_OK;
}
