/*
 * kv: where rows keep their keys and values.
 *
 *   pool     fixed blocks of block_tokens positions, each holding every
 *            layer's K and V (model.h's block layout), allocated once at
 *            create; a per-block refcount and a free list.
 *   budget   admission is a comparison against what is available now;
 *            a need larger than the whole pool is reported as never
 *            fitting, so it can be refused at submit (docs/design.md invariant 3).
 *   lease    one row's KV: its block table and its KV cursor, the ONE
 *            truth for positions written (invariant 4).
 *   radix    a tree over token ids, one edge per full block, so a row can
 *            adopt the prefix an earlier row computed and prefill only the
 *            suffix; LRU eviction of unreferenced leaves; pins.
 *
 * One fx_kv owns all four, because they cannot be kept apart: growing a
 * lease may evict from the tree, and what the budget may promise depends
 * on what the tree could give back.
 *
 * Accounting. Every block is in exactly one class at every moment:
 *   free     on the free list (refcount 0);
 *   row      held by at least one lease;
 *   pinned   in the tree, held by no lease, pinned;
 *   cached   in the tree, held by no lease, not pinned.
 * free + row + pinned + cached == total, checked by fx_kv_check. Cached
 * blocks count as available: they are evictable on demand, because a
 * block held by a lease or a pin has every ancestor held too (adoption and
 * pins take whole root paths, publish swaps a row onto blocks the tree
 * already has), so below a cached block there is nothing but cached
 * blocks and some cached leaf can always go.
 *
 *   available = free + cached - reserved
 * where `reserved` is the blocks admitted leases may still draw. Every
 * draw a reservation promised therefore succeeds, whatever other rows do.
 *
 * Not thread-safe: the batcher's worker owns the fx_kv and every lease.
 *
 * The batcher's order of calls for one row:
 *   submit   need = fx_kv_blocks_for(kv, prompt + max_tokens);
 *            fx_kv_fit_blocks(kv, need) == FX_KV_NEVER -> refuse
 *            (docs/reliability.md 38);
 *            fx_kv_lease_init (the only allocation a row's KV makes).
 *   admit    fx_kv_lease_admit: adopts the cached prefix, reserves the
 *            rest; FX_KV_LATER -> the job stays queued, nothing changed.
 *   step     fx_kv_lease_prepare(n) -> pos0 = fx_kv_lease_cursor ->
 *            fx_forward_run at positions pos0.. with fx_kv_lease_view ->
 *            fx_kv_lease_advance(n) once the pass succeeded.
 *   end      (every way a row ends, the ONE exit path, invariant 5)
 *            fx_kv_lease_publish(prompt + generated), then
 *            fx_kv_lease_release, then fx_kv_lease_free.
 *   pin      publish the prefix through a row, then fx_kv_pin_prefix;
 *            fx_kv_unpin when the host releases its fx_lease.
 */
#ifndef FX_KV_H
#define FX_KV_H

#include "../core/core.h"
#include "../model/model.h"

typedef struct fx_kv fx_kv;

typedef struct fx_kv_params {
    uint32_t n_blocks;     /* pool size; the batcher derives it from its
                              memory budget (fx_kv_plan) */
    uint32_t block_tokens; /* positions per block; 0 means 16 */
    /* Sliding-window layers kept apart (0: every block holds every
     * layer). A layer that sees only the last n_swa positions needs only
     * those: each lease keeps them in a ring of blocks from a second pool
     * of n_ring_blocks, long enough for the window plus ring_call
     * positions, the most one forward call may add to a row. */
    uint32_t ring_call;
    uint32_t n_ring_blocks;
    fx_kv_dtype dtype;     /* how K and V are stored; zero is F32 */
} fx_kv_params;

#define FX_KV_DEFAULT_BLOCK_TOKENS 16u

/* The pool `bytes` buys for rows of up to n_ctx positions that add at
 * most max_call positions per forward call: sliding layers go to rings
 * when the model has them and a ring is shorter than a row, and the
 * bytes split between the pools as one full row splits them. n_blocks is
 * 0 if not even one block fits. */
void fx_kv_plan(const fx_hparams *hp, uint32_t block_tokens, uint32_t n_ctx,
                uint32_t max_call, fx_kv_dtype dtype, uint64_t bytes,
                fx_kv_params *out);
/* What one row of n_ctx positions costs under that plan (0 on overflow). */
uint64_t fx_kv_row_bytes(const fx_hparams *hp, uint32_t block_tokens,
                         uint32_t n_ctx, uint32_t max_call, fx_kv_dtype dtype);

/* Allocates the pool, the tree's nodes (one per block: a node always owns
 * exactly one block) and the check's scratch, all at once: nothing after
 * this allocates except fx_kv_lease_init. */
fx_status fx_kv_create(const fx_alloc *alloc, const fx_hparams *hp,
                       const fx_kv_params *params, fx_kv **out,
                       fx_error *err);
/* NULL is a no-op. Leases still live are released and detached (their
 * storage freed; a later fx_kv_lease_free on them is a no-op). */
void fx_kv_free(fx_kv *kv);

/* How many blocks of block_tokens fit in `bytes` of KV memory (0 if not
 * even one). */
uint32_t fx_kv_blocks_for_bytes(const fx_hparams *hp, uint32_t block_tokens,
                                fx_kv_dtype dtype, uint64_t bytes);
/* What one block costs against that budget: its K and V plus the pool's
 * bookkeeping for it. 0 if block_tokens is 0 or the size overflows. */
uint64_t fx_kv_block_bytes(const fx_hparams *hp, uint32_t block_tokens,
                           fx_kv_dtype dtype);

uint32_t fx_kv_block_tokens(const fx_kv *kv);
/* Whether sliding layers live in rings (fx_kv_params.ring_call). */
bool fx_kv_has_ring(const fx_kv *kv);
uint32_t fx_kv_total_blocks(const fx_kv *kv);

/* ---- blocks ---- */

/* Blocks that hold n_positions positions: ceil(n_positions / block_tokens). */
uint32_t fx_kv_blocks_for(const fx_kv *kv, uint64_t n_positions);
/* The data of block id b: its first run (lib/model/model.h), the others
 * fx_kv_run_stride elements apart; NULL for an id out of range. */
void *fx_kv_block_data(const fx_kv *kv, uint32_t b);
/* Elements from a block's run to its next: every block's run r side by
 * side, n_blocks * block_tokens * head_dim. */
size_t fx_kv_run_stride(const fx_kv *kv);
fx_kv_dtype fx_kv_dtype_of(const fx_kv *kv);
/* Leases holding b, plus one if the tree owns it; 0 means free. */
uint32_t fx_kv_block_refcount(const fx_kv *kv, uint32_t b);

/* ---- budget ---- */

typedef enum fx_kv_fit {
    FX_KV_NOW = 0,   /* admitted / fits now */
    FX_KV_LATER = 1, /* does not fit now; will once rows end or pins go */
    FX_KV_NEVER = 2  /* more than the whole pool: refuse it */
} fx_kv_fit;

/* Whether a row needing n_blocks new blocks could be admitted now. A read:
 * nothing is reserved (fx_kv_lease_admit reserves). */
fx_kv_fit fx_kv_fit_blocks(const fx_kv *kv, uint64_t n_blocks);

typedef struct fx_kv_stats {
    uint32_t total;
    uint32_t free;      /* on the free list */
    uint32_t row;       /* held by at least one lease */
    uint32_t pinned;    /* in the tree, no lease, pinned */
    uint32_t cached;    /* in the tree, no lease, not pinned: evictable */
    uint64_t reserved;  /* admitted but not yet drawn */
    uint64_t available; /* free + cached - reserved */
    uint32_t tree_nodes;
    uint32_t leases;    /* live leases (initialized, not freed) */
    /* The sliding layers' pool (all 0 without one). */
    uint32_t ring_total, ring_free, ring_row, ring_cached;
    uint32_t ring_pinned;   /* in the window of some pin's end */
    uint64_t ring_entitled; /* blocks the active leases' rings may hold */
} fx_kv_stats;

void fx_kv_stats_get(const fx_kv *kv, fx_kv_stats *st);

/* Recomputes everything from scratch and compares: the class identity,
 * the free list, every block's refcount against the live leases' tables,
 * the reservation sum, the tree's links and pin counts, that a held block's
 * parent is held, and the LRU list (exactly the evictable leaves, oldest
 * first). FX_OK or FX_ERR_INTERNAL naming the first violation. For
 * tests and debug builds: it is O(blocks + table entries). */
fx_status fx_kv_check(const fx_kv *kv, fx_error *err);

/* ---- radix tree ---- */

/* Longest cached prefix of tokens[0, n_tokens), in whole blocks, at most
 * max_blocks. A read-only lookup: no refcount, no LRU change. */
uint32_t fx_kv_match(const fx_kv *kv, const int32_t *tokens, size_t n_tokens,
                     uint32_t max_blocks);

/* Blocks a prompt may adopt: floor((n_prompt - 1) / block_tokens). The last
 * prompt token is always recomputed, because its logits are what the first
 * sampled token comes from and the cache holds no logits. */
uint32_t fx_kv_adoptable_blocks(const fx_kv *kv, uint32_t n_prompt);

/* Evicts up to n least-recently-used unreferenced leaves; *evicted (may be
 * NULL) says how many went. Leases and pins are never touched. */
void fx_kv_evict(fx_kv *kv, uint32_t n, uint32_t *evicted);

/* A pinned path: "compute a prefix (a system prompt shared by many rows)
 * once and never evict it until released". */
typedef struct fx_kv_pin {
    uint32_t node;     /* deepest pinned node */
    uint32_t n_blocks; /* blocks pinned (0: nothing was cached) */
    int active;
} fx_kv_pin;

/* Pins the longest cached whole-block prefix of tokens -- with rings, and
 * the ring blocks of the window before its end, so rows continuing it
 * adopt all of it. Pinning cached blocks takes them out of `available`,
 * so it is a reservation like any other: *fit is FX_KV_LATER (and nothing
 * is pinned) when it does not fit.
 * Blocks a lease holds cost nothing to pin, so pinning right after publish
 * and before release always fits. */
fx_status fx_kv_pin_prefix(fx_kv *kv, const int32_t *tokens, size_t n_tokens,
                           fx_kv_pin *pin, fx_kv_fit *fit, fx_error *err);
/* Unpins; a second unpin of the same pin is FX_ERR_INVALID_ARG. */
fx_status fx_kv_unpin(fx_kv *kv, fx_kv_pin *pin, fx_error *err);

/* ---- leases ---- */

typedef enum fx_kv_layout {
    FX_KV_PAGED = 0,     /* blocks from the pool; adopts and publishes */
    FX_KV_CONTIGUOUS = 1 /* one block as long as the context, allocated at
                            init, outside the pool; neither adopts nor
                            publishes */
} fx_kv_layout;

typedef enum fx_kv_lease_state {
    FX_KV_LEASE_IDLE = 0,   /* initialized, not admitted */
    FX_KV_LEASE_ACTIVE = 1, /* admitted: may hold blocks */
    FX_KV_LEASE_RELEASED = 2
} fx_kv_lease_state;

/* One row's KV. Caller-owned memory (a row embeds it), so a release after
 * release is a detected state, not a use after free. Fields are private:
 * use the functions. The kv links every live lease (fx_kv_check counts
 * refcounts against their tables), so a lease must not be moved or copied
 * between fx_kv_lease_init and fx_kv_lease_free: keep rows in stable
 * storage, not in an array that is realloc'd. */
typedef struct fx_kv_lease {
    fx_kv *kv;
    fx_kv_layout layout;
    fx_kv_lease_state state;
    uint32_t *table;        /* [max_blocks] block ids; [0, n_blocks) valid */
    void **ptrs;            /* [max_blocks] their data: the view's blocks */
    uint32_t n_blocks, max_blocks;
    uint32_t max_positions;
    uint32_t cursor;        /* positions written: the one truth */
    uint32_t adopted;       /* leading blocks adopted at admission */
    uint32_t reserve_left;  /* blocks this lease may still draw */
    void *contig;           /* contiguous: one block of max_positions */
    struct fx_kv_lease *prev, *next; /* the kv's live list, for fx_kv_check */
    /* The sliding layers' ring (paged, on a kv with one): slot s holds
     * block index ring_at[s], s == ring_at[s] % ring_len. */
    uint32_t *ring;         /* [ring_len] ring block ids, or KV_NIL */
    uint32_t *ring_at;      /* [ring_len] */
    void **ring_ptrs;       /* [ring_len] their data: the view's ring */
    uint32_t ring_cap;      /* slots it may fill: its share of the pool */
    uint32_t ring_held;     /* slots filled */
} fx_kv_lease;

/* Allocates the table for up to max_positions positions (or, contiguous,
 * the whole buffer) and registers the lease. State IDLE. */
fx_status fx_kv_lease_init(fx_kv *kv, fx_kv_lease *lease, fx_kv_layout layout,
                           uint32_t max_positions, fx_error *err);
/* Releases (if not yet) and frees. A zeroed or already freed lease is a
 * no-op. */
void fx_kv_lease_free(fx_kv_lease *lease);

/* Admission of an IDLE lease for a row of n_prompt prompt tokens that may
 * write n_positions positions in all (prompt + max_tokens, at most
 * max_positions). Adopts the longest cached prefix (at most
 * fx_kv_adoptable_blocks) and reserves the rest, if
 *   (need - adopted) + (adopted blocks that were only cached) <= available;
 * then *fit = FX_KV_NOW, the state is ACTIVE and the cursor is the adopted
 * length, so prefill starts there (invariant 4). Otherwise *fit says LATER
 * or NEVER and nothing changed. */
fx_status fx_kv_lease_admit(fx_kv_lease *lease, const int32_t *prompt,
                            uint32_t n_prompt, uint32_t n_positions,
                            fx_kv_fit *fit, fx_error *err);

/* Positions already written: where the next forward pass runs. */
uint32_t fx_kv_lease_cursor(const fx_kv_lease *lease);
/* Prompt tokens that came from the cache (usage's cached tokens). */
uint32_t fx_kv_lease_adopted_tokens(const fx_kv_lease *lease);

/* Makes positions [cursor, cursor + n_new) writable: draws blocks from the
 * pool (evicting LRU leaves if it is empty) against the reservation. Never
 * allocates. Past max_positions: FX_ERR_NO_ROOM. Past the reservation,
 * drawing only what no other row was promised: FX_ERR_TOO_LARGE when
 * nothing is left (a row admitted with n_positions = prompt + max_tokens
 * never gets there). Broken internal state: FX_ERR_INTERNAL.
 *
 * Caller errors (a lease in the wrong state, released twice, unpinned
 * twice, tokens that contradict the lease) are FX_ERR_INVALID_ARG
 * everywhere in this header; FX_ERR_INTERNAL is reserved for a refcount
 * that would go negative or any other broken invariant. */
fx_status fx_kv_lease_prepare(fx_kv_lease *lease, uint32_t n_new,
                              fx_error *err);
/* The view fx_forward_run reads and writes this row's KV through. Valid
 * until the next prepare, publish or release of this lease. With a ring,
 * one forward call may run at most the kv's ring_call positions of the
 * row (prepare refuses more): the ring holds only the window before
 * them. */
fx_kv_view fx_kv_lease_view(const fx_kv_lease *lease);
/* Records that the forward pass wrote n more positions. Call it only after
 * the pass succeeded: a failed pass wrote nothing anyone may read. */
fx_status fx_kv_lease_advance(fx_kv_lease *lease, uint32_t n, fx_error *err);

/* With a ring, publish also hangs each published block's ring block that
 * the lease still holds on its node, and admission adopts only as deep as
 * the tree has the window before: a row that will need the sliding layers'
 * windows must publish before its ring lets them go (the batcher does at
 * every block boundary), or a later row adopts less. */
/* Publishes every full block whose positions were written (the first
 * min(n_tokens, cursor) / block_tokens) under tokens (prompt + generated)
 * into the tree, sharing the lease's blocks. A block the tree already has
 * is reused: the lease moves onto it and its own copy goes back to the
 * pool. Tokens that contradict what the lease adopted or published before
 * are FX_ERR_INVALID_ARG. A contiguous or never-admitted lease publishes
 * nothing (FX_OK); a released one is FX_ERR_INVALID_ARG. May be called
 * mid-life too (e.g. once prefill is done, so rows arriving meanwhile can
 * adopt the prompt); the row keeps decoding into its own blocks. */
fx_status fx_kv_lease_publish(fx_kv_lease *lease, const int32_t *tokens,
                              size_t n_tokens, fx_error *err);

/* Returns every block (refcount--, to the free list at 0) and the unused
 * reservation, at any stage. A second release is FX_ERR_INVALID_ARG. */
fx_status fx_kv_lease_release(fx_kv_lease *lease, fx_error *err);

#endif /* FX_KV_H */
