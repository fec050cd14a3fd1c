/*
 * Bounded output (issue 40): under a schema whose language is finite
 * (enums, bounded integers and numbers, booleans, formats, fixed objects
 * and tuples of them), a random-weight model's row ends by itself -- EOS
 * once the grammar admits nothing more, or chosen where it may end --
 * long before max_tokens, and every output is a complete value of the
 * schema: matched whole by the schema's grammar in ferrox's GBNF engine
 * and checked again by hand for the integer ranges and enums. Two real
 * vocabularies (llama-spm, gpt-2), 48 seeds per schema, no logit bias.
 */
#include "test_util.h"

#include <stdarg.h>
#include <setjmp.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ferrox.h>

#include "gguf/gguf.h"
#include "gguf_writer.h"
#include "test_json_schema_util.h"

enum { N_SEEDS = 48, ROWS = 16, MAX_TOKENS = 600 };

static char spm_path[4096], gpt2_path[4096];

typedef struct vsrc { fx_gguf *g; } vsrc;

static size_t copy_vocab(gw_buf *b, void *user) {
    const vsrc *src = user;
    size_t copied = 0;
    for (uint64_t i = 0; i < src->g->n_kv; i++) {
        const fx_gguf_kv *kv = &src->g->kv[i];
        if (strncmp(kv->key, "tokenizer.", 10) != 0) continue;
        gw_bytes(b, src->g->base + kv->offset, (size_t)(kv->end_offset - kv->offset));
        copied++;
    }
    return copied;
}

/* A tiny random-weight model over a vocabulary from tests/data/vocab. */
static int make_model(const char *vocab_rel, char *out, size_t out_size, const char *name) {
    fx_alloc a;
    fx_alloc_init(&a, NULL);
    fx_error err;
    vsrc src = {NULL};
    if (fx_gguf_open(fx_test_data_path(vocab_rel), &a, &src.g, &err) != FX_OK) return -1;
    const fx_gguf_kv *tokens = fx_gguf_find(src.g, "tokenizer.ggml.tokens");
    gw_model_spec spec;
    gw_model_spec_default(&spec);
    spec.n_vocab = (uint32_t)tokens->count;
    spec.n_embd = 32;
    spec.n_layer = 1;
    spec.n_head = 2;
    spec.n_head_kv = 2;
    spec.n_ff = 64;
    spec.n_ctx = 1024;
    spec.seed = 40;
    spec.extra_kv = copy_vocab;
    spec.extra_user = &src;
    snprintf(out, out_size, "%s", fx_test_tmp_path(name));
    int rc = gw_write_model(out, &spec);
    fx_gguf_close(src.g);
    return rc;
}

typedef struct out {
    char text[4096];
    size_t len;
    size_t n_ids;
    int done;
    fx_finish_reason finish;
    fx_status status;
} out;

static void drain(fx_batcher *b) {
    for (int guard = 0; guard < 200000; guard++) {
        fx_event ev;
        while (fx_poll(b, &ev)) {
            out *o = ev.user;
            if (ev.type == FX_EVENT_TEXT) {
                assert_true(o->len + ev.text_len < sizeof o->text);
                memcpy(o->text + o->len, ev.text, ev.text_len);
                o->len += ev.text_len;
            } else {
                o->done++;
                o->finish = ev.finish;
                o->status = ev.status;
                o->n_ids = ev.n_tokens;
            }
        }
        if (fx_batcher_pending(b) == 0) return;
        assert_int_equal(fx_step(b), FX_OK);
    }
    fail_msg("did not finish");
}

/* Extra checks by hand, independent of the grammar. */
static int int_in(const char *s, long lo, long hi) {
    char *end;
    long v = strtol(s, &end, 10);
    return *end == '\0' && v >= lo && v <= hi && !(s[0] == '-' && s[1] == '0') &&
           !(s[0] == '0' && s[1] != '\0');
}

static int one_of(const char *s, const char *const *list) {
    for (size_t i = 0; list[i]; i++)
        if (strcmp(s, list[i]) == 0) return 1;
    return 0;
}

static const char *const colours[] = {"\"red\"", "\"green\"", "\"blue\"", "1", "null", "true",
                                      NULL};

static int check_enum(const char *s) { return one_of(s, colours); }
static int check_int(const char *s) { return int_in(s, -20, 300); }
static int check_neg(const char *s) { return int_in(s, -1000, -995); }
static int check_bool(const char *s) {
    static const char *const b[] = {"true", "false", NULL};
    return one_of(s, b);
}

typedef struct bounded {
    const char *schema;
    int (*check)(const char *); /* NULL: the grammar's verdict only */
} bounded;

static const bounded schemas[] = {
    {"{\"enum\":[\"red\",\"green\",\"blue\",1,null,true]}", check_enum},
    {"{\"type\":\"integer\",\"minimum\":-20,\"maximum\":300}", check_int},
    {"{\"type\":\"integer\",\"exclusiveMinimum\":-1001,\"exclusiveMaximum\":-994}", check_neg},
    {"{\"type\":\"boolean\"}", check_bool},
    {"{\"type\":\"number\",\"minimum\":0,\"maximum\":1}", NULL},
    {"{\"type\":\"string\",\"format\":\"date\"}", NULL},
    {"{\"type\":\"string\",\"pattern\":\"^[a-c]{1,3}(-[0-9])?$\"}", NULL},
    {"{\"type\":\"object\",\"properties\":{\"ok\":{\"type\":\"boolean\"},"
     "\"n\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":9},\"c\":{\"enum\":[\"a\",\"b\"]}},"
     "\"required\":[\"ok\",\"n\",\"c\"]}", NULL},
    {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"boolean\"},{\"const\":\"x\"},"
     "{\"type\":\"integer\",\"minimum\":1,\"maximum\":3}],\"items\":false}", NULL},
};

static void run_schema(const char *model_path, const bounded *sc) {
    char gbnf[16384], msg[256];
    assert_int_equal(fx_json_schema_to_grammar(sc->schema, 0, gbnf, sizeof gbnf, NULL, msg,
                                               sizeof msg), FX_OK);
    fx_grammar *g = convert(sc->schema);
    fx_model *m = NULL;
    char err[256];
    if (fx_model_load(model_path, NULL, &m, err, sizeof err) != FX_OK) fail_msg("%s", err);
    fx_batcher_params p;
    fx_batcher_params_init(&p);
    p.max_rows = ROWS;
    p.n_ctx = 1024;
    fx_batcher *b = NULL;
    if (fx_batcher_create(m, &p, &b, err, sizeof err) != FX_OK) fail_msg("%s", err);
    out *o = calloc(N_SEEDS, sizeof *o);
    assert_non_null(o);
    for (int i = 0; i < N_SEEDS; i++) {
        fx_request r;
        fx_request_init(&r);
        r.prompt = "Answer:";
        r.prompt_len = 7;
        r.max_tokens = MAX_TOKENS;
        r.temperature = 1.0f;
        r.seed = 4000 + (uint64_t)i;
        r.grammar = gbnf;
        r.grammar_len = strlen(gbnf);
        r.user = &o[i];
        fx_row *row;
        if (fx_submit(b, &r, &row) != FX_OK) fail_msg("%s", fx_batcher_errmsg(b));
    }
    drain(b);
    size_t longest = 0;
    for (int i = 0; i < N_SEEDS; i++) {
        o[i].text[o[i].len] = '\0';
        assert_int_equal(o[i].done, 1);
        if (o[i].finish != FX_FINISH_EOS)
            fail_msg("%s seed %d: finish %d (status %d) after %zu tokens: [%s]", sc->schema, i,
                     o[i].finish, o[i].status, o[i].n_ids, o[i].text);
        if (match(g, o[i].text) != 2)
            fail_msg("%s seed %d: not a whole value: [%s]", sc->schema, i, o[i].text);
        if (sc->check && !sc->check(o[i].text))
            fail_msg("%s seed %d: [%s] is outside the schema", sc->schema, i, o[i].text);
        if (o[i].n_ids > longest) longest = o[i].n_ids;
    }
    print_message("%-60.60s: %d seeds ended by themselves, at most %zu tokens; e.g. %s\n",
                  sc->schema, N_SEEDS, longest, o[0].text);
    free(o);
    fx_batcher_free(b);
    fx_model_free(m);
    fx_grammar_free(g);
}

static void test_bounded_spm(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof schemas / sizeof *schemas; i++) run_schema(spm_path, &schemas[i]);
}

static void test_bounded_gpt2(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof schemas / sizeof *schemas; i++) run_schema(gpt2_path, &schemas[i]);
}

static int setup(void **state) {
    if (schema_setup(state) != 0) return -1;
    if (make_model("vocab/ggml-vocab-llama-spm.gguf", spm_path, sizeof spm_path,
                   "schema-spm.gguf") != 0 ||
        make_model("vocab/ggml-vocab-gpt-2.gguf", gpt2_path, sizeof gpt2_path,
                   "schema-gpt2.gguf") != 0)
        return -1;
    return 0;
}

static int teardown(void **state) {
    if (spm_path[0]) remove(spm_path);
    if (gpt2_path[0]) remove(gpt2_path);
    return schema_teardown(state);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bounded_spm),
        cmocka_unit_test(test_bounded_gpt2),
    };
    return cmocka_run_group_tests_name("json_schema_batch", tests, setup, teardown);
}
