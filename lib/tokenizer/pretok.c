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

enum { CF_L = FX_CF_L, CF_N = FX_CF_N, CF_WS = FX_CF_WS, CF_P = FX_CF_P, CF_ANY = FX_CF_ANY };

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
    case UTF8PROC_CATEGORY_SM: case UTF8PROC_CATEGORY_SC: case UTF8PROC_CATEGORY_SK:
    case UTF8PROC_CATEGORY_SO:
        f |= FX_CF_S;
        break;
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
        f |= FX_CF_M;
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

typedef enum {
    PASS_GPT2, PASS_LLAMA3, PASS_QWEN2, PASS_DIGIT, PASS_DIGITS, PASS_ASCII3, PASS_PUNCT,
    PASS_REGEX /* an expression for regex.c */
} pt_pass;

typedef struct pt_step {
    pt_pass pass;
    const char *re; /* PASS_REGEX */
} pt_step;

static void run_pass(pt_pass p, const pt_text *t, size_t b, size_t e, pt_out *o) {
    switch (p) {
    case PASS_GPT2: scan_gpt2(t, b, e, o); break;
    case PASS_LLAMA3: scan_llama3(t, b, e, 3, o); break;
    case PASS_QWEN2: scan_llama3(t, b, e, 1, o); break;
    case PASS_DIGIT: scan_matches(t, b, e, match_digit, o); break;
    case PASS_DIGITS: scan_matches(t, b, e, match_digits, o); break;
    case PASS_ASCII3: scan_matches(t, b, e, match_ascii3, o); break;
    case PASS_PUNCT: scan_matches(t, b, e, match_punct, o); break;
    case PASS_REGEX: break;
    }
}

/* llama.cpp's expressions (llama-vocab.cpp) where no scanner above is the
 * same: falcon's first and deepseek-coder's are the punctuation and letter
 * runs with other members, deepseek-llm's letters are a list of ranges. */
#define RE_LLAMA3_TAIL "| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"
#define RE_CJK "[\xe4\xb8\x80-\xe9\xbe\xa5\xe0\xa0\x80-\xe4\xb8\x80\xea\xb0\x80-\xed\x9f\xbf]+"
static const pt_step k_falcon[] = {
    {PASS_REGEX, "[\\p{P}\\$\\+<=>\\^~\\|`]+"}, {PASS_GPT2, NULL}, {PASS_ASCII3, NULL}};
static const pt_step k_deepseek_llm[] = {
    {PASS_REGEX, "[\r\n]"},
    {PASS_REGEX,
     "\\s?[A-Za-z\xc2\xb5\xc3\x80-\xc3\x96\xc3\x98-\xc3\xb6\xc3\xb8-\xc6\xba\xc6\xbc-\xc6\xbf"
     "\xc7\x84-\xca\x93\xca\x95-\xca\xaf\xcd\xb0-\xcd\xb3\xcd\xb6\xcd\xb7\xcd\xbb-\xcd\xbd"
     "\xcd\xbf\xce\x86\xce\x88-\xce\x8a\xce\x8c\xce\x8e-\xce\xa1\xce\xa3-\xcf\xb5\xcf\xb7-"
     "\xd2\x81\xd2\x8a-\xd4\xaf\xd4\xb1-\xd5\x96\xe1\x82\xa0-\xe1\x83\x85\xe1\x8e\xa0-\xe1"
     "\x8f\xb5\xe1\x8f\xb8-\xe1\x8f\xbd\xe1\xb2\x90-\xe1\xb2\xba\xe1\xb2\xbd-\xe1\xb2\xbf"
     "\xe1\xb4\x80-\xe1\xb4\xab\xe1\xb5\xab-\xe1\xb5\xb7\xe1\xb5\xb9-\xe1\xb6\x9a\xe1\xb8"
     "\x80-\xe1\xbc\x95\xe1\xbc\x98-\xe1\xbc\x9d\xe1\xbc\xa0-\xe1\xbd\x85\xe1\xbd\x88-\xe1"
     "\xbd\x8d\xe1\xbd\x90-\xe1\xbd\x97\xe1\xbd\x99\xe1\xbd\x9b\xe1\xbd\x9d\xe1\xbd\x9f-"
     "\xe1\xbd\xbd\xe1\xbe\x80-\xe1\xbe\xb4\xe1\xbe\xb6-\xe1\xbe\xbc\xe1\xbe\xbe\xe1\xbf"
     "\x82-\xe1\xbf\x84\xe1\xbf\x86-\xe1\xbf\x8c\xe1\xbf\x90-\xe1\xbf\x93\xe1\xbf\x96-\xe1"
     "\xbf\x9b\xe1\xbf\xa0-\xe1\xbf\xac\xe1\xbf\xb2-\xe1\xbf\xb4\xe1\xbf\xb6-\xe1\xbf\xbc"
     "\xe2\x84\x82\xe2\x84\x87\xe2\x84\x8a-\xe2\x84\x93\xe2\x84\x95\xe2\x84\x99-\xe2\x84"
     "\x9d\xe2\x84\xa4\xe2\x84\xa6\xe2\x84\xa8\xe2\x84\xaa-\xe2\x84\xad\xe2\x84\xaf-\xe2"
     "\x84\xb4\xe2\x84\xb9\xe2\x84\xbc-\xe2\x84\xbf\xe2\x85\x85-\xe2\x85\x89\xe2\x85\x8e"
     "\xe2\x86\x83\xe2\x86\x84\xe2\xb0\x80-\xe2\xb1\xbb\xe2\xb1\xbe-\xe2\xb3\xa4\xe2\xb3"
     "\xab-\xe2\xb3\xae\xe2\xb3\xb2\xe2\xb3\xb3\xea\x99\x80-\xea\x99\xad\xea\x9a\x80-\xea"
     "\x9a\x9b\xea\x9c\xa2-\xea\x9d\xaf\xea\x9d\xb1-\xea\x9e\x87\xea\x9e\x8b-\xea\x9e\x8e"
     "\xea\xad\xb0-\xea\xae\xbf\xef\xac\x80-\xef\xac\x86\xef\xac\x93-\xef\xac\x97\xef\xbc"
     "\xa1-\xef\xbc\xba\xef\xbd\x81-\xef\xbd\x9a\xf0\x90\x90\x80-\xf0\x90\x91\x8f\xf0\x90"
     "\x92\xb0-\xf0\x90\x93\x93\xf0\x90\x93\x98-\xf0\x90\x93\xbb\xf0\x90\xb2\x80-\xf0\x90"
     "\xb2\xb2\xf0\x90\xb3\x80-\xf0\x90\xb3\xb2\xf0\x91\xa2\xa0-\xf0\x91\xa3\x9f\xf0\x9e"
     "\xa4\x80-\xf0\x9e\xa5\x83]+"},
    {PASS_REGEX, "\\s?[!-/:-~\xef\xbc\x81-\xef\xbc\x8f\xef\xbc\x9a-\xef\xbd\x9e\xe2\x80\x98-"
                 "\xe2\x80\x9f\xe3\x80\x80-\xe3\x80\x82]+"},
    {PASS_REGEX, "\\s+$"},
    {PASS_REGEX, RE_CJK},
    {PASS_DIGITS, NULL}};
static const pt_step k_deepseek_coder[] = {
    {PASS_REGEX, "[\r\n]"}, {PASS_REGEX, "\\s?\\p{L}+"}, {PASS_REGEX, "\\s?\\p{P}+"},
    {PASS_REGEX, RE_CJK}, {PASS_DIGIT, NULL}};
static const pt_step k_deepseek3[] = {
    {PASS_REGEX, "\\p{N}{1,3}"},
    {PASS_REGEX, "[\xe4\xb8\x80-\xe9\xbe\xa5\xe3\x81\x80-\xe3\x82\x9f\xe3\x82\xa0-\xe3\x83\xbf]+"},
    {PASS_REGEX, "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?"
                 "[\\p{L}\\p{M}]+" RE_LLAMA3_TAIL}};
/* " ?[^(\s|.,!?…。，、।۔،)]+" */
#define RE_BLOOM " ?[^(\\s|.,!?\xe2\x80\xa6\xe3\x80\x82\xef\xbc\x8c\xe3\x80\x81\xe0\xa5\xa4\xdb\x94\xd8\x8c)]+"
static const pt_step k_bloom[] = {{PASS_REGEX, RE_BLOOM}};
static const pt_step k_viking[] = {{PASS_REGEX, RE_BLOOM}, {PASS_DIGIT, NULL}};
static const pt_step k_tekken[] = {
    {PASS_REGEX, "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|"
                 "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| "
                 "?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}};

/* gpt-4o (o200k). tokenizer.json's expression has case classes
 * ([\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+ and the
 * reverse, contractions (?i:...)?); llama.cpp runs this rewrite of it
 * instead, over collapsed categories, so "upper" is a letter not in a-z and
 * "lower" one not in A-Z (every letter beyond ASCII is both), and a mark
 * is no letter: a mark ends a word. */
#define RE_APOS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?"
static const pt_step k_gpt4o[] = {
    {PASS_REGEX, "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+" RE_APOS
                 "|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*" RE_APOS
                 "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}};

static fx_status passes_of(fx_pretok kind, const pt_step **steps, size_t *n, fx_error *err) {
    static const pt_step k_default[] = {
        {PASS_PUNCT, NULL}, {PASS_GPT2, NULL}, {PASS_DIGITS, NULL}, {PASS_ASCII3, NULL}};
    static const pt_step k_gpt2[] = {{PASS_GPT2, NULL}};
    static const pt_step k_llama3[] = {{PASS_LLAMA3, NULL}};
    static const pt_step k_qwen2[] = {{PASS_QWEN2, NULL}};
    static const pt_step k_smollm[] = {{PASS_DIGIT, NULL}, {PASS_GPT2, NULL}};
#define STEPS(a) (*steps = (a), *n = sizeof(a) / sizeof *(a), FX_OK)
    switch (kind) {
    case FX_PRETOK_DEFAULT: return STEPS(k_default);
    case FX_PRETOK_GPT2: return STEPS(k_gpt2);
    case FX_PRETOK_LLAMA3: return STEPS(k_llama3);
    case FX_PRETOK_QWEN2: return STEPS(k_qwen2);
    case FX_PRETOK_SMOLLM: return STEPS(k_smollm);
    case FX_PRETOK_FALCON: return STEPS(k_falcon);
    case FX_PRETOK_DEEPSEEK_LLM: return STEPS(k_deepseek_llm);
    case FX_PRETOK_DEEPSEEK_CODER: return STEPS(k_deepseek_coder);
    case FX_PRETOK_DEEPSEEK3: return STEPS(k_deepseek3);
    case FX_PRETOK_BLOOM: return STEPS(k_bloom);
    case FX_PRETOK_VIKING: return STEPS(k_viking);
    case FX_PRETOK_TEKKEN: return STEPS(k_tekken);
    case FX_PRETOK_GPT4O: return STEPS(k_gpt4o);
    default: return fx_fail(err, FX_ERR_INVALID_ARG, "pre-tokenizer: no such kind (%d)", (int)kind);
    }
#undef STEPS
}

/* The expressions of kind, compiled into ws once. */
static fx_status ws_expressions(fx_pretok_ws *ws, fx_pretok kind, const pt_step *steps, size_t n,
                                fx_error *err) {
    if (ws->rx_kind == kind && kind != FX_PRETOK_NONE) return FX_OK;
    for (size_t i = 0; i < sizeof ws->rx / sizeof *ws->rx; i++) {
        fx_rx_free(ws->rx[i]);
        ws->rx[i] = NULL;
    }
    ws->rx_kind = FX_PRETOK_NONE;
    size_t r = 0;
    for (size_t i = 0; i < n; i++) {
        if (steps[i].pass != PASS_REGEX) continue;
        if (r == FX_PRETOK_MAX_RX)
            return fx_fail(err, FX_ERR_INTERNAL, "pre-tokenizer: more than %d expressions", FX_PRETOK_MAX_RX);
        fx_status st = fx_rx_compile(ws->alloc, steps[i].re, &ws->rx[r++], err);
        if (st != FX_OK) return st;
    }
    ws->rx_kind = kind;
    return FX_OK;
}

void fx_pretok_ws_free(fx_pretok_ws *ws) {
    for (size_t i = 0; i < sizeof ws->rx / sizeof *ws->rx; i++) {
        fx_rx_free(ws->rx[i]);
        ws->rx[i] = NULL;
    }
    ws->rx_kind = FX_PRETOK_NONE;
    fx_free(ws->alloc, ws->sym);
    ws->sym = NULL;
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
    const pt_step *passes = NULL;
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
        ws->sym = fx_malloc_array(ws->alloc, cap, sizeof(uint32_t));
        if (!ws->cp || !ws->fl || !ws->boff || !ws->a || !ws->b || !ws->sym) {
            fx_pretok_ws_free(ws);
            return fx_fail(err, FX_ERR_NOMEM, "tokenize: out of memory (pre-tokenizing %zu bytes)", len);
        }
        ws->cap = cap;
    }
    /* after the buffers: growing them frees the expressions too */
    if ((st = ws_expressions(ws, kind, passes, n_passes, err)) != FX_OK) return st;
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
    for (size_t p = 0, r = 0; p < n_passes; p++) {
        pt_out o = {b, 0, 0};
        size_t start = 0;
        const fx_rx *rx = passes[p].pass == PASS_REGEX ? ws->rx[r++] : NULL;
        if (rx)
            for (size_t i = 0; i < t.n; i++) ws->sym[i] = fx_rx_symbol(rx, t.cp[i], t.fl[i]);
        for (size_t i = 0; i < n_in; i++) {
            if (rx) o.n = fx_rx_split(rx, ws->sym + start, a[i] - start, start, o.end, o.n);
            else run_pass(passes[p].pass, &t, start, a[i], &o);
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
    fx_pretok_ws ws = {.alloc = alloc};
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
