/*
 * ferrox-quantize: converts an F32, F16 or BF16 GGUF model to a quantized
 * one, choosing each tensor's type as llama.cpp's llama-quantize does.
 *
 *   ferrox-quantize IN.gguf OUT.gguf TYPE [--pure] [--threads N]
 *
 * TYPE is one of llama-quantize's names, in any case: Q4_0 Q4_1 Q5_0 Q5_1
 * Q8_0 Q2_K Q3_K_S Q3_K_M Q3_K_L Q4_K_S Q4_K_M Q5_K_S Q5_K_M Q6_K IQ4_NL
 * IQ4_XS F16 BF16 F32, and the aliases Q3_K, Q4_K, Q5_K (the _M mixes).
 * A preset gives most weights its type and some more bits (the output
 * matrix Q6_K, attn_v and ffn_down by layer; quant_rules.c); --pure gives
 * every quantized weight the one type. Norms and other 1-D tensors are
 * copied. Every metadata entry is kept; general.file_type and
 * general.quantization_version are set.
 *
 * The output is written to a temporary file next to OUT and renamed over
 * it at the end, so OUT is either the old file or the whole new one.
 */
#define _POSIX_C_SOURCE 200809L /* mkstemp, fchmod, fdopen, fsync */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "gguf/gguf.h"
#include "gguf_quant.h"

static const char *tool = "ferrox-quantize";

static int usage(FILE *f) {
    size_t n;
    const qr_preset *p = qr_presets(&n);
    fprintf(f,
            "usage: ferrox-quantize IN.gguf OUT.gguf TYPE [--pure] [--threads N]\n"
            "Converts an f32, f16 or bf16 model; each tensor gets the type\n"
            "llama-quantize gives it for TYPE (any case):\n ");
    for (size_t i = 0; i < n; i++) fprintf(f, " %s", p[i].name);
    fprintf(f, "\n  (Q3_K, Q4_K and Q5_K are Q3_K_M, Q4_K_M and Q5_K_M)\n"
               "  --pure       every quantized tensor gets TYPE itself\n"
               "  --threads N  convert on N threads (default 4)\n");
    return f == stdout ? CLI_OK : CLI_USAGE;
}

/* ggml's spelling ("q4_K") for the types a preset makes. */
static const char *type_name(uint32_t t) {
    const char *n = qr_type_name(t);
    return strcmp(n, "?") != 0 ? n : fx_ggml_type_name(t);
}

static void progress(size_t i, size_t n, const fx_gguf_tensor *t,
                     uint32_t type, void *user) {
    (void)user;
    char shape[64];
    if (t->n_dims >= 2)
        snprintf(shape, sizeof shape, "%llu x %llu", (unsigned long long)t->ne[0],
                 (unsigned long long)(t->n_elements / t->ne[0]));
    else
        snprintf(shape, sizeof shape, "%llu", (unsigned long long)t->n_elements);
    fprintf(stderr, "%s: [%zu/%zu] %s (%s) %s -> %s\n", tool, i + 1, n, t->name,
            shape, type_name(t->type), type_name(type));
}

/* A temporary file in OUT's directory, so the rename stays on one file
 * system; its mode is what creating OUT would give. */
static FILE *open_temp(const char *out, char **tmp_path) {
    size_t n = strlen(out);
    char *p = malloc(n + 16);
    if (!p) return NULL;
    memcpy(p, out, n);
    memcpy(p + n, ".tmp.XXXXXX", 12);
    int fd = mkstemp(p);
    if (fd < 0) {
        free(p);
        return NULL;
    }
    mode_t mask = umask(0);
    umask(mask);
    (void)fchmod(fd, 0666 & ~mask);
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        close(fd);
        unlink(p);
        free(p);
        return NULL;
    }
    *tmp_path = p;
    return f;
}

int main(int argc, char **argv) {
    const char *pos[3] = {NULL, NULL, NULL};
    size_t n_pos = 0;
    int pure = 0;
    uint32_t threads = 4;
    cli c;
    cli_init(&c, tool, argc, argv);
    while (cli_next(&c)) {
        if (cli_is_help(&c)) return usage(stdout);
        else if (cli_is(&c, "--pure")) pure = 1;
        else if (cli_is(&c, "--threads")) {
            if (cli_u32(&c, 1, 256, &threads)) return CLI_USAGE;
        } else if (c.arg[0] != '-' && n_pos < 3) pos[n_pos++] = c.arg;
        else return cli_unknown(&c);
    }
    if (n_pos < 3) return cli_usage_error(&c, "IN.gguf, OUT.gguf and TYPE are required");
    const qr_preset *preset = qr_find_preset(pos[2]);
    if (!preset)
        return cli_usage_error(&c, "TYPE: '%s' is not a type ferrox-quantize "
                                   "makes (see --help)", pos[2]);

    fx_alloc alloc;
    fx_alloc_init(&alloc, NULL);
    fx_error err;
    fx_gguf *in = NULL;
    fx_status st = fx_gguf_open(pos[0], &alloc, &in, &err);
    if (st != FX_OK) return cli_fail(tool, pos[0], fx_status_str(st), err.message);

    char *tmp = NULL;
    FILE *f = open_temp(pos[1], &tmp);
    if (!f) {
        fprintf(stderr, "%s: %s: cannot create a file next to it: %s\n", tool,
                pos[1], strerror(errno));
        fx_gguf_close(in);
        return CLI_FAILED;
    }
    fprintf(stderr, "%s: %s -> %s as %s%s, %u threads\n", tool, pos[0], pos[1],
            preset->name, pure ? " (pure)" : "", threads);
    gq_options opt = {preset, pure, threads, progress, NULL};
    gq_result res;
    char msg[512];
    int rc = gq_quantize(in, &opt, f, &res, msg, sizeof msg);
    if (rc == 0 && fsync(fileno(f)) != 0) {
        snprintf(msg, sizeof msg, "write failed: %s", strerror(errno));
        rc = -1;
    }
    if (fclose(f) != 0 && rc == 0) {
        snprintf(msg, sizeof msg, "write failed: %s", strerror(errno));
        rc = -1;
    }
    fx_gguf_close(in);
    if (rc == 0 && rename(tmp, pos[1]) != 0) {
        snprintf(msg, sizeof msg, "cannot rename %s: %s", tmp, strerror(errno));
        rc = -1;
    }
    if (rc != 0) {
        unlink(tmp);
        free(tmp);
        fprintf(stderr, "%s: %s: %s\n", tool, pos[0], msg);
        return CLI_FAILED;
    }
    free(tmp);
    fprintf(stderr, "%s: wrote %s: %zu tensors converted (%zu fallback), "
                    "%.2f MiB -> %.2f MiB\n", tool, pos[1], res.n_converted,
            res.n_fallback, (double)res.bytes_in / 1048576.0,
            (double)res.bytes_out / 1048576.0);
    return CLI_OK;
}
