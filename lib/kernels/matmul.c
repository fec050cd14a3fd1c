/*
 * The matmul entry point: argument checks, ISA choice, the split of N over
 * the pool, the portable path, and the OpenBLAS fast mode.
 */
#include "matmul_impl.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <string.h>

struct fx_kernels {
    fx_alloc alloc;
    fx_isa isa;
    fx_mm_range_fn range;  /* chosen once at create: no global state */
    fx_pool *pool;
    size_t fast_min_m;
    void *scratch_raw;     /* what fx_malloc returned */
    float *scratch;        /* [n_threads][FX_MM_SCRATCH_FLOATS], 64-aligned */
};

size_t fx_wtype_row_bytes(fx_wtype t, size_t k) {
    switch (t) {
    case FX_WTYPE_F32: return k <= SIZE_MAX / 4 ? 4 * k : 0;
    case FX_WTYPE_F16:
    case FX_WTYPE_BF16: return k <= SIZE_MAX / 2 ? 2 * k : 0;
    case FX_WTYPE_Q8_0:
        if (k % FX_QK8_0 != 0) return 0;
        return (k / FX_QK8_0) * sizeof(fx_block_q8_0);
    default: return 0;
    }
}

const char *fx_wtype_name(fx_wtype t) {
    switch (t) {
    case FX_WTYPE_F32: return "f32";
    case FX_WTYPE_F16: return "f16";
    case FX_WTYPE_BF16: return "bf16";
    case FX_WTYPE_Q8_0: return "q8_0";
    default: return "unknown";
    }
}

/* ---- portable path: the definition in kernels.h, written literally ---- */

static float weight_at(fx_wtype t, const uint8_t *row, size_t k) {
    switch (t) {
    case FX_WTYPE_F16: {
        uint16_t h;
        memcpy(&h, row + 2 * k, 2);
        return fx_f16_to_f32(h);
    }
    case FX_WTYPE_BF16: {
        uint16_t h;
        memcpy(&h, row + 2 * k, 2);
        return fx_bf16_to_f32(h);
    }
    case FX_WTYPE_Q8_0: {
        const uint8_t *b = row + (k / FX_QK8_0) * sizeof(fx_block_q8_0);
        uint16_t d;
        int8_t q;
        memcpy(&d, b, 2);
        memcpy(&q, b + 2 + k % FX_QK8_0, 1);
        return fx_f16_to_f32(d) * (float)q;
    }
    case FX_WTYPE_F32:
    default: {
        float f;
        memcpy(&f, row + 4 * k, 4);
        return f;
    }
    }
}

void fx_mm_range_portable(const fx_mm_job *job, size_t n0, size_t n1,
                          float *scratch) {
    (void)scratch;
    for (size_t m = 0; m < job->m; m++) {
        const float *x = job->x + m * job->ldx;
        for (size_t n = n0; n < n1; n++) {
            const uint8_t *row = job->w + n * job->row_bytes;
            float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            for (size_t k = 0; k < job->k; k++)
                acc[k % 8] = fmaf(x[k], weight_at(job->type, row, k),
                                  acc[k % 8]);
            job->y[m * job->ldy + n] = ((acc[0] + acc[4]) + (acc[2] + acc[6])) +
                                       ((acc[1] + acc[5]) + (acc[3] + acc[7]));
        }
    }
}

/* ---- context ---- */

void fx_kernels_params_init(fx_kernels_params *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->n_threads = 1;
    p->isa = FX_ISA_AUTO;
    p->fast_min_m = 64;
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

    fx_mm_range_fn range = NULL;
    fx_isa isa = p.isa;
    switch (p.isa) {
    case FX_ISA_AUTO:
        isa = FX_ISA_PORTABLE;
        range = fx_mm_range_portable;
        if (fx_cpu_has_avx512() && fx_mm_avx512_range()) {
            isa = FX_ISA_AVX512;
            range = fx_mm_avx512_range();
        } else if (fx_cpu_has_avx2() && fx_mm_avx2_range()) {
            isa = FX_ISA_AVX2;
            range = fx_mm_avx2_range();
        }
        break;
    case FX_ISA_AVX512:
        if (fx_cpu_has_avx512()) range = fx_mm_avx512_range();
        if (!range)
            return fx_fail(err, FX_ERR_UNSUPPORTED,
                           "kernels: AVX-512 F/BW/VL/DQ not available");
        break;
    case FX_ISA_AVX2:
        if (fx_cpu_has_avx2()) range = fx_mm_avx2_range();
        if (!range)
            return fx_fail(err, FX_ERR_UNSUPPORTED,
                           "kernels: AVX2+FMA+F16C not available");
        break;
    case FX_ISA_PORTABLE:
        range = fx_mm_range_portable;
        break;
    default:
        return fx_fail(err, FX_ERR_INVALID_ARG, "kernels: unknown isa %d",
                       (int)p.isa);
    }

    fx_kernels *kc = fx_calloc(alloc, 1, sizeof *kc);
    if (!kc) return fx_fail(err, FX_ERR_NOMEM, "kernels: out of memory");
    kc->alloc = *alloc;
    kc->isa = isa;
    kc->range = range;
    kc->fast_min_m = p.fast_min_m;

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

    fx_status st = fx_pool_create(alloc, p.n_threads, &kc->pool, err);
    if (st != FX_OK) {
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
    fx_alloc alloc = kc->alloc;
    fx_free(&alloc, kc->scratch_raw);
    fx_free(&alloc, kc);
}

fx_isa fx_kernels_isa(const fx_kernels *kc) {
    return kc ? kc->isa : FX_ISA_PORTABLE;
}

fx_pool *fx_kernels_pool(fx_kernels *kc) { return kc ? kc->pool : NULL; }

/* ---- dispatch ---- */

typedef struct mm_run {
    const fx_mm_job *job;
    fx_mm_range_fn range;
    float *scratch;
    size_t cols; /* per task */
} mm_run;

/* A task is a fixed slice of columns; which thread runs it cannot change
 * what it computes. */
static void mm_task(void *ctx, size_t task, unsigned thread) {
    const mm_run *r = ctx;
    size_t n0 = task * r->cols;
    size_t n1 = n0 + r->cols;
    if (n1 > r->job->n) n1 = r->job->n;
    r->range(r->job, n0, n1,
             r->scratch + (size_t)thread * FX_MM_SCRATCH_FLOATS);
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

static bool fits_int(size_t v) { return v <= (size_t)INT_MAX; }

fx_status fx_matmul(fx_kernels *kc, const float *x, size_t ldx, size_t m,
                    const void *w, fx_wtype wtype, size_t n, size_t k,
                    float *y, size_t ldy, unsigned flags) {
    if (!kc) return FX_ERR_INVALID_ARG;
    if (m == 0 || n == 0) return FX_OK;
    if (!x || !w || !y || ldx < k || ldy < n) return FX_ERR_INVALID_ARG;
    if (fx_wtype_row_bytes(wtype, FX_QK8_0) == 0) return FX_ERR_UNSUPPORTED;
    size_t row_bytes = fx_wtype_row_bytes(wtype, k);
    if (k > 0 && row_bytes == 0) return FX_ERR_INVALID_ARG; /* Q8_0, k%32 */
    if (k == 0) {
        for (size_t i = 0; i < m; i++) memset(y + i * ldy, 0, n * sizeof *y);
        return FX_OK;
    }

    if ((flags & FX_MATMUL_FAST) && wtype == FX_WTYPE_F32 &&
        m >= kc->fast_min_m && fits_int(m) && fits_int(n) && fits_int(k) &&
        fits_int(ldx) && fits_int(ldy)) {
        /* Not batch-invariant: OpenBLAS picks its blocking and thread
         * split from M, so a row's bits depend on its batch. */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)n,
                    (int)k, 1.0f, x, (int)ldx, (const float *)w, (int)k, 0.0f,
                    y, (int)ldy);
        return FX_OK;
    }

    fx_mm_job job = {
        .x = x, .ldx = ldx, .m = m,
        .w = w, .type = wtype, .row_bytes = row_bytes, .n = n, .k = k,
        .y = y, .ldy = ldy,
    };
    mm_run run = {.job = &job, .range = kc->range, .scratch = kc->scratch,
                  .cols = task_cols(n, fx_pool_threads(kc->pool))};
    size_t n_tasks = (n + run.cols - 1) / run.cols;
    return fx_pool_run(kc->pool, mm_task, &run, n_tasks);
}
