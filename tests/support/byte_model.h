/*
 * A small synthetic Llama model whose SentencePiece vocabulary has all 256
 * byte tokens, multi-byte pieces and a few special tokens, so that what it
 * generates exercises UTF-8 split across tokens, invalid bytes, stop
 * strings and grammars through the public API. Used by the outside tests
 * of the reliability contract (test_api_statemachine, test_grammar_limits,
 * test_resource_limits).
 */
#ifndef FX_TEST_BYTE_MODEL_H
#define FX_TEST_BYTE_MODEL_H

#include <stdint.h>

#include <ferrox.h>

/* Token ids of the vocabulary fx_test_write_byte_model writes. */
enum {
    FX_BM_UNK = 0,
    FX_BM_BOS = 1,
    FX_BM_EOS = 2,
    FX_BM_BYTE0 = 3 /* <0x00> .. <0xFF> are 3 .. 258; pieces follow */
};

/* Writes the model (dim 32, 1 layer, weights from `seed`) to path;
 * returns 0 on success. */
int fx_test_write_byte_model(const char *path, uint32_t n_ctx, uint64_t seed);

/* Writes the model to path and loads it with default parameters into
 * *model; returns 0 on success (a failure is printed). */
int fx_test_load_byte_model(const char *path, uint32_t n_ctx, uint64_t seed,
                            fx_model **model);

/* The vocabulary size of that model. */
uint32_t fx_test_byte_model_vocab(void);

#endif /* FX_TEST_BYTE_MODEL_H */
