/*
 * Per-token grammar mask time: json.gbnf over the 32,000-token llama-spm
 * vocabulary, walking the states a sampled JSON text passes through.
 * Prints the median and p99 of fx_gstate_mask (the whole allowed-token
 * set each step), plus the one-time trie build.
 *
 * For comparison, published figures: llama.cpp ~14.5 ms average per
 * token, llguidance ~47 us. Target: median <= 100 us, p99 <= 1 ms.
 *
 * usage: bench_grammar [VOCAB.gguf [GRAMMAR.gbnf [TOKENS]]]
 *        bench_grammar VOCAB.gguf --schema SCHEMA.json [TOKENS]
 * --schema converts a JSON Schema with the library's converter first (the
 * grammar a structured-output request gets); tests/data/schemas has some.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gguf/gguf.h"
#include "sample/json_schema.h"
#include "sample/sample.h"
#include "tokenizer/tokenizer.h"
#include "test_util.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* This thread's CPU time: on a shared machine, wall time also counts the
 * time other processes held the core. Both are reported. */
static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int by_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    /* --schema FILE stands in for the grammar argument. */
    const char *schema = NULL, *pos[3] = {NULL, NULL, NULL};
    int n_pos = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--schema") == 0 && i + 1 < argc) {
            schema = argv[++i];
            if (n_pos == 1) n_pos = 2; /* the grammar's place */
        } else if (n_pos < 3) {
            pos[n_pos++] = argv[i];
        } else {
            fprintf(stderr, "usage: bench_grammar [VOCAB [GRAMMAR | --schema FILE] [TOKENS]]\n");
            return 2;
        }
    }
    /* fx_test_data_path returns a static buffer: copy each answer. */
    char vdefault[4096];
    const char *vp = fx_test_data_path("vocab/ggml-vocab-llama-spm.gguf");
    snprintf(vdefault, sizeof vdefault, "%s", vp);
    const char *vpath = pos[0] ? pos[0] : vdefault;
    char gdefault[4096];
    const char *gp = fx_test_data_path("grammars/json.gbnf");
    snprintf(gdefault, sizeof gdefault, "%s", gp);
    const char *gpath = schema ? schema : pos[1] ? pos[1] : gdefault;
    int n_tokens = pos[2] ? atoi(pos[2]) : 4000;
    if (n_tokens < 10) n_tokens = 10;

    fx_alloc alloc;
    fx_alloc_init(&alloc, NULL);
    fx_error err;
    fx_gguf *gguf;
    struct fx_vocab *vocab;
    if (fx_gguf_open(vpath, &alloc, &gguf, &err) != FX_OK ||
        fx_vocab_load(gguf, &alloc, NULL, &vocab, &err) != FX_OK) {
        fprintf(stderr, "bench_grammar: %s: %s\n", vpath, err.message);
        return 1;
    }
    size_t glen;
    char *gtext = fx_test_read_file(gpath, &glen);
    if (gtext && schema) {
        char *gbnf = NULL;
        size_t gbnf_len = 0;
        if (fx_json_schema_to_gbnf(&alloc, gtext, glen, &gbnf, &gbnf_len, &err) != FX_OK) {
            fprintf(stderr, "bench_grammar: %s: %s\n", gpath, err.message);
            return 1;
        }
        free(gtext);
        gtext = malloc(gbnf_len + 1);
        if (gtext) memcpy(gtext, gbnf, gbnf_len + 1);
        glen = gbnf_len;
        fx_free(&alloc, gbnf);
    }
    fx_grammar *g;
    if (!gtext || fx_grammar_compile(&alloc, gtext, glen, NULL, &g, &err) != FX_OK) {
        fprintf(stderr, "bench_grammar: %s: %s\n", gpath, gtext ? err.message : "unreadable");
        return 1;
    }
    if (getenv("FX_BENCH_PRINT_GBNF")) fputs(gtext, stderr);
    double t0 = now();
    fx_sample_ctx ctx;
    if (fx_sample_ctx_init(&ctx, &alloc, vocab, 0, &err) != FX_OK ||
        fx_sample_ctx_grammar(&ctx, &alloc, &err) != FX_OK) {
        fprintf(stderr, "bench_grammar: %s\n", err.message);
        return 1;
    }
    double t_trie = now() - t0;
    uint32_t nv = fx_vocab_n_tokens(vocab);
    float *logits = malloc(nv * sizeof *logits);
    fx_candidate *scratch = malloc(nv * sizeof *scratch);
    double *times = malloc((size_t)n_tokens * sizeof *times);
    double *cpu = malloc((size_t)n_tokens * sizeof *cpu);
    fx_rng noise;
    fx_rng_seed(&noise, 12345);

    fx_sampling cfg;
    fx_sampling_default(&cfg);
    cfg.temperature = 1.0f;
    cfg.top_k = 64;
    fx_sampler s;
    uint64_t allowed_sum = 0;
    int restarts = 0, done = 0;
    while (done < n_tokens) {
        cfg.seed = (uint64_t)restarts;
        fx_sampler_init(&s, &cfg, &err);
        if (fx_sampler_set_grammar(&s, &alloc, g, &err) != FX_OK) {
            fprintf(stderr, "bench_grammar: %s\n", err.message);
            return 1;
        }
        restarts++;
        /* A text of up to 300 tokens per restart, random logits. */
        for (int k = 0; k < 300 && done < n_tokens; k++) {
            for (uint32_t i = 0; i < nv; i++)
                logits[i] = (float)(fx_rng_uniform(&noise) * 8.0);
            double a = now(), ac = cpu_now();
            if (fx_gstate_mask(&s.grammar, ctx.trie, &ctx.work, &err) != FX_OK) break;
            cpu[done] = cpu_now() - ac;
            times[done++] = now() - a;
            allowed_sum += ctx.work.n_allowed;
            int32_t tok;
            int eog;
            if (fx_sampler_next(&s, &ctx, logits, nv, NULL, 0, scratch, &tok, &eog,
                                &err) != FX_OK ||
                eog)
                break;
        }
        fx_sampler_free(&s, &alloc);
    }
    qsort(times, (size_t)done, sizeof *times, by_double);
    qsort(cpu, (size_t)done, sizeof *cpu, by_double);
    double sum = 0;
    for (int i = 0; i < done; i++) sum += times[i];
    printf("grammar mask: %s, %u tokens (%u trie nodes, built in %.1f ms)\n",
           gpath, nv, ctx.trie->n_nodes, t_trie * 1e3);
    printf("  %d masks over %d texts, %.0f tokens allowed on average\n", done,
           restarts, (double)allowed_sum / done);
    printf("  wall: median %.1f us   p99 %.1f us   mean %.1f us   max %.1f us\n",
           times[done / 2] * 1e6, times[(size_t)(done * 0.99)] * 1e6,
           sum / done * 1e6, times[done - 1] * 1e6);
    printf("  cpu:  median %.1f us   p99 %.1f us   max %.1f us\n",
           cpu[done / 2] * 1e6, cpu[(size_t)(done * 0.99)] * 1e6,
           cpu[done - 1] * 1e6);
    printf("  (published: llama.cpp ~14.5 ms average, llguidance ~47 us)\n");
    free(times);
    free(cpu);
    free(scratch);
    free(logits);
    fx_sample_ctx_free(&ctx, &alloc);
    fx_grammar_free(g);
    free(gtext);
    fx_vocab_free(vocab);
    fx_gguf_close(gguf);
    return 0;
}
