/*
 * Kernel benchmark (built, not a ctest test): memory bandwidth, OpenBLAS
 * sgemm and ferrox's matmul, measured side by side in one run so a noisy
 * shared machine affects all of them alike. One JSON object per line.
 *
 *   bench_kernels [--threads N] [--quick] [--n N] [--k K]
 *
 * Medians over repeats (and the best, and process CPU time per call). For
 * each M: a read pass (the bandwidth roofline at that moment), the
 * OpenBLAS F32 sgemm at the same shape (through FX_MATMUL_FAST), and each
 * ferrox weight type on each ISA the CPU has (AVX2, AVX-512: "isa"):
 * weight GB/s (weight bytes / time: the decode roofline), GFLOP/s
 * (2*M*N*K / time), the ratio to OpenBLAS (its time / ours: > 1 is
 * faster), to the AVX2 path (ratio_vs_avx2) and to the read pass. Each
 * call reads a different
 * copy of W (>= 512 MiB of copies) so no run is served from L3.
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/kernels.h"
#include "test_rng.h"

/* From OpenBLAS (linked through the library); declared here so the bench
 * needs no cblas include path. */
char *openblas_get_corename(void);

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_ms(long ms) {
    /* OpenBLAS's threads spin for a while after a call; let them park so
     * they do not steal the next measurement's cores. */
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- STREAM-like passes on the kernels' own pool ---- */

typedef struct stream_ctx {
    uint64_t *a, *b, *c;
    size_t n, chunk;
    uint64_t sums[64];
    int mode; /* 0: read (sum), 1: triad a = b + 3c */
    int avx2; /* read with 32-byte loads, as the matmul does */
} stream_ctx;

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
/* The read pass must not be limited by its own instruction rate: 4
 * independent 32-byte streams of xor, as wide as the matmul's loads. */
__attribute__((target("avx2"))) static uint64_t read_avx2(const uint64_t *a,
                                                           size_t n) {
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_xor_si256(s0, _mm256_loadu_si256((const void *)(a + i)));
        s1 = _mm256_xor_si256(s1, _mm256_loadu_si256((const void *)(a + i + 4)));
        s2 = _mm256_xor_si256(s2, _mm256_loadu_si256((const void *)(a + i + 8)));
        s3 = _mm256_xor_si256(s3,
                              _mm256_loadu_si256((const void *)(a + i + 12)));
    }
    s0 = _mm256_xor_si256(_mm256_xor_si256(s0, s1), _mm256_xor_si256(s2, s3));
    uint64_t r[4];
    _mm256_storeu_si256((void *)r, s0);
    for (; i < n; i++) r[0] ^= a[i];
    return r[0] ^ r[1] ^ r[2] ^ r[3];
}
static int have_avx2(void) { return __builtin_cpu_supports("avx2"); }
#else
static uint64_t read_avx2(const uint64_t *a, size_t n) {
    uint64_t r = 0;
    for (size_t i = 0; i < n; i++) r ^= a[i];
    return r;
}
static int have_avx2(void) { return 0; }
#endif

static void stream_task(void *vctx, size_t task, unsigned thread) {
    stream_ctx *s = vctx;
    size_t i0 = task * s->chunk, i1 = i0 + s->chunk;
    if (i1 > s->n) i1 = s->n;
    if (s->mode == 0 && s->avx2) {
        s->sums[thread % 64] += read_avx2(s->a + i0, i1 - i0);
    } else if (s->mode == 0) {
        uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        size_t i = i0;
        for (; i + 4 <= i1; i += 4) {
            s0 += s->a[i];
            s1 += s->a[i + 1];
            s2 += s->a[i + 2];
            s3 += s->a[i + 3];
        }
        for (; i < i1; i++) s0 += s->a[i];
        s->sums[thread % 64] += s0 + s1 + s2 + s3;
    } else {
        for (size_t i = i0; i < i1; i++) s->a[i] = s->b[i] + 3 * s->c[i];
    }
}

/* Prints the passes; returns the read pass's GB/s (the roofline for
 * weight streaming), 0 on failure. */
static double bench_stream(fx_pool *pool, int reps) {
    stream_ctx s;
    memset(&s, 0, sizeof s);
    /* 256 MiB per array: this VM reports 512 MB of L3 (the host's); each
     * core's own L3 is far smaller, but stay clear of either. */
    s.n = (size_t)256 << 20 >> 3;
    s.a = malloc(s.n * 8);
    s.b = malloc(s.n * 8);
    s.c = malloc(s.n * 8);
    if (!s.a || !s.b || !s.c) return 0;
    for (size_t i = 0; i < s.n; i++) s.a[i] = s.b[i] = s.c[i] = i;
    s.avx2 = have_avx2();
    s.chunk = (size_t)1 << 16;
    size_t tasks = (s.n + s.chunk - 1) / s.chunk;
    const char *names[2] = {"read", "triad"};
    const double bytes[2] = {8.0 * (double)s.n, 24.0 * (double)s.n};
    double read_gbps = 0;
    for (int mode = 0; mode < 2; mode++) {
        s.mode = mode;
        double t[64];
        fx_pool_run(pool, stream_task, &s, tasks);
        for (int r = 0; r < reps; r++) {
            double t0 = now_s();
            fx_pool_run(pool, stream_task, &s, tasks);
            t[r] = now_s() - t0;
        }
        double med = median(t, reps);
        if (mode == 0) read_gbps = bytes[0] / med * 1e-9;
        printf("{\"bench\":\"stream\",\"kernel\":\"%s\",\"threads\":%u,"
               "\"mib\":%.0f,\"gbps\":%.2f,\"gbps_best\":%.2f}\n",
               names[mode], fx_pool_threads(pool), bytes[mode] / 1048576.0,
               bytes[mode] / med * 1e-9, bytes[mode] / t[0] * 1e-9);
    }
    /* Keep the sums alive. */
    if (s.sums[0] == 42) printf("#\n");
    free(s.a);
    free(s.b);
    free(s.c);
    return read_gbps;
}

/* The read pass again, right before each M's measurements, so the
 * bandwidth the matmuls are compared with is the one the machine gives
 * at that moment (it is shared). Best of reps. */
static double read_now(fx_pool *pool, uint64_t *buf, size_t n, int reps) {
    stream_ctx s;
    memset(&s, 0, sizeof s);
    s.a = buf;
    s.n = n;
    s.chunk = (size_t)1 << 16;
    s.avx2 = have_avx2();
    size_t tasks = (n + s.chunk - 1) / s.chunk;
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        fx_pool_run(pool, stream_task, &s, tasks);
        double t = now_s() - t0;
        if (t < best) best = t;
    }
    return 8.0 * (double)n / best * 1e-9;
}

/* ---- matmul ---- */

static uint8_t *make_weights(fx_wtype t, size_t n, size_t k) {
    size_t rb = fx_wtype_row_bytes(t, k);
    uint8_t *w = malloc(n * rb);
    float *row = malloc(k * sizeof *row);
    if (!w || !row) exit(1);
    uint64_t s = 77;
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < k; j++) row[j] = fx_test_rng_f(&s);
        uint8_t *dst = w + i * rb;
        if (t == FX_WTYPE_F32) {
            memcpy(dst, row, rb);
        } else if (t == FX_WTYPE_F16) {
            fx_f32_to_f16_row((uint16_t *)(void *)dst, row, k);
        } else if (t == FX_WTYPE_BF16) {
            fx_f32_to_bf16_row((uint16_t *)(void *)dst, row, k);
        } else {
            fx_quantize_q8_0((fx_block_q8_0 *)(void *)dst, row, k);
        }
    }
    free(row);
    if (t == FX_WTYPE_Q8_0_R16) {
        /* The same Q8_0 matrix in the order a loaded model holds it. */
        uint8_t *r = malloc(n * rb);
        if (!r || fx_q8_0_repack_r16(r, w, n, k) != FX_OK) exit(1);
        free(w);
        w = r;
    }
    return w;
}

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Per call: the median and best wall time, and the median process CPU
 * time (all threads; a shared machine's preemption does not count in it,
 * OpenBLAS's spinning threads do). */
typedef struct timing {
    double med, best, cpu;
} timing;

/* Repeats until ~min_time has passed and at least min_reps calls. */
static timing time_matmul(fx_kernels *kc, const float *x, size_t m,
                          const uint8_t *w, size_t ncopy, fx_wtype t,
                          size_t n, size_t k, float *y, unsigned flags,
                          double min_time, int min_reps) {
    double ts[200], cs[200];
    int reps = 0;
    const size_t bytes = fx_wtype_row_bytes(t, k) * n;
    double start = now_s();
    fx_matmul(kc, x, k, m, w, t, n, k, y, n, flags); /* warm up */
    while (reps < 200 && (reps < min_reps || now_s() - start < min_time)) {
        const uint8_t *wc = w + (size_t)(reps + 1) % ncopy * bytes;
        double c0 = cpu_s(), t0 = now_s();
        fx_status st = fx_matmul(kc, x, k, m, wc, t, n, k, y, n, flags);
        ts[reps] = now_s() - t0;
        cs[reps++] = cpu_s() - c0;
        if (st != FX_OK) {
            fprintf(stderr, "matmul failed: %d\n", (int)st);
            exit(1);
        }
    }
    timing r;
    r.med = median(ts, reps);
    r.best = ts[0]; /* sorted by median() */
    r.cpu = median(cs, reps);
    return r;
}

int main(int argc, char **argv) {
    unsigned threads = 2;
    int quick = 0;
    size_t N = 4096, K = 4096;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (!strcmp(argv[i], "--n") && i + 1 < argc)
            N = (size_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "--k") && i + 1 < argc)
            K = (size_t)atol(argv[++i]) / 32 * 32;
        else {
            fprintf(stderr, "usage: %s [--threads N] [--quick] [--n N] "
                            "[--k K]\n", argv[0]);
            return 2;
        }
    }
    fx_alloc alloc;
    fx_alloc_init(&alloc, NULL);
    fx_kernels_params p;
    fx_kernels_params_init(&p);
    p.n_threads = threads;
    p.fast_min_m = 1; /* FX_MATMUL_FAST: OpenBLAS at every M, for the side
                         by side comparison */
    p.fast_blas = FX_FAST_BLAS_ALWAYS;
    fx_kernels *kc = NULL;
    fx_error err;
    if (fx_kernels_create(&alloc, &p, &kc, &err) != FX_OK) {
        fprintf(stderr, "create: %s\n", err.message);
        return 1;
    }
    /* One context per ISA the CPU has, measured side by side; AVX2 is
     * the baseline of ratio_vs_avx2. */
    const fx_isa isas[2] = {FX_ISA_AVX2, FX_ISA_AVX512};
    const char *isa_names[2] = {"avx2", "avx512"};
    fx_kernels *kis[2] = {NULL, NULL};
    for (int a = 0; a < 2; a++) {
        fx_kernels_params q = p;
        q.isa = isas[a];
        if (fx_kernels_create(&alloc, &q, &kis[a], NULL) != FX_OK)
            kis[a] = NULL;
    }
    const char *openblas_env = getenv("OPENBLAS_NUM_THREADS");
    printf("{\"bench\":\"config\",\"threads\":%u,\"isa\":\"%s\","
           "\"openblas_core\":\"%s\",\"openblas_num_threads\":\"%s\","
           "\"n\":%zu,\"k\":%zu}\n",
           threads, fx_kernels_isa(kc) == FX_ISA_AVX512 ? "avx512"
                    : fx_kernels_isa(kc) == FX_ISA_AVX2  ? "avx2"
                                                         : "portable",
           openblas_get_corename(), openblas_env ? openblas_env : "default",
           N, K);
    fflush(stdout);

    int reps = quick ? 3 : 7;
    if (bench_stream(fx_kernels_pool(kc), reps) <= 0) return 1;
    fflush(stdout);

    /* Q8_0 as the file has it and repacked, as a loaded model holds it
     * (fx_kernels_prefer_r16). */
    enum { NT = 5 };
    const fx_wtype types[NT] = {FX_WTYPE_F32, FX_WTYPE_F16, FX_WTYPE_BF16,
                                FX_WTYPE_Q8_0, FX_WTYPE_Q8_0_R16};
    uint8_t *ws[NT];
    /* Every call reads a different copy of W, round robin, with at least
     * 512 MiB of copies per type: otherwise a 17-64 MB matrix is served
     * from this VM's L3 and "weight GB/s" would exceed DRAM bandwidth. */
    size_t ncopy[NT];
    for (int t = 0; t < NT; t++) {
        size_t bytes = fx_wtype_row_bytes(types[t], K) * N;
        ncopy[t] = ((size_t)512 << 20) / bytes + 1;
        if (quick) ncopy[t] = ncopy[t] / 2 + 1;
        uint8_t *one = make_weights(types[t], N, K);
        ws[t] = malloc(ncopy[t] * bytes);
        if (!ws[t]) return 1;
        for (size_t c = 0; c < ncopy[t]; c++)
            memcpy(ws[t] + c * bytes, one, bytes);
        free(one);
    }
    const size_t ms[] = {1, 4, 8, 16, 32, 64, 128, 512};
    const size_t max_m = 512;
    float *x = malloc(max_m * K * sizeof *x);
    float *y = malloc(max_m * N * sizeof *y);
    if (!x || !y) return 1;
    uint64_t s = 5;
    for (size_t i = 0; i < max_m * K; i++) x[i] = fx_test_rng_f(&s);

    const size_t rbuf_n = (size_t)256 << 20 >> 3;
    uint64_t *rbuf = malloc(rbuf_n * 8);
    if (!rbuf) return 1;
    for (size_t i = 0; i < rbuf_n; i++) rbuf[i] = i;
    double min_time = quick ? 0.3 : 1.0;
    for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
        size_t m = ms[mi];
        double flop = 2.0 * (double)m * (double)N * (double)K;
        /* ratio_vs_bandwidth: median weight GB/s over this read pass (best
         * of 5, 2 threads, just before). */
        double bw = read_now(fx_kernels_pool(kc), rbuf, rbuf_n, 5);
        printf("{\"bench\":\"roofline\",\"m\":%zu,\"read_gbps\":%.2f}\n",
               m, bw);
        timing ours[2][NT];
        for (int t = 0; t < NT; t++)
            for (int a = 0; a < 2; a++)
                if (kis[a])
                    ours[a][t] = time_matmul(kis[a], x, m, ws[t], ncopy[t],
                                             types[t], N, K, y, 0, min_time,
                                             3);
        timing blas = time_matmul(kc, x, m, ws[0], ncopy[0], FX_WTYPE_F32,
                                  N, K, y,
                                  FX_MATMUL_FAST, min_time, 3);
        sleep_ms(300);
        double wbytes_f32 = (double)fx_wtype_row_bytes(FX_WTYPE_F32, K) * N;
        printf("{\"bench\":\"matmul\",\"impl\":\"openblas_sgemm\","
               "\"wtype\":\"f32\",\"m\":%zu,\"n\":%zu,\"k\":%zu,"
               "\"ms\":%.3f,\"ms_best\":%.3f,\"cpu_ms\":%.3f,"
               "\"weight_gbps\":%.2f,\"gflops\":%.2f,\"gflops_best\":%.2f,"
               "\"ratio_vs_bandwidth\":%.3f}\n",
               m, N, K, blas.med * 1e3, blas.best * 1e3, blas.cpu * 1e3,
               wbytes_f32 / blas.med * 1e-9, flop / blas.med * 1e-9,
               flop / blas.best * 1e-9, wbytes_f32 / blas.med * 1e-9 / bw);
        for (int t = 0; t < NT; t++)
            for (int a = 0; a < 2; a++) {
                if (!kis[a]) continue;
                const timing *o = &ours[a][t];
                const timing *base = kis[0] ? &ours[0][t] : o;
                double wb = (double)fx_wtype_row_bytes(types[t], K) * N;
                printf("{\"bench\":\"matmul\",\"impl\":\"ferrox\","
                       "\"isa\":\"%s\",\"wtype\":\"%s\",\"m\":%zu,"
                       "\"n\":%zu,\"k\":%zu,"
                       "\"ms\":%.3f,\"ms_best\":%.3f,\"cpu_ms\":%.3f,"
                       "\"weight_gbps\":%.2f,\"gflops\":%.2f,"
                       "\"gflops_best\":%.2f,\"ratio_vs_openblas\":%.3f,"
                       "\"ratio_vs_openblas_best\":%.3f,"
                       "\"ratio_vs_avx2\":%.3f,"
                       "\"ratio_vs_bandwidth\":%.3f}\n",
                       isa_names[a], fx_wtype_name(types[t]), m, N, K,
                       o->med * 1e3, o->best * 1e3, o->cpu * 1e3,
                       wb / o->med * 1e-9, flop / o->med * 1e-9,
                       flop / o->best * 1e-9, blas.med / o->med,
                       blas.best / o->best, base->med / o->med,
                       wb / o->med * 1e-9 / bw);
            }
        fflush(stdout);
    }
    free(rbuf);
    for (int t = 0; t < NT; t++) free(ws[t]);
    free(x);
    free(y);
    fx_kernels_free(kis[0]);
    fx_kernels_free(kis[1]);
    fx_kernels_free(kc);
    return 0;
}
