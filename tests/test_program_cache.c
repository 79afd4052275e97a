/* Program cache: in-memory hits, on-disk hits, corrupt / truncated / mismatched disk
 * entries rebuilt, build failures with the log, and the local-memory budget check. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/internal.h"
#include "runtime/kernel_registry.h"
#include "util/test_util.h"

static char tmp_root[256];

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    assert_int_equal(fclose(f), 0);
}

static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* A context whose disk cache lives in a fresh directory of its own (CLKV_CACHE=1: also on
 * PoCL, where it is off by default). */
static clkv_context *context_with_cache(const char *sub) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", tmp_root, sub);
    setenv("CLKV_CACHE_DIR", dir, 1);
    setenv("CLKV_CACHE", "1", 1);
    clkv_context *ctx = tu_context_create();
    unsetenv("CLKV_CACHE_DIR");
    unsetenv("CLKV_CACHE");
    return ctx;
}

/* The -D set of a decode-attention program that no other test builds (tag). */
static void probe_defs(long tag, clkv_defs *defs) {
    clkv__defs_init(defs);
    clkv__defs_int(defs, "O_DTYPE", 0);
    clkv__defs_int(defs, "HEAD_DIM", 64);
    clkv__defs_int(defs, "MERGE_WG", 64);
    clkv__defs_int(defs, "MAX_SPLITS", 64);
    clkv__defs_int(defs, "CLKV_TEST_TAG", tag);
}

static void get_probe_kernel(clkv_context *ctx, long tag, cl_kernel *k) {
    clkv_defs defs;
    probe_defs(tag, &defs);
    TU_CHECK_OK(ctx,
                clkv__get_kernel(ctx, "attention_merge.cl", &defs, "attention_decode_merge", k));
}

static void probe_path(clkv_context *ctx, long tag, char *path, size_t cap) {
    clkv_defs defs;
    probe_defs(tag, &defs);
    assert_int_equal(clkv__disk_cache_path(ctx, "attention_merge.cl", &defs, path, cap), 0);
}

static clkv_cache_stats stats(clkv_context *ctx) {
    clkv_cache_stats s;
    TU_CHECK_OK(ctx, clkv_context_cache_stats(ctx, &s));
    return s;
}

/* Options given in any order name the same program. */
static void test_memory_hit_and_option_order(void **state) {
    (void)state;
    clkv_context *ctx = context_with_cache("mem");
    cl_kernel k1, k2;
    get_probe_kernel(ctx, 1, &k1);
    clkv_cache_stats s1 = stats(ctx);
    assert_int_equal(s1.builds + s1.disk_hits, 1);

    clkv_defs defs;
    clkv__defs_init(&defs);
    clkv__defs_int(&defs, "CLKV_TEST_TAG", 1);
    clkv__defs_int(&defs, "MAX_SPLITS", 64);
    clkv__defs_int(&defs, "MERGE_WG", 64);
    clkv__defs_int(&defs, "HEAD_DIM", 64);
    clkv__defs_int(&defs, "O_DTYPE", 0);
    TU_CHECK_OK(ctx,
                clkv__get_kernel(ctx, "attention_merge.cl", &defs, "attention_decode_merge", &k2));
    clkv_cache_stats s2 = stats(ctx);
    assert_ptr_equal(k1, k2);
    assert_int_equal(s2.memory_hits, s1.memory_hits + 1);
    assert_int_equal(s2.builds, s1.builds);
    clkv_context_destroy(ctx);
}

/* The kernel memo in front of the program list: a repeated lookup is a memory hit that
 * returns the same kernel, another value of one define is another program, and after
 * the in-memory cache is dropped the lookup loads the program again (never a released
 * kernel from the memo). */
static void test_kernel_memo(void **state) {
    (void)state;
    clkv_context *ctx = context_with_cache("memo");
    cl_kernel k1, k2, k3, k4;
    get_probe_kernel(ctx, 3, &k1);
    const clkv_cache_stats s1 = stats(ctx);
    get_probe_kernel(ctx, 3, &k2);
    const clkv_cache_stats s2 = stats(ctx);
    assert_ptr_equal(k1, k2);
    assert_int_equal(s2.memory_hits, s1.memory_hits + 1);
    assert_int_equal(s2.builds + s2.disk_hits, s1.builds + s1.disk_hits);

    get_probe_kernel(ctx, 4, &k3);
    const clkv_cache_stats s3 = stats(ctx);
    assert_ptr_not_equal(k3, k1);
    assert_int_equal(s3.builds + s3.disk_hits, s2.builds + s2.disk_hits + 1);

    clkv__program_cache_clear(ctx);
    get_probe_kernel(ctx, 3, &k4);
    const clkv_cache_stats s4 = stats(ctx);
    assert_int_equal(s4.builds + s4.disk_hits, s3.builds + s3.disk_hits + 1);
    char name[64];
    assert_int_equal(clGetKernelInfo(k4, CL_KERNEL_FUNCTION_NAME, sizeof name, name, NULL),
                     CL_SUCCESS);
    assert_string_equal(name, "attention_decode_merge");
    clkv_context_destroy(ctx);
}

static void test_disk_hit_and_rebuilds(void **state) {
    (void)state;
    clkv_context *ctx = context_with_cache("disk");
    char path[1200];
    probe_path(ctx, 2, path, sizeof path);
    unlink(path);

    cl_kernel k;
    get_probe_kernel(ctx, 2, &k); /* miss: build from source, store */
    clkv_cache_stats s = stats(ctx);
    assert_int_equal(s.builds, 1);
    long size = file_size(path);
    assert_true(size > 0);

    clkv__program_cache_clear(ctx); /* verified disk hit */
    get_probe_kernel(ctx, 2, &k);
    s = stats(ctx);
    assert_int_equal(s.disk_hits, 1);
    assert_int_equal(s.builds, 1);

    /* Flip one byte of the binary: the stored digest no longer matches. */
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, size - 3, SEEK_SET), 0);
    int c = fgetc(f);
    assert_int_equal(fseek(f, size - 3, SEEK_SET), 0);
    fputc(c ^ 0x5a, f);
    fclose(f);
    clkv__program_cache_clear(ctx);
    get_probe_kernel(ctx, 2, &k);
    s = stats(ctx);
    assert_int_equal(s.disk_rejected, 1);
    assert_int_equal(s.builds, 2);
    assert_int_equal(file_size(path), size); /* rewritten whole */

    /* Truncate it. */
    assert_int_equal(truncate(path, size / 2), 0);
    clkv__program_cache_clear(ctx);
    get_probe_kernel(ctx, 2, &k);
    s = stats(ctx);
    assert_int_equal(s.disk_rejected, 2);
    assert_int_equal(s.builds, 3);

    /* An entry made for another key (another program's file under this name). */
    char other[1200];
    cl_kernel k3;
    get_probe_kernel(ctx, 3, &k3);
    probe_path(ctx, 3, other, sizeof other);
    assert_int_equal(rename(other, path), 0);
    clkv__program_cache_clear(ctx);
    get_probe_kernel(ctx, 2, &k);
    s = stats(ctx);
    assert_int_equal(s.disk_rejected, 3);

    /* Garbage that is not an entry at all. */
    write_text(path, "not a program binary");
    clkv__program_cache_clear(ctx);
    get_probe_kernel(ctx, 2, &k);
    s = stats(ctx);
    assert_int_equal(s.disk_rejected, 4);

    /* And the rebuilt entry is trusted again. */
    clkv__program_cache_clear(ctx);
    get_probe_kernel(ctx, 2, &k);
    assert_int_equal(stats(ctx).disk_hits, s.disk_hits + 1);
    clkv_context_destroy(ctx);
}

static void test_disk_cache_off(void **state) {
    (void)state;
    setenv("CLKV_CACHE", "off", 1);
    clkv_context *ctx = tu_context_create();
    unsetenv("CLKV_CACHE");
    char path[1200];
    clkv_defs defs;
    clkv__defs_init(&defs);
    assert_int_equal(clkv__disk_cache_path(ctx, "attention_merge.cl", &defs, path, sizeof path),
                     -1);
    clkv_context_destroy(ctx);
}

/* CLKV_CACHE unset: the disk cache is on, except on PoCL (runtime/context.c says why). */
static void test_disk_cache_platform_default(void **state) {
    (void)state;
    char dir[512], path[1200];
    snprintf(dir, sizeof dir, "%s/default", tmp_root);
    setenv("CLKV_CACHE_DIR", dir, 1);
    unsetenv("CLKV_CACHE");
    clkv_context *ctx = tu_context_create();
    unsetenv("CLKV_CACHE_DIR");
    const int pocl =
        strstr(clkv_context_device_info(ctx)->platform_name, "Portable Computing Language") != NULL;
    clkv_defs defs;
    clkv__defs_init(&defs);
    assert_int_equal(clkv__disk_cache_path(ctx, "attention_merge.cl", &defs, path, sizeof path),
                     pocl ? -1 : 0);
    clkv_context_destroy(ctx);
}

/* Kernel files from a scratch CLKV_KERNEL_DIR. */
static void kernel_dir_with(const char *file, const char *text) {
    char dir[512], path[700];
    snprintf(dir, sizeof dir, "%s/kernels", tmp_root);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/common.cl", dir);
    write_text(path, "/* empty prelude */\n");
    snprintf(path, sizeof path, "%s/%s", dir, file);
    write_text(path, text);
    setenv("CLKV_KERNEL_DIR", dir, 1);
}

static void test_build_failure_keeps_log(void **state) {
    (void)state;
    kernel_dir_with("broken.cl",
                    "__kernel void broken(__global float *x) { x[0] = y_undeclared; }\n");
    setenv("CLKV_CACHE", "0", 1);
    clkv_context *ctx = tu_context_create();
    cl_kernel k = NULL;
    clkv_status st = clkv__get_kernel(ctx, "broken.cl", NULL, "broken", &k);
    unsetenv("CLKV_KERNEL_DIR");
    unsetenv("CLKV_CACHE");
    assert_int_equal(st, CL_BUILD_PROGRAM_FAILURE);
    assert_string_equal(clkv_status_string(st), "CL_BUILD_PROGRAM_FAILURE");
    assert_non_null(strstr(clkv_last_error(ctx), "broken.cl"));
    assert_non_null(strstr(clkv_last_build_log(ctx), "y_undeclared"));

    /* A missing file is its own error, naming the file. */
    st = clkv__get_kernel(ctx, "no_such_file.cl", NULL, "x", &k);
    assert_int_equal(st, CLKV_ERR_KERNEL_SOURCE);
    assert_non_null(strstr(clkv_last_error(ctx), "no_such_file.cl"));
    clkv_context_destroy(ctx);
}

/* CLKV_BUILD_OPTIONS (read when a context is created) reaches the compiler and the cache
 * key: a program built with it is another entry (another disk path), an option the
 * compiler rejects is an error status, not a crash, and a value longer than the context
 * keeps is ignored whole. */
static void test_build_options_env(void **state) {
    (void)state;
    kernel_dir_with("extra.cl", "#ifndef CLKV_EXTRA_PROBE\n#error \"no CLKV_EXTRA_PROBE\"\n"
                                "#endif\n__kernel void extra(__global int *x) { x[0] = "
                                "CLKV_EXTRA_PROBE; }\n");
    setenv("CLKV_CACHE", "0", 1);
    /* opts[3]: longer than the 255 characters kept, so ignored whole (not cut) */
    char too_long[400] = "-DCLKV_EXTRA_PROBE=7";
    while (strlen(too_long) < 300)
        strcat(too_long, " -DCLKV_PAD=1");
    const char *opts[4] = {NULL, "-DCLKV_EXTRA_PROBE=7", "-clkv-no-such-option", too_long};
    for (int i = 0; i < 4; i++) {
        if (opts[i])
            setenv("CLKV_BUILD_OPTIONS", opts[i], 1);
        clkv_context *ctx = tu_context_create();
        unsetenv("CLKV_BUILD_OPTIONS");
        cl_kernel k = NULL;
        const clkv_status st = clkv__get_kernel(ctx, "extra.cl", NULL, "extra", &k);
        if (i == 1)
            TU_CHECK_OK(ctx, st);
        else
            assert_int_not_equal(st, CLKV_OK);
        if (i == 0 || i == 3)
            assert_non_null(strstr(clkv_last_build_log(ctx), "no CLKV_EXTRA_PROBE"));
        clkv_context_destroy(ctx);
    }
    unsetenv("CLKV_KERNEL_DIR");
    unsetenv("CLKV_CACHE");

    char p0[1024], p1[1024];
    clkv_context *c0 = context_with_cache("opts");
    probe_path(c0, 9, p0, sizeof p0);
    clkv_context_destroy(c0);
    setenv("CLKV_BUILD_OPTIONS", "-DCLKV_EXTRA_PROBE=1", 1);
    clkv_context *c1 = context_with_cache("opts");
    unsetenv("CLKV_BUILD_OPTIONS");
    probe_path(c1, 9, p1, sizeof p1);
    clkv_context_destroy(c1);
    assert_string_not_equal(p0, p1);
}

/* `#include "fragment.cl"` lines of a kernel file are replaced by the fragment before the
 * build (one level); a missing fragment or a nested include is a source error naming the
 * files. */
static void test_include_fragments(void **state) {
    (void)state;
    kernel_dir_with("uses_frag.cl", "#include \"frag.cl\"\n"
                                    "__kernel void k(__global float *x) { x[0] = twice(x[0]); }\n");
    char path[700];
    snprintf(path, sizeof path, "%s/kernels/frag.cl", tmp_root);
    write_text(path, "inline float twice(float x) { return 2.0f * x; }\n");
    snprintf(path, sizeof path, "%s/kernels/nested.cl", tmp_root);
    write_text(path, "#include \"frag.cl\"\n");
    snprintf(path, sizeof path, "%s/kernels/uses_nested.cl", tmp_root);
    write_text(path,
               "#include \"nested.cl\"\n__kernel void k(__global float *x) { x[0] = 1.0f; }\n");
    snprintf(path, sizeof path, "%s/kernels/uses_missing.cl", tmp_root);
    write_text(path, "#include \"missing_frag.cl\"\n__kernel void k(__global float *x) {}\n");
    setenv("CLKV_CACHE", "0", 1);
    clkv_context *ctx = tu_context_create();
    cl_kernel k = NULL;
    clkv_status st = clkv__get_kernel(ctx, "uses_frag.cl", NULL, "k", &k);
    TU_CHECK_OK(ctx, st);
    const float three = 3.0f;
    cl_mem buf = tu_buffer_from_host(ctx, &three, sizeof three);
    TU_CHECK_CL(clSetKernelArg(k, 0, sizeof buf, &buf));
    size_t g = 1;
    TU_CHECK_OK(ctx, clkv__launch(ctx, k, "uses_frag", 1, &g, &g, 0, NULL));
    float got = 0.0f;
    tu_buffer_read(ctx, buf, 0, &got, sizeof got);
    assert_true(got == 6.0f);
    tu_release(buf);

    st = clkv__get_kernel(ctx, "uses_missing.cl", NULL, "k", &k);
    assert_int_equal(st, CLKV_ERR_KERNEL_SOURCE);
    assert_non_null(strstr(clkv_last_error(ctx), "uses_missing.cl"));
    assert_non_null(strstr(clkv_last_error(ctx), "missing_frag.cl"));
    st = clkv__get_kernel(ctx, "uses_nested.cl", NULL, "k", &k);
    assert_int_equal(st, CLKV_ERR_KERNEL_SOURCE);
    assert_non_null(strstr(clkv_last_error(ctx), "nested.cl includes another file"));
    unsetenv("CLKV_KERNEL_DIR");
    unsetenv("CLKV_CACHE");
    clkv_context_destroy(ctx);
}

static void test_local_memory_budget(void **state) {
    (void)state;
    clkv_context *ctx0 = tu_context_create();
    const clkv_device_info *info = clkv_context_device_info(ctx0);
    const unsigned long long static_limit = info->static_local_mem_bytes;
    const unsigned long long dyn_limit = info->local_mem_bytes;
    clkv_context_destroy(ctx0);

    char src[512];
    snprintf(src, sizeof src,
             "__kernel void big(__global float *x, __local float *scratch) {\n"
             "  __local float arr[%llu];\n"
             "  arr[get_local_id(0)] = x[0]; scratch[0] = 1.0f;\n"
             "  barrier(CLK_LOCAL_MEM_FENCE);\n"
             "  x[get_local_id(0)] = arr[0] + arr[%llu - 1] + scratch[0];\n"
             "}\n",
             static_limit / 4 + 256, static_limit / 4 + 256);
    kernel_dir_with("big_local.cl", src);
    setenv("CLKV_CACHE", "0", 1);
    clkv_context *ctx = tu_context_create();
    cl_kernel k = NULL;
    clkv_status st = clkv__get_kernel(ctx, "big_local.cl", NULL, "big", &k);
    unsetenv("CLKV_KERNEL_DIR");
    unsetenv("CLKV_CACHE");
    if (st == CL_BUILD_PROGRAM_FAILURE && clkv_context_device_info(ctx)->nvidia_ptx) {
        /* NVIDIA's compiler itself refuses static local beyond the hardware limit. */
        clkv_context_destroy(ctx);
        return;
    }
    TU_CHECK_OK(ctx, st);
    cl_mem buf = tu_buffer_create(ctx, 4096);
    TU_CHECK_CL(clSetKernelArg(k, 0, sizeof buf, &buf));
    TU_CHECK_CL(clSetKernelArg(k, 1, 64, NULL));
    size_t g = 1;
    st = clkv__launch(ctx, k, "big_local", 1, &g, &g, 64, NULL);
    assert_int_equal(st, CLKV_ERR_LOCAL_MEMORY);
    assert_non_null(strstr(clkv_last_error(ctx), "big_local"));
    /* A dynamic request beyond the dynamic limit is refused by itself. */
    st = clkv__check_local_mem(ctx, k, "big_local", (size_t)dyn_limit + 1);
    assert_int_equal(st, CLKV_ERR_LOCAL_MEMORY);
    /* Nothing was enqueued: the buffer still holds its poison. */
    uint8_t img[16];
    tu_buffer_read(ctx, buf, 0, img, sizeof img);
    assert_true(tu_is_poison(img, 0, sizeof img));
    tu_release(buf);
    clkv_context_destroy(ctx);
}

/* The next `#include "name"` line of text[*at, len) at or after *at: the name's start and
 * length (*name, *nlen), or 0 when there is none; *at moves past that line. */
static int next_include(const char *text, size_t len, size_t *at, const char **name, size_t *nlen) {
    static const char prefix[] = "#include \"";
    const size_t plen = sizeof prefix - 1;
    while (*at < len) {
        const char *line = text + *at;
        const char *eol = memchr(line, '\n', len - *at);
        const size_t line_len = eol ? (size_t)(eol - line) : len - *at;
        *at += line_len + 1;
        if (line_len <= plen || strncmp(line, prefix, plen) != 0)
            continue;
        const char *q = memchr(line + plen, '"', line_len - plen);
        assert_non_null(q);
        *name = line + plen;
        *nlen = (size_t)(q - *name);
        return 1;
    }
    return 0;
}

/* The shipped kernels obey the fragment rule above: every `#include "x.cl"` line of an
 * embedded source names an embedded file that includes nothing itself (a kernel that
 * breaks it fails only when it is first built, which on CPUs may be never: the NVIDIA-only
 * variants). */
static void test_shipped_includes(void **state) {
    (void)state;
    int n_files = 0, n_includes = 0;
    for (const clkv_embedded_source *s = clkv_embedded_sources; s->name; s++, n_files++) {
        const char *name;
        size_t nlen, at = 0;
        while (next_include((const char *)s->data, *s->size, &at, &name, &nlen)) {
            const clkv_embedded_source *frag = NULL;
            for (const clkv_embedded_source *f = clkv_embedded_sources; f->name; f++)
                if (strlen(f->name) == nlen && strncmp(f->name, name, nlen) == 0)
                    frag = f;
            if (!frag)
                fail_msg("%s includes %.*s, which is not embedded", s->name, (int)nlen, name);
            const char *inner;
            size_t ilen, fat = 0;
            if (next_include((const char *)frag->data, *frag->size, &fat, &inner, &ilen))
                fail_msg("%s includes %s, a fragment that includes another file", s->name,
                         frag->name);
            n_includes++;
        }
    }
    assert_true(n_files > 10);
    assert_true(n_includes > 0);
}

int main(void) {
    snprintf(tmp_root, sizeof tmp_root, "/tmp/clkv_test_cache_%ld", (long)getpid());
    mkdir(tmp_root, 0755);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_memory_hit_and_option_order),
        cmocka_unit_test(test_kernel_memo),
        cmocka_unit_test(test_disk_hit_and_rebuilds),
        cmocka_unit_test(test_disk_cache_off),
        cmocka_unit_test(test_disk_cache_platform_default),
        cmocka_unit_test(test_build_failure_keeps_log),
        cmocka_unit_test(test_build_options_env),
        cmocka_unit_test(test_include_fragments),
        cmocka_unit_test(test_shipped_includes),
        cmocka_unit_test(test_local_memory_budget),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_root);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmp_root);
    return rc;
}
