/*
 * The vocabulary loader and tokenizer against docs/reliability.md section B
 * (13-16 here; 17-19 go through the public API in test_tokenizer.c), plus
 * allocation failure at every point of load and tokenize (43). Each bad
 * vocabulary is built byte by byte with the GGUF writer and parsed from
 * memory; each must give its specific status and a message naming the key
 * or token, and leak nothing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ferrox.h"
#include "gguf/gguf.h"
#include "fault_alloc.h"
#include "gguf_writer.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

/* ---- building vocabularies ---- */

typedef struct vfile {
    gw_buf b;
    uint64_t n_kv;
} vfile;

/* Header plus general.architecture; kv count patched by vf_parse. */
static void vf_begin(vfile *f) {
    memset(f, 0, sizeof *f);
    gw_header(&f->b, 3, 0, 0);
    gw_kv_str(&f->b, "general.architecture", "llama");
    f->n_kv = 1;
}

/* A small valid SentencePiece vocabulary: <unk> <s> </s>, 256 byte
 * tokens, then a few pieces; with_types/with_scores add those arrays. */
#define N_BASE 263
static const char *base_token(uint32_t i, char *tmp) {
    static const char *const extra[] = {"\xe2\x96\x81", "a", "b", "c"};
    if (i == 0) return "<unk>";
    if (i == 1) return "<s>";
    if (i == 2) return "</s>";
    if (i < 259) {
        snprintf(tmp, 8, "<0x%02X>", i - 3);
        return tmp;
    }
    return extra[i - 259];
}

static void vf_tokens(vfile *f, uint32_t n) {
    char **t = calloc(n ? n : 1, sizeof *t);
    assert_non_null(t);
    for (uint32_t i = 0; i < n; i++) {
        char tmp[8];
        const char *src = base_token(i, tmp);
        t[i] = malloc(strlen(src) + 1);
        assert_non_null(t[i]);
        memcpy(t[i], src, strlen(src) + 1);
    }
    gw_kv_arr_str(&f->b, "tokenizer.ggml.tokens", (const char *const *)t, n);
    for (uint32_t i = 0; i < n; i++) free(t[i]);
    free(t);
    f->n_kv++;
}

static void vf_types(vfile *f, uint32_t n) {
    int32_t *ty = calloc(n, sizeof *ty);
    assert_non_null(ty);
    for (uint32_t i = 0; i < n; i++) ty[i] = i == 0 ? 2 : i < 3 ? 3 : i < 259 ? 6 : 1;
    gw_kv_arr_i32(&f->b, "tokenizer.ggml.token_type", ty, n);
    free(ty);
    f->n_kv++;
}

static void vf_scores(vfile *f, uint32_t n) {
    float *s = calloc(n, sizeof *s);
    assert_non_null(s);
    for (uint32_t i = 0; i < n; i++) s[i] = -(float)i;
    gw_kv_arr_f32(&f->b, "tokenizer.ggml.scores", s, n);
    free(s);
    f->n_kv++;
}

static void vf_spm(vfile *f) {
    vf_begin(f);
    gw_kv_str(&f->b, "tokenizer.ggml.model", "llama");
    f->n_kv++;
    vf_tokens(f, N_BASE);
}

/* Loads the vocabulary from a heap copy of exactly the file's bytes. */
static fx_status vf_load(vfile *f, char *msg, size_t msg_size) {
    gw_put_u64_at(&f->b, 16, f->n_kv);
    uint8_t *copy = malloc(f->b.len);
    assert_non_null(copy);
    memcpy(copy, f->b.data, f->b.len);
    fx_alloc alloc;
    assert_int_equal(fx_alloc_init(&alloc, NULL), FX_OK);
    fx_gguf *g = NULL;
    fx_error err;
    fx_error_clear(&err);
    assert_int_equal(fx_gguf_open_memory(copy, f->b.len, &alloc, &g, &err), FX_OK);
    struct fx_vocab *v = NULL;
    fx_logger log = {NULL, NULL, FX_LOG_ERROR};
    fx_status st = fx_vocab_load(g, &alloc, &log, &v, &err);
    if (st == FX_OK) assert_non_null(v);
    else assert_null(v);
    fx_vocab_free(v);
    fx_gguf_close(g);
    free(copy);
    gw_free(&f->b);
    if (msg) snprintf(msg, msg_size, "%s", err.message);
    return st;
}

static void expect(vfile *f, fx_status want, const char *needle) {
    char msg[FX_ERRMSG_SIZE];
    fx_status st = vf_load(f, msg, sizeof msg);
    if (st != want || (needle && !strstr(msg, needle)))
        fail_msg("status %d (want %d), message '%s' (want '%s')", st, want, msg, needle ? needle : "");
}

static void test_valid_baseline(void **state) {
    (void)state;
    vfile f;
    vf_spm(&f);
    vf_types(&f, N_BASE);
    vf_scores(&f, N_BASE);
    expect(&f, FX_OK, NULL);
}

/* ---- 13: scores / token_type of the wrong type or length ---- */

static void test_scores_wrong_type(void **state) {
    (void)state;
    vfile f;
    vf_spm(&f);
    int32_t *s = calloc(N_BASE, sizeof *s);
    gw_kv_arr_i32(&f.b, "tokenizer.ggml.scores", s, N_BASE);
    free(s);
    f.n_kv++;
    expect(&f, FX_ERR_BAD_VOCAB, "tokenizer.ggml.scores");
}

static void test_scores_wrong_length(void **state) {
    (void)state;
    vfile f;
    vf_spm(&f);
    vf_scores(&f, N_BASE - 1);
    expect(&f, FX_ERR_BAD_VOCAB, "tokenizer.ggml.scores: 262 entries");
}

static void test_scores_not_array(void **state) {
    (void)state;
    vfile f;
    vf_spm(&f);
    gw_kv_f32(&f.b, "tokenizer.ggml.scores", 1.0f);
    f.n_kv++;
    expect(&f, FX_ERR_BAD_VOCAB, "tokenizer.ggml.scores");
}

static void test_scores_nan(void **state) {
    (void)state;
    vfile f;
    vf_spm(&f);
    float *s = calloc(N_BASE, sizeof *s);
    s[7] = 0.0f / 0.0f;
    gw_kv_arr_f32(&f.b, "tokenizer.ggml.scores", s, N_BASE);
    free(s);
    f.n_kv++;
    expect(&f, FX_ERR_BAD_VOCAB, "scores[7]");
}

static void test_types_wrong_type(void **state) {
    (void)state;
    vfile f;
    vf_spm(&f);
    float *s = calloc(N_BASE, sizeof *s);
    gw_kv_arr_f32(&f.b, "tokenizer.ggml.token_type", s, N_BASE);
    free(s);
    f.n_kv++;
    expect(&f, FX_ERR_BAD_VOCAB, "tokenizer.ggml.token_type");
}

static void test_types_wrong_length(void **state) {
    (void)state;
    vfile f;
    vf_spm(&f);
    vf_types(&f, N_BASE + 5);
    expect(&f, FX_ERR_BAD_VOCAB, "tokenizer.ggml.token_type: 268 entries");
}

static void test_types_bad_value(void **state) {
    (void)state;
    vfile f;
    vf_spm(&f);
    int32_t *ty = calloc(N_BASE, sizeof *ty);
    for (int i = 0; i < N_BASE; i++) ty[i] = 1;
    ty[260] = 42;
    gw_kv_arr_i32(&f.b, "tokenizer.ggml.token_type", ty, N_BASE);
    free(ty);
    f.n_kv++;
    expect(&f, FX_ERR_BAD_VOCAB, "token_type[260] = 42");
}

static void test_tokens_not_strings(void **state) {
    (void)state;
    vfile f;
    vf_begin(&f);
    gw_kv_str(&f.b, "tokenizer.ggml.model", "llama");
    int32_t t[3] = {1, 2, 3};
    gw_kv_arr_i32(&f.b, "tokenizer.ggml.tokens", t, 3);
    f.n_kv += 2;
    expect(&f, FX_ERR_BAD_VOCAB, "tokenizer.ggml.tokens");
}

/* ---- 14: special ids out of range ---- */

static void test_special_id_out_of_range(void **state) {
    (void)state;
    static const char *const keys[] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                                       "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id",
                                       "tokenizer.ggml.eot_token_id"};
    static const uint32_t ids[] = {N_BASE, 0xFFFFFFFFu, 1000000};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        for (size_t i = 0; i < 3; i++) {
            vfile f;
            vf_spm(&f);
            gw_kv_u32(&f.b, keys[k], ids[i]);
            f.n_kv++;
            expect(&f, FX_ERR_BAD_VOCAB, keys[k]);
        }
    }
}

static void test_add_bos_without_bos(void **state) {
    (void)state;
    /* a two-token vocabulary: the default BOS id 1 exists, EOS id 2 not */
    vfile f;
    vf_begin(&f);
    gw_kv_str(&f.b, "tokenizer.ggml.model", "llama");
    f.n_kv++;
    vf_tokens(&f, 2);
    gw_kv_bool(&f.b, "tokenizer.ggml.add_eos_token", 1);
    f.n_kv++;
    expect(&f, FX_ERR_BAD_VOCAB, "EOS");
}

/* ---- 15: malformed and duplicate byte tokens ---- */

static void byte_vocab(vfile *f, const char *tok_a, const char *tok_b) {
    vf_begin(f);
    gw_kv_str(&f->b, "tokenizer.ggml.model", "llama");
    const char *t[5] = {"<unk>", "<s>", "</s>", tok_a, tok_b};
    gw_kv_arr_str(&f->b, "tokenizer.ggml.tokens", t, 5);
    int32_t ty[5] = {2, 3, 3, 6, 6};
    gw_kv_arr_i32(&f->b, "tokenizer.ggml.token_type", ty, 5);
    f->n_kv += 3;
}

static void test_byte_token_malformed(void **state) {
    (void)state;
    static const char *const bad[] = {"<0x-1>", "<0xZZ>", "<0x4>", "<0x041>", "0x41", "<0X41>", "<0x41]", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        vfile f;
        byte_vocab(&f, "<0x00>", bad[i]);
        expect(&f, FX_ERR_BAD_VOCAB, "token 4 is a byte token");
    }
}

static void test_byte_token_duplicate(void **state) {
    (void)state;
    vfile f;
    byte_vocab(&f, "<0x41>", "<0x41>");
    expect(&f, FX_ERR_BAD_VOCAB, "<0x41>");
    byte_vocab(&f, "<0x4a>", "<0x4A>"); /* same byte, other case */
    expect(&f, FX_ERR_BAD_VOCAB, "<0x4A>");
    byte_vocab(&f, "<0x4a>", "<0x4B>");
    expect(&f, FX_OK, NULL);
}

/* ---- 16: empty vocabulary, huge tokens ---- */

static void test_empty_vocab(void **state) {
    (void)state;
    vfile f;
    vf_spm(&f);
    gw_free(&f.b);
    vf_begin(&f);
    gw_kv_str(&f.b, "tokenizer.ggml.model", "llama");
    f.n_kv++;
    vf_tokens(&f, 0);
    expect(&f, FX_ERR_BAD_VOCAB, "empty vocabulary");
}

static void huge_token_vocab(vfile *f, size_t len) {
    char *big = malloc(len + 1);
    assert_non_null(big);
    memset(big, 'x', len);
    big[len] = '\0';
    vf_begin(f);
    gw_kv_str(&f->b, "tokenizer.ggml.model", "llama");
    const char *t[4] = {"<unk>", "<s>", "</s>", big};
    gw_kv_arr_str(&f->b, "tokenizer.ggml.tokens", t, 4);
    f->n_kv += 2;
    free(big);
}

static void test_huge_token(void **state) {
    (void)state;
    vfile f;
    huge_token_vocab(&f, 100 * 1024);
    expect(&f, FX_ERR_BAD_VOCAB, "tokenizer.ggml.tokens[3]: 102400 bytes");
    huge_token_vocab(&f, FX_VOCAB_MAX_TOKEN_LEN); /* the limit itself loads */
    expect(&f, FX_OK, NULL);
}

/* ---- the model and pre-tokenizer keys ---- */

static void test_missing_model_key(void **state) {
    (void)state;
    vfile f;
    vf_begin(&f);
    expect(&f, FX_ERR_MISSING, "tokenizer.ggml.model");
}

static void test_model_key_wrong_type(void **state) {
    (void)state;
    vfile f;
    vf_begin(&f);
    gw_kv_u32(&f.b, "tokenizer.ggml.model", 1);
    f.n_kv++;
    expect(&f, FX_ERR_BAD_TYPE, "tokenizer.ggml.model");
}

static void test_unknown_model(void **state) {
    (void)state;
    vfile f;
    vf_begin(&f);
    gw_kv_str(&f.b, "tokenizer.ggml.model", "t5");
    f.n_kv++;
    vf_tokens(&f, N_BASE);
    expect(&f, FX_ERR_UNSUPPORTED, "'t5'");
}

static void bpe_vocab(vfile *f, const char *pre, int with_merges) {
    vf_begin(f);
    gw_kv_str(&f->b, "tokenizer.ggml.model", "gpt2");
    f->n_kv++;
    if (pre) {
        gw_kv_str(&f->b, "tokenizer.ggml.pre", pre);
        f->n_kv++;
    }
    const char *t[3] = {"a", "b", "ab"};
    gw_kv_arr_str(&f->b, "tokenizer.ggml.tokens", t, 3);
    f->n_kv++;
    if (with_merges) {
        const char *m[2] = {"a b", "nospace"};
        gw_kv_arr_str(&f->b, "tokenizer.ggml.merges", m, 2);
        f->n_kv++;
    }
}

static void test_unknown_pretokenizer(void **state) {
    (void)state;
    vfile f;
    bpe_vocab(&f, "frobnicator-7b", 1);
    expect(&f, FX_ERR_UNSUPPORTED, "'frobnicator-7b'");
    bpe_vocab(&f, "qwen2", 1);
    expect(&f, FX_OK, NULL);
    /* llama-bpe asks for a BOS, and this vocabulary has none */
    bpe_vocab(&f, "llama-bpe", 1);
    expect(&f, FX_ERR_BAD_VOCAB, "BOS");
    bpe_vocab(&f, NULL, 1); /* absent: 'default', as llama.cpp */
    expect(&f, FX_OK, NULL);
}

static void test_bpe_without_merges(void **state) {
    (void)state;
    vfile f;
    bpe_vocab(&f, "gpt-2", 0);
    expect(&f, FX_ERR_MISSING, "tokenizer.ggml.merges");
}

/* ---- 43: allocation failure at every point ---- */

typedef struct tok_case {
    const char *path;
    fx_model *model;        /* loaded through the sweep's allocator */
    int32_t want[256];      /* the tokens without faults */
    size_t n_want;
} tok_case;

static const char fault_text[] =
    "Hello world! <s> 12345 \xc3\xa9t\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 "
    "\xf0\x9f\x99\x82 \xff\xfe truncated \xe4\xb8";

/* One vocabulary-only load: FX_ERR_NOMEM (nothing half-made returned) or
 * a model that tokenizes right. */
static void load_scenario(fx_fault_alloc *f, void *user) {
    tok_case *c = user;
    fx_model_params params;
    fx_model_params_init(&params);
    params.flags = FX_MODEL_VOCAB_ONLY;
    params.allocator = fx_fault_allocator(f);
    fx_model *model = NULL;
    fx_status st = fx_model_load(c->path, &params, &model, NULL, 0);
    if (st != FX_OK) {
        if (st != FX_ERR_NOMEM)
            fail_msg("load with allocation %ld failing: %s", f->fail_at,
                     fx_status_str(st));
        assert_null(model);
        return;
    }
    /* A single failure the loader absorbed must not show in the result. */
    fx_fault_stop(f);
    int32_t ids[256];
    size_t n = 0;
    assert_int_equal(fx_tokenize(model, fault_text, sizeof fault_text - 1,
                                 FX_TOKENIZE_PARSE_SPECIAL, ids, 256, &n),
                     FX_OK);
    if (c->n_want) {
        assert_int_equal(n, c->n_want);
        assert_memory_equal(ids, c->want, n * sizeof ids[0]);
    }
    fx_model_free(model);
}

/* One tokenize on the model loaded before the sweep: FX_ERR_NOMEM, or
 * exactly the fault-free tokens (with and without a buffer that is too
 * small, which takes another path through the output). */
static void tokenize_scenario(fx_fault_alloc *f, void *user) {
    tok_case *c = user;
    int32_t ids[256];
    size_t n = 0;
    fx_status st = fx_tokenize(c->model, fault_text, sizeof fault_text - 1,
                               FX_TOKENIZE_PARSE_SPECIAL, ids, 256, &n);
    if (st == FX_OK) {
        assert_int_equal(n, c->n_want);
        assert_memory_equal(ids, c->want, n * sizeof ids[0]);
    } else if (st != FX_ERR_NOMEM) {
        fail_msg("tokenize with allocation %ld failing: %s", f->fail_at,
                 fx_status_str(st));
    }
    st = fx_tokenize(c->model, fault_text, sizeof fault_text - 1,
                     FX_TOKENIZE_ADD_SPECIAL, ids, 3, &n);
    if (!(st == FX_ERR_NOMEM || (st == FX_OK && n <= 3) ||
          (st == FX_ERR_BUFFER_TOO_SMALL && n > 3)))
        fail_msg("small buffer with allocation %ld failing: %s (%zu)",
                 f->fail_at, fx_status_str(st), n);
}

/* Load and tokenize with the Nth allocation failing, for every N, once
 * alone and once with every later one failing too (fx_fault_sweep): each
 * failure is FX_ERR_NOMEM with nothing leaked, and the model stays usable
 * (the next call gives the right tokens). */
static void alloc_failure_on(const char *path) {
    tok_case c;
    memset(&c, 0, sizeof c);
    c.path = path;
    fx_fault_alloc f = {0};
    /* The reference tokens, from a fault-free load. */
    fx_model_params params;
    fx_model_params_init(&params);
    params.flags = FX_MODEL_VOCAB_ONLY;
    params.allocator = fx_fault_allocator(&f);
    assert_int_equal(fx_model_load(path, &params, &c.model, NULL, 0), FX_OK);
    assert_int_equal(fx_tokenize(c.model, fault_text, sizeof fault_text - 1,
                                 FX_TOKENIZE_PARSE_SPECIAL, c.want, 256,
                                 &c.n_want),
                     FX_OK);
    assert_true(fx_fault_sweep(&f, tokenize_scenario, &c) > 0);
    /* still usable afterwards */
    tokenize_scenario(&f, &c);
    fx_model_free(c.model);
    assert_int_equal(f.live, 0);
    assert_true(fx_fault_sweep(&f, load_scenario, &c) > 0);
}

static void test_alloc_failure_handmade(void **state) {
    (void)state;
    /* a small SentencePiece and a small BPE file, made here */
    vfile f;
    vf_spm(&f);
    vf_types(&f, N_BASE);
    vf_scores(&f, N_BASE);
    gw_put_u64_at(&f.b, 16, f.n_kv);
    const char *path = fx_test_tmp_path("alloc-spm.gguf");
    assert_int_equal(gw_write_file(&f.b, path), 0);
    gw_free(&f.b);
    alloc_failure_on(path);
    remove(path);
    bpe_vocab(&f, "qwen2", 1);
    gw_put_u64_at(&f.b, 16, f.n_kv);
    path = fx_test_tmp_path("alloc-bpe.gguf");
    assert_int_equal(gw_write_file(&f.b, path), 0);
    gw_free(&f.b);
    alloc_failure_on(path);
    remove(path);
}

static void test_alloc_failure_vendored(void **state) {
    (void)state;
    const char *spm = fx_test_data_path("vocab/ggml-vocab-llama-spm.gguf");
    char spm_path[4096];
    snprintf(spm_path, sizeof spm_path, "%s", spm); /* one static buffer */
    const char *bpe = fx_test_data_path("vocab/ggml-vocab-gpt-2.gguf");
    alloc_failure_on(spm_path);
    alloc_failure_on(bpe);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_baseline),
        cmocka_unit_test(test_scores_wrong_type),
        cmocka_unit_test(test_scores_wrong_length),
        cmocka_unit_test(test_scores_not_array),
        cmocka_unit_test(test_scores_nan),
        cmocka_unit_test(test_types_wrong_type),
        cmocka_unit_test(test_types_wrong_length),
        cmocka_unit_test(test_types_bad_value),
        cmocka_unit_test(test_tokens_not_strings),
        cmocka_unit_test(test_special_id_out_of_range),
        cmocka_unit_test(test_add_bos_without_bos),
        cmocka_unit_test(test_byte_token_malformed),
        cmocka_unit_test(test_byte_token_duplicate),
        cmocka_unit_test(test_empty_vocab),
        cmocka_unit_test(test_huge_token),
        cmocka_unit_test(test_missing_model_key),
        cmocka_unit_test(test_model_key_wrong_type),
        cmocka_unit_test(test_unknown_model),
        cmocka_unit_test(test_unknown_pretokenizer),
        cmocka_unit_test(test_bpe_without_merges),
        cmocka_unit_test(test_alloc_failure_handmade),
        cmocka_unit_test(test_alloc_failure_vendored),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
