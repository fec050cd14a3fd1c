/* Batcher helpers of the issue 36 tests (reliability_batch.c). */
#ifndef FX_TEST_RELIABILITY_BATCH_H
#define FX_TEST_RELIABILITY_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include <ferrox.h>

/* One row's outcome, collected from its events. */
typedef struct outcome {
    int done;
    fx_finish_reason finish;
    fx_status status;
    int32_t ids[64];
    size_t n_ids;
    char text[512];
    size_t n_text;
} outcome;

/* Loads a model or fails the test. */
fx_model *rb_load_model(const char *path);
/* The parameters of make_batcher, for a caller to adjust. */
void rb_params(fx_batcher_params *p, uint32_t max_rows);
/* A batcher with p, or fails the test. */
fx_batcher *rb_create(fx_model *m, const fx_batcher_params *p);
/* A batcher of max_rows rows: 128 positions, steps of 32, blocks of 8. */
fx_batcher *make_batcher(fx_model *m, uint32_t max_rows);
/* A greedy request over 8 prompt tokens (salted), 6 tokens, EOS ignored. */
void plain_request(fx_request *r, int32_t prompt[8], int salt);
/* Adds an event to the outcome its user pointer names (if any). */
void collect(const fx_event *ev);
/* Steps b until nothing is pending, handing every event to collect. */
void drain(fx_batcher *b);

#endif
