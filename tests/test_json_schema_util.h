/*
 * Shared by the test_json_schema*.c files and test_tools_grammar.c: a
 * schema converted and compiled by ferrox's own GBNF engine, and strings
 * matched against it whole and byte by byte, with the `alloc` and `work`
 * (mask scratch for fx_gstate_accept) that schema_setup prepares.
 */
#ifndef TEST_JSON_SCHEMA_UTIL_H
#define TEST_JSON_SCHEMA_UTIL_H

#include "sample/grammar.h"
#include "sample/json_schema.h"

static fx_alloc alloc;
static fx_gwork work;

static inline fx_grammar *convert(const char *schema) {
    char *gbnf = NULL;
    size_t len = 0;
    fx_error err;
    if (fx_json_schema_to_gbnf(&alloc, schema, strlen(schema), &gbnf, &len, &err) != FX_OK)
        fail_msg("schema %s: %s", schema, err.message);
    assert_int_equal(strlen(gbnf), len);
    fx_grammar *g = NULL;
    if (fx_grammar_compile(&alloc, gbnf, len, NULL, &g, &err) != FX_OK)
        fail_msg("grammar of %s does not compile: %s\n%s", schema, err.message, gbnf);
    fx_free(&alloc, gbnf);
    return g;
}

/* 2: a whole document of the grammar; 1: a prefix of one; 0: neither.
 * Fed whole and byte by byte: the two must agree. */
static inline int match(const fx_grammar *g, const char *text) {
    int res[2];
    for (int bytewise = 0; bytewise < 2; bytewise++) {
        fx_gstate s;
        fx_error err;
        assert_int_equal(fx_gstate_init_work(&s, &alloc, g, &work, &err), FX_OK);
        int ok = 1;
        size_t n = strlen(text);
        if (bytewise) {
            for (size_t i = 0; i < n && ok; i++)
                ok = fx_gstate_accept(&s, &work, text + i, 1, &err) == FX_OK;
        } else {
            ok = fx_gstate_accept(&s, &work, text, n, &err) == FX_OK;
        }
        res[bytewise] = ok ? (fx_gstate_complete(&s) ? 2 : 1) : 0;
        fx_gstate_free(&s, &alloc);
    }
    assert_int_equal(res[0], res[1]);
    return res[0];
}

/* The message names the problem and where it is. */
static inline void expect_error(const char *schema, const char *in_message) {
    char *gbnf = (char *)"untouched";
    fx_error err;
    fx_status st = fx_json_schema_to_gbnf(&alloc, schema, strlen(schema), &gbnf, NULL, &err);
    if (st != FX_ERR_INVALID_ARG) fail_msg("%s: status %d", schema, st);
    assert_null(gbnf);
    if (!strstr(err.message, in_message))
        fail_msg("%s: message [%s] lacks [%s]", schema, err.message, in_message);
}

/* A schema's verdicts on a list of strings: accept[] complete, reject[]
 * not complete (neither whole documents). NULL ends each list. */
static inline void expect_language(const char *schema, const char *const *accept,
                            const char *const *reject) {
    fx_grammar *g = convert(schema);
    for (size_t k = 0; accept && accept[k]; k++)
        if (match(g, accept[k]) != 2)
            fail_msg("%s should accept %s (got %d)", schema, accept[k], match(g, accept[k]));
    for (size_t k = 0; reject && reject[k]; k++)
        if (match(g, reject[k]) == 2) fail_msg("%s should refuse %s", schema, reject[k]);
    fx_grammar_free(g);
}

static inline int schema_setup(void **state) {
    (void)state;
    fx_alloc_init(&alloc, NULL);
    fx_vocab_trie t;
    memset(&t, 0, sizeof t);
    t.max_depth = 64;
    t.n_vocab = 1;
    fx_error err;
    return fx_gwork_init(&work, &alloc, &t, &err) == FX_OK ? 0 : -1;
}

static inline int schema_teardown(void **state) {
    (void)state;
    fx_gwork_free(&work, &alloc);
    return 0;
}

#endif /* TEST_JSON_SCHEMA_UTIL_H */
