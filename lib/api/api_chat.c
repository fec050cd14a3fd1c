/*
 * Public chat-template entry points: argument checks, finding the
 * template (caller's or the model's), the model's BOS/EOS texts and
 * end-of-turn token ids. The work is in lib/chat.
 */
#include <string.h>

#include "api_internal.h"
#include "../chat/chat.h"
#include "../tokenizer/tokenizer.h"

#define CHAT_TEMPLATE_KEY "tokenizer.chat_template"

/* The model's last error lives in the handle; calls that only read the
 * model still report through it, as fx_model_errmsg promises. */
static fx_error *model_err(const fx_model *model) {
    return model ? &((fx_model *)model)->err : NULL;
}

/* The template text to use: the caller's, else the model's own. */
static fx_status find_template(const fx_model *model, const char *tmpl,
                               const char **text, size_t *len, fx_error *err) {
    if (tmpl) {
        *text = tmpl;
        *len = strlen(tmpl);
        return FX_OK;
    }
    if (!model)
        return fx_fail(err, FX_ERR_INVALID_ARG, "chat: no model and no "
                       "template given");
    fx_gguf_str s = { NULL, 0 };
    if (model->gguf) {
        fx_status st = fx_gguf_get_str_opt(model->gguf, CHAT_TEMPLATE_KEY, &s,
                                           err);
        if (st != FX_OK) return st;
    }
    if (!s.ptr || s.len == 0)
        return fx_fail(err, FX_ERR_MISSING, "chat: the model has no %s; pass "
                       "a template or a family name", CHAT_TEMPLATE_KEY);
    if (s.len > SIZE_MAX)
        return fx_fail(err, FX_ERR_TOO_LARGE, "chat: %s is too large",
                       CHAT_TEMPLATE_KEY);
    *text = s.ptr;
    *len = (size_t)s.len;
    return FX_OK;
}

static fx_status resolve(const fx_model *model, const char *tmpl,
                         fx_chat_tmpl *out, fx_error *err) {
    const char *text = NULL;
    size_t len = 0;
    fx_status st = find_template(model, tmpl, &text, &len, err);
    if (st != FX_OK) return st;
    return fx_chat_tmpl_detect(text, len, out, err);
}

/* A special token id from the GGUF metadata, if set and in the vocabulary. */
static int32_t special_id(const fx_model *model, const char *key) {
    uint32_t id = UINT32_MAX;
    if (!model->gguf || !model->vocab) return -1;
    /* A wrongly typed key is the tokenizer's to report at load; here it
     * just means "no such token". */
    if (fx_gguf_get_u32_opt(model->gguf, key, &id, NULL) != FX_OK) return -1;
    if (id == UINT32_MAX || id >= fx_vocab_n_tokens(model->vocab)) return -1;
    return (int32_t)id;
}

static void token_text(const fx_model *model, const char *key,
                       const char **text, size_t *len) {
    int32_t id = special_id(model, key);
    if (id < 0) return;
    size_t n = 0;
    const char *t = fx_vocab_token_text(model->vocab, id, &n);
    if (t) {
        *text = t;
        *len = n;
    }
}

static fx_status apply(const fx_model *model, const fx_alloc *alloc,
                       const char *tmpl, const fx_chat_message *msgs,
                       size_t n_msgs, uint32_t flags, char *buf,
                       size_t buf_size, size_t *needed, fx_error *err) {
    if (needed) *needed = 0;
    if (buf && buf_size > 0) buf[0] = '\0';
    if (!buf && buf_size > 0)
        return fx_fail(err, FX_ERR_INVALID_ARG, "chat: buf is NULL with "
                       "buf_size %zu", buf_size);
    if (flags & ~(uint32_t)(FX_CHAT_ADD_ASSISTANT | FX_CHAT_WITH_BOS))
        return fx_fail(err, FX_ERR_INVALID_ARG, "chat: unknown flags 0x%x",
                       (unsigned)flags);
    if (n_msgs == 0)
        return fx_fail(err, FX_ERR_INVALID_ARG, "chat: the message list is "
                       "empty");
    if (!msgs)
        return fx_fail(err, FX_ERR_INVALID_ARG, "chat: messages is NULL");

    fx_chat_tmpl t;
    fx_status st = resolve(model, tmpl, &t, err);
    if (st != FX_OK) return st;

    /* A count no address space could hold is the caller's mistake, not a
     * shortage of memory. */
    if (n_msgs > SIZE_MAX / sizeof(fx_chat_msg))
        return fx_fail(err, FX_ERR_TOO_LARGE, "chat: %zu messages is more "
                       "than memory can hold", n_msgs);
    fx_chat_msg *m = fx_malloc_array(alloc, n_msgs, sizeof *m);
    if (!m)
        return fx_fail(err, FX_ERR_NOMEM, "chat: out of memory for %zu "
                       "messages", n_msgs);
    st = fx_chat_check_messages(msgs, n_msgs, m, err);
    if (st == FX_OK) {
        fx_chat_specials sp = { NULL, 0, NULL, 0 };
        if (model) {
            token_text(model, "tokenizer.ggml.bos_token_id", &sp.bos,
                       &sp.bos_len);
            token_text(model, "tokenizer.ggml.eos_token_id", &sp.eos,
                       &sp.eos_len);
        }
        st = fx_chat_render(&t, &sp, m, n_msgs, flags, buf, buf_size, needed,
                            err);
    }
    fx_free(alloc, m);
    return st;
}

fx_status fx_chat_apply(const fx_model *model, const char *tmpl,
                               const fx_chat_message *msgs, size_t n_msgs,
                               uint32_t flags, char *buf, size_t buf_size,
                               size_t *needed) {
    if (!model) {
        return fx_chat_apply_template(tmpl, msgs, n_msgs, flags, buf,
                                      buf_size, needed, NULL, 0);
    }
    fx_error *err = model_err(model);
    return apply(model, &model->alloc, tmpl, msgs, n_msgs, flags, buf,
                 buf_size, needed, err);
}

fx_status fx_chat_apply_template(const char *tmpl,
                                        const fx_chat_message *msgs,
                                        size_t n_msgs, uint32_t flags,
                                        char *buf, size_t buf_size,
                                        size_t *needed, char *errbuf,
                                        size_t errbuf_size) {
    fx_error err;
    fx_alloc alloc;
    fx_status st;
    fx_error_clear(&err);
    if (errbuf && errbuf_size > 0) errbuf[0] = '\0';
    if (!tmpl) {
        if (needed) *needed = 0;
        st = fx_fail(&err, FX_ERR_INVALID_ARG, "chat: no template given "
                     "(a family name or template text)");
    } else if ((st = fx_alloc_init(&alloc, NULL)) == FX_OK) {
        st = apply(NULL, &alloc, tmpl, msgs, n_msgs, flags, buf, buf_size,
                   needed, &err);
    }
    if (st != FX_OK) fx_error_copy(&err, errbuf, errbuf_size);
    return st;
}

fx_status fx_chat_detect(const fx_model *model, const char *tmpl,
                                const char **family) {
    fx_error *err = model_err(model);
    if (family) *family = NULL;
    if (!family)
        return fx_fail(err, FX_ERR_INVALID_ARG, "chat: family is NULL");
    fx_chat_tmpl t;
    fx_status st = resolve(model, tmpl, &t, err);
    if (st != FX_OK) return st;
    *family = fx_chat_family_str(t.family);
    return FX_OK;
}

size_t fx_chat_family_count(void) {
    return (size_t)FX_CHAT_FAMILY_COUNT;
}

const char *fx_chat_family_name(size_t index) {
    if (index >= (size_t)FX_CHAT_FAMILY_COUNT) return NULL;
    return fx_chat_family_str((fx_chat_family)index);
}

/* At most a handful of ids: the family's texts plus EOT and EOS. */
#define CHAT_MAX_STOPS 8

static void add_unique(int32_t id, int32_t *ids, size_t *count) {
    if (id < 0 || *count >= CHAT_MAX_STOPS) return;
    for (size_t i = 0; i < *count; i++)
        if (ids[i] == id) return;
    ids[(*count)++] = id;
}

fx_status fx_model_chat_stop_tokens(const fx_model *model,
                                           const char *tmpl, int32_t *ids,
                                           size_t cap, size_t *n) {
    fx_error *err = model_err(model);
    if (n) *n = 0;
    if (!model || !n || (!ids && cap > 0))
        return fx_fail(err, FX_ERR_INVALID_ARG, "chat: %s is NULL",
                       !model ? "model" : !n ? "n" : "ids");
    if (!model->vocab)
        return fx_fail(err, FX_ERR_MISSING, "chat: the model has no "
                       "vocabulary");
    fx_chat_tmpl t;
    fx_status st = resolve(model, tmpl, &t, err);
    if (st != FX_OK) return st;

    const char *texts[CHAT_MAX_STOPS];
    size_t nt = fx_chat_stop_texts(&t, texts, CHAT_MAX_STOPS - 2);
    int32_t found[CHAT_MAX_STOPS];
    size_t count = 0;
    for (size_t i = 0; i < nt && i < CHAT_MAX_STOPS - 2; i++)
        add_unique(fx_vocab_find(model->vocab, texts[i], strlen(texts[i])),
                   found, &count);
    add_unique(special_id(model, "tokenizer.ggml.eot_token_id"), found,
               &count);
    add_unique(special_id(model, "tokenizer.ggml.eos_token_id"), found,
               &count);
    *n = count;
    if (count > cap)
        return fx_fail(err, FX_ERR_BUFFER_TOO_SMALL, "chat: %zu stop tokens, "
                       "room for %zu", count, cap);
    if (count > 0) memcpy(ids, found, count * sizeof *ids);
    return FX_OK;
}

fx_status fx_chat_stop_strings(const char *tmpl, const char **out,
                                      size_t cap, size_t *n) {
    if (n) *n = 0;
    if (!tmpl || !n || (!out && cap > 0)) return FX_ERR_INVALID_ARG;
    fx_chat_tmpl t;
    fx_status st = fx_chat_tmpl_detect(tmpl, strlen(tmpl), &t, NULL);
    if (st != FX_OK) return st;
    const char *texts[8];
    size_t nt = fx_chat_stop_texts(&t, texts, 8);
    for (size_t i = 0; i < nt && i < cap; i++) out[i] = texts[i];
    *n = nt;
    return nt > cap ? FX_ERR_BUFFER_TOO_SMALL : FX_OK;
}
