/*
 * docs/reliability.md 41: a soak. Thousands of random submit / admit / step /
 * publish / finish / cancel / evict / pin / unpin operations from a fixed
 * seed, over a pool far too small for everyone, with prompts that share
 * prefixes. After every operation:
 *   - fx_kv_check: the accounting identity, refcounts against the leases'
 *     tables, the tree, the LRU;
 *   - every admitted row still reads, at every position it has written,
 *     the signature of ITS OWN token history -- so no block a row reads
 *     was evicted and reused, no row wrote into a shared block, and every
 *     adopted prefix held what its tokens say;
 *   - a prepare within the row's admitted size never fails (the budget's
 *     promise, under eviction pressure).
 * At the end, with every row ended and every pin released, the blocks and
 * refcounts are back at baseline. Run also with the sliding layer in
 * rings: there a row must read its own history over its window, adopted
 * windows included, and the ring pool is back at baseline too.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kv/kv.h"
#include "test_rng.h"

enum { SLOTS = 8, MAX_POS = 100, N_PINS = 6, OPS = 12000 };

typedef struct row {
    int used;     /* lease initialized (submitted) */
    int admitted;
    fx_kv_lease lease;
    int32_t tokens[MAX_POS];
    uint32_t n_prompt, n_total; /* n_total: positions it may write */
} row;

typedef struct soak {
    fx_alloc alloc;
    fx_hparams hp;
    fx_kv *kv;
    uint32_t bt;
    uint32_t ring_call; /* 0: no rings */
    uint64_t rng;
    row rows[SLOTS];
    fx_kv_pin pins[N_PINS];
    /* what happened, so the test can insist each path was exercised */
    unsigned n_never, n_later, n_adopted, n_evicted, n_pinned, n_double;
    unsigned n_grow_evict; /* evictions a prepare made on demand */
} soak;

static uint32_t rnd(soak *s, uint32_t n) {
    return (uint32_t)fx_test_rng_below(&s->rng, n);
}

/* The signature of tokens[0..p]: depends on the whole history, so a block
 * computed for another prefix can never pass for this one. Kept below
 * 2^24 so a float holds it exactly. */
static float sig(const int32_t *tokens, uint32_t p) {
    uint64_t h = 1469598103934665603ull;
    for (uint32_t i = 0; i <= p; i++)
        h = (h ^ (uint64_t)(uint32_t)tokens[i]) * 1099511628211ull;
    return (float)((h ^ (h >> 29)) & 0xFFFFFF);
}

/* The two floats a position's signature lives in, per model.h's block
 * layout: layer 0's K of the first KV head (its first float) and the
 * last layer's V of the last KV head (its last float). */
static float *slot(const soak *s, const fx_kv_view *v, uint32_t p, int which) {
    const uint32_t layer = which ? s->hp.n_layer - 1 : 0;
    const uint32_t head = which ? s->hp.n_head_kv - 1 : 0;
    /* With rings, sliding layers are in the ring, each kind numbering its
     * own layers from 0 (model.h). */
    const int in_ring = v->ring && fx_layer_slides(&s->hp, layer);
    const uint32_t at_layer = v->ring ? fx_kv_layer_slot(&s->hp, layer) : layer;
    const size_t run =
        ((size_t)at_layer * 2 + (uint32_t)which) * s->hp.n_head_kv + head;
    const size_t stride = in_ring ? v->ring_run_stride : v->run_stride;
    const size_t at = run * stride +
                      (size_t)(p % v->block_tokens) * s->hp.head_dim +
                      (which ? s->hp.head_dim - 1 : 0);
    if (in_ring)
        return (float *)v->ring[(p / v->block_tokens) % v->ring_blocks] + at;
    return (float *)v->blocks[p / v->block_tokens] + at;
}

/* Whether slot(which) of position p must hold its signature: a ring
 * holds what the next position's window reads. */
static int must_hold(const soak *s, const fx_kv_view *v, int which, uint32_t p,
                     uint32_t cursor) {
    uint32_t layer = which ? s->hp.n_layer - 1 : 0;
    return !v->ring || !fx_layer_slides(&s->hp, layer) || p + s->hp.n_swa > cursor;
}

static void verify(soak *s, const char *after) {
    fx_error err;
    if (fx_kv_check(s->kv, &err) != FX_OK)
        fail_msg("after %s: %s", after, err.message);
    for (int r = 0; r < SLOTS; r++) {
        row *w = &s->rows[r];
        if (!w->admitted) continue;
        fx_kv_view v = fx_kv_lease_view(&w->lease);
        const uint32_t cursor = fx_kv_lease_cursor(&w->lease);
        for (uint32_t p = 0; p < cursor; p++) {
            float want = sig(w->tokens, p);
            if ((must_hold(s, &v, 0, p, cursor) && *slot(s, &v, p, 0) != want) ||
                (must_hold(s, &v, 1, p, cursor) && *slot(s, &v, p, 1) != want))
                fail_msg("after %s: row %d position %u holds another "
                         "prefix's KV", after, r, p);
        }
    }
}

static void new_tokens(soak *s, row *w) {
    /* Four families of prefixes over a tiny alphabet: lots of sharing,
     * lots of near misses. */
    uint32_t fam = rnd(s, 4);
    w->n_prompt = 1 + rnd(s, 60);
    w->n_total = w->n_prompt + 1 + rnd(s, 40);
    if (w->n_total > MAX_POS) w->n_total = MAX_POS;
    uint32_t shared = rnd(s, w->n_prompt + 1);
    for (uint32_t i = 0; i < w->n_total; i++)
        w->tokens[i] = i < shared ? (int32_t)((fam * 7 + i * 3) % 5)
                                  : (int32_t)rnd(s, 3);
}

static void try_admit(soak *s, row *w) {
    fx_kv *kv = s->kv;
    uint32_t expect = w->lease.layout == FX_KV_CONTIGUOUS
                          ? 0
                          : fx_kv_match(kv, w->tokens, w->n_prompt,
                                        fx_kv_adoptable_blocks(kv, w->n_prompt));
    fx_kv_fit fit;
    fx_error err;
    if (fx_kv_lease_admit(&w->lease, w->tokens, w->n_prompt, w->n_total, &fit,
                          &err) != FX_OK)
        fail_msg("admit: %s", err.message);
    if (fit == FX_KV_NOW) {
        w->admitted = 1;
        /* DESIGN 4: the cursor starts at the adopted prefix, inside the
         * prompt -- with rings, as deep as the tree has its window. */
        uint32_t cursor = fx_kv_lease_cursor(&w->lease);
        if (s->ring_call && w->lease.layout == FX_KV_PAGED)
            assert_true(cursor % s->bt == 0 && cursor <= expect * s->bt);
        else
            assert_int_equal(cursor, expect * s->bt);
        assert_true(cursor < w->n_prompt);
        s->n_adopted += cursor > 0;
    } else if (fit == FX_KV_NEVER) {
        /* Refused at submit: more than the whole pool (or ring pool). */
        assert_int_equal(fx_kv_fit_blocks(kv, fx_kv_blocks_for(kv, w->n_total)),
                         FX_KV_NEVER);
        s->n_never++;
        assert_int_equal(fx_kv_lease_release(&w->lease, &err), FX_OK);
        fx_kv_lease_free(&w->lease);
        w->used = 0;
    } else {
        s->n_later++;
    }
}

static void op_submit(soak *s) {
    for (int r = 0; r < SLOTS; r++) {
        row *w = &s->rows[r];
        if (w->used) continue;
        new_tokens(s, w);
        fx_kv_layout layout = rnd(s, 8) == 0 ? FX_KV_CONTIGUOUS : FX_KV_PAGED;
        fx_error err;
        if (fx_kv_lease_init(s->kv, &w->lease, layout, MAX_POS, &err) != FX_OK)
            fail_msg("lease init: %s", err.message);
        w->used = 1;
        w->admitted = 0;
        try_admit(s, w);
        return;
    }
}

static row *pick(soak *s, int admitted) {
    int start = (int)rnd(s, SLOTS);
    for (int i = 0; i < SLOTS; i++) {
        row *w = &s->rows[(start + i) % SLOTS];
        if (w->used && w->admitted == admitted) return w;
    }
    return NULL;
}

/* One forward pass, as the batcher runs it: prepare, positions from the
 * cursor, write, advance -- or, now and then, a pass that "failed" after
 * prepare and so must not advance. */
static void op_step(soak *s) {
    row *w = pick(s, 1);
    if (!w) return;
    uint32_t cur = fx_kv_lease_cursor(&w->lease);
    if (cur >= w->n_total) return;
    uint32_t n = 1 + rnd(s, 8);
    if (s->ring_call && n > s->ring_call) n = s->ring_call;
    if (n > w->n_total - cur) n = w->n_total - cur;
    fx_error err;
    /* As the batcher: full blocks published before a ring lets them go. */
    if (s->ring_call && fx_kv_lease_publish(&w->lease, w->tokens, cur, &err) != FX_OK)
        fail_msg("publish: %s", err.message);
    fx_kv_stats before, after;
    fx_kv_stats_get(s->kv, &before);
    if (fx_kv_lease_prepare(&w->lease, n, &err) != FX_OK)
        fail_msg("prepare within the reservation failed: %s", err.message);
    fx_kv_stats_get(s->kv, &after);
    s->n_grow_evict += after.tree_nodes < before.tree_nodes;
    if (rnd(s, 10) == 0) return; /* the pass failed: nothing written */
    fx_kv_view v = fx_kv_lease_view(&w->lease);
    for (uint32_t p = cur; p < cur + n; p++)
        *slot(s, &v, p, 0) = *slot(s, &v, p, 1) = sig(w->tokens, p);
    if (fx_kv_lease_advance(&w->lease, n, &err) != FX_OK)
        fail_msg("advance: %s", err.message);
}

static void op_publish(soak *s) {
    row *w = pick(s, 1);
    if (!w) return;
    fx_error err;
    if (fx_kv_lease_publish(&w->lease, w->tokens, w->n_total, &err) != FX_OK)
        fail_msg("publish: %s", err.message);
}

/* Every way a row ends is one path: publish (if it ran), release, free. */
static void op_end(soak *s) {
    row *w = pick(s, (int)rnd(s, 2));
    if (!w) return;
    fx_error err;
    if (w->admitted && rnd(s, 4) != 0 &&
        fx_kv_lease_publish(&w->lease, w->tokens, w->n_total, &err) != FX_OK)
        fail_msg("publish: %s", err.message);
    if (fx_kv_lease_release(&w->lease, &err) != FX_OK)
        fail_msg("release: %s", err.message);
    if (rnd(s, 8) == 0) {
        assert_int_equal(fx_kv_lease_release(&w->lease, &err), FX_ERR_INVALID_ARG);
        s->n_double++;
    }
    fx_kv_lease_free(&w->lease);
    w->used = w->admitted = 0;
}

static void op_pin(soak *s) {
    for (int i = 0; i < N_PINS; i++) {
        if (s->pins[i].active) continue;
        row *w = pick(s, 1);
        if (!w) return;
        fx_kv_fit fit;
        fx_error err;
        if (fx_kv_pin_prefix(s->kv, w->tokens, 1 + rnd(s, w->n_total),
                             &s->pins[i], &fit, &err) != FX_OK)
            fail_msg("pin: %s", err.message);
        s->n_pinned += fit == FX_KV_NOW && s->pins[i].n_blocks > 0;
        return;
    }
}

static void op_unpin(soak *s) {
    int i = (int)rnd(s, N_PINS);
    if (!s->pins[i].active) return;
    fx_error err;
    if (fx_kv_unpin(s->kv, &s->pins[i], &err) != FX_OK)
        fail_msg("unpin: %s", err.message);
    if (rnd(s, 8) == 0)
        assert_int_equal(fx_kv_unpin(s->kv, &s->pins[i], &err), FX_ERR_INVALID_ARG);
}

/* n_ring 0: no rings; else layer 0 (all_slide: both) slides over 7
 * positions, in rings for calls of up to 3, from a pool of n_ring
 * blocks. */
static void run_soak(uint32_t bt, uint32_t n_blocks, uint64_t seed,
                     uint32_t n_ring, int all_slide) {
    soak *s = calloc(1, sizeof *s);
    assert_non_null(s);
    fx_alloc_init(&s->alloc, NULL);
    s->hp.n_layer = 2;
    s->hp.n_head = 2;
    s->hp.n_head_kv = 1;
    s->hp.head_dim = 2;
    s->bt = bt;
    s->rng = seed;
    if (n_ring) {
        s->hp.n_swa = 7;
        s->hp.swa_period = all_slide ? 0 : 2;
        s->ring_call = 3;
    }
    fx_kv_params p = {.n_blocks = n_blocks, .block_tokens = bt,
                      .ring_call = s->ring_call, .n_ring_blocks = n_ring};
    fx_error err;
    assert_int_equal(fx_kv_create(&s->alloc, &s->hp, &p, &s->kv, &err), FX_OK);
    for (int op = 0; op < OPS; op++) {
        uint32_t k = rnd(s, 100);
        const char *what;
        if (k < 12) { op_submit(s); what = "submit"; }
        else if (k < 20) {
            row *w = pick(s, 0);
            if (w) try_admit(s, w);
            what = "admit";
        }
        else if (k < 62) { op_step(s); what = "step"; }
        else if (k < 68) { op_publish(s); what = "publish"; }
        else if (k < 80) { op_end(s); what = "end"; }
        else if (k < 86) {
            uint32_t ev;
            fx_kv_evict(s->kv, rnd(s, 4), &ev);
            s->n_evicted += ev;
            what = "evict";
        }
        else if (k < 93) { op_pin(s); what = "pin"; }
        else { op_unpin(s); what = "unpin"; }
        verify(s, what);
    }
    /* Every path was exercised, or the soak proves less than it claims. */
    if (!s->n_never || !s->n_later || !s->n_adopted || !s->n_evicted ||
        !s->n_pinned || !s->n_double || !s->n_grow_evict)
        fail_msg("bt %u: a path was never taken: never %u later %u adopted %u "
                 "evicted %u pinned %u double %u grow-evict %u", bt, s->n_never,
                 s->n_later, s->n_adopted, s->n_evicted, s->n_pinned,
                 s->n_double, s->n_grow_evict);
    for (int r = 0; r < SLOTS; r++) {
        row *w = &s->rows[r];
        if (!w->used) continue;
        assert_int_equal(fx_kv_lease_release(&w->lease, &err), FX_OK);
        fx_kv_lease_free(&w->lease);
    }
    for (int i = 0; i < N_PINS; i++)
        if (s->pins[i].active)
            assert_int_equal(fx_kv_unpin(s->kv, &s->pins[i], &err), FX_OK);
    assert_int_equal(fx_kv_check(s->kv, &err), FX_OK);
    fx_kv_stats st;
    fx_kv_stats_get(s->kv, &st);
    assert_int_equal(st.row, 0);
    assert_int_equal(st.pinned, 0);
    assert_int_equal(st.reserved, 0);
    assert_int_equal(st.leases, 0);
    assert_int_equal(st.available, n_blocks);
    assert_int_equal(st.ring_row, 0);
    assert_int_equal(st.ring_pinned, 0);
    assert_int_equal(st.ring_entitled, 0);
    fx_kv_evict(s->kv, UINT32_MAX, NULL);
    fx_kv_stats_get(s->kv, &st);
    assert_int_equal(st.free, n_blocks);
    assert_int_equal(st.ring_free, n_ring);
    assert_int_equal(st.tree_nodes, 0);
    for (uint32_t b = 0; b < n_blocks; b++)
        assert_int_equal(fx_kv_block_refcount(s->kv, b), 0);
    assert_int_equal(fx_kv_check(s->kv, &err), FX_OK);
    fx_kv_free(s->kv);
    free(s);
}

static void test_soak_bt4(void **state) {
    (void)state;
    run_soak(4, 24, 12345, 0, 0);
}

static void test_soak_bt5(void **state) {
    (void)state;
    run_soak(5, 19, 777, 0, 0);
}

static void test_soak_bt16(void **state) {
    (void)state;
    run_soak(16, 6, 4242, 0, 0);
}

/* Rings of (7 + 3 - 2) / bt + 2 blocks: 4 at bt 4, 3 at bt 5; pools that
 * hold two or three of them, so rows wait for ring blocks too. */
static void test_soak_rings(void **state) {
    (void)state;
    run_soak(4, 24, 31337, 10, 0);
    run_soak(5, 19, 4711, 7, 0);
    run_soak(4, 24, 2718, 10, 1); /* every layer in rings */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_soak_bt4),
        cmocka_unit_test(test_soak_bt5),
        cmocka_unit_test(test_soak_bt16),
        cmocka_unit_test(test_soak_rings),
    };
    return cmocka_run_group_tests_name("kv_soak", tests, NULL, NULL);
}
