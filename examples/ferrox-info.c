/*
 * ferrox-info MODEL.gguf [--check]
 *
 * Prints a GGUF file's metadata (arrays summarized) and tensor table. By
 * default the file is read as metadata plus vocabulary, so any GGUF can be
 * inspected; --check loads it as a model, which also verifies that the
 * architecture is supported and every tensor has the shape it needs.
 * On error: one line on stderr and exit status 1 (2 for a usage error).
 */
#include <ferrox.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static int usage(FILE *f) {
    fprintf(f,
            "usage: ferrox-info MODEL.gguf [--check]\n"
            "Prints the metadata and tensor table of any GGUF file.\n"
            "  --check  load it as a model: checks that the architecture is\n"
            "           supported and every tensor has the shape it needs\n");
    return f == stdout ? CLI_OK : CLI_USAGE;
}

/* Elements over all tensors, from the tensor table: the parameter count
 * without loading the weights (a vocabulary-only load reports 0). */
static uint64_t count_params(const fx_model *model) {
    uint64_t n = 0;
    for (uint64_t i = 0; i < fx_model_tensor_count(model); i++) {
        fx_tensor_info t;
        fx_tensor_info_init(&t);
        if (fx_model_tensor_get(model, i, &t) != FX_OK) continue;
        uint64_t e = 1;
        for (uint32_t d = 0; d < t.n_dims; d++) e *= t.dims[d];
        n += e;
    }
    return n;
}

static void print_metadata(const fx_model *model) {
    uint64_t n = fx_model_meta_count(model);
    printf("metadata: %llu keys\n", (unsigned long long)n);
    char small[256];
    for (uint64_t i = 0; i < n; i++) {
        size_t needed = 0;
        const char *key = fx_model_meta_key(model, i);
        fx_status st = fx_model_meta_format(model, i, small, sizeof small,
                                            &needed);
        if (st == FX_ERR_BUFFER_TOO_SMALL) {
            char *big = malloc(needed);
            if (big && fx_model_meta_format(model, i, big, needed, NULL) == FX_OK)
                printf("  %-40s %s\n", key, big);
            free(big);
        } else {
            printf("  %-40s %s\n", key, small);
        }
    }
}

static void print_tensors(const fx_model *model) {
    uint64_t n = fx_model_tensor_count(model);
    printf("tensors: %llu\n", (unsigned long long)n);
    for (uint64_t i = 0; i < n; i++) {
        fx_tensor_info t;
        fx_tensor_info_init(&t);
        if (fx_model_tensor_get(model, i, &t) != FX_OK) continue;
        char shape[96];
        int len = snprintf(shape, sizeof shape, "[");
        for (uint32_t d = 0; d < t.n_dims; d++)
            len += snprintf(shape + len, sizeof shape - (size_t)len, "%s%llu",
                            d ? ", " : "", (unsigned long long)t.dims[d]);
        snprintf(shape + len, sizeof shape - (size_t)len, "]");
        printf("  %-32s %-8s %-24s offset %-12llu %llu bytes\n", t.name,
               t.type_name, shape, (unsigned long long)t.offset,
               (unsigned long long)t.n_bytes);
    }
}

int main(int argc, char **argv) {
    const char *path = NULL;
    int check = 0;
    cli c;
    cli_init(&c, "ferrox-info", argc, argv);
    while (cli_next(&c)) {
        if (cli_is_help(&c)) return usage(stdout);
        else if (cli_is(&c, "--check")) check = 1;
        else if (c.arg[0] != '-' && !path) path = c.arg;
        else return cli_unknown(&c);
    }
    if (!path) return cli_usage_error(&c, "no model file given");

    fx_model_params params;
    fx_model_params_init(&params);
    if (!check) params.flags |= FX_MODEL_VOCAB_ONLY;
    fx_model *model = NULL;
    char err[512];
    fx_status st = fx_model_load(path, &params, &model, err, sizeof err);
    if (st != FX_OK) return cli_fail("ferrox-info", path, fx_status_str(st), err);
    fx_model_info info;
    fx_model_info_init(&info);
    fx_model_get_info(model, &info);
    printf("file: %s (%llu bytes, GGUF v%u)\n", path,
           (unsigned long long)info.file_size, info.gguf_version);
    printf("architecture: %s%s\n", info.arch,
           check ? " (checked: loads as a model)"
                 : " (not checked; --check loads it as a model)");
    if (info.name[0]) printf("name: %s\n", info.name);
    printf("vocab %u, context %u, embedding %u, layers %u, heads %u, "
           "kv heads %u, ffn %u, rope dims %u, rope base %g, rms eps %g, ",
           info.n_vocab, info.n_ctx_train, info.n_embd, info.n_layer,
           info.n_head, info.n_head_kv, info.n_ff, info.n_rot,
           (double)info.rope_freq_base, (double)info.rms_norm_eps);
    const uint64_t n_params = check ? info.n_params : count_params(model);
    if (n_params) printf("params %llu\n", (unsigned long long)n_params);
    else printf("no tensors (a vocabulary-only file)\n");
    print_metadata(model);
    print_tensors(model);
    fx_model_free(model);
    return 0;
}
