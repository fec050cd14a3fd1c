/*
 * Binds the architecture's tensors to typed pointers into the mapping. The
 * shapes were checked by fx_hparams_load; here only the pointers are taken
 * and their alignment confirmed, since f32 vectors are read as floats.
 */
#include "model.h"

#include "../kernels/quants.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
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

/* rows row0..row0+n-1 of a matrix as a matrix of their own: a fused
 * tensor's parts (Phi-3's Q, K and V; its gate and up). */
static fx_matrix matrix_rows(const fx_matrix *m, uint32_t row0, uint32_t n) {
    fx_matrix part = *m;
    part.data = (const uint8_t *)m->data +
                (size_t)row0 * fx_wtype_row_bytes(m->type, m->k);
    part.n = n;
    return part;
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
    if (fx_gguf_find_tensor(g, "rope_factors_long.weight") &&
        (st = bind_vector(g, "rope_factors_long.weight", &w->rope_long, err)))
        return st;
    if (fx_gguf_find_tensor(g, "rope_factors_short.weight") &&
        (st = bind_vector(g, "rope_factors_short.weight", &w->rope_short, err)))
        return st;
    const uint32_t q_dim = hp->n_head * hp->head_dim;
    const uint32_t kv_dim = hp->n_head_kv * hp->head_dim;

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
        if (fx_model_fused_qkv(g, hp, i)) {
            fx_matrix qkv;
            MATRIX("attn_qkv.weight", wq)
            qkv = l->wq;
            l->wq = matrix_rows(&qkv, 0, q_dim);
            l->wk = matrix_rows(&qkv, q_dim, kv_dim);
            l->wv = matrix_rows(&qkv, q_dim + kv_dim, kv_dim);
        } else {
            MATRIX("attn_q.weight", wq)
            MATRIX("attn_k.weight", wk)
            MATRIX("attn_v.weight", wv)
        }
        MATRIX("attn_output.weight", wo)
        VECTOR("ffn_norm.weight", ffn_norm)
        if (hp->arch == FX_ARCH_PHI3) {
            MATRIX("ffn_up.weight", w_up)
            const fx_matrix gate_up = l->w_up;
            l->w_gate = matrix_rows(&gate_up, 0, hp->n_ff);
            l->w_up = matrix_rows(&gate_up, hp->n_ff, hp->n_ff);
        } else {
            MATRIX("ffn_gate.weight", w_gate)
            MATRIX("ffn_up.weight", w_up)
        }
        MATRIX("ffn_down.weight", w_down)
        if (hp->arch == FX_ARCH_QWEN2) {
            VECTOR("attn_q.bias", bq)
            VECTOR("attn_k.bias", bk)
            VECTOR("attn_v.bias", bv)
        }
        if (hp->arch == FX_ARCH_QWEN3 || hp->arch == FX_ARCH_GEMMA3) {
            VECTOR("attn_q_norm.weight", q_norm)
            VECTOR("attn_k_norm.weight", k_norm)
        }
        if (hp->post_norms) {
            VECTOR("post_attention_norm.weight", attn_post_norm)
            VECTOR("post_ffw_norm.weight", ffn_post_norm)
        }
#undef MATRIX
#undef VECTOR
    }
    return FX_OK;
fail:
    fx_weights_free(w, alloc);
    return st;
}

/* The block types of quants.h are read in place from the mapping where
 * the kernels stream the GGUF layout as fast as a copy: a copy would only
 * double the load's reads. Where they read 16-row groups faster (AVX-512:
 * kernels.h, fx_kernels_prefer_qr16) the groups are the copy, the
 * mapping's pages dropped as it goes. */
static bool stays_mapped(const fx_matrix *m) {
    return fx_qtype_of(m->type) != NULL &&
           !fx_kernels_prefer_qr16(m->type, m->k);
}

/* The repacked type m goes into (16-row groups for the block types and R16
 * for Q8_0 where the kernels prefer them, R12 for the float types
 * this CPU streams faster so: kernels.h), or its own type: copied as it
 * is. */
static fx_wtype repacked_type(const fx_matrix *m) {
    if (fx_qtype_of(m->type) && fx_kernels_prefer_qr16(m->type, m->k))
        return (fx_wtype)(m->type | FX_WTYPE_QR16);
    if (m->type == FX_WTYPE_Q8_0 && fx_kernels_prefer_r16(m->type))
        return FX_WTYPE_Q8_0_R16;
    if (fx_kernels_prefer_r12(m->type) && m->n % 2 == 0 && m->k % 8 == 0) {
        if (m->type == FX_WTYPE_F16) return FX_WTYPE_F16_R12;
        if (m->type == FX_WTYPE_BF16) return FX_WTYPE_BF16_R12;
        if (m->type == FX_WTYPE_F32) return FX_WTYPE_F32_R12;
    }
    return m->type;
}

/* A matrix's rows are copied in pieces of whole tiles (a multiple of 48,
 * both 12 and 16): a tile's place and layout depend only on its first row
 * and, for the last tile, on the matrix's row count, so pieces repacked
 * apart give the bytes of the whole. About 4 MB a piece: hundreds of tasks
 * for the pool to balance, each long enough to amortize its hand-off. */
#define PIECE_ROWS_UNIT 48u
#define PIECE_BYTES ((size_t)4 << 20)

/* The copy is spread over this many forward passes after the first: each
 * pays about 1/REPACK_STEPS of it, and no single step stalls for the whole
 * (up to a second for 1 GB where huge pages must first be compacted).
 * Fewer passes read the mapping's slower layout for less long: 64-token
 * runs were level with the eager copy at 16 (docs/perf/NOTES.md). */
#define REPACK_STEPS 16u

/* The matrix fields of a layer, in the order a repack_matrix's field
 * indexes; layer -1 is the output matrix. */
static fx_matrix *matrix_slot(fx_weights *w, int32_t layer, unsigned field) {
    if (layer < 0) return &w->output;
    fx_layer_weights *l = &w->layers[layer];
    fx_matrix *m[] = {&l->wq, &l->wk, &l->wv, &l->wo,
                      &l->w_gate, &l->w_up, &l->w_down};
    return m[field];
}
#define LAYER_MATRICES 7u

typedef struct repack_piece {
    uint32_t matrix, row0, rows;
} repack_piece;

typedef struct repack_matrix {
    fx_matrix src;       /* as bound to the mapping */
    fx_matrix copy;      /* the same matrix in the copy */
    int32_t layer;       /* matrix_slot's */
    uint32_t field;
    uint32_t pieces_left;
    bool published;      /* copied whole: views may point at it */
} repack_matrix;

struct fx_weights_pending {
    pthread_mutex_t lock;
    const fx_gguf *gguf;
    size_t n_matrices, n_pieces;
    size_t next_piece;        /* the first not yet claimed */
    size_t slice;             /* pieces a forward pass copies */
    bool eager;               /* all at the first fx_weights_view_init */
    atomic_size_t published;  /* matrices published so far */
    repack_matrix *matrices;
    repack_piece *pieces;
};

typedef struct repack_run {
    const fx_weights_pending *p;
    size_t first;
} repack_run;

static void repack_piece_run(void *ctx, size_t task, unsigned thread) {
    (void)thread;
    const repack_run *run = ctx;
    const repack_piece *pc = &run->p->pieces[run->first + task];
    const repack_matrix *rm = &run->p->matrices[pc->matrix];
    const fx_matrix *m = &rm->src;
    const size_t row = fx_wtype_row_bytes(m->type, m->k);
    const size_t at = (size_t)pc->row0 * row, bytes = (size_t)pc->rows * row;
    const uint8_t *src = (const uint8_t *)m->data + at;
    uint8_t *dst = (uint8_t *)(uintptr_t)rm->copy.data + at;
    /* Shapes were checked at load and by repacked_type: cannot fail. A
     * piece of the last tile's rows is the matrix's own last tile. */
    if (rm->copy.type == FX_WTYPE_Q8_0_R16)
        (void)fx_q8_0_repack_r16(dst, src, pc->rows, m->k);
    else if (fx_wtype_is_qr16(rm->copy.type))
        (void)fx_qr16_repack(dst, src, m->type, pc->rows, m->k);
    else if (fx_wtype_is_r12(rm->copy.type))
        (void)fx_float_repack_r12(dst, src, m->type, pc->rows, m->k);
    else
        memcpy(dst, src, bytes);
    /* Read once: the mapping's pages go, so the copy does not double the
     * resident memory (pages shared with a neighbour piece stay). A pass
     * still reading the matrix from the mapping, its copy not yet whole,
     * gets them back from the page cache. */
    fx_gguf_release(run->p->gguf, src, bytes);
}

static void pending_free(fx_weights_pending *p, const fx_alloc *alloc) {
    if (!p) return;
    pthread_mutex_destroy(&p->lock);
    fx_free(alloc, p->matrices);
    fx_free(alloc, p->pieces);
    fx_free(alloc, p);
}

/* Rows per piece of a matrix with rows of row bytes. */
static size_t piece_rows(size_t row) {
    size_t per = PIECE_BYTES / row / PIECE_ROWS_UNIT * PIECE_ROWS_UNIT;
    return per ? per : PIECE_ROWS_UNIT;
}

fx_status fx_weights_repack(fx_weights *w, const fx_hparams *hp,
                            const fx_gguf *gguf, bool eager,
                            const fx_alloc *alloc, fx_error *err) {
    repack_matrix *list = fx_malloc_array(
        alloc, 1 + LAYER_MATRICES * (size_t)hp->n_layer, sizeof *list);
    if (!list) return fx_fail(err, FX_ERR_NOMEM, "out of memory");
    /* In a fixed order: the output, then each layer's. A tied output
     * too: in small models it is the biggest matrix (Gemma 3 1B: 262144 x
     * 1152), and read in the file's rows it ran at half the tiles' rate.
     * The embedding lookups keep reading the mapping, whose pages the copy
     * releases: they come back from the page cache a row at a time. */
    size_t n = 0;
    for (int32_t layer = -1; layer < (int32_t)hp->n_layer; layer++)
        for (uint32_t field = 0; field < (layer < 0 ? 1u : LAYER_MATRICES);
             field++) {
            const fx_matrix *m = matrix_slot(w, layer, field);
            if (!stays_mapped(m))
                list[n++] = (repack_matrix){*m, *m, layer, field, 0, false};
        }
    /* Every offset a multiple of 64, so a tile's loads stay aligned. */
    uint64_t total = 0;
    size_t n_pieces = 0;
    for (size_t i = 0; i < n; i++) {
        const size_t row = fx_wtype_row_bytes(list[i].src.type, list[i].src.k);
        total += ((uint64_t)list[i].src.n * row + 63) & ~(uint64_t)63;
        list[i].pieces_left =
            (uint32_t)((list[i].src.n + piece_rows(row) - 1) / piece_rows(row));
        n_pieces += list[i].pieces_left;
    }
    if (total == 0) {
        fx_free(alloc, list);
        return FX_OK;
    }
    /* On huge pages: fewer page faults at load, fewer TLB misses after.
     * Allocated now (a failure is the load's), touched only by the copy. */
    void *raw = NULL;
    uint8_t *at = total <= SIZE_MAX
                      ? fx_malloc_huge(alloc, (size_t)total, &raw)
                      : NULL;
    fx_weights_pending *p = fx_calloc(alloc, 1, sizeof *p);
    if (p) p->pieces = fx_malloc_array(alloc, n_pieces, sizeof *p->pieces);
    if (!at || !p || !p->pieces || pthread_mutex_init(&p->lock, NULL) != 0) {
        if (p) fx_free(alloc, p->pieces);
        fx_free(alloc, p);
        fx_free(alloc, raw);
        fx_free(alloc, list);
        return fx_fail(err, FX_ERR_NOMEM,
                       "out of memory for the repacked weights (%llu bytes)",
                       (unsigned long long)total);
    }
    p->gguf = gguf;
    p->matrices = list;
    p->n_matrices = n;
    p->eager = eager;
    atomic_init(&p->published, 0);
    for (size_t i = 0; i < n; i++) {
        repack_matrix *rm = &list[i];
        const size_t row = fx_wtype_row_bytes(rm->src.type, rm->src.k);
        const size_t per = piece_rows(row);
        rm->copy.data = at;
        rm->copy.type = repacked_type(&rm->src);
        for (uint32_t r = 0; r < rm->src.n; r += (uint32_t)per)
            p->pieces[p->n_pieces++] = (repack_piece){
                (uint32_t)i, r,
                (uint32_t)(rm->src.n - r < per ? rm->src.n - r : per)};
        at += ((size_t)rm->src.n * row + 63) & ~(size_t)63;
    }
    p->slice = (p->n_pieces + REPACK_STEPS - 1) / REPACK_STEPS;
    w->repacked = raw;
    w->pending = p;
    return FX_OK;
}

/* Copies up to max pieces not yet claimed, on pool's threads (NULL: the
 * caller's), and publishes the matrices they complete. Two callers claim
 * disjoint pieces under the lock and copy outside it. */
static void repack_advance(fx_weights_pending *p, fx_pool *pool, size_t max) {
    pthread_mutex_lock(&p->lock);
    const size_t first = p->next_piece;
    const size_t n = p->n_pieces - first < max ? p->n_pieces - first : max;
    p->next_piece += n;
    pthread_mutex_unlock(&p->lock);
    if (n == 0) return;
    repack_run run = {p, first};
    if (!pool || fx_pool_run(pool, repack_piece_run, &run, n) != FX_OK)
        for (size_t i = 0; i < n; i++) repack_piece_run(&run, i, 0);
    pthread_mutex_lock(&p->lock);
    for (size_t i = first; i < first + n; i++) {
        repack_matrix *rm = &p->matrices[p->pieces[i].matrix];
        if (--rm->pieces_left > 0) continue;
        rm->published = true;
        atomic_fetch_add_explicit(&p->published, 1, memory_order_release);
        /* Again whole: passes run between its pieces read some back. */
        fx_gguf_release(p->gguf, rm->src.data,
                        (size_t)rm->src.n *
                            fx_wtype_row_bytes(rm->src.type, rm->src.k));
    }
    pthread_mutex_unlock(&p->lock);
}

/* Points view's matrices at the copies published since its last update. */
static void view_update(const fx_weights_pending *cp, fx_weights *view) {
    fx_weights_pending *p = (fx_weights_pending *)(uintptr_t)cp;
    if (atomic_load_explicit(&p->published, memory_order_acquire) ==
        view->n_published)
        return;
    pthread_mutex_lock(&p->lock);
    for (size_t i = 0; i < p->n_matrices; i++)
        if (p->matrices[i].published)
            *matrix_slot(view, p->matrices[i].layer, p->matrices[i].field) =
                p->matrices[i].copy;
    view->n_published = atomic_load_explicit(&p->published,
                                             memory_order_relaxed);
    pthread_mutex_unlock(&p->lock);
}

fx_status fx_weights_view_init(const fx_weights *w, const fx_hparams *hp,
                               fx_pool *pool, const fx_alloc *alloc,
                               fx_weights *view, fx_error *err) {
    *view = *w;
    view->repacked = NULL;
    view->pending = NULL;
    view->n_published = 0;
    view->layers = fx_malloc_array(alloc, hp->n_layer, sizeof *view->layers);
    if (!view->layers) return fx_fail(err, FX_ERR_NOMEM, "out of memory");
    memcpy(view->layers, w->layers, hp->n_layer * sizeof *view->layers);
    if (w->pending) {
        if (w->pending->eager) repack_advance(w->pending, pool, SIZE_MAX);
        view_update(w->pending, view);
    }
    return FX_OK;
}

void fx_weights_view_step(const fx_weights *w, fx_weights *view,
                          fx_pool *pool) {
    /* Once the view has every copy there is nothing left to claim: no
     * lock taken in the steady state's passes. */
    if (!w->pending || view->n_published == w->pending->n_matrices) return;
    repack_advance(w->pending, pool, w->pending->slice);
    view_update(w->pending, view);
}

void fx_weights_view_free(fx_weights *view, const fx_alloc *alloc) {
    fx_free(alloc, view->layers);
    view->layers = NULL;
}

void fx_weights_free(fx_weights *w, const fx_alloc *alloc) {
    if (!w) return;
    fx_free(alloc, w->layers);
    w->layers = NULL;
    pending_free(w->pending, alloc);
    w->pending = NULL;
    fx_free(alloc, w->repacked);
    w->repacked = NULL;
}
