/*
 * Shared pieces of the fuzz targets (tests/fuzz/README.md).
 *
 * Every target defines the two libFuzzer entry points below. Built with
 * FERROX_FUZZ=ON they link against libFuzzer; otherwise replay_main.c
 * supplies main() and feeds every file of the given corpus directories (or
 * files) to LLVMFuzzerTestOneInput, so CI can replay the seed corpora with
 * the normal compiler, with and without ASan.
 *
 * A target reports a finding with FX_FUZZ_CHECK, which prints the failed
 * condition and traps, as libFuzzer expects.
 */
#ifndef FX_FUZZ_COMMON_H
#define FX_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/core.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FX_FUZZ_CHECK(cond)                                                   \
    do {                                                                      \
        if (!(cond)) {                                                        \
            fprintf(stderr, "%s:%d: fuzz check failed: %s\n", __FILE__,       \
                    __LINE__, #cond);                                         \
            fflush(stderr);                                                   \
            __builtin_trap();                                                 \
        }                                                                     \
    } while (0)

/* Reads input bytes one at a time; past the end every read is 0. */
typedef struct fz_in {
    const uint8_t *p;
    size_t n;
} fz_in;

static inline uint8_t fz_u8(fz_in *in) {
    if (in->n == 0) return 0;
    in->n--;
    return *in->p++;
}

static inline uint32_t fz_u16(fz_in *in) {
    uint32_t lo = fz_u8(in);
    return lo | ((uint32_t)fz_u8(in) << 8);
}

/* Takes up to want bytes (fewer when the input runs out). */
static inline const uint8_t *fz_take(fz_in *in, size_t want, size_t *got) {
    const uint8_t *p = in->p;
    if (want > in->n) want = in->n;
    in->p += want;
    in->n -= want;
    *got = want;
    return p;
}

/* A tiny deterministic generator for chunk sizes. */
static inline uint64_t fz_rand(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Directory holding ggml-vocab-*.gguf: $FX_FUZZ_VOCAB_DIR, else
 * FX_TEST_DATA_DIR/vocab. */
const char *fz_vocab_dir(void);

/* A tiny SentencePiece vocabulary built in memory (unk, s, /s, the 256
 * byte tokens, some words and a control token), for when the vocabulary
 * directory is not there. The GGUF buffer is kept alive for the process.
 * NULL on failure. */
struct fx_vocab *fz_tiny_spm_vocab(const fx_alloc *alloc);

#endif /* FX_FUZZ_COMMON_H */
