/*
 * Memory running out while a block-quantized model loads and generates
 * (docs/reliability.md 43, issue #38): fail allocation N of the whole
 * scenario -- alone, and with every later one -- for every N. The
 * scenario loads the model as a host does (the copy made over the first
 * steps), creates a batcher, and generates a row while that copy is
 * made (16-row groups, R16 tiles or the mapping, as this CPU's kernels
 * take them). Every call answers OK or FX_ERR_NOMEM, nothing leaks, and
 * a row that completes has the tokens of a run without faults.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include <ferrox.h>

#include "fault_alloc.h"
#include "gguf_quant.h"
#include "gguf_writer.h"
#include "test_util.h"

enum { GEN_TOKENS = 12 };

typedef struct run {
    const char *path;
    int32_t ids[GEN_TOKENS];
    size_t n_ids; /* of a row that completed; else 0 */
    int refused;  /* a call answered FX_ERR_NOMEM */
} run;

/* Any status but these two fails the test. */
static int nomem_or_ok(fx_status st, const char *what, const fx_fault_alloc *f) {
    if (st == FX_OK) return 0;
    if (st != FX_ERR_NOMEM)
        fail_msg("%s gave %s at allocation %ld (%s)", what, fx_status_str(st),
                 f->fail_at, f->fail_after ? "and later" : "alone");
    return 1;
}

static void generate(fx_fault_alloc *f, void *user) {
    run *r = user;
    r->n_ids = 0;
    r->refused = 0;
    fx_model_params mp;
    fx_model_params_init(&mp);
    mp.allocator = fx_fault_allocator(f);
    fx_model *m = NULL;
    if ((r->refused = nomem_or_ok(fx_model_load(r->path, &mp, &m, NULL, 0),
                                  "fx_model_load", f)) != 0) {
        assert_null(m);
        return;
    }
    fx_batcher_params bp;
    fx_batcher_params_init(&bp);
    bp.allocator = fx_fault_allocator(f);
    bp.max_rows = 2;
    bp.n_ctx = 64;
    bp.n_threads = 2;
    fx_batcher *b = NULL;
    if ((r->refused = nomem_or_ok(fx_batcher_create(m, &bp, &b, NULL, 0),
                                  "fx_batcher_create", f)) != 0) {
        fx_model_free(m);
        return;
    }
    static const int32_t prompt[] = {3, 10, 17, 24, 31, 38};
    fx_request q;
    fx_request_init(&q);
    q.prompt_tokens = prompt;
    q.n_prompt_tokens = sizeof prompt / sizeof *prompt;
    q.max_tokens = GEN_TOKENS;
    q.flags = FX_REQUEST_IGNORE_EOS;
    fx_row *row = NULL;
    if ((r->refused = nomem_or_ok(fx_submit(b, &q, &row), "fx_submit", f)) == 0) {
        int done = 0;
        for (int i = 0; i < 200 && fx_batcher_pending(b) > 0; i++) {
            r->refused |= nomem_or_ok(fx_step(b), "fx_step", f);
            fx_event ev;
            while (fx_poll(b, &ev)) {
                if (ev.type != FX_EVENT_DONE) continue;
                done++;
                if (ev.finish == FX_FINISH_ERROR) {
                    assert_int_equal(ev.status, FX_ERR_NOMEM);
                    r->refused = 1;
                } else {
                    assert_int_equal(ev.n_tokens, GEN_TOKENS);
                    memcpy(r->ids, ev.tokens, sizeof r->ids);
                    r->n_ids = GEN_TOKENS;
                }
            }
        }
        assert_int_equal(done, 1); /* exactly one DONE, however it went */
        (void)fx_row_release(b, row);
    }
    fx_batcher_free(b);
    fx_model_free(m);
}

typedef struct sweep {
    run ref, now;
} sweep;

static void faulty(fx_fault_alloc *f, void *user) {
    sweep *s = user;
    generate(f, &s->now);
    if (s->now.n_ids && memcmp(s->now.ids, s->ref.ids, sizeof s->ref.ids))
        fail_msg("allocation %ld failing (%s): the row's tokens differ from "
                 "the run without faults", f->fail_at,
                 f->fail_after ? "and later" : "alone");
}

static void sweep_type(uint32_t type, const char *name) {
    gw_model_spec spec;
    gw_model_spec_default(&spec);
    spec.n_embd = 256; /* whole blocks of 256 */
    spec.n_ff = 256;
    spec.seed = 5;
    spec.type = type;
    spec.quantize = gq_encode;
    sweep s;
    memset(&s, 0, sizeof s);
    s.ref.path = s.now.path = fx_test_tmp_path(name);
    assert_int_equal(gw_write_model(s.ref.path, &spec), 0);
    fx_fault_alloc clean = {0};
    generate(&clean, &s.ref);
    assert_int_equal(s.ref.refused, 0);
    assert_int_equal(s.ref.n_ids, GEN_TOKENS);
    assert_int_equal(clean.live, 0);
    fx_fault_alloc f = {0};
    long total = fx_fault_sweep(&f, faulty, &s);
    assert_true(total > 10);
    remove(s.ref.path);
}

static void test_q4_k(void **state) {
    (void)state;
    sweep_type(QR_Q4_K, "quant-faults-q4_k.gguf");
}

static void test_q6_k(void **state) {
    (void)state;
    sweep_type(QR_Q6_K, "quant-faults-q6_k.gguf");
}

static void test_iq4_xs(void **state) {
    (void)state;
    sweep_type(QR_IQ4_XS, "quant-faults-iq4_xs.gguf");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_q4_k),
        cmocka_unit_test(test_q6_k),
        cmocka_unit_test(test_iq4_xs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
