#include "byte_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf_writer.h"

/* Pieces after the byte tokens: ASCII words (with SentencePiece's U+2581
 * for a space), JSON punctuation, 2-, 3- and 4-byte characters, and the
 * text of an end-of-turn token, which the vocabulary marks as control. */
static const char *const pieces[] = {
    "\xe2\x96\x81", "a", "b", "c", "x", "y", "z", "\xe2\x96\x81" "a",
    "ab", "ba", "aa", "abc", "\xe2\x96\x81the", "stop", "STOP", "end",
    ".", ",", "{", "}", "[", "]", "\"", ":", "0", "1", "12", "-",
    "true", "null", "\n", "\xe2\x96\x81\xe2\x96\x81", "\xc3\xa9", "\xc3\xbc",
    "\xe6\x97\xa5", "\xe6\x9c\xac", "\xe6\x97\xa5\xe6\x9c\xac",
    "\xf0\x9f\x98\x80", "\xe2\x86\x92", "\xc3\xa9t\xc3\xa9",
};
#define N_PIECES (sizeof pieces / sizeof pieces[0])
#define N_VOCAB (3 + 256 + N_PIECES + 2)

int fx_test_load_byte_model(const char *path, uint32_t n_ctx, uint64_t seed,
                            fx_model **model) {
    if (fx_test_write_byte_model(path, n_ctx, seed) != 0) return -1;
    char err[256];
    if (fx_model_load(path, NULL, model, err, sizeof err) == FX_OK) return 0;
    fprintf(stderr, "load %s: %s\n", path, err);
    return -1;
}

uint32_t fx_test_byte_model_vocab(void) { return (uint32_t)N_VOCAB; }

static size_t vocab_kv(gw_buf *b, void *user) {
    (void)user;
    static char bytes[256][8];
    const char *tokens[N_VOCAB];
    float scores[N_VOCAB];
    int32_t types[N_VOCAB];
    uint32_t n = 0;
    tokens[n] = "<unk>", types[n] = 2, scores[n] = 0, n++;
    tokens[n] = "<s>", types[n] = 3, scores[n] = 0, n++;
    tokens[n] = "</s>", types[n] = 3, scores[n] = 0, n++;
    for (int i = 0; i < 256; i++) {
        snprintf(bytes[i], sizeof bytes[i], "<0x%02X>", i);
        tokens[n] = bytes[i], types[n] = 6, scores[n] = 0, n++;
    }
    for (size_t i = 0; i < N_PIECES; i++)
        tokens[n] = pieces[i], types[n] = 1, scores[n] = -1.0f - (float)i, n++;
    tokens[n] = "<|im_end|>", types[n] = 3, scores[n] = 0, n++;
    tokens[n] = "<tool>", types[n] = 4, scores[n] = 0, n++;
    gw_kv_str(b, "tokenizer.ggml.model", "llama");
    gw_kv_arr_str(b, "tokenizer.ggml.tokens", tokens, n);
    gw_kv_arr_f32(b, "tokenizer.ggml.scores", scores, n);
    gw_kv_arr_i32(b, "tokenizer.ggml.token_type", types, n);
    gw_kv_u32(b, "tokenizer.ggml.bos_token_id", FX_BM_BOS);
    gw_kv_u32(b, "tokenizer.ggml.eos_token_id", FX_BM_EOS);
    gw_kv_u32(b, "tokenizer.ggml.unknown_token_id", FX_BM_UNK);
    return 7;
}

int fx_test_write_byte_model(const char *path, uint32_t n_ctx, uint64_t seed) {
    gw_model_spec spec;
    gw_tiny_spec(&spec, n_ctx, seed);
    spec.n_vocab = (uint32_t)N_VOCAB;
    spec.extra_kv = vocab_kv;
    return gw_write_model(path, &spec);
}
