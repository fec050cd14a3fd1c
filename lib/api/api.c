/*
 * Public entry points for versions, statuses and models: argument checks,
 * struct_size handling, then a call into the layer that does the work.
 */
#include "../tokenizer/tokenizer.h"
#include "api_internal.h"

#include <stdio.h>
#include <string.h>

uint32_t fx_version_number(void) { return FX_VERSION_NUMBER; }

const char *fx_version_string(void) { return FX_VERSION_STRING; }

const char *fx_status_str(fx_status status) {
    switch (status) {
    case FX_OK: return "ok";
    case FX_ERR_INVALID_ARG: return "invalid argument";
    case FX_ERR_NOMEM: return "out of memory";
    case FX_ERR_IO: return "I/O error";
    case FX_ERR_UNSUPPORTED: return "unsupported";
    case FX_ERR_TRUNCATED: return "truncated file";
    case FX_ERR_BAD_MAGIC: return "not a GGUF file";
    case FX_ERR_BAD_VERSION: return "unsupported GGUF version";
    case FX_ERR_TOO_LARGE: return "count or size too large";
    case FX_ERR_BAD_TYPE: return "bad value type";
    case FX_ERR_BAD_TENSOR: return "bad tensor description";
    case FX_ERR_BAD_OFFSET: return "bad tensor data offset";
    case FX_ERR_BAD_ALIGNMENT: return "bad alignment";
    case FX_ERR_DUPLICATE: return "duplicate key or tensor";
    case FX_ERR_MISSING: return "required key or tensor missing";
    case FX_ERR_BAD_SHAPE: return "tensor shape or type wrong for the "
                                  "architecture";
    case FX_ERR_BAD_HPARAMS: return "bad hyperparameters";
    case FX_ERR_BUFFER_TOO_SMALL: return "buffer too small";
    case FX_ERR_BAD_VOCAB: return "bad vocabulary";
    case FX_ERR_BAD_TEMPLATE: return "bad chat template";
    case FX_ERR_STALE_HANDLE: return "stale or released handle";
    case FX_ERR_REENTRANT: return "call from inside a callback";
    case FX_ERR_NO_ROOM: return "request can never fit";
    case FX_ERR_INTERNAL: return "internal consistency check failed";
    case FX_ERR_GRAMMAR: return "grammar error";
    case FX_ERR_ALL_BANNED: return "every allowed token is banned";
    }
    return "unknown status";
}

/* The first public layout of each params struct: a caller compiled
 * against any later header passes at least this much. */
#define MODEL_PARAMS_V1_SIZE (offsetof(fx_model_params, log_level) + \
                              sizeof(fx_log_level))
#define MODEL_INFO_V1_SIZE (offsetof(fx_model_info, file_size) + \
                            sizeof(uint64_t))
#define TENSOR_INFO_V1_SIZE (offsetof(fx_tensor_info, n_bytes) + \
                             sizeof(uint64_t))

/* The _init functions are inline in ferrox.h and pass the host's sizeof;
 * only the sized ones are exported, and they never write past `size`. */
void fx_model_params_init_sized(fx_model_params *params, size_t size) {
    if (!params) return;
    fx_struct_init(params, size);
    FX_INIT_MEMBER(params, size, fx_model_params, log_level, FX_LOG_WARN);
}

fx_status fx_model_load(const char *path, const fx_model_params *params,
                        fx_model **out_model, char *errbuf,
                        size_t errbuf_size) {
    fx_error load_err;
    fx_status st;
    fx_error_clear(&load_err);
    if (errbuf && errbuf_size) errbuf[0] = '\0';
    if (out_model) *out_model = NULL;
    if (!path || !out_model) {
        st = fx_fail(&load_err, FX_ERR_INVALID_ARG,
                     "fx_model_load: %s is NULL", path ? "out_model" : "path");
        fx_error_copy(&load_err, errbuf, errbuf_size);
        return st;
    }

    fx_model_params p;
    fx_model_params_init(&p);
    if (params &&
        (st = fx_params_copy(&p, sizeof p, params, MODEL_PARAMS_V1_SIZE,
                             &load_err, "fx_model_params")) != FX_OK) {
        fx_error_copy(&load_err, errbuf, errbuf_size);
        return st;
    }
    const uint32_t known = FX_MODEL_VOCAB_ONLY | FX_MODEL_MAPPED_WEIGHTS |
                           FX_MODEL_EAGER_COPY;
    if (p.flags & ~known) {
        /* Refused like unknown batcher and request flags: a flag from a
         * newer header must not be silently ignored by an older library. */
        st = fx_fail(&load_err, FX_ERR_INVALID_ARG,
                     "fx_model_params.flags: unknown bits 0x%x",
                     (unsigned)(p.flags & ~known));
        fx_error_copy(&load_err, errbuf, errbuf_size);
        return st;
    }
    fx_alloc alloc;
    if (fx_alloc_init(&alloc, &p.allocator) != FX_OK) {
        st = fx_fail(&load_err, FX_ERR_INVALID_ARG,
                     "fx_model_params.allocator: set all three functions or "
                     "none");
        fx_error_copy(&load_err, errbuf, errbuf_size);
        return st;
    }

    fx_model *model = fx_calloc(&alloc, 1, sizeof *model);
    if (!model) {
        st = fx_fail(&load_err, FX_ERR_NOMEM, "out of memory");
        fx_error_copy(&load_err, errbuf, errbuf_size);
        return st;
    }
    model->alloc = alloc;
    model->flags = p.flags;
    model->log = (fx_logger){p.log_fn, p.log_user, p.log_level};

    if ((st = fx_gguf_open(path, &alloc, &model->gguf, &load_err)) != FX_OK)
        goto fail;
    if (p.flags & FX_MODEL_VOCAB_ONLY)
        st = fx_hparams_load_partial(model->gguf, &model->hp, &load_err);
    else
        st = fx_hparams_load(model->gguf, &model->hp, &load_err);
    if (st != FX_OK) goto fail;

    fx_gguf_str arch = {"", 0}, name = {"", 0};
    fx_gguf_get_str_opt(model->gguf, "general.architecture", &arch, NULL);
    fx_gguf_get_str_opt(model->gguf, "general.name", &name, NULL);
    model->arch = fx_strndup(&alloc, arch.ptr, (size_t)arch.len);
    model->name = fx_strndup(&alloc, name.ptr, (size_t)name.len);
    if (!model->arch || !model->name) {
        st = fx_fail(&load_err, FX_ERR_NOMEM, "out of memory");
        goto fail;
    }

    if ((st = fx_vocab_load(model->gguf, &alloc, &model->log, &model->vocab,
                            &load_err)) != FX_OK)
        goto fail;
    if (!(p.flags & FX_MODEL_VOCAB_ONLY)) {
        if ((st = fx_weights_bind(model->gguf, &model->hp, &alloc,
                                  &model->weights, &load_err)) != FX_OK)
            goto fail;
        model->has_weights = 1;
        if (!(p.flags & FX_MODEL_MAPPED_WEIGHTS) &&
            (st = fx_weights_repack(&model->weights, &model->hp, model->gguf,
                                    (p.flags & FX_MODEL_EAGER_COPY) != 0,
                                    &alloc, &load_err)) != FX_OK)
            goto fail;
    }

    fx_log(&model->log, FX_LOG_INFO,
           "loaded '%s': GGUF v%u, arch %s, %llu tensors, %llu metadata keys",
           path, model->gguf->version, model->arch,
           (unsigned long long)model->gguf->n_tensors,
           (unsigned long long)model->gguf->n_kv);
    *out_model = model;
    return FX_OK;

fail:
    fx_log(&model->log, FX_LOG_ERROR, "%s", load_err.message);
    fx_error_copy(&load_err, errbuf, errbuf_size);
    fx_model_destroy(model);
    return st;
}

void fx_model_free(fx_model *model) {
    if (!model) return;
    if (model->n_batchers > 0) {
        model->free_requested = 1;
        return;
    }
    fx_model_destroy(model);
}

void fx_model_destroy(fx_model *model) {
    fx_alloc alloc = model->alloc;
    if (model->has_weights) fx_weights_free(&model->weights, &alloc);
    fx_vocab_free(model->vocab);
    fx_gguf_close(model->gguf);
    fx_free(&alloc, model->arch);
    fx_free(&alloc, model->name);
    fx_free(&alloc, model);
}

const char *fx_model_errmsg(const fx_model *model) {
    if (!model) return "fx_model_errmsg: model is NULL";
    return model->err.message;
}

/* Records a failure on the model. The model is logically const to callers
 * (it is shared read-only); only its last-error text changes. */
static fx_status model_fail(const fx_model *model, fx_status status,
                            const char *what) {
    fx_model *m = (fx_model *)model;
    return fx_fail(&m->err, status, "%s", what);
}

void fx_model_info_init_sized(fx_model_info *info, size_t size) {
    if (!info) return;
    fx_struct_init(info, size);
}

fx_status fx_model_get_info(const fx_model *model, fx_model_info *info) {
    if (!model || !info) {
        if (model)
            return model_fail(model, FX_ERR_INVALID_ARG,
                              "fx_model_get_info: info is NULL");
        return FX_ERR_INVALID_ARG;
    }
    if (info->struct_size < MODEL_INFO_V1_SIZE)
        return model_fail(model, FX_ERR_INVALID_ARG,
                          "fx_model_get_info: struct_size too small; call "
                          "fx_model_info_init first");
    const fx_hparams *hp = &model->hp;
    fx_model_info full;
    memset(&full, 0, sizeof full);
    full.struct_size = info->struct_size;
    full.arch = model->arch;
    full.name = model->name;
    full.gguf_version = model->gguf->version;
    full.vocab_only = (model->flags & FX_MODEL_VOCAB_ONLY) ? 1 : 0;
    full.n_vocab = hp->n_vocab;
    full.n_ctx_train = hp->n_ctx_train;
    full.n_embd = hp->n_embd;
    full.n_layer = hp->n_layer;
    full.n_head = hp->n_head;
    full.n_head_kv = hp->n_head_kv;
    full.n_ff = hp->n_ff;
    full.n_rot = hp->n_rot;
    full.rope_freq_base = hp->rope_freq_base;
    full.rms_norm_eps = hp->rms_norm_eps;
    full.n_params = hp->n_params;
    full.n_tensors = model->gguf->n_tensors;
    full.n_meta = model->gguf->n_kv;
    full.file_size = model->gguf->size;
    /* An older caller gets the prefix it knows; a newer one keeps its
     * extra fields as it set them. */
    size_t n = info->struct_size < sizeof full ? info->struct_size : sizeof full;
    memcpy(info, &full, n);
    return FX_OK;
}

uint64_t fx_model_meta_count(const fx_model *model) {
    return model ? model->gguf->n_kv : 0;
}

const char *fx_model_meta_key(const fx_model *model, uint64_t index) {
    if (!model || index >= model->gguf->n_kv) return NULL;
    return model->gguf->kv[index].key;
}

fx_status fx_model_meta_format(const fx_model *model, uint64_t index,
                               char *buf, size_t buf_size, size_t *needed) {
    if (!model) return FX_ERR_INVALID_ARG;
    if (index >= model->gguf->n_kv)
        return model_fail(model, FX_ERR_INVALID_ARG,
                          "fx_model_meta_format: index out of range");
    if (!buf && buf_size > 0)
        return model_fail(model, FX_ERR_INVALID_ARG,
                          "fx_model_meta_format: buf is NULL");
    size_t need = fx_gguf_format_value(&model->gguf->kv[index], buf, buf_size);
    if (needed) *needed = need;
    if (need > buf_size)
        return model_fail(model, FX_ERR_BUFFER_TOO_SMALL,
                          "fx_model_meta_format: buffer too small");
    return FX_OK;
}

void fx_tensor_info_init_sized(fx_tensor_info *info, size_t size) {
    if (!info) return;
    fx_struct_init(info, size);
}

uint64_t fx_model_tensor_count(const fx_model *model) {
    return model ? model->gguf->n_tensors : 0;
}

fx_status fx_model_tensor_get(const fx_model *model, uint64_t index,
                              fx_tensor_info *info) {
    if (!model) return FX_ERR_INVALID_ARG;
    if (!info || info->struct_size < TENSOR_INFO_V1_SIZE)
        return model_fail(model, FX_ERR_INVALID_ARG,
                          "fx_model_tensor_get: info is NULL or its "
                          "struct_size is too small");
    if (index >= model->gguf->n_tensors)
        return model_fail(model, FX_ERR_INVALID_ARG,
                          "fx_model_tensor_get: index out of range");
    const fx_gguf *g = model->gguf;
    const fx_gguf_tensor *t = &g->tensors[index];
    fx_tensor_info full;
    memset(&full, 0, sizeof full);
    full.struct_size = info->struct_size;
    full.name = t->name;
    full.type = t->type;
    full.type_name = fx_ggml_type_name(t->type);
    full.n_dims = t->n_dims;
    for (int d = 0; d < 4; d++) full.dims[d] = t->ne[d];
    full.offset = g->data_offset + t->offset;
    full.n_bytes = t->n_bytes;
    size_t n = info->struct_size < sizeof full ? info->struct_size : sizeof full;
    memcpy(info, &full, n);
    return FX_OK;
}
