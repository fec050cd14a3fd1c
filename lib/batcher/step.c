/*
 * One step: apply cancels, end marked rows, admit in submit order, run ONE
 * forward pass mixing a decode token of every generating row with prompt
 * chunks, sample, stream text, end finished rows. Then the stats and the
 * consistency check the tests state the invariants with.
 */
#include "batcher_impl.h"

#include <string.h>

#include "../tokenizer/tokenizer.h"

/* ---- the one exit path (docs/design.md invariant 5) ---- */

static void emit_text(fx_batcher_impl *b, uint32_t slot, size_t from) {
    row *r = b->rows[slot];
    if (b->arena.len == from) return;
    if (!r->handle_live || r->is_pin) {
        b->arena.len = from; /* nobody will read it */
        return;
    }
    event_rec ev = {.type = FX_EVENT_TEXT, .slot = slot, .gen = r->gen,
                    .user = r->user, .text_off = from,
                    .text_len = b->arena.len - from,
                    .finish = FX_FINISH_NONE, .status = FX_OK,
                    .stop_index = -1, .token = -1,
                    .grammar_start = fx_sampler_grammar_start(&r->sampler)};
    /* Room to hand the text over at fx_poll is made now, so that fx_poll
     * never allocates. */
    if (fx_batcher_handover_reserve(b, &b->out_text, ev.text_len) != FX_OK ||
        fx_batcher_push_event(b, &ev) != FX_OK) {
        /* Text that cannot be queued would vanish from the answer; the row
         * fails instead, through the usual exit path. */
        b->arena.len = from;
        if (r->finish != FX_FINISH_ERROR) { /* a cancelled row's too */
            r->finish = FX_FINISH_ERROR;
            r->error = FX_ERR_NOMEM;
        }
    }
}

/* A lease's row has ended: pin what it computed, or give up quietly (the
 * rows that continue the lease have its tokens and simply recompute). */
static void finish_pin(fx_batcher_impl *b, row *r, int admitted) {
    lease_rec *l = &b->leases[r->lease_slot];
    l->state = LEASE_UNPINNED;
    if (admitted && l->handle_live && r->finish == FX_FINISH_LENGTH &&
        !(b->params.flags & FX_BATCHER_NO_PREFIX_CACHE)) {
        fx_kv_fit fit;
        fx_error err;
        if (fx_kv_pin_prefix(b->kv, r->tokens, r->n_prompt, &l->pin, &fit,
                             &err) == FX_OK &&
            fit == FX_KV_NOW && l->pin.n_blocks > 0)
            l->state = LEASE_READY;
    }
    fx_batcher_lease_drop(b, r->lease_slot);
}

void fx_batcher_end_row(fx_batcher_impl *b, uint32_t slot) {
    row *r = b->rows[slot];
    fx_error err;
    /* Text held back for a stop that never came, or a character cut off
     * midway, is still the row's output -- except for a failed row, which
     * reports the failure rather than a truncated answer. */
    if (r->finish != FX_FINISH_ERROR && !r->is_pin) {
        size_t from = b->arena.len;
        if (fx_textout_finish(r->text, &b->arena, &err) == FX_OK)
            emit_text(b, slot, from);
        else
            b->arena.len = from;
        /* The U+FFFD of a character cut off is text like any other and may
         * complete a stop string, which is then withheld: the DONE says
         * so (STOP and its index) rather than LENGTH, EOS or CANCELLED. */
        int64_t stop = fx_textout_stopped(r->text);
        if (stop >= 0 && r->finish != FX_FINISH_ERROR) {
            r->finish = FX_FINISH_STOP;
            r->stop_index = (int32_t)stop;
        }
    }
    int admitted = r->kv.state == FX_KV_LEASE_ACTIVE;
    if (admitted && !(b->params.flags & FX_BATCHER_NO_PREFIX_CACHE)) {
        /* Publish before release, so the next request with this prefix
         * adopts it: a cache that is only read stays empty. */
        if (fx_kv_lease_publish(&r->kv, r->tokens, r->n_tokens, &err) != FX_OK)
            fx_log(&b->log, FX_LOG_WARN, "publish failed: %s", err.message);
    }
    if (r->is_pin) finish_pin(b, r, admitted);
    if (admitted && fx_kv_lease_release(&r->kv, &err) != FX_OK) {
        fx_log(&b->log, FX_LOG_ERROR, "KV release failed: %s", err.message);
        b->broken = 1;
    }
    fx_kv_lease_free(&r->kv);
    r->t_end = fx_batcher_now();
    if (r->handle_live && !r->is_pin) {
        fx_usage u = {0};
        u.prompt_tokens = r->n_prompt;
        u.cached_tokens = r->cached_tokens;
        u.completion_tokens = r->n_tokens - r->n_prompt;
        double admit = r->t_admit > 0 ? r->t_admit : r->t_end;
        u.queue_seconds = admit - r->t_submit;
        u.ttft_seconds = r->t_first > 0 ? r->t_first - admit : 0;
        u.total_seconds = r->t_end - admit;
        /* A row that hit a stop and then failed (its last text could not
         * be queued) names no stop: ferrox.h says -1 unless STOP or EOS. */
        int32_t stop_index = r->finish == FX_FINISH_STOP || r->finish == FX_FINISH_EOS
                                 ? r->stop_index : -1;
        event_rec ev = {.type = FX_EVENT_DONE, .slot = slot, .gen = r->gen,
                        .user = r->user, .finish = r->finish,
                        .status = r->finish == FX_FINISH_ERROR ? r->error : FX_OK,
                        .stop_index = stop_index, .usage = u, .token = -1,
                        .grammar_start = fx_sampler_grammar_start(&r->sampler)};
        /* Into the slot reserved at submit: the reply cannot be lost. */
        fx_batcher_push_done(b, r, &ev);
    }
    /* (A released row's reserved slot goes back when retiring clears
     * it, just below.) */
    r->state = ROW_EXITED;
    fx_batcher_row_retire(b, slot);
}

static void fail_row(fx_batcher_impl *b, row *r, fx_status st) {
    if (r->finish != FX_FINISH_NONE) return;
    /* Failing marks; it does not remove (docs/design.md invariant 6). */
    r->finish = FX_FINISH_ERROR;
    r->error = st;
}

/* Ends every marked row, running ones in admission order, then queued ones
 * in submit order; survivors keep their order. */
static void flush_ended(fx_batcher_impl *b) {
    uint32_t kept = 0;
    for (uint32_t i = 0; i < b->n_running; i++) {
        uint32_t slot = b->running[i];
        if (b->rows[slot]->finish != FX_FINISH_NONE) fx_batcher_end_row(b, slot);
        else b->running[kept++] = slot;
    }
    b->n_running = kept;
    uint32_t n = b->queue_len, survivors = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t slot = fx_batcher_queue_at(b, i);
        if (b->rows[slot]->finish != FX_FINISH_NONE) {
            fx_batcher_end_row(b, slot);
        } else {
            b->queue[(b->queue_head + survivors) % b->queue_cap] = slot;
            survivors++;
        }
    }
    b->queue_len = survivors;
}

static void apply_cancels(fx_batcher_impl *b) {
    pthread_mutex_lock(&b->lock);
    for (uint32_t i = 0; i < b->n_running; i++) {
        row *r = b->rows[b->running[i]];
        if (r->cancel_requested && r->finish == FX_FINISH_NONE)
            r->finish = FX_FINISH_CANCELLED;
    }
    for (uint32_t i = 0; i < b->queue_len; i++) {
        row *r = b->rows[fx_batcher_queue_at(b, i)];
        if (r->cancel_requested && r->finish == FX_FINISH_NONE)
            r->finish = FX_FINISH_CANCELLED;
    }
    pthread_mutex_unlock(&b->lock);
}

/* ---- admission ---- */

static void admit(fx_batcher_impl *b) {
    int use_cache = !(b->params.flags & FX_BATCHER_NO_PREFIX_CACHE);
    while (b->queue_len > 0 && b->n_running < b->params.max_rows) {
        uint32_t slot = fx_batcher_queue_at(b, 0);
        row *r = b->rows[slot];
        if (r->waits_for_lease) {
            const lease_rec *l = &b->leases[r->lease_slot];
            /* Waiting lets the row adopt the pinned prefix instead of
             * computing it a second time; submit order is kept. */
            if (l->gen == r->lease_gen && l->state == LEASE_PENDING) break;
            r->waits_for_lease = 0;
        }
        fx_kv_fit fit;
        fx_error err;
        /* Without the prefix cache a one-token "prompt" adopts nothing. */
        fx_status st = fx_kv_lease_admit(&r->kv, r->tokens,
                                         use_cache ? r->n_prompt : 1,
                                         r->cap_tokens, &fit, &err);
        if (st == FX_OK && fit == FX_KV_LATER) break;
        fx_batcher_queue_pop(b);
        r->t_admit = fx_batcher_now();
        b->running[b->n_running++] = slot;
        r->state = ROW_RUNNING;
        if (st != FX_OK || fit == FX_KV_NEVER) {
            fail_row(b, r, st != FX_OK ? st : FX_ERR_NO_ROOM);
            continue;
        }
        r->cached_tokens = fx_kv_lease_adopted_tokens(&r->kv);
        r->published_blocks = 0;
    }
}

/* ---- the forward pass and what follows it ---- */

static bool is_stop_token(const fx_batcher_impl *b, const row *r, int32_t t) {
    if (!(r->flags & FX_REQUEST_IGNORE_EOS) && fx_vocab_is_eog(b->model.vocab, t))
        return true;
    for (uint32_t i = 0; i < r->n_stop_tokens; i++)
        if (r->stop_tokens[i] == t) return true;
    return false;
}

/* A sampled token joins the row: stop tokens end it unseen, other tokens
 * stream their text through the row's UTF-8 buffer and stop matcher. */
static void accept_token(fx_batcher_impl *b, uint32_t slot, int32_t token) {
    row *r = b->rows[slot];
    fx_error err;
    r->tokens[r->n_tokens++] = token;
    if (is_stop_token(b, r, token)) {
        r->finish = FX_FINISH_EOS;
        r->stop_index = token;
        return;
    }
    size_t len = 0;
    fx_status st = fx_vocab_token_to_piece(b->model.vocab, token, 0, b->piece,
                                           b->piece_cap, &len, &err);
    if (st == FX_OK) {
        size_t from = b->arena.len;
        st = fx_textout_push(r->text, b->piece, len, &b->arena, &err);
        if (st == FX_OK) emit_text(b, slot, from);
        else b->arena.len = from;
    }
    if (st != FX_OK) {
        fail_row(b, r, st);
        return;
    }
    /* Its text could not be queued: the failure stands, and no STOP or
     * LENGTH below may turn it back into a normal end. */
    if (r->finish == FX_FINISH_ERROR) return;
    int64_t stop = fx_textout_stopped(r->text);
    if (stop >= 0) {
        r->finish = FX_FINISH_STOP;
        r->stop_index = (int32_t)stop;
    } else if (r->n_tokens - r->n_prompt >= r->max_tokens) {
        r->finish = FX_FINISH_LENGTH;
    }
}

/* A TOKEN event with the token's log-probabilities, queued before the
 * TEXT its text will reach. If memory runs out the row fails (FX_ERR_NOMEM)
 * rather than go on with a token the host asked to see and never will. */
static void push_logprobs(fx_batcher_impl *b, uint32_t slot, const float *logits,
                          int32_t token) {
    row *r = b->rows[slot];
    if (!r->handle_live || r->is_pin) return;
    uint32_t n = r->n_logprobs;
    float lp = fx_logprobs(logits, b->n_vocab, token, b->lp_top, n);
    if (b->lp_len + n > b->lp_cap) {
        size_t cap = b->lp_cap ? b->lp_cap : 256;
        while (cap < b->lp_len + n) cap *= 2;
        fx_token_logprob *p = fx_realloc(&b->alloc, b->lp_arena, cap * sizeof *p);
        if (!p) {
            fail_row(b, r, FX_ERR_NOMEM);
            return;
        }
        b->lp_arena = p;
        b->lp_cap = cap;
    }
    memcpy(b->lp_arena + b->lp_len, b->lp_top, n * sizeof *b->lp_top);
    event_rec ev = {.type = FX_EVENT_TOKEN, .slot = slot, .gen = r->gen,
                    .user = r->user, .finish = FX_FINISH_NONE, .status = FX_OK,
                    .stop_index = -1, .token = token, .logprob = lp,
                    .lp_off = b->lp_len, .lp_len = n};
    if (fx_batcher_push_event(b, &ev) == FX_OK) b->lp_len += n;
    else fail_row(b, r, FX_ERR_NOMEM);
}

/* Adds one row's tokens to the batch. */
static void add_row(fx_batcher_impl *b, uint32_t slot, uint32_t *n,
                    uint32_t *nv, uint32_t count) {
    row *r = b->rows[slot];
    fx_error err;
    uint32_t pos0 = fx_kv_lease_cursor(&r->kv);
    /* A ring lets the sliding layers' old blocks go as the row moves on:
     * each full block goes on the tree before that, once, at its boundary,
     * so later rows can adopt up to it (kv.h). */
    uint32_t full = pos0 / fx_kv_block_tokens(b->kv);
    if (fx_kv_has_ring(b->kv) && full > r->published_blocks &&
        !(b->params.flags & FX_BATCHER_NO_PREFIX_CACHE)) {
        if (fx_kv_lease_publish(&r->kv, r->tokens, pos0, &err) == FX_OK)
            r->published_blocks = full;
        else
            fx_log(&b->log, FX_LOG_WARN, "publish failed: %s", err.message);
    }
    fx_status st = fx_kv_lease_prepare(&r->kv, count, &err);
    if (st != FX_OK) {
        fail_row(b, r, FX_ERR_INTERNAL);
        fx_log(&b->log, FX_LOG_ERROR, "KV prepare failed: %s", err.message);
        return;
    }
    uint32_t v = (*nv)++;
    b->views[v] = fx_kv_lease_view(&r->kv);
    b->batch_rows[v] = slot;
    b->batch_counts[v] = count;
    for (uint32_t i = 0; i < count; i++) {
        uint32_t pos = pos0 + i;
        /* Logits for a decode token, and for the last prompt token (the
         * first generated token comes from it); a lease computes none. */
        uint32_t want = !r->is_pin && pos == r->n_tokens - 1;
        b->batch[(*n)++] = (fx_fwd_token){r->tokens[pos], pos, v, want};
    }
}

/* ---- sampling ---- */

static void sample_one(fx_batcher_impl *b, sample_job *job,
                       fx_sample_ctx *sctx, fx_candidate *candidates) {
    row *r = b->rows[job->slot];
    job->status = fx_sampler_next(&r->sampler, sctx, job->logits, b->n_vocab,
                                  r->tokens, r->n_tokens, candidates,
                                  &job->token, &job->eog, &job->err);
}

typedef struct sample_run {
    fx_batcher_impl *b;
    uint32_t *jobs; /* indices into b->sample_jobs */
} sample_run;

/* A row's sample reads only that row's sampler and logits and the
 * thread's own scratch: whichever thread takes it, the same token. */
static void sample_task(void *ctx, size_t task, unsigned thread) {
    const sample_run *sr = ctx;
    fx_batcher_impl *b = sr->b;
    sample_job *job = &b->sample_jobs[sr->jobs[task]];
    if (thread == 0)
        sample_one(b, job, &b->sctx, b->candidates);
    else
        sample_one(b, job, &b->par_sctx[thread - 1],
                   b->par_candidates[thread - 1]);
}

/* Samples this step's rows. Without a grammar a row's sample is a
 * function of its logits and its sampler alone, and without a top-k it
 * sorts the whole vocabulary (as costly as a small forward pass): those
 * go to every pool thread at once. Rows with a grammar share the context's
 * trie and walk scratch, so the caller samples them, in order. */
static void sample_rows(fx_batcher_impl *b, uint32_t n_jobs) {
    uint32_t *par = b->sample_par, n_par = 0;
    for (uint32_t j = 0; j < n_jobs; j++) {
        sample_job *job = &b->sample_jobs[j];
        const row *r = b->rows[job->slot];
        if (b->n_samplers > 1 && !r->sampler.grammar.g &&
            r->sampler.cfg.temperature > 0.0f)
            par[n_par++] = j;
        else
            sample_one(b, job, &b->sctx, b->candidates);
    }
    if (n_par == 0) return;
    sample_run sr = {b, par};
    if (n_par == 1 ||
        fx_pool_run(fx_kernels_pool(b->kc), sample_task, &sr, n_par) != FX_OK)
        for (uint32_t i = 0; i < n_par; i++)
            sample_one(b, &b->sample_jobs[par[i]], &b->sctx, b->candidates);
}

static fx_status run_batch(fx_batcher_impl *b) {
    uint32_t n = 0, nv = 0, budget = b->params.max_step_tokens;
    /* Decode tokens first: a generating row waits for nobody's prompt. */
    for (uint32_t i = 0; i < b->n_running && budget > 0; i++) {
        uint32_t slot = b->running[i];
        row *r = b->rows[slot];
        if (r->finish != FX_FINISH_NONE || !r->decoding) continue;
        /* The KV cursor is the one truth for positions written (docs/design.md,
         * invariant 4); the token to run is the one just after it. */
        if (fx_kv_lease_cursor(&r->kv) != r->n_tokens - 1) {
            fail_row(b, r, FX_ERR_INTERNAL);
            continue;
        }
        add_row(b, slot, &n, &nv, 1);
        budget--;
    }
    for (uint32_t i = 0; i < b->n_running && budget > 0; i++) {
        uint32_t slot = b->running[i];
        row *r = b->rows[slot];
        if (r->finish != FX_FINISH_NONE || r->decoding) continue;
        uint32_t cursor = fx_kv_lease_cursor(&r->kv);
        uint32_t left = r->n_prompt - cursor;
        uint32_t take = left < budget ? left : budget;
        if (take == 0) continue;
        add_row(b, slot, &n, &nv, take);
        budget -= take;
    }
    if (n == 0) return FX_OK;
    fx_log(&b->log, FX_LOG_DEBUG, "step %llu: %u tokens for %u rows",
           (unsigned long long)b->steps, n, nv);

    fx_error err;
    unsigned flags = (b->params.flags & FX_BATCHER_FAST) ? FX_MATMUL_FAST : 0;
    fx_status st = fx_forward_run(b->fwd, b->batch, n, b->views, nv, b->logits,
                                  flags, &err);
    if (st != FX_OK) {
        /* Nothing was written that anyone may read; these rows cannot go
         * on consistently, but the rest of the batcher can. */
        for (uint32_t v = 0; v < nv; v++) fail_row(b, b->rows[b->batch_rows[v]], st);
        return fx_fail(&b->err, st, "step: %s", err.message);
    }
    b->forward_tokens += n;

    /* Which rows sample, in batch order; then the samples; then each
     * row's outcome in that order again, so events keep their order. */
    uint32_t logit_row = 0, n_jobs = 0;
    for (uint32_t v = 0; v < nv; v++) {
        uint32_t slot = b->batch_rows[v];
        row *r = b->rows[slot];
        if (fx_kv_lease_advance(&r->kv, b->batch_counts[v], &err) != FX_OK) {
            fail_row(b, r, FX_ERR_INTERNAL);
            continue;
        }
        if (r->is_pin) {
            if (fx_kv_lease_cursor(&r->kv) == r->n_prompt)
                r->finish = FX_FINISH_LENGTH; /* computed: exit pins it */
            continue;
        }
        if (fx_kv_lease_cursor(&r->kv) != r->n_tokens) continue; /* mid-prompt */
        const float *logits = b->logits + (size_t)logit_row++ * b->n_vocab;
        if (!r->decoding) {
            r->decoding = 1;
            r->t_first = fx_batcher_now();
        }
        b->sample_jobs[n_jobs++] = (sample_job){.slot = slot, .logits = logits};
    }
    sample_rows(b, n_jobs);

    for (uint32_t j = 0; j < n_jobs; j++) {
        const sample_job *job = &b->sample_jobs[j];
        const uint32_t slot = job->slot;
        row *r = b->rows[slot];
        const int32_t token = job->token;
        if (job->status != FX_OK) {
            /* This row cannot go on (its grammar, or a bias that bans
             * every allowed token): it fails alone (docs/design.md invariant 7);
             * nothing else in the batch is touched. */
            fx_log(&b->log, FX_LOG_INFO, "row failed: %s", job->err.message);
            fail_row(b, r, job->status);
            continue;
        }
        if (r->n_logprobs) {
            push_logprobs(b, slot, job->logits, token);
            if (r->finish != FX_FINISH_NONE) continue; /* failed: no memory */
        }
        if (job->eog) {
            /* The grammar's sentence is complete: the row ends here, even
             * with FX_REQUEST_IGNORE_EOS (docs/reliability.md 25). */
            r->tokens[r->n_tokens++] = token;
            r->finish = FX_FINISH_EOS;
            r->stop_index = token;
            continue;
        }
        accept_token(b, slot, token);
    }
    return FX_OK;
}

fx_status fx_batcher_impl_step(fx_batcher_impl *b) {
    if (b->broken)
        return fx_fail(&b->err, FX_ERR_INTERNAL,
                       "the batcher stopped after an internal failure");
    b->steps++;
    apply_cancels(b);
    flush_ended(b);
    admit(b);
    fx_status st = run_batch(b);
    flush_ended(b);
    return st;
}

/* ---- stats and checks ---- */

void fx_batcher_impl_stats(const fx_batcher_impl *b, fx_batcher_stats *out) {
    fx_kv_stats ks;
    fx_kv_stats_get(b->kv, &ks);
    memset(out, 0, sizeof *out);
    out->queued = b->queue_len;
    out->running = b->n_running;
    out->blocks_total = ks.total;
    out->blocks_reserved = (uint32_t)ks.reserved;
    out->blocks_free = ks.free;
    out->blocks_cached = ks.cached;
    out->blocks_pinned = ks.pinned;
    out->head_need = b->queue_len ? b->rows[fx_batcher_queue_at(b, 0)]->blocks_need : 0;
    out->steps = b->steps;
    out->forward_tokens = b->forward_tokens;
    out->ring_total = ks.ring_total;
    out->ring_row = ks.ring_row;
    out->ring_cached = ks.ring_cached;
}

fx_status fx_batcher_impl_check(const fx_batcher_impl *b, fx_error *err) {
    /* Its own error record: formatting err's message into err itself
     * would print an empty string. */
    fx_error kv_err;
    fx_error_clear(&kv_err);
    fx_status st = fx_kv_check(b->kv, &kv_err);
    if (st != FX_OK) return fx_fail(err, FX_ERR_INTERNAL, "%s", kv_err.message);
    fx_kv_stats ks;
    fx_kv_stats_get(b->kv, &ks);
    uint32_t live = 0;
    for (uint32_t i = 0; i < b->n_slots; i++)
        if (b->rows[i]->kv.state == FX_KV_LEASE_ACTIVE) live++;
    if (live != b->n_running)
        return fx_fail(err, FX_ERR_INTERNAL,
                       "%u rows hold KV but %u are running", live,
                       b->n_running);
    /* Every reply still owed has its event slot (DONE cannot be lost). */
    uint32_t owed = 0;
    for (uint32_t i = 0; i < b->n_slots; i++) owed += b->rows[i]->done_reserved != 0;
    if (owed != b->events_reserved ||
        (uint64_t)b->event_len + b->events_reserved > b->event_cap)
        return fx_fail(err, FX_ERR_INTERNAL,
                       "%u rows are owed a DONE, %u event slots reserved, "
                       "%u queued of %u",
                       owed, b->events_reserved, b->event_len, b->event_cap);
    if (b->n_running == 0 && (ks.row != 0 || ks.ring_row != 0))
        return fx_fail(err, FX_ERR_INTERNAL,
                       "no row is running but %u blocks and %u ring blocks "
                       "are held by rows", ks.row, ks.ring_row);
    return FX_OK;
}
