/*
 * docs/reliability.md 43 for the batcher: fail the Nth allocation of a whole
 * session -- create, submit (tokenizing a text prompt, compiling a
 * grammar), lease, steps, polls, free -- for every N, once alone and once
 * with every later allocation failing too. Each time: only statuses (no
 * crash), nothing leaked, every accepted row gets exactly one DONE, every
 * row that still completes says exactly what it says without faults, and
 * the library works afterwards.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <ferrox.h>

#include "api/api_internal.h"
#include "batcher/batcher.h"
#include "fault_alloc.h"
#include "gguf_writer.h"
#include "test_util.h"

enum { ROWS = 6, MAX_IDS = 64 };

typedef struct result {
    int32_t ids[MAX_IDS];
    size_t n_ids;
    int done;     /* DONE events seen; -1: refused at submit */
    int differs;  /* its request differs from the reference run's */
    fx_finish_reason finish;
    fx_status status;
} result;

static char model_path[4096];

static void on_event(const fx_event *ev) {
    result *x = ev->user;
    if (ev->type != FX_EVENT_DONE) return;
    x->done++;
    x->finish = ev->finish;
    x->status = ev->status;
    x->n_ids = ev->n_tokens <= MAX_IDS ? ev->n_tokens : 0;
    if (x->n_ids) memcpy(x->ids, ev->tokens, x->n_ids * sizeof *x->ids);
}

/* Pool threads of the sessions' batchers: 1, then 2 (whose create also
 * allocates the second thread's sampling scratch, and whose steps sample
 * the temperature rows on both threads). */
static uint32_t session_threads = 1;

/* Small batchers counting (or failing) their allocations through f:
 * steps of 16 tokens, blocks of 8. */
static fx_batcher_params small_params(fx_fault_alloc *f, uint32_t threads,
                                      uint32_t max_rows, uint32_t n_ctx) {
    fx_batcher_params p;
    fx_batcher_params_init(&p);
    p.n_threads = threads;
    p.max_rows = max_rows;
    p.max_step_tokens = 16;
    p.n_ctx = n_ctx;
    p.block_tokens = 8;
    p.allocator = fx_fault_allocator(f);
    return p;
}

/* A grammar rows can always continue under (the test model's tokens). */
static const char grammar[] =
    "root ::= (\"<t7>\" | \"<t9>\" | \"<t1\" [0-9] \">\")+\n";

/* Row i's request of a mixed batch: a prompt of 6 + 2 i tokens (prompt[]
 * holds them; salt makes another batch's), greedy for even i, sampled for
 * odd, stops[0] for row 3; EOS ignored. */
static void mixed_request(fx_request *r, int32_t prompt[16], int i, int salt,
                          const char **stops) {
    for (int k = 0; k < 16; k++) prompt[k] = 3 + (i * 7 + k * 5 + salt) % 60;
    fx_request_init(r);
    r->prompt_tokens = prompt;
    r->n_prompt_tokens = 6 + (size_t)i * 2;
    r->temperature = i % 2 ? 0.9f : 0;
    r->seed = (uint64_t)i;
    r->stop = stops;
    r->n_stop = (size_t)(i == 3);
    r->flags = FX_REQUEST_IGNORE_EOS;
}

/* One scripted session; returns the step/submit statuses it met folded
 * into a count of failures, and fills res[] with each row's outcome. */
static int session(fx_model *m, fx_fault_alloc *f, result res[ROWS]) {
    memset(res, 0, sizeof(result) * ROWS);
    fx_batcher_params p = small_params(f, session_threads, 2, 96);
    fx_batcher *b = NULL;
    char err[256];
    int failures = 0;
    if (fx_batcher_create(m, &p, &b, err, sizeof err) != FX_OK) {
        for (int i = 0; i < ROWS; i++) res[i].done = -1; /* never submitted */
        return 1;
    }
    fx_lease *lease = NULL;
    if (fx_lease_create(b, "shared words", 12, 0, &lease) != FX_OK) {
        failures++;
        res[2].differs = 1; /* row 2 then runs without the lease */
    }
    const char *stops[1] = {"<t4"};
    /* Row 4 is a text prompt (tokenized at submit) under a grammar
     * (compiled at submit); row 5 asks for logprobs (TOKEN events). */
    for (int i = 0; i < ROWS; i++) {
        int32_t prompt[16];
        fx_request r;
        mixed_request(&r, prompt, i, 0, stops);
        r.max_tokens = 10;
        r.lease = i == 2 ? lease : NULL;
        if (i == 4) {
            r.prompt = "hello <t5> world";
            r.prompt_len = strlen(r.prompt);
            r.grammar = grammar;
            r.grammar_len = strlen(grammar);
        }
        if (i == 5) r.n_logprobs = 2;
        r.user = &res[i];
        fx_row *row;
        if (fx_submit(b, &r, &row) != FX_OK) {
            failures++;
            res[i].done = -1; /* refused: no events will come */
        }
    }
    for (int guard = 0; guard < 400 && fx_batcher_pending(b) > 0; guard++) {
        if (fx_step(b) != FX_OK) failures++;
        fx_event ev;
        while (fx_poll(b, &ev)) on_event(&ev);
    }
    fx_event ev;
    while (fx_poll(b, &ev)) on_event(&ev);
    /* However it went, the accounting must hold and a free must clean up. */
    fx_error cerr;
    if (fx_batcher_impl_check(fx_batcher_get_impl(b), &cerr) != FX_OK)
        fail_msg("accounting broken at fail_at %ld: %s", f->fail_at, cerr.message);
    if (lease) fx_lease_release(b, lease);
    fx_batcher_free(b);
    return failures;
}

typedef struct sweep_ctx {
    fx_model *m;
    result ref[ROWS];
} sweep_ctx;

static void faulty_session(fx_fault_alloc *f, void *user) {
    sweep_ctx *c = user;
    result got[ROWS];
    session(c->m, f, got);
    for (int i = 0; i < ROWS; i++) {
        if (got[i].done == -1) continue;
        /* Every accepted row hears exactly once how it ended, however
         * short memory was (its DONE has a reserved place). */
        if (got[i].done != 1)
            fail_msg("fail_at %ld (%s): row %d got %d DONE events",
                     f->fail_at, f->fail_after ? "and later" : "alone", i,
                     got[i].done);
        if (got[i].finish == FX_FINISH_ERROR) {
            assert_int_equal(got[i].status, FX_ERR_NOMEM);
            continue;
        }
        /* A row that completed is untouched by the faults other rows
         * met. */
        if (got[i].differs) continue;
        if (got[i].finish != c->ref[i].finish || got[i].n_ids != c->ref[i].n_ids ||
            memcmp(got[i].ids, c->ref[i].ids, c->ref[i].n_ids * sizeof(int32_t)))
            fail_msg("fail_at %ld (%s): row %d differs from the fault-free run",
                     f->fail_at, f->fail_after ? "and later" : "alone", i);
    }
}

static void test_every_allocation_fails(void **state) {
    (void)state;
    sweep_ctx c;
    char err[256];
    assert_int_equal(fx_model_load(model_path, NULL, &c.m, err, sizeof err), FX_OK);
    for (session_threads = 1; session_threads <= 2; session_threads++) {
        fx_fault_alloc probe = {0};
        assert_int_equal(session(c.m, &probe, c.ref), 0);
        for (int i = 0; i < ROWS; i++) {
            assert_int_equal(c.ref[i].done, 1);
            assert_true(c.ref[i].finish != FX_FINISH_ERROR);
        }
        fx_fault_alloc f = {0};
        long total = fx_fault_sweep(&f, faulty_session, &c);
        assert_true(total > 10);
        /* The library works afterwards. */
        fx_fault_alloc clean = {0};
        result again[ROWS];
        assert_int_equal(session(c.m, &clean, again), 0);
        for (int i = 0; i < ROWS; i++) {
            assert_int_equal(again[i].n_ids, c.ref[i].n_ids);
            assert_memory_equal(again[i].ids, c.ref[i].ids,
                                c.ref[i].n_ids * sizeof(int32_t));
        }
    }
    session_threads = 1;
    fx_model_free(c.m);
}

/* The gap this file once missed: memory runs out for good while many rows
 * are queued and running. Before every live row had a reserved event slot
 * (and fx_poll stopped allocating), the DONE of such a row could not be
 * queued, its handle went stale, and the host never heard of it again; a
 * TEXT that fx_poll could not copy stalled every event behind it. Now
 * each row ends with exactly one DONE (FX_ERR_NOMEM where its text could
 * not be queued), nothing leaks, and once memory is back the batcher
 * runs new rows normally. */
static void test_done_survives_memory_running_out(void **state) {
    (void)state;
    fx_model *m = NULL;
    char err[256];
    assert_int_equal(fx_model_load(model_path, NULL, &m, err, sizeof err), FX_OK);
    enum { N = 40 };
    for (int when = 0; when < 3; when++) {
        fx_fault_alloc f = {0};
        fx_batcher_params p;
        fx_batcher_params_init(&p);
        p.max_rows = 3;
        p.max_step_tokens = 12;
        p.n_ctx = 64;
        p.block_tokens = 8;
        p.allocator = fx_fault_allocator(&f);
        fx_batcher *b = NULL;
        assert_int_equal(fx_batcher_create(m, &p, &b, err, sizeof err), FX_OK);
        static result res[N];
        memset(res, 0, sizeof res);
        const char *stops[1] = {"<t1"};
        for (int i = 0; i < N; i++) {
            int32_t prompt[8];
            for (int k = 0; k < 8; k++) prompt[k] = 3 + (i * 11 + k * 3) % 60;
            fx_request r;
            fx_request_init(&r);
            r.prompt_tokens = prompt;
            r.n_prompt_tokens = 2 + (size_t)i % 7;
            r.max_tokens = 4 + (uint32_t)i % 9;
            r.flags = FX_REQUEST_IGNORE_EOS;
            r.stop = stops;
            r.n_stop = (size_t)(i % 3 == 0);
            r.n_logprobs = (uint32_t)(i % 4 == 1);
            r.user = &res[i];
            fx_row *row;
            assert_int_equal(fx_submit(b, &r, &row), FX_OK);
        }
        /* Memory runs out before the first step, after a few steps with
         * events queued and not polled, or in the middle of the run. */
        int steps_before = when == 0 ? 0 : when == 1 ? 3 : 12;
        fx_event ev;
        for (int s = 0; s < steps_before; s++) {
            assert_int_equal(fx_step(b), FX_OK);
            if (when == 2)
                while (fx_poll(b, &ev)) on_event(&ev);
        }
        fx_fault_fail_next(&f, 1);
        for (int guard = 0; guard < 2000 && fx_batcher_pending(b) > 0; guard++) {
            fx_status st = fx_step(b);
            assert_true(st == FX_OK || st == FX_ERR_NOMEM);
            while (fx_poll(b, &ev)) on_event(&ev);
        }
        while (fx_poll(b, &ev)) on_event(&ev);
        assert_int_equal(fx_batcher_pending(b), 0);
        /* From the first step on, the text arena and hand-over buffers do
         * not exist yet: allocations did fail. (Later on they may all be
         * big enough already: a steady batcher allocates nothing.) */
        if (when == 0) assert_true(f.failed > 0);
        for (int i = 0; i < N; i++) {
            if (res[i].done != 1)
                fail_msg("failing from step %d on: row %d got %d DONE events",
                         steps_before, i, res[i].done);
            if (res[i].finish == FX_FINISH_ERROR)
                assert_int_equal(res[i].status, FX_ERR_NOMEM);
        }
        fx_error cerr;
        if (fx_batcher_impl_check(fx_batcher_get_impl(b), &cerr) != FX_OK)
            fail_msg("%s", cerr.message);
        /* Memory is back: a new row runs to its end. */
        fx_fault_stop(&f);
        result again = {0};
        int32_t prompt[4] = {5, 6, 7, 8};
        fx_request r;
        fx_request_init(&r);
        r.prompt_tokens = prompt;
        r.n_prompt_tokens = 4;
        r.max_tokens = 5;
        r.flags = FX_REQUEST_IGNORE_EOS;
        r.user = &again;
        fx_row *row;
        assert_int_equal(fx_submit(b, &r, &row), FX_OK);
        for (int guard = 0; guard < 100 && fx_batcher_pending(b) > 0; guard++) {
            assert_int_equal(fx_step(b), FX_OK);
            while (fx_poll(b, &ev)) on_event(&ev);
        }
        assert_int_equal(again.done, 1);
        assert_int_equal(again.finish, FX_FINISH_LENGTH);
        assert_int_equal(again.n_ids, 5);
        fx_batcher_free(b);
        assert_int_equal(f.live, 0);
    }
    fx_model_free(m);
}

/* docs/reliability.md 37 through the allocator hook: every allocation and free
 * the batcher makes calls back into it. Every guarded entry point answers
 * FX_ERR_REENTRANT (fx_poll: no event), fx_cancel -- allowed from anywhere
 * -- answers as usual, and nothing deadlocks: the batcher never calls the
 * allocator while holding the lock fx_cancel takes. (It once grew its slot
 * table and freed a finished row's memory under that lock; a cancel from
 * the hook then waited for itself forever. The alarm turns a hang into a
 * failure.) */
typedef struct hook_ctx {
    fx_batcher *b;
    fx_row *row;          /* a handle to cancel from inside the hook */
    int depth;
    long calls, reentrant, cancels;
} hook_ctx;

static void call_back(hook_ctx *h) {
    if (!h->b || h->depth) return;
    h->depth++;
    h->calls++;
    fx_event ev;
    fx_row *row = NULL;
    fx_request r;
    fx_request_init(&r);
    int32_t ids[2] = {5, 6};
    r.prompt_tokens = ids;
    r.n_prompt_tokens = 2;
    r.max_tokens = 2;
    h->reentrant += fx_step(h->b) == FX_ERR_REENTRANT;
    h->reentrant += fx_submit(h->b, &r, &row) == FX_ERR_REENTRANT;
    h->reentrant += fx_poll(h->b, &ev) == 0;
    h->reentrant += fx_row_release(h->b, h->row) == FX_ERR_REENTRANT;
    fx_lease *l = NULL;
    h->reentrant += fx_lease_create(h->b, "x", 1, 0, &l) == FX_ERR_REENTRANT;
    fx_status st = fx_cancel(h->b, h->row);
    if (st != FX_OK && st != FX_ERR_STALE_HANDLE)
        fail_msg("fx_cancel from the allocator: %s", fx_status_str(st));
    h->cancels++;
    h->depth--;
}

static void *hook_malloc(void *u, size_t n) {
    call_back(u);
    return malloc(n ? n : 1);
}

static void *hook_realloc(void *u, void *p, size_t n) {
    call_back(u);
    return realloc(p, n ? n : 1);
}

static void hook_free(void *u, void *p) {
    if (p) call_back(u);
    free(p);
}

static void test_reentry_from_allocator(void **state) {
    (void)state;
    fx_model *m = NULL;
    char err[256];
    assert_int_equal(fx_model_load(model_path, NULL, &m, err, sizeof err), FX_OK);
    hook_ctx h = {0};
    fx_batcher_params p;
    fx_batcher_params_init(&p);
    p.max_rows = 2;
    p.n_ctx = 64;
    p.allocator = (fx_allocator){hook_malloc, hook_realloc, hook_free, &h};
    fx_batcher *b = NULL;
    assert_int_equal(fx_batcher_create(m, &p, &b, err, sizeof err), FX_OK);
    h.b = b;
    alarm(60);
    /* Enough rows to grow the slot table (16 slots at first) and to
     * retire finished rows, with a stale, a live and a released handle in
     * turn for the hook to cancel. */
    enum { N = 40 };
    int done = 0;
    fx_row *rows[N];
    for (int i = 0; i < N; i++) {
        int32_t ids[4] = {3 + i % 50, 4, 5, 6};
        fx_request r;
        fx_request_init(&r);
        r.prompt_tokens = ids;
        r.n_prompt_tokens = 4;
        r.max_tokens = 3;
        r.flags = FX_REQUEST_IGNORE_EOS;
        assert_int_equal(fx_submit(b, &r, &rows[i]), FX_OK);
        h.row = rows[i / 2];
    }
    assert_int_equal(fx_row_release(b, rows[N - 1]), FX_OK);
    for (int guard = 0; guard < 1000 && fx_batcher_pending(b) > 0; guard++) {
        assert_int_equal(fx_step(b), FX_OK);
        fx_event ev;
        while (fx_poll(b, &ev)) done += ev.type == FX_EVENT_DONE;
        h.row = rows[guard % N];
    }
    alarm(0);
    assert_int_equal(done, N - 1);
    assert_true(h.calls > N);
    assert_int_equal(h.reentrant, 5 * h.calls);
    fx_error cerr;
    if (fx_batcher_impl_check(fx_batcher_get_impl(b), &cerr) != FX_OK)
        fail_msg("%s", cerr.message);
    h.b = NULL;
    fx_batcher_free(b);
    fx_model_free(m);
}

/* Issue #8: "no allocation inside step". Once a batch of a given shape
 * has run (the first steps grow the text arena and hand-over buffers to
 * size), later batches of that shape -- new prompts, so new prefix-cache
 * nodes and new tokens; greedy and sampled rows, a grammar, logprobs, a
 * stop string -- allocate nothing in fx_step or fx_poll, on one thread and
 * on two. (Measured when written: 4 and 2 allocations in the first round's
 * first and fourth steps, none after.) */
static void test_warm_steps_allocate_nothing(void **state) {
    (void)state;
    fx_model *m = NULL;
    char err[256];
    assert_int_equal(fx_model_load(model_path, NULL, &m, err, sizeof err), FX_OK);
    const char *stops[1] = {"<t4"};
    for (uint32_t threads = 1; threads <= 2; threads++) {
        fx_fault_alloc f = {0};
        fx_batcher_params p = small_params(&f, threads, 4, 128);
        fx_batcher *b = NULL;
        assert_int_equal(fx_batcher_create(m, &p, &b, err, sizeof err), FX_OK);
        for (int round = 0; round < 3; round++) {
            for (int i = 0; i < 4; i++) {
                int32_t prompt[16];
                fx_request r;
                mixed_request(&r, prompt, i, round * 13, stops);
                r.max_tokens = 20;
                r.top_p = 0.9f;
                if (i == 2) {
                    r.grammar = grammar;
                    r.grammar_len = strlen(grammar);
                }
                if (i == 1) r.n_logprobs = 2;
                fx_row *row;
                assert_int_equal(fx_submit(b, &r, &row), FX_OK);
            }
            long in_steps = 0;
            int steps = 0;
            for (; steps < 200 && fx_batcher_pending(b) > 0; steps++) {
                const long before = f.calls;
                assert_int_equal(fx_step(b), FX_OK);
                fx_event ev;
                while (fx_poll(b, &ev)) {}
                in_steps += f.calls - before;
            }
            assert_int_equal(fx_batcher_pending(b), 0);
            assert_true(steps > 10);
            if (round > 0 && in_steps != 0)
                fail_msg("%u thread(s), round %d: %ld allocations in %d "
                         "steps", threads, round, in_steps, steps);
        }
        fx_batcher_free(b);
        assert_int_equal(f.live, 0);
    }
    fx_model_free(m);
}

static int setup(void **state) {
    (void)state;
    gw_model_spec spec;
    gw_model_spec_default(&spec);
    snprintf(model_path, sizeof model_path, "%s", fx_test_tmp_path("faults.gguf"));
    return gw_write_model(model_path, &spec);
}

static int teardown(void **state) {
    (void)state;
    remove(model_path);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_allocation_fails),
        cmocka_unit_test(test_done_survives_memory_running_out),
        cmocka_unit_test(test_reentry_from_allocator),
        cmocka_unit_test(test_warm_steps_allocate_nothing),
    };
    return cmocka_run_group_tests_name("batcher_faults", tests, setup, teardown);
}
