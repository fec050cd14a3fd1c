#include "gguf_writer.h"
#include "test_rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void reserve(gw_buf *b, size_t n) {
    if (b->len + n <= b->cap) return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n) cap *= 2;
    uint8_t *p = realloc(b->data, cap);
    if (!p) {
        fprintf(stderr, "gguf_writer: out of memory\n");
        exit(1); /* test support code, never linked into the library */
    }
    b->data = p;
    b->cap = cap;
}

void gw_free(gw_buf *b) {
    free(b->data);
    memset(b, 0, sizeof *b);
}

void gw_bytes(gw_buf *b, const void *p, size_t n) {
    reserve(b, n);
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
}

static void put_le(gw_buf *b, uint64_t v, unsigned bytes) {
    uint8_t tmp[8];
    for (unsigned i = 0; i < bytes; i++) tmp[i] = (uint8_t)(v >> (8 * i));
    gw_bytes(b, tmp, bytes);
}

void gw_u8(gw_buf *b, uint8_t v) { put_le(b, v, 1); }
void gw_u16(gw_buf *b, uint16_t v) { put_le(b, v, 2); }
void gw_u32(gw_buf *b, uint32_t v) { put_le(b, v, 4); }
void gw_u64(gw_buf *b, uint64_t v) { put_le(b, v, 8); }

void gw_f32(gw_buf *b, float v) {
    uint32_t bits;
    memcpy(&bits, &v, 4);
    gw_u32(b, bits);
}

void gw_f64(gw_buf *b, double v) {
    uint64_t bits;
    memcpy(&bits, &v, 8);
    gw_u64(b, bits);
}

void gw_str(gw_buf *b, const char *s) {
    size_t n = strlen(s);
    gw_u64(b, n);
    gw_bytes(b, s, n);
}

void gw_pad(gw_buf *b, size_t align) {
    while (b->len % align) gw_u8(b, 0);
}

void gw_put_u32_at(gw_buf *b, size_t off, uint32_t v) {
    for (unsigned i = 0; i < 4; i++) b->data[off + i] = (uint8_t)(v >> (8 * i));
}

void gw_put_u64_at(gw_buf *b, size_t off, uint64_t v) {
    for (unsigned i = 0; i < 8; i++) b->data[off + i] = (uint8_t)(v >> (8 * i));
}

void gw_header(gw_buf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    gw_bytes(b, "GGUF", 4);
    gw_u32(b, version);
    gw_u64(b, n_tensors);
    gw_u64(b, n_kv);
}

void gw_kv_u32(gw_buf *b, const char *key, uint32_t v) {
    gw_str(b, key);
    gw_u32(b, 4);
    gw_u32(b, v);
}

void gw_kv_i32(gw_buf *b, const char *key, int32_t v) {
    gw_str(b, key);
    gw_u32(b, 5);
    gw_u32(b, (uint32_t)v);
}

void gw_kv_u64(gw_buf *b, const char *key, uint64_t v) {
    gw_str(b, key);
    gw_u32(b, 10);
    gw_u64(b, v);
}

void gw_kv_f32(gw_buf *b, const char *key, float v) {
    gw_str(b, key);
    gw_u32(b, 6);
    gw_f32(b, v);
}

void gw_kv_bool(gw_buf *b, const char *key, int v) {
    gw_str(b, key);
    gw_u32(b, 7);
    gw_u8(b, v ? 1 : 0);
}

void gw_kv_str(gw_buf *b, const char *key, const char *v) {
    gw_str(b, key);
    gw_u32(b, 8);
    gw_str(b, v);
}

void gw_kv_arr_str(gw_buf *b, const char *key, const char *const *v, size_t n) {
    gw_str(b, key);
    gw_u32(b, 9);
    gw_u32(b, 8);
    gw_u64(b, n);
    for (size_t i = 0; i < n; i++) gw_str(b, v[i]);
}

void gw_kv_arr_f32(gw_buf *b, const char *key, const float *v, size_t n) {
    gw_str(b, key);
    gw_u32(b, 9);
    gw_u32(b, 6);
    gw_u64(b, n);
    for (size_t i = 0; i < n; i++) gw_f32(b, v[i]);
}

void gw_kv_arr_i32(gw_buf *b, const char *key, const int32_t *v, size_t n) {
    gw_str(b, key);
    gw_u32(b, 9);
    gw_u32(b, 5);
    gw_u64(b, n);
    for (size_t i = 0; i < n; i++) gw_u32(b, (uint32_t)v[i]);
}

void gw_tensor_info(gw_buf *b, const char *name, uint32_t n_dims,
                    const uint64_t *dims, uint32_t type, uint64_t offset) {
    gw_str(b, name);
    gw_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) gw_u64(b, dims[d]);
    gw_u32(b, type);
    gw_u64(b, offset);
}

/* ggml's block layouts: elements and bytes per block. */
static int block_layout(uint32_t type, uint32_t *elems, uint32_t *bytes) {
    static const struct { uint32_t type, elems, bytes; } t[] = {
        {0, 1, 4},     {1, 1, 2},     {30, 1, 2},    {2, 32, 18},
        {3, 32, 20},   {6, 32, 22},   {7, 32, 24},   {8, 32, 34},
        {10, 256, 84}, {11, 256, 110}, {12, 256, 144}, {13, 256, 176},
        {14, 256, 210}, {20, 32, 18}, {23, 256, 136}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        if (t[i].type == type) {
            *elems = t[i].elems;
            *bytes = t[i].bytes;
            return 1;
        }
    }
    return 0;
}

uint32_t gw_block_elems(uint32_t type) {
    uint32_t e, b;
    return block_layout(type, &e, &b) ? e : 0;
}

uint64_t gw_tensor_bytes(uint32_t type, uint32_t n_dims, const uint64_t *dims) {
    uint64_t elems = 1;
    for (uint32_t d = 0; d < n_dims; d++) elems *= dims[d];
    uint32_t be, bb;
    if (!block_layout(type, &be, &bb)) return 0;
    return elems / be * bb;
}

/* ---- whole models ---- */

/* Uniform in [-scale, scale), reproducible from the seed on every
 * platform (test_rng.h). */
static float random_weight(uint64_t *state, float scale) {
    return (float)((2.0 * fx_test_rng_unit(state) - 1.0) * scale);
}

static uint16_t f32_to_f16_bits(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    int32_t exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
    uint32_t mant = x & 0x7fffff;
    if (exp <= 0) {
        /* Small test weights never need subnormals; flush them. */
        return (uint16_t)sign;
    }
    if (exp >= 31) return (uint16_t)(sign | 0x7c00);
    uint32_t h = sign | ((uint32_t)exp << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++; /* nearest even */
    return (uint16_t)h;
}

static uint16_t f32_to_bf16_bits(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t rounding = 0x7fff + ((x >> 16) & 1);
    return (uint16_t)((x + rounding) >> 16);
}

typedef struct tensor_plan {
    char name[64];
    uint32_t n_dims;
    uint64_t dims[2];
    uint32_t type;
    uint64_t offset;
    uint64_t bytes;
} tensor_plan;

static void write_tensor_data(gw_buf *b, const tensor_plan *t, uint64_t *rng,
                              const gw_model_spec *s) {
    uint64_t elems = t->dims[0] * (t->n_dims > 1 ? t->dims[1] : 1);
    float scale = t->n_dims == 1 ? 0.1f : 1.0f / sqrtf((float)t->dims[0]);
    if (t->n_dims == 1) {
        /* Norm weights near 1 keep activations in range. */
        for (uint64_t i = 0; i < elems; i++)
            gw_f32(b, 1.0f + random_weight(rng, scale));
        return;
    }
    if (t->type != 0 && t->type != 1 && t->type != 8 && t->type != 30) {
        /* A block type: the f32 model's floats, encoded by the hook. */
        float *x = malloc(elems * sizeof *x);
        uint8_t *out = malloc(t->bytes ? t->bytes : 1);
        if (!x || !out || !s->quantize) {
            fprintf(stderr, "gguf_writer: type %u needs the quantize hook\n",
                    t->type);
            exit(1);
        }
        for (uint64_t i = 0; i < elems; i++) x[i] = random_weight(rng, scale);
        size_t n = s->quantize(t->type, x, elems, out, s->quantize_user);
        if (n != t->bytes) {
            fprintf(stderr, "gguf_writer: the hook wrote %zu bytes of %llu\n",
                    n, (unsigned long long)t->bytes);
            exit(1);
        }
        gw_bytes(b, out, n);
        free(x);
        free(out);
        return;
    }
    if (t->type == 8) {
        for (uint64_t blk = 0; blk < elems / 32; blk++) {
            float x[32], amax = 0.0f;
            for (int i = 0; i < 32; i++) {
                x[i] = random_weight(rng, scale);
                if (fabsf(x[i]) > amax) amax = fabsf(x[i]);
            }
            float d = amax / 127.0f;
            gw_u16(b, f32_to_f16_bits(d));
            for (int i = 0; i < 32; i++) {
                int q = d > 0.0f ? (int)lroundf(x[i] / d) : 0;
                gw_u8(b, (uint8_t)(int8_t)q);
            }
        }
        return;
    }
    for (uint64_t i = 0; i < elems; i++) {
        float w = random_weight(rng, scale);
        if (t->type == 0) gw_f32(b, w);
        else if (t->type == 1) gw_u16(b, f32_to_f16_bits(w));
        else gw_u16(b, f32_to_bf16_bits(w));
    }
}

void gw_model_spec_default(gw_model_spec *spec) {
    memset(spec, 0, sizeof *spec);
    spec->arch = "llama";
    spec->n_vocab = 64;
    spec->n_embd = 64;
    spec->n_layer = 2;
    spec->n_head = 4;
    spec->n_head_kv = 2;
    spec->n_ff = 96;
    spec->n_ctx = 256;
    spec->type = 0;
    spec->seed = 1;
}

static size_t plan_tensors(const gw_model_spec *s, tensor_plan *plan) {
    size_t n = 0;
    uint64_t d = s->n_embd, hd = s->head_dim ? s->head_dim : s->n_embd / s->n_head;
    uint64_t q = s->n_head * hd, kv = s->n_head_kv * hd;
#define ADD(nm, nd, d0, d1, ty)                                               \
    do {                                                                      \
        tensor_plan *t = &plan[n++];                                          \
        snprintf(t->name, sizeof t->name, "%s", nm);                          \
        t->n_dims = nd;                                                       \
        t->dims[0] = d0;                                                      \
        t->dims[1] = d1;                                                      \
        t->type = ty;                                                         \
    } while (0)
    ADD("token_embd.weight", 2, d, s->n_vocab, s->type);
    ADD("output_norm.weight", 1, d, 1, 0);
    if (s->n_ctx_orig) {
        ADD("rope_factors_long.weight", 1, hd / 2, 1, 0);
        ADD("rope_factors_short.weight", 1, hd / 2, 1, 0);
    }
    if (!s->tied) ADD("output.weight", 2, d, s->n_vocab, s->type);
    for (uint32_t i = 0; i < s->n_layer; i++) {
        char nm[64];
#define LAYER(suffix, nd, d0, d1, ty)                                         \
    snprintf(nm, sizeof nm, "blk.%u." suffix, i);                             \
    ADD(nm, nd, d0, d1, ty);
        const int phi3 = strcmp(s->arch, "phi3") == 0;
        LAYER("attn_norm.weight", 1, d, 1, 0)
        if (phi3) {
            LAYER("attn_qkv.weight", 2, d, q + 2 * kv, s->type)
        } else {
            LAYER("attn_q.weight", 2, d, q, s->type)
            LAYER("attn_k.weight", 2, d, kv, s->type)
            LAYER("attn_v.weight", 2, d, kv, s->type)
        }
        LAYER("attn_output.weight", 2, q, d, s->type)
        if (strcmp(s->arch, "qwen2") == 0) {
            LAYER("attn_q.bias", 1, q, 1, 0)
            LAYER("attn_k.bias", 1, kv, 1, 0)
            LAYER("attn_v.bias", 1, kv, 1, 0)
        }
        const int gemma = strncmp(s->arch, "gemma", 5) == 0;
        if (strcmp(s->arch, "qwen3") == 0 || strcmp(s->arch, "gemma3") == 0) {
            LAYER("attn_q_norm.weight", 1, hd, 1, 0)
            LAYER("attn_k_norm.weight", 1, hd, 1, 0)
        }
        if (gemma) {
            LAYER("post_attention_norm.weight", 1, d, 1, 0)
        }
        LAYER("ffn_norm.weight", 1, d, 1, 0)
        if (phi3) {
            LAYER("ffn_up.weight", 2, d, 2 * (uint64_t)s->n_ff, s->type)
        } else {
            LAYER("ffn_gate.weight", 2, d, s->n_ff, s->type)
            LAYER("ffn_up.weight", 2, d, s->n_ff, s->type)
        }
        LAYER("ffn_down.weight", 2, s->n_ff, d, s->type)
        if (gemma) {
            LAYER("post_ffw_norm.weight", 1, d, 1, 0)
        }
#undef LAYER
    }
#undef ADD
    return n;
}

void gw_build_model(gw_buf *b, const gw_model_spec *s) {
    b->len = 0;
    size_t cap = 3 + (size_t)s->n_layer * 14;
    tensor_plan *plan = calloc(cap, sizeof *plan);
    if (!plan) exit(1);
    size_t n_plan = plan_tensors(s, plan);

    /* Drop or misshape tensors on request, for the negative tests. */
    size_t n = 0;
    for (size_t i = 0; i < n_plan; i++) {
        if (s->skip_tensor && strcmp(plan[i].name, s->skip_tensor) == 0)
            continue;
        if (s->bad_shape_tensor && strcmp(plan[i].name, s->bad_shape_tensor) == 0)
            plan[i].dims[0] += gw_block_elems(plan[i].type) ? gw_block_elems(plan[i].type) : 1;
        plan[n++] = plan[i];
    }
    uint32_t align = s->alignment ? s->alignment : 32;
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        plan[i].bytes = gw_tensor_bytes(plan[i].type, plan[i].n_dims, plan[i].dims);
        plan[i].offset = off;
        off += plan[i].bytes;
        off = (off + align - 1) / align * align;
    }

    /* Metadata: the header's key count is patched after the hooks ran. */
    gw_header(b, 3, n, 0);
    size_t n_kv = 0;
    char key[96];
    const char *a = s->arch;
#define KEY(suffix) (snprintf(key, sizeof key, "%s." suffix, a), key)
    /* Each key unless the spec asks to leave it out. */
#define PUT(fn, k, v)                                                   \
    do {                                                                \
        const char *k_ = (k);                                           \
        if (!s->skip_key || strcmp(k_, s->skip_key) != 0) {             \
            fn(b, k_, v);                                               \
            n_kv++;                                                     \
        }                                                               \
    } while (0)
    PUT(gw_kv_str, "general.architecture", a);
    PUT(gw_kv_str, "general.name", "synthetic");
    if (s->alignment) PUT(gw_kv_u32, "general.alignment", s->alignment);
    PUT(gw_kv_u32, KEY("context_length"), s->n_ctx);
    PUT(gw_kv_u32, KEY("embedding_length"), s->n_embd);
    PUT(gw_kv_u32, KEY("block_count"), s->n_layer);
    PUT(gw_kv_u32, KEY("feed_forward_length"), s->n_ff);
    PUT(gw_kv_u32, KEY("attention.head_count"), s->n_head);
    PUT(gw_kv_u32, KEY("attention.head_count_kv"), s->n_head_kv);
    if (s->n_swa || strcmp(a, "phi3") == 0)
        PUT(gw_kv_u32, KEY("attention.sliding_window"), s->n_swa);
    if (s->n_ctx_orig) {
        PUT(gw_kv_u32, KEY("rope.scaling.original_context_length"), s->n_ctx_orig);
        PUT(gw_kv_f32, KEY("rope.scaling.attn_factor"), s->rope_attn_factor);
    }
    if (s->attn_softcap != 0.0f)
        PUT(gw_kv_f32, KEY("attn_logit_softcapping"), s->attn_softcap);
    if (s->final_softcap != 0.0f)
        PUT(gw_kv_f32, KEY("final_logit_softcapping"), s->final_softcap);
    if (s->head_dim) {
        PUT(gw_kv_u32, KEY("attention.key_length"), s->head_dim);
        PUT(gw_kv_u32, KEY("attention.value_length"), s->head_dim);
    }
    PUT(gw_kv_f32, KEY("attention.layer_norm_rms_epsilon"), 1e-5f);
    PUT(gw_kv_f32, KEY("rope.freq_base"), s->rope_base ? s->rope_base : 10000.0f);
    if (s->rope_factor != 0.0f) {
        PUT(gw_kv_str, KEY("rope.scaling.type"), "linear");
        PUT(gw_kv_f32, KEY("rope.scaling.factor"), s->rope_factor);
    }
#undef PUT
#undef KEY
    if (s->extra_kv) {
        n_kv += s->extra_kv(b, s->extra_user);
    } else {
        /* A minimal SentencePiece-style vocabulary: <unk>, <s>, </s>, then
         * the 256 byte tokens if they fit, then plain pieces. */
        char **tokens = calloc(s->n_vocab, sizeof *tokens);
        float *scores = calloc(s->n_vocab, sizeof *scores);
        int32_t *types = calloc(s->n_vocab, sizeof *types);
        if (!tokens || !scores || !types) exit(1);
        for (uint32_t i = 0; i < s->n_vocab; i++) {
            tokens[i] = malloc(16);
            if (!tokens[i]) exit(1);
            if (i == 0) snprintf(tokens[i], 16, "<unk>"), types[i] = 2;
            else if (i == 1) snprintf(tokens[i], 16, "<s>"), types[i] = 3;
            else if (i == 2) snprintf(tokens[i], 16, "</s>"), types[i] = 3;
            else snprintf(tokens[i], 16, "<t%u>", i), types[i] = 1;
            scores[i] = -(float)i;
        }
        gw_kv_str(b, "tokenizer.ggml.model", "llama"), n_kv++;
        gw_kv_arr_str(b, "tokenizer.ggml.tokens", (const char *const *)tokens,
                      s->n_vocab), n_kv++;
        gw_kv_arr_f32(b, "tokenizer.ggml.scores", scores, s->n_vocab), n_kv++;
        gw_kv_arr_i32(b, "tokenizer.ggml.token_type", types, s->n_vocab), n_kv++;
        gw_kv_u32(b, "tokenizer.ggml.bos_token_id", 1), n_kv++;
        gw_kv_u32(b, "tokenizer.ggml.eos_token_id", 2), n_kv++;
        gw_kv_u32(b, "tokenizer.ggml.unknown_token_id", 0), n_kv++;
        for (uint32_t i = 0; i < s->n_vocab; i++) free(tokens[i]);
        free(tokens);
        free(scores);
        free(types);
    }
    gw_put_u64_at(b, 16, n_kv);

    for (size_t i = 0; i < n; i++)
        gw_tensor_info(b, plan[i].name, plan[i].n_dims, plan[i].dims,
                       plan[i].type, plan[i].offset);
    gw_pad(b, align);
    size_t data_start = b->len;
    uint64_t rng = s->seed;
    for (size_t i = 0; i < n; i++) {
        while (b->len < data_start + plan[i].offset) gw_u8(b, 0);
        write_tensor_data(b, &plan[i], &rng, s);
        if (s->on_tensor) s->on_tensor(i, n, plan[i].name, s->on_tensor_user);
    }
    free(plan);
}

int gw_write_file(const gw_buf *b, const char *path) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = b->len ? fwrite(b->data, 1, b->len, f) : 0;
    int rc = fclose(f);
    return (w == b->len && rc == 0) ? 0 : -1;
}

int gw_write_model(const char *path, const gw_model_spec *spec) {
    gw_buf buf = {0};
    gw_build_model(&buf, spec);
    int rc = gw_write_file(&buf, path);
    gw_free(&buf);
    return rc;
}

void gw_tiny_spec(gw_model_spec *spec, uint32_t n_ctx, uint64_t seed) {
    gw_model_spec_default(spec);
    spec->n_embd = 32;
    spec->n_layer = 1;
    spec->n_head = 2;
    spec->n_head_kv = 1;
    spec->n_ff = 48;
    spec->n_ctx = n_ctx;
    spec->seed = seed;
}

int gw_write_tiny_model(const char *path, uint32_t n_ctx, uint64_t seed) {
    gw_model_spec spec;
    gw_tiny_spec(&spec, n_ctx, seed);
    return gw_write_model(path, &spec);
}
