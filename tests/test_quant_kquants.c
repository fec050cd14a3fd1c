/*
 * The K-quants Q2_K to Q6_K (lib/kernels/quant_kquants.c).
 *
 * Dequantization: blocks are packed here from a logical description (d,
 * dmin, each sub-block's scale and min, each element's quant) by this
 * file's own reading of the layouts, covering every scale, min and quant
 * value and negative, subnormal, zero and the largest d; every output is
 * compared bit for bit with ggml's formula written out per element. Each
 * float operation is computed in double and rounded once to float, which
 * is the correctly rounded f32 result (53 >= 2*24 + 2), so the expected
 * values do not depend on how this file is compiled.
 *
 * Quantizers: round-trip RMSE bounds on fixed gaussian and uniform data,
 * set from measurement a little above ferrox's error and below ggml's
 * quantize_row_q*_K_ref on the same data; zero, constant, huge, tiny and
 * non-finite blocks; block independence and determinism. The rounding
 * and scale-packing helpers and the scale searches are checked directly.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kernels/kernels.h"
#include "kernels/quant_util.h"
#include "kernels/quants.h"
#include "test_rng.h"

#define QK 256

/* ---- independent arithmetic ---- */

static float half_value(uint16_t h) {
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v = e == 0 ? ldexp((double)m, -24) : ldexp((double)(m | 0x400), e - 25);
    return (float)((h & 0x8000) ? -v : v);
}
static float mulf(float a, float b) { return (float)((double)a * (double)b); }
static float subf(float a, float b) { return (float)((double)a - (double)b); }

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* ---- logical blocks and this file's packing ---- */

typedef struct lblock {
    uint16_t d, dmin;
    int sc[16], mn[16]; /* per sub-block (Q3_K: -32..31, Q6_K: -128..127) */
    int q[QK];          /* per element (Q3_K: -4..3, Q6_K: -32..31) */
} lblock;

enum { T_Q2, T_Q3, T_Q4, T_Q5, T_Q6, T_N };

typedef struct tinfo {
    const char *name;
    size_t bytes;
    int sublen;          /* elements per sub-block */
    int sc_lo, sc_hi;    /* sub-block scale range */
    int mn_hi;           /* min range 0..mn_hi, -1: no min */
    int q_lo, q_hi;
    void (*deq)(float *, const void *, size_t);
    void (*quant)(void *, const float *, size_t);
} tinfo;

static const tinfo T[T_N] = {
    {"q2_K", sizeof(fx_block_q2_K), 16, 0, 15, 15, 0, 3, fx_dequant_q2_K, fx_quantize_q2_K},
    {"q3_K", sizeof(fx_block_q3_K), 16, -32, 31, -1, -4, 3, fx_dequant_q3_K, fx_quantize_q3_K},
    {"q4_K", sizeof(fx_block_q4_K), 32, 0, 63, 63, 0, 15, fx_dequant_q4_K, fx_quantize_q4_K},
    {"q5_K", sizeof(fx_block_q5_K), 32, 0, 63, 63, 0, 31, fx_dequant_q5_K, fx_quantize_q5_K},
    {"q6_K", sizeof(fx_block_q6_K), 16, -128, 127, -1, -32, 31, fx_dequant_q6_K, fx_quantize_q6_K},
};

static void put_u16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)(v & 0xff);
    p[1] = (uint8_t)(v >> 8);
}

/* Sets bit b of the byte array p to v's lowest bit. */
static void put_bit(uint8_t *p, int b, int v) {
    if (v & 1) p[b / 8] |= (uint8_t)(1u << (b % 8));
}

/* Writes the block as bytes at out (the byte offsets of ggml-common.h). */
static void pack(int t, const lblock *L, uint8_t *out) {
    memset(out, 0, T[t].bytes);
    switch (t) {
    case T_Q2: { /* scales[16] qs[64] d dmin */
        for (int j = 0; j < 16; j++) out[j] = (uint8_t)(L->sc[j] + 16 * L->mn[j]);
        /* element e = 128 h + 32 p + l: bits 2p..2p+1 of qs[32 h + l] */
        for (int e = 0; e < QK; e++) {
            int h = e / 128, p = (e % 128) / 32, l = e % 32;
            out[16 + 32 * h + l] |= (uint8_t)(L->q[e] << (2 * p));
        }
        put_u16(out + 80, L->d);
        put_u16(out + 82, L->dmin);
        break;
    }
    case T_Q3: { /* hmask[32] qs[64] scales[12] d */
        for (int e = 0; e < QK; e++) {
            int u = L->q[e] + 4;
            int h = e / 128, p = (e % 128) / 32, l = e % 32;
            out[32 + 32 * h + l] |= (uint8_t)((u & 3) << (2 * p));
            /* bit 2: hmask byte e % 32, bit e / 32 */
            put_bit(out, 8 * (e % 32) + e / 32, u >> 2);
        }
        uint8_t *s = out + 96;
        for (int j = 0; j < 16; j++) {
            int c = L->sc[j] + 32;
            /* low nibble: byte j % 8, the low nibble for j < 8 */
            put_bit(s, 8 * (j % 8) + 4 * (j / 8) + 0, c);
            put_bit(s, 8 * (j % 8) + 4 * (j / 8) + 1, c >> 1);
            put_bit(s, 8 * (j % 8) + 4 * (j / 8) + 2, c >> 2);
            put_bit(s, 8 * (j % 8) + 4 * (j / 8) + 3, c >> 3);
            /* top two bits: byte 8 + j % 4, bits 2 (j / 4) */
            put_bit(s, 8 * (8 + j % 4) + 2 * (j / 4), c >> 4);
            put_bit(s, 8 * (8 + j % 4) + 2 * (j / 4) + 1, c >> 5);
        }
        put_u16(out + 108, L->d);
        break;
    }
    case T_Q4:
    case T_Q5: { /* d dmin scales[12] [qh[32]] qs[128] */
        put_u16(out, L->d);
        put_u16(out + 2, L->dmin);
        uint8_t *s = out + 4;
        for (int j = 0; j < 8; j++) {
            int sc = L->sc[j], mn = L->mn[j];
            if (j < 4) {
                s[j] |= (uint8_t)sc;      /* bits 0-5 */
                s[j + 4] |= (uint8_t)mn;
            } else {
                s[j + 4] |= (uint8_t)((sc & 15) | ((mn & 15) << 4));
                s[j - 4] |= (uint8_t)((sc >> 4) << 6); /* bits 6-7 */
                s[j] |= (uint8_t)((mn >> 4) << 6);
            }
        }
        uint8_t *qh = t == T_Q5 ? out + 16 : NULL;
        uint8_t *qs = out + (t == T_Q5 ? 48 : 16);
        /* element e = 64 c + 32 n + l: nibble n of qs[32 c + l]; Q5_K's
         * bit 4 in qh[l] bit 2 c + n */
        for (int e = 0; e < QK; e++) {
            int c = e / 64, n = (e % 64) / 32, l = e % 32, v = L->q[e];
            qs[32 * c + l] |= (uint8_t)((v & 15) << (4 * n));
            if (qh) put_bit(qh, 8 * l + 2 * c + n, v >> 4);
        }
        break;
    }
    case T_Q6: { /* ql[128] qh[64] scales[16] d */
        for (int e = 0; e < QK; e++) {
            int u = L->q[e] + 32;
            int h = e / 128, r = (e % 128) / 32, l = e % 32;
            out[64 * h + 32 * (r % 2) + l] |= (uint8_t)((u & 15) << (4 * (r / 2)));
            out[128 + 32 * h + l] |= (uint8_t)((u >> 4) << (2 * r));
        }
        for (int j = 0; j < 16; j++) out[192 + j] = (uint8_t)(int8_t)L->sc[j];
        put_u16(out + 208, L->d);
        break;
    }
    default:
        fail();
    }
}

/* ggml's value of element e, written out. */
static float expect(int t, const lblock *L, int e) {
    int j = e / T[t].sublen;
    float d = half_value(L->d);
    float dl = mulf(d, (float)L->sc[j]);
    float v = mulf(dl, (float)L->q[e]);
    if (T[t].mn_hi < 0) return v;
    return subf(v, mulf(half_value(L->dmin), (float)L->mn[j]));
}

/* Packs n logical blocks, dequantizes them in one call and checks every
 * value. */
static void check_dequant(int t, const lblock *L, size_t n) {
    uint8_t *buf = malloc(n * T[t].bytes);
    float *out = malloc(n * QK * sizeof(float));
    assert_non_null(buf);
    assert_non_null(out);
    for (size_t b = 0; b < n; b++) pack(t, &L[b], buf + b * T[t].bytes);
    T[t].deq(out, buf, n * QK);
    for (size_t b = 0; b < n; b++)
        for (int e = 0; e < QK; e++) {
            float want = expect(t, &L[b], e);
            if (fbits(out[b * QK + (size_t)e]) != fbits(want)) {
                print_error("%s block %zu element %d: %a, want %a\n", T[t].name, b, e,
                            (double)out[b * QK + (size_t)e], (double)want);
                fail();
            }
        }
    free(buf);
    free(out);
}

/* Every scale, min and quant value under each d: block b's sub-block j
 * takes the (b * nsub + j)-th scale value, so the blocks run through the
 * whole range; quants cycle through theirs. */
static void test_dequant_all_values(void **state) {
    (void)state;
    static const uint16_t ds[] = {0x3c00, 0xb800, 0x0001, 0x83ff, 0x7bff,
                                  0x2e66, 0x0000, 0x8000, 0x0400, 0xfbff};
    static const uint16_t dmins[] = {0x3555, 0x0200, 0x8001, 0x7bff, 0x0000,
                                     0xc100, 0x1234, 0x03ff, 0x8000, 0x2c00};
    for (int t = 0; t < T_N; t++) {
        int nsub = QK / T[t].sublen;
        int nsc = T[t].sc_hi - T[t].sc_lo + 1, nq = T[t].q_hi - T[t].q_lo + 1;
        size_t nb = (size_t)((nsc + nsub - 1) / nsub);
        if (nb < 4) nb = 4;
        size_t n = nb * (sizeof ds / sizeof ds[0]);
        lblock *L = calloc(n, sizeof *L);
        assert_non_null(L);
        for (size_t i = 0; i < n; i++) {
            size_t b = i % nb;
            L[i].d = ds[i / nb];
            L[i].dmin = T[t].mn_hi < 0 ? 0 : dmins[i / nb];
            for (int j = 0; j < nsub; j++) {
                int k = (int)b * nsub + j;
                L[i].sc[j] = T[t].sc_lo + k % nsc;
                L[i].mn[j] = T[t].mn_hi < 0 ? 0 : (5 * k + 3) % (T[t].mn_hi + 1);
            }
            for (int e = 0; e < QK; e++)
                L[i].q[e] = T[t].q_lo + (e + 7 * (int)b) % nq;
        }
        check_dequant(t, L, n);
        free(L);
    }
}

/* Random logical blocks with any finite d and dmin. */
static void test_dequant_random(void **state) {
    (void)state;
    uint64_t rng = 38;
    enum { NB = 300 };
    lblock *L = calloc(NB, sizeof *L);
    assert_non_null(L);
    for (int t = 0; t < T_N; t++) {
        int nsc = T[t].sc_hi - T[t].sc_lo + 1, nq = T[t].q_hi - T[t].q_lo + 1;
        for (int b = 0; b < NB; b++) {
            do L[b].d = (uint16_t)fx_test_rng_next(&rng);
            while ((L[b].d & 0x7c00) == 0x7c00);
            do L[b].dmin = (uint16_t)fx_test_rng_next(&rng);
            while ((L[b].dmin & 0x7c00) == 0x7c00);
            if (T[t].mn_hi < 0) L[b].dmin = 0;
            for (int j = 0; j < 16; j++) {
                L[b].sc[j] = T[t].sc_lo + (int)fx_test_rng_below(&rng, (size_t)nsc);
                L[b].mn[j] = T[t].mn_hi < 0
                                 ? 0
                                 : (int)fx_test_rng_below(&rng, (size_t)T[t].mn_hi + 1);
            }
            for (int e = 0; e < QK; e++)
                L[b].q[e] = T[t].q_lo + (int)fx_test_rng_below(&rng, (size_t)nq);
        }
        check_dequant(t, L, NB);
    }
    free(L);
}

/* ---- helpers ---- */

static void test_nearest_int(void **state) {
    (void)state;
    static const struct { float v; int want; } c[] = {
        {0.0f, 0},   {-0.0f, 0},  {0.5f, 0},    {1.5f, 2},      {2.5f, 2},
        {-0.5f, 0},  {-1.5f, -2}, {-2.5f, -2},  {0.49999997f, 0}, {3.7f, 4},
        {-3.7f, -4}, {4194303.0f, 4194303},     {-4194303.0f, -4194303},
        {1e10f, 4194303},         {-1e30f, -4194303},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++)
        assert_int_equal(fx_nearest_int(c[i].v), c[i].want);
    assert_int_equal(fx_nearest_int(NAN), 0);
    assert_int_equal(fx_nearest_int(INFINITY), 4194303);
    /* against nearbyint (ties to even under the default mode) */
    uint64_t rng = 5;
    for (int i = 0; i < 100000; i++) {
        float v = (float)(fx_test_rng_f(&rng) * 300.0);
        if (i % 2) v = floorf(v) + 0.5f;
        assert_int_equal(fx_nearest_int(v), (int)nearbyintf(v));
    }
    assert_int_equal(fx_clampi(-5, -4, 3), -4);
    assert_int_equal(fx_clampi(7, -4, 3), 3);
    assert_int_equal(fx_clampi(2, -4, 3), 2);
}

/* The scale packers against this file's packing (through pack) and
 * their getters against the values put in. */
static void test_scale_packing(void **state) {
    (void)state;
    uint64_t rng = 7;
    for (int it = 0; it < 2000; it++) {
        lblock L;
        memset(&L, 0, sizeof L);
        uint8_t sc[8], mn[8], code[16];
        for (int j = 0; j < 8; j++) {
            sc[j] = (uint8_t)fx_test_rng_below(&rng, 64);
            mn[j] = (uint8_t)fx_test_rng_below(&rng, 64);
            L.sc[j] = sc[j];
            L.mn[j] = mn[j];
        }
        uint8_t blk[sizeof(fx_block_q4_K)], s[12];
        pack(T_Q4, &L, blk);
        fx_k4_scale_set(s, sc, mn);
        assert_memory_equal(s, blk + 4, 12);
        for (int j = 0; j < 8; j++) {
            uint8_t a, b;
            fx_k4_scale_get(s, j, &a, &b);
            assert_int_equal(a, sc[j]);
            assert_int_equal(b, mn[j]);
        }
        for (int j = 0; j < 16; j++) {
            code[j] = (uint8_t)fx_test_rng_below(&rng, 64);
            L.sc[j] = code[j] - 32;
        }
        uint8_t blk3[sizeof(fx_block_q3_K)];
        pack(T_Q3, &L, blk3);
        fx_q3k_scale_set(s, code);
        assert_memory_equal(s, blk3 + 96, 12);
        for (int j = 0; j < 16; j++) assert_int_equal(fx_q3k_scale_get(s, j), code[j]);
    }
}

/* The searches recover data that lies exactly on their grids, and keep
 * their codes in range on any data. */
static void test_searches(void **state) {
    (void)state;
    float x[32];
    int8_t L8[32];
    uint8_t U8[32];
    for (int i = 0; i < 16; i++) x[i] = 0.0f;
    assert_true(fx_kq_search_sym(16, 32, x, L8) == 0.0f);
    for (int i = 0; i < 16; i++) assert_int_equal(L8[i], 0);
    assert_true(fx_kq_search_q3(16, 4, x, L8) == 0.0f);
    /* x = 0.25 * l with -32 among the levels: the exact fit */
    for (int i = 0; i < 16; i++) x[i] = 0.25f * (float)((i * 5) % 64 - 32);
    float s = fx_kq_search_sym(16, 32, x, L8);
    for (int i = 0; i < 16; i++) assert_true(s * (float)(L8[i] - 32) == x[i]);
    for (int i = 0; i < 16; i++) x[i] = -0.5f * (float)((i * 3) % 8 - 4);
    s = fx_kq_search_q3(16, 4, x, L8);
    for (int i = 0; i < 16; i++) assert_true(fabsf(s * (float)(L8[i] - 4) - x[i]) < 1e-6f);
    /* with a min: x = 0.5 l - 3 over l = 0..15 */
    float w[32], nmin;
    for (int i = 0; i < 32; i++) {
        x[i] = 0.5f * (float)(i % 16) - 3.0f;
        w[i] = 1.0f;
    }
    s = fx_kq_search_min(32, 15, x, w, U8, &nmin, -1.0f, 0.1f, 20, 0);
    for (int i = 0; i < 32; i++) assert_true(fabsf(s * (float)U8[i] - nmin - x[i]) < 1e-5f);
    /* constant block: scale 0, the min carries it */
    for (int i = 0; i < 16; i++) x[i] = -2.0f;
    s = fx_kq_search_min(16, 3, x, w, U8, &nmin, -0.5f, 0.1f, 15, 1);
    assert_true(s == 0.0f && nmin == 2.0f);
    uint64_t rng = 9;
    for (int it = 0; it < 3000; it++) {
        float mag = powf(10.0f, (float)fx_test_rng_below(&rng, 16) - 8.0f);
        for (int i = 0; i < 32; i++) {
            x[i] = fx_test_rng_f(&rng) * mag;
            w[i] = fabsf(x[i]);
        }
        fx_kq_search_sym(16, 32, x, L8);
        for (int i = 0; i < 16; i++) assert_true(L8[i] >= 0 && L8[i] < 64);
        fx_kq_search_q3(16, 4, x, L8);
        for (int i = 0; i < 16; i++) assert_true(L8[i] >= 0 && L8[i] < 8);
        fx_kq_search_min(32, 31, x, w, U8, &nmin, -0.5f, 0.1f, 15, 0);
        for (int i = 0; i < 32; i++) assert_true(U8[i] <= 31);
        assert_true(nmin >= 0.0f);
    }
}

/* ---- quantizers ---- */

static double gauss(uint64_t *rng) {
    double u = 1.0 - fx_test_rng_unit(rng), v = fx_test_rng_unit(rng);
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* Quantizes and dequantizes n values; returns rmse / rms(x). */
static double roundtrip(int t, const float *x, float *y, size_t n) {
    uint8_t *q = malloc(n / QK * T[t].bytes);
    assert_non_null(q);
    T[t].quant(q, x, n);
    T[t].deq(y, q, n);
    free(q);
    double se = 0.0, sx = 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = (double)y[i] - (double)x[i];
        se += e * e;
        sx += (double)x[i] * (double)x[i];
    }
    return sx > 0.0 ? sqrt(se / sx) : sqrt(se / (double)n);
}

/* Relative RMSE bounds: ferrox's measured value (in the comment) plus
 * ~1%, below ggml's quantize_row_q*_K_ref on the same data. */
static void test_rmse_bounds(void **state) {
    (void)state;
    enum { N = 256 * 256 };
    /* Measured (ferrox / ggml), gaussian: Q2_K 0.26461 / 0.29767, Q3_K
     * 0.14588 / 0.15148, Q4_K 0.070212 / 0.071469, Q5_K 0.034754 /
     * 0.036189, Q6_K 0.017501 / 0.017830; uniform: 0.21754 / 0.23406,
     * 0.12154 / 0.12517, 0.053693 / 0.054548, 0.026653 / 0.027670,
     * 0.013098 / 0.013311. Each bound is about halfway between. */
    static const double bound_gauss[T_N] = {0.2811, 0.1487, 0.0708, 0.0355, 0.01770};
    static const double bound_unif[T_N] = {0.2258, 0.1234, 0.0541, 0.0272, 0.01322};
    float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));
    assert_non_null(x);
    assert_non_null(y);
    for (int dist = 0; dist < 2; dist++) {
        uint64_t rng = 1000 + (uint64_t)dist;
        for (size_t i = 0; i < N; i++)
            x[i] = (float)(dist == 0 ? 0.02 * gauss(&rng) : 0.05 * fx_test_rng_f(&rng));
        for (int t = 0; t < T_N; t++) {
            double r = roundtrip(t, x, y, N);
            double bound = dist == 0 ? bound_gauss[t] : bound_unif[t];
            print_message("%s %s relative rmse %.6f (bound %.6f)\n", T[t].name,
                          dist == 0 ? "gauss" : "uniform", r, bound);
            assert_true(r <= bound);
        }
    }
    free(x);
    free(y);
}

static void check_finite(int t, const float *x, float *y) {
    roundtrip(t, x, y, QK);
    for (int i = 0; i < QK; i++)
        if (!isfinite(y[i])) {
            print_error("%s: element %d of the round trip is %g\n", T[t].name, i, (double)y[i]);
            fail();
        }
}

static void test_special_blocks(void **state) {
    (void)state;
    float x[QK], y[QK];
    for (int t = 0; t < T_N; t++) {
        /* zero: exactly zero out */
        for (int i = 0; i < QK; i++) x[i] = 0.0f;
        roundtrip(t, x, y, QK);
        for (int i = 0; i < QK; i++) assert_true(y[i] == 0.0f);
        /* constants: close */
        static const float cs[] = {0.37f, -0.37f, 1000.0f, -1e-3f, 3e-3f};
        for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
            for (int i = 0; i < QK; i++) x[i] = cs[c];
            roundtrip(t, x, y, QK);
            for (int i = 0; i < QK; i++)
                if (!(fabsf(y[i] - cs[c]) <= 0.02f * fabsf(cs[c]))) {
                    print_error("%s constant %g: %g\n", T[t].name, (double)cs[c], (double)y[i]);
                    fail();
                }
        }
        /* huge, tiny, mixed and non-finite: finite out */
        uint64_t rng = 77;
        static const float mags[] = {3.4e38f, 1e30f, 1e10f, 1e6f, 1e-20f, 1e-38f, 1e-42f, 1e-45f};
        for (size_t m = 0; m < sizeof mags / sizeof mags[0]; m++) {
            for (int i = 0; i < QK; i++) x[i] = fx_test_rng_f(&rng) * mags[m];
            check_finite(t, x, y);
            for (int i = 0; i < QK; i++) x[i] = (i % 2 ? 1.0f : -1.0f) * mags[m];
            check_finite(t, x, y);
            for (int i = 0; i < QK; i++) x[i] = fx_test_rng_f(&rng);
            x[fx_test_rng_below(&rng, QK)] = mags[m];
            check_finite(t, x, y);
        }
        x[3] = -3.4e38f;
        x[100] = 3.4e38f;
        check_finite(t, x, y);
        x[7] = INFINITY;
        x[8] = -INFINITY;
        x[9] = NAN;
        check_finite(t, x, y);
        /* tiny values come back no larger than twice the block's range */
        for (int i = 0; i < QK; i++) x[i] = fx_test_rng_f(&rng) * 1e-30f;
        roundtrip(t, x, y, QK);
        for (int i = 0; i < QK; i++) assert_true(fabsf(y[i]) <= 2e-30f);
    }
}

/* Many blocks at once give each block's bytes alone, every time. */
static void test_blocks_independent(void **state) {
    (void)state;
    enum { NB = 24 };
    float *x = malloc(NB * QK * sizeof(float));
    assert_non_null(x);
    uint64_t rng = 11;
    for (size_t i = 0; i < NB * QK; i++)
        x[i] = (float)(gauss(&rng) * pow(10.0, (double)(i / QK % 8) - 4.0));
    for (int t = 0; t < T_N; t++) {
        size_t bs = T[t].bytes;
        uint8_t *a = malloc(NB * bs), *b = malloc(NB * bs), *c = malloc(bs);
        assert_non_null(a);
        assert_non_null(b);
        assert_non_null(c);
        T[t].quant(a, x, NB * QK);
        T[t].quant(b, x, NB * QK);
        assert_memory_equal(a, b, NB * bs);
        for (size_t k = 0; k < NB; k++) {
            T[t].quant(c, x + k * QK, QK);
            assert_memory_equal(c, a + k * bs, bs);
        }
        free(a);
        free(b);
        free(c);
    }
    free(x);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dequant_all_values),
        cmocka_unit_test(test_dequant_random),
        cmocka_unit_test(test_nearest_int),
        cmocka_unit_test(test_scale_packing),
        cmocka_unit_test(test_searches),
        cmocka_unit_test(test_rmse_bounds),
        cmocka_unit_test(test_special_blocks),
        cmocka_unit_test(test_blocks_independent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
