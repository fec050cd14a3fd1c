/*
 * The KV layer's invariants, one by one: the budget is a comparison and
 * refuses what can never fit (DESIGN 3, docs/reliability.md 38); the cursor is the
 * one truth and an adopted prefix seeds it (DESIGN 4); every way a row ends
 * returns its blocks, at any stage and twice (DESIGN 5, docs/reliability.md 40);
 * nobody evicts what a row reads or a pin holds, and no refcount goes
 * negative (docs/reliability.md 42). fx_kv_check runs after every step.
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
#include "kv/kv_impl.h" /* to corrupt state on purpose */

#define OK(call)                                                              \
    do {                                                                      \
        fx_error e_;                                                          \
        fx_status s_ = (call);                                                \
        if (s_ != FX_OK) fail_msg("%s: %s", #call, e_.message);               \
    } while (0)

/* Every test checks the whole accounting after every step. */
static void check(const fx_kv *kv) {
    fx_error err;
    if (fx_kv_check(kv, &err) != FX_OK) fail_msg("%s", err.message);
}

static fx_hparams tiny_hp(void) {
    fx_hparams hp;
    memset(&hp, 0, sizeof hp);
    hp.n_layer = 2;
    hp.n_head_kv = 1;
    hp.head_dim = 4;
    hp.n_head = 1;
    return hp;
}

typedef struct fixture {
    fx_alloc alloc;
    fx_hparams hp;
    fx_kv *kv;
} fixture;

static void open_kv(fixture *fx, uint32_t n_blocks, uint32_t bt) {
    fx_alloc_init(&fx->alloc, NULL);
    fx->hp = tiny_hp();
    fx_kv_params p = {.n_blocks = n_blocks, .block_tokens = bt};
    OK(fx_kv_create(&fx->alloc, &fx->hp, &p, &fx->kv, &e_));
    check(fx->kv);
}

static fx_kv_stats stats(const fx_kv *kv) {
    fx_kv_stats st;
    fx_kv_stats_get(kv, &st);
    return st;
}

/* Nothing held by rows or pins, nothing reserved: what every ended row
 * must leave behind. */
static void assert_baseline(const fx_kv *kv) {
    check(kv);
    fx_kv_stats st = stats(kv);
    assert_int_equal(st.row, 0);
    assert_int_equal(st.pinned, 0);
    assert_int_equal(st.reserved, 0);
    assert_int_equal(st.free + st.cached, st.total);
    assert_int_equal(st.available, st.total);
}

static void seq(int32_t *t, uint32_t n, int32_t base) {
    for (uint32_t i = 0; i < n; i++) t[i] = base + (int32_t)i;
}

/* Admits and runs a lease over tokens[0, n_run) (prefill + "decode"),
 * exactly as the batcher will: prepare, read the cursor, advance. */
static void run_to(fx_kv_lease *l, uint32_t n_run, uint32_t chunk) {
    while (fx_kv_lease_cursor(l) < n_run) {
        uint32_t n = n_run - fx_kv_lease_cursor(l);
        if (n > chunk) n = chunk;
        OK(fx_kv_lease_prepare(l, n, &e_));
        fx_kv_view v = fx_kv_lease_view(l);
        assert_true((uint64_t)v.n_blocks * v.block_tokens >=
                    (uint64_t)fx_kv_lease_cursor(l) + n);
        OK(fx_kv_lease_advance(l, n, &e_));
        check(l->kv);
    }
}

static void admit(fx_kv *kv, fx_kv_lease *l, const int32_t *prompt,
                  uint32_t n_prompt, uint32_t n_positions, fx_kv_fit want) {
    fx_kv_fit fit;
    OK(fx_kv_lease_admit(l, prompt, n_prompt, n_positions, &fit, &e_));
    assert_int_equal(fit, want);
    check(kv);
}

/* One whole row: admit, run everything, publish, release, free. */
static void whole_row(fx_kv *kv, const int32_t *tokens, uint32_t n_prompt,
                      uint32_t n_total) {
    fx_kv_lease l;
    OK(fx_kv_lease_init(kv, &l, FX_KV_PAGED, 64, &e_));
    admit(kv, &l, tokens, n_prompt, n_total, FX_KV_NOW);
    run_to(&l, n_total, 3);
    OK(fx_kv_lease_publish(&l, tokens, n_total, &e_));
    check(kv);
    OK(fx_kv_lease_release(&l, &e_));
    check(kv);
    fx_kv_lease_free(&l);
    check(kv);
}

static void test_create(void **state) {
    (void)state;
    fixture fx;
    fx_alloc_init(&fx.alloc, NULL);
    fx.hp = tiny_hp();
    fx_kv_params p = {.n_blocks = 0, .block_tokens = 0};
    fx_error err;
    assert_int_equal(fx_kv_create(&fx.alloc, &fx.hp, &p, &fx.kv, &err),
                     FX_ERR_INVALID_ARG);
    assert_null(fx.kv);
    p.n_blocks = UINT32_MAX;
    assert_int_equal(fx_kv_create(&fx.alloc, &fx.hp, &p, &fx.kv, &err),
                     FX_ERR_INVALID_ARG);
    p.n_blocks = 3;
    assert_int_equal(fx_kv_create(&fx.alloc, &fx.hp, &p, &fx.kv, &err), FX_OK);
    assert_int_equal(fx_kv_block_tokens(fx.kv), 16);
    assert_int_equal(fx_kv_total_blocks(fx.kv), 3);
    assert_int_equal(fx_kv_blocks_for(fx.kv, 0), 0);
    assert_int_equal(fx_kv_blocks_for(fx.kv, 16), 1);
    assert_int_equal(fx_kv_blocks_for(fx.kv, 17), 2);
    assert_null(fx_kv_block_data(fx.kv, 3));
    /* Run r of every block side by side (model.h): block b's first run
     * one run after block b-1's, a block's runs n_blocks runs apart. */
    assert_int_equal((const float *)fx_kv_block_data(fx.kv, 1) -
                         (const float *)fx_kv_block_data(fx.kv, 0),
                     (ptrdiff_t)(16 * fx.hp.head_dim));
    assert_int_equal(fx_kv_run_stride(fx.kv), 3 * 16 * fx.hp.head_dim);
    assert_baseline(fx.kv);
    fx_kv_free(fx.kv);
    fx_kv_free(NULL);
    /* A budget in bytes buys whole blocks, bookkeeping included. */
    size_t bytes = fx_kv_block_elems(&fx.hp, 16) * sizeof(float);
    assert_int_equal(fx_kv_blocks_for_bytes(&fx.hp, 16, FX_KV_DTYPE_F32, bytes), 0);
    /* 1024 bytes of KV + 124 of bookkeeping per block */
    assert_int_equal(fx_kv_blocks_for_bytes(&fx.hp, 16, FX_KV_DTYPE_F32, 10 * bytes), 8);
}

/* An F16 pool: the same layout in elements at 2 bytes each, so half the
 * bytes a block and more blocks for a budget; leases' views say so, paged
 * and contiguous; an unknown dtype is refused. */
static void test_f16_pool(void **state) {
    (void)state;
    fixture fx;
    fx_alloc_init(&fx.alloc, NULL);
    fx.hp = tiny_hp();
    fx_kv_params p = {.n_blocks = 3, .block_tokens = 16,
                      .dtype = FX_KV_DTYPE_F16};
    OK(fx_kv_create(&fx.alloc, &fx.hp, &p, &fx.kv, &e_));
    assert_int_equal(fx_kv_dtype_of(fx.kv), FX_KV_DTYPE_F16);
    assert_int_equal((const uint16_t *)fx_kv_block_data(fx.kv, 1) -
                         (const uint16_t *)fx_kv_block_data(fx.kv, 0),
                     (ptrdiff_t)(16 * fx.hp.head_dim));
    assert_int_equal(fx_kv_run_stride(fx.kv), 3 * 16 * fx.hp.head_dim);
    int32_t tokens[20];
    seq(tokens, 20, 5);
    fx_kv_lease paged, contig;
    OK(fx_kv_lease_init(fx.kv, &paged, FX_KV_PAGED, 64, &e_));
    OK(fx_kv_lease_init(fx.kv, &contig, FX_KV_CONTIGUOUS, 20, &e_));
    admit(fx.kv, &paged, tokens, 20, 20, FX_KV_NOW);
    admit(fx.kv, &contig, tokens, 20, 20, FX_KV_NOW);
    run_to(&paged, 20, 7);
    run_to(&contig, 20, 20);
    assert_int_equal(fx_kv_lease_view(&paged).dtype, FX_KV_DTYPE_F16);
    assert_int_equal(fx_kv_lease_view(&contig).dtype, FX_KV_DTYPE_F16);
    OK(fx_kv_lease_release(&paged, &e_));
    OK(fx_kv_lease_release(&contig, &e_));
    fx_kv_lease_free(&paged);
    fx_kv_lease_free(&contig);
    assert_baseline(fx.kv);
    fx_kv_free(fx.kv);
    /* 10 F32 blocks' KV bytes: 512 bytes of KV + 124 of bookkeeping per
     * F16 block buy 16 (8 at F32: test_create). */
    const size_t bytes = fx_kv_block_elems(&fx.hp, 16) * sizeof(float);
    assert_int_equal(
        fx_kv_blocks_for_bytes(&fx.hp, 16, FX_KV_DTYPE_F16, 10 * bytes), 16);
    assert_int_equal(fx_kv_block_bytes(&fx.hp, 16, FX_KV_DTYPE_F32) -
                         fx_kv_block_bytes(&fx.hp, 16, FX_KV_DTYPE_F16),
                     bytes / 2);
    p.dtype = (fx_kv_dtype)2;
    fx_error err;
    assert_int_equal(fx_kv_create(&fx.alloc, &fx.hp, &p, &fx.kv, &err),
                     FX_ERR_INVALID_ARG);
}

/* The block data: zeroed, on a 2 MiB boundary when it is that big (huge
 * pages asked for: core.h, fx_malloc_huge), on a cache line when small;
 * fx_malloc_huge refuses 0 and sizes it cannot pad. */
static void test_data_placement(void **state) {
    (void)state;
    fx_alloc alloc;
    fx_alloc_init(&alloc, NULL);
    const fx_hparams hp = tiny_hp();
    const size_t block_bytes = fx_kv_block_elems(&hp, 16) * sizeof(float);
    const uint32_t sizes[] = {3, (uint32_t)(((size_t)5 << 20) / block_bytes)};
    for (int i = 0; i < 2; i++) {
        fx_kv_params p = {.n_blocks = sizes[i], .block_tokens = 16};
        fx_kv *kv;
        fx_error err;
        assert_int_equal(fx_kv_create(&alloc, &hp, &p, &kv, &err), FX_OK);
        const float *d = fx_kv_block_data(kv, 0);
        const uintptr_t align = i == 0 ? 64 : (uintptr_t)2 << 20;
        assert_int_equal((uintptr_t)d % align, 0);
        /* Every run of every block: the whole pool, block 0's first run
         * on. */
        const size_t runs = (size_t)hp.n_layer * 2 * hp.n_head_kv;
        const size_t run_floats = 16 * hp.head_dim;
        assert_int_equal(fx_kv_run_stride(kv), sizes[i] * run_floats);
        for (uint32_t b = 0; b < sizes[i]; b++) {
            const float *blk = fx_kv_block_data(kv, b);
            for (size_t r = 0; r < runs; r++)
                for (size_t f = 0; f < run_floats; f++)
                    assert_true(blk[r * fx_kv_run_stride(kv) + f] == 0.0f);
        }
        fx_kv_free(kv);
    }
    void *raw = &alloc;
    assert_null(fx_malloc_huge(&alloc, 0, &raw));
    assert_null(raw);
    assert_null(fx_malloc_huge(&alloc, SIZE_MAX - 100, &raw));
    assert_null(raw);
}

/* docs/reliability.md 38 and DESIGN 3: what can never fit is reported as such,
 * what does not fit now waits, and a refused admission changes nothing. */
static void test_budget(void **state) {
    (void)state;
    fixture fx;
    open_kv(&fx, 8, 4);
    fx_kv *kv = fx.kv;
    assert_int_equal(fx_kv_fit_blocks(kv, 9), FX_KV_NEVER);
    assert_int_equal(fx_kv_fit_blocks(kv, 8), FX_KV_NOW);
    int32_t t[40];
    seq(t, 40, 1);
    fx_kv_lease big, a, b;
    OK(fx_kv_lease_init(kv, &big, FX_KV_PAGED, 40, &e_));
    admit(kv, &big, t, 10, 33, FX_KV_NEVER); /* 9 blocks > 8 */
    assert_baseline(kv);
    OK(fx_kv_lease_release(&big, &e_)); /* refused at submit: still one exit */
    fx_kv_lease_free(&big);

    OK(fx_kv_lease_init(kv, &a, FX_KV_PAGED, 40, &e_));
    OK(fx_kv_lease_init(kv, &b, FX_KV_PAGED, 40, &e_));
    admit(kv, &a, t, 10, 20, FX_KV_NOW); /* reserves 5 */
    assert_int_equal(stats(kv).reserved, 5);
    assert_int_equal(stats(kv).available, 3);
    assert_int_equal(fx_kv_fit_blocks(kv, 4), FX_KV_LATER);
    admit(kv, &b, t + 20, 10, 16, FX_KV_LATER); /* needs 4 */
    assert_int_equal(b.state, FX_KV_LEASE_IDLE);
    assert_int_equal(stats(kv).reserved, 5);
    /* Drawing within the reservation moves reserved to row, not more. */
    run_to(&a, 20, 7);
    assert_int_equal(stats(kv).row, 5);
    assert_int_equal(stats(kv).reserved, 0);
    assert_int_equal(stats(kv).available, 3);
    /* Past the reservation a row may take only what nobody was promised. */
    fx_error err;
    assert_int_equal(fx_kv_lease_prepare(&a, 12, &err), FX_OK);
    assert_int_equal(stats(kv).available, 0);
    assert_int_equal(fx_kv_lease_prepare(&a, 16, &err), FX_ERR_TOO_LARGE);
    check(kv);
    OK(fx_kv_lease_release(&a, &e_));
    admit(kv, &b, t + 20, 10, 16, FX_KV_NOW);
    OK(fx_kv_lease_release(&b, &e_));
    fx_kv_lease_free(&a);
    fx_kv_lease_free(&b);
    assert_baseline(kv);
    fx_kv_free(kv);
}

/* A reservation is honoured even when every block is cached: the draws
 * evict, and cached blocks a row adopts are paid for at admission. */
static void test_reservation_evicts(void **state) {
    (void)state;
    fixture fx;
    open_kv(&fx, 6, 4);
    fx_kv *kv = fx.kv;
    int32_t t[24];
    seq(t, 24, 100);
    whole_row(kv, t, 24, 24); /* fills the tree: 6 cached blocks */
    assert_int_equal(stats(kv).cached, 6);
    assert_int_equal(stats(kv).free, 0);
    assert_int_equal(stats(kv).available, 6);
    /* Adopting 2 cached blocks costs 2, the other 3 of 5 cost 3: fits. */
    fx_kv_lease a, b;
    OK(fx_kv_lease_init(kv, &a, FX_KV_PAGED, 24, &e_));
    OK(fx_kv_lease_init(kv, &b, FX_KV_PAGED, 24, &e_));
    admit(kv, &a, t, 9, 20, FX_KV_NOW);
    assert_int_equal(fx_kv_lease_cursor(&a), 8);
    assert_int_equal(fx_kv_lease_adopted_tokens(&a), 8);
    assert_int_equal(stats(kv).available, 1);
    int32_t other[8];
    seq(other, 8, 500);
    admit(kv, &b, other, 4, 8, FX_KV_LATER);
    admit(kv, &b, other, 4, 4, FX_KV_NOW);
    run_to(&b, 4, 4);
    run_to(&a, 20, 5); /* evicts the cached tail, leaf first */
    assert_int_equal(stats(kv).row, 6);
    assert_int_equal(stats(kv).cached, 0);
    OK(fx_kv_lease_release(&a, &e_));
    OK(fx_kv_lease_release(&b, &e_));
    fx_kv_lease_free(&a);
    fx_kv_lease_free(&b);
    assert_baseline(kv);
    fx_kv_free(kv);
}

/* DESIGN 4: an adopted prefix seeds the cursor; whole blocks only, and a
 * fully cached prompt still recomputes its last token. */
static void test_adoption_seeds_cursor(void **state) {
    (void)state;
    fixture fx;
    open_kv(&fx, 16, 4);
    fx_kv *kv = fx.kv;
    int32_t t[16];
    seq(t, 16, 7);
    whole_row(kv, t, 12, 14); /* publishes 3 full blocks (12 of 14) */
    assert_int_equal(fx_kv_match(kv, t, 16, 100), 3);
    assert_int_equal(fx_kv_adoptable_blocks(kv, 8), 1);
    assert_int_equal(fx_kv_adoptable_blocks(kv, 9), 2);
    assert_int_equal(fx_kv_adoptable_blocks(kv, 0), 0);
    struct { uint32_t prompt, cursor; } cases[] = {
        {8, 4}, {9, 8}, {12, 8}, {13, 12}, {16, 12}, {3, 0}, {1, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        fx_kv_lease l;
        OK(fx_kv_lease_init(kv, &l, FX_KV_PAGED, 32, &e_));
        admit(kv, &l, t, cases[i].prompt, 20, FX_KV_NOW);
        assert_int_equal(fx_kv_lease_cursor(&l), cases[i].cursor);
        /* The cursor is strictly inside the prompt: the last prompt token
         * always runs, so the row gets logits to sample from. */
        assert_true(fx_kv_lease_cursor(&l) < cases[i].prompt);
        /* The shared blocks are the tree's, refcount 1 + this lease. */
        for (uint32_t b = 0; b < l.adopted; b++)
            assert_int_equal(fx_kv_block_refcount(kv, l.table[b]), 2);
        run_to(&l, 20, 4);
        OK(fx_kv_lease_release(&l, &e_));
        fx_kv_lease_free(&l);
        assert_baseline(kv);
    }
    /* A different token in block 2 matches only blocks 0 and 1. */
    t[9] = 999;
    assert_int_equal(fx_kv_match(kv, t, 16, 100), 2);
    assert_int_equal(fx_kv_match(kv, t, 16, 1), 1);
    assert_int_equal(fx_kv_match(kv, t, 7, 100), 1);
    fx_kv_free(kv);
}

/* docs/reliability.md 40 and DESIGN 5: the one exit path (publish, release) before
 * admission, right after it, mid-prefill, mid-decode, finished, after a
 * publish -- blocks back to baseline each time, exactly the written full
 * blocks cached -- and a second release is a status, not a double free. */
static void test_release_any_stage(void **state) {
    (void)state;
    fixture fx;
    open_kv(&fx, 12, 4);
    fx_kv *kv = fx.kv;
    int32_t t[40];
    seq(t, 40, 3);
    fx_kv_stats base = stats(kv);
    /* Positions written at each stage, and so full blocks published. */
    static const uint32_t written[6] = {0, 0, 10, 25, 30, 30};
    for (int stage = 0; stage < 6; stage++) {
        fx_kv_lease l;
        OK(fx_kv_lease_init(kv, &l, FX_KV_PAGED, 40, &e_));
        if (stage >= 1) admit(kv, &l, t, 18, 30, FX_KV_NOW);
        if (stage >= 2) run_to(&l, 10, 10);       /* mid-prefill */
        if (stage >= 3) run_to(&l, 25, 1);        /* mid-decode */
        if (stage == 4) run_to(&l, 30, 1);        /* finished */
        if (stage == 5) {
            OK(fx_kv_lease_publish(&l, t, 25, &e_)); /* mid-life publish */
            check(kv);
            run_to(&l, 30, 1); /* decode after a publish */
        }
        /* The one exit path, whatever the stage: publish what was
         * written (nothing, before admission), then release. */
        OK(fx_kv_lease_publish(&l, t, 40, &e_));
        assert_int_equal(stats(kv).tree_nodes, written[stage] / 4);
        OK(fx_kv_lease_release(&l, &e_));
        assert_baseline(kv);
        fx_error err;
        assert_int_equal(fx_kv_lease_release(&l, &err), FX_ERR_INVALID_ARG);
        assert_non_null(strstr(err.message, "twice"));
        assert_int_equal(fx_kv_lease_prepare(&l, 1, &err), FX_ERR_INVALID_ARG);
        assert_int_equal(fx_kv_lease_publish(&l, t, 40, &err), FX_ERR_INVALID_ARG);
        assert_baseline(kv);
        fx_kv_lease_free(&l);
        fx_kv_lease_free(&l); /* freed twice: a no-op */
        assert_int_equal(fx_kv_lease_release(&l, &err), FX_ERR_INVALID_ARG);
        assert_baseline(kv);
        /* Evicting everything gives the exact starting pool back. */
        fx_kv_evict(kv, UINT32_MAX, NULL);
        fx_kv_stats now = stats(kv);
        assert_int_equal(now.free, base.free);
        assert_int_equal(now.tree_nodes, 0);
        for (uint32_t b = 0; b < 12; b++)
            assert_int_equal(fx_kv_block_refcount(kv, b), 0);
    }
    fx_kv_free(kv);
}

/* docs/reliability.md 42: a prefix a row is using is never evicted, nor a pinned
 * one; a refcount never goes below zero -- the attempt is a status. */
static void test_no_eviction_under_readers(void **state) {
    (void)state;
    fixture fx;
    open_kv(&fx, 10, 4);
    fx_kv *kv = fx.kv;
    int32_t t[16];
    seq(t, 16, 40);
    whole_row(kv, t, 16, 16); /* 4 cached blocks */
    fx_kv_lease reader;
    OK(fx_kv_lease_init(kv, &reader, FX_KV_PAGED, 32, &e_));
    admit(kv, &reader, t, 13, 16, FX_KV_NOW); /* adopts 3 */
    uint32_t evicted;
    fx_kv_evict(kv, 100, &evicted);
    assert_int_equal(evicted, 1); /* only the unshared 4th block */
    check(kv);
    assert_int_equal(fx_kv_match(kv, t, 16, 100), 3);
    /* Pinned and read at once, then only pinned: still there. */
    fx_kv_pin pin;
    fx_kv_fit fit;
    OK(fx_kv_pin_prefix(kv, t, 8, &pin, &fit, &e_));
    assert_int_equal(fit, FX_KV_NOW);
    assert_int_equal(pin.n_blocks, 2);
    check(kv);
    OK(fx_kv_lease_release(&reader, &e_));
    check(kv);
    fx_kv_evict(kv, 100, &evicted);
    assert_int_equal(evicted, 1); /* block 3 of the path; 1 and 2 pinned */
    assert_int_equal(stats(kv).pinned, 2);
    assert_int_equal(fx_kv_match(kv, t, 16, 100), 2);
    OK(fx_kv_unpin(kv, &pin, &e_));
    fx_error err;
    assert_int_equal(fx_kv_unpin(kv, &pin, &err), FX_ERR_INVALID_ARG);
    assert_baseline(kv);
    fx_kv_evict(kv, 100, &evicted);
    assert_int_equal(evicted, 2);
    /* A stale copy of a released lease: its decrements find refcount 0
     * and report it instead of wrapping. */
    fx_kv_lease l, stale;
    OK(fx_kv_lease_init(kv, &l, FX_KV_PAGED, 16, &e_));
    admit(kv, &l, t, 8, 8, FX_KV_NOW);
    run_to(&l, 8, 8);
    stale = l;
    OK(fx_kv_lease_release(&l, &e_));
    assert_int_equal(fx_kv_lease_release(&stale, &err), FX_ERR_INTERNAL);
    assert_non_null(strstr(err.message, "refcount 0"));
    for (uint32_t b = 0; b < 10; b++)
        assert_true(fx_kv_block_refcount(kv, b) < 2);
    fx_kv_lease_free(&l);
    assert_baseline(kv);
    fx_kv_free(kv);
}

/* Eviction takes leaves, least recently used first, and a parent becomes
 * evictable only once its children are gone. */
static void test_lru_leaves(void **state) {
    (void)state;
    fixture fx;
    open_kv(&fx, 16, 2);
    fx_kv *kv = fx.kv;
    int32_t a[7] = {1, 2, 3, 4, 5, 6, 0}, b[6] = {1, 2, 3, 4, 9, 9},
            c[4] = {7, 7, 7, 7};
    whole_row(kv, a, 6, 6);
    whole_row(kv, b, 6, 6); /* shares a's first two blocks */
    whole_row(kv, c, 4, 4);
    assert_int_equal(stats(kv).tree_nodes, 3 + 1 + 2);
    /* Use all of a again (a 7-token prompt adopts its 3 blocks): now b's
     * leaf is the least recently used, then c's. */
    fx_kv_lease l;
    OK(fx_kv_lease_init(kv, &l, FX_KV_PAGED, 8, &e_));
    admit(kv, &l, a, 7, 7, FX_KV_NOW);
    assert_int_equal(fx_kv_lease_cursor(&l), 6);
    uint32_t evicted;
    fx_kv_evict(kv, 1, &evicted); /* b's leaf, the oldest */
    assert_int_equal(evicted, 1);
    assert_int_equal(fx_kv_match(kv, b, 6, 9), 2);
    assert_int_equal(fx_kv_match(kv, c, 4, 9), 2);
    fx_kv_evict(kv, 1, NULL); /* c's leaf */
    assert_int_equal(fx_kv_match(kv, c, 4, 9), 1);
    fx_kv_evict(kv, 1, NULL); /* then c's first block, now a leaf itself */
    assert_int_equal(fx_kv_match(kv, c, 4, 9), 0);
    /* All that is left is a's path, which a row holds: nothing goes,
     * however much is asked. */
    fx_kv_evict(kv, 100, &evicted);
    assert_int_equal(evicted, 0);
    assert_int_equal(fx_kv_match(kv, a, 6, 9), 3);
    check(kv);
    OK(fx_kv_lease_release(&l, &e_));
    fx_kv_lease_free(&l);
    check(kv);
    fx_kv_evict(kv, 1, NULL); /* released: a's leaf, then up its path */
    assert_int_equal(fx_kv_match(kv, a, 6, 9), 2);
    fx_kv_evict(kv, 2, NULL);
    assert_int_equal(stats(kv).tree_nodes, 0);
    check(kv);
    fx_kv_free(kv);
}

/* Publish: full written blocks only, present blocks reused not duplicated,
 * tokens that contradict the lease's history refused. */
static void test_publish(void **state) {
    (void)state;
    fixture fx;
    open_kv(&fx, 20, 4);
    fx_kv *kv = fx.kv;
    int32_t t[20];
    seq(t, 20, 60);
    /* Two rows with the same prompt, both admitted before either
     * publishes: each computes its own copy. */
    fx_kv_lease x, y;
    OK(fx_kv_lease_init(kv, &x, FX_KV_PAGED, 20, &e_));
    OK(fx_kv_lease_init(kv, &y, FX_KV_PAGED, 20, &e_));
    admit(kv, &x, t, 14, 18, FX_KV_NOW);
    admit(kv, &y, t, 14, 18, FX_KV_NOW);
    run_to(&x, 14, 14);
    run_to(&y, 17, 5);
    /* Cursor 14: 3 full blocks, whatever n_tokens says. */
    OK(fx_kv_lease_publish(&x, t, 20, &e_));
    assert_int_equal(stats(kv).tree_nodes, 3);
    uint32_t y_own = y.table[0];
    OK(fx_kv_lease_publish(&y, t, 17, &e_));
    check(kv);
    assert_int_equal(stats(kv).tree_nodes, 4); /* 3 reused + y's 4th */
    assert_int_equal(y.table[0], x.table[0]);  /* y moved onto x's copy */
    assert_int_equal(fx_kv_block_refcount(kv, y_own), 0);
    assert_int_equal(fx_kv_block_refcount(kv, x.table[0]), 3);
    /* Publishing again is idempotent; wrong tokens are refused whole. */
    OK(fx_kv_lease_publish(&y, t, 17, &e_));
    assert_int_equal(stats(kv).tree_nodes, 4);
    int32_t wrong[20];
    memcpy(wrong, t, sizeof wrong);
    wrong[5] = -3;
    fx_error err;
    assert_int_equal(fx_kv_lease_publish(&y, wrong, 17, &err), FX_ERR_INVALID_ARG);
    check(kv);
    /* y keeps decoding into its own, unshared block after publishing. */
    run_to(&y, 18, 1);
    OK(fx_kv_lease_release(&x, &e_));
    OK(fx_kv_lease_release(&y, &e_));
    fx_kv_lease_free(&x);
    fx_kv_lease_free(&y);
    assert_baseline(kv);
    assert_int_equal(stats(kv).cached, 4);
    fx_kv_free(kv);
}

/* Pins: cost what they take from the budget, survive eviction, nest. */
static void test_pins(void **state) {
    (void)state;
    fixture fx;
    open_kv(&fx, 6, 4);
    fx_kv *kv = fx.kv;
    int32_t sys[12];
    seq(sys, 12, 200);
    /* The fx_lease flow: run the prefix as a row, publish, pin, release. */
    fx_kv_lease l;
    OK(fx_kv_lease_init(kv, &l, FX_KV_PAGED, 12, &e_));
    admit(kv, &l, sys, 12, 12, FX_KV_NOW);
    run_to(&l, 12, 12);
    OK(fx_kv_lease_publish(&l, sys, 12, &e_));
    fx_kv_pin p1, p2;
    fx_kv_fit fit;
    assert_int_equal(stats(kv).available, 3);
    OK(fx_kv_pin_prefix(kv, sys, 12, &p1, &fit, &e_));
    assert_int_equal(fit, FX_KV_NOW);
    assert_int_equal(stats(kv).available, 3); /* lease-held: free to pin */
    OK(fx_kv_lease_release(&l, &e_));
    fx_kv_lease_free(&l);
    check(kv);
    assert_int_equal(stats(kv).pinned, 3);
    assert_int_equal(stats(kv).available, 3);
    OK(fx_kv_pin_prefix(kv, sys, 8, &p2, &fit, &e_)); /* nested */
    assert_int_equal(p2.n_blocks, 2);
    fx_kv_evict(kv, 100, NULL);
    assert_int_equal(fx_kv_match(kv, sys, 12, 9), 3);
    OK(fx_kv_unpin(kv, &p1, &e_));
    check(kv);
    fx_kv_evict(kv, 100, NULL);
    assert_int_equal(fx_kv_match(kv, sys, 12, 9), 2);
    OK(fx_kv_unpin(kv, &p2, &e_));
    assert_baseline(kv);
    /* Pinning cached blocks takes budget: with everything reserved it
     * must wait. */
    whole_row(kv, sys, 12, 12);
    fx_kv_lease r;
    int32_t other[12];
    seq(other, 12, 900);
    OK(fx_kv_lease_init(kv, &r, FX_KV_PAGED, 24, &e_));
    admit(kv, &r, other, 12, 24, FX_KV_NOW); /* reserves all 6 */
    OK(fx_kv_pin_prefix(kv, sys, 12, &p1, &fit, &e_));
    assert_int_equal(fit, FX_KV_LATER);
    assert_int_equal(p1.active, 0);
    check(kv);
    OK(fx_kv_lease_release(&r, &e_));
    fx_kv_lease_free(&r);
    /* Nothing cached: a pin of zero blocks, still paired. */
    fx_kv_evict(kv, 100, NULL);
    OK(fx_kv_pin_prefix(kv, sys, 12, &p1, &fit, &e_));
    assert_int_equal(fit, FX_KV_NOW);
    assert_int_equal(p1.n_blocks, 0);
    OK(fx_kv_unpin(kv, &p1, &e_));
    assert_baseline(kv);
    fx_kv_free(kv);
}

static void test_contiguous_and_bounds(void **state) {
    (void)state;
    fixture fx;
    open_kv(&fx, 4, 4);
    fx_kv *kv = fx.kv;
    int32_t t[40];
    seq(t, 40, 1);
    fx_kv_lease c;
    OK(fx_kv_lease_init(kv, &c, FX_KV_CONTIGUOUS, 40, &e_));
    admit(kv, &c, t, 10, 40, FX_KV_NOW); /* outside the pool */
    fx_kv_view v = fx_kv_lease_view(&c);
    assert_int_equal(v.n_blocks, 1);
    assert_int_equal(v.block_tokens, 40);
    run_to(&c, 40, 9);
    fx_error err;
    assert_int_equal(fx_kv_lease_prepare(&c, 1, &err), FX_ERR_NO_ROOM);
    OK(fx_kv_lease_publish(&c, t, 40, &e_));
    assert_baseline(kv);
    assert_int_equal(stats(kv).tree_nodes, 0);
    OK(fx_kv_lease_release(&c, &e_));
    fx_kv_lease_free(&c);

    fx_kv_lease p;
    OK(fx_kv_lease_init(kv, &p, FX_KV_PAGED, 10, &e_));
    fx_kv_fit fit;
    assert_int_equal(fx_kv_lease_admit(&p, t, 11, 11, &fit, &err),
                     FX_ERR_INVALID_ARG); /* more than max_positions */
    assert_int_equal(fx_kv_lease_advance(&p, 1, &err), FX_ERR_INVALID_ARG);
    admit(kv, &p, t, 5, 10, FX_KV_NOW);
    assert_int_equal(fx_kv_lease_admit(&p, t, 5, 10, &fit, &err),
                     FX_ERR_INVALID_ARG); /* admitted twice */
    OK(fx_kv_lease_prepare(&p, 5, &e_));
    assert_int_equal(fx_kv_lease_advance(&p, 9, &err), FX_ERR_INVALID_ARG);
    OK(fx_kv_lease_advance(&p, 5, &e_));
    assert_int_equal(fx_kv_lease_prepare(&p, 6, &err), FX_ERR_NO_ROOM);
    check(kv);
    /* kv_free with a lease still live detaches it. */
    fx_kv_free(kv);
    fx_kv_lease_free(&p);
}

/* RELIABILITY G: every allocation the KV layer makes can fail, and each
 * failure is a status with nothing leaked (the sanitizer build checks the
 * "nothing leaked") and nothing half-registered. */
typedef struct failing {
    int calls, fail_at;
} failing;

static void *fa_malloc(void *user, size_t size) {
    failing *f = user;
    return ++f->calls == f->fail_at ? NULL : malloc(size);
}
static void *fa_realloc(void *user, void *ptr, size_t size) {
    failing *f = user;
    return ++f->calls == f->fail_at ? NULL : realloc(ptr, size);
}
static void fa_free(void *user, void *ptr) {
    (void)user;
    free(ptr);
}

static void test_allocation_failure(void **state) {
    (void)state;
    fx_hparams hp = tiny_hp();
    failing f = {0, 0};
    fx_allocator hooks = {fa_malloc, fa_realloc, fa_free, &f};
    fx_alloc alloc;
    assert_int_equal(fx_alloc_init(&alloc, &hooks), FX_OK);
    fx_kv_params p = {.n_blocks = 8, .block_tokens = 4};
    int failures = 0;
    for (int at = 1;; at++) {
        f.calls = 0;
        f.fail_at = at;
        fx_kv *kv = NULL;
        fx_error err;
        fx_status st = fx_kv_create(&alloc, &hp, &p, &kv, &err);
        if (st == FX_OK) {
            f.fail_at = 0;
            fx_kv_free(kv);
            break;
        }
        assert_int_equal(st, FX_ERR_NOMEM);
        assert_null(kv);
        failures++;
    }
    assert_true(failures >= 10);
    f.fail_at = 0;
    fx_kv *kv;
    OK(fx_kv_create(&alloc, &hp, &p, &kv, &e_));
    for (int layout = 0; layout < 2; layout++) {
        for (int at = 1; at <= 2; at++) {
            f.calls = 0;
            f.fail_at = at;
            fx_kv_lease l;
            fx_error err;
            assert_int_equal(fx_kv_lease_init(kv, &l, (fx_kv_layout)layout, 20, &err),
                             FX_ERR_NOMEM);
            fx_kv_lease_free(&l); /* a failed init frees as a no-op */
            assert_int_equal(stats(kv).leases, 0);
            assert_baseline(kv);
        }
    }
    f.fail_at = 0;
    fx_kv_free(kv);
}

/* The check is not vacuous: each kind of drift it exists to catch, made
 * on purpose, is reported (and undone). */
static void test_check_detects(void **state) {
    (void)state;
    fixture fx;
    open_kv(&fx, 8, 4);
    fx_kv *kv = fx.kv;
    int32_t t[12];
    seq(t, 12, 1);
    whole_row(kv, t, 12, 12); /* 3 cached blocks, one LRU leaf */
    fx_kv_lease l;
    OK(fx_kv_lease_init(kv, &l, FX_KV_PAGED, 12, &e_));
    admit(kv, &l, t, 5, 12, FX_KV_NOW); /* adopts 1, reserves 2 */
    run_to(&l, 6, 6);
    uint32_t b = l.table[0], leaf = kv->lru_head;
    assert_int_not_equal(leaf, KV_NIL);
    fx_error err;
#define EXPECT_CAUGHT(corrupt, undo)                                          \
    do {                                                                      \
        corrupt;                                                              \
        assert_int_equal(fx_kv_check(kv, &err), FX_ERR_INTERNAL);             \
        undo;                                                                 \
        check(kv);                                                            \
    } while (0)
    EXPECT_CAUGHT(kv->row_refs[b]++, kv->row_refs[b]--);
    EXPECT_CAUGHT(kv->count[KV_FREE]--, kv->count[KV_FREE]++);
    EXPECT_CAUGHT(kv->reserved++, kv->reserved--);
    EXPECT_CAUGHT(kv->in_lru[leaf] = 0, kv->in_lru[leaf] = 1);
    EXPECT_CAUGHT(kv->pins[l.table[1]]++, kv->pins[l.table[1]]--);
    EXPECT_CAUGHT(kv->pins[leaf]++, kv->pins[leaf]--);
    uint32_t f0 = kv->free_stack[0];
    EXPECT_CAUGHT(kv->free_stack[0] = b, kv->free_stack[0] = f0);
#undef EXPECT_CAUGHT
    OK(fx_kv_lease_release(&l, &e_));
    fx_kv_lease_free(&l);
    assert_baseline(kv);
    fx_kv_free(kv);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create),
        cmocka_unit_test(test_data_placement),
        cmocka_unit_test(test_f16_pool),
        cmocka_unit_test(test_budget),
        cmocka_unit_test(test_reservation_evicts),
        cmocka_unit_test(test_adoption_seeds_cursor),
        cmocka_unit_test(test_release_any_stage),
        cmocka_unit_test(test_no_eviction_under_readers),
        cmocka_unit_test(test_lru_leaves),
        cmocka_unit_test(test_publish),
        cmocka_unit_test(test_pins),
        cmocka_unit_test(test_contiguous_and_bounds),
        cmocka_unit_test(test_allocation_failure),
        cmocka_unit_test(test_check_detects),
    };
    return cmocka_run_group_tests_name("kv", tests, NULL, NULL);
}
