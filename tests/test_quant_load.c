/*
 * Loading block-quantized models (issue #38): every type of
 * lib/kernels/quants.h as every weight matrix, token_embd and output
 * included, in any mix; the weights used in place from the mapping; the
 * same tokens on 1 and 2 threads; files whose tensors do not hold their
 * shape refused by name; the resident memory of a loaded Q4_K model
 * about its file size.
 *
 * The files are an f32 synthetic model (gguf_writer) re-encoded tensor by
 * tensor with the library's own quantizers.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "gguf_writer.h"
#include "kernels/quants.h"
#include "model/model.h"
#include "test_util.h"

enum { MAX_CTX = 32, MAX_TOKENS = 8, ALIGN = 32 };

/* The type a tensor of the re-encoded file gets (vectors stay f32). */
typedef uint32_t (*type_fn)(const char *name, void *user);

/* n floats as type t into out; returns the bytes written. */
static size_t encode(uint32_t t, const float *x, size_t n, uint8_t *out) {
    if (t == FX_WTYPE_F32) {
        memcpy(out, x, n * 4);
        return n * 4;
    }
    if (t == FX_WTYPE_F16) {
        fx_f32_to_f16_row((uint16_t *)(void *)out, x, n);
        return n * 2;
    }
    if (t == FX_WTYPE_Q8_0) {
        assert_int_equal(fx_quantize_q8_0((fx_block_q8_0 *)(void *)out, x, n),
                         FX_OK);
        return n / 32 * sizeof(fx_block_q8_0);
    }
    const fx_qtype *q = fx_qtype_of((fx_wtype)t);
    assert_non_null(q);
    q->quantize(out, x, n);
    return n / q->block_elems * q->block_bytes;
}

/* Re-encodes the f32 model src into out: the same metadata, each tensor of
 * the type pick gives. dequantized: each matrix as f32 holding its
 * quantized values instead (the float twin of the quantized file). */
/* reuse: a tensor of the type and size of an earlier one gets that
 * one's bytes (a faster file where the values do not matter). */
static void reencode_opt(const gw_buf *src, type_fn pick, void *user,
                         int dequantized, int reuse, gw_buf *out) {
    enum { SEEN = 8 };
    struct {
        uint32_t type;
        size_t n;
        uint8_t *bytes;
        size_t len;
    } seen[SEEN];
    size_t n_seen = 0;
    fx_alloc alloc;
    fx_alloc_init(&alloc, NULL);
    fx_gguf *g;
    fx_error err;
    assert_int_equal(fx_gguf_open_memory(src->data, src->len, &alloc, &g, &err),
                     FX_OK);
    out->len = 0;
    /* Header and metadata as they are: n_tensors does not change. */
    gw_bytes(out, src->data, (size_t)g->kv[g->n_kv - 1].end_offset);
    uint32_t *types = calloc((size_t)g->n_tensors, sizeof *types);
    uint64_t *sizes = calloc((size_t)g->n_tensors, sizeof *sizes);
    assert_non_null(types);
    assert_non_null(sizes);
    uint64_t off = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const fx_gguf_tensor *t = &g->tensors[i];
        assert_int_equal(t->type, FX_WTYPE_F32);
        types[i] = t->n_dims == 2 ? pick(t->name, user) : FX_WTYPE_F32;
        uint32_t be = 1, bb = 4;
        if (!dequantized)
            assert_true(fx_ggml_type_layout(types[i], &be, &bb));
        sizes[i] = t->n_elements / be * bb;
        gw_tensor_info(out, t->name, t->n_dims, t->ne,
                       dequantized ? FX_WTYPE_F32 : types[i], off);
        off = (off + sizes[i] + ALIGN - 1) / ALIGN * ALIGN;
    }
    gw_pad(out, ALIGN);
    const size_t data_start = out->len;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const fx_gguf_tensor *t = &g->tensors[i];
        while ((out->len - data_start) % ALIGN) gw_u8(out, 0);
        const size_t n = (size_t)t->n_elements;
        float *x = malloc(n * sizeof *x);
        uint8_t *enc = malloc(n * 4);
        assert_non_null(x);
        assert_non_null(enc);
        memcpy(x, t->data, n * 4);
        size_t bytes = 0, s;
        for (s = 0; reuse && s < n_seen; s++)
            if (seen[s].type == types[i] && seen[s].n == n) break;
        if (reuse && s < n_seen) {
            bytes = seen[s].len;
            memcpy(enc, seen[s].bytes, bytes);
        } else {
            bytes = encode(types[i], x, n, enc);
            if (reuse && n_seen < SEEN) {
                seen[n_seen].type = types[i];
                seen[n_seen].n = n;
                seen[n_seen].len = bytes;
                seen[n_seen].bytes = malloc(bytes);
                assert_non_null(seen[n_seen].bytes);
                memcpy(seen[n_seen++].bytes, enc, bytes);
            }
        }
        if (dequantized) {
            const size_t k = (size_t)t->ne[0];
            const size_t row = fx_wtype_row_bytes((fx_wtype)types[i], k);
            for (size_t r = 0; r < n / k; r++)
                assert_int_equal(fx_wtype_row_to_f32(x + r * k, enc + r * row,
                                                     (fx_wtype)types[i], k),
                                 FX_OK);
            gw_bytes(out, x, n * 4);
        } else {
            gw_bytes(out, enc, bytes);
        }
        free(x);
        free(enc);
    }
    for (size_t i = 0; i < n_seen; i++) free(seen[i].bytes);
    free(types);
    free(sizes);
    fx_gguf_close(g);
}

static void reencode(const gw_buf *src, type_fn pick, void *user,
                     int dequantized, gw_buf *out) {
    reencode_opt(src, pick, user, dequantized, 0, out);
}

/* The f32 model the quantized files are made from: K of every matrix a
 * multiple of 256, for the K-quants. */
static void f32_model(gw_buf *b, uint64_t seed) {
    gw_model_spec spec;
    gw_model_spec_default(&spec);
    spec.n_embd = 256;
    spec.n_head = 4;
    spec.n_head_kv = 2;
    spec.n_ff = 512;
    spec.n_vocab = 96;
    spec.n_layer = 2;
    spec.seed = seed;
    gw_build_model(b, &spec);
}

static uint32_t one_type(const char *name, void *user) {
    (void)name;
    return *(const uint32_t *)user;
}

/* Q4_K_M-like: Q4_K, with Q6_K output and ffn_down, Q5_0 token_embd, and
 * one of each other kind somewhere. */
static uint32_t mixed_type(const char *name, void *user) {
    (void)user;
    if (strcmp(name, "token_embd.weight") == 0) return FX_WTYPE_Q5_0;
    if (strcmp(name, "output.weight") == 0) return FX_WTYPE_Q6_K;
    if (strstr(name, "ffn_down")) return FX_WTYPE_Q6_K;
    if (strcmp(name, "blk.0.attn_v.weight") == 0) return FX_WTYPE_Q8_0;
    if (strcmp(name, "blk.1.attn_v.weight") == 0) return FX_WTYPE_IQ4_XS;
    if (strcmp(name, "blk.0.attn_k.weight") == 0) return FX_WTYPE_F16;
    if (strcmp(name, "blk.1.attn_k.weight") == 0) return FX_WTYPE_Q2_K;
    if (strcmp(name, "blk.1.attn_output.weight") == 0) return FX_WTYPE_IQ4_NL;
    if (strcmp(name, "blk.0.ffn_up.weight") == 0) return FX_WTYPE_Q5_1;
    return FX_WTYPE_Q4_K;
}

/* A loaded model from a buffer copied to exactly its size, so that ASan
 * sees any read past the file's end. */
typedef struct loaded {
    void *file;
    fx_alloc alloc;
    fx_gguf *g;
    fx_hparams hp;
    fx_weights w;
    fx_kernels *kc;
    fx_forward *f;
} loaded;

/* repack: the copy a model load plans (fx_weights_repack), made whole at
 * the forward's creation, or none: every matrix read from the file as it
 * is. */
static fx_status load_as(loaded *l, const gw_buf *b, unsigned threads,
                         bool repack, fx_error *err) {
    memset(l, 0, sizeof *l);
    l->file = malloc(b->len);
    assert_non_null(l->file);
    memcpy(l->file, b->data, b->len);
    fx_alloc_init(&l->alloc, NULL);
    fx_status st = fx_gguf_open_memory(l->file, b->len, &l->alloc, &l->g, err);
    if (st != FX_OK) return st;
    if ((st = fx_hparams_load(l->g, &l->hp, err)) != FX_OK) return st;
    assert_int_equal(fx_weights_bind(l->g, &l->hp, &l->alloc, &l->w, err),
                     FX_OK);
    if (repack)
        assert_int_equal(fx_weights_repack(&l->w, &l->hp, l->g, true,
                                           &l->alloc, err),
                         FX_OK);
    fx_kernels_params kp;
    fx_kernels_params_init(&kp);
    kp.n_threads = threads;
    assert_int_equal(fx_kernels_create(&l->alloc, &kp, &l->kc, err), FX_OK);
    assert_int_equal(fx_forward_create(&l->alloc, &l->hp, &l->w, l->kc,
                                       MAX_TOKENS, MAX_CTX, &l->f, err),
                     FX_OK);
    return FX_OK;
}

static fx_status load(loaded *l, const gw_buf *b, unsigned threads,
                      fx_error *err) {
    return load_as(l, b, threads, true, err);
}

static void unload(loaded *l) {
    fx_forward_free(l->f);
    fx_kernels_free(l->kc);
    fx_weights_free(&l->w, &l->alloc);
    fx_gguf_close(l->g);
    free(l->file);
}

static int in_file(const loaded *l, const fx_matrix *m) {
    const uint8_t *p = m->data, *base = l->file;
    return p >= base && p < base + l->g->size;
}

/* A matrix of a block type is read from the file, or, where this CPU's
 * kernels prefer 16-row groups, from a copy in them; the embedding table
 * (read by row) always from the file. Returns how many are in groups. */
static int assert_placed(const loaded *l) {
    int grouped = 0;
    const fx_weights *w = fx_forward_weights(l->f);
    const fx_matrix *e = &w->tok_embd;
    if (fx_qtype_of(e->type)) assert_true(in_file(l, e));
    const fx_matrix *all[1 + 7 * 8];
    size_t n = 0;
    if (w->output.data != e->data) all[n++] = &w->output;
    assert_true(l->hp.n_layer <= 8);
    for (uint32_t i = 0; i < l->hp.n_layer; i++) {
        const fx_layer_weights *y = &w->layers[i];
        const fx_matrix *m[] = {&y->wq, &y->wk, &y->wv, &y->wo,
                                &y->w_gate, &y->w_up, &y->w_down};
        for (size_t j = 0; j < 7; j++) all[n++] = m[j];
    }
    for (size_t i = 0; i < n; i++) {
        const fx_matrix *m = all[i];
        if (fx_wtype_is_qr16(m->type)) {
            const fx_wtype base = fx_wtype_qr16_base(m->type);
            assert_true(fx_kernels_prefer_qr16(base, m->k));
            assert_false(in_file(l, m));
            grouped++;
        } else if (fx_qtype_of(m->type)) {
            assert_false(fx_kernels_prefer_qr16(m->type, m->k));
            assert_true(in_file(l, m));
        }
    }
    return grouped;
}

enum { PROMPT = 3, GEN = 6, N = PROMPT + GEN };

/* Greedy decoding of N tokens from a fixed prompt; each step's logits
 * into logits[N - 1][n_vocab]. */
static void generate(loaded *l, int32_t *tokens, float *logits) {
    const uint32_t v = l->hp.n_vocab;
    float *kv = calloc(fx_kv_block_elems(&l->hp, MAX_CTX), sizeof *kv);
    assert_non_null(kv);
    void *blocks[1] = {kv};
    fx_kv_view view = {.blocks = blocks, .n_blocks = 1, .block_tokens = MAX_CTX,
                       .run_stride = (size_t)MAX_CTX * l->hp.head_dim};
    for (uint32_t p = 0; p < PROMPT; p++) tokens[p] = (int32_t)(3 + 7 * p);
    fx_error err;
    for (uint32_t p = 0; p + 1 < N; p++) {
        fx_fwd_token tok = {tokens[p], p, 0, 1};
        float *out = logits + (size_t)p * v;
        assert_int_equal(fx_forward_run(l->f, &tok, 1, &view, 1, out, 0, &err),
                         FX_OK);
        if (p + 1 >= PROMPT) {
            uint32_t best = 0;
            for (uint32_t i = 1; i < v; i++)
                if (out[i] > out[best]) best = i;
            tokens[p + 1] = (int32_t)best;
        }
    }
    free(kv);
}

/* Loads b on 1 and 2 threads, and on 1 with every matrix read from the
 * file as it is: the same tokens and logits bit for bit (16-row groups
 * or not), the block matrices where assert_placed says. Returns the
 * 1-thread logits (caller frees). */
static float *run_both(const gw_buf *b, int32_t *tokens) {
    loaded l1, l2, l3;
    fx_error err;
    assert_int_equal(load(&l1, b, 1, &err), FX_OK);
    assert_int_equal(load(&l2, b, 2, &err), FX_OK);
    assert_int_equal(load_as(&l3, b, 1, false, &err), FX_OK);
    assert_placed(&l1);
    const uint32_t v = l1.hp.n_vocab;
    const size_t bytes = (size_t)(N - 1) * v * sizeof(float);
    float *a = calloc((size_t)N * v, sizeof *a);
    float *c = calloc((size_t)N * v, sizeof *c);
    int32_t t2[N];
    assert_non_null(a);
    assert_non_null(c);
    generate(&l1, tokens, a);
    generate(&l2, t2, c);
    assert_memory_equal(tokens, t2, sizeof t2);
    assert_memory_equal(a, c, bytes);
    generate(&l3, t2, c);
    assert_memory_equal(tokens, t2, sizeof t2);
    assert_memory_equal(a, c, bytes);
    free(c);
    unload(&l1);
    unload(&l2);
    unload(&l3);
    return a;
}

/* The quantized model's logits against its float twin's (the same
 * weight values as f32): they differ only by the activations'
 * quantization, a few percent of the logits' spread at most. */
static void assert_close_to_twin(const gw_buf *q, const gw_buf *twin) {
    int32_t tq[N], tt[N];
    float *lq = run_both(q, tq);
    loaded l;
    fx_error err;
    assert_int_equal(load(&l, twin, 1, &err), FX_OK);
    const uint32_t v = l.hp.n_vocab;
    float *lt = calloc((size_t)N * v, sizeof *lt);
    assert_non_null(lt);
    /* Teacher-forced on the quantized model's tokens: the same inputs. */
    float *kv = calloc(fx_kv_block_elems(&l.hp, MAX_CTX), sizeof *kv);
    void *blocks[1] = {kv};
    fx_kv_view view = {.blocks = blocks, .n_blocks = 1, .block_tokens = MAX_CTX,
                       .run_stride = (size_t)MAX_CTX * l.hp.head_dim};
    for (uint32_t p = 0; p + 1 < N; p++) {
        fx_fwd_token tok = {tq[p], p, 0, 1};
        assert_int_equal(fx_forward_run(l.f, &tok, 1, &view, 1,
                                        lt + (size_t)p * v, 0, &err),
                         FX_OK);
    }
    double max_diff = 0, max_abs = 0;
    for (size_t i = 0; i < (size_t)(N - 1) * v; i++) {
        assert_true(isfinite(lq[i]));
        max_diff = fmax(max_diff, fabs((double)lq[i] - lt[i]));
        max_abs = fmax(max_abs, fabs((double)lt[i]));
    }
    assert_true(max_abs > 0);
    assert_true(max_diff <= 0.05 * max_abs);
    (void)tt;
    free(kv);
    free(lt);
    free(lq);
    unload(&l);
}

static const uint32_t block_types[] = {
    FX_WTYPE_Q4_0, FX_WTYPE_Q4_1, FX_WTYPE_Q5_0, FX_WTYPE_Q5_1,
    FX_WTYPE_Q2_K, FX_WTYPE_Q3_K, FX_WTYPE_Q4_K, FX_WTYPE_Q5_K,
    FX_WTYPE_Q6_K, FX_WTYPE_IQ4_NL, FX_WTYPE_IQ4_XS};

static void test_every_type(void **state) {
    (void)state;
    gw_buf f32 = {0}, q = {0}, twin = {0};
    f32_model(&f32, 11);
    for (size_t i = 0; i < sizeof block_types / sizeof *block_types; i++) {
        uint32_t t = block_types[i];
        reencode(&f32, one_type, &t, 0, &q);
        reencode(&f32, one_type, &t, 1, &twin);
        assert_close_to_twin(&q, &twin);
    }
    gw_free(&f32);
    gw_free(&q);
    gw_free(&twin);
}

static void test_mixed(void **state) {
    (void)state;
    gw_buf f32 = {0}, q = {0}, twin = {0};
    f32_model(&f32, 12);
    reencode(&f32, mixed_type, NULL, 0, &q);
    reencode(&f32, mixed_type, NULL, 1, &twin);
    assert_close_to_twin(&q, &twin);
    gw_free(&f32);
    gw_free(&q);
    gw_free(&twin);
}

/* ---- refusals ---- */

static fx_status load_msg(const gw_buf *b, char *msg) {
    loaded l;
    fx_error err;
    err.message[0] = '\0';
    fx_status st = load(&l, b, 1, &err);
    strcpy(msg, err.message);
    if (st == FX_OK) unload(&l);
    else {
        fx_gguf_close(l.g);
        free(l.file);
    }
    return st;
}

/* The file offset of tensor name's info record's type field. */
static size_t type_field_at(const gw_buf *b, const char *name) {
    fx_alloc alloc;
    fx_alloc_init(&alloc, NULL);
    fx_gguf *g;
    assert_int_equal(fx_gguf_open_memory(b->data, b->len, &alloc, &g, NULL),
                     FX_OK);
    const fx_gguf_tensor *t = fx_gguf_find_tensor(g, name);
    assert_non_null(t);
    size_t at = (size_t)t->info_offset + 8 + strlen(name) + 4 + 8 * t->n_dims;
    fx_gguf_close(g);
    return at;
}

static void test_unsupported_types(void **state) {
    (void)state;
    gw_buf f32 = {0}, q = {0};
    f32_model(&f32, 13);
    uint32_t t = FX_WTYPE_Q3_K;
    reencode(&f32, one_type, &t, 0, &q);
    char msg[FX_ERRMSG_SIZE];
    const size_t at = type_field_at(&q, "blk.1.ffn_up.weight");
    /* ggml's iq3_s has Q3_K's 110-byte blocks of 256: the file is
     * consistent, the type is not one the kernels have. */
    gw_put_u32_at(&q, at, 21);
    assert_int_equal(load_msg(&q, msg), FX_ERR_UNSUPPORTED);
    assert_non_null(strstr(msg, "blk.1.ffn_up.weight"));
    assert_non_null(strstr(msg, "iq3_s (id 21)"));
    assert_non_null(strstr(msg, "iq4_xs"));
    /* A type id ggml never had: the reader refuses it, by tensor. */
    gw_put_u32_at(&q, at, 99);
    assert_int_equal(load_msg(&q, msg), FX_ERR_BAD_TENSOR);
    assert_non_null(strstr(msg, "blk.1.ffn_up.weight"));
    assert_non_null(strstr(msg, "99"));
    /* And back: it loads. */
    gw_put_u32_at(&q, at, FX_WTYPE_Q3_K);
    assert_int_equal(load_msg(&q, msg), FX_OK);
    gw_free(&f32);
    gw_free(&q);
}

static void test_bad_sizes(void **state) {
    (void)state;
    gw_buf f32 = {0}, q = {0};
    f32_model(&f32, 14);
    char msg[FX_ERRMSG_SIZE];

    /* Q4_0 relabelled Q5_K: 176-byte blocks of 256 take more bytes than
     * the 8 18-byte blocks of 32 there are: past the tensor, into the
     * next one (or past the file for the last). */
    uint32_t t = FX_WTYPE_Q4_0;
    reencode(&f32, one_type, &t, 0, &q);
    gw_put_u32_at(&q, type_field_at(&q, "blk.0.ffn_gate.weight"),
                  FX_WTYPE_Q5_K);
    assert_int_equal(load_msg(&q, msg), FX_ERR_BAD_OFFSET);
    assert_non_null(strstr(msg, "blk.0.ffn_gate.weight"));
    /* The last tensor: past the end of the file. */
    fx_alloc alloc;
    fx_alloc_init(&alloc, NULL);
    fx_gguf *g;
    reencode(&f32, one_type, &t, 0, &q);
    assert_int_equal(fx_gguf_open_memory(q.data, q.len, &alloc, &g, NULL),
                     FX_OK);
    const char *last = g->tensors[g->n_tensors - 1].name;
    char last_name[64];
    snprintf(last_name, sizeof last_name, "%s", last);
    fx_gguf_close(g);
    gw_put_u32_at(&q, type_field_at(&q, last_name), FX_WTYPE_Q5_K);
    assert_int_equal(load_msg(&q, msg), FX_ERR_TRUNCATED);
    assert_non_null(strstr(msg, last_name));
    /* A file cut inside the last tensor. */
    reencode(&f32, one_type, &t, 0, &q);
    q.len -= 5;
    assert_int_equal(load_msg(&q, msg), FX_ERR_TRUNCATED);
    gw_free(&f32);
    gw_free(&q);

    /* A row length that is not a whole number of blocks: n_embd 288 is 9
     * blocks of 32 but no whole block of 256. */
    gw_model_spec spec;
    gw_model_spec_default(&spec);
    spec.n_embd = 288;
    spec.n_head = 4;
    spec.n_head_kv = 2;
    spec.n_ff = 512;
    spec.n_vocab = 96;
    gw_build_model(&f32, &spec);
    t = FX_WTYPE_Q4_0;
    reencode(&f32, one_type, &t, 0, &q);
    assert_int_equal(load_msg(&q, msg), FX_OK);
    gw_put_u32_at(&q, type_field_at(&q, "blk.1.attn_q.weight"),
                  FX_WTYPE_Q6_K);
    assert_int_equal(load_msg(&q, msg), FX_ERR_BAD_TENSOR);
    assert_non_null(strstr(msg, "blk.1.attn_q.weight"));
    assert_non_null(strstr(msg, "256"));
    gw_free(&f32);
    gw_free(&q);
}

/* The loader's own check, that the reader's byte count is exactly the
 * rows the kernels will index: a table that disagreed with the kernels'
 * (a reader entry with another block size) is refused by name. */
static void test_byte_count_check(void **state) {
    (void)state;
    gw_buf f32 = {0}, q = {0};
    f32_model(&f32, 15);
    uint32_t t = FX_WTYPE_Q5_K;
    reencode(&f32, one_type, &t, 0, &q);
    fx_alloc alloc;
    fx_alloc_init(&alloc, NULL);
    fx_gguf *g;
    fx_error err;
    assert_int_equal(fx_gguf_open_memory(q.data, q.len, &alloc, &g, &err),
                     FX_OK);
    fx_hparams hp;
    assert_int_equal(fx_hparams_load(g, &hp, &err), FX_OK);
    const char *names[] = {"token_embd.weight", "output.weight",
                           "blk.0.ffn_down.weight"};
    for (size_t i = 0; i < 3; i++) {
        fx_gguf_tensor *x = (fx_gguf_tensor *)fx_gguf_find_tensor(g, names[i]);
        assert_non_null(x);
        const uint64_t good = x->n_bytes;
        x->n_bytes = good - 176; /* one block short */
        assert_int_equal(fx_hparams_load(g, &hp, &err), FX_ERR_BAD_TENSOR);
        assert_non_null(strstr(err.message, names[i]));
        x->n_bytes = good + 1;
        assert_int_equal(fx_hparams_load(g, &hp, &err), FX_ERR_BAD_TENSOR);
        x->n_bytes = good;
    }
    assert_int_equal(fx_hparams_load(g, &hp, &err), FX_OK);
    fx_gguf_close(g);
    gw_free(&f32);
    gw_free(&q);
}

/* ---- the copy the forward passes make ---- */

/* The bytes `from` (the file's matrix) becomes in the layout `to`. */
static uint8_t *repacked_bytes(const fx_matrix *from, fx_wtype to) {
    const size_t bytes =
        (size_t)from->n * fx_wtype_row_bytes(from->type, from->k);
    uint8_t *want = malloc(bytes);
    assert_non_null(want);
    if (to == FX_WTYPE_Q8_0_R16)
        assert_int_equal(fx_q8_0_repack_r16(want, from->data, from->n,
                                            from->k),
                         FX_OK);
    else if (fx_wtype_is_r12(to))
        assert_int_equal(fx_float_repack_r12(want, from->data, from->type,
                                             from->n, from->k),
                         FX_OK);
    else
        memcpy(want, from->data, bytes);
    return want;
}

/* A loaded model's copy (fx_weights_repack; made by its forward passes'
 * views on a pool of 2 threads, in pieces of about 4 MB) is byte for byte
 * the whole matrix repacked at once: an output of F32, F16 or Q8_0 rows
 * big enough for several pieces, whose row count (15502) ends in a
 * partial tile of 12 and of 16 rows. Eager: copied when the first view is
 * made. Lazy: a view reads the file's matrix until every piece of it is
 * copied, a slice at each step, two views sharing the work; the model's
 * own weights stay the file's. */
static void test_repack_pieces(void **state) {
    (void)state;
    const uint32_t types[] = {FX_WTYPE_F32, FX_WTYPE_F16, FX_WTYPE_Q8_0};
    for (size_t ti = 0; ti < 3; ti++)
        for (int eager = 0; eager < 2; eager++) {
            gw_model_spec spec;
            gw_model_spec_default(&spec);
            spec.n_embd = 256;
            spec.n_ff = 256;
            spec.n_layer = 1;
            spec.n_vocab = 15502;
            spec.type = types[ti];
            spec.seed = 17;
            gw_buf b = {0};
            gw_build_model(&b, &spec);
            fx_alloc alloc;
            fx_alloc_init(&alloc, NULL);
            fx_gguf *g;
            fx_error err;
            fx_hparams hp;
            fx_weights w, v1, v2;
            assert_int_equal(
                fx_gguf_open_memory(b.data, b.len, &alloc, &g, &err), FX_OK);
            assert_int_equal(fx_hparams_load(g, &hp, &err), FX_OK);
            assert_int_equal(fx_weights_bind(g, &hp, &alloc, &w, &err), FX_OK);
            const fx_matrix file_out = w.output;
            assert_int_equal(fx_weights_repack(&w, &hp, g, eager != 0, &alloc,
                                               &err),
                             FX_OK);
            assert_ptr_equal(w.output.data, file_out.data);
            fx_pool *pool;
            assert_int_equal(fx_pool_create(&alloc, 2, &pool, &err), FX_OK);
            assert_int_equal(
                fx_weights_view_init(&w, &hp, pool, &alloc, &v1, &err), FX_OK);
            assert_int_equal(
                fx_weights_view_init(&w, &hp, NULL, &alloc, &v2, &err), FX_OK);
            int steps = 0;
            if (eager) {
                assert_ptr_not_equal(v1.output.data, file_out.data);
            } else {
                assert_ptr_equal(v1.output.data, file_out.data);
                /* a view sees a copy once whole, the one that finished
                 * it at once, the other at its next step */
                while (v1.output.data == file_out.data ||
                       v2.output.data == file_out.data) {
                    fx_weights_view_step(&w, &v1, pool);
                    fx_weights_view_step(&w, &v2, NULL);
                    if (v1.output.data == file_out.data)
                        assert_int_equal(v1.output.type, file_out.type);
                    if (v2.output.data == file_out.data)
                        assert_int_equal(v2.output.type, file_out.type);
                    assert_true(++steps <= 32);
                }
            }
            assert_ptr_equal(v2.output.data, v1.output.data);
            assert_ptr_equal(w.output.data, file_out.data);
            assert_int_equal(w.output.type, file_out.type);
            assert_int_equal(fx_wtype_unpacked(v1.output.type) ==
                                     FX_WTYPE_Q8_0_R16
                                 ? FX_WTYPE_Q8_0
                                 : fx_wtype_unpacked(v1.output.type),
                             file_out.type);
            uint8_t *want = repacked_bytes(&file_out, v1.output.type);
            assert_memory_equal(v1.output.data, want,
                                (size_t)file_out.n *
                                    fx_wtype_row_bytes(file_out.type,
                                                       file_out.k));
            free(want);
            fx_pool_free(pool);
            fx_weights_view_free(&v1, &alloc);
            fx_weights_view_free(&v2, &alloc);
            fx_weights_free(&w, &alloc);
            fx_gguf_close(g);
            gw_free(&b);
        }
}

/* ---- resident memory ---- */

static size_t resident_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    assert_non_null(f);
    unsigned long size = 0, rss = 0;
    assert_int_equal(fscanf(f, "%lu %lu", &size, &rss), 2);
    fclose(f);
    return (size_t)rss * (size_t)sysconf(_SC_PAGESIZE);
}

static uint32_t q4_k_m_type(const char *name, void *user) {
    (void)user;
    if (strcmp(name, "output.weight") == 0 || strstr(name, "ffn_down") ||
        strstr(name, "attn_v"))
        return FX_WTYPE_Q6_K;
    return FX_WTYPE_Q4_K;
}

/* What AddressSanitizer itself makes resident for `bytes` of heap: its
 * shadow (one byte per 8) and redzones, with room (measured on a Zen 5:
 * 45.4 MB of growth under ASan against 38.3 MB without, for 26.2 MB of
 * weights). Not the library's memory, so not the bound's; a second copy
 * of the weights (+26 MB) still breaks the bound under ASan. */
#if defined(__SANITIZE_ADDRESS__)
#define FX_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FX_TEST_ASAN 1
#endif
#endif
static size_t sanitizer_overhead(size_t bytes) {
#ifdef FX_TEST_ASAN
    return bytes / 2;
#else
    (void)bytes;
    return 0;
#endif
}

/* A Q4_K_M model, loaded from a file and run, holds its file (or its copy
 * in 16-row groups, the file's pages dropped), its KV cache and some
 * scratch: never both. The model is large enough (about 22 MB) that a
 * second copy would break the bound. */
/* tied: the output is the embedding table, copied (repacked) as the
 * output while the table's rows are looked up in the mapping. */
static void resident_case(int tied) {
    gw_model_spec spec;
    gw_model_spec_default(&spec);
    spec.tied = tied;
    spec.n_embd = 1024;
    spec.n_head = 8;
    spec.n_head_kv = 8;
    spec.n_ff = 2816;
    spec.n_vocab = 1024;
    spec.n_layer = 3;
    spec.seed = 16;
    gw_buf f32 = {0}, q = {0};
    gw_build_model(&f32, &spec);
    reencode_opt(&f32, q4_k_m_type, NULL, 0, 1, &q);
    gw_free(&f32);
    const char *path = fx_test_tmp_path("q4_k_m.gguf");
    assert_int_equal(gw_write_file(&q, path), 0);
    const size_t file_bytes = q.len;
    gw_free(&q);

    const size_t before = resident_bytes();
    loaded l;
    fx_error err;
    memset(&l, 0, sizeof l);
    fx_alloc_init(&l.alloc, NULL);
    assert_int_equal(fx_gguf_open(path, &l.alloc, &l.g, &err), FX_OK);
    assert_int_equal(fx_hparams_load(l.g, &l.hp, &err), FX_OK);
    assert_int_equal(fx_weights_bind(l.g, &l.hp, &l.alloc, &l.w, &err), FX_OK);
    assert_int_equal(fx_weights_repack(&l.w, &l.hp, l.g, false, &l.alloc,
                                       &err),
                     FX_OK);
    /* nothing to copy (every matrix a block type) unless this CPU reads
     * them faster in 16-row groups: then they are the copy, made a slice a
     * pass, and the mapping's pages of a matrix go once it is copied */
    const bool grouped = fx_kernels_prefer_qr16(FX_WTYPE_Q4_K, spec.n_embd);
    if (!grouped) assert_null(l.w.repacked);
    fx_kernels_params kp;
    fx_kernels_params_init(&kp);
    kp.n_threads = 2;
    assert_int_equal(fx_kernels_create(&l.alloc, &kp, &l.kc, &err), FX_OK);
    assert_int_equal(fx_forward_create(&l.alloc, &l.hp, &l.w, l.kc,
                                       MAX_TOKENS, MAX_CTX, &l.f, &err),
                     FX_OK);
    int32_t tokens[N];
    float *logits = calloc((size_t)N * l.hp.n_vocab, sizeof *logits);
    assert_non_null(logits);
    const size_t logits_bytes = (size_t)N * l.hp.n_vocab * sizeof *logits;
    const size_t kv_bytes =
        fx_kv_block_elems(&l.hp, MAX_CTX) * sizeof(float);
    /* Five generations of N - 1 passes: the copy partly made after the
     * first, whole well before the last (a 16th of it a pass). */
    for (int round = 0; round < 5; round++) {
        generate(&l, tokens, logits);
        const size_t growth = resident_bytes() - before;
        /* Every weight page was read by the generation: most of the file
         * is resident, so the growth is about the file, and a copy would
         * add another 22 MB. */
        assert_true(growth >= file_bytes / 2);
        assert_true(growth <= file_bytes + kv_bytes + logits_bytes +
                                  ((size_t)16 << 20) +
                                  sanitizer_overhead(file_bytes));
    }
    const fx_weights *used = fx_forward_weights(l.f);
    if (grouped)
        assert_true(fx_wtype_is_qr16(
            used->layers[l.hp.n_layer - 1].w_down.type));
    free(logits);
    unload(&l);
    unlink(path);
}

static void test_resident(void **state) {
    (void)state;
    resident_case(0);
    resident_case(1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_type),
        cmocka_unit_test(test_mixed),
        cmocka_unit_test(test_unsupported_types),
        cmocka_unit_test(test_bad_sizes),
        cmocka_unit_test(test_byte_count_check),
        cmocka_unit_test(test_repack_pieces),
        cmocka_unit_test(test_resident),
    };
    return cmocka_run_group_tests_name("quant_load", tests, NULL, NULL);
}
