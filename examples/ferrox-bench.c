/*
 * ferrox-bench: throughput and latency of a model through the batcher.
 *
 *   ferrox-bench --model M [--threads K] [--prompt-tokens N] [--gen-tokens N]
 *                [--repeats R] [--rows 1,4,16,32] [--prefix-tokens N]
 *                [--phases prefill,decode,ttft] [--fast]
 *
 * Prints one JSON line per measurement, the median over the repeats:
 *   prefill     one row, a prompt of --prompt-tokens, run in one step;
 *               tokens_per_s = prompt tokens / time to first token
 *   decode      --rows rows in flight, each generating --gen-tokens after a
 *               short prompt; tokens_per_s = generated tokens / time, over
 *               the steps after every row has its first token
 *   ttft_cold / ttft_warm
 *               time to first token for a --prefix-tokens shared prefix plus
 *               a short suffix, with an empty prefix cache and then with the
 *               prefix cached by an earlier request (field "seconds")
 * Field names are kept stable: later versions add fields, never rename.
 */
#define _POSIX_C_SOURCE 200809L
#include <ferrox.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct options {
    const char *model;
    uint32_t threads, prompt_tokens, gen_tokens, repeats, prefix_tokens;
    uint32_t rows[16];
    size_t n_rows;
    int prefill, decode, ttft, fast;
} options;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, size_t n) {
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void random_ids(int32_t *ids, size_t n, uint32_t vocab, uint64_t seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = 3 + (int32_t)((seed >> 33) % (vocab - 3));
    }
}

static fx_batcher *make(fx_model *m, const options *o, uint32_t rows,
                        uint32_t step_tokens, uint32_t n_ctx) {
    fx_batcher_params p;
    fx_batcher_params_init(&p);
    p.n_threads = o->threads;
    p.max_rows = rows;
    p.max_step_tokens = step_tokens;
    p.n_ctx = n_ctx;
    if (o->fast) p.flags |= FX_BATCHER_FAST;
    fx_batcher *b = NULL;
    char err[256];
    fx_status st = fx_batcher_create(m, &p, &b, err, sizeof err);
    if (st != FX_OK) {
        fprintf(stderr, "ferrox-bench: %s: %s\n", fx_status_str(st), err);
        return NULL;
    }
    return b;
}

static int submit_ids(fx_batcher *b, const int32_t *ids, size_t n,
                      uint32_t gen, fx_row **row) {
    fx_request r;
    fx_request_init(&r);
    r.prompt_tokens = ids;
    r.n_prompt_tokens = n;
    r.max_tokens = gen;
    r.flags = FX_REQUEST_IGNORE_EOS;
    fx_status st = fx_submit(b, &r, row);
    if (st != FX_OK)
        fprintf(stderr, "ferrox-bench: submit: %s: %s\n", fx_status_str(st),
                fx_batcher_errmsg(b));
    return st == FX_OK ? 0 : -1;
}

/* Steps until idle; returns the last DONE's usage. */
static int drain(fx_batcher *b, fx_usage *usage) {
    while (fx_batcher_pending(b) > 0) {
        if (fx_step(b) != FX_OK) return -1;
        fx_event ev;
        while (fx_poll(b, &ev))
            if (ev.type == FX_EVENT_DONE) {
                if (ev.finish == FX_FINISH_ERROR) return -1;
                if (usage) *usage = ev.usage;
            }
    }
    return 0;
}

static void print_line(const char *phase, uint32_t rows, const options *o,
                       const char *wtype, const char *field, double value,
                       const char *extra) {
    printf("{\"phase\":\"%s\",\"rows\":%u,\"threads\":%u,\"weight_type\":\"%s\","
           "\"mode\":\"%s\",\"%s\":%.4f,\"repeats\":%u%s}\n",
           phase, rows, o->threads, wtype, o->fast ? "fast" : "deterministic",
           field, value, o->repeats, extra);
    fflush(stdout);
}

static int bench_prefill(fx_model *m, const options *o, uint32_t vocab,
                         const char *wtype) {
    int32_t *ids = malloc(o->prompt_tokens * sizeof *ids);
    double *tps = malloc(o->repeats * sizeof *tps);
    fx_batcher *b = make(m, o, 1, o->prompt_tokens, o->prompt_tokens + 8);
    int rc = (!ids || !tps || !b) ? -1 : 0;
    for (uint32_t r = 0; rc == 0 && r < o->repeats; r++) {
        /* A different prompt each time: nothing comes from the cache. */
        random_ids(ids, o->prompt_tokens, vocab, 1000 + r);
        fx_row *row;
        fx_usage u = {0};
        rc = submit_ids(b, ids, o->prompt_tokens, 1, &row);
        if (rc == 0) rc = drain(b, &u);
        if (rc == 0) tps[r] = o->prompt_tokens / u.ttft_seconds;
    }
    if (rc == 0) {
        char extra[64];
        snprintf(extra, sizeof extra, ",\"prompt_tokens\":%u", o->prompt_tokens);
        print_line("prefill", 1, o, wtype, "tokens_per_s", median(tps, o->repeats),
                   extra);
    }
    fx_batcher_free(b);
    free(ids);
    free(tps);
    return rc;
}

static int bench_decode(fx_model *m, const options *o, uint32_t rows,
                        uint32_t vocab, const char *wtype) {
    enum { PROMPT = 8 };
    double *tps = malloc(o->repeats * sizeof *tps);
    fx_batcher *b = make(m, o, rows, rows * PROMPT, PROMPT + o->gen_tokens + 8);
    int rc = (!tps || !b) ? -1 : 0;
    for (uint32_t r = 0; rc == 0 && r < o->repeats; r++) {
        for (uint32_t i = 0; rc == 0 && i < rows; i++) {
            int32_t ids[PROMPT];
            random_ids(ids, PROMPT, vocab, 7 + r * 1000 + i);
            fx_row *row;
            rc = submit_ids(b, ids, PROMPT, o->gen_tokens, &row);
        }
        /* The first step prefills every row and samples its first token;
         * what follows is pure decode. */
        if (rc == 0 && fx_step(b) != FX_OK) rc = -1;
        fx_event ev;
        while (fx_poll(b, &ev)) {}
        double t0 = now();
        uint64_t decode_steps = 0;
        while (rc == 0 && fx_batcher_pending(b) > 0) {
            if (fx_step(b) != FX_OK) rc = -1;
            decode_steps++;
            while (fx_poll(b, &ev)) {}
        }
        double t = now() - t0;
        /* Every row generates gen_tokens; the first came from prefill. */
        if (rc == 0) tps[r] = (double)rows * (o->gen_tokens - 1) / t;
        (void)decode_steps;
    }
    if (rc == 0) {
        char extra[64];
        snprintf(extra, sizeof extra, ",\"gen_tokens\":%u", o->gen_tokens);
        print_line("decode", rows, o, wtype, "tokens_per_s", median(tps, o->repeats),
                   extra);
    }
    fx_batcher_free(b);
    free(tps);
    return rc;
}

static int bench_ttft(fx_model *m, const options *o, uint32_t vocab,
                      const char *wtype) {
    enum { SUFFIX = 16 };
    uint32_t n = o->prefix_tokens + SUFFIX;
    int32_t *ids = malloc(n * sizeof *ids);
    double *cold = malloc(o->repeats * sizeof *cold);
    double *warm = malloc(o->repeats * sizeof *warm);
    int rc = (!ids || !cold || !warm) ? -1 : 0;
    for (uint32_t r = 0; rc == 0 && r < o->repeats; r++) {
        fx_batcher *b = make(m, o, 1, 512, n + 8);
        if (!b) { rc = -1; break; }
        random_ids(ids, n, vocab, 555 + r);
        fx_row *row;
        fx_usage u = {0};
        rc = submit_ids(b, ids, n, 1, &row);
        if (rc == 0) rc = drain(b, &u);
        cold[r] = u.ttft_seconds;
        /* Same prefix, another suffix: the prefix comes from the cache. */
        random_ids(ids + o->prefix_tokens, SUFFIX, vocab, 999 + r);
        if (rc == 0) rc = submit_ids(b, ids, n, 1, &row);
        if (rc == 0) rc = drain(b, &u);
        warm[r] = u.ttft_seconds;
        fx_batcher_free(b);
    }
    if (rc == 0) {
        char extra[64];
        snprintf(extra, sizeof extra, ",\"prefix_tokens\":%u", o->prefix_tokens);
        print_line("ttft_cold", 1, o, wtype, "seconds", median(cold, o->repeats), extra);
        print_line("ttft_warm", 1, o, wtype, "seconds", median(warm, o->repeats), extra);
    }
    free(ids);
    free(cold);
    free(warm);
    return rc;
}

static int usage(void) {
    fprintf(stderr,
            "usage: ferrox-bench --model M [--threads K] [--prompt-tokens N]\n"
            "         [--gen-tokens N] [--repeats R] [--rows 1,4,16,32]\n"
            "         [--prefix-tokens N] [--phases prefill,decode,ttft] [--fast]\n");
    return 2;
}

int main(int argc, char **argv) {
    options o;
    memset(&o, 0, sizeof o);
    o.threads = 1;
    o.prompt_tokens = 128;
    o.gen_tokens = 32;
    o.repeats = 3;
    o.prefix_tokens = 1000;
    o.rows[0] = 1;
    o.n_rows = 1;
    o.prefill = o.decode = o.ttft = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--fast")) { o.fast = 1; continue; }
        if (!v) return usage();
        i++;
        if (!strcmp(a, "--model")) o.model = v;
        else if (!strcmp(a, "--threads")) o.threads = (uint32_t)atoi(v);
        else if (!strcmp(a, "--prompt-tokens")) o.prompt_tokens = (uint32_t)atoi(v);
        else if (!strcmp(a, "--gen-tokens")) o.gen_tokens = (uint32_t)atoi(v);
        else if (!strcmp(a, "--repeats")) o.repeats = (uint32_t)atoi(v);
        else if (!strcmp(a, "--prefix-tokens")) o.prefix_tokens = (uint32_t)atoi(v);
        else if (!strcmp(a, "--rows")) {
            o.n_rows = 0;
            for (char *s = (char *)v; *s && o.n_rows < 16;) {
                o.rows[o.n_rows++] = (uint32_t)strtoul(s, &s, 10);
                if (*s == ',') s++;
            }
        } else if (!strcmp(a, "--phases")) {
            o.prefill = strstr(v, "prefill") != NULL;
            o.decode = strstr(v, "decode") != NULL;
            o.ttft = strstr(v, "ttft") != NULL;
        } else return usage();
    }
    if (!o.model || o.threads == 0 || o.repeats == 0 || o.gen_tokens < 2 ||
        o.prompt_tokens == 0)
        return usage();
    for (size_t i = 0; i < o.n_rows; i++)
        if (o.rows[i] == 0) return usage();

    fx_model *m = NULL;
    char err[512];
    fx_status st = fx_model_load(o.model, NULL, &m, err, sizeof err);
    if (st != FX_OK) {
        fprintf(stderr, "ferrox-bench: %s: %s\n", fx_status_str(st), err);
        return 1;
    }
    uint32_t vocab = fx_model_vocab_size(m);
    const char *wtype = "?";
    for (uint64_t i = 0; i < fx_model_tensor_count(m); i++) {
        fx_tensor_info t;
        fx_tensor_info_init(&t);
        if (fx_model_tensor_get(m, i, &t) == FX_OK &&
            strcmp(t.name, "blk.0.attn_q.weight") == 0)
            wtype = t.type_name;
    }
    int rc = 0;
    if (o.prefill) rc |= bench_prefill(m, &o, vocab, wtype);
    for (size_t i = 0; o.decode && i < o.n_rows; i++)
        rc |= bench_decode(m, &o, o.rows[i], vocab, wtype);
    if (o.ttft) rc |= bench_ttft(m, &o, vocab, wtype);
    fx_model_free(m);
    return rc ? 1 : 0;
}
