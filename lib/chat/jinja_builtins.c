/*
 * jinja builtins: attribute and item access, the filters, tests and
 * Python str/dict methods chat templates use, and the globals range,
 * namespace, dict, raise_exception and strftime_now. Mutating methods
 * (list.append, dict.pop ...) are absent on purpose: transformers renders
 * in jinja2's ImmutableSandboxedEnvironment, which refuses them, and so
 * range() stops at the sandbox's 100000 items.
 */
#include "jinja_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

#define SANDBOX_MAX_RANGE 100000

_Noreturn static void undef_err(jctx *c, const jv *v) {
    fx_jfail(c, FX_ERR_BAD_TEMPLATE, "'%.*s' is undefined", (int)v->u.s.n,
          v->u.s.p);
}

static jv undef_named(const char *name) {
    return fx_jv_undef((jstr){ name, strlen(name) });
}


jv fx_jmkstr(const jout *o) {
    jstr s = fx_jout_str(o);
    return fx_jv_str(s.p, s.n);
}

/* ---- attribute and item access ---- */

jv fx_jgetattr(jctx *c, const jv *obj, jstr name) {
    if (obj->t == JV_UNDEF) undef_err(c, obj);
    if (obj->t == JV_DICT) {
        const jv *v = fx_jdict_gets(obj->u.d, name.p, name.n);
        return v ? *v : fx_jv_undef(name);
    }
    if (obj->t == JV_LOOP) {
        const jloop *lp = obj->u.loop;
        size_t n = lp->items->n, i = lp->index0;
        if (jstr_eq(name, "index")) return fx_jv_int((int64_t)i + 1);
        if (jstr_eq(name, "index0")) return fx_jv_int((int64_t)i);
        if (jstr_eq(name, "first")) return fx_jv_bool(i == 0);
        if (jstr_eq(name, "last")) return fx_jv_bool(i + 1 == n);
        if (jstr_eq(name, "length")) return fx_jv_int((int64_t)n);
        if (jstr_eq(name, "revindex")) return fx_jv_int((int64_t)(n - i));
        if (jstr_eq(name, "revindex0")) return fx_jv_int((int64_t)(n - i - 1));
        if (jstr_eq(name, "previtem"))
            return i > 0 ? lp->items->v[i - 1] : undef_named("previtem");
        if (jstr_eq(name, "nextitem"))
            return i + 1 < n ? lp->items->v[i + 1] : undef_named("nextitem");
        if (jstr_eq(name, "depth")) return fx_jv_int(1);
        if (jstr_eq(name, "depth0")) return fx_jv_int(0);
    }
    return fx_jv_undef(name);
}

jv fx_jgetitem(jctx *c, const jv *obj, const jv *key) {
    if (obj->t == JV_UNDEF) undef_err(c, obj);
    if (obj->t == JV_DICT) {
        const jv *v = fx_jdict_get(obj->u.d, *key);
        if (v) return *v;
        return key->t == JV_STR ? fx_jv_undef(key->u.s) : undef_named("");
    }
    if ((obj->t == JV_LIST || obj->t == JV_STR) && jv_is_intlike(key)) {
        int64_t i = jv_as_int(key);
        if (obj->t == JV_LIST) {
            int64_t n = (int64_t)obj->u.l->n;
            if (i < 0) i += n;
            return (i >= 0 && i < n) ? obj->u.l->v[i] : undef_named("");
        }
        jstr s = obj->u.s;
        int64_t n = (int64_t)fx_jutf8_len(s.p, s.n);
        if (i < 0) i += n;
        if (i < 0 || i >= n) return undef_named("");
        size_t b = 0;
        for (int64_t k = 0; k < i; k++) {
            b++;
            while (b < s.n && ((unsigned char)s.p[b] & 0xc0) == 0x80) b++;
        }
        size_t e = b + 1;
        while (e < s.n && ((unsigned char)s.p[e] & 0xc0) == 0x80) e++;
        return fx_jv_str(s.p + b, e - b);
    }
    if (obj->t == JV_LOOP && key->t == JV_STR) return fx_jgetattr(c, obj, key->u.s);
    return undef_named("");
}

/* ---- string helpers ---- */

static jstr need_str(jctx *c, const jv *v, const char *what) {
    if (v->t != JV_STR)
        fx_jfail(c, FX_ERR_BAD_TEMPLATE, "%s expects a string, not %s", what,
              fx_jv_typename(v));
    return v->u.s;
}

static bool has_char(jstr set, const char *p, size_t k) {
    for (size_t i = 0; i + k <= set.n; i++) {
        size_t m = 1;
        while (i + m < set.n && ((unsigned char)set.p[i + m] & 0xc0) == 0x80) m++;
        if (m == k && memcmp(set.p + i, p, k) == 0) return true;
        i += m - 1;
    }
    return false;
}

size_t fx_jchar_len(const char *p, size_t n) {
    size_t k = 1;
    while (k < n && ((unsigned char)p[k] & 0xc0) == 0x80) k++;
    return k;
}

/* str.strip([chars]) with Python's whitespace or the given characters. */
jv fx_jstr_strip(jctx *c, jstr s, const jv *chars, bool left, bool right) {
    if (!chars || chars->t == JV_NONE || chars->t == JV_UNDEF) {
        const char *p = s.p;
        size_t n = s.n;
        fx_chat_strip(&p, &n, left, right);
        return fx_jv_str(p, n);
    }
    jstr set = need_str(c, chars, "strip()");
    size_t b = 0, e = s.n;
    while (left && b < e) {
        size_t k = fx_jchar_len(s.p + b, e - b);
        if (!has_char(set, s.p + b, k)) break;
        b += k;
    }
    while (right && e > b) {
        size_t k = 1;
        while (k < e - b && ((unsigned char)s.p[e - k] & 0xc0) == 0x80) k++;
        if (!has_char(set, s.p + e - k, k)) break;
        e -= k;
    }
    return fx_jv_str(s.p + b, e - b);
}


/* Unicode case mapping through utf8proc (simple, one-to-one mappings). */
jv fx_jstr_case(jctx *c, jstr s, jcase mode) {
    jout o = { 0 };
    bool prev_cased = false;
    for (size_t i = 0; i < s.n;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s.p + i,
                                              (utf8proc_ssize_t)(s.n - i), &cp);
        if (k <= 0) { /* not UTF-8: the byte passes through */
            fx_jout_put(c, &o, s.p + i, 1);
            i++;
            prev_cased = false;
            continue;
        }
        utf8proc_int32_t m = cp;
        bool cased = utf8proc_tolower(cp) != cp || utf8proc_toupper(cp) != cp;
        switch (mode) {
        case CASE_UPPER: m = utf8proc_toupper(cp); break;
        case CASE_LOWER: m = utf8proc_tolower(cp); break;
        case CASE_TITLE:
            m = prev_cased ? utf8proc_tolower(cp) : utf8proc_totitle(cp);
            break;
        case CASE_CAPITALIZE:
            m = i == 0 ? utf8proc_totitle(cp) : utf8proc_tolower(cp);
            break;
        }
        prev_cased = cased;
        utf8proc_uint8_t buf[4];
        utf8proc_ssize_t w = utf8proc_encode_char(m, buf);
        fx_jout_put(c, &o, (const char *)buf, (size_t)w);
        i += (size_t)k;
    }
    return fx_jmkstr(&o);
}

static bool starts_with(jstr s, jstr p) {
    return p.n <= s.n && memcmp(s.p, p.p, p.n) == 0;
}

static bool ends_with(jstr s, jstr p) {
    return p.n <= s.n && memcmp(s.p + s.n - p.n, p.p, p.n) == 0;
}

static bool affix(jctx *c, jstr s, const jv *arg, bool start) {
    if (arg->t == JV_LIST) {
        for (size_t i = 0; i < arg->u.l->n; i++)
            if (affix(c, s, &arg->u.l->v[i], start)) return true;
        return false;
    }
    jstr p = need_str(c, arg, start ? "startswith()" : "endswith()");
    return start ? starts_with(s, p) : ends_with(s, p);
}

static const char *find_sub(jstr s, size_t from, jstr sub) {
    if (sub.n == 0) return s.p + from;
    for (size_t i = from; i + sub.n <= s.n; i++)
        if (memcmp(s.p + i, sub.p, sub.n) == 0) return s.p + i;
    return NULL;
}

jv fx_jstr_replace(jctx *c, jstr s, jstr old, jstr new_, int64_t count) {
    jout o = { 0 };
    size_t i = 0;
    int64_t done = 0;
    if (old.n == 0) { /* Python inserts between every character */
        while (count < 0 || done < count) {
            fx_jout_put(c, &o, new_.p, new_.n);
            done++;
            if (i >= s.n) break;
            size_t k = fx_jchar_len(s.p + i, s.n - i);
            fx_jout_put(c, &o, s.p + i, k);
            i += k;
        }
        fx_jout_put(c, &o, s.p + i, s.n - i);
        return fx_jmkstr(&o);
    }
    while (count < 0 || done < count) {
        const char *at = find_sub(s, i, old);
        if (!at) break;
        fx_jout_put(c, &o, s.p + i, (size_t)(at - s.p) - i);
        fx_jout_put(c, &o, new_.p, new_.n);
        i = (size_t)(at - s.p) + old.n;
        done++;
    }
    fx_jout_put(c, &o, s.p + i, s.n - i);
    return fx_jmkstr(&o);
}

static bool py_blank(const char *p, size_t n, size_t *k) {
    const char *q = p;
    size_t m = fx_jchar_len(p, n);
    *k = m;
    size_t len = m;
    fx_chat_strip(&q, &len, true, false);
    return len == 0;
}

jv fx_jstr_split(jctx *c, jstr s, const jv *sep, int64_t maxsplit) {
    jv out = fx_jv_newlist(c, 0);
    if (!sep || sep->t == JV_NONE) {
        size_t i = 0, k;
        for (;;) {
            while (i < s.n && py_blank(s.p + i, s.n - i, &k)) i += k;
            if (i >= s.n) break;
            if (maxsplit >= 0 && (int64_t)out.u.l->n >= maxsplit) {
                const char *p = s.p + i;
                size_t n = s.n - i;
                fx_chat_strip(&p, &n, false, true);
                fx_jlist_push(c, out.u.l, fx_jv_str(p, n));
                break;
            }
            size_t b = i;
            while (i < s.n && !py_blank(s.p + i, s.n - i, &k)) i += k;
            fx_jlist_push(c, out.u.l, fx_jv_str(s.p + b, i - b));
        }
        return out;
    }
    jstr d = need_str(c, sep, "split()");
    if (d.n == 0) fx_jfail(c, FX_ERR_BAD_TEMPLATE, "empty separator");
    size_t i = 0;
    for (;;) {
        fx_jstep(c, 1);
        const char *at = (maxsplit < 0 || (int64_t)out.u.l->n < maxsplit)
                             ? find_sub(s, i, d) : NULL;
        if (!at) {
            fx_jlist_push(c, out.u.l, fx_jv_str(s.p + i, s.n - i));
            return out;
        }
        fx_jlist_push(c, out.u.l, fx_jv_str(s.p + i, (size_t)(at - s.p) - i));
        i = (size_t)(at - s.p) + d.n;
    }
}

jv fx_jdict_items(jctx *c, const jdict *d) {
    jv out = fx_jv_newlist(c, d->n);
    for (size_t i = 0; i < d->n; i++) {
        jv pair = fx_jv_newlist(c, 2);
        pair.tuple = JV_TUPLE;
        fx_jlist_push(c, pair.u.l, d->k[i]);
        fx_jlist_push(c, pair.u.l, d->v[i]);
        fx_jlist_push(c, out.u.l, pair);
    }
    return out;
}

/* ---- methods ---- */

const jv *fx_jkwarg(const jstr *kwn, const jv *kwv, size_t nkw,
                  const char *name) {
    for (size_t i = 0; i < nkw; i++)
        if (jstr_eq(kwn[i], name)) return &kwv[i];
    return NULL;
}

/* An argument by position or keyword; NULL when absent. */
const jv *fx_jarg(const jv *args, size_t n, size_t pos, const jstr *kwn,
                const jv *kwv, size_t nkw, const char *name) {
    if (pos < n) return &args[pos];
    return name ? fx_jkwarg(kwn, kwv, nkw, name) : NULL;
}

static bool str_method(jctx *c, const jv *obj, jstr name, const jv *args,
                       size_t n, const jstr *kwn, const jv *kwv, size_t nkw,
                       jv *result);

bool fx_jmethod(jctx *c, const jv *obj, jstr name, const jv *args, size_t n,
             const jstr *kwn, const jv *kwv, size_t nkw, jv *result) {
    if (obj->t == JV_STR) {
        if (!str_method(c, obj, name, args, n, kwn, kwv, nkw, result))
            return false;
        /* Markup's methods give Markup back (strip, upper, replace ...). */
        if (obj->tuple == JV_MARKUP && result->t == JV_STR)
            result->tuple = JV_MARKUP;
        return true;
    }
    return fx_jmethod_other(c, obj, name, args, n, kwn, kwv, nkw, result);
}

static bool str_method(jctx *c, const jv *obj, jstr name, const jv *args,
                       size_t n, const jstr *kwn, const jv *kwv, size_t nkw,
                       jv *result) {
#define ARG(i, nm) fx_jarg(args, n, (i), kwn, kwv, nkw, (nm))
    {
        jstr s = obj->u.s;
        if (jstr_eq(name, "strip")) { *result = fx_jstr_strip(c, s, ARG(0, "chars"), true, true); return true; }
        if (jstr_eq(name, "lstrip")) { *result = fx_jstr_strip(c, s, ARG(0, "chars"), true, false); return true; }
        if (jstr_eq(name, "rstrip")) { *result = fx_jstr_strip(c, s, ARG(0, "chars"), false, true); return true; }
        if (jstr_eq(name, "upper")) { *result = fx_jstr_case(c, s, CASE_UPPER); return true; }
        if (jstr_eq(name, "lower")) { *result = fx_jstr_case(c, s, CASE_LOWER); return true; }
        if (jstr_eq(name, "title")) { *result = fx_jstr_case(c, s, CASE_TITLE); return true; }
        if (jstr_eq(name, "capitalize")) { *result = fx_jstr_case(c, s, CASE_CAPITALIZE); return true; }
        if (jstr_eq(name, "startswith") || jstr_eq(name, "endswith")) {
            const jv *p = ARG(0, NULL);
            if (!p) fx_jfail(c, FX_ERR_BAD_TEMPLATE, "%.*s() needs an argument",
                          (int)name.n, name.p);
            *result = fx_jv_bool(affix(c, s, p, jstr_eq(name, "startswith")));
            return true;
        }
        if (jstr_eq(name, "split")) {
            const jv *m = ARG(1, "maxsplit");
            *result = fx_jstr_split(c, s, ARG(0, "sep"), m && jv_is_intlike(m) ? jv_as_int(m) : -1);
            return true;
        }
        if (jstr_eq(name, "replace")) {
            const jv *a = ARG(0, NULL), *b = ARG(1, NULL), *k = ARG(2, "count");
            if (!a || !b) fx_jfail(c, FX_ERR_BAD_TEMPLATE, "replace() needs two "
                                "arguments");
            jstr from = need_str(c, a, "replace()"), to = need_str(c, b, "replace()");
            if (obj->tuple == JV_MARKUP) { /* Markup.replace escapes both */
                if (a->tuple != JV_MARKUP) from = fx_jmarkup_escape(c, from).u.s;
                if (b->tuple != JV_MARKUP) to = fx_jmarkup_escape(c, to).u.s;
            }
            *result = fx_jstr_replace(c, s, from, to,
                                      k && jv_is_intlike(k) ? jv_as_int(k) : -1);
            return true;
        }
        if (jstr_eq(name, "find")) {
            const jv *a = ARG(0, NULL);
            if (!a) fx_jfail(c, FX_ERR_BAD_TEMPLATE, "find() needs an argument");
            const char *at = find_sub(s, 0, need_str(c, a, "find()"));
            *result = fx_jv_int(at ? (int64_t)fx_jutf8_len(s.p, (size_t)(at - s.p)) : -1);
            return true;
        }
        if (jstr_eq(name, "count")) {
            const jv *a = ARG(0, NULL);
            if (!a) fx_jfail(c, FX_ERR_BAD_TEMPLATE, "count() needs an argument");
            jstr sub = need_str(c, a, "count()");
            int64_t k = 0;
            if (sub.n == 0) k = (int64_t)fx_jutf8_len(s.p, s.n) + 1;
            for (size_t i = 0; sub.n && i + sub.n <= s.n;) {
                const char *at = find_sub(s, i, sub);
                if (!at) break;
                k++;
                i = (size_t)(at - s.p) + sub.n;
            }
            *result = fx_jv_int(k);
            return true;
        }
        if (jstr_eq(name, "join")) {
            const jv *a = ARG(0, NULL);
            if (!a || a->t != JV_LIST)
                fx_jfail(c, FX_ERR_BAD_TEMPLATE, "join() needs a list");
            jout o = { 0 };
            for (size_t i = 0; i < a->u.l->n; i++) {
                if (i) fx_jout_put(c, &o, s.p, s.n);
                jstr e = need_str(c, &a->u.l->v[i], "join()");
                fx_jout_put(c, &o, e.p, e.n);
            }
            *result = fx_jmkstr(&o);
            return true;
        }
        return false;
    }
#undef ARG
}

bool fx_jmethod_other(jctx *c, const jv *obj, jstr name, const jv *args,
                      size_t n, const jstr *kwn, const jv *kwv, size_t nkw,
                      jv *result) {
#define ARG(i, nm) fx_jarg(args, n, (i), kwn, kwv, nkw, (nm))
    if (obj->t == JV_DICT && !obj->u.d->ns) {
        const jdict *d = obj->u.d;
        if (jstr_eq(name, "items")) { *result = fx_jdict_items(c, d); return true; }
        if (jstr_eq(name, "keys") || jstr_eq(name, "values")) {
            jv out = fx_jv_newlist(c, d->n);
            for (size_t i = 0; i < d->n; i++)
                fx_jlist_push(c, out.u.l, jstr_eq(name, "keys") ? d->k[i] : d->v[i]);
            *result = out;
            return true;
        }
        if (jstr_eq(name, "get")) {
            const jv *k = ARG(0, "key"), *dflt = ARG(1, "default");
            if (!k) fx_jfail(c, FX_ERR_BAD_TEMPLATE, "get() needs a key");
            const jv *v = fx_jdict_get(d, *k);
            *result = v ? *v : dflt ? *dflt : fx_jv_none();
            return true;
        }
        return false;
    }
    if (obj->t == JV_LOOP && jstr_eq(name, "cycle")) {
        if (n == 0) fx_jfail(c, FX_ERR_BAD_TEMPLATE, "no items for cycling given");
        *result = args[obj->u.loop->index0 % n];
        return true;
    }
    return false;
#undef ARG
}

/* ---- tests ---- */

bool fx_jtest(jctx *c, jstr name, const jv *v, const jv *args, size_t n) {
    const jv *a = n ? &args[0] : NULL;
    if (jstr_eq(name, "defined")) return v->t != JV_UNDEF;
    if (jstr_eq(name, "undefined")) return v->t == JV_UNDEF;
    if (jstr_eq(name, "none")) return v->t == JV_NONE;
    if (jstr_eq(name, "string")) return v->t == JV_STR;
    if (jstr_eq(name, "mapping")) return v->t == JV_DICT && !v->u.d->ns;
    if (jstr_eq(name, "iterable"))
        return v->t == JV_LIST || v->t == JV_STR || v->t == JV_UNDEF ||
               (v->t == JV_DICT && !v->u.d->ns);
    if (jstr_eq(name, "sequence"))
        return (v->t == JV_LIST && v->tuple != JV_GENERATOR) || v->t == JV_STR || v->t == JV_UNDEF ||
               (v->t == JV_DICT && !v->u.d->ns);
    if (jstr_eq(name, "number"))
        return v->t == JV_INT || v->t == JV_FLOAT || v->t == JV_BOOL;
    if (jstr_eq(name, "integer")) return v->t == JV_INT;
    if (jstr_eq(name, "float")) return v->t == JV_FLOAT;
    if (jstr_eq(name, "boolean")) return v->t == JV_BOOL;
    if (jstr_eq(name, "true")) return v->t == JV_BOOL && v->u.b;
    if (jstr_eq(name, "false")) return v->t == JV_BOOL && !v->u.b;
    if (jstr_eq(name, "callable")) return v->t == JV_MACRO || v->t == JV_FUNC;
    if (jstr_eq(name, "lower") || jstr_eq(name, "upper")) {
        if (v->t != JV_STR) return false;
        jv m = fx_jstr_case(c, v->u.s, jstr_eq(name, "lower") ? CASE_LOWER
                                                             : CASE_UPPER);
        return fx_jv_equal(&m, v);
    }
    if (jstr_eq(name, "odd") || jstr_eq(name, "even")) {
        /* value % 2 == 1 / == 0, as jinja2 computes them, floats too */
        double m;
        if (jv_is_intlike(v)) m = (double)(jv_as_int(v) % 2 != 0);
        else if (v->t == JV_FLOAT) m = v->u.f - 2.0 * floor(v->u.f / 2.0);
        else fx_jfail(c, FX_ERR_BAD_TEMPLATE, "%.*s needs a number",
                   (int)name.n, name.p);
        return jstr_eq(name, "odd") ? m == 1.0 : m == 0.0;
    }
    if (!a) fx_jfail(c, FX_ERR_BAD_TEMPLATE, "unknown test '%.*s' or it needs an "
                  "argument", (int)name.n, name.p);
    if (jstr_eq(name, "divisibleby")) {
        if (!jv_is_intlike(v) || !jv_is_intlike(a) || jv_as_int(a) == 0)
            fx_jfail(c, FX_ERR_BAD_TEMPLATE, "divisibleby needs nonzero ints");
        return jv_as_int(v) % jv_as_int(a) == 0;
    }
    if (jstr_eq(name, "equalto") || jstr_eq(name, "eq") || jstr_eq(name, "==") ||
        jstr_eq(name, "sameas"))
        return fx_jv_equal(v, a);
    if (jstr_eq(name, "ne") || jstr_eq(name, "!=")) return !fx_jv_equal(v, a);
    if (jstr_eq(name, "lt") || jstr_eq(name, "lessthan")) return fx_jv_compare(c, v, a) < 0;
    if (jstr_eq(name, "le")) return fx_jv_compare(c, v, a) <= 0;
    if (jstr_eq(name, "gt") || jstr_eq(name, "greaterthan")) return fx_jv_compare(c, v, a) > 0;
    if (jstr_eq(name, "ge")) return fx_jv_compare(c, v, a) >= 0;
    if (jstr_eq(name, "in")) {
        if (a->t == JV_STR && v->t == JV_STR)
            return find_sub(a->u.s, 0, v->u.s) != NULL;
        if (a->t == JV_LIST) {
            for (size_t i = 0; i < a->u.l->n; i++)
                if (fx_jv_equal(&a->u.l->v[i], v)) return true;
            return false;
        }
        if (a->t == JV_DICT) return fx_jdict_get(a->u.d, *v) != NULL;
        fx_jfail(c, FX_ERR_BAD_TEMPLATE, "'in' test on %s", fx_jv_typename(a));
    }
    fx_jfail(c, FX_ERR_BAD_TEMPLATE, "no test named '%.*s'", (int)name.n, name.p);
}

/* ---- globals ---- */

static void put_num(jctx *c, jout *o, int v, int width, bool pad) {
    char b[16];
    snprintf(b, sizeof b, pad ? "%0*d" : "%*d", pad ? width : 0, v);
    fx_jout_put(c, o, b, strlen(b));
}

/* datetime.strftime for the directives templates use, in the C locale's
 * English names, without depending on the process's locale. */
static jv strftime_now(jctx *c, jstr fmt) {
    static const char *const months[] = { "January", "February", "March",
        "April", "May", "June", "July", "August", "September", "October",
        "November", "December" };
    static const char *const days[] = { "Sunday", "Monday", "Tuesday",
        "Wednesday", "Thursday", "Friday", "Saturday" };
    time_t t = (time_t)c->now;
    struct tm tm;
    if (!gmtime_r(&t, &tm)) fx_jfail(c, FX_ERR_BAD_TEMPLATE, "bad clock value");
    jout o = { 0 };
    for (size_t i = 0; i < fmt.n; i++) {
        if (fmt.p[i] != '%' || i + 1 >= fmt.n) {
            fx_jout_put(c, &o, fmt.p + i, 1);
            continue;
        }
        char d = fmt.p[++i];
        bool pad = true;
        if (d == '-' && i + 1 < fmt.n) { pad = false; d = fmt.p[++i]; }
        switch (d) {
        case 'd': put_num(c, &o, tm.tm_mday, 2, pad); break;
        case 'm': put_num(c, &o, tm.tm_mon + 1, 2, pad); break;
        case 'Y': put_num(c, &o, tm.tm_year + 1900, 4, pad); break;
        case 'y': put_num(c, &o, tm.tm_year % 100, 2, pad); break;
        case 'H': put_num(c, &o, tm.tm_hour, 2, pad); break;
        case 'M': put_num(c, &o, tm.tm_min, 2, pad); break;
        case 'S': put_num(c, &o, tm.tm_sec, 2, pad); break;
        case 'j': put_num(c, &o, tm.tm_yday + 1, 3, pad); break;
        case 'b': fx_jout_put(c, &o, months[tm.tm_mon], 3); break;
        case 'B': fx_jout_put(c, &o, months[tm.tm_mon], strlen(months[tm.tm_mon])); break;
        case 'a': fx_jout_put(c, &o, days[tm.tm_wday], 3); break;
        case 'A': fx_jout_put(c, &o, days[tm.tm_wday], strlen(days[tm.tm_wday])); break;
        case '%': fx_jout_put(c, &o, "%", 1); break;
        default: fx_jout_put(c, &o, fmt.p + i - 1, 2); break;
        }
    }
    return fx_jmkstr(&o);
}

jv fx_jcall_builtin(jctx *c, int fn, const jv *args, size_t n, const jstr *kwn,
                 const jv *kwv, size_t nkw) {
    switch ((jfunc)fn) {
    case JF_RANGE: {
        int64_t start = 0, stop, step = 1;
        for (size_t i = 0; i < n; i++)
            if (!jv_is_intlike(&args[i]))
                fx_jfail(c, FX_ERR_BAD_TEMPLATE, "range() needs integers");
        if (n == 1) stop = jv_as_int(&args[0]);
        else if (n == 2 || n == 3) {
            start = jv_as_int(&args[0]);
            stop = jv_as_int(&args[1]);
            if (n == 3) step = jv_as_int(&args[2]);
        } else {
            fx_jfail(c, FX_ERR_BAD_TEMPLATE, "range() takes 1 to 3 arguments");
        }
        if (step == 0) fx_jfail(c, FX_ERR_BAD_TEMPLATE, "range() step is zero");
        double count = step > 0 ? ceil(((double)stop - (double)start) / (double)step)
                                : ceil(((double)start - (double)stop) / (double)-step);
        if (count > SANDBOX_MAX_RANGE)
            fx_jfail(c, FX_ERR_BAD_TEMPLATE, "range() of more than %d items "
                  "(the sandbox's limit)", SANDBOX_MAX_RANGE);
        jv out = fx_jv_newlist(c, count > 0 ? (size_t)count : 0);
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
            fx_jstep(c, 1);
            fx_jlist_push(c, out.u.l, fx_jv_int(i));
        }
        return out;
    }
    case JF_NAMESPACE: case JF_DICT: {
        jv d = fx_jv_newdict(c, nkw);
        d.u.d->ns = fn == JF_NAMESPACE;
        if (n == 1 && args[0].t == JV_DICT)
            for (size_t i = 0; i < args[0].u.d->n; i++)
                fx_jdict_set(c, d.u.d, args[0].u.d->k[i], args[0].u.d->v[i]);
        else if (n)
            fx_jfail(c, FX_ERR_BAD_TEMPLATE, "namespace()/dict() take keyword "
                  "arguments");
        for (size_t i = 0; i < nkw; i++)
            fx_jdict_set(c, d.u.d, fx_jv_str(kwn[i].p, kwn[i].n), kwv[i]);
        return d;
    }
    case JF_RAISE: {
        jstr m = n ? fx_jv_to_str(c, &args[0]) : (jstr){ "", 0 };
        fx_jfail(c, FX_ERR_BAD_TEMPLATE, "the template raised an exception: %.*s",
              (int)(m.n > 300 ? 300 : m.n), m.p);
    }
    case JF_STRFTIME:
        if (n != 1 || args[0].t != JV_STR)
            fx_jfail(c, FX_ERR_BAD_TEMPLATE, "strftime_now() takes a format "
                  "string");
        return strftime_now(c, args[0].u.s);
    default:
        fx_jfail(c, FX_ERR_BAD_TEMPLATE, "not callable");
    }
}
