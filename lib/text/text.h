/*
 * text: what turns one row's token pieces into the text its host sees.
 *
 *   piece bytes -> fx_utf8 (complete, valid UTF-8 only)
 *               -> fx_stop (hold back what may start a stop string)
 *               -> released text (an event chunk, and the row's answer)
 *
 * Everything here is per row. Rows interleave on every step, and one
 * shared buffer would splice one answer's half-character or held-back
 * stop prefix into another's (docs/design.md invariants 8 and 9).
 *
 * The batcher normally needs only fx_textout (at the end of this file):
 *
 *   create:  fx_textout_create(alloc, stops, lens, n, &t, err)   per row
 *   decode:  out.len = 0;  fx_textout_push(t, piece, n, &out, err);
 *            if out.len > 0: emit a chunk event with out.data[0..len)
 *            if fx_textout_stopped(t) >= 0: the row ended (reason "stop")
 *   end:     fx_textout_finish(t, &out, err)   -- exactly once, on the one
 *            exit path, whatever the reason; emit what it released
 *   free:    fx_textout_free(t)
 *
 * Every chunk released is valid UTF-8 and ends on a character boundary.
 * Because push and finish APPEND, `out` can be the row's whole visible
 * answer: the new chunk is its tail, and the event can point
 * at or copy that tail -- the released bytes are written once, in place.
 * Objects here are not locked; one row's objects are used by one thread at
 * a time, and different rows share nothing.
 */
#ifndef FX_TEXT_H
#define FX_TEXT_H

#include "../core/core.h"

/* ---- growable output ---- */

/* Bytes released to the caller. The caller owns it and may point it at any
 * storage obtained from `alloc` (an event arena, the row's answer), so the
 * released bytes land where they are going with no extra copy. Not
 * NUL-terminated. Capacity only grows; set len = 0 to reuse it, and after
 * the first few steps a reused buffer stops allocating. */
typedef struct fx_textbuf {
    char *data;            /* [cap], the first len bytes in use */
    size_t len;
    size_t cap;
    const fx_alloc *alloc; /* whose memory data is; must outlive the buffer */
} fx_textbuf;

void fx_textbuf_init(fx_textbuf *b, const fx_alloc *alloc);
/* Makes room for `extra` more bytes past len (growing geometrically). */
fx_status fx_textbuf_reserve(fx_textbuf *b, size_t extra, fx_error *err);
void fx_textbuf_free(fx_textbuf *b);

/* ---- UTF-8 stream ---- */

/* One row's half-finished character. A token may end inside a code point
 * (a 4-byte character can be split over up to 4 tokens); those bytes wait
 * here until the character completes or turns out to be invalid.
 *
 * Invalid input becomes U+FFFD following the Unicode "maximal subpart"
 * practice (Unicode 15 section 3.9, U+FFFD Substitution of Maximal
 * Subparts; the same as the WHATWG Encoding Standard's UTF-8 decoder):
 *   - a byte that cannot start a sequence (80..BF, C0, C1, F5..FF) is one
 *     U+FFFD by itself;
 *   - a valid start followed by a byte that cannot continue it is one
 *     U+FFFD for the start and the continuations accepted so far (the
 *     "maximal subpart"), and the offending byte is then read afresh as
 *     the start of what follows;
 *   - the second-byte ranges exclude overlong forms (E0 A0..BF, F0 90..BF),
 *     surrogates (ED 80..9F) and code points above U+10FFFF (F4 80..8F), so
 *     e.g. ED A0 80 (a surrogate) is three U+FFFD, C0 AF is two, and
 *     F0 9F 98 followed by 'x' is one U+FFFD then 'x';
 *   - fx_utf8_flush turns a sequence still incomplete at the end into one
 *     U+FFFD.
 * The output is therefore always valid UTF-8, and feeding the same bytes in
 * any split gives the same output as feeding them whole. */
typedef struct fx_utf8 {
    uint8_t held[4]; /* [n_held] valid prefix of the current sequence */
    uint8_t n_held;
    uint8_t need;    /* total length of the current sequence; 0: none */
    uint8_t lo, hi;  /* the range the next byte must fall in */
} fx_utf8;

#define FX_UTF8_REPLACEMENT "\xEF\xBF\xBD"

void fx_utf8_init(fx_utf8 *u);

/* The most bytes fx_utf8_push can write for `len` input bytes, or 0 if that
 * does not fit in size_t (then push in smaller parts). */
size_t fx_utf8_push_bound(size_t len);

/* Consumes len bytes and writes the complete characters they finish to out
 * (which must have room for fx_utf8_push_bound(len) bytes). Returns the
 * number of bytes written. Cannot fail. */
size_t fx_utf8_push(fx_utf8 *u, const void *in, size_t len, char *out);

/* Ends the stream: a held incomplete sequence becomes U+FFFD (out needs 3
 * bytes). Returns the bytes written (0 or 3); the stream is empty after. */
size_t fx_utf8_flush(fx_utf8 *u, char *out);

/* True when all len bytes are complete, valid UTF-8 (the same rules). */
bool fx_utf8_valid(const void *s, size_t len);

/* ---- stop matcher ---- */

/* One row's stop strings and how far into them its text has got.
 *
 * The matcher sees one stream of text pushed in any number of parts. Text
 * that might be the start of a stop string is held back; it is released
 * as soon as it cannot be, or by fx_stop_flush at the end. When a stop
 * string completes, everything before it is released, the stop string and
 * everything after it are never released, and fx_stop_matched reports
 * which one fired.
 *
 * Which stop wins: the one whose occurrence ENDS first in the text --
 * a stream cannot wait to see whether a longer match starting earlier
 * would have completed later. Among occurrences ending at the same byte
 * (one stop a suffix of another) the longest wins, since it starts
 * earliest and so releases least; among identical stop strings, the lowest
 * index.
 *
 * Cost: an Aho-Corasick automaton over the stop strings' bytes, built once
 * at create, so each pushed byte costs O(1) amortized however many stop
 * strings there are. Memory is about 20 bytes per distinct stop-prefix
 * byte. Allocation happens only at create.
 *
 * Input should be valid UTF-8 (fx_textout guarantees it). Then what the
 * matcher releases never ends inside a character: a held stop prefix
 * always begins at a character start, and a trailing incomplete character
 * (input split mid-character) is held too. */
typedef struct fx_stop fx_stop;

/* stops[i] is lens[i] bytes long (lens NULL: each is NUL-terminated).
 * n_stops 0 gives a matcher that never fires.
 * Errors: FX_ERR_INVALID_ARG for a NULL stop, an EMPTY stop string (it
 * would match before any text, ending every row at once -- almost surely a
 * caller's mistake, so it is refused rather than silently ignored) or a
 * stop string that is not valid UTF-8 (it could never match the valid text
 * the matcher sees, and would hold back text for nothing); the message
 * names the index. FX_ERR_TOO_LARGE if the stop strings total more than
 * 2^31 bytes; FX_ERR_NOMEM. */
fx_status fx_stop_create(const fx_alloc *alloc, const char *const *stops,
                         const size_t *lens, size_t n_stops, fx_stop **out,
                         fx_error *err);
void fx_stop_free(fx_stop *m); /* NULL is fine */

/* The most bytes the NEXT fx_stop_push of len bytes can write (with
 * len 0: the next fx_stop_flush) -- what is held now plus len, at least 1;
 * 0 only if that does not fit in size_t. */
size_t fx_stop_push_bound(const fx_stop *m, size_t len);

/* Consumes len bytes of text and writes what is now safe to release to out
 * (room for fx_stop_push_bound(m, len) bytes). Returns the bytes written.
 * After a stop has fired, everything pushed is discarded. */
size_t fx_stop_push(fx_stop *m, const char *text, size_t len, char *out);

/* Ends the stream: releases the held text (a stop can no longer complete).
 * Returns the bytes written. Text pushed afterwards starts a new stream. */
size_t fx_stop_flush(fx_stop *m, char *out);

/* The index of the stop string that fired, or -1. */
int64_t fx_stop_matched(const fx_stop *m);

/* Bytes held back right now (for tests and diagnostics). */
size_t fx_stop_held(const fx_stop *m);

/* Automaton transitions taken so far: one per byte consumed plus one per
 * failure link followed. Linear in the bytes pushed whatever the stop set;
 * exposed so tests can check the cost without timing it. */
uint64_t fx_stop_work(const fx_stop *m);

/* ---- the per-row pipeline the batcher uses ---- */

/* fx_utf8 feeding fx_stop: one row's text from token bytes to release. */
typedef struct fx_textout fx_textout;

/* Same arguments and errors as fx_stop_create. */
fx_status fx_textout_create(const fx_alloc *alloc, const char *const *stops,
                            const size_t *lens, size_t n_stops,
                            fx_textout **out, fx_error *err);
void fx_textout_free(fx_textout *t); /* NULL is fine */

/* Feeds one token's bytes (any bytes at all) and APPENDS the text now safe
 * to show to out (the new chunk is out->data[old len .. out->len)). No
 * allocation unless out must grow. The only failures are a NULL argument
 * and out failing to grow (FX_ERR_NOMEM): the piece is consumed in blocks
 * of 256 bytes and room is reserved before each, so on failure the blocks
 * before it are consumed and appended, and the rest -- the whole piece, for
 * any real token -- is not; the state stays consistent either way. After a
 * stop fired, pieces are discarded. */
fx_status fx_textout_push(fx_textout *t, const void *piece, size_t len,
                          fx_textbuf *out, fx_error *err);

/* Ends the row, whatever the reason it ended: a character cut off midway
 * becomes U+FFFD and goes through the stop matcher like any other text (it
 * may complete nothing, but it is text the row produced), then the held
 * stop prefix is released -- text withheld against a stop that never came
 * is ordinary output. Appends to out. Call once; later calls append
 * nothing. */
fx_status fx_textout_finish(fx_textout *t, fx_textbuf *out, fx_error *err);

/* The index of the stop string that ended the row, or -1. */
int64_t fx_textout_stopped(const fx_textout *t);

#endif /* FX_TEXT_H */
