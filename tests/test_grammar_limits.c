/*
 * Grammars at every FX_GRAMMAR_* limit (lib/sample/grammar.h), through the
 * public API only (issue 36): generated deep, wide and long-chain grammars
 * at the limit are accepted by fx_submit and their rows work (the text
 * follows the grammar, or the row alone ends FX_FINISH_ERROR /
 * FX_ERR_GRAMMAR when its parse outgrows a limit); one past the limit is
 * refused with FX_ERR_GRAMMAR and a message; nothing crashes (ASan in the
 * sanitizer build), every call returns in bounded time, and a plain row
 * next to each grammar row produces exactly its solo output.
 *
 * The limits are not in ferrox.h; their values are restated here from
 * grammar.h, so that a change to one shows up as a failure to look at.
 */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include <ferrox.h>

#include "byte_model.h"
#include "grammar_gen.h"
#include "test_util.h"
#include "text_ref.h"

enum {
    LIM_TEXT = 1 << 20,     /* FX_GRAMMAR_MAX_TEXT: bytes of GBNF */
    LIM_NESTING = 128,      /* FX_GRAMMAR_MAX_NESTING */
    LIM_REPEAT = 1000,      /* FX_GRAMMAR_MAX_REPEAT */
    LIM_STACKS = 256,       /* FX_GRAMMAR_MAX_STACKS */
    LIM_ROW_FRAMES = 4096   /* FX_GRAMMAR_ROW_FRAMES */
};

/* Seconds one submit, or one row's whole run, may take: the budgets the
 * grammar code documents are ~0.1 s per call; this is far above them,
 * and below what a hang would take. */
#define TIME_BOUND 20.0

static char model_path[4096];
static fx_model *model;
static fx_batcher *batcher;

static const int32_t control_prompt[] = {FX_BM_BOS, FX_BM_BYTE0 + 'q', FX_BM_BYTE0 + 'r'};
static int32_t control_solo[16];
static size_t control_solo_n;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct outcome {
    char text[8192];
    size_t len;
    int32_t ids[4096];
    size_t n_ids;
    int done;
    fx_finish_reason finish;
    fx_status status;
} outcome;

static void run_all(fx_batcher *b, outcome **outs, size_t n_outs) {
    double t0 = now();
    while (fx_batcher_pending(b) > 0) {
        assert_int_equal(fx_step(b), FX_OK);
        if (now() - t0 > TIME_BOUND) fail_msg("rows still running after %g s", TIME_BOUND);
        fx_event ev;
        while (fx_poll(b, &ev)) {
            outcome *o = NULL;
            for (size_t i = 0; i < n_outs; i++) if (ev.user == outs[i]) o = outs[i];
            if (!o || o->done) fail_msg("an event for no row or after DONE");
            if (ev.type == FX_EVENT_TEXT) {
                assert_true(o->len + ev.text_len <= sizeof o->text);
                memcpy(o->text + o->len, ev.text, ev.text_len);
                o->len += ev.text_len;
            } else if (ev.type == FX_EVENT_DONE) {
                o->done = 1;
                o->finish = ev.finish;
                o->status = ev.status;
                assert_true(ev.n_tokens <= sizeof o->ids / sizeof o->ids[0]);
                memcpy(o->ids, ev.tokens, ev.n_tokens * sizeof *ev.tokens);
                o->n_ids = ev.n_tokens;
            }
        }
    }
    for (size_t i = 0; i < n_outs; i++) {
        if (outs[i]->done != 1) fail_msg("row %zu got no DONE", i);
        if (!fx_ref_utf8_valid(outs[i]->text, outs[i]->len)) fail_msg("row %zu: not UTF-8", i);
    }
}

/* A request over n prompt tokens with grammar g (NULL: none). */
static void request(fx_request *q, const int32_t *prompt, size_t n, uint32_t max_tokens,
                    const char *g, size_t len) {
    fx_request_init(q);
    q->prompt_tokens = prompt;
    q->n_prompt_tokens = n;
    q->max_tokens = max_tokens;
    q->grammar = g;
    q->grammar_len = len;
}

static fx_status submit_control(fx_batcher *b, outcome *o) {
    fx_request q;
    request(&q, control_prompt, 3, 12, NULL, 0);
    q.flags = FX_REQUEST_IGNORE_EOS;
    q.user = o;
    fx_row *row;
    return fx_submit(b, &q, &row);
}

/* What the grammar row's text must be: a test of a prefix (complete 0) or
 * of a whole sentence (complete 1). */
typedef int (*text_check)(const char *t, size_t n, int complete);

static int only_a(const char *t, size_t n, int complete) {
    for (size_t i = 0; i < n; i++) if (t[i] != 'a') return 0;
    return !complete || n > 0;
}

static int x_number(const char *t, size_t n, int complete) {
    if (n == 0) return !complete;
    if (t[0] != 'x' || n > 4) return 0;
    long v = 0;
    for (size_t i = 1; i < n; i++) {
        if (t[i] < '0' || t[i] > '9') return 0;
        v = v * 10 + (t[i] - '0');
    }
    return v < LIM_STACKS && !(n > 2 && t[1] == '0') && (!complete || n > 1);
}

static int b_or_a(const char *t, size_t n, int complete) {
    if (n > 0 && t[0] == 'b') return n == 1;
    return only_a(t, n, 0) && !(complete && n == 0);
}

/* WORKS: accepted, and its row produces text that follows it. MAY_FAIL:
 * accepted, and its row may instead end alone with FX_ERR_GRAMMAR when
 * its parse outgrows a row's limits. */
typedef enum { REFUSED, WORKS, MAY_FAIL } expect;

/* Submits grammar g next to the control row. REFUSED: FX_ERR_GRAMMAR with
 * a message; otherwise accepted and its text passes `check` (whole if it
 * ended on EOS). The control row equals its solo run either way. Returns
 * the grammar row's outcome (static). */
static const outcome *try_grammar(const char *what, const char *g, size_t len,
                                  expect want, text_check check,
                                  uint32_t max_tokens, const fx_logit_bias *bias,
                                  size_t n_bias) {
    static outcome go, co;
    memset(&go, 0, sizeof go);
    memset(&co, 0, sizeof co);
    assert_int_equal(submit_control(batcher, &co), FX_OK);
    fx_request q;
    static const int32_t prompt[] = {FX_BM_BOS, FX_BM_BYTE0 + 'g'};
    request(&q, prompt, 2, max_tokens, g, len);
    q.logit_bias = bias;
    q.n_logit_bias = n_bias;
    q.user = &go;
    fx_row *row = NULL;
    double t0 = now();
    fx_status st = fx_submit(batcher, &q, &row);
    double dt = now() - t0;
    if (dt > TIME_BOUND) fail_msg("%s: fx_submit took %g s", what, dt);
    if (want == REFUSED) {
        if (st != FX_ERR_GRAMMAR)
            fail_msg("%s: fx_submit gave %s, expected a grammar error", what, fx_status_str(st));
        if (row != NULL || fx_batcher_errmsg(batcher)[0] == '\0')
            fail_msg("%s: refused without a message, or with a row", what);
        outcome *one[] = {&co};
        run_all(batcher, one, 1);
    } else {
        if (st != FX_OK)
            fail_msg("%s: fx_submit gave %s (%s), expected it accepted", what,
                     fx_status_str(st), fx_batcher_errmsg(batcher));
        outcome *both[] = {&go, &co};
        run_all(batcher, both, 2);
        if (go.finish == FX_FINISH_ERROR) {
            if (want != MAY_FAIL || go.status != FX_ERR_GRAMMAR)
                fail_msg("%s: the row failed with %s", what, fx_status_str(go.status));
        } else {
            int complete = go.finish == FX_FINISH_EOS;
            char s0[3 * sizeof go.text];
            /* A row cut at max_tokens may end inside a character. */
            size_t n0 = complete ? go.len : fx_ref_utf8_sanitize(go.text, go.len, 0, s0);
            if (!check(complete ? go.text : s0, n0, complete))
                fail_msg("%s: text '%.*s' does not follow the grammar (finish %d)", what,
                         (int)go.len, go.text, go.finish);
        }
    }
    if (co.n_ids != control_solo_n ||
        memcmp(co.ids, control_solo, control_solo_n * sizeof *co.ids) != 0)
        fail_msg("%s: the plain row next to it changed", what);
    return &go;
}

static void sized(const char *what, char *g, size_t len, expect want, text_check check) {
    try_grammar(what, g, len, want, check, 6, NULL, 0);
    free(g);
}

/* ---- tests ---- */

typedef char *(*generator)(unsigned n, size_t *len);

static void generated(const char *what, generator gen, unsigned n, expect want,
                      text_check check) {
    size_t len;
    char *g = gen(n, &len);
    char name[64];
    snprintf(name, sizeof name, "%s %u", what, n);
    sized(name, g, len, want, check);
}

/* One generator at several sizes; refused sizes are given no check. */
typedef struct { unsigned n; expect want; } size_case;

static void generated_cases(const char *what, generator gen, const size_case *cases,
                            size_t n_cases, text_check check) {
    for (size_t i = 0; i < n_cases; i++)
        generated(what, gen, cases[i].n, cases[i].want,
                  cases[i].want == REFUSED ? NULL : check);
}


/* Issue 36's chain: one frame per level at the start, so above
 * FX_GRAMMAR_ROW_FRAMES levels it is refused at submit. After its first
 * "a" every level may end, one parse stack each: from FX_GRAMMAR_MAX_STACKS
 * levels on, an accepted chain's row fails at its first token. */
static void test_chain(void **state) {
    (void)state;
    static const size_case cases[] = {
        {LIM_STACKS - 2, WORKS}, {LIM_STACKS - 1, WORKS}, {LIM_STACKS, MAY_FAIL},
        {LIM_ROW_FRAMES - 1, MAY_FAIL}, {LIM_ROW_FRAMES, MAY_FAIL},
        {LIM_ROW_FRAMES + 1, REFUSED}, {4200, REFUSED}, {10000, REFUSED}};
    generated_cases("chain of", gg_chain, cases, sizeof cases / sizeof cases[0], only_a);
    /* Calls in tail position keep no frame: a chain as long as the text
     * limit allows works. */
    size_t len;
    char *g = gg_tail_chain(50000, &len);
    assert_true(len < LIM_TEXT);
    sized("tail chain of 50000", g, len, WORKS, only_a);
}

static void test_wide(void **state) {
    (void)state;
    static const size_case cases[] = {
        {LIM_STACKS - 1, WORKS}, {LIM_STACKS, WORKS}, {LIM_STACKS + 1, REFUSED}, {4000, REFUSED}};
    generated_cases("alternatives", gg_wide, cases, sizeof cases / sizeof cases[0], x_number);
}

static void test_nesting(void **state) {
    (void)state;
    static const size_case cases[] = {{LIM_NESTING - 1, WORKS}, {LIM_NESTING, WORKS},
                                      {LIM_NESTING + 1, REFUSED}, {100000, REFUSED}};
    generated_cases("nested groups", gg_nest, cases, sizeof cases / sizeof cases[0], only_a);
}

static void test_repeat(void **state) {
    (void)state;
    static const struct { const char *g; expect want; } cases[] = {
        {"root ::= \"a\"{1000}", WORKS},      {"root ::= \"a\"{1001}", REFUSED},
        {"root ::= \"a\"{0,1000}", WORKS},    {"root ::= \"a\"{0,1001}", REFUSED},
        {"root ::= \"a\"{1000,}", WORKS},     {"root ::= \"a\"{1001,}", REFUSED},
        {"root ::= \"a\"{999,1000}", WORKS},  {"root ::= \"a\"{4294967296}", REFUSED},
        /* The group becomes a rule: a million "a"s in 1000 references. */
        {"root ::= (\"a\"{1000}){1000}", WORKS},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        try_grammar(cases[i].g, cases[i].g, strlen(cases[i].g), cases[i].want, only_a, 6,
                    NULL, 0);
}

/* The compiled size (FX_GRAMMAR_MAX_ELEMS, after {m,n}): the largest
 * block repeated 1000 times that compiles, found by bisection, works;
 * one "a" more is refused. */
static void test_compiled_size(void **state) {
    (void)state;
    unsigned lo = 1, hi = 2000;
    size_t len;
    char *g = gg_repeat_block(lo, LIM_REPEAT, &len);
    try_grammar("1 x 1000", g, len, WORKS, b_or_a, 6, NULL, 0);
    free(g);
    while (hi - lo > 1) {
        unsigned mid = (lo + hi) / 2;
        g = gg_repeat_block(mid, LIM_REPEAT, &len);
        fx_request q;
        static const int32_t prompt[] = {FX_BM_BOS};
        request(&q, prompt, 1, 1, g, len);
        fx_row *row;
        fx_status st = fx_submit(batcher, &q, &row);
        free(g);
        if (st == FX_OK) {
            assert_int_equal(fx_row_release(batcher, row), FX_OK);
            lo = mid;
        } else {
            assert_int_equal(st, FX_ERR_GRAMMAR);
            hi = mid;
        }
    }
    /* 2^20 elements over 1000 copies: the boundary is near 1000 a's. */
    if (lo < 900 || lo > 1100) fail_msg("the largest block is %u a's", lo);
    char what[64];
    snprintf(what, sizeof what, "%u x 1000", lo);
    g = gg_repeat_block(lo, LIM_REPEAT, &len);
    try_grammar(what, g, len, WORKS, b_or_a, 6, NULL, 0);
    free(g);
    snprintf(what, sizeof what, "%u x 1000", lo + 1);
    g = gg_repeat_block(lo + 1, LIM_REPEAT, &len);
    try_grammar(what, g, len, REFUSED, NULL, 6, NULL, 0);
    free(g);
}

/* FX_GRAMMAR_MAX_TEXT: a grammar padded with a comment to exactly 1 MiB,
 * and one byte more. */
static void test_text_size(void **state) {
    (void)state;
    for (size_t extra = 0; extra < 2; extra++) {
        size_t len = LIM_TEXT + extra;
        char *g = malloc(len);
        assert_non_null(g);
        const char *rule = "root ::= \"a\"+ # ";
        memcpy(g, rule, strlen(rule));
        memset(g + strlen(rule), 'p', len - strlen(rule) - 1);
        g[len - 1] = '\n';
        try_grammar(extra ? "1 MiB + 1" : "1 MiB", g, len, extra ? REFUSED : WORKS, only_a, 6,
                    NULL, 0);
        free(g);
    }
}

/* A parse that deepens with every token: r ::= "a" r "b" | "c" keeps one
 * frame per "a". Forced to "aa" by a bias, the row passes the frames a
 * row keeps (FX_GRAMMAR_ROW_FRAMES) near token 2048 and must then fail
 * alone with FX_ERR_GRAMMAR -- not grow without bound. */
static void test_deepening_row(void **state) {
    (void)state;
    static const char g[] = "root ::= r\nr ::= \"a\" r \"b\" | \"c\"\n";
    int32_t aa = -1;
    for (uint32_t t = 0; t < fx_model_vocab_size(model); t++) {
        char p[8];
        size_t n;
        if (fx_token_to_piece(model, (int32_t)t, 0, p, sizeof p, &n) == FX_OK && n == 2 &&
            p[0] == 'a' && p[1] == 'a')
            aa = (int32_t)t;
    }
    assert_true(aa >= 0);
    fx_logit_bias bias = {aa, 1e30f};
    const outcome *o = try_grammar("deepening", g, sizeof g - 1, MAY_FAIL, only_a,
                                   LIM_ROW_FRAMES / 2 + 40, &bias, 1);
    if (o->finish != FX_FINISH_ERROR || o->status != FX_ERR_GRAMMAR)
        fail_msg("a parse %zu frames deep ended %d (%s)", 2 * o->n_ids, o->finish,
                 fx_status_str(o->status));
    if (o->n_ids < LIM_ROW_FRAMES / 2 - 2 || o->n_ids > LIM_ROW_FRAMES / 2 + 2)
        fail_msg("the parse failed after %zu tokens", o->n_ids);
}

static fx_batcher *new_batcher(void) {
    fx_batcher_params p;
    fx_batcher_params_init(&p);
    p.max_rows = 4;
    p.n_ctx = LIM_ROW_FRAMES / 2 + 64;
    p.max_step_tokens = 64;
    fx_batcher *b = NULL;
    char err[256];
    if (fx_batcher_create(model, &p, &b, err, sizeof err) != FX_OK) return NULL;
    return b;
}

/* A fresh batcher per test: a failed test leaves rows behind. */
static int test_setup(void **state) {
    (void)state;
    batcher = new_batcher();
    return batcher ? 0 : -1;
}

static int test_teardown(void **state) {
    (void)state;
    fx_batcher_free(batcher);
    batcher = NULL;
    return 0;
}

static int setup(void **state) {
    (void)state;
    snprintf(model_path, sizeof model_path, "%s", fx_test_tmp_path("glim.gguf"));
    if (fx_test_load_byte_model(model_path, 256, 11, &model) != 0) return -1;
    /* The control row alone. */
    fx_batcher *b = new_batcher();
    static outcome solo;
    if (!b || submit_control(b, &solo) != FX_OK) return -1;
    outcome *one[] = {&solo};
    run_all(b, one, 1);
    fx_batcher_free(b);
    memcpy(control_solo, solo.ids, solo.n_ids * sizeof *solo.ids);
    control_solo_n = solo.n_ids;
    return control_solo_n == 12 ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    fx_model_free(model);
    remove(model_path);
    return 0;
}

#define T(f) cmocka_unit_test_setup_teardown(f, test_setup, test_teardown)

int main(void) {
    const struct CMUnitTest tests[] = {
        T(test_chain),        T(test_wide),      T(test_nesting),
        T(test_repeat),       T(test_compiled_size), T(test_text_size),
        T(test_deepening_row),
    };
    return cmocka_run_group_tests_name("grammar_limits", tests, setup, teardown);
}
