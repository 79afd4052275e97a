/* `clkv demo` steps "decode-attention" and "decode-attention-nhd": decode attention
 * (clkv_attention_decode) over ragged device-filled caches, checked against the double
 * reference (tools/reference.c, SPEC §0.2 tolerances), with GB/s and %% of the measured
 * streaming-read bandwidth. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "decode_setup.h"
#include "demo.h"
#include "reference.h"

typedef struct demo_decode_cfg {
    int64_t B, Hq, Hkv, D, L;
    int32_t lengths[DEMO_MAX_B];
    clkv_dtype kv_dtype, o_dtype;
    int nhd, lse, iters, repeats;
} demo_decode_cfg;

int demo_decode(demo_env *env, const void *vcfg, demo_row *row) {
    const demo_decode_cfg *cfg = vcfg;
    clkv_context *ctx = env->ctx;
    tool_decode_shape s = {.B = cfg->B,
                           .Hq = cfg->Hq,
                           .Hkv = cfg->Hkv,
                           .D = cfg->D,
                           .L = cfg->L,
                           .q_dtype = cfg->kv_dtype,
                           .kv_dtype = cfg->kv_dtype,
                           .o_dtype = cfg->o_dtype,
                           .nhd = cfg->nhd};
    int n = snprintf(row->shape, sizeof row->shape, "B=%lld Hq=%lld Hkv=%lld D=%lld %s len={",
                     (long long)s.B, (long long)s.Hq, (long long)s.Hkv, (long long)s.D,
                     s.nhd ? "nhd" : "hnd");
    for (int64_t b = 0; b < s.B && n > 0 && (size_t)n < sizeof row->shape; b++) {
        n += snprintf(row->shape + n, sizeof row->shape - (size_t)n, "%s%d", b ? "," : "",
                      cfg->lengths[b]);
    }
    if (n > 0 && (size_t)n < sizeof row->shape) {
        snprintf(row->shape + n, sizeof row->shape - (size_t)n, "}");
    }
    snprintf(row->dtype, sizeof row->dtype, "%s->%s%s", clkv_dtype_name(s.kv_dtype),
             clkv_dtype_name(s.o_dtype), cfg->lse ? "+lse" : "");

    tool_decode_bufs bufs;
    clkv_status st = tool_decode_alloc(ctx, &s, cfg->lse, &bufs);
    if (st != CLKV_OK) {
        return report_failure(ctx, st, "demo allocation");
    }
    const char *what = "demo input fill";
    st = tool_decode_fill_device(ctx, &s, &bufs, cfg->lengths);
    int64_t max_len = 0;
    for (int64_t b = 0; b < s.B; b++) {
        max_len = cfg->lengths[b] > max_len ? cfg->lengths[b] : max_len;
    }
    clkv_attention_decode_args a;
    tool_decode_args(&s, &bufs, max_len, 0, &a);
    tool_timing t = {0};
    if (st == CLKV_OK) {
        what = "clkv_attention_decode";
        st = tool_decode_time(ctx, &a, 1, cfg->iters, cfg->repeats, "[demo] timing", &t);
    }
    tool_compare c;
    tool_compare_init(&c, s.o_dtype);
    if (st == CLKV_OK) {
        what = "demo check";
        int64_t bl[DEMO_MAX_B], hl[64];
        for (int64_t b = 0; b < s.B; b++) {
            bl[b] = b;
        }
        int nh = s.Hkv < 64 ? (int)s.Hkv : 64;
        for (int h = 0; h < nh; h++) {
            hl[h] = h;
        }
        st = tool_decode_check(ctx, &s, &bufs, cfg->lengths, bl, (int)s.B, hl, nh, &c);
    }
    tool_decode_free(&bufs);
    if (st != CLKV_OK) {
        return report_failure(ctx, st, what);
    }
    uint64_t bytes = tool_decode_kv_bytes_read(&s, cfg->lengths);
    row->us_per_call = t.median_s * 1e6;
    row->gbps = (double)bytes / t.median_s * 1e-9;
    row->pct_bw = 100.0 * row->gbps / env->bw.gbps_median;
    row->max_err = c.max_abs_err;
    row->max_lse_err = cfg->lse ? c.max_lse_err : NAN;
    row->pass = tool_compare_pass(&c);
    snprintf(row->note, sizeof row->note,
             "%lld values checked, %lld outside |err| <= %g + %g|ref| (worst %.3g of the bound)"
             "%s",
             (long long)c.count, (long long)c.bad, c.atol, c.rtol, c.worst_ratio,
             cfg->lse ? (c.lse_bad ? ", LSE off by > 1e-4" : ", LSE within 1e-4") : "");
    return TOOL_EXIT_OK;
}

/* CPU sizes keep the whole demo around 10-20 s on a 2-core PoCL machine. */
const demo_decode_cfg demo_decode_cpu = {.B = 2,
                                         .Hq = 32,
                                         .Hkv = 8,
                                         .D = 128,
                                         .L = 8192,
                                         .lengths = {8192, 5000},
                                         .kv_dtype = CLKV_BF16,
                                         .o_dtype = CLKV_BF16,
                                         .nhd = 0,
                                         .lse = 1,
                                         .iters = 3,
                                         .repeats = 3};
const demo_decode_cfg demo_decode_gpu = {.B = 2,
                                         .Hq = 32,
                                         .Hkv = 8,
                                         .D = 128,
                                         .L = 32768,
                                         .lengths = {32768, 20000},
                                         .kv_dtype = CLKV_BF16,
                                         .o_dtype = CLKV_BF16,
                                         .nhd = 0,
                                         .lse = 1,
                                         .iters = 50,
                                         .repeats = 9};
const demo_decode_cfg demo_decode_nhd_cpu = {.B = 3,
                                             .Hq = 32,
                                             .Hkv = 8,
                                             .D = 128,
                                             .L = 4096,
                                             .lengths = {4096, 1234, 1},
                                             .kv_dtype = CLKV_F16,
                                             .o_dtype = CLKV_F32,
                                             .nhd = 1,
                                             .lse = 1,
                                             .iters = 3,
                                             .repeats = 3};
const demo_decode_cfg demo_decode_nhd_gpu = {.B = 3,
                                             .Hq = 32,
                                             .Hkv = 8,
                                             .D = 128,
                                             .L = 16384,
                                             .lengths = {16384, 777, 1},
                                             .kv_dtype = CLKV_F16,
                                             .o_dtype = CLKV_F32,
                                             .nhd = 1,
                                             .lse = 1,
                                             .iters = 50,
                                             .repeats = 9};
