#define _POSIX_C_SOURCE 200809L
#include "sm_gen.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "byte_model.h"
#include "grammar_gen.h"
#include "text_ref.h"

/* ---- random numbers (splitmix64: seeds reproduce a run exactly) ---- */

void sm_seed(sm_rng *g, uint64_t seed) { g->s = seed; }

uint64_t sm_next(sm_rng *g) {
    uint64_t z = (g->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t sm_below(sm_rng *g, uint64_t n) { return sm_next(g) % n; }

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) fail_msg("out of memory in the test");
    return p;
}

/* memcmp, for buffers that may be NULL when n is 0 (as memcmp's may not). */
static int mem_diff(const void *a, const void *b, size_t n) {
    return n ? memcmp(a, b, n) : 0;
}

static int in_list(const int32_t *l, size_t n, int32_t t) {
    for (size_t i = 0; i < n; i++) if (l[i] == t) return 1;
    return 0;
}

/* ---- pieces ---- */

static char **piece;
static size_t *piece_len;
static uint32_t n_vocab;

void sm_pieces_init(const fx_model *m) {
    n_vocab = fx_model_vocab_size(m);
    piece = xmalloc(n_vocab * sizeof *piece);
    piece_len = xmalloc(n_vocab * sizeof *piece_len);
    for (uint32_t t = 0; t < n_vocab; t++) {
        char buf[256];
        size_t n = 0;
        if (fx_token_to_piece(m, (int32_t)t, 0, buf, sizeof buf, &n) != FX_OK)
            fail_msg("piece of token %u", t);
        piece[t] = xmalloc(n);
        memcpy(piece[t], buf, n);
        piece_len[t] = n;
    }
}

void sm_pieces_free(void) {
    for (uint32_t t = 0; piece && t < n_vocab; t++) free(piece[t]);
    free(piece);
    free(piece_len);
    piece_len = NULL;
    piece = NULL;
}

/* The raw bytes of tokens[0..n): what the stream sanitizes. */
static char *concat(const int32_t *tokens, size_t n, size_t *len) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) total += piece_len[tokens[i]];
    char *s = xmalloc(total);
    *len = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(s + *len, piece[tokens[i]], piece_len[tokens[i]]);
        *len += piece_len[tokens[i]];
    }
    return s;
}

/* ---- rows ---- */

sm_row *sm_row_new(size_t id, uint64_t serial) {
    sm_row *r = calloc(1, sizeof *r);
    if (!r) fail_msg("out of memory in the test");
    r->magic = SM_ROW_MAGIC;
    r->id = id;
    r->serial = serial;
    r->forced = -1;
    r->expect_prompt = -1;
    return r;
}

void sm_row_free(sm_row *r) {
    if (!r) return;
    for (size_t i = 0; i < r->n_stop; i++) free(r->stops[i]);
    free(r->stops);
    free(r->stop_toks);
    free(r->banned);
    free(r->text);
    free(r->tev);
    if (r->solo) {
        sm_request_free(r->solo);
        free(r->solo);
    }
    free(r);
}

/* ---- grammars: a pool, each with what its text must look like ---- */

enum { G_NONE, G_APLUS_B, G_CLASS, G_UTF, G_ONLY_A, G_Y, G_WIDE };

typedef struct gpool {
    const char *text;
    const char *root;
    int valid;
    int check;
    char *owned;
    size_t len;
} gpool;

static gpool pool[] = {
    {"root ::= \"a\"+ | \"b\"\n", NULL, 1, G_APLUS_B, NULL, 0},
    {"root ::= [a-c]{1,5} \".\"", NULL, 1, G_CLASS, NULL, 0},
    {"root ::= (\"\xe6\x97\xa5\xe6\x9c\xac\" | \"\xc3\xa9\")+ \"!\"", NULL, 1, G_UTF, NULL, 0},
    {"root ::= \"z\"\nitem ::= \"y\"+ # comment\n", "item", 1, G_Y, NULL, 0},
    {"root ::= \"z\"\n", "nope", 0, G_NONE, NULL, 0},
    {"root ::= root \"a\" | \"a\"", NULL, 0, G_NONE, NULL, 0},
    {"root ::= undefined-rule", NULL, 0, G_NONE, NULL, 0},
    {"root ::= \"a", NULL, 0, G_NONE, NULL, 0},
    {"root ::= \"a\"{1001}", NULL, 0, G_NONE, NULL, 0},
    {"root ::= (\"\")*", NULL, 0, G_NONE, NULL, 0},
    {"", NULL, 0, G_NONE, NULL, 0},
    {NULL, NULL, 1, G_ONLY_A, NULL, 300},   /* gg_chain(300) */
    {NULL, NULL, 1, G_WIDE, NULL, 256},     /* gg_wide(256) */
    {NULL, NULL, 0, G_NONE, NULL, 257},     /* gg_wide(257) */
    {NULL, NULL, 0, G_NONE, NULL, 129},     /* gg_nest(129) */
    {NULL, NULL, 0, G_NONE, NULL, 4200},    /* gg_chain(4200): issue 36 */
};
#define N_POOL (sizeof pool / sizeof pool[0])

static const gpool *pool_get(size_t i) {
    gpool *p = &pool[i];
    if (p->text) {
        if (!p->len) p->len = strlen(p->text);
        return p;
    }
    if (!p->owned) {
        unsigned n = (unsigned)p->len;
        if (i == N_POOL - 5) p->owned = gg_chain(n, &p->len);
        else if (i == N_POOL - 4 || i == N_POOL - 3) p->owned = gg_wide(n, &p->len);
        else if (i == N_POOL - 2) p->owned = gg_nest(n, &p->len);
        else p->owned = gg_chain(n, &p->len);
    }
    return p;
}

/* 1 if text is a valid beginning (complete 0) or a whole sentence
 * (complete 1) of the pool grammar `check`. */
static int grammar_ok(int check, const char *t, size_t n, int complete) {
    size_t i = 0;
    switch (check) {
    case G_APLUS_B:
        if (n == 0) return !complete;
        if (t[0] == 'b') return n == 1;
        for (; i < n; i++) if (t[i] != 'a') return 0;
        return 1;
    case G_CLASS:
        for (; i < n && i < 5 && t[i] >= 'a' && t[i] <= 'c'; i++) {}
        if (i == n) return !complete;
        return i > 0 && t[i] == '.' && i + 1 == n;
    case G_UTF:
        while (i < n) {
            if (n - i >= 6 && !memcmp(t + i, "\xe6\x97\xa5\xe6\x9c\xac", 6)) i += 6;
            else if (n - i >= 2 && !memcmp(t + i, "\xc3\xa9", 2)) i += 2;
            else if (t[i] == '!' && i > 0 && i + 1 == n) return 1;
            else
                return !complete &&
                       ((n - i < 6 && !memcmp(t + i, "\xe6\x97\xa5\xe6\x9c\xac", n - i)) ||
                        (n - i < 2 && !memcmp(t + i, "\xc3\xa9", n - i)));
        }
        return !complete;
    case G_ONLY_A:
    case G_Y:
        for (; i < n; i++) if (t[i] != (check == G_Y ? 'y' : 'a')) return 0;
        return !complete || n > 0;
    case G_WIDE: {
        /* "x" and a number below 256 without a leading zero. */
        if (n == 0) return !complete;
        if (t[0] != 'x' || n > 4) return 0;
        long v = 0;
        for (i = 1; i < n; i++) {
            if (t[i] < '0' || t[i] > '9') return 0;
            v = v * 10 + (t[i] - '0');
        }
        if (n > 2 && t[1] == '0') return 0;
        return v < 256 && (!complete || n > 1);
    }
    default: return 1;
    }
}

/* A random GBNF text from rules root, r1 and r2: literals (multi-byte
 * too), classes, groups, repetitions, references (left recursion
 * included), and now and then a syntax error. It may or may not compile. */
static void rand_expr(sm_rng *g, char *out, size_t *n, size_t cap, int depth) {
    static const char *const atoms[] = {
        "\"a\"", "\"ab\"", "[a-c]", "[^x]", ".", "\"\\u00e9\"",
        "\"\xe6\x97\xa5\xe6\x9c\xac\"", "r1", "r2", "root", "\"\"", "[0-9]",
        "\"\\n\"", "\"", "(", "[z-a]"};
    static const char *const reps[] = {"", "", "*", "+", "?", "{0,3}", "{2}", "{1,}"};
    size_t k = (size_t)sm_below(g, depth > 2 ? 13 : 16);
    if (*n + 64 > cap) return;
    if (k >= 13 && depth <= 2) {
        int alts = 1 + (int)sm_below(g, 3);
        out[(*n)++] = '(';
        for (int i = 0; i < alts; i++) {
            if (i) *n += (size_t)snprintf(out + *n, cap - *n, " | ");
            rand_expr(g, out, n, cap, depth + 1);
            out[(*n)++] = ' ';
            rand_expr(g, out, n, cap, depth + 1);
        }
        out[(*n)++] = ')';
    } else {
        *n += (size_t)snprintf(out + *n, cap - *n, "%s", atoms[sm_below(g, 16)]);
    }
    *n += (size_t)snprintf(out + *n, cap - *n, "%s", reps[sm_below(g, 8)]);
}

static char *rand_grammar(sm_rng *g, size_t *len) {
    size_t cap = 2048, n = 0;
    char *out = xmalloc(cap);
    static const char *const names[] = {"root", "r1", "r2"};
    for (int r = 0; r < 3; r++) {
        n += (size_t)snprintf(out + n, cap - n, "%s ::= ", names[r]);
        int parts = 1 + (int)sm_below(g, 3);
        for (int i = 0; i < parts; i++) {
            rand_expr(g, out, &n, cap, 0);
            out[n++] = ' ';
        }
        out[n++] = '\n';
    }
    *len = n;
    return out;
}

/* ---- requests ---- */

static void *keep(sm_request *q, void *p) {
    if (q->n_bufs == (int)(sizeof q->bufs / sizeof q->bufs[0]))
        fail_msg("too many buffers in one request");
    q->bufs[q->n_bufs++] = p;
    return p;
}

void sm_request_free(sm_request *q) {
    for (int i = 0; i < q->n_bufs; i++) free(q->bufs[i]);
    q->n_bufs = 0;
}

/* U+FFFD too (a host may stop on the first byte that is not UTF-8), and
 * one long enough to hold back most of a row's text. */
static const char *const stop_pool[] = {
    "a", "ab", "aab", "stop", "\xe6\x97\xa5", "\xc3\xa9t", "}", "\n", "zz",
    "\xf0\x9f\x98\x80", "ba", "b", ".", "c", "\xef\xbf\xbd", "a\xef\xbf\xbd",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab"};
#define N_STOP_POOL (sizeof stop_pool / sizeof stop_pool[0])

/* Random text: pieces, random bytes (invalid UTF-8 too), special-token
 * text. Exactly len bytes, not NUL-terminated. */
static char *gen_text(sm_rng *g, size_t want, size_t *len) {
    char *s = xmalloc(want + 16);
    size_t n = 0;
    while (n < want) {
        uint64_t k = sm_below(g, 10);
        if (k < 5) {
            uint32_t t = FX_BM_BYTE0 + 256 + (uint32_t)sm_below(g, n_vocab - FX_BM_BYTE0 - 256);
            size_t m = piece_len[t] < 16 ? piece_len[t] : 16;
            memcpy(s + n, piece[t], m);
            n += m;
        } else if (k < 8) {
            s[n++] = (char)sm_below(g, 256);
        } else if (k < 9) {
            memcpy(s + n, "<|im_end|>", 10);
            n += 10;
        } else {
            s[n++] = ' ';
        }
    }
    *len = n;
    return s;
}

static size_t count_tokens(const fx_model *m, const char *text, size_t len,
                           uint32_t flags) {
    size_t n = 0;
    fx_status st = fx_tokenize(m, text, len, flags, NULL, 0, &n);
    if (st != FX_OK && st != FX_ERR_BUFFER_TOO_SMALL)
        fail_msg("fx_tokenize: %s", fx_status_str(st));
    return n;
}

static void gen_sampling(sm_rng *g, fx_request *q, sm_row *r) {
    static const float temps[] = {0.0f, 0.7f, 1.5f, -1.0f, 1e-30f, 1e30f, INFINITY};
    static const float ps[] = {0.0f, 0.5f, 1.0f, 2.0f, -1.0f};
    if (sm_below(g, 2)) {
        r->plain_greedy = 1;
        return;
    }
    q->temperature = temps[sm_below(g, 7)];
    q->seed = sm_next(g);
    if (sm_below(g, 3) == 0) q->top_k = (uint32_t)(sm_below(g, 3) ? sm_below(g, 400) : UINT32_MAX);
    if (sm_below(g, 3) == 0) q->top_p = ps[sm_below(g, 5)];
    if (sm_below(g, 3) == 0) q->min_p = ps[sm_below(g, 5)];
    if (sm_below(g, 4) == 0) q->typical_p = ps[sm_below(g, 5)];
    if (sm_below(g, 4) == 0) q->repeat_penalty = sm_below(g, 2) ? 1.3f : 1e30f;
    if (sm_below(g, 4) == 0) q->presence_penalty = sm_below(g, 2) ? 0.5f : -1e30f;
    if (sm_below(g, 4) == 0) q->frequency_penalty = sm_below(g, 2) ? 0.5f : INFINITY;
    if (sm_below(g, 4) == 0) q->penalty_last_n = sm_below(g, 2) ? 0 : UINT32_MAX;
    r->plain_greedy = q->temperature <= 0.0f && q->repeat_penalty == 1.0f &&
                      q->presence_penalty == 0.0f && q->frequency_penalty == 0.0f;
}

static void gen_bias(sm_rng *g, sm_request *qq, sm_row *r) {
    fx_request *q = &qq->big.r;
    uint64_t k = sm_below(g, 10);
    if (k >= 4) return;
    r->has_bias = 1;
    r->banned = calloc(n_vocab, 1);
    if (!r->banned) fail_msg("out of memory in the test");
    size_t n = k == 0 ? n_vocab : 1 + (size_t)sm_below(g, 8);
    fx_logit_bias *b = keep(qq, xmalloc(n * sizeof *b));
    for (size_t i = 0; i < n; i++) {
        b[i].token = k == 0 ? (int32_t)i : (int32_t)sm_below(g, n_vocab);
        b[i].bias = k <= 1 ? -INFINITY : (float)((int)sm_below(g, 21) - 10);
    }
    if (k == 3 && q->repeat_penalty == 1.0f && q->presence_penalty == 0.0f &&
        q->frequency_penalty == 0.0f && q->temperature <= 1.5f) {
        /* One token far above the rest: nothing else may be drawn. */
        int32_t t = FX_BM_BYTE0 + 256 + (int32_t)sm_below(g, 8);
        b[0].token = t;
        b[0].bias = 1e30f;
        for (size_t i = 1; i < n; i++) if (b[i].token == t) b[i].bias = 0;
        r->forced = t;
    }
    for (size_t i = 0; i < n; i++)
        if (b[i].bias == -INFINITY) r->banned[b[i].token] = 1;
    r->all_banned = k == 0;
    q->logit_bias = b;
    q->n_logit_bias = n;
}

unsigned sm_gen_request(sm_rng *g, const sm_ctx *c, sm_row *r, sm_request *q) {
    memset(q, 0, sizeof *q);
    fx_request *req = &q->big.r;
    fx_request_init(req);
    q->req_ptr = req;
    q->what = "valid";
    req->user = r;
    unsigned defects = 0;
    int rand_g = 0; /* a random grammar: it may or may not compile */
    /* Sizes mostly within what the batcher takes, sometimes past it. */
    uint32_t room = c->ctx_limited ? c->n_ctx : c->tok_cap;
    uint32_t lim = room / 2 < 24 ? (room / 2 ? room / 2 : 1) : 24;
    uint32_t mt = 1 + (uint32_t)sm_below(g, lim < 12 ? lim : 12);
    if (sm_below(g, 8) == 0) mt = c->n_ctx / 2 ? c->n_ctx / 2 : 1;
    req->max_tokens = mt;
    r->max_tokens = mt;
    req->flags = (uint32_t)sm_below(g, 8) &
                 (FX_REQUEST_IGNORE_EOS | FX_REQUEST_PARSE_SPECIAL | FX_REQUEST_NO_BOS);

    const sm_lease *lease = NULL;
    if (c->n_leases && sm_below(g, 4) == 0) {
        lease = &c->leases[sm_below(g, (uint64_t)c->n_leases)];
        req->lease = lease->h;
        if (lease->released) defects |= SM_ST(FX_ERR_STALE_HANDLE);
    } else if (c->n_other_leases && sm_below(g, 20) == 0) {
        req->lease = c->other_leases[sm_below(g, (uint64_t)c->n_other_leases)].h;
        defects |= SM_ST(FX_ERR_STALE_HANDLE);
        q->what = "another batcher's lease";
    }
    uint32_t lease_n = lease ? lease->n_tokens : 0;

    size_t n_prompt;
    uint64_t pk = sm_below(g, 20);
    if (pk < 9 || pk == 19) {
        size_t n = pk == 19 ? c->n_ctx - mt + 1 + (size_t)sm_below(g, 4)
                           : 1 + (size_t)sm_below(g, sm_below(g, 8) ? lim : 24);
        int32_t *ids = keep(q, xmalloc(n * sizeof *ids));
        for (size_t i = 0; i < n; i++) ids[i] = (int32_t)sm_below(g, n_vocab);
        req->prompt_tokens = ids;
        req->n_prompt_tokens = n;
        n_prompt = n;
    } else {
        size_t want = pk == 18 ? 2 * (size_t)c->n_ctx
                              : (size_t)sm_below(g, sm_below(g, 8) ? lim : 48);
        size_t len;
        char *t = keep(q, gen_text(g, want, &len));
        req->prompt = t;
        req->prompt_len = len;
        uint32_t tf = 0;
        if (!lease && !(req->flags & FX_REQUEST_NO_BOS)) tf |= FX_TOKENIZE_ADD_SPECIAL;
        if (req->flags & FX_REQUEST_PARSE_SPECIAL) tf |= FX_TOKENIZE_PARSE_SPECIAL;
        n_prompt = count_tokens(c->model, t, len, tf);
    }
    size_t total = lease_n + n_prompt;
    if (total == 0) defects |= SM_ST(FX_ERR_INVALID_ARG);
    if (lease_n + mt > c->n_ctx || total + mt > c->n_ctx ||
        (!c->ctx_limited && total + mt > c->tok_cap))
        defects |= SM_ST(FX_ERR_NO_ROOM);
    r->expect_prompt = (long)total;

    gen_sampling(g, req, r);
    if (sm_below(g, 4) == 0) {
        size_t n = sm_below(g, 10) ? 1 + (size_t)sm_below(g, 4) : 200;
        const char **s = keep(q, xmalloc(n * sizeof *s));
        r->stops = xmalloc(n * sizeof *r->stops);
        for (size_t i = 0; i < n; i++) {
            s[i] = stop_pool[sm_below(g, N_STOP_POOL)];
            r->stops[i] = strdup(s[i]);
            if (!r->stops[i]) fail_msg("out of memory in the test");
        }
        r->n_stop = n;
        req->stop = s;
        req->n_stop = n;
    }
    if (sm_below(g, 5) == 0) {
        size_t n = 1 + (size_t)sm_below(g, 3);
        int32_t *t = keep(q, xmalloc(n * sizeof *t));
        r->stop_toks = xmalloc(n * sizeof *t);
        for (size_t i = 0; i < n; i++) t[i] = r->stop_toks[i] = (int32_t)sm_below(g, n_vocab);
        r->n_stop_toks = n;
        req->stop_tokens = t;
        req->n_stop_tokens = n;
    }
    if (sm_below(g, 16) == 0) {
        size_t len;
        req->grammar = keep(q, rand_grammar(g, &len));
        req->grammar_len = len;
        r->has_grammar = 1;
        rand_g = 1;
        q->what = "random grammar";
    } else if (sm_below(g, 6) == 0) {
        const gpool *p = pool_get((size_t)sm_below(g, N_POOL));
        req->grammar = p->text ? p->text : p->owned;
        req->grammar_len = p->len;
        req->grammar_root = p->root;
        r->gcheck = p->check;
        r->has_grammar = 1;
        if (!p->valid) defects |= SM_ST(FX_ERR_GRAMMAR), q->what = "bad grammar";
    } else if (sm_below(g, 12) == 0) {
        req->flags |= FX_REQUEST_JSON;
        r->has_grammar = 1;
    }
    if (!r->has_grammar || sm_below(g, 4) == 0) gen_bias(g, q, r);
    if (r->has_grammar && r->forced >= 0) r->forced = -1;
    if (sm_below(g, 4) == 0) req->n_logprobs = 1 + (uint32_t)sm_below(g, FX_MAX_LOGPROBS);
    if (r->has_bias || r->has_grammar) r->plain_greedy = 0;
    r->n_logprobs = req->n_logprobs;

    /* At most one deliberate defect more. */
    unsigned inval = SM_ST(FX_ERR_INVALID_ARG);
    switch (sm_below(g, 90)) {
    case 0: req->flags |= 0x100u, defects |= inval, q->what = "unknown flag"; break;
    case 1: req->max_tokens = 0, defects |= inval, q->what = "max_tokens 0"; break;
    case 2: req->max_tokens = sm_below(g, 2) ? c->n_ctx + 1 : UINT32_MAX;
            defects |= inval | SM_ST(FX_ERR_NO_ROOM), q->what = "max_tokens past n_ctx"; break;
    case 3: req->prompt = NULL, req->prompt_tokens = NULL, req->n_prompt_tokens = 3;
            defects |= inval, q->what = "prompt_tokens NULL"; break;
    case 4: if (req->prompt_tokens) {
                ((int32_t *)req->prompt_tokens)[0] = sm_below(g, 2) ? (int32_t)n_vocab : -1;
                defects |= inval, q->what = "token out of range";
            } break;
    case 5: req->prompt = NULL, req->n_prompt_tokens = 0, req->lease = NULL;
            defects |= inval, q->what = "no prompt"; break;
    case 6: if (req->n_stop) { req->stop = NULL; defects |= inval; q->what = "stop NULL"; } break;
    case 7: if (req->n_stop) {
                ((const char **)req->stop)[0] = "";
                defects |= inval, q->what = "empty stop";
            } break;
    case 8: if (req->n_stop) {
                ((const char **)req->stop)[0] = "a\xc0\xaf";
                defects |= inval, q->what = "invalid UTF-8 stop";
            } break;
    case 9: if (req->n_stop_tokens) {
                ((int32_t *)req->stop_tokens)[0] = (int32_t)n_vocab;
                defects |= inval, q->what = "stop token out of range";
            } break;
    case 10: if (!req->grammar) {
                 req->grammar_len = 5;
                 defects |= inval, q->what = "grammar NULL";
             } break;
    case 11: req->n_logprobs = sm_below(g, 2) ? FX_MAX_LOGPROBS + 1 : UINT32_MAX;
             defects |= inval, q->what = "n_logprobs"; break;
    case 12: req->temperature = NAN, defects |= inval, q->what = "NaN temperature"; break;
    case 13: req->top_p = NAN, defects |= inval, q->what = "NaN top_p"; break;
    case 14: req->min_p = NAN, defects |= inval, q->what = "NaN min_p"; break;
    case 15: req->frequency_penalty = NAN, defects |= inval, q->what = "NaN penalty"; break;
    case 16: req->repeat_penalty = sm_below(g, 2) ? 0.0f : NAN, defects |= inval,
             q->what = "repeat_penalty 0 or NaN"; break;
    case 17: if (req->n_logit_bias) {
                 fx_logit_bias *b = (fx_logit_bias *)req->logit_bias;
                 b[0].token = sm_below(g, 2) ? -1 : (int32_t)n_vocab;
                 defects |= inval, q->what = "bias token out of range";
             } break;
    case 18: if (req->n_logit_bias) {
                 ((fx_logit_bias *)req->logit_bias)[0].bias = NAN;
                 defects |= inval, q->what = "NaN bias";
             } break;
    case 19: req->n_logit_bias = 2, req->logit_bias = NULL, defects |= inval,
             q->what = "logit_bias NULL"; break;
    case 20: req->struct_size = 8, defects |= inval, q->what = "struct_size 8"; break;
    case 21: req->struct_size = sizeof q->big, q->big.extra[3] = 1,
             defects |= SM_ST(FX_ERR_UNSUPPORTED), q->what = "newer struct, field set"; break;
    case 22: req->struct_size = sizeof q->big, q->what = "newer struct, zero"; break;
    case 23: q->null_out = 1, defects |= inval, q->what = "NULL out_row"; break;
    case 24: if (!r->has_grammar) {
                 req->grammar = "root ::= \"a\"";
                 req->grammar_len = 12;
                 req->flags |= FX_REQUEST_JSON;
                 defects |= inval, q->what = "grammar and JSON";
             } break;
    case 25: {
        size_t n = n_vocab + 1;
        int32_t *t = keep(q, xmalloc(n * sizeof *t));
        for (size_t i = 0; i < n; i++) t[i] = (int32_t)(i % n_vocab);
        req->stop_tokens = t, req->n_stop_tokens = n;
        defects |= inval, q->what = "more stop tokens than the vocabulary";
    } break;
    case 26: {
        size_t n = n_vocab + 1;
        fx_logit_bias *b = keep(q, xmalloc(n * sizeof *b));
        for (size_t i = 0; i < n; i++) b[i] = (fx_logit_bias){(int32_t)(i % n_vocab), 0.5f};
        req->logit_bias = b, req->n_logit_bias = n;
        defects |= inval, q->what = "more biases than the vocabulary";
    } break;
    default: break;
    }
    r->flags = req->flags;
    r->max_tokens = req->max_tokens;
    if (rand_g) return (defects ? defects : SM_ST(FX_OK)) | SM_ST(FX_ERR_GRAMMAR);
    return defects ? defects : SM_ST(FX_OK);
}

unsigned sm_gen_lease(sm_rng *g, const sm_ctx *c, sm_lease_req *q) {
    memset(q, 0, sizeof *q);
    q->what = "valid";
    q->flags = (uint32_t)sm_below(g, 4) & (FX_REQUEST_PARSE_SPECIAL | FX_REQUEST_NO_BOS);
    size_t want = sm_below(g, 8) == 0 ? 2 * (size_t)c->n_ctx : (size_t)sm_below(g, 40);
    q->buf = gen_text(g, want, &q->len);
    q->text = q->buf;
    uint32_t tf = 0;
    if (!(q->flags & FX_REQUEST_NO_BOS)) tf |= FX_TOKENIZE_ADD_SPECIAL;
    if (q->flags & FX_REQUEST_PARSE_SPECIAL) tf |= FX_TOKENIZE_PARSE_SPECIAL;
    size_t n = count_tokens(c->model, q->text, q->len, tf);
    q->n_tokens = (uint32_t)n;
    unsigned defects = 0;
    if (n == 0) defects |= SM_ST(FX_ERR_INVALID_ARG);
    uint64_t blocks = (n + c->bt - 1) / c->bt;
    if (n > c->n_ctx - 1 || (!c->ctx_limited && blocks * c->bt > c->tok_cap))
        defects |= SM_ST(FX_ERR_NO_ROOM);
    switch (sm_below(g, 12)) {
    case 0: q->flags |= FX_REQUEST_IGNORE_EOS, defects |= SM_ST(FX_ERR_INVALID_ARG),
            q->what = "a request flag"; break;
    case 1: q->text = NULL, q->len = 1 + sm_below(g, 5),
            defects = SM_ST(FX_ERR_INVALID_ARG), q->what = "text NULL"; break;
    case 2: q->len = 0, q->flags = FX_REQUEST_NO_BOS, defects = SM_ST(FX_ERR_INVALID_ARG),
            q->what = "empty, no BOS"; break;
    default: break;
    }
    return defects ? defects : SM_ST(FX_OK);
}

/* ---- checks ---- */

void sm_row_text(sm_row *r, const fx_event *ev, const fx_model *m) {
    if (ev->text_len == 0 || !ev->text) fail_msg("row %zu: an empty TEXT event", r->id);
    if (!fx_ref_utf8_valid(ev->text, ev->text_len))
        fail_msg("row %zu: a TEXT event split inside a character or not UTF-8", r->id);
    if (r->len + ev->text_len > r->cap) {
        r->cap = (r->len + ev->text_len) * 2;
        r->text = realloc(r->text, r->cap);
        if (!r->text) fail_msg("out of memory in the test");
    }
    memcpy(r->text + r->len, ev->text, ev->text_len);
    r->len += ev->text_len;
    if (r->n_logprobs == 0 || r->faulted) return;
    /* A token's TOKEN event comes before any of its text. */
    size_t raw_len;
    char *raw = concat(r->tev, r->n_tev, &raw_len);
    char *s = xmalloc(3 * raw_len + 3);
    size_t n0 = fx_ref_utf8_sanitize(raw, raw_len, 0, s);
    int ok = r->len <= n0 && !mem_diff(s, r->text, r->len);
    if (!ok) {
        size_t n1 = fx_ref_utf8_sanitize(raw, raw_len, 1, s);
        ok = r->len == n1 && !mem_diff(s, r->text, r->len);
    }
    if (!ok && r->n_tev > 0) {
        /* The last token ended the row unseen: what its predecessors left
         * incomplete was flushed. */
        int32_t last = r->tev[r->n_tev - 1];
        if (in_list(r->stop_toks, r->n_stop_toks, last) ||
            (!(r->flags & FX_REQUEST_IGNORE_EOS) && fx_token_is_eog(m, last))) {
            size_t n1 = fx_ref_utf8_sanitize(raw, raw_len - piece_len[last], 1, s);
            ok = r->len == n1 && !mem_diff(s, r->text, r->len);
        }
    }
    free(raw);
    free(s);
    if (!ok) {
        fprintf(stderr, "text so far (%zu): ", r->len);
        for (size_t i = 0; i < r->len; i++) fprintf(stderr, "%02x", (unsigned char)r->text[i]);
        fprintf(stderr, "\nTOKEN events (%zu):", r->n_tev);
        for (size_t i = 0; i < r->n_tev; i++) {
            fprintf(stderr, " %d[", r->tev[i]);
            for (size_t k = 0; k < piece_len[r->tev[i]]; k++)
                fprintf(stderr, "%02x", (unsigned char)piece[r->tev[i]][k]);
            fprintf(stderr, "]");
        }
        fprintf(stderr, "\nflags %u stops %zu stop tokens %zu grammar %d\n", r->flags,
                r->n_stop, r->n_stop_toks, r->has_grammar);
        fail_msg("row %zu: text arrived before the TOKEN event of its token", r->id);
    }
}

void sm_row_token(sm_row *r, const fx_event *ev, const fx_model *m) {
    (void)m;
    if (r->n_logprobs == 0) fail_msg("row %zu: a TOKEN event it did not ask for", r->id);
    if (ev->token < 0 || (uint32_t)ev->token >= n_vocab)
        fail_msg("row %zu: TOKEN %d out of range", r->id, ev->token);
    size_t want = r->n_logprobs < n_vocab ? r->n_logprobs : n_vocab;
    if (ev->n_top != want) fail_msg("row %zu: %zu alternatives, asked %zu", r->id, ev->n_top, want);
    if (!(ev->logprob <= 1e-4f)) fail_msg("row %zu: logprob %g", r->id, (double)ev->logprob);
    for (size_t i = 0; i < ev->n_top; i++) {
        const fx_token_logprob *t = &ev->top[i];
        if (t->token < 0 || (uint32_t)t->token >= n_vocab || !(t->logprob <= 1e-4f))
            fail_msg("row %zu: alternative %zu is (%d, %g)", r->id, i, t->token,
                     (double)t->logprob);
        if (i && t->logprob > ev->top[i - 1].logprob)
            fail_msg("row %zu: alternatives not most likely first", r->id);
    }
    if (ev->n_top && ev->logprob > ev->top[0].logprob + 1e-4f)
        fail_msg("row %zu: the token is likelier than the most likely", r->id);
    if (r->plain_greedy && ev->n_top && ev->token != ev->top[0].token &&
        ev->logprob < ev->top[0].logprob - 1e-6f)
        fail_msg("row %zu: greedy drew %d, not the most likely %d", r->id, ev->token,
                 ev->top[0].token);
    if (r->n_tev == r->cap_tev) {
        r->cap_tev = r->cap_tev ? 2 * r->cap_tev : 16;
        r->tev = realloc(r->tev, r->cap_tev * sizeof *r->tev);
        if (!r->tev) fail_msg("out of memory in the test");
    }
    r->tev[r->n_tev++] = ev->token;
}

/* The DONE's stop string is the first to end in s, the longest of those
 * ending there, the lowest index of equals; text is s before it. */
static void check_stop(const sm_row *r, const char *s, size_t n, int32_t idx) {
    const char *w = r->stops[idx];
    size_t wl = strlen(w);
    if (r->len + wl > n || mem_diff(s, r->text, r->len) || mem_diff(s + r->len, w, wl))
        fail_msg("row %zu: text + stop string %d is not how its tokens begin", r->id, idx);
    size_t end = r->len + wl;
    for (size_t j = 0; j < r->n_stop; j++) {
        size_t e = fx_ref_first_end(s, n, r->stops[j], strlen(r->stops[j]));
        if (e == 0 || e > end) continue;
        if (e < end) fail_msg("row %zu: stop %zu ends before the one reported (%d)", r->id, j, idx);
        size_t jl = strlen(r->stops[j]);
        if (jl > wl || (jl == wl && j < (size_t)idx))
            fail_msg("row %zu: stop %zu wins the tie over %d", r->id, j, idx);
    }
}

void sm_row_done(sm_row *r, const fx_event *ev, const fx_model *m, uint32_t n_ctx,
                 uint32_t bt, int no_cache) {
    const fx_usage *u = &ev->usage;
    size_t n = ev->n_tokens;
    if (!ev->tokens) fail_msg("row %zu: DONE tokens NULL", r->id);
    if (ev->finish < FX_FINISH_EOS || ev->finish > FX_FINISH_ERROR)
        fail_msg("row %zu: finish %d", r->id, ev->finish);
    if ((ev->finish == FX_FINISH_ERROR) != (ev->status != FX_OK))
        fail_msg("row %zu: finish %d with status %s", r->id, ev->finish, fx_status_str(ev->status));
    /* A grammar may run out of tokens (or out of its parse limits), and
     * biases may ban all it allows; nothing else may fail a row. */
    if (ev->finish == FX_FINISH_ERROR && !(r->faulted && ev->status == FX_ERR_NOMEM) &&
        !(r->has_grammar && ev->status == FX_ERR_GRAMMAR) &&
        !(r->banned && ev->status == FX_ERR_ALL_BANNED))
        fail_msg("row %zu failed: %s", r->id, fx_status_str(ev->status));
    /* The chain of 300 levels dies at its first token by its own limits
     * (test_grammar_limits), whatever the biases. */
    if (r->all_banned && !r->faulted &&
        (n != 0 || (ev->finish != FX_FINISH_CANCELLED && ev->status != FX_ERR_ALL_BANNED &&
                    !(r->gcheck == G_ONLY_A && ev->status == FX_ERR_GRAMMAR))))
        fail_msg("row %zu (grammar check %d): every token banned by -INFINITY, yet it "
                 "ended %d (%s) after %zu tokens", r->id, r->gcheck, ev->finish,
                 fx_status_str(ev->status), n);
    if (ev->finish == FX_FINISH_CANCELLED && !r->cancel_asked)
        fail_msg("row %zu: cancelled without fx_cancel", r->id);
    if (u->completion_tokens != n || n > r->max_tokens)
        fail_msg("row %zu: %zu ids, completion_tokens %u, max_tokens %u", r->id, n,
                 u->completion_tokens, r->max_tokens);
    for (size_t i = 0; i < n; i++) {
        int32_t t = ev->tokens[i];
        if (t < 0 || (uint32_t)t >= n_vocab) fail_msg("row %zu: id %d", r->id, t);
        if (r->banned && r->banned[t])
            fail_msg("row %zu: generated token %d, banned by a -INFINITY bias", r->id, t);
        if (r->forced >= 0 && t != r->forced)
            fail_msg("row %zu: token %d, though %d had a bias of 1e30", r->id, t, r->forced);
    }
    /* Allocation failures may fail a row (FX_ERR_NOMEM), but a row that
     * ends otherwise owes its whole answer: ferrox.h lets text or a TOKEN
     * event that cannot be queued fail the row, never vanish. */
    int lax = r->faulted && ev->finish == FX_FINISH_ERROR;
    if (!lax && r->expect_prompt >= 0 && u->prompt_tokens != (uint32_t)r->expect_prompt)
        fail_msg("row %zu: prompt_tokens %u, fx_tokenize says %ld", r->id,
                 u->prompt_tokens, r->expect_prompt);
    if (u->cached_tokens % bt || (u->prompt_tokens && u->cached_tokens >= u->prompt_tokens) ||
        (no_cache && u->cached_tokens))
        fail_msg("row %zu: cached_tokens %u of %u (block %u, cache %s)", r->id,
                 u->cached_tokens, u->prompt_tokens, bt, no_cache ? "off" : "on");
    if (!(u->queue_seconds >= 0 && u->ttft_seconds >= 0 && u->total_seconds >= 0 &&
          u->ttft_seconds <= u->total_seconds + 1e-9 && isfinite(u->total_seconds) &&
          isfinite(u->queue_seconds)))
        fail_msg("row %zu: times %g %g %g", r->id, u->queue_seconds, u->ttft_seconds,
                 u->total_seconds);
    if (ev->finish == FX_FINISH_LENGTH && n != r->max_tokens && u->prompt_tokens + n != n_ctx)
        fail_msg("row %zu: LENGTH after %zu of %u tokens", r->id, n, r->max_tokens);
    int eos_token = 0, eog_end = 0;
    if (ev->finish == FX_FINISH_EOS) {
        if (n == 0 || ev->stop_index != ev->tokens[n - 1])
            fail_msg("row %zu: EOS with stop_index %d", r->id, ev->stop_index);
        int32_t t = ev->tokens[n - 1];
        int eog = fx_token_is_eog(m, t);
        eos_token = (eog && !(r->flags & FX_REQUEST_IGNORE_EOS)) ||
                    in_list(r->stop_toks, r->n_stop_toks, t);
        eog_end = eog && !in_list(r->stop_toks, r->n_stop_toks, t);
        if (!eos_token && !(r->has_grammar && eog))
            fail_msg("row %zu: EOS on token %d, neither a stop token nor an end", r->id, t);
    } else if (ev->finish == FX_FINISH_STOP) {
        if (ev->stop_index < 0 || (size_t)ev->stop_index >= r->n_stop)
            fail_msg("row %zu: STOP index %d of %zu", r->id, ev->stop_index, r->n_stop);
        /* A row ended by a stop or end token whose final U+FFFD then
         * completed a stop string: that token has no text. */
        int32_t t = n ? ev->tokens[n - 1] : -1;
        int eog = t >= 0 && fx_token_is_eog(m, t);
        eos_token = t >= 0 && ((eog && (!(r->flags & FX_REQUEST_IGNORE_EOS) || r->has_grammar)) ||
                               in_list(r->stop_toks, r->n_stop_toks, t));
    } else if (ev->stop_index != -1) {
        fail_msg("row %zu: stop_index %d with finish %d (%s; faulted %d)", r->id,
                 ev->stop_index, ev->finish, fx_status_str(ev->status), r->faulted);
    }
    if (r->n_logprobs && !lax &&
        (r->n_tev != n || mem_diff(r->tev, ev->tokens, n * sizeof *ev->tokens)))
        fail_msg("row %zu: TOKEN events (%zu) are not the DONE's ids (%zu)", r->id, r->n_tev, n);

    /* The text: its tokens' pieces, U+FFFD for what is not UTF-8, cut at
     * the stop string. */
    if (!fx_ref_utf8_valid(r->text, r->len)) fail_msg("row %zu: text not UTF-8", r->id);
    if (lax) return;
    size_t raw_len;
    char *raw = concat(ev->tokens, n - (size_t)(eos_token != 0), &raw_len);
    char *s0 = xmalloc(3 * raw_len + 3), *s1 = xmalloc(3 * raw_len + 3);
    size_t n0 = fx_ref_utf8_sanitize(raw, raw_len, 0, s0);
    size_t n1 = fx_ref_utf8_sanitize(raw, raw_len, 1, s1);
    if (ev->finish == FX_FINISH_STOP) {
        /* s1: the U+FFFD of a character cut off at the end may complete it. */
        check_stop(r, s1, n1, ev->stop_index);
    } else if (ev->finish == FX_FINISH_ERROR) {
        if (!(r->len <= n0 && !mem_diff(s0, r->text, r->len)) &&
            !(r->len == n1 && !mem_diff(s1, r->text, r->len)))
            fail_msg("row %zu: a failed row's text is not its tokens' text", r->id);
    } else {
        if (r->len != n1 || mem_diff(s1, r->text, r->len))
            fail_msg("row %zu: text (%zu bytes) is not its tokens' text (%zu bytes); "
                     "finish %d, faulted %d",
                     r->id, r->len, n1, ev->finish, r->faulted);
        for (size_t j = 0; j < r->n_stop; j++)
            if (fx_ref_first_end(r->text, r->len, r->stops[j], strlen(r->stops[j])))
                fail_msg("row %zu: stop string %zu is in its text, finish %d", r->id, j,
                         ev->finish);
    }
    /* A row cut short may end inside a character its grammar allowed
     * byte by byte; the U+FFFD that closes it is not the grammar's. */
    if (r->gcheck && ev->finish != FX_FINISH_STOP &&
        !grammar_ok(r->gcheck, eog_end ? r->text : s0, eog_end ? r->len : n0, eog_end))
        fail_msg("row %zu: text '%.*s' does not follow its grammar (finish %d)", r->id,
                 (int)r->len, r->text, ev->finish);
    free(raw);
    free(s0);
    free(s1);
}
