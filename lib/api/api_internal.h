/*
 * The structs behind the public handles. Only lib/api sees them; lower
 * layers get the pieces they need passed in.
 */
#ifndef FX_API_INTERNAL_H
#define FX_API_INTERNAL_H

#include "../core/core.h"
#include "../gguf/gguf.h"
#include "../model/model.h"

struct fx_vocab; /* lib/tokenizer */

struct fx_model {
    fx_alloc alloc;
    fx_logger log;
    fx_error err;          /* last failure on this handle */
    uint32_t flags;        /* FX_MODEL_* */
    fx_gguf *gguf;         /* owns the mapping */
    fx_hparams hp;
    char *arch;            /* general.architecture, NUL-terminated */
    char *name;            /* general.name or "" */
    struct fx_vocab *vocab;
    fx_weights weights;    /* bound unless vocab-only */
    int has_weights;
    /* Batchers using this model. fx_model_free while any live only marks
     * it (docs/reliability.md 35); the last fx_batcher_free frees it. */
    uint32_t n_batchers;
    int free_requested;
};

struct fx_batcher_impl;
/* The batcher behind a public handle, for the tests' invariant checks. */
struct fx_batcher_impl *fx_batcher_get_impl(fx_batcher *batcher);

/* Frees the model for real (fx_model_free defers while batchers use it). */
void fx_model_destroy(fx_model *model);

/* The buffer contract of the calls that write a grammar (as
 * fx_chat_apply_template's): text[0..len] and its NUL into buf if it
 * fits, *needed (if not NULL) = len + 1, else FX_ERR_BUFFER_TOO_SMALL
 * saying `what` needs that much. Frees text with alloc either way. */
fx_status fx_api_hand_over(const fx_alloc *alloc, char *text, size_t len,
                           char *buf, size_t buf_size, size_t *needed,
                           const char *what, fx_error *err);

#endif /* FX_API_INTERNAL_H */
