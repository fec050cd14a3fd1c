/*
 * tokenizer: the vocabulary of a GGUF file (tokenizer.ggml.*) and the two
 * tokenizers Llama-family models use -- SentencePiece (`llama`: score-driven
 * bigram merging with byte fallback) and byte-level BPE (`gpt2`: GPT-2 byte
 * map, ranked merges, a named pre-tokenizer).
 *
 * A loaded vocabulary is immutable: every function below may be called from
 * several threads at once on one vocabulary. Token texts are copied out of
 * the GGUF mapping at load, so the vocabulary does not depend on it.
 */
#ifndef FX_TOKENIZER_H
#define FX_TOKENIZER_H

#include "../core/core.h"
#include "../gguf/gguf.h"

struct fx_vocab;

/* Tokens longer than this are refused at load (docs/reliability.md 16): no real
 * vocabulary comes near it, and it bounds every per-token buffer. */
#define FX_VOCAB_MAX_TOKEN_LEN 65536u

/* Loads and validates the vocabulary. A file without tokenizer.ggml.model
 * gives FX_ERR_MISSING; anything malformed gives FX_ERR_BAD_VOCAB (or the
 * GGUF getter's status) with a message naming the key and the index. */
fx_status fx_vocab_load(const fx_gguf *gguf, const fx_alloc *alloc,
                        const fx_logger *log, struct fx_vocab **out,
                        fx_error *err);
void fx_vocab_free(struct fx_vocab *vocab);

/* The id of the token whose text is exactly text[0..len), or -1. When a
 * text appears twice in the file the later id wins (as in llama.cpp). */
int32_t fx_vocab_find(const struct fx_vocab *vocab, const char *text,
                      size_t len);

uint32_t fx_vocab_n_tokens(const struct fx_vocab *vocab);
/* FX_TOKEN_TYPE_UNDEFINED for an id out of range. */
fx_token_type_t fx_vocab_token_type(const struct fx_vocab *vocab, int32_t id);
/* The stored text of a token (SentencePiece `▁` and GPT-2 byte-map form
 * included), or NULL for an id out of range. Not NUL-terminated. */
const char *fx_vocab_token_text(const struct fx_vocab *vocab, int32_t id,
                                size_t *len);
/* One of fx_special_token (ferrox.h); -1 when the vocabulary has none. */
int32_t fx_vocab_special(const struct fx_vocab *vocab, int which);
/* End of generation: EOS, EOT or EOM. */
bool fx_vocab_is_eog(const struct fx_vocab *vocab, int32_t id);

/* A lower bound on the tokens any text of len bytes gives (any flags),
 * found without tokenizing it: a caller with room for fewer can refuse
 * the text at once. 0 when the vocabulary gives no bound. */
size_t fx_vocab_min_tokens(const struct fx_vocab *vocab, size_t len);

/* Flags are the public FX_TOKENIZE_* bits. Writes up to cap ids into out
 * and sets *n_out to the number the text needs; FX_ERR_BUFFER_TOO_SMALL
 * when that is more than cap, FX_ERR_TOO_LARGE when len > INT32_MAX.
 * Scratch memory comes from alloc and is freed before returning. */
fx_status fx_vocab_tokenize(const struct fx_vocab *vocab,
                            const fx_alloc *alloc, const char *text,
                            size_t len, uint32_t flags, int32_t *out,
                            size_t cap, size_t *n_out, fx_error *err);

/* Flags are the public FX_DETOKENIZE_* bits (RENDER_SPECIAL matters here).
 * Writes up to cap bytes, sets *n_out to the bytes the piece needs. */
fx_status fx_vocab_token_to_piece(const struct fx_vocab *vocab, int32_t id,
                                  uint32_t flags, char *buf, size_t cap,
                                  size_t *n_out, fx_error *err);
fx_status fx_vocab_detokenize(const struct fx_vocab *vocab,
                              const int32_t *tokens, size_t n_tokens,
                              uint32_t flags, char *buf, size_t cap,
                              size_t *n_out, fx_error *err);

/* ---- pre-tokenizer (exposed for unit tests) ---- */

typedef enum fx_pretok {
    FX_PRETOK_NONE = 0,   /* SentencePiece: no pre-tokenizer */
    FX_PRETOK_DEFAULT,
    FX_PRETOK_GPT2,
    FX_PRETOK_LLAMA3,
    FX_PRETOK_QWEN2,
    FX_PRETOK_SMOLLM,
    /* through regex.c's expressions (pretok.c lists them) */
    FX_PRETOK_FALCON,
    FX_PRETOK_DEEPSEEK_LLM,
    FX_PRETOK_DEEPSEEK_CODER,
    FX_PRETOK_DEEPSEEK3,
    FX_PRETOK_BLOOM,
    FX_PRETOK_VIKING,
    FX_PRETOK_TEKKEN,
    FX_PRETOK_GPT4O
} fx_pretok;

/* Maps a tokenizer.ggml.pre name to its kind; false if unknown. */
bool fx_pretok_from_name(const char *name, size_t len, fx_pretok *out);

/* Splits text into pre-tokens: *ends (allocated with alloc, caller frees
 * with fx_free; NULL for empty text) receives the byte offset where each
 * piece ends, *n_pieces their count.
 * Each byte that does not start a valid UTF-8 sequence counts as one
 * U+FFFD (a symbol), as llama.cpp treats a stray byte. Overlong forms and
 * surrogates are invalid too, byte by byte, where llama.cpp decodes them
 * as code points (C0 80 as U+0000): text that is not UTF-8 may split
 * differently there, never out of bounds. */
fx_status fx_pretok_split(fx_pretok kind, const fx_alloc *alloc,
                          const char *text, size_t len, size_t **ends,
                          size_t *n_pieces, fx_error *err);

#endif /* FX_TOKENIZER_H */
