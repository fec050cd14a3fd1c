/*
 * The batched forward pass against a deliberately naive reference (one
 * token at a time, one sequence, plain loops in double precision, in the
 * spirit of llama2.c's run.c), and its determinism contract: a sequence's
 * logits are bit-identical alone or batched with others, whole or chunked,
 * on one thread or two, on the portable, AVX2 or AVX-512 code.
 */
#include <math.h>
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
#include "model/model.h"

typedef struct harness {
    gw_buf file;
    fx_alloc alloc;
    fx_gguf *g;
    fx_hparams hp;
    fx_weights w;
    fx_kernels *kc;
    fx_forward *f;
} harness;

enum { MAX_CTX = 64, MAX_TOKENS = 96 };

/* repack: the weights as a loaded model holds them (fx_weights_repack),
 * not as the file has them: REPACK_EAGER copied whole at the forward's
 * creation, REPACK_LAZY a slice a pass from the second on. */
enum { REPACK_NONE, REPACK_EAGER, REPACK_LAZY };
static void harness_open_full(harness *h, const gw_model_spec *spec,
                              unsigned threads, fx_isa isa, int repack);

static void harness_open_isa(harness *h, const gw_model_spec *spec,
                             unsigned threads, fx_isa isa) {
    harness_open_full(h, spec, threads, isa, 0);
}

static void harness_open_full(harness *h, const gw_model_spec *spec,
                              unsigned threads, fx_isa isa, int repack) {
    memset(h, 0, sizeof *h);
    gw_build_model(&h->file, spec);
    fx_alloc_init(&h->alloc, NULL);
    fx_error err;
    assert_int_equal(fx_gguf_open_memory(h->file.data, h->file.len, &h->alloc,
                                         &h->g, &err), FX_OK);
    assert_int_equal(fx_hparams_load(h->g, &h->hp, &err), FX_OK);
    assert_int_equal(fx_weights_bind(h->g, &h->hp, &h->alloc, &h->w, &err), FX_OK);
    if (repack)
        assert_int_equal(fx_weights_repack(&h->w, &h->hp, h->g,
                                           repack == REPACK_EAGER, &h->alloc,
                                           &err),
                         FX_OK);
    fx_kernels_params kp;
    fx_kernels_params_init(&kp);
    kp.n_threads = threads;
    kp.isa = isa;
    assert_int_equal(fx_kernels_create(&h->alloc, &kp, &h->kc, &err), FX_OK);
    assert_int_equal(fx_forward_create(&h->alloc, &h->hp, &h->w, h->kc,
                                       MAX_TOKENS, MAX_CTX, &h->f, &err),
                     FX_OK);
}

static void harness_open(harness *h, const gw_model_spec *spec,
                         unsigned threads) {
    harness_open_isa(h, spec, threads, FX_ISA_AUTO);
}

/* Whether this CPU has isa (the kernels refuse to create otherwise). */
static int have_isa(fx_isa isa) {
    fx_alloc alloc;
    fx_alloc_init(&alloc, NULL);
    fx_kernels_params kp;
    fx_kernels_params_init(&kp);
    kp.isa = isa;
    fx_kernels *kc = NULL;
    if (fx_kernels_create(&alloc, &kp, &kc, NULL) != FX_OK) return 0;
    fx_kernels_free(kc);
    return 1;
}

static void harness_close(harness *h) {
    fx_forward_free(h->f);
    fx_kernels_free(h->kc);
    fx_weights_free(&h->w, &h->alloc);
    fx_gguf_close(h->g);
    gw_free(&h->file);
}

/* A contiguous KV cache: one block as long as the context. */
typedef struct seq_kv {
    void *data;
    void *blocks[1];
    fx_kv_view view;
} seq_kv;

static void seq_kv_init(seq_kv *s, const fx_hparams *hp, fx_kv_dtype dtype) {
    s->data = calloc(fx_kv_block_elems(hp, MAX_CTX), fx_kv_dtype_size(dtype));
    assert_non_null(s->data);
    s->blocks[0] = s->data;
    s->view = (fx_kv_view){.blocks = s->blocks, .n_blocks = 1,
                           .block_tokens = MAX_CTX,
                           .run_stride = (size_t)MAX_CTX * hp->head_dim,
                           .dtype = dtype};
}

/* The tests that take a KV dtype run once per dtype (prestate). */
static const fx_kv_dtype kv_f32 = FX_KV_DTYPE_F32, kv_f16 = FX_KV_DTYPE_F16;
static fx_kv_dtype state_dtype(void **state) {
    return *state ? *(const fx_kv_dtype *)*state : FX_KV_DTYPE_F32;
}

/* What an F16 cache does to a key or value: one rounding, at the store. */
static void ref_round_f16(double *v, uint32_t n) {
    for (uint32_t i = 0; i < n; i++)
        v[i] = fx_f16_to_f32(fx_f32_to_f16((float)v[i]));
}

/* ---- the reference ---- */

static void ref_row(const fx_matrix *m, uint32_t row, double *out) {
    float *tmp = malloc(m->k * sizeof *tmp);
    assert_non_null(tmp);
    const uint8_t *p = (const uint8_t *)m->data +
                       (size_t)row * fx_wtype_row_bytes(m->type, m->k);
    assert_int_equal(fx_wtype_row_to_f32(tmp, p, m->type, m->k), FX_OK);
    for (uint32_t i = 0; i < m->k; i++) out[i] = tmp[i];
    free(tmp);
}

/* Q8_0 matmuls multiply quantized activations (lib/kernels/kernels.h):
 * per block of 32, dx = amax / 127 and q = x * (127 / amax) rounded to
 * nearest even, all in float. The reference does the same to its own
 * activations (rounded to float first), then works in double on dx * q. */
static void ref_quantize_q8(double *x, uint32_t k) {
    for (uint32_t b = 0; b < k / 32; b++) {
        float xf[32], amax = 0;
        for (int i = 0; i < 32; i++) {
            xf[i] = (float)x[32 * b + i];
            if (fabsf(xf[i]) > amax) amax = fabsf(xf[i]);
        }
        const float dx = amax < 0x1p-100f ? 0.0f : amax / 127.0f;
        const float id = dx == 0.0f ? 0.0f : 127.0f / amax;
        for (int i = 0; i < 32; i++)
            x[32 * b + i] = (double)dx * rint((double)(xf[i] * id));
    }
}

/* out[n] = sum_k W[n][k] x[k] */
static void ref_matvec(const fx_matrix *m, const double *x_in, double *out) {
    double *row = malloc(m->k * sizeof *row);
    double *x = malloc(m->k * sizeof *x);
    assert_true(row && x);
    memcpy(x, x_in, m->k * sizeof *x);
    if (m->type == FX_WTYPE_Q8_0) ref_quantize_q8(x, m->k);
    for (uint32_t n = 0; n < m->n; n++) {
        ref_row(m, n, row);
        double s = 0;
        for (uint32_t k = 0; k < m->k; k++) s += row[k] * x[k];
        out[n] = s;
    }
    free(x);
    free(row);
}

#define M_PI_D 3.14159265358979323846

static void ref_rmsnorm(double *out, const double *x, const float *w,
                        uint32_t n, float eps) {
    double ss = 0;
    for (uint32_t i = 0; i < n; i++) ss += x[i] * x[i];
    double s = 1.0 / sqrt(ss / n + eps);
    for (uint32_t i = 0; i < n; i++) out[i] = x[i] * s * w[i];
}

/* A per-layer f32 vector found in the file by name (not through the
 * library's binding): Qwen3's and Gemma 3's head norms, Gemma's post
 * norms. */
static const float *ref_vector(const harness *h, uint32_t layer,
                               const char *suffix) {
    char name[64];
    snprintf(name, sizeof name, "blk.%u.%s", layer, suffix);
    const fx_gguf_tensor *t = fx_gguf_find_tensor(h->g, name);
    assert_non_null(t);
    return (const float *)(const void *)t->data;
}

/* Qwen3's and Gemma 3's norm of each head. */
static void ref_head_norms(const harness *h, const char *which, uint32_t layer,
                           double *v, uint32_t n_heads) {
    char suffix[32];
    snprintf(suffix, sizeof suffix, "attn_%s_norm.weight", which);
    const float *w = ref_vector(h, layer, suffix);
    for (uint32_t hh = 0; hh < n_heads; hh++) {
        double *x = v + (size_t)hh * h->hp.head_dim;
        ref_rmsnorm(x, x, w, h->hp.head_dim, h->hp.rms_norm_eps);
    }
}

/* The rotation of one position. pos_scale: linear RoPE scaling (1 /
 * factor); ff: per-frequency divisors (LongRoPE) or NULL; mscale: their
 * attention factor, on cos and sin. */
typedef struct ref_rope_spec {
    double base, pos_scale, mscale;
    const float *ff;
} ref_rope_spec;

static void ref_rope(double *v, uint32_t n_heads, const fx_hparams *hp,
                     uint32_t pos, const ref_rope_spec *rs) {
    int neox = hp->arch != FX_ARCH_LLAMA;
    for (uint32_t h = 0; h < n_heads; h++) {
        double *x = v + (size_t)h * hp->head_dim;
        for (uint32_t i = 0; i < hp->n_rot / 2; i++) {
            double theta = pos * rs->pos_scale * pow(rs->base, -2.0 * i / hp->n_rot);
            if (rs->ff) theta /= rs->ff[i];
            const double c = cos(theta) * rs->mscale, sn = sin(theta) * rs->mscale;
            uint32_t a = neox ? i : 2 * i, b = neox ? i + hp->n_rot / 2 : 2 * i + 1;
            double xa = x[a], xb = x[b];
            x[a] = xa * c - xb * sn;
            x[b] = xa * sn + xb * c;
        }
    }
}

/* A matrix of the file found by name, as ref_row reads it: Phi-3's fused
 * ones, which the library binds as row ranges. */
static fx_matrix ref_file_matrix(const harness *h, uint32_t layer,
                                 const char *suffix) {
    char name[64];
    snprintf(name, sizeof name, "blk.%u.%s", layer, suffix);
    const fx_gguf_tensor *t = fx_gguf_find_tensor(h->g, name);
    assert_non_null(t);
    return (fx_matrix){t->data, (fx_wtype)t->type, (uint32_t)t->ne[0],
                       (uint32_t)t->ne[1]};
}

static const float *ref_file_vector(const harness *h, const char *name) {
    const fx_gguf_tensor *t = fx_gguf_find_tensor(h->g, name);
    return t ? (const float *)(const void *)t->data : NULL;
}

/* Logits for every position of one sequence, computed token by token. */
static void ref_forward(const harness *h, const int32_t *tokens, uint32_t n,
                        fx_kv_dtype dtype, double *logits) {
    const fx_hparams *hp = &h->hp;
    const fx_weights *w = &h->w;
    uint32_t d = hp->n_embd, hd = hp->head_dim, ff = hp->n_ff;
    uint32_t qd = hp->n_head * hd, kvd = hp->n_head_kv * hd;
    double *x = calloc(d, sizeof *x), *xb = calloc(d, sizeof *xb);
    double *q = calloc(qd, sizeof *q), *att = calloc(qd, sizeof *att);
    double *g = calloc(ff, sizeof *g), *u = calloc(ff, sizeof *u);
    double *o = calloc(d > ff ? d : ff, sizeof *o);
    double *kc = calloc((size_t)hp->n_layer * n * kvd, sizeof *kc);
    double *vc = calloc((size_t)hp->n_layer * n * kvd, sizeof *vc);
    double *sc = calloc(n, sizeof *sc);
    assert_true(x && xb && q && att && g && u && o && kc && vc && sc);
    /* Gemma's own rules, written from its definition (the caps are
     * llama.cpp's defaults, 50 and 30, which the test files keep). */
    const int gemma2 = hp->arch == FX_ARCH_GEMMA2, gemma3 = hp->arch == FX_ARCH_GEMMA3;
    const int gemma = gemma2 || gemma3;
    /* Phi-3: its window on every layer; LongRoPE's long factors for a
     * context (the harness's MAX_CTX) beyond the original one. */
    const int phi3 = hp->arch == FX_ARCH_PHI3;
    const float *longrope = ref_file_vector(
        h, MAX_CTX > hp->n_ctx_orig ? "rope_factors_long.weight"
                                    : "rope_factors_short.weight");
    double *fused = calloc((size_t)qd + 2 * kvd + 2 * ff, sizeof *fused);
    assert_non_null(fused);
    for (uint32_t p = 0; p < n; p++) {
        ref_row(&w->tok_embd, (uint32_t)tokens[p], x);
        if (gemma)
            for (uint32_t i = 0; i < d; i++) x[i] *= sqrt((double)d);
        for (uint32_t l = 0; l < hp->n_layer; l++) {
            const fx_layer_weights *lw = &w->layers[l];
            double *kl = kc + ((size_t)l * n + p) * kvd;
            double *vl = vc + ((size_t)l * n + p) * kvd;
            ref_rmsnorm(xb, x, lw->attn_norm, d, hp->rms_norm_eps);
            if (phi3) {
                /* rows: Q, then K, then V */
                const fx_matrix qkv = ref_file_matrix(h, l, "attn_qkv.weight");
                ref_matvec(&qkv, xb, fused);
                memcpy(q, fused, qd * sizeof *q);
                memcpy(kl, fused + qd, kvd * sizeof *kl);
                memcpy(vl, fused + qd + kvd, kvd * sizeof *vl);
            } else {
                ref_matvec(&lw->wq, xb, q);
                ref_matvec(&lw->wk, xb, kl);
                ref_matvec(&lw->wv, xb, vl);
            }
            if (lw->bq) {
                for (uint32_t i = 0; i < qd; i++) q[i] += lw->bq[i];
                for (uint32_t i = 0; i < kvd; i++) kl[i] += lw->bk[i];
                for (uint32_t i = 0; i < kvd; i++) vl[i] += lw->bv[i];
            }
            if (hp->arch == FX_ARCH_QWEN3 || gemma3) {
                ref_head_norms(h, "q", l, q, hp->n_head);
                ref_head_norms(h, "k", l, kl, hp->n_head_kv);
            }
            /* Gemma 2 slides on even layers, Gemma 3 on 5 of 6, with
             * RoPE base 10000 and no scaling there. */
            const int slides = (gemma2 && l % 2 == 0) || (gemma3 && (l + 1) % 6 != 0) ||
                               (phi3 && hp->n_swa > 0);
            ref_rope_spec rs = {hp->rope_freq_base, hp->rope_freq_scale,
                                hp->rope_attn_factor, longrope};
            if (gemma3 && slides) rs.base = 10000.0, rs.pos_scale = 1.0;
            ref_rope(q, hp->n_head, hp, p, &rs);
            ref_rope(kl, hp->n_head_kv, hp, p, &rs);
            if (dtype == FX_KV_DTYPE_F16) {
                ref_round_f16(kl, kvd);
                ref_round_f16(vl, kvd);
            }
            const uint32_t j0 = slides && p + 1 > hp->n_swa ? p + 1 - hp->n_swa : 0;
            for (uint32_t hh = 0; hh < hp->n_head; hh++) {
                uint32_t kvh = hh / (hp->n_head / hp->n_head_kv);
                double mx = -INFINITY, sum = 0;
                for (uint32_t j = j0; j <= p; j++) {
                    const double *kj = kc + ((size_t)l * n + j) * kvd + kvh * hd;
                    double s = 0;
                    for (uint32_t i = 0; i < hd; i++) s += q[hh * hd + i] * kj[i];
                    sc[j] = s / sqrt((double)hd);
                    if (gemma2) sc[j] = 50.0 * tanh(sc[j] / 50.0);
                    if (sc[j] > mx) mx = sc[j];
                }
                for (uint32_t j = j0; j <= p; j++) sum += (sc[j] = exp(sc[j] - mx));
                for (uint32_t i = 0; i < hd; i++) {
                    double a = 0;
                    for (uint32_t j = j0; j <= p; j++)
                        a += sc[j] / sum * vc[((size_t)l * n + j) * kvd + kvh * hd + i];
                    att[hh * hd + i] = a;
                }
            }
            ref_matvec(&lw->wo, att, o);
            if (gemma)
                ref_rmsnorm(o, o, ref_vector(h, l, "post_attention_norm.weight"), d,
                            hp->rms_norm_eps);
            for (uint32_t i = 0; i < d; i++) x[i] += o[i];
            ref_rmsnorm(xb, x, lw->ffn_norm, d, hp->rms_norm_eps);
            if (phi3) {
                /* rows: the gate, then up */
                const fx_matrix gu = ref_file_matrix(h, l, "ffn_up.weight");
                ref_matvec(&gu, xb, fused);
                memcpy(g, fused, ff * sizeof *g);
                memcpy(u, fused + ff, ff * sizeof *u);
            } else {
                ref_matvec(&lw->w_gate, xb, g);
                ref_matvec(&lw->w_up, xb, u);
            }
            for (uint32_t i = 0; i < ff; i++) {
                const double a = g[i];
                g[i] = gemma ? 0.5 * a * (1 + tanh(sqrt(2 / M_PI_D) * a * (1 + 0.044715 * a * a)))
                             : a / (1 + exp(-a));
                g[i] *= u[i];
            }
            ref_matvec(&lw->w_down, g, o);
            if (gemma)
                ref_rmsnorm(o, o, ref_vector(h, l, "post_ffw_norm.weight"), d,
                            hp->rms_norm_eps);
            for (uint32_t i = 0; i < d; i++) x[i] += o[i];
        }
        ref_rmsnorm(xb, x, w->output_norm, d, hp->rms_norm_eps);
        double *lg = logits + (size_t)p * hp->n_vocab;
        ref_matvec(&w->output, xb, lg);
        if (gemma2)
            for (uint32_t i = 0; i < hp->n_vocab; i++) lg[i] = 30.0 * tanh(lg[i] / 30.0);
    }
    free(x); free(xb); free(q); free(att); free(g); free(u); free(o);
    free(kc); free(vc); free(sc); free(fused);
}

/* ---- helpers around the real pass ---- */

/* Runs `tokens` of one sequence in chunks of `chunk`, logits at every
 * position, into out [n][n_vocab]. */
static void run_chunked(harness *h, seq_kv *kv, const int32_t *tokens,
                        uint32_t n, uint32_t chunk, float *out) {
    fx_fwd_token batch[MAX_TOKENS];
    fx_error err;
    for (uint32_t start = 0; start < n; start += chunk) {
        uint32_t len = n - start < chunk ? n - start : chunk;
        for (uint32_t i = 0; i < len; i++)
            batch[i] = (fx_fwd_token){tokens[start + i], start + i, 0, 1};
        fx_status st = fx_forward_run(h->f, batch, len, &kv->view, 1,
                                      out + (size_t)start * h->hp.n_vocab, 0, &err);
        if (st != FX_OK) fail_msg("%s", err.message);
    }
}

static void random_tokens(int32_t *t, uint32_t n, uint32_t vocab, uint64_t seed) {
    for (uint32_t i = 0; i < n; i++)
        t[i] = (int32_t)fx_test_rng_below(&seed, vocab);
}

static void test_against_reference(void **state) {
    const fx_kv_dtype dtype = state_dtype(state);
    const char *arches[] = {"llama", "qwen2", "qwen3", "gemma2", "gemma3", "phi3"};
    uint32_t types[] = {0, 1, 30, 8};
    for (int a = 0; a < 6; a++) {
        for (int ty = 0; ty < 4; ty++) {
            gw_model_spec spec;
            gw_model_spec_default(&spec);
            spec.arch = arches[a];
            /* Qwen3's and Gemma's heads are wider than n_embd / n_head
             * (128 against 64 in Qwen3-0.6B): 24 against 16 here. */
            if (a >= 2 && a <= 4) spec.head_dim = 24;
            /* A window shorter than the 12 tokens; Gemma 3 with a global
             * layer (the sixth) of another RoPE base and linear scaling
             * than its sliding ones. */
            if (a >= 3) spec.n_swa = 5;
            /* Phi-3.5's LongRoPE: the long factors, as the harness's
             * context (64) is beyond the original one (32) */
            if (a == 5) {
                spec.n_ctx_orig = 32;
                spec.rope_attn_factor = 1.19f;
            }
            if (a == 4) {
                spec.n_layer = 6;
                spec.rope_base = 1e6f;
                spec.rope_factor = 4.0f;
                /* Six layers give a Q8_0 activation more chances to sit
                 * at a rounding tie, where the reference's and the real
                 * activations (equal but for the last bits) round to
                 * neighbouring quants: 3 of 10 seeds tried have one,
                 * 5e-3..2e-2 at every later position, the others 1-3e-7.
                 * Q8_0 takes the next seed (below), which has none; the
                 * float types check the same rules tie-free. */
            }
            spec.type = types[ty];
            spec.tied = ty == 1;
            spec.seed = 7 + (uint64_t)ty;
            if (a == 4 && types[ty] == 8) spec.seed += 1;
            /* Q8_0 adds ties of its own (its activations, above) that
             * compound with the f16 ones: the float types check the F16
             * cache, test_f16_store its stores exactly. */
            if (dtype == FX_KV_DTYPE_F16 && types[ty] == 8) continue;
            harness h;
            harness_open(&h, &spec, 1);
            enum { N = 12 };
            int32_t tokens[N];
            random_tokens(tokens, N, h.hp.n_vocab, 99 + (uint64_t)a);
            double *ref = calloc((size_t)N * h.hp.n_vocab, sizeof *ref);
            float *got = calloc((size_t)N * h.hp.n_vocab, sizeof *got);
            seq_kv kv;
            seq_kv_init(&kv, &h.hp, dtype);
            ref_forward(&h, tokens, N, dtype, ref);
            run_chunked(&h, &kv, tokens, N, N, got);
            double worst = 0;
            for (uint32_t p = 0; p < N; p++) {
                double scale = 0, diff = 0;
                for (uint32_t i = 0; i < h.hp.n_vocab; i++) {
                    double r = ref[(size_t)p * h.hp.n_vocab + i];
                    double gv = got[(size_t)p * h.hp.n_vocab + i];
                    if (fabs(r) > scale) scale = fabs(r);
                    if (fabs(r - gv) > diff) diff = fabs(r - gv);
                }
                if (diff / scale > worst) worst = diff / scale;
            }
            /* Weights are dequantized exactly on both sides and Q8_0
             * activations quantized by the same rule, so only the float32
             * arithmetic differs: the same bound for every type. (Without
             * the mirrored quantization Q8_0 is off by ~2e-2 here; a
             * quant flipping at a rounding tie between the reference's
             * and the real activations would cost ~1e-5.) */
            print_message("%s %u kv %d: worst relative logit error %g\n",
                          arches[a], types[ty], (int)dtype, worst);
            /* F16: a key or value whose float is within rounding of an
             * f16 tie is rounded the other way by the reference (about
             * 1e-4 from there on; 1e-7 to 1e-5 otherwise, 2e-4 to 8e-4
             * against a reference that does not round). */
            if (worst > (dtype == FX_KV_DTYPE_F16 ? 3e-4 : 1e-4))
                fail_msg("%s %u kv %d: relative logit error %g", arches[a],
                         types[ty], (int)dtype, worst);
            free(ref);
            free(got);
            free(kv.data);
            harness_close(&h);
        }
    }
}

static uint32_t argmax(const float *v, uint32_t n) {
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (v[i] > v[best]) best = i; /* lowest id wins a tie */
    return best;
}

/* Greedy decoding agrees with the reference wherever the reference's top
 * two logits are not within rounding of each other. */
static void test_greedy_matches_reference(void **state) {
    (void)state;
    gw_model_spec spec;
    gw_model_spec_default(&spec);
    spec.seed = 3;
    harness h;
    harness_open(&h, &spec, 1);
    enum { PROMPT = 5, GEN = 10, N = PROMPT + GEN };
    int32_t tokens[N];
    random_tokens(tokens, PROMPT, h.hp.n_vocab, 5);
    seq_kv kv;
    seq_kv_init(&kv, &h.hp, FX_KV_DTYPE_F32);
    float *logits = calloc(h.hp.n_vocab, sizeof *logits);
    fx_error err;
    for (uint32_t p = 0; p < N - 1; p++) {
        fx_fwd_token tok = {tokens[p], p, 0, 1};
        assert_int_equal(fx_forward_run(h.f, &tok, 1, &kv.view, 1, logits, 0, &err),
                         FX_OK);
        if (p + 1 >= PROMPT) tokens[p + 1] = (int32_t)argmax(logits, h.hp.n_vocab);
    }
    double *ref = calloc((size_t)N * h.hp.n_vocab, sizeof *ref);
    ref_forward(&h, tokens, N, FX_KV_DTYPE_F32, ref);
    for (uint32_t p = PROMPT - 1; p < N - 1; p++) {
        const double *r = ref + (size_t)p * h.hp.n_vocab;
        uint32_t best = 0, second = 1;
        for (uint32_t i = 1; i < h.hp.n_vocab; i++) {
            if (r[i] > r[best]) { second = best; best = i; }
            else if (i != best && r[i] > r[second]) second = i;
        }
        if (r[best] - r[second] < 1e-4 * fabs(r[best])) break;
        assert_int_equal(tokens[p + 1], (int32_t)best);
    }
    free(ref);
    free(logits);
    free(kv.data);
    harness_close(&h);
}

/* The determinism contract: the target sequence's logits, bit for bit,
 * alone; batched with 1, 3 and 8 other sequences of other lengths;
 * prefilled in chunks of 1, 7 and all; on 1 and 2 threads. */
static void test_batch_invariance(void **state) {
    const fx_kv_dtype dtype = state_dtype(state);
    uint32_t types[] = {0, 8, 1, 30};
    for (int ty = 0; ty < 4; ty++) {
        gw_model_spec spec;
        gw_model_spec_default(&spec);
        spec.type = types[ty];
        const char *arch_of[] = {"llama", "qwen2", "qwen3", "gemma3"};
        spec.arch = arch_of[ty];
        if (ty >= 2) spec.head_dim = 24;
        if (ty == 3) spec.n_swa = 5; /* shorter than the 20 tokens */
        enum { N = 20 };
        int32_t target[N];
        float *solo = NULL;
        for (unsigned threads = 1; threads <= 2; threads++) {
            harness h;
            harness_open(&h, &spec, threads);
            uint32_t V = h.hp.n_vocab;
            random_tokens(target, N, V, 42);
            if (!solo) {
                solo = calloc((size_t)N * V, sizeof *solo);
                seq_kv kv;
                seq_kv_init(&kv, &h.hp, dtype);
                run_chunked(&h, &kv, target, N, N, solo);
                free(kv.data);
            }
            float *got = calloc((size_t)N * V, sizeof *got);
            uint32_t chunks[] = {1, 7, N};
            for (int c = 0; c < 3; c++) {
                seq_kv kv;
                seq_kv_init(&kv, &h.hp, dtype);
                memset(got, 0, (size_t)N * V * sizeof *got);
                run_chunked(&h, &kv, target, N, chunks[c], got);
                if (memcmp(got, solo, (size_t)N * V * sizeof *got) != 0)
                    fail_msg("type %u kv %d, %u threads, chunk %u: logits "
                             "differ", types[ty], (int)dtype, threads, chunks[c]);
                free(kv.data);
            }
            /* Mixed batches: the target's whole prompt plus others. */
            uint32_t others_counts[] = {1, 3, 8};
            for (int oc = 0; oc < 3; oc++) {
                uint32_t n_others = others_counts[oc];
                seq_kv kvs[9];
                fx_kv_view views[9];
                for (uint32_t s = 0; s <= n_others; s++) {
                    seq_kv_init(&kvs[s], &h.hp, dtype);
                    views[s] = kvs[s].view;
                }
                fx_fwd_token batch[MAX_TOKENS];
                uint32_t n = 0, target_first = 0;
                /* Others go first and last so the target sits mid-batch;
                 * lengths 1..8 vary per sequence. */
                for (uint32_t s = 1; s <= n_others; s++) {
                    uint32_t len = 1 + (s * 5) % 8;
                    int32_t tok[8];
                    random_tokens(tok, len, V, 1000 + s);
                    for (uint32_t i = 0; i < len; i++)
                        batch[n++] = (fx_fwd_token){tok[i], i, s, (i + s) % 2};
                    if (s == (n_others + 1) / 2) {
                        target_first = n;
                        for (uint32_t i = 0; i < N; i++)
                            batch[n++] = (fx_fwd_token){target[i], i, 0, 1};
                    }
                }
                /* logits rows: in batch order, one per flagged token */
                uint32_t n_flagged = 0, target_row = 0;
                for (uint32_t i = 0; i < n; i++) {
                    if (i == target_first) target_row = n_flagged;
                    if (batch[i].logits) n_flagged++;
                }
                float *all = calloc((size_t)n_flagged * V, sizeof *all);
                fx_error err;
                assert_int_equal(fx_forward_run(h.f, batch, n, views,
                                                n_others + 1, all, 0, &err),
                                 FX_OK);
                if (memcmp(all + (size_t)target_row * V, solo,
                           (size_t)N * V * sizeof *all) != 0)
                    fail_msg("type %u kv %d, %u threads, %u others: logits "
                             "differ", types[ty], (int)dtype, threads, n_others);
                free(all);
                for (uint32_t s = 0; s <= n_others; s++) free(kvs[s].data);
            }
            free(got);
            harness_close(&h);
        }
        free(solo);
    }
}

/* A loaded model holds every Q8_0 matrix the matmuls read in the R16
 * form (fx_kernels_prefer_r16), whatever its N: odd N too. */
static void assert_repacked_r16(const fx_weights *w, const fx_hparams *hp) {
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        const fx_layer_weights *lw = &w->layers[l];
        const fx_matrix *ms[] = {&lw->wq,     &lw->wk,   &lw->wv, &lw->wo,
                                 &lw->w_gate, &lw->w_up, &lw->w_down};
        for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++)
            assert_int_equal(ms[i]->type, FX_WTYPE_Q8_0_R16);
    }
    assert_int_equal(w->output.type, FX_WTYPE_Q8_0_R16);
}

/* A loaded model holds an F16 or BF16 matrix in its R12 form where the
 * kernels prefer it (AVX-512 here) and the shape allows (N even, K % 8 ==
 * 0), else as it is; returns how many went to R12. */
static size_t assert_repacked_r12(const fx_weights *w, const fx_hparams *hp,
                                  fx_wtype file_type) {
    size_t n_r12 = 0;
    for (uint32_t l = 0; l <= hp->n_layer; l++) {
        const fx_layer_weights *lw = &w->layers[l < hp->n_layer ? l : 0];
        const fx_matrix *layer[] = {&lw->wq,     &lw->wk,   &lw->wv, &lw->wo,
                                    &lw->w_gate, &lw->w_up, &lw->w_down};
        const fx_matrix *out[] = {&w->output};
        const fx_matrix *const *ms = l < hp->n_layer ? layer : out;
        /* an output tied to the embedding table is repacked too */
        const size_t count = l < hp->n_layer ? 7 : 1;
        for (size_t i = 0; i < count; i++) {
            const bool fits = ms[i]->n % 2 == 0 && ms[i]->k % 8 == 0;
            if (fx_kernels_prefer_r12(file_type) && fits) {
                assert_int_equal(fx_wtype_unpacked(ms[i]->type), file_type);
                assert_true(fx_wtype_is_r12(ms[i]->type));
                n_r12++;
            } else {
                assert_int_equal(ms[i]->type, file_type);
            }
        }
    }
    return n_r12;
}

/* Every code path gives the same bits: the whole forward pass (matmuls,
 * Q8_0 activation quantization, attention's grouped scores and weighted
 * sums) on the portable path, AVX2 and AVX-512, for every weight type, on
 * the default shape and on ones whose head_dim has a 32-wide part and a
 * tail (36), with 1, 2, 3 and 6 query heads per KV head (the attention
 * kernels take 4 heads x 2 keys and 2 heads at a time), and odd
 * vocabularies; an odd prompt length leaves a last key of its own. */
static void test_isa_invariance(void **state) {
    const fx_kv_dtype dtype = state_dtype(state);
    size_t r12_runs = 0;
    const uint32_t types[] = {0, 1, 30, 8};
    const fx_isa isas[] = {FX_ISA_AVX2, FX_ISA_AVX512};
    const fx_isa allisas[] = {FX_ISA_PORTABLE, FX_ISA_AVX2, FX_ISA_AVX512};
    /* n_embd, n_head, n_head_kv, n_vocab; 0: the default (64, 4, 2, 64).
     * An odd n_vocab gives the output matrix an odd N: repacked to R16
     * all the same, with a short last tile (67 = 4 * 16 + 3). The third
     * shape is a Gemma 2 with a window of 7, the fourth a Phi-3 (fused
     * matrices, a window of 9), the last a Qwen3 with heads of 32 (q_dim
     * 128 from n_embd 96) and its output tied to the embedding table
     * (repacked as the output, read by row as the table). */
    const uint32_t shapes[][4] = {{0, 0, 0, 0},    {288, 8, 4, 0},
                                  {288, 6, 2, 67}, {288, 12, 2, 0},
                                  {96, 4, 4, 101}};
    for (int shape = 0; shape < 5; shape++)
        for (int ty = 0; ty < 4; ty++) {
            gw_model_spec spec;
            gw_model_spec_default(&spec);
            spec.type = types[ty];
            spec.seed = 11 + (uint64_t)ty;
            if (shape > 0) {
                spec.n_embd = shapes[shape][0];
                spec.n_head = shapes[shape][1];
                spec.n_head_kv = shapes[shape][2];
                spec.arch = shape == 1 ? "qwen2" : shape == 3 ? "phi3"
                          : shape == 4 ? "qwen3" : shape == 2 ? "gemma2" : "llama";
                if (shape == 4) spec.head_dim = 32, spec.tied = 1;
                if (shape == 2) spec.n_swa = 7;
                if (shape == 3) spec.n_swa = 9;
                if (shapes[shape][3]) spec.n_vocab = shapes[shape][3];
            }
            enum { N = 23 };
            int32_t tokens[N];
            harness h;
            harness_open_isa(&h, &spec, 2, FX_ISA_PORTABLE);
            const uint32_t V = h.hp.n_vocab;
            random_tokens(tokens, N, V, 77);
            float *want = calloc((size_t)N * V, sizeof *want);
            float *got = calloc((size_t)N * V, sizeof *got);
            assert_true(want && got);
            seq_kv kv;
            seq_kv_init(&kv, &h.hp, dtype);
            run_chunked(&h, &kv, tokens, N, 9, want);
            free(kv.data);
            harness_close(&h);
            /* Each ISA on the file's layout, then every path (the
             * portable one too) on the repacked weights a model uses,
             * then this CPU's with the copy made a slice a pass: three
             * passes of 9 tokens, their matrices from both layouts. */
            for (int a = 0; a < 6; a++) {
                const fx_isa isa = a < 2 ? isas[a] : a < 5 ? allisas[a - 2]
                                                           : FX_ISA_AUTO;
                const int repack = a < 2   ? REPACK_NONE
                                   : a < 5 ? REPACK_EAGER
                                           : REPACK_LAZY;
                if (!have_isa(isa)) continue;
                harness_open_full(&h, &spec, 2, isa, repack);
                const fx_weights *used = fx_forward_weights(h.f);
                if (repack == REPACK_EAGER && spec.type == 8)
                    assert_repacked_r16(used, &h.hp);
                if (repack == REPACK_EAGER &&
                    (spec.type == 1 || spec.type == 30) &&
                    assert_repacked_r12(used, &h.hp, (fx_wtype)spec.type) > 0)
                    r12_runs++;
                if (repack == REPACK_LAZY)
                    assert_ptr_equal(used->output.data, h.w.output.data);
                seq_kv_init(&kv, &h.hp, dtype);
                run_chunked(&h, &kv, tokens, N, 9, got);
                /* The output is the plan's first piece: copied by now,
                 * the last layers' matrices not yet. */
                if (repack == REPACK_LAZY) {
                    assert_ptr_not_equal(used->output.data, h.w.output.data);
                    const fx_layer_weights *last =
                        &used->layers[h.hp.n_layer - 1];
                    assert_ptr_equal(last->w_down.data,
                                     h.w.layers[h.hp.n_layer - 1].w_down.data);
                }
                if (memcmp(got, want, (size_t)N * V * sizeof *got) != 0)
                    fail_msg("type %u kv %d, shape %d, isa %d, repacked %d: "
                             "logits differ from the portable path",
                             types[ty], (int)dtype, shape, (int)isa, repack);
                free(kv.data);
                harness_close(&h);
            }
            free(want);
            free(got);
        }
    /* Where the kernels take R12, these shapes ran through it. */
    if (fx_kernels_prefer_r12(FX_WTYPE_F16)) assert_true(r12_runs > 0);
}

/* An F16 cache holds each key and value an F32 cache holds, rounded to
 * the nearest f16: layer 0's (whose inputs do not depend on the cache)
 * compared at every head, position and element. */
static void test_f16_store(void **state) {
    (void)state;
    const char *arches[] = {"llama", "qwen3", "gemma3"};
    for (int a = 0; a < 3; a++) {
        gw_model_spec spec;
        gw_model_spec_default(&spec);
        spec.arch = arches[a];
        if (a > 0) spec.head_dim = 24, spec.n_swa = a == 2 ? 5 : 0;
        harness h;
        harness_open(&h, &spec, 2);
        enum { N = 20 };
        int32_t tokens[N];
        random_tokens(tokens, N, h.hp.n_vocab, 5);
        float *logits = calloc((size_t)N * h.hp.n_vocab, sizeof *logits);
        assert_non_null(logits);
        seq_kv f32, f16;
        seq_kv_init(&f32, &h.hp, FX_KV_DTYPE_F32);
        seq_kv_init(&f16, &h.hp, FX_KV_DTYPE_F16);
        run_chunked(&h, &f32, tokens, N, 7, logits);
        run_chunked(&h, &f16, tokens, N, 7, logits);
        const float *want = f32.data;
        const uint16_t *got = f16.data;
        const uint32_t hd = h.hp.head_dim;
        size_t nonzero = 0;
        for (uint32_t r = 0; r < 2 * h.hp.n_head_kv; r++)
            for (uint32_t p = 0; p < N; p++)
                for (uint32_t i = 0; i < hd; i++) {
                    const size_t at = r * f32.view.run_stride + (size_t)p * hd + i;
                    if (got[at] != fx_f32_to_f16(want[at]))
                        fail_msg("%s: run %u position %u element %u: f16 %#x "
                                 "for %a", arches[a], r, p, i, got[at],
                                 (double)want[at]);
                    nonzero += want[at] != 0.0f;
                }
        assert_true(nonzero > (size_t)N * hd);
        free(f32.data);
        free(f16.data);
        free(logits);
        harness_close(&h);
    }
}

/* Bad batches are refused with a status, not read out of bounds. */
static void test_bad_batches(void **state) {
    (void)state;
    gw_model_spec spec;
    gw_model_spec_default(&spec);
    harness h;
    harness_open(&h, &spec, 1);
    seq_kv kv;
    seq_kv_init(&kv, &h.hp, FX_KV_DTYPE_F32);
    float *logits = calloc(h.hp.n_vocab, sizeof *logits);
    fx_error err;
    fx_fwd_token bad_token = {(int32_t)h.hp.n_vocab, 0, 0, 1};
    assert_int_equal(fx_forward_run(h.f, &bad_token, 1, &kv.view, 1, logits, 0, &err),
                     FX_ERR_INVALID_ARG);
    fx_fwd_token negative = {-1, 0, 0, 1};
    assert_int_equal(fx_forward_run(h.f, &negative, 1, &kv.view, 1, logits, 0, &err),
                     FX_ERR_INVALID_ARG);
    fx_fwd_token bad_seq = {1, 0, 1, 1};
    assert_int_equal(fx_forward_run(h.f, &bad_seq, 1, &kv.view, 1, logits, 0, &err),
                     FX_ERR_INVALID_ARG);
    fx_fwd_token bad_pos = {1, MAX_CTX, 0, 1};
    assert_int_equal(fx_forward_run(h.f, &bad_pos, 1, &kv.view, 1, logits, 0, &err),
                     FX_ERR_INVALID_ARG);
    fx_fwd_token ok = {1, 0, 0, 1};
    assert_int_equal(fx_forward_run(h.f, &ok, 0, &kv.view, 1, logits, 0, &err),
                     FX_ERR_INVALID_ARG);
    fx_kv_view bad_dtype = kv.view;
    bad_dtype.dtype = (fx_kv_dtype)2;
    assert_int_equal(fx_forward_run(h.f, &ok, 1, &bad_dtype, 1, logits, 0, &err),
                     FX_ERR_INVALID_ARG);
    assert_int_equal(fx_forward_run(h.f, &ok, 1, &kv.view, 1, NULL, 0, &err),
                     FX_ERR_INVALID_ARG);
    assert_int_equal(fx_forward_run(h.f, &ok, 1, &kv.view, 1, logits, 0, &err),
                     FX_OK);
    free(logits);
    free(kv.data);
    harness_close(&h);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate(test_against_reference, (void *)&kv_f32),
        cmocka_unit_test_prestate(test_against_reference, (void *)&kv_f16),
        cmocka_unit_test(test_greedy_matches_reference),
        cmocka_unit_test_prestate(test_batch_invariance, (void *)&kv_f32),
        cmocka_unit_test_prestate(test_batch_invariance, (void *)&kv_f16),
        cmocka_unit_test_prestate(test_isa_invariance, (void *)&kv_f32),
        cmocka_unit_test_prestate(test_isa_invariance, (void *)&kv_f16),
        cmocka_unit_test(test_f16_store),
        cmocka_unit_test(test_bad_batches),
    };
    return cmocka_run_group_tests_name("forward", tests, NULL, NULL);
}
