/*
 * ferrox-tokenize: print token ids.
 *
 *   ferrox-tokenize --model M.gguf (--text T | --file F) [--cases]
 *                   [--add-special] [--parse-special]
 *
 * Ids are printed space-separated on one line. With --cases the file is a
 * llama.cpp tokenizer test input (.inp): cases each followed by a line
 * "__ggml_vocab_test__"; one line is printed per case in the .out format
 * (every id preceded by a space), so that
 *   ferrox-tokenize --model X.gguf --file X.gguf.inp --cases | diff - X.gguf.out
 * checks a vocabulary against llama.cpp's expectations.
 * Uses only the public API (ferrox.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ferrox.h"

static const char SEP[] = "\n__ggml_vocab_test__\n";

static int usage(FILE *f) {
    fprintf(f,
            "usage: ferrox-tokenize --model M.gguf (--text T | --file F) [--cases]\n"
            "                       [--add-special] [--parse-special]\n"
            "  --cases          F is a llama.cpp tokenizer test input (.inp):\n"
            "                   one line of ids per case, in the .out format\n"
            "  --add-special    add BOS/EOS as the vocabulary says\n"
            "  --parse-special  text like <s> becomes the special token\n");
    return f == stdout ? CLI_OK : CLI_USAGE;
}

/* Tokenizes one text and prints its ids; lead is printed before each id. */
static int print_ids(fx_model *model, const char *text, size_t len, uint32_t flags, const char *lead,
                     int32_t **buf, size_t *cap) {
    size_t n = 0;
    fx_status st = fx_tokenize(model, text, len, flags, *buf, *cap, &n);
    if (st == FX_ERR_BUFFER_TOO_SMALL) {
        int32_t *nb = realloc(*buf, (n ? n : 1) * sizeof **buf);
        if (!nb) {
            fprintf(stderr, "ferrox-tokenize: out of memory\n");
            return 1;
        }
        *buf = nb;
        *cap = n;
        st = fx_tokenize(model, text, len, flags, *buf, *cap, &n);
    }
    if (st != FX_OK) {
        return cli_fail("ferrox-tokenize", NULL, fx_status_str(st), fx_model_errmsg(model));
    }
    for (size_t i = 0; i < n; i++) printf("%s%d", i == 0 && lead[0] == '\0' ? "" : (i ? " " : lead), (*buf)[i]);
    printf("\n");
    return 0;
}

int main(int argc, char **argv) {
    const char *model_path = NULL, *text = NULL, *file = NULL;
    int cases = 0;
    uint32_t flags = 0;
    cli c;
    cli_init(&c, "ferrox-tokenize", argc, argv);
    while (cli_next(&c)) {
        const char **value = NULL;
        if (cli_is_help(&c)) return usage(stdout);
        else if (cli_is(&c, "--model")) value = &model_path;
        else if (cli_is(&c, "--text")) value = &text;
        else if (cli_is(&c, "--file")) value = &file;
        else if (cli_is(&c, "--cases")) cases = 1;
        else if (cli_is(&c, "--add-special")) flags |= FX_TOKENIZE_ADD_SPECIAL;
        else if (cli_is(&c, "--parse-special")) flags |= FX_TOKENIZE_PARSE_SPECIAL;
        else return cli_unknown(&c);
        if (value && !(*value = cli_value(&c))) return CLI_USAGE;
    }
    if (!model_path) return cli_usage_error(&c, "--model is required");
    if (!text == !file) return cli_usage_error(&c, "give one of --text and --file");
    if (cases && !file) return cli_usage_error(&c, "--cases needs --file");
    fx_model_params params;
    fx_model_params_init(&params);
    params.flags = FX_MODEL_VOCAB_ONLY;
    fx_model *model = NULL;
    char err[512];
    fx_status st = fx_model_load(model_path, &params, &model, err, sizeof err);
    if (st != FX_OK) return cli_fail("ferrox-tokenize", model_path, fx_status_str(st), err);
    size_t len = 0;
    char *data = NULL;
    if (file) {
        data = cli_read_file(file, &len);
        if (!data) {
            fprintf(stderr, "ferrox-tokenize: cannot read %s\n", file);
            fx_model_free(model);
            return 1;
        }
    } else {
        len = strlen(text);
    }
    const char *src = file ? data : text;
    int32_t *ids = NULL;
    size_t cap = 0;
    int rc = 0;
    if (!cases) {
        rc = print_ids(model, src, len, flags, "", &ids, &cap);
    } else {
        /* every case is followed by SEP; text after the last SEP (normally
         * none) is one more case */
        size_t pos = 0, sep_len = sizeof SEP - 1;
        while (pos < len && rc == 0) {
            size_t end = pos;
            while (end + sep_len <= len && memcmp(src + end, SEP, sep_len) != 0) end++;
            if (end + sep_len > len) end = len;
            rc = print_ids(model, src + pos, end - pos, flags, " ", &ids, &cap);
            pos = end + sep_len;
        }
    }
    free(ids);
    free(data);
    fx_model_free(model);
    return rc;
}
