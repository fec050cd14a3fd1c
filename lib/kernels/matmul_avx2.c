/*
 * AVX2 + FMA + F16C matmul. Every function carries its own target
 * attribute so the library is built for the baseline ISA and this code
 * runs only after fx_cpu_has_avx2() said yes.
 *
 * One ymm accumulator holds the 8 lanes of one output y[m][n] (lane j takes
 * k = j mod 8), which is the reduction order kernels.h defines. Both paths
 * below are made of the same MR x NR register tile (up to 4 x rows by 3 w
 * rows = 12 accumulators + 3 weight registers), so they differ only in
 * loop order and in where partial accumulators live between K slabs --
 * never in the arithmetic applied to an output.
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
 * point at element 0 of the slab. kn may end in a partial group of 8. */
FX_ALWAYS_INLINE FX_AVX2 void tile_k(const int MR, const int NR, fx_wtype t,
                                     const bool PF,
                                     const float *const *xr,
                                     const uint8_t *const *wr, size_t kn,
                                     __m256 acc[4][FX_NR_MAX]) {
    size_t k = 0;
    const size_t esize = t == FX_WTYPE_F32 ? 4 : 2;
    /* F16 and BF16: each row prefetches its twin NR rows on, in the tile
     * range_small reads next (as matmul_avx512.c). Measured on the AVX-512
     * machine with this path forced, one-row F16 decode in one process:
     * 1.34x against a fixed 2 KB ahead, and still 1.11-1.53x against none
     * (1 and 4 rows) now that the weights sit on huge pages; into L2 only
     * (prefetcht1) 1.35x / 1.41x / 1.02x at 1 / 4 / 16 rows against L1
     * (the lines left L1 before their use). F32 rows are
     * left to the hardware prefetcher: on huge pages a software prefetch
     * made one-row F32 decode 0.76x (1.30-1.31x without it, 4 rows
     * 1.06-1.12x; the 246M model, variants alternated step by step). */
    const size_t pf_dist = (size_t)NR * esize * kn;
    for (; k + 8 <= kn; k += 8) {
        __m256 wv[FX_NR_MAX];
        if (PF && t != FX_WTYPE_F32) {
            FX_UNROLL
            for (int j = 0; j < NR; j++)
                _mm_prefetch((const char *)wr[j] + esize * k + pf_dist,
                             _MM_HINT_T1);
        }
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

/* One tile over one K slab. part (8 floats per output, row stride
 * part_ld floats) carries the lanes between slabs: NULL means a single
 * slab. first: start from +0; last: reduce into y (yr[i][j]). */
FX_ALWAYS_INLINE FX_AVX2 void tile(const int MR, const int NR, fx_wtype t,
                                   const bool PF,
                                   const float *const *xr,
                                   const uint8_t *const *wr, size_t kn,
                                   float *part, size_t part_ld, bool first,
                                   bool last, float *const *yr) {
    __m256 acc[4][FX_NR_MAX];
    FX_UNROLL
    for (int i = 0; i < MR; i++)
        FX_UNROLL
        for (int j = 0; j < NR; j++)
            acc[i][j] = first ? _mm256_setzero_ps()
                              : _mm256_load_ps(part + i * part_ld + j * 8);
    tile_k(MR, NR, t, PF, xr, wr, kn, acc);
    FX_UNROLL
    for (int i = 0; i < MR; i++)
        FX_UNROLL
        for (int j = 0; j < NR; j++) {
            if (last)
                yr[i][j] = reduce8(acc[i][j]);
            else
                _mm256_store_ps(part + i * part_ld + j * 8, acc[i][j]);
        }
}

/* One out-of-line function per (MR, NR, type) so each gets its own
 * register allocation with every loop above fully unrolled. */
#define FX_TILE_FN(MR, NR, T, NAME)                                          \
    static FX_AVX2 void tile_##MR##x##NR##_##NAME(                          \
        const float *const *xr, const uint8_t *const *wr, size_t kn,         \
        float *part, size_t part_ld, bool first, bool last,                  \
        float *const *yr) {                                                  \
        tile(MR, NR, T, true, xr, wr, kn, part, part_ld, first, last, yr);   \
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

/* The small-M path's wide tiles: 1x6, 2x4 (3x3 and 4x3 are in tiles[]).
 * Wider ones (1x8, 2x6, 3x4) run out of the 16 ymm registers and spill
 * accumulators, which puts a store-load on the fma chain. */
#define FX_TILE_WIDE(T, NAME)                                                \
    FX_TILE_FN(1, 6, T, NAME) FX_TILE_FN(2, 4, T, NAME)

FX_TILE_WIDE(FX_WTYPE_F32, f32)
FX_TILE_WIDE(FX_WTYPE_F16, f16)
FX_TILE_WIDE(FX_WTYPE_BF16, bf16)

typedef void (*tile_fn)(const float *const *xr, const uint8_t *const *wr,
                        size_t kn, float *part, size_t part_ld, bool first,
                        bool last, float *const *yr);

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

/* A full row of 4 x 3 tiles across an f32 panel (row stride FX_MM_KC)
 * in one call: the large-M path's hot loop, kept out of the per-tile
 * call so its setup is paid once per row of tiles, not once per tile. */
static FX_AVX2 void tile_row_4(const float *const *xr, const float *panel,
                               size_t nc, size_t kn, float *part,
                               size_t part_ld, bool first, bool last,
                               float *const *yr) {
    size_t n = 0;
    for (; n + 3 <= nc; n += 3) {
        const uint8_t *wr[3];
        float *yn[4];
        for (int j = 0; j < 3; j++)
            wr[j] = (const uint8_t *)(panel + (n + j) * FX_MM_KC);
        for (int i = 0; i < 4; i++) yn[i] = yr[i] + n;
        tile(4, 3, FX_WTYPE_F32, false, xr, wr, kn, part + n * 8, part_ld,
             first, last, yn);
    }
    if (n < nc) {
        const uint8_t *wr[3];
        float *yn[4];
        for (size_t j = 0; j < nc - n; j++)
            wr[j] = (const uint8_t *)(panel + (n + j) * FX_MM_KC);
        for (int i = 0; i < 4; i++) yn[i] = yr[i] + n;
        tiles[0][3][nc - n - 1](xr, wr, kn, part + n * 8, part_ld, first,
                                last, yn);
    }
}

/* ---- small M: stream W once, straight from its storage type ---- */

/* W rows are taken in groups of FX_MM_GROUP (divisible by every wide NR);
 * a group is read from memory once for the whole call, and for M > 4 the
 * second chunk of x rows finds it in L2. */
#define FX_MM_GROUP 24

static FX_AVX2 void range_small(const fx_mm_job *job, size_t n0, size_t n1) {
    const int ti = type_index(job->type);
    for (size_t n = n0; n < n1; n += FX_MM_GROUP) {
        size_t g = min_sz(FX_MM_GROUP, n1 - n);
        const uint8_t *wr[FX_MM_GROUP];
        for (size_t j = 0; j < g; j++)
            wr[j] = job->w + (n + j) * job->row_bytes;
        for (size_t m = 0; m < job->m; m += 4) {
            size_t mr = min_sz(4, job->m - m);
            const float *xr[4];
            float *yr[4];
            for (size_t i = 0; i < mr; i++) {
                xr[i] = job->x + (m + i) * job->ldx;
                yr[i] = job->y + (m + i) * job->ldy + n;
            }
            size_t nw = wide_nr[mr - 1], j = 0;
            for (; j + nw <= g; j += nw) {
                float *yn[4];
                for (size_t i = 0; i < mr; i++) yn[i] = yr[i] + j;
                wide[ti][mr - 1](xr, wr + j, job->k, NULL, 0, true, true, yn);
            }
            for (; j < g; j += 3) {
                size_t nr = min_sz(3, g - j);
                float *yn[4];
                for (size_t i = 0; i < mr; i++) yn[i] = yr[i] + j;
                tiles[ti][mr - 1][nr - 1](xr, wr + j, job->k, NULL, 0, true,
                                          true, yn);
            }
        }
    }
}

/* ---- large M: cache-blocked, W converted to f32 once per panel ---- */

/* Rows [n, n+nn) elements [k0, k0+kn) of W into panel (row stride KC). */
static FX_AVX2 void pack_panel(const fx_mm_job *job, size_t n, size_t nn,
                               size_t k0, size_t kn, float *panel) {
    for (size_t j = 0; j < nn; j++) {
        const uint8_t *row = job->w + (n + j) * job->row_bytes;
        float *dst = panel + j * FX_MM_KC;
        size_t k = 0;
        switch (job->type) {
        case FX_WTYPE_F16:
            for (; k + 8 <= kn; k += 8)
                _mm256_storeu_ps(dst + k, load_w8(FX_WTYPE_F16, row, k0 + k));
            break;
        case FX_WTYPE_BF16:
            for (; k + 8 <= kn; k += 8)
                _mm256_storeu_ps(dst + k,
                                 load_w8(FX_WTYPE_BF16, row, k0 + k));
            break;
        default:
            memcpy(dst, row + 4 * k0, 4 * (kn & ~(size_t)7));
            k = kn & ~(size_t)7;
            break;
        }
        if (k < kn)
            _mm256_storeu_ps(dst + k,
                             load_w_tail(job->type, row, k0 + k, kn - k));
    }
}

/* Rows [m, m+mc) elements [k0, k0+kn) of x into blk (row stride KC). */
static void pack_x(const fx_mm_job *job, size_t m, size_t mc, size_t k0,
                   size_t kn, float *blk) {
    for (size_t i = 0; i < mc; i++)
        memcpy(blk + i * FX_MM_KC, job->x + (m + i) * job->ldx + k0,
               kn * sizeof(float));
}

/* The next (row block, K slab) whose x rows and W rows pack_x and
 * pack_panel will copy. */
typedef struct next_slab {
    size_t mb, mc, k0, kn; /* mc == 0: none */
} next_slab;

/* Prefetches part `part` of `parts` of the next slab's source rows. The
 * packs copy rows of only KC floats from pages far apart, which the
 * hardware prefetcher does not follow; without this the copies stall on
 * memory for a fifth of the time at large M. */
static FX_AVX2 void prefetch_slab(const fx_mm_job *job, size_t nb, size_t nc,
                                  const next_slab *ns, size_t part,
                                  size_t parts) {
    if (ns->mc == 0) return;
    size_t rows = ns->mc + nc;
    size_t r0 = part * rows / parts, r1 = (part + 1) * rows / parts;
    size_t wbytes = fx_wtype_row_bytes(job->type, ns->kn);
    size_t woff = fx_wtype_row_bytes(job->type, ns->k0);
    for (size_t r = r0; r < r1; r++) {
        const char *p;
        size_t len;
        if (r < ns->mc) {
            p = (const char *)(job->x + (ns->mb + r) * job->ldx + ns->k0);
            len = ns->kn * sizeof(float);
        } else {
            p = (const char *)job->w + (nb + r - ns->mc) * job->row_bytes +
                woff;
            len = wbytes;
        }
        for (size_t off = 0; off < len; off += 64)
            _mm_prefetch(p + off, _MM_HINT_T0);
    }
}

static FX_AVX2 void range_large(const fx_mm_job *job, size_t n0, size_t n1,
                                float *scratch) {
    float *panel = scratch;                          /* [NC][KC] */
    float *xblk = panel + FX_MM_NC * FX_MM_KC;       /* [MC][KC] */
    float *part = xblk + FX_MM_MC * FX_MM_KC;        /* [MC][NC][8] */
    const size_t part_ld = FX_MM_NC * 8;
    const tile_fn(*tab)[3] = tiles[0];

    for (size_t nb = n0; nb < n1; nb += FX_MM_NC) {
        size_t nc = min_sz(FX_MM_NC, n1 - nb);
        for (size_t mb = 0; mb < job->m; mb += FX_MM_MC) {
            size_t mc = min_sz(FX_MM_MC, job->m - mb);
            for (size_t k0 = 0; k0 < job->k; k0 += FX_MM_KC) {
                size_t kn = min_sz(FX_MM_KC, job->k - k0);
                bool first = k0 == 0, last = k0 + kn == job->k;
                pack_panel(job, nb, nc, k0, kn, panel);
                pack_x(job, mb, mc, k0, kn, xblk);
                next_slab ns = {0, 0, 0, 0};
                if (!last) {
                    ns.mb = mb;
                    ns.mc = mc;
                    ns.k0 = k0 + kn;
                    ns.kn = min_sz(FX_MM_KC, job->k - ns.k0);
                } else if (mb + mc < job->m) {
                    ns.mb = mb + mc;
                    ns.mc = min_sz(FX_MM_MC, job->m - ns.mb);
                    ns.kn = min_sz(FX_MM_KC, job->k);
                }
                const size_t n_mtiles = (mc + 3) / 4;
                /* The x tile (4 x kn) stays in L1 while the W panel
                 * streams past it from L2: 3 loads from L2 per 12 fmas. */
                for (size_t m = 0; m < mc; m += 4) {
                    size_t mr = min_sz(4, mc - m);
                    prefetch_slab(job, nb, nc, &ns, m / 4, n_mtiles);
                    const float *xr[4];
                    float *yr[4];
                    for (size_t i = 0; i < mr; i++) {
                        xr[i] = xblk + (m + i) * FX_MM_KC;
                        yr[i] = job->y + (mb + m + i) * job->ldy + nb;
                    }
                    if (mr == 4) {
                        tile_row_4(xr, panel, nc, kn, part + m * part_ld,
                                   part_ld, first, last, yr);
                        continue;
                    }
                    for (size_t n = 0; n < nc; n += 3) {
                        size_t nr = min_sz(3, nc - n);
                        const uint8_t *wr[3];
                        for (size_t j = 0; j < nr; j++)
                            wr[j] = (const uint8_t *)(panel +
                                                      (n + j) * FX_MM_KC);
                        float *yn[4];
                        for (size_t i = 0; i < mr; i++) yn[i] = yr[i] + n;
                        tab[mr - 1][nr - 1](xr, wr, kn,
                                            part + m * part_ld + n * 8,
                                            part_ld, first, last, yn);
                    }
                }
            }
        }
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
    if (job->m <= FX_MM_SMALL_M)
        range_small(job, n0, n1);
    else
        range_large(job, n0, n1, scratch);
}

fx_mm_range_fn fx_mm_avx2_range(void) { return range_avx2; }

#else /* not x86-64 GCC/Clang */

fx_mm_range_fn fx_mm_avx2_range(void) { return NULL; }

#endif
