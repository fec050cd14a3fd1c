/*
 * The batcher's state, shared by its source files (rows.c: creation,
 * handles, the queue, events and poll; submit.c: submit, cancel, release
 * and leases; step.c: admission, the forward pass, sampling, the exit
 * path).
 */
#ifndef FX_BATCHER_IMPL_H
#define FX_BATCHER_IMPL_H

#include <pthread.h>

#include "../kv/kv.h"
#include "../sample/sample.h"
#include "../text/text.h"
#include "batcher.h"

typedef enum row_state {
    ROW_FREE = 0,  /* slot unused */
    ROW_QUEUED,    /* submitted, waiting for admission */
    ROW_RUNNING,   /* admitted: prefilling or decoding */
    ROW_EXITED     /* left through the exit path; slot awaits its handle */
} row_state;

/* One request, from submit to reaping. Addressed by slot index inside the
 * library and by (slot, generation) handles outside it: a handle captured
 * before a row ended names that row or nothing, never the slot's next
 * occupant (docs/design.md invariant 1). */
typedef struct row {
    uint32_t gen;            /* bumped when the host's handle dies */
    row_state state;
    int handle_live;         /* the host may still name this row */
    int cancel_requested;    /* set by fx_cancel, under the mutex */
    int is_pin;              /* computes a lease's prefix; no events */
    uint32_t lease_slot;     /* is_pin: the lease it computes; else the
                                lease it continues, if waits_for_lease */
    uint32_t lease_gen;
    int waits_for_lease;     /* admit only once that lease is computed */
    void *user;
    uint32_t flags;          /* FX_REQUEST_* */

    /* The whole sequence: prompt, then generated tokens. */
    int32_t *tokens;         /* [cap_tokens] */
    uint32_t n_prompt;
    uint32_t n_tokens;
    uint32_t cap_tokens;     /* n_prompt + max_tokens */
    uint32_t max_tokens;
    int32_t *stop_tokens;    /* [n_stop_tokens] */
    uint32_t n_stop_tokens;

    /* The sampler and its live grammar parse: one value (docs/design.md invariant
     * 7). The row owns the compiled grammar of its request (the JSON one
     * is the batcher's). */
    fx_sampler sampler;
    fx_grammar *grammar;
    uint32_t n_logprobs;     /* alternatives per TOKEN event; 0: none */
    fx_textout *text;        /* UTF-8 stream + stop matcher, this row's */
    fx_kv_lease kv;          /* its KV; the cursor is the one truth */
    uint32_t blocks_need;    /* blocks for its whole life, from submit
                                (docs/design.md invariant 3) */
    int decoding;            /* prompt fully in the KV */

    int done_reserved;       /* holds one of the batcher's reserved event
                                slots, for its DONE (events_reserved) */
    fx_finish_reason finish; /* NONE while live; set = marked to end */
    fx_status error;         /* FX_FINISH_ERROR: why */
    int32_t stop_index;
    uint32_t cached_tokens;
    uint32_t published_blocks; /* full blocks published mid-life (rings) */
    double t_submit, t_admit, t_first, t_end; /* the row's own clock */
} row;

/* One row's sample of a step (step.c): where its logits are, and what
 * sampling them gave. */
typedef struct sample_job {
    uint32_t slot;
    const float *logits;
    int32_t token;
    int eog;
    fx_status status;
    fx_error err;
} sample_job;

typedef enum lease_state {
    LEASE_FREE = 0,
    LEASE_PENDING,  /* its pin row is queued or running */
    LEASE_READY,    /* computed and pinned */
    LEASE_UNPINNED  /* computed, but nothing could be pinned */
} lease_state;

typedef struct lease_rec {
    uint32_t gen;
    lease_state state;
    int handle_live;
    int32_t *tokens;
    uint32_t n_tokens;
    fx_kv_pin pin;
    uint32_t pin_row;        /* slot of the row computing it (PENDING) */
} lease_rec;

/* What fx_poll hands the host -- a TEXT's bytes, a DONE's ids -- must stay
 * valid until the next fx_poll, and fx_poll must never need memory: an
 * event it could not hand over would stall every event behind it, and the
 * host, told "no event", could not tell. So two buffers: the host may be
 * reading buf[cur]; the other is grown ahead of time (at submit, or when
 * an event is queued), never while the host may read it. Every queued
 * event fits the larger of the two, so fx_poll only picks one. */
typedef struct handover {
    void *buf[2];
    size_t cap[2];           /* bytes */
    int cur;
} handover;

typedef struct event_rec {
    fx_event_type type;
    uint32_t slot;
    uint32_t gen;            /* the row's generation when it was queued */
    void *user;
    size_t text_off, text_len; /* into the batcher's text arena */
    fx_finish_reason finish;
    fx_status status;
    int32_t stop_index;
    fx_usage usage;            /* DONE (its ids are read from the row,
                                  which lives until the DONE is polled) */
    int32_t token;             /* TOKEN */
    float logprob;
    size_t lp_off, lp_len;     /* TOKEN: alternatives in lp_arena */
    int64_t grammar_start;     /* TEXT, DONE: fx_event.grammar_start */
} event_rec;

struct fx_batcher_impl {
    fx_alloc alloc;
    uintptr_t row_salt, lease_salt; /* this batcher's handles (see below) */
    fx_logger log;
    fx_error err;
    fx_batcher_model model;
    fx_batcher_params params;
    uint32_t n_vocab;
    int32_t bos;             /* -1 if none */
    int add_bos;

    fx_kernels *kc;
    fx_forward *fwd;
    fx_kv *kv;

    /* Slots. The mutex guards what fx_cancel touches from other threads:
     * the slot array (rows, n_slots), and each row's gen, handle_live and
     * cancel_requested -- written only with it held, and the only row
     * fields fx_cancel may read. Everything else in a row belongs to the
     * thread that steps. */
    pthread_mutex_t lock;
    row **rows;              /* [n_slots], each allocated once, reused */
    uint32_t n_slots;
    uint32_t *free_slots;    /* [n_slots] stack */
    uint32_t n_free;

    /* Submit order, kept explicitly (docs/design.md invariant 2). */
    uint32_t *queue;         /* [queue_cap] ring of slots */
    uint32_t queue_head, queue_len, queue_cap;
    uint32_t *running;       /* [max_rows] slots in admission order */
    uint32_t n_running;

    lease_rec *leases;       /* [n_leases] */
    uint32_t n_leases, lease_cap;

    /* Events, in the order they happened. Every row the host holds has
     * one slot of the array reserved for its DONE from submit on:
     * event_len + events_reserved <= event_cap always, so the reply that
     * ends a row can always be queued, however short memory is then
     * (docs/design.md invariant 5: it replies exactly once). */
    event_rec *events;       /* [event_cap] */
    uint32_t event_head, event_len, event_cap;
    uint32_t events_reserved; /* rows with done_reserved set */
    fx_textbuf arena;        /* TEXT bytes of queued events */
    handover out_text;       /* the text of the last polled TEXT */
    handover out_ids;        /* the ids of the last polled DONE */

    /* Step scratch, sized once at create. */
    fx_fwd_token *batch;     /* [max_step_tokens] */
    fx_kv_view *views;       /* [max_rows] */
    uint32_t *batch_rows;    /* [max_rows] slot per view */
    uint32_t *batch_counts;  /* [max_rows] tokens per view */
    float *logits;           /* [max_rows][n_vocab] */
    fx_candidate *candidates; /* [n_vocab] */
    char *piece;             /* token text scratch */
    size_t piece_cap;
    /* Sampling scratch (sized at create; the grammar trie and walk
     * scratch at the first request with a grammar, never per step), and
     * the built-in JSON grammar, compiled at its first use and shared. */
    fx_sample_ctx sctx;
    /* Rows without a grammar are sampled on every pool thread at once
     * (step.c, sample_rows): thread t > 0 has its own candidates and
     * sample scratch, thread 0 the two above. */
    unsigned n_samplers;          /* pool threads, >= 1 */
    fx_candidate **par_candidates; /* [n_samplers - 1] of [n_vocab] */
    fx_sample_ctx *par_sctx;       /* [n_samplers - 1] */
    sample_job *sample_jobs;      /* [max_rows] this step's samples */
    uint32_t *sample_par;         /* [max_rows] the ones sampled in parallel */
    fx_grammar *json;
    fx_token_logprob *lp_arena; /* alternatives of queued TOKEN events */
    size_t lp_len, lp_cap;
    fx_token_logprob polled_lp[FX_MAX_LOGPROBS]; /* the last polled's */
    fx_token_logprob lp_top[FX_MAX_LOGPROBS];    /* step scratch */

    int in_call;             /* a public call is running (reentrancy) */
    int broken;              /* a batcher-wide failure: refuse to step */
    uint64_t steps, forward_tokens;
};

/* ---- handles ----
 * A handle is ((generation << SLOT_BITS) | (slot + 1)) ^ salt, never a
 * pointer the library dereferences: a stale handle fails the generation
 * check instead of reaching whatever now lives in that slot. The salt is
 * the batcher's own (one for rows, another for leases), so a handle of
 * another batcher decodes to a slot and generation that match a live row
 * only by a chance of about 2^-32 (2^-16 with 32-bit pointers). The
 * salt's top slot bit is set: a valid handle is never 0. */

#define FX_SLOT_BITS (sizeof(uintptr_t) >= 8 ? 32u : 16u)
#define FX_GEN_MASK ((uint32_t)(sizeof(uintptr_t) >= 8 ? 0xFFFFFFFFu : 0xFFFFu))
#define FX_SLOT_MASK (((uintptr_t)1 << FX_SLOT_BITS) - 1)

static inline uintptr_t fx_handle_encode(uint32_t slot, uint32_t gen,
                                         uintptr_t salt) {
    return (((uintptr_t)(gen & FX_GEN_MASK) << FX_SLOT_BITS) |
            ((uintptr_t)slot + 1)) ^ salt;
}

static inline bool fx_handle_decode(uintptr_t h, uintptr_t salt,
                                    uint32_t limit, uint32_t *slot,
                                    uint32_t *gen) {
    h ^= salt;
    uintptr_t s = h & FX_SLOT_MASK;
    if (s == 0 || s > limit) return false;
    *slot = (uint32_t)(s - 1);
    *gen = (uint32_t)(h >> FX_SLOT_BITS) & FX_GEN_MASK;
    return true;
}

/* A salt for a batcher's handles, from its address and the clock. */
uintptr_t fx_handle_salt(const void *batcher, uint64_t stream);

/* ---- rows.c ---- */

/* The live row a host handle names, or NULL. Call with the lock held. */
row *fx_batcher_resolve_row(fx_batcher_impl *b, fx_row *handle,
                            uint32_t *slot);
lease_rec *fx_batcher_resolve_lease(const fx_batcher_impl *b,
                                    const fx_lease *h, uint32_t *index);
fx_status fx_batcher_grow(const fx_alloc *alloc, void **array, uint32_t *cap,
                          size_t elem, fx_error *err);
fx_status fx_batcher_take_slot(fx_batcher_impl *b, uint32_t *slot,
                               fx_error *err);
void fx_batcher_clear_row(fx_batcher_impl *b, row *r);
fx_status fx_batcher_queue_push(fx_batcher_impl *b, uint32_t slot,
                                fx_error *err);

double fx_batcher_now(void);
row *fx_batcher_row(const fx_batcher_impl *b, uint32_t slot);
/* Queues a TEXT (its text already in the arena) or TOKEN event, keeping
 * the reserved DONE slots free; FX_ERR_NOMEM when there is no room. */
fx_status fx_batcher_push_event(fx_batcher_impl *b, const event_rec *ev);
/* Reserves the event slot of a row's DONE (at submit); FX_ERR_NOMEM. */
fx_status fx_batcher_reserve_done(fx_batcher_impl *b, row *r);
/* Queues a row's DONE in the slot it reserved at submit: cannot fail.
 * Releases the reservation. */
void fx_batcher_push_done(fx_batcher_impl *b, row *r, const event_rec *ev);
/* Gives back a row's DONE slot without using it (its host handle died). */
void fx_batcher_unreserve_done(fx_batcher_impl *b, row *r);
/* Makes sure fx_poll can hand over `bytes` through h without allocating. */
fx_status fx_batcher_handover_reserve(fx_batcher_impl *b, handover *h,
                                      size_t bytes);
/* Frees a row's request memory and puts its slot back if the handle is
 * dead too. Called when the row has exited. */
void fx_batcher_row_retire(fx_batcher_impl *b, uint32_t slot);
uint32_t fx_batcher_queue_at(const fx_batcher_impl *b, uint32_t i);
void fx_batcher_queue_pop(fx_batcher_impl *b);

/* ---- submit.c ---- */

/* Frees a lease record once neither the host nor its row refers to it. */
void fx_batcher_lease_drop(fx_batcher_impl *b, uint32_t index);

/* ---- step.c ---- */

/* The one exit path (docs/design.md invariant 5): final text, publish, release,
 * usage, DONE. */
void fx_batcher_end_row(fx_batcher_impl *b, uint32_t slot);

#endif /* FX_BATCHER_IMPL_H */
