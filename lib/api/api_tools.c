/*
 * Public tool-call grammar entry point: argument checks and the buffer
 * contract of fx_json_schema_to_grammar. The work is in
 * lib/sample/tools.c.
 */
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
        if (st == FX_OK)
            st = fx_api_hand_over(&alloc, gbnf, len, buf, buf_size, needed,
                                  "tools", &err);
    }
    if (st != FX_OK) fx_error_copy(&err, errbuf, errbuf_size);
    return st;
}
