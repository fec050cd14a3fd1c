/*
 * Public tool-call grammar entry point: argument checks and the buffer
 * contract of fx_json_schema_to_grammar. The work is in
 * lib/sample/tools.c.
 */
#include <string.h>

#include "api_internal.h"
#include "../sample/tools.h"

fx_status fx_tools_to_grammar(const fx_tool *tools, size_t n_tools,
                              fx_tool_format format, char *buf,
                              size_t buf_size, size_t *needed, char *errbuf,
                              size_t errbuf_size) {
    fx_error err;
    fx_error_clear(&err);
    fx_status st;
    char *gbnf = NULL;
    size_t len = 0;
    if (needed) *needed = 0;
    if (errbuf && errbuf_size > 0) errbuf[0] = '\0';
    if (buf && buf_size > 0) buf[0] = '\0';
    fx_alloc alloc;
    if (!buf && buf_size > 0) {
        st = fx_fail(&err, FX_ERR_INVALID_ARG,
                     "tools: a NULL buffer with a size");
    } else if ((st = fx_alloc_init(&alloc, NULL)) == FX_OK) {
        st = fx_tools_to_gbnf(&alloc, tools, n_tools, format, &gbnf, &len, &err);
        if (st == FX_OK) {
            if (needed) *needed = len + 1;
            if (len + 1 > buf_size) {
                st = FX_ERR_BUFFER_TOO_SMALL;
                fx_fail(&err, st, "tools: the grammar needs %zu bytes", len + 1);
            } else {
                memcpy(buf, gbnf, len + 1);
            }
            fx_free(&alloc, gbnf);
        }
    }
    if (st != FX_OK) fx_error_copy(&err, errbuf, errbuf_size);
    return st;
}
