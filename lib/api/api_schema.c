/*
 * Public JSON Schema entry point: argument checks and the buffer contract
 * of fx_chat_apply_template. The work is in lib/sample/json_schema.c.
 */
#include <string.h>

#include "api_internal.h"
#include "../sample/json_schema.h"

fx_status fx_json_schema_to_grammar(const char *schema, size_t schema_len,
                                    char *buf, size_t buf_size, size_t *needed,
                                    char *errbuf, size_t errbuf_size) {
    fx_error err;
    fx_error_clear(&err);
    fx_status st;
    char *gbnf = NULL;
    size_t len = 0;
    if (needed) *needed = 0;
    if (errbuf && errbuf_size > 0) errbuf[0] = '\0';
    if (buf && buf_size > 0) buf[0] = '\0';
    fx_alloc alloc;
    if (!schema || (!buf && buf_size > 0)) {
        st = fx_fail(&err, FX_ERR_INVALID_ARG, "json schema: NULL schema, or "
                     "a NULL buffer with a size");
    } else if ((st = fx_alloc_init(&alloc, NULL)) == FX_OK) {
        if (schema_len == 0) schema_len = strlen(schema);
        st = fx_json_schema_to_gbnf(&alloc, schema, schema_len, &gbnf, &len, &err);
        if (st == FX_OK)
            st = fx_api_hand_over(&alloc, gbnf, len, buf, buf_size, needed,
                                  "json schema", &err);
    }
    if (st != FX_OK) fx_error_copy(&err, errbuf, errbuf_size);
    return st;
}

fx_status fx_api_hand_over(const fx_alloc *alloc, char *text, size_t len,
                           char *buf, size_t buf_size, size_t *needed,
                           const char *what, fx_error *err) {
    fx_status st = FX_OK;
    if (needed) *needed = len + 1;
    if (len + 1 > buf_size)
        st = fx_fail(err, FX_ERR_BUFFER_TOO_SMALL, "%s: the grammar needs %zu bytes",
                     what, len + 1);
    else
        memcpy(buf, text, len + 1);
    fx_free(alloc, text);
    return st;
}
