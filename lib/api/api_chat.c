/*
 * Public chat-template entry points: argument checks, finding the
 * template (caller's or the model's), the model's BOS/EOS texts and
 * end-of-turn token ids. The work is in lib/chat.
 */
#include <string.h>
#include <time.h>

#include "api_internal.h"
#include "../chat/chat.h"
#include "../chat/jinja.h"
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

/* The template to use, recognized, and for template text checked to
 * parse, so that detection and stop tokens refuse what rendering would. */
static fx_status resolve(const fx_model *model, const fx_alloc *alloc,
                         const char *tmpl, fx_chat_tmpl *out, fx_error *err) {
    const char *text = NULL;
    size_t len = 0;
    fx_status st = find_template(model, tmpl, &text, &len, err);
    if (st != FX_OK) return st;
    st = fx_chat_tmpl_detect(text, len, out, err);
    if (st == FX_OK && out->jinja) st = fx_jinja_check(alloc, text, len, err);
    return st;
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

/* What one apply call asks for, beyond the template and messages. */
typedef struct chat_call {
    uint32_t flags;
    const char *context_json;   /* NULL: none */
    bool has_clock;             /* strftime_now defined (fx_chat_apply_ex) */
    int64_t now;
    const char *bos, *eos;      /* overrides, NULL: the model's */
} chat_call;

/* Copies a rendered text into the caller's buffer under the buffer
 * contract of fx_chat_apply. */
static fx_status deliver(const char *text, size_t len, char *buf,
                         size_t buf_size, size_t *needed, fx_error *err) {
    if (len == SIZE_MAX)
        return fx_fail(err, FX_ERR_TOO_LARGE, "chat: the prompt is too large");
    if (needed) *needed = len + 1;
    if (!buf || buf_size < len + 1) {
        if (buf && buf_size > 0) buf[0] = '\0';
        return fx_fail(err, FX_ERR_BUFFER_TOO_SMALL, "chat: the prompt needs "
                       "%zu bytes, the buffer has %zu", len + 1, buf_size);
    }
    memcpy(buf, text, len);
    buf[len] = '\0';
    return FX_OK;
}

static fx_status render_jinja(const fx_chat_tmpl *t, const fx_alloc *alloc,
                              const fx_chat_specials *sp,
                              const fx_chat_msg *m, size_t n,
                              const chat_call *call, char *buf,
                              size_t buf_size, size_t *needed, fx_error *err) {
    fx_jinja_input in = { 0 };
    in.tmpl = t->text;
    in.tmpl_len = t->text_len;
    in.msgs = m;
    in.n_msgs = n;
    in.add_generation_prompt = (call->flags & FX_CHAT_ADD_ASSISTANT) != 0;
    in.extra_json = call->context_json;
    in.extra_len = call->context_json ? strlen(call->context_json) : 0;
    in.has_clock = call->has_clock;
    in.now = call->now;
    const char *bos = "", *eos = "";
    if (t->family < FX_CHAT_FAMILY_COUNT)
        fx_chat_family_specials(t->family, &bos, &eos);
    in.bos = bos;
    in.bos_len = strlen(bos);
    in.eos = eos;
    in.eos_len = strlen(eos);
    if (sp->bos) { in.bos = sp->bos; in.bos_len = sp->bos_len; }
    if (sp->eos) { in.eos = sp->eos; in.eos_len = sp->eos_len; }
    if (call->bos) { in.bos = call->bos; in.bos_len = strlen(call->bos); }
    if (call->eos) { in.eos = call->eos; in.eos_len = strlen(call->eos); }
    fx_jinja_limits lim;
    fx_jinja_limits_default(&lim);
    char *text = NULL;
    size_t len = 0;
    fx_status st = fx_jinja_render(alloc, &in, &lim, &text, &len, err);
    if (st != FX_OK) return st;
    /* The leading BOS is the tokenizer's to add (see FX_CHAT_WITH_BOS). */
    size_t skip = 0;
    if (!(call->flags & FX_CHAT_WITH_BOS) && in.bos_len && len >= in.bos_len &&
        memcmp(text, in.bos, in.bos_len) == 0)
        skip = in.bos_len;
    st = deliver(text + skip, len - skip, buf, buf_size, needed, err);
    fx_free(alloc, text);
    return st;
}

static fx_status apply(const fx_model *model, const fx_alloc *alloc,
                       const char *tmpl, const fx_chat_message *msgs,
                       size_t n_msgs, const chat_call *call, char *buf,
                       size_t buf_size, size_t *needed, fx_error *err) {
    uint32_t flags = call->flags;
    if (needed) *needed = 0;
    if (buf && buf_size > 0) buf[0] = '\0';
    if (!buf && buf_size > 0)
        return fx_fail(err, FX_ERR_INVALID_ARG, "chat: buf is NULL with "
                       "buf_size %zu", buf_size);
    if (flags & ~(uint32_t)(FX_CHAT_ADD_ASSISTANT | FX_CHAT_WITH_BOS))
        return fx_fail(err, FX_ERR_INVALID_ARG, "chat: unknown flags 0x%x",
                       (unsigned)flags);
    /* With a context, its "messages" may be the conversation instead. */
    if (n_msgs == 0 && !call->context_json)
        return fx_fail(err, FX_ERR_INVALID_ARG, "chat: the message list is "
                       "empty");
    if (!msgs && n_msgs > 0)
        return fx_fail(err, FX_ERR_INVALID_ARG, "chat: messages is NULL");

    fx_chat_tmpl t;
    fx_status st = resolve(model, alloc, tmpl, &t, err);
    if (st != FX_OK) return st;
    if (!t.jinja && call->context_json)
        return fx_fail(err, FX_ERR_INVALID_ARG, "chat: a template context "
                       "needs template text; a family name has no variables");

    /* A count no address space could hold is the caller's mistake, not a
     * shortage of memory. */
    if (n_msgs > SIZE_MAX / sizeof(fx_chat_msg))
        return fx_fail(err, FX_ERR_TOO_LARGE, "chat: %zu messages is more "
                       "than memory can hold", n_msgs);
    fx_chat_msg *m = fx_malloc_array(alloc, n_msgs ? n_msgs : 1, sizeof *m);
    if (!m)
        return fx_fail(err, FX_ERR_NOMEM, "chat: out of memory for %zu "
                       "messages", n_msgs);
    st = n_msgs ? fx_chat_check_messages(msgs, n_msgs, m, err) : FX_OK;
    if (st == FX_OK) {
        fx_chat_specials sp = { NULL, 0, NULL, 0 };
        if (model) {
            token_text(model, "tokenizer.ggml.bos_token_id", &sp.bos,
                       &sp.bos_len);
            token_text(model, "tokenizer.ggml.eos_token_id", &sp.eos,
                       &sp.eos_len);
        }
        if (t.jinja)
            st = render_jinja(&t, alloc, &sp, m, n_msgs, call, buf, buf_size,
                              needed, err);
        else
            st = fx_chat_render(&t, &sp, m, n_msgs, flags, buf, buf_size,
                                needed, err);
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
    chat_call call = { flags, NULL, false, 0, NULL, NULL };
    return apply(model, &model->alloc, tmpl, msgs, n_msgs, &call, buf,
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
        chat_call call = { flags, NULL, false, 0, NULL, NULL };
        st = apply(NULL, &alloc, tmpl, msgs, n_msgs, &call, buf, buf_size,
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
    fx_alloc local;
    const fx_alloc *alloc = model ? &model->alloc : &local;
    if (!model && fx_alloc_init(&local, NULL) != FX_OK)
        return FX_ERR_NOMEM;
    fx_chat_tmpl t;
    fx_status st = resolve(model, alloc, tmpl, &t, err);
    if (st != FX_OK) return st;
    /* Template text that resembles no family is still rendered, by the
     * interpreter: it is named for that. */
    *family = t.family < FX_CHAT_FAMILY_COUNT ? fx_chat_family_str(t.family)
                                              : "jinja";
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
    fx_status st = resolve(model, &model->alloc, tmpl, &t, err);
    if (st != FX_OK) return st;

    int32_t found[CHAT_MAX_STOPS];
    size_t count = 0;
    if (t.family < FX_CHAT_FAMILY_COUNT) {
        const char *texts[CHAT_MAX_STOPS];
        size_t nt = fx_chat_stop_texts(&t, texts, CHAT_MAX_STOPS - 2);
        for (size_t i = 0; i < nt && i < CHAT_MAX_STOPS - 2; i++)
            add_unique(fx_vocab_find(model->vocab, texts[i], strlen(texts[i])),
                       found, &count);
    } else {
        /* A template of no known family: the marker it writes after an
         * assistant turn, with this model's BOS/EOS texts. */
        const char *bos = "", *eos = "";
        size_t bos_len = 0, eos_len = 0;
        token_text(model, "tokenizer.ggml.bos_token_id", &bos, &bos_len);
        token_text(model, "tokenizer.ggml.eos_token_id", &eos, &eos_len);
        char marker[72];
        size_t k = fx_chat_derive_stop(&model->alloc, t.text, t.text_len, bos,
                                       bos_len, eos, eos_len, marker,
                                       sizeof marker);
        if (k) add_unique(fx_vocab_find(model->vocab, marker, k), found, &count);
    }
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
    fx_alloc alloc;
    if (fx_alloc_init(&alloc, NULL) != FX_OK) return FX_ERR_NOMEM;
    fx_chat_tmpl t;
    fx_status st = resolve(NULL, &alloc, tmpl, &t, NULL);
    if (st != FX_OK) return st;
    const char *texts[8];
    size_t nt = 0;
    if (t.family < FX_CHAT_FAMILY_COUNT) {
        nt = fx_chat_stop_texts(&t, texts, 8);
    } else {
        /* Derived without a model: no BOS/EOS texts to offer; the marker
         * is returned when it is one of the well-known ones (the strings
         * are static). */
        char marker[72];
        size_t k = fx_chat_derive_stop(&alloc, t.text, t.text_len, "", 0, "",
                                       0, marker, sizeof marker);
        const char *known = k ? fx_chat_known_stop(marker, k) : NULL;
        if (known) texts[nt++] = known;
    }
    for (size_t i = 0; i < nt && i < cap; i++) out[i] = texts[i];
    *n = nt;
    return nt > cap ? FX_ERR_BUFFER_TOO_SMALL : FX_OK;
}

/* ---- fx_chat_apply_ex ---- */

/* The first public layout: a caller compiled against any later header
 * passes at least this much. */
#define CHAT_OPTIONS_V1_SIZE (offsetof(fx_chat_options, eos_token) + \
                              sizeof(const char *))

void fx_chat_options_init_sized(fx_chat_options *opts, size_t size) {
    if (!opts) return;
    fx_struct_init(opts, size);
}

fx_status fx_chat_apply_ex(const fx_model *model, const char *tmpl,
                           const fx_chat_message *msgs, size_t n_msgs,
                           const fx_chat_options *opts, char *buf,
                           size_t buf_size, size_t *needed, char *errbuf,
                           size_t errbuf_size) {
    fx_error local_err;
    fx_error_clear(&local_err);
    fx_error *err = model ? model_err(model) : &local_err;
    if (errbuf && errbuf_size > 0) errbuf[0] = '\0';
    if (needed) *needed = 0;
    if (buf && buf_size > 0) buf[0] = '\0';
    fx_chat_options o;
    fx_chat_options_init(&o);
    fx_status st = FX_OK;
    fx_alloc libc;
    if (opts)
        st = fx_params_copy(&o, sizeof o, opts, CHAT_OPTIONS_V1_SIZE, err,
                            "fx_chat_options");
    if (st == FX_OK && !model && !tmpl)
        st = fx_fail(err, FX_ERR_INVALID_ARG, "chat: no model and no "
                     "template given");
    if (st == FX_OK && !model) st = fx_alloc_init(&libc, NULL);
    if (st == FX_OK) {
        chat_call call = { o.flags, o.context_json, true, o.now, o.bos_token,
                           o.eos_token };
        if (call.now == 0) call.now = (int64_t)time(NULL);
        st = apply(model, model ? &model->alloc : &libc, tmpl, msgs, n_msgs,
                   &call, buf, buf_size, needed, err);
    }
    if (st != FX_OK) fx_error_copy(err, errbuf, errbuf_size);
    return st;
}
