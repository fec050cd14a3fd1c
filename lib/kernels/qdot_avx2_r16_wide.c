/*
 * AVX2 Q4_0, Q4_K, Q5_K, Q6_K and IQ4_XS in 16-row groups against many
 * x rows (prefill).
 *
 * Why: with 4 x rows a pass (qdot_avx2_r16.c) the work is bound by the
 * vector ALU ports, and a fifth to a quarter of its operations redo, pass
 * after pass, the same decoding of the group: quants masked, shifted and
 * merged, scales and mins picked into place, d and dmin widened from f16.
 * Here each block of a group is decoded once into the scratch (a
 * "plain" block), and every pass over the x rows reads it back with
 * plain loads, which the load ports serve beside the arithmetic.
 *
 * The integers of each (block, row) are the same exact sums, and each
 * row's acc takes the blocks in increasing order with the fmas of
 * quants.h: the bits of the 4-row kernels (and of the portable one).
 */
#include "qdot_avx2_r16.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

/* Decoded blocks, one half (8 rows) each. */
typedef struct k45_plain {
    __m256i q[32][2]; /* line 8c + t: the quants of sub-blocks 2c, 2c + 1 */
    __m256i sl[4], sh[4];
    __m256i mn[4]; /* k45_min_pair */
    __m256 d, dmin;
} k45_plain;

typedef struct q6k_plain {
    __m256i q[64];  /* line 16 i + t: q6k_quants */
    __m256i sc[16]; /* sub-block j's scale (q6k_scale) */
    __m256i scp[8]; /* 2 i + p: q6k_scale_pair */
    __m256 d;
} q6k_plain;

typedef struct xs_plain {
    __m256i w[32][4]; /* line 4 j + i: |wl|, wl, |wh|, wh (xs_levels) */
    __m256i sc[8];
    __m256 d;
} xs_plain;

/* Q4_0's unit of 8 blocks (the 256 elements the driver calls a block) */
typedef struct q40_plain {
    __m256i lo[8][4], hi[8][4]; /* block j, bytes 4i..4i+3: its nibbles */
    __m256 d[8];
} q40_plain;

#define FX_R16W_MAX(a, b) ((a) > (b) ? (a) : (b))
#define FX_R16W_PLAIN_MAX \
    FX_R16W_MAX(FX_R16W_MAX(sizeof(k45_plain), sizeof(q6k_plain)),          \
                FX_R16W_MAX(sizeof(xs_plain), sizeof(q40_plain)))

/* Blocks decoded at a time (both halves: 9-17.5 KB at 2 by type), and x
 * rows taken through them before the next blocks: the decoded blocks
 * stay in L1 while the rows pass, and the rows' partial sums fit the
 * scratch. */
#ifndef FX_R16W_BLOCKS
#define FX_R16W_BLOCKS 2
#endif
#ifndef FX_R16W_ROWS
#define FX_R16W_ROWS 128
#endif

#define FX_R16W_SCRATCH_BYTES \
    (2 * FX_R16W_BLOCKS * FX_R16W_PLAIN_MAX + FX_R16W_ROWS * 16 * sizeof(float))

FX_ALWAYS_INLINE FX_AVX2 void k45_decode_block(const bool five,
                                               const uint8_t *g, size_t b,
                                               int h, void *out) {
    k45_plain *u = out;
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
    for (int i = 0; i < 4; i++) u->mn[i] = k45_min_pair(g, off, i, h);
    const __m256i h0 = half_line(g, off, 0, h);
    u->d = h2f(h0, false);
    u->dmin = h2f(h0, true);
}

/* MR x rows against decoded blocks u[0], u[2], ... (one half; block b0
 * first), into their sums acc[16 r .. 16 r + 7] (which block 0 starts).
 * As k45_half, the int16 sums taking 8 lines of 4-bit quants, 4 of 5-bit
 * ones. */
FX_ALWAYS_INLINE FX_AVX2 void k45_rows(const bool five, const int MR,
                                       const void *u, size_t nbw, size_t b0,
                                       const uint8_t *const *xq, size_t k,
                                       float *acc) {
    const int run = five ? 4 : 8;
    const size_t s32 = fx_xq256_bsum32_at(k);
    for (size_t i = 0; i < nbw; i++) {
        const k45_plain *ub = (const k45_plain *)u + 2 * i;
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
                for (int r = 0; r < MR; r++)
                    k45_line(vl, vh, xq[r] + 256 * b + 64 * c + 4 * t,
                             t % run == 0, &lo[r], &hi[r]);
                if (t % run != run - 1) continue;
                FX_R16_UNROLL
                for (int r = 0; r < MR; r++)
                    k45_scaled(lo[r], hi[r], ub->sl[c], ub->sh[c], &P[r]);
            }
        }
        FX_R16_UNROLL
        for (int j = 0; j < 4; j++)
            FX_R16_UNROLL
            for (int r = 0; r < MR; r++)
                M[r] = _mm256_add_epi32(
                    M[r], _mm256_madd_epi16(ub->mn[j],
                                            xdw(xq[r] + s32 + 16 * b + 4 * j)));
        FX_R16_UNROLL
        for (int r = 0; r < MR; r++)
            _mm256_store_ps(acc + 16 * r,
                            k45_fmas(b ? _mm256_load_ps(acc + 16 * r) : _mm256_setzero_ps(),
                                     ub->d, ub->dmin, P[r], M[r],
                                     f32_at(xq[r] + k + k / 8 + 4 * b)));
    }
}

/* As k45_rows, Q6_K's sums of quants.h: P of the quants (0..63) and the
 * offset C (32 sum_j sc_j bsum_j), P - C the block's integer; two lines'
 * vpmaddubsw fit int16 (q6k_half). */
FX_ALWAYS_INLINE FX_AVX2 void q6k_rows(const int MR, const void *u,
                                       size_t nbw, size_t b0,
                                       const uint8_t *const *xq, size_t k,
                                       float *acc) {
    for (size_t n = 0; n < nbw; n++) {
        const q6k_plain *ub = (const q6k_plain *)u + 2 * n;
        const size_t b = b0 + n;
        __m256i P[4], C[4];
        FX_R16_UNROLL
        for (int r = 0; r < MR; r++) P[r] = C[r] = _mm256_setzero_si256();
        FX_R16_UNROLL
        for (int i = 0; i < 4; i++) {
            FX_R16_UNROLL
            for (int jj = 0; jj < 4; jj++) {
                FX_R16_UNROLL
                for (int pr = 0; pr < 2; pr++) {
                    const int t = 4 * jj + 2 * pr;
                    const __m256i q0 = _mm256_load_si256(&ub->q[16 * i + t]);
                    const __m256i q1 = _mm256_load_si256(&ub->q[16 * i + t + 1]);
                    FX_R16_UNROLL
                    for (int r = 0; r < MR; r++)
                        q6k_lines(q0, q1, xq[r] + 256 * b + 64 * i + 4 * t,
                                  ub->sc[4 * i + jj], &P[r]);
                }
            }
            FX_R16_UNROLL
            for (int p = 0; p < 2; p++)
                FX_R16_UNROLL
                for (int r = 0; r < MR; r++)
                    C[r] = _mm256_add_epi32(
                        C[r], _mm256_madd_epi16(ub->scp[2 * i + p],
                                                xdw(xq[r] + k + 32 * b + 8 * i + 4 * p)));
        }
        FX_R16_UNROLL
        for (int r = 0; r < MR; r++)
            _mm256_store_ps(acc + 16 * r,
                            q6k_fma(b ? _mm256_load_ps(acc + 16 * r) : _mm256_setzero_ps(),
                                    ub->d, P[r], C[r],
                                    f32_at(xq[r] + k + k / 8 + 4 * b)));
    }
}

FX_ALWAYS_INLINE FX_AVX2 void q6k_decode_block(const uint8_t *g, size_t b,
                                               int h, void *out) {
    q6k_plain *u = out;
    const size_t off = 210 * b;
    FX_R16_UNROLL
    for (int i = 0; i < 4; i++) {
        FX_R16_UNROLL
        for (int t = 0; t < 16; t++) u->q[16 * i + t] = q6k_quants(g, off, i, t, h);
        const __m256i sd = half_line(g, off + 192, i, h);
        FX_R16_UNROLL
        for (int jj = 0; jj < 4; jj++) u->sc[4 * i + jj] = q6k_scale(sd, jj);
        FX_R16_UNROLL
        for (int p = 0; p < 2; p++) u->scp[2 * i + p] = q6k_scale_pair(sd, p);
    }
    u->d = _mm256_cvtph_ps(_mm_loadu_si128(
        (const __m128i *)(const void *)(g + 16 * (off + 208) + 16 * h)));
}

/* As k45_rows, IQ4_XS's: each vpmaddubsw pair to int32 at once (xs_half). */
FX_ALWAYS_INLINE FX_AVX2 void xs_rows(const int MR, const void *u, size_t nbw,
                                      size_t b0, const uint8_t *const *xq,
                                      size_t k, float *acc) {
    for (size_t n = 0; n < nbw; n++) {
        const xs_plain *ub = (const xs_plain *)u + 2 * n;
        const size_t b = b0 + n;
        __m256i P[4];
        FX_R16_UNROLL
        for (int r = 0; r < MR; r++) P[r] = _mm256_setzero_si256();
        for (int j = 0; j < 8; j++) {
            FX_R16_UNROLL
            for (int i = 0; i < 4; i++) {
                const __m256i *w = ub->w[4 * j + i];
                FX_R16_UNROLL
                for (int r = 0; r < MR; r++)
                    xs_line(w[0], w[1], w[2], w[3],
                            xq[r] + 256 * b + 32 * (size_t)j + 4 * i, ub->sc[j], &P[r]);
            }
        }
        FX_R16_UNROLL
        for (int r = 0; r < MR; r++) {
            const __m256 dx = _mm256_set1_ps(f32_at(xq[r] + k + k / 8 + 4 * b));
            __m256 a = b ? _mm256_load_ps(acc + 16 * r) : _mm256_setzero_ps();
            a = _mm256_fmadd_ps(_mm256_mul_ps(ub->d, dx), _mm256_cvtepi32_ps(P[r]), a);
            _mm256_store_ps(acc + 16 * r, a);
        }
    }
}

FX_ALWAYS_INLINE FX_AVX2 void xs_decode_block(const uint8_t *g, size_t b,
                                              int h, void *out) {
    xs_plain *u = out;
    const size_t off = 136 * b;
    const __m256i lut = xs_lut();
    for (int j = 0; j < 8; j++) {
        u->sc[j] = xs_scale(g, off, j, h);
        FX_R16_UNROLL
        for (int i = 0; i < 4; i++) {
            __m256i wl, wh;
            xs_levels(g, off, j, i, h, lut, &wl, &wh);
            u->w[4 * j + i][0] = _mm256_abs_epi8(wl);
            u->w[4 * j + i][1] = wl;
            u->w[4 * j + i][2] = _mm256_abs_epi8(wh);
            u->w[4 * j + i][3] = wh;
        }
    }
    u->d = h2f(half_line(g, off, 0, h), false);
}

/* As k45_rows, Q4_0's (FX_XQ_32 rows): q40_half's sums, an fma a block. */
FX_ALWAYS_INLINE FX_AVX2 void q40_rows(const int MR, const void *u,
                                       size_t nbw, size_t b0,
                                       const uint8_t *const *xq, size_t k,
                                       float *acc) {
    for (size_t n = 0; n < nbw; n++) {
        const q40_plain *ub = (const q40_plain *)u + 2 * n;
        const size_t b = 8 * (b0 + n); /* its first 32-element block */
        __m256 a[4];
        FX_R16_UNROLL
        for (int r = 0; r < MR; r++)
            a[r] = b ? _mm256_load_ps(acc + 16 * r) : _mm256_setzero_ps();
        FX_R16_UNROLL
        for (int j = 0; j < 8; j++) {
            FX_R16_UNROLL
            for (int r = 0; r < MR; r++)
                a[r] = q40_block(ub->lo[j], ub->hi[j], ub->d[j], xq[r], k,
                                 b + (size_t)j, a[r]);
        }
        FX_R16_UNROLL
        for (int r = 0; r < MR; r++) _mm256_store_ps(acc + 16 * r, a[r]);
    }
}

FX_ALWAYS_INLINE FX_AVX2 void q40_decode_block(const uint8_t *g, size_t b,
                                               int h, void *out) {
    q40_plain *u = out;
    const __m256i m4 = c8(0x0f0f0f0fu);
    const size_t off = 144 * b;
    FX_R16_UNROLL
    for (int j = 0; j < 8; j++) {
        u->d[j] = q40_d(g, off, j, h);
        FX_R16_UNROLL
        for (int i = 0; i < 4; i++) {
            const __m256i q = q40_quants(g, off, j, i, h);
            u->lo[j][i] = _mm256_and_si256(q, m4);
            u->hi[j][i] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        }
    }
}

/* A type's wide kernel: its decoder and its passes of 1, 2 and 4 rows. */
typedef void (*decode_fn)(const uint8_t *g, size_t b, int h, void *u);
typedef void (*rows_fn)(const void *u, size_t nbw, size_t b0,
                        const uint8_t *const *xq, size_t k, float *acc);
typedef struct wide_kind {
    decode_fn decode;
    size_t plain;
    rows_fn rows[3];
} wide_kind;

/* The group at column n (g) against every x row of the job, into y. */
static FX_AVX2 void wide(const wide_kind *kd, const uint8_t *g,
                         const fx_mm_job *job, size_t n, float *scratch) {
    const size_t k = job->k, nb = k / FX_QK_K;
    uint8_t *u = (uint8_t *)scratch;
    float *sums = scratch + 2 * FX_R16W_BLOCKS * FX_R16W_PLAIN_MAX / sizeof(float);
    /* The blocks of all 16 rows are contiguous, and the next group's
     * follow the last: what the next decode reads is the bytes after
     * this one's, brought in a few lines a pass (all at once, they
     * stalled the core: 2% of the time). */
    const uint8_t *end = job->w + job->n * job->row_bytes;
    const size_t unit = job->row_bytes / nb; /* a block's bytes, one row */
    const size_t span = 16 * unit * FX_R16W_BLOCKS;
    for (size_t m0 = 0; m0 < job->m; m0 += FX_R16W_ROWS) {
        const size_t m1 = job->m - m0 < FX_R16W_ROWS ? job->m : m0 + FX_R16W_ROWS;
        for (size_t b0 = 0; b0 < nb; b0 += FX_R16W_BLOCKS) {
            const size_t nbw = nb - b0 < FX_R16W_BLOCKS ? nb - b0 : FX_R16W_BLOCKS;
            for (size_t i = 0; i < nbw; i++)
                for (int h = 0; h < 2; h++)
                    kd->decode(g, b0 + i, h, u + (2 * i + (size_t)h) * kd->plain);
            const uint8_t *pf = g + 16 * unit * (b0 + nbw);
            const uint8_t *pf_end = (size_t)(end - pf) < span ? end : pf + span;
            const size_t passes = (m1 - m0 + 3) / 4;
            const size_t pf_step = 64 * ((span / 64 + passes - 1) / passes);
            size_t mr;
            for (size_t m = m0; m < m1; m += mr) {
                for (const uint8_t *e = pf + pf_step; pf < pf_end && pf < e; pf += 64)
                    _mm_prefetch((const char *)pf, _MM_HINT_T1);
                const int fi = m1 - m >= 4 ? 2 : m1 - m >= 2 ? 1 : 0;
                mr = (size_t)1 << fi;
                const uint8_t *xq[4];
                for (size_t r = 0; r < mr; r++) xq[r] = job->xq + (m + r) * job->xq_ld;
                float *s = sums + 16 * (m - m0);
                for (int h = 0; h < 2; h++)
                    kd->rows[fi](u + (size_t)h * kd->plain, nbw, b0, xq, k, s + 8 * h);
                /* done: out now, the stores' misses hidden in the passes
                 * still to come (at the end they stalled: 2.5% of prefill) */
                if (b0 + nbw == nb)
                    for (size_t r = 0; r < mr; r++)
                        for (int h = 0; h < 2; h++)
                            _mm256_storeu_ps(job->y + (m + r) * job->ldy + n + 8 * h,
                                             _mm256_load_ps(s + 16 * r + 8 * h));
            }
        }
    }
}

#define FX_R16W_KIND(NAME, DECODE, PLAIN, ROWS)                               \
    static FX_AVX2 void NAME##_decode(const uint8_t *g, size_t b, int h,      \
                                      void *u) {                              \
        DECODE(g, b, h, u);                                                   \
    }                                                                         \
    static FX_AVX2 void NAME##_1(const void *u, size_t nbw, size_t b0,        \
                                 const uint8_t *const *xq, size_t k,          \
                                 float *acc) {                                \
        ROWS(1, u, nbw, b0, xq, k, acc);                                      \
    }                                                                         \
    static FX_AVX2 void NAME##_2(const void *u, size_t nbw, size_t b0,        \
                                 const uint8_t *const *xq, size_t k,          \
                                 float *acc) {                                \
        ROWS(2, u, nbw, b0, xq, k, acc);                                      \
    }                                                                         \
    static FX_AVX2 void NAME##_4(const void *u, size_t nbw, size_t b0,        \
                                 const uint8_t *const *xq, size_t k,          \
                                 float *acc) {                                \
        ROWS(4, u, nbw, b0, xq, k, acc);                                      \
    }                                                                         \
    static FX_AVX2 void NAME##_wide(const uint8_t *g, const fx_mm_job *job,   \
                                    size_t n, float *scratch) {               \
        static const wide_kind kind = {NAME##_decode, sizeof(PLAIN),          \
                                       {NAME##_1, NAME##_2, NAME##_4}};       \
        wide(&kind, g, job, n, scratch);                                      \
    }
#define FX_K4_DECODE(g, b, h, u) k45_decode_block(false, g, b, h, u)
#define FX_K5_DECODE(g, b, h, u) k45_decode_block(true, g, b, h, u)
#define FX_K4_ROWS(MR, ...) k45_rows(false, MR, __VA_ARGS__)
#define FX_K5_ROWS(MR, ...) k45_rows(true, MR, __VA_ARGS__)
FX_R16W_KIND(q4k, FX_K4_DECODE, k45_plain, FX_K4_ROWS)
FX_R16W_KIND(q5k, FX_K5_DECODE, k45_plain, FX_K5_ROWS)
FX_R16W_KIND(q6k, q6k_decode_block, q6k_plain, q6k_rows)
FX_R16W_KIND(xs, xs_decode_block, xs_plain, xs_rows)
FX_R16W_KIND(q40, q40_decode_block, q40_plain, q40_rows)

fx_r16_wide_fn fx_r16_avx2_wide(fx_wtype t) {
    /* a smaller scratch (the blocking tests' build): 4 rows a pass */
    if (FX_R16W_SCRATCH_BYTES > FX_MM_SCRATCH_FLOATS * sizeof(float)) return NULL;
    switch (t) {
    case FX_WTYPE_Q4_K: return q4k_wide;
    case FX_WTYPE_Q5_K: return q5k_wide;
    case FX_WTYPE_Q6_K: return q6k_wide;
    case FX_WTYPE_IQ4_XS: return xs_wide;
    case FX_WTYPE_Q4_0: return q40_wide;
    default: return NULL;
    }
}

#else /* not x86-64 GCC/Clang */

fx_r16_wide_fn fx_r16_avx2_wide(fx_wtype t) {
    (void)t;
    return NULL;
}

#endif
