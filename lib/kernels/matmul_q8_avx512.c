/*
 * The Q8_0 matmul with AVX-512 VNNI (vpdpbusd) on R16 weights (kernels.h
 * gives the arithmetic and the layout). Plain Q8_0 rows -- weights used
 * straight from a mapped file -- go to the AVX2 form, which handles both
 * layouts with the same bits.
 *
 * A 64-byte line of an R16 tile holds quants 4j..4j+3 of a block for 16
 * rows. vpdpbusd multiplies its unsigned bytes (the weights, stored +128)
 * by x's 4 signed quants broadcast to every lane, and adds the 4 products
 * into each row's int32: 8 lines later a zmm holds 16 rows' block sums.
 * The accumulator starts at the block's correction nc = -128 * (sum of
 * x's 32 quants), so nc + sum (w + 128) x = sum w x, exactly (at most
 * 32 * 255 * 127 in magnitude before the correction: no overflow). Then
 * one fma per block: acc = fma(f32(dw) * dx, (float)p, acc), 16 rows at a
 * time, in block order -- the definition, lane by lane.
 *
 * Per weight byte that is a load and a vpdpbusd per 64 bytes and x row;
 * the float work is per 544 bytes. The pair layout before this one spent
 * a convert, a permute and an fma per 64 bytes besides, and at one row it
 * fell behind memory on this machine class (kernels.h has the numbers).
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

/* x rows per pass over a tile: MR int and MR float accumulators (twice
 * the int ones at one or two rows), a weight line and the scales stay
 * within the 32 zmm registers. */
#define FX_MR_MAX 8

/* Software prefetch distance in a tile's stream, bytes. The hardware
 * prefetcher alone kept one core at ~0.8 of what a read pass gets;
 * 2-4 KB ahead brought the kernel to the read pass (2 threads, 256 MB,
 * in one process, alternated): 0 44, 2048 54, 4096 54, 8192 50 GB/s. */
#ifndef FX_Q8_PF
#define FX_Q8_PF 4096
#endif

/* x rows at a time over every tile of a range, so that their quants stay
 * in L2 (64 rows of K = 2816: 220 KB) while the tiles stream past; more
 * rows read the range's weights again per 64 (1/64 of the x traffic). */
#define FX_Q8_MBLOCK 64

/* Where x row r's pieces are (matmul_impl.h): quants, corrections, scales. */
typedef struct xrow {
    const uint8_t *q, *nc, *dx;
} xrow;

/* 4 bytes of the quantized row (memcpy: the buffer is bytes; it compiles
 * to the broadcast operand of the vpdpbusd). */
FX_ALWAYS_INLINE int32_t i32_at(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

FX_ALWAYS_INLINE float f32_at(const uint8_t *p) {
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* MR x rows against the tile at `tile` (rows rows, all K): y[r][i] for
 * the tile's row i, stored where store_mask has bit i. FULL: rows == 16,
 * no masks on the loads. pf: prefetch the stream FX_Q8_PF bytes ahead
 * (the first pass over a tile). */
FX_ALWAYS_INLINE FX_VNNI void tile16(const int MR, const bool FULL,
                                     const xrow *xr, size_t nb,
                                     const uint8_t *tile, size_t rows,
                                     bool pf, __mmask16 store_mask,
                                     float *const *yr) {
    /* One or two rows: two int chains per row (even and odd lines), so
     * the vpdpbusd latency never paces the stream. */
    enum { SPLIT_MAX = 2 };
    const int split = MR <= 2 ? 2 : 1;
    const __mmask16 rm = FULL ? (__mmask16)0xffff
                              : (__mmask16)((1u << rows) - 1u);
    __m512 acc[FX_MR_MAX];
    FX_UNROLL
    for (int r = 0; r < MR; r++) acc[r] = _mm512_setzero_ps();
    const size_t line = 4 * rows, block_bytes = 32 * rows;
    const uint8_t *pf_at = tile + FX_Q8_PF;
    for (size_t g = 0; g < nb; g += FX_R16_GROUP) {
        const size_t gb = nb - g < FX_R16_GROUP ? nb - g : FX_R16_GROUP;
        const uint8_t *scales = tile + g * rows * sizeof(fx_block_q8_0);
        const uint8_t *quants = scales + gb * rows * 2;
        if (pf) {
            const uint8_t *end = quants + gb * block_bytes + FX_Q8_PF;
            for (; pf_at < end; pf_at += 64)
                _mm_prefetch((const char *)pf_at, _MM_HINT_T0);
        }
        for (size_t i = 0; i < gb; i++) {
            const size_t b = g + i;
            const uint8_t *qb = quants + i * block_bytes;
            __m512i p[FX_MR_MAX][SPLIT_MAX];
            FX_UNROLL
            for (int r = 0; r < MR; r++) {
                p[r][0] = _mm512_set1_epi32(i32_at(xr[r].nc + 4 * b));
                if (split == 2) p[r][1] = _mm512_setzero_si512();
            }
            FX_UNROLL
            for (int j = 0; j < 8; j++) {
                const void *at = qb + (size_t)j * line;
                const __m512i w = FULL ? _mm512_loadu_si512(at)
                                       : _mm512_maskz_loadu_epi32(rm, at);
                FX_UNROLL
                for (int r = 0; r < MR; r++) {
                    __m512i *dst = &p[r][split == 2 ? (j & 1) : 0];
                    *dst = _mm512_dpbusd_epi32(
                        *dst, w, _mm512_set1_epi32(i32_at(xr[r].q + 32 * b + 4 * j)));
                }
            }
            const void *sb = scales + i * rows * 2;
            const __m512 s16 = _mm512_cvtph_ps(
                FULL ? _mm256_loadu_si256((const __m256i *)sb)
                     : _mm256_maskz_loadu_epi16(rm, sb));
            FX_UNROLL
            for (int r = 0; r < MR; r++) {
                const __m512i sum = split == 2
                                        ? _mm512_add_epi32(p[r][0], p[r][1])
                                        : p[r][0];
                acc[r] = _mm512_fmadd_ps(
                    _mm512_mul_ps(s16, _mm512_set1_ps(f32_at(xr[r].dx + 4 * b))),
                    _mm512_cvtepi32_ps(sum), acc[r]);
            }
        }
    }
    FX_UNROLL
    for (int r = 0; r < MR; r++)
        _mm512_mask_storeu_ps(yr[r], store_mask, acc[r]);
}

typedef void (*tile_fn)(const xrow *xr, size_t nb, const uint8_t *tile,
                        size_t rows, bool pf, __mmask16 store_mask,
                        float *const *yr);

#define FX_TILE_FN(MR)                                                       \
    static FX_VNNI void full##MR(const xrow *xr, size_t nb,                  \
                                 const uint8_t *tile, size_t rows, bool pf,  \
                                 __mmask16 sm, float *const *yr) {           \
        tile16(MR, true, xr, nb, tile, rows, pf, sm, yr);                    \
    }                                                                        \
    static FX_VNNI void part##MR(const xrow *xr, size_t nb,                  \
                                 const uint8_t *tile, size_t rows, bool pf,  \
                                 __mmask16 sm, float *const *yr) {           \
        tile16(MR, false, xr, nb, tile, rows, pf, sm, yr);                   \
    }
FX_TILE_FN(1) FX_TILE_FN(2) FX_TILE_FN(3) FX_TILE_FN(4)
FX_TILE_FN(5) FX_TILE_FN(6) FX_TILE_FN(7) FX_TILE_FN(8)

/* [full or partial tile][MR - 1]; read-only. */
static const tile_fn tiles[2][FX_MR_MAX] = {
    {full1, full2, full3, full4, full5, full6, full7, full8},
    {part1, part2, part3, part4, part5, part6, part7, part8}};

static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

/* Columns [n0, n1): the tiles they touch, in order, each read from memory
 * once per FX_Q8_MBLOCK x rows, x rows 8 at a time over it (later chunks
 * find the tile in L1/L2). A range that starts or ends inside a tile
 * (the caller's tasks start at tiles; only a direct call would not)
 * computes the whole tile and stores its part. */
static FX_VNNI void range_r16(const fx_mm_job *job, size_t n0, size_t n1) {
    const size_t k = job->k, nb = k / FX_QK8_0;
    const size_t tile_bytes = FX_R16_ROWS * nb * sizeof(fx_block_q8_0);
    for (size_t m0 = 0; m0 < job->m; m0 += FX_Q8_MBLOCK) {
        const size_t m1 = min_sz(job->m, m0 + FX_Q8_MBLOCK);
        for (size_t t0 = n0 / FX_R16_ROWS * FX_R16_ROWS; t0 < n1;
             t0 += FX_R16_ROWS) {
            const size_t rows = min_sz(FX_R16_ROWS, job->n - t0);
            const size_t lo = n0 > t0 ? n0 - t0 : 0;
            const size_t hi = min_sz(rows, n1 - t0);
            const __mmask16 store_mask =
                (__mmask16)(((1u << hi) - 1u) & ~((1u << lo) - 1u));
            const uint8_t *tile = job->w + t0 / FX_R16_ROWS * tile_bytes;
            const tile_fn *fns = tiles[rows == FX_R16_ROWS ? 0 : 1];
            for (size_t m = m0; m < m1; m += FX_MR_MAX) {
                const size_t mr = min_sz(FX_MR_MAX, m1 - m);
                xrow xr[FX_MR_MAX];
                float *yr[FX_MR_MAX];
                for (size_t r = 0; r < mr; r++) {
                    const uint8_t *row = job->xq + (m + r) * job->xq_ld;
                    xr[r].q = row;
                    xr[r].nc = row + k;
                    xr[r].dx = row + k + 4 * nb;
                    yr[r] = job->y + (m + r) * job->ldy + t0;
                }
                fns[mr - 1](xr, nb, tile, rows, m == m0, store_mask, yr);
            }
        }
    }
}

static FX_VNNI void range_vnni(const fx_mm_job *job, size_t n0, size_t n1,
                               float *scratch) {
    if (job->type == FX_WTYPE_Q8_0_R16) range_r16(job, n0, n1);
    else fx_mm_q8_avx2_range()(job, n0, n1, scratch);
}

fx_mm_range_fn fx_mm_q8_avx512_range(void) {
    /* The plain-row fallback must exist wherever this form does. */
    return fx_mm_q8_avx2_range() ? range_vnni : NULL;
}

#else /* not x86-64 GCC/Clang */

bool fx_cpu_has_avx512_vnni(void) { return false; }
fx_mm_range_fn fx_mm_q8_avx512_range(void) { return NULL; }

#endif
