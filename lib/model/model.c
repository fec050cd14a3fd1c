/*
 * Hyperparameters and tensor-table checks for the supported architectures.
 *
 * Everything the forward pass will index by is checked here, once, at load:
 * a tensor one row short would otherwise be read past its end on the first
 * token, far from the file that caused it.
 */
#include "model.h"

#include "../kernels/quants.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Upper bounds that keep every derived size far from overflow while
 * admitting any real model. */
#define MAX_EMBD 65536u
#define MAX_LAYERS 1024u
#define MAX_HEADS 1024u
#define MAX_FF (1u << 20)
#define MAX_VOCAB (1u << 24)
#define MAX_HEAD_DIM 1024u

fx_arch fx_arch_from_name(const char *name, size_t len) {
    if (len == 5 && memcmp(name, "llama", 5) == 0) return FX_ARCH_LLAMA;
    if (len == 5 && memcmp(name, "qwen2", 5) == 0) return FX_ARCH_QWEN2;
    if (len == 5 && memcmp(name, "qwen3", 5) == 0) return FX_ARCH_QWEN3;
    if (len == 6 && memcmp(name, "gemma2", 6) == 0) return FX_ARCH_GEMMA2;
    if (len == 6 && memcmp(name, "gemma3", 6) == 0) return FX_ARCH_GEMMA3;
    if (len == 4 && memcmp(name, "phi3", 4) == 0) return FX_ARCH_PHI3;
    return FX_ARCH_UNKNOWN;
}

typedef struct key_buf {
    char text[128];
} key_buf;

/* "{arch}.{suffix}"; arch names are short, checked by the caller. */
static const char *arch_key(key_buf *k, const fx_gguf_str *arch,
                            const char *suffix) {
    snprintf(k->text, sizeof k->text, "%.*s.%s", (int)arch->len, arch->ptr,
             suffix);
    return k->text;
}

static fx_status read_arch(const fx_gguf *g, fx_gguf_str *arch,
                           fx_error *err) {
    fx_status st = fx_gguf_get_str(g, "general.architecture", arch, err);
    if (st != FX_OK) return st;
    if (arch->len == 0 || arch->len > 64 || memchr(arch->ptr, '\0', arch->len))
        return fx_fail(err, FX_ERR_BAD_HPARAMS,
                       "general.architecture is empty, over 64 bytes, or "
                       "contains a NUL");
    return FX_OK;
}

/* Linear RoPE scaling: positions times 1 / factor (Gemma 3 4B and up,
 * long-context Llama 2 fine-tunes). rope.scaling.type absent means
 * linear, as in llama.cpp; other types are not applied. */
static fx_status read_rope_scaling(const fx_gguf *g, const fx_gguf_str *arch,
                                   fx_hparams *hp, fx_error *err) {
    key_buf k;
    fx_gguf_str type = {0};
    float factor = 0.0f;
    fx_status st;
    hp->rope_freq_scale = 1.0f;
    if ((st = fx_gguf_get_str_opt(g, arch_key(&k, arch, "rope.scaling.type"),
                                  &type, err)) != FX_OK ||
        (st = fx_gguf_get_f32_opt(g, arch_key(&k, arch, "rope.scaling.factor"),
                                  &factor, err)) != FX_OK)
        return st;
    if (factor == 0.0f &&
        (st = fx_gguf_get_f32_opt(g, arch_key(&k, arch, "rope.scale_linear"),
                                  &factor, err)) != FX_OK)
        return st;
    const bool linear = type.len == 0 ||
                        (type.len == 6 && memcmp(type.ptr, "linear", 6) == 0);
    if (linear && factor != 0.0f) hp->rope_freq_scale = 1.0f / factor;
    /* LongRoPE (Phi-3.5, Phi-4-mini): its factors are tensors; these
     * say when the long ones apply and how much cos and sin grow. */
    hp->rope_attn_factor = 1.0f;
    hp->n_ctx_orig = hp->n_ctx_train;
    if ((st = fx_gguf_get_f32_opt(g, arch_key(&k, arch, "rope.scaling.attn_factor"),
                                  &hp->rope_attn_factor, err)) != FX_OK ||
        (st = fx_gguf_get_u32_opt(
             g, arch_key(&k, arch, "rope.scaling.original_context_length"),
             &hp->n_ctx_orig, err)) != FX_OK)
        return st;
    hp->rope_freq_base_swa = hp->rope_freq_base;
    hp->rope_freq_scale_swa = hp->rope_freq_scale;
    return FX_OK;
}

/* Phi-3's window on every layer. Files converted before the key existed
 * get llama.cpp's values for the models they must be: Phi-3-mini and
 * -medium 4k (2047), -mini 128k (262144), -medium 128k (131072). */
static fx_status read_phi3_window(const fx_gguf *g, const fx_gguf_str *arch,
                                  bool required, fx_hparams *hp,
                                  fx_error *err) {
    key_buf k;
    const char *key = arch_key(&k, arch, "attention.sliding_window");
    hp->swa_period = 0;
    if (fx_gguf_find(g, key)) return fx_gguf_get_u32(g, key, &hp->n_swa, err);
    const uint32_t nl = hp->n_layer, ctx = hp->n_ctx_train;
    if ((nl == 32 || nl == 40) && ctx == 4096) hp->n_swa = 2047;
    else if (nl == 32 && hp->n_head_kv == 32 && ctx == 131072) hp->n_swa = 262144;
    else if (nl == 40 && ctx == 131072) hp->n_swa = 131072;
    else if (required)
        return fx_fail(err, FX_ERR_MISSING,
                       "phi3 without %s (0 for none) is not a model whose "
                       "window is known", key);
    return FX_OK;
}

/* What Gemma 2 and 3 and Phi-3 add to the llama numbers (llama.cpp's
 * defaults where a key is absent), and the query scale of every
 * architecture. */
static fx_status read_arch_numbers(const fx_gguf *g, const fx_gguf_str *arch,
                                   bool required, fx_hparams *hp,
                                   fx_error *err) {
    key_buf k;
    fx_status st;
    hp->attn_scale = hp->head_dim ? 1.0f / sqrtf((float)hp->head_dim) : 0.0f;
    hp->ffn_act = FX_FFN_SILU;
    if (hp->arch == FX_ARCH_PHI3) return read_phi3_window(g, arch, required, hp, err);
    if (hp->arch != FX_ARCH_GEMMA2 && hp->arch != FX_ARCH_GEMMA3) return FX_OK;
    const bool two = hp->arch == FX_ARCH_GEMMA2;
    hp->embd_scale = true;
    hp->post_norms = true;
    hp->ffn_act = FX_FFN_GELU;
    hp->swa_period = two ? 2 : 6;
    hp->n_swa = two ? 4096 : 0;
    st = two || !required
             ? fx_gguf_get_u32_opt(g, arch_key(&k, arch, "attention.sliding_window"),
                                   &hp->n_swa, err)
             : fx_gguf_get_u32(g, arch_key(&k, arch, "attention.sliding_window"),
                               &hp->n_swa, err);
    if (st != FX_OK) return st;
    if (two) {
        hp->attn_softcap = 50.0f;
        hp->final_softcap = 30.0f;
        if ((st = fx_gguf_get_f32_opt(g, arch_key(&k, arch, "attn_logit_softcapping"),
                                      &hp->attn_softcap, err)) != FX_OK ||
            (st = fx_gguf_get_f32_opt(g, arch_key(&k, arch, "final_logit_softcapping"),
                                      &hp->final_softcap, err)) != FX_OK)
            return st;
    } else {
        hp->rope_freq_base_swa = 10000.0f;
        hp->rope_freq_scale_swa = 1.0f;
    }
    /* The 27B models scale queries by n_embd / n_head (168 in Gemma 3
     * 27B), not by their head size (llama.cpp tells them by layer count:
     * 46 layers for Gemma 2, 62 for Gemma 3). */
    if (hp->n_head && hp->n_layer == (two ? 46u : 62u))
        hp->attn_scale = 1.0f / sqrtf((float)(hp->n_embd / hp->n_head));
    return FX_OK;
}

/* Reads every `{arch}.*` number that exists; `required` makes the ones a
 * forward pass cannot do without mandatory. */
static fx_status read_numbers(const fx_gguf *g, const fx_gguf_str *arch,
                              bool required, fx_hparams *hp, fx_error *err) {
    key_buf k;
    fx_status st;
    fx_status (*get)(const fx_gguf *, const char *, uint32_t *, fx_error *) =
        required ? fx_gguf_get_u32 : fx_gguf_get_u32_opt;
    if ((st = get(g, arch_key(&k, arch, "embedding_length"), &hp->n_embd,
                  err)) != FX_OK ||
        (st = get(g, arch_key(&k, arch, "block_count"), &hp->n_layer, err)) !=
            FX_OK ||
        (st = get(g, arch_key(&k, arch, "attention.head_count"), &hp->n_head,
                  err)) != FX_OK ||
        (st = get(g, arch_key(&k, arch, "feed_forward_length"), &hp->n_ff,
                  err)) != FX_OK ||
        (st = get(g, arch_key(&k, arch, "context_length"), &hp->n_ctx_train,
                  err)) != FX_OK)
        return st;
    hp->n_head_kv = hp->n_head; /* no GQA unless the file says so */
    if ((st = fx_gguf_get_u32_opt(g, arch_key(&k, arch, "attention.head_count_kv"),
                                  &hp->n_head_kv, err)) != FX_OK)
        return st;
    hp->head_dim = hp->n_head ? hp->n_embd / hp->n_head : 0;
    /* Qwen3 and Gemma state their head size: 128 at n_embd 1024 and 16
     * heads in Qwen3-0.6B. The value heads must match (one head_dim for
     * the KV cache and attention). */
    uint32_t key_length = 0, value_length = 0;
    if ((st = fx_gguf_get_u32_opt(g, arch_key(&k, arch, "attention.key_length"),
                                  &key_length, err)) != FX_OK ||
        (st = fx_gguf_get_u32_opt(g, arch_key(&k, arch, "attention.value_length"),
                                  &value_length, err)) != FX_OK)
        return st;
    if (key_length != 0) {
        if (value_length != 0 && value_length != key_length)
            return fx_fail(err, FX_ERR_UNSUPPORTED,
                           "attention.key_length %u differs from "
                           "attention.value_length %u",
                           key_length, value_length);
        hp->head_dim = key_length;
        hp->head_dim_stated = true;
    } else if (value_length != 0) {
        return fx_fail(err, FX_ERR_BAD_HPARAMS,
                       "attention.value_length %u without "
                       "attention.key_length", value_length);
    }
    hp->n_rot = hp->head_dim;
    if ((st = fx_gguf_get_u32_opt(g, arch_key(&k, arch, "rope.dimension_count"),
                                  &hp->n_rot, err)) != FX_OK)
        return st;
    hp->rope_freq_base = 10000.0f;
    if ((st = fx_gguf_get_f32_opt(g, arch_key(&k, arch, "rope.freq_base"),
                                  &hp->rope_freq_base, err)) != FX_OK)
        return st;
    hp->rms_norm_eps = 1e-5f;
    if ((st = fx_gguf_get_f32_opt(
             g, arch_key(&k, arch, "attention.layer_norm_rms_epsilon"),
             &hp->rms_norm_eps, err)) != FX_OK)
        return st;
    if ((st = read_rope_scaling(g, arch, hp, err)) != FX_OK ||
        (st = read_arch_numbers(g, arch, required, hp, err)) != FX_OK)
        return st;
    if ((st = fx_gguf_get_u32_opt(g, arch_key(&k, arch, "vocab_size"),
                                  &hp->n_vocab, err)) != FX_OK)
        return st;
    if (hp->n_vocab == 0) {
        const fx_gguf_kv *tokens = fx_gguf_find(g, "tokenizer.ggml.tokens");
        if (tokens && tokens->type == FX_GGUF_ARRAY &&
            tokens->count <= MAX_VOCAB)
            hp->n_vocab = (uint32_t)tokens->count;
    }
    return FX_OK;
}

fx_status fx_hparams_load_partial(const fx_gguf *g, fx_hparams *hp,
                                  fx_error *err) {
    fx_gguf_str arch;
    memset(hp, 0, sizeof *hp);
    fx_status st = read_arch(g, &arch, err);
    if (st != FX_OK) return st;
    hp->arch = fx_arch_from_name(arch.ptr, arch.len);
    return read_numbers(g, &arch, false, hp, err);
}

static fx_status check_numbers(const fx_hparams *hp, fx_error *err) {
#define RANGE(field, lo, hi)                                                  \
    if (hp->field < (lo) || hp->field > (hi))                                 \
        return fx_fail(err, FX_ERR_BAD_HPARAMS,                               \
                       "hyperparameter " #field " = %u is outside %u..%u",    \
                       (unsigned)hp->field, (unsigned)(lo), (unsigned)(hi));
    RANGE(n_embd, 1, MAX_EMBD)
    RANGE(n_layer, 1, MAX_LAYERS)
    RANGE(n_head, 1, MAX_HEADS)
    RANGE(n_head_kv, 1, hp->n_head)
    RANGE(n_ff, 1, MAX_FF)
    RANGE(n_vocab, 1, MAX_VOCAB)
    RANGE(n_ctx_train, 1, UINT32_MAX)
    if (hp->head_dim_stated) {
        RANGE(head_dim, 1, MAX_HEAD_DIM)
    } else if (hp->n_embd % hp->n_head != 0) {
        return fx_fail(err, FX_ERR_BAD_HPARAMS,
                       "embedding size %u is not a multiple of the head "
                       "count %u",
                       hp->n_embd, hp->n_head);
    }
#undef RANGE
    if (hp->n_head % hp->n_head_kv != 0)
        return fx_fail(err, FX_ERR_BAD_HPARAMS,
                       "head count %u is not a multiple of the KV head count "
                       "%u",
                       hp->n_head, hp->n_head_kv);
    if (hp->n_rot == 0 || hp->n_rot % 2 != 0 || hp->n_rot > hp->head_dim)
        return fx_fail(err, FX_ERR_BAD_HPARAMS,
                       "RoPE dimension count %u must be even and between 2 "
                       "and the head size %u",
                       hp->n_rot, hp->head_dim);
    if (!(hp->rope_freq_base > 0.0f) || !isfinite(hp->rope_freq_base))
        return fx_fail(err, FX_ERR_BAD_HPARAMS,
                       "RoPE frequency base %g is not a positive number",
                       (double)hp->rope_freq_base);
    if (!(hp->rope_freq_scale > 0.0f) || !isfinite(hp->rope_freq_scale))
        return fx_fail(err, FX_ERR_BAD_HPARAMS,
                       "RoPE scaling factor %g is not a positive number",
                       (double)(1.0f / hp->rope_freq_scale));
    if (!(hp->attn_softcap >= 0.0f) || !isfinite(hp->attn_softcap) ||
        !(hp->final_softcap >= 0.0f) || !isfinite(hp->final_softcap))
        return fx_fail(err, FX_ERR_BAD_HPARAMS,
                       "logit soft-capping %g / %g is not a positive number",
                       (double)hp->attn_softcap, (double)hp->final_softcap);
    if (hp->swa_period > 0 && hp->n_swa == 0)
        return fx_fail(err, FX_ERR_BAD_HPARAMS,
                       "attention.sliding_window is 0");
    if (!(hp->rope_attn_factor > 0.0f) || !isfinite(hp->rope_attn_factor))
        return fx_fail(err, FX_ERR_BAD_HPARAMS,
                       "RoPE attention factor %g is not a positive number",
                       (double)hp->rope_attn_factor);
    if (!(hp->rms_norm_eps > 0.0f) || !isfinite(hp->rms_norm_eps))
        return fx_fail(err, FX_ERR_BAD_HPARAMS,
                       "RMS norm epsilon %g is not a positive number",
                       (double)hp->rms_norm_eps);
    return FX_OK;
}

typedef enum tensor_kind {
    KIND_MATRIX, /* a weight matrix: any supported weight type */
    KIND_VECTOR  /* norms and biases: f32 only */
} tensor_kind;

/* The weight types the matmuls and the embedding lookup take: the float
 * types, Q8_0 and every block type of quants.h (read in place). */
static bool weight_type_supported(uint32_t type) {
    return type == FX_TYPE_F32 || type == FX_TYPE_F16 ||
           type == FX_TYPE_BF16 || type == FX_TYPE_Q8_0 ||
           fx_qtype_of((fx_wtype)type) != NULL;
}

#define SUPPORTED_WEIGHT_TYPES                                                \
    "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, " \
    "q6_k, iq4_nl and iq4_xs"

/* Checks one tensor's presence, type and shape ([ne0] or [ne0, ne1]). */
static fx_status expect(const fx_gguf *g, const char *name, tensor_kind kind,
                        uint64_t ne0, uint64_t ne1, bool optional,
                        fx_error *err) {
    const fx_gguf_tensor *t = fx_gguf_find_tensor(g, name);
    if (!t) {
        if (optional) return FX_OK;
        return fx_fail(err, FX_ERR_MISSING, "required tensor '%s' is missing",
                       name);
    }
    uint32_t want_dims = kind == KIND_VECTOR ? 1 : 2;
    if (t->n_dims != want_dims || t->ne[0] != ne0 ||
        (want_dims == 2 && t->ne[1] != ne1)) {
        char want[64];
        if (want_dims == 1)
            snprintf(want, sizeof want, "[%llu]", (unsigned long long)ne0);
        else
            snprintf(want, sizeof want, "[%llu, %llu]",
                     (unsigned long long)ne0, (unsigned long long)ne1);
        return fx_fail(err, FX_ERR_BAD_SHAPE,
                       "tensor '%s' at offset %llu has shape [%llu, %llu, "
                       "%llu, %llu] (%u dims); the architecture needs %s",
                       name, (unsigned long long)t->info_offset,
                       (unsigned long long)t->ne[0],
                       (unsigned long long)t->ne[1],
                       (unsigned long long)t->ne[2],
                       (unsigned long long)t->ne[3], t->n_dims, want);
    }
    bool type_ok = kind == KIND_VECTOR ? t->type == FX_TYPE_F32
                                       : weight_type_supported(t->type);
    if (!type_ok)
        return fx_fail(err, kind == KIND_VECTOR ? FX_ERR_BAD_SHAPE
                                                : FX_ERR_UNSUPPORTED,
                       "tensor '%s' at offset %llu has type %s (id %u); %s",
                       name, (unsigned long long)t->info_offset,
                       fx_ggml_type_name(t->type), (unsigned)t->type,
                       kind == KIND_VECTOR
                           ? "norm and bias tensors must be f32"
                           : "supported weight types are "
                             SUPPORTED_WEIGHT_TYPES);
    /* The kernels index a matrix as n rows of fx_wtype_row_bytes each:
     * that must be exactly the bytes the reader placed for the tensor, or
     * a row past the table's idea of its end would be read. */
    if (kind == KIND_MATRIX) {
        const size_t row = fx_wtype_row_bytes((fx_wtype)t->type, (size_t)ne0);
        uint64_t bytes;
        if (row == 0 || !fx_mul_u64(row, ne1, &bytes) || bytes != t->n_bytes)
            return fx_fail(err, FX_ERR_BAD_TENSOR,
                           "tensor '%s' at offset %llu: %llu bytes of type %s "
                           "do not hold %llu rows of %llu elements (%llu "
                           "bytes a row)",
                           name, (unsigned long long)t->info_offset,
                           (unsigned long long)t->n_bytes,
                           fx_ggml_type_name(t->type),
                           (unsigned long long)ne1, (unsigned long long)ne0,
                           (unsigned long long)row);
    }
    return FX_OK;
}

bool fx_model_fused_qkv(const fx_gguf *g, const fx_hparams *hp, uint32_t l) {
    if (hp->arch != FX_ARCH_PHI3) return false;
    char name[64];
    snprintf(name, sizeof name, "blk.%u.attn_qkv.weight", l);
    return fx_gguf_find_tensor(g, name) != NULL;
}

static fx_status check_tensors(const fx_gguf *g, const fx_hparams *hp,
                               fx_error *err) {
    const uint64_t d = hp->n_embd, v = hp->n_vocab, ff = hp->n_ff;
    const uint64_t q_dim = (uint64_t)hp->n_head * hp->head_dim;
    const uint64_t kv_dim = (uint64_t)hp->n_head_kv * hp->head_dim;
    fx_status st;
    if ((st = expect(g, "token_embd.weight", KIND_MATRIX, d, v, false, err)) ||
        (st = expect(g, "output_norm.weight", KIND_VECTOR, d, 0, false, err)) ||
        (st = expect(g, "output.weight", KIND_MATRIX, d, v, true, err)) ||
        (st = expect(g, "rope_freqs.weight", KIND_VECTOR, hp->n_rot / 2, 0,
                     true, err)) ||
        (st = expect(g, "rope_factors_long.weight", KIND_VECTOR, hp->n_rot / 2,
                     0, true, err)) ||
        (st = expect(g, "rope_factors_short.weight", KIND_VECTOR,
                     hp->n_rot / 2, 0, true, err)))
        return st;
    for (uint32_t i = 0; i < hp->n_layer; i++) {
        char name[64];
#define LAYER(suffix, kind, ne0, ne1, optional)                               \
    snprintf(name, sizeof name, "blk.%u." suffix, i);                         \
    if ((st = expect(g, name, kind, ne0, ne1, optional, err)) != FX_OK)       \
        return st;
        LAYER("attn_norm.weight", KIND_VECTOR, d, 0, false)
        if (fx_model_fused_qkv(g, hp, i)) {
            LAYER("attn_qkv.weight", KIND_MATRIX, d, q_dim + 2 * kv_dim, false)
        } else {
            LAYER("attn_q.weight", KIND_MATRIX, d, q_dim, false)
            LAYER("attn_k.weight", KIND_MATRIX, d, kv_dim, false)
            LAYER("attn_v.weight", KIND_MATRIX, d, kv_dim, false)
        }
        LAYER("attn_output.weight", KIND_MATRIX, q_dim, d, false)
        LAYER("ffn_norm.weight", KIND_VECTOR, d, 0, false)
        if (hp->arch == FX_ARCH_PHI3) {
            /* gate and up in one: rows 0..ff-1 the gate, then up */
            LAYER("ffn_up.weight", KIND_MATRIX, d, 2 * ff, false)
        } else {
            LAYER("ffn_gate.weight", KIND_MATRIX, d, ff, false)
            LAYER("ffn_up.weight", KIND_MATRIX, d, ff, false)
        }
        LAYER("ffn_down.weight", KIND_MATRIX, ff, d, false)
        if (hp->arch == FX_ARCH_QWEN2) {
            LAYER("attn_q.bias", KIND_VECTOR, q_dim, 0, false)
            LAYER("attn_k.bias", KIND_VECTOR, kv_dim, 0, false)
            LAYER("attn_v.bias", KIND_VECTOR, kv_dim, 0, false)
        }
        if (hp->arch == FX_ARCH_QWEN3 || hp->arch == FX_ARCH_GEMMA3) {
            LAYER("attn_q_norm.weight", KIND_VECTOR, hp->head_dim, 0, false)
            LAYER("attn_k_norm.weight", KIND_VECTOR, hp->head_dim, 0, false)
        }
        if (hp->post_norms) {
            LAYER("post_attention_norm.weight", KIND_VECTOR, d, 0, false)
            LAYER("post_ffw_norm.weight", KIND_VECTOR, d, 0, false)
        }
#undef LAYER
    }
    return FX_OK;
}

fx_status fx_hparams_load(const fx_gguf *g, fx_hparams *hp, fx_error *err) {
    fx_gguf_str arch;
    memset(hp, 0, sizeof *hp);
    fx_status st = read_arch(g, &arch, err);
    if (st != FX_OK) return st;
    hp->arch = fx_arch_from_name(arch.ptr, arch.len);
    if (hp->arch == FX_ARCH_UNKNOWN)
        return fx_fail(err, FX_ERR_UNSUPPORTED,
                       "architecture '%.*s' is not supported (supported: "
                       "llama, qwen2, qwen3, gemma2, gemma3, phi3)",
                       (int)arch.len, arch.ptr);
    if ((st = read_numbers(g, &arch, true, hp, err)) != FX_OK) return st;
    if (hp->n_vocab == 0) {
        /* Neither {arch}.vocab_size nor a token list: the embedding's row
         * count is the only statement of the vocabulary size left. */
        const fx_gguf_tensor *embd = fx_gguf_find_tensor(g, "token_embd.weight");
        if (embd && embd->n_dims == 2 && embd->ne[1] <= MAX_VOCAB)
            hp->n_vocab = (uint32_t)embd->ne[1];
    }
    if ((st = check_numbers(hp, err)) != FX_OK) return st;
    if ((st = check_tensors(g, hp, err)) != FX_OK) return st;
    hp->n_params = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++)
        /* Tensors do not overlap, so the sum is bounded by a few elements
         * per file byte: it cannot overflow. */
        hp->n_params += g->tensors[i].n_elements;
    return FX_OK;
}
