/*
 * Private to the two AVX2 files of the block-quantized types: the table
 * of qdot_avx2_k.c (K-quants and IQ4_XS on FX_XQ_256 activations), which
 * fx_qmm_avx2 (qdot_avx2.c) consults for the types it does not do itself.
 */
#ifndef FX_KERNELS_QDOT_AVX2_H
#define FX_KERNELS_QDOT_AVX2_H

#include "quants.h"

/* NULL for the 32-element types and where AVX2 is not compiled in. */
fx_mm_range_fn fx_qmm_avx2_k(fx_wtype t);

/* One register tile: up to 4 x rows (xr: their quantized rows, yr: their
 * outputs from column n) against weight rows n .. n + nr - 1 (nr <= 4, or
 * <= the range's rows1 for one x row). */
typedef void (*fx_qtile_fn)(const fx_mm_job *job, size_t n, size_t nr,
                            const uint8_t *const *xr, float *const *yr);
/* Columns [n0, n1) of every row, tiles[mr - 1] doing mr x rows at once,
 * 4 weight rows a tile (rows1, 4 or 8, for one x row; AVX2 builds only). */
void fx_qavx2_rows_range(const fx_mm_job *job, size_t n0, size_t n1,
                         const fx_qtile_fn tiles[4], size_t rows1);

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>
#include <string.h>

#define FX_AVX2 __attribute__((target("avx2,fma,f16c")))
#define FX_ALWAYS_INLINE static inline __attribute__((always_inline))

/* v shifted left by s bits (right for s < 0), 16-bit lanes; s constant. */
FX_ALWAYS_INLINE FX_AVX2 __m256i shl16(__m256i v, int s) {
    if (s > 0) return _mm256_slli_epi16(v, s);
    if (s < 0) return _mm256_srli_epi16(v, -s);
    return v;
}

/* The 4 rows' sums of 8 int32 lanes each, as one xmm [a b c d]. Two
 * forms, as measured (Zen 4, AVX2 code): unpacks and adds keep the hadds
 * (3 or 4 uops each) off the multiply ports, 4-8% faster for the 32-element
 * types; the K-quants, which reduce 8 times less often, ran 2-3% faster
 * with the shorter hadd form. */
FX_ALWAYS_INLINE FX_AVX2 __m128i sum4rows_unpack(__m256i a, __m256i b,
                                                 __m256i c, __m256i d) {
    const __m256i ab = _mm256_add_epi32(_mm256_unpacklo_epi32(a, b),
                                        _mm256_unpackhi_epi32(a, b));
    const __m256i cd = _mm256_add_epi32(_mm256_unpacklo_epi32(c, d),
                                        _mm256_unpackhi_epi32(c, d));
    const __m256i v = _mm256_add_epi32(_mm256_unpacklo_epi64(ab, cd),
                                       _mm256_unpackhi_epi64(ab, cd));
    return _mm_add_epi32(_mm256_castsi256_si128(v),
                         _mm256_extracti128_si256(v, 1));
}

FX_ALWAYS_INLINE FX_AVX2 __m128i sum4rows_hadd(__m256i a, __m256i b,
                                               __m256i c, __m256i d) {
    const __m256i v = _mm256_hadd_epi32(_mm256_hadd_epi32(a, b),
                                        _mm256_hadd_epi32(c, d));
    return _mm_add_epi32(_mm256_castsi256_si128(v),
                         _mm256_extracti128_si256(v, 1));
}

/* A tile's 4 outputs of one x row, of which the first nr are real rows. */
FX_ALWAYS_INLINE FX_AVX2 void fx_qavx2_store4(float *y, __m128 acc, size_t nr) {
    if (nr == 4) {
        _mm_storeu_ps(y, acc);
    } else {
        float tmp[4];
        _mm_storeu_ps(tmp, acc);
        memcpy(y, tmp, nr * sizeof(float));
    }
}

FX_ALWAYS_INLINE uint64_t u16_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return h;
}

FX_ALWAYS_INLINE uint64_t u32_at(const uint8_t *p) {
    uint32_t h;
    memcpy(&h, p, sizeof h);
    return h;
}

/* The f16 at p[0..3] as 4 floats, packed in a general register: one move
 * to the vector side, not a chain of pinsrw (nor a store the wide load
 * cannot forward from). */
FX_ALWAYS_INLINE FX_AVX2 __m128 f16x4_at(const uint8_t *const *p) {
    const uint64_t v = u16_at(p[0]) | u16_at(p[1]) << 16 | u16_at(p[2]) << 32 |
                       u16_at(p[3]) << 48;
    return _mm_cvtph_ps(_mm_cvtsi64_si128((long long)v));
}

/* The f16 pairs (d, m) at p[0..3] as [d0 d1 d2 d3 | m0 m1 m2 m3]. */
FX_ALWAYS_INLINE FX_AVX2 __m256 f16x4x2_at(const uint8_t *const *p) {
    const __m256 v = _mm256_cvtph_ps(
        _mm_set_epi64x((long long)(u32_at(p[2]) | u32_at(p[3]) << 32),
                       (long long)(u32_at(p[0]) | u32_at(p[1]) << 32)));
    return _mm256_permutevar8x32_ps(v, _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
}

#endif

#endif /* FX_KERNELS_QDOT_AVX2_H */
