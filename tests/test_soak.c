/*
 * docs/reliability.md 41, the long soak: FX_SOAK_REQUESTS requests (10,000, in
 * every build, the sanitizer one included) through batchers with
 * small KV budgets and step budgets, drawn from a pool of request recipes
 * with shared prefixes, stop strings, stop tokens, EOS, sampled and greedy
 * rows, and pinned leases that come and go; rows are cancelled and
 * released at random while queued, prefilling and decoding.
 *
 * Checked:
 * - every completed row equals its solo run (same recipe alone on a fresh
 *   batcher without the prefix cache, a lease replaced by its tokens):
 *   finish reason, stop index, token ids, text, prompt token count;
 * - a cancelled row's ids are a prefix of its solo run's and its text is
 *   exactly its tokens' pieces (held stop text released, nothing lost);
 * - a released row gets no event after the release; every other row gets
 *   exactly one DONE, last;
 * - the accounting identities every few hundred steps, and at the end of
 *   each phase: nothing queued, running or reserved, no block held by a
 *   row or a pin, every block's refcount 0 or 1 (the tree's own), the
 *   tree holds exactly the cached blocks, evicting everything returns
 *   every block to the free list, and after fx_batcher_free every block
 *   the batcher allocated is freed (a counting allocator; ASan too).
 *
 * The solo results are cached per recipe, so the whole run costs about
 * one solo run per recipe plus the soak itself.
 */
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

#include "api/api_internal.h"
#include "batcher/batcher_impl.h"
#include "fault_alloc.h"
#include "gguf_writer.h"
#include "kv/kv.h"
#include "kv/kv_impl.h"
#include "test_util.h"
#include "test_rng.h"

#ifndef FX_SOAK_REQUESTS
#define FX_SOAK_REQUESTS 10000
#endif

enum {
    N_RECIPES = 240,
    N_FAMILIES = 6,
    N_LEASES = 3,
    MAX_PROMPT = 40,
    MAX_GEN = 16,
    MAX_TEXT = 512,
    N_PHASES = 5
};

static char model_path[4096];
static fx_model *model;

/* ---- recipes: the distinct requests ---- */

static const char *const stop_pool[] = {"<t1", "5><t", "t3", "<t42>", "9>"};
static const int32_t stop_token_pool[] = {7, 19, 33, 50};
static const char *const lease_texts[N_LEASES] = {
    "<t5><t6><t7><t8> shared system words",
    "another pinned prefix <t40><t41>",
    "third: <t9><t10><t11><t12><t13><t14>"};

typedef struct recipe {
    int32_t prompt[MAX_PROMPT];
    size_t n_prompt;
    uint32_t max_tokens;
    float temperature;
    uint64_t seed;
    uint32_t flags;
    const char *stops[5];
    size_t n_stop;
    int32_t stop_tokens[4];
    size_t n_stop_tokens;
    int lease;              /* -1: none */
} recipe;

typedef struct answer {
    int32_t ids[MAX_GEN];
    size_t n_ids;
    char text[MAX_TEXT];
    size_t text_len;
    fx_finish_reason finish;
    fx_status status;
    int32_t stop_index;
    uint32_t prompt_tokens;
} answer;

static recipe recipes[N_RECIPES];
static answer solo_answer[N_RECIPES];
static int32_t lease_tokens[N_LEASES][64];
static size_t lease_n[N_LEASES];

static void make_recipes(void) {
    uint64_t s = 4242;
    int32_t family[N_FAMILIES][24];
    for (int f = 0; f < N_FAMILIES; f++)
        for (int k = 0; k < 24; k++) family[f][k] = 3 + (int32_t)(fx_test_rng_next(&s) % 61);
    for (int i = 0; i < N_RECIPES; i++) {
        recipe *r = &recipes[i];
        memset(r, 0, sizeof *r);
        r->lease = fx_test_rng_next(&s) % 4 == 0 ? (int)(fx_test_rng_next(&s) % N_LEASES) : -1;
        /* A shared prefix of its family (different lengths, so prompts
         * share whole blocks, partial blocks, or nothing), then its own
         * tokens. */
        size_t shared = r->lease >= 0 ? 0 : fx_test_rng_next(&s) % 24;
        size_t own = 1 + fx_test_rng_next(&s) % 8;
        int f = (int)(fx_test_rng_next(&s) % N_FAMILIES);
        for (size_t k = 0; k < shared; k++) r->prompt[r->n_prompt++] = family[f][k];
        for (size_t k = 0; k < own; k++)
            r->prompt[r->n_prompt++] = 3 + (int32_t)(fx_test_rng_next(&s) % 61);
        r->max_tokens = 1 + (uint32_t)(fx_test_rng_next(&s) % MAX_GEN);
        if (fx_test_rng_next(&s) % 2) {
            r->temperature = 0.8f;
            r->seed = fx_test_rng_next(&s) % 4;
        }
        if (fx_test_rng_next(&s) % 3) r->flags |= FX_REQUEST_IGNORE_EOS;
        for (size_t k = 0; k < 5; k++)
            if (fx_test_rng_next(&s) % 4 == 0) r->stops[r->n_stop++] = stop_pool[k];
        for (size_t k = 0; k < 4; k++)
            if (fx_test_rng_next(&s) % 6 == 0)
                r->stop_tokens[r->n_stop_tokens++] = stop_token_pool[k];
    }
}

static void fill_request(fx_request *req, const recipe *r, const int32_t *prompt,
                         size_t n_prompt) {
    fx_request_init(req);
    req->prompt_tokens = prompt;
    req->n_prompt_tokens = n_prompt;
    req->max_tokens = r->max_tokens;
    req->temperature = r->temperature;
    req->seed = r->seed;
    req->flags = r->flags;
    req->stop = r->stops;
    req->n_stop = r->n_stop;
    req->stop_tokens = r->stop_tokens;
    req->n_stop_tokens = r->n_stop_tokens;
}

/* ---- collecting events ---- */

enum { ST_FREE = 0, ST_LIVE, ST_DONE, ST_RELEASED };

typedef struct job {
    int recipe;
    int state;
    fx_row *row;
    answer got;
    int events_after_release;
} job;

static void on_event(const fx_event *ev) {
    job *j = ev->user;
    assert_non_null(j);
    if (j->state != ST_LIVE) {
        /* nothing after DONE, nothing after release */
        fail_msg("event %d for a row in state %d", ev->type, j->state);
    }
    assert_true(ev->row == j->row);
    if (ev->type == FX_EVENT_TEXT) {
        if (j->got.text_len + ev->text_len > MAX_TEXT) fail_msg("text too long");
        memcpy(j->got.text + j->got.text_len, ev->text, ev->text_len);
        j->got.text_len += ev->text_len;
        return;
    }
    assert_int_equal(ev->type, FX_EVENT_DONE);
    assert_true(ev->n_tokens <= MAX_GEN);
    memcpy(j->got.ids, ev->tokens, ev->n_tokens * sizeof(int32_t));
    j->got.n_ids = ev->n_tokens;
    j->got.finish = ev->finish;
    j->got.status = ev->status;
    j->got.stop_index = ev->stop_index;
    j->got.prompt_tokens = ev->usage.prompt_tokens;
    assert_int_equal(ev->usage.completion_tokens, ev->n_tokens);
    j->state = ST_DONE;
}

static void poll_all(fx_batcher *b) {
    fx_event ev;
    while (fx_poll(b, &ev)) on_event(&ev);
}

/* ---- solo runs ---- */

static void solo(int ri) {
    const recipe *r = &recipes[ri];
    int32_t prompt[MAX_PROMPT + 64];
    size_t n = 0;
    if (r->lease >= 0) {
        memcpy(prompt, lease_tokens[r->lease], lease_n[r->lease] * sizeof *prompt);
        n = lease_n[r->lease];
    }
    memcpy(prompt + n, r->prompt, r->n_prompt * sizeof *prompt);
    n += r->n_prompt;
    fx_batcher_params p;
    fx_batcher_params_init(&p);
    p.max_rows = 1;
    p.n_ctx = 128;
    p.flags = FX_BATCHER_NO_PREFIX_CACHE;
    fx_batcher *b = NULL;
    char err[256];
    assert_int_equal(fx_batcher_create(model, &p, &b, err, sizeof err), FX_OK);
    fx_request req;
    fill_request(&req, r, prompt, n);
    job j;
    memset(&j, 0, sizeof j);
    j.state = ST_LIVE;
    req.user = &j;
    assert_int_equal(fx_submit(b, &req, &j.row), FX_OK);
    for (int g = 0; g < 1000 && fx_batcher_pending(b); g++) {
        assert_int_equal(fx_step(b), FX_OK);
        poll_all(b);
    }
    poll_all(b);
    assert_int_equal(j.state, ST_DONE);
    assert_true(j.got.finish != FX_FINISH_ERROR && j.got.finish != FX_FINISH_CANCELLED);
    solo_answer[ri] = j.got;
    fx_batcher_free(b);
}

/* ---- checks ---- */

/* The pieces of ids, back to back: what a row streams for them. */
static size_t pieces(const int32_t *ids, size_t n, char *out, size_t cap) {
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        size_t need = 0;
        assert_int_equal(fx_token_to_piece(model, ids[i], 0, out + len, cap - len, &need),
                         FX_OK);
        len += need;
    }
    return len;
}

static void check_job(const job *j, int phase, size_t index) {
    const answer *want = &solo_answer[j->recipe];
    const answer *got = &j->got;
    if (got->finish == FX_FINISH_CANCELLED) {
        /* A prefix of the solo run; its text is all of its tokens' text
         * (text held back for a stop that never came is released). */
        if (got->n_ids > want->n_ids ||
            memcmp(got->ids, want->ids, got->n_ids * sizeof(int32_t)))
            fail_msg("phase %d job %zu (recipe %d): cancelled row is not a "
                     "prefix of its solo run",
                     phase, index, j->recipe);
        char text[MAX_TEXT];
        size_t len = pieces(got->ids, got->n_ids, text, sizeof text);
        if (len != got->text_len || memcmp(text, got->text, len))
            fail_msg("phase %d job %zu: cancelled row's text %.*s is not its "
                     "tokens' %.*s",
                     phase, index, (int)got->text_len, got->text, (int)len, text);
        return;
    }
    if (got->finish != want->finish || got->stop_index != want->stop_index ||
        got->n_ids != want->n_ids ||
        memcmp(got->ids, want->ids, want->n_ids * sizeof(int32_t)) ||
        got->text_len != want->text_len ||
        memcmp(got->text, want->text, want->text_len) ||
        got->prompt_tokens != want->prompt_tokens)
        fail_msg("phase %d job %zu (recipe %d): finish %d/%d stop %d/%d ids "
                 "%zu/%zu text '%.*s'/'%.*s' prompt %u/%u: differs from its "
                 "solo run",
                 phase, index, j->recipe, got->finish, want->finish,
                 got->stop_index, want->stop_index, got->n_ids, want->n_ids,
                 (int)got->text_len, got->text, (int)want->text_len, want->text,
                 got->prompt_tokens, want->prompt_tokens);
}

static void check_accounting(fx_batcher *b, const char *when, int phase) {
    fx_error err;
    if (fx_batcher_impl_check(fx_batcher_get_impl(b), &err) != FX_OK)
        fail_msg("phase %d, %s: %s", phase, when, err.message);
}

/* Everything at baseline once no row runs and no lease is held. */
static void check_baseline(fx_batcher *b, int phase) {
    fx_batcher_impl *impl = fx_batcher_get_impl(b);
    check_accounting(b, "end", phase);
    fx_batcher_stats st;
    fx_batcher_impl_stats(impl, &st);
    assert_int_equal(st.queued, 0);
    assert_int_equal(st.running, 0);
    assert_int_equal(st.blocks_reserved, 0);
    assert_int_equal(st.blocks_pinned, 0);
    assert_int_equal(st.blocks_free + st.blocks_cached, st.blocks_total);
    fx_kv_stats ks;
    fx_kv_stats_get(impl->kv, &ks);
    assert_int_equal(ks.row, 0);
    assert_int_equal(ks.leases, 0);
    assert_int_equal(ks.tree_nodes, ks.cached);
    /* Radix refcounts: the tree's own reference on a cached block, no
     * more; nothing on a free one. */
    uint32_t held = 0;
    for (uint32_t blk = 0; blk < ks.total; blk++) {
        uint32_t rc = fx_kv_block_refcount(impl->kv, blk);
        if (rc > 1) fail_msg("phase %d: block %u has refcount %u", phase, blk, rc);
        held += rc;
    }
    assert_int_equal(held, ks.cached);
    /* And the tree gives every block back. */
    uint32_t evicted = 0;
    fx_kv_evict(impl->kv, ks.total, &evicted);
    assert_int_equal(evicted, ks.cached);
    fx_kv_stats_get(impl->kv, &ks);
    assert_int_equal(ks.free, ks.total);
    check_accounting(b, "after evicting everything", phase);
}

/* ---- the soak ---- */

typedef struct phase_params {
    uint32_t max_rows, step_tokens, block_tokens, kv_blocks, flags, n_threads;
} phase_params;

static const phase_params phases[N_PHASES] = {
    {4, 8, 8, 12, 0, 1},                         /* tight budget */
    {8, 3, 4, 24, 0, 2},                         /* tiny steps, 2 threads */
    {2, 64, 16, 0, FX_BATCHER_NO_PREFIX_CACHE, 1}, /* no cache */
    {6, 1, 16, 6, 0, 1},                         /* one token a step */
    {16, 32, 8, 14, 0, 1},                       /* many rows, few blocks */
};

static fx_batcher *make_batcher(const phase_params *pp, fx_fault_alloc *counter) {
    fx_batcher_params p;
    fx_batcher_params_init(&p);
    p.max_rows = pp->max_rows;
    p.max_step_tokens = pp->step_tokens;
    p.block_tokens = pp->block_tokens;
    p.n_ctx = 128;
    p.flags = pp->flags;
    p.n_threads = pp->n_threads;
    p.allocator = fx_fault_allocator(counter);
    if (pp->kv_blocks) {
        fx_model_info info;
        fx_model_info_init(&info);
        fx_model_get_info(model, &info);
        /* the KV of one block plus the pool's per-block bookkeeping */
        uint64_t per_block = (uint64_t)info.n_layer * 2 * pp->block_tokens *
                                 (info.n_embd / info.n_head) * info.n_head_kv *
                                 sizeof(float) +
                             64 + 8 * (uint64_t)pp->block_tokens;
        p.kv_bytes = pp->kv_blocks * per_block;
    }
    fx_batcher *b = NULL;
    char err[256];
    if (fx_batcher_create(model, &p, &b, err, sizeof err) != FX_OK)
        fail_msg("create: %s", err);
    return b;
}

static void test_soak(void **state) {
    (void)state;
    const size_t per_phase = (FX_SOAK_REQUESTS + N_PHASES - 1) / N_PHASES;
    static job jobs[(FX_SOAK_REQUESTS + N_PHASES - 1) / N_PHASES];
    size_t total = 0, completed = 0, cancelled = 0, released = 0, leases_made = 0;
    double t0 = (double)clock() / CLOCKS_PER_SEC;
    uint64_t s = 99;
    for (int phase = 0; phase < N_PHASES; phase++) {
        const phase_params *pp = &phases[phase];
        fx_fault_alloc counter = {0};
        fx_batcher *b = make_batcher(pp, &counter);
        fx_batcher_stats st0;
        fx_batcher_impl_stats(fx_batcher_get_impl(b), &st0);
        memset(jobs, 0, sizeof jobs);
        fx_lease *lease[N_LEASES] = {NULL, NULL, NULL};
        size_t next = 0;
        for (long guard = 0;; guard++) {
            if (guard > 2000000) fail_msg("phase %d does not finish", phase);
            uint64_t dice = fx_test_rng_next(&s);
            /* Arrivals: 0 to 3 a step, so the queue grows and shrinks. */
            for (uint64_t k = dice % 4; k > 0 && next < per_phase; k--) {
                job *j = &jobs[next];
                j->recipe = (int)(fx_test_rng_next(&s) % N_RECIPES);
                const recipe *r = &recipes[j->recipe];
                fx_request req;
                fill_request(&req, r, r->prompt, r->n_prompt);
                if (r->lease >= 0 && lease[r->lease]) req.lease = lease[r->lease];
                else if (r->lease >= 0) {
                    /* Its lease is not held right now: send the lease's
                     * tokens in the prompt instead -- the same sequence. */
                    static int32_t full[MAX_PROMPT + 64];
                    memcpy(full, lease_tokens[r->lease],
                           lease_n[r->lease] * sizeof *full);
                    memcpy(full + lease_n[r->lease], r->prompt,
                           r->n_prompt * sizeof *full);
                    req.prompt_tokens = full;
                    req.n_prompt_tokens = lease_n[r->lease] + r->n_prompt;
                }
                req.user = j;
                fx_status sst = fx_submit(b, &req, &j->row);
                if (sst != FX_OK)
                    fail_msg("phase %d: submit: %s: %s", phase,
                             fx_status_str(sst), fx_batcher_errmsg(b));
                j->state = ST_LIVE;
                next++;
            }
            /* Leases come and go; rows already using one are unaffected. */
            if (dice % 53 == 0) {
                int li = (int)(fx_test_rng_next(&s) % N_LEASES);
                if (lease[li]) {
                    assert_int_equal(fx_lease_release(b, lease[li]), FX_OK);
                    lease[li] = NULL;
                } else {
                    assert_int_equal(fx_lease_create(b, lease_texts[li],
                                                     strlen(lease_texts[li]),
                                                     0, &lease[li]),
                                     FX_OK);
                    leases_made++;
                }
            }
            /* Cancels and releases of random live rows, wherever they are:
             * queued, prefilling, decoding, or finished and not polled. */
            if (next > 0 && dice % 7 == 0) {
                job *v = &jobs[fx_test_rng_next(&s) % next];
                if (v->state == ST_LIVE) {
                    if (dice % 5 == 0) {
                        assert_int_equal(fx_row_release(b, v->row), FX_OK);
                        assert_int_equal(fx_row_release(b, v->row),
                                         FX_ERR_STALE_HANDLE);
                        v->state = ST_RELEASED;
                    } else {
                        assert_int_equal(fx_cancel(b, v->row), FX_OK);
                    }
                }
            }
            assert_int_equal(fx_step(b), FX_OK);
            /* Sometimes let events pile up over a few steps. */
            if (dice % 3) poll_all(b);
            if (guard % 256 == 0) check_accounting(b, "mid-run", phase);
            if (next == per_phase && fx_batcher_pending(b) == 0) break;
        }
        poll_all(b);
        for (int li = 0; li < N_LEASES; li++)
            if (lease[li]) assert_int_equal(fx_lease_release(b, lease[li]), FX_OK);
        /* a released lease's pin row may still have to leave */
        for (int g = 0; g < 1000 && fx_batcher_pending(b); g++) {
            assert_int_equal(fx_step(b), FX_OK);
            poll_all(b);
        }
        assert_int_equal(fx_batcher_pending(b), 0);
        for (size_t i = 0; i < per_phase; i++) {
            job *j = &jobs[i];
            if (j->state == ST_RELEASED) {
                released++;
                continue;
            }
            if (j->state != ST_DONE)
                fail_msg("phase %d job %zu: no DONE (state %d)", phase, i, j->state);
            if (j->got.finish == FX_FINISH_ERROR)
                fail_msg("phase %d job %zu failed: %s", phase, i,
                         fx_status_str(j->got.status));
            if (!solo_answer[j->recipe].finish) solo(j->recipe);
            check_job(j, phase, i);
            if (j->got.finish == FX_FINISH_CANCELLED) cancelled++;
            else completed++;
        }
        total += per_phase;
        check_baseline(b, phase);
        fx_batcher_free(b);
        if (counter.live != 0)
            fail_msg("phase %d: %ld blocks of the batcher leaked", phase, counter.live);
        (void)st0;
    }
    double secs = (double)clock() / CLOCKS_PER_SEC - t0;
    print_message("soak: %zu requests: %zu completed (each equal to its solo "
                  "run), %zu cancelled, %zu released; %zu leases; %.1f s CPU\n",
                  total, completed, cancelled, released, leases_made, secs);
    assert_true(total >= FX_SOAK_REQUESTS);
    /* The mix did happen. */
    assert_true(completed > total / 3);
    assert_true(cancelled > 0 && released > 0 && leases_made > 0);
}

/* The check the soak leans on says what broke: a block whose refcount no
 * lease accounts for is named (the message was once empty, formatted
 * from itself). */
static void test_check_names_violation(void **state) {
    (void)state;
    fx_batcher *b = make_batcher(&phases[0], &(fx_fault_alloc){0});
    fx_batcher_impl *impl = fx_batcher_get_impl(b);
    fx_error err;
    fx_error_clear(&err);
    assert_int_equal(fx_batcher_impl_check(impl, &err), FX_OK);
    struct fx_kv *kv = impl->kv;
    uint32_t before = kv->row_refs[0];
    kv->row_refs[0]++; /* a leaked reference */
    assert_int_equal(fx_batcher_impl_check(impl, &err), FX_ERR_INTERNAL);
    if (!strstr(err.message, "kv check: "))
        fail_msg("the check's message does not say what broke: '%s'", err.message);
    kv->row_refs[0] = before;
    assert_int_equal(fx_batcher_impl_check(impl, &err), FX_OK);
    fx_batcher_free(b);
}

static int setup(void **state) {
    (void)state;
    /* As small as a Llama gets: the soak is about bookkeeping. */
    snprintf(model_path, sizeof model_path, "%s", fx_test_tmp_path("soak.gguf"));
    int rc = gw_write_tiny_model(model_path, 128, 7);
    if (rc != 0) return rc;
    char err[256];
    if (fx_model_load(model_path, NULL, &model, err, sizeof err) != FX_OK) {
        fprintf(stderr, "load: %s\n", err);
        return -1;
    }
    make_recipes();
    for (int i = 0; i < N_LEASES; i++)
        if (fx_tokenize(model, lease_texts[i], strlen(lease_texts[i]),
                        FX_TOKENIZE_ADD_SPECIAL, lease_tokens[i], 64,
                        &lease_n[i]) != FX_OK) {
            fprintf(stderr, "lease %d: %zu tokens\n", i, lease_n[i]);
            return -1;
        }
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
        cmocka_unit_test(test_check_names_violation),
        cmocka_unit_test(test_soak),
    };
    return cmocka_run_group_tests_name("soak", tests, setup, teardown);
}
