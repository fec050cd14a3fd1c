/*
 * The two shortcuts that keep tokenizing linear must not change a single
 * token:
 *   - SentencePiece merges word by word when no token has a `▁` after
 *     another character (spm_words); it must equal merging the whole text;
 *   - BPE pre-tokenizes block by block, cutting only where every
 *     pre-tokenizer cuts anyway; it must equal splitting the whole text.
 * Both are checked on random text built to hit the edges: runs of spaces,
 * newlines, invalid UTF-8 lead bytes right before a space, literal `▁`.
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
#include "test_util.h"
#include "test_rng.h"
#include "tokenizer/vocab_impl.h"

static const char *const k_atoms[] = {
    "a", "b", "Hello", "world", "the", "I", "'s", "'LL", " ", " ", " ", "  ", "   ", "\n", "\n\n", "\t", "\r\n",
    ".", ",", "!?", "$", "+", "1", "23", "4567", "\xc3\xa9", "\xc3\x9f", "\xe4\xb8\xad", "\xe6\x96\x87",
    "\xf0\x9f\x99\x82", "\xe2\x96\x81", "\xf0", "\xe2\x96", "\xff", "\x80", "\xc3", "\xc2\xa0", "\xe3\x80\x80",
    "\xc2\xb2", "<s>", "x",
    /* for gpt-4o: case changes, a capital beyond ASCII, a mark, contractions of any case, a slash */
    "ABC", "Ab", "\xc3\x80", "\xcc\x81", "'S", "'re", "/",
};

static size_t random_text(uint64_t *seed, char *buf, size_t cap) {
    size_t n = 0, atoms = 1 + fx_test_rng_next(seed) % 60;
    for (size_t i = 0; i < atoms; i++) {
        const char *a = k_atoms[fx_test_rng_next(seed) % (sizeof k_atoms / sizeof k_atoms[0])];
        size_t l = strlen(a);
        if (n + l > cap) break;
        memcpy(buf + n, a, l);
        n += l;
    }
    return n;
}

static void test_spm_words_equal_whole_text(void **state) {
    (void)state;
    const char *path = fx_test_data_path("vocab/ggml-vocab-llama-spm.gguf");
    fx_alloc alloc;
    fx_alloc_init(&alloc, NULL);
    fx_gguf *g = NULL;
    fx_error err;
    assert_int_equal(fx_gguf_open(path, &alloc, &g, &err), FX_OK);
    struct fx_vocab *v = NULL;
    fx_logger log = {NULL, NULL, FX_LOG_ERROR};
    assert_int_equal(fx_vocab_load(g, &alloc, &log, &v, &err), FX_OK);
    assert_true(v->spm_words); /* Llama's vocabulary has the property */
    uint64_t seed = 0x1234567;
    char text[1024];
    int32_t a[2048], b[2048];
    for (int iter = 0; iter < 3000; iter++) {
        size_t len = random_text(&seed, text, sizeof text), na, nb;
        v->spm_words = true;
        assert_int_equal(fx_vocab_tokenize(v, &alloc, text, len, 0, a, 2048, &na, &err), FX_OK);
        v->spm_words = false;
        assert_int_equal(fx_vocab_tokenize(v, &alloc, text, len, 0, b, 2048, &nb, &err), FX_OK);
        assert_int_equal(na, nb);
        assert_memory_equal(a, b, na * sizeof a[0]);
    }
    /* long text: block by block (SPM_BLOCK is 16 KiB) as well as word by word */
    size_t cap = 200000, len = 0;
    char *big = malloc(cap);
    int32_t *x = malloc(cap * sizeof *x), *y = malloc(cap * sizeof *y);
    assert_non_null(big);
    assert_non_null(x);
    assert_non_null(y);
    while (len + sizeof text < cap) len += random_text(&seed, big + len, sizeof text);
    size_t nx, ny;
    v->spm_words = true;
    assert_int_equal(fx_vocab_tokenize(v, &alloc, big, len, 0, x, cap, &nx, &err), FX_OK);
    v->spm_words = false;
    assert_int_equal(fx_vocab_tokenize(v, &alloc, big, len, 0, y, cap, &ny, &err), FX_OK);
    assert_int_equal(nx, ny);
    assert_memory_equal(x, y, nx * sizeof *x);
    free(big);
    free(x);
    free(y);
    fx_vocab_free(v);
    fx_gguf_close(g);
}

static void test_pretok_blocks_equal_whole_text(void **state) {
    (void)state;
    fx_alloc alloc;
    fx_alloc_init(&alloc, NULL);
    static const fx_pretok kinds[] = {FX_PRETOK_DEFAULT,      FX_PRETOK_GPT2,           FX_PRETOK_LLAMA3,
                                      FX_PRETOK_QWEN2,        FX_PRETOK_SMOLLM,         FX_PRETOK_FALCON,
                                      FX_PRETOK_DEEPSEEK_LLM, FX_PRETOK_DEEPSEEK_CODER, FX_PRETOK_DEEPSEEK3,
                                      FX_PRETOK_BLOOM,        FX_PRETOK_VIKING,         FX_PRETOK_TEKKEN,
                                      FX_PRETOK_GPT4O};
    uint64_t seed = 0xabcdef;
    char text[1024];
    size_t cuts = 0;
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        for (int iter = 0; iter < 2000; iter++) {
            size_t len = random_text(&seed, text, sizeof text), n_whole = 0;
            size_t *whole = NULL;
            assert_int_equal(fx_pretok_split(kinds[k], &alloc, text, len, &whole, &n_whole, NULL), FX_OK);
            /* blocks of a few bytes, so that nearly every cut is used */
            size_t block = 2 + fx_test_rng_next(&seed) % 12, i = 0;
            for (size_t from = 0; from < len;) {
                size_t to = fx_pretok_block_end(text, from, len, block), n = 0;
                if (to < len) cuts++;
                size_t *part = NULL;
                assert_int_equal(fx_pretok_split(kinds[k], &alloc, text + from, to - from, &part, &n, NULL), FX_OK);
                for (size_t j = 0; j < n; j++, i++) {
                    assert_true(i < n_whole);
                    if (whole[i] != from + part[j])
                        fail_msg("kind %d: piece %zu ends at %zu whole, %zu by blocks, in '%.*s'", (int)kinds[k], i,
                                 whole[i], from + part[j], (int)len, text);
                }
                fx_free(&alloc, part);
                from = to;
            }
            assert_int_equal(i, n_whole);
            fx_free(&alloc, whole);
        }
    }
    assert_true(cuts > 1000); /* the cuts were really exercised */
}

/* fx_vocab_min_tokens, which lets the batcher refuse a prompt without
 * tokenizing it, never claims more tokens than the text gives, whatever
 * the flags (BOS, special tokens parsed). */
static void check_min_tokens(const char *vocab_path) {
    fx_alloc alloc;
    fx_alloc_init(&alloc, NULL);
    fx_gguf *g = NULL;
    fx_error err;
    assert_int_equal(fx_gguf_open(fx_test_data_path(vocab_path), &alloc, &g, &err), FX_OK);
    struct fx_vocab *v = NULL;
    fx_logger log = {NULL, NULL, FX_LOG_ERROR};
    assert_int_equal(fx_vocab_load(g, &alloc, &log, &v, &err), FX_OK);
    assert_true(v->bytes_per_token > 0); /* both vocabularies give a bound */
    assert_int_equal(fx_vocab_min_tokens(v, 0), 0);
    assert_int_equal(fx_vocab_min_tokens(v, 1), 1);
    static const uint32_t flags[] = {0, FX_TOKENIZE_ADD_SPECIAL, FX_TOKENIZE_PARSE_SPECIAL};
    uint64_t seed = 0x5eed;
    char text[1024];
    static int32_t ids[4096];
    for (int iter = 0; iter < 3000; iter++) {
        size_t len = random_text(&seed, text, sizeof text), n;
        /* Some texts are one token's stored text repeated: the longest
         * tokens, where the bound is tightest. */
        if (iter % 3 == 0) {
            int32_t id = (int32_t)(fx_test_rng_next(&seed) % v->n_tokens);
            size_t tl;
            const char *t = fx_vocab_token_text(v, id, &tl);
            for (len = 0; tl && len + tl <= sizeof text; len += tl) memcpy(text + len, t, tl);
        }
        uint32_t f = flags[iter % 3];
        assert_int_equal(fx_vocab_tokenize(v, &alloc, text, len, f, ids, 4096, &n, &err), FX_OK);
        if (n < fx_vocab_min_tokens(v, len))
            fail_msg("%s: %zu bytes give %zu tokens, fx_vocab_min_tokens says at least %zu", vocab_path,
                     len, n, fx_vocab_min_tokens(v, len));
    }
    fx_vocab_free(v);
    fx_gguf_close(g);
}

static void test_min_tokens_is_a_bound(void **state) {
    (void)state;
    check_min_tokens("vocab/ggml-vocab-llama-spm.gguf");
    check_min_tokens("vocab/ggml-vocab-gpt-2.gguf");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spm_words_equal_whole_text),
        cmocka_unit_test(test_pretok_blocks_equal_whole_text),
        cmocka_unit_test(test_min_tokens_is_a_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
