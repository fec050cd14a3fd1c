/*
 * The Q8_0 matmul with AVX-512 VNNI (vpdpbusd). Arithmetic as kernels.h
 * defines it, laid out as matmul_avx512.c lays out the float paths: a zmm
 * holds the 8 lanes of TWO outputs, y[m][n] low and y[m][n+1] high, and
 * one fma per block advances both.
 *
 * vpdpbusd multiplies unsigned by signed bytes, so the weights go in with
 * +128 (w ^ 0x80, an unsigned 0..255) against the signed activation
 * quants, and the accumulator starts at the row's correction nc = -128 *
 * (group sum of x): nc + sum (w + 128) x = sum w x, exactly (4 products of
 * at most 255 * 127 in an int32, no saturation). The group sums are the
 * same integers the portable and AVX2 forms compute, so the float steps
 * that follow see the same values.
 *
 * Two paths: up to 32 rows stream W from its storage, two rows per column
 * pair; more rows pack a group of columns (per pair and block: the +128
 * bytes of both rows, then their scales widened to a zmm) once and run
 * every chunk of rows over it.
 */
#include "matmul_impl.h"

#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>

#define FX_VNNI                                                              \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,"   \
                          "avx2,fma,f16c")))
#define FX_ALWAYS_INLINE static inline __attribute__((always_inline))
#define FX_UNROLL _Pragma("GCC unroll 8")
#define FX_MR_MAX 8
#define FX_NP_MAX 6

/* fx_cpu_has_*: lib/kernels/cpu.c */

enum { SRC_STREAM, SRC_PACKED };

/* A packed (pair, block): the 64 weight bytes (+128) of both rows, then
 * their 16 scales. */
#define FX_Q8_PK_BYTES 128

/* The scales of blocks b0 (low half) and b1 (high half), widened. */
FX_ALWAYS_INLINE FX_VNNI __m512 pair_scales(const uint8_t *b0,
                                            const uint8_t *b1) {
    uint16_t h0, h1;
    memcpy(&h0, b0, 2);
    memcpy(&h1, b1, 2);
    const __m128 f = _mm_cvtph_ps(
        _mm_cvtsi32_si128((int)((uint32_t)h0 | (uint32_t)h1 << 16)));
    return _mm512_permutexvar_ps(
        _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
        _mm512_castps128_ps512(f));
}

/* The 32 quants of blocks b0 (low) and b1 (high), +128. */
FX_ALWAYS_INLINE FX_VNNI __m512i pair_quants(const uint8_t *b0,
                                             const uint8_t *b1) {
    const __m512i q = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(b0 + 2))),
        _mm256_loadu_si256((const __m256i *)(b1 + 2)), 1);
    return _mm512_xor_si512(q, _mm512_set1_epi8((char)0x80));
}

/* Per 256-bit half: ((a0+a4) + (a2+a6)) + ((a1+a5) + (a3+a7)), as
 * matmul_avx512.c. */
FX_ALWAYS_INLINE FX_VNNI void reduce_pair(__m512 v, float *lo, float *hi) {
    __m512 s4 = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v,
                                                      _MM_SHUFFLE(2, 3, 0, 1)));
    __m512 s2 = _mm512_add_ps(s4, _mm512_permute_ps(s4,
                                                    _MM_SHUFFLE(3, 2, 3, 2)));
    __m512 s1 = _mm512_add_ps(s2, _mm512_permute_ps(s2,
                                                    _MM_SHUFFLE(1, 1, 1, 1)));
    *lo = _mm512_cvtss_f32(s1);
    *hi = _mm_cvtss_f32(_mm512_extractf32x4_ps(s1, 2));
}

/* All K of MR x rows (xr: quantized rows of k elements) against NP
 * column pairs, into yr[i][2j] and yr[i][2j+1]. SRC_STREAM: wr[2j],
 * wr[2j+1] are pair j's storage rows. SRC_PACKED: wr[j] is pair j's
 * packed blocks. half: the last pair has only its low column; its high
 * half is computed on a stand-in and never stored. */
FX_ALWAYS_INLINE FX_VNNI void tile(const int MR, const int NP, const int src,
                                   const uint8_t *const *xr, size_t k,
                                   const uint8_t *const *wr, bool half,
                                   const uint8_t *pf, size_t pf_lines,
                                   float *const *yr) {
    __m512 acc[FX_MR_MAX][FX_NP_MAX];
    FX_UNROLL
    for (int i = 0; i < MR; i++)
        FX_UNROLL
        for (int j = 0; j < NP; j++) acc[i][j] = _mm512_setzero_ps();
    const size_t nb = k / FX_QK8_0;
    for (size_t b = 0; b < nb; b++) {
        __m512i w[FX_NP_MAX];
        __m512 sc[FX_NP_MAX];
        if (src == SRC_PACKED) {
            FX_UNROLL
            for (int j = 0; j < NP; j++) {
                const uint8_t *p = wr[j] + b * FX_Q8_PK_BYTES;
                w[j] = _mm512_load_si512((const void *)p);
                sc[j] = _mm512_load_ps((const void *)(p + 64));
            }
        } else {
            const size_t off = b * sizeof(fx_block_q8_0);
            for (size_t l = 0; l < pf_lines; l++)
                _mm_prefetch((const char *)pf + (b * pf_lines + l) * 64,
                             _MM_HINT_T0);
            FX_UNROLL
            for (int j = 0; j < NP; j++) {
                const uint8_t *r0 = wr[2 * j] + off, *r1 = wr[2 * j + 1] + off;
                w[j] = pair_quants(r0, r1);
                sc[j] = pair_scales(r0, r1);
            }
        }
        FX_UNROLL
        for (int i = 0; i < MR; i++) {
            const __m512i xv = _mm512_broadcast_i64x4(
                _mm256_loadu_si256((const __m256i *)(xr[i] + FX_QK8_0 * b)));
            const __m512i nc = _mm512_broadcast_i64x4(
                _mm256_loadu_si256((const __m256i *)(xr[i] + k + 32 * b)));
            float dx;
            memcpy(&dx, xr[i] + 2 * k + b * sizeof dx, sizeof dx);
            const __m512 vdx = _mm512_set1_ps(dx);
            FX_UNROLL
            for (int j = 0; j < NP; j++) {
                const __m512i p = _mm512_dpbusd_epi32(nc, w[j], xv);
                acc[i][j] = _mm512_fmadd_ps(_mm512_mul_ps(sc[j], vdx),
                                            _mm512_cvtepi32_ps(p), acc[i][j]);
            }
        }
    }
    FX_UNROLL
    for (int i = 0; i < MR; i++)
        FX_UNROLL
        for (int j = 0; j < NP; j++) {
            float lo, hi;
            reduce_pair(acc[i][j], &lo, &hi);
            yr[i][2 * j] = lo;
            if (!(half && j == NP - 1)) yr[i][2 * j + 1] = hi;
        }
}

typedef void (*tile_fn)(const uint8_t *const *xr, size_t k,
                        const uint8_t *const *wr, bool half,
                        const uint8_t *pf, size_t pf_lines, float *const *yr);

/* One out-of-line function per (MR, NP, source): MR * NP accumulators,
 * NP weights and NP scales, x, its correction and scale, and two
 * temporaries stay within the 32 zmm registers. */
#define FX_TILE_FN(MR, NP, S, N)                                             \
    static FX_VNNI void t##MR##x##NP##_##N(                                 \
        const uint8_t *const *xr, size_t k, const uint8_t *const *wr,        \
        bool half, const uint8_t *pf, size_t pf_lines, float *const *yr) {   \
        tile(MR, NP, S, xr, k, wr, half, pf, pf_lines, yr);                  \
    }
#define FX_NP2(MR, S, N) FX_TILE_FN(MR, 1, S, N) FX_TILE_FN(MR, 2, S, N)
#define FX_NP3(MR, S, N) FX_NP2(MR, S, N) FX_TILE_FN(MR, 3, S, N)
#define FX_NP4(MR, S, N) FX_NP3(MR, S, N) FX_TILE_FN(MR, 4, S, N)
#define FX_NP6(MR, S, N)                                                     \
    FX_NP4(MR, S, N) FX_TILE_FN(MR, 5, S, N) FX_TILE_FN(MR, 6, S, N)
#define FX_TILES(S, N)                                                       \
    FX_NP6(1, S, N) FX_NP6(2, S, N) FX_NP4(3, S, N) FX_NP4(4, S, N)          \
    FX_NP3(5, S, N) FX_NP3(6, S, N) FX_NP2(7, S, N) FX_NP2(8, S, N)

FX_TILES(SRC_STREAM, s)
FX_TILES(SRC_PACKED, p)

/* The same set of shapes for R12 weights (tile_r12, below). */
#define FX_R12_NP2(MR) FX_R12_FN(MR, 1, _) FX_R12_FN(MR, 2, _)
#define FX_R12_NP3(MR) FX_R12_NP2(MR) FX_R12_FN(MR, 3, _)
#define FX_R12_NP4(MR) FX_R12_NP3(MR) FX_R12_FN(MR, 4, _)
#define FX_R12_NP6(MR) FX_R12_NP4(MR) FX_R12_FN(MR, 5, _) FX_R12_FN(MR, 6, _)
#define FX_R12_TILES                                                         \
    FX_R12_NP6(1) FX_R12_NP6(2) FX_R12_NP4(3) FX_R12_NP4(4) FX_R12_NP3(5)    \
    FX_R12_NP3(6) FX_R12_NP2(7) FX_R12_NP2(8)

#define FX_ROW2(MR, N) {t##MR##x1_##N, t##MR##x2_##N, 0, 0, 0, 0}
#define FX_ROW3(MR, N) {t##MR##x1_##N, t##MR##x2_##N, t##MR##x3_##N, 0, 0, 0}
#define FX_ROW4(MR, N)                                                       \
    {t##MR##x1_##N, t##MR##x2_##N, t##MR##x3_##N, t##MR##x4_##N, 0, 0}
#define FX_ROW6(MR, N)                                                       \
    {t##MR##x1_##N, t##MR##x2_##N, t##MR##x3_##N, t##MR##x4_##N,             \
     t##MR##x5_##N, t##MR##x6_##N}
#define FX_TABLE(N)                                                          \
    {FX_ROW6(1, N), FX_ROW6(2, N), FX_ROW4(3, N), FX_ROW4(4, N),             \
     FX_ROW3(5, N), FX_ROW3(6, N), FX_ROW2(7, N), FX_ROW2(8, N)}

/* [source][MR-1][NP-1], NP <= wide_np[MR-1]; read-only. */
static const tile_fn tiles[2][FX_MR_MAX][FX_NP_MAX] = {FX_TABLE(s),
                                                      FX_TABLE(p)};
static const size_t wide_np[FX_MR_MAX] = {6, 6, 4, 4, 3, 3, 2, 2};

static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

/* ---- R12 weights (kernels.h): a tile is one sequential stream ---- */

/* Software prefetch distance in the tile's stream, bytes. Measured with
 * the weights on huge pages (decode, binaries alternated, against 1024):
 * 2048 1.09 / 1.05 / 1.01x at 1 / 4 / 16 rows, 4096 1.03 / 1.09 / 1.13x,
 * one-row paired roofline fraction 0.54 -> 0.57 -> 0.63. (On 4 KiB pages,
 * before, 1024 had beaten 512 and 2048: a prefetch that crosses into an
 * unmapped page's TLB miss is cut short.) */
#ifndef FX_Q8_PF
#define FX_Q8_PF 4096
#endif

/* vpermps patterns: lanes 0-7 take scale 2p, lanes 8-15 scale 2p + 1. */
static const int32_t pair_lanes[FX_R12_ROWS / 2][16]
    __attribute__((aligned(64))) = {
        {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1},
        {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3},
        {4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5},
        {6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7},
        {8, 8, 8, 8, 8, 8, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9},
        {10, 10, 10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11, 11, 11}};

/* MR x rows against pairs p0..p0+NP-1 of the tile at `tile` (rows rows).
 * The same operations as tile() on the same values: a block's scales
 * come in one widening of all the tile's f16 scales, each pair's spread
 * over its two halves by a permute (exact). pf: also prefetch the stream
 * FX_Q8_PF bytes ahead (the first pass over a tile). */
FX_ALWAYS_INLINE FX_VNNI void tile_r12(const int MR, const int NP,
                                       const uint8_t *const *xr, size_t k,
                                       const uint8_t *tile, size_t rows,
                                       size_t p0, bool pf, float *const *yr) {
    __m512 acc[FX_MR_MAX][FX_NP_MAX];
    FX_UNROLL
    for (int i = 0; i < MR; i++)
        FX_UNROLL
        for (int j = 0; j < NP; j++) acc[i][j] = _mm512_setzero_ps();
    __m512i lanes[FX_NP_MAX];
    FX_UNROLL
    for (int j = 0; j < NP; j++)
        lanes[j] = _mm512_load_si512((const void *)pair_lanes[p0 + (size_t)j]);
    const size_t nb = k / FX_QK8_0, pair_bytes = rows / 2 * 64;
    const __mmask16 scale_mask = (__mmask16)((1u << rows) - 1);
    const uint8_t *pf_at = tile + FX_Q8_PF;
    for (size_t g = 0; g < nb; g += FX_R12_GROUP) {
        const size_t gb = min_sz(FX_R12_GROUP, nb - g);
        const uint8_t *scales = tile + g * rows * sizeof(fx_block_q8_0);
        const uint8_t *quants = scales + gb * rows * 2;
        for (size_t i = 0; i < gb; i++) {
            const size_t b = g + i;
            const uint8_t *qb = quants + i * pair_bytes + p0 * 64;
            if (pf) {
                const uint8_t *end = quants + (i + 1) * pair_bytes + FX_Q8_PF;
                for (; pf_at < end; pf_at += 64)
                    _mm_prefetch((const char *)pf_at, _MM_HINT_T0);
            }
            /* Masked: a small last tile's scales may end the matrix. */
            const __m512 s16 = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(
                scale_mask, (const void *)(scales + i * rows * 2)));
            __m512i w[FX_NP_MAX];
            FX_UNROLL
            for (int j = 0; j < NP; j++)
                w[j] = _mm512_loadu_si512((const void *)(qb + 64 * j));
            /* permute(s16 * dx) == permute(s16) * dx, bit for bit: one row
             * multiplies first and permutes per pair; more rows permute
             * once per pair (a cross-lane permute costs more than a
             * multiply) and multiply per row and pair. */
            __m512 sp[FX_NP_MAX];
            if (MR > 1) {
                FX_UNROLL
                for (int j = 0; j < NP; j++)
                    sp[j] = _mm512_permutexvar_ps(lanes[j], s16);
            }
            FX_UNROLL
            for (int r = 0; r < MR; r++) {
                const __m512i xv = _mm512_broadcast_i64x4(
                    _mm256_loadu_si256((const __m256i *)(xr[r] + FX_QK8_0 * b)));
                const __m512i nc = _mm512_broadcast_i64x4(_mm256_loadu_si256(
                    (const __m256i *)(xr[r] + k + 32 * b)));
                float dx;
                memcpy(&dx, xr[r] + 2 * k + b * sizeof dx, sizeof dx);
                const __m512 vdx = _mm512_set1_ps(dx);
                const __m512 sx = MR == 1 ? _mm512_mul_ps(s16, vdx) : s16;
                FX_UNROLL
                for (int j = 0; j < NP; j++) {
                    const __m512i p = _mm512_dpbusd_epi32(nc, w[j], xv);
                    const __m512 scale =
                        MR == 1 ? _mm512_permutexvar_ps(lanes[j], sx)
                                : _mm512_mul_ps(sp[j], vdx);
                    acc[r][j] = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(p),
                                                acc[r][j]);
                }
            }
        }
    }
    FX_UNROLL
    for (int r = 0; r < MR; r++)
        FX_UNROLL
        for (int j = 0; j < NP; j++)
            reduce_pair(acc[r][j], &yr[r][2 * j], &yr[r][2 * j + 1]);
}

typedef void (*tile_r12_fn)(const uint8_t *const *xr, size_t k,
                            const uint8_t *tile, size_t rows, size_t p0,
                            bool pf, float *const *yr);

#define FX_R12_FN(MR, NP, N)                                                 \
    static FX_VNNI void r##MR##x##NP(                                        \
        const uint8_t *const *xr, size_t k, const uint8_t *tile,             \
        size_t rows, size_t p0, bool pf, float *const *yr) {                 \
        tile_r12(MR, NP, xr, k, tile, rows, p0, pf, yr);                     \
    }
FX_R12_TILES

#define FX_R12_ROW2(MR) {r##MR##x1, r##MR##x2, 0, 0, 0, 0}
#define FX_R12_ROW3(MR) {r##MR##x1, r##MR##x2, r##MR##x3, 0, 0, 0}
#define FX_R12_ROW4(MR) {r##MR##x1, r##MR##x2, r##MR##x3, r##MR##x4, 0, 0}
#define FX_R12_ROW6(MR)                                                      \
    {r##MR##x1, r##MR##x2, r##MR##x3, r##MR##x4, r##MR##x5, r##MR##x6}
static const tile_r12_fn tiles_r12[FX_MR_MAX][FX_NP_MAX] = {
    FX_R12_ROW6(1), FX_R12_ROW6(2), FX_R12_ROW4(3), FX_R12_ROW4(4),
    FX_R12_ROW3(5), FX_R12_ROW3(6), FX_R12_ROW2(7), FX_R12_ROW2(8)};

/* Tiles in order, each read from memory once: the rows in chunks of 8,
 * later chunks finding the tile in L1/L2. n0 is a multiple of 12
 * (task_cols), n1 a multiple of 12 or the last row. */
static FX_VNNI void range_small_r12(const fx_mm_job *job, size_t n0,
                                    size_t n1) {
    const size_t nb = job->k / FX_QK8_0;
    for (size_t n = n0; n < n1; n += FX_R12_ROWS) {
        const size_t rows = min_sz(FX_R12_ROWS, job->n - n), pairs = rows / 2;
        const uint8_t *tile = job->w + n * nb * sizeof(fx_block_q8_0);
        for (size_t m = 0; m < job->m; m += FX_MR_MAX) {
            const size_t mr = min_sz(FX_MR_MAX, job->m - m);
            const size_t nw = wide_np[mr - 1];
            const uint8_t *xr[FX_MR_MAX];
            for (size_t i = 0; i < mr; i++)
                xr[i] = job->xq + (m + i) * job->xq_ld;
            for (size_t p = 0; p < pairs;) {
                const size_t np = min_sz(nw, pairs - p);
                float *yn[FX_MR_MAX];
                for (size_t i = 0; i < mr; i++)
                    yn[i] = job->y + (m + i) * job->ldy + n + 2 * p;
                tiles_r12[mr - 1][np - 1](xr, job->k, tile, rows, p,
                                          m == 0 && p == 0, yn);
                p += np;
            }
        }
    }
}

/* ---- small M: stream W once, straight from storage ---- */

/* W rows in groups (a multiple of every 2 * wide_np); x rows 8 at a
 * time, later chunks finding the group in L1/L2. */
#define FX_Q8_GROUP512 24

static FX_VNNI void range_small(const fx_mm_job *job, size_t n0, size_t n1) {
    for (size_t n = n0; n < n1; n += FX_Q8_GROUP512) {
        const size_t g = min_sz(FX_Q8_GROUP512, n1 - n);
        const size_t pairs = (g + 1) / 2, nb = job->k / FX_QK8_0;
        /* An odd last column pairs with itself; its twin is not stored. */
        const uint8_t *wr[FX_Q8_GROUP512 + 1] = {NULL};
        for (size_t j = 0; j < g; j++)
            wr[j] = job->w + (n + j) * job->row_bytes;
        wr[g] = wr[g - 1];
        for (size_t m = 0; m < job->m; m += FX_MR_MAX) {
            const size_t mr = min_sz(FX_MR_MAX, job->m - m);
            const size_t nw = wide_np[mr - 1];
            const uint8_t *xr[FX_MR_MAX];
            for (size_t i = 0; i < mr; i++)
                xr[i] = job->xq + (m + i) * job->xq_ld;
            for (size_t p = 0; p < pairs;) {
                const size_t np = min_sz(nw, pairs - p);
                const bool half = (g & 1) && p + np == pairs;
                float *yn[FX_MR_MAX];
                for (size_t i = 0; i < mr; i++)
                    yn[i] = job->y + (m + i) * job->ldy + n + 2 * p;
                /* While the first chunk of rows reads these columns, the
                 * same number of bytes further on (the next columns'
                 * rows, contiguous) are prefetched in address order, a
                 * few lines per block: one sequential stream for the
                 * hardware, not 12 interleaved ones. */
                const uint8_t *pf = wr[2 * p] + 2 * np * job->row_bytes;
                size_t lines = m == 0 ? (2 * np * job->row_bytes / 64 + nb - 1) / nb
                                      : 0;
                tiles[SRC_STREAM][mr - 1][np - 1](xr, job->k, wr + 2 * p, half,
                                                  pf, lines, yn);
                p += np;
            }
        }
    }
}

/* ---- more rows: the group packed once, every chunk of rows over it ---- */

/* Columns [n, n+nn) over all K into the panel: pair p's blocks at panel +
 * p * nb * FX_Q8_PK_BYTES. An odd last column pairs with itself. */
static FX_VNNI void pack_group(const fx_mm_job *job, size_t n, size_t nn,
                               uint8_t *panel) {
    const size_t nb = job->k / FX_QK8_0;
    for (size_t p = 0; p < (nn + 1) / 2; p++) {
        uint8_t *dst = panel + p * nb * FX_Q8_PK_BYTES;
        if (job->type == FX_WTYPE_Q8_0_R12) {
            /* n is even and N too: both rows of the pair are in one tile,
             * their quants already together, already +128. */
            for (size_t b = 0; b < nb; b++) {
                size_t q, d;
                fx_q8_r12_at(job->n, nb, n + 2 * p, b, &q, &d);
                _mm512_store_si512((void *)(dst + b * FX_Q8_PK_BYTES),
                                   _mm512_loadu_si512(
                                       (const void *)(job->w + q)));
                _mm512_store_ps((void *)(dst + b * FX_Q8_PK_BYTES + 64),
                                pair_scales(job->w + d, job->w + d + 2));
            }
            continue;
        }
        const uint8_t *r0 = job->w + (n + 2 * p) * job->row_bytes;
        const uint8_t *r1 = 2 * p + 1 < nn ? r0 + job->row_bytes : r0;
        for (size_t b = 0; b < nb; b++) {
            const size_t off = b * sizeof(fx_block_q8_0);
            _mm512_store_si512((void *)(dst + b * FX_Q8_PK_BYTES),
                               pair_quants(r0 + off, r1 + off));
            _mm512_store_ps((void *)(dst + b * FX_Q8_PK_BYTES + 64),
                            pair_scales(r0 + off, r1 + off));
        }
    }
}

/* Rows per chunk over a packed group, and column pairs per tile. */
#define FX_Q8_MR 6
#define FX_Q8_NP 3

/* Past one chunk of rows, streaming would widen the scales, gather the
 * pairs and offset the quants again for every chunk; packing does it
 * once per group. The packed group holds all of K (at K = 2816, 24
 * columns take 135 KiB: L2), so no partial sums are carried. Returns
 * false when not even one pair fits the scratch (huge K): then stream. */
static FX_VNNI bool range_packed(const fx_mm_job *job, size_t n0, size_t n1,
                                 float *scratch) {
    const size_t nb = job->k / FX_QK8_0;
    const size_t col_bytes = nb * FX_Q8_PK_BYTES / 2;
    size_t group = FX_MM_SCRATCH_FLOATS * sizeof(float) / col_bytes;
    if (group > FX_Q8_GROUP512) group = FX_Q8_GROUP512;
    group &= ~(size_t)1;
    if (group < 2) return false;
    uint8_t *panel = (uint8_t *)scratch;
    for (size_t n = n0; n < n1; n += group) {
        const size_t g = min_sz(group, n1 - n);
        const size_t pairs = (g + 1) / 2;
        pack_group(job, n, g, panel);
        for (size_t m = 0; m < job->m; m += FX_Q8_MR) {
            const size_t mr = min_sz(FX_Q8_MR, job->m - m);
            const uint8_t *xr[FX_Q8_MR];
            for (size_t i = 0; i < mr; i++)
                xr[i] = job->xq + (m + i) * job->xq_ld;
            for (size_t p = 0; p < pairs; p += FX_Q8_NP) {
                const size_t np = min_sz(FX_Q8_NP, pairs - p);
                const bool half = (g & 1) && p + np == pairs;
                const uint8_t *wr[FX_Q8_NP];
                for (size_t j = 0; j < np; j++)
                    wr[j] = panel + (p + j) * nb * FX_Q8_PK_BYTES;
                float *yn[FX_Q8_MR];
                for (size_t i = 0; i < mr; i++)
                    yn[i] = job->y + (m + i) * job->ldy + n + 2 * p;
                tiles[SRC_PACKED][mr - 1][np - 1](xr, job->k, wr, half, NULL, 0,
                                                  yn);
            }
        }
    }
    return true;
}

/* Rows up to this stream (in chunks of 8); more use the packed group.
 * Measured (1 thread, the 246M model's shapes): streaming was 1.3x faster
 * at 16 rows and even at 32; packing 1.3-1.6x faster at 128. */
#ifndef FX_Q8_STREAM_M
#define FX_Q8_STREAM_M 32
#endif

static FX_VNNI void range_vnni(const fx_mm_job *job, size_t n0, size_t n1,
                               float *scratch) {
    if (job->m > FX_Q8_STREAM_M && range_packed(job, n0, n1, scratch)) return;
    if (job->type == FX_WTYPE_Q8_0_R12) range_small_r12(job, n0, n1);
    else range_small(job, n0, n1);
}

fx_mm_range_fn fx_mm_q8_avx512_range(void) { return range_vnni; }

#else /* not x86-64 GCC/Clang */

bool fx_cpu_has_avx512_vnni(void) { return false; }
fx_mm_range_fn fx_mm_q8_avx512_range(void) { return NULL; }

#endif
