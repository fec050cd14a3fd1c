/*
 * IQ4_NL and IQ4_XS: 4-bit indices into 16 non-linear levels (quants.h).
 *
 * Dequantization is ggml's dequantize_row_iq4_* operation for operation:
 * w = d * (float)kv[q], and for IQ4_XS dl = d * (float)(ls - 32) first,
 * then w = dl * (float)kv[q].
 *
 * Quantization minimizes each block's squared error directly. Every
 * candidate scale is judged as it is stored (a half, and for IQ4_XS the
 * product with its 6-bit sub-block scale), each weight then taking its
 * nearest level under that scale. The candidates: the largest magnitude
 * mapped near either end of the levels, each followed by a least-squares
 * step, and ggml's own scales (computed as ggml does, so no block is
 * worse than ggml's); for IQ4_XS the super-block scale is searched over
 * a range of mappings of the largest sub-block scale, each sub-block
 * picking its best 6-bit scale for it.
 *
 * Exactness of the error sums: a half has 11 significant bits, ls - 32 at
 * most 6 and kv at most 7, so d * kv, d * (ls - 32) and dl * kv are all
 * exact in float; the double arithmetic below is the dequantized values'.
 */
#include "quants.h"
#include "kernels.h"

#include <math.h>
#include <string.h>

const int8_t fx_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                    1,    13,   25,  38,  53,  69,  89,  113};

#define HALF_MAX 65504.0

static uint16_t to_half(double v) {
    if (v > HALF_MAX) v = HALF_MAX;
    if (v < -HALF_MAX) v = -HALF_MAX;
    return fx_f32_to_f16((float)v);
}

/* ---- dequantization ---- */

void fx_dequant_iq4_nl(float *out, const void *blocks, size_t k) {
    const fx_block_iq4_nl *b = blocks;
    for (size_t i = 0; i < k / FX_QK32; i++, out += FX_QK32) {
        float d = fx_f16_to_f32(b[i].d);
        for (int j = 0; j < 16; j++) {
            out[j] = d * (float)fx_iq4nl_values[b[i].qs[j] & 0x0f];
            out[j + 16] = d * (float)fx_iq4nl_values[b[i].qs[j] >> 4];
        }
    }
}

void fx_dequant_iq4_xs(float *out, const void *blocks, size_t k) {
    const fx_block_iq4_xs *b = blocks;
    for (size_t i = 0; i < k / FX_QK_K; i++) {
        float d = fx_f16_to_f32(b[i].d);
        for (int s = 0; s < 8; s++, out += 32) {
            int ls = (b[i].scales_l[s / 2] >> (4 * (s % 2)) & 0x0f) |
                     (b[i].scales_h >> (2 * s) & 3) << 4;
            float dl = d * (float)(ls - 32);
            const uint8_t *qs = b[i].qs + 16 * s;
            for (int j = 0; j < 16; j++) {
                out[j] = dl * (float)fx_iq4nl_values[qs[j] & 0x0f];
                out[j + 16] = dl * (float)fx_iq4nl_values[qs[j] >> 4];
            }
        }
    }
}

/* ---- quantization ---- */

/* The index of the level nearest to x under the scale d != 0 (id = 1 /
 * d, rounded), and its squared error. */
static int nearest_level(double x, double d, double id, double *err) {
    double t = x * id;
    int lo = 0, hi = 15;
    if (t <= fx_iq4nl_values[0]) {
        hi = 0;
    } else if (t >= fx_iq4nl_values[15]) {
        lo = 15;
    } else {
        while (hi - lo > 1) {
            int mid = (lo + hi) / 2;
            if (t < fx_iq4nl_values[mid]) hi = mid;
            else lo = mid;
        }
    }
    /* Compare the two bracketing levels on the actual error: x * id has
     * rounded. */
    double el = x - d * fx_iq4nl_values[lo], eh = x - d * fx_iq4nl_values[hi];
    if (eh * eh < el * el) {
        *err = eh * eh;
        return hi;
    }
    *err = el * el;
    return lo;
}

/* Squared error of n weights under scale d, each at its nearest level (in
 * L); stops early (returning at least the bound) once it reaches bound. */
static double assign(const float *x, int n, double d, uint8_t *L,
                     double bound) {
    double err = 0;
    if (d == 0) {
        for (int i = 0; i < n; i++) {
            err += (double)x[i] * x[i];
            L[i] = 8;
        }
        return err;
    }
    double id = 1 / d;
    for (int i = 0; i < n; i++) {
        double e;
        L[i] = (uint8_t)nearest_level(x[i], d, id, &e);
        err += e;
        if (err >= bound) return err;
    }
    return err;
}

/* llama.cpp's choice of scale (quantize_row_iq4_nl_impl without an
 * importance matrix: a fit weighted by x^2, in float), computed the same
 * way and then judged like any other candidate. For the scales ggml
 * stores, our levels are the nearest, so no block comes out worse than
 * ggml's. */

/* The level nearest to t in float, a tie going up (as ggml's search). */
static int nearest_level_f(float t) {
    const int8_t *v = fx_iq4nl_values;
    if (t <= v[0]) return 0;
    if (t >= v[15]) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (t < v[mid]) hi = mid;
        else lo = mid;
    }
    return t - v[lo] < v[hi] - t ? lo : hi;
}

/* The weighted sums of the levels that id * x picks. */
static void ggml_fit(const float *x, float id, float *sqx, float *sqq) {
    float a = 0, c = 0;
    for (int i = 0; i < 32; i++) {
        float q = fx_iq4nl_values[nearest_level_f(id * x[i])];
        float w = x[i] * x[i];
        a += w * q * x[i];
        c += w * q * q;
    }
    *sqx = a;
    *sqq = c;
}

/* ggml's scale of one block of 32 with ntry tries (-1: its reference
 * quantizer's single fit); NaN where its float sums overflow. */
static float ggml_scale(const float *x, int ntry) {
    const float v0 = fx_iq4nl_values[0];
    float amax = 0, max = 0;
    for (int i = 0; i < 32; i++) {
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    }
    if (amax < 1e-15f) return 0;
    float d = ntry > 0 ? -max / v0 : max / v0, sqx, sqq;
    ggml_fit(x, 1 / d, &sqx, &sqq);
    d = sqx / sqq;
    float best = d * sqx;
    for (int t = -ntry; t <= ntry; t++) {
        ggml_fit(x, ((float)t + v0) / max, &sqx, &sqq);
        if (sqq > 0 && sqx * sqx > best * sqq) {
            d = sqx / sqq;
            best = d * sqx;
        }
    }
    return d;
}

typedef struct nl_best {
    double err, d;  /* d: the scale as stored */
    uint16_t h;     /* and its half, when stored as one */
    uint8_t L[32];
} nl_best;

/* Candidate scale d (rounded to a half when half is set), then the
 * least-squares scale of the levels it gives. */
static void nl_try(const float *x, double d, int half, nl_best *b) {
    uint8_t L[32];
    for (int pass = 0;; pass++) {
        uint16_t h = 0;
        if (half) {
            h = to_half(d);
            d = fx_f16_to_f32(h);
        }
        double err = assign(x, 32, d, L, INFINITY);
        if (err < b->err) {
            b->err = err;
            b->d = d;
            b->h = h;
            memcpy(b->L, L, sizeof L);
        }
        /* An infinite error may have stopped assign early: L is partial. */
        if (pass == 1 || d == 0 || !(err < INFINITY)) return;
        double sxq = 0, sqq = 0;
        for (int i = 0; i < 32; i++) {
            double q = fx_iq4nl_values[L[i]];
            sxq += x[i] * q;
            sqq += q * q;
        }
        d = sxq / sqq; /* sqq >= 1: no level is 0 */
    }
}

/* The best scale of one block of 32 (as a half when half is set). */
static void nl_search(const float *x, int half, nl_best *b) {
    float amax = 0, max = 0;
    for (int i = 0; i < 32; i++) {
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    }
    b->err = INFINITY;
    b->d = 0; /* if no candidate has a finite error */
    b->h = 0;
    memset(b->L, 8, sizeof b->L);
    if (amax != 0) {
        /* The largest magnitude near either end of the levels (each try
         * ends in a least-squares step, so a coarse grid does). */
        for (int s = -7; s <= 7; s += 2) {
            nl_try(x, max / (double)(fx_iq4nl_values[0] + s), half, b);
            nl_try(x, max / (double)(fx_iq4nl_values[15] + s), half, b);
        }
    }
    /* ggml's reference quantizer's scale and its 7-try search's. */
    if (half) {
        for (int ntry = -1; ntry <= 7; ntry += 8) {
            float g = ggml_scale(x, ntry);
            if (isfinite(g)) nl_try(x, g, half, b);
        }
    }
    /* All zeros last: no level is 0, and tiny weights are best left so;
     * last, so that an equal error (huge weights, where the double sum
     * cannot tell) keeps a nonzero scale. */
    nl_try(x, 0, half, b);
}

void fx_quantize_iq4_nl(void *out, const float *in, size_t k) {
    fx_block_iq4_nl *y = out;
    nl_best b;
    for (size_t i = 0; i < k / FX_QK32; i++, in += FX_QK32) {
        nl_search(in, 1, &b);
        y[i].d = b.h;
        for (int j = 0; j < 16; j++)
            y[i].qs[j] = (uint8_t)(b.L[j] | b.L[j + 16] << 4);
    }
}

/* One IQ4_XS super-block under the stored scale h: each sub-block's best
 * 6-bit scale l (near s[j] / d) and levels; the total squared error, or
 * at least bound once it reaches bound. */
static double xs_assign(const float *x, const double *s, uint16_t h,
                        int8_t *l, uint8_t *L, double bound) {
    double d = fx_f16_to_f32(h), err = 0;
    for (int j = 0; j < 8; j++) {
        const float *xb = x + 32 * j;
        /* The two 6-bit scales around s[j] / d. */
        int c = 0, r = 0;
        if (d != 0) {
            double t = s[j] / d;
            c = !(t > -32) ? -32 : t >= 30 ? 30 : (int)floor(t);
            r = 1;
        }
        double be = INFINITY;
        uint8_t tmp[32];
        for (int v = c; v <= c + r; v++) {
            double e = assign(xb, 32, d * v, tmp, be);
            if (e < be) {
                be = e;
                l[j] = (int8_t)v;
                memcpy(L + 32 * j, tmp, sizeof tmp);
            }
        }
        err += be;
        if (err >= bound) return err;
    }
    return err;
}

/* The same under given 6-bit scales l (each sub-block assigned in full:
 * a sub-block cut short would undercount). */
static double xs_fixed(const float *x, uint16_t h, const int8_t *l,
                       uint8_t *L) {
    double d = fx_f16_to_f32(h), err = 0;
    for (int j = 0; j < 8; j++)
        err += assign(x + 32 * j, 32, d * l[j], L + 32 * j, INFINITY);
    return err;
}

static void quant_xs_block(const float *x, fx_block_iq4_xs *y) {
    double s[8], smax = 0;
    nl_best b;
    for (int j = 0; j < 8; j++) {
        nl_search(x + 32 * j, 0, &b);
        s[j] = b.d;
        if (fabs(s[j]) > fabs(smax)) smax = s[j];
    }
    int8_t l[8], bl[8] = {0}; /* zeros if no error is finite */
    uint8_t L[FX_QK_K], bL[FX_QK_K];
    uint16_t bh = 0;
    memset(bL, 8, sizeof bL);
    double best = INFINITY;
    if (smax != 0) {
        /* The largest sub-block scale mapped to l near -32 (ggml's choice,
         * the long end of the range) or near 31. */
        for (int t = 0; t <= 8; t++) {
            for (int sign = -1; sign <= 1; sign += 2) {
                double c = sign < 0 ? -32 + 0.5 * t : 31 - 0.5 * t;
                uint16_t h = to_half(smax / c);
                double e = xs_assign(x, s, h, l, L, best);
                if (e < best) {
                    best = e;
                    bh = h;
                    memcpy(bl, l, sizeof l);
                    memcpy(bL, L, sizeof L);
                }
            }
        }
    }
    /* ggml's super-block scale and 6-bit scales: its largest sub-block
     * scale on -32. */
    float sc[8], ms = 0, ams = 0;
    int finite = 1;
    for (int j = 0; j < 8; j++) {
        sc[j] = ggml_scale(x + 32 * j, 7);
        finite &= isfinite(sc[j]) != 0;
        if (fabsf(sc[j]) > ams) {
            ams = fabsf(sc[j]);
            ms = sc[j];
        }
    }
    float gd = -ms / 32;
    if (finite && fabsf(gd) <= HALF_MAX) {
        uint16_t h = fx_f32_to_f16(gd);
        float id = gd != 0 ? 1 / gd : 0;
        for (int j = 0; j < 8; j++) {
            float r = nearbyintf(id * sc[j]);
            l[j] = (int8_t)(r < -32 ? -32 : r > 31 ? 31 : r);
        }
        double e = xs_fixed(x, h, l, L);
        if (e < best) {
            best = e;
            bh = h;
            memcpy(bl, l, sizeof l);
            memcpy(bL, L, sizeof L);
        }
    }
    /* All zeros last, as in nl_search. */
    double e0 = xs_assign(x, s, 0, l, L, best);
    if (e0 < best) {
        bh = 0;
        memcpy(bl, l, sizeof l);
        memcpy(bL, L, sizeof L);
    }
    y->d = bh;
    y->scales_h = 0;
    memset(y->scales_l, 0, sizeof y->scales_l);
    for (int j = 0; j < 8; j++) {
        int ls = bl[j] + 32;
        y->scales_l[j / 2] |= (uint8_t)((ls & 0x0f) << (4 * (j % 2)));
        y->scales_h |= (uint16_t)((ls >> 4) << (2 * j));
        for (int i = 0; i < 16; i++)
            y->qs[16 * j + i] =
                (uint8_t)(bL[32 * j + i] | bL[32 * j + 16 + i] << 4);
    }
}

void fx_quantize_iq4_xs(void *out, const float *in, size_t k) {
    fx_block_iq4_xs *y = out;
    for (size_t i = 0; i < k / FX_QK_K; i++)
        quant_xs_block(in + FX_QK_K * i, y + i);
}
