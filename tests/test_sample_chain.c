/*
 * The sampler chain through fx_sampler_next (no grammar): top-k never
 * leaves the top k, top-p keeps the smallest set reaching its mass,
 * typical-p keeps the typical set, penalties and logit bias move the
 * right logits, log-probabilities are exact, and a fixed seed reproduces
 * the same stream with every sampler on.
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

enum { NV = 1000 };

static fx_alloc alloc;
static fx_sample_ctx ctx;
static fx_candidate scratch[NV];

static void random_logits(float *l, uint32_t n, uint64_t seed) {
    fx_rng r;
    fx_rng_seed(&r, seed);
    for (uint32_t i = 0; i < n; i++) l[i] = (float)(fx_rng_uniform(&r) * 10.0 - 5.0);
}

static int32_t next(fx_sampler *s, const float *l, uint32_t n, const int32_t *h,
                    size_t nh) {
    int32_t t;
    int eog;
    fx_error err;
    assert_int_equal(fx_sampler_next(s, &ctx, l, n, h, nh, scratch, &t, &eog, &err), FX_OK);
    assert_int_equal(eog, 0);
    assert_true(t >= 0 && (uint32_t)t < n);
    return t;
}

/* Rank of id among the logits (0 = best; lower id first on a tie). */
static uint32_t rank_of(const float *l, uint32_t n, int32_t id) {
    uint32_t r = 0;
    for (uint32_t i = 0; i < n; i++)
        if (l[i] > l[id] || (l[i] == l[id] && (int32_t)i < id)) r++;
    return r;
}

static void test_top_k_statistics(void **state) {
    (void)state;
    static float l[NV];
    random_logits(l, NV, 5);
    fx_sampling cfg;
    fx_sampling_default(&cfg);
    cfg.temperature = 1.5f;
    cfg.top_k = 10;
    cfg.seed = 9;
    cfg.repeat_penalty = 1.0f; /* keep the fast path honest too */
    fx_sampler s;
    fx_error err;
    assert_int_equal(fx_sampler_init(&s, &cfg, &err), FX_OK);
    int seen[10] = {0};
    for (int i = 0; i < 20000; i++) {
        uint32_t r = rank_of(l, NV, fx_sampler_sample(&s, l, NV, scratch));
        assert_true(r < 10);
        seen[r]++;
    }
    for (int k = 0; k < 10; k++) assert_true(seen[k] > 0);
    /* The same through the general path (a bias of 0 forces it). */
    fx_logit_bias zero = {0, 0.0f};
    assert_int_equal(fx_sampler_set_bias(&s, &alloc, &zero, 1, NV, &err), FX_OK);
    for (int i = 0; i < 5000; i++) assert_true(rank_of(l, NV, next(&s, l, NV, NULL, 0)) < 10);
    fx_sampler_free(&s, &alloc);
}

static void test_top_p_mass(void **state) {
    (void)state;
    static float l[NV];
    random_logits(l, NV, 6);
    /* The smallest top set whose mass reaches p, computed here in double. */
    double z = 0, mx = -1e9;
    for (int i = 0; i < NV; i++) mx = l[i] > mx ? l[i] : mx;
    for (int i = 0; i < NV; i++) z += exp(l[i] - mx);
    const double p = 0.6;
    uint32_t need = 0;
    double mass = 0;
    while (mass < p) {
        int32_t best = -1;
        for (int i = 0; i < NV; i++)
            if (rank_of(l, NV, i) == need) best = i;
        mass += exp(l[best] - mx) / z;
        need++;
    }
    fx_sampling cfg;
    fx_sampling_default(&cfg);
    cfg.temperature = 1.0f;
    cfg.top_p = (float)p;
    fx_sampler s;
    fx_error err;
    assert_int_equal(fx_sampler_init(&s, &cfg, &err), FX_OK);
    uint32_t worst = 0;
    for (int i = 0; i < 20000; i++) {
        uint32_t r = rank_of(l, NV, fx_sampler_sample(&s, l, NV, scratch));
        assert_true(r < need);
        if (r > worst) worst = r;
    }
    assert_true(worst + 1 >= need - 1); /* the set is used, not just its top */
}

static void test_typical(void **state) {
    (void)state;
    /* p = 1/2, 1/4, 1/8, 1/8: surprise closest to the entropy is id 1's. */
    float l[4] = {logf(0.5f), logf(0.25f), logf(0.125f), logf(0.125f)};
    fx_sampling cfg;
    fx_sampling_default(&cfg);
    cfg.temperature = 1.0f;
    cfg.typical_p = 0.2f;
    fx_logit_bias zero = {0, 0.0f};
    fx_sampler s;
    fx_error err;
    assert_int_equal(fx_sampler_init(&s, &cfg, &err), FX_OK);
    assert_int_equal(fx_sampler_set_bias(&s, &alloc, &zero, 1, 4, &err), FX_OK);
    for (int i = 0; i < 500; i++) assert_int_equal(next(&s, l, 4, NULL, 0), 1);
    fx_sampler_free(&s, &alloc);
    cfg.typical_p = 0.5f; /* {1, 0} */
    assert_int_equal(fx_sampler_init(&s, &cfg, &err), FX_OK);
    assert_int_equal(fx_sampler_set_bias(&s, &alloc, &zero, 1, 4, &err), FX_OK);
    int seen[4] = {0};
    for (int i = 0; i < 2000; i++) seen[next(&s, l, 4, NULL, 0)]++;
    assert_true(seen[0] > 0 && seen[1] > 0);
    assert_int_equal(seen[2] + seen[3], 0);
    fx_sampler_free(&s, &alloc);
}

static int32_t greedy(const float *l, uint32_t n, const int32_t *h, size_t nh,
                      float rep, float pres, float freq, uint32_t last_n) {
    fx_sampling cfg;
    fx_sampling_default(&cfg);
    cfg.repeat_penalty = rep;
    cfg.presence_penalty = pres;
    cfg.frequency_penalty = freq;
    cfg.penalty_last_n = last_n;
    fx_sampler s;
    fx_error err;
    assert_int_equal(fx_sampler_init(&s, &cfg, &err), FX_OK);
    int32_t t = next(&s, l, n, h, nh);
    fx_sampler_free(&s, &alloc);
    return t;
}

static void test_penalties(void **state) {
    (void)state;
    const int32_t h0[] = {0}, h000[] = {0, 0, 0}, h0111[] = {0, 1, 1, 1};
    float a[3] = {2.0f, 2.0f, 1.0f};
    assert_int_equal(greedy(a, 3, h0, 1, 1.0f, 0, 0, 64), 0);
    assert_int_equal(greedy(a, 3, h0, 1, 2.0f, 0, 0, 64), 1); /* 2 / 2 */
    float b[2] = {-1.0f, -1.5f};
    assert_int_equal(greedy(b, 2, h0, 1, 2.0f, 0, 0, 64), 1); /* -1 * 2 */
    float c[2] = {1.0f, 0.5f};
    assert_int_equal(greedy(c, 2, h0, 1, 1.0f, 1.0f, 0, 64), 1);
    assert_int_equal(greedy(c, 2, h000, 3, 1.0f, 0, 0.1f, 64), 0); /* 0.7 */
    assert_int_equal(greedy(c, 2, h000, 3, 1.0f, 0, 0.2f, 64), 1); /* 0.4 */
    /* Only the last N count: with a window of 1 token 0 is unpenalized;
     * with 3 it pays twice (1.0 - 0.6 < 0.9 - 0.3). */
    const int32_t h001[] = {0, 0, 1};
    float d[2] = {1.0f, 0.9f};
    assert_int_equal(greedy(d, 2, h001, 3, 1.0f, 0, 0.3f, 1), 0);
    assert_int_equal(greedy(d, 2, h001, 3, 1.0f, 0, 0.3f, 3), 1);
    assert_int_equal(greedy(c, 2, h0111, 4, 1.0f, 0, 0.2f, 4), 0);
    /* The scratch is clean afterwards: no penalty leaks into a call
     * without history. */
    assert_int_equal(greedy(a, 3, NULL, 0, 2.0f, 0, 0, 64), 0);
}

static void test_logit_bias(void **state) {
    (void)state;
    float l[3] = {1.0f, 0.0f, -1.0f};
    fx_sampling cfg;
    fx_sampling_default(&cfg);
    fx_sampler s;
    fx_error err;
    assert_int_equal(fx_sampler_init(&s, &cfg, &err), FX_OK);
    fx_logit_bias ban[] = {{0, -INFINITY}};
    assert_int_equal(fx_sampler_set_bias(&s, &alloc, ban, 1, 3, &err), FX_OK);
    assert_int_equal(next(&s, l, 3, NULL, 0), 1);
    fx_logit_bias up[] = {{2, 1.5f}, {2, 1.0f}}; /* adds up: 1.5 */
    assert_int_equal(fx_sampler_set_bias(&s, &alloc, up, 2, 3, &err), FX_OK);
    assert_int_equal(next(&s, l, 3, NULL, 0), 2);
    /* Sampling with temperature never draws a banned token. */
    cfg.temperature = 2.0f;
    fx_sampler_free(&s, &alloc);
    assert_int_equal(fx_sampler_init(&s, &cfg, &err), FX_OK);
    fx_logit_bias ban2[] = {{0, -INFINITY}, {1, -INFINITY}};
    assert_int_equal(fx_sampler_set_bias(&s, &alloc, ban2, 2, 3, &err), FX_OK);
    for (int i = 0; i < 200; i++) assert_int_equal(next(&s, l, 3, NULL, 0), 2);
    fx_logit_bias bad[] = {{3, 1.0f}};
    assert_int_equal(fx_sampler_set_bias(&s, &alloc, bad, 1, 3, &err), FX_ERR_INVALID_ARG);
    fx_logit_bias nan[] = {{1, NAN}};
    assert_int_equal(fx_sampler_set_bias(&s, &alloc, nan, 1, 3, &err), FX_ERR_INVALID_ARG);
    fx_sampler_free(&s, &alloc);
}

static void test_seed_reproduces_full_chain(void **state) {
    (void)state;
    static float l[NV];
    fx_sampling cfg;
    fx_sampling_default(&cfg);
    cfg.temperature = 0.9f;
    cfg.top_k = 200;
    cfg.typical_p = 0.95f;
    cfg.top_p = 0.9f;
    cfg.min_p = 0.01f;
    cfg.repeat_penalty = 1.1f;
    cfg.presence_penalty = 0.2f;
    cfg.frequency_penalty = 0.1f;
    cfg.penalty_last_n = 16;
    cfg.seed = 77;
    int32_t hist[2][64];
    for (int run = 0; run < 2; run++) {
        fx_sampler s;
        fx_error err;
        assert_int_equal(fx_sampler_init(&s, &cfg, &err), FX_OK);
        for (int i = 0; i < 64; i++) {
            random_logits(l, NV, 100 + (uint64_t)i);
            hist[run][i] = next(&s, l, NV, hist[run], (size_t)i);
        }
        fx_sampler_free(&s, &alloc);
    }
    assert_memory_equal(hist[0], hist[1], sizeof hist[0]);
}

/* Without a top-k, a sampler with nothing to adjust sorts the logits
 * straight into its words (sample.c, sort_logits); one with a logit bias
 * builds candidates first and sorts those. A bias of 0 changes no logit's
 * order (-0 + 0 is +0, equal to -0 in it), so both draw the same tokens,
 * over logits with repeats, -0 and +0, infinities and NaN, at every
 * setting of the chain that runs after the sort. */
static void test_sorted_paths_agree(void **state) {
    (void)state;
    static float l[NV];
    const float special[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f};
    for (int variant = 0; variant < 4; variant++) {
        fx_sampling cfg;
        fx_sampling_default(&cfg);
        cfg.temperature = 0.7f + 0.2f * (float)variant;
        cfg.seed = 11 + (uint64_t)variant;
        if (variant == 1) cfg.top_p = 0.9f;
        if (variant == 2) cfg.min_p = 0.05f;
        if (variant == 3) cfg.typical_p = 0.9f;
        fx_sampler plain, biased;
        fx_error err;
        assert_int_equal(fx_sampler_init(&plain, &cfg, &err), FX_OK);
        assert_int_equal(fx_sampler_init(&biased, &cfg, &err), FX_OK);
        const fx_logit_bias zero = {5, 0.0f};
        assert_int_equal(fx_sampler_set_bias(&biased, &alloc, &zero, 1, NV, &err),
                         FX_OK);
        for (int i = 0; i < 40; i++) {
            random_logits(l, NV, 300 + (uint64_t)i);
            for (uint32_t k = 0; k < NV; k += 7)
                l[k] = (float)(int)l[k]; /* repeats */
            if (i % 2)
                for (uint32_t k = 3; k < NV; k += 97) l[k] = special[k % 5];
            if (i % 4 == 1) l[0] = NAN;
            assert_int_equal(next(&plain, l, NV, NULL, 0),
                             next(&biased, l, NV, NULL, 0));
        }
        fx_sampler_free(&plain, &alloc);
        fx_sampler_free(&biased, &alloc);
    }
}

static void test_logprobs(void **state) {
    (void)state;
    float l[5] = {0.0f, logf(2.0f), logf(3.0f), logf(3.0f), -INFINITY};
    fx_token_logprob top[3];
    float lp = fx_logprobs(l, 5, 1, top, 3);
    assert_true(fabsf(lp - logf(2.0f / 9.0f)) < 1e-5f);
    assert_int_equal(top[0].token, 2); /* a tie: the lower id first */
    assert_int_equal(top[1].token, 3);
    assert_int_equal(top[2].token, 1);
    assert_true(fabsf(top[0].logprob - logf(3.0f / 9.0f)) < 1e-5f);
    assert_true(fx_logprobs(l, 5, 4, top, 0) == -INFINITY);
}

static int setup(void **state) {
    (void)state;
    fx_alloc_init(&alloc, NULL);
    fx_error err;
    return fx_sample_ctx_init(&ctx, &alloc, NULL, NV, &err) == FX_OK ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    fx_sample_ctx_free(&ctx, &alloc);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_top_k_statistics),
        cmocka_unit_test(test_top_p_mass),
        cmocka_unit_test(test_typical),
        cmocka_unit_test(test_penalties),
        cmocka_unit_test(test_logit_bias),
        cmocka_unit_test(test_seed_reproduces_full_chain),
        cmocka_unit_test(test_sorted_paths_agree),
        cmocka_unit_test(test_logprobs),
    };
    return cmocka_run_group_tests_name("sample_chain", tests, setup, teardown);
}
