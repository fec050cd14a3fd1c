/*
 * json_schema: JSON Schema to GBNF text that fx_grammar_compile accepts.
 *
 * The subset (what structured-output users write, and what llama.cpp's
 * converter takes), documented for users at fx_json_schema_to_grammar in
 * ferrox.h: type (one or a list), properties / required /
 * additionalProperties, items / prefixItems / minItems / maxItems,
 * minLength / maxLength, enum, const, anyOf / oneOf / allOf (several
 * object schemas merge), $ref to "#..." JSON pointers ($defs,
 * definitions) including recursion, boolean schemas, integer and number
 * bounds (json_schema_num.c), pattern and format (json_schema_regex.c).
 * Annotations (title, description, other formats, default, ...) and
 * unknown keywords are ignored, as the specification asks; keywords
 * that constrain values in ways a context-free grammar cannot follow
 * cheaply (multipleOf, uniqueItems, not, ...) are errors naming the
 * keyword and where it is, never silently dropped.
 */
#ifndef FX_JSON_SCHEMA_H
#define FX_JSON_SCHEMA_H

#include "../core/core.h"

/* On success *out is NUL-terminated GBNF (root rule "root") allocated with
 * alloc, *out_len its length. Errors: FX_ERR_INVALID_ARG (not JSON, or a
 * schema outside the subset; the message says where), FX_ERR_NOMEM. */
fx_status fx_json_schema_to_gbnf(const fx_alloc *alloc, const char *schema,
                                 size_t len, char **out, size_t *out_len,
                                 fx_error *err);

#endif /* FX_JSON_SCHEMA_H */
