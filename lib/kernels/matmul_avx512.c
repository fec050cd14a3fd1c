/*
 * AVX-512 matmul (F + BW + VL + DQ, with FMA and F16C). Every function
 * carries its own target attribute so the library is built for the
 * baseline ISA and this code runs only after fx_cpu_has_avx512() said yes.
 *
 * The reduction order of kernels.h gives each output 8 lanes. A zmm holds
 * the 8 lanes of TWO outputs, y[m][n] in the low 256 bits and y[m][n+1]
 * in the high 256 bits: x[m][k..k+7] is broadcast into both halves, the
 * weights of rows n and n+1 at k..k+7 fill the halves, and one fma then
 * advances both outputs' lanes exactly as the AVX2 ymm fma advances one.
 * The final tree runs per half. So lane j of output n sees the same fmas
 * in the same order on every path; the only difference is that twice as
 * many outputs advance per instruction.
 *
 * Both paths share one register tile of up to 8 x rows by NP column pairs
 * (NP <= 6); they differ in where the weights come from (storage type,
 * two rows per pair, or a pre-packed f32 panel with the pair already
 * interleaved) and where partial lanes live between K slabs.
 */
#include "matmul_impl.h"

#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>

#define FX_AVX512                                                            \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,"     \
                          "f16c")))
#define FX_ALWAYS_INLINE static inline __attribute__((always_inline))
/* The tile loops must unroll fully so the accumulators live in registers. */
#define FX_UNROLL _Pragma("GCC unroll 8")
#define FX_MR_MAX 8 /* x rows per tile: all of a small-M call at once */
#define FX_NP_MAX 6 /* column pairs per tile */
#define FX_DUAL_MR FX_MM_DUAL_M /* matmul_impl.h */
/* R12 tiles: x rows per pass, and how far ahead in its stream a tile is
 * prefetched, bytes, F32 and the 2-byte types (range_small_r12 and
 * tile_k say why). */
#define FX_R12_MR 4
#define FX_R12_F32_PF 4096
#define FX_R12_HALF_PF 8192

/* Rows up to this stream W straight from storage (range_small); more go
 * to the cache-blocked path: up to here, packing costs more than it saves. */
#ifndef FX_MM_SMALL_M512
#define FX_MM_SMALL_M512 32
#endif

/* Weight sources of a tile: the storage types, or a packed f32 panel.
 * (Q8_0 is in matmul_q8_avx512.c.) */
enum { SRC_F32, SRC_F16, SRC_BF16, SRC_PACKED };
#define TILED 0x100 /* with a storage source: its R12 form (kernels.h) */

/* fx_cpu_has_*: lib/kernels/cpu.c */

/* ---- weights of a column pair, 8 + 8 at a time (all exact) ---- */

FX_ALWAYS_INLINE FX_AVX512 __m256i halves16(const uint8_t *r0,
                                            const uint8_t *r1, size_t off) {
    return _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(r0 + off))),
        _mm_loadu_si128((const __m128i *)(r1 + off)), 1);
}

FX_ALWAYS_INLINE FX_AVX512 __m512 widen_halves(int src, __m256i h) {
    if (src == SRC_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* Rows r0, r1 at element k (k % 8 == 0, k + 8 <= K). */
FX_ALWAYS_INLINE FX_AVX512 __m512 load_pair8(int src, const uint8_t *r0,
                                             const uint8_t *r1, size_t k) {
    switch (src) {
    case SRC_F16:
    case SRC_BF16: return widen_halves(src, halves16(r0, r1, 2 * k));
    default:
        return _mm512_insertf32x8(
            _mm512_castps256_ps512(
                _mm256_loadu_ps((const float *)(const void *)r0 + k)),
            _mm256_loadu_ps((const float *)(const void *)r1 + k), 1);
    }
}

/* The last rem (1..7) weights from element k of each row, lanes >= rem
 * set to -0.0f (the padding rule of kernels.h). */
FX_ALWAYS_INLINE FX_AVX512 __m512 load_pair_tail(int src, const uint8_t *r0,
                                                 const uint8_t *r1, size_t k,
                                                 size_t rem) {
    if (src == SRC_F16 || src == SRC_BF16) {
        uint16_t b[16];
        for (int i = 0; i < 16; i++) b[i] = 0x8000;
        memcpy(b, r0 + 2 * k, 2 * rem);
        memcpy(b + 8, r1 + 2 * k, 2 * rem);
        return widen_halves(src, _mm256_loadu_si256((const __m256i *)b));
    }
    float b[16];
    for (int i = 0; i < 16; i++) b[i] = -0.0f;
    memcpy(b, r0 + 4 * k, 4 * rem);
    memcpy(b + 8, r1 + 4 * k, 4 * rem);
    return _mm512_loadu_ps(b);
}

/* x[k..k+7] in both halves; lanes >= rem (< 8) are +0 and nothing past
 * them is read. */
FX_ALWAYS_INLINE FX_AVX512 __m512 bcast_x(const float *x) {
    return _mm512_broadcast_f32x8(_mm256_loadu_ps(x));
}
FX_ALWAYS_INLINE FX_AVX512 __m512 bcast_x_tail(const float *x, size_t rem) {
    return _mm512_broadcast_f32x8(
        _mm256_maskz_loadu_ps((__mmask8)((1u << rem) - 1), x));
}

/* Per 256-bit half: ((a0+a4) + (a2+a6)) + ((a1+a5) + (a3+a7)), operands
 * in the order the AVX2 reduce8 uses (an add's operand order matters
 * only to which NaN payload survives, but keep even that identical). */
FX_ALWAYS_INLINE FX_AVX512 void reduce_pair(__m512 v, float *lo, float *hi) {
    __m512 s4 = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v,
                                                      _MM_SHUFFLE(2, 3, 0, 1)));
    __m512 s2 = _mm512_add_ps(s4, _mm512_permute_ps(s4,
                                                    _MM_SHUFFLE(3, 2, 3, 2)));
    __m512 s1 = _mm512_add_ps(s2, _mm512_permute_ps(s2,
                                                    _MM_SHUFFLE(1, 1, 1, 1)));
    *lo = _mm512_cvtss_f32(s1);
    *hi = _mm_cvtss_f32(_mm512_extractf32x4_ps(s1, 2));
}

/* ---- the register tile ---- */

/* Accumulates k in [0, kn) of MR x rows against NP column pairs.
 * Storage sources: wr[2j], wr[2j+1] are pair j's rows at element 0 of the
 * slab; kn may end in a partial group. SRC_PACKED: wr[j] is pair j's
 * panel (16 floats per group of 8 k) and kn is a multiple of 8, the
 * padding already in the panel and in the x block. */
FX_ALWAYS_INLINE FX_AVX512 void tile_k(const int MR, const int NP,
                                       const int src, const int tiled,
                                       const float *const *xr,
                                       const uint8_t *const *wr, size_t kn,
                                       size_t wstride, bool pf,
                                       __m512 acc[FX_MR_MAX][FX_NP_MAX]) {
    size_t k = 0;
    if (tiled) {
        /* R12: pair j's 16 weights of chunk c at wr[j] + c * wstride, the
         * tile one stream. pf: the stream some KB ahead (past the tile's
         * end: the next tile, contiguous) a chunk's worth per chunk, in
         * address order, into L2 only: with several x rows the work per byte leaves the
         * hardware prefetcher behind, and into L1 the next tile evicted
         * this one's lines before the later passes read them. The
         * 2-byte types go FX_R12_HALF_PF ahead, from FX_MM_PF_MIN_M rows
         * on (at 1 and 2 rows the hardware does better alone). F32 (R12
         * on Zen 5 only: fx_kernels_prefer_r12) is
         * prefetched FX_R12_F32_PF ahead, from 1 row on (range_small_r12
         * says why). kn % 8 == 0. */
        const size_t esize = src == SRC_F32 ? 4 : 2;
        const char *pf_at = (const char *)wr[0] +
                            (src == SRC_F32 ? FX_R12_F32_PF : FX_R12_HALF_PF);
        for (size_t c = 0; k < kn; k += 8, c++) {
            if (pf)
                for (size_t o = 0; o < wstride; o += 64)
                    _mm_prefetch(pf_at + c * wstride + o, _MM_HINT_T1);
            __m512 wv[FX_NP_MAX];
            FX_UNROLL
            for (int j = 0; j < NP; j++) {
                const uint8_t *at = wr[j] + c * wstride;
                wv[j] = esize == 4
                            ? _mm512_loadu_ps((const float *)(const void *)at)
                            : widen_halves(src, _mm256_loadu_si256(
                                                    (const __m256i *)(const void *)at));
            }
            FX_UNROLL
            for (int i = 0; i < MR; i++) {
                __m512 xv = bcast_x(xr[i] + k);
                FX_UNROLL
                for (int j = 0; j < NP; j++)
                    acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
            }
        }
        return;
    }
    if (src == SRC_PACKED) {
        for (; k < kn; k += 8) {
            __m512 wv[FX_NP_MAX];
            FX_UNROLL
            for (int j = 0; j < NP; j++)
                wv[j] = _mm512_load_ps((const float *)(const void *)wr[j] +
                                       2 * k);
            FX_UNROLL
            for (int i = 0; i < MR; i++) {
                __m512 xv = bcast_x(xr[i] + k);
                FX_UNROLL
                for (int j = 0; j < NP; j++)
                    acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
            }
        }
        return;
    }
    const size_t esize = src == SRC_F32 ? 4 : 2;
    /* pf (range_groups says when): each row prefetches its twin in the
     * next tile, 2 NP rows on, the next rows range_groups reads, into L2
     * only (as the R12 tiles: L1 lost the lines before their use). */
    const size_t pf_dist = (size_t)(2 * NP) * esize * kn;
    for (; k + 8 <= kn; k += 8) {
        __m512 wv[FX_NP_MAX];
        if (pf && ((k * esize) & 63) == 0) {
            FX_UNROLL
            for (int j = 0; j < 2 * NP; j++)
                _mm_prefetch((const char *)wr[j] + esize * k + pf_dist,
                             _MM_HINT_T1);
        }
        FX_UNROLL
        for (int j = 0; j < NP; j++)
            wv[j] = load_pair8(src, wr[2 * j], wr[2 * j + 1], k);
        FX_UNROLL
        for (int i = 0; i < MR; i++) {
            __m512 xv = bcast_x(xr[i] + k);
            FX_UNROLL
            for (int j = 0; j < NP; j++)
                acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
        }
    }
    if (k < kn) {
        size_t rem = kn - k;
        __m512 wv[FX_NP_MAX];
        FX_UNROLL
        for (int j = 0; j < NP; j++)
            wv[j] = load_pair_tail(src, wr[2 * j], wr[2 * j + 1], k, rem);
        FX_UNROLL
        for (int i = 0; i < MR; i++) {
            __m512 xv = bcast_x_tail(xr[i] + k, rem);
            FX_UNROLL
            for (int j = 0; j < NP; j++)
                acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
        }
    }
}

/* One tile over one K slab. part (8 floats per output, row stride part_ld
 * floats; pair j at part + 16 j) carries the lanes between slabs: first
 * starts from +0, last reduces into y (pair j of row i to yr[i][2j ys] and
 * yr[i][(2j+1) ys]: ys is 1 but where the tile's columns are rows far
 * apart, range_streams). half: the last pair has only its low column; its
 * high half is computed on a stand-in and never stored. */
FX_ALWAYS_INLINE FX_AVX512 void tile(const int MR, const int NP,
                                     const int src, const int tiled,
                                     const float *const *xr,
                                     const uint8_t *const *wr, size_t kn,
                                     size_t wstride, float *part,
                                     size_t part_ld, bool first, bool last,
                                     bool half, bool pf, float *const *yr,
                                     size_t ys) {
    __m512 acc[FX_MR_MAX][FX_NP_MAX];
    FX_UNROLL
    for (int i = 0; i < MR; i++)
        FX_UNROLL
        for (int j = 0; j < NP; j++) {
            const __mmask16 mk = half && j == NP - 1 ? 0x00ff : 0xffff;
            acc[i][j] = first ? _mm512_setzero_ps()
                              : _mm512_maskz_loadu_ps(
                                    mk, part + i * part_ld + j * 16);
        }
    tile_k(MR, NP, src, tiled, xr, wr, kn, wstride, pf, acc);
    FX_UNROLL
    for (int i = 0; i < MR; i++)
        FX_UNROLL
        for (int j = 0; j < NP; j++) {
            const bool h = half && j == NP - 1;
            if (last) {
                float lo, hi;
                reduce_pair(acc[i][j], &lo, &hi);
                yr[i][2 * j * ys] = lo;
                if (!h) yr[i][(2 * j + 1) * ys] = hi;
            } else {
                _mm512_mask_storeu_ps(part + i * part_ld + j * 16,
                                      h ? 0x00ff : 0xffff, acc[i][j]);
            }
        }
}

/* One out-of-line function per (MR, NP, source) so each gets its own
 * register allocation with the loops above fully unrolled. MR * NP
 * accumulators + NP weights + x stay within the 32 zmm registers. */
typedef void (*tile_fn)(const float *const *xr, const uint8_t *const *wr,
                        size_t kn, size_t wstride, float *part,
                        size_t part_ld, bool first, bool last, bool half,
                        bool pf, float *const *yr, size_t ys);

/* S: a source, | TILED for its R12 form (NAME ending in t). */
#define FX_TILE_FN(MR, NP, S, NAME)                                          \
    static FX_AVX512 void t##MR##x##NP##_##NAME(                            \
        const float *const *xr, const uint8_t *const *wr, size_t kn,         \
        size_t wstride, float *part, size_t part_ld, bool first, bool last,  \
        bool half, bool pf, float *const *yr, size_t ys) {                   \
        tile(MR, NP, (S) & 0xff, (S) >> 8, xr, wr, kn, wstride, part,        \
             part_ld, first, last, half, pf, yr, ys);                        \
    }
#define FX_NP3(MR, S, N)                                                     \
    FX_TILE_FN(MR, 1, S, N) FX_TILE_FN(MR, 2, S, N) FX_TILE_FN(MR, 3, S, N)
#define FX_NP4(MR, S, N) FX_NP3(MR, S, N) FX_TILE_FN(MR, 4, S, N)
#define FX_NP6(MR, S, N)                                                     \
    FX_NP4(MR, S, N) FX_TILE_FN(MR, 5, S, N) FX_TILE_FN(MR, 6, S, N)
#define FX_TILES(S, N)                                                       \
    FX_NP6(1, S, N) FX_NP6(2, S, N) FX_NP4(3, S, N) FX_NP4(4, S, N)          \
    FX_NP3(5, S, N) FX_NP3(6, S, N) FX_NP3(7, S, N) FX_NP3(8, S, N)

FX_TILES(SRC_F32, f32)
FX_TILES(SRC_F16, f16)
FX_TILES(SRC_BF16, bf16)
/* The R12 tiles: 6 pairs (a whole tile in one pass), up to FX_R12_MR
 * (4) x rows. */
#define FX_TILES_R12(S, N)                                                   \
    FX_NP6(1, S, N) FX_NP6(2, S, N) FX_NP6(3, S, N) FX_NP6(4, S, N)
FX_TILES_R12(SRC_F32 | TILED, f32t)
FX_TILES_R12(SRC_F16 | TILED, f16t)
FX_TILES_R12(SRC_BF16 | TILED, bf16t)
FX_NP3(1, SRC_PACKED, pk) FX_NP3(2, SRC_PACKED, pk)
FX_NP3(3, SRC_PACKED, pk) FX_NP3(4, SRC_PACKED, pk)
FX_NP3(5, SRC_PACKED, pk) FX_NP3(6, SRC_PACKED, pk)
FX_NP3(7, SRC_PACKED, pk) FX_NP3(8, SRC_PACKED, pk)

#define FX_ROW3(MR, N) {t##MR##x1_##N, t##MR##x2_##N, t##MR##x3_##N, 0, 0, 0}
#define FX_ROW4(MR, N)                                                       \
    {t##MR##x1_##N, t##MR##x2_##N, t##MR##x3_##N, t##MR##x4_##N, 0, 0}
#define FX_ROW6(MR, N)                                                       \
    {t##MR##x1_##N, t##MR##x2_##N, t##MR##x3_##N, t##MR##x4_##N,             \
     t##MR##x5_##N, t##MR##x6_##N}
#define FX_TABLE(N)                                                          \
    {FX_ROW6(1, N), FX_ROW6(2, N), FX_ROW4(3, N), FX_ROW4(4, N),             \
     FX_ROW3(5, N), FX_ROW3(6, N), FX_ROW3(7, N), FX_ROW3(8, N)}

/* [source][MR-1][NP-1], NP <= wide_np[MR-1]; read-only. */
static const tile_fn tiles[3][FX_MR_MAX][FX_NP_MAX] = {
    FX_TABLE(f32), FX_TABLE(f16), FX_TABLE(bf16)};
#define FX_TABLE_R12(N)                                                      \
    {FX_ROW6(1, N), FX_ROW6(2, N), FX_ROW6(3, N), FX_ROW6(4, N)}
static const tile_fn tiles_r12[3][FX_R12_MR][FX_NP_MAX] = {
    FX_TABLE_R12(f32t), FX_TABLE_R12(f16t), FX_TABLE_R12(bf16t)};
static const int wide_np[FX_MR_MAX] = {6, 6, 4, 4, 3, 3, 3, 3};

/* The large-M path's tiles on the packed panel: [MR-1][NP-1]. 8 x 3 is
 * the main one: 24 accumulators, 3 weight loads and 8 x broadcasts per
 * 24 fmas. */
#define FX_PK_ROW(MR) {t##MR##x1_pk, t##MR##x2_pk, t##MR##x3_pk}
static const tile_fn packed[FX_MR_MAX][3] = {
    FX_PK_ROW(1), FX_PK_ROW(2), FX_PK_ROW(3), FX_PK_ROW(4),
    FX_PK_ROW(5), FX_PK_ROW(6), FX_PK_ROW(7), FX_PK_ROW(8)};

static int src_of(fx_wtype t) {
    switch (fx_wtype_unpacked(t)) {
    case FX_WTYPE_F16: return SRC_F16;
    case FX_WTYPE_BF16: return SRC_BF16;
    case FX_WTYPE_F32:
    default: return SRC_F32;
    }
}

static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

/* ---- small M: stream W once, straight from its storage type ---- */

/* W rows in groups of FX_MM_GROUP512 (a multiple of every wide tile's
 * 2 * NP columns). x rows go through the tile 8 at a time: a group is read
 * from memory once for the whole call, and the later chunks of 8 rows find
 * it in L1/L2 (24 rows of K f32 weights: 96 KiB at K = 1024). */
#define FX_MM_GROUP512 24

/* When the small-M tiles prefetch the next tile's rows in software: F16
 * and BF16 from FX_MM_PF_MIN_M x rows on; F32 never. With the weights on
 * huge pages the hardware prefetcher alone streams F32 rows faster at
 * every M this path takes, and F16 rows at one or two (from 3 rows on,
 * more work per byte leaves the rows' 12 streams too far behind without
 * the prefetch). Later x chunks of a group
 * find its rows in L1/L2 and never prefetch. */
#define FX_MM_PF_MIN_M 3

static FX_AVX512 void range_groups(const fx_mm_job *job, size_t n0,
                                   size_t n1) {
    const int src = src_of(job->type);
    const bool pf = src != SRC_F32 && job->m >= FX_MM_PF_MIN_M;
    for (size_t n = n0; n < n1; n += FX_MM_GROUP512) {
        const size_t g = min_sz(FX_MM_GROUP512, n1 - n);
        const size_t pairs = (g + 1) / 2;
        /* An odd last column pairs with itself; its twin is not stored. */
        const uint8_t *wr[FX_MM_GROUP512 + 1] = {NULL};
        for (size_t j = 0; j < g; j++)
            wr[j] = job->w + (n + j) * job->row_bytes;
        wr[g] = wr[g - 1];
        for (size_t m = 0; m < job->m; m += FX_MR_MAX) {
            const size_t mr = min_sz(FX_MR_MAX, job->m - m);
            const size_t nw = (size_t)wide_np[mr - 1];
            const float *xr[FX_MR_MAX];
            for (size_t i = 0; i < mr; i++)
                xr[i] = job->x + (m + i) * job->ldx;
            for (size_t p = 0; p < pairs;) {
                size_t np = min_sz(nw, pairs - p);
                bool half = (g & 1) && p + np == pairs;
                float *yn[FX_MR_MAX];
                for (size_t i = 0; i < mr; i++)
                    yn[i] = job->y + (m + i) * job->ldy + n + 2 * p;
                tiles[src][mr - 1][np - 1](xr, wr + 2 * p, job->k, 0, NULL,
                                           0, true, true, half, pf && m == 0,
                                           yn, 1);
                p += np;
            }
        }
    }
}

/* F32 rows: a tile's 2 NP rows are 2 NP streams far apart. Row r of
 * stream c is row n0 + c * s + r (s = the range's rows / 2 NP), so each
 * stream walks forward through consecutive rows, where range_groups'
 * tiles of adjacent rows read 2 NP streams one row long (4 KiB at K =
 * 1024) and the hardware prefetcher kept starting over. The rows left
 * over (< 2 NP) go through range_groups. Same bits: each output is one
 * tile's lanes over all of K; only where it is stored moves. (F16 and
 * BF16 rows, from the file mapping or of odd N, keep range_groups with
 * its twin prefetch, which assumes adjacent rows.) The AVX2 path did the
 * same first (matmul_avx2.c, range_streams and range_groups).
 *
 * Up to FX_MR_MAX x rows the whole call is one pass of a tile over W:
 * 4 pairs (8 streams) up to 4 x rows, 3 (6 streams) above, the stream
 * counts that keep the memory system busiest.
 *
 * More x rows: the 3-pair tile (six streams) in groups of
 * FX_MM_STREAM_GROUP rows a stream, which the first chunk of 8 x rows
 * reads from memory and the later chunks find in L2. The second chunk,
 * computing from L2, also prefetches into L2 each stream's row 2 NP = 6
 * rows on (tile_k's twin prefetch: two groups ahead), so memory works
 * while the group computes. */
#define FX_MM_STREAM_GROUP 3

static FX_AVX512 void range_streams(const fx_mm_job *job, size_t n0,
                                    size_t n1) {
    const bool one_pass = job->m <= FX_MR_MAX;
    const size_t np = job->m <= 4 ? 4 : 3;
    const size_t ns = 2 * np, s = (n1 - n0) / ns;
    const size_t g = one_pass ? s : FX_MM_STREAM_GROUP;
    for (size_t r0 = 0; r0 < s; r0 += g) {
        const size_t r1 = min_sz(r0 + g, s);
        for (size_t m = 0; m < job->m; m += FX_MR_MAX) {
            const size_t mr = min_sz(FX_MR_MAX, job->m - m);
            const tile_fn fn = tiles[SRC_F32][mr - 1][np - 1];
            const float *xr[FX_MR_MAX];
            for (size_t i = 0; i < mr; i++)
                xr[i] = job->x + (m + i) * job->ldx;
            for (size_t r = r0; r < r1; r++) {
                const uint8_t *wr[2 * FX_NP_MAX];
                float *yn[FX_MR_MAX];
                for (size_t c = 0; c < ns; c++)
                    wr[c] = job->w + (n0 + c * s + r) * job->row_bytes;
                for (size_t i = 0; i < mr; i++)
                    yn[i] = job->y + (m + i) * job->ldy + n0 + r;
                const bool pf = m == FX_MR_MAX && r + ns < s;
                fn(xr, wr, job->k, 0, NULL, 0, true, true, false, pf, yn, s);
            }
        }
    }
    if (n0 + ns * s < n1) range_groups(job, n0 + ns * s, n1);
}

static FX_AVX512 void range_small(const fx_mm_job *job, size_t n0,
                                  size_t n1) {
    const size_t ns = job->m <= 4 ? 8 : 6; /* range_streams' streams */
    if (src_of(job->type) == SRC_F32 && n1 - n0 >= ns)
        range_streams(job, n0, n1);
    else
        range_groups(job, n0, n1);
}

/* R12 weights: tiles in order, each read from memory once (one stream:
 * kernels.h), x rows FX_R12_MR at a time, the later passes finding the
 * tile in L1/L2. n0 is a multiple of 12 (task columns are of 24), n1 one
 * too or N. pf (tile_k): F16 and BF16 from FX_MM_PF_MIN_M rows on, as
 * range_small, FX_R12_HALF_PF ahead; F32 always, FX_R12_F32_PF ahead.
 *
 * Four rows a pass, not eight: the tile's six pairs fit the registers
 * with four rows, so one pass reads the tile's lines in order, where
 * eight rows took two passes of three pairs, each reading every other
 * half of each chunk. F32 in R12 (Zen 5: fx_kernels_prefer_r12) keeps
 * up with its rows only with both: four rows a pass and its prefetch. */
static FX_AVX512 void range_small_r12(const fx_mm_job *job, size_t n0,
                                      size_t n1) {
    const int src = src_of(job->type);
    const size_t esize = src == SRC_F32 ? 4 : 2;
    const bool pf = src == SRC_F32 || job->m >= FX_MM_PF_MIN_M;
    for (size_t n = n0; n < n1; n += FX_R12_ROWS) {
        const size_t rows = min_sz(FX_R12_ROWS, job->n - n), pairs = rows / 2;
        const uint8_t *tile = job->w + n * job->row_bytes;
        const size_t wstride = rows * 8 * esize;
        /* No tile after the matrix's last one to prefetch. */
        const bool pf_tile = pf && n + rows < job->n;
        for (size_t m = 0; m < job->m; m += FX_R12_MR) {
            const size_t mr = min_sz(FX_R12_MR, job->m - m);
            const float *xr[FX_MR_MAX];
            for (size_t i = 0; i < mr; i++)
                xr[i] = job->x + (m + i) * job->ldx;
            for (size_t p = 0; p < pairs;) {
                const size_t np = min_sz(FX_NP_MAX, pairs - p);
                const uint8_t *wr[FX_NP_MAX];
                for (size_t j = 0; j < np; j++)
                    wr[j] = tile + 2 * (p + j) * 8 * esize;
                float *yn[FX_MR_MAX];
                for (size_t i = 0; i < mr; i++)
                    yn[i] = job->y + (m + i) * job->ldy + n + 2 * p;
                /* The prefetch runs with the tile's first pass of pairs:
                 * its stream starts at the tile (wr[0] at pair 0). */
                tiles_r12[src][mr - 1][np - 1](xr, wr, job->k, wstride, NULL,
                                               0, true, true, false,
                                               pf_tile && m == 0 && p == 0,
                                               yn, 1);
                p += np;
            }
        }
    }
}

/* ---- one or two x rows, two R12 tiles at once ----
 *
 * MR x rows (1 or 2) against two whole R12 tiles (12 rows each) far apart
 * in the matrix, a chunk of each per step: two streams per core instead
 * of one.
 * A core streaming a single tile with the fma chains of kernels.h keeps
 * fewer misses in flight than the memory system can serve.
 * pf (range_dual_r12: job->r12_pf_bytes for F16 and BF16, 0: none): each
 * stream also prefetched that far ahead (past a tile's end is the task's
 * next tile, or lines never read: harmless), non-temporal: these tiles
 * are read once per step, so nothing is lost when their lines leave
 * early. See fx_r12_dual_prefetch_bytes.
 * Each output sees the fmas and the final tree of tile() in the same
 * order: same bits. */
FX_ALWAYS_INLINE FX_AVX512 void dual12(const int MR, const int src,
                                       const float *const *xr,
                                       const uint8_t *ta, const uint8_t *tb,
                                       size_t k, size_t pf, float *const *ya,
                                       float *const *yb) {
    const size_t esize = src == SRC_F32 ? 4 : 2;
    const size_t wstride = FX_R12_ROWS * 8 * esize, pair = 16 * esize;
    __m512 a[FX_DUAL_MR][FX_NP_MAX], b[FX_DUAL_MR][FX_NP_MAX];
    FX_UNROLL
    for (int i = 0; i < MR; i++)
        FX_UNROLL
        for (int j = 0; j < FX_NP_MAX; j++) a[i][j] = b[i][j] = _mm512_setzero_ps();
    for (size_t kk = 0, off = 0; kk < k; kk += 8, off += wstride) {
        if (pf)
            for (size_t o = 0; o < wstride; o += 64) {
                _mm_prefetch((const char *)ta + off + pf + o, _MM_HINT_NTA);
                _mm_prefetch((const char *)tb + off + pf + o, _MM_HINT_NTA);
            }
        __m512 xv[FX_DUAL_MR];
        FX_UNROLL
        for (int i = 0; i < MR; i++) xv[i] = bcast_x(xr[i] + kk);
        FX_UNROLL
        for (int j = 0; j < FX_NP_MAX; j++) {
            const uint8_t *pa = ta + off + j * pair, *pb = tb + off + j * pair;
            __m512 wa, wb;
            if (esize == 4) {
                wa = _mm512_loadu_ps((const float *)(const void *)pa);
                wb = _mm512_loadu_ps((const float *)(const void *)pb);
            } else {
                wa = widen_halves(src, _mm256_loadu_si256((const __m256i *)(const void *)pa));
                wb = widen_halves(src, _mm256_loadu_si256((const __m256i *)(const void *)pb));
            }
            FX_UNROLL
            for (int i = 0; i < MR; i++) {
                a[i][j] = _mm512_fmadd_ps(xv[i], wa, a[i][j]);
                b[i][j] = _mm512_fmadd_ps(xv[i], wb, b[i][j]);
            }
        }
    }
    FX_UNROLL
    for (int i = 0; i < MR; i++)
        FX_UNROLL
        for (int j = 0; j < FX_NP_MAX; j++) {
            reduce_pair(a[i][j], &ya[i][2 * j], &ya[i][2 * j + 1]);
            reduce_pair(b[i][j], &yb[i][2 * j], &yb[i][2 * j + 1]);
        }
}

typedef void (*dual_fn)(const float *const *xr, const uint8_t *ta,
                        const uint8_t *tb, size_t k, size_t pf,
                        float *const *ya, float *const *yb);
#define FX_DUAL_FN(MR, S, NAME)                                              \
    static FX_AVX512 void dual##MR##_##NAME(                                 \
        const float *const *xr, const uint8_t *ta, const uint8_t *tb,        \
        size_t k, size_t pf, float *const *ya, float *const *yb) {           \
        dual12(MR, S, xr, ta, tb, k, pf, ya, yb);                            \
    }
FX_DUAL_FN(1, SRC_F32, f32) FX_DUAL_FN(1, SRC_F16, f16)
FX_DUAL_FN(1, SRC_BF16, bf16) FX_DUAL_FN(2, SRC_F32, f32)
FX_DUAL_FN(2, SRC_F16, f16) FX_DUAL_FN(2, SRC_BF16, bf16)
/* [MR - 1][source] */
static const dual_fn duals[FX_DUAL_MR][3] = {
    {dual1_f32, dual1_f16, dual1_bf16}, {dual2_f32, dual2_f16, dual2_bf16}};

/* Columns [a0, a1) and [b0, b1) of an R12 job of up to FX_DUAL_MR x
 * rows (each range a task's: starts at a tile): their tiles pairwise
 * while both have a whole one, the rest one at a time.
 *
 * F32 streams are not prefetched (job->r12_pf_bytes is for the 2-byte
 * types): an F32 chunk is half the instructions per byte of an F16 one
 * (no conversion, a load folded into each fma), so the out-of-order
 * window alone keeps enough lines in flight, and the prefetches only
 * took issue slots and bandwidth from lines already requested. */
static FX_AVX512 void range_dual_r12(const fx_mm_job *job, size_t a0,
                                     size_t a1, size_t b0, size_t b1) {
    const int src = src_of(job->type);
    const dual_fn fn = duals[job->m - 1][src];
    const size_t pf = src == SRC_F32 ? 0 : job->r12_pf_bytes;
    const float *xr[FX_DUAL_MR];
    float *ya[FX_DUAL_MR], *yb[FX_DUAL_MR];
    for (size_t i = 0; i < job->m; i++) xr[i] = job->x + i * job->ldx;
    while (a0 + FX_R12_ROWS <= a1 && b0 + FX_R12_ROWS <= b1 &&
           a0 + FX_R12_ROWS <= job->n && b0 + FX_R12_ROWS <= job->n) {
        for (size_t i = 0; i < job->m; i++) {
            ya[i] = job->y + i * job->ldy + a0;
            yb[i] = job->y + i * job->ldy + b0;
        }
        fn(xr, job->w + a0 * job->row_bytes, job->w + b0 * job->row_bytes,
           job->k, pf, ya, yb);
        a0 += FX_R12_ROWS;
        b0 += FX_R12_ROWS;
    }
    if (a0 < a1) range_small_r12(job, a0, a1);
    if (b0 < b1) range_small_r12(job, b0, b1);
}

/* ---- large M: cache-blocked, W converted to f32 once per panel ---- */

/* Rows [n, n+nn) elements [k0, k0+kn) of W into the panel, pair by pair:
 * pair p at panel + p * 2 KC holds, per group of 8 k, row n+2p's 8
 * weights then row n+2p+1's (the zmm layout of a tile), the last group
 * padded with -0. An odd last row is paired with itself. */
static FX_AVX512 void pack_panel(const fx_mm_job *job, size_t n, size_t nn,
                                 size_t k0, size_t kn, float *panel) {
    const int src = src_of(job->type);
    if (fx_wtype_is_r12(job->type)) {
        /* Each row's 8 weights of a chunk through the layout (no tail: K
         * % 8 == 0); the panel's pairs need not be the tiles' (NC may be
         * odd). */
        const size_t esize = src == SRC_F32 ? 4 : 2;
        for (size_t p = 0; p < (nn + 1) / 2; p++) {
            const size_t a = n + 2 * p, b = 2 * p + 1 < nn ? a + 1 : a;
            float *dst = panel + p * 2 * FX_MM_KC512;
            /* Row a's chunk c0, and the bytes to the same row's next
             * chunk: its tile's rows * 8 elements. */
            const uint8_t *ra =
                job->w + fx_float_r12_at(job->n, job->k, esize, a, k0 / 8);
            const uint8_t *rb =
                job->w + fx_float_r12_at(job->n, job->k, esize, b, k0 / 8);
            const size_t left = job->n - a / FX_R12_ROWS * FX_R12_ROWS;
            const size_t cstride =
                (left < FX_R12_ROWS ? left : FX_R12_ROWS) * 8 * esize;
            for (size_t k = 0; k < kn; k += 8, ra += cstride, rb += cstride)
                _mm512_store_ps(dst + 2 * k, load_pair8(src, ra, rb, 0));
        }
        return;
    }
    for (size_t p = 0; p < (nn + 1) / 2; p++) {
        const uint8_t *r0 = job->w + (n + 2 * p) * job->row_bytes;
        const uint8_t *r1 = 2 * p + 1 < nn ? r0 + job->row_bytes : r0;
        float *dst = panel + p * 2 * FX_MM_KC512;
        size_t k = 0;
        for (; k + 8 <= kn; k += 8)
            _mm512_store_ps(dst + 2 * k, load_pair8(src, r0, r1, k0 + k));
        if (k < kn)
            _mm512_store_ps(dst + 2 * k,
                            load_pair_tail(src, r0, r1, k0 + k, kn - k));
    }
}

/* Rows [m, m+mc) elements [k0, k0+kn) of x into blk (row stride KC), the
 * last group of 8 padded with +0 to match the panel. */
static FX_AVX512 void pack_x(const fx_mm_job *job, size_t m, size_t mc,
                             size_t k0, size_t kn, float *blk) {
    const size_t kp = (kn + 7) & ~(size_t)7;
    for (size_t i = 0; i < mc; i++) {
        float *dst = blk + i * FX_MM_KC512;
        memcpy(dst, job->x + (m + i) * job->ldx + k0, kn * sizeof(float));
        for (size_t k = kn; k < kp; k++) dst[k] = 0.0f;
    }
}

/* Prefetches part `part` of `parts` of the source rows the next pack
 * will copy (x rows [mb, mb+mc), W rows [nb, nb+nc), elements [k0,
 * k0+kn)): rows of KC floats from pages far apart defeat the hardware
 * prefetcher (see matmul_avx2.c). Into L2 only: the pack reads them once,
 * and in L1 they pushed out the panel the tiles are reading. mc == 0:
 * nothing next. */
static FX_AVX512 void prefetch_next(const fx_mm_job *job, size_t nb,
                                    size_t nc, size_t mb, size_t mc,
                                    size_t k0, size_t kn, size_t part,
                                    size_t parts) {
    if (mc == 0) return;
    /* R12: each tile's chunks [k0/8, (k0+kn)/8) are one run of bytes; a
     * row of the panel stands for its share of its tile's run, so the
     * parts stay as even as for rows. */
    const bool r12 = fx_wtype_is_r12(job->type);
    const size_t esize = src_of(job->type) == SRC_F32 ? 4 : 2;
    size_t rows = mc + nc;
    size_t r0 = part * rows / parts, r1 = (part + 1) * rows / parts;
    size_t wbytes = fx_wtype_row_bytes(job->type, kn);
    size_t woff = fx_wtype_row_bytes(job->type, k0);
    for (size_t r = r0; r < r1; r++) {
        const char *p;
        size_t len;
        if (r < mc) {
            p = (const char *)(job->x + (mb + r) * job->ldx + k0);
            len = kn * sizeof(float);
        } else if (r12) {
            const size_t row = nb + (r - mc);
            const size_t t0 = row / FX_R12_ROWS * FX_R12_ROWS;
            const size_t tr = min_sz(FX_R12_ROWS, job->n - t0);
            const size_t run = tr * kn * esize, i = row - t0;
            p = (const char *)job->w +
                fx_float_r12_at(job->n, job->k, esize, t0, k0 / 8) +
                i * run / tr / 64 * 64;
            len = (i + 1) * run / tr / 64 * 64 - i * run / tr / 64 * 64;
        } else {
            p = (const char *)job->w + (nb + r - mc) * job->row_bytes + woff;
            len = wbytes;
        }
        for (size_t off = 0; off < len; off += 64)
            _mm_prefetch(p + off, _MM_HINT_T1);
    }
}

static FX_AVX512 void range_large(const fx_mm_job *job, size_t n0, size_t n1,
                                  float *scratch) {
    float *panel = scratch;                          /* [NC/2][2 KC] */
    float *xblk = panel + FX_MM_NC_EVEN * FX_MM_KC512;  /* [MC][KC] */
    float *part = xblk + FX_MM_MC * FX_MM_KC512;        /* [MC][NC][8] */
    const size_t part_ld = FX_MM_NC * 8;

    for (size_t nb = n0; nb < n1; nb += FX_MM_NC) {
        const size_t nc = min_sz(FX_MM_NC, n1 - nb);
        const size_t pairs = (nc + 1) / 2;
        /* With K in one slab and x read in place, nothing ties the rows
         * to blocks of MC (no partial sums to carry, no x block): all of
         * them go through the one panel, packed once instead of once
         * per MC rows. Same bits. */
        const size_t mblock =
            job->k <= FX_MM_KC512 && job->k % 8 == 0 ? job->m : FX_MM_MC;
        for (size_t mb = 0; mb < job->m; mb += mblock) {
            const size_t mc = min_sz(mblock, job->m - mb);
            for (size_t k0 = 0; k0 < job->k; k0 += FX_MM_KC512) {
                const size_t kn = min_sz(FX_MM_KC512, job->k - k0);
                const size_t kp = (kn + 7) & ~(size_t)7;
                const bool first = k0 == 0, last = k0 + kn == job->k;
                pack_panel(job, nb, nc, k0, kn, panel);
                /* x is read in place unless the slab ends in a partial
                 * group of 8 (then the block pads it with +0). A task is
                 * one panel, so a copy per task would send the whole x
                 * block through L2 again every 96 columns. */
                const bool in_place = kp == kn;
                if (!in_place) pack_x(job, mb, mc, k0, kn, xblk);
                size_t nmb = mb, nmc = 0, nk0 = 0, nkn = 0;
                if (!last) {
                    nmc = mc;
                    nk0 = k0 + kn;
                    nkn = min_sz(FX_MM_KC512, job->k - nk0);
                } else if (mb + mc < job->m) {
                    nmb = mb + mc;
                    nmc = min_sz(mblock, job->m - nmb);
                    nkn = min_sz(FX_MM_KC512, job->k);
                }
                const size_t n_mtiles = (mc + FX_MR_MAX - 1) / FX_MR_MAX;
                /* The x tile (8 x KC) stays in L1 while the panel streams
                 * past it from L2. */
                for (size_t m = 0; m < mc; m += FX_MR_MAX) {
                    const size_t mr = min_sz(FX_MR_MAX, mc - m);
                    prefetch_next(job, nb, nc, nmb, nmc, nk0, nkn,
                                  m / FX_MR_MAX, n_mtiles);
                    const float *xr[FX_MR_MAX];
                    float *yr[FX_MR_MAX];
                    for (size_t i = 0; i < mr; i++) {
                        xr[i] = in_place
                                    ? job->x + (mb + m + i) * job->ldx + k0
                                    : xblk + (m + i) * FX_MM_KC512;
                        yr[i] = job->y + (mb + m + i) * job->ldy + nb;
                    }
                    const tile_fn *row = packed[mr - 1];
                    for (size_t p = 0; p < pairs; p += 3) {
                        const size_t np = min_sz(3, pairs - p);
                        const bool half = (nc & 1) && p + np == pairs;
                        const uint8_t *wr[3];
                        for (size_t j = 0; j < np; j++)
                            wr[j] = (const uint8_t *)(panel +
                                                      (p + j) * 2 * FX_MM_KC512);
                        float *yn[FX_MR_MAX];
                        for (size_t i = 0; i < mr; i++) yn[i] = yr[i] + 2 * p;
                        /* part holds MC rows; one slab never uses it. */
                        float *pt = first && last
                                        ? part
                                        : part + m * part_ld + 2 * p * 8;
                        row[np - 1](xr, wr, kp, 0, pt, part_ld, first, last,
                                    half, false, yn, 1);
                    }
                }
            }
        }
    }
}

static FX_AVX512 void range_avx512(const fx_mm_job *job, size_t n0,
                                   size_t n1, float *scratch) {
    if (fx_wtype_is_r12(job->type) &&
        (job->m <= FX_MM_SMALL_M ||
         (job->m <= FX_MM_SMALL_M512 &&
          FX_R12_ROWS * job->row_bytes <= ((size_t)512 << 10)))) {
        range_small_r12(job, n0, n1);
        return;
    }
    /* Past 8 rows, streaming relies on a group staying in L2 between
     * chunks of 8 rows: not with rows this long (f32, K > ~5000). */
    if (job->m <= FX_MM_SMALL_M ||
        (job->m <= FX_MM_SMALL_M512 &&
         job->row_bytes <= ((size_t)512 << 10) / FX_MM_GROUP512))
        range_small(job, n0, n1);
    else
        range_large(job, n0, n1, scratch);
}

fx_mm_range_fn fx_mm_avx512_range(void) { return range_avx512; }

/* Up to FX_DUAL_MR x rows of an R12 job, two ranges in lockstep
 * (range_dual_r12). */
static FX_AVX512 void dual_avx512(const fx_mm_job *job, size_t a0, size_t a1,
                                  size_t b0, size_t b1, float *scratch) {
    if (job->m <= FX_DUAL_MR && fx_wtype_is_r12(job->type))
        range_dual_r12(job, a0, a1, b0, b1);
    else {
        range_avx512(job, a0, a1, scratch);
        range_avx512(job, b0, b1, scratch);
    }
}

fx_mm_dual_fn fx_mm_avx512_dual(void) { return dual_avx512; }

/* On Zen 5 (AMD family 1Ah) the hardware prefetcher alone left the two
 * streams of a one- or two-row R12 task short of the bandwidth, as it did
 * the Q8_0 R16 tiles (matmul_q8_avx512.c): 2 KB ahead fixes that.
 * Elsewhere the hardware prefetcher is left alone. */
size_t fx_r12_dual_prefetch_bytes(void) {
    return fx_cpu_amd_family() >= 0x1a ? 2048 : 0;
}

#else /* not x86-64 GCC/Clang */

fx_mm_range_fn fx_mm_avx512_range(void) { return NULL; }
fx_mm_dual_fn fx_mm_avx512_dual(void) { return NULL; }
size_t fx_r12_dual_prefetch_bytes(void) { return 0; }

#endif
