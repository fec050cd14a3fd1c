/*
 * A randomized, seeded state machine over the public batcher API only
 * (ferrox.h), checking the reliability contract from outside after every
 * call (issue 36, "finding the next ones"). Two batchers share one model;
 * the operations are random submits (text with invalid UTF-8, empty and
 * over-context prompts, token prompts, every fx_request field at its
 * limits and beyond, grammars good, bad and pathological, stop strings,
 * logit biases, leases), steps, polls, cancels, releases, leases made,
 * used and released at random times, handles passed to the other batcher,
 * allocation failures injected for a few calls, and batchers remade with
 * tiny KV budgets, step budgets and contexts.
 *
 * Checked after every call: the status is the one the header promises
 * for that input (the expectation is computed before the call); events
 * only for rows the host holds, nothing after DONE or release, exactly
 * one DONE per accepted row at every drain; each row's text is valid
 * UTF-8 and equals its tokens' pieces (fx_token_to_piece) run through
 * the U+FFFD rule and cut at the stop string the DONE names; TOKEN events
 * list the DONE's ids, before the text they carry; usage agrees with the
 * prompt (fx_tokenize) and the ids; banned tokens never appear; one row in
 * eight, replayed alone on a fresh batcher, gives the same DONE (other
 * rows, budgets, faults elsewhere and the prefix cache change nothing);
 * leases held are ready once nothing is pending; the model freed while
 * both batchers use it lives until the last one goes; and every block each
 * batcher and the model allocated is freed (counting allocator; ASan/LSan
 * too).
 *
 * The ctest run is short (fixed seed). A long run: FX_SM_SEED=<n>
 * FX_SM_OPS=<n> (or the arguments `seed ops`), see tests/README.md.
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

#include "byte_model.h"
#include "fault_alloc.h"
#include "sm_gen.h"
#include "test_util.h"
#include "text_ref.h"

static uint64_t run_seed = 36;
static long run_ops = 15000;

/* ---- bookkeeping ---- */

enum { R_LIVE, R_DONE, R_RELEASED, R_GONE };

typedef struct bslot {
    fx_batcher *b;
    fx_fault_alloc fa;
    uint64_t serial;
    uint32_t n_ctx, bt;
    int no_cache;
    uint32_t tok_cap;   /* positions one row may have: probed at create */
    int ctx_limited;    /* tok_cap is the context, not the cache */
    int faults;         /* operations left with allocations failing */
    sm_lease leases[8];
    int n_leases;
} bslot;

static fx_model *model;
static fx_fault_alloc model_fa;
static long model_baseline;
static int model_freed; /* fx_model_free called; the last batcher frees it */
static bslot bs[2];
static uint64_t next_serial = 1;
static sm_row **recs;
static size_t n_recs, cap_recs;
static sm_rng rng;
static long stats_done, stats_submit_ok, stats_submit_err, stats_solo;

static void keep_rec(sm_row *r) {
    if (n_recs == cap_recs) {
        cap_recs = cap_recs ? cap_recs * 2 : 256;
        recs = realloc(recs, cap_recs * sizeof *recs);
        if (!recs) fail_msg("out of memory in the test");
    }
    recs[n_recs++] = r;
}

/* ---- determinism ---- */

typedef struct solo_out {
    int done;
    fx_finish_reason finish;
    fx_status status;
    int32_t stop_index;
    int32_t ids[512];
    size_t n_ids;
} solo_out;

/* ferrox.h: a row's tokens depend only on its own request -- not on the
 * other rows, the step budget, prefix-cache hits or the thread count. So
 * a row that ended on its own equals the same request alone. */
static void solo_check(const bslot *s, sm_row *r, const fx_event *ev) {
    fx_batcher_params p;
    fx_batcher_params_init(&p);
    p.max_rows = 1;
    p.n_ctx = s->n_ctx;
    p.block_tokens = s->bt;
    p.flags = FX_BATCHER_NO_PREFIX_CACHE;
    fx_batcher *b = NULL;
    char err[256];
    if (fx_batcher_create(model, &p, &b, err, sizeof err) != FX_OK) fail_msg("solo: %s", err);
    /* In place: struct_size may name the larger struct around it. */
    solo_out out = {0};
    r->solo->big.r.user = &out;
    fx_row *row;
    fx_status st = fx_submit(b, &r->solo->big.r, &row);
    if (st != FX_OK) fail_msg("row %zu alone: %s", r->id, fx_status_str(st));
    while (fx_batcher_pending(b) > 0) {
        if (fx_step(b) != FX_OK) fail_msg("row %zu alone: step", r->id);
        fx_event e;
        while (fx_poll(b, &e))
            if (e.type == FX_EVENT_DONE) {
                out.done = 1, out.finish = e.finish, out.status = e.status;
                out.stop_index = e.stop_index;
                out.n_ids = e.n_tokens < 512 ? e.n_tokens : 512;
                memcpy(out.ids, e.tokens, out.n_ids * sizeof *out.ids);
            }
    }
    fx_batcher_free(b);
    stats_solo++;
    if (!out.done || out.finish != ev->finish || out.status != ev->status ||
        out.stop_index != ev->stop_index || out.n_ids != ev->n_tokens ||
        (ev->n_tokens && memcmp(out.ids, ev->tokens, ev->n_tokens * sizeof *ev->tokens)))
        fail_msg("row %zu (%s) differs from its run alone: finish %d/%d, %zu/%zu tokens",
                 r->id, r->solo->what, ev->finish, out.finish, ev->n_tokens, out.n_ids);
}

/* ---- events ---- */

static void on_event(bslot *s, const fx_event *ev) {
    sm_row *r = ev->user;
    if (!r || r->magic != SM_ROW_MAGIC)
        fail_msg("event type %d with a user pointer the host never gave", ev->type);
    if (r->serial != s->serial)
        fail_msg("row %zu of batcher %llu got an event from batcher %llu", r->id,
                 (unsigned long long)r->serial, (unsigned long long)s->serial);
    if (r->state == R_RELEASED) fail_msg("row %zu: event %d after release", r->id, ev->type);
    if (r->state != R_LIVE) fail_msg("row %zu: event %d after DONE", r->id, ev->type);
    if (ev->row != r->row) fail_msg("row %zu: event carries another handle", r->id);
    if (s->faults) r->faulted = 1;
    switch (ev->type) {
    case FX_EVENT_TEXT: sm_row_text(r, ev, model); break;
    case FX_EVENT_TOKEN: sm_row_token(r, ev, model); break;
    case FX_EVENT_DONE:
        sm_row_done(r, ev, model, s->n_ctx, s->bt, s->no_cache);
        if (r->solo && !(r->faulted && ev->finish == FX_FINISH_ERROR) &&
            ev->finish != FX_FINISH_CANCELLED)
            solo_check(s, r, ev);
        r->state = R_DONE;
        stats_done++;
        break;
    default: fail_msg("row %zu: event type %d", r->id, ev->type);
    }
}

/* fx_poll, or fx_poll_sized, whose 0 must then say "nothing queued". */
static void poll_some(bslot *s, long max) {
    fx_event ev;
    int sized = (int)sm_below(&rng, 2);
    for (long i = 0; max < 0 || i < max; i++) {
        fx_status st = FX_OK;
        int got = sized ? fx_poll_sized(s->b, &ev, sizeof ev, &st) : fx_poll(s->b, &ev);
        if (sized && st != FX_OK) fail_msg("fx_poll_sized: %d, %s", got, fx_status_str(st));
        if (!got) return;
        on_event(s, &ev);
    }
}

/* ---- faults ---- */

static void faults_on(bslot *s) {
    s->faults = 1 + (int)sm_below(&rng, 4);
    fx_fault_fail_next(&s->fa, (int)sm_below(&rng, 2));
    for (size_t i = 0; i < n_recs; i++)
        if (recs[i]->serial == s->serial && recs[i]->state == R_LIVE) recs[i]->faulted = 1;
}

static void faults_tick(bslot *s) {
    if (s->faults && --s->faults == 0) fx_fault_stop(&s->fa);
}

/* ---- batchers ---- */

/* The largest prompt (with max_tokens 1) the cache takes: everything the
 * test expects of NO_ROOM follows from it. */
static void probe_capacity(bslot *s) {
    uint32_t lo = 0, hi = s->n_ctx - 1;
    int32_t *ids = calloc(s->n_ctx, sizeof *ids);
    if (!ids) fail_msg("out of memory in the test");
    for (uint32_t i = 0; i < s->n_ctx; i++) ids[i] = FX_BM_BYTE0 + 'a';
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo + 1) / 2;
        fx_request q;
        fx_request_init(&q);
        q.prompt_tokens = ids;
        q.n_prompt_tokens = mid;
        q.max_tokens = 1;
        fx_row *row = NULL;
        fx_status st = fx_submit(s->b, &q, &row);
        if (st == FX_OK) {
            assert_int_equal(fx_row_release(s->b, row), FX_OK);
            lo = mid;
        } else {
            if (st != FX_ERR_NO_ROOM)
                fail_msg("probe of %u tokens: %s", mid, fx_batcher_errmsg(s->b));
            hi = mid - 1;
        }
    }
    free(ids);
    s->tok_cap = lo + 1;
    s->ctx_limited = s->tok_cap == s->n_ctx;
    /* A cache holds whole blocks: below the context, the limit is one. */
    if (!s->ctx_limited && s->tok_cap % s->bt != 0)
        fail_msg("the cache takes %u positions, not a multiple of the block "
                 "size %u", s->tok_cap, s->bt);
}

static void free_batcher(bslot *s) {
    if (!s->b) return;
    for (size_t i = 0; i < n_recs; i++)
        if (recs[i]->serial == s->serial && recs[i]->state == R_LIVE)
            recs[i]->state = R_GONE;
    fx_batcher_free(s->b);
    s->b = NULL;
    if (s->fa.live != 0)
        fail_msg("batcher %llu leaked %ld blocks", (unsigned long long)s->serial,
                 s->fa.live);
    /* The batcher handle itself is the model allocator's: one block per
     * batcher still alive. */
    long alive = (bs[0].b != NULL) + (bs[1].b != NULL);
    if (model_freed && alive == 0) {
        if (model_fa.live != 0)
            fail_msg("the model's deferred free left %ld blocks", model_fa.live);
    } else if (model_fa.live != model_baseline + alive)
        fail_msg("the model's allocator holds %ld blocks more than its %ld "
                 "batchers after a batcher was freed",
                 model_fa.live - model_baseline - alive, alive);
    s->n_leases = 0;
}

static void make_batcher(bslot *s) {
    free_batcher(s);
    memset(&s->fa, 0, sizeof s->fa);
    fx_batcher_params p;
    fx_batcher_params_init(&p);
    p.allocator = fx_fault_allocator(&s->fa);
    p.max_rows = 1 + (uint32_t)sm_below(&rng, 6);
    p.max_step_tokens = sm_below(&rng, 4) == 0 ? 0 : 1 + (uint32_t)sm_below(&rng, 48);
    p.n_ctx = 8 + (uint32_t)sm_below(&rng, 120);
    p.block_tokens = sm_below(&rng, 5) == 0 ? 0 : 1 + (uint32_t)sm_below(&rng, 24);
    p.flags = sm_below(&rng, 4) == 0 ? FX_BATCHER_NO_PREFIX_CACHE : 0;
    p.n_threads = 1 + (uint32_t)sm_below(&rng, 3);
    uint32_t bt = p.block_tokens ? p.block_tokens : 16;
    if (sm_below(&rng, 2)) {
        /* A tiny budget: 1 to 24 blocks (K and V, F32, plus the per-block
         * allowance fx_batcher_params documents as part of kv_bytes). */
        uint64_t per_block = 8ull * 1 * 1 * 16 * bt + 64 + 8ull * bt;
        p.kv_bytes = per_block * (1 + sm_below(&rng, 24));
    }
    char err[256];
    fx_status st = fx_batcher_create(model, &p, &s->b, err, sizeof err);
    if (st != FX_OK) fail_msg("create: %s (%s)", fx_status_str(st), err);
    s->serial = next_serial++;
    s->n_ctx = p.n_ctx;
    s->bt = bt;
    s->no_cache = (p.flags & FX_BATCHER_NO_PREFIX_CACHE) != 0;
    s->faults = 0;
    s->n_leases = 0;
    probe_capacity(s);
}

/* Steps until nothing is pending, releasing the leases if only they hold
 * the queue back; every accepted row must then have had its DONE. */
static void drain(bslot *s) {
    if (s->faults) {
        s->faults = 0;
        fx_fault_stop(&s->fa);
    }
    int released = 0;
    for (int i = 0; i < 20000 && fx_batcher_pending(s->b) > 0; i++) {
        fx_status st = fx_step(s->b);
        if (st != FX_OK) fail_msg("fx_step while draining: %s (%s)", fx_status_str(st),
                                  fx_batcher_errmsg(s->b));
        poll_some(s, -1);
        if (i == 2000 && !released) {
            for (int k = 0; k < s->n_leases; k++)
                if (!s->leases[k].released) {
                    assert_int_equal(fx_lease_release(s->b, s->leases[k].h), FX_OK);
                    s->leases[k].released = 1;
                }
            released = 1;
        }
    }
    if (fx_batcher_pending(s->b) != 0)
        fail_msg("batcher %llu: %u rows still pending after 20000 steps",
                 (unsigned long long)s->serial, fx_batcher_pending(s->b));
    poll_some(s, -1);
    for (size_t i = 0; i < n_recs; i++)
        if (recs[i]->serial == s->serial && recs[i]->state == R_LIVE)
            fail_msg("row %zu was accepted and never got its DONE", recs[i]->id);
    /* Nothing pending: every lease still held has been computed. */
    for (int k = 0; k < s->n_leases; k++)
        if (!s->leases[k].released && !fx_lease_ready(s->b, s->leases[k].h))
            fail_msg("a lease is not ready with nothing pending");
}

/* ---- operations ---- */

static void op_submit(bslot *s) {
    bslot *other = s == &bs[0] ? &bs[1] : &bs[0];
    sm_ctx c = {model, s->n_ctx, s->bt, s->tok_cap, s->ctx_limited,
                s->leases, s->n_leases, other->b ? other->leases : NULL,
                other->b ? other->n_leases : 0};
    sm_row *r = sm_row_new(n_recs, s->serial);
    sm_request q;
    unsigned expect = sm_gen_request(&rng, &c, r, &q);
    if (s->faults) expect |= SM_ST(FX_ERR_NOMEM), r->faulted = 1;
    fx_row *row = (fx_row *)(uintptr_t)0xdeadbeef;
    fx_status st = fx_submit(s->b, q.req_ptr, q.null_out ? NULL : &row);
    if (!(expect & SM_ST(st)))
        fail_msg("submit (%s): %s, expected mask 0x%x: %s", q.what,
                 fx_status_str(st), expect, fx_batcher_errmsg(s->b));
    faults_tick(s);
    if (st == FX_OK && !q.big.r.lease && sm_below(&rng, 8) == 0) {
        /* Kept, to be replayed alone when it is done. */
        r->solo = malloc(sizeof *r->solo);
        if (!r->solo) fail_msg("out of memory in the test");
        *r->solo = q;
    } else {
        sm_request_free(&q);
    }
    if (st != FX_OK) {
        if (!q.null_out && row != NULL)
            fail_msg("submit (%s) failed but left a row handle", q.what);
        if (fx_batcher_errmsg(s->b)[0] == '\0')
            fail_msg("submit (%s) failed without a message", q.what);
        sm_row_free(r);
        stats_submit_err++;
        return;
    }
    r->row = row;
    r->state = R_LIVE;
    keep_rec(r);
    stats_submit_ok++;
}

static sm_row *pick_rec(uint64_t serial, int any_batcher) {
    if (n_recs == 0) return NULL;
    for (int tries = 0; tries < 8; tries++) {
        /* Recent rows are the interesting ones. */
        size_t back = (size_t)sm_below(&rng, n_recs < 64 ? n_recs : 64);
        sm_row *r = recs[n_recs - 1 - back];
        if (any_batcher || r->serial == serial) return r;
    }
    return NULL;
}

static void op_cancel_or_release(bslot *s, int release) {
    sm_row *r = pick_rec(s->serial, 0);
    if (!r || r->state == R_GONE) return;
    fx_status st = release ? fx_row_release(s->b, r->row) : fx_cancel(s->b, r->row);
    fx_status want = r->state == R_LIVE ? FX_OK : FX_ERR_STALE_HANDLE;
    if (st != want)
        fail_msg("%s of row %zu (state %d): %s, expected %s",
                 release ? "release" : "cancel", r->id, r->state,
                 fx_status_str(st), fx_status_str(want));
    if (r->state == R_LIVE) {
        if (release) r->state = R_RELEASED;
        else r->cancel_asked = 1;
    }
}

/* A handle of the other batcher (or one made up) names no row here:
 * ferrox.h makes it FX_ERR_STALE_HANDLE. */
static void op_foreign_handle(bslot *s) {
    bslot *o = s == &bs[0] ? &bs[1] : &bs[0];
    fx_row *h;
    sm_row *r = pick_rec(o->serial, 0);
    if (r && o->b && sm_below(&rng, 4)) h = r->row;
    else h = (fx_row *)(uintptr_t)(sm_next(&rng) | 1);
    int which = (int)sm_below(&rng, 2);
    fx_status st = which ? fx_row_release(s->b, h) : fx_cancel(s->b, h);
    if (st != FX_ERR_STALE_HANDLE)
        fail_msg("%s of a handle this batcher never issued (%p): %s",
                 which ? "fx_row_release" : "fx_cancel", (void *)h, fx_status_str(st));
    if (o->b && o->n_leases > 0) {
        sm_lease *l = &o->leases[sm_below(&rng, (uint64_t)o->n_leases)];
        fx_lease_state ls = (fx_lease_state)99;
        if (fx_lease_ready(s->b, l->h) != 0 || fx_lease_pinned(s->b, l->h) != 0 ||
            fx_lease_status(s->b, l->h, &ls) != FX_ERR_STALE_HANDLE || ls != FX_LEASE_NONE)
            fail_msg("another batcher's lease reads as ready, pinned or live here");
        st = fx_lease_release(s->b, l->h);
        if (st != FX_ERR_STALE_HANDLE)
            fail_msg("fx_lease_release of another batcher's lease: %s",
                     fx_status_str(st));
    }
}

static void op_lease(bslot *s) {
    int n_live = 0;
    for (int i = 0; i < s->n_leases; i++) n_live += !s->leases[i].released;
    if (s->n_leases > 0 && (sm_below(&rng, 2) || s->n_leases == 8)) {
        sm_lease *l = &s->leases[sm_below(&rng, (uint64_t)s->n_leases)];
        int ready = fx_lease_ready(s->b, l->h), pinned = fx_lease_pinned(s->b, l->h);
        fx_lease_state ls = (fx_lease_state)99;
        fx_status lst = fx_lease_status(s->b, l->h, &ls);
        if (l->released && (ready || pinned))
            fail_msg("a released lease reads as ready %d pinned %d", ready, pinned);
        if (pinned && !ready) fail_msg("a lease pinned but not ready");
        if (pinned && s->no_cache) fail_msg("a lease pinned without the prefix cache");
        fx_lease_state want_state = l->released ? FX_LEASE_NONE
                              : pinned    ? FX_LEASE_PINNED
                              : ready     ? FX_LEASE_UNPINNED
                                          : FX_LEASE_PENDING;
        if (lst != (l->released ? FX_ERR_STALE_HANDLE : FX_OK) || ls != want_state)
            fail_msg("fx_lease_status: %s, state %d; ready %d pinned %d released %d",
                     fx_status_str(lst), ls, ready, pinned, l->released);
        fx_status st = fx_lease_release(s->b, l->h);
        fx_status want = l->released ? FX_ERR_STALE_HANDLE : FX_OK;
        if (st != want)
            fail_msg("lease release: %s, expected %s", fx_status_str(st),
                     fx_status_str(want));
        l->released = 1;
        /* Released leases stay listed a while, to be used stale. */
        if (sm_below(&rng, 3) == 0) *l = s->leases[--s->n_leases];
        return;
    }
    if (n_live >= 3) return;
    sm_ctx c = {model, s->n_ctx, s->bt, s->tok_cap, s->ctx_limited, NULL, 0, NULL, 0};
    sm_lease_req q;
    unsigned expect = sm_gen_lease(&rng, &c, &q);
    if (s->faults) expect |= SM_ST(FX_ERR_NOMEM);
    fx_lease *h = (fx_lease *)(uintptr_t)0xdeadbeef;
    fx_status st = fx_lease_create(s->b, q.text, q.len, q.flags, &h);
    if (st != FX_OK && h != NULL) fail_msg("lease (%s) failed but left a handle", q.what);
    faults_tick(s);
    if (!(expect & SM_ST(st)))
        fail_msg("lease (%s): %s, expected mask 0x%x: %s", q.what,
                 fx_status_str(st), expect, fx_batcher_errmsg(s->b));
    free(q.buf);
    if (st != FX_OK) return;
    s->leases[s->n_leases++] = (sm_lease){h, 0, q.n_tokens};
}

static void op_step(bslot *s) {
    fx_status st = fx_step(s->b);
    if (st != FX_OK && !(s->faults && st == FX_ERR_NOMEM))
        fail_msg("fx_step: %s (%s)", fx_status_str(st), fx_batcher_errmsg(s->b));
    faults_tick(s);
    poll_some(s, (long)sm_below(&rng, 6) - 1);
}

static void op_misuse(bslot *s) {
    fx_request q;
    fx_request_init(&q);
    fx_row *row = NULL;
    static const int32_t ids[] = {FX_BM_BOS, FX_BM_BYTE0 + 'a'};
    q.prompt_tokens = ids;
    q.n_prompt_tokens = 2;
    q.max_tokens = 1;
    switch (sm_below(&rng, 6)) {
    case 0: assert_int_equal(fx_submit(s->b, NULL, &row), FX_ERR_INVALID_ARG); break;
    case 1: assert_int_equal(fx_submit(NULL, &q, &row), FX_ERR_INVALID_ARG); break;
    case 2: assert_int_equal(fx_step(NULL), FX_ERR_INVALID_ARG); break;
    case 3: assert_int_equal(fx_cancel(NULL, NULL), FX_ERR_INVALID_ARG); break;
    case 4: assert_int_equal(fx_lease_create(s->b, "x", 1, 0, NULL), FX_ERR_INVALID_ARG); break;
    default: {
        fx_event ev;
        assert_int_equal(fx_poll(NULL, &ev), 0);
        assert_int_equal(fx_batcher_pending(NULL), 0);
    }
    }
}

static void run(uint64_t seed, long ops) {
    sm_seed(&rng, seed);
    make_batcher(&bs[0]);
    make_batcher(&bs[1]);
    for (long i = 0; i < ops; i++) {
        bslot *s = &bs[sm_below(&rng, 2)];
        uint64_t k = sm_below(&rng, 100);
        if (k < 30) op_submit(s);
        else if (k < 58) op_step(s);
        else if (k < 64) poll_some(s, -1);
        else if (k < 70) op_cancel_or_release(s, 0);
        else if (k < 76) op_cancel_or_release(s, 1);
        else if (k < 82) op_lease(s);
        else if (k < 86) op_foreign_handle(s);
        else if (k < 89) op_misuse(s);
        else if (k < 92) { if (!s->faults) faults_on(s); }
        else if (k < 97) drain(s);
        else if (k < 98) make_batcher(s); /* rows in flight die with it */
        else { drain(s); make_batcher(s); }
    }
    drain(&bs[0]);
    drain(&bs[1]);
    /* The model freed while both batchers use it: deferred until the last
     * batcher goes (RELIABILITY 35), and then everything of it freed. */
    sm_pieces_free();
    fx_model_free(model);
    model_freed = 1;
    free_batcher(&bs[0]);
    if (model_fa.live == 0) fail_msg("the model was freed while a batcher used it");
    free_batcher(&bs[1]);
}

static void test_state_machine(void **state) {
    (void)state;
    run(run_seed, run_ops);
    printf("seed %llu, %ld operations: %ld submits accepted, %ld refused, "
           "%ld DONE checked, %ld replayed alone\n", (unsigned long long)run_seed,
           run_ops, stats_submit_ok, stats_submit_err, stats_done, stats_solo);
    assert_true(stats_done > 0 && stats_submit_err > 0 && stats_solo > 0);
}

static char model_path[4096];

static int setup(void **state) {
    (void)state;
    snprintf(model_path, sizeof model_path, "%s", fx_test_tmp_path("sm.gguf"));
    if (fx_test_write_byte_model(model_path, 256, 7) != 0) return -1;
    fx_model_params mp;
    fx_model_params_init(&mp);
    mp.allocator = fx_fault_allocator(&model_fa);
    char err[256];
    if (fx_model_load(model_path, &mp, &model, err, sizeof err) != FX_OK) {
        fprintf(stderr, "load: %s\n", err);
        return -1;
    }
    model_baseline = model_fa.live;
    sm_pieces_init(model);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    for (size_t i = 0; i < n_recs; i++) sm_row_free(recs[i]);
    free(recs);
    sm_pieces_free();
    if (!model_freed) fx_model_free(model);
    remove(model_path);
    if (model_fa.live != 0) {
        fprintf(stderr, "the model leaked %ld blocks\n", model_fa.live);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *e;
    if ((e = getenv("FX_SM_SEED")) != NULL) run_seed = strtoull(e, NULL, 0);
    if ((e = getenv("FX_SM_OPS")) != NULL) run_ops = strtol(e, NULL, 0);
    if (argc > 1) run_seed = strtoull(argv[1], NULL, 0);
    if (argc > 2) run_ops = strtol(argv[2], NULL, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_state_machine),

    };
    return cmocka_run_group_tests_name("api_statemachine", tests, setup, teardown);
}
