/*
 * The batcher's bookkeeping: creation, generation-counted handles, the
 * row slots and the queue, the event queue and poll. (Submit, cancel,
 * release and leases are in submit.c.)
 */
#define _POSIX_C_SOURCE 200809L
#include "batcher_impl.h"

#include <string.h>
#include <time.h>

#include "../tokenizer/tokenizer.h"

double fx_batcher_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

row *fx_batcher_row(const fx_batcher_impl *b, uint32_t slot) {
    return b->rows[slot];
}

uintptr_t fx_handle_salt(const void *batcher, uint64_t stream) {
    /* splitmix64 over the address, the clock and the stream: batchers
     * alive at once have different addresses, and the clock makes a
     * freed batcher's successor at the same address differ too. */
    uint64_t t;
    double now = fx_batcher_now();
    memcpy(&t, &now, sizeof t);
    uint64_t z = (uint64_t)(uintptr_t)batcher ^ (t * 0x9E3779B97F4A7C15ull) ^
                 (stream << 56);
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (uintptr_t)z | ((uintptr_t)1 << (FX_SLOT_BITS - 1));
}

/* The live row a host handle names, or NULL. Call with the lock held. */
row *fx_batcher_resolve_row(fx_batcher_impl *b, fx_row *handle, uint32_t *slot) {
    uint32_t gen;
    if (!fx_handle_decode((uintptr_t)handle, b->row_salt, b->n_slots, slot, &gen))
        return NULL;
    row *r = b->rows[*slot];
    /* Only what the lock guards is read here (fx_cancel calls this from
     * other threads): not `state`, which the stepping thread writes
     * without the lock. A free slot's handle_live is 0 anyway. */
    if (!r->handle_live || (r->gen & FX_GEN_MASK) != gen) return NULL;
    return r;
}

lease_rec *fx_batcher_resolve_lease(const fx_batcher_impl *b,
                                    const fx_lease *h, uint32_t *index) {
    uint32_t gen;
    if (!fx_handle_decode((uintptr_t)h, b->lease_salt, b->n_leases, index, &gen))
        return NULL;
    lease_rec *l = &b->leases[*index];
    if (l->state == LEASE_FREE || !l->handle_live || (l->gen & FX_GEN_MASK) != gen)
        return NULL;
    return l;
}

/* ---- growable arrays ---- */

fx_status fx_batcher_grow(const fx_alloc *alloc, void **array, uint32_t *cap,
                      size_t elem, fx_error *err) {
    uint32_t new_cap = *cap ? *cap * 2 : 16;
    if (new_cap < *cap || new_cap > (1u << 24))
        return fx_fail(err, FX_ERR_NO_ROOM, "too many rows or events queued");
    void *p = fx_realloc(alloc, *array, (size_t)new_cap * elem);
    if (!p) return fx_fail(err, FX_ERR_NOMEM, "out of memory");
    *array = p;
    *cap = new_cap;
    return FX_OK;
}

/* ---- slots ----
 * The allocator is never called with the lock held: a host's allocator
 * hook may call fx_cancel (allowed from anywhere), which takes the lock,
 * and would wait for itself. So the slot table grows outside the lock and
 * is swapped in under it, and a row's memory is freed before the lock is
 * taken to reset it. Only the stepping thread writes the table, so it may
 * read it without the lock. */

static fx_status grow_slots(fx_batcher_impl *b, fx_error *err) {
    uint32_t old = b->n_slots;
    uint32_t cap = old ? old * 2 : 16;
    if (cap < old || cap > (1u << 24))
        return fx_fail(err, FX_ERR_NO_ROOM, "too many rows queued");
    row **rows = fx_malloc_array(&b->alloc, cap, sizeof *rows);
    uint32_t *stack = fx_malloc_array(&b->alloc, cap, sizeof *stack);
    uint32_t made = old;
    if (rows && stack) {
        if (old) memcpy(rows, b->rows, (size_t)old * sizeof *rows);
        for (; made < cap; made++) {
            rows[made] = fx_calloc(&b->alloc, 1, sizeof(row));
            if (!rows[made]) break;
            rows[made]->gen = 1;
        }
    }
    if (made == old) {
        fx_free(&b->alloc, rows);
        fx_free(&b->alloc, stack);
        return fx_fail(err, FX_ERR_NOMEM, "out of memory");
    }
    if (b->n_free) memcpy(stack, b->free_slots, (size_t)b->n_free * sizeof *stack);
    pthread_mutex_lock(&b->lock);
    row **old_rows = b->rows;
    uint32_t *old_stack = b->free_slots;
    b->rows = rows;
    b->free_slots = stack;
    b->n_slots = made;
    /* New rows go on the free stack highest first, so the lowest slot is
     * taken next and slot numbers stay small. */
    for (uint32_t i = made; i > old; i--) b->free_slots[b->n_free++] = i - 1;
    pthread_mutex_unlock(&b->lock);
    fx_free(&b->alloc, old_rows);
    fx_free(&b->alloc, old_stack);
    return FX_OK;
}

fx_status fx_batcher_take_slot(fx_batcher_impl *b, uint32_t *slot,
                               fx_error *err) {
    if (b->n_free == 0) {
        fx_status st = grow_slots(b, err);
        if (st != FX_OK) return st;
    }
    pthread_mutex_lock(&b->lock);
    *slot = b->free_slots[--b->n_free];
    pthread_mutex_unlock(&b->lock);
    return FX_OK;
}

/* Frees what a request owned and resets the row for reuse; the row struct
 * itself stays. Call without the lock (see above): the memory is freed
 * first -- fields fx_cancel never reads -- and the reset, which touches
 * the fields it does read, is made under the lock. */
void fx_batcher_clear_row(fx_batcher_impl *b, row *r) {
    fx_batcher_unreserve_done(b, r);
    fx_sampler_free(&r->sampler, &b->alloc);
    fx_grammar_free(r->grammar);
    fx_free(&b->alloc, r->tokens);
    fx_free(&b->alloc, r->stop_tokens);
    fx_textout_free(r->text);
    fx_kv_lease_free(&r->kv);
    pthread_mutex_lock(&b->lock);
    uint32_t gen = r->gen;
    memset(r, 0, sizeof *r); /* state ROW_FREE, handle_live 0 */
    r->gen = gen;
    pthread_mutex_unlock(&b->lock);
}

void fx_batcher_row_retire(fx_batcher_impl *b, uint32_t slot) {
    row *r = b->rows[slot];
    /* handle_live is written only by this thread, so it reads it freely. */
    if (r->state != ROW_EXITED || r->handle_live) return;
    fx_batcher_clear_row(b, r);
    pthread_mutex_lock(&b->lock);
    b->free_slots[b->n_free++] = slot;
    pthread_mutex_unlock(&b->lock);
}

/* ---- the queue (submit order, docs/design.md invariant 2) ---- */

uint32_t fx_batcher_queue_at(const fx_batcher_impl *b, uint32_t i) {
    return b->queue[(b->queue_head + i) % b->queue_cap];
}

void fx_batcher_queue_pop(fx_batcher_impl *b) {
    b->queue_head = (b->queue_head + 1) % b->queue_cap;
    b->queue_len--;
}

fx_status fx_batcher_queue_push(fx_batcher_impl *b, uint32_t slot,
                                fx_error *err) {
    if (b->queue_len == b->queue_cap) {
        /* Unroll the ring into a larger array, oldest first. */
        uint32_t cap = b->queue_cap ? b->queue_cap * 2 : 16;
        uint32_t *q = fx_malloc_array(&b->alloc, cap, sizeof *q);
        if (!q) return fx_fail(err, FX_ERR_NOMEM, "out of memory");
        for (uint32_t i = 0; i < b->queue_len; i++) q[i] = fx_batcher_queue_at(b, i);
        fx_free(&b->alloc, b->queue);
        b->queue = q;
        b->queue_cap = cap;
        b->queue_head = 0;
    }
    b->queue[(b->queue_head + b->queue_len) % b->queue_cap] = slot;
    b->queue_len++;
    return FX_OK;
}

/* ---- events ---- */

/* Room for n more events past the queued ones: compacts first, then
 * grows. */
static fx_status event_room(fx_batcher_impl *b, uint32_t n) {
    if ((uint64_t)b->event_head + b->event_len + n <= b->event_cap) return FX_OK;
    if (b->event_head > 0) {
        memmove(b->events, b->events + b->event_head,
                b->event_len * sizeof *b->events);
        b->event_head = 0;
    }
    while ((uint64_t)b->event_len + n > b->event_cap) {
        fx_status st = fx_batcher_grow(&b->alloc, (void **)&b->events,
                                       &b->event_cap, sizeof *b->events, &b->err);
        if (st != FX_OK) return st;
    }
    return FX_OK;
}

fx_status fx_batcher_push_event(fx_batcher_impl *b, const event_rec *ev) {
    /* The reserved DONE slots stay free: a TEXT must never take the place
     * the reply of some row was promised. */
    fx_status st = event_room(b, 1 + b->events_reserved);
    if (st != FX_OK) return st;
    b->events[b->event_head + b->event_len++] = *ev;
    return FX_OK;
}

fx_status fx_batcher_reserve_done(fx_batcher_impl *b, row *r) {
    fx_status st = event_room(b, 1 + b->events_reserved);
    if (st != FX_OK) return st;
    b->events_reserved++;
    r->done_reserved = 1;
    return FX_OK;
}

void fx_batcher_unreserve_done(fx_batcher_impl *b, row *r) {
    if (!r->done_reserved) return;
    r->done_reserved = 0;
    b->events_reserved--;
}

void fx_batcher_push_done(fx_batcher_impl *b, row *r, const event_rec *ev) {
    /* event_len + events_reserved <= event_cap and this row holds one of
     * the reserved slots, so compacting is all event_room can need: it
     * does not allocate here. */
    fx_batcher_unreserve_done(b, r);
    if (event_room(b, 1) != FX_OK) {
        /* Only a broken invariant gets here (fx_batcher_impl_check states
         * it); stop rather than write past the array. */
        fx_log(&b->log, FX_LOG_ERROR, "no event slot for a reserved DONE");
        b->broken = 1;
        return;
    }
    b->events[b->event_head + b->event_len++] = *ev;
}

fx_status fx_batcher_handover_reserve(fx_batcher_impl *b, handover *h,
                                      size_t bytes) {
    if (bytes <= h->cap[0] || bytes <= h->cap[1]) return FX_OK;
    /* The buffer the host is not reading grows; geometric, so a row whose
     * texts get longer and longer does not reallocate every time. */
    int spare = h->cur ^ 1;
    size_t cap = h->cap[spare] * 2;
    if (cap < bytes) cap = bytes;
    void *p = fx_realloc(&b->alloc, h->buf[spare], cap);
    if (!p) return fx_fail(&b->err, FX_ERR_NOMEM, "out of memory");
    h->buf[spare] = p;
    h->cap[spare] = cap;
    return FX_OK;
}

/* The buffer to hand `bytes` over in, at fx_poll: the host's pointer into
 * the current one dies with this poll, so either may be used. */
static void *handover_take(handover *h, size_t bytes) {
    if (h->cap[h->cur] < bytes) h->cur ^= 1;
    return h->buf[h->cur];
}

static void handover_free(fx_batcher_impl *b, handover *h) {
    fx_free(&b->alloc, h->buf[0]);
    fx_free(&b->alloc, h->buf[1]);
}

int fx_batcher_impl_poll(fx_batcher_impl *b, fx_event *out) {
    /* Nothing here allocates: every queued event has its place and its
     * hand-over buffer already (see handover). */
    while (b->event_len > 0) {
        event_rec ev = b->events[b->event_head++];
        b->event_len--;
        row *r = b->rows[ev.slot];
        /* A released row's events are dropped: its generation moved on. */
        if (r->gen != ev.gen || !r->handle_live) continue;
        memset(out, 0, sizeof *out);
        out->type = ev.type;
        out->row = (fx_row *)fx_handle_encode(ev.slot, ev.gen, b->row_salt);
        out->user = ev.user;
        out->stop_index = -1;
        out->grammar_start = ev.type == FX_EVENT_TOKEN ? -1 : ev.grammar_start;
        if (ev.type == FX_EVENT_TEXT) {
            /* Copied out of the arena so that the host's pointer survives
             * the steps it may run before its next poll. */
            char *text = handover_take(&b->out_text, ev.text_len);
            memcpy(text, b->arena.data + ev.text_off, ev.text_len);
            out->text = text;
            out->text_len = ev.text_len;
        } else if (ev.type == FX_EVENT_TOKEN) {
            out->token = ev.token;
            out->logprob = ev.logprob;
            if (ev.lp_len)
                memcpy(b->polled_lp, b->lp_arena + ev.lp_off,
                       ev.lp_len * sizeof *b->polled_lp);
            out->top = b->polled_lp;
            out->n_top = ev.lp_len;
        } else {
            out->finish = ev.finish;
            out->status = ev.status;
            out->stop_index = ev.stop_index;
            out->usage = ev.usage;
            /* The row keeps its tokens until this DONE is polled (it is
             * retired below), so the ids come straight from it. */
            size_t n = r->n_tokens - r->n_prompt;
            /* Never NULL, so a host's memcpy of zero ids is defined. */
            static const int32_t no_tokens[1] = {0};
            out->tokens = no_tokens;
            if (n) {
                int32_t *ids = handover_take(&b->out_ids, n * sizeof *ids);
                memcpy(ids, r->tokens + r->n_prompt, n * sizeof *ids);
                out->tokens = ids;
            }
            out->n_tokens = n;
            /* DONE is the row's last word: its handle dies with it. */
            pthread_mutex_lock(&b->lock);
            r->handle_live = 0;
            r->gen++;
            pthread_mutex_unlock(&b->lock);
            fx_batcher_row_retire(b, ev.slot);
        }
        if (b->event_len == 0) {
            b->event_head = 0;
            b->arena.len = 0;
            b->lp_len = 0;
        }
        return 1;
    }
    b->event_head = 0;
    b->arena.len = 0;
    b->lp_len = 0;
    return 0;
}

/* ---- create / free ---- */

#define BATCHER_PARAMS_V1_SIZE (offsetof(fx_batcher_params, log_level) + \
                                sizeof(fx_log_level))

static fx_status check_params(fx_batcher_params *p, const fx_hparams *hp,
                              fx_error *err) {
    if (p->flags & ~(FX_BATCHER_NO_PREFIX_CACHE | FX_BATCHER_FAST |
                     FX_BATCHER_KV_F16))
        return fx_fail(err, FX_ERR_INVALID_ARG, "unknown batcher flags 0x%x",
                       p->flags);
    if (p->max_rows == 0) p->max_rows = 16;
    if (p->n_ctx == 0) p->n_ctx = hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096;
    if (p->max_step_tokens == 0)
        p->max_step_tokens = p->max_rows > 256 ? p->max_rows : 256;
    if (p->block_tokens == 0) p->block_tokens = FX_KV_DEFAULT_BLOCK_TOKENS;
    if (p->n_threads == 0) p->n_threads = 1;
    if (p->max_rows > 4096 || p->max_step_tokens > 65536 || p->n_ctx > (1u << 20) ||
        p->block_tokens > 4096 || p->n_threads > 256)
        return fx_fail(err, FX_ERR_INVALID_ARG,
                       "batcher parameters out of range: max_rows %u (1..4096), "
                       "max_step_tokens %u (1..65536), n_ctx %u "
                       "(..2^20), block_tokens %u (..4096), n_threads %u "
                       "(..256)",
                       p->max_rows, p->max_step_tokens, p->n_ctx,
                       p->block_tokens, p->n_threads);
    if (p->kv_bytes > FX_BATCHER_MAX_KV_BYTES)
        return fx_fail(err, FX_ERR_INVALID_ARG,
                       "kv_bytes %llu is above FX_BATCHER_MAX_KV_BYTES (2^40)",
                       (unsigned long long)p->kv_bytes);
    if (p->kv_bytes == 0)
        p->kv_bytes = fx_batcher_default_kv_bytes(hp, p->max_rows, p->n_ctx,
                                                  p->block_tokens,
                                                  p->max_step_tokens,
                                                  fx_batcher_kv_dtype(p));
    return FX_OK;
}

uint64_t fx_batcher_default_kv_bytes(const fx_hparams *hp, uint32_t max_rows,
                                     uint32_t n_ctx, uint32_t block_tokens,
                                     uint32_t max_step_tokens,
                                     fx_kv_dtype dtype) {
    /* Priced as the pool prices a row (sliding layers' rings included),
     * so the default buys exactly max_rows full rows (fx_kv_plan). */
    uint64_t one_row =
        fx_kv_row_bytes(hp, block_tokens, n_ctx, max_step_tokens, dtype);
    /* max_rows full rows of F32 K/V is ~64 GiB for a 7B model at 4096
     * positions, so an uncapped default made fx_batcher_create fail with
     * NOMEM out of the box. Rows are admitted by the blocks they need, so
     * a smaller pool still serves max_rows rows when they are short, and
     * queues the rest otherwise. One full row is the floor: below it a
     * request of n_ctx positions could never run. */
    uint64_t full = one_row * max_rows;
    uint64_t budget = full < FX_BATCHER_DEFAULT_KV_CAP ? full
                                                       : FX_BATCHER_DEFAULT_KV_CAP;
    return budget < one_row ? one_row : budget;
}

fx_status fx_batcher_impl_create(const fx_batcher_model *model,
                                 const fx_batcher_params *params,
                                 fx_batcher_impl **out, fx_error *err) {
    *out = NULL;
    fx_batcher_params p;
    fx_batcher_params_init(&p);
    fx_status st;
    if (params && (st = fx_params_copy(&p, sizeof p, params,
                                       BATCHER_PARAMS_V1_SIZE, err,
                                       "fx_batcher_params")) != FX_OK)
        return st;
    if ((st = check_params(&p, model->hp, err)) != FX_OK) return st;
    fx_alloc alloc;
    if (fx_alloc_init(&alloc, &p.allocator) != FX_OK)
        return fx_fail(err, FX_ERR_INVALID_ARG,
                       "fx_batcher_params.allocator: set all three functions "
                       "or none");
    fx_batcher_impl *b = fx_calloc(&alloc, 1, sizeof *b);
    if (!b) return fx_fail(err, FX_ERR_NOMEM, "out of memory");
    b->alloc = alloc;
    b->log = (fx_logger){p.log_fn, p.log_user, p.log_level};
    b->model = *model;
    b->params = p;
    b->n_vocab = model->hp->n_vocab;
    b->row_salt = fx_handle_salt(b, 1);
    b->lease_salt = fx_handle_salt(b, 2);
    if (pthread_mutex_init(&b->lock, NULL) != 0) {
        fx_free(&alloc, b);
        return fx_fail(err, FX_ERR_NOMEM, "cannot create a mutex");
    }
    fx_textbuf_init(&b->arena, &b->alloc);

    fx_kernels_params kp;
    fx_kernels_params_init(&kp);
    kp.n_threads = p.n_threads;
    /* A row adds at most max_step_tokens positions a step: what the
     * sliding layers' rings must hold beyond the window. */
    fx_kv_params kvp;
    fx_kv_plan(model->hp, p.block_tokens, p.n_ctx, p.max_step_tokens,
               fx_batcher_kv_dtype(&p), p.kv_bytes, &kvp);
    if (kvp.n_blocks == 0) {
        st = fx_fail(err, FX_ERR_INVALID_ARG,
                     "kv_bytes %llu does not hold one block of %u positions",
                     (unsigned long long)p.kv_bytes, p.block_tokens);
        goto fail;
    }
    if ((st = fx_kernels_create(&alloc, &kp, &b->kc, err)) != FX_OK ||
        (st = fx_forward_create(&alloc, model->hp, model->weights, b->kc,
                                p.max_step_tokens, p.n_ctx, &b->fwd, err)) !=
            FX_OK ||
        (st = fx_kv_create(&alloc, model->hp, &kvp, &b->kv, err)) != FX_OK)
        goto fail;
    /* A fast batcher loads OpenBLAS (and so starts its threads) now, not
     * in its first large step: fx_step neither allocates nor starts
     * threads. Whether it is then used does not matter here. */
    if (p.flags & FX_BATCHER_FAST) (void)fx_kernels_fast_uses_blas(b->kc);

    b->piece_cap = FX_VOCAB_MAX_TOKEN_LEN;
    b->batch = fx_malloc_array(&alloc, p.max_step_tokens, sizeof *b->batch);
    b->views = fx_malloc_array(&alloc, p.max_rows, sizeof *b->views);
    b->batch_rows = fx_malloc_array(&alloc, p.max_rows, sizeof *b->batch_rows);
    b->batch_counts = fx_malloc_array(&alloc, p.max_rows, sizeof *b->batch_counts);
    b->running = fx_malloc_array(&alloc, p.max_rows, sizeof *b->running);
    b->logits = fx_malloc_array(&alloc, (size_t)p.max_rows * b->n_vocab,
                                sizeof *b->logits);
    b->candidates = fx_malloc_array(&alloc, b->n_vocab, sizeof *b->candidates);
    b->piece = fx_malloc(&alloc, b->piece_cap);
    if (!b->batch || !b->views || !b->batch_rows || !b->batch_counts ||
        !b->running || !b->logits || !b->candidates || !b->piece) {
        st = fx_fail(err, FX_ERR_NOMEM, "out of memory for step scratch");
        goto fail;
    }
    if ((st = fx_sample_ctx_init(&b->sctx, &alloc, model->vocab, b->n_vocab,
                                 err)) != FX_OK)
        goto fail;
    b->sample_jobs = fx_malloc_array(&alloc, p.max_rows, sizeof *b->sample_jobs);
    b->sample_par = fx_malloc_array(&alloc, p.max_rows, sizeof *b->sample_par);
    if (!b->sample_jobs || !b->sample_par) {
        st = fx_fail(err, FX_ERR_NOMEM, "out of memory for step scratch");
        goto fail;
    }
    /* Scratch for sampling on the other pool threads: a candidates array
     * and a sample context each (~0.75 MB at 32000 tokens). */
    const unsigned pool_threads = fx_pool_threads(fx_kernels_pool(b->kc));
    if (pool_threads > 1) {
        const unsigned extra = pool_threads - 1;
        b->par_candidates = fx_calloc(&alloc, extra, sizeof *b->par_candidates);
        b->par_sctx = fx_calloc(&alloc, extra, sizeof *b->par_sctx);
        if (!b->par_candidates || !b->par_sctx) {
            st = fx_fail(err, FX_ERR_NOMEM, "out of memory for step scratch");
            goto fail;
        }
        for (unsigned t = 0; t < extra; t++) {
            b->par_candidates[t] =
                fx_malloc_array(&alloc, b->n_vocab, sizeof **b->par_candidates);
            if (!b->par_candidates[t]) {
                st = fx_fail(err, FX_ERR_NOMEM, "out of memory for step scratch");
                goto fail;
            }
            b->n_samplers = t + 2; /* what fx_batcher_impl_free frees */
            if ((st = fx_sample_ctx_init(&b->par_sctx[t], &alloc, model->vocab,
                                         b->n_vocab, err)) != FX_OK)
                goto fail;
        }
    }
    if (b->n_samplers == 0) b->n_samplers = 1;
    b->bos = fx_vocab_special(model->vocab, FX_TOKEN_BOS);
    *out = b;
    return FX_OK;
fail:
    fx_batcher_impl_free(b);
    return st;
}

void fx_batcher_impl_free(fx_batcher_impl *b) {
    if (!b) return;
    fx_alloc alloc = b->alloc;
    for (uint32_t i = 0; i < b->n_slots; i++) {
        if (b->rows[i]) fx_batcher_clear_row(b, b->rows[i]);
        fx_free(&alloc, b->rows[i]);
    }
    for (uint32_t i = 0; i < b->n_leases; i++) fx_free(&alloc, b->leases[i].tokens);
    fx_free(&alloc, b->rows);
    fx_free(&alloc, b->free_slots);
    fx_free(&alloc, b->queue);
    fx_free(&alloc, b->leases);
    fx_free(&alloc, b->events);
    fx_textbuf_free(&b->arena);
    handover_free(b, &b->out_text);
    handover_free(b, &b->out_ids);
    fx_free(&alloc, b->lp_arena);
    fx_free(&alloc, b->batch);
    fx_free(&alloc, b->views);
    fx_free(&alloc, b->batch_rows);
    fx_free(&alloc, b->batch_counts);
    fx_free(&alloc, b->running);
    fx_free(&alloc, b->logits);
    fx_free(&alloc, b->candidates);
    fx_free(&alloc, b->piece);
    fx_sample_ctx_free(&b->sctx, &alloc);
    for (unsigned t = 0; t + 1 < b->n_samplers; t++) {
        fx_free(&alloc, b->par_candidates[t]);
        fx_sample_ctx_free(&b->par_sctx[t], &alloc);
    }
    fx_free(&alloc, b->par_candidates);
    fx_free(&alloc, b->par_sctx);
    fx_free(&alloc, b->sample_jobs);
    fx_free(&alloc, b->sample_par);
    fx_grammar_free(b->json);
    fx_kv_free(b->kv);
    fx_forward_free(b->fwd);
    fx_kernels_free(b->kc);
    pthread_mutex_destroy(&b->lock);
    fx_free(&alloc, b);
}

const char *fx_batcher_impl_errmsg(const fx_batcher_impl *b) {
    return b->err.message;
}

uint32_t fx_batcher_impl_pending(const fx_batcher_impl *b) {
    return b->queue_len + b->n_running;
}
