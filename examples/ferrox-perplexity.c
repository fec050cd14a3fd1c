/*
 * ferrox-perplexity: a model's perplexity on a text file, measured the way
 * llama.cpp's llama-perplexity measures it, so the two numbers compare.
 *
 *   ferrox-perplexity --model M.gguf --file TEXT [--ctx N] [--threads K]
 *                     [--parse-special] [--chunks C] [--kv-type f32|f16]
 *
 * The text is tokenized whole and cut into chunks of N tokens (default: the
 * model's training context). Each chunk runs through the model from an
 * empty cache; the tokens of its second half are scored (each predicted
 * from at least N/2 tokens of context), and when the vocabulary adds BOS
 * the chunk's first token is replaced by BOS. PPL = exp(mean negative
 * log-likelihood) over every scored token; the +/- is the standard error
 * of that mean carried through exp. Deterministic: the same file and model
 * give the same digits at any thread count.
 *
 * Reaches into lib/ for the forward pass (the public API samples; it does
 * not return a prompt's logits), so it links the static library.
 */
#define _POSIX_C_SOURCE 200809L
#include <ferrox.h>

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "api/api_internal.h"
#include "kernels/kernels.h"
#include "tokenizer/vocab_impl.h"

static const char USAGE[] =
    "usage: ferrox-perplexity --model M.gguf --file TEXT [--ctx N] [--threads K]\n"
    "                         [--parse-special] [--chunks C] [--kv-type f32|f16]\n"
    "  --ctx N           tokens per chunk (default: the model's context length)\n"
    "  --threads K       threads for the forward pass (default 1)\n"
    "  --parse-special   text equal to a special token becomes that token\n"
    "                    (chat-formatted text); off by default, as in llama.cpp\n"
    "  --chunks C        score only the first C chunks\n"
    "  --kv-type T       the KV cache's type: f32 (default) or f16, as\n"
    "                    llama-perplexity's -ctk/-ctv\n";

/* Batch of tokens per forward call inside a chunk: bounds the logits buffer
 * (batch x vocabulary floats) whatever the context. */
#define FWD_BATCH 128u

/* -log p(target) from one row of logits, in double. */
static double nll(const float *logits, uint32_t n_vocab, int32_t target) {
    float mx = logits[0];
    for (uint32_t i = 1; i < n_vocab; i++)
        if (logits[i] > mx) mx = logits[i];
    double sum = 0.0;
    for (uint32_t i = 0; i < n_vocab; i++) sum += exp((double)logits[i] - mx);
    return log(sum) - ((double)logits[target] - mx);
}

typedef struct scorer {
    fx_model *model;
    fx_kernels *kc;
    fx_forward *fwd;
    void *kv;
    float *logits;
    void *blocks[1];
    fx_kv_view view;
    fx_fwd_token *batch;
} scorer;

static void scorer_free(scorer *s) {
    fx_forward_free(s->fwd);
    fx_kernels_free(s->kc);
    free(s->kv);
    free(s->logits);
    free(s->batch);
}

static int scorer_init(scorer *s, fx_model *model, uint32_t ctx, unsigned threads,
                       fx_kv_dtype dtype) {
    memset(s, 0, sizeof *s);
    s->model = model;
    const fx_hparams *hp = &model->hp;
    fx_error err;
    fx_error_clear(&err);
    fx_kernels_params kp;
    fx_kernels_params_init(&kp);
    kp.n_threads = threads;
    if (fx_kernels_create(&model->alloc, &kp, &s->kc, &err) != FX_OK ||
        fx_forward_create(&model->alloc, hp, &model->weights, s->kc, FWD_BATCH,
                          ctx, &s->fwd, &err) != FX_OK) {
        fprintf(stderr, "ferrox-perplexity: %s\n", err.message);
        return -1;
    }
    s->kv = calloc(fx_kv_block_elems(hp, ctx), fx_kv_dtype_size(dtype));
    s->logits = malloc((size_t)FWD_BATCH * hp->n_vocab * sizeof(float));
    s->batch = malloc(FWD_BATCH * sizeof *s->batch);
    if (!s->kv || !s->logits || !s->batch) {
        fprintf(stderr, "ferrox-perplexity: out of memory\n");
        return -1;
    }
    s->blocks[0] = s->kv;
    s->view = (fx_kv_view){.blocks = s->blocks, .n_blocks = 1, .block_tokens = ctx,
                           .run_stride = (size_t)ctx * hp->head_dim,
                           .dtype = dtype};
    return 0;
}

/* Runs one chunk and adds the negative log-likelihoods of tokens
 * first+1 .. n-1 to *sum, *sum_sq and *count. */
static int score_chunk(scorer *s, const int32_t *tok, uint32_t n, uint32_t first,
                       double *sum, double *sum_sq, uint64_t *count) {
    const uint32_t n_vocab = s->model->hp.n_vocab;
    fx_error err;
    fx_error_clear(&err);
    for (uint32_t at = 0; at < n; at += FWD_BATCH) {
        uint32_t m = n - at < FWD_BATCH ? n - at : FWD_BATCH;
        for (uint32_t i = 0; i < m; i++) {
            uint32_t pos = at + i;
            s->batch[i] = (fx_fwd_token){tok[pos], pos, 0,
                                         pos >= first && pos + 1 < n};
        }
        if (fx_forward_run(s->fwd, s->batch, m, &s->view, 1, s->logits, 0, &err) !=
            FX_OK) {
            fprintf(stderr, "ferrox-perplexity: %s\n", err.message);
            return -1;
        }
        uint32_t row = 0;
        for (uint32_t i = 0; i < m; i++) {
            if (!s->batch[i].logits) continue;
            double x = nll(s->logits + (size_t)row++ * n_vocab, n_vocab,
                           tok[at + i + 1]);
            *sum += x;
            *sum_sq += x * x;
            (*count)++;
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *model_path = NULL, *file = NULL;
    uint32_t ctx = 0, threads = 1, max_chunks = 0;
    int parse_special = 0, kv_f16 = 0;
    cli c;
    cli_init(&c, "ferrox-perplexity", argc, argv);
    while (cli_next(&c)) {
        if (cli_is_help(&c)) {
            fputs(USAGE, stdout);
            return CLI_OK;
        } else if (cli_is(&c, "--parse-special")) {
            parse_special = 1;
        } else if (cli_is(&c, "--model")) {
            if (!(model_path = cli_value(&c))) return CLI_USAGE;
        } else if (cli_is(&c, "--file")) {
            if (!(file = cli_value(&c))) return CLI_USAGE;
        } else if (cli_is(&c, "--ctx")) {
            if (cli_u32(&c, 4, 1u << 20, &ctx)) return CLI_USAGE;
        } else if (cli_is(&c, "--threads")) {
            if (cli_u32(&c, 1, 256, &threads)) return CLI_USAGE;
        } else if (cli_is(&c, "--chunks")) {
            if (cli_u32(&c, 1, UINT32_MAX, &max_chunks)) return CLI_USAGE;
        } else if (cli_is(&c, "--kv-type")) {
            static const char *const kv_types[] = {"f32", "f16"};
            if (cli_choice(&c, kv_types, 2, &kv_f16)) return CLI_USAGE;
        } else {
            return cli_unknown(&c);
        }
    }
    if (!model_path || !file)
        return cli_usage_error(&c, "--model and --file are required");

    size_t text_len = 0;
    char *text = cli_read_file(file, &text_len);
    if (!text) {
        fprintf(stderr, "ferrox-perplexity: %s: %s\n", file, strerror(errno));
        return 1;
    }
    fx_model *model = NULL;
    char errbuf[512];
    fx_status st = fx_model_load(model_path, NULL, &model, errbuf, sizeof errbuf);
    if (st != FX_OK) {
        fprintf(stderr, "ferrox-perplexity: %s: %s\n", model_path, errbuf);
        free(text);
        return 1;
    }
    if (ctx == 0) ctx = model->hp.n_ctx_train;
    if (ctx < 4) {
        fprintf(stderr, "ferrox-perplexity: the model's context (%u) is under 4 "
                "tokens; give --ctx\n", ctx);
        fx_model_free(model);
        free(text);
        return CLI_USAGE;
    }

    uint32_t flags = parse_special ? FX_TOKENIZE_PARSE_SPECIAL : 0;
    size_t n_tok = 0;
    int32_t *tok = NULL;
    st = fx_tokenize(model, text, text_len, flags, NULL, 0, &n_tok);
    if (st == FX_ERR_BUFFER_TOO_SMALL || st == FX_OK) {
        tok = malloc((n_tok ? n_tok : 1) * sizeof *tok);
        st = tok ? fx_tokenize(model, text, text_len, flags, tok, n_tok, &n_tok)
                 : FX_ERR_NOMEM;
    }
    free(text);
    if (st != FX_OK) {
        fprintf(stderr, "ferrox-perplexity: tokenizing %s: %s\n", file,
                fx_status_str(st));
        free(tok);
        fx_model_free(model);
        return 1;
    }
    size_t n_chunks = n_tok / ctx;
    if (max_chunks && max_chunks < n_chunks) n_chunks = max_chunks;
    if (n_chunks == 0) {
        fprintf(stderr, "ferrox-perplexity: %s has %zu tokens, fewer than one "
                "chunk of %u (lower --ctx)\n", file, n_tok, ctx);
        free(tok);
        fx_model_free(model);
        return 1;
    }
    fprintf(stderr, "ferrox-perplexity: %zu tokens, %zu chunks of %u, scoring "
            "the second half of each\n", n_tok, n_chunks, ctx);

    scorer s;
    int rc = scorer_init(&s, model, ctx, threads,
                         kv_f16 ? FX_KV_DTYPE_F16 : FX_KV_DTYPE_F32);
    int32_t bos = fx_model_special_token(model, FX_TOKEN_BOS);
    double sum = 0.0, sum_sq = 0.0;
    uint64_t count = 0;
    for (size_t k = 0; rc == 0 && k < n_chunks; k++) {
        int32_t *chunk = tok + k * ctx;
        if (model->vocab->add_bos && bos >= 0) chunk[0] = bos;
        rc = score_chunk(&s, chunk, ctx, ctx / 2, &sum, &sum_sq,
                         &count);
        if (rc == 0) printf("[%zu]%.4f%s", k + 1, exp(sum / (double)count),
                            k + 1 < n_chunks ? "," : "\n");
        fflush(stdout);
    }
    if (rc == 0) {
        double mean = sum / (double)count;
        double var = sum_sq / (double)count - mean * mean;
        double se = count > 1 && var > 0 ? sqrt(var / (double)(count - 1)) : 0.0;
        double ppl = exp(mean);
        printf("Final estimate: PPL = %.4f +/- %.5f (%llu tokens scored, "
               "mean NLL %.6f)\n", ppl, ppl * se, (unsigned long long)count, mean);
    }
    scorer_free(&s);
    free(tok);
    fx_model_free(model);
    return rc == 0 ? 0 : 1;
}
