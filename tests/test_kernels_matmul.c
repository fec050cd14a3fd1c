/*
 * The matmul against its contract (lib/kernels/kernels.h):
 *  - batch invariance, bit for bit: row m computed alone (M = 1) by the
 *    portable path equals row m inside batches of 1..9, 16, 32, 33, 70 and
 *    150 rows (8 is the last one-tile batch, 9 the first large-M one on
 *    AVX2, 32/33 the same edge on AVX-512, 150 crosses the large-M row
 *    block of 128), at two offsets, for 1 and 2
 *    threads, portable, AVX2 and AVX-512 paths (the last two where the CPU
 *    has them), K with tails (K % 8 != 0) and several 256-wide K slabs, N
 *    odd and even (AVX-512 pairs columns) across several tasks;
 *  - accuracy against a double-precision reference on the same weight
 *    values, within g(ceil(K/8)+3) * sum|x*w|, the bound of the defined
 *    order (8 sequential lanes of ceil(K/8) fmas, then a 3-level tree);
 *  - Q8_0: the definition of kernels.h (activation quantization, one exact
 *    integer sum per block, one fma per block into one accumulator)
 *    written again here, equal bit for bit to every path, on the Q8_0 and
 *    the repacked R16 form, on blocks with rounding ties, zeros, tiny and
 *    huge values; the definition and the library within g(K/32+1) of
 *    exact arithmetic on the same quants and within the quantization
 *    error of the float x; NaN and inf in x give NaN on every path;
 *  - R16: the repacked layout byte for byte against the prose of
 *    kernels.h, fx_q8_r16_at against it, every byte of the matrix used
 *    once (no gap, the same size), any N (odd too), full and short tiles,
 *    odd and even block counts; the same bits as Q8_0 on every path;
 *  - signed zeros from underflow survive the tail padding identically;
 *  - several weights on one x (fx_matmul_multi) give each output exactly
 *    what a call of its own gives;
 *  - argument checks; the OpenBLAS fast mode is close to the reference,
 *    and where the context decides OpenBLAS would be slower, the fast flag
 *    changes no bit.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kernels/kernels.h"
#include "kernels/matmul_impl.h" /* fx_cpu_amd_family */
#include "test_rng.h"

/* ---- deterministic inputs ---- */

static const fx_wtype all_types[] = {FX_WTYPE_F32, FX_WTYPE_F16,
                                     FX_WTYPE_BF16, FX_WTYPE_Q8_0};

/* N rows of K weights of type t, from uniform floats. */
static uint8_t *make_weights(fx_wtype t, size_t n, size_t k, uint64_t seed) {
    size_t rb = fx_wtype_row_bytes(t, k);
    assert_true(rb > 0);
    uint8_t *w = malloc(n * rb);
    float *row = malloc(k * sizeof *row);
    assert_non_null(w);
    assert_non_null(row);
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < k; j++) row[j] = fx_test_rng_f(&s);
        uint8_t *dst = w + i * rb;
        switch (t) {
        case FX_WTYPE_F32: memcpy(dst, row, rb); break;
        case FX_WTYPE_F16:
        case FX_WTYPE_BF16:
            for (size_t j = 0; j < k; j++) {
                uint16_t h = t == FX_WTYPE_F16 ? fx_f32_to_f16(row[j])
                                               : fx_f32_to_bf16(row[j]);
                memcpy(dst + 2 * j, &h, 2);
            }
            break;
        case FX_WTYPE_Q8_0_R16: /* repack_r16 a Q8_0 one */
        case FX_WTYPE_F32_R12:  /* repack_r12 a float one */
        case FX_WTYPE_F16_R12:
        case FX_WTYPE_BF16_R12: fail(); break;
        default: fail(); break; /* block types have their own tests */
        case FX_WTYPE_Q8_0: {
            fx_block_q8_0 *blk = malloc(rb);
            assert_non_null(blk);
            assert_int_equal(fx_quantize_q8_0(blk, row, k), FX_OK);
            memcpy(dst, blk, rb);
            free(blk);
            break;
        }
        }
    }
    free(row);
    return w;
}

/* M rows of K activations with row stride ldx; the gaps hold NaN so a
 * kernel reading past K would poison its result. */
static float *make_x(size_t m, size_t k, size_t ldx, uint64_t seed) {
    float *x = malloc(m * ldx * sizeof *x);
    assert_non_null(x);
    uint64_t s = seed + 7;
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < ldx; j++)
            x[i * ldx + j] = j < k ? fx_test_rng_f(&s) * 2.0f : NAN;
    return x;
}

/* fx_kernels_params.q8_prefetch_rows: at every number of x rows; at none
 * (no bit of 0-8 set; 0 would be the CPU's default). */
#define Q8_PF_ALL 0x1ffu
#define Q8_PF_NEVER (1u << 31)

/* q8_pf_rows, r12_pf, x_block: fx_kernels_params.q8_prefetch_rows,
 * .r12_prefetch_bytes and .x_block_bytes (0: the defaults). */
static fx_kernels *make_ctx_pf(fx_isa isa, unsigned threads,
                               uint32_t q8_pf_rows, size_t r12_pf,
                               size_t x_block) {
    fx_alloc alloc;
    assert_int_equal(fx_alloc_init(&alloc, NULL), FX_OK);
    fx_kernels_params p;
    fx_kernels_params_init(&p);
    p.isa = isa;
    p.n_threads = threads;
    p.q8_prefetch_rows = q8_pf_rows;
    p.r12_prefetch_bytes = r12_pf;
    p.x_block_bytes = x_block;
    fx_kernels *kc = NULL;
    fx_error err;
    fx_status st = fx_kernels_create(&alloc, &p, &kc, &err);
    if (st == FX_ERR_UNSUPPORTED) return NULL;
    assert_int_equal(st, FX_OK);
    return kc;
}

static fx_kernels *make_ctx(fx_isa isa, unsigned threads) {
    return make_ctx_pf(isa, threads, 0, 0, 0);
}

static int have_isa(fx_isa isa) {
    fx_kernels *kc = make_ctx(isa, 1);
    fx_kernels_free(kc);
    return kc != NULL;
}

#define SENTINEL 12345.0f

/* y = x[r0 .. r0+m) * W^T through kc; checks the stride gaps of y are
 * untouched; returns y ([m][n], dense). */
static float *run_mm(fx_kernels *kc, const float *x, size_t ldx, size_t r0,
                     size_t m, const uint8_t *w, fx_wtype t, size_t n,
                     size_t k) {
    size_t ldy = n + 5;
    float *y = malloc(m * ldy * sizeof *y);
    assert_non_null(y);
    for (size_t i = 0; i < m * ldy; i++) y[i] = SENTINEL;
    assert_int_equal(fx_matmul(kc, x + r0 * ldx, ldx, m, w, t, n, k, y, ldy, 0),
                     FX_OK);
    float *out = malloc(m * n * sizeof *out);
    assert_non_null(out);
    for (size_t i = 0; i < m; i++) {
        for (size_t j = n; j < ldy; j++)
            assert_true(y[i * ldy + j] == SENTINEL);
        memcpy(out + i * n, y + i * ldy, n * sizeof *out);
    }
    free(y);
    return out;
}

static void assert_rows_identical(const float *got, const float *want,
                                  size_t n, const char *what, size_t row) {
    if (memcmp(got, want, n * sizeof *got) == 0) return;
    for (size_t j = 0; j < n; j++) {
        uint32_t a, b;
        memcpy(&a, got + j, 4);
        memcpy(&b, want + j, 4);
        if (a != b) {
            print_error("%s: row %zu col %zu: %a (0x%08x) vs %a (0x%08x)\n",
                        what, row, j, (double)got[j], a, (double)want[j], b);
            fail();
        }
    }
}

/* ---- batch invariance ---- */

typedef struct shape {
    size_t m, n, k;
} shape;

/* The same Q8_0 matrix repacked (fx_q8_0_repack_r16). */
static uint8_t *repack_r16(const uint8_t *w, size_t n, size_t k) {
    const size_t bytes = fx_wtype_row_bytes(FX_WTYPE_Q8_0, k) * n;
    uint8_t *out = malloc(bytes ? bytes : 1);
    assert_non_null(out);
    assert_int_equal(fx_q8_0_repack_r16(out, w, n, k), FX_OK);
    return out;
}

/* The same float matrix repacked (fx_float_repack_r12). */
static uint8_t *repack_r12(const uint8_t *w, fx_wtype t, size_t n, size_t k) {
    const size_t bytes = fx_wtype_row_bytes(t, k) * n;
    uint8_t *out = malloc(bytes ? bytes : 1);
    assert_non_null(out);
    assert_int_equal(fx_float_repack_r12(out, w, t, n, k), FX_OK);
    return out;
}

/* Every ISA, thread count and batch against the portable path run one
 * row at a time. For R16 and R12 the reference is the portable path of
 * the type on the matrix before repacking: the layout must not change a
 * bit. */
static void check_invariance(fx_wtype t, shape sh) {
    const size_t ldx = sh.k + 3;
    const bool r16 = t == FX_WTYPE_Q8_0_R16, r12 = fx_wtype_is_r12(t);
    const fx_wtype t_ref = r16 ? FX_WTYPE_Q8_0 : fx_wtype_unpacked(t);
    uint8_t *w_ref = make_weights(t_ref, sh.n, sh.k, sh.n * 131 + sh.k);
    uint8_t *w = r16   ? repack_r16(w_ref, sh.n, sh.k)
                 : r12 ? repack_r12(w_ref, t_ref, sh.n, sh.k)
                       : w_ref;
    float *x = make_x(sh.m, sh.k, ldx, sh.k);

    /* The reference: the portable path, one thread, each row alone. */
    fx_kernels *ref = make_ctx(FX_ISA_PORTABLE, 1);
    float *want = malloc(sh.m * sh.n * sizeof *want);
    assert_non_null(want);
    for (size_t r = 0; r < sh.m; r++) {
        float *y = run_mm(ref, x, ldx, r, 1, w_ref, t_ref, sh.n, sh.k);
        memcpy(want + r * sh.n, y, sh.n * sizeof *y);
        free(y);
    }

    /* AVX-512 Q8_0 R16 also with its software prefetch at every number of
     * x rows and at none (Q8_PF_NEVER), the R12 two-stream tasks with theirs 1 KB
     * ahead and never, whatever this CPU's defaults: every CPU must
     * compute the bits of every other. The AVX2 float tiles also with x
     * in blocks of 4 rows (x_block 1) and of 4 to 20 rows (24 KiB, by K),
     * where the default 1 MiB puts no test batch in more than one. */
    struct {
        fx_isa isa;
        unsigned threads;
        uint32_t q8_pf_rows;
        size_t r12_pf, x_block;
    } cfgs[] = {{FX_ISA_PORTABLE, 2, 0, 0, 0},  {FX_ISA_AVX2, 1, 0, 0, 0},
                {FX_ISA_AVX2, 2, 0, 0, 0},      {FX_ISA_AVX2, 2, 0, 0, 1},
                {FX_ISA_AVX2, 1, 0, 0, 24576},  {FX_ISA_AVX512, 1, 0, 0, 0},
                {FX_ISA_AVX512, 2, 0, 0, 0},    {FX_ISA_AVX512, 2, Q8_PF_ALL, 1024, 0},
                {FX_ISA_AVX512, 2, Q8_PF_NEVER, SIZE_MAX, 0},
                {FX_ISA_AVX512, 1, Q8_PF_NEVER, SIZE_MAX, 0}};
    const size_t batches[] = {1,  2,  3,  4,  5,  6,  7,
                              8,  9,  16, 32, 33, 70, 150};
    for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++) {
        if ((cfgs[c].q8_pf_rows || cfgs[c].r12_pf) && !r16 && !r12)
            continue;
        if (cfgs[c].x_block && (r16 || t == FX_WTYPE_Q8_0)) continue;
        fx_kernels *kc = make_ctx_pf(cfgs[c].isa, cfgs[c].threads,
                                     cfgs[c].q8_pf_rows, cfgs[c].r12_pf,
                                     cfgs[c].x_block);
        if (!kc) continue; /* ISA absent here: nothing to compare */
        for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++) {
            size_t bm = batches[b];
            if (bm > sh.m) continue;
            /* Two placements of the batch, so a row is seen at different
             * positions inside its tile. */
            size_t starts[2] = {0, sh.m - bm};
            for (int si = 0; si < 2; si++) {
                float *y = run_mm(kc, x, ldx, starts[si], bm, w, t, sh.n, sh.k);
                char what[128];
                snprintf(what, sizeof what,
                         "%s isa=%d threads=%u pf=%#x/%zu xb=%zu M=%zu K=%zu",
                         fx_wtype_name(t), (int)cfgs[c].isa, cfgs[c].threads,
                         (unsigned)cfgs[c].q8_pf_rows, cfgs[c].r12_pf,
                         cfgs[c].x_block, bm, sh.k);
                for (size_t i = 0; i < bm; i++)
                    assert_rows_identical(y + i * sh.n,
                                          want + (starts[si] + i) * sh.n,
                                          sh.n, what, starts[si] + i);
                free(y);
            }
        }
        fx_kernels_free(kc);
    }
    fx_kernels_free(ref);
    free(want);
    free(x);
    if (w != w_ref) free(w);
    free(w_ref);
}

static void test_invariance_float_types(void **state) {
    (void)state;
    /* K: tails of every length, exact groups, several KC=256 slabs with a
     * tail in the last, and two of AVX-512's KC=1024 slabs (1100); N:
     * partial 3-column tiles, several 48-column tasks. */
    const shape shapes[] = {
        {37, 7, 1},   {37, 5, 5},    {37, 4, 8},   {37, 9, 13},
        {37, 50, 31}, {37, 3, 64},   {37, 97, 100}, {70, 100, 555},
        {70, 49, 256}, {70, 2, 263},  {150, 101, 300}, {40, 21, 1100},
    };
    const fx_wtype types[] = {FX_WTYPE_F32, FX_WTYPE_F16, FX_WTYPE_BF16};
    for (size_t t = 0; t < 3; t++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            check_invariance(types[t], shapes[s]);
}

static void test_invariance_q8_0(void **state) {
    (void)state;
    const shape shapes[] = {{37, 5, 32}, {37, 50, 96}, {70, 100, 544},
                            {70, 1, 256}, {70, 98, 288}, {150, 20, 288}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        check_invariance(FX_WTYPE_Q8_0, shapes[s]);
}

/* R16: N = 1 (one short tile of one row), 3, 15, 16 (one full tile), 17,
 * 31, 33, 47, 100, 200 (full tiles and a short last one, several tasks
 * per thread), 300 and 600 (3 and 5 whole tiles in a 2-thread task: the
 * AVX2 one-row path pairs tiles and leaves an odd one, and on one thread
 * 6-tile tasks), then a short last tile of every size 1..15 behind two full
 * ones; K with odd and even block counts (1, 3, 5, 9, 17 and 2, 32, 88
 * blocks: pairs of blocks and a lone last block); M from 1 to 150 (the
 * batches of check_invariance: one-tile, small-M and large-M paths). */
static void test_invariance_q8_0_r16(void **state) {
    (void)state;
    const shape shapes[] = {{37, 1, 32},    {37, 3, 96},    {37, 15, 64},
                            {37, 16, 1024}, {70, 17, 288},  {37, 31, 160},
                            {150, 33, 96},  {40, 47, 2816}, {70, 100, 544},
                            {9, 16, 32},    {40, 200, 64},  {9, 5, 2816},
                            {9, 300, 64},   {9, 600, 32}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        check_invariance(FX_WTYPE_Q8_0_R16, shapes[s]);
    for (size_t r = 1; r < FX_R16_ROWS; r++) {
        const shape sh = {34, 2 * FX_R16_ROWS + r, r % 2 ? 96 : 64};
        check_invariance(FX_WTYPE_Q8_0_R16, sh);
    }
}

/* R12: N = 2 (one short tile of one pair), 10, 12 (one full tile), 14,
 * 24, 26, 100 (full tiles and a short last one, several tasks), then a
 * short last tile of every even size behind two full ones; K from 8 to
 * 2816 (several 256-wide slabs of the large-M pack, which reads the
 * tiles row by row); M from 1 to 150 (one-tile, small-M, large-M). */
static void test_invariance_float_r12(void **state) {
    (void)state;
    /* The last three: one-row tasks of two chunks (matmul.c, plan_job):
     * chunks of two whole tiles and a last chunk of one (300), a short
     * last tile (298), an odd count of chunks of four tiles (502). */
    const shape shapes[] = {{37, 2, 8},    {37, 10, 16},  {37, 12, 64},
                            {70, 14, 264}, {37, 24, 1024}, {150, 26, 40},
                            {40, 100, 2816}, {9, 12, 8},   {9, 300, 64},
                            {9, 298, 64},  {9, 502, 40}};
    const fx_wtype types[] = {FX_WTYPE_F32_R12, FX_WTYPE_F16_R12,
                              FX_WTYPE_BF16_R12};
    for (size_t t = 0; t < 3; t++) {
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            check_invariance(types[t], shapes[s]);
        for (size_t r = 2; r < FX_R12_ROWS; r += 2) {
            const shape sh = {34, 2 * FX_R12_ROWS + r, r % 4 ? 96 : 48};
            check_invariance(types[t], sh);
        }
    }
}

/* ---- accuracy ---- */

static void check_accuracy(fx_kernels *kc, fx_wtype t, shape sh) {
    uint8_t *w = make_weights(t, sh.n, sh.k, 99 + sh.k);
    float *x = make_x(sh.m, sh.k, sh.k, 5);
    float *y = run_mm(kc, x, sh.k, 0, sh.m, w, t, sh.n, sh.k);
    float *wrow = malloc(sh.k * sizeof *wrow);
    assert_non_null(wrow);
    const double u = 0x1p-24;
    const double j = (double)((sh.k + 7) / 8 + 3);
    const double gamma = j * u / (1.0 - j * u);
    const size_t rb = fx_wtype_row_bytes(t, sh.k);
    double worst = 0.0; /* largest error as a fraction of the bound */
    for (size_t n = 0; n < sh.n; n++) {
        assert_int_equal(fx_wtype_row_to_f32(wrow, w + n * rb, t, sh.k), FX_OK);
        for (size_t m = 0; m < sh.m; m++) {
            double exact = 0.0, mag = 0.0;
            for (size_t k = 0; k < sh.k; k++) {
                double p = (double)x[m * sh.k + k] * (double)wrow[k];
                exact += p;
                mag += fabs(p);
            }
            double err = fabs((double)y[m * sh.n + n] - exact);
            double bound = gamma * mag;
            if (err > bound) {
                print_error("%s K=%zu y[%zu][%zu]=%.9g exact=%.9g err=%g "
                            "bound=%g\n", fx_wtype_name(t), sh.k, m, n,
                            (double)y[m * sh.n + n], exact, err, bound);
                fail();
            }
            if (bound > 0 && err / bound > worst) worst = err / bound;
        }
    }
    (void)worst;
    free(wrow);
    free(y);
    free(x);
    free(w);
}

static void test_accuracy(void **state) {
    (void)state;
    fx_kernels *kc = make_ctx(FX_ISA_AUTO, 2);
    const shape shapes[] = {{1, 64, 4096}, {20, 40, 4096}, {5, 33, 1000},
                            {9, 17, 352}};
    /* Q8_0 has its own order and bound (test_q8_accuracy). */
    for (size_t t = 0; t < 3; t++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            check_accuracy(kc, all_types[t], shapes[s]);
    fx_kernels_free(kc);
}

/* ---- Q8_0: the definition of kernels.h, written again ---- */

/* Block b of a row of x quantized by the rule of kernels.h: q and dx. The
 * rounding goes through rint in double (exact on a float), not the
 * library's nearbyintf, so a wrong rounding rule in any path shows. */
static void ref_quantize_block(const float *x, int8_t q[32], float *dx) {
    uint32_t amax = 0;
    for (int i = 0; i < 32; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        u &= 0x7fffffffu;
        if (u > amax) amax = u;
    }
    memset(q, 0, 32);
    if (amax >= 0x7f800000u) {
        *dx = NAN;
        return;
    }
    float a;
    memcpy(&a, &amax, 4);
    if (a < 0x1p-100f) {
        *dx = 0.0f;
        return;
    }
    *dx = a / 127.0f;
    const float id = 127.0f / a;
    for (int i = 0; i < 32; i++) {
        const float v = x[i] * id;
        const double r = rint((double)v);
        assert_true(fabs(r) <= 127.0);
        q[i] = (int8_t)r;
    }
}

/* y for one x row and one weight row, in the order of kernels.h: one
 * accumulator, blocks in increasing order, each block's 32 products summed
 * exactly as integers, then one fma by the rounded product of the scales. */
static float ref_q8_dot(const float *x, const uint8_t *wrow, size_t k) {
    float acc = +0.0f;
    for (size_t b = 0; b < k / 32; b++) {
        int8_t q[32];
        float dx;
        ref_quantize_block(x + 32 * b, q, &dx);
        fx_block_q8_0 blk;
        memcpy(&blk, wrow + b * sizeof blk, sizeof blk);
        const float s = fx_f16_to_f32(blk.d) * dx; /* one rounding */
        int32_t p = 0;
        for (int i = 0; i < 32; i++) p += (int32_t)blk.qs[i] * (int32_t)q[i];
        acc = fmaf(s, (float)p, acc); /* (float)p is exact: |p| < 2^24 */
    }
    return acc;
}

/* Blocks that stress the quantizer: one with x * id landing exactly on
 * halves (amax 127 gives id 1: 2.5 -> 2, 3.5 -> 4, -0.5 -> -0), all
 * zeros, tiny (below 2^-100: quantized to zeros), subnormal and huge
 * magnitudes, a lone large value among small ones. */
static void fill_special_x(float *x, size_t k, uint64_t seed) {
    uint64_t s = seed;
    for (size_t b = 0; b < k / 32; b++) {
        float *xb = x + 32 * b;
        const int kind = (int)(b % 6);
        for (int i = 0; i < 32; i++) {
            const float r = fx_test_rng_f(&s);
            switch (kind) {
            case 0: xb[i] = i == 0 ? 127.0f : (float)((i % 9) - 4) + 0.5f; break;
            case 1: xb[i] = 0.0f; break;
            case 2: xb[i] = r * 0x1p-110f; break;
            case 3: xb[i] = i == 5 ? 1e30f : r * 1e28f; break;
            case 4: xb[i] = i == 7 ? -50.0f : r * 1e-3f; break;
            default: xb[i] = r * 0x1p-99f; break;
            }
        }
    }
}

/* The Q8_0 weights in both forms a matmul takes: as the file has them
 * and repacked (the same bits out of every path). */
static const fx_wtype q8_types[] = {FX_WTYPE_Q8_0, FX_WTYPE_Q8_0_R16};

/* y = x * W^T on every ISA the CPU has, 1 and 2 threads, from both forms
 * of the Q8_0 matrix w, equal bit for bit to want ([m][n]). */
static void check_q8_all_paths(const float *x, size_t ldx, size_t m,
                               const uint8_t *w, size_t n, size_t k,
                               const float *want, const char *name) {
    uint8_t *wr = repack_r16(w, n, k);
    const fx_isa isas[] = {FX_ISA_PORTABLE, FX_ISA_AVX2, FX_ISA_AVX512};
    for (int a = 0; a < 3; a++)
        for (unsigned threads = 1; threads <= 2; threads++) {
            fx_kernels *kc = make_ctx(isas[a], threads);
            if (!kc) continue;
            for (int f = 0; f < 2; f++) {
                float *y = run_mm(kc, x, ldx, 0, m, f ? wr : w, q8_types[f],
                                  n, k);
                char what[128];
                snprintf(what, sizeof what,
                         "%s %s isa=%d threads=%u M=%zu N=%zu K=%zu", name,
                         fx_wtype_name(q8_types[f]), (int)isas[a], threads, m,
                         n, k);
                for (size_t r = 0; r < m; r++)
                    assert_rows_identical(y + r * n, want + r * n, n, what, r);
                free(y);
            }
            fx_kernels_free(kc);
        }
    free(wr);
}

static void test_q8_definition(void **state) {
    (void)state;
    /* Odd and even N and block counts, short R16 tiles, M from one row to
     * the large-M path. */
    const shape shapes[] = {{9, 13, 192}, {40, 7, 64},  {3, 50, 1024},
                            {1, 1, 32},   {35, 17, 96}, {2, 33, 2816},
                            {70, 16, 160}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const shape sh = shapes[si];
        uint8_t *w = make_weights(FX_WTYPE_Q8_0, sh.n, sh.k, 17 + si);
        float *x = make_x(sh.m, sh.k, sh.k, 3 + si);
        /* Half the rows random, half special. */
        for (size_t r = 0; r < sh.m; r += 2)
            fill_special_x(x + r * sh.k, sh.k, 100 + r);
        const size_t rb = fx_wtype_row_bytes(FX_WTYPE_Q8_0, sh.k);
        float *want = malloc(sh.m * sh.n * sizeof *want);
        assert_non_null(want);
        for (size_t r = 0; r < sh.m; r++)
            for (size_t n = 0; n < sh.n; n++)
                want[r * sh.n + n] = ref_q8_dot(x + r * sh.k, w + n * rb, sh.k);
        check_q8_all_paths(x, sh.k, sh.m, w, sh.n, sh.k, want,
                           "q8_0 definition");
        free(want);
        free(x);
        free(w);
    }
}

/* The order itself, on numbers worked out by hand: block 0 contributes
 * 2^24, blocks 1, 2 and 3 contribute 1 each. One accumulator in block
 * order gives 2^24 + 1 -> 2^24 (a tie, to even) three times: y = 2^24
 * exactly, where any other order or grouping that sums the small blocks
 * first (the exact sum is 2^24 + 3) gives more. And block 0 scaled by a
 * dw * dx that is not exact in float: s must be rounded before the fma.
 * The reference must agree, so it is checked too. */
static void test_q8_order(void **state) {
    (void)state;
    const size_t k = 128, nb = k / 32, m = 40, n = 17;
    /* x: in every block amax 127 (x[0]) so dx = 1 and q = x. */
    float *x = calloc(m * k, sizeof *x);
    assert_non_null(x);
    for (size_t r = 0; r < m; r++)
        for (size_t b = 0; b < nb; b++) {
            x[r * k + 32 * b] = 127.0f;
            x[r * k + 32 * b + 1] = b == 0 ? 64.0f : 1.0f;
        }
    /* w: qs[0] = 0, qs[1] = 16 with dw = 2^14 in block 0 (p = 1024:
     * 2^24), qs[1] = 1 with dw = 1 in the others (p = 1). */
    const size_t rb = fx_wtype_row_bytes(FX_WTYPE_Q8_0, k);
    uint8_t *w = calloc(n, rb);
    assert_non_null(w);
    for (size_t j = 0; j < n; j++)
        for (size_t b = 0; b < nb; b++) {
            fx_block_q8_0 blk;
            memset(&blk, 0, sizeof blk);
            blk.d = fx_f32_to_f16(b == 0 ? 0x1p14f : 1.0f);
            blk.qs[1] = b == 0 ? 16 : 1;
            memcpy(w + j * rb + b * sizeof blk, &blk, sizeof blk);
        }
    float *want = malloc(m * n * sizeof *want);
    assert_non_null(want);
    for (size_t i = 0; i < m * n; i++) want[i] = 0x1p24f;
    for (size_t i = 0; i < n; i++)
        assert_true(ref_q8_dot(x, w + i * rb, k) == 0x1p24f);
    check_q8_all_paths(x, k, m, w, n, k, want, "q8_0 order");

    /* One rounding of s: x = 100 at x[0] gives dx = 100/127 (inexact) and
     * q[0] = 127; dw = 3 and qs[0] = 1: p = 127, and s = f32(3 * dx). */
    float x1[32] = {100.0f};
    fx_block_q8_0 b1;
    memset(&b1, 0, sizeof b1);
    b1.d = fx_f32_to_f16(3.0f);
    b1.qs[0] = 1;
    const float dx = 100.0f / 127.0f;
    const float s = 3.0f * dx;
    const float want1 = fmaf(s, 127.0f, 0.0f);
    assert_true(ref_q8_dot(x1, (const uint8_t *)&b1, 32) == want1);
    float w1[1] = {want1};
    check_q8_all_paths(x1, 32, 1, (const uint8_t *)&b1, 1, 32, w1,
                       "q8_0 scale rounding");
    free(want);
    free(w);
    free(x);
}

/* Against exact arithmetic on the same quants, within g(K/32 + 1) *
 * sum_b |f32(dw) dx p_b| (kernels.h: one rounding for the scale, K/32
 * fmas into one accumulator); and against the float x, within the
 * quantization error on top: each x[i] is represented as dx * q[i] to
 * within dx/2 + 3u|x[i]|. Both the library (every path gives the same
 * bits: test_q8_definition) and the reference are held to it, so the
 * bound of kernels.h is checked on its definition too. */
static void test_q8_accuracy(void **state) {
    (void)state;
    fx_kernels *kc = make_ctx(FX_ISA_AUTO, 2);
    const shape shapes[] = {{1, 64, 4096}, {20, 40, 4096}, {5, 33, 992},
                            {9, 17, 352}, {70, 9, 288}, {3, 5, 32}};
    const double u = 0x1p-24;
    double worst = 0; /* the largest error as a fraction of its bound */
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const shape sh = shapes[si];
        uint8_t *w = make_weights(FX_WTYPE_Q8_0, sh.n, sh.k, 99 + sh.k);
        uint8_t *wr = repack_r16(w, sh.n, sh.k);
        float *x = make_x(sh.m, sh.k, sh.k, 5);
        float *ys[2];
        for (int f = 0; f < 2; f++)
            ys[f] = run_mm(kc, x, sh.k, 0, sh.m, f ? wr : w, q8_types[f],
                           sh.n, sh.k);
        const size_t rb = fx_wtype_row_bytes(FX_WTYPE_Q8_0, sh.k);
        const double j = (double)(sh.k / 32 + 1);
        const double gamma = j * u / (1.0 - j * u);
        for (size_t m = 0; m < sh.m; m++)
            for (size_t n = 0; n < sh.n; n++) {
                double exact_q = 0, mag_q = 0, exact_f = 0, qerr = 0;
                for (size_t b = 0; b < sh.k / 32; b++) {
                    int8_t q[32];
                    float dx;
                    const float *xb = x + m * sh.k + 32 * b;
                    ref_quantize_block(xb, q, &dx);
                    fx_block_q8_0 blk;
                    memcpy(&blk, w + n * rb + b * sizeof blk, sizeof blk);
                    const double dw = fx_f16_to_f32(blk.d);
                    int64_t p = 0;
                    for (int i = 0; i < 32; i++) {
                        p += (int64_t)blk.qs[i] * q[i];
                        const double wv = dw * blk.qs[i];
                        exact_f += wv * xb[i];
                        qerr += fabs(wv) * (dx / 2.0 + 3.01 * u * fabs(xb[i]));
                    }
                    exact_q += dw * dx * (double)p;
                    mag_q += fabs(dw * dx * (double)p);
                }
                const double got[3] = {
                    ys[0][m * sh.n + n], ys[1][m * sh.n + n],
                    ref_q8_dot(x + m * sh.k, w + n * rb, sh.k)};
                for (int g = 0; g < 3; g++) {
                    const double eq = fabs(got[g] - exact_q);
                    if (eq > gamma * mag_q ||
                        fabs(got[g] - exact_f) > gamma * mag_q + qerr) {
                        print_error("%s K=%zu y[%zu][%zu]=%.9g exact(q)=%.9g "
                                    "bound %g exact(x)=%.9g bound %g\n",
                                    g == 2 ? "reference"
                                           : fx_wtype_name(q8_types[g]),
                                    sh.k, m, n, got[g], exact_q,
                                    gamma * mag_q, exact_f,
                                    gamma * mag_q + qerr);
                        fail();
                    }
                    if (mag_q > 0 && eq / (gamma * mag_q) > worst)
                        worst = eq / (gamma * mag_q);
                }
            }
        free(ys[0]);
        free(ys[1]);
        free(x);
        free(wr);
        free(w);
    }
    print_message("q8_0: worst error %.3f of the bound\n", worst);
    fx_kernels_free(kc);
}

/* A block holding NaN or inf makes the row's outputs NaN on every path
 * and both forms (the float x would give inf or NaN; a quantized block
 * cannot carry inf). The other rows of the batch are untouched. */
static void test_q8_nonfinite(void **state) {
    (void)state;
    const size_t k = 96, n = 5, m = 3;
    uint8_t *w = make_weights(FX_WTYPE_Q8_0, n, k, 8);
    uint8_t *wr = repack_r16(w, n, k);
    float *x = make_x(m, k, k, 9);
    x[0 * k + 40] = NAN;
    x[2 * k + 95] = -INFINITY;
    fx_isa isas[] = {FX_ISA_PORTABLE, FX_ISA_AVX2, FX_ISA_AVX512};
    const size_t rb = fx_wtype_row_bytes(FX_WTYPE_Q8_0, k);
    for (int a = 0; a < 3; a++) {
        fx_kernels *kc = make_ctx(isas[a], 1);
        if (!kc) continue;
        for (int f = 0; f < 2; f++) {
            float *y = run_mm(kc, x, k, 0, m, f ? wr : w, q8_types[f], n, k);
            for (size_t j = 0; j < n; j++) {
                assert_true(isnan(y[0 * n + j]));
                assert_true(isnan(y[2 * n + j]));
                const float want = ref_q8_dot(x + k, w + j * rb, k);
                assert_true(isfinite(y[n + j]));
                assert_rows_identical(&y[n + j], &want, 1, "q8_0 finite row",
                                      1);
            }
            free(y);
        }
        fx_kernels_free(kc);
    }
    free(x);
    free(wr);
    free(w);
}

/* ---- the R12 layout ---- */

/* The repacked matrix is kernels.h's R12 layout: walking it in storage
 * order -- tiles of 12 rows (the last shorter) where their first row was,
 * chunks of 8 elements, rows -- finds each row's 8 elements of the chunk,
 * where fx_float_r12_at says; the matrix keeps its size. Element values
 * are their own indices so a misplaced one cannot pass. Bad shapes and
 * types are refused. */
static void test_r12_layout(void **state) {
    (void)state;
    const size_t ns[] = {2, 4, 10, 12, 14, 22, 24, 26, 100};
    const size_t ks[] = {8, 16, 40, 1024};
    for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
        for (size_t b = 0; b < sizeof ks / sizeof *ks; b++) {
            const size_t n = ns[a], k = ks[b];
            float *w = malloc(n * k * sizeof *w), *r = malloc(n * k * sizeof *r);
            assert_true(w && r);
            for (size_t i = 0; i < n * k; i++) w[i] = (float)i;
            assert_int_equal(fx_float_repack_r12(r, w, FX_WTYPE_F32, n, k),
                             FX_OK);
            size_t o = 0;
            for (size_t t = 0; t < n; t += 12) {
                assert_int_equal(o, t * k);
                const size_t rows = n - t < 12 ? n - t : 12;
                for (size_t c = 0; c < k / 8; c++)
                    for (size_t row = 0; row < rows; row++) {
                        assert_int_equal(fx_float_r12_at(n, k, 4, t + row, c),
                                         o * 4);
                        for (size_t e = 0; e < 8; e++)
                            assert_true(r[o++] ==
                                        (float)((t + row) * k + 8 * c + e));
                    }
            }
            assert_int_equal(o, n * k);
            /* 2-byte types move the same elements. */
            uint16_t *h = malloc(n * k * 2), *hr = malloc(n * k * 2);
            assert_true(h && hr);
            for (size_t i = 0; i < n * k; i++) h[i] = (uint16_t)(i * 7);
            assert_int_equal(fx_float_repack_r12(hr, h, FX_WTYPE_BF16, n, k),
                             FX_OK);
            for (size_t row = 0; row < n; row++)
                for (size_t c = 0; c < k / 8; c++)
                    assert_memory_equal(
                        (const uint8_t *)hr + fx_float_r12_at(n, k, 2, row, c),
                        h + row * k + 8 * c, 16);
            free(h);
            free(hr);
            free(w);
            free(r);
        }
    float buf[64] = {0}, out[64];
    assert_int_equal(fx_float_repack_r12(out, buf, FX_WTYPE_F32, 3, 8),
                     FX_ERR_INVALID_ARG); /* odd N */
    assert_int_equal(fx_float_repack_r12(out, buf, FX_WTYPE_F16, 2, 12),
                     FX_ERR_INVALID_ARG); /* K % 8 */
    assert_int_equal(fx_float_repack_r12(out, buf, FX_WTYPE_Q8_0, 2, 32),
                     FX_ERR_INVALID_ARG);
    assert_int_equal(fx_float_repack_r12(NULL, buf, FX_WTYPE_F32, 2, 8),
                     FX_ERR_INVALID_ARG);
    assert_int_equal(fx_float_repack_r12(NULL, NULL, FX_WTYPE_F32, 0, 8),
                     FX_OK);
    assert_int_equal(fx_wtype_row_bytes(FX_WTYPE_F16_R12, 64), 128);
    assert_int_equal(fx_wtype_row_bytes(FX_WTYPE_F16_R12, 60), 0);
    assert_int_equal(fx_wtype_row_bytes(FX_WTYPE_F32_R12, 8), 32);
    /* F32 only where it measured faster in R12: AVX-512 on Zen 5. */
    assert_int_equal(fx_kernels_prefer_r12(FX_WTYPE_F32),
                     fx_kernels_prefer_r12(FX_WTYPE_F16) &&
                         fx_cpu_amd_family() >= 0x1a);
    assert_false(fx_kernels_prefer_r12(FX_WTYPE_Q8_0));
    assert_false(fx_kernels_prefer_r12(FX_WTYPE_F16_R12));
    /* A matmul refuses an R12 matrix with odd N or K % 8 != 0. */
    fx_kernels *kc = make_ctx(FX_ISA_PORTABLE, 1);
    float x[16] = {0}, y[4];
    assert_int_equal(fx_matmul(kc, x, 8, 1, buf, FX_WTYPE_F32_R12, 3, 8, y, 3,
                               0),
                     FX_ERR_INVALID_ARG);
    assert_int_equal(fx_matmul(kc, x, 12, 1, buf, FX_WTYPE_F32_R12, 2, 12, y,
                               2, 0),
                     FX_ERR_INVALID_ARG);
    fx_kernels_free(kc);
}

/* ---- the R16 layout ---- */

/* The layout of kernels.h written again from its prose, by walking the
 * repacked matrix in storage order: tiles of 16 rows (the last one
 * shorter), in each tile groups of 2 blocks (the last one single when B
 * is odd), in each group first every block's scales row by row, then per
 * block, per 4-quant slice j, per row, the 4 quants XOR 0x80. Returns the
 * bytes written, which must be the matrix's size. */
static size_t ref_repack_r16(uint8_t *dst, const uint8_t *src, size_t n,
                             size_t k) {
    const size_t nb = k / 32, rb = nb * 34;
    size_t o = 0;
    for (size_t t = 0; t < n; t += 16) {
        assert_int_equal(o, t * rb); /* a tile where its first row was */
        const size_t rows = n - t < 16 ? n - t : 16;
        for (size_t g = 0; g < nb; g += 2) {
            const size_t gb = nb - g < 2 ? nb - g : 2;
            for (size_t i = 0; i < gb; i++)
                for (size_t r = 0; r < rows; r++) {
                    const uint8_t *blk = src + (t + r) * rb + (g + i) * 34;
                    dst[o++] = blk[0];
                    dst[o++] = blk[1];
                }
            for (size_t i = 0; i < gb; i++)
                for (size_t j = 0; j < 8; j++)
                    for (size_t r = 0; r < rows; r++) {
                        const uint8_t *blk = src + (t + r) * rb + (g + i) * 34;
                        for (size_t e = 0; e < 4; e++)
                            dst[o++] = (uint8_t)(blk[2 + 4 * j + e] ^ 0x80);
                    }
        }
    }
    return o;
}

/* The repacked matrix is the layout of kernels.h byte for byte, of the
 * matrix's size (nothing written past it); every block is where
 * fx_q8_r16_at says, its quants flipped and its scale intact; and every
 * byte of the matrix belongs to exactly one (row, block): a permutation,
 * no gap. For N of every size class (1, 2, 3, 15, 16, 17, 31, 32, 33, 47,
 * 100) and odd and even block counts. A full tile's groups start on a
 * 64-byte line with B even, as kernels.h promises. */
static void test_r16_layout(void **state) {
    (void)state;
    const size_t ns[] = {1, 2, 3, 15, 16, 17, 31, 32, 33, 47, 100};
    const size_t ks[] = {32, 64, 96, 320, 544};
    const size_t guard = 64;
    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
        for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
            const size_t n = ns[ni], k = ks[ki], nb = k / 32;
            uint8_t *w = make_weights(FX_WTYPE_Q8_0, n, k, 3 + ni * 7 + ki);
            const size_t bytes = fx_wtype_row_bytes(FX_WTYPE_Q8_0, k) * n;
            assert_int_equal(bytes, n * nb * 34);
            uint8_t *r = malloc(bytes + guard);
            uint8_t *want = malloc(bytes);
            unsigned char *seen = calloc(bytes, 1);
            assert_non_null(r);
            assert_non_null(want);
            assert_non_null(seen);
            memset(r, 0xa5, bytes + guard);
            assert_int_equal(fx_q8_0_repack_r16(r, w, n, k), FX_OK);
            for (size_t i = bytes; i < bytes + guard; i++)
                assert_int_equal(r[i], 0xa5);
            assert_int_equal(ref_repack_r16(want, w, n, k), bytes);
            if (memcmp(r, want, bytes) != 0) {
                for (size_t i = 0; i < bytes; i++)
                    if (r[i] != want[i]) {
                        print_error("N=%zu K=%zu: byte %zu is 0x%02x, the "
                                    "layout says 0x%02x\n", n, k, i, r[i],
                                    want[i]);
                        break;
                    }
                fail();
            }
            for (size_t row = 0; row < n; row++)
                for (size_t b = 0; b < nb; b++) {
                    size_t q, d, stride;
                    fx_q8_r16_at(n, nb, row, b, &q, &d, &stride);
                    assert_true(d + 2 <= bytes);
                    assert_true(stride >= 4);
                    assert_true(q + 7 * stride + 4 <= bytes);
                    const uint8_t *blk = w + row * nb * 34 + b * 34;
                    assert_memory_equal(r + d, blk, 2);
                    seen[d]++;
                    seen[d + 1]++;
                    for (size_t j = 0; j < 8; j++)
                        for (size_t e = 0; e < 4; e++) {
                            const size_t at = q + j * stride + e;
                            assert_int_equal(r[at],
                                             blk[2 + 4 * j + e] ^ 0x80);
                            seen[at]++;
                        }
                    /* A full tile with B even: each group's scales and
                     * every 4-quant slice of its row 0 start a line. */
                    const size_t tile = row / 16 * 16;
                    if (n - tile >= 16 && nb % 2 == 0 && row % 16 == 0) {
                        assert_int_equal(q % 64, 0);
                        assert_int_equal(stride, 64);
                        if (b % 2 == 0) assert_int_equal(d % 64, 0);
                    }
                }
            for (size_t i = 0; i < bytes; i++)
                if (seen[i] != 1) {
                    print_error("N=%zu K=%zu: byte %zu used %u times\n", n, k,
                                i, (unsigned)seen[i]);
                    fail();
                }
            free(seen);
            free(want);
            free(r);
            free(w);
        }
}

/* Bad shapes and pointers are refused; an empty matrix is nothing to do;
 * odd N is a valid R16 matrix (fx_matmul and fx_matmul_multi take it) and
 * multiplies to the definition's bits on every path. */
static void test_r16_arguments(void **state) {
    (void)state;
    uint8_t buf[4 * 34], out[4 * 34];
    memset(buf, 0, sizeof buf);
    assert_int_equal(fx_q8_0_repack_r16(out, buf, 2, 33), FX_ERR_INVALID_ARG);
    assert_int_equal(fx_q8_0_repack_r16(out, buf, 1, 16), FX_ERR_INVALID_ARG);
    assert_int_equal(fx_q8_0_repack_r16(NULL, NULL, 0, 33),
                     FX_ERR_INVALID_ARG);
    assert_int_equal(fx_q8_0_repack_r16(NULL, buf, 1, 32), FX_ERR_INVALID_ARG);
    assert_int_equal(fx_q8_0_repack_r16(out, NULL, 1, 32), FX_ERR_INVALID_ARG);
    assert_int_equal(fx_q8_0_repack_r16(NULL, NULL, 0, 32), FX_OK);
    assert_int_equal(fx_q8_0_repack_r16(NULL, NULL, 3, 0), FX_OK);
    /* Odd N repacks, including N = 1 and 3 (one short tile). */
    assert_int_equal(fx_q8_0_repack_r16(out, buf, 1, 32), FX_OK);
    assert_int_equal(fx_q8_0_repack_r16(out, buf, 3, 32), FX_OK);
    assert_true(fx_kernels_prefer_r16(FX_WTYPE_Q8_0));
    assert_false(fx_kernels_prefer_r16(FX_WTYPE_F32));
    assert_false(fx_kernels_prefer_r16(FX_WTYPE_F16));
    assert_false(fx_kernels_prefer_r16(FX_WTYPE_BF16));
    assert_false(fx_kernels_prefer_r16(FX_WTYPE_Q8_0_R16));
    assert_int_equal(fx_wtype_row_bytes(FX_WTYPE_Q8_0_R16, 64), 68);
    assert_int_equal(fx_wtype_row_bytes(FX_WTYPE_Q8_0_R16, 65), 0);

    /* Odd N multiplies: against the definition, bit for bit, every path,
     * one row and a large-M batch; multi with an odd-N R16 output too. */
    const size_t odd[] = {1, 3, 17, 33, 47};
    for (size_t oi = 0; oi < sizeof odd / sizeof odd[0]; oi++) {
        const size_t n = odd[oi], k = 96 + 64 * oi, m = 35;
        uint8_t *w = make_weights(FX_WTYPE_Q8_0, n, k, 60 + oi);
        float *x = make_x(m, k, k, 61 + oi);
        const size_t rb = fx_wtype_row_bytes(FX_WTYPE_Q8_0, k);
        float *want = malloc(m * n * sizeof *want);
        assert_non_null(want);
        for (size_t r = 0; r < m; r++)
            for (size_t j = 0; j < n; j++)
                want[r * n + j] = ref_q8_dot(x + r * k, w + j * rb, k);
        check_q8_all_paths(x, k, 1, w, n, k, want, "r16 odd N");
        check_q8_all_paths(x, k, m, w, n, k, want, "r16 odd N");
        uint8_t *wr = repack_r16(w, n, k);
        fx_kernels *kc = make_ctx(FX_ISA_AUTO, 2);
        float *y = malloc(m * n * sizeof *y);
        assert_non_null(y);
        fx_mm_out o = {wr, FX_WTYPE_Q8_0_R16, n, y, n};
        assert_int_equal(fx_matmul_multi(kc, x, k, m, k, &o, 1, 0), FX_OK);
        for (size_t r = 0; r < m; r++)
            assert_rows_identical(y + r * n, want + r * n, n, "r16 odd N multi",
                                  r);
        free(y);
        fx_kernels_free(kc);
        free(wr);
        free(want);
        free(x);
        free(w);
    }
}

/* ---- signed zeros through the tail padding ---- */

/* Products that underflow to -0 make every lane -0; the vector paths pad
 * the tail with fma(+0, -0, lane), which must leave -0 alone. The result
 * is -0, bit for bit, on every path. */
static void test_underflow_signed_zero(void **state) {
    (void)state;
    const size_t k = 13, n = 4, m = 9;
    float x[9 * 13], w[4 * 13];
    for (size_t i = 0; i < m * k; i++) x[i] = -0x1p-100f;
    for (size_t i = 0; i < n * k; i++) w[i] = 0x1p-100f;
    fx_isa isas[] = {FX_ISA_PORTABLE, FX_ISA_AVX2, FX_ISA_AVX512};
    for (int a = 0; a < 3; a++) {
        fx_kernels *kc = make_ctx(isas[a], 1);
        if (!kc) continue;
        size_t ms[] = {1, m};
        for (int b = 0; b < 2; b++) {
            float *y = run_mm(kc, x, k, 0, ms[b], (const uint8_t *)w,
                              FX_WTYPE_F32, n, k);
            for (size_t i = 0; i < ms[b] * n; i++) {
                assert_true(y[i] == 0.0f);
                assert_true(signbit(y[i]));
            }
            free(y);
        }
        fx_kernels_free(kc);
    }
}

/* Inf in x: the same inf, sign included, on every path. */
static void test_inf_propagates(void **state) {
    (void)state;
    const size_t k = 21, n = 5;
    float x[21];
    uint8_t *w = make_weights(FX_WTYPE_F16, n, k, 3);
    for (size_t i = 0; i < k; i++) x[i] = 0.5f;
    x[17] = INFINITY;
    float *ys[3] = {NULL, NULL, NULL};
    fx_isa isas[] = {FX_ISA_PORTABLE, FX_ISA_AVX2, FX_ISA_AVX512};
    for (int a = 0; a < 3; a++) {
        fx_kernels *kc = make_ctx(isas[a], 1);
        if (!kc) continue;
        ys[a] = run_mm(kc, x, k, 0, 1, w, FX_WTYPE_F16, n, k);
        fx_kernels_free(kc);
    }
    for (size_t j = 0; j < n; j++) assert_true(isinf(ys[0][j]));
    if (ys[1]) assert_rows_identical(ys[1], ys[0], n, "inf", 0);
    if (ys[2]) assert_rows_identical(ys[2], ys[0], n, "inf avx512", 0);
    free(ys[0]);
    free(ys[1]);
    free(ys[2]);
    free(w);
}

/* ---- several weights on one x ---- */

/* fx_matmul_multi gives every output exactly what fx_matmul gives for its
 * weight alone: mixed types (Q8_0 and R16 next to floats share one
 * quantized x), odd N (an R16 one with a short last tile), on every path
 * and thread count; and refuses bad lists. */
static void test_matmul_multi(void **state) {
    (void)state;
    const size_t k = 96, m_max = 45;
    const fx_wtype types[4] = {FX_WTYPE_Q8_0, FX_WTYPE_F32, FX_WTYPE_F16,
                               FX_WTYPE_Q8_0_R16};
    const size_t ns[4] = {37, 64, 5, 133};
    uint8_t *w[4];
    for (int i = 0; i < 4; i++) {
        if (types[i] == FX_WTYPE_Q8_0_R16) {
            uint8_t *q = make_weights(FX_WTYPE_Q8_0, ns[i], k, 40 + i);
            w[i] = repack_r16(q, ns[i], k);
            free(q);
        } else {
            w[i] = make_weights(types[i], ns[i], k, 40 + i);
        }
    }
    float *x = make_x(m_max, k, k + 2, 41);
    fx_isa isas[] = {FX_ISA_PORTABLE, FX_ISA_AVX2, FX_ISA_AVX512};
    const size_t ms[] = {1, 7, 45};
    for (int a = 0; a < 3; a++)
        for (unsigned threads = 1; threads <= 2; threads++) {
            fx_kernels *kc = make_ctx(isas[a], threads);
            if (!kc) continue;
            for (size_t mi = 0; mi < 3; mi++) {
                const size_t m = ms[mi];
                float *ys[4];
                fx_mm_out outs[4];
                for (int i = 0; i < 4; i++) {
                    ys[i] = malloc(m * (ns[i] + 1) * sizeof(float));
                    assert_non_null(ys[i]);
                    outs[i] = (fx_mm_out){w[i], types[i], ns[i], ys[i], ns[i] + 1};
                }
                assert_int_equal(fx_matmul_multi(kc, x, k + 2, m, k, outs, 4, 0),
                                 FX_OK);
                for (int i = 0; i < 4; i++) {
                    float *alone = run_mm(kc, x, k + 2, 0, m, w[i], types[i],
                                          ns[i], k);
                    for (size_t r = 0; r < m; r++)
                        assert_rows_identical(ys[i] + r * (ns[i] + 1),
                                              alone + r * ns[i], ns[i],
                                              "matmul_multi", r);
                    free(alone);
                    free(ys[i]);
                }
            }
            fx_mm_out bad = {w[0], FX_WTYPE_Q8_0, 4, NULL, 4};
            assert_int_equal(fx_matmul_multi(kc, x, k, 1, k, &bad, 1, 0),
                             FX_ERR_INVALID_ARG);
            fx_mm_out many[FX_MM_MAX_OUTS + 1];
            assert_int_equal(fx_matmul_multi(kc, x, k, 1, k, many,
                                             FX_MM_MAX_OUTS + 1, 0),
                             FX_ERR_INVALID_ARG);
            /* Q8_0 needs K % 32 == 0. */
            float y1[4];
            fx_mm_out ragged = {w[0], FX_WTYPE_Q8_0, 1, y1, 1};
            assert_int_equal(fx_matmul_multi(kc, x, k, 1, 40, &ragged, 1, 0),
                             FX_ERR_INVALID_ARG);
            fx_kernels_free(kc);
        }
    for (int i = 0; i < 4; i++) free(w[i]);
    free(x);
}

/* ---- arguments ---- */

static void test_bad_arguments(void **state) {
    (void)state;
    fx_kernels *kc = make_ctx(FX_ISA_AUTO, 1);
    float x[64] = {0}, y[8] = {0};
    uint8_t w[256] = {0};
    assert_int_equal(fx_matmul(kc, x, 40, 1, w, FX_WTYPE_Q8_0, 1, 40, y, 1, 0),
                     FX_ERR_INVALID_ARG);
    assert_int_equal(fx_matmul(kc, x, 40, 1, w, FX_WTYPE_Q8_0_R16, 1, 40, y,
                               1, 0),
                     FX_ERR_INVALID_ARG);
    /* 5: ggml's retired Q4_2, no type here */
    assert_int_equal(fx_matmul(kc, x, 8, 1, w, (fx_wtype)5, 1, 8, y, 1, 0),
                     FX_ERR_UNSUPPORTED);
    assert_string_equal(fx_wtype_name((fx_wtype)5), "unknown");
    assert_int_equal(fx_wtype_row_bytes((fx_wtype)5, 256), 0);
    /* the block types: whole blocks only */
    assert_int_equal(fx_matmul(kc, x, 40, 1, w, FX_WTYPE_Q4_0, 1, 40, y, 1,
                               0),
                     FX_ERR_INVALID_ARG);
    assert_int_equal(fx_matmul(kc, x, 64, 1, w, FX_WTYPE_IQ4_XS, 1, 64, y, 1,
                               0),
                     FX_ERR_INVALID_ARG);
    assert_int_equal(fx_wtype_row_bytes(FX_WTYPE_Q4_0, 64), 36);
    assert_int_equal(fx_wtype_row_bytes(FX_WTYPE_Q4_0, 48), 0);
    assert_int_equal(fx_wtype_row_bytes(FX_WTYPE_IQ4_XS, 512), 272);
    assert_int_equal(fx_wtype_row_bytes(FX_WTYPE_IQ4_XS, 32), 0);
    assert_string_equal(fx_wtype_name(FX_WTYPE_Q5_1), "q5_1");
    float f[32];
    assert_int_equal(fx_wtype_row_to_f32(f, w, FX_WTYPE_Q4_0, 40),
                     FX_ERR_INVALID_ARG);
    assert_int_equal(fx_wtype_row_to_f32(f, w, (fx_wtype)5, 32),
                     FX_ERR_INVALID_ARG);
    assert_int_equal(fx_matmul(kc, x, 4, 1, w, FX_WTYPE_F32, 1, 8, y, 1, 0),
                     FX_ERR_INVALID_ARG);
    assert_int_equal(fx_matmul(kc, x, 8, 1, w, FX_WTYPE_F32, 2, 8, y, 1, 0),
                     FX_ERR_INVALID_ARG);
    assert_int_equal(fx_matmul(NULL, x, 8, 1, w, FX_WTYPE_F32, 1, 8, y, 1, 0),
                     FX_ERR_INVALID_ARG);
    assert_int_equal(fx_matmul(kc, x, 8, 0, w, FX_WTYPE_F32, 1, 8, y, 1, 0),
                     FX_OK);
    /* K == 0: an empty sum is +0. */
    y[0] = 7.0f;
    assert_int_equal(fx_matmul(kc, x, 0, 1, w, FX_WTYPE_F32, 1, 0, y, 1, 0),
                     FX_OK);
    assert_true(y[0] == 0.0f && !signbit(y[0]));
    assert_int_equal(fx_wtype_row_bytes(FX_WTYPE_Q8_0, 64), 68);
    assert_int_equal(fx_wtype_row_bytes(FX_WTYPE_Q8_0, 65), 0);
    assert_int_equal(fx_wtype_row_bytes(FX_WTYPE_BF16, 3), 6);
    fx_kernels_free(kc);

    fx_alloc alloc;
    assert_int_equal(fx_alloc_init(&alloc, NULL), FX_OK);
    fx_kernels_params p;
    fx_kernels_params_init(&p);
    p.n_threads = 0;
    fx_kernels *bad = NULL;
    assert_int_equal(fx_kernels_create(&alloc, &p, &bad, NULL),
                     FX_ERR_INVALID_ARG);
    assert_null(bad);
    fx_kernels_free(NULL);
}

/* ---- fast mode ---- */

static void test_fast_mode(void **state) {
    (void)state;
    fx_alloc alloc;
    assert_int_equal(fx_alloc_init(&alloc, NULL), FX_OK);
    fx_kernels_params p;
    fx_kernels_params_init(&p);
    p.fast_min_m = 4;
    p.fast_blas = FX_FAST_BLAS_ALWAYS;
    fx_kernels *kc = NULL;
    assert_int_equal(fx_kernels_create(&alloc, &p, &kc, NULL), FX_OK);
    assert_true(fx_kernels_fast_uses_blas(kc));
    const size_t m = 24, n = 40, k = 300;
    uint8_t *w = make_weights(FX_WTYPE_F32, n, k, 11);
    float *x = make_x(m, k, k, 12);
    float y[24 * 40];
    assert_int_equal(fx_matmul(kc, x, k, m, w, FX_WTYPE_F32, n, k, y, n,
                               FX_MATMUL_FAST), FX_OK);
    const float *wf = (const float *)(const void *)w;
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < n; j++) {
            double exact = 0, mag = 0;
            for (size_t q = 0; q < k; q++) {
                double pr = (double)x[i * k + q] * (double)wf[j * k + q];
                exact += pr;
                mag += fabs(pr);
            }
            /* OpenBLAS's order is unknown: the sequential-sum bound. */
            assert_true(fabs((double)y[i * n + j] - exact) <=
                        (double)k * 0x1p-24 * mag * 1.01);
        }
    free(x);
    free(w);
    fx_kernels_free(kc);
}

/* FX_FAST_BLAS_AUTO: where the context decides OpenBLAS would not be
 * faster, the fast flag must change nothing at all. Where it does use
 * OpenBLAS, the result is the sgemm's (checked above). */
static void test_fast_mode_auto(void **state) {
    (void)state;
    fx_alloc alloc;
    assert_int_equal(fx_alloc_init(&alloc, NULL), FX_OK);
    fx_kernels_params p;
    fx_kernels_params_init(&p);
    assert_int_equal(p.fast_blas, FX_FAST_BLAS_AUTO);
    p.fast_min_m = 4;
    fx_isa isas[] = {FX_ISA_AVX512, FX_ISA_AVX2, FX_ISA_PORTABLE};
    for (int a = 0; a < 3; a++) {
        p.isa = isas[a];
        fx_kernels *kc = NULL;
        if (fx_kernels_create(&alloc, &p, &kc, NULL) != FX_OK) continue;
        /* Without AVX-512 in the context, OpenBLAS is the fast path. */
        if (isas[a] != FX_ISA_AVX512) assert_true(fx_kernels_fast_uses_blas(kc));
        print_message("isa %d: fast mode uses OpenBLAS: %s\n", (int)isas[a],
                      fx_kernels_fast_uses_blas(kc) ? "yes" : "no");
        const size_t m = 24, n = 40, k = 300;
        uint8_t *w = make_weights(FX_WTYPE_F32, n, k, 11);
        float *x = make_x(m, k, k, 12);
        float y_fast[24 * 40], y_det[24 * 40];
        assert_int_equal(fx_matmul(kc, x, k, m, w, FX_WTYPE_F32, n, k, y_fast,
                                   n, FX_MATMUL_FAST), FX_OK);
        assert_int_equal(fx_matmul(kc, x, k, m, w, FX_WTYPE_F32, n, k, y_det,
                                   n, 0), FX_OK);
        if (!fx_kernels_fast_uses_blas(kc))
            assert_memory_equal(y_fast, y_det, sizeof y_det);
        free(x);
        free(w);
        fx_kernels_free(kc);
    }
}

static void test_isa_reported(void **state) {
    (void)state;
    fx_kernels *kc = make_ctx(FX_ISA_AUTO, 1);
    fx_isa isa = fx_kernels_isa(kc);
    /* AUTO takes the widest ISA present. */
    fx_isa want = have_isa(FX_ISA_AVX512) ? FX_ISA_AVX512
                : have_isa(FX_ISA_AVX2)   ? FX_ISA_AVX2
                                          : FX_ISA_PORTABLE;
    assert_int_equal(isa, want);
    /* AVX-512 implies AVX2 (kernels.h): other code keys AVX2 forms off it. */
    if (want == FX_ISA_AVX512) assert_true(have_isa(FX_ISA_AVX2));
    print_message("matmul isa: %s\n", isa == FX_ISA_AVX512 ? "avx512"
                                       : isa == FX_ISA_AVX2 ? "avx2"
                                                            : "portable");
    if (want != FX_ISA_AVX512)
        print_message("no AVX-512 here: its checks were skipped\n");
    fx_kernels_free(kc);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_isa_reported),
        cmocka_unit_test(test_invariance_float_types),
        cmocka_unit_test(test_invariance_q8_0),
        cmocka_unit_test(test_invariance_q8_0_r16),
        cmocka_unit_test(test_invariance_float_r12),
        cmocka_unit_test(test_r12_layout),
        cmocka_unit_test(test_accuracy),
        cmocka_unit_test(test_q8_definition),
        cmocka_unit_test(test_q8_order),
        cmocka_unit_test(test_r16_layout),
        cmocka_unit_test(test_r16_arguments),
        cmocka_unit_test(test_q8_accuracy),
        cmocka_unit_test(test_q8_nonfinite),
        cmocka_unit_test(test_matmul_multi),
        cmocka_unit_test(test_underflow_signed_zero),
        cmocka_unit_test(test_inf_propagates),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_fast_mode),
        cmocka_unit_test(test_fast_mode_auto),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
