/*
 * The tokenizer through the public API: conformance with llama.cpp's test
 * vectors (tests/data/vocab), round trips, special tokens, buffers, invalid
 * UTF-8 (docs/reliability.md 17-19), argument checks (32), and small hand-made
 * vocabularies whose results can be worked out by hand.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ferrox.h"
#include "gguf_writer.h"
#include "test_rng.h"
#include "test_util.h"

/* ---- helpers ---- */

static fx_model *load_path(const char *path) {
    fx_model_params p;
    fx_model_params_init(&p);
    p.flags = FX_MODEL_VOCAB_ONLY;
    fx_model *m = NULL;
    char err[512] = "";
    fx_status st = fx_model_load(path, &p, &m, err, sizeof err);
    if (st != FX_OK) fail_msg("loading %s: %s", path, err);
    return m;
}

/* A vocabulary from tests/data/vocab. */
static fx_model *load_vocab(const char *name) {
    char rel[256];
    snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf", name);
    return load_path(fx_test_data_path(rel));
}

/* Tokenizes into a fresh malloc'd array (*n ids). */
static int32_t *tok(fx_model *m, const char *text, size_t len, uint32_t flags, size_t *n) {
    size_t need = 0;
    fx_status st = fx_tokenize(m, text, len, flags, NULL, 0, &need);
    assert_true(st == FX_OK || st == FX_ERR_BUFFER_TOO_SMALL);
    int32_t *ids = malloc((need ? need : 1) * sizeof *ids);
    assert_non_null(ids);
    assert_int_equal(fx_tokenize(m, text, len, flags, ids, need, n), FX_OK);
    assert_int_equal(*n, need);
    return ids;
}

static char *detok(fx_model *m, const int32_t *ids, size_t n, uint32_t flags, size_t *len) {
    size_t need = 0;
    fx_status st = fx_detokenize(m, ids, n, flags, NULL, 0, &need);
    assert_true(st == FX_OK || st == FX_ERR_BUFFER_TOO_SMALL);
    char *s = malloc(need + 1);
    assert_non_null(s);
    assert_int_equal(fx_detokenize(m, ids, n, flags, s, need, len), FX_OK);
    assert_int_equal(*len, need);
    s[need] = '\0';
    return s;
}

static void expect_ids(fx_model *m, const char *text, uint32_t flags, const int32_t *want, size_t n_want) {
    size_t n;
    int32_t *ids = tok(m, text, strlen(text), flags, &n);
    int ok = n == n_want && (n == 0 || memcmp(ids, want, n * sizeof *ids) == 0);
    if (!ok) {
        char got[1024] = "";
        for (size_t i = 0; i < n && strlen(got) < 1000; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), " %d", ids[i]);
        free(ids);
        fail_msg("tokenize('%s'): got%s", text, got);
    }
    free(ids);
}

/* ---- conformance: every case of the .inp file equals its .out line ---- */

typedef struct cases {
    char *inp, *out;
    size_t inp_len;
} cases;

static const char SEP[] = "\n__ggml_vocab_test__\n";

static void conformance(const char *name, size_t *n_ok, size_t *n_total) {
    char rel[256];
    fx_model *m = load_vocab(name); /* before the path: both use one buffer */
    snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf.inp", name);
    const char *p = fx_test_data_path(rel);
    assert_non_null(m);
    cases c = {0};
    c.inp = fx_test_read_file(p, &c.inp_len);
    snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf.out", name);
    p = fx_test_data_path(rel);
    c.out = fx_test_read_file(p, NULL);
    assert_non_null(c.inp);
    assert_non_null(c.out);
    /* every case ends with SEP; each .out line is " id id ..." */
    size_t pos = 0;
    char *line = c.out;
    *n_ok = *n_total = 0;
    while (pos < c.inp_len) {
        char *end = strstr(c.inp + pos, SEP);
        assert_non_null(end);
        size_t len = (size_t)(end - (c.inp + pos));
        char *nl = strchr(line, '\n');
        assert_non_null(nl);
        *nl = '\0';
        size_t n;
        int32_t *ids = tok(m, c.inp + pos, len, 0, &n);
        char got[8192] = "";
        for (size_t i = 0; i < n; i++) snprintf(got + strlen(got), sizeof got - strlen(got), " %d", ids[i]);
        (*n_total)++;
        if (strcmp(got, line) == 0) (*n_ok)++;
        else print_message("%s case %zu differs:\n got %s\nwant %s\n", name, *n_total, got, line);
        /* and back: the text is recovered exactly */
        size_t dl;
        char *back = detok(m, ids, n, 0, &dl);
        if (dl != len || memcmp(back, c.inp + pos, len) != 0)
            fail_msg("%s case %zu does not round-trip: '%s'", name, *n_total, back);
        free(back);
        free(ids);
        line = nl + 1;
        pos += len + sizeof SEP - 1;
    }
    print_message("%s: %zu/%zu cases match llama.cpp\n", name, *n_ok, *n_total);
    free(c.inp);
    free(c.out);
    fx_model_free(m);
}

static void test_conformance_spm(void **state) {
    (void)state;
    size_t ok, total;
    conformance("llama-spm", &ok, &total);
    assert_int_equal(total, 46);
    assert_int_equal(ok, total);
}

static void test_conformance_gpt2(void **state) {
    (void)state;
    size_t ok, total;
    conformance("gpt-2", &ok, &total);
    assert_int_equal(total, 46);
    assert_int_equal(ok, total);
}

/* tests/data's other vocabularies, each against its own vectors. mpt
 * (GPT-NeoX's vocabulary): its runs of spaces are user-defined tokens,
 * matched before the pre-tokenizer even without special parsing. */
static void test_conformance_more(void **state) {
    (void)state;
    const char *names[] = {"mpt", "falcon", "deepseek-llm", "deepseek-coder"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        size_t ok, total;
        conformance(names[i], &ok, &total);
        assert_int_equal(total, 46);
        assert_int_equal(ok, total);
    }
}

/* ---- round trips ---- */

static const char *const k_texts[] = {
    "",
    " ",
    "Hello world",
    "  leading and trailing  ",
    "\n\n\ttabs\tand\r\nnewlines\n",
    ("d\xc3\xa9j\xc3\xa0 vu, na\xc3\xafve caf\xc3\xa9 \xc3\x9c" "ber"),
    "\xe4\xb8\xad\xe6\x96\x87\xe6\xb5\x8b\xe8\xaf\x95 \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xed\x95\x9c\xea\xb5\xad\xec\x96\xb4",
    "emoji \xf0\x9f\x99\x82\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd \xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7",
    "x = f(a[1], {b: 'c'}) // 1234567890 $$$ <tag/> ___ ~~~",
    "<s> </s> <unk> <|endoftext|> look like special tokens",
    "\xc4\xa0 is GPT-2's space",
};

static void roundtrip(const char *name) {
    fx_model *m = load_vocab(name);
    assert_non_null(m);
    for (size_t i = 0; i < sizeof k_texts / sizeof k_texts[0]; i++) {
        const char *t = k_texts[i];
        for (int special = 0; special < 2; special++) {
            size_t n, len;
            uint32_t flags = special ? FX_TOKENIZE_ADD_SPECIAL : 0;
            int32_t *ids = tok(m, t, strlen(t), flags, &n);
            char *back = detok(m, ids, n, special ? FX_DETOKENIZE_REMOVE_SPECIAL : 0, &len);
            if (len != strlen(t) || memcmp(back, t, len) != 0)
                fail_msg("%s: '%s' came back as '%s'", name, t, back);
            free(back);
            free(ids);
        }
    }
    fx_model_free(m);
}

static void test_roundtrip_spm(void **state) {
    (void)state;
    roundtrip("llama-spm");
    /* The one text SentencePiece cannot give back: its own space mark,
     * which it reads as the space it stands for (as llama.cpp does). */
    fx_model *m = load_vocab("llama-spm");
    size_t n, len;
    int32_t *ids = tok(m, "a\xe2\x96\x81" "b", 5, 0, &n);
    char *back = detok(m, ids, n, 0, &len);
    assert_int_equal(len, 3);
    assert_memory_equal(back, "a b", 3);
    free(back);
    free(ids);
    fx_model_free(m);
}

static void test_roundtrip_gpt2(void **state) {
    (void)state;
    roundtrip("gpt-2");
}

/* ---- 19: special-token text is literal unless parsing is asked for ---- */

static void test_special_parsing_spm(void **state) {
    (void)state;
    fx_model *m = load_vocab("llama-spm");
    assert_non_null(m);
    static const char t[] = "<s>Hello</s>";
    /* parsed: BOS, then the text with its space prefix again, then EOS */
    static const int32_t parsed[] = {1, 15043, 2};
    expect_ids(m, t, FX_TOKENIZE_PARSE_SPECIAL, parsed, 3);
    size_t n;
    int32_t *ids = tok(m, t, strlen(t), 0, &n);
    assert_true(n > 3);
    for (size_t i = 0; i < n; i++) assert_true(ids[i] != 1 && ids[i] != 2);
    free(ids);
    /* add + parse: a BOS in the text gives a second BOS, as llama.cpp */
    static const int32_t both[] = {1, 1, 15043, 2};
    expect_ids(m, t, FX_TOKENIZE_PARSE_SPECIAL | FX_TOKENIZE_ADD_SPECIAL, both, 4);
    static const int32_t added[] = {1, 15043};
    expect_ids(m, "Hello", FX_TOKENIZE_ADD_SPECIAL, added, 2);
    fx_model_free(m);
}

static void test_special_parsing_gpt2(void **state) {
    (void)state;
    fx_model *m = load_vocab("gpt-2");
    assert_non_null(m);
    static const int32_t parsed[] = {15496, 50256, 15496};
    expect_ids(m, "Hello<|endoftext|>Hello", FX_TOKENIZE_PARSE_SPECIAL, parsed, 3);
    size_t n;
    int32_t *ids = tok(m, "Hello<|endoftext|>", 18, 0, &n);
    assert_true(n > 2);
    for (size_t i = 0; i < n; i++) assert_int_not_equal(ids[i], 50256);
    free(ids);
    /* gpt-2 adds neither BOS nor EOS */
    static const int32_t plain[] = {15496};
    expect_ids(m, "Hello", FX_TOKENIZE_ADD_SPECIAL, plain, 1);
    fx_model_free(m);
}

/* ---- 18: buffers too small, input too long ---- */

static void test_buffers(void **state) {
    (void)state;
    fx_model *m = load_vocab("llama-spm");
    assert_non_null(m);
    int32_t ids[4] = {-1, -1, -1, -1};
    size_t n = 0;
    assert_int_equal(fx_tokenize(m, "Hello world", 11, 0, ids, 1, &n), FX_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 15043);
    assert_int_equal(ids[1], -1); /* nothing past the buffer */
    assert_non_null(strstr(fx_model_errmsg(m), "2 tokens needed"));
    assert_int_equal(fx_tokenize(m, "Hello world", 11, 0, NULL, 0, &n), FX_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(n, 2);
    assert_int_equal(fx_tokenize(m, "Hello world", 11, 0, ids, 2, &n), FX_OK);
    assert_int_equal(ids[1], 3186);

    char buf[8] = "#######";
    assert_int_equal(fx_token_to_piece(m, 15043, 0, buf, 3, &n), FX_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(n, 6);
    assert_memory_equal(buf, " He####", 7);
    assert_int_equal(fx_token_to_piece(m, 15043, 0, buf, 6, &n), FX_OK);
    assert_memory_equal(buf, " Hello", 6);
    assert_int_equal(fx_detokenize(m, ids, 2, 0, buf, 4, &n), FX_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(n, 11);
    assert_int_equal(fx_detokenize(m, ids, 2, 0, NULL, 0, &n), FX_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(n, 11);

    /* longer than 2^31 - 1 bytes: refused before a byte is read */
    assert_int_equal(fx_tokenize(m, "x", (size_t)INT32_MAX + 1, 0, ids, 4, &n), FX_ERR_TOO_LARGE);
    assert_int_equal(n, 0);
    assert_non_null(strstr(fx_model_errmsg(m), "2^31"));
    fx_model_free(m);
}

/* ---- 17: invalid UTF-8 ---- */

static const char *const k_bad_utf8[] = {
    "\xff",             "abc\xe4\xb8",       /* truncated */
    "\xc0\x80 overlong", "\xe0\x80\xaf",     /* overlong NUL and '/' */
    "\xed\xa0\x80 surrogate", "\xf4\x90\x80\x80 > U+10FFFF",
    "\x80\x81\x82 stray", "ok \xf0\x9f\x99",  /* 4-byte char cut short */
};

/* What the BPE tokenizer reads: each byte that starts no valid sequence
 * is U+FFFD. The test's own decoder, written separately from the library's. */
static size_t replace_invalid(const unsigned char *s, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t len = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        int ok = len > 0 && i + len <= n;
        for (size_t k = 1; ok && k < len; k++) ok = (s[i + k] & 0xC0) == 0x80;
        if (ok && len == 3) {
            unsigned v = ((c & 0x0F) << 12) | ((s[i + 1] & 0x3Fu) << 6);
            ok = v >= 0x800 && !(v >= 0xD800 && v <= 0xDFFF);
        }
        if (ok && len == 4) {
            unsigned v = ((c & 0x07) << 18) | ((s[i + 1] & 0x3Fu) << 12);
            ok = v >= 0x10000 && v <= 0x10FFFF;
        }
        if (!ok) {
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
            continue;
        }
        memcpy(out + o, s + i, len);
        o += len;
        i += len;
    }
    return o;
}

static void test_invalid_utf8(void **state) {
    (void)state;
    fx_model *spm = load_vocab("llama-spm");
    fx_model *bpe = load_vocab("gpt-2");
    assert_non_null(spm);
    assert_non_null(bpe);
    for (size_t i = 0; i < sizeof k_bad_utf8 / sizeof k_bad_utf8[0]; i++) {
        const char *t = k_bad_utf8[i];
        size_t tl = strlen(t), n, len;
        /* SentencePiece keeps every byte through its byte tokens */
        int32_t *ids = tok(spm, t, tl, 0, &n);
        char *back = detok(spm, ids, n, 0, &len);
        assert_int_equal(len, tl);
        assert_memory_equal(back, t, tl);
        free(back);
        free(ids);
        /* BPE reads each bad byte as U+FFFD */
        char want[64];
        size_t wl = replace_invalid((const unsigned char *)t, tl, want);
        ids = tok(bpe, t, tl, 0, &n);
        back = detok(bpe, ids, n, 0, &len);
        assert_int_equal(len, wl);
        assert_memory_equal(back, want, wl);
        free(back);
        free(ids);
    }
    /* NUL is an ordinary character for both */
    static const char nul[] = "a\0b";
    fx_model *ms[2] = {spm, bpe};
    for (int k = 0; k < 2; k++) {
        size_t n, len;
        int32_t *ids = tok(ms[k], nul, 3, 0, &n);
        char *back = detok(ms[k], ids, n, 0, &len);
        assert_int_equal(len, 3);
        assert_memory_equal(back, nul, 3);
        free(back);
        free(ids);
    }
    fx_model_free(spm);
    fx_model_free(bpe);
}

/* SentencePiece splits text into symbols by what each lead byte announces
 * (as llama.cpp does), after spaces became `▁`: a truncated sequence right
 * before a space swallows part of its `▁`, whose bytes then come back raw.
 * Anything else round-trips. */
static int spm_lossless(const unsigned char *t, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (t[i] == ' ')
            for (size_t k = 1; k <= 3 && k <= i; k++)
                if (t[i - k] >= 0xC0) return 0;
    return 1;
}

/* Random bytes, valid or not, with and without special parsing: never a
 * failure; SentencePiece gives every byte back (but see spm_lossless), BPE
 * every valid character and U+FFFD for each bad byte. */
static void test_random_bytes(void **state) {
    (void)state;
    fx_model *spm = load_vocab("llama-spm");
    fx_model *bpe = load_vocab("gpt-2");
    assert_non_null(spm);
    assert_non_null(bpe);
    static const unsigned char pool[] = {'a', 'b', ' ', ' ', '\n', '<', 's', '>', '/', '|', '0', 0x00, 0x7f,
                                         0x80, 0xbf, 0xc0, 0xc3, 0xa9, 0xe2, 0x96, 0x81, 0xed, 0xa0, 0xef,
                                         0xbf, 0xbd, 0xf0, 0x9f, 0x99, 0x82, 0xf4, 0x90, 0xf8, 0xff};
    uint64_t seed = 88172645463325252ull;
    unsigned char text[256];
    char want[3 * sizeof text];
    for (int iter = 0; iter < 3000; iter++) {
        size_t len = fx_test_rng_below(&seed, sizeof text);
        for (size_t i = 0; i < len; i++) {
            uint64_t r = fx_test_rng_next(&seed);
            text[i] = (r >> 32) % 4 == 0 ? (unsigned char)(r >> 40) : pool[(r >> 40) % sizeof pool];
        }
        for (uint32_t flags = 0; flags < 4; flags++) {
            size_t n, back_len;
            int32_t *ids = tok(spm, (const char *)text, len, flags, &n);
            char *back = detok(spm, ids, n, FX_DETOKENIZE_REMOVE_SPECIAL, &back_len);
            if (!(flags & FX_TOKENIZE_PARSE_SPECIAL) && spm_lossless(text, len)) {
                assert_int_equal(back_len, len);
                assert_memory_equal(back, text, len);
            }
            free(back);
            free(ids);
            ids = tok(bpe, (const char *)text, len, flags, &n);
            back = detok(bpe, ids, n, 0, &back_len);
            if (!(flags & FX_TOKENIZE_PARSE_SPECIAL)) {
                size_t wl = replace_invalid(text, len, want);
                assert_int_equal(back_len, wl);
                assert_memory_equal(back, want, wl);
            }
            free(back);
            free(ids);
        }
    }
    fx_model_free(spm);
    fx_model_free(bpe);
}

/* ---- pieces and getters ---- */

static void expect_piece(fx_model *m, int32_t id, uint32_t flags, const char *want) {
    char buf[64];
    size_t n;
    assert_int_equal(fx_token_to_piece(m, id, flags, buf, sizeof buf, &n), FX_OK);
    if (n != strlen(want) || memcmp(buf, want, n) != 0) fail_msg("piece of %d: '%.*s', want '%s'", id, (int)n, buf, want);
}

static void test_pieces_and_getters(void **state) {
    (void)state;
    fx_model *spm = load_vocab("llama-spm");
    fx_model *bpe = load_vocab("gpt-2");
    assert_non_null(spm);
    assert_non_null(bpe);
    expect_piece(spm, 15043, 0, " Hello");
    expect_piece(spm, 13, 0, "\n"); /* <0x0A> */
    expect_piece(spm, 1, 0, "");
    expect_piece(spm, 1, FX_DETOKENIZE_RENDER_SPECIAL, "<s>");
    expect_piece(spm, 0, FX_DETOKENIZE_RENDER_SPECIAL, "<unk>");
    expect_piece(bpe, 995, 0, " world");
    expect_piece(bpe, 50256, 0, "");
    expect_piece(bpe, 50256, FX_DETOKENIZE_RENDER_SPECIAL, "<|endoftext|>");
    assert_int_equal(fx_model_vocab_size(spm), 32000);
    assert_int_equal(fx_model_vocab_size(bpe), 50257);
    assert_int_equal(fx_model_special_token(spm, FX_TOKEN_BOS), 1);
    assert_int_equal(fx_model_special_token(spm, FX_TOKEN_EOS), 2);
    assert_int_equal(fx_model_special_token(spm, FX_TOKEN_UNK), 0);
    assert_int_equal(fx_model_special_token(spm, FX_TOKEN_PAD), -1);
    assert_int_equal(fx_model_special_token(spm, (fx_special_token)99), -1);
    assert_int_equal(fx_model_special_token(bpe, FX_TOKEN_BOS), 50256);
    assert_int_equal(fx_model_special_token(bpe, FX_TOKEN_UNK), -1);
    assert_int_equal(fx_model_special_token(bpe, FX_TOKEN_EOT), 50256); /* found by its text */
    assert_true(fx_token_is_eog(spm, 2));
    assert_false(fx_token_is_eog(spm, 1));
    assert_true(fx_token_is_eog(bpe, 50256));
    assert_int_equal(fx_token_type(spm, 1), FX_TOKEN_TYPE_CONTROL);
    assert_int_equal(fx_token_type(spm, 13), FX_TOKEN_TYPE_BYTE);
    assert_int_equal(fx_token_type(spm, 15043), FX_TOKEN_TYPE_NORMAL);
    assert_int_equal(fx_token_type(spm, 32000), FX_TOKEN_TYPE_UNDEFINED);
    /* BOS removal with REMOVE_SPECIAL keeps the SentencePiece space rule */
    int32_t ids[3] = {1, 15043, 2};
    char buf[32];
    size_t n;
    assert_int_equal(fx_detokenize(spm, ids, 3, FX_DETOKENIZE_REMOVE_SPECIAL, buf, sizeof buf, &n), FX_OK);
    assert_int_equal(n, 5);
    assert_memory_equal(buf, "Hello", 5);
    assert_int_equal(fx_detokenize(spm, ids, 3, FX_DETOKENIZE_RENDER_SPECIAL, buf, sizeof buf, &n), FX_OK);
    assert_int_equal(n, 13);
    assert_memory_equal(buf, "<s> Hello</s>", 13);
    fx_model_free(spm);
    fx_model_free(bpe);
}

/* ---- 32: argument checks ---- */

static void test_arguments(void **state) {
    (void)state;
    fx_model *m = load_vocab("llama-spm");
    assert_non_null(m);
    int32_t ids[4];
    size_t n;
    char buf[8];
    assert_int_equal(fx_tokenize(NULL, "a", 1, 0, ids, 4, &n), FX_ERR_INVALID_ARG);
    assert_int_equal(fx_tokenize(m, "a", 1, 0, ids, 4, NULL), FX_ERR_INVALID_ARG);
    assert_int_equal(fx_tokenize(m, NULL, 1, 0, ids, 4, &n), FX_ERR_INVALID_ARG);
    assert_int_equal(fx_tokenize(m, NULL, 0, 0, ids, 4, &n), FX_OK);
    assert_int_equal(n, 0);
    assert_int_equal(fx_tokenize(m, "a", 1, 0, NULL, 4, &n), FX_ERR_INVALID_ARG);
    assert_int_equal(fx_tokenize(m, "a", 1, 0x80, ids, 4, &n), FX_ERR_INVALID_ARG);
    assert_int_equal(fx_token_to_piece(NULL, 1, 0, buf, 8, &n), FX_ERR_INVALID_ARG);
    assert_int_equal(fx_token_to_piece(m, -1, 0, buf, 8, &n), FX_ERR_INVALID_ARG);
    assert_int_equal(fx_token_to_piece(m, 32000, 0, buf, 8, &n), FX_ERR_INVALID_ARG);
    assert_int_equal(fx_token_to_piece(m, 1, 0, NULL, 8, &n), FX_ERR_INVALID_ARG);
    assert_int_equal(fx_token_to_piece(m, 1, 0, buf, 8, NULL), FX_ERR_INVALID_ARG);
    assert_int_equal(fx_token_to_piece(m, 1, 0x10, buf, 8, &n), FX_ERR_INVALID_ARG);
    int32_t bad[2] = {5, 99999};
    assert_int_equal(fx_detokenize(m, bad, 2, 0, buf, 8, &n), FX_ERR_INVALID_ARG);
    assert_non_null(strstr(fx_model_errmsg(m), "tokens[1] = 99999"));
    assert_int_equal(fx_detokenize(m, NULL, 2, 0, buf, 8, &n), FX_ERR_INVALID_ARG);
    assert_int_equal(fx_detokenize(m, NULL, 0, 0, buf, 8, &n), FX_OK);
    assert_int_equal(n, 0);
    assert_int_equal(fx_detokenize(NULL, bad, 1, 0, buf, 8, &n), FX_ERR_INVALID_ARG);
    assert_int_equal(fx_model_vocab_size(NULL), 0);
    assert_int_equal(fx_model_special_token(NULL, FX_TOKEN_BOS), -1);
    assert_int_equal(fx_token_is_eog(NULL, 2), 0);
    assert_int_equal(fx_token_type(NULL, 2), FX_TOKEN_TYPE_UNDEFINED);
    fx_model_free(m);
}

/* ---- hand-made vocabularies (made in the test) ---- */

/* Writes a vocabulary-only GGUF; types may be NULL (all normal). */
static fx_model *build(const char *name, const char *model, const char *pre, const char *const *tokens,
                       size_t n, const float *scores, const int32_t *types, const char *const *merges,
                       size_t n_merges) {
    gw_buf b = {0};
    gw_header(&b, 3, 0, 0);
    uint64_t n_kv = 0;
    gw_kv_str(&b, "general.architecture", "llama"), n_kv++;
    gw_kv_str(&b, "tokenizer.ggml.model", model), n_kv++;
    if (pre) gw_kv_str(&b, "tokenizer.ggml.pre", pre), n_kv++;
    gw_kv_arr_str(&b, "tokenizer.ggml.tokens", tokens, n), n_kv++;
    if (scores) gw_kv_arr_f32(&b, "tokenizer.ggml.scores", scores, n), n_kv++;
    if (types) gw_kv_arr_i32(&b, "tokenizer.ggml.token_type", types, n), n_kv++;
    if (merges) gw_kv_arr_str(&b, "tokenizer.ggml.merges", merges, n_merges), n_kv++;
    gw_put_u64_at(&b, 16, n_kv);
    const char *path = fx_test_tmp_path(name);
    assert_int_equal(gw_write_file(&b, path), 0);
    gw_free(&b);
    fx_model *m = load_path(path);
    remove(path);
    return m;
}

#define SPM_N 270
static void spm_vocab(const char *tokens[SPM_N], float scores[SPM_N], int32_t types[SPM_N], char names[256][8]) {
    static const char *const pieces[] = {
        "\xe2\x96\x81", "a", "b", "c", "ab", ("\xe2\x96\x81" "a"), "bc", "abc", "<|im_end|>", "<user>", "\xe2\x96\x81\xe2\x96\x81"};
    static const float piece_scores[] = {-1, -2, -3, -4, -5, -6, -2.5f, -7, 0, 0, -8};
    static const int32_t piece_types[] = {1, 1, 1, 1, 1, 1, 1, 1, 3, 4, 1};
    tokens[0] = "<unk>", types[0] = 2, scores[0] = 0;
    tokens[1] = "<s>", types[1] = 3, scores[1] = 0;
    tokens[2] = "</s>", types[2] = 3, scores[2] = 0;
    for (int i = 0; i < 256; i++) {
        snprintf(names[i], 8, "<0x%02X>", i);
        tokens[3 + i] = names[i], types[3 + i] = 6, scores[3 + i] = 0;
    }
    for (int i = 0; i < 11; i++) tokens[259 + i] = pieces[i], scores[259 + i] = piece_scores[i], types[259 + i] = piece_types[i];
}

static void test_handmade_spm(void **state) {
    (void)state;
    const char *tokens[SPM_N];
    float scores[SPM_N];
    int32_t types[SPM_N];
    char names[256][8];
    spm_vocab(tokens, scores, types, names);
    fx_model *m = build("spm.gguf", "llama", NULL, tokens, SPM_N, scores, types, NULL, 0);
    /* "▁abc": pairs ▁a (-6), ab (-5), bc (-2.5). bc merges first; then
     * abc (-7) is queued, ab is stale, ▁a (-6) beats abc, after which
     * abc is stale too: ▁a bc */
    static const int32_t abc[] = {264, 265};
    expect_ids(m, "abc", 0, abc, 2);
    /* no token covers "é": its bytes, after the lone ▁ */
    static const int32_t e_acute[] = {259, 3 + 0xC3, 3 + 0xA9};
    expect_ids(m, "\xc3\xa9", 0, e_acute, 3);
    /* two spaces: the prefix and the text's become ▁▁ */
    static const int32_t sp[] = {269};
    expect_ids(m, " ", 0, sp, 1);
    /* special tokens: literal text without parsing, tokens with it */
    /* after a special token the text gets its space prefix again */
    expect_ids(m, "<|im_end|>a", FX_TOKENIZE_PARSE_SPECIAL, (const int32_t[]){267, 264}, 2);
    expect_ids(m, "<user>", FX_TOKENIZE_PARSE_SPECIAL, (const int32_t[]){268}, 1);
    /* a user-defined token is matched without the flag too (llama.cpp,
     * Hugging Face), a control token is not */
    expect_ids(m, "<user>", 0, (const int32_t[]){268}, 1);
    size_t n;
    int32_t *ids = tok(m, "<|im_end|>", 10, 0, &n);
    for (size_t i = 0; i < n; i++) assert_int_not_equal(ids[i], 267);
    free(ids);
    /* user-defined tokens decode to their text even without RENDER_SPECIAL */
    expect_piece(m, 268, 0, "<user>");
    expect_piece(m, 267, 0, "");
    fx_model_free(m);
}

/* Special tokens are matched longest first over the whole text, as
 * llama.cpp does, not leftmost first: in "abcd" with specials "ab" and
 * "bcd", "bcd" wins although "ab" starts earlier. */
static void test_special_longest_first(void **state) {
    (void)state;
    const char *tokens[262];
    int32_t types[262];
    char names[256][8];
    tokens[0] = "<unk>", types[0] = 2;
    tokens[1] = "<s>", types[1] = 3;
    tokens[2] = "</s>", types[2] = 3;
    for (int i = 0; i < 256; i++) {
        snprintf(names[i], 8, "<0x%02X>", i);
        tokens[3 + i] = names[i], types[3 + i] = 6;
    }
    tokens[259] = "\xe2\x96\x81", types[259] = 1;
    tokens[260] = "ab", types[260] = 3;
    tokens[261] = "bcd", types[261] = 3;
    fx_model *m = build("longest.gguf", "llama", NULL, tokens, 262, NULL, types, NULL, 0);
    /* "a" is text after nothing: it gets the space prefix, ▁ then byte a */
    expect_ids(m, "abcd", FX_TOKENIZE_PARSE_SPECIAL, (const int32_t[]){259, 3 + 'a', 261}, 3);
    expect_ids(m, "abab", FX_TOKENIZE_PARSE_SPECIAL, (const int32_t[]){260, 260}, 2);
    fx_model_free(m);
}

/* GPT-2's byte map, written out again here so the test does not share
 * the library's. */
static int byte_char(int b, char out[3]) {
    int cp = b, n = 0;
    if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)) {
        for (int i = 0; i < b; i++)
            if (!((i >= 33 && i <= 126) || (i >= 161 && i <= 172) || i >= 174)) n++;
        cp = 256 + n;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
        return 1;
    }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    out[2] = 0;
    return 2;
}

static void test_handmade_bpe(void **state) {
    (void)state;
    char chars[256][3];
    const char *tokens[260];
    for (int b = 0; b < 256; b++) {
        byte_char(b, chars[b]);
        tokens[b] = chars[b];
    }
    tokens[256] = "ab", tokens[257] = "bc", tokens[258] = "xyz", tokens[259] = "\xc4\xa0" "ab"; /* Ġab */
    /* rank decides: "b c" before "a b" gives a|bc; the other order ab|c */
    const char *m1[] = {"b c", "a b", "\xc4\xa0 ab"};
    const char *m2[] = {"a b", "b c", "\xc4\xa0 ab"};
    fx_model *m = build("bpe1.gguf", "gpt2", "gpt-2", tokens, 260, NULL, NULL, m1, 3);
    expect_ids(m, "abc", 0, (const int32_t[]){'a', 257}, 2);
    /* " ab" is one pre-token: Ġ a b -> Ġ ab -> Ġab */
    expect_ids(m, "ab ab", 0, (const int32_t[]){256, 259}, 2);
    /* no merges reach xyz: byte by byte, unless llama-bpe's whole-word rule */
    expect_ids(m, "xyz", 0, (const int32_t[]){'x', 'y', 'z'}, 3);
    fx_model_free(m);
    m = build("bpe2.gguf", "gpt2", "gpt-2", tokens, 260, NULL, NULL, m2, 3);
    expect_ids(m, "abc", 0, (const int32_t[]){256, 'c'}, 2);
    fx_model_free(m);
    m = build("bpe3.gguf", "gpt2", "llama-bpe", tokens, 260, NULL, NULL, m1, 3);
    expect_ids(m, "xyz", 0, (const int32_t[]){258}, 1);
    /* llama-bpe asks for BOS, but this vocabulary's default BOS (11) is a
     * plain byte token -- it is still what add-special gives */
    expect_ids(m, "xyz", FX_TOKENIZE_ADD_SPECIAL, (const int32_t[]){11, 258}, 2);
    fx_model_free(m);
    /* an unknown pre-tokenizer is refused, by name */
    gw_buf b = {0};
    gw_header(&b, 3, 0, 4);
    gw_kv_str(&b, "general.architecture", "llama");
    gw_kv_str(&b, "tokenizer.ggml.model", "gpt2");
    gw_kv_str(&b, "tokenizer.ggml.pre", "no-such-pre");
    gw_kv_arr_str(&b, "tokenizer.ggml.tokens", tokens, 260);
    const char *path = fx_test_tmp_path("bad-pre.gguf");
    assert_int_equal(gw_write_file(&b, path), 0);
    gw_free(&b);
    fx_model_params p;
    fx_model_params_init(&p);
    p.flags = FX_MODEL_VOCAB_ONLY;
    char err[512];
    fx_model *bad = NULL;
    assert_int_equal(fx_model_load(path, &p, &bad, err, sizeof err), FX_ERR_UNSUPPORTED);
    assert_null(bad);
    assert_non_null(strstr(err, "'no-such-pre'"));
    remove(path);
}

static void test_no_tokenizer_metadata(void **state) {
    (void)state;
    gw_buf b = {0};
    gw_header(&b, 3, 0, 1);
    gw_kv_str(&b, "general.architecture", "llama");
    const char *path = fx_test_tmp_path("novocab.gguf");
    assert_int_equal(gw_write_file(&b, path), 0);
    gw_free(&b);
    fx_model_params p;
    fx_model_params_init(&p);
    p.flags = FX_MODEL_VOCAB_ONLY;
    char err[512];
    fx_model *m = NULL;
    assert_int_equal(fx_model_load(path, &p, &m, err, sizeof err), FX_ERR_MISSING);
    assert_non_null(strstr(err, "tokenizer.ggml.model"));
    remove(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conformance_spm),
        cmocka_unit_test(test_conformance_gpt2),
        cmocka_unit_test(test_conformance_more),
        cmocka_unit_test(test_roundtrip_spm),
        cmocka_unit_test(test_roundtrip_gpt2),
        cmocka_unit_test(test_special_parsing_spm),
        cmocka_unit_test(test_special_parsing_gpt2),
        cmocka_unit_test(test_buffers),
        cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_random_bytes),
        cmocka_unit_test(test_pieces_and_getters),
        cmocka_unit_test(test_arguments),
        cmocka_unit_test(test_handmade_spm),
        cmocka_unit_test(test_special_longest_first),
        cmocka_unit_test(test_handmade_bpe),
        cmocka_unit_test(test_no_tokenizer_metadata),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
