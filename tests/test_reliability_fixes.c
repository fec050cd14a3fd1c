/*
 * Issue 36's broken promises, each with the test that found it:
 *
 * - a long chain grammar (`rK ::= rK+1 "a"?`) deeper than the row's frame
 *   array is refused with FX_ERR_GRAMMAR at fx_submit and by the grammar
 *   API, without writing past the array (run under ASan);
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

#include "gguf_writer.h"
#include "sample/grammar.h"
#include "test_util.h"

static char model_path[4096];

static fx_model *load_model(void) {
    fx_model *m = NULL;
    char err[256];
    if (fx_model_load(model_path, NULL, &m, err, sizeof err) != FX_OK)
        fail_msg("load: %s", err);
    return m;
}

static fx_batcher *make_batcher(fx_model *m, uint32_t max_rows) {
    fx_batcher_params p;
    fx_batcher_params_init(&p);
    p.max_rows = max_rows;
    p.max_step_tokens = 32;
    p.n_ctx = 128;
    p.block_tokens = 8;
    fx_batcher *b = NULL;
    char err[256];
    if (fx_batcher_create(m, &p, &b, err, sizeof err) != FX_OK)
        fail_msg("create: %s", err);
    return b;
}

/* A greedy request over a short token prompt, EOS ignored. */
static void plain_request(fx_request *r, int32_t prompt[8], int salt) {
    for (int k = 0; k < 8; k++) prompt[k] = 3 + (k * 7 + salt) % 60;
    fx_request_init(r);
    r->prompt_tokens = prompt;
    r->n_prompt_tokens = 8;
    r->max_tokens = 6;
    r->temperature = 0;
    r->flags = FX_REQUEST_IGNORE_EOS;
}

/* One row's outcome, collected from its events. */
typedef struct outcome {
    int done;
    fx_finish_reason finish;
    fx_status status;
    int32_t ids[64];
    size_t n_ids;
    char text[512];
    size_t n_text;
} outcome;

static void collect(const fx_event *ev) {
    outcome *o = ev->user;
    if (!o) return;
    if (ev->type == FX_EVENT_TOKEN && ev->text_len &&
        o->n_text + ev->text_len < sizeof o->text) {
        memcpy(o->text + o->n_text, ev->text, ev->text_len);
        o->n_text += ev->text_len;
    }
    if (ev->type != FX_EVENT_DONE) return;
    o->done++;
    o->finish = ev->finish;
    o->status = ev->status;
    o->n_ids = ev->n_tokens < 64 ? ev->n_tokens : 64;
    if (o->n_ids) memcpy(o->ids, ev->tokens, o->n_ids * sizeof *o->ids);
}

/* Steps b until nothing is pending, handing every event to collect. */
static void drain(fx_batcher *b) {
    for (int guard = 0; guard < 1000 && fx_batcher_pending(b) > 0; guard++) {
        assert_int_equal(fx_step(b), FX_OK);
        fx_event ev;
        while (fx_poll(b, &ev)) collect(&ev);
    }
    fx_event ev;
    while (fx_poll(b, &ev)) collect(&ev);
    assert_int_equal(fx_batcher_pending(b), 0);
}

/* ---- 1. chain grammars deeper than a row's frames ---- */

/* root ::= r0, rK ::= rK+1 "a"? for K < n, rn ::= "a"; malloc'd. */
static char *chain_grammar(unsigned n, size_t *len) {
    size_t cap = 64 + (size_t)n * 40, at = 0;
    char *s = malloc(cap);
    assert_non_null(s);
    at += (size_t)snprintf(s + at, cap - at, "root ::= r0\n");
    for (unsigned k = 0; k < n; k++)
        at += (size_t)snprintf(s + at, cap - at, "r%u ::= r%u \"a\"?\n", k,
                               k + 1);
    at += (size_t)snprintf(s + at, cap - at, "r%u ::= \"a\"\n", n);
    assert_true(at < cap);
    *len = at;
    return s;
}

static const unsigned chain_depths[] = {100, 4000, 4094, 4095, 4096, 4097,
                                        4200, 10000};

/* The grammar API: a start state deeper than FX_GRAMMAR_ROW_FRAMES is
 * FX_ERR_GRAMMAR; a shallower one starts. */
static void test_chain_grammar_state(void **state) {
    (void)state;
    fx_alloc alloc;
    assert_int_equal(fx_alloc_init(&alloc, NULL), FX_OK);
    for (size_t i = 0; i < sizeof chain_depths / sizeof *chain_depths; i++) {
        unsigned n = chain_depths[i];
        size_t len;
        char *text = chain_grammar(n, &len);
        fx_grammar *g = NULL;
        fx_error err;
        assert_int_equal(fx_grammar_compile(&alloc, text, len, NULL, &g, &err),
                         FX_OK);
        fx_gstate s;
        fx_status st = fx_gstate_init(&s, &alloc, g, &err);
        /* The start state holds one frame per rK call below r0's. */
        if (n < FX_GRAMMAR_ROW_FRAMES) {
            assert_int_equal(st, FX_OK);
            fx_gstate_free(&s, &alloc);
        } else if (n > FX_GRAMMAR_ROW_FRAMES) {
            assert_int_equal(st, FX_ERR_GRAMMAR);
        } else if (st == FX_OK) {
            fx_gstate_free(&s, &alloc);
        }
        fx_grammar_free(g);
        free(text);
    }
}

/* The same through fx_submit: refused, nothing submitted, and the batcher
 * serves the next request as if nothing had happened. */
static void test_chain_grammar_submit(void **state) {
    (void)state;
    fx_model *m = load_model();
    fx_batcher *b = make_batcher(m, 2);
    for (size_t i = 0; i < sizeof chain_depths / sizeof *chain_depths; i++) {
        unsigned n = chain_depths[i];
        size_t len;
        char *text = chain_grammar(n, &len);
        int32_t prompt[8];
        fx_request r;
        plain_request(&r, prompt, (int)i);
        r.grammar = text;
        r.grammar_len = len;
        outcome o = {0};
        r.user = &o;
        fx_row *row = NULL;
        fx_status st = fx_submit(b, &r, &row);
        free(text);
        if (n > FX_GRAMMAR_ROW_FRAMES) {
            assert_int_equal(st, FX_ERR_GRAMMAR);
            assert_null(row);
            assert_int_equal(fx_batcher_pending(b), 0);
        } else {
            /* Accepted (the model has no token "a": its row then fails at
             * its first step) or refused, but one DONE for an accepted
             * row. */
            assert_true(st == FX_OK || st == FX_ERR_GRAMMAR);
            if (st == FX_OK) {
                drain(b);
                assert_int_equal(o.done, 1);
            }
        }
        outcome after = {0};
        plain_request(&r, prompt, 1);
        r.user = &after;
        assert_int_equal(fx_submit(b, &r, &row), FX_OK);
        drain(b);
        assert_int_equal(after.done, 1);
        assert_int_equal(after.finish, FX_FINISH_LENGTH);
    }
    fx_batcher_free(b);
    fx_model_free(m);
}

static int setup(void **state) {
    (void)state;
    snprintf(model_path, sizeof model_path, "%s",
             fx_test_tmp_path("reliability_fixes.gguf"));
    return gw_write_tiny_model(model_path, 256, 3) == 0 ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    remove(model_path);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chain_grammar_state),
        cmocka_unit_test(test_chain_grammar_submit),
    };
    return cmocka_run_group_tests_name("reliability_fixes", tests, setup,
                                       teardown);
}
