/*
 * One x row against a 16-row group of Q4_K, Q5_K or Q6_K (FX_WTYPE_QR16):
 * the decode step's case, written out on its own. The general passes of
 * qdot_avx512_k.c compute the same integers for any number of x rows, but
 * at one row their unpacked blocks and per-sub-block sums cost register
 * moves and spills that this straight loop does not have: each 64-byte
 * line is loaded, split into its quants and met by the x dword it needs
 * at once (qdot_avx512.h gives the lane scheme, quants.h the order).
 */
#include "qdot_avx512.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

/* A control for vpshufb: in each dword d of a 128-bit lane, bytes
 * (4d + b0, b1, b2, b3), an index of 0x80 giving a zero byte. */
FX_QINLINE FX_QV __m512i byte_pick(int b0, int b1, int b2, int b3) {
    const unsigned a = (unsigned)b0 | (unsigned)b1 << 8 | (unsigned)b2 << 16 |
                       (unsigned)b3 << 24;
    /* +4d where the index is a byte of the dword (below 0x80) */
    const unsigned step = (b0 < 0x80 ? 1u : 0) | (b1 < 0x80 ? 1u << 8 : 0) |
                          (b2 < 0x80 ? 1u << 16 : 0) | (b3 < 0x80 ? 1u << 24 : 0);
    return _mm512_broadcast_i32x4(_mm_setr_epi32(
        (int)a, (int)(a + 4 * step), (int)(a + 8 * step), (int)(a + 12 * step)));
}

FX_QINLINE FX_QV __m512i xdw(const uint8_t *p) {
    return _mm512_set1_epi32(fx_qi32(p));
}

/* A block's prefetch slice goes out as quants.h's two streams, B at the
 * slice + bd; slices they do not cover (the matrix's last groups) go
 * whole at the block's start, a line at a time. */

/* A slice the streams do not cover (slice may be NULL), whole. */
FX_QINLINE FX_QV void prefetch_slice(const uint8_t *slice, size_t pf_step) {
    if (!slice) return;
    for (size_t o = 0; o < pf_step; o += 64)
        _mm_prefetch((const char *)slice + o, FX_QPF_HINT);
}

/* Step i's share of the streams, spread over the block's S steps rather
 * than all at its start (quants.h): A's 32 / S lines,
 * B's lines [ceil(i nb / S), ceil((i + 1) nb / S)), from *pa (the slice;
 * without one that fits, the block being read: in cache, no branch).
 * v, a vector of the step: *pa passes through it, or the scheduler
 * hoists the prefetches to the block's start; *bd too, or GCC makes each
 * of B's addresses a value kept (on the stack) from block to block. */
FX_QINLINE FX_QV void pf_lines(const uint8_t **pa, size_t *bd, int i, int S,
                               int nb, __m512i v) {
    __asm__("" : "+r"(*pa), "+r"(*bd) : "v"(v));
    const char *p = (const char *)*pa;
    const int w = 32 / S;
    FX_QUNROLL
    for (int j = 0; j < w; j++)
        _mm_prefetch(p + 64 * (w * i + j), FX_QPF_HINT);
    const int b0 = (i * nb + S - 1) / S, b1 = ((i + 1) * nb + S - 1) / S;
    FX_QUNROLL
    for (int j = b0; j < b1; j++)
        _mm_prefetch(p + *bd + 64 * j, FX_QPF_HINT);
}

/* Q4_K and Q5_K: a block is d, dmin (dword 0), 12 bytes of 6-bit scales
 * and mins (dwords 1-3, ggml's get_scale_min_k4), Q5_K's qh[32], and qs,
 * whose byte 32c + l holds element 64c + l (low nibble) and 64c + 32 + l
 * (high); Q5_K's bit 4 of them is bit 2c (2c + 1) of qh byte l. */
FX_QINLINE FX_QV void k45_one(const bool five, const fx_qgrp *g,
                              const fx_qxrow *x, size_t nb, const uint8_t *pf,
                              size_t pf_step, float *y, __mmask16 sm) {
    const size_t bb = five ? 176 : 144, qs = five ? 48 : 16;
    const __m512i m4 = fx_qc(0x0f0f0f0fu), h4 = fx_qc(0xf0f0f0f0u);
    const __m512i b4 = fx_qc(0x10101010u);
    const __m512i m6 = fx_qc(0x3f3f3f3fu), m2 = fx_qc(0x30303030u);
    __m512i pick[4], pair[4];
    for (int j = 0; j < 4; j++) {
        pick[j] = byte_pick(j, 0x80, 0x80, 0x80);
        pair[j] = byte_pick(j, 0x80, j, 0x80);
    }
    __m512 acc = _mm512_setzero_ps();
    const int pnb = fx_qr16_pf_past(bb);
    const bool fit = fx_qr16_pf_fits(pf, pf_step, pnb);
    size_t bd = fit ? pf_step - 64 * (size_t)pnb : 0;
    for (size_t b = 0; b < nb; b++) {
        const uint8_t *slice = pf ? pf + b * pf_step : NULL;
        const size_t off = b * bb;
        const uint8_t *pa = fit ? slice : g->r16 + 16 * off;
        if (!fit) prefetch_slice(slice, pf_step);
        const __m512i h0 = fx_qline(g, off, 0), h1 = fx_qline(g, off, 1);
        const __m512i h2 = fx_qline(g, off, 2), h3 = fx_qline(g, off, 3);
        const __m512i sa = _mm512_and_si512(h1, m6);
        const __m512i ma = _mm512_and_si512(h2, m6);
        const __m512i sb = _mm512_or_si512(
            _mm512_and_si512(h3, m4), _mm512_and_si512(_mm512_srli_epi32(h1, 2), m2));
        const __m512i mb = _mm512_or_si512(
            _mm512_and_si512(_mm512_srli_epi32(h3, 4), m4),
            _mm512_and_si512(_mm512_srli_epi32(h2, 2), m2));
        const uint8_t *xq = x->q + 256 * b, *bs = x->s + 32 * b;
        __m512i P = _mm512_setzero_si512(), M = _mm512_setzero_si512();
        /* unrolled: the streams' offsets are constants */
        FX_QUNROLL
        for (int c = 0; c < 4; c++) {
            __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
            FX_QUNROLL
            for (int t = 0; t < 8; t++) {
                const __m512i v = fx_qline(g, off + qs + 32 * (size_t)c, t);
                __m512i vl = _mm512_and_si512(v, m4), vh;
                if (five) {
                    /* qh bit 2c (2c + 1) to bit 4 */
                    const __m512i qh = fx_qline(g, off + 16, t);
                    vl = _mm512_or_si512(vl, _mm512_and_si512(
                        _mm512_rolv_epi32(qh, fx_qc((unsigned)(4 - 2 * c) & 31)), b4));
                    vh = _mm512_or_si512(
                        _mm512_and_si512(_mm512_srli_epi32(v, 4), m4),
                        _mm512_and_si512(_mm512_rolv_epi32(
                                             qh, fx_qc((unsigned)(3 - 2 * c) & 31)),
                                         b4));
                } else {
                    vh = _mm512_and_si512(v, h4);
                }
                lo = _mm512_dpbusd_epi32(lo, vl, xdw(xq + 64 * c + 4 * t));
                hi = _mm512_dpbusd_epi32(hi, vh, xdw(xq + 64 * c + 32 + 4 * t));
                pf_lines(&pa, &bd, 8 * c + t, 32, pnb, lo);
            }
            /* sub-blocks 2c and 2c + 1; Q4_K's high nibbles' sum is 16
             * times theirs, exactly */
            if (!five) hi = _mm512_srai_epi32(hi, 4);
            const __m512i s = c < 2 ? sa : sb, mn = c < 2 ? ma : mb;
            P = _mm512_add_epi32(P, _mm512_mullo_epi32(
                                        lo, _mm512_shuffle_epi8(s, pick[2 * c % 4])));
            P = _mm512_add_epi32(P, _mm512_mullo_epi32(
                                        hi, _mm512_shuffle_epi8(s, pick[2 * c % 4 + 1])));
            /* a running sum: as a tree over the unrolled loop, its
             * leaves spill */
            __asm__("" : "+v"(P));
            M = _mm512_dpwssd_epi32(M, _mm512_shuffle_epi8(mn, pair[2 * c % 4]),
                                    xdw(bs + 8 * c));
            M = _mm512_dpwssd_epi32(M, _mm512_shuffle_epi8(mn, pair[2 * c % 4 + 1]),
                                    xdw(bs + 8 * c + 4));
        }
        const __m512 dx = _mm512_set1_ps(fx_qf32(x->d + 4 * b));
        acc = _mm512_fmadd_ps(_mm512_mul_ps(fx_qh2f_lo(h0), dx),
                              _mm512_cvtepi32_ps(P), acc);
        acc = _mm512_fnmadd_ps(_mm512_mul_ps(fx_qh2f_hi(h0), dx),
                               _mm512_cvtepi32_ps(M), acc);
    }
    _mm512_mask_storeu_ps(y, sm, acc);
}

static FX_QV void q4k_one(const fx_qgrp *g, const fx_qxrow *x, size_t nb,
                          const uint8_t *pf, size_t pf_step, float *y,
                          __mmask16 sm) {
    k45_one(false, g, x, nb, pf, pf_step, y, sm);
}

static FX_QV void q5k_one(const fx_qgrp *g, const fx_qxrow *x, size_t nb,
                          const uint8_t *pf, size_t pf_step, float *y,
                          __mmask16 sm) {
    k45_one(true, g, x, nb, pf, pf_step, y, sm);
}

/* Q6_K, its quants rearranged in groups (quants.h): dword t of the 64
 * bytes i < 3 is element dword 16 i + t in its low 6 bits, and element
 * dword 48 + t's bits 2i, 2i + 1 on top; int8 scales at 192, d the
 * tail. Sub-block j = element dword / 4; q - 32 the weight's integer. */
static FX_QV void q6k_one(const fx_qgrp *g, const fx_qxrow *x, size_t nb,
                          const uint8_t *pf, size_t pf_step, float *y,
                          __mmask16 sm) {
    const __m512i m6 = fx_qc(0x3f3f3f3fu), m2 = fx_qc(0x03030303u),
                  m4 = fx_qc(0x0f0f0f0fu);
    __m512i pick[4], pair[2];
    for (int j = 0; j < 4; j++) pick[j] = byte_pick(0x80, 0x80, 0x80, j);
    /* int16 pairs (byte 2p, 2p + 1) sign-extended: the bytes high in
     * each word, then an arithmetic shift */
    pair[0] = byte_pick(0x80, 0, 0x80, 1);
    pair[1] = byte_pick(0x80, 2, 0x80, 3);
    __m512 acc = _mm512_setzero_ps();
    const int pnb = fx_qr16_pf_past(210);
    const bool fit = fx_qr16_pf_fits(pf, pf_step, pnb);
    size_t bd = fit ? pf_step - 64 * (size_t)pnb : 0;
    for (size_t b = 0; b < nb; b++) {
        const uint8_t *slice = pf ? pf + b * pf_step : NULL;
        const size_t off = b * 210;
        const uint8_t *pa = fit ? slice : g->r16 + 16 * off;
        if (!fit) prefetch_slice(slice, pf_step);
        const uint8_t *xq = x->q + 256 * b, *bs = x->s + 32 * b;
        __m512i sc4[4];
        FX_QUNROLL
        for (int i = 0; i < 4; i++) sc4[i] = fx_qline(g, off + 192, i);
        __m512i P = _mm512_setzero_si512(), C = _mm512_setzero_si512();
        /* unrolled: the streams' offsets are constants */
        FX_QUNROLL
        for (int tq = 0; tq < 4; tq++) {
            __m512i S[4];
            FX_QUNROLL
            for (int i = 0; i < 4; i++) S[i] = _mm512_setzero_si512();
            FX_QUNROLL
            for (int tt = 0; tt < 4; tt++) {
                const int t = 4 * tq + tt;
                const __m512i a = fx_qline(g, off, t);
                const __m512i bq = fx_qline(g, off + 64, t);
                const __m512i c = fx_qline(g, off + 128, t);
                /* the top 2 bits of a, b, c to bits 0-1, 2-3, 4-5: bitwise
                 * selects (vpternlogd 0xca: mask ? first : second) */
                const __m512i ab = _mm512_ternarylogic_epi32(
                    m2, _mm512_srli_epi32(a, 6), _mm512_srli_epi32(bq, 4), 0xca);
                const __m512i abc = _mm512_and_si512(
                    _mm512_ternarylogic_epi32(m4, ab, _mm512_srli_epi32(c, 2), 0xca),
                    m6);
                S[0] = _mm512_dpbusd_epi32(S[0], _mm512_and_si512(a, m6),
                                           xdw(xq + 4 * t));
                S[1] = _mm512_dpbusd_epi32(S[1], _mm512_and_si512(bq, m6),
                                           xdw(xq + 64 + 4 * t));
                S[2] = _mm512_dpbusd_epi32(S[2], _mm512_and_si512(c, m6),
                                           xdw(xq + 128 + 4 * t));
                S[3] = _mm512_dpbusd_epi32(S[3], abc, xdw(xq + 192 + 4 * t));
                pf_lines(&pa, &bd, t, 16, pnb, S[0]);
            }
            /* sub-block 4i + tq: byte tq of scale dword i, to the top of
             * the lane and down with its sign */
            FX_QUNROLL
            for (int i = 0; i < 4; i++) {
                P = _mm512_add_epi32(
                    P, _mm512_mullo_epi32(
                           S[i], _mm512_srai_epi32(
                                     _mm512_shuffle_epi8(sc4[i], pick[tq]), 24)));
                /* a running sum: as a tree over the unrolled loop, its
                 * leaves spill */
                __asm__("" : "+v"(P));
            }
        }
        /* the offset: 32 sum_j sc_j bsum_j, scales as int16 pairs */
        FX_QUNROLL
        for (int p = 0; p < 8; p++)
            C = _mm512_dpwssd_epi32(
                C, _mm512_srai_epi16(_mm512_shuffle_epi8(sc4[p / 2], pair[p % 2]), 8),
                xdw(bs + 4 * p));
        P = _mm512_sub_epi32(P, _mm512_slli_epi32(C, 5));
        const __m512 dx = _mm512_set1_ps(fx_qf32(x->d + 4 * b));
        acc = _mm512_fmadd_ps(_mm512_mul_ps(fx_qhalf_tail(g, off + 208), dx),
                              _mm512_cvtepi32_ps(P), acc);
    }
    _mm512_mask_storeu_ps(y, sm, acc);
}

fx_qone_fn fx_qone_avx512(fx_wtype t) {
    switch (t) {
    case FX_WTYPE_Q4_K: return q4k_one;
    case FX_WTYPE_Q5_K: return q5k_one;
    case FX_WTYPE_Q6_K: return q6k_one;
    default: return NULL;
    }
}

#else

typedef int fx_qdot_avx512_r16_empty;

#endif
