/*
 * Private to qdot_avx512*.c: the AVX-512 VNNI block-quantized matmul's
 * shared pieces (qdot_avx512.c says how the kernels work).
 *
 * A group is 16 weight rows, one per 32-bit lane. A block of the group is
 * "unpacked" into vectors whose lane l holds row l's data: q[s], quants
 * 4s..4s+3 of the block as unsigned bytes (the type's offset taken out
 * later, exactly); per sub-block scales as int32; f32 scales. Then each x
 * row's dword s, broadcast, meets q[s] in one vpdpbusd: 16 rows' exact
 * integer sums per instruction, and the float work (one or two fmas per
 * block, in block order: quants.h) is 16 rows per instruction too.
 */
#ifndef FX_KERNELS_QDOT_AVX512_H
#define FX_KERNELS_QDOT_AVX512_H

#include "quants.h"

#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>

#define FX_QV                                                                \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,"   \
                          "avx2,fma,f16c")))
#define FX_QINLINE static inline __attribute__((always_inline))
#define FX_QUNROLL _Pragma("GCC unroll 16")

/* The software prefetch: about how far ahead, bytes (0: none), and into
 * which cache. Without it a group's 16 streams (rows rb bytes apart) ran
 * at a fifth of a plain stream's bandwidth; into L1 (T0) at half of what
 * L2 (T1) gave; 16 KB ahead did as well as 32 or 64 KB or better. */
#ifndef FX_QPF_BYTES
#define FX_QPF_BYTES 16384
#endif
#ifndef FX_QPF_HINT
#define FX_QPF_HINT _MM_HINT_T1
#endif

/* x rows per pass over a group's blocks (accumulators in registers). */
#define FX_QXR 8

/* One group: row pointers by lane (rows past the group's end repeat its
 * last row, so nothing outside the matrix is read) and, for the fields a
 * gather reads, each lane's byte offset from lane 0's row. Or, for a
 * full group of a FX_WTYPE_QR16 matrix, r16: the group, already in the
 * lanes' order (quants.h), whose fields are loaded instead. */
typedef struct fx_qgrp {
    const uint8_t *rp[16];
    int32_t idx[16];
    const uint8_t *r16;
} fx_qgrp;

/* Where x row r's pieces are: quants, per-block integers (FX_XQ_32: nc;
 * FX_XQ_256: the int16 sums per 16), scales. */
typedef struct fx_qxrow {
    const uint8_t *q, *s, *d;
    const uint8_t *s32; /* FX_XQ_256's bsum32 (NULL on FX_XQ_32 rows) */
} fx_qxrow;

/* A 256-element block, unpacked. q[s] as above; sc[j] sub-block j's
 * scale; pw[p] and mw[p] int16 pairs for vpdpwssd against x's int16 sums
 * (dword p: the sums of 16-element pieces 2p and 2p+1): the scales, for
 * types whose quants carry an offset, and the mins; Q4_K's and Q5_K's
 * mw[0..3] pair two sub-blocks' mins against x's sums of 32 instead. */
typedef struct fx_qblk256 {
    __m512i q[64];
    __m512i sc[16];
    __m512i pw[8];
    __m512i mw[8];
    __m512 d, dm;
} fx_qblk256;

/* A 32-element block: q[8], the scale and (Q4_1, Q5_1) the min. */
typedef struct fx_qblk32 {
    __m512i q[8];
    __m512 d, dm;
} fx_qblk32;

FX_QINLINE int32_t fx_qi32(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

FX_QINLINE float fx_qf32(const uint8_t *p) {
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}

FX_QINLINE FX_QV __m512i fx_qc(uint32_t v) {
    return _mm512_set1_epi32((int)v);
}

/* Per 128-bit lane, dword i of a, b, c, d -> o[i] = (a_i, b_i, c_i, d_i). */
FX_QINLINE FX_QV void fx_qtr4(__m512i a, __m512i b, __m512i c, __m512i d,
                              __m512i *o) {
    const __m512i ab0 = _mm512_unpacklo_epi32(a, b);
    const __m512i ab1 = _mm512_unpackhi_epi32(a, b);
    const __m512i cd0 = _mm512_unpacklo_epi32(c, d);
    const __m512i cd1 = _mm512_unpackhi_epi32(c, d);
    o[0] = _mm512_unpacklo_epi64(ab0, cd0);
    o[1] = _mm512_unpackhi_epi64(ab0, cd0);
    o[2] = _mm512_unpacklo_epi64(ab1, cd1);
    o[3] = _mm512_unpackhi_epi64(ab1, cd1);
}

/* The 64 bytes of a 16-row group at field offset off (a dword of its
 * unit), plus t lines: lane l row l's dword. */
FX_QINLINE FX_QV __m512i fx_qline(const fx_qgrp *g, size_t off, int t) {
    return _mm512_loadu_si512((const void *)(g->r16 + 16 * off + 64 * (size_t)t));
}

/* 16 bytes at off of each row -> o[t] lane l: row l's dword t (t < 4).
 * Input v holds rows v, 4 + v, 8 + v, 12 + v in its 128-bit lanes, so
 * fx_qtr4 leaves row 4L + v in lane 4L + v. */
FX_QINLINE FX_QV void fx_qt16(const fx_qgrp *g, size_t off, __m512i *o) {
    if (g->r16) {
        FX_QUNROLL
        for (int t = 0; t < 4; t++) o[t] = fx_qline(g, off, t);
        return;
    }
    __m512i z[4];
    FX_QUNROLL
    for (int v = 0; v < 4; v++) {
        __m512i t = _mm512_castsi128_si512(
            _mm_loadu_si128((const __m128i *)(const void *)(g->rp[v] + off)));
        t = _mm512_inserti32x4(
            t, _mm_loadu_si128((const __m128i *)(const void *)(g->rp[4 + v] + off)), 1);
        t = _mm512_inserti32x4(
            t, _mm_loadu_si128((const __m128i *)(const void *)(g->rp[8 + v] + off)), 2);
        t = _mm512_inserti32x4(
            t, _mm_loadu_si128((const __m128i *)(const void *)(g->rp[12 + v] + off)), 3);
        z[v] = t;
    }
    fx_qtr4(z[0], z[1], z[2], z[3], o);
}

/* 64 bytes at off of each row -> o[t] lane l: row l's dword t (t < 16).
 * Rows 4h..4h+3 through fx_qtr4 give O[h][i], 128-bit lane L = their
 * dword 4L + i; a 4x4 transpose of 128-bit lanes across h finishes. */
FX_QINLINE FX_QV void fx_qt64(const fx_qgrp *g, size_t off, __m512i *o) {
    if (g->r16) {
        FX_QUNROLL
        for (int t = 0; t < 16; t++) o[t] = fx_qline(g, off, t);
        return;
    }
    __m512i O[4][4];
    FX_QUNROLL
    for (int h = 0; h < 4; h++)
        fx_qtr4(_mm512_loadu_si512((const void *)(g->rp[4 * h] + off)),
                _mm512_loadu_si512((const void *)(g->rp[4 * h + 1] + off)),
                _mm512_loadu_si512((const void *)(g->rp[4 * h + 2] + off)),
                _mm512_loadu_si512((const void *)(g->rp[4 * h + 3] + off)),
                O[h]);
    FX_QUNROLL
    for (int i = 0; i < 4; i++) {
        const __m512i e0 = _mm512_shuffle_i32x4(O[0][i], O[1][i], 0x88);
        const __m512i e1 = _mm512_shuffle_i32x4(O[0][i], O[1][i], 0xdd);
        const __m512i f0 = _mm512_shuffle_i32x4(O[2][i], O[3][i], 0x88);
        const __m512i f1 = _mm512_shuffle_i32x4(O[2][i], O[3][i], 0xdd);
        o[i] = _mm512_shuffle_i32x4(e0, f0, 0x88);
        o[8 + i] = _mm512_shuffle_i32x4(e0, f0, 0xdd);
        o[4 + i] = _mm512_shuffle_i32x4(e1, f1, 0x88);
        o[12 + i] = _mm512_shuffle_i32x4(e1, f1, 0xdd);
    }
}

/* Each row's dword at off (for a field no transpose covers; in 16-row
 * groups a dword of its unit). */
FX_QINLINE FX_QV __m512i fx_qgather(const fx_qgrp *g, size_t off) {
    if (g->r16) return fx_qline(g, off, 0);
    return _mm512_i32gather_epi32(_mm512_loadu_si512((const void *)g->idx),
                                  (const void *)(g->rp[0] + off), 1);
}

/* The f16 in the low (hi: high) half of each dword, as f32 (exact). */
FX_QINLINE FX_QV __m512 fx_qh2f_lo(__m512i v) {
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v));
}
FX_QINLINE FX_QV __m512 fx_qh2f_hi(__m512i v) {
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(v, 16)));
}

/* Each row's f16 at off (even, >= 2), as f32: from the dword ending with
 * it, or in 16-row groups from the unit's tail, where it is (Q6_K's d). */
FX_QINLINE FX_QV __m512 fx_qhalf_tail(const fx_qgrp *g, size_t off) {
    if (g->r16)
        return _mm512_cvtph_ps(
            _mm256_loadu_si256((const __m256i *)(const void *)(g->r16 + 16 * off)));
    return fx_qh2f_hi(fx_qgather(g, off - 2));
}

/* IQ4_NL's levels + 128 as unsigned bytes in every 128-bit lane. */
FX_QINLINE FX_QV __m512i fx_qkv_lut(void) {
    return _mm512_xor_si512(
        _mm512_broadcast_i32x4(
            _mm_loadu_si128((const __m128i *)(const void *)fx_iq4nl_values)),
        _mm512_set1_epi8((char)0x80));
}

/* One pass: XR x rows against a group's nb blocks (bb bytes each).
 * mode 0: unpack each block and use it; 1: also keep it in pack[b]; 2:
 * read pack[b] (kept by an earlier pass). pf: the next group's bytes,
 * prefetched pf_step a block while this one is unpacked (or NULL). */
typedef void (*fx_qpass_fn)(const fx_qgrp *g, const fx_qxrow *x, size_t nb,
                            size_t bb, void *pack, int mode,
                            const uint8_t *pf, size_t pf_step,
                            float *const *yr, __mmask16 sm);

/* Two groups' blocks kept by their first passes (pack_a, pack_b: nb
 * unpacked blocks each) against FX_QXR x rows, into ya (lanes sma) and
 * yb (lanes smb): each broadcast x dword feeds both groups' vpdpbusd. */
typedef void (*fx_qpair_fn)(const void *pack_a, const void *pack_b,
                            const fx_qxrow *x, size_t nb,
                            float *const *ya, float *const *yb,
                            __mmask16 sma, __mmask16 smb);

/* One x row against a full 16-row group (g->r16 set) of nb blocks, into
 * y (lanes sm), with the prefetch of a pass: the decode step's kernel
 * where a type has one (qdot_avx512_r16.c), else NULL. */
typedef void (*fx_qone_fn)(const fx_qgrp *g, const fx_qxrow *x, size_t nb,
                           const uint8_t *pf, size_t pf_step, float *y,
                           __mmask16 sm);
fx_qone_fn fx_qone_avx512(fx_wtype t);

/* Columns [n0, n1) of the job in groups of 16, x rows in blocks of 64
 * (their quants stay in L2 while the group's blocks are unpacked once per
 * block of rows), in passes of 8, 4, 2 or 1 rows. fns[i]: the type's
 * pass of 2^i rows; blk: elements a block; usize: bytes of an unpacked
 * block; xq256: the x layout; pair (or NULL): the type's pass of two
 * groups, for the 8-row passes after the first where two groups of the
 * range are whole. */
void fx_qrange(const fx_mm_job *job, size_t n0, size_t n1, float *scratch,
               size_t blk, size_t usize, bool xq256, const fx_qpass_fn *fns,
               fx_qpair_fn pair);

/* The 256-element types' kernel table (qdot_avx512_k.c). */
fx_mm_range_fn fx_qmm_avx512_k(fx_wtype t);

#endif /* x86-64 GCC/Clang */

#endif /* FX_KERNELS_QDOT_AVX512_H */
