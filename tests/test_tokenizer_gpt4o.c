/*
 * The gpt-4o pre-tokenizer (tokenizer.ggml.pre "gpt-4o", "llama4", ...)
 * against llama.cpp: tests/data/pretok/gpt4o.out holds the pieces
 * llama.cpp's unicode_regex_split gives for each line of gpt4o.inp (see
 * the README there), and every piece must match. Then the regex.c
 * feature it needs (an optional group) and text built to make the
 * expression backtrack.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "test_util.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab_impl.h"

static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    fail_msg("bad hex digit '%c' in gpt4o.inp", c);
    return 0;
}

/* One line of gpt4o.inp, escapes undone, into out; returns its length. */
static size_t unescape(const char *s, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\') {
            out[o++] = s[i];
            continue;
        }
        assert_true(i + 1 < n);
        char c = s[++i];
        if (c == 'n') out[o++] = '\n';
        else if (c == 'r') out[o++] = '\r';
        else if (c == 't') out[o++] = '\t';
        else if (c == '\\') out[o++] = '\\';
        else if (c == 'x') {
            assert_true(i + 2 < n);
            out[o++] = (char)(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2]));
            i += 2;
        } else {
            fail_msg("bad escape '\\%c' in gpt4o.inp", c);
        }
    }
    return o;
}

/* A piece as gpt4o.out writes it: "[...]", escaped (README). */
static size_t escape_piece(const unsigned char *p, size_t n, char *out) {
    size_t o = 0;
    out[o++] = '[';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = p[i];
        if (c == '\n') o += (size_t)sprintf(out + o, "\\n");
        else if (c == '\r') o += (size_t)sprintf(out + o, "\\r");
        else if (c == '\t') o += (size_t)sprintf(out + o, "\\t");
        else if (c == '\\') o += (size_t)sprintf(out + o, "\\\\");
        else if (c >= 0x20 && c < 0x7F && c != '[' && c != ']') out[o++] = (char)c;
        else o += (size_t)sprintf(out + o, "\\x%02x", c);
    }
    out[o++] = ']';
    out[o] = '\0';
    return o;
}

static void test_names(void **state) {
    (void)state;
    /* every name llama.cpp gives this expression */
    static const char *const names[] = {"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        fx_pretok k = FX_PRETOK_NONE;
        assert_true(fx_pretok_from_name(names[i], strlen(names[i]), &k));
        assert_int_equal(k, FX_PRETOK_GPT4O);
    }
    fx_pretok k;
    assert_false(fx_pretok_from_name("gpt-4", 5, &k));
    assert_false(fx_pretok_from_name("gpt-4o-mini", 11, &k));
}

static void test_llama_cpp_splits(void **state) {
    (void)state;
    size_t in_len = 0, out_len = 0;
    char *in = fx_test_read_file(fx_test_data_path("pretok/gpt4o.inp"), &in_len);
    char *want = fx_test_read_file(fx_test_data_path("pretok/gpt4o.out"), &out_len);
    assert_non_null(in);
    assert_non_null(want);
    fx_alloc alloc;
    assert_int_equal(fx_alloc_init(&alloc, NULL), FX_OK);
    char *text = malloc(in_len + 1), *got = malloc(4 * in_len + 2 * out_len + 16);
    assert_non_null(text);
    assert_non_null(got);
    size_t lines = 0, pieces = 0;
    const char *ip = in, *wp = want;
    while (ip < in + in_len) {
        const char *ie = memchr(ip, '\n', (size_t)(in + in_len - ip));
        const char *we = memchr(wp, '\n', (size_t)(want + out_len - wp));
        assert_non_null(ie);
        if (!we) fail_msg("gpt4o.out has fewer lines than gpt4o.inp (%zu)", lines);
        size_t len = unescape(ip, (size_t)(ie - ip), text);
        size_t *ends = NULL, n = 0;
        fx_error err;
        assert_int_equal(fx_pretok_split(FX_PRETOK_GPT4O, &alloc, text, len, &ends, &n, &err), FX_OK);
        size_t g = 0, start = 0;
        for (size_t i = 0; i < n; i++) {
            g += escape_piece((const unsigned char *)text + start, ends[i] - start, got + g);
            start = ends[i];
        }
        fx_free(&alloc, ends);
        if (g != (size_t)(we - wp) || memcmp(got, wp, g) != 0)
            fail_msg("line %zu '%.*s':\n  ferrox    %s\n  llama.cpp %.*s", lines + 1, (int)(ie - ip), ip, got,
                     (int)(we - wp), wp);
        lines++;
        pieces += n;
        ip = ie + 1;
        wp = we + 1;
    }
    assert_true(wp == want + out_len); /* as many lines in both */
    assert_true(lines >= 50);
    assert_true(pieces > 300);
    free(got);
    free(text);
    free(in);
    free(want);
}

/* The expression's contractions are an optional group, (?:'[sS]|...)?:
 * regex.c takes a group with ? (it recurses once, whatever the text), but
 * still no other repeat of a group. */
static void test_optional_group(void **state) {
    (void)state;
    fx_alloc alloc;
    assert_int_equal(fx_alloc_init(&alloc, NULL), FX_OK);
    fx_rx *rx = NULL;
    const char *bad[] = {"(?:ab)*", "(?:ab)+", "(?:ab){0,1}", "(?:ab)??", "(ab){2}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        if (fx_rx_compile(&alloc, bad[i], &rx, NULL) != FX_ERR_INTERNAL) fail_msg("'%s' compiled", bad[i]);
        assert_null(rx);
    }
    assert_int_equal(fx_rx_compile(&alloc, "x(?:'[sS]|'ll)?|'", &rx, NULL), FX_OK);
    /* x's, x'll, x then ' (no 'l) and l between matches, x'S, ' */
    const uint32_t sym[] = {'x', '\'', 's', 'x', '\'', 'l', 'l', 'x', '\'', 'l', 'x', '\'', 'S', '\''};
    size_t ends[32];
    size_t n = fx_rx_split(rx, sym, 14, 0, ends, 0);
    const size_t want[] = {3, 7, 8, 9, 10, 13, 14};
    assert_int_equal(n, sizeof want / sizeof *want);
    for (size_t i = 0; i < n; i++) assert_int_equal(ends[i], want[i]);
    fx_rx_free(rx);
    /* "abc" leaves no b after it: the group is given back, "ab" */
    assert_int_equal(fx_rx_compile(&alloc, "a(?:bc)?b", &rx, NULL), FX_OK);
    const uint32_t s2[] = {'a', 'b', 'c', 'a', 'b', 'c', 'b'};
    n = fx_rx_split(rx, s2, 7, 0, ends, 0);
    const size_t want2[] = {2, 3, 7};
    assert_int_equal(n, sizeof want2 / sizeof *want2);
    for (size_t i = 0; i < n; i++) assert_int_equal(ends[i], want2[i]);
    fx_rx_free(rx);
}

/* Long runs made to backtrack -- capitals given back one at a time
 * looking for a small letter, letters of both cases (beyond ASCII), marks,
 * apostrophes, spaces given back looking for a line break -- each run
 * followed by three short words. Were regex.c's step budget
 * (docs/reliability.md 18) spent in the run, the words after it would
 * stay one piece: the exact split proves the expression stays inside it.
 * Pieces as llama.cpp splits the same units repeated a few times. */
static void test_hostile_runs(void **state) {
    (void)state;
    enum { REPS = 100000 };
    static const struct {
        const char *unit, *tail;
        size_t run_pieces;   /* pieces before the tail's last n_tail */
        size_t n_tail;
        size_t back[4];      /* where those end, counted from the end */
    } k_cases[] = {
        {"A", " ab cd ef", 1, 3, {6, 3, 0}},
        {"\xc3\x80", " ab cd ef", 1, 3, {6, 3, 0}},                 /* A-grave: both cases */
        {"\xcc\x81", " ab cd ef", 1, 3, {6, 3, 0}},                 /* a mark: no letter */
        {"'", " ab cd ef", 1, 3, {6, 3, 0}},
        {" ", "\xcc\x81 ab cd ef", 1, 4, {9, 6, 3, 0}},             /* spaces but one, space+mark, words */
        {"AB'", " ab cd ef", REPS + 1, 3, {6, 3, 0}},                /* [AB]['AB]...['] */
        {"\xc3\x80\xcc\x81", " ab cd ef", REPS + 1, 3, {6, 3, 0}}, /* [A`] [mark A`]... [mark] */
        {"'S'T", " ab cd ef", REPS, 3, {6, 3, 0}},                   /* ['S'T]... */
        {"'s", " ab cd ef", REPS / 2, 3, {6, 3, 0}},                 /* ['s's]... */
        {"aA", " ab cd ef", REPS + 1, 3, {6, 3, 0}},                 /* [a][Aa]...[A] */
    };
    fx_alloc alloc;
    assert_int_equal(fx_alloc_init(&alloc, NULL), FX_OK);
    for (size_t c = 0; c < sizeof k_cases / sizeof *k_cases; c++) {
        const char *unit = k_cases[c].unit, *tail = k_cases[c].tail;
        size_t ul = strlen(unit), tl = strlen(tail), len = ul * REPS + tl;
        char *text = malloc(len);
        assert_non_null(text);
        for (size_t i = 0; i < REPS; i++) memcpy(text + i * ul, unit, ul);
        memcpy(text + ul * REPS, tail, tl);
        size_t *ends = NULL, n = 0;
        assert_int_equal(fx_pretok_split(FX_PRETOK_GPT4O, &alloc, text, len, &ends, &n, NULL), FX_OK);
        const size_t n_tail = k_cases[c].n_tail;
        if (n != k_cases[c].run_pieces + n_tail)
            fail_msg("'%s' x %d + '%s': %zu pieces, want %zu", unit, REPS, tail, n, k_cases[c].run_pieces + n_tail);
        for (size_t i = 0; i < n_tail; i++) assert_int_equal(ends[n - n_tail + i], len - k_cases[c].back[i]);
        fx_free(&alloc, ends);
        free(text);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_llama_cpp_splits),
        cmocka_unit_test(test_optional_group),
        cmocka_unit_test(test_hostile_runs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
