/*
 * AVX2 Q4_K and Q5_K in 16-row groups against many x rows (prefill).
 *
 * Why: with 4 x rows a pass (qdot_avx2_r16.c) the work is bound by the
 * vector ALU ports, and a fifth of its operations redo, pass after pass,
 * the same decoding of the group: nibbles masked and shifted (Q5_K's
 * fifth bit merged), scales and mins picked into place, d and dmin
 * widened from f16. Here each block of a group is decoded once into the
 * scratch (k45_plain), and every pass over the x rows reads it back with
 * plain loads, which the load ports serve beside the arithmetic.
 *
 * The integers P and M of each (block, row) are the same exact sums, and
 * each row's acc takes the blocks in increasing order with the fmas of
 * quants.h: the bits of the 4-row kernels (and of the portable one).
 */
#include "qdot_avx2_r16.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

/* A decoded block, one half (8 rows). */
typedef struct k45_plain {
    __m256i q[32][2]; /* line 8c + t: the quants of sub-blocks 2c, 2c + 1 */
    __m256i sl[4], sh[4];
    __m256i mn[8];
    __m256 d, dmin;
} k45_plain;

/* Blocks decoded at a time (both halves: 10.5 KB at 2), and x rows taken
 * through them before the next blocks: the decoded blocks stay in L1
 * while the rows pass, and the rows' partial sums fit the scratch. */
#ifndef FX_R16W_BLOCKS
#define FX_R16W_BLOCKS 2
#endif
#ifndef FX_R16W_ROWS
#define FX_R16W_ROWS 128
#endif

#define FX_R16W_SCRATCH_BYTES                                                 \
    (2 * FX_R16W_BLOCKS * sizeof(k45_plain) + FX_R16W_ROWS * 16 * sizeof(float))

static FX_AVX2 void k45_decode(const bool five, const uint8_t *g, size_t b,
                               int h, k45_plain *u) {
    const size_t off = (five ? 176 : 144) * b;
    FX_R16_UNROLL
    for (int c = 0; c < 4; c++) {
        FX_R16_UNROLL
        for (int t = 0; t < 8; t++)
            k45_quants(five, g, off, c, t, h, &u->q[8 * c + t][0],
                       &u->q[8 * c + t][1]);
        k45_scales(g, off, c, h, &u->sl[c], &u->sh[c]);
    }
    FX_R16_UNROLL
    for (int j = 0; j < 8; j++) u->mn[j] = k45_min(g, off, j, h);
    const __m256i h0 = half_line(g, off, 0, h);
    u->d = h2f(h0, false);
    u->dmin = h2f(h0, true);
}

/* MR x rows against decoded blocks u[0], u[2], ... (one half; block b0
 * first), into their sums acc[16 r .. 16 r + 7] (which block 0 starts).
 * As k45_half, the int16 sums taking 8 lines of 4-bit quants, 4 of 5-bit
 * ones. */
FX_ALWAYS_INLINE FX_AVX2 void k45_rows(const bool five, const int MR,
                                       const k45_plain *u, size_t nbw,
                                       size_t b0, const uint8_t *const *xq,
                                       size_t k, float *acc) {
    const int run = five ? 4 : 8;
    for (size_t i = 0; i < nbw; i++) {
        const k45_plain *ub = &u[2 * i];
        const size_t b = b0 + i;
        __m256i P[4], M[4];
        FX_R16_UNROLL
        for (int r = 0; r < MR; r++) P[r] = M[r] = _mm256_setzero_si256();
        FX_R16_UNROLL
        for (int c = 0; c < 4; c++) {
            __m256i lo[4], hi[4];
            FX_R16_UNROLL
            for (int t = 0; t < 8; t++) {
                const __m256i vl = _mm256_load_si256(&ub->q[8 * c + t][0]);
                const __m256i vh = _mm256_load_si256(&ub->q[8 * c + t][1]);
                FX_R16_UNROLL
                for (int r = 0; r < MR; r++) {
                    const uint8_t *x = xq[r] + 256 * b + 64 * c + 4 * t;
                    const __m256i pl = _mm256_maddubs_epi16(vl, xdw(x));
                    const __m256i ph = _mm256_maddubs_epi16(vh, xdw(x + 32));
                    lo[r] = t % run ? _mm256_add_epi16(lo[r], pl) : pl;
                    hi[r] = t % run ? _mm256_add_epi16(hi[r], ph) : ph;
                    FX_R16_PIN(lo[r]);
                    FX_R16_PIN(hi[r]);
                }
                if (t % run != run - 1) continue;
                FX_R16_UNROLL
                for (int r = 0; r < MR; r++) {
                    P[r] = _mm256_add_epi32(
                        P[r], _mm256_add_epi32(_mm256_madd_epi16(lo[r], ub->sl[c]),
                                               _mm256_madd_epi16(hi[r], ub->sh[c])));
                    FX_R16_PIN(P[r]);
                }
            }
        }
        FX_R16_UNROLL
        for (int j = 0; j < 8; j++)
            FX_R16_UNROLL
            for (int r = 0; r < MR; r++)
                M[r] = _mm256_add_epi32(
                    M[r], _mm256_madd_epi16(ub->mn[j],
                                            xdw(xq[r] + k + 32 * b + 4 * j)));
        FX_R16_UNROLL
        for (int r = 0; r < MR; r++) {
            const __m256 dx = _mm256_set1_ps(f32_at(xq[r] + k + k / 8 + 4 * b));
            __m256 a = b ? _mm256_load_ps(acc + 16 * r) : _mm256_setzero_ps();
            a = _mm256_fmadd_ps(_mm256_mul_ps(ub->d, dx), _mm256_cvtepi32_ps(P[r]), a);
            a = _mm256_fnmadd_ps(_mm256_mul_ps(ub->dmin, dx),
                                 _mm256_cvtepi32_ps(M[r]), a);
            _mm256_store_ps(acc + 16 * r, a);
        }
    }
}

typedef void (*k45_rows_fn)(const k45_plain *u, size_t nbw, size_t b0,
                            const uint8_t *const *xq, size_t k, float *acc);
#define FX_R16W_ROWS_FN(NAME, FIVE, MR)                                       \
    static FX_AVX2 void NAME(const k45_plain *u, size_t nbw, size_t b0,       \
                             const uint8_t *const *xq, size_t k, float *acc) { \
        k45_rows(FIVE, MR, u, nbw, b0, xq, k, acc);                           \
    }
FX_R16W_ROWS_FN(q4k_rows_1, false, 1)
FX_R16W_ROWS_FN(q4k_rows_2, false, 2)
FX_R16W_ROWS_FN(q4k_rows_4, false, 4)
FX_R16W_ROWS_FN(q5k_rows_1, true, 1)
FX_R16W_ROWS_FN(q5k_rows_2, true, 2)
FX_R16W_ROWS_FN(q5k_rows_4, true, 4)

/* The group at column n (g) against every x row of the job, into y. */
static FX_AVX2 void k45_wide(const bool five, const k45_rows_fn fns[3],
                             const uint8_t *g, const fx_mm_job *job, size_t n,
                             float *scratch) {
    const size_t k = job->k, nb = k / FX_QK_K;
    k45_plain *u = (k45_plain *)(void *)scratch;
    float *sums = scratch + 2 * FX_R16W_BLOCKS * sizeof(k45_plain) / sizeof(float);
    for (size_t m0 = 0; m0 < job->m; m0 += FX_R16W_ROWS) {
        const size_t m1 = job->m - m0 < FX_R16W_ROWS ? job->m : m0 + FX_R16W_ROWS;
        for (size_t b0 = 0; b0 < nb; b0 += FX_R16W_BLOCKS) {
            const size_t nbw = nb - b0 < FX_R16W_BLOCKS ? nb - b0 : FX_R16W_BLOCKS;
            for (size_t i = 0; i < nbw; i++)
                for (int h = 0; h < 2; h++) k45_decode(five, g, b0 + i, h, &u[2 * i + h]);
            size_t mr;
            for (size_t m = m0; m < m1; m += mr) {
                const int fi = m1 - m >= 4 ? 2 : m1 - m >= 2 ? 1 : 0;
                mr = (size_t)1 << fi;
                const uint8_t *xq[4];
                for (size_t r = 0; r < mr; r++) xq[r] = job->xq + (m + r) * job->xq_ld;
                float *s = sums + 16 * (m - m0);
                for (int h = 0; h < 2; h++) fns[fi](u + h, nbw, b0, xq, k, s + 8 * h);
                /* done: out now, the stores' misses hidden in the passes
                 * still to come (at the end they stall, 5% of the time) */
                if (b0 + nbw == nb)
                    for (size_t r = 0; r < mr; r++)
                        for (int h = 0; h < 2; h++)
                            _mm256_storeu_ps(job->y + (m + r) * job->ldy + n + 8 * h,
                                             _mm256_load_ps(s + 16 * r + 8 * h));
            }
        }
    }
}

static FX_AVX2 void q4k_wide(const uint8_t *g, const fx_mm_job *job, size_t n,
                             float *scratch) {
    static const k45_rows_fn fns[3] = {q4k_rows_1, q4k_rows_2, q4k_rows_4};
    k45_wide(false, fns, g, job, n, scratch);
}

static FX_AVX2 void q5k_wide(const uint8_t *g, const fx_mm_job *job, size_t n,
                             float *scratch) {
    static const k45_rows_fn fns[3] = {q5k_rows_1, q5k_rows_2, q5k_rows_4};
    k45_wide(true, fns, g, job, n, scratch);
}

fx_r16_wide_fn fx_r16_avx2_wide(fx_wtype t) {
    /* a smaller scratch (the blocking tests' build): 4 rows a pass */
    if (FX_R16W_SCRATCH_BYTES > FX_MM_SCRATCH_FLOATS * sizeof(float)) return NULL;
    switch (t) {
    case FX_WTYPE_Q4_K: return q4k_wide;
    case FX_WTYPE_Q5_K: return q5k_wide;
    default: return NULL;
    }
}

#else /* not x86-64 GCC/Clang */

fx_r16_wide_fn fx_r16_avx2_wide(fx_wtype t) {
    (void)t;
    return NULL;
}

#endif
