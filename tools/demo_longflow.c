/* `clkv demo` step "longflow": a static LongFlow cache (clkv/longflow.h, per-layer mode,
 * protect 1) loaded from a prompt (one sequence filling the budget, one shorter so its
 * empty slots fill first), then decode steps with drifting queries and random new
 * tokens.
 *
 * Checks against a host model of the header's definition (double precision), run
 * alongside the first `ref_steps` steps (the model adopts the device's victim after
 * each comparison, so one near-tie cannot cascade):
 *   - the first victim after the load (the lowest empty slot, else the argmin of the
 *     score computed with the last prompt query, newest position protected);
 *   - each step's output o (f32, SPEC §0.2 f32 tolerance) and every slot's score
 *     (relative 2e-3);
 *   - each step's next victim: equal to the model's, or (counted as a near tie) a valid
 *     unprotected slot whose model score is within 1e-4 relative of the minimum.
 * Then `iters` x `repeats` more steps are timed back to back: us/step. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "demo.h"
#include "reference.h"
#include "tool_data.h"

typedef struct demo_longflow_cfg {
    demo_problem_spec p; /* L = slots; lengths <= slots */
    int ref_steps, iters, repeats;
} demo_longflow_cfg;

const demo_longflow_cfg demo_longflow_cpu = {.p = {.B = 2,
                                                   .Hq = 32,
                                                   .Hkv = 8,
                                                   .D = 128,
                                                   .L = 1024,
                                                   .lengths = {1024, 1000},
                                                   .dtype = CLKV_BF16,
                                                   .needles = 8,
                                                   .needle_gain = 6.0f,
                                                   .query_gain = 16.0f,
                                                   .seed = 300u},
                                             .ref_steps = 40,
                                             .iters = 10,
                                             .repeats = 3};
const demo_longflow_cfg demo_longflow_gpu = {.p = {.B = 2,
                                                   .Hq = 32,
                                                   .Hkv = 8,
                                                   .D = 128,
                                                   .L = 32768,
                                                   .lengths = {32768, 32760},
                                                   .dtype = CLKV_BF16,
                                                   .needles = 8,
                                                   .needle_gain = 6.0f,
                                                   .query_gain = 16.0f,
                                                   .seed = 300u},
                                             .ref_steps = 12,
                                             .iters = 50,
                                             .repeats = 9};

/* Host model of the cache (per-layer mode: one slot map per sequence). */
typedef struct lf_model {
    int64_t B, Hq, Hkv, D, S, G;
    float *k, *v; /* [B, Hkv, S, D] */
    int32_t *pos; /* [B, S], -1 empty */
    int32_t next[DEMO_MAX_B], victim[DEMO_MAX_B];
    double *o, *score; /* [B, Hq, D], [B, S] */
    double *z;         /* scratch [S] */
} lf_model;

/* Attention over the valid slots of every sequence and every slot's score (header
 * (b)). */
static void lf_pass(lf_model *m, const float *q) {
    const double scale = 1.0 / sqrt((double)m->D);
    for (int64_t b = 0; b < m->B; b++) {
        double *sc = m->score + b * m->S;
        for (int64_t i = 0; i < m->S; i++) {
            sc[i] = m->pos[b * m->S + i] < 0 ? -INFINITY : 0.0;
        }
        for (int64_t hq = 0; hq < m->Hq; hq++) {
            const int64_t h = hq / m->G;
            const float *qh = q + (b * m->Hq + hq) * m->D;
            const float *kb = m->k + (b * m->Hkv + h) * m->S * m->D;
            const float *vb = m->v + (b * m->Hkv + h) * m->S * m->D;
            double mx = -INFINITY, l = 0.0;
            for (int64_t i = 0; i < m->S; i++) {
                if (m->pos[b * m->S + i] < 0) {
                    continue;
                }
                double z = 0.0;
                for (int64_t d = 0; d < m->D; d++) {
                    z += (double)qh[d] * kb[i * m->D + d];
                }
                m->z[i] = z * scale;
                mx = m->z[i] > mx ? m->z[i] : mx;
            }
            for (int64_t i = 0; i < m->S; i++) {
                if (m->pos[b * m->S + i] >= 0) {
                    l += exp(m->z[i] - mx);
                }
            }
            double *o = m->o + (b * m->Hq + hq) * m->D;
            for (int64_t d = 0; d < m->D; d++) {
                o[d] = 0.0;
            }
            for (int64_t i = 0; i < m->S; i++) {
                if (m->pos[b * m->S + i] < 0) {
                    continue;
                }
                const double pr = exp(m->z[i] - mx) / l;
                double n1 = 0.0;
                for (int64_t d = 0; d < m->D; d++) {
                    o[d] += pr * vb[i * m->D + d];
                    n1 += fabs((double)vb[i * m->D + d]);
                }
                sc[i] += pr * n1 / (double)m->Hq;
            }
        }
    }
}

/* Header (c) with protect = 1: the lowest empty slot, else the valid slot of smallest
 * score among positions below `newest`, ties to the lower index. */
static int32_t lf_victim(const lf_model *m, int64_t b, int32_t newest) {
    const int32_t *pos = m->pos + b * m->S;
    for (int64_t i = 0; i < m->S; i++) {
        if (pos[i] < 0) {
            return (int32_t)i;
        }
    }
    int32_t best = -1;
    for (int64_t i = 0; i < m->S; i++) {
        if (pos[i] < newest && (best < 0 || m->score[b * m->S + i] < m->score[b * m->S + best])) {
            best = (int32_t)i;
        }
    }
    return best;
}

/* Compare the device's victim `dev` of sequence b with the model's; adopt dev. Returns 0
 * on a mismatch that is not a near tie. */
static int lf_check_victim(lf_model *m, int64_t b, int32_t newest, int32_t dev, int *ties) {
    const int32_t ref = lf_victim(m, b, newest);
    int ok = dev == ref;
    if (!ok && dev >= 0 && dev < m->S && ref >= 0) {
        const int32_t pd = m->pos[b * m->S + dev];
        const double sd = m->score[b * m->S + dev], sr = m->score[b * m->S + ref];
        ok = pd >= 0 && pd < newest && fabs(sd - sr) <= 1e-4 * fabs(sr) + 1e-30;
        *ties += ok;
    }
    if (dev >= 0 && dev < m->S) {
        m->victim[b] = dev;
    }
    return ok;
}

typedef struct lf_call {
    clkv_longflow_cache *cache;
    clkv_longflow_step_args a;
} lf_call;

static clkv_status call_step(void *arg) {
    lf_call *c = arg;
    return clkv_longflow_step(c->cache, &c->a, NULL);
}

int demo_longflow(demo_env *env, const void *vcfg, demo_row *row) {
    const demo_longflow_cfg *cfg = vcfg;
    clkv_context *ctx = env->ctx;
    demo_problem p;
    clkv_status st = demo_problem_create(ctx, &cfg->p, &p);
    if (st != CLKV_OK) {
        return report_failure(ctx, st, "longflow: problem");
    }
    const int64_t B = p.s.B, Hq = p.s.Hq, Hkv = p.s.Hkv, D = p.s.D, S = p.s.L;
    snprintf(row->shape, sizeof row->shape, "B=%lld Hq=%lld Hkv=%lld D=%lld S=%lld prompt={%d,%d}",
             (long long)B, (long long)Hq, (long long)Hkv, (long long)D, (long long)S,
             p.s.lengths[0], B > 1 ? p.s.lengths[1] : 0);
    snprintf(row->dtype, sizeof row->dtype, "bf16->f32");
    lf_model m = {.B = B, .Hq = Hq, .Hkv = Hkv, .D = D, .S = S, .G = Hq / Hkv};
    const int64_t qn = B * Hq * D, kvn = B * Hkv * D;
    m.k = malloc((size_t)(B * Hkv * S * D) * sizeof(float));
    m.v = malloc((size_t)(B * Hkv * S * D) * sizeof(float));
    m.pos = malloc((size_t)(B * S) * sizeof(int32_t));
    m.o = malloc((size_t)qn * sizeof(double));
    m.score = malloc((size_t)(B * S) * sizeof(double));
    m.z = malloc((size_t)S * sizeof(double));
    float *q = malloc((size_t)qn * sizeof(float));
    float *kn = malloc((size_t)kvn * sizeof(float)), *vn = malloc((size_t)kvn * sizeof(float));
    float *o_dev = malloc((size_t)qn * sizeof(float));
    float *s_dev = malloc((size_t)(B * S) * sizeof(float));
    int32_t vic_dev[DEMO_MAX_B];
    clkv_longflow_cache *cache = NULL;
    cl_mem dq = NULL, dkn = NULL, dvn = NULL, dout = NULL, dsc = NULL, dvic = NULL;
    const char *what = "longflow: host memory";
    if (!m.k || !m.v || !m.pos || !m.o || !m.score || !m.z || !q || !kn || !vn || !o_dev ||
        !s_dev) {
        st = CLKV_ERR_OUT_OF_HOST_MEMORY;
    }
    if (st == CLKV_OK) {
        what = "longflow: buffers";
        memcpy(m.k, p.k, (size_t)(B * Hkv * S * D) * sizeof(float));
        memcpy(m.v, p.v, (size_t)(B * Hkv * S * D) * sizeof(float));
        for (int64_t b = 0; b < B; b++) {
            for (int64_t i = 0; i < S; i++) {
                m.pos[b * S + i] = i < p.s.lengths[b] ? (int32_t)i : -1;
            }
            m.next[b] = p.s.lengths[b];
        }
        demo_problem_query(&p, 0, 0.0, q);
        st = demo_upload(ctx, "longflow q", q, qn, CLKV_BF16, &dq);
    }
    if (st == CLKV_OK) {
        st = tool_buffer(ctx, "longflow k_new", (uint64_t)kvn * 2, &dkn);
    }
    if (st == CLKV_OK) {
        st = tool_buffer(ctx, "longflow v_new", (uint64_t)kvn * 2, &dvn);
    }
    if (st == CLKV_OK) {
        st = tool_buffer(ctx, "longflow o", (uint64_t)qn * 4, &dout);
    }
    if (st == CLKV_OK) {
        st = tool_buffer(ctx, "longflow scores", (uint64_t)(B * S) * 4, &dsc);
    }
    if (st == CLKV_OK) {
        st = tool_buffer(ctx, "longflow victims", (uint64_t)B * 4, &dvic);
    }
    if (st == CLKV_OK) {
        what = "clkv_longflow_cache_create";
        clkv_longflow_cache_create_args ca = CLKV_LONGFLOW_CACHE_CREATE_ARGS_INIT;
        ca.batch = B, ca.q_heads = Hq, ca.kv_heads = Hkv, ca.head_dim = D, ca.slots = S;
        ca.dtype = CLKV_BF16, ca.mode = CLKV_LONGFLOW_PER_LAYER, ca.protect = 1;
        st = clkv_longflow_cache_create(ctx, &ca, &cache);
    }
    if (st == CLKV_OK) {
        what = "clkv_longflow_cache_load";
        clkv_longflow_load_args la = CLKV_LONGFLOW_LOAD_ARGS_INIT;
        la.k = clkv_tensor_4d(p.dk, CLKV_BF16, B, Hkv, S, D);
        la.v = clkv_tensor_4d(p.dv, CLKV_BF16, B, Hkv, S, D);
        la.lengths = clkv_tensor_1d(p.dlen, CLKV_I32, B);
        la.q = clkv_tensor_3d(dq, CLKV_BF16, B, Hq, D);
        st = clkv_longflow_cache_load(cache, &la, NULL);
    }
    int pass = 1, ties = 0, victims_checked = 0, victim_bad = 0, evicted_needles = 0;
    tool_compare co;
    tool_compare_init(&co, CLKV_F32);
    int64_t score_bad = 0, scores_checked = 0;
    double score_worst = 0.0;
    if (st == CLKV_OK) {
        what = "longflow: read victims";
        const clkv_tensor vt = clkv_longflow_cache_victims(cache);
        st = tool_read(ctx, vt.buf, vic_dev, (size_t)B * sizeof(int32_t));
    }
    if (st == CLKV_OK) {
        lf_pass(&m, q); /* the load's score pass with the last prompt query */
        for (int64_t b = 0; b < B; b++) {
            victims_checked++;
            victim_bad += !lf_check_victim(&m, b, m.next[b] - 1, vic_dev[b], &ties);
        }
    }
    lf_call lc = {.cache = cache};
    clkv_longflow_step_args sa = CLKV_LONGFLOW_STEP_ARGS_INIT;
    sa.q = clkv_tensor_3d(dq, CLKV_BF16, B, Hq, D);
    sa.k_new = clkv_tensor_3d(dkn, CLKV_BF16, B, Hkv, D);
    sa.v_new = clkv_tensor_3d(dvn, CLKV_BF16, B, Hkv, D);
    sa.o = clkv_tensor_3d(dout, CLKV_F32, B, Hq, D);
    sa.scores = clkv_tensor_3d(dsc, CLKV_F32, B, 1, S);
    sa.victims = clkv_tensor_2d(dvic, CLKV_I32, B, 1);
    lc.a = sa;
    for (int t = 0; t < cfg->ref_steps && st == CLKV_OK; t++) {
        what = "longflow: step inputs";
        demo_problem_query(&p, t + 1, 0.05 * (t + 1), q);
        for (int64_t i = 0; i < kvn; i++) {
            const uint64_t idx = (uint64_t)(t * kvn + i);
            kn[i] = tool_round_to(CLKV_BF16, tool_rand_value(idx, p.s.seed + 20u, 1.0f));
            vn[i] = tool_round_to(CLKV_BF16, tool_rand_value(idx, p.s.seed + 21u, 1.0f));
        }
        void *hq16 = demo_to_dtype(q, qn, CLKV_BF16), *hk16 = demo_to_dtype(kn, kvn, CLKV_BF16);
        void *hv16 = demo_to_dtype(vn, kvn, CLKV_BF16);
        st = hq16 && hk16 && hv16 ? CLKV_OK : CLKV_ERR_OUT_OF_HOST_MEMORY;
        if (st == CLKV_OK) {
            st = tool_write(ctx, dq, hq16, (size_t)qn * 2);
        }
        if (st == CLKV_OK) {
            st = tool_write(ctx, dkn, hk16, (size_t)kvn * 2);
        }
        if (st == CLKV_OK) {
            st = tool_write(ctx, dvn, hv16, (size_t)kvn * 2);
        }
        free(hq16);
        free(hk16);
        free(hv16);
        if (st == CLKV_OK) {
            what = "clkv_longflow_step";
            st = clkv_longflow_step(cache, &sa, NULL);
        }
        if (st == CLKV_OK) {
            st = tool_read(ctx, dout, o_dev, (size_t)qn * 4);
        }
        if (st == CLKV_OK) {
            st = tool_read(ctx, dsc, s_dev, (size_t)(B * S) * 4);
        }
        if (st == CLKV_OK) {
            st = tool_read(ctx, dvic, vic_dev, (size_t)B * 4);
        }
        if (st != CLKV_OK) {
            break;
        }
        /* Model: (a) write into the victim slot, (b) pass, (c) victim. */
        for (int64_t b = 0; b < B; b++) {
            const int32_t slot = m.victim[b];
            for (int64_t j = 0; j < p.s.needles; j++) {
                for (int64_t h = 0; h < Hkv; h++) {
                    evicted_needles +=
                        m.pos[b * S + slot] == p.needles[(b * Hkv + h) * p.s.needles + j];
                }
            }
            for (int64_t h = 0; h < Hkv; h++) {
                memcpy(m.k + ((b * Hkv + h) * S + slot) * D, kn + (b * Hkv + h) * D,
                       (size_t)D * sizeof(float));
                memcpy(m.v + ((b * Hkv + h) * S + slot) * D, vn + (b * Hkv + h) * D,
                       (size_t)D * sizeof(float));
            }
            m.pos[b * S + slot] = m.next[b]++;
        }
        lf_pass(&m, q);
        for (int64_t i = 0; i < qn; i++) {
            tool_compare_value(&co, o_dev[i], m.o[i]);
        }
        for (int64_t b = 0; b < B; b++) {
            double smax = 0.0;
            for (int64_t i = 0; i < S; i++) {
                smax = m.score[b * S + i] > smax ? m.score[b * S + i] : smax;
            }
            for (int64_t i = 0; i < S; i++) {
                const double r = m.score[b * S + i], x = s_dev[b * S + i];
                scores_checked++;
                if (isinf(r)) {
                    score_bad += !(isinf(x) && x < 0);
                    continue;
                }
                const double bound = 2e-3 * fabs(r) + 1e-6 * smax;
                score_bad += !(fabs(x - r) <= bound);
                if (fabs(x - r) / bound > score_worst) {
                    score_worst = fabs(x - r) / bound;
                }
            }
            victims_checked++;
            victim_bad += !lf_check_victim(&m, b, m.next[b] - 1, vic_dev[b], &ties);
        }
    }
    double us_step = NAN;
    if (st == CLKV_OK) {
        what = "clkv_longflow_step (timed)";
        st = demo_time(ctx, call_step, &lc, cfg->iters, cfg->repeats, &us_step);
        us_step *= 1e6;
    }
    pass = tool_compare_pass(&co) && score_bad == 0 && victim_bad == 0 && co.count > 0;
    demo_row_line(row, "%-34s %d checked, %d near ties, %d wrong", "victims (load + steps)",
                  victims_checked, ties, victim_bad);
    demo_row_line(row, "%-34s %lld checked, %lld outside 2e-3 rel (worst %.3g of bound)",
                  "slot scores", (long long)scores_checked, (long long)score_bad, score_worst);
    demo_row_line(row, "%-34s %lld values, %lld outside f32 tolerance (worst %.3g of bound)",
                  "outputs o", (long long)co.count, (long long)co.bad, co.worst_ratio);
    demo_row_line(row, "%-34s %d (of %lld needle slots over %d steps)", "needles evicted",
                  evicted_needles, (long long)(B * Hkv * p.s.needles), cfg->ref_steps);
    clkv_longflow_cache_destroy(cache);
    tool_release(&dq);
    tool_release(&dkn);
    tool_release(&dvn);
    tool_release(&dout);
    tool_release(&dsc);
    tool_release(&dvic);
    free(m.k);
    free(m.v);
    free(m.pos);
    free(m.o);
    free(m.score);
    free(m.z);
    free(q);
    free(kn);
    free(vn);
    free(o_dev);
    free(s_dev);
    demo_problem_free(&p);
    if (st != CLKV_OK) {
        return report_failure(ctx, st, what);
    }
    const uint64_t bytes = (uint64_t)(B * Hkv * S * D * 2 * 2);
    row->us_per_call = us_step;
    row->gbps = (double)bytes / (us_step * 1e-6) * 1e-9;
    row->pct_bw = 100.0 * row->gbps / env->bw.gbps_median;
    row->max_err = co.max_abs_err;
    row->max_lse_err = NAN;
    row->pass = pass;
    snprintf(row->note, sizeof row->note,
             "per-layer victims, protect 1; first %d steps (and the load) checked against a host "
             "model; us/call = one step (write + attention/score + victim)",
             cfg->ref_steps);
    return TOOL_EXIT_OK;
}
