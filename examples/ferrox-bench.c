/*
 * ferrox-bench: throughput and latency of a model through the batcher,
 * next to the roofline of the machine measured in the same run.
 *
 * Prints one JSON object per line (see usage() for the phases and fields).
 * Every measurement is the median over --repeats; with --mode both the
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

#include "kernels/kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* From OpenBLAS (linked through the library); declared here so the tool
 * needs no cblas include path. */
void openblas_set_num_threads(int num_threads);
char *openblas_get_corename(void);

enum { MODE_DET = 0, MODE_FAST = 1 };
static const char *const mode_names[2] = {"deterministic", "fast"};

typedef struct options {
    const char *model;
    uint32_t threads, prompt_tokens, gen_tokens, repeats, prefix_tokens;
    uint32_t rows[16];
    size_t n_rows;
    int roofline, prefill, decode, ttft;
    int modes[2];
    int n_modes;
    size_t roof_mib;        /* bandwidth buffer */
    size_t gemm_n;          /* M = N = K of the peak sgemm */
    double bw_gbps, peak_gflops; /* given instead of measured */
} options;

/* What one token costs, from the tensor table (see usage()). */
typedef struct model_cost {
    const char *wtype;
    uint64_t step_bytes;    /* weights read once per forward step */
    uint64_t layer_params;  /* matrix elements of all layers */
    uint64_t out_params;    /* the output matrix */
    uint32_t n_layer, n_head, head_dim, n_vocab;
} model_cost;

typedef struct roofline {
    double bw_gbps;         /* the decode roofline: best read pass */
    double peak_gflops;     /* the prefill roofline: OpenBLAS sgemm */
} roofline;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts v. */
static double median(double *v, size_t n) {
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The 1-minute load average, so every line says how busy the machine was
 * (-1 where /proc is absent). */
static double load1(void) {
    double l = -1.0;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1) l = -1.0;
        fclose(f);
    }
    return l;
}

static void random_ids(int32_t *ids, size_t n, uint32_t vocab, uint64_t seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = 3 + (int32_t)((seed >> 33) % (vocab - 3));
    }
}

/* ---- the roofline: memory bandwidth ---- */

typedef struct stream_ctx {
    uint8_t *buf;
    size_t chunk;       /* bytes per task */
    size_t n_tasks;
    int kernel;         /* 0: one stream per task, 1: 8 streams */
    double *a, *b, *c;  /* triad arrays */
    size_t n;           /* elements per triad array */
    uint64_t sink[64];
} stream_ctx;

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define FX_BENCH_X86 1
/* The read passes must be limited by memory, not by their own
 * instructions: wide loads, independent xor chains. */
__attribute__((target("avx512f"))) static uint64_t read_seq_512(
    const uint8_t *p, size_t n) {
    __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i + 256 <= n; i += 256) {
        s0 = _mm512_xor_si512(s0, _mm512_load_si512((const void *)(p + i)));
        s1 = _mm512_xor_si512(s1, _mm512_load_si512((const void *)(p + i + 64)));
        s2 = _mm512_xor_si512(s2, _mm512_load_si512((const void *)(p + i + 128)));
        s3 = _mm512_xor_si512(s3, _mm512_load_si512((const void *)(p + i + 192)));
    }
    s0 = _mm512_xor_si512(_mm512_xor_si512(s0, s1), _mm512_xor_si512(s2, s3));
    return (uint64_t)_mm512_reduce_or_epi64(s0);
}

/* 8 streams a chunk apart, each prefetched 2 KiB ahead: the way the
 * matmul reads a group of weight rows. On some machines this beats one
 * stream (more DRAM pages open at once, more misses in flight). */
__attribute__((target("avx512f"))) static uint64_t read_multi_512(
    const uint8_t *p, size_t n) {
    const size_t len = n / 8;
    __m512i s[8];
    for (int j = 0; j < 8; j++) s[j] = _mm512_setzero_si512();
    for (size_t i = 0; i + 64 <= len; i += 64)
        for (int j = 0; j < 8; j++) {
            const uint8_t *q = p + (size_t)j * len + i;
            _mm_prefetch((const char *)q + 2048, _MM_HINT_T0);
            s[j] = _mm512_xor_si512(s[j], _mm512_load_si512((const void *)q));
        }
    for (int j = 1; j < 8; j++) s[0] = _mm512_xor_si512(s[0], s[j]);
    return (uint64_t)_mm512_reduce_or_epi64(s[0]);
}

__attribute__((target("avx2"))) static uint64_t read_seq_256(const uint8_t *p,
                                                             size_t n) {
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i + 128 <= n; i += 128) {
        s0 = _mm256_xor_si256(s0, _mm256_load_si256((const void *)(p + i)));
        s1 = _mm256_xor_si256(s1, _mm256_load_si256((const void *)(p + i + 32)));
        s2 = _mm256_xor_si256(s2, _mm256_load_si256((const void *)(p + i + 64)));
        s3 = _mm256_xor_si256(s3, _mm256_load_si256((const void *)(p + i + 96)));
    }
    s0 = _mm256_xor_si256(_mm256_xor_si256(s0, s1), _mm256_xor_si256(s2, s3));
    return (uint64_t)_mm256_extract_epi64(s0, 0) ^
           (uint64_t)_mm256_extract_epi64(s0, 3);
}

__attribute__((target("avx2"))) static uint64_t read_multi_256(
    const uint8_t *p, size_t n) {
    const size_t len = n / 8;
    __m256i s[8];
    for (int j = 0; j < 8; j++) s[j] = _mm256_setzero_si256();
    for (size_t i = 0; i + 64 <= len; i += 64)
        for (int j = 0; j < 8; j++) {
            const uint8_t *q = p + (size_t)j * len + i;
            _mm_prefetch((const char *)q + 2048, _MM_HINT_T0);
            s[j] = _mm256_xor_si256(
                s[j], _mm256_xor_si256(_mm256_load_si256((const void *)q),
                                       _mm256_load_si256((const void *)(q + 32))));
        }
    for (int j = 1; j < 8; j++) s[0] = _mm256_xor_si256(s[0], s[j]);
    return (uint64_t)_mm256_extract_epi64(s[0], 0);
}
#endif

static uint64_t read_scalar(const uint8_t *p, size_t n) {
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 32 <= n; i += 32) {
        uint64_t v[4];
        memcpy(v, p + i, 32);
        s0 ^= v[0];
        s1 ^= v[1];
        s2 ^= v[2];
        s3 ^= v[3];
    }
    return s0 ^ s1 ^ s2 ^ s3;
}

static uint64_t read_pass(const uint8_t *p, size_t n, int multi) {
#ifdef FX_BENCH_X86
    if (__builtin_cpu_supports("avx512f"))
        return multi ? read_multi_512(p, n) : read_seq_512(p, n);
    if (__builtin_cpu_supports("avx2"))
        return multi ? read_multi_256(p, n) : read_seq_256(p, n);
#endif
    (void)multi;
    return read_scalar(p, n);
}

static void read_task(void *vctx, size_t task, unsigned thread) {
    stream_ctx *s = vctx;
    s->sink[thread % 64] ^= read_pass(s->buf + task * s->chunk, s->chunk,
                                      s->kernel);
}

static void triad_task(void *vctx, size_t task, unsigned thread) {
    stream_ctx *s = vctx;
    (void)thread;
    const size_t per = s->n / s->n_tasks;
    const size_t i0 = task * per, i1 = task + 1 == s->n_tasks ? s->n : i0 + per;
    for (size_t i = i0; i < i1; i++) s->a[i] = s->b[i] + 3.0 * s->c[i];
}

/* A roofline is a ceiling: what the machine can do, which a busy shared
 * machine only ever lowers. So the fastest of the repeats counts (the
 * medians are reported next to it). */
typedef struct timing {
    double best, med; /* seconds */
} timing;

static timing time_pool(fx_pool *pool, fx_pool_fn fn, stream_ctx *s,
                        size_t tasks, int reps) {
    double t[32];
    fx_pool_run(pool, fn, s, tasks); /* warm up: pages, caches, threads */
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        fx_pool_run(pool, fn, s, tasks);
        t[r] = now() - t0;
    }
    timing tm;
    tm.med = median(t, (size_t)reps);
    tm.best = t[0];
    return tm;
}

/* ---- the roofline: FLOP/s ---- */

/* GFLOP/s of fx_matmul y = x W^T at M = N = K = n, W of type t: the best
 * repeat (see timing). */
static double time_gemm(fx_kernels *kc, const float *x, const void *w,
                        fx_wtype t, size_t n, float *y, unsigned flags,
                        int reps) {
    double best = 1e30;
    fx_matmul(kc, x, n, n, w, t, n, n, y, n, flags);
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        fx_matmul(kc, x, n, n, w, t, n, n, y, n, flags);
        double dt = now() - t0;
        if (dt < best) best = dt;
    }
    return 2.0 * (double)n * (double)n * (double)n / best * 1e-9;
}

static fx_wtype wtype_of(const char *name) {
    if (!strcmp(name, "f16")) return FX_WTYPE_F16;
    if (!strcmp(name, "bf16")) return FX_WTYPE_BF16;
    if (!strcmp(name, "q8_0")) return FX_WTYPE_Q8_0;
    return FX_WTYPE_F32;
}

static double run_flops(const model_cost *mc, uint64_t p0, uint64_t n,
                        uint64_t n_logits);

static int bench_roofline(const options *o, const model_cost *mc,
                          roofline *rf) {
    fx_alloc alloc;
    fx_alloc_init(&alloc, NULL);
    fx_kernels_params kp;
    fx_kernels_params_init(&kp);
    kp.n_threads = o->threads;
    kp.fast_min_m = 1; /* FX_MATMUL_FAST: OpenBLAS at this M */
    kp.fast_blas = FX_FAST_BLAS_ALWAYS;
    fx_kernels *kc = NULL;
    fx_error err;
    if (fx_kernels_create(&alloc, &kp, &kc, &err) != FX_OK) {
        fprintf(stderr, "ferrox-bench: kernels: %s\n", err.message);
        return -1;
    }
    openblas_set_num_threads((int)o->threads);
    fx_pool *pool = fx_kernels_pool(kc);
    const int reps = 7;

    /* Bandwidth: read passes over roof_mib (far beyond any L3), then a
     * STREAM triad a = b + 3c over thirds of it. */
    stream_ctx s;
    memset(&s, 0, sizeof s);
    const size_t bytes = o->roof_mib << 20;
    void *raw = NULL;
    if (posix_memalign(&raw, 64, bytes) != 0) {
        fx_kernels_free(kc);
        return -1;
    }
    s.buf = raw;
    for (size_t i = 0; i < bytes; i += 8) {
        uint64_t v = i * 0x9e3779b97f4a7c15ull;
        memcpy(s.buf + i, &v, 8);
    }
    s.chunk = (size_t)4 << 20;
    s.n_tasks = bytes / s.chunk;
    double gbps[2], gbps_med[2];
    for (int k = 0; k < 2; k++) {
        s.kernel = k;
        const timing tm = time_pool(pool, read_task, &s, s.n_tasks, reps);
        gbps[k] = (double)(s.n_tasks * s.chunk) / tm.best * 1e-9;
        gbps_med[k] = (double)(s.n_tasks * s.chunk) / tm.med * 1e-9;
    }
    s.n = bytes / 3 / sizeof(double);
    s.a = (double *)(void *)s.buf;
    s.b = s.a + s.n;
    s.c = s.b + s.n;
    for (size_t i = 0; i < s.n; i++) s.b[i] = s.c[i] = 1.0 + (double)(i & 7);
    s.n_tasks = 64;
    const double triad =
        3.0 * (double)(s.n * sizeof(double)) /
        time_pool(pool, triad_task, &s, s.n_tasks, reps).best * 1e-9;
    free(raw);

    /* FLOP/s: OpenBLAS sgemm at M = N = K = gemm_n, and our kernel on the
     * same shape (F32, and the model's weight type). */
    const size_t n = o->gemm_n;
    float *x = malloc(n * n * sizeof *x), *w = malloc(n * n * sizeof *w);
    float *y = malloc(n * n * sizeof *y);
    const fx_wtype wt = wtype_of(mc->wtype);
    const size_t rb = fx_wtype_row_bytes(wt, n);
    uint8_t *wq = rb ? malloc(n * rb) : NULL;
    int rc = (x && w && y && (wq || wt == FX_WTYPE_F32)) ? 0 : -1;
    double sgemm = 0, ours = 0, ours_wt = 0;
    if (rc == 0) {
        uint64_t seed = 1;
        for (size_t i = 0; i < n * n; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            x[i] = (float)((seed >> 40) & 0xffff) / 32768.0f - 1.0f;
            w[i] = (float)((seed >> 20) & 0xffff) / 32768.0f - 1.0f;
        }
        for (size_t r = 0; wq && r < n; r++) {
            const float *src = w + r * n;
            uint8_t *dst = wq + r * rb;
            if (wt == FX_WTYPE_F16)
                fx_f32_to_f16_row((uint16_t *)(void *)dst, src, n);
            else if (wt == FX_WTYPE_BF16)
                fx_f32_to_bf16_row((uint16_t *)(void *)dst, src, n);
            else if (wt == FX_WTYPE_Q8_0)
                fx_quantize_q8_0((fx_block_q8_0 *)(void *)dst, src, n);
            else
                memcpy(dst, src, rb);
        }
        sgemm = time_gemm(kc, x, w, FX_WTYPE_F32, n, y, FX_MATMUL_FAST, reps);
        ours = time_gemm(kc, x, w, FX_WTYPE_F32, n, y, 0, reps);
        ours_wt = wt == FX_WTYPE_F32 ? ours
                                     : time_gemm(kc, x, wq, wt, n, y, 0, reps);
    }
    free(x);
    free(w);
    free(y);
    free(wq);
    const fx_isa isa = fx_kernels_isa(kc);
    fx_kernels_free(kc);
    /* What the batcher's fast mode does with this OpenBLAS. */
    fx_kernels_params_init(&kp);
    kp.n_threads = 1;
    bool fast_blas = false;
    if (fx_kernels_create(&alloc, &kp, &kc, &err) == FX_OK) {
        fast_blas = fx_kernels_fast_uses_blas(kc);
        fx_kernels_free(kc);
    }
    if (rc != 0) return rc;

    /* The peak: the faster of the two F32 GEMMs measured (an OpenBLAS
     * older than the CPU may run kernels a generation behind). */
    rf->bw_gbps = o->bw_gbps > 0 ? o->bw_gbps
                                 : (gbps[0] > gbps[1] ? gbps[0] : gbps[1]);
    rf->peak_gflops = o->peak_gflops > 0 ? o->peak_gflops
                                         : (sgemm > ours ? sgemm : ours);
    printf("{\"phase\":\"roofline\",\"rows\":0,\"threads\":%u,"
           "\"weight_type\":\"%s\",\"mode\":\"-\",\"bandwidth_gbps\":%.2f,"
           "\"read_seq_gbps\":%.2f,\"read_multi_gbps\":%.2f,"
           "\"read_seq_gbps_median\":%.2f,\"read_multi_gbps_median\":%.2f,"
           "\"triad_gbps\":%.2f,\"buffer_mib\":%zu,\"peak_gflops\":%.2f,"
           "\"sgemm_gflops\":%.2f,\"kernel_gflops\":%.2f,"
           "\"kernel_wtype_gflops\":%.2f,\"gemm_mnk\":%zu,"
           "\"openblas_core\":\"%s\",\"fast_uses_openblas\":%s,"
           "\"isa\":\"%s\",\"weight_bytes_per_step\":%llu,"
           "\"flops_per_token\":%.0f,\"decode_bound_steps_per_s\":%.2f,"
           "\"load1\":%.2f}\n",
           o->threads, mc->wtype, rf->bw_gbps, gbps[0], gbps[1], gbps_med[0],
           gbps_med[1], triad, o->roof_mib, rf->peak_gflops, sgemm, ours,
           ours_wt, n, openblas_get_corename(), fast_blas ? "true" : "false",
           isa == FX_ISA_AVX512 ? "avx512" : isa == FX_ISA_AVX2 ? "avx2"
                                                                : "portable",
           (unsigned long long)mc->step_bytes, run_flops(mc, 0, 1, 1),
           rf->bw_gbps * 1e9 / (double)mc->step_bytes, load1());
    fflush(stdout);
    return 0;
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
static double run_flops(const model_cost *mc, uint64_t p0, uint64_t n,
                        uint64_t n_logits) {
    const double pos_sum =
        (double)n * (double)p0 + (double)n * (double)(n + 1) / 2;
    return 2.0 * (double)n * (double)mc->layer_params +
           2.0 * (double)n_logits * (double)mc->out_params +
           4.0 * mc->n_layer * mc->n_head * mc->head_dim * pos_sum;
}

typedef struct result {
    double tps[2][64];      /* [mode][repeat] */
    double flops_per_token; /* for the FLOP fraction */
} result;

/* One line per mode. value: tokens/s (or seconds when field is
 * "seconds"); bytes_per_token: weight traffic per token (decode), 0 for
 * the FLOP-bound phases. */
static void report(const char *phase, uint32_t rows, const options *o,
                   const model_cost *mc, const roofline *rf, const char *field,
                   double (*v)[64], double flops_per_unit, double bytes_per_token,
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
        char frac[160] = "";
        if (rf->bw_gbps > 0 && rf->peak_gflops > 0)
            snprintf(frac, sizeof frac,
                     ",\"roofline_fraction\":%.4f,\"flop_fraction\":%.4f",
                     bytes_per_token > 0 ? gbps / rf->bw_gbps
                                         : gflops / rf->peak_gflops,
                     gflops / rf->peak_gflops);
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
               "\"weight_type\":\"%s\",\"mode\":\"%s\",\"%s\":%.4f,"
               "\"%s_best\":%.4f,\"repeats\":%u,\"gflops\":%.2f,"
               "\"weight_gbps\":%.2f%s%s,\"load1\":%.2f%s}\n",
               phase, rows, o->threads, mc->wtype, mode_names[mode], field, med,
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
               extra);
    }
    fx_batcher_free(b[0]);
    fx_batcher_free(b[1]);
    free(ids);
    free(res);
    return rc;
}

static int bench_decode(fx_model *m, const options *o, uint32_t rows,
                        const model_cost *mc, const roofline *rf) {
    enum { PROMPT = 8 };
    result *res = calloc(1, sizeof *res);
    fx_batcher *b[2] = {NULL, NULL};
    int rc = res ? 0 : -1;
    for (int i = 0; rc == 0 && i < o->n_modes; i++)
        if (!(b[o->modes[i]] = make(m, o, o->modes[i], rows, rows * PROMPT,
                                    PROMPT + o->gen_tokens + 8)))
            rc = -1;
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
               (double)mc->step_bytes / rows, extra);
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
            fx_batcher *b = make(m, o, mode, 1, 512, n + 8);
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
        char extra[64];
        snprintf(extra, sizeof extra, ",\"prefix_tokens\":%u", o->prefix_tokens);
        report("ttft_cold", 1, o, mc, rf, "seconds", cold->tps,
               run_flops(mc, 0, n, 1), 0, extra);
        /* Warm: the cache holds whole KV blocks of the prefix; the rest
         * is computed. */
        fx_batcher_params p;
        fx_batcher_params_init(&p);
        const uint32_t bt = p.block_tokens ? p.block_tokens : 16;
        const uint32_t cached = o->prefix_tokens / bt * bt;
        report("ttft_warm", 1, o, mc, rf, "seconds", warm->tps,
               run_flops(mc, cached, n - cached, 1), 0, extra);
    }
    free(ids);
    free(cold);
    free(warm);
    return rc;
}

/* ---- setup ---- */

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
"         [--prefix-tokens N] [--phases roofline,prefill,decode,ttft]\n"
"         [--mode deterministic|fast|both] [--fast]\n"
"         [--roofline-mib N] [--gemm-n N]\n"
"         [--bandwidth-gbps X] [--peak-gflops Y]\n"
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
"             prompt tokens / time to first token\n"
"  decode     --rows rows, each generating --gen-tokens after an 8-token\n"
"             prompt: tokens_per_s over the steps after the first token\n"
"  ttft_cold, ttft_warm  time to first token (\"seconds\") for\n"
"             --prefix-tokens (1000) + 16, with the prefix not cached / cached\n"
"Every model line has mode (deterministic, or fast = FX_BATCHER_FAST),\n"
"load1 (1-minute load average), *_best, gflops, weight_gbps and:\n"
"  roofline_fraction  decode: weight bytes read per second / bandwidth_gbps,\n"
"                     where a step reads weight_bytes_per_step once for all\n"
"                     its rows: (tokens_per_s / rows) * bytes / bandwidth;\n"
"                     prefill and ttft: FLOP/s achieved / peak_gflops\n"
"  flop_fraction      every phase: FLOP/s achieved / peak_gflops\n"
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
    o.rows[0] = 1;
    o.n_rows = 1;
    o.roofline = o.prefill = o.decode = o.ttft = 1;
    o.modes[0] = MODE_DET;
    o.n_modes = 1;
    o.roof_mib = 1024;
    o.gemm_n = 2048;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return usage(stdout);
        if (!strcmp(a, "--fast")) {
            parse_modes("fast", &o);
            continue;
        }
        if (!v) return usage(stderr);
        i++;
        if (!strcmp(a, "--model")) o.model = v;
        else if (!strcmp(a, "--threads")) o.threads = (uint32_t)atoi(v);
        else if (!strcmp(a, "--prompt-tokens")) o.prompt_tokens = (uint32_t)atoi(v);
        else if (!strcmp(a, "--gen-tokens")) o.gen_tokens = (uint32_t)atoi(v);
        else if (!strcmp(a, "--repeats")) o.repeats = (uint32_t)atoi(v);
        else if (!strcmp(a, "--prefix-tokens")) o.prefix_tokens = (uint32_t)atoi(v);
        else if (!strcmp(a, "--roofline-mib")) o.roof_mib = (size_t)atol(v);
        else if (!strcmp(a, "--gemm-n")) o.gemm_n = (size_t)atol(v);
        else if (!strcmp(a, "--bandwidth-gbps")) o.bw_gbps = atof(v);
        else if (!strcmp(a, "--peak-gflops")) o.peak_gflops = atof(v);
        else if (!strcmp(a, "--mode")) {
            if (parse_modes(v, &o) != 0) return usage(stderr);
        } else if (!strcmp(a, "--rows")) {
            o.n_rows = 0;
            for (char *s = (char *)v; *s && o.n_rows < 16;) {
                o.rows[o.n_rows++] = (uint32_t)strtoul(s, &s, 10);
                if (*s == ',') s++;
            }
        } else if (!strcmp(a, "--phases")) {
            o.roofline = strstr(v, "roofline") != NULL;
            o.prefill = strstr(v, "prefill") != NULL;
            o.decode = strstr(v, "decode") != NULL;
            o.ttft = strstr(v, "ttft") != NULL;
        } else return usage(stderr);
    }
    if (!o.model || o.threads == 0 || o.repeats == 0 || o.repeats > 64 ||
        o.gen_tokens < 2 || o.prompt_tokens == 0 || o.roof_mib < 64 ||
        o.gemm_n < 64 || o.gemm_n % 32 != 0)
        return usage(stderr);
    for (size_t i = 0; i < o.n_rows; i++)
        if (o.rows[i] == 0) return usage(stderr);

    fx_model *m = NULL;
    char err[512];
    fx_status st = fx_model_load(o.model, NULL, &m, err, sizeof err);
    if (st != FX_OK) {
        fprintf(stderr, "ferrox-bench: %s: %s\n", fx_status_str(st), err);
        return 1;
    }
    model_cost mc;
    if (model_costs(m, &mc) != 0) {
        fprintf(stderr, "ferrox-bench: %s: not a model with layers\n", o.model);
        fx_model_free(m);
        return 1;
    }
    roofline rf = {o.bw_gbps, o.peak_gflops};
    int rc = warm_up(m, &o, &mc);
    if (o.roofline) rc |= bench_roofline(&o, &mc, &rf);
    if (o.prefill) rc |= bench_prefill(m, &o, &mc, &rf);
    for (size_t i = 0; o.decode && i < o.n_rows; i++)
        rc |= bench_decode(m, &o, o.rows[i], &mc, &rf);
    if (o.ttft) rc |= bench_ttft(m, &o, &mc, &rf);
    fx_model_free(m);
    return rc ? 1 : 0;
}
