/*
 * docs/reliability.md 12, the part about metadata: a required key missing from an
 * otherwise valid model fails the load with FX_ERR_MISSING naming the key
 * (and nothing leaked); a key the loader has a default for may be left out.
 * (Duplicate keys and tensor names: test_gguf.c; missing and misshapen
 * tensors: test_model.c.) Public API only, against both libraries.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <ferrox.h>

#include "fault_alloc.h"
#include "gguf_writer.h"
#include "test_util.h"

static fx_status load_without(const char *key, char *err, size_t err_size,
                              fx_fault_alloc *fa) {
    gw_model_spec spec;
    gw_model_spec_default(&spec);
    spec.skip_key = key;
    const char *path = fx_test_tmp_path("model-faults.gguf");
    assert_int_equal(gw_write_model(path, &spec), 0);
    fx_model_params p;
    fx_model_params_init(&p);
    p.allocator = fx_fault_allocator(fa);
    fx_model *m = NULL;
    fx_status st = fx_model_load(path, &p, &m, err, err_size);
    if (st == FX_OK) {
        assert_non_null(m);
        fx_model_info info;
        fx_model_info_init(&info);
        assert_int_equal(fx_model_get_info(m, &info), FX_OK);
        assert_int_equal(info.n_layer, spec.n_layer);
        fx_model_free(m);
    } else {
        assert_null(m);
    }
    remove(path);
    return st;
}

static void test_required_key_missing(void **state) {
    (void)state;
    static const char *const required[] = {
        "general.architecture",   "llama.context_length",
        "llama.embedding_length", "llama.block_count",
        "llama.feed_forward_length", "llama.attention.head_count",
    };
    for (size_t i = 0; i < sizeof required / sizeof *required; i++) {
        char err[256] = "";
        fx_fault_alloc fa = {0};
        fx_status st = load_without(required[i], err, sizeof err, &fa);
        if (st != FX_ERR_MISSING)
            fail_msg("without %s: %s (%s)", required[i], fx_status_str(st), err);
        if (!strstr(err, required[i]))
            fail_msg("without %s: the message does not name it: %s", required[i],
                     err);
        assert_int_equal(fa.live, 0);
    }
}

/* Keys with a documented default: head_count_kv (no GQA), the RMS norm
 * epsilon and the RoPE base. */
static void test_optional_key_missing(void **state) {
    (void)state;
    static const char *const optional[] = {
        "general.name", "llama.attention.head_count_kv",
        "llama.attention.layer_norm_rms_epsilon", "llama.rope.freq_base",
    };
    for (size_t i = 0; i < sizeof optional / sizeof *optional; i++) {
        char err[256] = "";
        fx_fault_alloc fa = {0};
        fx_status st = load_without(optional[i], err, sizeof err, &fa);
        /* Without head_count_kv the writer's 2 KV heads become 4: the
         * K/V tensors then have the wrong shape, which is named. */
        if (strcmp(optional[i], "llama.attention.head_count_kv") == 0) {
            if (st != FX_OK && st != FX_ERR_BAD_SHAPE)
                fail_msg("without %s: %s (%s)", optional[i], fx_status_str(st), err);
        } else if (st != FX_OK) {
            fail_msg("without %s: %s (%s)", optional[i], fx_status_str(st), err);
        }
        assert_int_equal(fa.live, 0);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_required_key_missing),
        cmocka_unit_test(test_optional_key_missing),
    };
    return cmocka_run_group_tests_name("model_faults", tests, NULL, NULL);
}
