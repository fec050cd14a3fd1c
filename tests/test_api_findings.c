/*
 * Contract breaks found from outside (issue 36, "finding the next ones"),
 * now fixed: each test is a minimal reproducer through the public API of
 * a promise of ferrox.h the library once broke, kept as its regression
 * test. Kept apart from the tests that found them (test_api_statemachine,
 * test_resource_limits) so that a failure here names the finding and
 * nothing else.
 */
#define _DEFAULT_SOURCE
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
#include "fault_alloc.h"
#include "mem_cap.h"
#include "test_util.h"

static char model_path[4096];
static fx_model *model;

/* ---- found by test_api_statemachine: allocation failures ---- */

typedef struct one_row {
    char text[1024];
    size_t len;
    int dones;
    fx_finish_reason finish;
    fx_status status;
    int32_t stop_index;
    int32_t ids[64];
    size_t n_ids;
} one_row;

/* One request on a fresh batcher whose allocator fails from its N-th
 * call after the submit (alone, or with every later one; N 0: never),
 * run to its DONE; polled after every step, or (poll_late) only once it
 * ended, so that its events pile up. */
static long run_one(const fx_request *q0, long fail_at, int fail_after, int poll_late,
                    one_row *o) {
    fx_fault_alloc fa = {0};
    fx_batcher_params p;
    fx_batcher_params_init(&p);
    p.allocator = fx_fault_allocator(&fa);
    p.max_rows = 1;
    p.n_ctx = 64;
    fx_batcher *b = NULL;
    assert_int_equal(fx_batcher_create(model, &p, &b, NULL, 0), FX_OK);
    fx_request q = *q0;
    q.user = o;
    memset(o, 0, sizeof *o);
    fx_row *row;
    assert_int_equal(fx_submit(b, &q, &row), FX_OK);
    fx_fault_plan(&fa, fail_at, fail_after);
    for (int i = 0; i < 100 && fx_batcher_pending(b) > 0; i++) {
        fx_status st = fx_step(b);
        assert_true(st == FX_OK || st == FX_ERR_NOMEM);
        fx_event ev;
        while ((!poll_late || fx_batcher_pending(b) == 0) && fx_poll(b, &ev)) {
            assert_ptr_equal(ev.user, o);
            if (ev.type == FX_EVENT_TEXT) {
                assert_true(o->len + ev.text_len <= sizeof o->text);
                memcpy(o->text + o->len, ev.text, ev.text_len);
                o->len += ev.text_len;
            } else if (ev.type == FX_EVENT_DONE) {
                o->dones++;
                o->finish = ev.finish, o->status = ev.status, o->stop_index = ev.stop_index;
                o->n_ids = ev.n_tokens < 64 ? ev.n_tokens : 64;
                memcpy(o->ids, ev.tokens, o->n_ids * sizeof *o->ids);
            }
        }
    }
    long calls = fa.calls;
    fx_fault_stop(&fa);
    fx_batcher_free(b);
    assert_int_equal(fa.live, 0);
    return calls;
}

/* Every allocation after the submit failing in turn: the row ends once,
 * and either fails (FX_FINISH_ERROR, stop_index -1) or has its whole
 * text, as fault-free. */
static void sweep_row(const char *what, const fx_request *q, int poll_late) {
    one_row ref, o;
    long total = run_one(q, 0, 0, poll_late, &ref);
    assert_int_equal(ref.dones, 1);
    assert_true(ref.finish != FX_FINISH_ERROR && ref.len > 0);
    for (int after = 0; after < 2; after++)
        for (long n = 1; n <= total; n++) {
            run_one(q, n, after, poll_late, &o);
            if (o.dones != 1) fail_msg("%s, allocation %ld failing: %d DONEs", what, n, o.dones);
            if (o.finish == FX_FINISH_ERROR) {
                if (o.stop_index != -1)
                    fail_msg("%s, allocation %ld of %ld failing%s: FX_FINISH_ERROR (%s) with "
                             "stop_index %d; ferrox.h: -1 unless STOP or EOS", what, n, total,
                             after ? " (and every later one)" : "",
                             fx_status_str(o.status), o.stop_index);
                continue;
            }
            if (o.finish != ref.finish || o.len != ref.len || memcmp(o.text, ref.text, ref.len))
                fail_msg("%s, allocation %ld of %ld failing%s: finish %d with %zu bytes of "
                         "text; fault-free: finish %d, %zu bytes -- text lost, row not failed",
                         what, n, total, after ? " (and every later one)" : "", o.finish,
                         o.len, ref.finish, ref.len);
        }
}

/* Found by the state machine. A TEXT event that cannot be queued (no
 * memory) fails its row rather than vanish (step.c, emit_text); the
 * row's LENGTH (or STOP) used to overwrite the failure, and its DONE said
 * it ended normally with its last text missing. Here: one token,
 * max_tokens 1, its TEXT event's allocation failing. */
static void test_text_not_lost_on_nomem(void **state) {
    (void)state;
    static const int32_t prompt[] = {FX_BM_BOS, FX_BM_BYTE0 + 'h', FX_BM_BYTE0 + 'i'};
    /* One forced token with text, then LENGTH. */
    int32_t ab = -1;
    for (uint32_t t = 0; t < fx_model_vocab_size(model) && ab < 0; t++) {
        char piece[8];
        size_t n;
        if (fx_token_to_piece(model, (int32_t)t, 0, piece, sizeof piece, &n) == FX_OK &&
            n == 3 && !memcmp(piece, "abc", 3))
            ab = (int32_t)t;
    }
    assert_true(ab >= 0);
    fx_logit_bias force = {ab, 1e30f};
    fx_request q;
    fx_request_init(&q);
    q.prompt_tokens = prompt;
    q.n_prompt_tokens = 3;
    q.logit_bias = &force;
    q.n_logit_bias = 1;
    q.max_tokens = 1;
    sweep_row("one forced token, LENGTH, polled at the end", &q, 1);
}

/* Found by the state machine. A row that ended on EOS (stop_index: the
 * token) but fails when the text it held back cannot be queued used to
 * keep that stop_index in its FX_FINISH_ERROR DONE (ferrox.h: -1). Here a
 * grammar completes after "a", which was held back for the stop string
 * "ab". */
static void test_error_done_stop_index(void **state) {
    (void)state;
    static const int32_t prompt[] = {FX_BM_BOS, FX_BM_BYTE0 + 'h'};
    static const char *const stops[] = {"ab"};
    fx_request q;
    fx_request_init(&q);
    q.prompt_tokens = prompt;
    q.n_prompt_tokens = 2;
    q.max_tokens = 4;
    q.grammar = "root ::= \"a\"";
    q.grammar_len = strlen(q.grammar);
    q.stop = stops;
    q.n_stop = 1;
    sweep_row("grammar \"a\" held for stop \"ab\", EOS", &q, 0);
}

/* Found by test_api_statemachine. A row cut off inside a character ends
 * with that character as U+FFFD (the final flush); with U+FFFD as a stop
 * string, the flushed text is withheld as a stop -- and the DONE used to
 * say LENGTH, stop_index -1: text missing and nothing telling the host.
 * ferrox.h (fx_request::stop, FX_FINISH_STOP): the DONE is a STOP, index
 * 0, no text. Here: one forced byte 0xE6, max_tokens 1. */
static void test_flushed_stop(void **state) {
    (void)state;
    static const int32_t prompt[] = {FX_BM_BOS, FX_BM_BYTE0 + 'h'};
    static const char *const stops[] = {"\xef\xbf\xbd"};
    fx_logit_bias force = {FX_BM_BYTE0 + 0xE6, 1e30f};
    fx_request q;
    fx_request_init(&q);
    q.prompt_tokens = prompt;
    q.n_prompt_tokens = 2;
    q.max_tokens = 1;
    q.logit_bias = &force;
    q.n_logit_bias = 1;
    q.stop = stops;
    q.n_stop = 1;
    one_row o;
    run_one(&q, 0, 0, 0, &o);
    assert_int_equal(o.dones, 1);
    assert_int_equal(o.n_ids, 1);
    assert_int_equal(o.ids[0], FX_BM_BYTE0 + 0xE6);
    if (o.finish != FX_FINISH_STOP || o.stop_index != 0 || o.len != 0)
        fail_msg("finish %d, stop_index %d, %zu bytes of text: the U+FFFD the final flush "
                 "made completes stop string 0 (ferrox.h: STOP, index 0, no text)",
                 o.finish, o.stop_index, o.len);
}

/* Found while fixing test_text_not_lost_on_nomem: a cancelled row's
 * final flush (here the "x" held back for the stop string "xy") that
 * cannot be queued vanished under a CANCELLED DONE. Cancelled after its
 * first token, then allocation n after the cancel failing (alone, or with
 * every later one): the DONE is CANCELLED with the "x", or the row fails. */
static void cancel_case(long fail_at, int fail_after, one_row *o) {
    static const int32_t prompt[] = {FX_BM_BOS, FX_BM_BYTE0 + 'h'};
    static const char *const stops[] = {"xy"};
    fx_logit_bias force = {FX_BM_BYTE0 + 'x', 1e30f};
    fx_fault_alloc fa = {0};
    fx_batcher_params p;
    fx_batcher_params_init(&p);
    p.allocator = fx_fault_allocator(&fa);
    p.max_rows = 1;
    p.n_ctx = 64;
    fx_batcher *b = NULL;
    assert_int_equal(fx_batcher_create(model, &p, &b, NULL, 0), FX_OK);
    fx_request q;
    fx_request_init(&q);
    q.prompt_tokens = prompt;
    q.n_prompt_tokens = 2;
    q.max_tokens = 8;
    q.logit_bias = &force;
    q.n_logit_bias = 1;
    q.stop = stops;
    q.n_stop = 1;
    memset(o, 0, sizeof *o);
    fx_row *row;
    assert_int_equal(fx_submit(b, &q, &row), FX_OK);
    assert_int_equal(fx_step(b), FX_OK); /* prefill and the first "x" */
    assert_int_equal(fx_cancel(b, row), FX_OK);
    fx_fault_plan(&fa, fail_at, fail_after);
    for (int i = 0; i < 10 && fx_batcher_pending(b) > 0; i++) {
        fx_status st = fx_step(b);
        assert_true(st == FX_OK || st == FX_ERR_NOMEM);
    }
    fx_event ev;
    while (fx_poll(b, &ev)) {
        if (ev.type == FX_EVENT_TEXT) {
            assert_true(o->len + ev.text_len <= sizeof o->text);
            memcpy(o->text + o->len, ev.text, ev.text_len);
            o->len += ev.text_len;
        } else if (ev.type == FX_EVENT_DONE) {
            o->dones++;
            o->finish = ev.finish, o->status = ev.status, o->stop_index = ev.stop_index;
        }
    }
    fx_fault_stop(&fa);
    fx_batcher_free(b);
    assert_int_equal(fa.live, 0);
}

static void test_cancel_text_not_lost_on_nomem(void **state) {
    (void)state;
    one_row ref, o;
    cancel_case(0, 0, &ref);
    assert_int_equal(ref.dones, 1);
    assert_int_equal(ref.finish, FX_FINISH_CANCELLED);
    assert_true(ref.len == 1 && ref.text[0] == 'x');
    for (int after = 0; after < 2; after++)
        for (long n = 1; n <= 8; n++) {
            cancel_case(n, after, &o);
            assert_int_equal(o.dones, 1);
            if (o.finish == FX_FINISH_ERROR) {
                assert_int_equal(o.status, FX_ERR_NOMEM);
                assert_int_equal(o.stop_index, -1);
                continue;
            }
            if (o.finish != FX_FINISH_CANCELLED || o.len != 1)
                fail_msg("cancelled, allocation %ld failing%s: finish %d with %zu bytes of "
                         "text; fault-free: CANCELLED with the \"x\" -- text lost, row not "
                         "failed", n, after ? " (and every later one)" : "", o.finish, o.len);
        }
}

/* ---- sizes (run under the memory cap of support/mem_cap.h) ---- */

static void small_params(fx_batcher_params *p) {
    fx_batcher_params_init(p);
    p->max_rows = 2;
    p->n_ctx = 64;
    p->max_step_tokens = 64;
}

static fx_batcher *create_ok(fx_batcher_params *p) {
    fx_batcher *b = NULL;
    char err[256];
    fx_status st = fx_batcher_create(model, p, &b, err, sizeof err);
    CHECK(st == FX_OK, "create: %s (%s)", fx_status_str(st), err);
    return b;
}

/* The smallest kv_bytes a batcher of 16-position blocks takes (one
 * block), by bisection. */
static uint64_t one_block_bytes(void) {
    fx_batcher_params p;
    small_params(&p);
    p.block_tokens = 16;
    uint64_t lo = 1, hi = 1 << 20;
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        p.kv_bytes = mid;
        fx_batcher *b = NULL;
        fx_status st = fx_batcher_create(model, &p, &b, NULL, 0);
        CHECK(st == FX_OK || st == FX_ERR_INVALID_ARG, "kv_bytes %llu: %s",
              (unsigned long long)mid, fx_status_str(st));
        fx_batcher_free(b);
        if (st == FX_OK) hi = mid;
        else lo = mid;
    }
    return hi;
}

static fx_status submit_len(fx_batcher *b, size_t n, uint32_t max_tokens) {
    int32_t ids[64];
    CHECK(n <= 64, "prompt too long for the test");
    for (size_t i = 0; i < n; i++) ids[i] = FX_BM_BYTE0 + 'a' + (int32_t)(i % 20);
    fx_request q;
    fx_request_init(&q);
    q.prompt_tokens = ids;
    q.n_prompt_tokens = n;
    q.max_tokens = max_tokens;
    fx_row *row;
    return fx_submit(b, &q, &row);
}

/* Found by test_api_statemachine. ferrox.h: fx_lease_create fails with
 * FX_ERR_NO_ROOM for a prefix "longer than n_ctx - 1 tokens, or more
 * blocks than the cache". A prefix of exactly the cache's blocks is
 * neither, yet it was refused ("the request needs 3 KV blocks; the cache
 * has 2 in all"): the lease's row was sized with one position more. */
static void lease_fills_cache_case(void) {
    fx_batcher_params p;
    small_params(&p);
    p.block_tokens = 16;
    p.kv_bytes = 2 * one_block_bytes();
    fx_batcher *b = create_ok(&p);
    /* Two blocks: a row of 32 positions fits, one of 33 does not. */
    CHECK_ST(submit_len(b, 31, 1), FX_OK);
    CHECK_ST(submit_len(b, 32, 1), FX_ERR_NO_ROOM);
    fx_batcher_free(b);
    b = create_ok(&p);
    /* Texts of 31 and 32 tokens (bytes without a piece: a byte token
     * each, after the space SentencePiece puts first). */
    char text[64];
    memset(text, '\x80', sizeof text);
    for (size_t want = 31; want <= 32; want++) {
        size_t len = 0, n = 0;
        while (n != want) {
            CHECK(++len < sizeof text, "no text of %zu tokens", want);
            fx_status st = fx_tokenize(model, text, len, 0, NULL, 0, &n);
            CHECK(st == FX_OK || st == FX_ERR_BUFFER_TOO_SMALL, "tokenize");
        }
        fx_lease *l = NULL;
        fx_status st = fx_lease_create(b, text, len, FX_REQUEST_NO_BOS, &l);
        CHECK(st == FX_OK, "a lease of %zu tokens in a cache of 32 positions: %s (%s)", want,
              fx_status_str(st), fx_batcher_errmsg(b));
        /* A row continuing it generates one token more: with the lease's
         * 31 it fits and runs (once the lease is computed), with 32 it
         * can never fit. */
        int32_t one = FX_BM_BYTE0 + 'a';
        fx_request q;
        fx_request_init(&q);
        q.prompt_tokens = &one;
        q.n_prompt_tokens = 0;
        q.max_tokens = 1;
        q.lease = l;
        fx_row *row;
        if (want == 32) {
            CHECK_ST(fx_submit(b, &q, &row), FX_ERR_NO_ROOM);
        } else {
            CHECK_ST(fx_submit(b, &q, &row), FX_OK);
            int done = 0;
            for (int i = 0; i < 100 && !done; i++) {
                CHECK_ST(fx_step(b), FX_OK);
                fx_event ev;
                while (fx_poll(b, &ev))
                    if (ev.type == FX_EVENT_DONE) {
                        CHECK(ev.finish == FX_FINISH_LENGTH && ev.n_tokens == 1,
                              "the row continuing the lease: finish %d, %zu tokens",
                              ev.finish, ev.n_tokens);
                        done = 1;
                    }
            }
            CHECK(done, "the row continuing a lease of 31 tokens never ended");
        }
        CHECK_ST(fx_lease_release(b, l), FX_OK);
        for (int i = 0; i < 10 && fx_batcher_pending(b) > 0; i++) CHECK_ST(fx_step(b), FX_OK);
        CHECK(fx_batcher_pending(b) == 0, "rows left after the lease of %zu", want);
    }
    fx_batcher_free(b);
}

/* Found by test_resource_limits. A text prompt that could never fit was
 * tokenized whole before it was refused, and tokenizing takes about 42
 * bytes of memory per byte of text: 16 MiB of prompt to a batcher of 64
 * positions needed ~670 MB, and under this cap fx_submit said
 * FX_ERR_NOMEM -- a status a host may retry -- where ferrox.h promises
 * FX_ERR_NO_ROOM for a request that could never run. */
static void prompt_bytes_case(void) {
    fx_batcher_params p;
    small_params(&p);
    fx_batcher *b = create_ok(&p);
    size_t len = (size_t)16 << 20;
    char *text = malloc(len);
    CHECK(text, "out of memory in the test");
    memset(text, 'a', len);
    fx_request q;
    fx_request_init(&q);
    q.prompt = text;
    q.prompt_len = len;
    q.max_tokens = 1;
    fx_row *row;
    CHECK_ST(fx_submit(b, &q, &row), FX_ERR_NO_ROOM);
    free(text);
    fx_batcher_free(b);
}

static void test_lease_fills_cache(void **state) {
    (void)state;
    fx_test_capped("lease_fills_cache", lease_fills_cache_case, 30);
}

static void test_prompt_bytes(void **state) {
    (void)state;
    fx_test_capped("prompt_bytes", prompt_bytes_case, 30);
}

static int setup(void **state) {
    (void)state;
    snprintf(model_path, sizeof model_path, "%s", fx_test_tmp_path("findings.gguf"));
    if (fx_test_write_byte_model(model_path, 256, 7) != 0) return -1;
    char err[256];
    if (fx_model_load(model_path, NULL, &model, err, sizeof err) != FX_OK) return -1;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    fx_model_free(model);
    remove(model_path);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text_not_lost_on_nomem),
        cmocka_unit_test(test_error_done_stop_index),
        cmocka_unit_test(test_flushed_stop),
        cmocka_unit_test(test_cancel_text_not_lost_on_nomem),
        cmocka_unit_test(test_lease_fills_cache),
        cmocka_unit_test(test_prompt_bytes),
    };
    return cmocka_run_group_tests_name("api_findings", tests, setup, teardown);
}
