/*
 * The batched forward pass of the llama family.
 *
 * One call runs T tokens that may belong to different sequences, each at
 * its own position, each sequence with its own KV view. Every per-token
 * computation (norms, RoPE, attention over its own sequence) is independent
 * of the other tokens, and the matmuls have a fixed reduction order per
 * output element (kernels.h), so a token's logits come out bit for bit the
 * same however the batch is composed, chunked or threaded.
 */
#include "model.h"

#include "attention.h"

#include <math.h>
#include <string.h>

struct fx_forward {
    fx_alloc alloc;
    const fx_hparams *hp;
    const fx_weights *model_w; /* shared with other forward passes */
    fx_weights view;           /* this pass's: model.h, fx_weights_view_init */
    const fx_weights *w;       /* &view */
    bool ran;                  /* a pass has run: the next copies a slice */
    fx_kernels *kc;
    fx_attn_kernels ak;
    fx_swiglu_fn ffn_gate;   /* SwiGLU or GeGLU (hp->ffn_act) */
    fx_softcap_fn softcap;
    uint32_t max_tokens;
    uint32_t max_ctx;
    uint32_t q_dim, kv_dim;
    float *x;        /* [max_tokens][n_embd] residual stream */
    float *xb;       /* [max_tokens][n_embd] normed input of a sublayer */
    float *q;        /* [max_tokens][q_dim] */
    float *k;        /* [max_tokens][kv_dim] */
    float *v;        /* [max_tokens][kv_dim] */
    float *attn;     /* [max_tokens][q_dim] attention output */
    float *proj;     /* [max_tokens][n_embd] sublayer output */
    float *gate;     /* [max_tokens][n_ff] */
    float *up;       /* [max_tokens][n_ff] */
    float *rope;     /* [max_tokens][n_rot] cos/sin per token */
    float *rope_swa; /* the same for sliding layers where their RoPE
                        differs (Gemma 3), else NULL: f->rope serves */
    const float *rope_factors; /* Llama 3's, or LongRoPE's long or short
                                  ones for this max_ctx, or NULL */
    float *scores;   /* [n_threads][heads per KV head][max_ctx] attention
                        weights */
    uint32_t *layer_slot; /* [n_layer] fx_kv_layer_slot, for ring views */
};

uint32_t fx_kv_group_layers(const fx_hparams *hp, fx_kv_group group) {
    if (group == FX_KV_ALL_LAYERS) return hp->n_layer;
    uint32_t n = 0;
    for (uint32_t l = 0; l < hp->n_layer; l++)
        n += fx_layer_slides(hp, l) == (group == FX_KV_SLIDING_LAYERS);
    return n;
}

uint32_t fx_kv_layer_slot(const fx_hparams *hp, uint32_t l) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < l; i++)
        n += fx_layer_slides(hp, i) == fx_layer_slides(hp, l);
    return n;
}

size_t fx_kv_group_elems(const fx_hparams *hp, uint32_t block_tokens,
                         fx_kv_group group) {
    return (size_t)fx_kv_group_layers(hp, group) * 2 * block_tokens *
           hp->n_head_kv * hp->head_dim;
}

size_t fx_kv_block_elems(const fx_hparams *hp, uint32_t block_tokens) {
    return fx_kv_group_elems(hp, block_tokens, FX_KV_ALL_LAYERS);
}

void fx_forward_free(fx_forward *f) {
    if (!f) return;
    fx_alloc alloc = f->alloc;
    float *buffers[] = {f->x,    f->xb,   f->q,  f->k,    f->v,     f->attn,
                        f->proj, f->gate, f->up, f->rope, f->scores,
                        f->rope_swa};
    for (size_t i = 0; i < sizeof buffers / sizeof *buffers; i++)
        fx_free(&alloc, buffers[i]);
    fx_free(&alloc, f->layer_slot);
    fx_weights_view_free(&f->view, &alloc);
    fx_free(&alloc, f);
}

fx_status fx_forward_create(const fx_alloc *alloc, const fx_hparams *hp,
                            const fx_weights *w, fx_kernels *kc,
                            uint32_t max_tokens, uint32_t max_ctx,
                            fx_forward **out, fx_error *err) {
    *out = NULL;
    if (max_tokens == 0 || max_ctx == 0)
        return fx_fail(err, FX_ERR_INVALID_ARG,
                       "forward: max_tokens and max_ctx must be positive");
    fx_forward *f = fx_calloc(alloc, 1, sizeof *f);
    if (!f) return fx_fail(err, FX_ERR_NOMEM, "out of memory");
    f->alloc = *alloc;
    f->hp = hp;
    f->model_w = w;
    f->w = &f->view;
    f->kc = kc;
    fx_attn_kernels_init(&f->ak, fx_kernels_isa(kc));
    f->ffn_gate = hp->ffn_act == FX_FFN_GELU ? fx_geglu_for(fx_kernels_isa(kc))
                                             : fx_swiglu_for(fx_kernels_isa(kc));
    f->softcap = fx_softcap_for(fx_kernels_isa(kc));
    f->max_tokens = max_tokens;
    f->max_ctx = max_ctx;
    /* LongRoPE: the long factors serve a context beyond the original
     * one (llama.cpp decides by its context per sequence the same way). */
    f->rope_factors = w->rope_freqs ? w->rope_freqs
                      : max_ctx > hp->n_ctx_orig && w->rope_long ? w->rope_long
                                                                  : w->rope_short;
    f->q_dim = hp->n_head * hp->head_dim;
    f->kv_dim = hp->n_head_kv * hp->head_dim;
    size_t t = max_tokens;
    unsigned threads = fx_pool_threads(fx_kernels_pool(kc));
    f->x = fx_malloc_array(alloc, t * hp->n_embd, sizeof(float));
    f->xb = fx_malloc_array(alloc, t * hp->n_embd, sizeof(float));
    f->q = fx_malloc_array(alloc, t * f->q_dim, sizeof(float));
    f->k = fx_malloc_array(alloc, t * f->kv_dim, sizeof(float));
    f->v = fx_malloc_array(alloc, t * f->kv_dim, sizeof(float));
    f->attn = fx_malloc_array(alloc, t * f->q_dim, sizeof(float));
    f->proj = fx_malloc_array(alloc, t * hp->n_embd, sizeof(float));
    f->gate = fx_malloc_array(alloc, t * hp->n_ff, sizeof(float));
    f->up = fx_malloc_array(alloc, t * hp->n_ff, sizeof(float));
    f->rope = fx_malloc_array(alloc, t * hp->n_rot, sizeof(float));
    const bool own_swa_rope = hp->n_swa > 0 &&
                              (hp->rope_freq_base_swa != hp->rope_freq_base ||
                               hp->rope_freq_scale_swa != hp->rope_freq_scale);
    if (own_swa_rope)
        f->rope_swa = fx_malloc_array(alloc, t * hp->n_rot, sizeof(float));
    f->scores = fx_malloc_array(alloc,
                                (size_t)threads * (hp->n_head / hp->n_head_kv) *
                                    max_ctx,
                                sizeof(float));
    f->layer_slot = fx_malloc_array(alloc, hp->n_layer, sizeof *f->layer_slot);
    if (f->layer_slot)
        for (uint32_t l = 0; l < hp->n_layer; l++)
            f->layer_slot[l] = fx_kv_layer_slot(hp, l);
    if (!f->x || !f->xb || !f->q || !f->k || !f->v || !f->attn || !f->proj ||
        !f->gate || !f->up || !f->rope || !f->scores || !f->layer_slot ||
        (own_swa_rope && !f->rope_swa)) {
        fx_forward_free(f);
        return fx_fail(err, FX_ERR_NOMEM,
                       "out of memory for forward scratch (%u tokens)",
                       max_tokens);
    }
    fx_status st = fx_weights_view_init(w, hp, fx_kernels_pool(kc), alloc,
                                        &f->view, err);
    if (st != FX_OK) {
        fx_forward_free(f);
        return st;
    }
    *out = f;
    return FX_OK;
}

const fx_weights *fx_forward_weights(const fx_forward *f) { return f->w; }

/* ---- KV addressing ---- */

/* Head `head`'s key (or value) at position pos: model.h gives the layout
 * (a head's positions of a block side by side). */
static void *kv_slot(const fx_kv_view *view, const fx_forward *f,
                     uint32_t layer, int is_value, uint32_t head,
                     uint32_t pos) {
    const uint32_t bt = view->block_tokens;
    uint8_t *block = view->blocks[pos / bt];
    size_t stride = view->run_stride;
    uint32_t slot = layer;
    if (view->ring) {
        slot = f->layer_slot[layer];
        if (fx_layer_slides(f->hp, layer)) {
            block = view->ring[(pos / bt) % view->ring_blocks];
            stride = view->ring_run_stride;
        }
    }
    const size_t run = ((size_t)slot * 2 + (uint32_t)is_value) *
                           f->hp->n_head_kv + head;
    return block + (run * stride + (size_t)(pos % bt) * f->hp->head_dim) *
                       fx_kv_dtype_size(view->dtype);
}

/* Stores hd elements of src at a KV slot, rounded once to the cache's
 * dtype (round to nearest even for F16: the one rounding an F16 cache
 * adds). */
static void kv_store(const fx_kv_view *view, void *slot, const float *src,
                     uint32_t hd) {
    if (view->dtype == FX_KV_DTYPE_F16)
        fx_f32_to_f16_row(slot, src, hd);
    else
        memcpy(slot, src, hd * sizeof(float));
}

/* ---- attention ---- */

typedef struct attn_job {
    fx_forward *f;
    const fx_fwd_token *tokens;
    const fx_kv_view *views;
    uint32_t layer;
    fx_rope_mode rope_mode;
    bool place; /* each task first ropes and stores its own head (place_kv) */
} attn_job;

/* RoPE on token t's query heads of KV head h's group and on its key head
 * h, then its key and value of head h into its KV slot: per head the same
 * operations whichever way the heads are grouped into calls. */
static void place_kv(const attn_job *job, uint32_t t, uint32_t kv_head) {
    fx_forward *f = job->f;
    const fx_hparams *hp = f->hp;
    const fx_layer_weights *lw = &f->w->layers[job->layer];
    const uint32_t hd = hp->head_dim, group = hp->n_head / hp->n_head_kv;
    const fx_fwd_token *tok = &job->tokens[t];
    const fx_kv_view *view = &job->views[tok->seq];
    const bool own_rope = f->rope_swa && fx_layer_slides(hp, job->layer);
    const float *cs = (own_rope ? f->rope_swa : f->rope) + (size_t)t * hp->n_rot;
    const size_t at = (size_t)t * f->kv_dim + (size_t)kv_head * hd;
    float *q = f->q + (size_t)t * f->q_dim + (size_t)kv_head * group * hd;
    if (lw->q_norm) {
        /* Qwen3, Gemma 3: each head RMS-normed on its own, before RoPE. */
        for (uint32_t h = 0; h < group; h++)
            fx_rmsnorm(q + (size_t)h * hd, q + (size_t)h * hd, lw->q_norm, hd,
                       hp->rms_norm_eps);
        fx_rmsnorm(f->k + at, f->k + at, lw->k_norm, hd, hp->rms_norm_eps);
    }
    (void)fx_rope_apply(q, group, hd, hp->n_rot, cs, job->rope_mode);
    (void)fx_rope_apply(f->k + at, 1, hd, hp->n_rot, cs, job->rope_mode);
    kv_store(view, kv_slot(view, f, job->layer, 0, kv_head, tok->pos),
             f->k + at, hd);
    kv_store(view, kv_slot(view, f, job->layer, 1, kv_head, tok->pos),
             f->v + at, hd);
}

/* Every token of the call rotated and stored (place_kv), one token a
 * task. */
static void place_token(void *ctx, size_t t, unsigned thread) {
    const attn_job *job = ctx;
    (void)thread;
    for (uint32_t h = 0; h < job->f->hp->n_head_kv; h++)
        place_kv(job, (uint32_t)t, h);
}

/* The small vectors the serial work between two matmuls reads or writes
 * (a norm's weights, the KV slots of the token) are cold by then: a step
 * streams every weight past the caches between two visits to a layer.
 * Touched right before the matmul that precedes their use, they arrive
 * while it runs; cold, a norm costs several times as much, the other
 * thread idle meanwhile. */
/* Tokens whose KV slots are prefetched (a decode step's rows; a long
 * prefill would only issue prefetches for lines it is about to write). */
#define FX_SMALL_PREFETCH_TOKENS 64u

static void prefetch_lines(const void *p, size_t bytes, bool for_write) {
    const char *c = p;
    for (size_t o = 0; o < bytes; o += 64) {
        if (for_write) __builtin_prefetch(c + o, 1);
        else __builtin_prefetch(c + o);
    }
}

/* How far ahead of the scores loop keys and values are prefetched. A
 * decode step streams every weight between two visits to a layer's KV,
 * so the KV comes from DRAM each time, a head's slice of it in 256-byte
 * pieces 1 KB or more apart, which the hardware prefetcher alone follows
 * poorly. */
#define FX_KV_PREFETCH_POSITIONS 64u

/* Keeps one head's keys (or values) prefetched FX_KV_PREFETCH_POSITIONS
 * past `done` (the positions read so far), up to n_pos: *prefetched is
 * how far it got. A head's positions of a block are side by side, so
 * each block's share is one run of lines. */
static void prefetch_ahead(const fx_kv_view *view, const fx_forward *f,
                           uint32_t layer, int is_value, uint32_t kv_head,
                           uint32_t done, uint32_t n_pos,
                           uint32_t *prefetched) {
    const uint32_t bt = view->block_tokens;
    uint32_t until = done + FX_KV_PREFETCH_POSITIONS;
    if (until > n_pos) until = n_pos;
    while (*prefetched < until) {
        const uint32_t j = *prefetched;
        uint32_t n = bt - j % bt;
        if (n > until - j) n = until - j;
        prefetch_lines(kv_slot(view, f, layer, is_value, kv_head, j),
                       (size_t)n * f->hp->head_dim *
                           fx_kv_dtype_size(view->dtype),
                       false);
        *prefetched = j + n;
    }
}

/* One token and one KV head, for each query head h that shares it:
 * softmax(q_h . k_j / sqrt(d)) weighted sum of v_j over j = 0..pos, each
 * reduction in increasing j (and i) order -- exactly what one head at a
 * time computes. The keys and values of a KV block are consecutive slots
 * (kv_dim floats apart), so the kernels take a block's positions at once. */
static void attend_one(void *ctx, size_t task, unsigned thread) {
    const attn_job *job = ctx;
    fx_forward *f = job->f;
    const fx_hparams *hp = f->hp;
    const uint32_t hd = hp->head_dim;
    const uint32_t group = hp->n_head / hp->n_head_kv;
    const uint32_t t = (uint32_t)(task / hp->n_head_kv);
    const uint32_t kv_head = (uint32_t)(task % hp->n_head_kv);
    const fx_fwd_token *tok = &job->tokens[t];
    const fx_kv_view *view = &job->views[tok->seq];
    const uint32_t bt = view->block_tokens;
    const size_t q_off = (size_t)t * f->q_dim + (size_t)kv_head * group * hd;
    const float *q = f->q + q_off;
    float *scores = f->scores + (size_t)thread * group * f->max_ctx;
    const uint32_t n_pos = tok->pos + 1;
    /* A sliding layer sees the last n_swa positions, itself included. */
    const uint32_t first =
        fx_layer_slides(hp, job->layer) && n_pos > hp->n_swa ? n_pos - hp->n_swa : 0;
    if (job->place) place_kv(job, t, kv_head);

    uint32_t prefetched = first;
    for (uint32_t j = first; j < n_pos;) {
        const uint32_t n = n_pos - j < bt - j % bt ? n_pos - j : bt - j % bt;
        prefetch_ahead(view, f, job->layer, 0, kv_head, j + n, n_pos,
                       &prefetched);
        const void *k = kv_slot(view, f, job->layer, 0, kv_head, j);
        if (view->dtype == FX_KV_DTYPE_F16)
            f->ak.scores_f16(scores + j, f->max_ctx, q, group, k, hd, n, hd,
                             hp->attn_scale);
        else
            f->ak.scores(scores + j, f->max_ctx, q, group, k, hd, n, hd,
                         hp->attn_scale);
        j += n;
    }
    for (uint32_t g = 0; g < group; g++) {
        float *row = scores + (size_t)g * f->max_ctx + first;
        if (hp->attn_softcap > 0.0f)
            f->softcap(row, n_pos - first, hp->attn_softcap);
        f->ak.softmax(row, n_pos - first);
    }
    float *out = f->attn + q_off;
    memset(out, 0, (size_t)group * hd * sizeof *out);
    prefetched = first;
    for (uint32_t j = first; j < n_pos;) {
        const uint32_t n = n_pos - j < bt - j % bt ? n_pos - j : bt - j % bt;
        prefetch_ahead(view, f, job->layer, 1, kv_head, j + n, n_pos,
                       &prefetched);
        const void *v = kv_slot(view, f, job->layer, 1, kv_head, j);
        if (view->dtype == FX_KV_DTYPE_F16)
            f->ak.weighted_sum_f16(out, scores + j, f->max_ctx, group, v, hd, n,
                                   hd);
        else
            f->ak.weighted_sum(out, scores + j, f->max_ctx, group, v, hd, n, hd);
        j += n;
    }
}

/* From this many tokens a call, the per-token serial work between
 * matmuls (residual adds, norms, SwiGLU) runs on every pool thread, one
 * token a task: one pool run costs about as much as the halved work saves
 * at 8 tokens. Same bits either way: each token's own ops. */
#define FX_PARALLEL_TOKENS_MIN 16u

/* A residual add (x += proj) and/or an rmsnorm of x into xb, per token,
 * the two in one pass over the token's row. */
typedef struct resid_job {
    fx_forward *f;
    const float *norm_w; /* rmsnorm x into xb with it, or NULL */
    bool add;            /* first x += proj */
    const float *post_w; /* Gemma: proj rmsnormed with it before the add */
} resid_job;
static void resid_one(void *ctx, size_t t, unsigned thread) {
    const resid_job *job = ctx;
    fx_forward *f = job->f;
    (void)thread;
    const size_t d = f->hp->n_embd;
    float *x = f->x + t * d;
    if (job->add && job->post_w)
        fx_rmsnorm(f->proj + t * d, f->proj + t * d, job->post_w, d,
                   f->hp->rms_norm_eps);
    if (job->add) fx_add(x, x, f->proj + t * d, d);
    if (job->norm_w)
        fx_rmsnorm(f->xb + t * d, x, job->norm_w, d, f->hp->rms_norm_eps);
}
static fx_status resid(fx_forward *f, uint32_t n, bool add,
                       const float *post_w, const float *norm_w) {
    resid_job job = {f, norm_w, add, post_w};
    if (n >= FX_PARALLEL_TOKENS_MIN)
        return fx_pool_run(fx_kernels_pool(f->kc), resid_one, &job, n);
    for (uint32_t t = 0; t < n; t++) resid_one(&job, t, 0);
    return FX_OK;
}
/* gate = SwiGLU(gate, up) (GeGLU for Gemma) for one token. */
static void swiglu_one(void *ctx, size_t t, unsigned thread) {
    fx_forward *f = ctx;
    (void)thread;
    const size_t ff = f->hp->n_ff;
    f->ffn_gate(f->gate + t * ff, f->gate + t * ff, f->up + t * ff, ff);
}

/* ---- the pass ---- */

static fx_status check_tokens(const fx_forward *f, const fx_fwd_token *tokens,
                              uint32_t n, const fx_kv_view *views,
                              uint32_t n_views, fx_error *err) {
    if (n == 0 || n > f->max_tokens)
        return fx_fail(err, FX_ERR_INVALID_ARG,
                       "forward: %u tokens (1..%u allowed)", n, f->max_tokens);
    for (uint32_t t = 0; t < n; t++) {
        const fx_fwd_token *tok = &tokens[t];
        if (tok->token < 0 || (uint32_t)tok->token >= f->hp->n_vocab)
            return fx_fail(err, FX_ERR_INVALID_ARG,
                           "forward: token id %d is outside the vocabulary "
                           "(%u)",
                           tok->token, f->hp->n_vocab);
        if (tok->seq >= n_views)
            return fx_fail(err, FX_ERR_INVALID_ARG,
                           "forward: sequence %u of %u", tok->seq, n_views);
        const fx_kv_view *v = &views[tok->seq];
        if (v->dtype != FX_KV_DTYPE_F32 && v->dtype != FX_KV_DTYPE_F16)
            return fx_fail(err, FX_ERR_INVALID_ARG,
                           "forward: unknown KV dtype %d", (int)v->dtype);
        if (v->block_tokens == 0 || tok->pos >= f->max_ctx ||
            tok->pos / v->block_tokens >= v->n_blocks)
            return fx_fail(err, FX_ERR_INVALID_ARG,
                           "forward: position %u has no KV slot", tok->pos);
    }
    return FX_OK;
}

/* Whether no two of the tokens share a sequence (a decode step's rows),
 * checked up to FX_OWN_SEQ_TOKENS tokens: beyond, a call is a prefill,
 * where RoPE is a small part of the work anyway. */
#define FX_OWN_SEQ_TOKENS 64u
static bool own_sequences(const fx_fwd_token *tokens, uint32_t n) {
    if (n > FX_OWN_SEQ_TOKENS) return false;
    for (uint32_t a = 1; a < n; a++)
        for (uint32_t b = 0; b < a; b++)
            if (tokens[a].seq == tokens[b].seq) return false;
    return true;
}

static void add_bias(float *rows, const float *bias, uint32_t n_rows,
                     uint32_t width) {
    if (!bias) return;
    for (uint32_t t = 0; t < n_rows; t++)
        fx_add(rows + (size_t)t * width, rows + (size_t)t * width, bias, width);
}

fx_status fx_forward_run(fx_forward *f, const fx_fwd_token *tokens, uint32_t n,
                         const fx_kv_view *views, uint32_t n_views,
                         float *logits_out, unsigned flags, fx_error *err) {
    fx_status st = check_tokens(f, tokens, n, views, n_views, err);
    if (st != FX_OK) return st;
    /* Not before the first pass: a model's first token comes from the
     * mapping at once, the copy following over the next passes. */
    if (f->ran)
        fx_weights_view_step(f->model_w, &f->view, fx_kernels_pool(f->kc));
    f->ran = true;
    const fx_hparams *hp = f->hp;
    const fx_weights *w = f->w;
    const uint32_t d = hp->n_embd, ff = hp->n_ff;
    const fx_rope_mode rope_mode =
        hp->arch == FX_ARCH_LLAMA ? FX_ROPE_NORMAL : FX_ROPE_NEOX;
    size_t embd_row = fx_wtype_row_bytes(w->tok_embd.type, d);

    for (uint32_t t = 0; t < n; t++) {
        const uint8_t *row =
            (const uint8_t *)w->tok_embd.data + (size_t)tokens[t].token * embd_row;
        float *x = f->x + (size_t)t * d;
        if ((st = fx_wtype_row_to_f32(x, row, w->tok_embd.type, d)) != FX_OK)
            return fx_fail(err, st, "forward: embedding lookup failed");
        if (hp->embd_scale) {
            const float sc = sqrtf((float)d);
            for (uint32_t i = 0; i < d; i++) x[i] *= sc;
        }
        if ((st = fx_rope_cache(f->rope + (size_t)t * hp->n_rot, tokens[t].pos,
                                hp->n_rot, hp->rope_freq_base,
                                hp->rope_freq_scale, hp->rope_attn_factor,
                                f->rope_factors)) != FX_OK ||
            (f->rope_swa &&
             (st = fx_rope_cache(f->rope_swa + (size_t)t * hp->n_rot,
                                 tokens[t].pos, hp->n_rot, hp->rope_freq_base_swa,
                                 hp->rope_freq_scale_swa, hp->rope_attn_factor,
                                 f->rope_factors)) != FX_OK))
            return fx_fail(err, st, "forward: RoPE table failed");
    }

#define MATMUL(in, ld_in, mat, out, ld_out)                                   \
    if ((st = fx_matmul(f->kc, in, ld_in, n, (mat).data, (mat).type, (mat).n, \
                        (mat).k, out, ld_out, flags)) != FX_OK)               \
        return fx_fail(err, st, "forward: matmul failed");
/* Weights that read the same input go in one pool run (one hand-off to
 * the threads, and one quantization of x for Q8_0): same bits. */
#define OUT(mat, out, ld_out) {(mat).data, (mat).type, (mat).n, out, ld_out}

    /* Each matmul is preceded by a hint for the one after it, which the
     * threads prefetch while they wait (fx_matmul_prefetch). */
#define PREFETCH(k, ...)                                                     \
    do {                                                                     \
        const fx_mm_out next_[] = {__VA_ARGS__};                             \
        fx_matmul_prefetch(f->kc, n, k, next_,                               \
                           sizeof next_ / sizeof *next_);                    \
    } while (0)

    const bool own_seqs = own_sequences(tokens, n);
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        const fx_layer_weights *lw = &w->layers[l];
        const fx_layer_weights *next = l + 1 < hp->n_layer ? lw + 1 : NULL;
        /* attention block (after the previous layer's residual) */
        if ((st = resid(f, n, l > 0, l > 0 ? lw[-1].ffn_post_norm : NULL,
                        lw->attn_norm)) != FX_OK)
            return fx_fail(err, st, "forward: norm failed");
        prefetch_lines(lw->ffn_norm, d * sizeof(float), false);
        for (uint32_t t = 0; t < n && t < FX_SMALL_PREFETCH_TOKENS; t++) {
            const fx_kv_view *view = &views[tokens[t].seq];
            for (uint32_t h = 0; h < hp->n_head_kv; h++)
                for (int kv = 0; kv < 2; kv++)
                    prefetch_lines(kv_slot(view, f, l, kv, h, tokens[t].pos),
                                   hp->head_dim * fx_kv_dtype_size(view->dtype),
                                   true);
        }
        const fx_mm_out qkv[3] = {OUT(lw->wq, f->q, f->q_dim),
                                  OUT(lw->wk, f->k, f->kv_dim),
                                  OUT(lw->wv, f->v, f->kv_dim)};
        PREFETCH(f->q_dim, OUT(lw->wo, f->proj, d));
        if ((st = fx_matmul_multi(f->kc, f->xb, d, n, d, qkv, 3, flags)) !=
            FX_OK)
            return fx_fail(err, st, "forward: matmul failed");
        add_bias(f->q, lw->bq, n, f->q_dim);
        add_bias(f->k, lw->bk, n, f->kv_dim);
        add_bias(f->v, lw->bv, n, f->kv_dim);
        /* A token that shares the call with earlier tokens of its own
         * sequence attends to their K and V of this layer, so then every
         * token's are stored before any attends (from 16 tokens on every
         * thread). Otherwise each attention task stores its own first
         * (place_kv): a serial RoPE and store in the caller would read q,
         * k and v that both threads wrote, a cross-core line each. Same
         * bits: every head gets the same operations either way. */
        attn_job job = {f, tokens, views, l, rope_mode, own_seqs};
        if (!own_seqs) {
            if (n >= FX_PARALLEL_TOKENS_MIN) {
                if ((st = fx_pool_run(fx_kernels_pool(f->kc), place_token,
                                      &job, n)) != FX_OK)
                    return fx_fail(err, st, "forward: RoPE failed");
            } else {
                for (uint32_t t = 0; t < n; t++) place_token(&job, t, 0);
            }
        }
        if ((st = fx_pool_run(fx_kernels_pool(f->kc), attend_one, &job,
                              (size_t)n * hp->n_head_kv)) != FX_OK)
            return fx_fail(err, st, "forward: attention failed");
        PREFETCH(d, OUT(lw->w_gate, f->gate, ff), OUT(lw->w_up, f->up, ff));
        MATMUL(f->attn, f->q_dim, lw->wo, f->proj, d)

        /* feed-forward block (SwiGLU) */
        if ((st = resid(f, n, true, lw->attn_post_norm, lw->ffn_norm)) != FX_OK)
            return fx_fail(err, st, "forward: norm failed");
        prefetch_lines(next ? next->attn_norm : w->output_norm,
                       d * sizeof(float), false);
        const fx_mm_out gate_up[2] = {OUT(lw->w_gate, f->gate, ff),
                                      OUT(lw->w_up, f->up, ff)};
        PREFETCH(ff, OUT(lw->w_down, f->proj, d));
        if ((st = fx_matmul_multi(f->kc, f->xb, d, n, d, gate_up, 2, flags)) !=
            FX_OK)
            return fx_fail(err, st, "forward: matmul failed");
        if (n >= FX_PARALLEL_TOKENS_MIN) {
            if ((st = fx_pool_run(fx_kernels_pool(f->kc), swiglu_one, f, n)) !=
                FX_OK)
                return fx_fail(err, st, "forward: SwiGLU failed");
        } else {
            for (uint32_t t = 0; t < n; t++) swiglu_one(f, t, 0);
        }
        if (next)
            PREFETCH(d, OUT(next->wq, f->q, f->q_dim),
                     OUT(next->wk, f->k, f->kv_dim),
                     OUT(next->wv, f->v, f->kv_dim));
        else
            PREFETCH(d, OUT(w->output, NULL, hp->n_vocab));
        MATMUL(f->gate, ff, lw->w_down, f->proj, d)
    }
    /* The last layer's residual (the others' open the next layer). */
    if (hp->n_layer > 0 &&
        (st = resid(f, n, true, w->layers[hp->n_layer - 1].ffn_post_norm,
                    NULL)) != FX_OK)
        return fx_fail(err, st, "forward: residual failed");

    /* Logits only for the tokens that asked: the output matrix is the
     * largest in most small models, and prefill needs just the last row. */
    uint32_t n_logits = 0;
    for (uint32_t t = 0; t < n; t++) {
        if (!tokens[t].logits) continue;
        fx_rmsnorm(f->xb + (size_t)n_logits * d, f->x + (size_t)t * d,
                   w->output_norm, d, hp->rms_norm_eps);
        n_logits++;
    }
    /* The next call most likely starts where this one did. */
    if (hp->n_layer > 0) {
        const fx_layer_weights *first = &w->layers[0];
        prefetch_lines(first->attn_norm, d * sizeof(float), false);
        PREFETCH(d, OUT(first->wq, f->q, f->q_dim),
                 OUT(first->wk, f->k, f->kv_dim),
                 OUT(first->wv, f->v, f->kv_dim));
    }
#undef PREFETCH
#undef MATMUL
#undef OUT
    if (n_logits == 0) return FX_OK;
    if (!logits_out)
        return fx_fail(err, FX_ERR_INVALID_ARG,
                       "forward: logits requested but no output buffer");
    if ((st = fx_matmul(f->kc, f->xb, d, n_logits, w->output.data,
                        w->output.type, w->output.n, w->output.k, logits_out,
                        hp->n_vocab, flags)) != FX_OK)
        return fx_fail(err, st, "forward: output matmul failed");
    if (hp->final_softcap > 0.0f)
        f->softcap(logits_out, (size_t)n_logits * hp->n_vocab, hp->final_softcap);
    return FX_OK;
}
