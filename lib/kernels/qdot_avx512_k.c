/*
 * The K-quants and IQ4_XS (256-element blocks, x in FX_XQ_256) on AVX-512
 * VNNI: the unpacking of each type's block into fx_qblk256 and the one
 * dot product every type shares (qdot_avx512.h gives the form).
 *
 * Per x row and sub-block j, S_j = sum of vpdpbusd(q[s], x dword s) over
 * the sub-block's slots: each row's sum of (unsigned quant) * qx, exact.
 * Then P = sum_j sc_j * S_j (vpmulld), and for a type whose quant is
 * u - c (Q3_K c = 4, Q6_K 32, IQ4_XS 128 on its levels + 128), P -= c *
 * sum_j sc_j * bsum_j, the scale pairs pw against x's int16 sums by
 * vpdpwssd; M (Q2_K, Q4_K, Q5_K) = sum_j mn_j * bsum_j the same way.
 * The partial sums stay within int32 (at most 2^28 before the offset
 * term, Q6_K), and int32 addition is exact, so these are P and M of
 * quants.h; then its two fmas, 16 rows a vector, in block order.
 */
#include "qdot_avx512.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

enum { KQ2, KQ3, KQ4, KQ5, KQ6, KIQ4 };

/* Bit u of each byte of x, moved to bit `to`. */
FX_QINLINE FX_QV __m512i bit_to(__m512i x, int u, int to) {
    const __m512i m = _mm512_set1_epi8((char)(1 << to));
    if (u > to) return _mm512_and_si512(_mm512_srli_epi32(x, (unsigned)(u - to)), m);
    if (u < to) return _mm512_and_si512(_mm512_slli_epi32(x, (unsigned)(to - u)), m);
    return _mm512_and_si512(x, m);
}

/* Byte i (0..3) of each dword, zero-extended. */
FX_QINLINE FX_QV __m512i byte_of(__m512i x, int i) {
    return _mm512_and_si512(_mm512_srli_epi32(x, (unsigned)(8 * i)), fx_qc(0xff));
}

/* Two int32 lane vectors -> int16 pairs (a low, b high). */
FX_QINLINE FX_QV __m512i pair16(__m512i a, __m512i b) {
    return _mm512_or_si512(_mm512_and_si512(a, fx_qc(0xffff)),
                           _mm512_slli_epi32(b, 16));
}

/* Q4_K and Q5_K: d, dmin and the 12 bytes of 6-bit scales and mins
 * (ggml's get_scale_min_k4) from the block's first 16 bytes. */
FX_QINLINE FX_QV void head_k4(const fx_qgrp *g, size_t off, fx_qblk256 *u) {
    __m512i h[4];
    fx_qt16(g, off, h);
    u->d = fx_qh2f_lo(h[0]);
    u->dm = fx_qh2f_hi(h[0]);
    const __m512i m6 = fx_qc(0x3f3f3f3f), m4 = fx_qc(0x0f0f0f0f),
                  m2 = fx_qc(0x30303030);
    const __m512i sa = _mm512_and_si512(h[1], m6);
    const __m512i ma = _mm512_and_si512(h[2], m6);
    const __m512i sb = _mm512_or_si512(
        _mm512_and_si512(h[3], m4),
        _mm512_and_si512(_mm512_srli_epi32(h[1], 2), m2));
    const __m512i mb = _mm512_or_si512(
        _mm512_and_si512(_mm512_srli_epi32(h[3], 4), m4),
        _mm512_and_si512(_mm512_srli_epi32(h[2], 2), m2));
    FX_QUNROLL
    for (int j = 0; j < 4; j++) {
        u->sc[j] = byte_of(sa, j);
        u->sc[4 + j] = byte_of(sb, j);
    }
    FX_QUNROLL
    for (int p = 0; p < 4; p++) {
        const __m512i mn = p < 2 ? ma : mb;
        u->mw[p] = pair16(byte_of(mn, 2 * p % 4), byte_of(mn, 2 * p % 4 + 1));
    }
}

FX_QINLINE FX_QV void head_q6_K(const fx_qgrp *g, size_t off, fx_qblk256 *u) {
    __m512i s[4];
    fx_qt16(g, off + 192, s);
    FX_QUNROLL
    for (int j = 0; j < 16; j++)
        u->sc[j] = _mm512_srai_epi32(
            _mm512_slli_epi32(s[j / 4], (unsigned)(24 - 8 * (j % 4))), 24);
    FX_QUNROLL
    for (int p = 0; p < 8; p++) u->pw[p] = pair16(u->sc[2 * p], u->sc[2 * p + 1]);
    u->d = fx_qhalf_tail(g, off + 208);
}

FX_QINLINE FX_QV void head_q2_K(const fx_qgrp *g, size_t off, fx_qblk256 *u) {
    __m512i s[4];
    fx_qt16(g, off, s);
    FX_QUNROLL
    for (int j = 0; j < 16; j++) {
        const __m512i b = byte_of(s[j / 4], j % 4);
        u->sc[j] = _mm512_and_si512(b, fx_qc(0x0f));
        u->mw[j / 2] = j % 2 ? pair16(u->mw[j / 2], _mm512_srli_epi32(b, 4))
                             : _mm512_srli_epi32(b, 4);
    }
    const __m512i dd = fx_qgather(g, off + 80);
    u->d = fx_qh2f_lo(dd);
    u->dm = fx_qh2f_hi(dd);
}

FX_QINLINE FX_QV void head_q3_K(const fx_qgrp *g, size_t off, fx_qblk256 *u) {
    /* bytes 94..109: 2 of qs, the 12 of scales, d */
    __m512i s[4];
    fx_qt16(g, off + 94, s);
    u->d = fx_qh2f_hi(s[3]);
    __m512i a[3];
    FX_QUNROLL
    for (int i = 0; i < 3; i++)
        a[i] = _mm512_or_si512(_mm512_srli_epi32(s[i], 16),
                               _mm512_slli_epi32(s[i + 1], 16));
    const __m512i m4 = fx_qc(0x0f0f0f0f), m2 = fx_qc(0x03030303);
    __m512i o[4];
    FX_QUNROLL
    for (int i = 0; i < 4; i++)
        o[i] = _mm512_or_si512(
            _mm512_and_si512(i < 2 ? a[i] : _mm512_srli_epi32(a[i - 2], 4), m4),
            _mm512_slli_epi32(
                _mm512_and_si512(_mm512_srli_epi32(a[2], (unsigned)(2 * i)), m2), 4));
    FX_QUNROLL
    for (int j = 0; j < 16; j++)
        u->sc[j] = _mm512_sub_epi32(byte_of(o[j / 4], j % 4), fx_qc(32));
    FX_QUNROLL
    for (int p = 0; p < 8; p++) u->pw[p] = pair16(u->sc[2 * p], u->sc[2 * p + 1]);
}

FX_QINLINE FX_QV void head_iq4_xs(const fx_qgrp *g, size_t off,
                                  fx_qblk256 *u) {
    __m512i h[4];
    fx_qt16(g, off, h);
    u->d = fx_qh2f_lo(h[0]);
    FX_QUNROLL
    for (int ib = 0; ib < 8; ib++) {
        const __m512i lo = _mm512_and_si512(
            _mm512_srli_epi32(h[1], (unsigned)(4 * ib)), fx_qc(0xf));
        const __m512i hi = _mm512_and_si512(
            _mm512_srli_epi32(h[0], (unsigned)(16 + 2 * ib)), fx_qc(3));
        u->sc[ib] = _mm512_sub_epi32(
            _mm512_or_si512(lo, _mm512_slli_epi32(hi, 4)), fx_qc(32));
        u->pw[ib] = pair16(u->sc[ib], u->sc[ib]);
    }
}

/* Everything of the block but its quants. */
FX_QINLINE FX_QV void head(const int T, const fx_qgrp *g, size_t off,
                           fx_qblk256 *u) {
    switch (T) {
    case KQ2: head_q2_K(g, off, u); break;
    case KQ3: head_q3_K(g, off, u); break;
    case KQ4:
    case KQ5: head_k4(g, off, u); break;
    case KQ6: head_q6_K(g, off, u); break;
    default: head_iq4_xs(g, off, u); break;
    }
}

/* 32 bytes at off of each row -> o[t], t < 8. */
FX_QINLINE FX_QV void t32(const fx_qgrp *g, size_t off, __m512i *o) {
    fx_qt16(g, off, o);
    fx_qt16(g, off + 16, o + 4);
}

/* Where part() puts the quants of a half block: into q (if not NULL),
 * and with XR > 0 straight into the x rows' sums of their sub-blocks, so
 * that with few x rows they go from the transpose to the vpdpbusd in
 * registers (S[r][j]: the half's sub-block j). */
typedef struct ksink {
    __m512i S[2][8];
    __m512i *q;
    const fx_qxrow *x;
    size_t b;
} ksink;

FX_QINLINE FX_QV void put(const int T, const int XR, ksink *k, int h, int i,
                          __m512i v) {
    const int spb = T == KQ2 || T == KQ3 || T == KQ6 ? 4 : 8;
    if (k->q) k->q[i] = v;
    FX_QUNROLL
    for (int r = 0; r < XR; r++)
        k->S[r][i / spb] = _mm512_dpbusd_epi32(
            k->S[r][i / spb], v,
            _mm512_set1_epi32(fx_qi32(k->x[r].q + 256 * k->b + 4 * (size_t)(32 * h + i))));
}

/* The transposes both halves of a block use, once a block: Q5_K's qh
 * (pre[0..7]); Q6_K's qh (pre[0..15]); Q2_K's and Q3_K's qs (pre[0..15])
 * and Q3_K's hmask (pre[16..23]). */
FX_QINLINE FX_QV void prep(const int T, const fx_qgrp *g, size_t off,
                           __m512i *pre) {
    switch (T) {
    case KQ5: t32(g, off + 16, pre); break;
    case KQ6:
        /* 16-row groups hold Q6_K's quants rearranged: part() reads them */
        if (!g->r16) fx_qt64(g, off + 128, pre);
        break;
    case KQ2: fx_qt64(g, off + 16, pre); break;
    case KQ3:
        fx_qt64(g, off + 32, pre);
        t32(g, off, pre + 16);
        break;
    default: break;
    }
}

/* Half h of the block's quants: slot 32h + i, i < 32, to put(..., i). */
FX_QINLINE FX_QV void part(const int T, const int XR, const fx_qgrp *g,
                           size_t off, int h, const __m512i *pre, ksink *q) {
    const __m512i m4 = fx_qc(0x0f0f0f0f);
    if (T == KQ4 || T == KQ5 || T == KIQ4) {
        __m512i v[16];
        const __m512i *qh = pre;
        fx_qt64(g, off + (T == KQ4 ? 16 : T == KQ5 ? 48 : 8) + 64 * (size_t)h, v);
        const __m512i lut = fx_qkv_lut();
        FX_QUNROLL
        for (int t = 0; t < 16; t++) {
            __m512i lo = _mm512_and_si512(v[t], m4);
            __m512i hi = _mm512_and_si512(_mm512_srli_epi32(v[t], 4), m4);
            if (T == KIQ4) {
                /* qs byte 16ib + l: element 32ib + l (low), + 16 (high) */
                put(T, XR, q, h, 8 * (t / 4) + t % 4, _mm512_shuffle_epi8(lut, lo));
                put(T, XR, q, h, 8 * (t / 4) + 4 + t % 4,
                    _mm512_shuffle_epi8(lut, hi));
                continue;
            }
            /* qs byte 32c + l: element 64c + l (low), 64c + 32 + l (high);
             * Q5_K: plus bit 2c (2c + 1) of qh byte l as bit 4. Q4_K's
             * high nibble stays in place, 16 q: sub_sum divides its sums
             * (one shift a sub-block instead of one a vector). */
            const int c = 2 * h + t / 8;
            if (T == KQ4) hi = _mm512_and_si512(v[t], fx_qc(0xf0f0f0f0u));
            if (T == KQ5) {
                lo = _mm512_or_si512(lo, bit_to(qh[t % 8], 2 * c, 4));
                hi = _mm512_or_si512(hi, bit_to(qh[t % 8], 2 * c + 1, 4));
            }
            put(T, XR, q, h, 16 * (t / 8) + t % 8, lo);
            put(T, XR, q, h, 16 * (t / 8) + 8 + t % 8, hi);
        }
    } else if (T == KQ6 && g->r16) {
        /* quants.h: dword t of each 64 bytes i < 3 is slot 16i + t in its
         * low 6 bits, and slot 48 + t's bits 2i, 2i + 1 in its top 2 */
        const __m512i m6 = fx_qc(0x3f3f3f3fu);
        FX_QUNROLL
        for (int t = 0; t < 16; t++) {
            if (h == 0) {
                put(T, XR, q, h, t, _mm512_and_si512(fx_qline(g, off, t), m6));
                put(T, XR, q, h, 16 + t,
                    _mm512_and_si512(fx_qline(g, off + 64, t), m6));
                continue;
            }
            const __m512i a = fx_qline(g, off, t), b = fx_qline(g, off + 64, t);
            const __m512i c = fx_qline(g, off + 128, t);
            put(T, XR, q, h, t, _mm512_and_si512(c, m6));
            const __m512i top = _mm512_or_si512(
                _mm512_and_si512(_mm512_srli_epi32(a, 6), fx_qc(0x03030303u)),
                _mm512_or_si512(
                    _mm512_and_si512(_mm512_srli_epi32(b, 4), fx_qc(0x0c0c0c0cu)),
                    _mm512_and_si512(_mm512_srli_epi32(c, 2), fx_qc(0x30303030u))));
            put(T, XR, q, h, 16 + t, top);
        }
    } else if (T == KQ6) {
        /* element 128h + 32i + l, l < 32: ql byte 64h + l (i = 0, 2) or
         * 64h + 32 + l (i = 1, 3), low (i < 2) or high nibble, and bits
         * 2i, 2i + 1 of qh byte 32h + l above them */
        const __m512i m2 = fx_qc(0x30303030);
        __m512i ql[16];
        const __m512i *qh = pre + 8 * h;
        fx_qt64(g, off + 64 * (size_t)h, ql);
        FX_QUNROLL
        for (int w = 0; w < 8; w++) {
            const __m512i a = ql[w], b = ql[8 + w], hb = qh[w];
            put(T, XR, q, h, w, _mm512_or_si512(
                _mm512_and_si512(a, m4),
                _mm512_and_si512(_mm512_slli_epi32(hb, 4), m2)));
            put(T, XR, q, h, 8 + w, _mm512_or_si512(
                _mm512_and_si512(b, m4),
                _mm512_and_si512(_mm512_slli_epi32(hb, 2), m2)));
            put(T, XR, q, h, 16 + w, _mm512_or_si512(
                _mm512_and_si512(_mm512_srli_epi32(a, 4), m4),
                _mm512_and_si512(hb, m2)));
            put(T, XR, q, h, 24 + w, _mm512_or_si512(
                _mm512_and_si512(_mm512_srli_epi32(b, 4), m4),
                _mm512_and_si512(_mm512_srli_epi32(hb, 2), m2)));
        }
    } else {
        /* Q2_K, Q3_K: element 128h + 32j + l in bits 2j, 2j + 1 of qs
         * byte 32h + l; Q3_K plus 4 where bit 4h + j of hmask byte l is
         * set (q = that - 4) */
        const __m512i *v = pre + 8 * h, *hm = pre + 16;
        FX_QUNROLL
        for (int t = 0; t < 8; t++)
            FX_QUNROLL
            for (int j = 0; j < 4; j++) {
                __m512i x = _mm512_and_si512(
                    _mm512_srli_epi32(v[t], (unsigned)(2 * j)), fx_qc(0x03030303));
                if (T == KQ3) x = _mm512_or_si512(x, bit_to(hm[t], 4 * h + j, 2));
                put(T, XR, q, h, 8 * j + t, x);
            }
    }
}

/* Sub-block j's sum S_j of its quant vectors: Q4_K's odd sub-blocks (high
 * nibbles, part()) come as 16 S_j, every product a multiple of 16, so the
 * shift is exact. */
FX_QINLINE FX_QV __m512i sub_sum(const int T, int j, __m512i S) {
    return T == KQ4 && j % 2 ? _mm512_srai_epi32(S, 4) : S;
}

/* Sub-block j of block b (q: half h's slots): P[r] += sc_j * S_j. */
FX_QINLINE FX_QV void dot_sub(const int T, const int XR, const __m512i *q,
                              const fx_qblk256 *u, int h, int j,
                              const fx_qxrow *x, size_t b, __m512i *P) {
    const int spb = T == KQ2 || T == KQ3 || T == KQ6 ? 4 : 8;
    __m512i S[FX_QXR];
    FX_QUNROLL
    for (int r = 0; r < XR; r++) S[r] = _mm512_setzero_si512();
    FX_QUNROLL
    for (int i = 0; i < spb; i++) {
        const int s = j * spb + i;
        FX_QUNROLL
        for (int r = 0; r < XR; r++)
            S[r] = _mm512_dpbusd_epi32(
                S[r], q[s - 32 * h],
                _mm512_set1_epi32(fx_qi32(x[r].q + 256 * b + 4 * (size_t)s)));
    }
    const __m512i sc = u->sc[j];
    FX_QUNROLL
    for (int r = 0; r < XR; r++)
        P[r] = _mm512_add_epi32(P[r], _mm512_mullo_epi32(sub_sum(T, j, S[r]), sc));
}

/* Half h of block b's integer sums. Up to 2 x rows all in line (the
 * quants stay in registers from the transpose); more x rows load each
 * quant vector once for all of them, so a loop costs nothing there. */
FX_QINLINE FX_QV void dot_part(const int T, const int XR, const __m512i *q,
                               const fx_qblk256 *u, int h,
                               const fx_qxrow *x, size_t b, __m512i *P) {
    const int half = T == KQ2 || T == KQ3 || T == KQ6 ? 8 : 4;
    if (XR <= 2) {
        FX_QUNROLL
        for (int jj = 0; jj < half; jj++)
            dot_sub(T, XR, q, u, h, h * half + jj, x, b, P);
    } else {
        _Pragma("GCC unroll 1")
        for (int jj = 0; jj < half; jj++)
            dot_sub(T, XR, q, u, h, h * half + jj, x, b, P);
    }
}

/* The block's offsets and mins, and its fmas (quants.h) into acc. */
FX_QINLINE FX_QV void dot_end(const int T, const int XR, const fx_qblk256 *u,
                              const fx_qxrow *x, size_t b, const __m512i *P,
                              __m512 *acc) {
    const int cshift = T == KQ3 ? 2 : T == KQ6 ? 5 : T == KIQ4 ? 7 : 0;
    const bool mins = T == KQ2 || T == KQ4 || T == KQ5;
    FX_QUNROLL
    for (int r = 0; r < XR; r++) {
        const uint8_t *bs = x[r].s + 32 * b;
        const __m512 dx = _mm512_set1_ps(fx_qf32(x[r].d + 4 * b));
        __m512i p = P[r];
        if (cshift) {
            __m512i c = _mm512_setzero_si512();
            FX_QUNROLL
            for (int i = 0; i < 8; i++)
                c = _mm512_dpwssd_epi32(c, u->pw[i],
                                        _mm512_set1_epi32(fx_qi32(bs + 4 * i)));
            p = _mm512_sub_epi32(p, _mm512_slli_epi32(c, (unsigned)cshift));
        }
        acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(u->d, dx), _mm512_cvtepi32_ps(p),
                                 acc[r]);
        if (mins) {
            /* Q4_K, Q5_K: sub-block pairs against sums of 32 */
            const bool k45 = T != KQ2;
            const uint8_t *ms = k45 ? x[r].s32 + 16 * b : bs;
            const int nm = k45 ? 4 : 8;
            __m512i m = _mm512_setzero_si512();
            FX_QUNROLL
            for (int i = 0; i < nm; i++)
                m = _mm512_dpwssd_epi32(m, u->mw[i],
                                        _mm512_set1_epi32(fx_qi32(ms + 4 * i)));
            acc[r] = _mm512_fnmadd_ps(_mm512_mul_ps(u->dm, dx),
                                      _mm512_cvtepi32_ps(m), acc[r]);
        }
    }
}

FX_QINLINE FX_QV void pass(const int T, const int XR, const fx_qgrp *g,
                           const fx_qxrow *x, size_t nb, size_t bb,
                           void *pack, int mode, const uint8_t *pf,
                           size_t pf_step, float *const *yr, __mmask16 sm) {
    fx_qblk256 *pk = (fx_qblk256 *)pack;
    __m512 acc[FX_QXR];
    FX_QUNROLL
    for (int r = 0; r < XR; r++) acc[r] = _mm512_setzero_ps();
    /* the prefetch of a block's slice, in 4 pieces spread over it */
    const size_t pf_piece = ((pf_step + 255) / 256) * 64;
    for (size_t b = 0; b < nb; b++) {
        const uint8_t *pfb = pf ? pf + b * pf_step : NULL;
        fx_qblk256 local;
        fx_qblk256 *u = mode == 0 ? &local : pk + b;
        const bool has_pre = T != KQ4 && T != KIQ4;
        __m512i pre[24];
        if (mode != 2) {
            head(T, g, b * bb, u);
            if (has_pre) prep(T, g, b * bb, pre);
        } else if (has_pre) {
            /* not read (mode 2 reads the kept quants); set, so that no
             * path reads an unset vector */
            FX_QUNROLL
            for (int i = 0; i < 24; i++) pre[i] = _mm512_setzero_si512();
        }
        __m512i P[FX_QXR];
        FX_QUNROLL
        for (int r = 0; r < XR; r++) P[r] = _mm512_setzero_si512();
        FX_QUNROLL
        for (int h = 0; h < 2; h++) {
            if (pfb)
                FX_QUNROLL
                for (int i = 0; i < 2; i++) {
                    const size_t o0 = (size_t)(2 * h + i) * pf_piece;
                    for (size_t o = o0; o < o0 + pf_piece && o < pf_step; o += 64)
                        _mm_prefetch((const char *)pfb + o, FX_QPF_HINT);
                }
            if (mode == 2) {
                dot_part(T, XR, u->q + 32 * h, u, h, x, b, P);
                continue;
            }
            /* up to 2 x rows: the sums straight from the transpose;
             * more: the quants through memory (a loop over them) */
            const int SXR = XR <= 2 ? XR : 0;
            __m512i qloc[32];
            ksink ks;
            ks.q = mode == 1 ? u->q + 32 * h : SXR ? NULL : qloc;
            ks.x = x;
            ks.b = b;
            FX_QUNROLL
            for (int r = 0; r < SXR; r++)
                FX_QUNROLL
                for (int j = 0; j < 8; j++) ks.S[r][j] = _mm512_setzero_si512();
            part(T, SXR, g, b * bb, h, has_pre ? pre : NULL, &ks);
            if (SXR) {
                const int half = T == KQ2 || T == KQ3 || T == KQ6 ? 8 : 4;
                FX_QUNROLL
                for (int j = 0; j < half; j++) {
                    const __m512i sc = u->sc[h * half + j];
                    FX_QUNROLL
                    for (int r = 0; r < SXR; r++)
                        P[r] = _mm512_add_epi32(
                            P[r], _mm512_mullo_epi32(
                                      sub_sum(T, h * half + j, ks.S[r][j]), sc));
                }
            } else {
                dot_part(T, XR, ks.q, u, h, x, b, P);
            }
        }
        dot_end(T, XR, u, x, b, P, acc);
    }
    FX_QUNROLL
    for (int r = 0; r < XR; r++) _mm512_mask_storeu_ps(yr[r], sm, acc[r]);
}

/* Two groups' kept blocks (pass mode 2's input) against FX_QXR x rows:
 * each x dword is broadcast once for both groups' vpdpbusd, half the
 * broadcasts of two single passes, and 16 sums are in flight instead of
 * 8. Per group the same integers and fmas as pass(), in the same order. */
FX_QINLINE FX_QV void pair(const int T, const fx_qblk256 *pa,
                           const fx_qblk256 *pb, const fx_qxrow *x, size_t nb,
                           float *const *ya, float *const *yb, __mmask16 sma,
                           __mmask16 smb) {
    const int spb = T == KQ2 || T == KQ3 || T == KQ6 ? 4 : 8;
    const int subs = 64 / spb; /* out of the loop head: UBSan's check of
                                  the division would detach the pragma */
    __m512 acc[2][FX_QXR];
    FX_QUNROLL
    for (int r = 0; r < FX_QXR; r++) acc[0][r] = acc[1][r] = _mm512_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        const fx_qblk256 *u[2] = {pa + b, pb + b};
        __m512i P[2][FX_QXR];
        FX_QUNROLL
        for (int r = 0; r < FX_QXR; r++) P[0][r] = P[1][r] = _mm512_setzero_si512();
        _Pragma("GCC unroll 1")
        for (int j = 0; j < subs; j++) {
            __m512i S[2][FX_QXR];
            FX_QUNROLL
            for (int r = 0; r < FX_QXR; r++) S[0][r] = S[1][r] = _mm512_setzero_si512();
            FX_QUNROLL
            for (int i = 0; i < spb; i++) {
                const int s = j * spb + i;
                const __m512i qa = u[0]->q[s], qb = u[1]->q[s];
                FX_QUNROLL
                for (int r = 0; r < FX_QXR; r++) {
                    const __m512i xb = _mm512_set1_epi32(
                        fx_qi32(x[r].q + 256 * b + 4 * (size_t)s));
                    S[0][r] = _mm512_dpbusd_epi32(S[0][r], qa, xb);
                    S[1][r] = _mm512_dpbusd_epi32(S[1][r], qb, xb);
                }
            }
            FX_QUNROLL
            for (int h = 0; h < 2; h++) {
                const __m512i sc = u[h]->sc[j];
                FX_QUNROLL
                for (int r = 0; r < FX_QXR; r++)
                    P[h][r] = _mm512_add_epi32(
                        P[h][r], _mm512_mullo_epi32(sub_sum(T, j, S[h][r]), sc));
            }
        }
        dot_end(T, FX_QXR, u[0], x, b, P[0], acc[0]);
        dot_end(T, FX_QXR, u[1], x, b, P[1], acc[1]);
    }
    FX_QUNROLL
    for (int r = 0; r < FX_QXR; r++) {
        _mm512_mask_storeu_ps(ya[r], sma, acc[0][r]);
        _mm512_mask_storeu_ps(yb[r], smb, acc[1][r]);
    }
}

static fx_wtype wtype_of(int T) {
    static const fx_wtype of[] = {FX_WTYPE_Q2_K, FX_WTYPE_Q3_K, FX_WTYPE_Q4_K,
                                  FX_WTYPE_Q5_K, FX_WTYPE_Q6_K, FX_WTYPE_IQ4_XS};
    return of[T];
}

#define FX_KPASS(T, XR)                                                      \
    static FX_QV void pass_##T##_##XR(                                       \
        const fx_qgrp *g, const fx_qxrow *x, size_t nb, size_t bb,           \
        void *pack, int mode, const uint8_t *pf, size_t pf_step,             \
        float *const *yr, __mmask16 sm) {                                    \
        /* on a copy: the compiler knows r16 in each branch, so the two    \
         * layouts are separate code with no test per load */              \
        fx_qgrp lg = *g;                                                     \
        if (lg.r16) {                                                        \
            const fx_qone_fn one = XR == 1 && mode == 0                      \
                                       ? fx_qone_avx512(wtype_of(T)) : NULL; \
            if (one) one(&lg, x, nb, pf, pf_step, yr[0], sm);                \
            else pass(T, XR, &lg, x, nb, bb, pack, mode, pf, pf_step, yr, sm); \
        } else {                                                             \
            lg.r16 = NULL;                                                   \
            pass(T, XR, &lg, x, nb, bb, pack, mode, pf, pf_step, yr, sm);    \
        }                                                                    \
    }
#define FX_KPASSES(T)                                                        \
    FX_KPASS(T, 1) FX_KPASS(T, 2) FX_KPASS(T, 4) FX_KPASS(T, 8)              \
    static const fx_qpass_fn passes_##T[4] = {pass_##T##_1, pass_##T##_2,    \
                                              pass_##T##_4, pass_##T##_8};   \
    static FX_QV void pair_##T(const void *pa, const void *pb,               \
                               const fx_qxrow *x, size_t nb,                 \
                               float *const *ya, float *const *yb,           \
                               __mmask16 sma, __mmask16 smb) {               \
        pair(T, (const fx_qblk256 *)pa, (const fx_qblk256 *)pb, x, nb, ya,   \
             yb, sma, smb);                                                  \
    }                                                                        \
    static void range_##T(const fx_mm_job *job, size_t n0, size_t n1,        \
                          float *scratch) {                                  \
        fx_qrange(job, n0, n1, scratch, FX_QK_K, sizeof(fx_qblk256), true,   \
                  passes_##T, pair_##T);                                     \
    }
FX_KPASSES(KQ2)
FX_KPASSES(KQ3)
FX_KPASSES(KQ4)
FX_KPASSES(KQ5)
FX_KPASSES(KQ6)
FX_KPASSES(KIQ4)

/* The same kernels read a 16-row group's fields with loads where g->r16
 * is set (qdot_avx512.h): fx_qrange sets it for a QR16 job's full groups. */
fx_mm_range_fn fx_qmm_avx512_k(fx_wtype t) {
    switch (t) {
    case FX_WTYPE_Q2_K: return range_KQ2;
    case FX_WTYPE_Q3_K: return range_KQ3;
    case FX_WTYPE_Q4_K: return range_KQ4;
    case FX_WTYPE_Q5_K: return range_KQ5;
    case FX_WTYPE_Q6_K: return range_KQ6;
    case FX_WTYPE_IQ4_XS: return range_KIQ4;
    default: return NULL;
    }
}

#else /* not x86-64 GCC/Clang: nothing here (ISO C wants a declaration) */

typedef int fx_qdot_avx512_k_empty;

#endif
