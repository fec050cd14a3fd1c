/*
 * Requests in and out of the batcher's hands: submit, cancel, release, and
 * pinned leases. Everything a row will need is checked and copied here, so
 * a request that could never run is refused at once (docs/design.md invariant 3)
 * rather than discovered steps later.
 */
#include "batcher_impl.h"

#include <string.h>

#include "../tokenizer/tokenizer.h"

/* The first public layout ends at `user`: a request that old is still
 * accepted and gets the later fields' defaults (grammar, samplers,
 * logprobs), which fx_request_init sets before the copy. */
#define REQUEST_V1_SIZE (offsetof(fx_request, user) + sizeof(void *))
#define REQUEST_FLAGS                                                   \
    (FX_REQUEST_IGNORE_EOS | FX_REQUEST_PARSE_SPECIAL | FX_REQUEST_NO_BOS | \
     FX_REQUEST_JSON)

/* Appends the tokens of text (or the given ids) to r->tokens, which has
 * room for `room` more. */
static fx_status prompt_tokens(fx_batcher_impl *b, const fx_request *req,
                               int add_bos, int32_t *out, size_t room,
                               size_t *n_out) {
    if (req->prompt) {
        /* Tokenizing takes memory and time in proportion to the text: a
         * text that must give more tokens than the room is refused first. */
        size_t least = fx_vocab_min_tokens(b->model.vocab, req->prompt_len);
        if (least > room)
            return fx_fail(&b->err, FX_ERR_NO_ROOM,
                           "the prompt is %zu bytes, at least %zu tokens; with "
                           "max_tokens it does not fit the context of %u",
                           req->prompt_len, least, b->params.n_ctx);
        uint32_t flags = 0;
        if (add_bos) flags |= FX_TOKENIZE_ADD_SPECIAL;
        if (req->flags & FX_REQUEST_PARSE_SPECIAL) flags |= FX_TOKENIZE_PARSE_SPECIAL;
        fx_status st = fx_vocab_tokenize(b->model.vocab, &b->alloc, req->prompt,
                                         req->prompt_len, flags, out, room,
                                         n_out, &b->err);
        if (st == FX_ERR_BUFFER_TOO_SMALL)
            return fx_fail(&b->err, FX_ERR_NO_ROOM,
                           "the prompt is %zu tokens; with max_tokens it "
                           "does not fit the context of %u",
                           *n_out, b->params.n_ctx);
        return st;
    }
    if (req->n_prompt_tokens > room)
        return fx_fail(&b->err, FX_ERR_NO_ROOM,
                       "the prompt is %zu tokens; with max_tokens it does "
                       "not fit the context of %u",
                       req->n_prompt_tokens, b->params.n_ctx);
    for (size_t i = 0; i < req->n_prompt_tokens; i++) {
        int32_t t = req->prompt_tokens[i];
        if (t < 0 || (uint32_t)t >= b->n_vocab)
            return fx_fail(&b->err, FX_ERR_INVALID_ARG,
                           "prompt token %zu is %d, outside the vocabulary "
                           "(%u)",
                           i, t, b->n_vocab);
        out[i] = t;
    }
    *n_out = req->n_prompt_tokens;
    return FX_OK;
}

static fx_status check_request(fx_batcher_impl *b, const fx_request *req) {
    if (req->flags & ~REQUEST_FLAGS)
        return fx_fail(&b->err, FX_ERR_INVALID_ARG, "unknown request flags 0x%x",
                       req->flags);
    if (!req->prompt && !req->prompt_tokens && req->n_prompt_tokens)
        return fx_fail(&b->err, FX_ERR_INVALID_ARG, "prompt_tokens is NULL");
    if (req->max_tokens == 0)
        return fx_fail(&b->err, FX_ERR_INVALID_ARG, "max_tokens is 0");
    if (req->max_tokens > b->params.n_ctx)
        return fx_fail(&b->err, FX_ERR_NO_ROOM,
                       "max_tokens %u exceeds the context of %u",
                       req->max_tokens, b->params.n_ctx);
    if (req->n_stop && !req->stop)
        return fx_fail(&b->err, FX_ERR_INVALID_ARG, "stop is NULL");
    if (req->n_stop_tokens && !req->stop_tokens)
        return fx_fail(&b->err, FX_ERR_INVALID_ARG, "stop_tokens is NULL");
    if (req->grammar_len && !req->grammar)
        return fx_fail(&b->err, FX_ERR_INVALID_ARG, "grammar is NULL");
    if (req->grammar && (req->flags & FX_REQUEST_JSON))
        return fx_fail(&b->err, FX_ERR_INVALID_ARG,
                       "a request takes a grammar or FX_REQUEST_JSON, not both");
    if (req->n_logprobs > FX_MAX_LOGPROBS)
        return fx_fail(&b->err, FX_ERR_INVALID_ARG,
                       "n_logprobs %u is more than %d", req->n_logprobs,
                       FX_MAX_LOGPROBS);
    if ((req->n_grammar_triggers && !req->grammar_triggers) ||
        (req->n_grammar_trigger_tokens && !req->grammar_trigger_tokens))
        return fx_fail(&b->err, FX_ERR_INVALID_ARG, "grammar triggers are NULL");
    if ((req->n_grammar_triggers || req->n_grammar_trigger_tokens) &&
        !req->grammar && !(req->flags & FX_REQUEST_JSON))
        return fx_fail(&b->err, FX_ERR_INVALID_ARG,
                       "grammar triggers without a grammar");
    for (size_t i = 0; i < req->n_grammar_trigger_tokens &&
                       i < FX_LAZY_MAX_TRIGGERS; i++)
        if (req->grammar_trigger_tokens[i] < 0 ||
            (uint32_t)req->grammar_trigger_tokens[i] >= b->n_vocab)
            return fx_fail(&b->err, FX_ERR_INVALID_ARG,
                           "grammar trigger token %zu (%d) is outside the "
                           "vocabulary", i, req->grammar_trigger_tokens[i]);
    if (req->n_stop_tokens > b->n_vocab)
        return fx_fail(&b->err, FX_ERR_INVALID_ARG, "too many stop tokens");
    for (size_t i = 0; i < req->n_stop_tokens; i++)
        if (req->stop_tokens[i] < 0 || (uint32_t)req->stop_tokens[i] >= b->n_vocab)
            return fx_fail(&b->err, FX_ERR_INVALID_ARG,
                           "stop token %zu (%d) is outside the vocabulary", i,
                           req->stop_tokens[i]);
    return FX_OK;
}

/* Compiles the request's grammar (or takes the JSON one) and gives the
 * row's sampler its parse. The trie and walk scratch are built here, at
 * the first grammar, so a step never allocates. */
static fx_status set_grammar(fx_batcher_impl *b, row *r, const fx_request *req) {
    fx_status st;
    const fx_grammar *g;
    if (!req->grammar && !(req->flags & FX_REQUEST_JSON)) return FX_OK;
    if (req->grammar) {
        if ((st = fx_grammar_compile(&b->alloc, req->grammar, req->grammar_len,
                                     req->grammar_root, &r->grammar,
                                     &b->err)) != FX_OK)
            return st;
        g = r->grammar;
    } else {
        if (!b->json && (st = fx_grammar_json(&b->alloc, &b->json, &b->err)) != FX_OK)
            return st;
        g = b->json;
    }
    if ((st = fx_sampler_set_grammar_ctx(&r->sampler, &b->sctx, &b->alloc, g,
                                         &b->err)) != FX_OK ||
        (!req->n_grammar_triggers && !req->n_grammar_trigger_tokens))
        return st;
    /* Lengths of the trigger strings, bounded before strlen walks them. */
    size_t lens[FX_LAZY_MAX_TRIGGERS];
    if (req->n_grammar_triggers > FX_LAZY_MAX_TRIGGERS)
        return fx_fail(&b->err, FX_ERR_INVALID_ARG,
                       "more than %u grammar triggers", FX_LAZY_MAX_TRIGGERS);
    for (size_t i = 0; i < req->n_grammar_triggers; i++) {
        const char *w = req->grammar_triggers[i];
        lens[i] = w ? strnlen(w, FX_LAZY_MAX_TRIGGER_LEN + 1) : 0;
    }
    return fx_sampler_set_lazy(&r->sampler, &b->alloc, req->grammar_triggers,
                               lens, req->n_grammar_triggers,
                               req->grammar_trigger_tokens,
                               req->n_grammar_trigger_tokens, &b->err);
}

/* Fills a fresh row from a request (and the lease it continues). A
 * lease's own row (pin) generates nothing: it is sized as exactly its
 * tokens, while its prompt keeps the room of one generated token that
 * every row continuing it needs (those are sized, and refused, at their
 * own submit). */
static fx_status fill_row(fx_batcher_impl *b, row *r, const fx_request *req,
                          const lease_rec *lease, int pin) {
    fx_status st;
    uint32_t lease_n = lease ? lease->n_tokens : 0;
    if (lease_n + req->max_tokens > b->params.n_ctx)
        return fx_fail(&b->err, FX_ERR_NO_ROOM,
                       "the lease (%u tokens) and max_tokens %u exceed the "
                       "context of %u",
                       lease_n, req->max_tokens, b->params.n_ctx);
    r->cap_tokens = b->params.n_ctx;
    r->tokens = fx_malloc_array(&b->alloc, r->cap_tokens, sizeof *r->tokens);
    if (!r->tokens) return fx_fail(&b->err, FX_ERR_NOMEM, "out of memory");
    if (lease_n) memcpy(r->tokens, lease->tokens, lease_n * sizeof *r->tokens);
    size_t n = 0;
    int add_bos = !lease && !(req->flags & FX_REQUEST_NO_BOS);
    if ((st = prompt_tokens(b, req, add_bos, r->tokens + lease_n,
                            r->cap_tokens - req->max_tokens - lease_n, &n)) !=
        FX_OK)
        return st;
    r->n_prompt = lease_n + (uint32_t)n;
    if (r->n_prompt == 0)
        return fx_fail(&b->err, FX_ERR_INVALID_ARG, "the prompt is empty");
    r->n_tokens = r->n_prompt;
    r->max_tokens = pin ? 0 : req->max_tokens;
    r->cap_tokens = r->n_prompt + r->max_tokens;

    /* Invariant 3: the blocks of the row's whole life, once, here. */
    r->blocks_need = fx_kv_blocks_for(b->kv, r->cap_tokens);
    if (fx_kv_fit_blocks(b->kv, r->blocks_need) == FX_KV_NEVER)
        return fx_fail(&b->err, FX_ERR_NO_ROOM,
                       "the request needs %u KV blocks; the cache has %u in "
                       "all",
                       r->blocks_need, fx_kv_total_blocks(b->kv));

    fx_sampling cfg;
    fx_sampling_default(&cfg);
    cfg.temperature = req->temperature;
    cfg.top_k = req->top_k;
    cfg.top_p = req->top_p;
    cfg.min_p = req->min_p;
    cfg.seed = req->seed;
    cfg.typical_p = req->typical_p;
    cfg.repeat_penalty = req->repeat_penalty;
    cfg.presence_penalty = req->presence_penalty;
    cfg.frequency_penalty = req->frequency_penalty;
    cfg.penalty_last_n = req->penalty_last_n;
    if ((st = fx_sampler_init(&r->sampler, &cfg, &b->err)) != FX_OK) return st;
    if ((st = fx_sampler_set_bias(&r->sampler, &b->alloc, req->logit_bias,
                                  req->n_logit_bias, b->n_vocab, &b->err)) != FX_OK)
        return st;
    r->n_logprobs = req->n_logprobs;
    if ((st = set_grammar(b, r, req)) != FX_OK) return st;
    if ((st = fx_textout_create(&b->alloc, req->stop, NULL, req->n_stop,
                                &r->text, &b->err)) != FX_OK)
        return st;
    if (req->n_stop_tokens) {
        r->stop_tokens = fx_malloc_array(&b->alloc, req->n_stop_tokens,
                                         sizeof *r->stop_tokens);
        if (!r->stop_tokens) return fx_fail(&b->err, FX_ERR_NOMEM, "out of memory");
        memcpy(r->stop_tokens, req->stop_tokens,
               req->n_stop_tokens * sizeof *r->stop_tokens);
        r->n_stop_tokens = (uint32_t)req->n_stop_tokens;
    }
    if ((st = fx_kv_lease_init(b->kv, &r->kv, FX_KV_PAGED, r->cap_tokens,
                               &b->err)) != FX_OK)
        return st;
    r->flags = req->flags;
    r->user = req->user;
    r->stop_index = -1;
    return FX_OK;
}

/* Takes a slot for a filled row and queues it; on failure the row's
 * memory is freed and the slot returned. */
static fx_status enqueue(fx_batcher_impl *b, uint32_t slot, row *r,
                         fx_status fill_status, uintptr_t *handle) {
    fx_status st = fill_status;
    /* A row the host will hold gets, before it is accepted, everything its
     * reply needs: the event slot of its DONE and room to hand over its
     * ids. Its reply then cannot be lost to a later lack of memory. */
    if (st == FX_OK && !r->is_pin) {
        st = fx_batcher_handover_reserve(b, &b->out_ids,
                                         (size_t)r->max_tokens * sizeof(int32_t));
        if (st == FX_OK) st = fx_batcher_reserve_done(b, r);
    }
    if (st == FX_OK) st = fx_batcher_queue_push(b, slot, &b->err);
    if (st != FX_OK) {
        /* Its memory goes back before the lock is taken (rows.c, slots). */
        fx_batcher_clear_row(b, r);
        pthread_mutex_lock(&b->lock);
        b->free_slots[b->n_free++] = slot;
    } else {
        pthread_mutex_lock(&b->lock);
        r->state = ROW_QUEUED;
        /* A lease's row is internal: the host never holds its handle. */
        r->handle_live = !r->is_pin;
        r->t_submit = fx_batcher_now();
        *handle = fx_handle_encode(slot, r->gen, b->row_salt);
    }
    pthread_mutex_unlock(&b->lock);
    return st;
}

fx_status fx_batcher_impl_submit(fx_batcher_impl *b, const fx_request *request,
                                 fx_row **out_row) {
    fx_request req;
    fx_request_init(&req);
    fx_status st = fx_params_copy(&req, sizeof req, request, REQUEST_V1_SIZE,
                                  &b->err, "fx_request");
    if (st != FX_OK || (st = check_request(b, &req)) != FX_OK) return st;
    const lease_rec *lease = NULL;
    uint32_t lease_index = 0;
    if (req.lease) {
        lease = fx_batcher_resolve_lease(b, req.lease, &lease_index);
        if (!lease)
            return fx_fail(&b->err, FX_ERR_STALE_HANDLE,
                           "the request's lease was released or never made");
    }
    uint32_t slot;
    if ((st = fx_batcher_take_slot(b, &slot, &b->err)) != FX_OK) return st;
    row *r = b->rows[slot];
    st = fill_row(b, r, &req, lease, 0);
    if (st == FX_OK && lease) {
        r->lease_slot = lease_index;
        r->waits_for_lease = lease->state == LEASE_PENDING;
        r->lease_gen = lease->gen;
    }
    uintptr_t handle = 0;
    st = enqueue(b, slot, r, st, &handle);
    if (st == FX_OK) *out_row = (fx_row *)handle;
    return st;
}

fx_status fx_batcher_impl_cancel(fx_batcher_impl *b, fx_row *handle) {
    uint32_t slot;
    fx_status st = FX_OK;
    pthread_mutex_lock(&b->lock);
    row *r = fx_batcher_resolve_row(b, handle, &slot);
    /* Marking, not removing: the row leaves through the same exit path as
     * every other (docs/design.md invariant 6), at the next step. */
    if (r) r->cancel_requested = 1;
    else st = FX_ERR_STALE_HANDLE;
    pthread_mutex_unlock(&b->lock);
    return st;
}

fx_status fx_batcher_impl_release(fx_batcher_impl *b, fx_row *handle) {
    uint32_t slot;
    pthread_mutex_lock(&b->lock);
    row *r = fx_batcher_resolve_row(b, handle, &slot);
    if (r) {
        r->handle_live = 0;
        r->gen++; /* the handle is stale from now on */
        r->cancel_requested = 1;
    }
    pthread_mutex_unlock(&b->lock);
    if (!r)
        return fx_fail(&b->err, FX_ERR_STALE_HANDLE,
                       "fx_row_release: stale or released row");
    /* A row that already exited only waited for its handle. */
    fx_batcher_row_retire(b, slot);
    return FX_OK;
}

/* ---- leases ---- */

static fx_status take_lease(fx_batcher_impl *b, uint32_t *index) {
    for (uint32_t i = 0; i < b->n_leases; i++)
        if (b->leases[i].state == LEASE_FREE) {
            *index = i;
            return FX_OK;
        }
    if (b->n_leases == b->lease_cap) {
        fx_status st = fx_batcher_grow(&b->alloc, (void **)&b->leases,
                                       &b->lease_cap, sizeof *b->leases,
                                       &b->err);
        if (st != FX_OK) return st;
    }
    memset(&b->leases[b->n_leases], 0, sizeof *b->leases);
    b->leases[b->n_leases].gen = 1;
    *index = b->n_leases++;
    return FX_OK;
}

fx_status fx_batcher_impl_lease_create(fx_batcher_impl *b, const char *text,
                                       size_t len, uint32_t flags,
                                       fx_lease **out) {
    uint32_t index, slot;
    if (flags & ~(uint32_t)(FX_REQUEST_PARSE_SPECIAL | FX_REQUEST_NO_BOS))
        return fx_fail(&b->err, FX_ERR_INVALID_ARG,
                       "fx_lease_create: unknown flags 0x%x", flags);
    fx_status st = take_lease(b, &index);
    if (st != FX_OK) return st;
    if ((st = fx_batcher_take_slot(b, &slot, &b->err)) != FX_OK) return st;
    lease_rec *l = &b->leases[index];
    row *r = b->rows[slot];
    /* The lease's prefix is computed by an ordinary row that generates
     * nothing: it prefills, publishes, and its exit pins what it wrote.
     * (max_tokens 1: the prefix leaves a continuing row room for one.) */
    fx_request req;
    fx_request_init(&req);
    req.prompt = text;
    req.prompt_len = len;
    req.flags = flags;
    req.max_tokens = 1;
    st = fill_row(b, r, &req, NULL, 1);
    if (st == FX_OK) {
        r->is_pin = 1;
        r->lease_slot = index;
        l->tokens = fx_malloc_array(&b->alloc, r->n_prompt, sizeof *l->tokens);
        if (!l->tokens) st = fx_fail(&b->err, FX_ERR_NOMEM, "out of memory");
        else memcpy(l->tokens, r->tokens, r->n_prompt * sizeof *l->tokens);
    }
    uintptr_t row_handle;
    st = enqueue(b, slot, r, st, &row_handle);
    if (st != FX_OK) {
        fx_free(&b->alloc, l->tokens);
        l->tokens = NULL;
        return st;
    }
    l->n_tokens = r->n_prompt;
    l->state = LEASE_PENDING;
    l->handle_live = 1;
    l->pin_row = slot;
    *out = (fx_lease *)fx_handle_encode(index, l->gen, b->lease_salt);
    return FX_OK;
}

int fx_batcher_impl_lease_ready(const fx_batcher_impl *b, const fx_lease *h) {
    uint32_t index;
    const lease_rec *l = fx_batcher_resolve_lease(b, h, &index);
    return l && l->state != LEASE_PENDING;
}

int fx_batcher_impl_lease_pinned(const fx_batcher_impl *b, const fx_lease *h) {
    uint32_t index;
    const lease_rec *l = fx_batcher_resolve_lease(b, h, &index);
    return l && l->state == LEASE_READY;
}

fx_status fx_batcher_impl_lease_status(const fx_batcher_impl *b,
                                       const fx_lease *h, fx_lease_state *out) {
    uint32_t index;
    const lease_rec *l = fx_batcher_resolve_lease(b, h, &index);
    if (!l) return FX_ERR_STALE_HANDLE;
    *out = l->state == LEASE_PENDING ? FX_LEASE_PENDING
           : l->state == LEASE_READY ? FX_LEASE_PINNED
                                     : FX_LEASE_UNPINNED;
    return FX_OK;
}

/* Frees a lease record once nothing refers to it any more. */
void fx_batcher_lease_drop(fx_batcher_impl *b, uint32_t index) {
    lease_rec *l = &b->leases[index];
    if (l->handle_live || l->state == LEASE_PENDING) return;
    if (l->pin.active) fx_kv_unpin(b->kv, &l->pin, NULL);
    fx_free(&b->alloc, l->tokens);
    uint32_t gen = l->gen;
    memset(l, 0, sizeof *l);
    l->gen = gen;
}

fx_status fx_batcher_impl_lease_release(fx_batcher_impl *b, fx_lease *h) {
    uint32_t index;
    lease_rec *l = fx_batcher_resolve_lease(b, h, &index);
    if (!l)
        return fx_fail(&b->err, FX_ERR_STALE_HANDLE,
                       "fx_lease_release: stale or released lease");
    l->handle_live = 0;
    l->gen++;
    if (l->state == LEASE_PENDING) {
        /* Its row is still computing: stop it; its exit drops the record.
         * (cancel_requested is only written under the lock.) */
        pthread_mutex_lock(&b->lock);
        b->rows[l->pin_row]->cancel_requested = 1;
        pthread_mutex_unlock(&b->lock);
        return FX_OK;
    }
    fx_batcher_lease_drop(b, index);
    return FX_OK;
}
