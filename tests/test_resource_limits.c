/*
 * Every size a caller controls, at its documented limit and one past it,
 * through the public API only (issue 36): kv_bytes, max_rows, n_ctx,
 * max_step_tokens, block_tokens, n_threads, prompt length, max_tokens,
 * stop strings (count and length), stop tokens, n_logprobs, grammar size,
 * logit-bias count, and rows queued until memory runs out.
 *
 * Each case runs in a forked child under a memory cap and an alarm
 * (support/mem_cap.h), so that a missed check fails the test --
 * FX_ERR_NOMEM expected, a crash, a signal or a timeout seen -- instead
 * of exhausting the machine. Sizes whose handling once broke the contract
 * have their regression tests in test_api_findings.c.
 */
#define _DEFAULT_SOURCE
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include <ferrox.h>

#include "byte_model.h"
#include "mem_cap.h"
#include "test_util.h"

static char model_path[4096];
static fx_model *model;
static uint32_t n_vocab;

/* ---- helpers ---- */

static fx_status create(fx_batcher_params *p, fx_batcher **b) {
    char err[256];
    *b = NULL;
    fx_status st = fx_batcher_create(model, p, b, err, sizeof err);
    CHECK((st == FX_OK) == (*b != NULL), "create: %s with a handle %p", fx_status_str(st),
          (void *)*b);
    return st;
}

static fx_batcher *create_ok(fx_batcher_params *p) {
    fx_batcher *b;
    char err[256];
    fx_status st = fx_batcher_create(model, p, &b, err, sizeof err);
    CHECK(st == FX_OK, "create: %s (%s)", fx_status_str(st), err);
    return b;
}

static void params(fx_batcher_params *p) {
    fx_batcher_params_init(p);
    p->max_rows = 2;
    p->n_ctx = 64;
    p->max_step_tokens = 64;
}

static void prompt_ids(int32_t *ids, size_t n) {
    for (size_t i = 0; i < n; i++) ids[i] = FX_BM_BYTE0 + 'a' + (int32_t)(i % 20);
}

typedef struct result {
    int done;
    fx_finish_reason finish;
    fx_status status;
    size_t n_tokens, text_len, token_events;
} result;

/* Steps until idle; the DONE of every row whose user points at a result
 * fills it. With `only`, the events of other rows are not looked at. */
static void run_only(fx_batcher *b, const result *only) {
    for (int i = 0; fx_batcher_pending(b) > 0; i++) {
        CHECK(i < 100000, "still running after 100000 steps");
        CHECK_ST(fx_step(b), FX_OK);
        fx_event ev;
        while (fx_poll(b, &ev)) {
            if (only && ev.user != only) continue;
            result *r = ev.user;
            CHECK(r && !r->done, "an event after DONE or for no row");
            if (ev.type == FX_EVENT_TEXT) r->text_len += ev.text_len;
            if (ev.type == FX_EVENT_TOKEN) {
                CHECK(ev.n_top == FX_MAX_LOGPROBS, "%zu alternatives", ev.n_top);
                r->token_events++;
            }
            if (ev.type == FX_EVENT_DONE) {
                r->done = 1;
                r->finish = ev.finish;
                r->status = ev.status;
                r->n_tokens = ev.n_tokens;
            }
        }
    }
}

static void run(fx_batcher *b) { run_only(b, NULL); }

static fx_status submit_ids(fx_batcher *b, size_t n, uint32_t max_tokens, result *r,
                            fx_row **row) {
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    CHECK(ids, "out of memory in the test");
    prompt_ids(ids, n);
    fx_request q;
    fx_request_init(&q);
    q.prompt_tokens = ids;
    q.n_prompt_tokens = n;
    q.max_tokens = max_tokens;
    q.flags = FX_REQUEST_IGNORE_EOS;
    q.user = r;
    fx_row *tmp;
    fx_status st = fx_submit(b, &q, row ? row : &tmp);
    free(ids);
    return st;
}

/* ---- batcher parameters ---- */

/* The smallest kv_bytes a batcher takes, by bisection: one block. */
static uint64_t one_block_bytes(uint32_t block_tokens) {
    fx_batcher_params p;
    fx_batcher *b;
    uint64_t lo = 1, hi = 1 << 20;
    params(&p);
    p.block_tokens = block_tokens;
    p.kv_bytes = lo;
    CHECK_ST(create(&p, &b), FX_ERR_INVALID_ARG);
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        p.kv_bytes = mid;
        fx_status st = create(&p, &b);
        CHECK(st == FX_OK || st == FX_ERR_INVALID_ARG, "kv_bytes %llu: %s",
              (unsigned long long)mid, fx_status_str(st));
        fx_batcher_free(b);
        if (st == FX_OK) hi = mid;
        else lo = mid;
    }
    return hi;
}

static void kv_bytes_case(void) {
    fx_batcher_params p;
    fx_batcher *b;
    params(&p);
    p.block_tokens = 16;
    uint64_t hi = one_block_bytes(16);
    p.kv_bytes = hi;
    b = create_ok(&p);
    result r = {0};
    CHECK_ST(submit_ids(b, 10, 6, &r, NULL), FX_OK);       /* 16 positions */
    CHECK_ST(submit_ids(b, 10, 7, &r, NULL), FX_ERR_NO_ROOM); /* 17 */
    run(b);
    CHECK(r.done && r.finish == FX_FINISH_LENGTH && r.n_tokens == 6, "one block's row");
    fx_batcher_free(b);

    /* The documented maximum is accepted -- or refused for lack of memory,
     * at once -- and one byte more is not. */
    params(&p);
    p.kv_bytes = FX_BATCHER_MAX_KV_BYTES;
    fx_status st = create(&p, &b);
    CHECK(st == FX_OK || st == FX_ERR_NOMEM, "kv_bytes at the maximum: %s", fx_status_str(st));
    fx_batcher_free(b);
    p.kv_bytes = FX_BATCHER_MAX_KV_BYTES + 1;
    CHECK_ST(create(&p, &b), FX_ERR_INVALID_ARG);
    p.kv_bytes = UINT64_MAX;
    CHECK_ST(create(&p, &b), FX_ERR_INVALID_ARG);
    /* More than the cap allows, well inside the maximum. */
    p.kv_bytes = (uint64_t)2 << 30;
    CHECK_ST(create(&p, &b), FX_ERR_NOMEM);
}

static void max_rows_case(void) {
    fx_batcher_params p;
    fx_batcher *b;
    params(&p);
    p.max_rows = 4096;
    p.n_ctx = 16;
    p.kv_bytes = 1 << 20;
    b = create_ok(&p);
    /* 4096 rows at once need 4096 blocks; the budget takes fewer, the
     * rest wait: everything finishes all the same. */
    static result r[300];
    for (int i = 0; i < 300; i++) CHECK_ST(submit_ids(b, 2, 2, &r[i], NULL), FX_OK);
    run(b);
    for (int i = 0; i < 300; i++) CHECK(r[i].done && r[i].n_tokens == 2, "row %d", i);
    fx_batcher_free(b);
    p.max_rows = 4097;
    CHECK_ST(create(&p, &b), FX_ERR_INVALID_ARG);
}

static void n_ctx_case(void) {
    fx_batcher_params p;
    fx_batcher *b;
    params(&p);
    p.n_ctx = 1u << 20;   /* rows.c's limit; ferrox.h names none */
    p.kv_bytes = 1 << 20;
    b = create_ok(&p);
    result r = {0};
    CHECK_ST(submit_ids(b, 1, (1u << 20) - 1, &r, NULL), FX_ERR_NO_ROOM); /* the cache */
    CHECK_ST(submit_ids(b, 1, 1u << 20, &r, NULL), FX_ERR_NO_ROOM);
    CHECK_ST(submit_ids(b, 5, 3, &r, NULL), FX_OK);
    run(b);
    CHECK(r.done && r.n_tokens == 3, "a row under a 2^20 context");
    fx_batcher_free(b);
    p.n_ctx = (1u << 20) + 1;
    CHECK_ST(create(&p, &b), FX_ERR_INVALID_ARG);
    p.n_ctx = UINT32_MAX;
    CHECK_ST(create(&p, &b), FX_ERR_INVALID_ARG);
}

/* A uint32_t parameter at its limit: the batcher runs a row of n prompt
 * ids to max_tokens (or, when nomem_ok, is refused for memory); one past
 * the limit is refused. */
typedef struct limit_case {
    const char *what;
    size_t field; /* offsetof(fx_batcher_params, the parameter) */
    uint32_t limit, n_ctx;
    int nomem_ok;
    size_t n;
    uint32_t max_tokens;
} limit_case;

static const limit_case limits[] = {
    /* The whole 2000-token prompt in one step. */
    {"max_step_tokens 65536", offsetof(fx_batcher_params, max_step_tokens), 65536, 2048, 1,
     2000, 2},
    {"one 4096-position block", offsetof(fx_batcher_params, block_tokens), 4096, 4096, 0,
     4000, 5},
    /* 256 threads: started, or refused cleanly when the cap leaves no
     * room for their stacks. */
    {"n_threads 256", offsetof(fx_batcher_params, n_threads), 256, 64, 1, 20, 3},
};

static void at_limit(const limit_case *c) {
    fx_batcher_params p;
    fx_batcher *b;
    params(&p);
    p.n_ctx = c->n_ctx;
    uint32_t *field = (uint32_t *)(void *)((char *)&p + c->field);
    *field = c->limit;
    fx_status st = create(&p, &b);
    CHECK(st == FX_OK || (c->nomem_ok && st == FX_ERR_NOMEM), "%s: %s", c->what,
          fx_status_str(st));
    if (st == FX_OK) {
        result r = {0};
        CHECK_ST(submit_ids(b, c->n, c->max_tokens, &r, NULL), FX_OK);
        run(b);
        CHECK(r.done && r.n_tokens == c->max_tokens, "a row under %s", c->what);
        fx_batcher_free(b);
    }
    *field = c->limit + 1;
    CHECK_ST(create(&p, &b), FX_ERR_INVALID_ARG);
}

static void step_tokens_case(void) { at_limit(&limits[0]); }
static void block_case(void) { at_limit(&limits[1]); }
static void threads_case(void) { at_limit(&limits[2]); }

/* ---- request sizes ---- */

static fx_batcher *small_batcher(void) {
    fx_batcher_params p;
    params(&p);
    return create_ok(&p);
}

static void prompt_case(void) {
    fx_batcher *b = small_batcher();
    result r[2] = {{0}};
    CHECK_ST(submit_ids(b, 60, 4, &r[0], NULL), FX_OK);         /* n_ctx exactly */
    CHECK_ST(submit_ids(b, 61, 4, NULL, NULL), FX_ERR_NO_ROOM);
    CHECK_ST(submit_ids(b, 1, 63, &r[1], NULL), FX_OK);
    CHECK_ST(submit_ids(b, 1, 64, NULL, NULL), FX_ERR_NO_ROOM);
    fx_status st = submit_ids(b, 1, 65, NULL, NULL);
    CHECK(st == FX_ERR_NO_ROOM || st == FX_ERR_INVALID_ARG, "max_tokens past n_ctx: %s",
          fx_status_str(st));
    run(b);
    CHECK(r[0].done && r[0].finish == FX_FINISH_LENGTH && r[0].n_tokens == 4 &&
          r[1].done && r[1].finish == FX_FINISH_LENGTH && r[1].n_tokens == 63,
          "rows that fill the context");
    fx_batcher_free(b);
}

/* prompt_len 2^31: read-only zero pages (untouched, they cost no memory);
 * past the tokenizer's own limit of 2^31 - 1 bytes. */
static void prompt_2g_case(void) {
    fx_batcher *b = small_batcher();
    fx_request q;
    fx_request_init(&q);
    q.max_tokens = 1;
    fx_row *row;
    size_t big = (size_t)1 << 31;
    void *zeros = mmap(NULL, big, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                       -1, 0);
    if (zeros != MAP_FAILED) {
        q.prompt = zeros;
        q.prompt_len = big;
        fx_status st = fx_submit(b, &q, &row);
        CHECK(st == FX_ERR_NO_ROOM || st == FX_ERR_INVALID_ARG,
              "a 2 GiB prompt: %s (%s)", fx_status_str(st), fx_batcher_errmsg(b));
        munmap(zeros, big);
    }
    fx_batcher_free(b);
}

static void stop_case(void) {
    fx_batcher *b = small_batcher();
    int32_t ids[4];
    prompt_ids(ids, 4);
    fx_request q;
    fx_request_init(&q);
    q.prompt_tokens = ids;
    q.n_prompt_tokens = 4;
    q.max_tokens = 8;
    fx_row *row;
    /* Many stop strings, and a long one: no limit is documented, so both
     * are accepted (or refused for memory), never a crash. */
    size_t n = (size_t)1 << 20;
    const char **stops = malloc(n * sizeof *stops);
    CHECK(stops, "out of memory in the test");
    for (size_t i = 0; i < n; i++) stops[i] = i % 2 ? "\xe6\x97\xa5zz" : "qq";
    q.stop = stops;
    q.n_stop = n;
    fx_status st = fx_submit(b, &q, &row);
    CHECK(st == FX_OK || st == FX_ERR_NOMEM, "2^20 stop strings: %s", fx_status_str(st));
    size_t long_len = (size_t)8 << 20;
    char *long_stop = malloc(long_len + 1);
    CHECK(long_stop, "out of memory in the test");
    memset(long_stop, 'a', long_len);
    long_stop[long_len] = '\0';
    stops[0] = long_stop;
    q.n_stop = 1;
    st = fx_submit(b, &q, &row);
    CHECK(st == FX_OK || st == FX_ERR_NOMEM, "an 8 MiB stop string: %s", fx_status_str(st));
    q.stop = NULL;
    q.n_stop = 0;
    /* Stop tokens and logit biases: the vocabulary's size, then one more. */
    int32_t *toks = malloc((n_vocab + 1) * sizeof *toks);
    fx_logit_bias *bias = malloc((n_vocab + 1) * sizeof *bias);
    CHECK(toks && bias, "out of memory in the test");
    for (uint32_t i = 0; i <= n_vocab; i++) {
        toks[i] = (int32_t)(i % n_vocab);
        bias[i] = (fx_logit_bias){(int32_t)(i % n_vocab), -1.0f};
    }
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        q.stop_tokens = with_bias ? NULL : toks;
        q.logit_bias = with_bias ? bias : NULL;
        size_t *count = with_bias ? &q.n_logit_bias : &q.n_stop_tokens;
        *count = n_vocab;
        CHECK_ST(fx_submit(b, &q, &row), FX_OK);
        *count = n_vocab + 1;
        CHECK_ST(fx_submit(b, &q, &row), FX_ERR_INVALID_ARG);
        *count = 0;
    }
    q.logit_bias = NULL;
    /* n_logprobs: the maximum arrives in every TOKEN event. */
    result r = {0};
    q.n_logprobs = FX_MAX_LOGPROBS;
    q.user = &r;
    q.flags = FX_REQUEST_IGNORE_EOS;
    CHECK_ST(fx_submit(b, &q, &row), FX_OK);
    q.n_logprobs = FX_MAX_LOGPROBS + 1;
    CHECK_ST(fx_submit(b, &q, &row), FX_ERR_INVALID_ARG);
    /* The rows accepted above run; only the last one is checked. */
    run_only(b, &r);
    CHECK(r.done && r.n_tokens == 8 && r.token_events == 8, "logprobs row: %zu events",
          r.token_events);
    free(toks);
    free(bias);
    free(long_stop);
    free(stops);
    fx_batcher_free(b);
}

static fx_status submit_grammar(fx_batcher *b, const int32_t ids[2], const char *g,
                                size_t len, result *r) {
    fx_request q;
    fx_request_init(&q);
    q.prompt_tokens = ids;
    q.n_prompt_tokens = 2;
    q.max_tokens = 3;
    q.grammar = g;
    q.grammar_len = len;
    q.user = r;
    fx_row *row;
    return fx_submit(b, &q, &row);
}

static void grammar_size_case(void) {
    fx_batcher *b = small_batcher();
    result r = {0};
    int32_t ids[2];
    prompt_ids(ids, 2);
    for (size_t extra = 0; extra < 2; extra++) {
        size_t len = ((size_t)1 << 20) + extra;   /* FX_GRAMMAR_MAX_TEXT */
        char *g = malloc(len);
        CHECK(g, "out of memory in the test");
        const char *rule = "root ::= [a-z]+ # ";
        memcpy(g, rule, strlen(rule));
        memset(g + strlen(rule), '-', len - strlen(rule) - 1);
        g[len - 1] = '\n';
        CHECK_ST(submit_grammar(b, ids, g, len, &r), extra ? FX_ERR_GRAMMAR : FX_OK);
        free(g);
    }
    /* A grammar of 64 MiB: refused before it is read. */
    size_t huge = (size_t)64 << 20;
    char *g = malloc(huge);
    CHECK(g, "out of memory in the test");
    memset(g, ' ', huge);
    CHECK_ST(submit_grammar(b, ids, g, huge, NULL), FX_ERR_GRAMMAR);
    free(g);
    run(b);
    CHECK(r.done && r.finish != FX_FINISH_ERROR && r.text_len > 0, "the 1 MiB grammar's row");
    fx_batcher_free(b);
}

/* Rows queued until memory runs out (each holds a context's worth of
 * ids): a status, then the batcher still serves. */
static void queue_until_full_case(void) {
    fx_batcher_params p;
    params(&p);
    p.n_ctx = 1u << 16;
    p.kv_bytes = 1 << 22;
    fx_batcher *b = create_ok(&p);
    size_t cap = 1 << 16, n = 0;
    fx_row **rows = malloc(cap * sizeof *rows);
    CHECK(rows, "out of memory in the test");
    fx_status st = FX_OK;
    while (n < cap) {
        st = submit_ids(b, 4, 200, NULL, &rows[n]);
        if (st != FX_OK) break;
        n++;
    }
    CHECK(st == FX_ERR_NOMEM || st == FX_ERR_NO_ROOM, "after %zu rows: %s", n,
          fx_status_str(st));
    CHECK(n > 10, "only %zu rows queued", n);
    for (size_t i = 0; i < n; i++) CHECK_ST(fx_row_release(b, rows[i]), FX_OK);
    free(rows);
    /* Released queued rows leave at the next step, and free their memory
     * there; no event comes for them. */
    CHECK_ST(fx_step(b), FX_OK);
    fx_event ev;
    CHECK(fx_poll(b, &ev) == 0, "an event for a released row");
    CHECK(fx_batcher_pending(b) == 0, "%u rows pending after the release",
          fx_batcher_pending(b));
    result r = {0};
    CHECK_ST(submit_ids(b, 4, 3, &r, NULL), FX_OK);
    run(b);
    CHECK(r.done && r.n_tokens == 3, "a row after memory ran out");
    fx_batcher_free(b);
}

/* A lease may be n_ctx - 1 tokens long, not n_ctx (the cache being
 * large enough for either); rows continuing the longest one still get a
 * token. */
static void lease_len_case(void) {
    fx_batcher_params p;
    params(&p);
    fx_batcher *b = create_ok(&p);
    char text[128];
    memset(text, '\x80', sizeof text);
    fx_lease *longest = NULL;
    for (size_t want = p.n_ctx - 1; want <= p.n_ctx; want++) {
        size_t len = 0, n = 0;
        while (n != want) {
            CHECK(++len < sizeof text, "no text of %zu tokens", want);
            fx_status st = fx_tokenize(model, text, len, 0, NULL, 0, &n);
            CHECK(st == FX_OK || st == FX_ERR_BUFFER_TOO_SMALL, "tokenize");
        }
        fx_lease *l = NULL;
        fx_status st = fx_lease_create(b, text, len, FX_REQUEST_NO_BOS, &l);
        CHECK(st == (want < p.n_ctx ? FX_OK : FX_ERR_NO_ROOM), "a lease of %zu tokens, n_ctx "
              "%u: %s", want, p.n_ctx, fx_status_str(st));
        if (st == FX_OK) longest = l;
    }
    result r = {0};
    fx_request q;
    fx_request_init(&q);
    static const int32_t one[] = {FX_BM_BYTE0 + 'z'};
    q.prompt_tokens = one;
    q.n_prompt_tokens = 1;
    q.max_tokens = 1;
    q.lease = longest;
    q.user = &r;
    fx_row *row;
    CHECK_ST(fx_submit(b, &q, &row), FX_ERR_NO_ROOM);   /* n_ctx + 1 positions */
    q.prompt_tokens = NULL;
    q.prompt = "";
    q.prompt_len = 0;
    fx_status st = fx_submit(b, &q, &row);
    CHECK(st == FX_OK, "the longest lease and an empty continuation: %s (%s)",
          fx_status_str(st), fx_batcher_errmsg(b));
    run(b);
    CHECK(r.done && r.n_tokens == 1, "a row continuing the longest lease");
    fx_batcher_free(b);
}

#define CASE(name, seconds) \
    static void test_##name(void **state) {                                  \
        (void)state;                                                         \
        fx_test_capped(#name, name##_case, seconds);                         \
    }
CASE(kv_bytes, 30)
CASE(max_rows, 30)
CASE(n_ctx, 30)
CASE(step_tokens, 30)
CASE(block, 30)

/* Under ASan a thread that pthread_create started maps ASan's own state,
 * and a refused mapping there aborts the process (ASan's, not ferrox's
 * doing): there the threads run without the cap. */
static void test_threads(void **state) {
    (void)state;
#ifdef FX_TEST_ASAN
    fx_test_child("threads", threads_case, 30, 0);
#else
    fx_test_capped("threads", threads_case, 30);
#endif
}
CASE(prompt, 30)
CASE(prompt_2g, 30)
CASE(stop, 30)
CASE(grammar_size, 30)
CASE(queue_until_full, 30)
CASE(lease_len, 30)

static int setup(void **state) {
    (void)state;
    snprintf(model_path, sizeof model_path, "%s", fx_test_tmp_path("limits.gguf"));
    if (fx_test_load_byte_model(model_path, 4096, 5, &model) != 0) return -1;
    n_vocab = fx_model_vocab_size(model);
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
        cmocka_unit_test(test_kv_bytes),     cmocka_unit_test(test_max_rows),
        cmocka_unit_test(test_n_ctx),        cmocka_unit_test(test_step_tokens),
        cmocka_unit_test(test_block),        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_prompt),       cmocka_unit_test(test_prompt_2g),
        cmocka_unit_test(test_stop),         cmocka_unit_test(test_grammar_size),
        cmocka_unit_test(test_queue_until_full),
        cmocka_unit_test(test_lease_len),
    };
    return cmocka_run_group_tests_name("resource_limits", tests, setup, teardown);
}
