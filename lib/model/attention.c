/*
 * The two inner loops of attention, in a portable and an AVX2+FMA form
 * that give the same bits:
 *
 *   dot(q, k)        acc[i % 8] = fmaf(q[i], k[i], acc[i % 8]) for i
 *                    increasing, then ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7))
 *                    -- the matmul's order (kernels.h), so one rule covers
 *                    every reduction over a head's dimensions;
 *   axpy(out, a, v)  out[i] = fmaf(a, v[i], out[i]) -- no reduction across
 *                    i, so vector lanes change nothing.
 *
 * Attention then reduces over positions j in increasing order, per row and
 * head, whatever else is in the batch (DESIGN.md, Determinism).
 */
#include "attention.h"

#include <math.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define FX_HAVE_X86 1
#endif

static float tree8(const float a[8]) {
    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

static float dot_portable(const float *q, const float *k, uint32_t n) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (uint32_t i = 0; i < n; i++) acc[i % 8] = fmaf(q[i], k[i], acc[i % 8]);
    return tree8(acc);
}

static void axpy_portable(float *out, float a, const float *v, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) out[i] = fmaf(a, v[i], out[i]);
}

#ifdef FX_HAVE_X86
__attribute__((target("avx2,fma"))) static float dot_avx2(const float *q,
                                                          const float *k,
                                                          uint32_t n) {
    __m256 acc = _mm256_setzero_ps();
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(k + i), acc);
    float lanes[8];
    _mm256_storeu_ps(lanes, acc);
    /* The tail continues each lane's own sum, as the portable loop does. */
    for (; i < n; i++) lanes[i % 8] = fmaf(q[i], k[i], lanes[i % 8]);
    return tree8(lanes);
}

__attribute__((target("avx2,fma"))) static void axpy_avx2(float *out, float a,
                                                          const float *v,
                                                          uint32_t n) {
    __m256 va = _mm256_set1_ps(a);
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(v + i),
                                                  _mm256_loadu_ps(out + i)));
    for (; i < n; i++) out[i] = fmaf(a, v[i], out[i]);
}
#endif

void fx_attn_kernels_init(fx_attn_kernels *ak, fx_isa isa) {
    ak->dot = dot_portable;
    ak->axpy = axpy_portable;
#ifdef FX_HAVE_X86
    if (isa == FX_ISA_AVX2 || isa == FX_ISA_AVX512) {
        ak->dot = dot_avx2;
        ak->axpy = axpy_avx2;
    }
#else
    (void)isa;
#endif
}
