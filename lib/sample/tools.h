/*
 * tools: the grammar of a tool call, for a lazy grammar that starts when
 * the model writes its family's tool-call marker (fx_tools_to_grammar in
 * ferrox.h). Built on json_schema: one schema for "any of the tools with
 * its arguments", wrapped in the family's markers.
 */
#ifndef FX_TOOLS_H
#define FX_TOOLS_H

#include "../core/core.h"

#define FX_TOOLS_MAX 128u        /* tools in one grammar */
#define FX_TOOL_NAME_MAX 64u     /* bytes of a tool's name */

/* On success *out is NUL-terminated GBNF (root rule "root") allocated with
 * alloc, *out_len its length. Errors: FX_ERR_INVALID_ARG (no tools, too
 * many, a bad name, an unknown format, or a parameters schema outside the
 * converter's subset: the message names the tool), FX_ERR_NOMEM. */
fx_status fx_tools_to_gbnf(const fx_alloc *alloc, const fx_tool *tools,
                           size_t n_tools, fx_tool_format format, char **out,
                           size_t *out_len, fx_error *err);

#endif /* FX_TOOLS_H */
