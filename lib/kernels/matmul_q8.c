/*
 * Q8_0 matmul on quantized activations: the activation quantizer and the
 * integer dot product, portable and AVX2 (the AVX-512 VNNI form is in
 * matmul_q8_avx512.c). kernels.h defines the arithmetic; every form here
 * performs exactly that: the quantizer is the same IEEE operations in the
 * same order, each block's 32 products are summed as an exact integer (no
 * saturation anywhere, see below; integer addition has no order to keep),
 * and per output there is one float accumulator taking one fma per block,
 * with s = f32(dw) * dx rounded once, in block order.
 *
 * Why integers: with Q8_0 weights the float path spent more time widening
 * int8 to float (and multiplying by the scale) than reading memory, so one
 * decode row ran at less than half the memory bandwidth. With both sides
 * as int8, 32 products cost a few instructions per block. Why one integer
 * per block: the float work is then one fma per row and block, done for 8
 * rows at once in one ymm (the R16 layout gives 8 rows' same quants in
 * one 32-byte load), instead of 8 group sums of one row and a reduction.
 */
#include "matmul_impl.h"

#include <math.h>
#include <string.h>

/* Where block b's correction and scale live in a quantized row of k
 * elements (matmul_impl.h): nc[b] at k + 4b, d[b] at k + 4 nb + 4b. */
static size_t xq_nc_off(size_t k, size_t b) { return k + 4 * b; }
static size_t xq_d_off(size_t k, size_t b) {
    return k + 4 * (k / FX_QK8_0) + 4 * b;
}

float fx_xq_block(const float *xb, size_t n, int8_t *q) {
    uint32_t amax = 0;
    for (size_t i = 0; i < n; i++) {
        const uint32_t a = fx_f32_bits(xb[i]) & 0x7fffffffu;
        if (a > amax) amax = a;
    }
    float d, id = 0.0f;
    if (fx_xq_scale(amax, &d, &id)) {
        /* Round to nearest, ties to even (the default mode), as the
         * vector conversion does; |x * id| <= 127 (1 + 2u) rounds to at
         * most 127. */
        for (size_t i = 0; i < n; i++) q[i] = (int8_t)nearbyintf(xb[i] * id);
    } else {
        memset(q, 0, n);
    }
    return d;
}

void fx_xq_portable(const float *x, size_t ldx, size_t m, size_t k,
                    uint8_t *xq, size_t ld) {
    const size_t nb = k / FX_QK8_0;
    for (size_t r = 0; r < m; r++) {
        const float *xr = x + r * ldx;
        uint8_t *row = xq + r * ld;
        for (size_t b = 0; b < nb; b++) {
            int8_t q[FX_QK8_0];
            const float d = fx_xq_block(xr + b * FX_QK8_0, FX_QK8_0, q);
            int32_t sum = 0;
            for (int i = 0; i < FX_QK8_0; i++) sum += q[i];
            const int32_t nc = -128 * sum;
            memcpy(row + b * FX_QK8_0, q, sizeof q);
            memcpy(row + xq_nc_off(k, b), &nc, sizeof nc);
            memcpy(row + xq_d_off(k, b), &d, sizeof d);
        }
    }
}

/* One weight block of either layout: its quants (each XOR flip gives the
 * int8; R16 groups them 4 at a time, stride bytes apart) and f16 scale. */
typedef struct q8_block {
    const uint8_t *q, *d;
    size_t stride;
    uint8_t flip;
} q8_block;

static q8_block q8_block_at(const fx_mm_job *job, size_t n, size_t b) {
    q8_block blk;
    if (job->type == FX_WTYPE_Q8_0_R16) {
        size_t q, d;
        fx_q8_r16_at(job->n, job->k / FX_QK8_0, n, b, &q, &d, &blk.stride);
        blk.q = job->w + q;
        blk.d = job->w + d;
        blk.flip = 0x80;
    } else {
        blk.d = job->w + n * job->row_bytes + b * sizeof(fx_block_q8_0);
        blk.q = blk.d + 2;
        blk.stride = 4; /* the 4-quant groups are simply consecutive */
        blk.flip = 0;
    }
    return blk;
}

void fx_mm_q8_portable(const fx_mm_job *job, size_t n0, size_t n1,
                       float *scratch) {
    (void)scratch;
    const size_t k = job->k, nb = k / FX_QK8_0;
    for (size_t m = 0; m < job->m; m++) {
        const uint8_t *xr = job->xq + m * job->xq_ld;
        const int8_t *q = (const int8_t *)xr;
        for (size_t n = n0; n < n1; n++) {
            float acc = 0.0f;
            for (size_t b = 0; b < nb; b++) {
                const q8_block blk = q8_block_at(job, n, b);
                uint16_t dh;
                float dx;
                memcpy(&dh, blk.d, sizeof dh);
                memcpy(&dx, xr + xq_d_off(k, b), sizeof dx);
                const float s = fx_f16_to_f32(dh) * dx;
                const int8_t *qx = q + b * FX_QK8_0;
                int32_t p = 0;
                for (int j = 0; j < 8; j++)
                    for (int t = 0; t < 4; t++)
                        p += (int8_t)(blk.q[j * blk.stride + t] ^ blk.flip) *
                             qx[4 * j + t];
                acc = fmaf(s, (float)p, acc);
            }
            job->y[m * job->ldy + n] = acc;
        }
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>

#define FX_AVX2 __attribute__((target("avx2,fma,f16c")))
#define FX_ALWAYS_INLINE static inline __attribute__((always_inline))
#define FX_UNROLL _Pragma("GCC unroll 8")
#ifndef FX_PF_DIST
#define FX_PF_DIST 2048
#endif

/* The same operations as fx_xq_portable, 8 lanes at a time: the integer
 * max of the magnitude bits, the scalar scale, x * id rounded to nearest
 * even by cvtps2dq (MXCSR's default mode, as nearbyintf), narrowed
 * without saturation (|q| <= 127). */
static FX_AVX2 void xq_avx2(const float *x, size_t ldx, size_t m, size_t k,
                            uint8_t *xq, size_t ld) {
    const size_t nb = k / FX_QK8_0;
    const __m256i magnitude = _mm256_set1_epi32(0x7fffffff);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (size_t r = 0; r < m; r++) {
        const float *xr = x + r * ldx;
        uint8_t *row = xq + r * ld;
        for (size_t b = 0; b < nb; b++) {
            const float *xb = xr + b * FX_QK8_0;
            __m256 v[4];
            __m256i a = _mm256_setzero_si256();
            for (int i = 0; i < 4; i++) {
                v[i] = _mm256_loadu_ps(xb + 8 * i);
                a = _mm256_max_epu32(
                    a, _mm256_and_si256(_mm256_castps_si256(v[i]), magnitude));
            }
            __m128i a4 = _mm_max_epu32(_mm256_castsi256_si128(a),
                                       _mm256_extracti128_si256(a, 1));
            a4 = _mm_max_epu32(a4, _mm_shuffle_epi32(a4, _MM_SHUFFLE(1, 0, 3, 2)));
            a4 = _mm_max_epu32(a4, _mm_shuffle_epi32(a4, _MM_SHUFFLE(2, 3, 0, 1)));
            float d, id = 0.0f;
            __m256i q = _mm256_setzero_si256();
            if (fx_xq_scale((uint32_t)_mm_cvtsi128_si32(a4), &d, &id)) {
                const __m256 vid = _mm256_set1_ps(id);
                __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(v[0], vid));
                __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(v[1], vid));
                __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(v[2], vid));
                __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(v[3], vid));
                /* The packs work within 128-bit lanes; the permute puts
                 * the 4-byte groups back in element order. */
                q = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1),
                                       _mm256_packs_epi32(i2, i3));
                q = _mm256_permutevar8x32_epi32(q, order);
            }
            /* The block sum: maddubs(1, q) pairs, madd(., 1) quads, then
             * the 8 quads (exact integers: any order). */
            __m256i s8 = _mm256_madd_epi16(
                _mm256_maddubs_epi16(_mm256_set1_epi8(1), q),
                _mm256_set1_epi16(1));
            __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s8),
                                       _mm256_extracti128_si256(s8, 1));
            s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(1, 0, 3, 2)));
            s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(2, 3, 0, 1)));
            const int32_t nc = -128 * _mm_cvtsi128_si32(s4);
            _mm256_storeu_si256((__m256i *)(void *)(row + b * FX_QK8_0), q);
            memcpy(row + xq_nc_off(k, b), &nc, sizeof nc);
            memcpy(row + xq_d_off(k, b), &d, sizeof d);
        }
    }
}

fx_xq_fn fx_xq_avx2(void) { return xq_avx2; }

static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

/* Both layouts multiply signed weights w by quants x with maddubs(|w|,
 * sign(x, w)): each int16 is a pair w*x + w*x, at most 2 * 128 * 127 =
 * 32512 (|x| <= 127), so nothing saturates; madd(., 1) then gives exact
 * sums of 4 products per int32 lane. */
FX_ALWAYS_INLINE FX_AVX2 __m256i dot4(__m256i aw, __m256i w, __m256i x,
                                      __m256i ones) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(x, w)),
                             ones);
}

/* Marks v as live in a register here, computed by nothing the compiler
 * can see. GCC reassociates the block sums p += dot4(...) (exact integer
 * adds: it may) into a tree over all eight groups of a block, keeps every
 * group's partial sum until the end of the block and spills them: 16
 * stores and reloads per block in r16_dual1, 24 in the 4-row tile. With
 * each sum pinned after its add the chains stay chains, in registers.
 * Same operations, same bits. */
#define FX_PIN(v) __asm__("" : "+x"(v))

FX_ALWAYS_INLINE float xq_dx(const uint8_t *xr, size_t k, size_t b) {
    float dx;
    memcpy(&dx, xr + xq_d_off(k, b), sizeof dx);
    return dx;
}

/* ---- FX_WTYPE_Q8_0_R16 ----
 *
 * One 16-row tile (R rows, R = 16 unless it is the matrix's last) against
 * MR x rows, over all blocks. The tile's rows are two halves of 8; a
 * 32-byte load at group j of a block holds quants 4j..4j+3 of a half's 8
 * rows, so a ymm of int32 collects the 8 rows' block integers p over j =
 * 0..7 against x's 4 quants broadcast, and one ymm of floats is the 8
 * rows' accumulators: per block a cvtph of the 8 scales, one mul by dx
 * and one fma, each lane exactly the scalar definition for its row.
 *
 * Both halves in one pass, so every line is read once, even for MR = 3, 4,
 * where the 4 MR accumulators and block sums exceed the 16 registers: the
 * accumulators, touched once per block, spill cheaply, and a pass per half
 * is slower.
 *
 * full: R = 16, every load plain. Otherwise (the last tile only) the
 * quants are masked loads of the half's rows (4 R bytes per group) and
 * the scales a small copy, so nothing past the matrix is read; lanes of
 * missing rows compute zeros that are never stored. Only the first cnt
 * rows of the tile are stored (yr[i] points at the tile's first row). */
FX_ALWAYS_INLINE FX_AVX2 void r16_tile(const int MR, const bool full,
                                       const uint8_t *tile, size_t R,
                                       size_t k, const uint8_t *const *xr,
                                       float *const *yr, size_t cnt) {
    const size_t nb = k / FX_QK8_0;
    const size_t stride = full ? 64 : 4 * R;
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    size_t hrows[2];
    __m256i mask[2];
    for (int hh = 0; hh < 2; hh++) {
        const size_t first = 8 * (size_t)hh;
        hrows[hh] = R > first ? min_sz(8, R - first) : 0;
        mask[hh] = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)hrows[hh]), lane);
    }
    __m256 acc[4][2];
    FX_UNROLL
    for (int i = 0; i < MR; i++)
        FX_UNROLL
        for (int hh = 0; hh < 2; hh++) acc[i][hh] = _mm256_setzero_ps();
    const uint8_t *grp = tile;
    for (size_t g = 0; g < nb; g += FX_R16_GROUP) {
        const size_t gb = min_sz(FX_R16_GROUP, nb - g);
        for (size_t ib = 0; ib < gb; ib++) {
            const size_t b = g + ib;
            const uint8_t *d = grp + ib * 2 * R;
            const uint8_t *q = grp + gb * 2 * R + ib * FX_QK8_0 * R;
            __m256i p[4][2];
            FX_UNROLL
            for (int i = 0; i < MR; i++)
                FX_UNROLL
                for (int hh = 0; hh < 2; hh++)
                    p[i][hh] = _mm256_setzero_si256();
            FX_UNROLL
            for (int j = 0; j < 8; j++) {
                const uint8_t *qj = q + (size_t)j * stride;
                _mm_prefetch((const char *)qj + FX_PF_DIST, _MM_HINT_T0);
                __m256i w[2], aw[2];
                FX_UNROLL
                for (int hh = 0; hh < 2; hh++) {
                    const uint8_t *src = qj + 32 * hh;
                    const __m256i raw =
                        full ? _mm256_loadu_si256((const __m256i *)(const void *)src)
                             : _mm256_maskload_epi32((const int *)(const void *)src,
                                                     mask[hh]);
                    w[hh] = _mm256_xor_si256(raw, flip);
                    aw[hh] = _mm256_abs_epi8(w[hh]);
                }
                FX_UNROLL
                for (int i = 0; i < MR; i++) {
                    int32_t x4;
                    memcpy(&x4, xr[i] + FX_QK8_0 * b + 4 * j, sizeof x4);
                    const __m256i xb = _mm256_set1_epi32(x4);
                    FX_UNROLL
                    for (int hh = 0; hh < 2; hh++) {
                        p[i][hh] = _mm256_add_epi32(
                            p[i][hh], dot4(aw[hh], w[hh], xb, ones));
                        FX_PIN(p[i][hh]);
                    }
                }
            }
            FX_UNROLL
            for (int hh = 0; hh < 2; hh++) {
                const uint8_t *dh = d + 16 * hh;
                __m128i dw16;
                if (full) {
                    dw16 = _mm_loadu_si128((const __m128i *)(const void *)dh);
                } else {
                    uint16_t buf[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                    memcpy(buf, dh, 2 * hrows[hh]);
                    dw16 = _mm_loadu_si128((const __m128i *)(const void *)buf);
                }
                const __m256 dw = _mm256_cvtph_ps(dw16);
                FX_UNROLL
                for (int i = 0; i < MR; i++) {
                    const __m256 s =
                        _mm256_mul_ps(dw, _mm256_set1_ps(xq_dx(xr[i], k, b)));
                    acc[i][hh] = _mm256_fmadd_ps(
                        s, _mm256_cvtepi32_ps(p[i][hh]), acc[i][hh]);
                }
            }
        }
        grp += gb * R * sizeof(fx_block_q8_0);
    }
    FX_UNROLL
    for (int hh = 0; hh < 2; hh++) {
        const size_t first = 8 * (size_t)hh;
        const size_t store = cnt > first ? min_sz(8, cnt - first) : 0;
        FX_UNROLL
        for (int i = 0; i < MR; i++) {
            if (store == 8) {
                _mm256_storeu_ps(yr[i] + first, acc[i][hh]);
            } else if (store > 0) {
                float tmp[8];
                _mm256_storeu_ps(tmp, acc[i][hh]);
                memcpy(yr[i] + first, tmp, store * sizeof(float));
            }
        }
    }
}

typedef void (*r16_tile_fn)(const uint8_t *tile, size_t R, size_t k,
                            const uint8_t *const *xr, float *const *yr,
                            size_t cnt);

#define FX_R16_TILE(MR, FULL, NAME)                                         \
    static FX_AVX2 void NAME(const uint8_t *tile, size_t R, size_t k,       \
                             const uint8_t *const *xr, float *const *yr,    \
                             size_t cnt) {                                  \
        r16_tile(MR, FULL, tile, R, k, xr, yr, cnt);                        \
    }
FX_R16_TILE(1, true, r16_f1) FX_R16_TILE(2, true, r16_f2)
FX_R16_TILE(3, true, r16_f3) FX_R16_TILE(4, true, r16_f4)
FX_R16_TILE(1, false, r16_p1) FX_R16_TILE(2, false, r16_p2)
FX_R16_TILE(3, false, r16_p3) FX_R16_TILE(4, false, r16_p4)

/* [full][MR - 1] */
static const r16_tile_fn r16_tiles[2][4] = {
    {r16_p1, r16_p2, r16_p3, r16_p4}, {r16_f1, r16_f2, r16_f3, r16_f4}};

/* One x row against two full tiles far apart, block by block in
 * lockstep: two forward streams per core instead of one, each prefetched
 * FX_PF_DUAL ahead. Each tile's arithmetic is r16_tile's (MR = 1, full),
 * in the same order: same bits. */
#ifndef FX_PF_DUAL
#define FX_PF_DUAL 1024
#endif

static FX_AVX2 void r16_dual1(const uint8_t *ta, const uint8_t *tb, size_t k,
                              const uint8_t *xr, float *ya, float *yb) {
    const size_t R = FX_R16_ROWS, nb = k / FX_QK8_0;
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    const uint8_t *const base[2] = {ta, tb};
    __m256 acc[2][2];
    FX_UNROLL
    for (int t = 0; t < 2; t++)
        FX_UNROLL
        for (int hh = 0; hh < 2; hh++) acc[t][hh] = _mm256_setzero_ps();
    /* Both tiles are full, so their groups sit at the same offsets. */
    size_t grp = 0;
    for (size_t g = 0; g < nb; g += FX_R16_GROUP) {
        const size_t gb = min_sz(FX_R16_GROUP, nb - g);
        for (size_t ib = 0; ib < gb; ib++) {
            const size_t b = g + ib;
            const size_t d_off = grp + ib * 2 * R;
            const size_t q_off = grp + gb * 2 * R + ib * FX_QK8_0 * R;
            const __m256 dx = _mm256_set1_ps(xq_dx(xr, k, b));
            FX_UNROLL
            for (int t = 0; t < 2; t++) {
                const uint8_t *q = base[t] + q_off;
                __m256i p[2] = {_mm256_setzero_si256(),
                                _mm256_setzero_si256()};
                FX_UNROLL
                for (int j = 0; j < 8; j++) {
                    const uint8_t *qj = q + (size_t)j * 64;
                    _mm_prefetch((const char *)qj + FX_PF_DUAL, _MM_HINT_T0);
                    int32_t x4;
                    memcpy(&x4, xr + FX_QK8_0 * b + 4 * j, sizeof x4);
                    const __m256i xb = _mm256_set1_epi32(x4);
                    FX_UNROLL
                    for (int hh = 0; hh < 2; hh++) {
                        const __m256i w = _mm256_xor_si256(
                            _mm256_loadu_si256(
                                (const __m256i *)(const void *)(qj + 32 * hh)),
                            flip);
                        p[hh] = _mm256_add_epi32(
                            p[hh], dot4(_mm256_abs_epi8(w), w, xb, ones));
                        FX_PIN(p[hh]);
                    }
                }
                FX_UNROLL
                for (int hh = 0; hh < 2; hh++) {
                    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(
                        (const __m128i *)(const void *)(base[t] + d_off +
                                                        16 * hh)));
                    acc[t][hh] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx),
                                                 _mm256_cvtepi32_ps(p[hh]),
                                                 acc[t][hh]);
                }
            }
        }
        grp += gb * R * sizeof(fx_block_q8_0);
    }
    FX_UNROLL
    for (int hh = 0; hh < 2; hh++) {
        _mm256_storeu_ps(ya + 8 * hh, acc[0][hh]);
        _mm256_storeu_ps(yb + 8 * hh, acc[1][hh]);
    }
}

/* Tile by tile; each tile against the x rows in chunks of 4 (the tile,
 * 16 * K * 34 / 32 bytes, stays in L2 between chunks). A start inside a
 * tile (the caller aligns tasks to tiles, so only on other callers' ranges)
 * is done row by row by the portable code, which is the same arithmetic. */
static FX_AVX2 void r16_range(const fx_mm_job *job, size_t n0, size_t n1) {
    const size_t k = job->k, nb = k / FX_QK8_0;
    size_t n = n0;
    if (n % FX_R16_ROWS != 0) {
        const size_t a = min_sz((n / FX_R16_ROWS + 1) * FX_R16_ROWS, n1);
        fx_mm_q8_portable(job, n, a, NULL);
        n = a;
    }
    if (job->m == 1) {
        /* The range's whole tiles in two halves, tile t with tile
         * t + half (r16_dual1); an odd one and a partial one below. */
        const size_t row_bytes = nb * sizeof(fx_block_q8_0);
        const size_t half = (n1 - n) / FX_R16_ROWS / 2;
        for (size_t t = 0; t < half; t++) {
            const size_t na = n + t * FX_R16_ROWS;
            const size_t nb2 = na + half * FX_R16_ROWS;
            r16_dual1(job->w + na * row_bytes, job->w + nb2 * row_bytes, k,
                      job->xq, job->y + na, job->y + nb2);
        }
        n += 2 * half * FX_R16_ROWS;
    }
    for (; n < n1; n += FX_R16_ROWS) {
        const size_t R = min_sz(FX_R16_ROWS, job->n - n);
        const size_t cnt = min_sz(R, n1 - n);
        const uint8_t *tile = job->w + n * nb * sizeof(fx_block_q8_0);
        for (size_t m = 0; m < job->m; m += 4) {
            const size_t mr = min_sz(4, job->m - m);
            const uint8_t *xr[4];
            float *yr[4];
            for (size_t i = 0; i < mr; i++) {
                xr[i] = job->xq + (m + i) * job->xq_ld;
                yr[i] = job->y + (m + i) * job->ldy + n;
            }
            r16_tiles[R == FX_R16_ROWS][mr - 1](tile, R, k, xr, yr, cnt);
        }
    }
}

/* ---- FX_WTYPE_Q8_0 (rows of ggml blocks) ----
 *
 * MR x rows against 4 weight rows (from row n; nr < 4 real rows repeat
 * the last one, whose extra lanes are not stored). Per block and x row,
 * each weight row's 8 lanes of 4-product sums are added by a hadd tree
 * into one xmm of the 4 rows' exact block integers, then one mul and one
 * fma per 4 outputs, each lane the scalar definition for its row. */
FX_ALWAYS_INLINE FX_AVX2 void rows_tile(const int MR, const uint8_t *const *xr,
                                        const fx_mm_job *job, size_t n,
                                        size_t nr, float *const *yr) {
    const size_t k = job->k, nb = k / FX_QK8_0;
    const __m256i ones = _mm256_set1_epi16(1);
    const uint8_t *rw[4];
    for (size_t j = 0; j < 4; j++)
        rw[j] = job->w + (n + min_sz(j, nr - 1)) * job->row_bytes;
    __m128 acc[4];
    FX_UNROLL
    for (int i = 0; i < MR; i++) acc[i] = _mm_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        __m256i w[4], aw[4];
        uint16_t dh[4];
        FX_UNROLL
        for (int j = 0; j < 4; j++) {
            _mm_prefetch((const char *)rw[j] + FX_PF_DIST, _MM_HINT_T0);
            memcpy(&dh[j], rw[j], sizeof dh[j]);
            w[j] = _mm256_loadu_si256((const __m256i *)(const void *)(rw[j] + 2));
            aw[j] = _mm256_abs_epi8(w[j]);
            rw[j] += sizeof(fx_block_q8_0);
        }
        const __m128 dw = _mm_cvtph_ps(_mm_setr_epi16(
            (short)dh[0], (short)dh[1], (short)dh[2], (short)dh[3], 0, 0, 0, 0));
        FX_UNROLL
        for (int i = 0; i < MR; i++) {
            const __m256i xv = _mm256_loadu_si256(
                (const __m256i *)(const void *)(xr[i] + FX_QK8_0 * b));
            const __m256i h01 = _mm256_hadd_epi32(dot4(aw[0], w[0], xv, ones),
                                                  dot4(aw[1], w[1], xv, ones));
            const __m256i h23 = _mm256_hadd_epi32(dot4(aw[2], w[2], xv, ones),
                                                  dot4(aw[3], w[3], xv, ones));
            const __m256i h = _mm256_hadd_epi32(h01, h23);
            const __m128i p = _mm_add_epi32(_mm256_castsi256_si128(h),
                                            _mm256_extracti128_si256(h, 1));
            const __m128 s = _mm_mul_ps(dw, _mm_set1_ps(xq_dx(xr[i], k, b)));
            acc[i] = _mm_fmadd_ps(s, _mm_cvtepi32_ps(p), acc[i]);
        }
    }
    FX_UNROLL
    for (int i = 0; i < MR; i++) {
        if (nr == 4) {
            _mm_storeu_ps(yr[i], acc[i]);
        } else {
            float tmp[4];
            _mm_storeu_ps(tmp, acc[i]);
            memcpy(yr[i], tmp, nr * sizeof(float));
        }
    }
}

typedef void (*rows_tile_fn)(const uint8_t *const *xr, const fx_mm_job *job,
                             size_t n, size_t nr, float *const *yr);

#define FX_ROWS_TILE(MR)                                                     \
    static FX_AVX2 void rows_##MR(const uint8_t *const *xr,                  \
                                  const fx_mm_job *job, size_t n, size_t nr, \
                                  float *const *yr) {                        \
        rows_tile(MR, xr, job, n, nr, yr);                                   \
    }
FX_ROWS_TILE(1) FX_ROWS_TILE(2) FX_ROWS_TILE(3) FX_ROWS_TILE(4)

static const rows_tile_fn rows_tiles[4] = {rows_1, rows_2, rows_3, rows_4};

/* W rows in groups read from memory once per call; chunks of 4 x rows
 * find the group in L1/L2 (24 rows of K = 4096 int8 weights: 104 KiB). */
#define FX_Q8_GROUP 24

static FX_AVX2 void rows_range(const fx_mm_job *job, size_t n0, size_t n1) {
    for (size_t n = n0; n < n1; n += FX_Q8_GROUP) {
        const size_t g = min_sz(FX_Q8_GROUP, n1 - n);
        for (size_t m = 0; m < job->m; m += 4) {
            const size_t mr = min_sz(4, job->m - m);
            const uint8_t *xr[4];
            float *yr[4];
            for (size_t i = 0; i < mr; i++)
                xr[i] = job->xq + (m + i) * job->xq_ld;
            for (size_t j = 0; j < g; j += 4) {
                const size_t nr = min_sz(4, g - j);
                for (size_t i = 0; i < mr; i++)
                    yr[i] = job->y + (m + i) * job->ldy + n + j;
                rows_tiles[mr - 1](xr, job, n + j, nr, yr);
            }
        }
    }
}

static FX_AVX2 void q8_range_avx2(const fx_mm_job *job, size_t n0, size_t n1,
                                  float *scratch) {
    (void)scratch;
    if (n0 >= n1) return;
    if (job->type == FX_WTYPE_Q8_0_R16) r16_range(job, n0, n1);
    else rows_range(job, n0, n1);
}

fx_mm_range_fn fx_mm_q8_avx2_range(void) { return q8_range_avx2; }

#else /* not x86-64 GCC/Clang */

fx_xq_fn fx_xq_avx2(void) { return NULL; }
fx_mm_range_fn fx_mm_q8_avx2_range(void) { return NULL; }

#endif
