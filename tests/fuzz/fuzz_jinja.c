/*
 * fuzz_jinja: the chat-template interpreter (lib/chat/jinja*.c,
 * docs/reliability.md G) on arbitrary template text and JSON context.
 * Besides "no crash, no leak, no UB, no hang":
 *   - the status is one of OK, BAD_TEMPLATE, TOO_LARGE, NOMEM, INVALID_ARG
 *     (the last only for a bad context), and a failure leaves no output;
 *   - a rendered text is NUL-terminated with no NUL inside and within
 *     the output cap;
 *   - fx_jinja_check agrees with rendering on whether the template parses:
 *     a render never succeeds where the check failed, and a parse error
 *     from the check is the one rendering reports.
 *
 * Input:
 *   byte 0     bit 0: add_generation_prompt; bit 1: the template keeps its
 *              NUL bytes (the rest of the input is all template); bit 2:
 *              strftime_now defined
 *   the rest   template text, then (unless bit 1) after the first NUL byte
 *              a JSON object of extra variables
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "chat/jinja.h"

static fx_alloc alloc;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    if (fx_alloc_init(&alloc, NULL) != FX_OK) abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t flags = data[0];
    const char *text = (const char *)data + 1;
    size_t len = size - 1, extra_len = 0;
    const char *extra = NULL;
    if (!(flags & 2)) {
        const char *nul = memchr(text, '\0', len);
        if (nul) {
            extra = nul + 1;
            extra_len = len - (size_t)(extra - text);
            len = (size_t)(nul - text);
        }
    }
    static const fx_chat_msg msgs[] = {
        { FX_CHAT_ROLE_SYSTEM, "sys", 3 },
        { FX_CHAT_ROLE_USER, "Hello \xff", 7 },
        { FX_CHAT_ROLE_ASSISTANT, "<think>r</think> A", 18 },
    };
    fx_jinja_limits lim;
    fx_jinja_limits_default(&lim);
    /* Small budgets keep each input fast; the bounds are what is tested. */
    lim.max_steps = 200000;
    lim.max_output = 1 << 20;
    lim.max_memory = 16 << 20;
    fx_jinja_input in = { 0 };
    in.tmpl = text;
    in.tmpl_len = len;
    in.msgs = extra ? NULL : msgs;
    in.n_msgs = extra ? 0 : 3;
    in.bos = "<s>";
    in.bos_len = 3;
    in.eos = "</s>";
    in.eos_len = 4;
    in.add_generation_prompt = flags & 1;
    in.has_clock = (flags & 4) != 0;
    in.now = 1721952000;
    in.extra_json = extra;
    in.extra_len = extra_len;
    if (extra && (extra_len == 0 || !memchr(extra, '"', extra_len))) {
        /* No "messages" possible: give the fixed conversation instead. */
        in.msgs = msgs;
        in.n_msgs = 3;
    }

    fx_error err;
    fx_error_clear(&err);
    char *out = (char *)&alloc; /* must be reset to NULL on failure */
    size_t out_len = 7;
    fx_status st = fx_jinja_render(&alloc, &in, &lim, &out, &out_len, &err);
    FX_FUZZ_CHECK(st == FX_OK || st == FX_ERR_BAD_TEMPLATE ||
                  st == FX_ERR_TOO_LARGE || st == FX_ERR_NOMEM ||
                  st == FX_ERR_INVALID_ARG);
    fx_error check_err;
    fx_error_clear(&check_err);
    fx_status parsed = fx_jinja_check(&alloc, text, len, &check_err);
    FX_FUZZ_CHECK(parsed == FX_OK || parsed == FX_ERR_BAD_TEMPLATE ||
                  parsed == FX_ERR_TOO_LARGE || parsed == FX_ERR_NOMEM);
    if (st == FX_OK) {
        FX_FUZZ_CHECK(out != NULL);
        FX_FUZZ_CHECK(out[out_len] == '\0');
        FX_FUZZ_CHECK(strlen(out) == out_len);
        FX_FUZZ_CHECK(parsed == FX_OK);
        /* The cap grows with the input (fx_jinja_render). */
        FX_FUZZ_CHECK(out_len <= lim.max_output + 4 * (size + 64));
        fx_free(&alloc, out);
    } else {
        FX_FUZZ_CHECK(out == NULL && out_len == 0);
        /* The template is parsed before the context is read, so a parse
         * error is what rendering reports (the render's smaller budgets
         * may end it first). */
        if (parsed == FX_ERR_BAD_TEMPLATE && st == FX_ERR_BAD_TEMPLATE)
            FX_FUZZ_CHECK(strcmp(err.message, check_err.message) == 0);
        if (parsed == FX_ERR_BAD_TEMPLATE)
            FX_FUZZ_CHECK(st == FX_ERR_BAD_TEMPLATE || st == FX_ERR_TOO_LARGE);
    }
    return 0;
}
