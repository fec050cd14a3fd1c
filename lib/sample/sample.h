/*
 * sample: a row's seeded random stream and the samplers that turn logits
 * into the next token.
 *
 * The random stream is part of the determinism contract (docs/design.md): the
 * same seed gives the same numbers on every platform, compiler and build,
 * because it is integer arithmetic only -- xoshiro256** seeded through
 * splitmix64 -- and uniform doubles are the top 53 bits times 2^-53.
 */
#ifndef FX_SAMPLE_H
#define FX_SAMPLE_H

#include "../core/core.h"
#include "grammar.h"

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
    float typical_p;          /* >= 1: off */
    float repeat_penalty;     /* 1: off */
    float presence_penalty;   /* 0: off */
    float frequency_penalty;  /* 0: off */
    uint32_t penalty_last_n;  /* tokens the penalties look back; 0: off */
} fx_sampling;

/* Greedy by default; top_p 1, typical_p 1, repeat_penalty 1, the rest 0. */
void fx_sampling_default(fx_sampling *s);

typedef struct fx_candidate {
    int32_t id;
    float logit;
    double p;
} fx_candidate;

/* One row's sampler: its settings, its random stream, and its live grammar
 * parse -- one value (docs/design.md invariant 7), so no code path can advance
 * one without the other or keep one after freeing the other. The
 * candidate scratch is the caller's (one per sampling thread of a batcher:
 * rows without a grammar sample in parallel), so a queued row costs no
 * vocabulary-sized memory.
 * The chain is llama.cpp's default order (common_sampler: logit bias,
 * penalties, [dry, top-n-sigma,] top-k, typical, top-p, min-p, [xtc,]
 * temperature, dist), with a grammar masking before all of them; top-p,
 * min-p and typical see the untempered distribution, as there. */
typedef struct fx_lazy fx_lazy;
struct fx_sample_ctx;

typedef struct fx_sampler {
    fx_sampling cfg;
    fx_rng rng;
    fx_gstate grammar;     /* grammar.g NULL: unconstrained */
    fx_logit_bias *bias;   /* [n_bias] owned */
    uint32_t n_bias;
    fx_lazy *lazy;         /* the grammar's triggers (lazy.c), or NULL */
} fx_sampler;

/* On a fresh (or freed) sampler: settings and seed, no grammar, no bias. */
fx_status fx_sampler_init(fx_sampler *s, const fx_sampling *cfg,
                          fx_error *err);
/* Constrains the sampler to a compiled grammar, which must outlive it.
 * Allocates the parse now: nothing is allocated per step. */
fx_status fx_sampler_set_grammar(fx_sampler *s, const fx_alloc *alloc,
                                 const fx_grammar *g, fx_error *err);
/* Copies per-token logit biases (ids must be < n_vocab; biases add up
 * when an id repeats; -INFINITY bans a token). */
fx_status fx_sampler_set_bias(fx_sampler *s, const fx_alloc *alloc,
                              const fx_logit_bias *bias, size_t n_bias,
                              uint32_t n_vocab, fx_error *err);
void fx_sampler_free(fx_sampler *s, const fx_alloc *alloc);

/* Most trigger strings and trigger tokens a lazy grammar takes (each),
 * and the longest trigger string. */
#define FX_LAZY_MAX_TRIGGERS 64u
#define FX_LAZY_MAX_TRIGGER_LEN 256u

/* Makes the grammar (set first) lazy (lazy.c): the row samples freely
 * until its output holds one of words[i] (lens[i] bytes each) or one of
 * the tokens; the grammar then reads the output from the trigger's start
 * to the end of that token and constrains every later one. Copies
 * everything. FX_ERR_INVALID_ARG without a grammar, with no trigger, or
 * past the limits above. */
fx_status fx_sampler_set_lazy(fx_sampler *s, const fx_alloc *alloc,
                              const char *const *words, const size_t *lens,
                              size_t n_words, const int32_t *tokens,
                              size_t n_tokens, fx_error *err);
/* A lazy grammar still waiting for its trigger. */
bool fx_sampler_waiting(const fx_sampler *s);
/* Where a lazy grammar took over: the byte offset in the row's output
 * (its tokens' pieces, back to back) where the trigger starts; -1 while
 * waiting, and for a grammar that is not lazy. */
int64_t fx_sampler_grammar_start(const fx_sampler *s);
/* For fx_sampler_next: a freely sampled token joins the output, and
 * completes a trigger or not. FX_ERR_GRAMMAR when the grammar cannot read
 * the output from the trigger on. */
fx_status fx_lazy_observe(fx_sampler *s, struct fx_sample_ctx *ctx,
                          int32_t token, fx_error *err);
void fx_lazy_free(fx_lazy *z, const fx_alloc *alloc);

/* Picks the next token from n_vocab logits; scratch has n_vocab entries.
 * Ignores a grammar: use fx_sampler_next for constrained rows. */
int32_t fx_sampler_sample(fx_sampler *s, const float *logits,
                          uint32_t n_vocab, fx_candidate *scratch);

/* Per-batcher sampling scratch: rows sample one at a time. */
typedef struct fx_sample_ctx {
    const struct fx_vocab *vocab;
    uint32_t n_vocab;
    uint32_t *counts;          /* [n_vocab] zero between calls */
    float *bias;               /* [n_vocab] zero between calls */
    char *piece;               /* [FX_VOCAB_MAX_TOKEN_LEN] */
    fx_vocab_trie *trie;       /* NULL until the first grammar */
    fx_gwork work;
} fx_sample_ctx;

/* n_vocab: the model's logit count (the scratch covers it and the
 * vocabulary's, whichever is larger). */
fx_status fx_sample_ctx_init(fx_sample_ctx *c, const fx_alloc *alloc,
                             const struct fx_vocab *vocab, uint32_t n_vocab,
                             fx_error *err);
/* Builds the vocabulary trie and walk scratch, once; later calls do
 * nothing. */
fx_status fx_sample_ctx_grammar(fx_sample_ctx *c, const fx_alloc *alloc,
                                fx_error *err);
void fx_sample_ctx_free(fx_sample_ctx *c, const fx_alloc *alloc);
/* fx_sampler_set_grammar starting the parse in ctx's walk scratch (built
 * first if need be): the row allocates only its parse, sized to g. */
fx_status fx_sampler_set_grammar_ctx(fx_sampler *s, fx_sample_ctx *ctx,
                                     const fx_alloc *alloc,
                                     const fx_grammar *g, fx_error *err);

/* Masks by the grammar (if any; a lazy one only once triggered),
 * samples, and advances the grammar by the token: the whole step of one
 * row. With a grammar, *eog is set when the
 * token ends the sentence (an end-of-generation token, allowed only once
 * the grammar is complete, and forced when nothing else is). Returns
 * FX_ERR_GRAMMAR when no token of the vocabulary can continue, and
 * FX_ERR_ALL_BANNED when the logit bias bans every token that may come
 * next; the sampler is then unchanged. */
fx_status fx_sampler_next(fx_sampler *s, fx_sample_ctx *ctx,
                          const float *logits, uint32_t n_vocab,
                          const int32_t *history, size_t n_history,
                          fx_candidate *scratch, int32_t *token, int *eog,
                          fx_error *err);

/* The log-probability of `token` under the softmax of the raw logits (the
 * model's distribution, before grammar and samplers), and the n_top most
 * likely tokens with theirs, most likely first (lowest id on a tie). */
float fx_logprobs(const float *logits, uint32_t n_vocab, int32_t token,
                  fx_token_logprob *top, uint32_t n_top);

/* c[0..n) sorted by logit, highest first, ties (-0 and +0 too) by lower
 * id, NaN last: the order of the sampler chain. In c's own memory, no
 * allocation; ids must be >= 0. */
void fx_sort_by_logit(fx_candidate *c, size_t n);

/* The highest logit's id; the lowest id wins a tie (-0 and +0 tie). NaN
 * never wins, except at id 0, which then nothing beats; n == 0 gives 0. */
int32_t fx_argmax(const float *logits, uint32_t n);

#endif /* FX_SAMPLE_H */
