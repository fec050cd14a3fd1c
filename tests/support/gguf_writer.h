/*
 * A GGUF builder for tests: writes files byte by byte so a test can make a
 * valid file, or any particular malformed one, without a model download.
 * Every function appends to a growable buffer; allocation failure aborts
 * the test program (this is test code, not library code).
 */
#ifndef FX_TEST_GGUF_WRITER_H
#define FX_TEST_GGUF_WRITER_H

#include <stddef.h>
#include <stdint.h>

typedef struct gw_buf {
    uint8_t *data;
    size_t len;
    size_t cap;
} gw_buf;

void gw_free(gw_buf *b);
void gw_bytes(gw_buf *b, const void *p, size_t n);
void gw_u8(gw_buf *b, uint8_t v);
void gw_u16(gw_buf *b, uint16_t v);
void gw_u32(gw_buf *b, uint32_t v);
void gw_u64(gw_buf *b, uint64_t v);
void gw_f32(gw_buf *b, float v);
void gw_f64(gw_buf *b, double v);
void gw_str(gw_buf *b, const char *s);          /* u64 length + bytes */
void gw_pad(gw_buf *b, size_t align);          /* zero bytes up to align */
/* Overwrites 4/8 bytes at an earlier offset (to corrupt a field). */
void gw_put_u32_at(gw_buf *b, size_t off, uint32_t v);
void gw_put_u64_at(gw_buf *b, size_t off, uint64_t v);

/* Header: magic, version, n_tensors, n_kv. */
void gw_header(gw_buf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv);

/* Key/value pairs (type ids as in GGUF: 4 u32, 6 f32, 7 bool, 8 string). */
void gw_kv_u32(gw_buf *b, const char *key, uint32_t v);
void gw_kv_i32(gw_buf *b, const char *key, int32_t v);
void gw_kv_u64(gw_buf *b, const char *key, uint64_t v);
void gw_kv_f32(gw_buf *b, const char *key, float v);
void gw_kv_bool(gw_buf *b, const char *key, int v);
void gw_kv_str(gw_buf *b, const char *key, const char *v);
void gw_kv_arr_str(gw_buf *b, const char *key, const char *const *v, size_t n);
void gw_kv_arr_f32(gw_buf *b, const char *key, const float *v, size_t n);
void gw_kv_arr_i32(gw_buf *b, const char *key, const int32_t *v, size_t n);

/* One tensor info record. dims has n_dims entries. */
void gw_tensor_info(gw_buf *b, const char *name, uint32_t n_dims,
                    const uint64_t *dims, uint32_t type, uint64_t offset);

/* Bytes one tensor of this type and shape takes (0 for unknown types):
 * the float types, Q8_0 and the block types of lib/kernels/quants.h. */
uint64_t gw_tensor_bytes(uint32_t type, uint32_t n_dims, const uint64_t *dims);
/* Elements per block of a type gw_tensor_bytes knows (1: float), else 0. */
uint32_t gw_block_elems(uint32_t type);

/* ---- whole files ---- */

/* A small Llama-family model described by its numbers. Weights are
 * deterministic pseudo-random values from `seed`. The vocabulary is
 * n_vocab tokens "<t0>", "<t1>", ... (a minimal SentencePiece-like one)
 * unless the caller adds tokenizer keys itself via extra_kv. */
typedef struct gw_model_spec {
    const char *arch;   /* "llama", "qwen2", "qwen3", "gemma2", "gemma3",
                           "phi3" (fused attn_qkv and gate+up ffn_up) */
    uint32_t n_vocab, n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx;
    uint32_t head_dim;  /* 0: n_embd / n_head, no key written; else
                           attention.key_length and value_length */
    uint32_t n_swa;     /* gemma: attention.sliding_window (0: not written) */
    float attn_softcap, final_softcap; /* gemma2: written unless 0 */
    float rope_base;    /* rope.freq_base; 0: 10000 */
    float rope_factor;  /* linear rope.scaling.factor, 0: not written */
    uint32_t n_ctx_orig; /* phi3 LongRoPE: rope_factors_long/short and
                            rope.scaling.original_context_length (this)
                            and .attn_factor (rope_attn_factor); 0: none */
    float rope_attn_factor;
    uint32_t type;      /* weight type of the 2-D matrices: 0 f32, 1 f16,
                           8 q8_0, 30 bf16, or with `quantize` any type
                           gw_tensor_bytes knows */
    int tied;           /* no output.weight: the embedding is reused */
    uint64_t seed;
    uint32_t alignment; /* 0: default 32, not written */
    /* Optional hook to append extra key/values; returns how many it wrote. */
    size_t (*extra_kv)(gw_buf *b, void *user);
    void *extra_user;
    /* Optional: a tensor to skip ("" none), or one whose dims[0] to
     * increment, to make files with a missing or misshapen tensor. */
    const char *skip_tensor;
    const char *bad_shape_tensor;
    /* Optional: a metadata key not to write ("llama.block_count"), to make
     * files missing a required key. */
    const char *skip_key;
    /* Optional: called after each tensor's data is generated (index from
     * 0, count, name), for tools that show progress. */
    void (*on_tensor)(size_t index, size_t count, const char *name, void *user);
    void *on_tensor_user;
    /* Optional: encodes n floats (whole rows) of the random weights into
     * out as `type`, returning the bytes written: for the block types,
     * whose quantizers live in the static library (gguf_quant.h's
     * gq_encode is one). The floats are those an f32 model of the same
     * seed holds. */
    size_t (*quantize)(uint32_t type, const float *x, size_t n, void *out,
                       void *user);
    void *quantize_user;
} gw_model_spec;

void gw_model_spec_default(gw_model_spec *spec);
/* Builds the whole file into b (b is reset first). */
void gw_build_model(gw_buf *b, const gw_model_spec *spec);

/* Writes the buffer to a file; returns 0 on success. */
int gw_write_file(const gw_buf *b, const char *path);

/* The model spec describes, built and written to path; 0 on success. */
int gw_write_model(const char *path, const gw_model_spec *spec);

/* The smallest useful llama (dim 32, 1 layer, 2 heads over 1 KV head, FFN
 * 48), for tests about bookkeeping rather than numbers: built with the
 * given context and seed and written to path; returns 0 on success. */
int gw_write_tiny_model(const char *path, uint32_t n_ctx, uint64_t seed);
/* The spec gw_write_tiny_model writes, for a caller to adjust. */
void gw_tiny_spec(gw_model_spec *spec, uint32_t n_ctx, uint64_t seed);

#endif /* FX_TEST_GGUF_WRITER_H */
