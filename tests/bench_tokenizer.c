/*
 * Tokenizer throughput and linearity, for both vocabularies of
 * tests/data/vocab (or the directory given as argv[1]):
 *   - MB/s on ~1 MB of mixed text (ASCII prose and code, accented Latin,
 *     CJK, emoji, digits, whitespace runs), deterministic from a seed;
 *   - time(1 MB) <= 12 x time(100 KB): merging is O(n log n) and BPE works
 *     per pre-token, so ten times the text must cost about ten times.
 * Every measurement starts with cold caches (see flush_caches). Built with
 * the tests but not registered with ctest (timing is noisy on a shared
 * machine). Exits 1 if the linearity check fails.
 */
#define _POSIX_C_SOURCE 199309L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ferrox.h"
#include "test_util.h"
#include "test_rng.h"

static const char *const k_words[] = {
    "the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "tokenizer", "batch",
    "I'm", "you'll", "we've", "int", "main(void)", "{", "}", "return", "0;", "x+=1;",
    "d\xc3\xa9j\xc3\xa0", "na\xc3\xafve", "caf\xc3\xa9", "\xc3\xbc" "ber", "Stra\xc3\x9f" "e", "se\xc3\xb1or", "\xc5\x82\xc3\xb3" "d\xc5\xba",
    "\xe4\xb8\xad\xe6\x96\x87\xe6\xb5\x8b\xe8\xaf\x95", "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xae\xe6\x96\x87",
    "\xed\x95\x9c\xea\xb5\xad\xec\x96\xb4", "\xd0\xbf\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82",
    "\xf0\x9f\x99\x82", "\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd", "\xf0\x9f\x9a\x80\xf0\x9f\x94\xa5",
    "12345", "3.14159", "2026-11-30", "!!!", "...", "\"quoted\"", "(paren)",
};
static const char *const k_seps[] = {" ", " ", " ", " ", ", ", ". ", "\n", "  ", "\t", "\n\n", ": "};

static char *make_text(size_t size) {
    char *t = malloc(size + 64);
    if (!t) return NULL;
    uint64_t s = 0x9e3779b97f4a7c15ull;
    size_t n = 0;
    while (n < size) {
        const char *w = k_words[fx_test_rng_next(&s) % (sizeof k_words / sizeof k_words[0])];
        const char *sep = k_seps[fx_test_rng_next(&s) % (sizeof k_seps / sizeof k_seps[0])];
        size_t wl = strlen(w), sl = strlen(sep);
        if (n + wl + sl > size) break;
        memcpy(t + n, w, wl);
        memcpy(t + n + wl, sep, sl);
        n += wl + sl;
    }
    t[n] = '\0';
    return t;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Evicts the text, the ids and the vocabulary from the caches, so that
 * every measurement starts from the same (cold) state: timing the same
 * 100 KB again and again would otherwise run from a warm cache that 1 MB
 * can never have, and "non-linearity" would only measure cache size. */
static void flush_caches(void) {
    static unsigned char junk[64u << 20];
    for (size_t i = 0; i < sizeof junk; i += 64) junk[i]++;
}

static double time_once(fx_model *m, const char *text, size_t len, int32_t *ids, size_t cap, size_t *n_tokens) {
    flush_caches();
    double t0 = now();
    fx_status st = fx_tokenize(m, text, len, 0, ids, cap, n_tokens);
    double dt = now() - t0;
    if (st != FX_OK) {
        fprintf(stderr, "tokenize failed: %s\n", fx_model_errmsg(m));
        exit(1);
    }
    return dt;
}

/* A prefix of about `want` bytes that ends on a character boundary. */
static size_t prefix_len(const char *t, size_t total, size_t want) {
    if (want >= total) return total;
    while (want > 0 && ((unsigned char)t[want] & 0xC0) == 0x80) want--;
    return want;
}

int main(int argc, char **argv) {
    static const char *const vocabs[] = {"llama-spm", "gpt-2"};
    const size_t big = 1 << 20;
    char *text = make_text(big);
    if (!text) return 1;
    size_t len = strlen(text);
    int32_t *ids = malloc(len * sizeof *ids);
    if (!ids) return 1;
    int failed = 0, ran = 0;
    for (size_t v = 0; v < 2; v++) {
        char path[1024];
        if (argc > 1) {
            snprintf(path, sizeof path, "%s/ggml-vocab-%s.gguf", argv[1], vocabs[v]);
        } else {
            char rel[256];
            snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf", vocabs[v]);
            const char *p = fx_test_data_path(rel);
            snprintf(path, sizeof path, "%s", p);
        }
        fx_model_params params;
        fx_model_params_init(&params);
        params.flags = FX_MODEL_VOCAB_ONLY;
        fx_model *m = NULL;
        char err[512];
        if (fx_model_load(path, &params, &m, err, sizeof err) != FX_OK) {
            fprintf(stderr, "%s: %s\n", path, err);
            return 1;
        }
        /* 100 KB: the mean over the ten 100 KB slices of the text; 1 MB:
         * the whole text. Each is the best of five rounds. */
        size_t n_small = 0, n_big = 0, ls = len / 10;
        double ts = 1e30, tb = 1e30;
        for (int round = 0; round < 5; round++) {
            double sum = 0;
            size_t from = 0, n;
            for (int q = 0; q < 10; q++) {
                size_t to = prefix_len(text, len, (size_t)(q + 1) * (len / 10));
                sum += time_once(m, text + from, to - from, ids, len, &n);
                if (q == 0) n_small = n;
                from = to;
            }
            if (sum / 10 < ts) ts = sum / 10;
            double t = time_once(m, text, len, ids, len, &n_big);
            if (t < tb) tb = t;
        }
        double ratio = tb / ts;
        printf("%-10s %7zu bytes -> %6zu tokens %8.2f ms %6.1f MB/s | %7zu bytes -> %6zu tokens %8.2f ms "
               "%6.1f MB/s | time ratio %.2f (size ratio %.2f) %s\n",
               vocabs[v], ls, n_small, ts * 1e3, (double)ls / ts / 1e6, len, n_big, tb * 1e3,
               (double)len / tb / 1e6, ratio, (double)len / (double)ls, ratio <= 12.0 ? "ok" : "NOT LINEAR");
        if (ratio > 12.0) failed = 1;
        ran++;
        fx_model_free(m);
    }
    free(ids);
    free(text);
    if (!ran) printf("nothing to measure\n");
    return failed;
}
