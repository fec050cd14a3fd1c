/*
 * The samplers: a row's random stream (xoshiro256**), the chain that
 * turns its logits into a token (bias, penalties, top-k, typical, top-p,
 * min-p, temperature, the draw), greedy argmax, and log-probabilities.
 * sample.h says what each guarantees; a row's grammar masks in
 * grammar_match.c, before the chain runs.
 */
#include "sample.h"

#include "../tokenizer/tokenizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

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
    s->typical_p = 1.0f;
    s->repeat_penalty = 1.0f;
}

fx_status fx_sampler_init(fx_sampler *s, const fx_sampling *cfg,
                          fx_error *err) {
    memset(s, 0, sizeof *s);
    if (cfg->temperature != cfg->temperature || cfg->top_p != cfg->top_p ||
        cfg->min_p != cfg->min_p || cfg->typical_p != cfg->typical_p ||
        cfg->presence_penalty != cfg->presence_penalty ||
        cfg->frequency_penalty != cfg->frequency_penalty)
        return fx_fail(err, FX_ERR_INVALID_ARG, "sampler: NaN setting");
    if (!(cfg->repeat_penalty > 0.0f))
        return fx_fail(err, FX_ERR_INVALID_ARG,
                       "sampler: repeat_penalty must be > 0 (1 is off)");
    s->cfg = *cfg;
    fx_rng_seed(&s->rng, cfg->seed);
    return FX_OK;
}

/* The first index of the largest logit: the index where a scan that
 * moves only on a strictly larger value stops -- so NaN never wins (unless
 * it is logits[0], which nothing then beats) and of equal values (-0 and
 * +0 too) the first does. Greedy decoding calls this for every row every
 * step, and a scan reloading logits[best] puts a load in every
 * iteration's dependency chain. So two passes: the largest value, in
 * lanes (x > m ? x : m, which keeps m for a NaN x: SSE's maxps, baseline
 * on x86-64), then the first index equal to it. */
int32_t fx_argmax(const float *logits, uint32_t n) {
    if (n == 0 || logits[0] != logits[0]) return 0;
    float mx = logits[0];
    uint32_t i = 0;
#if defined(__SSE2__)
    __m128 m0 = _mm_set1_ps(mx), m1 = m0;
    for (; i + 8 <= n; i += 8) {
        m0 = _mm_max_ps(_mm_loadu_ps(logits + i), m0);
        m1 = _mm_max_ps(_mm_loadu_ps(logits + i + 4), m1);
    }
    float lane[8];
    _mm_storeu_ps(lane, m0);
    _mm_storeu_ps(lane + 4, m1);
    for (int j = 0; j < 8; j++) mx = lane[j] > mx ? lane[j] : mx;
#endif
    for (; i < n; i++) mx = logits[i] > mx ? logits[i] : mx;
    i = 0;
#if defined(__SSE2__)
    const __m128 target = _mm_set1_ps(mx);
    for (; i + 4 <= n; i += 4) {
        const int hit =
            _mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(logits + i), target));
        if (hit) return (int32_t)(i + (uint32_t)__builtin_ctz((unsigned)hit));
    }
#endif
    for (; i < n; i++)
        if (logits[i] == mx) return (int32_t)i;
    return 0; /* not reached: mx is one of the logits */
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

/* Restores the heap below i: a parent is worse than (after) its children
 * in by_logit order. */
static void sift_down(fx_candidate *c, size_t i, size_t n) {
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && by_logit(&c[l], &c[w]) > 0) w = l;
        if (r < n && by_logit(&c[r], &c[w]) > 0) w = r;
        if (w == i) return;
        fx_candidate t = c[i];
        c[i] = c[w];
        c[w] = t;
        i = w;
    }
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

/* Moves the k best of c[0..n) (by_logit order) to the front, sorted, in
 * O(n log k) -- a 32k vocabulary need not be sorted whole for top-k. The
 * order is total, so the result is the same as a full sort's prefix. */
static size_t select_top(fx_candidate *c, size_t n, size_t k) {
    /* c[0..k) is a heap whose root is the worst of the best k so far. */
    for (size_t i = k / 2; i-- > 0;) sift_down(c, i, k);
    for (size_t i = k; i < n; i++)
        if (by_logit(&c[i], &c[0]) < 0) {
            fx_candidate t = c[0];
            c[0] = c[i];
            c[i] = t;
            sift_down(c, 0, k);
        }
    qsort(c, k, sizeof *c, by_logit);
    return k;
}

static int by_p_then_id(const void *a, const void *b) {
    const fx_candidate *x = a, *y = b;
    if (x->p != y->p) return x->p < y->p ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* Locally typical sampling (Meister et al.; llama.cpp's typical): keep the
 * tokens whose surprise is closest to the entropy until their mass
 * reaches p. c is sorted by logit on entry and on return. */
static size_t typical(fx_candidate *c, size_t n, float p) {
    softmax(c, n, 1.0);
    double entropy = 0;
    for (size_t i = 0; i < n; i++)
        if (c[i].p > 0) entropy -= c[i].p * log(c[i].p);
    double max = c[0].logit, sum = 0;
    for (size_t i = 0; i < n; i++) sum += exp((double)c[i].logit - max);
    /* Sort by |surprise - entropy|, kept in p; the probability is
     * recomputed from the logit below. */
    for (size_t i = 0; i < n; i++) {
        double prob = exp((double)c[i].logit - max) / sum;
        c[i].p = prob > 0 ? fabs(-log(prob) - entropy) : INFINITY;
    }
    qsort(c, n, sizeof *c, by_p_then_id);
    double cum = 0;
    size_t keep = n;
    for (size_t i = 0; i < n; i++) {
        cum += exp((double)c[i].logit - max) / sum;
        if (cum > p) {
            keep = i + 1;
            break;
        }
    }
    qsort(c, keep, sizeof *c, by_logit);
    return keep;
}

/* ---- sorting a whole vocabulary by logit ---- */

/* A 32-bit key whose ascending order is by_logit's: larger logits first,
 * -0 equal to +0, every NaN last (ties are left to the id). */
static uint32_t logit_key(uint32_t bits) {
    if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu))
        return 0xffffffffu;                 /* NaN */
    if (bits == 0x80000000u) bits = 0;      /* -0 sorts as +0 */
    const uint32_t up = bits & 0x80000000u ? ~bits : bits | 0x80000000u;
    return ~up; /* descending; a number never reaches 0xffffffff */
}

static uint64_t word_at(const unsigned char *p, size_t i) {
    uint64_t w;
    memcpy(&w, p + 8 * i, sizeof w);
    return w;
}

/* The radix digit of word w: byte shift / 8 of its id (low half) or, for
 * a key pass, of logit_key of its logit bits (high half). */
static unsigned digit(uint64_t w, unsigned shift, int key_pass) {
    const uint32_t v = key_pass ? logit_key((uint32_t)(w >> 32)) : (uint32_t)w;
    return (v >> shift) & 0xffu;
}

/* One stable pass of a least-significant-digit radix sort of n words,
 * count[] the pass's digit histogram (turned into offsets here). */
static void radix_pass(const unsigned char *from, unsigned char *to, size_t n,
                       unsigned shift, int key_pass, size_t count[256]) {
    size_t at = 0;
    for (int d = 0; d < 256; d++) {
        const size_t k = count[d];
        count[d] = at;
        at += k;
    }
    for (size_t i = 0; i < n; i++) {
        const uint64_t w = word_at(from, i);
        memcpy(to + 8 * count[digit(w, shift, key_pass)]++, &w, sizeof w);
    }
}

/* Whether a pass with this histogram would move nothing: every word has
 * the same digit (the top bytes of logits in a narrow range, say). */
static int one_digit(const size_t count[256], size_t n) {
    for (int d = 0; d < 256; d++)
        if (count[d]) return count[d] == n;
    return 1;
}

/* Candidate i from a sort word (p left 0: nothing has set it yet). */
static void put_candidate(fx_candidate *c, size_t i, uint64_t w) {
    const uint32_t bits = (uint32_t)(w >> 32);
    fx_candidate cand = {(int32_t)(uint32_t)w, 0, 0};
    memcpy(&cand.logit, &bits, sizeof bits);
    memcpy(&c[i], &cand, sizeof cand);
}

/* c[0..n) in by_logit order, in its own memory: with temperature and no
 * top-k every step sorted the whole vocabulary, and qsort with a
 * comparator took 4.4 ms for 32000 candidates -- about a one-row Q8_0
 * forward pass of the 246M model. Each candidate's (logit bits, id) goes
 * into the first half of c's bytes as one 64-bit word, the second half is
 * the other buffer of the passes (by id bytes, then by key bytes: the
 * order by_logit gives whatever order c came in), and the words go back
 * into candidates. memcpy throughout: c may be an fx_candidate array. */
static void radix_sort_words(fx_candidate *c, size_t n, const float *logits) {
    _Static_assert(sizeof(fx_candidate) >= 2 * sizeof(uint64_t),
                   "two sort words per candidate");
    unsigned char *bytes = (unsigned char *)c;
    uint32_t max_id = 0;
    int ids_ascending = 1;
    /* The histograms of the key passes, counted in the one pass that
     * builds the words (a pass's histogram does not depend on the order
     * the words are in), even and odd words apart: a digit most words
     * share (a key's top byte) made one counter's increments a chain
     * through memory. */
    size_t count[8][256], odd[4][256];
    memset(count, 0, sizeof count);
    memset(odd, 0, sizeof odd);
    for (size_t i = 0; i < n; i++) { /* forward: word i <= candidate i */
        uint32_t bits, id;
        if (logits) { /* the vocabulary in order: ids ascend */
            id = (uint32_t)i;
            memcpy(&bits, &logits[i], sizeof bits);
        } else {
            id = (uint32_t)c[i].id;
            memcpy(&bits, &c[i].logit, sizeof bits);
            if (i > 0 && id <= max_id) ids_ascending = 0;
        }
        const uint64_t w = (uint64_t)bits << 32 | id;
        memcpy(bytes + 8 * i, &w, sizeof w);
        if (id > max_id) max_id = id;
        const uint32_t key = logit_key(bits);
        size_t(*h)[256] = i & 1 ? odd : count + 4;
        for (unsigned b = 0; b < 4; b++) h[b][(key >> (8 * b)) & 0xffu]++;
    }
    for (unsigned b = 0; b < 4; b++)
        for (int d = 0; d < 256; d++) count[4 + b][d] += odd[b][d];
    /* The id passes' histograms only when they run (ids out of order). */
    if (!ids_ascending)
        for (size_t i = 0; i < n; i++) {
            const uint32_t id = (uint32_t)word_at(bytes, i);
            for (unsigned b = 0; b < 4; b++) count[b][(id >> (8 * b)) & 0xffu]++;
        }
    /* Word buffers: the first half of c's bytes and the second. Passes
     * over the id bytes that vary -- none when the ids already ascend
     * (every caller's usual case: the vocabulary in order), since the key
     * passes are stable -- then over the key's four, each skipped when
     * all words share its digit. */
    unsigned char *buf[2] = {bytes, bytes + 8 * n};
    int cur = 0;
    for (unsigned b = 0; !ids_ascending && b < 4 && (max_id >> (8 * b)) != 0;
         b++) {
        if (one_digit(count[b], n)) continue;
        radix_pass(buf[cur], buf[1 - cur], n, 8 * b, 0, count[b]);
        cur = 1 - cur;
    }
    for (unsigned b = 0; b < 4; b++) {
        if (one_digit(count[4 + b], n)) continue;
        radix_pass(buf[cur], buf[1 - cur], n, 8 * b, 1, count[4 + b]);
        cur = 1 - cur;
    }
    /* Back to candidates: from the first half backward (candidate i covers
     * words 2i and 2i+1, both done), from the second half forward
     * (candidate i ends at byte 16i + 16 <= 8n + 8(i + 1), the next word
     * still to read). */
    if (cur == 0) {
        for (size_t i = n; i-- > 0;) put_candidate(c, i, word_at(bytes, i));
    } else {
        for (size_t i = 0; i < n; i++)
            put_candidate(c, i, word_at(bytes + 8 * n, i));
    }
}


void fx_sort_by_logit(fx_candidate *c, size_t n) {
    if (n < 256) {
        qsort(c, n, sizeof *c, by_logit);
        return;
    }
    radix_sort_words(c, n, NULL);
}

/* c[0..n) = candidates i, logits[i], sorted as fx_sort_by_logit sorts
 * them, the words built straight from the logits (no candidate array
 * written and read back first). */
static void sort_logits(fx_candidate *c, const float *logits, size_t n) {
    if (n < 256) {
        for (size_t i = 0; i < n; i++)
            c[i] = (fx_candidate){(int32_t)i, logits[i], 0};
        qsort(c, n, sizeof *c, by_logit);
        return;
    }
    radix_sort_words(c, n, logits);
}

static int32_t sample_sorted(fx_sampler *s, fx_candidate *c, size_t n);

/* The chain over candidates c[0..n) (n >= 1), any order. */
static int32_t sample_candidates(fx_sampler *s, fx_candidate *c, size_t n) {
    const fx_sampling *cfg = &s->cfg;
    if (!(cfg->temperature > 0.0f)) {
        size_t best = 0;
        for (size_t i = 1; i < n; i++)
            if (c[i].logit > c[best].logit ||
                (c[i].logit == c[best].logit && c[i].id < c[best].id))
                best = i;
        return c[best].id;
    }
    if (cfg->top_k > 0 && cfg->top_k < n) {
        n = select_top(c, n, cfg->top_k);
    } else {
        fx_sort_by_logit(c, n);
    }
    return sample_sorted(s, c, n);
}

/* The chain after the top-k or sort: c[0..n) (n >= 1) in by_logit order. */
static int32_t sample_sorted(fx_sampler *s, fx_candidate *c, size_t n) {
    const fx_sampling *cfg = &s->cfg;
    /* Drop NaN and banned (-inf) logits; a lone survivor stays. */
    while (n > 1 && !(c[n - 1].logit > -INFINITY)) n--;
    if (cfg->typical_p < 1.0f) n = typical(c, n, cfg->typical_p);
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

int32_t fx_sampler_sample(fx_sampler *s, const float *logits,
                          uint32_t n_vocab, fx_candidate *scratch) {
    if (!(s->cfg.temperature > 0.0f)) return fx_argmax(logits, n_vocab);
    if (n_vocab > 0 && !(s->cfg.top_k > 0 && s->cfg.top_k < n_vocab)) {
        sort_logits(scratch, logits, n_vocab);
        return sample_sorted(s, scratch, n_vocab);
    }
    for (size_t i = 0; i < n_vocab; i++)
        scratch[i] = (fx_candidate){(int32_t)i, logits[i], 0};
    return sample_candidates(s, scratch, n_vocab);
}

fx_status fx_sampler_set_grammar(fx_sampler *s, const fx_alloc *alloc,
                                 const fx_grammar *g, fx_error *err) {
    fx_gstate_free(&s->grammar, alloc);
    return fx_gstate_init(&s->grammar, alloc, g, err);
}

fx_status fx_sampler_set_grammar_ctx(fx_sampler *s, fx_sample_ctx *ctx,
                                     const fx_alloc *alloc,
                                     const fx_grammar *g, fx_error *err) {
    fx_status st = fx_sample_ctx_grammar(ctx, alloc, err);
    if (st != FX_OK) return st;
    fx_gstate_free(&s->grammar, alloc);
    return fx_gstate_init_work(&s->grammar, alloc, g, &ctx->work, err);
}

fx_status fx_sampler_set_bias(fx_sampler *s, const fx_alloc *alloc,
                              const fx_logit_bias *bias, size_t n_bias,
                              uint32_t n_vocab, fx_error *err) {
    fx_free(alloc, s->bias);
    s->bias = NULL;
    s->n_bias = 0;
    if (n_bias == 0) return FX_OK;
    if (!bias) return fx_fail(err, FX_ERR_INVALID_ARG, "logit_bias is NULL");
    if (n_bias > n_vocab)
        return fx_fail(err, FX_ERR_INVALID_ARG, "more logit biases than tokens");
    for (size_t i = 0; i < n_bias; i++) {
        if (bias[i].token < 0 || (uint32_t)bias[i].token >= n_vocab)
            return fx_fail(err, FX_ERR_INVALID_ARG,
                           "logit_bias %zu: token %d is outside the vocabulary",
                           i, bias[i].token);
        if (bias[i].bias != bias[i].bias || bias[i].bias == INFINITY)
            return fx_fail(err, FX_ERR_INVALID_ARG,
                           "logit_bias %zu: bias must be a number or -inf", i);
    }
    s->bias = fx_malloc_array(alloc, n_bias, sizeof *s->bias);
    if (!s->bias) return fx_fail(err, FX_ERR_NOMEM, "out of memory");
    memcpy(s->bias, bias, n_bias * sizeof *s->bias);
    s->n_bias = (uint32_t)n_bias;
    return FX_OK;
}

void fx_sampler_free(fx_sampler *s, const fx_alloc *alloc) {
    fx_gstate_free(&s->grammar, alloc);
    fx_lazy_free(s->lazy, alloc);
    s->lazy = NULL;
    fx_free(alloc, s->bias);
    s->bias = NULL;
    s->n_bias = 0;
}

fx_status fx_sample_ctx_init(fx_sample_ctx *c, const fx_alloc *alloc,
                             const struct fx_vocab *vocab, uint32_t n_vocab,
                             fx_error *err) {
    memset(c, 0, sizeof *c);
    c->vocab = vocab;
    c->n_vocab = vocab ? fx_vocab_n_tokens(vocab) : 0; /* NULL: no grammar */
    if (n_vocab > c->n_vocab) c->n_vocab = n_vocab;
    size_t n = c->n_vocab ? c->n_vocab : 1;
    c->counts = fx_calloc(alloc, n, sizeof *c->counts);
    c->bias = fx_calloc(alloc, n, sizeof *c->bias);
    c->piece = fx_malloc(alloc, FX_VOCAB_MAX_TOKEN_LEN);
    if (!c->counts || !c->bias || !c->piece) {
        fx_sample_ctx_free(c, alloc);
        return fx_fail(err, FX_ERR_NOMEM, "out of memory");
    }
    return FX_OK;
}

fx_status fx_sample_ctx_grammar(fx_sample_ctx *c, const fx_alloc *alloc,
                                fx_error *err) {
    if (c->trie) return FX_OK;
    fx_vocab_trie *t;
    fx_status st = fx_vocab_trie_build(alloc, c->vocab, &t, err);
    if (st != FX_OK) return st;
    if ((st = fx_gwork_init(&c->work, alloc, t, err)) != FX_OK) {
        fx_vocab_trie_free(t);
        return st;
    }
    c->trie = t;
    return FX_OK;
}

void fx_sample_ctx_free(fx_sample_ctx *c, const fx_alloc *alloc) {
    fx_gwork_free(&c->work, alloc);
    fx_vocab_trie_free(c->trie);
    fx_free(alloc, c->counts);
    fx_free(alloc, c->bias);
    fx_free(alloc, c->piece);
    memset(c, 0, sizeof *c);
}

static bool penalties_on(const fx_sampling *cfg) {
    return cfg->penalty_last_n > 0 &&
           (cfg->repeat_penalty != 1.0f || cfg->presence_penalty != 0.0f ||
            cfg->frequency_penalty != 0.0f);
}

/* Logit bias, then penalties (llama.cpp's order), on c[0..n) by id. The
 * per-id scratch is zeroed again before returning. */
static void adjust(const fx_sampler *s, fx_sample_ctx *ctx, fx_candidate *c,
                   size_t n, const int32_t *hist, size_t n_hist) {
    if (s->n_bias) {
        for (uint32_t i = 0; i < s->n_bias; i++) ctx->bias[s->bias[i].token] += s->bias[i].bias;
        for (size_t i = 0; i < n; i++) c[i].logit += ctx->bias[c[i].id];
        for (uint32_t i = 0; i < s->n_bias; i++) ctx->bias[s->bias[i].token] = 0;
    }
    const fx_sampling *cfg = &s->cfg;
    if (!penalties_on(cfg) || n_hist == 0) return;
    size_t from = n_hist > cfg->penalty_last_n ? n_hist - cfg->penalty_last_n : 0;
    for (size_t i = from; i < n_hist; i++)
        if ((uint32_t)hist[i] < ctx->n_vocab) ctx->counts[hist[i]]++;
    for (size_t i = 0; i < n; i++) {
        uint32_t k = ctx->counts[c[i].id];
        if (!k) continue;
        float l = c[i].logit;
        l = l <= 0 ? l * cfg->repeat_penalty : l / cfg->repeat_penalty;
        c[i].logit = l - (float)k * cfg->frequency_penalty - cfg->presence_penalty;
    }
    for (size_t i = from; i < n_hist; i++)
        if ((uint32_t)hist[i] < ctx->n_vocab) ctx->counts[hist[i]] = 0;
}

/* Whether the candidates left anything to sample: a -INFINITY bias bans
 * a token, and with every one banned the row must end, not draw one. */
static bool any_allowed(const fx_candidate *c, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (c[i].logit != -INFINITY) return true;
    return false;
}

/* The sum of token id's biases is -INFINITY. */
static bool banned(const fx_sampler *s, int32_t id) {
    float sum = 0;
    for (uint32_t i = 0; i < s->n_bias; i++)
        if (s->bias[i].token == id) sum += s->bias[i].bias;
    return sum == -INFINITY;
}

static fx_status all_banned(fx_error *err) {
    return fx_fail(err, FX_ERR_ALL_BANNED,
                   "logit_bias bans every token that may come next");
}

fx_status fx_sampler_next(fx_sampler *s, fx_sample_ctx *ctx,
                          const float *logits, uint32_t n_vocab,
                          const int32_t *history, size_t n_history,
                          fx_candidate *scratch, int32_t *token, int *eog,
                          fx_error *err) {
    *eog = 0;
    const bool unconstrained = !s->grammar.g || fx_sampler_waiting(s);
    if (unconstrained && !s->n_bias && !penalties_on(&s->cfg)) {
        *token = fx_sampler_sample(s, logits, n_vocab, scratch);
        return s->grammar.g ? fx_lazy_observe(s, ctx, *token, err) : FX_OK;
    }
    size_t n = 0;
    if (unconstrained) {
        for (uint32_t i = 0; i < n_vocab; i++)
            scratch[i] = (fx_candidate){(int32_t)i, logits[i], 0};
        n = n_vocab;
        adjust(s, ctx, scratch, n, history, n_history);
        if (s->n_bias && !any_allowed(scratch, n)) return all_banned(err);
        *token = sample_candidates(s, scratch, n);
        return s->grammar.g ? fx_lazy_observe(s, ctx, *token, err) : FX_OK;
    }
    fx_gwork *w = &ctx->work;
    fx_status st = fx_gstate_mask(&s->grammar, ctx->trie, w, err);
    if (st != FX_OK) return st;
    if (w->n_allowed == 0)
        return fx_fail(err, FX_ERR_GRAMMAR,
                       "grammar: no token of the vocabulary can continue it");
    uint32_t n_eog = w->eog_allowed ? ctx->trie->n_eog : 0;
    if (w->n_allowed == n_eog) {
        /* Complete, and nothing may follow: end of sequence, whatever the
         * logits say (docs/reliability.md 25) -- unless the bias bans it. */
        int32_t end = ctx->trie->eos >= 0 ? ctx->trie->eos : w->allowed[0];
        if (s->n_bias && banned(s, end)) {
            end = -1;
            for (uint32_t i = 0; i < w->n_allowed && end < 0; i++)
                if (!banned(s, w->allowed[i])) end = w->allowed[i];
            if (end < 0) return all_banned(err);
        }
        *token = end;
        *eog = 1;
        return FX_OK;
    }
    for (uint32_t i = 0; i < w->n_allowed; i++) {
        int32_t id = w->allowed[i];
        if ((uint32_t)id < n_vocab) scratch[n++] = (fx_candidate){id, logits[id], 0};
    }
    if (n == 0)
        return fx_fail(err, FX_ERR_GRAMMAR,
                       "grammar: no token of the model can continue it");
    adjust(s, ctx, scratch, n, history, n_history);
    if (s->n_bias && !any_allowed(scratch, n)) return all_banned(err);
    fx_rng saved = s->rng;
    int32_t t = sample_candidates(s, scratch, n);
    if (fx_vocab_is_eog(ctx->vocab, t)) {
        *token = t;
        *eog = 1;
        return FX_OK;
    }
    size_t len = 0;
    st = fx_vocab_token_to_piece(ctx->vocab, t, 0, ctx->piece,
                                 FX_VOCAB_MAX_TOKEN_LEN, &len, err);
    if (st == FX_OK) st = fx_gstate_accept(&s->grammar, w, ctx->piece, len, err);
    if (st != FX_OK) {
        s->rng = saved;
        return st;
    }
    *token = t;
    return FX_OK;
}

/* Is a better than b: higher logit, then lower id. */
static bool better(float la, int32_t ia, float lb, int32_t ib) {
    return la > lb || (la == lb && ia < ib);
}

float fx_logprobs(const float *logits, uint32_t n_vocab, int32_t token,
                  fx_token_logprob *top, uint32_t n_top) {
    double max = -INFINITY, sum = 0;
    for (uint32_t i = 0; i < n_vocab; i++)
        if (logits[i] > max) max = logits[i];
    for (uint32_t i = 0; i < n_vocab; i++) sum += exp((double)logits[i] - max);
    double lse = max + log(sum);
    if (n_top > n_vocab) n_top = n_vocab;
    /* Insertion into a short sorted list: n_top is at most 20. */
    uint32_t have = 0;
    for (uint32_t i = 0; i < n_vocab && n_top; i++) {
        float l = logits[i];
        if (have == n_top && !better(l, (int32_t)i, top[have - 1].logprob,
                                     top[have - 1].token))
            continue;
        uint32_t k = have < n_top ? have++ : n_top - 1;
        while (k > 0 && better(l, (int32_t)i, top[k - 1].logprob, top[k - 1].token)) {
            top[k] = top[k - 1];
            k--;
        }
        top[k] = (fx_token_logprob){(int32_t)i, l};
    }
    for (uint32_t k = 0; k < have; k++) top[k].logprob = (float)((double)top[k].logprob - lse);
    return (uint32_t)token < n_vocab ? (float)((double)logits[token] - lse) : -INFINITY;
}
