/*
 * BPE pre-tokenizers: hand-written scanners equivalent to the regular
 * expressions llama.cpp (and the Hugging Face tokenizers) split text with,
 * over Unicode categories from utf8proc. No regex engine: each scanner
 * walks the code points once, so splitting is linear in the input.
 *
 * The expressions, as llama.cpp spells them (llama-vocab.cpp):
 *   gpt-2   '(s|t|re|ve|m|ll|d)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
 *   llama3  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *           ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *   qwen2   as llama3 but \p{N} (one digit per piece)
 *   smollm  \p{N} first, then gpt-2 inside each piece
 *   default [\p{P}\$\+<=>\^~\|]+, then gpt-2, then \p{N}+, then [0-9]{3}
 * Several expressions are applied in turn, each splitting the pieces of
 * the one before; text an expression does not match stays a piece too.
 */
#include <string.h>
#include <utf8proc.h>

#include "vocab_impl.h"

enum {
    CF_L = 1,    /* \p{L} */
    CF_N = 2,    /* \p{N} */
    CF_WS = 4,   /* \s: the White_Space property */
    CF_P = 8,    /* \p{P} */
    CF_ANY = 16  /* set on every code point, so 0 means "past the end" */
};

size_t fx_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
    unsigned c = s[0];
    uint32_t v;
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    if (c < 0xC2) goto bad; /* continuation byte or overlong 2-byte lead */
    if (c < 0xE0) {
        if (n < 2 || (s[1] & 0xC0) != 0x80) goto bad;
        *cp = ((uint32_t)(c & 0x1F) << 6) | (s[1] & 0x3F);
        return 2;
    }
    if (c < 0xF0) {
        if (n < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80) goto bad;
        v = ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
        if (v < 0x800 || (v >= 0xD800 && v <= 0xDFFF)) goto bad;
        *cp = v;
        return 3;
    }
    if (c < 0xF5) {
        if (n < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80) goto bad;
        v = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
            ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
        if (v < 0x10000 || v > 0x10FFFF) goto bad;
        *cp = v;
        return 4;
    }
bad:
    *cp = 0xFFFD;
    return 1;
}

size_t fx_utf8_encode(uint32_t cp, unsigned char *out) {
    if (cp < 0x80) {
        out[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (unsigned char)(0xC0 | (cp >> 6));
        out[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (unsigned char)(0xE0 | (cp >> 12));
        out[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (unsigned char)(0xF0 | (cp >> 18));
    out[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

static bool is_white_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
           c == 0x3000;
}

static uint8_t cp_flags(uint32_t c) {
    uint8_t f = CF_ANY;
    if (c < 0x80) {
        if ((c | 32) >= 'a' && (c | 32) <= 'z') return f | CF_L;
        if (c >= '0' && c <= '9') return f | CF_N;
        if (c == ' ' || (c >= 9 && c <= 13)) return f | CF_WS;
        if (c && strchr("!\"#%&'()*,-./:;?@[\\]_{}", (int)c)) return f | CF_P;
        return f;
    }
    if (is_white_space(c)) f |= CF_WS;
    switch (utf8proc_category((utf8proc_int32_t)c)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO:
        f |= CF_L;
        break;
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
        f |= CF_N;
        break;
    case UTF8PROC_CATEGORY_PC: case UTF8PROC_CATEGORY_PD: case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE: case UTF8PROC_CATEGORY_PI: case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO:
        f |= CF_P;
        break;
    default:
        break;
    }
    return f;
}

/* The text being split, as code points. Pieces are reported as the index
 * one past their last code point. */
typedef struct pt_text {
    uint32_t *cp; /* [n] */
    uint8_t *fl;  /* [n] CF_* */
    size_t n;
} pt_text;

typedef struct pt_out {
    size_t *end; /* room for one entry per code point: never overflows */
    size_t n;
    size_t last; /* end of the last piece; empty pieces are dropped */
} pt_out;

static void emit(pt_out *o, size_t end) {
    if (end > o->last) {
        o->end[o->n++] = end;
        o->last = end;
    }
}

static uint8_t fl_at(const pt_text *t, size_t pos, size_t e) { return pos < e ? t->fl[pos] : 0; }

static uint32_t lower_ascii(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

/* 's 't 're 've 'm 'll 'd at pos; returns the length (0: none). */
static size_t contraction(const pt_text *t, size_t pos, size_t e, bool fold) {
    if (t->cp[pos] != '\'' || pos + 1 >= e) return 0;
    uint32_t a = t->cp[pos + 1];
    if (fold) a = lower_ascii(a);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (pos + 2 >= e) return 0;
    uint32_t b = t->cp[pos + 2];
    if (fold) b = lower_ascii(b);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

/* A run of whitespace at pos: \s+(?!\S) leaves the last one to prefix the
 * next word, unless the run ends the piece. */
static size_t whitespace_end(const pt_text *t, size_t pos, size_t e) {
    size_t k = pos;
    while (k < e && (t->fl[k] & CF_WS)) k++;
    if (k - pos > 1 && k < e) return k - 1;
    if (k > pos) return k;
    return pos + 1;
}

static void scan_gpt2(const pt_text *t, size_t b, size_t e, pt_out *o) {
    size_t pos = b;
    while (pos < e) {
        size_t k = contraction(t, pos, e, false);
        if (k) {
            pos += k;
            emit(o, pos);
            continue;
        }
        uint32_t c = t->cp[pos];
        uint8_t f2 = c == ' ' ? fl_at(t, pos + 1, e) : t->fl[pos];
        if (f2 & (CF_L | CF_N)) { /* ' ?\p{L}+' and ' ?\p{N}+' */
            uint8_t cls = f2 & CF_L ? CF_L : CF_N;
            pos += c == ' ';
            while (pos < e && (t->fl[pos] & cls)) pos++;
            emit(o, pos);
            continue;
        }
        if (f2 && !(f2 & CF_WS)) { /* ' ?[^\s\p{L}\p{N}]+' */
            pos += c == ' ';
            while (pos < e && !(t->fl[pos] & (CF_WS | CF_L | CF_N))) pos++;
            emit(o, pos);
            continue;
        }
        pos = whitespace_end(t, pos, e);
        emit(o, pos);
    }
}

/* llama3 (digit_run 3) and qwen2 (digit_run 1). */
static void scan_llama3(const pt_text *t, size_t b, size_t e, size_t digit_run, pt_out *o) {
    size_t pos = b;
    while (pos < e) {
        size_t k = contraction(t, pos, e, true);
        if (k) {
            pos += k;
            emit(o, pos);
            continue;
        }
        uint32_t c = t->cp[pos];
        uint8_t f = t->fl[pos];
        /* [^\r\n\p{L}\p{N}]?\p{L}+ */
        if (c != '\r' && c != '\n' && !(f & CF_N) && ((f & CF_L) || (fl_at(t, pos + 1, e) & CF_L))) {
            pos++;
            while (pos < e && (t->fl[pos] & CF_L)) pos++;
            emit(o, pos);
            continue;
        }
        if (f & CF_N) { /* \p{N}{1,digit_run} */
            size_t start = pos;
            while (pos < e && (t->fl[pos] & CF_N)) {
                pos++;
                if (pos - start >= digit_run) {
                    emit(o, pos);
                    start = pos;
                }
            }
            emit(o, pos);
            continue;
        }
        uint8_t f2 = c == ' ' ? fl_at(t, pos + 1, e) : f;
        if (!(f2 & (CF_WS | CF_L | CF_N))) { /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
            pos += c == ' ';
            while (pos < e && !(t->fl[pos] & (CF_WS | CF_L | CF_N))) pos++;
            while (pos < e && (t->cp[pos] == '\r' || t->cp[pos] == '\n')) pos++;
            emit(o, pos);
            continue;
        }
        /* \s*[\r\n]+ ends after the last line break of a whitespace run */
        size_t last_nl = 0;
        for (size_t q = pos; q < e && (t->fl[q] & CF_WS); q++)
            if (t->cp[q] == '\r' || t->cp[q] == '\n') last_nl = q + 1;
        pos = last_nl ? last_nl : whitespace_end(t, pos, e);
        emit(o, pos);
    }
}

/* Expressions that need not match everywhere: each match is a piece, and
 * so is each stretch of text between matches. */
typedef size_t (*pt_match)(const pt_text *t, size_t pos, size_t e);

static size_t match_digit(const pt_text *t, size_t pos, size_t e) {
    (void)e;
    return (t->fl[pos] & CF_N) ? 1 : 0;
}

static size_t match_digits(const pt_text *t, size_t pos, size_t e) {
    size_t k = pos;
    while (k < e && (t->fl[k] & CF_N)) k++;
    return k - pos;
}

static size_t match_ascii3(const pt_text *t, size_t pos, size_t e) {
    if (pos + 3 > e) return 0;
    for (size_t i = pos; i < pos + 3; i++)
        if (t->cp[i] < '0' || t->cp[i] > '9') return 0;
    return 3;
}

static size_t match_punct(const pt_text *t, size_t pos, size_t e) {
    size_t k = pos;
    while (k < e && ((t->fl[k] & CF_P) || (t->cp[k] < 128 && t->cp[k] && strchr("$+<=>^~|", (int)t->cp[k]))))
        k++;
    return k - pos;
}

static void scan_matches(const pt_text *t, size_t b, size_t e, pt_match m, pt_out *o) {
    size_t pos = b;
    while (pos < e) {
        size_t k = m(t, pos, e);
        if (k) {
            emit(o, pos);
            pos += k;
            emit(o, pos);
        } else {
            pos++;
        }
    }
    emit(o, e);
}

typedef enum { PASS_GPT2, PASS_LLAMA3, PASS_QWEN2, PASS_DIGIT, PASS_DIGITS, PASS_ASCII3, PASS_PUNCT } pt_pass;

static void run_pass(pt_pass p, const pt_text *t, size_t b, size_t e, pt_out *o) {
    switch (p) {
    case PASS_GPT2: scan_gpt2(t, b, e, o); break;
    case PASS_LLAMA3: scan_llama3(t, b, e, 3, o); break;
    case PASS_QWEN2: scan_llama3(t, b, e, 1, o); break;
    case PASS_DIGIT: scan_matches(t, b, e, match_digit, o); break;
    case PASS_DIGITS: scan_matches(t, b, e, match_digits, o); break;
    case PASS_ASCII3: scan_matches(t, b, e, match_ascii3, o); break;
    case PASS_PUNCT: scan_matches(t, b, e, match_punct, o); break;
    }
}

static fx_status passes_of(fx_pretok kind, const pt_pass **passes, size_t *n, fx_error *err) {
    static const pt_pass k_default[] = {PASS_PUNCT, PASS_GPT2, PASS_DIGITS, PASS_ASCII3};
    static const pt_pass k_gpt2[] = {PASS_GPT2};
    static const pt_pass k_llama3[] = {PASS_LLAMA3};
    static const pt_pass k_qwen2[] = {PASS_QWEN2};
    static const pt_pass k_smollm[] = {PASS_DIGIT, PASS_GPT2};
    switch (kind) {
    case FX_PRETOK_DEFAULT: *passes = k_default; *n = 4; return FX_OK;
    case FX_PRETOK_GPT2: *passes = k_gpt2; *n = 1; return FX_OK;
    case FX_PRETOK_LLAMA3: *passes = k_llama3; *n = 1; return FX_OK;
    case FX_PRETOK_QWEN2: *passes = k_qwen2; *n = 1; return FX_OK;
    case FX_PRETOK_SMOLLM: *passes = k_smollm; *n = 2; return FX_OK;
    default: return fx_fail(err, FX_ERR_INVALID_ARG, "pre-tokenizer: no such kind (%d)", (int)kind);
    }
}

void fx_pretok_ws_free(fx_pretok_ws *ws) {
    fx_free(ws->alloc, ws->cp);
    fx_free(ws->alloc, ws->fl);
    fx_free(ws->alloc, ws->boff);
    fx_free(ws->alloc, ws->a);
    fx_free(ws->alloc, ws->b);
    ws->cp = NULL;
    ws->fl = NULL;
    ws->boff = ws->a = ws->b = NULL;
    ws->cap = 0;
}

fx_status fx_pretok_ws_split(fx_pretok_ws *ws, fx_pretok kind, const char *text, size_t len,
                             const size_t **ends, size_t *n_pieces, fx_error *err) {
    const pt_pass *passes = NULL;
    size_t n_passes = 0;
    fx_status st = passes_of(kind, &passes, &n_passes, err);
    if (st != FX_OK) return st;
    *ends = NULL;
    *n_pieces = 0;
    if (len == 0) return FX_OK;
    /* one entry per byte is enough: there are never more code points */
    if (len + 1 > ws->cap) {
        fx_pretok_ws_free(ws);
        size_t cap = len + 1;
        ws->cp = fx_malloc_array(ws->alloc, cap, sizeof(uint32_t));
        ws->fl = fx_malloc(ws->alloc, cap);
        ws->boff = fx_malloc_array(ws->alloc, cap, sizeof(size_t));
        ws->a = fx_malloc_array(ws->alloc, cap, sizeof(size_t));
        ws->b = fx_malloc_array(ws->alloc, cap, sizeof(size_t));
        if (!ws->cp || !ws->fl || !ws->boff || !ws->a || !ws->b) {
            fx_pretok_ws_free(ws);
            return fx_fail(err, FX_ERR_NOMEM, "tokenize: out of memory (pre-tokenizing %zu bytes)", len);
        }
        ws->cap = cap;
    }
    pt_text t = {ws->cp, ws->fl, 0};
    const unsigned char *s = (const unsigned char *)text;
    for (size_t i = 0; i < len;) {
        ws->boff[t.n] = i;
        i += fx_utf8_decode(s + i, len - i, &t.cp[t.n]);
        t.fl[t.n] = cp_flags(t.cp[t.n]);
        t.n++;
    }
    ws->boff[t.n] = len;
    /* pass 0 splits the whole text; later ones split each earlier piece */
    size_t *a = ws->a, *b = ws->b, n_in = 1;
    a[0] = t.n;
    for (size_t p = 0; p < n_passes; p++) {
        pt_out o = {b, 0, 0};
        size_t start = 0;
        for (size_t i = 0; i < n_in; i++) {
            run_pass(passes[p], &t, start, a[i], &o);
            start = a[i];
        }
        size_t *tmp = a;
        a = b;
        b = tmp;
        n_in = o.n;
    }
    for (size_t i = 0; i < n_in; i++) a[i] = ws->boff[a[i]];
    *ends = a;
    *n_pieces = n_in;
    return FX_OK;
}

fx_status fx_pretok_split(fx_pretok kind, const fx_alloc *alloc, const char *text, size_t len,
                          size_t **ends, size_t *n_pieces, fx_error *err) {
    fx_pretok_ws ws = {alloc, NULL, NULL, NULL, NULL, NULL, 0};
    const size_t *e = NULL;
    *ends = NULL;
    *n_pieces = 0;
    fx_status st = fx_pretok_ws_split(&ws, kind, text, len, &e, n_pieces, err);
    if (st == FX_OK && e) {
        /* hand the result array over to the caller */
        *ends = (size_t *)e;
        if (e == ws.a) ws.a = NULL;
        else ws.b = NULL;
    }
    fx_pretok_ws_free(&ws);
    return st;
}

/* A cut at p that every pre-tokenizer here would also make, and whose two
 * sides split exactly as the whole would: a letter, a space, a letter
 * ("x| y": the letter run ends, " y" starts a word), or a printable ASCII
 * character, one newline, a letter ("x\n|y": a single newline is a piece
 * of its own or ends punctuation, and a letter after a newline always
 * starts a word). ASCII only, so both sides decode as they did whole. */
static bool is_alpha(unsigned char c) { return (c | 32) >= 'a' && (c | 32) <= 'z'; }

static bool safe_cut(const unsigned char *s, size_t p, size_t len) {
    if (p < 2 || p + 1 >= len) return false;
    if (s[p] == ' ') return is_alpha(s[p - 1]) && is_alpha(s[p + 1]);
    return s[p - 1] == '\n' && s[p - 2] > 0x20 && s[p - 2] < 0x7F && is_alpha(s[p]);
}

size_t fx_pretok_block_end(const char *text, size_t from, size_t len, size_t block) {
    const unsigned char *s = (const unsigned char *)text;
    if (len - from <= block) return len;
    size_t target = from + block;
    for (size_t p = target; p > from + block / 2; p--)
        if (safe_cut(s, p, len)) return p;
    for (size_t p = target + 1; p < len; p++)
        if (safe_cut(s, p, len)) return p;
    return len;
}
