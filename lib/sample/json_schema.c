/*
 * json_schema: walks a schema document and writes one GBNF rule per
 * composite subschema ("r<N>"), sharing fixed rules for the JSON
 * primitives ("json-*"), emitted at the end only when used.
 *
 * Whitespace is allowed after '{', '[', ',' and ':' and after every value
 * inside a container, never after the top-level value: the root is then
 * complete exactly at its closing character, so the batcher forces EOS
 * there instead of letting a model pad with blanks.
 */
#include "json_schema.h"
#include "json_doc.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define MAX_SCHEMA_DEPTH 256u   /* nested subschemas, $ref chains included */
#define MAX_REPEAT 1000u        /* FX_GRAMMAR_MAX_REPEAT: minItems & co. */

typedef struct sbuf {
    const fx_alloc *alloc;
    char *p;
    size_t len, cap;
    int failed;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->failed) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = fx_realloc(b->alloc, b->p, cap);
        if (!p) {
            b->failed = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    /* n == 0 with s NULL happens (an empty buffer appended): memcpy must
     * not see the NULL even for zero bytes (UBSan: nonnull argument). */
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_fmt(sbuf *b, const char *fmt, ...) FX_PRINTF(2, 3);
static void sb_fmt(sbuf *b, const char *fmt, ...) {
    char tmp[64]; /* rule names and counts only */
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0) sb_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

static void sb_free(sbuf *b) {
    fx_free(b->alloc, b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

enum {
    USE_WS = 1u << 0, USE_CHAR = 1u << 1, USE_STRING = 1u << 2,
    USE_NUMBER = 1u << 3, USE_INTEGER = 1u << 4, USE_BOOLEAN = 1u << 5,
    USE_NULL = 1u << 6, USE_VALUE = 1u << 7
};

typedef struct ref_entry {
    uint32_t target; /* schema node */
    uint32_t rule;   /* its rule number */
} ref_entry;

typedef struct conv {
    const fx_jdoc *d;
    const fx_alloc *alloc;
    fx_error *err;
    fx_status status;
    sbuf rules;
    uint32_t n_rules;
    unsigned used;
    ref_entry *refs;
    uint32_t n_refs, cap_refs;
    char path[256];
    size_t path_len;
    uint32_t depth;
} conv;

static fx_status cfail(conv *c, fx_status st, const char *what, const char *detail) {
    if (c->status != FX_OK) return c->status;
    c->status = fx_fail(c->err, st, "json schema at %s: %s%s",
                        c->path_len ? c->path : "/", what, detail ? detail : "");
    return c->status;
}

static fx_status oom(conv *c) {
    if (c->status == FX_OK)
        c->status = fx_fail(c->err, FX_ERR_NOMEM, "out of memory converting a JSON schema");
    return c->status;
}

/* JSON pointer-style location for messages; long paths are cut, which is
 * fine for a message. Returns the length to restore. */
static size_t path_push(conv *c, const char *seg, const char *seg2, size_t seg2_len) {
    size_t old = c->path_len;
    int n = snprintf(c->path + c->path_len, sizeof c->path - c->path_len, "/%s%.*s",
                     seg, (int)(seg2_len > 64 ? 64 : seg2_len), seg2 ? seg2 : "");
    if (n > 0) {
        c->path_len += (size_t)n;
        if (c->path_len >= sizeof c->path) c->path_len = sizeof c->path - 1;
    }
    return old;
}

static void path_pop(conv *c, size_t old) {
    c->path_len = old;
    c->path[old] = '\0';
}

static const fx_jnode *N(const conv *c, uint32_t i) { return fx_jdoc_node(c->d, i); }

static int str_is(const conv *c, uint32_t node, const char *s) {
    const fx_jnode *n = N(c, node);
    return n->type == FX_J_STRING && n->str_len == strlen(s) &&
           memcmp(fx_jdoc_str(c->d, n), s, n->str_len) == 0;
}

/* ---- literals: a JSON value, compact, as a GBNF string literal ---- */

static void json_string(sbuf *b, const char *s, size_t n) {
    sb_put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        char esc[8];
        switch (ch) {
        case '"': sb_put(b, "\\\"", 2); break;
        case '\\': sb_put(b, "\\\\", 2); break;
        case '\n': sb_put(b, "\\n", 2); break;
        case '\r': sb_put(b, "\\r", 2); break;
        case '\t': sb_put(b, "\\t", 2); break;
        case '\b': sb_put(b, "\\b", 2); break;
        case '\f': sb_put(b, "\\f", 2); break;
        default:
            if (ch < 0x20) {
                snprintf(esc, sizeof esc, "\\u%04x", ch);
                sb_put(b, esc, 6);
            } else {
                sb_put(b, s + i, 1);
            }
        }
    }
    sb_put(b, "\"", 1);
}

static void json_compact(const conv *c, sbuf *b, uint32_t node) {
    const fx_jnode *n = N(c, node);
    switch (n->type) {
    case FX_J_NULL: sb_str(b, "null"); break;
    case FX_J_TRUE: sb_str(b, "true"); break;
    case FX_J_FALSE: sb_str(b, "false"); break;
    case FX_J_NUMBER: sb_put(b, fx_jdoc_str(c->d, n), n->str_len); break;
    case FX_J_STRING: json_string(b, fx_jdoc_str(c->d, n), n->str_len); break;
    case FX_J_ARRAY:
        sb_put(b, "[", 1);
        for (uint32_t e = n->first; e != FX_JSON_NONE; e = N(c, e)->next) {
            if (e != n->first) sb_put(b, ",", 1);
            json_compact(c, b, e);
        }
        sb_put(b, "]", 1);
        break;
    default: /* object */
        sb_put(b, "{", 1);
        for (uint32_t m = n->first; m != FX_JSON_NONE; m = N(c, m)->next) {
            if (m != n->first) sb_put(b, ",", 1);
            json_string(b, fx_jdoc_str(c->d, N(c, m)), N(c, m)->str_len);
            sb_put(b, ":", 1);
            json_compact(c, b, N(c, m)->value);
        }
        sb_put(b, "}", 1);
    }
}

/* Bytes as a GBNF literal: quotes, backslashes and control bytes escaped;
 * UTF-8 passes through (the grammar reads literals as UTF-8). */
static void gbnf_literal(sbuf *out, const char *s, size_t n) {
    sb_put(out, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') {
            char e[2] = {'\\', (char)ch};
            sb_put(out, e, 2);
        } else if (ch < 0x20 || ch == 0x7F) {
            char e[8];
            snprintf(e, sizeof e, "\\x%02X", ch);
            sb_put(out, e, 4);
        } else {
            sb_put(out, s + i, 1);
        }
    }
    sb_put(out, "\"", 1);
}

static fx_status value_literal(conv *c, uint32_t node, sbuf *out) {
    sbuf tmp = {c->alloc, NULL, 0, 0, 0};
    json_compact(c, &tmp, node);
    if (!tmp.failed) gbnf_literal(out, tmp.p, tmp.len);
    int failed = tmp.failed;
    sb_free(&tmp);
    return failed ? oom(c) : FX_OK;
}

/* ---- subschemas ---- */

static fx_status gen_body(conv *c, uint32_t node, sbuf *body);

/* Writes "r<no> ::= body" for node. */
static fx_status gen_rule(conv *c, uint32_t node, uint32_t no) {
    sbuf body = {c->alloc, NULL, 0, 0, 0};
    fx_status st = gen_body(c, node, &body);
    if (st == FX_OK && !body.failed) {
        sb_fmt(&c->rules, "r%u ::= ", no);
        sb_put(&c->rules, body.p, body.len);
        sb_put(&c->rules, "\n", 1);
    }
    if (st == FX_OK && (body.failed || c->rules.failed)) st = oom(c);
    sb_free(&body);
    return st;
}

/* An expression standing for node: a primitive's name when that is all it
 * is, else a new rule's name. */
static fx_status gen_expr(conv *c, uint32_t node, sbuf *out) {
    const fx_jnode *n = N(c, node);
    if (n->type == FX_J_TRUE || (n->type == FX_J_OBJECT && n->count == 0)) {
        c->used |= USE_VALUE;
        sb_str(out, "json-value");
        return FX_OK;
    }
    uint32_t no = c->n_rules++;
    sb_fmt(out, "r%u", no);
    return gen_rule(c, node, no);
}

static fx_status gen_ref(conv *c, uint32_t node, sbuf *out) {
    const fx_jnode *n = N(c, node);
    const char *s = fx_jdoc_str(c->d, n);
    if (n->type != FX_J_STRING || n->str_len == 0 || s[0] != '#')
        return cfail(c, FX_ERR_INVALID_ARG, "$ref must be a \"#...\" pointer into this "
                     "document", NULL);
    /* Walk the JSON pointer (RFC 6901) from the document's root. */
    uint32_t at = c->d->root;
    size_t i = 1;
    while (i < n->str_len) {
        if (s[i] != '/') return cfail(c, FX_ERR_INVALID_ARG, "bad $ref ", s);
        i++;
        char seg[128];
        size_t k = 0;
        for (; i < n->str_len && s[i] != '/'; i++) {
            char ch = s[i];
            if (ch == '~' && i + 1 < n->str_len && (s[i + 1] == '0' || s[i + 1] == '1')) {
                ch = s[i + 1] == '0' ? '~' : '/';
                i++;
            }
            if (k + 1 >= sizeof seg) return cfail(c, FX_ERR_INVALID_ARG, "$ref segment too long: ", s);
            seg[k++] = ch;
        }
        seg[k] = '\0';
        const fx_jnode *an = N(c, at);
        if (an->type == FX_J_OBJECT) {
            at = fx_jdoc_get(c->d, at, seg);
        } else if (an->type == FX_J_ARRAY) {
            uint32_t idx = 0, e = an->first;
            int digits = k > 0;
            for (size_t q = 0; q < k; q++) digits &= seg[q] >= '0' && seg[q] <= '9';
            if (!digits) return cfail(c, FX_ERR_INVALID_ARG, "$ref does not resolve: ", s);
            for (size_t q = 0; q < k && idx < 0x10000000u; q++) idx = idx * 10 + (uint32_t)(seg[q] - '0');
            while (e != FX_JSON_NONE && idx--) e = N(c, e)->next;
            at = e;
        } else {
            at = FX_JSON_NONE;
        }
        if (at == FX_JSON_NONE) return cfail(c, FX_ERR_INVALID_ARG, "$ref does not resolve: ", s);
    }
    for (uint32_t r = 0; r < c->n_refs; r++)
        if (c->refs[r].target == at) {
            sb_fmt(out, "r%u", c->refs[r].rule);
            return FX_OK;
        }
    /* Reserved before the body is made, so a recursive reference to it
     * (a tree's children, say) finds the name. */
    if (c->n_refs == c->cap_refs) {
        uint32_t cap = c->cap_refs ? c->cap_refs * 2 : 8;
        ref_entry *r = fx_realloc(c->alloc, c->refs, cap * sizeof *r);
        if (!r) return oom(c);
        c->refs = r;
        c->cap_refs = cap;
    }
    uint32_t no = c->n_rules++;
    c->refs[c->n_refs++] = (ref_entry){at, no};
    sb_fmt(out, "r%u", no);
    /* Messages inside the referenced schema name it by the pointer. */
    char saved[sizeof c->path];
    size_t saved_len = c->path_len;
    memcpy(saved, c->path, sizeof saved);
    int pn = snprintf(c->path, sizeof c->path, "%.*s",
                      (int)(n->str_len > 200 ? 200 : n->str_len), s);
    c->path_len = pn > 0 ? (size_t)pn : 0;
    fx_status st = gen_rule(c, at, no);
    if (st == FX_OK) {
        memcpy(c->path, saved, sizeof saved);
        c->path_len = saved_len;
    }
    return st;
}

static const char *const unsupported_keywords[] = {
    "pattern", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "multipleOf", "not", "if", "then", "else", "patternProperties",
    "propertyNames", "dependentRequired", "dependentSchemas", "dependencies",
    "minProperties", "maxProperties", "contains", "minContains",
    "maxContains", "unevaluatedProperties", "unevaluatedItems",
    "$dynamicRef", "$recursiveRef"};

static int get_uint(conv *c, uint32_t node, const char *key, uint32_t dflt, uint32_t *out) {
    uint32_t v = fx_jdoc_get(c->d, node, key);
    if (v == FX_JSON_NONE) {
        *out = dflt;
        return 1;
    }
    if (!fx_jdoc_uint(c->d, v, out)) {
        cfail(c, FX_ERR_INVALID_ARG, key, " must be a non-negative integer");
        return 0;
    }
    return 1;
}

/* ( "," ws X ws ){lo,hi} with hi UINT32_MAX for no bound. */
static void repeat_suffix(sbuf *b, uint32_t lo, uint32_t hi) {
    if (lo == 0 && hi == UINT32_MAX) sb_str(b, "*");
    else if (lo == 1 && hi == UINT32_MAX) sb_str(b, "+");
    else if (lo == 0 && hi == 1) sb_str(b, "?");
    else if (hi == UINT32_MAX) sb_fmt(b, "{%u,}", lo);
    else if (lo == hi) sb_fmt(b, "{%u}", lo);
    else sb_fmt(b, "{%u,%u}", lo, hi);
}

static fx_status check_bounds(conv *c, uint32_t lo, uint32_t hi, const char *what) {
    if (hi != UINT32_MAX && lo > hi)
        return cfail(c, FX_ERR_INVALID_ARG, what, ": the minimum is above the maximum");
    if (lo > MAX_REPEAT || (hi != UINT32_MAX && hi > MAX_REPEAT))
        return cfail(c, FX_ERR_INVALID_ARG, what, ": bounds above 1000 are not supported");
    return FX_OK;
}

static fx_status gen_string(conv *c, uint32_t node, sbuf *body) {
    uint32_t lo, hi;
    if (!get_uint(c, node, "minLength", 0, &lo) ||
        !get_uint(c, node, "maxLength", UINT32_MAX, &hi))
        return c->status;
    if (lo == 0 && hi == UINT32_MAX) {
        c->used |= USE_STRING;
        sb_str(body, "json-string");
        return FX_OK;
    }
    if (check_bounds(c, lo, hi, "minLength/maxLength") != FX_OK) return c->status;
    c->used |= USE_CHAR;
    sb_str(body, "\"\\\"\" json-char");
    repeat_suffix(body, lo, hi);
    sb_str(body, " \"\\\"\"");
    return FX_OK;
}

static fx_status gen_array(conv *c, uint32_t node, sbuf *body) {
    uint32_t lo, hi;
    if (!get_uint(c, node, "minItems", 0, &lo) ||
        !get_uint(c, node, "maxItems", UINT32_MAX, &hi))
        return c->status;
    if (check_bounds(c, lo, hi, "minItems/maxItems") != FX_OK) return c->status;
    uint32_t items = fx_jdoc_get(c->d, node, "items");
    uint32_t prefix = fx_jdoc_get(c->d, node, "prefixItems");
    uint32_t unique = fx_jdoc_get(c->d, node, "uniqueItems");
    if (unique != FX_JSON_NONE && N(c, unique)->type == FX_J_TRUE)
        return cfail(c, FX_ERR_INVALID_ARG, "unsupported keyword 'uniqueItems'", NULL);
    if (prefix != FX_JSON_NONE && N(c, prefix)->type != FX_J_ARRAY)
        return cfail(c, FX_ERR_INVALID_ARG, "prefixItems must be an array", NULL);
    /* Tuples are all-or-nothing here: each prefix item is required. */
    uint32_t n_prefix = prefix == FX_JSON_NONE ? 0 : N(c, prefix)->count;
    if (hi != UINT32_MAX && hi < n_prefix)
        return cfail(c, FX_ERR_INVALID_ARG, "maxItems is below the prefixItems count", NULL);
    sbuf item = {c->alloc, NULL, 0, 0, 0};
    int has_item = 1;
    if (items == FX_JSON_NONE) {
        c->used |= USE_VALUE;
        sb_str(&item, "json-value");
    } else if (N(c, items)->type == FX_J_FALSE) {
        has_item = 0;
    } else {
        size_t old = path_push(c, "items", NULL, 0);
        if (gen_expr(c, items, &item) != FX_OK) {
            sb_free(&item);
            return c->status;
        }
        path_pop(c, old);
    }
    c->used |= USE_WS;
    sb_str(body, "\"[\" json-ws ");
    uint32_t e = n_prefix ? N(c, prefix)->first : FX_JSON_NONE;
    for (uint32_t i = 0; i < n_prefix; i++, e = N(c, e)->next) {
        char idx[16];
        snprintf(idx, sizeof idx, "%u", i);
        size_t old = path_push(c, "prefixItems/", idx, strlen(idx));
        if (i) sb_str(body, "\",\" json-ws ");
        if (gen_expr(c, e, body) != FX_OK) {
            sb_free(&item);
            return c->status;
        }
        sb_str(body, " json-ws ");
        path_pop(c, old);
    }
    /* Items after the tuple, between max(lo - prefix, 0) and hi - prefix. */
    uint32_t more_lo = lo > n_prefix ? lo - n_prefix : 0;
    uint32_t more_hi = hi == UINT32_MAX ? UINT32_MAX : hi - n_prefix;
    if (!has_item && more_lo > 0) {
        sb_free(&item);
        return cfail(c, FX_ERR_INVALID_ARG, "minItems needs more items than the schema allows", NULL);
    }
    if (has_item && more_hi > 0) {
        if (n_prefix) {
            sb_str(body, "( \",\" json-ws ");
            sb_put(body, item.p, item.len);
            sb_str(body, " json-ws )");
            repeat_suffix(body, more_lo, more_hi);
        } else {
            /* The first item has no comma before it. */
            uint32_t rest_lo = more_lo ? more_lo - 1 : 0;
            uint32_t rest_hi = more_hi == UINT32_MAX ? UINT32_MAX : more_hi - 1;
            sb_str(body, "( ");
            sb_put(body, item.p, item.len);
            sb_str(body, " json-ws");
            if (rest_hi > 0) {
                sb_str(body, " ( \",\" json-ws ");
                sb_put(body, item.p, item.len);
                sb_str(body, " json-ws )");
                repeat_suffix(body, rest_lo, rest_hi);
            }
            sb_str(body, more_lo ? " )" : " )?");
        }
    }
    sb_str(body, " \"]\"");
    int failed = item.failed;
    sb_free(&item);
    return failed ? oom(c) : FX_OK;
}

typedef struct prop {
    uint32_t key;       /* member node (its key) or a "required" string node */
    uint32_t schema;    /* FX_JSON_NONE: any value */
    int required;
    uint32_t rule;      /* the "key": value rule */
} prop;

static fx_status kv_rule(conv *c, prop *p) {
    const fx_jnode *k = N(c, p->key);
    sbuf body = {c->alloc, NULL, 0, 0, 0};
    sbuf key = {c->alloc, NULL, 0, 0, 0};
    json_string(&key, fx_jdoc_str(c->d, k), k->str_len);
    if (!key.failed) gbnf_literal(&body, key.p, key.len);
    sb_free(&key);
    c->used |= USE_WS;
    sb_str(&body, " json-ws \":\" json-ws ");
    size_t old = path_push(c, "properties/", fx_jdoc_str(c->d, k), k->str_len);
    fx_status st = FX_OK;
    if (p->schema == FX_JSON_NONE) {
        c->used |= USE_VALUE;
        sb_str(&body, "json-value");
    } else {
        st = gen_expr(c, p->schema, &body);
    }
    if (st == FX_OK) path_pop(c, old);
    p->rule = c->n_rules++;
    if (st == FX_OK && !body.failed) {
        sb_fmt(&c->rules, "r%u ::= ", p->rule);
        sb_put(&c->rules, body.p, body.len);
        sb_put(&c->rules, "\n", 1);
    }
    if (st == FX_OK && body.failed) st = oom(c);
    sb_free(&body);
    return st;
}

static int in_required(conv *c, uint32_t req, const fx_jnode *key) {
    if (req == FX_JSON_NONE) return 0;
    for (uint32_t e = N(c, req)->first; e != FX_JSON_NONE; e = N(c, e)->next) {
        const fx_jnode *r = N(c, e);
        if (r->str_len == key->str_len &&
            memcmp(fx_jdoc_str(c->d, r), fx_jdoc_str(c->d, key), r->str_len) == 0)
            return 1;
    }
    return 0;
}

static fx_status gen_object(conv *c, uint32_t node, sbuf *body) {
    uint32_t props = fx_jdoc_get(c->d, node, "properties");
    uint32_t req = fx_jdoc_get(c->d, node, "required");
    uint32_t addl = fx_jdoc_get(c->d, node, "additionalProperties");
    if (props != FX_JSON_NONE && N(c, props)->type != FX_J_OBJECT)
        return cfail(c, FX_ERR_INVALID_ARG, "properties must be an object", NULL);
    if (req != FX_JSON_NONE) {
        if (N(c, req)->type != FX_J_ARRAY)
            return cfail(c, FX_ERR_INVALID_ARG, "required must be an array of strings", NULL);
        for (uint32_t e = N(c, req)->first; e != FX_JSON_NONE; e = N(c, e)->next)
            if (N(c, e)->type != FX_J_STRING)
                return cfail(c, FX_ERR_INVALID_ARG, "required must be an array of strings", NULL);
    }
    /* As in llama.cpp's converter and strict structured outputs: without
     * "additionalProperties", an object that lists properties allows no
     * others; one that lists none allows any. */
    int any_object = props == FX_JSON_NONE && req == FX_JSON_NONE &&
                     (addl == FX_JSON_NONE || N(c, addl)->type == FX_J_TRUE);
    if (any_object) {
        c->used |= USE_VALUE;
        sb_str(body, "json-object");
        return FX_OK;
    }
    uint32_t n_props = props == FX_JSON_NONE ? 0 : N(c, props)->count;
    uint32_t n_req = req == FX_JSON_NONE ? 0 : N(c, req)->count;
    prop *p = fx_calloc(c->alloc, (size_t)n_props + n_req + 1, sizeof *p);
    if (!p) return oom(c);
    uint32_t n = 0;
    for (uint32_t m = props == FX_JSON_NONE ? FX_JSON_NONE : N(c, props)->first;
         m != FX_JSON_NONE; m = N(c, m)->next)
        p[n++] = (prop){m, N(c, m)->value, in_required(c, req, N(c, m)), 0};
    /* Required names the properties do not describe: present, any value. */
    for (uint32_t e = n_req ? N(c, req)->first : FX_JSON_NONE; e != FX_JSON_NONE;
         e = N(c, e)->next) {
        int known = 0;
        for (uint32_t i = 0; i < n && !known; i++)
            known = N(c, p[i].key)->str_len == N(c, e)->str_len &&
                    memcmp(fx_jdoc_str(c->d, N(c, p[i].key)), fx_jdoc_str(c->d, N(c, e)),
                           N(c, e)->str_len) == 0;
        if (!known) p[n++] = (prop){e, FX_JSON_NONE, 1, 0};
    }
    fx_status st = FX_OK;
    for (uint32_t i = 0; i < n && st == FX_OK; i++) st = kv_rule(c, &p[i]);
    /* The rule for one more member under additionalProperties. */
    sbuf extra = {c->alloc, NULL, 0, 0, 0};
    int has_extra = 0;
    if (st == FX_OK && addl != FX_JSON_NONE && N(c, addl)->type != FX_J_FALSE) {
        has_extra = 1;
        c->used |= USE_STRING | USE_WS;
        uint32_t no = c->n_rules++;
        sbuf kv = {c->alloc, NULL, 0, 0, 0};
        sb_str(&kv, "json-string json-ws \":\" json-ws ");
        size_t old = path_push(c, "additionalProperties", NULL, 0);
        st = gen_expr(c, addl, &kv);
        if (st == FX_OK) path_pop(c, old);
        if (st == FX_OK) {
            sb_fmt(&c->rules, "r%u ::= ", no);
            sb_put(&c->rules, kv.p, kv.len);
            sb_put(&c->rules, "\n", 1);
            sb_fmt(&extra, "r%u", no);
        }
        if (st == FX_OK && kv.failed) st = oom(c);
        sb_free(&kv);
    }
    if (st == FX_OK) {
        c->used |= USE_WS;
        sb_str(body, "\"{\" json-ws ");
        uint32_t n_required = 0;
        for (uint32_t i = 0; i < n; i++) n_required += (uint32_t)p[i].required;
        if (n_required) {
            /* Required members first (in their listed order), then each
             * optional one may follow, then any extra members. */
            uint32_t k = 0;
            for (uint32_t i = 0; i < n; i++) {
                if (!p[i].required) continue;
                if (k++) sb_str(body, "\",\" json-ws ");
                sb_fmt(body, "r%u json-ws ", p[i].rule);
            }
            for (uint32_t i = 0; i < n; i++)
                if (!p[i].required) sb_fmt(body, "( \",\" json-ws r%u json-ws )? ", p[i].rule);
            if (has_extra) {
                sb_str(body, "( \",\" json-ws ");
                sb_put(body, extra.p, extra.len);
                sb_str(body, " json-ws )* ");
            }
        } else {
            /* All optional: whichever member comes first has no comma.
             * tail[i] = the optional members after i, then the extras. */
            uint32_t tail_base = c->n_rules;
            c->n_rules += n + 1;
            for (uint32_t i = n + 1; i-- > 0;) {
                if (i == n && !has_extra) continue;
                if (i == 0 && n > 0) continue; /* nothing refers to it */
                sb_fmt(&c->rules, "r%u ::= ", tail_base + i);
                if (i == n) {
                    sb_str(&c->rules, "( \",\" json-ws ");
                    sb_put(&c->rules, extra.p, extra.len);
                    sb_str(&c->rules, " json-ws )*\n");
                    continue;
                }
                sb_fmt(&c->rules, "( \",\" json-ws r%u json-ws )?", p[i].rule);
                if (i + 1 < n || has_extra) sb_fmt(&c->rules, " r%u", tail_base + i + 1);
                sb_str(&c->rules, "\n");
            }
            if (n || has_extra) {
                sb_str(body, "( ");
                for (uint32_t i = 0; i < n; i++) {
                    if (i) sb_str(body, " | ");
                    sb_fmt(body, "r%u json-ws", p[i].rule);
                    if (i + 1 < n || has_extra) sb_fmt(body, " r%u", tail_base + i + 1);
                }
                if (has_extra) {
                    if (n) sb_str(body, " | ");
                    sb_put(body, extra.p, extra.len);
                    sb_fmt(body, " json-ws r%u", tail_base + n);
                }
                sb_str(body, " )? ");
            }
        }
        sb_str(body, "\"}\"");
        if (extra.failed || c->rules.failed) st = oom(c);
    }
    sb_free(&extra);
    fx_free(c->alloc, p);
    return st;
}

static fx_status gen_type(conv *c, uint32_t node, uint32_t type_node, sbuf *body) {
    if (str_is(c, type_node, "string")) return gen_string(c, node, body);
    if (str_is(c, type_node, "object")) return gen_object(c, node, body);
    if (str_is(c, type_node, "array")) return gen_array(c, node, body);
    const char *prim = NULL;
    unsigned use = 0;
    if (str_is(c, type_node, "number")) { prim = "json-number"; use = USE_NUMBER; }
    else if (str_is(c, type_node, "integer")) { prim = "json-integer"; use = USE_INTEGER; }
    else if (str_is(c, type_node, "boolean")) { prim = "json-boolean"; use = USE_BOOLEAN; }
    else if (str_is(c, type_node, "null")) { prim = "json-null"; use = USE_NULL; }
    if (!prim) {
        const fx_jnode *t = N(c, type_node);
        return cfail(c, FX_ERR_INVALID_ARG, "unknown type ",
                     t->type == FX_J_STRING ? fx_jdoc_str(c->d, t) : "(not a string)");
    }
    c->used |= use;
    sb_str(body, prim);
    return FX_OK;
}

static fx_status gen_alternatives(conv *c, uint32_t list, const char *kw, sbuf *body) {
    const fx_jnode *l = N(c, list);
    if (l->type != FX_J_ARRAY || l->count == 0)
        return cfail(c, FX_ERR_INVALID_ARG, kw, " must be a non-empty array");
    uint32_t i = 0;
    for (uint32_t e = l->first; e != FX_JSON_NONE; e = N(c, e)->next, i++) {
        char idx[16];
        snprintf(idx, sizeof idx, "/%u", i);
        size_t old = path_push(c, kw, idx, strlen(idx));
        if (i) sb_str(body, " | ");
        if (gen_expr(c, e, body) != FX_OK) return c->status;
        path_pop(c, old);
    }
    return FX_OK;
}

static fx_status gen_body_at_depth(conv *c, uint32_t node, sbuf *body) {
    const fx_jnode *n = N(c, node);
    if (n->type == FX_J_TRUE) {
        c->used |= USE_VALUE;
        sb_str(body, "json-value");
        return FX_OK;
    }
    if (n->type == FX_J_FALSE)
        return cfail(c, FX_ERR_INVALID_ARG, "the schema false matches nothing", NULL);
    if (n->type != FX_J_OBJECT)
        return cfail(c, FX_ERR_INVALID_ARG, "a schema must be an object or a boolean", NULL);
    for (size_t i = 0; i < sizeof unsupported_keywords / sizeof *unsupported_keywords; i++)
        if (fx_jdoc_get(c->d, node, unsupported_keywords[i]) != FX_JSON_NONE)
            return cfail(c, FX_ERR_INVALID_ARG, "unsupported keyword ", unsupported_keywords[i]);
    uint32_t v;
    if ((v = fx_jdoc_get(c->d, node, "$ref")) != FX_JSON_NONE) return gen_ref(c, v, body);
    if ((v = fx_jdoc_get(c->d, node, "const")) != FX_JSON_NONE) return value_literal(c, v, body);
    if ((v = fx_jdoc_get(c->d, node, "enum")) != FX_JSON_NONE) {
        const fx_jnode *l = N(c, v);
        if (l->type != FX_J_ARRAY || l->count == 0)
            return cfail(c, FX_ERR_INVALID_ARG, "enum must be a non-empty array", NULL);
        for (uint32_t e = l->first; e != FX_JSON_NONE; e = N(c, e)->next) {
            if (e != l->first) sb_str(body, " | ");
            if (value_literal(c, e, body) != FX_OK) return c->status;
        }
        return FX_OK;
    }
    if ((v = fx_jdoc_get(c->d, node, "anyOf")) != FX_JSON_NONE)
        return gen_alternatives(c, v, "anyOf", body);
    if ((v = fx_jdoc_get(c->d, node, "oneOf")) != FX_JSON_NONE)
        return gen_alternatives(c, v, "oneOf", body);
    if ((v = fx_jdoc_get(c->d, node, "allOf")) != FX_JSON_NONE) {
        if (N(c, v)->type != FX_J_ARRAY || N(c, v)->count != 1)
            return cfail(c, FX_ERR_INVALID_ARG, "allOf is supported with one element only", NULL);
        size_t old = path_push(c, "allOf/0", NULL, 0);
        fx_status st = gen_body(c, N(c, v)->first, body);
        if (st == FX_OK) path_pop(c, old);
        return st;
    }
    uint32_t type = fx_jdoc_get(c->d, node, "type");
    if (type != FX_JSON_NONE && N(c, type)->type == FX_J_ARRAY) {
        if (N(c, type)->count == 0)
            return cfail(c, FX_ERR_INVALID_ARG, "type must not be an empty list", NULL);
        for (uint32_t e = N(c, type)->first; e != FX_JSON_NONE; e = N(c, e)->next) {
            if (e != N(c, type)->first) sb_str(body, " | ");
            if (gen_type(c, node, e, body) != FX_OK) return c->status;
        }
        return FX_OK;
    }
    if (type != FX_JSON_NONE) return gen_type(c, node, type, body);
    /* No type: what the keywords present imply, else any value. */
    static const char *const object_kw[] = {"properties", "required", "additionalProperties"};
    static const char *const array_kw[] = {"items", "prefixItems", "minItems", "maxItems"};
    static const char *const string_kw[] = {"minLength", "maxLength"};
    for (size_t i = 0; i < 3; i++)
        if (fx_jdoc_get(c->d, node, object_kw[i]) != FX_JSON_NONE) return gen_object(c, node, body);
    for (size_t i = 0; i < 4; i++)
        if (fx_jdoc_get(c->d, node, array_kw[i]) != FX_JSON_NONE) return gen_array(c, node, body);
    for (size_t i = 0; i < 2; i++)
        if (fx_jdoc_get(c->d, node, string_kw[i]) != FX_JSON_NONE) return gen_string(c, node, body);
    c->used |= USE_VALUE;
    sb_str(body, "json-value");
    return FX_OK;
}

static fx_status gen_body(conv *c, uint32_t node, sbuf *body) {
    if (++c->depth > MAX_SCHEMA_DEPTH)
        return cfail(c, FX_ERR_INVALID_ARG, "subschemas nest deeper than 256", NULL);
    fx_status st = gen_body_at_depth(c, node, body);
    c->depth--;
    if (st == FX_OK && body->failed) st = oom(c);
    return st;
}

/* The primitives, as RFC 8259 has them; a number's digits are bounded so a
 * random model cannot run one on for ever. */
static void emit_primitives(conv *c) {
    unsigned u = c->used;
    if (u & USE_VALUE) u |= USE_STRING | USE_NUMBER | USE_BOOLEAN | USE_NULL | USE_WS;
    if (u & USE_STRING) u |= USE_CHAR;
    sbuf *r = &c->rules;
    if (u & USE_VALUE) {
        sb_str(r, "json-value ::= json-object | json-array | json-string | json-number | "
                  "json-boolean | json-null\n"
                  "json-object ::= \"{\" json-ws ( json-string json-ws \":\" json-ws json-value "
                  "json-ws ( \",\" json-ws json-string json-ws \":\" json-ws json-value "
                  "json-ws )* )? \"}\"\n"
                  "json-array ::= \"[\" json-ws ( json-value json-ws ( \",\" json-ws "
                  "json-value json-ws )* )? \"]\"\n");
    }
    if (u & USE_STRING) sb_str(r, "json-string ::= \"\\\"\" json-char* \"\\\"\"\n");
    if (u & USE_CHAR)
        sb_str(r, "json-char ::= [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | "
                  "\"u\" [0-9a-fA-F]{4})\n");
    if (u & USE_NUMBER)
        sb_str(r, "json-number ::= \"-\"? ([0-9] | [1-9] [0-9]{1,15}) (\".\" [0-9]{1,16})? "
                  "([eE] [-+]? [0-9]{1,3})?\n");
    if (u & USE_INTEGER) sb_str(r, "json-integer ::= \"-\"? ([0-9] | [1-9] [0-9]{1,15})\n");
    if (u & USE_BOOLEAN) sb_str(r, "json-boolean ::= \"true\" | \"false\"\n");
    if (u & USE_NULL) sb_str(r, "json-null ::= \"null\"\n");
    if (u & USE_WS) sb_str(r, "json-ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n");
}

fx_status fx_json_schema_to_gbnf(const fx_alloc *alloc, const char *schema,
                                 size_t len, char **out, size_t *out_len,
                                 fx_error *err) {
    *out = NULL;
    if (out_len) *out_len = 0;
    fx_jdoc doc;
    fx_status st = fx_jdoc_parse(&doc, alloc, schema, len, err);
    if (st != FX_OK) {
        fx_jdoc_free(&doc);
        if (st == FX_ERR_INVALID_ARG && err) {
            char msg[FX_ERRMSG_SIZE];
            memcpy(msg, err->message, sizeof msg);
            fx_fail(err, st, "json schema is not JSON: %.400s", msg);
        }
        return st;
    }
    conv c;
    memset(&c, 0, sizeof c);
    c.d = &doc;
    c.alloc = alloc;
    c.err = err;
    c.rules.alloc = alloc;
    sbuf root = {alloc, NULL, 0, 0, 0};
    st = gen_body(&c, doc.root, &root);
    if (st == FX_OK) {
        emit_primitives(&c);
        sbuf all = {alloc, NULL, 0, 0, 0};
        sb_str(&all, "root ::= ");
        sb_put(&all, root.p, root.len);
        sb_str(&all, "\n");
        sb_put(&all, c.rules.p, c.rules.len);
        if (all.failed || c.rules.failed) {
            st = oom(&c);
            sb_free(&all);
        } else {
            *out = all.p;
            if (out_len) *out_len = all.len;
        }
    }
    sb_free(&root);
    sb_free(&c.rules);
    fx_free(alloc, c.refs);
    fx_jdoc_free(&doc);
    return st;
}
