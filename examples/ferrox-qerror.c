/*
 * ferrox-qerror: how far a quantized model's weights are from the model
 * they were made from.
 *
 *   ferrox-qerror REF.gguf Q.gguf
 *
 * For every weight matrix (two or more dimensions) of REF that Q has
 * too, both are decoded to f32 and compared: RMSE = sqrt(mean (q - r)^2)
 * and, relative to the reference, rel = RMSE / sqrt(mean r^2). One line
 * per tensor on stdout, then the mean of rel over the tensors and the
 * whole-model ratio sqrt(sum (q - r)^2 / sum r^2). Made to compare two
 * quantizers on the same input (ferrox-quantize's and llama-quantize's
 * outputs of one F32 file): the same types, so the same tensors count.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "quant_rules.h"

static const char *tool = "ferrox-qerror";

static int usage(FILE *f) {
    fprintf(f, "usage: ferrox-qerror REF.gguf Q.gguf\n"
               "Per weight matrix: the RMSE of Q's weights against REF's and\n"
               "the RMSE relative to REF's RMS; then their mean.\n");
    return f == stdout ? CLI_OK : CLI_USAGE;
}

typedef struct err_sum {
    double diff2, ref2;
} err_sum;

/* Sums over the rows of both tensors; 0, or -1 after saying why. */
static int compare(const fx_gguf_tensor *r, const fx_gguf_tensor *q,
                   err_sum *s) {
    const size_t k = (size_t)r->ne[0];
    const size_t rows = (size_t)(r->n_elements / r->ne[0]);
    size_t rb = fx_wtype_row_bytes((fx_wtype)r->type, k);
    size_t qb = fx_wtype_row_bytes((fx_wtype)q->type, k);
    if (rb == 0 || qb == 0) {
        fprintf(stderr, "%s: %s: cannot decode %s or %s rows of %zu\n", tool,
                r->name, fx_ggml_type_name(r->type), fx_ggml_type_name(q->type), k);
        return -1;
    }
    float *x = malloc(k * sizeof *x), *y = malloc(k * sizeof *y);
    if (!x || !y) {
        free(x);
        free(y);
        fprintf(stderr, "%s: out of memory\n", tool);
        return -1;
    }
    s->diff2 = s->ref2 = 0.0;
    for (size_t i = 0; i < rows; i++) {
        if (fx_wtype_row_to_f32(x, r->data + i * rb, (fx_wtype)r->type, k) != FX_OK ||
            fx_wtype_row_to_f32(y, q->data + i * qb, (fx_wtype)q->type, k) != FX_OK) {
            fprintf(stderr, "%s: %s: cannot decode row %zu\n", tool, r->name, i);
            free(x);
            free(y);
            return -1;
        }
        for (size_t j = 0; j < k; j++) {
            double d = (double)y[j] - (double)x[j];
            s->diff2 += d * d;
            s->ref2 += (double)x[j] * (double)x[j];
        }
    }
    free(x);
    free(y);
    return 0;
}

static const char *type_name(uint32_t t) {
    const char *n = qr_type_name(t);
    return strcmp(n, "?") != 0 ? n : fx_ggml_type_name(t);
}

static int open_model(const char *path, fx_gguf **g) {
    fx_alloc alloc;
    fx_alloc_init(&alloc, NULL);
    fx_error err;
    fx_status st = fx_gguf_open(path, &alloc, g, &err);
    if (st != FX_OK) return cli_fail(tool, path, fx_status_str(st), err.message);
    return 0;
}

int main(int argc, char **argv) {
    const char *pos[2] = {NULL, NULL};
    size_t n_pos = 0;
    cli c;
    cli_init(&c, tool, argc, argv);
    while (cli_next(&c)) {
        if (cli_is_help(&c)) return usage(stdout);
        else if (c.arg[0] != '-' && n_pos < 2) pos[n_pos++] = c.arg;
        else return cli_unknown(&c);
    }
    if (n_pos < 2) return cli_usage_error(&c, "REF.gguf and Q.gguf are required");
    fx_gguf *ref = NULL, *q = NULL;
    if (open_model(pos[0], &ref) != 0) return CLI_FAILED;
    if (open_model(pos[1], &q) != 0) {
        fx_gguf_close(ref);
        return CLI_FAILED;
    }
    int rc = CLI_OK;
    size_t n = 0;
    double sum_rel = 0.0, all_diff2 = 0.0, all_ref2 = 0.0;
    printf("%-36s %-7s %-7s %12s %10s\n", "tensor", "ref", "type", "rmse", "rel");
    for (uint64_t i = 0; i < ref->n_tensors && rc == CLI_OK; i++) {
        const fx_gguf_tensor *r = &ref->tensors[i];
        if (qr_n_dims(r->ne) < 2) continue;
        const fx_gguf_tensor *t = fx_gguf_find_tensor(q, r->name);
        if (!t) continue;
        if (memcmp(t->ne, r->ne, sizeof r->ne) != 0) {
            fprintf(stderr, "%s: %s has another shape in %s\n", tool, r->name, pos[1]);
            rc = CLI_FAILED;
            break;
        }
        err_sum s;
        if (compare(r, t, &s) != 0) {
            rc = CLI_FAILED;
            break;
        }
        double rmse = sqrt(s.diff2 / (double)r->n_elements);
        double rel = s.ref2 > 0.0 ? sqrt(s.diff2 / s.ref2) : 0.0;
        printf("%-36s %-7s %-7s %12.6g %10.6f\n", r->name,
               type_name(r->type), type_name(t->type), rmse, rel);
        sum_rel += rel;
        all_diff2 += s.diff2;
        all_ref2 += s.ref2;
        n++;
    }
    if (rc == CLI_OK && n == 0) {
        fprintf(stderr, "%s: no weight matrix of %s is in %s\n", tool, pos[0], pos[1]);
        rc = CLI_FAILED;
    }
    if (rc == CLI_OK)
        printf("mean rel %.6f over %zu tensors; whole model rel %.6f\n",
               sum_rel / (double)n, n,
               all_ref2 > 0.0 ? sqrt(all_diff2 / all_ref2) : 0.0);
    fx_gguf_close(ref);
    fx_gguf_close(q);
    return rc;
}
