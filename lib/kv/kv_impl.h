/*
 * kv internals shared by pool.c, radix.c and lease.c. Not an interface:
 * only lib/kv includes it. The files call downward only: lease.c uses
 * pool.c, radix.c and ring.c, pool.c uses radix.c (eviction, the tree's
 * check) and ring.c, radix.c uses ring.c (an evicted node lets go of its
 * ring block), ring.c uses only what is inline here.
 */
#ifndef FX_KV_IMPL_H
#define FX_KV_IMPL_H

#include "kv.h"

#define KV_NIL UINT32_MAX

/* Block classes; see kv.h. */
enum { KV_FREE = 0, KV_ROW = 1, KV_PINNED = 2, KV_CACHED = 3, KV_NCLASS = 4 };

struct fx_kv {
    fx_alloc alloc;
    fx_hparams hp;
    uint32_t n_blocks;       /* total */
    uint32_t block_tokens;
    fx_kv_dtype dtype;       /* of data and ring_data */
    size_t block_elems;
    uint8_t *data;           /* [runs][n_blocks][block_tokens][head_dim]
                                elements (model.h), in data_raw */
    void *data_raw;          /* what fx_malloc_huge allocated */
    uint32_t *row_refs;      /* [n_blocks] leases holding the block */
    uint32_t *free_stack;    /* [n_blocks]; [0, n_free) are free ids */
    uint32_t n_free;

    /* Radix nodes. Node b owns block b, so node storage is preallocated
     * one per block and inserting never allocates; index `root` (==
     * n_blocks) is the root, which owns no block. */
    uint32_t root;
    uint32_t *parent;        /* [n_blocks + 1] KV_NIL: not in the tree */
    uint32_t *first_child;   /* [n_blocks + 1] */
    uint32_t *next_sibling;  /* [n_blocks + 1] */
    uint32_t *prev_sibling;  /* [n_blocks + 1] */
    int32_t *tokens;         /* [n_blocks][block_tokens] the edge's ids */
    uint32_t *pins;          /* [n_blocks] pins through this node */
    uint64_t *last_use;      /* [n_blocks] tick of the last touch */
    /* Evictable leaves (in the tree, no lease, no pin, no child), oldest
     * last_use first. */
    uint32_t *lru_prev;      /* [n_blocks] */
    uint32_t *lru_next;      /* [n_blocks] */
    uint8_t *in_lru;         /* [n_blocks] */
    uint32_t lru_head, lru_tail;
    uint64_t tick;
    uint32_t n_nodes;

    uint32_t count[KV_NCLASS]; /* blocks per class, kept on every change */
    uint64_t reserved;         /* sum of the live leases' reserve_left */

    uint32_t *scratch;       /* [n_blocks] for fx_kv_check only */
    fx_kv_lease *leases;     /* live list */
    uint32_t n_leases;

    /* The sliding layers' pool (ring.c), when they are kept apart:
     * ring_len > 0, and the blocks above hold only the other layers. A
     * lease holds its window as a ring of ring_len of these blocks; a full
     * one may also hang on the tree node of the same positions (node_ring),
     * so a row adopting the prefix up to there finds its window. One that
     * hangs on a node and no lease holds is cached: evicted oldest first
     * (ring LRU), which only shortens what later rows can adopt --
     * unless a pin's window holds it (pinned). */
    uint32_t ring_len;       /* slots of a lease's ring */
    uint32_t ring_call;      /* most positions one forward call may add */
    uint32_t n_ring;         /* blocks in the pool */
    uint8_t *ring_data;      /* [runs][n_ring][block_tokens][head_dim] */
    void *ring_raw;
    uint32_t *ring_refs;     /* [n_ring] leases holding it */
    uint32_t *ring_node;     /* [n_ring] the node it hangs on, or KV_NIL */
    uint32_t *node_ring;     /* [n_blocks] the block on a node, or KV_NIL */
    uint32_t *ring_free;     /* [n_ring]; [0, n_ring_free) are free */
    uint32_t n_ring_free;
    uint32_t *ring_lru_prev; /* [n_ring] cached ring blocks, oldest first */
    uint32_t *ring_lru_next;
    uint32_t ring_lru_head, ring_lru_tail;
    uint32_t *ring_pins;     /* [n_ring] pins whose window holds it */
    uint32_t ring_pinned;    /* ring blocks with ring_pins > 0 */
    uint32_t ring_count[KV_NCLASS];
    /* Sum of the active leases' ring_cap. Kept <= n_ring - ring_pinned:
     * every lease holds at most ring_cap blocks, so while one holds fewer,
     * some block is neither held nor pinned -- free or cached -- and its
     * draw succeeds. */
    uint64_t ring_entitled;
    uint32_t *ring_scratch;  /* [n_ring] for fx_kv_check only */
};

static inline int kv_in_tree(const fx_kv *kv, uint32_t b) {
    return kv->parent[b] != KV_NIL;
}

static inline const int32_t *kv_node_tokens(const fx_kv *kv, uint32_t b) {
    return kv->tokens + (size_t)b * kv->block_tokens;
}

static inline int kv_class(const fx_kv *kv, uint32_t b) {
    if (kv->row_refs[b] > 0) return KV_ROW;
    if (!kv_in_tree(kv, b)) return KV_FREE;
    return kv->pins[b] > 0 ? KV_PINNED : KV_CACHED;
}

/* free + cached - reserved; never negative while the invariants hold (a
 * saturating read, so a broken invariant shows up in fx_kv_check rather
 * than as a huge unsigned number here). */
static inline uint64_t kv_available(const fx_kv *kv) {
    uint64_t have = (uint64_t)kv->count[KV_FREE] + kv->count[KV_CACHED];
    return have > kv->reserved ? have - kv->reserved : 0;
}

/* Every change to a block's refs, pins or tree membership is bracketed by
 * `c0 = kv_class(kv, b); ...change...; kv_reclass(kv, b, c0);` so the
 * class counters cannot drift from the blocks; a block that becomes free
 * goes on the free list here, the one place that can forget it. (Inline
 * here, so the tree (radix.c) and the pool (pool.c) both use it without
 * calling into each other.) */
static inline void kv_reclass(fx_kv *kv, uint32_t b, int before) {
    int after = kv_class(kv, b);
    if (after == before) return;
    kv->count[before]--;
    kv->count[after]++;
    if (after == KV_FREE) kv->free_stack[kv->n_free++] = b;
}

/* Takes a free block (evicting an LRU leaf if none is free) and gives it
 * to a lease: row_refs 1. FX_OK or an internal-error status. */
fx_status fx_kv_draw(fx_kv *kv, uint32_t *out, fx_error *err);

/* Adds / drops one lease reference; dropping a zero refcount is detected
 * and reported, never wrapped. */
void fx_kv_ref(fx_kv *kv, uint32_t b);
fx_status fx_kv_unref(fx_kv *kv, uint32_t b, fx_error *err);

/* Radix helpers (radix.c). */
uint32_t fx_kv_find_child(const fx_kv *kv, uint32_t node,
                          const int32_t *tokens);
void fx_kv_insert_child(fx_kv *kv, uint32_t node, uint32_t b,
                        const int32_t *tokens);
/* Puts b in or takes it out of the LRU list to match whether it is an
 * evictable leaf now. Called after every change that could alter that. */
void fx_kv_lru_sync(fx_kv *kv, uint32_t b);
/* Evicts the least recently used evictable leaf; 0 if there is none. */
int fx_kv_evict_one(fx_kv *kv);
fx_status fx_kv_check_tree(const fx_kv *kv, fx_error *err);

/* Elements of one block of a layer group, or 0 if that number (or its
 * byte size in dtype) overflows (pool.c). */
size_t fx_kv_elems_checked(const fx_hparams *hp, uint64_t block_tokens,
                           fx_kv_group group, fx_kv_dtype dtype);

/* ---- the sliding layers' ring pool (ring.c) ---- */

/* Allocates the ring pool of params (nothing without one); frees it. */
fx_status fx_kv_ring_create(fx_kv *kv, const fx_kv_params *params,
                            fx_error *err);
void fx_kv_ring_free(fx_kv *kv);
/* The first block index whose positions the window of position pos
 * reaches back to. */
uint32_t fx_kv_ring_first_block(const fx_kv *kv, uint32_t pos);
/* A node leaving the tree lets go of its ring block. */
void fx_kv_ring_detach(fx_kv *kv, uint32_t node);
/* Per lease: the ring's arrays (init/free), adoption of the window before
 * the first `adopted` blocks, growth to hold blocks [.., end_block), what
 * publish hangs on the tree, release. */
fx_status fx_kv_ring_lease_init(fx_kv_lease *lease, fx_error *err);
void fx_kv_ring_lease_free(fx_kv_lease *lease);
uint32_t fx_kv_ring_cap_for(const fx_kv *kv, uint32_t need_blocks);
uint32_t fx_kv_ring_coverage(const fx_kv *kv, const uint32_t *path,
                             uint32_t n);
void fx_kv_ring_adopt(fx_kv_lease *lease, uint32_t cap);
fx_status fx_kv_ring_grow(fx_kv_lease *lease, uint32_t first_block,
                          uint32_t end_block, fx_error *err);
void fx_kv_ring_publish(fx_kv_lease *lease, uint32_t block_index,
                        uint32_t node);
fx_status fx_kv_ring_release(fx_kv_lease *lease, fx_error *err);
/* A pin of the path ending at node, depth k, keeps the ring blocks of the
 * window before k too: LATER (NEVER), nothing changed, when they would
 * leave some lease's ring draw without a block. unpin drops them again
 * (nothing is attached to a pinned node meanwhile). */
fx_kv_fit fx_kv_ring_pin(fx_kv *kv, uint32_t node, uint32_t k);
void fx_kv_ring_unpin(fx_kv *kv, uint32_t node, uint32_t k);
fx_status fx_kv_ring_check(const fx_kv *kv, fx_error *err);

#endif /* FX_KV_IMPL_H */
