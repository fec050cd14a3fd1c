/*
 * The text pipeline against a reference, on random input.
 *
 * Random text (ASCII, multibyte characters, invalid bytes) with random
 * stop strings, fed in random pieces, must give exactly what feeding it in
 * one piece gives, and both must equal a deliberately simple reference:
 * sanitize the whole text to UTF-8, find the first stop occurrence (the
 * documented tie rule), output what precedes it.
 *
 * The reference sanitizer does not decode. It enumerates every Unicode
 * scalar value, encodes it, and records which byte strings are complete
 * encodings and which are prefixes of one; maximal-subpart replacement is
 * then "the longest prefix of some encoding", read off those tables. So a
 * mistake in the library's decoder state machine cannot be mirrored here.
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
#include "test_rng.h"

#define FFFD "\xEF\xBF\xBD"

/* ---- the reference tables ---- */

typedef struct ref_tables {
    uint8_t pre1[256 / 8];        /* 1-byte strings that begin an encoding */
    uint8_t pre2[65536 / 8];      /* 2-byte ... */
    uint8_t *pre3;                /* [2^24 / 8] 3-byte ... */
    uint8_t full1[256 / 8];       /* complete 1-byte encodings */
    uint8_t full2[65536 / 8];
    uint8_t *full3;               /* [2^24 / 8] */
    uint8_t *full4_by_pre3;       /* [2^24 / 8] 3-byte prefixes of a 4-byte
                                     encoding: then any continuation byte
                                     completes it (checked below) */
} ref_tables;

static void set_bit(uint8_t *bits, uint32_t k) { bits[k >> 3] |= (uint8_t)(1u << (k & 7)); }
static int get_bit(const uint8_t *bits, uint32_t k) { return (bits[k >> 3] >> (k & 7)) & 1; }

static size_t encode(uint32_t cp, uint8_t *b) {
    if (cp < 0x80) { b[0] = (uint8_t)cp; return 1; }
    if (cp < 0x800) {
        b[0] = (uint8_t)(0xC0 | cp >> 6);
        b[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        b[0] = (uint8_t)(0xE0 | cp >> 12);
        b[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        b[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    b[0] = (uint8_t)(0xF0 | cp >> 18);
    b[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    b[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    b[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

static ref_tables *g_ref; /* built once by the group setup; tests only */

static int build_ref(void **state) {
    (void)state;
    ref_tables *r = calloc(1, sizeof *r);
    if (!r) return -1;
    r->pre3 = calloc(1u << 21, 1);
    r->full3 = calloc(1u << 21, 1);
    r->full4_by_pre3 = calloc(1u << 21, 1);
    if (!r->pre3 || !r->full3 || !r->full4_by_pre3) return -1;
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp++) {
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        uint8_t b[4];
        size_t n = encode(cp, b);
        set_bit(r->pre1, b[0]);
        if (n == 1) set_bit(r->full1, b[0]);
        if (n >= 2) set_bit(r->pre2, (uint32_t)b[0] << 8 | b[1]);
        if (n == 2) set_bit(r->full2, (uint32_t)b[0] << 8 | b[1]);
        uint32_t k3 = (uint32_t)b[0] << 16 | (uint32_t)b[1] << 8 | b[2];
        if (n >= 3) set_bit(r->pre3, k3);
        if (n == 3) set_bit(r->full3, k3);
        if (n == 4) set_bit(r->full4_by_pre3, k3);
    }
    g_ref = r;
    return 0;
}

static int free_ref(void **state) {
    (void)state;
    if (g_ref) {
        free(g_ref->pre3);
        free(g_ref->full3);
        free(g_ref->full4_by_pre3);
        free(g_ref);
    }
    g_ref = NULL;
    return 0;
}

/* Is p[0..k) a prefix of some encoding (complete or not)? */
static int ref_prefix(const uint8_t *p, size_t k) {
    const ref_tables *r = g_ref;
    switch (k) {
    case 1: return get_bit(r->pre1, p[0]);
    case 2: return get_bit(r->pre2, (uint32_t)p[0] << 8 | p[1]);
    case 3: return get_bit(r->pre3, (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2]);
    case 4:
        return get_bit(r->full4_by_pre3, (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2]) &&
               (p[3] & 0xC0) == 0x80;
    default: return 0;
    }
}

static int ref_complete(const uint8_t *p, size_t k) {
    const ref_tables *r = g_ref;
    switch (k) {
    case 1: return get_bit(r->full1, p[0]);
    case 2: return get_bit(r->full2, (uint32_t)p[0] << 8 | p[1]);
    case 3: return get_bit(r->full3, (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2]);
    case 4: return ref_prefix(p, 4);
    default: return 0;
    }
}

/* Maximal-subpart sanitizing. out needs 3 * len bytes. With at_end false
 * the text may continue, so an incomplete encoding at its very end is
 * left out rather than replaced. */
static size_t ref_sanitize_part(const uint8_t *p, size_t len, char *out,
                                int at_end) {
    size_t o = 0, i = 0;
    while (i < len) {
        size_t k = 0;
        while (k < 4 && i + k < len && ref_prefix(p + i, k + 1)) k++;
        if (!at_end && k > 0 && i + k == len && !ref_complete(p + i, k)) break;
        if (k > 0 && ref_complete(p + i, k)) {
            memcpy(out + o, p + i, k);
            o += k;
            i += k;
        } else {
            memcpy(out + o, FFFD, 3);
            o += 3;
            i += k ? k : 1;
        }
    }
    return o;
}

static size_t ref_sanitize(const uint8_t *p, size_t len, char *out) {
    return ref_sanitize_part(p, len, out, 1);
}

/* Valid iff sanitizing changes nothing and introduces no U+FFFD that was
 * not in the input -- i.e. every step took a complete encoding. */
static int ref_valid(const char *s, size_t len) {
    const uint8_t *p = (const uint8_t *)s;
    size_t i = 0;
    while (i < len) {
        size_t k = 0;
        while (k < 4 && i + k < len && ref_prefix(p + i, k + 1)) k++;
        if (k == 0 || !ref_complete(p + i, k)) return 0;
        i += k;
    }
    return 1;
}

/* The first stop in the whole sanitized text: earliest end, then longest,
 * then lowest index. Returns the visible length; *idx the stop or -1. */
static size_t ref_stop(const char *s, size_t len, const char *const *stops,
                       size_t n_stops, int64_t *idx) {
    for (size_t end = 1; end <= len; end++) {
        int64_t best = -1;
        size_t best_len = 0;
        for (size_t j = 0; j < n_stops; j++) {
            size_t l = strlen(stops[j]);
            if (l > end || memcmp(s + end - l, stops[j], l) != 0) continue;
            if (l > best_len) {
                best = (int64_t)j;
                best_len = l;
            }
        }
        if (best >= 0) {
            *idx = best;
            return end - best_len;
        }
    }
    *idx = -1;
    return len;
}

/* What must have been released once the first len bytes are in: the
 * sanitized complete text, cut before the first stop, or else minus only
 * its longest suffix that could still grow into a stop. Holding more
 * would delay text for nothing (invariant 8 says released as soon as it
 * turns out not to be a stop). */
static size_t ref_released(const char *text, size_t len,
                           const char *const *stops, size_t n_stops,
                           char *scratch) {
    size_t cl = ref_sanitize_part((const uint8_t *)text, len, scratch, 0);
    int64_t idx;
    size_t vis = ref_stop(scratch, cl, stops, n_stops, &idx);
    if (idx >= 0) return vis;
    size_t hold = 0;
    for (size_t j = 0; j < n_stops; j++) {
        size_t l = strlen(stops[j]);
        for (size_t h = l - 1; h > hold; h--)
            if (h <= cl && memcmp(scratch + cl - h, stops[j], h) == 0) {
                hold = h;
                break;
            }
    }
    return cl - hold;
}

/* ---- random input ---- */

/* Valid atoms stop strings are made of; a small alphabet so that stops
 * actually occur and half-occur. */
static const char *const k_valid[] = {
    "a", "b", "<", "|", "\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80", FFFD,
};
/* Atoms only text contains: broken and invalid sequences. */
static const char *const k_invalid[] = {
    "\x80", "\xFF", "\xFE", "\xC3", "\xE2\x82", "\xF0\x9F\x98", "\xC0\xAF",
    "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xBF\xBF",
};
#define N_VALID (sizeof k_valid / sizeof *k_valid)
#define N_INVALID (sizeof k_invalid / sizeof *k_invalid)

static size_t random_text(uint64_t *s, char *out, size_t max_atoms, int allow_invalid) {
    size_t n = fx_test_rng_below(s, max_atoms + 1), o = 0;
    for (size_t i = 0; i < n; i++) {
        const char *a = allow_invalid && fx_test_rng_below(s, 5) == 0
                            ? k_invalid[fx_test_rng_below(s, N_INVALID)]
                            : k_valid[fx_test_rng_below(s, N_VALID)];
        size_t l = strlen(a);
        memcpy(out + o, a, l);
        o += l;
    }
    return o;
}

/* Runs text through a fresh fx_textout in pieces of at most max_piece
 * bytes (0: one piece), checking every chunk. */
static size_t run(const char *const *stops, size_t n_stops, const char *text,
                  size_t len, uint64_t *s, size_t max_piece, char *res,
                  int64_t *stopped) {
    fx_alloc alloc;
    assert_int_equal(fx_alloc_init(&alloc, NULL), FX_OK);
    fx_error err = {{0}};
    fx_textout *t = NULL;
    assert_int_equal(fx_textout_create(&alloc, stops, NULL, n_stops, &t, &err), FX_OK);
    fx_textbuf out;
    fx_textbuf_init(&out, &alloc);
    size_t r = 0, off = 0;
    while (off < len) {
        /* zero-length pieces too: a token can decode to nothing */
        size_t n = max_piece ? fx_test_rng_below(s, max_piece + 1) : len;
        if (n > len - off) n = len - off;
        out.len = 0;
        assert_int_equal(fx_textout_push(t, text + off, n, &out, &err), FX_OK);
        if (!ref_valid(out.data, out.len)) fail_msg("invalid chunk");
        if (out.len) memcpy(res + r, out.data, out.len);
        r += out.len;
        off += n;
        static char scratch[4096];
        size_t due = ref_released(text, off, stops, n_stops, scratch);
        if (r != due || memcmp(res, scratch, r) != 0)
            fail_msg("after %zu bytes: released %zu, due %zu", off, r, due);
    }
    out.len = 0;
    assert_int_equal(fx_textout_finish(t, &out, &err), FX_OK);
    if (!ref_valid(out.data, out.len)) fail_msg("invalid final chunk");
    if (out.len) memcpy(res + r, out.data, out.len);
    r += out.len;
    *stopped = fx_textout_stopped(t);
    fx_textbuf_free(&out);
    fx_textout_free(t);
    return r;
}

static void dump(const char *what, const char *s, size_t n) {
    fprintf(stderr, "%s (%zu):", what, n);
    for (size_t i = 0; i < n; i++) fprintf(stderr, " %02x", (uint8_t)s[i]);
    fprintf(stderr, "\n");
}

static void test_random_against_reference(void **state) {
    (void)state;
    uint64_t seed = 0x5EED0001;
    enum { ITER = 20000, MAX_ATOMS = 40 };
    static char text[MAX_ATOMS * 4 + 4], clean[3 * sizeof text];
    static char whole[3 * sizeof text], pieces[3 * sizeof text];
    static char stop_store[8][32];
    for (int it = 0; it < ITER; it++) {
        size_t n_stops = fx_test_rng_below(&seed, 5);
        const char *stops[8];
        for (size_t j = 0; j < n_stops; j++) {
            size_t l;
            do {
                l = random_text(&seed, stop_store[j], 4, 0);
            } while (l == 0);
            stop_store[j][l] = 0;
            stops[j] = stop_store[j];
        }
        size_t len = random_text(&seed, text, MAX_ATOMS, 1);

        int64_t want_idx, idx_whole, idx_pieces;
        size_t clean_len = ref_sanitize((const uint8_t *)text, len, clean);
        size_t want = ref_stop(clean, clean_len, stops, n_stops, &want_idx);
        size_t n_whole = run(stops, n_stops, text, len, &seed, 0, whole, &idx_whole);
        size_t max_piece = 1 + fx_test_rng_below(&seed, 8);
        size_t n_pieces = run(stops, n_stops, text, len, &seed, max_piece, pieces,
                              &idx_pieces);
        if (n_whole != want || memcmp(whole, clean, want) != 0 ||
            n_pieces != want || memcmp(pieces, clean, want) != 0 ||
            idx_whole != want_idx || idx_pieces != want_idx) {
            dump("text", text, len);
            for (size_t j = 0; j < n_stops; j++) dump("stop", stops[j], strlen(stops[j]));
            dump("want", clean, want);
            dump("whole", whole, n_whole);
            dump("pieces", pieces, n_pieces);
            fail_msg("iteration %d: stop want %lld whole %lld pieces %lld", it,
                     (long long)want_idx, (long long)idx_whole,
                     (long long)idx_pieces);
        }
    }
}

/* The UTF-8 stream alone on arbitrary bytes (all 256 values) split
 * anywhere, against the reference sanitizer. */
static void test_random_utf8_bytes(void **state) {
    (void)state;
    uint64_t seed = 0xB17E5;
    static uint8_t in[64];
    static char want[3 * 64], got[3 * 64 + 16];
    for (int it = 0; it < 200000; it++) {
        size_t len = fx_test_rng_below(&seed, sizeof in + 1);
        for (size_t i = 0; i < len; i++) {
            /* Bias towards bytes that matter: leads and continuations. */
            uint64_t r = fx_test_rng_next(&seed);
            in[i] = (uint8_t)(r % 4 == 0 ? 0x80 + (r >> 8) % 0x80 : r >> 16);
        }
        size_t n_want = ref_sanitize(in, len, want);
        fx_utf8 u;
        fx_utf8_init(&u);
        size_t o = 0, off = 0;
        while (off < len) {
            size_t n = 1 + fx_test_rng_below(&seed, 5);
            if (n > len - off) n = len - off;
            size_t m = fx_utf8_push(&u, in + off, n, got + o);
            if (!ref_valid(got + o, m)) fail_msg("invalid chunk at %d", it);
            o += m;
            off += n;
        }
        o += fx_utf8_flush(&u, got + o);
        if (o != n_want || memcmp(got, want, o) != 0) {
            dump("in", (const char *)in, len);
            dump("want", want, n_want);
            dump("got", got, o);
            fail_msg("iteration %d", it);
        }
        assert_int_equal(fx_utf8_valid(in, len), ref_valid((const char *)in, len));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_utf8_bytes),
        cmocka_unit_test(test_random_against_reference),
    };
    return cmocka_run_group_tests(tests, build_ref, free_ref);
}
