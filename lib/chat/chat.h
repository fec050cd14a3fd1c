/*
 * chat: chat templates.
 *
 * A model's tokenizer.chat_template is a Jinja program; template text is
 * run by the interpreter in jinja.h, exactly as transformers'
 * apply_chat_template renders it. Family names ("chatml", "llama3", ...)
 * select hand-written C renderers of each family's published template
 * (chat_render.c), which allocate nothing and keep two documented
 * departures (a system prompt for Gemma 1/2 and Mistral v0.2). Template
 * text is also matched against the families' distinctive substrings (as
 * llama.cpp's llm_chat_detect_template does), only to name it and to know
 * its end-of-turn texts; a template that matches none is "jinja".
 */
#ifndef FX_CHAT_H
#define FX_CHAT_H

#include "../core/core.h"

typedef enum fx_chat_family {
    FX_CHAT_CHATML = 0,      /* <|im_start|>role\n...<|im_end|>\n */
    FX_CHAT_PHI4,            /* <|im_start|>role<|im_sep|>...<|im_end|> */
    FX_CHAT_LLAMA2,          /* <s>[INST] <<SYS>>..<</SYS>> .. [/INST] .. </s> */
    FX_CHAT_MISTRAL,         /* HF Mistral-7B-Instruct v0.2: [INST] .. [/INST] */
    FX_CHAT_MISTRAL_V1,      /* mistralai v1: " [INST] " .. " [/INST]" */
    FX_CHAT_MISTRAL_V3,      /* mistralai v3: "[INST] " .. "[/INST]" */
    FX_CHAT_MISTRAL_V3_TEKKEN, /* mistralai v3-tekken: "[INST]" .. "[/INST]" */
    FX_CHAT_LLAMA3,          /* Llama 3: <|start_header_id|>role<|end_header_id|> */
    FX_CHAT_LLAMA31,         /* Llama 3.1/3.2/3.3: llama3 + knowledge-date system */
    FX_CHAT_PHI3,            /* <|role|>\n...<|end|>\n */
    FX_CHAT_ZEPHYR,          /* <|role|>\n...EOS\n (zephyr, TinyLlama-Chat) */
    FX_CHAT_GEMMA,           /* <start_of_turn>role\n...<end_of_turn>\n */
    FX_CHAT_DEEPSEEK,        /* deepseek-coder: ### Instruction: / ### Response: */
    FX_CHAT_DEEPSEEK3,       /* DeepSeek V3/R1: <|User|>, fullwidth bars */
    FX_CHAT_VICUNA,          /* USER: / ASSISTANT:, system as a plain line */
    FX_CHAT_VICUNA_ORCA,     /* USER: / ASSISTANT:, with SYSTEM: */
    FX_CHAT_QWEN3,           /* chatml with Qwen3's <think> handling */
    FX_CHAT_FAMILY_COUNT
} fx_chat_family;

/* A recognized template. Spans point into the caller's template text and
 * are valid only as long as it is. */
typedef struct fx_chat_tmpl {
    fx_chat_family family;
    bool lead_bos;           /* the template renders bos_token first */
    bool eos_without_prompt; /* phi3: renders eos_token when no assistant
                                opener is asked for */
    bool skip_empty_system;  /* phi3.5: a system message with empty
                                content renders nothing */
    /* A default system prompt the template renders when the conversation
     * has none (Qwen2.5, SmolLM2, deepseek-coder), as the body of a Jinja
     * string literal: escapes (\n, \\, \') still to be decoded. */
    const char *default_system;
    size_t default_system_len;
    bool think_opener;       /* deepseek3: the opener is followed by
                                "<think>\n" (R1 re-release) */
    /* zephyr: the end-of-message text when the template writes it
     * literally (stablelm-zephyr's <|endoftext|>) rather than eos_token. */
    const char *eos_literal;
    /* Template text rather than a family name: rendered by the Jinja
     * interpreter. family is then the family it resembles, or
     * FX_CHAT_FAMILY_COUNT when it resembles none. */
    bool jinja;
    const char *text;
    size_t text_len;
} fx_chat_tmpl;

/* BOS/EOS token texts (the model's, or NULL for the family default). */
typedef struct fx_chat_specials {
    const char *bos;
    size_t bos_len;
    const char *eos;
    size_t eos_len;
} fx_chat_specials;

/* A message already validated by the caller (see fx_chat_check_messages). */
typedef struct fx_chat_msg {
    int role;                /* FX_CHAT_ROLE_* */
    const char *content;
    size_t len;
} fx_chat_msg;

enum { FX_CHAT_ROLE_SYSTEM = 0, FX_CHAT_ROLE_USER = 1,
       FX_CHAT_ROLE_ASSISTANT = 2 };

/* "chatml", "llama2", ...; NULL for a value out of range. */
const char *fx_chat_family_str(fx_chat_family family);

/* Recognizes text[0..len): a family name (exactly as fx_chat_family_str
 * spells it) selects that family's C renderer; anything else is template
 * text for the interpreter (jinja set), its family guessed from markers.
 * FX_ERR_BAD_TEMPLATE only for an empty text; whether template text
 * parses is fx_jinja_check's to say. */
fx_status fx_chat_tmpl_detect(const char *text, size_t len, fx_chat_tmpl *out,
                              fx_error *err);

/* Checks the public messages and converts them: FX_ERR_INVALID_ARG for an
 * empty list, a NULL role or content, an unknown role, or a NUL inside an
 * explicit content length. */
fx_status fx_chat_check_messages(const fx_chat_message *msgs, size_t n_msgs,
                                 fx_chat_msg *out, fx_error *err);

/* Renders msgs[0..n) into buf (NUL-terminated) and sets *needed to the
 * size needed including the NUL. flags are the public FX_CHAT_* bits.
 * FX_ERR_BUFFER_TOO_SMALL leaves buf as "" (when buf_size > 0);
 * FX_ERR_BAD_TEMPLATE when the family's template would raise an exception
 * for this conversation (e.g. roles that do not alternate);
 * FX_ERR_TOO_LARGE if the size overflows size_t. */
fx_status fx_chat_render(const fx_chat_tmpl *tmpl, const fx_chat_specials *sp,
                         const fx_chat_msg *msgs, size_t n, uint32_t flags,
                         char *buf, size_t buf_size, size_t *needed,
                         fx_error *err);

/* The BOS/EOS texts a family's tokenizer uses, for rendering without a
 * model ("<s>"/"</s>" for a family out of range). Static strings. */
void fx_chat_family_specials(fx_chat_family family, const char **bos,
                             const char **eos);

/* The end-of-turn marker a template writes after an assistant message,
 * found by rendering [user "x", assistant "y"] and taking the special-
 * token-looking text (<|...|>, <...>, [...] or eos) that follows "y".
 * Writes it NUL-terminated to out; returns its length, 0 when none was
 * found (or it does not fit in cap). */
size_t fx_chat_derive_stop(const fx_alloc *alloc, const char *tmpl,
                           size_t tmpl_len, const char *bos, size_t bos_len,
                           const char *eos, size_t eos_len, char *out,
                           size_t cap);

/* A static copy of text[0..len) when it is a well-known end-of-turn
 * marker, else NULL (fx_chat_stop_strings returns static strings). */
const char *fx_chat_known_stop(const char *text, size_t len);

/* The texts that end a turn in this family, most specific first (e.g.
 * "<|im_end|>", "<|endoftext|>"). Static strings; returns the count. */
size_t fx_chat_stop_texts(const fx_chat_tmpl *tmpl, const char **out,
                          size_t cap);

/* Python str.strip() semantics, as Jinja's `trim` filter and `.strip()`
 * have them: Unicode whitespace, not just ASCII (exposed for tests). */
void fx_chat_strip(const char **s, size_t *len, bool left, bool right);

#endif /* FX_CHAT_H */
