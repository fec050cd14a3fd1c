/*
 * ferrox-mkmodel: writes a GGUF model with deterministic random weights, so
 * tests and benchmarks need no download.
 *
 *   ferrox-mkmodel [--arch llama|qwen2|qwen3|gemma2|gemma3|phi3] [--dim N]
 *                  [--layers N] [--heads N] [--kv-heads N] [--head-dim N]
 *                  [--ffn N] [--ctx N] [--swa N] [--longrope N]
 *                  [--type TYPE [--pure]] [--seed S] [--tied]
 *                  [--vocab N | --vocab-from VOCAB.gguf] -o OUT.gguf
 *
 * --vocab-from copies every tokenizer.* key of a (vocabulary-only) GGUF,
 * so the model tokenizes real text. The weights are uniform in
 * +-1/sqrt(fan_in) from a splitmix64 stream seeded by --seed: the same
 * arguments give the same file on every machine. Progress (each tensor
 * as it is generated, then writing) goes to stderr.
 *
 * --type f32, f16, bf16 or q8_0 writes every matrix in that type. Any
 * other of ferrox-quantize's types (q4_0 ... Q4_K_M ...; see its --help)
 * generates the f32 model and converts it as ferrox-quantize would, each
 * tensor getting llama-quantize's type for that preset (or the one type
 * with --pure): the same file as ferrox-quantize makes from the f32 one.
 *
 * A developer tool: it uses the library's internal GGUF reader and the
 * tests' GGUF writer, the same code the test suite builds its models with.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli.h"
#include "gguf/gguf.h"
#include "gguf_quant.h"
#include "gguf_writer.h"

static int usage(FILE *f) {
    fprintf(f,
            "usage: ferrox-mkmodel [--arch llama|qwen2|qwen3|gemma2|gemma3|phi3]\n"
            "         [--dim N] [--layers N] [--heads N] [--kv-heads N]\n"
            "         [--head-dim N] [--ffn N] [--ctx N] [--swa N]\n"
            "         [--longrope N]\n"
            "         [--type TYPE [--pure]] [--seed S] [--tied]\n"
            "         [--vocab N | --vocab-from VOCAB.gguf] -o OUT.gguf\n"
            "Writes a model with deterministic random weights; the same\n"
            "arguments give the same file. TYPE: f32 (default), f16, bf16,\n"
            "q8_0, or any type of ferrox-quantize (q4_0 ... Q4_K_M ...): the\n"
            "f32 model converted as ferrox-quantize converts it. --head-dim\n"
            "writes attention.key_length (heads wider or narrower than\n"
            "dim / heads, as Qwen3's 128 at dim 1024 and 16 heads). --swa:\n"
            "the sliding window of Gemma's local layers (default 512 for\n"
            "gemma3, 4096 for gemma2) or of every phi3 layer (default 0:\n"
            "none). --longrope N: phi3's LongRoPE factor tensors, the long\n"
            "ones for contexts over N positions.\n");
    return f == stdout ? CLI_OK : CLI_USAGE;
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

/* Progress on stderr, one line per tensor as its weights are generated. */
static void tensor_done(size_t index, size_t count, const char *name, void *user) {
    (void)user;
    fprintf(stderr, "ferrox-mkmodel: [%zu/%zu] %s\n", index + 1, count, name);
}

/* The f32 model in b, converted to the preset and written to out. */
static int convert(const gw_buf *b, const qr_preset *preset, int pure,
                   const char *out) {
    fx_alloc alloc;
    fx_alloc_init(&alloc, NULL);
    fx_error err;
    fx_gguf *g = NULL;
    fx_status st = fx_gguf_open_memory(b->data, b->len, &alloc, &g, &err);
    if (st != FX_OK)
        return cli_fail("ferrox-mkmodel", "generated model", fx_status_str(st),
                        err.message);
    fprintf(stderr, "ferrox-mkmodel: converting to %s%s, writing %s\n",
            preset->name, pure ? " (pure)" : "", out);
    gq_options opt = {preset, pure, 4, NULL, NULL};
    char msg[512];
    int rc = gq_quantize_file(g, &opt, out, msg, sizeof msg);
    fx_gguf_close(g);
    if (rc != 0) {
        fprintf(stderr, "ferrox-mkmodel: %s\n", msg);
        remove(out);
        return CLI_FAILED;
    }
    fprintf(stderr, "ferrox-mkmodel: wrote %s\n", out);
    return CLI_OK;
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
    int kv_heads_set = 0, pure = 0;
    const char *type = "f32";
    cli c;
    cli_init(&c, "ferrox-mkmodel", argc, argv);
    while (cli_next(&c)) {
        uint32_t *num = NULL;
        int bad = 0;
        if (cli_is_help(&c)) return usage(stdout);
        else if (cli_is(&c, "--tied")) spec.tied = 1;
        else if (cli_is(&c, "--pure")) pure = 1;
        else if (cli_is(&c, "--seed")) bad = cli_u64(&c, 0, UINT64_MAX, &spec.seed);
        else if (cli_is(&c, "-o")) bad = !(out = cli_value(&c));
        else if (cli_is(&c, "--vocab-from")) bad = !(vocab_from = cli_value(&c));
        else if (cli_is(&c, "--arch")) bad = !(spec.arch = cli_value(&c));
        else if (cli_is(&c, "--type")) bad = !(type = cli_value(&c));
        else if (cli_is(&c, "--dim")) num = &spec.n_embd;
        else if (cli_is(&c, "--layers")) num = &spec.n_layer;
        else if (cli_is(&c, "--heads")) num = &spec.n_head;
        else if (cli_is(&c, "--kv-heads")) num = &spec.n_head_kv, kv_heads_set = 1;
        else if (cli_is(&c, "--head-dim")) num = &spec.head_dim;
        else if (cli_is(&c, "--swa")) num = &spec.n_swa;
        else if (cli_is(&c, "--longrope")) num = &spec.n_ctx_orig;
        else if (cli_is(&c, "--ffn")) num = &spec.n_ff;
        else if (cli_is(&c, "--ctx")) num = &spec.n_ctx;
        else if (cli_is(&c, "--vocab")) num = &spec.n_vocab;
        else return cli_unknown(&c);
        if (num) bad = cli_u32(&c, 1, UINT32_MAX, num);
        if (bad) return CLI_USAGE;
    }
    if (!out) return cli_usage_error(&c, "-o OUT.gguf is required");
    static const char *const arches[] = {"llama", "qwen2", "qwen3", "gemma2",
                                         "gemma3", "phi3"};
    int known = 0;
    for (size_t i = 0; i < sizeof arches / sizeof *arches; i++)
        known |= strcmp(spec.arch, arches[i]) == 0;
    if (!known)
        return cli_usage_error(&c, "--arch: '%s' is not llama, qwen2, qwen3, "
                                   "gemma2, gemma3 or phi3", spec.arch);
    if (spec.n_ctx_orig && strcmp(spec.arch, "phi3") != 0)
        return cli_usage_error(&c, "--longrope is for --arch phi3");
    /* Phi-3.5-mini's: sqrt(1 + ln(32) / ln(4096)) for 128k over 4k */
    spec.rope_attn_factor = 1.1902381f;
    if (spec.n_swa == 0 && strncmp(spec.arch, "gemma", 5) == 0)
        spec.n_swa = strcmp(spec.arch, "gemma3") == 0 ? 512 : 4096;
    /* The types the writer makes itself; the others by quantizing. */
    const qr_preset *preset = NULL;
    if (strcasecmp(type, "f32") == 0) spec.type = 0;
    else if (strcasecmp(type, "f16") == 0) spec.type = 1;
    else if (strcasecmp(type, "bf16") == 0) spec.type = 30;
    else if (strcasecmp(type, "q8_0") == 0) spec.type = 8;
    else if ((preset = qr_find_preset(type)) != NULL) spec.type = 0;
    else
        return cli_usage_error(&c, "--type: '%s' is not f32, f16, bf16, q8_0 "
                                   "or a type of ferrox-quantize", type);
    if (pure && !preset)
        return cli_usage_error(&c, "--pure needs a quantized --type other than q8_0");
    if (!kv_heads_set) spec.n_head_kv = spec.n_head;
    const uint32_t hd = spec.head_dim ? spec.head_dim : spec.n_embd / spec.n_head;
    if ((!spec.head_dim && spec.n_embd % spec.n_head != 0) ||
        spec.n_head % spec.n_head_kv != 0 || hd % 2 != 0 ||
        (spec.type == 8 && (spec.n_embd % 32 != 0 || spec.n_ff % 32 != 0 ||
                            (uint64_t)spec.n_head * hd % 32 != 0))) {
        return cli_usage_error(&c, "dim must divide into heads (unless "
                                   "--head-dim), heads into kv-heads, the "
                                   "head size must be even, and q8_0 needs "
                                   "dim, ffn and heads x head size multiples "
                                   "of 32");
    }

    vocab_source src = {NULL};
    if (vocab_from) {
        fx_alloc alloc;
        fx_alloc_init(&alloc, NULL);
        fx_error err;
        fx_status st = fx_gguf_open(vocab_from, &alloc, &src.gguf, &err);
        if (st != FX_OK)
            return cli_fail("ferrox-mkmodel", vocab_from, fx_status_str(st),
                            err.message);
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

    spec.on_tensor = tensor_done;
    fprintf(stderr, "ferrox-mkmodel: generating %s weights: %u layers, dim %u, "
                    "ffn %u, vocab %u, seed %llu\n",
            type, spec.n_layer, spec.n_embd, spec.n_ff, spec.n_vocab,
            (unsigned long long)spec.seed);
    gw_buf b = {0};
    gw_build_model(&b, &spec);
    fx_gguf_close(src.gguf);
    if (preset) {
        int rc = convert(&b, preset, pure, out);
        gw_free(&b);
        return rc;
    }
    fprintf(stderr, "ferrox-mkmodel: writing %s (%zu bytes)\n", out, b.len);
    if (gw_write_file(&b, out) != 0) {
        fprintf(stderr, "ferrox-mkmodel: cannot write %s\n", out);
        gw_free(&b);
        return 1;
    }
    fprintf(stderr, "ferrox-mkmodel: wrote %s\n", out);
    gw_free(&b);
    return 0;
}
