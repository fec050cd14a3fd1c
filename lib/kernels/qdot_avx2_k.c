/*
 * AVX2 (+FMA, F16C) matmul of the K-quants (Q2_K to Q6_K) and IQ4_XS on
 * FX_XQ_256 activations, in quants.h's order: per super-block of 256 the
 * integers P (and M) exact, then one fma (two with a min) in super-block
 * order, for 4 weight rows at once in one xmm.
 *
 * The integer work per super-block and row: the quants as 8 vectors of 32
 * unsigned bytes ("units", elements 32u..32u+31), each maddubs'd against
 * the x quants (pairs: at most 2 * 63 * 127, no saturation) and madd'd
 * with the sub-block scales as int16 (one scale a unit for sub-blocks of
 * 32; for sub-blocks of 16, one per 128-bit lane), summed into 8 int32
 * lanes. Offsets and mins come from the x row's sums of 16 (bsum): the
 * quants' offset c times sum_j sc_j bsum_j is subtracted (Q3_K: q + 4,
 * Q6_K: q + 32 are the unsigned bytes), and M = sum_j mn_j bsum_j.
 * IQ4_XS's signed levels go through maddubs as |w| times qx with w's sign.
 */
#include "qdot_avx2.h"

#include <stddef.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#define FX_UNROLL _Pragma("GCC unroll 8")
#ifndef FX_PF_DIST
#define FX_PF_DIST 2048
#endif

/* Marks v as live in a register here (matmul_q8.c says why: GCC otherwise
 * reassociates the exact integer sums into trees and spills them). */
#define FX_PIN(v) __asm__("" : "+x"(v))

static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

FX_ALWAYS_INLINE size_t kq_bytes(fx_wtype T) {
    switch (T) {
    case FX_WTYPE_Q2_K: return sizeof(fx_block_q2_K);
    case FX_WTYPE_Q3_K: return sizeof(fx_block_q3_K);
    case FX_WTYPE_Q5_K: return sizeof(fx_block_q5_K);
    case FX_WTYPE_Q6_K: return sizeof(fx_block_q6_K);
    case FX_WTYPE_IQ4_XS: return sizeof(fx_block_iq4_xs);
    default: return sizeof(fx_block_q4_K);
    }
}

FX_ALWAYS_INLINE bool kq_has_min(fx_wtype T) {
    return T == FX_WTYPE_Q2_K || T == FX_WTYPE_Q4_K || T == FX_WTYPE_Q5_K;
}

/* Where the f16 scale (and min) of a block are. */
FX_ALWAYS_INLINE size_t kq_d_off(fx_wtype T) {
    switch (T) {
    case FX_WTYPE_Q2_K: return offsetof(fx_block_q2_K, d);
    case FX_WTYPE_Q3_K: return offsetof(fx_block_q3_K, d);
    case FX_WTYPE_Q6_K: return offsetof(fx_block_q6_K, d);
    default: return 0; /* Q4_K, Q5_K (dmin at 2), IQ4_XS */
    }
}

/* One weight row's super-block with its scales decoded; the quants are
 * loaded unit by unit (kq_unit): as arrays of vectors GCC kept them on
 * the stack. */
typedef struct kq_block {
    __m256i s0, s1;  /* int16 scale sources for the unit shuffles */
    __m256i corr;    /* int16 times bsum: mins (M) or scales (offset) */
} kq_block;

FX_ALWAYS_INLINE FX_AVX2 __m256i ld32(const uint8_t *p) {
    return _mm256_loadu_si256((const __m256i *)(const void *)p);
}

/* The 8 6-bit scales and mins of Q4_K and Q5_K (ggml's get_scale_min_k4
 * for all j at once): bytes 0..3 and 4..7 hold j < 4 in their low 6 bits,
 * bytes 8..11 the low 4 bits of j >= 4, whose 2 high bits are the top
 * bits of bytes 0..3 (scales) and 4..7 (mins). */
FX_ALWAYS_INLINE FX_AVX2 void k4_scales(const uint8_t *s, __m128i *sc8,
                                        __m128i *mn8) {
    uint32_t a[3];
    memcpy(a, s, sizeof a);
    const uint32_t sc_lo = a[0] & 0x3f3f3f3fu, mn_lo = a[1] & 0x3f3f3f3fu;
    const uint32_t sc_hi = (a[2] & 0x0f0f0f0fu) | ((a[0] >> 2) & 0x30303030u);
    const uint32_t mn_hi =
        ((a[2] >> 4) & 0x0f0f0f0fu) | ((a[1] >> 2) & 0x30303030u);
    *sc8 = _mm_setr_epi32((int)sc_lo, (int)sc_hi, 0, 0);
    *mn8 = _mm_setr_epi32((int)mn_lo, (int)mn_hi, 0, 0);
}

/* Q3_K's 16 6-bit scales minus 32, as ggml's dequantize_row_q3_K unpacks
 * them: low 4 bits from the nibbles of bytes 0..7, high 2 from bytes
 * 8..11. */
FX_ALWAYS_INLINE FX_AVX2 __m128i k3_scales(const uint8_t *s) {
    uint32_t a[3];
    memcpy(a, s, sizeof a);
    const uint32_t m2 = 0x03030303u, m4 = 0x0f0f0f0fu;
    const uint32_t v0 = (a[0] & m4) | ((a[2] & m2) << 4);
    const uint32_t v1 = (a[1] & m4) | (((a[2] >> 2) & m2) << 4);
    const uint32_t v2 = ((a[0] >> 4) & m4) | (((a[2] >> 4) & m2) << 4);
    const uint32_t v3 = ((a[1] >> 4) & m4) | (((a[2] >> 6) & m2) << 4);
    return _mm_sub_epi8(_mm_setr_epi32((int)v0, (int)v1, (int)v2, (int)v3),
                        _mm_set1_epi8(32));
}

/* IQ4_XS's 8 scales ls - 32: low 4 bits the nibbles of scales_l in order,
 * high 2 bits the bit pairs of scales_h, each spread to a byte. */
FX_ALWAYS_INLINE FX_AVX2 __m128i xs_scales(const uint8_t *blk) {
    uint16_t hs;
    uint32_t ls;
    memcpy(&hs, blk + offsetof(fx_block_iq4_xs, scales_h), sizeof hs);
    memcpy(&ls, blk + offsetof(fx_block_iq4_xs, scales_l), sizeof ls);
    uint64_t lo = ls;
    lo = (lo | lo << 16) & 0x0000ffff0000ffffull;
    lo = (lo | lo << 8) & 0x00ff00ff00ff00ffull;
    lo = (lo | lo << 4) & 0x0f0f0f0f0f0f0f0full;
    uint64_t hi = (uint64_t)(hs & 0xff) | (uint64_t)(hs >> 8) << 32;
    hi = (hi | hi << 12) & 0x000f000f000f000full;
    hi = (hi | hi << 6) & 0x0303030303030303ull;
    return _mm_sub_epi8(_mm_set_epi64x(0, (long long)(lo | hi << 4)),
                        _mm_set1_epi8(32));
}

/* Fills the fields type T uses (the others are never read). */
FX_ALWAYS_INLINE FX_AVX2 void kq_load(fx_wtype T, const uint8_t *blk,
                                      kq_block *B) {
    switch (T) {
    case FX_WTYPE_Q2_K: {
        const __m128i sb = _mm_loadu_si128((const __m128i *)(const void *)blk);
        const __m128i m4 = _mm_set1_epi8(0x0f);
        const __m256i sc = _mm256_cvtepu8_epi16(_mm_and_si128(sb, m4));
        B->s0 = _mm256_permute4x64_epi64(sc, 0x44);
        B->s1 = _mm256_permute4x64_epi64(sc, 0xee);
        B->corr = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sb, 4), m4));
        break;
    }
    case FX_WTYPE_Q3_K: {
        const __m256i sc = _mm256_cvtepi8_epi16(
            k3_scales(blk + offsetof(fx_block_q3_K, scales)));
        B->s0 = _mm256_permute4x64_epi64(sc, 0x44);
        B->s1 = _mm256_permute4x64_epi64(sc, 0xee);
        B->corr = sc;
        break;
    }
    case FX_WTYPE_Q6_K: {
        const __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128(
            (const __m128i *)(const void *)(blk + offsetof(fx_block_q6_K, scales))));
        B->s0 = _mm256_permute4x64_epi64(sc, 0x44);
        B->s1 = _mm256_permute4x64_epi64(sc, 0xee);
        B->corr = sc;
        break;
    }
    case FX_WTYPE_IQ4_XS:
        B->s0 = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(xs_scales(blk)));
        break;
    default: { /* Q4_K, Q5_K */
        __m128i sc8, mn8;
        k4_scales(blk + offsetof(fx_block_q4_K, scales), &sc8, &mn8);
        B->s0 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sc8));
        /* each min twice: the madd with the 16 bsums of 16 gives the 8
         * sub-blocks of 32 */
        B->corr = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn8, mn8));
        break;
    }
    }
}

/* Unit u's 32 quants as unsigned bytes (IQ4_XS: the signed levels). */
FX_ALWAYS_INLINE FX_AVX2 __m256i kq_unit(fx_wtype T, const uint8_t *blk, int u,
                                         __m256i kv) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    switch (T) {
    case FX_WTYPE_Q2_K:
        return _mm256_and_si256(
            shl16(ld32(blk + offsetof(fx_block_q2_K, qs) + 32 * (u / 4)), -2 * (u % 4)),
            _mm256_set1_epi8(3));
    case FX_WTYPE_Q3_K: /* q + 4 = low 2 bits | hmask bit u as 4 */
        return _mm256_or_si256(
            _mm256_and_si256(
                shl16(ld32(blk + offsetof(fx_block_q3_K, qs) + 32 * (u / 4)), -2 * (u % 4)),
                _mm256_set1_epi8(3)),
            _mm256_and_si256(shl16(ld32(blk), 2 - u), _mm256_set1_epi8(4)));
    case FX_WTYPE_Q6_K: { /* q + 32: ql nibble | 2 qh bits as 0x30 */
        const int s = u % 4;
        const __m256i ql = ld32(blk + 64 * (u / 4) + 32 * (s & 1));
        const __m256i qh = ld32(blk + offsetof(fx_block_q6_K, qh) + 32 * (u / 4));
        const __m256i lo = _mm256_and_si256(s < 2 ? ql : _mm256_srli_epi16(ql, 4), m4);
        return _mm256_or_si256(
            lo, _mm256_and_si256(shl16(qh, 4 - 2 * s), _mm256_set1_epi8(0x30)));
    }
    case FX_WTYPE_IQ4_XS: {
        const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128(
            (const __m128i *)(const void *)(blk + offsetof(fx_block_iq4_xs, qs) + 16 * u)));
        return _mm256_shuffle_epi8(
            kv, _mm256_and_si256(
                    _mm256_srlv_epi32(b, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)), m4));
    }
    default: { /* Q4_K, Q5_K: unit 2c low nibbles of the quants' 32c.., 2c + 1 high */
        const bool q5 = T == FX_WTYPE_Q5_K;
        const __m256i ql = ld32(blk + (q5 ? offsetof(fx_block_q5_K, qs)
                                          : offsetof(fx_block_q4_K, qs)) + 32 * (u / 2));
        const __m256i lo = _mm256_and_si256(u % 2 ? _mm256_srli_epi16(ql, 4) : ql, m4);
        if (!q5) return lo;
        return _mm256_or_si256(
            lo, _mm256_and_si256(shl16(ld32(blk + offsetof(fx_block_q5_K, qh)), 4 - u),
                                 _mm256_set1_epi8(0x10)));
    }
    }
}

/* int16 control bytes picking element e of each 128-bit lane, lane 0 e0,
 * lane 1 e1. */
FX_ALWAYS_INLINE FX_AVX2 __m256i pick16(int e0, int e1) {
    return _mm256_setr_m128i(_mm_set1_epi16((short)(2 * e0 | (2 * e0 + 1) << 8)),
                             _mm_set1_epi16((short)(2 * e1 | (2 * e1 + 1) << 8)));
}

/* Unit u's scales as 16 int16: one sub-block of 32 (the same 16 times) or
 * two of 16 (sub-block 2u in the low lane, 2u + 1 in the high). */
FX_ALWAYS_INLINE FX_AVX2 __m256i kq_scale(fx_wtype T, const kq_block *B, int u) {
    switch (T) {
    case FX_WTYPE_Q2_K:
    case FX_WTYPE_Q3_K:
    case FX_WTYPE_Q6_K:
        return _mm256_shuffle_epi8(u < 4 ? B->s0 : B->s1,
                                   pick16((2 * u) % 8, (2 * u + 1) % 8));
    default: return _mm256_shuffle_epi8(B->s0, pick16(u, u));
    }
}

/* One weight row's super-block against MR x rows: P[i] and M[i] as 8
 * int32 lanes whose sums are P and M. xs: the x quants of the super-block,
 * bs: its 16 bsums. */
FX_ALWAYS_INLINE FX_AVX2 void kq_dot(fx_wtype T, int MR, const uint8_t *blk,
                                     const uint8_t *const *xs,
                                     const uint8_t *const *bs, __m256i kv,
                                     __m256i *P, __m256i *M) {
    kq_block B;
    kq_load(T, blk, &B);
    FX_UNROLL
    for (int i = 0; i < MR; i++) P[i] = _mm256_setzero_si256();
    FX_UNROLL
    for (int u = 0; u < 8; u++) {
        const __m256i w = kq_unit(T, blk, u, kv);
        const __m256i sc = kq_scale(T, &B, u);
        const __m256i aw = T == FX_WTYPE_IQ4_XS ? _mm256_abs_epi8(w) : w;
        FX_UNROLL
        for (int i = 0; i < MR; i++) {
            __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)(xs[i] + 32 * u));
            if (T == FX_WTYPE_IQ4_XS) x = _mm256_sign_epi8(x, w);
            P[i] = _mm256_add_epi32(
                P[i], _mm256_madd_epi16(_mm256_maddubs_epi16(aw, x), sc));
            FX_PIN(P[i]);
        }
    }
    if (T == FX_WTYPE_IQ4_XS) return;
    FX_UNROLL
    for (int i = 0; i < MR; i++) {
        const __m256i c = _mm256_madd_epi16(
            B.corr, _mm256_loadu_si256((const __m256i *)(const void *)bs[i]));
        if (kq_has_min(T)) M[i] = c;
        else if (T == FX_WTYPE_Q3_K) P[i] = _mm256_sub_epi32(P[i], _mm256_slli_epi32(c, 2));
        else P[i] = _mm256_sub_epi32(P[i], _mm256_slli_epi32(c, 5));
    }
}

FX_ALWAYS_INLINE __m128i f16x4(const uint16_t *h) {
    return _mm_setr_epi16((short)h[0], (short)h[1], (short)h[2], (short)h[3],
                          0, 0, 0, 0);
}

/* MR x rows against 4 weight rows from row n (nr < 4 real rows repeat the
 * last one; its lanes are not stored). FX_XQ_256 row: quants at 0, bsum
 * at k, d at k + k / 8 (quants.h). */
FX_ALWAYS_INLINE FX_AVX2 void ktile(const fx_wtype T, const int MR,
                                    const fx_mm_job *job, size_t n, size_t nr,
                                    const uint8_t *const *xr, float *const *yr) {
    const size_t k = job->k, nsb = k / FX_QK_K, bb = kq_bytes(T);
    const size_t doff = kq_d_off(T);
    const bool has_min = kq_has_min(T);
    const __m256i kv = T == FX_WTYPE_IQ4_XS
                           ? _mm256_broadcastsi128_si256(_mm_loadu_si128(
                                 (const __m128i *)(const void *)fx_iq4nl_values))
                           : _mm256_setzero_si256();
    const __m128 neg = _mm_set1_ps(-0.0f);
    const uint8_t *rw[4];
    for (size_t j = 0; j < 4; j++)
        rw[j] = job->w + (n + min_sz(j, nr - 1)) * job->row_bytes;
    __m128 acc[4];
    FX_UNROLL
    for (int i = 0; i < MR; i++) acc[i] = _mm_setzero_ps();
    for (size_t sb = 0; sb < nsb; sb++) {
        const uint8_t *xs[4], *bs[4];
        FX_UNROLL
        for (int i = 0; i < MR; i++) {
            xs[i] = xr[i] + sb * FX_QK_K;
            bs[i] = xr[i] + k + sb * (FX_QK_K / 8);
        }
        __m256i P[4][4], M[4][4];
        uint16_t dh[4], mh[4] = {0, 0, 0, 0};
        FX_UNROLL
        for (int j = 0; j < 4; j++) {
            const uint8_t *blk = rw[j] + sb * bb;
            for (size_t o = 0; o < bb; o += 64)
                _mm_prefetch((const char *)blk + FX_PF_DIST + o, _MM_HINT_T0);
            memcpy(&dh[j], blk + doff, sizeof dh[j]);
            if (has_min) memcpy(&mh[j], blk + doff + 2, sizeof mh[j]);
            kq_dot(T, MR, blk, xs, bs, kv, P[j], M[j]);
        }
        const __m128 dw = _mm_cvtph_ps(f16x4(dh));
        const __m128 mw = _mm_cvtph_ps(f16x4(mh));
        FX_UNROLL
        for (int i = 0; i < MR; i++) {
            float dx;
            memcpy(&dx, xr[i] + k + k / 8 + 4 * sb, sizeof dx);
            const __m128 vdx = _mm_set1_ps(dx);
            const __m128i p = sum4rows_hadd(P[0][i], P[1][i], P[2][i], P[3][i]);
            acc[i] = _mm_fmadd_ps(_mm_mul_ps(dw, vdx), _mm_cvtepi32_ps(p), acc[i]);
            if (has_min) {
                const __m128i mm = sum4rows_hadd(M[0][i], M[1][i], M[2][i], M[3][i]);
                acc[i] = _mm_fmadd_ps(_mm_xor_ps(_mm_mul_ps(mw, vdx), neg),
                                      _mm_cvtepi32_ps(mm), acc[i]);
            }
        }
    }
    FX_UNROLL
    for (int i = 0; i < MR; i++) fx_qavx2_store4(yr[i], acc[i], nr);
}

#define FX_KTILE_MR(T, NAME, MR)                                             \
    static FX_AVX2 void NAME##_##MR(const fx_mm_job *job, size_t n,          \
                                    size_t nr, const uint8_t *const *xr,     \
                                    float *const *yr) {                      \
        ktile(T, MR, job, n, nr, xr, yr);                                    \
    }
#define FX_KTILE(T, NAME)                                                    \
    FX_KTILE_MR(T, NAME, 1) FX_KTILE_MR(T, NAME, 2)                          \
    FX_KTILE_MR(T, NAME, 3) FX_KTILE_MR(T, NAME, 4)                          \
    static void NAME##_range(const fx_mm_job *job, size_t n0, size_t n1,     \
                             float *scratch) {                               \
        static const fx_qtile_fn tiles[4] = {NAME##_1, NAME##_2, NAME##_3,   \
                                             NAME##_4};                      \
        (void)scratch;                                                       \
        fx_qavx2_rows_range(job, n0, n1, tiles, 4);                          \
    }
FX_KTILE(FX_WTYPE_Q2_K, q2_K)
FX_KTILE(FX_WTYPE_Q3_K, q3_K)
FX_KTILE(FX_WTYPE_Q4_K, q4_K)
FX_KTILE(FX_WTYPE_Q5_K, q5_K)
FX_KTILE(FX_WTYPE_Q6_K, q6_K)
FX_KTILE(FX_WTYPE_IQ4_XS, iq4_xs)

fx_mm_range_fn fx_qmm_avx2_k(fx_wtype t) {
    switch (t) {
    case FX_WTYPE_Q2_K: return q2_K_range;
    case FX_WTYPE_Q3_K: return q3_K_range;
    case FX_WTYPE_Q4_K: return q4_K_range;
    case FX_WTYPE_Q5_K: return q5_K_range;
    case FX_WTYPE_Q6_K: return q6_K_range;
    case FX_WTYPE_IQ4_XS: return iq4_xs_range;
    default: return NULL;
    }
}

#else /* not x86-64 GCC/Clang */

fx_mm_range_fn fx_qmm_avx2_k(fx_wtype t) {
    (void)t;
    return NULL;
}

#endif
