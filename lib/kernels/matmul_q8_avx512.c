/*
 * The Q8_0 matmul with AVX-512 VNNI (vpdpbusd), on both layouts a model
 * holds: R16 tiles (weights copied at load, kernels.h gives the layout)
 * and plain Q8_0 rows (ggml blocks, weights used straight from a mapped
 * file). Both compute the arithmetic of kernels.h bit for bit: exact
 * integer block sums, then one fma per block in block order.
 *
 * R16: a 64-byte line of a tile holds quants 4j..4j+3 of a block for 16
 * rows. vpdpbusd multiplies its unsigned bytes (the weights, stored +128)
 * by x's 4 signed quants broadcast to every lane, and adds the 4 products
 * into each row's int32: 8 lines later a zmm holds 16 rows' block sums.
 * The accumulator starts at the block's correction nc = -128 * (sum of
 * x's 32 quants), so nc + sum (w + 128) x = sum w x, exactly (at most
 * 32 * 255 * 127 in magnitude before the correction: no overflow). Then
 * one fma per block: acc = fma(f32(dw) * dx, (float)p, acc), 16 rows at a
 * time, in block order -- the definition, lane by lane. Per weight byte
 * that is a load and a vpdpbusd per 64 bytes and x row; the float work is
 * per 544 bytes (kernels.h says why that matters).
 *
 * Plain rows: the same integers and the same per-block float work, 16
 * rows per zmm, but the 16 rows' blocks have to be brought together in
 * registers first (a transpose, or an add tree at one or two x rows) and
 * their scales gathered: see "plain Q8_0 rows" below.
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

/* Software prefetch distance in a tile's stream, bytes, and for which
 * numbers of x rows it is used (job->q8_pf_rows, fx_q8_r16_prefetch_rows
 * by default). The prefetch goes into L2 only (prefetcht1): into L1 it
 * evicted the x rows' quants and the tile's own lines before the later
 * passes of 8 rows read them. */
#ifndef FX_Q8_PF
#define FX_Q8_PF 4096
#endif

/* A tile is one sequential stream. While the kernel has little work per
 * byte the hardware prefetcher follows it best alone; with more x rows per
 * pass the work per byte leaves the stream behind without help. So on Zen
 * 4 the software prefetch starts at 5 rows; on Zen 5 (AMD family 1Ah),
 * whose prefetcher alone leaves two-row steps short of the bandwidth, at 2
 * (the one-row tile, tile16, streams best alone there too). On Intel (one
 * Xeon measured) the prefetch pays at one row and from three on, and two
 * rows stream best alone. */
#define PF_FROM(m) (0x1ffu & ~((1u << ((m) - 1)) - 1u))
uint32_t fx_q8_r16_prefetch_rows(void) {
    const unsigned amd = fx_cpu_amd_family();
    if (amd >= 0x1a) return PF_FROM(2);
    if (amd) return PF_FROM(5);
    return PF_FROM(1) & ~(1u << 1);
}

/* Does a call of job->m x rows prefetch (bit min(m, 9) - 1)? */
static bool prefetch_for(const fx_mm_job *job) {
    const size_t m = job->m < 9 ? job->m : 9;
    return m > 0 && ((job->q8_pf_rows >> (m - 1)) & 1u);
}

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

/* x row m of the job's quantized activations. */
FX_ALWAYS_INLINE xrow xrow_at(const fx_mm_job *job, size_t m) {
    const uint8_t *row = job->xq + m * job->xq_ld;
    const size_t k = job->k;
    return (xrow){row, row + k, row + k + 4 * (k / FX_QK8_0)};
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
    /* A full tile's rows as a constant, so that its line and block
     * offsets are immediates rather than multiples of a run-time stride:
     * fewer address operations per block where five or more x rows leave
     * the loop the least slack; one row too, without the software
     * prefetch (fx_q8_r16_prefetch_rows). Two and four rows are slower
     * with it and keep the run-time form. The same offsets either way:
     * same bits. */
    if (FULL && (MR == 1 || MR >= 5)) rows = FX_R16_ROWS;
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
            /* Two rows: one pass over the tile, so its lines can go
             * once used (prefetchnta; more rows make more passes). */
            if (MR == 2)
                for (; pf_at < end; pf_at += 64)
                    _mm_prefetch((const char *)pf_at, _MM_HINT_NTA);
            else
                for (; pf_at < end; pf_at += 64)
                    _mm_prefetch((const char *)pf_at, _MM_HINT_T1);
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
                    xr[r] = xrow_at(job, m + r);
                    yr[r] = job->y + (m + r) * job->ldy + t0;
                }
                fns[mr - 1](xr, nb, tile, rows,
                            m == m0 && prefetch_for(job), store_mask, yr);
            }
        }
    }
}

/* ---- plain Q8_0 rows (ggml blocks: weights used from a mapped file) ----
 *
 * 16 weight rows at a time (a group), each row's block a separate 32-byte
 * piece. The 16 pieces of a block go into 8 zmm, rows 2p and 2p+1 in pair
 * p's low and high half, each quant flipped to q ^ 0x80. Two ways on from
 * there, exact integers both, so they give the same bits:
 *   3 or more x rows: a 4x4 dword transpose within 128-bit lanes (unpack
 *     epi32, epi64) and one across them (shuffle_i32x4) turn the pairs
 *     into 8 vectors Q_j, quants 4j..4j+3 of all 16 rows -- an R16 block
 *     built in registers -- and each x row then costs what it costs on
 *     R16: 8 vpdpbusd against 4 of its quants broadcast. The transpose
 *     (24 shuffles) is paid once per block for all the x rows;
 *   1 or 2 x rows: one vpdpbusd per pair against the row's 32 quants in
 *     both halves gives each weight row 8 partial sums, and an add tree
 *     (unpack epi32, epi64, shuffle_i32x4: 14 shuffles, 7 adds) folds the
 *     8 vectors into one: fewer shuffles than the transpose, more work
 *     per x row (the faster of the two up to 2 rows).
 * Both leave row r of the group in lane plain_lanes[r] (so they can share
 * the scales); the scales are gathered in that order (one vpgatherdd of
 * the dword at each row's block start), and only the final store puts
 * the rows back in order. A group of R < 16 rows repeats its last row in
 * the missing lanes, so no byte outside its rows is read; those lanes are
 * not stored. x rows go 16 at a time; with more, the first chunk of 16
 * keeps each block's Q and scales in the thread's scratch and the next
 * chunks read them there, as R16 reads a tile.
 *
 * Memory: a group is 16 streams, each advancing 34 bytes a block, which
 * the hardware prefetcher alone follows poorly. A prefetch per row
 * FX_Q8_ROW_PF bytes ahead, running on into the next group's rows past
 * the end of a row, keeps up with the R16 stream. */
#define FX_ROWS 16
#define FX_ROWS_MR 16

#ifndef FX_Q8_ROW_PF
#define FX_Q8_ROW_PF 1024
#endif

#define FX_UNROLL16 _Pragma("GCC unroll 16")

/* plain_rows[l]: the group's row in lane l after the transpose or the add
 * tree; plain_lanes[r]: the lane of row r (the inverse). */
static const int32_t plain_rows[FX_ROWS] = {0, 2, 4,  6,  1, 3,  5,  7,
                                            8, 10, 12, 14, 9, 11, 13, 15};
static const int32_t plain_lanes[FX_ROWS] __attribute__((aligned(64))) = {
    0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15};

/* One group as rows_x reads it. */
typedef struct rows_group {
    const uint8_t *wr[FX_ROWS]; /* row i (i >= R: row R - 1 again) */
    const uint8_t *nx[FX_ROWS]; /* the rows after the group (prefetch) */
    bool has_next;              /* whether there are any */
    size_t pf_dist;             /* prefetch distance, <= a row */
    const uint8_t *d0;          /* row 0, the gather's base */
    int32_t at[FX_ROWS];        /* lane l's row start - d0 */
    __mmask16 store_mask;       /* rows stored, in row order */
} rows_group;

/* Pair p's quants of the block at byte off, +128. */
FX_ALWAYS_INLINE FX_VNNI __m512i pair_at(const rows_group *g, int p,
                                         size_t off) {
    const __m256i lo = _mm256_loadu_si256(
        (const __m256i *)(const void *)(g->wr[2 * p] + off + 2));
    const __m256i hi = _mm256_loadu_si256(
        (const __m256i *)(const void *)(g->wr[2 * p + 1] + off + 2));
    return _mm512_xor_si512(
        _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1),
        _mm512_set1_epi8((char)0x80));
}

/* Per 128-bit lane, dword i of a, b, c, d -> o[i] = (a_i, b_i, c_i, d_i). */
FX_ALWAYS_INLINE FX_VNNI void transpose4(__m512i a, __m512i b, __m512i c,
                                         __m512i d, __m512i *o) {
    const __m512i ab0 = _mm512_unpacklo_epi32(a, b);
    const __m512i ab1 = _mm512_unpackhi_epi32(a, b);
    const __m512i cd0 = _mm512_unpacklo_epi32(c, d);
    const __m512i cd1 = _mm512_unpackhi_epi32(c, d);
    o[0] = _mm512_unpacklo_epi64(ab0, cd0);
    o[1] = _mm512_unpackhi_epi64(ab0, cd0);
    o[2] = _mm512_unpacklo_epi64(ab1, cd1);
    o[3] = _mm512_unpackhi_epi64(ab1, cd1);
}

/* Pairs -> Q[j] = dword j of every row, rows in lanes as plain_rows: T[j]
 * (pairs 0-3) holds, per 128-bit lane, dword j (lanes 0, 2) or j + 4
 * (lanes 1, 3) of rows 0, 2, 4, 6 (lanes 0, 1) or 1, 3, 5, 7 (2, 3); U[j]
 * the same for rows 8-15. */
FX_ALWAYS_INLINE FX_VNNI void pairs_to_q(const __m512i *P, __m512i *Q) {
    __m512i T[4], U[4];
    transpose4(P[0], P[1], P[2], P[3], T);
    transpose4(P[4], P[5], P[6], P[7], U);
    FX_UNROLL
    for (int j = 0; j < 4; j++) {
        Q[j] = _mm512_shuffle_i32x4(T[j], U[j], _MM_SHUFFLE(2, 0, 2, 0));
        Q[j + 4] = _mm512_shuffle_i32x4(T[j], U[j], _MM_SHUFFLE(3, 1, 3, 1));
    }
}

/* The block sums of one x row by the add tree: v[p] lane 8h + i is the
 * i-th 4-product sum of row 2p + h. Pairs of vectors fold to sums over
 * the 4 dwords of each 128-bit lane (unpacks), then the two lanes of each
 * row add up (shuffle_i32x4), leaving the rows as plain_rows. */
FX_ALWAYS_INLINE FX_VNNI __m512i fold8(const __m512i *v) {
    __m512i a[4];
    FX_UNROLL
    for (int p = 0; p < 4; p++)
        a[p] = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2 * p], v[2 * p + 1]),
                                _mm512_unpackhi_epi32(v[2 * p], v[2 * p + 1]));
    const __m512i lo = _mm512_add_epi32(_mm512_unpacklo_epi64(a[0], a[1]),
                                        _mm512_unpackhi_epi64(a[0], a[1]));
    const __m512i hi = _mm512_add_epi32(_mm512_unpacklo_epi64(a[2], a[3]),
                                        _mm512_unpackhi_epi64(a[2], a[3]));
    return _mm512_add_epi32(
        _mm512_shuffle_i32x4(lo, hi, _MM_SHUFFLE(2, 0, 2, 0)),
        _mm512_shuffle_i32x4(lo, hi, _MM_SHUFFLE(3, 1, 3, 1)));
}

/* A block's Q[8] and scales as rows_x keeps them for the next chunks of
 * x rows (range_rows). */
#define FX_ROWS_PACK (9 * 64)

/* MR x rows against one group over all nb blocks (rows rb bytes apart).
 * pf: prefetch (the first pass over the group). pack_out: also keep each
 * block's Q and scales there; pack_in: take them from there instead of
 * the rows (MR > 2: the add tree needs the pairs). */
FX_ALWAYS_INLINE FX_VNNI void rows_x(const int MR, const xrow *xr, size_t nb,
                                     size_t rb, const rows_group *g, bool pf,
                                     const uint8_t *pack_in, uint8_t *pack_out,
                                     float *const *yr) {
    const bool fold = MR <= 2; /* never given a pack (range_rows) */
    const __m512i at = _mm512_loadu_si512((const void *)g->at);
    __m512 acc[FX_ROWS_MR];
    FX_UNROLL16
    for (int r = 0; r < MR; r++) acc[r] = _mm512_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        const size_t off = b * sizeof(fx_block_q8_0);
        if (pf) {
            const size_t o = off + g->pf_dist;
            if (o < rb) {
                FX_UNROLL16
                for (int i = 0; i < FX_ROWS; i++)
                    _mm_prefetch((const char *)g->wr[i] + o, _MM_HINT_T0);
            } else if (g->has_next) {
                FX_UNROLL16
                for (int i = 0; i < FX_ROWS; i++)
                    _mm_prefetch((const char *)g->nx[i] + (o - rb),
                                 _MM_HINT_T0);
            }
        }
        __m512i P[8], Q[8];
        __m512 s16;
        if (!fold && pack_in) {
            const uint8_t *pk = pack_in + b * FX_ROWS_PACK;
            FX_UNROLL
            for (int j = 0; j < 8; j++)
                Q[j] = _mm512_loadu_si512((const void *)(pk + 64 * j));
            s16 = _mm512_loadu_ps((const void *)(pk + 512));
        } else {
            FX_UNROLL
            for (int p = 0; p < 8; p++) P[p] = pair_at(g, p, off);
            if (!fold) pairs_to_q(P, Q);
            /* Each lane's f16 scale: the low half of its block's first
             * dword. */
            s16 = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(
                _mm512_i32gather_epi32(at, (const void *)(g->d0 + off), 1)));
            if (!fold && pack_out) {
                uint8_t *pk = pack_out + b * FX_ROWS_PACK;
                FX_UNROLL
                for (int j = 0; j < 8; j++)
                    _mm512_storeu_si512((void *)(pk + 64 * j), Q[j]);
                _mm512_storeu_ps((void *)(pk + 512), s16);
            }
        }
        FX_UNROLL16
        for (int r = 0; r < MR; r++) {
            const __m512i nc = _mm512_set1_epi32(i32_at(xr[r].nc + 4 * b));
            __m512i sum;
            if (fold) {
                const __m512i x2 = _mm512_broadcast_i64x4(_mm256_loadu_si256(
                    (const __m256i *)(const void *)(xr[r].q + 32 * b)));
                __m512i v[8];
                FX_UNROLL
                for (int p = 0; p < 8; p++)
                    v[p] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), P[p], x2);
                sum = _mm512_add_epi32(fold8(v), nc);
            } else {
                sum = nc;
                FX_UNROLL
                for (int j = 0; j < 8; j++)
                    sum = _mm512_dpbusd_epi32(
                        sum, Q[j],
                        _mm512_set1_epi32(i32_at(xr[r].q + 32 * b + 4 * j)));
            }
            acc[r] = _mm512_fmadd_ps(
                _mm512_mul_ps(s16, _mm512_set1_ps(f32_at(xr[r].dx + 4 * b))),
                _mm512_cvtepi32_ps(sum), acc[r]);
        }
    }
    const __m512i lanes = _mm512_load_si512((const void *)plain_lanes);
    FX_UNROLL16
    for (int r = 0; r < MR; r++)
        _mm512_mask_storeu_ps(yr[r], g->store_mask,
                              _mm512_permutexvar_ps(lanes, acc[r]));
}

typedef void (*rows_fn)(const xrow *xr, size_t nb, size_t rb,
                        const rows_group *g, bool pf, const uint8_t *pack_in,
                        uint8_t *pack_out, float *const *yr);

#define FX_ROWS_FN(MR)                                                       \
    static FX_VNNI void rows##MR(const xrow *xr, size_t nb, size_t rb,       \
                                 const rows_group *g, bool pf,               \
                                 const uint8_t *pack_in, uint8_t *pack_out,  \
                                 float *const *yr) {                         \
        rows_x(MR, xr, nb, rb, g, pf, pack_in, pack_out, yr);                \
    }
FX_ROWS_FN(1) FX_ROWS_FN(2) FX_ROWS_FN(3) FX_ROWS_FN(4)
FX_ROWS_FN(5) FX_ROWS_FN(6) FX_ROWS_FN(7) FX_ROWS_FN(8)
FX_ROWS_FN(9) FX_ROWS_FN(10) FX_ROWS_FN(11) FX_ROWS_FN(12)
FX_ROWS_FN(13) FX_ROWS_FN(14) FX_ROWS_FN(15) FX_ROWS_FN(16)

/* [MR - 1]; read-only. */
static const rows_fn rows_fns[FX_ROWS_MR] = {
    rows1, rows2,  rows3,  rows4,  rows5,  rows6,  rows7,  rows8,
    rows9, rows10, rows11, rows12, rows13, rows14, rows15, rows16};

/* Columns [n0, n1) (any), in groups of 16 from n0, each read from memory
 * once per FX_Q8_MBLOCK x rows, x rows 16 at a time over it (later
 * chunks find the group in L1/L2). */
static FX_VNNI void range_rows(const fx_mm_job *job, size_t n0, size_t n1,
                               float *scratch) {
    const size_t k = job->k, nb = k / FX_QK8_0, rb = job->row_bytes;
    /* The gather's offsets are int32: past that (K near 2^27) the
     * portable form, the same arithmetic. */
    if ((FX_ROWS - 1) * rb > (size_t)INT32_MAX) {
        fx_mm_q8_portable(job, n0, n1, NULL);
        return;
    }
    /* A group's transposed blocks, if they fit (K up to ~34000). */
    uint8_t *pack = nb * FX_ROWS_PACK <= FX_MM_SCRATCH_FLOATS * sizeof(float)
                        ? (uint8_t *)scratch
                        : NULL;
    for (size_t m0 = 0; m0 < job->m; m0 += FX_Q8_MBLOCK) {
        const size_t m1 = min_sz(job->m, m0 + FX_Q8_MBLOCK);
        for (size_t n = n0; n < n1; n += FX_ROWS) {
            const size_t rows = min_sz(FX_ROWS, n1 - n);
            const size_t next = n + rows;
            rows_group g;
            g.d0 = job->w + n * rb;
            g.has_next = next < job->n;
            g.pf_dist = min_sz(FX_Q8_ROW_PF, rb);
            for (size_t i = 0; i < FX_ROWS; i++) {
                g.wr[i] = g.d0 + min_sz(i, rows - 1) * rb;
                g.nx[i] = g.has_next
                              ? job->w + min_sz(next + i, job->n - 1) * rb
                              : g.d0;
                g.at[i] = (int32_t)(
                    min_sz((size_t)plain_rows[i], rows - 1) * rb);
            }
            g.store_mask = (__mmask16)((1u << rows) - 1u);
            for (size_t m = m0; m < m1; m += FX_ROWS_MR) {
                const size_t mr = min_sz(FX_ROWS_MR, m1 - m);
                xrow xr[FX_ROWS_MR];
                float *yr[FX_ROWS_MR];
                for (size_t r = 0; r < mr; r++) {
                    xr[r] = xrow_at(job, m + r);
                    yr[r] = job->y + (m + r) * job->ldy + n;
                }
                /* More than one chunk: the first keeps the transposed
                 * blocks, the others (of more than 2 rows) read them. */
                const bool more = m1 - m0 > FX_ROWS_MR && pack;
                rows_fns[mr - 1](xr, nb, rb, &g, m == m0,
                                 more && m > m0 && mr > 2 ? pack : NULL,
                                 more && m == m0 ? pack : NULL, yr);
            }
        }
    }
}

static FX_VNNI void range_vnni(const fx_mm_job *job, size_t n0, size_t n1,
                               float *scratch) {
    if (n0 >= n1) return;
    if (job->type == FX_WTYPE_Q8_0_R16) range_r16(job, n0, n1);
    else range_rows(job, n0, n1, scratch);
}

fx_mm_range_fn fx_mm_q8_avx512_range(void) { return range_vnni; }

#else /* not x86-64 GCC/Clang */

uint32_t fx_q8_r16_prefetch_rows(void) { return 0x1f0u; }
fx_mm_range_fn fx_mm_q8_avx512_range(void) { return NULL; }

#endif
