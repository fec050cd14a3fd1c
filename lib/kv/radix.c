/*
 * The radix prefix tree: token ids at block granularity, one edge per full
 * block, node b owning block b. Lookup, insertion (for publish), LRU
 * eviction of unreferenced leaves, and pins.
 */
#include "kv_impl.h"

#include <string.h>

uint32_t fx_kv_find_child(const fx_kv *kv, uint32_t node,
                          const int32_t *tokens) {
    size_t bytes = (size_t)kv->block_tokens * sizeof *tokens;
    for (uint32_t c = kv->first_child[node]; c != KV_NIL; c = kv->next_sibling[c])
        if (kv_node_tokens(kv, c)[0] == tokens[0] &&
            memcmp(kv_node_tokens(kv, c), tokens, bytes) == 0)
            return c;
    return KV_NIL;
}

void fx_kv_insert_child(fx_kv *kv, uint32_t node, uint32_t b,
                        const int32_t *tokens) {
    int c0 = kv_class(kv, b);
    memcpy(kv->tokens + (size_t)b * kv->block_tokens, tokens,
           (size_t)kv->block_tokens * sizeof *tokens);
    kv->parent[b] = node;
    kv->first_child[b] = KV_NIL;
    kv->prev_sibling[b] = KV_NIL;
    kv->next_sibling[b] = kv->first_child[node];
    if (kv->first_child[node] != KV_NIL)
        kv->prev_sibling[kv->first_child[node]] = b;
    kv->first_child[node] = b;
    kv->pins[b] = 0;
    kv->last_use[b] = kv->tick;
    kv->n_nodes++;
    kv_reclass(kv, b, c0);
    fx_kv_lru_sync(kv, b);
    /* The parent has a child now: no longer a leaf, so not evictable. */
    if (node != kv->root) fx_kv_lru_sync(kv, node);
}

/* ---- LRU of evictable leaves ---- */

static int evictable(const fx_kv *kv, uint32_t b) {
    return kv_in_tree(kv, b) && kv->row_refs[b] == 0 && kv->pins[b] == 0 &&
           kv->first_child[b] == KV_NIL;
}

static void lru_unlink(fx_kv *kv, uint32_t b) {
    uint32_t p = kv->lru_prev[b], n = kv->lru_next[b];
    if (p != KV_NIL) kv->lru_next[p] = n; else kv->lru_head = n;
    if (n != KV_NIL) kv->lru_prev[n] = p; else kv->lru_tail = p;
    kv->in_lru[b] = 0;
}

/* Ordered by last_use, ties in insertion order. Most insertions are "just
 * released", newer than everything, and append in O(1); a parent that
 * becomes a leaf when its child is evicted is about as old as that child
 * (every touch of a node touches its whole root path), so the walk from
 * the old end is short. */
static void lru_insert(fx_kv *kv, uint32_t b) {
    uint64_t t = kv->last_use[b];
    uint32_t after;
    if (kv->lru_tail == KV_NIL || kv->last_use[kv->lru_tail] <= t) {
        after = kv->lru_tail;
    } else {
        after = KV_NIL;
        for (uint32_t c = kv->lru_head; c != KV_NIL && kv->last_use[c] <= t;
             c = kv->lru_next[c])
            after = c;
    }
    uint32_t before = after == KV_NIL ? kv->lru_head : kv->lru_next[after];
    kv->lru_prev[b] = after;
    kv->lru_next[b] = before;
    if (after != KV_NIL) kv->lru_next[after] = b; else kv->lru_head = b;
    if (before != KV_NIL) kv->lru_prev[before] = b; else kv->lru_tail = b;
    kv->in_lru[b] = 1;
}

void fx_kv_lru_sync(fx_kv *kv, uint32_t b) {
    int want = evictable(kv, b);
    if (want && !kv->in_lru[b]) lru_insert(kv, b);
    else if (!want && kv->in_lru[b]) lru_unlink(kv, b);
}

int fx_kv_evict_one(fx_kv *kv) {
    uint32_t b = kv->lru_head;
    /* Only evictable leaves are ever in the list (fx_kv_lru_sync keeps it so
     * on every change), which is the whole guarantee that a block a row
     * reads or a pin protects is never handed to someone else. Checked
     * again here because the price of being wrong is silent corruption. */
    if (b == KV_NIL || !evictable(kv, b)) return 0;
    lru_unlink(kv, b);
    int c0 = kv_class(kv, b);
    uint32_t p = kv->parent[b];
    uint32_t prev = kv->prev_sibling[b], next = kv->next_sibling[b];
    if (prev != KV_NIL) kv->next_sibling[prev] = next;
    else kv->first_child[p] = next;
    if (next != KV_NIL) kv->prev_sibling[next] = prev;
    kv->parent[b] = kv->prev_sibling[b] = kv->next_sibling[b] = KV_NIL;
    kv->n_nodes--;
    fx_kv_ring_detach(kv, b);
    kv_reclass(kv, b, c0);
    /* Its parent may have just become an unreferenced leaf. */
    if (p != kv->root) fx_kv_lru_sync(kv, p);
    return 1;
}

void fx_kv_evict(fx_kv *kv, uint32_t n, uint32_t *evicted) {
    uint32_t done = 0;
    while (done < n && fx_kv_evict_one(kv)) done++;
    if (evicted) *evicted = done;
}

/* ---- lookup ---- */

uint32_t fx_kv_match(const fx_kv *kv, const int32_t *tokens, size_t n_tokens,
                     uint32_t max_blocks) {
    if (!tokens) return 0;
    size_t full = n_tokens / kv->block_tokens;
    uint32_t node = kv->root, k = 0;
    while (k < max_blocks && k < full) {
        uint32_t c = fx_kv_find_child(kv, node, tokens + (size_t)k * kv->block_tokens);
        if (c == KV_NIL) break;
        node = c;
        k++;
    }
    return k;
}

uint32_t fx_kv_adoptable_blocks(const fx_kv *kv, uint32_t n_prompt) {
    return n_prompt == 0 ? 0 : (n_prompt - 1) / kv->block_tokens;
}

/* ---- pins ---- */

fx_status fx_kv_pin_prefix(fx_kv *kv, const int32_t *tokens, size_t n_tokens,
                           fx_kv_pin *pin, fx_kv_fit *fit, fx_error *err) {
    if (!kv || !pin || !fit || (!tokens && n_tokens))
        return fx_fail(err, FX_ERR_INVALID_ARG, "kv pin: NULL argument");
    memset(pin, 0, sizeof *pin);
    pin->node = KV_NIL;
    size_t full = n_tokens / kv->block_tokens;
    uint32_t node = kv->root, k = 0;
    uint64_t cost = 0;
    /* Pinning a cached block takes it out of what the budget may hand
     * out; pinning one a lease holds changes nothing until the lease
     * lets go, and then it moves from row to pinned, not to available. */
    while (k < full) {
        uint32_t c = fx_kv_find_child(kv, node, tokens + (size_t)k * kv->block_tokens);
        if (c == KV_NIL) break;
        if (kv_class(kv, c) == KV_CACHED) cost++;
        node = c;
        k++;
    }
    if (cost > kv_available(kv)) {
        *fit = cost > kv->n_blocks ? FX_KV_NEVER : FX_KV_LATER;
        return FX_OK;
    }
    /* Sliding layers: the window before the pin's end stays too. */
    if ((*fit = fx_kv_ring_pin(kv, node, k)) != FX_KV_NOW) return FX_OK;
    kv->tick++;
    for (uint32_t b = node; b != kv->root; b = kv->parent[b]) {
        int c0 = kv_class(kv, b);
        kv->pins[b]++;
        kv->last_use[b] = kv->tick;
        kv_reclass(kv, b, c0);
        fx_kv_lru_sync(kv, b);
    }
    pin->node = node;
    pin->n_blocks = k;
    pin->active = 1;
    *fit = FX_KV_NOW;
    return FX_OK;
}

fx_status fx_kv_unpin(fx_kv *kv, fx_kv_pin *pin, fx_error *err) {
    if (!kv || !pin) return fx_fail(err, FX_ERR_INVALID_ARG, "kv unpin: NULL argument");
    if (!pin->active)
        return fx_fail(err, FX_ERR_INVALID_ARG,
                       "kv unpin: pin is not active (unpinned twice?)");
    pin->active = 0;
    if (pin->n_blocks == 0) return FX_OK;
    if (pin->node >= kv->n_blocks || !kv_in_tree(kv, pin->node))
        return fx_fail(err, FX_ERR_INTERNAL,
                       "kv unpin: internal error: pinned node %u left the tree",
                       pin->node);
    /* Check the whole path before changing any of it, so a corrupt pin
     * cannot leave half a path unpinned. */
    uint32_t depth = 0;
    for (uint32_t b = pin->node; b != kv->root; b = kv->parent[b], depth++)
        if (kv->pins[b] == 0)
            return fx_fail(err, FX_ERR_INTERNAL,
                           "kv unpin: internal error: node %u pin count is 0", b);
    if (depth != pin->n_blocks)
        return fx_fail(err, FX_ERR_INTERNAL,
                       "kv unpin: internal error: pin of %u blocks found at "
                       "depth %u", pin->n_blocks, depth);
    fx_kv_ring_unpin(kv, pin->node, pin->n_blocks);
    kv->tick++;
    for (uint32_t b = pin->node; b != kv->root; b = kv->parent[b]) {
        int c0 = kv_class(kv, b);
        kv->pins[b]--;
        kv->last_use[b] = kv->tick;
        kv_reclass(kv, b, c0);
        fx_kv_lru_sync(kv, b);
    }
    return FX_OK;
}

/* ---- the tree half of fx_kv_check ---- */

fx_status fx_kv_check_tree(const fx_kv *kv, fx_error *err) {
    uint32_t nodes = 0, children = 0, evictables = 0;
    for (uint32_t b = 0; b < kv->n_blocks; b++) {
        int held = kv->row_refs[b] > 0 || kv->pins[b] > 0;
        if (!kv_in_tree(kv, b)) {
            if (kv->pins[b] || kv->in_lru[b])
                return fx_fail(err, FX_ERR_INTERNAL,
                               "kv check: block %u outside the tree is pinned "
                               "or in the LRU", b);
            continue;
        }
        nodes++;
        uint32_t p = kv->parent[b];
        if (p > kv->root)
            return fx_fail(err, FX_ERR_INTERNAL,
                           "kv check: node %u has a bad parent", b);
        if (p != kv->root) {
            if (!kv_in_tree(kv, p))
                return fx_fail(err, FX_ERR_INTERNAL,
                               "kv check: node %u's parent %u is not in the tree",
                               b, p);
            /* The property eviction relies on: below a block nobody holds
             * there is no block anybody holds. */
            if (held && kv->row_refs[p] == 0 && kv->pins[p] == 0)
                return fx_fail(err, FX_ERR_INTERNAL,
                               "kv check: held node %u under unheld node %u", b, p);
            if (kv->pins[p] < kv->pins[b])
                return fx_fail(err, FX_ERR_INTERNAL,
                               "kv check: node %u has more pins than its parent", b);
        }
        for (uint32_t c = kv->first_child[b]; c != KV_NIL; c = kv->next_sibling[c]) {
            if (c >= kv->n_blocks || kv->parent[c] != b)
                return fx_fail(err, FX_ERR_INTERNAL,
                               "kv check: child link %u -> %u is bad", b, c);
            children++;
        }
        if (evictable(kv, b) != kv->in_lru[b])
            return fx_fail(err, FX_ERR_INTERNAL,
                           "kv check: node %u evictable=%d but in_lru=%d", b,
                           evictable(kv, b), kv->in_lru[b]);
        evictables += kv->in_lru[b];
    }
    for (uint32_t c = kv->first_child[kv->root]; c != KV_NIL; c = kv->next_sibling[c]) {
        if (c >= kv->n_blocks || kv->parent[c] != kv->root)
            return fx_fail(err, FX_ERR_INTERNAL,
                           "kv check: root child link to %u is bad", c);
        children++;
    }
    if (nodes != kv->n_nodes || children != nodes)
        return fx_fail(err, FX_ERR_INTERNAL,
                       "kv check: %u nodes, counter %u, %u child links",
                       nodes, kv->n_nodes, children);
    uint32_t listed = 0, prev = KV_NIL;
    for (uint32_t b = kv->lru_head; b != KV_NIL; b = kv->lru_next[b]) {
        if (b >= kv->n_blocks || !kv->in_lru[b] || kv->lru_prev[b] != prev ||
            ++listed > evictables)
            return fx_fail(err, FX_ERR_INTERNAL, "kv check: LRU list is bad");
        if (prev != KV_NIL && kv->last_use[prev] > kv->last_use[b])
            return fx_fail(err, FX_ERR_INTERNAL,
                           "kv check: LRU list out of order at %u", b);
        prev = b;
    }
    if (listed != evictables || kv->lru_tail != prev)
        return fx_fail(err, FX_ERR_INTERNAL,
                       "kv check: LRU lists %u of %u evictable leaves",
                       listed, evictables);
    return FX_OK;
}
