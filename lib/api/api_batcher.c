/*
 * Public batcher entry points: NULL checks, the reentrancy guard (a call
 * from inside the batcher's own log or allocator callback gets
 * FX_ERR_REENTRANT instead of corrupting a step halfway through), and the
 * model's batcher count.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "../batcher/batcher.h"
#include "api_internal.h"

struct fx_batcher {
    fx_alloc alloc;
    fx_model *model;
    fx_batcher_impl *impl;
    int in_call;
    int free_requested; /* fx_batcher_free from inside a callback: done
                           when the outer call returns */
    fx_error err; /* failures before impl exists or of the guard itself */
};

fx_batcher_impl *fx_batcher_get_impl(fx_batcher *b) { return b->impl; }

/* Sized: `size` is the host's sizeof, which may be an older, smaller
 * layout; each default is written only where the host's struct has it. */
void fx_batcher_params_init_sized(fx_batcher_params *p, size_t size) {
    if (!p) return;
    fx_struct_init(p, size);
    FX_INIT_MEMBER(p, size, fx_batcher_params, log_level, FX_LOG_WARN);
}

void fx_request_init_sized(fx_request *r, size_t size) {
    if (!r) return;
    fx_struct_init(r, size);
    FX_INIT_MEMBER(r, size, fx_request, max_tokens, 256);
    FX_INIT_MEMBER(r, size, fx_request, top_p, 1.0f);
    FX_INIT_MEMBER(r, size, fx_request, typical_p, 1.0f);
    FX_INIT_MEMBER(r, size, fx_request, repeat_penalty, 1.0f);
    FX_INIT_MEMBER(r, size, fx_request, penalty_last_n, 64);
}

fx_status fx_batcher_create(fx_model *model, const fx_batcher_params *params,
                            fx_batcher **out, char *errbuf,
                            size_t errbuf_size) {
    fx_error err;
    fx_error_clear(&err);
    fx_status st = FX_OK;
    if (errbuf && errbuf_size) errbuf[0] = '\0';
    if (out) *out = NULL;
    if (!model || !out)
        st = fx_fail(&err, FX_ERR_INVALID_ARG, "fx_batcher_create: %s is NULL",
                     model ? "out_batcher" : "model");
    else if (!model->has_weights)
        st = fx_fail(&err, FX_ERR_INVALID_ARG,
                     "fx_batcher_create: the model was loaded vocabulary-only");
    fx_batcher *b = NULL;
    if (st == FX_OK) {
        b = fx_calloc(&model->alloc, 1, sizeof *b);
        if (!b) st = fx_fail(&err, FX_ERR_NOMEM, "out of memory");
    }
    if (st == FX_OK) {
        b->alloc = model->alloc;
        b->model = model;
        fx_batcher_model bm = {model->gguf, &model->hp, &model->weights,
                               model->vocab};
        st = fx_batcher_impl_create(&bm, params, &b->impl, &err);
    }
    if (st != FX_OK) {
        if (b) fx_free(&b->alloc, b);
        if (errbuf && errbuf_size) snprintf(errbuf, errbuf_size, "%s", err.message);
        return st;
    }
    model->n_batchers++;
    *out = b;
    return FX_OK;
}

void fx_batcher_free(fx_batcher *b) {
    if (!b) return;
    if (b->in_call) {
        /* A hook is running inside one of this batcher's calls: freeing
         * now would pull the state from under that call, and ignoring it
         * would leak the batcher. */
        b->free_requested = 1;
        return;
    }
    fx_model *model = b->model;
    fx_batcher_impl_free(b->impl);
    fx_alloc alloc = b->alloc;
    fx_free(&alloc, b);
    if (--model->n_batchers == 0 && model->free_requested) fx_model_destroy(model);
}

const char *fx_batcher_errmsg(const fx_batcher *b) {
    if (!b) return "fx_batcher_errmsg: batcher is NULL";
    if (b->err.message[0]) return b->err.message;
    return fx_batcher_impl_errmsg(b->impl);
}

/* Enters a guarded call; FX_ERR_REENTRANT if one is already running. */
static fx_status enter(fx_batcher *b, const char *what) {
    fx_error_clear(&b->err);
    if (b->in_call)
        return fx_fail(&b->err, FX_ERR_REENTRANT,
                       "%s called from inside one of the batcher's callbacks",
                       what);
    b->in_call = 1;
    return FX_OK;
}

/* Leaves a guarded call; runs a free a callback asked for meanwhile. The
 * caller must not touch b afterwards. */
static void leave(fx_batcher *b) {
    b->in_call = 0;
    if (b->free_requested) fx_batcher_free(b);
}

fx_status fx_submit(fx_batcher *b, const fx_request *request, fx_row **out_row) {
    if (!b) return FX_ERR_INVALID_ARG;
    if (out_row) *out_row = NULL;
    if (!request || !out_row)
        return fx_fail(&b->err, FX_ERR_INVALID_ARG, "fx_submit: %s is NULL",
                       request ? "out_row" : "request");
    fx_status st = enter(b, "fx_submit");
    if (st != FX_OK) return st;
    st = fx_batcher_impl_submit(b->impl, request, out_row);
    leave(b);
    return st;
}

fx_status fx_step(fx_batcher *b) {
    if (!b) return FX_ERR_INVALID_ARG;
    fx_status st = enter(b, "fx_step");
    if (st != FX_OK) return st;
    st = fx_batcher_impl_step(b->impl);
    leave(b);
    return st;
}

uint32_t fx_batcher_pending(const fx_batcher *b) {
    return b ? fx_batcher_impl_pending(b->impl) : 0;
}

/* fx_event's first layout: the least a caller may pass, and what
 * fx_poll fills. */
#define EVENT_V1_SIZE (offsetof(fx_event, n_top) + sizeof(size_t))

int fx_poll_sized(fx_batcher *b, fx_event *event, size_t size,
                  fx_status *status) {
    fx_status ignored;
    if (!status) status = &ignored;
    *status = FX_OK;
    if (!b || !event || size < EVENT_V1_SIZE) {
        *status = FX_ERR_INVALID_ARG;
        if (b)
            fx_fail(&b->err, FX_ERR_INVALID_ARG, "fx_poll: %s",
                    event ? "event_size is below fx_event's first layout"
                          : "event is NULL");
        return 0;
    }
    if ((*status = enter(b, "fx_poll")) != FX_OK) return 0;
    fx_event ev;
    int got = fx_batcher_impl_poll(b->impl, &ev);
    /* The event's text lives in the batcher: none is handed out from a
     * batcher about to be freed. */
    if (b->free_requested) {
        got = 0;
        *status = FX_ERR_REENTRANT;
    }
    leave(b);
    if (got) {
        size_t n = size < sizeof ev ? size : sizeof ev;
        memcpy(event, &ev, n);
        if (size > n) memset((char *)event + n, 0, size - n);
    }
    return got;
}

int fx_poll(fx_batcher *b, fx_event *event) {
    return fx_poll_sized(b, event, EVENT_V1_SIZE, NULL);
}

fx_status fx_cancel(fx_batcher *b, fx_row *row) {
    /* No reentrancy guard: cancel is the one call allowed from anywhere,
     * and it only sets a flag under the batcher's lock. */
    if (!b) return FX_ERR_INVALID_ARG;
    return fx_batcher_impl_cancel(b->impl, row);
}

fx_status fx_row_release(fx_batcher *b, fx_row *row) {
    if (!b) return FX_ERR_INVALID_ARG;
    fx_status st = enter(b, "fx_row_release");
    if (st != FX_OK) return st;
    st = fx_batcher_impl_release(b->impl, row);
    leave(b);
    return st;
}

fx_status fx_lease_create(fx_batcher *b, const char *text, size_t text_len,
                          uint32_t flags, fx_lease **out) {
    if (!b) return FX_ERR_INVALID_ARG;
    if (out) *out = NULL;
    if (!out || (!text && text_len))
        return fx_fail(&b->err, FX_ERR_INVALID_ARG,
                       "fx_lease_create: %s is NULL", out ? "text" : "out_lease");
    fx_status st = enter(b, "fx_lease_create");
    if (st != FX_OK) return st;
    st = fx_batcher_impl_lease_create(b->impl, text, text_len, flags, out);
    leave(b);
    return st;
}

int fx_lease_ready(const fx_batcher *b, const fx_lease *lease) {
    return b ? fx_batcher_impl_lease_ready(b->impl, lease) : 0;
}

int fx_lease_pinned(const fx_batcher *b, const fx_lease *lease) {
    return b ? fx_batcher_impl_lease_pinned(b->impl, lease) : 0;
}

fx_status fx_lease_status(const fx_batcher *b, const fx_lease *lease,
                          fx_lease_state *state) {
    if (state) *state = FX_LEASE_NONE;
    if (!b || !state) return FX_ERR_INVALID_ARG;
    return fx_batcher_impl_lease_status(b->impl, lease, state);
}

fx_status fx_lease_release(fx_batcher *b, fx_lease *lease) {
    if (!b) return FX_ERR_INVALID_ARG;
    fx_status st = enter(b, "fx_lease_release");
    if (st != FX_OK) return st;
    st = fx_batcher_impl_lease_release(b->impl, lease);
    leave(b);
    return st;
}
