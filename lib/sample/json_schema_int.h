/*
 * json_schema_int: what the converter's files share (json_schema.c walks
 * the schema and builds objects and arrays, json_schema_num.c integer and
 * number ranges, json_schema_regex.c patterns and formats). Internal to
 * lib/sample; external names carry fx_js_ (the static library exports
 * only fx_ names).
 */
#ifndef FX_JSON_SCHEMA_INT_H
#define FX_JSON_SCHEMA_INT_H

#include "json_doc.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define FX_JS_MAX_REPEAT 1000u  /* FX_GRAMMAR_MAX_REPEAT: minItems & co. */

typedef struct fx_js_buf {
    const fx_alloc *alloc;
    char *p;
    size_t len, cap;
    int failed;
} fx_js_buf;

typedef fx_js_buf sbuf;

static inline void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->failed) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = fx_realloc(b->alloc, b->p, cap);
        if (!p) {
            b->failed = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    /* n == 0 with s NULL happens (an empty buffer appended): memcpy must
     * not see the NULL even for zero bytes (UBSan: nonnull argument). */
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static inline void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static inline void sb_fmt(sbuf *b, const char *fmt, ...) FX_PRINTF(2, 3);
static inline void sb_fmt(sbuf *b, const char *fmt, ...) {
    char tmp[64]; /* rule names and counts only */
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0) sb_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

static inline void sb_free(sbuf *b) {
    fx_free(b->alloc, b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

enum {
    USE_WS = 1u << 0, USE_CHAR = 1u << 1, USE_STRING = 1u << 2,
    USE_NUMBER = 1u << 3, USE_INTEGER = 1u << 4, USE_BOOLEAN = 1u << 5,
    USE_NULL = 1u << 6, USE_VALUE = 1u << 7, USE_DATE = 1u << 8,
    USE_TIME = 1u << 9
};

typedef struct ref_entry {
    uint32_t target; /* schema node */
    uint32_t rule;   /* its rule number */
} ref_entry;

typedef struct fx_js_conv {
    const fx_jdoc *d;
    const fx_alloc *alloc;
    fx_error *err;
    fx_status status;
    sbuf rules;
    uint32_t n_rules;
    unsigned used;
    ref_entry *refs;
    uint32_t n_refs, cap_refs;
    char path[256];
    size_t path_len;
    uint32_t depth;
} conv;

/* Records the first failure (later ones keep it) and returns its status;
 * the message is "json schema at PATH: what detail". */
fx_status fx_js_fail(conv *c, fx_status st, const char *what, const char *detail);
fx_status fx_js_oom(conv *c);

static inline const fx_jnode *N(const conv *c, uint32_t i) { return fx_jdoc_node(c->d, i); }

/* JSON pointer-style location for messages; returns the length that
 * fx_js_path_pop restores. */
size_t fx_js_path_push(conv *c, const char *seg, const char *seg2, size_t seg2_len);
void fx_js_path_pop(conv *c, size_t old);
/* s (n bytes) as a JSON string, quotes included. */
void fx_js_json_string(sbuf *b, const char *s, size_t n);
/* A JSON value, compact. */
void fx_js_json_compact(const conv *c, sbuf *b, uint32_t node);
/* Bytes as a GBNF string literal. */
void fx_js_gbnf_literal(sbuf *out, const char *s, size_t n);
/* An expression (a rule name) standing for the schema at node. */
fx_status fx_js_gen_expr(conv *c, uint32_t node, sbuf *out);
/* The node a "$ref" string (at node) points to. */
fx_status fx_js_resolve(conv *c, uint32_t node, uint32_t *target);

/* An object schema's body: properties / required / additionalProperties
 * (json_schema_obj.c). */
fx_status fx_js_object(conv *c, uint32_t node, sbuf *body);
/* A schema with allOf (the array at all_of): one element is that schema;
 * several object schemas merge into one object. */
fx_status fx_js_all_of(conv *c, uint32_t node, uint32_t all_of, sbuf *body);
/* The body of a number or integer schema with minimum / maximum /
 * exclusiveMinimum / exclusiveMaximum (json_schema_num.c). */
fx_status fx_js_number(conv *c, uint32_t node, int integer, sbuf *body);
/* A string schema's "pattern" (text, n bytes) as the body of a JSON
 * string whose content matches it (json_schema_regex.c). */
fx_status fx_js_pattern(conv *c, const char *text, size_t n, sbuf *body);
/* A string "format" the converter follows: 1 and the body written; 0
 * for a format that is only an annotation. */
int fx_js_format(conv *c, const char *name, size_t n, sbuf *body);

#endif /* FX_JSON_SCHEMA_INT_H */
