/*
 * The BPE pre-tokenizers, tested as a unit: how each splits tricky text.
 * There are no reference vectors for llama-bpe, qwen2 and smollm here, so
 * every expectation below was worked out by hand from the expression the
 * pre-tokenizer implements (see lib/tokenizer/pretok.c), and checked
 * against Python's `regex` module running those expressions.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab_impl.h"

#define END NULL

/* Splits text and compares the pieces with the NULL-terminated list. */
static void check_split(fx_pretok kind, const char *text, size_t len, const char *const *want) {
    fx_alloc alloc;
    assert_int_equal(fx_alloc_init(&alloc, NULL), FX_OK);
    size_t *ends = NULL, n = 0;
    fx_error err;
    assert_int_equal(fx_pretok_split(kind, &alloc, text, len, &ends, &n, &err), FX_OK);
    size_t n_want = 0;
    while (want[n_want]) n_want++;
    char got[2048] = "", exp[2048] = "";
    size_t start = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(got);
        snprintf(got + l, sizeof got - l, "[%.*s]", (int)(ends[i] - start), text + start);
        start = ends[i];
    }
    for (size_t i = 0; i < n_want; i++) {
        size_t l = strlen(exp);
        snprintf(exp + l, sizeof exp - l, "[%s]", want[i]);
    }
    fx_free(&alloc, ends);
    if (strcmp(got, exp) != 0) fail_msg("split of '%s':\n  got  %s\n  want %s", text, got, exp);
}

#define SPLIT(kind, text, ...)                                             \
    do {                                                                   \
        static const char *const w_[] = {__VA_ARGS__, END};                \
        check_split(kind, text, sizeof(text) - 1, w_);                     \
    } while (0)

static void test_names(void **state) {
    (void)state;
    fx_pretok k;
    assert_true(fx_pretok_from_name("llama-bpe", 9, &k));
    assert_int_equal(k, FX_PRETOK_LLAMA3);
    assert_true(fx_pretok_from_name("qwen2", 5, &k));
    assert_int_equal(k, FX_PRETOK_QWEN2);
    assert_true(fx_pretok_from_name("smollm", 6, &k));
    assert_int_equal(k, FX_PRETOK_SMOLLM);
    assert_true(fx_pretok_from_name("gpt-2", 5, &k));
    assert_int_equal(k, FX_PRETOK_GPT2);
    assert_true(fx_pretok_from_name("default", 7, &k));
    assert_int_equal(k, FX_PRETOK_DEFAULT);
    assert_false(fx_pretok_from_name("gpt-3", 5, &k));
    assert_false(fx_pretok_from_name("qwen", 4, &k)); /* no prefix match */
}

static void test_empty(void **state) {
    (void)state;
    fx_alloc alloc;
    fx_alloc_init(&alloc, NULL);
    size_t *ends = (size_t *)&alloc, n = 7;
    assert_int_equal(fx_pretok_split(FX_PRETOK_LLAMA3, &alloc, "", 0, &ends, &n, NULL), FX_OK);
    assert_int_equal(n, 0);
    assert_null(ends);
}

static void test_gpt2(void **state) {
    (void)state;
    /* contractions are case-sensitive: 'M is "'" then "M" */
    SPLIT(FX_PRETOK_GPT2, "I'm I'M", "I", "'m", " I", "'", "M");
    SPLIT(FX_PRETOK_GPT2, "they'll've'd", "they", "'ll", "'ve", "'d");
    /* a space joins the following word; a run of spaces leaves its last
     * one to the next word */
    SPLIT(FX_PRETOK_GPT2, "Hello  world", "Hello", " ", " world");
    SPLIT(FX_PRETOK_GPT2, "a   ", "a", "   ");
    /* digits in one run, any length */
    SPLIT(FX_PRETOK_GPT2, "123 4567x", "123", " 4567", "x");
    /* newlines are whitespace like any other */
    SPLIT(FX_PRETOK_GPT2, "a\n\nb", "a", "\n", "\n", "b");
    SPLIT(FX_PRETOK_GPT2, "x?! (y)", "x", "?!", " (", "y", ")");
    SPLIT(FX_PRETOK_GPT2, "\xc3\xa9t\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87", "\xc3\xa9t\xc3\xa9", " \xe4\xb8\xad\xe6\x96\x87");
    /* a tab does not prefix a word the way a space does */
    SPLIT(FX_PRETOK_GPT2, "\tword", "\t", "word");
}

static void test_llama3(void **state) {
    (void)state;
    /* contractions, case-insensitive */
    SPLIT(FX_PRETOK_LLAMA3, "I'm here, they'll go", "I", "'m", " here", ",", " they", "'ll", " go");
    SPLIT(FX_PRETOK_LLAMA3, "I'M YOU'LL WE'VE HE'D IT'S", "I", "'M", " YOU", "'LL", " WE", "'VE", " HE", "'D", " IT",
          "'S");
    SPLIT(FX_PRETOK_LLAMA3, "'x 're", "'x", " '", "re");
    /* digits in groups of up to three, from the left */
    SPLIT(FX_PRETOK_LLAMA3, "1234567", "123", "456", "7");
    SPLIT(FX_PRETOK_LLAMA3, " 12345", " ", "123", "45");
    SPLIT(FX_PRETOK_LLAMA3, "abc123def", "abc", "123", "def");
    /* any one non-letter, non-digit, non-newline character prefixes a word */
    SPLIT(FX_PRETOK_LLAMA3, "\tword $x", "\tword", " $", "x");
    /* a whitespace run ends after its last line break */
    SPLIT(FX_PRETOK_LLAMA3, "hello\n\nworld", "hello", "\n\n", "world");
    SPLIT(FX_PRETOK_LLAMA3, "a  \n  b", "a", "  \n", " ", " b");
    /* punctuation takes the line breaks after it */
    SPLIT(FX_PRETOK_LLAMA3, "end...\n\nNext", "end", "...\n\n", "Next");
    SPLIT(FX_PRETOK_LLAMA3, "$$$ 100", "$$$", " ", "100");
    SPLIT(FX_PRETOK_LLAMA3, "\xc3\x9cn\xc3\xaf" "c\xc3\xb6" "d\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac", "\xc3\x9cn\xc3\xaf" "c\xc3\xb6" "d\xc3\xa9",
          " \xe6\x97\xa5\xe6\x9c\xac");
    /* trailing whitespace stays one piece */
    SPLIT(FX_PRETOK_LLAMA3, "x  ", "x", "  ");
}

static void test_qwen2(void **state) {
    (void)state;
    /* as llama3, but every digit alone */
    SPLIT(FX_PRETOK_QWEN2, "1234 abc", "1", "2", "3", "4", " abc");
    SPLIT(FX_PRETOK_QWEN2, "I'LL x'Re", "I", "'LL", " x", "'Re");
    SPLIT(FX_PRETOK_QWEN2, "v2.10", "v", "2", ".", "1", "0");
    SPLIT(FX_PRETOK_QWEN2, "a\r\n\r\nb", "a", "\r\n\r\n", "b");
}

static void test_smollm(void **state) {
    (void)state;
    /* digits are split off first, one each; then gpt-2 inside the rest,
     * so a space before a number stays alone */
    SPLIT(FX_PRETOK_SMOLLM, "abc 123", "abc", " ", "1", "2", "3");
    SPLIT(FX_PRETOK_SMOLLM, "x\xc2\xb2+1", "x", "\xc2\xb2", "+", "1"); /* U+00B2 is \p{N} */
    SPLIT(FX_PRETOK_SMOLLM, "I'm", "I", "'m");
    SPLIT(FX_PRETOK_SMOLLM, "I'M", "I", "'", "M");
}

static void test_default(void **state) {
    (void)state;
    SPLIT(FX_PRETOK_DEFAULT, "Hello, world!!! 12345", "Hello", ",", " world", "!!!", " ", "123", "45");
    SPLIT(FX_PRETOK_DEFAULT, "a+b=c", "a", "+", "b", "=", "c");
    SPLIT(FX_PRETOK_DEFAULT, "x 1234567", "x", " ", "123", "456", "7");
}

static void test_invalid_utf8(void **state) {
    (void)state;
    /* each byte that starts no valid sequence counts as one U+FFFD, a
     * symbol: it joins neighbouring punctuation, not letters */
    SPLIT(FX_PRETOK_GPT2, "ab\xff" "cd", "ab", "\xff", "cd");
    SPLIT(FX_PRETOK_GPT2, "a\xe4\xb8", "a", "\xe4\xb8");            /* truncated */
    SPLIT(FX_PRETOK_LLAMA3, "a\xc0\x80!", "a", "\xc0\x80!");        /* overlong NUL */
    SPLIT(FX_PRETOK_LLAMA3, "x \xed\xa0\x80", "x", " \xed\xa0\x80"); /* surrogate */
    SPLIT(FX_PRETOK_QWEN2, "\x80\x80\x80", "\x80\x80\x80");         /* stray continuations */
    static const char nul[] = "a\0b";
    /* NUL is a control character: a piece of its own between letters */
    fx_alloc alloc;
    fx_alloc_init(&alloc, NULL);
    size_t *ends = NULL, n = 0;
    assert_int_equal(fx_pretok_split(FX_PRETOK_GPT2, &alloc, nul, 3, &ends, &n, NULL), FX_OK);
    assert_int_equal(n, 3);
    assert_int_equal(ends[0], 1);
    assert_int_equal(ends[1], 2);
    assert_int_equal(ends[2], 3);
    fx_free(&alloc, ends);
}

/* The pre-tokenizers that run on regex.c's expressions, each split worked
 * out from llama.cpp's expression by hand. */
static void test_regex_kinds(void **state) {
    (void)state;
    fx_pretok k;
    assert_true(fx_pretok_from_name("poro-chat", 9, &k));
    assert_int_equal(k, FX_PRETOK_BLOOM);
    assert_true(fx_pretok_from_name("chatglm-bpe", 11, &k));
    assert_int_equal(k, FX_PRETOK_LLAMA3);
    /* " ?[^(\s|.,!?...)]+": a space joins a run, the listed marks and
     * parentheses stay between runs, consecutive ones one piece */
    SPLIT(FX_PRETOK_BLOOM, "Hello, world! (yes)", "Hello", ",", " world", "! (", "yes", ")");
    SPLIT(FX_PRETOK_VIKING, "abc123 x", "abc", "1", "2", "3", " x");
    /* camel case cut before each capital that starts a lower-case run;
     * an all-caps word by the second alternative */
    SPLIT(FX_PRETOK_TEKKEN, "HelloWorld ALLCAPS x9", "Hello", "World", " ALLCAPS", " x", "9");
    /* digits in threes first, CJK runs, then the llama3-like rest */
    SPLIT(FX_PRETOK_DEEPSEEK3, "abc 12345 \xe4\xb8\xad\xe6\x96\x87 x!", "abc", " ", "123", "45", " ",
          "\xe4\xb8\xad\xe6\x96\x87", " x", "!");
    /* \s sees whitespace beyond ASCII (U+3000), \p{L} letters beyond it */
    SPLIT(FX_PRETOK_DEEPSEEK_CODER, "\xc3\xa9t\xc3\xa9\xe3\x80\x80ok", "\xc3\xa9t\xc3\xa9",
          "\xe3\x80\x80ok");
}

/* A search that would be quadratic ("\s+$" tried from every space of a
 * long run that does not reach the end) stops at its step budget and
 * leaves the rest one piece: it ends, and the pieces still cover the
 * text. */
static void test_regex_budget(void **state) {
    (void)state;
    fx_alloc alloc;
    assert_int_equal(fx_alloc_init(&alloc, NULL), FX_OK);
    enum { SPACES = 200000 };
    char *text = malloc(SPACES + 4);
    assert_non_null(text);
    memset(text, ' ', SPACES);
    memcpy(text + SPACES, "\xe4\xb8\xad", 3);
    size_t *ends = NULL, n = 0;
    assert_int_equal(fx_pretok_split(FX_PRETOK_DEEPSEEK_LLM, &alloc, text, SPACES + 3, &ends, &n, NULL), FX_OK);
    assert_true(n >= 1);
    for (size_t i = 1; i < n; i++) assert_true(ends[i] > ends[i - 1]);
    assert_int_equal(ends[n - 1], SPACES + 3);
    fx_free(&alloc, ends);
    free(text);
}

/* Expressions outside what regex.c takes are refused when compiled (the
 * library's own tables are compiled by the tests above). */
static void test_regex_compile(void **state) {
    (void)state;
    fx_alloc alloc;
    assert_int_equal(fx_alloc_init(&alloc, NULL), FX_OK);
    const char *bad[] = {"(ab)+", "a+?", "\\d", "[z-a]", "(a", "[ab", "a{3,2}", "*a", ".", "\\p{Q}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        fx_rx *rx = NULL;
        fx_error err;
        if (fx_rx_compile(&alloc, bad[i], &rx, &err) != FX_ERR_INTERNAL) fail_msg("'%s' compiled", bad[i]);
        assert_null(rx);
    }
    fx_rx *rx = NULL;
    assert_int_equal(fx_rx_compile(&alloc, "(?:ab){0,0}x{2,3}(?!y)|[^\\s]", &rx, NULL), FX_ERR_INTERNAL);
    assert_int_equal(fx_rx_compile(&alloc, "x{2,3}(?!y)|[^\\s]$", &rx, NULL), FX_OK);
    uint32_t sym[6] = {'x', 'x', 'x', 'y', 'a', 'x'};
    size_t ends[12];
    /* "xxx" then y: (?!y) fails after 3 x, so 2 x; then "x" + "y"? no:
     * [^\s]$ needs the end, so "xy" stays between; "ax"? [^\s]$ only
     * the last */
    size_t n = fx_rx_split(rx, sym, 6, 0, ends, 0);
    const size_t want[] = {2, 5, 6};
    assert_int_equal(n, 3);
    for (size_t i = 0; i < n; i++) assert_int_equal(ends[i], want[i]);
    fx_rx_free(rx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),   cmocka_unit_test(test_empty),   cmocka_unit_test(test_gpt2),
        cmocka_unit_test(test_llama3),  cmocka_unit_test(test_qwen2),   cmocka_unit_test(test_smollm),
        cmocka_unit_test(test_default), cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_regex_kinds), cmocka_unit_test(test_regex_budget),
        cmocka_unit_test(test_regex_compile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
