/*
 * jinja evaluation: statements and expressions over the tree fx_jparse
 * builds, with jinja2's scoping (a for-loop iteration and a macro call get
 * their own scope; `set` writes the innermost one; namespace() objects
 * carry values out), Python's operator semantics on ints, floats, strings
 * and lists, and jinja2's default Undefined (prints as nothing, is false,
 * iterates as empty, fails when its attributes are read or it is computed
 * with).
 */
#include "jinja_int.h"

#include <math.h>
#include <string.h>

/* ---- scopes ---- */

jscope *fx_jscope_new(jctx *c, jscope *parent) {
    jscope *s = fx_jalloc(c, sizeof *s);
    memset(s, 0, sizeof *s);
    s->parent = parent;
    return s;
}

void fx_jscope_set(jctx *c, jscope *sc, jstr name, jv v) {
    for (size_t i = 0; i < sc->n; i++) {
        if (sc->names[i].n == name.n &&
            memcmp(sc->names[i].p, name.p, name.n) == 0) {
            sc->vals[i] = v;
            return;
        }
    }
    if (sc->n == sc->cap) {
        size_t cap = sc->cap ? sc->cap * 2 : 8;
        jstr *nn = fx_jalloc(c, cap * sizeof *nn);
        jv *nv = fx_jalloc(c, cap * sizeof *nv);
        if (sc->n) {
            memcpy(nn, sc->names, sc->n * sizeof *nn);
            memcpy(nv, sc->vals, sc->n * sizeof *nv);
        }
        sc->names = nn;
        sc->vals = nv;
        sc->cap = cap;
    }
    sc->names[sc->n] = name;
    sc->vals[sc->n] = v;
    sc->n++;
}

static const jv *lookup(const jscope *sc, jstr name) {
    for (; sc; sc = sc->parent)
        for (size_t i = sc->n; i-- > 0;)
            if (sc->names[i].n == name.n &&
                memcmp(sc->names[i].p, name.p, name.n) == 0)
                return &sc->vals[i];
    return NULL;
}

static jv name_value(jctx *c, const jscope *sc, jstr name) {
    const jv *v = lookup(sc, name);
    if (v) return *v;
    static const struct { const char *name; jfunc fn; } builtins[] = {
        { "range", JF_RANGE }, { "namespace", JF_NAMESPACE },
        { "raise_exception", JF_RAISE }, { "strftime_now", JF_STRFTIME },
        { "dict", JF_DICT },
    };
    for (size_t i = 0; i < sizeof builtins / sizeof builtins[0]; i++) {
        if (jstr_eq(name, builtins[i].name)) {
            if (builtins[i].fn == JF_STRFTIME && !c->has_clock) break;
            jv f = { .t = JV_FUNC };
            f.u.fn = builtins[i].fn;
            return f;
        }
    }
    return fx_jv_undef(name);
}

/* ---- helpers ---- */

_Noreturn static void undefined_error(jctx *c, const jv *v) {
    if (v->u.s.n)
        fx_jfail(c, FX_ERR_BAD_TEMPLATE, "'%.*s' is undefined", (int)v->u.s.n,
              v->u.s.p);
    fx_jfail(c, FX_ERR_BAD_TEMPLATE, "a value is undefined");
}

/* a OP b on int64 with Python's result, or an error where Python would
 * have gone to big integers. */
static jv int_op(jctx *c, jop op, int64_t a, int64_t b) {
    int64_t r = 0;
    bool overflow = op == OP_ADD ? __builtin_add_overflow(a, b, &r)
                  : op == OP_SUB ? __builtin_sub_overflow(a, b, &r)
                                 : __builtin_mul_overflow(a, b, &r);
    if (overflow) fx_jfail(c, FX_ERR_BAD_TEMPLATE, "integer overflow");
    return fx_jv_int(r);
}

static bool numeric(const jv *v) {
    return v->t == JV_INT || v->t == JV_FLOAT || v->t == JV_BOOL;
}

static double as_double(const jv *v) {
    return v->t == JV_FLOAT ? v->u.f : v->t == JV_INT ? (double)v->u.i
                                                      : (double)v->u.b;
}

static int64_t as_int(const jv *v) {
    return v->t == JV_INT ? v->u.i : (int64_t)v->u.b;
}

/* s * k for strings and lists, bounded by the arena's cap. */
static jv repeat(jctx *c, const jv *seq, int64_t k) {
    if (k < 0) k = 0;
    if (seq->t == JV_STR) {
        size_t n = seq->u.s.n;
        if (n && (uint64_t)k > c->arena.cap / n)
            fx_jfail(c, FX_ERR_TOO_LARGE, "a repeated string would exceed the "
                  "memory cap of %zu bytes", c->arena.cap);
        jout o = { 0 };
        for (int64_t i = 0; i < k; i++) fx_jout_put(c, &o, seq->u.s.p, n);
        jstr s = fx_jout_str(&o);
        return fx_jv_str(s.p, s.n);
    }
    size_t n = seq->u.l->n;
    if (n && (uint64_t)k > c->arena.cap / (n * sizeof(jv)))
        fx_jfail(c, FX_ERR_TOO_LARGE, "a repeated list would exceed the memory "
              "cap of %zu bytes", c->arena.cap);
    jv out = fx_jv_newlist(c, n * (size_t)k);
    for (int64_t i = 0; i < k; i++) {
        fx_jstep(c, n);
        for (size_t j = 0; j < n; j++) fx_jlist_push(c, out.u.l, seq->u.l->v[j]);
    }
    return out;
}

/* Python's printf-style `str % args`, the %s/%d/%r/%i/%f/%% subset. */
static jv percent_format(jctx *c, const jv *fmt, const jv *args) {
    bool tuple = args->t == JV_LIST && args->tuple == JV_TUPLE;
    const jv *list = tuple ? args->u.l->v : args;
    size_t nargs = tuple ? args->u.l->n : 1;
    size_t used = 0;
    jout o = { 0 };
    jstr f = fmt->u.s;
    for (size_t i = 0; i < f.n; i++) {
        if (f.p[i] != '%') { fx_jout_put(c, &o, f.p + i, 1); continue; }
        if (++i >= f.n) fx_jfail(c, FX_ERR_BAD_TEMPLATE, "incomplete format");
        char conv = f.p[i];
        if (conv == '%') { fx_jout_put(c, &o, "%", 1); continue; }
        if (used >= nargs)
            fx_jfail(c, FX_ERR_BAD_TEMPLATE, "not enough arguments for format "
                  "string");
        const jv *a = &list[used++];
        if (conv == 's') {
            jstr s = fx_jv_to_str(c, a);
            fx_jout_put(c, &o, s.p, s.n);
        } else if (conv == 'r') {
            fx_jv_repr(c, &o, a);
        } else if ((conv == 'd' || conv == 'i') && numeric(a)) {
            jv iv = fx_jv_int(a->t == JV_FLOAT ? (int64_t)a->u.f : as_int(a));
            jstr s = fx_jv_to_str(c, &iv);
            fx_jout_put(c, &o, s.p, s.n);
        } else {
            fx_jfail(c, FX_ERR_BAD_TEMPLATE, "unsupported format '%%%c' for %s",
                  conv, fx_jv_typename(a));
        }
    }
    if (used < nargs)
        fx_jfail(c, FX_ERR_BAD_TEMPLATE, "not all arguments converted during "
              "string formatting");
    jstr s = fx_jout_str(&o);
    return fx_jv_str(s.p, s.n);
}

static bool contains(jctx *c, const jv *hay, const jv *needle) {
    switch (hay->t) {
    case JV_STR:
        if (needle->t != JV_STR)
            fx_jfail(c, FX_ERR_BAD_TEMPLATE, "'in <string>' requires string as "
                  "left operand, not %s", fx_jv_typename(needle));
        if (needle->u.s.n == 0) return true;
        for (size_t i = 0; i + needle->u.s.n <= hay->u.s.n; i++)
            if (memcmp(hay->u.s.p + i, needle->u.s.p, needle->u.s.n) == 0)
                return true;
        return false;
    case JV_LIST:
        fx_jstep(c, hay->u.l->n / 8);
        for (size_t i = 0; i < hay->u.l->n; i++)
            if (fx_jv_equal(&hay->u.l->v[i], needle)) return true;
        return false;
    case JV_DICT:
        return fx_jdict_get(hay->u.d, *needle) != NULL;
    case JV_UNDEF:
        return false;
    default:
        fx_jfail(c, FX_ERR_BAD_TEMPLATE, "argument of type '%s' is not "
              "iterable", fx_jv_typename(hay));
    }
}

static jv binop(jctx *c, jop op, const jv *a, const jv *b) {
    if (op == OP_CONCAT) {
        jstr x = fx_jv_to_str(c, a), y = fx_jv_to_str(c, b);
        jout o = { 0 };
        fx_jout_put(c, &o, x.p, x.n);
        fx_jout_put(c, &o, y.p, y.n);
        jstr s = fx_jout_str(&o);
        return fx_jv_str(s.p, s.n);
    }
    if (op == OP_EQ) return fx_jv_bool(fx_jv_equal(a, b));
    if (op == OP_NE) return fx_jv_bool(!fx_jv_equal(a, b));
    if (op == OP_IN) return fx_jv_bool(contains(c, b, a));
    if (op == OP_NOTIN) return fx_jv_bool(!contains(c, b, a));
    if (a->t == JV_UNDEF) undefined_error(c, a);
    if (b->t == JV_UNDEF) undefined_error(c, b);
    if (op >= OP_LT && op <= OP_GE) {
        int k = fx_jv_compare(c, a, b);
        return fx_jv_bool(op == OP_LT ? k < 0 : op == OP_LE ? k <= 0
                       : op == OP_GT ? k > 0 : k >= 0);
    }
    bool ints = (a->t == JV_INT || a->t == JV_BOOL) &&
                (b->t == JV_INT || b->t == JV_BOOL);
    if (numeric(a) && numeric(b)) {
        double x = as_double(a), y = as_double(b);
        /* Read as integers only when both are: a float's bytes are no
         * bool (UBSan found this). */
        int64_t i = ints ? as_int(a) : 0, j = ints ? as_int(b) : 0;
        switch (op) {
        case OP_ADD:
            if (ints) return int_op(c, op, i, j);
            return fx_jv_float(x + y);
        case OP_SUB:
            if (ints) return int_op(c, op, i, j);
            return fx_jv_float(x - y);
        case OP_MUL:
            if (ints) return int_op(c, op, i, j);
            return fx_jv_float(x * y);
        case OP_DIV:
            if (y == 0) fx_jfail(c, FX_ERR_BAD_TEMPLATE, "division by zero");
            return fx_jv_float(x / y);
        case OP_FLOORDIV: case OP_MOD:
            if (ints) {
                if (j == 0) fx_jfail(c, FX_ERR_BAD_TEMPLATE, "division by zero");
                if (i == INT64_MIN && j == -1)
                    fx_jfail(c, FX_ERR_BAD_TEMPLATE, "integer overflow");
                int64_t q = i / j, m = i % j;
                if (m != 0 && ((m < 0) != (j < 0))) { q--; m += j; }
                return fx_jv_int(op == OP_MOD ? m : q);
            }
            if (y == 0) fx_jfail(c, FX_ERR_BAD_TEMPLATE, "division by zero");
            if (op == OP_FLOORDIV) return fx_jv_float(floor(x / y));
            double m = fmod(x, y);
            if (m != 0 && ((m < 0) != (y < 0))) m += y;
            return fx_jv_float(m);
        case OP_POW:
            if (ints && j >= 0) {
                int64_t acc = 1;
                for (int64_t k = 0; k < j; k++) {
                    fx_jstep(c, 1);
                    if (__builtin_mul_overflow(acc, i, &acc))
                        fx_jfail(c, FX_ERR_BAD_TEMPLATE, "integer overflow");
                    if (acc == 0 || acc == 1) break;
                }
                return fx_jv_int(acc);
            }
            return fx_jv_float(pow(x, y));
        default:
            break;
        }
    }
    if (op == OP_ADD && a->t == JV_STR && b->t == JV_STR) {
        bool ma = a->tuple == JV_MARKUP, mb = b->tuple == JV_MARKUP;
        jstr x = a->u.s, y = b->u.s;
        /* Markup + str escapes the str (markupsafe), autoescape or not. */
        if (ma && !mb) y = fx_jmarkup_escape(c, y).u.s;
        if (mb && !ma) x = fx_jmarkup_escape(c, x).u.s;
        jout o = { 0 };
        fx_jout_put(c, &o, x.p, x.n);
        fx_jout_put(c, &o, y.p, y.n);
        jstr s = fx_jout_str(&o);
        jv r = fx_jv_str(s.p, s.n);
        r.tuple = (ma || mb) ? JV_MARKUP : 0;
        return r;
    }
    if (op == OP_ADD && a->t == JV_LIST && b->t == JV_LIST) {
        jv out = fx_jv_newlist(c, a->u.l->n + b->u.l->n);
        for (size_t i = 0; i < a->u.l->n; i++) fx_jlist_push(c, out.u.l, a->u.l->v[i]);
        for (size_t i = 0; i < b->u.l->n; i++) fx_jlist_push(c, out.u.l, b->u.l->v[i]);
        fx_jstep(c, out.u.l->n / 8);
        return out;
    }
    if (op == OP_MUL && (a->t == JV_STR || a->t == JV_LIST) &&
        (b->t == JV_INT || b->t == JV_BOOL))
        return repeat(c, a, as_int(b));
    if (op == OP_MUL && (b->t == JV_STR || b->t == JV_LIST) &&
        (a->t == JV_INT || a->t == JV_BOOL))
        return repeat(c, b, as_int(a));
    if (op == OP_MOD && a->t == JV_STR) return percent_format(c, a, b);
    static const char *const names[] = { "+", "-", "*", "/", "//", "%", "**" };
    fx_jfail(c, FX_ERR_BAD_TEMPLATE, "unsupported operand type(s) for %s: '%s' "
          "and '%s'", op <= OP_POW ? names[op] : "?", fx_jv_typename(a),
          fx_jv_typename(b));
}

/* Byte offset of character k in s (k <= characters in s). */
static size_t char_offset(jstr s, size_t k) {
    size_t i = 0;
    for (; i < s.n && k > 0; i++)
        if (i + 1 >= s.n || ((unsigned char)s.p[i + 1] & 0xc0) != 0x80) k--;
    return i;
}

static int64_t slice_bound(jctx *c, jscope *sc, const jnode *n, int64_t dflt,
                           int64_t len, bool neg_step) {
    if (!n) return dflt;
    jv v = fx_jeval(c, sc, n);
    if (v.t == JV_NONE) return dflt;
    if (v.t != JV_INT && v.t != JV_BOOL)
        fx_jfail(c, FX_ERR_BAD_TEMPLATE, "slice indices must be integers");
    int64_t i = as_int(&v);
    if (i < 0) {
        i += len;
        if (i < 0) i = neg_step ? -1 : 0;
    } else if (i >= len) {
        i = neg_step ? len - 1 : len;
    }
    return i;
}

static jv slice(jctx *c, jscope *sc, const jnode *n) {
    jv obj = fx_jeval(c, sc, n->a);
    if (obj.t == JV_UNDEF) undefined_error(c, &obj);
    /* jinja2's getitem turns a TypeError into undefined. */
    if (obj.t != JV_STR && obj.t != JV_LIST) return fx_jv_undef((jstr){ "", 0 });
    int64_t step = 1;
    if (n->d) {
        jv s = fx_jeval(c, sc, n->d);
        if (s.t != JV_NONE) {
            if (s.t != JV_INT)
                fx_jfail(c, FX_ERR_BAD_TEMPLATE, "slice step must be an integer");
            step = s.u.i;
        }
    }
    if (step == 0) fx_jfail(c, FX_ERR_BAD_TEMPLATE, "slice step cannot be zero");
    int64_t len = obj.t == JV_STR ? (int64_t)fx_jutf8_len(obj.u.s.p, obj.u.s.n)
                                  : (int64_t)obj.u.l->n;
    bool neg = step < 0;
    int64_t start = slice_bound(c, sc, n->b, neg ? len - 1 : 0, len, neg);
    int64_t stop = slice_bound(c, sc, n->c, neg ? -1 : len, len, neg);
    if (obj.t == JV_STR && step == 1) {
        if (stop < start) stop = start;
        size_t from = char_offset(obj.u.s, (size_t)start);
        size_t to = char_offset(obj.u.s, (size_t)stop);
        return fx_jv_str(obj.u.s.p + from, to - from);
    }
    jv out = fx_jv_newlist(c, 0);
    jout o = { 0 };
    for (int64_t i = start; neg ? i > stop : i < stop; i += step) {
        fx_jstep(c, 1);
        if (obj.t == JV_LIST) {
            fx_jlist_push(c, out.u.l, obj.u.l->v[i]);
        } else {
            size_t from = char_offset(obj.u.s, (size_t)i);
            size_t to = char_offset(obj.u.s, (size_t)i + 1);
            fx_jout_put(c, &o, obj.u.s.p + from, to - from);
        }
    }
    if (obj.t == JV_LIST) {
        out.tuple = obj.tuple == JV_TUPLE ? JV_TUPLE : 0; /* (1, 2)[1:] is (2,) */
        return out;
    }
    jstr s = fx_jout_str(&o);
    return fx_jv_str(s.p, s.n);
}

/* ---- calls ---- */

typedef struct args {
    jv *pos;
    size_t n;
    jstr *kwn;
    jv *kwv;
    size_t nkw;
} args;

static args eval_args(jctx *c, jscope *sc, const jnode *call) {
    args a = { 0 };
    size_t k = call->nkids ? call->nkids : 1;
    a.pos = fx_jalloc(c, k * sizeof(jv));
    a.kwn = fx_jalloc(c, k * sizeof(jstr));
    a.kwv = fx_jalloc(c, k * sizeof(jv));
    for (size_t i = 0; i < call->nkids; i++) {
        const jnode *x = call->kids[i];
        if (x->kind == E_KWARG) {
            a.kwn[a.nkw] = x->name;
            a.kwv[a.nkw++] = fx_jeval(c, sc, x->a);
        } else {
            a.pos[a.n++] = fx_jeval(c, sc, x);
        }
    }
    return a;
}

static jv call_macro(jctx *c, const jnode *m, const jv *pos, size_t n,
                     const jstr *kwn, const jv *kwv, size_t nkw,
                     const jv *caller) {
    if (++c->depth > c->lim->max_depth)
        fx_jfail(c, FX_ERR_BAD_TEMPLATE, "macro calls nested more than %u deep "
              "(unbounded recursion?)", (unsigned)c->lim->max_depth);
    jscope *sc = fx_jscope_new(c, c->top);
    jv varargs = fx_jv_newlist(c, 0);
    varargs.tuple = JV_TUPLE;
    for (size_t i = 0; i < n; i++) {
        if (i < m->nkids) fx_jscope_set(c, sc, m->kids[i]->name, pos[i]);
        else fx_jlist_push(c, varargs.u.l, pos[i]);
    }
    jv kwargs = fx_jv_newdict(c, 0);
    for (size_t k = 0; k < nkw; k++) {
        bool found = false;
        for (size_t i = 0; i < m->nkids; i++) {
            if (m->kids[i]->name.n == kwn[k].n &&
                memcmp(m->kids[i]->name.p, kwn[k].p, kwn[k].n) == 0) {
                fx_jscope_set(c, sc, kwn[k], kwv[k]);
                found = true;
            }
        }
        if (!found) fx_jdict_set(c, kwargs.u.d, fx_jv_str(kwn[k].p, kwn[k].n), kwv[k]);
    }
    for (size_t i = n; i < m->nkids; i++) {
        const jnode *p = m->kids[i];
        bool given = false;
        for (size_t k = 0; k < nkw; k++)
            if (kwn[k].n == p->name.n && memcmp(kwn[k].p, p->name.p, p->name.n) == 0)
                given = true;
        if (!given)
            fx_jscope_set(c, sc, p->name, p->a ? fx_jeval(c, sc, p->a)
                                             : fx_jv_undef(p->name));
    }
    fx_jscope_set(c, sc, (jstr){ "varargs", 7 }, varargs);
    fx_jscope_set(c, sc, (jstr){ "kwargs", 6 }, kwargs);
    if (caller) fx_jscope_set(c, sc, (jstr){ "caller", 6 }, *caller);
    jout o = { 0 };
    jout *saved = c->out;
    uint32_t loops = c->loops;
    c->out = &o;
    c->loops = 0;
    fx_jexec(c, sc, m->b);
    c->out = saved;
    c->loops = loops;
    c->depth--;
    jstr s = fx_jout_str(&o);
    return fx_jv_str(s.p, s.n);
}

jv fx_jcall_value(jctx *c, jscope *sc, const jv *fn, const jv *pos, size_t n,
               const jstr *kwn, const jv *kwv, size_t nkw) {
    (void)sc;
    fx_jstep(c, 1);
    if (fn->t == JV_MACRO) return call_macro(c, fn->u.m, pos, n, kwn, kwv, nkw, NULL);
    if (fn->t == JV_FUNC) return fx_jcall_builtin(c, fn->u.fn, pos, n, kwn, kwv, nkw);
    if (fn->t == JV_UNDEF) undefined_error(c, fn);
    fx_jfail(c, FX_ERR_BAD_TEMPLATE, "'%s' object is not callable",
          fx_jv_typename(fn));
}

static jv eval_call(jctx *c, jscope *sc, const jnode *n) {
    if (n->a->kind == E_ATTR) {
        jv obj = fx_jeval(c, sc, n->a->a);
        args a = eval_args(c, sc, n);
        c->at = n;
        jv result;
        if (obj.t == JV_UNDEF) undefined_error(c, &obj);
        if (fx_jmethod(c, &obj, n->a->name, a.pos, a.n, a.kwn, a.kwv, a.nkw, &result))
            return result;
        jv fn = fx_jgetattr(c, &obj, n->a->name);
        return fx_jcall_value(c, sc, &fn, a.pos, a.n, a.kwn, a.kwv, a.nkw);
    }
    jv fn = fx_jeval(c, sc, n->a);
    args a = eval_args(c, sc, n);
    c->at = n;
    return fx_jcall_value(c, sc, &fn, a.pos, a.n, a.kwn, a.kwv, a.nkw);
}

/* ---- expressions ---- */

jv fx_jeval(jctx *c, jscope *sc, const jnode *n) {
    fx_jstep(c, 1);
    c->at = n;
    switch ((jkind)n->kind) {
    case E_LIT:
        return n->lit;
    case E_NAME:
        return name_value(c, sc, n->name);
    case E_LIST: case E_TUPLE: {
        jv out = fx_jv_newlist(c, n->nkids);
        out.tuple = n->kind == E_TUPLE ? JV_TUPLE : 0;
        for (size_t i = 0; i < n->nkids; i++)
            fx_jlist_push(c, out.u.l, fx_jeval(c, sc, n->kids[i]));
        return out;
    }
    case E_DICT: {
        jv out = fx_jv_newdict(c, n->nkids / 2);
        for (size_t i = 0; i + 1 < n->nkids; i += 2) {
            jv k = fx_jeval(c, sc, n->kids[i]);
            jv v = fx_jeval(c, sc, n->kids[i + 1]);
            fx_jdict_set(c, out.u.d, k, v);
        }
        return out;
    }
    case E_ATTR: {
        jv obj = fx_jeval(c, sc, n->a);
        c->at = n;
        return fx_jgetattr(c, &obj, n->name);
    }
    case E_INDEX: {
        jv obj = fx_jeval(c, sc, n->a);
        jv key = fx_jeval(c, sc, n->b);
        c->at = n;
        return fx_jgetitem(c, &obj, &key);
    }
    case E_SLICE:
        return slice(c, sc, n);
    case E_CALL:
        return eval_call(c, sc, n);
    case E_FILTER: {
        jv v = fx_jeval(c, sc, n->a);
        args a = eval_args(c, sc, n);
        c->at = n;
        return fx_jfilter(c, sc, n->name, &v, a.pos, a.n, a.kwn, a.kwv, a.nkw);
    }
    case E_TEST: {
        jv v = fx_jeval(c, sc, n->a);
        args a = eval_args(c, sc, n);
        c->at = n;
        bool r = fx_jtest(c, n->name, &v, a.pos, a.n);
        return fx_jv_bool(n->op ? !r : r);
    }
    case E_NEG: case E_POS: {
        jv v = fx_jeval(c, sc, n->a);
        c->at = n;
        if (v.t == JV_UNDEF) undefined_error(c, &v);
        if (!numeric(&v))
            fx_jfail(c, FX_ERR_BAD_TEMPLATE, "bad operand type for unary %s: "
                  "'%s'", n->kind == E_NEG ? "-" : "+", fx_jv_typename(&v));
        if (n->kind == E_POS) return v.t == JV_BOOL ? fx_jv_int(v.u.b) : v;
        if (v.t == JV_FLOAT) return fx_jv_float(-v.u.f);
        if (as_int(&v) == INT64_MIN) fx_jfail(c, FX_ERR_BAD_TEMPLATE, "integer overflow");
        return fx_jv_int(-as_int(&v));
    }
    case E_NOT: {
        jv v = fx_jeval(c, sc, n->a);
        return fx_jv_bool(!fx_jv_truthy(&v));
    }
    case E_AND: {
        jv v = fx_jeval(c, sc, n->a);
        return fx_jv_truthy(&v) ? fx_jeval(c, sc, n->b) : v;
    }
    case E_OR: {
        jv v = fx_jeval(c, sc, n->a);
        return fx_jv_truthy(&v) ? v : fx_jeval(c, sc, n->b);
    }
    case E_COND: {
        jv cond = fx_jeval(c, sc, n->a);
        if (fx_jv_truthy(&cond)) return fx_jeval(c, sc, n->b);
        if (n->c) return fx_jeval(c, sc, n->c);
        return fx_jv_undef((jstr){ "", 0 });
    }
    case E_BIN: {
        jv a = fx_jeval(c, sc, n->a);
        jv b = fx_jeval(c, sc, n->b);
        c->at = n;
        return binop(c, (jop)n->op, &a, &b);
    }
    default:
        fx_jfail(c, FX_ERR_BAD_TEMPLATE, "internal: not an expression");
    }
}

/* ---- statements ---- */

/* What a for-loop walks: list items, dict keys, string characters. */
static jv iterable_items(jctx *c, const jv *v) {
    switch (v->t) {
    case JV_LIST: return *v;
    case JV_UNDEF: return fx_jv_newlist(c, 0);
    case JV_DICT: {
        if (v->u.d->ns) break;
        jv out = fx_jv_newlist(c, v->u.d->n);
        for (size_t i = 0; i < v->u.d->n; i++) fx_jlist_push(c, out.u.l, v->u.d->k[i]);
        return out;
    }
    case JV_STR: {
        jv out = fx_jv_newlist(c, 0);
        jstr s = v->u.s;
        for (size_t i = 0; i < s.n;) {
            size_t j = i + 1;
            while (j < s.n && ((unsigned char)s.p[j] & 0xc0) == 0x80) j++;
            fx_jlist_push(c, out.u.l, fx_jv_str(s.p + i, j - i));
            i = j;
        }
        return out;
    }
    default:
        break;
    }
    fx_jfail(c, FX_ERR_BAD_TEMPLATE, "'%s' object is not iterable",
          fx_jv_typename(v));
}

static void bind_kids(jctx *c, jscope *sc, const jnode *n, const jv *item) {
    if (n->nkids == 1) {
        fx_jscope_set(c, sc, n->kids[0]->name, *item);
        return;
    }
    jv items = iterable_items(c, item);
    if (items.u.l->n != n->nkids)
        fx_jfail(c, FX_ERR_BAD_TEMPLATE, "cannot unpack %zu values into %zu "
              "names", items.u.l->n, n->nkids);
    for (size_t i = 0; i < n->nkids; i++)
        fx_jscope_set(c, sc, n->kids[i]->name, items.u.l->v[i]);
}

static void exec_for(jctx *c, jscope *sc, const jnode *n) {
    jv src = fx_jeval(c, sc, n->a);
    c->at = n;
    jv all = iterable_items(c, &src);
    jv items = all;
    /* One scope serves every iteration, emptied each time: nothing can
     * keep a reference to it (macros close over the template's top scope),
     * and a long loop then costs no memory per iteration. */
    jscope *it = fx_jscope_new(c, sc);
    if (n->d) { /* `for x in y if cond`: loop.* count the kept items */
        items = fx_jv_newlist(c, 0);
        for (size_t i = 0; i < all.u.l->n; i++) {
            jscope *tmp = it;
            tmp->n = 0;
            bind_kids(c, tmp, n, &all.u.l->v[i]);
            jv keep = fx_jeval(c, tmp, n->d);
            if (fx_jv_truthy(&keep)) fx_jlist_push(c, items.u.l, all.u.l->v[i]);
        }
    }
    jloop *lp = fx_jalloc(c, sizeof *lp);
    lp->items = items.u.l;
    jv loopv = { .t = JV_LOOP };
    loopv.u.loop = lp;
    c->loops++;
    for (size_t i = 0; i < items.u.l->n; i++) {
        fx_jstep(c, 1);
        it->n = 0;
        lp->index0 = i;
        bind_kids(c, it, n, &items.u.l->v[i]);
        fx_jscope_set(c, it, (jstr){ "loop", 4 }, loopv);
        fx_jexec(c, it, n->b);
        int ctl = c->ctl;
        c->ctl = 0;
        if (ctl == 1) break;
    }
    c->loops--;
    if (items.u.l->n == 0 && n->c) fx_jexec(c, sc, n->c);
}

void fx_jexec(jctx *c, jscope *sc, const jnode *n) {
    fx_jstep(c, 1);
    c->at = n;
    switch ((jkind)n->kind) {
    case S_BLOCK:
        /* Blocks and macro calls share one nesting budget, so that deep
         * bodies inside deep recursion cannot multiply into a deep stack. */
        if (++c->depth > c->lim->max_depth)
            fx_jfail(c, FX_ERR_BAD_TEMPLATE, "blocks and macro calls nested "
                     "more than %u deep", (unsigned)c->lim->max_depth);
        for (size_t i = 0; i < n->nkids && !c->ctl; i++) fx_jexec(c, sc, n->kids[i]);
        c->depth--;
        return;
    case S_TEXT:
        fx_jout_put(c, c->out, n->lit.u.s.p, n->lit.u.s.n);
        return;
    case S_OUT: {
        jv v = fx_jeval(c, sc, n->a);
        jstr s = fx_jv_to_str(c, &v);
        fx_jout_put(c, c->out, s.p, s.n);
        return;
    }
    case S_IF: {
        jv cond = fx_jeval(c, sc, n->a);
        if (fx_jv_truthy(&cond)) fx_jexec(c, sc, n->b);
        else if (n->c) fx_jexec(c, sc, n->c);
        return;
    }
    case S_FOR:
        exec_for(c, sc, n);
        return;
    case S_SET: {
        jv v = fx_jeval(c, sc, n->a);
        c->at = n;
        if (n->op) {
            const jv *ns = lookup(sc, n->name);
            if (!ns || ns->t != JV_DICT || !ns->u.d->ns)
                fx_jfail(c, FX_ERR_BAD_TEMPLATE, "cannot assign attribute on "
                      "'%.*s': not a namespace", (int)n->name.n, n->name.p);
            fx_jdict_set(c, ns->u.d, fx_jv_str(n->b->name.p, n->b->name.n), v);
        } else if (n->nkids) {
            bind_kids(c, sc, n, &v);
        } else {
            fx_jscope_set(c, sc, n->name, v);
        }
        return;
    }
    case S_SETBLOCK: {
        jout o = { 0 };
        jout *saved = c->out;
        c->out = &o;
        fx_jexec(c, sc, n->a);
        c->out = saved;
        jstr s = fx_jout_str(&o);
        fx_jscope_set(c, sc, n->name, fx_jv_str(s.p, s.n));
        return;
    }
    case S_MACRO: {
        jv m = { .t = JV_MACRO };
        m.u.m = n;
        fx_jscope_set(c, sc, n->name, m);
        return;
    }
    case S_BREAK: case S_CONTINUE:
        if (!c->loops)
            fx_jfail(c, FX_ERR_BAD_TEMPLATE, "'%s' outside a loop",
                  n->kind == S_BREAK ? "break" : "continue");
        c->ctl = n->kind == S_BREAK ? 1 : 2;
        return;
    case S_FILTERBLOCK: {
        jout o = { 0 };
        jout *saved = c->out;
        c->out = &o;
        fx_jexec(c, sc, n->b);
        c->out = saved;
        jstr body = fx_jout_str(&o);
        jv v = fx_jv_str(body.p, body.n);
        for (size_t i = 0; i < n->nkids; i++) {
            const jnode *f = n->kids[i];
            args a = eval_args(c, sc, f);
            c->at = f;
            v = fx_jfilter(c, sc, f->name, &v, a.pos, a.n, a.kwn, a.kwv, a.nkw);
        }
        jstr s = fx_jv_to_str(c, &v);
        fx_jout_put(c, c->out, s.p, s.n);
        return;
    }
    case S_CALLBLOCK: {
        /* {% call m(args) %}body{% endcall %}: m sees the body as caller(). */
        jnode *body = fx_jalloc(c, sizeof *body);
        memset(body, 0, sizeof *body);
        body->kind = S_MACRO;
        body->line = n->line;
        body->col = n->col;
        body->b = n->b;
        jv caller = { .t = JV_MACRO };
        caller.u.m = body;
        jv fn = fx_jeval(c, sc, n->a->a);
        if (fn.t != JV_MACRO)
            fx_jfail(c, FX_ERR_BAD_TEMPLATE, "{%% call %%} needs a macro");
        args a = eval_args(c, sc, n->a);
        jv r = call_macro(c, fn.u.m, a.pos, a.n, a.kwn, a.kwv, a.nkw, &caller);
        fx_jout_put(c, c->out, r.u.s.p, r.u.s.n);
        return;
    }
    default:
        fx_jfail(c, FX_ERR_BAD_TEMPLATE, "internal: not a statement");
    }
}
