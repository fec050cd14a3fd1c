/*
 * The sliding layers' ring pool. A layer that attends to the last n_swa
 * positions never reads further back, so a row keeps those layers' keys
 * and values for its window only: a ring of ring_len blocks, slot
 * k % ring_len holding block index k, the oldest slot reused for each new
 * block. Full blocks may also hang on the radix node of the same
 * positions, which is what lets a later row adopt a prefix: it needs the
 * window just before the point it adopts up to.
 *
 * Budget: a lease may hold up to ring_cap blocks (its entitlement), and
 * the entitlements of the active leases sum to at most n_ring. Row-held
 * blocks are then fewer than the sum while any lease holds less than its
 * cap, so a lease's draw always finds a free block or a cached one to
 * evict.
 */
#include "kv_impl.h"

#include <string.h>

static int ring_class(const fx_kv *kv, uint32_t b) {
    if (kv->ring_refs[b] > 0) return KV_ROW;
    if (kv->ring_pins[b] > 0) return KV_PINNED;
    return kv->ring_node[b] != KV_NIL ? KV_CACHED : KV_FREE;
}

static void lru_unlink(fx_kv *kv, uint32_t b) {
    uint32_t p = kv->ring_lru_prev[b], n = kv->ring_lru_next[b];
    if (p != KV_NIL) kv->ring_lru_next[p] = n;
    else kv->ring_lru_head = n;
    if (n != KV_NIL) kv->ring_lru_prev[n] = p;
    else kv->ring_lru_tail = p;
    kv->ring_lru_prev[b] = kv->ring_lru_next[b] = KV_NIL;
}

static void lru_append(fx_kv *kv, uint32_t b) {
    kv->ring_lru_prev[b] = kv->ring_lru_tail;
    kv->ring_lru_next[b] = KV_NIL;
    if (kv->ring_lru_tail != KV_NIL) kv->ring_lru_next[kv->ring_lru_tail] = b;
    else kv->ring_lru_head = b;
    kv->ring_lru_tail = b;
}

/* As kv_reclass: every change to a ring block's refs or node goes through
 * here, and the LRU is exactly the cached class, in the order its blocks
 * became cached. */
static void ring_reclass(fx_kv *kv, uint32_t b, int before) {
    int after = ring_class(kv, b);
    if (after == before) return;
    kv->ring_count[before]--;
    kv->ring_count[after]++;
    if (before == KV_CACHED) lru_unlink(kv, b);
    if (after == KV_CACHED) lru_append(kv, b);
    if (after == KV_FREE) kv->ring_free[kv->n_ring_free++] = b;
}

static void *ring_block_data(const fx_kv *kv, uint32_t b) {
    return kv->ring_data + (size_t)b * kv->block_tokens * kv->hp.head_dim *
                               fx_kv_dtype_size(kv->dtype);
}

fx_status fx_kv_ring_create(fx_kv *kv, const fx_kv_params *params,
                            fx_error *err) {
    kv->ring_lru_head = kv->ring_lru_tail = KV_NIL;
    if (params->ring_call == 0) return FX_OK;
    const fx_hparams *hp = &kv->hp;
    uint32_t n = params->n_ring_blocks, bt = kv->block_tokens;
    if (hp->n_swa == 0 || fx_kv_group_layers(hp, FX_KV_SLIDING_LAYERS) == 0 ||
        n == 0 || n >= UINT32_MAX - 1 || params->ring_call > UINT32_MAX / 2)
        return fx_fail(err, FX_ERR_INVALID_ARG,
                       "kv: a ring needs sliding layers and 1 .. 2^32 - 3 "
                       "ring blocks (%u)", n);
    /* The blocks one call touches: from the window of its first position
     * to its last, at most (n_swa - 2 + call) / bt + 2 of them. */
    uint64_t len = ((uint64_t)hp->n_swa + params->ring_call - 2) / bt + 2;
    size_t elems = fx_kv_elems_checked(hp, bt, FX_KV_SLIDING_LAYERS, kv->dtype);
    const size_t esize = fx_kv_dtype_size(kv->dtype);
    uint64_t total;
    if (len > UINT32_MAX || elems == 0 || !fx_mul_u64(elems, n, &total) ||
        total > SIZE_MAX / esize)
        return fx_fail(err, FX_ERR_TOO_LARGE,
                       "kv: %u ring blocks overflow memory sizes", n);
    kv->ring_len = (uint32_t)len;
    kv->ring_call = params->ring_call;
    kv->n_ring = n;
    kv->ring_data = fx_malloc_huge(&kv->alloc, (size_t)total * esize,
                                   &kv->ring_raw);
    if (!kv->ring_data ||
        !(kv->ring_refs = fx_calloc(&kv->alloc, n, sizeof(uint32_t))) ||
        !(kv->ring_pins = fx_calloc(&kv->alloc, n, sizeof(uint32_t))) ||
        !(kv->ring_node = fx_malloc_array(&kv->alloc, n, sizeof(uint32_t))) ||
        !(kv->node_ring = fx_malloc_array(&kv->alloc, kv->n_blocks, sizeof(uint32_t))) ||
        !(kv->ring_free = fx_malloc_array(&kv->alloc, n, sizeof(uint32_t))) ||
        !(kv->ring_lru_prev = fx_malloc_array(&kv->alloc, n, sizeof(uint32_t))) ||
        !(kv->ring_lru_next = fx_malloc_array(&kv->alloc, n, sizeof(uint32_t))) ||
        !(kv->ring_scratch = fx_malloc_array(&kv->alloc, n, sizeof(uint32_t))))
        return fx_fail(err, FX_ERR_NOMEM,
                       "kv: out of memory for %u ring blocks", n);
    memset(kv->ring_data, 0, (size_t)total * esize);
    for (uint32_t i = 0; i < n; i++) {
        kv->ring_node[i] = kv->ring_lru_prev[i] = kv->ring_lru_next[i] = KV_NIL;
        kv->ring_free[i] = n - 1 - i;
    }
    for (uint32_t i = 0; i < kv->n_blocks; i++) kv->node_ring[i] = KV_NIL;
    kv->n_ring_free = n;
    kv->ring_count[KV_FREE] = n;
    return FX_OK;
}

void fx_kv_ring_free(fx_kv *kv) {
    void *arrays[] = {kv->ring_raw,      kv->ring_refs,     kv->ring_pins,
                      kv->ring_node,
                      kv->node_ring,     kv->ring_free,     kv->ring_lru_prev,
                      kv->ring_lru_next, kv->ring_scratch};
    for (size_t i = 0; i < sizeof arrays / sizeof *arrays; i++)
        fx_free(&kv->alloc, arrays[i]);
}

uint32_t fx_kv_ring_first_block(const fx_kv *kv, uint32_t pos) {
    uint32_t w = kv->hp.n_swa;
    return pos + 1 > w ? (pos + 1 - w) / kv->block_tokens : 0;
}

void fx_kv_ring_detach(fx_kv *kv, uint32_t node) {
    if (kv->ring_len == 0 || kv->node_ring[node] == KV_NIL) return;
    uint32_t b = kv->node_ring[node];
    int c0 = ring_class(kv, b);
    kv->node_ring[node] = KV_NIL;
    kv->ring_node[b] = KV_NIL;
    ring_reclass(kv, b, c0);
}

static fx_status ring_unref(fx_kv *kv, uint32_t b, fx_error *err) {
    if (kv->ring_refs[b] == 0)
        return fx_fail(err, FX_ERR_INTERNAL,
                       "kv: internal error: ring block %u released with "
                       "refcount 0", b);
    int c0 = ring_class(kv, b);
    kv->ring_refs[b]--;
    ring_reclass(kv, b, c0);
    return FX_OK;
}

static void ring_ref(fx_kv *kv, uint32_t b) {
    int c0 = ring_class(kv, b);
    kv->ring_refs[b]++;
    ring_reclass(kv, b, c0);
}

/* ---- per lease ---- */

fx_status fx_kv_ring_lease_init(fx_kv_lease *lease, fx_error *err) {
    fx_kv *kv = lease->kv;
    if (kv->ring_len == 0 || lease->layout != FX_KV_PAGED) return FX_OK;
    uint32_t r = kv->ring_len;
    lease->ring = fx_malloc_array(&kv->alloc, r, sizeof *lease->ring);
    lease->ring_at = fx_malloc_array(&kv->alloc, r, sizeof *lease->ring_at);
    lease->ring_ptrs = fx_calloc(&kv->alloc, r, sizeof *lease->ring_ptrs);
    if (!lease->ring || !lease->ring_at || !lease->ring_ptrs) {
        fx_kv_ring_lease_free(lease);
        return fx_fail(err, FX_ERR_NOMEM,
                       "kv lease: out of memory for a %u-block ring", r);
    }
    for (uint32_t s = 0; s < r; s++) lease->ring[s] = lease->ring_at[s] = KV_NIL;
    return FX_OK;
}

void fx_kv_ring_lease_free(fx_kv_lease *lease) {
    const fx_alloc *a = &lease->kv->alloc;
    fx_free(a, lease->ring);
    fx_free(a, lease->ring_at);
    fx_free(a, lease->ring_ptrs);
    lease->ring = lease->ring_at = NULL;
    lease->ring_ptrs = NULL;
}

uint32_t fx_kv_ring_cap_for(const fx_kv *kv, uint32_t need_blocks) {
    return need_blocks < kv->ring_len ? need_blocks : kv->ring_len;
}

/* The deepest d <= n for which the tree has the window before path's
 * first d blocks: ring blocks on path[first_block(d * bt) .. d - 1]. A
 * node without one rules out every d whose window reaches it, so the
 * search jumps below it: O(n + window) in all. */
uint32_t fx_kv_ring_coverage(const fx_kv *kv, const uint32_t *path,
                             uint32_t n) {
    if (kv->ring_len == 0) return n;
    uint32_t d = n;
    while (d > 0) {
        uint32_t lo = fx_kv_ring_first_block(kv, d * kv->block_tokens);
        uint32_t i = d;
        while (i > lo && kv->node_ring[path[i - 1]] != KV_NIL) i--;
        if (i == lo) return d;
        d = i - 1;
    }
    return 0;
}

static void ring_put(fx_kv_lease *lease, uint32_t k, uint32_t b) {
    uint32_t s = k % lease->kv->ring_len;
    lease->ring[s] = b;
    lease->ring_at[s] = k;
    lease->ring_ptrs[s] = ring_block_data(lease->kv, b);
    lease->ring_held++;
}

void fx_kv_ring_adopt(fx_kv_lease *lease, uint32_t cap) {
    fx_kv *kv = lease->kv;
    if (kv->ring_len == 0) return;
    for (uint32_t i = fx_kv_ring_first_block(kv, lease->adopted * kv->block_tokens);
         i < lease->adopted; i++) {
        uint32_t b = kv->node_ring[lease->table[i]];
        ring_ref(kv, b);
        ring_put(lease, i, b);
    }
    lease->ring_cap = cap;
    kv->ring_entitled += cap;
}

fx_status fx_kv_ring_grow(fx_kv_lease *lease, uint32_t first_block,
                          uint32_t end_block, fx_error *err) {
    fx_kv *kv = lease->kv;
    if (kv->ring_len == 0) return FX_OK;
    uint32_t keep_from = fx_kv_ring_first_block(kv, lease->cursor);
    for (uint32_t k = first_block; k < end_block; k++) {
        uint32_t s = k % kv->ring_len;
        if (lease->ring[s] != KV_NIL && lease->ring_at[s] == k) continue;
        if (lease->ring[s] != KV_NIL) {
            /* prepare bounds a call by ring_call, which the ring's length
             * covers: the block going out is older than any window read. */
            if (lease->ring_at[s] >= keep_from)
                return fx_fail(err, FX_ERR_INTERNAL,
                               "kv prepare: internal error: ring slot %u "
                               "still in the window", s);
            fx_status st = ring_unref(kv, lease->ring[s], err);
            if (st != FX_OK) return st;
            lease->ring[s] = lease->ring_at[s] = KV_NIL;
            lease->ring_held--;
        }
        if (lease->ring_held >= lease->ring_cap) {
            /* Outgrowing its admission: only what nobody was promised. */
            if (kv->ring_entitled + kv->ring_pinned >= kv->n_ring)
                return fx_fail(err, FX_ERR_TOO_LARGE,
                               "kv prepare: row outgrew its ring and no "
                               "ring block is unpromised");
            lease->ring_cap++;
            kv->ring_entitled++;
        }
        if (kv->n_ring_free == 0) {
            uint32_t old = kv->ring_lru_head;
            if (old == KV_NIL)
                return fx_fail(err, FX_ERR_INTERNAL,
                               "kv: internal error: no ring block free or "
                               "cached although the budget promised one");
            fx_kv_ring_detach(kv, kv->ring_node[old]);
        }
        uint32_t b = kv->ring_free[--kv->n_ring_free];
        if (ring_class(kv, b) != KV_FREE)
            return fx_fail(err, FX_ERR_INTERNAL,
                           "kv: internal error: free ring block %u is in use", b);
        ring_ref(kv, b);
        ring_put(lease, k, b);
    }
    return FX_OK;
}

void fx_kv_ring_publish(fx_kv_lease *lease, uint32_t block_index,
                        uint32_t node) {
    fx_kv *kv = lease->kv;
    /* A pinned node's ring block is frozen, so that unpin finds what pin
     * counted. */
    if (kv->ring_len == 0 || kv->node_ring[node] != KV_NIL || kv->pins[node] > 0)
        return;
    uint32_t s = block_index % kv->ring_len;
    uint32_t b = lease->ring[s];
    if (b == KV_NIL || lease->ring_at[s] != block_index ||
        kv->ring_node[b] != KV_NIL)
        return;
    int c0 = ring_class(kv, b);
    kv->ring_node[b] = node;
    kv->node_ring[node] = b;
    ring_reclass(kv, b, c0);
}

fx_status fx_kv_ring_release(fx_kv_lease *lease, fx_error *err) {
    fx_kv *kv = lease->kv;
    fx_status first = FX_OK;
    if (kv->ring_len == 0 || !lease->ring) return FX_OK;
    for (uint32_t s = 0; s < kv->ring_len; s++) {
        if (lease->ring[s] == KV_NIL) continue;
        fx_status st = ring_unref(kv, lease->ring[s], first == FX_OK ? err : NULL);
        if (first == FX_OK) first = st;
        lease->ring[s] = lease->ring_at[s] = KV_NIL;
        lease->ring_ptrs[s] = NULL;
    }
    kv->ring_entitled -= lease->ring_cap;
    lease->ring_cap = lease->ring_held = 0;
    return first;
}

/* ---- pins ---- */

/* The window before depth k of the path that ends at node: the ring
 * blocks on its last k - first_block(k * bt) nodes, walked up from node. */
#define FOR_WINDOW_NODES(kv, node, k, n)                                      \
    for (uint32_t n = (node), left_ = (k) - fx_kv_ring_first_block(           \
                                  (kv), (k) * (kv)->block_tokens);            \
         left_ > 0 && n != (kv)->root; n = (kv)->parent[n], left_--)

fx_kv_fit fx_kv_ring_pin(fx_kv *kv, uint32_t node, uint32_t k) {
    if (kv->ring_len == 0 || k == 0) return FX_KV_NOW;
    uint32_t add = 0;
    FOR_WINDOW_NODES(kv, node, k, n) {
        uint32_t b = kv->node_ring[n];
        add += b != KV_NIL && kv->ring_pins[b] == 0;
    }
    if (kv->ring_entitled + kv->ring_pinned + add > kv->n_ring)
        return add > kv->n_ring ? FX_KV_NEVER : FX_KV_LATER;
    FOR_WINDOW_NODES(kv, node, k, n) {
        uint32_t b = kv->node_ring[n];
        if (b == KV_NIL) continue;
        int c0 = ring_class(kv, b);
        kv->ring_pinned += kv->ring_pins[b]++ == 0;
        ring_reclass(kv, b, c0);
    }
    return FX_KV_NOW;
}

void fx_kv_ring_unpin(fx_kv *kv, uint32_t node, uint32_t k) {
    if (kv->ring_len == 0 || k == 0) return;
    FOR_WINDOW_NODES(kv, node, k, n) {
        uint32_t b = kv->node_ring[n];
        if (b == KV_NIL || kv->ring_pins[b] == 0) continue;
        int c0 = ring_class(kv, b);
        kv->ring_pinned -= --kv->ring_pins[b] == 0;
        ring_reclass(kv, b, c0);
    }
}

/* ---- the ring half of fx_kv_check ---- */

static fx_status check_ring_leases(const fx_kv *kv, fx_error *err) {
    uint32_t *refs = kv->ring_scratch;
    memset(refs, 0, (size_t)kv->n_ring * sizeof *refs);
    uint64_t entitled = 0;
    for (const fx_kv_lease *l = kv->leases; l; l = l->next) {
        if (l->layout != FX_KV_PAGED) continue;
        entitled += l->ring_cap;
        uint32_t held = 0;
        for (uint32_t s = 0; s < kv->ring_len; s++) {
            uint32_t b = l->ring[s];
            if (b == KV_NIL) continue;
            if (b >= kv->n_ring || l->ring_at[s] % kv->ring_len != s ||
                l->ring_ptrs[s] != ring_block_data(kv, b) ||
                l->ring_at[s] >= l->n_blocks + 1)
                return fx_fail(err, FX_ERR_INTERNAL,
                               "kv check: ring slot %u of a lease is bad", s);
            refs[b]++;
            held++;
        }
        if (held != l->ring_held || held > l->ring_cap)
            return fx_fail(err, FX_ERR_INTERNAL,
                           "kv check: a lease holds %u ring blocks, says %u, "
                           "may hold %u", held, l->ring_held, l->ring_cap);
    }
    if (entitled != kv->ring_entitled ||
        entitled + kv->ring_pinned > kv->n_ring)
        return fx_fail(err, FX_ERR_INTERNAL,
                       "kv check: ring entitlements %llu, counter %llu, %u "
                       "pinned, pool %u", (unsigned long long)entitled,
                       (unsigned long long)kv->ring_entitled, kv->ring_pinned,
                       kv->n_ring);
    for (uint32_t b = 0; b < kv->n_ring; b++)
        if (refs[b] != kv->ring_refs[b])
            return fx_fail(err, FX_ERR_INTERNAL,
                           "kv check: ring block %u refcount %u but %u leases "
                           "hold it", b, kv->ring_refs[b], refs[b]);
    return FX_OK;
}

fx_status fx_kv_ring_check(const fx_kv *kv, fx_error *err) {
    if (kv->ring_len == 0) return FX_OK;
    uint32_t count[KV_NCLASS] = {0}, pinned = 0;
    for (uint32_t b = 0; b < kv->n_ring; b++) {
        count[ring_class(kv, b)]++;
        uint32_t node = kv->ring_node[b];
        /* A pin holds ring blocks only on its own (pinned) path. */
        if (kv->ring_pins[b] > 0 &&
            (node == KV_NIL || node >= kv->n_blocks || kv->pins[node] == 0))
            return fx_fail(err, FX_ERR_INTERNAL,
                           "kv check: pinned ring block %u is off a pinned path", b);
        pinned += kv->ring_pins[b] > 0;
        if (node != KV_NIL &&
            (node >= kv->n_blocks || !kv_in_tree(kv, node) || kv->node_ring[node] != b))
            return fx_fail(err, FX_ERR_INTERNAL,
                           "kv check: ring block %u hangs on bad node %u", b, node);
    }
    for (uint32_t node = 0; node < kv->n_blocks; node++) {
        uint32_t b = kv->node_ring[node];
        if (b != KV_NIL && (b >= kv->n_ring || kv->ring_node[b] != node))
            return fx_fail(err, FX_ERR_INTERNAL,
                           "kv check: node %u's ring block %u is bad", node, b);
    }
    if (pinned != kv->ring_pinned)
        return fx_fail(err, FX_ERR_INTERNAL,
                       "kv check: %u ring blocks pinned, counter %u", pinned,
                       kv->ring_pinned);
    for (int c = 0; c < KV_NCLASS; c++)
        if (count[c] != kv->ring_count[c])
            return fx_fail(err, FX_ERR_INTERNAL,
                           "kv check: ring class %d has %u blocks, counter %u",
                           c, count[c], kv->ring_count[c]);
    uint32_t *seen = kv->ring_scratch;
    memset(seen, 0, (size_t)kv->n_ring * sizeof *seen);
    if (kv->n_ring_free != count[KV_FREE])
        return fx_fail(err, FX_ERR_INTERNAL,
                       "kv check: ring free list %u, %u free", kv->n_ring_free,
                       count[KV_FREE]);
    for (uint32_t i = 0; i < kv->n_ring_free; i++) {
        uint32_t b = kv->ring_free[i];
        if (b >= kv->n_ring || seen[b]++ || ring_class(kv, b) != KV_FREE)
            return fx_fail(err, FX_ERR_INTERNAL,
                           "kv check: ring free entry %u is bad", i);
    }
    uint32_t listed = 0, prev = KV_NIL;
    for (uint32_t b = kv->ring_lru_head; b != KV_NIL; b = kv->ring_lru_next[b]) {
        if (b >= kv->n_ring || ring_class(kv, b) != KV_CACHED ||
            kv->ring_lru_prev[b] != prev || ++listed > count[KV_CACHED])
            return fx_fail(err, FX_ERR_INTERNAL, "kv check: ring LRU is bad");
        prev = b;
    }
    if (listed != count[KV_CACHED] || kv->ring_lru_tail != prev)
        return fx_fail(err, FX_ERR_INTERNAL,
                       "kv check: ring LRU lists %u of %u cached", listed,
                       count[KV_CACHED]);
    return check_ring_leases(kv, err);
}
