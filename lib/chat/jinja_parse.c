/*
 * jinja parser: tokens to a tree of jnodes with jinja2's grammar and
 * operator precedence. Recursion is counted against limits.max_depth so
 * that deeply nested brackets or blocks end in an error, not a stack
 * overflow.
 */
#include "jinja_int.h"

#include <string.h>

typedef struct parser {
    jctx *c;
    jtoken *t;
    size_t n, i;
} parser;
/* ---- parser helpers ---- */

static jtoken *pk(parser *p) { return &p->t[p->i]; }
static jtoken *adv(parser *p) {
    jtoken *t = &p->t[p->i];
    if (t->type != T_EOF) p->i++;
    return t;
}

_Noreturn static void pfail(parser *p, const char *fmt, const char *what) {
    jtoken *t = pk(p);
    fx_jfail_at(p->c, t->line, t->col, fmt, what);
}

static bool is_op(parser *p, const char *op) {
    jtoken *t = pk(p);
    return t->type == T_OP && jstr_eq(t->s, op);
}

static bool is_name(parser *p, const char *name) {
    jtoken *t = pk(p);
    return t->type == T_NAME && jstr_eq(t->s, name);
}

static bool is_name_at(parser *p, size_t k, const char *name) {
    if (p->i + k >= p->n) return false;
    jtoken *t = &p->t[p->i + k];
    return t->type == T_NAME && jstr_eq(t->s, name);
}

static void expect_op(parser *p, const char *op) {
    if (!is_op(p, op)) pfail(p, "expected '%s'", op);
    adv(p);
}

static jstr expect_name(parser *p) {
    if (pk(p)->type != T_NAME) pfail(p, "expected a name%s", "");
    return adv(p)->s;
}

static void expect_block_end(parser *p) {
    if (pk(p)->type != T_BLOCK_END) pfail(p, "expected '%s'", "%}");
    adv(p);
}

static jnode *mk(parser *p, jkind kind, const jtoken *at) {
    jnode *n = fx_jalloc(p->c, sizeof *n);
    memset(n, 0, sizeof *n);
    n->kind = (uint8_t)kind;
    n->line = at->line;
    n->col = at->col;
    return n;
}

typedef struct nodelist {
    jnode **v;
    size_t n, cap;
} nodelist;

static void nl_push(parser *p, nodelist *l, jnode *n) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        jnode **v = fx_jalloc(p->c, cap * sizeof *v);
        if (l->n) memcpy(v, l->v, l->n * sizeof *v);
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = n;
}

static void set_kids(jnode *n, const nodelist *l) {
    n->kids = l->v;
    n->nkids = l->n;
}

static void enter(parser *p) {
    if (++p->c->depth > p->c->lim->max_depth) {
        jtoken *t = pk(p);
        fx_jfail_at(p->c, t->line, t->col, "the template is nested more than "
                 "%u levels deep", (unsigned)p->c->lim->max_depth);
    }
}

static void leave(parser *p) { p->c->depth--; }

/* ---- expressions ---- */

static jnode *expr(parser *p);
static jnode *or_expr(parser *p);
static jnode *unary(parser *p, bool with_filter);

static bool reserved(jstr s) {
    static const char *const words[] = { "and", "or", "not", "in", "is", "if",
                                         "else", NULL };
    for (size_t i = 0; words[i]; i++)
        if (jstr_eq(s, words[i])) return true;
    return false;
}

/* Call arguments after '(': positional in kids, keyword ones as E_KWARG. */
static void call_args(parser *p, jnode *call) {
    nodelist l = { 0 };
    while (!is_op(p, ")")) {
        if (l.n) {
            expect_op(p, ",");
            if (is_op(p, ")")) break;
        }
        jtoken *t = pk(p);
        if (t->type == T_NAME && p->i + 1 < p->n &&
            p->t[p->i + 1].type == T_OP && jstr_eq(p->t[p->i + 1].s, "=")) {
            jnode *kw = mk(p, E_KWARG, t);
            kw->name = t->s;
            adv(p);
            adv(p);
            kw->a = expr(p);
            nl_push(p, &l, kw);
        } else {
            nl_push(p, &l, expr(p));
        }
    }
    adv(p);
    set_kids(call, &l);
}

static jnode *primary(parser *p) {
    jtoken *t = pk(p);
    jnode *n;
    switch (t->type) {
    case T_NAME:
        adv(p);
        if (jstr_eq(t->s, "true") || jstr_eq(t->s, "True")) {
            n = mk(p, E_LIT, t);
            n->lit = fx_jv_bool(true);
        } else if (jstr_eq(t->s, "false") || jstr_eq(t->s, "False")) {
            n = mk(p, E_LIT, t);
            n->lit = fx_jv_bool(false);
        } else if (jstr_eq(t->s, "none") || jstr_eq(t->s, "None")) {
            n = mk(p, E_LIT, t);
            n->lit = fx_jv_none();
        } else {
            n = mk(p, E_NAME, t);
            n->name = t->s;
        }
        return n;
    case T_STRING: {
        /* Adjacent literals concatenate, as in Python. */
        adv(p);
        n = mk(p, E_LIT, t);
        n->lit = fx_jv_str(t->s.p, t->s.n);
        if (pk(p)->type == T_STRING) {
            jout o = { 0 };
            fx_jout_put(p->c, &o, t->s.p, t->s.n);
            while (pk(p)->type == T_STRING) {
                jtoken *u = adv(p);
                fx_jout_put(p->c, &o, u->s.p, u->s.n);
            }
            jstr s = fx_jout_str(&o);
            n->lit = fx_jv_str(s.p, s.n);
        }
        return n;
    }
    case T_INT:
        adv(p);
        n = mk(p, E_LIT, t);
        n->lit = fx_jv_int(t->i);
        return n;
    case T_FLOAT:
        adv(p);
        n = mk(p, E_LIT, t);
        n->lit = fx_jv_float(t->f);
        return n;
    case T_OP:
        break;
    default:
        pfail(p, "expected an expression%s", "");
    }
    if (is_op(p, "(")) {
        adv(p);
        if (is_op(p, ")")) {
            adv(p);
            n = mk(p, E_TUPLE, t);
            return n;
        }
        jnode *first = expr(p);
        if (!is_op(p, ",")) {
            expect_op(p, ")");
            return first;
        }
        nodelist l = { 0 };
        nl_push(p, &l, first);
        while (is_op(p, ",")) {
            adv(p);
            if (is_op(p, ")")) break;
            nl_push(p, &l, expr(p));
        }
        expect_op(p, ")");
        n = mk(p, E_TUPLE, t);
        set_kids(n, &l);
        return n;
    }
    if (is_op(p, "[")) {
        adv(p);
        nodelist l = { 0 };
        while (!is_op(p, "]")) {
            if (l.n) {
                expect_op(p, ",");
                if (is_op(p, "]")) break;
            }
            nl_push(p, &l, expr(p));
        }
        adv(p);
        n = mk(p, E_LIST, t);
        set_kids(n, &l);
        return n;
    }
    if (is_op(p, "{")) {
        adv(p);
        nodelist l = { 0 };
        while (!is_op(p, "}")) {
            if (l.n) {
                expect_op(p, ",");
                if (is_op(p, "}")) break;
            }
            nl_push(p, &l, expr(p));
            expect_op(p, ":");
            nl_push(p, &l, expr(p));
        }
        adv(p);
        n = mk(p, E_DICT, t);
        set_kids(n, &l);
        return n;
    }
    pfail(p, "unexpected '%s'", fx_jstrdup(p->c, t->s.p, t->s.n));
}

static jnode *subscript(parser *p, jnode *obj, jtoken *at) {
    jnode *parts[3] = { NULL, NULL, NULL };
    int k = 0;
    bool slice = false;
    for (;;) {
        if (!is_op(p, ":") && !is_op(p, "]")) parts[k] = expr(p);
        if (is_op(p, ":")) {
            slice = true;
            if (++k > 2) pfail(p, "too many ':' in a slice%s", "");
            adv(p);
            continue;
        }
        break;
    }
    expect_op(p, "]");
    jnode *n = mk(p, slice ? E_SLICE : E_INDEX, at);
    n->a = obj;
    if (slice) {
        n->b = parts[0];
        n->c = parts[1];
        n->d = parts[2];
    } else {
        if (!parts[0]) pfail(p, "expected a subscript%s", "");
        n->b = parts[0];
    }
    return n;
}

static jnode *postfix(parser *p, jnode *n) {
    for (;;) {
        jtoken *t = pk(p);
        if (is_op(p, ".")) {
            adv(p);
            jtoken *a = pk(p);
            jnode *x = mk(p, E_ATTR, t);
            x->a = n;
            if (a->type == T_NAME) {
                x->name = adv(p)->s;
            } else if (a->type == T_INT) {
                /* x.0 is x[0] in jinja2 */
                adv(p);
                x->kind = E_INDEX;
                x->b = mk(p, E_LIT, a);
                x->b->lit = fx_jv_int(a->i);
            } else {
                pfail(p, "expected an attribute name%s", "");
            }
            n = x;
        } else if (is_op(p, "[")) {
            adv(p);
            n = subscript(p, n, t);
        } else if (is_op(p, "(")) {
            adv(p);
            jnode *x = mk(p, E_CALL, t);
            x->a = n;
            call_args(p, x);
            n = x;
        } else {
            return n;
        }
    }
}

/* Filters (`| name(args)`) and tests (`is [not] name args`). */
static jnode *filters(parser *p, jnode *n) {
    for (;;) {
        jtoken *t = pk(p);
        if (is_op(p, "|")) {
            adv(p);
            jnode *f = mk(p, E_FILTER, t);
            f->a = n;
            f->name = expect_name(p);
            if (is_op(p, "(")) {
                adv(p);
                call_args(p, f);
            }
            n = f;
        } else if (is_name(p, "is")) {
            adv(p);
            jnode *x = mk(p, E_TEST, t);
            x->a = n;
            if (is_name(p, "not")) {
                adv(p);
                x->op = 1;
            }
            x->name = expect_name(p);
            if (is_op(p, "(")) {
                adv(p);
                call_args(p, x);
            } else {
                jtoken *u = pk(p);
                bool arg = u->type == T_STRING || u->type == T_INT ||
                           u->type == T_FLOAT ||
                           (u->type == T_NAME && !reserved(u->s)) ||
                           (u->type == T_OP && (jstr_eq(u->s, "[") ||
                                                jstr_eq(u->s, "{") ||
                                                jstr_eq(u->s, "(")));
                if (arg) {
                    nodelist l = { 0 };
                    nl_push(p, &l, postfix(p, primary(p)));
                    set_kids(x, &l);
                }
            }
            n = x;
        } else {
            return n;
        }
    }
}

static jnode *unary(parser *p, bool with_filter) {
    jtoken *t = pk(p);
    enter(p);
    jnode *n;
    if (is_op(p, "-") || is_op(p, "+")) {
        adv(p);
        n = mk(p, jstr_eq(t->s, "-") ? E_NEG : E_POS, t);
        n->a = unary(p, false);
    } else {
        n = primary(p);
    }
    n = postfix(p, n);
    if (with_filter) n = filters(p, n);
    leave(p);
    return n;
}

static jnode *binary(parser *p, jnode *l, jop op, jnode *r, jtoken *at) {
    jnode *n = mk(p, E_BIN, at);
    n->op = (uint8_t)op;
    n->a = l;
    n->b = r;
    return n;
}

static jnode *pow_expr(parser *p) {
    jnode *n = unary(p, true);
    while (is_op(p, "**")) {
        jtoken *t = adv(p);
        n = binary(p, n, OP_POW, unary(p, true), t);
    }
    return n;
}

static jnode *mul_expr(parser *p) {
    jnode *n = pow_expr(p);
    for (;;) {
        jop op;
        if (is_op(p, "*")) op = OP_MUL;
        else if (is_op(p, "/")) op = OP_DIV;
        else if (is_op(p, "//")) op = OP_FLOORDIV;
        else if (is_op(p, "%")) op = OP_MOD;
        else return n;
        jtoken *t = adv(p);
        n = binary(p, n, op, pow_expr(p), t);
    }
}

static jnode *concat_expr(parser *p) {
    jnode *n = mul_expr(p);
    while (is_op(p, "~")) {
        jtoken *t = adv(p);
        n = binary(p, n, OP_CONCAT, mul_expr(p), t);
    }
    return n;
}

static jnode *add_expr(parser *p) {
    jnode *n = concat_expr(p);
    for (;;) {
        jop op;
        if (is_op(p, "+")) op = OP_ADD;
        else if (is_op(p, "-")) op = OP_SUB;
        else return n;
        jtoken *t = adv(p);
        n = binary(p, n, op, concat_expr(p), t);
    }
}

/* Comparisons chain as in Python: a < b < c is (a < b) and (b < c), the
 * middle operand's node shared by both. */
static jnode *compare(parser *p) {
    jnode *n = add_expr(p);
    jnode *last = NULL;  /* the latest comparison, when chaining */
    for (;;) {
        jop op;
        if (is_op(p, "==")) op = OP_EQ;
        else if (is_op(p, "!=")) op = OP_NE;
        else if (is_op(p, "<")) op = OP_LT;
        else if (is_op(p, "<=")) op = OP_LE;
        else if (is_op(p, ">")) op = OP_GT;
        else if (is_op(p, ">=")) op = OP_GE;
        else if (is_name(p, "in")) op = OP_IN;
        else if (is_name(p, "not") && is_name_at(p, 1, "in")) {
            op = OP_NOTIN;
            adv(p);
        } else {
            return n;
        }
        jtoken *t = adv(p);
        if (!last) {
            n = last = binary(p, n, op, add_expr(p), t);
        } else {
            jnode *next = binary(p, last->b, op, add_expr(p), t);
            jnode *both = mk(p, E_AND, t);
            both->a = n;
            both->b = next;
            n = both;
            last = next;
        }
    }
}

static jnode *not_expr(parser *p) {
    if (is_name(p, "not")) {
        jtoken *t = adv(p);
        enter(p);
        jnode *n = mk(p, E_NOT, t);
        n->a = not_expr(p);
        leave(p);
        return n;
    }
    return compare(p);
}

static jnode *and_expr(parser *p) {
    jnode *n = not_expr(p);
    while (is_name(p, "and")) {
        jtoken *t = adv(p);
        jnode *x = mk(p, E_AND, t);
        x->a = n;
        x->b = not_expr(p);
        n = x;
    }
    return n;
}

static jnode *or_expr(parser *p) {
    jnode *n = and_expr(p);
    while (is_name(p, "or")) {
        jtoken *t = adv(p);
        jnode *x = mk(p, E_OR, t);
        x->a = n;
        x->b = and_expr(p);
        n = x;
    }
    return n;
}

/* `a if cond [else b]`, right-associative. */
static jnode *expr(parser *p) {
    enter(p);
    jnode *n = or_expr(p);
    while (is_name(p, "if")) {
        jtoken *t = adv(p);
        jnode *x = mk(p, E_COND, t);
        x->b = n;
        x->a = or_expr(p);
        if (is_name(p, "else")) {
            adv(p);
            x->c = expr(p);
        }
        n = x;
    }
    leave(p);
    return n;
}

/* An expression that may be an unparenthesized tuple (`for` sources,
 * `set` values). */
static jnode *tuple_expr(parser *p) {
    jtoken *t = pk(p);
    jnode *first = expr(p);
    if (!is_op(p, ",")) return first;
    nodelist l = { 0 };
    nl_push(p, &l, first);
    while (is_op(p, ",")) {
        adv(p);
        nl_push(p, &l, expr(p));
    }
    jnode *n = mk(p, E_TUPLE, t);
    set_kids(n, &l);
    return n;
}

/* ---- statements ---- */

static jnode *body(parser *p, const char *const *ends, jstr *which);

static jnode *stmt_if(parser *p, jtoken *at) {
    jnode *n = mk(p, S_IF, at);
    n->a = tuple_expr(p);
    expect_block_end(p);
    static const char *const ends[] = { "elif", "else", "endif", NULL };
    jstr which;
    n->b = body(p, ends, &which);
    if (jstr_eq(which, "elif")) {
        jtoken *t = pk(p);
        n->c = stmt_if(p, t);
        return n;
    }
    if (jstr_eq(which, "else")) {
        expect_block_end(p);
        static const char *const endif[] = { "endif", NULL };
        n->c = body(p, endif, &which);
    }
    expect_block_end(p);
    return n;
}

static jnode *stmt_for(parser *p, jtoken *at) {
    jnode *n = mk(p, S_FOR, at);
    nodelist targets = { 0 };
    do {
        if (targets.n) adv(p);
        jtoken *t = pk(p);
        jnode *name = mk(p, E_NAME, t);
        name->name = expect_name(p);
        nl_push(p, &targets, name);
    } while (is_op(p, ","));
    set_kids(n, &targets);
    if (!is_name(p, "in")) pfail(p, "expected 'in' in a for loop%s", "");
    adv(p);
    /* The source stops before a filtering `if`: or_expr, not expr. */
    n->a = or_expr(p);
    if (is_name(p, "if")) {
        adv(p);
        n->d = expr(p);
    }
    if (is_name(p, "recursive"))
        pfail(p, "recursive loops are not supported%s", "");
    expect_block_end(p);
    static const char *const ends[] = { "else", "endfor", NULL };
    jstr which;
    n->b = body(p, ends, &which);
    if (jstr_eq(which, "else")) {
        expect_block_end(p);
        static const char *const endfor[] = { "endfor", NULL };
        n->c = body(p, endfor, &which);
    }
    expect_block_end(p);
    return n;
}

static jnode *stmt_set(parser *p, jtoken *at) {
    jnode *n = mk(p, S_SET, at);
    n->name = expect_name(p);
    if (is_op(p, ".")) {
        /* ns.attr = value */
        adv(p);
        n->op = 1;
        jnode *attr = mk(p, E_NAME, pk(p));
        attr->name = expect_name(p);
        n->b = attr;
    } else if (is_op(p, ",")) {
        nodelist l = { 0 };
        jnode *first = mk(p, E_NAME, at);
        first->name = n->name;
        nl_push(p, &l, first);
        while (is_op(p, ",")) {
            adv(p);
            jnode *x = mk(p, E_NAME, pk(p));
            x->name = expect_name(p);
            nl_push(p, &l, x);
        }
        set_kids(n, &l);
    }
    if (!is_op(p, "=")) {
        if (n->op || n->nkids) pfail(p, "expected '='%s", "");
        /* {% set x %}...{% endset %} captures its body. */
        n->kind = S_SETBLOCK;
        expect_block_end(p);
        static const char *const ends[] = { "endset", NULL };
        jstr which;
        n->a = body(p, ends, &which);
        expect_block_end(p);
        return n;
    }
    adv(p);
    n->a = tuple_expr(p);
    expect_block_end(p);
    return n;
}

static jnode *stmt_macro(parser *p, jtoken *at) {
    jnode *n = mk(p, S_MACRO, at);
    n->name = expect_name(p);
    expect_op(p, "(");
    nodelist params = { 0 };
    while (!is_op(p, ")")) {
        if (params.n) expect_op(p, ",");
        jnode *x = mk(p, E_NAME, pk(p));
        x->name = expect_name(p);
        if (is_op(p, "=")) {
            adv(p);
            x->a = expr(p);
        }
        nl_push(p, &params, x);
    }
    adv(p);
    set_kids(n, &params);
    expect_block_end(p);
    static const char *const ends[] = { "endmacro", NULL };
    jstr which;
    n->b = body(p, ends, &which);
    if (pk(p)->type == T_NAME) adv(p); /* {% endmacro name %} */
    expect_block_end(p);
    return n;
}

/* Statements up to one of `ends` (returned in *which, its tag consumed up
 * to the name) or, when ends is NULL, the end of the template. */
static jnode *body(parser *p, const char *const *ends, jstr *which) {
    jtoken *start = pk(p);
    enter(p);
    nodelist l = { 0 };
    for (;;) {
        jtoken *t = pk(p);
        if (t->type == T_EOF) {
            if (ends) {
                size_t k = 0;
                while (ends[k + 1]) k++;
                fx_jfail_at(p->c, start->line, start->col, "unexpected end of "
                         "template: the block here needs {%% %s %%}",
                         ends[k]);
            }
            break;
        }
        if (t->type == T_TEXT) {
            adv(p);
            jnode *n = mk(p, S_TEXT, t);
            n->lit = fx_jv_str(t->s.p, t->s.n);
            nl_push(p, &l, n);
            continue;
        }
        if (t->type == T_VAR_BEGIN) {
            adv(p);
            jnode *n = mk(p, S_OUT, t);
            n->a = tuple_expr(p);
            if (pk(p)->type != T_VAR_END) pfail(p, "expected '%s'", "}}");
            adv(p);
            nl_push(p, &l, n);
            continue;
        }
        if (t->type != T_BLOCK_BEGIN) pfail(p, "unexpected jtoken%s", "");
        adv(p);
        jtoken *kw = pk(p);
        if (kw->type != T_NAME) pfail(p, "expected a statement name%s", "");
        for (size_t i = 0; ends && ends[i]; i++) {
            if (jstr_eq(kw->s, ends[i])) {
                adv(p);
                *which = kw->s;
                jnode *n = mk(p, S_BLOCK, start);
                set_kids(n, &l);
                leave(p);
                return n;
            }
        }
        adv(p);
        jnode *n = NULL;
        if (jstr_eq(kw->s, "if")) n = stmt_if(p, kw);
        else if (jstr_eq(kw->s, "for")) n = stmt_for(p, kw);
        else if (jstr_eq(kw->s, "set")) n = stmt_set(p, kw);
        else if (jstr_eq(kw->s, "macro")) n = stmt_macro(p, kw);
        else if (jstr_eq(kw->s, "break") || jstr_eq(kw->s, "continue")) {
            n = mk(p, jstr_eq(kw->s, "break") ? S_BREAK : S_CONTINUE, kw);
            expect_block_end(p);
        } else if (jstr_eq(kw->s, "generation")) {
            /* transformers' assistant-mask marker: renders its body. */
            expect_block_end(p);
            static const char *const ends2[] = { "endgeneration", NULL };
            jstr w;
            n = body(p, ends2, &w);
            expect_block_end(p);
        } else if (jstr_eq(kw->s, "filter")) {
            /* {% filter f(args) | g %}body{% endfilter %}: the filters in
             * kids, applied in order to the rendered body. */
            n = mk(p, S_FILTERBLOCK, kw);
            nodelist chain = { 0 };
            for (;;) {
                jnode *f = mk(p, E_FILTER, pk(p));
                f->name = expect_name(p);
                if (is_op(p, "(")) {
                    adv(p);
                    call_args(p, f);
                }
                nl_push(p, &chain, f);
                if (!is_op(p, "|")) break;
                adv(p);
            }
            set_kids(n, &chain);
            expect_block_end(p);
            static const char *const ends4[] = { "endfilter", NULL };
            jstr w;
            n->b = body(p, ends4, &w);
            expect_block_end(p);
        } else if (jstr_eq(kw->s, "call")) {
            n = mk(p, S_CALLBLOCK, kw);
            n->a = expr(p);
            if (n->a->kind != E_CALL)
                pfail(p, "{%% call %%} needs a macro call%s", "");
            expect_block_end(p);
            static const char *const ends3[] = { "endcall", NULL };
            jstr w;
            n->b = body(p, ends3, &w);
            expect_block_end(p);
        } else {
            fx_jfail_at(p->c, kw->line, kw->col, "unknown or misplaced statement "
                     "'%s'", fx_jstrdup(p->c, kw->s.p, kw->s.n));
        }
        nl_push(p, &l, n);
    }
    jnode *n = mk(p, S_BLOCK, start);
    set_kids(n, &l);
    leave(p);
    return n;
}

jnode *fx_jparse(jctx *c, const char *text, size_t len) {
    size_t n = 0;
    jtoken *toks = fx_jlex(c, text, len, &n);
    parser p = { c, toks, n, 0 };
    c->depth = 0;
    jnode *root = body(&p, NULL, NULL);
    c->depth = 0;
    return root;
}
