/* Program cache: builds kernels from the embedded sources with -D specializations.
 * A program's source is common.cl (the prelude) + the kernel file, whose
 * `#include "fragment.cl"` lines are replaced by those files (see expand_includes).
 *
 * In memory (per context) a program is keyed by kernel file + sorted options. On disk a
 * program binary is keyed by SHA-256 of (prelude + expanded source, options, device
 * name, driver version, platform version) and stored with a header holding that key, the
 * binary's size and the binary's own SHA-256; a file that is short, long, corrupt or made
 * for another key is rejected and rebuilt, never trusted. Writes go to a temporary file
 * that is renamed into place, so concurrent contexts never see a partial entry. The disk
 * cache is off on PoCL unless CLKV_CACHE asks for it (runtime/context.c says why). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/internal.h"

#define PRELUDE_FILE "common.cl"
#define DISK_MAGIC "CLKVPB01"
#define MAX_KERNELS_PER_PROGRAM 16

typedef struct kernel_slot {
    char name[64];
    cl_kernel kernel;
} kernel_slot;

struct clkv_program_entry {
    char file[64];
    char *options;
    cl_program program;
    kernel_slot kernels[MAX_KERNELS_PER_PROGRAM];
    int nkernels;
    struct clkv_program_entry *next;
};

/* ---- option sets ---- */

void clkv__defs_init(clkv_defs *d) {
    d->count = 0;
}

void clkv__defs_add(clkv_defs *d, const char *literal_name, long long value) {
    if (d->count >= CLKV_DEFS_MAX)
        return;
    d->names[d->count] = literal_name;
    d->values[d->count] = value;
    d->count++;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* "-cl-std=CL1.2 -DA=1 -DB=2 ..." with the caller's defines sorted, plus the context's
 * (its CLKV_BUILD_OPTIONS last), written into `out` (on the caller's stack; only on a
 * kernel-memo miss and for the disk-cache path). */
#define DEF_LEN 96 /* "NAME=VALUE" */
#define OPTIONS_MAX (32 + (CLKV_DEFS_MAX + 4) * (DEF_LEN + 3) + 256 /* CLKV_BUILD_OPTIONS */)

static void options_string(const clkv_context *ctx, const clkv_defs *defs, char out[OPTIONS_MAX]) {
    char text[CLKV_DEFS_MAX][DEF_LEN];
    const char *items[CLKV_DEFS_MAX + 4];
    int n = 0;
    for (int i = 0; defs && i < defs->count; i++) {
        snprintf(text[i], DEF_LEN, "%s=%lld", defs->names[i], defs->values[i]);
        items[n++] = text[i];
    }
    if (ctx->info.nvidia_ptx) {
        items[n++] = "CLKV_NVIDIA_PTX=1";
        if (ctx->cp_l2 == 64 || ctx->cp_l2 == 128 || ctx->cp_l2 == 256)
            items[n++] = ctx->cp_l2 == 64    ? "CLKV_CP_L2=64"
                         : ctx->cp_l2 == 128 ? "CLKV_CP_L2=128"
                                             : "CLKV_CP_L2=256";
    }
    qsort(items, (size_t)n, sizeof items[0], cmp_str);
    size_t len = (size_t)snprintf(out, OPTIONS_MAX, "-cl-std=CL1.2");
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(out + len, OPTIONS_MAX - len, " -D%s", items[i]);
    if (ctx->build_options[0] && len < OPTIONS_MAX)
        snprintf(out + len, OPTIONS_MAX - len, " %s", ctx->build_options);
}

/* ---- sources and keys ---- */

typedef struct program_source {
    char *prelude;
    size_t prelude_len;
    char *body;
    size_t body_len;
} program_source;

static void source_free(program_source *s) {
    free(s->prelude);
    free(s->body);
}

#define INCLUDE_PREFIX "#include \""

/* Kernel files share code that depends on their own macros through fragments: a line
 * `#include "fragment.cl"` is replaced here by that file (one level: a fragment includes
 * nothing), so the compiler gets one self-contained source and the disk-cache key
 * covers the fragments. */
static clkv_status expand_includes(clkv_context *ctx, const char *file, char **text, size_t *len) {
    const size_t plen = strlen(INCLUDE_PREFIX);
    for (size_t at = 0; at < *len;) {
        char *line = *text + at;
        char *eol = memchr(line, '\n', *len - at);
        const size_t line_len = eol ? (size_t)(eol - line) : *len - at;
        if (line_len <= plen || strncmp(line, INCLUDE_PREFIX, plen) != 0) {
            at += line_len + 1;
            continue;
        }
        char name[256];
        const char *q = memchr(line + plen, '"', line_len - plen);
        const size_t nlen = q ? (size_t)(q - line - plen) : 0;
        if (!q || nlen == 0 || nlen >= sizeof name)
            return clkv__fail(ctx, CLKV_ERR_KERNEL_SOURCE, "kernel source %s: malformed #include",
                              file);
        memcpy(name, line + plen, nlen);
        name[nlen] = '\0';
        char *frag = NULL;
        size_t flen = 0;
        clkv_status st = clkv__kernel_source(ctx, name, &frag, &flen);
        if (st != CLKV_OK) {
            char why[512];
            snprintf(why, sizeof why, "%s", clkv_last_error(ctx));
            return clkv__fail(ctx, st, "kernel source %s: #include: %s", file, why);
        }
        if (strstr(frag, "\n" INCLUDE_PREFIX) || strncmp(frag, INCLUDE_PREFIX, plen) == 0) {
            free(frag);
            return clkv__fail(ctx, CLKV_ERR_KERNEL_SOURCE,
                              "kernel source %s: fragment %s includes another file", file, name);
        }
        const size_t n = *len - line_len + flen;
        char *out = malloc(n + 1);
        if (!out) {
            free(frag);
            return clkv__fail(ctx, CLKV_ERR_OUT_OF_HOST_MEMORY, "kernel source %s: %zu bytes", file,
                              n);
        }
        memcpy(out, *text, at);
        memcpy(out + at, frag, flen);
        memcpy(out + at + flen, line + line_len, *len - at - line_len);
        out[n] = '\0';
        free(frag);
        free(*text);
        *text = out;
        *len = n;
        at += flen;
    }
    return CLKV_OK;
}

static clkv_status source_load(clkv_context *ctx, const char *file, program_source *s) {
    memset(s, 0, sizeof *s);
    clkv_status st = clkv__kernel_source(ctx, PRELUDE_FILE, &s->prelude, &s->prelude_len);
    if (st == CLKV_OK)
        st = clkv__kernel_source(ctx, file, &s->body, &s->body_len);
    if (st == CLKV_OK)
        st = expand_includes(ctx, file, &s->body, &s->body_len);
    if (st != CLKV_OK)
        source_free(s);
    return st;
}

static void hash_field(clkv_sha256 *h, const char *data, size_t n) {
    uint64_t len = n; /* length-prefixed so fields cannot run into each other */
    clkv__sha256_update(h, &len, sizeof len);
    clkv__sha256_update(h, data, n);
}

static void disk_key(const clkv_context *ctx, const program_source *s, const char *options,
                     uint8_t key[32]) {
    clkv_sha256 h;
    clkv__sha256_init(&h);
    hash_field(&h, DISK_MAGIC, strlen(DISK_MAGIC));
    hash_field(&h, s->prelude, s->prelude_len);
    hash_field(&h, s->body, s->body_len);
    hash_field(&h, options, strlen(options));
    hash_field(&h, ctx->info.device_name, strlen(ctx->info.device_name));
    hash_field(&h, ctx->info.driver_version, strlen(ctx->info.driver_version));
    hash_field(&h, ctx->info.platform_version, strlen(ctx->info.platform_version));
    clkv__sha256_final(&h, key);
}

static void entry_path(const clkv_context *ctx, const uint8_t key[32], char *path, size_t cap) {
    char hex[65];
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", key[i]);
    snprintf(path, cap, "%s/%s.clbin", ctx->cache_dir, hex);
}

/* ---- disk entries ---- */

static int mkdir_p(const char *dir) {
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", dir);
    for (char *p = tmp + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    }
    return (mkdir(tmp, 0755) != 0 && errno != EEXIST) ? -1 : 0;
}

/* Returns a malloc'd verified binary, or NULL (absent: *rejected = 0; bad: *rejected = 1). */
static unsigned char *disk_load(const char *path, const uint8_t key[32], size_t *size,
                                int *rejected) {
    *rejected = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    *rejected = 1;
    unsigned char *bin = NULL;
    char magic[8];
    uint8_t file_key[32], digest[32], check[32];
    uint64_t n = 0;
    long file_size = -1;
    if (fseek(f, 0, SEEK_END) == 0)
        file_size = ftell(f);
    rewind(f);
    if (fread(magic, 1, 8, f) != 8 || memcmp(magic, DISK_MAGIC, 8) != 0)
        goto out;
    if (fread(file_key, 1, 32, f) != 32 || memcmp(file_key, key, 32) != 0)
        goto out;
    if (fread(&n, sizeof n, 1, f) != 1 || fread(digest, 1, 32, f) != 32)
        goto out;
    if (file_size < 0 || (uint64_t)file_size != 8 + 32 + sizeof n + 32 + n || n == 0)
        goto out;
    bin = malloc((size_t)n);
    if (!bin || fread(bin, 1, (size_t)n, f) != n)
        goto fail;
    clkv__sha256(bin, (size_t)n, check);
    if (memcmp(check, digest, 32) != 0)
        goto fail;
    *size = (size_t)n;
    *rejected = 0;
    goto out;
fail:
    free(bin);
    bin = NULL;
out:
    fclose(f);
    return bin;
}

static void disk_store(clkv_context *ctx, const char *path, const uint8_t key[32],
                       const unsigned char *bin, size_t size) {
    if (mkdir_p(ctx->cache_dir) != 0) {
        clkv__log(ctx, "program cache: cannot create %s: %s", ctx->cache_dir, strerror(errno));
        return;
    }
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%p", path, (long)getpid(), (const void *)ctx);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        clkv__log(ctx, "program cache: cannot write %s: %s", tmp, strerror(errno));
        return;
    }
    uint8_t digest[32];
    clkv__sha256(bin, size, digest);
    uint64_t n = size;
    int ok = fwrite(DISK_MAGIC, 1, 8, f) == 8 && fwrite(key, 1, 32, f) == 32 &&
             fwrite(&n, sizeof n, 1, f) == 1 && fwrite(digest, 1, 32, f) == 32 &&
             fwrite(bin, 1, size, f) == size;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        clkv__log(ctx, "program cache: write of %s failed", path);
        remove(tmp);
        return;
    }
    clkv__log(ctx, "program cache: stored %s (%zu bytes)", path, size);
}

/* ---- building ---- */

/* The program's build log as a malloc'd string ("" when the driver gives none), NULL when
 * out of host memory. */
static char *build_log_text(clkv_context *ctx, cl_program program) {
    size_t n = 0;
    clGetProgramBuildInfo(program, ctx->device, CL_PROGRAM_BUILD_LOG, 0, NULL, &n);
    char *log = malloc(n + 1);
    if (!log)
        return NULL;
    if (clGetProgramBuildInfo(program, ctx->device, CL_PROGRAM_BUILD_LOG, n, log, NULL) !=
        CL_SUCCESS)
        n = 0;
    log[n] = '\0';
    return log;
}

static clkv_status keep_build_log(clkv_context *ctx, cl_program program) {
    char *log = build_log_text(ctx, program);
    if (!log)
        return CLKV_ERR_OUT_OF_HOST_MEMORY;
    free(ctx->build_log);
    ctx->build_log = log;
    return CLKV_OK;
}

static cl_program build_from_binary(clkv_context *ctx, const unsigned char *bin, size_t size,
                                    const char *options) {
    cl_int err, bin_status;
    cl_program p =
        clCreateProgramWithBinary(ctx->cl_ctx, 1, &ctx->device, &size, &bin, &bin_status, &err);
    if (err != CL_SUCCESS || bin_status != CL_SUCCESS)
        return p ? (clReleaseProgram(p), NULL) : NULL;
    if (clBuildProgram(p, 1, &ctx->device, options, NULL, NULL) != CL_SUCCESS) {
        clReleaseProgram(p);
        return NULL;
    }
    return p;
}

static clkv_status build_from_source(clkv_context *ctx, const char *file, const program_source *s,
                                     const char *options, cl_program *out) {
    const char *strings[2] = {s->prelude, s->body};
    size_t lengths[2] = {s->prelude_len, s->body_len};
    cl_int err;
    cl_program p = clCreateProgramWithSource(ctx->cl_ctx, 2, strings, lengths, &err);
    if (err != CL_SUCCESS)
        return clkv__fail_cl(ctx, err, "clCreateProgramWithSource");
    err = clBuildProgram(p, 1, &ctx->device, options, NULL, NULL);
    ctx->stats.builds++;
    if (err != CL_SUCCESS) {
        keep_build_log(ctx, p);
        clReleaseProgram(p);
        clkv__log(ctx, "build of %s failed (%s):\n%s", file, options, clkv_last_build_log(ctx));
        return clkv__fail(ctx, err,
                          "building %s with \"%s\" failed: %s (build log in "
                          "clkv_last_build_log)",
                          file, options, clkv_status_string(err));
    }
    if (ctx->log_enabled) { /* e.g. ptxas's register counts with -cl-nv-verbose; ctx->build_log
                             * keeps the last failed build's */
        char *log = build_log_text(ctx, p);
        if (log && log[0])
            clkv__log(ctx, "build log of %s:\n%s", file, log);
        free(log);
    }
    *out = p;
    return CLKV_OK;
}

static unsigned char *program_binary(cl_program p, size_t *size) {
    size_t n = 0;
    if (clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof n, &n, NULL) != CL_SUCCESS || !n)
        return NULL;
    unsigned char *bin = malloc(n);
    if (!bin)
        return NULL;
    if (clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof bin, &bin, NULL) != CL_SUCCESS) {
        free(bin);
        return NULL;
    }
    *size = n;
    return bin;
}

static clkv_status load_program(clkv_context *ctx, const char *file, const char *options,
                                cl_program *out) {
    program_source s;
    clkv_status st = source_load(ctx, file, &s);
    if (st != CLKV_OK)
        return st;
    uint8_t key[32];
    char path[1200] = "";
    if (ctx->disk_cache_enabled) {
        disk_key(ctx, &s, options, key);
        entry_path(ctx, key, path, sizeof path);
        size_t size = 0;
        int rejected = 0;
        unsigned char *bin = disk_load(path, key, &size, &rejected);
        if (bin) {
            cl_program p = build_from_binary(ctx, bin, size, options);
            free(bin);
            if (p) {
                ctx->stats.disk_hits++;
                clkv__log(ctx, "program cache: disk hit %s for %s %s", path, file, options);
                source_free(&s);
                *out = p;
                return CLKV_OK;
            }
            rejected = 1;
        }
        if (rejected) {
            ctx->stats.disk_rejected++;
            clkv__log(ctx, "program cache: rejected %s (corrupt, truncated or stale); rebuilding",
                      path);
            remove(path);
        }
    }
    clkv__log(ctx, "program cache: building %s %s", file, options);
    st = build_from_source(ctx, file, &s, options, out);
    source_free(&s);
    if (st == CLKV_OK && ctx->disk_cache_enabled) {
        size_t size = 0;
        unsigned char *bin = program_binary(*out, &size);
        if (bin)
            disk_store(ctx, path, key, bin, size);
        free(bin);
    }
    return st;
}

int clkv__disk_cache_path(clkv_context *ctx, const char *file, const clkv_defs *defs, char *path,
                          size_t cap) {
    if (!ctx->disk_cache_enabled)
        return -1;
    char options[OPTIONS_MAX];
    options_string(ctx, defs, options);
    program_source s;
    if (source_load(ctx, file, &s) != CLKV_OK)
        return -1;
    uint8_t key[32];
    disk_key(ctx, &s, options, key);
    entry_path(ctx, key, path, cap);
    source_free(&s);
    return 0;
}

/* ---- in-memory cache ---- */

static void entry_free(struct clkv_program_entry *e) {
    for (int i = 0; i < e->nkernels; i++)
        clReleaseKernel(e->kernels[i].kernel);
    if (e->program)
        clReleaseProgram(e->program);
    free(e->options);
    free(e);
}

/* ---- kernel memo ----
 * A direct-mapped table in front of the program list: a hit returns the kernel from the
 * -D set as given, without writing the option text, sorting it and comparing it with
 * every cached program (about 2 us of host time per launch before; NVIDIA launches are
 * host-bound below a few MB of K/V). A slot holds one (file, kernel name, -D set) as
 * given by a caller: the names of the set by pointer (literals, see clkv__defs_int), the
 * file and kernel names as text. A different order of the same defines is another slot
 * that resolves to the same program. */
#define MEMO_SLOTS 128

typedef struct memo_slot {
    cl_kernel kernel; /* NULL: empty */
    char file[64];
    char name[64];
    clkv_defs defs;
} memo_slot;

struct clkv_kernel_memo {
    memo_slot slot[MEMO_SLOTS];
};

static uint64_t memo_hash(const char *file, const clkv_defs *defs, const char *kernel_name) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a over the texts, the name pointers, values */
    for (const char *c = file; *c; c++)
        h = (h ^ (unsigned char)*c) * 1099511628211ull;
    for (const char *c = kernel_name; *c; c++)
        h = (h ^ (unsigned char)*c) * 1099511628211ull;
    for (int i = 0; defs && i < defs->count; i++) {
        h = (h ^ (uint64_t)(uintptr_t)defs->names[i]) * 1099511628211ull;
        h = (h ^ (uint64_t)defs->values[i]) * 1099511628211ull;
    }
    return h;
}

static int memo_match(const memo_slot *m, const char *file, const clkv_defs *defs,
                      const char *kernel_name) {
    const int n = defs ? defs->count : 0;
    if (!m->kernel || m->defs.count != n || strcmp(m->file, file) != 0 ||
        strcmp(m->name, kernel_name) != 0)
        return 0;
    for (int i = 0; i < n; i++)
        if (m->defs.names[i] != defs->names[i] || m->defs.values[i] != defs->values[i])
            return 0;
    return 1;
}

static void memo_put(memo_slot *m, const char *file, const clkv_defs *defs, const char *kernel_name,
                     cl_kernel kernel) {
    /* names that do not fit are not memoized (the slow path still finds them) */
    if (!m || strlen(file) >= sizeof m->file || strlen(kernel_name) >= sizeof m->name)
        return;
    m->kernel = kernel;
    memcpy(m->file, file, strlen(file) + 1);
    memcpy(m->name, kernel_name, strlen(kernel_name) + 1);
    m->defs.count = defs ? defs->count : 0;
    for (int i = 0; i < m->defs.count; i++) {
        m->defs.names[i] = defs->names[i];
        m->defs.values[i] = defs->values[i];
    }
}

void clkv__program_cache_clear(clkv_context *ctx) {
    free(ctx->memo); /* its kernels belong to the programs released below */
    ctx->memo = NULL;
    struct clkv_program_entry *e = ctx->programs;
    while (e) {
        struct clkv_program_entry *next = e->next;
        entry_free(e);
        e = next;
    }
    ctx->programs = NULL;
}

static clkv_status find_or_build(clkv_context *ctx, const char *file, const clkv_defs *defs,
                                 struct clkv_program_entry **out) {
    char options[OPTIONS_MAX];
    options_string(ctx, defs, options);
    for (struct clkv_program_entry *e = ctx->programs; e; e = e->next) {
        if (strcmp(e->file, file) == 0 && strcmp(e->options, options) == 0) {
            ctx->stats.memory_hits++;
            *out = e;
            return CLKV_OK;
        }
    }
    struct clkv_program_entry *e = calloc(1, sizeof *e);
    char *kept = strdup(options);
    if (!e || !kept) {
        free(e);
        free(kept);
        return clkv__fail(ctx, CLKV_ERR_OUT_OF_HOST_MEMORY, "program cache entry for %s", file);
    }
    snprintf(e->file, sizeof e->file, "%s", file);
    e->options = kept;
    clkv_status st = load_program(ctx, file, options, &e->program);
    if (st != CLKV_OK) {
        entry_free(e);
        return st;
    }
    e->next = ctx->programs;
    ctx->programs = e;
    *out = e;
    return CLKV_OK;
}

clkv_status clkv__get_kernel(clkv_context *ctx, const char *file, const clkv_defs *defs,
                             const char *kernel_name, cl_kernel *out) {
    if (!ctx->memo)
        ctx->memo = calloc(1, sizeof *ctx->memo); /* none (out of memory): no memo */
    memo_slot *m =
        ctx->memo ? &ctx->memo->slot[memo_hash(file, defs, kernel_name) % MEMO_SLOTS] : NULL;
    if (m && memo_match(m, file, defs, kernel_name)) {
        ctx->stats.memory_hits++;
        *out = m->kernel;
        return CLKV_OK;
    }
    struct clkv_program_entry *e = NULL;
    clkv_status st = find_or_build(ctx, file, defs, &e);
    if (st != CLKV_OK)
        return st;
    for (int i = 0; i < e->nkernels; i++) {
        if (strcmp(e->kernels[i].name, kernel_name) == 0) {
            *out = e->kernels[i].kernel;
            memo_put(m, file, defs, kernel_name, *out);
            return CLKV_OK;
        }
    }
    if (e->nkernels == MAX_KERNELS_PER_PROGRAM)
        return clkv__fail(ctx, CLKV_ERR_INTERNAL, "%s: more than %d kernels requested", file,
                          MAX_KERNELS_PER_PROGRAM);
    cl_int err;
    cl_kernel k = clCreateKernel(e->program, kernel_name, &err);
    if (err != CL_SUCCESS) {
        char what[160];
        snprintf(what, sizeof what, "clCreateKernel(%s in %s)", kernel_name, file);
        return clkv__fail_cl(ctx, err, what);
    }
    kernel_slot *slot = &e->kernels[e->nkernels++];
    snprintf(slot->name, sizeof slot->name, "%s", kernel_name);
    slot->kernel = k;
    *out = k;
    memo_put(m, file, defs, kernel_name, k);
    return CLKV_OK;
}
