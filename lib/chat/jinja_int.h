/*
 * jinja internals shared by jinja_parse.c (lexer, parser), jinja_value.c
 * (arena, values, text forms, JSON), jinja_eval.c (statements,
 * expressions) and jinja_builtins.c (filters, tests, methods, globals).
 *
 * Errors unwind with longjmp to the one setjmp in fx_jinja_render: every
 * allocation lives in the render's arena, so unwinding leaks nothing and
 * the many error paths of an interpreter stay one line each.
 */
#ifndef FX_JINJA_INT_H
#define FX_JINJA_INT_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "jinja.h"

/* ---- arena ---- */

typedef struct jchunk {
    struct jchunk *next;
    size_t size, used;
    /* data follows, max_align_t aligned */
} jchunk;

typedef struct jarena {
    const fx_alloc *alloc;
    jchunk *head;
    size_t total;   /* bytes taken from alloc */
    size_t cap;     /* fx_jinja_limits.max_memory */
} jarena;

/* ---- values ---- */

typedef enum jv_type {
    JV_UNDEF = 0, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST,
    JV_DICT, JV_MACRO, JV_FUNC, JV_LOOP
} jv_type;

/* Python kinds a JV_LIST stands for: jinja2's select/map filters return
 * generators, which tojson and length refuse and which are always true. */
enum { JV_TUPLE = 1, JV_GENERATOR = 2 };
/* A JV_STR that is markupsafe's Markup (from |safe or |escape): adding a
 * plain string to it escapes that string, as Markup.__add__ does even
 * with autoescape off. */
enum { JV_MARKUP = 3 };

typedef struct jstr {
    const char *p;
    size_t n;
} jstr;

struct jlist;
struct jdict;
struct jnode;
struct jloop;

typedef struct jv {
    uint8_t t;           /* jv_type */
    uint8_t tuple;       /* JV_LIST: JV_TUPLE or JV_GENERATOR; JV_STR:
                            JV_MARKUP; else 0 */
    union {
        bool b;
        int64_t i;
        double f;
        jstr s;          /* JV_STR; JV_UNDEF: the name, for messages */
        struct jlist *l;
        struct jdict *d; /* also namespace() objects (d->ns) */
        const struct jnode *m;  /* JV_MACRO: its S_MACRO node */
        int fn;          /* JV_FUNC: a jfunc */
        struct jloop *loop;
    } u;
} jv;

/* depth: how deeply values nest inside, kept at most JV_MAX_NESTING so
 * that comparing, printing and serializing them recurse boundedly. */
#define JV_MAX_NESTING 256

typedef struct jlist {
    jv *v;
    size_t n, cap;
    uint32_t depth;
} jlist;

typedef struct jdict {
    jv *k, *v;
    size_t n, cap;
    bool ns;             /* namespace(): attributes may be assigned */
    uint32_t depth;
} jdict;

typedef struct jloop {
    const jlist *items;
    size_t index0;
} jloop;

typedef enum jfunc {
    JF_RANGE, JF_NAMESPACE, JF_RAISE, JF_STRFTIME, JF_DICT, JF_COUNT
} jfunc;

/* ---- syntax tree ---- */

typedef enum jkind {
    /* expressions */
    E_LIT, E_NAME, E_LIST, E_TUPLE, E_DICT, E_ATTR, E_INDEX, E_SLICE,
    E_CALL, E_KWARG, E_FILTER, E_TEST, E_NEG, E_POS, E_NOT, E_BIN, E_AND,
    E_OR, E_COND,
    /* statements */
    S_BLOCK, S_TEXT, S_OUT, S_IF, S_FOR, S_SET, S_SETBLOCK, S_MACRO,
    S_BREAK, S_CONTINUE, S_CALLBLOCK, S_FILTERBLOCK
} jkind;

typedef enum jop {
    OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_CONCAT,
    OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOTIN
} jop;

typedef struct jnode {
    uint8_t kind;        /* jkind */
    uint8_t op;          /* jop; E_TEST: negated; S_SET: has attr target */
    uint32_t line, col;
    struct jnode *a, *b, *c, *d;
    struct jnode **kids;
    size_t nkids;
    jstr name;           /* names, attributes, filters, tests */
    jv lit;              /* E_LIT; S_TEXT */
} jnode;

/* ---- one render ---- */

typedef struct jscope {
    struct jscope *parent;
    jstr *names;
    jv *vals;
    size_t n, cap;
} jscope;

typedef struct jout {
    char *p;
    size_t n, cap;
} jout;

typedef struct jctx {
    jarena arena;
    jmp_buf fail;
    fx_status status;
    fx_error *err;
    const fx_jinja_limits *lim;
    uint64_t steps;
    uint32_t depth;      /* parser nesting, then macro calls */
    jscope *globals;     /* the render's variables */
    jscope *top;         /* the template's own top-level scope */
    jout *out;           /* where S_TEXT and S_OUT write now */
    bool has_clock;
    int64_t now;
    const jnode *at;     /* the node being evaluated, for messages */
    int ctl;             /* a pending {% break %} (1) or {% continue %} (2) */
    bool json_ascii;     /* tojson(ensure_ascii=True) is writing */
    uint32_t loops;      /* for-loops being run, for break/continue */
} jctx;

/* Unwinds with status and a message naming the current line:column. */
_Noreturn void fx_jfail(jctx *c, fx_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
_Noreturn void fx_jfail_at(jctx *c, uint32_t line, uint32_t col,
                        const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
void fx_jstep(jctx *c, uint64_t n);

/* arena (jinja_value.c) */
void *fx_jalloc(jctx *c, size_t size);
void fx_jarena_free(jarena *a);
char *fx_jstrdup(jctx *c, const char *p, size_t n);

/* values (jinja_value.c) */
jv fx_jv_undef(jstr name);
jv fx_jv_none(void);
jv fx_jv_bool(bool b);
jv fx_jv_int(int64_t i);
jv fx_jv_float(double f);
jv fx_jv_str(const char *p, size_t n);
jv fx_jv_cstr(const char *s);
jv fx_jv_newlist(jctx *c, size_t cap);
jv fx_jv_newdict(jctx *c, size_t cap);
void fx_jlist_push(jctx *c, jlist *l, jv v);
void fx_jdict_set(jctx *c, jdict *d, jv k, jv v);
const jv *fx_jdict_get(const jdict *d, jv k);
const jv *fx_jdict_gets(const jdict *d, const char *key, size_t n);
bool fx_jv_truthy(const jv *v);
bool fx_jv_equal(const jv *a, const jv *b);
int fx_jv_compare(jctx *c, const jv *a, const jv *b);
const char *fx_jv_typename(const jv *v);
/* str(v) as Python prints it, repr(v) for list/dict members. */
jstr fx_jv_to_str(jctx *c, const jv *v);
void fx_jv_repr(jctx *c, jout *o, const jv *v);
/* json.dumps(v, ensure_ascii=False, indent=indent(<0 none)). */
void fx_jv_tojson(jctx *c, jout *o, const jv *v, int indent, int level,
               bool sort_keys);
/* A JSON text to values; FX_ERR_BAD_TEMPLATE-style failure via fx_jfail. */
jv fx_jv_parse_json(jctx *c, const char *p, size_t n, const char *what);
void fx_jout_put(jctx *c, jout *o, const char *p, size_t n);
jstr fx_jout_str(const jout *o);
void fx_jfmt_float(char *buf, size_t size, double f);
size_t fx_jutf8_len(const char *p, size_t n);

typedef enum jttype {
    T_TEXT, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END, T_NAME,
    T_STRING, T_INT, T_FLOAT, T_OP, T_EOF
} jttype;

typedef struct jtoken {
    uint8_t type;
    uint32_t line, col;
    jstr s;          /* text, name, operator, decoded string */
    int64_t i;
    double f;
} jtoken;

/* lexer (jinja_lex.c): the tokens of a template, T_EOF last. */
jtoken *fx_jlex(jctx *c, const char *text, size_t len, size_t *n);

/* parser (jinja_parse.c) */
jnode *fx_jparse(jctx *c, const char *text, size_t len);

/* evaluation (jinja_eval.c) */
void fx_jexec(jctx *c, jscope *sc, const jnode *n);
jv fx_jeval(jctx *c, jscope *sc, const jnode *n);
jscope *fx_jscope_new(jctx *c, jscope *parent);
void fx_jscope_set(jctx *c, jscope *sc, jstr name, jv v);
jv fx_jcall_value(jctx *c, jscope *sc, const jv *fn, const jv *args, size_t n,
               const jstr *kwn, const jv *kwv, size_t nkw);

/* builtins (jinja_builtins.c) */
jv fx_jfilter(jctx *c, jscope *sc, jstr name, const jv *v, const jv *args,
           size_t n, const jstr *kwn, const jv *kwv, size_t nkw);
bool fx_jtest(jctx *c, jstr name, const jv *v, const jv *args, size_t n);
bool fx_jmethod(jctx *c, const jv *obj, jstr name, const jv *args, size_t n,
             const jstr *kwn, const jv *kwv, size_t nkw, jv *result);
/* fx_jmethod for dicts and loops (strings are its own). */
bool fx_jmethod_other(jctx *c, const jv *obj, jstr name, const jv *args,
                      size_t n, const jstr *kwn, const jv *kwv, size_t nkw,
                      jv *result);
jv fx_jcall_builtin(jctx *c, int fn, const jv *args, size_t n, const jstr *kwn,
                 const jv *kwv, size_t nkw);
jv fx_jgetattr(jctx *c, const jv *obj, jstr name);
jv fx_jgetitem(jctx *c, const jv *obj, const jv *key);

/* markupsafe.escape: & < > " ' as entities, as a Markup string. */
jv fx_jmarkup_escape(jctx *c, jstr s);

/* shared by the builtins and the filters (jinja_builtins.c) */
typedef enum jcase { CASE_UPPER, CASE_LOWER, CASE_TITLE, CASE_CAPITALIZE } jcase;
jv fx_jstr_strip(jctx *c, jstr s, const jv *chars, bool left, bool right);
jv fx_jstr_case(jctx *c, jstr s, jcase mode);
jv fx_jstr_replace(jctx *c, jstr s, jstr old, jstr new_, int64_t count);
jv fx_jstr_split(jctx *c, jstr s, const jv *sep, int64_t maxsplit);
jv fx_jdict_items(jctx *c, const jdict *d);
jv fx_jmkstr(const jout *o);
size_t fx_jchar_len(const char *p, size_t n);
/* An argument by position or keyword name (NULL: positional only);
 * NULL when absent. */
const jv *fx_jarg(const jv *args, size_t n, size_t pos, const jstr *kwn,
               const jv *kwv, size_t nkw, const char *name);
const jv *fx_jkwarg(const jstr *kwn, const jv *kwv, size_t nkw, const char *name);

static inline bool jv_is_intlike(const jv *v) {
    return v->t == JV_INT || v->t == JV_BOOL;
}
static inline int64_t jv_as_int(const jv *v) {
    return v->t == JV_INT ? v->u.i : v->u.b;
}

static inline bool jstr_eq(jstr s, const char *lit) {
    size_t n = 0;
    while (lit[n]) n++;
    if (s.n != n) return false;
    for (size_t i = 0; i < n; i++)
        if (s.p[i] != lit[i]) return false;
    return true;
}

#endif /* FX_JINJA_INT_H */
