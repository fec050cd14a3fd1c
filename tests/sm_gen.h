/*
 * test_api_statemachine's two halves that do not drive batchers: the
 * generator of requests and leases (each with the set of statuses the
 * header allows for it, computed before the call), and the checks of one
 * row's events against its request.
 */
#ifndef FX_TEST_SM_GEN_H
#define FX_TEST_SM_GEN_H

#include <stddef.h>
#include <stdint.h>

#include <ferrox.h>

typedef struct sm_rng {
    uint64_t s;
} sm_rng;

void sm_seed(sm_rng *g, uint64_t seed);
uint64_t sm_next(sm_rng *g);
uint64_t sm_below(sm_rng *g, uint64_t n); /* 0 .. n-1; n > 0 */

/* A set of statuses, one bit each. */
#define SM_ST(st) (1u << (unsigned)(st))

typedef struct sm_lease {
    fx_lease *h;
    int released;
    uint32_t n_tokens;  /* what fx_tokenize says its text is */
} sm_lease;

/* What a request is generated against: the batcher's shape (its context,
 * block size and the positions its cache takes), its leases, and the
 * other batcher's, to pass here where they do not belong. */
typedef struct sm_ctx {
    const fx_model *model;
    uint32_t n_ctx, bt, tok_cap;
    int ctx_limited;
    const sm_lease *leases;
    int n_leases;
    const sm_lease *other_leases;
    int n_other_leases;
} sm_ctx;

#define SM_ROW_MAGIC 0x536d526fu

/* One submitted request as the host sees it: what it asked for and what
 * its events brought so far. */
typedef struct sm_row {
    uint32_t magic;
    size_t id;
    uint64_t serial;       /* its batcher's */
    fx_row *row;
    int state;             /* R_* of test_api_statemachine.c */
    int cancel_asked;
    int faulted;           /* allocations failed during its life */
    uint32_t flags, max_tokens, n_logprobs;
    long expect_prompt;    /* usage.prompt_tokens it must report */
    int gcheck;            /* the grammar its text must follow, 0: none */
    int has_grammar;       /* a grammar or FX_REQUEST_JSON */
    int plain_greedy;      /* greedy on the model's own logits */
    int32_t forced;        /* the only token it may produce, -1: any */
    uint8_t *banned;       /* [n_vocab] tokens biased by -INFINITY */
    int all_banned;
    int has_bias;
    char **stops;          /* [n_stop] copies */
    size_t n_stop;
    int32_t *stop_toks;
    size_t n_stop_toks;
    char *text;            /* TEXT events so far */
    size_t len, cap;
    int32_t *tev;          /* TOKEN events so far */
    size_t n_tev, cap_tev;
    struct sm_request *solo; /* kept to replay it alone, or NULL */
} sm_row;

sm_row *sm_row_new(size_t id, uint64_t serial);
void sm_row_free(sm_row *r);

/* A request and the buffers it points to (each exactly as long as it
 * says, so ASan sees a read past the end). The fx_request sits in a larger
 * struct so that a newer host's struct_size can be tried. */
struct sm_request {
    struct {
        fx_request r;
        unsigned char extra[16];
    } big;
    const fx_request *req_ptr;
    int null_out;
    const char *what;
    void *bufs[12];
    int n_bufs;
};
typedef struct sm_request sm_request;

/* Fills q (and r's expectations) with a random request; returns the
 * statuses fx_submit may give for it. */
unsigned sm_gen_request(sm_rng *g, const sm_ctx *c, sm_row *r, sm_request *q);
void sm_request_free(sm_request *q);

typedef struct sm_lease_req {
    char *buf;
    const char *text;
    size_t len;
    uint32_t flags;
    uint32_t n_tokens;
    const char *what;
} sm_lease_req;

unsigned sm_gen_lease(sm_rng *g, const sm_ctx *c, sm_lease_req *q);

/* Every token's piece, read once through fx_token_to_piece. */
void sm_pieces_init(const fx_model *m);
void sm_pieces_free(void);

/* The checks of one event (cmocka failures on a break). */
void sm_row_text(sm_row *r, const fx_event *ev, const fx_model *m);
void sm_row_token(sm_row *r, const fx_event *ev, const fx_model *m);
void sm_row_done(sm_row *r, const fx_event *ev, const fx_model *m,
                 uint32_t n_ctx, uint32_t bt, int no_cache);

#endif /* FX_TEST_SM_GEN_H */
