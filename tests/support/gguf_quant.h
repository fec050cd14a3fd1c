/*
 * gguf_quant: writes a GGUF model with its weights converted to one of
 * llama-quantize's presets (quant_rules.h), as llama-quantize writes it:
 * every metadata entry kept (general.file_type and
 * general.quantization_version set, split keys dropped), the tensors in
 * llama.cpp's order, each tensor's type as quant_rules chooses it. The
 * engine of ferrox-quantize and of ferrox-mkmodel --type, and the way
 * tests make quantized models. Links the static library (the
 * quantizers are internal).
 */
#ifndef FX_TEST_GGUF_QUANT_H
#define FX_TEST_GGUF_QUANT_H

#include <stdio.h>

#include "gguf/gguf.h"
#include "quant_rules.h"

typedef struct gq_options {
    const qr_preset *preset;
    int pure;               /* every quantized tensor gets the preset's type */
    unsigned threads;       /* 0 or 1: the calling thread only */
    /* Optional: called before each tensor is converted or copied (index
     * from 0 in the output's order, count, the input tensor, its new
     * type). */
    void (*progress)(size_t index, size_t count, const fx_gguf_tensor *t,
                     uint32_t new_type, void *user);
    void *user;
} gq_options;

/* What gq_quantize did. */
typedef struct gq_result {
    uint64_t bytes_in, bytes_out;  /* tensor data */
    size_t n_converted, n_fallback;
} gq_result;

/* Writes the converted model of `in` to f (from its current position,
 * which should be 0). 0, or -1 with a one-line message in err; f's
 * contents are then unspecified. res may be NULL. */
int gq_quantize(const fx_gguf *in, const gq_options *opt, FILE *f,
                gq_result *res, char *err, size_t err_size);

/* The same into a file at path (written in place, not atomically). */
int gq_quantize_file(const fx_gguf *in, const gq_options *opt,
                     const char *path, char *err, size_t err_size);

/* n floats of x (whole rows of `type`'s blocks) converted to `type`, one
 * of quant_rules' types, into out: what gq_quantize writes for them.
 * Returns the bytes written, 0 for a type it does not make. The shape of
 * gw_model_spec's quantize hook (user unused). */
size_t gq_encode(uint32_t type, const float *x, size_t n, void *out, void *user);

#endif /* FX_TEST_GGUF_QUANT_H */
