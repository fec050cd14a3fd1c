/*
 * fuzz_gguf: the GGUF reader (fx_gguf_open_memory) and everything a load
 * runs on top of it -- hyperparameters (full and partial), the vocabulary,
 * weight binding -- then the accessors a host reaches through the model
 * (value formatting, array elements, tensor lookup) and a short tokenize.
 * A small model that binds is then copied as a load copies it and run for a
 * few tokens on a kernel path the last byte picks, so every weight type and
 * shape the loader lets through meets the kernels (docs/reliability.md A
 * 1-12, B 13-16, and issue 38's "never read past its end"). The input is
 * the whole file.
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

static fx_alloc alloc;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    if (fx_alloc_init(&alloc, NULL) != FX_OK) abort();
    return 0;
}

static void check_values(const fx_gguf *g) {
    char small[16], big[512];
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const fx_gguf_kv *kv = &g->kv[i];
        FX_FUZZ_CHECK(kv->key != NULL);
        /* Keys may hold a NUL; the others must be found again. */
        if (strlen(kv->key) == kv->key_len)
            FX_FUZZ_CHECK(fx_gguf_find(g, kv->key) != NULL);
        size_t need = fx_gguf_format_value(kv, small, sizeof small);
        FX_FUZZ_CHECK(need >= 1);
        FX_FUZZ_CHECK(memchr(small, 0, sizeof small) != NULL);
        size_t need2 = fx_gguf_format_value(kv, big, sizeof big);
        FX_FUZZ_CHECK(need2 == need);
        FX_FUZZ_CHECK(memchr(big, 0, sizeof big) != NULL);
        if (kv->type != FX_GGUF_ARRAY || kv->count == 0) continue;
        uint64_t last = kv->count - 1;
        switch (kv->elem_type) {
        case FX_GGUF_U8: case FX_GGUF_I8: case FX_GGUF_U16: case FX_GGUF_I16:
        case FX_GGUF_U32: case FX_GGUF_I32: case FX_GGUF_U64: case FX_GGUF_I64:
        case FX_GGUF_BOOL:
            (void)fx_gguf_array_int(kv, 0);
            (void)fx_gguf_array_int(kv, last);
            break;
        case FX_GGUF_F32: case FX_GGUF_F64:
            (void)fx_gguf_array_float(kv, 0);
            (void)fx_gguf_array_float(kv, last);
            break;
        case FX_GGUF_STRING:
            if (kv->count <= 4096) {
                fx_gguf_str *s = malloc((size_t)kv->count * sizeof *s);
                if (!s) break;
                fx_gguf_array_strings(kv, s);
                for (uint64_t j = 0; j < kv->count; j++) {
                    FX_FUZZ_CHECK(s[j].ptr >= (const char *)g->base);
                    FX_FUZZ_CHECK(s[j].len <= g->size);
                    FX_FUZZ_CHECK((const uint8_t *)s[j].ptr + s[j].len <=
                                  g->base + g->size);
                }
                free(s);
            }
            break;
        default:
            break;
        }
    }
}

static void check_tensors(const fx_gguf *g) {
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const fx_gguf_tensor *t = &g->tensors[i];
        (void)fx_gguf_find_tensor(g, t->name); /* names may hold a NUL */
        FX_FUZZ_CHECK(t->n_dims >= 1 && t->n_dims <= FX_GGUF_MAX_DIMS);
        FX_FUZZ_CHECK(t->data >= g->base);
        FX_FUZZ_CHECK(t->n_bytes <= g->size);
        FX_FUZZ_CHECK(t->data + t->n_bytes <= g->base + g->size);
        if (t->n_bytes) {
            /* Touch the first and last byte: they must be mapped. */
            volatile uint8_t b = t->data[0];
            b = t->data[t->n_bytes - 1];
            (void)b;
        }
        (void)fx_ggml_type_name(t->type);
    }
}

static void exercise_vocab(const struct fx_vocab *v) {
    static const char text[] = "Hello world \xE2\x96\x81 <s> 123\xC3";
    int32_t ids[64];
    size_t n = 0;
    fx_error err;
    fx_status st = fx_vocab_tokenize(v, &alloc, text, sizeof text - 1,
                                     0x3u, ids, 64, &n, &err);
    if (st != FX_OK) return;
    uint32_t nv = fx_vocab_n_tokens(v);
    for (size_t i = 0; i < n; i++) FX_FUZZ_CHECK(ids[i] >= 0 && (uint32_t)ids[i] < nv);
    char out[512];
    size_t nout = 0;
    (void)fx_vocab_detokenize(v, ids, n, 0x2u, out, sizeof out, &nout, &err);
    /* Every token's piece, for small vocabularies. */
    for (uint32_t id = 0; id < nv && id < 512; id++) {
        (void)fx_vocab_token_to_piece(v, (int32_t)id, 0x2u, out, sizeof out,
                                      &nout, &err);
        (void)fx_vocab_token_type(v, (int32_t)id);
    }
}

/* Weights a pass may read: enough for every seed, small enough that a
 * pass under ASan takes milliseconds. */
enum { RUN_MAX_ELEMENTS = 1u << 20, RUN_TOKENS = 3, RUN_CTX = 8 };

static uint64_t weight_elements(const fx_gguf *g) {
    uint64_t n = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        if (g->tensors[i].n_elements > RUN_MAX_ELEMENTS) return UINT64_MAX;
        n += g->tensors[i].n_elements;
    }
    return n;
}

/* What fx_model_load and a batcher do with bound weights: the copy
 * (eager, or lazily a slice a pass), a kernel context, a forward pass of
 * RUN_TOKENS tokens and then one more. Any failure must be a status. */
static void run_model(const fx_gguf *g, const fx_hparams *hp, fx_weights *w,
                      const uint8_t *data, size_t size) {
    uint8_t pick = size ? data[size - 1] : 0;
    fx_error err;
    if (fx_weights_repack(w, hp, g, (pick & 4) != 0, &alloc, &err) != FX_OK)
        return;
    static const fx_isa isas[3] = {FX_ISA_PORTABLE, FX_ISA_AVX2, FX_ISA_AVX512};
    fx_kernels_params kp;
    fx_kernels_params_init(&kp);
    kp.isa = isas[(pick & 3) % 3];
    kp.n_threads = 1 + ((pick >> 3) & 1);
    fx_kernels *kc = NULL;
    if (fx_kernels_create(&alloc, &kp, &kc, &err) != FX_OK) {
        kp.isa = FX_ISA_PORTABLE;  /* this CPU lacks the ISA picked */
        if (fx_kernels_create(&alloc, &kp, &kc, &err) != FX_OK) return;
    }
    fx_forward *f = NULL;
    size_t kv_elems = fx_kv_block_elems(hp, RUN_CTX);
    float *kv = calloc(kv_elems ? kv_elems : 1, sizeof *kv);
    float *logits = calloc((size_t)hp->n_vocab * RUN_TOKENS, sizeof *logits);
    if (kv && logits &&
        fx_forward_create(&alloc, hp, w, kc, RUN_TOKENS, RUN_CTX, &f, &err) ==
            FX_OK) {
        void *blocks[1] = {kv};
        fx_kv_view view = {.blocks = blocks, .n_blocks = 1,
                           .block_tokens = RUN_CTX,
                           .run_stride = (size_t)RUN_CTX * hp->head_dim};
        fx_fwd_token t[RUN_TOKENS];
        for (uint32_t i = 0; i < RUN_TOKENS; i++) {
            uint8_t b = size > i + 2 ? data[size - 2 - i] : 0;
            t[i] = (fx_fwd_token){(int32_t)(b % hp->n_vocab), i, 0, 1};
        }
        FX_FUZZ_CHECK(fx_forward_run(f, t, RUN_TOKENS, &view, 1, logits, 0,
                                     &err) == FX_OK);
        fx_fwd_token next = {t[0].token, RUN_TOKENS, 0, 1};
        FX_FUZZ_CHECK(fx_forward_run(f, &next, 1, &view, 1, logits, 0,
                                     &err) == FX_OK);
        fx_forward_free(f);
    }
    free(kv);
    free(logits);
    fx_kernels_free(kc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fx_gguf *g = NULL;
    fx_error err;
    fx_status st = fx_gguf_open_memory(data, size, &alloc, &g, &err);
    if (st != FX_OK) {
        FX_FUZZ_CHECK(g == NULL);
        FX_FUZZ_CHECK(memchr(err.message, 0, sizeof err.message) != NULL);
        return 0;
    }
    FX_FUZZ_CHECK(g != NULL);
    check_values(g);
    check_tensors(g);

    fx_hparams hp;
    memset(&hp, 0, sizeof hp);
    (void)fx_hparams_load_partial(g, &hp, &err);
    memset(&hp, 0, sizeof hp);
    int full = fx_hparams_load(g, &hp, &err) == FX_OK;

    struct fx_vocab *v = NULL;
    if (fx_vocab_load(g, &alloc, NULL, &v, &err) == FX_OK) {
        exercise_vocab(v);
        fx_vocab_free(v);
    }
    if (full) {
        fx_weights w;
        memset(&w, 0, sizeof w);
        if (fx_weights_bind(g, &hp, &alloc, &w, &err) == FX_OK) {
            if (weight_elements(g) <= RUN_MAX_ELEMENTS)
                run_model(g, &hp, &w, data, size);
            fx_weights_free(&w, &alloc);
        }
    }
    fx_gguf_close(g);
    return 0;
}
