/* Helpers shared by the fuzz targets; see fuzz_common.h. */
#include "fuzz_common.h"

#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "gguf_writer.h"
#include "tokenizer/tokenizer.h"

#ifndef FX_TEST_DATA_DIR
#define FX_TEST_DATA_DIR "tests/data"
#endif

const char *fz_vocab_dir(void) {
    const char *env = getenv("FX_FUZZ_VOCAB_DIR");
    return env && *env ? env : FX_TEST_DATA_DIR "/vocab";
}

static const char *const tiny_words[] = {
    "\xE2\x96\x81", "\xE2\x96\x81the", "\xE2\x96\x81\x61", "he", "llo",
    "\xE2\x96\x81hello", "\xE2\x96\x81world", "<|im_end|>", "{", "}", "\"",
    ":", ",", "[", "]", "true", "\xE2\x96\x81\xE2\x96\x81", "ab", "aa",
    "\xC3\xA9", "\xF0\x9F\x98\x80",
};
#define N_WORDS (sizeof tiny_words / sizeof tiny_words[0])
#define N_TINY (3 + 256 + N_WORDS)

static gw_buf tiny_buf;

struct fx_vocab *fz_tiny_spm_vocab(const fx_alloc *alloc) {
    static char byte_names[256][8];
    const char *tokens[N_TINY];
    float scores[N_TINY];
    int32_t types[N_TINY];
    size_t n = 0;
    tokens[n] = "<unk>", types[n++] = 2;
    tokens[n] = "<s>", types[n++] = 3;
    tokens[n] = "</s>", types[n++] = 3;
    for (int i = 0; i < 256; i++) {
        snprintf(byte_names[i], sizeof byte_names[i], "<0x%02X>", i);
        tokens[n] = byte_names[i], types[n++] = 6;
    }
    for (size_t i = 0; i < N_WORDS; i++) {
        tokens[n] = tiny_words[i];
        types[n++] = strcmp(tiny_words[i], "<|im_end|>") == 0 ? 3 : 1;
    }
    for (size_t i = 0; i < n; i++) scores[i] = -(float)i;

    gw_free(&tiny_buf);
    gw_header(&tiny_buf, 3, 0, 8);
    gw_kv_str(&tiny_buf, "general.architecture", "llama");
    gw_kv_str(&tiny_buf, "tokenizer.ggml.model", "llama");
    gw_kv_arr_str(&tiny_buf, "tokenizer.ggml.tokens", tokens, n);
    gw_kv_arr_f32(&tiny_buf, "tokenizer.ggml.scores", scores, n);
    gw_kv_arr_i32(&tiny_buf, "tokenizer.ggml.token_type", types, n);
    gw_kv_u32(&tiny_buf, "tokenizer.ggml.bos_token_id", 1);
    gw_kv_u32(&tiny_buf, "tokenizer.ggml.eos_token_id", 2);
    gw_kv_u32(&tiny_buf, "tokenizer.ggml.unknown_token_id", 0);

    fx_gguf *g = NULL;
    fx_error err;
    if (fx_gguf_open_memory(tiny_buf.data, tiny_buf.len, alloc, &g, &err) !=
        FX_OK) {
        fprintf(stderr, "tiny vocab: %s\n", err.message);
        return NULL;
    }
    struct fx_vocab *v = NULL;
    if (fx_vocab_load(g, alloc, NULL, &v, &err) != FX_OK) {
        fprintf(stderr, "tiny vocab: %s\n", err.message);
        v = NULL;
    }
    fx_gguf_close(g); /* the vocabulary copies its texts out */
    return v;
}
