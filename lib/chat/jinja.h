/*
 * jinja: a bounded interpreter for the Jinja subset chat templates use.
 *
 * It renders a model's tokenizer.chat_template as Hugging Face
 * transformers' apply_chat_template does: jinja2 with trim_blocks and
 * lstrip_blocks, the loopcontrols extension, and transformers' globals
 * raise_exception and strftime_now and its tojson filter. Everything a
 * render allocates comes from one arena with a byte cap, work is counted
 * against a step budget, and nesting (parser and macro calls) against a
 * depth limit, so a hostile template ends in a status, never a crash or a
 * hang: FX_ERR_BAD_TEMPLATE (syntax, runtime errors, raise_exception and
 * exhausted budgets, with line:column), FX_ERR_TOO_LARGE (output or
 * memory cap), FX_ERR_NOMEM (the allocator said no).
 */
#ifndef FX_JINJA_H
#define FX_JINJA_H

#include "chat.h"

typedef struct fx_jinja_limits {
    uint64_t max_steps;   /* evaluation steps (nodes, loop iterations,
                             bytes copied / 64) */
    uint32_t max_depth;   /* parser nesting and macro call depth */
    size_t max_output;    /* bytes of rendered text */
    size_t max_memory;    /* bytes the arena may take from the allocator */
} fx_jinja_limits;

/* The limits fx_chat_apply uses: room for any real template and a
 * conversation of some megabytes, far below what would hurt a host. */
void fx_jinja_limits_default(fx_jinja_limits *limits);

typedef struct fx_jinja_input {
    const char *tmpl;          /* template text, UTF-8 */
    size_t tmpl_len;
    const fx_chat_msg *msgs;   /* role/content messages; ignored when
                                  extra_json has "messages" */
    size_t n_msgs;
    const char *bos, *eos;     /* bos_token / eos_token texts */
    size_t bos_len, eos_len;
    bool add_generation_prompt;
    /* A JSON object whose members become template variables (tools,
     * enable_thinking, messages with arbitrary fields ...); NULL for none. */
    const char *extra_json;
    size_t extra_len;
    /* strftime_now: defined when has_clock, formatting `now` (seconds
     * since the epoch, UTC). Undefined otherwise, as templates test. */
    bool has_clock;
    int64_t now;
} fx_jinja_input;

/* Renders in->tmpl. On FX_OK *out is a NUL-terminated text of *out_len
 * bytes allocated with alloc (the caller frees it with fx_free). */
fx_status fx_jinja_render(const fx_alloc *alloc, const fx_jinja_input *in,
                          const fx_jinja_limits *limits, char **out,
                          size_t *out_len, fx_error *err);

/* Checks that text[0..len) parses as a template (no rendering). */
fx_status fx_jinja_check(const fx_alloc *alloc, const char *text, size_t len,
                         fx_error *err);

#endif /* FX_JINJA_H */
