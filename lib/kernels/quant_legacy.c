/*
 * Q4_0, Q4_1, Q5_0, Q5_1: ggml's 32-element block types (quants.h).
 *
 * Dequantization is ggml's dequantize_row_* operation for operation:
 * w = (float)(q - 8) * d, or (float)q * d + m with two roundings (this
 * file is built with -ffp-contract=off, so the product is never fused).
 *
 * Quantization searches each block's scale (and min) instead of taking
 * ggml's one amax rule: every candidate is rounded to the half it will be
 * stored as, each weight then takes the level nearest to it under that
 * stored scale, and the candidate with the smallest squared error wins.
 * ggml's own (d, m) is one of the candidates and our quants are optimal
 * for whatever scale is stored, so no block ends up worse than ggml's.
 */
#include "quants.h"
#include "kernels.h"

#include <math.h>
#include <string.h>

/* Largest finite half: a scale beyond it would be stored as inf and
 * dequantize to inf or NaN. */
#define HALF_MAX 65504.0

/* v as the half it is stored as: clamped to the finite range. */
static uint16_t to_half(double v) {
    if (v > HALF_MAX) v = HALF_MAX;
    if (v < -HALF_MAX) v = -HALF_MAX;
    return fx_f32_to_f16((float)v);
}

static uint32_t load_le32(const uint8_t b[4]) {
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
           (uint32_t)b[3] << 24;
}

/* ---- dequantization ---- */

void fx_dequant_q4_0(float *out, const void *blocks, size_t k) {
    const fx_block_q4_0 *b = blocks;
    for (size_t i = 0; i < k / FX_QK32; i++, out += FX_QK32) {
        float d = fx_f16_to_f32(b[i].d);
        for (int j = 0; j < FX_QK32 / 2; j++) {
            out[j] = (float)((b[i].qs[j] & 0x0f) - 8) * d;
            out[j + 16] = (float)((b[i].qs[j] >> 4) - 8) * d;
        }
    }
}

void fx_dequant_q4_1(float *out, const void *blocks, size_t k) {
    const fx_block_q4_1 *b = blocks;
    for (size_t i = 0; i < k / FX_QK32; i++, out += FX_QK32) {
        float d = fx_f16_to_f32(b[i].d), m = fx_f16_to_f32(b[i].m);
        for (int j = 0; j < FX_QK32 / 2; j++) {
            out[j] = (float)(b[i].qs[j] & 0x0f) * d + m;
            out[j + 16] = (float)(b[i].qs[j] >> 4) * d + m;
        }
    }
}

void fx_dequant_q5_0(float *out, const void *blocks, size_t k) {
    const fx_block_q5_0 *b = blocks;
    for (size_t i = 0; i < k / FX_QK32; i++, out += FX_QK32) {
        float d = fx_f16_to_f32(b[i].d);
        uint32_t qh = load_le32(b[i].qh);
        for (int j = 0; j < FX_QK32 / 2; j++) {
            int q0 = (b[i].qs[j] & 0x0f) | (int)((qh >> j) & 1) << 4;
            int q1 = (b[i].qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            out[j] = (float)(q0 - 16) * d;
            out[j + 16] = (float)(q1 - 16) * d;
        }
    }
}

void fx_dequant_q5_1(float *out, const void *blocks, size_t k) {
    const fx_block_q5_1 *b = blocks;
    for (size_t i = 0; i < k / FX_QK32; i++, out += FX_QK32) {
        float d = fx_f16_to_f32(b[i].d), m = fx_f16_to_f32(b[i].m);
        uint32_t qh = load_le32(b[i].qh);
        for (int j = 0; j < FX_QK32 / 2; j++) {
            int q0 = (b[i].qs[j] & 0x0f) | (int)((qh >> j) & 1) << 4;
            int q1 = (b[i].qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            out[j] = (float)q0 * d + m;
            out[j + 16] = (float)q1 * d + m;
        }
    }
}

/* ---- symmetric types: w = d * l, l in [lo, hi] ---- */

typedef struct sym_best {
    double err;
    uint16_t d;
    int8_t l[FX_QK32];
} sym_best;

/* Squared error of the block under the stored scale h, each weight at its
 * nearest level (in l). Every d * l is exact in float (an 11-bit half
 * times at most 5 bits), so the double arithmetic here is the
 * dequantized value's. */
static double sym_assign(const float *x, uint16_t h, int lo, int hi,
                         int8_t *l) {
    double d = fx_f16_to_f32(h), err = 0;
    for (int i = 0; i < FX_QK32; i++) {
        int v = 0;
        if (d != 0) {
            double t = x[i] / d;
            /* (NaN in x takes lo: no float-to-int of a NaN.) */
            v = !(t > lo) ? lo : t >= hi ? hi : (int)floor(t + 0.5);
        }
        double e = x[i] - d * v;
        err += e * e;
        l[i] = (int8_t)v;
    }
    return err;
}

static void sym_try_half(const float *x, uint16_t h, int lo, int hi,
                         sym_best *b) {
    int8_t l[FX_QK32];
    double err = sym_assign(x, h, lo, hi, l);
    if (err < b->err) {
        b->err = err;
        b->d = h;
        memcpy(b->l, l, sizeof l);
    }
}

/* Candidate scale d, then the least-squares scale of the levels it gives
 * (one Lloyd step). */
static void sym_try(const float *x, double d, int lo, int hi, sym_best *b) {
    int8_t l[FX_QK32];
    uint16_t h = to_half(d);
    double err = sym_assign(x, h, lo, hi, l);
    if (err < b->err) {
        b->err = err;
        b->d = h;
        memcpy(b->l, l, sizeof l);
    }
    double sxl = 0, sll = 0;
    for (int i = 0; i < FX_QK32; i++) {
        sxl += (double)x[i] * l[i];
        sll += (double)l[i] * l[i];
    }
    if (sll > 0) sym_try_half(x, to_half(sxl / sll), lo, hi, b);
}

static void quant_sym(const float *x, int lo, int hi, sym_best *b) {
    float amax = 0, max = 0;
    for (int i = 0; i < FX_QK32; i++) {
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    }
    /* Zeros if no candidate has a finite error (inf or NaN in x). */
    b->err = INFINITY;
    b->d = 0;
    memset(b->l, 0, sizeof b->l);
    if (amax == 0) return;
    /* ggml's rule first: the largest magnitude on the level lo. */
    sym_try(x, max / (float)lo, lo, hi, b);
    /* Then the largest magnitude near either end of the levels. */
    for (int s = -3; s <= 3; s++) {
        sym_try(x, max / (lo + 0.3 * s), lo, hi, b);
        sym_try(x, max / (hi + 0.3 * s), lo, hi, b);
    }
    /* The halves on either side of the winner. */
    uint16_t h = b->d;
    if ((h & 0x7fff) != 0 && (h & 0x7fff) < 0x7bff)
        sym_try_half(x, (uint16_t)(h + 1), lo, hi, b);
    if ((h & 0x7fff) > 1) sym_try_half(x, (uint16_t)(h - 1), lo, hi, b);
}

void fx_quantize_q4_0(void *out, const float *in, size_t k) {
    fx_block_q4_0 *y = out;
    sym_best b;
    for (size_t i = 0; i < k / FX_QK32; i++, in += FX_QK32) {
        quant_sym(in, -8, 7, &b);
        y[i].d = b.d;
        for (int j = 0; j < 16; j++)
            y[i].qs[j] = (uint8_t)((b.l[j] + 8) | (b.l[j + 16] + 8) << 4);
    }
}

void fx_quantize_q5_0(void *out, const float *in, size_t k) {
    fx_block_q5_0 *y = out;
    sym_best b;
    for (size_t i = 0; i < k / FX_QK32; i++, in += FX_QK32) {
        quant_sym(in, -16, 15, &b);
        y[i].d = b.d;
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            unsigned q0 = (unsigned)(b.l[j] + 16);
            unsigned q1 = (unsigned)(b.l[j + 16] + 16);
            y[i].qs[j] = (uint8_t)((q0 & 0x0f) | (q1 & 0x0f) << 4);
            qh |= (uint32_t)(q0 >> 4) << j | (uint32_t)(q1 >> 4) << (j + 16);
        }
        for (int j = 0; j < 4; j++) y[i].qh[j] = (uint8_t)(qh >> (8 * j));
    }
}

/* ---- types with a min: w = d * q + m, q in [0, nq] ---- */

typedef struct aff_best {
    double err;
    uint16_t d, m;
    uint8_t q[FX_QK32];
} aff_best;

/* Squared error of the block under the stored (d, m), each weight at its
 * best level. q * d + m rounds once more in float, so the exact nearest
 * level and its two neighbours are compared in the dequantized values. */
static double aff_assign(const float *x, uint16_t hd, uint16_t hm, int nq,
                         uint8_t *q) {
    float d = fx_f16_to_f32(hd), m = fx_f16_to_f32(hm);
    /* Beyond this distance from a tie (in x's units) the float rounding
     * of q * d + m cannot change which level is nearest. */
    double tol = (fabs((double)m) + nq * fabs((double)d)) * 0x1p-22;
    double err = 0;
    for (int i = 0; i < FX_QK32; i++) {
        int c = 0;
        double t = 0;
        if (d != 0) {
            t = ((double)x[i] - m) / d;
            c = !(t > 0) ? 0 : t >= nq ? nq : (int)floor(t + 0.5);
        }
        if (d != 0 && t > 0 && t < nq && (0.5 - fabs(t - c)) * fabs(d) > tol) {
            double e = (double)x[i] - ((float)c * d + m);
            err += e * e;
            q[i] = (uint8_t)c;
            continue;
        }
        int bq = c;
        double be = INFINITY;
        for (int v = c - 1; v <= c + 1; v++) {
            if (v < 0 || v > nq) continue;
            float w = (float)v * d + m;
            double e = (double)x[i] - w;
            if (e * e < be) {
                be = e * e;
                bq = v;
            }
        }
        err += be;
        q[i] = (uint8_t)bq;
    }
    return err;
}

/* The least-squares (d, m) of levels q. 0 where the levels are all
 * equal. */
static int aff_fit(const float *x, const uint8_t *q, double *d, double *m) {
    double sq = 0, sqq = 0, sx = 0, sqx = 0, n = FX_QK32;
    for (int i = 0; i < FX_QK32; i++) {
        sq += q[i];
        sqq += (double)q[i] * q[i];
        sx += x[i];
        sqx += (double)q[i] * x[i];
    }
    double det = n * sqq - sq * sq;
    if (det <= 0) return 0;
    *d = (n * sqx - sq * sx) / det;
    *m = (sqq * sx - sq * sqx) / det;
    return 1;
}

/* Stored (d, m) -> its error; with refine, then the least-squares (d, m)
 * of the levels it gives. */
static void aff_try_half(const float *x, uint16_t hd, uint16_t hm, int nq,
                         aff_best *b, int refine) {
    uint8_t q[FX_QK32];
    double err = aff_assign(x, hd, hm, nq, q);
    if (err < b->err) {
        b->err = err;
        b->d = hd;
        b->m = hm;
        memcpy(b->q, q, sizeof q);
    }
    double d, m;
    if (refine && aff_fit(x, q, &d, &m))
        aff_try_half(x, to_half(d), to_half(m), nq, b, 0);
}

/* The best min for the winner's stored d and levels, and the halves on
 * either side of its d. */
static void aff_polish(const float *x, int nq, aff_best *b) {
    uint16_t hd = b->d;
    double r = 0, d = fx_f16_to_f32(hd);
    for (int i = 0; i < FX_QK32; i++) r += x[i] - d * b->q[i];
    aff_try_half(x, hd, to_half(r / FX_QK32), nq, b, 1);
    if ((hd & 0x7fff) != 0 && (hd & 0x7fff) < 0x7bff)
        aff_try_half(x, (uint16_t)(hd + 1), b->m, nq, b, 1);
    if ((hd & 0x7fff) > 1) aff_try_half(x, (uint16_t)(hd - 1), b->m, nq, b, 1);
}

static void quant_aff(const float *x, int nq, aff_best *b) {
    float min = x[0], max = x[0];
    for (int i = 1; i < FX_QK32; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
    }
    b->err = INFINITY;
    b->d = b->m = 0; /* if no candidate has a finite error */
    memset(b->q, 0, sizeof b->q);
    /* ggml's rule first. */
    float d0 = (max - min) / (float)nq;
    aff_try_half(x, to_half(d0), to_half(min), nq, b, 1);
    if (max == min) return;
    /* Then the range over nq - 0.9 ... nq + 0.9 steps, from either end. */
    for (int s = -3; s <= 3; s++) {
        double d = ((double)max - min) / (nq + 0.3 * s);
        aff_try_half(x, to_half(d), to_half(min), nq, b, 1);
        aff_try_half(x, to_half(d), to_half(max - d * nq), nq, b, 1);
    }
    aff_polish(x, nq, b);
}

static void quant_aff_blocks(void *out, const float *in, size_t k, int nq) {
    aff_best b;
    for (size_t i = 0; i < k / FX_QK32; i++, in += FX_QK32) {
        quant_aff(in, nq, &b);
        if (nq == 15) {
            fx_block_q4_1 *y = (fx_block_q4_1 *)out + i;
            y->d = b.d;
            y->m = b.m;
            for (int j = 0; j < 16; j++)
                y->qs[j] = (uint8_t)(b.q[j] | b.q[j + 16] << 4);
        } else {
            fx_block_q5_1 *y = (fx_block_q5_1 *)out + i;
            y->d = b.d;
            y->m = b.m;
            uint32_t qh = 0;
            for (int j = 0; j < 16; j++) {
                y->qs[j] = (uint8_t)((b.q[j] & 0x0f) |
                                     (b.q[j + 16] & 0x0f) << 4);
                qh |= (uint32_t)(b.q[j] >> 4) << j |
                      (uint32_t)(b.q[j + 16] >> 4) << (j + 16);
            }
            for (int j = 0; j < 4; j++) y->qh[j] = (uint8_t)(qh >> (8 * j));
        }
    }
}

void fx_quantize_q4_1(void *out, const float *in, size_t k) {
    quant_aff_blocks(out, in, k, 15);
}

void fx_quantize_q5_1(void *out, const float *in, size_t k) {
    quant_aff_blocks(out, in, k, 31);
}
