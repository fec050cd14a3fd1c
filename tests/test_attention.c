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

/* One shape of the sweep, with its buffers filled: q and p random, s1
 * and s2 zeroed, o1 random and o2 a copy of it. */
typedef struct shape {
    uint32_t hd, nh, n;
    size_t stride, p_ld;
    float *q, *p, *s1, *s2, *o1, *o2;
} shape;

/* Every head size, head count and key count, strides of a head and wider:
 * fn checks one shape. Returns the shapes checked. */
static size_t for_each_shape(void (*fn)(const shape *sh, void *ctx),
                             void *ctx) {
    size_t checked = 0;
    for (size_t a = 0; a < sizeof hds / sizeof *hds; a++)
        for (uint32_t nh = 1; nh <= 6; nh++)
            for (size_t b = 0; b < sizeof keys / sizeof *keys; b++) {
                shape sh = {.hd = hds[a], .nh = nh, .n = keys[b]};
                const uint32_t hd = sh.hd, n = sh.n;
                sh.stride = hd + (b % 2 ? 5 : 0);
                sh.p_ld = n + 3;
                sh.q = malloc(nh * hd * sizeof *sh.q);
                sh.p = malloc(nh * sh.p_ld * sizeof *sh.p);
                sh.s1 = calloc(nh * sh.p_ld, sizeof *sh.s1);
                sh.s2 = calloc(nh * sh.p_ld, sizeof *sh.s2);
                sh.o1 = malloc(nh * hd * sizeof *sh.o1);
                sh.o2 = malloc(nh * hd * sizeof *sh.o2);
                assert_true(sh.q && sh.p && sh.s1 && sh.s2 && sh.o1 && sh.o2);
                fill(sh.q, nh * hd, hd * 7 + nh);
                fill(sh.p, nh * sh.p_ld, n + nh * 17);
                fill(sh.o1, nh * hd, 5 + hd);
                memcpy(sh.o2, sh.o1, nh * hd * sizeof *sh.o1);
                fn(&sh, ctx);
                checked++;
                free(sh.q);
                free(sh.p);
                free(sh.s1);
                free(sh.s2);
                free(sh.o1);
                free(sh.o2);
            }
    return checked;
}

static const float scale = 0.125f;

/* An ISA's F32 forms against the portable ones. */
static void f32_shape(const shape *sh, void *ctx) {
    const fx_isa isa = *(const fx_isa *)ctx;
    const uint32_t hd = sh->hd, nh = sh->nh, n = sh->n;
    fx_attn_kernels ak, ref;
    fx_attn_kernels_init(&ak, isa);
    fx_attn_kernels_init(&ref, FX_ISA_PORTABLE);
    float *kv = malloc(n * sh->stride * sizeof *kv);
    assert_non_null(kv);
    fill(kv, n * sh->stride, hd + n * 131);
    ref.scores(sh->s1, sh->p_ld, sh->q, nh, kv, sh->stride, n, hd, scale);
    ak.scores(sh->s2, sh->p_ld, sh->q, nh, kv, sh->stride, n, hd, scale);
    assert_same_bits(sh->s2, sh->s1, nh * sh->p_ld, "scores", hd, nh, n,
                     (int)isa);
    ref.weighted_sum(sh->o1, sh->p, sh->p_ld, nh, kv, sh->stride, n, hd);
    ak.weighted_sum(sh->o2, sh->p, sh->p_ld, nh, kv, sh->stride, n, hd);
    assert_same_bits(sh->o2, sh->o1, nh * hd, "weighted_sum", hd, nh, n,
                     (int)isa);
    free(kv);
}

static void test_forms_agree(void **state) {
    (void)state;
    size_t checked = 0;
    for (size_t ii = 0; ii < sizeof isas / sizeof *isas; ii++)
        if (have_isa(isas[ii]))
            checked += for_each_shape(f32_shape, (void *)&isas[ii]);
    print_message("%zu shapes checked\n", checked);
}

typedef struct f16_check {
    fx_isa isa;
    bool vs_portable;
} f16_check;

/* isa's F16 forms against, with vs_portable, the portable F16 forms on
 * the same halves, and otherwise isa's own F32 forms on the widened
 * rows. */
static void f16_shape(const shape *sh, void *ctx) {
    const f16_check *c = ctx;
    const uint32_t hd = sh->hd, nh = sh->nh, n = sh->n;
    const size_t st = sh->stride, ld = sh->p_ld;
    fx_attn_kernels ak, ref;
    fx_attn_kernels_init(&ak, c->isa);
    fx_attn_kernels_init(&ref, FX_ISA_PORTABLE);
    uint16_t *kvh = malloc(n * st * sizeof *kvh);
    float *kvf = malloc(n * st * sizeof *kvf);
    assert_true(kvh && kvf);
    fill_half(kvh, kvf, n * st, hd + n * 137 + nh);
    if (c->vs_portable) {
        ref.scores_f16(sh->s1, ld, sh->q, nh, kvh, st, n, hd, scale);
        ref.weighted_sum_f16(sh->o1, sh->p, ld, nh, kvh, st, n, hd);
    } else {
        ak.scores(sh->s1, ld, sh->q, nh, kvf, st, n, hd, scale);
        ak.weighted_sum(sh->o1, sh->p, ld, nh, kvf, st, n, hd);
    }
    ak.scores_f16(sh->s2, ld, sh->q, nh, kvh, st, n, hd, scale);
    ak.weighted_sum_f16(sh->o2, sh->p, ld, nh, kvh, st, n, hd);
    assert_same_bits(sh->s2, sh->s1, nh * ld, "scores_f16", hd, nh, n,
                     (int)c->isa);
    assert_same_bits(sh->o2, sh->o1, nh * hd, "weighted_sum_f16", hd, nh, n,
                     (int)c->isa);
    free(kvh);
    free(kvf);
}

static size_t f16_sweep(fx_isa isa, bool vs_portable) {
    f16_check c = {isa, vs_portable};
    return for_each_shape(f16_shape, &c);
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
