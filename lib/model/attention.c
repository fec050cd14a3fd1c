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

static float tree8(const float a[8]) {
    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

static void scores_portable(float *out, size_t out_ld, const float *q,
                            uint32_t nh, const float *k, size_t stride,
                            uint32_t n, uint32_t hd, float scale) {
    for (uint32_t h = 0; h < nh; h++) {
        const float *qh = q + (size_t)h * hd;
        for (uint32_t j = 0; j < n; j++) {
            const float *kj = k + j * stride;
            float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            for (uint32_t i = 0; i < hd; i++)
                acc[i % 8] = fmaf(qh[i], kj[i], acc[i % 8]);
            out[h * out_ld + j] = tree8(acc) * scale;
        }
    }
}

static void weighted_sum_portable(float *out, const float *p, size_t p_ld,
                                  uint32_t nh, const float *v, size_t stride,
                                  uint32_t n, uint32_t hd) {
    for (uint32_t h = 0; h < nh; h++)
        for (uint32_t j = 0; j < n; j++)
            for (uint32_t i = 0; i < hd; i++)
                out[h * hd + i] = fmaf(p[h * p_ld + j], v[j * stride + i],
                                       out[h * hd + i]);
}

#ifdef FX_HAVE_X86
#define FX_AVX2 __attribute__((target("avx2,fma")))
#define FX_ALWAYS_INLINE static inline __attribute__((always_inline))
/* The tiles' loops must unroll fully so the chains live in registers. */
#define FX_UNROLL _Pragma("GCC unroll 4")

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
FX_ALWAYS_INLINE FX_AVX2 float finish_dot(__m256 acc, const float *q,
                                          const float *kj, uint32_t i,
                                          uint32_t hd) {
    if (i == hd) return reduce8(acc);
    float lanes[8];
    _mm256_storeu_ps(lanes, acc);
    for (; i < hd; i++) lanes[i % 8] = fmaf(q[i], kj[i], lanes[i % 8]);
    return tree8(lanes);
}

/* HC heads x KC keys: HC * KC chains, each key row loaded once. */
FX_ALWAYS_INLINE FX_AVX2 void scores_tile(const int HC, const int KC,
                                          float *out, size_t out_ld,
                                          const float *q, const float *k,
                                          size_t stride, uint32_t hd,
                                          float scale) {
    const uint32_t hd8 = hd & ~7u;
    __m256 acc[4][2];
    FX_UNROLL
    for (int h = 0; h < HC; h++)
        FX_UNROLL
        for (int c = 0; c < KC; c++) acc[h][c] = _mm256_setzero_ps();
    for (uint32_t i = 0; i < hd8; i += 8) {
        __m256 kv[2];
        FX_UNROLL
        for (int c = 0; c < KC; c++) kv[c] = _mm256_loadu_ps(k + c * stride + i);
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
                finish_dot(acc[h][c], q + (size_t)h * hd, k + c * stride, hd8,
                           hd) * scale;
}

static FX_AVX2 void scores_avx2(float *out, size_t out_ld, const float *q,
                                uint32_t nh, const float *k, size_t stride,
                                uint32_t n, uint32_t hd, float scale) {
    uint32_t h = 0;
    for (; h + 4 <= nh; h += 4) {
        uint32_t j = 0;
        for (; j + 2 <= n; j += 2)
            scores_tile(4, 2, out + h * out_ld + j, out_ld, q + (size_t)h * hd,
                        k + j * stride, stride, hd, scale);
        if (j < n)
            scores_tile(4, 1, out + h * out_ld + j, out_ld, q + (size_t)h * hd,
                        k + j * stride, stride, hd, scale);
    }
    /* Fewer than 4 heads left: keys 2 at a time, one head after another. */
    for (; h < nh; h++) {
        uint32_t j = 0;
        for (; j + 2 <= n; j += 2)
            scores_tile(1, 2, out + h * out_ld + j, out_ld, q + (size_t)h * hd,
                        k + j * stride, stride, hd, scale);
        if (j < n)
            scores_tile(1, 1, out + h * out_ld + j, out_ld, q + (size_t)h * hd,
                        k + j * stride, stride, hd, scale);
    }
}

/* HC heads x 8 * RC elements of out in registers across all n keys. */
FX_ALWAYS_INLINE FX_AVX2 void sum_tile(const int HC, const int RC, float *out,
                                       const float *p, size_t p_ld,
                                       const float *v, size_t stride,
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
            vv[r] = _mm256_loadu_ps(v + j * stride + 8 * r);
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

static FX_AVX2 void weighted_sum_avx2(float *out, const float *p, size_t p_ld,
                                      uint32_t nh, const float *v,
                                      size_t stride, uint32_t n, uint32_t hd) {
    uint32_t h = 0;
    for (; h < nh; h += 2) {
        const int two = h + 2 <= nh;
        float *oh = out + (size_t)h * hd;
        const float *ph = p + h * p_ld;
        uint32_t i = 0;
        for (; i + 32 <= hd; i += 32) {
            if (two)
                sum_tile(2, 4, oh + i, ph, p_ld, v + i, stride, n, hd);
            else
                sum_tile(1, 4, oh + i, ph, p_ld, v + i, stride, n, hd);
        }
        for (; i + 8 <= hd; i += 8) {
            if (two)
                sum_tile(2, 1, oh + i, ph, p_ld, v + i, stride, n, hd);
            else
                sum_tile(1, 1, oh + i, ph, p_ld, v + i, stride, n, hd);
        }
        for (uint32_t g = 0; g < (two ? 2u : 1u); g++)
            for (uint32_t t = i; t < hd; t++)
                for (uint32_t j = 0; j < n; j++)
                    oh[g * hd + t] = fmaf(ph[g * p_ld + j], v[j * stride + t],
                                          oh[g * hd + t]);
    }
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
#define FX_AVX512 __attribute__((target("avx512f,avx2,fma")))

/* HC heads x 16 * R elements of out in zmm registers across all n keys. */
FX_ALWAYS_INLINE FX_AVX512 void sum_tile512(const int HC, const int R,
                                            float *out, const float *p,
                                            size_t p_ld, const float *v,
                                            size_t stride, uint32_t n,
                                            uint32_t hd) {
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
            vv[r] = _mm512_loadu_ps(v + j * stride + 16 * r);
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

typedef void (*sum512_fn)(float *out, const float *p, size_t p_ld,
                          const float *v, size_t stride, uint32_t n,
                          uint32_t hd);
#define FX_SUM512(HC, R)                                                     \
    static FX_AVX512 void sum512_##HC##x##R(float *out, const float *p,      \
                                            size_t p_ld, const float *v,     \
                                            size_t stride, uint32_t n,       \
                                            uint32_t hd) {                   \
        sum_tile512(HC, R, out, p, p_ld, v, stride, n, hd);                  \
    }
#define FX_SUM512_R(R)                                                       \
    FX_SUM512(1, R) FX_SUM512(2, R) FX_SUM512(3, R) FX_SUM512(4, R)
FX_SUM512_R(1) FX_SUM512_R(2) FX_SUM512_R(3) FX_SUM512_R(4)
FX_SUM512(1, 5) FX_SUM512(2, 5) FX_SUM512(3, 5)
FX_SUM512(1, 6) FX_SUM512(2, 6) FX_SUM512(1, 7) FX_SUM512(2, 7)
FX_SUM512(1, 8) FX_SUM512(2, 8)

/* [R-1][HC-1]: at most 16 accumulators (HC * R <= 16). */
static const sum512_fn sums512[8][4] = {
    {sum512_1x1, sum512_2x1, sum512_3x1, sum512_4x1},
    {sum512_1x2, sum512_2x2, sum512_3x2, sum512_4x2},
    {sum512_1x3, sum512_2x3, sum512_3x3, sum512_4x3},
    {sum512_1x4, sum512_2x4, sum512_3x4, sum512_4x4},
    {sum512_1x5, sum512_2x5, sum512_3x5, NULL},
    {sum512_1x6, sum512_2x6, NULL, NULL},
    {sum512_1x7, sum512_2x7, NULL, NULL},
    {sum512_1x8, sum512_2x8, NULL, NULL}};

static FX_AVX512 void weighted_sum_avx512(float *out, const float *p,
                                          size_t p_ld, uint32_t nh,
                                          const float *v, size_t stride,
                                          uint32_t n, uint32_t hd) {
    /* Heads of a multiple of 16 up to 128 elements; others as AVX2. */
    if (hd % 16 != 0 || hd > 128) {
        weighted_sum_avx2(out, p, p_ld, nh, v, stride, n, hd);
        return;
    }
    const uint32_t R = hd / 16, per = R <= 4 ? 4 : 16 / R;
    for (uint32_t h = 0; h < nh; h += per) {
        const uint32_t hc = nh - h < per ? nh - h : per;
        sums512[R - 1][hc - 1](out + (size_t)h * hd, p + h * p_ld, p_ld, v,
                               stride, n, hd);
    }
}
#endif

void fx_attn_kernels_init(fx_attn_kernels *ak, fx_isa isa) {
    ak->scores = scores_portable;
    ak->weighted_sum = weighted_sum_portable;
    ak->softmax = fx_softmax_for(isa);
#ifdef FX_HAVE_X86
    if (isa == FX_ISA_AVX2 || isa == FX_ISA_AVX512) {
        ak->scores = scores_avx2;
        ak->weighted_sum = weighted_sum_avx2;
    }
    if (isa == FX_ISA_AVX512) ak->weighted_sum = weighted_sum_avx512;
#else
    (void)isa;
#endif
}
