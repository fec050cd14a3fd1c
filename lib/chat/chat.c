/*
 * chat: family names, template recognition, message checks, stop texts and
 * Python-compatible stripping. Rendering is in chat_render.c.
 */
#include "chat.h"
#include "jinja.h"

#include <string.h>

static const char *const family_names[FX_CHAT_FAMILY_COUNT] = {
    [FX_CHAT_CHATML] = "chatml",
    [FX_CHAT_PHI4] = "phi4",
    [FX_CHAT_LLAMA2] = "llama2",
    [FX_CHAT_MISTRAL] = "mistral",
    [FX_CHAT_MISTRAL_V1] = "mistral-v1",
    [FX_CHAT_MISTRAL_V3] = "mistral-v3",
    [FX_CHAT_MISTRAL_V3_TEKKEN] = "mistral-v3-tekken",
    [FX_CHAT_LLAMA3] = "llama3",
    [FX_CHAT_LLAMA31] = "llama3.1",
    [FX_CHAT_PHI3] = "phi3",
    [FX_CHAT_ZEPHYR] = "zephyr",
    [FX_CHAT_GEMMA] = "gemma",
    [FX_CHAT_DEEPSEEK] = "deepseek",
    [FX_CHAT_DEEPSEEK3] = "deepseek3",
    [FX_CHAT_VICUNA] = "vicuna",
    [FX_CHAT_VICUNA_ORCA] = "vicuna-orca",
    [FX_CHAT_QWEN3] = "qwen3",
};

const char *fx_chat_family_str(fx_chat_family family) {
    if ((unsigned)family >= FX_CHAT_FAMILY_COUNT) return NULL;
    return family_names[family];
}

/* The default system prompt of deepseek-coder-instruct's template, as the
 * body of its Jinja string literal (so with the \n escape undecoded, like
 * a span taken from template text). */
static const char deepseek_coder_system[] =
    "You are an AI programming assistant, utilizing the Deepseek Coder "
    "model, developed by Deepseek Company, and you only answer questions "
    "related to computer science. For politically sensitive questions, "
    "security and privacy issues, and other non-computer science questions, "
    "you will refuse to answer\\n";

/* ---- substring search over a text that is not NUL-terminated ---- */

static const char *find_in(const char *hay, size_t hay_len, const char *needle) {
    size_t n = strlen(needle);
    if (n == 0 || n > hay_len) return NULL;
    for (size_t i = 0; i + n <= hay_len; i++) {
        if (hay[i] == needle[0] && memcmp(hay + i, needle, n) == 0)
            return hay + i;
    }
    return NULL;
}

static bool has(const char *t, size_t len, const char *needle) {
    return find_in(t, len, needle) != NULL;
}

/* A newline inside a Jinja string literal is written either as the escape
 * \n or as a raw newline, depending on how the template was typed; both
 * render the same, so markers are tried both ways. `at` points just after
 * a match of the text before the newline; returns how many bytes the
 * newline takes there (0 if none). */
static size_t newline_at(const char *t, size_t len, const char *at) {
    size_t off = (size_t)(at - t);
    if (off < len && t[off] == '\n') return 1;
    if (off + 1 < len && t[off] == '\\' && t[off + 1] == 'n') return 2;
    return 0;
}

/* Finds `prefix` followed by a newline (either form) and returns the text
 * after the newline, or NULL. */
static const char *find_prefix_nl(const char *t, size_t len, const char *prefix,
                                  size_t from) {
    size_t plen = strlen(prefix);
    while (from < len) {
        const char *p = find_in(t + from, len - from, prefix);
        if (!p) return NULL;
        const char *after = p + plen;
        size_t nl = newline_at(t, len, after);
        if (nl) return after + nl;
        from = (size_t)(p - t) + 1;
    }
    return NULL;
}

/* ChatML templates of Qwen2/2.5 and SmolLM2 render a default system turn
 * when the conversation starts without one, written as one literal:
 * '<|im_start|>system\nYou are Qwen, ...<|im_end|>\n'. The span between
 * the newline and <|im_end|> is taken when it stays inside one literal
 * (no quote or brace in it); the tools branch's '<|im_start|>system\n' }}
 * has an empty span and is skipped. */
static void chatml_default_system(const char *t, size_t len, fx_chat_tmpl *out) {
    size_t from = 0;
    for (;;) {
        const char *body = find_prefix_nl(t, len, "<|im_start|>system", from);
        if (!body) return;
        size_t rest = len - (size_t)(body - t);
        const char *end = find_in(body, rest, "<|im_end|>");
        if (end && end > body) {
            bool clean = true;
            for (const char *c = body; c < end; c++) {
                if (*c == '\'' || *c == '"' || *c == '{' || *c == '}' ||
                    *c == '+') {
                    clean = false;
                    break;
                }
            }
            if (clean) {
                out->default_system = body;
                out->default_system_len = (size_t)(end - body);
                return;
            }
        }
        from = (size_t)(body - t);
    }
}

static fx_status refuse(fx_error *err, const char *what) {
    return fx_fail(err, FX_ERR_BAD_TEMPLATE,
                   "chat template not supported: %s; pass a family name "
                   "(chatml, qwen3, llama2, llama3, llama3.1, mistral, "
                   "mistral-v1, mistral-v3, phi3, zephyr, gemma, deepseek, "
                   "deepseek3, vicuna, ...) to choose the format yourself",
                   what);
}

static fx_status detect_mistral(const char *t, size_t len, fx_chat_tmpl *out,
                                fx_error *err) {
    out->lead_bos = has(t, len, "bos_token");
    if (has(t, len, "[SYSTEM_PROMPT]"))
        return refuse(err, "Mistral v7 ([SYSTEM_PROMPT]) templates are not "
                           "implemented");
    if (has(t, len, "<<SYS>>")) {
        /* Only Meta's own Llama 2 template: BOS before every [INST] and
         * stripped contents. FusionNet-, vigogne- and other derivatives
         * differ in spaces, BOS placement and default prompts. */
        if (has(t, len, "bos_token + '[INST] '") &&
            has(t, len, "content.strip()")) {
            out->family = FX_CHAT_LLAMA2;
            return FX_OK;
        }
        return refuse(err, "a Llama 2 style template ([INST], <<SYS>>) that "
                           "is not Meta's Llama-2-chat template");
    }
    if (has(t, len, "[AVAILABLE_TOOLS]")) {
        out->family = (has(t, len, "\"[INST]\" + ") || has(t, len, "'[INST]' + "))
                          ? FX_CHAT_MISTRAL_V3_TEKKEN : FX_CHAT_MISTRAL_V3;
        return FX_OK;
    }
    if (has(t, len, "' [INST] ' + ")) {
        out->family = FX_CHAT_MISTRAL_V1;
        return FX_OK;
    }
    if (has(t, len, "'[INST] ' + message['content'] + ' [/INST]'") &&
        has(t, len, "message['content'] + eos_token")) {
        out->family = FX_CHAT_MISTRAL;
        return FX_OK;
    }
    return refuse(err, "an [INST] template that matches none of the "
                       "Llama 2 / Mistral v1 / v3 / v3-tekken templates");
}

/* Zephyr writes every message as '<|role|>\n' + content + eos_token. The
 * user form is checked exactly, so that Falcon 3 (also <|user|> and
 * <|assistant|>, but a newline after the user turn) is not taken for it. */
static bool zephyr_user_turn(const char *t, size_t len, const char **eos_lit) {
    const char *tails[] = { "' + message['content'] + eos_token",
                            "' + message['content'] + '<|endoftext|>'" };
    size_t from = 0;
    for (;;) {
        const char *after = find_prefix_nl(t, len, "<|user|>", from);
        if (!after) return false;
        size_t rest = len - (size_t)(after - t);
        for (size_t i = 0; i < 2; i++) {
            size_t n = strlen(tails[i]);
            if (rest >= n && memcmp(after, tails[i], n) == 0) {
                *eos_lit = i == 1 ? "<|endoftext|>" : NULL;
                return true;
            }
        }
        from = (size_t)(after - t);
    }
}

static fx_status detect_text(const char *t, size_t len, fx_chat_tmpl *out,
                             fx_error *err) {
    const char *eos_lit = NULL;
    out->lead_bos = has(t, len, "bos_token");

    if (has(t, len, "<|im_start|>")) {
        if (has(t, len, "<end_of_utterance>"))
            return refuse(err, "SmolVLM templates (<end_of_utterance>) are "
                               "not implemented");
        if (has(t, len, "<|im_sep|>")) {
            out->family = FX_CHAT_PHI4;
            return FX_OK;
        }
        /* Qwen3 moves <think> blocks around depending on where the last
         * user query is; other reasoning templates (QwQ, SmolLM3) each do
         * it their own way and are not guessed at. */
        if (has(t, len, "<think>")) {
            if (has(t, len, "last_query_index") &&
                has(t, len, "reasoning_content")) {
                out->family = FX_CHAT_QWEN3;
                return FX_OK;
            }
            return refuse(err, "a ChatML template with its own <think> "
                               "handling that is not Qwen3's");
        }
        out->family = FX_CHAT_CHATML;
        chatml_default_system(t, len, out);
        return FX_OK;
    }
    if (has(t, len, "[INST]")) return detect_mistral(t, len, out, err);
    if (has(t, len, "<|start_header_id|>") && has(t, len, "<|end_header_id|>")) {
        out->family = has(t, len, "Cutting Knowledge Date")
                          ? FX_CHAT_LLAMA31 : FX_CHAT_LLAMA3;
        return FX_OK;
    }
    if (has(t, len, "<|assistant|>") && has(t, len, "<|end|>")) {
        /* The first Phi-3-mini/medium templates had no system branch and
         * wrote the assistant opener after every user turn, whatever
         * add_generation_prompt said (they never read it); they would drop
         * a system message silently. */
        if (!has(t, len, "add_generation_prompt"))
            return refuse(err, "a Phi-3 template without system messages "
                               "(the first Phi-3-mini and -medium releases)");
        out->family = FX_CHAT_PHI3;
        out->eos_without_prompt = has(t, len, "{{ eos_token }}");
        out->skip_empty_system = has(t, len, "'system' and message['content']");
        return FX_OK;
    }
    if (has(t, len, "<|user|>") && has(t, len, "<|assistant|>") &&
        zephyr_user_turn(t, len, &eos_lit)) {
        out->family = FX_CHAT_ZEPHYR;
        out->eos_literal = eos_lit;
        return FX_OK;
    }
    if (has(t, len, "<start_of_turn>")) {
        out->family = FX_CHAT_GEMMA;
        return FX_OK;
    }
    if (has(t, len, "### Instruction:") && has(t, len, "<|EOT|>")) {
        out->family = FX_CHAT_DEEPSEEK;
        if (has(t, len, "You are an AI programming assistant")) {
            out->default_system = deepseek_coder_system;
            out->default_system_len = sizeof deepseek_coder_system - 1;
        }
        return FX_OK;
    }
    /* U+FF5C FULLWIDTH VERTICAL LINE and U+2581 LOWER ONE EIGHTH BLOCK,
     * spelled as bytes so the source stays ASCII. */
    if (has(t, len, "<\xef\xbd\x9cUser\xef\xbd\x9c>") &&
        has(t, len, "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>") &&
        has(t, len, "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence"
                    "\xef\xbd\x9c>")) {
        /* V3.1's thinking switch changes the opener by a variable the
         * host would have to pass; not guessed. */
        if (has(t, len, "thinking"))
            return refuse(err, "DeepSeek V3.1 templates (a thinking switch) "
                               "are not implemented");
        out->family = FX_CHAT_DEEPSEEK3;
        /* R1 and its distills were re-released with a generation prompt
         * that opens the reasoning block. */
        out->think_opener =
            (has(t, len, "Assistant\xef\xbd\x9c><think>\\n") ||
             has(t, len, "Assistant\xef\xbd\x9c><think>\n"));
        return FX_OK;
    }
    if (has(t, len, "USER: ") && has(t, len, "ASSISTANT: ")) {
        out->family = has(t, len, "SYSTEM: ") ? FX_CHAT_VICUNA_ORCA
                                               : FX_CHAT_VICUNA;
        return FX_OK;
    }
    return fx_fail(err, FX_ERR_BAD_TEMPLATE,
                   "chat template not recognized: it has none of the markers "
                   "of a known family (<|im_start|>, [INST], "
                   "<|start_header_id|>, <|user|>, <start_of_turn>, "
                   "### Instruction:, USER:); pass a family name such as "
                   "\"chatml\" or \"llama3\" instead");
}

/* Named families stand for their reference template as published. */
static void named_defaults(fx_chat_family f, fx_chat_tmpl *out) {
    out->family = f;
    switch (f) {
    case FX_CHAT_LLAMA2: case FX_CHAT_MISTRAL: case FX_CHAT_MISTRAL_V1:
    case FX_CHAT_MISTRAL_V3: case FX_CHAT_MISTRAL_V3_TEKKEN:
    case FX_CHAT_LLAMA3: case FX_CHAT_LLAMA31: case FX_CHAT_GEMMA:
    case FX_CHAT_DEEPSEEK: case FX_CHAT_DEEPSEEK3:
        out->lead_bos = true;
        break;
    default:
        break;
    }
    if (f == FX_CHAT_PHI3) out->eos_without_prompt = true;  /* Phi-3.5 */
    if (f == FX_CHAT_PHI3) out->skip_empty_system = true;
    if (f == FX_CHAT_DEEPSEEK) {
        out->default_system = deepseek_coder_system;
        out->default_system_len = sizeof deepseek_coder_system - 1;
    }
}

fx_status fx_chat_tmpl_detect(const char *text, size_t len, fx_chat_tmpl *out,
                              fx_error *err) {
    memset(out, 0, sizeof *out);
    if (!text || len == 0)
        return fx_fail(err, FX_ERR_BAD_TEMPLATE, "chat template is empty");
    for (int f = 0; f < FX_CHAT_FAMILY_COUNT; f++) {
        const char *name = family_names[f];
        if (strlen(name) == len && memcmp(name, text, len) == 0) {
            named_defaults((fx_chat_family)f, out);
            return FX_OK;
        }
    }
    /* Template text: the interpreter renders it whatever it resembles;
     * the family it matches (if any) names it and gives its stop texts. */
    fx_error scratch;
    fx_error_clear(&scratch);
    if (detect_text(text, len, out, &scratch) != FX_OK) {
        memset(out, 0, sizeof *out);
        out->family = FX_CHAT_FAMILY_COUNT;
    }
    out->jinja = true;
    out->text = text;
    out->text_len = len;
    return FX_OK;
}

/* ---- messages ---- */

fx_status fx_chat_check_messages(const fx_chat_message *msgs, size_t n_msgs,
                                 fx_chat_msg *out, fx_error *err) {
    static const char *const roles[] = { "system", "user", "assistant" };
    if (n_msgs == 0)
        return fx_fail(err, FX_ERR_INVALID_ARG, "chat: the message list is "
                       "empty");
    if (!msgs)
        return fx_fail(err, FX_ERR_INVALID_ARG, "chat: messages is NULL");
    for (size_t i = 0; i < n_msgs; i++) {
        const fx_chat_message *m = &msgs[i];
        if (!m->role || !m->content)
            return fx_fail(err, FX_ERR_INVALID_ARG, "chat: message %zu has a "
                           "NULL %s", i, m->role ? "content" : "role");
        int role = -1;
        for (int r = 0; r < 3; r++)
            if (strcmp(m->role, roles[r]) == 0) role = r;
        if (role < 0)
            return fx_fail(err, FX_ERR_INVALID_ARG, "chat: message %zu has "
                           "role \"%.40s\"; the roles are system, user and "
                           "assistant", i, m->role);
        size_t len = m->content_len;
        if (len == 0) {
            len = strlen(m->content);
        } else {
            /* An explicit length must not hide a NUL: the tokenizer and
             * every C consumer of the prompt would cut the text there. */
            const char *nul = memchr(m->content, '\0', len);
            if (nul)
                return fx_fail(err, FX_ERR_INVALID_ARG, "chat: message %zu "
                               "content has a NUL byte at offset %zu", i,
                               (size_t)(nul - m->content));
        }
        out[i].role = role;
        out[i].content = m->content;
        out[i].len = len;
    }
    return FX_OK;
}

/* ---- stop texts ---- */

size_t fx_chat_stop_texts(const fx_chat_tmpl *tmpl, const char **out,
                          size_t cap) {
    const char *list[4] = { 0 };
    size_t n = 0;
    switch (tmpl->family) {
    case FX_CHAT_CHATML: case FX_CHAT_PHI4: case FX_CHAT_QWEN3:
        list[n++] = "<|im_end|>";
        list[n++] = "<|endoftext|>";
        break;
    case FX_CHAT_LLAMA3: case FX_CHAT_LLAMA31:
        list[n++] = "<|eot_id|>";
        list[n++] = "<|eom_id|>";
        list[n++] = "<|end_of_text|>";
        break;
    case FX_CHAT_PHI3:
        list[n++] = "<|end|>";
        list[n++] = "<|endoftext|>";
        break;
    case FX_CHAT_GEMMA:
        list[n++] = "<end_of_turn>";
        list[n++] = "<eos>";
        break;
    case FX_CHAT_DEEPSEEK:
        list[n++] = "<|EOT|>";
        break;
    case FX_CHAT_DEEPSEEK3:
        list[n++] = "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence"
                    "\xef\xbd\x9c>";
        break;
    case FX_CHAT_ZEPHYR:
        list[n++] = tmpl->eos_literal ? tmpl->eos_literal : "</s>";
        break;
    default: /* llama2, mistral*, vicuna*: the SentencePiece EOS */
        list[n++] = "</s>";
        break;
    }
    for (size_t i = 0; i < n && i < cap; i++) out[i] = list[i];
    return n;
}

/* ---- stop texts derived from a template ---- */

/* End-of-turn markers of published templates, so that
 * fx_chat_stop_strings can hand out static strings for derived ones. */
static const char *const known_stops[] = {
    "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end|>", "<end_of_turn>",
    "<|EOT|>", "</s>", "<|endoftext|>", "<|end_of_text|>", "<eos>",
    "<|END_OF_TURN_TOKEN|>", "<|end_of_turn|>", "<|user|>", "<|observation|>",
    "<|message_sep|>", "<|turn_end|>", "<|return|>", "<|end_of_sentence|>",
    "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
};

const char *fx_chat_known_stop(const char *text, size_t len) {
    for (size_t i = 0; i < sizeof known_stops / sizeof known_stops[0]; i++)
        if (strlen(known_stops[i]) == len && memcmp(known_stops[i], text, len) == 0)
            return known_stops[i];
    return NULL;
}

/* The marker at p[0..n): eos, <...> or [...] without blanks inside. */
static size_t marker_at(const char *p, size_t n, const char *eos,
                        size_t eos_len) {
    if (eos_len && n >= eos_len && memcmp(p, eos, eos_len) == 0) return eos_len;
    if (n == 0 || (p[0] != '<' && p[0] != '[')) return 0;
    char close = p[0] == '<' ? '>' : ']';
    for (size_t i = 1; i < n && i < 64; i++) {
        if (p[i] == close) return i > 1 ? i + 1 : 0;
        if (p[i] == ' ' || p[i] == '\n' || p[i] == '\t' || p[i] == p[0]) return 0;
    }
    return 0;
}

size_t fx_chat_derive_stop(const fx_alloc *alloc, const char *tmpl,
                           size_t tmpl_len, const char *bos, size_t bos_len,
                           const char *eos, size_t eos_len, char *out,
                           size_t cap) {
    static const char probe[] = "ferrox-assistant-probe";
    /* A user turn after the assistant's: templates with no end marker of
     * their own (ChatGLM) end the turn with the next role's marker. */
    const fx_chat_msg tries[2][4] = {
        { { FX_CHAT_ROLE_USER, "x", 1 }, { FX_CHAT_ROLE_ASSISTANT, probe,
          sizeof probe - 1 }, { FX_CHAT_ROLE_USER, "z", 1 } },
        { { FX_CHAT_ROLE_SYSTEM, "s", 1 }, { FX_CHAT_ROLE_USER, "x", 1 },
          { FX_CHAT_ROLE_ASSISTANT, probe, sizeof probe - 1 },
          { FX_CHAT_ROLE_USER, "z", 1 } },
    };
    fx_jinja_limits lim;
    fx_jinja_limits_default(&lim);
    for (int t = 0; t < 2; t++) {
        fx_jinja_input in = { 0 };
        in.tmpl = tmpl;
        in.tmpl_len = tmpl_len;
        in.msgs = tries[t];
        in.n_msgs = t == 0 ? 3 : 4;
        in.bos = bos;
        in.bos_len = bos_len;
        in.eos = eos;
        in.eos_len = eos_len;
        /* Templates that print today's date call strftime_now outright;
         * any fixed day serves here. */
        in.has_clock = true;
        in.now = 0;
        char *text = NULL;
        size_t n = 0;
        if (fx_jinja_render(alloc, &in, &lim, &text, &n, NULL) != FX_OK)
            continue;
        size_t found = 0;
        const char *at = NULL;
        for (size_t i = 0; i + sizeof probe - 1 <= n; i++)
            if (memcmp(text + i, probe, sizeof probe - 1) == 0) at = text + i;
        if (at) {
            const char *p = at + sizeof probe - 1;
            size_t rest = n - (size_t)(p - text);
            /* Blanks may stand between the text and the marker (Llama 2's
             * " </s>", deepseek-coder's "\n<|EOT|>"). */
            for (int k = 0; k < 4 && rest && (*p == ' ' || *p == '\n'); k++) {
                p++;
                rest--;
            }
            size_t m = marker_at(p, rest, eos, eos_len);
            if (m && m < cap) {
                memcpy(out, p, m);
                out[m] = '\0';
                found = m;
            }
        }
        fx_free(alloc, text);
        if (at) return found;
    }
    return 0;
}

/* ---- Python str.strip() ---- */

/* Python's str.isspace(): the Unicode White_Space characters plus the
 * ASCII separators 0x1c-0x1f. */
static bool py_space(uint32_t c) {
    if (c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f))
        return true;
    switch (c) {
    case 0x85: case 0xa0: case 0x1680: case 0x2028: case 0x2029:
    case 0x202f: case 0x205f: case 0x3000:
        return true;
    default:
        return c >= 0x2000 && c <= 0x200a;
    }
}

/* Decodes the UTF-8 sequence at s[0..n); returns its length, or 0 when it
 * is not a valid sequence (such bytes are never whitespace). */
static size_t utf8_at(const unsigned char *s, size_t n, uint32_t *cp) {
    if (n == 0) return 0;
    unsigned char b = s[0];
    if (b < 0x80) { *cp = b; return 1; }
    size_t k = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc2 ? 2 : 0;
    if (k == 0 || k > n || b > 0xf4) return 0;
    uint32_t c = b & (0x7f >> k);
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        c = (c << 6) | (s[i] & 0x3f);
    }
    static const uint32_t min[5] = { 0, 0, 0x80, 0x800, 0x10000 };
    if (c < min[k] || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) return 0;
    *cp = c;
    return k;
}

void fx_chat_strip(const char **s, size_t *len, bool left, bool right) {
    const unsigned char *p = (const unsigned char *)*s;
    size_t n = *len;
    uint32_t cp;
    while (left && n > 0) {
        size_t k = utf8_at(p, n, &cp);
        if (k == 0 || !py_space(cp)) break;
        p += k;
        n -= k;
    }
    while (right && n > 0) {
        /* The last character starts at most 3 bytes before the end. */
        size_t k = 0;
        for (size_t back = 1; back <= 4 && back <= n; back++) {
            if ((p[n - back] & 0xc0) != 0x80) {
                if (utf8_at(p + n - back, back, &cp) == back) k = back;
                break;
            }
        }
        if (k == 0 || !py_space(cp)) break;
        n -= k;
    }
    *s = (const char *)p;
    *len = n;
}
