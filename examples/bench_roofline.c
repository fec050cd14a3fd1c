/*
 * ferrox-bench's machine measurements: the roofline (read bandwidth,
 * STREAM triad, sgemm and our kernels' FLOP/s) and the bandwidth probe
 * paired with each decode repeat.
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* madvise */
#include "bench.h"

#include "kernels/kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>

/* From OpenBLAS (the tool links it); declared here so it needs no cblas
 * include path. */
void openblas_set_num_threads(int num_threads);
char *openblas_get_corename(void);

double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double median(double *v, size_t n) {
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double load1(void) {
    double l = -1.0;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1) l = -1.0;
        fclose(f);
    }
    return l;
}

/* ---- the roofline: memory bandwidth ---- */

/* The buffers the read passes stream, on 2 MiB boundaries and with
 * transparent huge pages where the system grants them on request, as the
 * library asks for its repacked weights (lib/model/weights.c): a ceiling
 * measured with 4 KiB pages would pay TLB misses the weights do not. */
static void *roof_buffer(size_t bytes) {
    void *raw = NULL;
    if (posix_memalign(&raw, (size_t)2 << 20, bytes) != 0) return NULL;
#ifdef MADV_HUGEPAGE
    (void)madvise(raw, bytes, MADV_HUGEPAGE);
#endif
    return raw;
}

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

int bench_roofline(const options *o, const model_cost *mc,
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
    void *raw = roof_buffer(bytes);
    if (!raw) {
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
    /* OpenBLAS's workers keep polling (sched_yield) for a while after a
     * call; let them park before the model phases time anything (the
     * first deterministic prefill came out 10% slow without this). */
    struct timespec park = {0, 500 * 1000 * 1000};
    nanosleep(&park, NULL);
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
/* ---- the paired bandwidth probe ---- */

struct bw_probe {
    fx_kernels *kc; /* its pool: the same thread count as the batcher */
    void *raw;
    stream_ctx s;
    size_t next_chunk; /* where bw_probe_read goes on */
};

/* The read pass over chunks next_chunk, next_chunk + 1, ... (wrapping). */
typedef struct probe_run {
    bw_probe *p;
    size_t first;
} probe_run;

static void probe_read_task(void *vctx, size_t task, unsigned thread) {
    probe_run *r = vctx;
    stream_ctx *s = &r->p->s;
    const size_t c = (r->first + task) % s->n_tasks;
    s->sink[thread % 64] ^= read_pass(s->buf + c * s->chunk, s->chunk, 0);
}

double bw_probe_read(bw_probe *p, uint64_t bytes) {
    size_t chunks = (size_t)((bytes + p->s.chunk / 2) / p->s.chunk);
    if (chunks == 0) chunks = 1;
    probe_run r = {p, p->next_chunk};
    const double t0 = now();
    fx_pool_run(fx_kernels_pool(p->kc), probe_read_task, &r, chunks);
    const double t = now() - t0;
    p->next_chunk = (p->next_chunk + chunks) % p->s.n_tasks;
    return t * (double)bytes / (double)(chunks * p->s.chunk);
}

bw_probe *bw_probe_create(const options *o) {
    bw_probe *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    fx_alloc alloc;
    fx_alloc_init(&alloc, NULL);
    fx_kernels_params kp;
    fx_kernels_params_init(&kp);
    kp.n_threads = o->threads;
    const size_t bytes = o->roof_mib << 20;
    if (fx_kernels_create(&alloc, &kp, &p->kc, NULL) != FX_OK ||
        !(p->raw = roof_buffer(bytes))) {
        bw_probe_free(p);
        return NULL;
    }
    p->s.buf = p->raw;
    for (size_t i = 0; i < bytes; i += 8) {
        uint64_t v = i * 0x9e3779b97f4a7c15ull;
        memcpy(p->s.buf + i, &v, 8);
    }
    p->s.chunk = (size_t)4 << 20;
    p->s.n_tasks = bytes / p->s.chunk;
    return p;
}

double bw_probe_measure(bw_probe *p) {
    /* Both read passes, as the roofline, two timed runs each after a
     * warm-up: a ceiling (the best) within ~0.1 s. */
    double best = 0;
    for (int k = 0; k < 2; k++) {
        p->s.kernel = k;
        const timing tm = time_pool(fx_kernels_pool(p->kc), read_task, &p->s,
                                    p->s.n_tasks, 2);
        const double gbps = (double)(p->s.n_tasks * p->s.chunk) / tm.best * 1e-9;
        if (gbps > best) best = gbps;
    }
    return best;
}

void bw_probe_free(bw_probe *p) {
    if (!p) return;
    fx_kernels_free(p->kc);
    free(p->raw);
    free(p);
}
