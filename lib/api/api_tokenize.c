/*
 * Public tokenizer entry points: argument checks, then lib/tokenizer.
 * The model is shared read-only; only its last-error text is written.
 */
#include <string.h>

#include "../tokenizer/tokenizer.h"
#include "api_internal.h"

#define TOKENIZE_FLAGS (FX_TOKENIZE_ADD_SPECIAL | FX_TOKENIZE_PARSE_SPECIAL)
#define DETOKENIZE_FLAGS (FX_DETOKENIZE_REMOVE_SPECIAL | FX_DETOKENIZE_RENDER_SPECIAL)

static fx_error *model_err(const fx_model *model) { return &((fx_model *)model)->err; }

/* The checks every entry point shares; NULL model gets no message (there
 * is nowhere to put one). */
static fx_status check_model(const fx_model *model, const char *fn) {
    if (!model) return FX_ERR_INVALID_ARG;
    if (!model->vocab) return fx_fail(model_err(model), FX_ERR_MISSING, "%s: the model has no vocabulary", fn);
    return FX_OK;
}

fx_status fx_tokenize(const fx_model *model, const char *text, size_t text_len, uint32_t flags, int32_t *tokens,
                      size_t max_tokens, size_t *n_tokens) {
    fx_status st = check_model(model, "fx_tokenize");
    if (st != FX_OK) return st;
    fx_error *err = model_err(model);
    if (!n_tokens) return fx_fail(err, FX_ERR_INVALID_ARG, "fx_tokenize: n_tokens is NULL");
    *n_tokens = 0;
    if (!text && text_len > 0) return fx_fail(err, FX_ERR_INVALID_ARG, "fx_tokenize: text is NULL");
    if (!tokens && max_tokens > 0) return fx_fail(err, FX_ERR_INVALID_ARG, "fx_tokenize: tokens is NULL");
    if (flags & ~TOKENIZE_FLAGS)
        return fx_fail(err, FX_ERR_INVALID_ARG, "fx_tokenize: unknown flags 0x%x", flags & ~TOKENIZE_FLAGS);
    return fx_vocab_tokenize(model->vocab, &model->alloc, text ? text : "", text_len, flags, tokens, max_tokens,
                             n_tokens, err);
}

fx_status fx_token_to_piece(const fx_model *model, int32_t token, uint32_t flags, char *buf, size_t buf_size,
                            size_t *n_bytes) {
    fx_status st = check_model(model, "fx_token_to_piece");
    if (st != FX_OK) return st;
    fx_error *err = model_err(model);
    if (!n_bytes) return fx_fail(err, FX_ERR_INVALID_ARG, "fx_token_to_piece: n_bytes is NULL");
    *n_bytes = 0;
    if (!buf && buf_size > 0) return fx_fail(err, FX_ERR_INVALID_ARG, "fx_token_to_piece: buf is NULL");
    if (flags & ~DETOKENIZE_FLAGS)
        return fx_fail(err, FX_ERR_INVALID_ARG, "fx_token_to_piece: unknown flags 0x%x", flags & ~DETOKENIZE_FLAGS);
    return fx_vocab_token_to_piece(model->vocab, token, flags, buf, buf_size, n_bytes, err);
}

fx_status fx_detokenize(const fx_model *model, const int32_t *tokens, size_t n_tokens, uint32_t flags, char *buf,
                        size_t buf_size, size_t *n_bytes) {
    fx_status st = check_model(model, "fx_detokenize");
    if (st != FX_OK) return st;
    fx_error *err = model_err(model);
    if (!n_bytes) return fx_fail(err, FX_ERR_INVALID_ARG, "fx_detokenize: n_bytes is NULL");
    *n_bytes = 0;
    if (!tokens && n_tokens > 0) return fx_fail(err, FX_ERR_INVALID_ARG, "fx_detokenize: tokens is NULL");
    if (!buf && buf_size > 0) return fx_fail(err, FX_ERR_INVALID_ARG, "fx_detokenize: buf is NULL");
    if (flags & ~DETOKENIZE_FLAGS)
        return fx_fail(err, FX_ERR_INVALID_ARG, "fx_detokenize: unknown flags 0x%x", flags & ~DETOKENIZE_FLAGS);
    return fx_vocab_detokenize(model->vocab, tokens, n_tokens, flags, buf, buf_size, n_bytes, err);
}

uint32_t fx_model_vocab_size(const fx_model *model) {
    return model ? fx_vocab_n_tokens(model->vocab) : 0;
}

int32_t fx_model_special_token(const fx_model *model, fx_special_token which) {
    return model ? fx_vocab_special(model->vocab, (int)which) : -1;
}

int fx_token_is_eog(const fx_model *model, int32_t token) {
    return model && fx_vocab_is_eog(model->vocab, token) ? 1 : 0;
}

fx_token_type_t fx_token_type(const fx_model *model, int32_t token) {
    return model ? fx_vocab_token_type(model->vocab, token)
                 : FX_TOKEN_TYPE_UNDEFINED;
}
