/*
 * Writes the seed corpus of fuzz_gguf (tests/fuzz/corpus/gguf) with the
 * test GGUF writer: tiny models of each weight type and architecture, a
 * vocabulary-only file of each kind, and a few hand-made odd headers.
 * Not built by CMake; run by hand (see README.md):
 *   cc -std=c11 -Itests/support tests/fuzz/gen_gguf_seeds.c \
 *      tests/support/gguf_writer.c -lm -o /tmp/gen && /tmp/gen tests/fuzz/corpus/gguf
 */
#include <stdio.h>
#include <string.h>

#include "gguf_writer.h"

static const char *dir;

static void save(const gw_buf *b, const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (gw_write_file(b, path) != 0) fprintf(stderr, "cannot write %s\n", path);
}

static void tiny(gw_model_spec *s) {
    gw_model_spec_default(s);
    s->n_vocab = 16;
    s->n_embd = 8;
    s->n_head = 2;
    s->n_head_kv = 1;
    s->n_ff = 8;
    s->n_layer = 1;
    s->n_ctx = 32;
}

static size_t bpe_kv(gw_buf *b, void *user) {
    (void)user;
    static const char *const toks[] = {"a", "b", "ab", "\xC4\xA0", "\xC4\xA0\x61",
                                       "<|endoftext|>", "c", "d", "e", "f",
                                       "g", "h", "i", "j", "k", "l"};
    static const char *const merges[] = {"a b", "\xC4\xA0 a"};
    int32_t types[16];
    for (int i = 0; i < 16; i++) types[i] = i == 5 ? 3 : 1;
    gw_kv_str(b, "tokenizer.ggml.model", "gpt2");
    gw_kv_str(b, "tokenizer.ggml.pre", "llama-bpe");
    gw_kv_arr_str(b, "tokenizer.ggml.tokens", toks, 16);
    gw_kv_arr_i32(b, "tokenizer.ggml.token_type", types, 16);
    gw_kv_arr_str(b, "tokenizer.ggml.merges", merges, 2);
    gw_kv_u32(b, "tokenizer.ggml.eos_token_id", 5);
    return 6;
}

static void vocab_spm(gw_buf *b, uint32_t version) {
    static char names[256][8];
    const char *toks[3 + 256 + 4];
    float scores[3 + 256 + 4];
    int32_t types[3 + 256 + 4];
    size_t n = 0;
    toks[n] = "<unk>", types[n++] = 2;
    toks[n] = "<s>", types[n++] = 3;
    toks[n] = "</s>", types[n++] = 3;
    for (int i = 0; i < 256; i++) {
        snprintf(names[i], sizeof names[i], "<0x%02X>", i);
        toks[n] = names[i], types[n++] = 6;
    }
    toks[n] = "\xE2\x96\x81", types[n++] = 1;
    toks[n] = "\xE2\x96\x81" "hello", types[n++] = 1;
    toks[n] = "wor", types[n++] = 1;
    toks[n] = "<|im_end|>", types[n++] = 4;
    for (size_t i = 0; i < n; i++) scores[i] = -(float)i;
    gw_header(b, version, 0, 9);
    gw_kv_str(b, "general.architecture", "llama");
    gw_kv_str(b, "tokenizer.ggml.model", "llama");
    gw_kv_arr_str(b, "tokenizer.ggml.tokens", toks, n);
    gw_kv_arr_f32(b, "tokenizer.ggml.scores", scores, n);
    gw_kv_arr_i32(b, "tokenizer.ggml.token_type", types, n);
    gw_kv_u32(b, "tokenizer.ggml.bos_token_id", 1);
    gw_kv_u32(b, "tokenizer.ggml.eos_token_id", 2);
    gw_kv_bool(b, "tokenizer.ggml.add_bos_token", 1);
    gw_kv_u64(b, "general.alignment", 32);
}

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    dir = argv[1];
    gw_buf b = {0};
    gw_model_spec s;
    char name[64];

    static const uint32_t types[] = {0, 1, 8, 30};
    for (size_t i = 0; i < 4; i++) {
        tiny(&s);
        s.type = types[i];
        if (types[i] == 8) s.n_embd = 32, s.n_ff = 32; /* q8_0 blocks of 32 */
        gw_build_model(&b, &s);
        snprintf(name, sizeof name, "model_llama_t%u.gguf", types[i]);
        save(&b, name);
    }
    tiny(&s);
    s.arch = "qwen2";
    gw_build_model(&b, &s);
    save(&b, "model_qwen2.gguf");
    tiny(&s);
    s.tied = 1;
    s.alignment = 64;
    gw_build_model(&b, &s);
    save(&b, "model_tied_align64.gguf");
    tiny(&s);
    s.extra_kv = bpe_kv;
    gw_build_model(&b, &s);
    save(&b, "model_bpe.gguf");
    tiny(&s);
    s.skip_tensor = "output_norm.weight";
    gw_build_model(&b, &s);
    save(&b, "model_missing_tensor.gguf");
    tiny(&s);
    s.bad_shape_tensor = "blk.0.attn_q.weight";
    gw_build_model(&b, &s);
    save(&b, "model_bad_shape.gguf");

    gw_free(&b);
    vocab_spm(&b, 3);
    save(&b, "vocab_spm_v3.gguf");
    gw_free(&b);
    vocab_spm(&b, 2);
    save(&b, "vocab_spm_v2.gguf");

    /* Odd headers and values. */
    gw_free(&b);
    gw_header(&b, 3, 0, 0);
    save(&b, "empty_v3.gguf");
    gw_free(&b);
    gw_header(&b, 3, 1, 1);
    gw_kv_u32(&b, "general.alignment", 16);
    uint64_t dims[4] = {4, 3, 2, 1};
    gw_tensor_info(&b, "t", 4, dims, 0, 0);
    gw_pad(&b, 16);
    for (int i = 0; i < 24; i++) gw_f32(&b, (float)i);
    save(&b, "one_tensor_4d.gguf");
    gw_free(&b);
    gw_header(&b, 3, 2, 3);
    gw_kv_u32(&b, "a", 1);
    gw_kv_str(&b, "b", "text");
    {
        const float f[3] = {1, 2, 3};
        gw_kv_arr_f32(&b, "c", f, 3);
    }
    uint64_t d1[1] = {32}, d2[2] = {32, 2};
    gw_tensor_info(&b, "q4", 1, d1, 2, 0);
    gw_tensor_info(&b, "q8", 2, d2, 8, 32);
    gw_pad(&b, 32);
    for (int i = 0; i < 32 + 68; i++) gw_u8(&b, (uint8_t)i);
    save(&b, "quant_tensors.gguf");
    gw_free(&b);
    /* Every value type once, including u8/i8/u16/i16/i64/f64 and nested
     * array headers. */
    gw_header(&b, 3, 0, 10);
    for (uint32_t t = 0; t <= 12; t++) {
        if (t == 8 || t == 9 || t == 7) continue;
        char key[16];
        snprintf(key, sizeof key, "k%u", t);
        gw_str(&b, key);
        gw_u32(&b, t);
        static const uint8_t sz[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
        for (int i = 0; i < sz[t]; i++) gw_u8(&b, (uint8_t)(0x41 + i));
    }
    gw_kv_bool(&b, "bool", 1);
    gw_str(&b, "arr_u16");
    gw_u32(&b, 9);
    gw_u32(&b, 2);
    gw_u64(&b, 3);
    gw_u16(&b, 1), gw_u16(&b, 2), gw_u16(&b, 3);
    gw_str(&b, "arr_arr");
    gw_u32(&b, 9);
    gw_u32(&b, 9);
    gw_u64(&b, 0);
    save(&b, "all_types.gguf");
    gw_free(&b);
    return 0;
}
