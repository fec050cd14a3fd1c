/*
 * Issue 36's broken promises, each with the test that found it:
 *
 * - a long chain grammar (`rK ::= rK+1 "a"?`) deeper than the row's frame
 *   array is refused with FX_ERR_GRAMMAR at fx_submit and by the grammar
 *   API, without writing past the array (run under ASan);
 * - kv_bytes past FX_BATCHER_MAX_KV_BYTES is FX_ERR_INVALID_ARG, and one
 *   the machine cannot hold FX_ERR_NOMEM at the first allocation that
 *   fails, nothing allocated after it: in a child capped by RLIMIT_AS, so
 *   a missed check fails the test rather than the machine;
 * - a -INFINITY bias on every token that may come next (all of them, or
 *   all a grammar or JSON mode allows) ends that row with FX_FINISH_ERROR
 *   / FX_ERR_ALL_BANNED, greedy and sampled, and the other rows of its
 *   batch are byte for byte what they are without it;
 * - a grammar row's parse is sized to its grammar: a small grammar's
 *   submit asks for a few KB, not the 2 MB of scratch it once allocated
 *   and cleared per row.
 * Handles, fx_poll_sized and fx_lease_status: test_reliability_api.c.
 */
/* fork, setrlimit, clock_gettime */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include <ferrox.h>

#include "gguf_writer.h"
#include "mem_cap.h"
#include "reliability_batch.h"
#include "sample/grammar.h"
#include "test_util.h"

static char model_path[4096];
static char json_model_path[4096]; /* a vocabulary JSON can be written in */

/* ---- 1. chain grammars deeper than a row's frames ---- */

/* root ::= r0, rK ::= rK+1 "a"? for K < n, rn ::= "a"; malloc'd. */
static char *chain_grammar(unsigned n, size_t *len) {
    size_t cap = 64 + (size_t)n * 40, at = 0;
    char *s = malloc(cap);
    assert_non_null(s);
    at += (size_t)snprintf(s + at, cap - at, "root ::= r0\n");
    for (unsigned k = 0; k < n; k++)
        at += (size_t)snprintf(s + at, cap - at, "r%u ::= r%u \"a\"?\n", k,
                               k + 1);
    at += (size_t)snprintf(s + at, cap - at, "r%u ::= \"a\"\n", n);
    assert_true(at < cap);
    *len = at;
    return s;
}

static const unsigned chain_depths[] = {100, 4000, 4094, 4095, 4096, 4097,
                                        4200, 10000};

/* The grammar API: a start state deeper than FX_GRAMMAR_ROW_FRAMES is
 * FX_ERR_GRAMMAR; a shallower one starts. */
static void test_chain_grammar_state(void **state) {
    (void)state;
    fx_alloc alloc;
    assert_int_equal(fx_alloc_init(&alloc, NULL), FX_OK);
    for (size_t i = 0; i < sizeof chain_depths / sizeof *chain_depths; i++) {
        unsigned n = chain_depths[i];
        size_t len;
        char *text = chain_grammar(n, &len);
        fx_grammar *g = NULL;
        fx_error err;
        assert_int_equal(fx_grammar_compile(&alloc, text, len, NULL, &g, &err),
                         FX_OK);
        fx_gstate s;
        fx_status st = fx_gstate_init(&s, &alloc, g, &err);
        /* The start state holds one frame per rK call below r0's. */
        if (n < FX_GRAMMAR_ROW_FRAMES) {
            assert_int_equal(st, FX_OK);
            fx_gstate_free(&s, &alloc);
        } else if (n > FX_GRAMMAR_ROW_FRAMES) {
            assert_int_equal(st, FX_ERR_GRAMMAR);
        } else if (st == FX_OK) {
            fx_gstate_free(&s, &alloc);
        }
        fx_grammar_free(g);
        free(text);
    }
}

/* The same through fx_submit: refused, nothing submitted, and the batcher
 * serves the next request as if nothing had happened. */
static void test_chain_grammar_submit(void **state) {
    (void)state;
    fx_model *m = rb_load_model(model_path);
    fx_batcher *b = make_batcher(m, 2);
    for (size_t i = 0; i < sizeof chain_depths / sizeof *chain_depths; i++) {
        unsigned n = chain_depths[i];
        size_t len;
        char *text = chain_grammar(n, &len);
        int32_t prompt[8];
        fx_request r;
        plain_request(&r, prompt, (int)i);
        r.grammar = text;
        r.grammar_len = len;
        outcome o = {0};
        r.user = &o;
        fx_row *row = NULL;
        fx_status st = fx_submit(b, &r, &row);
        free(text);
        if (n > FX_GRAMMAR_ROW_FRAMES) {
            assert_int_equal(st, FX_ERR_GRAMMAR);
            assert_null(row);
            assert_int_equal(fx_batcher_pending(b), 0);
        } else {
            /* Accepted (the model has no token "a": its row then fails at
             * its first step) or refused, but one DONE for an accepted
             * row. */
            assert_true(st == FX_OK || st == FX_ERR_GRAMMAR);
            if (st == FX_OK) {
                drain(b);
                assert_int_equal(o.done, 1);
            }
        }
        outcome after = {0};
        plain_request(&r, prompt, 1);
        r.user = &after;
        assert_int_equal(fx_submit(b, &r, &row), FX_OK);
        drain(b);
        assert_int_equal(after.done, 1);
        assert_int_equal(after.finish, FX_FINISH_LENGTH);
    }
    fx_batcher_free(b);
    fx_model_free(m);
}

/* ---- 2. kv_bytes past what the machine holds ---- */

/* Counts the calls and what happened after the first one the system
 * refused. */
typedef struct watch_alloc {
    long calls, live;
    long refused;       /* calls that returned NULL */
    long after_refusal; /* calls made after the first NULL */
    uint64_t bytes;     /* asked for, in all */
} watch_alloc;

static void *wa_malloc(void *user, size_t size) {
    watch_alloc *w = user;
    w->calls++;
    if (w->refused) w->after_refusal++;
    w->bytes += size;
    void *p = malloc(size ? size : 1);
    if (p) w->live++;
    else w->refused++;
    return p;
}

static void *wa_realloc(void *user, void *ptr, size_t size) {
    watch_alloc *w = user;
    w->calls++;
    if (w->refused) w->after_refusal++;
    w->bytes += size;
    void *p = realloc(ptr, size ? size : 1);
    if (p && !ptr) w->live++;
    if (!p) w->refused++;
    return p;
}

static void wa_free(void *user, void *ptr) {
    watch_alloc *w = user;
    if (ptr) w->live--;
    free(ptr);
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* In the capped child: 0, or the line of the first check that failed. */
#define CHILD_CHECK(c)                                                       \
    do {                                                                     \
        if (!(c)) return __LINE__;                                           \
    } while (0)

static int kv_cases(fx_model *m) {
    static const struct {
        uint64_t kv_bytes;
        fx_status want;
    } cases[] = {
        {UINT64_MAX, FX_ERR_INVALID_ARG},
        {FX_BATCHER_MAX_KV_BYTES + 1, FX_ERR_INVALID_ARG},
        {FX_BATCHER_MAX_KV_BYTES, FX_ERR_NOMEM},
        {(uint64_t)64 << 30, FX_ERR_NOMEM},
        {(uint64_t)8 << 30, FX_ERR_NOMEM},
        {(uint64_t)1 << 20, FX_OK}, /* the cap leaves room for a real one */
    };
    double t0 = now_seconds();
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        for (int hooks = 0; hooks < 2; hooks++) {
            watch_alloc w = {0};
            fx_batcher_params p;
            fx_batcher_params_init(&p);
            p.max_rows = 2;
            p.n_ctx = 64;
            p.max_step_tokens = 16;
            p.kv_bytes = cases[i].kv_bytes;
            if (hooks)
                p.allocator = (fx_allocator){wa_malloc, wa_realloc, wa_free, &w};
            fx_batcher *b = NULL;
            fx_status st = fx_batcher_create(m, &p, &b, NULL, 0);
            CHILD_CHECK(st == cases[i].want);
            CHILD_CHECK((st == FX_OK) == (b != NULL));
            fx_batcher_free(b);
            /* Failing fast: nothing is allocated once memory ran out. */
            CHILD_CHECK(w.after_refusal == 0);
            CHILD_CHECK(w.live == 0);
            if (hooks && cases[i].want == FX_ERR_NOMEM) CHILD_CHECK(w.refused == 1);
        }
    CHILD_CHECK(now_seconds() - t0 < 1.0);
    return 0;
}

static fx_model *capped_model;

static void kv_cases_child(void) {
    int line = kv_cases(capped_model);
    if (line) fprintf(stderr, "kv_cases: the check at line %d failed\n", line);
    exit(line ? 1 : 0);
}

static void test_kv_bytes_capped(void **state) {
    (void)state;
    capped_model = rb_load_model(model_path);
    /* 2 GiB above what is mapped now: far below every NOMEM case; 20 s so
     * a missed check cannot hang the suite either. */
    fx_test_child("kv_bytes cases", kv_cases_child, 20, 2048);
    fx_model_free(capped_model);
}

/* ---- 3. every allowed token banned ---- */

enum { JSON_VOCAB = 64 };

/* <unk> <s> </s>, JSON's pieces, then <t15> .. <t63>. */
static size_t json_vocab(gw_buf *b, void *user) {
    (void)user;
    static const char *const pieces[] = {"<unk>", "<s>", "</s>", "{", "}",
                                         "[", "]", "\"", ":", ",", "1", "a",
                                         "true", "null", " "};
    size_t n_pieces = sizeof pieces / sizeof *pieces;
    const char *tokens[JSON_VOCAB];
    char plain[JSON_VOCAB][16];
    float scores[JSON_VOCAB];
    int32_t types[JSON_VOCAB];
    for (uint32_t i = 0; i < JSON_VOCAB; i++) {
        if (i < n_pieces) {
            tokens[i] = pieces[i];
        } else {
            snprintf(plain[i], sizeof plain[i], "<t%u>", i);
            tokens[i] = plain[i];
        }
        types[i] = i == 0 ? 2 : i < 3 ? 3 : 1;
        scores[i] = -(float)i;
    }
    gw_kv_str(b, "tokenizer.ggml.model", "llama");
    gw_kv_arr_str(b, "tokenizer.ggml.tokens", tokens, JSON_VOCAB);
    gw_kv_arr_f32(b, "tokenizer.ggml.scores", scores, JSON_VOCAB);
    gw_kv_arr_i32(b, "tokenizer.ggml.token_type", types, JSON_VOCAB);
    gw_kv_u32(b, "tokenizer.ggml.bos_token_id", 1);
    gw_kv_u32(b, "tokenizer.ggml.eos_token_id", 2);
    gw_kv_u32(b, "tokenizer.ggml.unknown_token_id", 0);
    return 7;
}

typedef struct banned_case {
    const char *name;
    float temperature;
    const char *grammar; /* NULL: none */
    int json;
    int32_t keep;        /* the one token not banned, or -1 */
    const int32_t *only; /* ban only these (NULL: every token but keep) */
    size_t n_only;
    size_t want_tokens;  /* generated before the ban bites */
} banned_case;

static const int32_t t40_t41[] = {40, 41};
static const int32_t t41[] = {41};

static const banned_case banned_cases[] = {
    {"greedy, every token", 0, NULL, 0, -1, NULL, 0, 0},
    {"sampled, every token", 0.8f, NULL, 0, -1, NULL, 0, 0},
    {"greedy grammar, its two tokens", 0, "root ::= (\"<t40>\" | \"<t41>\")+\n",
     0, -1, t40_t41, 2, 0},
    {"sampled grammar, its two tokens", 0.8f,
     "root ::= (\"<t40>\" | \"<t41>\")+\n", 0, -1, t40_t41, 2, 0},
    {"greedy grammar, banned after its first token", 0,
     "root ::= \"<t40>\" \"<t41>\"+\n", 0, -1, t41, 1, 1},
    {"greedy JSON, every token", 0, NULL, 1, -1, NULL, 0, 0},
    {"sampled JSON, every token JSON allows", 0.8f, NULL, 1, 50, NULL, 0, 0},
};

enum { BYSTANDERS = 2 };

/* Rows 0 and 2 are bystanders (greedy, and sampled with a seed); row 1,
 * when c is given, is the faulty one. */
static void banned_batch(fx_model *m, const banned_case *c,
                         outcome out[BYSTANDERS + 1]) {
    fx_batcher *b = make_batcher(m, 3);
    fx_logit_bias bias[JSON_VOCAB];
    size_t n_bias = 0;
    memset(out, 0, sizeof(outcome) * (BYSTANDERS + 1));
    for (int i = 0; i < BYSTANDERS + 1; i++) {
        if (i == 1 && !c) continue;
        int32_t prompt[8];
        fx_request r;
        plain_request(&r, prompt, i);
        r.max_tokens = 8;
        r.user = &out[i];
        if (i == 2) {
            r.temperature = 0.9f;
            r.seed = 7;
        }
        if (i == 1) {
            r.temperature = c->temperature;
            r.seed = 3;
            r.flags = 0;
            if (c->grammar) {
                r.grammar = c->grammar;
                r.grammar_len = strlen(c->grammar);
            }
            if (c->json) r.flags |= FX_REQUEST_JSON;
            if (c->only) {
                for (size_t k = 0; k < c->n_only; k++)
                    bias[n_bias++] = (fx_logit_bias){c->only[k], -INFINITY};
            } else {
                for (int32_t t = 0; t < JSON_VOCAB; t++)
                    if (t != c->keep) bias[n_bias++] = (fx_logit_bias){t, -INFINITY};
            }
            r.logit_bias = bias;
            r.n_logit_bias = n_bias;
        }
        fx_row *row;
        assert_int_equal(fx_submit(b, &r, &row), FX_OK);
    }
    drain(b);
    fx_batcher_free(b);
}

static void test_all_banned(void **state) {
    (void)state;
    fx_model *m = NULL;
    char err[256];
    if (fx_model_load(json_model_path, NULL, &m, err, sizeof err) != FX_OK)
        fail_msg("load: %s", err);
    outcome alone[BYSTANDERS + 1];
    banned_batch(m, NULL, alone);
    assert_int_equal(alone[0].done, 1);
    assert_int_equal(alone[2].done, 1);
    for (size_t i = 0; i < sizeof banned_cases / sizeof *banned_cases; i++) {
        const banned_case *c = &banned_cases[i];
        outcome out[BYSTANDERS + 1];
        banned_batch(m, c, out);
        print_message("%s: finish %d, status %s, %zu tokens\n", c->name,
                      out[1].finish, fx_status_str(out[1].status),
                      out[1].n_ids);
        assert_int_equal(out[1].done, 1);
        assert_int_equal(out[1].finish, FX_FINISH_ERROR);
        assert_int_equal(out[1].status, FX_ERR_ALL_BANNED);
        assert_int_equal(out[1].n_ids, c->want_tokens);
        for (size_t k = 0; k < out[1].n_ids; k++)
            assert_int_equal(out[1].ids[k], 40); /* never a banned one */
        for (int j = 0; j < BYSTANDERS + 1; j += 2) {
            assert_int_equal(out[j].done, 1);
            assert_int_equal(out[j].finish, alone[j].finish);
            assert_int_equal(out[j].n_ids, alone[j].n_ids);
            assert_memory_equal(out[j].ids, alone[j].ids,
                                alone[j].n_ids * sizeof *alone[j].ids);
            assert_int_equal(out[j].n_text, alone[j].n_text);
            assert_memory_equal(out[j].text, alone[j].text, alone[j].n_text);
        }
    }
    /* A bias that leaves one allowed token: that token, every step. */
    fx_batcher *b = make_batcher(m, 1);
    int32_t prompt[8];
    fx_request r;
    plain_request(&r, prompt, 0);
    fx_logit_bias bias[JSON_VOCAB];
    size_t n_bias = 0;
    for (int32_t t = 0; t < JSON_VOCAB; t++)
        if (t != 45) bias[n_bias++] = (fx_logit_bias){t, -INFINITY};
    r.logit_bias = bias;
    r.n_logit_bias = n_bias;
    r.temperature = 0.8f;
    outcome o = {0};
    r.user = &o;
    fx_row *row;
    assert_int_equal(fx_submit(b, &r, &row), FX_OK);
    drain(b);
    assert_int_equal(o.finish, FX_FINISH_LENGTH);
    assert_int_equal(o.n_ids, r.max_tokens);
    for (size_t k = 0; k < o.n_ids; k++) assert_int_equal(o.ids[k], 45);
    fx_batcher_free(b);
    fx_model_free(m);
}

/* ---- 5d. a grammar row's memory ---- */

/* Bytes one fx_submit of r asks the allocator for; the row runs to its
 * end afterwards. */
static uint64_t submit_bytes(fx_batcher *b, watch_alloc *w, fx_request *r) {
    outcome o = {0};
    r->user = &o;
    uint64_t before = w->bytes;
    fx_row *row;
    assert_int_equal(fx_submit(b, r, &row), FX_OK);
    uint64_t asked = w->bytes - before;
    drain(b);
    assert_int_equal(o.done, 1);
    assert_int_not_equal(o.finish, FX_FINISH_ERROR);
    return asked;
}

/* The bound a row's parse is sized by holds: for grammars without
 * recursion, with many stacks alive at once, every string over their
 * alphabet up to 8 characters is accepted (or refused, complete or not)
 * exactly as by a parse with all of FX_GRAMMAR_ROW_FRAMES. */
static int run_string(fx_gstate *s, fx_gwork *w, const char *text) {
    fx_error err;
    for (size_t i = 0; text[i]; i++)
        if (fx_gstate_accept(s, w, text + i, 1, &err) != FX_OK)
            return strstr(err.message, "deeper") ? -1 : 0;
    return fx_gstate_complete(s) ? 2 : 1;
}

static void test_grammar_row_bound(void **state) {
    (void)state;
    static const char *const grammars[] = {
        "root ::= a a a a\na ::= \"x\" | \"x\" \"y\" | b\nb ::= \"x\"? \"y\"?\n",
        "root ::= (a b)? c\na ::= b? \"x\" b?\nb ::= \"y\" c? \"y\"?\n"
        "c ::= (\"x\" | \"y\")? (\"x\" \"y\")?\n",
        "root ::= a \"x\"\na ::= b \"y\" | b\nb ::= c \"x\"? | c \"y\"\n"
        "c ::= \"x\" | \"y\" | \"\"\n",
    };
    fx_alloc alloc;
    assert_int_equal(fx_alloc_init(&alloc, NULL), FX_OK);
    fx_vocab_trie t;
    memset(&t, 0, sizeof t);
    t.max_depth = 64;
    t.n_vocab = 1;
    fx_gwork w;
    fx_error err;
    assert_int_equal(fx_gwork_init(&w, &alloc, &t, &err), FX_OK);
    for (size_t gi = 0; gi < sizeof grammars / sizeof *grammars; gi++) {
        fx_grammar *g = NULL;
        assert_int_equal(fx_grammar_compile(&alloc, grammars[gi],
                                            strlen(grammars[gi]), NULL, &g, &err),
                         FX_OK);
        assert_true(g->row_frames < FX_GRAMMAR_ROW_FRAMES);
        char text[9];
        for (unsigned len = 0; len <= 8; len++)
            for (unsigned bits = 0; bits < (1u << len); bits++) {
                for (unsigned i = 0; i < len; i++)
                    text[i] = (bits >> i) & 1 ? 'y' : 'x';
                text[len] = '\0';
                fx_gstate own, big;
                assert_int_equal(fx_gstate_init_work(&own, &alloc, g, &w, &err),
                                 FX_OK);
                assert_int_equal(fx_gstate_init_work(&big, &alloc, g, &w, &err),
                                 FX_OK);
                fx_gframe *f = realloc(big.frames, FX_GRAMMAR_ROW_FRAMES *
                                                       sizeof *big.frames);
                assert_non_null(f);
                big.frames = f;
                big.frames_cap = FX_GRAMMAR_ROW_FRAMES;
                int a = run_string(&own, &w, text), b = run_string(&big, &w, text);
                if (a != b)
                    fail_msg("grammar %zu, \"%s\": %d with %u frames, %d with "
                             "%u", gi, text, a, g->row_frames, b,
                             FX_GRAMMAR_ROW_FRAMES);
                fx_gstate_free(&own, &alloc);
                fx_gstate_free(&big, &alloc);
            }
        fx_grammar_free(g);
    }
    fx_gwork_free(&w, &alloc);
}

static void test_grammar_row_memory(void **state) {
    (void)state;
    fx_model *m = NULL;
    char err[256];
    if (fx_model_load(json_model_path, NULL, &m, err, sizeof err) != FX_OK)
        fail_msg("load: %s", err);
    watch_alloc w = {0};
    fx_batcher_params p;
    fx_batcher_params_init(&p);
    p.max_rows = 2;
    p.n_ctx = 128;
    p.max_step_tokens = 32;
    p.allocator = (fx_allocator){wa_malloc, wa_realloc, wa_free, &w};
    fx_batcher *b = NULL;
    assert_int_equal(fx_batcher_create(m, &p, &b, err, sizeof err), FX_OK);
    static const char small[] = "root ::= (\"<t40>\" | \"<t41>\") \"<t42>\"\n";
    int32_t prompt[8];
    fx_request r;
    /* The first grammar builds the batcher's vocabulary trie and walk
     * scratch, once; the JSON grammar is compiled at its first use. */
    plain_request(&r, prompt, 0);
    r.grammar = small;
    r.grammar_len = sizeof small - 1;
    r.flags = 0;
    uint64_t first = submit_bytes(b, &w, &r);
    uint64_t again = submit_bytes(b, &w, &r);
    plain_request(&r, prompt, 1);
    r.flags = FX_REQUEST_JSON;
    uint64_t json_first = submit_bytes(b, &w, &r);
    uint64_t json_again = submit_bytes(b, &w, &r);
    print_message("submit bytes: small grammar %llu (first %llu), JSON %llu "
                  "(first %llu)\n", (unsigned long long)again,
                  (unsigned long long)first, (unsigned long long)json_again,
                  (unsigned long long)json_first);
    /* A two-token grammar: its program, its compile's scratch, a parse of
     * one frame and the stacks' tops (2 KiB), the prompt. */
    assert_true(again < 16 * 1024);
    /* JSON recurses: the row keeps up to FX_GRAMMAR_ROW_FRAMES frames. */
    assert_true(json_again < 64 * 1024);
    fx_batcher_free(b);
    assert_int_equal(w.live, 0);
    fx_model_free(m);
}

static int setup(void **state) {
    (void)state;
    snprintf(model_path, sizeof model_path, "%s",
             fx_test_tmp_path("reliability_fixes.gguf"));
    snprintf(json_model_path, sizeof json_model_path, "%s",
             fx_test_tmp_path("reliability_fixes_json.gguf"));
    gw_model_spec spec;
    gw_model_spec_default(&spec);
    spec.n_vocab = JSON_VOCAB;
    spec.extra_kv = json_vocab;
    gw_buf buf = {0};
    gw_build_model(&buf, &spec);
    int rc = gw_write_file(&buf, json_model_path);
    gw_free(&buf);
    if (rc != 0) return -1;
    return gw_write_tiny_model(model_path, 256, 3) == 0 ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    remove(model_path);
    remove(json_model_path);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chain_grammar_state),
        cmocka_unit_test(test_chain_grammar_submit),
        cmocka_unit_test(test_kv_bytes_capped),
        cmocka_unit_test(test_all_banned),
        cmocka_unit_test(test_grammar_row_bound),
        cmocka_unit_test(test_grammar_row_memory),
    };
    return cmocka_run_group_tests_name("reliability_fixes", tests, setup,
                                       teardown);
}
