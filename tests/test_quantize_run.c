/*
 * gguf_quant, the engine of ferrox-quantize and ferrox-mkmodel --type:
 * for every preset, and --pure, the written file holds every input key
 * byte for byte plus general.file_type and general.quantization_version,
 * the tensors in llama.cpp's order with quant_rules' types, copied
 * tensors unchanged and converted ones equal to the row quantizers'
 * output; the bytes do not depend on the thread count; f16 and bf16
 * inputs convert; and each input it refuses is named in the message.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "gguf/gguf.h"
#include "gguf_quant.h"
#include "gguf_writer.h"
#include "kernels/kernels.h"
#include "test_util.h"

/* Rows of 256 (every type fits), one layer: quant_rules' choices have
 * their own test; this one is about the bytes. */
static void small_spec(gw_model_spec *s) {
    gw_model_spec_default(s);
    s->n_embd = 256;
    s->n_layer = 1;
    s->n_head = 2;
    s->n_head_kv = 1;
    s->n_ff = 256;
    s->n_vocab = 32;
}

typedef struct model {
    gw_buf buf;
    fx_gguf *g;
} model;

static void open_spec(model *m, const gw_model_spec *s) {
    memset(&m->buf, 0, sizeof m->buf);
    gw_build_model(&m->buf, s);
    fx_alloc a;
    fx_alloc_init(&a, NULL);
    fx_error err;
    assert_int_equal(fx_gguf_open_memory(m->buf.data, m->buf.len, &a, &m->g, &err),
                     FX_OK);
}

static void close_model(model *m) {
    fx_gguf_close(m->g);
    gw_free(&m->buf);
}

static fx_gguf *open_file(const char *path) {
    fx_alloc a;
    fx_alloc_init(&a, NULL);
    fx_error err;
    fx_gguf *g = NULL;
    if (fx_gguf_open(path, &a, &g, &err) != FX_OK) fail_msg("%s", err.message);
    return g;
}

static uint32_t kv_u32(const fx_gguf *g, const char *key) {
    uint32_t v = 0;
    fx_error err;
    assert_int_equal(fx_gguf_get_u32(g, key, &v, &err), FX_OK);
    return v;
}

/* Runs the engine; 0 or -1, the message in err. */
static int quantize(const fx_gguf *in, const char *preset, int pure,
                    unsigned threads, const char *path, char *err, size_t size) {
    gq_options opt = {qr_find_preset(preset), pure, threads, NULL, NULL};
    assert_non_null(opt.preset);
    return gq_quantize_file(in, &opt, path, err, size);
}

/* What the output of `in` must be, tensor by tensor, in order. */
static void check_output(const fx_gguf *in, const fx_gguf *out,
                         const qr_preset *p, int pure) {
    size_t n = (size_t)in->n_tensors;
    qr_tensor *ts = calloc(n, sizeof *ts);
    assert_non_null(ts);
    for (size_t i = 0; i < n; i++) {
        const fx_gguf_tensor *t = &in->tensors[i];
        ts[i] = (qr_tensor){t->name, {t->ne[0], t->ne[1], t->ne[2], t->ne[3]},
                            t->type, 0, i};
    }
    char arch[16] = "llama";
    qr_model m = {arch, kv_u32(in, "llama.block_count"),
                  kv_u32(in, "llama.attention.head_count"),
                  kv_u32(in, "llama.attention.head_count_kv"), 0, 0};
    char why[200];
    assert_int_equal(qr_plan(&m, p, pure, ts, n, NULL, why, sizeof why), 0);
    assert_int_equal(out->n_tensors, n);
    for (size_t i = 0; i < n; i++) {
        const fx_gguf_tensor *o = &out->tensors[i];
        const fx_gguf_tensor *t = &in->tensors[ts[i].index];
        assert_string_equal(o->name, ts[i].name);
        assert_int_equal(o->type, ts[i].type);
        assert_int_equal(o->n_dims, t->n_dims);
        assert_memory_equal(o->ne, t->ne, sizeof t->ne);
        if (!ts[i].convert) {
            assert_int_equal(o->n_bytes, t->n_bytes);
            assert_memory_equal(o->data, t->data, (size_t)t->n_bytes);
            continue;
        }
        /* Rows as the encoder makes them from the f32 weights: the first,
         * the last, and those either side of each thread's boundary. */
        const size_t k = (size_t)t->ne[0], rows = (size_t)(t->n_elements / k);
        const size_t in_row = (size_t)t->n_bytes / rows, out_row = (size_t)o->n_bytes / rows;
        const size_t pick[] = {0, rows / 3, rows / 3 + 1, rows / 2, rows / 2 + 1,
                               2 * rows / 3, 2 * rows / 3 + 1, rows - 1};
        float *x = malloc(k * sizeof *x);
        uint8_t *want = malloc(out_row);
        assert_true(x && want);
        for (size_t j = 0; j < sizeof pick / sizeof pick[0]; j++) {
            size_t r = pick[j] < rows ? pick[j] : rows - 1;
            assert_int_equal(fx_wtype_row_to_f32(x, t->data + r * in_row,
                                                 (fx_wtype)t->type, k), FX_OK);
            assert_int_equal(gq_encode(o->type, x, k, want, NULL), out_row);
            assert_memory_equal(o->data + r * out_row, want, out_row);
        }
        free(x);
        free(want);
    }
    free(ts);
    /* Every key kept byte for byte, then the two set last. */
    assert_int_equal(out->n_kv, in->n_kv + 2);
    for (uint64_t i = 0; i < in->n_kv; i++) {
        const fx_gguf_kv *a = &in->kv[i], *b = &out->kv[i];
        assert_string_equal(a->key, b->key);
        assert_int_equal(a->end_offset - a->offset, b->end_offset - b->offset);
        assert_memory_equal(in->base + a->offset, out->base + b->offset,
                            (size_t)(a->end_offset - a->offset));
    }
    assert_string_equal(out->kv[in->n_kv].key, "general.quantization_version");
    assert_int_equal(kv_u32(out, "general.quantization_version"), 2);
    assert_string_equal(out->kv[in->n_kv + 1].key, "general.file_type");
    assert_int_equal(kv_u32(out, "general.file_type"), p->ftype);
}

static void test_every_preset(void **state) {
    (void)state;
    gw_model_spec s;
    small_spec(&s);
    model in;
    open_spec(&in, &s);
    size_t n;
    const qr_preset *all = qr_presets(&n);
    const char *path = fx_test_tmp_path("quantize_run_preset.gguf");
    for (size_t i = 0; i < n; i++) {
        for (int pure = 0; pure <= qr_type_is_quantized(all[i].default_type); pure++) {
            char err[300] = "";
            if (quantize(in.g, all[i].name, pure, 2, path, err, sizeof err) != 0)
                fail_msg("%s%s: %s", all[i].name, pure ? " pure" : "", err);
            fx_gguf *out = open_file(path);
            check_output(in.g, out, &all[i], pure);
            fx_gguf_close(out);
        }
    }
    close_model(&in);
    remove(path);
}

static void test_threads_same_bytes(void **state) {
    (void)state;
    gw_model_spec s;
    small_spec(&s);
    s.n_layer = 2;
    s.n_embd = 192; /* fallbacks too */
    s.n_head = 6;
    s.n_head_kv = 2;
    s.n_ff = 384;
    model in;
    open_spec(&in, &s);
    const char *a = fx_test_tmp_path("quantize_run_t1.gguf");
    const char *b_path = fx_test_tmp_path("quantize_run_t3.gguf");
    char pa[512], pb[512], err[300];
    snprintf(pa, sizeof pa, "%s", a);
    snprintf(pb, sizeof pb, "%s", b_path);
    static const char *const presets[] = {"Q4_K_M", "IQ4_XS"};
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        assert_int_equal(quantize(in.g, presets[i], 0, 1, pa, err, sizeof err), 0);
        assert_int_equal(quantize(in.g, presets[i], 0, 3, pb, err, sizeof err), 0);
        size_t la, lb;
        char *da = fx_test_read_file(pa, &la), *db = fx_test_read_file(pb, &lb);
        assert_true(da && db);
        assert_int_equal(la, lb);
        assert_memory_equal(da, db, la);
        free(da);
        free(db);
        fx_gguf *out = open_file(pa);
        check_output(in.g, out, qr_find_preset(presets[i]), 0);
        fx_gguf_close(out);
    }
    close_model(&in);
    remove(pa);
    remove(pb);
}

/* F16 and BF16 weights are widened exactly, then converted. */
static void test_half_inputs(void **state) {
    (void)state;
    static const uint32_t types[] = {1, 30};
    static const char *const presets[] = {"F32", "Q4_0", "Q6_K", "F16", "BF16"};
    const char *path = fx_test_tmp_path("quantize_run_half.gguf");
    for (size_t t = 0; t < 2; t++) {
        gw_model_spec s;
        small_spec(&s);
        s.type = types[t];
        model in;
        open_spec(&in, &s);
        for (size_t p = 0; p < sizeof presets / sizeof presets[0]; p++) {
            char err[300];
            assert_int_equal(quantize(in.g, presets[p], 0, 2, path, err, sizeof err), 0);
            fx_gguf *out = open_file(path);
            check_output(in.g, out, qr_find_preset(presets[p]), 0);
            fx_gguf_close(out);
        }
        close_model(&in);
    }
    remove(path);
}

static size_t add_experts(gw_buf *b, void *user) {
    (void)user;
    gw_kv_u32(b, "llama.expert_count", 8);
    return 1;
}

static void expect_error(const gw_model_spec *s, const char *preset, int pure,
                         const char *message) {
    model in;
    open_spec(&in, s);
    char err[300] = "";
    const char *path = fx_test_tmp_path("quantize_run_error.gguf");
    assert_int_equal(quantize(in.g, preset, pure, 2, path, err, sizeof err), -1);
    if (!strstr(err, message)) fail_msg("'%s' does not say '%s'", err, message);
    close_model(&in);
    remove(path);
}

static void test_refusals(void **state) {
    (void)state;
    gw_model_spec s;
    small_spec(&s);
    s.type = 8; /* already quantized: llama.cpp refuses without a flag */
    expect_error(&s, "Q4_0", 0, "output.weight is q8_0: only f32, f16 and bf16");
    small_spec(&s);
    s.extra_kv = add_experts;
    expect_error(&s, "Q4_K_M", 0, "a mixture of experts (8 experts)");
    small_spec(&s);
    s.n_embd = 192;
    s.n_head = 6;
    expect_error(&s, "Q4_K_M", 1, "output.weight: rows of 192 elements are not "
                                  "whole blocks of q4_K (256 elements)");
    small_spec(&s);
    s.skip_key = "llama.block_count";
    expect_error(&s, "Q4_0", 0, "llama.block_count is missing");
    small_spec(&s);
    s.skip_key = "general.architecture";
    expect_error(&s, "Q4_0", 0, "general.architecture");
}

/* head_count_kv per layer (an array): llama.cpp's n_gqa reads layer 0. */
static size_t kv_heads_array(gw_buf *b, void *user) {
    const int32_t *heads = user;
    gw_kv_arr_i32(b, "llama.attention.head_count_kv", heads, 1);
    return 1;
}

static size_t kv_heads_strings(gw_buf *b, void *user) {
    (void)user;
    static const char *const v[] = {"1"};
    gw_kv_arr_str(b, "llama.attention.head_count_kv", v, 1);
    return 1;
}

static void test_per_layer_heads(void **state) {
    (void)state;
    gw_model_spec s;
    small_spec(&s);
    s.n_head = 4;
    s.n_head_kv = 1;
    s.skip_key = "llama.attention.head_count_kv";
    int32_t one = 1;
    s.extra_kv = kv_heads_array;
    s.extra_user = &one;
    model in;
    open_spec(&in, &s);
    const char *path = fx_test_tmp_path("quantize_run_heads.gguf");
    char err[300];
    assert_int_equal(quantize(in.g, "Q2_K", 0, 2, path, err, sizeof err), 0);
    fx_gguf *out = open_file(path);
    /* 4 query heads per KV head: Q2_K's attn_v is Q4_K (else Q3_K). */
    assert_int_equal(fx_gguf_find_tensor(out, "blk.0.attn_v.weight")->type, QR_Q4_K);
    fx_gguf_close(out);
    close_model(&in);
    remove(path);
    s.extra_kv = kv_heads_strings;
    expect_error(&s, "Q2_K", 0, "llama.attention.head_count_kv is not a whole number");
}

/* inf or NaN in a weight: llama.cpp's loader refuses it, converted or
 * copied; so does the engine, naming the tensor. */
static void test_non_finite(void **state) {
    (void)state;
    static const struct { const char *tensor, *preset, *message; } cases[] = {
        {"blk.0.ffn_up.weight", "Q4_K_M", "blk.0.ffn_up.weight: row 3 holds inf or NaN"},
        {"blk.0.attn_q.weight", "F16", "blk.0.attn_q.weight: row 3 holds inf or NaN"},
        {"blk.0.attn_norm.weight", "Q4_0", "blk.0.attn_norm.weight: element 3 is inf"},
        {"blk.0.attn_q.weight", "F32", "blk.0.attn_q.weight: element 771 is inf"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gw_model_spec s;
        small_spec(&s);
        model in;
        open_spec(&in, &s);
        const fx_gguf_tensor *t = fx_gguf_find_tensor(in.g, cases[i].tensor);
        assert_non_null(t);
        /* The reader maps the buffer itself: row 3, element 3. */
        size_t at = (size_t)(t->data - in.buf.data) +
                    (t->n_dims > 1 ? 3 * (size_t)t->ne[0] * 4 : 0) + 12;
        float v = i % 2 ? INFINITY : NAN;
        memcpy(in.buf.data + at, &v, 4);
        char err[300] = "";
        const char *path = fx_test_tmp_path("quantize_run_nan.gguf");
        assert_int_equal(quantize(in.g, cases[i].preset, 0, 2, path, err, sizeof err),
                         -1);
        if (!strstr(err, cases[i].message))
            fail_msg("'%s' does not say '%s'", err, cases[i].message);
        close_model(&in);
        remove(path);
    }
}

/* gguf_writer's hook writes a block type directly: the same bytes as the
 * engine's --pure conversion of the f32 model of the same seed. */
static void test_writer_hook(void **state) {
    (void)state;
    static const uint32_t types[] = {QR_Q4_K, QR_IQ4_NL, QR_Q6_K};
    static const char *const presets[] = {"Q4_K_M", "IQ4_NL", "Q6_K"};
    gw_model_spec s;
    small_spec(&s);
    model f32;
    open_spec(&f32, &s);
    const char *path = fx_test_tmp_path("quantize_run_hook.gguf");
    for (size_t i = 0; i < 3; i++) {
        gw_model_spec q = s;
        q.type = types[i];
        q.quantize = gq_encode;
        model direct;
        open_spec(&direct, &q);
        char err[300];
        assert_int_equal(quantize(f32.g, presets[i], 1, 2, path, err, sizeof err), 0);
        fx_gguf *conv = open_file(path);
        for (uint64_t k = 0; k < direct.g->n_tensors; k++) {
            const fx_gguf_tensor *a = &direct.g->tensors[k];
            const fx_gguf_tensor *b = fx_gguf_find_tensor(conv, a->name);
            assert_non_null(b);
            assert_int_equal(a->type, b->type);
            assert_int_equal(a->type, a->n_dims > 1 ? types[i] : QR_F32);
            assert_int_equal(a->n_bytes, b->n_bytes);
            assert_memory_equal(a->data, b->data, (size_t)a->n_bytes);
        }
        fx_gguf_close(conv);
        close_model(&direct);
    }
    assert_int_equal(gw_block_elems(QR_Q5_K), 256);
    assert_int_equal(gw_block_elems(QR_Q5_0), 32);
    assert_int_equal(gw_block_elems(QR_BF16), 1);
    assert_int_equal(gw_block_elems(9), 0);
    const uint64_t dims[2] = {256, 3};
    assert_int_equal(gw_tensor_bytes(QR_Q3_K, 2, dims), 3 * 110);
    assert_int_equal(gw_tensor_bytes(QR_IQ4_XS, 2, dims), 3 * 136);
    assert_int_equal(gw_tensor_bytes(QR_Q4_1, 2, dims), 3 * 8 * 20);
    assert_int_equal(gq_encode(9, NULL, 0, NULL, NULL), 0);
    close_model(&f32);
    remove(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_preset),
        cmocka_unit_test(test_threads_same_bytes),
        cmocka_unit_test(test_half_inputs),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_non_finite),
        cmocka_unit_test(test_per_layer_heads),
        cmocka_unit_test(test_writer_hook),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
