/*
 * The inner loops of attention (lib/model/attention.h) against their
 * portable form, bit for bit: scores and weighted sums for every ISA the
 * CPU has, head sizes from 1 to 160 (multiples of 16 take the AVX-512
 * weighted sum, others its AVX2 fallback; tails of 1..7 elements), 1 to 6
 * heads per call (the AVX-512 sums take up to 4 heads of 64 or 2 of 128
 * at once), key counts that leave every remainder, and key strides wider
 * than a head. Values include signed zeros, huge and tiny magnitudes so a
 * changed order of operations shows in the bits.
 *
 * The F16 forms (keys and values as halves, an F16 KV cache) over the same
 * shapes: on every ISA, the bits of the F32 form of that ISA on the widened
 * rows, and of the portable F16 form. The halves include subnormals, +-0
 * and values up to 65504 beside ordinary ones, and no NaN.
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
#include "model/attention.h"
#include "test_rng.h"

/* Mostly uniform in [-1, 1), sometimes scaled far up or down, sometimes
 * -0: sums whose bits depend on the order they are added in. */
static float rng_val(uint64_t *s) {
    const uint64_t r = fx_test_rng_next(s);
    float v = (float)((double)(r >> 11) * 0x1p-53 * 2.0 - 1.0);
    switch (r & 15) {
    case 0: return v * 0x1p20f;
    case 1: return v * 0x1p-20f;
    case 2: return -0.0f;
    default: return v;
    }
}

static void fill(float *a, size_t n, uint64_t seed) {
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n; i++) a[i] = rng_val(&s);
}

/* Mostly ordinary halves of either sign (1/8 to 4), sometimes subnormal,
 * +-0, tiny normal or large (up to 65504, the largest finite half);
 * never inf or NaN. */
static uint16_t rng_half(uint64_t *s) {
    const uint64_t r = fx_test_rng_next(s);
    const uint16_t sign = (uint16_t)((r >> 8) & 1) << 15;
    const uint16_t mant = (uint16_t)((r >> 16) & 0x3ff);
    switch (r & 15) {
    case 0: return sign | (mant ? mant : 1); /* subnormal */
    case 1: return sign;
    case 2: return sign | 0x7bff; /* 65504 */
    case 3: return sign | 30u << 10 | mant; /* 32768 to 65504 */
    case 4: return sign | 1u << 10 | mant; /* the smallest normals */
    default: return sign | (uint16_t)(12 + (r >> 32) % 5) << 10 | mant;
    }
}

/* Halves, and their widened values for the F32 forms. */
static void fill_half(uint16_t *h, float *f, size_t n, uint64_t seed) {
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 7;
    for (size_t i = 0; i < n; i++) {
        h[i] = rng_half(&s);
        f[i] = fx_f16_to_f32(h[i]);
    }
}

static bool have_isa(fx_isa isa) {
    fx_alloc alloc;
    fx_alloc_init(&alloc, NULL);
    fx_kernels_params kp;
    fx_kernels_params_init(&kp);
    kp.isa = isa;
    fx_kernels *kc = NULL;
    if (fx_kernels_create(&alloc, &kp, &kc, NULL) != FX_OK) return false;
    fx_kernels_free(kc);
    return true;
}

static void assert_same_bits(const float *got, const float *want, size_t n,
                             const char *what, uint32_t hd, uint32_t nh,
                             uint32_t keys, int isa) {
    if (memcmp(got, want, n * sizeof *got) == 0) return;
    for (size_t i = 0; i < n; i++)
        if (memcmp(got + i, want + i, sizeof *got) != 0)
            fail_msg("%s isa %d hd %u heads %u keys %u: element %zu %a vs %a",
                     what, isa, hd, nh, keys, i, (double)got[i],
                     (double)want[i]);
}

static const uint32_t hds[] = {1, 7, 8, 15, 16, 24, 32, 36, 48, 64, 80, 96,
                               112, 128, 144, 160};
static const uint32_t keys[] = {1, 2, 3, 7, 8, 9, 17, 40};
static const fx_isa isas[] = {FX_ISA_AVX2, FX_ISA_AVX512};

static void test_forms_agree(void **state) {
    (void)state;
    fx_attn_kernels ref;
    fx_attn_kernels_init(&ref, FX_ISA_PORTABLE);
    size_t checked = 0;
    for (size_t ii = 0; ii < sizeof isas / sizeof *isas; ii++) {
        if (!have_isa(isas[ii])) continue;
        fx_attn_kernels ak;
        fx_attn_kernels_init(&ak, isas[ii]);
        for (size_t a = 0; a < sizeof hds / sizeof *hds; a++)
            for (uint32_t nh = 1; nh <= 6; nh++)
                for (size_t b = 0; b < sizeof keys / sizeof *keys; b++) {
                    const uint32_t hd = hds[a], n = keys[b];
                    const size_t stride = hd + (b % 2 ? 5 : 0);
                    const size_t p_ld = n + 3;
                    float *q = malloc(nh * hd * sizeof *q);
                    float *kv = malloc(n * stride * sizeof *kv);
                    float *p = malloc(nh * p_ld * sizeof *p);
                    float *s1 = malloc(nh * p_ld * sizeof *s1);
                    float *s2 = malloc(nh * p_ld * sizeof *s2);
                    float *o1 = malloc(nh * hd * sizeof *o1);
                    float *o2 = malloc(nh * hd * sizeof *o2);
                    assert_true(q && kv && p && s1 && s2 && o1 && o2);
                    fill(q, nh * hd, hd * 7 + nh);
                    fill(kv, n * stride, hd + n * 131);
                    fill(p, nh * p_ld, n + nh * 17);
                    fill(o1, nh * hd, 5 + hd);
                    memcpy(o2, o1, nh * hd * sizeof *o1);
                    memset(s1, 0, nh * p_ld * sizeof *s1);
                    memset(s2, 0, nh * p_ld * sizeof *s2);
                    const float scale = 0.125f;
                    ref.scores(s1, p_ld, q, nh, kv, stride, n, hd, scale);
                    ak.scores(s2, p_ld, q, nh, kv, stride, n, hd, scale);
                    assert_same_bits(s2, s1, nh * p_ld, "scores", hd, nh, n,
                                     (int)isas[ii]);
                    ref.weighted_sum(o1, p, p_ld, nh, kv, stride, n, hd);
                    ak.weighted_sum(o2, p, p_ld, nh, kv, stride, n, hd);
                    assert_same_bits(o2, o1, nh * hd, "weighted_sum", hd, nh,
                                     n, (int)isas[ii]);
                    checked++;
                    free(q);
                    free(kv);
                    free(p);
                    free(s1);
                    free(s2);
                    free(o1);
                    free(o2);
                }
    }
    print_message("%zu shapes checked\n", checked);
}

/* Over the sweep of test_forms_agree, isa's F16 forms against, with
 * vs_portable, the portable F16 forms on the same halves, and otherwise
 * isa's own F32 forms on the widened rows. */
static size_t f16_sweep(fx_isa isa, bool vs_portable) {
    fx_attn_kernels ak, ref;
    fx_attn_kernels_init(&ak, isa);
    fx_attn_kernels_init(&ref, FX_ISA_PORTABLE);
    size_t checked = 0;
    for (size_t a = 0; a < sizeof hds / sizeof *hds; a++)
        for (uint32_t nh = 1; nh <= 6; nh++)
            for (size_t b = 0; b < sizeof keys / sizeof *keys; b++) {
                const uint32_t hd = hds[a], n = keys[b];
                const size_t stride = hd + (b % 2 ? 5 : 0);
                const size_t p_ld = n + 3;
                float *q = malloc(nh * hd * sizeof *q);
                uint16_t *kvh = malloc(n * stride * sizeof *kvh);
                float *kvf = malloc(n * stride * sizeof *kvf);
                float *p = malloc(nh * p_ld * sizeof *p);
                float *s1 = calloc(nh * p_ld, sizeof *s1);
                float *s2 = calloc(nh * p_ld, sizeof *s2);
                float *o1 = malloc(nh * hd * sizeof *o1);
                float *o2 = malloc(nh * hd * sizeof *o2);
                assert_true(q && kvh && kvf && p && s1 && s2 && o1 && o2);
                fill(q, nh * hd, hd * 11 + nh);
                fill_half(kvh, kvf, n * stride, hd + n * 137 + nh);
                fill(p, nh * p_ld, n + nh * 19);
                fill(o1, nh * hd, 9 + hd);
                memcpy(o2, o1, nh * hd * sizeof *o1);
                const float scale = 0.125f;
                if (vs_portable) {
                    ref.scores_f16(s1, p_ld, q, nh, kvh, stride, n, hd, scale);
                    ref.weighted_sum_f16(o1, p, p_ld, nh, kvh, stride, n, hd);
                } else {
                    ak.scores(s1, p_ld, q, nh, kvf, stride, n, hd, scale);
                    ak.weighted_sum(o1, p, p_ld, nh, kvf, stride, n, hd);
                }
                ak.scores_f16(s2, p_ld, q, nh, kvh, stride, n, hd, scale);
                ak.weighted_sum_f16(o2, p, p_ld, nh, kvh, stride, n, hd);
                assert_same_bits(s2, s1, nh * p_ld, "scores_f16", hd, nh, n,
                                 (int)isa);
                assert_same_bits(o2, o1, nh * hd, "weighted_sum_f16", hd, nh,
                                 n, (int)isa);
                checked++;
                free(q);
                free(kvh);
                free(kvf);
                free(p);
                free(s1);
                free(s2);
                free(o1);
                free(o2);
            }
    return checked;
}

static void test_f16_forms_match_f32(void **state) {
    (void)state;
    size_t checked = f16_sweep(FX_ISA_PORTABLE, false);
    for (size_t ii = 0; ii < sizeof isas / sizeof *isas; ii++)
        if (have_isa(isas[ii])) checked += f16_sweep(isas[ii], false);
    print_message("%zu shapes checked\n", checked);
}

static void test_f16_forms_agree(void **state) {
    (void)state;
    size_t checked = 0;
    for (size_t ii = 0; ii < sizeof isas / sizeof *isas; ii++)
        if (have_isa(isas[ii])) checked += f16_sweep(isas[ii], true);
    print_message("%zu shapes checked\n", checked);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forms_agree),
        cmocka_unit_test(test_f16_forms_match_f32),
        cmocka_unit_test(test_f16_forms_agree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
