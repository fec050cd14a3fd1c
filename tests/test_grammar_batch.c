/*
 * Grammars through the batcher on synthetic models that carry the real
 * llama-spm and gpt-2 vocabularies (tests/data/vocab): outputs under
 * json.gbnf and FX_REQUEST_JSON parse as JSON, outputs under
 * arithmetic.gbnf match it, for many seeds; a complete grammar ends the
 * row (docs/reliability.md 25); a grammar no token can continue fails its row
 * alone (docs/reliability.md 26); compile errors are refused at submit.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <ferrox.h>

#include "gguf/gguf.h"
#include "gguf_writer.h"
#include "test_util.h"

/* ---- an independent JSON checker: 2 complete, 1 a valid prefix, 0 bad */

typedef struct jp {
    const char *s;
    size_t n, i;
    int eof;   /* ran out of input where more was needed */
} jp;

static int jvalue(jp *p, int depth);

static void jws(jp *p) {
    while (p->i < p->n && strchr(" \t\n\r", p->s[p->i])) p->i++;
}

static int jneed(jp *p) {
    if (p->i >= p->n) { p->eof = 1; return 0; }
    return 1;
}

static int jlit(jp *p, const char *w) {
    for (size_t k = 0; w[k]; k++) {
        if (!jneed(p)) return 0;
        if (p->s[p->i++] != w[k]) return 0;
    }
    return 1;
}

static int jstring(jp *p) {
    p->i++; /* the opening quote */
    for (;;) {
        if (!jneed(p)) return 0;
        unsigned char c = (unsigned char)p->s[p->i++];
        if (c == '"') return 1;
        if (c < 0x20) return 0;
        if (c == '\\') {
            if (!jneed(p)) return 0;
            char e = p->s[p->i++];
            if (e == 'u') {
                for (int k = 0; k < 4; k++) {
                    if (!jneed(p)) return 0;
                    if (!strchr("0123456789abcdefABCDEF", p->s[p->i++])) return 0;
                }
            } else if (!strchr("\"\\/bfnrt", e)) {
                return 0;
            }
        }
    }
}

static int jdigits(jp *p) {
    if (!jneed(p)) return 0;
    if (p->s[p->i] < '0' || p->s[p->i] > '9') return 0;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    return 1;
}

static int jnumber(jp *p) {
    if (p->s[p->i] == '-') p->i++;
    if (!jneed(p)) return 0;
    if (p->s[p->i] == '0') p->i++;
    else if (!jdigits(p)) return 0;
    if (p->i < p->n && p->s[p->i] == '.') {
        p->i++;
        if (!jdigits(p)) return 0;
    }
    if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
        p->i++;
        if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-')) p->i++;
        if (!jdigits(p)) return 0;
    }
    return 1;
}

static int jvalue(jp *p, int depth) {
    if (depth > 500) return 0;
    jws(p);
    if (!jneed(p)) return 0;
    char c = p->s[p->i];
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        p->i++;
        jws(p);
        if (!jneed(p)) return 0;
        if (p->s[p->i] == close) { p->i++; return 1; }
        for (;;) {
            if (c == '{') {
                jws(p);
                if (!jneed(p)) return 0;
                if (p->s[p->i] != '"' || !jstring(p)) return 0;
                jws(p);
                if (!jlit(p, ":")) return 0;
            }
            if (!jvalue(p, depth + 1)) return 0;
            jws(p);
            if (!jneed(p)) return 0;
            char d = p->s[p->i++];
            if (d == close) return 1;
            if (d != ',') return 0;
        }
    }
    if (c == '"') return jstring(p);
    if (c == '-' || (c >= '0' && c <= '9')) return jnumber(p);
    if (c == 't') return jlit(p, "true");
    if (c == 'f') return jlit(p, "false");
    if (c == 'n') return jlit(p, "null");
    return 0;
}

static int json_check(const char *s, size_t n) {
    jp p = {s, n, 0, 0};
    int ok = jvalue(&p, 0);
    if (!ok) return p.eof ? 1 : 0;
    jws(&p);
    return p.i == p.n ? 2 : 0;
}

/* ---- an independent arithmetic.gbnf checker over sets of positions ----
 * Every function maps a start to the set of ends; the end of the text
 * counts as "could continue", so a cut-off output is checked as a
 * prefix. */

enum { AMAX = 1024 };
typedef struct ar {
    const char *s;
    size_t n;
    unsigned char term_memo[AMAX + 1][AMAX + 1];
    unsigned char term_done[AMAX + 1];
    int depth;
} ar;

static void a_ws(const ar *a, size_t i, unsigned char *out) {
    for (;;) {
        out[i] = 1;
        if (i < a->n && strchr(" \t\n", a->s[i])) i++;
        else break;
    }
}

static void a_expr(ar *a, size_t i, unsigned char *out);

static void a_term(ar *a, size_t i, unsigned char *out) {
    if (a->term_done[i]) {
        for (size_t j = 0; j <= a->n; j++) out[j] |= a->term_memo[i][j];
        return;
    }
    unsigned char *m = a->term_memo[i];
    memset(m, 0, a->n + 1);
    if (i == a->n) {
        m[i] = 1;
    } else if (a->s[i] >= 'a' && a->s[i] <= 'z') {
        size_t j = i + 1;
        while (j < a->n && (strchr("abcdefghijklmnopqrstuvwxyz0123456789_", a->s[j]))) j++;
        /* Any split point of the identifier is not an option: the class
         * loop is greedy only in effect, so take every j' in (i, j]. */
        for (size_t k = i + 1; k <= j; k++) a_ws(a, k, m);
    } else if (a->s[i] >= '0' && a->s[i] <= '9') {
        size_t j = i + 1;
        while (j < a->n && a->s[j] >= '0' && a->s[j] <= '9') j++;
        for (size_t k = i + 1; k <= j; k++) a_ws(a, k, m);
    } else if (a->s[i] == '(' && a->depth < 200) {
        unsigned char *w = calloc(a->n + 1, 1), *e = calloc(a->n + 1, 1);
        a_ws(a, i + 1, w);
        a->depth++;
        for (size_t k = 0; k <= a->n; k++)
            if (w[k]) a_expr(a, k, e);
        a->depth--;
        for (size_t k = 0; k <= a->n; k++) {
            if (!e[k]) continue;
            if (k == a->n) m[k] = 1;
            else if (a->s[k] == ')') a_ws(a, k + 1, m);
        }
        free(w);
        free(e);
    }
    a->term_done[i] = 1;
    for (size_t j = 0; j <= a->n; j++) out[j] |= m[j];
}

static void a_expr(ar *a, size_t i, unsigned char *out) {
    unsigned char *cur = calloc(a->n + 1, 1), *seen = calloc(a->n + 1, 1);
    a_term(a, i, cur);
    /* Closure under ([-+*\/] term). */
    int grew = 1;
    while (grew) {
        grew = 0;
        for (size_t k = 0; k <= a->n; k++) {
            if (!cur[k] || seen[k]) continue;
            seen[k] = 1;
            out[k] = 1;
            if (k == a->n) continue;
            if (strchr("-+*/", a->s[k])) {
                a_term(a, k + 1, cur);
                grew = 1;
            }
        }
    }
    free(cur);
    free(seen);
}

/* 2: a whole sentence of the grammar, 1: a prefix of one, 0: neither. */
static int arith_check(const char *s, size_t n) {
    if (n > AMAX) return 0;
    /* Position sets are AMAX + 1 long whatever n is: with n + 1, GCC -O3
     * inlines the short literals of the tests and warns about writes it
     * cannot see are bounded by n (-Wstringop-overflow). */
    ar *a = calloc(1, sizeof *a);
    a->s = s;
    a->n = n;
    unsigned char *starts = calloc(AMAX + 1, 1), *ends = calloc(AMAX + 1, 1);
    unsigned char *done = calloc(AMAX + 1, 1);
    starts[0] = 1;
    int result = 0;
    for (size_t i = 0; i <= n; i++) {
        if (!starts[i] || done[i]) continue;
        done[i] = 1;
        unsigned char *e = calloc(AMAX + 1, 1), *w = calloc(AMAX + 1, 1),
                      *t = calloc(AMAX + 1, 1);
        a_expr(a, i, e);
        for (size_t k = 0; k <= n; k++) {
            if (!e[k]) continue;
            if (k == n) { result = result ? result : 1; continue; }
            if (s[k] == '=') a_ws(a, k + 1, w);
        }
        for (size_t k = 0; k <= n; k++)
            if (w[k]) {
                if (k == n) result = result ? result : 1;
                else a_term(a, k, t);
            }
        for (size_t k = 0; k <= n; k++) {
            if (!t[k]) continue;
            if (k == n) result = result ? result : 1;
            else if (s[k] == '\n') {
                if (k + 1 == n) result = 2;
                else starts[k + 1] = 1;
            }
        }
        free(e);
        free(w);
        free(t);
    }
    free(starts);
    free(ends);
    free(done);
    free(a);
    return result;
}

/* ---- models ---- */

static char spm_path[4096], gpt2_path[4096], small_path[4096];

typedef struct vsrc {
    fx_gguf *g;
} vsrc;

static size_t copy_vocab(gw_buf *b, void *user) {
    const vsrc *src = user;
    size_t copied = 0;
    for (uint64_t i = 0; i < src->g->n_kv; i++) {
        const fx_gguf_kv *kv = &src->g->kv[i];
        if (strncmp(kv->key, "tokenizer.", 10) != 0) continue;
        gw_bytes(b, src->g->base + kv->offset, (size_t)(kv->end_offset - kv->offset));
        copied++;
    }
    return copied;
}

/* A tiny model over a vocabulary from tests/data/vocab (0 on success). */
static int make_model(const char *vocab_rel, char *out, size_t out_size,
                      const char *name) {
    const char *vp = fx_test_data_path(vocab_rel);
    fx_alloc alloc;
    fx_alloc_init(&alloc, NULL);
    fx_error err;
    vsrc src = {NULL};
    if (fx_gguf_open(vp, &alloc, &src.g, &err) != FX_OK) return -1;
    const fx_gguf_kv *tokens = fx_gguf_find(src.g, "tokenizer.ggml.tokens");
    gw_model_spec spec;
    gw_model_spec_default(&spec);
    spec.n_vocab = (uint32_t)tokens->count;
    spec.n_embd = 32;
    spec.n_layer = 1;
    spec.n_head = 2;
    spec.n_head_kv = 2;
    spec.n_ff = 64;
    spec.n_ctx = 512;
    spec.extra_kv = copy_vocab;
    spec.extra_user = &src;
    snprintf(out, out_size, "%s", fx_test_tmp_path(name));
    int rc = gw_write_model(out, &spec);
    fx_gguf_close(src.g);
    return rc;
}

static fx_model *load(const char *path) {
    if (!path[0]) return NULL;
    fx_model *m = NULL;
    char err[256];
    if (fx_model_load(path, NULL, &m, err, sizeof err) != FX_OK) fail_msg("%s", err);
    return m;
}

static fx_batcher *batcher(fx_model *m, uint32_t rows) {
    fx_batcher_params p;
    fx_batcher_params_init(&p);
    p.max_rows = rows;
    p.n_ctx = 256;
    fx_batcher *b = NULL;
    char err[256];
    if (fx_batcher_create(m, &p, &b, err, sizeof err) != FX_OK) fail_msg("%s", err);
    return b;
}

typedef struct out {
    char text[16384];
    size_t len;
    int32_t ids[256];
    size_t n_ids;
    int done;
    fx_finish_reason finish;
    fx_status status;
    int32_t stop_index;
} out;

static void drain(fx_batcher *b) {
    for (int guard = 0; guard < 100000; guard++) {
        fx_event ev;
        while (fx_poll(b, &ev)) {
            out *o = ev.user;
            if (ev.type == FX_EVENT_TEXT) {
                assert_true(o->len + ev.text_len < sizeof o->text);
                memcpy(o->text + o->len, ev.text, ev.text_len);
                o->len += ev.text_len;
            } else {
                o->done++;
                o->finish = ev.finish;
                o->status = ev.status;
                o->stop_index = ev.stop_index;
                o->n_ids = ev.n_tokens;
                memcpy(o->ids, ev.tokens, ev.n_tokens * sizeof *o->ids);
            }
        }
        if (fx_batcher_pending(b) == 0) return;
        assert_int_equal(fx_step(b), FX_OK);
    }
    fail_msg("did not finish");
}

static void request(fx_request *r, out *o, uint64_t seed, uint32_t max_tokens) {
    fx_request_init(r);
    r->prompt = "Answer:";
    r->prompt_len = 7;
    r->max_tokens = max_tokens;
    r->temperature = 1.0f;
    r->top_k = 64;
    r->seed = seed;
    r->user = o;
}

/* Strips a U+FFFD the stream flushes for a character cut off by the
 * length limit. */
static size_t trim_cut(const out *o) {
    size_t n = o->len;
    if (o->finish == FX_FINISH_LENGTH && n >= 3 && memcmp(o->text + n - 3, "\xEF\xBF\xBD", 3) == 0)
        n -= 3;
    return n;
}

enum { N_SEEDS = 32, ROWS = 16 };

/* Runs N_SEEDS requests (grammar text, or the JSON flag when NULL) and
 * checks every output with `check`; returns how many were complete. */
static int run_seeds_biased(const char *model_path, const char *grammar,
                            int (*check)(const char *, size_t), const char *what,
                            const char *const *favour, size_t n_favour) {
    fx_model *m = load(model_path);
    /* Tokens of the favoured texts get +6: a random model then finishes
     * sentences of a grammar it would otherwise wander in. */
    /* Every token whose piece is exactly a favoured text: tokenizing the
     * text instead would give SentencePiece's "\xE2\x96\x81=" for "=",
     * a token the grammar rarely allows where "=" is due. */
    fx_logit_bias bias[64];
    size_t n_bias = 0;
    fx_model_info info;
    fx_model_info_init(&info);
    assert_int_equal(fx_model_get_info(m, &info), FX_OK);
    for (uint32_t id = 0; id < info.n_vocab && n_favour; id++) {
        char piece[64];
        size_t n = 0;
        if (fx_token_to_piece(m, (int32_t)id, 0, piece, sizeof piece, &n) != FX_OK) continue;
        for (size_t i = 0; i < n_favour; i++)
            if (n == strlen(favour[i]) && memcmp(piece, favour[i], n) == 0 && n_bias < 63)
                bias[n_bias++] = (fx_logit_bias){(int32_t)id, 6.0f};
    }
    /* ...and end-of-sequence, so whole sentences end there. */
    if (n_favour && fx_model_special_token(m, FX_TOKEN_EOS) >= 0)
        bias[n_bias++] = (fx_logit_bias){fx_model_special_token(m, FX_TOKEN_EOS), 6.0f};
    fx_batcher *b = batcher(m, ROWS);
    out *o = calloc(N_SEEDS, sizeof *o);
    size_t glen = grammar ? strlen(grammar) : 0;
    for (int i = 0; i < N_SEEDS; i++) {
        fx_request r;
        request(&r, &o[i], 1000 + (uint64_t)i, 96);
        if (grammar) {
            r.grammar = grammar;
            r.grammar_len = glen;
        } else {
            r.flags |= FX_REQUEST_JSON;
        }
        r.logit_bias = bias;
        r.n_logit_bias = n_bias;
        fx_row *row;
        if (fx_submit(b, &r, &row) != FX_OK) fail_msg("%s", fx_batcher_errmsg(b));
    }
    drain(b);
    int complete = 0;
    for (int i = 0; i < N_SEEDS; i++) {
        assert_int_equal(o[i].done, 1);
        if (o[i].finish != FX_FINISH_EOS && o[i].finish != FX_FINISH_LENGTH)
            fail_msg("%s seed %d: finish %d status %d", what, i, o[i].finish, o[i].status);
        int c = check(o[i].text, trim_cut(&o[i]));
        if (o[i].finish == FX_FINISH_EOS && c != 2)
            fail_msg("%s seed %d ended but is not complete: [%.*s]", what, i,
                     (int)o[i].len, o[i].text);
        if (c == 0)
            fail_msg("%s seed %d is not a prefix: [%.*s]", what, i, (int)o[i].len,
                     o[i].text);
        if (c == 2) complete++;
    }
    /* A fixed seed reproduces exactly, alone and in another batch. */
    fx_batcher *b1 = batcher(m, 1);
    out *again = calloc(1, sizeof *again);
    fx_request r;
    request(&r, again, 1000 + 5, 96);
    if (grammar) {
        r.grammar = grammar;
        r.grammar_len = glen;
    } else {
        r.flags |= FX_REQUEST_JSON;
    }
    r.logit_bias = bias;
    r.n_logit_bias = n_bias;
    fx_row *row;
    assert_int_equal(fx_submit(b1, &r, &row), FX_OK);
    drain(b1);
    assert_int_equal(again->n_ids, o[5].n_ids);
    assert_memory_equal(again->ids, o[5].ids, again->n_ids * sizeof *again->ids);
    fx_batcher_free(b1);
    free(again);
    print_message("%s: %d of %d seeds are whole sentences, the rest valid "
                  "prefixes cut by max_tokens\n", what, complete, N_SEEDS);
    free(o);
    fx_batcher_free(b);
    fx_model_free(m);
    return complete;
}

static int run_seeds(const char *model_path, const char *grammar,
                     int (*check)(const char *, size_t), const char *what) {
    return run_seeds_biased(model_path, grammar, check, what, NULL, 0);
}

static char *data_text(const char *rel) {
    const char *p = fx_test_data_path(rel);
    size_t len;
    return fx_test_read_file(p, &len);
}

/* Closing punctuation: with these favoured a random model closes strings,
 * arrays and objects soon after opening them, so the outputs are whole JSON
 * values a parser accepts rather than prefixes cut by max_tokens. The
 * grammar still decides every token; the bias only tilts the choice. */
static const char *const json_closers[] = {"\"", "}", "]"};

static void test_json_flag(void **state) {
    (void)state;
    assert_true(run_seeds(spm_path, NULL, json_check, "JSON flag, llama-spm") > 0);
    assert_true(run_seeds(gpt2_path, NULL, json_check, "JSON flag, gpt-2") > 0);
    assert_true(run_seeds_biased(spm_path, NULL, json_check, "JSON flag + closers, llama-spm",
                                 json_closers, 3) == N_SEEDS);
    assert_true(run_seeds_biased(gpt2_path, NULL, json_check, "JSON flag + closers, gpt-2",
                                 json_closers, 3) == N_SEEDS);
}

static void test_json_gbnf(void **state) {
    (void)state;
    char *g = data_text("grammars/json.gbnf");
    assert_non_null(g);
    run_seeds(spm_path, g, json_check, "json.gbnf, llama-spm");
    run_seeds(gpt2_path, g, json_check, "json.gbnf, gpt-2");
    assert_true(run_seeds_biased(spm_path, g, json_check, "json.gbnf + closers, llama-spm",
                                 json_closers, 3) == N_SEEDS);
    assert_true(run_seeds_biased(gpt2_path, g, json_check, "json.gbnf + closers, gpt-2",
                                 json_closers, 3) == N_SEEDS);
    free(g);
}

static void test_arithmetic_gbnf(void **state) {
    (void)state;
    char *g = data_text("grammars/arithmetic.gbnf");
    assert_non_null(g);
    assert_int_equal(arith_check("1+2=3\n", 6), 2);
    assert_int_equal(arith_check("(a *b_2)/7=x\n1=1\n", 17), 2);
    assert_int_equal(arith_check("(a *b", 5), 1);
    assert_int_equal(arith_check("1+=3\n", 5), 0);
    run_seeds(spm_path, g, arith_check, "arithmetic.gbnf, llama-spm");
    run_seeds(gpt2_path, g, arith_check, "arithmetic.gbnf, gpt-2");
    /* Logit bias pushing towards "=", newline, "7" and EOS: the grammar
     * still has the last word on every token. */
    static const char *const favour[] = {"=", "\n", "7"};
    assert_true(run_seeds_biased(spm_path, g, arith_check,
                                 "arithmetic.gbnf + bias, llama-spm", favour, 3) > 16);
    /* Whole equations, checked by the independent recognizer above. */
    assert_true(run_seeds_biased(gpt2_path, g, arith_check,
                                 "arithmetic.gbnf + bias, gpt-2", favour, 3) > 16);
    free(g);
}

/* A tool call's shape, through fx_json_schema_to_grammar: every output is
 * a whole JSON object (the root ends at its brace, so EOS is forced
 * there) whose "tool" is one of the enum's names. */
static const char tool_schema[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"tool\":{\"enum\":[\"get_weather\",\"set_timer\"]},"
    "\"args\":{\"type\":\"object\",\"properties\":{"
    "\"city\":{\"type\":\"string\",\"maxLength\":12},"
    "\"minutes\":{\"type\":\"integer\"}}}},"
    "\"required\":[\"tool\",\"args\"]}";

static int tool_call_check(const char *s, size_t n) {
    int c = json_check(s, n);
    if (c != 2) return c;
    const char *k = strstr(s, "\"tool\"");
    if (s[0] != '{' || !k || (size_t)(k - s) > 4) return 0;
    k += 6;
    while (*k == ' ' || *k == '\n' || *k == '\t' || *k == ':') k++;
    return strncmp(k, "\"get_weather\"", 13) == 0 || strncmp(k, "\"set_timer\"", 11) == 0
               ? 2 : 0;
}

static void test_json_schema(void **state) {
    (void)state;
    char g[4096], msg[256];
    size_t need = 0;
    assert_int_equal(fx_json_schema_to_grammar(tool_schema, 0, NULL, 0, &need, msg, sizeof msg),
                     FX_ERR_BUFFER_TOO_SMALL);
    assert_true(need > 1 && need <= sizeof g);
    assert_int_equal(fx_json_schema_to_grammar(tool_schema, strlen(tool_schema), g, sizeof g,
                                               NULL, msg, sizeof msg), FX_OK);
    assert_int_equal(strlen(g) + 1, need);
    assert_int_equal(run_seeds_biased(spm_path, g, tool_call_check, "tool schema + closers, "
                                      "llama-spm", json_closers, 3), N_SEEDS);
    assert_int_equal(run_seeds_biased(gpt2_path, g, tool_call_check, "tool schema + closers, "
                                      "gpt-2", json_closers, 3), N_SEEDS);
    /* Errors say what and where, and leave the buffer empty. */
    assert_int_equal(fx_json_schema_to_grammar("{\"multipleOf\":2}", 0, g, sizeof g, &need, msg,
                                               sizeof msg), FX_ERR_INVALID_ARG);
    assert_string_equal(g, "");
    assert_non_null(strstr(msg, "unsupported keyword multipleOf"));
    assert_int_equal(fx_json_schema_to_grammar(NULL, 0, g, sizeof g, &need, msg, sizeof msg),
                     FX_ERR_INVALID_ARG);
    assert_int_equal(fx_json_schema_to_grammar("{}", 0, NULL, 8, &need, NULL, 0),
                     FX_ERR_INVALID_ARG);
}

/* docs/reliability.md 25: once the grammar is complete and nothing may follow,
 * the row ends with EOS, even when asked to ignore EOS. */
static void test_complete_forces_eos(void **state) {
    (void)state;
    fx_model *m = load(spm_path);
    fx_batcher *b = batcher(m, 4);
    out o[2];
    memset(o, 0, sizeof o);
    for (int i = 0; i < 2; i++) {
        fx_request r;
        request(&r, &o[i], 7 + (uint64_t)i, 50);
        r.grammar = "root ::= \"yes\" | \"no\"\n";
        r.grammar_len = strlen(r.grammar);
        if (i == 1) r.flags |= FX_REQUEST_IGNORE_EOS;
        fx_row *row;
        assert_int_equal(fx_submit(b, &r, &row), FX_OK);
    }
    drain(b);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(o[i].finish, FX_FINISH_EOS);
        assert_true((o[i].len == 3 && memcmp(o[i].text, "yes", 3) == 0) ||
                    (o[i].len == 2 && memcmp(o[i].text, "no", 2) == 0));
        assert_int_equal(o[i].stop_index, 2); /* llama-spm's </s> */
        assert_int_equal(o[i].ids[o[i].n_ids - 1], 2);
    }
    fx_batcher_free(b);
    fx_model_free(m);
}

/* docs/reliability.md 26: a grammar the vocabulary cannot continue fails its row
 * alone; the rows beside it produce exactly what they produce alone. */
static void test_dead_end_fails_alone(void **state) {
    (void)state;
    fx_model *m = load(small_path);
    out solo[2], mixed[3];
    memset(solo, 0, sizeof solo);
    memset(mixed, 0, sizeof mixed);
    const char *g_ok = "root ::= (\"<t7>\" | \"<t9>\")+\n";
    /* "<t5>" is a token, then nothing in the vocabulary starts with "x". */
    const char *g_dead = "root ::= \"<t5>\" \"x\"\n";
    for (int pass = 0; pass < 2; pass++) {
        fx_batcher *b = batcher(m, 4);
        out *o = pass ? mixed : solo;
        for (int i = 0; i < (pass ? 3 : 2); i++) {
            fx_request r;
            request(&r, &o[i], 11 + (uint64_t)i, 12);
            static const int32_t ids[] = {3, 4};
            r.prompt = NULL;
            r.prompt_tokens = ids;
            r.n_prompt_tokens = 2;
            if (i == 1) {
                r.grammar = g_ok;
                r.grammar_len = strlen(g_ok);
            }
            if (i == 2) {
                r.grammar = g_dead;
                r.grammar_len = strlen(g_dead);
            }
            fx_row *row;
            if (fx_submit(b, &r, &row) != FX_OK) fail_msg("%s", fx_batcher_errmsg(b));
        }
        drain(b);
        fx_batcher_free(b);
    }
    assert_int_equal(mixed[2].finish, FX_FINISH_ERROR);
    assert_int_equal(mixed[2].status, FX_ERR_GRAMMAR);
    assert_int_equal(mixed[2].n_ids, 1); /* "<t5>", then the dead end */
    assert_int_equal(mixed[2].len, 4);
    assert_memory_equal(mixed[2].text, "<t5>", 4);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(mixed[i].finish, solo[i].finish);
        assert_int_equal(mixed[i].n_ids, solo[i].n_ids);
        assert_memory_equal(mixed[i].ids, solo[i].ids, solo[i].n_ids * sizeof(int32_t));
    }
    /* Only the grammar's tokens, then perhaps EOS once it is complete. */
    for (size_t k = 0; k < mixed[1].n_ids; k++)
        assert_true(mixed[1].ids[k] == 7 || mixed[1].ids[k] == 9 ||
                    (k + 1 == mixed[1].n_ids && k > 0 && mixed[1].ids[k] == 2));
    fx_model_free(m);
}

static void test_submit_errors(void **state) {
    (void)state;
    fx_model *m = load(small_path);
    fx_batcher *b = batcher(m, 2);
    out o;
    memset(&o, 0, sizeof o);
    fx_request r;
    request(&r, &o, 1, 4);
    r.grammar = "root ::= \"a\"\nitem ::= [abc\n";
    r.grammar_len = strlen(r.grammar);
    fx_row *row = NULL;
    assert_int_equal(fx_submit(b, &r, &row), FX_ERR_GRAMMAR);
    assert_non_null(strstr(fx_batcher_errmsg(b), "line 2, column 10"));
    r.flags |= FX_REQUEST_JSON;
    assert_int_equal(fx_submit(b, &r, &row), FX_ERR_INVALID_ARG);
    r.flags = 0;
    r.grammar = "root ::= \"x\"\n";
    r.grammar_len = strlen(r.grammar);
    r.grammar_root = "start";
    assert_int_equal(fx_submit(b, &r, &row), FX_ERR_GRAMMAR);
    assert_non_null(strstr(fx_batcher_errmsg(b), "no rule named 'start'"));
    assert_int_equal(fx_batcher_pending(b), 0);
    /* A request of the first layout ignores what lies past it: no grammar,
     * the new samplers at their defaults. */
    request(&r, &o, 1, 4);
    r.struct_size = (uint32_t)(offsetof(fx_request, user) + sizeof(void *));
    r.grammar = "not a grammar";
    r.grammar_len = 13;
    r.repeat_penalty = -5.0f;
    r.n_logprobs = 1000;
    assert_int_equal(fx_submit(b, &r, &row), FX_OK);
    drain(b);
    assert_int_equal(o.done, 1);
    assert_int_equal(o.finish, FX_FINISH_LENGTH);
    fx_batcher_free(b);
    fx_model_free(m);
}

static int setup(void **state) {
    (void)state;
    if (make_model("vocab/ggml-vocab-llama-spm.gguf", spm_path, sizeof spm_path,
                   "gram-spm.gguf") != 0 ||
        make_model("vocab/ggml-vocab-gpt-2.gguf", gpt2_path, sizeof gpt2_path,
                   "gram-gpt2.gguf") != 0)
        return -1;
    gw_model_spec spec;
    gw_model_spec_default(&spec);
    spec.n_ctx = 256;
    snprintf(small_path, sizeof small_path, "%s", fx_test_tmp_path("gram-small.gguf"));
    return gw_write_model(small_path, &spec);
}

static int teardown(void **state) {
    (void)state;
    if (spm_path[0]) remove(spm_path);
    if (gpt2_path[0]) remove(gpt2_path);
    remove(small_path);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_submit_errors),
        cmocka_unit_test(test_complete_forces_eos),
        cmocka_unit_test(test_dead_end_fails_alone),
        cmocka_unit_test(test_json_flag),
        cmocka_unit_test(test_json_gbnf),
        cmocka_unit_test(test_arithmetic_gbnf),
        cmocka_unit_test(test_json_schema),
    };
    return cmocka_run_group_tests_name("grammar_batch", tests, setup, teardown);
}
