/*
 * Issue 36's broken promises, each with the test that found it:
 *
 * - a long chain grammar (`rK ::= rK+1 "a"?`) deeper than the row's frame
 *   array is refused with FX_ERR_GRAMMAR at fx_submit and by the grammar
 *   API, without writing past the array (run under ASan);
 * - kv_bytes past FX_BATCHER_MAX_KV_BYTES is FX_ERR_INVALID_ARG, and one
 *   the machine cannot hold FX_ERR_NOMEM at the first allocation that
 *   fails, nothing allocated after it: in a child capped by RLIMIT_AS, so
 *   a missed check fails the test rather than the machine;
 */
/* fork, setrlimit, clock_gettime */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include <ferrox.h>

#include "gguf_writer.h"
#include "sample/grammar.h"
#include "test_util.h"

static char model_path[4096];

/* A capped child's huge requests must come back NULL, not abort: ASan's
 * allocator only returns NULL when told so. */
#if defined(__SANITIZE_ADDRESS__)
#define FX_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FX_TEST_ASAN 1
#endif
#endif
#ifdef FX_TEST_ASAN
const char *__asan_default_options(void);
const char *__asan_default_options(void) {
    return "allocator_may_return_null=1";
}
#endif

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

/* ---- 2. kv_bytes past what the machine holds ---- */

/* Counts the calls and what happened after the first one the system
 * refused. */
typedef struct watch_alloc {
    long calls, live;
    long refused;       /* calls that returned NULL */
    long after_refusal; /* calls made after the first NULL */
} watch_alloc;

static void *wa_malloc(void *user, size_t size) {
    watch_alloc *w = user;
    w->calls++;
    if (w->refused) w->after_refusal++;
    void *p = malloc(size ? size : 1);
    if (p) w->live++;
    else w->refused++;
    return p;
}

static void *wa_realloc(void *user, void *ptr, size_t size) {
    watch_alloc *w = user;
    w->calls++;
    if (w->refused) w->after_refusal++;
    void *p = realloc(ptr, size ? size : 1);
    if (p && !ptr) w->live++;
    if (!p) w->refused++;
    return p;
}

static void wa_free(void *user, void *ptr) {
    watch_alloc *w = user;
    if (ptr) w->live--;
    free(ptr);
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The address space this process maps now, from /proc/self/statm. */
static uint64_t mapped_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    unsigned long long pages = 0;
    int ok = fscanf(f, "%llu", &pages) == 1;
    fclose(f);
    return ok ? pages * (uint64_t)sysconf(_SC_PAGESIZE) : 0;
}

/* In the capped child: 0, or the line of the first check that failed. */
#define CHILD_CHECK(c)                                                       \
    do {                                                                     \
        if (!(c)) return __LINE__;                                           \
    } while (0)

static int kv_cases(fx_model *m) {
    static const struct {
        uint64_t kv_bytes;
        fx_status want;
    } cases[] = {
        {UINT64_MAX, FX_ERR_INVALID_ARG},
        {FX_BATCHER_MAX_KV_BYTES + 1, FX_ERR_INVALID_ARG},
        {FX_BATCHER_MAX_KV_BYTES, FX_ERR_NOMEM},
        {(uint64_t)64 << 30, FX_ERR_NOMEM},
        {(uint64_t)8 << 30, FX_ERR_NOMEM},
        {(uint64_t)1 << 20, FX_OK}, /* the cap leaves room for a real one */
    };
    double t0 = now_seconds();
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        for (int hooks = 0; hooks < 2; hooks++) {
            watch_alloc w = {0};
            fx_batcher_params p;
            fx_batcher_params_init(&p);
            p.max_rows = 2;
            p.n_ctx = 64;
            p.max_step_tokens = 16;
            p.kv_bytes = cases[i].kv_bytes;
            if (hooks)
                p.allocator = (fx_allocator){wa_malloc, wa_realloc, wa_free, &w};
            fx_batcher *b = NULL;
            fx_status st = fx_batcher_create(m, &p, &b, NULL, 0);
            CHILD_CHECK(st == cases[i].want);
            CHILD_CHECK((st == FX_OK) == (b != NULL));
            fx_batcher_free(b);
            /* Failing fast: nothing is allocated once memory ran out. */
            CHILD_CHECK(w.after_refusal == 0);
            CHILD_CHECK(w.live == 0);
            if (hooks && cases[i].want == FX_ERR_NOMEM) CHILD_CHECK(w.refused == 1);
        }
    CHILD_CHECK(now_seconds() - t0 < 1.0);
    return 0;
}

static void test_kv_bytes_capped(void **state) {
    (void)state;
    fx_model *m = load_model();
    uint64_t mapped = mapped_bytes();
    if (mapped == 0) skip(); /* no /proc */
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* 2 GiB above what is mapped now: far below every NOMEM case. */
        struct rlimit rl = {mapped + ((uint64_t)2 << 30),
                            mapped + ((uint64_t)2 << 30)};
        if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(2);
        alarm(20); /* a missed check must not hang the suite either */
        int line = kv_cases(m);
        if (line) fprintf(stderr, "kv_cases: the check at line %d failed\n", line);
        _exit(line ? 1 : 0);
    }
    int wst = 0;
    assert_int_equal(waitpid(pid, &wst, 0), pid);
    if (!WIFEXITED(wst))
        fail_msg("the capped child died (signal %d)",
                 WIFSIGNALED(wst) ? WTERMSIG(wst) : 0);
    if (WEXITSTATUS(wst) != 0)
        fail_msg("the capped child failed (exit %d, its line on stderr)",
                 WEXITSTATUS(wst));
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
        cmocka_unit_test(test_kv_bytes_capped),
    };
    return cmocka_run_group_tests_name("reliability_fixes", tests, setup,
                                       teardown);
}
