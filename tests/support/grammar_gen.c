#include "grammar_gen.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct sb {
    char *p;
    size_t len, cap;
} sb;

static void sb_printf(sb *b, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0,
                          fmt, ap);
        va_end(ap);
        if (n < 0) abort();
        if (b->p && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->len + (size_t)n + 1) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) abort(); /* test code: out of memory ends the program */
        b->p = q;
        b->cap = cap;
    }
}

static char *sb_done(sb *b, size_t *len) {
    *len = b->len;
    return b->p;
}

/* n rules each calling the next, then an "a"; `after` follows each call
 * (empty: the call is in tail position). */
static char *chain(unsigned n, const char *after, size_t *len) {
    sb b = {0};
    sb_printf(&b, "root ::= r0\n");
    for (unsigned k = 0; k < n; k++) sb_printf(&b, "r%u ::= r%u%s\n", k, k + 1, after);
    sb_printf(&b, "r%u ::= \"a\"\n", n);
    return sb_done(&b, len);
}

char *gg_chain(unsigned n, size_t *len) { return chain(n, " \"a\"?", len); }

char *gg_tail_chain(unsigned n, size_t *len) { return chain(n, "", len); }

char *gg_wide(unsigned k, size_t *len) {
    sb b = {0};
    sb_printf(&b, "root ::= \"x0\"");
    for (unsigned i = 1; i < k; i++) sb_printf(&b, " | \"x%u\"", i);
    sb_printf(&b, "\n");
    return sb_done(&b, len);
}

char *gg_nest(unsigned depth, size_t *len) {
    sb b = {0};
    sb_printf(&b, "root ::= ");
    for (unsigned i = 0; i < depth; i++) sb_printf(&b, "(");
    sb_printf(&b, "\"a\"");
    for (unsigned i = 0; i < depth; i++) sb_printf(&b, ")");
    sb_printf(&b, "\n");
    return sb_done(&b, len);
}

char *gg_repeat_block(unsigned n, unsigned count, size_t *len) {
    sb b = {0};
    sb_printf(&b, "root ::= \"b\" | \"");
    for (unsigned i = 0; i < n; i++) sb_printf(&b, "a");
    sb_printf(&b, "\"{%u}\n", count);
    return sb_done(&b, len);
}
