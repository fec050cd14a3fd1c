/*
 * Q8_0 matmul on quantized activations: the activation quantizer and the
 * integer dot product, portable and AVX2 (the AVX-512 VNNI form is in
 * matmul_q8_avx512.c). kernels.h defines the arithmetic; every form here
 * performs exactly that: the quantizer is the same IEEE operations in the
 * same order, the block dot products are exact integers (no saturation
 * anywhere, see below), and the float accumulation is 8 lanes, one fma
 * per block, in block order.
 *
 * Why integers: with Q8_0 weights the float path spent more time widening
 * int8 to float (and multiplying by the scale) than reading memory, so one
 * decode row ran at less than half the memory bandwidth. With both sides
 * as int8, 32 products cost one or two instructions per block.
 */
#include "matmul_impl.h"

#include <math.h>
#include <string.h>

/* Blocks whose largest magnitude is below this quantize to zeros: 127 /
 * amax must stay finite, and no product of such an activation with a
 * weight reaches the float range that matters next to the rest of a row. */
#define FX_XQ_TINY 0x1p-100f

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The scalar part of quantizing one block, shared by every form: from the
 * largest |x| as bits (NaN bits above inf above every finite value) to the
 * scale d and the multiplier id. Returns false when the quants are all
 * zero (then d is 0 for a tiny block, NaN for one holding inf or NaN). */
static bool xq_scale(uint32_t amax_bits, float *d, float *id) {
    if (amax_bits >= 0x7f800000u) {
        *d = NAN;
        return false;
    }
    const float amax = bits_f32(amax_bits);
    if (amax < FX_XQ_TINY) {
        *d = 0.0f;
        return false;
    }
    *d = amax / 127.0f;
    *id = 127.0f / amax;
    return true;
}

void fx_xq_portable(const float *x, size_t ldx, size_t m, size_t k,
                    uint8_t *xq, size_t ld) {
    const size_t nb = k / FX_QK8_0;
    for (size_t r = 0; r < m; r++) {
        const float *xr = x + r * ldx;
        uint8_t *row = xq + r * ld;
        for (size_t b = 0; b < nb; b++) {
            const float *xb = xr + b * FX_QK8_0;
            uint32_t amax = 0;
            for (int i = 0; i < FX_QK8_0; i++) {
                uint32_t a = f32_bits(xb[i]) & 0x7fffffffu;
                if (a > amax) amax = a;
            }
            float d, id = 0.0f;
            int8_t q[FX_QK8_0];
            if (xq_scale(amax, &d, &id)) {
                /* Round to nearest, ties to even (the default mode), as
                 * the vector conversion does; |x * id| <= 127 (1 + 2u)
                 * rounds to at most 127. */
                for (int i = 0; i < FX_QK8_0; i++)
                    q[i] = (int8_t)nearbyintf(xb[i] * id);
            } else {
                memset(q, 0, sizeof q);
            }
            int32_t nc[8];
            for (int j = 0; j < 8; j++)
                nc[j] = -128 * (q[4 * j] + q[4 * j + 1] + q[4 * j + 2] +
                                q[4 * j + 3]);
            memcpy(row + b * FX_QK8_0, q, sizeof q);
            memcpy(row + k + b * sizeof nc, nc, sizeof nc);
            memcpy(row + 2 * k + b * sizeof d, &d, sizeof d);
        }
    }
}

/* One weight block of either layout: its quants (each XOR flip gives the
 * int8) and its f16 scale. */
typedef struct q8_block {
    const uint8_t *q, *d;
    uint8_t flip;
} q8_block;

static q8_block q8_block_at(const fx_mm_job *job, size_t n, size_t b) {
    q8_block blk;
    if (job->type == FX_WTYPE_Q8_0_R12) {
        size_t q, d;
        fx_q8_r12_at(job->n, job->k / FX_QK8_0, n, b, &q, &d);
        blk.q = job->w + q;
        blk.d = job->w + d;
        blk.flip = 0x80;
    } else {
        blk.d = job->w + n * job->row_bytes + b * sizeof(fx_block_q8_0);
        blk.q = blk.d + 2;
        blk.flip = 0;
    }
    return blk;
}

static float tree8(const float a[8]) {
    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

void fx_mm_q8_portable(const fx_mm_job *job, size_t n0, size_t n1,
                       float *scratch) {
    (void)scratch;
    const size_t k = job->k, nb = k / FX_QK8_0;
    for (size_t m = 0; m < job->m; m++) {
        const uint8_t *xr = job->xq + m * job->xq_ld;
        const int8_t *q = (const int8_t *)xr;
        for (size_t n = n0; n < n1; n++) {
            float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            for (size_t b = 0; b < nb; b++) {
                const q8_block blk = q8_block_at(job, n, b);
                uint16_t dh;
                float dx;
                memcpy(&dh, blk.d, sizeof dh);
                memcpy(&dx, xr + 2 * k + b * sizeof dx, sizeof dx);
                const float s = fx_f16_to_f32(dh) * dx;
                const int8_t *qx = q + b * FX_QK8_0;
                for (int j = 0; j < 8; j++) {
                    int32_t p = 0;
                    for (int t = 4 * j; t < 4 * j + 4; t++)
                        p += (int8_t)(blk.q[t] ^ blk.flip) * qx[t];
                    acc[j] = fmaf(s, (float)p, acc[j]);
                }
            }
            job->y[m * job->ldy + n] = tree8(acc);
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
            if (xq_scale((uint32_t)_mm_cvtsi128_si32(a4), &d, &id)) {
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
            /* Group sums of 4: maddubs(1, q) pairs, madd(., 1) quads. */
            __m256i s4 = _mm256_madd_epi16(
                _mm256_maddubs_epi16(_mm256_set1_epi8(1), q),
                _mm256_set1_epi16(1));
            __m256i nc = _mm256_sub_epi32(_mm256_setzero_si256(),
                                          _mm256_slli_epi32(s4, 7));
            _mm256_storeu_si256((__m256i *)(void *)(row + b * FX_QK8_0), q);
            _mm256_storeu_si256((__m256i *)(void *)(row + k + 32 * b), nc);
            memcpy(row + 2 * k + b * sizeof d, &d, sizeof d);
        }
    }
}

fx_xq_fn fx_xq_avx2(void) { return xq_avx2; }

/* ((a0+a4) + (a2+a6)) + ((a1+a5) + (a3+a7)), as matmul_avx2.c. */
FX_ALWAYS_INLINE FX_AVX2 float reduce8(__m256 v) {
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v),
                           _mm256_extractf128_ps(v, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
    return _mm_cvtss_f32(s1);
}

/* Where NR weight rows' blocks are, in either layout: the current block's
 * quants and scale per row, advanced by a fixed step per block; R12
 * matrices change steps at every group of 8 blocks (q8_rows_seek). */
typedef struct q8_rows {
    const uint8_t *q[4], *d[4];
    size_t q_step[4], d_step[4];
    uint8_t flip; /* XOR that gives the int8 quants */
} q8_rows;

static void q8_rows_seek(q8_rows *rw, const fx_mm_job *job, size_t n,
                         size_t nr, size_t b) {
    const size_t nb = job->k / FX_QK8_0;
    for (size_t j = 0; j < nr; j++) {
        if (job->type == FX_WTYPE_Q8_0_R12) {
            size_t q, d;
            fx_q8_r12_at(job->n, nb, n + j, b, &q, &d);
            const size_t left = job->n - (n + j) / FX_R12_ROWS * FX_R12_ROWS;
            const size_t rows = left < FX_R12_ROWS ? left : FX_R12_ROWS;
            rw->q[j] = job->w + q;
            rw->d[j] = job->w + d;
            rw->q_step[j] = rows / 2 * 64;
            rw->d_step[j] = rows * 2;
        } else {
            rw->d[j] = job->w + (n + j) * job->row_bytes +
                       b * sizeof(fx_block_q8_0);
            rw->q[j] = rw->d[j] + 2;
            rw->q_step[j] = rw->d_step[j] = sizeof(fx_block_q8_0);
        }
    }
    rw->flip = job->type == FX_WTYPE_Q8_0_R12 ? 0x80 : 0;
}

/* MR x rows against NR weight rows (from row n) over all K. One ymm per
 * output holds its 8 group sums: maddubs(|w|, sign(x, w)) gives pairs
 * w*x + w*x (at most 2 * 128 * 127 = 32512: no int16 saturation, since
 * |x| <= 127) and madd(., 1) the groups of 4, exactly. */
FX_ALWAYS_INLINE FX_AVX2 void q8_tile(const int MR, const int NR,
                                      const uint8_t *const *xr,
                                      const fx_mm_job *job, size_t n,
                                      float *const *yr) {
    __m256 acc[4][4];
    FX_UNROLL
    for (int i = 0; i < MR; i++)
        FX_UNROLL
        for (int j = 0; j < NR; j++) acc[i][j] = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);
    const size_t k = job->k, nb = k / FX_QK8_0;
    const bool r12 = job->type == FX_WTYPE_Q8_0_R12;
    q8_rows rw;
    q8_rows_seek(&rw, job, n, (size_t)NR, 0);
    const __m256i flip = _mm256_set1_epi8((char)rw.flip);
    for (size_t b = 0; b < nb; b++) {
        if (r12 && b > 0 && b % FX_R12_GROUP == 0)
            q8_rows_seek(&rw, job, n, (size_t)NR, b);
        __m256i w[4], aw[4];
        __m256 dw[4];
        FX_UNROLL
        for (int j = 0; j < NR; j++) {
            _mm_prefetch((const char *)rw.q[j] + FX_PF_DIST, _MM_HINT_T0);
            uint16_t dh;
            memcpy(&dh, rw.d[j], sizeof dh);
            dw[j] = _mm256_set1_ps(_cvtsh_ss(dh));
            w[j] = _mm256_xor_si256(
                _mm256_loadu_si256((const __m256i *)(const void *)rw.q[j]),
                flip);
            aw[j] = _mm256_abs_epi8(w[j]);
            rw.q[j] += rw.q_step[j];
            rw.d[j] += rw.d_step[j];
        }
        FX_UNROLL
        for (int i = 0; i < MR; i++) {
            const __m256i xv =
                _mm256_loadu_si256((const __m256i *)(xr[i] + FX_QK8_0 * b));
            float dx;
            memcpy(&dx, xr[i] + 2 * k + b * sizeof dx, sizeof dx);
            const __m256 vdx = _mm256_set1_ps(dx);
            FX_UNROLL
            for (int j = 0; j < NR; j++) {
                __m256i p = _mm256_madd_epi16(
                    _mm256_maddubs_epi16(aw[j], _mm256_sign_epi8(xv, w[j])),
                    ones);
                acc[i][j] = _mm256_fmadd_ps(_mm256_mul_ps(dw[j], vdx),
                                            _mm256_cvtepi32_ps(p), acc[i][j]);
            }
        }
    }
    FX_UNROLL
    for (int i = 0; i < MR; i++)
        FX_UNROLL
        for (int j = 0; j < NR; j++) yr[i][j] = reduce8(acc[i][j]);
}

typedef void (*q8_tile_fn)(const uint8_t *const *xr, const fx_mm_job *job,
                           size_t n, float *const *yr);

#define FX_Q8_TILE(MR, NR)                                                   \
    static FX_AVX2 void q8t_##MR##x##NR(const uint8_t *const *xr,            \
                                        const fx_mm_job *job, size_t n,      \
                                        float *const *yr) {                  \
        q8_tile(MR, NR, xr, job, n, yr);                                     \
    }
FX_Q8_TILE(1, 1) FX_Q8_TILE(1, 2) FX_Q8_TILE(1, 3) FX_Q8_TILE(1, 4)
FX_Q8_TILE(2, 1) FX_Q8_TILE(2, 2) FX_Q8_TILE(3, 1) FX_Q8_TILE(3, 2)
FX_Q8_TILE(4, 1) FX_Q8_TILE(4, 2)

/* [MR-1][NR-1]; NR up to q8_nr[MR-1] (16 ymm registers: the accumulators,
 * w, |w| and the scales of each weight row, x and its scale). */
static const q8_tile_fn q8_tiles[4][4] = {
    {q8t_1x1, q8t_1x2, q8t_1x3, q8t_1x4},
    {q8t_2x1, q8t_2x2, NULL, NULL},
    {q8t_3x1, q8t_3x2, NULL, NULL},
    {q8t_4x1, q8t_4x2, NULL, NULL}};
static const size_t q8_nr[4] = {4, 2, 2, 2};

static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

/* W rows in groups read from memory once per call; chunks of 4 x rows
 * find the group in L1/L2 (24 rows of K = 4096 int8 weights: 104 KiB). */
#define FX_Q8_GROUP 24

static FX_AVX2 void q8_range_avx2(const fx_mm_job *job, size_t n0, size_t n1,
                                  float *scratch) {
    (void)scratch;
    for (size_t n = n0; n < n1; n += FX_Q8_GROUP) {
        const size_t g = min_sz(FX_Q8_GROUP, n1 - n);
        for (size_t m = 0; m < job->m; m += 4) {
            const size_t mr = min_sz(4, job->m - m);
            const uint8_t *xr[4];
            float *yr[4];
            for (size_t i = 0; i < mr; i++) {
                xr[i] = job->xq + (m + i) * job->xq_ld;
                yr[i] = job->y + (m + i) * job->ldy + n;
            }
            for (size_t j = 0; j < g;) {
                const size_t nr = min_sz(q8_nr[mr - 1], g - j);
                float *yn[4];
                for (size_t i = 0; i < mr; i++) yn[i] = yr[i] + j;
                q8_tiles[mr - 1][nr - 1](xr, job, n + j, yn);
                j += nr;
            }
        }
    }
}

fx_mm_range_fn fx_mm_q8_avx2_range(void) { return q8_range_avx2; }

#else /* not x86-64 GCC/Clang */

fx_xq_fn fx_xq_avx2(void) { return NULL; }
fx_mm_range_fn fx_mm_q8_avx2_range(void) { return NULL; }

#endif
