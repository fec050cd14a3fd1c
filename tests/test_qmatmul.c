/*
 * fx_matmul on the block-quantized types of lib/kernels/quants.h:
 *  (a) the portable kernels give, bit for bit, THE REDUCTION ORDER of
 *      quants.h as written again here: blocks decoded to integers after
 *      ggml's dequantize_row_* loops (not the library's decoder),
 *      activations quantized by the rule of quants.h, the integer sums and
 *      the one or two fmas per block;
 *  (b) every ISA this CPU has gives the portable bits;
 *  (c) a row's output does not depend on its batch: alone, in batches of
 *      every size, chunked (a K long enough that the activation buffer
 *      takes a few rows at a time; the blocking build shrinks the buffer),
 *      on 1 or 2 threads, and in fx_matmul_multi next to other types (both
 *      activation formats and the float types in one call);
 *  (d) the decoded integers are the library's dequantized weights, and the
 *      result is within the activation quantization's error of the float
 *      product with the dequantized weights.
 * Weights: random block bytes with sane f16 scales (every quant and
 * sub-block scale pattern), and the library's quantizers for (d).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kernels/kernels.h"
#include "kernels/quants.h"
#include "test_rng.h"

/* ---- an independent decoder ----
 * Element i of a block as the reduction order uses it: P = sum sc_i w_i
 * qx_i, M = sum mn_i qx_i, then fma(d dx, P) and, for types with a min,
 * fma(-(dmin dx), M). Written after ggml's dequantize loops. */
typedef struct telem {
    int w, sc, mn;
} telem;
typedef struct tblock {
    telem e[FX_QK_K];
    float d, dmin;
} tblock;

static const int kvalues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                1,    13,   25,  38,  53,  69,  89,  113};

static float h2f(const uint8_t *p) { return fx_f16_to_f32((uint16_t)(p[0] | p[1] << 8)); }

static uint32_t u32le(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

/* Q4_0 Q4_1 Q5_0 Q5_1: off is subtracted from q, min says w = d q + m. */
static void t_legacy(const uint8_t *qs, uint32_t qh, int off, bool min,
                     tblock *o) {
    for (int j = 0; j < 16; j++) {
        const int h0 = (int)(((qh >> j) << 4) & 0x10);
        const int h1 = (int)((qh >> (j + 12)) & 0x10);
        o->e[j] = (telem){((qs[j] & 0x0f) | h0) - off, 1, min ? -1 : 0};
        o->e[j + 16] = (telem){((qs[j] >> 4) | h1) - off, 1, min ? -1 : 0};
    }
}
static void t_q4_0(const uint8_t *b, tblock *o) {
    o->d = h2f(b);
    t_legacy(b + 2, 0, 8, false, o);
}
static void t_q4_1(const uint8_t *b, tblock *o) {
    o->d = h2f(b);
    o->dmin = h2f(b + 2);
    t_legacy(b + 4, 0, 0, true, o);
}
static void t_q5_0(const uint8_t *b, tblock *o) {
    o->d = h2f(b);
    t_legacy(b + 6, u32le(b + 2), 16, false, o);
}
static void t_q5_1(const uint8_t *b, tblock *o) {
    o->d = h2f(b);
    o->dmin = h2f(b + 2);
    t_legacy(b + 8, u32le(b + 4), 0, true, o);
}
static void t_iq4_nl(const uint8_t *b, tblock *o) {
    o->d = h2f(b);
    for (int j = 0; j < 16; j++) {
        o->e[j] = (telem){kvalues[b[2 + j] & 0x0f], 1, 0};
        o->e[j + 16] = (telem){kvalues[b[2 + j] >> 4], 1, 0};
    }
}

static void t_q2_K(const uint8_t *b, tblock *o) {
    const fx_block_q2_K *x = (const void *)b;
    o->d = h2f(b + offsetof(fx_block_q2_K, d));
    o->dmin = h2f(b + offsetof(fx_block_q2_K, dmin));
    const uint8_t *q = x->qs;
    int is = 0, y = 0;
    for (int n = 0; n < FX_QK_K; n += 128) {
        for (int shift = 0; shift < 8; shift += 2) {
            for (int half = 0; half < 2; half++) {
                const int sc = x->scales[is++];
                for (int l = 0; l < 16; l++)
                    o->e[y++] = (telem){(q[l + 16 * half] >> shift) & 3,
                                        sc & 0x0f, sc >> 4};
            }
        }
        q += 32;
    }
}

static void t_q3_K(const uint8_t *b, tblock *o) {
    const fx_block_q3_K *x = (const void *)b;
    o->d = h2f(b + offsetof(fx_block_q3_K, d));
    uint32_t aux[4];
    memcpy(aux, x->scales, 12);
    const uint32_t tmp = aux[2], k1 = 0x03030303u, k2 = 0x0f0f0f0fu;
    aux[2] = ((aux[0] >> 4) & k2) | (((tmp >> 4) & k1) << 4);
    aux[3] = ((aux[1] >> 4) & k2) | (((tmp >> 6) & k1) << 4);
    aux[0] = (aux[0] & k2) | (((tmp >> 0) & k1) << 4);
    aux[1] = (aux[1] & k2) | (((tmp >> 2) & k1) << 4);
    int8_t sc[16];
    memcpy(sc, aux, 16);
    const uint8_t *q = x->qs;
    int is = 0, y = 0;
    unsigned m = 1;
    for (int n = 0; n < FX_QK_K; n += 128) {
        for (int shift = 0; shift < 8; shift += 2) {
            for (int half = 0; half < 2; half++) {
                const int s = sc[is++] - 32;
                for (int l = 16 * half; l < 16 * half + 16; l++)
                    o->e[y++] = (telem){((q[l] >> shift) & 3) -
                                            ((x->hmask[l] & m) ? 0 : 4),
                                        s, 0};
            }
            m <<= 1;
        }
        q += 32;
    }
}

static void t_scale_min(int j, const uint8_t *q, int *d, int *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
    }
}

static void t_q45_K(const uint8_t *b, tblock *o, bool five) {
    const size_t scales_off = 4, qh_off = 16,
                 qs_off = five ? offsetof(fx_block_q5_K, qs)
                               : offsetof(fx_block_q4_K, qs);
    o->d = h2f(b);
    o->dmin = h2f(b + 2);
    const uint8_t *ql = b + qs_off, *qh = b + qh_off;
    int is = 0, y = 0;
    unsigned u1 = 1, u2 = 2;
    for (int j = 0; j < FX_QK_K; j += 64) {
        int sc, m;
        t_scale_min(is, b + scales_off, &sc, &m);
        for (int l = 0; l < 32; l++)
            o->e[y++] = (telem){(ql[l] & 0xf) + (five && (qh[l] & u1) ? 16 : 0),
                                sc, m};
        t_scale_min(is + 1, b + scales_off, &sc, &m);
        for (int l = 0; l < 32; l++)
            o->e[y++] = (telem){(ql[l] >> 4) + (five && (qh[l] & u2) ? 16 : 0),
                                sc, m};
        ql += 32;
        is += 2;
        u1 <<= 2;
        u2 <<= 2;
    }
}
static void t_q4_K(const uint8_t *b, tblock *o) { t_q45_K(b, o, false); }
static void t_q5_K(const uint8_t *b, tblock *o) { t_q45_K(b, o, true); }

static void t_q6_K(const uint8_t *b, tblock *o) {
    const fx_block_q6_K *x = (const void *)b;
    o->d = h2f(b + offsetof(fx_block_q6_K, d));
    const uint8_t *ql = x->ql, *qh = x->qh;
    const int8_t *sc = x->scales;
    for (int n = 0; n < FX_QK_K; n += 128) {
        for (int l = 0; l < 32; l++) {
            const int is = l / 16;
            o->e[n + l] = (telem){
                ((ql[l] & 0xf) | ((qh[l] & 3) << 4)) - 32, sc[is], 0};
            o->e[n + l + 32] = (telem){
                ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32,
                sc[is + 2], 0};
            o->e[n + l + 64] = (telem){
                ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32, sc[is + 4],
                0};
            o->e[n + l + 96] = (telem){
                ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32,
                sc[is + 6], 0};
        }
        ql += 64;
        qh += 32;
        sc += 8;
    }
}

static void t_iq4_xs(const uint8_t *b, tblock *o) {
    const fx_block_iq4_xs *x = (const void *)b;
    o->d = h2f(b);
    const unsigned sh = (unsigned)(b[2] | b[3] << 8);
    const uint8_t *qs = x->qs;
    for (int ib = 0; ib < 8; ib++) {
        const int ls = ((x->scales_l[ib / 2] >> 4 * (ib % 2)) & 0xf) |
                       (((sh >> 2 * ib) & 3) << 4);
        for (int j = 0; j < 16; j++) {
            o->e[32 * ib + j] = (telem){kvalues[qs[j] & 0xf], ls - 32, 0};
            o->e[32 * ib + j + 16] = (telem){kvalues[qs[j] >> 4], ls - 32, 0};
        }
        qs += 16;
    }
}

typedef struct tinfo {
    fx_wtype t;
    size_t bs, bytes;       /* elements and bytes per block */
    size_t d_off, dmin_off; /* dmin_off 0: no min */
    bool min;
    void (*dec)(const uint8_t *, tblock *);
} tinfo;

static const tinfo types[] = {
    {FX_WTYPE_Q4_0, 32, 18, 0, 0, false, t_q4_0},
    {FX_WTYPE_Q4_1, 32, 20, 0, 2, true, t_q4_1},
    {FX_WTYPE_Q5_0, 32, 22, 0, 0, false, t_q5_0},
    {FX_WTYPE_Q5_1, 32, 24, 0, 2, true, t_q5_1},
    {FX_WTYPE_IQ4_NL, 32, 18, 0, 0, false, t_iq4_nl},
    {FX_WTYPE_Q2_K, 256, 84, 80, 82, true, t_q2_K},
    {FX_WTYPE_Q3_K, 256, 110, 108, 0, false, t_q3_K},
    {FX_WTYPE_Q4_K, 256, 144, 0, 2, true, t_q4_K},
    {FX_WTYPE_Q5_K, 256, 176, 0, 2, true, t_q5_K},
    {FX_WTYPE_Q6_K, 256, 210, 208, 0, false, t_q6_K},
    {FX_WTYPE_IQ4_XS, 256, 136, 0, 0, false, t_iq4_xs},
};
#define N_TYPES (sizeof types / sizeof *types)

/* ---- inputs ---- */

static void put_f16(uint8_t *p, float v) {
    const uint16_t h = fx_f32_to_f16(v);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

/* n rows of k elements: random bytes, the scales set to +-[2^-9, 2^-4). */
static uint8_t *random_weights(const tinfo *ti, size_t n, size_t k,
                               uint64_t seed) {
    const size_t rb = fx_wtype_row_bytes(ti->t, k);
    assert_int_equal(rb, k / ti->bs * ti->bytes);
    uint8_t *w = malloc(n * rb + 1); /* + 1: an odd address below */
    assert_non_null(w);
    uint64_t s = seed;
    for (size_t i = 0; i < n * rb; i++) w[i] = (uint8_t)fx_test_rng_next(&s);
    for (size_t b = 0; b < n * k / ti->bs; b++) {
        uint8_t *blk = w + b * ti->bytes;
        const float mag = ldexpf(1.0f + (float)fx_test_rng_unit(&s),
                                 -9 + (int)fx_test_rng_below(&s, 5));
        put_f16(blk + ti->d_off, fx_test_rng_below(&s, 2) ? mag : -mag);
        if (ti->min)
            put_f16(blk + ti->dmin_off,
                    ldexpf((float)fx_test_rng_unit(&s), -6));
    }
    return w;
}

/* x[m][ldx]: uniform, with a few blocks scaled far down or up. */
static float *random_x(size_t m, size_t ldx, uint64_t seed) {
    float *x = malloc(m * ldx * sizeof *x);
    assert_non_null(x);
    uint64_t s = seed;
    for (size_t i = 0; i < m * ldx; i++) {
        x[i] = fx_test_rng_f(&s);
        if (i % 97 == 5) x[i] *= 64.0f;
    }
    return x;
}

/* ---- the activation rule of quants.h, again ---- */

static void ref_xq(const float *x, size_t k, size_t bs, int8_t *q,
                   float *dx) {
    for (size_t b = 0; b < k / bs; b++) {
        float amax = 0.0f;
        bool bad = false;
        for (size_t i = 0; i < bs; i++) {
            const float a = fabsf(x[b * bs + i]);
            if (!isfinite(a)) bad = true;
            else if (a > amax) amax = a;
        }
        float id = 0.0f;
        if (bad) dx[b] = NAN;
        else if (amax < 0x1p-100f) dx[b] = 0.0f;
        else {
            dx[b] = amax / 127.0f;
            id = 127.0f / amax;
        }
        for (size_t i = 0; i < bs; i++)
            q[b * bs + i] = id != 0.0f ? (int8_t)nearbyintf(x[b * bs + i] * id)
                                       : 0;
    }
}

/* THE REDUCTION ORDER: y[m][n] of m rows of x and n rows of w. */
static void ref_matmul(const tinfo *ti, const float *x, size_t ldx,
                       size_t m, const uint8_t *w, size_t n, size_t k,
                       float *y, size_t ldy) {
    const size_t bs = ti->bs == 32 ? 32 : 256, nb = k / ti->bs;
    int8_t *q = malloc(k);
    float *dx = malloc(nb * sizeof *dx);
    tblock *blk = malloc(sizeof *blk);
    assert_true(q && dx && blk);
    for (size_t r = 0; r < m; r++) {
        ref_xq(x + r * ldx, k, bs, q, dx);
        for (size_t c = 0; c < n; c++) {
            float acc = 0.0f;
            for (size_t b = 0; b < nb; b++) {
                ti->dec(w + (c * nb + b) * ti->bytes, blk);
                int64_t p = 0, mm = 0;
                for (size_t i = 0; i < ti->bs; i++) {
                    const int qx = q[b * ti->bs + i];
                    p += (int64_t)blk->e[i].sc * blk->e[i].w * qx;
                    mm += (int64_t)blk->e[i].mn * qx;
                }
                assert_true(llabs(p) < (1ll << 31) && llabs(mm) < (1ll << 31));
                acc = fmaf(blk->d * dx[b], (float)p, acc);
                if (ti->min) acc = fmaf(-(blk->dmin * dx[b]), (float)mm, acc);
            }
            y[r * ldy + c] = acc;
        }
    }
    free(q);
    free(dx);
    free(blk);
}

/* ---- helpers ---- */

static fx_kernels *make_ctx(fx_isa isa, unsigned threads) {
    fx_alloc alloc;
    assert_int_equal(fx_alloc_init(&alloc, NULL), FX_OK);
    fx_kernels_params p;
    fx_kernels_params_init(&p);
    p.isa = isa;
    p.n_threads = threads;
    fx_kernels *kc = NULL;
    const fx_status st = fx_kernels_create(&alloc, &p, &kc, NULL);
    if (st == FX_ERR_UNSUPPORTED) return NULL;
    assert_int_equal(st, FX_OK);
    return kc;
}

static bool same_bits(const float *a, const float *b, size_t n) {
    return memcmp(a, b, n * sizeof *a) == 0;
}

static void expect_rows(const float *y, const float *ref, size_t m, size_t n,
                        size_t ldy, const char *what, const tinfo *ti,
                        size_t k) {
    for (size_t r = 0; r < m; r++)
        if (!same_bits(y + r * ldy, ref + r * ldy, n)) {
            size_t c = 0;
            while (fx_f32_bits(y[r * ldy + c]) ==
                   fx_f32_bits(ref[r * ldy + c]))
                c++;
            fail_msg("%s %s K=%zu M=%zu row %zu col %zu: %a vs %a", what,
                     fx_wtype_name(ti->t), k, m, r, c,
                     (double)y[r * ldy + c], (double)ref[r * ldy + c]);
        }
}

static const size_t ms[] = {1, 2, 3, 4, 5, 6, 7, 8, 17, 64, 130};
#define N_MS (sizeof ms / sizeof *ms)
#define MAX_M 130
#define NCOLS 37 /* no multiple of any tile */

/* K values per type: the smallest, and a few blocks. */
static size_t k_of(const tinfo *ti, int i) {
    return ti->bs == 32 ? (size_t[]){32, 288}[i] : (size_t[]){256, 768}[i];
}

/* ---- tests ---- */

/* fx_matmul of w (type t, n rows) on every ISA, 1 and 2 threads and
 * every M of ms: each bit as ref (the portable one-thread batch). */
static void expect_every_isa(const float *x, size_t ldx, const void *w,
                             fx_wtype t, size_t n, size_t k, float *y,
                             const float *ref, size_t ldy, const char *what,
                             const tinfo *ti) {
    const fx_isa isas[] = {FX_ISA_PORTABLE, FX_ISA_AVX2, FX_ISA_AVX512};
    for (size_t a = 0; a < 3; a++)
        for (unsigned th = 1; th <= 2; th++) {
            fx_kernels *kc = make_ctx(isas[a], th);
            if (!kc) continue;
            for (size_t i = 0; i < N_MS; i++) {
                memset(y, 0xff, MAX_M * ldy * sizeof *y);
                assert_int_equal(fx_matmul(kc, x, ldx, ms[i], w, t, n, k, y,
                                           ldy, 0),
                                 FX_OK);
                expect_rows(y, ref, ms[i], n, ldy, what, ti, k);
            }
            fx_kernels_free(kc);
        }
}


static void test_table(void **state) {
    (void)state;
    for (int i = 0; i < 16; i++) assert_int_equal(fx_iq4nl_values[i], kvalues[i]);
    for (size_t t = 0; t < N_TYPES; t++) {
        const fx_qtype *q = fx_qtype_of(types[t].t);
        assert_non_null(q);
        assert_int_equal(q->block_elems, types[t].bs);
        assert_int_equal(q->block_bytes, types[t].bytes);
        assert_int_equal(q->xq, types[t].bs == 32 ? FX_XQ_32 : FX_XQ_256);
        assert_string_equal(fx_wtype_name(types[t].t), q->name);
        assert_int_equal(fx_wtype_row_bytes(types[t].t, 2 * q->block_elems),
                         2 * q->block_bytes);
        assert_int_equal(fx_wtype_row_bytes(types[t].t, q->block_elems + 16), 0);
        assert_non_null(fx_qmm_portable(types[t].t));
    }
    assert_null(fx_qtype_of(FX_WTYPE_Q8_0));
    assert_null(fx_qtype_of(FX_WTYPE_F32));
    assert_null(fx_qmm_portable(FX_WTYPE_Q8_0));
}

/* FX_XQ_256's bytes against the rule, with a tiny block, an inf block and
 * a NaN block. */
static void test_xq256(void **state) {
    (void)state;
    const size_t k = 1280, m = 3, ld = fx_xq256_row_bytes(k);
    float *x = random_x(m, k, 7);
    for (size_t i = 256; i < 512; i++) x[i] *= 0x1p-110f;
    x[k + 600] = INFINITY;
    x[2 * k + 1100] = NAN;
    uint8_t *xq = calloc(m, ld), *xq2 = calloc(m, ld);
    int8_t q[1280];
    float dx[5];
    fx_xq256_portable(x, k, m, k, xq, ld);
    for (size_t r = 0; r < m; r++) {
        const uint8_t *row = xq + r * ld;
        ref_xq(x + r * k, k, 256, q, dx);
        assert_memory_equal(row, q, k);
        for (size_t j = 0; j < k / 16; j++) {
            int s = 0;
            for (int i = 0; i < 16; i++) s += q[16 * j + i];
            int16_t v;
            memcpy(&v, row + k + 2 * j, 2);
            assert_int_equal(v, s);
        }
        for (size_t j = 0; j < k / 32; j++) {
            int s = 0;
            for (int i = 0; i < 32; i++) s += q[32 * j + i];
            int16_t v;
            memcpy(&v, row + fx_xq256_bsum32_at(k) + 2 * j, 2);
            assert_int_equal(v, s);
        }
        for (size_t b = 0; b < k / 256; b++) {
            float d;
            memcpy(&d, row + k + k / 8 + 4 * b, 4);
            assert_true(fx_f32_bits(d) == fx_f32_bits(dx[b]) ||
                        (isnan(d) && isnan(dx[b])));
        }
    }
    const fx_xq_fn avx2 = fx_xq256_avx2();
    fx_kernels *kc = make_ctx(FX_ISA_AVX2, 1);
    if (avx2 && kc) {
        avx2(x, k, m, k, xq2, ld);
        for (size_t r = 0; r < m; r++)
            assert_memory_equal(xq + r * ld, xq2 + r * ld,
                                fx_xq256_bsum32_at(k) + k / 16);
    }
    fx_kernels_free(kc);
    free(x);
    free(xq);
    free(xq2);
}

/* (a): the portable context against the reference, every M. */
static void test_reference(void **state) {
    (void)state;
    fx_kernels *kc = make_ctx(FX_ISA_PORTABLE, 1);
    for (size_t t = 0; t < N_TYPES; t++)
        for (int ki = 0; ki < 2; ki++) {
            const tinfo *ti = &types[t];
            const size_t k = k_of(ti, ki), ldx = k + 3, ldy = NCOLS + 2;
            uint8_t *w = random_weights(ti, NCOLS, k, 100 + t * 2 + ki);
            float *x = random_x(MAX_M, ldx, 200 + t);
            float *y = malloc(MAX_M * ldy * sizeof *y);
            float *ref = malloc(MAX_M * ldy * sizeof *ref);
            ref_matmul(ti, x, ldx, MAX_M, w, NCOLS, k, ref, ldy);
            for (size_t i = 0; i < N_MS; i++) {
                assert_int_equal(fx_matmul(kc, x, ldx, ms[i], w, ti->t, NCOLS,
                                           k, y, ldy, 0),
                                 FX_OK);
                expect_rows(y, ref, ms[i], NCOLS, ldy, "portable", ti, k);
            }
            free(w);
            free(x);
            free(y);
            free(ref);
        }
    fx_kernels_free(kc);
}

/* (b), (c): every ISA and thread count, every M, each row alone, against
 * the portable one-thread batch; weights at an odd address. */
static void test_isas_batches(void **state) {
    (void)state;
    const fx_isa isas[] = {FX_ISA_PORTABLE, FX_ISA_AVX2, FX_ISA_AVX512};
    fx_kernels *base = make_ctx(FX_ISA_PORTABLE, 1);
    for (size_t t = 0; t < N_TYPES; t++)
        for (int ki = 0; ki < 2; ki++) {
            const tinfo *ti = &types[t];
            const size_t k = k_of(ti, ki), ldx = k + 5, ldy = NCOLS + 1;
            const size_t rb = fx_wtype_row_bytes(ti->t, k);
            uint8_t *w0 = random_weights(ti, NCOLS, k, 300 + t * 2 + ki);
            uint8_t *w = malloc(NCOLS * rb + 1);
            memcpy(w + 1, w0, NCOLS * rb);
            float *x = random_x(MAX_M, ldx, 400 + t);
            float *y = malloc(MAX_M * ldy * sizeof *y);
            float *ref = malloc(MAX_M * ldy * sizeof *ref);
            assert_int_equal(fx_matmul(base, x, ldx, MAX_M, w0, ti->t, NCOLS,
                                       k, ref, ldy, 0),
                             FX_OK);
            expect_every_isa(x, ldx, w + 1, ti->t, NCOLS, k, y, ref, ldy,
                             "isa/batch", ti);
            for (size_t a = 0; a < 3; a++)
                for (unsigned th = 1; th <= 2; th++) {
                    fx_kernels *kc = make_ctx(isas[a], th);
                    if (!kc) continue;
                    for (size_t r = 0; r < MAX_M; r += 13) {
                        assert_int_equal(fx_matmul(kc, x + r * ldx, ldx, 1, w0,
                                                   ti->t, NCOLS, k, y, ldy, 0),
                                         FX_OK);
                        expect_rows(y, ref + r * ldy, 1, NCOLS, ldy, "alone",
                                    ti, k);
                    }
                    fx_kernels_free(kc);
                }
            free(w0);
            free(w);
            free(x);
            free(y);
            free(ref);
        }
    fx_kernels_free(base);
}

/* 16-row groups (FX_WTYPE_QR16): every row comes back from the layout as
 * it went in, and every ISA, thread count and M computes from the groups
 * the bits the portable kernel computes from the rows -- with 2 full
 * groups and 5 rows after them, and with 3 full groups. */
static void test_qr16(void **state) {
    (void)state;
    const size_t ns[] = {NCOLS, 48};
    fx_kernels *base = make_ctx(FX_ISA_PORTABLE, 1);
    for (size_t t = 0; t < N_TYPES; t++) {
        const tinfo *ti = &types[t];
        const fx_wtype g16 = (fx_wtype)(ti->t | FX_WTYPE_QR16);
        /* Q3_K and 32-element rows of blocks not a multiple of 8 are
         * not laid out so: refused */
        const size_t k_no = ti->bs == 32 ? 288 : 256;
        if (ti->t == FX_WTYPE_Q3_K || ti->bs == 32) {
            assert_false(fx_qr16_fits(ti->t, k_no));
            assert_int_equal(fx_wtype_row_bytes(g16, k_no), 0);
            uint8_t *w = random_weights(ti, 16, k_no, 1);
            uint8_t *d = malloc(16 * fx_wtype_row_bytes(ti->t, k_no));
            assert_int_equal(fx_qr16_repack(d, w, ti->t, 16, k_no),
                             FX_ERR_INVALID_ARG);
            float x[288], y[16];
            memset(x, 0, sizeof x);
            assert_int_equal(fx_matmul(base, x, k_no, 1, w, g16, 16, k_no,
                                       y, 16, 0),
                             ti->t == FX_WTYPE_Q3_K ? FX_ERR_UNSUPPORTED
                                                    : FX_ERR_INVALID_ARG);
            free(w);
            free(d);
            if (ti->t == FX_WTYPE_Q3_K) continue;
        }
        for (int ki = 0; ki < 2; ki++)
            for (int ni = 0; ni < 2; ni++) {
                const size_t k = ki ? 768 : 256, n = ns[ni];
                const size_t ldx = k + 5, ldy = n + 1;
                const size_t rb = fx_wtype_row_bytes(ti->t, k);
                assert_true(fx_qr16_fits(ti->t, k));
                assert_int_equal(fx_wtype_row_bytes(g16, k), rb);
                uint8_t *w = random_weights(ti, n, k, 500 + t * 4 + (size_t)ki);
                uint8_t *w16 = malloc(n * rb);
                uint8_t *row = malloc(rb);
                assert_int_equal(fx_qr16_repack(w16, w, ti->t, n, k), FX_OK);
                assert_true(memcmp(w16, w, n * rb) != 0);
                for (size_t i = 0; i < n; i++) {
                    fx_qr16_row(row, w16, ti->t, n, k, i);
                    assert_memory_equal(row, w + i * rb, rb);
                }
                float *x = random_x(MAX_M, ldx, 600 + t);
                float *y = malloc(MAX_M * ldy * sizeof *y);
                float *ref = malloc(MAX_M * ldy * sizeof *ref);
                assert_int_equal(fx_matmul(base, x, ldx, MAX_M, w, ti->t, n, k,
                                           ref, ldy, 0),
                                 FX_OK);
                expect_every_isa(x, ldx, w16, g16, n, k, y, ref, ldy,
                                 "16-row groups", ti);
                free(w);
                free(w16);
                free(row);
                free(x);
                free(y);
                free(ref);
            }
    }
    fx_kernels_free(base);
}

/* (c): fx_matmul_multi mixing both activation formats, Q8_0 and F32 in one
 * call: each output is what fx_matmul gives for it alone. The long K
 * makes the activation buffer take the rows in chunks (26 here). */
static void check_multi(size_t k, size_t m, const fx_wtype *wt, size_t nw) {
    const size_t ldx = k, n = 19;
    float *x = random_x(m, ldx, k + m);
    uint8_t *w[FX_MM_MAX_OUTS];
    float *y[FX_MM_MAX_OUTS], *ref[FX_MM_MAX_OUTS];
    fx_mm_out outs[FX_MM_MAX_OUTS];
    for (size_t j = 0; j < nw; j++) {
        const size_t rb = fx_wtype_row_bytes(wt[j], k);
        assert_true(rb > 0);
        w[j] = malloc(n * rb);
        float *row = malloc(k * sizeof *row);
        uint64_t s = 900 + j;
        for (size_t r = 0; r < n; r++) {
            for (size_t i = 0; i < k; i++) row[i] = fx_test_rng_f(&s);
            const fx_qtype *q = fx_qtype_of(wt[j]);
            if (q) q->quantize(w[j] + r * rb, row, k);
            else if (wt[j] == FX_WTYPE_Q8_0)
                fx_quantize_q8_0((fx_block_q8_0 *)(void *)(w[j] + r * rb), row,
                                 k);
            else memcpy(w[j] + r * rb, row, rb);
        }
        free(row);
        y[j] = malloc(m * n * sizeof(float));
        ref[j] = malloc(m * n * sizeof(float));
        outs[j] = (fx_mm_out){w[j], wt[j], n, y[j], n};
    }
    const fx_isa isas[] = {FX_ISA_PORTABLE, FX_ISA_AVX2, FX_ISA_AVX512};
    for (size_t a = 0; a < 3; a++)
        for (unsigned th = 1; th <= 2; th++) {
            fx_kernels *kc = make_ctx(isas[a], th);
            if (!kc) continue;
            for (size_t j = 0; j < nw; j++)
                assert_int_equal(fx_matmul(kc, x, ldx, m, w[j], wt[j], n, k,
                                           ref[j], n, 0),
                                 FX_OK);
            assert_int_equal(fx_matmul_multi(kc, x, ldx, m, k, outs, nw, 0),
                             FX_OK);
            for (size_t j = 0; j < nw; j++) {
                if (!same_bits(y[j], ref[j], m * n))
                    fail_msg("multi: %s isa %d threads %u K=%zu",
                             fx_wtype_name(wt[j]), (int)isas[a], th, k);
                /* each row alone */
                for (size_t r = 0; r < m; r += 7) {
                    float one[19];
                    assert_int_equal(fx_matmul(kc, x + r * ldx, ldx, 1, w[j],
                                               wt[j], n, k, one, n, 0),
                                     FX_OK);
                    assert_true(same_bits(one, ref[j] + r * n, n));
                }
            }
            fx_kernels_free(kc);
        }
    for (size_t j = 0; j < nw; j++) {
        free(w[j]);
        free(y[j]);
        free(ref[j]);
    }
    free(x);
}

static void test_multi(void **state) {
    (void)state;
    const fx_wtype a[] = {FX_WTYPE_Q4_K, FX_WTYPE_Q6_K, FX_WTYPE_Q8_0,
                          FX_WTYPE_F32};
    check_multi(512, 17, a, 4);
    const fx_wtype b[] = {FX_WTYPE_IQ4_NL, FX_WTYPE_Q4_K, FX_WTYPE_Q5_0,
                          FX_WTYPE_IQ4_XS};
    check_multi(1024, 9, b, 4);
#ifndef FX_XQ_BYTES /* the blocking build's buffer holds no such row */
    /* 4 MiB / (81920 + 74752) bytes: 26 rows a chunk */
    check_multi(65536, 40, b, 2);
#endif
}

/* (d): the decoded integers are the library's weights, and the result is
 * the float product within the activation quantization's error. */
static void test_accuracy(void **state) {
    (void)state;
    fx_kernels *kc = make_ctx(FX_ISA_AUTO, 1);
    const size_t k = 1024, n = 11, m = 5;
    float *x = random_x(m, k, 77), *wf = malloc(n * k * sizeof *wf);
    float *y = malloc(m * n * sizeof *y), *row = malloc(k * sizeof *row);
    tblock *blk = malloc(sizeof *blk);
    for (size_t t = 0; t < N_TYPES; t++) {
        const tinfo *ti = &types[t];
        const fx_qtype *q = fx_qtype_of(ti->t);
        const size_t rb = fx_wtype_row_bytes(ti->t, k), nb = k / ti->bs;
        uint8_t *w = malloc(n * rb);
        uint64_t s = 55 + t;
        for (size_t c = 0; c < n; c++) {
            for (size_t i = 0; i < k; i++) row[i] = fx_test_rng_f(&s);
            q->quantize(w + c * rb, row, k);
            assert_int_equal(fx_wtype_row_to_f32(wf + c * k, w + c * rb,
                                                 ti->t, k),
                             FX_OK);
            for (size_t b = 0; b < nb; b++) {
                ti->dec(w + c * rb + b * ti->bytes, blk);
                for (size_t i = 0; i < ti->bs; i++) {
                    const double a = (double)blk->d * blk->e[i].sc *
                                     blk->e[i].w,
                                 mn = (double)blk->dmin * blk->e[i].mn;
                    const double v = a - mn;
                    const double got = wf[c * k + b * ti->bs + i];
                    if (fabs(got - v) > 0x1p-22 * (fabs(a) + fabs(mn)))
                        fail_msg("%s: element %zu decodes to %g, dequant %g",
                                 fx_wtype_name(ti->t), b * ti->bs + i, v, got);
                }
            }
        }
        /* the same floats from a row at an odd address */
        uint8_t *odd = malloc(rb + 1);
        memcpy(odd + 1, w + rb, rb);
        assert_int_equal(fx_wtype_row_to_f32(row, odd + 1, ti->t, k), FX_OK);
        assert_memory_equal(row, wf + k, k * sizeof *row);
        free(odd);
        assert_int_equal(fx_matmul(kc, x, k, m, w, ti->t, n, k, y, n, 0),
                         FX_OK);
        for (size_t r = 0; r < m; r++)
            for (size_t c = 0; c < n; c++) {
                double exact = 0, qerr = 0, mag = 0;
                for (size_t b = 0; b < k / (ti->bs == 32 ? 32 : 256); b++) {
                    const size_t bs = ti->bs == 32 ? 32 : 256;
                    float amax = 0;
                    for (size_t i = 0; i < bs; i++)
                        amax = fmaxf(amax, fabsf(x[r * k + b * bs + i]));
                    for (size_t i = 0; i < bs; i++) {
                        const double xv = x[r * k + b * bs + i],
                                     wv = wf[c * k + b * bs + i];
                        exact += xv * wv;
                        qerr += amax / 127.0 / 2 * fabs(wv);
                        mag += (fabs(xv) + amax / 127.0) * fabs(wv);
                    }
                }
                /* the quantization, and float rounding per block on the
                 * terms (with a min each term can be larger than wv) */
                const double bound = qerr * 1.001 + 0x1p-20 * (2.0 * k / 32 + 4) * mag * 4;
                if (fabs(y[r * n + c] - exact) > bound)
                    fail_msg("%s: y[%zu][%zu] = %g, float %g, bound %g",
                             fx_wtype_name(ti->t), r, c, (double)y[r * n + c],
                             exact, bound);
            }
        free(w);
    }
    free(x);
    free(wf);
    free(y);
    free(row);
    free(blk);
    fx_kernels_free(kc);
}

/* inf or NaN in a row's activations gives NaN in every output of that row
 * only; a row of zeros or of tiny values gives +0. */
static void test_special(void **state) {
    (void)state;
    const size_t k = 512, n = 7, m = 4;
    float *x = random_x(m, k, 3), *y = malloc(m * n * sizeof *y);
    x[0 * k + 300] = INFINITY;
    x[1 * k + 5] = NAN;
    for (size_t i = 0; i < k; i++) x[2 * k + i] = (i % 2 ? 1 : -1) * 0x1p-120f;
    const fx_isa isas[] = {FX_ISA_PORTABLE, FX_ISA_AVX2, FX_ISA_AVX512};
    for (size_t a = 0; a < 3; a++) {
        fx_kernels *kc = make_ctx(isas[a], 1);
        if (!kc) continue;
        for (size_t t = 0; t < N_TYPES; t++) {
            uint8_t *w = random_weights(&types[t], n, k, 11 + t);
            assert_int_equal(fx_matmul(kc, x, k, m, w, types[t].t, n, k, y, n,
                                       0),
                             FX_OK);
            for (size_t c = 0; c < n; c++) {
                assert_true(isnan(y[c]) && isnan(y[n + c]));
                assert_true(fx_f32_bits(y[2 * n + c]) == 0);
                assert_true(isfinite(y[3 * n + c]));
            }
            free(w);
        }
        fx_kernels_free(kc);
    }
    free(x);
    free(y);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_xq256),
        cmocka_unit_test(test_reference),
        cmocka_unit_test(test_isas_batches),
        cmocka_unit_test(test_qr16),
        cmocka_unit_test(test_multi),
        cmocka_unit_test(test_accuracy),
        cmocka_unit_test(test_special),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
