/*
 * jinja entry points: limits, the variables a chat template sees (as
 * transformers' apply_chat_template passes them), and the one setjmp that
 * every failure unwinds to.
 */
#include "jinja_int.h"

#include <string.h>

/* Budgets grow with the input so that a long conversation is never
 * refused, while a short template cannot make much of nothing. */
#define BASE_STEPS ((uint64_t)20 * 1000 * 1000)
#define BASE_OUTPUT ((size_t)16 << 20)
#define BASE_MEMORY ((size_t)64 << 20)
#define MAX_DEPTH 64

void fx_jinja_limits_default(fx_jinja_limits *limits) {
    limits->max_steps = BASE_STEPS;
    limits->max_depth = MAX_DEPTH;
    limits->max_output = BASE_OUTPUT;
    limits->max_memory = BASE_MEMORY;
}

static size_t sat_add(size_t a, size_t b) { return a > SIZE_MAX - b ? SIZE_MAX : a + b; }
static size_t sat_mul(size_t a, size_t b) {
    return (b && a > SIZE_MAX / b) ? SIZE_MAX : a * b;
}

/* The template must be text: UTF-8 without NUL bytes. */
static void check_text(jctx *c, const char *s, size_t n) {
    uint32_t line = 1, col = 1;
    for (size_t i = 0; i < n;) {
        unsigned char b = (unsigned char)s[i];
        size_t k = b < 0x80 ? 1 : b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc2 ? 2 : 0;
        bool ok = k > 0 && b <= 0xf4 && i + k <= n;
        for (size_t j = 1; ok && j < k; j++)
            ok = ((unsigned char)s[i + j] & 0xc0) == 0x80;
        if (ok && k == 3) {
            unsigned char b1 = (unsigned char)s[i + 1];
            ok = !(b == 0xe0 && b1 < 0xa0) && !(b == 0xed && b1 >= 0xa0);
        } else if (ok && k == 4) {
            unsigned char b1 = (unsigned char)s[i + 1];
            ok = !(b == 0xf0 && b1 < 0x90) && !(b == 0xf4 && b1 >= 0x90);
        }
        if (!ok) fx_jfail_at(c, line, col, "the template is not valid UTF-8");
        if (b == 0) fx_jfail_at(c, line, col, "the template contains a NUL byte");
        if (b == '\n') { line++; col = 0; }
        col++;
        i += k;
    }
}

static jv messages_value(jctx *c, const fx_jinja_input *in) {
    static const char *const roles[] = { "system", "user", "assistant" };
    jv list = fx_jv_newlist(c, in->n_msgs);
    for (size_t i = 0; i < in->n_msgs; i++) {
        fx_jstep(c, 1);
        const fx_chat_msg *m = &in->msgs[i];
        jv d = fx_jv_newdict(c, 2);
        int role = m->role >= 0 && m->role <= 2 ? m->role : 1;
        fx_jdict_set(c, d.u.d, fx_jv_cstr("role"), fx_jv_cstr(roles[role]));
        fx_jdict_set(c, d.u.d, fx_jv_cstr("content"), fx_jv_str(m->content, m->len));
        fx_jlist_push(c, list.u.l, d);
    }
    return list;
}

static void setv(jctx *c, const char *name, jv v) {
    fx_jscope_set(c, c->globals, (jstr){ name, strlen(name) }, v);
}

fx_status fx_jinja_render(const fx_alloc *alloc, const fx_jinja_input *in,
                          const fx_jinja_limits *limits, char **out,
                          size_t *out_len, fx_error *err) {
    *out = NULL;
    *out_len = 0;
    fx_jinja_limits lim = *limits;
    size_t input = sat_add(in->tmpl_len, in->extra_len);
    for (size_t i = 0; i < in->n_msgs; i++)
        input = sat_add(input, in->msgs[i].len);
    /* The caller's limits are a floor; a long conversation gets room. */
    lim.max_output = sat_add(lim.max_output, sat_mul(input, 4));
    lim.max_memory = sat_add(lim.max_memory, sat_mul(input, 16));
    /* Each message also costs its dict and the text around it. */
    lim.max_output = sat_add(lim.max_output, sat_mul(in->n_msgs, 256));
    lim.max_memory = sat_add(lim.max_memory, sat_mul(in->n_msgs, 1024));
    uint64_t extra_steps = (uint64_t)in->n_msgs * 2000 + input / 16;
    lim.max_steps = lim.max_steps > UINT64_MAX - extra_steps
                        ? UINT64_MAX : lim.max_steps + extra_steps;

    /* volatile: read after longjmp returns to this frame. */
    jctx *volatile c = fx_malloc(alloc, sizeof(jctx));
    if (!c) return fx_fail(err, FX_ERR_NOMEM, "chat template: out of memory");
    memset((void *)c, 0, sizeof(jctx));
    c->arena.alloc = alloc;
    c->arena.cap = lim.max_memory;
    c->err = err;
    c->lim = &lim;
    c->has_clock = in->has_clock;
    c->now = in->now;
    fx_status st = FX_OK;
    if (setjmp(c->fail) == 0) {
        check_text(c, in->tmpl, in->tmpl_len);
        jnode *root = fx_jparse(c, in->tmpl, in->tmpl_len);
        c->globals = fx_jscope_new(c, NULL);
        setv(c, "messages", messages_value(c, in));
        /* transformers passes tools and documents, None when not given. */
        setv(c, "tools", fx_jv_none());
        setv(c, "documents", fx_jv_none());
        setv(c, "add_generation_prompt", fx_jv_bool(in->add_generation_prompt));
        setv(c, "bos_token", fx_jv_str(in->bos, in->bos_len));
        setv(c, "eos_token", fx_jv_str(in->eos, in->eos_len));
        if (in->extra_json) {
            jv extra = fx_jv_parse_json(c, in->extra_json, in->extra_len,
                                     "extra context");
            if (extra.t != JV_DICT)
                fx_jfail(c, FX_ERR_INVALID_ARG, "extra context: the JSON must "
                      "be an object");
            bool has_messages = fx_jdict_gets(extra.u.d, "messages", 8) != NULL;
            if (has_messages && in->n_msgs)
                fx_jfail(c, FX_ERR_INVALID_ARG, "messages given twice: as "
                      "messages and in the context's \"messages\"");
            if (!has_messages && !in->n_msgs)
                fx_jfail(c, FX_ERR_INVALID_ARG, "no messages: neither given "
                      "nor in the context's \"messages\"");
            for (size_t i = 0; i < extra.u.d->n; i++) {
                if (extra.u.d->k[i].t == JV_STR)
                    fx_jscope_set(c, c->globals, extra.u.d->k[i].u.s,
                               extra.u.d->v[i]);
            }
        }
        c->top = fx_jscope_new(c, c->globals);
        jout o = { 0 };
        c->out = &o;
        fx_jexec(c, c->top, root);
        if (o.n && memchr(o.p, '\0', o.n))
            fx_jfail(c, FX_ERR_BAD_TEMPLATE, "the rendered text contains a NUL "
                  "byte");
        char *text = fx_malloc(alloc, o.n + 1);
        if (!text) fx_jfail(c, FX_ERR_NOMEM, "out of memory for the prompt");
        if (o.n) memcpy(text, o.p, o.n);
        text[o.n] = '\0';
        *out = text;
        *out_len = o.n;
    } else {
        st = c->status;
    }
    fx_jarena_free(&c->arena);
    fx_free(alloc, (void *)c);
    return st;
}

fx_status fx_jinja_check(const fx_alloc *alloc, const char *text, size_t len,
                         fx_error *err) {
    fx_jinja_limits lim;
    fx_jinja_limits_default(&lim);
    jctx *volatile c = fx_malloc(alloc, sizeof(jctx));
    if (!c) return fx_fail(err, FX_ERR_NOMEM, "chat template: out of memory");
    memset((void *)c, 0, sizeof(jctx));
    c->arena.alloc = alloc;
    c->arena.cap = sat_add(lim.max_memory, sat_mul(len, 16));
    c->err = err;
    c->lim = &lim;
    fx_status st = FX_OK;
    if (setjmp(c->fail) == 0) {
        check_text(c, text, len);
        fx_jparse(c, text, len);
    } else {
        st = c->status;
    }
    fx_jarena_free(&c->arena);
    fx_free(alloc, (void *)c);
    return st;
}
