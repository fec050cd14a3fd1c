/*
 * jinja lexer and parser: template text to a tree of jnodes, with jinja2's
 * whitespace rules as transformers configures them (trim_blocks,
 * lstrip_blocks, keep_trailing_newline off) and its operator precedence.
 * Recursion is counted against limits.max_depth so that deeply nested
 * brackets or blocks end in an error, not a stack overflow.
 */
#include "jinja_int.h"

#include <stdlib.h>
#include <string.h>

typedef enum ttype {
    T_TEXT, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END, T_NAME,
    T_STRING, T_INT, T_FLOAT, T_OP, T_EOF
} ttype;

typedef struct token {
    uint8_t type;
    uint32_t line, col;
    jstr s;          /* text, name, operator, decoded string */
    int64_t i;
    double f;
} token;

typedef struct lexer {
    jctx *c;
    const char *src;
    size_t len, pos;
    uint32_t line;
    size_t line_start;
    token *toks;
    size_t n, cap;
} lexer;

typedef struct parser {
    jctx *c;
    token *t;
    size_t n, i;
} parser;

/* ---- lexer ---- */

static void lx_pos(lexer *lx, size_t upto) {
    for (size_t i = lx->pos; i < upto; i++) {
        if (lx->src[i] == '\n') {
            lx->line++;
            lx->line_start = i + 1;
        }
    }
    lx->pos = upto;
}

static token *lx_push(lexer *lx, ttype type, size_t at) {
    if (lx->n == lx->cap) {
        size_t cap = lx->cap ? lx->cap * 2 : 256;
        token *t = jalloc(lx->c, cap * sizeof *t);
        if (lx->n) memcpy(t, lx->toks, lx->n * sizeof *t);
        lx->toks = t;
        lx->cap = cap;
    }
    jstep(lx->c, 1);
    token *t = &lx->toks[lx->n++];
    memset(t, 0, sizeof *t);
    t->type = (uint8_t)type;
    t->line = lx->line;
    t->col = (uint32_t)(at - lx->line_start + 1);
    return t;
}

_Noreturn static void lx_fail(lexer *lx, const char *why) {
    jfail_at(lx->c, lx->line, (uint32_t)(lx->pos - lx->line_start + 1),
             "%s", why);
}

static bool is_space(char ch) {
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' ||
           ch == '\v';
}

static bool is_ident(char ch, bool first) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_' ||
           (!first && ch >= '0' && ch <= '9');
}

static void put_cp(jctx *c, jout *o, uint32_t cp) {
    char b[4];
    size_t n;
    if (cp < 0x80) { b[0] = (char)cp; n = 1; }
    else if (cp < 0x800) {
        b[0] = (char)(0xc0 | (cp >> 6)); b[1] = (char)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        b[0] = (char)(0xe0 | (cp >> 12)); b[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        b[2] = (char)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        b[0] = (char)(0xf0 | (cp >> 18)); b[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        b[2] = (char)(0x80 | ((cp >> 6) & 0x3f)); b[3] = (char)(0x80 | (cp & 0x3f));
        n = 4;
    }
    jout_put(c, o, b, n);
}

/* A quoted literal, decoded as jinja2 does it: Python's unicode-escape
 * (\n, \t, \\, \', \xhh, \uhhhh, \Uhhhhhhhh, octal ...), with an unknown
 * escape kept as written. */
static void lx_string(lexer *lx, token *t) {
    char q = lx->src[lx->pos];
    size_t i = lx->pos + 1;
    jout o = { 0 };
    size_t from = i;
    for (;;) {
        if (i >= lx->len) lx_fail(lx, "unterminated string literal");
        char ch = lx->src[i];
        if (ch == q) break;
        if (ch != '\\') { i++; continue; }
        jout_put(lx->c, &o, lx->src + from, i - from);
        if (i + 1 >= lx->len) lx_fail(lx, "unterminated string literal");
        char e = lx->src[i + 1];
        i += 2;
        const char *simple = NULL;
        switch (e) {
        case 'n': simple = "\n"; break;
        case 't': simple = "\t"; break;
        case 'r': simple = "\r"; break;
        case '\\': simple = "\\"; break;
        case '\'': simple = "'"; break;
        case '"': simple = "\""; break;
        case 'a': simple = "\a"; break;
        case 'b': simple = "\b"; break;
        case 'f': simple = "\f"; break;
        case 'v': simple = "\v"; break;
        case '\n': simple = ""; break;
        default: break;
        }
        if (simple) {
            jout_put(lx->c, &o, simple, strlen(simple));
        } else if (e == 'x' || e == 'u' || e == 'U') {
            int digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t cp = 0;
            for (int k = 0; k < digits; k++, i++) {
                char h = i < lx->len ? lx->src[i] : 0;
                int v = (h >= '0' && h <= '9') ? h - '0'
                      : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                      : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
                if (v < 0) lx_fail(lx, "truncated \\x, \\u or \\U escape");
                cp = cp * 16 + (uint32_t)v;
            }
            if (cp > 0x10ffff || (cp >= 0xd800 && cp < 0xe000))
                lx_fail(lx, "escape is not a Unicode scalar value");
            put_cp(lx->c, &o, cp);
        } else if (e >= '0' && e <= '7') {
            uint32_t cp = (uint32_t)(e - '0');
            for (int k = 0; k < 2 && i < lx->len && lx->src[i] >= '0' &&
                            lx->src[i] <= '7'; k++, i++)
                cp = cp * 8 + (uint32_t)(lx->src[i] - '0');
            put_cp(lx->c, &o, cp);
        } else {
            jout_put(lx->c, &o, lx->src + i - 2, 2);
        }
        from = i;
    }
    jout_put(lx->c, &o, lx->src + from, i - from);
    t->s = jout_str(&o);
    lx_pos(lx, i + 1);
}

static void lx_number(lexer *lx, token *t) {
    size_t i = lx->pos;
    char buf[80];
    size_t n = 0;
    bool is_float = false;
    while (i < lx->len) {
        char ch = lx->src[i];
        if ((ch >= '0' && ch <= '9') || ch == '_') {
            if (ch != '_' && n < sizeof buf - 1) buf[n++] = ch;
            i++;
        } else if (ch == '.' && !is_float && i + 1 < lx->len &&
                   lx->src[i + 1] >= '0' && lx->src[i + 1] <= '9') {
            is_float = true;
            if (n < sizeof buf - 1) buf[n++] = ch;
            i++;
        } else if ((ch == 'e' || ch == 'E') && i + 1 < lx->len &&
                   ((lx->src[i + 1] >= '0' && lx->src[i + 1] <= '9') ||
                    ((lx->src[i + 1] == '+' || lx->src[i + 1] == '-') &&
                     i + 2 < lx->len && lx->src[i + 2] >= '0' &&
                     lx->src[i + 2] <= '9'))) {
            is_float = true;
            if (n < sizeof buf - 2) { buf[n++] = ch; buf[n++] = lx->src[i + 1]; }
            i += 2;
        } else {
            break;
        }
    }
    buf[n] = '\0';
    if (n >= sizeof buf - 2) lx_fail(lx, "number literal too long");
    if (is_float) {
        t->type = T_FLOAT;
        t->f = strtod(buf, NULL);
    } else {
        char *end;
        unsigned long long v = strtoull(buf, &end, 10);
        if (n > 18 && (v > (unsigned long long)INT64_MAX || n > 19))
            lx_fail(lx, "integer literal too large");
        t->type = T_INT;
        t->i = (int64_t)v;
    }
    lx_pos(lx, i);
}

static const char *const ops2[] = { "//", "**", "==", "!=", "<=", ">=" };
static const char ops1[] = "+-*/%~<>=()[]{}.,:|";

/* The expression tokens of one tag, up to its end marker. */
static void lx_tag(lexer *lx, bool block, bool *strip_after, bool *keep) {
    const char *end = block ? "%}" : "}}";
    /* As jinja2: an end marker only counts outside brackets, so that
     * {{ {"a": {}} }} closes at the last }}. */
    size_t open_brackets = 0;
    for (;;) {
        while (lx->pos < lx->len && is_space(lx->src[lx->pos]))
            lx_pos(lx, lx->pos + 1);
        if (lx->pos >= lx->len)
            lx_fail(lx, block ? "unterminated {% tag: no %}"
                              : "unterminated {{ expression: no }}");
        const char *p = lx->src + lx->pos;
        size_t rest = lx->len - lx->pos;
        if (open_brackets == 0 && rest >= 3 && (p[0] == '-' || p[0] == '+') && p[1] == end[0] &&
            p[2] == end[1]) {
            *strip_after = p[0] == '-';
            *keep = p[0] == '+';
            lx_push(lx, block ? T_BLOCK_END : T_VAR_END, lx->pos);
            lx_pos(lx, lx->pos + 3);
            return;
        }
        if (open_brackets == 0 && rest >= 2 && p[0] == end[0] && p[1] == end[1]) {
            lx_push(lx, block ? T_BLOCK_END : T_VAR_END, lx->pos);
            lx_pos(lx, lx->pos + 2);
            return;
        }
        char ch = p[0];
        if (ch == '\'' || ch == '"') {
            lx_string(lx, lx_push(lx, T_STRING, lx->pos));
        } else if (ch >= '0' && ch <= '9') {
            lx_number(lx, lx_push(lx, T_INT, lx->pos));
        } else if (is_ident(ch, true)) {
            size_t i = lx->pos;
            while (i < lx->len && is_ident(lx->src[i], false)) i++;
            token *t = lx_push(lx, T_NAME, lx->pos);
            t->s.p = p;
            t->s.n = i - lx->pos;
            lx_pos(lx, i);
        } else {
            size_t n = 0;
            for (size_t k = 0; k < sizeof ops2 / sizeof ops2[0]; k++)
                if (rest >= 2 && memcmp(p, ops2[k], 2) == 0) n = 2;
            if (!n && ch && strchr(ops1, ch)) n = 1;
            if (!n) lx_fail(lx, "unexpected character in a tag");
            token *t = lx_push(lx, T_OP, lx->pos);
            t->s.p = p;
            t->s.n = n;
            if (n == 1 && (ch == '(' || ch == '[' || ch == '{')) open_brackets++;
            if (n == 1 && (ch == ')' || ch == ']' || ch == '}') && open_brackets)
                open_brackets--;
            lx_pos(lx, lx->pos + n);
        }
    }
}

/* Python's \s for lstrip_blocks: the line's indentation before a tag. */
static bool only_blanks(const char *p, size_t n) {
    if (n == 0) return false;
    const char *s = p;
    size_t k = n;
    fx_chat_strip(&s, &k, true, false);
    return k == 0;
}

static void lex(lexer *lx) {
    bool line_starting = true;
    while (lx->pos < lx->len) {
        /* The next tag opener. */
        size_t i = lx->pos;
        const char *open = NULL;
        for (; i + 1 < lx->len; i++) {
            if (lx->src[i] == '{' && (lx->src[i + 1] == '{' ||
                lx->src[i + 1] == '%' || lx->src[i + 1] == '#')) {
                open = lx->src + i;
                break;
            }
        }
        if (!open) i = lx->len;
        const char *text = lx->src + lx->pos;
        size_t tlen = i - lx->pos;
        char kind = open ? open[1] : 0;
        char sign = (open && i + 2 < lx->len) ? open[2] : 0;
        if (open && sign == '-') {
            fx_chat_strip(&text, &tlen, false, true);
        } else if (open && sign != '+' && kind != '{') {
            size_t l_pos = tlen;
            while (l_pos > 0 && text[l_pos - 1] != '\n') l_pos--;
            if ((l_pos > 0 || line_starting) &&
                only_blanks(text + l_pos, tlen - l_pos))
                tlen = l_pos;
        }
        if (tlen) {
            token *t = lx_push(lx, T_TEXT, lx->pos);
            t->s.p = text;
            t->s.n = tlen;
        }
        lx_pos(lx, i);
        if (!open) break;
        size_t skip = 2 + ((sign == '-' || sign == '+') ? 1 : 0);
        bool strip_after = false, keep = false;
        if (kind == '#') {
            size_t j = lx->pos + skip;
            while (j + 1 < lx->len && !(lx->src[j] == '#' && lx->src[j + 1] == '}'))
                j++;
            if (j + 1 >= lx->len) lx_fail(lx, "unterminated comment: no #}");
            strip_after = j > lx->pos + skip && lx->src[j - 1] == '-';
            keep = j > lx->pos + skip && lx->src[j - 1] == '+';
            lx_pos(lx, j + 2);
        } else {
            lx_push(lx, kind == '{' ? T_VAR_BEGIN : T_BLOCK_BEGIN, lx->pos);
            lx_pos(lx, lx->pos + skip);
            lx_tag(lx, kind == '%', &strip_after, &keep);
        }
        size_t after = lx->pos;
        if (strip_after) {
            const char *s = lx->src + after;
            size_t k = lx->len - after;
            fx_chat_strip(&s, &k, true, false);
            after = (size_t)(s - lx->src);
        } else if (kind != '{' && !keep && after < lx->len &&
                   lx->src[after] == '\n') {
            after++; /* trim_blocks */
        }
        line_starting = after > lx->pos && lx->src[after - 1] == '\n';
        lx_pos(lx, after);
    }
    lx_push(lx, T_EOF, lx->pos);
}

/* ---- parser helpers ---- */

static token *pk(parser *p) { return &p->t[p->i]; }
static token *adv(parser *p) {
    token *t = &p->t[p->i];
    if (t->type != T_EOF) p->i++;
    return t;
}

_Noreturn static void pfail(parser *p, const char *fmt, const char *what) {
    token *t = pk(p);
    jfail_at(p->c, t->line, t->col, fmt, what);
}

static bool is_op(parser *p, const char *op) {
    token *t = pk(p);
    return t->type == T_OP && jstr_eq(t->s, op);
}

static bool is_name(parser *p, const char *name) {
    token *t = pk(p);
    return t->type == T_NAME && jstr_eq(t->s, name);
}

static bool is_name_at(parser *p, size_t k, const char *name) {
    if (p->i + k >= p->n) return false;
    token *t = &p->t[p->i + k];
    return t->type == T_NAME && jstr_eq(t->s, name);
}

static void expect_op(parser *p, const char *op) {
    if (!is_op(p, op)) pfail(p, "expected '%s'", op);
    adv(p);
}

static jstr expect_name(parser *p) {
    if (pk(p)->type != T_NAME) pfail(p, "expected a name%s", "");
    return adv(p)->s;
}

static void expect_block_end(parser *p) {
    if (pk(p)->type != T_BLOCK_END) pfail(p, "expected '%s'", "%}");
    adv(p);
}

static jnode *mk(parser *p, jkind kind, const token *at) {
    jnode *n = jalloc(p->c, sizeof *n);
    memset(n, 0, sizeof *n);
    n->kind = (uint8_t)kind;
    n->line = at->line;
    n->col = at->col;
    return n;
}

typedef struct nodelist {
    jnode **v;
    size_t n, cap;
} nodelist;

static void nl_push(parser *p, nodelist *l, jnode *n) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        jnode **v = jalloc(p->c, cap * sizeof *v);
        if (l->n) memcpy(v, l->v, l->n * sizeof *v);
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = n;
}

static void set_kids(jnode *n, const nodelist *l) {
    n->kids = l->v;
    n->nkids = l->n;
}

static void enter(parser *p) {
    if (++p->c->depth > p->c->lim->max_depth) {
        token *t = pk(p);
        jfail_at(p->c, t->line, t->col, "the template is nested more than "
                 "%u levels deep", (unsigned)p->c->lim->max_depth);
    }
}

static void leave(parser *p) { p->c->depth--; }

/* ---- expressions ---- */

static jnode *expr(parser *p);
static jnode *or_expr(parser *p);
static jnode *unary(parser *p, bool with_filter);

static bool reserved(jstr s) {
    static const char *const words[] = { "and", "or", "not", "in", "is", "if",
                                         "else", NULL };
    for (size_t i = 0; words[i]; i++)
        if (jstr_eq(s, words[i])) return true;
    return false;
}

/* Call arguments after '(': positional in kids, keyword ones as E_KWARG. */
static void call_args(parser *p, jnode *call) {
    nodelist l = { 0 };
    while (!is_op(p, ")")) {
        if (l.n) {
            expect_op(p, ",");
            if (is_op(p, ")")) break;
        }
        token *t = pk(p);
        if (t->type == T_NAME && p->i + 1 < p->n &&
            p->t[p->i + 1].type == T_OP && jstr_eq(p->t[p->i + 1].s, "=")) {
            jnode *kw = mk(p, E_KWARG, t);
            kw->name = t->s;
            adv(p);
            adv(p);
            kw->a = expr(p);
            nl_push(p, &l, kw);
        } else {
            nl_push(p, &l, expr(p));
        }
    }
    adv(p);
    set_kids(call, &l);
}

static jnode *primary(parser *p) {
    token *t = pk(p);
    jnode *n;
    switch (t->type) {
    case T_NAME:
        adv(p);
        if (jstr_eq(t->s, "true") || jstr_eq(t->s, "True")) {
            n = mk(p, E_LIT, t);
            n->lit = jv_bool(true);
        } else if (jstr_eq(t->s, "false") || jstr_eq(t->s, "False")) {
            n = mk(p, E_LIT, t);
            n->lit = jv_bool(false);
        } else if (jstr_eq(t->s, "none") || jstr_eq(t->s, "None")) {
            n = mk(p, E_LIT, t);
            n->lit = jv_none();
        } else {
            n = mk(p, E_NAME, t);
            n->name = t->s;
        }
        return n;
    case T_STRING: {
        /* Adjacent literals concatenate, as in Python. */
        adv(p);
        n = mk(p, E_LIT, t);
        n->lit = jv_str(t->s.p, t->s.n);
        if (pk(p)->type == T_STRING) {
            jout o = { 0 };
            jout_put(p->c, &o, t->s.p, t->s.n);
            while (pk(p)->type == T_STRING) {
                token *u = adv(p);
                jout_put(p->c, &o, u->s.p, u->s.n);
            }
            jstr s = jout_str(&o);
            n->lit = jv_str(s.p, s.n);
        }
        return n;
    }
    case T_INT:
        adv(p);
        n = mk(p, E_LIT, t);
        n->lit = jv_int(t->i);
        return n;
    case T_FLOAT:
        adv(p);
        n = mk(p, E_LIT, t);
        n->lit = jv_float(t->f);
        return n;
    case T_OP:
        break;
    default:
        pfail(p, "expected an expression%s", "");
    }
    if (is_op(p, "(")) {
        adv(p);
        if (is_op(p, ")")) {
            adv(p);
            n = mk(p, E_TUPLE, t);
            return n;
        }
        jnode *first = expr(p);
        if (!is_op(p, ",")) {
            expect_op(p, ")");
            return first;
        }
        nodelist l = { 0 };
        nl_push(p, &l, first);
        while (is_op(p, ",")) {
            adv(p);
            if (is_op(p, ")")) break;
            nl_push(p, &l, expr(p));
        }
        expect_op(p, ")");
        n = mk(p, E_TUPLE, t);
        set_kids(n, &l);
        return n;
    }
    if (is_op(p, "[")) {
        adv(p);
        nodelist l = { 0 };
        while (!is_op(p, "]")) {
            if (l.n) {
                expect_op(p, ",");
                if (is_op(p, "]")) break;
            }
            nl_push(p, &l, expr(p));
        }
        adv(p);
        n = mk(p, E_LIST, t);
        set_kids(n, &l);
        return n;
    }
    if (is_op(p, "{")) {
        adv(p);
        nodelist l = { 0 };
        while (!is_op(p, "}")) {
            if (l.n) {
                expect_op(p, ",");
                if (is_op(p, "}")) break;
            }
            nl_push(p, &l, expr(p));
            expect_op(p, ":");
            nl_push(p, &l, expr(p));
        }
        adv(p);
        n = mk(p, E_DICT, t);
        set_kids(n, &l);
        return n;
    }
    pfail(p, "unexpected '%s'", jstrdup(p->c, t->s.p, t->s.n));
}

static jnode *subscript(parser *p, jnode *obj, token *at) {
    jnode *parts[3] = { NULL, NULL, NULL };
    int k = 0;
    bool slice = false;
    for (;;) {
        if (!is_op(p, ":") && !is_op(p, "]")) parts[k] = expr(p);
        if (is_op(p, ":")) {
            slice = true;
            if (++k > 2) pfail(p, "too many ':' in a slice%s", "");
            adv(p);
            continue;
        }
        break;
    }
    expect_op(p, "]");
    jnode *n = mk(p, slice ? E_SLICE : E_INDEX, at);
    n->a = obj;
    if (slice) {
        n->b = parts[0];
        n->c = parts[1];
        n->d = parts[2];
    } else {
        if (!parts[0]) pfail(p, "expected a subscript%s", "");
        n->b = parts[0];
    }
    return n;
}

static jnode *postfix(parser *p, jnode *n) {
    for (;;) {
        token *t = pk(p);
        if (is_op(p, ".")) {
            adv(p);
            token *a = pk(p);
            jnode *x = mk(p, E_ATTR, t);
            x->a = n;
            if (a->type == T_NAME) {
                x->name = adv(p)->s;
            } else if (a->type == T_INT) {
                /* x.0 is x[0] in jinja2 */
                adv(p);
                x->kind = E_INDEX;
                x->b = mk(p, E_LIT, a);
                x->b->lit = jv_int(a->i);
            } else {
                pfail(p, "expected an attribute name%s", "");
            }
            n = x;
        } else if (is_op(p, "[")) {
            adv(p);
            n = subscript(p, n, t);
        } else if (is_op(p, "(")) {
            adv(p);
            jnode *x = mk(p, E_CALL, t);
            x->a = n;
            call_args(p, x);
            n = x;
        } else {
            return n;
        }
    }
}

/* Filters (`| name(args)`) and tests (`is [not] name args`). */
static jnode *filters(parser *p, jnode *n) {
    for (;;) {
        token *t = pk(p);
        if (is_op(p, "|")) {
            adv(p);
            jnode *f = mk(p, E_FILTER, t);
            f->a = n;
            f->name = expect_name(p);
            if (is_op(p, "(")) {
                adv(p);
                call_args(p, f);
            }
            n = f;
        } else if (is_name(p, "is")) {
            adv(p);
            jnode *x = mk(p, E_TEST, t);
            x->a = n;
            if (is_name(p, "not")) {
                adv(p);
                x->op = 1;
            }
            x->name = expect_name(p);
            if (is_op(p, "(")) {
                adv(p);
                call_args(p, x);
            } else {
                token *u = pk(p);
                bool arg = u->type == T_STRING || u->type == T_INT ||
                           u->type == T_FLOAT ||
                           (u->type == T_NAME && !reserved(u->s)) ||
                           (u->type == T_OP && (jstr_eq(u->s, "[") ||
                                                jstr_eq(u->s, "{") ||
                                                jstr_eq(u->s, "(")));
                if (arg) {
                    nodelist l = { 0 };
                    nl_push(p, &l, postfix(p, primary(p)));
                    set_kids(x, &l);
                }
            }
            n = x;
        } else {
            return n;
        }
    }
}

static jnode *unary(parser *p, bool with_filter) {
    token *t = pk(p);
    enter(p);
    jnode *n;
    if (is_op(p, "-") || is_op(p, "+")) {
        adv(p);
        n = mk(p, jstr_eq(t->s, "-") ? E_NEG : E_POS, t);
        n->a = unary(p, false);
    } else {
        n = primary(p);
    }
    n = postfix(p, n);
    if (with_filter) n = filters(p, n);
    leave(p);
    return n;
}

static jnode *binary(parser *p, jnode *l, jop op, jnode *r, token *at) {
    jnode *n = mk(p, E_BIN, at);
    n->op = (uint8_t)op;
    n->a = l;
    n->b = r;
    return n;
}

static jnode *pow_expr(parser *p) {
    jnode *n = unary(p, true);
    while (is_op(p, "**")) {
        token *t = adv(p);
        n = binary(p, n, OP_POW, unary(p, true), t);
    }
    return n;
}

static jnode *mul_expr(parser *p) {
    jnode *n = pow_expr(p);
    for (;;) {
        jop op;
        if (is_op(p, "*")) op = OP_MUL;
        else if (is_op(p, "/")) op = OP_DIV;
        else if (is_op(p, "//")) op = OP_FLOORDIV;
        else if (is_op(p, "%")) op = OP_MOD;
        else return n;
        token *t = adv(p);
        n = binary(p, n, op, pow_expr(p), t);
    }
}

static jnode *concat_expr(parser *p) {
    jnode *n = mul_expr(p);
    while (is_op(p, "~")) {
        token *t = adv(p);
        n = binary(p, n, OP_CONCAT, mul_expr(p), t);
    }
    return n;
}

static jnode *add_expr(parser *p) {
    jnode *n = concat_expr(p);
    for (;;) {
        jop op;
        if (is_op(p, "+")) op = OP_ADD;
        else if (is_op(p, "-")) op = OP_SUB;
        else return n;
        token *t = adv(p);
        n = binary(p, n, op, concat_expr(p), t);
    }
}

/* Comparisons chain as in Python: a < b < c is (a < b) and (b < c), the
 * middle operand's node shared by both. */
static jnode *compare(parser *p) {
    jnode *n = add_expr(p);
    jnode *last = NULL;  /* the latest comparison, when chaining */
    for (;;) {
        jop op;
        if (is_op(p, "==")) op = OP_EQ;
        else if (is_op(p, "!=")) op = OP_NE;
        else if (is_op(p, "<")) op = OP_LT;
        else if (is_op(p, "<=")) op = OP_LE;
        else if (is_op(p, ">")) op = OP_GT;
        else if (is_op(p, ">=")) op = OP_GE;
        else if (is_name(p, "in")) op = OP_IN;
        else if (is_name(p, "not") && is_name_at(p, 1, "in")) {
            op = OP_NOTIN;
            adv(p);
        } else {
            return n;
        }
        token *t = adv(p);
        if (!last) {
            n = last = binary(p, n, op, add_expr(p), t);
        } else {
            jnode *next = binary(p, last->b, op, add_expr(p), t);
            jnode *both = mk(p, E_AND, t);
            both->a = n;
            both->b = next;
            n = both;
            last = next;
        }
    }
}

static jnode *not_expr(parser *p) {
    if (is_name(p, "not")) {
        token *t = adv(p);
        enter(p);
        jnode *n = mk(p, E_NOT, t);
        n->a = not_expr(p);
        leave(p);
        return n;
    }
    return compare(p);
}

static jnode *and_expr(parser *p) {
    jnode *n = not_expr(p);
    while (is_name(p, "and")) {
        token *t = adv(p);
        jnode *x = mk(p, E_AND, t);
        x->a = n;
        x->b = not_expr(p);
        n = x;
    }
    return n;
}

static jnode *or_expr(parser *p) {
    jnode *n = and_expr(p);
    while (is_name(p, "or")) {
        token *t = adv(p);
        jnode *x = mk(p, E_OR, t);
        x->a = n;
        x->b = and_expr(p);
        n = x;
    }
    return n;
}

/* `a if cond [else b]`, right-associative. */
static jnode *expr(parser *p) {
    enter(p);
    jnode *n = or_expr(p);
    while (is_name(p, "if")) {
        token *t = adv(p);
        jnode *x = mk(p, E_COND, t);
        x->b = n;
        x->a = or_expr(p);
        if (is_name(p, "else")) {
            adv(p);
            x->c = expr(p);
        }
        n = x;
    }
    leave(p);
    return n;
}

/* An expression that may be an unparenthesized tuple (`for` sources,
 * `set` values). */
static jnode *tuple_expr(parser *p) {
    token *t = pk(p);
    jnode *first = expr(p);
    if (!is_op(p, ",")) return first;
    nodelist l = { 0 };
    nl_push(p, &l, first);
    while (is_op(p, ",")) {
        adv(p);
        nl_push(p, &l, expr(p));
    }
    jnode *n = mk(p, E_TUPLE, t);
    set_kids(n, &l);
    return n;
}

/* ---- statements ---- */

static jnode *body(parser *p, const char *const *ends, jstr *which);

static jnode *stmt_if(parser *p, token *at) {
    jnode *n = mk(p, S_IF, at);
    n->a = tuple_expr(p);
    expect_block_end(p);
    static const char *const ends[] = { "elif", "else", "endif", NULL };
    jstr which;
    n->b = body(p, ends, &which);
    if (jstr_eq(which, "elif")) {
        token *t = pk(p);
        n->c = stmt_if(p, t);
        return n;
    }
    if (jstr_eq(which, "else")) {
        expect_block_end(p);
        static const char *const endif[] = { "endif", NULL };
        n->c = body(p, endif, &which);
    }
    expect_block_end(p);
    return n;
}

static jnode *stmt_for(parser *p, token *at) {
    jnode *n = mk(p, S_FOR, at);
    nodelist targets = { 0 };
    do {
        if (targets.n) adv(p);
        token *t = pk(p);
        jnode *name = mk(p, E_NAME, t);
        name->name = expect_name(p);
        nl_push(p, &targets, name);
    } while (is_op(p, ","));
    set_kids(n, &targets);
    if (!is_name(p, "in")) pfail(p, "expected 'in' in a for loop%s", "");
    adv(p);
    /* The source stops before a filtering `if`: or_expr, not expr. */
    n->a = or_expr(p);
    if (is_name(p, "if")) {
        adv(p);
        n->d = expr(p);
    }
    if (is_name(p, "recursive"))
        pfail(p, "recursive loops are not supported%s", "");
    expect_block_end(p);
    static const char *const ends[] = { "else", "endfor", NULL };
    jstr which;
    n->b = body(p, ends, &which);
    if (jstr_eq(which, "else")) {
        expect_block_end(p);
        static const char *const endfor[] = { "endfor", NULL };
        n->c = body(p, endfor, &which);
    }
    expect_block_end(p);
    return n;
}

static jnode *stmt_set(parser *p, token *at) {
    jnode *n = mk(p, S_SET, at);
    n->name = expect_name(p);
    if (is_op(p, ".")) {
        /* ns.attr = value */
        adv(p);
        n->op = 1;
        jnode *attr = mk(p, E_NAME, pk(p));
        attr->name = expect_name(p);
        n->b = attr;
    } else if (is_op(p, ",")) {
        nodelist l = { 0 };
        jnode *first = mk(p, E_NAME, at);
        first->name = n->name;
        nl_push(p, &l, first);
        while (is_op(p, ",")) {
            adv(p);
            jnode *x = mk(p, E_NAME, pk(p));
            x->name = expect_name(p);
            nl_push(p, &l, x);
        }
        set_kids(n, &l);
    }
    if (!is_op(p, "=")) {
        if (n->op || n->nkids) pfail(p, "expected '='%s", "");
        /* {% set x %}...{% endset %} captures its body. */
        n->kind = S_SETBLOCK;
        expect_block_end(p);
        static const char *const ends[] = { "endset", NULL };
        jstr which;
        n->a = body(p, ends, &which);
        expect_block_end(p);
        return n;
    }
    adv(p);
    n->a = tuple_expr(p);
    expect_block_end(p);
    return n;
}

static jnode *stmt_macro(parser *p, token *at) {
    jnode *n = mk(p, S_MACRO, at);
    n->name = expect_name(p);
    expect_op(p, "(");
    nodelist params = { 0 };
    while (!is_op(p, ")")) {
        if (params.n) expect_op(p, ",");
        jnode *x = mk(p, E_NAME, pk(p));
        x->name = expect_name(p);
        if (is_op(p, "=")) {
            adv(p);
            x->a = expr(p);
        }
        nl_push(p, &params, x);
    }
    adv(p);
    set_kids(n, &params);
    expect_block_end(p);
    static const char *const ends[] = { "endmacro", NULL };
    jstr which;
    n->b = body(p, ends, &which);
    if (pk(p)->type == T_NAME) adv(p); /* {% endmacro name %} */
    expect_block_end(p);
    return n;
}

/* Statements up to one of `ends` (returned in *which, its tag consumed up
 * to the name) or, when ends is NULL, the end of the template. */
static jnode *body(parser *p, const char *const *ends, jstr *which) {
    token *start = pk(p);
    enter(p);
    nodelist l = { 0 };
    for (;;) {
        token *t = pk(p);
        if (t->type == T_EOF) {
            if (ends)
                jfail_at(p->c, start->line, start->col, "unexpected end of "
                         "template: the block here needs {%% %s %%}",
                         ends[0]);
            break;
        }
        if (t->type == T_TEXT) {
            adv(p);
            jnode *n = mk(p, S_TEXT, t);
            n->lit = jv_str(t->s.p, t->s.n);
            nl_push(p, &l, n);
            continue;
        }
        if (t->type == T_VAR_BEGIN) {
            adv(p);
            jnode *n = mk(p, S_OUT, t);
            n->a = tuple_expr(p);
            if (pk(p)->type != T_VAR_END) pfail(p, "expected '%s'", "}}");
            adv(p);
            nl_push(p, &l, n);
            continue;
        }
        if (t->type != T_BLOCK_BEGIN) pfail(p, "unexpected token%s", "");
        adv(p);
        token *kw = pk(p);
        if (kw->type != T_NAME) pfail(p, "expected a statement name%s", "");
        for (size_t i = 0; ends && ends[i]; i++) {
            if (jstr_eq(kw->s, ends[i])) {
                adv(p);
                *which = kw->s;
                jnode *n = mk(p, S_BLOCK, start);
                set_kids(n, &l);
                leave(p);
                return n;
            }
        }
        adv(p);
        jnode *n = NULL;
        if (jstr_eq(kw->s, "if")) n = stmt_if(p, kw);
        else if (jstr_eq(kw->s, "for")) n = stmt_for(p, kw);
        else if (jstr_eq(kw->s, "set")) n = stmt_set(p, kw);
        else if (jstr_eq(kw->s, "macro")) n = stmt_macro(p, kw);
        else if (jstr_eq(kw->s, "break") || jstr_eq(kw->s, "continue")) {
            n = mk(p, jstr_eq(kw->s, "break") ? S_BREAK : S_CONTINUE, kw);
            expect_block_end(p);
        } else if (jstr_eq(kw->s, "generation")) {
            /* transformers' assistant-mask marker: renders its body. */
            expect_block_end(p);
            static const char *const ends2[] = { "endgeneration", NULL };
            jstr w;
            n = body(p, ends2, &w);
            expect_block_end(p);
        } else if (jstr_eq(kw->s, "call")) {
            n = mk(p, S_CALLBLOCK, kw);
            n->a = expr(p);
            if (n->a->kind != E_CALL)
                pfail(p, "{%% call %%} needs a macro call%s", "");
            expect_block_end(p);
            static const char *const ends3[] = { "endcall", NULL };
            jstr w;
            n->b = body(p, ends3, &w);
            expect_block_end(p);
        } else {
            jfail_at(p->c, kw->line, kw->col, "unknown or misplaced statement "
                     "'%s'", jstrdup(p->c, kw->s.p, kw->s.n));
        }
        nl_push(p, &l, n);
    }
    jnode *n = mk(p, S_BLOCK, start);
    set_kids(n, &l);
    leave(p);
    return n;
}

/* jinja2 reads the source with str.splitlines() and joins the lines with
 * "\n": \r\n, \r and the other line breaks Python knows become \n, and
 * one trailing newline goes away. */
static const char *normalize(jctx *c, const char *src, size_t len,
                             size_t *out_len) {
    char *o = jalloc(c, len + 1);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)src[i];
        size_t skip = 0;
        if (ch == '\r' && i + 1 < len && src[i + 1] == '\n') skip = 1;
        else if (ch == '\r' || ch == '\v' || ch == '\f' ||
                 (ch >= 0x1c && ch <= 0x1e)) skip = 0;
        else if (ch == 0xc2 && i + 1 < len && (unsigned char)src[i + 1] == 0x85)
            skip = 1;
        else if (ch == 0xe2 && i + 2 < len && (unsigned char)src[i + 1] == 0x80 &&
                 ((unsigned char)src[i + 2] == 0xa8 ||
                  (unsigned char)src[i + 2] == 0xa9))
            skip = 2;
        else {
            o[n++] = (char)ch;
            continue;
        }
        o[n++] = '\n';
        i += skip;
    }
    if (n > 0 && o[n - 1] == '\n') n--;
    o[n] = '\0';
    *out_len = n;
    return o;
}

jnode *jparse(jctx *c, const char *text, size_t len) {
    lexer lx = { 0 };
    lx.c = c;
    lx.src = normalize(c, text, len, &lx.len);
    lx.line = 1;
    lex(&lx);
    parser p = { c, lx.toks, lx.n, 0 };
    c->depth = 0;
    jnode *root = body(&p, NULL, NULL);
    c->depth = 0;
    return root;
}
