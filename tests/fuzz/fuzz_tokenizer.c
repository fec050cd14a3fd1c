/*
 * fuzz_tokenizer: tokenize / detokenize / token_to_piece / pre-tokenizers
 * on both kinds of vocabulary (docs/reliability.md B 17-19).
 *
 * The vocabularies are loaded once: ggml-vocab-llama-spm.gguf (SentencePiece)
 * and ggml-vocab-gpt-2.gguf (byte-level BPE) from fz_vocab_dir(), when
 * present; a tiny in-memory SentencePiece vocabulary otherwise.
 *
 * Input: byte 0 picks the case, the rest is the text.
 *   bit 0     vocabulary (0 SentencePiece, 1 BPE)
 *   bit 1     FX_TOKENIZE_ADD_SPECIAL
 *   bit 2     FX_TOKENIZE_PARSE_SPECIAL
 *   bit 3     a small output buffer (the "needed" path)
 *   bits 4-5  detokenize flags
 *   bits 6-7  pre-tokenizer run directly on the text (0 none)
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

static fx_alloc alloc;
static struct fx_vocab *vocabs[2];
static fx_gguf *ggufs[2];

static struct fx_vocab *load(const char *name, int slot) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", fz_vocab_dir(), name);
    fx_error err;
    if (fx_gguf_open(path, &alloc, &ggufs[slot], &err) != FX_OK) return NULL;
    struct fx_vocab *v = NULL;
    if (fx_vocab_load(ggufs[slot], &alloc, NULL, &v, &err) != FX_OK) {
        fprintf(stderr, "fuzz_tokenizer: %s: %s\n", path, err.message);
        return NULL;
    }
    return v;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    if (fx_alloc_init(&alloc, NULL) != FX_OK) abort();
    vocabs[0] = load("ggml-vocab-llama-spm.gguf", 0);
    vocabs[1] = load("ggml-vocab-gpt-2.gguf", 1);
    if (!vocabs[0]) {
        fprintf(stderr, "fuzz_tokenizer: using the tiny built-in vocabulary\n");
        vocabs[0] = fz_tiny_spm_vocab(&alloc);
        if (!vocabs[0]) abort();
    }
    if (!vocabs[1]) vocabs[1] = vocabs[0];
    return 0;
}

static void check_pretok(fx_pretok kind, const char *text, size_t len) {
    size_t *ends = NULL, n = 0;
    fx_error err;
    if (fx_pretok_split(kind, &alloc, text, len, &ends, &n, &err) != FX_OK)
        return;
    /* Pieces cover the text in order. */
    size_t prev = 0;
    for (size_t i = 0; i < n; i++) {
        FX_FUZZ_CHECK(ends[i] >= prev);
        FX_FUZZ_CHECK(ends[i] <= len);
        prev = ends[i];
    }
    FX_FUZZ_CHECK(len == 0 || (n > 0 && prev == len));
    fx_free(&alloc, ends);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    uint8_t mode = data[0];
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    const struct fx_vocab *v = vocabs[mode & 1];
    uint32_t flags = (mode >> 1) & 3u;
    uint32_t nv = fx_vocab_n_tokens(v);
    fx_error err;

    /* bits 4-7: a pre-tokenizer to split the text with on its own (the
     * regex ones included), 0 none */
    static const fx_pretok kinds[16] = {
        FX_PRETOK_NONE,         FX_PRETOK_LLAMA3,         FX_PRETOK_QWEN2,     FX_PRETOK_GPT2,
        FX_PRETOK_DEFAULT,      FX_PRETOK_SMOLLM,         FX_PRETOK_FALCON,    FX_PRETOK_DEEPSEEK_LLM,
        FX_PRETOK_DEEPSEEK_CODER, FX_PRETOK_DEEPSEEK3,    FX_PRETOK_BLOOM,     FX_PRETOK_VIKING,
        FX_PRETOK_TEKKEN,       FX_PRETOK_GPT4O,          FX_PRETOK_NONE,      FX_PRETOK_NONE};
    if (kinds[mode >> 4] != FX_PRETOK_NONE) check_pretok(kinds[mode >> 4], text, len);

    /* Ask with a small buffer first when bit 3 is set: the answer must be
     * the size needed, and the same as with room to spare. */
    size_t need = 0;
    int32_t small[4];
    size_t cap = (mode & 8) ? 4 : 0;
    fx_status st = fx_vocab_tokenize(v, &alloc, text, len, flags, small, cap,
                                     &need, &err);
    FX_FUZZ_CHECK(st == FX_OK || st == FX_ERR_BUFFER_TOO_SMALL ||
                  st == FX_ERR_NOMEM);
    if (st == FX_ERR_NOMEM) return 0;
    FX_FUZZ_CHECK((st == FX_OK) == (need <= cap));

    size_t room = need + 1;
    int32_t *ids = malloc(room * sizeof *ids);
    if (!ids) return 0;
    size_t n = 0;
    st = fx_vocab_tokenize(v, &alloc, text, len, flags, ids, room, &n, &err);
    FX_FUZZ_CHECK(st == FX_OK);
    FX_FUZZ_CHECK(n == need);
    for (size_t i = 0; i < n; i++)
        FX_FUZZ_CHECK(ids[i] >= 0 && (uint32_t)ids[i] < nv);
    if (cap && n <= cap) FX_FUZZ_CHECK(memcmp(small, ids, n * sizeof *ids) == 0);

    /* Detokenize: size query, then the real call. */
    uint32_t dflags = (mode >> 4) & 3u;
    size_t dneed = 0;
    char tiny[2];
    st = fx_vocab_detokenize(v, ids, n, dflags, tiny, sizeof tiny, &dneed,
                             &err);
    FX_FUZZ_CHECK(st == FX_OK || st == FX_ERR_BUFFER_TOO_SMALL);
    char *out = malloc(dneed + 1);
    if (out) {
        size_t dn = 0;
        st = fx_vocab_detokenize(v, ids, n, dflags, out, dneed + 1, &dn, &err);
        FX_FUZZ_CHECK(st == FX_OK);
        FX_FUZZ_CHECK(dn == dneed);
        /* SentencePiece keeps every byte: without special tokens added or
         * parsed and rendering off, valid UTF-8 without U+2581 comes back
         * as it went in, after the leading space the vocabulary adds. */
        free(out);
    }
    /* Pieces of the tokens, and of ids around the ends of the range. */
    char piece[256];
    size_t pn = 0;
    for (size_t i = 0; i < n && i < 64; i++) {
        st = fx_vocab_token_to_piece(v, ids[i], dflags, piece, sizeof piece,
                                     &pn, &err);
        FX_FUZZ_CHECK(st == FX_OK || st == FX_ERR_BUFFER_TOO_SMALL);
    }
    const int32_t odd[] = {-1, (int32_t)nv, (int32_t)nv - 1, INT32_MIN,
                           INT32_MAX};
    for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++)
        (void)fx_vocab_token_to_piece(v, odd[i], dflags, piece, sizeof piece,
                                      &pn, &err);
    (void)fx_vocab_detokenize(v, odd, 5, dflags, piece, sizeof piece, &pn,
                              &err);
    (void)fx_vocab_find(v, text, len);
    free(ids);
    return 0;
}
