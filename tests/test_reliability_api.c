/*
 * Issue 36 through the public API alone (built against the shared and the
 * static library):
 *
 * - a row or lease handle of batcher A given to batcher B -- which has a
 *   row and a lease in the same slot with the same generation -- is
 *   FX_ERR_STALE_HANDLE (0 from fx_lease_ready / fx_lease_pinned) in every
 *   call that takes one, and B's row and lease are untouched;
 * - fx_poll_sized tells its three 0s apart (nothing queued, a call from a
 *   callback, bad arguments) and writes exactly the caller's event_size;
 *   fx_lease_status tells pending, pinned, unpinned and stale apart.
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
#include "reliability_batch.h"
#include "test_util.h"

static char model_path[4096];

/* ---- 4. handles of another batcher ---- */

static const char lease_text[] = "<t5> <t6> <t7> <t8> <t9> <t10> <t11> <t12> "
                                 "<t13> <t14> <t15> <t16> <t17> <t18>";

static void test_foreign_handles(void **state) {
    (void)state;
    fx_model *m = rb_load_model(model_path);
    fx_batcher *a = make_batcher(m, 2), *b = make_batcher(m, 2);
    /* The same calls on two fresh batchers: the same slots and
     * generations inside. */
    fx_lease *la = NULL, *lb = NULL;
    assert_int_equal(fx_lease_create(a, lease_text, strlen(lease_text), 0, &la),
                     FX_OK);
    assert_int_equal(fx_lease_create(b, lease_text, strlen(lease_text), 0, &lb),
                     FX_OK);
    drain(a);
    drain(b);
    assert_int_equal(fx_lease_pinned(a, la), 1);
    assert_int_equal(fx_lease_pinned(b, lb), 1);
    outcome oa = {0}, ob = {0};
    fx_row *ra = NULL, *rb = NULL;
    int32_t prompt[8];
    fx_request r;
    plain_request(&r, prompt, 0);
    r.lease = la;
    r.user = &oa;
    assert_int_equal(fx_submit(a, &r, &ra), FX_OK);
    r.lease = lb;
    r.user = &ob;
    assert_int_equal(fx_submit(b, &r, &rb), FX_OK);

    /* Every call that takes a row handle. */
    assert_int_equal(fx_cancel(b, ra), FX_ERR_STALE_HANDLE);
    assert_int_equal(fx_row_release(b, ra), FX_ERR_STALE_HANDLE);
    assert_int_equal(fx_cancel(a, rb), FX_ERR_STALE_HANDLE);
    assert_int_equal(fx_row_release(a, rb), FX_ERR_STALE_HANDLE);
    /* Every call that takes a lease handle. */
    assert_int_equal(fx_lease_ready(b, la), 0);
    assert_int_equal(fx_lease_pinned(b, la), 0);
    assert_int_equal(fx_lease_release(b, la), FX_ERR_STALE_HANDLE);
    assert_int_equal(fx_lease_release(a, lb), FX_ERR_STALE_HANDLE);
    fx_row *none = NULL;
    r.lease = la;
    r.user = NULL;
    assert_int_equal(fx_submit(b, &r, &none), FX_ERR_STALE_HANDLE);
    assert_null(none);
    /* A lease handle is not a row handle, nor the other way round. */
    assert_int_equal(fx_cancel(b, (fx_row *)(void *)lb), FX_ERR_STALE_HANDLE);
    assert_int_equal(fx_lease_release(b, (fx_lease *)(void *)rb),
                     FX_ERR_STALE_HANDLE);

    /* Nothing of b's was touched: its lease is pinned, its row runs to
     * max_tokens, and so do a's. */
    assert_int_equal(fx_lease_ready(b, lb), 1);
    assert_int_equal(fx_lease_pinned(b, lb), 1);
    drain(a);
    drain(b);
    assert_int_equal(oa.done, 1);
    assert_int_equal(ob.done, 1);
    assert_int_equal(oa.finish, FX_FINISH_LENGTH);
    assert_int_equal(ob.finish, FX_FINISH_LENGTH);
    assert_int_equal(fx_lease_release(a, la), FX_OK);
    assert_int_equal(fx_lease_release(b, lb), FX_OK);
    fx_batcher_free(a);
    fx_batcher_free(b);
    fx_model_free(m);
}

/* ---- 5c, 6. fx_poll_sized and fx_lease_status ---- */

typedef struct poll_from_log {
    fx_batcher *b;      /* poll this one from the log callback; NULL: not */
    int calls, got;
    fx_status status;
} poll_from_log;

static void log_polls(void *user, fx_log_level level, const char *message) {
    (void)level;
    (void)message;
    poll_from_log *pl = user;
    if (!pl->b || pl->calls) return;
    fx_event ev;
    pl->calls++;
    pl->got = fx_poll_sized(pl->b, &ev, sizeof ev, &pl->status);
}

static void test_poll_status(void **state) {
    (void)state;
    fx_model *m = rb_load_model(model_path);
    poll_from_log pl = {0};
    fx_batcher_params p;
    rb_params(&p, 2);
    p.log_fn = log_polls;
    p.log_user = &pl;
    p.log_level = FX_LOG_DEBUG;
    fx_batcher *b = rb_create(m, &p);
    fx_event ev;
    fx_status st = FX_ERR_INTERNAL;
    assert_int_equal(fx_poll_sized(NULL, &ev, sizeof ev, &st), 0);
    assert_int_equal(st, FX_ERR_INVALID_ARG);
    assert_int_equal(fx_poll_sized(b, NULL, sizeof ev, &st), 0);
    assert_int_equal(st, FX_ERR_INVALID_ARG);
    st = FX_ERR_INTERNAL;
    assert_int_equal(fx_poll_sized(b, &ev, sizeof ev, &st), 0);
    assert_int_equal(st, FX_OK); /* nothing queued */

    int32_t prompt[8];
    fx_request r;
    plain_request(&r, prompt, 0);
    fx_row *row;
    assert_int_equal(fx_submit(b, &r, &row), FX_OK);
    assert_int_equal(fx_step(b), FX_OK); /* the prompt and a first token */
    /* Too small an event, and a call from inside a callback: 0, and the
     * events stay queued. */
    assert_int_equal(fx_poll_sized(b, &ev, offsetof(fx_event, n_top), &st), 0);
    assert_int_equal(st, FX_ERR_INVALID_ARG);
    pl.b = b;
    assert_int_equal(fx_step(b), FX_OK);
    assert_int_equal(pl.calls, 1);
    assert_int_equal(pl.got, 0);
    assert_int_equal(pl.status, FX_ERR_REENTRANT);
    pl.b = NULL;

    /* A host with a larger fx_event (a newer header): the tail it has
     * and this library does not know is zero; one with exactly this
     * size: nothing written past it. */
    unsigned char big[sizeof(fx_event) + 64];
    int events = 0, dones = 0;
    for (int guard = 0; guard < 100; guard++) {
        memset(big, 0xAB, sizeof big);
        int got = fx_poll_sized(b, (fx_event *)(void *)big, sizeof big, &st);
        if (!got) {
            assert_int_equal(st, FX_OK);
            if (fx_batcher_pending(b) == 0) break;
            assert_int_equal(fx_step(b), FX_OK);
            continue;
        }
        assert_int_equal(st, FX_OK);
        for (size_t k = sizeof(fx_event); k < sizeof big; k++)
            assert_int_equal(big[k], 0);
        fx_event copy;
        memcpy(&copy, big, sizeof copy);
        assert_ptr_equal(copy.row, row);
        events++;
        dones += copy.type == FX_EVENT_DONE;
    }
    assert_true(events >= 2);
    assert_int_equal(dones, 1);

    plain_request(&r, prompt, 1);
    assert_int_equal(fx_submit(b, &r, &row), FX_OK);
    assert_int_equal(fx_step(b), FX_OK);
    memset(big, 0xAB, sizeof big);
    assert_int_equal(fx_poll_sized(b, (fx_event *)(void *)big, sizeof(fx_event),
                                   &st), 1);
    for (size_t k = sizeof(fx_event); k < sizeof big; k++)
        assert_int_equal(big[k], 0xAB);
    /* fx_poll: the first layout. */
    assert_int_equal(fx_step(b), FX_OK);
    memset(big, 0xAB, sizeof big);
    assert_int_equal(fx_poll(b, (fx_event *)(void *)big), 1);
    for (size_t k = offsetof(fx_event, n_top) + sizeof(size_t); k < sizeof big; k++)
        assert_int_equal(big[k], 0xAB);
    fx_batcher_free(b);
    fx_model_free(m);
}

static void test_lease_status(void **state) {
    (void)state;
    fx_model *m = rb_load_model(model_path);
    fx_batcher *b = make_batcher(m, 2), *other = make_batcher(m, 2);
    fx_batcher_params p;
    rb_params(&p, 2);
    p.flags = FX_BATCHER_NO_PREFIX_CACHE;
    fx_batcher *nocache = rb_create(m, &p);
    fx_lease *l = NULL, *u = NULL, *o = NULL;
    assert_int_equal(fx_lease_create(b, lease_text, strlen(lease_text), 0, &l),
                     FX_OK);
    assert_int_equal(fx_lease_create(nocache, lease_text, strlen(lease_text), 0,
                                     &u), FX_OK);
    assert_int_equal(fx_lease_create(other, lease_text, strlen(lease_text), 0,
                                     &o), FX_OK);
    fx_lease_state ls = FX_LEASE_NONE;
    assert_int_equal(fx_lease_status(b, l, &ls), FX_OK);
    assert_int_equal(ls, FX_LEASE_PENDING);
    assert_int_equal(fx_lease_status(NULL, l, &ls), FX_ERR_INVALID_ARG);
    assert_int_equal(fx_lease_status(b, l, NULL), FX_ERR_INVALID_ARG);
    drain(b);
    drain(nocache);
    drain(other);
    assert_int_equal(fx_lease_status(b, l, &ls), FX_OK);
    assert_int_equal(ls, FX_LEASE_PINNED);
    /* ready 1, pinned 0: ended without a pin. */
    assert_int_equal(fx_lease_ready(nocache, u), 1);
    assert_int_equal(fx_lease_pinned(nocache, u), 0);
    assert_int_equal(fx_lease_status(nocache, u, &ls), FX_OK);
    assert_int_equal(ls, FX_LEASE_UNPINNED);
    /* Stale: another batcher's (same slot and generation), released. */
    ls = FX_LEASE_PINNED;
    assert_int_equal(fx_lease_status(b, o, &ls), FX_ERR_STALE_HANDLE);
    assert_int_equal(ls, FX_LEASE_NONE);
    assert_int_equal(fx_lease_release(b, l), FX_OK);
    assert_int_equal(fx_lease_status(b, l, &ls), FX_ERR_STALE_HANDLE);
    assert_int_equal(fx_lease_release(nocache, u), FX_OK);
    assert_int_equal(fx_lease_release(other, o), FX_OK);
    fx_batcher_free(b);
    fx_batcher_free(nocache);
    fx_batcher_free(other);
    fx_model_free(m);
}

static int setup(void **state) {
    (void)state;
    snprintf(model_path, sizeof model_path, "%s",
             fx_test_tmp_path("reliability_api.gguf"));
    return gw_write_tiny_model(model_path, 256, 3) == 0 ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    remove(model_path);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_foreign_handles),
        cmocka_unit_test(test_poll_status),
        cmocka_unit_test(test_lease_status),
    };
    return cmocka_run_group_tests_name("reliability_api", tests, setup,
                                       teardown);
}
