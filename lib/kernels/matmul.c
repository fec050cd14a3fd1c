/*
 * The matmul entry point: argument checks, ISA choice, the split of N over
 * the pool, the quantization of x for the integer types, and the OpenBLAS
 * fast mode (the portable paths are in matmul_portable.c, matmul_q8.c and
 * qdot_portable.c).
 */
#include "quants.h"

#include <dlfcn.h>
#include <limits.h>
#include <math.h>
#include <string.h>

/* cblas_sgemm, declared here instead of including cblas.h: the library is
 * built without OpenBLAS. blasint is int in libopenblas.so.0 (the 64-bit
 * integer build is another library, libopenblas64, not loaded); the enum
 * parameters are the standard CBLAS values, passed as int. */
typedef void (*fx_sgemm_fn)(int order, int trans_a, int trans_b, int m,
                            int n, int k, float alpha, const float *a,
                            int lda, const float *b, int ldb, float beta,
                            float *c, int ldc);
enum {
    FX_CBLAS_ROW_MAJOR = 101, /* CblasRowMajor */
    FX_CBLAS_NO_TRANS = 111,  /* CblasNoTrans */
    FX_CBLAS_TRANS = 112      /* CblasTrans */
};

enum { BLAS_UNTRIED = 0, BLAS_ON, BLAS_OFF };

/* Type ids below this can be block types (ggml's are all below 32). */
#define FX_QSLOTS 32

struct fx_kernels {
    fx_alloc alloc;
    fx_isa isa;
    /* By type_index(): chosen once at create, no global state. */
    fx_mm_range_fn range[4];
    fx_mm_dual_fn dual;    /* R12 jobs of few rows: two streams a task, or NULL */
    fx_xq_fn quantize;     /* FX_XQ_32 activations (Q8_0 and others) */
    fx_xq_fn quantize256;  /* FX_XQ_256 activations */
    /* By type id: the kernel of each block type of quants.h, the
     * context's ISA's or the next one down's. */
    fx_mm_range_fn qrange[FX_QSLOTS];
    /* The same in 16-row groups (FX_WTYPE_QR16): the ISA's reader of
     * them, or NULL: then fx_qr16_range_rows feeds rows16[t] (an AVX2 or
     * portable kernel, which use no scratch) a row at a time. */
    fx_mm_range_fn qrange16[FX_QSLOTS];
    fx_mm_range_fn rows16[FX_QSLOTS];
    fx_pool *pool;
    size_t fast_min_m;
    uint32_t q8_pf_rows;   /* fx_mm_job.q8_pf_rows */
    size_t r12_pf_bytes;   /* fx_mm_job.r12_pf_bytes */
    size_t x_block_bytes;  /* fx_mm_job.x_block_bytes */
    fx_fast_blas fast_mode;
    /* OpenBLAS for FX_MATMUL_FAST, loaded at the first fast call that it
     * could take (blas_ready): */
    int blas;              /* BLAS_UNTRIED, BLAS_ON or BLAS_OFF */
    void *blas_lib;        /* this context's dlopen handle, or NULL */
    fx_sgemm_fn sgemm;     /* cblas_sgemm in it (BLAS_ON) */
    void *scratch_raw;     /* what fx_malloc returned */
    float *scratch;        /* [n_threads][FX_MM_SCRATCH_FLOATS], 64-aligned */
    void *xq_raw;
    uint8_t *xq;           /* FX_XQ_BYTES, 64-aligned: quantized x */
};

/* The quantized activations of one call: 4 MiB holds 256 rows of K up to
 * 13000 in one format (a decode step of 256 rows, or a prefill chunk, in
 * one pass), up to 6800 in both; more rows are done in chunks, each
 * reading W again. */
#ifndef FX_XQ_BYTES
#define FX_XQ_BYTES ((size_t)4 << 20)
#endif

/* The activation format weights of type t multiply (quants.h). */
static fx_xq_kind xq_kind(fx_wtype t) {
    const fx_qtype *q = fx_qtype_of(fx_wtype_qr16_base(t));
    if (q) return q->xq;
    return t == FX_WTYPE_Q8_0 || t == FX_WTYPE_Q8_0_R16 ? FX_XQ_32
                                                         : FX_XQ_NONE;
}

/* The kernel of block type t for an ISA: the ISA's own, else the next
 * one down's (a table's NULL), the portable one at the bottom. */
static fx_mm_range_fn qrange_for(fx_isa isa, fx_wtype t) {
    fx_mm_range_fn f = NULL;
    if (isa == FX_ISA_AVX512) f = fx_qmm_avx512(t);
    if (!f && (isa == FX_ISA_AVX512 || isa == FX_ISA_AVX2))
        f = fx_qmm_avx2(t);
    return f ? f : fx_qmm_portable(t);
}

static int type_index(fx_wtype t) {
    switch (t) {
    case FX_WTYPE_F16:
    case FX_WTYPE_F16_R12: return 1;
    case FX_WTYPE_BF16:
    case FX_WTYPE_BF16_R12: return 2;
    case FX_WTYPE_Q8_0:
    case FX_WTYPE_Q8_0_R16: return 3;
    case FX_WTYPE_F32:
    default: return 0;
    }
}

/* ---- context ---- */

void fx_kernels_params_init(fx_kernels_params *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->n_threads = 1;
    p->isa = FX_ISA_AUTO;
    p->fast_min_m = 64;
    p->fast_blas = FX_FAST_BLAS_AUTO;
}

/* ---- OpenBLAS, loaded only for FX_MATMUL_FAST ----
 * libferrox does not link OpenBLAS: its pthreads build starts its worker
 * threads as soon as it is loaded, and the library starts no thread the
 * host did not ask for. A context loads it at its first FX_MATMUL_FAST
 * call that OpenBLAS could take (F32 weights, M >= fast_min_m), or when
 * asked fx_kernels_fast_uses_blas, with a dlopen handle of its own -- the
 * loader counts the references, contexts share one copy, nothing here is
 * global -- and closes the handle in fx_kernels_free. A batcher with
 * FX_BATCHER_FAST asks at create (so no step loads it); one without never
 * passes the flag, so never loads it. */

static const char *const blas_sonames[] = {
    "libopenblas.so.0", /* run time (Debian: libopenblas0-pthread) */
    "libopenblas.so"    /* a build with only the development link */
};

/* Whether OpenBLAS runs AVX-512 sgemm kernels (see fx_fast_blas), by its
 * own name for the kernels it picked at load time. */
static bool blas_has_avx512(const char *core) {
    static const char *const avx512_cores[] = {"skylakex", "cooperlake",
                                               "sapphirerapids"};
    if (!core) return false;
    for (size_t i = 0; i < sizeof avx512_cores / sizeof *avx512_cores; i++) {
        const char *a = core, *b = avx512_cores[i];
        while (*a && *b && (*a | 0x20) == *b) a++, b++;
        if (!*a && !*b) return true;
    }
    return false;
}

/* Loads OpenBLAS once per context and decides whether the fast mode uses
 * it. Any failure (not installed, a symbol missing) leaves BLAS_OFF: the
 * fast flag then computes the deterministic bits, as documented. */
static void blas_load(fx_kernels *kc) {
    kc->blas = BLAS_OFF;
    void *lib = NULL;
    const char *name = NULL;
    for (size_t i = 0; !lib && i < sizeof blas_sonames / sizeof *blas_sonames;
         i++) {
        name = blas_sonames[i];
        lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    }
    if (!lib) {
        (void)dlerror(); /* leave no message of ours for the host to read */
        return;
    }
    /* Unloading. Closing the last handle runs OpenBLAS's destructor
     * (gotoblas_quit -> blas_shutdown -> blas_thread_shutdown_), which in
     * its pthreads build wakes and pthread_joins every worker before the
     * loader unmaps the code they run, so the threads go with the last
     * context that used them (checked: load, sgemm on several threads,
     * unload, a few hundred times, also under ASan; tests/
     * test_no_threads.c). The serial build has no threads. The OpenMP
     * build's workers are libgomp's, which joins nothing when it is
     * unloaded: a worker spinning or parked in unmapped code would crash
     * the process. So that build, or one that cannot say which it is, is
     * pinned (RTLD_NODELETE, set on the loaded object through
     * RTLD_NOLOAD): it then stays loaded, with its threads, for the life
     * of the process -- the safe side. If even that fails, our reference
     * is kept and never closed, to the same effect. */
    int (*parallel)(void) = (int (*)(void))dlsym(lib, "openblas_get_parallel");
    const int kind = parallel ? parallel() : -1; /* 0 serial, 1 pthreads */
    bool keep = false;
    if (kind != 0 && kind != 1) {
        void *pin = dlopen(name, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD |
                                     RTLD_NODELETE);
        if (pin) dlclose(pin); /* the flag stays on the object */
        else keep = true;
    }
    fx_sgemm_fn sgemm = (fx_sgemm_fn)dlsym(lib, "cblas_sgemm");
    char *(*corename)(void) =
        (char *(*)(void))dlsym(lib, "openblas_get_corename");
    const bool use = sgemm && (kc->fast_mode == FX_FAST_BLAS_ALWAYS ||
                               kc->isa != FX_ISA_AVX512 ||
                               (corename && blas_has_avx512(corename())));
    (void)dlerror();
    if (!use) {
        /* Not faster here: do not keep it (nor its threads) loaded. */
        if (!keep) dlclose(lib);
        return;
    }
    kc->blas_lib = keep ? NULL : lib;
    kc->sgemm = sgemm;
    kc->blas = BLAS_ON;
}

/* Whether FX_MATMUL_FAST reaches OpenBLAS, loading it on first use. */
static bool blas_ready(fx_kernels *kc) {
    if (kc->blas == BLAS_UNTRIED) blas_load(kc);
    return kc->blas == BLAS_ON;
}

fx_status fx_kernels_create(const fx_alloc *alloc,
                            const fx_kernels_params *params,
                            fx_kernels **out, fx_error *err) {
    if (!alloc || !out)
        return fx_fail(err, FX_ERR_INVALID_ARG, "kernels: NULL argument");
    *out = NULL;
    fx_kernels_params p;
    fx_kernels_params_init(&p);
    if (params) p = *params;
    if (p.n_threads == 0)
        return fx_fail(err, FX_ERR_INVALID_ARG, "kernels: n_threads is 0");

    /* What the CPU has; an explicit ISA must be present. */
    const bool has2 = fx_cpu_has_avx2() && fx_mm_avx2_range() &&
                      fx_mm_q8_avx2_range() && fx_xq_avx2();
    const bool has512 = has2 && fx_cpu_has_avx512() && fx_mm_avx512_range();
    const bool vnni = has512 && fx_cpu_has_avx512_vnni() &&
                      fx_mm_q8_avx512_range();
    fx_isa isa = p.isa;
    switch (p.isa) {
    case FX_ISA_AUTO:
        isa = has512 ? FX_ISA_AVX512 : has2 ? FX_ISA_AVX2 : FX_ISA_PORTABLE;
        break;
    case FX_ISA_AVX512:
        if (!has512)
            return fx_fail(err, FX_ERR_UNSUPPORTED,
                           "kernels: AVX-512 F/BW/VL/DQ not available");
        break;
    case FX_ISA_AVX2:
        if (!has2)
            return fx_fail(err, FX_ERR_UNSUPPORTED,
                           "kernels: AVX2+FMA+F16C not available");
        break;
    case FX_ISA_PORTABLE:
        break;
    default:
        return fx_fail(err, FX_ERR_INVALID_ARG, "kernels: unknown isa %d",
                       (int)p.isa);
    }

    fx_kernels *kc = fx_calloc(alloc, 1, sizeof *kc);
    if (!kc) return fx_fail(err, FX_ERR_NOMEM, "kernels: out of memory");
    kc->alloc = *alloc;
    kc->isa = isa;
    kc->fast_min_m = p.fast_min_m;
    kc->q8_pf_rows = p.q8_prefetch_rows ? p.q8_prefetch_rows
                                        : fx_q8_r16_prefetch_rows();
    kc->r12_pf_bytes = p.r12_prefetch_bytes == SIZE_MAX ? 0
                       : p.r12_prefetch_bytes ? p.r12_prefetch_bytes
                                              : fx_r12_dual_prefetch_bytes();
    kc->x_block_bytes = p.x_block_bytes ? p.x_block_bytes
                                        : FX_MM_X_BLOCK_BYTES;
    kc->fast_mode = p.fast_blas; /* OpenBLAS is not loaded yet: blas_ready */
    /* Every path computes the same bits (kernels.h), so the choice per
     * type is only about speed. The AVX-512 code serves every float type
     * at every M: never behind the AVX2 code, ahead for F16 and BF16. */
    switch (isa) {
    case FX_ISA_AVX512:
        for (int t = 0; t < 3; t++) kc->range[t] = fx_mm_avx512_range();
        kc->dual = fx_mm_avx512_dual();
        /* Without VNNI the AVX2 maddubs form is the integer path. */
        kc->range[3] = vnni ? fx_mm_q8_avx512_range() : fx_mm_q8_avx2_range();
        kc->quantize = fx_xq_avx2();
        break;
    case FX_ISA_AVX2:
        for (int t = 0; t < 3; t++) kc->range[t] = fx_mm_avx2_range();
        kc->range[3] = fx_mm_q8_avx2_range();
        kc->quantize = fx_xq_avx2();
        break;
    default:
        for (int t = 0; t < 3; t++) kc->range[t] = fx_mm_range_portable;
        kc->range[3] = fx_mm_q8_portable;
        kc->quantize = fx_xq_portable;
        break;
    }
    kc->quantize256 = isa != FX_ISA_PORTABLE && fx_xq256_avx2()
                          ? fx_xq256_avx2()
                          : fx_xq256_portable;
    for (int t = 0; t < FX_QSLOTS; t++)
        if (fx_qtype_of((fx_wtype)t)) {
            kc->qrange[t] = qrange_for(isa, (fx_wtype)t);
            if (isa == FX_ISA_AVX512)
                kc->qrange16[t] = fx_qmm_avx512_qr16((fx_wtype)t);
            if (!kc->qrange16[t] && isa != FX_ISA_PORTABLE)
                kc->qrange16[t] = fx_qmm_avx2_qr16((fx_wtype)t);
            kc->rows16[t] = qrange_for(isa == FX_ISA_AVX512 ? FX_ISA_AVX2 : isa,
                                       (fx_wtype)t);
        }

    uint64_t floats, bytes;
    if (!fx_mul_u64(p.n_threads, FX_MM_SCRATCH_FLOATS, &floats) ||
        !fx_mul_u64(floats, sizeof(float), &bytes) ||
        !fx_add_u64(bytes, 64, &bytes) || bytes > SIZE_MAX) {
        fx_free(alloc, kc);
        return fx_fail(err, FX_ERR_TOO_LARGE, "kernels: too many threads");
    }
    kc->scratch_raw = fx_malloc(alloc, (size_t)bytes);
    if (!kc->scratch_raw) {
        fx_free(alloc, kc);
        return fx_fail(err, FX_ERR_NOMEM, "kernels: out of memory");
    }
    /* The tiles use aligned loads/stores on the partial sums. */
    uintptr_t a = ((uintptr_t)kc->scratch_raw + 63) & ~(uintptr_t)63;
    kc->scratch = (float *)a;
    /* Only calls on block types write it: with the C library's allocator
     * (4 MiB is an mmap) a model of float weights never faults its pages
     * in. */
    kc->xq_raw = fx_malloc(alloc, FX_XQ_BYTES + 64);
    if (!kc->xq_raw) {
        fx_free(alloc, kc->scratch_raw);
        fx_free(alloc, kc);
        return fx_fail(err, FX_ERR_NOMEM, "kernels: out of memory");
    }
    kc->xq = (uint8_t *)(((uintptr_t)kc->xq_raw + 63) & ~(uintptr_t)63);

    fx_status st = fx_pool_create(alloc, p.n_threads, &kc->pool, err);
    if (st != FX_OK) {
        fx_free(alloc, kc->xq_raw);
        fx_free(alloc, kc->scratch_raw);
        fx_free(alloc, kc);
        return st;
    }
    *out = kc;
    return FX_OK;
}

void fx_kernels_free(fx_kernels *kc) {
    if (!kc) return;
    fx_pool_free(kc->pool);
    /* OpenBLAS goes (joining its threads) with the last handle: blas_load
     * says why that is safe, and which builds are pinned instead. */
    if (kc->blas_lib) dlclose(kc->blas_lib);
    fx_alloc alloc = kc->alloc;
    fx_free(&alloc, kc->xq_raw);
    fx_free(&alloc, kc->scratch_raw);
    fx_free(&alloc, kc);
}

bool fx_kernels_prefer_r16(fx_wtype t) { return t == FX_WTYPE_Q8_0; }

bool fx_kernels_prefer_qr16(fx_wtype t, size_t k) {
    if (!fx_qr16_fits(t, k) || !fx_cpu_has_avx2()) return false;
    return (fx_cpu_has_avx512() && fx_qmm_avx512_qr16(t) != NULL) ||
           fx_qmm_avx2_qr16(t) != NULL;
}

/* F16 and BF16 stream faster as R12 wherever the AVX-512 path exists; F32
 * only on Zen 5 (AMD family 1Ah), with its own tile prefetch
 * (matmul_avx512.c, range_small_r12): elsewhere it loses from 8 rows on. */
bool fx_kernels_prefer_r12(fx_wtype t) {
    switch (t) {
    case FX_WTYPE_F32:
        return fx_cpu_has_avx2() && fx_cpu_has_avx512() &&
               fx_mm_avx512_range() != NULL && fx_cpu_amd_family() >= 0x1a;
    case FX_WTYPE_F16:
    case FX_WTYPE_BF16:
        return fx_cpu_has_avx2() && fx_cpu_has_avx512() &&
               fx_mm_avx512_range() != NULL;
    default: return false;
    }
}

fx_isa fx_kernels_isa(const fx_kernels *kc) {
    return kc ? kc->isa : FX_ISA_PORTABLE;
}

fx_pool *fx_kernels_pool(fx_kernels *kc) { return kc ? kc->pool : NULL; }

bool fx_kernels_fast_uses_blas(fx_kernels *kc) {
    return kc && blas_ready(kc);
}

/* ---- dispatch ---- */

/* One pool run: up to FX_MM_MAX_OUTS matmuls sharing x, their tasks
 * numbered one after the other. */
typedef struct mm_run {
    fx_mm_job jobs[FX_MM_MAX_OUTS];
    fx_mm_range_fn range[FX_MM_MAX_OUTS];
    size_t cols[FX_MM_MAX_OUTS];       /* per chunk (a task's columns) */
    /* 0, or a job whose task t does chunks t and t + dual_half (plan_job) */
    size_t dual_half[FX_MM_MAX_OUTS];
    size_t first_task[FX_MM_MAX_OUTS + 1];
    size_t n_jobs;
    fx_mm_dual_fn dual;
    float *scratch;
} mm_run;

/* A task is a fixed slice of one output's columns (two, for a dual job);
 * which thread runs it cannot change what it computes. */
static void mm_task(void *ctx, size_t task, unsigned thread) {
    const mm_run *r = ctx;
    size_t j = 0;
    while (task >= r->first_task[j + 1]) j++;
    const fx_mm_job *job = &r->jobs[j];
    float *scratch = r->scratch + (size_t)thread * FX_MM_SCRATCH_FLOATS;
    const size_t cols = r->cols[j];
    const size_t n0 = (task - r->first_task[j]) * cols;
    const size_t n1 = n0 + cols < job->n ? n0 + cols : job->n;
    const size_t m0 = n0 + r->dual_half[j] * cols;
    if (r->dual_half[j] && m0 < job->n) {
        r->dual(job, n0, n1, m0, m0 + cols < job->n ? m0 + cols : job->n,
                scratch);
        return;
    }
    r->range[j](job, n0, n1, scratch);
}

/* Columns per task: FX_MM_NTASK, unless that leaves a thread idle for
 * long -- N = 256 (K/V projections) on 2 threads gave tasks of 96, 96 and
 * 64 columns, one thread doing 3/4 of the work. Then about 4 tasks per
 * thread, each a multiple of 8 columns and at least 16 (below that the
 * per-task packing of x outweighs the balance). Any split gives the same
 * bits: every output is computed whole inside one task. */
static size_t task_cols(size_t n, unsigned threads) {
    if (threads <= 1) return FX_MM_NTASK;
    size_t per = (n + 4 * (size_t)threads - 1) / (4 * (size_t)threads);
    per = (per + 7) & ~(size_t)7;
    if (per < 16) per = 16;
    return per < FX_MM_NTASK ? per : FX_MM_NTASK;
}

/* How one output of a run is cut into tasks (plan_job). */
typedef struct job_plan {
    size_t cols;      /* per chunk */
    size_t dual_half; /* 0, or: task t does chunks t and t + dual_half */
    size_t tasks;
} job_plan;

/* Columns per chunk: task_cols, an R16 chunk starting at a tile, an R12
 * one whole tiles (24: still a multiple of 8). Up to FX_MM_DUAL_M x rows
 * on an R12 matrix, where the kernels have the two-stream form
 * (kc->dual), task t does chunks t and t + H, H = half the chunks rounded
 * up, so each thread reads its share of the matrix as two streams half
 * the matrix apart (matmul_avx512.c, dual12). Those chunks are half as
 * wide (rounded up to whole tiles), so that a task reads as many bytes as
 * another and the threads have twice as many to balance: a thread that
 * ran out of tasks waited for the other's last one, up to one task in
 * each run, and the 1024-row matrices (Q, the output projection, down)
 * had only 3 tasks a thread. */
static job_plan plan_job(const fx_kernels *kc, size_t m, const fx_mm_out *o,
                         unsigned threads) {
    job_plan pl = {task_cols(o->n, threads), 0, 0};
    const bool r12 = fx_wtype_is_r12(o->wtype);
    if (o->wtype == FX_WTYPE_Q8_0_R16 || fx_wtype_is_qr16(o->wtype))
        pl.cols = (pl.cols + 15) / 16 * 16;
    const bool dual = m <= FX_MM_DUAL_M && kc->dual && r12;
    if (dual) pl.cols = (pl.cols + 1) / 2;
    if (r12) pl.cols = (pl.cols + 23) / 24 * 24;
    const size_t chunks = (o->n + pl.cols - 1) / pl.cols;
    if (dual && chunks >= 2) {
        pl.dual_half = (chunks + 1) / 2;
        pl.tasks = pl.dual_half;
    } else {
        pl.tasks = chunks;
    }
    return pl;
}

static bool fits_int(size_t v) { return v <= (size_t)INT_MAX; }

/* How much of its share of the next run each thread prefetches while
 * idle: the start of it, within what a core's L2 keeps (512 KB or more on
 * the x86 cores of the last decade) next to what the current run reads. */
#define FX_MM_PREFETCH_BYTES ((size_t)192 << 10)

void fx_matmul_prefetch(fx_kernels *kc, size_t m, size_t k,
                        const fx_mm_out *outs, size_t n_outs) {
    if (!kc || !outs || n_outs > FX_MM_MAX_OUTS || k == 0) return;
    const unsigned threads = fx_pool_threads(kc->pool);
    if (threads <= 1) return;
    size_t first_task[FX_MM_MAX_OUTS + 1] = {0}, cols[FX_MM_MAX_OUTS] = {0};
    for (size_t j = 0; j < n_outs; j++) {
        const size_t n = outs[j].w && fx_wtype_row_bytes(outs[j].wtype, k)
                             ? outs[j].n
                             : 0;
        const job_plan pl = n ? plan_job(kc, m, &outs[j], threads)
                              : (job_plan){1, 0, 0};
        cols[j] = pl.cols;
        first_task[j + 1] = first_task[j] + pl.tasks;
    }
    for (unsigned t = 0; t < threads; t++) {
        size_t lo, hi, j = 0;
        fx_pool_share_of(kc->pool, first_task[n_outs], t, &lo, &hi);
        if (lo >= hi) {
            fx_pool_prefetch(kc->pool, t, NULL, 0);
            continue;
        }
        while (lo >= first_task[j + 1]) j++;
        /* The share's rows within its first output (an R16 tile starts
         * at the byte offset of its first row, as in rows). */
        const size_t row_bytes = fx_wtype_row_bytes(outs[j].wtype, k);
        const size_t n0 = (lo - first_task[j]) * cols[j];
        size_t n1 = (hi - first_task[j]) * cols[j];
        if (n1 > outs[j].n) n1 = outs[j].n;
        size_t bytes = (n1 - n0) * row_bytes;
        if (bytes > FX_MM_PREFETCH_BYTES) bytes = FX_MM_PREFETCH_BYTES;
        fx_pool_prefetch(kc->pool, t, (const uint8_t *)outs[j].w + n0 * row_bytes,
                         bytes);
    }
}

/* x's quantization for the integer types, rows r0..r0+rows-1 of a chunk
 * into each format its ld is set for. Each row is quantized on its own,
 * so which thread does which rows cannot change a bit. */
typedef struct xq_job {
    const fx_kernels *kc;
    const float *x;
    size_t ldx, m, k;
    uint8_t *buf32, *buf256; /* FX_XQ_32 and FX_XQ_256 quants */
    size_t ld32, ld256;      /* their row strides; 0: not needed */
} xq_job;

static void quantize_rows(const xq_job *j, size_t r0, size_t rows) {
    const float *x = j->x + r0 * j->ldx;
    if (j->ld32)
        j->kc->quantize(x, j->ldx, rows, j->k, j->buf32 + r0 * j->ld32, j->ld32);
    if (j->ld256)
        j->kc->quantize256(x, j->ldx, rows, j->k, j->buf256 + r0 * j->ld256,
                           j->ld256);
}

/* From this many x rows on the quantization is a pool run of its own: at
 * a 128-token prompt it was a serial pass over 128 K to 360 K floats
 * before every matmul, which the other threads waited through. Below,
 * the run costs about what it saves. */
#define FX_XQ_PARALLEL_M 64
#define FX_XQ_TASK_ROWS 4

static void xq_task(void *ctx, size_t task, unsigned thread) {
    const xq_job *j = ctx;
    (void)thread;
    const size_t r0 = task * FX_XQ_TASK_ROWS;
    const size_t rows = j->m - r0 < FX_XQ_TASK_ROWS ? j->m - r0 : FX_XQ_TASK_ROWS;
    quantize_rows(j, r0, rows);
}

fx_status fx_matmul(fx_kernels *kc, const float *x, size_t ldx, size_t m,
                    const void *w, fx_wtype wtype, size_t n, size_t k,
                    float *y, size_t ldy, unsigned flags) {
    const fx_mm_out out = {.w = w, .wtype = wtype, .n = n, .y = y, .ldy = ldy};
    return fx_matmul_multi(kc, x, ldx, m, k, &out, 1, flags);
}

fx_status fx_matmul_multi(fx_kernels *kc, const float *x, size_t ldx,
                          size_t m, size_t k, const fx_mm_out *outs,
                          size_t n_outs, unsigned flags) {
    if (!kc || (n_outs > 0 && !outs) || n_outs > FX_MM_MAX_OUTS)
        return FX_ERR_INVALID_ARG;
    if (m == 0) return FX_OK;
    if (!x || ldx < k) return FX_ERR_INVALID_ARG;
    for (size_t i = 0; i < n_outs; i++) {
        const fx_mm_out *o = &outs[i];
        if (o->n == 0) continue;
        if (!o->w || !o->y || o->ldy < o->n) return FX_ERR_INVALID_ARG;
        /* 256 is a whole number of every type's blocks and tiles */
        if (fx_wtype_row_bytes(o->wtype, FX_QK_K) == 0)
            return FX_ERR_UNSUPPORTED;
        /* blocks need k % 32 == 0 (K-quants 256), R12 k % 8 == 0 and
         * pairs of rows */
        if (k > 0 && fx_wtype_row_bytes(o->wtype, k) == 0)
            return FX_ERR_INVALID_ARG;
        if (fx_wtype_is_r12(o->wtype) && o->n % 2 != 0)
            return FX_ERR_INVALID_ARG;
    }
    if (k == 0) {
        for (size_t i = 0; i < n_outs; i++)
            for (size_t r = 0; r < m && outs[i].n > 0; r++)
                memset(outs[i].y + r * outs[i].ldy, 0,
                       outs[i].n * sizeof(float));
        return FX_OK;
    }

    const unsigned threads = fx_pool_threads(kc->pool);
    mm_run run;
    memset(&run, 0, sizeof run);
    run.scratch = kc->scratch;
    run.dual = kc->dual;
    fx_xq_kind kind[FX_MM_MAX_OUTS];
    size_t xq_ld[3] = {0, 0, 0}; /* by fx_xq_kind: 0 if not needed */
    for (size_t i = 0; i < n_outs; i++) {
        const fx_mm_out *o = &outs[i];
        if (o->n == 0) continue;
        if ((flags & FX_MATMUL_FAST) && o->wtype == FX_WTYPE_F32 &&
            m >= kc->fast_min_m && fits_int(m) && fits_int(o->n) &&
            fits_int(k) && fits_int(ldx) && fits_int(o->ldy) &&
            blas_ready(kc)) {
            /* Not batch-invariant: OpenBLAS picks its blocking and thread
             * split from M, so a row's bits depend on its batch. */
            kc->sgemm(FX_CBLAS_ROW_MAJOR, FX_CBLAS_NO_TRANS, FX_CBLAS_TRANS,
                      (int)m, (int)o->n, (int)k, 1.0f, x, (int)ldx,
                      (const float *)o->w, (int)k, 0.0f, o->y, (int)o->ldy);
            continue;
        }
        const size_t j = run.n_jobs++;
        run.jobs[j] = (fx_mm_job){
            .x = x, .ldx = ldx, .m = m,
            .w = o->w, .type = o->wtype,
            .row_bytes = fx_wtype_row_bytes(o->wtype, k), .n = o->n, .k = k,
            .y = o->y, .ldy = o->ldy, .xq = NULL, .xq_ld = 0,
            .q8_pf_rows = kc->q8_pf_rows,
            .r12_pf_bytes = kc->r12_pf_bytes,
            .x_block_bytes = kc->x_block_bytes,
        };
        kind[j] = xq_kind(o->wtype);
        if (fx_wtype_is_qr16(o->wtype)) {
            const fx_wtype base = fx_wtype_qr16_base(o->wtype);
            run.jobs[j].qr16_rows = kc->rows16[base];
            run.range[j] = kc->qrange16[base] ? kc->qrange16[base]
                                              : fx_qr16_range_rows;
        } else {
            run.range[j] = fx_qtype_of(o->wtype)
                               ? kc->qrange[o->wtype]
                               : kc->range[type_index(o->wtype)];
        }
        const job_plan pl = plan_job(kc, m, o, threads);
        run.cols[j] = pl.cols;
        run.dual_half[j] = pl.dual_half;
        run.first_task[j + 1] = run.first_task[j] + pl.tasks;
        if (kind[j] == FX_XQ_32) xq_ld[FX_XQ_32] = fx_xq_row_bytes(k);
        if (kind[j] == FX_XQ_256) xq_ld[FX_XQ_256] = fx_xq256_row_bytes(k);
    }
    if (run.n_jobs == 0) return FX_OK;
    const size_t n_tasks = run.first_task[run.n_jobs];
    const size_t row_bytes = xq_ld[FX_XQ_32] + xq_ld[FX_XQ_256];
    if (row_bytes == 0) return fx_pool_run(kc->pool, mm_task, &run, n_tasks);

    /* The integer types: x quantized once for the call in each format the
     * outputs need (kernels.h, quants.h), the formats side by side in the
     * buffer, in chunks of rows it holds. Each row is quantized on its
     * own, so the chunking cannot change a bit. */
    const size_t chunk = FX_XQ_BYTES / row_bytes;
    if (chunk == 0) return FX_ERR_TOO_LARGE;
    uint8_t *const buf[3] = {NULL, kc->xq, kc->xq + chunk * xq_ld[FX_XQ_32]};
    float *y0[FX_MM_MAX_OUTS];
    for (size_t j = 0; j < run.n_jobs; j++) y0[j] = run.jobs[j].y;
    for (size_t m0 = 0; m0 < m; m0 += chunk) {
        const size_t mc = m - m0 < chunk ? m - m0 : chunk;
        xq_job xj = {kc, x + m0 * ldx, ldx, mc, k,
                     buf[FX_XQ_32], buf[FX_XQ_256],
                     xq_ld[FX_XQ_32], xq_ld[FX_XQ_256]};
        if (mc >= FX_XQ_PARALLEL_M && threads > 1) {
            fx_status st = fx_pool_run(
                kc->pool, xq_task, &xj,
                (mc + FX_XQ_TASK_ROWS - 1) / FX_XQ_TASK_ROWS);
            if (st != FX_OK) return st;
        } else {
            quantize_rows(&xj, 0, mc);
        }
        for (size_t j = 0; j < run.n_jobs; j++) {
            fx_mm_job *job = &run.jobs[j];
            job->m = mc;
            job->x = x + m0 * ldx;
            job->y = y0[j] + m0 * job->ldy;
            job->xq = buf[kind[j]];
            job->xq_ld = xq_ld[kind[j]];
        }
        fx_status st = fx_pool_run(kc->pool, mm_task, &run, n_tasks);
        if (st != FX_OK) return st;
    }
    return FX_OK;
}
