/*
 * jinja lexer: template text to jtokens, with jinja2's whitespace rules as
 * transformers configures them (trim_blocks, lstrip_blocks,
 * keep_trailing_newline off): `-` strips blanks at a tag's side, a block
 * or comment tag eats the newline after it, and a block tag's indentation
 * goes when only blanks stand before it on its line.
 */
#include "jinja_int.h"

#include <stdlib.h>
#include <string.h>

typedef struct lexer {
    jctx *c;
    const char *src;
    size_t len, pos;
    uint32_t line;
    size_t line_start;
    jtoken *toks;
    size_t n, cap;
} lexer;

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

static jtoken *lx_push(lexer *lx, jttype type, size_t at) {
    if (lx->n == lx->cap) {
        size_t cap = lx->cap ? lx->cap * 2 : 256;
        jtoken *t = fx_jalloc(lx->c, cap * sizeof *t);
        if (lx->n) memcpy(t, lx->toks, lx->n * sizeof *t);
        lx->toks = t;
        lx->cap = cap;
    }
    fx_jstep(lx->c, 1);
    jtoken *t = &lx->toks[lx->n++];
    memset(t, 0, sizeof *t);
    t->type = (uint8_t)type;
    t->line = lx->line;
    t->col = (uint32_t)(at - lx->line_start + 1);
    return t;
}

_Noreturn static void lx_fail(lexer *lx, const char *why) {
    fx_jfail_at(lx->c, lx->line, (uint32_t)(lx->pos - lx->line_start + 1),
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
    unsigned char b[4];
    fx_jout_put(c, o, (const char *)b, fx_utf8_encode(cp, b));
}

/* A quoted literal, decoded as jinja2 does it: Python's unicode-escape
 * (\n, \t, \\, \', \xhh, \uhhhh, \Uhhhhhhhh, octal ...), with an unknown
 * escape kept as written. */
static void lx_string(lexer *lx, jtoken *t) {
    char q = lx->src[lx->pos];
    size_t i = lx->pos + 1;
    jout o = { 0 };
    size_t from = i;
    for (;;) {
        if (i >= lx->len) lx_fail(lx, "unterminated string literal");
        char ch = lx->src[i];
        if (ch == q) break;
        if (ch != '\\') { i++; continue; }
        fx_jout_put(lx->c, &o, lx->src + from, i - from);
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
            fx_jout_put(lx->c, &o, simple, strlen(simple));
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
            fx_jout_put(lx->c, &o, lx->src + i - 2, 2);
        }
        from = i;
    }
    fx_jout_put(lx->c, &o, lx->src + from, i - from);
    t->s = fx_jout_str(&o);
    lx_pos(lx, i + 1);
}

static void lx_number(lexer *lx, jtoken *t) {
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

/* The expression jtokens of one tag, up to its end marker. */
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
            jtoken *t = lx_push(lx, T_NAME, lx->pos);
            t->s.p = p;
            t->s.n = i - lx->pos;
            lx_pos(lx, i);
        } else {
            size_t n = 0;
            for (size_t k = 0; k < sizeof ops2 / sizeof ops2[0]; k++)
                if (rest >= 2 && memcmp(p, ops2[k], 2) == 0) n = 2;
            if (!n && ch && strchr(ops1, ch)) n = 1;
            if (!n) lx_fail(lx, "unexpected character in a tag");
            jtoken *t = lx_push(lx, T_OP, lx->pos);
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

/* Whether src[at..] is `word` (blanks around it) and a block end:
 * [-+]?%}. Returns the offset just past the %} in *end, and the sign
 * before it. */
static bool raw_tag(const lexer *lx, size_t at, const char *word,
                    size_t *end) {
    size_t i = at, n = strlen(word);
    while (i < lx->len && is_space(lx->src[i])) i++;
    if (lx->len - i < n || memcmp(lx->src + i, word, n) != 0) return false;
    i += n;
    while (i < lx->len && is_space(lx->src[i])) i++;
    if (i < lx->len && (lx->src[i] == '-' || lx->src[i] == '+')) i++;
    if (lx->len - i < 2 || lx->src[i] != '%' || lx->src[i + 1] != '}')
        return false;
    if (end) *end = i + 2;
    return true;
}

/* {% raw %}...{% endraw %}: the text between, untouched, with the
 * whitespace rules of the two tags applied to its ends. */
static void lex_raw(lexer *lx, size_t skip, bool *strip_after, bool *keep) {
    size_t begin_end = 0;
    raw_tag(lx, lx->pos + skip, "raw", &begin_end);
    char sign = lx->src[begin_end - 3];
    size_t from = begin_end;
    if (sign == '-') {
        const char *s = lx->src + from;
        size_t k = lx->len - from;
        fx_chat_strip(&s, &k, true, false);
        from = (size_t)(s - lx->src);
    }
    /* (jinja2 applies no trim_blocks after {% raw %}: its newline stays.) */
    for (size_t i = from; i + 1 < lx->len; i++) {
        if (lx->src[i] != '{' || lx->src[i + 1] != '%') continue;
        size_t j = i + 2;
        char open_sign = (j < lx->len && (lx->src[j] == '-' || lx->src[j] == '+'))
                             ? lx->src[j] : 0;
        if (open_sign) j++;
        size_t end = 0;
        if (!raw_tag(lx, j, "endraw", &end)) continue;
        const char *text = lx->src + from;
        size_t tlen = i - from;
        if (open_sign == '-') {
            fx_chat_strip(&text, &tlen, false, true);
        } else if (open_sign != '+') {
            size_t l_pos = tlen;
            while (l_pos > 0 && text[l_pos - 1] != '\n') l_pos--;
            if (l_pos > 0 && only_blanks(text + l_pos, tlen - l_pos)) tlen = l_pos;
        }
        if (tlen) {
            jtoken *t = lx_push(lx, T_TEXT, from);
            t->s.p = text;
            t->s.n = tlen;
        }
        *strip_after = lx->src[end - 3] == '-';
        *keep = lx->src[end - 3] == '+';
        lx_pos(lx, end);
        return;
    }
    lx_fail(lx, "{% raw %} without {% endraw %}");
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
            jtoken *t = lx_push(lx, T_TEXT, lx->pos);
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
        } else if (kind == '%' && raw_tag(lx, lx->pos + skip, "raw", NULL)) {
            lex_raw(lx, skip, &strip_after, &keep);
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

/* jinja2 reads the source with str.splitlines() and joins the lines with
 * "\n": \r\n, \r and the other line breaks Python knows become \n, and
 * one trailing newline goes away. */
static const char *normalize(jctx *c, const char *src, size_t len,
                             size_t *out_len) {
    char *o = fx_jalloc(c, len + 1);
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

jtoken *fx_jlex(jctx *c, const char *text, size_t len, size_t *n) {
    lexer lx = { 0 };
    lx.c = c;
    lx.src = normalize(c, text, len, &lx.len);
    lx.line = 1;
    lex(&lx);
    *n = lx.n;
    return lx.toks;
}
