/* Double-precision references of the eviction scorers: see ref_score.h. */
#include "ref/ref_score.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/test_util.h"

static double dot(const float *x, const float *y, int64_t D) {
    double s = 0;
    for (int64_t e = 0; e < D; e++)
        s += (double)x[e] * y[e];
    return s;
}

static double dropkv_weight(double p, double eps, int round_p, clkv_dtype dt) {
    double pt = p < 0 ? 0 : (p > 1 ? 1 : p);
    if (round_p)
        pt = tu_round_dtype(dt, (float)pt);
    const double w = pt / (1.0 - pt + eps);
    return w * w;
}

/* Raw (unpooled) score and its tolerance for token j of (b, kvh). */
static void raw_window(const ref_score_cfg *c, int64_t b, int64_t kvh, int64_t j, int64_t n,
                       double maxk, double maxv, double *raw, double *tau, double *vnorm,
                       double *vtau) {
    const int64_t D = c->D, W = c->W, G = c->Hq / c->Hkv;
    const float *kj = c->k + ((b * c->Hkv + kvh) * c->L + j) * D;
    const float *vj = c->v ? c->v + ((b * c->Hkv + kvh) * c->L + j) * D : NULL;
    double total = 0, tol = 0, best = 0;
    for (int64_t g = 0; g < G; g++) {
        const int64_t h = kvh * G + g;
        double acc = 0;
        for (int64_t t = 0; t < W; t++) {
            const int64_t pos = n - W + t;
            if (j > pos)
                continue;
            const int64_t row = (b * c->Hq + h) * W + t;
            const float *qt = c->q + row * D;
            const double z = c->scale * dot(qt, kj, D);
            const double l = c->lse[row];
            const double p = isinf(l) ? 0.0 : exp(z - l);
            switch (c->method) {
            case CLKV_SCORE_DROPKV: {
                const float *at = c->a + row * D;
                double d2 = 0, an = 0, vn = 0;
                for (int64_t e = 0; e < D; e++) {
                    const double df = (double)at[e] - vj[e];
                    d2 += df * df;
                    an += (double)at[e] * at[e];
                    vn += (double)vj[e] * vj[e];
                }
                const double w = dropkv_weight(p, c->eps, c->round_p, c->kv_dtype);
                acc += w * d2;
                /* SPEC §2.1 tau */
                const double qn = sqrt(dot(qt, qt, D));
                const double dz = ldexp(1.0, -20) * sqrt((double)D) * c->scale * qn * maxk;
                const double pc = p > 1 ? 1 : p;
                double t1 = w * d2 * 4 * dz * (1 + c->eps) / (1 - pc + c->eps);
                double t2 =
                    w * (ldexp(1.0, -18) * (an + vn) + 2 * sqrt(d2) * ldexp(1.0, -20) * maxv);
                double t3 = 0;
                if (c->round_p) { /* p near a rounding boundary of the weight's dtype */
                    const double lo = dropkv_weight(p * (1 - 4 * dz), c->eps, 1, c->kv_dtype);
                    const double hi = dropkv_weight(p * (1 + 4 * dz), c->eps, 1, c->kv_dtype);
                    t3 = fmax(fabs(hi - w), fabs(lo - w)) * d2;
                }
                tol += t1 + t2 + t3;
                break;
            }
            case CLKV_SCORE_ANDPRO: {
                const double av = dot(c->a + row * D, vj, D);
                double mag = 0;
                for (int64_t e = 0; e < D; e++)
                    mag += fabs((double)c->a[row * D + e] * vj[e]);
                acc += p * av;
                tol += 1e-5 * p * mag;
                break;
            }
            default:
                acc += p;
                break;
            }
        }
        if (c->method == CLKV_SCORE_DIFFKV)
            best = acc > best ? acc : best;
        total += acc;
    }
    switch (c->method) {
    case CLKV_SCORE_SNAPKV:
    case CLKV_SCORE_CRITICALKV:
        *raw = total / (double)(G * W);
        break;
    case CLKV_SCORE_DIFFKV: {
        const int64_t cnt = n - j < W ? n - j : W;
        *raw = best / (double)cnt;
        break;
    }
    default:
        *raw = total / (double)G;
        break;
    }
    *tau = tol / (double)G;
    if (c->method == CLKV_SCORE_CRITICALKV) {
        double s = 0, mag = 0;
        if (!c->w_o) {
            for (int64_t e = 0; e < D; e++)
                s += fabs((double)vj[e]);
        } else {
            for (int64_t g = 0; g < G; g++) {
                const float *wo = c->w_o + (kvh * G + g) * D * c->Dm;
                for (int64_t m = 0; m < c->Dm; m++) {
                    double x = 0;
                    for (int64_t e = 0; e < D; e++) {
                        x += (double)vj[e] * wo[e * c->Dm + m];
                        mag += fabs((double)vj[e] * wo[e * c->Dm + m]);
                    }
                    s += fabs(x);
                }
            }
            s /= (double)G;
            mag /= (double)G;
        }
        *vnorm = s;
        *vtau = 1e-5 * mag;
    }
}

int ref_score(const ref_score_cfg *c, double *scores, double *tau, double *pbar) {
    const int64_t B = c->B, H = c->Hkv, L = c->L, D = c->D, W = c->W;
    if (B < 0 || H <= 0 || L < 0 || D <= 0 || c->pool_k < 1 || c->pool_k % 2 == 0)
        return -1;
    const int win = clkv_score_method_uses_window(c->method);
    if (win && (c->Hq % H != 0 || W < 1))
        return -1;
    double *raw = (double *)calloc((size_t)(L ? L : 1), sizeof(double));
    double *rt = (double *)calloc((size_t)(L ? L : 1), sizeof(double));
    double *vn = (double *)calloc((size_t)(L ? L : 1), sizeof(double));
    double *vt = (double *)calloc((size_t)(L ? L : 1), sizeof(double));
    double *mu = (double *)calloc((size_t)D, sizeof(double));
    if (!raw || !rt || !vn || !vt || !mu) {
        free(raw), free(rt), free(vn), free(vt), free(mu);
        return -1;
    }
    for (int64_t b = 0; b < B; b++) {
        const int64_t n = c->len ? c->len[b] : L;
        for (int64_t kvh = 0; kvh < H; kvh++) {
            const float *kb = c->k + (b * H + kvh) * L * D;
            /* max_i ||k_i||, max_i ||v_i|| over the valid tokens (DropKV tau) */
            double maxk = 0, maxv = 0;
            for (int64_t i = 0; i < n; i++) {
                maxk = fmax(maxk, sqrt(dot(kb + i * D, kb + i * D, D)));
                if (c->v) {
                    const float *vi = c->v + ((b * H + kvh) * L + i) * D;
                    maxv = fmax(maxv, sqrt(dot(vi, vi, D)));
                }
            }
            if (c->method == CLKV_SCORE_KEYDIFF) {
                memset(mu, 0, (size_t)D * sizeof(double));
                for (int64_t i = 0; i < n; i++) {
                    const double nk = sqrt(dot(kb + i * D, kb + i * D, D));
                    const double w = c->keydiff_raw_mean ? 1.0 : (nk > 0 ? 1.0 / nk : 0.0);
                    for (int64_t e = 0; e < D; e++)
                        mu[e] += w * kb[i * D + e] / (double)n;
                }
            }
            for (int64_t j = 0; j < n; j++) {
                rt[j] = 0;
                if (win) {
                    raw_window(c, b, kvh, j, n, maxk, maxv, &raw[j], &rt[j], &vn[j], &vt[j]);
                } else if (c->method == CLKV_SCORE_KNORM) {
                    raw[j] = -sqrt(dot(kb + j * D, kb + j * D, D));
                } else if (c->method == CLKV_SCORE_KEYDIFF) {
                    double km = 0, mm = 0;
                    for (int64_t e = 0; e < D; e++) {
                        km += kb[j * D + e] * mu[e];
                        mm += mu[e] * mu[e];
                    }
                    const double den = sqrt(dot(kb + j * D, kb + j * D, D)) * sqrt(mm);
                    raw[j] = den > 0 ? -km / den : 0.0;
                    rt[j] = 1e-5;
                }
            }
            const int64_t P = c->pool_excl_window ? (n - W > 0 ? n - W : 0) : n;
            for (int64_t j = 0; j < L; j++) {
                const int64_t o = (b * H + kvh) * L + j;
                double val, tv = 0;
                if (j >= n)
                    val = -INFINITY;
                else if (j >= n - c->protect)
                    val = INFINITY;
                else if (c->method == CLKV_SCORE_STREAMINGLLM)
                    val = (j < c->sink || j >= n - c->recent) ? INFINITY : (double)(float)j;
                else if (c->pool != 0 && j < P) {
                    const int64_t half = c->pool_k / 2;
                    const int64_t lo = j - half < 0 ? 0 : j - half;
                    const int64_t hi = j + half > P - 1 ? P - 1 : j + half;
                    double s = 0, m = -INFINITY, ts = 0, tm = 0;
                    for (int64_t i = lo; i <= hi; i++) {
                        s += raw[i];
                        ts += rt[i];
                        m = fmax(m, raw[i]);
                        tm = fmax(tm, rt[i]);
                    }
                    val = c->pool == 1 ? s / c->pool_k : m;
                    tv = c->pool == 1 ? ts / c->pool_k : tm;
                } else {
                    val = raw[j];
                    tv = rt[j];
                }
                if (c->method == CLKV_SCORE_CRITICALKV) {
                    if (pbar)
                        pbar[o] = val;
                    if (isfinite(val)) {
                        tv = tv * vn[j] + (val + 1e-4) * vt[j];
                        val = (val + 1e-4) * vn[j];
                    }
                }
                scores[o] = val;
                tau[o] = isfinite(val) ? tv : 0.0;
            }
        }
    }
    free(raw), free(rt), free(vn), free(vt), free(mu);
    return 0;
}

int64_t ref_keep_count(int64_t n, double ratio, int64_t budget, int64_t window) {
    int64_t k = budget >= 0 ? budget : (int64_t)(ratio * (double)n);
    if (k < window)
        k = window;
    if (k < 1)
        k = 1;
    return k < n ? k : n;
}
