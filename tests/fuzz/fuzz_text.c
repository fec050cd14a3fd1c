/*
 * fuzz_text: the UTF-8 stream (fx_utf8), the stop matcher (fx_stop) and the
 * per-row pipeline (fx_textout) with the input pushed in random chunks
 * (docs/reliability.md D 27-31). Checked against simple reference answers:
 *   - fx_utf8 gives the same output however the bytes are split, and it is
 *     valid UTF-8;
 *   - fx_stop releases exactly the text before the first-ending occurrence
 *     of a stop string (longest, then lowest index, among those ending at
 *     the same byte), or all of it; it fires on the same stop; every
 *     released chunk is valid UTF-8;
 *   - fx_textout equals fx_utf8 followed by that reference.
 *
 * Input:
 *   byte 0            number of stop strings (low 3 bits) and chunk-size
 *                     mode (high bits)
 *   per stop string   a length byte (mod 17) and that many bytes
 *   byte              chunking seed
 *   the rest          the text
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "text/text.h"

#define MAX_STOPS 7

static fx_alloc alloc;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    if (fx_alloc_init(&alloc, NULL) != FX_OK) abort();
    return 0;
}

/* Chunk lengths: mostly tiny (every split point of a character), some
 * large. */
static size_t next_chunk(uint64_t *rng, unsigned mode, size_t left) {
    size_t c;
    switch (mode & 3) {
    case 0: c = 1; break;
    case 1: c = 1 + fz_rand(rng) % 4; break;
    case 2: c = fz_rand(rng) % 9; break; /* empty pushes too */
    default: c = 1 + fz_rand(rng) % 300; break;
    }
    return c > left ? left : c;
}

/* The reference stop matcher. Returns the bytes to release and sets *which. */
static size_t ref_stop(const char *text, size_t len, const char *const *stops,
                       const size_t *lens, size_t n, int64_t *which) {
    *which = -1;
    for (size_t e = 1; e <= len; e++) {
        size_t best_len = 0;
        for (size_t i = 0; i < n; i++) {
            if (lens[i] == 0 || lens[i] > e) continue;
            if (memcmp(text + e - lens[i], stops[i], lens[i]) != 0) continue;
            if (*which < 0 || lens[i] > best_len) {
                *which = (int64_t)i;
                best_len = lens[i];
            }
        }
        if (*which >= 0) return e - best_len;
    }
    return len;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_in in = {data, size};
    uint8_t head = fz_u8(&in);
    size_t n_stops = head & 7u;
    if (n_stops > MAX_STOPS) n_stops = MAX_STOPS;
    unsigned mode = head >> 3;
    const char *stops[MAX_STOPS];
    size_t lens[MAX_STOPS];
    for (size_t i = 0; i < n_stops; i++) {
        size_t got;
        stops[i] = (const char *)fz_take(&in, fz_u8(&in) % 17u, &got);
        lens[i] = got;
    }
    uint64_t seed0 = 0x9E3779B97F4A7C15ull ^ fz_u8(&in);
    const char *text = (const char *)in.p;
    size_t len = in.n;
    fx_error err;

    /* ---- fx_utf8: whole vs chunked ---- */
    size_t bound = fx_utf8_push_bound(len);
    FX_FUZZ_CHECK(bound > 0);
    char *whole = malloc(bound + 3);
    char *parts = malloc(bound + 3 + 3 * len);
    if (!whole || !parts) {
        free(whole);
        free(parts);
        return 0;
    }
    fx_utf8 u;
    fx_utf8_init(&u);
    size_t wn = fx_utf8_push(&u, text, len, whole);
    FX_FUZZ_CHECK(wn <= bound);
    wn += fx_utf8_flush(&u, whole + wn);
    FX_FUZZ_CHECK(fx_utf8_valid(whole, wn));
    if (fx_utf8_valid(text, len)) {
        FX_FUZZ_CHECK(wn == len && memcmp(whole, text, len) == 0);
    }

    uint64_t rng = seed0;
    fx_utf8_init(&u);
    size_t pn = 0, off = 0;
    while (off < len) {
        size_t c = next_chunk(&rng, mode, len - off);
        if (c == 0 && (mode & 3) != 2) c = 1;
        size_t w = fx_utf8_push(&u, text + off, c, parts + pn);
        FX_FUZZ_CHECK(w <= fx_utf8_push_bound(c));
        FX_FUZZ_CHECK(fx_utf8_valid(parts + pn, w));
        pn += w;
        off += c;
    }
    pn += fx_utf8_flush(&u, parts + pn);
    FX_FUZZ_CHECK(pn == wn && memcmp(parts, whole, wn) == 0);
    free(parts);

    /* ---- fx_stop over the cleaned text ---- */
    fx_stop *m = NULL;
    fx_status st = fx_stop_create(&alloc, stops, lens, n_stops, &m, &err);
    int stops_ok = 1;
    for (size_t i = 0; i < n_stops; i++)
        if (lens[i] == 0 || !fx_utf8_valid(stops[i], lens[i])) stops_ok = 0;
    if (st != FX_OK) {
        FX_FUZZ_CHECK(m == NULL);
        FX_FUZZ_CHECK(st == FX_ERR_NOMEM || (!stops_ok && st == FX_ERR_INVALID_ARG));
        free(whole);
        return 0;
    }
    FX_FUZZ_CHECK(stops_ok);
    int64_t which;
    size_t want = ref_stop(whole, wn, stops, lens, n_stops, &which);

    char *rel = malloc(wn + 16);
    if (!rel) {
        fx_stop_free(m);
        free(whole);
        return 0;
    }
    size_t rn = 0;
    rng = seed0 ^ 0x5555;
    off = 0;
    while (off < wn) {
        size_t c = next_chunk(&rng, mode >> 2, wn - off);
        if (c == 0 && ((mode >> 2) & 3) != 2) c = 1;
        size_t b = fx_stop_push_bound(m, c);
        FX_FUZZ_CHECK(b > 0);
        char *tmp = malloc(b);
        if (!tmp) break;
        size_t w = fx_stop_push(m, whole + off, c, tmp);
        FX_FUZZ_CHECK(w <= b);
        FX_FUZZ_CHECK(fx_utf8_valid(tmp, w));
        FX_FUZZ_CHECK(rn + w <= wn);
        memcpy(rel + rn, tmp, w);
        rn += w;
        free(tmp);
        off += c;
    }
    if (off == wn) {
        size_t b = fx_stop_push_bound(m, 0);
        char *tmp = malloc(b);
        if (tmp) {
            size_t w = fx_stop_flush(m, tmp);
            FX_FUZZ_CHECK(w <= b);
            FX_FUZZ_CHECK(fx_utf8_valid(tmp, w));
            FX_FUZZ_CHECK(rn + w <= wn);
            memcpy(rel + rn, tmp, w);
            rn += w;
            free(tmp);
            FX_FUZZ_CHECK(fx_stop_matched(m) == which);
            FX_FUZZ_CHECK(rn == want && memcmp(rel, whole, want) == 0);
            FX_FUZZ_CHECK(fx_stop_held(m) == 0);
        }
    }
    fx_stop_free(m);
    free(rel);

    /* ---- fx_textout over the raw bytes ---- */
    fx_textout *t = NULL;
    st = fx_textout_create(&alloc, stops, lens, n_stops, &t, &err);
    if (st != FX_OK) {
        FX_FUZZ_CHECK(st == FX_ERR_NOMEM);
        free(whole);
        return 0;
    }
    fx_textbuf out;
    fx_textbuf_init(&out, &alloc);
    rng = seed0 ^ 0xAAAA;
    off = 0;
    st = FX_OK;
    while (off < len && st == FX_OK) {
        size_t c = next_chunk(&rng, mode >> 4, len - off);
        size_t before = out.len;
        st = fx_textout_push(t, text + off, c, &out, &err);
        FX_FUZZ_CHECK(st == FX_OK || st == FX_ERR_NOMEM);
        FX_FUZZ_CHECK(fx_utf8_valid(out.data + before, out.len - before));
        off += c;
    }
    if (st == FX_OK) {
        size_t before = out.len;
        st = fx_textout_finish(t, &out, &err);
        FX_FUZZ_CHECK(st == FX_OK || st == FX_ERR_NOMEM);
        if (st == FX_OK) {
            FX_FUZZ_CHECK(fx_utf8_valid(out.data + before, out.len - before));
            FX_FUZZ_CHECK(fx_textout_stopped(t) == which);
            FX_FUZZ_CHECK(out.len == want &&
                          (want == 0 || memcmp(out.data, whole, want) == 0));
            /* A second finish appends nothing. */
            size_t l2 = out.len;
            FX_FUZZ_CHECK(fx_textout_finish(t, &out, &err) == FX_OK);
            FX_FUZZ_CHECK(out.len == l2);
        }
    }
    fx_textbuf_free(&out);
    fx_textout_free(t);
    free(whole);
    return 0;
}
