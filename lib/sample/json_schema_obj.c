/*
 * json_schema_obj: object schemas -- properties, required,
 * additionalProperties -- and allOf of several object schemas merged into
 * one (properties and required united), as llama.cpp's converter does.
 */
#include "json_schema_int.h"

#include <stdlib.h>

#define cfail fx_js_fail
#define oom fx_js_oom
#define path_push fx_js_path_push
#define path_pop fx_js_path_pop
#define json_string fx_js_json_string
#define gbnf_literal fx_js_gbnf_literal
#define gen_expr fx_js_gen_expr

#define MAX_PARTS 64u  /* allOf elements merged into one object */

typedef struct prop {
    uint32_t key;       /* member node (its key) or a "required" string node */
    uint32_t schema;    /* FX_JSON_NONE: any value */
    int required;
    uint32_t rule;      /* the "key": value rule */
    int32_t member;     /* the allOf element it came from; -1: the schema */
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
    size_t outer = c->path_len;
    if (p->member >= 0) {
        char idx[16];
        snprintf(idx, sizeof idx, "%d", (int)p->member);
        path_push(c, "allOf/", idx, strlen(idx));
    }
    path_push(c, "properties/", fx_jdoc_str(c->d, k), k->str_len);
    fx_status st = FX_OK;
    if (p->schema == FX_JSON_NONE) {
        c->used |= USE_VALUE;
        sb_str(&body, "json-value");
    } else {
        st = gen_expr(c, p->schema, &body);
    }
    if (st == FX_OK) path_pop(c, outer);
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

static int same_name(const conv *c, uint32_t a, uint32_t b) {
    const fx_jnode *x = N(c, a), *y = N(c, b);
    return x->str_len == y->str_len &&
           memcmp(fx_jdoc_str(c->d, x), fx_jdoc_str(c->d, y), x->str_len) == 0;
}

/* ---- keys other than the listed names (additionalProperties) ---- */

typedef struct kname { const char *s; uint32_t n; } kname;

static int kname_cmp(const void *a, const void *b) {
    const kname *x = a, *y = b;
    uint32_t m = x->n < y->n ? x->n : y->n;
    int r = memcmp(x->s, y->s, m);
    return r ? r : (x->n > y->n) - (x->n < y->n);
}

typedef struct knode { uint32_t lo, hi, depth, rule; } knode;

static uint32_t utf8_len(unsigned char lead) {
    return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

static uint32_t utf8_cp(const char *s, uint32_t len) {
    uint32_t cp = (unsigned char)s[0];
    if (len > 1) cp &= 0x3Fu >> (len - 1);
    for (uint32_t k = 1; k < len; k++) cp = cp << 6 | ((unsigned char)s[k] & 0x3Fu);
    return cp;
}

/* A JSON string key that is none of the names in p: an extra member must
 * not repeat a listed one with another value (llama.cpp's _not_strings).
 * Along a name's prefix an extra key is spelled without escapes, and the
 * first character where it leaves every name is raw too, so "\u0061"
 * can never stand in for "a" (escapes may follow that character); names
 * that need escapes cannot be spelled that way, so they drop out. The
 * names' trie becomes one rule per node -- flat, so a long name does not
 * nest groups past the grammar's limit -- each: a child's character and
 * its node, or a raw character no child has and any rest, or (unless a
 * name ends here) the end. */
static fx_status other_key(conv *c, const prop *p, uint32_t n, sbuf *out) {
    kname *names = fx_calloc(c->alloc, n ? n : 1, sizeof *names);
    uint32_t cnt = 0, total = 1;
    if (!names) return oom(c);
    for (uint32_t i = 0; i < n; i++) {
        const fx_jnode *k = N(c, p[i].key);
        const char *s = fx_jdoc_str(c->d, k);
        int plain = 1;
        for (uint32_t q = 0; q < k->str_len && plain; q++) {
            unsigned char ch = (unsigned char)s[q];
            plain = ch >= 0x20 && ch != '"' && ch != '\\' && ch != 0x7F;
        }
        if (plain) {
            names[cnt++] = (kname){s, k->str_len};
            total += k->str_len;
        }
    }
    if (cnt == 0) {
        fx_free(c->alloc, names);
        c->used |= USE_STRING;
        sb_str(out, "json-string");
        return FX_OK;
    }
    c->used |= USE_CHAR;
    qsort(names, cnt, sizeof *names, kname_cmp);
    knode *todo = fx_malloc_array(c->alloc, total + 1, sizeof *todo);
    if (!todo) {
        fx_free(c->alloc, names);
        return oom(c);
    }
    uint32_t n_todo = 0, root = c->n_rules++;
    todo[n_todo++] = (knode){0, cnt, 0, root};
    sbuf *r = &c->rules;
    while (n_todo) {
        knode k = todo[--n_todo];
        uint32_t i = k.lo;
        int ends_here = 0;
        while (i < k.hi && names[i].n == k.depth) { ends_here = 1; i++; }
        sb_fmt(r, "r%u ::= ", k.rule);
        if (!ends_here) sb_str(r, "| ");
        sbuf excl = {c->alloc, NULL, 0, 0, 0};
        while (i < k.hi) {
            uint32_t len = utf8_len((unsigned char)names[i].s[k.depth]);
            const char *ch = names[i].s + k.depth;
            uint32_t j = i + 1;
            while (j < k.hi && memcmp(names[j].s + k.depth, ch, len) == 0) j++;
            uint32_t child = c->n_rules++;
            todo[n_todo++] = (knode){i, j, k.depth + len, child};
            sb_str(r, "\"");
            sb_put(r, ch, len);
            sb_fmt(r, "\" r%u | ", child);
            uint32_t cp = utf8_cp(ch, len);
            if (cp <= 0xFFFF) sb_fmt(&excl, "\\u%04X", cp);
            else sb_fmt(&excl, "\\U%08X", cp);
            i = j;
        }
        sb_str(r, "[^\"\\\\\\x7F\\x00-\\x1F");
        sb_put(r, excl.p, excl.len);
        sb_str(r, "] json-char*\n");
        if (excl.failed) r->failed = 1;
        sb_free(&excl);
    }
    fx_free(c->alloc, todo);
    fx_free(c->alloc, names);
    sb_fmt(out, "\"\\\"\" r%u \"\\\"\"", root);
    return r->failed ? oom(c) : FX_OK;
}

/* ---- one object from one or more parts ---- */

static fx_status check_part(conv *c, uint32_t part) {
    uint32_t props = fx_jdoc_get(c->d, part, "properties");
    uint32_t req = fx_jdoc_get(c->d, part, "required");
    if (props != FX_JSON_NONE && N(c, props)->type != FX_J_OBJECT)
        return cfail(c, FX_ERR_INVALID_ARG, "properties must be an object", NULL);
    if (req != FX_JSON_NONE) {
        if (N(c, req)->type != FX_J_ARRAY)
            return cfail(c, FX_ERR_INVALID_ARG, "required must be an array of strings", NULL);
        for (uint32_t e = N(c, req)->first; e != FX_JSON_NONE; e = N(c, e)->next)
            if (N(c, e)->type != FX_J_STRING)
                return cfail(c, FX_ERR_INVALID_ARG, "required must be an array of strings", NULL);
    }
    return FX_OK;
}

/* parts[i] is an object schema; member[i] the allOf index it is (-1 for
 * the schema itself); addl the additionalProperties that applies. */
static fx_status build_object(conv *c, const uint32_t *parts, const int32_t *member,
                              uint32_t n_parts, uint32_t addl, sbuf *body) {
    uint32_t cap = 1, listed = 0;
    for (uint32_t k = 0; k < n_parts; k++) {
        uint32_t props = fx_jdoc_get(c->d, parts[k], "properties");
        uint32_t req = fx_jdoc_get(c->d, parts[k], "required");
        cap += props == FX_JSON_NONE ? 0 : N(c, props)->count;
        cap += req == FX_JSON_NONE ? 0 : N(c, req)->count;
        listed += props != FX_JSON_NONE || req != FX_JSON_NONE;
    }
    /* As in llama.cpp's converter and strict structured outputs: without
     * "additionalProperties", an object that lists properties allows no
     * others; one that lists none allows any. */
    if (!listed && (addl == FX_JSON_NONE || N(c, addl)->type == FX_J_TRUE)) {
        c->used |= USE_VALUE;
        sb_str(body, "json-object");
        return FX_OK;
    }
    prop *p = fx_calloc(c->alloc, cap, sizeof *p);
    if (!p) return oom(c);
    uint32_t n = 0;
    /* Properties in order, part by part; a name two parts describe must
     * be described the same (the value would have to match both). */
    for (uint32_t k = 0; k < n_parts; k++) {
        uint32_t props = fx_jdoc_get(c->d, parts[k], "properties");
        for (uint32_t m = props == FX_JSON_NONE ? FX_JSON_NONE : N(c, props)->first;
             m != FX_JSON_NONE; m = N(c, m)->next) {
            uint32_t dup = n;
            for (uint32_t i = 0; i < n && dup == n; i++)
                if (same_name(c, p[i].key, m)) dup = i;
            if (dup == n) {
                p[n++] = (prop){m, N(c, m)->value, 0, 0, member[k]};
                continue;
            }
            sbuf a = {c->alloc, NULL, 0, 0, 0}, b = {c->alloc, NULL, 0, 0, 0};
            fx_js_json_compact(c, &a, p[dup].schema);
            fx_js_json_compact(c, &b, N(c, m)->value);
            int same = a.len == b.len && (a.len == 0 || memcmp(a.p, b.p, a.len) == 0);
            int failed = a.failed || b.failed;
            sb_free(&a);
            sb_free(&b);
            if (failed || !same) {
                fx_free(c->alloc, p);
                if (failed) return oom(c);
                return cfail(c, FX_ERR_INVALID_ARG, "allOf: two elements describe the "
                             "property ", fx_jdoc_str(c->d, N(c, m)));
            }
        }
    }
    /* Required: the union; names no part describes take any value. */
    for (uint32_t k = 0; k < n_parts; k++) {
        uint32_t req = fx_jdoc_get(c->d, parts[k], "required");
        for (uint32_t e = req == FX_JSON_NONE ? FX_JSON_NONE : N(c, req)->first;
             e != FX_JSON_NONE; e = N(c, e)->next) {
            uint32_t i = 0;
            while (i < n && !same_name(c, p[i].key, e)) i++;
            if (i == n) p[n++] = (prop){e, FX_JSON_NONE, 1, 0, member[k]};
            else p[i].required = 1;
        }
    }
    fx_status st = FX_OK;
    for (uint32_t i = 0; i < n && st == FX_OK; i++) st = kv_rule(c, &p[i]);
    /* The rule for one more member under additionalProperties. */
    sbuf extra = {c->alloc, NULL, 0, 0, 0};
    int has_extra = 0;
    if (st == FX_OK && addl != FX_JSON_NONE && N(c, addl)->type != FX_J_FALSE) {
        has_extra = 1;
        c->used |= USE_WS;
        uint32_t no = c->n_rules++;
        sbuf kv = {c->alloc, NULL, 0, 0, 0};
        st = other_key(c, p, n, &kv);
        sb_str(&kv, " json-ws \":\" json-ws ");
        size_t old = path_push(c, "additionalProperties", NULL, 0);
        if (st == FX_OK) st = gen_expr(c, addl, &kv);
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


fx_status fx_js_object(conv *c, uint32_t node, sbuf *body) {
    if (check_part(c, node) != FX_OK) return c->status;
    int32_t self = -1;
    return build_object(c, &node, &self, 1, fx_jdoc_get(c->d, node, "additionalProperties"),
                        body);
}

/* What an allOf element may hold to be merged: an object schema's
 * keywords and annotations. */
static const char *const mergeable[] = {
    "properties", "required", "type", "additionalProperties", "title", "description",
    "$comment", "default", "examples", "$id", "$schema", "$anchor", "$defs",
    "definitions", "deprecated", "readOnly", "writeOnly"};

fx_status fx_js_all_of(conv *c, uint32_t node, uint32_t list, sbuf *body) {
    const fx_jnode *l = N(c, list);
    if (l->type != FX_J_ARRAY || l->count == 0)
        return cfail(c, FX_ERR_INVALID_ARG, "allOf must be a non-empty array", NULL);
    int own = fx_jdoc_get(c->d, node, "properties") != FX_JSON_NONE ||
              fx_jdoc_get(c->d, node, "required") != FX_JSON_NONE ||
              fx_jdoc_get(c->d, node, "additionalProperties") != FX_JSON_NONE;
    if (l->count == 1 && !own) {
        /* One element: that schema, whatever it is. */
        size_t old = path_push(c, "allOf/0", NULL, 0);
        fx_status st = gen_expr(c, l->first, body);
        if (st == FX_OK) path_pop(c, old);
        return st;
    }
    if (l->count + 1 > MAX_PARTS)
        return cfail(c, FX_ERR_INVALID_ARG, "allOf: more than 63 elements", NULL);
    uint32_t parts[MAX_PARTS];
    int32_t member[MAX_PARTS];
    uint32_t n = 0;
    if (check_part(c, node) != FX_OK) return c->status;
    parts[n] = node;
    member[n++] = -1;
    int32_t i = 0;
    for (uint32_t e = l->first; e != FX_JSON_NONE; e = N(c, e)->next, i++) {
        char idx[16];
        snprintf(idx, sizeof idx, "%d", (int)i);
        size_t old = path_push(c, "allOf/", idx, strlen(idx));
        /* An element may be a $ref (a chain of them) to an object schema. */
        uint32_t at = e, hops = 0;
        while (N(c, at)->type == FX_J_OBJECT && N(c, at)->count == 1) {
            uint32_t ref = fx_jdoc_get(c->d, at, "$ref");
            if (ref == FX_JSON_NONE) break;
            if (++hops > 32) return cfail(c, FX_ERR_INVALID_ARG, "$ref chain longer than 32", NULL);
            if (fx_js_resolve(c, ref, &at) != FX_OK) return c->status;
        }
        const fx_jnode *en = N(c, at);
        if (en->type == FX_J_TRUE) {
            path_pop(c, old);
            continue;
        }
        if (en->type != FX_J_OBJECT)
            return cfail(c, FX_ERR_INVALID_ARG, "allOf of several: each element must be an "
                         "object schema", NULL);
        for (uint32_t m = en->first; m != FX_JSON_NONE; m = N(c, m)->next) {
            const fx_jnode *key = N(c, m);
            int ok = 0;
            for (size_t q = 0; q < sizeof mergeable / sizeof *mergeable && !ok; q++)
                ok = key->str_len == strlen(mergeable[q]) &&
                     memcmp(fx_jdoc_str(c->d, key), mergeable[q], key->str_len) == 0;
            if (!ok)
                return cfail(c, FX_ERR_INVALID_ARG, "allOf of several merges object schemas "
                             "only (properties, required); this element has ",
                             fx_jdoc_str(c->d, key));
        }
        uint32_t t = fx_jdoc_get(c->d, at, "type");
        if (t != FX_JSON_NONE && !(N(c, t)->type == FX_J_STRING && N(c, t)->str_len == 6 &&
                                   memcmp(fx_jdoc_str(c->d, N(c, t)), "object", 6) == 0))
            return cfail(c, FX_ERR_INVALID_ARG, "allOf of several: an element's type must be "
                         "object", NULL);
        /* The merged object is closed unless the schema itself says other;
         * an element cannot open it for the others. */
        uint32_t a = fx_jdoc_get(c->d, at, "additionalProperties");
        if (a != FX_JSON_NONE && N(c, a)->type != FX_J_FALSE)
            return cfail(c, FX_ERR_INVALID_ARG, "allOf of several: additionalProperties in an "
                         "element is not supported (set it beside allOf)", NULL);
        if (check_part(c, at) != FX_OK) return c->status;
        path_pop(c, old);
        parts[n] = at;
        member[n++] = i;
    }
    return build_object(c, parts, member, n, fx_jdoc_get(c->d, node, "additionalProperties"),
                        body);
}
