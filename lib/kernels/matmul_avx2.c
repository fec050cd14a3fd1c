/*
 * AVX2 + FMA + F16C matmul. Every function carries its own target
 * attribute so the library is built for the baseline ISA and this code
 * runs only after fx_cpu_has_avx2() said yes.
 *
 * One ymm accumulator holds the 8 lanes of one output y[m][n] (lane j takes
 * k = j mod 8), which is the reduction order kernels.h defines. Every
 * call, whatever M, streams the W rows in place (no packing) through one
 * MR x NR register tile family (up to 4 x rows by 3 w rows = 12
 * accumulators + 3 weight registers, or the wide 1x6 / 2x4), full K per
 * output: one output is one tile's lanes, never partial sums. Up to 4 x
 * rows a tile's W rows are taken far apart, one forward stream each
 * (range_streams); above, the same in groups that L2 keeps for the next
 * x rows (range_groups). No packed large-M path, unlike AVX-512: with
 * AVX2's smaller L2 the packing copies cost more than they save.
 */
#include "matmul_impl.h"

#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>

#define FX_AVX2 __attribute__((target("avx2,fma,f16c")))
#define FX_ALWAYS_INLINE static inline __attribute__((always_inline))
/* The tile loops must unroll fully so the accumulators live in registers
 * (-O2 alone leaves them on the stack). */
#define FX_UNROLL _Pragma("GCC unroll 6")
/* Widest tile: with few x rows, more W rows must be in flight, since each
 * output's 8 lanes are ONE dependency chain of fmas (the contract) and
 * only independent outputs can hide the fma latency. */
#define FX_NR_MAX 6

/* fx_cpu_has_*: lib/kernels/cpu.c */

/* ---- weights to f32, 8 at a time (all conversions exact) ---- */

/* 8 weights of row starting at element k (k % 8 == 0, k + 8 <= K). */
FX_ALWAYS_INLINE FX_AVX2 __m256 load_w8(fx_wtype t, const uint8_t *row,
                                        size_t k) {
    switch (t) {
    case FX_WTYPE_F16:
        return _mm256_cvtph_ps(
            _mm_loadu_si128((const __m128i *)(row + 2 * k)));
    case FX_WTYPE_BF16:
        return _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_cvtepu16_epi32(
                _mm_loadu_si128((const __m128i *)(row + 2 * k))),
            16));
    case FX_WTYPE_F32:
    default:
        return _mm256_loadu_ps((const float *)(const void *)row + k);
    }
}

/* The last rem (1..7) weights from element k, lanes >= rem set to -0.0f
 * (see the padding rule in kernels.h). */
FX_ALWAYS_INLINE FX_AVX2 __m256 load_w_tail(fx_wtype t, const uint8_t *row,
                                            size_t k, size_t rem) {
    if (t == FX_WTYPE_F16 || t == FX_WTYPE_BF16) {
        uint16_t buf[8] = {0x8000, 0x8000, 0x8000, 0x8000,
                           0x8000, 0x8000, 0x8000, 0x8000};
        memcpy(buf, row + 2 * k, 2 * rem);
        __m128i h = _mm_loadu_si128((const __m128i *)buf);
        if (t == FX_WTYPE_F16) return _mm256_cvtph_ps(h);
        return _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    float buf[8] = {-0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f};
    memcpy(buf, row + 4 * k, 4 * rem);
    return _mm256_loadu_ps(buf);
}

/* x lanes >= rem are +0.0f; maskload reads nothing past the row. */
FX_ALWAYS_INLINE FX_AVX2 __m256 load_x_tail(const float *x, size_t rem) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)rem), idx);
    return _mm256_maskload_ps(x, mask);
}

/* ((a0+a4) + (a2+a6)) + ((a1+a5) + (a3+a7)), operands in that order. */
FX_ALWAYS_INLINE FX_AVX2 float reduce8(__m256 v) {
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v),
                           _mm256_extractf128_ps(v, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
    return _mm_cvtss_f32(s1);
}

/* ---- the register tile ---- */

/* Accumulates k in [0, kn) of MR x rows and NR w rows into acc. xr/wr
 * point at element 0 of the slab. kn may end in a partial group of 8.
 * Unless pf_dist is 0, each row is prefetched pf_dist bytes ahead of its
 * loads: where the caller reads next (the next row of each stream, in
 * range_streams and range_groups). Unless pf_row is NULL, that row too,
 * at the same element as the loads (a row of the next group, in
 * range_groups). Prefetches change no bits. */
FX_ALWAYS_INLINE FX_AVX2 void tile_k(const int MR, const int NR, fx_wtype t,
                                     const float *const *xr,
                                     const uint8_t *const *wr, size_t kn,
                                     size_t pf_dist, const uint8_t *pf_row,
                                     __m256 acc[4][FX_NR_MAX]) {
    size_t k = 0;
    const size_t esize = t == FX_WTYPE_F32 ? 4 : 2;
    /* The callers ask for it for F16 and BF16 only (F32 rows on huge
     * pages stream faster on the hardware prefetcher alone); into L2
     * only, as lines prefetched into L1 left it before their use. */
    for (; k + 8 <= kn; k += 8) {
        __m256 wv[FX_NR_MAX];
        if (pf_dist) {
            FX_UNROLL
            for (int j = 0; j < NR; j++)
                _mm_prefetch((const char *)wr[j] + esize * k + pf_dist,
                             _MM_HINT_T1);
        }
        if (pf_row)
            _mm_prefetch((const char *)pf_row + esize * k, _MM_HINT_T1);
        FX_UNROLL
        for (int j = 0; j < NR; j++) wv[j] = load_w8(t, wr[j], k);
        FX_UNROLL
        for (int i = 0; i < MR; i++) {
            __m256 xv = _mm256_loadu_ps(xr[i] + k);
            FX_UNROLL
            for (int j = 0; j < NR; j++)
                acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
        }
    }
    if (k < kn) {
        size_t rem = kn - k;
        __m256 wv[FX_NR_MAX];
        FX_UNROLL
        for (int j = 0; j < NR; j++) wv[j] = load_w_tail(t, wr[j], k, rem);
        FX_UNROLL
        for (int i = 0; i < MR; i++) {
            __m256 xv = load_x_tail(xr[i] + k, rem);
            FX_UNROLL
            for (int j = 0; j < NR; j++)
                acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
        }
    }
}

/* One tile over all of K, reduced into y (yr[i][j]). tile_k runs with
 * its prefetch arguments as constants where they are 0 / NULL, so those
 * copies have no test in the k loop: GCC (-O2 and -O3) does not unswitch
 * the loop on them, and the two tests and a taken jump per 8 k slow
 * the F32 4x3 tile down noticeably. */
FX_ALWAYS_INLINE FX_AVX2 void tile(const int MR, const int NR, fx_wtype t,
                                   const float *const *xr,
                                   const uint8_t *const *wr, size_t kn,
                                   size_t pf_dist, const uint8_t *pf_row,
                                   float *const *yr, size_t ys) {
    __m256 acc[4][FX_NR_MAX];
    FX_UNROLL
    for (int i = 0; i < MR; i++)
        FX_UNROLL
        for (int j = 0; j < NR; j++) acc[i][j] = _mm256_setzero_ps();
    if (!pf_dist && !pf_row)
        tile_k(MR, NR, t, xr, wr, kn, 0, NULL, acc);
    else if (!pf_dist)
        tile_k(MR, NR, t, xr, wr, kn, 0, pf_row, acc);
    else if (!pf_row)
        tile_k(MR, NR, t, xr, wr, kn, pf_dist, NULL, acc);
    else
        tile_k(MR, NR, t, xr, wr, kn, pf_dist, pf_row, acc);
    FX_UNROLL
    for (int i = 0; i < MR; i++)
        FX_UNROLL
        for (int j = 0; j < NR; j++) yr[i][(size_t)j * ys] = reduce8(acc[i][j]);
}

/* One out-of-line function per (MR, NR, type) so each gets its own
 * register allocation with every loop above fully unrolled. */
#define FX_TILE_FN(MR, NR, T, NAME)                                          \
    static FX_AVX2 void tile_##MR##x##NR##_##NAME(                          \
        const float *const *xr, const uint8_t *const *wr, size_t kn,         \
        size_t pf_dist, const uint8_t *pf_row, float *const *yr, size_t ys) {\
        tile(MR, NR, T, xr, wr, kn, pf_dist, pf_row, yr, ys);                \
    }
#define FX_TILE_ROW(MR, T, NAME)                                             \
    FX_TILE_FN(MR, 1, T, NAME) FX_TILE_FN(MR, 2, T, NAME)                    \
    FX_TILE_FN(MR, 3, T, NAME)
#define FX_TILE_TYPE(T, NAME)                                                \
    FX_TILE_ROW(1, T, NAME) FX_TILE_ROW(2, T, NAME)                          \
    FX_TILE_ROW(3, T, NAME) FX_TILE_ROW(4, T, NAME)

FX_TILE_TYPE(FX_WTYPE_F32, f32)
FX_TILE_TYPE(FX_WTYPE_F16, f16)
FX_TILE_TYPE(FX_WTYPE_BF16, bf16)

/* The wide tiles: 1x6, 2x4 (3x3 and 4x3 are in tiles[]).
 * Wider ones (1x8, 2x6, 3x4) run out of the 16 ymm registers and spill
 * accumulators, which puts a store-load on the fma chain. */
#define FX_TILE_WIDE(T, NAME)                                                \
    FX_TILE_FN(1, 6, T, NAME) FX_TILE_FN(2, 4, T, NAME)

FX_TILE_WIDE(FX_WTYPE_F32, f32)
FX_TILE_WIDE(FX_WTYPE_F16, f16)
FX_TILE_WIDE(FX_WTYPE_BF16, bf16)

typedef void (*tile_fn)(const float *const *xr, const uint8_t *const *wr,
                        size_t kn, size_t pf_dist, const uint8_t *pf_row,
                        float *const *yr,
                        size_t ys);

#define FX_TILE_TABLE(NAME)                                                  \
    {{tile_1x1_##NAME, tile_1x2_##NAME, tile_1x3_##NAME},                    \
     {tile_2x1_##NAME, tile_2x2_##NAME, tile_2x3_##NAME},                    \
     {tile_3x1_##NAME, tile_3x2_##NAME, tile_3x3_##NAME},                    \
     {tile_4x1_##NAME, tile_4x2_##NAME, tile_4x3_##NAME}}

/* [type index][MR-1][NR-1]; read-only. (Q8_0 is in matmul_q8.c.) */
static const tile_fn tiles[3][4][3] = {
    FX_TILE_TABLE(f32), FX_TILE_TABLE(f16), FX_TILE_TABLE(bf16)};

#define FX_WIDE_ROW(NAME)                                                    \
    {tile_1x6_##NAME, tile_2x4_##NAME, tile_3x3_##NAME, tile_4x3_##NAME}

/* [type index][MR-1], NR = wide_nr[MR-1]; read-only. */
static const tile_fn wide[3][4] = {FX_WIDE_ROW(f32), FX_WIDE_ROW(f16),
                                   FX_WIDE_ROW(bf16)};
static const size_t wide_nr[4] = {6, 4, 3, 3};

static int type_index(fx_wtype t) {
    switch (t) {
    case FX_WTYPE_F16: return 1;
    case FX_WTYPE_BF16: return 2;
    case FX_WTYPE_F32:
    default: return 0;
    }
}

static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

/* ---- stream W once, straight from its storage type ---- */

/* x rows m..m+mr-1 and their outputs' rows. */
static void chunk_rows(const fx_mm_job *job, size_t m, size_t mr,
                       const float **xr, float **yr) {
    for (size_t i = 0; i < mr; i++) {
        xr[i] = job->x + (m + i) * job->ldx;
        yr[i] = job->y + (m + i) * job->ldy;
    }
}

/* Up to 4 x rows, where W is read once and nothing of it is reused:
 * the widest tile's NR rows are NR streams far apart. Row r of stream j
 * is row n0 + j * s + r (s = the range's rows / NR), so each stream walks
 * forward through consecutive rows, one long sequential read, where
 * tiles of NR adjacent rows would read NR streams of one row each
 * (2 KiB of F16 at K = 1024), too short for the hardware prefetcher.
 * The rows left over (< NR) go through the 3-row tiles. Same bits:
 * each output is still one tile's lanes over all of K. */
static FX_AVX2 void range_streams(const fx_mm_job *job, size_t n0,
                                  size_t n1) {
    const int ti = type_index(job->type);
    const size_t mr = job->m, nw = wide_nr[mr - 1];
    const size_t s = (n1 - n0) / nw;
    const float *xr[4];
    float *yr[4];
    chunk_rows(job, 0, mr, xr, yr);
    /* F16 and BF16: the next row of each stream (tile_k). */
    const size_t pf = job->type != FX_WTYPE_F32 ? job->row_bytes : 0;
    for (size_t r = 0; r < s; r++) {
        const uint8_t *wr[FX_NR_MAX];
        float *yn[4];
        for (size_t j = 0; j < nw; j++)
            wr[j] = job->w + (n0 + j * s + r) * job->row_bytes;
        for (size_t i = 0; i < mr; i++) yn[i] = yr[i] + n0 + r;
        wide[ti][mr - 1](xr, wr, job->k, pf, NULL, yn, s);
    }
    for (size_t n = n0 + nw * s; n < n1; n += 3) {
        const size_t nr = min_sz(3, n1 - n);
        const uint8_t *wr[3];
        float *yn[4];
        for (size_t j = 0; j < nr; j++)
            wr[j] = job->w + (n + j) * job->row_bytes;
        for (size_t i = 0; i < mr; i++) yn[i] = yr[i] + n;
        tiles[ti][mr - 1][nr - 1](xr, wr, job->k, 0, NULL, yn, 1);
    }
}

/* More than 4 x rows: the 4x3 tile (or 1x3..3x3 for the last x rows)
 * reads 3 streams of W rows far apart, as range_streams does, in groups:
 * stream j's rows r..r+FX_MM_GROUP_ROWS-1 (rows n0 + j * s + r, s = the
 * range's rows / 3) are read from memory by the first 4 x rows and found
 * in L2 by every later chunk of 4 (24 F32 rows of K = 4096 are 384 KiB).
 * The rows left over (< 3) are a last group of their own. Same bits:
 * each output is one tile's lanes over all of K.
 * F32 with 9 x rows or more: while the first three chunks of x rows
 * compute from a group, each tile of chunk c also prefetches into L2 the
 * row of stream c that the same tile reads in the next group (pf_row):
 * the next group arrives while this one computes, instead of the first
 * chunk of every group waiting for memory and the later ones leaving it
 * idle. F16 and BF16 keep only their first chunk's prefetch one row
 * ahead: the group prefetch did not help them. */
#define FX_MM_GROUP_ROWS 8

/* x rows per block of range_groups: x_block_bytes of them, a multiple
 * of 4 (the tile's rows), at least 4. Every row group of W meets all x
 * rows of a block, block by block (W is read once per block): where x
 * and W together outgrow the last-level cache, a task would otherwise
 * fetch all of x from memory for each of its row groups. */
static size_t x_block_rows(const fx_mm_job *job) {
    const size_t rows = job->x_block_bytes / (job->k * sizeof(float)) &
                        ~(size_t)3;
    return rows < 4 ? 4 : rows;
}

static FX_AVX2 void range_groups(const fx_mm_job *job, size_t n0,
                                 size_t n1) {
    const int ti = type_index(job->type);
    const size_t s = (n1 - n0) / 3, n_left = n0 + 3 * s, left = n1 - n_left;
    /* F16 and BF16, while the group comes from memory: the next row of
     * each stream (tile_k). F32: the next group, see above. */
    const bool f32 = job->type == FX_WTYPE_F32;
    const size_t pf_first = f32 ? 0 : job->row_bytes;
    const float *xr[4];
    float *yr[4], *yn[4];
    const uint8_t *wr[3];
    const size_t mblk = x_block_rows(job);
    for (size_t mb0 = 0; mb0 < job->m; mb0 += mblk) {
        const size_t mb1 = min_sz(mb0 + mblk, job->m);
        for (size_t r0 = 0; r0 < s; r0 += FX_MM_GROUP_ROWS) {
            const size_t r1 = min_sz(r0 + FX_MM_GROUP_ROWS, s);
            const bool pf_next = f32 && mb1 - mb0 > 8;
            for (size_t m = mb0; m < mb1; m += 4) {
                const size_t mr = min_sz(4, mb1 - m);
                const size_t c = (m - mb0) / 4;
                chunk_rows(job, m, mr, xr, yr);
                for (size_t r = r0; r < r1; r++) {
                    for (size_t j = 0; j < 3; j++)
                        wr[j] = job->w + (n0 + j * s + r) * job->row_bytes;
                    for (size_t i = 0; i < mr; i++) yn[i] = yr[i] + n0 + r;
                    const size_t rn = r + FX_MM_GROUP_ROWS;
                    const uint8_t *pf_row =
                        pf_next && c < 3 && rn < s
                            ? job->w + (n0 + c * s + rn) * job->row_bytes
                            : NULL;
                    tiles[ti][mr - 1][2](xr, wr, job->k, c == 0 ? pf_first : 0,
                                         pf_row, yn, s);
                }
            }
        }
    }
    if (left == 0) return;
    for (size_t j = 0; j < left; j++)
        wr[j] = job->w + (n_left + j) * job->row_bytes;
    for (size_t m = 0; m < job->m; m += 4) {
        const size_t mr = min_sz(4, job->m - m);
        chunk_rows(job, m, mr, xr, yr);
        for (size_t i = 0; i < mr; i++) yn[i] = yr[i] + n_left;
        tiles[ti][mr - 1][left - 1](xr, wr, job->k, 0, NULL, yn, 1);
    }
}

static FX_AVX2 void range_avx2(const fx_mm_job *job, size_t n0, size_t n1,
                               float *scratch) {
    /* R12 floats only come from a CPU with the AVX-512 path
     * (fx_kernels_prefer_r12); here, for tests, the same bits slowly. */
    if (fx_wtype_is_r12(job->type)) {
        fx_mm_range_portable(job, n0, n1, scratch);
        return;
    }
    if (job->m <= 4)
        range_streams(job, n0, n1);
    else
        range_groups(job, n0, n1);
}

fx_mm_range_fn fx_mm_avx2_range(void) { return range_avx2; }

#else /* not x86-64 GCC/Clang */

fx_mm_range_fn fx_mm_avx2_range(void) { return NULL; }

#endif
