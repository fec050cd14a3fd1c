/*
 * jinja JSON: json.dumps as transformers' tojson filter calls it
 * (ensure_ascii=False, indent, sort_keys) and a reader for the host's
 * context JSON, bounded in depth like everything else a render does.
 */
#include "jinja_int.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

static void put_s(jctx *c, jout *o, const char *s) {
    fx_jout_put(c, o, s, strlen(s));
}

/* ---- json.dumps ---- */

static void json_str(jctx *c, jout *o, jstr s) {
    put_s(c, o, "\"");
    size_t from = 0;
    for (size_t i = 0; i < s.n; i++) {
        unsigned char ch = (unsigned char)s.p[i];
        char esc[8];
        const char *e = NULL;
        switch (ch) {
        case '"': e = "\\\""; break;
        case '\\': e = "\\\\"; break;
        case '\n': e = "\\n"; break;
        case '\r': e = "\\r"; break;
        case '\t': e = "\\t"; break;
        case '\b': e = "\\b"; break;
        case '\f': e = "\\f"; break;
        default:
            if (ch < 0x20) {
                snprintf(esc, sizeof esc, "\\u%04x", ch);
                e = esc;
            }
        }
        size_t skip = 1;
        char wide[16];
        if (!e && ch >= 0x80 && c->json_ascii) {
            /* ensure_ascii=True: \uXXXX, surrogate pairs past U+FFFF;
             * bytes that are not UTF-8 stay as they are. */
            utf8proc_int32_t cp;
            utf8proc_ssize_t k = utf8proc_iterate(
                (const utf8proc_uint8_t *)s.p + i, (utf8proc_ssize_t)(s.n - i), &cp);
            if (k > 0) {
                if (cp >= 0x10000)
                    snprintf(wide, sizeof wide, "\\u%04x\\u%04x",
                             (unsigned)(0xd800 + ((cp - 0x10000) >> 10)),
                             (unsigned)(0xdc00 + ((cp - 0x10000) & 0x3ff)));
                else
                    snprintf(wide, sizeof wide, "\\u%04x", (unsigned)cp);
                e = wide;
                skip = (size_t)k;
            }
        }
        if (!e) continue;
        fx_jout_put(c, o, s.p + from, i - from);
        put_s(c, o, e);
        from = i + skip;
        i += skip - 1;
    }
    fx_jout_put(c, o, s.p + from, s.n - from);
    put_s(c, o, "\"");
}

static void json_nl(jctx *c, jout *o, int indent, int level) {
    put_s(c, o, "\n");
    for (int i = 0; i < indent * level; i++) put_s(c, o, " ");
}

void fx_jv_tojson(jctx *c, jout *o, const jv *v, int indent, int level,
               bool sort_keys) {
    fx_jstep(c, 1);
    const char *item_sep = indent >= 0 ? "," : ", ";
    switch (v->t) {
    case JV_NONE: put_s(c, o, "null"); return;
    case JV_BOOL: put_s(c, o, v->u.b ? "true" : "false"); return;
    case JV_INT: case JV_FLOAT: {
        jstr s = fx_jv_to_str(c, v);
        if (v->t == JV_FLOAT && isnan(v->u.f)) put_s(c, o, "NaN");
        else if (v->t == JV_FLOAT && isinf(v->u.f))
            put_s(c, o, v->u.f < 0 ? "-Infinity" : "Infinity");
        else fx_jout_put(c, o, s.p, s.n);
        return;
    }
    case JV_STR: json_str(c, o, v->u.s); return;
    case JV_LIST: case JV_DICT:
        if (v->tuple != JV_GENERATOR) break;
        /* fall through */
    default:
        fx_jfail(c, FX_ERR_BAD_TEMPLATE, "Object of type %s is not JSON "
              "serializable", fx_jv_typename(v));
    }
    if (++c->depth > c->lim->max_depth)
        fx_jfail(c, FX_ERR_BAD_TEMPLATE, "values nested too deeply for tojson");
    if (v->t == JV_LIST) {
        const jlist *l = v->u.l;
        put_s(c, o, "[");
        for (size_t i = 0; i < l->n; i++) {
            if (i) put_s(c, o, item_sep);
            if (indent >= 0) json_nl(c, o, indent, level + 1);
            fx_jv_tojson(c, o, &l->v[i], indent, level + 1, sort_keys);
        }
        if (indent >= 0 && l->n) json_nl(c, o, indent, level);
        put_s(c, o, "]");
    } else {
        const jdict *d = v->u.d;
        if (d->ns)
            fx_jfail(c, FX_ERR_BAD_TEMPLATE, "Object of type Namespace is not "
                  "JSON serializable");
        size_t *order = fx_jalloc(c, (d->n ? d->n : 1) * sizeof *order);
        for (size_t i = 0; i < d->n; i++) order[i] = i;
        if (sort_keys) { /* insertion sort: dicts in templates are small */
            for (size_t i = 1; i < d->n; i++) {
                size_t x = order[i], j = i;
                while (j > 0 && fx_jv_compare(c, &d->k[order[j - 1]], &d->k[x]) > 0) {
                    order[j] = order[j - 1];
                    j--;
                }
                order[j] = x;
            }
        }
        put_s(c, o, "{");
        for (size_t i = 0; i < d->n; i++) {
            const jv *k = &d->k[order[i]];
            if (i) put_s(c, o, item_sep);
            if (indent >= 0) json_nl(c, o, indent, level + 1);
            if (k->t == JV_STR) {
                json_str(c, o, k->u.s);
            } else if (k->t == JV_INT || k->t == JV_FLOAT || k->t == JV_BOOL ||
                       k->t == JV_NONE) {
                jout tmp = { 0 };
                fx_jv_tojson(c, &tmp, k, -1, 0, false);
                json_str(c, o, fx_jout_str(&tmp));
            } else {
                fx_jfail(c, FX_ERR_BAD_TEMPLATE, "keys must be str, int, float, "
                      "bool or None, not %s", fx_jv_typename(k));
            }
            put_s(c, o, ": ");
            fx_jv_tojson(c, o, &d->v[order[i]], indent, level + 1, sort_keys);
        }
        if (indent >= 0 && d->n) json_nl(c, o, indent, level);
        put_s(c, o, "}");
    }
    c->depth--;
}

/* ---- JSON reader ---- */

typedef struct jreader {
    jctx *c;
    const char *start, *p, *end;
    const char *what;
    uint32_t depth;
} jreader;

_Noreturn static void rfail(jreader *r, const char *why) {
    fx_jfail(r->c, FX_ERR_INVALID_ARG, "%s: invalid JSON at offset %zu: %s",
          r->what, (size_t)(r->p - r->start), why);
}

static void skip_ws(jreader *r) {
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' ||
                             *r->p == '\r'))
        r->p++;
}

static void put_utf8(jctx *c, jout *o, uint32_t cp) {
    unsigned char b[4];
    fx_jout_put(c, o, (const char *)b, fx_utf8_encode(cp, b));
}

static int hexval(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

static uint32_t read_hex4(jreader *r) {
    if (r->end - r->p < 4) rfail(r, "short \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(r->p[i]);
        if (h < 0) rfail(r, "bad \\u escape");
        v = v * 16 + (uint32_t)h;
    }
    r->p += 4;
    return v;
}

static jv read_string(jreader *r) {
    r->p++; /* the opening quote */
    jout o = { 0 };
    const char *from = r->p;
    for (;;) {
        if (r->p >= r->end) rfail(r, "unterminated string");
        char ch = *r->p;
        if (ch == '"') break;
        if ((unsigned char)ch < 0x20) rfail(r, "control character in string");
        if (ch != '\\') { r->p++; continue; }
        fx_jout_put(r->c, &o, from, (size_t)(r->p - from));
        r->p++;
        if (r->p >= r->end) rfail(r, "unterminated escape");
        char e = *r->p++;
        const char *map = "\"\"\\\\//b\bf\fn\nr\rt\t";
        const char *m = NULL;
        for (const char *q = map; *q; q += 2)
            if (*q == e) m = q;
        if (m) {
            fx_jout_put(r->c, &o, m + 1, 1);
        } else if (e == 'u') {
            uint32_t cp = read_hex4(r);
            if (cp >= 0xd800 && cp < 0xdc00 && r->end - r->p >= 6 &&
                r->p[0] == '\\' && r->p[1] == 'u') {
                const char *save = r->p;
                r->p += 2;
                uint32_t lo = read_hex4(r);
                if (lo >= 0xdc00 && lo < 0xe000)
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                else
                    r->p = save;
            }
            if (cp >= 0xd800 && cp < 0xe000) cp = 0xfffd;
            /* A NUL would cut the prompt short for every C consumer. */
            if (cp == 0) rfail(r, "a NUL character (\\u0000) in a string");
            put_utf8(r->c, &o, cp);
        } else {
            rfail(r, "unknown escape");
        }
        from = r->p;
    }
    fx_jout_put(r->c, &o, from, (size_t)(r->p - from));
    r->p++;
    jstr s = fx_jout_str(&o);
    return fx_jv_str(s.p, s.n);
}

static jv read_value(jreader *r);

static jv read_number(jreader *r) {
    const char *s = r->p;
    bool is_float = false;
    if (r->p < r->end && *r->p == '-') r->p++;
    if (r->p >= r->end || *r->p < '0' || *r->p > '9') rfail(r, "bad number");
    while (r->p < r->end) {
        char ch = *r->p;
        if (ch >= '0' && ch <= '9') { r->p++; continue; }
        if (ch == '.' || ch == 'e' || ch == 'E' || ch == '+' ||
            (ch == '-' && (r->p[-1] == 'e' || r->p[-1] == 'E'))) {
            is_float = true;
            r->p++;
            continue;
        }
        break;
    }
    char buf[64];
    size_t n = (size_t)(r->p - s);
    if (n >= sizeof buf) is_float = true;
    if (n >= sizeof buf) n = sizeof buf - 1;
    memcpy(buf, s, n);
    buf[n] = '\0';
    char *endp;
    if (!is_float) {
        long long v = strtoll(buf, &endp, 10);
        if (*endp == '\0' && v != LLONG_MAX && v != LLONG_MIN)
            return fx_jv_int(v);
    }
    double d = strtod(buf, &endp);
    if (*endp != '\0') rfail(r, "bad number");
    return fx_jv_float(d);
}

static bool word(jreader *r, const char *w) {
    size_t n = strlen(w);
    if ((size_t)(r->end - r->p) < n || memcmp(r->p, w, n) != 0) return false;
    r->p += n;
    return true;
}

static jv read_value(jreader *r) {
    fx_jstep(r->c, 1);
    skip_ws(r);
    if (r->p >= r->end) rfail(r, "unexpected end");
    char ch = *r->p;
    if (ch == '"') return read_string(r);
    if (ch == '-' || (ch >= '0' && ch <= '9')) return read_number(r);
    if (word(r, "true")) return fx_jv_bool(true);
    if (word(r, "false")) return fx_jv_bool(false);
    if (word(r, "null")) return fx_jv_none();
    if (ch != '[' && ch != '{') rfail(r, "unexpected character");
    if (++r->depth > r->c->lim->max_depth) rfail(r, "nested too deeply");
    r->p++;
    jv out = ch == '[' ? fx_jv_newlist(r->c, 0) : fx_jv_newdict(r->c, 0);
    char close = ch == '[' ? ']' : '}';
    skip_ws(r);
    if (r->p < r->end && *r->p == close) {
        r->p++;
        r->depth--;
        return out;
    }
    for (;;) {
        if (ch == '[') {
            fx_jlist_push(r->c, out.u.l, read_value(r));
        } else {
            skip_ws(r);
            if (r->p >= r->end || *r->p != '"') rfail(r, "expected a key");
            jv k = read_string(r);
            skip_ws(r);
            if (r->p >= r->end || *r->p != ':') rfail(r, "expected ':'");
            r->p++;
            fx_jdict_set(r->c, out.u.d, k, read_value(r));
        }
        skip_ws(r);
        if (r->p < r->end && *r->p == ',') { r->p++; continue; }
        if (r->p < r->end && *r->p == close) { r->p++; break; }
        rfail(r, "expected ',' or a closing bracket");
    }
    r->depth--;
    return out;
}

jv fx_jv_parse_json(jctx *c, const char *p, size_t n, const char *what) {
    jreader r = { c, p, p, p + n, what, 0 };
    jv v = read_value(&r);
    skip_ws(&r);
    if (r.p != r.end) rfail(&r, "trailing text");
    return v;
}

