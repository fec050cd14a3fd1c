/*
 * jinja values: the render arena, value constructors, containers,
 * comparisons and Python's str()/repr() forms. JSON is in jinja_json.c.
 */
#include "jinja_int.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- errors and budgets ---- */

/* Records the failure and unwinds to the render's setjmp. The message is
 * formatted (and the va_list ended) by the caller first: nothing is left
 * open when longjmp leaves. */
static _Noreturn void jump(jctx *c, fx_status st, uint32_t line, uint32_t col,
                           const char *msg) {
    if (line)
        fx_fail(c->err, st, "chat template, line %u column %u: %s",
                (unsigned)line, (unsigned)col, msg);
    else
        fx_fail(c->err, st, "chat template: %s", msg);
    c->status = st;
    longjmp(c->fail, 1);
}

_Noreturn void fx_jfail(jctx *c, fx_status st, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    jump(c, st, c->at ? c->at->line : 0, c->at ? c->at->col : 0, msg);
}

_Noreturn void fx_jfail_at(jctx *c, uint32_t line, uint32_t col,
                        const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    jump(c, FX_ERR_BAD_TEMPLATE, line, col, msg);
}

void fx_jstep(jctx *c, uint64_t n) {
    c->steps += n;
    if (c->steps > c->lim->max_steps)
        fx_jfail(c, FX_ERR_BAD_TEMPLATE, "the template ran past its budget of "
              "%llu steps (an endless or huge loop?)",
              (unsigned long long)c->lim->max_steps);
}

/* ---- arena ---- */

#define CHUNK_MIN ((size_t)64 * 1024)
#define ALIGN_UP(x) (((x) + (sizeof(max_align_t) - 1)) & \
                     ~(sizeof(max_align_t) - 1))

void *fx_jalloc(jctx *c, size_t size) {
    jarena *a = &c->arena;
    size = ALIGN_UP(size ? size : 1);
    if (size == 0) fx_jfail(c, FX_ERR_TOO_LARGE, "an allocation overflows");
    jchunk *h = a->head;
    if (h && h->size - h->used >= size) {
        void *p = (char *)h + ALIGN_UP(sizeof *h) + h->used;
        h->used += size;
        return p;
    }
    size_t body = size > CHUNK_MIN ? size : CHUNK_MIN;
    size_t whole = ALIGN_UP(sizeof *h) + body;
    if (whole < body || body > a->cap || a->total > a->cap - whole)
        fx_jfail(c, FX_ERR_TOO_LARGE, "the template needs more than its memory "
              "cap of %zu bytes", a->cap);
    jchunk *n = fx_malloc(a->alloc, whole);
    if (!n) fx_jfail(c, FX_ERR_NOMEM, "out of memory (%zu bytes)", whole);
    a->total += whole;
    n->size = body;
    n->used = size;
    /* A big block gets its own chunk behind the head, so the head's free
     * room stays usable for small ones. */
    if (h && body == size && h->size - h->used > CHUNK_MIN / 8) {
        n->next = h->next;
        h->next = n;
    } else {
        n->next = h;
        a->head = n;
    }
    return (char *)n + ALIGN_UP(sizeof *n);
}

void fx_jarena_free(jarena *a) {
    jchunk *h = a->head;
    while (h) {
        jchunk *next = h->next;
        fx_free(a->alloc, h);
        h = next;
    }
    a->head = NULL;
    a->total = 0;
}

char *fx_jstrdup(jctx *c, const char *p, size_t n) {
    if (n == SIZE_MAX) fx_jfail(c, FX_ERR_TOO_LARGE, "a string overflows");
    char *s = fx_jalloc(c, n + 1);
    if (n) memcpy(s, p, n);
    s[n] = '\0';
    return s;
}

/* ---- output buffers ---- */

void fx_jout_put(jctx *c, jout *o, const char *p, size_t n) {
    if (n == 0) return;
    if (o == c->out && (n > c->lim->max_output ||
                        o->n > c->lim->max_output - n))
        fx_jfail(c, FX_ERR_TOO_LARGE, "the rendered text exceeds its cap of "
              "%zu bytes", c->lim->max_output);
    if (n > c->arena.cap || o->n > c->arena.cap - n)
        fx_jfail(c, FX_ERR_TOO_LARGE, "a string exceeds the memory cap of %zu "
              "bytes", c->arena.cap);
    fx_jstep(c, n / 64);
    if (o->n + n > o->cap) {
        size_t cap = o->cap ? o->cap : 64;
        while (cap < o->n + n) cap = cap > SIZE_MAX / 2 ? o->n + n : cap * 2;
        char *q = fx_jalloc(c, cap);
        if (o->n) memcpy(q, o->p, o->n);
        o->p = q;
        o->cap = cap;
    }
    memcpy(o->p + o->n, p, n);
    o->n += n;
}

jstr fx_jout_str(const jout *o) {
    jstr s = { o->p ? o->p : "", o->n };
    return s;
}

static void put_s(jctx *c, jout *o, const char *s) {
    fx_jout_put(c, o, s, strlen(s));
}

/* ---- constructors and containers ---- */

jv fx_jv_undef(jstr name) { jv v = { .t = JV_UNDEF }; v.u.s = name; return v; }
jv fx_jv_none(void) { jv v = { .t = JV_NONE }; return v; }
jv fx_jv_bool(bool b) { jv v = { .t = JV_BOOL }; v.u.b = b; return v; }
jv fx_jv_int(int64_t i) { jv v = { .t = JV_INT }; v.u.i = i; return v; }
jv fx_jv_float(double f) { jv v = { .t = JV_FLOAT }; v.u.f = f; return v; }

jv fx_jv_str(const char *p, size_t n) {
    jv v = { .t = JV_STR };
    v.u.s.p = p ? p : "";
    v.u.s.n = n;
    return v;
}

jv fx_jv_cstr(const char *s) { return fx_jv_str(s, strlen(s)); }

jv fx_jv_newlist(jctx *c, size_t cap) {
    jlist *l = fx_jalloc(c, sizeof *l);
    l->n = 0;
    l->depth = 0;
    l->cap = cap;
    if (cap > SIZE_MAX / sizeof(jv)) fx_jfail(c, FX_ERR_TOO_LARGE, "list size");
    l->v = cap ? fx_jalloc(c, cap * sizeof(jv)) : NULL;
    jv v = { .t = JV_LIST };
    v.u.l = l;
    return v;
}

jv fx_jv_newdict(jctx *c, size_t cap) {
    jdict *d = fx_jalloc(c, sizeof *d);
    d->n = 0;
    d->depth = 0;
    d->cap = cap;
    d->ns = false;
    if (cap > SIZE_MAX / sizeof(jv)) fx_jfail(c, FX_ERR_TOO_LARGE, "dict size");
    d->k = cap ? fx_jalloc(c, cap * sizeof(jv)) : NULL;
    d->v = cap ? fx_jalloc(c, cap * sizeof(jv)) : NULL;
    jv v = { .t = JV_DICT };
    v.u.d = d;
    return v;
}

/* A container holding v nests one deeper than v. Namespaces are
 * compared by identity and print through the depth-checked repr, so a
 * namespace that holds itself is no danger and counts as flat. */
static uint32_t nesting(jctx *c, const jv *v) {
    uint32_t d = 0;
    if (v->t == JV_LIST) d = v->u.l->depth;
    else if (v->t == JV_DICT && !v->u.d->ns) d = v->u.d->depth;
    if (d + 1 > JV_MAX_NESTING)
        fx_jfail(c, FX_ERR_BAD_TEMPLATE, "values nested more than %d deep",
              JV_MAX_NESTING);
    return d + 1;
}

static size_t grow_cap(jctx *c, size_t cap) {
    if (cap > SIZE_MAX / 2 / sizeof(jv)) fx_jfail(c, FX_ERR_TOO_LARGE, "grow");
    return cap ? cap * 2 : 4;
}

void fx_jlist_push(jctx *c, jlist *l, jv v) {
    uint32_t d = nesting(c, &v);
    if (d > l->depth) l->depth = d;
    if (l->n == l->cap) {
        size_t cap = grow_cap(c, l->cap);
        jv *nv = fx_jalloc(c, cap * sizeof(jv));
        if (l->n) memcpy(nv, l->v, l->n * sizeof(jv));
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
}

const jv *fx_jdict_get(const jdict *d, jv k) {
    for (size_t i = 0; i < d->n; i++)
        if (fx_jv_equal(&d->k[i], &k)) return &d->v[i];
    return NULL;
}

const jv *fx_jdict_gets(const jdict *d, const char *key, size_t n) {
    return fx_jdict_get(d, fx_jv_str(key, n));
}

void fx_jdict_set(jctx *c, jdict *d, jv k, jv v) {
    fx_jstep(c, d->n / 16);
    uint32_t depth = nesting(c, &v), kd = nesting(c, &k);
    if (kd > depth) depth = kd;
    if (depth > d->depth) d->depth = depth;
    for (size_t i = 0; i < d->n; i++) {
        if (fx_jv_equal(&d->k[i], &k)) {
            d->v[i] = v;
            return;
        }
    }
    if (d->n == d->cap) {
        size_t cap = grow_cap(c, d->cap);
        jv *nk = fx_jalloc(c, cap * sizeof(jv)), *nv = fx_jalloc(c, cap * sizeof(jv));
        if (d->n) {
            memcpy(nk, d->k, d->n * sizeof(jv));
            memcpy(nv, d->v, d->n * sizeof(jv));
        }
        d->k = nk;
        d->v = nv;
        d->cap = cap;
    }
    d->k[d->n] = k;
    d->v[d->n] = v;
    d->n++;
}

/* ---- truth, equality, order ---- */

bool fx_jv_truthy(const jv *v) {
    switch (v->t) {
    case JV_BOOL: return v->u.b;
    case JV_INT: return v->u.i != 0;
    case JV_FLOAT: return v->u.f != 0.0;
    case JV_STR: return v->u.s.n != 0;
    case JV_LIST: return v->tuple == JV_GENERATOR || v->u.l->n != 0;
    case JV_DICT: return v->u.d->ns || v->u.d->n != 0;
    case JV_MACRO: case JV_FUNC: case JV_LOOP: return true;
    default: return false; /* undefined, none */
    }
}

static bool is_num(const jv *v) {
    return v->t == JV_INT || v->t == JV_FLOAT || v->t == JV_BOOL;
}

static double num(const jv *v) {
    return v->t == JV_FLOAT ? v->u.f : v->t == JV_INT ? (double)v->u.i
                                                      : (double)v->u.b;
}

bool fx_jv_equal(const jv *a, const jv *b) {
    if (is_num(a) && is_num(b)) {
        if (a->t != JV_FLOAT && b->t != JV_FLOAT) {
            int64_t x = a->t == JV_INT ? a->u.i : a->u.b;
            int64_t y = b->t == JV_INT ? b->u.i : b->u.b;
            return x == y;
        }
        return num(a) == num(b);
    }
    if (a->t != b->t) return false;
    switch (a->t) {
    case JV_UNDEF: case JV_NONE: return true;
    case JV_STR:
        return a->u.s.n == b->u.s.n &&
               (a->u.s.n == 0 || memcmp(a->u.s.p, b->u.s.p, a->u.s.n) == 0);
    case JV_LIST:
        /* A tuple never equals a list in Python. */
        if ((a->tuple == JV_TUPLE) != (b->tuple == JV_TUPLE)) return false;
        if (a->u.l->n != b->u.l->n) return false;
        for (size_t i = 0; i < a->u.l->n; i++)
            if (!fx_jv_equal(&a->u.l->v[i], &b->u.l->v[i])) return false;
        return true;
    case JV_DICT:
        if (a->u.d == b->u.d) return true;
        if (a->u.d->n != b->u.d->n || a->u.d->ns || b->u.d->ns) return false;
        for (size_t i = 0; i < a->u.d->n; i++) {
            const jv *o = fx_jdict_get(b->u.d, a->u.d->k[i]);
            if (!o || !fx_jv_equal(&a->u.d->v[i], o)) return false;
        }
        return true;
    case JV_MACRO: return a->u.m == b->u.m;
    case JV_FUNC: return a->u.fn == b->u.fn;
    default: return a->u.loop == b->u.loop;
    }
}

int fx_jv_compare(jctx *c, const jv *a, const jv *b) {
    if (is_num(a) && is_num(b)) {
        if (a->t == JV_INT && b->t == JV_INT)
            return a->u.i < b->u.i ? -1 : a->u.i > b->u.i;
        double x = num(a), y = num(b);
        return x < y ? -1 : x > y;
    }
    if (a->t == JV_STR && b->t == JV_STR) {
        size_t n = a->u.s.n < b->u.s.n ? a->u.s.n : b->u.s.n;
        int r = n ? memcmp(a->u.s.p, b->u.s.p, n) : 0;
        if (r) return r < 0 ? -1 : 1;
        return a->u.s.n < b->u.s.n ? -1 : a->u.s.n > b->u.s.n;
    }
    if (a->t == JV_LIST && b->t == JV_LIST) {
        size_t n = a->u.l->n < b->u.l->n ? a->u.l->n : b->u.l->n;
        for (size_t i = 0; i < n; i++) {
            int r = fx_jv_compare(c, &a->u.l->v[i], &b->u.l->v[i]);
            if (r) return r;
        }
        return a->u.l->n < b->u.l->n ? -1 : a->u.l->n > b->u.l->n;
    }
    fx_jfail(c, FX_ERR_BAD_TEMPLATE, "'<' not supported between instances of "
          "'%s' and '%s'", fx_jv_typename(a), fx_jv_typename(b));
}

const char *fx_jv_typename(const jv *v) {
    static const char *const names[] = { "Undefined", "NoneType", "bool",
        "int", "float", "str", "list", "dict", "Macro", "function",
        "LoopContext" };
    if (v->t == JV_LIST && v->tuple == JV_TUPLE) return "tuple";
    if (v->t == JV_LIST && v->tuple == JV_GENERATOR) return "generator";
    if (v->t == JV_DICT && v->u.d->ns) return "Namespace";
    return names[v->t];
}

/* ---- text forms ---- */

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static void emit(char **o, size_t *room, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(*o, *room, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    size_t n = (size_t)k < *room ? (size_t)k : (*room ? *room - 1 : 0);
    *o += n;
    *room -= n;
}

/* Python's float repr: the shortest digits that read back the same,
 * positional for exponents -4..15, else d.ddde+XX. */
void fx_jfmt_float(char *buf, size_t size, double f) {
    if (isnan(f)) { snprintf(buf, size, "nan"); return; }
    if (isinf(f)) { snprintf(buf, size, f < 0 ? "-inf" : "inf"); return; }
    char e[40];
    int prec = 1;
    for (; prec <= 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec - 1, f);
        if (strtod(e, NULL) == f) break;
    }
    /* e is [-]d[.ddd]e[+-]XX: split into digits and exponent. */
    char digits[24];
    size_t nd = 0;
    const char *p = e;
    bool neg = *p == '-';
    if (neg) p++;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    int exp10 = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = '\0';
    char *o = buf;
    size_t room = size;
#define EMIT(...) emit(&o, &room, __VA_ARGS__)
    if (neg) EMIT("-");
    if (exp10 >= 16 || exp10 < -4) {
        EMIT("%c", digits[0]);
        if (nd > 1) EMIT(".%s", digits + 1);
        EMIT("e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    } else if (exp10 < 0) {
        EMIT("0.");
        for (int i = -1; i > exp10; i--) EMIT("0");
        EMIT("%s", digits);
    } else {
        for (int i = 0; i <= exp10; i++)
            EMIT("%c", (size_t)i < nd ? digits[i] : '0');
        EMIT(".");
        if ((size_t)exp10 + 1 < nd) EMIT("%s", digits + exp10 + 1);
        else EMIT("0");
    }
#undef EMIT
}

static void repr_str(jctx *c, jout *o, jstr s) {
    bool sq = memchr(s.p, '\'', s.n) != NULL, dq = memchr(s.p, '"', s.n) != NULL;
    char q = (sq && !dq) ? '"' : '\'';
    fx_jout_put(c, o, &q, 1);
    size_t from = 0;
    for (size_t i = 0; i < s.n; i++) {
        unsigned char ch = (unsigned char)s.p[i];
        char esc[8];
        const char *e = NULL;
        if (ch == '\\') e = "\\\\";
        else if (ch == (unsigned char)q) e = q == '\'' ? "\\'" : "\\\"";
        else if (ch == '\n') e = "\\n";
        else if (ch == '\r') e = "\\r";
        else if (ch == '\t') e = "\\t";
        else if (ch < 0x20 || ch == 0x7f) {
            snprintf(esc, sizeof esc, "\\x%02x", ch);
            e = esc;
        }
        if (!e) continue;
        fx_jout_put(c, o, s.p + from, i - from);
        put_s(c, o, e);
        from = i + 1;
    }
    fx_jout_put(c, o, s.p + from, s.n - from);
    fx_jout_put(c, o, &q, 1);
}

void fx_jv_repr(jctx *c, jout *o, const jv *v) {
    fx_jstep(c, 1);
    if (v->t == JV_STR) {
        repr_str(c, o, v->u.s);
    } else if (v->t == JV_LIST) {
        if (++c->depth > c->lim->max_depth)
            fx_jfail(c, FX_ERR_BAD_TEMPLATE, "values nested too deeply");
        put_s(c, o, v->tuple == JV_TUPLE ? "(" : "[");
        for (size_t i = 0; i < v->u.l->n; i++) {
            if (i) put_s(c, o, ", ");
            fx_jv_repr(c, o, &v->u.l->v[i]);
        }
        if (v->tuple == JV_TUPLE && v->u.l->n == 1) put_s(c, o, ",");
        put_s(c, o, v->tuple == JV_TUPLE ? ")" : "]");
        c->depth--;
    } else if (v->t == JV_DICT && !v->u.d->ns) {
        if (++c->depth > c->lim->max_depth)
            fx_jfail(c, FX_ERR_BAD_TEMPLATE, "values nested too deeply");
        put_s(c, o, "{");
        for (size_t i = 0; i < v->u.d->n; i++) {
            if (i) put_s(c, o, ", ");
            fx_jv_repr(c, o, &v->u.d->k[i]);
            put_s(c, o, ": ");
            fx_jv_repr(c, o, &v->u.d->v[i]);
        }
        put_s(c, o, "}");
        c->depth--;
    } else {
        jstr s = fx_jv_to_str(c, v);
        fx_jout_put(c, o, s.p, s.n);
    }
}

jstr fx_jv_to_str(jctx *c, const jv *v) {
    char buf[64];
    switch (v->t) {
    case JV_STR: return v->u.s;
    case JV_UNDEF: { jstr s = { "", 0 }; return s; }
    case JV_NONE: { jstr s = { "None", 4 }; return s; }
    case JV_BOOL: {
        jstr s = { v->u.b ? "True" : "False", v->u.b ? 4u : 5u };
        return s;
    }
    case JV_INT:
        snprintf(buf, sizeof buf, "%lld", (long long)v->u.i);
        break;
    case JV_FLOAT:
        fx_jfmt_float(buf, sizeof buf, v->u.f);
        break;
    case JV_LIST: case JV_DICT: {
        if (v->t == JV_LIST && v->tuple == JV_GENERATOR) {
            snprintf(buf, sizeof buf, "<generator object>");
            break;
        }
        jout o = { 0 };
        if (v->t == JV_DICT && v->u.d->ns) {
            /* repr(namespace): its attributes as a dict */
            jv plain = *v;
            jdict copy = *v->u.d;
            copy.ns = false;
            plain.u.d = &copy;
            fx_jout_put(c, &o, "<Namespace ", 11);
            fx_jv_repr(c, &o, &plain);
            fx_jout_put(c, &o, ">", 1);
            return fx_jout_str(&o);
        }
        fx_jv_repr(c, &o, v);
        return fx_jout_str(&o);
    }
    case JV_MACRO: snprintf(buf, sizeof buf, "<Macro>"); break;
    case JV_FUNC: snprintf(buf, sizeof buf, "<function>"); break;
    default: snprintf(buf, sizeof buf, "<LoopContext>"); break;
    }
    size_t n = strlen(buf);
    jstr s = { fx_jstrdup(c, buf, n), n };
    return s;
}

/* ---- UTF-8 ---- */

/* Characters in p[0..n): what Python's len() gives for a str. Bytes that
 * are not UTF-8 count one each. */
size_t fx_jutf8_len(const char *p, size_t n) {
    size_t count = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)p[i] & 0xc0) != 0x80) count++;
    return count;
}
