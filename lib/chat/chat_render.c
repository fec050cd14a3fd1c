/*
 * chat rendering: one function per template family, each writing what the
 * family's published Jinja template renders under transformers'
 * apply_chat_template (trim_blocks and lstrip_blocks on). Where a template
 * would raise_exception, the render fails with FX_ERR_BAD_TEMPLATE and the
 * template's reason. The two places a reference template cannot take the
 * conversation at all and ferrox still renders are documented in ferrox.h:
 * a system message for Gemma 1/2 and for the HF Mistral v0.2 template.
 */
#include "chat.h"

#include <string.h>

/* The output: counts every byte, writes only while the text and its NUL
 * still fit. Lengths only grow, so once one piece does not fit no later
 * piece is written either, and buf never holds a gap. */
typedef struct chat_out {
    char *buf;
    size_t cap;
    size_t len;
    bool overflow;  /* the length passed SIZE_MAX */
} chat_out;

static void put(chat_out *o, const char *s, size_t n) {
    if (o->overflow || n == 0) return;
    if (n > SIZE_MAX - 1 - o->len) {
        o->overflow = true;
        return;
    }
    if (o->buf && o->len + n < o->cap) memcpy(o->buf + o->len, s, n);
    o->len += n;
}

static void puts_(chat_out *o, const char *s) { put(o, s, strlen(s)); }

static void put_msg(chat_out *o, const fx_chat_msg *m) {
    put(o, m->content, m->len);
}

static void put_trimmed(chat_out *o, const fx_chat_msg *m) {
    const char *s = m->content;
    size_t n = m->len;
    fx_chat_strip(&s, &n, true, true);
    put(o, s, n);
}

/* Writes the body of a Jinja string literal taken from template text,
 * decoding its escapes as Python does (an unknown escape keeps its
 * backslash). */
static void put_literal(chat_out *o, const char *s, size_t n) {
    size_t start = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\' || i + 1 == n) continue;
        const char *rep = NULL;
        switch (s[i + 1]) {
        case 'n': rep = "\n"; break;
        case 't': rep = "\t"; break;
        case 'r': rep = "\r"; break;
        case '\\': rep = "\\"; break;
        case '\'': rep = "'"; break;
        case '"': rep = "\""; break;
        default: break;
        }
        if (!rep) continue;
        put(o, s + start, i - start);
        puts_(o, rep);
        start = i + 2;
        i++;
    }
    put(o, s + start, n - start);
}

/* ---- the context every family renders with ---- */

typedef struct render_ctx {
    const fx_chat_tmpl *t;
    const char *name;       /* family name, for messages */
    const fx_chat_msg *m;
    size_t n;
    bool add_ass;
    bool with_bos;          /* FX_CHAT_WITH_BOS */
    const char *bos, *eos;
    size_t bos_len, eos_len;
    chat_out *o;
    fx_error *err;
} render_ctx;

static void put_bos(render_ctx *c) { put(c->o, c->bos, c->bos_len); }
static void put_eos(render_ctx *c) { put(c->o, c->eos, c->eos_len); }

static const char *role_name(int role) {
    return role == FX_CHAT_ROLE_SYSTEM ? "system"
         : role == FX_CHAT_ROLE_USER ? "user" : "assistant";
}

static bool first_is_system(const render_ctx *c) {
    return c->m[0].role == FX_CHAT_ROLE_SYSTEM;
}

/* The raise_exception of the Llama 2, Mistral and Gemma templates:
 * (role == 'user') != (index % 2 == 0), counted after an optional leading
 * system message. It is a test on "user" only: a system message in an
 * assistant's place passes it, and each template then does what its
 * branches say (Gemma writes a system turn, Llama 2 writes nothing,
 * Mistral raises that only user and assistant are supported). */
static fx_status check_alternation(const render_ctx *c, size_t first) {
    for (size_t i = first; i < c->n; i++) {
        bool even = (i - first) % 2 == 0;
        if ((c->m[i].role == FX_CHAT_ROLE_USER) != even)
            return fx_fail(c->err, FX_ERR_BAD_TEMPLATE, "chat: message %zu "
                           "has role %s; the %s template needs user and "
                           "assistant turns to alternate, starting with "
                           "user", i, role_name(c->m[i].role), c->name);
    }
    return FX_OK;
}

/* ---- families ---- */

static fx_status render_chatml(render_ctx *c) {
    if (c->t->default_system && !first_is_system(c)) {
        puts_(c->o, "<|im_start|>system\n");
        put_literal(c->o, c->t->default_system, c->t->default_system_len);
        puts_(c->o, "<|im_end|>\n");
    }
    for (size_t i = 0; i < c->n; i++) {
        puts_(c->o, "<|im_start|>");
        puts_(c->o, role_name(c->m[i].role));
        puts_(c->o, "\n");
        put_msg(c->o, &c->m[i]);
        puts_(c->o, "<|im_end|>\n");
    }
    if (c->add_ass) puts_(c->o, "<|im_start|>assistant\n");
    return FX_OK;
}

/* Phi-4's template has no add_generation_prompt: it writes the assistant
 * opener after every user turn, so the flag changes nothing. */
static fx_status render_phi4(render_ctx *c) {
    for (size_t i = 0; i < c->n; i++) {
        const fx_chat_msg *m = &c->m[i];
        if (m->role == FX_CHAT_ROLE_ASSISTANT) {
            put_msg(c->o, m);
            puts_(c->o, "<|im_end|>");
            continue;
        }
        puts_(c->o, "<|im_start|>");
        puts_(c->o, role_name(m->role));
        puts_(c->o, "<|im_sep|>");
        put_msg(c->o, m);
        puts_(c->o, "<|im_end|>");
        if (m->role == FX_CHAT_ROLE_USER)
            puts_(c->o, "<|im_start|>assistant<|im_sep|>");
    }
    return FX_OK;
}

/* Meta's Llama-2-chat template: the system message is folded into the
 * first user turn inside <<SYS>>, and `.strip()` applies to that whole
 * concatenation -- so the left strip never reaches the user text there, and
 * an all-blank user text lets the right strip eat the "\n\n" after
 * <</SYS>>. Every user turn starts with bos_token; [/INST] is the opener,
 * so add_generation_prompt is not used. */
static fx_status render_llama2(render_ctx *c) {
    size_t first = first_is_system(c) ? 1 : 0;
    fx_status st = check_alternation(c, first);
    if (st != FX_OK) return st;
    for (size_t i = first; i < c->n; i++) {
        const fx_chat_msg *m = &c->m[i];
        const char *s = m->content;
        size_t len = m->len;
        if (m->role == FX_CHAT_ROLE_SYSTEM) continue; /* no branch for it */
        if (m->role == FX_CHAT_ROLE_ASSISTANT) {
            fx_chat_strip(&s, &len, true, true);
            puts_(c->o, " ");
            put(c->o, s, len);
            puts_(c->o, " ");
            put_eos(c);
            continue;
        }
        /* The first user turn's BOS is the leading one: only on request.
         * With no user turn there is none at all. */
        if (i > first || c->with_bos) put_bos(c);
        puts_(c->o, "[INST] ");
        if (i == first && first == 1) {
            fx_chat_strip(&s, &len, false, true);
            puts_(c->o, "<<SYS>>\n");
            put_msg(c->o, &c->m[0]);
            puts_(c->o, "\n<</SYS>>");
            if (len > 0) puts_(c->o, "\n\n");
        } else {
            fx_chat_strip(&s, &len, true, true);
        }
        put(c->o, s, len);
        puts_(c->o, " [/INST]");
    }
    return FX_OK;
}

/* The Mistral templates. mistral (HF v0.2) raises on a system message; it
 * is prepended to the first user turn followed by a blank line, the
 * convention Mistral documents for its first tokenizer. mistral-v1 does
 * the same in its own template; v3 and v3-tekken put it before the last
 * user message, and only when that message ends the conversation. */
static fx_status render_mistral(render_ctx *c) {
    fx_chat_family f = c->t->family;
    size_t first = first_is_system(c) ? 1 : 0;
    fx_status st = check_alternation(c, first);
    if (st != FX_OK) return st;
    const char *open = f == FX_CHAT_MISTRAL_V1 ? " [INST] "
                     : f == FX_CHAT_MISTRAL_V3_TEKKEN ? "[INST]" : "[INST] ";
    const char *close = (f == FX_CHAT_MISTRAL || f == FX_CHAT_MISTRAL_V1)
                            ? " [/INST]" : "[/INST]";
    for (size_t i = first; i < c->n; i++) {
        const fx_chat_msg *m = &c->m[i];
        if (m->role == FX_CHAT_ROLE_SYSTEM)
            return fx_fail(c->err, FX_ERR_BAD_TEMPLATE, "chat: message %zu "
                           "is a system message; the %s template takes one "
                           "only as the first message", i, c->name);
        if (m->role == FX_CHAT_ROLE_ASSISTANT) {
            if (f == FX_CHAT_MISTRAL_V1) puts_(c->o, " ");
            if (f == FX_CHAT_MISTRAL_V3) {
                puts_(c->o, " ");
                put_trimmed(c->o, m);
            } else {
                put_msg(c->o, m);
            }
            put_eos(c);
            continue;
        }
        bool with_sys = first == 1 &&
            ((f == FX_CHAT_MISTRAL || f == FX_CHAT_MISTRAL_V1) ? i == first
                                                               : i + 1 == c->n);
        puts_(c->o, open);
        if (with_sys) {
            put_msg(c->o, &c->m[0]);
            puts_(c->o, "\n\n");
        }
        put_msg(c->o, m);
        puts_(c->o, close);
    }
    return FX_OK;
}

/* ---- Qwen3 ---- */

/* Spans and the Python string operations the Qwen3 template applies. */
typedef struct span { const char *p; size_t n; } span;

/* Offset of the first (last) occurrence of tag in s, or SIZE_MAX. */
static size_t span_find(span s, const char *tag, bool last) {
    size_t t = strlen(tag), at = SIZE_MAX;
    for (size_t i = 0; i + t <= s.n; i++) {
        if (memcmp(s.p + i, tag, t) == 0) {
            at = i;
            if (!last) break;
        }
    }
    return at;
}

static span strip_nl(span s, bool left, bool right) {
    while (left && s.n > 0 && s.p[0] == '\n') { s.p++; s.n--; }
    while (right && s.n > 0 && s.p[s.n - 1] == '\n') s.n--;
    return s;
}

/* Qwen3 keeps an assistant message's reasoning only after the last real
 * user query (the final turn of a tool loop), and shows it as a <think>
 * block; before that only the answer after </think> is kept. A "real"
 * query is a user message that is not a whole <tool_response>. */
static fx_status render_qwen3(render_ctx *c) {
    size_t last_query = c->n - 1;
    for (size_t k = c->n; k-- > 0;) {
        const fx_chat_msg *m = &c->m[k];
        if (m->role != FX_CHAT_ROLE_USER) continue;
        static const char open[] = "<tool_response>", close[] = "</tool_response>";
        bool tool = m->len >= sizeof open - 1 && m->len >= sizeof close - 1 &&
            memcmp(m->content, open, sizeof open - 1) == 0 &&
            memcmp(m->content + m->len - (sizeof close - 1), close,
                   sizeof close - 1) == 0;
        if (!tool) {
            last_query = k;
            break;
        }
    }
    for (size_t i = 0; i < c->n; i++) {
        const fx_chat_msg *m = &c->m[i];
        if (m->role != FX_CHAT_ROLE_ASSISTANT) {
            puts_(c->o, "<|im_start|>");
            puts_(c->o, role_name(m->role));
            puts_(c->o, "\n");
            put_msg(c->o, m);
            puts_(c->o, "<|im_end|>\n");
            continue;
        }
        span content = { m->content, m->len }, reasoning = { "", 0 };
        size_t first_end = span_find(content, "</think>", false);
        if (first_end != SIZE_MAX) {
            /* content.split('</think>')[0].rstrip('\n')
             *        .split('<think>')[-1].lstrip('\n') */
            span before = strip_nl((span){ content.p, first_end }, false, true);
            size_t open = span_find(before, "<think>", true);
            if (open != SIZE_MAX) {
                before.p += open + 7;
                before.n -= open + 7;
            }
            reasoning = strip_nl(before, true, false);
            /* content.split('</think>')[-1].lstrip('\n') */
            size_t last_end = span_find(content, "</think>", true) + 8;
            content = strip_nl((span){ content.p + last_end,
                                       content.n - last_end }, true, false);
        }
        puts_(c->o, "<|im_start|>assistant\n");
        if (i > last_query && (i + 1 == c->n || reasoning.n > 0)) {
            span r = strip_nl(reasoning, true, true);
            puts_(c->o, "<think>\n");
            put(c->o, r.p, r.n);
            puts_(c->o, "\n</think>\n\n");
            content = strip_nl(content, true, false);
        }
        put(c->o, content.p, content.n);
        puts_(c->o, "<|im_end|>\n");
    }
    if (c->add_ass) puts_(c->o, "<|im_start|>assistant\n");
    return FX_OK;
}

static void llama3_turn(render_ctx *c, const fx_chat_msg *m) {
    puts_(c->o, "<|start_header_id|>");
    puts_(c->o, role_name(m->role));
    puts_(c->o, "<|end_header_id|>\n\n");
    put_trimmed(c->o, m);
    puts_(c->o, "<|eot_id|>");
}

/* Llama 3.1 and later always open with a system header carrying the
 * knowledge cutoff and a date. Llama 3.2's template takes the date from
 * strftime_now when the renderer defines it; ferrox renders the date the
 * template falls back to, "26 Jul 2024", so a prompt never depends on the
 * day it was made (the same text as Llama 3.1's template). */
static fx_status render_llama3(render_ctx *c) {
    size_t first = 0;
    if (c->t->family == FX_CHAT_LLAMA31) {
        puts_(c->o, "<|start_header_id|>system<|end_header_id|>\n\n"
                    "Cutting Knowledge Date: December 2023\n"
                    "Today Date: 26 Jul 2024\n\n");
        if (first_is_system(c)) {
            put_trimmed(c->o, &c->m[0]);
            first = 1;
        }
        puts_(c->o, "<|eot_id|>");
    }
    for (size_t i = first; i < c->n; i++) llama3_turn(c, &c->m[i]);
    if (c->add_ass)
        puts_(c->o, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    return FX_OK;
}

/* Phi-3/3.5: without the opener the template writes eos_token instead. */
static fx_status render_phi3(render_ctx *c) {
    for (size_t i = 0; i < c->n; i++) {
        const fx_chat_msg *m = &c->m[i];
        if (m->role == FX_CHAT_ROLE_SYSTEM && m->len == 0 &&
            c->t->skip_empty_system)
            continue;
        puts_(c->o, "<|");
        puts_(c->o, role_name(m->role));
        puts_(c->o, "|>\n");
        put_msg(c->o, m);
        puts_(c->o, "<|end|>\n");
    }
    if (c->add_ass)
        puts_(c->o, "<|assistant|>\n");
    else if (c->t->eos_without_prompt)
        put_eos(c);
    return FX_OK;
}

static fx_status render_zephyr(render_ctx *c) {
    for (size_t i = 0; i < c->n; i++) {
        puts_(c->o, "<|");
        puts_(c->o, role_name(c->m[i].role));
        puts_(c->o, "|>\n");
        put_msg(c->o, &c->m[i]);
        if (c->t->eos_literal) puts_(c->o, c->t->eos_literal);
        else put_eos(c);
        puts_(c->o, "\n");
    }
    if (c->add_ass) puts_(c->o, "<|assistant|>\n");
    return FX_OK;
}

/* Gemma 1 and 2 raise on a system message; Gemma 3's template takes one
 * by writing it, untrimmed, plus a blank line at the head of the first
 * user turn. ferrox does that for every Gemma template. */
static fx_status render_gemma(render_ctx *c) {
    size_t first = first_is_system(c) ? 1 : 0;
    fx_status st = check_alternation(c, first);
    if (st != FX_OK) return st;
    for (size_t i = first; i < c->n; i++) {
        const fx_chat_msg *m = &c->m[i];
        puts_(c->o, "<start_of_turn>");
        puts_(c->o, m->role == FX_CHAT_ROLE_ASSISTANT ? "model"
                                                      : role_name(m->role));
        puts_(c->o, "\n");
        if (i == first && first == 1) {
            put_msg(c->o, &c->m[0]);
            puts_(c->o, "\n\n");
        }
        put_trimmed(c->o, m);
        puts_(c->o, "<end_of_turn>\n");
    }
    if (c->add_ass) puts_(c->o, "<start_of_turn>model\n");
    return FX_OK;
}

/* deepseek-coder: the system text runs straight into "### Instruction:"
 * (the template's whitespace control leaves no separator), and its default
 * prompt is used when no message anywhere is a system message. */
static fx_status render_deepseek(render_ctx *c) {
    bool any_system = false;
    for (size_t i = 0; i < c->n; i++)
        if (c->m[i].role == FX_CHAT_ROLE_SYSTEM) any_system = true;
    if (!any_system && c->t->default_system)
        put_literal(c->o, c->t->default_system, c->t->default_system_len);
    for (size_t i = 0; i < c->n; i++) {
        const fx_chat_msg *m = &c->m[i];
        if (m->role == FX_CHAT_ROLE_SYSTEM) {
            put_msg(c->o, m);
        } else if (m->role == FX_CHAT_ROLE_USER) {
            puts_(c->o, "### Instruction:\n");
            put_msg(c->o, m);
            puts_(c->o, "\n");
        } else {
            puts_(c->o, "### Response:\n");
            put_msg(c->o, m);
            puts_(c->o, "\n<|EOT|>\n");
        }
    }
    if (c->add_ass) puts_(c->o, "### Response:\n");
    return FX_OK;
}

#define DS_USER "<\xef\xbd\x9cUser\xef\xbd\x9c>"
#define DS_ASSISTANT "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>"
#define DS_EOS "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"

/* DeepSeek V3 / R1: the last system message (wherever it is) goes right
 * after BOS; an assistant message keeps only what follows its last
 * </think>, as the template's content.split('</think>')[-1] does. */
static fx_status render_deepseek3(render_ctx *c) {
    const fx_chat_msg *sys = NULL;
    for (size_t i = 0; i < c->n; i++)
        if (c->m[i].role == FX_CHAT_ROLE_SYSTEM) sys = &c->m[i];
    if (sys) put_msg(c->o, sys);
    for (size_t i = 0; i < c->n; i++) {
        const fx_chat_msg *m = &c->m[i];
        if (m->role == FX_CHAT_ROLE_USER) {
            puts_(c->o, DS_USER);
            put_msg(c->o, m);
        } else if (m->role == FX_CHAT_ROLE_ASSISTANT) {
            const char *s = m->content;
            size_t len = m->len;
            static const char tag[] = "</think>";
            for (size_t k = 0; k + sizeof tag - 1 <= m->len; k++) {
                if (memcmp(m->content + k, tag, sizeof tag - 1) == 0) {
                    s = m->content + k + sizeof tag - 1;
                    len = m->len - k - (sizeof tag - 1);
                }
            }
            puts_(c->o, DS_ASSISTANT);
            put(c->o, s, len);
            puts_(c->o, DS_EOS);
        }
    }
    if (c->add_ass) {
        puts_(c->o, DS_ASSISTANT);
        if (c->t->think_opener) puts_(c->o, "<think>\n");
    }
    return FX_OK;
}

static fx_status render_vicuna(render_ctx *c) {
    for (size_t i = 0; i < c->n; i++) {
        const fx_chat_msg *m = &c->m[i];
        if (m->role == FX_CHAT_ROLE_SYSTEM) {
            if (c->t->family == FX_CHAT_VICUNA_ORCA) {
                puts_(c->o, "SYSTEM: ");
                put_msg(c->o, m);
                puts_(c->o, "\n");
            } else {
                put_msg(c->o, m);
                puts_(c->o, "\n\n");
            }
        } else if (m->role == FX_CHAT_ROLE_USER) {
            puts_(c->o, "USER: ");
            put_msg(c->o, m);
            puts_(c->o, "\n");
        } else {
            puts_(c->o, "ASSISTANT: ");
            put_msg(c->o, m);
            puts_(c->o, "</s>\n");
        }
    }
    if (c->add_ass) puts_(c->o, "ASSISTANT:");
    return FX_OK;
}

/* ---- entry ---- */

/* BOS/EOS texts a family's tokenizer uses, for rendering without a model. */
void fx_chat_family_specials(fx_chat_family f, const char **bos,
                             const char **eos) {
    switch (f) {
    case FX_CHAT_CHATML: case FX_CHAT_PHI4: case FX_CHAT_QWEN3:
        *bos = "";
        *eos = "<|im_end|>";
        break;
    case FX_CHAT_LLAMA3: case FX_CHAT_LLAMA31:
        *bos = "<|begin_of_text|>";
        *eos = "<|eot_id|>";
        break;
    case FX_CHAT_PHI3:
        *bos = "<s>";
        *eos = "<|endoftext|>";
        break;
    case FX_CHAT_GEMMA:
        *bos = "<bos>";
        *eos = "<eos>";
        break;
    case FX_CHAT_DEEPSEEK:
        *bos = "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence"
               "\xef\xbd\x9c>";
        *eos = "<|EOT|>";
        break;
    case FX_CHAT_DEEPSEEK3:
        *bos = "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence"
               "\xef\xbd\x9c>";
        *eos = DS_EOS;
        break;
    default:
        *bos = "<s>";
        *eos = "</s>";
        break;
    }
}

fx_status fx_chat_render(const fx_chat_tmpl *tmpl, const fx_chat_specials *sp,
                         const fx_chat_msg *msgs, size_t n, uint32_t flags,
                         char *buf, size_t buf_size, size_t *needed,
                         fx_error *err) {
    chat_out o = { buf, buf ? buf_size : 0, 0, false };
    render_ctx c = { 0 };
    const char *bos, *eos;
    fx_chat_family_specials(tmpl->family, &bos, &eos);
    c.t = tmpl;
    c.name = fx_chat_family_str(tmpl->family);
    c.m = msgs;
    c.n = n;
    c.add_ass = (flags & FX_CHAT_ADD_ASSISTANT) != 0;
    c.bos = bos;
    c.bos_len = strlen(bos);
    c.eos = eos;
    c.eos_len = strlen(eos);
    if (sp && sp->bos) { c.bos = sp->bos; c.bos_len = sp->bos_len; }
    if (sp && sp->eos) { c.eos = sp->eos; c.eos_len = sp->eos_len; }
    c.o = &o;
    c.err = err;
    if (needed) *needed = 0;
    if (buf && buf_size > 0) buf[0] = '\0';

    /* The leading BOS only on request: see FX_CHAT_WITH_BOS in ferrox.h. */
    c.with_bos = (flags & FX_CHAT_WITH_BOS) && tmpl->lead_bos;
    if (c.with_bos && tmpl->family != FX_CHAT_LLAMA2) put_bos(&c);

    fx_status st;
    switch (tmpl->family) {
    case FX_CHAT_CHATML: st = render_chatml(&c); break;
    case FX_CHAT_QWEN3: st = render_qwen3(&c); break;
    case FX_CHAT_PHI4: st = render_phi4(&c); break;
    case FX_CHAT_LLAMA2: st = render_llama2(&c); break;
    case FX_CHAT_MISTRAL: case FX_CHAT_MISTRAL_V1: case FX_CHAT_MISTRAL_V3:
    case FX_CHAT_MISTRAL_V3_TEKKEN: st = render_mistral(&c); break;
    case FX_CHAT_LLAMA3: case FX_CHAT_LLAMA31: st = render_llama3(&c); break;
    case FX_CHAT_PHI3: st = render_phi3(&c); break;
    case FX_CHAT_ZEPHYR: st = render_zephyr(&c); break;
    case FX_CHAT_GEMMA: st = render_gemma(&c); break;
    case FX_CHAT_DEEPSEEK: st = render_deepseek(&c); break;
    case FX_CHAT_DEEPSEEK3: st = render_deepseek3(&c); break;
    case FX_CHAT_VICUNA: case FX_CHAT_VICUNA_ORCA: st = render_vicuna(&c); break;
    default:
        return fx_fail(err, FX_ERR_INVALID_ARG, "chat: unknown family %d",
                       (int)tmpl->family);
    }
    if (st != FX_OK) {
        if (buf && buf_size > 0) buf[0] = '\0';
        return st;
    }
    if (o.overflow)
        return fx_fail(err, FX_ERR_TOO_LARGE, "chat: the rendered prompt "
                       "would be larger than the address space");
    if (needed) *needed = o.len + 1;
    if (o.len + 1 > o.cap) {
        if (buf && buf_size > 0) buf[0] = '\0';
        return fx_fail(err, FX_ERR_BUFFER_TOO_SMALL, "chat: the prompt needs "
                       "%zu bytes, the buffer has %zu", o.len + 1, buf_size);
    }
    buf[o.len] = '\0';
    return FX_OK;
}
