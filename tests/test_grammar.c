/*
 * The GBNF engine without a model: every vendored grammar compiles, bad
 * grammars fail with a line and column (docs/reliability.md 20-24), and the parse
 * accepts exactly the strings it should, byte by byte.
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
#include "sample/sample.h"
#include "tokenizer/tokenizer.h"
#include "test_util.h"

static fx_alloc alloc;

static fx_status compile(const char *text, fx_grammar **g, fx_error *err) {
    return fx_grammar_compile(&alloc, text, strlen(text), NULL, g, err);
}

/* Compiles text, which must fail with FX_ERR_GRAMMAR at line:col. */
static void expect_error(const char *text, size_t len, unsigned line,
                         unsigned col, const char *needle) {
    fx_grammar *g = NULL;
    fx_error err;
    fx_error_clear(&err);
    fx_status st = fx_grammar_compile(&alloc, text, len, NULL, &g, &err);
    if (st != FX_ERR_GRAMMAR) fail_msg("status %d for %.60s", st, text);
    assert_null(g);
    char want[64];
    snprintf(want, sizeof want, "line %u, column %u:", line, col);
    if (!strstr(err.message, want)) fail_msg("'%s' lacks '%s'", err.message, want);
    if (needle && !strstr(err.message, needle))
        fail_msg("'%s' lacks '%s'", err.message, needle);
}

static void test_vendored_grammars_compile(void **state) {
    (void)state;
    const char *names[] = {"arithmetic", "c", "chess", "english", "japanese",
                           "json", "json_arr", "list"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char rel[64];
        snprintf(rel, sizeof rel, "grammars/%s.gbnf", names[i]);
        const char *path = fx_test_data_path(rel);
        size_t len;
        char *text = fx_test_read_file(path, &len);
        assert_non_null(text);
        fx_grammar *g = NULL;
        fx_error err;
        if (fx_grammar_compile(&alloc, text, len, NULL, &g, &err) != FX_OK)
            fail_msg("%s: %s", names[i], err.message);
        fx_gstate s;
        assert_int_equal(fx_gstate_init(&s, &alloc, g, &err), FX_OK);
        fx_gstate_free(&s, &alloc);
        fx_grammar_free(g);
        free(text);
    }
    fx_grammar *g = NULL;
    fx_error err;
    assert_int_equal(fx_grammar_json(&alloc, &g, &err), FX_OK);
    fx_grammar_free(g);
}

/* docs/reliability.md 20: left recursion, direct or through nullable rules. */
static void test_left_recursion(void **state) {
    (void)state;
    const char *a = "root ::= root \"a\" | \"b\"\n";
    expect_error(a, strlen(a), 1, 1, "left recursion");
    const char *b = "root ::= x\nx ::= y \"a\"\ny ::= \"\" | x\n";
    expect_error(b, strlen(b), 2, 1, "left recursion");
    const char *c = "root ::= opt root \"a\" | \"b\"\nopt ::= \"c\"?\n";
    expect_error(c, strlen(c), 1, 1, "left recursion");
    /* Right recursion and recursion behind a terminal are fine. */
    fx_grammar *g = NULL;
    fx_error err;
    assert_int_equal(compile("root ::= \"a\" root | \"b\"\n", &g, &err), FX_OK);
    fx_grammar_free(g);
    assert_int_equal(compile("root ::= \"(\" root \")\" | \"\"\n", &g, &err), FX_OK);
    fx_grammar_free(g);
}

/* docs/reliability.md 21: undefined rule; no root rule. */
static void test_undefined(void **state) {
    (void)state;
    const char *a = "root ::= \"a\" missing\n";
    expect_error(a, strlen(a), 1, 14, "undefined rule 'missing'");
    const char *b = "start ::= \"a\"\n";
    expect_error(b, strlen(b), 1, 1, "no rule named 'root'");
    fx_grammar *g = NULL;
    fx_error err;
    assert_int_equal(fx_grammar_compile(&alloc, b, strlen(b), "start", &g, &err), FX_OK);
    fx_grammar_free(g);
}

/* docs/reliability.md 22: 100k nested groups; long rule chains. */
static void test_deep_nesting(void **state) {
    (void)state;
    size_t n = 100000;
    char *t = malloc(2 * n + 32);
    assert_non_null(t);
    size_t k = (size_t)sprintf(t, "root ::= ");
    for (size_t i = 0; i < n; i++) t[k++] = '(';
    t[k++] = '"';
    t[k++] = 'a';
    t[k++] = '"';
    for (size_t i = 0; i < n; i++) t[k++] = ')';
    t[k++] = '\n';
    expect_error(t, k, 1, 10 + 128, "nested too deeply");
    free(t);

    /* A chain of 20k rules each calling the next: no recursion in the
     * compiler or the matcher, so it simply works. */
    size_t rules = 20000;
    char *c = malloc(rules * 40 + 64);
    assert_non_null(c);
    k = (size_t)sprintf(c, "root ::= r0\n");
    for (size_t i = 0; i + 1 < rules; i++)
        k += (size_t)sprintf(c + k, "r%zu ::= r%zu\n", i, i + 1);
    k += (size_t)sprintf(c + k, "r%zu ::= \"z\"\n", rules - 1);
    fx_grammar *g = NULL;
    fx_error err;
    assert_int_equal(fx_grammar_compile(&alloc, c, k, NULL, &g, &err), FX_OK);
    fx_gstate s;
    assert_int_equal(fx_gstate_init(&s, &alloc, g, &err), FX_OK);
    fx_gstate_free(&s, &alloc);
    fx_grammar_free(g);
    /* ...and a chain that loops back to its start is left recursion. */
    k = (size_t)sprintf(c, "root ::= r0\n");
    for (size_t i = 0; i + 1 < rules; i++)
        k += (size_t)sprintf(c + k, "r%zu ::= r%zu\n", i, i + 1);
    k += (size_t)sprintf(c + k, "r%zu ::= r0 \"z\"\n", rules - 1);
    assert_int_equal(fx_grammar_compile(&alloc, c, k, NULL, &g, &err), FX_ERR_GRAMMAR);
    free(c);
}

/* docs/reliability.md 23: nullable repetition and huge {m,n}. */
static void test_bounded_repetition(void **state) {
    (void)state;
    const char *a = "root ::= (\"a\"*)*\n";
    expect_error(a, strlen(a), 1, 16, "empty string");
    const char *b = "root ::= (\"\")*\n";
    expect_error(b, strlen(b), 1, 14, "empty string");
    const char *c = "root ::= \"a\"{0,100000}\n";
    expect_error(c, strlen(c), 1, 13, "above 1000");
    /* A class of 1100 code points 1000 times is over a million elements. */
    char *d = malloc(8000);
    assert_non_null(d);
    size_t k = (size_t)sprintf(d, "root ::= [");
    for (unsigned i = 0; i < 1100; i++) k += (size_t)sprintf(d + k, "\\u%04x", 0x100 + i);
    k += (size_t)sprintf(d + k, "]{1000}\n");
    expect_error(d, k, 1, 10 + 1 + 6 * 1100 + 1, "too large");
    free(d);
    const char *e = "root ::= \"a\"{5,2}\n";
    expect_error(e, strlen(e), 1, 13, "n < m");
    /* Bounded forms of nullable things are fine. */
    fx_grammar *g = NULL;
    fx_error err;
    assert_int_equal(compile("root ::= (\"a\"?){3} \"b\"\n", &g, &err), FX_OK);
    fx_grammar_free(g);
}

/* docs/reliability.md 24: bad escapes, unterminated strings and classes, empty
 * input -- each with its position. */
static void test_syntax_errors(void **state) {
    (void)state;
    const char *cases[][2] = {
        {"root ::= \"a\\q\"\n", "1:12"},
        {"root ::= \"\\x4\"\n", "1:11"},
        {"root ::= \"abc\n", "1:10"},
        {"root ::= [a-z\n", "1:10"},
        {"\n\nroot ::= [z-a]\n", "3:11"},
        {"root ::= (\"a\"\n", "1:10"},
        {"root ::= \"a\"\nroot ::= \"b\"\n", "2:1"},
        {"root \"a\"\n", "1:6"},
        {"root ::= * \"a\"\n", "1:10"},
        {"root ::= \"a\" )\n", "1:14"},
        {"root ::= []\n", "1:10"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        unsigned line, col;
        sscanf(cases[i][1], "%u:%u", &line, &col);
        expect_error(cases[i][0], strlen(cases[i][0]), line, col, NULL);
    }
    expect_error("", 0, 1, 1, "empty grammar");
    expect_error("  # only a comment\n\n", 20, 3, 1, "empty grammar");
    expect_error(NULL, 0, 1, 1, "empty grammar");
}

/* ---- matching ---- */

static fx_gwork work;

/* 1 if the grammar accepts `text` as a prefix, 2 if also complete. */
static int run(const fx_grammar *g, const char *text) {
    fx_gstate s;
    fx_error err;
    assert_int_equal(fx_gstate_init(&s, &alloc, g, &err), FX_OK);
    int ok = fx_gstate_accept(&s, &work, text, strlen(text), &err) == FX_OK;
    int res = ok ? (fx_gstate_complete(&s) ? 2 : 1) : 0;
    fx_gstate_free(&s, &alloc);
    return res;
}

/* Byte by byte, as a token stream that splits every character. */
static int run_bytes(const fx_grammar *g, const char *text) {
    fx_gstate s;
    fx_error err;
    assert_int_equal(fx_gstate_init(&s, &alloc, g, &err), FX_OK);
    int ok = 1;
    for (size_t i = 0; text[i] && ok; i++)
        ok = fx_gstate_accept(&s, &work, text + i, 1, &err) == FX_OK;
    int res = ok ? (fx_gstate_complete(&s) ? 2 : 1) : 0;
    fx_gstate_free(&s, &alloc);
    return res;
}

static fx_grammar *load_vendored(const char *rel) {
    const char *path = fx_test_data_path(rel);
    size_t len;
    char *text = fx_test_read_file(path, &len);
    fx_grammar *g = NULL;
    fx_error err;
    if (fx_grammar_compile(&alloc, text, len, NULL, &g, &err) != FX_OK)
        fail_msg("%s", err.message);
    free(text);
    return g;
}

/* docs/reliability.md 23, at match time: a wildly ambiguous grammar hits the
 * parse limits (an error) instead of taking unbounded time or memory. */
static void test_ambiguity_bounded(void **state) {
    (void)state;
    fx_grammar *g = NULL;
    fx_error err;
    assert_int_equal(compile("root ::= ((\"a\"{0,40}){0,40}){0,40} \"b\"\n", &g, &err),
                     FX_OK);
    char text[200];
    memset(text, 'a', 150);
    text[150] = 0;
    /* Its start alone has more stacks than a row may hold. */
    fx_gstate s;
    fx_status st = fx_gstate_init(&s, &alloc, g, &err);
    if (st == FX_OK) {
        st = fx_gstate_accept(&s, &work, text, 150, &err);
        fx_gstate_free(&s, &alloc);
    }
    assert_true(st == FX_OK || st == FX_ERR_GRAMMAR);
    fx_grammar_free(g);
    int r;
    assert_int_equal(compile("root ::= x*\nx ::= \"a\" | \"a\" | \"aa\"\n", &g, &err), FX_OK);
    r = run_bytes(g, text); /* twins are merged: stays small */
    assert_int_equal(r, 2);
    fx_grammar_free(g);
}

static void test_match_basics(void **state) {
    (void)state;
    fx_grammar *g = NULL;
    fx_error err;
    assert_int_equal(compile("root ::= \"ab\" [0-9]+ (\"x\" | \"yz\")? \"!\"{1,2}\n",
                             &g, &err), FX_OK);
    assert_int_equal(run(g, "ab1!"), 2);
    assert_int_equal(run(g, "ab123yz!!"), 2);
    assert_int_equal(run(g, "ab123yz!!!"), 0);
    assert_int_equal(run(g, "ab"), 1);
    assert_int_equal(run(g, "ab!"), 0);
    assert_int_equal(run(g, "abx"), 0);
    fx_grammar_free(g);
    /* Negated classes, escapes, `.`, and code points beyond ASCII, fed
     * whole and byte by byte (partial UTF-8 between tokens). */
    assert_int_equal(compile("root ::= [^a\\n] . \"\\u00e9\" [\\u4e00-\\u9fff]\n",
                             &g, &err), FX_OK);
    assert_int_equal(run(g, "b\xc3\xa9\xc3\xa9\xe4\xb8\xad"), 2);
    assert_int_equal(run_bytes(g, "b\xc3\xa9\xc3\xa9\xe4\xb8\xad"), 2);
    assert_int_equal(run(g, "a"), 0);
    assert_int_equal(run(g, "\n"), 0);
    assert_int_equal(run(g, "bb\xc3\xa8"), 0);
    assert_int_equal(run_bytes(g, "bb\xc3\xa9\xe4"), 1);
    assert_int_equal(run_bytes(g, "bb\xc3\xa9\xc3"), 0); /* can't be CJK */
    assert_int_equal(run(g, "bb\xc3\xa9\xff"), 0);
    assert_int_equal(run_bytes(g, "\xed\xa0"), 0); /* a surrogate's start */
    assert_int_equal(run_bytes(g, "\xe0\x80"), 0); /* overlong */
    fx_grammar_free(g);
}

static void test_match_vendored(void **state) {
    (void)state;
    fx_grammar *g = load_vendored("grammars/arithmetic.gbnf");
    assert_non_null(g);
    assert_int_equal(run(g, "1+2=3\n"), 2);
    assert_int_equal(run(g, "(a *b_2)/7=x\n1=1\n"), 2);
    assert_int_equal(run(g, "1+=3\n"), 0);
    assert_int_equal(run_bytes(g, "(1+2"), 1);
    fx_grammar_free(g);
    g = load_vendored("grammars/json.gbnf");
    assert_int_equal(run(g, "{\"a\": [1, 2.5e3, true, null, {}], \"b\\n\": \"x\"}"), 2);
    assert_int_equal(run_bytes(g, "{\"k\": \"\xe2\x82\xac\"}"), 2);
    assert_int_equal(run(g, "{\"a\" 1}"), 0);
    assert_int_equal(run(g, "[1]"), 0); /* root is an object */
    fx_grammar_free(g);
    fx_error err;
    assert_int_equal(fx_grammar_json(&alloc, &g, &err), FX_OK);
    assert_int_equal(run(g, " [1, -0.5e+2, \"\\u00e9\"] "), 2);
    assert_int_equal(run(g, "5"), 2);
    assert_int_equal(run(g, "01"), 0);
    assert_int_equal(run(g, "\"a\tb\""), 0); /* raw control character */
    assert_int_equal(run(g, "{\"a\":{\"b\":[[[]]]}}"), 2);
    fx_grammar_free(g);
}

/* ---- the trie walk against brute force ---- */

static void clone(fx_gstate *dst, const fx_gstate *src) {
    memset(dst, 0, sizeof *dst);
    dst->g = src->g;
    dst->frames_cap = src->frames_cap; /* the row's own bound, checked too */
    dst->frames = fx_malloc_array(&alloc, FX_GRAMMAR_ROW_FRAMES, sizeof *dst->frames);
    dst->tops = fx_malloc_array(&alloc, FX_GRAMMAR_MAX_STACKS, sizeof *dst->tops);
    assert_true(dst->frames && dst->tops);
    memcpy(dst->frames, src->frames, src->n_frames * sizeof *src->frames);
    memcpy(dst->tops, src->tops, src->n_tops * sizeof *src->tops);
    dst->n_frames = src->n_frames;
    dst->n_tops = src->n_tops;
    dst->utf8_value = src->utf8_value;
    dst->utf8_left = src->utf8_left;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Along sampled paths through each grammar, the mask (trie walk with its
 * subtree shortcuts) equals testing every token on its own. */
static void check_vocab(const char *vocab_rel) {
    const char *vp = fx_test_data_path(vocab_rel);
    fx_error err;
    fx_gguf *gguf;
    struct fx_vocab *vocab;
    assert_int_equal(fx_gguf_open(vp, &alloc, &gguf, &err), FX_OK);
    assert_int_equal(fx_vocab_load(gguf, &alloc, NULL, &vocab, &err), FX_OK);
    fx_sample_ctx ctx;
    assert_int_equal(fx_sample_ctx_init(&ctx, &alloc, vocab, 0, &err), FX_OK);
    assert_int_equal(fx_sample_ctx_grammar(&ctx, &alloc, &err), FX_OK);
    uint32_t nv = fx_vocab_n_tokens(vocab);
    float *logits = malloc(nv * sizeof *logits);
    fx_candidate *scratch = malloc(nv * sizeof *scratch);
    int32_t *expect = malloc(nv * sizeof *expect), *got = malloc(nv * sizeof *got);
    char piece[512];
    /* Bounded repetitions too (the walk's chain shortcut): a JSON Schema
     * maxLength string, a class with a space, digits then a literal. */
    static const char *const bounded[] = {
        "root ::= \"\\\"\" json-char{0,24} \"\\\"\" \" \"?\n"
        "json-char ::= [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | "
        "\"u\" [0-9a-fA-F]{4})\n",
        "root ::= [a-z ]{0,9} \",\" [a-z]{2,40}\n",
        "root ::= [0-9]{1,5} \"x\" ([a-zA-Z]{3} | [0-9]{0,7})\n"};
    enum { N_GRAMMARS = 6 };
    fx_grammar *gs[N_GRAMMARS] = {load_vendored("grammars/json.gbnf"),
                                  load_vendored("grammars/arithmetic.gbnf"), NULL};
    assert_int_equal(fx_grammar_json(&alloc, &gs[2], &err), FX_OK);
    for (int i = 0; i < 3; i++)
        if (compile(bounded[i], &gs[3 + i], &err) != FX_OK)
            fail_msg("bounded %d: %s", i, err.message);
    fx_rng noise;
    fx_rng_seed(&noise, 3);
    for (int gi = 0; gi < N_GRAMMARS; gi++) {
        fx_sampling cfg;
        fx_sampling_default(&cfg);
        cfg.temperature = 1.0f;
        cfg.top_k = 8;
        cfg.seed = (uint64_t)gi;
        fx_sampler s;
        assert_int_equal(fx_sampler_init(&s, &cfg, &err), FX_OK);
        assert_int_equal(fx_sampler_set_grammar(&s, &alloc, gs[gi], &err), FX_OK);
        for (int step = 0; step < 10; step++) {
            assert_int_equal(fx_gstate_mask(&s.grammar, ctx.trie, &ctx.work, &err), FX_OK);
            uint32_t n_got = ctx.work.n_allowed, n_exp = 0;
            memcpy(got, ctx.work.allowed, n_got * sizeof *got);
            for (uint32_t t = 0; t < nv; t++) {
                if (fx_vocab_is_eog(vocab, (int32_t)t)) {
                    if (fx_gstate_complete(&s.grammar)) expect[n_exp++] = (int32_t)t;
                    continue;
                }
                size_t len = 0;
                if (fx_vocab_token_to_piece(vocab, (int32_t)t, 0, piece, sizeof piece,
                                            &len, &err) != FX_OK || len == 0)
                    continue;
                fx_gstate c;
                clone(&c, &s.grammar);
                if (fx_gstate_accept(&c, &ctx.work, piece, len, &err) == FX_OK)
                    expect[n_exp++] = (int32_t)t;
                fx_gstate_free(&c, &alloc);
            }
            qsort(got, n_got, sizeof *got, cmp_i32);
            if (n_got != n_exp || memcmp(got, expect, n_exp * sizeof *got) != 0)
                fail_msg("%s grammar %d step %d: mask has %u tokens, brute force %u",
                         vocab_rel, gi, step, n_got, n_exp);
            for (uint32_t i = 0; i < nv; i++)
                logits[i] = (float)(fx_rng_uniform(&noise) * 4.0);
            int32_t tok;
            int eog;
            if (fx_sampler_next(&s, &ctx, logits, nv, NULL, 0, scratch, &tok, &eog,
                                &err) != FX_OK || eog)
                break;
        }
        fx_sampler_free(&s, &alloc);
    }
    for (int gi = 0; gi < N_GRAMMARS; gi++) fx_grammar_free(gs[gi]);
    free(logits);
    free(scratch);
    free(expect);
    free(got);
    fx_sample_ctx_free(&ctx, &alloc);
    fx_vocab_free(vocab);
    fx_gguf_close(gguf);
}

static void test_mask_equals_brute_force(void **state) {
    (void)state;
    check_vocab("vocab/ggml-vocab-llama-spm.gguf");
    check_vocab("vocab/ggml-vocab-gpt-2.gguf");
}

static int setup(void **state) {
    (void)state;
    fx_alloc_init(&alloc, NULL);
    fx_vocab_trie t;
    memset(&t, 0, sizeof t);
    t.max_depth = 64;
    t.n_vocab = 1;
    fx_error err;
    return fx_gwork_init(&work, &alloc, &t, &err) == FX_OK ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    fx_gwork_free(&work, &alloc);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vendored_grammars_compile),
        cmocka_unit_test(test_left_recursion),
        cmocka_unit_test(test_undefined),
        cmocka_unit_test(test_deep_nesting),
        cmocka_unit_test(test_bounded_repetition),
        cmocka_unit_test(test_syntax_errors),
        cmocka_unit_test(test_match_basics),
        cmocka_unit_test(test_ambiguity_bounded),
        cmocka_unit_test(test_match_vendored),
        cmocka_unit_test(test_mask_equals_brute_force),
    };
    return cmocka_run_group_tests_name("grammar", tests, setup, teardown);
}
