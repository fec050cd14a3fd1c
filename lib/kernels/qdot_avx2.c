/*
 * AVX2 (+FMA, F16C) matmul of the 32-element block-quantized types (Q4_0,
 * Q4_1, Q5_0, Q5_1, IQ4_NL) on FX_XQ_32 activations, the FX_XQ_256
 * quantizer, and the AVX2 kernel table of every block-quantized type (the
 * K-quants and IQ4_XS: qdot_avx2_k.c). quants.h fixes the arithmetic:
 * each block's integers P (and M) exact, then one or two fmas per block in
 * block order. Here the fmas run for 4 weight rows at once in one xmm (8
 * in a ymm for one x row), each lane exactly the scalar definition of its
 * row, and the integer
 * work is maddubs (u8 weights x s8 activations) plus madd to int32.
 */
#include "qdot_avx2.h"

#include <stddef.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#define FX_UNROLL _Pragma("GCC unroll 8")
#ifndef FX_PF_DIST
#define FX_PF_DIST 2048
#endif

/* ---- FX_XQ_256: the activation quantizer of the K-quants and IQ4_XS ----
 *
 * The FX_XQ_32 rule over blocks of 256 (quants.h), as fx_xq256_portable:
 * the same IEEE operations in the same order, so the same bytes. */

/* x * id rounded to nearest even by cvtps2dq (MXCSR's default mode, as
 * nearbyintf), narrowed without saturation (|q| <= 127). The 16-element
 * sums come from the quants themselves: maddubs(1, q) and madd(., 1) give
 * sums of 4, two hadd levels sums of 16 (exact integers). */
static FX_AVX2 void xq256_avx2(const float *x, size_t ldx, size_t m, size_t k,
                               uint8_t *xq, size_t ld) {
    const size_t nb = k / FX_QK_K;
    const __m256i magnitude = _mm256_set1_epi32(0x7fffffff);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    for (size_t r = 0; r < m; r++) {
        const float *xr = x + r * ldx;
        uint8_t *row = xq + r * ld;
        for (size_t b = 0; b < nb; b++) {
            const float *xb = xr + b * FX_QK_K;
            __m256i a = _mm256_setzero_si256();
            for (int i = 0; i < FX_QK_K / 8; i++)
                a = _mm256_max_epu32(
                    a, _mm256_and_si256(
                           _mm256_castps_si256(_mm256_loadu_ps(xb + 8 * i)),
                           magnitude));
            __m128i a4 = _mm_max_epu32(_mm256_castsi256_si128(a),
                                       _mm256_extracti128_si256(a, 1));
            a4 = _mm_max_epu32(a4, _mm_shuffle_epi32(a4, _MM_SHUFFLE(1, 0, 3, 2)));
            a4 = _mm_max_epu32(a4, _mm_shuffle_epi32(a4, _MM_SHUFFLE(2, 3, 0, 1)));
            float d, id = 0.0f;
            uint8_t *q = row + b * FX_QK_K;
            uint8_t *bsum = row + k + b * (FX_QK_K / 8);
            if (!fx_xq_scale((uint32_t)_mm_cvtsi128_si32(a4), &d, &id)) {
                memset(q, 0, FX_QK_K);
                memset(bsum, 0, FX_QK_K / 8);
            } else {
                const __m256 vid = _mm256_set1_ps(id);
                __m256i s[8];
                for (int c = 0; c < 8; c++) {
                    const float *xc = xb + 32 * c;
                    __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xc), vid));
                    __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xc + 8), vid));
                    __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xc + 16), vid));
                    __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xc + 24), vid));
                    /* packs work within 128-bit lanes; the permute puts
                     * the 4-byte groups back in element order */
                    __m256i qv = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1),
                                                    _mm256_packs_epi32(i2, i3));
                    qv = _mm256_permutevar8x32_epi32(qv, order);
                    _mm256_storeu_si256((__m256i *)(void *)(q + 32 * c), qv);
                    s[c] = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, qv), ones16);
                }
                /* hadd(hadd(s0, s1), hadd(s2, s3)): 128-bit lane 0 holds
                 * the sums of 16 numbered 0, 2, 4, 6, lane 1 1, 3, 5, 7. */
                const __m256i lo = _mm256_hadd_epi32(_mm256_hadd_epi32(s[0], s[1]),
                                                     _mm256_hadd_epi32(s[2], s[3]));
                const __m256i hi = _mm256_hadd_epi32(_mm256_hadd_epi32(s[4], s[5]),
                                                     _mm256_hadd_epi32(s[6], s[7]));
                const __m256i p = _mm256_packs_epi32(lo, hi); /* |sum| <= 2032 */
                const __m128i even = _mm256_castsi256_si128(p);
                const __m128i odd = _mm256_extracti128_si256(p, 1);
                _mm_storeu_si128((__m128i *)(void *)bsum, _mm_unpacklo_epi16(even, odd));
                _mm_storeu_si128((__m128i *)(void *)(bsum + 16),
                                 _mm_unpackhi_epi16(even, odd));
            }
            memcpy(row + k + k / 8 + 4 * b, &d, sizeof d);
            fx_xq256_pair_sums(row, k, b);
        }
    }
}

fx_xq_fn fx_xq256_avx2(void) { return xq256_avx2; }

/* ---- shared by both files: the range driver ---- */

static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

/* W rows in groups read from memory once per call: chunks of 4 x rows find
 * the group in L1/L2 (24 rows of K = 4096 at 4.5 bits: 55 KiB). A multiple
 * of 8, the widest tile. */
#ifndef FX_QGROUP
#define FX_QGROUP 24
#endif

void fx_qavx2_rows_range(const fx_mm_job *job, size_t n0, size_t n1,
                         const fx_qtile_fn tiles[4], size_t rows1) {
    for (size_t n = n0; n < n1; n += FX_QGROUP) {
        const size_t g = min_sz(FX_QGROUP, n1 - n);
        for (size_t m = 0; m < job->m; m += 4) {
            const size_t mr = min_sz(4, job->m - m);
            const uint8_t *xr[4];
            float *yr[4];
            for (size_t i = 0; i < mr; i++)
                xr[i] = job->xq + (m + i) * job->xq_ld;
            const size_t step = mr == 1 ? rows1 : 4;
            for (size_t j = 0; j < g; j += step) {
                for (size_t i = 0; i < mr; i++)
                    yr[i] = job->y + (m + i) * job->ldy + n + j;
                tiles[mr - 1](job, n + j, min_sz(step, g - j), xr, yr);
            }
        }
    }
}

/* ---- the 32-element types ---- */

/* A block's 16 quant bytes as 32 nibbles in element order: low nibbles
 * (elements 0..15) in the low 128-bit lane, high nibbles in the high. */
FX_ALWAYS_INLINE FX_AVX2 __m256i nibbles16(const uint8_t *qs) {
    const __m256i b = _mm256_broadcastsi128_si256(
        _mm_loadu_si128((const __m128i *)(const void *)qs));
    return _mm256_and_si256(
        _mm256_srlv_epi32(b, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)),
        _mm256_set1_epi8(0x0f));
}

/* 0x10 in byte i where bit i of the 32 at qh is set (Q5_0, Q5_1). */
FX_ALWAYS_INLINE FX_AVX2 __m256i bit4_of(const uint8_t *qh) {
    uint32_t h;
    memcpy(&h, qh, sizeof h);
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32((int)h),
        _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                         2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i bit = _mm256_set1_epi64x(0x8040201008040201LL);
    return _mm256_and_si256(
        _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit),
        _mm256_set1_epi8(0x10));
}

FX_ALWAYS_INLINE size_t b32_bytes(fx_wtype T) {
    switch (T) {
    case FX_WTYPE_Q4_1: return sizeof(fx_block_q4_1);
    case FX_WTYPE_Q5_0: return sizeof(fx_block_q5_0);
    case FX_WTYPE_Q5_1: return sizeof(fx_block_q5_1);
    case FX_WTYPE_IQ4_NL: return sizeof(fx_block_iq4_nl);
    default: return sizeof(fx_block_q4_0);
    }
}

/* A block's 32 quants in element order: unsigned q (Q4_0 to Q5_1, 0..31)
 * or IQ4_NL's signed levels kv[q]. */
FX_ALWAYS_INLINE FX_AVX2 __m256i b32_quants(fx_wtype T, const uint8_t *blk,
                                            __m256i kv) {
    switch (T) {
    case FX_WTYPE_Q4_1: return nibbles16(blk + offsetof(fx_block_q4_1, qs));
    case FX_WTYPE_Q5_0:
        return _mm256_or_si256(nibbles16(blk + offsetof(fx_block_q5_0, qs)),
                               bit4_of(blk + offsetof(fx_block_q5_0, qh)));
    case FX_WTYPE_Q5_1:
        return _mm256_or_si256(nibbles16(blk + offsetof(fx_block_q5_1, qs)),
                               bit4_of(blk + offsetof(fx_block_q5_1, qh)));
    case FX_WTYPE_IQ4_NL:
        return _mm256_shuffle_epi8(
            kv, nibbles16(blk + offsetof(fx_block_iq4_nl, qs)));
    default: return nibbles16(blk + offsetof(fx_block_q4_0, qs));
    }
}

/* The sums of 4 rows' maddubs products (16 int16 each), as one xmm of
 * int32: the reduction tree of sum4rows_unpack run on int16 and widened
 * once by one madd, instead of a madd per row. Exact for weights q <= 31:
 * an int16 then holds at most 8 products, 8 * 31 * 127 = 31496 < 2^15. */
FX_ALWAYS_INLINE FX_AVX2 __m128i sum4rows_i16(__m256i a, __m256i b, __m256i c,
                                              __m256i d, __m256i ones) {
    const __m256i ab = _mm256_add_epi16(_mm256_unpacklo_epi32(a, b),
                                        _mm256_unpackhi_epi32(a, b));
    const __m256i cd = _mm256_add_epi16(_mm256_unpacklo_epi32(c, d),
                                        _mm256_unpackhi_epi32(c, d));
    const __m256i v = _mm256_madd_epi16(
        _mm256_add_epi16(_mm256_unpacklo_epi64(ab, cd), _mm256_unpackhi_epi64(ab, cd)),
        ones);
    return _mm_add_epi32(_mm256_castsi256_si128(v),
                         _mm256_extracti128_si256(v, 1));
}

/* A row's maddubs products and their 4-row sum: IQ4_NL's products (up to
 * 127 * 127 a pair) are widened first, the others' (q <= 31) after the
 * tree (sum4rows_i16). */
FX_ALWAYS_INLINE FX_AVX2 __m256i b32_prod(bool is_signed, __m256i aw, __m256i w,
                                          __m256i xv, __m256i ones) {
    if (is_signed)
        return _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv, w)), ones);
    return _mm256_maddubs_epi16(w, xv);
}

FX_ALWAYS_INLINE FX_AVX2 __m128i b32_sum4(bool is_signed, const __m256i *d,
                                          __m256i ones) {
    return is_signed ? sum4rows_unpack(d[0], d[1], d[2], d[3])
                     : sum4rows_i16(d[0], d[1], d[2], d[3], ones);
}

/* MR x rows against 4 weight rows from row n (nr < 4 real rows repeat the
 * last one; its extra lanes are not stored). Per block: each weight row's
 * quants decoded once for the MR x rows; per x row, maddubs and madd give
 * 8 lanes of exact sums a row, sum4rows their 4 totals, then the fmas of
 * quants.h on 4 lanes. Q4_0 and Q5_0 fold their offset in as -8 or -16
 * times sum qx = nc / 16 or nc / 8 (nc = -128 sum qx, matmul_impl.h); the
 * min types take M = -sum qx = nc / 128. IQ4_NL's signed levels go
 * through maddubs as |w| times qx with w's sign (|w| <= 127: no pair
 * saturates). */
FX_ALWAYS_INLINE FX_AVX2 void tile32(const fx_wtype T, const int MR,
                                     const fx_mm_job *job, size_t n,
                                     size_t nr, const uint8_t *const *xr,
                                     float *const *yr) {
    const size_t k = job->k, nb = k / FX_QK32, bb = b32_bytes(T);
    const bool has_min = T == FX_WTYPE_Q4_1 || T == FX_WTYPE_Q5_1;
    const bool is_signed = T == FX_WTYPE_IQ4_NL;
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i kv = is_signed ? _mm256_broadcastsi128_si256(_mm_loadu_si128(
                                       (const __m128i *)(const void *)fx_iq4nl_values))
                                 : _mm256_setzero_si256();
    const __m128 neg = _mm_set1_ps(-0.0f);
    const uint8_t *rw[4];
    for (size_t j = 0; j < 4; j++)
        rw[j] = job->w + (n + min_sz(j, nr - 1)) * job->row_bytes;
    __m128 acc[4];
    FX_UNROLL
    for (int i = 0; i < MR; i++) acc[i] = _mm_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        __m256i w[4], aw[4];
        const uint8_t *blk[4];
        FX_UNROLL
        for (int j = 0; j < 4; j++) {
            blk[j] = rw[j] + b * bb;
            _mm_prefetch((const char *)blk[j] + FX_PF_DIST, _MM_HINT_T0);
            w[j] = b32_quants(T, blk[j], kv);
            aw[j] = is_signed ? _mm256_abs_epi8(w[j]) : w[j];
        }
        /* d (has_min: d and m) of the 4 rows */
        const __m256 dm = has_min ? f16x4x2_at(blk) : _mm256_setzero_ps();
        const __m128 dw = has_min ? _mm_setzero_ps() : f16x4_at(blk);
        FX_UNROLL
        for (int i = 0; i < MR; i++) {
            const __m256i xv = _mm256_loadu_si256(
                (const __m256i *)(const void *)(xr[i] + FX_QK32 * b));
            __m256i d[4];
            FX_UNROLL
            for (int j = 0; j < 4; j++)
                d[j] = b32_prod(is_signed, aw[j], w[j], xv, ones);
            __m128i p = b32_sum4(is_signed, d, ones);
            /* nc and dx broadcast straight from memory; nc is a multiple
             * of 128, so the arithmetic shifts divide exactly */
            const __m128i nc = _mm_castps_si128(
                _mm_broadcast_ss((const float *)(const void *)(xr[i] + k + 4 * b)));
            const float *dx = (const float *)(const void *)(xr[i] + k + 4 * nb + 4 * b);
            if (T == FX_WTYPE_Q4_0) p = _mm_add_epi32(p, _mm_srai_epi32(nc, 4));
            if (T == FX_WTYPE_Q5_0) p = _mm_add_epi32(p, _mm_srai_epi32(nc, 3));
            if (has_min) {
                const __m256 s = _mm256_mul_ps(dm, _mm256_broadcast_ss(dx));
                acc[i] = _mm_fmadd_ps(_mm256_castps256_ps128(s), _mm_cvtepi32_ps(p), acc[i]);
                acc[i] = _mm_fmadd_ps(_mm_xor_ps(_mm256_extractf128_ps(s, 1), neg),
                                      _mm_cvtepi32_ps(_mm_srai_epi32(nc, 7)), acc[i]);
            } else {
                acc[i] = _mm_fmadd_ps(_mm_mul_ps(dw, _mm_broadcast_ss(dx)),
                                      _mm_cvtepi32_ps(p), acc[i]);
            }
        }
    }
    FX_UNROLL
    for (int i = 0; i < MR; i++) fx_qavx2_store4(yr[i], acc[i], nr);
}

/* The 8 f16 at p[0..7] + off as a ymm of floats (packed as f16x4_at). */
FX_ALWAYS_INLINE FX_AVX2 __m256 f16x8_at(const uint8_t *const *p, size_t off) {
    uint64_t v[2] = {0, 0};
    FX_UNROLL
    for (int j = 0; j < 8; j++) v[j / 4] |= u16_at(p[j] + off) << 16 * (j % 4);
    return _mm256_cvtph_ps(_mm_set_epi64x((long long)v[1], (long long)v[0]));
}

/* One x row against 8 weight rows (nr < 8 real rows repeat the last
 * one), tile32's arithmetic with 8 rows a ymm. Why: a tile's
 * accumulators are one chain of fmas through the blocks (the contract),
 * and with one x row and 4 rows that chain's latency, 1 or 2 fmas a
 * block of 32, bounded the loop; 8 rows halve it per row. */
FX_ALWAYS_INLINE FX_AVX2 void tile32_r8(const fx_wtype T, const fx_mm_job *job,
                                        size_t n, size_t nr,
                                        const uint8_t *const *xr,
                                        float *const *yr) {
    const size_t k = job->k, nb = k / FX_QK32, bb = b32_bytes(T);
    const bool has_min = T == FX_WTYPE_Q4_1 || T == FX_WTYPE_Q5_1;
    const bool is_signed = T == FX_WTYPE_IQ4_NL;
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i kv = is_signed ? _mm256_broadcastsi128_si256(_mm_loadu_si128(
                                       (const __m128i *)(const void *)fx_iq4nl_values))
                                 : _mm256_setzero_si256();
    const __m256 neg = _mm256_set1_ps(-0.0f);
    const uint8_t *rw[8];
    for (size_t j = 0; j < 8; j++)
        rw[j] = job->w + (n + min_sz(j, nr - 1)) * job->row_bytes;
    __m256 acc = _mm256_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        const uint8_t *blk[8];
        const __m256i xv = _mm256_loadu_si256(
            (const __m256i *)(const void *)(xr[0] + FX_QK32 * b));
        __m256i d[8];
        FX_UNROLL
        for (int j = 0; j < 8; j++) {
            blk[j] = rw[j] + b * bb;
            _mm_prefetch((const char *)blk[j] + FX_PF_DIST, _MM_HINT_T0);
            const __m256i w = b32_quants(T, blk[j], kv);
            d[j] = b32_prod(is_signed, _mm256_abs_epi8(w), w, xv, ones);
        }
        /* [rows 0..3 | rows 4..7] */
        const __m128i lo = b32_sum4(is_signed, d, ones);
        const __m128i hi = b32_sum4(is_signed, d + 4, ones);
        __m256i p = _mm256_setr_m128i(lo, hi);
        const __m256i nc = _mm256_castps_si256(
            _mm256_broadcast_ss((const float *)(const void *)(xr[0] + k + 4 * b)));
        const __m256 dx = _mm256_broadcast_ss(
            (const float *)(const void *)(xr[0] + k + 4 * nb + 4 * b));
        if (T == FX_WTYPE_Q4_0) p = _mm256_add_epi32(p, _mm256_srai_epi32(nc, 4));
        if (T == FX_WTYPE_Q5_0) p = _mm256_add_epi32(p, _mm256_srai_epi32(nc, 3));
        acc = _mm256_fmadd_ps(_mm256_mul_ps(f16x8_at(blk, 0), dx),
                              _mm256_cvtepi32_ps(p), acc);
        if (has_min)
            acc = _mm256_fmadd_ps(_mm256_xor_ps(_mm256_mul_ps(f16x8_at(blk, 2), dx), neg),
                                  _mm256_cvtepi32_ps(_mm256_srai_epi32(nc, 7)), acc);
    }
    if (nr == 8) {
        _mm256_storeu_ps(yr[0], acc);
    } else {
        float tmp[8];
        _mm256_storeu_ps(tmp, acc);
        memcpy(yr[0], tmp, nr * sizeof(float));
    }
}

#define FX_TILE32_MR(T, NAME, MR)                                            \
    static FX_AVX2 void NAME##_##MR(const fx_mm_job *job, size_t n,          \
                                    size_t nr, const uint8_t *const *xr,     \
                                    float *const *yr) {                      \
        tile32(T, MR, job, n, nr, xr, yr);                                   \
    }
#define FX_TILE32(T, NAME)                                                   \
    static FX_AVX2 void NAME##_1(const fx_mm_job *job, size_t n, size_t nr,  \
                                 const uint8_t *const *xr,                   \
                                 float *const *yr) {                         \
        tile32_r8(T, job, n, nr, xr, yr);                                    \
    }                                                                        \
    FX_TILE32_MR(T, NAME, 2)                                                 \
    FX_TILE32_MR(T, NAME, 3) FX_TILE32_MR(T, NAME, 4)                        \
    static void NAME##_range(const fx_mm_job *job, size_t n0, size_t n1,     \
                             float *scratch) {                               \
        static const fx_qtile_fn tiles[4] = {NAME##_1, NAME##_2, NAME##_3,   \
                                             NAME##_4};                      \
        (void)scratch;                                                       \
        fx_qavx2_rows_range(job, n0, n1, tiles, 8);                          \
    }
FX_TILE32(FX_WTYPE_Q4_0, q4_0)
FX_TILE32(FX_WTYPE_Q4_1, q4_1)
FX_TILE32(FX_WTYPE_Q5_0, q5_0)
FX_TILE32(FX_WTYPE_Q5_1, q5_1)
FX_TILE32(FX_WTYPE_IQ4_NL, iq4_nl)

fx_mm_range_fn fx_qmm_avx2(fx_wtype t) {
    switch (t) {
    case FX_WTYPE_Q4_0: return q4_0_range;
    case FX_WTYPE_Q4_1: return q4_1_range;
    case FX_WTYPE_Q5_0: return q5_0_range;
    case FX_WTYPE_Q5_1: return q5_1_range;
    case FX_WTYPE_IQ4_NL: return iq4_nl_range;
    default: return fx_qmm_avx2_k(t);
    }
}

#else /* not x86-64 GCC/Clang */

fx_xq_fn fx_xq256_avx2(void) { return NULL; }
fx_mm_range_fn fx_qmm_avx2(fx_wtype t) {
    (void)t;
    return NULL;
}

#endif
