/*
 * json_doc: recursive descent over RFC 8259 with a depth limit, so a
 * schema of ten thousand '[' is an error rather than a blown native stack.
 */
#include "json_doc.h"

#include <string.h>

typedef struct jparser {
    fx_jdoc *doc;
    const char *text, *p, *end;
    fx_error *err;
    fx_status status; /* the first failure; FX_OK while parsing goes well */
} jparser;

static fx_status jfail(jparser *ps, const char *what) {
    if (ps->status != FX_OK) return ps->status;
    uint32_t line = 1, col = 1;
    for (const char *q = ps->text; q < ps->p && q < ps->end; q++) {
        if (*q == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    ps->status = fx_fail(ps->err, FX_ERR_INVALID_ARG,
                         "line %u, column %u: %s", line, col, what);
    return ps->status;
}

static fx_status nomem(jparser *ps) {
    if (ps->status == FX_OK)
        ps->status = fx_fail(ps->err, FX_ERR_NOMEM, "out of memory parsing JSON");
    return ps->status;
}

static uint32_t new_node(jparser *ps, uint32_t type) {
    fx_jdoc *d = ps->doc;
    if (d->n_nodes == d->cap_nodes) {
        uint32_t cap = d->cap_nodes ? d->cap_nodes * 2 : 64;
        fx_jnode *n = fx_realloc(&d->alloc, d->nodes, (size_t)cap * sizeof *n);
        if (!n) {
            nomem(ps);
            return FX_JSON_NONE;
        }
        d->nodes = n;
        d->cap_nodes = cap;
    }
    fx_jnode *n = &d->nodes[d->n_nodes];
    memset(n, 0, sizeof *n);
    n->type = type;
    n->first = n->next = n->value = FX_JSON_NONE;
    return d->n_nodes++;
}

static int put_bytes(jparser *ps, const char *s, size_t len) {
    fx_jdoc *d = ps->doc;
    /* Text is at most FX_JSON_MAX_TEXT, so unescaped strings fit in 32 bits. */
    if (d->n_strings + len + 1 > d->cap_strings) {
        size_t cap = d->cap_strings ? d->cap_strings : 256;
        while (cap < d->n_strings + len + 1) cap *= 2;
        char *b = fx_realloc(&d->alloc, d->strings, cap);
        if (!b) return nomem(ps), 0;
        d->strings = b;
        d->cap_strings = (uint32_t)cap;
    }
    memcpy(d->strings + d->n_strings, s, len);
    d->n_strings += (uint32_t)len;
    return 1;
}

static void skip_ws(jparser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' ||
                               *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

static int hex4(const char *p, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
        else return 0;
    }
    *out = v;
    return 1;
}

/* Checks one UTF-8 character at p (RFC 3629: no overlongs, surrogates or
 * values past U+10FFFF); returns its length or 0. */
static size_t utf8_valid(const unsigned char *p, const unsigned char *end) {
    unsigned c = p[0];
    size_t n;
    uint32_t cp, min;
    if (c < 0x80) return 1;
    if ((c & 0xE0) == 0xC0) { n = 2; cp = c & 0x1F; min = 0x80; }
    else if ((c & 0xF0) == 0xE0) { n = 3; cp = c & 0x0F; min = 0x800; }
    else if ((c & 0xF8) == 0xF0) { n = 4; cp = c & 0x07; min = 0x10000; }
    else return 0;
    if ((size_t)(end - p) < n) return 0;
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (p[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return n;
}

/* A string at ps->p (on the opening quote), unescaped into the string
 * buffer; sets the node's offset and length. */
static fx_status parse_string(jparser *ps, uint32_t *off, uint32_t *len) {
    ps->p++; /* the quote */
    *off = ps->doc->n_strings;
    for (;;) {
        if (ps->p >= ps->end) return jfail(ps, "unterminated string");
        unsigned char c = (unsigned char)*ps->p;
        if (c == '"') break;
        if (c < 0x20) return jfail(ps, "control character in a string");
        if (c != '\\') {
            size_t n = utf8_valid((const unsigned char *)ps->p,
                                  (const unsigned char *)ps->end);
            if (!n) return jfail(ps, "invalid UTF-8 in a string");
            if (!put_bytes(ps, ps->p, n)) return ps->status;
            ps->p += n;
            continue;
        }
        if (ps->end - ps->p < 2) return jfail(ps, "unterminated escape");
        char e = ps->p[1], b;
        ps->p += 2;
        switch (e) {
        case '"': b = '"'; break;
        case '\\': b = '\\'; break;
        case '/': b = '/'; break;
        case 'b': b = '\b'; break;
        case 'f': b = '\f'; break;
        case 'n': b = '\n'; break;
        case 'r': b = '\r'; break;
        case 't': b = '\t'; break;
        case 'u': {
            uint32_t cp;
            if (ps->end - ps->p < 4 || !hex4(ps->p, &cp))
                return jfail(ps, "bad \\u escape");
            ps->p += 4;
            if (cp >= 0xDC00 && cp <= 0xDFFF) return jfail(ps, "lone low surrogate");
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                uint32_t lo;
                if (ps->end - ps->p < 6 || ps->p[0] != '\\' || ps->p[1] != 'u' ||
                    !hex4(ps->p + 2, &lo) || lo < 0xDC00 || lo > 0xDFFF)
                    return jfail(ps, "high surrogate without its low half");
                ps->p += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            char u[4];
            if (!put_bytes(ps, u, fx_utf8_encode(cp, (unsigned char *)u))) return ps->status;
            continue;
        }
        default:
            ps->p--;
            return jfail(ps, "unknown escape");
        }
        if (!put_bytes(ps, &b, 1)) return ps->status;
    }
    ps->p++; /* the closing quote */
    *len = ps->doc->n_strings - *off;
    /* NUL after each string so keys compare with strcmp-like helpers. */
    if (!put_bytes(ps, "", 1)) return ps->status;
    return FX_OK;
}

static fx_status parse_number(jparser *ps, uint32_t node) {
    const char *s = ps->p;
    const char *p = s;
    if (p < ps->end && *p == '-') p++;
    if (p >= ps->end || *p < '0' || *p > '9') return jfail(ps, "bad number");
    if (*p == '0') {
        p++;
    } else {
        while (p < ps->end && *p >= '0' && *p <= '9') p++;
    }
    if (p < ps->end && *p == '.') {
        p++;
        if (p >= ps->end || *p < '0' || *p > '9') { ps->p = p; return jfail(ps, "bad fraction"); }
        while (p < ps->end && *p >= '0' && *p <= '9') p++;
    }
    if (p < ps->end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < ps->end && (*p == '+' || *p == '-')) p++;
        if (p >= ps->end || *p < '0' || *p > '9') { ps->p = p; return jfail(ps, "bad exponent"); }
        while (p < ps->end && *p >= '0' && *p <= '9') p++;
    }
    uint32_t off = ps->doc->n_strings;
    if (!put_bytes(ps, s, (size_t)(p - s)) || !put_bytes(ps, "", 1)) return ps->status;
    ps->doc->nodes[node].str_off = off;
    ps->doc->nodes[node].str_len = (uint32_t)(p - s);
    ps->p = p;
    return FX_OK;
}

static int literal(jparser *ps, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0) return 0;
    ps->p += n;
    return 1;
}

static uint32_t parse_value(jparser *ps, uint32_t depth);

/* Appends child to the parent's chain; tail tracks the last one. */
static void link_child(fx_jdoc *d, uint32_t parent, uint32_t *tail, uint32_t child) {
    if (*tail == FX_JSON_NONE) d->nodes[parent].first = child;
    else d->nodes[*tail].next = child;
    *tail = child;
    d->nodes[parent].count++;
}

static uint32_t parse_array(jparser *ps, uint32_t depth) {
    uint32_t node = new_node(ps, FX_J_ARRAY), tail = FX_JSON_NONE;
    if (node == FX_JSON_NONE) return node;
    ps->p++;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == ']') {
        ps->p++;
        return node;
    }
    for (;;) {
        uint32_t v = parse_value(ps, depth + 1);
        if (v == FX_JSON_NONE) return v;
        link_child(ps->doc, node, &tail, v);
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') { ps->p++; continue; }
        if (ps->p < ps->end && *ps->p == ']') { ps->p++; return node; }
        jfail(ps, "expected ',' or ']'");
        return FX_JSON_NONE;
    }
}

static uint32_t parse_object(jparser *ps, uint32_t depth) {
    uint32_t node = new_node(ps, FX_J_OBJECT), tail = FX_JSON_NONE;
    if (node == FX_JSON_NONE) return node;
    ps->p++;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == '}') {
        ps->p++;
        return node;
    }
    for (;;) {
        skip_ws(ps);
        if (ps->p >= ps->end || *ps->p != '"') {
            jfail(ps, "expected a member name");
            return FX_JSON_NONE;
        }
        uint32_t m = new_node(ps, FX_J_MEMBER), off, len;
        if (m == FX_JSON_NONE || parse_string(ps, &off, &len) != FX_OK)
            return FX_JSON_NONE;
        ps->doc->nodes[m].str_off = off;
        ps->doc->nodes[m].str_len = len;
        skip_ws(ps);
        if (ps->p >= ps->end || *ps->p != ':') {
            jfail(ps, "expected ':'");
            return FX_JSON_NONE;
        }
        ps->p++;
        uint32_t v = parse_value(ps, depth + 1);
        if (v == FX_JSON_NONE) return v;
        ps->doc->nodes[m].value = v;
        link_child(ps->doc, node, &tail, m);
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') { ps->p++; continue; }
        if (ps->p < ps->end && *ps->p == '}') { ps->p++; return node; }
        jfail(ps, "expected ',' or '}'");
        return FX_JSON_NONE;
    }
}

static uint32_t parse_value(jparser *ps, uint32_t depth) {
    if (depth > FX_JSON_MAX_DEPTH) {
        jfail(ps, "nested deeper than 64 levels");
        return FX_JSON_NONE;
    }
    skip_ws(ps);
    if (ps->p >= ps->end) {
        jfail(ps, "expected a value");
        return FX_JSON_NONE;
    }
    char c = *ps->p;
    if (c == '{') return parse_object(ps, depth);
    if (c == '[') return parse_array(ps, depth);
    if (c == '"') {
        uint32_t node = new_node(ps, FX_J_STRING), off, len;
        if (node == FX_JSON_NONE || parse_string(ps, &off, &len) != FX_OK)
            return FX_JSON_NONE;
        ps->doc->nodes[node].str_off = off;
        ps->doc->nodes[node].str_len = len;
        return node;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        uint32_t node = new_node(ps, FX_J_NUMBER);
        if (node == FX_JSON_NONE || parse_number(ps, node) != FX_OK) return FX_JSON_NONE;
        return node;
    }
    uint32_t type;
    if (literal(ps, "true")) type = FX_J_TRUE;
    else if (literal(ps, "false")) type = FX_J_FALSE;
    else if (literal(ps, "null")) type = FX_J_NULL;
    else {
        jfail(ps, "expected a value");
        return FX_JSON_NONE;
    }
    return new_node(ps, type);
}

fx_status fx_jdoc_parse(fx_jdoc *doc, const fx_alloc *alloc, const char *text,
                        size_t len, fx_error *err) {
    memset(doc, 0, sizeof *doc);
    doc->alloc = *alloc;
    doc->root = FX_JSON_NONE;
    if (!text && len) return fx_fail(err, FX_ERR_INVALID_ARG, "NULL text");
    if (len > FX_JSON_MAX_TEXT)
        return fx_fail(err, FX_ERR_INVALID_ARG, "JSON text over %u bytes",
                       FX_JSON_MAX_TEXT);
    jparser ps = {doc, text, text, text + len, err, FX_OK};
    uint32_t root = parse_value(&ps, 0);
    if (root == FX_JSON_NONE) return ps.status;
    skip_ws(&ps);
    if (ps.p != ps.end) return jfail(&ps, "text after the value");
    doc->root = root;
    return FX_OK;
}

void fx_jdoc_free(fx_jdoc *doc) {
    fx_free(&doc->alloc, doc->nodes);
    fx_free(&doc->alloc, doc->strings);
    doc->nodes = NULL;
    doc->strings = NULL;
}

uint32_t fx_jdoc_get(const fx_jdoc *d, uint32_t obj, const char *key) {
    if (obj == FX_JSON_NONE || d->nodes[obj].type != FX_J_OBJECT) return FX_JSON_NONE;
    size_t klen = strlen(key);
    for (uint32_t m = d->nodes[obj].first; m != FX_JSON_NONE; m = d->nodes[m].next) {
        const fx_jnode *n = &d->nodes[m];
        if (n->str_len == klen && memcmp(d->strings + n->str_off, key, klen) == 0)
            return n->value;
    }
    return FX_JSON_NONE;
}

int fx_jdoc_uint(const fx_jdoc *d, uint32_t node, uint32_t *out) {
    if (node == FX_JSON_NONE || d->nodes[node].type != FX_J_NUMBER) return 0;
    const char *s = d->strings + d->nodes[node].str_off;
    uint32_t n = d->nodes[node].str_len;
    uint64_t v = 0;
    uint32_t i = 0;
    for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
        v = v * 10 + (uint64_t)(s[i] - '0');
        if (v > 0xFFFFFFFFu) return 0;
    }
    /* "3.0" is an integer in JSON Schema; "3.5", "-1" and "1e3" are not
     * accepted here (the last would be, but no schema writes sizes so). */
    if (i < n && s[i] == '.') {
        for (uint32_t k = i + 1; k < n; k++)
            if (s[k] != '0') return 0;
        i = n;
    }
    if (i == 0 || i != n) return 0;
    *out = (uint32_t)v;
    return 1;
}
