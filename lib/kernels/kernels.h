/*
 * kernels: the tensor kernels the forward pass is built from -- matmul
 * against F32/F16/BF16/Q8_0 weights and ggml's other block-quantized types
 * (Q4_0 to Q6_K, IQ4_NL, IQ4_XS: quants.h), rmsnorm, RoPE, softmax, SiLU,
 * add, number-format conversions -- and the persistent thread pool they
 * run on.
 *
 * DETERMINISM (docs/design.md). A row's tokens must not depend on which other
 * rows share its batch, on how the work is tiled or on the thread count. So
 * every reduction here has ONE order, written down below, and every code
 * path (M = 1, small M, the cache-blocked large-M path, the portable scalar
 * fallback, AVX2 or AVX-512, any thread count) computes exactly that order.
 * The only exception is the opt-in FX_MATMUL_FAST mode, which hands F32
 * matmuls to OpenBLAS where that is faster (fx_fast_blas) and is then NOT
 * batch-invariant.
 *
 * The matmul reduction order. For y[m][n] = sum_k x[m][k] * w[n][k]:
 *   wv(n,k)   the weight as an f32 value, computed exactly (see fx_wtype);
 *   acc[0..7] = +0.0f;
 *   for k = 0, 1, ..., K-1 in increasing order:
 *       acc[k % 8] = fmaf(x[m][k], wv(n,k), acc[k % 8]);   (one rounding)
 *   y[m][n] = ((acc[0] + acc[4]) + (acc[2] + acc[6]))
 *           + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
 * Vector code pads a tail of K % 8 elements with x = +0, w = -0:
 * fma(+0, -0, a) == a for every a (including -0 and NaN), so padded lanes
 * are untouched, exactly as in the scalar definition. Error bound against
 * exact arithmetic on the same x and wv: |y - exact| <= g(ceil(K/8) + 3) *
 * sum_k |x[k] * wv(n,k)|, g(j) = j*u/(1 - j*u), u = 2^-24 (absent
 * underflow).
 *
 * Q8_0 weights use another order, on QUANTIZED activations (as llama.cpp
 * does): integer dot products are exact, so most of the work has no
 * rounding and no order to fix. Each row of x is quantized on its own,
 * block by block (b: elements 32b..32b+31), so a row's quants do not
 * depend on its batch:
 *   amax = max |x[i]| over the block (NaN if any is NaN);
 *   amax is inf or NaN:  dx(b) = NaN, q[i] = 0  (the output is NaN);
 *   amax < 2^-100:       dx(b) = 0,   q[i] = 0  (127/amax must be finite);
 *   otherwise:           dx(b) = amax / 127, id = 127 / amax (each one
 *                        f32 division), q[i] = nearbyint(x[i] * id) with
 *                        ties to even (the default rounding mode), |q| <=
 *                        127.
 * Then, with qw and dw the weight block's int8 quants and f16 scale:
 *   acc = +0.0f;
 *   for b = 0, 1, ..., K/32 - 1 in increasing order:
 *       s = f32(dw(n,b)) * dx(m,b);                         (one rounding)
 *       p = sum_{i=32b}^{32b+31} qw[i] * q[i];       (exact integer, |p| <=
 *                                                     32 * 128 * 127 < 2^24)
 *       acc = fmaf(s, (float)p, acc);                  ((float)p exact)
 *   y[m][n] = acc.
 * One integer per block (llama.cpp's scalar order too) keeps the float work
 * to one fma per weight row and block: a vector form holds 16 weight rows'
 * block sums in one register (the R16 layout below) instead of 8 group
 * sums of one row, and the decode kernel does a quarter of the
 * instructions per weight byte. Error bound against exact arithmetic on
 * the same quants: |y - exact| <= g(K/32 + 1) * sum_b |f32(dw) dx p_b|.
 * The quantization of x adds at most dx(b)/2 * sum_i |wv| per block
 * against the float x.
 *
 * The other block-quantized types (Q4_0, Q4_1, Q5_0, Q5_1, Q2_K to Q6_K,
 * IQ4_NL, IQ4_XS) are laid out and reduced as lib/kernels/quants.h says,
 * one table of them there. Like Q8_0 they multiply activations quantized
 * to 8 bits, for the same reason: integer dot products are exact, so the
 * bulk of the work has no order to fix and every path gives the same bits
 * cheaply, with one or two fmas per weight block in block order. x is
 * quantized once per call in each format the weights of the call need:
 * the rule above in blocks of 32 (FX_XQ_32, the 32-element types) or 256
 * (FX_XQ_256, the K-quants and IQ4_XS, whose scales come per 256).
 * Kept in F32, x would cap them at the float kernels' fma rate plus the
 * unpacking: measured on the 246M model (Zen 4, 2 threads), 128-token
 * prefill ran 940-1070 tok/s on Q4_K_M weights against 360-490 on F32
 * weights, whose kernels are bound by exactly that rate
 * (docs/perf/NOTES.md, 2026-12-05).
 */
#ifndef FX_KERNELS_H
#define FX_KERNELS_H

#include <string.h>

#include "../core/core.h"

/* ---- weight types (values are ggml's type ids, as stored in GGUF) ---- */

typedef enum fx_wtype {
    FX_WTYPE_F32 = 0,   /* wv = the float */
    FX_WTYPE_F16 = 1,   /* wv = the half widened (exact) */
    FX_WTYPE_Q4_0 = 2,  /* the block-quantized types: quants.h */
    FX_WTYPE_Q4_1 = 3,
    FX_WTYPE_Q5_0 = 6,
    FX_WTYPE_Q5_1 = 7,
    FX_WTYPE_Q8_0 = 8,  /* integer dots on quantized x (see the top) */
    FX_WTYPE_Q2_K = 10,
    FX_WTYPE_Q3_K = 11,
    FX_WTYPE_Q4_K = 12,
    FX_WTYPE_Q5_K = 13,
    FX_WTYPE_Q6_K = 14,
    FX_WTYPE_IQ4_NL = 20,
    FX_WTYPE_IQ4_XS = 23,
    FX_WTYPE_BF16 = 30, /* wv = the bfloat16 widened (exact) */
    /* Not ggml types (no file can declare them): weights repacked at load
     * into the order the kernels read them, the same bytes per row and the
     * same arithmetic as the type they come from. Q8_0 in 16-row tiles
     * (fx_q8_0_repack_r16); F32, F16 and BF16 in 12-row tiles
     * (fx_float_repack_r12: 0x100 + the type's id). */
    FX_WTYPE_F32_R12 = 0x100,
    FX_WTYPE_F16_R12 = 0x101,
    FX_WTYPE_Q8_0_R16 = 0x110,
    FX_WTYPE_BF16_R12 = 0x11e
} fx_wtype;

/* A block type of quants.h (Q4_0 to IQ4_XS) with this bit set: the same
 * bytes per row and the same arithmetic in 16-row groups (quants.h,
 * fx_qr16_repack), the form the AVX-512 kernels read without transposing.
 * A flag, not a type of its own: Q4_K in 16-row groups is
 * FX_WTYPE_Q4_K | FX_WTYPE_QR16. */
#define FX_WTYPE_QR16 0x200

static inline bool fx_wtype_is_qr16(fx_wtype t) {
    return ((unsigned)t & FX_WTYPE_QR16) != 0;
}

static inline fx_wtype fx_wtype_qr16_base(fx_wtype t) {
    return (fx_wtype)((unsigned)t & ~(unsigned)FX_WTYPE_QR16);
}

/* The float type an R12 type repacks, or t itself. */
static inline fx_wtype fx_wtype_unpacked(fx_wtype t) {
    switch (t) {
    case FX_WTYPE_F32_R12: return FX_WTYPE_F32;
    case FX_WTYPE_F16_R12: return FX_WTYPE_F16;
    case FX_WTYPE_BF16_R12: return FX_WTYPE_BF16;
    default: return t;
    }
}

static inline bool fx_wtype_is_r12(fx_wtype t) {
    return t == FX_WTYPE_F32_R12 || t == FX_WTYPE_F16_R12 ||
           t == FX_WTYPE_BF16_R12;
}

#define FX_QK8_0 32 /* elements per Q8_0 block */

/* ggml's block_q8_0: 34 bytes, no padding (2-byte alignment). */
typedef struct fx_block_q8_0 {
    uint16_t d;             /* scale, IEEE half */
    int8_t qs[FX_QK8_0];    /* quants */
} fx_block_q8_0;

/* Bytes one row of k elements of type t occupies, or 0 if t is not
 * supported or k is not allowed for it (a block type needs whole blocks:
 * Q8_0 and the 32-element types k % 32 == 0, the K-quants and IQ4_XS
 * k % 256 == 0). */
size_t fx_wtype_row_bytes(fx_wtype t, size_t k);
const char *fx_wtype_name(fx_wtype t);

/* ---- Q8_0 in 16-row tiles (FX_WTYPE_Q8_0_R16) ----
 *
 * Why: a decode step reads every weight once, and how many instructions
 * the kernel spends per weight byte decides whether one core keeps up
 * with its share of the memory bandwidth. In this layout a 64-byte line
 * holds the same 4 quants of 16 rows: one vpdpbusd against 4 bytes of x
 * broadcast adds them into 16 rows' block sums at once, and a block of
 * 16 rows costs 8 loads, 8 vpdpbusd and one fma, few enough to keep up
 * with a read pass of the same bytes.
 *
 * Layout, for N rows of K elements (B = K / 32 blocks): rows in tiles of
 * 16 (the last tile has R = N mod 16 rows if that is not 0), tile t at
 * byte 16 t * B * 34, the same offset row 16 t has in the GGUF layout, so
 * the matrix keeps its size. Within a tile of R rows, blocks in pairs
 * (the last group has one block when B is odd); the group of blocks 2g
 * and 2g+1 at tile + 2g * R * 34 holds:
 *   for each block i of the group, for each row r: the f16 scale (2
 *       bytes) -- first, so the stream reaches them before the quants;
 *   then for each block i, for each j = 0..7, for each row r: 4 bytes,
 *       the row's quants 4j..4j+3 of the block, each stored as q ^ 0x80
 *       (q + 128 as an unsigned byte: the operand vpdpbusd wants).
 * A full tile's group is 64 bytes of scales and 16 lines of quants (17
 * lines, each aligned when the matrix is and B is even).
 * fx_q8_r16_at gives any (row, block)'s quants and scale. */
#define FX_R16_ROWS 16
#define FX_R16_GROUP 2

/* dst (same size as src, not overlapping) = n rows of k elements of Q8_0
 * at src in the layout above. k % 32 == 0, else FX_ERR_INVALID_ARG. */
fx_status fx_q8_0_repack_r16(void *dst, const void *src, size_t n, size_t k);

/* Whether the kernels stream type t faster repacked into its R16 form:
 * Q8_0 (the float types have their own tiles, below). */
bool fx_kernels_prefer_r16(fx_wtype t);

/* Whether block type t (quants.h) with rows of k elements runs faster in
 * 16-row groups (FX_WTYPE_QR16) on this CPU: where the AVX-512 VNNI
 * kernels exist, or AVX2 ones for t (Q4_0, Q4_K, Q5_K, Q6_K, IQ4_XS;
 * qdot_avx2_r16.c, and from 16 x rows qdot_avx2_r16_wide.c, which
 * decodes each block once for all of them), which read the groups
 * with plain loads; other ISAs and types read them a row at a time,
 * correct but slow. */
bool fx_kernels_prefer_qr16(fx_wtype t, size_t k);

/* dst (same size as src, not overlapping) = n rows of k elements of block
 * type t in 16-row groups (quants.h gives the layout). FX_ERR_INVALID_ARG
 * where the layout does not take t or k (fx_kernels_prefer_qr16 is false
 * for those). */
fx_status fx_qr16_repack(void *dst, const void *src, fx_wtype t, size_t n,
                         size_t k);

/* Where row n's block b lives in an R16 matrix of n_rows rows and nb
 * blocks per row, as byte offsets from its start: quants 4j..4j+3 (each
 * q ^ 0x80) at *q + j * *stride, the f16 scale at *d. */
static inline void fx_q8_r16_at(size_t n_rows, size_t nb, size_t n, size_t b,
                                size_t *q, size_t *d, size_t *stride) {
    const size_t t = n / FX_R16_ROWS, r = n % FX_R16_ROWS;
    const size_t left = n_rows - t * FX_R16_ROWS;
    const size_t rows = left < FX_R16_ROWS ? left : FX_R16_ROWS;
    const size_t g = b / FX_R16_GROUP * FX_R16_GROUP, i = b - g;
    const size_t gb = nb - g < FX_R16_GROUP ? nb - g : FX_R16_GROUP;
    const size_t group =
        (t * FX_R16_ROWS * nb + g * rows) * sizeof(fx_block_q8_0);
    *d = group + (i * rows + r) * 2;
    *q = group + gb * rows * 2 + i * FX_QK8_0 * rows + 4 * r;
    *stride = 4 * rows;
}

/* ---- F32, F16 and BF16 in 12-row tiles (FX_WTYPE_*_R12) ----
 *
 * Why: a one-row matmul keeps 12 rows' dot products in flight (the fma
 * chains of kernels.h's order need that many to hide their latency), and
 * read as rows that is 12 streams of K elements each -- 2 KB for an F16
 * row of K = 1024 -- too short for the hardware prefetcher to get going,
 * so a core waited on memory with half the bandwidth unused.
 * In this layout the same 12 rows are one stream; a task of one or two x
 * rows reads two tiles half the matrix apart at once (matmul_avx512.c,
 * dual12): two streams.
 * F32 goes into R12 only on Zen 5 (fx_kernels_prefer_r12), where with a
 * tile prefetch of its own and four x rows a pass it won from one row to
 * 32 and kept even at prefill (matmul_avx512.c, range_small_r12).
 * Elsewhere F32 stays in rows.
 *
 * Layout, for N rows of K elements (K % 8 == 0, N even): rows in tiles of
 * 12 (the last tile has R = N mod 12 rows if that is not 0), tile t at
 * the byte where row 12 t starts in the row layout, so the matrix keeps
 * its size. A tile of R rows is K / 8 chunks of R * 8 elements: chunk c
 * holds row r's elements 8c..8c+7 at element r * 8 of the chunk. So a
 * pair of rows (2p, 2p+1) is 16 consecutive elements of each chunk, one
 * zmm of the AVX-512 tile, and the chunks follow one another. */
#define FX_R12_ROWS 12

/* Byte offset of row n's elements 8c..8c+7 in an R12 matrix of n_rows
 * rows of k elements of esize bytes. */
static inline size_t fx_float_r12_at(size_t n_rows, size_t k, size_t esize,
                                     size_t n, size_t c) {
    const size_t t = n / FX_R12_ROWS, r = n % FX_R12_ROWS;
    const size_t left = n_rows - t * FX_R12_ROWS;
    const size_t rows = left < FX_R12_ROWS ? left : FX_R12_ROWS;
    return (t * FX_R12_ROWS * k + (c * rows + r) * 8) * esize;
}

/* dst (same size as src, not overlapping) = n rows of k elements of type
 * t (F32, F16 or BF16) at src in the layout above. n even and k % 8 == 0,
 * else FX_ERR_INVALID_ARG. */
fx_status fx_float_repack_r12(void *dst, const void *src, fx_wtype t,
                              size_t n, size_t k);

/* Whether this CPU's kernels stream float type t (F32, F16, BF16) faster
 * in its R12 form: where the AVX-512 path exists, which reads it in one
 * stream; the AVX2 and portable paths
 * read R12 element by element, correct but slow. */
bool fx_kernels_prefer_r12(fx_wtype t);

/* ---- thread pool ---- */

/* A fixed set of threads created once; fx_pool_run hands them tasks. With
 * n_threads == 1 no thread is ever created and run() is a plain loop.
 * Between runs, threads poll for a while (1-100 us, adapted to how long
 * the waits turn out to be: pool.c) before sleeping on a condition
 * variable, so back-to-back matmuls cost a few microseconds of hand-off
 * instead of a futex wake each. */
typedef struct fx_pool fx_pool;

/* task: 0..n_tasks-1; thread: 0..n_threads-1 (0 is the calling thread),
 * so fn can index per-thread scratch. Which thread runs which task varies
 * from run to run: results must not depend on it. */
typedef void (*fx_pool_fn)(void *ctx, size_t task, unsigned thread);

fx_status fx_pool_create(const fx_alloc *alloc, unsigned n_threads,
                         fx_pool **out, fx_error *err);
void fx_pool_free(fx_pool *pool);
unsigned fx_pool_threads(const fx_pool *pool);
/* How many waits (a worker's for a run, the caller's for the end of one)
 * have ended in a sleep since create: each costs a wake-up. */
uint64_t fx_pool_sleeps(const fx_pool *pool);
/* Runs fn for every task, the caller taking tasks too, and returns when all
 * are done. Not reentrant: a run from inside fn returns FX_ERR_INVALID_ARG.
 * One caller at a time. */
fx_status fx_pool_run(fx_pool *pool, fx_pool_fn fn, void *ctx,
                      size_t n_tasks);
/* The tasks lo..hi-1 that thread starts a run of n_tasks with (pool.c,
 * "Claiming"); it may steal others' later. */
void fx_pool_share_of(const fx_pool *pool, size_t n_tasks, unsigned thread,
                      size_t *lo, size_t *hi);
/* A hint: thread's share of a coming run reads addr..addr+bytes first.
 * While idle -- waiting for a run, or for the others to finish one --
 * the thread prefetches it (thread 1 also thread 0's, which runs the
 * serial work between runs), until the next fx_pool_prefetch for that
 * thread replaces it. Never dereferenced: any address is safe. */
void fx_pool_prefetch(fx_pool *pool, unsigned thread, const void *addr,
                      size_t bytes);
/* The request fx_pool_prefetch last made for thread (for tests); false if
 * there is no such thread or the request is being replaced. */
bool fx_pool_prefetch_request(const fx_pool *pool, unsigned thread,
                              const void **addr, size_t *bytes);

/* ---- kernels context: ISA choice, the pool, per-thread scratch ---- */

typedef enum fx_isa {
    FX_ISA_AUTO = 0,     /* the best this CPU supports */
    FX_ISA_PORTABLE = 1, /* plain C, fmaf */
    FX_ISA_AVX2 = 2,     /* AVX2 + FMA + F16C; FX_ERR_UNSUPPORTED if absent */
    FX_ISA_AVX512 = 3    /* AVX2's set + AVX-512 F/BW/VL/DQ; implies every
                            AVX2 feature (code may use AVX2 forms too;
                            Q8_0 uses VNNI where present, else the AVX2
                            form); FX_ERR_UNSUPPORTED if absent */
} fx_isa;

/* Where FX_MATMUL_FAST hands F32 matmuls to OpenBLAS.
 *
 * OpenBLAS is not linked: a context loads it (dlopen "libopenblas.so.0",
 * else "libopenblas.so"; Debian: libopenblas0-pthread) at its first
 * FX_MATMUL_FAST call with F32 weights and M >= fast_min_m, or at
 * fx_kernels_fast_uses_blas, never at create, so a context that is never
 * given the flag starts no OpenBLAS thread. Its pthreads build starts its
 * workers then (OPENBLAS_NUM_THREADS of them, besides n_threads) and, once
 * the last context holding it is freed, is unloaded and joins them; its
 * OpenMP build, whose threads cannot be stopped, stays loaded (matmul.c).
 * Where AUTO decides OpenBLAS would not be faster it is closed at once.
 * If OpenBLAS cannot be loaded, or lacks cblas_sgemm, the fast flag
 * silently computes the deterministic bits: no error, no message. */
typedef enum fx_fast_blas {
    /* Only where OpenBLAS is expected to be faster than the deterministic
     * kernel: when this context has no AVX-512 path, or OpenBLAS runs its
     * own AVX-512 kernels (core SkylakeX, Cooperlake, SapphireRapids):
     * the AVX-512 deterministic kernel beats OpenBLAS's AVX2 ones. */
    FX_FAST_BLAS_AUTO = 0,
    FX_FAST_BLAS_ALWAYS = 1 /* every eligible call (benchmarks, tests) */
} fx_fast_blas;

typedef struct fx_kernels_params {
    unsigned n_threads;  /* >= 1; 1 creates no threads. Default 1. */
    fx_isa isa;          /* default FX_ISA_AUTO */
    size_t fast_min_m;   /* FX_MATMUL_FAST uses OpenBLAS from this M up
                            (default 64: below it our kernel is
                            faster) */
    fx_fast_blas fast_blas; /* default FX_FAST_BLAS_AUTO */
    uint32_t q8_prefetch_rows; /* Q8_0 R16 tiles (AVX-512) are
                                  prefetched in software for a call of m
                                  x rows when bit min(m, 9) - 1 is set
                                  (bit 8: every m over 8; a value with
                                  none of bits 0-8: never); 0 (the
                                  default): the tuned choice for this
                                  CPU (matmul_q8_avx512.c). Any value
                                  gives the same bits. */
    size_t r12_prefetch_bytes; /* one- and two-row R12 (F16, BF16) tasks
                                  on AVX-512 prefetch each stream this
                                  many bytes ahead; 0 (the default): the
                                  tuned choice for this CPU
                                  (matmul_avx512.c), SIZE_MAX: never.
                                  Same bits either way. */
    size_t x_block_bytes; /* the AVX2 float tiles above 4 x rows take x
                             in blocks of rows of at most this many bytes
                             (at least 4 rows); 0 (the default):
                             FX_MM_X_BLOCK_BYTES (matmul_avx2.c). Same
                             bits at any value. */
} fx_kernels_params;

void fx_kernels_params_init(fx_kernels_params *p);

typedef struct fx_kernels fx_kernels;

fx_status fx_kernels_create(const fx_alloc *alloc,
                            const fx_kernels_params *params,
                            fx_kernels **out, fx_error *err);
void fx_kernels_free(fx_kernels *kc);
/* The ISA actually chosen (never FX_ISA_AUTO). */
fx_isa fx_kernels_isa(const fx_kernels *kc);
/* The context's pool, for other per-step work (attention) to share. */
fx_pool *fx_kernels_pool(fx_kernels *kc);
/* Whether FX_MATMUL_FAST reaches OpenBLAS in this context (see
 * fx_fast_blas); when false it computes exactly the deterministic bits.
 * Loads OpenBLAS if the context has not tried yet (as a fast matmul
 * would), so it is not const, and is called like fx_matmul: one thread at
 * a time per context. */
bool fx_kernels_fast_uses_blas(fx_kernels *kc);

/* ---- matmul ---- */

/* Opt out of batch invariance: F32 weights with M >= fast_min_m go to
 * OpenBLAS cblas_sgemm (its own threads, OPENBLAS_NUM_THREADS) where
 * fx_kernels_params.fast_blas says so and OpenBLAS can be loaded (the
 * first such call loads it: fx_fast_blas). A row's result then changes in
 * the last bits with M and the thread count. Other weight types ignore
 * the flag. */
#define FX_MATMUL_FAST 0x1u

/* y[m][n] (row stride ldy) = sum_k x[m][k] (row stride ldx) * w[n][k], for
 * m < M, n < N, k < K, in the order at the top of this file. w holds N rows
 * of fx_wtype_row_bytes(wtype, K) bytes each, as GGUF stores a [K, N]
 * tensor (FX_WTYPE_Q8_0_R16: the same bytes repacked). No
 * allocation (but the loader's, when a first FX_MATMUL_FAST call loads
 * OpenBLAS); safe to call from one thread at a time per context. y must
 * not overlap x or w. FX_ERR_TOO_LARGE: a K too long for the
 * context's activation buffer (K > ~3.3 million with Q8_0 or another
 * block type, less when one call needs both activation formats). */
fx_status fx_matmul(fx_kernels *kc, const float *x, size_t ldx, size_t m,
                    const void *w, fx_wtype wtype, size_t n, size_t k,
                    float *y, size_t ldy, unsigned flags);

/* One weight matrix of an fx_matmul_multi call and its output. */
typedef struct fx_mm_out {
    const void *w;      /* n rows of fx_wtype_row_bytes(wtype, K) bytes */
    fx_wtype wtype;
    size_t n;
    float *y;           /* [m][ldy] */
    size_t ldy;
} fx_mm_out;

#define FX_MM_MAX_OUTS 4

/* Several matmuls on the same x (Q, K and V; gate and up) as one pool
 * run: one hand-off to the threads instead of one per weight, and x
 * quantized once for the block types. Every output is bit for bit what fx_matmul
 * gives for its weight alone. At most FX_MM_MAX_OUTS outputs; an output
 * with n == 0 is skipped. */
fx_status fx_matmul_multi(fx_kernels *kc, const float *x, size_t ldx,
                          size_t m, size_t k, const fx_mm_out *outs,
                          size_t n_outs, unsigned flags);

/* A hint for the fx_matmul_multi(kc, x, ldx, m, k, outs, n_outs) that
 * comes next: each thread prefetches the start of its share of those
 * weights while it is idle until then (fx_pool_prefetch). Between two
 * matmuls of a decode step the threads wait for each other and for the
 * serial work (norms, RoPE, attention, sampling); this keeps the memory
 * busy meanwhile. Ignored with one thread; nothing is read. */
void fx_matmul_prefetch(fx_kernels *kc, size_t m, size_t k,
                        const fx_mm_out *outs, size_t n_outs);

/* ---- number formats ---- */

/* A float's IEEE bits, and the float with these bits. */
static inline uint32_t fx_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static inline float fx_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Exact. NaN stays NaN (quieted). */
float fx_f16_to_f32(uint16_t h);
/* Round to nearest, ties to even, with subnormals; overflow to inf; NaN to
 * a quiet NaN of the same sign. */
uint16_t fx_f32_to_f16(float f);
float fx_bf16_to_f32(uint16_t h);
uint16_t fx_f32_to_bf16(float f);

void fx_f16_to_f32_row(float *out, const uint16_t *in, size_t n);
void fx_f32_to_f16_row(uint16_t *out, const float *in, size_t n);
void fx_bf16_to_f32_row(float *out, const uint16_t *in, size_t n);
void fx_f32_to_bf16_row(uint16_t *out, const float *in, size_t n);

/* As ggml's reference quantizer: per block of 32, d = amax / 127,
 * q = roundf(x * (1/d)) (0 if d == 0), d stored as half. n % 32 == 0. */
fx_status fx_quantize_q8_0(fx_block_q8_0 *out, const float *in, size_t n);
/* out[i] = f32(d) * q[i], exactly (an 11-bit significand times an 8-bit
 * integer fits in 24 bits). */
fx_status fx_dequantize_q8_0(float *out, const fx_block_q8_0 *in, size_t n);

/* Any weight row to f32: k elements of row. Exact for the float types
 * and Q8_0; the other block types in ggml's dequantize_row_* float
 * operations (quants.h). */
fx_status fx_wtype_row_to_f32(float *out, const void *row, fx_wtype t,
                              size_t k);

/* ---- elementwise and per-row kernels (fixed order; out may alias x) ---- */

/* ss = sum_i x[i]*x[i] in double (each square exact), in 8 lanes (lane
 * i % 8, i increasing), then ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7));
 * s = 1 / sqrtf((float)(ss / n) + eps); out[i] = (x[i] * s) * w[i]
 * (w may be NULL: no weight). */
void fx_rmsnorm(float *out, const float *x, const float *w, size_t n,
                float eps);

/* m = max x; e[i] = fx_exp_le0(x[i] - m); the e summed in double in 8
 * lanes (lane i % 8, i increasing), then ((l0+l4)+(l2+l6)) +
 * ((l1+l5)+(l3+l7)); x[i] = e[i] * (float)(1 / sum). -inf entries give 0;
 * all -inf gives 0s. fx_softmax is the portable form; fx_softmax_for(isa)
 * returns the fastest form for an ISA the CPU has, every form giving the
 * same bits. */
void fx_softmax(float *x, size_t n);
typedef void (*fx_softmax_fn)(float *x, size_t n);
fx_softmax_fn fx_softmax_for(fx_isa isa);
/* e^d for d <= 0, within 2 ulp of the true value, 0 below -87 (where it
 * would be at most 1.7e-38): Cody-Waite reduction by ln 2 rounded to
 * nearest even, a degree-7 polynomial in fmaf, scaled by 2^n. One fixed
 * sequence of float operations, so the vector forms match it bit for
 * bit (unlike libm's expf, whose ifunc variants may differ). */
float fx_exp_le0(float d);

/* silu(x) = x * sigmoid(x): with e = fx_exp_le0(-|x|), x * (1 / (1 + e))
 * for x >= 0 and x * (e / (1 + e)) below (NaN stays NaN). */
void fx_silu(float *out, const float *x, size_t n);
/* out[i] = silu(gate[i]) * up[i]: the SwiGLU feed-forward's middle.
 * fx_swiglu_for(isa): the fastest form for an ISA the CPU has, every form
 * giving the same bits. */
void fx_swiglu(float *out, const float *gate, const float *up, size_t n);
typedef void (*fx_swiglu_fn)(float *out, const float *gate, const float *up,
                             size_t n);
fx_swiglu_fn fx_swiglu_for(fx_isa isa);
/* out[i] = gelu(gate[i]) * up[i] with ggml's tanh GELU, 0.5 x (1 +
 * tanh(sqrt(2/pi) x (1 + 0.044715 x^2))) left to right in float, tanh
 * from fx_exp_le0 (ops.c): the GeGLU feed-forward of Gemma. Exact tanh,
 * not llama.cpp's f16 table. fx_geglu_for(isa) as fx_swiglu_for. */
void fx_geglu(float *out, const float *gate, const float *up, size_t n);
fx_swiglu_fn fx_geglu_for(fx_isa isa);
/* x[i] = cap * tanh(x[i] * (1 / cap)), the same tanh: Gemma 2's soft cap
 * of attention scores and logits. fx_softcap_for(isa): every form gives
 * the same bits. */
void fx_softcap(float *x, size_t n, float cap);
typedef void (*fx_softcap_fn)(float *x, size_t n, float cap);
fx_softcap_fn fx_softcap_for(fx_isa isa);
/* out[i] = a[i] + b[i]. */
void fx_add(float *out, const float *a, const float *b, size_t n);

/* ---- RoPE ---- */

typedef enum fx_rope_mode {
    FX_ROPE_NORMAL = 0, /* llama: pairs (x[2i], x[2i+1]) */
    FX_ROPE_NEOX = 2    /* neox/qwen2: pairs (x[i], x[i + n_rot/2]) */
} fx_rope_mode;

/* For one position: cs[2i] = (float)cos(theta_i) * attn, cs[2i+1] =
 * (float)sin(theta_i) * attn, for i < n_rot/2, theta_i = pos * scale *
 * base^(-2i/n_rot) / factor[i] computed in double and rounded once to
 * float (scale: linear RoPE scaling, 1 / rope.scaling.factor, else 1;
 * factor: Llama 3 rope_freqs or LongRoPE's, NULL for all 1; attn:
 * LongRoPE's attention factor, else 1). Computed once per token and
 * shared by every head and layer. n_rot must be even, base, scale, attn
 * and factors > 0. */
fx_status fx_rope_cache(float *cs, int64_t pos, size_t n_rot, float freq_base,
                        float freq_scale, float attn_factor,
                        const float *freq_factors);
/* Rotates the first n_rot dims of each of n_head heads of x ([n_head]
 * [head_dim], contiguous) by cs; dims n_rot..head_dim-1 are untouched:
 *   a' = a*c - b*s;  b' = a*s + b*c   (float, no contraction). */
fx_status fx_rope_apply(float *x, size_t n_head, size_t head_dim,
                        size_t n_rot, const float *cs, fx_rope_mode mode);

#endif /* FX_KERNELS_H */
