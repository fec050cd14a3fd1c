/*
 * The regular expressions of the pre-tokenizers that have no hand-written
 * scanner (pretok.c): a small backtracking matcher with ECMAScript's
 * semantics (alternatives in order, greedy repeats giving back one at a
 * time), which is what llama.cpp runs them with (std::wregex). Only what
 * those expressions use: literals, classes with ranges, \s \S \p{L|N|P|S|M}
 * \r \n \t and escaped punctuation, groups (?: ) ( ), lookaheads (?= )
 * (?! ), ? * + {n} {n,} {n,m}, alternation and $. Of a group wider than
 * one symbol only ? (gpt-4o's optional contraction).
 *
 * Text is matched as "symbols", the code points as llama.cpp hands them to
 * std::regex (rx_symbol): whitespace beyond ASCII becomes 0x0B, and when
 * the expression names a Unicode category every other non-ASCII code point
 * becomes its category's placeholder. So an expression sees exactly what it
 * sees in llama.cpp, including its ASCII quirks (\p{S} there is $+<=>^`|,
 * not ~).
 *
 * Bounded: only one-symbol things repeat (a loop, not a recursion per
 * symbol), or a group at most once ((...)?), so the recursion depth is a
 * property of the expression, not of the text;
 * and each search has a step budget linear in the text, past which the
 * rest of the piece is left unsplit (a valid split all the same), so no
 * input makes a search quadratic.
 */
#include <stdlib.h>
#include <string.h>

#include "vocab_impl.h"

enum { N_CLASS, N_SEQ, N_ALT, N_REPEAT, N_LOOK, N_END };

/* Category placeholders (llama.cpp's unicode_regex_split). */
#define RX_WS 0x0Bu
#define RX_OTHER 0xD0u
#define RX_N 0xD1u
#define RX_L 0xD2u
#define RX_P 0xD3u
#define RX_M 0xD4u
#define RX_S 0xD5u

enum { CL_WS = 1, CL_NOT_WS = 2, CL_L = 4, CL_N = 8, CL_P = 16, CL_S = 32, CL_M = 64 };

typedef struct rx_range {
    uint32_t lo, hi;
} rx_range;

typedef struct rx_node {
    int kind;
    bool negate;          /* N_CLASS: [^...]; N_LOOK: (?!...) */
    unsigned preds;       /* N_CLASS: CL_* */
    rx_range *ranges;     /* N_CLASS: sorted, merged */
    size_t n_ranges;
    struct rx_node **kids; /* N_SEQ, N_ALT: n_kids; N_REPEAT, N_LOOK: 1 */
    size_t n_kids;
    uint32_t min, max;    /* N_REPEAT; max UINT32_MAX: unbounded */
    bool width1;          /* matches exactly one symbol when it matches */
} rx_node;

struct fx_rx {
    const fx_alloc *alloc;
    rx_node *root;
    bool collapse; /* names a Unicode category */
    rx_node **all; /* every node, to free */
    size_t n_all, cap_all;
};

/* ---- symbols ---- */

static bool ascii_in(uint32_t c, const char *set) { return c && c < 128 && strchr(set, (int)c) != NULL; }

static bool sym_is(uint32_t s, unsigned pred) {
    switch (pred) {
    case CL_WS: return s == ' ' || (s >= 9 && s <= 13);
    case CL_L: return s == RX_L || ((s | 32) >= 'a' && (s | 32) <= 'z');
    case CL_N: return s == RX_N || (s >= '0' && s <= '9');
    case CL_P: return s == RX_P || ascii_in(s, "!\"#%&'()*,-./:;?@[\\]_{}");
    case CL_S: return s == RX_S || ascii_in(s, "$+<=>^`|");
    case CL_M: return s == RX_M;
    default: return false;
    }
}

uint32_t fx_rx_symbol(const fx_rx *rx, uint32_t cp, unsigned cf) {
    if (cp < 128) return cp;
    if (cf & FX_CF_WS) return RX_WS;
    if (!rx->collapse) return cp;
    if (cf & FX_CF_L) return RX_L;
    if (cf & FX_CF_N) return RX_N;
    if (cf & FX_CF_P) return RX_P;
    if (cf & FX_CF_M) return RX_M;
    if (cf & FX_CF_S) return RX_S;
    return RX_OTHER;
}

static bool class_has(const rx_node *n, uint32_t s) {
    bool in = false;
    for (unsigned p = CL_WS; p <= CL_M && !in; p <<= 1)
        if (n->preds & p) in = p == CL_NOT_WS ? !sym_is(s, CL_WS) : sym_is(s, p);
    if (!in) {
        size_t lo = 0, hi = n->n_ranges;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (s < n->ranges[mid].lo) hi = mid;
            else if (s > n->ranges[mid].hi) lo = mid + 1;
            else {
                in = true;
                break;
            }
        }
    }
    return in != n->negate;
}

/* ---- the parser ---- */

typedef struct rx_parse {
    fx_rx *rx;
    const uint32_t *p; /* the expression as code points */
    size_t n, i;
    bool bad, nomem;
} rx_parse;

static rx_node *new_node(rx_parse *ps, int kind) {
    fx_rx *rx = ps->rx;
    if (rx->n_all == rx->cap_all) {
        size_t cap = rx->cap_all ? 2 * rx->cap_all : 16;
        rx_node **all = fx_realloc(rx->alloc, rx->all, cap * sizeof *all);
        if (!all) return ps->nomem = true, NULL;
        rx->all = all;
        rx->cap_all = cap;
    }
    rx_node *n = fx_calloc(rx->alloc, 1, sizeof *n);
    if (!n) return ps->nomem = true, NULL;
    n->kind = kind;
    rx->all[rx->n_all++] = n;
    return n;
}

static bool add_kid(rx_parse *ps, rx_node *n, rx_node *kid) {
    rx_node **k = fx_realloc(ps->rx->alloc, n->kids, (n->n_kids + 1) * sizeof *k);
    if (!k) return ps->nomem = true, false;
    n->kids = k;
    n->kids[n->n_kids++] = kid;
    return true;
}

static bool add_range(rx_parse *ps, rx_node *n, uint32_t lo, uint32_t hi) {
    if (lo > hi) return ps->bad = true, false;
    rx_range *r = fx_realloc(ps->rx->alloc, n->ranges, (n->n_ranges + 1) * sizeof *r);
    if (!r) return ps->nomem = true, false;
    n->ranges = r;
    n->ranges[n->n_ranges++] = (rx_range){lo, hi};
    return true;
}

static int range_cmp(const void *a, const void *b) {
    const rx_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static void merge_ranges(rx_node *n) {
    if (n->n_ranges < 2) return;
    qsort(n->ranges, n->n_ranges, sizeof *n->ranges, range_cmp);
    size_t m = 0;
    for (size_t i = 1; i < n->n_ranges; i++) {
        if (n->ranges[i].lo <= n->ranges[m].hi + 1) {
            if (n->ranges[i].hi > n->ranges[m].hi) n->ranges[m].hi = n->ranges[i].hi;
        } else {
            n->ranges[++m] = n->ranges[i];
        }
    }
    n->n_ranges = m + 1;
}

/* \p{X} at ps->i (after the backslash); 0 if it is not one. */
static unsigned parse_category(rx_parse *ps) {
    if (ps->i + 3 >= ps->n || ps->p[ps->i] != 'p' || ps->p[ps->i + 1] != '{' || ps->p[ps->i + 3] != '}')
        return 0;
    unsigned c;
    switch (ps->p[ps->i + 2]) {
    case 'L': c = CL_L; break;
    case 'N': c = CL_N; break;
    case 'P': c = CL_P; break;
    case 'S': c = CL_S; break;
    case 'M': c = CL_M; break;
    default: return 0;
    }
    ps->i += 4;
    ps->rx->collapse = true;
    return c;
}

/* An escape after its backslash: a predicate (*pred) or a literal. */
static uint32_t parse_escape(rx_parse *ps, unsigned *pred) {
    *pred = 0;
    if (ps->i >= ps->n) return ps->bad = true, 0;
    if ((*pred = parse_category(ps)) != 0) return 0;
    uint32_t c = ps->p[ps->i++];
    switch (c) {
    case 's': *pred = CL_WS; return 0;
    case 'S': *pred = CL_NOT_WS; return 0;
    case 'r': return '\r';
    case 'n': return '\n';
    case 't': return '\t';
    default:
        if ((c | 32) >= 'a' && (c | 32) <= 'z') return ps->bad = true, 0; /* unsupported */
        return c;
    }
}

static rx_node *parse_class(rx_parse *ps) {
    rx_node *n = new_node(ps, N_CLASS);
    if (!n) return NULL;
    if (ps->i < ps->n && ps->p[ps->i] == '^') n->negate = true, ps->i++;
    while (ps->i < ps->n && ps->p[ps->i] != ']') {
        uint32_t lo = ps->p[ps->i++];
        unsigned pred = 0;
        if (lo == '\\') lo = parse_escape(ps, &pred);
        if (ps->bad) return NULL;
        if (pred) {
            n->preds |= pred;
            continue;
        }
        uint32_t hi = lo;
        if (ps->i + 1 < ps->n && ps->p[ps->i] == '-' && ps->p[ps->i + 1] != ']') {
            ps->i++;
            hi = ps->p[ps->i++];
            if (hi == '\\') hi = parse_escape(ps, &pred);
            if (pred || ps->bad) return ps->bad = true, NULL;
        }
        if (!add_range(ps, n, lo, hi)) return NULL;
    }
    if (ps->i >= ps->n) return ps->bad = true, NULL;
    ps->i++; /* ] */
    merge_ranges(n);
    n->width1 = true;
    return n;
}

static rx_node *parse_alt(rx_parse *ps);

static rx_node *parse_atom(rx_parse *ps) {
    uint32_t c = ps->p[ps->i++];
    if (c == '(') {
        int kind = -1;
        bool negate = false;
        if (ps->i + 1 < ps->n && ps->p[ps->i] == '?') {
            uint32_t t = ps->p[ps->i + 1];
            if (t == ':') kind = N_SEQ;
            else if (t == '=' || t == '!') kind = N_LOOK, negate = t == '!';
            else return ps->bad = true, NULL;
            ps->i += 2;
        }
        rx_node *inner = parse_alt(ps);
        if (!inner) return NULL;
        if (ps->i >= ps->n || ps->p[ps->i] != ')') return ps->bad = true, NULL;
        ps->i++;
        if (kind != N_LOOK) return inner;
        rx_node *look = new_node(ps, N_LOOK);
        if (!look || !add_kid(ps, look, inner)) return NULL;
        look->negate = negate;
        return look;
    }
    if (c == '[') return parse_class(ps);
    if (c == '$') return new_node(ps, N_END);
    if (c == ')' || c == '|' || c == '*' || c == '+' || c == '?' || c == '{' || c == '^' || c == '.')
        return ps->bad = true, NULL;
    rx_node *n = new_node(ps, N_CLASS);
    if (!n) return NULL;
    unsigned pred = 0;
    if (c == '\\') c = parse_escape(ps, &pred);
    if (ps->bad) return NULL;
    if (pred) n->preds = pred;
    else if (!add_range(ps, n, c, c)) return NULL;
    n->width1 = true;
    return n;
}

static bool parse_number(rx_parse *ps, uint32_t *out) {
    size_t start = ps->i;
    uint64_t v = 0;
    while (ps->i < ps->n && ps->p[ps->i] >= '0' && ps->p[ps->i] <= '9' && v < 100000)
        v = v * 10 + (ps->p[ps->i++] - '0');
    *out = (uint32_t)v;
    return ps->i > start && v < 100000;
}

static rx_node *parse_repeat(rx_parse *ps) {
    rx_node *atom = parse_atom(ps);
    if (!atom || ps->i >= ps->n) return atom;
    uint32_t c = ps->p[ps->i], min, max;
    if (c == '*') min = 0, max = UINT32_MAX;
    else if (c == '+') min = 1, max = UINT32_MAX;
    else if (c == '?') min = 0, max = 1;
    else if (c == '{') {
        ps->i++;
        if (!parse_number(ps, &min)) return ps->bad = true, NULL;
        max = min;
        if (ps->i < ps->n && ps->p[ps->i] == ',') {
            ps->i++;
            max = UINT32_MAX;
            if (ps->i < ps->n && ps->p[ps->i] != '}' && (!parse_number(ps, &max) || max < min))
                return ps->bad = true, NULL;
        }
        if (ps->i >= ps->n || ps->p[ps->i] != '}') return ps->bad = true, NULL;
    } else {
        return atom;
    }
    ps->i++;
    if (ps->i < ps->n && ps->p[ps->i] == '?') return ps->bad = true, NULL; /* lazy */
    /* repeats only of one-symbol things (see the top), but for an
     * optional group, which recurses once whatever the text */
    if (!atom->width1 && c != '?') return ps->bad = true, NULL;
    rx_node *n = new_node(ps, N_REPEAT);
    if (!n || !add_kid(ps, n, atom)) return NULL;
    n->min = min;
    n->max = max;
    return n;
}

static rx_node *parse_seq(rx_parse *ps) {
    rx_node *n = new_node(ps, N_SEQ);
    if (!n) return NULL;
    size_t wide = 0, zero = 0;
    while (ps->i < ps->n && ps->p[ps->i] != '|' && ps->p[ps->i] != ')') {
        rx_node *k = parse_repeat(ps);
        if (!k || !add_kid(ps, n, k)) return NULL;
        if (k->width1) wide++;
        else if (k->kind == N_LOOK || k->kind == N_END) zero++;
    }
    n->width1 = wide == 1 && wide + zero == n->n_kids;
    return n;
}

static rx_node *parse_alt(rx_parse *ps) {
    rx_node *first = parse_seq(ps);
    if (!first || ps->i >= ps->n || ps->p[ps->i] != '|') return first;
    rx_node *n = new_node(ps, N_ALT);
    if (!n || !add_kid(ps, n, first)) return NULL;
    bool w1 = first->width1;
    while (ps->i < ps->n && ps->p[ps->i] == '|') {
        ps->i++;
        rx_node *k = parse_seq(ps);
        if (!k || !add_kid(ps, n, k)) return NULL;
        w1 = w1 && k->width1;
    }
    n->width1 = w1;
    return n;
}

void fx_rx_free(fx_rx *rx) {
    if (!rx) return;
    for (size_t i = 0; i < rx->n_all; i++) {
        fx_free(rx->alloc, rx->all[i]->ranges);
        fx_free(rx->alloc, rx->all[i]->kids);
        fx_free(rx->alloc, rx->all[i]);
    }
    fx_free(rx->alloc, rx->all);
    fx_free(rx->alloc, rx);
}

fx_status fx_rx_compile(const fx_alloc *alloc, const char *expr, fx_rx **out, fx_error *err) {
    *out = NULL;
    fx_rx *rx = fx_calloc(alloc, 1, sizeof *rx);
    size_t len = strlen(expr);
    uint32_t *cps = fx_malloc_array(alloc, len + 1, sizeof *cps);
    if (!rx || !cps) {
        fx_free(alloc, rx);
        fx_free(alloc, cps);
        return fx_fail(err, FX_ERR_NOMEM, "tokenize: out of memory (pre-tokenizer expression)");
    }
    rx->alloc = alloc;
    rx_parse ps = {rx, cps, 0, 0, false, false};
    for (size_t i = 0; i < len;) i += fx_utf8_decode((const unsigned char *)expr + i, len - i, &cps[ps.n++]);
    rx->root = parse_alt(&ps);
    const bool ok = rx->root && !ps.bad && !ps.nomem && ps.i == ps.n;
    fx_free(alloc, cps);
    if (!ok) {
        const bool nomem = ps.nomem;
        fx_rx_free(rx);
        return nomem ? fx_fail(err, FX_ERR_NOMEM, "tokenize: out of memory (pre-tokenizer expression)")
                     : fx_fail(err, FX_ERR_INTERNAL, "tokenize: bad pre-tokenizer expression '%s'", expr);
    }
    *out = rx;
    return FX_OK;
}

/* ---- the matcher ---- */

/* What remains after the node being matched: the rest of a sequence,
 * from kid idx on, then next. */
typedef struct rx_cont {
    const rx_node *node;
    uint32_t idx;
    const struct rx_cont *next;
} rx_cont;

typedef struct rx_run {
    const uint32_t *s; /* symbols of the piece */
    size_t n;
    uint64_t steps;    /* left in the budget */
} rx_run;

static bool match(rx_run *r, const rx_node *n, size_t pos, const rx_cont *k, size_t *end);

static bool cont(rx_run *r, size_t pos, const rx_cont *k, size_t *end) {
    if (!k) {
        *end = pos;
        return true;
    }
    if (k->idx == k->node->n_kids) return cont(r, pos, k->next, end);
    const rx_cont k2 = {k->node, k->idx + 1, k->next};
    return match(r, k->node->kids[k->idx], pos, &k2, end);
}

/* Whether a one-symbol node matches at pos. */
static bool one(rx_run *r, const rx_node *n, size_t pos) {
    size_t e;
    if (n->kind == N_CLASS) return pos < r->n && class_has(n, r->s[pos]);
    return match(r, n, pos, NULL, &e);
}

/* Greedy: as many as match, then give back one at a time. Every repeat is
 * of a one-symbol node (the parser sees to it), so this loops instead of
 * recursing per symbol. */
static bool repeat(rx_run *r, const rx_node *n, size_t pos, const rx_cont *k, size_t *end) {
    const rx_node *kid = n->kids[0];
    if (!kid->width1) /* (...)? : with it, then without */
        return match(r, kid, pos, k, end) || (r->steps > 0 && cont(r, pos, k, end));
    size_t c = 0;
    while (c < n->max && one(r, kid, pos + c)) c++;
    if (c < n->min) return false;
    for (size_t i = c + 1; i-- > n->min;)
        if (cont(r, pos + i, k, end)) return true;
    return false;
}

static bool match(rx_run *r, const rx_node *n, size_t pos, const rx_cont *k, size_t *end) {
    if (r->steps == 0) return false;
    r->steps--;
    switch (n->kind) {
    case N_CLASS:
        return pos < r->n && class_has(n, r->s[pos]) && cont(r, pos + 1, k, end);
    case N_SEQ: {
        if (n->n_kids == 0) return cont(r, pos, k, end);
        const rx_cont k2 = {n, 1, k};
        return match(r, n->kids[0], pos, &k2, end);
    }
    case N_ALT:
        for (size_t i = 0; i < n->n_kids; i++)
            if (match(r, n->kids[i], pos, k, end)) return true;
        return false;
    case N_REPEAT:
        return repeat(r, n, pos, k, end);
    case N_LOOK: {
        size_t e;
        const bool hit = match(r, n->kids[0], pos, NULL, &e);
        return hit != n->negate && cont(r, pos, k, end);
    }
    case N_END:
        return pos == r->n && cont(r, pos, k, end);
    default:
        return false;
    }
}

/* Steps a search may take per symbol of its piece, and at least. */
#define RX_STEPS_PER_SYMBOL 512u
#define RX_STEPS_MIN 65536u

size_t fx_rx_split(const fx_rx *rx, const uint32_t *sym, size_t n, size_t base, size_t *ends, size_t n_ends) {
    rx_run r = {sym, n, RX_STEPS_MIN + (uint64_t)RX_STEPS_PER_SYMBOL * n};
    size_t start = 0, pos = 0;
    while (pos < n) {
        size_t e;
        if (match(&r, rx->root, pos, NULL, &e) && e > pos) {
            if (pos > start) ends[n_ends++] = base + pos;
            ends[n_ends++] = base + e;
            start = pos = e;
        } else if (r.steps == 0) {
            break; /* out of budget: the rest stays one piece */
        } else {
            pos++;
        }
    }
    if (start < n) ends[n_ends++] = base + n;
    return n_ends;
}
