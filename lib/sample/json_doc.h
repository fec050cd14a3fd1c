/*
 * json_doc: a small read-only JSON document (RFC 8259) for the schema
 * converter. Nodes live in one array and refer to each other by index, so
 * growing the array never leaves a dangling pointer; strings are unescaped
 * into one byte buffer, numbers keep their source text (no strtod: its
 * decimal point follows the host's locale, which a game may have changed).
 */
#ifndef FX_JSON_DOC_H
#define FX_JSON_DOC_H

#include "../core/core.h"

#define FX_JSON_MAX_DEPTH 64u
#define FX_JSON_MAX_TEXT (1u << 20)
#define FX_JSON_NONE 0xFFFFFFFFu

typedef enum fx_jtype {
    FX_J_NULL, FX_J_FALSE, FX_J_TRUE, FX_J_NUMBER, FX_J_STRING, FX_J_ARRAY,
    FX_J_OBJECT
} fx_jtype;

/* Arrays chain their elements through `next`; objects chain their members,
 * each a node holding the key (str_off/str_len) whose `value` is the
 * member's value node. */
typedef struct fx_jnode {
    uint32_t type;        /* fx_jtype, or FX_J_MEMBER for an object member */
    uint32_t first;       /* first element or member; FX_JSON_NONE */
    uint32_t next;        /* next sibling; FX_JSON_NONE */
    uint32_t value;       /* a member's value */
    uint32_t count;       /* elements or members */
    uint32_t str_off;     /* string, key: bytes in fx_jdoc.strings; */
    uint32_t str_len;     /*   number: its source text, copied there */
} fx_jnode;

#define FX_J_MEMBER 7u

typedef struct fx_jdoc {
    fx_alloc alloc;
    fx_jnode *nodes;
    uint32_t n_nodes, cap_nodes;
    char *strings;
    uint32_t n_strings, cap_strings;
    uint32_t root;
} fx_jdoc;

/* Parses text (exactly one value, whitespace around it allowed). Errors:
 * FX_ERR_INVALID_ARG with "line L, column C: ..." for bad JSON,
 * FX_ERR_NOMEM. *doc is freed with fx_jdoc_free either way. */
fx_status fx_jdoc_parse(fx_jdoc *doc, const fx_alloc *alloc, const char *text,
                        size_t len, fx_error *err);
void fx_jdoc_free(fx_jdoc *doc);

static inline const fx_jnode *fx_jdoc_node(const fx_jdoc *d, uint32_t i) {
    return &d->nodes[i];
}
static inline const char *fx_jdoc_str(const fx_jdoc *d, const fx_jnode *n) {
    return d->strings + n->str_off;
}
/* The member value of object `obj` named key, or FX_JSON_NONE. */
uint32_t fx_jdoc_get(const fx_jdoc *d, uint32_t obj, const char *key);
/* A number node that is a non-negative integer below 2^32: 1 and *out. */
int fx_jdoc_uint(const fx_jdoc *d, uint32_t node, uint32_t *out);

#endif /* FX_JSON_DOC_H */
