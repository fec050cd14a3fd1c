/*
 * model: architecture hyperparameters and (later) weight binding and the
 * batched forward pass.
 */
#ifndef FX_MODEL_H
#define FX_MODEL_H

#include "../gguf/gguf.h"

typedef enum fx_arch {
    FX_ARCH_UNKNOWN = 0,
    FX_ARCH_LLAMA,  /* Llama 2/3, TinyLlama, Mistral, SmolLM */
    FX_ARCH_QWEN2   /* llama plus biases on Q, K and V */
} fx_arch;

/* The numbers the forward pass is shaped by, read from `{arch}.*` keys. */
typedef struct fx_hparams {
    fx_arch arch;
    uint32_t n_vocab;
    uint32_t n_ctx_train;
    uint32_t n_embd;
    uint32_t n_layer;
    uint32_t n_head;
    uint32_t n_head_kv;
    uint32_t n_ff;
    uint32_t n_rot;        /* RoPE dimensions per head (<= head_dim) */
    uint32_t head_dim;     /* n_embd / n_head */
    float rope_freq_base;
    float rms_norm_eps;
    uint64_t n_params;
} fx_hparams;

fx_arch fx_arch_from_name(const char *name, size_t len);

/* Reads and cross-checks the hyperparameters of a supported architecture
 * and the presence, type and shape of every tensor it needs. */
fx_status fx_hparams_load(const fx_gguf *gguf, fx_hparams *hp, fx_error *err);

/* What a vocabulary-only load can learn: whatever `{arch}.*` keys exist,
 * for any architecture name; absent ones stay 0. */
fx_status fx_hparams_load_partial(const fx_gguf *gguf, fx_hparams *hp,
                                  fx_error *err);

#endif /* FX_MODEL_H */
