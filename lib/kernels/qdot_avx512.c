/*
 * The block-quantized types' matmul with AVX-512 VNNI (vpdpbusd), on the
 * GGUF rows as they are (no repacking): the 32-element types here, the
 * 256-element ones in qdot_avx512_k.c, the driver (fx_qrange) for both.
 *
 * 16 weight rows at a time (a group), one per 32-bit lane. Each block of
 * the group is transposed in registers (fx_qt16, fx_qt64: loads and
 * unpack/shuffle steps; a gather, which costs what 30 shuffles do on Zen
 * 4, only for a 2-byte field of a 210- or 84-byte block and for a
 * 32-element type's last blocks short of 8) so that lane l of vector s
 * holds quants 4s..4s+3 of row l, as unsigned bytes. One vpdpbusd
 * against x's dword s broadcast then adds 4 products to each of the 16
 * rows' sums: the exact integer P of quants.h comes out per lane, and its
 * fmas (one or two per block, in block order) are 16 rows an
 * instruction. The unpacking (the transpose, nibbles, scales) is paid
 * once per block and group for up to 64 x rows: passes of 8, 4, 2 or 1 x
 * rows with their accumulators in registers, the first of several keeping
 * the unpacked blocks in the scratch for the others. With 1 or 2 x rows
 * the quants go from the transpose to the vpdpbusd in registers.
 *
 * Offsets: a quant stored as u with the weight's integer u - c gives
 * sum (u - c) qx = sum u qx - c sum qx; FX_XQ_32's nc = -128 sum qx gives
 * the second term exactly (Q4_0: nc / 16, Q5_0: nc / 8, IQ4_NL's levels
 * + 128: nc, Q4_1 and Q5_1's M = -sum qx: nc / 128; arithmetic shifts of
 * a multiple of 128, exact).
 *
 * Memory: a group's rows are 16 streams, which the hardware prefetcher
 * follows poorly; a later group of the range, one contiguous run of 16
 * rows, is prefetched in software while this one is computed, a slice a
 * block (FX_QPF_BYTES).
 */
#include "qdot_avx512.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

/* x rows at a time over a group: their quants stay in L2 (128 rows of K
 * = 2816: 380 KB, next to two groups' unpacked blocks, 140 KB) while the
 * group's blocks are unpacked once for them: a 128-token prompt once. */
#define FX_QMBLOCK 128

/* The largest gather offset (a test build lowers it to reach the
 * one-row groups). */
#ifndef FX_QIDX_MAX
#define FX_QIDX_MAX INT32_MAX
#endif

static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

/* x rows m .. m + xr - 1 of the job, and their outputs at column n. */
static void x_rows(const fx_mm_job *job, size_t m, size_t xr, size_t n,
                   bool xq256, fx_qxrow *x, float **yr) {
    const size_t k = job->k;
    for (size_t r = 0; r < xr; r++) {
        const uint8_t *row = job->xq + (m + r) * job->xq_ld;
        x[r].q = row;
        x[r].s = row + k;
        x[r].d = row + k + (xq256 ? k / 8 : 4 * (k / FX_QK32));
        x[r].s32 = xq256 ? row + fx_xq256_bsum32_at(k) : NULL;
        yr[r] = job->y + (m + r) * job->ldy + n;
    }
}

/* The pass function of the largest power of two up to 8 rows in left. */
static int pass_index(size_t left) {
    return left >= 8 ? 3 : left >= 4 ? 2 : left >= 2 ? 1 : 0;
}

/* One group (16 rows, lanes sm), column n, against x rows [m, m1) in
 * passes, each reading the blocks kept in pack (mode 2) or, with mode 0,
 * unpacking its own. */
static void group_rows(const fx_mm_job *job, const fx_qgrp *g, size_t n,
                       __mmask16 sm, size_t m, size_t m1, size_t nb,
                       size_t bb, void *pack, int mode, bool xq256,
                       const fx_qpass_fn *fns) {
    size_t xr;
    for (; m < m1; m += xr) {
        const int fi = pass_index(m1 - m);
        xr = (size_t)1 << fi;
        fx_qxrow x[FX_QXR];
        float *yr[FX_QXR];
        x_rows(job, m, xr, n, xq256, x, yr);
        fns[fi](g, x, nb, bb, pack, mode, NULL, 0, yr, sm);
    }
}

/* What the group at column c prefetches: a later group's rows (ahead
 * columns on), a slice a block, past the range too: a thread takes its
 * share's tasks in order, so the rows after this task are mostly its next
 * one's (only at the share's end another core's: one distance of wasted
 * reads). NULL and 0 past the matrix. */
static void group_prefetch(const fx_mm_job *job, size_t c, size_t ahead,
                           size_t grp, size_t nb, const uint8_t **pf,
                           size_t *pf_step) {
    *pf = NULL;
    *pf_step = 0;
    if (FX_QPF_BYTES == 0 || c + ahead >= job->n) return;
    fx_qr16_pf_slices(job->w, job->n, job->row_bytes, c + ahead,
                      min_sz(grp, job->n - c - ahead), nb, pf, pf_step);
}

void fx_qrange(const fx_mm_job *job, size_t n0, size_t n1, float *scratch,
               size_t blk, size_t usize, bool xq256, const fx_qpass_fn *fns,
               fx_qpair_fn pair) {
    if (n0 >= n1) return;
    const size_t k = job->k, nb = k / blk, rb = job->row_bytes;
    const size_t bb = rb / nb;
    /* The gathers' offsets are int32: rows too long for that (K above
     * 10^8) go one a group, every lane the same row. */
    const size_t grp = 15 * rb > (size_t)FX_QIDX_MAX ? 1 : 16;
    /* A QR16 job's full groups (n0 is at one: matmul.c's chunks) are read
     * in place with loads; the rows after them are in the GGUF layout. */
    const size_t r16_end = fx_wtype_is_qr16(job->type) ? job->n / 16 * 16 : 0;
    /* Unpacked blocks for the passes after the first, 64-aligned (the
     * scratch is 32-aligned), if a group's fit; two groups' for pairs. */
    uint8_t *pack = (uint8_t *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    const size_t sbytes = FX_MM_SCRATCH_FLOATS * sizeof(float);
    const size_t room = sbytes > 64 ? sbytes - 64 : 0;
    const bool can_pack = nb * usize <= room;
    const bool can_pair = pair && 2 * nb * usize <= room;
    uint8_t *pack_b = pack + nb * usize;
    /* Prefetch distance: whole groups, about FX_QPF_BYTES ahead. */
    size_t pf_groups = FX_QPF_BYTES / (grp * rb);
    pf_groups = pf_groups < 1 ? 1 : pf_groups > 8 ? 8 : pf_groups;
    /* The range's first groups, which no earlier group prefetched (a
     * task of 96 columns is 6 groups: without this the first two ran
     * unprefetched, a quarter less bandwidth over a task). */
    if (FX_QPF_BYTES > 0) {
        const uint8_t *p0 = job->w + n0 * rb;
        const uint8_t *p1 = job->w + min_sz(n1, n0 + grp * pf_groups) * rb;
        for (; p0 < p1; p0 += 64) _mm_prefetch((const char *)p0, FX_QPF_HINT);
    }
    /* One x row (the decode step) over whole groups in place: the type's
     * one-row kernel group after group, as the loop below would call it,
     * without that loop's per-group set-up (lane pointers, the pass's
     * copy of them): a sixth of the kernel's time at K = 1024. */
    const fx_qone_fn one =
        job->m == 1 && n0 + 16 <= r16_end
            ? fx_qone_avx512(fx_wtype_qr16_base(job->type)) : NULL;
    if (one) {
        fx_qxrow x;
        float *y;
        x_rows(job, 0, 1, n0, xq256, &x, &y);
        fx_qgrp g;
        memset(&g, 0, sizeof g);
        for (const size_t end = min_sz(n1, r16_end); n0 + 16 <= end;
             n0 += 16, y += 16) {
            const uint8_t *pf;
            size_t pf_step;
            group_prefetch(job, n0, grp * pf_groups, grp, nb, &pf, &pf_step);
            g.r16 = job->w + n0 * rb;
            one(&g, &x, nb, pf, pf_step, y, 0xffff);
        }
    }
    size_t step;
    for (size_t n = n0; n < n1; n += step) {
        /* g[0] this group; g[1] the next one, when the two go as a pair:
         * both whole groups of 16, with 8-row passes after the first */
        fx_qgrp g[2];
        __mmask16 sm[2];
        const uint8_t *pf[2];
        size_t pf_step[2];
        step = n < r16_end ? 16 : grp;
        /* grp == 16: the next group steps 16 too, whatever its layout,
         * so the pair covers exactly 32 columns */
        const bool paired = can_pair && grp == 16 && step == 16 &&
                            n + 16 < n1 && job->m >= 16;
        const int ng = paired ? 2 : 1;
        for (int i = 0; i < ng; i++) {
            const size_t c = n + 16 * (size_t)i;
            const size_t st = c < r16_end ? 16 : grp;
            const size_t rows = min_sz(st, n1 - c);
            g[i].r16 = c < r16_end ? job->w + c * rb : NULL;
            for (size_t l = 0; l < 16; l++) {
                const size_t r = min_sz(l, rows - 1);
                g[i].rp[l] = job->w + (c + r) * rb;
                g[i].idx[l] = (int32_t)(g[i].r16 ? 0 : r * rb);
            }
            sm[i] = (__mmask16)((1u << rows) - 1u);
            group_prefetch(job, c, grp * pf_groups, grp, nb, &pf[i],
                           &pf_step[i]);
        }
        if (paired) step = 32;
        for (size_t m0 = 0; m0 < job->m; m0 += FX_QMBLOCK) {
            const size_t m1 = min_sz(job->m, m0 + FX_QMBLOCK);
            /* The first pass of each group: 8, 4, 2 or 1 rows, unpacking
             * (and keeping the blocks for the passes after it) */
            const int f0 = pass_index(m1 - m0);
            const size_t first = (size_t)1 << f0;
            const bool more = m1 - m0 > first && can_pack;
            for (int i = 0; i < ng; i++) {
                fx_qxrow x[FX_QXR];
                float *yr[FX_QXR];
                x_rows(job, m0, first, n + 16 * (size_t)i, xq256, x, yr);
                fns[f0](&g[i], x, nb, bb, i ? pack_b : pack, more ? 1 : 0,
                        pf[i], pf_step[i], yr, sm[i]);
            }
            size_t m = m0 + first;
            if (paired && more) {
                /* 8 x rows at a time against both groups' kept blocks */
                for (; m1 - m >= FX_QXR; m += FX_QXR) {
                    fx_qxrow x[FX_QXR];
                    float *ya[FX_QXR], *yb[FX_QXR];
                    x_rows(job, m, FX_QXR, n, xq256, x, ya);
                    for (size_t r = 0; r < FX_QXR; r++) yb[r] = ya[r] + 16;
                    pair(pack, pack_b, x, nb, ya, yb, sm[0], sm[1]);
                }
            }
            for (int i = 0; i < ng && m < m1; i++)
                group_rows(job, &g[i], n + 16 * (size_t)i, sm[i], m, m1, nb,
                           bb, i ? pack_b : pack, more ? 2 : 0, xq256, fns);
        }
    }
}

/* ---- the 32-element types ---- */

enum { T40, T41, T50, T51, TNL };

/* Low and high nibbles of the 4 dwords of qs (16 bytes at off): element
 * i (i < 16) low nibble of byte i, i + 16 its high nibble. */
FX_QINLINE FX_QV void nibbles(const fx_qgrp *g, size_t off, fx_qblk32 *u) {
    __m512i v[4];
    fx_qt16(g, off, v);
    const __m512i m4 = fx_qc(0x0f0f0f0f);
    FX_QUNROLL
    for (int t = 0; t < 4; t++) {
        u->q[t] = _mm512_and_si512(v[t], m4);
        u->q[4 + t] = _mm512_and_si512(_mm512_srli_epi32(v[t], 4), m4);
    }
}

/* Bit i of each row's qh (a dword per lane) as 16 added to quant i:
 * byte s / 2 of the dword copied to its 4 bytes, tested per byte. */
FX_QINLINE FX_QV void high_bits(__m512i qh, fx_qblk32 *u) {
    const __m512i base = _mm512_set_epi32(
        0x0c0c0c0c, 0x08080808, 0x04040404, 0, 0x0c0c0c0c, 0x08080808,
        0x04040404, 0, 0x0c0c0c0c, 0x08080808, 0x04040404, 0, 0x0c0c0c0c,
        0x08080808, 0x04040404, 0);
    const __m512i sixteen = _mm512_set1_epi8(16);
    FX_QUNROLL
    for (int s = 0; s < 8; s++) {
        const __m512i rep = _mm512_shuffle_epi8(
            qh, _mm512_add_epi32(base, fx_qc(0x01010101u * (unsigned)(s / 2))));
        const __mmask64 k = _mm512_test_epi8_mask(
            rep, fx_qc(0x08040201u << (4 * (s % 2))));
        u->q[s] = _mm512_mask_add_epi8(u->q[s], k, u->q[s], sixteen);
    }
}

FX_QINLINE FX_QV void unpack32(const int T, const fx_qgrp *g, size_t off,
                               fx_qblk32 *u) {
    switch (T) {
    case T40:
    case TNL: {
        nibbles(g, off + 2, u);
        u->d = fx_qh2f_lo(fx_qgather(g, off));
        if (T == TNL) {
            const __m512i lut = fx_qkv_lut();
            FX_QUNROLL
            for (int s = 0; s < 8; s++) u->q[s] = _mm512_shuffle_epi8(lut, u->q[s]);
        }
        break;
    }
    case T41: {
        nibbles(g, off + 4, u);
        const __m512i dm = fx_qgather(g, off);
        u->d = fx_qh2f_lo(dm);
        u->dm = fx_qh2f_hi(dm);
        break;
    }
    case T50:
        nibbles(g, off + 6, u);
        high_bits(fx_qgather(g, off + 2), u);
        u->d = fx_qh2f_lo(fx_qgather(g, off));
        break;
    default: { /* T51 */
        nibbles(g, off + 8, u);
        high_bits(fx_qgather(g, off + 4), u);
        const __m512i dm = fx_qgather(g, off);
        u->d = fx_qh2f_lo(dm);
        u->dm = fx_qh2f_hi(dm);
        break;
    }
    }
}

FX_QINLINE FX_QV void dot32(const int T, const int XR, const fx_qblk32 *u,
                            const fx_qxrow *x, size_t b, __m512 *acc) {
    __m512i S[FX_QXR];
    FX_QUNROLL
    for (int r = 0; r < XR; r++) {
        const __m512i nc = _mm512_set1_epi32(fx_qi32(x[r].s + 4 * b));
        S[r] = T == T40   ? _mm512_srai_epi32(nc, 4)
               : T == T50 ? _mm512_srai_epi32(nc, 3)
               : T == TNL ? nc
                          : _mm512_setzero_si512();
    }
    FX_QUNROLL
    for (int s = 0; s < 8; s++) {
        const __m512i q = u->q[s];
        FX_QUNROLL
        for (int r = 0; r < XR; r++)
            S[r] = _mm512_dpbusd_epi32(
                S[r], q, _mm512_set1_epi32(fx_qi32(x[r].q + 32 * b + 4 * (size_t)s)));
    }
    FX_QUNROLL
    for (int r = 0; r < XR; r++) {
        const __m512 dx = _mm512_set1_ps(fx_qf32(x[r].d + 4 * b));
        acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(u->d, dx),
                                 _mm512_cvtepi32_ps(S[r]), acc[r]);
        if (T == T41 || T == T51) {
            const __m512i m = _mm512_srai_epi32(
                _mm512_set1_epi32(fx_qi32(x[r].s + 4 * b)), 7);
            acc[r] = _mm512_fnmadd_ps(_mm512_mul_ps(u->dm, dx),
                                      _mm512_cvtepi32_ps(m), acc[r]);
        }
    }
}

/* The dword at byte `at` of the transposed run D (at even: a dword, or
 * the halves of two). */
FX_QINLINE FX_QV __m512i dword_at(const __m512i *D, int at) {
    if (at % 4 == 0) return D[at / 4];
    return _mm512_or_si512(_mm512_srli_epi32(D[at / 4], 16),
                           _mm512_slli_epi32(D[at / 4 + 1], 16));
}

/* The f16 at byte `at` (even) of D, as f32. */
FX_QINLINE FX_QV __m512 half_at(const __m512i *D, int at) {
    return at % 4 == 0 ? fx_qh2f_lo(D[at / 4]) : fx_qh2f_hi(D[at / 4]);
}

/* 8 blocks at a time (8 * 18..24 bytes: whole dwords): 64- and 16-byte
 * transposes cover the run, and each block's fields come out of its
 * vectors (realigned by shifts where a block starts mid-dword) instead of
 * a gather a field and block (a third of a Q4_0 block's time at one x
 * row). Each block goes to the dot product as it is unpacked (and into
 * keep[j], if not NULL). */
FX_QINLINE FX_QV void eight(const int T, const int XR, const fx_qgrp *g,
                            size_t off, const fx_qxrow *x, size_t b,
                            fx_qblk32 *keep, const uint8_t *pf,
                            size_t pf_step, __m512 *acc) {
    const int bb = T == T40 || T == TNL ? 18 : T == T41 ? 20 : T == T50 ? 22 : 24;
    /* 8 * bb bytes: 16-byte pieces, 4 at a time where they can */
    __m512i D[48];
    const int pieces = bb / 2;
    FX_QUNROLL
    for (int p = 0; p < pieces; p += p + 4 <= pieces ? 4 : 1) {
        if (p + 4 <= pieces) fx_qt64(g, off + 16 * (size_t)p, D + 4 * p);
        else fx_qt16(g, off + 16 * (size_t)p, D + 4 * p);
    }
    const __m512i m4 = fx_qc(0x0f0f0f0f);
    const __m512i lut = fx_qkv_lut();
    FX_QUNROLL
    for (int j = 0; j < 8; j++) {
        if (pf && j > 0)
            for (size_t o = 0; o < pf_step; o += 64)
                _mm_prefetch((const char *)pf + (b + (size_t)j) * pf_step + o,
                             FX_QPF_HINT);
        const int at = bb * j;
        const int qs_at = at + (T == T40 || T == TNL ? 2 : T == T41 ? 4
                                : T == T50 ? 6 : 8);
        fx_qblk32 u;
        u.d = half_at(D, at);
        if (T == T41 || T == T51) u.dm = half_at(D, at + 2);
        FX_QUNROLL
        for (int i = 0; i < 4; i++) {
            const __m512i qs = dword_at(D, qs_at + 4 * i);
            __m512i lo = _mm512_and_si512(qs, m4);
            __m512i hi = _mm512_and_si512(_mm512_srli_epi32(qs, 4), m4);
            if (T == TNL) {
                lo = _mm512_shuffle_epi8(lut, lo);
                hi = _mm512_shuffle_epi8(lut, hi);
            }
            u.q[i] = lo;
            u.q[4 + i] = hi;
        }
        if (T == T50 || T == T51)
            high_bits(dword_at(D, at + (T == T50 ? 2 : 4)), &u);
        if (keep) keep[j] = u;
        dot32(T, XR, &u, x, b + (size_t)j, acc);
    }
}

FX_QINLINE FX_QV void pass32(const int T, const int XR, const fx_qgrp *g,
                             const fx_qxrow *x, size_t nb, size_t bb,
                             void *pack, int mode, const uint8_t *pf,
                             size_t pf_step, float *const *yr, __mmask16 sm) {
    fx_qblk32 *pk = (fx_qblk32 *)pack;
    __m512 acc[FX_QXR];
    FX_QUNROLL
    for (int r = 0; r < XR; r++) acc[r] = _mm512_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        if (pf)
            for (size_t o = 0; o < pf_step; o += 64)
                _mm_prefetch((const char *)pf + b * pf_step + o, FX_QPF_HINT);
        if (mode != 2 && nb - b >= 8 && b % 8 == 0) {
            eight(T, XR, g, b * bb, x, b, mode == 1 ? pk + b : NULL, pf,
                    pf_step, acc);
            b += 7;
            continue;
        }
        fx_qblk32 local;
        const fx_qblk32 *u;
        if (mode == 2) {
            u = pk + b;
        } else {
            unpack32(T, g, b * bb, &local);
            if (mode == 1) pk[b] = local;
            u = &local;
        }
        dot32(T, XR, u, x, b, acc);
    }
    FX_QUNROLL
    for (int r = 0; r < XR; r++) _mm512_mask_storeu_ps(yr[r], sm, acc[r]);
}

#define FX_QPASS(T, XR)                                                      \
    static FX_QV void pass_##T##_##XR(                                       \
        const fx_qgrp *g, const fx_qxrow *x, size_t nb, size_t bb,           \
        void *pack, int mode, const uint8_t *pf, size_t pf_step,             \
        float *const *yr, __mmask16 sm) {                                    \
        fx_qgrp lg = *g; /* as FX_KPASS in qdot_avx512_k.c */                \
        if (lg.r16) {                                                        \
            pass32(T, XR, &lg, x, nb, bb, pack, mode, pf, pf_step, yr, sm);  \
        } else {                                                             \
            lg.r16 = NULL;                                                   \
            pass32(T, XR, &lg, x, nb, bb, pack, mode, pf, pf_step, yr, sm);  \
        }                                                                    \
    }
#define FX_QPASSES(T)                                                        \
    FX_QPASS(T, 1) FX_QPASS(T, 2) FX_QPASS(T, 4) FX_QPASS(T, 8)              \
    static const fx_qpass_fn passes_##T[4] = {pass_##T##_1, pass_##T##_2,    \
                                              pass_##T##_4, pass_##T##_8};   \
    static void range_##T(const fx_mm_job *job, size_t n0, size_t n1,        \
                          float *scratch) {                                  \
        fx_qrange(job, n0, n1, scratch, FX_QK32, sizeof(fx_qblk32), false,   \
                  passes_##T, NULL);                                         \
    }
FX_QPASSES(T40)
FX_QPASSES(T41)
FX_QPASSES(T50)
FX_QPASSES(T51)
FX_QPASSES(TNL)

fx_mm_range_fn fx_qmm_avx512_qr16(fx_wtype t) {
    /* Q3_K's fields straddle dwords: not laid out in groups (quants.h) */
    return t == FX_WTYPE_Q3_K ? NULL : fx_qmm_avx512(t);
}

fx_mm_range_fn fx_qmm_avx512(fx_wtype t) {
    if (!fx_cpu_has_avx512_vnni()) return NULL;
    switch (t) {
    case FX_WTYPE_Q4_0: return range_T40;
    case FX_WTYPE_Q4_1: return range_T41;
    case FX_WTYPE_Q5_0: return range_T50;
    case FX_WTYPE_Q5_1: return range_T51;
    case FX_WTYPE_IQ4_NL: return range_TNL;
    default: return fx_qmm_avx512_k(t);
    }
}

#else /* not x86-64 GCC/Clang */

fx_mm_range_fn fx_qmm_avx512(fx_wtype t) {
    (void)t;
    return NULL;
}

fx_mm_range_fn fx_qmm_avx512_qr16(fx_wtype t) {
    (void)t;
    return NULL;
}

#endif
