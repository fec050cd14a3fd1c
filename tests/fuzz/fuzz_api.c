/*
 * fuzz_api: random sequences of public batcher calls on a tiny synthetic
 * model (docs/reliability.md E 32-34, F 38-42, and the row lifecycle).
 *
 * At init a small Llama model (gw_build_model: 64 tokens, 2 layers) is
 * written to a temporary file and loaded once. Each input makes a batcher
 * with parameters from its first bytes and then runs up to MAX_OPS
 * operations, one input byte each (plus the operation's arguments):
 * submit (text or token prompt, max_tokens, sampling, stop strings, stop
 * tokens, a lease -- live or released -- and a grammar or JSON mode,
 * lazy or not),
 * step, poll, cancel, row release, lease create / ready / release.
 *
 * Checked: every call returns a status from its documented set; events
 * come only for rows the host still holds, TEXT is valid UTF-8, DONE comes
 * once and last; at the end the batcher drains (every row held gets its
 * DONE) and fx_batcher_impl_check holds, with no row or reserved block
 * left. Any violation traps (a finding).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/api_internal.h"
#include "batcher/batcher.h"
#include "ferrox.h"
#include "fuzz_common.h"
#include "gguf_writer.h"
#include "text/text.h"

#define MAX_OPS 48
#define MAX_REQS 32
#define MAX_LEASES 4
#define N_VOCAB 64

static fx_model *model;
static char model_path[4096];

static void remove_model(void) {
    if (model_path[0]) unlink(model_path);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    gw_model_spec spec;
    gw_model_spec_default(&spec);
    spec.n_vocab = N_VOCAB;
    spec.n_embd = 32;
    spec.n_head = 4;
    spec.n_head_kv = 2;
    spec.n_ff = 48;
    spec.n_layer = 1;
    spec.n_ctx = 128;
    gw_buf buf = {0};
    gw_build_model(&buf, &spec);
    const char *dir = getenv("TMPDIR");
    snprintf(model_path, sizeof model_path, "%s/fx_fuzz_api_XXXXXX",
             dir && *dir ? dir : "/tmp");
    int fd = mkstemp(model_path);
    if (fd < 0) abort();
    close(fd);
    if (gw_write_file(&buf, model_path) != 0) abort();
    gw_free(&buf);
    atexit(remove_model);
    char err[256];
    if (fx_model_load(model_path, NULL, &model, err, sizeof err) != FX_OK) {
        fprintf(stderr, "fuzz_api: load: %s\n", err);
        abort();
    }
    return 0;
}

typedef struct req {
    fx_row *row;      /* NULL: submit failed */
    int released;
    int done;
    int text_after_done;
} req;

typedef struct state {
    fx_batcher *b;
    req reqs[MAX_REQS];
    size_t n_reqs;
    fx_lease *leases[MAX_LEASES * 4]; /* live and released, for misuse */
    int lease_live[MAX_LEASES * 4];
    size_t n_leases;
    uint32_t n_ctx;
} state;

static const char *const grammars[] = {
    "root ::= [a-z]+",
    "root ::= \"<t1>\" | \"<t2>\" \"<t3>\"*",
    "root ::= x\nx ::= x \"a\"",           /* left recursion: refused */
    "root ::= (\"<t\" [0-9] \">\")*",
    "root ::= undefined",
    "root ::= [^x]{2,5}",
};

static const char *const stop_pool[] = {
    "<t1>", "<t2><t3>", "t", ">", "\xE2\x82\xAC", "<t4", "zz",
};

static void poll_all(state *s) {
    fx_event ev;
    int guard = 0;
    while (fx_poll(s->b, &ev)) {
        FX_FUZZ_CHECK(++guard < 100000);
        uintptr_t id = (uintptr_t)ev.user;
        FX_FUZZ_CHECK(id >= 1 && id <= s->n_reqs);
        req *r = &s->reqs[id - 1];
        FX_FUZZ_CHECK(r->row != NULL && r->row == ev.row);
        FX_FUZZ_CHECK(!r->released);
        FX_FUZZ_CHECK(!r->done);
        if (ev.type == FX_EVENT_TEXT) {
            FX_FUZZ_CHECK(ev.text_len == 0 || ev.text != NULL);
            FX_FUZZ_CHECK(fx_utf8_valid(ev.text, ev.text_len));
        } else {
            FX_FUZZ_CHECK(ev.type == FX_EVENT_DONE);
            FX_FUZZ_CHECK(ev.finish >= FX_FINISH_EOS &&
                          ev.finish <= FX_FINISH_ERROR);
            for (size_t i = 0; i < ev.n_tokens; i++)
                FX_FUZZ_CHECK(ev.tokens[i] >= 0 && ev.tokens[i] < N_VOCAB);
            r->done = 1;
        }
    }
}

static void op_submit(state *s, fz_in *in) {
    if (s->n_reqs == MAX_REQS) return;
    uint8_t a = fz_u8(in), c = fz_u8(in);
    fx_request rq;
    fx_request_init(&rq);
    char text[64];
    int32_t toks[24];
    size_t plen = fz_u8(in) % 24u;
    if (a & 1) {
        for (size_t i = 0; i < plen; i++) {
            uint8_t t = fz_u8(in);
            /* Mostly valid ids, sometimes out of range. */
            toks[i] = (t & 0x80) && (t & 0x40) ? (int32_t)t * 3 - 300
                                               : (int32_t)(t % N_VOCAB);
        }
        rq.prompt_tokens = toks;
        rq.n_prompt_tokens = plen;
    } else {
        size_t got;
        const uint8_t *p = fz_take(in, plen, &got);
        memcpy(text, p, got);
        text[got] = 0;
        rq.prompt = text;
        rq.prompt_len = got;
    }
    rq.max_tokens = fz_u8(in) % 12u;
    if (a & 2) rq.max_tokens = (uint32_t)fz_u8(in) * 4u; /* may exceed n_ctx */
    rq.flags = (a >> 2) & 0x7u;
    if (c & 1) rq.temperature = (float)(fz_u8(in) % 20) / 10.0f;
    if (c & 2) rq.top_k = fz_u8(in) % 8u;
    if (c & 4) rq.top_p = (float)(fz_u8(in) % 11) / 10.0f;
    if (c & 8) rq.min_p = (float)(fz_u8(in) % 5) / 10.0f;
    rq.seed = fz_u8(in);
    const char *stops[3];
    size_t ns = (c >> 4) & 3u;
    for (size_t i = 0; i < ns; i++)
        stops[i] = stop_pool[fz_u8(in) % (sizeof stop_pool / sizeof stop_pool[0])];
    rq.stop = ns ? stops : NULL;
    rq.n_stop = ns;
    int32_t stoks[2] = {(int32_t)(fz_u8(in) % N_VOCAB), 5};
    if (c & 0x40) {
        rq.stop_tokens = stoks;
        rq.n_stop_tokens = 2;
    }
    if ((a & 0x20) && s->n_leases) rq.lease = s->leases[fz_u8(in) % s->n_leases];
    /* A lazy grammar's triggers, from the grammar byte's own bits (so the
     * corpus's byte stream keeps its meaning): a string of the pool (the
     * empty one is refused) and a token, in or out of the vocabulary. */
    static const char *const trigger_pool[] = {"<t", "a", "\x01", ""};
    const char *trig[1];
    int32_t trig_tok[1];
    if (a & 0x40) {
        uint8_t g = fz_u8(in);
        if (g & 0x80) {
            rq.flags |= FX_REQUEST_JSON;
        } else {
            rq.grammar = grammars[g % (sizeof grammars / sizeof grammars[0])];
            rq.grammar_len = strlen(rq.grammar);
        }
        if (g & 0x40) {
            trig[0] = trigger_pool[(g >> 3) & 3];
            trig_tok[0] = (g & 0x20) ? (int32_t)(g % N_VOCAB) : N_VOCAB;
            rq.grammar_triggers = trig;
            rq.n_grammar_triggers = 1;
            rq.grammar_trigger_tokens = trig_tok;
            rq.n_grammar_trigger_tokens = (g >> 2) & 1;
        }
    }
    /* user = 1-based request index, set before the call */
    req *r = &s->reqs[s->n_reqs];
    memset(r, 0, sizeof *r);
    rq.user = (void *)(uintptr_t)(s->n_reqs + 1);
    fx_row *row = NULL;
    fx_status st = fx_submit(s->b, &rq, &row);
    FX_FUZZ_CHECK(st == FX_OK || st == FX_ERR_INVALID_ARG ||
                  st == FX_ERR_NO_ROOM || st == FX_ERR_STALE_HANDLE ||
                  st == FX_ERR_GRAMMAR || st == FX_ERR_NOMEM);
    if (st == FX_OK) {
        FX_FUZZ_CHECK(row != NULL);
        r->row = row;
        s->n_reqs++;
    }
}

static void op_lease_create(state *s, fz_in *in) {
    if (s->n_leases == MAX_LEASES * 4) return;
    uint8_t a = fz_u8(in);
    size_t got;
    const uint8_t *p = fz_take(in, fz_u8(in) % 20u, &got);
    fx_lease *l = NULL;
    fx_status st = fx_lease_create(s->b, (const char *)p, got, a & 0x6u, &l);
    FX_FUZZ_CHECK(st == FX_OK || st == FX_ERR_INVALID_ARG ||
                  st == FX_ERR_NO_ROOM || st == FX_ERR_NOMEM);
    if (st == FX_OK) {
        FX_FUZZ_CHECK(l != NULL);
        s->leases[s->n_leases] = l;
        s->lease_live[s->n_leases++] = 1;
    }
}

/* Steps until nothing is pending. With leases held, a job may wait for
 * good: the host's pins hold so much of the cache that the job at the
 * head of the queue (and so, in submit order, everything behind it) does
 * not fit in the rest -- docs/reliability.md 39's "it runs when room frees", and
 * only the host can free that room. That wait is allowed only when it is
 * exactly that: nothing running, and the head needs more blocks than the
 * pins leave. (A seed found the harness demanding more:
 * corpus/api/regress-drain-pinned-budget.) */
static void drain(state *s, int leases_held) {
    for (int i = 0; i < 4000 && fx_batcher_pending(s->b) > 0; i++) {
        fx_status st = fx_step(s->b);
        FX_FUZZ_CHECK(st == FX_OK);
        poll_all(s);
    }
    /* A step with nothing to do, then the last events. */
    FX_FUZZ_CHECK(fx_step(s->b) == FX_OK);
    poll_all(s);
    if (fx_batcher_pending(s->b) == 0) return;
    FX_FUZZ_CHECK(leases_held);
    fx_batcher_impl *impl = fx_batcher_get_impl(s->b);
    fx_batcher_stats bs;
    fx_batcher_impl_stats(impl, &bs);
    FX_FUZZ_CHECK(bs.running == 0 && bs.queued > 0 && bs.blocks_pinned > 0);
    FX_FUZZ_CHECK(bs.head_need > bs.blocks_total - bs.blocks_pinned);
}

static void check_accounting(state *s) {
    fx_batcher_impl *impl = fx_batcher_get_impl(s->b);
    fx_error err;
    fx_status st = fx_batcher_impl_check(impl, &err);
    if (st != FX_OK) fprintf(stderr, "fuzz_api: check: %s\n", err.message);
    FX_FUZZ_CHECK(st == FX_OK);
    fx_batcher_stats bs;
    fx_batcher_impl_stats(impl, &bs);
    FX_FUZZ_CHECK(bs.running == 0 && bs.queued == 0);
    FX_FUZZ_CHECK(bs.blocks_reserved == 0);
    FX_FUZZ_CHECK(bs.blocks_free + bs.blocks_cached + bs.blocks_pinned ==
                  bs.blocks_total);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_in in = {data, size};
    state *s = calloc(1, sizeof *s);
    if (!s) return 0;
    uint8_t p0 = fz_u8(&in), p1 = fz_u8(&in), p2 = fz_u8(&in);
    fx_batcher_params bp;
    fx_batcher_params_init(&bp);
    bp.max_rows = 1 + (p0 & 3u);
    bp.max_step_tokens = 1 + (p1 % 48u);
    bp.n_ctx = 32u << (p0 >> 2 & 1u);           /* 32 or 64 */
    bp.block_tokens = 4u << (p0 >> 3 & 1u);      /* 4 or 8 */
    bp.flags = (p0 >> 4) & FX_BATCHER_NO_PREFIX_CACHE;
    if (p2 & 0x80) {
        /* A small cache: 2..33 blocks, so the budget runs full. */
        uint64_t hd = 32 / 4, per_block = 1ull * 2 * bp.block_tokens * hd * 2 * 4;
        bp.kv_bytes = (2 + (p2 & 31u)) * per_block;
    }
    char err[256];
    fx_status st = fx_batcher_create(model, &bp, &s->b, err, sizeof err);
    if (st != FX_OK) {
        FX_FUZZ_CHECK(st == FX_ERR_INVALID_ARG || st == FX_ERR_NO_ROOM ||
                      st == FX_ERR_NOMEM);
        free(s);
        return 0;
    }
    s->n_ctx = bp.n_ctx;

    for (int op = 0; op < MAX_OPS && in.n > 0; op++) {
        uint8_t o = fz_u8(&in);
        switch (o % 10u) {
        case 0:
        case 1:
            op_submit(s, &in);
            break;
        case 2:
        case 3: {
            st = fx_step(s->b);
            FX_FUZZ_CHECK(st == FX_OK);
            if (o & 0x10) poll_all(s);
            break;
        }
        case 4:
            poll_all(s);
            break;
        case 5: {
            uint8_t which = fz_u8(&in);
            fx_row *row = s->n_reqs ? s->reqs[which % s->n_reqs].row : NULL;
            st = fx_cancel(s->b, row);
            if (row == NULL) {
                FX_FUZZ_CHECK(st != FX_OK);
            } else {
                const req *r = &s->reqs[which % s->n_reqs];
                if (r->released || r->done)
                    FX_FUZZ_CHECK(st == FX_ERR_STALE_HANDLE);
                else
                    FX_FUZZ_CHECK(st == FX_OK);
            }
            break;
        }
        case 6: {
            if (s->n_reqs == 0) break;
            req *r = &s->reqs[fz_u8(&in) % s->n_reqs];
            st = fx_row_release(s->b, r->row);
            if (r->released || r->done)
                FX_FUZZ_CHECK(st == FX_ERR_STALE_HANDLE);
            else
                FX_FUZZ_CHECK(st == FX_OK);
            r->released = 1;
            break;
        }
        case 7:
            op_lease_create(s, &in);
            break;
        case 8: {
            if (s->n_leases == 0) break;
            size_t i = fz_u8(&in) % s->n_leases;
            int ready = fx_lease_ready(s->b, s->leases[i]);
            FX_FUZZ_CHECK(ready == 0 || ready == 1);
            st = fx_lease_release(s->b, s->leases[i]);
            FX_FUZZ_CHECK(st == (s->lease_live[i] ? FX_OK : FX_ERR_STALE_HANDLE));
            s->lease_live[i] = 0;
            break;
        }
        default: {
            /* Misuse: NULL arguments. */
            fx_event ev;
            FX_FUZZ_CHECK(fx_submit(s->b, NULL, NULL) == FX_ERR_INVALID_ARG);
            FX_FUZZ_CHECK(fx_poll(NULL, &ev) == 0);
            FX_FUZZ_CHECK(fx_cancel(s->b, NULL) != FX_OK);
            FX_FUZZ_CHECK(fx_row_release(s->b, NULL) != FX_OK);
            FX_FUZZ_CHECK(fx_lease_release(s->b, NULL) != FX_OK);
            break;
        }
        }
    }

    /* Drain with the leases held, check, then release them and check again. */
    drain(s, 1);
    int waiting = fx_batcher_pending(s->b) > 0;
    if (!waiting) {
        for (size_t i = 0; i < s->n_reqs; i++) {
            const req *r = &s->reqs[i];
            FX_FUZZ_CHECK(r->released || r->done);
        }
        check_accounting(s);
    } else {
        fx_error cerr;
        FX_FUZZ_CHECK(fx_batcher_impl_check(fx_batcher_get_impl(s->b), &cerr) ==
                      FX_OK);
    }
    for (size_t i = 0; i < s->n_leases; i++)
        if (s->lease_live[i])
            FX_FUZZ_CHECK(fx_lease_release(s->b, s->leases[i]) == FX_OK);
    /* Now every job runs: each row the host holds gets its DONE. */
    drain(s, 0);
    for (size_t i = 0; i < s->n_reqs; i++) {
        const req *r = &s->reqs[i];
        FX_FUZZ_CHECK(r->released || r->done);
    }
    check_accounting(s);
    fx_batcher_free(s->b);
    free(s);
    return 0;
}
