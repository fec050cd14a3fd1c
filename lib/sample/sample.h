/*
 * sample: a row's seeded random stream and the samplers that turn logits
 * into the next token.
 *
 * The random stream is part of the determinism contract (DESIGN.md): the
 * same seed gives the same numbers on every platform, compiler and build,
 * because it is integer arithmetic only -- xoshiro256** seeded through
 * splitmix64 -- and uniform doubles are the top 53 bits times 2^-53.
 */
#ifndef FX_SAMPLE_H
#define FX_SAMPLE_H

#include "../core/core.h"

typedef struct fx_rng {
    uint64_t s[4];
} fx_rng;

void fx_rng_seed(fx_rng *rng, uint64_t seed);
uint64_t fx_rng_next(fx_rng *rng);
/* Uniform in [0, 1), a multiple of 2^-53. */
double fx_rng_uniform(fx_rng *rng);

typedef struct fx_sampling {
    float temperature; /* <= 0: greedy (argmax, lowest id wins a tie) */
    uint32_t top_k;    /* 0: off */
    float top_p;       /* >= 1: off */
    float min_p;       /* <= 0: off */
    uint64_t seed;
} fx_sampling;

/* Greedy by default; top_p 1, top_k 0, min_p 0, seed 0. */
void fx_sampling_default(fx_sampling *s);

typedef struct fx_candidate {
    int32_t id;
    float logit;
    double p;
} fx_candidate;

/* One row's sampler: its settings and its random stream. The candidate
 * scratch is the caller's (one per batcher, rows sample one at a time), so
 * a queued row costs no vocabulary-sized memory. The order of the chain is
 * llama.cpp's default: top-k, top-p, min-p, then temperature, then a draw
 * from the softmax. */
typedef struct fx_sampler {
    fx_sampling cfg;
    fx_rng rng;
} fx_sampler;

fx_status fx_sampler_init(fx_sampler *s, const fx_sampling *cfg,
                          fx_error *err);

/* Picks the next token from n_vocab logits; scratch has n_vocab entries. */
int32_t fx_sampler_sample(fx_sampler *s, const float *logits,
                          uint32_t n_vocab, fx_candidate *scratch);

/* The highest logit's id; the lowest id wins a tie. */
int32_t fx_argmax(const float *logits, uint32_t n);

#endif /* FX_SAMPLE_H */
