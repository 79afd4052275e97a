/* Argument validation of every public function in include/clkv/ (status, tensor, context,
 * attention) (SPEC §0.3).
 *
 * For each bad input: the exact status code of include/clkv/status.h, a message from
 * clkv_last_error that names the argument (as a whole word), no event returned, and
 * nothing written: the output buffers (o, lse) are poisoned before the bad call and must
 * still be poison after clFinish. A baseline call with the same fixture succeeds (before
 * and after all the bad calls), so every rejection is caused by the one mutation.
 */
#include "util/test_util.h"

#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------ */
/* Fixture: a valid decode call B=2, Hq=8, Hkv=2, L=64, D=64, f32, lengths and lse.     */
/* Buffers have 4x slack so shape mutations (D up to 256) never hit the buffer size.    */
/* ------------------------------------------------------------------------------------ */

#define FB 2
#define FHQ 8
#define FHKV 2
#define FL 64
#define FD 64
#define SLACK 4

static clkv_context *g_ctx;
static cl_mem g_q, g_k, g_v, g_len, g_o, g_lse;

static int group_setup(void **state) {
    tu_rng rng;
    float *tmp;
    size_t nkv = (size_t)FB * FHKV * FL * FD * SLACK;
    int32_t lens[FB] = {FL, 17};
    (void)state;
    if (tu_group_setup((void **)&g_ctx) != 0) {
        return -1;
    }
    tu_rng_seed(&rng, tu_seed(0x7A11DA7E), 0);
    tmp = (float *)malloc(nkv * sizeof(float));
    if (tmp == NULL) {
        return -1;
    }
    tu_fill_normal(&rng, tmp, nkv, 0.0, 1.0);
    g_q = tu_buffer_from_host(g_ctx, tmp, (size_t)FB * FHQ * FD * SLACK * sizeof(float));
    g_k = tu_buffer_from_host(g_ctx, tmp, nkv * sizeof(float));
    tu_fill_normal(&rng, tmp, nkv, 0.0, 1.0);
    g_v = tu_buffer_from_host(g_ctx, tmp, nkv * sizeof(float));
    g_len = tu_buffer_from_host(g_ctx, lens, sizeof lens);
    g_o = tu_buffer_create(g_ctx, (size_t)FB * FHQ * FD * SLACK * sizeof(float));
    g_lse = tu_buffer_create(g_ctx, (size_t)FB * FHQ * SLACK * sizeof(float));
    free(tmp);
    return 0;
}

static int group_teardown(void **state) {
    (void)state;
    tu_release(g_q);
    tu_release(g_k);
    tu_release(g_v);
    tu_release(g_len);
    tu_release(g_o);
    tu_release(g_lse);
    return tu_group_teardown((void **)&g_ctx);
}

static clkv_attention_decode_args base_args(void) {
    clkv_attention_decode_args a = CLKV_ATTENTION_DECODE_ARGS_INIT;
    a.q = clkv_tensor_3d(g_q, CLKV_F32, FB, FHQ, FD);
    a.k = clkv_tensor_4d(g_k, CLKV_F32, FB, FHKV, FL, FD);
    a.v = clkv_tensor_4d(g_v, CLKV_F32, FB, FHKV, FL, FD);
    a.lengths = clkv_tensor_1d(g_len, CLKV_I32, FB);
    a.o = clkv_tensor_3d(g_o, CLKV_F32, FB, FHQ, FD);
    a.lse = clkv_tensor_2d(g_lse, CLKV_F32, FB, FHQ);
    return a;
}

/* Poison every output buffer the call could write (fixture outputs and the ones args
 * name). */
static void poison_outputs(const clkv_attention_decode_args *a) {
    cl_mem bufs[4] = {g_o, g_lse, a ? a->o.buf : NULL, a ? a->lse.buf : NULL};
    for (int i = 0; i < 4; i++) {
        if (bufs[i] != NULL && (i < 2 || (bufs[i] != g_o && bufs[i] != g_lse))) {
            tu_buffer_poison(g_ctx, bufs[i], 0, tu_buffer_size(bufs[i]));
        }
    }
}

static void assert_outputs_poison(const clkv_attention_decode_args *a, const char *label) {
    char what[256];
    TU_CHECK_CL(clFinish(clkv_context_queue(g_ctx)));
    snprintf(what, sizeof what, "%s: o buffer after the rejected call", label);
    tu_assert_buffer_poison(g_ctx, g_o, what);
    snprintf(what, sizeof what, "%s: lse buffer after the rejected call", label);
    tu_assert_buffer_poison(g_ctx, g_lse, what);
    if (a != NULL && a->o.buf != NULL && a->o.buf != g_o && a->o.buf != g_lse) {
        snprintf(what, sizeof what, "%s: args.o buffer after the rejected call", label);
        tu_assert_buffer_poison(g_ctx, a->o.buf, what);
    }
    if (a != NULL && a->lse.buf != NULL && a->lse.buf != g_o && a->lse.buf != g_lse) {
        snprintf(what, sizeof what, "%s: args.lse buffer after the rejected call", label);
        tu_assert_buffer_poison(g_ctx, a->lse.buf, what);
    }
}

/* The message must name one of names[] (NULL-terminated) as a whole word. */
static void check_message(const char *file, int line, const char *label, const char *fn,
                          const char *msg, const char *const *names) {
    char list[256] = "";
    size_t used = 0;
    if (msg == NULL) {
        tu_fail_at(file, line, "%s: %s: clkv_last_error returned NULL", label, fn);
    }
    for (const char *const *n = names; *n != NULL; n++) {
        if (tu_msg_names(msg, *n)) {
            return;
        }
        used += (size_t)snprintf(list + used, used < sizeof list ? sizeof list - used : 0,
                                 "%s\"%s\"", n == names ? "" : " or ", *n);
    }
    tu_fail_at(file, line, "%s: %s: message \"%s\" does not name %s", label, fn, msg, list);
}

/* Run the bad call through both clkv_attention_decode and
 * clkv_attention_decode_workspace_size; `ctx` is usually g_ctx (NULL tests the missing
 * context). `alt` is a second accepted status (0: none). */
static void expect_reject_at(const char *file, int line, const char *label, clkv_context *ctx,
                             const clkv_attention_decode_args *a, clkv_status want, clkv_status alt,
                             const char *const *names) {
    cl_event ev = NULL;
    clkv_status st;
    size_t bytes = 0;
    tu_set_case("%s", label);
    poison_outputs(a);
    st = clkv_attention_decode(ctx, a, &ev);
    if (st != want && (alt == 0 || st != alt)) {
        tu_fail_at(file, line,
                   "%s: clkv_attention_decode returned %s (%d), expected %s (%d)%s%s; "
                   "message \"%s\"",
                   label, clkv_status_string(st), st, clkv_status_string(want), want,
                   alt ? " or " : "", alt ? clkv_status_string(alt) : "", clkv_last_error(ctx));
    }
    check_message(file, line, label, "clkv_attention_decode", clkv_last_error(ctx), names);
    if (ev != NULL) {
        clReleaseEvent(ev);
        tu_fail_at(file, line, "%s: the rejected call returned an event", label);
    }
    if (ctx != NULL) {
        assert_outputs_poison(a, label);
    }

    st = clkv_attention_decode_workspace_size(ctx, a, &bytes);
    if (st != want && (alt == 0 || st != alt)) {
        tu_fail_at(file, line,
                   "%s: clkv_attention_decode_workspace_size returned %s (%d), expected "
                   "%s (%d); message \"%s\"",
                   label, clkv_status_string(st), st, clkv_status_string(want), want,
                   clkv_last_error(ctx));
    }
    check_message(file, line, label, "clkv_attention_decode_workspace_size", clkv_last_error(ctx),
                  names);
    tu_set_case("%s", "");
}

#define NAMES(...)                                                                                 \
    (const char *const[]) {                                                                        \
        __VA_ARGS__, NULL                                                                          \
    }
#define REJECT(label, a, want, ...)                                                                \
    expect_reject_at(__FILE__, __LINE__, (label), g_ctx, (a), (want), 0, NAMES(__VA_ARGS__))
#define REJECT2(label, a, want, alt, ...)                                                          \
    expect_reject_at(__FILE__, __LINE__, (label), g_ctx, (a), (want), (alt), NAMES(__VA_ARGS__))

/* The fixture call itself is valid: it succeeds and writes o and lse. */
static void run_baseline(const char *label) {
    clkv_attention_decode_args a = base_args();
    size_t bytes = 0;
    cl_event ev = NULL;
    tu_set_case("%s", label);
    poison_outputs(&a);
    TU_CHECK_OK(g_ctx, clkv_attention_decode_workspace_size(g_ctx, &a, &bytes));
    TU_CHECK_OK(g_ctx, clkv_attention_decode(g_ctx, &a, &ev));
    if (ev == NULL) {
        TU_FAIL("baseline call returned no event");
    }
    TU_CHECK_CL(clWaitForEvents(1, &ev));
    clReleaseEvent(ev);
    tu_assert_written_exactly(g_ctx, &a.o, "baseline o");
    tu_assert_written_exactly(g_ctx, &a.lse, "baseline lse");
    /* event is optional */
    poison_outputs(&a);
    TU_CHECK_OK(g_ctx, clkv_attention_decode(g_ctx, &a, NULL));
    TU_CHECK_OK(g_ctx, clkv_context_finish(g_ctx));
    tu_assert_written_exactly(g_ctx, &a.o, "baseline o (no event)");
    tu_set_case("%s", "");
}

static void test_baseline_ok(void **state) {
    (void)state;
    run_baseline("baseline (before the bad calls)");
}

static void test_baseline_ok_after(void **state) {
    (void)state;
    run_baseline("baseline (after the bad calls: the context is still usable)");
}

/* ------------------------------------------------------------------------------------ */
/* clkv_attention_decode / _workspace_size                                              */
/* ------------------------------------------------------------------------------------ */

static void test_decode_null(void **state) {
    clkv_attention_decode_args a;
    size_t bytes = 0;
    (void)state;

    /* NULL context: the message is the thread's context-less one. */
    a = base_args();
    expect_reject_at(__FILE__, __LINE__, "ctx NULL", NULL, &a, CLKV_ERR_ARG_NULL, 0, NAMES("ctx"));
    assert_outputs_poison(&a, "ctx NULL");

    /* NULL args */
    expect_reject_at(__FILE__, __LINE__, "args NULL", g_ctx, NULL, CLKV_ERR_ARG_NULL, 0,
                     NAMES("args"));
    assert_outputs_poison(NULL, "args NULL");

    a = base_args();
    a.q.buf = NULL;
    REJECT("q.buf NULL", &a, CLKV_ERR_ARG_NULL, "q");
    a = base_args();
    a.k.buf = NULL;
    REJECT("k.buf NULL", &a, CLKV_ERR_ARG_NULL, "k");
    a = base_args();
    a.v.buf = NULL;
    REJECT("v.buf NULL", &a, CLKV_ERR_ARG_NULL, "v");
    a = base_args();
    a.o.buf = NULL;
    REJECT("o.buf NULL", &a, CLKV_ERR_ARG_NULL, "o");

    /* workspace_size with bytes NULL */
    a = base_args();
    tu_set_case("workspace_size bytes NULL");
    {
        clkv_status st = clkv_attention_decode_workspace_size(g_ctx, &a, NULL);
        if (st != CLKV_ERR_ARG_NULL) {
            TU_FAIL("workspace_size(bytes NULL) returned %s (%d), expected CLKV_ERR_ARG_NULL",
                    clkv_status_string(st), st);
        }
        check_message(__FILE__, __LINE__, "bytes NULL", "clkv_attention_decode_workspace_size",
                      clkv_last_error(g_ctx), NAMES("bytes"));
    }
    /* and with a NULL context */
    {
        clkv_status st = clkv_attention_decode_workspace_size(NULL, &a, &bytes);
        if (st != CLKV_ERR_ARG_NULL) {
            TU_FAIL("workspace_size(ctx NULL) returned %s (%d), expected CLKV_ERR_ARG_NULL",
                    clkv_status_string(st), st);
        }
    }
    tu_set_case("%s", "");
}

static void test_decode_dtype(void **state) {
    clkv_attention_decode_args a;
    (void)state;

    a = base_args();
    a.q.dtype = CLKV_I32;
    REJECT("q i32", &a, CLKV_ERR_ARG_DTYPE, "q");
    a = base_args();
    a.q.dtype = CLKV_U8;
    REJECT("q u8", &a, CLKV_ERR_ARG_DTYPE, "q");
    a = base_args();
    a.q.dtype = (clkv_dtype)99;
    REJECT("q dtype 99 (not a dtype)", &a, CLKV_ERR_ARG_DTYPE, "q");

    a = base_args();
    a.k.dtype = CLKV_F16;
    REJECT("k f16, v f32", &a, CLKV_ERR_ARG_DTYPE, "k", "v");
    a = base_args();
    a.v.dtype = CLKV_BF16;
    REJECT("k f32, v bf16", &a, CLKV_ERR_ARG_DTYPE, "k", "v");
    a = base_args();
    a.k.dtype = CLKV_I32;
    a.v.dtype = CLKV_I32;
    REJECT("k, v i32", &a, CLKV_ERR_ARG_DTYPE, "k", "v");

    a = base_args();
    a.o.dtype = CLKV_I32;
    REJECT("o i32", &a, CLKV_ERR_ARG_DTYPE, "o");
    a = base_args();
    a.o.dtype = CLKV_U32;
    REJECT("o u32", &a, CLKV_ERR_ARG_DTYPE, "o");

    a = base_args();
    a.lse.dtype = CLKV_F16;
    REJECT("lse f16", &a, CLKV_ERR_ARG_DTYPE, "lse");
    a = base_args();
    a.lse.dtype = CLKV_BF16;
    REJECT("lse bf16", &a, CLKV_ERR_ARG_DTYPE, "lse");

    a = base_args();
    a.lengths.dtype = CLKV_F32;
    REJECT("lengths f32", &a, CLKV_ERR_ARG_DTYPE, "lengths");
    a = base_args();
    a.lengths.dtype = CLKV_U32;
    REJECT("lengths u32", &a, CLKV_ERR_ARG_DTYPE, "lengths");
}

static void test_decode_shape(void **state) {
    clkv_attention_decode_args a;
    (void)state;

    /* B */
    a = base_args();
    a.k = clkv_tensor_4d(g_k, CLKV_F32, 1, FHKV, FL, FD);
    a.v = clkv_tensor_4d(g_v, CLKV_F32, 1, FHKV, FL, FD);
    REJECT("k, v B=1 vs q B=2", &a, CLKV_ERR_ARG_SHAPE, "k", "v", "q");
    a = base_args();
    a.v = clkv_tensor_4d(g_v, CLKV_F32, 1, FHKV, FL, FD);
    REJECT("v B=1 vs k B=2", &a, CLKV_ERR_ARG_SHAPE, "v", "k");
    a = base_args();
    a.o = clkv_tensor_3d(g_o, CLKV_F32, 3, FHQ, FD);
    REJECT("o B=3", &a, CLKV_ERR_ARG_SHAPE, "o");
    a = base_args();
    a.lengths = clkv_tensor_1d(g_len, CLKV_I32, 1);
    REJECT("lengths [1] vs B=2", &a, CLKV_ERR_ARG_SHAPE, "lengths");
    a = base_args();
    a.lengths = clkv_tensor_2d(g_len, CLKV_I32, 1, FB);
    REJECT("lengths 2-d", &a, CLKV_ERR_ARG_SHAPE, "lengths");

    /* D */
    a = base_args();
    a.k = clkv_tensor_4d(g_k, CLKV_F32, FB, FHKV, FL, 128);
    a.v = clkv_tensor_4d(g_v, CLKV_F32, FB, FHKV, FL, 128);
    REJECT("k, v D=128 vs q D=64", &a, CLKV_ERR_ARG_SHAPE, "k", "v", "q", "D");
    a = base_args();
    a.v = clkv_tensor_4d(g_v, CLKV_F32, FB, FHKV, FL, 128);
    REJECT("v D=128 vs k D=64", &a, CLKV_ERR_ARG_SHAPE, "v", "k");
    a = base_args();
    a.o = clkv_tensor_3d(g_o, CLKV_F32, FB, FHQ, 128);
    REJECT("o D=128 vs q D=64", &a, CLKV_ERR_ARG_SHAPE, "o");

    /* L between K and V */
    a = base_args();
    a.v = clkv_tensor_4d(g_v, CLKV_F32, FB, FHKV, FL - 1, FD);
    REJECT("v L=63 vs k L=64", &a, CLKV_ERR_ARG_SHAPE, "v", "k");
    /* Hkv between K and V */
    a = base_args();
    a.v = clkv_tensor_4d(g_v, CLKV_F32, FB, 1, FL, FD);
    REJECT("v Hkv=1 vs k Hkv=2", &a, CLKV_ERR_ARG_SHAPE, "v", "k");

    /* Hq vs o and lse */
    a = base_args();
    a.o = clkv_tensor_3d(g_o, CLKV_F32, FB, FHQ / 2, FD);
    REJECT("o Hq=4 vs q Hq=8", &a, CLKV_ERR_ARG_SHAPE, "o");
    a = base_args();
    a.lse = clkv_tensor_2d(g_lse, CLKV_F32, FB, FHQ - 1);
    REJECT("lse Hq=7 vs q Hq=8", &a, CLKV_ERR_ARG_SHAPE, "lse");
    a = base_args();
    a.lse = clkv_tensor_1d(g_lse, CLKV_F32, FB * FHQ);
    REJECT("lse 1-d", &a, CLKV_ERR_ARG_SHAPE, "lse");

    /* Hq not a multiple of Hkv */
    a = base_args();
    a.q = clkv_tensor_3d(g_q, CLKV_F32, FB, 6, FD);
    a.o = clkv_tensor_3d(g_o, CLKV_F32, FB, 6, FD);
    a.lse = clkv_tensor_2d(g_lse, CLKV_F32, FB, 6);
    a.k = clkv_tensor_4d(g_k, CLKV_F32, FB, 4, FL, FD);
    a.v = clkv_tensor_4d(g_v, CLKV_F32, FB, 4, FL, FD);
    REJECT("Hq=6 Hkv=4", &a, CLKV_ERR_ARG_SHAPE, "q", "k", "Hq", "Hkv");
    a = base_args();
    a.q = clkv_tensor_3d(g_q, CLKV_F32, FB, 2, FD);
    a.o = clkv_tensor_3d(g_o, CLKV_F32, FB, 2, FD);
    a.lse = clkv_tensor_2d(g_lse, CLKV_F32, FB, 2);
    a.k = clkv_tensor_4d(g_k, CLKV_F32, FB, 4, FL, FD);
    a.v = clkv_tensor_4d(g_v, CLKV_F32, FB, 4, FL, FD);
    REJECT("Hq=2 Hkv=4 (fewer query heads than KV heads)", &a, CLKV_ERR_ARG_SHAPE, "q", "k", "Hq",
           "Hkv");

    /* wrong ndim of a required tensor */
    a = base_args();
    a.q = clkv_tensor_4d(g_q, CLKV_F32, FB, FHQ, 1, FD);
    REJECT("q 4-d", &a, CLKV_ERR_ARG_SHAPE, "q");
    a = base_args();
    a.k = clkv_tensor_3d(g_k, CLKV_F32, FB * FHKV, FL, FD);
    REJECT("k 3-d", &a, CLKV_ERR_ARG_SHAPE, "k");

    /* negative dim */
    a = base_args();
    a.k.dims[2] = -1;
    a.v.dims[2] = -1;
    REJECT2("k, v L=-1", &a, CLKV_ERR_ARG_SHAPE, CLKV_ERR_ARG_RANGE, "k", "v");
}

static void test_decode_unsupported_head_dim(void **state) {
    static const int64_t bad_d[] = {96, 32, 80, 192}; /* <= 256: fits the slack */
    (void)state;
    for (size_t i = 0; i < sizeof bad_d / sizeof bad_d[0]; i++) {
        char label[64];
        int64_t d = bad_d[i];
        clkv_attention_decode_args a = base_args();
        a.q = clkv_tensor_3d(g_q, CLKV_F32, FB, FHQ, d);
        a.o = clkv_tensor_3d(g_o, CLKV_F32, FB, FHQ, d);
        a.k = clkv_tensor_4d(g_k, CLKV_F32, FB, FHKV, FL, d);
        a.v = clkv_tensor_4d(g_v, CLKV_F32, FB, FHKV, FL, d);
        snprintf(label, sizeof label, "D=%" PRId64, d);
        REJECT(label, &a, CLKV_ERR_ARG_UNSUPPORTED, "D", "q", "k", "head_dim");
    }
}

static void test_decode_range(void **state) {
    clkv_attention_decode_args a;
    (void)state;

    a = base_args();
    a.max_length = FL + 1;
    REJECT("max_length = L + 1", &a, CLKV_ERR_ARG_RANGE, "max_length");
    a = base_args();
    a.lengths = clkv_tensor_none();
    a.max_length = 1000;
    REJECT("max_length = 1000 > L, lengths absent", &a, CLKV_ERR_ARG_RANGE, "max_length");
    a = base_args();
    a.max_length = -2;
    REJECT("max_length = -2", &a, CLKV_ERR_ARG_RANGE, "max_length");

    a = base_args();
    a.scale = NAN;
    REJECT("scale NaN", &a, CLKV_ERR_ARG_RANGE, "scale");
    a = base_args();
    a.scale = INFINITY;
    REJECT("scale +inf", &a, CLKV_ERR_ARG_RANGE, "scale");
    a = base_args();
    a.scale = -INFINITY;
    REJECT("scale -inf", &a, CLKV_ERR_ARG_RANGE, "scale");

    a = base_args();
    a.num_splits = -1;
    REJECT("num_splits -1", &a, CLKV_ERR_ARG_RANGE, "num_splits");
    a = base_args();
    a.num_splits = INT32_MIN;
    REJECT("num_splits INT32_MIN", &a, CLKV_ERR_ARG_RANGE, "num_splits");
}

static void test_decode_stride(void **state) {
    clkv_attention_decode_args a;
    (void)state;

    a = base_args();
    a.k.strides[3] = 2;
    REJECT("k last stride 2", &a, CLKV_ERR_ARG_STRIDE, "k");
    a = base_args();
    a.v.strides[3] = 0;
    REJECT("v last stride 0", &a, CLKV_ERR_ARG_STRIDE, "v");
    a = base_args();
    a.q.strides[2] = 2;
    REJECT("q last stride 2", &a, CLKV_ERR_ARG_STRIDE, "q");
    a = base_args();
    a.o.strides[2] = 2;
    REJECT("o last stride 2", &a, CLKV_ERR_ARG_STRIDE, "o");
    a = base_args();
    a.lse.strides[1] = 2;
    REJECT("lse last stride 2", &a, CLKV_ERR_ARG_STRIDE, "lse");
    a = base_args();
    a.lengths.strides[0] = 2;
    REJECT("lengths stride 2", &a, CLKV_ERR_ARG_STRIDE, "lengths");

    a = base_args();
    a.k.strides[1] = -(FL * FD);
    REJECT("k negative head stride", &a, CLKV_ERR_ARG_STRIDE, "k");
    a = base_args();
    a.v.strides[2] = -FD;
    REJECT("v negative token stride", &a, CLKV_ERR_ARG_STRIDE, "v");
    a = base_args();
    a.o.strides[0] = -1;
    REJECT("o negative batch stride", &a, CLKV_ERR_ARG_STRIDE, "o");
    a = base_args();
    a.q.strides[1] = -FD;
    REJECT("q negative head stride", &a, CLKV_ERR_ARG_STRIDE, "q");
}

static void test_decode_alignment(void **state) {
    clkv_attention_decode_args a;
    (void)state;

    a = base_args();
    a.k.offset = 2;
    REJECT("k f32 offset 2 bytes", &a, CLKV_ERR_ARG_ALIGNMENT, "k");
    a = base_args();
    a.v.offset = 7;
    REJECT("v f32 offset 7 bytes", &a, CLKV_ERR_ARG_ALIGNMENT, "v");
    a = base_args();
    a.q.offset = 1;
    REJECT("q f32 offset 1 byte", &a, CLKV_ERR_ARG_ALIGNMENT, "q");
    a = base_args();
    a.o.offset = 6;
    REJECT("o f32 offset 6 bytes", &a, CLKV_ERR_ARG_ALIGNMENT, "o");
    a = base_args();
    a.lse.offset = 2;
    REJECT("lse offset 2 bytes", &a, CLKV_ERR_ARG_ALIGNMENT, "lse");
    a = base_args();
    a.lengths.offset = 3;
    REJECT("lengths offset 3 bytes", &a, CLKV_ERR_ARG_ALIGNMENT, "lengths");
    /* 16-bit storage: odd byte offsets */
    a = base_args();
    a.k.dtype = CLKV_F16;
    a.v.dtype = CLKV_F16;
    a.k.offset = 1;
    REJECT("k f16 offset 1 byte", &a, CLKV_ERR_ARG_ALIGNMENT, "k");
    a = base_args();
    a.o.dtype = CLKV_BF16;
    a.o.offset = 3;
    REJECT("o bf16 offset 3 bytes", &a, CLKV_ERR_ARG_ALIGNMENT, "o");
}

static void test_decode_buffer_size(void **state) {
    clkv_attention_decode_args a;
    cl_mem small;
    size_t kv_bytes = (size_t)FB * FHKV * FL * FD * sizeof(float);
    (void)state;

    /* a buffer one element too small */
    small = tu_buffer_create(g_ctx, kv_bytes - sizeof(float));
    a = base_args();
    a.k.buf = small;
    REJECT("k buffer 4 bytes short", &a, CLKV_ERR_ARG_BUFFER_SIZE, "k");
    a = base_args();
    a.v.buf = small;
    REJECT("v buffer 4 bytes short", &a, CLKV_ERR_ARG_BUFFER_SIZE, "v");
    tu_release(small);

    /* the offset pushes the last element out */
    a = base_args();
    a.v.offset = (uint64_t)(tu_buffer_size(g_v) - kv_bytes + sizeof(float));
    REJECT("v offset past the end", &a, CLKV_ERR_ARG_BUFFER_SIZE, "v");
    a = base_args();
    a.k.strides[0] = 2 * FHKV * FL * FD * SLACK; /* batch 1 lies past the end */
    REJECT("k batch stride past the end", &a, CLKV_ERR_ARG_BUFFER_SIZE, "k");

    small = tu_buffer_create(g_ctx, (size_t)FB * FHQ * FD * sizeof(float) - 2);
    a = base_args();
    a.q.buf = small;
    REJECT("q buffer short", &a, CLKV_ERR_ARG_BUFFER_SIZE, "q");
    a = base_args();
    a.o.buf = small;
    REJECT("o buffer short", &a, CLKV_ERR_ARG_BUFFER_SIZE, "o");
    tu_release(small);

    small = tu_buffer_create(g_ctx, (size_t)FB * FHQ * sizeof(float) - 4);
    a = base_args();
    a.lse.buf = small;
    REJECT("lse buffer short", &a, CLKV_ERR_ARG_BUFFER_SIZE, "lse");
    tu_release(small);

    small = tu_buffer_create(g_ctx, sizeof(int32_t));
    a = base_args();
    a.lengths.buf = small;
    REJECT("lengths buffer holds 1 of 2", &a, CLKV_ERR_ARG_BUFFER_SIZE, "lengths");
    tu_release(small);

    /* a huge but representable descriptor (2^49 bytes) on a small buffer */
    a = base_args();
    a.k = clkv_tensor_4d(g_k, CLKV_F32, FB, FHKV, (int64_t)1 << 40, FD);
    a.v = clkv_tensor_4d(g_v, CLKV_F32, FB, FHKV, (int64_t)1 << 40, FD);
    a.max_length = FL;
    REJECT("k, v L = 2^40 (2^49 bytes) on a small buffer", &a, CLKV_ERR_ARG_BUFFER_SIZE, "k", "v");
}

static void test_decode_overflow(void **state) {
    clkv_attention_decode_args a;
    (void)state;

    /* element count overflows: L = 2^60 tokens of 64 elements */
    a = base_args();
    a.k.dims[2] = (int64_t)1 << 60;
    a.v.dims[2] = (int64_t)1 << 60;
    REJECT("k, v L = 2^60", &a, CLKV_ERR_ARG_OVERFLOW, "k", "v");
    /* with max_length small: still the descriptor overflows */
    a.max_length = 16;
    REJECT("k, v L = 2^60, max_length 16", &a, CLKV_ERR_ARG_OVERFLOW, "k", "v");

    /* stride overflow: batch stride 2^62 elements (2^64 bytes) */
    a = base_args();
    a.k.strides[0] = (int64_t)1 << 62;
    REJECT("k batch stride 2^62", &a, CLKV_ERR_ARG_OVERFLOW, "k");
    a = base_args();
    a.v.strides[2] = INT64_MAX / 2;
    REJECT("v token stride INT64_MAX/2", &a, CLKV_ERR_ARG_OVERFLOW, "v");

    /* byte offset near 2^64: offset + extent overflows */
    a = base_args();
    a.o.offset = UINT64_MAX - 3; /* a multiple of 4 */
    REJECT("o offset 2^64 - 4", &a, CLKV_ERR_ARG_OVERFLOW, "o");
}

/* ------------------------------------------------------------------------------------ */
/* Context functions                                                                    */
/* ------------------------------------------------------------------------------------ */

static void expect_status(const char *label, clkv_status got, clkv_status want) {
    if (got != want) {
        TU_FAIL("%s: returned %s (%d), expected %s (%d); clkv_last_error(NULL) = \"%s\"", label,
                clkv_status_string(got), got, clkv_status_string(want), want,
                clkv_last_error(NULL));
    }
}

static void test_context_create_bad(void **state) {
    clkv_context *c = (clkv_context *)(uintptr_t)0x1;
    const char *msg;
    char *saved = NULL;
    const char *env;
    (void)state;

    tu_set_case("clkv_context_create(out NULL)");
    expect_status("clkv_context_create(NULL, NULL)", clkv_context_create(NULL, NULL),
                  CLKV_ERR_ARG_NULL);
    check_message(__FILE__, __LINE__, "out NULL", "clkv_context_create", clkv_last_error(NULL),
                  NAMES("out"));

    tu_set_case("clkv_context_create(no matching selector)");
    expect_status("clkv_context_create(\"no-such-device-xyz\")",
                  clkv_context_create("no-such-device-xyz", &c), CLKV_ERR_ARG_DEVICE);
    if (c != NULL && c != (clkv_context *)(uintptr_t)0x1) {
        TU_FAIL("*out = %p after a failed create (expected unchanged or NULL)", (void *)c);
    }
    msg = clkv_last_error(NULL);
    if (msg == NULL || strstr(msg, "no-such-device-xyz") == NULL) {
        TU_FAIL("message \"%s\" does not name the selector \"no-such-device-xyz\"",
                msg ? msg : "(null)");
    }

    c = NULL;
    expect_status("clkv_context_create(\"99:99\")", clkv_context_create("99:99", &c),
                  CLKV_ERR_ARG_DEVICE);
    assert_null(c);
    msg = clkv_last_error(NULL);
    if (msg == NULL || strstr(msg, "99:99") == NULL) {
        TU_FAIL("message \"%s\" does not name the selector \"99:99\"", msg ? msg : "(null)");
    }

    /* $CLKV_DEVICE naming nothing, selector NULL */
    tu_set_case("clkv_context_create(NULL) with CLKV_DEVICE naming nothing");
    env = getenv("CLKV_DEVICE");
    if (env != NULL) {
        saved = strdup(env);
    }
    setenv("CLKV_DEVICE", "no-such-env-device", 1);
    c = NULL;
    {
        clkv_status st = clkv_context_create(NULL, &c);
        const char *m = clkv_last_error(NULL);
        int named = m != NULL && strstr(m, "no-such-env-device") != NULL;
        if (saved != NULL) {
            setenv("CLKV_DEVICE", saved, 1);
            free(saved);
        } else {
            unsetenv("CLKV_DEVICE");
        }
        if (st == CLKV_OK) {
            clkv_context_destroy(c);
        }
        expect_status("clkv_context_create(NULL) with CLKV_DEVICE=no-such-env-device", st,
                      CLKV_ERR_ARG_DEVICE);
        if (!named) {
            TU_FAIL("message \"%s\" does not name the CLKV_DEVICE value", m ? m : "(null)");
        }
    }
    tu_set_case("%s", "");
}

static cl_uint refcount_queue(cl_command_queue q) {
    cl_uint n = 0;
    TU_CHECK_CL(clGetCommandQueueInfo(q, CL_QUEUE_REFERENCE_COUNT, sizeof n, &n, NULL));
    return n;
}

static cl_uint refcount_context(cl_context c) {
    cl_uint n = 0;
    TU_CHECK_CL(clGetContextInfo(c, CL_CONTEXT_REFERENCE_COUNT, sizeof n, &n, NULL));
    return n;
}

static void test_context_create_from_cl(void **state) {
    cl_context clc = clkv_context_cl_context(g_ctx);
    cl_device_id dev = clkv_context_device(g_ctx);
    cl_command_queue q = clkv_context_queue(g_ctx);
    clkv_context *c = NULL;
    cl_int err = CL_SUCCESS;
    (void)state;

    tu_set_case("clkv_context_create_from_cl");
    assert_non_null(clc);
    assert_non_null(dev);
    assert_non_null(q);

    expect_status("create_from_cl(NULL, NULL, NULL, NULL)",
                  clkv_context_create_from_cl(NULL, NULL, NULL, NULL), CLKV_ERR_ARG_NULL);
    expect_status("create_from_cl(NULL, dev, q, &c)", clkv_context_create_from_cl(NULL, dev, q, &c),
                  CLKV_ERR_ARG_NULL);
    check_message(__FILE__, __LINE__, "context NULL", "clkv_context_create_from_cl",
                  clkv_last_error(NULL), NAMES("context", "cl_context"));
    assert_null(c);
    expect_status("create_from_cl(ctx, NULL, q, &c)", clkv_context_create_from_cl(clc, NULL, q, &c),
                  CLKV_ERR_ARG_NULL);
    check_message(__FILE__, __LINE__, "device NULL", "clkv_context_create_from_cl",
                  clkv_last_error(NULL), NAMES("device"));
    assert_null(c);
    expect_status("create_from_cl(ctx, dev, NULL, &c)",
                  clkv_context_create_from_cl(clc, dev, NULL, &c), CLKV_ERR_ARG_NULL);
    check_message(__FILE__, __LINE__, "queue NULL", "clkv_context_create_from_cl",
                  clkv_last_error(NULL), NAMES("queue"));
    assert_null(c);
    expect_status("create_from_cl(ctx, dev, q, NULL)",
                  clkv_context_create_from_cl(clc, dev, q, NULL), CLKV_ERR_ARG_NULL);
    check_message(__FILE__, __LINE__, "out NULL", "clkv_context_create_from_cl",
                  clkv_last_error(NULL), NAMES("out"));

    /* an out-of-order queue is rejected */
    {
        cl_command_queue ooo =
            clCreateCommandQueue(clc, dev, CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE, &err);
        if (err == CL_SUCCESS && ooo != NULL) {
            c = NULL;
            expect_status("create_from_cl(out-of-order queue)",
                          clkv_context_create_from_cl(clc, dev, ooo, &c), CLKV_ERR_ARG_RANGE);
            check_message(__FILE__, __LINE__, "out-of-order queue", "clkv_context_create_from_cl",
                          clkv_last_error(NULL), NAMES("queue"));
            assert_null(c);
            clReleaseCommandQueue(ooo);
        } else {
            printf("[ note     ] device has no out-of-order queues (%d): check skipped\n",
                   (int)err);
        }
    }

    /* a queue of another cl_context is rejected */
    {
        cl_context other = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
        TU_CHECK_CL(err);
        cl_command_queue oq = clCreateCommandQueue(other, dev, 0, &err);
        TU_CHECK_CL(err);
        c = NULL;
        expect_status("create_from_cl(queue of another context)",
                      clkv_context_create_from_cl(clc, dev, oq, &c), CLKV_ERR_ARG_RANGE);
        check_message(__FILE__, __LINE__, "foreign queue", "clkv_context_create_from_cl",
                      clkv_last_error(NULL), NAMES("queue"));
        assert_null(c);
        clReleaseCommandQueue(oq);
        clReleaseContext(other);
    }

    /* A valid wrap retains and releases exactly what it retained. */
    {
        cl_context mine = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
        cl_command_queue mq;
        cl_uint q_before, c_before;
        TU_CHECK_CL(err);
        mq = clCreateCommandQueue(mine, dev, 0, &err);
        TU_CHECK_CL(err);
        q_before = refcount_queue(mq);
        c_before = refcount_context(mine);
        c = NULL;
        TU_CHECK_OK(NULL, clkv_context_create_from_cl(mine, dev, mq, &c));
        assert_non_null(c);
        assert_ptr_equal(clkv_context_queue(c), mq);
        assert_ptr_equal(clkv_context_cl_context(c), mine);
        assert_ptr_equal(clkv_context_device(c), dev);
        clkv_context_destroy(c);
        if (refcount_queue(mq) != q_before || refcount_context(mine) != c_before) {
            TU_FAIL("after destroy: queue refcount %u (was %u), context refcount %u (was %u)",
                    refcount_queue(mq), q_before, refcount_context(mine), c_before);
        }
        clReleaseCommandQueue(mq);
        clReleaseContext(mine);
    }
    tu_set_case("%s", "");
}

static void test_context_accessors_null(void **state) {
    clkv_cache_stats stats;
    const char *s;
    (void)state;
    tu_set_case("context accessors on NULL");
    assert_null(clkv_context_device_info(NULL));
    assert_null(clkv_context_cl_context(NULL));
    assert_null(clkv_context_queue(NULL));
    assert_null(clkv_context_device(NULL));
    assert_int_equal(clkv_context_workspace_bytes(NULL), 0);
    expect_status("clkv_context_cache_stats(NULL, &s)", clkv_context_cache_stats(NULL, &stats),
                  CLKV_ERR_ARG_NULL);
    {
        clkv_status st = clkv_context_cache_stats(g_ctx, NULL);
        if (st != CLKV_ERR_ARG_NULL) {
            TU_FAIL("clkv_context_cache_stats(ctx, NULL) returned %s (%d)", clkv_status_string(st),
                    st);
        }
        check_message(__FILE__, __LINE__, "cache_stats out NULL", "clkv_context_cache_stats",
                      clkv_last_error(g_ctx), NAMES("out", "stats"));
    }
    expect_status("clkv_context_finish(NULL)", clkv_context_finish(NULL), CLKV_ERR_ARG_NULL);
    s = clkv_last_error(NULL);
    assert_non_null(s);
    s = clkv_last_build_log(NULL);
    assert_non_null(s);
    s = clkv_last_build_log(g_ctx);
    assert_non_null(s);
    clkv_context_destroy(NULL); /* accepted, no effect */
    /* non-NULL context: accessors answer */
    assert_non_null(clkv_context_device_info(g_ctx));
    TU_CHECK_OK(g_ctx, clkv_context_cache_stats(g_ctx, &stats));
    TU_CHECK_OK(g_ctx, clkv_context_finish(g_ctx));
    tu_set_case("%s", "");
}

static void test_reserve_workspace(void **state) {
    const clkv_device_info *info = clkv_context_device_info(g_ctx);
    size_t before;
    clkv_status st;
    (void)state;
    tu_set_case("clkv_context_reserve_workspace");
    assert_non_null(info);

    expect_status("reserve_workspace(NULL, 1024)", clkv_context_reserve_workspace(NULL, 1024),
                  CLKV_ERR_ARG_NULL);
    check_message(__FILE__, __LINE__, "ctx NULL", "clkv_context_reserve_workspace",
                  clkv_last_error(NULL), NAMES("ctx"));

    before = clkv_context_workspace_bytes(g_ctx);
    st = clkv_context_reserve_workspace(g_ctx, SIZE_MAX);
    if (st != CLKV_ERR_DEVICE_LIMIT) {
        TU_FAIL("reserve_workspace(SIZE_MAX) returned %s (%d), expected CLKV_ERR_DEVICE_LIMIT",
                clkv_status_string(st), st);
    }
    check_message(__FILE__, __LINE__, "SIZE_MAX", "clkv_context_reserve_workspace",
                  clkv_last_error(g_ctx), NAMES("bytes", "workspace"));
    if (info->max_alloc_bytes > 0 && info->max_alloc_bytes < (uint64_t)SIZE_MAX) {
        st = clkv_context_reserve_workspace(g_ctx, (size_t)info->max_alloc_bytes + 1);
        if (st != CLKV_ERR_DEVICE_LIMIT) {
            TU_FAIL("reserve_workspace(max_alloc_bytes + 1 = %" PRIu64
                    ") returned %s (%d), expected CLKV_ERR_DEVICE_LIMIT",
                    info->max_alloc_bytes + 1, clkv_status_string(st), st);
        }
    }
    if (clkv_context_workspace_bytes(g_ctx) != before) {
        TU_FAIL("a failed reserve changed the workspace from %zu to %zu bytes", before,
                clkv_context_workspace_bytes(g_ctx));
    }

    TU_CHECK_OK(g_ctx, clkv_context_reserve_workspace(g_ctx, 0));
    TU_CHECK_OK(g_ctx, clkv_context_reserve_workspace(g_ctx, 1 << 20));
    if (clkv_context_workspace_bytes(g_ctx) < (1u << 20)) {
        TU_FAIL("after reserving 1 MiB the workspace holds %zu bytes",
                clkv_context_workspace_bytes(g_ctx));
    }
    /* reserving less never shrinks */
    before = clkv_context_workspace_bytes(g_ctx);
    TU_CHECK_OK(g_ctx, clkv_context_reserve_workspace(g_ctx, 4096));
    assert_true(clkv_context_workspace_bytes(g_ctx) >= before);
    tu_set_case("%s", "");
}

/* ------------------------------------------------------------------------------------ */
/* Status strings, dtypes, tensor constructors                                          */
/* ------------------------------------------------------------------------------------ */

static void test_status_string(void **state) {
    static const struct {
        clkv_status code;
        const char *name;
    } known[] = {
        {CLKV_OK, "CLKV_OK"},
        {CLKV_ERR_ARG_NULL, "CLKV_ERR_ARG_NULL"},
        {CLKV_ERR_ARG_DTYPE, "CLKV_ERR_ARG_DTYPE"},
        {CLKV_ERR_ARG_SHAPE, "CLKV_ERR_ARG_SHAPE"},
        {CLKV_ERR_ARG_STRIDE, "CLKV_ERR_ARG_STRIDE"},
        {CLKV_ERR_ARG_RANGE, "CLKV_ERR_ARG_RANGE"},
        {CLKV_ERR_ARG_UNSUPPORTED, "CLKV_ERR_ARG_UNSUPPORTED"},
        {CLKV_ERR_ARG_BUFFER_SIZE, "CLKV_ERR_ARG_BUFFER_SIZE"},
        {CLKV_ERR_ARG_OVERFLOW, "CLKV_ERR_ARG_OVERFLOW"},
        {CLKV_ERR_ARG_ALIGNMENT, "CLKV_ERR_ARG_ALIGNMENT"},
        {CLKV_ERR_ARG_DEVICE, "CLKV_ERR_ARG_DEVICE"},
        {CLKV_ERR_OUT_OF_HOST_MEMORY, "CLKV_ERR_OUT_OF_HOST_MEMORY"},
        {CLKV_ERR_NO_DEVICE, "CLKV_ERR_NO_DEVICE"},
        {CLKV_ERR_LOCAL_MEMORY, "CLKV_ERR_LOCAL_MEMORY"},
        {CLKV_ERR_KERNEL_SOURCE, "CLKV_ERR_KERNEL_SOURCE"},
        {CLKV_ERR_INTERNAL, "CLKV_ERR_INTERNAL"},
        {CLKV_ERR_DEVICE_LIMIT, "CLKV_ERR_DEVICE_LIMIT"},
        {CL_DEVICE_NOT_FOUND, "CL_DEVICE_NOT_FOUND"},
        {CL_OUT_OF_RESOURCES, "CL_OUT_OF_RESOURCES"},
        {CL_OUT_OF_HOST_MEMORY, "CL_OUT_OF_HOST_MEMORY"},
        {CL_MEM_OBJECT_ALLOCATION_FAILURE, "CL_MEM_OBJECT_ALLOCATION_FAILURE"},
        {CL_BUILD_PROGRAM_FAILURE, "CL_BUILD_PROGRAM_FAILURE"},
        {CL_INVALID_VALUE, "CL_INVALID_VALUE"},
        {CL_INVALID_BUILD_OPTIONS, "CL_INVALID_BUILD_OPTIONS"},
        {CL_INVALID_KERNEL_ARGS, "CL_INVALID_KERNEL_ARGS"},
        {CL_INVALID_WORK_GROUP_SIZE, "CL_INVALID_WORK_GROUP_SIZE"},
        {CL_INVALID_MEM_OBJECT, "CL_INVALID_MEM_OBJECT"},
    };
    static const clkv_status unknown[] = {1,     12345, -500,    -1999,  -2099,
                                          -2500, -3099, INT_MIN, INT_MAX};
    (void)state;
    tu_set_case("clkv_status_string");
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        const char *s = clkv_status_string(known[i].code);
        if (s == NULL || strcmp(s, known[i].name) != 0) {
            TU_FAIL("clkv_status_string(%d) = \"%s\", expected \"%s\"", known[i].code,
                    s ? s : "(null)", known[i].name);
        }
    }
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        const char *s = clkv_status_string(unknown[i]);
        if (s == NULL || strcmp(s, "CLKV_UNKNOWN_STATUS") != 0) {
            TU_FAIL("clkv_status_string(%d) = \"%s\", expected \"CLKV_UNKNOWN_STATUS\"", unknown[i],
                    s ? s : "(null)");
        }
    }
    tu_set_case("%s", "");
}

static void test_dtype_functions(void **state) {
    static const struct {
        clkv_dtype dt;
        uint32_t size;
        const char *name;
    } known[] = {
        {CLKV_F32, 4, "f32"}, {CLKV_F16, 2, "f16"}, {CLKV_BF16, 2, "bf16"},
        {CLKV_I32, 4, "i32"}, {CLKV_U8, 1, "u8"},   {CLKV_U32, 4, "u32"},
    };
    (void)state;
    tu_set_case("clkv_dtype_size / clkv_dtype_name");
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        if (clkv_dtype_size(known[i].dt) != known[i].size) {
            TU_FAIL("clkv_dtype_size(%s) = %u, expected %u", known[i].name,
                    clkv_dtype_size(known[i].dt), known[i].size);
        }
        if (clkv_dtype_name(known[i].dt) == NULL ||
            strcmp(clkv_dtype_name(known[i].dt), known[i].name) != 0) {
            TU_FAIL("clkv_dtype_name(%d) = \"%s\", expected \"%s\"", (int)known[i].dt,
                    clkv_dtype_name(known[i].dt), known[i].name);
        }
    }
    assert_int_equal(clkv_dtype_size((clkv_dtype)99), 0);
    assert_int_equal(clkv_dtype_size((clkv_dtype)-1), 0);
    assert_string_equal(clkv_dtype_name((clkv_dtype)99), "?");
    assert_string_equal(clkv_dtype_name((clkv_dtype)-1), "?");
    tu_set_case("%s", "");
}

static void test_tensor_constructors(void **state) {
    cl_mem fake = (cl_mem)(uintptr_t)0x1000; /* never dereferenced */
    clkv_tensor t;
    char v[32];
    (void)state;
    tu_set_case("tensor constructors / version");

    t = clkv_tensor_1d(fake, CLKV_I32, 5);
    assert_ptr_equal(t.buf, fake);
    assert_int_equal(t.offset, 0);
    assert_int_equal(t.dtype, CLKV_I32);
    assert_int_equal(t.ndim, 1);
    assert_int_equal(t.dims[0], 5);
    assert_int_equal(t.strides[0], 1);

    t = clkv_tensor_2d(fake, CLKV_F32, 3, 7);
    assert_int_equal(t.ndim, 2);
    assert_int_equal(t.dims[0], 3);
    assert_int_equal(t.dims[1], 7);
    assert_int_equal(t.strides[0], 7);
    assert_int_equal(t.strides[1], 1);

    t = clkv_tensor_3d(fake, CLKV_F16, 2, 3, 5);
    assert_int_equal(t.ndim, 3);
    assert_int_equal(t.strides[0], 15);
    assert_int_equal(t.strides[1], 5);
    assert_int_equal(t.strides[2], 1);

    t = clkv_tensor_4d(fake, CLKV_BF16, 2, 3, 5, 64);
    assert_int_equal(t.ndim, 4);
    assert_int_equal(t.dtype, CLKV_BF16);
    assert_int_equal(t.dims[0], 2);
    assert_int_equal(t.dims[1], 3);
    assert_int_equal(t.dims[2], 5);
    assert_int_equal(t.dims[3], 64);
    assert_int_equal(t.strides[0], 3 * 5 * 64);
    assert_int_equal(t.strides[1], 5 * 64);
    assert_int_equal(t.strides[2], 64);
    assert_int_equal(t.strides[3], 1);
    assert_int_equal(t.offset, 0);

    /* NHD: logical [B, H, L, D] over storage [B, L, H, D] */
    t = clkv_tensor_4d_nhd(fake, CLKV_F32, 2, 3, 5, 64);
    assert_int_equal(t.ndim, 4);
    assert_int_equal(t.dims[0], 2);
    assert_int_equal(t.dims[1], 3);
    assert_int_equal(t.dims[2], 5);
    assert_int_equal(t.dims[3], 64);
    assert_int_equal(t.strides[0], 5 * 3 * 64);
    assert_int_equal(t.strides[1], 64);
    assert_int_equal(t.strides[2], 3 * 64);
    assert_int_equal(t.strides[3], 1);
    assert_int_equal(t.offset, 0);

    t = clkv_tensor_none();
    assert_null(t.buf);

    snprintf(v, sizeof v, "%d.%d.%d", CLKV_VERSION_MAJOR, CLKV_VERSION_MINOR, CLKV_VERSION_PATCH);
    assert_non_null(clkv_version_string());
    assert_string_equal(clkv_version_string(), v);
    tu_set_case("%s", "");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_string),
        cmocka_unit_test(test_dtype_functions),
        cmocka_unit_test(test_tensor_constructors),
        cmocka_unit_test(test_context_create_bad),
        cmocka_unit_test(test_context_create_from_cl),
        cmocka_unit_test(test_context_accessors_null),
        cmocka_unit_test(test_reserve_workspace),
        cmocka_unit_test(test_baseline_ok),
        cmocka_unit_test(test_decode_null),
        cmocka_unit_test(test_decode_dtype),
        cmocka_unit_test(test_decode_shape),
        cmocka_unit_test(test_decode_unsupported_head_dim),
        cmocka_unit_test(test_decode_range),
        cmocka_unit_test(test_decode_stride),
        cmocka_unit_test(test_decode_alignment),
        cmocka_unit_test(test_decode_buffer_size),
        cmocka_unit_test(test_decode_overflow),
        cmocka_unit_test(test_baseline_ok_after),
    };
    printf("[ seed     ] 0x%016" PRIx64 "\n", tu_seed(0x7A11DA7E));
    return cmocka_run_group_tests_name("validation", tests, group_setup, group_teardown);
}
