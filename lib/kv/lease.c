/*
 * Leases: one row's KV. The block table, the KV cursor (the one truth for
 * positions written), admission with prefix adoption, growth, publish and
 * release -- the pieces the batcher's one exit path is built from.
 */
#include "kv_impl.h"

#include <string.h>

fx_status fx_kv_lease_init(fx_kv *kv, fx_kv_lease *lease, fx_kv_layout layout,
                           uint32_t max_positions, fx_error *err) {
    if (!kv || !lease)
        return fx_fail(err, FX_ERR_INVALID_ARG, "kv lease: NULL argument");
    memset(lease, 0, sizeof *lease);
    lease->state = FX_KV_LEASE_RELEASED; /* a failed init frees as a no-op */
    if (max_positions == 0 ||
        (layout != FX_KV_PAGED && layout != FX_KV_CONTIGUOUS))
        return fx_fail(err, FX_ERR_INVALID_ARG,
                       "kv lease: bad layout %d or zero max_positions",
                       (int)layout);
    if (layout == FX_KV_PAGED) {
        uint32_t mb = fx_kv_blocks_for(kv, max_positions);
        lease->table = fx_malloc_array(&kv->alloc, mb, sizeof *lease->table);
        lease->ptrs = fx_malloc_array(&kv->alloc, mb, sizeof *lease->ptrs);
        if (!lease->table || !lease->ptrs) {
            fx_free(&kv->alloc, lease->table);
            fx_free(&kv->alloc, lease->ptrs);
            lease->table = NULL;
            lease->ptrs = NULL;
            return fx_fail(err, FX_ERR_NOMEM,
                           "kv lease: out of memory for a %u-block table", mb);
        }
        lease->max_blocks = mb;
        lease->kv = kv;
        fx_status st = fx_kv_ring_lease_init(lease, err);
        if (st != FX_OK) {
            fx_free(&kv->alloc, lease->table);
            fx_free(&kv->alloc, lease->ptrs);
            memset(lease, 0, sizeof *lease);
            lease->state = FX_KV_LEASE_RELEASED;
            return st;
        }
    } else {
        /* A block max_positions long, its runs side by side: the forward
         * pass cannot tell it from a pool's blocks, which is what lets one
         * set of forward tests cover both. */
        uint64_t bytes;
        if (!fx_mul_u64(fx_kv_block_elems(&kv->hp, 1), max_positions,
                        &bytes) ||
            !fx_mul_u64(bytes, fx_kv_dtype_size(kv->dtype), &bytes) ||
            bytes > SIZE_MAX)
            return fx_fail(err, FX_ERR_TOO_LARGE,
                           "kv lease: %u contiguous positions overflow",
                           max_positions);
        lease->contig = fx_calloc(&kv->alloc, 1, (size_t)bytes);
        lease->ptrs = fx_malloc_array(&kv->alloc, 1, sizeof *lease->ptrs);
        if (!lease->contig || !lease->ptrs) {
            fx_free(&kv->alloc, lease->contig);
            fx_free(&kv->alloc, lease->ptrs);
            lease->contig = NULL;
            lease->ptrs = NULL;
            return fx_fail(err, FX_ERR_NOMEM,
                           "kv lease: out of memory for %u contiguous positions",
                           max_positions);
        }
        lease->ptrs[0] = lease->contig;
        lease->max_blocks = 1;
    }
    lease->kv = kv;
    lease->layout = layout;
    lease->max_positions = max_positions;
    lease->state = FX_KV_LEASE_IDLE;
    lease->next = kv->leases;
    if (kv->leases) kv->leases->prev = lease;
    kv->leases = lease;
    kv->n_leases++;
    return FX_OK;
}

void fx_kv_lease_free(fx_kv_lease *lease) {
    if (!lease || !lease->kv) return;
    fx_kv *kv = lease->kv;
    if (lease->state != FX_KV_LEASE_RELEASED)
        (void)fx_kv_lease_release(lease, NULL);
    if (lease->prev) lease->prev->next = lease->next;
    else kv->leases = lease->next;
    if (lease->next) lease->next->prev = lease->prev;
    kv->n_leases--;
    fx_free(&kv->alloc, lease->table);
    fx_free(&kv->alloc, lease->ptrs);
    fx_free(&kv->alloc, lease->contig);
    fx_kv_ring_lease_free(lease);
    memset(lease, 0, sizeof *lease);
    lease->state = FX_KV_LEASE_RELEASED;
}

static fx_status check_live(const fx_kv_lease *lease, fx_kv_lease_state want,
                            const char *what, fx_error *err) {
    if (!lease || !lease->kv)
        return fx_fail(err, FX_ERR_INVALID_ARG, "kv %s: lease not initialized",
                       what);
    if (lease->state != want)
        return fx_fail(err, FX_ERR_INVALID_ARG, "kv %s: lease is %s", what,
                       lease->state == FX_KV_LEASE_IDLE     ? "not admitted"
                       : lease->state == FX_KV_LEASE_ACTIVE ? "already admitted"
                                                            : "released");
    return FX_OK;
}

fx_status fx_kv_lease_admit(fx_kv_lease *lease, const int32_t *prompt,
                            uint32_t n_prompt, uint32_t n_positions,
                            fx_kv_fit *fit, fx_error *err) {
    fx_status st = check_live(lease, FX_KV_LEASE_IDLE, "admit", err);
    if (st != FX_OK) return st;
    if (!fit || (!prompt && n_prompt))
        return fx_fail(err, FX_ERR_INVALID_ARG, "kv admit: NULL argument");
    if (n_prompt > n_positions || n_positions > lease->max_positions)
        return fx_fail(err, FX_ERR_INVALID_ARG,
                       "kv admit: %u prompt tokens, %u positions, lease holds %u",
                       n_prompt, n_positions, lease->max_positions);
    fx_kv *kv = lease->kv;
    if (lease->layout == FX_KV_CONTIGUOUS) {
        lease->state = FX_KV_LEASE_ACTIVE;
        *fit = FX_KV_NOW;
        return FX_OK;
    }
    uint32_t need = fx_kv_blocks_for(kv, n_positions);
    if (need > kv->n_blocks) {
        *fit = FX_KV_NEVER;
        return FX_OK;
    }
    uint32_t ring_cap = kv->ring_len ? fx_kv_ring_cap_for(kv, need) : 0;
    if (ring_cap > kv->n_ring) {
        *fit = FX_KV_NEVER;
        return FX_OK;
    }
    uint32_t limit = fx_kv_adoptable_blocks(kv, n_prompt);
    uint32_t k = 0, node = kv->root, cached = 0;
    while (k < limit) {
        uint32_t c =
            fx_kv_find_child(kv, node, prompt + (size_t)k * kv->block_tokens);
        if (c == KV_NIL) break;
        lease->table[k++] = c;
        node = c;
    }
    /* Sliding layers need the window before the adoption point too. */
    k = fx_kv_ring_coverage(kv, lease->table, k);
    /* An adopted block that only the tree held stops being evictable: it
     * costs the budget exactly as a new block would. */
    for (uint32_t i = 0; i < k; i++)
        cached += kv_class(kv, lease->table[i]) == KV_CACHED;
    if ((uint64_t)(need - k) + cached > kv_available(kv) ||
        kv->ring_entitled + kv->ring_pinned + ring_cap > kv->n_ring) {
        *fit = FX_KV_LATER;
        return FX_OK;
    }
    kv->tick++;
    for (uint32_t i = 0; i < k; i++) {
        uint32_t b = lease->table[i];
        fx_kv_ref(kv, b); /* out of the LRU first: its order is by last_use */
        kv->last_use[b] = kv->tick;
        lease->ptrs[i] = fx_kv_block_data(kv, b);
    }
    lease->n_blocks = k;
    lease->adopted = k;
    /* Starts after the adopted prefix, not at zero: a prefill from zero
     * would re-run the whole prompt on top of it, writing past it with
     * RoPE positions 0..n. */
    lease->cursor = k * kv->block_tokens;
    lease->reserve_left = need - k;
    kv->reserved += lease->reserve_left;
    fx_kv_ring_adopt(lease, ring_cap);
    lease->state = FX_KV_LEASE_ACTIVE;
    *fit = FX_KV_NOW;
    return FX_OK;
}

uint32_t fx_kv_lease_cursor(const fx_kv_lease *lease) { return lease->cursor; }

uint32_t fx_kv_lease_adopted_tokens(const fx_kv_lease *lease) {
    return lease->kv && lease->layout == FX_KV_PAGED
               ? lease->adopted * lease->kv->block_tokens
               : 0;
}

fx_status fx_kv_lease_prepare(fx_kv_lease *lease, uint32_t n_new,
                              fx_error *err) {
    fx_status st = check_live(lease, FX_KV_LEASE_ACTIVE, "prepare", err);
    if (st != FX_OK) return st;
    uint64_t end = (uint64_t)lease->cursor + n_new;
    if (end > lease->max_positions)
        return fx_fail(err, FX_ERR_NO_ROOM,
                       "kv prepare: position %llu past the lease's %u",
                       (unsigned long long)end, lease->max_positions);
    if (lease->layout == FX_KV_CONTIGUOUS) return FX_OK;
    fx_kv *kv = lease->kv;
    uint32_t bt = kv->block_tokens;
    if (kv->ring_len && n_new > kv->ring_call)
        return fx_fail(err, FX_ERR_INVALID_ARG,
                       "kv prepare: %u positions in one call, the ring "
                       "holds the window for %u", n_new, kv->ring_call);
    /* A row never writes into a block someone else can read: adoption and
     * publish take whole written blocks only, so the block the cursor sits
     * in is this lease's alone. If that ever stopped holding, the row
     * would overwrite another row's prefix under it. */
    if (n_new > 0 && lease->cursor % bt != 0) {
        uint32_t b = lease->table[lease->cursor / bt];
        if (kv_in_tree(kv, b) || kv->row_refs[b] != 1)
            return fx_fail(err, FX_ERR_INTERNAL,
                           "kv prepare: internal error: the block at the "
                           "cursor (%u) is shared", b);
    }
    while ((uint64_t)lease->n_blocks * bt < end) {
        /* Within the reservation the draw cannot fail (kv.h's budget); a
         * row that outgrows it may take only what nobody was promised. */
        if (lease->reserve_left == 0 && kv_available(kv) == 0)
            return fx_fail(err, FX_ERR_TOO_LARGE,
                           "kv prepare: row outgrew its reservation and no "
                           "block is free");
        /* The ring first: a failed draw below leaves its block in place
         * for the retry, while a table entry without one could not be. */
        st = fx_kv_ring_grow(lease, lease->n_blocks, lease->n_blocks + 1, err);
        if (st != FX_OK) return st;
        uint32_t b;
        st = fx_kv_draw(kv, &b, err);
        if (st != FX_OK) return st;
        if (lease->reserve_left > 0) {
            lease->reserve_left--;
            kv->reserved--;
        }
        lease->table[lease->n_blocks] = b;
        lease->ptrs[lease->n_blocks] = fx_kv_block_data(kv, b);
        lease->n_blocks++;
    }
    return FX_OK;
}

fx_kv_view fx_kv_lease_view(const fx_kv_lease *lease) {
    fx_kv_view v = {.blocks = NULL, .n_blocks = 0, .block_tokens = 1};
    if (!lease || !lease->kv || lease->state != FX_KV_LEASE_ACTIVE) return v;
    v.dtype = lease->kv->dtype;
    if (lease->layout == FX_KV_CONTIGUOUS) {
        v.blocks = lease->ptrs;
        v.n_blocks = 1;
        v.block_tokens = lease->max_positions;
        v.run_stride = (size_t)lease->max_positions * lease->kv->hp.head_dim;
    } else {
        v.blocks = lease->ptrs;
        v.n_blocks = lease->n_blocks;
        v.block_tokens = lease->kv->block_tokens;
        v.run_stride = fx_kv_run_stride(lease->kv);
        if (lease->ring) {
            v.ring = lease->ring_ptrs;
            v.ring_blocks = lease->kv->ring_len;
            v.ring_run_stride = (size_t)lease->kv->n_ring *
                                lease->kv->block_tokens * lease->kv->hp.head_dim;
        }
    }
    return v;
}

fx_status fx_kv_lease_advance(fx_kv_lease *lease, uint32_t n, fx_error *err) {
    fx_status st = check_live(lease, FX_KV_LEASE_ACTIVE, "advance", err);
    if (st != FX_OK) return st;
    uint64_t room = lease->layout == FX_KV_CONTIGUOUS
                        ? lease->max_positions
                        : (uint64_t)lease->n_blocks * lease->kv->block_tokens;
    if ((uint64_t)lease->cursor + n > room)
        return fx_fail(err, FX_ERR_INVALID_ARG,
                       "kv advance: %u positions past the %llu prepared",
                       n, (unsigned long long)(room - lease->cursor));
    lease->cursor += n;
    return FX_OK;
}

fx_status fx_kv_lease_publish(fx_kv_lease *lease, const int32_t *tokens,
                              size_t n_tokens, fx_error *err) {
    /* A row that ends before admission wrote nothing: publishing it is a
     * no-op, so the batcher's one exit path needs no branch for it. */
    if (lease && lease->kv && lease->state == FX_KV_LEASE_IDLE) return FX_OK;
    fx_status st = check_live(lease, FX_KV_LEASE_ACTIVE, "publish", err);
    if (st != FX_OK) return st;
    if (!tokens && n_tokens)
        return fx_fail(err, FX_ERR_INVALID_ARG, "kv publish: NULL tokens");
    if (lease->layout == FX_KV_CONTIGUOUS) return FX_OK;
    fx_kv *kv = lease->kv;
    uint32_t bt = kv->block_tokens;
    /* Only positions the cursor says were written: a row's last sampled
     * token was never run, and a cancelled prefill stopped mid-prompt. */
    size_t written = n_tokens < lease->cursor ? n_tokens : lease->cursor;
    uint32_t n = (uint32_t)(written / bt);
    /* Validate before changing anything: a block already in the tree must
     * sit under the same ids, or the caller's tokens are not the ones
     * this row ran and publishing them would poison the cache. */
    for (uint32_t i = 0; i < n; i++) {
        uint32_t b = lease->table[i];
        if (kv_in_tree(kv, b) &&
            memcmp(kv_node_tokens(kv, b), tokens + (size_t)i * bt,
                   (size_t)bt * sizeof *tokens) != 0)
            return fx_fail(err, FX_ERR_INVALID_ARG,
                           "kv publish: tokens of block %u differ from the "
                           "ones this lease adopted or published", i);
    }
    kv->tick++;
    uint32_t node = kv->root;
    for (uint32_t i = 0; i < n; i++) {
        const int32_t *ids = tokens + (size_t)i * bt;
        uint32_t mine = lease->table[i];
        uint32_t have = fx_kv_find_child(kv, node, ids);
        if (have == KV_NIL) {
            if (kv_in_tree(kv, mine))
                return fx_fail(err, FX_ERR_INTERNAL,
                               "kv publish: internal error: block %u is in "
                               "the tree off this lease's path", mine);
            fx_kv_insert_child(kv, node, mine, ids);
            have = mine;
        } else if (have != mine) {
            /* Another row computed (or this one adopted a shorter prefix
             * of) the same block: share the tree's copy and give ours
             * back, so the cache holds each prefix once. Same model, same
             * ids, same positions: the two are bit-identical (docs/design.md's
             * determinism contract), so the swap cannot change what this
             * row computes next. It also keeps the lease's in-tree blocks
             * one root path, which eviction relies on (kv.h). */
            fx_kv_ref(kv, have);
            lease->table[i] = have;
            lease->ptrs[i] = fx_kv_block_data(kv, have);
            st = fx_kv_unref(kv, mine, err);
            if (st != FX_OK) return st;
        }
        kv->last_use[have] = kv->tick;
        fx_kv_ring_publish(lease, i, have);
        node = have;
    }
    return FX_OK;
}

fx_status fx_kv_lease_release(fx_kv_lease *lease, fx_error *err) {
    if (!lease || !lease->kv)
        return fx_fail(err, FX_ERR_INVALID_ARG,
                       "kv release: lease not initialized (or freed)");
    if (lease->state == FX_KV_LEASE_RELEASED)
        return fx_fail(err, FX_ERR_INVALID_ARG,
                       "kv release: lease released twice");
    fx_kv *kv = lease->kv;
    fx_status first = FX_OK;
    kv->tick++;
    /* Deepest first, so each node is a leaf (if it is one at all) when it
     * joins the LRU, and every block goes back even if one of them turns
     * out to have a broken refcount. */
    for (uint32_t i = lease->n_blocks; i-- > 0;) {
        uint32_t b = lease->table[i];
        if (kv_in_tree(kv, b)) kv->last_use[b] = kv->tick;
        fx_status st = fx_kv_unref(kv, b, first == FX_OK ? err : NULL);
        if (first == FX_OK) first = st;
    }
    fx_status st = fx_kv_ring_release(lease, first == FX_OK ? err : NULL);
    if (first == FX_OK) first = st;
    kv->reserved -= lease->reserve_left;
    lease->reserve_left = 0;
    lease->n_blocks = 0;
    lease->cursor = 0;
    lease->state = FX_KV_LEASE_RELEASED;
    return first;
}
