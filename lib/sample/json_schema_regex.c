/*
 * json_schema_regex: "pattern" and "format" as grammars of a JSON string.
 *
 * The pattern language is what llama.cpp's converter takes: anchored
 * ^...$ (JSON Schema's patterns are unanchored, and a grammar of
 * "anything containing a match" is rarely what was meant, so like
 * llama.cpp we ask for the anchors), literals and escapes, classes with
 * ranges and negation, \d \w \s and their negations, `.` (not a line
 * break), groups (plain, (?:...), named), alternation, ? * + {m} {m,}
 * {m,n} {,n}. Anything else (backreferences, lookaround, word
 * boundaries, inline flags, \p{...}) is an error naming the construct:
 * a grammar that silently drops part of a pattern would accept strings
 * the schema refuses.
 *
 * The pattern matches a string's content; the grammar writes the string
 * as JSON. A character that JSON escapes (", \, controls, and DEL, which
 * json-char also escapes) is written as its short escape or \u00XX, each
 * other character as itself: one spelling per string.
 */
#include "json_schema_int.h"

#include <stdlib.h>

#define MAX_GROUPS 40u              /* nested groups (GBNF nests to 128) */
#define MAX_WEIGHT (1u << 18)       /* grammar elements after {m,n}: a
                                       quarter of FX_GRAMMAR_MAX_ELEMS */
#define MAX_RANGES 128u             /* ranges in one class */

typedef struct rng { uint32_t lo, hi; } rng;

/* Room past MAX_RANGES for what negation and the JSON escapes add. */
typedef struct cset {
    rng r[MAX_RANGES + 8];
    uint32_t n;
} cset;

typedef struct rx {
    conv *c;
    const char *s;
    size_t i, n;
    uint32_t groups;
} rx;

static fx_status rx_fail(rx *x, const char *what) {
    char msg[200];
    snprintf(msg, sizeof msg, "pattern: %.120s (at offset %zu of the pattern)", what, x->i + 1);
    return fx_js_fail(x->c, FX_ERR_INVALID_ARG, msg, NULL);
}

static int cs_add(cset *s, uint32_t lo, uint32_t hi) {
    if (s->n == MAX_RANGES + 8) return 0;
    s->r[s->n++] = (rng){lo, hi};
    return 1;
}

static int rng_cmp(const void *a, const void *b) {
    const rng *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static void cs_norm(cset *s) {
    if (s->n == 0) return;
    qsort(s->r, s->n, sizeof *s->r, rng_cmp);
    uint32_t k = 0;
    for (uint32_t i = 1; i < s->n; i++) {
        if (s->r[i].lo <= s->r[k].hi + 1) {
            if (s->r[i].hi > s->r[k].hi) s->r[k].hi = s->r[i].hi;
        } else {
            s->r[++k] = s->r[i];
        }
    }
    s->n = k + 1;
}

/* The complement in U+0000..U+10FFFF (normalized input). */
static void cs_negate(cset *s) {
    cset t;
    t.n = 0;
    uint32_t next = 0;
    for (uint32_t i = 0; i < s->n; i++) {
        if (s->r[i].lo > next) cs_add(&t, next, s->r[i].lo - 1);
        next = s->r[i].hi + 1;
    }
    if (next <= 0x10FFFF) cs_add(&t, next, 0x10FFFF);
    *s = t;
}

/* \d \w \s and negations into s; 0 if e is none of them. */
static int class_escape(char e, cset *s, int *negated) {
    *negated = e == 'D' || e == 'W' || e == 'S';
    switch (e) {
    case 'd': case 'D': cs_add(s, '0', '9'); return 1;
    case 'w': case 'W':
        cs_add(s, '0', '9'); cs_add(s, 'A', 'Z'); cs_add(s, '_', '_'); cs_add(s, 'a', 'z');
        return 1;
    case 's': case 'S':
        cs_add(s, '\t', '\r'); cs_add(s, ' ', ' ');
        return 1;
    default: return 0;
    }
}

/* One UTF-8 code point of the pattern (json_doc checked the encoding). */
static uint32_t rx_utf8(rx *x) {
    const unsigned char *p = (const unsigned char *)x->s + x->i;
    uint32_t cp = p[0];
    int more = cp < 0x80 ? 0 : cp < 0xE0 ? 1 : cp < 0xF0 ? 2 : 3;
    if (more) cp &= 0x3Fu >> more;
    for (int k = 1; k <= more && x->i + (size_t)k < x->n; k++) cp = cp << 6 | (p[k] & 0x3Fu);
    x->i += (size_t)more + 1;
    return cp;
}

static int hexdigits(rx *x, size_t count, uint32_t *out) {
    uint32_t v = 0;
    for (size_t k = 0; k < count; k++) {
        if (x->i + k >= x->n) return 0;
        char h = x->s[x->i + k];
        int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
              : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
        if (d < 0) return 0;
        v = v << 4 | (uint32_t)d;
    }
    x->i += count;
    *out = v;
    return 1;
}

/* After a backslash (x->i at the escaped character): a single code point
 * (1, *cp), a class escape (2, into s), or an error (0). */
static int rx_escape(rx *x, uint32_t *cp, cset *s, int *negated, int in_class) {
    if (x->i >= x->n) return rx_fail(x, "a trailing backslash"), 0;
    size_t at = x->i - 1; /* the backslash: where an error points */
    char e = x->s[x->i];
    if (class_escape(e, s, negated)) {
        x->i++;
        return 2;
    }
    x->i++;
    switch (e) {
    case 'n': *cp = '\n'; return 1;
    case 't': *cp = '\t'; return 1;
    case 'r': *cp = '\r'; return 1;
    case 'f': *cp = '\f'; return 1;
    case 'v': *cp = '\v'; return 1;
    case '0': *cp = 0; return 1;
    case 'x':
        if (!hexdigits(x, 2, cp)) return x->i = at, rx_fail(x, "\\x needs two hex digits"), 0;
        return 1;
    case 'u':
        if (!hexdigits(x, 4, cp) || (*cp >= 0xD800 && *cp <= 0xDFFF))
            return x->i = at, rx_fail(x, "\\u needs four hex digits, not a surrogate"), 0;
        return 1;
    case 'b':
        if (in_class) { *cp = '\b'; return 1; }
        return x->i = at, rx_fail(x, "word boundaries (\\b) are not supported"), 0;
    case 'B': return x->i = at, rx_fail(x, "word boundaries (\\B) are not supported"), 0;
    case 'k': return x->i = at, rx_fail(x, "backreferences (\\k<name>) are not supported"), 0;
    case 'p': case 'P':
        return x->i = at, rx_fail(x, "Unicode property classes (\\p, \\P) are not supported"), 0;
    case 'A': case 'z': case 'Z': case 'G':
        return x->i = at, rx_fail(x, "anchors other than ^ and $ at the ends are not supported"), 0;
    case 'c': return x->i = at, rx_fail(x, "control escapes (\\c) are not supported"), 0;
    default:
        if (e >= '1' && e <= '9')
            return x->i = at, rx_fail(x, "backreferences (\\1 .. \\9) are not supported"), 0;
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9'))
            return x->i = at, rx_fail(x, "an unknown escape"), 0;
        /* Escaped punctuation or other character: itself. */
        x->i--;
        *cp = rx_utf8(x);
        return 1;
    }
}

/* [...] after the '['. */
static fx_status rx_class(rx *x, cset *out) {
    out->n = 0;
    int neg = 0;
    if (x->i < x->n && x->s[x->i] == '^') { neg = 1; x->i++; }
    int first = 1;
    while (x->i < x->n && (x->s[x->i] != ']' || first)) {
        first = 0;
        uint32_t lo;
        if (x->s[x->i] == '\\') {
            x->i++;
            cset cls;
            cls.n = 0;
            int cneg = 0;
            int k = rx_escape(x, &lo, &cls, &cneg, 1);
            if (!k) return x->c->status;
            if (k == 2) {
                if (cneg) {
                    cs_norm(&cls);
                    cs_negate(&cls);
                }
                for (uint32_t r = 0; r < cls.n; r++)
                    if (out->n >= MAX_RANGES || !cs_add(out, cls.r[r].lo, cls.r[r].hi))
                        return rx_fail(x, "a character class with too many ranges");
                continue;
            }
        } else if (x->s[x->i] == '[' && x->i + 1 < x->n && x->s[x->i + 1] == ':') {
            return rx_fail(x, "POSIX classes ([:alpha:]) are not supported");
        } else {
            lo = rx_utf8(x);
        }
        uint32_t hi = lo;
        if (x->i + 1 < x->n && x->s[x->i] == '-' && x->s[x->i + 1] != ']') {
            x->i++;
            if (x->s[x->i] == '\\') {
                x->i++;
                cset cls;
                cls.n = 0;
                int cneg = 0;
                int k = rx_escape(x, &hi, &cls, &cneg, 1);
                if (!k) return x->c->status;
                if (k == 2) return rx_fail(x, "a range ending in a class escape");
            } else {
                hi = rx_utf8(x);
            }
            if (hi < lo) return rx_fail(x, "a range whose end is before its start");
        }
        if (out->n >= MAX_RANGES || !cs_add(out, lo, hi))
            return rx_fail(x, "a character class with too many ranges");
    }
    if (x->i >= x->n) return rx_fail(x, "an unterminated character class");
    x->i++;
    cs_norm(out);
    if (neg) cs_negate(out);
    return FX_OK;
}

/* ---- writing sets and characters as JSON string content ---- */

static int json_escaped(uint32_t cp) { return cp < 0x20 || cp == '"' || cp == '\\' || cp == 0x7F; }

/* The JSON spelling of a character that needs an escape, as GBNF
 * literal text (inside the quotes). */
static void escaped_char(sbuf *o, uint32_t cp) {
    switch (cp) {
    case '"': sb_str(o, "\\\\\\\""); break;
    case '\\': sb_str(o, "\\\\\\\\"); break;
    case '\n': sb_str(o, "\\\\n"); break;
    case '\r': sb_str(o, "\\\\r"); break;
    case '\t': sb_str(o, "\\\\t"); break;
    case '\b': sb_str(o, "\\\\b"); break;
    case '\f': sb_str(o, "\\\\f"); break;
    default: sb_fmt(o, "\\\\u%04x", cp);
    }
}

static void class_cp(sbuf *o, uint32_t cp) {
    if (cp > 0x20 && cp < 0x7F && cp != ']' && cp != '\\' && cp != '-' && cp != '^' &&
        cp != '"')
        sb_fmt(o, "%c", (char)cp);
    else if (cp <= 0xFFFF)
        sb_fmt(o, "\\u%04X", cp);
    else
        sb_fmt(o, "\\U%08X", cp);
}

/* Returns the grammar weight (elements) written. */
static uint32_t write_set(sbuf *o, const cset *s) {
    cset raw;
    raw.n = 0;
    uint32_t esc[40], n_esc = 0, weight = 0;
    for (uint32_t i = 0; i < s->n; i++) {
        uint32_t lo = s->r[i].lo, hi = s->r[i].hi;
        /* The escaped characters (all below 0x80) one by one. */
        for (uint32_t cp = lo; cp <= hi && cp < 0x80; cp++)
            if (json_escaped(cp) && n_esc < 40) esc[n_esc++] = cp;
        /* The rest raw, split around them and the surrogates. */
        uint32_t cut[][2] = {{0x00, 0x1F}, {'"', '"'}, {'\\', '\\'}, {0x7F, 0x7F},
                             {0xD800, 0xDFFF}};
        uint32_t from = lo;
        for (size_t k = 0; k < sizeof cut / sizeof *cut && from <= hi; k++) {
            if (cut[k][1] < from) continue;
            if (cut[k][0] > hi) break;
            if (cut[k][0] > from) cs_add(&raw, from, cut[k][0] - 1);
            from = cut[k][1] + 1;
        }
        if (from <= hi) cs_add(&raw, from, hi);
    }
    uint32_t alts = (raw.n > 0) + n_esc;
    if (alts > 1) sb_str(o, "(");
    if (raw.n) {
        sb_str(o, "[");
        for (uint32_t i = 0; i < raw.n; i++) {
            class_cp(o, raw.r[i].lo);
            if (raw.r[i].hi != raw.r[i].lo) {
                sb_str(o, "-");
                class_cp(o, raw.r[i].hi);
            }
        }
        sb_str(o, "]");
        weight += 2 * raw.n + 1;
    }
    for (uint32_t k = 0; k < n_esc; k++) {
        if (k || raw.n) sb_str(o, " | ");
        sb_str(o, "\"");
        escaped_char(o, esc[k]);
        sb_str(o, "\"");
        weight += 4;
    }
    if (alts > 1) sb_str(o, ")");
    return weight;
}

/* A literal character's text inside a GBNF string literal. */
static void literal_char(sbuf *o, uint32_t cp) {
    if (json_escaped(cp)) {
        escaped_char(o, cp);
    } else {
        char u[4];
        size_t n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
        static const unsigned char lead[] = {0, 0, 0xC0, 0xE0, 0xF0};
        for (size_t k = n; k-- > 1;) {
            u[k] = (char)(0x80 | (cp & 0x3F));
            cp >>= 6;
        }
        u[0] = (char)(lead[n] | cp);
        sb_put(o, u, n);
    }
}

/* ---- the parser: alternation > sequence > quantified atom ---- */

typedef struct piece {
    uint32_t weight;
    int nullable;
} piece;

static fx_status rx_alt(rx *x, sbuf *o, piece *out);

/* Reads {m}, {m,}, {m,n} or {,n} at x->i; 0 (and x->i unmoved) if the
 * text there is not one, which makes the '{' a literal. */
static int rx_braces(rx *x, uint32_t *lo, uint32_t *hi, int *too_big) {
    size_t i = x->i + 1;
    uint64_t a = 0, b = 0;
    int da = 0, db = 0, comma = 0;
    for (; i < x->n && x->s[i] >= '0' && x->s[i] <= '9'; i++, da++)
        if (a < 100000) a = a * 10 + (uint64_t)(x->s[i] - '0');
    if (i < x->n && x->s[i] == ',') {
        comma = 1;
        for (i++; i < x->n && x->s[i] >= '0' && x->s[i] <= '9'; i++, db++)
            if (b < 100000) b = b * 10 + (uint64_t)(x->s[i] - '0');
    }
    if (i >= x->n || x->s[i] != '}' || (!da && !db)) return 0;
    x->i = i + 1;
    *lo = da ? (uint32_t)a : 0;
    *hi = !comma ? *lo : db ? (uint32_t)b : UINT32_MAX;
    *too_big = a > FX_JS_MAX_REPEAT || (db && b > FX_JS_MAX_REPEAT);
    return 1;
}

static void suffix(sbuf *o, uint32_t lo, uint32_t hi) {
    if (lo == 0 && hi == UINT32_MAX) sb_str(o, "*");
    else if (lo == 1 && hi == UINT32_MAX) sb_str(o, "+");
    else if (lo == 0 && hi == 1) sb_str(o, "?");
    else if (hi == UINT32_MAX) sb_fmt(o, "{%u,}", lo);
    else if (lo == hi) sb_fmt(o, "{%u}", lo);
    else sb_fmt(o, "{%u,%u}", lo, hi);
}

/* One atom into o (a single GBNF term); *lit set when it is one literal
 * character (then o holds its literal text, without quotes). */
static fx_status rx_atom(rx *x, sbuf *o, piece *p, int *lit) {
    *lit = 0;
    p->nullable = 0;
    p->weight = 1;
    char ch = x->s[x->i];
    cset set;
    set.n = 0;
    if (ch == '(') {
        x->i++;
        if (x->i < x->n && x->s[x->i] == '?') {
            const char *t = x->s + x->i;
            size_t left = x->n - x->i;
            if (left >= 2 && t[1] == ':') {
                x->i += 2;
            } else if (left >= 3 && (t[1] == '=' || t[1] == '!')) {
                return rx_fail(x, "lookahead ((?= and (?!) is not supported");
            } else if (left >= 3 && t[1] == '<' && (t[2] == '=' || t[2] == '!')) {
                return rx_fail(x, "lookbehind ((?<= and (?<!) is not supported");
            } else if (left >= 3 && (t[1] == '<' || (t[1] == 'P' && t[2] == '<'))) {
                /* A named group matches as a plain one. */
                size_t k = x->i + (t[1] == 'P' ? 3 : 2);
                while (k < x->n && x->s[k] != '>') k++;
                if (k >= x->n) return rx_fail(x, "an unterminated group name");
                x->i = k + 1;
            } else {
                return rx_fail(x, "group syntax (?...) other than (?: and named groups "
                                  "(inline flags, atomic groups) is not supported");
            }
        }
        if (++x->groups > MAX_GROUPS) return rx_fail(x, "groups nested deeper than 40");
        sb_str(o, "(");
        if (rx_alt(x, o, p) != FX_OK) return x->c->status;
        x->groups--;
        if (x->i >= x->n || x->s[x->i] != ')') return rx_fail(x, "an unclosed group");
        x->i++;
        sb_str(o, ")");
        p->weight += 2;
        return FX_OK;
    }
    if (ch == '[') {
        x->i++;
        if (rx_class(x, &set) != FX_OK) return x->c->status;
        if (set.n == 0) return rx_fail(x, "a character class that matches nothing");
        p->weight = write_set(o, &set);
        return FX_OK;
    }
    if (ch == '.') {
        x->i++;
        cs_add(&set, '\n', '\n');
        cs_add(&set, '\r', '\r');
        cs_negate(&set);
        p->weight = write_set(o, &set);
        return FX_OK;
    }
    if (ch == '^' || ch == '$') return rx_fail(x, "an anchor (^ or $) inside the pattern");
    if (ch == '*' || ch == '+' || ch == '?')
        return rx_fail(x, "a quantifier with nothing to repeat");
    if (ch == ')') return rx_fail(x, "an unbalanced ')'");
    uint32_t cp;
    if (ch == '\\') {
        x->i++;
        int neg = 0;
        int k = rx_escape(x, &cp, &set, &neg, 0);
        if (!k) return x->c->status;
        if (k == 2) {
            cs_norm(&set);
            if (neg) cs_negate(&set);
            p->weight = write_set(o, &set);
            return FX_OK;
        }
    } else {
        cp = rx_utf8(x); /* also a '{' that opens no quantifier, '}' and ']' */
    }
    literal_char(o, cp);
    *lit = 1;
    return FX_OK;
}

/* A sequence, up to '|', ')' or the end; consecutive unrepeated literal
 * characters become one GBNF literal. */
static fx_status rx_seq(rx *x, sbuf *o, piece *out) {
    out->weight = 0;
    out->nullable = 1;
    sbuf pend = {x->c->alloc, NULL, 0, 0, 0};
    sbuf atom = {x->c->alloc, NULL, 0, 0, 0};
    int terms = 0;
    fx_status st = FX_OK;
    while (st == FX_OK && x->i < x->n && x->s[x->i] != '|' && x->s[x->i] != ')') {
        piece p;
        int lit;
        atom.len = 0;
        if (atom.p) atom.p[0] = '\0';
        if ((st = rx_atom(x, &atom, &p, &lit)) != FX_OK) break;
        uint32_t lo = 1, hi = 1;
        int quant = 0, too_big = 0;
        if (x->i < x->n) {
            char q = x->s[x->i];
            if (q == '?' || q == '*' || q == '+') {
                quant = 1;
                x->i++;
                lo = q == '+';
                hi = q == '?' ? 1 : UINT32_MAX;
            } else if (q == '{' && rx_braces(x, &lo, &hi, &too_big)) {
                quant = 1;
            }
            if (quant && x->i < x->n && (x->s[x->i] == '?' || x->s[x->i] == '+'))
                x->i++; /* lazy or possessive: the same strings */
            if (quant && x->i < x->n &&
                (x->s[x->i] == '*' || x->s[x->i] == '+' || x->s[x->i] == '?' ||
                 (x->s[x->i] == '{' && x->i + 1 < x->n && x->s[x->i + 1] >= '0' &&
                  x->s[x->i + 1] <= '9')))
                st = rx_fail(x, "a quantifier on a quantifier");
        }
        if (st != FX_OK) break;
        if (too_big) { st = rx_fail(x, "a repetition count above 1000"); break; }
        if (quant && hi != UINT32_MAX && lo > hi) {
            st = rx_fail(x, "a repetition {m,n} with n < m");
            break;
        }
        if (quant && hi == UINT32_MAX && p.nullable) {
            st = rx_fail(x, "an unbounded repetition of something that can match the "
                            "empty string");
            break;
        }
        if (lit && !quant) {
            sb_put(&pend, atom.p, atom.len);
            out->weight += 1;
            out->nullable = 0;
            continue;
        }
        if (pend.len) {
            sb_str(o, terms++ ? " \"" : "\"");
            sb_put(o, pend.p, pend.len);
            sb_str(o, "\"");
            pend.len = 0;
        }
        if (terms++) sb_str(o, " ");
        if (lit) sb_str(o, "\"");
        sb_put(o, atom.p, atom.len);
        if (lit) sb_str(o, "\"");
        if (quant) suffix(o, lo, hi);
        uint64_t copies = !quant ? 1 : hi == UINT32_MAX ? (uint64_t)lo + 1 : hi;
        uint64_t w = (uint64_t)out->weight + (uint64_t)(p.weight + 4) * (copies ? copies : 1);
        if (w > MAX_WEIGHT) {
            st = rx_fail(x, "repetitions that expand past 262144 grammar elements");
            break;
        }
        out->weight = (uint32_t)w;
        if (!(p.nullable || (quant && lo == 0))) out->nullable = 0;
    }
    if (st == FX_OK && pend.len) {
        sb_str(o, terms++ ? " \"" : "\"");
        sb_put(o, pend.p, pend.len);
        sb_str(o, "\"");
    }
    if (st == FX_OK && terms == 0) sb_str(o, "\"\"");
    if (st == FX_OK && (pend.failed || atom.failed)) st = fx_js_oom(x->c);
    sb_free(&pend);
    sb_free(&atom);
    return st;
}

static fx_status rx_alt(rx *x, sbuf *o, piece *out) {
    out->weight = 0;
    out->nullable = 0;
    for (int k = 0;; k++) {
        piece p;
        if (k) sb_str(o, " | ");
        if (rx_seq(x, o, &p) != FX_OK) return x->c->status;
        out->weight += p.weight;
        out->nullable |= p.nullable;
        if (out->weight > MAX_WEIGHT)
            return rx_fail(x, "repetitions that expand past 262144 grammar elements");
        if (x->i >= x->n || x->s[x->i] != '|') return FX_OK;
        x->i++;
    }
}

fx_status fx_js_pattern(conv *c, const char *text, size_t n, sbuf *body) {
    rx x = {c, text, 0, n, 0};
    /* The anchors: ^ first, $ last and not escaped. */
    size_t bs = 0;
    while (bs + 1 < n && text[n - 2 - bs] == '\\') bs++;
    if (n < 2 || text[0] != '^' || text[n - 1] != '$' || (bs & 1))
        return fx_js_fail(c, FX_ERR_INVALID_ARG, "pattern must be anchored as ^...$ "
                          "(as llama.cpp's converter requires)", NULL);
    x.s = text + 1;
    x.n = n - 2;
    sbuf g = {c->alloc, NULL, 0, 0, 0};
    piece p;
    fx_status st = rx_alt(&x, &g, &p);
    if (st == FX_OK && x.i < x.n) st = rx_fail(&x, "an unbalanced ')'");
    if (st == FX_OK) {
        sb_str(body, "\"\\\"\" (");
        sb_put(body, g.p, g.len);
        sb_str(body, ") \"\\\"\"");
        if (g.failed || body->failed) st = fx_js_oom(c);
    }
    sb_free(&g);
    return st;
}

/* ---- formats, as llama.cpp writes them ---- */

int fx_js_format(conv *c, const char *name, size_t n, sbuf *body) {
#define IS(s) (n == sizeof s - 1 && memcmp(name, s, n) == 0)
    if (IS("date") || IS("date-time")) {
        c->used |= USE_DATE | (IS("date-time") ? USE_TIME : 0);
        sb_str(body, IS("date") ? "\"\\\"\" json-date \"\\\"\""
                                : "\"\\\"\" json-date \"T\" json-time \"\\\"\"");
        return 1;
    }
    if (IS("time")) {
        c->used |= USE_TIME;
        sb_str(body, "\"\\\"\" json-time \"\\\"\"");
        return 1;
    }
    /* "uuid", and "uuid1" .. "uuid5" as llama.cpp also takes. */
    if ((n == 4 || (n == 5 && name[4] >= '1' && name[4] <= '5')) && memcmp(name, "uuid", 4) == 0) {
        sb_str(body, "\"\\\"\" [0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" "
                     "[0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12} \"\\\"\"");
        return 1;
    }
    return 0;
#undef IS
}
