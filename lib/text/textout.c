/*
 * One row's text pipeline: token bytes -> UTF-8 stream -> stop matcher ->
 * the caller's buffer. At the end of a row, a character cut off becomes
 * U+FFFD and goes through the stop matcher like any other text, and only
 * then is the held stop prefix released.
 */
#include <string.h>

#include "text.h"

/* A piece is decoded this many bytes at a time into a fixed scratch
 * buffer, so no piece, however long, makes the row allocate. */
#define FX_TEXTOUT_BLOCK 256
#define FX_TEXTOUT_SCRATCH (3 * FX_TEXTOUT_BLOCK + 9) /* fx_utf8_push_bound */

struct fx_textout {
    fx_alloc alloc;
    fx_utf8 utf8;
    fx_stop *stop;
    bool finished;
    char scratch[FX_TEXTOUT_SCRATCH]; /* one block's decoded text */
};

fx_status fx_textout_create(const fx_alloc *alloc, const char *const *stops,
                            const size_t *lens, size_t n_stops,
                            fx_textout **out, fx_error *err) {
    if (!out) return fx_fail(err, FX_ERR_INVALID_ARG, "textout: NULL out");
    *out = NULL;
    if (!alloc) return fx_fail(err, FX_ERR_INVALID_ARG, "textout: NULL alloc");
    fx_textout *t = fx_calloc(alloc, 1, sizeof *t);
    if (!t) return fx_fail(err, FX_ERR_NOMEM, "textout: out of memory");
    t->alloc = *alloc;
    fx_utf8_init(&t->utf8);
    fx_status st = fx_stop_create(alloc, stops, lens, n_stops, &t->stop, err);
    if (st != FX_OK) {
        fx_free(alloc, t);
        return st;
    }
    *out = t;
    return FX_OK;
}

void fx_textout_free(fx_textout *t) {
    if (!t) return;
    fx_alloc alloc = t->alloc;
    fx_stop_free(t->stop);
    fx_free(&alloc, t);
}

/* Runs n decoded bytes through the stop matcher into out. Room was
 * reserved by the caller. */
static void release(fx_textout *t, const char *text, size_t n, fx_textbuf *out) {
    out->len += fx_stop_push(t->stop, text, n, out->data + out->len);
}

fx_status fx_textout_push(fx_textout *t, const void *piece, size_t len,
                          fx_textbuf *out, fx_error *err) {
    if (!t || !out || (len > 0 && !piece))
        return fx_fail(err, FX_ERR_INVALID_ARG, "textout push: NULL argument");
    const uint8_t *p = piece;
    while (len > 0 && !t->finished && fx_stop_matched(t->stop) < 0) {
        size_t n = len < FX_TEXTOUT_BLOCK ? len : FX_TEXTOUT_BLOCK;
        /* Reserve before consuming, so a failed reserve leaves the
         * stream exactly as it was before this block. */
        size_t need = fx_stop_push_bound(t->stop, FX_TEXTOUT_SCRATCH);
        if (need == 0)
            return fx_fail(err, FX_ERR_TOO_LARGE, "textout: held text too large");
        fx_status st = fx_textbuf_reserve(out, need, err);
        if (st != FX_OK) return st;
        size_t m = fx_utf8_push(&t->utf8, p, n, t->scratch);
        release(t, t->scratch, m, out);
        p += n;
        len -= n;
    }
    return FX_OK;
}

fx_status fx_textout_finish(fx_textout *t, fx_textbuf *out, fx_error *err) {
    if (!t || !out)
        return fx_fail(err, FX_ERR_INVALID_ARG, "textout finish: NULL argument");
    if (t->finished) return FX_OK;
    /* Held U+FFFD (3 bytes) through the matcher, then its flush: both fit
     * in what is held now plus 3. */
    size_t need = fx_stop_push_bound(t->stop, 3);
    if (need == 0)
        return fx_fail(err, FX_ERR_TOO_LARGE, "textout: held text too large");
    fx_status st = fx_textbuf_reserve(out, need, err);
    if (st != FX_OK) return st;
    t->finished = true;
    if (fx_stop_matched(t->stop) >= 0) return FX_OK; /* the rest is after it */
    size_t m = fx_utf8_flush(&t->utf8, t->scratch);
    release(t, t->scratch, m, out);
    out->len += fx_stop_flush(t->stop, out->data + out->len);
    return FX_OK;
}

int64_t fx_textout_stopped(const fx_textout *t) {
    return t ? fx_stop_matched(t->stop) : -1;
}
