/*
 * The vocabulary's layout, shared by the .c files of lib/tokenizer only
 * (everything outside this folder goes through tokenizer.h).
 */
#ifndef FX_VOCAB_IMPL_H
#define FX_VOCAB_IMPL_H

#include "tokenizer.h"

typedef enum fx_vocab_kind {
    FX_VOCAB_SPM = 1, /* tokenizer.ggml.model = "llama" */
    FX_VOCAB_BPE = 2  /* tokenizer.ggml.model = "gpt2" */
} fx_vocab_kind;

/* Indices into fx_vocab.special; the order of the public enum
 * fx_special_token in ferrox.h. */
#define FX_VOCAB_N_SPECIAL 8

struct fx_vocab {
    fx_alloc alloc;
    fx_vocab_kind kind;
    fx_pretok pre;
    bool add_bos, add_eos;
    bool add_space_prefix; /* SentencePiece: " " before the text */
    bool ignore_merges;    /* Llama 3: a pre-token that is a whole token
                              is taken as it is, merges or not */
    bool spm_words;        /* SentencePiece: no token has a `▁` right after
                              another character, so no merge can cross the
                              start of a word and each word can be merged
                              alone (exactly as the whole text would be) */
    size_t bytes_per_token; /* no token covers more bytes of text than
                              this; 0: a text may give fewer tokens than
                              its bytes / this (fx_vocab_min_tokens) */
    uint32_t n_tokens;
    char *text;            /* every token's text, back to back */
    size_t *tok_off;       /* [n_tokens + 1] start of token i in text */
    float *scores;         /* [n_tokens] */
    uint8_t *types;        /* [n_tokens] FX_TOKEN_TYPE_* */
    uint64_t *tok_slots;   /* [tok_mask + 1] text -> id: the id in the low
                              32 bits, the hash's high half above (checked
                              before the text is touched); ~0 empty */
    size_t tok_mask;

    uint32_t n_merges;
    char *merge_text;      /* merge i's two halves, without the space */
    size_t *merge_off;     /* [n_merges + 1] */
    uint32_t *merge_left;  /* [n_merges] bytes in the left half */
    uint64_t *merge_slots; /* [merge_mask + 1] (left, right) -> rank, laid
                              out as tok_slots */
    size_t merge_mask;

    int32_t *specials;     /* [n_specials] control, user-defined and unknown
                              tokens, longest text first (the order
                              special-token matching tries them in) */
    uint32_t n_specials;

    int32_t special[FX_VOCAB_N_SPECIAL]; /* -1: none */
    int32_t byte_tok[256]; /* SentencePiece <0xXX> tokens, -1: none */

    /* GPT-2 byte map: byte b is written as the code point b2u[b]; u2b
     * inverts it for code points below 324 (-1: not a mapped point). */
    uint16_t b2u[256];
    int16_t u2b[324];
};

/* 64-bit FNV-1a: token texts are short, and this needs no tables. */
static inline uint64_t fx_vocab_hash(const void *p, size_t n, uint64_t h) {
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 0x100000001b3ull;
    }
    return h;
}
#define FX_VOCAB_HASH_SEED 0xcbf29ce484222325ull

/* The rank of merging left+right (two adjacent pieces text[0..left_len)
 * and text[left_len..total)), or -1. */
int32_t fx_vocab_merge_rank(const struct fx_vocab *v, const char *text,
                            size_t left_len, size_t total);

/* ---- UTF-8 and Unicode classes (pretok.c) ---- */

/* Decodes one strictly valid UTF-8 sequence at s[0..n) (n > 0): returns
 * its length and sets *cp, or returns 1 and sets *cp = U+FFFD when the
 * byte does not start one (overlong, surrogate, > U+10FFFF, truncated,
 * stray continuation byte). */
size_t fx_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp);

/* A code point's classes for the pre-tokenizers (pretok.c). */
enum {
    FX_CF_L = 1,    /* \p{L} */
    FX_CF_N = 2,    /* \p{N} */
    FX_CF_WS = 4,   /* \s: the White_Space property */
    FX_CF_P = 8,    /* \p{P} */
    FX_CF_ANY = 16, /* set on every code point, so 0 means "past the end" */
    FX_CF_S = 32,   /* \p{S}, beyond ASCII (regex.c has ASCII's) */
    FX_CF_M = 64    /* \p{M} */
};

/* ---- regular expressions (regex.c) ---- */

typedef struct fx_rx fx_rx;
fx_status fx_rx_compile(const fx_alloc *alloc, const char *expr, fx_rx **out, fx_error *err);
void fx_rx_free(fx_rx *rx);
/* The symbol the expression matches code point cp (classes cf) as. */
uint32_t fx_rx_symbol(const fx_rx *rx, uint32_t cp, unsigned cf);
/* Splits the n symbols of one piece as llama.cpp's unicode_regex_split
 * does (each match a piece, the text between matches a piece), appending
 * base + the end of each to ends[n_ends..]; returns the new count (at most
 * n more). */
size_t fx_rx_split(const fx_rx *rx, const uint32_t *sym, size_t n, size_t base, size_t *ends,
                   size_t n_ends);

/* ---- pre-tokenizer workspace (pretok.c) ---- */

/* The most expressions a pre-tokenizer runs through regex.c
 * (deepseek-llm's 5). */
#define FX_PRETOK_MAX_RX 6

/* Buffers reused across calls so that splitting text block by block
 * allocates once. */
typedef struct fx_pretok_ws {
    const fx_alloc *alloc;
    uint32_t *cp;           /* [cap] code points */
    uint8_t *fl;            /* [cap] their classes */
    size_t *boff, *a, *b;   /* [cap] byte offsets, piece ends (two passes) */
    uint32_t *sym;          /* [cap] code points as an expression sees them */
    size_t cap;
    fx_pretok rx_kind;      /* the kind rx holds the expressions of */
    fx_rx *rx[FX_PRETOK_MAX_RX]; /* compiled at its first split */
} fx_pretok_ws;

/* As fx_pretok_split, but *ends points into the workspace (valid until
 * the next call or fx_pretok_ws_free). */
fx_status fx_pretok_ws_split(fx_pretok_ws *ws, fx_pretok kind, const char *text, size_t len,
                             const size_t **ends, size_t *n_pieces, fx_error *err);
void fx_pretok_ws_free(fx_pretok_ws *ws);

/* Where a block of about `block` bytes starting at `from` may end so that
 * pre-tokenizing the blocks one by one gives exactly the pieces of the
 * whole text (any pre-tokenizer here); len if the rest is one block. */
size_t fx_pretok_block_end(const char *text, size_t from, size_t len, size_t block);

#endif /* FX_VOCAB_IMPL_H */
