/*
 * quant_rules: which type each tensor of a model gets when it is quantized
 * to one of llama-quantize's file types ("presets": Q4_K_M, Q3_K_S, ...),
 * the same choice llama.cpp makes (src/llama-quant.cpp,
 * llama_tensor_get_type, Feb 2025), so a file from ferrox-quantize holds
 * the same types as llama-quantize's of the same input.
 *
 * Pure functions over names and shapes: no file access, no allocation.
 * Type ids are ggml's (as GGUF stores them), file types are llama.cpp's
 * LLAMA_FTYPE values (as general.file_type stores them).
 */
#ifndef FX_QUANT_RULES_H
#define FX_QUANT_RULES_H

#include <stddef.h>
#include <stdint.h>

/* ggml type ids of the types a preset can produce. */
enum {
    QR_F32 = 0, QR_F16 = 1, QR_Q4_0 = 2, QR_Q4_1 = 3, QR_Q5_0 = 6,
    QR_Q5_1 = 7, QR_Q8_0 = 8, QR_Q2_K = 10, QR_Q3_K = 11, QR_Q4_K = 12,
    QR_Q5_K = 13, QR_Q6_K = 14, QR_IQ4_NL = 20, QR_IQ4_XS = 23, QR_BF16 = 30
};

/* llama.cpp's LLAMA_FTYPE values of the presets here. */
typedef enum qr_ftype {
    QR_FTYPE_F32 = 0, QR_FTYPE_F16 = 1, QR_FTYPE_Q4_0 = 2, QR_FTYPE_Q4_1 = 3,
    QR_FTYPE_Q8_0 = 7, QR_FTYPE_Q5_0 = 8, QR_FTYPE_Q5_1 = 9,
    QR_FTYPE_Q2_K = 10, QR_FTYPE_Q3_K_S = 11, QR_FTYPE_Q3_K_M = 12,
    QR_FTYPE_Q3_K_L = 13, QR_FTYPE_Q4_K_S = 14, QR_FTYPE_Q4_K_M = 15,
    QR_FTYPE_Q5_K_S = 16, QR_FTYPE_Q5_K_M = 17, QR_FTYPE_Q6_K = 18,
    QR_FTYPE_IQ4_NL = 25, QR_FTYPE_IQ4_XS = 30, QR_FTYPE_BF16 = 32
} qr_ftype;

typedef struct qr_preset {
    const char *name;      /* llama-quantize's spelling: "Q4_K_M" */
    qr_ftype ftype;        /* general.file_type */
    uint32_t default_type; /* the type most tensors get */
} qr_preset;

/* The preset a name means, matched without regard to case as
 * llama-quantize does ("q4_k_m" is Q4_K_M), with its aliases (Q3_K, Q4_K
 * and Q5_K are Q3_K_M, Q4_K_M and Q5_K_M). NULL if unknown. */
const qr_preset *qr_find_preset(const char *name);
/* All presets (*count of them), for usage text. */
const qr_preset *qr_presets(size_t *count);

/* Elements per block of a type id here (1 for the float types), 0 if
 * the type is not one of this file's. */
uint32_t qr_block_elems(uint32_t type);
/* The type's name as ggml spells it ("q4_K"), "?" if unknown. */
const char *qr_type_name(uint32_t type);
/* ggml's quantized types (blocks of more than one element). */
int qr_type_is_quantized(uint32_t type);

/* What the rules know about the model. */
typedef struct qr_model {
    const char *arch;       /* general.architecture */
    uint32_t n_layer;       /* block_count */
    uint32_t n_head, n_head_kv;
    /* qr_plan fills these two from the tensor list: */
    int has_output;         /* an output.weight exists (else tied) */
    int n_attention_wv;     /* tensors named *attn_v.weight, *attn_qkv.weight
                               or *attn_kv_b.weight */
} qr_model;

/* llama.cpp counts the attention-value and FFN tensors it has seen; some
 * choices depend on the count. Zero it before the first tensor and pass
 * the tensors in qr_order_cmp order. */
typedef struct qr_state {
    int i_attention_wv, i_ffn_down, i_ffn_gate, i_ffn_up;
    int n_fallback;         /* tensors that took a fallback type */
} qr_state;

/* llama.cpp's tensor order: by layer number ("blk.N.", others first),
 * then by name bytes. A strcmp-like result. */
int qr_order_cmp(const char *a, const char *b);

/* ggml_n_dims: the index of the last dimension above 1, plus 1 (a
 * [256, 1] tensor has one). */
uint32_t qr_n_dims(const uint64_t ne[4]);

/* Whether llama-quantize converts the tensor at all: weights of two or
 * more dimensions except norms and a few tensors other architectures
 * keep exact. The others are copied as they are. */
int qr_should_quantize(const char *name, const uint64_t ne[4]);

/* The type of a tensor qr_should_quantize accepted. 0 and *type, or -1
 * with a message in why when no type fits its row length (ggml then
 * fails too). pure: every such tensor gets the preset's type. */
int qr_tensor_type(qr_state *st, const qr_model *m, const qr_preset *p,
                   int pure, const char *name, const uint64_t ne[4],
                   uint32_t *type, char *why, size_t why_size);

/* One tensor of a model, for qr_plan. */
typedef struct qr_tensor {
    const char *name;
    uint64_t ne[4];     /* unused dimensions 1 */
    uint32_t type;      /* in: the input's type; out: the output's */
    int convert;        /* out: the data changes type */
    size_t index;       /* the caller's (qr_plan moves the entries) */
} qr_tensor;

/* The whole model: sorts ts into llama.cpp's order (the order of its
 * output file, and the one its counters need) and gives each tensor its
 * type. 0, or -1 with a message naming the tensor whose rows fit no type.
 * *n_fallback (may be NULL): tensors that took a fallback type. */
int qr_plan(qr_model *m, const qr_preset *p, int pure, qr_tensor *ts,
            size_t n, size_t *n_fallback, char *why, size_t why_size);

#endif /* FX_QUANT_RULES_H */
