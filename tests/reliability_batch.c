/* The batcher helpers test_reliability_fixes.c and test_reliability_api.c
 * share: a small batcher, a plain request, and its events collected. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "reliability_batch.h"

fx_model *rb_load_model(const char *path) {
    fx_model *m = NULL;
    char err[256];
    if (fx_model_load(path, NULL, &m, err, sizeof err) != FX_OK)
        fail_msg("load: %s", err);
    return m;
}

void rb_params(fx_batcher_params *p, uint32_t max_rows) {
    fx_batcher_params_init(p);
    p->max_rows = max_rows;
    p->max_step_tokens = 32;
    p->n_ctx = 128;
    p->block_tokens = 8;
}

fx_batcher *rb_create(fx_model *m, const fx_batcher_params *p) {
    fx_batcher *b = NULL;
    char err[256];
    if (fx_batcher_create(m, p, &b, err, sizeof err) != FX_OK)
        fail_msg("create: %s", err);
    return b;
}

fx_batcher *make_batcher(fx_model *m, uint32_t max_rows) {
    fx_batcher_params p;
    rb_params(&p, max_rows);
    return rb_create(m, &p);
}

/* A greedy request over a short token prompt, EOS ignored. */
void plain_request(fx_request *r, int32_t prompt[8], int salt) {
    for (int k = 0; k < 8; k++) prompt[k] = 3 + (k * 7 + salt) % 60;
    fx_request_init(r);
    r->prompt_tokens = prompt;
    r->n_prompt_tokens = 8;
    r->max_tokens = 6;
    r->temperature = 0;
    r->flags = FX_REQUEST_IGNORE_EOS;
}


void collect(const fx_event *ev) {
    outcome *o = ev->user;
    if (!o) return;
    if (ev->type == FX_EVENT_TOKEN && ev->text_len &&
        o->n_text + ev->text_len < sizeof o->text) {
        memcpy(o->text + o->n_text, ev->text, ev->text_len);
        o->n_text += ev->text_len;
    }
    if (ev->type != FX_EVENT_DONE) return;
    o->done++;
    o->finish = ev->finish;
    o->status = ev->status;
    o->n_ids = ev->n_tokens < 64 ? ev->n_tokens : 64;
    if (o->n_ids) memcpy(o->ids, ev->tokens, o->n_ids * sizeof *o->ids);
}

/* Steps b until nothing is pending, handing every event to collect. */
void drain(fx_batcher *b) {
    for (int guard = 0; guard < 1000 && fx_batcher_pending(b) > 0; guard++) {
        assert_int_equal(fx_step(b), FX_OK);
        fx_event ev;
        while (fx_poll(b, &ev)) collect(&ev);
    }
    fx_event ev;
    while (fx_poll(b, &ev)) collect(&ev);
    assert_int_equal(fx_batcher_pending(b), 0);
}
