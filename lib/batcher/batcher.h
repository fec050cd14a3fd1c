/*
 * batcher: the job queue, the keyed row table, admission against the KV
 * budget, step scheduling, and the events a host polls. Its invariants are
 * the ones in docs/design.md, each noted where it is kept.
 *
 * lib/api holds the public entry points; they check arguments and call
 * these. Handles are encoded and decoded here.
 */
#ifndef FX_BATCHER_H
#define FX_BATCHER_H

#include "../core/core.h"
#include "../model/model.h"

struct fx_vocab;

/* What the batcher needs of a model: the pieces lib/api owns. */
typedef struct fx_batcher_model {
    const fx_hparams *hp;
    const fx_weights *weights;
    const struct fx_vocab *vocab;
} fx_batcher_model;

typedef struct fx_batcher_impl fx_batcher_impl;

fx_status fx_batcher_impl_create(const fx_batcher_model *model,
                                 const fx_batcher_params *params,
                                 fx_batcher_impl **out, fx_error *err);
void fx_batcher_impl_free(fx_batcher_impl *b);

/* The batcher's last-failure text, for fx_batcher_errmsg. */
const char *fx_batcher_impl_errmsg(const fx_batcher_impl *b);

fx_status fx_batcher_impl_submit(fx_batcher_impl *b, const fx_request *req,
                                 fx_row **out_row);
fx_status fx_batcher_impl_step(fx_batcher_impl *b);
uint32_t fx_batcher_impl_pending(const fx_batcher_impl *b);
int fx_batcher_impl_poll(fx_batcher_impl *b, fx_event *ev);
fx_status fx_batcher_impl_cancel(fx_batcher_impl *b, fx_row *row);
fx_status fx_batcher_impl_release(fx_batcher_impl *b, fx_row *row);

fx_status fx_batcher_impl_lease_create(fx_batcher_impl *b, const char *text,
                                       size_t len, uint32_t flags,
                                       fx_lease **out);
int fx_batcher_impl_lease_ready(const fx_batcher_impl *b, const fx_lease *l);
int fx_batcher_impl_lease_pinned(const fx_batcher_impl *b, const fx_lease *l);
fx_status fx_batcher_impl_lease_status(const fx_batcher_impl *b,
                                       const fx_lease *l, fx_lease_state *out);
fx_status fx_batcher_impl_lease_release(fx_batcher_impl *b, fx_lease *l);

/* The most fx_batcher_params.kv_bytes defaults to (ferrox.h): 2 GiB. */
#define FX_BATCHER_DEFAULT_KV_CAP ((uint64_t)2 << 30)

/* The default kv_bytes: max_rows rows of n_ctx positions, capped at
 * FX_BATCHER_DEFAULT_KV_CAP, but never less than one row. */
uint64_t fx_batcher_default_kv_bytes(const fx_hparams *hp, uint32_t max_rows,
                                     uint32_t n_ctx, uint32_t block_tokens,
                                     uint32_t max_step_tokens,
                                     fx_kv_dtype dtype);

/* The KV layer's element type for the batcher's flags. */
static inline fx_kv_dtype fx_batcher_kv_dtype(const fx_batcher_params *p) {
    return p->flags & FX_BATCHER_KV_F16 ? FX_KV_DTYPE_F16 : FX_KV_DTYPE_F32;
}

/* ---- for tests: the accounting the invariants are stated in ---- */

typedef struct fx_batcher_stats {
    uint32_t queued;        /* jobs waiting for admission */
    uint32_t running;       /* rows admitted and not yet ended */
    uint32_t blocks_total;  /* KV blocks in the pool */
    uint32_t blocks_reserved; /* reserved by running rows */
    uint32_t blocks_free;   /* on the free list */
    uint32_t blocks_cached; /* held by the prefix tree only */
    uint32_t blocks_pinned; /* held by leases */
    uint32_t head_need;     /* blocks the job at the head of the queue
                               needs for its whole life (0: none queued) */
    uint64_t steps;
    uint64_t forward_tokens; /* tokens run through the model so far */
    uint32_t ring_total;    /* sliding layers' ring blocks (0: no rings) */
    uint32_t ring_row;      /* held by running rows */
    uint32_t ring_cached;   /* on the prefix tree only */
} fx_batcher_stats;

void fx_batcher_impl_stats(const fx_batcher_impl *b, fx_batcher_stats *out);
/* FX_OK when every accounting identity holds (blocks add up, refcounts at
 * their expected values); FX_ERR_INTERNAL with a message otherwise. */
fx_status fx_batcher_impl_check(const fx_batcher_impl *b, fx_error *err);

#endif /* FX_BATCHER_H */
