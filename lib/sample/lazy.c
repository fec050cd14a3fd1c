/*
 * Lazy grammars: a row samples freely until its output holds one of the
 * trigger strings or tokens, and from there on its grammar applies. The
 * grammar first reads the output from the start of the trigger to the end
 * of the token that completed it (so a tool-call grammar starts with its
 * trigger, "<tool_call>" ...), then masks every later token as usual --
 * what llama.cpp's lazy grammars do.
 *
 * A trigger string may arrive split over several tokens, so the sampler
 * keeps the last (longest trigger - 1) bytes of output: any match that
 * ends in the newest token starts there or in the token itself.
 */
#include "sample.h"

#include "../tokenizer/tokenizer.h"

#include <string.h>

struct fx_lazy {
    char *words;          /* the trigger strings back to back */
    uint32_t *word_end;   /* [n_words] where each ends in words */
    uint32_t n_words;
    int32_t *tokens;      /* [n_tokens] trigger tokens */
    uint32_t n_tokens;
    uint32_t max_word;    /* the longest trigger string */
    char *tail;           /* [max_word] the output's last bytes */
    uint32_t tail_len;    /* < max_word */
    uint64_t out_bytes;   /* output bytes so far */
    int64_t start;        /* output byte where the grammar took over, or -1 */
};

void fx_lazy_free(fx_lazy *z, const fx_alloc *alloc) {
    if (!z) return;
    fx_free(alloc, z->words);
    fx_free(alloc, z->word_end);
    fx_free(alloc, z->tokens);
    fx_free(alloc, z->tail);
    fx_free(alloc, z);
}

fx_status fx_sampler_set_lazy(fx_sampler *s, const fx_alloc *alloc,
                              const char *const *words, const size_t *lens,
                              size_t n_words, const int32_t *tokens,
                              size_t n_tokens, fx_error *err) {
    if (!s->grammar.g)
        return fx_fail(err, FX_ERR_INVALID_ARG,
                       "grammar triggers need a grammar");
    if (n_words + n_tokens == 0 || n_words > FX_LAZY_MAX_TRIGGERS ||
        n_tokens > FX_LAZY_MAX_TRIGGERS)
        return fx_fail(err, FX_ERR_INVALID_ARG,
                       "grammar triggers: 1 to %u strings and tokens each",
                       FX_LAZY_MAX_TRIGGERS);
    size_t total = 0, longest = 1;
    for (size_t i = 0; i < n_words; i++) {
        if (!words[i] || lens[i] == 0 || lens[i] > FX_LAZY_MAX_TRIGGER_LEN)
            return fx_fail(err, FX_ERR_INVALID_ARG,
                           "grammar trigger %zu: 1 to %u bytes", i,
                           FX_LAZY_MAX_TRIGGER_LEN);
        total += lens[i];
        if (lens[i] > longest) longest = lens[i];
    }
    fx_lazy *z = fx_calloc(alloc, 1, sizeof *z);
    if (!z) return fx_fail(err, FX_ERR_NOMEM, "out of memory for triggers");
    z->start = -1;
    z->max_word = (uint32_t)longest;
    z->words = fx_malloc(alloc, total ? total : 1);
    z->word_end = fx_malloc_array(alloc, n_words ? n_words : 1, sizeof *z->word_end);
    z->tokens = fx_malloc_array(alloc, n_tokens ? n_tokens : 1, sizeof *z->tokens);
    z->tail = fx_malloc(alloc, longest);
    if (!z->words || !z->word_end || !z->tokens || !z->tail) {
        fx_lazy_free(z, alloc);
        return fx_fail(err, FX_ERR_NOMEM, "out of memory for triggers");
    }
    size_t at = 0;
    for (size_t i = 0; i < n_words; i++) {
        memcpy(z->words + at, words[i], lens[i]);
        at += lens[i];
        z->word_end[i] = (uint32_t)at;
    }
    z->n_words = (uint32_t)n_words;
    if (n_tokens) memcpy(z->tokens, tokens, n_tokens * sizeof *tokens);
    z->n_tokens = (uint32_t)n_tokens;
    fx_lazy_free(s->lazy, alloc);
    s->lazy = z;
    return FX_OK;
}

bool fx_sampler_waiting(const fx_sampler *s) {
    return s->lazy && s->lazy->start < 0;
}

int64_t fx_sampler_grammar_start(const fx_sampler *s) {
    return s->lazy ? s->lazy->start : -1;
}

/* The earliest match of a trigger string that ends inside piece, as an
 * offset from the start of the tail (tail_len + i for one at piece[i]);
 * -1 if none. */
static int64_t earliest_word(const fx_lazy *z, const char *piece, size_t len) {
    int64_t best = -1;
    for (uint32_t w = 0; w < z->n_words; w++) {
        const char *word = z->words + (w ? z->word_end[w - 1] : 0);
        size_t wl = z->word_end[w] - (w ? z->word_end[w - 1] : 0);
        /* Starting in the tail, ending in the piece. */
        size_t k0 = z->tail_len + 1 > wl ? z->tail_len + 1 - wl : 0;
        for (size_t k = k0; k < z->tail_len; k++) {
            size_t in_tail = z->tail_len - k;
            if ((best >= 0 && (int64_t)k >= best) || len < wl - in_tail) continue;
            if (memcmp(z->tail + k, word, in_tail) == 0 &&
                memcmp(piece, word + in_tail, wl - in_tail) == 0) {
                best = (int64_t)k;
                break;
            }
        }
        /* Wholly inside the piece. */
        for (size_t i = 0; i + wl <= len; i++) {
            int64_t at = (int64_t)(z->tail_len + i);
            if (best >= 0 && at >= best) break;
            if (memcmp(piece + i, word, wl) == 0) {
                best = at;
                break;
            }
        }
    }
    return best;
}

/* Keeps the last max_word - 1 bytes of tail + piece. */
static void keep_tail(fx_lazy *z, const char *piece, size_t len) {
    size_t keep = z->max_word - 1;
    if (len >= keep) {
        memcpy(z->tail, piece + len - keep, keep);
        z->tail_len = (uint32_t)keep;
        return;
    }
    size_t from_tail = z->tail_len + len > keep ? keep - len : z->tail_len;
    memmove(z->tail, z->tail + z->tail_len - from_tail, from_tail);
    memcpy(z->tail + from_tail, piece, len);
    z->tail_len = (uint32_t)(from_tail + len);
}

fx_status fx_lazy_observe(fx_sampler *s, fx_sample_ctx *ctx, int32_t token,
                          fx_error *err) {
    fx_lazy *z = s->lazy;
    if (fx_vocab_is_eog(ctx->vocab, token)) return FX_OK;
    size_t len = 0;
    fx_status st = fx_vocab_token_to_piece(ctx->vocab, token, 0, ctx->piece,
                                           FX_VOCAB_MAX_TOKEN_LEN, &len, err);
    if (st != FX_OK) return st;
    int64_t at = -1;
    for (uint32_t i = 0; i < z->n_tokens && at < 0; i++)
        if (z->tokens[i] == token) at = z->tail_len;
    if (at < 0) at = earliest_word(z, ctx->piece, len);
    if (at < 0) {
        keep_tail(z, ctx->piece, len);
        z->out_bytes += len;
        return FX_OK;
    }
    z->start = (int64_t)(z->out_bytes - z->tail_len) + at;
    /* The grammar reads the trigger and what followed it in this token. */
    if ((size_t)at < z->tail_len)
        st = fx_gstate_accept(&s->grammar, &ctx->work, z->tail + at,
                              z->tail_len - (size_t)at, err);
    if (st == FX_OK) {
        size_t from = (size_t)at > z->tail_len ? (size_t)at - z->tail_len : 0;
        st = fx_gstate_accept(&s->grammar, &ctx->work, ctx->piece + from,
                              len - from, err);
    }
    z->out_bytes += len;
    if (st != FX_OK)
        return fx_fail(err, FX_ERR_GRAMMAR,
                       "grammar: the output from its trigger on does not "
                       "fit it");
    return FX_OK;
}
