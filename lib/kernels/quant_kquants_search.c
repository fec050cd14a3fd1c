/*
 * The K-quants' sub-block scale searches. Each makes the choice ggml's
 * reference quantizer makes (ggml-quants.c: make_qx_quants with x^2
 * weights, make_q3_quants, make_qkx2_quants), computed in the same float
 * operations in the same order: quant_kquants.c only ever improves on
 * that choice, so its error is at most ggml's block by block.
 */
#include <math.h>
#include <stdint.h>

#include "quant_util.h"

/* Blocks whose largest magnitude is below this are all zero (ggml's
 * GROUP_MAX_EPS). */
#define KQ_EPS 1e-15f

/* The first element of largest magnitude, signed. */
static float signed_amax(int n, const float *x, float *amax) {
    float best = 0.0f, a = 0.0f;
    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > a) {
            a = ax;
            best = x[i];
        }
    }
    *amax = a;
    return best;
}

/* Levels of x at 1/iscale, and the x^2-weighted sums sum w x l and
 * sum w l^2 that the least-squares scale sumlx / suml2 needs. */
static void sym_levels(int n, int nmax, const float *x, float iscale,
                       int8_t *lv, float *sumlx, float *suml2) {
    float a = 0.0f, b = 0.0f;
    for (int i = 0; i < n; i++) {
        int l = fx_clampi(fx_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        if (lv) lv[i] = (int8_t)l;
        float w = x[i] * x[i];
        a += w * x[i] * (float)l;
        b += w * (float)l * (float)l;
    }
    *sumlx = a;
    *suml2 = b;
}

float fx_kq_search_sym(int n, int nmax, const float *x, int8_t *L) {
    float amax;
    float max = signed_amax(n, x, &amax);
    if (amax < KQ_EPS) {
        for (int i = 0; i < n; i++) L[i] = 0;
        return 0.0f;
    }
    /* The largest element maps to -nmax exactly, the one level with no
     * positive twin; then 18 nearby divisors, keeping the one whose
     * least-squares fit explains most (sumlx^2 / suml2 largest). */
    float iscale = -(float)nmax / max;
    float sumlx, suml2;
    sym_levels(n, nmax, x, iscale, L, &sumlx, &suml2);
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int step = -9; step <= 9; step++) {
        if (step == 0) continue;
        float is = -((float)nmax + 0.1f * (float)step) / max;
        sym_levels(n, nmax, x, is, NULL, &sumlx, &suml2);
        if (suml2 > 0.0f && sumlx * sumlx > best * suml2) {
            sym_levels(n, nmax, x, is, L, &sumlx, &suml2);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return scale;
}

float fx_kq_search_q3(int n, int nmax, const float *x, int8_t *L) {
    float amax;
    float max = signed_amax(n, x, &amax);
    if (amax < KQ_EPS) {
        for (int i = 0; i < n; i++) L[i] = 0;
        return 0.0f;
    }
    float iscale = -(float)nmax / max;
    float sumlx, suml2;
    sym_levels(n, nmax, x, iscale, L, &sumlx, &suml2);
    /* Coordinate descent: move one element to the level nearest its
     * least-squares ideal with the others fixed, keeping the move when
     * the fit improves; up to five sweeps. */
    for (int sweep = 0; sweep < 5; sweep++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * (float)L[i];
            if (!(slx > 0.0f)) continue;
            float sl2 = suml2 - w * (float)L[i] * (float)L[i];
            int nl = fx_clampi(fx_nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
            if (nl == L[i]) continue;
            slx += w * x[i] * (float)nl;
            sl2 += w * (float)nl * (float)nl;
            if (sl2 > 0.0f && slx * slx * suml2 > sumlx * sumlx * sl2) {
                L[i] = (int8_t)nl;
                sumlx = slx;
                suml2 = sl2;
                changed++;
            }
        }
        if (!changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return sumlx / suml2;
}

float fx_kq_search_min(int n, int nmax, const float *x, const float *w,
                       uint8_t *L, float *neg_min, float rmin, float rdelta,
                       int nstep, int mad) {
    float lo = x[0], hi = x[0];
    float sum_w = w[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < lo) lo = x[i];
        if (x[i] > hi) hi = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    /* The min is never above 0: level 0 then always reaches 0. */
    if (lo > 0.0f) lo = 0.0f;
    if (hi == lo) {
        for (int i = 0; i < n; i++) L[i] = 0;
        *neg_min = -lo;
        return 0.0f;
    }
    float iscale = (float)nmax / (hi - lo);
    float scale = 1.0f / iscale;
    float min = lo;
    float best = 0.0f;
    for (int i = 0; i < n; i++) {
        int l = fx_clampi(fx_nearest_int(iscale * (x[i] - lo)), 0, nmax);
        L[i] = (uint8_t)l;
        float diff = scale * (float)l + lo - x[i];
        diff = mad ? fabsf(diff) : diff * diff;
        best += w[i] * diff;
    }
    /* Each trial grid gives levels; their weighted least-squares line
     * (scale and min, the min clamped to 0) is kept when it lowers the
     * weighted error. As in ggml, later grids start from the min kept so
     * far, not the block's. */
    uint8_t aux[256];
    for (int step = 0; step <= nstep; step++) {
        float is = (rmin + rdelta * (float)step + (float)nmax) / (hi - min);
        float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
        for (int i = 0; i < n; i++) {
            int l = fx_clampi(fx_nearest_int(is * (x[i] - min)), 0, nmax);
            aux[i] = (uint8_t)l;
            float fl = (float)l;
            sum_l += w[i] * fl;
            sum_l2 += w[i] * fl * fl;
            sum_xl += w[i] * fl * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (!(D > 0.0f)) continue;
        float s = (sum_w * sum_xl - sum_x * sum_l) / D;
        float m = (sum_l2 * sum_x - sum_l * sum_xl) / D;
        if (m > 0.0f) {
            m = 0.0f;
            s = sum_xl / sum_l2;
        }
        float err = 0.0f;
        for (int i = 0; i < n; i++) {
            float diff = s * (float)aux[i] + m - x[i];
            diff = mad ? fabsf(diff) : diff * diff;
            err += w[i] * diff;
        }
        if (err < best) {
            for (int i = 0; i < n; i++) L[i] = aux[i];
            best = err;
            scale = s;
            min = m;
        }
    }
    *neg_min = -min;
    return scale;
}
