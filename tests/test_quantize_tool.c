/*
 * quant_rules against llama.cpp: the type llama-quantize (Feb 2025) gave
 * every tensor of five synthetic models -- n_embd 256 with MHA, n_embd
 * 192 (rows no K-quant divides: fallbacks), 16 layers with 4 query heads
 * per KV head, tied embeddings, Qwen2 with biases -- for every preset,
 * and with --pure. The table was read back from llama-quantize's output
 * files of ferrox-mkmodel's F32 models (the arguments in `models`); one
 * character per tensor, in the file's order.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "gguf/gguf.h"
#include "gguf_writer.h"
#include "quant_rules.h"

typedef struct model_case {
    const char *name, *arch;
    uint32_t dim, layers, heads, kv_heads, ffn, vocab;
    int tied;
} model_case;

/* ferrox-mkmodel --arch A --dim D --layers L --heads H --kv-heads K
 * --ffn F --vocab V [--tied] */
static const model_case models[] = {
    {"a256", "llama", 256, 8, 8, 8, 512, 256, 0},
    {"b192", "llama", 192, 8, 6, 6, 384, 256, 0},
    {"c_gqa", "llama", 256, 16, 8, 2, 768, 256, 0},
    {"d_tied", "llama", 256, 4, 4, 1, 512, 256, 1},
    {"e_qwen", "qwen2", 192, 3, 6, 2, 512, 320, 0},
};

/* One character per type. */
static uint32_t type_of_code(char c) {
    switch (c) {
    case 'F': return QR_F32;
    case 'H': return QR_F16;
    case 'B': return QR_BF16;
    case 'a': return QR_Q4_0;
    case 'b': return QR_Q4_1;
    case 'c': return QR_Q5_0;
    case 'd': return QR_Q5_1;
    case 'e': return QR_Q8_0;
    case '2': return QR_Q2_K;
    case '3': return QR_Q3_K;
    case '4': return QR_Q4_K;
    case '5': return QR_Q5_K;
    case '6': return QR_Q6_K;
    case 'n': return QR_IQ4_NL;
    case 'x': return QR_IQ4_XS;
    default: return 9999;
    }
}

typedef struct ref_case {
    const char *model, *preset;
    int pure;
    const char *types; /* NULL: llama-quantize failed (rows fit no type) */
} ref_case;

static const ref_case refs[] = {
#include "test_quantize_tool_table.inc"
};

/* The model's tensors as the F32 file holds them. */
typedef struct built {
    gw_buf buf;
    fx_gguf *g;
    qr_tensor *ts;
    size_t n;
    qr_model m;
} built;

static void build(built *b, const model_case *mc) {
    gw_model_spec s;
    gw_model_spec_default(&s);
    s.arch = mc->arch;
    s.n_embd = mc->dim;
    s.n_layer = mc->layers;
    s.n_head = mc->heads;
    s.n_head_kv = mc->kv_heads;
    s.n_ff = mc->ffn;
    s.n_vocab = mc->vocab;
    s.tied = mc->tied;
    memset(&b->buf, 0, sizeof b->buf);
    gw_build_model(&b->buf, &s);
    fx_alloc a;
    fx_alloc_init(&a, NULL);
    fx_error err;
    assert_int_equal(fx_gguf_open_memory(b->buf.data, b->buf.len, &a, &b->g, &err),
                     FX_OK);
    b->n = (size_t)b->g->n_tensors;
    b->ts = calloc(b->n, sizeof *b->ts);
    assert_non_null(b->ts);
    memset(&b->m, 0, sizeof b->m);
    b->m = (qr_model){mc->arch, mc->layers, mc->heads, mc->kv_heads, 0, 0};
}

static void reset(built *b) {
    for (size_t i = 0; i < b->n; i++) {
        const fx_gguf_tensor *t = &b->g->tensors[i];
        b->ts[i] = (qr_tensor){t->name, {t->ne[0], t->ne[1], t->ne[2], t->ne[3]},
                               t->type, 0, i};
    }
}

static void unbuild(built *b) {
    free(b->ts);
    fx_gguf_close(b->g);
    gw_free(&b->buf);
}

static void test_llama_cpp_table(void **state) {
    (void)state;
    size_t checked = 0;
    for (size_t mi = 0; mi < sizeof models / sizeof models[0]; mi++) {
        built b;
        build(&b, &models[mi]);
        for (size_t r = 0; r < sizeof refs / sizeof refs[0]; r++) {
            const ref_case *rc = &refs[r];
            if (strcmp(rc->model, models[mi].name) != 0) continue;
            const qr_preset *p = qr_find_preset(rc->preset);
            assert_non_null(p);
            reset(&b);
            char why[256] = "";
            size_t fb = 0;
            int ret = qr_plan(&b.m, p, rc->pure, b.ts, b.n, &fb, why, sizeof why);
            if (!rc->types) {
                if (ret != -1)
                    fail_msg("%s %s pure: llama.cpp fails, we did not", rc->model,
                             rc->preset);
                assert_non_null(strstr(why, "not whole blocks"));
                checked++;
                continue;
            }
            assert_int_equal(ret, 0);
            assert_int_equal(strlen(rc->types), b.n);
            for (size_t i = 0; i < b.n; i++) {
                uint32_t want = type_of_code(rc->types[i]);
                if (b.ts[i].type != want)
                    fail_msg("%s %s%s: %s is %s, llama.cpp gives %s", rc->model,
                             rc->preset, rc->pure ? " pure" : "", b.ts[i].name,
                             qr_type_name(b.ts[i].type), qr_type_name(want));
                /* convert: the type changes (the input is F32 throughout) */
                assert_int_equal(b.ts[i].convert, want != QR_F32);
            }
            checked++;
        }
        unbuild(&b);
    }
    assert_int_equal(checked, sizeof refs / sizeof refs[0]);
}

/* llama-quantize's output order for the Qwen2 model: layer, then name. */
static void test_order(void **state) {
    (void)state;
    static const char *const want[] = {
        "output.weight", "output_norm.weight", "token_embd.weight",
        "blk.0.attn_k.bias", "blk.0.attn_k.weight", "blk.0.attn_norm.weight",
        "blk.0.attn_output.weight", "blk.0.attn_q.bias", "blk.0.attn_q.weight",
        "blk.0.attn_v.bias", "blk.0.attn_v.weight", "blk.0.ffn_down.weight",
        "blk.0.ffn_gate.weight", "blk.0.ffn_norm.weight", "blk.0.ffn_up.weight",
        "blk.1.attn_k.bias"};
    built b;
    build(&b, &models[4]);
    reset(&b);
    char why[256];
    assert_int_equal(qr_plan(&b.m, qr_find_preset("Q4_K_M"), 0, b.ts, b.n, NULL,
                             why, sizeof why), 0);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        assert_string_equal(b.ts[i].name, want[i]);
    unbuild(&b);
    /* Numbers compare as numbers; names without one come first. */
    assert_true(qr_order_cmp("blk.2.a", "blk.10.a") < 0);
    assert_true(qr_order_cmp("blk.10.a", "blk.2.b") > 0);
    assert_true(qr_order_cmp("zzz.weight", "blk.0.a") < 0);
    assert_true(qr_order_cmp("blk.x.a", "blk.0.a") < 0);
    assert_true(qr_order_cmp("blk.3.b", "blk.3.a") > 0);
    assert_int_equal(qr_order_cmp("blk.3.a", "blk.3.a"), 0);
    /* sscanf("blk.%d.") takes the number whatever follows. */
    assert_true(qr_order_cmp("blk.7x", "blk.6.a") > 0);
}

static void test_presets(void **state) {
    (void)state;
    const qr_preset *p = qr_find_preset("q4_k_m");
    assert_non_null(p);
    assert_string_equal(p->name, "Q4_K_M");
    assert_int_equal(p->ftype, 15);
    assert_int_equal(p->default_type, QR_Q4_K);
    assert_ptr_equal(qr_find_preset("Q4_K"), p);
    assert_ptr_equal(qr_find_preset("q4_k"), p);
    assert_string_equal(qr_find_preset("Q3_K")->name, "Q3_K_M");
    assert_string_equal(qr_find_preset("q5_K")->name, "Q5_K_M");
    assert_null(qr_find_preset("Q4"));
    assert_null(qr_find_preset("Q4_K_MM"));
    assert_null(qr_find_preset(""));
    assert_null(qr_find_preset("Q2_K_S")); /* needs an importance matrix */
    /* llama.cpp's LLAMA_FTYPE values and default types. */
    static const struct { const char *name; int ftype; uint32_t type; } want[] = {
        {"Q4_0", 2, QR_Q4_0}, {"Q4_1", 3, QR_Q4_1}, {"Q8_0", 7, QR_Q8_0},
        {"Q5_0", 8, QR_Q5_0}, {"Q5_1", 9, QR_Q5_1}, {"Q2_K", 10, QR_Q2_K},
        {"Q3_K_S", 11, QR_Q3_K}, {"Q3_K_M", 12, QR_Q3_K},
        {"Q3_K_L", 13, QR_Q3_K}, {"Q4_K_S", 14, QR_Q4_K},
        {"Q5_K_S", 16, QR_Q5_K}, {"Q5_K_M", 17, QR_Q5_K},
        {"Q6_K", 18, QR_Q6_K}, {"IQ4_NL", 25, QR_IQ4_NL},
        {"IQ4_XS", 30, QR_IQ4_XS}, {"F32", 0, QR_F32}, {"F16", 1, QR_F16},
        {"BF16", 32, QR_BF16}};
    size_t n;
    const qr_preset *all = qr_presets(&n);
    assert_int_equal(n, sizeof want / sizeof want[0] + 1);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        p = qr_find_preset(want[i].name);
        assert_non_null(p);
        assert_int_equal(p->ftype, want[i].ftype);
        assert_int_equal(p->default_type, want[i].type);
        assert_true(p >= all && p < all + n);
    }
}

static void test_types(void **state) {
    (void)state;
    static const struct { uint32_t t, elems; const char *name; } want[] = {
        {QR_F32, 1, "f32"}, {QR_F16, 1, "f16"}, {QR_BF16, 1, "bf16"},
        {QR_Q4_0, 32, "q4_0"}, {QR_Q4_1, 32, "q4_1"}, {QR_Q5_0, 32, "q5_0"},
        {QR_Q5_1, 32, "q5_1"}, {QR_Q8_0, 32, "q8_0"}, {QR_IQ4_NL, 32, "iq4_nl"},
        {QR_Q2_K, 256, "q2_K"}, {QR_Q3_K, 256, "q3_K"}, {QR_Q4_K, 256, "q4_K"},
        {QR_Q5_K, 256, "q5_K"}, {QR_Q6_K, 256, "q6_K"}, {QR_IQ4_XS, 256, "iq4_xs"}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        assert_int_equal(qr_block_elems(want[i].t), want[i].elems);
        assert_string_equal(qr_type_name(want[i].t), want[i].name);
        uint32_t be = 0, bb = 0; /* the reader's table agrees */
        assert_true(fx_ggml_type_layout(want[i].t, &be, &bb));
        assert_int_equal(be, want[i].elems);
        assert_int_equal(qr_type_is_quantized(want[i].t), want[i].elems > 1);
    }
    assert_int_equal(qr_block_elems(9), 0); /* q8_1: not made here */
    assert_string_equal(qr_type_name(9), "?");
}

static void test_should_quantize(void **state) {
    (void)state;
    const uint64_t mat[4] = {256, 512, 1, 1}, vec[4] = {256, 1, 1, 1},
                   col[4] = {1, 256, 1, 1}, cube[4] = {256, 4, 8, 1};
    assert_int_equal(qr_n_dims(mat), 2);
    assert_int_equal(qr_n_dims(vec), 1);
    assert_int_equal(qr_n_dims(col), 2);
    assert_int_equal(qr_n_dims(cube), 3);
    assert_true(qr_should_quantize("blk.0.attn_q.weight", mat));
    assert_true(qr_should_quantize("blk.0.ffn_down_exps.weight", cube));
    assert_false(qr_should_quantize("blk.0.attn_q.weight", vec));
    assert_false(qr_should_quantize("blk.0.attn_q.bias", mat));
    assert_false(qr_should_quantize("blk.0.attn_norm.weight", mat));
    assert_false(qr_should_quantize("blk.0.ffn_gate_inp.weight", mat));
    assert_false(qr_should_quantize("position_embd.weight", mat));
    assert_false(qr_should_quantize("token_types.weight", mat));
    assert_false(qr_should_quantize("blk.0.ssm_conv1d.weight", mat));
    assert_false(qr_should_quantize("blk.0.time_mix_w1.weight", mat));
    assert_false(qr_should_quantize("blk.0.attn_rel_b.weight", mat));
    assert_false(qr_should_quantize("eight", mat));
}

/* The branches the five models do not reach, as llama-quant.cpp states
 * them: Falcon, the 70B attn_v bump, attn_qkv, and a row no 32-element
 * type divides. */
static uint32_t one(qr_model *m, const char *preset, const char *name,
                    uint64_t nx, int *ok) {
    qr_state st = {0};
    uint64_t ne[4] = {nx, 64, 1, 1};
    uint32_t t = 0;
    char why[200];
    *ok = qr_tensor_type(&st, m, qr_find_preset(preset), 0, name, ne, &t, why,
                         sizeof why) == 0;
    return t;
}

static void test_other_branches(void **state) {
    (void)state;
    int ok;
    qr_model falcon = {"falcon", 32, 32, 32, 1, 32};
    assert_int_equal(one(&falcon, "Q4_K_M", "output.weight", 256, &ok), QR_Q8_0);
    assert_int_equal(one(&falcon, "Q3_K_L", "blk.0.attn_output.weight", 256, &ok),
                     QR_Q4_K);
    assert_int_equal(one(&falcon, "Q3_K_M", "blk.0.attn_output.weight", 256, &ok),
                     QR_Q3_K);
    assert_int_equal(one(&falcon, "Q3_K_L", "blk.0.ffn_down.weight", 256, &ok),
                     QR_Q4_K);
    /* Falcon Q4_K_M ffn_down: Q6_K in the first 16th, then by more_bits. */
    assert_int_equal(one(&falcon, "Q4_K_M", "blk.0.ffn_down.weight", 256, &ok),
                     QR_Q6_K);
    qr_model l70 = {"llama", 80, 64, 8, 1, 80};
    assert_int_equal(one(&l70, "Q3_K_S", "blk.0.attn_v.weight", 256, &ok), QR_Q5_K);
    assert_int_equal(one(&l70, "Q2_K", "blk.0.attn_v.weight", 256, &ok), QR_Q5_K);
    qr_model l65 = {"llama", 80, 64, 64, 1, 80};
    assert_int_equal(one(&l65, "Q3_K_S", "blk.0.attn_v.weight", 256, &ok), QR_Q3_K);
    assert_int_equal(one(&l65, "Q2_K", "blk.0.attn_v.weight", 256, &ok), QR_Q3_K);
    qr_model q70 = {"qwen2", 80, 64, 64, 1, 80};
    assert_int_equal(one(&q70, "Q3_K_S", "blk.0.attn_v.weight", 256, &ok), QR_Q5_K);
    qr_model small = {"llama", 4, 8, 8, 1, 4};
    assert_int_equal(one(&small, "Q3_K_M", "blk.0.attn_qkv.weight", 256, &ok), QR_Q4_K);
    assert_int_equal(one(&small, "Q4_K_M", "blk.0.attn_qkv.weight", 256, &ok), QR_Q5_K);
    assert_int_equal(one(&small, "Q5_K_M", "blk.0.attn_qkv.weight", 256, &ok), QR_Q6_K);
    assert_int_equal(one(&small, "Q4_K_S", "blk.0.attn_qkv.weight", 256, &ok), QR_Q4_K);
    /* Fallbacks: Q5_K -> Q5_1, Q4_K -> Q5_0; no 32-element fit: F16. */
    assert_int_equal(one(&small, "Q5_K_S", "blk.0.attn_q.weight", 96, &ok), QR_Q5_1);
    assert_int_equal(one(&small, "Q4_K_S", "blk.0.attn_q.weight", 96, &ok), QR_Q5_0);
    assert_int_equal(one(&small, "Q4_K_S", "blk.0.attn_q.weight", 100, &ok), QR_F16);
    assert_true(ok);
    /* The output matrix takes Q8_0 when the preset's blocks do not fit. */
    assert_int_equal(one(&small, "Q4_K_M", "output.weight", 96, &ok), QR_Q8_0);
    /* A legacy type has no fallback: llama.cpp stops, and so do we. */
    one(&small, "Q4_0", "blk.0.attn_q.weight", 100, &ok);
    assert_false(ok);
    one(&small, "Q8_0", "blk.0.attn_q.weight", 48, &ok);
    assert_false(ok);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_presets),
        cmocka_unit_test(test_types),
        cmocka_unit_test(test_should_quantize),
        cmocka_unit_test(test_order),
        cmocka_unit_test(test_other_branches),
        cmocka_unit_test(test_llama_cpp_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
