/*
 * The two inner loops of attention, in a portable and an AVX2+FMA form
 * (and an AVX-512 weighted sum) that give the same bits:
 *
 *   scores           for each head h and key j: acc[i % 8] = fmaf(q_h[i],
 *                    k_j[i], acc[i % 8]) for i increasing, then
 *                    ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)), times scale --
 *                    the matmul's order (kernels.h), so one rule covers
 *                    every reduction over a head's dimensions;
 *   weighted_sum     out_h[i] = fmaf(p_h[j], v_j[i], out_h[i]) for j
 *                    increasing -- no reduction across i, so vector lanes
 *                    change nothing.
 *
 * Attention then reduces over positions j in increasing order, per row and
 * head, whatever else is in the batch (docs/design.md, Determinism).
 *
 * Keys and values are floats or, from an F16 KV cache, halves. Each body
 * below is written once over untyped rows and instantiated twice with a
 * constant F16 flag that only picks the loads: widening a half is exact,
 * so the F16 forms give the F32 forms' bits on the widened rows, and the
 * two cannot drift apart.
 *
 * Speed. A single dot of a 64-wide head is one chain of 8 dependent fmas,
 * and a single axpy stores out and loads it again for the next key: at a
 * 1000-token prompt the two were half of the time to first token. So the
 * vector forms run independent chains side by side -- 4 heads x 2 keys in
 * scores (each key row loaded once for the 4 heads that share it), 2
 * heads x 32 elements in weighted_sum with out held in registers across a
 * block's keys -- without changing any one output's sequence of
 * operations.
 */
#include "attention.h"

#include <math.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define FX_HAVE_X86 1
#endif

/* Each F32 and F16 instance must fold to its own element type's code, not
 * test the flag per element. */
#if defined(__GNUC__) || defined(__clang__)
#define FX_ALWAYS_INLINE static inline __attribute__((always_inline))
#else
#define FX_ALWAYS_INLINE static inline
#endif

/* Row x (floats, or halves when F16) advanced by n elements. */
FX_ALWAYS_INLINE const void *row_at(const void *x, size_t n, const int F16) {
    return F16 ? (const void *)((const uint16_t *)x + n)
               : (const void *)((const float *)x + n);
}

/* Element i of row x. */
FX_ALWAYS_INLINE float load1(const void *x, size_t i, const int F16) {
    return F16 ? fx_f16_to_f32(((const uint16_t *)x)[i])
               : ((const float *)x)[i];
}

static float tree8(const float a[8]) {
    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

FX_ALWAYS_INLINE void scores_p(const int F16, float *out, size_t out_ld,
                               const float *q, uint32_t nh, const void *k,
                               size_t stride, uint32_t n, uint32_t hd,
                               float scale) {
    for (uint32_t h = 0; h < nh; h++) {
        const float *qh = q + (size_t)h * hd;
        for (uint32_t j = 0; j < n; j++) {
            const void *kj = row_at(k, j * stride, F16);
            float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            for (uint32_t i = 0; i < hd; i++)
                acc[i % 8] = fmaf(qh[i], load1(kj, i, F16), acc[i % 8]);
            out[h * out_ld + j] = tree8(acc) * scale;
        }
    }
}

FX_ALWAYS_INLINE void weighted_sum_p(const int F16, float *out, const float *p,
                                     size_t p_ld, uint32_t nh, const void *v,
                                     size_t stride, uint32_t n, uint32_t hd) {
    for (uint32_t h = 0; h < nh; h++)
        for (uint32_t j = 0; j < n; j++)
            for (uint32_t i = 0; i < hd; i++)
                out[h * hd + i] = fmaf(p[h * p_ld + j],
                                       load1(v, j * stride + i, F16),
                                       out[h * hd + i]);
}

static void scores_portable(float *out, size_t out_ld, const float *q,
                            uint32_t nh, const float *k, size_t stride,
                            uint32_t n, uint32_t hd, float scale) {
    scores_p(0, out, out_ld, q, nh, k, stride, n, hd, scale);
}

static void scores_f16_portable(float *out, size_t out_ld, const float *q,
                                uint32_t nh, const uint16_t *k, size_t stride,
                                uint32_t n, uint32_t hd, float scale) {
    scores_p(1, out, out_ld, q, nh, k, stride, n, hd, scale);
}

static void weighted_sum_portable(float *out, const float *p, size_t p_ld,
                                  uint32_t nh, const float *v, size_t stride,
                                  uint32_t n, uint32_t hd) {
    weighted_sum_p(0, out, p, p_ld, nh, v, stride, n, hd);
}

static void weighted_sum_f16_portable(float *out, const float *p, size_t p_ld,
                                      uint32_t nh, const uint16_t *v,
                                      size_t stride, uint32_t n, uint32_t hd) {
    weighted_sum_p(1, out, p, p_ld, nh, v, stride, n, hd);
}

#ifdef FX_HAVE_X86
/* F16C for the half loads; the ISA check requires it with AVX2 (cpu.c). */
#define FX_AVX2 __attribute__((target("avx2,fma,f16c")))
/* The tiles' loops must unroll fully so the chains live in registers. */
#define FX_UNROLL _Pragma("GCC unroll 4")

/* Element i (tails): vcvtph2ps rather than a call per element. */
FX_ALWAYS_INLINE FX_AVX2 float load1_x86(const void *x, size_t i,
                                         const int F16) {
    return F16 ? _cvtsh_ss(((const uint16_t *)x)[i]) : ((const float *)x)[i];
}

/* Elements i to i + 7. */
FX_ALWAYS_INLINE FX_AVX2 __m256 load8(const void *x, size_t i, const int F16) {
    return F16 ? _mm256_cvtph_ps(_mm_loadu_si128(
                     (const __m128i *)((const uint16_t *)x + i)))
               : _mm256_loadu_ps((const float *)x + i);
}

/* ((a0+a4) + (a2+a6)) + ((a1+a5) + (a3+a7)), as tree8. */
FX_ALWAYS_INLINE FX_AVX2 float reduce8(__m256 v) {
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v),
                           _mm256_extractf128_ps(v, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
    return _mm_cvtss_f32(s1);
}

/* One dot's 8 lanes from element i on; the tail continues each lane's own
 * chain, as the portable loop does. */
FX_ALWAYS_INLINE FX_AVX2 float finish_dot(const int F16, __m256 acc,
                                          const float *q, const void *kj,
                                          uint32_t i, uint32_t hd) {
    if (i == hd) return reduce8(acc);
    float lanes[8];
    _mm256_storeu_ps(lanes, acc);
    /* One loop per type: with the flag tested inside the loop, GCC laid
     * out the F32 instance differently from the F32-only code. */
    if (F16) {
        const uint16_t *kh = kj;
        for (; i < hd; i++)
            lanes[i % 8] = fmaf(q[i], _cvtsh_ss(kh[i]), lanes[i % 8]);
    } else {
        const float *kf = kj;
        for (; i < hd; i++) lanes[i % 8] = fmaf(q[i], kf[i], lanes[i % 8]);
    }
    return tree8(lanes);
}

/* HC heads x KC keys: HC * KC chains, each key row loaded once. */
FX_ALWAYS_INLINE FX_AVX2 void scores_tile(const int F16, const int HC,
                                          const int KC, float *out,
                                          size_t out_ld, const float *q,
                                          const void *k, size_t stride,
                                          uint32_t hd, float scale) {
    const uint32_t hd8 = hd & ~7u;
    __m256 acc[4][2];
    FX_UNROLL
    for (int h = 0; h < HC; h++)
        FX_UNROLL
        for (int c = 0; c < KC; c++) acc[h][c] = _mm256_setzero_ps();
    for (uint32_t i = 0; i < hd8; i += 8) {
        __m256 kv[2];
        FX_UNROLL
        for (int c = 0; c < KC; c++)
            kv[c] = load8(row_at(k, c * stride, F16), i, F16);
        FX_UNROLL
        for (int h = 0; h < HC; h++) {
            const __m256 qv = _mm256_loadu_ps(q + (size_t)h * hd + i);
            FX_UNROLL
            for (int c = 0; c < KC; c++)
                acc[h][c] = _mm256_fmadd_ps(qv, kv[c], acc[h][c]);
        }
    }
    FX_UNROLL
    for (int h = 0; h < HC; h++)
        FX_UNROLL
        for (int c = 0; c < KC; c++)
            out[h * out_ld + (size_t)c] =
                finish_dot(F16, acc[h][c], q + (size_t)h * hd,
                           row_at(k, c * stride, F16), hd8, hd) * scale;
}

FX_ALWAYS_INLINE FX_AVX2 void scores_x(const int F16, float *out,
                                       size_t out_ld, const float *q,
                                       uint32_t nh, const void *k,
                                       size_t stride, uint32_t n, uint32_t hd,
                                       float scale) {
    uint32_t h = 0;
    for (; h + 4 <= nh; h += 4) {
        uint32_t j = 0;
        for (; j + 2 <= n; j += 2)
            scores_tile(F16, 4, 2, out + h * out_ld + j, out_ld,
                        q + (size_t)h * hd, row_at(k, j * stride, F16), stride,
                        hd, scale);
        if (j < n)
            scores_tile(F16, 4, 1, out + h * out_ld + j, out_ld,
                        q + (size_t)h * hd, row_at(k, j * stride, F16), stride,
                        hd, scale);
    }
    /* Fewer than 4 heads left: keys 2 at a time, one head after another. */
    for (; h < nh; h++) {
        uint32_t j = 0;
        for (; j + 2 <= n; j += 2)
            scores_tile(F16, 1, 2, out + h * out_ld + j, out_ld,
                        q + (size_t)h * hd, row_at(k, j * stride, F16), stride,
                        hd, scale);
        if (j < n)
            scores_tile(F16, 1, 1, out + h * out_ld + j, out_ld,
                        q + (size_t)h * hd, row_at(k, j * stride, F16), stride,
                        hd, scale);
    }
}

static FX_AVX2 void scores_avx2(float *out, size_t out_ld, const float *q,
                                uint32_t nh, const float *k, size_t stride,
                                uint32_t n, uint32_t hd, float scale) {
    scores_x(0, out, out_ld, q, nh, k, stride, n, hd, scale);
}

static FX_AVX2 void scores_f16_avx2(float *out, size_t out_ld, const float *q,
                                    uint32_t nh, const uint16_t *k,
                                    size_t stride, uint32_t n, uint32_t hd,
                                    float scale) {
    scores_x(1, out, out_ld, q, nh, k, stride, n, hd, scale);
}

/* HC heads x 8 * RC elements of out in registers across all n keys. */
FX_ALWAYS_INLINE FX_AVX2 void sum_tile(const int F16, const int HC,
                                       const int RC, float *out,
                                       const float *p, size_t p_ld,
                                       const void *v, size_t stride,
                                       uint32_t n, uint32_t hd) {
    __m256 o[2][4];
    FX_UNROLL
    for (int h = 0; h < HC; h++)
        FX_UNROLL
        for (int r = 0; r < RC; r++)
            o[h][r] = _mm256_loadu_ps(out + (size_t)h * hd + 8 * r);
    for (uint32_t j = 0; j < n; j++) {
        __m256 vv[4];
        FX_UNROLL
        for (int r = 0; r < RC; r++)
            vv[r] = load8(row_at(v, j * stride, F16), 8 * r, F16);
        FX_UNROLL
        for (int h = 0; h < HC; h++) {
            const __m256 pj = _mm256_set1_ps(p[h * p_ld + j]);
            FX_UNROLL
            for (int r = 0; r < RC; r++)
                o[h][r] = _mm256_fmadd_ps(pj, vv[r], o[h][r]);
        }
    }
    FX_UNROLL
    for (int h = 0; h < HC; h++)
        FX_UNROLL
        for (int r = 0; r < RC; r++)
            _mm256_storeu_ps(out + (size_t)h * hd + 8 * r, o[h][r]);
}

FX_ALWAYS_INLINE FX_AVX2 void weighted_sum_x(const int F16, float *out,
                                             const float *p, size_t p_ld,
                                             uint32_t nh, const void *v,
                                             size_t stride, uint32_t n,
                                             uint32_t hd) {
    uint32_t h = 0;
    for (; h < nh; h += 2) {
        const int two = h + 2 <= nh;
        float *oh = out + (size_t)h * hd;
        const float *ph = p + h * p_ld;
        uint32_t i = 0;
        for (; i + 32 <= hd; i += 32) {
            if (two)
                sum_tile(F16, 2, 4, oh + i, ph, p_ld,
                         row_at(v, i, F16), stride, n, hd);
            else
                sum_tile(F16, 1, 4, oh + i, ph, p_ld,
                         row_at(v, i, F16), stride, n, hd);
        }
        for (; i + 8 <= hd; i += 8) {
            if (two)
                sum_tile(F16, 2, 1, oh + i, ph, p_ld,
                         row_at(v, i, F16), stride, n, hd);
            else
                sum_tile(F16, 1, 1, oh + i, ph, p_ld,
                         row_at(v, i, F16), stride, n, hd);
        }
        for (uint32_t g = 0; g < (two ? 2u : 1u); g++)
            for (uint32_t t = i; t < hd; t++)
                for (uint32_t j = 0; j < n; j++)
                    oh[g * hd + t] = fmaf(ph[g * p_ld + j],
                                          load1_x86(v, j * stride + t, F16),
                                          oh[g * hd + t]);
    }
}

static FX_AVX2 void weighted_sum_avx2(float *out, const float *p, size_t p_ld,
                                      uint32_t nh, const float *v,
                                      size_t stride, uint32_t n, uint32_t hd) {
    weighted_sum_x(0, out, p, p_ld, nh, v, stride, n, hd);
}

static FX_AVX2 void weighted_sum_f16_avx2(float *out, const float *p,
                                          size_t p_ld, uint32_t nh,
                                          const uint16_t *v, size_t stride,
                                          uint32_t n, uint32_t hd) {
    weighted_sum_x(1, out, p, p_ld, nh, v, stride, n, hd);
}

/* ---- AVX-512: a whole group's output rows in registers ----
 *
 * weighted_sum above keeps 2 heads x 32 elements in ymm registers, so a
 * group of 4 heads of 64 reads every value row 4 times, the first two
 * passes taking half of each row's lines from memory, far below the
 * stream rate.
 * With 32 zmm registers a group's whole output (up to 16 zmm: 4 heads of
 * 64, 2 of 128) stays in registers and each value row is read once, in
 * order. Per element the same fmas in the same order (the header).
 * The scores gain nothing from the same treatment: they read each key
 * row once already, and wait on memory. */
#define FX_AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))

/* Elements i to i + 15. */
FX_ALWAYS_INLINE FX_AVX512 __m512 load16(const void *x, size_t i,
                                         const int F16) {
    return F16 ? _mm512_cvtph_ps(_mm256_loadu_si256(
                     (const __m256i *)((const uint16_t *)x + i)))
               : _mm512_loadu_ps((const float *)x + i);
}

/* HC heads x 16 * R elements of out in zmm registers across all n keys. */
FX_ALWAYS_INLINE FX_AVX512 void sum_tile512(const int F16, const int HC,
                                            const int R, float *out,
                                            const float *p, size_t p_ld,
                                            const void *v, size_t stride,
                                            uint32_t n, uint32_t hd) {
    __m512 o[4][8];
    FX_UNROLL
    for (int h = 0; h < HC; h++)
        FX_UNROLL
        for (int r = 0; r < R; r++)
            o[h][r] = _mm512_loadu_ps(out + (size_t)h * hd + 16 * r);
    for (uint32_t j = 0; j < n; j++) {
        __m512 vv[8];
        FX_UNROLL
        for (int r = 0; r < R; r++)
            vv[r] = load16(row_at(v, j * stride, F16), 16 * r, F16);
        FX_UNROLL
        for (int h = 0; h < HC; h++) {
            const __m512 pj = _mm512_set1_ps(p[h * p_ld + j]);
            FX_UNROLL
            for (int r = 0; r < R; r++)
                o[h][r] = _mm512_fmadd_ps(pj, vv[r], o[h][r]);
        }
    }
    FX_UNROLL
    for (int h = 0; h < HC; h++)
        FX_UNROLL
        for (int r = 0; r < R; r++)
            _mm512_storeu_ps(out + (size_t)h * hd + 16 * r, o[h][r]);
}

/* v is floats in sum512_*, halves in sum512h_*. */
typedef void (*sum512_fn)(float *out, const float *p, size_t p_ld,
                          const void *v, size_t stride, uint32_t n,
                          uint32_t hd);
#define FX_SUM512_1(NAME, F16, HC, R)                                        \
    static FX_AVX512 void NAME##_##HC##x##R(float *out, const float *p,      \
                                            size_t p_ld, const void *v,      \
                                            size_t stride, uint32_t n,       \
                                            uint32_t hd) {                   \
        sum_tile512(F16, HC, R, out, p, p_ld, v, stride, n, hd);             \
    }
#define FX_SUM512(HC, R)                                                     \
    FX_SUM512_1(sum512, 0, HC, R) FX_SUM512_1(sum512h, 1, HC, R)
#define FX_SUM512_R(R)                                                       \
    FX_SUM512(1, R) FX_SUM512(2, R) FX_SUM512(3, R) FX_SUM512(4, R)
FX_SUM512_R(1) FX_SUM512_R(2) FX_SUM512_R(3) FX_SUM512_R(4)
FX_SUM512(1, 5) FX_SUM512(2, 5) FX_SUM512(3, 5)
FX_SUM512(1, 6) FX_SUM512(2, 6) FX_SUM512(1, 7) FX_SUM512(2, 7)
FX_SUM512(1, 8) FX_SUM512(2, 8)

/* [F16][R-1][HC-1]: at most 16 accumulators (HC * R <= 16). */
#define FX_SUMS512(N)                                                        \
    {{N##_1x1, N##_2x1, N##_3x1, N##_4x1},                                   \
     {N##_1x2, N##_2x2, N##_3x2, N##_4x2},                                   \
     {N##_1x3, N##_2x3, N##_3x3, N##_4x3},                                   \
     {N##_1x4, N##_2x4, N##_3x4, N##_4x4},                                   \
     {N##_1x5, N##_2x5, N##_3x5, NULL},                                      \
     {N##_1x6, N##_2x6, NULL, NULL},                                         \
     {N##_1x7, N##_2x7, NULL, NULL},                                         \
     {N##_1x8, N##_2x8, NULL, NULL}}
static const sum512_fn sums512[2][8][4] = {FX_SUMS512(sum512),
                                           FX_SUMS512(sum512h)};

FX_ALWAYS_INLINE FX_AVX512 void weighted_sum_x512(const int F16, float *out,
                                                  const float *p, size_t p_ld,
                                                  uint32_t nh, const void *v,
                                                  size_t stride, uint32_t n,
                                                  uint32_t hd) {
    /* Heads of a multiple of 16 up to 128 elements; others as AVX2. */
    if (hd % 16 != 0 || hd > 128) {
        if (F16)
            weighted_sum_f16_avx2(out, p, p_ld, nh, v, stride, n, hd);
        else
            weighted_sum_avx2(out, p, p_ld, nh, v, stride, n, hd);
        return;
    }
    const uint32_t R = hd / 16, per = R <= 4 ? 4 : 16 / R;
    for (uint32_t h = 0; h < nh; h += per) {
        const uint32_t hc = nh - h < per ? nh - h : per;
        sums512[F16][R - 1][hc - 1](out + (size_t)h * hd, p + h * p_ld, p_ld,
                                    v, stride, n, hd);
    }
}

static FX_AVX512 void weighted_sum_avx512(float *out, const float *p,
                                          size_t p_ld, uint32_t nh,
                                          const float *v, size_t stride,
                                          uint32_t n, uint32_t hd) {
    weighted_sum_x512(0, out, p, p_ld, nh, v, stride, n, hd);
}

static FX_AVX512 void weighted_sum_f16_avx512(float *out, const float *p,
                                              size_t p_ld, uint32_t nh,
                                              const uint16_t *v,
                                              size_t stride, uint32_t n,
                                              uint32_t hd) {
    weighted_sum_x512(1, out, p, p_ld, nh, v, stride, n, hd);
}
#endif

void fx_attn_kernels_init(fx_attn_kernels *ak, fx_isa isa) {
    ak->scores = scores_portable;
    ak->weighted_sum = weighted_sum_portable;
    ak->scores_f16 = scores_f16_portable;
    ak->weighted_sum_f16 = weighted_sum_f16_portable;
    ak->softmax = fx_softmax_for(isa);
#ifdef FX_HAVE_X86
    if (isa == FX_ISA_AVX2 || isa == FX_ISA_AVX512) {
        ak->scores = scores_avx2;
        ak->weighted_sum = weighted_sum_avx2;
        ak->scores_f16 = scores_f16_avx2;
        ak->weighted_sum_f16 = weighted_sum_f16_avx2;
    }
    if (isa == FX_ISA_AVX512) {
        ak->weighted_sum = weighted_sum_avx512;
        ak->weighted_sum_f16 = weighted_sum_f16_avx512;
    }
#else
    (void)isa;
#endif
}
