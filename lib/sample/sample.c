#include "sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the random stream ---- */

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void fx_rng_seed(fx_rng *rng, uint64_t seed) {
    /* splitmix64 never yields four zero words, which xoshiro forbids. */
    for (int i = 0; i < 4; i++) rng->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t fx_rng_next(fx_rng *rng) {
    uint64_t *s = rng->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double fx_rng_uniform(fx_rng *rng) {
    return (double)(fx_rng_next(rng) >> 11) * 0x1.0p-53;
}

/* ---- samplers ---- */

void fx_sampling_default(fx_sampling *s) {
    memset(s, 0, sizeof *s);
    s->top_p = 1.0f;
}

fx_status fx_sampler_init(fx_sampler *s, const fx_sampling *cfg,
                          fx_error *err) {
    memset(s, 0, sizeof *s);
    if (cfg->temperature != cfg->temperature || cfg->top_p != cfg->top_p ||
        cfg->min_p != cfg->min_p)
        return fx_fail(err, FX_ERR_INVALID_ARG, "sampler: NaN setting");
    s->cfg = *cfg;
    fx_rng_seed(&s->rng, cfg->seed);
    return FX_OK;
}

int32_t fx_argmax(const float *logits, uint32_t n) {
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    return (int32_t)best;
}

/* Descending logit, then ascending id: a total order, so sorting is
 * deterministic whatever qsort's algorithm. NaN logits sort last. */
static int by_logit(const void *a, const void *b) {
    const fx_candidate *x = a, *y = b;
    int xn = x->logit != x->logit, yn = y->logit != y->logit;
    if (xn != yn) return xn - yn;
    if (!xn && x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* p over the first n (sorted) candidates at temperature t, in double. */
static void softmax(fx_candidate *c, size_t n, double t) {
    double max = c[0].logit, sum = 0;
    for (size_t i = 0; i < n; i++) {
        c[i].p = exp(((double)c[i].logit - max) / t);
        sum += c[i].p;
    }
    for (size_t i = 0; i < n; i++) c[i].p /= sum;
}

int32_t fx_sampler_sample(fx_sampler *s, const float *logits,
                          uint32_t n_vocab, fx_candidate *scratch) {
    const fx_sampling *cfg = &s->cfg;
    if (!(cfg->temperature > 0.0f)) return fx_argmax(logits, n_vocab);

    fx_candidate *c = scratch;
    size_t n = n_vocab;
    for (size_t i = 0; i < n; i++) c[i] = (fx_candidate){(int32_t)i, logits[i], 0};
    qsort(c, n, sizeof *c, by_logit);
    while (n > 1 && c[n - 1].logit != c[n - 1].logit) n--; /* drop NaN */
    if (cfg->top_k > 0 && cfg->top_k < n) n = cfg->top_k;
    if (cfg->top_p < 1.0f) {
        softmax(c, n, 1.0);
        double cum = 0;
        for (size_t i = 0; i < n; i++) {
            cum += c[i].p;
            if (cum >= cfg->top_p) { n = i + 1; break; }
        }
    }
    if (cfg->min_p > 0.0f) {
        softmax(c, n, 1.0);
        double floor_p = cfg->min_p * c[0].p;
        size_t keep = 1;
        while (keep < n && c[keep].p >= floor_p) keep++;
        n = keep;
    }
    softmax(c, n, cfg->temperature);
    double r = fx_rng_uniform(&s->rng), cum = 0;
    for (size_t i = 0; i < n; i++) {
        cum += c[i].p;
        if (r < cum) return c[i].id;
    }
    return c[n - 1].id; /* r landed in the rounding gap above the sum */
}
