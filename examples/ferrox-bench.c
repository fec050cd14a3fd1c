/*
 * ferrox-bench: throughput and latency of a model through the batcher,
 * next to the roofline of the machine measured in the same run.
 *
 * Prints one JSON object per line (see usage() for the phases and fields);
 * stderr says which phase is running. Every measurement is the median over --repeats; with --mode both the
 * deterministic and the fast batcher are measured repeat by repeat in
 * turn, so a shared machine's load falls on both alike.
 *
 * Field names are kept stable: later versions add fields, never rename.
 *
 * It is an internal tool (linked with the static library): the roofline
 * phase times the matmul kernels and OpenBLAS directly; everything else
 * goes through the public API as a host program would.
 */
#define _POSIX_C_SOURCE 200809L
#include <ferrox.h>

#include "bench.h"
#include "cli.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MODE_DET = 0, MODE_FAST = 1 };
static const char *const mode_names[2] = {"deterministic", "fast"};

static void random_ids(int32_t *ids, size_t n, uint32_t vocab, uint64_t seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = 3 + (int32_t)((seed >> 33) % (vocab - 3));
    }
}

/* ---- the model through the batcher ---- */

static fx_batcher *make(fx_model *m, const options *o, int mode,
                        uint32_t rows, uint32_t step_tokens, uint32_t n_ctx) {
    fx_batcher_params p;
    fx_batcher_params_init(&p);
    p.n_threads = o->threads;
    p.max_rows = rows;
    p.max_step_tokens = step_tokens;
    p.n_ctx = n_ctx;
    if (mode == MODE_FAST) p.flags |= FX_BATCHER_FAST;
    if (o->kv_f16) p.flags |= FX_BATCHER_KV_F16;
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

/* FLOPs of running tokens at positions p0 .. p0 + n - 1 of one sequence
 * with n_logits logits rows: the layers' matmuls, attention's q.k and p.v
 * over positions 0..t for each token t, the output matmul. */
double run_flops(const model_cost *mc, uint64_t p0, uint64_t n,
                 uint64_t n_logits) {
    const double pos_sum =
        (double)n * (double)p0 + (double)n * (double)(n + 1) / 2;
    return 2.0 * (double)n * (double)mc->layer_params +
           2.0 * (double)n_logits * (double)mc->out_params +
           4.0 * mc->n_layer * mc->n_head * mc->head_dim * pos_sum;
}

typedef struct result {
    double tps[2][64];      /* [mode][repeat] */
    /* The read bandwidth measured right around that repeat (decode with
     * a probe; else 0): the better of the probes before and after it. */
    double bw[2][64];
    /* Decode with a probe: per repeat, the steps' time against read passes
     * of the same bytes run between them (report's interleaved fields). */
    double il_frac[2][64], il_gbps[2][64];
} result;

/* One line per mode. value: tokens/s (or seconds when field is
 * "seconds"); bytes_per_token: weight traffic per token (decode), 0 for
 * the FLOP-bound phases. */
static void report(const char *phase, uint32_t rows, const options *o,
                   const model_cost *mc, const roofline *rf, const char *field,
                   double (*v)[64], double flops_per_unit, double bytes_per_token,
                   const double (*bw)[64], const result *il,
                   const char *extra) {
    for (int i = 0; i < o->n_modes; i++) {
        const int mode = o->modes[i];
        double sorted[64];
        memcpy(sorted, v[mode], o->repeats * sizeof *sorted);
        const double med = median(sorted, o->repeats);
        const int is_time = !strcmp(field, "seconds");
        const double best = is_time ? sorted[0] : sorted[o->repeats - 1];
        /* FLOP/s and bytes/s achieved: per token for tokens/s, per
         * request for seconds. */
        const double per_s = is_time ? 1.0 / med : med;
        const double gflops = flops_per_unit * per_s * 1e-9;
        const double gbps = bytes_per_token * per_s * 1e-9;
        char frac[256] = "";
        if (rf->bw_gbps > 0 && rf->peak_gflops > 0)
            snprintf(frac, sizeof frac,
                     ",\"roofline_fraction\":%.4f,\"flop_fraction\":%.4f",
                     bytes_per_token > 0 ? gbps / rf->bw_gbps
                                         : gflops / rf->peak_gflops,
                     gflops / rf->peak_gflops);
        if (bw && bytes_per_token > 0 && bw[mode][0] > 0) {
            /* Each repeat against the bandwidth of its own moment. */
            double q[64], b[64];
            for (uint32_t r = 0; r < o->repeats; r++) {
                q[r] = v[mode][r] * bytes_per_token * 1e-9 / bw[mode][r];
                b[r] = bw[mode][r];
            }
            const size_t len = strlen(frac);
            snprintf(frac + len, sizeof frac - len,
                     ",\"paired_bandwidth_gbps\":%.2f,"
                     "\"roofline_fraction_paired\":%.4f",
                     median(b, o->repeats), median(q, o->repeats));
        }
        if (il && bytes_per_token > 0 && il->il_frac[mode][0] > 0) {
            /* Each repeat's steps against read passes of the same bytes
             * run between them: the same moments, the same traffic. */
            double q[64], g[64];
            memcpy(q, il->il_frac[mode], o->repeats * sizeof *q);
            memcpy(g, il->il_gbps[mode], o->repeats * sizeof *g);
            const size_t len = strlen(frac);
            snprintf(frac + len, sizeof frac - len,
                     ",\"interleaved_bandwidth_gbps\":%.2f,"
                     "\"roofline_fraction_interleaved\":%.4f",
                     median(g, o->repeats), median(q, o->repeats));
        }
        char ratio[64] = "";
        if (o->n_modes == 2 && mode == MODE_FAST) {
            /* Paired: repeat r of both modes ran back to back. */
            double q[64];
            for (uint32_t r = 0; r < o->repeats; r++)
                q[r] = is_time ? v[MODE_DET][r] / v[MODE_FAST][r]
                               : v[MODE_FAST][r] / v[MODE_DET][r];
            snprintf(ratio, sizeof ratio, ",\"speedup_vs_deterministic\":%.4f",
                     median(q, o->repeats));
        }
        printf("{\"phase\":\"%s\",\"rows\":%u,\"threads\":%u,"
               "\"weight_type\":\"%s\",\"kv_type\":\"%s\","
               "\"mode\":\"%s\",\"%s\":%.4f,"
               "\"%s_best\":%.4f,\"repeats\":%u,\"gflops\":%.2f,"
               "\"weight_gbps\":%.2f%s%s,\"load1\":%.2f%s}\n",
               phase, rows, o->threads, mc->wtype, o->kv_f16 ? "f16" : "f32",
               mode_names[mode], field, med,
               field, best, o->repeats, gflops, gbps, frac, ratio, load1(),
               extra);
    }
    fflush(stdout);
}

static int bench_prefill(fx_model *m, const options *o, const model_cost *mc,
                         const roofline *rf) {
    result *res = calloc(1, sizeof *res);
    int32_t *ids = malloc(o->prompt_tokens * sizeof *ids);
    fx_batcher *b[2] = {NULL, NULL};
    int rc = (!ids || !res) ? -1 : 0;
    for (int i = 0; rc == 0 && i < o->n_modes; i++)
        if (!(b[o->modes[i]] = make(m, o, o->modes[i], 1, o->prompt_tokens,
                                    o->prompt_tokens + 8)))
            rc = -1;
    /* One prompt untimed first, as llama-batched-bench warms up: the
     * first step of a fresh batcher faults in its buffers and KV pages
     * (a third slower here), which no later request pays. */
    random_ids(ids, o->prompt_tokens, mc->n_vocab, 999);
    for (int i = 0; rc == 0 && i < o->n_modes; i++) {
        fx_row *row;
        fx_usage u;
        memset(&u, 0, sizeof u);
        rc = submit_ids(b[o->modes[i]], ids, o->prompt_tokens, 1, &row);
        if (rc == 0) rc = drain(b[o->modes[i]], &u);
    }
    for (uint32_t r = 0; rc == 0 && r < o->repeats; r++) {
        /* A different prompt each repeat (nothing from the cache), the
         * same for both modes. */
        random_ids(ids, o->prompt_tokens, mc->n_vocab, 1000 + r);
        for (int i = 0; rc == 0 && i < o->n_modes; i++) {
            const int mode = o->modes[i];
            fx_row *row;
            fx_usage u;
            memset(&u, 0, sizeof u);
            rc = submit_ids(b[mode], ids, o->prompt_tokens, 1, &row);
            if (rc == 0) rc = drain(b[mode], &u);
            if (rc == 0) res->tps[mode][r] = o->prompt_tokens / u.ttft_seconds;
        }
    }
    if (rc == 0) {
        char extra[64];
        snprintf(extra, sizeof extra, ",\"prompt_tokens\":%u", o->prompt_tokens);
        report("prefill", 1, o, mc, rf, "tokens_per_s", res->tps,
               run_flops(mc, 0, o->prompt_tokens, 1) / o->prompt_tokens, 0,
               NULL, NULL, extra);
    }
    fx_batcher_free(b[0]);
    fx_batcher_free(b[1]);
    free(ids);
    free(res);
    return rc;
}

/* The repeat again with a read pass of the step's weight bytes after
 * every step, timed apart: *frac = read time / step time over the repeat,
 * both sampled at the same moments. A drifting machine (this VM's read
 * bandwidth moves between 30 and 70 GB/s within seconds) then cannot
 * flatter or penalize the ratio, as a best-of probe before and after can. */
static int decode_interleaved(fx_batcher *b, bw_probe *probe, uint32_t rows,
                              const options *o, const model_cost *mc,
                              uint32_t r, double *frac, double *gbps) {
    enum { PROMPT = 8 };
    for (uint32_t i = 0; i < rows; i++) {
        int32_t ids[PROMPT];
        random_ids(ids, PROMPT, mc->n_vocab, 7 + r * 1000 + i);
        fx_row *row;
        if (submit_ids(b, ids, PROMPT, o->gen_tokens, &row) != 0) return -1;
    }
    fx_event ev;
    if (fx_step(b) != FX_OK) return -1;
    while (fx_poll(b, &ev)) {}
    double step_s = 0, read_s = 0, read_bytes = 0;
    while (fx_batcher_pending(b) > 0) {
        const double t0 = now();
        if (fx_step(b) != FX_OK) return -1;
        while (fx_poll(b, &ev)) {}
        step_s += now() - t0;
        read_s += bw_probe_read(probe, mc->step_bytes);
        read_bytes += (double)mc->step_bytes;
    }
    *frac = step_s > 0 ? read_s / step_s : 0;
    *gbps = read_s > 0 ? read_bytes / read_s * 1e-9 : 0;
    return 0;
}

static int bench_decode(fx_model *m, const options *o, uint32_t rows,
                        const model_cost *mc, const roofline *rf,
                        bw_probe *probe) {
    enum { PROMPT = 8 };
    result *res = calloc(1, sizeof *res);
    fx_batcher *b[2] = {NULL, NULL};
    int rc = res ? 0 : -1;
    for (int i = 0; rc == 0 && i < o->n_modes; i++)
        if (!(b[o->modes[i]] = make(m, o, o->modes[i], rows, rows * PROMPT,
                                    PROMPT + o->gen_tokens + 8)))
            rc = -1;
    double bw_before = probe ? bw_probe_measure(probe) : 0;
    for (uint32_t r = 0; rc == 0 && r < o->repeats; r++) {
        for (int mi = 0; rc == 0 && mi < o->n_modes; mi++) {
            const int mode = o->modes[mi];
            for (uint32_t i = 0; rc == 0 && i < rows; i++) {
                int32_t ids[PROMPT];
                random_ids(ids, PROMPT, mc->n_vocab, 7 + r * 1000 + i);
                fx_row *row;
                rc = submit_ids(b[mode], ids, PROMPT, o->gen_tokens, &row);
            }
            /* The first step prefills every row and samples its first
             * token; what follows is pure decode. */
            if (rc == 0 && fx_step(b[mode]) != FX_OK) rc = -1;
            fx_event ev;
            while (fx_poll(b[mode], &ev)) {}
            const double t0 = now();
            while (rc == 0 && fx_batcher_pending(b[mode]) > 0) {
                if (fx_step(b[mode]) != FX_OK) rc = -1;
                while (fx_poll(b[mode], &ev)) {}
            }
            const double t = now() - t0;
            /* Every row generates gen_tokens; the first came from prefill. */
            if (rc == 0)
                res->tps[mode][r] = (double)rows * (o->gen_tokens - 1) / t;
            if (probe) {
                const double bw_after = bw_probe_measure(probe);
                res->bw[mode][r] = bw_before > bw_after ? bw_before : bw_after;
                if (rc == 0)
                    rc = decode_interleaved(b[mode], probe, rows, o, mc, r,
                                            &res->il_frac[mode][r],
                                            &res->il_gbps[mode][r]);
                bw_before = bw_probe_measure(probe);
            }
        }
    }
    if (rc == 0) {
        /* The timed steps run positions PROMPT .. PROMPT + gen - 2, each
         * with logits. */
        const double flops = run_flops(mc, PROMPT, o->gen_tokens - 1,
                                       o->gen_tokens - 1) /
                             (o->gen_tokens - 1);
        char extra[64];
        snprintf(extra, sizeof extra, ",\"gen_tokens\":%u", o->gen_tokens);
        report("decode", rows, o, mc, rf, "tokens_per_s", res->tps, flops,
               (double)mc->step_bytes / rows, (const double(*)[64])res->bw,
               res, extra);
    }
    fx_batcher_free(b[0]);
    fx_batcher_free(b[1]);
    free(res);
    return rc;
}

static int bench_ttft(fx_model *m, const options *o, const model_cost *mc,
                      const roofline *rf) {
    enum { SUFFIX = 16 };
    const uint32_t n = o->prefix_tokens + SUFFIX;
    int32_t *ids = malloc(n * sizeof *ids);
    result *cold = calloc(1, sizeof *cold), *warm = calloc(1, sizeof *warm);
    int rc = (!ids || !cold || !warm) ? -1 : 0;
    for (uint32_t r = 0; rc == 0 && r < o->repeats; r++) {
        for (int mi = 0; rc == 0 && mi < o->n_modes; mi++) {
            const int mode = o->modes[mi];
            fx_batcher *b = make(m, o, mode, 1, o->step_tokens, n + 8);
            if (!b) {
                rc = -1;
                break;
            }
            random_ids(ids, n, mc->n_vocab, 555 + r);
            fx_row *row;
            fx_usage u;
            memset(&u, 0, sizeof u);
            rc = submit_ids(b, ids, n, 1, &row);
            if (rc == 0) rc = drain(b, &u);
            cold->tps[mode][r] = u.ttft_seconds;
            /* Same prefix, another suffix: the prefix comes from the cache. */
            random_ids(ids + o->prefix_tokens, SUFFIX, mc->n_vocab, 999 + r);
            if (rc == 0) rc = submit_ids(b, ids, n, 1, &row);
            if (rc == 0) rc = drain(b, &u);
            warm->tps[mode][r] = u.ttft_seconds;
            fx_batcher_free(b);
        }
    }
    if (rc == 0) {
        char extra[96];
        snprintf(extra, sizeof extra, ",\"prefix_tokens\":%u,\"step_tokens\":%u",
                 o->prefix_tokens, o->step_tokens);
        report("ttft_cold", 1, o, mc, rf, "seconds", cold->tps,
               run_flops(mc, 0, n, 1), 0, NULL, NULL, extra);
        /* Warm: the cache holds whole KV blocks of the prefix; the rest
         * is computed. */
        fx_batcher_params p;
        fx_batcher_params_init(&p);
        const uint32_t bt = p.block_tokens ? p.block_tokens : 16;
        const uint32_t cached = o->prefix_tokens / bt * bt;
        report("ttft_warm", 1, o, mc, rf, "seconds", warm->tps,
               run_flops(mc, cached, n - cached, 1), 0, NULL, NULL, extra);
    }
    free(ids);
    free(cold);
    free(warm);
    return rc;
}

/* ---- setup ---- */

/* One line on stderr before each phase: the results go to stdout, so a
 * long run shows where it is without mixing into them. */
#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
static void progress(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ferrox-bench: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

/* One short generation before anything is timed: the first touch of the
 * mapped weights pages them in, which would otherwise land in the first
 * measurement. */
static int warm_up(fx_model *m, const options *o, const model_cost *mc) {
    int32_t ids[8];
    random_ids(ids, 8, mc->n_vocab, 4242);
    fx_batcher *b = make(m, o, MODE_DET, 1, 8, 16);
    fx_row *row;
    int rc = b ? submit_ids(b, ids, 8, 2, &row) : -1;
    if (rc == 0) rc = drain(b, NULL);
    fx_batcher_free(b);
    return rc;
}

static int model_costs(fx_model *m, model_cost *mc) {
    memset(mc, 0, sizeof *mc);
    fx_model_info info;
    fx_model_info_init(&info);
    if (fx_model_get_info(m, &info) != FX_OK || info.n_head == 0) return -1;
    mc->n_layer = info.n_layer;
    mc->n_head = info.n_head;
    mc->head_dim = info.n_embd / info.n_head;
    mc->n_vocab = info.n_vocab;
    mc->wtype = "?";
    uint64_t embd_bytes = 0, embd_params = 0, all_bytes = 0;
    int tied = 1;
    for (uint64_t i = 0; i < fx_model_tensor_count(m); i++) {
        fx_tensor_info t;
        fx_tensor_info_init(&t);
        if (fx_model_tensor_get(m, i, &t) != FX_OK) return -1;
        const uint64_t elems = t.dims[0] * t.dims[1] * t.dims[2] * t.dims[3];
        all_bytes += t.n_bytes;
        if (!strcmp(t.name, "blk.0.attn_q.weight")) mc->wtype = t.type_name;
        if (!strcmp(t.name, "token_embd.weight")) {
            embd_bytes = t.n_bytes;
            embd_params = elems;
        } else if (!strcmp(t.name, "output.weight")) {
            tied = 0;
            mc->out_params = elems;
        } else if (t.n_dims >= 2) {
            mc->layer_params += elems;
        }
    }
    /* One row of the embedding is read per token; when tied, the whole
     * matrix is the output projection too. */
    mc->step_bytes = all_bytes - (tied ? 0 : embd_bytes);
    if (tied) mc->out_params = embd_params;
    return 0;
}

static int usage(FILE *f) {
    fprintf(f,
"usage: ferrox-bench --model M [--threads K] [--prompt-tokens N]\n"
"         [--gen-tokens N] [--repeats R] [--rows 1,4,16,32]\n"
"         [--prefix-tokens N] [--step-tokens N]\n"
"         [--phases roofline,prefill,decode,ttft]\n"
"         [--mode deterministic|fast|both] [--fast] [--mapped]\n"
"         [--kv-type f32|f16]\n"
"         [--roofline-mib N] [--gemm-n N]\n"
"         [--bandwidth-gbps X] [--peak-gflops Y]\n"
"\n"
"--mapped loads with FX_MODEL_MAPPED_WEIGHTS (weights used from the file's\n"
"mapping, not copied nor repacked); without it, with FX_MODEL_EAGER_COPY\n"
"(the copy made whole before the first step, not over the first steps):\n"
"the figures are the steady state's.\n"
"--kv-type f16: keys and values stored as f16 (FX_BATCHER_KV_F16, llama.cpp's\n"
"default; llama-batched-bench's too), half the KV bytes a step reads.\n"
"\n"
"One JSON object per line, medians over --repeats (default 3):\n"
"  roofline   the machine, with --threads threads, the best of 7 runs each\n"
"             (a ceiling; a shared machine only lowers it):\n"
"             bandwidth_gbps = the better read pass (read_seq_gbps: one\n"
"             stream per thread; read_multi_gbps: 8 prefetched streams)\n"
"             over --roofline-mib (default 1024: far beyond L3);\n"
"             triad_gbps (STREAM a=b+3c, 24 bytes/element);\n"
"             sgemm_gflops = OpenBLAS sgemm at M=N=K=--gemm-n (2048),\n"
"             kernel_gflops = ferrox's deterministic F32 matmul on that\n"
"             shape, kernel_wtype_gflops with the model's weight type;\n"
"             peak_gflops = the faster of sgemm and kernel (F32);\n"
"             fast_uses_openblas: whether --mode fast reaches OpenBLAS\n"
"             here (lib/kernels/kernels.h, fx_fast_blas)\n"
"  prefill    one row, --prompt-tokens (128) in one step: tokens_per_s =\n"
"             prompt tokens / time to first token, after one untimed\n"
"             prompt (llama-batched-bench warms up too)\n"
"  decode     --rows rows, each generating --gen-tokens after an 8-token\n"
"             prompt: tokens_per_s over the steps after the first token\n"
"  ttft_cold, ttft_warm  time to first token (\"seconds\") for\n"
"             --prefix-tokens (1000) + 16, with the prefix not cached / cached,\n"
"             prefilled in steps of at most --step-tokens (512)\n"
"Every model line has mode (deterministic, or fast = FX_BATCHER_FAST),\n"
"load1 (1-minute load average), *_best, gflops, weight_gbps and:\n"
"  roofline_fraction  decode: weight bytes read per second / bandwidth_gbps,\n"
"                     where a step reads weight_bytes_per_step once for all\n"
"                     its rows: (tokens_per_s / rows) * bytes / bandwidth;\n"
"                     prefill and ttft: FLOP/s achieved / peak_gflops\n"
"  flop_fraction      every phase: FLOP/s achieved / peak_gflops\n"
"  roofline_fraction_paired  decode: the same, each repeat against the\n"
"                     read bandwidth measured right before and after it\n"
"                     (the better of the two; median over repeats), for\n"
"                     machines whose bandwidth drifts (shared VMs: 30-66\n"
"                     GB/s within minutes); paired_bandwidth_gbps is the\n"
"                     median of those bandwidths\n"
"  roofline_fraction_interleaved  decode: each repeat run again with a\n"
"                     read pass of weight_bytes_per_step after every\n"
"                     step: the passes' time over the steps' time (the\n"
"                     same traffic at the same moments; median over\n"
"                     repeats); interleaved_bandwidth_gbps: the passes'\n"
"                     rate. A best-of probe flatters the ceiling on a\n"
"                     drifting machine; this one cannot\n"
"FLOPs per token = 2 * (matrix elements of the layers) + attention\n"
"(4 * layers * heads * head_dim * positions attended); the output matrix\n"
"(2 * its elements) once per logits row: every decode token, once per\n"
"prefill. weight_bytes_per_step = all tensor bytes but the embedding\n"
"table (one row of it is read per token; counted when the output is\n"
"tied to it). KV-cache traffic is not counted. With --mode both, each\n"
"repeat runs both modes back to back and the fast lines carry\n"
"speedup_vs_deterministic (median of the paired ratios).\n");
    return f == stdout ? 0 : 2;
}

/* "1,4,16": 0, or -1 for anything but 1 to 16 numbers in 1..4096. */
static int parse_rows(const char *v, options *o) {
    o->n_rows = 0;
    for (const char *s = v;;) {
        if (*s < '0' || *s > '9' || o->n_rows == 16) return -1;
        char *end;
        const unsigned long n = strtoul(s, &end, 10);
        if (n < 1 || n > 4096) return -1;
        o->rows[o->n_rows++] = (uint32_t)n;
        if (*end == '\0') return 0;
        if (*end != ',') return -1;
        s = end + 1;
    }
}

/* "prefill,decode": 0, or -1 for an empty list or an unknown phase. */
static int parse_phases(const char *v, options *o) {
    static const char *const names[4] = {"roofline", "prefill", "decode", "ttft"};
    int *const flags[4] = {&o->roofline, &o->prefill, &o->decode, &o->ttft};
    for (int i = 0; i < 4; i++) *flags[i] = 0;
    for (const char *s = v;;) {
        const size_t len = strcspn(s, ",");
        int known = 0;
        for (int i = 0; i < 4; i++)
            if (strlen(names[i]) == len && strncmp(s, names[i], len) == 0)
                *flags[i] = known = 1;
        if (!known) return -1;
        if (s[len] == '\0') return 0;
        s += len + 1;
    }
}

static int parse_modes(const char *v, options *o) {
    if (!strcmp(v, "deterministic")) {
        o->modes[0] = MODE_DET;
        o->n_modes = 1;
    } else if (!strcmp(v, "fast")) {
        o->modes[0] = MODE_FAST;
        o->n_modes = 1;
    } else if (!strcmp(v, "both")) {
        o->modes[0] = MODE_DET;
        o->modes[1] = MODE_FAST;
        o->n_modes = 2;
    } else {
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    options o;
    memset(&o, 0, sizeof o);
    o.threads = 1;
    o.prompt_tokens = 128;
    o.gen_tokens = 32;
    o.repeats = 3;
    o.prefix_tokens = 1000;
    o.step_tokens = 512;
    o.rows[0] = 1;
    o.n_rows = 1;
    o.roofline = o.prefill = o.decode = o.ttft = 1;
    o.modes[0] = MODE_DET;
    o.n_modes = 1;
    o.roof_mib = 1024;
    o.gemm_n = 2048;
    int mapped = 0;
    cli c;
    cli_init(&c, "ferrox-bench", argc, argv);
    while (cli_next(&c)) {
        int bad = 0;
        uint64_t n = 0;
        const char *v = NULL;
        if (cli_is_help(&c)) return usage(stdout);
        else if (cli_is(&c, "--fast")) parse_modes("fast", &o);
        else if (cli_is(&c, "--mapped")) mapped = 1;
        else if (cli_is(&c, "--kv-type")) {
            static const char *const kv_types[] = {"f32", "f16"};
            bad = cli_choice(&c, kv_types, 2, &o.kv_f16);
        }
        else if (cli_is(&c, "--model")) bad = !(o.model = cli_value(&c));
        else if (cli_is(&c, "--threads")) bad = cli_u32(&c, 1, 256, &o.threads);
        else if (cli_is(&c, "--prompt-tokens")) bad = cli_u32(&c, 1, 1u << 20, &o.prompt_tokens);
        else if (cli_is(&c, "--gen-tokens")) bad = cli_u32(&c, 2, 1u << 20, &o.gen_tokens);
        else if (cli_is(&c, "--repeats")) bad = cli_u32(&c, 1, 64, &o.repeats);
        else if (cli_is(&c, "--prefix-tokens")) bad = cli_u32(&c, 0, 1u << 20, &o.prefix_tokens);
        else if (cli_is(&c, "--step-tokens")) bad = cli_u32(&c, 1, 1u << 20, &o.step_tokens);
        else if (cli_is(&c, "--roofline-mib")) {
            bad = cli_u64(&c, 64, 1u << 20, &n);
            o.roof_mib = (size_t)n;
        } else if (cli_is(&c, "--gemm-n")) {
            bad = cli_u64(&c, 64, 1u << 16, &n);
            if (!bad && n % 32 != 0)
                return cli_usage_error(&c, "--gemm-n: %llu is not a multiple of 32",
                                       (unsigned long long)n);
            o.gemm_n = (size_t)n;
        } else if (cli_is(&c, "--bandwidth-gbps")) bad = cli_double(&c, 0, 1e6, 1, &o.bw_gbps);
        else if (cli_is(&c, "--peak-gflops")) bad = cli_double(&c, 0, 1e9, 1, &o.peak_gflops);
        else if (cli_is(&c, "--mode")) {
            if (!(v = cli_value(&c))) return CLI_USAGE;
            if (parse_modes(v, &o) != 0)
                return cli_usage_error(&c, "--mode: '%s' is not deterministic, "
                                           "fast or both", v);
        } else if (cli_is(&c, "--rows")) {
            if (!(v = cli_value(&c))) return CLI_USAGE;
            if (parse_rows(v, &o) != 0)
                return cli_usage_error(&c, "--rows: '%s' is not a list of up to "
                                           "16 row counts from 1 to 4096", v);
        } else if (cli_is(&c, "--phases")) {
            if (!(v = cli_value(&c))) return CLI_USAGE;
            if (parse_phases(v, &o) != 0)
                return cli_usage_error(&c, "--phases: '%s' is not a list of "
                                           "roofline, prefill, decode, ttft", v);
        } else return cli_unknown(&c);
        if (bad) return CLI_USAGE;
    }
    if (!o.model) return cli_usage_error(&c, "--model is required");

    fx_model *m = NULL;
    char err[512];
    fx_model_params mp;
    fx_model_params_init(&mp);
    mp.flags |= mapped ? FX_MODEL_MAPPED_WEIGHTS : FX_MODEL_EAGER_COPY;
    progress("loading %s", o.model);
    fx_status st = fx_model_load(o.model, &mp, &m, err, sizeof err);
    if (st != FX_OK) return cli_fail("ferrox-bench", o.model, fx_status_str(st), err);
    model_cost mc;
    if (model_costs(m, &mc) != 0) {
        fprintf(stderr, "ferrox-bench: %s: not a model with layers\n", o.model);
        fx_model_free(m);
        return 1;
    }
    roofline rf = {o.bw_gbps, o.peak_gflops};
    progress("warming up (one short generation)");
    int rc = warm_up(m, &o, &mc);
    if (o.roofline) {
        progress("roofline: read bandwidth over %zu MiB, sgemm at n=%zu",
                 o.roof_mib, o.gemm_n);
        rc |= bench_roofline(&o, &mc, &rf);
    }
    if (o.prefill) {
        progress("prefill: %u prompt tokens, %u repeats", o.prompt_tokens,
                 o.repeats);
        rc |= bench_prefill(m, &o, &mc, &rf);
    }
    /* No probe when the bandwidth is given: the fractions use that. */
    bw_probe *probe = o.decode && o.bw_gbps <= 0 ? bw_probe_create(&o) : NULL;
    for (size_t i = 0; o.decode && i < o.n_rows; i++) {
        progress("decode: %u rows, %u tokens each, %u repeats", o.rows[i],
                 o.gen_tokens, o.repeats);
        rc |= bench_decode(m, &o, o.rows[i], &mc, &rf, probe);
    }
    bw_probe_free(probe);
    if (o.ttft) {
        progress("ttft: a %u-token prefix, cold then cached, %u repeats",
                 o.prefix_tokens, o.repeats);
        rc |= bench_ttft(m, &o, &mc, &rf);
    }
    progress(rc ? "failed" : "done");
    fx_model_free(m);
    return rc ? 1 : 0;
}
