/*
 * The text layer: the per-row UTF-8 stream, the stop matcher and the
 * pipeline the batcher runs them in (docs/reliability.md section D, 27-31).
 *
 * Every chunk either layer releases is checked with a validator written
 * here from the Unicode well-formed byte sequence table (Table 3-7), not
 * with the library's own decoder.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "text/text.h"

#define FFFD "\xEF\xBF\xBD"

/* Unicode Table 3-7, row by row. */
static int well_formed(const char *s, size_t len) {
    const uint8_t *p = (const uint8_t *)s;
    size_t i = 0;
    while (i < len) {
        uint8_t b = p[i];
        size_t n;
        uint8_t lo = 0x80, hi = 0xBF;
        if (b <= 0x7F) { i++; continue; }
        else if (b >= 0xC2 && b <= 0xDF) n = 2;
        else if (b == 0xE0) { n = 3; lo = 0xA0; }
        else if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) n = 3;
        else if (b == 0xED) { n = 3; hi = 0x9F; }
        else if (b == 0xF0) { n = 4; lo = 0x90; }
        else if (b >= 0xF1 && b <= 0xF3) n = 4;
        else if (b == 0xF4) { n = 4; hi = 0x8F; }
        else return 0;
        if (len - i < n) return 0;
        if (p[i + 1] < lo || p[i + 1] > hi) return 0;
        for (size_t k = 2; k < n; k++)
            if (p[i + k] < 0x80 || p[i + k] > 0xBF) return 0;
        i += n;
    }
    return 1;
}

static fx_alloc libc_alloc(void) {
    fx_alloc a;
    assert_int_equal(fx_alloc_init(&a, NULL), FX_OK);
    return a;
}

/* ---- the UTF-8 stream ---- */

/* Decodes `in`, cut at the positions whose bit is set in `cuts` (bit k:
 * cut after byte k), checking each chunk, and returns the whole output. */
static size_t utf8_split(const char *in, size_t len, uint64_t cuts, char *out) {
    fx_utf8 u;
    fx_utf8_init(&u);
    size_t o = 0, start = 0;
    for (size_t k = 0; k < len; k++) {
        if (k + 1 == len || (cuts >> k) & 1) {
            char chunk[64];
            assert_true(fx_utf8_push_bound(k + 1 - start) <= sizeof chunk);
            size_t n = fx_utf8_push(&u, in + start, k + 1 - start, chunk);
            assert_true(well_formed(chunk, n));
            memcpy(out + o, chunk, n);
            o += n;
            start = k + 1;
        }
    }
    char tail[3];
    size_t n = fx_utf8_flush(&u, tail);
    memcpy(out + o, tail, n);
    return o + n;
}

/* docs/reliability.md 27: multibyte characters split across 1..n tokens at every
 * split point come out whole, and no chunk ends inside one. */
static void test_utf8_every_split(void **state) {
    (void)state;
    static const char *cases[] = {
        "\xF0\x9F\x98\x80",               /* U+1F600, 4 bytes */
        "\xF4\x8F\xBF\xBF",               /* U+10FFFF */
        "\xE2\x82\xAC",                   /* U+20AC, 3 bytes */
        "\xC3\xA9",                       /* U+00E9, 2 bytes */
        ("a\xF0\x9F\x98\x80\xC3\xA9\xE2\x82\xAC" "b"),
        "\xF0\x90\x80\x80\xF0\x9F\x98\x80",
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        size_t len = strlen(cases[c]);
        for (uint64_t cuts = 0; cuts < (1ull << (len - 1)); cuts++) {
            char out[64];
            size_t n = utf8_split(cases[c], len, cuts, out);
            assert_int_equal(n, len);
            assert_memory_equal(out, cases[c], len);
        }
    }
    /* The 4-byte character in exactly 1, 2, 3 and 4 tokens: nothing comes
     * out until its last byte arrives. */
    fx_utf8 u;
    fx_utf8_init(&u);
    char out[16];
    assert_int_equal(fx_utf8_push(&u, "\xF0", 1, out), 0);
    assert_int_equal(fx_utf8_push(&u, "\x9F", 1, out), 0);
    assert_int_equal(fx_utf8_push(&u, "\x98", 1, out), 0);
    assert_int_equal(fx_utf8_push(&u, "\x80", 1, out), 4);
    assert_memory_equal(out, "\xF0\x9F\x98\x80", 4);
    assert_int_equal(fx_utf8_flush(&u, out), 0);
}

/* docs/reliability.md 30, and the documented U+FFFD count (maximal subparts). */
static void test_utf8_invalid(void **state) {
    (void)state;
#define C(in, want) {in, sizeof(in) - 1, want, sizeof(want) - 1}
    static const struct {
        const char *in;
        size_t len;
        const char *want;
        size_t want_len;
    } cases[] = {
        C("\x80", FFFD),
        C("a\x80\xBF" "b", "a" FFFD FFFD "b"),
        C("\xFF", FFFD),
        C("\xFE\xFF", FFFD FFFD),
        C("\xC0\xAF", FFFD FFFD),                   /* overlong '/' */
        C("\xC1\xBF", FFFD FFFD),
        C("\xE0\x80\xAF", FFFD FFFD FFFD),          /* overlong */
        C("\xF0\x80\x80\xAF", FFFD FFFD FFFD FFFD), /* overlong */
        C("\xED\xA0\x80", FFFD FFFD FFFD),          /* surrogate D800 */
        C("\xED\xBF\xBF", FFFD FFFD FFFD),          /* surrogate DFFF */
        C("\xF4\x90\x80\x80", FFFD FFFD FFFD FFFD), /* U+110000 */
        C("\xF5\x80", FFFD FFFD),
        C("\xF0\x9F\x98x", FFFD "x"),               /* one per subpart */
        C("\xE2\x82" "\xE2\x82\xAC", FFFD "\xE2\x82\xAC"),
        C("\xC3\xC3\xA9", FFFD "\xC3\xA9"),
        C("\xE2\x82", FFFD),                        /* cut off: flush */
        C("\xF0\x9F\x98", FFFD),
        C("a\0b", "a\0b"),                          /* NUL is valid */
        C("\xEF\xBF\xBD", FFFD),                    /* U+FFFD itself */
        /* The example of Unicode 15 section 3.9 (after Table 3-11). */
        C("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64", "a" FFFD FFFD FFFD "b" FFFD "c" FFFD FFFD "d"),
    };
#undef C
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        size_t want_len = cases[c].want_len;
        char whole[64], bytewise[64];
        size_t n1 = utf8_split(cases[c].in, cases[c].len, 0, whole);
        size_t n2 = utf8_split(cases[c].in, cases[c].len, ~0ull, bytewise);
        assert_int_equal(n1, want_len);
        assert_memory_equal(whole, cases[c].want, want_len);
        assert_int_equal(n2, want_len);
        assert_memory_equal(bytewise, cases[c].want, want_len);
        assert_true(well_formed(whole, n1));
        assert_int_equal(fx_utf8_valid(cases[c].in, cases[c].len),
                         cases[c].len == want_len &&
                             memcmp(cases[c].in, cases[c].want, want_len) == 0);
    }
}

/* ---- running the pipeline ---- */

typedef struct run_result {
    char text[4096];
    size_t len;
    int64_t stopped;
    size_t chunks;
} run_result;

/* Feeds `pieces` through a fresh fx_textout and collects every chunk,
 * checking each one is well formed. */
static void run_pieces(const char *const *stops, size_t n_stops,
                       const char *const *pieces, const size_t *lens,
                       size_t n_pieces, run_result *r) {
    fx_alloc alloc = libc_alloc();
    fx_textout *t = NULL;
    fx_error err = {{0}};
    assert_int_equal(fx_textout_create(&alloc, stops, NULL, n_stops, &t, &err),
                     FX_OK);
    fx_textbuf out;
    fx_textbuf_init(&out, &alloc);
    r->len = 0;
    r->chunks = 0;
    for (size_t i = 0; i <= n_pieces; i++) {
        out.len = 0;
        if (i < n_pieces)
            assert_int_equal(fx_textout_push(t, pieces[i], lens[i], &out, &err),
                             FX_OK);
        else
            assert_int_equal(fx_textout_finish(t, &out, &err), FX_OK);
        assert_true(well_formed(out.data, out.len));
        assert_true(r->len + out.len <= sizeof r->text);
        if (out.len) memcpy(r->text + r->len, out.data, out.len);
        r->len += out.len;
        r->chunks += out.len > 0;
    }
    r->stopped = fx_textout_stopped(t);
    fx_textbuf_free(&out);
    fx_textout_free(t);
}

/* Feeds `text` cut at the bits of `cuts`. */
static void run_split(const char *const *stops, size_t n_stops,
                      const char *text, size_t len, uint64_t cuts,
                      run_result *r) {
    const char *pieces[64];
    size_t lens[64], n = 0, start = 0;
    for (size_t k = 0; k < len; k++) {
        if (k + 1 == len || (cuts >> k) & 1) {
            pieces[n] = text + start;
            lens[n++] = k + 1 - start;
            start = k + 1;
        }
    }
    run_pieces(stops, n_stops, pieces, lens, n, r);
}

static void expect_all_splits(const char *const *stops, size_t n_stops,
                              const char *text, const char *want,
                              int64_t want_stop) {
    size_t len = strlen(text);
    assert_true(len <= 20);
    for (uint64_t cuts = 0; cuts < (1ull << (len - 1)); cuts++) {
        run_result r;
        run_split(stops, n_stops, text, len, cuts, &r);
        if (r.len != strlen(want) || memcmp(r.text, want, r.len) != 0)
            fail_msg("text '%s' cuts %#llx: got '%.*s', want '%s'", text,
                     (unsigned long long)cuts, (int)r.len, r.text, want);
        assert_int_equal(r.stopped, want_stop);
    }
}

/* docs/reliability.md 28: a stop split across tokens at every split point; a stop
 * overlapping itself. */
static void test_stop_every_split(void **state) {
    (void)state;
    const char *end[] = {"<|end|>"};
    expect_all_splits(end, 1, "ab<|end|>cd", "ab", 0);
    expect_all_splits(end, 1, "<|end|>", "", 0);
    expect_all_splits(end, 1, "<|en<|end|>", "<|en", 0);
    const char *aab[] = {"aab"};
    expect_all_splits(aab, 1, "aaab", "a", 0);
    expect_all_splits(aab, 1, "aaaaab", "aaa", 0);
    expect_all_splits(aab, 1, "aaaa", "aaaa", -1);
    const char *abac[] = {"abac"};
    expect_all_splits(abac, 1, "xababacy", "xab", 0);
    /* Multibyte stop, text cut inside its characters too. */
    const char *euro[] = {"\xE2\x82\xAC" "nd"};
    expect_all_splits(euro, 1, "x\xC3\xA9\xE2\x82\xAC" "nd!", "x\xC3\xA9", 0);
    expect_all_splits(euro, 1, "\xE2\x82\xAC" "n\xE2\x82\xAC", "\xE2\x82\xAC" "n\xE2\x82\xAC", -1);
}

/* Several stops, one a prefix or suffix of another: the documented tie
 * rule (earliest end; then longest; then lowest index). */
static void test_stop_tie_rule(void **state) {
    (void)state;
    const char *a[] = {"abcd", "bc"};
    expect_all_splits(a, 2, "xabcd", "xa", 1);          /* bc ends first */
    const char *b[] = {"ab", "b"};
    expect_all_splits(b, 2, "xab", "x", 0);             /* same end: longest */
    const char *c[] = {"b", "ab"};
    expect_all_splits(c, 2, "xab", "x", 1);
    const char *d[] = {"q", "q"};
    expect_all_splits(d, 2, "pq", "p", 0);              /* duplicate: lowest */
    const char *e[] = {"abcdef", "abc"};
    expect_all_splits(e, 2, "abcdef", "", 1);           /* prefix ends first */
    const char *f[] = {"zzz", "abc", "ab"};
    expect_all_splits(f, 3, "1abc", "1", 2);
}

/* docs/reliability.md 29: empty and invalid stop strings are refused at create,
 * naming the index. */
static void test_stop_bad_strings(void **state) {
    (void)state;
    fx_alloc alloc = libc_alloc();
    fx_error err = {{0}};
    static char sentinel;
    fx_stop *m = (fx_stop *)(void *)&sentinel; /* create must clear it */
    const char *empty[] = {"ok", ""};
    assert_int_equal(fx_stop_create(&alloc, empty, NULL, 2, &m, &err),
                     FX_ERR_INVALID_ARG);
    assert_null(m);
    assert_non_null(strstr(err.message, "1"));
    assert_non_null(strstr(err.message, "empty"));
    static const char *bad[] = {"\xFF", "\xC3", "\xC0\xAF", "\xED\xA0\x80",
                                "a\x80", "\xF4\x90\x80\x80"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *one[] = {"fine", bad[i]};
        assert_int_equal(fx_stop_create(&alloc, one, NULL, 2, &m, &err),
                         FX_ERR_INVALID_ARG);
        assert_null(m);
        assert_non_null(strstr(err.message, "UTF-8"));
    }
    const char *null_one[] = {"a", NULL};
    assert_int_equal(fx_stop_create(&alloc, null_one, NULL, 2, &m, &err),
                     FX_ERR_INVALID_ARG);
    fx_textout *t = (fx_textout *)(void *)&sentinel;
    assert_int_equal(fx_textout_create(&alloc, empty, NULL, 2, &t, &err),
                     FX_ERR_INVALID_ARG);
    assert_null(t);
    /* Explicit lengths: a NUL inside a stop string is just a byte. */
    const char *nul[] = {"a\0b"};
    size_t nul_len[] = {3};
    assert_int_equal(fx_stop_create(&alloc, nul, nul_len, 1, &m, &err), FX_OK);
    char out[16];
    size_t n = fx_stop_push(m, "xa", 2, out);
    assert_int_equal(n, 1);
    n = fx_stop_push(m, "\0b", 2, out);
    assert_int_equal(n, 0);
    assert_int_equal(fx_stop_matched(m), 0);
    fx_stop_free(m);
    /* No stops at all: everything passes straight through. */
    assert_int_equal(fx_stop_create(&alloc, NULL, NULL, 0, &m, &err), FX_OK);
    assert_int_equal(fx_stop_push(m, "hello", 5, out), 5);
    assert_int_equal(fx_stop_held(m), 0);
    fx_stop_free(m);
    fx_stop_free(NULL);
    fx_textout_free(NULL);
}

/* docs/reliability.md 29: 5,000 stop strings. The work the automaton does is
 * counted, not timed: it must stay linear in the bytes pushed. Half the
 * stops are runs of 'a' ending in a distinct tail, the worst case for a
 * matcher that compares every stop at every byte, and the input is a long
 * run of near misses. */
static void test_stop_thousands(void **state) {
    (void)state;
    enum { N = 5000, INPUT = 1 << 20 };
    fx_alloc alloc = libc_alloc();
    char (*store)[48] = calloc(N, sizeof *store);
    const char **stops = calloc(N, sizeof *stops);
    assert_non_null(store);
    assert_non_null(stops);
    for (unsigned i = 0; i < N; i++) {
        if (i % 2)
            snprintf(store[i], sizeof store[i], "stop-%05u-\xE2\x82\xAC", i);
        else
            snprintf(store[i], sizeof store[i], "%.*s%c%u", (int)(1 + i / 2 % 40),
                     "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 'b' + (int)(i % 20),
                     i);
        stops[i] = store[i];
    }
    fx_error err = {{0}};
    fx_textout *t = NULL;
    assert_int_equal(fx_textout_create(&alloc, stops, NULL, N, &t, &err), FX_OK);

    /* A megabyte of "aaaa...ab1 stop-0000x-..." near misses, then a real
     * stop at the very end. */
    char *in = malloc(INPUT + 64);
    assert_non_null(in);
    size_t len = 0, part = 0;
    while (len < INPUT) {
        static const char *parts[] = {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                                      "aaab1 ", "stop-0000", "\xC3\xA9 ",
                                      "stop-00001-", "x "};
        const char *p = parts[part++ % 6];
        size_t n = strlen(p);
        memcpy(in + len, p, n);
        len += n;
    }
    size_t prefix = len;
    static const char last[] = "stop-04999-\xE2\x82\xAC tail";
    memcpy(in + len, last, sizeof last - 1);
    len += sizeof last - 1;

    fx_textbuf out;
    fx_textbuf_init(&out, &alloc);
    for (size_t off = 0; off < len; off += 3) {
        size_t n = len - off < 3 ? len - off : 3;
        assert_int_equal(fx_textout_push(t, in + off, n, &out, &err), FX_OK);
    }
    assert_int_equal(fx_textout_finish(t, &out, &err), FX_OK);
    assert_int_equal(fx_textout_stopped(t), 4999);
    assert_int_equal(out.len, prefix);
    assert_memory_equal(out.data, in, prefix);
    assert_true(well_formed(out.data, out.len));
    fx_textbuf_free(&out);
    fx_textout_free(t);

    /* The same stream straight into the matcher, to read its work
     * counter: one transition per byte plus failure links, which can never
     * outnumber the bytes. Comparing each stop at each byte would be
     * N * len = 5e9. */
    fx_stop *m = NULL;
    assert_int_equal(fx_stop_create(&alloc, stops, NULL, N, &m, &err), FX_OK);
    char *sink = malloc(len + 64);
    assert_non_null(sink);
    size_t got = fx_stop_push(m, in, len, sink);
    assert_int_equal(got, prefix);
    assert_int_equal(fx_stop_matched(m), 4999);
    assert_true(fx_stop_work(m) <= 2 * (uint64_t)len);
    fx_stop_free(m);
    free(sink);
    free(in);
    free(stops);
    free(store);
}

/* docs/reliability.md 31: text that begins like a stop and then does not finish it
 * is held only while it could still be one, and then released in full. */
static void test_stop_near_miss(void **state) {
    (void)state;
    fx_alloc alloc = libc_alloc();
    fx_error err = {{0}};
    const char *stops[] = {"</answer>"};
    fx_stop *m = NULL;
    assert_int_equal(fx_stop_create(&alloc, stops, NULL, 1, &m, &err), FX_OK);
    char out[64];
    size_t n = fx_stop_push(m, "a </ans", 7, out);
    assert_int_equal(n, 2);
    assert_memory_equal(out, "a ", 2);
    assert_int_equal(fx_stop_held(m), 5);
    n = fx_stop_push(m, "wex", 3, out); /* "</answex": not a stop after all */
    assert_int_equal(n, 8);
    assert_memory_equal(out, "</answex", 8);
    assert_int_equal(fx_stop_held(m), 0);
    n = fx_stop_push(m, " <</", 4, out); /* "<" then "</": held from the 2nd */
    assert_int_equal(n, 2);
    assert_memory_equal(out, " <", 2);
    n = fx_stop_flush(m, out);            /* the row ends: nothing lost */
    assert_int_equal(n, 2);
    assert_memory_equal(out, "</", 2);
    assert_int_equal(fx_stop_matched(m), -1);
    fx_stop_free(m);

    /* Through the pipeline, the tail withheld against the stop comes out
     * at finish. */
    const char *pieces[] = {"The answer", " is 4 </", "answ"};
    size_t lens[] = {10, 8, 4};
    run_result r;
    run_pieces(stops, 1, pieces, lens, 3, &r);
    assert_int_equal(r.len, 22);
    assert_memory_equal(r.text, "The answer is 4 </answ", 22);
    assert_int_equal(r.stopped, -1);
}

/* The hold-back never releases half a character, even when the matcher's
 * own caller splits one across pushes. */
static void test_stop_hold_whole_chars(void **state) {
    (void)state;
    fx_alloc alloc = libc_alloc();
    fx_error err = {{0}};
    const char *stops[] = {"\xE2\x82\xAC\xE2\x82\xAC"}; /* "€€" */
    fx_stop *m = NULL;
    assert_int_equal(fx_stop_create(&alloc, stops, NULL, 1, &m, &err), FX_OK);
    char out[64];
    size_t n = fx_stop_push(m, "a\xC3", 2, out);
    assert_int_equal(n, 1);
    n = fx_stop_push(m, "\xA9\xE2\x82", 3, out); /* é, then a held € prefix */
    assert_int_equal(n, 2);
    assert_memory_equal(out, "\xC3\xA9", 2);
    n = fx_stop_push(m, "\xAC\xE2", 2, out);     /* "€" + prefix of "€": held */
    assert_int_equal(n, 0);
    n = fx_stop_push(m, "\x82\xAC", 2, out);
    assert_int_equal(n, 0);
    assert_int_equal(fx_stop_matched(m), 0);
    n = fx_stop_push(m, "more", 4, out);         /* after the stop: nothing */
    assert_int_equal(n, 0);
    assert_int_equal(fx_stop_flush(m, out), 0);
    fx_stop_free(m);
}

/* Invariant 9: a row cut off mid-character flushes U+FFFD, and that
 * U+FFFD goes through the stop matcher. */
static void test_finish_fffd_through_stop(void **state) {
    (void)state;
    const char *stops[] = {"x" FFFD};
    const char *p1[] = {"ab x", "\xE2\x82"};
    size_t l1[] = {4, 2};
    run_result r;
    run_pieces(stops, 1, p1, l1, 2, &r);
    assert_int_equal(r.len, 3);
    assert_memory_equal(r.text, "ab ", 3);
    assert_int_equal(r.stopped, 0);

    const char *none[] = {"zz"};
    const char *p2[] = {"ab", "\xF0\x9F"};
    size_t l2[] = {2, 2};
    run_pieces(none, 1, p2, l2, 2, &r);
    assert_int_equal(r.len, 5);
    assert_memory_equal(r.text, "ab" FFFD, 5);
    assert_int_equal(r.stopped, -1);

    /* docs/reliability.md 30 through the pipeline: whatever bytes the model emits,
     * every chunk is valid UTF-8 (run_pieces checks each one). */
    const char *p3[] = {"\x80", "\xFF", "a\xBF\xBF", "\xC3", "\xFE", "z"};
    size_t l3[] = {1, 1, 3, 1, 1, 1};
    run_pieces(none, 1, p3, l3, 6, &r);
    const char *want = FFFD FFFD "a" FFFD FFFD FFFD FFFD "z";
    assert_int_equal(r.len, strlen(want));
    assert_memory_equal(r.text, want, r.len);
}

/* After the stop fires, later pieces and finish add nothing; finish twice
 * is harmless. */
static void test_after_stop(void **state) {
    (void)state;
    fx_alloc alloc = libc_alloc();
    fx_error err = {{0}};
    const char *stops[] = {"END"};
    fx_textout *t = NULL;
    assert_int_equal(fx_textout_create(&alloc, stops, NULL, 1, &t, &err), FX_OK);
    fx_textbuf out;
    fx_textbuf_init(&out, &alloc);
    assert_int_equal(fx_textout_push(t, "fooEN", 5, &out, &err), FX_OK);
    assert_int_equal(out.len, 3);
    assert_int_equal(fx_textout_push(t, "D bar\xE2", 6, &out, &err), FX_OK);
    assert_int_equal(out.len, 3);
    assert_int_equal(fx_textout_stopped(t), 0);
    assert_int_equal(fx_textout_push(t, "more", 4, &out, &err), FX_OK);
    assert_int_equal(fx_textout_finish(t, &out, &err), FX_OK);
    assert_int_equal(fx_textout_finish(t, &out, &err), FX_OK);
    assert_int_equal(out.len, 3);
    assert_memory_equal(out.data, "foo", 3);
    assert_int_equal(fx_textout_push(NULL, "x", 1, &out, &err), FX_ERR_INVALID_ARG);
    fx_textbuf_free(&out);
    fx_textout_free(t);
}

/* A piece far larger than the pipeline's scratch block, with long stops. */
static void test_large_piece(void **state) {
    (void)state;
    fx_alloc alloc = libc_alloc();
    fx_error err = {{0}};
    enum { L = 100000 };
    char *big = malloc(L + 1);
    assert_non_null(big);
    for (size_t i = 0; i < L; i++) big[i] = (char)((i % 7 == 6) ? 0xFF : 'a' + (int)(i % 5));
    big[L] = 0;
    char longstop[1001];
    memset(longstop, 'a', 1000);
    longstop[1000] = 0;
    const char *stops[] = {longstop, "\xC3\xA9"};
    fx_textout *t = NULL;
    assert_int_equal(fx_textout_create(&alloc, stops, NULL, 2, &t, &err), FX_OK);
    fx_textbuf out;
    fx_textbuf_init(&out, &alloc);
    assert_int_equal(fx_textout_push(t, big, L, &out, &err), FX_OK);
    assert_int_equal(fx_textout_finish(t, &out, &err), FX_OK);
    assert_true(well_formed(out.data, out.len));
    size_t bad = L / 7;
    assert_int_equal(out.len, L - bad + 3 * bad);
    assert_int_equal(fx_textout_stopped(t), -1);
    fx_textout_free(t);

    /* Characters straddling the 256-byte blocks a piece is decoded in:
     * 3-byte ones, so block edges fall inside them. */
    for (size_t i = 0; i + 3 <= L; i += 3) memcpy(big + i, "\xE2\x82\xAC", 3);
    size_t euros = L / 3 * 3;
    const char *none[] = {"\xE2\x82\xAC" "x"};
    assert_int_equal(fx_textout_create(&alloc, none, NULL, 1, &t, &err), FX_OK);
    out.len = 0;
    assert_int_equal(fx_textout_push(t, big, euros, &out, &err), FX_OK);
    assert_int_equal(fx_textout_finish(t, &out, &err), FX_OK);
    assert_int_equal(out.len, euros);
    assert_memory_equal(out.data, big, euros);
    fx_textbuf_free(&out);
    fx_textout_free(t);
    free(big);
}

/* ---- allocation failure ---- */

typedef struct fail_alloc {
    int left; /* allocations to allow before failing */
    int live;
} fail_alloc;

static void *fa_malloc(void *user, size_t n) {
    fail_alloc *f = user;
    if (f->left-- <= 0) return NULL;
    void *p = malloc(n);
    if (p) f->live++;
    return p;
}
static void *fa_realloc(void *user, void *p, size_t n) {
    fail_alloc *f = user;
    if (f->left-- <= 0) return NULL;
    void *q = realloc(p, n);
    if (q && !p) f->live++;
    return q;
}
static void fa_free(void *user, void *p) {
    fail_alloc *f = user;
    if (p) f->live--;
    free(p);
}

/* Every allocation in create can fail; each failure is FX_ERR_NOMEM and
 * leaks nothing. A failed push leaves the row able to continue. */
static void test_alloc_failure(void **state) {
    (void)state;
    const char *stops[] = {"alpha", "beta", "\xE2\x82\xAC"};
    for (int allow = 0;; allow++) {
        fail_alloc f = {allow, 0};
        fx_allocator hooks = {0};
        hooks.malloc_fn = fa_malloc;
        hooks.realloc_fn = fa_realloc;
        hooks.free_fn = fa_free;
        hooks.user = &f;
        fx_alloc alloc;
        assert_int_equal(fx_alloc_init(&alloc, &hooks), FX_OK);
        fx_error err = {{0}};
        fx_textout *t = NULL;
        fx_status st = fx_textout_create(&alloc, stops, NULL, 3, &t, &err);
        if (st == FX_ERR_NOMEM) {
            assert_null(t);
            assert_int_equal(f.live, 0);
            assert_true(allow < 100);
            continue;
        }
        assert_int_equal(st, FX_OK);
        fx_textbuf out;
        fx_textbuf_init(&out, &alloc);
        f.left = 0; /* the output buffer cannot grow */
        assert_int_equal(fx_textout_push(t, "xy", 2, &out, &err), FX_ERR_NOMEM);
        f.left = 1000;
        assert_int_equal(fx_textout_push(t, "xybeta", 6, &out, &err), FX_OK);
        assert_int_equal(out.len, 2);
        assert_memory_equal(out.data, "xy", 2);
        assert_int_equal(fx_textout_stopped(t), 1);
        fx_textbuf_free(&out);
        fx_textout_free(t);
        assert_int_equal(f.live, 0);
        break;
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_utf8_every_split),
        cmocka_unit_test(test_utf8_invalid),
        cmocka_unit_test(test_stop_every_split),
        cmocka_unit_test(test_stop_tie_rule),
        cmocka_unit_test(test_stop_bad_strings),
        cmocka_unit_test(test_stop_thousands),
        cmocka_unit_test(test_stop_near_miss),
        cmocka_unit_test(test_stop_hold_whole_chars),
        cmocka_unit_test(test_finish_fffd_through_stop),
        cmocka_unit_test(test_after_stop),
        cmocka_unit_test(test_large_piece),
        cmocka_unit_test(test_alloc_failure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
