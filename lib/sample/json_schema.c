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
#include "json_schema_int.h"

#define MAX_SCHEMA_DEPTH 256u   /* nested subschemas, $ref chains included */
#define MAX_REPEAT FX_JS_MAX_REPEAT

fx_status fx_js_fail(conv *c, fx_status st, const char *what, const char *detail) {
    if (c->status != FX_OK) return c->status;
    c->status = fx_fail(c->err, st, "json schema at %s: %s%s",
                        c->path_len ? c->path : "/", what, detail ? detail : "");
    return c->status;
}

fx_status fx_js_oom(conv *c) {
    if (c->status == FX_OK)
        c->status = fx_fail(c->err, FX_ERR_NOMEM, "out of memory converting a JSON schema");
    return c->status;
}

#define cfail fx_js_fail
#define oom fx_js_oom
#define path_push fx_js_path_push
#define path_pop fx_js_path_pop
#define json_string fx_js_json_string
#define json_compact fx_js_json_compact
#define gbnf_literal fx_js_gbnf_literal
#define gen_expr fx_js_gen_expr

/* JSON pointer-style location for messages; long paths are cut, which is
 * fine for a message. Returns the length to restore. */
size_t fx_js_path_push(conv *c, const char *seg, const char *seg2, size_t seg2_len) {
    size_t old = c->path_len;
    int n = snprintf(c->path + c->path_len, sizeof c->path - c->path_len, "/%s%.*s",
                     seg, (int)(seg2_len > 64 ? 64 : seg2_len), seg2 ? seg2 : "");
    if (n > 0) {
        c->path_len += (size_t)n;
        if (c->path_len >= sizeof c->path) c->path_len = sizeof c->path - 1;
    }
    return old;
}

void fx_js_path_pop(conv *c, size_t old) {
    c->path_len = old;
    c->path[old] = '\0';
}

static int str_is(const conv *c, uint32_t node, const char *s) {
    const fx_jnode *n = N(c, node);
    return n->type == FX_J_STRING && n->str_len == strlen(s) &&
           memcmp(fx_jdoc_str(c->d, n), s, n->str_len) == 0;
}

/* ---- literals: a JSON value, compact, as a GBNF string literal ---- */

void fx_js_json_string(sbuf *b, const char *s, size_t n) {
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

void fx_js_json_compact(const conv *c, sbuf *b, uint32_t node) {
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
void fx_js_gbnf_literal(sbuf *out, const char *s, size_t n) {
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
fx_status fx_js_gen_expr(conv *c, uint32_t node, sbuf *out) {
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

fx_status fx_js_resolve(conv *c, uint32_t node, uint32_t *target) {
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
    *target = at;
    return FX_OK;
}

static fx_status gen_ref(conv *c, uint32_t node, sbuf *out) {
    const fx_jnode *n = N(c, node);
    const char *s = fx_jdoc_str(c->d, n);
    uint32_t at;
    if (fx_js_resolve(c, node, &at) != FX_OK) return c->status;
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
    int lengths = lo != 0 || hi != UINT32_MAX;
    uint32_t pat = fx_jdoc_get(c->d, node, "pattern");
    uint32_t fmt = fx_jdoc_get(c->d, node, "format");
    /* A format that is a grammar (others are annotations, ignored). */
    sbuf fbody = {c->alloc, NULL, 0, 0, 0};
    int has_fmt = fmt != FX_JSON_NONE && N(c, fmt)->type == FX_J_STRING &&
                  fx_js_format(c, fx_jdoc_str(c->d, N(c, fmt)), N(c, fmt)->str_len, &fbody);
    fx_status st = fbody.failed ? oom(c) : FX_OK;
    /* Two of pattern, format and lengths would need their intersection,
     * which the converter does not build: refused, not one dropped. */
    if (st == FX_OK && pat != FX_JSON_NONE && (has_fmt || lengths))
        st = cfail(c, FX_ERR_INVALID_ARG, "pattern together with ",
                   has_fmt ? "format is not supported" : "minLength/maxLength is not supported");
    else if (st == FX_OK && has_fmt && lengths)
        st = cfail(c, FX_ERR_INVALID_ARG, "format together with minLength/maxLength is not "
                   "supported", NULL);
    else if (st == FX_OK && pat != FX_JSON_NONE && N(c, pat)->type != FX_J_STRING)
        st = cfail(c, FX_ERR_INVALID_ARG, "pattern must be a string", NULL);
    else if (st == FX_OK && pat != FX_JSON_NONE)
        st = fx_js_pattern(c, fx_jdoc_str(c->d, N(c, pat)), N(c, pat)->str_len, body);
    else if (st == FX_OK && has_fmt)
        sb_put(body, fbody.p, fbody.len);
    sb_free(&fbody);
    if (st != FX_OK || pat != FX_JSON_NONE || has_fmt) return st;
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

static fx_status gen_type(conv *c, uint32_t node, uint32_t type_node, sbuf *body) {
    if (str_is(c, type_node, "string")) return gen_string(c, node, body);
    if (str_is(c, type_node, "object")) return fx_js_object(c, node, body);
    if (str_is(c, type_node, "array")) return gen_array(c, node, body);
    if (str_is(c, type_node, "number")) return fx_js_number(c, node, 0, body);
    if (str_is(c, type_node, "integer")) return fx_js_number(c, node, 1, body);
    const char *prim = NULL;
    unsigned use = 0;
    if (str_is(c, type_node, "boolean")) { prim = "json-boolean"; use = USE_BOOLEAN; }
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
    if ((v = fx_jdoc_get(c->d, node, "allOf")) != FX_JSON_NONE)
        return fx_js_all_of(c, node, v, body);
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
    static const char *const string_kw[] = {"minLength", "maxLength", "pattern"};
    static const char *const number_kw[] = {"minimum", "maximum", "exclusiveMinimum",
                                            "exclusiveMaximum"};
    for (size_t i = 0; i < 3; i++)
        if (fx_jdoc_get(c->d, node, object_kw[i]) != FX_JSON_NONE) return fx_js_object(c, node, body);
    for (size_t i = 0; i < 4; i++)
        if (fx_jdoc_get(c->d, node, array_kw[i]) != FX_JSON_NONE) return gen_array(c, node, body);
    for (size_t i = 0; i < 3; i++)
        if (fx_jdoc_get(c->d, node, string_kw[i]) != FX_JSON_NONE) return gen_string(c, node, body);
    for (size_t i = 0; i < 4; i++)
        if (fx_jdoc_get(c->d, node, number_kw[i]) != FX_JSON_NONE)
            return fx_js_number(c, node, 0, body);
    /* A format that is a grammar implies a string, as in llama.cpp. */
    if ((v = fx_jdoc_get(c->d, node, "format")) != FX_JSON_NONE && N(c, v)->type == FX_J_STRING) {
        sbuf probe = {c->alloc, NULL, 0, 0, 0};
        unsigned used = c->used;
        int grammar = fx_js_format(c, fx_jdoc_str(c->d, N(c, v)), N(c, v)->str_len, &probe);
        c->used = used;
        int failed = probe.failed;
        sb_free(&probe);
        if (failed) return oom(c);
        if (grammar) return gen_string(c, node, body);
    }
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
    if (u & USE_DATE)
        sb_str(r, "json-date ::= [0-9]{4} \"-\" (\"0\" [1-9] | \"1\" [0-2]) \"-\" "
                  "(\"0\" [1-9] | [1-2] [0-9] | \"3\" [0-1])\n");
    if (u & USE_TIME)
        sb_str(r, "json-time ::= ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] "
                  "(\".\" [0-9]{3})? (\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] "
                  "[0-9])\n");
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
