/*
 * The seeded random stream (golden values from an independent
 * implementation of splitmix64-seeded xoshiro256**) and the samplers.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "sample/sample.h"

static fx_candidate scratch[16];

static void test_rng_golden(void **state) {
    (void)state;
    fx_rng rng;
    fx_rng_seed(&rng, 0);
    assert_true(fx_rng_next(&rng) == 0x99ec5f36cb75f2b4ull);
    assert_true(fx_rng_next(&rng) == 0xbf6e1f784956452aull);
    assert_true(fx_rng_next(&rng) == 0x1a5f849d4933e6e0ull);
    fx_rng_seed(&rng, 42);
    assert_true(fx_rng_next(&rng) == 0x15780b2e0c2ec716ull);
    assert_true(fx_rng_next(&rng) == 0x6104d9866d113a7eull);
    assert_true(fx_rng_next(&rng) == 0xae17533239e499a1ull);
    for (int i = 0; i < 1000; i++) {
        double u = fx_rng_uniform(&rng);
        assert_true(u >= 0.0 && u < 1.0);
    }
}

/* fx_argmax's contract as the plain scan it replaced: move only on a
 * strictly larger value. */
static int32_t argmax_scan(const float *x, uint32_t n) {
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return (int32_t)best;
}

/* Every length up to 70 and a vocabulary's, with the maximum anywhere
 * (the vector passes and the scalar tails), repeated maxima, -0 against
 * +0, infinities and NaN, NaN first. */
static void test_argmax_matches_scan(void **state) {
    (void)state;
    static float x[32003];
    uint64_t s = 99;
    const float special[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0f, -0.0f};
    for (int rep = 0; rep < 400; rep++) {
        const uint32_t n = rep < 71 ? (uint32_t)rep : 32000u + (uint32_t)(rep % 4);
        for (uint32_t i = 0; i < n; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            const uint32_t r = (uint32_t)(s >> 33);
            /* few distinct values, so maxima repeat */
            x[i] = (float)(int)(r % 7) - 3.0f;
            if (r % 11 == 0) x[i] = special[(r / 11) % 6];
        }
        if (rep % 5 == 0 && n > 0) x[0] = NAN;
        if (rep % 7 == 0 && n > 3) x[n - 1] = 1e30f; /* max in the tail */
        assert_int_equal(fx_argmax(x, n), argmax_scan(x, n));
    }
    const float z[3] = {-0.0f, 0.0f, -1.0f};
    assert_int_equal(fx_argmax(z, 3), 0);
    assert_int_equal(fx_argmax(z, 0), 0);
}

/* by_logit's order, for the reference sort. */
static int ref_by_logit(const void *a, const void *b) {
    const fx_candidate *x = a, *y = b;
    int xn = x->logit != x->logit, yn = y->logit != y->logit;
    if (xn != yn) return xn - yn;
    if (!xn && x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* fx_sort_by_logit (a radix sort in the candidates' own memory) gives
 * exactly qsort's permutation: sizes on both sides of its qsort cutoff,
 * ids in any order and up to 2^24 (an odd number of passes, which ends in
 * the other half of the buffer), repeated logits, -0 and +0, infinities,
 * NaN of either sign. */
static void test_sort_by_logit(void **state) {
    (void)state;
    static fx_candidate a[40000], b[40000];
    uint64_t s = 7;
    const float special[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0f, -0.0f};
    const size_t sizes[] = {0, 1, 255, 256, 257, 1000, 32000, 40000};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++)
        for (int big_ids = 0; big_ids < 2; big_ids++) {
            const size_t n = sizes[k];
            for (size_t i = 0; i < n; i++) {
                s = s * 6364136223846793005ull + 1442695040888963407ull;
                const uint32_t r = (uint32_t)(s >> 33);
                a[i].id = big_ids ? (int32_t)(r & 0xffffffu) : (int32_t)i;
                a[i].logit = (float)(int)(r % 1000) * 0.25f - 100.0f;
                if (r % 13 == 0) a[i].logit = special[(r / 13) % 6];
                a[i].p = 0;
            }
            /* any order in: shuffled, or (every third size) the ids
             * ascending as a vocabulary comes, where the id passes are
             * skipped */
            for (size_t i = n; i > 1 && !(k % 3 == 0 && !big_ids); i--) {
                s = s * 6364136223846793005ull + 1442695040888963407ull;
                const size_t j = (size_t)(s >> 33) % i;
                fx_candidate t = a[i - 1];
                a[i - 1] = a[j];
                a[j] = t;
            }
            memcpy(b, a, n * sizeof *a);
            qsort(b, n, sizeof *b, ref_by_logit);
            fx_sort_by_logit(a, n);
            for (size_t i = 0; i < n; i++) {
                assert_int_equal(a[i].id, b[i].id);
                assert_memory_equal(&a[i].logit, &b[i].logit, sizeof(float));
            }
        }
}

static void test_greedy(void **state) {
    (void)state;
    enum { N_LOGITS = 6 };
    float logits[6] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f, 0.0f};
    assert_int_equal(fx_argmax(logits, 6), 1); /* tie: lowest id */
    fx_sampling cfg;
    fx_sampling_default(&cfg);
    fx_sampler s;
    fx_error err;
    assert_int_equal(fx_sampler_init(&s, &cfg, &err), FX_OK);
    assert_int_equal(fx_sampler_sample(&s, logits, N_LOGITS, scratch), 1);
    cfg.temperature = 1.0f;
    cfg.top_k = 1; /* top-1 is greedy too, ties by id */
    assert_int_equal(fx_sampler_init(&s, &cfg, &err), FX_OK);
    for (int i = 0; i < 50; i++) assert_int_equal(fx_sampler_sample(&s, logits, N_LOGITS, scratch), 1);
}

/* Draw frequencies follow the tempered softmax; the same seed repeats. */
static void test_distribution_and_seed(void **state) {
    (void)state;
    float logits[4] = {1.0f, 0.0f, 2.0f, -1.0f};
    fx_sampling cfg;
    fx_sampling_default(&cfg);
    cfg.temperature = 0.7f;
    cfg.seed = 1234;
    fx_sampler a, b;
    fx_error err;
    assert_int_equal(fx_sampler_init(&a, &cfg, &err), FX_OK);
    assert_int_equal(fx_sampler_init(&b, &cfg, &err), FX_OK);
    enum { DRAWS = 40000 };
    int counts[4] = {0};
    for (int i = 0; i < DRAWS; i++) {
        int32_t t = fx_sampler_sample(&a, logits, 4, scratch);
        assert_int_equal(t, fx_sampler_sample(&b, logits, 4, scratch));
        counts[t]++;
    }
    double z = 0, p[4];
    for (int i = 0; i < 4; i++) z += exp(logits[i] / 0.7);
    for (int i = 0; i < 4; i++) {
        p[i] = exp(logits[i] / 0.7) / z;
        double sd = sqrt(p[i] * (1 - p[i]) / DRAWS);
        assert_true(fabs((double)counts[i] / DRAWS - p[i]) < 5 * sd + 1e-4);
    }
}

static void test_top_p_and_min_p(void **state) {
    (void)state;
    enum { N_LOGITS = 4 };
    /* softmax of these at T=1: ~0.64, 0.24, 0.09, 0.03 */
    float logits[4] = {3.0f, 2.0f, 1.0f, 0.0f};
    fx_sampling cfg;
    fx_sampling_default(&cfg);
    cfg.temperature = 1.0f;
    cfg.top_p = 0.8f; /* keeps ids 0 and 1 */
    fx_sampler s;
    fx_error err;
    assert_int_equal(fx_sampler_init(&s, &cfg, &err), FX_OK);
    int seen[4] = {0};
    for (int i = 0; i < 5000; i++) seen[fx_sampler_sample(&s, logits, N_LOGITS, scratch)]++;
    assert_true(seen[0] > 0 && seen[1] > 0);
    assert_int_equal(seen[2] + seen[3], 0);

    cfg.top_p = 1.0f;
    cfg.min_p = 0.2f; /* p >= 0.2 * 0.64 keeps ids 0 and 1 */
    assert_int_equal(fx_sampler_init(&s, &cfg, &err), FX_OK);
    memset(seen, 0, sizeof seen);
    for (int i = 0; i < 5000; i++) seen[fx_sampler_sample(&s, logits, N_LOGITS, scratch)]++;
    assert_true(seen[0] > 0 && seen[1] > 0);
    assert_int_equal(seen[2] + seen[3], 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rng_golden),
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_argmax_matches_scan),
        cmocka_unit_test(test_sort_by_logit),
        cmocka_unit_test(test_distribution_and_seed),
        cmocka_unit_test(test_top_p_and_min_p),
    };
    return cmocka_run_group_tests_name("sample", tests, NULL, NULL);
}
