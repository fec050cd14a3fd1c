/*
 * Private to the AVX2 kernels of 16-row groups (quants.h): qdot_avx2_r16.c
 * (up to 4 x rows a pass over the groups as they are) and
 * qdot_avx2_r16_wide.c (many x rows: each block unpacked once for all of
 * them). A group's 64-byte line holds one dword of each of 16 rows; its
 * 32-byte halves are rows 0-7 and 8-15, a 32-bit lane each.
 */
#ifndef FX_KERNELS_QDOT_AVX2_R16_H
#define FX_KERNELS_QDOT_AVX2_R16_H

#include "qdot_avx2.h"

#include <stddef.h>
#include <string.h>

/* The group at column n (its bytes g) against every x row of job, into
 * its y: the kernel for many x rows of t | FX_WTYPE_QR16
 * (qdot_avx2_r16_wide.c), or NULL. */
typedef void (*fx_r16_wide_fn)(const uint8_t *g, const fx_mm_job *job,
                               size_t n, float *scratch);
fx_r16_wide_fn fx_r16_avx2_wide(fx_wtype t);

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#define FX_R16_UNROLL _Pragma("GCC unroll 8")

/* Marks v as live in a register here: GCC otherwise turns the chains of
 * exact int16 sums into trees whose leaves it spills (qdot_avx2_k.c). */
#define FX_R16_PIN(v) __asm__("" : "+x"(v))

/* Half h (rows 8h..8h+7) of the group's line t at field offset off. */
FX_ALWAYS_INLINE FX_AVX2 __m256i half_line(const uint8_t *g, size_t off, int t,
                                           int h) {
    return _mm256_loadu_si256(
        (const __m256i *)(const void *)(g + 16 * off + 64 * (size_t)t + 32 * h));
}

FX_ALWAYS_INLINE FX_AVX2 __m256i xdw(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm256_set1_epi32(v);
}

FX_ALWAYS_INLINE FX_AVX2 __m256i c8(unsigned v) {
    return _mm256_set1_epi32((int)v);
}

/* vpshufb control: in each dword d, bytes (4d + b0, b1, b2, b3); 0x80 a
 * zero byte. */
FX_ALWAYS_INLINE FX_AVX2 __m256i byte_pick(int b0, int b1, int b2, int b3) {
    const unsigned a = (unsigned)b0 | (unsigned)b1 << 8 | (unsigned)b2 << 16 |
                       (unsigned)b3 << 24;
    const unsigned step = (b0 < 0x80 ? 1u : 0) | (b1 < 0x80 ? 1u << 8 : 0) |
                          (b2 < 0x80 ? 1u << 16 : 0) | (b3 < 0x80 ? 1u << 24 : 0);
    const __m128i l = _mm_setr_epi32((int)a, (int)(a + 4 * step),
                                     (int)(a + 8 * step), (int)(a + 12 * step));
    return _mm256_setr_m128i(l, l);
}

/* The f16 in the low (hi: high) half of each of 8 dwords, as f32. */
FX_ALWAYS_INLINE FX_AVX2 __m256 h2f(__m256i v, bool hi) {
    const __m256i w = hi ? _mm256_srli_epi32(v, 16)
                         : _mm256_and_si256(v, c8(0xffffu));
    return _mm256_cvtph_ps(_mm_packus_epi32(_mm256_castsi256_si128(w),
                                            _mm256_extracti128_si256(w, 1)));
}

FX_ALWAYS_INLINE float f32_at(const uint8_t *p) {
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Q4_K and Q5_K blocks (five: Q5_K). A block is d, dmin (dword 0), 12
 * bytes of 6-bit scales and mins (dwords 1-3, ggml's get_scale_min_k4),
 * Q5_K's qh[32], and qs, whose byte 32c + l holds element 64c + l (low
 * nibble) and 64c + 32 + l (high): sub-blocks 2c and 2c + 1; Q5_K's bit
 * 4 of them is bit 2c (2c + 1) of qh byte l. The decoders below take the
 * block at field offset off of a group, half h. */

/* Line t of sub-blocks 2c, 2c + 1: their quants in bytes, *lo of 2c and
 * *hi of 2c + 1 (elements 64c + 4t.. and 64c + 32 + 4t..). */
FX_ALWAYS_INLINE FX_AVX2 void k45_quants(const bool five, const uint8_t *g,
                                         size_t off, int c, int t, int h,
                                         __m256i *lo, __m256i *hi) {
    const __m256i m4 = c8(0x0f0f0f0fu), b4 = c8(0x10101010u);
    const size_t qs = five ? 48 : 16;
    const __m256i v = half_line(g, off + qs + 32 * (size_t)c, t, h);
    __m256i vl = _mm256_and_si256(v, m4);
    __m256i vh = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    if (five) {
        const __m256i qh = half_line(g, off + 16, t, h);
        vl = _mm256_or_si256(vl, _mm256_and_si256(shl16(qh, 4 - 2 * c), b4));
        vh = _mm256_or_si256(vh, _mm256_and_si256(shl16(qh, 3 - 2 * c), b4));
    }
    *lo = vl;
    *hi = vh;
}

/* The scales of sub-blocks 2c (*sl) and 2c + 1 (*sh), each in both int16
 * of every dword (against a vpmaddubsw sum's pairs). */
FX_ALWAYS_INLINE FX_AVX2 void k45_scales(const uint8_t *g, size_t off, int c,
                                         int h, __m256i *sl, __m256i *sh) {
    const __m256i m4 = c8(0x0f0f0f0fu), m6 = c8(0x3f3f3f3fu),
                  m2 = c8(0x30303030u);
    const __m256i h1 = half_line(g, off, 1, h);
    const __m256i s =
        c < 2 ? _mm256_and_si256(h1, m6)
              : _mm256_or_si256(_mm256_and_si256(half_line(g, off, 3, h), m4),
                                _mm256_and_si256(_mm256_srli_epi32(h1, 2), m2));
    const int j = 2 * c % 4;
    *sl = _mm256_shuffle_epi8(s, byte_pick(j, 0x80, j, 0x80));
    *sh = _mm256_shuffle_epi8(s, byte_pick(j + 1, 0x80, j + 1, 0x80));
}

/* The mins of sub-blocks 2i and 2i + 1 as an int16 pair in each dword,
 * against their sums of 32 (FX_XQ_256's bsum32, fx_xq256_bsum32_at). */
FX_ALWAYS_INLINE FX_AVX2 __m256i k45_min_pair(const uint8_t *g, size_t off,
                                              int i, int h) {
    const __m256i m4 = c8(0x0f0f0f0fu), m6 = c8(0x3f3f3f3fu),
                  m2 = c8(0x30303030u);
    const __m256i h2 = half_line(g, off, 2, h), h3 = half_line(g, off, 3, h);
    const __m256i mins =
        i < 2 ? _mm256_and_si256(h2, m6)
              : _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(h3, 4), m4),
                                _mm256_and_si256(_mm256_srli_epi32(h2, 2), m2));
    const int j = 2 * i % 4;
    return _mm256_shuffle_epi8(mins, byte_pick(j, 0x80, j + 1, 0x80));
}

/* Q6_K blocks in groups (quants.h): dword t of the 64 bytes i < 3 is element
 * dword 16 i + t in its low 6 bits, and element dword 48 + t's bits 2i,
 * 2i + 1 on top; int8 scales at 192 (dwords 48-51), d the unit's tail.
 * Sub-block j (16 elements) = element dword / 4: lines 4j'..4j'+3 of
 * part i give sub-block 4i + j'. q - 32 the integer. */
FX_ALWAYS_INLINE FX_AVX2 __m256i q6k_quants(const uint8_t *g, size_t off,
                                            int i, int t, int h) {
    const __m256i m6 = c8(0x3f3f3f3fu);
    if (i < 3) return _mm256_and_si256(half_line(g, off + 64 * (size_t)i, t, h), m6);
    const __m256i a = half_line(g, off, t, h), bq = half_line(g, off + 64, t, h);
    const __m256i c = half_line(g, off + 128, t, h);
    return _mm256_or_si256(
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 6), c8(0x03030303u)),
                        _mm256_and_si256(_mm256_srli_epi16(bq, 4), c8(0x0c0c0c0cu))),
        _mm256_and_si256(_mm256_srli_epi16(c, 2), c8(0x30303030u)));
}

/* Scale of sub-block 4i + jj (byte jj of the block's scale dword i, sd),
 * sign-extended into both int16 of each dword. */
FX_ALWAYS_INLINE FX_AVX2 __m256i q6k_scale(__m256i sd, int jj) {
    return _mm256_srai_epi16(
        _mm256_shuffle_epi8(sd, byte_pick(0x80, jj, 0x80, jj)), 8);
}

/* Scales of sub-blocks 4i + 2p and 4i + 2p + 1 as an int16 pair in each
 * dword, against the bsums of 16 (the offset, 32 sum_j sc_j bsum_j). */
FX_ALWAYS_INLINE FX_AVX2 __m256i q6k_scale_pair(__m256i sd, int p) {
    return _mm256_srai_epi16(
        _mm256_shuffle_epi8(sd, byte_pick(0x80, 2 * p, 0x80, 2 * p + 1)), 8);
}


/* IQ4_XS blocks in groups: d and scales_h (dword 0), scales_l (dword 1),
 * then qs from byte 8: sub-block j (32 elements) is bytes 16j..16j+15,
 * element 32j + l (l < 16) the low nibble of byte 16j + l, 32j + 16 + l
 * the high, each an index into the signed levels kv (xs_lut). */
FX_ALWAYS_INLINE FX_AVX2 __m256i xs_lut(void) {
    return _mm256_broadcastsi128_si256(
        _mm_loadu_si128((const __m128i *)(const void *)fx_iq4nl_values));
}

/* Sub-block j's scale ls - 32 (6 bits: 4 from scales_l, 2 from
 * scales_h) in both int16 of each dword. */
FX_ALWAYS_INLINE FX_AVX2 __m256i xs_scale(const uint8_t *g, size_t off, int j,
                                          int h) {
    const __m256i lo4 = _mm256_and_si256(
        _mm256_srli_epi32(half_line(g, off, 1, h), 4 * j), c8(0x0f));
    const __m256i hi2 = _mm256_and_si256(
        _mm256_srli_epi32(half_line(g, off, 0, h), 16 + 2 * j), c8(0x03));
    const __m256i ls = _mm256_sub_epi32(
        _mm256_or_si256(lo4, _mm256_slli_epi32(hi2, 4)), c8(32));
    return _mm256_or_si256(_mm256_and_si256(ls, c8(0xffff)),
                           _mm256_slli_epi32(ls, 16));
}

/* Line i of sub-block j: the levels of elements 32j + 4i.. (*wl) and
 * 32j + 16 + 4i.. (*wh). */
FX_ALWAYS_INLINE FX_AVX2 void xs_levels(const uint8_t *g, size_t off, int j,
                                        int i, int h, __m256i lut,
                                        __m256i *wl, __m256i *wh) {
    const __m256i m4 = c8(0x0f0f0f0fu);
    const __m256i v = half_line(g, off + 8 + 16 * (size_t)j, i, h);
    *wl = _mm256_shuffle_epi8(lut, _mm256_and_si256(v, m4));
    *wh = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
}


/* Q4_0 units in groups: 8 blocks of 18 bytes (d, then qs: element l < 16
 * the low nibble of byte l, 16 + l the high), so block j starts at byte
 * 18 j: the even ones on a dword with their quants 2 bytes in, the odd
 * ones 2 bytes into a dword with their quants on the next. */
FX_ALWAYS_INLINE FX_AVX2 __m256 q40_d(const uint8_t *g, size_t off, int j,
                                      int h) {
    const int at = 18 * j;
    return h2f(half_line(g, off + (size_t)(at / 4 * 4), 0, h), at % 4 != 0);
}

/* Block j's qs bytes 4i..4i+3 (elements 4i.. low, 16 + 4i.. high). */
FX_ALWAYS_INLINE FX_AVX2 __m256i q40_quants(const uint8_t *g, size_t off,
                                            int j, int i, int h) {
    const int qa = 18 * j + 2;
    const size_t o = off + (size_t)((qa + 4 * i) / 4 * 4);
    return qa % 4 == 0 ? half_line(g, o, 0, h)
                       : _mm256_or_si256(
                             _mm256_srli_epi32(half_line(g, o, 0, h), 16),
                             _mm256_slli_epi32(half_line(g, o, 1, h), 16));
}


/* ---- The row steps: one x row's integer sums and a block's fmas, the
 * same in the 4-row kernels and the wide ones (their bits are these). */

/* Q4_K/Q5_K line t of sub-blocks 2c, 2c + 1 (quants vl, vh) against the
 * x row at x (its elements 64c + 4t..): into the int16 sums *lo, *hi,
 * which start = true begins. */
FX_ALWAYS_INLINE FX_AVX2 void k45_line(__m256i vl, __m256i vh,
                                       const uint8_t *x, bool start,
                                       __m256i *lo, __m256i *hi) {
    const __m256i pl = _mm256_maddubs_epi16(vl, xdw(x));
    const __m256i ph = _mm256_maddubs_epi16(vh, xdw(x + 32));
    *lo = start ? pl : _mm256_add_epi16(*lo, pl);
    *hi = start ? ph : _mm256_add_epi16(*hi, ph);
    FX_R16_PIN(*lo);
    FX_R16_PIN(*hi);
}

/* *P += the int16 sums against their sub-blocks' scales. A running sum:
 * as a tree, its leaves spill. */
FX_ALWAYS_INLINE FX_AVX2 void k45_scaled(__m256i lo, __m256i hi, __m256i sl,
                                         __m256i sh, __m256i *P) {
    *P = _mm256_add_epi32(*P, _mm256_add_epi32(_mm256_madd_epi16(lo, sl),
                                               _mm256_madd_epi16(hi, sh)));
    FX_R16_PIN(*P);
}

/* quants.h's two fmas of a block with a min. */
FX_ALWAYS_INLINE FX_AVX2 __m256 k45_fmas(__m256 acc, __m256 d, __m256 dmin,
                                         __m256i P, __m256i M, float dx) {
    const __m256 vdx = _mm256_set1_ps(dx);
    acc = _mm256_fmadd_ps(_mm256_mul_ps(d, vdx), _mm256_cvtepi32_ps(P), acc);
    return _mm256_fnmadd_ps(_mm256_mul_ps(dmin, vdx), _mm256_cvtepi32_ps(M),
                            acc);
}

/* Q6_K lines t, t + 1 (quants q0, q1) against the x row at x: two lines'
 * vpmaddubsw fit int16, four would not. */
FX_ALWAYS_INLINE FX_AVX2 void q6k_lines(__m256i q0, __m256i q1,
                                        const uint8_t *x, __m256i sc,
                                        __m256i *P) {
    const __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(q0, xdw(x)),
                                         _mm256_maddubs_epi16(q1, xdw(x + 4)));
    *P = _mm256_add_epi32(*P, _mm256_madd_epi16(s16, sc));
    FX_R16_PIN(*P);
}

/* Q6_K's block: P - 32 sum_j sc_j bsum_j (C the sum), one fma. */
FX_ALWAYS_INLINE FX_AVX2 __m256 q6k_fma(__m256 acc, __m256 d, __m256i P,
                                        __m256i C, float dx) {
    const __m256i p = _mm256_sub_epi32(P, _mm256_slli_epi32(C, 5));
    return _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(dx)),
                           _mm256_cvtepi32_ps(p), acc);
}

/* IQ4_XS line: levels wl, wh (al, ah their absolute values) against the
 * x row at x, each pair to int32 at once, times the sub-block's scale. */
FX_ALWAYS_INLINE FX_AVX2 void xs_line(__m256i al, __m256i wl, __m256i ah,
                                      __m256i wh, const uint8_t *x,
                                      __m256i sc, __m256i *P) {
    const __m256i pl = _mm256_maddubs_epi16(al, _mm256_sign_epi8(xdw(x), wl));
    const __m256i ph =
        _mm256_maddubs_epi16(ah, _mm256_sign_epi8(xdw(x + 16), wh));
    *P = _mm256_add_epi32(*P, _mm256_add_epi32(_mm256_madd_epi16(pl, sc),
                                               _mm256_madd_epi16(ph, sc)));
    FX_R16_PIN(*P);
}

/* Q4_0's block j of the unit at element b (lo[i], hi[i]: its nibbles)
 * against x row xq of FX_XQ_32 (nbk blocks), one fma into acc. */
FX_ALWAYS_INLINE FX_AVX2 __m256 q40_block(const __m256i *lo, const __m256i *hi,
                                          __m256 d, const uint8_t *xq,
                                          size_t k, size_t blk, __m256 acc) {
    const uint8_t *x = xq + 32 * blk;
    __m256i s16 = _mm256_setzero_si256();
    FX_R16_UNROLL
    for (int i = 0; i < 4; i++) {
        s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(lo[i], xdw(x + 4 * i)));
        s16 = _mm256_add_epi16(s16,
                               _mm256_maddubs_epi16(hi[i], xdw(x + 16 + 4 * i)));
        FX_R16_PIN(s16);
    }
    const __m256i p =
        _mm256_add_epi32(_mm256_madd_epi16(s16, _mm256_set1_epi16(1)),
                         _mm256_srai_epi32(xdw(xq + k + 4 * blk), 4));
    const __m256 dx = _mm256_set1_ps(f32_at(xq + k + k / 8 + 4 * blk));
    return _mm256_fmadd_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(p), acc);
}

#endif

#endif /* FX_KERNELS_QDOT_AVX2_R16_H */
