/*
 * The block-quantized types' matmul in plain C: THE REDUCTION ORDER of
 * quants.h, literally. Every other path must give these bits.
 *
 * Each weight block is first decoded to integers (the signed factor w_i
 * the order multiplies qx_i by, each sub-block's scale and min), once per
 * weight row and block for every x row, so the per-type code is only the
 * bit unpacking; the integer dot products and the one or two fmas per
 * block are the same code for all eleven types.
 *
 * Also here: FX_XQ_256, the activation format of the K-quants and IQ4_XS.
 */
#include "quants.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

/* ---- FX_XQ_256 ---- */

void fx_xq256_portable(const float *x, size_t ldx, size_t m, size_t k,
                       uint8_t *xq, size_t ld) {
    const size_t nb = k / FX_QK_K;
    for (size_t r = 0; r < m; r++) {
        const float *xr = x + r * ldx;
        uint8_t *row = xq + r * ld;
        for (size_t b = 0; b < nb; b++) {
            int8_t q[FX_QK_K];
            const float d = fx_xq_block(xr + b * FX_QK_K, FX_QK_K, q);
            int16_t bsum[FX_QK_K / 16];
            for (int j = 0; j < FX_QK_K / 16; j++) {
                int s = 0;
                for (int i = 0; i < 16; i++) s += q[16 * j + i];
                bsum[j] = (int16_t)s; /* |s| <= 16 * 127 */
            }
            memcpy(row + b * FX_QK_K, q, sizeof q);
            memcpy(row + k + b * sizeof bsum, bsum, sizeof bsum);
            memcpy(row + k + k / 8 + 4 * b, &d, sizeof d);
            fx_xq256_pair_sums(row, k, b);
        }
    }
}

/* ---- weight blocks as integers ---- */

/* One block: element i contributes sc[i / sub] * w[i] * qx[i] to P, and
 * sub-block j contributes mn[j] * (sum of its qx) to M. d and dmin are
 * f32(d) and f32(dmin) (Q4_1, Q5_1: the min m). */
typedef struct qdec {
    int8_t w[FX_QK_K];
    int32_t sc[FX_QK_K / 16], mn[FX_QK_K / 16];
    float d, dmin;
} qdec;

static uint16_t le16(const uint8_t *p) {
    return (uint16_t)(p[0] | (unsigned)p[1] << 8);
}

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

/* The 32-element types: 16 bytes of nibbles, q_i in the low nibble of
 * byte i, q_{i+16} in its high nibble; bit 4 (Q5) from qh bit i. */
static void nibbles32(int8_t *w, const uint8_t *qs, uint32_t qh, int off) {
    for (int i = 0; i < 16; i++) {
        w[i] = (int8_t)((qs[i] & 0x0f) + (int)((qh >> i) & 1) * 16 - off);
        w[i + 16] =
            (int8_t)((qs[i] >> 4) + (int)((qh >> (i + 16)) & 1) * 16 - off);
    }
}

static void dec_q4_0(const uint8_t *b, qdec *o) {
    o->d = fx_f16_to_f32(le16(b));
    nibbles32(o->w, b + 2, 0, 8);
    o->sc[0] = 1;
}

/* Q4_1 and Q5_1: M = -sum qx, dmin = m: the second fma adds m dx sum qx. */
static void dec_q4_1(const uint8_t *b, qdec *o) {
    o->d = fx_f16_to_f32(le16(b));
    o->dmin = fx_f16_to_f32(le16(b + 2));
    nibbles32(o->w, b + 4, 0, 0);
    o->sc[0] = 1;
    o->mn[0] = -1;
}

static void dec_q5_0(const uint8_t *b, qdec *o) {
    o->d = fx_f16_to_f32(le16(b));
    nibbles32(o->w, b + 6, le32(b + 2), 16);
    o->sc[0] = 1;
}

static void dec_q5_1(const uint8_t *b, qdec *o) {
    o->d = fx_f16_to_f32(le16(b));
    o->dmin = fx_f16_to_f32(le16(b + 2));
    nibbles32(o->w, b + 8, le32(b + 4), 0);
    o->sc[0] = 1;
    o->mn[0] = -1;
}

static void dec_iq4_nl(const uint8_t *b, qdec *o) {
    o->d = fx_f16_to_f32(le16(b));
    for (int i = 0; i < 16; i++) {
        o->w[i] = fx_iq4nl_values[b[2 + i] & 0x0f];
        o->w[i + 16] = fx_iq4nl_values[b[2 + i] >> 4];
    }
    o->sc[0] = 1;
}

/* Q2_K: element 128h + 32j + l is bits 2j..2j+1 of qs[32h + l]; scale
 * byte s of sub-block s: sc low nibble, mn high. */
static void dec_q2_K(const uint8_t *b, qdec *o) {
    const uint8_t *scales = b + offsetof(fx_block_q2_K, scales);
    const uint8_t *qs = b + offsetof(fx_block_q2_K, qs);
    o->d = fx_f16_to_f32(le16(b + offsetof(fx_block_q2_K, d)));
    o->dmin = fx_f16_to_f32(le16(b + offsetof(fx_block_q2_K, dmin)));
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++)
                o->w[128 * h + 32 * j + l] =
                    (int8_t)((qs[32 * h + l] >> (2 * j)) & 3);
    for (int s = 0; s < 16; s++) {
        o->sc[s] = scales[s] & 0x0f;
        o->mn[s] = scales[s] >> 4;
    }
}

/* Q3_K: element 128h + 32j + l: bits 2j..2j+1 of qs[32h + l], minus 4
 * where bit 4h + j of hmask[l] is clear; 16 6-bit scales minus 32, the
 * low 4 bits of scale s in nibble s / 8 of byte s % 8, the high 2 in
 * bits 2(s / 4).. of byte 8 + s % 4. */
static void dec_q3_K(const uint8_t *b, qdec *o) {
    const uint8_t *hm = b + offsetof(fx_block_q3_K, hmask);
    const uint8_t *qs = b + offsetof(fx_block_q3_K, qs);
    const uint8_t *sc = b + offsetof(fx_block_q3_K, scales);
    o->d = fx_f16_to_f32(le16(b + offsetof(fx_block_q3_K, d)));
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++) {
                const int q = (qs[32 * h + l] >> (2 * j)) & 3;
                o->w[128 * h + 32 * j + l] =
                    (int8_t)(q - ((hm[l] >> (4 * h + j)) & 1 ? 0 : 4));
            }
    for (int s = 0; s < 16; s++) {
        const int lo = (sc[s % 8] >> (4 * (s / 8))) & 0x0f;
        const int hi = (sc[8 + s % 4] >> (2 * (s / 4))) & 3;
        o->sc[s] = (lo | hi << 4) - 32;
    }
}

/* The 6-bit scale and min of sub-block j of Q4_K and Q5_K (ggml's
 * get_scale_min_k4). */
static void scale_min_k4(const uint8_t *q, int j, int32_t *sc, int32_t *mn) {
    if (j < 4) {
        *sc = q[j] & 63;
        *mn = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0x0f) | (q[j - 4] >> 6) << 4;
        *mn = (q[j + 4] >> 4) | (q[j] >> 6) << 4;
    }
}

/* Q4_K: element 64c + 32t + l is nibble t of qs[32c + l]. */
static void dec_q4_K(const uint8_t *b, qdec *o) {
    const uint8_t *qs = b + offsetof(fx_block_q4_K, qs);
    o->d = fx_f16_to_f32(le16(b + offsetof(fx_block_q4_K, d)));
    o->dmin = fx_f16_to_f32(le16(b + offsetof(fx_block_q4_K, dmin)));
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
            o->w[64 * c + l] = (int8_t)(qs[32 * c + l] & 0x0f);
            o->w[64 * c + 32 + l] = (int8_t)(qs[32 * c + l] >> 4);
        }
    for (int s = 0; s < 8; s++)
        scale_min_k4(b + offsetof(fx_block_q4_K, scales), s, &o->sc[s],
                     &o->mn[s]);
}

/* Q5_K: as Q4_K, plus 16 times bit e / 32 of qh[e % 32]. */
static void dec_q5_K(const uint8_t *b, qdec *o) {
    const uint8_t *qh = b + offsetof(fx_block_q5_K, qh);
    const uint8_t *qs = b + offsetof(fx_block_q5_K, qs);
    o->d = fx_f16_to_f32(le16(b + offsetof(fx_block_q5_K, d)));
    o->dmin = fx_f16_to_f32(le16(b + offsetof(fx_block_q5_K, dmin)));
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
            o->w[64 * c + l] = (int8_t)((qs[32 * c + l] & 0x0f) +
                                        ((qh[l] >> (2 * c)) & 1) * 16);
            o->w[64 * c + 32 + l] = (int8_t)((qs[32 * c + l] >> 4) +
                                             ((qh[l] >> (2 * c + 1)) & 1) * 16);
        }
    for (int s = 0; s < 8; s++)
        scale_min_k4(b + offsetof(fx_block_q5_K, scales), s, &o->sc[s],
                     &o->mn[s]);
}

/* Q6_K: element 128h + 32t + l: the low 4 bits are nibble t / 2 of
 * ql[64h + 32(t % 2) + l], the high 2 bits 2t..2t+1 of qh[32h + l];
 * minus 32. 16 int8 scales. */
static void dec_q6_K(const uint8_t *b, qdec *o) {
    const uint8_t *ql = b + offsetof(fx_block_q6_K, ql);
    const uint8_t *qh = b + offsetof(fx_block_q6_K, qh);
    const uint8_t *sc = b + offsetof(fx_block_q6_K, scales);
    o->d = fx_f16_to_f32(le16(b + offsetof(fx_block_q6_K, d)));
    for (int h = 0; h < 2; h++)
        for (int t = 0; t < 4; t++)
            for (int l = 0; l < 32; l++) {
                const int lo =
                    (ql[64 * h + 32 * (t % 2) + l] >> (4 * (t / 2))) & 15;
                const int hi = (qh[32 * h + l] >> (2 * t)) & 3;
                o->w[128 * h + 32 * t + l] = (int8_t)((lo | hi << 4) - 32);
            }
    for (int s = 0; s < 16; s++) o->sc[s] = (int8_t)sc[s];
}

/* IQ4_XS: sub-block s (32 elements) as an IQ4_NL block's nibbles at
 * qs[16s]; its scale ls: low 4 bits nibble s % 2 of scales_l[s / 2],
 * high 2 bits 2s..2s+1 of scales_h; minus 32. */
static void dec_iq4_xs(const uint8_t *b, qdec *o) {
    const uint16_t sh = le16(b + offsetof(fx_block_iq4_xs, scales_h));
    const uint8_t *sl = b + offsetof(fx_block_iq4_xs, scales_l);
    const uint8_t *qs = b + offsetof(fx_block_iq4_xs, qs);
    o->d = fx_f16_to_f32(le16(b + offsetof(fx_block_iq4_xs, d)));
    for (int s = 0; s < 8; s++) {
        for (int i = 0; i < 16; i++) {
            o->w[32 * s + i] = fx_iq4nl_values[qs[16 * s + i] & 0x0f];
            o->w[32 * s + i + 16] = fx_iq4nl_values[qs[16 * s + i] >> 4];
        }
        const int ls = ((sl[s / 2] >> (4 * (s % 2))) & 0x0f) |
                       ((sh >> (2 * s)) & 3) << 4;
        o->sc[s] = ls - 32;
    }
}

/* ---- the matmul ---- */

typedef struct qdesc {
    void (*decode)(const uint8_t *blk, qdec *o);
    uint32_t elems, bytes;
    uint32_t sub;  /* elements per sub-block (elems: one) */
    bool min;      /* the second fma */
    fx_xq_kind xq;
} qdesc;

/* Row m's scale dx of block b and sub-block j's sum of quants, in the
 * row's activation format. */
static float xq_dx(const qdesc *t, const uint8_t *xr, size_t k, size_t b) {
    float dx;
    const size_t off = t->xq == FX_XQ_256 ? k + k / 8 + 4 * b
                                          : k + 4 * (k / FX_QK8_0) + 4 * b;
    memcpy(&dx, xr + off, sizeof dx);
    return dx;
}

static int32_t xq_sum(const qdesc *t, const uint8_t *xr, size_t k, size_t b,
                      uint32_t j) {
    if (t->xq == FX_XQ_32) { /* one sub-block: the block's -nc / 128 */
        int32_t nc;
        memcpy(&nc, xr + k + 4 * b, sizeof nc);
        return -nc / 128;
    }
    int32_t s = 0;
    const size_t first = (b * FX_QK_K + (size_t)j * t->sub) / 16;
    for (size_t i = first; i < first + t->sub / 16; i++) {
        int16_t v;
        memcpy(&v, xr + k + 2 * i, sizeof v);
        s += v;
    }
    return s;
}

/* y[m][n] is the accumulator of the order (it starts at +0.0f and takes
 * the fmas of block after block; a float stored and loaded is the same
 * float), so the weight block is decoded once for every x row. */
__attribute__((always_inline)) static inline void qmm_range(const qdesc *t, const fx_mm_job *job, size_t n0,
                             size_t n1) {
    const size_t k = job->k, nb = k / t->elems, nsub = t->elems / t->sub;
    for (size_t n = n0; n < n1; n++) {
        for (size_t m = 0; m < job->m; m++) job->y[m * job->ldy + n] = 0.0f;
        const uint8_t *row = job->w + n * job->row_bytes;
        for (size_t b = 0; b < nb; b++) {
            qdec q;
            t->decode(row + b * t->bytes, &q);
            for (size_t m = 0; m < job->m; m++) {
                const uint8_t *xr = job->xq + m * job->xq_ld;
                const int8_t *qx = (const int8_t *)xr + b * t->elems;
                int32_t p = 0, mm = 0;
                for (uint32_t j = 0; j < nsub; j++) {
                    int32_t s = 0;
                    for (uint32_t i = j * t->sub; i < (j + 1) * t->sub; i++)
                        s += q.w[i] * qx[i];
                    p += q.sc[j] * s;
                    if (t->min) mm += q.mn[j] * xq_sum(t, xr, k, b, j);
                }
                const float dx = xq_dx(t, xr, k, b);
                float *y = job->y + m * job->ldy + n;
                float acc = fmaf(q.d * dx, (float)p, *y);
                if (t->min) acc = fmaf(-(q.dmin * dx), (float)mm, acc);
                *y = acc;
            }
        }
    }
}

#define FX_QMM(name, dec, blk, elems, sub, min, xq)                          \
    static const qdesc desc_##name = {dec, elems, sizeof(blk), sub, min, xq}; \
    static void qmm_##name(const fx_mm_job *job, size_t n0, size_t n1,       \
                           float *scratch) {                                 \
        (void)scratch;                                                       \
        qmm_range(&desc_##name, job, n0, n1);                                \
    }
FX_QMM(q4_0, dec_q4_0, fx_block_q4_0, FX_QK32, FX_QK32, false, FX_XQ_32)
FX_QMM(q4_1, dec_q4_1, fx_block_q4_1, FX_QK32, FX_QK32, true, FX_XQ_32)
FX_QMM(q5_0, dec_q5_0, fx_block_q5_0, FX_QK32, FX_QK32, false, FX_XQ_32)
FX_QMM(q5_1, dec_q5_1, fx_block_q5_1, FX_QK32, FX_QK32, true, FX_XQ_32)
FX_QMM(iq4_nl, dec_iq4_nl, fx_block_iq4_nl, FX_QK32, FX_QK32, false,
       FX_XQ_32)
FX_QMM(q2_K, dec_q2_K, fx_block_q2_K, FX_QK_K, 16, true, FX_XQ_256)
FX_QMM(q3_K, dec_q3_K, fx_block_q3_K, FX_QK_K, 16, false, FX_XQ_256)
FX_QMM(q4_K, dec_q4_K, fx_block_q4_K, FX_QK_K, 32, true, FX_XQ_256)
FX_QMM(q5_K, dec_q5_K, fx_block_q5_K, FX_QK_K, 32, true, FX_XQ_256)
FX_QMM(q6_K, dec_q6_K, fx_block_q6_K, FX_QK_K, 16, false, FX_XQ_256)
FX_QMM(iq4_xs, dec_iq4_xs, fx_block_iq4_xs, FX_QK_K, 32, false, FX_XQ_256)
#undef FX_QMM

fx_mm_range_fn fx_qmm_portable(fx_wtype t) {
    switch (t) {
    case FX_WTYPE_Q4_0: return qmm_q4_0;
    case FX_WTYPE_Q4_1: return qmm_q4_1;
    case FX_WTYPE_Q5_0: return qmm_q5_0;
    case FX_WTYPE_Q5_1: return qmm_q5_1;
    case FX_WTYPE_IQ4_NL: return qmm_iq4_nl;
    case FX_WTYPE_Q2_K: return qmm_q2_K;
    case FX_WTYPE_Q3_K: return qmm_q3_K;
    case FX_WTYPE_Q4_K: return qmm_q4_K;
    case FX_WTYPE_Q5_K: return qmm_q5_K;
    case FX_WTYPE_Q6_K: return qmm_q6_K;
    case FX_WTYPE_IQ4_XS: return qmm_iq4_xs;
    default: return NULL;
    }
}
