/*
 * llamacpp-greedy: greedy decoding with a llama.cpp build, for
 * tools/greedy-vs-llamacpp.sh. Not part of ferrox's build: the script
 * compiles it against the llama.cpp tree it is given (a reference, never
 * a dependency).
 *
 *   llamacpp-greedy MODEL N_TOKENS ID ID ...
 *
 * Feeds the prompt token ids as given (no tokenizer, no BOS added), then
 * takes the arg-max token N_TOKENS times with an F32 KV cache (F16 with
 * FX_KV_F16=1), one thread per core given by FX_THREADS (default 2).
 * Prints one line per step:
 *   <step> <token id> <top-1 logit - top-2 logit>
 * The margin says how close a step was to a tie, which decides whether a
 * difference from ferrox at that step is rounding or a bug.
 *
 * FX_LLAMA_OLD_API: the API of ik_llama.cpp (a fork of llama.cpp from
 * before llama.cpp's backend registry and positionless batches).
 */
#include <llama.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int fail(const char *what) {
    fprintf(stderr, "llamacpp-greedy: %s\n", what);
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 4) return fail("usage: llamacpp-greedy MODEL N_TOKENS ID...");
    const int n_gen = atoi(argv[2]);
    const int n_prompt = argc - 3;
    llama_token *ids = malloc(sizeof *ids * (size_t)(n_prompt + 1));
    if (!ids || n_gen <= 0) return fail("bad arguments");
    for (int i = 0; i < n_prompt; i++) ids[i] = atoi(argv[3 + i]);
    const char *th = getenv("FX_THREADS");
    const int threads = th ? atoi(th) : 2;

#ifndef FX_LLAMA_OLD_API
    ggml_backend_load_all();
#endif
    struct llama_model_params mp = llama_model_default_params();
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) return fail("cannot load the model");
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));

    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)(n_prompt + n_gen + 8);
    cp.n_batch = cp.n_ctx;
    cp.n_threads = threads;
    cp.n_threads_batch = threads;
    const char *f16 = getenv("FX_KV_F16");
    const int kv_f16 = f16 && f16[0] == '1';
    cp.type_k = kv_f16 ? GGML_TYPE_F16 : GGML_TYPE_F32;
    cp.type_v = kv_f16 ? GGML_TYPE_F16 : GGML_TYPE_F32;
#ifdef FX_LLAMA_OLD_API
    /* Its attention takes an F32 V cache only in flash attention, which
     * has no F32 path: F16 values, the closest it runs. */
    cp.flash_attn = false;
    cp.type_v = GGML_TYPE_F16;
#else
    cp.no_perf = true;
#endif
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) return fail("cannot create a context");

#ifdef FX_LLAMA_OLD_API
    struct llama_batch batch = llama_batch_get_one(ids, n_prompt, 0, 0);
#else
    struct llama_batch batch = llama_batch_get_one(ids, n_prompt);
#endif
    for (int step = 0; step < n_gen; step++) {
        if (llama_decode(ctx, batch) != 0) return fail("llama_decode failed");
        const float *logits = llama_get_logits_ith(ctx, -1);
        int best = 0;
        for (int v = 1; v < n_vocab; v++)
            if (logits[v] > logits[best]) best = v;
        float second = -INFINITY;
        for (int v = 0; v < n_vocab; v++)
            if (v != best && logits[v] > second) second = logits[v];
        printf("%d %d %.6f\n", step, best, (double)(logits[best] - second));
        ids[n_prompt] = best;
#ifdef FX_LLAMA_OLD_API
        batch = llama_batch_get_one(&ids[n_prompt], 1, n_prompt + step, 0);
#else
        batch = llama_batch_get_one(&ids[n_prompt], 1);
#endif
    }
    llama_free(ctx);
#ifdef FX_LLAMA_OLD_API
    llama_free_model(model);
#else
    llama_model_free(model);
#endif
    free(ids);
    return 0;
}
