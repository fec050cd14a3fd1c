/*
 * The batcher against docs/design.md's invariants and docs/reliability.md sections
 * D, E and F, through the public API plus the internal accounting check.
 * Every scenario ends by checking that KV blocks and refcounts are back at
 * their baseline.
 */
#include <math.h>
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
#include "kv/kv.h"
#include "gguf_writer.h"
#include "test_rng.h"
#include "test_util.h"

/* ---- fixtures ---- */

static char model_path[4096];

static fx_model *load_model_at(const char *path) {
    fx_model *m = NULL;
    char err[256];
    if (fx_model_load(path, NULL, &m, err, sizeof err) != FX_OK)
        fail_msg("load %s: %s", path, err);
    return m;
}

static fx_model *load_model(void) { return load_model_at(model_path); }

/* Models whose layers see a sliding window (Gemma 3: five of six; Phi-3:
 * all) shorter than the prompts below: a cached prefix, a batch and a
 * chunked prefill must give what a cold run alone gives there too. */
static char window_paths[2][4096];

/* Pool threads of the batchers make_batcher creates (0: the default). */
static uint32_t batcher_threads;
/* Flags added to theirs: kv_f16_on / kv_f16_off around a test run it on
 * an F16 cache. */
static uint32_t batcher_flags;

static fx_batcher *make_batcher(fx_model *m, uint32_t max_rows,
                                uint32_t step_tokens, uint64_t kv_blocks,
                                uint32_t flags) {
    fx_batcher_params p;
    fx_batcher_params_init(&p);
    if (batcher_threads) p.n_threads = batcher_threads;
    p.max_rows = max_rows;
    p.max_step_tokens = step_tokens;
    p.n_ctx = 128;
    p.block_tokens = 8;
    p.flags = flags | batcher_flags;
    if (kv_blocks) {
        fx_model_info info;
        fx_model_info_init(&info);
        fx_model_get_info(m, &info);
        const uint64_t elem = p.flags & FX_BATCHER_KV_F16 ? 2 : 4;
        uint64_t per_block = (uint64_t)info.n_layer * 2 * 8 *
                             (info.n_embd / info.n_head) * info.n_head_kv * elem;
        p.kv_bytes = kv_blocks * per_block;
    }
    fx_batcher *b = NULL;
    char err[256];
    if (fx_batcher_create(m, &p, &b, err, sizeof err) != FX_OK)
        fail_msg("create: %s", err);
    return b;
}

static void check_baseline(fx_batcher *b) {
    fx_batcher_impl *impl = fx_batcher_get_impl(b);
    fx_error err;
    if (fx_batcher_impl_check(impl, &err) != FX_OK) fail_msg("%s", err.message);
    fx_batcher_stats st;
    fx_batcher_impl_stats(impl, &st);
    assert_int_equal(st.running, 0);
    assert_int_equal(st.queued, 0);
    assert_int_equal(st.blocks_reserved, 0);
    assert_int_equal(st.blocks_free + st.blocks_cached + st.blocks_pinned,
                     st.blocks_total);
}

typedef struct outcome {
    int32_t ids[256];
    size_t n_ids;
    char text[8192];
    size_t text_len;
    int text_events;
    int done;
    fx_finish_reason finish;
    fx_status status;
    int32_t stop_index;
    fx_usage usage;
    fx_row *row;
} outcome;

/* Polls everything available into the outcomes named by user pointers. */
static void poll_all(fx_batcher *b) {
    fx_event ev;
    while (fx_poll(b, &ev)) {
        outcome *o = ev.user;
        assert_non_null(o);
        assert_true(ev.row == o->row);
        assert_int_equal(o->done, 0); /* nothing after DONE */
        if (ev.type == FX_EVENT_TEXT) {
            assert_true(ev.text_len > 0);
            assert_true(o->text_len + ev.text_len < sizeof o->text);
            memcpy(o->text + o->text_len, ev.text, ev.text_len);
            o->text_len += ev.text_len;
            o->text_events++;
        } else {
            assert_int_equal(ev.type, FX_EVENT_DONE);
            o->done++;
            o->finish = ev.finish;
            o->status = ev.status;
            o->stop_index = ev.stop_index;
            o->usage = ev.usage;
            assert_true(ev.n_tokens <= 256);
            memcpy(o->ids, ev.tokens, ev.n_tokens * sizeof *o->ids);
            o->n_ids = ev.n_tokens;
        }
    }
}

static void run_until_idle(fx_batcher *b) {
    for (int i = 0; i < 100000 && fx_batcher_pending(b) > 0; i++) {
        assert_int_equal(fx_step(b), FX_OK);
        poll_all(b);
    }
    assert_int_equal(fx_batcher_pending(b), 0);
    poll_all(b);
}

static void prompt_of(int32_t *p, size_t n, uint64_t seed) {
    for (size_t i = 0; i < n; i++) /* skip <unk>, <s>, </s> */
        p[i] = 3 + (int32_t)fx_test_rng_below(&seed, 60);
}

static fx_status submit_ids(fx_batcher *b, const int32_t *ids, size_t n,
                            uint32_t max_tokens, float temp, uint64_t seed,
                            outcome *o, uint32_t flags) {
    fx_request r;
    fx_request_init(&r);
    r.prompt_tokens = ids;
    r.n_prompt_tokens = n;
    r.max_tokens = max_tokens;
    r.temperature = temp;
    r.seed = seed;
    r.flags = flags;
    r.user = o;
    return fx_submit(b, &r, &o->row);
}

/* A row's result alone on a fresh batcher: the reference for determinism. */
static void solo(fx_model *m, const int32_t *ids, size_t n, uint32_t max_tokens,
                 float temp, uint64_t seed, outcome *o) {
    fx_batcher *b = make_batcher(m, 1, 64, 0, FX_BATCHER_NO_PREFIX_CACHE);
    memset(o, 0, sizeof *o);
    assert_int_equal(submit_ids(b, ids, n, max_tokens, temp, seed, o,
                                FX_REQUEST_IGNORE_EOS), FX_OK);
    run_until_idle(b);
    assert_int_equal(o->done, 1);
    check_baseline(b);
    fx_batcher_free(b);
}

/* ---- tests ---- */

/* Invariant 1 and docs/reliability.md 33/34: ids stay stable, stale ids resolve to
 * nothing even after their slot is reused. */
static void test_stale_handles(void **state) {
    (void)state;
    fx_model *m = load_model();
    fx_batcher *b = make_batcher(m, 4, 64, 0, 0);
    int32_t p[6];
    prompt_of(p, 6, 1);
    outcome a = {0}, c = {0};
    assert_int_equal(submit_ids(b, p, 6, 3, 0, 0, &a, 0), FX_OK);
    fx_row *old = a.row;
    run_until_idle(b);
    assert_int_equal(a.done, 1);
    assert_int_equal(fx_cancel(b, old), FX_ERR_STALE_HANDLE);
    assert_int_equal(fx_row_release(b, old), FX_ERR_STALE_HANDLE);
    /* The next row takes the same slot; the old handle must not reach it. */
    assert_int_equal(submit_ids(b, p, 6, 3, 0, 0, &c, 0), FX_OK);
    assert_true(c.row != old);
    assert_int_equal(fx_cancel(b, old), FX_ERR_STALE_HANDLE);
    assert_int_equal(fx_row_release(b, old), FX_ERR_STALE_HANDLE);
    run_until_idle(b);
    assert_int_equal(c.done, 1);
    assert_int_equal(c.finish, a.finish);
    assert_int_equal(c.n_ids, a.n_ids);
    /* Handles never issued */
    assert_int_equal(fx_cancel(b, NULL), FX_ERR_STALE_HANDLE);
    assert_int_equal(fx_cancel(b, (fx_row *)(uintptr_t)0x7777), FX_ERR_STALE_HANDLE);
    /* Release before the end: no more events, stale at once, double
     * release is a status. */
    outcome d = {0};
    assert_int_equal(submit_ids(b, p, 6, 20, 0, 0, &d, FX_REQUEST_IGNORE_EOS), FX_OK);
    assert_int_equal(fx_step(b), FX_OK);
    poll_all(b);
    int seen = d.text_events;
    assert_int_equal(fx_row_release(b, d.row), FX_OK);
    assert_int_equal(fx_row_release(b, d.row), FX_ERR_STALE_HANDLE);
    assert_int_equal(fx_cancel(b, d.row), FX_ERR_STALE_HANDLE);
    run_until_idle(b);
    assert_int_equal(d.done, 0);
    assert_int_equal(d.text_events, seen);
    check_baseline(b);
    fx_batcher_free(b);
    fx_model_free(m);
}

/* Invariant 2: admission (and so, with one row at a time, completion)
 * follows submit order. */
static void test_admission_order(void **state) {
    (void)state;
    fx_model *m = load_model();
    fx_batcher *b = make_batcher(m, 1, 64, 0, 0);
    enum { N = 5 };
    outcome o[N];
    memset(o, 0, sizeof o);
    int32_t p[4];
    for (int i = 0; i < N; i++) {
        prompt_of(p, 4, (uint64_t)i + 10);
        assert_int_equal(submit_ids(b, p, 4, 2 + (uint32_t)i, 0, 0, &o[i], 0), FX_OK);
    }
    int order = 0;
    for (int guard = 0; guard < 1000 && fx_batcher_pending(b); guard++) {
        assert_int_equal(fx_step(b), FX_OK);
        fx_event ev;
        while (fx_poll(b, &ev)) {
            outcome *x = ev.user;
            if (ev.type == FX_EVENT_DONE) {
                assert_ptr_equal(x, &o[order]);
                order++;
            }
        }
    }
    assert_int_equal(order, N);
    check_baseline(b);
    fx_batcher_free(b);
    fx_model_free(m);
}

/* Invariant 3, docs/reliability.md 38 and 39: never-fitting requests are refused
 * at submit; ones that do not fit now wait and run later. */
static void test_budget(void **state) {
    (void)state;
    fx_model *m = load_model();
    /* 6 blocks of 8 positions: one row of 40 positions fits, two do not. */
    fx_batcher *b = make_batcher(m, 4, 64, 6, 0);
    int32_t p[100];
    prompt_of(p, 100, 3);
    outcome big = {0}, x = {0}, y = {0};
    assert_int_equal(submit_ids(b, p, 100, 100, 0, 0, &big, 0), FX_ERR_NO_ROOM);
    assert_non_null(strstr(fx_batcher_errmsg(b), "context"));
    assert_int_equal(submit_ids(b, p, 40, 20, 0, 0, &big, 0), FX_ERR_NO_ROOM);
    assert_non_null(strstr(fx_batcher_errmsg(b), "blocks"));
    assert_int_equal(submit_ids(b, p, 30, 10, 0, 0, &x, FX_REQUEST_IGNORE_EOS), FX_OK);
    assert_int_equal(submit_ids(b, p + 50, 30, 10, 0, 0, &y, FX_REQUEST_IGNORE_EOS), FX_OK);
    assert_int_equal(fx_step(b), FX_OK);
    fx_batcher_stats st;
    fx_batcher_impl_stats(fx_batcher_get_impl(b), &st);
    assert_int_equal(st.running, 1);
    assert_int_equal(st.queued, 1);
    run_until_idle(b);
    assert_int_equal(x.done, 1);
    assert_int_equal(y.done, 1);
    assert_int_equal(x.finish, FX_FINISH_LENGTH);
    assert_int_equal(y.finish, FX_FINISH_LENGTH);
    assert_true(y.usage.queue_seconds >= 0);
    check_baseline(b);
    fx_batcher_free(b);
    fx_model_free(m);
}

/* Invariants 4 and 10: a prefix-cache hit starts at the cached length,
 * reports it in usage, and generates exactly what a miss generates. */
static void prefix_cache(const char *path) {
    fx_model *m = load_model_at(path);
    int32_t p[40];
    prompt_of(p, 40, 4);
    outcome ref;
    solo(m, p, 40, 12, 0.9f, 77, &ref);
    fx_batcher *b = make_batcher(m, 4, 64, 0, 0);
    outcome first = {0}, second = {0};
    assert_int_equal(submit_ids(b, p, 40, 12, 0.9f, 77, &first, FX_REQUEST_IGNORE_EOS), FX_OK);
    run_until_idle(b);
    assert_int_equal(submit_ids(b, p, 40, 12, 0.9f, 77, &second, FX_REQUEST_IGNORE_EOS), FX_OK);
    run_until_idle(b);
    assert_int_equal(first.usage.cached_tokens, 0);
    /* 39 adoptable positions hold 4 whole blocks of 8 -- with the
     * sliding layers (Gemma 3's five of six, Phi-3's all) in rings (a
     * window of 5 or 7 plus a step of 64 is 10 blocks, of 16 in a row),
     * the window before them too. */
    assert_int_equal(second.usage.cached_tokens, 32);
    fx_batcher_stats rs;
    fx_batcher_impl_stats(fx_batcher_get_impl(b), &rs);
    assert_int_equal(rs.ring_total > 0, path != model_path);
    assert_int_equal(rs.ring_cached > 0, path != model_path);
    assert_int_equal(second.usage.prompt_tokens, 40);
    assert_int_equal(second.usage.completion_tokens, 12);
    assert_true(second.usage.ttft_seconds <= second.usage.total_seconds);
    assert_int_equal(first.n_ids, ref.n_ids);
    assert_memory_equal(first.ids, ref.ids, ref.n_ids * sizeof *ref.ids);
    assert_memory_equal(second.ids, ref.ids, ref.n_ids * sizeof *ref.ids);
    assert_int_equal(second.text_len, ref.text_len);
    assert_memory_equal(second.text, ref.text, ref.text_len);
    check_baseline(b);
    fx_batcher_free(b);
    fx_model_free(m);
}

static void test_prefix_cache(void **state) {
    (void)state;
    prefix_cache(model_path);
    for (int i = 0; i < 2; i++) prefix_cache(window_paths[i]);
}

/* Invariants 5 and 6, docs/reliability.md 40: every way of ending -- length,
 * stop string, cancel before admission, during prefill, during decode,
 * after finish, twice -- replies once and returns the blocks. */
static void test_every_ending(void **state) {
    (void)state;
    fx_model *m = load_model();
    fx_batcher *b = make_batcher(m, 2, 8, 0, 0);
    int32_t p[30];
    prompt_of(p, 30, 5);
    outcome q = {0}, pre = {0}, dec = {0}, fin = {0}, blocker = {0};
    /* blocker and pre run; q waits in the queue */
    assert_int_equal(submit_ids(b, p, 30, 40, 0, 0, &blocker, FX_REQUEST_IGNORE_EOS), FX_OK);
    assert_int_equal(submit_ids(b, p, 30, 40, 0, 0, &pre, FX_REQUEST_IGNORE_EOS), FX_OK);
    assert_int_equal(submit_ids(b, p, 10, 5, 0, 0, &q, FX_REQUEST_IGNORE_EOS), FX_OK);
    assert_int_equal(fx_cancel(b, q.row), FX_OK);
    assert_int_equal(fx_cancel(b, q.row), FX_OK); /* twice is fine */
    assert_int_equal(fx_step(b), FX_OK);          /* pre is mid-prompt */
    assert_int_equal(fx_cancel(b, pre.row), FX_OK);
    for (int i = 0; i < 12; i++) assert_int_equal(fx_step(b), FX_OK);
    poll_all(b);
    assert_int_equal(q.done, 1);
    assert_int_equal(q.finish, FX_FINISH_CANCELLED);
    assert_int_equal(q.usage.completion_tokens, 0);
    assert_int_equal(pre.done, 1);
    assert_int_equal(pre.finish, FX_FINISH_CANCELLED);
    assert_int_equal(pre.usage.completion_tokens, 0);
    /* blocker is decoding now */
    assert_int_equal(blocker.done, 0);
    assert_true(blocker.text_events > 0);
    assert_int_equal(fx_cancel(b, blocker.row), FX_OK);
    assert_int_equal(fx_step(b), FX_OK);
    poll_all(b);
    assert_int_equal(blocker.done, 1);
    assert_int_equal(blocker.finish, FX_FINISH_CANCELLED);
    assert_true(blocker.usage.completion_tokens > 0);
    assert_int_equal(blocker.n_ids, blocker.usage.completion_tokens);
    /* after finish: the handle is stale once DONE was polled */
    assert_int_equal(submit_ids(b, p, 5, 2, 0, 0, &fin, 0), FX_OK);
    run_until_idle(b);
    assert_int_equal(fin.done, 1);
    assert_int_equal(fx_cancel(b, fin.row), FX_ERR_STALE_HANDLE);
    (void)dec;
    check_baseline(b);
    fx_batcher_free(b);
    fx_model_free(m);
}

/* Invariant 8 and docs/reliability.md 28/31: a stop string ends the row, is never
 * emitted, and the text before it is exactly what an unstopped row says
 * before that point. */
static void test_stop_strings(void **state) {
    (void)state;
    fx_model *m = load_model();
    int32_t p[8];
    prompt_of(p, 8, 6);
    outcome ref;
    solo(m, p, 8, 24, 0, 0, &ref);
    assert_true(ref.text_len > 12);
    /* A stop taken from the middle of the reference text, spanning a token
     * boundary. */
    char stop[6];
    memcpy(stop, ref.text + 5, 5);
    stop[5] = '\0';
    const char *first = strstr(ref.text, stop);
    assert_non_null(first);
    size_t expect_len = (size_t)(first - ref.text);

    fx_batcher *b = make_batcher(m, 2, 64, 0, 0);
    const char *stops[3] = {"never-appears-xyz", stop, "\xF0\x9F\x98\x80"};
    fx_request r;
    fx_request_init(&r);
    outcome o = {0};
    r.prompt_tokens = p;
    r.n_prompt_tokens = 8;
    r.max_tokens = 24;
    r.stop = stops;
    r.n_stop = 3;
    r.flags = FX_REQUEST_IGNORE_EOS;
    r.user = &o;
    assert_int_equal(fx_submit(b, &r, &o.row), FX_OK);
    run_until_idle(b);
    assert_int_equal(o.finish, FX_FINISH_STOP);
    assert_int_equal(o.stop_index, 1);
    assert_int_equal(o.text_len, expect_len);
    assert_memory_equal(o.text, ref.text, expect_len);

    /* docs/reliability.md 29: an empty or invalid UTF-8 stop string is refused. */
    const char *bad[1] = {""};
    r.stop = bad;
    r.n_stop = 1;
    assert_int_equal(fx_submit(b, &r, &o.row), FX_ERR_INVALID_ARG);
    const char *bad_utf8[1] = {"\xC3"};
    r.stop = bad_utf8;
    assert_int_equal(fx_submit(b, &r, &o.row), FX_ERR_INVALID_ARG);
    check_baseline(b);
    fx_batcher_free(b);
    fx_model_free(m);
}

/* Stop tokens end the row without their text; EOS does too unless
 * ignored. */
static void test_stop_tokens(void **state) {
    (void)state;
    fx_model *m = load_model();
    int32_t p[8];
    prompt_of(p, 8, 7);
    outcome ref;
    solo(m, p, 8, 10, 0, 0, &ref);
    int32_t target = ref.ids[4];
    size_t at = 0;
    while (ref.ids[at] != target) at++;
    fx_batcher *b = make_batcher(m, 2, 64, 0, 0);
    fx_request r;
    fx_request_init(&r);
    outcome o = {0};
    r.prompt_tokens = p;
    r.n_prompt_tokens = 8;
    r.max_tokens = 10;
    r.stop_tokens = &target;
    r.n_stop_tokens = 1;
    r.flags = FX_REQUEST_IGNORE_EOS;
    r.user = &o;
    assert_int_equal(fx_submit(b, &r, &o.row), FX_OK);
    run_until_idle(b);
    assert_int_equal(o.finish, FX_FINISH_EOS);
    assert_int_equal(o.stop_index, target);
    assert_int_equal(o.n_ids, at + 1); /* the stop token is reported */
    assert_memory_equal(o.ids, ref.ids, (at + 1) * sizeof *o.ids);
    int32_t bad = 1000;
    r.stop_tokens = &bad;
    assert_int_equal(fx_submit(b, &r, &o.row), FX_ERR_INVALID_ARG);
    check_baseline(b);
    fx_batcher_free(b);
    fx_model_free(m);
}

/* Determinism: each row's tokens equal its solo run, batched with random
 * other rows arriving at random steps, some cancelled, under step budgets
 * of 1 and 512, with the prefix cache hitting. */
static void batch_determinism(const char *path) {
    fx_model *m = load_model_at(path);
    enum { N = 10 };
    int32_t prompts[N][24];
    size_t lens[N];
    outcome ref[N];
    for (int i = 0; i < N; i++) {
        lens[i] = 3 + (size_t)(i * 7) % 20;
        prompt_of(prompts[i], lens[i], (uint64_t)(i % 4)); /* shared prefixes */
        solo(m, prompts[i], lens[i], 8 + (uint32_t)i % 5, i % 2 ? 0.8f : 0, (uint64_t)i, &ref[i]);
    }
    /* One thread, and two: with two, the rows that sample with a
     * temperature in the same step are sampled on both threads at once
     * (step.c, sample_rows), against references sampled on one. */
    uint32_t budgets[2] = {1, 512};
    for (int run = 0; run < 4; run++) {
        const int bi = run % 2;
        batcher_threads = run < 2 ? 1 : 2;
        fx_batcher *b = make_batcher(m, 4, budgets[bi], 0, 0);
        batcher_threads = 0;
        static outcome o[N];
        memset(o, 0, sizeof o);
        uint64_t rng = 99 + (uint64_t)bi;
        int next = 0;
        for (int guard = 0; guard < 100000; guard++) {
            if (next < N && (fx_test_rng_next(&rng) >> 60) < 6) {
                assert_int_equal(submit_ids(b, prompts[next], lens[next],
                                            8 + (uint32_t)next % 5,
                                            next % 2 ? 0.8f : 0, (uint64_t)next,
                                            &o[next], FX_REQUEST_IGNORE_EOS),
                                 FX_OK);
                next++;
            }
            if (next == N && fx_batcher_pending(b) == 0) break;
            assert_int_equal(fx_step(b), FX_OK);
            poll_all(b);
            if (next > 7 && !o[7].done) fx_cancel(b, o[7].row);
        }
        poll_all(b);
        for (int i = 0; i < N; i++) {
            assert_int_equal(o[i].done, 1);
            if (i == 7 && o[i].finish == FX_FINISH_CANCELLED) {
                /* a prefix of its solo run */
                assert_memory_equal(o[i].ids, ref[i].ids, o[i].n_ids * sizeof(int32_t));
                continue;
            }
            if (o[i].n_ids != ref[i].n_ids ||
                memcmp(o[i].ids, ref[i].ids, ref[i].n_ids * sizeof(int32_t)) != 0)
            {
                for (size_t k = 0; k < ref[i].n_ids; k++)
                    fprintf(stderr, "%d/%d ", k < o[i].n_ids ? o[i].ids[k] : -1, ref[i].ids[k]);
                fprintf(stderr, "\ncached %u finish %d status %d\n", o[i].usage.cached_tokens, o[i].finish, o[i].status);
                fail_msg("budget %u, %d threads: row %d differs from its "
                         "solo run", budgets[bi], run < 2 ? 1 : 2, i);
            }
            assert_int_equal(o[i].text_len, ref[i].text_len);
            assert_memory_equal(o[i].text, ref[i].text, ref[i].text_len);
        }
        check_baseline(b);
        fx_batcher_free(b);
    }
    fx_model_free(m);
}

static void test_batch_determinism(void **state) {
    (void)state;
    batch_determinism(model_path);
    for (int i = 0; i < 2; i++) batch_determinism(window_paths[i]);
}

/* A pinned lease: computed once, adopted by the rows that continue it,
 * with the same output as sending the whole prompt. */
static void test_lease(void **state) {
    (void)state;
    fx_model *m = load_model();
    fx_batcher *b = make_batcher(m, 4, 64, 0, 0);
    /* Lease text goes through the tokenizer; the synthetic vocabulary
     * turns unknown text into <unk>, which is still a valid prefix. */
    const char *sys = "system prompt shared by all rows of the demo";
    fx_lease *lease = NULL;
    assert_int_equal(fx_lease_create(b, sys, strlen(sys), 0, &lease), FX_OK);
    assert_int_equal(fx_lease_ready(b, lease), 0);
    assert_int_equal(fx_lease_pinned(b, lease), 0);
    assert_int_equal(fx_lease_pinned(NULL, lease), 0);
    int32_t p[6];
    prompt_of(p, 6, 8);
    outcome o[3];
    memset(o, 0, sizeof o);
    for (int i = 0; i < 3; i++) {
        fx_request r;
        fx_request_init(&r);
        r.prompt_tokens = p;
        r.n_prompt_tokens = 6;
        r.max_tokens = 5;
        r.flags = FX_REQUEST_IGNORE_EOS;
        r.lease = lease;
        r.user = &o[i];
        assert_int_equal(fx_submit(b, &r, &o[i].row), FX_OK);
    }
    run_until_idle(b);
    assert_int_equal(fx_lease_ready(b, lease), 1);
    assert_int_equal(fx_lease_pinned(b, lease), 1);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(o[i].done, 1);
        assert_true(o[i].usage.cached_tokens > 0);
        assert_int_equal(o[i].n_ids, o[0].n_ids);
        assert_memory_equal(o[i].ids, o[0].ids, o[0].n_ids * sizeof(int32_t));
    }
    fx_batcher_stats st;
    fx_batcher_impl_stats(fx_batcher_get_impl(b), &st);
    assert_true(st.blocks_pinned > 0);
    assert_int_equal(fx_lease_release(b, lease), FX_OK);
    assert_int_equal(fx_lease_pinned(b, lease), 0); /* stale */
    assert_int_equal(fx_lease_release(b, lease), FX_ERR_STALE_HANDLE);
    fx_batcher_impl_stats(fx_batcher_get_impl(b), &st);
    assert_int_equal(st.blocks_pinned, 0);
    fx_request r;
    fx_request_init(&r);
    r.prompt_tokens = p;
    r.n_prompt_tokens = 6;
    r.max_tokens = 5;
    r.lease = lease;
    outcome x = {0};
    r.user = &x;
    assert_int_equal(fx_submit(b, &r, &x.row), FX_ERR_STALE_HANDLE);
    check_baseline(b);
    fx_batcher_free(b);
    fx_model_free(m);
}

/* A lease that cannot pin (no prefix cache) still becomes ready, and
 * fx_lease_pinned says it holds nothing; rows continuing it still run. */
static void test_lease_without_cache(void **state) {
    (void)state;
    fx_model *m = load_model();
    fx_batcher *b = make_batcher(m, 2, 64, 0, FX_BATCHER_NO_PREFIX_CACHE);
    const char *sys = "a prefix nobody can pin";
    fx_lease *lease = NULL;
    assert_int_equal(fx_lease_create(b, sys, strlen(sys), 0, &lease), FX_OK);
    int32_t p[4];
    prompt_of(p, 4, 3);
    outcome o = {0};
    fx_request r;
    fx_request_init(&r);
    r.prompt_tokens = p;
    r.n_prompt_tokens = 4;
    r.max_tokens = 3;
    r.flags = FX_REQUEST_IGNORE_EOS;
    r.lease = lease;
    r.user = &o;
    assert_int_equal(fx_submit(b, &r, &o.row), FX_OK);
    run_until_idle(b);
    assert_int_equal(o.done, 1);
    assert_int_equal(fx_lease_ready(b, lease), 1);
    assert_int_equal(fx_lease_pinned(b, lease), 0);
    assert_int_equal(fx_lease_release(b, lease), FX_OK);
    check_baseline(b);
    fx_batcher_free(b);
    fx_model_free(m);
}

typedef struct reentry {
    fx_batcher *b;
    int tried;
    fx_status got;
} reentry;

static void reenter_log(void *user, fx_log_level level, const char *msg) {
    (void)level;
    (void)msg;
    reentry *r = user;
    if (!r->b || r->tried) return;
    r->tried = 1;
    r->got = fx_step(r->b);
}

/* docs/reliability.md 32, 35, 36, 37: NULLs, model freed under a batcher,
 * struct_size, and a call from inside the batcher's own callback. */
static void test_api_misuse(void **state) {
    (void)state;
    fx_model *m = load_model();
    fx_batcher *b = NULL;
    char err[256];
    assert_int_equal(fx_batcher_create(NULL, NULL, &b, err, sizeof err),
                     FX_ERR_INVALID_ARG);
    assert_int_equal(fx_batcher_create(m, NULL, NULL, err, sizeof err),
                     FX_ERR_INVALID_ARG);
    fx_batcher_params p;
    fx_batcher_params_init(&p);
    p.struct_size = 8;
    assert_int_equal(fx_batcher_create(m, &p, &b, err, sizeof err),
                     FX_ERR_INVALID_ARG);
    fx_batcher_params_init(&p);
    p.max_rows = 100000;
    assert_int_equal(fx_batcher_create(m, &p, &b, err, sizeof err),
                     FX_ERR_INVALID_ARG);
    assert_int_equal(fx_submit(NULL, NULL, NULL), FX_ERR_INVALID_ARG);
    assert_int_equal(fx_step(NULL), FX_ERR_INVALID_ARG);
    assert_int_equal(fx_poll(NULL, NULL), 0);
    assert_int_equal(fx_cancel(NULL, NULL), FX_ERR_INVALID_ARG);
    assert_int_equal(fx_row_release(NULL, NULL), FX_ERR_INVALID_ARG);
    assert_int_equal(fx_batcher_pending(NULL), 0);
    fx_batcher_free(NULL);

    reentry re = {NULL, 0, FX_OK};
    fx_batcher_params_init(&p);
    p.log_fn = reenter_log;
    p.log_user = &re;
    p.log_level = FX_LOG_DEBUG;
    p.n_ctx = 64;
    assert_int_equal(fx_batcher_create(m, &p, &b, err, sizeof err), FX_OK);
    re.b = b;
    fx_request r;
    fx_request_init(&r);
    r.max_tokens = 3;
    assert_int_equal(fx_submit(b, &r, NULL), FX_ERR_INVALID_ARG);
    assert_int_equal(fx_submit(b, &r, &(fx_row *){NULL}), FX_ERR_INVALID_ARG);
    int32_t ids[4] = {5, 6, 7, 8};
    outcome o = {0};
    r.prompt_tokens = ids;
    r.n_prompt_tokens = 4;
    r.max_tokens = 3;
    r.user = &o;
    r.struct_size = 4;
    assert_int_equal(fx_submit(b, &r, &o.row), FX_ERR_INVALID_ARG);
    fx_request_init(&r);
    r.prompt_tokens = ids;
    r.n_prompt_tokens = 4;
    r.max_tokens = 3;
    r.user = &o;
    r.temperature = 0.0f / 0.0f;
    assert_int_equal(fx_submit(b, &r, &o.row), FX_ERR_INVALID_ARG);
    r.temperature = 0;
    ids[2] = -4;
    assert_int_equal(fx_submit(b, &r, &o.row), FX_ERR_INVALID_ARG);
    ids[2] = 7;
    assert_int_equal(fx_submit(b, &r, &o.row), FX_OK);

    /* The model is freed while the batcher uses it: deferred. */
    fx_model_free(m);
    run_until_idle(b);
    assert_int_equal(o.done, 1);
    assert_int_equal(re.tried, 1);
    assert_int_equal(re.got, FX_ERR_REENTRANT);
    fx_batcher_free(b); /* frees the model too (ASan checks) */
}

/* Live allocations through the hooks below, model and batcher alike. */
typedef struct counted {
    long live;
    fx_batcher *free_me; /* freed from the log hook's first call */
    int logged;
} counted;

static void *cnt_malloc(void *user, size_t n) {
    void *p = malloc(n);
    if (p) ((counted *)user)->live++;
    return p;
}
static void *cnt_realloc(void *user, void *ptr, size_t n) {
    void *p = realloc(ptr, n);
    if (p && !ptr) ((counted *)user)->live++;
    return p;
}
static void cnt_free(void *user, void *ptr) {
    if (ptr) ((counted *)user)->live--;
    free(ptr);
}
static void free_from_log(void *user, fx_log_level level, const char *msg) {
    (void)level;
    (void)msg;
    counted *c = user;
    if (c->logged++ == 0) fx_batcher_free(c->free_me);
}

/* fx_batcher_free from inside a hook is deferred to the end of the call
 * the hook runs in: everything the batcher held is freed then (it used to
 * be ignored, leaking the batcher). Unknown model flags are refused. */
static void test_free_from_callback(void **state) {
    (void)state;
    counted c = {0, NULL, 0};
    fx_model_params mp;
    fx_model_params_init(&mp);
    mp.allocator = (fx_allocator){cnt_malloc, cnt_realloc, cnt_free, &c};
    fx_model *m = NULL;
    char err[256];
    mp.flags = 0x80;
    assert_int_equal(fx_model_load(model_path, &mp, &m, err, sizeof err), FX_ERR_INVALID_ARG);
    assert_null(m);
    assert_non_null(strstr(err, "unknown bits 0x80"));
    mp.flags = 0;
    assert_int_equal(fx_model_load(model_path, &mp, &m, err, sizeof err), FX_OK);
    long model_live = c.live;
    fx_batcher_params p;
    fx_batcher_params_init(&p);
    p.allocator = mp.allocator;
    p.log_fn = free_from_log;
    p.log_user = &c;
    p.log_level = FX_LOG_DEBUG;
    p.n_ctx = 64;
    fx_batcher *b = NULL;
    assert_int_equal(fx_batcher_create(m, &p, &b, err, sizeof err), FX_OK);
    assert_true(c.live > model_live);
    c.free_me = b;
    int32_t ids[4] = {5, 6, 7, 8};
    fx_request r;
    fx_request_init(&r);
    r.prompt_tokens = ids;
    r.n_prompt_tokens = 4;
    r.max_tokens = 3;
    fx_row *row = NULL;
    fx_status st = fx_submit(b, &r, &row);
    for (int i = 0; i < 100 && !c.logged; i++) st = fx_step(b);
    /* b is gone now (the log hook freed it, deferred): not used again. */
    assert_int_equal(st, FX_OK);
    assert_true(c.logged > 0);
    assert_int_equal(c.live, model_live);
    fx_model_free(m);
    assert_int_equal(c.live, 0);
}

/* docs/reliability.md 41 (short soak; the long one is a separate program): random
 * requests with random cancels, stops, shared prefixes, leases and a small
 * budget end with blocks and refcounts at baseline. */
static void test_soak(void **state) {
    (void)state;
    fx_model *m = load_model();
    fx_batcher *b = make_batcher(m, 3, 16, 24, 0);
    enum { N = 150 };
    static outcome o[N];
    memset(o, 0, sizeof o);
    uint64_t rng = 2024;
    int next = 0;
    fx_lease *lease = NULL;
    const char *stops[2] = {"<t1", "3>"};
    for (int guard = 0; guard < 200000; guard++) {
        uint32_t dice = (uint32_t)(fx_test_rng_next(&rng) >> 40);
        if (next < N && dice % 3 == 0) {
            int32_t p[40];
            size_t len = 1 + dice % 40;
            prompt_of(p, len, dice % 5);
            fx_request r;
            fx_request_init(&r);
            r.prompt_tokens = p;
            r.n_prompt_tokens = len;
            r.max_tokens = 1 + (dice >> 8) % 20;
            r.temperature = (dice >> 12) % 2 ? 0.7f : 0;
            r.seed = dice;
            r.stop = stops;
            r.n_stop = (dice >> 14) % 3;
            r.lease = (dice >> 16) % 4 == 0 ? lease : NULL;
            r.user = &o[next];
            fx_status st = fx_submit(b, &r, &o[next].row);
            assert_true(st == FX_OK || st == FX_ERR_NO_ROOM);
            if (st == FX_OK) next++;
        }
        if (dice % 97 == 0) {
            if (lease) assert_int_equal(fx_lease_release(b, lease), FX_OK);
            lease = NULL;
            if (dice % 2)
                assert_int_equal(fx_lease_create(b, "a shared start", 14, 0, &lease), FX_OK);
        }
        if (next > 0 && dice % 5 == 0) {
            outcome *victim = &o[dice % (uint32_t)next];
            if (!victim->done) {
                if (dice % 2) fx_cancel(b, victim->row);
                else if (fx_row_release(b, victim->row) == FX_OK) victim->done = -1;
            }
        }
        assert_int_equal(fx_step(b), FX_OK);
        poll_all(b);
        if (dice % 50 == 0) {
            fx_error err;
            if (fx_batcher_impl_check(fx_batcher_get_impl(b), &err) != FX_OK)
                fail_msg("step %d: %s", guard, err.message);
        }
        if (next == N && fx_batcher_pending(b) == 0) break;
    }
    if (lease) assert_int_equal(fx_lease_release(b, lease), FX_OK);
    run_until_idle(b);
    for (int i = 0; i < N; i++) assert_true(o[i].done == 1 || o[i].done == -1);
    check_baseline(b);
    fx_batcher_free(b);
    fx_model_free(m);
}

/* Logprobs: each generated token arrives as a TOKEN event, before the
 * TEXT carrying its text, with the model's log-probability; greedy picks
 * the most likely, so the token is its own first alternative. A logit
 * bias that bans that token changes the choice. */
static void test_logprob_events(void **state) {
    (void)state;
    fx_model *m = load_model();
    fx_batcher *b = make_batcher(m, 4, 64, 0, 0);
    int32_t prompt[6];
    prompt_of(prompt, 6, 42);
    int32_t first_greedy = -1;
    for (int pass = 0; pass < 2; pass++) {
        fx_request r;
        fx_request_init(&r);
        r.prompt_tokens = prompt;
        r.n_prompt_tokens = 6;
        r.max_tokens = 8;
        r.n_logprobs = 3;
        r.flags = FX_REQUEST_IGNORE_EOS;
        fx_logit_bias ban = {first_greedy, -INFINITY};
        if (pass == 1) {
            r.logit_bias = &ban;
            r.n_logit_bias = 1;
        }
        fx_row *row;
        assert_int_equal(fx_submit(b, &r, &row), FX_OK);
        int32_t seen[16];
        size_t n_seen = 0, text_before = 0;
        int done = 0;
        for (int i = 0; i < 1000 && !done; i++) {
            assert_int_equal(fx_step(b), FX_OK);
            fx_event ev;
            while (fx_poll(b, &ev)) {
                if (ev.type == FX_EVENT_TOKEN) {
                    assert_true(n_seen < 16);
                    assert_int_equal(ev.n_top, 3);
                    assert_true(ev.logprob <= 0.0f);
                    /* The model's own distribution: the banned token
                     * still heads it in the second pass. */
                    if (pass == 0) assert_int_equal(ev.token, ev.top[0].token);
                    else if (n_seen == 0) assert_int_equal(ev.top[0].token, first_greedy);
                    if (pass == 0) assert_true(ev.logprob == ev.top[0].logprob);
                    assert_true(ev.top[0].logprob >= ev.top[1].logprob);
                    assert_true(ev.top[1].logprob >= ev.top[2].logprob);
                    seen[n_seen++] = ev.token;
                } else if (ev.type == FX_EVENT_TEXT) {
                    /* Never text for a token not announced yet. */
                    assert_true(n_seen > text_before);
                    text_before = n_seen;
                } else {
                    assert_int_equal(ev.type, FX_EVENT_DONE);
                    assert_int_equal(ev.n_tokens, n_seen);
                    assert_memory_equal(ev.tokens, seen, n_seen * sizeof *seen);
                    done = 1;
                }
            }
        }
        assert_true(done);
        assert_true(n_seen == 8);
        if (pass == 0) first_greedy = seen[0];
        else assert_true(seen[0] != first_greedy);
    }
    fx_request r;
    fx_request_init(&r);
    r.prompt_tokens = prompt;
    r.n_prompt_tokens = 6;
    r.max_tokens = 4;
    r.n_logprobs = FX_MAX_LOGPROBS + 1;
    fx_row *row;
    assert_int_equal(fx_submit(b, &r, &row), FX_ERR_INVALID_ARG);
    fx_logit_bias bad = {100000, 1.0f};
    r.n_logprobs = 0;
    r.logit_bias = &bad;
    r.n_logit_bias = 1;
    assert_int_equal(fx_submit(b, &r, &row), FX_ERR_INVALID_ARG);
    check_baseline(b);
    fx_batcher_free(b);
    fx_model_free(m);
}

/* The default kv_bytes (ferrox.h): max_rows full rows, capped at 2 GiB,
 * never below one row. Uncapped, a 7B model's default was ~64 GiB and
 * fx_batcher_create failed with NOMEM unless the host set kv_bytes. */
static void test_default_kv_cap(void **state) {
    (void)state;
    const uint64_t cap = FX_BATCHER_DEFAULT_KV_CAP;
    fx_hparams hp;
    memset(&hp, 0, sizeof hp);
    hp.n_layer = 32; /* Llama-2-7B's K/V shape */
    hp.n_head_kv = 32;
    hp.head_dim = 128;
    uint64_t per_block = fx_kv_block_bytes(&hp, 16, FX_KV_DTYPE_F32);
    /* 16 rows of 512: 8 GiB in full, so the cap. */
    assert_true(per_block * 32 * 16 > cap);
    assert_int_equal(fx_batcher_default_kv_bytes(&hp, 16, 512, 16, 256, FX_KV_DTYPE_F32), cap);
    /* One row of 4096 is 4 GiB: the floor wins over the cap. */
    assert_int_equal(fx_batcher_default_kv_bytes(&hp, 16, 4096, 16, 256, FX_KV_DTYPE_F32),
                     per_block * 256);
    /* Small enough: max_rows full rows, as before. */
    assert_int_equal(fx_batcher_default_kv_bytes(&hp, 2, 64, 16, 256, FX_KV_DTYPE_F32),
                     per_block * 4 * 2);
    /* Exactly max_rows full rows in the pool's own terms, no more: the
     * default prices a block as the pool does (on a small model the block
     * bookkeeping is a large share of it). */
    fx_hparams small;
    memset(&small, 0, sizeof small);
    small.n_layer = 1;
    small.n_head_kv = 1;
    small.head_dim = 4;
    assert_int_equal(fx_kv_blocks_for_bytes(&small, 16, FX_KV_DTYPE_F32,
                         fx_batcher_default_kv_bytes(&small, 16, 64, 16, 256, FX_KV_DTYPE_F32)),
                     16 * 4);

    /* A real batcher whose uncapped default would be 4 GiB: 4 KiB of K/V
     * per position, 512 rows of 2048 positions. */
    gw_model_spec spec;
    gw_model_spec_default(&spec);
    spec.n_embd = 256;
    spec.n_head = 4;
    spec.n_head_kv = 4;
    spec.n_ctx = 2048;
    char path[4096];
    snprintf(path, sizeof path, "%s", fx_test_tmp_path("kvcap.gguf"));
    assert_int_equal(gw_write_model(path, &spec), 0);
    fx_model *m = NULL;
    char err[256];
    if (fx_model_load(path, NULL, &m, err, sizeof err) != FX_OK)
        fail_msg("load: %s", err);
    remove(path);
    fx_batcher_params p;
    fx_batcher_params_init(&p);
    p.max_rows = 512;
    p.max_step_tokens = 64;
    p.n_ctx = 2048;
    uint64_t full_blocks = 512ull * (2048 / FX_KV_DEFAULT_BLOCK_TOKENS);
    assert_true(fx_batcher_default_kv_bytes(&m->hp, 512, 2048,
                                            FX_KV_DEFAULT_BLOCK_TOKENS,
                                            64, FX_KV_DTYPE_F32) == cap);
    fx_batcher *b = NULL;
    if (fx_batcher_create(m, &p, &b, err, sizeof err) != FX_OK)
        fail_msg("create with the default kv_bytes: %s", err);
    fx_batcher_stats st;
    fx_batcher_impl_stats(fx_batcher_get_impl(b), &st);
    assert_int_equal(st.blocks_total,
                     fx_kv_blocks_for_bytes(&m->hp, FX_KV_DEFAULT_BLOCK_TOKENS, FX_KV_DTYPE_F32,
                                            cap));
    assert_true(st.blocks_total < full_blocks);
    /* And it runs. */
    static const int32_t ids[] = {1, 2, 3};
    fx_request r;
    fx_request_init(&r);
    r.prompt_tokens = ids;
    r.n_prompt_tokens = 3;
    r.max_tokens = 2;
    fx_row *row;
    assert_int_equal(fx_submit(b, &r, &row), FX_OK);
    while (fx_batcher_pending(b)) assert_int_equal(fx_step(b), FX_OK);
    fx_event ev;
    int done = 0;
    while (fx_poll(b, &ev)) done += ev.type == FX_EVENT_DONE;
    assert_int_equal(done, 1);
    check_baseline(b);
    fx_batcher_free(b);
    fx_model_free(m);
}

/* FX_MODEL_MAPPED_WEIGHTS computes from the file mapping; by default the
 * weights are copied (and repacked where the kernels prefer it) a slice a
 * step, with FX_MODEL_EAGER_COPY all at the batcher's creation: the same
 * tokens every way, for every weight type (RELIABILITY: the same bits
 * whatever the layout), 40 tokens covering the default's whole copy. */
static void test_mapped_weights(void **state) {
    (void)state;
    const uint32_t types[] = {0, 1, 30, 8};
    const uint32_t flags[] = {0, FX_MODEL_EAGER_COPY, FX_MODEL_MAPPED_WEIGHTS,
                              FX_MODEL_MAPPED_WEIGHTS | FX_MODEL_EAGER_COPY};
    for (int t = 0; t < 4; t++) {
        gw_model_spec spec;
        gw_model_spec_default(&spec);
        spec.type = types[t];
        spec.seed = 5 + (uint64_t)t;
        const char *path = fx_test_tmp_path("mapped.gguf");
        assert_int_equal(gw_write_model(path, &spec), 0);
        outcome o[4];
        int32_t prompt[12];
        prompt_of(prompt, 12, 3);
        for (int way = 0; way < 4; way++) {
            fx_model_params mp;
            fx_model_params_init(&mp);
            mp.flags = flags[way];
            fx_model *m = NULL;
            char err[256];
            if (fx_model_load(path, &mp, &m, err, sizeof err) != FX_OK)
                fail_msg("load (flags 0x%x): %s", flags[way], err);
            solo(m, prompt, 12, 40, 0.8f, 9, &o[way]);
            fx_model_free(m);
            assert_int_equal(o[way].n_ids, 40);
            assert_memory_equal(o[way].ids, o[0].ids,
                                o[0].n_ids * sizeof *o[0].ids);
        }
        remove(path);
    }
    /* A flag from a newer header is refused, not ignored. */
    fx_model_params mp;
    fx_model_params_init(&mp);
    mp.flags = 0x8u;
    fx_model *m = NULL;
    assert_int_equal(fx_model_load(model_path, &mp, &m, NULL, 0),
                     FX_ERR_INVALID_ARG);
}

/* An F16 cache: half the bytes a block, the same admission by blocks
 * (test_budget below), and the determinism contract unchanged (each key
 * and value is rounded once, when stored, whatever the batch). */
static void test_kv_type(void **state) {
    (void)state;
    fx_model *m = load_model();
    fx_batcher_params p;
    fx_batcher_params_init(&p);
    p.kv_bytes = (uint64_t)1 << 20;
    uint32_t blocks[2];
    for (int t = 0; t < 2; t++) {
        p.flags = t ? FX_BATCHER_KV_F16 : 0;
        fx_batcher *b = NULL;
        assert_int_equal(fx_batcher_create(m, &p, &b, NULL, 0), FX_OK);
        fx_batcher_stats st;
        fx_batcher_impl_stats(fx_batcher_get_impl(b), &st);
        blocks[t] = st.blocks_total;
        fx_batcher_free(b);
    }
    /* Twice the blocks but for the bookkeeping each block keeps. */
    assert_true(blocks[1] > blocks[0] * 19 / 10);
    /* The next bit is not a flag yet. */
    p.flags = FX_BATCHER_KV_F16 << 1;
    fx_batcher *b = NULL;
    char err[256];
    assert_int_equal(fx_batcher_create(m, &p, &b, err, sizeof err),
                     FX_ERR_INVALID_ARG);
    assert_null(b);
    assert_non_null(strstr(err, "flags"));
    fx_model_free(m);
}

static int kv_f16_on(void **state) {
    (void)state;
    batcher_flags = FX_BATCHER_KV_F16;
    return 0;
}

static int kv_f16_off(void **state) {
    (void)state;
    batcher_flags = 0;
    return 0;
}

static int setup(void **state) {
    (void)state;
    gw_model_spec spec;
    gw_model_spec_default(&spec);
    spec.n_ctx = 256;
    snprintf(model_path, sizeof model_path, "%s", fx_test_tmp_path("batcher.gguf"));
    if (gw_write_model(model_path, &spec) != 0) return -1;
    gw_model_spec_default(&spec);
    spec.n_ctx = 256;
    spec.arch = "gemma3";
    spec.n_layer = 6;
    spec.head_dim = 24;
    spec.n_swa = 5;
    snprintf(window_paths[0], sizeof window_paths[0], "%s", fx_test_tmp_path("batcher-gemma3.gguf"));
    if (gw_write_model(window_paths[0], &spec) != 0) return -1;
    gw_model_spec_default(&spec);
    spec.n_ctx = 256;
    spec.arch = "phi3";
    spec.n_swa = 7;
    snprintf(window_paths[1], sizeof window_paths[1], "%s", fx_test_tmp_path("batcher-phi3.gguf"));
    return gw_write_model(window_paths[1], &spec);
}

static int teardown(void **state) {
    (void)state;
    remove(model_path);
    for (int i = 0; i < 2; i++) remove(window_paths[i]);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stale_handles),
        cmocka_unit_test(test_mapped_weights),
        cmocka_unit_test(test_admission_order),
        cmocka_unit_test(test_budget),
        cmocka_unit_test(test_prefix_cache),
        cmocka_unit_test(test_every_ending),
        cmocka_unit_test(test_stop_strings),
        cmocka_unit_test(test_stop_tokens),
        cmocka_unit_test(test_batch_determinism),
        cmocka_unit_test(test_lease),
        cmocka_unit_test(test_lease_without_cache),
        cmocka_unit_test(test_api_misuse),
        cmocka_unit_test(test_soak),
        cmocka_unit_test(test_logprob_events),
        cmocka_unit_test(test_default_kv_cap),
        cmocka_unit_test(test_free_from_callback),
        cmocka_unit_test(test_kv_type),
        cmocka_unit_test_setup_teardown(test_budget, kv_f16_on, kv_f16_off),
        cmocka_unit_test_setup_teardown(test_prefix_cache, kv_f16_on, kv_f16_off),
        cmocka_unit_test_setup_teardown(test_batch_determinism, kv_f16_on,
                                        kv_f16_off),
        cmocka_unit_test_setup_teardown(test_lease, kv_f16_on, kv_f16_off),
    };
    return cmocka_run_group_tests_name("batcher", tests, setup, teardown);
}
