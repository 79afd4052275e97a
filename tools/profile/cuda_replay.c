/* cuda_replay DIR [ITERS]: launch a kernel captured by cl_capture.c (an NVIDIA OpenCL
 * program's PTX, arguments and buffers) through the CUDA driver API, ITERS times (default
 * 20), and print its registers, static and per-thread local memory and median time (CUDA events).
 * Run it under Nsight Compute to profile an OpenCL kernel (tools/profile/profile_kernel.sh).
 *
 * NVIDIA's OpenCL PTX reads part of the NDRange from %envreg special registers, which a
 * CUDA launch leaves undefined (seen in pkv_rerank's PTX: get_group_id(d) = %ctaid.d +
 * %envreg{d}, get_num_groups(1) = %envreg7; 6 and 8 taken to be dimensions 0 and 2; the
 * select kernels' get_global_id(1) reads %envreg4, taken to be the global offset of
 * dimension 1, so 3-5 are the offsets): the replay writes %envreg0-5 as 0 and %envreg6-8
 * as the grid's size and refuses PTX that reads any other (launches with a global offset
 * are refused too). Before %envreg6-8 were set,
 * kernels striding by get_num_groups (score_window_mma's interleaved tiles) looped forever. __local
 * kernel arguments are not supported. Replayed times came within a few per cent of the OpenCL
 * launches' (H100, 2026-11-28: bf16 decode B 8 128K 1428.6 against 1432.5 us per call). */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ARGS 64
#define MAX_MEMS 8192

static void check(CUresult r, const char *what) {
    if (r != CUDA_SUCCESS) {
        const char *s = "?";
        cuGetErrorString(r, &s);
        fprintf(stderr, "cuda_replay: %s: %s\n", what, s);
        exit(1);
    }
}
#define CK(x) check((x), #x)

static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    rewind(f);
    char *buf = calloc(1, (size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (len)
        *len = (size_t)n;
    return buf;
}

/* Every "%envregN" becomes its value in place, padded with blanks: 0 for N = 0..5 (group
 * and global offsets), the grid's size for N = 6..8 (numbers of groups). Returns 0 when the PTX
 * reads another one (unknown meaning) or a value does not fit. */
static int patch_envregs(char *ptx, const size_t grid[3]) {
    for (char *c = ptx; (c = strstr(c, "%envreg")) != NULL;) {
        char *end = c + 7;
        const long k = strtol(end, &end, 10);
        char val[32];
        if (k >= 0 && k <= 5) /* 3..5 taken to be the global offsets (get_global_id) */
            snprintf(val, sizeof val, "0");
        else if (k >= 6 && k <= 8)
            snprintf(val, sizeof val, "%zu", grid[k - 6]);
        else {
            fprintf(stderr, "cuda_replay: the PTX reads %%envreg%ld (meaning unknown)\n", k);
            return 0;
        }
        const size_t width = (size_t)(end - c), n = strlen(val);
        if (n > width) {
            fprintf(stderr, "cuda_replay: %%envreg%ld = %s does not fit\n", k, val);
            return 0;
        }
        memcpy(c, val, n);
        memset(c + n, ' ', width - n);
        c = end;
    }
    return 1;
}

static CUdeviceptr g_mem[MAX_MEMS];

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: cuda_replay DIR [ITERS]\n");
        return 2;
    }
    const char *dir = argv[1];
    const int iters = argc > 2 ? atoi(argv[2]) : 20;
    char path[1024], line[8192], kname[256] = {0};
    size_t gsz[3] = {1, 1, 1}, lsz[3] = {1, 1, 1}, off[3] = {0, 0, 0};
    int ng = 0, nl = 0, no = 0, nargs = 0;
    void *params[MAX_ARGS] = {0};
    CUdeviceptr ptrs[MAX_ARGS];

    CK(cuInit(0));
    CUdevice dev;
    CUcontext ctx;
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));

    snprintf(path, sizeof path, "%s/manifest.txt", dir);
    FILE *mf = fopen(path, "r");
    if (!mf) {
        perror(path);
        return 1;
    }
    while (fgets(line, sizeof line, mf)) {
        char word[32], kind[16];
        int i;
        if (sscanf(line, "%31s", word) != 1)
            continue;
        if (!strcmp(word, "kernel"))
            sscanf(line, "kernel %255s", kname);
        else if (!strcmp(word, "global") && ng < 3)
            sscanf(line, "global %zu", &gsz[ng++]);
        else if (!strcmp(word, "local") && nl < 3)
            sscanf(line, "local %zu", &lsz[nl++]);
        else if (!strcmp(word, "offset") && no < 3)
            sscanf(line, "offset %zu", &off[no++]);
        else if (!strcmp(word, "nargs"))
            sscanf(line, "nargs %d", &nargs);
        else if (!strcmp(word, "arg") && sscanf(line, "arg %d %15s", &i, kind) == 2 && i >= 0 &&
                 i < MAX_ARGS) {
            if (!strcmp(kind, "mem")) {
                int id;
                size_t bytes;
                char file[128];
                if (sscanf(line, "arg %*d mem %d %zu %127s", &id, &bytes, file) != 3 || id < 0 ||
                    id >= MAX_MEMS) {
                    fprintf(stderr, "cuda_replay: bad line: %s", line);
                    return 1;
                }
                if (!g_mem[id]) {
                    CK(cuMemAlloc(&g_mem[id], bytes ? bytes : 16));
                    if (strcmp(file, "-")) {
                        size_t len = 0;
                        snprintf(path, sizeof path, "%s/%s", dir, file);
                        char *buf = read_file(path, &len);
                        if (!buf || len != bytes) {
                            fprintf(stderr, "cuda_replay: %s: missing or short\n", path);
                            return 1;
                        }
                        CK(cuMemcpyHtoD(g_mem[id], buf, bytes));
                        free(buf);
                    } else { /* not saved: 16-bit 1.0 (f16) / a small bf16 value */
                        CK(cuMemsetD32(g_mem[id], 0x3c003c00u, bytes / 4));
                    }
                }
                ptrs[i] = g_mem[id];
                params[i] = &ptrs[i];
            } else if (!strcmp(kind, "val")) {
                size_t bytes;
                const char *hex = strstr(line, " val ");
                if (!hex || sscanf(hex, " val %zu", &bytes) != 1 || bytes > 1024) {
                    fprintf(stderr, "cuda_replay: bad line: %s", line);
                    return 1;
                }
                hex = strchr(hex + 5, ' ');
                if (!hex || strlen(hex + 1) < 2 * bytes) {
                    fprintf(stderr, "cuda_replay: bad line: %s", line);
                    return 1;
                }
                hex++;
                unsigned char *v = calloc(1, bytes + 8);
                for (size_t j = 0; j < bytes; j++) {
                    unsigned x = 0;
                    sscanf(hex + 2 * j, "%2x", &x);
                    v[j] = (unsigned char)x;
                }
                params[i] = v;
            } else {
                fprintf(stderr, "cuda_replay: argument %d (%s) is not supported\n", i, kind);
                return 1;
            }
        }
    }
    fclose(mf);
    if (off[0] || off[1] || off[2]) {
        fprintf(stderr, "cuda_replay: global work offsets are not supported\n");
        return 1;
    }

    snprintf(path, sizeof path, "%s/k.bin", dir);
    char *ptx = read_file(path, NULL);
    if (!ptx) {
        perror(path);
        return 1;
    }
    const size_t grid[3] = {gsz[0] / lsz[0], gsz[1] / lsz[1], gsz[2] / lsz[2]};
    if (!patch_envregs(ptx, grid))
        return 1;
    /* the entry's parameters must match the captured arguments */
    int nparams = 0;
    /* ".entry NAME(": a bare strstr could stop at a comment naming the kernel first */
    char pat[300];
    snprintf(pat, sizeof pat, ".entry %s(", kname);
    const char *entry = strstr(ptx, pat);
    const char *lp = entry ? strchr(entry, '(') : NULL, *rp = lp ? strchr(lp, ')') : NULL;
    for (const char *c = lp; c && c < rp; c++)
        if (!strncmp(c, ".param", 6))
            nparams++;
    printf("%s: %d arguments, %d PTX parameters; grid %zu x %zu x %zu, block %zu x %zu x %zu\n",
           kname, nargs, nparams, grid[0], grid[1], grid[2], lsz[0], lsz[1], lsz[2]);
    if (nparams != nargs) {
        fprintf(stderr, "cuda_replay: parameter count mismatch\n");
        return 1;
    }

    CUmodule mod;
    CUfunction fn;
    char log[8192] = {0};
    CUjit_option jo[2] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *jv[2] = {log, (void *)(size_t)sizeof log};
    if (cuModuleLoadDataEx(&mod, ptx, 2, jo, jv) != CUDA_SUCCESS) {
        fprintf(stderr, "cuda_replay: PTX load failed:\n%s\n", log);
        return 1;
    }
    CK(cuModuleGetFunction(&fn, mod, kname));
    int regs = 0, smem = 0, spill = 0;
    cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, fn);
    cuFuncGetAttribute(&smem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn);
    cuFuncGetAttribute(&spill, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, fn); /* spills, stack */
    printf("registers %d, static local memory %d bytes, per-thread local memory %d bytes\n", regs,
           smem, spill);

    CUevent t0, t1;
    CK(cuEventCreate(&t0, 0));
    CK(cuEventCreate(&t1, 0));
    float *ms = calloc((size_t)(iters > 0 ? iters : 1), sizeof(float));
    for (int it = -2; it < iters; it++) { /* two untimed launches first */
        CK(cuEventRecord(t0, 0));
        CK(cuLaunchKernel(fn, (unsigned)grid[0], (unsigned)grid[1], (unsigned)grid[2],
                          (unsigned)lsz[0], (unsigned)lsz[1], (unsigned)lsz[2], 0, 0, params,
                          NULL));
        CK(cuEventRecord(t1, 0));
        CK(cuEventSynchronize(t1));
        if (it >= 0)
            CK(cuEventElapsedTime(&ms[it], t0, t1));
    }
    if (iters > 0) {
        qsort(ms, (size_t)iters, sizeof(float), cmp_float);
        printf("median %.2f us (min %.2f, max %.2f) over %d launches\n", 1e3 * ms[iters / 2],
               1e3 * ms[0], 1e3 * ms[iters - 1], iters);
    }
    return 0;
}
