/*
 * jinja filters: the jinja2 filters chat templates use, with jinja2's
 * argument names and its quirks (select/map give generators, `default`
 * replaces only undefined unless asked, dictsort and sort ignore case).
 */
#include "jinja_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>




/* ---- filters ---- */

static jv to_list(jctx *c, const jv *v) {
    if (v->t == JV_LIST && v->tuple != JV_GENERATOR) return *v;
    jv out = fx_jv_newlist(c, 0);
    if (v->t == JV_LIST) { /* a generator, materialized */
        for (size_t i = 0; i < v->u.l->n; i++) fx_jlist_push(c, out.u.l, v->u.l->v[i]);
        return out;
    }
    if (v->t == JV_UNDEF) return out;
    if (v->t == JV_DICT && !v->u.d->ns) {
        for (size_t i = 0; i < v->u.d->n; i++) fx_jlist_push(c, out.u.l, v->u.d->k[i]);
        return out;
    }
    if (v->t == JV_STR) {
        jstr s = v->u.s;
        for (size_t i = 0; i < s.n;) {
            size_t k = fx_jchar_len(s.p + i, s.n - i);
            fx_jlist_push(c, out.u.l, fx_jv_str(s.p + i, k));
            i += k;
        }
        return out;
    }
    fx_jfail(c, FX_ERR_BAD_TEMPLATE, "'%s' object is not iterable", fx_jv_typename(v));
}

/* An attribute path "a.b" or item index, as jinja2's make_attrgetter. */
static jv attr_path(jctx *c, const jv *item, jstr path) {
    jv cur = *item;
    size_t i = 0;
    while (i <= path.n) {
        size_t j = i;
        while (j < path.n && path.p[j] != '.') j++;
        jstr part = { path.p + i, j - i };
        if (cur.t == JV_UNDEF) return cur;
        bool digits = part.n > 0;
        for (size_t k = 0; k < part.n; k++)
            if (part.p[k] < '0' || part.p[k] > '9') digits = false;
        if (digits && cur.t == JV_LIST) {
            jv key = fx_jv_int(strtoll(part.p, NULL, 10));
            cur = fx_jgetitem(c, &cur, &key);
        } else {
            cur = fx_jgetattr(c, &cur, part);
        }
        i = j + 1;
    }
    return cur;
}

static int cmp_items(jctx *c, const jv *a, const jv *b, bool case_sensitive) {
    if (!case_sensitive && a->t == JV_STR && b->t == JV_STR) {
        jv x = fx_jstr_case(c, a->u.s, CASE_LOWER), y = fx_jstr_case(c, b->u.s, CASE_LOWER);
        return fx_jv_compare(c, &x, &y);
    }
    return fx_jv_compare(c, a, b);
}

/* A stable insertion sort over keys[]: template lists are short, and
 * every comparison counts against the step budget. */
static void sort_by(jctx *c, jv *vals, jv *keys, size_t n, bool reverse,
                    bool case_sensitive) {
    for (size_t i = 1; i < n; i++) {
        jv v = vals[i], k = keys[i];
        size_t j = i;
        while (j > 0) {
            fx_jstep(c, 1);
            int r = cmp_items(c, &keys[j - 1], &k, case_sensitive);
            if (reverse ? r >= 0 : r <= 0) break;
            vals[j] = vals[j - 1];
            keys[j] = keys[j - 1];
            j--;
        }
        vals[j] = v;
        keys[j] = k;
    }
}

static jv select_items(jctx *c, const jv *v, const jv *args, size_t n,
                       bool by_attr, bool keep) {
    jv out = fx_jv_newlist(c, 0);
    out.tuple = JV_GENERATOR;
    if (!fx_jv_truthy(v)) return out; /* jinja2: `if seq:` */
    jv src = to_list(c, v);
    size_t first = by_attr ? 1 : 0;
    if (by_attr && (n < 1 || args[0].t != JV_STR))
        fx_jfail(c, FX_ERR_BAD_TEMPLATE, "selectattr/rejectattr need an "
              "attribute name");
    for (size_t i = 0; i < src.u.l->n; i++) {
        fx_jstep(c, 1);
        jv item = by_attr ? attr_path(c, &src.u.l->v[i], args[0].u.s)
                          : src.u.l->v[i];
        bool ok;
        if (n > first) {
            if (args[first].t != JV_STR)
                fx_jfail(c, FX_ERR_BAD_TEMPLATE, "a test name must be a string");
            ok = fx_jtest(c, args[first].u.s, &item, args + first + 1,
                       n - first - 1);
        } else {
            ok = fx_jv_truthy(&item);
        }
        if (ok == keep) fx_jlist_push(c, out.u.l, src.u.l->v[i]);
    }
    return out;
}

jv fx_jfilter(jctx *c, jscope *sc, jstr name, const jv *v, const jv *args,
           size_t n, const jstr *kwn, const jv *kwv, size_t nkw) {
#define ARG(i, nm) fx_jarg(args, n, (i), kwn, kwv, nkw, (nm))
    fx_jstep(c, 1);
    if (jstr_eq(name, "default") || jstr_eq(name, "d")) {
        const jv *dflt = ARG(0, "default_value"), *b = ARG(1, "boolean");
        bool use = v->t == JV_UNDEF || (b && fx_jv_truthy(b) && !fx_jv_truthy(v));
        if (!use) return *v;
        return dflt ? *dflt : fx_jv_str("", 0);
    }
    if (jstr_eq(name, "safe")) {
        jstr t = fx_jv_to_str(c, v);
        jv m = fx_jv_str(t.p, t.n);
        m.tuple = JV_MARKUP;
        return m;
    }
    if (jstr_eq(name, "string")) {
        if (v->t == JV_STR) return *v; /* a Markup stays one */
        jstr s = fx_jv_to_str(c, v);
        return fx_jv_str(s.p, s.n);
    }
    if (jstr_eq(name, "length") || jstr_eq(name, "count")) {
        switch (v->t) {
        case JV_STR: return fx_jv_int((int64_t)fx_jutf8_len(v->u.s.p, v->u.s.n));
        case JV_LIST:
            if (v->tuple == JV_GENERATOR) break;
            return fx_jv_int((int64_t)v->u.l->n);
        case JV_DICT: return fx_jv_int((int64_t)v->u.d->n);
        case JV_UNDEF: return fx_jv_int(0);
        default:
            break;
        }
        fx_jfail(c, FX_ERR_BAD_TEMPLATE, "object of type '%s' has no len()",
              fx_jv_typename(v));
    }
    if (jstr_eq(name, "tojson")) {
        const jv *ind = ARG(0, "indent"), *sk = fx_jkwarg(kwn, kwv, nkw, "sort_keys");
        int indent = -1;
        if (ind && ind->t != JV_NONE) {
            if (!jv_is_intlike(ind) || jv_as_int(ind) < 0 || jv_as_int(ind) > 64)
                fx_jfail(c, FX_ERR_BAD_TEMPLATE, "tojson indent must be 0..64");
            indent = (int)jv_as_int(ind);
        }
        jout o = { 0 };
        const jv *ea = fx_jkwarg(kwn, kwv, nkw, "ensure_ascii");
        c->json_ascii = ea && fx_jv_truthy(ea);
        fx_jv_tojson(c, &o, v, indent, 0, sk && fx_jv_truthy(sk));
        c->json_ascii = false;
        return fx_jmkstr(&o);
    }
    if (jstr_eq(name, "list")) return to_list(c, v);
    if (jstr_eq(name, "items")) {
        if (v->t == JV_UNDEF) return fx_jv_newlist(c, 0);
        if (v->t != JV_DICT || v->u.d->ns)
            fx_jfail(c, FX_ERR_BAD_TEMPLATE, "items expects a mapping, not %s",
                  fx_jv_typename(v));
        return fx_jdict_items(c, v->u.d);
    }
    if (jstr_eq(name, "dictsort")) {
        if (v->t != JV_DICT || v->u.d->ns)
            fx_jfail(c, FX_ERR_BAD_TEMPLATE, "dictsort expects a mapping");
        const jv *cs = ARG(0, "case_sensitive"), *by = ARG(1, "by"),
                 *rev = ARG(2, "reverse");
        jv items = fx_jdict_items(c, v->u.d);
        size_t m = items.u.l->n;
        jv *keys = fx_jalloc(c, (m ? m : 1) * sizeof(jv));
        bool by_value = by && by->t == JV_STR && jstr_eq(by->u.s, "value");
        for (size_t i = 0; i < m; i++) keys[i] = items.u.l->v[i].u.l->v[by_value];
        sort_by(c, items.u.l->v, keys, m, rev && fx_jv_truthy(rev), cs && fx_jv_truthy(cs));
        return items;
    }
    if (jstr_eq(name, "sort")) {
        const jv *rev = ARG(0, "reverse"), *cs = ARG(1, "case_sensitive"),
                 *at = ARG(2, "attribute");
        jv src = to_list(c, v);
        jv out = fx_jv_newlist(c, src.u.l->n);
        size_t m = src.u.l->n;
        jv *keys = fx_jalloc(c, (m ? m : 1) * sizeof(jv));
        for (size_t i = 0; i < m; i++) {
            fx_jlist_push(c, out.u.l, src.u.l->v[i]);
            keys[i] = at && at->t == JV_STR ? attr_path(c, &src.u.l->v[i], at->u.s)
                                            : src.u.l->v[i];
        }
        sort_by(c, out.u.l->v, keys, m, rev && fx_jv_truthy(rev), cs && fx_jv_truthy(cs));
        return out;
    }
    if (jstr_eq(name, "reverse")) {
        if (v->t == JV_STR) {
            jout o = { 0 };
            for (size_t e = v->u.s.n; e > 0;) {
                size_t b = e - 1;
                while (b > 0 && ((unsigned char)v->u.s.p[b] & 0xc0) == 0x80) b--;
                fx_jout_put(c, &o, v->u.s.p + b, e - b);
                e = b;
            }
            return fx_jmkstr(&o);
        }
        jv src = to_list(c, v);
        jv out = fx_jv_newlist(c, src.u.l->n);
        for (size_t i = src.u.l->n; i-- > 0;) fx_jlist_push(c, out.u.l, src.u.l->v[i]);
        return out;
    }
    if (jstr_eq(name, "unique")) {
        jv src = to_list(c, v);
        jv out = fx_jv_newlist(c, 0);
        out.tuple = JV_GENERATOR;
        for (size_t i = 0; i < src.u.l->n; i++) {
            bool seen = false;
            fx_jstep(c, out.u.l->n / 8);
            for (size_t j = 0; j < out.u.l->n && !seen; j++)
                seen = cmp_items(c, &out.u.l->v[j], &src.u.l->v[i], false) == 0;
            if (!seen) fx_jlist_push(c, out.u.l, src.u.l->v[i]);
        }
        return out;
    }
    if (jstr_eq(name, "first") || jstr_eq(name, "last")) {
        jv src = to_list(c, v);
        if (src.u.l->n == 0) return fx_jv_undef((jstr){ "", 0 });
        return src.u.l->v[jstr_eq(name, "first") ? 0 : src.u.l->n - 1];
    }
    if (jstr_eq(name, "join")) {
        const jv *sep = ARG(0, "d"), *at = ARG(1, "attribute");
        jstr d = sep ? fx_jv_to_str(c, sep) : (jstr){ "", 0 };
        jv src = to_list(c, v);
        jout o = { 0 };
        for (size_t i = 0; i < src.u.l->n; i++) {
            if (i) fx_jout_put(c, &o, d.p, d.n);
            jv item = at && at->t == JV_STR ? attr_path(c, &src.u.l->v[i], at->u.s)
                                            : src.u.l->v[i];
            jstr s = fx_jv_to_str(c, &item);
            fx_jout_put(c, &o, s.p, s.n);
        }
        return fx_jmkstr(&o);
    }
    if (jstr_eq(name, "map")) {
        jv out = fx_jv_newlist(c, 0);
        out.tuple = JV_GENERATOR;
        if (!fx_jv_truthy(v)) return out; /* jinja2: `if seq:` */
        jv src = to_list(c, v);
        const jv *at = fx_jkwarg(kwn, kwv, nkw, "attribute");
        const jv *dflt = fx_jkwarg(kwn, kwv, nkw, "default");
        if (!at && (n < 1 || args[0].t != JV_STR))
            fx_jfail(c, FX_ERR_BAD_TEMPLATE, "map needs a filter name or "
                  "attribute=");
        for (size_t i = 0; i < src.u.l->n; i++) {
            jv r;
            if (at) {
                if (at->t != JV_STR)
                    fx_jfail(c, FX_ERR_BAD_TEMPLATE, "map attribute must be a string");
                r = attr_path(c, &src.u.l->v[i], at->u.s);
                if (r.t == JV_UNDEF && dflt) r = *dflt;
            } else {
                r = fx_jfilter(c, sc, args[0].u.s, &src.u.l->v[i], args + 1,
                            n - 1, NULL, NULL, 0);
            }
            fx_jlist_push(c, out.u.l, r);
        }
        return out;
    }
    if (jstr_eq(name, "selectattr") || jstr_eq(name, "rejectattr"))
        return select_items(c, v, args, n, true, jstr_eq(name, "selectattr"));
    if (jstr_eq(name, "select") || jstr_eq(name, "reject"))
        return select_items(c, v, args, n, false, jstr_eq(name, "select"));
    if (jstr_eq(name, "abs")) {
        if (v->t == JV_FLOAT) return fx_jv_float(fabs(v->u.f));
        if (!jv_is_intlike(v) || jv_as_int(v) == INT64_MIN)
            fx_jfail(c, FX_ERR_BAD_TEMPLATE, "bad operand for abs()");
        return fx_jv_int(jv_as_int(v) < 0 ? -jv_as_int(v) : jv_as_int(v));
    }
    if (jstr_eq(name, "int")) {
        const jv *dflt = ARG(0, "default");
        if (jv_is_intlike(v)) return fx_jv_int(jv_as_int(v));
        if (v->t == JV_FLOAT && isfinite(v->u.f) && fabs(v->u.f) < 9.2e18)
            return fx_jv_int((int64_t)v->u.f);
        if (v->t == JV_STR) {
            char buf[64];
            jv s = fx_jstr_strip(c, v->u.s, NULL, true, true);
            if (s.u.s.n > 0 && s.u.s.n < sizeof buf) {
                memcpy(buf, s.u.s.p, s.u.s.n);
                buf[s.u.s.n] = '\0';
                char *end;
                long long x = strtoll(buf, &end, 10);
                if (*end == '\0') return fx_jv_int(x);
                double f = strtod(buf, &end);
                if (*end == '\0' && isfinite(f) && fabs(f) < 9.2e18)
                    return fx_jv_int((int64_t)f);
            }
        }
        return dflt ? *dflt : fx_jv_int(0);
    }
    if (jstr_eq(name, "float")) {
        if (v->t == JV_FLOAT) return *v;
        if (jv_is_intlike(v)) return fx_jv_float((double)jv_as_int(v));
        if (v->t == JV_STR) {
            char buf[64];
            jv s = fx_jstr_strip(c, v->u.s, NULL, true, true);
            if (s.u.s.n > 0 && s.u.s.n < sizeof buf) {
                memcpy(buf, s.u.s.p, s.u.s.n);
                buf[s.u.s.n] = '\0';
                char *end;
                double f = strtod(buf, &end);
                if (*end == '\0') return fx_jv_float(f);
            }
        }
        const jv *dflt = ARG(0, "default");
        return dflt ? *dflt : fx_jv_float(0.0);
    }
    /* The rest work on the text of the value. */
    jstr s = fx_jv_to_str(c, v);
    /* These keep a Markup a Markup, as str methods on it do. */
    uint8_t markup = v->t == JV_STR ? (v->tuple == JV_MARKUP ? JV_MARKUP : 0) : 0;
    jv r;
    bool cased = true;
    if (jstr_eq(name, "trim")) r = fx_jstr_strip(c, s, ARG(0, "chars"), true, true);
    else if (jstr_eq(name, "upper")) r = fx_jstr_case(c, s, CASE_UPPER);
    else if (jstr_eq(name, "lower")) r = fx_jstr_case(c, s, CASE_LOWER);
    else if (jstr_eq(name, "title")) r = fx_jstr_case(c, s, CASE_TITLE);
    else if (jstr_eq(name, "capitalize")) r = fx_jstr_case(c, s, CASE_CAPITALIZE);
    else cased = false;
    if (cased) {
        r.tuple = markup;
        return r;
    }
    if (jstr_eq(name, "replace")) {
        const jv *a = ARG(0, "old"), *b = ARG(1, "new"), *k = ARG(2, "count");
        if (!a || !b) fx_jfail(c, FX_ERR_BAD_TEMPLATE, "replace needs two arguments");
        jstr x = fx_jv_to_str(c, a), y = fx_jv_to_str(c, b);
        return fx_jstr_replace(c, s, x, y, k && jv_is_intlike(k) ? jv_as_int(k) : -1);
    }
    if (jstr_eq(name, "indent")) {
        const jv *w = ARG(0, "width"), *f = ARG(1, "first"), *bl = ARG(2, "blank");
        jstr pad = { "    ", 4 };
        jout padbuf = { 0 };
        if (w && jv_is_intlike(w)) {
            if (jv_as_int(w) < 0 || jv_as_int(w) > 256)
                fx_jfail(c, FX_ERR_BAD_TEMPLATE, "indent width must be 0..256");
            for (int64_t i = 0; i < jv_as_int(w); i++) fx_jout_put(c, &padbuf, " ", 1);
            pad = fx_jout_str(&padbuf);
        } else if (w && w->t == JV_STR) {
            pad = w->u.s;
        }
        /* jinja2 appends "\n" and splits into lines: a trailing newline
         * stays, and blank lines get no indent unless `blank`. */
        jout o = { 0 };
        size_t i = 0, line = 0;
        while (i <= s.n) {
            size_t j = i;
            while (j < s.n && s.p[j] != '\n') j++;
            if (line > 0) fx_jout_put(c, &o, "\n", 1);
            if (line > 0 && (j > i || (bl && fx_jv_truthy(bl))))
                fx_jout_put(c, &o, pad.p, pad.n);
            fx_jout_put(c, &o, s.p + i, j - i);
            line++;
            i = j + 1;
        }
        if (f && fx_jv_truthy(f)) {
            jout o2 = { 0 };
            fx_jout_put(c, &o2, pad.p, pad.n);
            fx_jout_put(c, &o2, o.p, o.n);
            return fx_jmkstr(&o2);
        }
        return fx_jmkstr(&o);
    }
    if (jstr_eq(name, "escape") || jstr_eq(name, "e")) {
        if (v->t == JV_STR && v->tuple == JV_MARKUP) return *v;
        return fx_jmarkup_escape(c, s);
    }
    if (jstr_eq(name, "wordcount")) {
        jv words = fx_jstr_split(c, s, NULL, -1);
        return fx_jv_int((int64_t)words.u.l->n);
    }
    fx_jfail(c, FX_ERR_BAD_TEMPLATE, "no filter named '%.*s'", (int)name.n,
          name.p);
#undef ARG
}


jv fx_jmarkup_escape(jctx *c, jstr s) {
    jout o = { 0 };
    size_t from = 0;
    for (size_t i = 0; i < s.n; i++) {
        const char *r = NULL;
        switch (s.p[i]) {
        case '&': r = "&amp;"; break;
        case '<': r = "&lt;"; break;
        case '>': r = "&gt;"; break;
        case '"': r = "&#34;"; break;
        case '\'': r = "&#39;"; break;
        default: break;
        }
        if (!r) continue;
        fx_jout_put(c, &o, s.p + from, i - from);
        fx_jout_put(c, &o, r, strlen(r));
        from = i + 1;
    }
    fx_jout_put(c, &o, s.p + from, s.n - from);
    jv m = fx_jmkstr(&o);
    m.tuple = JV_MARKUP;
    return m;
}
