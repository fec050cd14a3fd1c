/*
 * docs/reliability.md 43 for grammars: fail the Nth allocation of a grammar
 * compile (GBNF text of every construct, the shared grammars, the built-in
 * JSON grammar, and grammars that do not compile), of a row's parse, and
 * of the per-vocabulary trie and mask scratch, for every N, once alone and
 * once with every later allocation failing too. Each time: FX_ERR_NOMEM
 * (or the grammar's own FX_ERR_GRAMMAR), nothing leaked, and what does
 * compile behaves exactly like a fault-free compile.
 * (Through the public API, fx_submit compiling a grammar under faults is
 * in test_batcher_faults.c.)
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

#include "api/api_internal.h"
#include "fault_alloc.h"
#include "gguf_writer.h"
#include "sample/grammar.h"
#include "sample/sample.h"
#include "test_util.h"

typedef struct gcase {
    const char *name;
    const char *text;       /* NULL: the built-in JSON grammar */
    size_t len;
    const char *accept;     /* a complete sentence of it (NULL: none) */
    fx_status want;         /* FX_OK, or FX_ERR_GRAMMAR for a bad one */
} gcase;

static fx_gwork work;      /* mask scratch for a one-token vocabulary */
static fx_alloc plain;     /* the C library's */

/* 2: accepted and complete, 1: accepted, 0: refused. */
static int match(const fx_grammar *g, const fx_alloc *alloc, const char *s,
                 fx_status *init_status) {
    fx_gstate st;
    fx_error err;
    *init_status = fx_gstate_init(&st, alloc, g, &err);
    if (*init_status != FX_OK) return -1;
    int ok = fx_gstate_accept(&st, &work, s, strlen(s), &err) == FX_OK;
    int res = ok ? (fx_gstate_complete(&st) ? 2 : 1) : 0;
    fx_gstate_free(&st, alloc);
    return res;
}

static fx_status compile(const gcase *c, const fx_alloc *alloc,
                         fx_grammar **g, fx_error *err) {
    if (!c->text) return fx_grammar_json(alloc, g, err);
    return fx_grammar_compile(alloc, c->text, c->len, NULL, g, err);
}

/* One compile, then a row's parse over the sample sentence, both through
 * the failing allocator. */
static void compile_scenario(fx_fault_alloc *f, void *user) {
    const gcase *c = user;
    fx_alloc alloc;
    fx_allocator hooks = fx_fault_allocator(f);
    assert_int_equal(fx_alloc_init(&alloc, &hooks), FX_OK);
    fx_grammar *g = NULL;
    fx_error err;
    fx_error_clear(&err);
    fx_status st = compile(c, &alloc, &g, &err);
    if (st != FX_OK) {
        assert_null(g);
        /* The grammar's own error where it has one, or the allocator's:
         * never another status, and never a wrong "grammar" error for a
         * grammar that compiles. */
        if (st != FX_ERR_NOMEM && st != c->want)
            fail_msg("%s with allocation %ld failing (%s): %s: %s", c->name,
                     f->fail_at, f->fail_after ? "and later" : "alone",
                     fx_status_str(st), err.message);
        if (st == FX_ERR_NOMEM) assert_non_null(strstr(err.message, "memory"));
        return;
    }
    if (c->want != FX_OK) fail_msg("%s compiled", c->name);
    if (c->accept) {
        fx_status init;
        int r = match(g, &alloc, c->accept, &init);
        if (init != FX_OK) assert_int_equal(init, FX_ERR_NOMEM);
        else if (r != 2)
            fail_msg("%s with allocation %ld failing: the compiled grammar "
                     "does not accept its sentence",
                     c->name, f->fail_at);
    }
    fx_grammar_free(g);
}

static void sweep_case(const gcase *c) {
    /* Fault-free first: the case itself is right. */
    fx_grammar *g = NULL;
    fx_error err;
    assert_int_equal(compile(c, &plain, &g, &err), c->want);
    if (g && c->accept) {
        fx_status init;
        assert_int_equal(match(g, &plain, c->accept, &init), 2);
    }
    fx_grammar_free(g);
    fx_fault_alloc f = {0};
    long total = fx_fault_sweep(&f, compile_scenario, (void *)c);
    assert_true(total > 0);
    print_message("%s: %ld allocations, each failed alone and onwards\n",
                  c->name, total);
}

static void test_compile_alloc_failures(void **state) {
    (void)state;
    static const char every[] =
        "# every construct of the dialect\n"
        "root ::= greeting (\" \" item){1,3} tail?\n"
        "greeting ::= \"hi\" | \"hello\" | [Hh] \"ey\"\n"
        "item ::= [a-z0-9_]+ | \"\\\"\" [^\"\\n]* \"\\\"\" | \"\\u00e9\" | num\n"
        "num ::= \"-\"? ([0-9] | [1-9] [0-9]{1,4}) (\".\" [0-9]+)?\n"
        "tail ::= \"!\"{0,2} ((\"?\")*)? .?\n";
    static const char left_rec[] = "root ::= root \"a\" | \"b\"\n";
    static const char undefined[] = "root ::= thing\n";
    static const char bad_escape[] = "root ::= \"\\q\"\n";
    static const char unterminated[] = "root ::= [abc\n";
    gcase cases[] = {
        {"every construct", every, sizeof every - 1, "hey abc \"q w\" -12.5!?x", FX_OK},
        {"built-in JSON", NULL, 0, "{\"a\": [1, -2.5e3, \"\\u00e9\", null]}", FX_OK},
        {"left recursion", left_rec, sizeof left_rec - 1, NULL, FX_ERR_GRAMMAR},
        {"undefined rule", undefined, sizeof undefined - 1, NULL, FX_ERR_GRAMMAR},
        {"bad escape", bad_escape, sizeof bad_escape - 1, NULL, FX_ERR_GRAMMAR},
        {"unterminated class", unterminated, sizeof unterminated - 1, NULL,
         FX_ERR_GRAMMAR},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) sweep_case(&cases[i]);
}

/* The vendored grammars of tests/data/grammars. */
static void test_vendored_alloc_failures(void **state) {
    (void)state;
    static const struct {
        const char *file, *accept;
    } shared[] = {
        {"grammars/arithmetic.gbnf", "(1+2)*x=3\n"},
        {"grammars/json.gbnf", "{\"a\": [1, true, {\"b\": null}]}"},
        {"grammars/list.gbnf", NULL},
        {"grammars/c.gbnf", NULL},
        {"grammars/chess.gbnf", NULL},
        {"grammars/japanese.gbnf", NULL},
    };
    for (size_t i = 0; i < sizeof shared / sizeof *shared; i++) {
        const char *path = fx_test_data_path(shared[i].file);
        size_t len;
        char *text = fx_test_read_file(path, &len);
        assert_non_null(text);
        gcase c = {shared[i].file, text, len, shared[i].accept, FX_OK};
        sweep_case(&c);
        free(text);
    }
}

/* The per-batcher grammar scratch: the vocabulary trie and the mask
 * walk's buffers, built at the first request with a grammar; then one
 * mask of a row's parse. */
typedef struct trie_case {
    const struct fx_vocab *vocab;
    const fx_grammar *g;
    uint32_t allowed;       /* tokens the first mask allows, fault-free */
} trie_case;

static void trie_scenario(fx_fault_alloc *f, void *user) {
    trie_case *c = user;
    fx_alloc alloc;
    fx_allocator hooks = fx_fault_allocator(f);
    assert_int_equal(fx_alloc_init(&alloc, &hooks), FX_OK);
    fx_error err;
    fx_vocab_trie *trie = NULL;
    fx_status st = fx_vocab_trie_build(&alloc, c->vocab, &trie, &err);
    if (st != FX_OK) {
        assert_int_equal(st, FX_ERR_NOMEM);
        assert_null(trie);
        return;
    }
    fx_gwork w;
    memset(&w, 0, sizeof w);
    st = fx_gwork_init(&w, &alloc, trie, &err);
    if (st == FX_OK) {
        fx_gstate s;
        st = fx_gstate_init(&s, &alloc, c->g, &err);
        if (st == FX_OK) {
            assert_int_equal(fx_gstate_mask(&s, trie, &w, &err), FX_OK);
            if (c->allowed) assert_int_equal(w.n_allowed, c->allowed);
            else c->allowed = w.n_allowed;
            fx_gstate_free(&s, &alloc);
        }
    }
    if (st != FX_OK) assert_int_equal(st, FX_ERR_NOMEM);
    fx_gwork_free(&w, &alloc);
    fx_vocab_trie_free(trie);
}

static void test_trie_alloc_failures(void **state) {
    (void)state;
    gw_model_spec spec;
    gw_model_spec_default(&spec);
    const char *path = fx_test_tmp_path("grammar-faults.gguf");
    assert_int_equal(gw_write_model(path, &spec), 0);
    fx_model_params params;
    fx_model_params_init(&params);
    params.flags = FX_MODEL_VOCAB_ONLY;
    fx_model *m = NULL;
    assert_int_equal(fx_model_load(path, &params, &m, NULL, 0), FX_OK);
    remove(path);
    fx_grammar *g = NULL;
    fx_error err;
    static const char text[] = "root ::= (\"<t7>\" | \"<t1\" [0-9] \">\")+\n";
    assert_int_equal(fx_grammar_compile(&plain, text, sizeof text - 1, NULL,
                                        &g, &err),
                     FX_OK);
    trie_case c = {m->vocab, g, 0};
    fx_fault_alloc f = {0};
    long total = fx_fault_sweep(&f, trie_scenario, &c);
    assert_true(total > 0);
    print_message("trie, mask scratch and one mask: %ld allocations\n", total);
    assert_true(c.allowed > 1); /* <t7> and <t10>..<t19> at least */
    fx_grammar_free(g);
    fx_model_free(m);
}

static int setup(void **state) {
    (void)state;
    fx_alloc_init(&plain, NULL);
    fx_vocab_trie t;
    memset(&t, 0, sizeof t);
    t.max_depth = 64;
    t.n_vocab = 1;
    fx_error err;
    return fx_gwork_init(&work, &plain, &t, &err) == FX_OK ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    fx_gwork_free(&work, &plain);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_compile_alloc_failures),
        cmocka_unit_test(test_vendored_alloc_failures),
        cmocka_unit_test(test_trie_alloc_failures),
    };
    return cmocka_run_group_tests_name("grammar_faults", tests, setup, teardown);
}
