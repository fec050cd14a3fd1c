/*
 * The 32-element block types Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL and IQ4_XS
 * (lib/kernels/quants.h, quant_legacy.c, quant_iq4.c):
 *  - dequantization: blocks built here from chosen scales, mins and quants
 *    (every nibble value in both halves, every 5th bit, every 6-bit
 *    sub-block scale; the largest half, subnormal halves, negative and
 *    zero scales) packed by the layout of quants.h, every output compared
 *    with the value computed here in double (exact: each product has at
 *    most 24 significant bits; the min's addition rounds once to float);
 *  - quantization: round trips of gaussian and uniform data within an
 *    error bound per type set from measurement below ggml's reference
 *    quantizers' error on such data; each weight at its nearest level
 *    under the block's stored scale; no block worse than ggml's amax rule
 *    (written again here for the four legacy types); zero, constant,
 *    huge, tiny and mixed-magnitude blocks, with finite output for finite
 *    input; NaN and inf touch only their own block.
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

/* ggml's kvalues_iq4nl (ggml-quants.c), written again. */
static const int kv[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                           1,    13,   25,  38,  53,  69,  89,  113};

/* A half's value, decoded here independently of convert.c. */
static double half_value(uint16_t h) {
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    assert_true(e != 31);
    return (h & 0x8000) ? -v : v;
}

/* Scales covering the extremes: the largest half, the smallest and the
 * largest subnormal, negative ones, zero and ordinary values. */
static const uint16_t scales[] = {0x7bff, 0x0001, 0x03ff, 0xbc00, 0x8001,
                                  0x0000, 0x3c00, 0x2e66, 0xfbff, 0x1234,
                                  0x8400, 0x5a3c};
#define NSCALES (sizeof scales / sizeof scales[0])

static void put_le32(uint8_t *b, uint32_t v) {
    for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> (8 * i));
}

/* Block i's quants (nbits wide): every value in both halves across the
 * blocks, and random ones. */
static void make_quants(int *q, int nbits, size_t i, uint64_t *rng) {
    int n = 1 << nbits;
    for (int j = 0; j < 32; j++) {
        if (i % 3 == 2) q[j] = (int)fx_test_rng_below(rng, (size_t)n);
        else q[j] = (int)((j + 7 * i) % (size_t)n);
    }
}

static void pack_nibbles(uint8_t *qs, const int *q) {
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)((q[j] & 15) | (q[j + 16] & 15) << 4);
}

static uint32_t high_bits(const int *q) {
    uint32_t qh = 0;
    for (int j = 0; j < 32; j++) qh |= (uint32_t)(q[j] >> 4 & 1) << j;
    return qh;
}

static void check_value(float got, double want) {
    /* want is exact, or for the types with a min exact before the one
     * float rounding that the library also does. */
    float w = (float)want;
    if (memcmp(&got, &w, sizeof w) != 0) {
        print_error("got %a want %a\n", (double)got, (double)w);
        fail();
    }
}

#define NB 96 /* blocks per dequantization test: every (d, m) pairing */

static void test_dequant_q4_0_q5_0(void **state) {
    (void)state;
    uint64_t rng = 11;
    fx_block_q4_0 b4[NB];
    fx_block_q5_0 b5[NB];
    int q4[NB][32], q5[NB][32];
    for (size_t i = 0; i < NB; i++) {
        uint16_t d = scales[i % NSCALES];
        make_quants(q4[i], 4, i, &rng);
        make_quants(q5[i], 5, i, &rng);
        b4[i].d = b5[i].d = d;
        pack_nibbles(b4[i].qs, q4[i]);
        pack_nibbles(b5[i].qs, q5[i]);
        put_le32(b5[i].qh, high_bits(q5[i]));
    }
    /* Fixed 5th-bit patterns too: none, all, alternating. */
    for (int j = 0; j < 32; j++) {
        q5[0][j] = j % 16;
        q5[1][j] = 16 + j % 16;
        q5[2][j] = (j % 2) * 16 + (j * 5) % 16;
    }
    for (int i = 0; i < 3; i++) {
        pack_nibbles(b5[i].qs, q5[i]);
        put_le32(b5[i].qh, high_bits(q5[i]));
    }
    float out[NB * 32];
    fx_dequant_q4_0(out, b4, NB * 32);
    for (size_t i = 0; i < NB; i++)
        for (int j = 0; j < 32; j++)
            check_value(out[i * 32 + j], (q4[i][j] - 8) * half_value(b4[i].d));
    fx_dequant_q5_0(out, b5, NB * 32);
    for (size_t i = 0; i < NB; i++)
        for (int j = 0; j < 32; j++)
            check_value(out[i * 32 + j], (q5[i][j] - 16) * half_value(b5[i].d));
}

static void test_dequant_q4_1_q5_1(void **state) {
    (void)state;
    uint64_t rng = 12;
    fx_block_q4_1 b4[NB];
    fx_block_q5_1 b5[NB];
    int q4[NB][32], q5[NB][32];
    for (size_t i = 0; i < NB; i++) {
        uint16_t d = scales[i % NSCALES], m = scales[(i / NSCALES + 3 * i) % NSCALES];
        make_quants(q4[i], 4, i, &rng);
        make_quants(q5[i], 5, i, &rng);
        b4[i].d = b5[i].d = d;
        b4[i].m = b5[i].m = m;
        pack_nibbles(b4[i].qs, q4[i]);
        pack_nibbles(b5[i].qs, q5[i]);
        put_le32(b5[i].qh, high_bits(q5[i]));
    }
    float out[NB * 32];
    fx_dequant_q4_1(out, b4, NB * 32);
    for (size_t i = 0; i < NB; i++)
        for (int j = 0; j < 32; j++)
            check_value(out[i * 32 + j],
                        q4[i][j] * half_value(b4[i].d) + half_value(b4[i].m));
    fx_dequant_q5_1(out, b5, NB * 32);
    for (size_t i = 0; i < NB; i++)
        for (int j = 0; j < 32; j++)
            check_value(out[i * 32 + j],
                        q5[i][j] * half_value(b5[i].d) + half_value(b5[i].m));
}

static void test_dequant_iq4(void **state) {
    (void)state;
    for (int i = 0; i < 16; i++) assert_int_equal(fx_iq4nl_values[i], kv[i]);
    uint64_t rng = 13;
    fx_block_iq4_nl bn[NB];
    int qn[NB][32];
    for (size_t i = 0; i < NB; i++) {
        bn[i].d = scales[i % NSCALES];
        make_quants(qn[i], 4, i, &rng);
        pack_nibbles(bn[i].qs, qn[i]);
    }
    float out[NB * 32];
    fx_dequant_iq4_nl(out, bn, NB * 32);
    for (size_t i = 0; i < NB; i++)
        for (int j = 0; j < 32; j++)
            check_value(out[i * 32 + j], kv[qn[i][j]] * half_value(bn[i].d));

    /* IQ4_XS: every 6-bit sub-block scale (64 over 8 super-blocks). */
    enum { NX = 24 };
    fx_block_iq4_xs bx[NX];
    int qx[NX][256], ls[NX][8];
    for (size_t i = 0; i < NX; i++) {
        bx[i].d = scales[i % NSCALES];
        bx[i].scales_h = 0;
        memset(bx[i].scales_l, 0, sizeof bx[i].scales_l);
        for (int s = 0; s < 8; s++) {
            ls[i][s] = i < 8 ? (int)(8 * i) + s : (int)fx_test_rng_below(&rng, 64);
            bx[i].scales_l[s / 2] |= (uint8_t)((ls[i][s] & 15) << (4 * (s % 2)));
            bx[i].scales_h |= (uint16_t)((ls[i][s] >> 4) << (2 * s));
            make_quants(qx[i] + 32 * s, 4, i + (size_t)s, &rng);
            pack_nibbles(bx[i].qs + 16 * s, qx[i] + 32 * s);
        }
    }
    float outx[NX * 256];
    fx_dequant_iq4_xs(outx, bx, NX * 256);
    for (size_t i = 0; i < NX; i++)
        for (int j = 0; j < 256; j++)
            check_value(outx[i * 256 + j], half_value(bx[i].d) *
                                               (ls[i][j / 32] - 32) * kv[qx[i][j]]);
}

/* ---- quantizers ---- */

typedef struct qtype {
    const char *name;
    size_t qk, bytes;
    fx_quant_fn quant;
    fx_dequant_fn dequant;
    double gauss_bound, uniform_bound; /* RMSE / RMS */
} qtype;

/* Bounds: measured RMSE / RMS of these quantizers on this data, plus
 * about 1% (the data are the same on every run, so a search weakened by
 * less than that already fails). ggml's reference quantizers measure on
 * such data (gauss, uniform): q4_0 0.0855, 0.0651; q4_1 0.0784, 0.0607;
 * q5_0 0.0427, 0.0312; q5_1 0.0379, 0.0293; iq4_nl 0.0788 (7 tries:
 * 0.0760), 0.0677; iq4_xs 0.0767, 0.0647: all above these bounds. */
static const qtype qtypes[] = {
    {"q4_0", 32, sizeof(fx_block_q4_0), fx_quantize_q4_0, fx_dequant_q4_0, 0.0813, 0.0595},
    {"q4_1", 32, sizeof(fx_block_q4_1), fx_quantize_q4_1, fx_dequant_q4_1, 0.0692, 0.0534},
    {"q5_0", 32, sizeof(fx_block_q5_0), fx_quantize_q5_0, fx_dequant_q5_0, 0.0401, 0.0284},
    {"q5_1", 32, sizeof(fx_block_q5_1), fx_quantize_q5_1, fx_dequant_q5_1, 0.0335, 0.0259},
    {"iq4_nl", 32, sizeof(fx_block_iq4_nl), fx_quantize_iq4_nl, fx_dequant_iq4_nl, 0.0742, 0.0629},
    {"iq4_xs", 256, sizeof(fx_block_iq4_xs), fx_quantize_iq4_xs, fx_dequant_iq4_xs, 0.0745, 0.0632},
};
#define NQTYPES (sizeof qtypes / sizeof qtypes[0])

static double gauss(uint64_t *rng) {
    double u = (fx_test_rng_unit(rng) + 0x1p-54), v = fx_test_rng_unit(rng);
    return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}

/* Quantize and dequantize n values; returns the dequantized copy. */
static float *round_trip(const qtype *t, const float *x, size_t n) {
    uint8_t *q = malloc(n / t->qk * t->bytes);
    float *y = malloc(n * sizeof *y);
    assert_non_null(q);
    assert_non_null(y);
    t->quant(q, x, n);
    t->dequant(y, q, n);
    free(q);
    return y;
}

static double sq_err(const float *x, const float *y, size_t n) {
    double e = 0;
    for (size_t i = 0; i < n; i++) e += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
    return e;
}

static void test_quant_rmse(void **state) {
    (void)state;
    enum { N = 64 * 1024 };
    float *x = malloc(N * sizeof *x);
    assert_non_null(x);
    for (int dist = 0; dist < 2; dist++) {
        uint64_t rng = 100 + (uint64_t)dist;
        for (size_t i = 0; i < N; i++) {
            /* A different scale per 1024 values, as rows of a tensor. */
            double row = 0.01 * (1 + (double)(i / 1024 % 7));
            x[i] = (float)(row * (dist == 0 ? gauss(&rng) : fx_test_rng_f(&rng)));
        }
        double ss = 0;
        for (size_t i = 0; i < N; i++) ss += (double)x[i] * x[i];
        for (size_t t = 0; t < NQTYPES; t++) {
            float *y = round_trip(&qtypes[t], x, N);
            double rel = sqrt(sq_err(x, y, N) / ss);
            double bound = dist == 0 ? qtypes[t].gauss_bound : qtypes[t].uniform_bound;
            print_message("%-6s %-7s rmse/rms %.5f (bound %.4f)\n", qtypes[t].name,
                          dist == 0 ? "gauss" : "uniform", rel, bound);
            assert_true(rel < bound);
            free(y);
        }
    }
    free(x);
}

/* The value of level l of a 32-element block type under its stored
 * scales, in the dequantizer's arithmetic. */
static double level_value(size_t t, const uint8_t *blk, int l) {
    switch (t) {
    case 0: return (l - 8) * half_value(((const fx_block_q4_0 *)blk)->d);
    case 1: {
        const fx_block_q4_1 *b = (const void *)blk;
        return (float)(l * half_value(b->d) + half_value(b->m));
    }
    case 2: return (l - 16) * half_value(((const fx_block_q5_0 *)blk)->d);
    case 3: {
        const fx_block_q5_1 *b = (const void *)blk;
        return (float)(l * half_value(b->d) + half_value(b->m));
    }
    default: return kv[l] * half_value(((const fx_block_iq4_nl *)blk)->d);
    }
}

/* Each weight at its nearest level: no other level of the stored scale
 * is strictly closer. */
static void test_quant_nearest(void **state) {
    (void)state;
    enum { N = 32 * 512 };
    static float x[N], y[N];
    uint64_t rng = 7;
    for (size_t i = 0; i < N; i++) x[i] = (float)gauss(&rng);
    uint8_t *q = malloc(N / 32 * sizeof(fx_block_q5_1));
    assert_non_null(q);
    for (size_t t = 0; t < 5; t++) {
        const qtype *ty = &qtypes[t];
        ty->quant(q, x, N);
        ty->dequant(y, q, N);
        int nl = t == 2 || t == 3 ? 32 : 16;
        for (size_t i = 0; i < N; i++) {
            const uint8_t *blk = q + i / 32 * ty->bytes;
            double e = fabs((double)x[i] - y[i]);
            for (int l = 0; l < nl; l++)
                assert_true(e <= fabs((double)x[i] - level_value(t, blk, l)));
        }
    }
    free(q);
}

/* ggml's amax rules (quantize_row_q*_ref), written again: the library
 * must do no worse on any block. */
static double ggml_rule_err(size_t t, const float *x) {
    double err = 0;
    if (t == 0 || t == 2) {
        float amax = 0, max = 0;
        for (int j = 0; j < 32; j++)
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        int half = t == 0 ? 8 : 16;
        float d = max / (float)-half, id = d != 0 ? 1.0f / d : 0.0f;
        double dh = half_value(fx_f32_to_f16(d));
        for (int j = 0; j < 32; j++) {
            int q = (int)(x[j] * id + ((float)half + 0.5f));
            if (q > 2 * half - 1) q = 2 * half - 1;
            double e = x[j] - (q - half) * dh;
            err += e * e;
        }
    } else {
        float min = x[0], max = x[0];
        for (int j = 1; j < 32; j++) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        int nq = t == 1 ? 15 : 31;
        float d = (max - min) / (float)nq, id = d != 0 ? 1.0f / d : 0.0f;
        double dh = half_value(fx_f32_to_f16(d)), mh = half_value(fx_f32_to_f16(min));
        for (int j = 0; j < 32; j++) {
            int q = (int)((x[j] - min) * id + 0.5f);
            if (q > nq) q = nq;
            double e = (double)x[j] - (float)(q * dh + mh);
            err += e * e;
        }
    }
    return err;
}

static void test_quant_beats_ggml_rule(void **state) {
    (void)state;
    enum { N = 32 * 1024 };
    static float x[N], y[N];
    uint64_t rng = 8;
    for (size_t i = 0; i < N; i++) {
        double v = i % 3 == 0 ? gauss(&rng) : fx_test_rng_f(&rng);
        if (fx_test_rng_below(&rng, 50) == 0) v *= 30; /* outliers */
        x[i] = (float)(v * (1 + (double)(i / 32 % 5)));
    }
    for (size_t t = 0; t < 4; t++) {
        float *r = round_trip(&qtypes[t], x, N);
        memcpy(y, r, sizeof y);
        free(r);
        for (size_t b = 0; b < N / 32; b++) {
            double e = sq_err(x + 32 * b, y + 32 * b, 32), g = ggml_rule_err(t, x + 32 * b);
            if (!(e <= g)) {
                print_error("%s block %zu: %.17g > ggml's %.17g\n", qtypes[t].name, b, e, g);
                fail();
            }
        }
    }
}

static void check_finite(const float *y, size_t n) {
    for (size_t i = 0; i < n; i++) assert_true(isfinite(y[i]));
}

/* Zero, constant, huge, tiny and mixed blocks, one 256-element tensor
 * each. */
static void test_quant_special(void **state) {
    (void)state;
    enum { N = 256 };
    float x[N];
    for (size_t t = 0; t < NQTYPES; t++) {
        const qtype *ty = &qtypes[t];
        /* Zeros come back as zeros. */
        memset(x, 0, sizeof x);
        float *y = round_trip(ty, x, N);
        for (size_t i = 0; i < N; i++) assert_true(y[i] == 0);
        free(y);
        /* A constant comes back within a half's rounding. */
        static const float consts[] = {1.0f, -3.5f, 0.0123f, -1000.0f, 7.0f};
        for (size_t c = 0; c < sizeof consts / sizeof *consts; c++) {
            for (size_t i = 0; i < N; i++) x[i] = consts[c];
            y = round_trip(ty, x, N);
            for (size_t i = 0; i < N; i++)
                assert_true(fabsf(y[i] - consts[c]) <= fabsf(consts[c]) * 0x1p-10f);
            free(y);
        }
        /* Huge, tiny and mixed magnitudes: finite output; the huge ones
         * saturate at the largest half scale with the right sign. */
        uint64_t rng = 9 + t;
        for (int kind = 0; kind < 4; kind++) {
            for (size_t i = 0; i < N; i++) {
                double g = gauss(&rng);
                switch (kind) {
                case 0: x[i] = (float)(g * 1e37); break;
                case 1: x[i] = (i % 2 ? 3.4e38f : -3.4e38f); break;
                case 2: x[i] = (float)(g * 1e-30); break;
                default: x[i] = (float)(g * (i % 7 == 0 ? 1e30 : 1e-30)); break;
                }
            }
            y = round_trip(ty, x, N);
            check_finite(y, N);
            if (kind == 2) {
                /* Nothing representable: no block worse than zeros. */
                assert_true(sq_err(x, y, N) <= sq_err(x, (float[N]){0}, N));
            }
            if (kind == 1) {
                for (size_t i = 0; i < N; i++) assert_true((y[i] > 0) == (x[i] > 0));
            }
            free(y);
        }
    }
}

/* NaN and inf in a block: no undefined behaviour (UBSan checks float to
 * int conversions), and the other blocks come out as they do alone. */
static void test_quant_nonfinite(void **state) {
    (void)state;
    enum { N = 512 };
    float x[N];
    uint64_t rng = 21;
    for (size_t i = 0; i < N; i++) x[i] = (float)gauss(&rng);
    for (size_t t = 0; t < NQTYPES; t++) {
        const qtype *ty = &qtypes[t];
        float *clean = round_trip(ty, x, N);
        float bad[N];
        memcpy(bad, x, sizeof bad);
        bad[3] = NAN;                     /* first block (and super-block) */
        bad[N / 2 + 5] = INFINITY;        /* a later one */
        bad[N / 2 + 6] = -INFINITY;
        float *y = round_trip(ty, bad, N);
        size_t bq = ty->qk;
        for (size_t i = 0; i < N; i++) {
            size_t blk = i / bq;
            if (blk == 3 / bq || blk == (N / 2 + 5) / bq) continue;
            assert_memory_equal(&y[i], &clean[i], sizeof(float));
        }
        free(y);
        free(clean);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dequant_q4_0_q5_0),
        cmocka_unit_test(test_dequant_q4_1_q5_1),
        cmocka_unit_test(test_dequant_iq4),
        cmocka_unit_test(test_quant_rmse),
        cmocka_unit_test(test_quant_nearest),
        cmocka_unit_test(test_quant_beats_ggml_rule),
        cmocka_unit_test(test_quant_special),
        cmocka_unit_test(test_quant_nonfinite),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
