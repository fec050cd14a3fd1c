/*
 * The KV layer under the real forward pass, on synthetic models:
 *   - the paged layout (block_tokens 16 and 5) gives logits bit-identical
 *     to the contiguous one, prefilled whole or in chunks, and through
 *     greedy decoding;
 *   - a row that adopts a cached prefix and prefills only the suffix, at
 *     the positions its cursor gives, gets logits bit-identical to one that
 *     prefilled everything (docs/design.md invariant 4: a prefill must not ignore
 *     the adopted prefix);
 *   - two rows sharing adopted blocks in one batch each get their own;
 *   - the forward pass writes K and V where model.h says (a head's
 *     positions of a block side by side): read back at the documented
 *     offsets, the contiguous and the paged cache hold the same values;
 *   - all of the above with the sliding layers in rings (Gemma 2 and 3,
 *     Phi-3 with every layer sliding; windows shorter than the prompt):
 *     the same bits as the contiguous cache, adoption included, while a
 *     row holds only its window.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "gguf_writer.h"
#include "test_rng.h"
#include "kv/kv.h"
#include "model/model.h"

enum { MAX_CTX = 64, MAX_TOKENS = 96, N_PROMPT = 40, N_GEN = 8 };

typedef struct harness {
    gw_buf file;
    fx_alloc alloc;
    fx_gguf *g;
    fx_hparams hp;
    fx_weights w;
    fx_kernels *kc;
    fx_forward *f;
} harness;

static void harness_open(harness *h, const gw_model_spec *spec) {
    memset(h, 0, sizeof *h);
    gw_build_model(&h->file, spec);
    fx_alloc_init(&h->alloc, NULL);
    fx_error err;
    assert_int_equal(fx_gguf_open_memory(h->file.data, h->file.len, &h->alloc,
                                         &h->g, &err), FX_OK);
    assert_int_equal(fx_hparams_load(h->g, &h->hp, &err), FX_OK);
    assert_int_equal(fx_weights_bind(h->g, &h->hp, &h->alloc, &h->w, &err), FX_OK);
    fx_kernels_params kp;
    fx_kernels_params_init(&kp);
    kp.n_threads = 1;
    assert_int_equal(fx_kernels_create(&h->alloc, &kp, &h->kc, &err), FX_OK);
    assert_int_equal(fx_forward_create(&h->alloc, &h->hp, &h->w, h->kc,
                                       MAX_TOKENS, MAX_CTX, &h->f, &err),
                     FX_OK);
}

static void harness_close(harness *h) {
    fx_forward_free(h->f);
    fx_kernels_free(h->kc);
    fx_weights_free(&h->w, &h->alloc);
    fx_gguf_close(h->g);
    gw_free(&h->file);
}

static void random_tokens(int32_t *t, uint32_t n, uint32_t vocab, uint64_t seed) {
    for (uint32_t i = 0; i < n; i++)
        t[i] = (int32_t)fx_test_rng_below(&seed, vocab);
}

static uint32_t argmax(const float *v, uint32_t n) {
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return best;
}

/* With rings, what the batcher does before each prepare: publish the
 * full blocks written so far, so the ring's old blocks stay adoptable. */
static void publish_written(fx_kv_lease *l, const int32_t *tokens) {
    fx_error err;
    if (l->layout == FX_KV_PAGED && fx_kv_has_ring(l->kv) &&
        fx_kv_lease_publish(l, tokens, fx_kv_lease_cursor(l), &err) != FX_OK)
        fail_msg("%s", err.message);
}

/* Runs tokens[cursor, n) of a lease in chunks the way the batcher will:
 * prepare, positions from the cursor, forward, advance. Logits of position
 * p go to out[p]. */
static void prefill(harness *h, fx_kv_lease *l, const int32_t *tokens,
                    uint32_t n, uint32_t chunk, float *out) {
    fx_fwd_token batch[MAX_TOKENS];
    fx_error err;
    while (fx_kv_lease_cursor(l) < n) {
        uint32_t pos0 = fx_kv_lease_cursor(l);
        uint32_t len = n - pos0 < chunk ? n - pos0 : chunk;
        publish_written(l, tokens);
        if (fx_kv_lease_prepare(l, len, &err) != FX_OK) fail_msg("%s", err.message);
        for (uint32_t i = 0; i < len; i++)
            batch[i] = (fx_fwd_token){tokens[pos0 + i], pos0 + i, 0, 1};
        fx_kv_view view = fx_kv_lease_view(l);
        if (fx_forward_run(h->f, batch, len, &view, 1,
                           out + (size_t)pos0 * h->hp.n_vocab, 0, &err) != FX_OK)
            fail_msg("%s", err.message);
        if (fx_kv_lease_advance(l, len, &err) != FX_OK) fail_msg("%s", err.message);
    }
}

/* Greedy decoding from the prompt's last logits: fills tokens[n_prompt,
 * n_prompt + N_GEN) and the logits of every generated step. */
static void decode(harness *h, fx_kv_lease *l, int32_t *tokens,
                   const float *last_prompt_logits, float *out) {
    uint32_t V = h->hp.n_vocab;
    tokens[N_PROMPT] = (int32_t)argmax(last_prompt_logits, V);
    fx_error err;
    for (uint32_t g = 0; g < N_GEN - 1; g++) {
        uint32_t pos = fx_kv_lease_cursor(l);
        assert_int_equal(pos, N_PROMPT + g);
        publish_written(l, tokens);
        if (fx_kv_lease_prepare(l, 1, &err) != FX_OK) fail_msg("%s", err.message);
        fx_fwd_token tok = {tokens[pos], pos, 0, 1};
        fx_kv_view view = fx_kv_lease_view(l);
        float *o = out + (size_t)g * V;
        if (fx_forward_run(h->f, &tok, 1, &view, 1, o, 0, &err) != FX_OK)
            fail_msg("%s", err.message);
        if (fx_kv_lease_advance(l, 1, &err) != FX_OK) fail_msg("%s", err.message);
        tokens[pos + 1] = (int32_t)argmax(o, V);
    }
}

typedef struct result {
    float *prompt_logits; /* [N_PROMPT][V] (rows before the cursor unset) */
    float *gen_logits;    /* [N_GEN - 1][V] */
    int32_t tokens[N_PROMPT + N_GEN];
} result;

static void result_init(result *r, uint32_t V, const int32_t *prompt) {
    r->prompt_logits = calloc((size_t)N_PROMPT * V, sizeof(float));
    r->gen_logits = calloc((size_t)(N_GEN - 1) * V, sizeof(float));
    assert_true(r->prompt_logits && r->gen_logits);
    memcpy(r->tokens, prompt, N_PROMPT * sizeof *prompt);
}

static void result_free(result *r) {
    free(r->prompt_logits);
    free(r->gen_logits);
}

/* One row end to end. Returns the cursor it started from (the adopted
 * prefix). Publishes and releases at the end, as the one exit path does. */
static uint32_t run_row(harness *h, fx_kv *kv, fx_kv_layout layout,
                        const int32_t *prompt, uint32_t chunk, result *r) {
    fx_kv_lease l;
    fx_error err;
    fx_kv_fit fit;
    assert_int_equal(fx_kv_lease_init(kv, &l, layout, MAX_CTX, &err), FX_OK);
    assert_int_equal(fx_kv_lease_admit(&l, prompt, N_PROMPT, N_PROMPT + N_GEN,
                                       &fit, &err), FX_OK);
    assert_int_equal(fit, FX_KV_NOW);
    uint32_t start = fx_kv_lease_cursor(&l);
    result_init(r, h->hp.n_vocab, prompt);
    prefill(h, &l, r->tokens, N_PROMPT, chunk, r->prompt_logits);
    decode(h, &l, r->tokens,
           r->prompt_logits + (size_t)(N_PROMPT - 1) * h->hp.n_vocab,
           r->gen_logits);
    assert_int_equal(fx_kv_lease_publish(&l, r->tokens, N_PROMPT + N_GEN, &err),
                     FX_OK);
    assert_int_equal(fx_kv_lease_release(&l, &err), FX_OK);
    fx_kv_lease_free(&l);
    assert_int_equal(fx_kv_check(kv, &err), FX_OK);
    return start;
}

static void expect_same(const result *a, const result *b, uint32_t from,
                        uint32_t V, const char *what) {
    if (memcmp(a->prompt_logits + (size_t)from * V,
               b->prompt_logits + (size_t)from * V,
               (size_t)(N_PROMPT - from) * V * sizeof(float)) != 0)
        fail_msg("%s: prompt logits from %u differ", what, from);
    if (memcmp(a->tokens, b->tokens, sizeof a->tokens) != 0)
        fail_msg("%s: generated tokens differ", what);
    if (memcmp(a->gen_logits, b->gen_logits,
               (size_t)(N_GEN - 1) * V * sizeof(float)) != 0)
        fail_msg("%s: decode logits differ", what);
}

/* Both rows' remaining prompt tokens, min(chunk, what is left) of each
 * per call, in one batch: each reads its own (partly shared) blocks. */
static void prefill_pair(harness *h, fx_kv_lease *l[2], const int32_t *tok[2],
                         const result *ref[2], uint32_t chunk, const char *arch,
                         uint32_t bt) {
    uint32_t V = h->hp.n_vocab;
    fx_fwd_token batch[MAX_TOKENS];
    float *out = calloc((size_t)2 * chunk * V, sizeof *out);
    assert_non_null(out);
    fx_error err;
    for (;;) {
        uint32_t n = 0, len[2], pos0[2];
        for (int s = 0; s < 2; s++) {
            pos0[s] = fx_kv_lease_cursor(l[s]);
            len[s] = N_PROMPT - pos0[s] < chunk ? N_PROMPT - pos0[s] : chunk;
            publish_written(l[s], tok[s]);
            assert_int_equal(fx_kv_lease_prepare(l[s], len[s], &err), FX_OK);
            for (uint32_t i = 0; i < len[s]; i++)
                batch[n++] = (fx_fwd_token){tok[s][pos0[s] + i], pos0[s] + i,
                                            (uint32_t)s, 1};
        }
        if (n == 0) break;
        fx_kv_view views[2] = {fx_kv_lease_view(l[0]), fx_kv_lease_view(l[1])};
        assert_int_equal(fx_forward_run(h->f, batch, n, views, 2, out, 0, &err),
                         FX_OK);
        const float *o = out;
        for (int s = 0; s < 2; s++) {
            if (memcmp(o, ref[s]->prompt_logits + (size_t)pos0[s] * V,
                       (size_t)len[s] * V * sizeof *out) != 0)
                fail_msg("%s bt %u: batched rows over shared blocks differ "
                         "(row %d from %u)", arch, bt, s, pos0[s]);
            o += (size_t)len[s] * V;
            assert_int_equal(fx_kv_lease_advance(l[s], len[s], &err), FX_OK);
        }
    }
    free(out);
}

/* ring_call 0: every layer in the pool's blocks; otherwise the sliding
 * layers in rings for calls of up to ring_call positions. */
static void one_model(const char *arch, uint32_t type, uint32_t bt,
                      uint32_t ring_call) {
    gw_model_spec spec;
    gw_model_spec_default(&spec);
    spec.arch = arch;
    spec.type = type;
    spec.seed = 11 + type;
    /* Qwen3's and Gemma's heads wider than n_embd / n_head: a KV slot of
     * 24 floats; Gemma's sliding window shorter than the prompt, across
     * block edges and the shared prefix. */
    if (strcmp(arch, "llama") != 0 && strcmp(arch, "qwen2") != 0 &&
        strcmp(arch, "phi3") != 0)
        spec.head_dim = 24;
    if (strncmp(arch, "gemma", 5) == 0 || strcmp(arch, "phi3") == 0)
        spec.n_swa = 9;
    /* Gemma 3 with a full layer (the sixth) beside five sliding ones. */
    if (strcmp(arch, "gemma3") == 0) spec.n_layer = 6;
    harness h;
    harness_open(&h, &spec);
    uint32_t V = h.hp.n_vocab;
    fx_kv *kv;
    fx_kv_params p = {.n_blocks = 40, .block_tokens = bt,
                      .ring_call = ring_call, .n_ring_blocks = 40};
    fx_error err;
    assert_int_equal(fx_kv_create(&h.alloc, &h.hp, &p, &kv, &err), FX_OK);
    assert_int_equal(fx_kv_has_ring(kv), ring_call > 0);
    /* Chunks as long as a ring allows. */
    const uint32_t whole = ring_call ? ring_call : N_PROMPT;
    const uint32_t seven = ring_call && ring_call < 7 ? ring_call : 7;
    int32_t prompt[N_PROMPT], other[N_PROMPT];
    random_tokens(prompt, N_PROMPT, V, 5 + bt);
    /* Shares the first 23 tokens with prompt, then differs. */
    memcpy(other, prompt, sizeof other);
    random_tokens(other + 23, N_PROMPT - 23, V, 99);
    other[23] = (prompt[23] + 1) % (int32_t)V;

    /* The contiguous layout is the reference. */
    result contig, contig_other;
    assert_int_equal(run_row(&h, kv, FX_KV_CONTIGUOUS, prompt, N_PROMPT, &contig), 0);
    assert_int_equal(run_row(&h, kv, FX_KV_CONTIGUOUS, other, 7, &contig_other), 0);

    /* Paged, cold: every position, whole and in chunks. */
    uint32_t chunks[] = {whole, seven, 1};
    for (int c = 0; c < 3; c++) {
        fx_kv_evict(kv, UINT32_MAX, NULL);
        result paged;
        assert_int_equal(run_row(&h, kv, FX_KV_PAGED, prompt, chunks[c], &paged), 0);
        expect_same(&paged, &contig, 0, V, "paged vs contiguous");
        result_free(&paged);
    }

    /* Warm: the tree holds prompt + generated now. The whole prompt is
     * cached, so the row adopts floor(39 / bt) blocks and recomputes the
     * rest -- the last prompt token at least. */
    result warm;
    uint32_t start = run_row(&h, kv, FX_KV_PAGED, prompt, seven < 5 ? seven : 5,
                             &warm);
    assert_int_equal(start, (N_PROMPT - 1) / bt * bt);
    assert_true(start > 0 && start < N_PROMPT);
    expect_same(&warm, &contig, start, V, "adopted prefix vs full prefill");
    result_free(&warm);

    /* A prompt sharing only its first 23 tokens adopts whole blocks of
     * them and prefills from there. */
    result partial;
    start = run_row(&h, kv, FX_KV_PAGED, other, whole < 3 ? whole : 3, &partial);
    assert_int_equal(start, 23 / bt * bt);
    expect_same(&partial, &contig_other, start, V, "partial prefix");
    result_free(&partial);

    /* Two rows adopting the same blocks, prefilled in one batch together:
     * each reads the shared prefix and writes only its own blocks. */
    fx_kv_lease a, b;
    fx_kv_fit fit;
    assert_int_equal(fx_kv_lease_init(kv, &a, FX_KV_PAGED, MAX_CTX, &err), FX_OK);
    assert_int_equal(fx_kv_lease_init(kv, &b, FX_KV_PAGED, MAX_CTX, &err), FX_OK);
    assert_int_equal(fx_kv_lease_admit(&a, prompt, N_PROMPT, N_PROMPT, &fit, &err), FX_OK);
    assert_int_equal(fit, FX_KV_NOW);
    assert_int_equal(fx_kv_lease_admit(&b, other, N_PROMPT, N_PROMPT, &fit, &err), FX_OK);
    assert_int_equal(fit, FX_KV_NOW);
    assert_int_equal(a.table[0], b.table[0]); /* really shared */
    fx_kv_lease *pair[2] = {&a, &b};
    const int32_t *toks[2] = {prompt, other};
    const result *refs[2] = {&contig, &contig_other};
    prefill_pair(&h, pair, toks, refs, whole, arch, bt);
    assert_int_equal(fx_kv_check(kv, &err), FX_OK);
    assert_int_equal(fx_kv_lease_release(&a, &err), FX_OK);
    assert_int_equal(fx_kv_lease_release(&b, &err), FX_OK);
    fx_kv_lease_free(&a);
    fx_kv_lease_free(&b);
    assert_int_equal(fx_kv_check(kv, &err), FX_OK);

    result_free(&contig);
    result_free(&contig_other);
    fx_kv_free(kv);
    harness_close(&h);
}

/* The documented address of head h's key (kv 0) or value (kv 1) at
 * position pos, layer l, in a view (model.h). */
static const float *documented_slot(const fx_kv_view *v, const fx_hparams *hp,
                                    uint32_t l, uint32_t kv, uint32_t h,
                                    uint32_t pos) {
    const uint32_t bt = v->block_tokens;
    const size_t run = ((size_t)l * 2 + kv) * hp->n_head_kv + h;
    return (const float *)v->blocks[pos / bt] + run * v->run_stride +
           (size_t)(pos % bt) * hp->head_dim;
}

/* Prefills prompt into a new lease of the given layout and leaves it
 * open for reading. */
static void prefill_open(harness *h, fx_kv *kv, fx_kv_layout layout,
                         const int32_t *prompt, fx_kv_lease *l, float *out) {
    fx_error err;
    fx_kv_fit fit;
    assert_int_equal(fx_kv_lease_init(kv, l, layout, MAX_CTX, &err), FX_OK);
    assert_int_equal(fx_kv_lease_admit(l, prompt, N_PROMPT, N_PROMPT, &fit,
                                       &err), FX_OK);
    assert_int_equal(fit, FX_KV_NOW);
    assert_int_equal(fx_kv_lease_cursor(l), 0);
    prefill(h, l, prompt, N_PROMPT, 9, out);
}

static void test_layout_documented(void **state) {
    (void)state;
    gw_model_spec spec;
    gw_model_spec_default(&spec);
    spec.seed = 21;
    harness h;
    harness_open(&h, &spec);
    const fx_hparams *hp = &h.hp;
    assert_true(hp->n_head_kv > 1 && hp->n_layer > 1);
    fx_kv *kv;
    fx_kv_params p = {.n_blocks = 40, .block_tokens = 5};
    fx_error err;
    assert_int_equal(fx_kv_create(&h.alloc, hp, &p, &kv, &err), FX_OK);
    int32_t prompt[N_PROMPT];
    random_tokens(prompt, N_PROMPT, hp->n_vocab, 3);
    float *out = calloc((size_t)N_PROMPT * hp->n_vocab, sizeof *out);
    assert_non_null(out);
    fx_kv_lease contig, paged;
    prefill_open(&h, kv, FX_KV_CONTIGUOUS, prompt, &contig, out);
    prefill_open(&h, kv, FX_KV_PAGED, prompt, &paged, out);
    const fx_kv_view vc = fx_kv_lease_view(&contig);
    const fx_kv_view vp = fx_kv_lease_view(&paged);
    assert_true(vc.n_blocks == 1 && vp.block_tokens == 5);
    size_t nonzero = 0;
    for (uint32_t l = 0; l < hp->n_layer; l++)
        for (uint32_t k = 0; k < 2; k++)
            for (uint32_t hh = 0; hh < hp->n_head_kv; hh++)
                for (uint32_t pos = 0; pos < N_PROMPT; pos++) {
                    const float *a = documented_slot(&vc, hp, l, k, hh, pos);
                    const float *b = documented_slot(&vp, hp, l, k, hh, pos);
                    if (memcmp(a, b, hp->head_dim * sizeof *a) != 0)
                        fail_msg("layer %u %s head %u position %u: not where "
                                 "model.h puts it", l, k ? "V" : "K", hh, pos);
                    for (uint32_t i = 0; i < hp->head_dim; i++)
                        nonzero += a[i] != 0.0f;
                }
    /* Written, not two caches that are both still zero there. */
    assert_true(nonzero > (size_t)hp->n_layer * 2 * hp->n_head_kv * N_PROMPT);
    assert_int_equal(fx_kv_lease_release(&contig, &err), FX_OK);
    assert_int_equal(fx_kv_lease_release(&paged, &err), FX_OK);
    fx_kv_lease_free(&contig);
    fx_kv_lease_free(&paged);
    free(out);
    fx_kv_free(kv);
    harness_close(&h);
}

static void test_bt16(void **state) {
    (void)state;
    one_model("llama", 0, 16, 0);
    one_model("qwen2", 8, 16, 0);
    one_model("qwen3", 8, 16, 0);
    one_model("gemma3", 0, 16, 0);
}

static void test_bt5(void **state) {
    (void)state;
    one_model("llama", 1, 5, 0);
    one_model("qwen2", 0, 5, 0);
    one_model("qwen3", 1, 5, 0);
    one_model("gemma2", 8, 5, 0);
    one_model("phi3", 0, 5, 0);
}

/* Rings a few blocks long (window 9): recycled many times over a row of
 * 48 positions, calls of 1 to ring_call positions. */
static void test_rings(void **state) {
    (void)state;
    one_model("gemma3", 0, 5, 4);
    one_model("gemma3", 8, 4, 6);
    one_model("gemma2", 0, 5, 3);
    one_model("gemma2", 1, 3, 1);
    one_model("gemma3", 0, 16, 8);
    one_model("phi3", 0, 5, 4); /* every layer sliding: only rings */
    one_model("phi3", 8, 4, 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bt16),
        cmocka_unit_test(test_bt5),
        cmocka_unit_test(test_rings),
        cmocka_unit_test(test_layout_documented),
    };
    return cmocka_run_group_tests_name("kv_forward", tests, NULL, NULL);
}
