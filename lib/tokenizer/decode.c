/*
 * Tokens to bytes: one token's piece, and whole sequences with the
 * SentencePiece leading-space rule.
 */
#include <string.h>

#include "vocab_impl.h"

/* Output that counts what does not fit, so one pass gives both the bytes
 * and the size needed. strip_space drops one leading space of the next
 * non-empty write (SentencePiece's space prefix, removed on decode). */
typedef struct writer {
    char *buf;
    size_t cap, n;
    bool strip_space;
} writer;

static void wput(writer *w, const void *p, size_t len) {
    const char *s = p;
    if (len == 0) return;
    if (w->strip_space) {
        w->strip_space = false;
        if (s[0] == ' ') {
            s++;
            len--;
        }
    }
    if (w->n < w->cap) {
        size_t room = w->cap - w->n;
        memcpy(w->buf + w->n, s, len < room ? len : room);
    }
    w->n += len;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return 0; /* byte tokens were validated at load */
}

static void piece(const struct fx_vocab *v, int32_t id, uint32_t flags, writer *w) {
    size_t len;
    const char *s = fx_vocab_token_text(v, id, &len);
    switch (v->types[id]) {
    case FX_TOKEN_TYPE_CONTROL:
    case FX_TOKEN_TYPE_UNKNOWN:
        if (flags & FX_DETOKENIZE_RENDER_SPECIAL) wput(w, s, len);
        return;
    case FX_TOKEN_TYPE_USER_DEFINED:
        wput(w, s, len);
        return;
    case FX_TOKEN_TYPE_BYTE: {
        unsigned char b = (unsigned char)(hexval(s[3]) * 16 + hexval(s[4]));
        wput(w, &b, 1);
        return;
    }
    case FX_TOKEN_TYPE_NORMAL:
        break;
    default: /* unused and undefined tokens stand for nothing */
        return;
    }
    if (v->kind == FX_VOCAB_SPM) {
        size_t from = 0;
        for (size_t i = 0; i + 3 <= len; i++) {
            if (memcmp(s + i, "\xe2\x96\x81", 3) == 0) {
                wput(w, s + from, i - from);
                wput(w, " ", 1);
                from = i + 3;
                i += 2;
            }
        }
        wput(w, s + from, len - from);
        return;
    }
    /* BPE: undo the GPT-2 byte map; a character outside it is kept as it
     * is (llama.cpp writes an [UNK_BYTE_...] marker instead) */
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t l = fx_utf8_decode(u + i, len - i, &cp);
        if (cp < 324 && v->u2b[cp] >= 0 && !(l == 1 && u[i] >= 0x80)) {
            unsigned char b = (unsigned char)v->u2b[cp];
            wput(w, &b, 1);
        } else {
            wput(w, u + i, l);
        }
        i += l;
    }
}

static fx_status finish(const writer *w, size_t *n_out, fx_error *err) {
    *n_out = w->n;
    if (w->n > w->cap)
        return fx_fail(err, FX_ERR_BUFFER_TOO_SMALL, "%zu bytes needed, the buffer holds %zu", w->n, w->cap);
    return FX_OK;
}

fx_status fx_vocab_token_to_piece(const struct fx_vocab *v, int32_t id, uint32_t flags, char *buf, size_t cap,
                                  size_t *n_out, fx_error *err) {
    *n_out = 0;
    if (id < 0 || (uint32_t)id >= v->n_tokens)
        return fx_fail(err, FX_ERR_INVALID_ARG, "token %d is out of range (vocabulary of %u)", id, v->n_tokens);
    writer w = {buf, buf ? cap : 0, 0, false};
    piece(v, id, flags, &w);
    return finish(&w, n_out, err);
}

fx_status fx_vocab_detokenize(const struct fx_vocab *v, const int32_t *tokens, size_t n_tokens, uint32_t flags,
                              char *buf, size_t cap, size_t *n_out, fx_error *err) {
    *n_out = 0;
    for (size_t i = 0; i < n_tokens; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= v->n_tokens)
            return fx_fail(err, FX_ERR_INVALID_ARG, "tokens[%zu] = %d is out of range (vocabulary of %u)", i,
                           tokens[i], v->n_tokens);
    if (flags & FX_DETOKENIZE_REMOVE_SPECIAL) {
        if (v->add_bos && n_tokens > 0 && tokens[0] == v->special[FX_TOKEN_BOS]) {
            tokens++;
            n_tokens--;
        }
        if (v->add_eos && n_tokens > 0 && tokens[n_tokens - 1] == v->special[FX_TOKEN_EOS]) n_tokens--;
    }
    /* The space fx_vocab_tokenize put before the text comes off the first
     * piece that has any bytes (a BOS before it renders to nothing). */
    writer w = {buf, buf ? cap : 0, 0, v->add_space_prefix};
    for (size_t i = 0; i < n_tokens; i++) piece(v, tokens[i], flags, &w);
    return finish(&w, n_out, err);
}
