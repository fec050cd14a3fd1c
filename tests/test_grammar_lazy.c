/*
 * Lazy grammars (fx_request.grammar_triggers), through ferrox.h only, on
 * the byte-token model (support/byte_model.c):
 *   - before its trigger a row samples exactly as without a grammar (the
 *     same greedy tokens as a free run), and fx_event.grammar_start is -1;
 *   - a trigger token, or a trigger string split over two tokens, hands
 *     the output from the trigger's first byte to the grammar, which then
 *     constrains every later token and ends the row when complete;
 *     grammar_start is that byte's offset;
 *   - output the grammar cannot read fails the row alone
 *     (FX_ERR_GRAMMAR); a trigger that never comes leaves the row free;
 *   - malformed triggers are refused at submit.
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

#include "byte_model.h"
#include "test_util.h"

enum { N_GEN = 14 };

static char model_path[4096];
static fx_model *model;

typedef struct outcome {
    int32_t ids[64];
    size_t n_ids;
    char raw[1024];        /* the tokens' pieces back to back */
    size_t raw_len;
    int64_t text_start;    /* grammar_start of the latest TEXT */
    int text_flipped;      /* a TEXT's grammar_start went back, or changed
                              once set */
    int64_t done_start;    /* grammar_start of the DONE */
    fx_finish_reason finish;
    fx_status status;
} outcome;

static const int32_t prompt[] = {FX_BM_BOS, FX_BM_BYTE0 + 'h', FX_BM_BYTE0 + 'i'};

static size_t piece(int32_t id, char *buf, size_t cap) {
    size_t n = 0;
    assert_int_equal(fx_token_to_piece(model, id, 0, buf, cap, &n), FX_OK);
    return n;
}

/* Runs one request to its DONE; the grammar as GBNF (NULL: none). */
static void run(const char *grammar, const char *const *words, size_t n_words,
                const int32_t *tokens, size_t n_tokens, outcome *o) {
    fx_batcher_params bp;
    fx_batcher_params_init(&bp);
    bp.n_ctx = 64;
    fx_batcher *b = NULL;
    char err[256];
    if (fx_batcher_create(model, &bp, &b, err, sizeof err) != FX_OK)
        fail_msg("create: %s", err);
    fx_request q;
    fx_request_init(&q);
    q.prompt_tokens = prompt;
    q.n_prompt_tokens = 3;
    q.max_tokens = N_GEN;
    q.flags = FX_REQUEST_IGNORE_EOS;
    q.grammar = grammar;
    q.grammar_len = grammar ? strlen(grammar) : 0;
    q.grammar_triggers = words;
    q.n_grammar_triggers = n_words;
    q.grammar_trigger_tokens = tokens;
    q.n_grammar_trigger_tokens = n_tokens;
    fx_row *row;
    if (fx_submit(b, &q, &row) != FX_OK)
        fail_msg("submit: %s", fx_batcher_errmsg(b));
    memset(o, 0, sizeof *o);
    o->text_start = -1;
    int done = 0;
    while (!done) {
        assert_int_equal(fx_step(b), FX_OK);
        fx_event ev;
        fx_status st;
        while (fx_poll_sized(b, &ev, sizeof ev, &st)) {
            if (ev.type == FX_EVENT_TEXT) {
                if (o->text_start >= 0 && ev.grammar_start != o->text_start)
                    o->text_flipped = 1;
                o->text_start = ev.grammar_start;
            }
            if (ev.type != FX_EVENT_DONE) continue;
            done = 1;
            o->finish = ev.finish;
            o->status = ev.status;
            o->done_start = ev.grammar_start;
            assert_true(ev.n_tokens <= 64);
            memcpy(o->ids, ev.tokens, ev.n_tokens * sizeof *ev.tokens);
            o->n_ids = ev.n_tokens;
        }
    }
    /* The text of the tokens, without the end token a complete grammar
     * forces. */
    for (size_t i = 0; i < o->n_ids; i++)
        if (o->ids[i] != FX_BM_EOS)
            o->raw_len += piece(o->ids[i], o->raw + o->raw_len,
                                sizeof o->raw - o->raw_len);
    fx_batcher_free(b);
}

/* bytes as a GBNF string literal body: every byte \xHH. */
static void gbnf_literal(char *out, const char *bytes, size_t n) {
    for (size_t i = 0; i < n; i++)
        sprintf(out + 4 * i, "\\x%02X", (unsigned char)bytes[i]);
    out[4 * n] = '\0';
}

/* After the trigger text: one to three letters, then the grammar is
 * complete and nothing may follow. */
static void trigger_grammar(char *g, const char *bytes, size_t n) {
    char lit[4 * 64 + 1];
    assert_true(n <= 64);
    gbnf_literal(lit, bytes, n);
    sprintf(g, "root ::= \"%s\" [a-z] [a-z]? [a-z]?\n", lit);
}

/* The free run's output from `from` on is not what the grammar allows,
 * so a lazy row that reproduced it would have proved nothing. */
static int letters_only(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] < 'a' || s[i] > 'z') return 0;
    return 1;
}

/* The lazy run equals the free run up to and including token k, took
 * over at byte `start`, and from there holds `head` then 1-3 letters. */
static void expect_took_over(const outcome *free_run, const outcome *lazy,
                             size_t k, size_t start, const char *head,
                             size_t head_len) {
    if (lazy->n_ids <= k)
        fail_msg("the lazy row ended after %zu tokens (trigger at %zu): "
                 "finish %d status %d", lazy->n_ids, k, lazy->finish,
                 lazy->status);
    assert_memory_equal(lazy->ids, free_run->ids, (k + 1) * sizeof *lazy->ids);
    assert_int_equal(lazy->done_start, (int64_t)start);
    assert_int_equal(lazy->status, FX_OK);
    size_t tail = lazy->raw_len - start;
    assert_true(tail >= head_len + 1 && tail <= head_len + 3);
    assert_memory_equal(lazy->raw + start, head, head_len);
    assert_true(letters_only(lazy->raw + start + head_len, tail - head_len));
    /* TEXT events say -1 until one reaches the trigger, then its offset. */
    assert_false(lazy->text_flipped);
    assert_true(lazy->text_start == -1 || lazy->text_start == (int64_t)start);
}

/* Bytes a GBNF literal can spell one for one: ASCII without NUL (the
 * grammar reads code points, so a lone byte of a longer character is no
 * literal). */
static int plain_ascii(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] == 0 || (unsigned char)s[i] >= 0x80) return 0;
    return 1;
}

static void test_trigger_token(void **state) {
    (void)state;
    outcome free_run, lazy;
    run(NULL, NULL, 0, NULL, 0, &free_run);
    assert_int_equal(free_run.n_ids, N_GEN);
    assert_int_equal(free_run.done_start, -1);
    /* A token from the middle of the free run, its first occurrence. */
    size_t k = 3, start = 0;
    char p[256];
    size_t pl = 0;
    for (;; k++) {
        assert_true(k < N_GEN - 2);
        int seen = 0;
        for (size_t i = 0; i < k; i++) seen |= free_run.ids[i] == free_run.ids[k];
        start = 0;
        for (size_t i = 0; i < k; i++) start += piece(free_run.ids[i], p, sizeof p);
        pl = piece(free_run.ids[k], p, sizeof p);
        if (!seen && pl > 0 && pl <= 64 && plain_ascii(p, pl) &&
            !letters_only(free_run.raw + start + pl, free_run.raw_len - start - pl))
            break;
    }
    char g[512];
    trigger_grammar(g, p, pl);
    run(g, NULL, 0, &free_run.ids[k], 1, &lazy);
    expect_took_over(&free_run, &lazy, k, start, p, pl);
}

static void test_trigger_string_across_tokens(void **state) {
    (void)state;
    outcome free_run, lazy;
    run(NULL, NULL, 0, NULL, 0, &free_run);
    /* The last byte of token k - 1 and the first of token k, where those
     * two bytes occur first in the output. */
    char p[256];
    size_t k = 2, end_prev = 0;
    for (size_t i = 0; i < k - 1; i++) end_prev += piece(free_run.ids[i], p, sizeof p);
    for (;; k++) {
        assert_true(k < N_GEN - 2);
        size_t prev = piece(free_run.ids[k - 1], p, sizeof p);
        end_prev += prev;
        size_t cur = piece(free_run.ids[k], p, sizeof p);
        if (prev == 0 || cur == 0) continue;
        const char *w = free_run.raw + end_prev - 1;
        int earlier = 0;
        for (size_t i = 0; i + 2 <= end_prev; i++)
            earlier |= memcmp(free_run.raw + i, w, 2) == 0;
        if (!earlier && plain_ascii(w, cur + 1) && cur + 1 <= 64 &&
            !letters_only(w + cur + 1, free_run.raw_len - end_prev - cur))
            break;
    }
    char word[3] = {free_run.raw[end_prev - 1], free_run.raw[end_prev], 0};
    size_t cur = piece(free_run.ids[k], p, sizeof p);
    /* The grammar reads from the trigger to the end of token k. */
    char g[512];
    trigger_grammar(g, free_run.raw + end_prev - 1, cur + 1);
    const char *words[1] = {word};
    run(g, words, 1, NULL, 0, &lazy);
    expect_took_over(&free_run, &lazy, k, end_prev - 1,
                     free_run.raw + end_prev - 1, cur + 1);
}

static void test_trigger_never_or_unreadable(void **state) {
    (void)state;
    outcome free_run, never, bad;
    run(NULL, NULL, 0, NULL, 0, &free_run);
    /* A trigger that never comes: the row is free to the end. */
    const char *words[1] = {"\x01\x02\x03 never"};
    run("root ::= \"x\"\n", words, 1, NULL, 0, &never);
    assert_int_equal(never.n_ids, free_run.n_ids);
    assert_memory_equal(never.ids, free_run.ids, free_run.n_ids * sizeof *never.ids);
    assert_int_equal(never.done_start, -1);
    assert_int_equal(never.status, FX_OK);
    /* A grammar that cannot read its trigger: that row fails. */
    run("root ::= \"\\x01\\x02\"\n", NULL, 0, &free_run.ids[2], 1, &bad);
    assert_int_equal(bad.finish, FX_FINISH_ERROR);
    assert_int_equal(bad.status, FX_ERR_GRAMMAR);
}

static void test_submit_refusals(void **state) {
    (void)state;
    fx_batcher *b = NULL;
    assert_int_equal(fx_batcher_create(model, NULL, &b, NULL, 0), FX_OK);
    fx_request q;
    fx_request_init(&q);
    q.prompt_tokens = prompt;
    q.n_prompt_tokens = 3;
    q.max_tokens = 8;
    fx_row *row;
    const char *one[1] = {"<tool>"};
    int32_t tok = FX_BM_BYTE0 + '<';
    /* Triggers without a grammar. */
    q.grammar_triggers = one;
    q.n_grammar_triggers = 1;
    assert_int_equal(fx_submit(b, &q, &row), FX_ERR_INVALID_ARG);
    q.grammar = "root ::= \"<tool>\" [a-z]\n";
    q.grammar_len = strlen(q.grammar);
    assert_int_equal(fx_submit(b, &q, &row), FX_OK);
    /* NULL arrays, an empty string, a long one, too many, a token outside
     * the vocabulary. */
    q.grammar_triggers = NULL;
    assert_int_equal(fx_submit(b, &q, &row), FX_ERR_INVALID_ARG);
    const char *empty[1] = {""};
    q.grammar_triggers = empty;
    assert_int_equal(fx_submit(b, &q, &row), FX_ERR_INVALID_ARG);
    static char longw[300];
    memset(longw, 'a', sizeof longw - 1);
    const char *lw[1] = {longw};
    q.grammar_triggers = lw;
    assert_int_equal(fx_submit(b, &q, &row), FX_ERR_INVALID_ARG);
    longw[256] = '\0';
    assert_int_equal(fx_submit(b, &q, &row), FX_OK);
    const char *many[65];
    for (int i = 0; i < 65; i++) many[i] = "<tool>";
    q.grammar_triggers = many;
    q.n_grammar_triggers = 65;
    assert_int_equal(fx_submit(b, &q, &row), FX_ERR_INVALID_ARG);
    q.n_grammar_triggers = 64;
    assert_int_equal(fx_submit(b, &q, &row), FX_OK);
    q.n_grammar_triggers = 0;
    q.grammar_trigger_tokens = &tok;
    q.n_grammar_trigger_tokens = 1;
    assert_int_equal(fx_submit(b, &q, &row), FX_OK);
    tok = (int32_t)fx_test_byte_model_vocab();
    assert_int_equal(fx_submit(b, &q, &row), FX_ERR_INVALID_ARG);
    tok = -1;
    assert_int_equal(fx_submit(b, &q, &row), FX_ERR_INVALID_ARG);
    q.grammar_trigger_tokens = NULL;
    assert_int_equal(fx_submit(b, &q, &row), FX_ERR_INVALID_ARG);
    /* FX_REQUEST_JSON takes triggers too. */
    q.grammar = NULL;
    q.grammar_len = 0;
    q.flags = FX_REQUEST_JSON;
    q.n_grammar_trigger_tokens = 0;
    q.grammar_triggers = one;
    q.n_grammar_triggers = 1;
    assert_int_equal(fx_submit(b, &q, &row), FX_OK);
    while (fx_batcher_pending(b) > 0) assert_int_equal(fx_step(b), FX_OK);
    fx_batcher_free(b);
}

static int setup(void **state) {
    (void)state;
    snprintf(model_path, sizeof model_path, "%s", fx_test_tmp_path("lazy.gguf"));
    return fx_test_load_byte_model(model_path, 256, 7, &model);
}

static int teardown(void **state) {
    (void)state;
    fx_model_free(model);
    remove(model_path);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trigger_token),
        cmocka_unit_test(test_trigger_string_across_tokens),
        cmocka_unit_test(test_trigger_never_or_unreadable),
        cmocka_unit_test(test_submit_refusals),
    };
    return cmocka_run_group_tests_name("grammar_lazy", tests, setup, teardown);
}
