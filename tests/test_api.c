/*
 * The public model API through include/ferrox.h only: versions, statuses,
 * struct_size rules (RELIABILITY E32, E36), allocator and log hooks,
 * allocation-failure injection over load (G43), I/O errors (G44), and the
 * metadata and tensor accessors. Built and run against both the shared
 * and the static library.
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

static const char *write_model(const char *name, const gw_model_spec *spec) {
    static char path[4096];
    gw_buf b = {0};
    gw_build_model(&b, spec);
    snprintf(path, sizeof path, "%s", fx_test_tmp_path(name));
    assert_int_equal(gw_write_file(&b, path), 0);
    gw_free(&b);
    return path;
}

static const char *default_model(void) {
    gw_model_spec spec;
    gw_model_spec_default(&spec);
    return write_model("model.gguf", &spec);
}

static void test_version(void **state) {
    (void)state;
    assert_int_equal(fx_version_number(), FX_VERSION_NUMBER);
    char expect[32];
    snprintf(expect, sizeof expect, "%d.%d.%d", FX_VERSION_MAJOR,
             FX_VERSION_MINOR, FX_VERSION_PATCH);
    assert_string_equal(fx_version_string(), expect);
    assert_string_equal(fx_version_string(), FX_VERSION_STRING);
}

static void test_status_strings(void **state) {
    (void)state;
    assert_string_equal(fx_status_str(FX_OK), "ok");
    /* Every code up to the last one has its own text. */
    for (int a = 1; a <= FX_ERR_ALL_BANNED; a++) {
        const char *sa = fx_status_str((fx_status)a);
        assert_string_not_equal(sa, "unknown status");
        for (int b = 0; b < a; b++)
            assert_string_not_equal(sa, fx_status_str((fx_status)b));
    }
    assert_string_equal(fx_status_str((fx_status)9999), "unknown status");
    assert_string_equal(fx_status_str((fx_status)-1), "unknown status");
}

/* E32: NULL arguments on every model entry point. */
static void test_null_arguments(void **state) {
    (void)state;
    fx_model *model = (fx_model *)&model; /* must be overwritten */
    char err[128];
    assert_int_equal(fx_model_load(NULL, NULL, &model, err, sizeof err),
                     FX_ERR_INVALID_ARG);
    assert_null(model);
    assert_non_null(strstr(err, "path"));
    assert_int_equal(fx_model_load("x", NULL, NULL, err, sizeof err),
                     FX_ERR_INVALID_ARG);
    assert_int_equal(fx_model_load("x", NULL, NULL, NULL, 0),
                     FX_ERR_INVALID_ARG);
    fx_model_free(NULL);
    fx_model_params_init(NULL);
    fx_model_info_init(NULL);
    fx_tensor_info_init(NULL);
    assert_non_null(fx_model_errmsg(NULL));
    assert_int_equal(fx_model_get_info(NULL, NULL), FX_ERR_INVALID_ARG);
    assert_int_equal(fx_model_meta_count(NULL), 0);
    assert_null(fx_model_meta_key(NULL, 0));
    assert_int_equal(fx_model_meta_format(NULL, 0, NULL, 0, NULL),
                     FX_ERR_INVALID_ARG);
    assert_int_equal(fx_model_tensor_count(NULL), 0);
    assert_int_equal(fx_model_tensor_get(NULL, 0, NULL), FX_ERR_INVALID_ARG);
}

static void test_load_and_inspect(void **state) {
    (void)state;
    const char *path = default_model();
    fx_model *model = NULL;
    char err[256];
    assert_int_equal(fx_model_load(path, NULL, &model, err, sizeof err), FX_OK);
    assert_string_equal(err, "");
    assert_string_equal(fx_model_errmsg(model), "");

    fx_model_info info;
    fx_model_info_init(&info);
    assert_int_equal(fx_model_get_info(model, &info), FX_OK);
    assert_string_equal(info.arch, "llama");
    assert_string_equal(info.name, "synthetic");
    assert_int_equal(info.gguf_version, 3);
    assert_int_equal(info.vocab_only, 0);
    assert_int_equal(info.n_vocab, 64);
    assert_int_equal(info.n_embd, 64);
    assert_int_equal(info.n_layer, 2);
    assert_int_equal(info.n_head, 4);
    assert_int_equal(info.n_head_kv, 2);
    assert_int_equal(info.n_ff, 96);
    assert_int_equal(info.n_ctx_train, 256);
    assert_int_equal(info.n_rot, 16);
    assert_int_equal(info.n_tensors, 3 + 2 * 9);
    /* params: every tensor's elements */
    uint64_t expect = 64 * 64 * 2 + 64 + 2 * (64 + 64 * 64 + 2 * 64 * 32 +
                                              64 * 64 + 64 + 3 * 64 * 96);
    assert_int_equal(info.n_params, expect);

    uint64_t n_meta = fx_model_meta_count(model);
    assert_int_equal(n_meta, info.n_meta);
    assert_string_equal(fx_model_meta_key(model, 0), "general.architecture");
    assert_null(fx_model_meta_key(model, n_meta));
    char text[64];
    size_t needed = 0;
    assert_int_equal(fx_model_meta_format(model, 0, text, sizeof text, &needed),
                     FX_OK);
    assert_string_equal(text, "\"llama\"");
    assert_int_equal(needed, 8);
    assert_int_equal(fx_model_meta_format(model, 0, text, 4, &needed),
                     FX_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(needed, 8);
    assert_string_equal(text, "\"ll");
    assert_string_not_equal(fx_model_errmsg(model), "");
    assert_int_equal(fx_model_meta_format(model, n_meta, text, sizeof text, NULL),
                     FX_ERR_INVALID_ARG);
    assert_non_null(strstr(fx_model_errmsg(model), "out of range"));

    assert_int_equal(fx_model_tensor_count(model), info.n_tensors);
    fx_tensor_info t;
    fx_tensor_info_init(&t);
    assert_int_equal(fx_model_tensor_get(model, 0, &t), FX_OK);
    assert_string_equal(t.name, "token_embd.weight");
    assert_string_equal(t.type_name, "f32");
    assert_int_equal(t.n_dims, 2);
    assert_int_equal(t.dims[0], 64);
    assert_int_equal(t.dims[1], 64);
    assert_int_equal(t.dims[2], 1);
    assert_int_equal(t.n_bytes, 64 * 64 * 4);
    assert_int_equal(t.offset % 32, 0);
    assert_int_equal(fx_model_tensor_get(model, info.n_tensors, &t),
                     FX_ERR_INVALID_ARG);
    fx_model_free(model);
}

/* E36: struct_size older, newer-but-zero, newer-and-set. */
static void test_struct_size(void **state) {
    (void)state;
    const char *path = default_model();
    fx_model *model = NULL;
    char err[256];

    struct {
        fx_model_params p;
        uint64_t future_field;
    } newer;
    memset(&newer, 0, sizeof newer);
    fx_model_params_init(&newer.p);
    newer.p.struct_size = sizeof newer;
    assert_int_equal(fx_model_load(path, &newer.p, &model, err, sizeof err),
                     FX_OK);
    fx_model_free(model);

    newer.future_field = 1;
    assert_int_equal(fx_model_load(path, &newer.p, &model, err, sizeof err),
                     FX_ERR_UNSUPPORTED);
    assert_null(model);
    assert_non_null(strstr(err, "struct_size"));

    fx_model_params small;
    fx_model_params_init(&small);
    small.struct_size = 4;
    assert_int_equal(fx_model_load(path, &small, &model, err, sizeof err),
                     FX_ERR_INVALID_ARG);
    small.struct_size = 0;
    assert_int_equal(fx_model_load(path, &small, &model, err, sizeof err),
                     FX_ERR_INVALID_ARG);

    assert_int_equal(fx_model_load(path, NULL, &model, err, sizeof err), FX_OK);
    /* An info struct from an older header gets only what it knows. */
    fx_model_info info;
    memset(&info, 0xAB, sizeof info);
    info.struct_size = offsetof(fx_model_info, file_size) + sizeof(uint64_t);
    assert_int_equal(fx_model_get_info(model, &info), FX_OK);
    assert_int_equal(info.n_embd, 64);
    info.struct_size = 3;
    assert_int_equal(fx_model_get_info(model, &info), FX_ERR_INVALID_ARG);
    fx_tensor_info t;
    memset(&t, 0, sizeof t);
    assert_int_equal(fx_model_tensor_get(model, 0, &t), FX_ERR_INVALID_ARG);
    fx_model_free(model);
}

static void test_allocator_hooks(void **state) {
    (void)state;
    const char *path = default_model();
    fx_model *model = NULL;
    char err[256];
    fx_model_params params;
    fx_model_params_init(&params);
    fx_fault_alloc fa = {0};
    params.allocator.malloc_fn = fx_fault_allocator(&fa).malloc_fn; /* partial set */
    assert_int_equal(fx_model_load(path, &params, &model, err, sizeof err),
                     FX_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "allocator"));

    params.allocator = fx_fault_allocator(&fa);
    assert_int_equal(fx_model_load(path, &params, &model, err, sizeof err),
                     FX_OK);
    assert_true(fa.calls > 0);
    assert_true(fa.live > 0);
    fx_model_free(model);
    assert_int_equal(fa.live, 0);
}

/* G43: fail the Nth allocation of a load, for every N, once alone and
 * once with every later allocation failing too. */
static void test_allocation_failures(void **state) {
    (void)state;
    const char *paths[3];
    /* Q8_0 weights: the load also allocates their repacked copy. */
    gw_model_spec q8;
    gw_model_spec_default(&q8);
    q8.type = 8;
    static char q8_copy[4096];
    paths[2] = strcpy(q8_copy, write_model("model-q8.gguf", &q8));
    paths[0] = default_model();
    static char vocab_copy[4096];
    const char *vocab = fx_test_shared_path("vocab/ggml-vocab-llama-spm.gguf");
    paths[1] = vocab ? strcpy(vocab_copy, vocab) : NULL;
    static char model_copy[4096];
    paths[0] = strcpy(model_copy, paths[0]);
    for (int which = 0; which < 3; which++) {
        if (!paths[which]) continue;
        fx_model_params params;
        fx_model_params_init(&params);
        if (which == 1) params.flags = FX_MODEL_VOCAB_ONLY;
        fx_fault_alloc probe = {0};
        params.allocator = fx_fault_allocator(&probe);
        fx_model *model = NULL;
        assert_int_equal(fx_model_load(paths[which], &params, &model, NULL, 0),
                         FX_OK);
        fx_model_free(model);
        long total = probe.calls;
        assert_true(total > 0);
        for (int after = 0; after < 2; after++) {
            for (long n = 1; n <= total; n++) {
                fx_fault_alloc fa = {0};
                fx_fault_plan(&fa, n, after);
                params.allocator = fx_fault_allocator(&fa);
                char err[256];
                fx_status st = fx_model_load(paths[which], &params, &model, err,
                                             sizeof err);
                if (st != FX_ERR_NOMEM)
                    fail_msg("allocation %ld of %ld failing gave %s (%s)", n,
                             total, fx_status_str(st), err);
                assert_null(model);
                assert_int_equal(fa.live, 0);
            }
        }
        /* and the library still works afterwards */
        probe = (fx_fault_alloc){0};
        params.allocator = fx_fault_allocator(&probe);
        assert_int_equal(fx_model_load(paths[which], &params, &model, NULL, 0),
                         FX_OK);
        fx_model_free(model);
        assert_int_equal(probe.live, 0);
    }
}

/* G44 and A1 through the file path. */
static void test_io_and_truncated_files(void **state) {
    (void)state;
    fx_model *model = NULL;
    char err[256];
    assert_int_equal(fx_model_load("/nonexistent/m.gguf", NULL, &model, err,
                                   sizeof err),
                     FX_ERR_IO);
    assert_non_null(strstr(err, "/nonexistent/m.gguf"));
    char tiny[8];
    assert_int_equal(fx_model_load("/nonexistent/m.gguf", NULL, &model, tiny,
                                   sizeof tiny),
                     FX_ERR_IO);
    assert_int_equal(strlen(tiny), 7);
    assert_int_equal(fx_model_load("/tmp", NULL, &model, err, sizeof err),
                     FX_ERR_IO);

    gw_model_spec spec;
    gw_model_spec_default(&spec);
    gw_buf b = {0};
    gw_build_model(&b, &spec);
    const char *path = fx_test_tmp_path("cut.gguf");
    size_t full = b.len;
    for (size_t cut = 0; cut < full; cut += 1 + cut / 7) {
        b.len = cut;
        assert_int_equal(gw_write_file(&b, path), 0);
        fx_status st = fx_model_load(path, NULL, &model, err, sizeof err);
        if (st == FX_OK) fail_msg("file cut at %zu of %zu loaded", cut, full);
        assert_null(model);
        assert_string_not_equal(err, "");
    }
    remove(path);
    gw_free(&b);
}

static void test_vocab_only(void **state) {
    (void)state;
    const char *spm = fx_test_shared_path("vocab/ggml-vocab-llama-spm.gguf");
    if (!spm) skip();
    fx_model *model = NULL;
    char err[256];
    /* As a full model it has no tensors: the first one is named. */
    assert_int_equal(fx_model_load(spm, NULL, &model, err, sizeof err),
                     FX_ERR_MISSING);
    assert_non_null(strstr(err, "token_embd.weight"));
    fx_model_params params;
    fx_model_params_init(&params);
    params.flags = FX_MODEL_VOCAB_ONLY;
    assert_int_equal(fx_model_load(spm, &params, &model, err, sizeof err), FX_OK);
    fx_model_info info;
    fx_model_info_init(&info);
    assert_int_equal(fx_model_get_info(model, &info), FX_OK);
    assert_int_equal(info.vocab_only, 1);
    assert_int_equal(info.n_vocab, 32000);
    assert_int_equal(info.n_tensors, 0);
    assert_int_equal(info.n_meta, 22);
    fx_model_free(model);

    static char gpt2[4096];
    const char *p = fx_test_shared_path("vocab/ggml-vocab-gpt-2.gguf");
    assert_non_null(p);
    strcpy(gpt2, p);
    assert_int_equal(fx_model_load(gpt2, NULL, &model, err, sizeof err),
                     FX_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "'gpt2'"));
    assert_int_equal(fx_model_load(gpt2, &params, &model, err, sizeof err),
                     FX_OK);
    assert_int_equal(fx_model_get_info(model, &info), FX_OK);
    assert_string_equal(info.arch, "gpt2");
    assert_int_equal(info.n_vocab, 50257);
    fx_model_free(model);
}

typedef struct log_capture {
    int count;
    int worst;
    char last[256];
} log_capture;

static void capture_log(void *user, fx_log_level level, const char *message) {
    log_capture *c = user;
    c->count++;
    if (c->count == 1 || (int)level < c->worst) c->worst = (int)level;
    snprintf(c->last, sizeof c->last, "%s", message);
}

static void test_log_hook(void **state) {
    (void)state;
    const char *path = default_model();
    fx_model_params params;
    fx_model_params_init(&params);
    log_capture cap = {0, 0, ""};
    params.log_fn = capture_log;
    params.log_user = &cap;
    params.log_level = FX_LOG_INFO;
    fx_model *model = NULL;
    assert_int_equal(fx_model_load(path, &params, &model, NULL, 0), FX_OK);
    assert_true(cap.count >= 1);
    assert_non_null(strstr(cap.last, "arch llama"));
    fx_model_free(model);

    /* At the default level a success says nothing and a failure one line. */
    cap = (log_capture){0, 0, ""};
    params.log_level = FX_LOG_WARN;
    assert_int_equal(fx_model_load(path, &params, &model, NULL, 0), FX_OK);
    assert_int_equal(cap.count, 0);
    fx_model_free(model);
    assert_int_equal(fx_model_load("/nonexistent", &params, &model, NULL, 0),
                     FX_ERR_IO);
    assert_int_equal(cap.count, 1);
    assert_int_equal(cap.worst, FX_LOG_ERROR);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version),
        cmocka_unit_test(test_status_strings),
        cmocka_unit_test(test_null_arguments),
        cmocka_unit_test(test_load_and_inspect),
        cmocka_unit_test(test_struct_size),
        cmocka_unit_test(test_allocator_hooks),
        cmocka_unit_test(test_allocation_failures),
        cmocka_unit_test(test_io_and_truncated_files),
        cmocka_unit_test(test_vocab_only),
        cmocka_unit_test(test_log_hook),
    };
    return cmocka_run_group_tests_name("api", tests, NULL, NULL);
}
