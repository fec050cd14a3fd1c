/*
 * Binds the architecture's tensors to typed pointers into the mapping. The
 * shapes were checked by fx_hparams_load; here only the pointers are taken
 * and their alignment confirmed, since f32 vectors are read as floats.
 */
#include "model.h"

#include <stdio.h>
#include <string.h>

static fx_status bind_tensor(const fx_gguf *g, const char *name,
                             const fx_gguf_tensor **out, fx_error *err) {
    *out = fx_gguf_find_tensor(g, name);
    if (!*out)
        return fx_fail(err, FX_ERR_MISSING, "required tensor '%s' is missing",
                       name);
    /* general.alignment may legally be 1 or 2; a float read through a
     * misaligned pointer is undefined behaviour. */
    if ((uintptr_t)(*out)->data % sizeof(float) != 0)
        return fx_fail(err, FX_ERR_BAD_ALIGNMENT,
                       "tensor '%s' data at file offset %llu is not 4-byte "
                       "aligned",
                       name, (unsigned long long)((*out)->data - g->base));
    return FX_OK;
}

static fx_status bind_matrix(const fx_gguf *g, const char *name, fx_matrix *m,
                             fx_error *err) {
    const fx_gguf_tensor *t;
    fx_status st = bind_tensor(g, name, &t, err);
    if (st != FX_OK) return st;
    m->data = t->data;
    m->type = (fx_wtype)t->type;
    m->k = (uint32_t)t->ne[0];
    m->n = (uint32_t)t->ne[1];
    return FX_OK;
}

static fx_status bind_vector(const fx_gguf *g, const char *name,
                             const float **v, fx_error *err) {
    const fx_gguf_tensor *t;
    fx_status st = bind_tensor(g, name, &t, err);
    if (st == FX_OK) *v = (const float *)(const void *)t->data;
    return st;
}

fx_status fx_weights_bind(const fx_gguf *g, const fx_hparams *hp,
                          const fx_alloc *alloc, fx_weights *w, fx_error *err) {
    fx_status st;
    memset(w, 0, sizeof *w);
    if ((st = bind_matrix(g, "token_embd.weight", &w->tok_embd, err)) ||
        (st = bind_vector(g, "output_norm.weight", &w->output_norm, err)))
        return st;
    if (fx_gguf_find_tensor(g, "output.weight")) {
        if ((st = bind_matrix(g, "output.weight", &w->output, err))) return st;
    } else {
        w->output = w->tok_embd; /* tied embedding */
    }
    if (fx_gguf_find_tensor(g, "rope_freqs.weight") &&
        (st = bind_vector(g, "rope_freqs.weight", &w->rope_freqs, err)))
        return st;

    w->layers = fx_calloc(alloc, hp->n_layer, sizeof *w->layers);
    if (!w->layers) return fx_fail(err, FX_ERR_NOMEM, "out of memory");
    for (uint32_t i = 0; i < hp->n_layer; i++) {
        fx_layer_weights *l = &w->layers[i];
        char name[64];
#define MATRIX(suffix, field)                                                 \
    snprintf(name, sizeof name, "blk.%u." suffix, i);                         \
    if ((st = bind_matrix(g, name, &l->field, err)) != FX_OK) goto fail;
#define VECTOR(suffix, field)                                                 \
    snprintf(name, sizeof name, "blk.%u." suffix, i);                         \
    if ((st = bind_vector(g, name, &l->field, err)) != FX_OK) goto fail;
        VECTOR("attn_norm.weight", attn_norm)
        MATRIX("attn_q.weight", wq)
        MATRIX("attn_k.weight", wk)
        MATRIX("attn_v.weight", wv)
        MATRIX("attn_output.weight", wo)
        VECTOR("ffn_norm.weight", ffn_norm)
        MATRIX("ffn_gate.weight", w_gate)
        MATRIX("ffn_up.weight", w_up)
        MATRIX("ffn_down.weight", w_down)
        if (hp->arch == FX_ARCH_QWEN2) {
            VECTOR("attn_q.bias", bq)
            VECTOR("attn_k.bias", bk)
            VECTOR("attn_v.bias", bv)
        }
#undef MATRIX
#undef VECTOR
    }
    return FX_OK;
fail:
    fx_weights_free(w, alloc);
    return st;
}

void fx_weights_free(fx_weights *w, const fx_alloc *alloc) {
    if (!w) return;
    fx_free(alloc, w->layers);
    w->layers = NULL;
}
