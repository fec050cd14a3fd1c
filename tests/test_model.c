/*
 * Hyperparameter and tensor-table checks (RELIABILITY A12 and the model's
 * own consistency rules), on synthetic models parsed from memory.
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

#include "gguf_writer.h"
#include "model/model.h"

static fx_status load_spec(const gw_model_spec *spec, fx_hparams *hp,
                           char *msg) {
    gw_buf b = {0};
    gw_build_model(&b, spec);
    fx_alloc alloc;
    fx_alloc_init(&alloc, NULL);
    fx_gguf *g = NULL;
    fx_error err;
    fx_error_clear(&err);
    fx_status st = fx_gguf_open_memory(b.data, b.len, &alloc, &g, &err);
    if (st == FX_OK) st = fx_hparams_load(g, hp, &err);
    if (msg) strcpy(msg, err.message);
    fx_gguf_close(g);
    gw_free(&b);
    return st;
}

static void test_llama_and_qwen2(void **state) {
    (void)state;
    const char *arches[] = {"llama", "qwen2"};
    uint32_t types[] = {0, 1, 8, 30};
    for (int a = 0; a < 2; a++) {
        for (int t = 0; t < 4; t++) {
            gw_model_spec spec;
            gw_model_spec_default(&spec);
            spec.arch = arches[a];
            spec.type = types[t];
            spec.tied = t % 2;
            fx_hparams hp;
            char msg[FX_ERRMSG_SIZE];
            fx_status st = load_spec(&spec, &hp, msg);
            if (st != FX_OK) fail_msg("%s type %u: %s", arches[a], types[t], msg);
            assert_int_equal(hp.arch, a == 0 ? FX_ARCH_LLAMA : FX_ARCH_QWEN2);
            assert_int_equal(hp.n_embd, 64);
            assert_int_equal(hp.n_layer, 2);
            assert_int_equal(hp.n_head, 4);
            assert_int_equal(hp.n_head_kv, 2);
            assert_int_equal(hp.head_dim, 16);
            assert_int_equal(hp.n_rot, 16);
            assert_int_equal(hp.n_ff, 96);
            assert_int_equal(hp.n_vocab, 64);
            assert_int_equal(hp.n_ctx_train, 256);
            assert_true(hp.rope_freq_base == 10000.0f);
            assert_true(hp.rms_norm_eps == 1e-5f);
            assert_true(hp.n_params > 0);
        }
    }
}

/* A12: every required tensor missing, in turn, names itself. */
static void test_missing_tensors(void **state) {
    (void)state;
    const char *required[] = {
        "token_embd.weight", "output_norm.weight", "blk.0.attn_norm.weight",
        "blk.0.attn_q.weight", "blk.1.attn_k.weight", "blk.1.attn_v.weight",
        "blk.0.attn_output.weight", "blk.1.ffn_norm.weight",
        "blk.0.ffn_gate.weight", "blk.1.ffn_up.weight", "blk.1.ffn_down.weight",
    };
    for (size_t i = 0; i < sizeof required / sizeof *required; i++) {
        gw_model_spec spec;
        gw_model_spec_default(&spec);
        spec.skip_tensor = required[i];
        fx_hparams hp;
        char msg[FX_ERRMSG_SIZE];
        assert_int_equal(load_spec(&spec, &hp, msg), FX_ERR_MISSING);
        assert_non_null(strstr(msg, required[i]));
    }
    gw_model_spec spec;
    gw_model_spec_default(&spec);
    spec.arch = "qwen2";
    spec.skip_tensor = "blk.1.attn_k.bias";
    fx_hparams hp;
    char msg[FX_ERRMSG_SIZE];
    assert_int_equal(load_spec(&spec, &hp, msg), FX_ERR_MISSING);
    assert_non_null(strstr(msg, "blk.1.attn_k.bias"));
}

/* A12: a tensor with the wrong shape for the architecture. */
static void test_wrong_shapes(void **state) {
    (void)state;
    const char *names[] = {"token_embd.weight", "output.weight",
                           "blk.1.attn_q.weight", "blk.0.ffn_down.weight",
                           "blk.0.attn_norm.weight"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        gw_model_spec spec;
        gw_model_spec_default(&spec);
        spec.bad_shape_tensor = names[i];
        fx_hparams hp;
        char msg[FX_ERRMSG_SIZE];
        assert_int_equal(load_spec(&spec, &hp, msg), FX_ERR_BAD_SHAPE);
        assert_non_null(strstr(msg, names[i]));
    }
}

static size_t arch_override(gw_buf *b, void *user) {
    const char *const *kv = user; /* {key, value-as-u32-text or NULL} */
    gw_kv_u32(b, kv[0], (uint32_t)atoi(kv[1]));
    return 1;
}

static void test_bad_hparams(void **state) {
    (void)state;
    /* The writer sets head_count_kv itself; a duplicate would be caught as
     * such, so inconsistent numbers are made through the spec instead. */
    gw_model_spec spec;
    fx_hparams hp;
    char msg[FX_ERRMSG_SIZE];

    gw_model_spec_default(&spec);
    spec.n_head = 5; /* 64 is not a multiple of 5 */
    spec.n_head_kv = 5;
    spec.skip_tensor = NULL;
    assert_int_equal(load_spec(&spec, &hp, msg), FX_ERR_BAD_HPARAMS);
    assert_non_null(strstr(msg, "multiple of the head count"));

    gw_model_spec_default(&spec);
    spec.n_head_kv = 3; /* 4 heads do not group into 3 */
    assert_int_equal(load_spec(&spec, &hp, msg), FX_ERR_BAD_HPARAMS);

    gw_model_spec_default(&spec);
    spec.n_layer = 0;
    assert_int_equal(load_spec(&spec, &hp, msg), FX_ERR_BAD_HPARAMS);
    assert_non_null(strstr(msg, "n_layer"));

    /* An extra key with a wrong value type for a required number. */
    const char *over[] = {"llama.vocab_size", "0"};
    gw_model_spec_default(&spec);
    spec.extra_kv = arch_override;
    spec.extra_user = (void *)over;
    /* vocab_size 0 falls back to the embedding's rows */
    assert_int_equal(load_spec(&spec, &hp, msg), FX_OK);
    assert_int_equal(hp.n_vocab, 64);
}

/* Qwen3: heads of attention.key_length (wider than n_embd / n_head here,
 * as in the real models), a norm per query and key head; the keys and
 * tensors that make it are checked like the others (A12). */
static void test_qwen3(void **state) {
    (void)state;
    gw_model_spec spec;
    fx_hparams hp;
    char msg[FX_ERRMSG_SIZE];
    gw_model_spec_default(&spec);
    spec.arch = "qwen3";
    spec.head_dim = 24;
    if (load_spec(&spec, &hp, msg) != FX_OK) fail_msg("qwen3: %s", msg);
    assert_int_equal(hp.arch, FX_ARCH_QWEN3);
    assert_int_equal(hp.head_dim, 24);
    assert_int_equal(hp.n_rot, 24);
    assert_int_equal(hp.n_embd, 64);

    const char *norms[] = {"blk.1.attn_q_norm.weight", "blk.0.attn_k_norm.weight"};
    for (int i = 0; i < 2; i++) {
        spec.skip_tensor = norms[i];
        assert_int_equal(load_spec(&spec, &hp, msg), FX_ERR_MISSING);
        assert_non_null(strstr(msg, norms[i]));
        spec.skip_tensor = NULL;
        spec.bad_shape_tensor = norms[i];
        assert_int_equal(load_spec(&spec, &hp, msg), FX_ERR_BAD_SHAPE);
        assert_non_null(strstr(msg, norms[i]));
        spec.bad_shape_tensor = NULL;
    }

    /* Values of another width than the keys: one head_dim serves both. */
    const char *value48[] = {"qwen3.attention.value_length", "48"};
    spec.skip_key = "qwen3.attention.value_length";
    spec.extra_kv = arch_override;
    spec.extra_user = (void *)value48;
    assert_int_equal(load_spec(&spec, &hp, msg), FX_ERR_UNSUPPORTED);
    assert_non_null(strstr(msg, "value_length"));

    /* A value width without a key width. */
    const char *value24[] = {"qwen3.attention.value_length", "24"};
    gw_model_spec_default(&spec);
    spec.arch = "qwen3";
    spec.extra_kv = arch_override;
    spec.extra_user = (void *)value24;
    assert_int_equal(load_spec(&spec, &hp, msg), FX_ERR_BAD_HPARAMS);

    /* Heads too wide to be real, and an odd one RoPE cannot rotate. */
    const char *wide[] = {"qwen3.attention.key_length", "5000"};
    spec.extra_user = (void *)wide;
    assert_int_equal(load_spec(&spec, &hp, msg), FX_ERR_BAD_HPARAMS);
    assert_non_null(strstr(msg, "head_dim"));
    const char *odd[] = {"qwen3.attention.key_length", "23"};
    spec.extra_user = (void *)odd;
    assert_int_equal(load_spec(&spec, &hp, msg), FX_ERR_BAD_HPARAMS);
}

/* Gemma 2 and 3: their numbers with llama.cpp's defaults where a key is
 * absent, the query scale of the 27B models, their extra tensors (A12). */
static void test_gemma(void **state) {
    (void)state;
    gw_model_spec spec;
    fx_hparams hp;
    char msg[FX_ERRMSG_SIZE];
    gw_model_spec_default(&spec);
    spec.arch = "gemma2";
    spec.head_dim = 24;
    if (load_spec(&spec, &hp, msg) != FX_OK) fail_msg("gemma2: %s", msg);
    assert_int_equal(hp.arch, FX_ARCH_GEMMA2);
    assert_int_equal(hp.n_swa, 4096);
    assert_int_equal(hp.swa_period, 2);
    assert_true(hp.attn_softcap == 50.0f && hp.final_softcap == 30.0f);
    assert_true(hp.attn_scale == 1.0f / sqrtf(24.0f));
    assert_true(hp.embd_scale && hp.post_norms && hp.ffn_act == FX_FFN_GELU);
    assert_true(fx_layer_slides(&hp, 0) && !fx_layer_slides(&hp, 1));
    spec.n_swa = 7;
    spec.attn_softcap = 20.0f;
    spec.final_softcap = 10.0f;
    assert_int_equal(load_spec(&spec, &hp, msg), FX_OK);
    assert_int_equal(hp.n_swa, 7);
    assert_true(hp.attn_softcap == 20.0f && hp.final_softcap == 10.0f);
    spec.skip_tensor = "blk.1.post_ffw_norm.weight";
    assert_int_equal(load_spec(&spec, &hp, msg), FX_ERR_MISSING);
    assert_non_null(strstr(msg, "blk.1.post_ffw_norm.weight"));
    spec.skip_tensor = NULL;
    spec.bad_shape_tensor = "blk.0.post_attention_norm.weight";
    assert_int_equal(load_spec(&spec, &hp, msg), FX_ERR_BAD_SHAPE);
    /* the 27B rule: 46 layers scale queries by n_embd / n_head (16) */
    spec.bad_shape_tensor = NULL;
    spec.n_layer = 46;
    assert_int_equal(load_spec(&spec, &hp, msg), FX_OK);
    assert_true(hp.attn_scale == 1.0f / sqrtf(16.0f));

    gw_model_spec_default(&spec);
    spec.arch = "gemma3";
    spec.head_dim = 24;
    spec.n_swa = 5;
    spec.rope_base = 1e6f;
    spec.rope_factor = 8.0f;
    if (load_spec(&spec, &hp, msg) != FX_OK) fail_msg("gemma3: %s", msg);
    assert_int_equal(hp.arch, FX_ARCH_GEMMA3);
    assert_int_equal(hp.swa_period, 6);
    assert_true(hp.attn_softcap == 0.0f && hp.final_softcap == 0.0f);
    assert_true(hp.rope_freq_base == 1e6f && hp.rope_freq_scale == 0.125f);
    assert_true(hp.rope_freq_base_swa == 10000.0f && hp.rope_freq_scale_swa == 1.0f);
    for (uint32_t l = 0; l < 12; l++)
        assert_int_equal(fx_layer_slides(&hp, l), l % 6 != 5);
    spec.skip_tensor = "blk.0.attn_k_norm.weight";
    assert_int_equal(load_spec(&spec, &hp, msg), FX_ERR_MISSING);
    spec.skip_tensor = NULL;
    /* Gemma 3 has no default window */
    spec.n_swa = 0;
    assert_int_equal(load_spec(&spec, &hp, msg), FX_ERR_MISSING);
    assert_non_null(strstr(msg, "sliding_window"));
    /* a zero window is no window at all, and a non-positive scaling */
    const char *zero[] = {"gemma3.attention.sliding_window", "0"};
    spec.extra_kv = arch_override;
    spec.extra_user = (void *)zero;
    assert_int_equal(load_spec(&spec, &hp, msg), FX_ERR_BAD_HPARAMS);
    spec.extra_kv = NULL;
    spec.n_swa = 5;
    spec.rope_factor = -2.0f;
    assert_int_equal(load_spec(&spec, &hp, msg), FX_ERR_BAD_HPARAMS);
}

/* Phi-3: fused Q/K/V and gate/up shapes, a window on every layer (or none,
 * as in Phi-4), llama.cpp's windows for files without the key, LongRoPE's
 * numbers (A12). */
static void test_phi3(void **state) {
    (void)state;
    gw_model_spec spec;
    fx_hparams hp;
    char msg[FX_ERRMSG_SIZE];
    gw_model_spec_default(&spec);
    spec.arch = "phi3";
    spec.n_swa = 9;
    spec.n_ctx_orig = 128;
    spec.rope_attn_factor = 1.25f;
    if (load_spec(&spec, &hp, msg) != FX_OK) fail_msg("phi3: %s", msg);
    assert_int_equal(hp.arch, FX_ARCH_PHI3);
    assert_int_equal(hp.n_swa, 9);
    assert_int_equal(hp.n_ctx_orig, 128);
    assert_true(hp.rope_attn_factor == 1.25f);
    for (uint32_t l = 0; l < 4; l++) assert_true(fx_layer_slides(&hp, l));
    spec.bad_shape_tensor = "blk.1.attn_qkv.weight";
    assert_int_equal(load_spec(&spec, &hp, msg), FX_ERR_BAD_SHAPE);
    spec.bad_shape_tensor = "blk.0.ffn_up.weight";
    assert_int_equal(load_spec(&spec, &hp, msg), FX_ERR_BAD_SHAPE);
    spec.bad_shape_tensor = "rope_factors_long.weight";
    assert_int_equal(load_spec(&spec, &hp, msg), FX_ERR_BAD_SHAPE);
    spec.bad_shape_tensor = NULL;
    spec.rope_attn_factor = -1.0f;
    assert_int_equal(load_spec(&spec, &hp, msg), FX_ERR_BAD_HPARAMS);

    /* Phi-4: sliding_window 0, no window */
    gw_model_spec_default(&spec);
    spec.arch = "phi3";
    assert_int_equal(load_spec(&spec, &hp, msg), FX_OK);
    assert_int_equal(hp.n_swa, 0);
    assert_false(fx_layer_slides(&hp, 0));
    /* No key: known only for the models llama.cpp names (32 layers at a
     * 4096 context: Phi-3-mini-4k's 2047) */
    spec.skip_key = "phi3.attention.sliding_window";
    assert_int_equal(load_spec(&spec, &hp, msg), FX_ERR_MISSING);
    assert_non_null(strstr(msg, "sliding_window"));
    spec.n_layer = 32;
    spec.n_ctx = 4096;
    assert_int_equal(load_spec(&spec, &hp, msg), FX_OK);
    assert_int_equal(hp.n_swa, 2047);
}

static void test_unsupported(void **state) {
    (void)state;
    gw_model_spec spec;
    fx_hparams hp;
    char msg[FX_ERRMSG_SIZE];
    gw_model_spec_default(&spec);
    spec.arch = "mamba";
    assert_int_equal(load_spec(&spec, &hp, msg), FX_ERR_UNSUPPORTED);
    assert_non_null(strstr(msg, "'mamba'"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama_and_qwen2),
        cmocka_unit_test(test_missing_tensors),
        cmocka_unit_test(test_wrong_shapes),
        cmocka_unit_test(test_bad_hparams),
        cmocka_unit_test(test_qwen3),
        cmocka_unit_test(test_gemma),
        cmocka_unit_test(test_phi3),
        cmocka_unit_test(test_unsupported),
    };
    return cmocka_run_group_tests_name("model", tests, NULL, NULL);
}
