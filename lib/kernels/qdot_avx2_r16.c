/*
 * AVX2 kernels of Q4_K, Q5_K, Q6_K, Q4_0 and IQ4_XS in 16-row groups
 * (FX_WTYPE_QR16, quants.h):
 * a group's 64-byte line holds one dword of each of 16 rows, so its two
 * 32-byte halves give rows 0-7 and 8-15 one 32-bit lane each. A dword of
 * quants meets the x dword it needs broadcast (vpmaddubsw, then int16
 * sums), and a row's integers P and M come out in its own lane, exact:
 * no horizontal sums, no scale decoding per row, the fmas of quants.h 8
 * rows an instruction. On GGUF rows (qdot_avx2_k.c) those per-row steps,
 * not memory, set the speed at one x row.
 *
 * int16 bounds: |qx| <= 127 (the FX_XQ_* rules), so a vpmaddubsw pair is
 * at most 2 * 15 * 127 = 3810 for 4-bit quants (8 of them, a sub-block of
 * 32, sum to 30480), 7874 for 5-bit ones (4 sum) and 2 * 63 * 127 = 16002
 * for Q6_K's 6-bit ones (two sum to 32004): no saturation anywhere, so
 * the sums are exact. IQ4_XS's signed levels take each pair to int32.
 *
 * Up to 4 x rows share a pass over a half group (the quants unpacked once
 * for them); the next pass finds the group (16 rows x K) in L1 or L2.
 * From FX_R16_WIDE_M x rows the types of qdot_avx2_r16_wide.c go there.
 */
#include "qdot_avx2_r16.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

/* How far ahead a group prefetches the rows of a later one, and how:
 * the same distance as the AVX-512 readers (qdot_avx512.h). */
#ifndef FX_R16_PF_BYTES
#define FX_R16_PF_BYTES 16384
#endif
#ifndef FX_R16_PF_HINT
#define FX_R16_PF_HINT _MM_HINT_T1
#endif

static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

/* x rows at once over a half group: the quants are unpacked once for
 * them; more would not keep their sums in the 16 registers. */
#define FX_R16_MR 4

/* From this many x rows a type's wide kernel, where it has one, decodes
 * each block once for all of them (qdot_avx2_r16_wide.c). */
#ifndef FX_R16_WIDE_M
#define FX_R16_WIDE_M 16
#endif

/* A block's prefetch slice goes out as quants.h's two streams, B at the
 * slice + bd; slices they do not cover (the matrix's last groups) go a
 * line at a time. */
#define FX_R16_UNROLL_ALL _Pragma("GCC unroll 64")

/* Stream B's nb for units of U bytes, a full group's slice being 16 U:
 * its lines past 32; spread over S steps (one every S / nb), that
 * rounded up to a power of 2, at most S; S = 1: at the block's start. */
FX_ALWAYS_INLINE int pf_nb(size_t unit, int S) {
    const int past = fx_qr16_pf_past(unit);
    if (S == 1) return past;
    int nb = 1;
    while (nb < S && nb < past) nb *= 2;
    return nb;
}

/* The whole slice at the block's start: at more than one x row, where
 * the loop is bound by its arithmetic and prefetches spread over it cost
 * more than they gave, in Q6_K's (whose unrolled sums lose registers to
 * them), and where the streams do not fit (!fit; slice may be NULL). */
FX_ALWAYS_INLINE FX_AVX2 void prefetch_slice(const uint8_t *slice,
                                             size_t pf_step, bool fit,
                                             size_t bd, int nb) {
    if (fit) {
        /* opaque, or GCC makes each line's address a value kept (on the
         * stack) from block to block */
        __asm__("" : "+r"(slice));
        FX_R16_UNROLL_ALL
        for (int i = 0; i < 32; i++)
            _mm_prefetch((const char *)slice + 64 * i, FX_R16_PF_HINT);
        FX_R16_UNROLL_ALL
        for (int i = 0; i < nb; i++)
            _mm_prefetch((const char *)slice + bd + 64 * i, FX_R16_PF_HINT);
        return;
    }
    if (!slice) return;
    for (size_t o = 0; o < pf_step; o += 64)
        _mm_prefetch((const char *)slice + o, FX_R16_PF_HINT);
}

/* At one x row the loop streams from memory, and the streams go out
 * spread over the block's S steps (quants.h): step i's
 * share, A's 32 / S lines and B's one every S / nb steps, from *pa (the
 * slice; without one that fits, the block being read: in cache, a
 * wasted load a line and no branch). v, a vector of the step: *pa passes
 * through it, or the scheduler hoists them all to the block's start. */
FX_ALWAYS_INLINE FX_AVX2 void pf_lines(const uint8_t **pa, size_t bd, int i,
                                       int S, int nb, __m256i v) {
    __asm__("" : "+r"(*pa) : "x"(v));
    const char *p = (const char *)*pa;
    const int w = 32 / S;
    FX_R16_UNROLL
    for (int j = 0; j < w; j++)
        _mm_prefetch(p + 64 * (w * i + j), FX_R16_PF_HINT);
    if (i % (S / nb) == 0)
        _mm_prefetch(p + bd + 64 * (i / (S / nb)), FX_R16_PF_HINT);
}

/* MR x rows (xq[r]: FX_XQ_256 rows) against the 8 rows of half h of a
 * group of nb Q4_K (Q5_K: five) blocks (qdot_avx2_r16.h), into acc[r].
 * The int16 sums take 8 lines of 4-bit quants, 4 of 5-bit ones. */
FX_ALWAYS_INLINE FX_AVX2 void k45_half(const bool five, const int MR,
                                       const int NH, const uint8_t *g,
                                       const uint8_t *const *xq, size_t k,
                                       size_t nb, int h, const uint8_t *pf,
                                       size_t pf_step, __m256 *acc) {
    const size_t bb = five ? 176 : 144, s32 = fx_xq256_bsum32_at(k);
    const int run = five ? 4 : 8; /* lines an int16 sum takes */
    FX_R16_UNROLL
    for (int i = 0; i < NH * MR; i++) acc[i] = _mm256_setzero_ps();
    /* the slice spread over the block's 32 steps at one x row, in half
     * 0's pass (FX_R16_TWO gives half 1's none); else at its start */
    const bool spread = MR == 1 && h == 0;
    const int pnb = pf_nb(bb, spread ? 32 : 1);
    const bool fit = fx_qr16_pf_fits(pf, pf_step, pnb);
    const size_t bd = fit ? pf_step - 64 * (size_t)pnb : 0;
    for (size_t b = 0; b < nb; b++) {
        const size_t off = bb * b;
        const uint8_t *slice = pf ? pf + b * pf_step : NULL;
        const uint8_t *pa = fit ? slice : g + 16 * off;
        if (!spread || !fit) prefetch_slice(slice, pf_step, fit, bd, pnb);
        __m256i P[FX_R16_MR], M[FX_R16_MR];
        FX_R16_UNROLL
        for (int i = 0; i < NH * MR; i++) P[i] = _mm256_setzero_si256();
        FX_R16_UNROLL
        for (int c = 0; c < 4; c++) {
            __m256i lo[FX_R16_MR], hi[FX_R16_MR];
            FX_R16_UNROLL
            for (int t = 0; t < 8; t++) {
                FX_R16_UNROLL
                for (int hh = 0; hh < NH; hh++) {
                    __m256i vl, vh;
                    k45_quants(five, g, off, c, t, h + hh, &vl, &vh);
                    FX_R16_UNROLL
                    for (int r = 0; r < MR; r++)
                        k45_line(vl, vh, xq[r] + 256 * b + 64 * c + 4 * t,
                                 t % run == 0, &lo[hh * MR + r], &hi[hh * MR + r]);
                }
                if (spread) pf_lines(&pa, bd, 8 * c + t, 32, pnb, lo[0]);
                if (t % run != run - 1) continue;
                FX_R16_UNROLL
                for (int hh = 0; hh < NH; hh++) {
                    /* the scales decoded where they are used: at 4 x
                     * rows every register holds a sum */
                    __m256i sl, sh;
                    k45_scales(g, off, c, h + hh, &sl, &sh);
                    FX_R16_UNROLL
                    for (int r = 0; r < MR; r++)
                        k45_scaled(lo[hh * MR + r], hi[hh * MR + r], sl, sh,
                                   &P[hh * MR + r]);
                }
            }
        }
        FX_R16_UNROLL
        for (int hh = 0; hh < NH; hh++) {
            FX_R16_UNROLL
            for (int r = 0; r < MR; r++) M[hh * MR + r] = _mm256_setzero_si256();
            FX_R16_UNROLL
            for (int i = 0; i < 4; i++) {
                const __m256i mn = k45_min_pair(g, off, i, h + hh);
                FX_R16_UNROLL
                for (int r = 0; r < MR; r++)
                    M[hh * MR + r] = _mm256_add_epi32(
                        M[hh * MR + r],
                        _mm256_madd_epi16(mn, xdw(xq[r] + s32 + 16 * b + 4 * i)));
            }
            const __m256i h0 = half_line(g, off, 0, h + hh);
            const __m256 d = h2f(h0, false), dmin = h2f(h0, true);
            FX_R16_UNROLL
            for (int r = 0; r < MR; r++)
                acc[hh * MR + r] =
                    k45_fmas(acc[hh * MR + r], d, dmin, P[hh * MR + r],
                             M[hh * MR + r], f32_at(xq[r] + k + k / 8 + 4 * b));
        }
    }
}

/* One half at a time (Q4_K at one x row takes both: q4k_half_1). */
#define FX_R16_K45(NAME, FIVE)                                                \
    FX_ALWAYS_INLINE FX_AVX2 void NAME(const int MR, const uint8_t *g,        \
                                       const uint8_t *const *xq, size_t k,    \
                                       size_t nb, int h, const uint8_t *pf,   \
                                       size_t pf_step, __m256 *acc) {         \
        k45_half(FIVE, MR, 1, g, xq, k, nb, h, pf, pf_step, acc);             \
    }
FX_R16_K45(q4k_half, false)
FX_R16_K45(q5k_half, true)

/* MR x rows against half h of a group of nb Q6_K blocks
 * (qdot_avx2_r16.h), into acc[r]. */
FX_ALWAYS_INLINE FX_AVX2 void q6k_half(const int MR, const uint8_t *g,
                                       const uint8_t *const *xq, size_t k,
                                       size_t nb, int h, const uint8_t *pf,
                                       size_t pf_step, __m256 *acc) {
    FX_R16_UNROLL
    for (int r = 0; r < MR; r++) acc[r] = _mm256_setzero_ps();
    const int pnb = pf_nb(210, 1);
    const bool fit = fx_qr16_pf_fits(pf, pf_step, pnb);
    const size_t bd = fit ? pf_step - 64 * (size_t)pnb : 0;
    for (size_t b = 0; b < nb; b++) {
        prefetch_slice(pf ? pf + b * pf_step : NULL, pf_step, fit, bd, pnb);
        const size_t off = 210 * b;
        __m256i P[FX_R16_MR], C[FX_R16_MR];
        FX_R16_UNROLL
        for (int r = 0; r < MR; r++) P[r] = C[r] = _mm256_setzero_si256();
        FX_R16_UNROLL
        for (int i = 0; i < 4; i++) {
            const __m256i sd = half_line(g, off + 192, i, h);
            FX_R16_UNROLL
            for (int jj = 0; jj < 4; jj++) {
                const __m256i sc = q6k_scale(sd, jj);
                FX_R16_UNROLL
                for (int pr = 0; pr < 2; pr++) {
                    const int t = 4 * jj + 2 * pr;
                    const __m256i q0 = q6k_quants(g, off, i, t, h);
                    const __m256i q1 = q6k_quants(g, off, i, t + 1, h);
                    FX_R16_UNROLL
                    for (int r = 0; r < MR; r++)
                        q6k_lines(q0, q1, xq[r] + 256 * b + 64 * i + 4 * t, sc,
                                  &P[r]);
                }
            }
            /* the offset: 32 sum_j sc_j bsum_j, scales as int16 pairs */
            FX_R16_UNROLL
            for (int p = 0; p < 2; p++) {
                const __m256i sc = q6k_scale_pair(sd, p);
                FX_R16_UNROLL
                for (int r = 0; r < MR; r++)
                    C[r] = _mm256_add_epi32(
                        C[r], _mm256_madd_epi16(
                                  sc, xdw(xq[r] + k + 32 * b + 8 * i + 4 * p)));
            }
        }
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(
            (const __m128i *)(const void *)(g + 16 * (off + 208) + 16 * h)));
        FX_R16_UNROLL
        for (int r = 0; r < MR; r++)
            acc[r] = q6k_fma(acc[r], d, P[r], C[r], f32_at(xq[r] + k + k / 8 + 4 * b));
    }
}

/* Q4_0 in groups (qdot_avx2_r16.h): P = sum (q - 8) qx, the -8 sum qx
 * being FX_XQ_32's nc / 16 (exact). */
FX_ALWAYS_INLINE FX_AVX2 void q40_half(const int MR, const uint8_t *g,
                                       const uint8_t *const *xq, size_t k,
                                       size_t nb, int h, const uint8_t *pf,
                                       size_t pf_step, __m256 *acc) {
    const __m256i m4 = c8(0x0f0f0f0fu);
    FX_R16_UNROLL
    for (int r = 0; r < MR; r++) acc[r] = _mm256_setzero_ps();
    const bool spread = MR == 1 && h == 0; /* as in k45_half, 8 steps */
    const int pnb = pf_nb(144, spread ? 8 : 1);
    const bool fit = fx_qr16_pf_fits(pf, pf_step, pnb);
    const size_t bd = fit ? pf_step - 64 * (size_t)pnb : 0;
    for (size_t b = 0; b < nb; b += 8) {
        const size_t off = 18 * b;
        const uint8_t *slice = pf ? pf + b / 8 * pf_step : NULL;
        const uint8_t *pa = fit ? slice : g + 16 * off;
        if (!spread || !fit) prefetch_slice(slice, pf_step, fit, bd, pnb);
        FX_R16_UNROLL
        for (int j = 0; j < 8; j++) {
            const __m256 d = q40_d(g, off, j, h);
            __m256i q[4];
            FX_R16_UNROLL
            for (int i = 0; i < 4; i++) q[i] = q40_quants(g, off, j, i, h);
            if (spread) pf_lines(&pa, bd, j, 8, pnb, q[0]);
            __m256i lo[4], hi[4];
            FX_R16_UNROLL
            for (int i = 0; i < 4; i++) {
                lo[i] = _mm256_and_si256(q[i], m4);
                hi[i] = _mm256_and_si256(_mm256_srli_epi16(q[i], 4), m4);
            }
            FX_R16_UNROLL
            for (int r = 0; r < MR; r++)
                acc[r] = q40_block(lo, hi, d, xq[r], k, b + (size_t)j, acc[r]);
        }
    }
}

/* IQ4_XS in groups (qdot_avx2_r16.h). vpmaddubsw takes the levels as |w|
 * against x with w's sign; a pair of products reaches 2 * 127 * 127, so
 * every one goes to int32 at once, times the sub-block's scale. */
FX_ALWAYS_INLINE FX_AVX2 void xs_half(const int MR, const uint8_t *g,
                                      const uint8_t *const *xq, size_t k,
                                      size_t nb, int h, const uint8_t *pf,
                                      size_t pf_step, __m256 *acc) {
    const __m256i lut = xs_lut();
    FX_R16_UNROLL
    for (int r = 0; r < MR; r++) acc[r] = _mm256_setzero_ps();
    /* as in k45_half, 8 steps; stream B at the block's start, the loop
     * over j not being unrolled */
    const bool spread = MR == 1 && h == 0;
    const int pnb = pf_nb(136, 1);
    const bool fit = fx_qr16_pf_fits(pf, pf_step, pnb);
    const size_t bd = fit ? pf_step - 64 * (size_t)pnb : 0;
    for (size_t b = 0; b < nb; b++) {
        const size_t off = 136 * b;
        const uint8_t *slice = pf ? pf + b * pf_step : NULL;
        const uint8_t *pa = fit ? slice : g + 16 * off;
        if (!spread || !fit) prefetch_slice(slice, pf_step, fit, bd, pnb);
        if (spread) {
            FX_R16_UNROLL_ALL
            for (int i = 0; i < pnb; i++)
                _mm_prefetch((const char *)pa + bd + 64 * i, FX_R16_PF_HINT);
        }
        __m256i P[FX_R16_MR];
        FX_R16_UNROLL
        for (int r = 0; r < MR; r++) P[r] = _mm256_setzero_si256();
        for (int j = 0; j < 8; j++) {
            if (spread) { /* stream A, 4 lines a step */
                FX_R16_UNROLL
                for (int i = 0; i < 4; i++)
                    _mm_prefetch((const char *)pa + 256 * j + 64 * i, FX_R16_PF_HINT);
            }
            const __m256i sc = xs_scale(g, off, j, h);
            FX_R16_UNROLL
            for (int i = 0; i < 4; i++) {
                __m256i wl, wh;
                xs_levels(g, off, j, i, h, lut, &wl, &wh);
                const __m256i al = _mm256_abs_epi8(wl), ah = _mm256_abs_epi8(wh);
                FX_R16_UNROLL
                for (int r = 0; r < MR; r++)
                    xs_line(al, wl, ah, wh, xq[r] + 256 * b + 32 * (size_t)j + 4 * i,
                            sc, &P[r]);
            }
        }
        const __m256 d = h2f(half_line(g, off, 0, h), false);
        FX_R16_UNROLL
        for (int r = 0; r < MR; r++) {
            const __m256 dx = _mm256_set1_ps(f32_at(xq[r] + k + k / 8 + 4 * b));
            acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(d, dx),
                                     _mm256_cvtepi32_ps(P[r]), acc[r]);
        }
    }
}

/* A group (both halves) against MR x rows, acc[hh * MR + r] for half hh.
 * Q4_K's one-row kernel takes both halves in one pass (they share the x
 * broadcasts: 10% at one row); elsewhere that spilled, so the halves go
 * one after the other, the first prefetching the next group's slice for
 * both. */
typedef void (*group_fn)(const uint8_t *g, const uint8_t *const *xq, size_t k,
                         size_t nb, const uint8_t *pf, size_t pf_step,
                         __m256 *acc);

static FX_AVX2 void q4k_half_1(const uint8_t *g, const uint8_t *const *xq,
                               size_t k, size_t nb, const uint8_t *pf,
                               size_t pf_step, __m256 *acc) {
    k45_half(false, 1, 2, g, xq, k, nb, 0, pf, pf_step, acc);
}
#define FX_R16_EACH(NAME, MR)                                                 \
    static FX_AVX2 void NAME##_##MR(const uint8_t *g, const uint8_t *const *xq, \
                                    size_t k, size_t nb, const uint8_t *pf,   \
                                    size_t pf_step, __m256 *acc) {            \
        for (int hh = 0; hh < 2; hh++)                                        \
            NAME(MR, g, xq, k, nb, hh, hh ? NULL : pf, pf_step,               \
                 acc + hh * (MR));                                            \
    }
/* The one-row kernels with prefetch streams: the two passes written out,
 * so that half 1's, which has no slice, is compiled without them. */
#define FX_R16_TWO(NAME)                                                      \
    static FX_AVX2 void NAME##_1(const uint8_t *g, const uint8_t *const *xq,  \
                                 size_t k, size_t nb, const uint8_t *pf,      \
                                 size_t pf_step, __m256 *acc) {               \
        NAME(1, g, xq, k, nb, 0, pf, pf_step, acc);                           \
        NAME(1, g, xq, k, nb, 1, NULL, pf_step, acc + 1);                     \
    }
FX_R16_EACH(q4k_half, 2)
FX_R16_EACH(q4k_half, 4)
FX_R16_TWO(q5k_half)
FX_R16_EACH(q5k_half, 2)
FX_R16_EACH(q5k_half, 4)
FX_R16_TWO(q40_half)
FX_R16_EACH(q40_half, 2)
FX_R16_EACH(q40_half, 4)
FX_R16_TWO(xs_half)
FX_R16_EACH(xs_half, 2)
FX_R16_EACH(xs_half, 4)
FX_R16_EACH(q6k_half, 1)
FX_R16_EACH(q6k_half, 2)
FX_R16_EACH(q6k_half, 4)

/* Columns [n0, n1) (n0 at a group) of every x row: whole groups with the
 * half-group kernels, 4, 2 or 1 x rows a pass, the rows after the last
 * group (GGUF layout) with the base type's row kernel. A group's first
 * pass prefetches a later group's rows, a slice a block: a group's 16 rows
 * are one contiguous run, and a thread's tasks follow each other
 * (matmul.c), so the rows past the task are mostly its next one's. */
static FX_AVX2 void range_r16(const fx_mm_job *job, size_t n0, size_t n1,
                              float *scratch, const group_fn fns[3],
                              fx_r16_wide_fn wide, size_t blk_elems,
                              size_t pf_blocks) {
    const size_t k = job->k, nb = k / blk_elems, rb = job->row_bytes;
    const size_t n_pf = nb / pf_blocks; /* prefetch slices: one a unit */
    const size_t r16_end = job->n / 16 * 16;
    size_t ahead = FX_R16_PF_BYTES / (16 * rb);
    ahead = 16 * (ahead < 1 ? 1 : ahead > 8 ? 8 : ahead);
    for (const uint8_t *p = job->w + n0 * rb,
                       *e = job->w + min_sz(n1, n0 + ahead) * rb;
         p < e; p += 64)
        _mm_prefetch((const char *)p, FX_R16_PF_HINT);
    size_t n = n0;
    for (; n + 16 <= min_sz(n1, r16_end); n += 16) {
        const uint8_t *g = job->w + n * rb, *pf = NULL;
        if (wide && job->m >= FX_R16_WIDE_M) {
            wide(g, job, n, scratch);
            continue;
        }
        size_t pf_step = 0; /* a block's (unit's) slice */
        if (n + ahead < job->n)
            fx_qr16_pf_slices(job->w, job->n, rb, n + ahead,
                              min_sz(16, job->n - n - ahead), n_pf, &pf,
                              &pf_step);
        size_t mr;
        for (size_t m = 0; m < job->m; m += mr) {
            const int fi = job->m - m >= 4 ? 2 : job->m - m >= 2 ? 1 : 0;
            mr = (size_t)1 << fi;
            const uint8_t *xq[FX_R16_MR];
            for (size_t r = 0; r < mr; r++)
                xq[r] = job->xq + (m + r) * job->xq_ld;
            __m256 acc[2 * FX_R16_MR];
            fns[fi](g, xq, k, nb, m ? NULL : pf, pf_step, acc);
            for (size_t hh = 0; hh < 2; hh++)
                for (size_t r = 0; r < mr; r++)
                    _mm256_storeu_ps(job->y + (m + r) * job->ldy + n + 8 * hh,
                                     acc[hh * mr + r]);
        }
    }
    if (n < n1) {
        fx_mm_job rows = *job;
        rows.type = fx_wtype_qr16_base(job->type);
        job->qr16_rows(&rows, n, n1, scratch);
    }
}

/* A type's range function: its three group kernels, its block size and
 * blocks per prefetch slice (a unit: 8 for the 32-element types). */
#define FX_R16_RANGE(NAME, WIDE, BLK, UNIT)                                   \
    static FX_AVX2 void NAME##_range(const fx_mm_job *job, size_t n0,         \
                                     size_t n1, float *scratch) {             \
        static const group_fn fns[3] = {NAME##_half_1, NAME##_half_2,         \
                                        NAME##_half_4};                       \
        range_r16(job, n0, n1, scratch, fns, fx_r16_avx2_wide(WIDE), BLK,     \
                  UNIT);                                                      \
    }
FX_R16_RANGE(q4k, FX_WTYPE_Q4_K, FX_QK_K, 1)
FX_R16_RANGE(q5k, FX_WTYPE_Q5_K, FX_QK_K, 1)
FX_R16_RANGE(q40, FX_WTYPE_Q4_0, FX_QK32, 8)
FX_R16_RANGE(xs, FX_WTYPE_IQ4_XS, FX_QK_K, 1)
FX_R16_RANGE(q6k, FX_WTYPE_Q6_K, FX_QK_K, 1)

fx_mm_range_fn fx_qmm_avx2_qr16(fx_wtype t) {
    if (!fx_cpu_has_avx2()) return NULL;
    switch (t) {
    case FX_WTYPE_Q4_0: return q40_range;
    case FX_WTYPE_Q4_K: return q4k_range;
    case FX_WTYPE_Q5_K: return q5k_range;
    case FX_WTYPE_Q6_K: return q6k_range;
    case FX_WTYPE_IQ4_XS: return xs_range;
    default: return NULL;
    }
}

#else /* not x86-64 GCC/Clang */

fx_mm_range_fn fx_qmm_avx2_qr16(fx_wtype t) {
    (void)t;
    return NULL;
}

#endif
