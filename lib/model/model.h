/*
 * model: architecture hyperparameters and (later) weight binding and the
 * batched forward pass.
 */
#ifndef FX_MODEL_H
#define FX_MODEL_H

#include "../gguf/gguf.h"
#include "../kernels/kernels.h"

typedef enum fx_arch {
    FX_ARCH_UNKNOWN = 0,
    FX_ARCH_LLAMA,  /* Llama 2/3, TinyLlama, Mistral, SmolLM */
    FX_ARCH_QWEN2,  /* llama plus biases on Q, K and V; NeoX RoPE */
    FX_ARCH_QWEN3,  /* llama plus an RMS norm of each query and key head
                       before RoPE; NeoX RoPE; heads may be wider than
                       n_embd / n_head */
    FX_ARCH_GEMMA2, /* embeddings times sqrt(n_embd), norms after attention
                       and the FFN too, GeGLU, soft-capped attention scores
                       and logits, a sliding window on even layers */
    FX_ARCH_GEMMA3, /* Gemma 2 without the caps, with Q/K head norms, the
                       window on 5 layers of 6 and their own RoPE base */
    FX_ARCH_PHI3    /* llama with Q, K and V in one matrix and gate and up
                       in another, NeoX RoPE with LongRoPE factors, a
                       window on every layer (Phi-3) or none (Phi-4) */
} fx_arch;

typedef enum fx_ffn_act {
    FX_FFN_SILU = 0, /* SwiGLU */
    FX_FFN_GELU      /* GeGLU, tanh GELU */
} fx_ffn_act;

/* The numbers the forward pass is shaped by, read from `{arch}.*` keys. */
typedef struct fx_hparams {
    fx_arch arch;
    uint32_t n_vocab;
    uint32_t n_ctx_train;
    uint32_t n_embd;
    uint32_t n_layer;
    uint32_t n_head;
    uint32_t n_head_kv;
    uint32_t n_ff;
    uint32_t n_rot;        /* RoPE dimensions per head (<= head_dim) */
    uint32_t head_dim;     /* attention.key_length, else n_embd / n_head */
    bool head_dim_stated;  /* the file gave attention.key_length */
    float rope_freq_base;
    float rope_freq_scale;     /* 1 / rope.scaling.factor (linear), else 1 */
    float rope_attn_factor;    /* rope.scaling.attn_factor: cos and sin
                                  times it (LongRoPE), else 1 */
    uint32_t n_ctx_orig;       /* rope.scaling.original_context_length,
                                  else n_ctx_train: LongRoPE's long
                                  factors serve contexts beyond it */
    float rms_norm_eps;
    float attn_scale;          /* on q . k: 1 / sqrt(head_dim) but Gemma's */
    uint32_t n_swa;            /* sliding window (positions), 0: none */
    uint32_t swa_period;       /* layer l slides unless (l + 1) % period
                                  == 0 (Gemma 2: 2, Gemma 3: 6); 0: every
                                  layer slides (Phi-3) */
    float rope_freq_base_swa;  /* the sliding layers' RoPE */
    float rope_freq_scale_swa;
    float attn_softcap;        /* scores = cap * tanh(scores / cap), 0: none */
    float final_softcap;       /* the same on the logits */
    bool embd_scale;           /* embeddings times sqrtf(n_embd) */
    bool post_norms;           /* post_attention_norm, post_ffw_norm */
    fx_ffn_act ffn_act;
    uint64_t n_params;
} fx_hparams;

fx_arch fx_arch_from_name(const char *name, size_t len);

/* Whether layer l attends only to the last n_swa positions. */
static inline bool fx_layer_slides(const fx_hparams *hp, uint32_t l) {
    return hp->n_swa > 0 && (hp->swa_period == 0 || (l + 1) % hp->swa_period != 0);
}

/* Whether layer l keeps Q, K and V in one matrix (blk.l.attn_qkv: Phi-3's
 * rows of Q, then K, then V). */
bool fx_model_fused_qkv(const fx_gguf *gguf, const fx_hparams *hp, uint32_t l);

/* Reads and cross-checks the hyperparameters of a supported architecture
 * and the presence, type and shape of every tensor it needs. */
fx_status fx_hparams_load(const fx_gguf *gguf, fx_hparams *hp, fx_error *err);

/* What a vocabulary-only load can learn: whatever `{arch}.*` keys exist,
 * for any architecture name; absent ones stay 0. */
fx_status fx_hparams_load_partial(const fx_gguf *gguf, fx_hparams *hp,
                                  fx_error *err);

/* ---- weights ---- */

typedef struct fx_matrix {
    const void *data;   /* n rows of k elements, as GGUF stores [k, n] */
    fx_wtype type;
    uint32_t k, n;
} fx_matrix;

typedef struct fx_layer_weights {
    const float *attn_norm;          /* [n_embd] */
    fx_matrix wq, wk, wv, wo;        /* [n_embd -> q_dim / kv_dim / ...] */
    const float *bq, *bk, *bv;       /* qwen2 only: [q_dim], [kv_dim] */
    const float *q_norm, *k_norm;    /* qwen3, gemma3: [head_dim] */
    const float *attn_post_norm;     /* gemma: [n_embd], after wo */
    const float *ffn_post_norm;      /* gemma: [n_embd], after w_down */
    const float *ffn_norm;           /* [n_embd] */
    fx_matrix w_gate, w_up, w_down;  /* [n_embd -> n_ff], [n_ff -> n_embd] */
} fx_layer_weights;

typedef struct fx_weights_pending fx_weights_pending;

typedef struct fx_weights {
    fx_matrix tok_embd;              /* [n_vocab rows of n_embd] */
    const float *output_norm;        /* [n_embd] */
    fx_matrix output;                /* tok_embd itself when tied */
    const float *rope_freqs;         /* [n_rot/2] or NULL */
    const float *rope_long, *rope_short; /* phi3 LongRoPE: [n_rot/2] or NULL */
    fx_layer_weights *layers;        /* [n_layer] */
    void *repacked;                  /* fx_weights_repack's copy, or NULL */
    fx_weights_pending *pending;     /* the copy's plan and progress */
    size_t n_published;              /* a view's: copies it points at */
} fx_weights;

/* Points every field into the mapped file; fx_hparams_load must have
 * checked the tensor table first. */
fx_status fx_weights_bind(const fx_gguf *gguf, const fx_hparams *hp,
                          const fx_alloc *alloc, fx_weights *w, fx_error *err);
/* Plans a copy of the matrices the matmuls read (not the embedding table,
 * which is read by row, nor the block types of quants.h where their
 * kernels read the file's layout in place as fast; an output tied to the
 * embedding table is copied as the output, the table itself staying in
 * the mapping for its row lookups)
 * into one allocation on huge pages, the block types into 16-row groups
 * where the kernels prefer them (fx_kernels_prefer_qr16: AVX-512 VNNI),
 * Q8_0 repacked into FX_WTYPE_Q8_0_R16
 * (fx_kernels_prefer_r16), F32, F16 and BF16 into their R12 forms where
 * the kernels prefer it (fx_kernels_prefer_r12: AVX-512) and N is even
 * and K % 8 == 0, the others as they are: the same bits out of every
 * matmul, decode faster than from the file mapping. The allocation is
 * made here, so running out of memory fails the load; the copy is made by
 * the views (below): whole at the first view's creation if eager, else a
 * slice per forward pass from each view's second on. On failure w is
 * unchanged. */
fx_status fx_weights_repack(fx_weights *w, const fx_hparams *hp,
                            const fx_gguf *gguf, bool eager,
                            const fx_alloc *alloc, fx_error *err);
/* A forward pass reads the weights through a view of its own: w's fields,
 * each matrix pointing at the mapping until its copy is published, then
 * at the copy. A view changes only in its owner's calls, so several
 * forward passes on their own threads share w without racing; the copy's
 * pieces are claimed under w's lock. The file's pages of a published
 * matrix are released (fx_gguf_release): the copy does not double the
 * resident memory. */
fx_status fx_weights_view_init(const fx_weights *w, const fx_hparams *hp,
                               fx_pool *pool, const fx_alloc *alloc,
                               fx_weights *view, fx_error *err);
/* Before a forward pass: copies the next slice of the plan on pool's
 * threads (NULL: the caller's) and points view at every copy published
 * since its last update. Nothing to do without a plan. */
void fx_weights_view_step(const fx_weights *w, fx_weights *view,
                          fx_pool *pool);
void fx_weights_view_free(fx_weights *view, const fx_alloc *alloc);
/* Frees what bind and repack allocated. */
void fx_weights_free(fx_weights *w, const fx_alloc *alloc);

/* ---- KV storage, as the forward pass sees it ----
 *
 * A sequence's keys and values live in blocks of block_tokens positions.
 * A block holds every layer as n_layer * 2 * n_head_kv runs (K then V per
 * layer, then per KV head), each [block_tokens][head_dim] elements of
 * dtype, run r at blocks[b] + r * run_stride elements. Position p of a sequence is slot
 * p % block_tokens of blocks[p / block_tokens]. A head's positions of a
 * block lie side by side, so attention, which reads one head over every
 * position, reads runs of block_tokens * head_dim elements: with the heads
 * of a position side by side it read head_dim out of every kv_dim,
 * 256-byte pieces 1 KB apart on the 246M model. And the pool puts run r
 * of every block side by side (run_stride = n_blocks * block_tokens *
 * head_dim), so a sequence on consecutive blocks -- what a pool hands out
 * before churn -- has each head's keys in one run, the hardware
 * prefetchers' best case. A contiguous cache is a single block as
 * long as the context; the paged cache hands out a block table. The forward
 * pass writes the K and V of each token it runs at that token's position
 * and reads positions 0..pos; it keeps no cursor of its own -- the owner of
 * the view is the one truth for positions written (docs/design.md invariant 4). */
/* How K and V are stored (FX_BATCHER_KV_F16 in ferrox.h). F16 halves the
 * cache and what attention reads; the values are rounded once, at the
 * store, and attention converts them back exactly and computes in F32. */
typedef enum fx_kv_dtype {
    FX_KV_DTYPE_F32 = 0,
    FX_KV_DTYPE_F16 = 1
} fx_kv_dtype;

static inline size_t fx_kv_dtype_size(fx_kv_dtype t) {
    return t == FX_KV_DTYPE_F16 ? sizeof(uint16_t) : sizeof(float);
}

typedef struct fx_kv_view {
    void *const *blocks;    /* [n_blocks] */
    uint32_t n_blocks;
    uint32_t block_tokens;
    size_t run_stride;      /* elements from a block's run to its next */
    /* Sliding layers kept apart (lib/kv's ring), or NULL: a sliding layer
     * needs only its window, so its K/V of block index k live in
     * ring[k % ring_blocks], which holds just the last ring_blocks blocks.
     * With a ring, `blocks` holds only the other layers, and each kind
     * numbers its own layers from 0 (fx_kv_layer_slot). */
    void *const *ring;
    uint32_t ring_blocks;
    size_t ring_run_stride;
    fx_kv_dtype dtype;      /* of blocks and ring alike; zero is F32 */
} fx_kv_view;

/* Which layers a block holds: all of them, or one kind when sliding
 * layers are kept apart. */
typedef enum fx_kv_group {
    FX_KV_ALL_LAYERS = 0,
    FX_KV_FULL_LAYERS = 1,  /* the layers that see every position */
    FX_KV_SLIDING_LAYERS = 2
} fx_kv_group;

/* Elements (of any dtype) one block of block_tokens positions takes for
 * a group. */
size_t fx_kv_block_elems(const fx_hparams *hp, uint32_t block_tokens);
size_t fx_kv_group_elems(const fx_hparams *hp, uint32_t block_tokens,
                         fx_kv_group group);
/* Layers in a group. */
uint32_t fx_kv_group_layers(const fx_hparams *hp, fx_kv_group group);
/* Layer l's place among the layers of its own kind (sliding or not). */
uint32_t fx_kv_layer_slot(const fx_hparams *hp, uint32_t l);

/* ---- batched forward ---- */

typedef struct fx_fwd_token {
    int32_t token;
    uint32_t pos;     /* position in its sequence: RoPE angle and KV slot */
    uint32_t seq;     /* index into the views passed to fx_forward_run */
    uint32_t logits;  /* nonzero: produce logits for this token */
} fx_fwd_token;

typedef struct fx_forward fx_forward;

/* Scratch for up to max_tokens tokens per call and contexts up to max_ctx
 * positions, allocated here once: fx_forward_run never allocates. */
fx_status fx_forward_create(const fx_alloc *alloc, const fx_hparams *hp,
                            const fx_weights *w, fx_kernels *kc,
                            uint32_t max_tokens, uint32_t max_ctx,
                            fx_forward **out, fx_error *err);
void fx_forward_free(fx_forward *f);
/* The weights f's passes read: its view (fx_weights_view_init). */
const fx_weights *fx_forward_weights(const fx_forward *f);

/* Runs n tokens (any mix of sequences; within one sequence, increasing
 * consecutive positions) through the model. Writes each token's K and V
 * into its sequence's view and, for tokens flagged `logits`, n_vocab
 * logits into logits_out, one row per flagged token in batch order.
 *
 * Determinism: every token's logits depend only on its own sequence's
 * tokens and positions -- not on the other tokens in the call, on how a
 * prompt was split across calls, or on the thread count -- unless the
 * kernels run with FX_MATMUL_FAST (set by `flags`). */
fx_status fx_forward_run(fx_forward *f, const fx_fwd_token *tokens, uint32_t n,
                         const fx_kv_view *views, uint32_t n_views,
                         float *logits_out, unsigned flags, fx_error *err);

#endif /* FX_MODEL_H */
