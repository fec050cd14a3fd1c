/*
 * Masks inside bounded repetitions ({m,n}) are exactly the tokens whose
 * bytes the grammar accepts: compared with testing every token on its own
 * at the counts where the mask walk's repetition shortcuts change course
 * (none taken yet, one, one short of the end, all of it, one past: refused),
 * for repetitions of a class and of a rule, {m,m}, {m,}, {0,}, nested, in
 * alternatives, of multi-byte characters, longer than the walk follows
 * ahead (FX_GRAMMAR_CHAIN_MAX), on a SentencePiece and a byte-level BPE
 * vocabulary. Then along random paths through each grammar and through
 * the schemas bench_grammar measures. And the walk stays short at the end
 * of a maxLength string, where it used to visit every token longer than
 * the count left byte by byte; and stays exact on tokens thousands of
 * bytes long, past what its scratch holds of repetitions.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "gguf/gguf.h"
#include "gguf_writer.h"
#include "sample/json_schema.h"
#include "sample/sample.h"
#include "tokenizer/tokenizer.h"
#include "test_util.h"

static fx_alloc alloc;

/* A vocabulary with its trie and walk scratch. */
typedef struct vocab_ctx {
    fx_gguf *gguf;
    struct fx_vocab *vocab;
    fx_sample_ctx ctx;
    uint32_t nv;
    int32_t *got, *expect;
    fx_gstate trial;       /* a copy of the parse each token is tried on */
} vocab_ctx;

static void vocab_open(vocab_ctx *v, const char *path) {
    fx_error err;
    assert_int_equal(fx_gguf_open(path, &alloc, &v->gguf, &err), FX_OK);
    assert_int_equal(fx_vocab_load(v->gguf, &alloc, NULL, &v->vocab, &err), FX_OK);
    assert_int_equal(fx_sample_ctx_init(&v->ctx, &alloc, v->vocab, 0, &err), FX_OK);
    assert_int_equal(fx_sample_ctx_grammar(&v->ctx, &alloc, &err), FX_OK);
    v->nv = fx_vocab_n_tokens(v->vocab);
    v->got = malloc(v->nv * sizeof *v->got);
    v->expect = malloc(v->nv * sizeof *v->expect);
    memset(&v->trial, 0, sizeof v->trial);
    v->trial.frames = fx_malloc_array(&alloc, FX_GRAMMAR_ROW_FRAMES, sizeof *v->trial.frames);
    v->trial.tops = fx_malloc_array(&alloc, FX_GRAMMAR_MAX_STACKS, sizeof *v->trial.tops);
    assert_true(v->got && v->expect && v->trial.frames && v->trial.tops);
}

static void vocab_close(vocab_ctx *v) {
    free(v->got);
    free(v->expect);
    fx_gstate_free(&v->trial, &alloc);
    fx_sample_ctx_free(&v->ctx, &alloc);
    fx_vocab_free(v->vocab);
    fx_gguf_close(v->gguf);
}

/* dst (with arrays of the most a row may hold) becomes a copy of src. */
static void copy_state(fx_gstate *dst, const fx_gstate *src) {
    dst->g = src->g;
    dst->frames_cap = src->frames_cap; /* the row's own bound, checked too */
    memcpy(dst->frames, src->frames, src->n_frames * sizeof *src->frames);
    memcpy(dst->tops, src->tops, src->n_tops * sizeof *src->tops);
    dst->n_frames = src->n_frames;
    dst->n_tops = src->n_tops;
    dst->utf8_value = src->utf8_value;
    dst->utf8_left = src->utf8_left;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Does the token continue the parse s? (Each token tried on a copy.) */
static int token_fits(vocab_ctx *v, const fx_gstate *s, int32_t t) {
    static char piece[FX_VOCAB_MAX_TOKEN_LEN];
    size_t len = 0;
    fx_error err;
    if (fx_vocab_is_eog(v->vocab, t)) return fx_gstate_complete(s);
    if (fx_vocab_token_to_piece(v->vocab, t, 0, piece, sizeof piece, &len, &err) != FX_OK)
        fail_msg("token %d: %s", t, err.message);
    if (len == 0) return 0;
    copy_state(&v->trial, s);
    return fx_gstate_accept(&v->trial, &v->ctx.work, piece, len, &err) == FX_OK;
}

/* The mask of s equals brute force; names the first token they disagree on. */
static void expect_exact_mask(vocab_ctx *v, const fx_gstate *s, const char *what) {
    fx_error err;
    fx_gwork *w = &v->ctx.work;
    if (fx_gstate_mask(s, v->ctx.trie, w, &err) != FX_OK) fail_msg("%s: %s", what, err.message);
    uint32_t n_got = w->n_allowed, n_exp = 0;
    memcpy(v->got, w->allowed, n_got * sizeof *v->got);
    qsort(v->got, n_got, sizeof *v->got, cmp_i32);
    for (uint32_t t = 0; t < v->nv; t++)
        if (token_fits(v, s, (int32_t)t)) v->expect[n_exp++] = (int32_t)t;
    if (n_got == n_exp && memcmp(v->got, v->expect, n_exp * sizeof *v->got) == 0) return;
    uint32_t i = 0;
    while (i < n_got && i < n_exp && v->got[i] == v->expect[i]) i++;
    int32_t t = i < n_got && (i >= n_exp || v->got[i] < v->expect[i]) ? v->got[i] : v->expect[i];
    char piece[512];
    size_t len = 0;
    if (fx_vocab_token_to_piece(v->vocab, t, 0, piece, sizeof piece - 1, &len, &err) != FX_OK)
        len = 0;
    piece[len] = 0;
    fail_msg("%s: mask has %u tokens, brute force %u; token %d '%s' %s", what, n_got,
             n_exp, t, piece, token_fits(v, s, t) ? "missing" : "allowed wrongly");
}

/* "%23x" in a prefix stands for 23 x's (the counts run past 32). */
static void expand_spec(const char *spec, char *out, size_t cap) {
    size_t n = 0;
    while (*spec) {
        size_t reps = 1;
        if (*spec == '%') {
            char *end;
            reps = strtoul(spec + 1, &end, 10);
            spec = end;
        }
        for (size_t k = 0; k < reps; k++) {
            assert_true(n + 1 < cap);
            out[n++] = *spec;
        }
        spec++;
    }
    out[n] = 0;
}

typedef struct counted_case {
    const char *gbnf;
    const char *accepted[12]; /* prefixes to mask after; NULL ends */
    const char *refused[4];   /* what must not parse; NULL ends */
} counted_case;

/* json-char as the JSON Schema converter writes it: a rule of a class or
 * an escape, so the repetition is of a rule. */
#define JSON_CHAR                                                                 \
    "jc ::= [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n"

static const counted_case k_cases[] = {
    /* A class {0,n}: 0, 1, n-1 and n taken; n+1 refused. */
    {"root ::= \"<\" [a-z]{0,3} \">\"\n",
     {"", "<", "<a", "<ab", "<abc", NULL},
     {"<abcd", "<>>", NULL}},
    /* {m,m}, twice in a row with a literal between. */
    {"root ::= [0-9]{4} \"-\" [0-9]{2}\n",
     {"", "1", "123", "1234", "1234-", "1234-5", "1234-56", NULL},
     {"12345", "123-", "1234-567", NULL}},
    /* {0,} and {m,}: unbounded, the walk's loops. */
    {"root ::= \"a\" [bc]{0,} \"d\" [xy]{3,} \"!\"\n",
     {"", "a", "abcbc", "ad", "adx", "adxy", "adxyx", "adxyxyx", NULL},
     {"adxy!", NULL}},
    /* A rule {0,24} (a maxLength string): escapes and multi-byte
     * characters count one each; 23 and 24 taken, 25 refused. */
    {"root ::= \"\\\"\" jc{0,24} \"\\\"\" \" \"?\n" JSON_CHAR,
     {"", "\"", "\"a", "\"a\\nb\\u00e", "\"%22x\xc3\xa9", "\"%23x", "\"%23x\xe6\x97\xa5",
      "\"%24x", "\"%20x\\", "\"%22x\\u00e", NULL},
     {"\"%25x", "\"%23x\xe6\x97\xa5\xe6\x97\xa5", "\"%24x\\n", NULL}},
    /* A rule {1,5} after a bounded one, as schema strings come in a row. */
    {"root ::= \"\\\"\" jc{1,5} \"\\\",\\\"\" jc{0,2} \"\\\"\"\n" JSON_CHAR,
     {"\"", "\"ab", "\"abcd", "\"abcde", "\"abcde\",\"", "\"a\",\"b", "\"a\",\"bc", NULL},
     {"\"\",", "\"abcdef", "\"a\",\"bcd", NULL}},
    /* Nested: groups {2,4} of a class {1,3}. */
    {"root ::= (\"[\" [a-z]{1,3} \"]\"){2,4} \".\"\n",
     {"", "[", "[a", "[abc", "[abc]", "[a][b", "[a][bc]", "[a][b][c][d]", "[a][b][c][de", NULL},
     {"[abcd", "[a].", "[a][b][c][d][", NULL}},
    /* In alternatives, one of them also a repetition of a literal. */
    {"root ::= ([a-z]{2,6} | [a-c0-9]{1,3}) \";\" | \"x\"{0,2} \"y\"\n",
     {"", "a", "ab", "abc", "abcdef", "x", "xx", "1", "12", "123", NULL},
     {"abcdefg", "d1", "1234", NULL}},
    /* Multi-byte characters: a negated class of all of ASCII, a range. */
    {"root ::= [^\\x00-\\x7F]{1,3} \"!\" [\\u00e9-\\u00fc]{2,3} \".\"\n",
     {"", "\xc3\xa9", "\xe6\x97\xa5\xe6\x9c\xac", "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e",
      "\xc3\xa9!", "\xc3\xa9!\xc3\xa9", "\xc3\xa9!\xc3\xa9\xc3\xbc", "\xc3\xa9!\xc3\xa9\xc3\xbc\xc3\xa9",
      NULL},
     {"!", "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe6\x97\xa5", "\xc3\xa9!\xc3\xa9.", NULL}},
    /* Longer than the walk follows ahead: counts 0, 10, 39, 40, 59, 60. */
    {"root ::= [a-z ]{40,60} \":\"\n",
     {"", "%10a", "%39a", "%40a", "%59a", "%60a", NULL},
     {"%61a", "%39a:", NULL}},
    /* An exact count, then a part of the class: past the count, the
     * bytes that still go on are fewer. */
    {"root ::= [a-z]{3} [a-m] \".\"\n",
     {"", "t", "th", "the", "them", NULL},
     {"then", "them.a", NULL}},
    /* The class also goes on after the repetition: no count ends it. */
    {"root ::= [a-z]{0,5} ([a-z] \"!\" | \"?\")\n",
     {"", "abc", "abcde", "abcdef", NULL},
     {"abcdefg", "abcdef?", NULL}},
    /* A large count, and a rule of two lengths. */
    {"root ::= [a-z]{0,1000} \".\" (\"ab\" | \"c\"){0,4} \";\" \"a\" [b]{0,0} \"c\"\n",
     {"", "%500q", "%999q", "%1000q", "q.ab", "q.abcab", "q.ababcc", "q.c;a", NULL},
     {"%1001q", "q.ababcabc", "q.;ab", NULL}},
};

enum { N_CASES = sizeof k_cases / sizeof *k_cases };

/* Random paths through g: a token of the mask at a time, each mask
 * checked. */
static void random_paths(vocab_ctx *v, const fx_grammar *g, int n_paths, int ci,
                         fx_rng *rng) {
    fx_error err;
    char what[128];
    for (int path = 0; path < n_paths; path++) {
        fx_gstate s;
        assert_int_equal(fx_gstate_init(&s, &alloc, g, &err), FX_OK);
        for (int step = 0; step < 8; step++) {
            snprintf(what, sizeof what, "case %d path %d step %d", ci, path, step);
            expect_exact_mask(v, &s, what);
            fx_gwork *w = &v->ctx.work;
            if (w->n_allowed == 0) break;
            int32_t t = w->allowed[(uint32_t)(fx_rng_uniform(rng) * w->n_allowed) % w->n_allowed];
            char piece[512];
            size_t len = 0;
            if (fx_vocab_is_eog(v->vocab, t)) break;
            assert_int_equal(fx_vocab_token_to_piece(v->vocab, t, 0, piece, sizeof piece,
                                                     &len, &err), FX_OK);
            assert_int_equal(fx_gstate_accept(&s, w, piece, len, &err), FX_OK);
        }
        fx_gstate_free(&s, &alloc);
    }
}

static void check_case(vocab_ctx *v, const counted_case *c, int ci, fx_rng *rng) {
    fx_grammar *g = NULL;
    fx_error err;
    if (fx_grammar_compile(&alloc, c->gbnf, strlen(c->gbnf), NULL, &g, &err) != FX_OK)
        fail_msg("case %d: %s", ci, err.message);
    static char text[2048];
    char what[128];
    for (int k = 0; k < 12 && c->accepted[k]; k++) {
        expand_spec(c->accepted[k], text, sizeof text);
        fx_gstate s;
        assert_int_equal(fx_gstate_init(&s, &alloc, g, &err), FX_OK);
        if (fx_gstate_accept(&s, &v->ctx.work, text, strlen(text), &err) != FX_OK)
            fail_msg("case %d: '%s' refused: %s", ci, c->accepted[k], err.message);
        snprintf(what, sizeof what, "case %d after '%.60s'", ci, c->accepted[k]);
        expect_exact_mask(v, &s, what);
        fx_gstate_free(&s, &alloc);
    }
    for (int k = 0; k < 4 && c->refused[k]; k++) {
        expand_spec(c->refused[k], text, sizeof text);
        fx_gstate s;
        assert_int_equal(fx_gstate_init(&s, &alloc, g, &err), FX_OK);
        if (fx_gstate_accept(&s, &v->ctx.work, text, strlen(text), &err) == FX_OK)
            fail_msg("case %d: '%s' accepted", ci, c->refused[k]);
        fx_gstate_free(&s, &alloc);
    }
    random_paths(v, g, 1, ci, rng);
    fx_grammar_free(g);
}

static void check_vocab(const char *rel) {
    vocab_ctx v;
    vocab_open(&v, fx_test_data_path(rel));
    fx_rng rng;
    fx_rng_seed(&rng, 40);
    for (int ci = 0; ci < N_CASES; ci++) check_case(&v, &k_cases[ci], ci, &rng);
    vocab_close(&v);
}

/* The schemas bench_grammar measures (tests/data/schemas), as the
 * converter writes them: maxLength strings, a pattern's {1,24}, dates. */
static void test_counted_schemas(void **state) {
    (void)state;
    static const char *const names[] = {"schemas/string24.json", "schemas/npc.json",
                                        "schemas/tools.json"};
    vocab_ctx v;
    vocab_open(&v, fx_test_data_path("vocab/ggml-vocab-llama-spm.gguf"));
    fx_rng rng;
    fx_rng_seed(&rng, 41);
    for (int i = 0; i < 3; i++) {
        size_t len = 0;
        char *schema = fx_test_read_file(fx_test_data_path(names[i]), &len);
        assert_non_null(schema);
        char *gbnf = NULL;
        size_t gbnf_len = 0;
        fx_grammar *g = NULL;
        fx_error err;
        if (fx_json_schema_to_gbnf(&alloc, schema, len, &gbnf, &gbnf_len, &err) != FX_OK ||
            fx_grammar_compile(&alloc, gbnf, gbnf_len, NULL, &g, &err) != FX_OK)
            fail_msg("%s: %s", names[i], err.message);
        random_paths(&v, g, 3, 100 + i, &rng);
        fx_grammar_free(g);
        fx_free(&alloc, gbnf);
        free(schema);
    }
    vocab_close(&v);
}

static void test_counted_llama_spm(void **state) {
    (void)state;
    check_vocab("vocab/ggml-vocab-llama-spm.gguf");
}

static void test_counted_gpt2(void **state) {
    (void)state;
    check_vocab("vocab/ggml-vocab-gpt-2.gguf");
}

/* At every count of a maxLength-24 string, the walk's expansion steps
 * (w->steps: the work of a mask besides listing its tokens) stay at a few
 * per first byte of the vocabulary. Walking every token longer than the
 * count left byte by byte took 16,000 to 278,000 on this vocabulary. */
#define COUNTED_WALK_STEPS 8000u
static void test_walk_short_at_count_end(void **state) {
    (void)state;
    vocab_ctx v;
    vocab_open(&v, fx_test_data_path("vocab/ggml-vocab-llama-spm.gguf"));
    static const char gbnf[] = "root ::= \"\\\"\" jc{0,24} \"\\\"\"\n" JSON_CHAR;
    fx_grammar *g = NULL;
    fx_error err;
    assert_int_equal(fx_grammar_compile(&alloc, gbnf, strlen(gbnf), NULL, &g, &err), FX_OK);
    char text[32] = "\"";
    for (int k = 0; k <= 24; k++) {
        fx_gstate s;
        assert_int_equal(fx_gstate_init(&s, &alloc, g, &err), FX_OK);
        assert_int_equal(fx_gstate_accept(&s, &v.ctx.work, text, strlen(text), &err), FX_OK);
        assert_int_equal(fx_gstate_mask(&s, v.ctx.trie, &v.ctx.work, &err), FX_OK);
        if (v.ctx.work.steps > COUNTED_WALK_STEPS)
            fail_msg("count %d: %u expansion steps", k, v.ctx.work.steps);
        fx_gstate_free(&s, &alloc);
        strcat(text, "x");
    }
    fx_grammar_free(g);
    vocab_close(&v);
}

/* A vocabulary of runs of 'a': 1 to 8 long, and 12000 to 12120 long. */
static void write_long_vocab(const char *path) {
    enum { SHORT = 8, LONG0 = 12000, N_LONG = 121, N = 3 + SHORT + N_LONG };
    static char pieces[SHORT + N_LONG][LONG0 + N_LONG];
    const char *tokens[N];
    float scores[N];
    int32_t types[N];
    uint32_t n = 0;
    tokens[n] = "<unk>", types[n] = 2, scores[n] = 0, n++;
    tokens[n] = "<s>", types[n] = 3, scores[n] = 0, n++;
    tokens[n] = "</s>", types[n] = 3, scores[n] = 0, n++;
    for (uint32_t i = 0; i < SHORT + N_LONG; i++) {
        size_t len = i < SHORT ? i + 1 : LONG0 + (i - SHORT);
        memset(pieces[i], 'a', len);
        pieces[i][len] = 0;
        tokens[n] = pieces[i], types[n] = 1, scores[n] = -1.0f - (float)i, n++;
    }
    gw_buf b = {0};
    gw_header(&b, 3, 0, 7);
    gw_kv_str(&b, "tokenizer.ggml.model", "llama");
    gw_kv_arr_str(&b, "tokenizer.ggml.tokens", tokens, n);
    gw_kv_arr_f32(&b, "tokenizer.ggml.scores", scores, n);
    gw_kv_arr_i32(&b, "tokenizer.ggml.token_type", types, n);
    gw_kv_u32(&b, "tokenizer.ggml.bos_token_id", 1);
    gw_kv_u32(&b, "tokenizer.ggml.eos_token_id", 2);
    gw_kv_u32(&b, "tokenizer.ggml.unknown_token_id", 0);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b.data, 1, b.len, f), b.len);
    assert_int_equal(fclose(f), 0);
    gw_free(&b);
}

/* Tokens thousands of bytes long under a repetition that is no loop
 * and never ends ("aa" repeated: the set alternates): the walk follows
 * 32 characters ahead at a time, a new chain every 33 levels: some 360
 * along the longest path, more than its scratch keeps (WALK_CHAINS, 256
 * in grammar_match.c); past that it walks byte by byte, and the mask stays
 * exact. And a count that ends long before the tokens do. */
static void test_walk_scratch_runs_out(void **state) {
    (void)state;
    const char *path = fx_test_tmp_path("long-a-vocab.gguf");
    write_long_vocab(path);
    vocab_ctx v;
    vocab_open(&v, path);
    fx_error err;
    static const char *const grammars[] = {"root ::= (\"a\" \"a\")* \".\"\n",
                                           "root ::= [a]{0,1000} \".\"\n"};
    for (int i = 0; i < 2; i++) {
        fx_grammar *g = NULL;
        assert_int_equal(fx_grammar_compile(&alloc, grammars[i], strlen(grammars[i]), NULL,
                                            &g, &err), FX_OK);
        fx_gstate s;
        assert_int_equal(fx_gstate_init(&s, &alloc, g, &err), FX_OK);
        expect_exact_mask(&v, &s, grammars[i]);
        fx_gstate_free(&s, &alloc);
        fx_grammar_free(g);
    }
    vocab_close(&v);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counted_llama_spm),
        cmocka_unit_test(test_counted_gpt2),
        cmocka_unit_test(test_counted_schemas),
        cmocka_unit_test(test_walk_short_at_count_end),
        cmocka_unit_test(test_walk_scratch_runs_out),
    };
    fx_alloc_init(&alloc, NULL);
    return cmocka_run_group_tests_name("grammar_counted", tests, NULL, NULL);
}
