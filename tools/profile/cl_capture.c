/* cl_capture: an LD_PRELOAD library that records one launch of an OpenCL kernel (its
 * program binary, arguments, buffer contents and NDRange) so that cuda_replay.c can launch
 * the same kernel through the CUDA driver API, where Nsight Compute can profile it (it does
 * not see kernels that NVIDIA's OpenCL launches). A developer tool for the GPU machine; not
 * part of the library or of the default build (see tools/profile/profile_kernel.sh).
 *
 * Environment:
 *   CAP_KERNEL   kernel name to capture (nothing is captured without it)
 *   CAP_NTH      which launch of that kernel, 1-based (default 5: past the warm-up)
 *   CAP_DIR      output directory (default /tmp/cl_capture)
 *   CAP_MAXSAVE  buffers larger than this many bytes are recorded without their contents
 *                (the replay fills them with a constant), default 1e9
 *
 * Output in CAP_DIR: manifest.txt (kernel name, NDRange, one line per argument: "mem ID
 * BYTES FILE" for a buffer, "val BYTES HEX" for a value, "local BYTES" for a __local
 * argument), k.bin (CL_PROGRAM_BINARIES: PTX on NVIDIA) and mID.bin per saved buffer.
 * The capture waits for the queue (clFinish), so the buffers hold what the kernel reads. */
#define _GNU_SOURCE
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_KERNELS 512
#define MAX_ARGS 40
#define MAX_ARG_BYTES 1024
#define MAX_MEMS 8192

typedef struct {
    cl_kernel kernel;
    int nargs;
    size_t size[MAX_ARGS];
    int is_null[MAX_ARGS];
    unsigned char value[MAX_ARGS][MAX_ARG_BYTES];
} kernel_args;

static kernel_args g_args[MAX_KERNELS];
static int g_nkernels;
static cl_mem g_mems[MAX_MEMS];
static size_t g_mem_size[MAX_MEMS];
static int g_nmems;
static int g_launches, g_done;

static kernel_args *args_of(cl_kernel k, int add) {
    for (int i = 0; i < g_nkernels; i++)
        if (g_args[i].kernel == k)
            return &g_args[i];
    if (!add || g_nkernels >= MAX_KERNELS)
        return NULL;
    memset(&g_args[g_nkernels], 0, sizeof(kernel_args));
    g_args[g_nkernels].kernel = k;
    return &g_args[g_nkernels++];
}

static void remember_mem(cl_mem m, size_t size) {
    if (!m)
        return;
    for (int i = 0; i < g_nmems; i++)
        if (g_mems[i] == m) { /* a released handle reused */
            g_mem_size[i] = size;
            return;
        }
    if (g_nmems < MAX_MEMS) {
        g_mems[g_nmems] = m;
        g_mem_size[g_nmems++] = size;
    }
}

/* the next definition of fn (the ICD loader's), looked up once */
static void *next_fn(void **slot, const char *name) {
    if (!*slot)
        *slot = dlsym(RTLD_NEXT, name);
    return *slot;
}
#define NEXT(fn) ((fn##_t)next_fn(&fn##_next, #fn))

typedef cl_mem (*clCreateBuffer_t)(cl_context, cl_mem_flags, size_t, void *, cl_int *);
static void *clCreateBuffer_next;
cl_mem clCreateBuffer(cl_context c, cl_mem_flags f, size_t s, void *h, cl_int *e) {
    cl_mem m = NEXT(clCreateBuffer)(c, f, s, h, e);
    remember_mem(m, s);
    return m;
}

typedef cl_mem (*clCreateBufferWithProperties_t)(cl_context, const cl_mem_properties *,
                                                 cl_mem_flags, size_t, void *, cl_int *);
static void *clCreateBufferWithProperties_next;
cl_mem clCreateBufferWithProperties(cl_context c, const cl_mem_properties *p, cl_mem_flags f,
                                    size_t s, void *h, cl_int *e) {
    cl_mem m = NEXT(clCreateBufferWithProperties)(c, p, f, s, h, e);
    remember_mem(m, s);
    return m;
}

typedef cl_mem (*clCreateSubBuffer_t)(cl_mem, cl_mem_flags, cl_buffer_create_type, const void *,
                                      cl_int *);
static void *clCreateSubBuffer_next;
cl_mem clCreateSubBuffer(cl_mem b, cl_mem_flags f, cl_buffer_create_type t, const void *info,
                         cl_int *e) {
    cl_mem m = NEXT(clCreateSubBuffer)(b, f, t, info, e);
    if (m && t == CL_BUFFER_CREATE_TYPE_REGION)
        remember_mem(m, ((const cl_buffer_region *)info)->size);
    return m;
}

typedef cl_int (*clSetKernelArg_t)(cl_kernel, cl_uint, size_t, const void *);
static void *clSetKernelArg_next;
cl_int clSetKernelArg(cl_kernel k, cl_uint i, size_t s, const void *v) {
    const cl_int r = NEXT(clSetKernelArg)(k, i, s, v);
    kernel_args *a = args_of(k, 1);
    if (r == CL_SUCCESS && a && i < MAX_ARGS && s <= MAX_ARG_BYTES) {
        a->size[i] = s;
        a->is_null[i] = v == NULL;
        if (v)
            memcpy(a->value[i], v, s);
        if ((int)i + 1 > a->nargs)
            a->nargs = (int)i + 1;
    }
    return r;
}

static int mem_index(const unsigned char *value) {
    cl_mem m;
    memcpy(&m, value, sizeof m);
    for (int j = 0; j < g_nmems; j++)
        if (g_mems[j] == m)
            return j;
    return -1;
}

static void save_buffer(cl_command_queue q, const char *dir, int mi, char *file, size_t len) {
    char path[600];
    snprintf(file, len, "m%d.bin", mi);
    snprintf(path, sizeof path, "%s/%s", dir, file);
    struct stat st;
    if (stat(path, &st) == 0)
        return; /* the same buffer in an earlier argument */
    void *buf = malloc(g_mem_size[mi] ? g_mem_size[mi] : 1);
    FILE *f = NULL;
    if (buf &&
        clEnqueueReadBuffer(q, g_mems[mi], CL_TRUE, 0, g_mem_size[mi], buf, 0, NULL, NULL) ==
            CL_SUCCESS &&
        (f = fopen(path, "wb")) != NULL && fwrite(buf, 1, g_mem_size[mi], f) == g_mem_size[mi]) {
        fclose(f);
    } else {
        if (f)
            fclose(f);
        fprintf(stderr, "[cl_capture] buffer %d not saved\n", mi);
        snprintf(file, len, "-");
    }
    free(buf);
}

static void capture(cl_command_queue q, cl_kernel k, cl_uint dims, const size_t *off,
                    const size_t *gsz, const size_t *lsz) {
    const char *dir = getenv("CAP_DIR") ? getenv("CAP_DIR") : "/tmp/cl_capture";
    const double max_save = getenv("CAP_MAXSAVE") ? atof(getenv("CAP_MAXSAVE")) : 1e9;
    char path[600], name[256] = {0};
    mkdir(dir, 0755);
    clFinish(q);
    snprintf(path, sizeof path, "%s/manifest.txt", dir);
    FILE *mf = fopen(path, "w");
    if (!mf) {
        fprintf(stderr, "[cl_capture] cannot write %s\n", path);
        return;
    }
    clGetKernelInfo(k, CL_KERNEL_FUNCTION_NAME, sizeof name - 1, name, NULL);
    fprintf(mf, "kernel %s\ndims %u\n", name, dims);
    for (cl_uint i = 0; i < 3; i++)
        fprintf(mf, "global %zu\n", i < dims ? gsz[i] : (size_t)1);
    for (cl_uint i = 0; i < 3; i++)
        fprintf(mf, "local %zu\n", i < dims && lsz ? lsz[i] : (size_t)1);
    for (cl_uint i = 0; i < 3; i++)
        fprintf(mf, "offset %zu\n", i < dims && off ? off[i] : (size_t)0);

    cl_program prog;
    size_t bin_size[8] = {0};
    clGetKernelInfo(k, CL_KERNEL_PROGRAM, sizeof prog, &prog, NULL);
    clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof bin_size, bin_size, NULL);
    unsigned char *bin = malloc(bin_size[0] + 1), *bins[8] = {bin};
    if (bin && clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bins, bins, NULL) == CL_SUCCESS) {
        snprintf(path, sizeof path, "%s/k.bin", dir);
        FILE *pf = fopen(path, "wb");
        if (pf) {
            fwrite(bin, 1, bin_size[0], pf);
            fclose(pf);
        }
    }
    free(bin);

    const kernel_args *a = args_of(k, 0);
    cl_uint na = 0;
    clGetKernelInfo(k, CL_KERNEL_NUM_ARGS, sizeof na, &na, NULL);
    fprintf(mf, "nargs %u\n", na);
    for (cl_uint i = 0; i < na; i++) {
        if (!a || (int)i >= a->nargs || (!a->is_null[i] && a->size[i] == 0)) {
            fprintf(mf, "arg %u missing\n", i);
            continue;
        }
        if (a->is_null[i]) {
            fprintf(mf, "arg %u local %zu\n", i, a->size[i]);
            continue;
        }
        const int mi = a->size[i] == sizeof(cl_mem) ? mem_index(a->value[i]) : -1;
        if (mi >= 0) {
            char file[64] = "-";
            if ((double)g_mem_size[mi] <= max_save)
                save_buffer(q, dir, mi, file, sizeof file);
            fprintf(mf, "arg %u mem %d %zu %s\n", i, mi, g_mem_size[mi], file);
        } else {
            fprintf(mf, "arg %u val %zu ", i, a->size[i]);
            for (size_t j = 0; j < a->size[i]; j++)
                fprintf(mf, "%02x", a->value[i][j]);
            fprintf(mf, "\n");
        }
    }
    fclose(mf);
    fprintf(stderr, "[cl_capture] captured %s (%u arguments) into %s\n", name, na, dir);
}

typedef cl_int (*clEnqueueNDRangeKernel_t)(cl_command_queue, cl_kernel, cl_uint, const size_t *,
                                           const size_t *, const size_t *, cl_uint,
                                           const cl_event *, cl_event *);
static void *clEnqueueNDRangeKernel_next;
cl_int clEnqueueNDRangeKernel(cl_command_queue q, cl_kernel k, cl_uint dims, const size_t *off,
                              const size_t *gsz, const size_t *lsz, cl_uint nw,
                              const cl_event *wait, cl_event *ev) {
    const char *want = getenv("CAP_KERNEL");
    if (want && !g_done) {
        char name[256] = {0};
        clGetKernelInfo(k, CL_KERNEL_FUNCTION_NAME, sizeof name - 1, name, NULL);
        const int nth = getenv("CAP_NTH") ? atoi(getenv("CAP_NTH")) : 5;
        if (!strcmp(name, want) && ++g_launches == nth) {
            if (nw)
                clWaitForEvents(nw, wait);
            capture(q, k, dims, off, gsz, lsz);
            g_done = 1;
        }
    }
    return NEXT(clEnqueueNDRangeKernel)(q, k, dims, off, gsz, lsz, nw, wait, ev);
}
