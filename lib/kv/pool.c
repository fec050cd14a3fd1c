/*
 * The block pool and the budget: fixed blocks allocated once, refcounts,
 * the free list, the class counters that make the accounting exact, and
 * the from-scratch check that proves it.
 */
#include "kv_impl.h"

#include <string.h>

/* Elements in one block of block_tokens positions, or 0 if that number
 * (or its byte size) overflows. model.h's fx_kv_block_elems is the
 * layout's one definition; this only proves its unchecked product cannot
 * wrap. */
size_t fx_kv_elems_checked(const fx_hparams *hp, uint64_t block_tokens,
                           fx_kv_group group, fx_kv_dtype dtype) {
    uint64_t n = 1;
    uint64_t factors[] = {fx_kv_group_layers(hp, group), 2, block_tokens,
                          hp->n_head_kv, hp->head_dim, fx_kv_dtype_size(dtype)};
    for (size_t i = 0; i < sizeof factors / sizeof *factors; i++)
        if (!fx_mul_u64(n, factors[i], &n)) return 0;
    if (n == 0 || n > SIZE_MAX || block_tokens > UINT32_MAX) return 0;
    return fx_kv_group_elems(hp, (uint32_t)block_tokens, group);
}

/* What a block of a group costs: its K and V plus the bookkeeping the
 * pool keeps for it (refcount, free slot, node links, the edge's token
 * ids, LRU links, scratch; for ring blocks refs, node, free slot, LRU
 * links, scratch and the node's link), so a budget is a budget. */
static uint64_t group_block_bytes(const fx_hparams *hp, uint32_t block_tokens,
                                  fx_kv_group group, fx_kv_dtype dtype) {
    /* No full layer (every layer slides, Phi-3): blocks that are only
     * the tree's edges. */
    size_t elems = fx_kv_group_layers(hp, group) == 0
                       ? 0 : fx_kv_elems_checked(hp, block_tokens, group, dtype);
    if (elems == 0 && fx_kv_group_layers(hp, group) != 0) return 0;
    const uint64_t kv_bytes = (uint64_t)elems * fx_kv_dtype_size(dtype);
    if (group == FX_KV_SLIDING_LAYERS)
        return kv_bytes + 7 * sizeof(uint32_t);
    return kv_bytes + 11 * sizeof(uint32_t) +
           2 * sizeof(uint64_t) + (uint64_t)block_tokens * sizeof(int32_t);
}

uint64_t fx_kv_block_bytes(const fx_hparams *hp, uint32_t block_tokens,
                           fx_kv_dtype dtype) {
    return group_block_bytes(hp, block_tokens, FX_KV_ALL_LAYERS, dtype);
}

/* Ring blocks a row needs at most, or 0 when a ring would not save memory
 * for rows of n_ctx positions (or the model slides no layer, or all). */
static uint64_t ring_blocks_for(const fx_hparams *hp, uint32_t bt,
                                uint32_t n_ctx, uint32_t max_call) {
    if (hp->n_swa == 0 || max_call == 0 ||
        fx_kv_group_layers(hp, FX_KV_SLIDING_LAYERS) == 0)
        return 0;
    uint64_t len = ((uint64_t)hp->n_swa + max_call - 2) / bt + 2;
    uint64_t row = ((uint64_t)n_ctx + bt - 1) / bt;
    return len < row ? len : 0;
}

uint64_t fx_kv_row_bytes(const fx_hparams *hp, uint32_t block_tokens,
                         uint32_t n_ctx, uint32_t max_call, fx_kv_dtype dtype) {
    uint32_t bt = block_tokens ? block_tokens : FX_KV_DEFAULT_BLOCK_TOKENS;
    uint64_t row = ((uint64_t)n_ctx + bt - 1) / bt;
    uint64_t ring = ring_blocks_for(hp, bt, n_ctx, max_call), a, b;
    if (ring == 0)
        return fx_mul_u64(row, fx_kv_block_bytes(hp, bt, dtype), &a) ? a : 0;
    if (!fx_mul_u64(row, group_block_bytes(hp, bt, FX_KV_FULL_LAYERS, dtype), &a) ||
        !fx_mul_u64(ring, group_block_bytes(hp, bt, FX_KV_SLIDING_LAYERS, dtype),
                    &b) ||
        a + b < a)
        return 0;
    return a + b;
}

static uint32_t clamp_blocks(uint64_t n) {
    return n >= UINT32_MAX - 1 ? UINT32_MAX - 2 : (uint32_t)n;
}

void fx_kv_plan(const fx_hparams *hp, uint32_t block_tokens, uint32_t n_ctx,
                uint32_t max_call, fx_kv_dtype dtype, uint64_t bytes,
                fx_kv_params *out) {
    uint32_t bt = block_tokens ? block_tokens : FX_KV_DEFAULT_BLOCK_TOKENS;
    memset(out, 0, sizeof *out);
    out->block_tokens = bt;
    out->dtype = dtype;
    uint64_t ring = ring_blocks_for(hp, bt, n_ctx, max_call);
    uint64_t row_bytes = fx_kv_row_bytes(hp, bt, n_ctx, max_call, dtype);
    if (ring == 0 || row_bytes == 0) {
        out->n_blocks = fx_kv_blocks_for_bytes(hp, bt, dtype, bytes);
        return;
    }
    /* As many rows' worth of each pool as the bytes buy, the remainder
     * split the same way. */
    uint64_t row = ((uint64_t)n_ctx + bt - 1) / bt;
    uint64_t full_bytes = group_block_bytes(hp, bt, FX_KV_FULL_LAYERS, dtype);
    uint64_t ring_bytes = group_block_bytes(hp, bt, FX_KV_SLIDING_LAYERS, dtype);
    uint64_t rows = bytes / row_bytes, rest = bytes % row_bytes;
    double share = (double)(row * full_bytes) / (double)row_bytes;
    uint64_t rest_full = (uint64_t)((double)rest * share);
    out->n_blocks = clamp_blocks(rows * row + rest_full / full_bytes);
    out->n_ring_blocks = clamp_blocks(rows * ring + (rest - rest_full) / ring_bytes);
    out->ring_call = max_call;
    if (out->n_blocks == 0 || out->n_ring_blocks == 0)
        out->n_blocks = out->n_ring_blocks = 0;
}

uint32_t fx_kv_blocks_for_bytes(const fx_hparams *hp, uint32_t block_tokens,
                                fx_kv_dtype dtype, uint64_t bytes) {
    if (block_tokens == 0) block_tokens = FX_KV_DEFAULT_BLOCK_TOKENS;
    uint64_t per = fx_kv_block_bytes(hp, block_tokens, dtype);
    if (per == 0) return 0;
    uint64_t n = bytes / per;
    return n >= UINT32_MAX - 1 ? UINT32_MAX - 2 : (uint32_t)n;
}

void fx_kv_free(fx_kv *kv) {
    if (!kv) return;
    const fx_alloc *a = &kv->alloc;
    /* Detach the leases still live: their storage goes with the kv, and
     * kv = NULL makes a later fx_kv_lease_free on them a no-op instead of
     * a use after free. */
    for (fx_kv_lease *l = kv->leases, *next; l; l = next) {
        next = l->next;
        fx_free(a, l->table);
        fx_free(a, l->ptrs);
        fx_free(a, l->contig);
        fx_free(a, l->ring);
        fx_free(a, l->ring_at);
        fx_free(a, l->ring_ptrs);
        memset(l, 0, sizeof *l);
        l->state = FX_KV_LEASE_RELEASED;
    }
    void *arrays[] = {kv->data_raw,     kv->row_refs,     kv->free_stack,
                      kv->parent,       kv->first_child,  kv->next_sibling,
                      kv->prev_sibling, kv->tokens,       kv->pins,
                      kv->last_use,     kv->lru_prev,     kv->lru_next,
                      kv->in_lru,       kv->scratch};
    for (size_t i = 0; i < sizeof arrays / sizeof *arrays; i++)
        fx_free(a, arrays[i]);
    fx_kv_ring_free(kv);
    fx_alloc alloc = kv->alloc;
    fx_free(&alloc, kv);
}

fx_status fx_kv_create(const fx_alloc *alloc, const fx_hparams *hp,
                       const fx_kv_params *params, fx_kv **out,
                       fx_error *err) {
    if (!out) return fx_fail(err, FX_ERR_INVALID_ARG, "kv: out is NULL");
    *out = NULL;
    if (!alloc || !hp || !params)
        return fx_fail(err, FX_ERR_INVALID_ARG, "kv: NULL argument");
    uint32_t bt = params->block_tokens ? params->block_tokens
                                       : FX_KV_DEFAULT_BLOCK_TOKENS;
    uint32_t n = params->n_blocks;
    /* n + 1 node slots (the root) and KV_NIL must stay representable. */
    if (n == 0 || n >= UINT32_MAX - 1)
        return fx_fail(err, FX_ERR_INVALID_ARG,
                       "kv: n_blocks %u out of range (1 .. 2^32 - 3)", n);
    /* With a ring, these blocks hold only the layers that see every
     * position. */
    const bool no_full = params->ring_call &&
                         fx_kv_group_layers(hp, FX_KV_FULL_LAYERS) == 0;
    if (params->dtype != FX_KV_DTYPE_F32 && params->dtype != FX_KV_DTYPE_F16)
        return fx_fail(err, FX_ERR_INVALID_ARG, "kv: unknown dtype %d",
                       (int)params->dtype);
    const size_t esize = fx_kv_dtype_size(params->dtype);
    size_t elems = no_full ? 0 : fx_kv_elems_checked(
        hp, bt, params->ring_call ? FX_KV_FULL_LAYERS : FX_KV_ALL_LAYERS,
        params->dtype);
    uint64_t total_elems = 1, total_tokens;
    /* Without a full layer the blocks hold no K/V: one placeholder element
     * gives their data pointer a place to point (fx_kv_block_data). */
    if ((!no_full && (elems == 0 || !fx_mul_u64(elems, n, &total_elems))) ||
        total_elems > SIZE_MAX / esize ||
        !fx_mul_u64(bt, n, &total_tokens) || total_tokens > SIZE_MAX)
        return fx_fail(err, FX_ERR_TOO_LARGE,
                       "kv: %u blocks of %u positions overflow memory sizes",
                       n, bt);
    fx_kv *kv = fx_calloc(alloc, 1, sizeof *kv);
    if (!kv) return fx_fail(err, FX_ERR_NOMEM, "kv: out of memory");
    kv->alloc = *alloc;
    kv->hp = *hp;
    kv->n_blocks = n;
    kv->block_tokens = bt;
    kv->dtype = params->dtype;
    kv->block_elems = elems;
    kv->root = n;
    size_t nn = (size_t)n + 1;
    /* On huge pages: a decode step reads each layer's keys and values of
     * every earlier position, a few KB of each block, the blocks 0.5 MB
     * apart (the 246M model), so with 4 KiB pages nearly every piece was
     * a new page: a TLB miss, and hardware prefetchers that stop at the
     * page's end. Zeroed here, after the hint, so that the first touch
     * already takes huge pages. The biggest allocation goes first and each
     * is checked at once: a pool the machine cannot hold fails before any
     * per-block array is allocated and zeroed. */
    kv->data = fx_malloc_huge(alloc, (size_t)total_elems * esize, &kv->data_raw);
    if (!kv->data) goto nomem;
    memset(kv->data, 0, (size_t)total_elems * esize);
    if (!(kv->tokens = fx_malloc_array(alloc, (size_t)total_tokens, sizeof(int32_t))) ||
        !(kv->last_use = fx_calloc(alloc, n, sizeof(uint64_t))) ||
        !(kv->row_refs = fx_calloc(alloc, n, sizeof(uint32_t))) ||
        !(kv->free_stack = fx_malloc_array(alloc, n, sizeof(uint32_t))) ||
        !(kv->parent = fx_malloc_array(alloc, nn, sizeof(uint32_t))) ||
        !(kv->first_child = fx_malloc_array(alloc, nn, sizeof(uint32_t))) ||
        !(kv->next_sibling = fx_malloc_array(alloc, nn, sizeof(uint32_t))) ||
        !(kv->prev_sibling = fx_malloc_array(alloc, nn, sizeof(uint32_t))) ||
        !(kv->pins = fx_calloc(alloc, n, sizeof(uint32_t))) ||
        !(kv->lru_prev = fx_malloc_array(alloc, n, sizeof(uint32_t))) ||
        !(kv->lru_next = fx_malloc_array(alloc, n, sizeof(uint32_t))) ||
        !(kv->scratch = fx_malloc_array(alloc, n, sizeof(uint32_t))) ||
        !(kv->in_lru = fx_calloc(alloc, n, 1)))
        goto nomem; /* || stops at the first NULL */
    for (uint32_t i = 0; i <= n; i++) {
        kv->parent[i] = KV_NIL;
        kv->first_child[i] = kv->next_sibling[i] = kv->prev_sibling[i] = KV_NIL;
    }
    /* Lowest id on top, so a fresh pool hands out 0, 1, 2, ...: tests and
     * replays see the same block ids every run. */
    for (uint32_t i = 0; i < n; i++) kv->free_stack[i] = n - 1 - i;
    kv->n_free = n;
    kv->count[KV_FREE] = n;
    kv->lru_head = kv->lru_tail = KV_NIL;
    fx_status st = fx_kv_ring_create(kv, params, err);
    if (st != FX_OK) {
        fx_kv_free(kv);
        return st;
    }
    *out = kv;
    return FX_OK;
nomem:
    fx_kv_free(kv);
    return fx_fail(err, FX_ERR_NOMEM,
                   "kv: out of memory for %u blocks of %u positions", n, bt);
}

uint32_t fx_kv_block_tokens(const fx_kv *kv) { return kv->block_tokens; }
uint32_t fx_kv_total_blocks(const fx_kv *kv) { return kv->n_blocks; }
bool fx_kv_has_ring(const fx_kv *kv) { return kv->ring_len > 0; }

uint32_t fx_kv_blocks_for(const fx_kv *kv, uint64_t n_positions) {
    uint64_t n = n_positions / kv->block_tokens +
                 (n_positions % kv->block_tokens != 0);
    return n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

/* Elements of one run (model.h): a block's share of one layer's K or V
 * of one KV head. */
static size_t run_elems(const fx_kv *kv) {
    return (size_t)kv->block_tokens * kv->hp.head_dim;
}

void *fx_kv_block_data(const fx_kv *kv, uint32_t b) {
    if (b >= kv->n_blocks) return NULL;
    if (kv->block_elems == 0) return kv->data;
    return kv->data + (size_t)b * run_elems(kv) * fx_kv_dtype_size(kv->dtype);
}

size_t fx_kv_run_stride(const fx_kv *kv) {
    return (size_t)kv->n_blocks * run_elems(kv);
}

fx_kv_dtype fx_kv_dtype_of(const fx_kv *kv) { return kv->dtype; }

uint32_t fx_kv_block_refcount(const fx_kv *kv, uint32_t b) {
    if (b >= kv->n_blocks) return 0;
    return kv->row_refs[b] + (kv_in_tree(kv, b) ? 1u : 0u);
}

/* ---- drawing and referencing blocks ---- */

fx_status fx_kv_draw(fx_kv *kv, uint32_t *out, fx_error *err) {
    if (kv->n_free == 0 && !fx_kv_evict_one(kv))
        return fx_fail(err, FX_ERR_INTERNAL,
                       "kv: internal error: no free block and nothing "
                       "evictable although the budget promised one");
    uint32_t b = kv->free_stack[--kv->n_free];
    if (kv_class(kv, b) != KV_FREE)
        return fx_fail(err, FX_ERR_INTERNAL,
                       "kv: internal error: block %u on the free list is in use", b);
    kv->row_refs[b] = 1;
    kv_reclass(kv, b, KV_FREE);
    *out = b;
    return FX_OK;
}

void fx_kv_ref(fx_kv *kv, uint32_t b) {
    int c0 = kv_class(kv, b);
    kv->row_refs[b]++;
    kv_reclass(kv, b, c0);
    fx_kv_lru_sync(kv, b);
}

fx_status fx_kv_unref(fx_kv *kv, uint32_t b, fx_error *err) {
    /* A refcount that went negative would wrap to 4 billion holders and
     * the block would never come back -- or, if the decrement were
     * skipped elsewhere, come back twice and be handed to two rows. */
    if (kv->row_refs[b] == 0)
        return fx_fail(err, FX_ERR_INTERNAL,
                       "kv: internal error: block %u released with refcount 0", b);
    int c0 = kv_class(kv, b);
    kv->row_refs[b]--;
    kv_reclass(kv, b, c0);
    fx_kv_lru_sync(kv, b);
    return FX_OK;
}

/* ---- budget ---- */

fx_kv_fit fx_kv_fit_blocks(const fx_kv *kv, uint64_t n_blocks) {
    uint64_t ring = kv->ring_len == 0 ? 0
                    : n_blocks < kv->ring_len ? n_blocks : kv->ring_len;
    if (n_blocks > kv->n_blocks || ring > kv->n_ring) return FX_KV_NEVER;
    return n_blocks <= kv_available(kv) &&
                   kv->ring_entitled + kv->ring_pinned + ring <= kv->n_ring
               ? FX_KV_NOW : FX_KV_LATER;
}

void fx_kv_stats_get(const fx_kv *kv, fx_kv_stats *st) {
    st->total = kv->n_blocks;
    st->free = kv->count[KV_FREE];
    st->row = kv->count[KV_ROW];
    st->pinned = kv->count[KV_PINNED];
    st->cached = kv->count[KV_CACHED];
    st->reserved = kv->reserved;
    st->available = kv_available(kv);
    st->tree_nodes = kv->n_nodes;
    st->leases = kv->n_leases;
    st->ring_total = kv->n_ring;
    st->ring_free = kv->ring_count[KV_FREE];
    st->ring_row = kv->ring_count[KV_ROW];
    st->ring_cached = kv->ring_count[KV_CACHED];
    st->ring_entitled = kv->ring_entitled;
    st->ring_pinned = kv->ring_pinned;
}

/* ---- the check ---- */

static fx_status check_leases(const fx_kv *kv, fx_error *err) {
    uint32_t *refs = kv->scratch;
    memset(refs, 0, (size_t)kv->n_blocks * sizeof *refs);
    uint64_t reserved = 0;
    uint32_t n_leases = 0;
    for (const fx_kv_lease *l = kv->leases; l; l = l->next) {
        n_leases++;
        reserved += l->reserve_left;
        if (l->kv != kv)
            return fx_fail(err, FX_ERR_INTERNAL, "kv check: foreign lease");
        if (l->state != FX_KV_LEASE_ACTIVE &&
            (l->n_blocks != 0 || l->reserve_left != 0))
            return fx_fail(err, FX_ERR_INTERNAL,
                           "kv check: inactive lease holds blocks");
        if (l->layout == FX_KV_CONTIGUOUS) continue;
        if ((uint64_t)l->cursor > (uint64_t)l->n_blocks * kv->block_tokens)
            return fx_fail(err, FX_ERR_INTERNAL,
                           "kv check: cursor %u past the lease's %u blocks",
                           l->cursor, l->n_blocks);
        for (uint32_t i = 0; i < l->n_blocks; i++) {
            uint32_t b = l->table[i];
            if (b >= kv->n_blocks || l->ptrs[i] != fx_kv_block_data(kv, b))
                return fx_fail(err, FX_ERR_INTERNAL,
                               "kv check: lease table entry %u is bad", i);
            refs[b]++;
            /* A lease's blocks in the tree form a root path. This is what
             * makes cached blocks evictable on demand: a held block never
             * hangs below a block nobody holds. */
            if (kv_in_tree(kv, b) &&
                kv->parent[b] != (i == 0 ? kv->root : l->table[i - 1]))
                return fx_fail(err, FX_ERR_INTERNAL,
                               "kv check: lease block %u (index %u) is in the "
                               "tree off the lease's path", b, i);
        }
    }
    if (n_leases != kv->n_leases)
        return fx_fail(err, FX_ERR_INTERNAL, "kv check: lease count %u != %u",
                       n_leases, kv->n_leases);
    if (reserved != kv->reserved)
        return fx_fail(err, FX_ERR_INTERNAL,
                       "kv check: reserved %llu but leases hold %llu",
                       (unsigned long long)kv->reserved,
                       (unsigned long long)reserved);
    for (uint32_t b = 0; b < kv->n_blocks; b++)
        if (refs[b] != kv->row_refs[b])
            return fx_fail(err, FX_ERR_INTERNAL,
                           "kv check: block %u refcount %u but %u leases hold it",
                           b, kv->row_refs[b], refs[b]);
    return FX_OK;
}

fx_status fx_kv_check(const fx_kv *kv, fx_error *err) {
    uint32_t count[KV_NCLASS] = {0};
    for (uint32_t b = 0; b < kv->n_blocks; b++) count[kv_class(kv, b)]++;
    uint64_t sum = 0;
    for (int c = 0; c < KV_NCLASS; c++) {
        sum += count[c];
        if (count[c] != kv->count[c])
            return fx_fail(err, FX_ERR_INTERNAL,
                           "kv check: class %d has %u blocks, counter says %u",
                           c, count[c], kv->count[c]);
    }
    if (sum != kv->n_blocks)
        return fx_fail(err, FX_ERR_INTERNAL,
                       "kv check: free + row + pinned + cached = %llu != %u",
                       (unsigned long long)sum, kv->n_blocks);
    if (kv->n_free != count[KV_FREE])
        return fx_fail(err, FX_ERR_INTERNAL,
                       "kv check: free list has %u entries, %u blocks are free",
                       kv->n_free, count[KV_FREE]);
    uint32_t *seen = kv->scratch;
    memset(seen, 0, (size_t)kv->n_blocks * sizeof *seen);
    for (uint32_t i = 0; i < kv->n_free; i++) {
        uint32_t b = kv->free_stack[i];
        if (b >= kv->n_blocks || seen[b]++ || kv_class(kv, b) != KV_FREE)
            return fx_fail(err, FX_ERR_INTERNAL,
                           "kv check: free list entry %u (block %u) is bad", i, b);
    }
    if (kv->reserved > (uint64_t)count[KV_FREE] + count[KV_CACHED])
        return fx_fail(err, FX_ERR_INTERNAL,
                       "kv check: %llu blocks reserved, only %u free + %u cached",
                       (unsigned long long)kv->reserved, count[KV_FREE],
                       count[KV_CACHED]);
    fx_status st = check_leases(kv, err);
    if (st == FX_OK) st = fx_kv_check_tree(kv, err);
    return st == FX_OK ? fx_kv_ring_check(kv, err) : st;
}
