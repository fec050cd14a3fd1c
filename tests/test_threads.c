/*
 * The calls ferrox.h documents as safe from several threads, hammered from
 * several threads (run under ThreadSanitizer by the TSan stage of .ci/run;
 * in the other builds it is an ordinary functional test):
 *
 * - fx_cancel, "from any thread at any time, including while another
 *   thread is inside fx_step": three threads cancel handles of live rows,
 *   of rows that finished and were reaped, of released rows, never-issued
 *   values and NULL, while the owner thread submits, steps (with one and
 *   with two worker threads), polls and releases. A cancel returns FX_OK
 *   or FX_ERR_STALE_HANDLE only; a stale handle never reaches the row that
 *   reuses its slot (rows whose handles the cancellers never see must not
 *   end cancelled); every row the owner keeps gets exactly one DONE; the
 *   accounting is at baseline at the end. Half the rows sample with a
 *   temperature, which two threads share out within a step.
 * - the tokenizer calls, which "may run at the same time on one model from
 *   several threads": four threads tokenize, detokenize and look up
 *   tokens on one model, while the owner thread steps a batcher over the
 *   same model; every result equals the single-threaded one.
 * - batchers over one model, "each on its own thread": three generate at
 *   once while their forward passes copy the weights a slice a step
 *   (model.h, fx_weights_view_step), sharing the work; each row's tokens
 *   equal those computed from the file's mapping alone. Once with F32
 *   weights, once with Q4_K and with Q8_0 (their copies are other code).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <ferrox.h>

#include "api/api_internal.h"
#include "batcher/batcher.h"
#include "gguf_quant.h"
#include "gguf_writer.h"
#include "test_util.h"
#include "test_rng.h"

#ifndef FX_THREADS_ROWS
#define FX_THREADS_ROWS 1500
#endif

enum { N_CANCELLERS = 3, RING = 64, N_TOKENIZERS = 4 };

static char model_path[4096];
static fx_model *model;

/* ---- fx_cancel from other threads ---- */

typedef struct shared {
    fx_batcher *b;
    _Atomic uintptr_t ring[RING]; /* handles the cancellers pick from */
    atomic_int stop;
    atomic_long ok, stale, other;
} shared;

typedef struct canceller {
    shared *sh;
    uint64_t seed;
} canceller;

static void *cancel_loop(void *arg) {
    canceller *c = arg;
    shared *sh = c->sh;
    uint64_t s = c->seed;
    while (!atomic_load(&sh->stop)) {
        uint64_t dice = fx_test_rng_next(&s);
        fx_row *h;
        if (dice % 16 == 0) h = NULL;
        else if (dice % 16 == 1) h = (fx_row *)(uintptr_t)fx_test_rng_next(&s); /* garbage */
        else h = (fx_row *)atomic_load(&sh->ring[dice % RING]);
        fx_status st = fx_cancel(sh->b, h);
        if (st == FX_OK) atomic_fetch_add(&sh->ok, 1);
        else if (st == FX_ERR_STALE_HANDLE) atomic_fetch_add(&sh->stale, 1);
        else atomic_fetch_add(&sh->other, 1);
    }
    return NULL;
}

enum { R_NONE = 0, R_LIVE, R_DONE, R_RELEASED };

typedef struct rowrec {
    fx_row *row;
    int exposed;    /* its handle went into the ring */
    int state;
    int done;
    fx_finish_reason finish;
} rowrec;

static void cancel_hammer(uint32_t n_threads, uint64_t seed) {
    fx_batcher_params p;
    fx_batcher_params_init(&p);
    p.max_rows = 6;
    p.max_step_tokens = 12;
    p.n_ctx = 64;
    p.block_tokens = 8;
    p.n_threads = n_threads;
    static shared sh;
    memset(&sh, 0, sizeof sh);
    char err[256];
    assert_int_equal(fx_batcher_create(model, &p, &sh.b, err, sizeof err), FX_OK);
    fx_batcher *b = sh.b;
    static rowrec rec[FX_THREADS_ROWS];
    memset(rec, 0, sizeof rec);

    pthread_t th[N_CANCELLERS];
    canceller cs[N_CANCELLERS];
    for (int i = 0; i < N_CANCELLERS; i++) {
        cs[i] = (canceller){&sh, seed * 31 + (uint64_t)i};
        assert_int_equal(pthread_create(&th[i], NULL, cancel_loop, &cs[i]), 0);
    }

    uint64_t s = seed;
    size_t next = 0;
    fx_lease *lease = NULL;
    long owner_stale_checks = 0;
    for (long guard = 0; guard < 1000000; guard++) {
        uint64_t dice = fx_test_rng_next(&s);
        for (uint64_t k = dice % 3; k > 0 && next < FX_THREADS_ROWS; k--) {
            rowrec *r = &rec[next];
            int32_t prompt[12];
            size_t n = 1 + fx_test_rng_next(&s) % 12;
            for (size_t i = 0; i < n; i++) prompt[i] = 3 + (int32_t)(fx_test_rng_next(&s) % 60);
            fx_request req;
            fx_request_init(&req);
            req.prompt_tokens = prompt;
            req.n_prompt_tokens = n;
            req.max_tokens = 1 + (uint32_t)(fx_test_rng_next(&s) % 10);
            /* Half the rows sample with a temperature: with two threads
             * those of a step are sampled on both at once (step.c). */
            req.temperature = (dice >> 8) % 2 ? 0.8f : 0.0f;
            req.seed = next;
            req.flags = FX_REQUEST_IGNORE_EOS;
            req.lease = dice % 4 == 0 ? lease : NULL;
            req.user = r;
            assert_int_equal(fx_submit(b, &req, &r->row), FX_OK);
            r->state = R_LIVE;
            /* Two rows in three are exposed to the cancellers; the rest
             * must never end cancelled, though stale handles of their
             * slot's earlier rows are being cancelled all the time. */
            r->exposed = fx_test_rng_next(&s) % 3 != 0;
            if (r->exposed)
                atomic_store(&sh.ring[fx_test_rng_next(&s) % RING], (uintptr_t)r->row);
            next++;
        }
        /* A pinned lease now and then: its internal row lives in the same
         * slots the cancellers' stale handles point at. */
        if (dice % 97 == 0) {
            if (lease) assert_int_equal(fx_lease_release(b, lease), FX_OK);
            lease = NULL;
            if (dice % 2)
                assert_int_equal(fx_lease_create(b, "<t5><t6> pinned", 15, 0, &lease),
                                 FX_OK);
        }
        if (next > 0 && dice % 11 == 0) {
            rowrec *v = &rec[fx_test_rng_next(&s) % next];
            if (v->state == R_LIVE) {
                assert_int_equal(fx_row_release(b, v->row), FX_OK);
                v->state = R_RELEASED;
                /* and its now-stale handle joins the ring */
                atomic_store(&sh.ring[fx_test_rng_next(&s) % RING], (uintptr_t)v->row);
            }
        }
        assert_int_equal(fx_step(b), FX_OK);
        fx_event ev;
        while (fx_poll(b, &ev)) {
            rowrec *r = ev.user;
            assert_int_equal(r->state, R_LIVE);
            if (ev.type != FX_EVENT_DONE) continue;
            r->done++;
            r->finish = ev.finish;
            r->state = R_DONE;
            /* Reaped: stale for everybody, at once. */
            assert_int_equal(fx_cancel(b, r->row), FX_ERR_STALE_HANDLE);
            owner_stale_checks++;
        }
        if (next == FX_THREADS_ROWS && fx_batcher_pending(b) == 0) break;
    }
    if (lease) assert_int_equal(fx_lease_release(b, lease), FX_OK);
    for (int g = 0; g < 100 && fx_batcher_pending(b); g++)
        assert_int_equal(fx_step(b), FX_OK);
    atomic_store(&sh.stop, 1);
    for (int i = 0; i < N_CANCELLERS; i++) assert_int_equal(pthread_join(th[i], NULL), 0);

    long cancelled = 0;
    for (size_t i = 0; i < next; i++) {
        rowrec *r = &rec[i];
        if (r->state == R_RELEASED) {
            assert_int_equal(r->done, 0);
            continue;
        }
        if (r->state != R_DONE || r->done != 1)
            fail_msg("row %zu: state %d, %d DONE events", i, r->state, r->done);
        if (r->finish == FX_FINISH_CANCELLED) {
            if (!r->exposed)
                fail_msg("row %zu was cancelled through someone else's stale "
                         "handle", i);
            cancelled++;
        } else {
            assert_true(r->finish == FX_FINISH_LENGTH);
        }
    }
    assert_int_equal(atomic_load(&sh.other), 0);
    assert_true(atomic_load(&sh.ok) > 0);
    assert_true(atomic_load(&sh.stale) > 0);
    assert_true(cancelled > 0);
    fx_error cerr;
    if (fx_batcher_impl_check(fx_batcher_get_impl(b), &cerr) != FX_OK)
        fail_msg("%s", cerr.message);
    fx_batcher_stats st;
    fx_batcher_impl_stats(fx_batcher_get_impl(b), &st);
    assert_int_equal(st.running + st.queued, 0);
    assert_int_equal(st.blocks_reserved, 0);
    print_message("n_threads %u: %zu rows, %ld cancelled; cancels: %ld ok, %ld "
                  "stale; %ld owner checks\n",
                  n_threads, next, cancelled, atomic_load(&sh.ok),
                  atomic_load(&sh.stale), owner_stale_checks);
    fx_batcher_free(b);
}

static void test_cancel_from_threads(void **state) {
    (void)state;
    cancel_hammer(1, 11);
}

static void test_cancel_from_threads_while_workers_run(void **state) {
    (void)state;
    cancel_hammer(2, 12);
}

/* ---- the tokenizer from several threads ---- */

static const char *const texts[] = {
    "Hello world", "<t5><t6> and <t60>", "\xc3\xa9t\xc3\xa9 \xe4\xb8\xad",
    "<s> special </s>", "", "a much longer text, repeated, repeated, repeated",
    "\xff\xfe invalid \xe4\xb8", "12345 67890"};
enum { N_TEXTS = sizeof texts / sizeof *texts, MAX_IDS = 128 };

typedef struct tok_ref {
    int32_t ids[MAX_IDS];
    size_t n;
    char text[512];
    size_t text_len;
} tok_ref;

typedef struct tok_job {
    const fx_model *m;
    const tok_ref *ref;
    uint64_t seed;
    int rounds;
    long mismatches;
} tok_job;

static void reference(const fx_model *m, int i, tok_ref *out) {
    assert_int_equal(fx_tokenize(m, texts[i], strlen(texts[i]),
                                 FX_TOKENIZE_ADD_SPECIAL | FX_TOKENIZE_PARSE_SPECIAL,
                                 out->ids, MAX_IDS, &out->n),
                     FX_OK);
    assert_int_equal(fx_detokenize(m, out->ids, out->n, FX_DETOKENIZE_RENDER_SPECIAL,
                                   out->text, sizeof out->text, &out->text_len),
                     FX_OK);
}

static void *tokenize_loop(void *arg) {
    tok_job *j = arg;
    uint64_t s = j->seed;
    for (int round = 0; round < j->rounds; round++) {
        int i = (int)(fx_test_rng_next(&s) % N_TEXTS);
        const tok_ref *want = &j->ref[i];
        int32_t ids[MAX_IDS];
        size_t n = 0;
        char text[512];
        size_t len = 0;
        if (fx_tokenize(j->m, texts[i], strlen(texts[i]),
                        FX_TOKENIZE_ADD_SPECIAL | FX_TOKENIZE_PARSE_SPECIAL, ids,
                        MAX_IDS, &n) != FX_OK ||
            n != want->n || memcmp(ids, want->ids, n * sizeof *ids))
            j->mismatches++;
        if (fx_detokenize(j->m, ids, n, FX_DETOKENIZE_RENDER_SPECIAL, text,
                          sizeof text, &len) != FX_OK ||
            len != want->text_len || memcmp(text, want->text, len))
            j->mismatches++;
        uint32_t nv = fx_model_vocab_size(j->m);
        int32_t t = (int32_t)(fx_test_rng_next(&s) % nv);
        char piece[64];
        size_t plen;
        fx_status st = fx_token_to_piece(j->m, t, FX_DETOKENIZE_RENDER_SPECIAL,
                                         piece, sizeof piece, &plen);
        if (st != FX_OK && st != FX_ERR_BUFFER_TOO_SMALL) j->mismatches++;
        (void)fx_token_is_eog(j->m, t);
        (void)fx_token_type(j->m, t);
        (void)fx_model_special_token(j->m, FX_TOKEN_BOS);
    }
    return NULL;
}

static void hammer_tokenizer(const fx_model *m, fx_batcher *b) {
    tok_ref ref[N_TEXTS];
    for (int i = 0; i < N_TEXTS; i++) reference(m, i, &ref[i]);
    pthread_t th[N_TOKENIZERS];
    tok_job jobs[N_TOKENIZERS];
    for (int i = 0; i < N_TOKENIZERS; i++) {
        jobs[i] = (tok_job){m, ref, 77 + (uint64_t)i, 300, 0};
        assert_int_equal(pthread_create(&th[i], NULL, tokenize_loop, &jobs[i]), 0);
    }
    /* Meanwhile the owner thread runs rows over the same model. */
    int rows = 0;
    if (b) {
        for (int k = 0; k < 40; k++) {
            int32_t prompt[6] = {5, 6, 7, 8, 9, (int32_t)(10 + k % 40)};
            fx_request req;
            fx_request_init(&req);
            req.prompt_tokens = prompt;
            req.n_prompt_tokens = 6;
            req.max_tokens = 6;
            req.flags = FX_REQUEST_IGNORE_EOS;
            fx_row *row;
            assert_int_equal(fx_submit(b, &req, &row), FX_OK);
            assert_int_equal(fx_step(b), FX_OK);
            fx_event ev;
            while (fx_poll(b, &ev)) rows += ev.type == FX_EVENT_DONE;
        }
        for (int g = 0; g < 10000 && fx_batcher_pending(b); g++) {
            assert_int_equal(fx_step(b), FX_OK);
            fx_event ev;
            while (fx_poll(b, &ev)) rows += ev.type == FX_EVENT_DONE;
        }
        assert_int_equal(rows, 40);
    }
    for (int i = 0; i < N_TOKENIZERS; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(jobs[i].mismatches, 0);
    }
}

static void test_tokenizer_from_threads(void **state) {
    (void)state;
    fx_batcher_params p;
    fx_batcher_params_init(&p);
    p.max_rows = 4;
    p.n_ctx = 64;
    fx_batcher *b = NULL;
    char err[256];
    assert_int_equal(fx_batcher_create(model, &p, &b, err, sizeof err), FX_OK);
    hammer_tokenizer(model, b);
    fx_batcher_free(b);
    /* Both real vocabularies. */
    const char *names[2] = {"vocab/ggml-vocab-llama-spm.gguf",
                            "vocab/ggml-vocab-gpt-2.gguf"};
    for (int i = 0; i < 2; i++) {
        const char *path = fx_test_data_path(names[i]);
        fx_model_params mp;
        fx_model_params_init(&mp);
        mp.flags = FX_MODEL_VOCAB_ONLY;
        fx_model *vm = NULL;
        assert_int_equal(fx_model_load(path, &mp, &vm, err, sizeof err), FX_OK);
        hammer_tokenizer(vm, NULL);
        fx_model_free(vm);
    }
}

/* ---- batchers over one model, each on its own thread ---- */

enum { N_BATCHERS = 3, GEN_TOKENS = 40 };

typedef struct generation {
    fx_batcher *b;
    int32_t ids[GEN_TOKENS];
    size_t n_ids;
    int failures; /* checked on the main thread: cmocka's asserts are not
                     for other threads */
} generation;

static void *generate_alone(void *arg) {
    generation *g = arg;
    int32_t prompt[10];
    for (int i = 0; i < 10; i++) prompt[i] = 3 + (int32_t)((i * 7) % 60);
    fx_request r;
    fx_request_init(&r);
    r.prompt_tokens = prompt;
    r.n_prompt_tokens = 10;
    r.max_tokens = GEN_TOKENS;
    r.flags = FX_REQUEST_IGNORE_EOS;
    fx_row *row = NULL;
    if (fx_submit(g->b, &r, &row) != FX_OK) {
        g->failures++;
        return NULL;
    }
    for (int i = 0; i < 1000 && fx_batcher_pending(g->b) > 0; i++)
        g->failures += fx_step(g->b) != FX_OK;
    fx_event ev;
    while (fx_poll(g->b, &ev))
        if (ev.type == FX_EVENT_DONE) {
            g->n_ids = ev.n_tokens <= GEN_TOKENS ? ev.n_tokens : 0;
            memcpy(g->ids, ev.tokens, g->n_ids * sizeof *g->ids);
        }
    return NULL;
}

static fx_batcher *batcher_over(fx_model *m, uint32_t step_tokens) {
    fx_batcher_params p;
    fx_batcher_params_init(&p);
    p.max_rows = 2;
    p.n_ctx = 64;
    p.n_threads = 2;
    p.max_step_tokens = step_tokens;
    fx_batcher *b = NULL;
    char err[256];
    if (fx_batcher_create(m, &p, &b, err, sizeof err) != FX_OK)
        fail_msg("create: %s", err);
    return b;
}

/* Batchers on their own threads over a model made from spec, whose
 * copy each step advances (the default load), against one batcher over
 * the file's mapping alone. */
static void share_model(const gw_model_spec *spec, const char *name) {
    const char *path = fx_test_tmp_path(name);
    assert_int_equal(gw_write_model(path, spec), 0);
    char err[256];
    fx_model_params mp;
    fx_model_params_init(&mp);
    mp.flags = FX_MODEL_MAPPED_WEIGHTS;
    fx_model *mapped = NULL;
    assert_int_equal(fx_model_load(path, &mp, &mapped, err, sizeof err), FX_OK);
    generation want = {batcher_over(mapped, 64), {0}, 0, 0};
    generate_alone(&want);
    assert_int_equal(want.failures, 0);
    assert_int_equal(want.n_ids, GEN_TOKENS);
    fx_batcher_free(want.b);
    fx_model_free(mapped);

    fx_model *m = NULL;
    assert_int_equal(fx_model_load(path, NULL, &m, err, sizeof err), FX_OK);
    generation g[N_BATCHERS];
    pthread_t th[N_BATCHERS];
    for (int i = 0; i < N_BATCHERS; i++) /* creation must not overlap */
        g[i] = (generation){batcher_over(m, 3 + 4 * (uint32_t)i), {0}, 0, 0};
    for (int i = 0; i < N_BATCHERS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, generate_alone, &g[i]), 0);
    for (int i = 0; i < N_BATCHERS; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(g[i].failures, 0);
        assert_int_equal(g[i].n_ids, GEN_TOKENS);
        assert_memory_equal(g[i].ids, want.ids, sizeof want.ids);
        fx_batcher_free(g[i].b);
    }
    fx_model_free(m);
    remove(path);
}

static void test_batchers_share_model(void **state) {
    (void)state;
    gw_model_spec spec;
    gw_model_spec_default(&spec);
    spec.n_layer = 4;
    spec.seed = 21;
    share_model(&spec, "threads-shared.gguf");
}

/* The block types' copy goes another way (16-row groups, Q8_0's R16
 * tiles, or left in the mapping, as the CPU's kernels prefer), so it
 * is shared the same way again: Q4_K and Q8_0. */
static void test_batchers_share_quantized_model(void **state) {
    (void)state;
    static const uint32_t types[] = {QR_Q4_K, QR_Q8_0};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        gw_model_spec spec;
        gw_model_spec_default(&spec);
        spec.n_embd = 256; /* whole Q4_K blocks */
        spec.n_ff = 256;
        spec.n_layer = 3;
        spec.seed = 22;
        spec.type = types[i];
        spec.quantize = gq_encode;
        share_model(&spec, "threads-shared-quant.gguf");
    }
}

static int setup(void **state) {
    (void)state;
    snprintf(model_path, sizeof model_path, "%s", fx_test_tmp_path("threads.gguf"));
    int rc = gw_write_tiny_model(model_path, 64, 1);
    if (rc != 0) return rc;
    char err[256];
    return fx_model_load(model_path, NULL, &model, err, sizeof err) == FX_OK ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    fx_model_free(model);
    remove(model_path);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cancel_from_threads),
        cmocka_unit_test(test_cancel_from_threads_while_workers_run),
        cmocka_unit_test(test_tokenizer_from_threads),
        cmocka_unit_test(test_batchers_share_model),
        cmocka_unit_test(test_batchers_share_quantized_model),
    };
    return cmocka_run_group_tests_name("threads", tests, setup, teardown);
}
