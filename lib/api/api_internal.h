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

#endif /* FX_API_INTERNAL_H */
