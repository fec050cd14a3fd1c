/*
 * The K-quants Q2_K to Q6_K: exact dequantization and reference
 * quantizers (quants.h).
 *
 * Dequantization is ggml's dequantize_row_q*_K operation for operation:
 * per sub-block dl = d * sc and ml = dmin * mn, each one f32 product of
 * the f16 value and the integer, then w = dl * q - ml (Q3_K, Q6_K: dl * q).
 *
 * The quantizers make ggml's reference choice first (the scale searches
 * of quant_kquants_search.c and the same super-block scale rounding),
 * then improve each sub-block's integer scale and min by a local search
 * (and a subnormal f16 d or dmin by its neighbours) that keeps a change
 * only when the block's exact error (measured on the dequantized values)
 * falls: the result is never worse than ggml's quantize_row_q*_K_ref,
 * block by block.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels.h"
#include "quant_util.h"
#include "quants.h"

/* ---- dequantization ---- */

void fx_dequant_q2_K(float *out, const void *blocks, size_t k) {
    const fx_block_q2_K *b = blocks;
    for (size_t i = 0; i < k / FX_QK_K; i++, b++) {
        float d = fx_f16_to_f32(b->d), dmin = fx_f16_to_f32(b->dmin);
        /* 128-element halves; in each, 2-bit plane p of qs[32 h + l]
         * holds element 128 h + 32 p + l, sub-block 8 h + 2 p + (l >= 16). */
        for (int h = 0; h < 2; h++) {
            const uint8_t *q = b->qs + 32 * h;
            for (int p = 0; p < 4; p++) {
                for (int half = 0; half < 2; half++) {
                    uint8_t sc = b->scales[8 * h + 2 * p + half];
                    float dl = d * (float)(sc & 0x0f);
                    float ml = dmin * (float)(sc >> 4);
                    for (int l = 16 * half; l < 16 * half + 16; l++)
                        *out++ = dl * (float)((q[l] >> (2 * p)) & 3) - ml;
                }
            }
        }
    }
}

void fx_dequant_q3_K(float *out, const void *blocks, size_t k) {
    const fx_block_q3_K *b = blocks;
    for (size_t i = 0; i < k / FX_QK_K; i++, b++) {
        float d = fx_f16_to_f32(b->d);
        /* As Q2_K's planes; the third bit of element e is hmask[e % 32]
         * bit e / 32, and a clear bit subtracts 4. */
        for (int h = 0; h < 2; h++) {
            const uint8_t *q = b->qs + 32 * h;
            for (int p = 0; p < 4; p++) {
                int bit = 4 * h + p;
                for (int half = 0; half < 2; half++) {
                    int sc = fx_q3k_scale_get(b->scales, 8 * h + 2 * p + half) - 32;
                    float dl = d * (float)sc;
                    for (int l = 16 * half; l < 16 * half + 16; l++) {
                        int v = ((q[l] >> (2 * p)) & 3) -
                                (((b->hmask[l] >> bit) & 1) ? 0 : 4);
                        *out++ = dl * (float)v;
                    }
                }
            }
        }
    }
}

/* Q4_K and Q5_K: 64-element chunks c, element 64 c + l (l < 32) in the
 * low nibble of qs[32 c + l] (sub-block 2 c), 64 c + 32 + l in the high
 * one (sub-block 2 c + 1); Q5_K's fifth bit in qh[l] bit 2 c (+1). */
static void dequant_k4(float *out, uint16_t dh, uint16_t mh, const uint8_t *scales,
                       const uint8_t *qs, const uint8_t *qh) {
    float d = fx_f16_to_f32(dh), dmin = fx_f16_to_f32(mh);
    for (int c = 0; c < 4; c++) {
        for (int half = 0; half < 2; half++) {
            uint8_t sc, mn;
            fx_k4_scale_get(scales, 2 * c + half, &sc, &mn);
            float dl = d * (float)sc, ml = dmin * (float)mn;
            for (int l = 0; l < 32; l++) {
                int v = half ? qs[32 * c + l] >> 4 : qs[32 * c + l] & 0x0f;
                if (qh && ((qh[l] >> (2 * c + half)) & 1)) v += 16;
                *out++ = dl * (float)v - ml;
            }
        }
    }
}

void fx_dequant_q4_K(float *out, const void *blocks, size_t k) {
    const fx_block_q4_K *b = blocks;
    for (size_t i = 0; i < k / FX_QK_K; i++, b++, out += FX_QK_K)
        dequant_k4(out, b->d, b->dmin, b->scales, b->qs, NULL);
}

void fx_dequant_q5_K(float *out, const void *blocks, size_t k) {
    const fx_block_q5_K *b = blocks;
    for (size_t i = 0; i < k / FX_QK_K; i++, b++, out += FX_QK_K)
        dequant_k4(out, b->d, b->dmin, b->scales, b->qs, b->qh);
}

void fx_dequant_q6_K(float *out, const void *blocks, size_t k) {
    const fx_block_q6_K *b = blocks;
    for (size_t i = 0; i < k / FX_QK_K; i++, b++) {
        float d = fx_f16_to_f32(b->d);
        /* Per 128-element half h and l < 32: quarter r's element
         * 128 h + 32 r + l has its low nibble in ql[64 h + l + 32 (r & 1)]
         * (low for r < 2, high otherwise) and its top two bits in
         * qh[32 h + l] bits 2 r; sub-block 8 h + 2 r + l / 16. */
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
            for (int r = 0; r < 4; r++) {
                for (int l = 0; l < 32; l++) {
                    int lo = ql[l + 32 * (r & 1)];
                    lo = r < 2 ? lo & 0x0f : lo >> 4;
                    int v = (lo | (((qh[l] >> (2 * r)) & 3) << 4)) - 32;
                    float dl = d * (float)b->scales[8 * h + 2 * r + l / 16];
                    out[128 * h + 32 * r + l] = dl * (float)v;
                }
            }
        }
        out += FX_QK_K;
    }
}

/* ---- quantization ---- */

/* try_super's reach: d's f16 neighbours within KQ_DSTEPS, tried only
 * below KQ_DMAX (f16's subnormals, where rounding d costs most; beyond,
 * the gain measured ~0.3% at 3x the time). */
#define KQ_DSTEPS 1
#define KQ_DMAX 0x400

/* A block before packing: sub-block scales s and mins m as integers, the
 * quants q in the value domain (Q3_K -4..3, Q6_K -32..31, else 0..qmax). */
typedef struct kq_block {
    int nsub, len;   /* sub-blocks and their length */
    int smin, smax;  /* sub-block scale range */
    int mmax;        /* mins 0..mmax; 0 for the types without one */
    int qmin, qmax;
    float d, dmin;   /* the f16 values, decoded */
    float fs[16], fm[16]; /* the searches' float scales and mins */
    int s[16], m[16];
    int q[FX_QK_K];
} kq_block;

/* The f16 of a finite scale, saturated to the largest finite half: a
 * block beyond the format's range keeps finite values. */
static uint16_t half_sat(float v) {
    uint16_t h = fx_f32_to_f16(v);
    if ((h & 0x7fffu) == 0x7c00u) h = (uint16_t)((h & 0x8000u) | 0x7bffu);
    return h;
}

/* The block to quantize: x itself, or where it holds a magnitude beyond
 * lim (the type's range, f16 d at most 65504) or NaN, a copy clamped to
 * +-lim with NaN as 0, so that every sum below stays finite. */
static const float *block_input(const float *x, float *buf, float lim) {
    int ok = 1;
    for (int i = 0; i < FX_QK_K; i++)
        if (!(fabsf(x[i]) <= lim)) ok = 0;
    if (ok) return x;
    for (int i = 0; i < FX_QK_K; i++) {
        float v = x[i];
        buf[i] = v != v ? 0.0f : v > lim ? lim : v < -lim ? -lim : v;
    }
    return buf;
}

/* The best quant of each element of one sub-block at step dl and offset
 * ml, and the sub-block's squared error. ggml's choice (the nearest level
 * of (x + ml) / dl, clamped) or a neighbour when the rounded product
 * lands closer. */
static double sub_fit(const kq_block *b, const float *x, float dl, float ml, int *q) {
    double err = 0.0;
    for (int i = 0; i < b->len; i++) {
        int c = dl != 0.0f ? fx_nearest_int((x[i] + ml) / dl) : 0;
        c = fx_clampi(c, b->qmin, b->qmax);
        int best = c;
        double be = (double)(dl * (float)c - ml) - (double)x[i];
        be *= be;
        for (int t = c - 1; t <= c + 1; t += 2) {
            if (t < b->qmin || t > b->qmax) continue;
            double e = (double)(dl * (float)t - ml) - (double)x[i];
            e *= e;
            if (e < be) {
                be = e;
                best = t;
            }
        }
        if (q) q[i] = best;
        err += be;
    }
    return err;
}

/* The squared error of sub-block j as b stands. */
static double sub_err(const kq_block *b, const float *x, int j) {
    double err = 0.0;
    float dl = b->d * (float)b->s[j], ml = b->dmin * (float)b->m[j];
    for (int i = 0; i < b->len; i++) {
        double e = (double)(dl * (float)b->q[j * b->len + i] - ml) -
                   (double)x[j * b->len + i];
        err += e * e;
    }
    return err;
}

/* Coordinate descent on each sub-block's (scale, min) over the 3x3 (or
 * 3, without a min) neighbourhood, keeping only strict improvements of
 * the exact error; d and dmin stay. */
static void refine(kq_block *b, const float *x) {
    int tmp[32];
    for (int j = 0; j < b->nsub; j++) {
        const float *xs = x + j * b->len;
        double best = sub_err(b, x, j);
        for (int pass = 0; pass < 4; pass++) {
            int moved = 0, s0 = b->s[j], m0 = b->m[j];
            for (int ds = -1; ds <= 1; ds++) {
                for (int dm = -1; dm <= 1; dm++) {
                    int s = s0 + ds, m = m0 + dm;
                    if ((ds == 0 && dm == 0) || s < b->smin || s > b->smax ||
                        m < 0 || m > b->mmax)
                        continue;
                    double e = sub_fit(b, xs, b->d * (float)s, b->dmin * (float)m, tmp);
                    if (e < best) {
                        best = e;
                        b->s[j] = s;
                        b->m[j] = m;
                        memcpy(b->q + j * b->len, tmp, sizeof(int) * (size_t)b->len);
                        moved = 1;
                    }
                }
            }
            if (!moved) break;
        }
        /* The quants alone, at the kept scale (ggml's nearest rounding can
         * miss by one where the product rounds). */
        double e = sub_fit(b, xs, b->d * (float)b->s[j], b->dmin * (float)b->m[j], tmp);
        if (e < best) memcpy(b->q + j * b->len, tmp, sizeof(int) * (size_t)b->len);
    }
}

static double block_err(const kq_block *b, const float *x) {
    double e = 0.0;
    for (int j = 0; j < b->nsub; j++) e += sub_err(b, x, j);
    return e;
}

static void requantize(kq_block *b, const float *x);

/* The f16 neighbours of d (and of dmin): each re-derives the integer
 * scales (mins) from the searched ones, requantizes and refines; kept
 * when the block's error falls. */
static void try_super(kq_block *b, const float *x, uint16_t *dh, uint16_t *mh) {
    double best = block_err(b, x);
    kq_block c;
    for (int which = 0; which < (mh ? 2 : 1); which++) {
        uint16_t h0 = which ? *mh : *dh;
        int mag0 = h0 & 0x7fff;
        if (mag0 == 0 || mag0 >= KQ_DMAX) continue;
        for (int delta = -KQ_DSTEPS; delta <= KQ_DSTEPS; delta++) {
            int mag = mag0 + delta;
            if (delta == 0 || mag < 1 || mag > 0x7bff) continue;
            uint16_t h = (uint16_t)((h0 & 0x8000) | mag);
            c = *b;
            float v = fx_f16_to_f32(h);
            if (which) {
                c.dmin = v;
                for (int j = 0; j < c.nsub; j++)
                    c.m[j] = fx_clampi(fx_nearest_int(c.fm[j] / v), 0, c.mmax);
            } else {
                c.d = v;
                for (int j = 0; j < c.nsub; j++)
                    c.s[j] = fx_clampi(fx_nearest_int(c.fs[j] / v), c.smin, c.smax);
            }
            requantize(&c, x);
            refine(&c, x);
            double e = block_err(&c, x);
            if (e < best) {
                best = e;
                *b = c;
                if (which) *mh = h;
                else *dh = h;
            }
        }
    }
}

/* ggml's final pass: with the scales rounded, each sub-block's quants
 * are the nearest levels (sub-blocks whose step is 0 keep the search's). */
static void requantize(kq_block *b, const float *x) {
    for (int j = 0; j < b->nsub; j++) {
        float dl = b->d * (float)b->s[j];
        if (dl == 0.0f) continue;
        float ml = b->dmin * (float)b->m[j];
        for (int i = 0; i < b->len; i++) {
            int l = fx_nearest_int((x[j * b->len + i] + ml) / dl);
            b->q[j * b->len + i] = fx_clampi(l, b->qmin, b->qmax);
        }
    }
}

/* Q2_K, Q4_K, Q5_K: the search with a min per sub-block, then scales and
 * mins as nbits-bit integers of the largest of each. */
static void quant_with_min(kq_block *b, uint16_t *dh, uint16_t *mh, const float *x,
                           int qmax, int smax, float rmin, float rdelta, int nstep,
                           int mad) {
    float scales[16], mins[16], w[32];
    uint8_t L[32];
    float max_scale = 0.0f, max_min = 0.0f;
    for (int j = 0; j < b->nsub; j++) {
        const float *xs = x + j * b->len;
        if (mad) {
            for (int i = 0; i < b->len; i++) w[i] = fabsf(xs[i]);
        } else {
            /* Weights |x| + rms of the sub-block (ggml's choice for Q4_K
             * and Q5_K). */
            float sum2 = 0.0f;
            for (int i = 0; i < b->len; i++) sum2 += xs[i] * xs[i];
            float av = sqrtf(sum2 / (float)b->len);
            for (int i = 0; i < b->len; i++) w[i] = av + fabsf(xs[i]);
        }
        scales[j] = fx_kq_search_min(b->len, qmax, xs, w, L, &mins[j], rmin, rdelta,
                                     nstep, mad);
        for (int i = 0; i < b->len; i++) b->q[j * b->len + i] = L[i];
        b->fs[j] = scales[j];
        b->fm[j] = mins[j];
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    float fs = (float)smax;
    float is = max_scale > 0.0f ? fs / max_scale : 0.0f;
    float im = max_min > 0.0f ? fs / max_min : 0.0f;
    for (int j = 0; j < b->nsub; j++) {
        b->s[j] = fx_clampi(fx_nearest_int(is * scales[j]), 0, smax);
        b->m[j] = fx_clampi(fx_nearest_int(im * mins[j]), 0, smax);
    }
    *dh = half_sat(max_scale / fs);
    *mh = half_sat(max_min / fs);
    b->d = fx_f16_to_f32(*dh);
    b->dmin = fx_f16_to_f32(*mh);
    requantize(b, x);
    refine(b, x);
    try_super(b, x, dh, mh);
}

/* Largest magnitudes the types can hold (d at most 65504), a little
 * inside so that the scale searches stay clear of f16 overflow. */
#define LIM_Q2K (65504.0f * 15.0f * 3.0f * 0.9f)
#define LIM_Q3K (65504.0f * 32.0f * 4.0f * 0.9f)
#define LIM_Q4K (65504.0f * 63.0f * 15.0f * 0.9f)
#define LIM_Q5K (65504.0f * 63.0f * 31.0f * 0.9f)
#define LIM_Q6K (65504.0f * 128.0f * 32.0f * 0.9f)

void fx_quantize_q2_K(void *out, const float *in, size_t k) {
    fx_block_q2_K *y = out;
    float buf[FX_QK_K];
    for (size_t i = 0; i < k / FX_QK_K; i++, y++) {
        const float *x = block_input(in + i * FX_QK_K, buf, LIM_Q2K);
        kq_block b = {.nsub = 16, .len = 16, .smin = 0, .smax = 15, .mmax = 15,
                      .qmin = 0, .qmax = 3};
        quant_with_min(&b, &y->d, &y->dmin, x, 3, 15, -0.5f, 0.1f, 15, 1);
        for (int j = 0; j < 16; j++) y->scales[j] = (uint8_t)(b.s[j] | (b.m[j] << 4));
        /* Element 128 h + 32 p + l: plane p of qs[32 h + l]. */
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 32; l++) {
                int v = 0;
                for (int p = 0; p < 4; p++) v |= b.q[128 * h + 32 * p + l] << (2 * p);
                y->qs[32 * h + l] = (uint8_t)v;
            }
    }
}

static void pack_k4(const kq_block *b, uint8_t *scales) {
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; j++) {
        sc[j] = (uint8_t)b->s[j];
        mn[j] = (uint8_t)b->m[j];
    }
    fx_k4_scale_set(scales, sc, mn);
}

void fx_quantize_q4_K(void *out, const float *in, size_t k) {
    fx_block_q4_K *y = out;
    float buf[FX_QK_K];
    for (size_t i = 0; i < k / FX_QK_K; i++, y++) {
        const float *x = block_input(in + i * FX_QK_K, buf, LIM_Q4K);
        kq_block b = {.nsub = 8, .len = 32, .smin = 0, .smax = 63, .mmax = 63,
                      .qmin = 0, .qmax = 15};
        quant_with_min(&b, &y->d, &y->dmin, x, 15, 63, -1.0f, 0.1f, 20, 0);
        pack_k4(&b, y->scales);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                y->qs[32 * c + l] =
                    (uint8_t)(b.q[64 * c + l] | (b.q[64 * c + 32 + l] << 4));
    }
}

void fx_quantize_q5_K(void *out, const float *in, size_t k) {
    fx_block_q5_K *y = out;
    float buf[FX_QK_K];
    for (size_t i = 0; i < k / FX_QK_K; i++, y++) {
        const float *x = block_input(in + i * FX_QK_K, buf, LIM_Q5K);
        kq_block b = {.nsub = 8, .len = 32, .smin = 0, .smax = 63, .mmax = 63,
                      .qmin = 0, .qmax = 31};
        quant_with_min(&b, &y->d, &y->dmin, x, 31, 63, -0.5f, 0.1f, 15, 0);
        pack_k4(&b, y->scales);
        memset(y->qh, 0, sizeof y->qh);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) {
                int lo = b.q[64 * c + l], hi = b.q[64 * c + 32 + l];
                y->qs[32 * c + l] = (uint8_t)((lo & 15) | ((hi & 15) << 4));
                y->qh[l] |= (uint8_t)(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
            }
    }
}

/* Q3_K and Q6_K: symmetric sub-block scales, then the super-block scale
 * d = (largest scale, signed) / -smag so that the largest sub-block gets
 * code -smag exactly (ggml's sign convention). */
static void quant_sym(kq_block *b, uint16_t *dh, const float *x, int q3) {
    float scales[16];
    int8_t L[16];
    float max_scale = 0.0f, amax = 0.0f;
    int off = -b->qmin;
    for (int j = 0; j < 16; j++) {
        scales[j] = q3 ? fx_kq_search_q3(16, off, x + 16 * j, L)
                       : fx_kq_search_sym(16, off, x + 16 * j, L);
        for (int i = 0; i < 16; i++) b->q[16 * j + i] = L[i] - off;
        b->fs[j] = scales[j];
        if (fabsf(scales[j]) > amax) {
            amax = fabsf(scales[j]);
            max_scale = scales[j];
        }
    }
    float smag = (float)-b->smin;
    /* Q6_K treats tiny blocks as zero (ggml's GROUP_MAX_EPS), Q3_K only
     * an exactly zero scale. */
    if (q3 ? max_scale == 0.0f : amax < 1e-15f) {
        *dh = half_sat(0.0f);
        b->d = 0.0f;
        for (int j = 0; j < 16; j++) b->s[j] = q3 ? b->smin : 0;
        if (!q3)
            for (int i = 0; i < FX_QK_K; i++) b->q[i] = b->qmin;
        return;
    }
    float is = -smag / max_scale;
    for (int j = 0; j < 16; j++)
        b->s[j] = fx_clampi(fx_nearest_int(is * scales[j]), b->smin, b->smax);
    *dh = half_sat(1.0f / is);
    b->d = fx_f16_to_f32(*dh);
    requantize(b, x);
    refine(b, x);
    try_super(b, x, dh, NULL);
}

void fx_quantize_q3_K(void *out, const float *in, size_t k) {
    fx_block_q3_K *y = out;
    float buf[FX_QK_K];
    for (size_t i = 0; i < k / FX_QK_K; i++, y++) {
        const float *x = block_input(in + i * FX_QK_K, buf, LIM_Q3K);
        kq_block b = {.nsub = 16, .len = 16, .smin = -32, .smax = 31, .mmax = 0,
                      .qmin = -4, .qmax = 3};
        quant_sym(&b, &y->d, x, 1);
        uint8_t code[16];
        for (int j = 0; j < 16; j++) code[j] = (uint8_t)(b.s[j] + 32);
        fx_q3k_scale_set(y->scales, code);
        /* Stored q + 4: its low two bits in plane p of qs (as Q2_K), bit 2
         * in hmask[e % 32] bit e / 32. */
        memset(y->hmask, 0, sizeof y->hmask);
        for (int e = 0; e < FX_QK_K; e++)
            if (b.q[e] + 4 > 3) y->hmask[e % 32] |= (uint8_t)(1u << (e / 32));
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 32; l++) {
                int v = 0;
                for (int p = 0; p < 4; p++)
                    v |= ((b.q[128 * h + 32 * p + l] + 4) & 3) << (2 * p);
                y->qs[32 * h + l] = (uint8_t)v;
            }
    }
}

void fx_quantize_q6_K(void *out, const float *in, size_t k) {
    fx_block_q6_K *y = out;
    float buf[FX_QK_K];
    for (size_t i = 0; i < k / FX_QK_K; i++, y++) {
        const float *x = block_input(in + i * FX_QK_K, buf, LIM_Q6K);
        kq_block b = {.nsub = 16, .len = 16, .smin = -128, .smax = 127, .mmax = 0,
                      .qmin = -32, .qmax = 31};
        quant_sym(&b, &y->d, x, 0);
        for (int j = 0; j < 16; j++) y->scales[j] = (int8_t)b.s[j];
        /* Stored q + 32, as fx_dequant_q6_K reads it. */
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 32; l++) {
                const int *q = b.q + 128 * h + l;
                int u0 = q[0] + 32, u1 = q[32] + 32, u2 = q[64] + 32, u3 = q[96] + 32;
                y->ql[64 * h + l] = (uint8_t)((u0 & 15) | ((u2 & 15) << 4));
                y->ql[64 * h + 32 + l] = (uint8_t)((u1 & 15) | ((u3 & 15) << 4));
                y->qh[32 * h + l] = (uint8_t)((u0 >> 4) | ((u1 >> 4) << 2) |
                                              ((u2 >> 4) << 4) | ((u3 >> 4) << 6));
            }
    }
}
