/*
 * RELIABILITY 43 for the batcher: fail the Nth allocation of a whole
 * session -- create, submit, lease, steps, polls, free -- for every N,
 * once alone and once with every later allocation failing too. Each time:
 * only statuses (no crash), nothing leaked, every row that still completes
 * says exactly what it says without faults, and the library works
 * afterwards.
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
#include "batcher/batcher.h"
#include "gguf_writer.h"
#include "test_util.h"

typedef struct faults {
    long calls, fail_at, live;
    int fail_after;
} faults;

static int should_fail(faults *f) {
    f->calls++;
    return f->fail_at &&
           (f->calls == f->fail_at || (f->fail_after && f->calls > f->fail_at));
}

static void *f_malloc(void *u, size_t n) {
    faults *f = u;
    if (should_fail(f)) return NULL;
    void *p = malloc(n);
    if (p) f->live++;
    return p;
}

static void *f_realloc(void *u, void *p, size_t n) {
    faults *f = u;
    if (should_fail(f)) return NULL;
    void *q = realloc(p, n);
    if (q && !p) f->live++;
    return q;
}

static void f_free(void *u, void *p) {
    faults *f = u;
    if (p) f->live--;
    free(p);
}

enum { ROWS = 4, MAX_IDS = 64 };

typedef struct result {
    int32_t ids[MAX_IDS];
    size_t n_ids;
    int done;
    int differs;  /* its request differs from the reference run's */
    fx_finish_reason finish;
    fx_status status;
} result;

static char model_path[4096];

/* One scripted session; returns the step/submit statuses it met folded
 * into a count of failures, and fills res[] with each row's outcome. */
static int session(fx_model *m, faults *f, result res[ROWS]) {
    memset(res, 0, sizeof(result) * ROWS);
    fx_batcher_params p;
    fx_batcher_params_init(&p);
    p.max_rows = 2;
    p.max_step_tokens = 16;
    p.n_ctx = 96;
    p.block_tokens = 8;
    p.allocator = (fx_allocator){f_malloc, f_realloc, f_free, f};
    fx_batcher *b = NULL;
    char err[256];
    int failures = 0;
    if (fx_batcher_create(m, &p, &b, err, sizeof err) != FX_OK) return 1;
    fx_lease *lease = NULL;
    if (fx_lease_create(b, "shared words", 12, 0, &lease) != FX_OK) {
        failures++;
        res[2].differs = 1; /* row 2 then runs without the lease */
    }
    const char *stops[1] = {"<t4"};
    for (int i = 0; i < ROWS; i++) {
        int32_t prompt[12];
        for (int k = 0; k < 12; k++) prompt[k] = 3 + (i * 7 + k * 5) % 60;
        fx_request r;
        fx_request_init(&r);
        r.prompt_tokens = prompt;
        r.n_prompt_tokens = 6 + (size_t)i * 2;
        r.max_tokens = 10;
        r.temperature = i % 2 ? 0.9f : 0;
        r.seed = (uint64_t)i;
        r.stop = stops;
        r.n_stop = (size_t)(i == 3);
        r.lease = i == 2 ? lease : NULL;
        r.flags = FX_REQUEST_IGNORE_EOS;
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
        while (fx_poll(b, &ev)) {
            result *x = ev.user;
            if (ev.type != FX_EVENT_DONE) continue;
            x->done++;
            x->finish = ev.finish;
            x->status = ev.status;
            x->n_ids = ev.n_tokens <= MAX_IDS ? ev.n_tokens : 0;
            if (x->n_ids) memcpy(x->ids, ev.tokens, x->n_ids * sizeof *x->ids);
        }
    }
    /* However it went, the accounting must hold and a free must clean up. */
    fx_error cerr;
    if (fx_batcher_impl_check(fx_batcher_get_impl(b), &cerr) != FX_OK)
        fail_msg("accounting broken at fail_at %ld: %s", f->fail_at, cerr.message);
    if (lease) fx_lease_release(b, lease);
    fx_batcher_free(b);
    return failures;
}

static void test_every_allocation_fails(void **state) {
    (void)state;
    fx_model *m = NULL;
    char err[256];
    assert_int_equal(fx_model_load(model_path, NULL, &m, err, sizeof err), FX_OK);
    faults probe = {0, 0, 0, 0};
    result ref[ROWS];
    assert_int_equal(session(m, &probe, ref), 0);
    assert_int_equal(probe.live, 0);
    long total = probe.calls;
    assert_true(total > 10);
    for (int i = 0; i < ROWS; i++) assert_int_equal(ref[i].done, 1);

    for (int after = 0; after < 2; after++) {
        for (long n = 1; n <= total; n++) {
            faults f = {0, n, 0, after};
            result got[ROWS];
            session(m, &f, got);
            if (f.live != 0)
                fail_msg("fail_at %ld (after %d): %ld allocations leaked", n,
                         after, f.live);
            for (int i = 0; i < ROWS; i++) {
                /* Exactly one DONE for every accepted row... */
                if (got[i].done == -1 || got[i].differs) continue;
                if (got[i].done > 1) fail_msg("row %d: %d DONE events", i, got[i].done);
                /* ...and a row that completed is untouched by the faults
                 * other rows met. */
                if (got[i].done == 1 && got[i].finish != FX_FINISH_ERROR &&
                    got[i].finish != FX_FINISH_CANCELLED) {
                    if (got[i].n_ids != ref[i].n_ids ||
                        memcmp(got[i].ids, ref[i].ids, ref[i].n_ids * sizeof(int32_t)))
                        fail_msg("fail_at %ld: row %d differs from the fault-free run",
                                 n, i);
                }
                if (got[i].finish == FX_FINISH_ERROR)
                    assert_int_equal(got[i].status, FX_ERR_NOMEM);
            }
        }
    }
    /* The library works afterwards. */
    faults clean = {0, 0, 0, 0};
    result again[ROWS];
    assert_int_equal(session(m, &clean, again), 0);
    for (int i = 0; i < ROWS; i++) {
        assert_int_equal(again[i].n_ids, ref[i].n_ids);
        assert_memory_equal(again[i].ids, ref[i].ids, ref[i].n_ids * sizeof(int32_t));
    }
    fx_model_free(m);
}

static int setup(void **state) {
    (void)state;
    gw_model_spec spec;
    gw_model_spec_default(&spec);
    gw_buf buf = {0};
    gw_build_model(&buf, &spec);
    snprintf(model_path, sizeof model_path, "%s", fx_test_tmp_path("faults.gguf"));
    int rc = gw_write_file(&buf, model_path);
    gw_free(&buf);
    return rc;
}

static int teardown(void **state) {
    (void)state;
    remove(model_path);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_allocation_fails),
    };
    return cmocka_run_group_tests_name("batcher_faults", tests, setup, teardown);
}
