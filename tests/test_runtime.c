/* Runtime: SHA-256, device selection, wrapping a caller's OpenCL objects, the device
 * record, workspace growth, buffer-range fills. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/internal.h"
#include "util/test_util.h"

static void hex(const uint8_t d[32], char out[65]) {
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static void test_sha256_vectors(void **state) {
    (void)state;
    uint8_t d[32];
    char h[65];
    clkv__sha256("", 0, d);
    hex(d, h);
    assert_string_equal(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    clkv__sha256("abc", 3, d);
    hex(d, h);
    assert_string_equal(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    clkv__sha256(two, strlen(two), d);
    hex(d, h);
    assert_string_equal(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    /* One million 'a' fed in uneven pieces exercises the block buffering. */
    clkv_sha256 s;
    clkv__sha256_init(&s);
    char chunk[997];
    memset(chunk, 'a', sizeof chunk);
    size_t left = 1000000;
    while (left) {
        size_t n = left < sizeof chunk ? left : sizeof chunk;
        clkv__sha256_update(&s, chunk, n);
        left -= n;
    }
    clkv__sha256_final(&s, d);
    hex(d, h);
    assert_string_equal(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

static void test_device_selection(void **state) {
    (void)state;
    clkv_device_ref refs[64];
    int n = clkv__enumerate_devices(refs, 64);
    assert_true(n > 0);
    char why[512];
    const char *saved = getenv("CLKV_DEVICE");
    char *saved_copy = saved ? strdup(saved) : NULL;

    /* Default rule: the first GPU, else the first CPU. */
    unsetenv("CLKV_DEVICE");
    int d = clkv__select_device(refs, n, NULL, why, sizeof why);
    assert_true(d >= 0);
    int first_gpu = -1, first_cpu = -1;
    for (int i = n - 1; i >= 0; i--) {
        if (refs[i].type & CL_DEVICE_TYPE_GPU)
            first_gpu = i;
        if (refs[i].type & CL_DEVICE_TYPE_CPU)
            first_cpu = i;
    }
    assert_int_equal(d, first_gpu >= 0 ? first_gpu : first_cpu >= 0 ? first_cpu : 0);

    /* "P:D" and name substrings, case-insensitive; the variable is honoured. */
    char sel[32];
    snprintf(sel, sizeof sel, "%d:%d", refs[n - 1].platform_index, refs[n - 1].device_index);
    assert_int_equal(clkv__select_device(refs, n, sel, why, sizeof why), n - 1);
    setenv("CLKV_DEVICE", sel, 1);
    assert_int_equal(clkv__select_device(refs, n, NULL, why, sizeof why), n - 1);
    char name[256] = "";
    clGetDeviceInfo(refs[0].device, CL_DEVICE_NAME, sizeof name - 1, name, NULL);
    name[4] = '\0';
    for (char *p = name; *p; p++)
        *p = (char)(*p >= 'a' && *p <= 'z' ? *p - 32 : (*p >= 'A' && *p <= 'Z' ? *p + 32 : *p));
    int by_name = clkv__select_device(refs, n, name, why, sizeof why);
    assert_true(by_name >= 0 && by_name <= 0 + n);

    /* Nothing matches: an argument error naming the selector. */
    assert_int_equal(clkv__select_device(refs, n, "no-such-device-xyz", why, sizeof why), -1);
    assert_non_null(strstr(why, "no-such-device-xyz"));
    assert_int_equal(clkv__select_device(refs, n, "99:99", why, sizeof why), -1);
    setenv("CLKV_DEVICE", "no-such-device-xyz", 1);
    clkv_context *ctx = NULL;
    assert_int_equal(clkv_context_create(NULL, &ctx), CLKV_ERR_ARG_DEVICE);
    assert_null(ctx);
    assert_non_null(strstr(clkv_last_error(NULL), "CLKV_DEVICE"));

    if (saved_copy) {
        setenv("CLKV_DEVICE", saved_copy, 1);
        free(saved_copy);
    } else {
        unsetenv("CLKV_DEVICE");
    }
}

static void test_device_record(void **state) {
    (void)state;
    clkv_context *ctx = tu_context_create();
    const clkv_device_info *in = clkv_context_device_info(ctx);
    assert_non_null(in);
    assert_true(strlen(in->device_name) > 0);
    assert_true(strlen(in->platform_name) > 0);
    assert_true(in->compute_units >= 1);
    assert_true(in->max_work_group_size >= 1);
    assert_true(in->local_mem_bytes > 0);
    assert_true(in->static_local_mem_bytes >= in->local_mem_bytes);
    assert_true(in->max_alloc_bytes > 0 && in->max_alloc_bytes <= in->global_mem_bytes);
    assert_true(in->warp_width >= 1);
    if (in->nvidia_ptx) {
        assert_int_equal(in->warp_width, 32);
        assert_true(in->compute_capability[0] >= 3);
    } else if (in->kind == CLKV_DEVICE_KIND_CPU) {
        assert_int_equal(in->compute_capability[0], 0);
    }
    assert_non_null(clkv_context_cl_context(ctx));
    assert_non_null(clkv_context_queue(ctx));
    assert_non_null(clkv_context_device(ctx));
    clkv_context_destroy(ctx);
}

static cl_uint refcount_ctx(cl_context c) {
    cl_uint n = 0;
    TU_CHECK_CL(clGetContextInfo(c, CL_CONTEXT_REFERENCE_COUNT, sizeof n, &n, NULL));
    return n;
}

static cl_uint refcount_queue(cl_command_queue q) {
    cl_uint n = 0;
    TU_CHECK_CL(clGetCommandQueueInfo(q, CL_QUEUE_REFERENCE_COUNT, sizeof n, &n, NULL));
    return n;
}

/* The embedding case: clkv works on the caller's objects and leaves them as it found them. */
static void test_wrap_caller_context(void **state) {
    (void)state;
    clkv_context *probe = tu_context_create();
    cl_device_id dev = clkv_context_device(probe);
    cl_int err;
    cl_context c = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    TU_CHECK_CL(err);
    cl_command_queue q = clCreateCommandQueue(c, dev, 0, &err);
    TU_CHECK_CL(err);
    const cl_uint rc0 = refcount_ctx(c), rq0 = refcount_queue(q);

    clkv_context *ctx = NULL;
    TU_CHECK_OK(NULL, clkv_context_create_from_cl(c, dev, q, &ctx));
    assert_ptr_equal(clkv_context_cl_context(ctx), c);
    assert_ptr_equal(clkv_context_queue(ctx), q);
    assert_string_equal(clkv_context_device_info(ctx)->device_name,
                        clkv_context_device_info(probe)->device_name);

    /* Run a real operator on the caller's queue: uniform attention over 5 equal keys
     * returns the mean of the values. */
    const int D = 64, L = 5;
    float qv[64], kv[5 * 64], vv[5 * 64], o[64];
    for (int i = 0; i < D; i++)
        qv[i] = 0.25f;
    for (int j = 0; j < L; j++)
        for (int i = 0; i < D; i++) {
            kv[j * D + i] = 1.0f;
            vv[j * D + i] = (float)(j + 1);
        }
    cl_mem bq = tu_buffer_from_host(ctx, qv, sizeof qv);
    cl_mem bk = tu_buffer_from_host(ctx, kv, sizeof kv);
    cl_mem bv = tu_buffer_from_host(ctx, vv, sizeof vv);
    cl_mem bo = tu_buffer_create(ctx, sizeof o);
    clkv_attention_decode_args a = CLKV_ATTENTION_DECODE_ARGS_INIT;
    a.q = clkv_tensor_3d(bq, CLKV_F32, 1, 1, D);
    a.k = clkv_tensor_4d(bk, CLKV_F32, 1, 1, L, D);
    a.v = clkv_tensor_4d(bv, CLKV_F32, 1, 1, L, D);
    a.o = clkv_tensor_3d(bo, CLKV_F32, 1, 1, D);
    cl_event done = NULL;
    TU_CHECK_OK(ctx, clkv_attention_decode(ctx, &a, &done));
    assert_non_null(done);
    TU_CHECK_CL(clWaitForEvents(1, &done));
    clReleaseEvent(done);
    TU_CHECK_CL(clEnqueueReadBuffer(q, bo, CL_TRUE, 0, sizeof o, o, 0, NULL, NULL));
    for (int i = 0; i < D; i++)
        assert_true(o[i] > 2.9999f && o[i] < 3.0001f);
    tu_release(bq);
    tu_release(bk);
    tu_release(bv);
    tu_release(bo);

    clkv_context_destroy(ctx);
    /* PoCL drops the references its finished commands hold on the queue and context from
     * a worker thread, shortly after the events complete: wait (bounded) for them. */
    for (int tries = 0; tries < 400 && (refcount_ctx(c) != rc0 || refcount_queue(q) != rq0);
         tries++) {
        TU_CHECK_CL(clFinish(q));
        nanosleep(&(struct timespec){.tv_sec = 0, .tv_nsec = 5000000}, NULL);
    }
    assert_int_equal(refcount_ctx(c), rc0);
    assert_int_equal(refcount_queue(q), rq0);
    TU_CHECK_CL(clFinish(q)); /* still usable */

    /* An out-of-order queue is refused; so is a queue of another context. */
    cl_command_queue ooo =
        clCreateCommandQueue(c, dev, CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE, &err);
    if (err == CL_SUCCESS) {
        assert_int_equal(clkv_context_create_from_cl(c, dev, ooo, &ctx), CLKV_ERR_ARG_RANGE);
        assert_non_null(strstr(clkv_last_error(NULL), "queue"));
        clReleaseCommandQueue(ooo);
    }
    assert_int_equal(clkv_context_create_from_cl(clkv_context_cl_context(probe), dev, q, &ctx),
                     CLKV_ERR_ARG_RANGE);
    assert_null(ctx);
    clReleaseCommandQueue(q);
    clReleaseContext(c);
    clkv_context_destroy(probe);
}

static void test_workspace_grows_and_is_reused(void **state) {
    (void)state;
    clkv_context *ctx = tu_context_create();
    assert_int_equal(clkv_context_workspace_bytes(ctx), 0);
    TU_CHECK_OK(ctx, clkv_context_reserve_workspace(ctx, 1000));
    size_t first = clkv_context_workspace_bytes(ctx);
    assert_true(first >= 1000);
    cl_mem a, b;
    TU_CHECK_OK(ctx, clkv__workspace(ctx, 500, &a));
    TU_CHECK_OK(ctx, clkv__workspace(ctx, first, &b));
    assert_ptr_equal(a, b); /* no reallocation while it fits */
    TU_CHECK_OK(ctx, clkv_context_reserve_workspace(ctx, first + 1));
    assert_true(clkv_context_workspace_bytes(ctx) > first);
    /* More than one buffer may hold is a clear error, not an allocation attempt. */
    size_t too_big = (size_t)clkv_context_device_info(ctx)->max_alloc_bytes + 1;
    assert_int_equal(clkv_context_reserve_workspace(ctx, too_big), CLKV_ERR_DEVICE_LIMIT);
    assert_non_null(strstr(clkv_last_error(ctx), "workspace"));
    clkv_context_destroy(ctx);
}

/* clkv__fill_u32 through clEnqueueFillBuffer (the default for ranges within 4 GiB) and
 * through its kernel (CLKV_FILL_KERNEL_MIB=0; the path of ranges past 4 GiB): only the
 * range changes, every word of it gets the value; unaligned ranges are refused. */
static void test_fill_ranges(void **state) {
    (void)state;
    clkv_context *ctx = tu_context_create();
    enum { N = 70001 };
    uint32_t *host = malloc(N * sizeof *host);
    assert_non_null(host);
    cl_int err;
    cl_mem buf = clCreateBuffer(clkv_context_cl_context(ctx), CL_MEM_READ_WRITE, N * 4, NULL, &err);
    assert_int_equal(err, CL_SUCCESS);
    const char *saved = getenv("CLKV_FILL_KERNEL_MIB");
    char *saved_copy = saved ? strdup(saved) : NULL;
    const uint64_t ranges[][2] = {{0, N}, {3, 1}, {17, 40000}, {N - 5, 5}, {1000, 0}};
    for (int kernel = 0; kernel < 2; kernel++) {
        if (kernel)
            setenv("CLKV_FILL_KERNEL_MIB", "0", 1);
        else
            unsetenv("CLKV_FILL_KERNEL_MIB");
        TU_CHECK_OK(ctx, clkv__fill_u32(ctx, buf, 0, (uint64_t)N * 4, 0xA5A5A5A5u, NULL));
        for (size_t r = 0; r < sizeof ranges / sizeof ranges[0]; r++) {
            const uint32_t value = 0x01020304u * (uint32_t)(r + 1) + (uint32_t)kernel;
            TU_CHECK_OK(ctx,
                        clkv__fill_u32(ctx, buf, ranges[r][0] * 4, ranges[r][1] * 4, value, NULL));
            TU_CHECK_CL(clEnqueueReadBuffer(clkv_context_queue(ctx), buf, CL_TRUE, 0, N * 4, host,
                                            0, NULL, NULL));
            for (uint64_t i = 0; i < N; i++) {
                const int inside = i >= ranges[r][0] && i < ranges[r][0] + ranges[r][1];
                if (inside)
                    assert_int_equal(host[i], value);
                host[i] = inside ? 0xA5A5A5A5u : host[i];
            }
            for (uint64_t i = 0; i < N; i++)
                assert_int_equal(host[i], 0xA5A5A5A5u);
            TU_CHECK_OK(ctx, clkv__fill_u32(ctx, buf, 0, (uint64_t)N * 4, 0xA5A5A5A5u, NULL));
        }
    }
    if (saved_copy)
        setenv("CLKV_FILL_KERNEL_MIB", saved_copy, 1);
    else
        unsetenv("CLKV_FILL_KERNEL_MIB");
    free(saved_copy);
    assert_int_equal(clkv__fill_u32(ctx, buf, 2, 8, 0, NULL), CLKV_ERR_INTERNAL);
    assert_int_equal(clkv__fill_u32(ctx, buf, 0, 6, 0, NULL), CLKV_ERR_INTERNAL);
    assert_non_null(strstr(clkv_last_error(ctx), "fill"));
    clReleaseMemObject(buf);
    free(host);
    clkv_context_destroy(ctx);
}

static void test_status_strings(void **state) {
    (void)state;
    assert_string_equal(clkv_status_string(CLKV_OK), "CLKV_OK");
    assert_string_equal(clkv_status_string(CL_OUT_OF_RESOURCES), "CL_OUT_OF_RESOURCES");
    assert_string_equal(clkv_status_string(CL_INVALID_KERNEL_ARGS), "CL_INVALID_KERNEL_ARGS");
    assert_string_equal(clkv_status_string(CLKV_ERR_ARG_SHAPE), "CLKV_ERR_ARG_SHAPE");
    assert_string_equal(clkv_status_string(CLKV_ERR_LOCAL_MEMORY), "CLKV_ERR_LOCAL_MEMORY");
    assert_string_equal(clkv_status_string(-123456), "CLKV_UNKNOWN_STATUS");
    assert_string_equal(clkv_version_string(), "0.1.0");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha256_vectors),
        cmocka_unit_test(test_device_selection),
        cmocka_unit_test(test_device_record),
        cmocka_unit_test(test_wrap_caller_context),
        cmocka_unit_test(test_workspace_grows_and_is_reused),
        cmocka_unit_test(test_fill_ranges),
        cmocka_unit_test(test_status_strings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
