/*
 * The sized initializers (fx_*_init_sized) against hosts compiled with a
 * different layout of a struct than the library's: an older host's
 * smaller struct must never be written past its end, and the library must
 * then accept it with defaults for the members the host does not have.
 * Each struct sits at the start of a guard buffer filled with a pattern;
 * the bytes past the size the "host" passed must still hold the pattern.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include <ferrox.h>

#include "gguf_writer.h"
#include "test_util.h"

#define GUARD 0xA5

static char model_path[4096];

/* A guard buffer big enough for any public struct plus slack, aligned for
 * any of them. */
typedef union guard_buf {
    max_align_t align;
    unsigned char bytes[1024];
} guard_buf;

static void guard_fill(guard_buf *g) { memset(g->bytes, GUARD, sizeof g->bytes); }

/* Every byte from `from` to the end of the buffer still holds the pattern. */
static void guard_check(const guard_buf *g, size_t from) {
    for (size_t i = from; i < sizeof g->bytes; i++)
        if (g->bytes[i] != GUARD)
            fail_msg("byte %zu past the host's %zu-byte struct was written", i,
                     from);
}

static void all_zero(const guard_buf *g, size_t from, size_t to) {
    for (size_t i = from; i < to; i++)
        if (g->bytes[i] != 0) fail_msg("byte %zu not zeroed", i);
}

static uint32_t stored_size(const guard_buf *g) {
    uint32_t v;
    memcpy(&v, g->bytes, sizeof v);
    return v;
}

/* The first public layout of fx_request, as a host compiled against that
 * header declared it: everything up to `user`. */
typedef struct fx_request_v0 {
    uint32_t struct_size;
    uint32_t flags;
    const char *prompt;
    size_t prompt_len;
    const int32_t *prompt_tokens;
    size_t n_prompt_tokens;
    uint32_t max_tokens;
    float temperature;
    uint32_t top_k;
    float top_p;
    float min_p;
    uint64_t seed;
    const char *const *stop;
    size_t n_stop;
    const int32_t *stop_tokens;
    size_t n_stop_tokens;
    fx_lease *lease;
    void *user;
} fx_request_v0;

/* It must be a true prefix of today's struct, or the test means nothing. */
_Static_assert(sizeof(fx_request_v0) ==
                   offsetof(fx_request, user) + sizeof(void *),
               "fx_request_v0 is not the first layout of fx_request");
_Static_assert(offsetof(fx_request_v0, seed) == offsetof(fx_request, seed),
               "fx_request_v0 drifted from fx_request");
_Static_assert(sizeof(fx_request_v0) < sizeof(fx_request),
               "fx_request has not grown; pick another v0 struct");

static fx_model *load_model(void) {
    fx_model *m = NULL;
    char err[256];
    if (fx_model_load(model_path, NULL, &m, err, sizeof err) != FX_OK)
        fail_msg("load: %s", err);
    return m;
}

static fx_batcher *make_batcher(fx_model *m, const fx_batcher_params *p) {
    fx_batcher *b = NULL;
    char err[256];
    if (fx_batcher_create(m, p, &b, err, sizeof err) != FX_OK)
        fail_msg("create: %s", err);
    return b;
}

/* Runs one row to its end and returns how many tokens it generated. */
static size_t run_one(fx_batcher *b, const fx_request *r, int32_t *ids,
                      size_t cap) {
    fx_row *row = NULL;
    assert_int_equal(fx_submit(b, r, &row), FX_OK);
    size_t n = 0;
    int done = 0;
    for (int guard = 0; !done && guard < 1000; guard++) {
        assert_int_equal(fx_step(b), FX_OK);
        fx_event ev;
        while (fx_poll(b, &ev)) {
            if (ev.type != FX_EVENT_DONE) continue;
            assert_int_equal(ev.finish, FX_FINISH_LENGTH);
            n = ev.n_tokens < cap ? ev.n_tokens : cap;
            memcpy(ids, ev.tokens, n * sizeof *ids);
            done = 1;
        }
    }
    assert_true(done);
    return n;
}

/* An old host's fx_request: initialized in place without touching a byte
 * past it, accepted by fx_submit, and generating exactly what today's
 * struct with the same settings generates (the members it lacks take
 * their defaults). */
static void test_request_v0(void **state) {
    (void)state;
    guard_buf g;
    guard_fill(&g);
    fx_request_init_sized((fx_request *)(void *)g.bytes, sizeof(fx_request_v0));
    guard_check(&g, sizeof(fx_request_v0));
    fx_request_v0 v0;
    memcpy(&v0, g.bytes, sizeof v0);
    assert_int_equal(v0.struct_size, sizeof(fx_request_v0));
    assert_int_equal(v0.max_tokens, 256);
    assert_true(v0.top_p == 1.0f);
    assert_int_equal(v0.flags, 0);
    assert_null(v0.prompt);

    fx_model *m = load_model();
    fx_batcher_params p;
    fx_batcher_params_init(&p);
    p.n_ctx = 64;
    fx_batcher *b = make_batcher(m, &p);
    static const int32_t prompt[] = {1, 5, 9, 13};
    v0.prompt_tokens = prompt;
    v0.n_prompt_tokens = 4;
    v0.max_tokens = 6;
    v0.temperature = 0.8f;
    v0.seed = 42;
    int32_t old_ids[16], new_ids[16];
    size_t n_old = run_one(b, (const fx_request *)(const void *)&v0, old_ids, 16);

    fx_request r;
    fx_request_init(&r);
    assert_int_equal(r.struct_size, sizeof r);
    r.prompt_tokens = prompt;
    r.n_prompt_tokens = 4;
    r.max_tokens = 6;
    r.temperature = 0.8f;
    r.seed = 42;
    size_t n_new = run_one(b, &r, new_ids, 16);
    assert_int_equal(n_old, 6);
    assert_int_equal(n_new, n_old);
    assert_memory_equal(old_ids, new_ids, n_old * sizeof *old_ids);
    fx_batcher_free(b);
    fx_model_free(m);
}

/* fx_batcher_params: a size below its first layout is recorded, not
 * refused, and fx_batcher_create then fails; a newer host's larger struct
 * gets zeros in the bytes this library does not know and is accepted. */
static void test_batcher_params_sizes(void **state) {
    (void)state;
    fx_model *m = load_model();
    guard_buf g;
    fx_batcher *b = NULL;

    size_t small = offsetof(fx_batcher_params, log_level);
    guard_fill(&g);
    fx_batcher_params_init_sized((fx_batcher_params *)(void *)g.bytes, small);
    guard_check(&g, small); /* log_level's default was not written */
    assert_int_equal(stored_size(&g), small);
    all_zero(&g, sizeof(uint32_t), small);
    assert_int_equal(fx_batcher_create(m, (fx_batcher_params *)(void *)g.bytes,
                                       &b, NULL, 0),
                     FX_ERR_INVALID_ARG);
    assert_null(b);

    size_t big = sizeof(fx_batcher_params) + 32;
    guard_fill(&g);
    fx_batcher_params_init_sized((fx_batcher_params *)(void *)g.bytes, big);
    guard_check(&g, big);
    assert_int_equal(stored_size(&g), big);
    all_zero(&g, sizeof(fx_batcher_params), big);
    fx_batcher_params *p = (fx_batcher_params *)(void *)g.bytes;
    assert_int_equal(p->log_level, FX_LOG_WARN);
    p->n_ctx = 64;
    b = make_batcher(m, p);
    fx_batcher_free(b);

    /* Too small even for struct_size: only those bytes are zeroed. */
    guard_fill(&g);
    fx_batcher_params_init_sized((fx_batcher_params *)(void *)g.bytes, 2);
    all_zero(&g, 0, 2);
    guard_check(&g, 2);
    fx_batcher_params_init_sized(NULL, sizeof(fx_batcher_params));
    fx_model_free(m);
}

/* The model-side structs: the same contract. */
static void test_model_structs(void **state) {
    (void)state;
    guard_buf g;
    fx_model *m = NULL;

    size_t small = offsetof(fx_model_params, log_level);
    guard_fill(&g);
    fx_model_params_init_sized((fx_model_params *)(void *)g.bytes, small);
    guard_check(&g, small);
    assert_int_equal(stored_size(&g), small);
    assert_int_equal(fx_model_load(model_path,
                                   (fx_model_params *)(void *)g.bytes, &m,
                                   NULL, 0),
                     FX_ERR_INVALID_ARG);
    assert_null(m);

    fx_model_params mp;
    fx_model_params_init(&mp);
    assert_int_equal(mp.struct_size, sizeof mp);
    assert_int_equal(mp.log_level, FX_LOG_WARN);
    char err[256];
    assert_int_equal(fx_model_load(model_path, &mp, &m, err, sizeof err), FX_OK);

    /* fx_model_info from a newer host: filled up to this library's size,
     * the bytes it does not know left as the init zeroed them, and nothing
     * past the host's size touched. */
    size_t big = sizeof(fx_model_info) + 16;
    guard_fill(&g);
    fx_model_info_init_sized((fx_model_info *)(void *)g.bytes, big);
    guard_check(&g, big);
    assert_int_equal(fx_model_get_info(m, (fx_model_info *)(void *)g.bytes),
                     FX_OK);
    guard_check(&g, big);
    all_zero(&g, sizeof(fx_model_info), big);
    fx_model_info info;
    memcpy(&info, g.bytes, sizeof info);
    assert_int_equal(info.struct_size, big);
    assert_true(info.n_layer > 0);

    small = offsetof(fx_model_info, file_size);
    guard_fill(&g);
    fx_model_info_init_sized((fx_model_info *)(void *)g.bytes, small);
    guard_check(&g, small);
    assert_int_equal(fx_model_get_info(m, (fx_model_info *)(void *)g.bytes),
                     FX_ERR_INVALID_ARG);
    guard_check(&g, small);

    small = offsetof(fx_tensor_info, n_bytes);
    guard_fill(&g);
    fx_tensor_info_init_sized((fx_tensor_info *)(void *)g.bytes, small);
    guard_check(&g, small);
    assert_int_equal(stored_size(&g), small);
    assert_int_equal(fx_model_tensor_get(m, 0,
                                         (fx_tensor_info *)(void *)g.bytes),
                     FX_ERR_INVALID_ARG);
    guard_check(&g, small);
    fx_tensor_info ti;
    fx_tensor_info_init(&ti);
    assert_int_equal(ti.struct_size, sizeof ti);
    assert_int_equal(fx_model_tensor_get(m, 0, &ti), FX_OK);
    fx_model_free(m);
}

static int setup(void **state) {
    (void)state;
    gw_model_spec spec;
    gw_model_spec_default(&spec);
    spec.n_ctx = 128;
    snprintf(model_path, sizeof model_path, "%s",
             fx_test_tmp_path("abi_init.gguf"));
    return gw_write_model(model_path, &spec);
}

static int teardown(void **state) {
    (void)state;
    remove(model_path);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_request_v0),
        cmocka_unit_test(test_batcher_params_sizes),
        cmocka_unit_test(test_model_structs),
    };
    return cmocka_run_group_tests_name("abi_init", tests, setup, teardown);
}
