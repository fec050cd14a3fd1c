/*
 * ferrox-mkmodel: writes a GGUF model with deterministic random weights, so
 * tests and benchmarks need no download.
 *
 *   ferrox-mkmodel [--arch llama|qwen2] [--dim N] [--layers N] [--heads N]
 *                  [--kv-heads N] [--ffn N] [--ctx N]
 *                  [--type f32|f16|bf16|q8_0] [--seed S] [--tied]
 *                  [--vocab N | --vocab-from VOCAB.gguf] -o OUT.gguf
 *
 * --vocab-from copies every tokenizer.* key of a (vocabulary-only) GGUF,
 * so the model tokenizes real text. The weights are uniform in
 * +-1/sqrt(fan_in) from a splitmix64 stream seeded by --seed: the same
 * arguments give the same file on every machine.
 *
 * A developer tool: it uses the library's internal GGUF reader and the
 * tests' GGUF writer, the same code the test suite builds its models with.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "gguf_writer.h"

static int usage(void) {
    fprintf(stderr,
            "usage: ferrox-mkmodel [--arch llama|qwen2] [--dim N] [--layers N]\n"
            "         [--heads N] [--kv-heads N] [--ffn N] [--ctx N]\n"
            "         [--type f32|f16|bf16|q8_0] [--seed S] [--tied]\n"
            "         [--vocab N | --vocab-from VOCAB.gguf] -o OUT.gguf\n");
    return 2;
}

typedef struct vocab_source {
    fx_gguf *gguf;
} vocab_source;

/* Copies the tokenizer.* entries byte for byte. */
static size_t copy_vocab(gw_buf *b, void *user) {
    const vocab_source *src = user;
    size_t copied = 0;
    for (uint64_t i = 0; i < src->gguf->n_kv; i++) {
        const fx_gguf_kv *kv = &src->gguf->kv[i];
        if (strncmp(kv->key, "tokenizer.", 10) != 0) continue;
        gw_bytes(b, src->gguf->base + kv->offset,
                 (size_t)(kv->end_offset - kv->offset));
        copied++;
    }
    return copied;
}

static int parse_u32(const char *s, uint32_t *out) {
    char *end;
    unsigned long v = strtoul(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v == 0 || v > 0xFFFFFFFFul) return -1;
    *out = (uint32_t)v;
    return 0;
}

int main(int argc, char **argv) {
    gw_model_spec spec;
    gw_model_spec_default(&spec);
    spec.n_vocab = 256;
    spec.n_embd = 256;
    spec.n_layer = 4;
    spec.n_head = 8;
    spec.n_head_kv = 4;
    spec.n_ff = 512;
    spec.n_ctx = 4096;
    const char *out = NULL, *vocab_from = NULL;
    int kv_heads_set = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        uint32_t *num = NULL;
        if (strcmp(a, "--tied") == 0) { spec.tied = 1; continue; }
        if (!v) return usage();
        if (strcmp(a, "--arch") == 0) {
            if (strcmp(v, "llama") != 0 && strcmp(v, "qwen2") != 0) return usage();
            spec.arch = v;
        } else if (strcmp(a, "--type") == 0) {
            if (strcmp(v, "f32") == 0) spec.type = 0;
            else if (strcmp(v, "f16") == 0) spec.type = 1;
            else if (strcmp(v, "bf16") == 0) spec.type = 30;
            else if (strcmp(v, "q8_0") == 0) spec.type = 8;
            else return usage();
        } else if (strcmp(a, "--seed") == 0) {
            spec.seed = strtoull(v, NULL, 10);
        } else if (strcmp(a, "-o") == 0) {
            out = v;
        } else if (strcmp(a, "--vocab-from") == 0) {
            vocab_from = v;
        } else if (strcmp(a, "--dim") == 0) num = &spec.n_embd;
        else if (strcmp(a, "--layers") == 0) num = &spec.n_layer;
        else if (strcmp(a, "--heads") == 0) num = &spec.n_head;
        else if (strcmp(a, "--kv-heads") == 0) { num = &spec.n_head_kv; kv_heads_set = 1; }
        else if (strcmp(a, "--ffn") == 0) num = &spec.n_ff;
        else if (strcmp(a, "--ctx") == 0) num = &spec.n_ctx;
        else if (strcmp(a, "--vocab") == 0) num = &spec.n_vocab;
        else return usage();
        if (num && parse_u32(v, num) != 0) {
            fprintf(stderr, "ferrox-mkmodel: %s needs a positive number\n", a);
            return 2;
        }
        i++;
    }
    if (!out) return usage();
    if (!kv_heads_set) spec.n_head_kv = spec.n_head;
    if (spec.n_embd % spec.n_head != 0 || spec.n_head % spec.n_head_kv != 0 ||
        (spec.type == 8 && (spec.n_embd % 32 != 0 || spec.n_ff % 32 != 0))) {
        fprintf(stderr, "ferrox-mkmodel: dim must divide into heads, heads "
                        "into kv-heads, and q8_0 needs dim and ffn multiples "
                        "of 32\n");
        return 2;
    }

    vocab_source src = {NULL};
    if (vocab_from) {
        fx_alloc alloc;
        fx_alloc_init(&alloc, NULL);
        fx_error err;
        if (fx_gguf_open(vocab_from, &alloc, &src.gguf, &err) != FX_OK) {
            fprintf(stderr, "ferrox-mkmodel: %s: %s\n", vocab_from, err.message);
            return 1;
        }
        const fx_gguf_kv *tokens = fx_gguf_find(src.gguf, "tokenizer.ggml.tokens");
        if (!tokens || tokens->type != FX_GGUF_ARRAY || tokens->count == 0 ||
            tokens->count > 0xFFFFFFu) {
            fprintf(stderr, "ferrox-mkmodel: %s has no token list\n", vocab_from);
            fx_gguf_close(src.gguf);
            return 1;
        }
        spec.n_vocab = (uint32_t)tokens->count;
        spec.extra_kv = copy_vocab;
        spec.extra_user = &src;
    }

    gw_buf b = {0};
    gw_build_model(&b, &spec);
    fx_gguf_close(src.gguf);
    if (gw_write_file(&b, out) != 0) {
        fprintf(stderr, "ferrox-mkmodel: cannot write %s\n", out);
        gw_free(&b);
        return 1;
    }
    fprintf(stderr, "ferrox-mkmodel: wrote %s (%zu bytes)\n", out, b.len);
    gw_free(&b);
    return 0;
}
