/*
 * The per-row UTF-8 stream and the growable output buffer.
 *
 * The decoder is the WHATWG one: the allowed range of the byte after a
 * lead depends on the lead, which is what keeps overlong forms, surrogates
 * and code points past U+10FFFF out, and a rejected byte is read again as
 * a new start. That gives Unicode's "maximal subpart" U+FFFD count, which
 * browsers and Python agree on -- so a host comparing our text with what
 * another decoder made of the same bytes sees the same replacements.
 */
#include <string.h>

#include "text.h"

/* ---- fx_textbuf ---- */

void fx_textbuf_init(fx_textbuf *b, const fx_alloc *alloc) {
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->alloc = alloc;
}

fx_status fx_textbuf_reserve(fx_textbuf *b, size_t extra, fx_error *err) {
    if (!b || !b->alloc || b->len > b->cap)
        return fx_fail(err, FX_ERR_INVALID_ARG, "text buffer not initialized");
    if (b->cap - b->len >= extra) return FX_OK;
    if (extra > SIZE_MAX - b->len)
        return fx_fail(err, FX_ERR_TOO_LARGE, "text buffer size overflows");
    size_t want = b->len + extra;
    /* Doubling keeps a buffer that grows a little per step from
     * reallocating on every step. */
    size_t cap = b->cap ? b->cap : 64;
    while (cap < want) cap = cap > SIZE_MAX / 2 ? want : cap * 2;
    char *p = fx_realloc(b->alloc, b->data, cap);
    if (!p)
        return fx_fail(err, FX_ERR_NOMEM, "text buffer: cannot grow to %zu bytes",
                       cap);
    b->data = p;
    b->cap = cap;
    return FX_OK;
}

void fx_textbuf_free(fx_textbuf *b) {
    if (!b) return;
    if (b->alloc) fx_free(b->alloc, b->data);
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
}

/* ---- fx_utf8 ---- */

void fx_utf8_init(fx_utf8 *u) {
    memset(u, 0, sizeof *u);
    u->lo = 0x80;
    u->hi = 0xBF;
}

size_t fx_utf8_push_bound(size_t len) {
    /* Each input byte (and each held one, at most 3) yields at most 3
     * output bytes: a valid sequence is copied as is, and every U+FFFD
     * (3 bytes) stands for at least one byte. */
    if (len > SIZE_MAX / 3 - 3) return 0;
    return 3 * len + 9;
}

static size_t put_fffd(char *out) {
    memcpy(out, FX_UTF8_REPLACEMENT, 3);
    return 3;
}

/* Sets up the sequence a lead byte starts; false if b cannot start one. */
static bool start_seq(fx_utf8 *u, uint8_t b) {
    uint8_t need, lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) {
        need = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
        need = 3;
        if (b == 0xE0) lo = 0xA0; /* below: overlong */
        if (b == 0xED) hi = 0x9F; /* above: surrogates D800..DFFF */
    } else if (b >= 0xF0 && b <= 0xF4) {
        need = 4;
        if (b == 0xF0) lo = 0x90; /* below: overlong */
        if (b == 0xF4) hi = 0x8F; /* above: past U+10FFFF */
    } else {
        return false;
    }
    u->need = need;
    u->lo = lo;
    u->hi = hi;
    u->held[0] = b;
    u->n_held = 1;
    return true;
}

static void reset_seq(fx_utf8 *u) {
    u->need = 0;
    u->n_held = 0;
    u->lo = 0x80;
    u->hi = 0xBF;
}

size_t fx_utf8_push(fx_utf8 *u, const void *in, size_t len, char *out) {
    const uint8_t *p = in;
    size_t o = 0, i = 0;
    while (i < len) {
        if (u->need == 0) {
            /* Fast path: a run of ASCII is the common case for most
             * tokens and needs no state. */
            size_t j = i;
            while (j < len && p[j] < 0x80) j++;
            if (j > i) {
                memcpy(out + o, p + i, j - i);
                o += j - i;
                i = j;
                continue;
            }
            if (!start_seq(u, p[i])) o += put_fffd(out + o);
            i++;
            continue;
        }
        uint8_t b = p[i];
        if (b < u->lo || b > u->hi) {
            /* The maximal subpart so far is one U+FFFD; b is NOT consumed
             * and is looked at again as a possible start. */
            reset_seq(u);
            o += put_fffd(out + o);
            continue;
        }
        u->held[u->n_held++] = b;
        u->lo = 0x80;
        u->hi = 0xBF;
        i++;
        if (u->n_held == u->need) {
            memcpy(out + o, u->held, u->n_held);
            o += u->n_held;
            reset_seq(u);
        }
    }
    return o;
}

size_t fx_utf8_flush(fx_utf8 *u, char *out) {
    if (u->need == 0) return 0;
    reset_seq(u);
    return put_fffd(out);
}

bool fx_utf8_valid(const void *s, size_t len) {
    const uint8_t *p = s;
    fx_utf8 u;
    fx_utf8_init(&u);
    for (size_t i = 0; i < len;) {
        if (u.need == 0) {
            if (p[i] < 0x80) {
                i++;
                continue;
            }
            if (!start_seq(&u, p[i])) return false;
            i++;
            continue;
        }
        if (p[i] < u.lo || p[i] > u.hi) return false;
        u.held[u.n_held++] = p[i];
        u.lo = 0x80;
        u.hi = 0xBF;
        i++;
        if (u.n_held == u.need) reset_seq(&u);
    }
    return u.need == 0;
}
