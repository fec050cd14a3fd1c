/*
 * The sliding layers' rings (lib/kv/ring.c), without a model:
 *   - what a row costs: Gemma-3-shaped KV bytes per row at 1k, 8k and 32k
 *     positions against every layer keeping every position;
 *   - a row holds at most its ring however long it runs, and a call longer
 *     than the ring was sized for is refused;
 *   - admission counts ring entitlements: LATER while others hold the
 *     ring pool, NEVER when one row's ring exceeds it;
 *   - publish hangs ring blocks on the tree, adoption goes only as deep as
 *     the tree has the window before, and eviction (of cached ring blocks
 *     or of their nodes) only shortens what can be adopted; a pin keeps
 *     the window before its end;
 *   - fx_kv_check catches a corrupted ring; a failed allocation of the
 *     ring pool or of a lease's ring is FX_ERR_NOMEM, nothing half made.
 * fx_kv_check runs after every step.
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
#include "fault_alloc.h"

#define OK(call)                                                              \
    do {                                                                      \
        fx_error e_;                                                          \
        fx_status s_ = (call);                                                \
        if (s_ != FX_OK) fail_msg("%s: %s", #call, e_.message);               \
    } while (0)

static void check(const fx_kv *kv) {
    fx_error err;
    if (fx_kv_check(kv, &err) != FX_OK) fail_msg("%s", err.message);
}

static fx_kv_stats stats(const fx_kv *kv) {
    fx_kv_stats st;
    fx_kv_stats_get(kv, &st);
    return st;
}

/* Two layers, the first sliding over 6 positions, the second full. */
static fx_hparams ring_hp(void) {
    fx_hparams hp;
    memset(&hp, 0, sizeof hp);
    hp.n_layer = 2;
    hp.n_head = hp.n_head_kv = 1;
    hp.head_dim = 4;
    hp.n_swa = 6;
    hp.swa_period = 2;
    return hp;
}

typedef struct fixture {
    fx_alloc alloc;
    fx_hparams hp;
    fx_kv *kv;
} fixture;

/* Block 4, calls of up to 2 positions: a ring of (6 + 2 - 2) / 4 + 2 = 3. */
enum { BT = 4, CALL = 2, RING = 3 };

static void open_ring(fixture *fx, uint32_t n_blocks, uint32_t n_ring) {
    fx_alloc_init(&fx->alloc, NULL);
    fx->hp = ring_hp();
    fx_kv_params p = {.n_blocks = n_blocks, .block_tokens = BT,
                      .ring_call = CALL, .n_ring_blocks = n_ring};
    OK(fx_kv_create(&fx->alloc, &fx->hp, &p, &fx->kv, &e_));
    assert_true(fx_kv_has_ring(fx->kv));
    assert_int_equal(fx->kv->ring_len, RING);
    check(fx->kv);
}

static void seq(int32_t *t, uint32_t n, int32_t first) {
    for (uint32_t i = 0; i < n; i++) t[i] = first + (int32_t)i;
}

/* What the batcher does for a row's positions [cursor, to): calls of up
 * to CALL positions, publishing the full blocks before each. */
static void run_to(fx_kv_lease *l, const int32_t *tokens, uint32_t to,
                   int publish) {
    while (fx_kv_lease_cursor(l) < to) {
        uint32_t n = to - fx_kv_lease_cursor(l);
        if (n > CALL) n = CALL;
        if (publish)
            OK(fx_kv_lease_publish(l, tokens, fx_kv_lease_cursor(l), &e_));
        OK(fx_kv_lease_prepare(l, n, &e_));
        OK(fx_kv_lease_advance(l, n, &e_));
        assert_true(l->ring_held <= RING);
        check(l->kv);
    }
}

static uint32_t admit(fx_kv *kv, fx_kv_lease *l, const int32_t *prompt,
                      uint32_t n_prompt, uint32_t n_positions, fx_kv_fit want) {
    fx_kv_fit fit;
    OK(fx_kv_lease_init(kv, l, FX_KV_PAGED, 64, &e_));
    OK(fx_kv_lease_admit(l, prompt, n_prompt, n_positions, &fit, &e_));
    assert_int_equal(fit, want);
    check(kv);
    return fx_kv_lease_cursor(l);
}

static void end_row(fx_kv_lease *l, const int32_t *tokens, uint32_t n) {
    fx_kv *kv = l->kv;
    OK(fx_kv_lease_publish(l, tokens, n, &e_));
    OK(fx_kv_lease_release(l, &e_));
    fx_kv_lease_free(l);
    check(kv);
}

static void test_row_bytes(void **state) {
    (void)state;
    /* Gemma 3 1B's KV shape: 26 layers, every sixth full, one KV head of
     * 256, a window of 512. */
    fx_hparams hp;
    memset(&hp, 0, sizeof hp);
    hp.n_layer = 26;
    hp.n_head = 4;
    hp.n_head_kv = 1;
    hp.head_dim = 256;
    hp.n_swa = 512;
    hp.swa_period = 6;
    const double full = 4.0 / 26, sliding = 22.0 / 26;
    const uint32_t call = 256, ctxs[] = {1024, 8192, 32768};
    for (int i = 0; i < 3; i++) {
        uint32_t n = ctxs[i];
        double naive = (double)n / 16 * (double)fx_kv_block_bytes(&hp, 16, FX_KV_DTYPE_F32);
        double ring = (double)fx_kv_row_bytes(&hp, 16, n, call, FX_KV_DTYPE_F32);
        /* The window plus one call, rounded out to blocks: no less than
         * the window, no more than window + call + two blocks. */
        double lo = naive * (full + sliding * 512 / n);
        double hi = naive * (full + sliding * (512 + call + 32) / n) * 1.001;
        print_message("gemma3-1b KV per row at %5u positions: %8.2f MiB "
                      "(every layer every position: %8.2f MiB, %.3f)\n",
                      n, ring / 1048576, naive / 1048576, ring / naive);
        assert_true(ring >= lo && ring <= hi);
        fx_kv_params p;
        fx_kv_plan(&hp, 16, n, call, FX_KV_DTYPE_F32, (uint64_t)(4 * ring), &p);
        assert_int_equal(p.ring_call, call);
        assert_int_equal(p.n_blocks, 4 * (n / 16));
        assert_int_equal(p.n_ring_blocks, 4 * ((512 + call - 2) / 16 + 2));
    }
    /* No ring where it would not save: a window as long as the context,
     * or no sliding layer. */
    fx_kv_params p;
    fx_kv_plan(&hp, 16, 512, call, FX_KV_DTYPE_F32, 1u << 30, &p);
    assert_int_equal(p.ring_call, 0);
    assert_int_equal(fx_kv_row_bytes(&hp, 16, 512, call, FX_KV_DTYPE_F32),
                     32 * fx_kv_block_bytes(&hp, 16, FX_KV_DTYPE_F32));
    /* Every layer sliding (Phi-3 mini's window of 2047): only the ring,
     * and blocks that are the tree's edges. */
    hp.swa_period = 0;
    hp.n_swa = 2047;
    fx_kv_plan(&hp, 16, 4096, call, FX_KV_DTYPE_F32, 1u << 30, &p);
    assert_int_equal(p.ring_call, call);
    double naive = 256.0 * (double)fx_kv_block_bytes(&hp, 16, FX_KV_DTYPE_F32);
    double ring = (double)fx_kv_row_bytes(&hp, 16, 4096, call, FX_KV_DTYPE_F32);
    print_message("every layer sliding over 2047, 4096 positions: %.3f of "
                  "every position\n", ring / naive);
    assert_true(ring >= naive * 2047 / 4096 &&
                ring <= naive * (2047 + call + 32) / 4096 * 1.001);
    hp.n_swa = 0;
    fx_kv_plan(&hp, 16, 8192, call, FX_KV_DTYPE_F32, 1u << 30, &p);
    assert_int_equal(p.ring_call, 0);
    assert_int_equal(p.n_blocks, fx_kv_blocks_for_bytes(&hp, 16, FX_KV_DTYPE_F32, 1u << 30));
}

static void test_ring_bounds_a_row(void **state) {
    (void)state;
    fixture fx;
    open_ring(&fx, 16, 8);
    fx_kv *kv = fx.kv;
    int32_t t[60];
    seq(t, 60, 1);
    fx_kv_lease l;
    admit(kv, &l, t, 3, 60, FX_KV_NOW);
    assert_int_equal(l.ring_cap, RING);
    assert_int_equal(stats(kv).ring_entitled, RING);
    /* A call longer than the ring holds the window for. */
    fx_error err;
    assert_int_equal(fx_kv_lease_prepare(&l, CALL + 1, &err), FX_ERR_INVALID_ARG);
    run_to(&l, t, 60, 0);
    assert_int_equal(l.ring_held, RING);
    assert_int_equal(stats(kv).ring_row, RING);
    /* 15 blocks of the full layer, 3 of the sliding one. */
    assert_int_equal(l.n_blocks, 15);
    OK(fx_kv_lease_release(&l, &e_));
    fx_kv_lease_free(&l);
    fx_kv_stats st = stats(kv);
    assert_int_equal(st.ring_free, 8);
    assert_int_equal(st.ring_entitled, 0);
    check(kv);
    fx_kv_free(kv);
}

static void test_ring_admission(void **state) {
    (void)state;
    fixture fx;
    open_ring(&fx, 64, 5);
    fx_kv *kv = fx.kv;
    int32_t a[40], b[40];
    seq(a, 40, 1);
    seq(b, 40, 100);
    fx_kv_lease la, lb, lc;
    admit(kv, &la, a, 3, 40, FX_KV_NOW); /* ring of 3 */
    assert_int_equal(fx_kv_fit_blocks(kv, 10), FX_KV_LATER);
    admit(kv, &lb, b, 3, 40, FX_KV_LATER); /* 3 + 3 > 5 */
    assert_int_equal(fx_kv_fit_blocks(kv, 2), FX_KV_NOW);
    admit(kv, &lc, b, 3, 8, FX_KV_NOW); /* two blocks: a ring of 2 */
    assert_int_equal(lc.ring_cap, 2);
    run_to(&la, a, 40, 1);
    run_to(&lc, b, 8, 1);
    /* Past its admission, a row takes only unpromised ring blocks. */
    fx_error err;
    assert_int_equal(fx_kv_lease_prepare(&lc, 2, &err), FX_ERR_TOO_LARGE);
    check(kv);
    OK(fx_kv_lease_release(&lc, &e_));
    fx_kv_lease_free(&lc);
    fx_kv_lease_free(&lb);
    OK(fx_kv_lease_release(&la, &e_));
    fx_kv_lease_free(&la);
    check(kv);
    fx_kv_free(kv);
    /* A pool smaller than one row's ring can never run that row. */
    open_ring(&fx, 64, 2);
    assert_int_equal(fx_kv_fit_blocks(fx.kv, 10), FX_KV_NEVER);
    admit(fx.kv, &la, a, 3, 40, FX_KV_NEVER);
    fx_kv_lease_free(&la);
    admit(fx.kv, &la, a, 3, 8, FX_KV_NOW);
    fx_kv_lease_free(&la);
    check(fx.kv);
    fx_kv_free(fx.kv);
}

static void test_ring_adoption(void **state) {
    (void)state;
    fixture fx;
    open_ring(&fx, 128, 32);
    fx_kv *kv = fx.kv;
    int32_t t[40], u[40];
    seq(t, 40, 1);
    fx_kv_lease l;
    /* Published at every block boundary: every block keeps its ring
     * block, so a row with the same prompt adopts all it may. */
    admit(kv, &l, t, 30, 30, FX_KV_NOW);
    run_to(&l, t, 30, 1);
    end_row(&l, t, 30);
    assert_int_equal(stats(kv).ring_cached, 7);
    assert_int_equal(admit(kv, &l, t, 30, 34, FX_KV_NOW), 28);
    /* Its window: blocks 5 and 6 (positions 23..27), held, not cached. */
    assert_int_equal(l.ring_held, 2);
    assert_int_equal(stats(kv).ring_cached, 5);
    run_to(&l, t, 34, 1);
    end_row(&l, t, 34);

    /* Published only at the end: just the ring's last blocks keep their
     * windows, so a prompt sharing 20 tokens adopts nothing... */
    fx_kv_evict(kv, UINT32_MAX, NULL);
    assert_int_equal(stats(kv).ring_cached, 0);
    admit(kv, &l, t, 30, 30, FX_KV_NOW);
    run_to(&l, t, 30, 0);
    end_row(&l, t, 30);
    memcpy(u, t, sizeof u);
    u[20] = 999;
    assert_int_equal(admit(kv, &l, u, 30, 30, FX_KV_NOW), 0);
    fx_kv_lease_free(&l);
    /* ...while the same prompt adopts up to the window the ring kept:
     * blocks 5 and 6 hold positions 20..27, the window of position 24. */
    assert_int_equal(admit(kv, &l, t, 30, 30, FX_KV_NOW), 28);
    fx_kv_lease_free(&l);

    /* Cached ring blocks go when the ring pool runs short, oldest first:
     * a row then adopts less, never wrong. */
    fx_kv_evict(kv, UINT32_MAX, NULL);
    admit(kv, &l, t, 30, 30, FX_KV_NOW);
    run_to(&l, t, 30, 1);
    end_row(&l, t, 30);
    assert_int_equal(stats(kv).ring_cached, 7);
    enum { N_OTHERS = 11, N_LONG = 9 };
    fx_kv_lease others[N_OTHERS];
    int32_t v[N_OTHERS][30];
    for (int i = 0; i < N_OTHERS; i++) seq(v[i], 30, 1000 * (i + 1));
    for (int i = 0; i < N_LONG; i++) {
        admit(kv, &others[i], v[i], 30, 30, FX_KV_NOW);
        run_to(&others[i], v[i], 30, 0);
    }
    /* 9 rows x 3 blocks of a 32-block pool that had 25 free: the 2
     * oldest cached ring blocks went, the window of position 28 (blocks
     * 5 and 6, cached last) is left... */
    assert_int_equal(stats(kv).ring_cached, 5);
    assert_int_equal(admit(kv, &l, t, 30, 30, FX_KV_NOW), 28);
    fx_kv_lease_free(&l);
    /* ...until two more rows take the last 5. */
    admit(kv, &others[N_LONG], v[N_LONG], 3, 12, FX_KV_NOW);
    run_to(&others[N_LONG], v[N_LONG], 12, 0);
    admit(kv, &others[N_LONG + 1], v[N_LONG + 1], 3, 8, FX_KV_NOW);
    run_to(&others[N_LONG + 1], v[N_LONG + 1], 8, 0);
    assert_int_equal(stats(kv).ring_cached, 0);
    for (int i = 0; i < N_OTHERS; i++) {
        OK(fx_kv_lease_release(&others[i], &e_));
        fx_kv_lease_free(&others[i]);
    }
    check(kv);
    assert_int_equal(admit(kv, &l, t, 30, 30, FX_KV_NOW), 0);
    fx_kv_lease_free(&l);
    check(kv);
    fx_kv_free(kv);
}

/* A pin keeps the window before its end, so rows continuing it adopt all
 * of it however short the ring pool runs; it costs entitlement room. */
static void test_ring_pins(void **state) {
    (void)state;
    fixture fx;
    open_ring(&fx, 128, 16);
    fx_kv *kv = fx.kv;
    int32_t t[30];
    seq(t, 30, 1);
    fx_kv_lease l;
    admit(kv, &l, t, 30, 30, FX_KV_NOW);
    run_to(&l, t, 30, 1);
    end_row(&l, t, 30);
    assert_int_equal(stats(kv).ring_cached, 7);
    fx_kv_pin pin;
    fx_kv_fit fit;
    OK(fx_kv_pin_prefix(kv, t, 28, &pin, &fit, &e_));
    assert_int_equal(fit, FX_KV_NOW);
    assert_int_equal(pin.n_blocks, 7);
    /* The window of position 28: blocks 5 and 6. */
    assert_int_equal(stats(kv).ring_pinned, 2);
    check(kv);
    fx_kv_lease rows[5];
    int32_t v[5][30];
    for (int i = 0; i < 4; i++) {
        seq(v[i], 30, 1000 * (i + 1));
        admit(kv, &rows[i], v[i], 30, 30, FX_KV_NOW);
        run_to(&rows[i], v[i], 30, 0);
    }
    /* 12 held + 2 pinned of 16: a fifth ring of 3 waits; three cached
     * blocks went to make room, the pinned ones stayed. */
    seq(v[4], 30, 9000);
    admit(kv, &rows[4], v[4], 30, 30, FX_KV_LATER);
    fx_kv_stats st = stats(kv);
    assert_int_equal(st.ring_cached, 2);
    assert_int_equal(st.ring_pinned, 2);
    OK(fx_kv_lease_release(&rows[3], &e_));
    assert_int_equal(admit(kv, &l, t, 29, 29, FX_KV_NOW), 28);
    /* Unpinned, the room is back: the fifth row runs, and a pin that
     * would leave the rings short waits, changing nothing. */
    OK(fx_kv_unpin(kv, &pin, &e_));
    assert_int_equal(stats(kv).ring_pinned, 0);
    OK(fx_kv_lease_admit(&rows[4], v[4], 30, 30, &fit, &e_));
    assert_int_equal(fit, FX_KV_NOW); /* 9 + 3 + 3 of 16 */
    OK(fx_kv_pin_prefix(kv, t, 28, &pin, &fit, &e_));
    assert_int_equal(fit, FX_KV_LATER); /* 15 + 2 > 16 */
    assert_false(pin.active);
    assert_int_equal(stats(kv).ring_pinned, 0);
    fx_kv_lease_free(&l);
    check(kv);
    for (int i = 0; i < 5; i++) fx_kv_lease_free(&rows[i]);
    check(kv);
    fx_kv_free(kv);
}

static void test_ring_check_detects(void **state) {
    (void)state;
    fixture fx;
    open_ring(&fx, 16, 8);
    fx_kv *kv = fx.kv;
    int32_t t[20];
    seq(t, 20, 1);
    fx_kv_lease l;
    admit(kv, &l, t, 20, 20, FX_KV_NOW);
    run_to(&l, t, 12, 1);
    OK(fx_kv_lease_publish(&l, t, 12, &e_));
    uint32_t b = l.ring[0], node = l.table[0];
    assert_true(b != KV_NIL && kv->node_ring[node] != KV_NIL);
    fx_error err;
#define EXPECT_CAUGHT(corrupt, undo)                                          \
    do {                                                                      \
        corrupt;                                                              \
        assert_int_equal(fx_kv_check(kv, &err), FX_ERR_INTERNAL);             \
        undo;                                                                 \
        check(kv);                                                            \
    } while (0)
    EXPECT_CAUGHT(kv->ring_refs[b]++, kv->ring_refs[b]--);
    EXPECT_CAUGHT(kv->ring_count[KV_FREE]--, kv->ring_count[KV_FREE]++);
    EXPECT_CAUGHT(kv->ring_entitled++, kv->ring_entitled--);
    EXPECT_CAUGHT(kv->ring_pinned++, kv->ring_pinned--);
    /* A block pinned off any pinned path (its class moves too). */
    EXPECT_CAUGHT((kv->ring_pins[b]++, kv->ring_pinned++),
                  (kv->ring_pins[b]--, kv->ring_pinned--));
    EXPECT_CAUGHT(l.ring_held++, l.ring_held--);
    uint32_t hung = kv->node_ring[node];
    EXPECT_CAUGHT(kv->node_ring[node] = KV_NIL, kv->node_ring[node] = hung);
    uint32_t f0 = kv->ring_free[0];
    EXPECT_CAUGHT(kv->ring_free[0] = b, kv->ring_free[0] = f0);
#undef EXPECT_CAUGHT
    OK(fx_kv_lease_release(&l, &e_));
    fx_kv_lease_free(&l);
    check(kv);
    fx_kv_free(kv);
}

/* One ring kv's life under a failure plan: create, a lease's ring, a row
 * through its ring, the end. */
static void ring_life(fx_fault_alloc *f, void *user) {
    (void)user;
    fx_allocator hooks = fx_fault_allocator(f);
    fx_alloc alloc;
    assert_int_equal(fx_alloc_init(&alloc, &hooks), FX_OK);
    fx_hparams hp = ring_hp();
    fx_kv_params p = {.n_blocks = 8, .block_tokens = BT, .ring_call = CALL,
                      .n_ring_blocks = 6};
    fx_kv *kv = NULL;
    fx_error err;
    fx_status st = fx_kv_create(&alloc, &hp, &p, &kv, &err);
    if (st != FX_OK) {
        assert_int_equal(st, FX_ERR_NOMEM);
        assert_null(kv);
        return;
    }
    fx_kv_lease l;
    st = fx_kv_lease_init(kv, &l, FX_KV_PAGED, 20, &err);
    if (st == FX_OK) {
        int32_t t[20];
        seq(t, 20, 1);
        fx_kv_fit fit;
        OK(fx_kv_lease_admit(&l, t, 3, 20, &fit, &e_));
        assert_int_equal(fit, FX_KV_NOW);
        run_to(&l, t, 20, 1);
        OK(fx_kv_lease_publish(&l, t, 20, &e_));
    } else {
        assert_int_equal(st, FX_ERR_NOMEM);
        assert_int_equal(stats(kv).leases, 0);
    }
    fx_kv_lease_free(&l); /* a failed init frees as a no-op */
    check(kv);
    fx_kv_free(kv);
}

/* docs/reliability.md 43 for the ring pool and a lease's ring: every
 * allocation failing in turn (alone, and with every later one) is
 * FX_ERR_NOMEM, nothing leaked, nothing half made. */
static void test_ring_allocation_failure(void **state) {
    (void)state;
    fx_fault_alloc f = {0};
    long n = fx_fault_sweep(&f, ring_life, NULL);
    assert_true(n >= 20); /* the tree's arrays, the ring's, a lease's 5 */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_row_bytes),
        cmocka_unit_test(test_ring_bounds_a_row),
        cmocka_unit_test(test_ring_admission),
        cmocka_unit_test(test_ring_adoption),
        cmocka_unit_test(test_ring_pins),
        cmocka_unit_test(test_ring_check_detects),
        cmocka_unit_test(test_ring_allocation_failure),
    };
    return cmocka_run_group_tests_name("kv_ring", tests, NULL, NULL);
}
