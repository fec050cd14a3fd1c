/*
 * Private to lib/kernels: what the ISA-specific matmul files share with
 * matmul.c. Not part of the layer's interface (that is kernels.h).
 */
#ifndef FX_KERNELS_MATMUL_IMPL_H
#define FX_KERNELS_MATMUL_IMPL_H

#include "kernels.h"

#include <math.h>

struct fx_mm_job;
/* Computes columns [n0, n1) of every row of y. scratch: FX_MM_SCRATCH_FLOATS
 * floats, 32-byte aligned, owned by the calling thread. */
typedef void (*fx_mm_range_fn)(const struct fx_mm_job *job, size_t n0,
                               size_t n1, float *scratch);

/* One matmul call, as every path sees it. */
typedef struct fx_mm_job {
    const float *x;      /* [m][ldx] */
    size_t ldx, m;
    const uint8_t *w;    /* [n][row_bytes] */
    fx_wtype type;
    size_t row_bytes, n, k;
    float *y;            /* [m][ldy] */
    size_t ldy;
    /* Q8_0 and the block types of quants.h: x quantized by an fx_xq_fn
     * in the type's format (FX_XQ_32 below, FX_XQ_256 in quants.h), row
     * stride xq_ld bytes; NULL for the float types. */
    const uint8_t *xq;
    size_t xq_ld;
    /* Q8_0 R16 on AVX-512: for which numbers of x rows the tiles are
     * prefetched in software (fx_kernels_params.q8_prefetch_rows). */
    uint32_t q8_pf_rows;
    /* R12 two-stream tasks of F16 and BF16 on AVX-512: how far ahead each
     * stream is prefetched in software, bytes; 0: not at all
     * (fx_kernels_params.r12_prefetch_bytes). */
    size_t r12_pf_bytes;
    /* AVX2 float tiles above 4 x rows: x rows in blocks of at most this
     * many bytes (fx_kernels_params.x_block_bytes, never 0). */
    size_t x_block_bytes;
    /* A FX_WTYPE_QR16 job on an ISA without a kernel for it: the base
     * type's kernel, given one row at a time in the GGUF layout
     * (fx_qr16_range_rows). */
    fx_mm_range_fn qr16_rows;
} fx_mm_job;

/* Blocking of the AVX-512 large-M path (the AVX2 path streams at every M,
 * matmul_avx2.c says why). Tasks split N in FX_MM_NTASK columns; a
 * task's columns are done in blocks of FX_MM_NC, rows in blocks of
 * FX_MM_MC (all at once when K is one slab), K in slabs of FX_MM_KC512. For each (row block, slab) the W
 * panel is copied (W converted to f32, exactly) into aligned contiguous
 * scratch, so its loads never split a cache line; x is read in place, and
 * copied into a padded block only when the slab ends in a partial group
 * of 8 (K % 8 != 0). KC is a multiple of 8, so lane
 * k % 8 of a slab is lane k % 8 of the row: the 8-lane partial sums
 * carried between slabs are exactly the lanes of the single-pass
 * definition. (Q8_0 has its own paths and no slabs: matmul_q8*.c.) */
#ifndef FX_MM_NC
#define FX_MM_NC 96
#endif
#define FX_MM_NTASK FX_MM_NC

#ifndef FX_MM_MC
#define FX_MM_MC 128
#endif
/* The AVX-512 path's slab: K = 1024 in one slab (no partial sums carried
 * between slabs), its x block and panel still within a 1 MiB L2 per core
 * with MC = 128. */
#ifndef FX_MM_KC512
#define FX_MM_KC512 1024
#endif
/* Rows up to this go to the streaming small-M path. */
#define FX_MM_SMALL_M 8

/* NC rounded up to even: the AVX-512 panel stores columns in pairs. */
#define FX_MM_NC_EVEN (((size_t)FX_MM_NC + 1) & ~(size_t)1)

/* Per-thread scratch: the W panel [NC (even)][KC], the x block [MC][KC]
 * and the 8-lane partial sums [MC][NC][8] of a block between K slabs. */
#define FX_MM_SCRATCH_FLOATS (FX_MM_NC_EVEN * FX_MM_KC512 + \
                              (size_t)FX_MM_MC * FX_MM_KC512 + \
                              (size_t)FX_MM_MC * FX_MM_NC * 8)


void fx_mm_range_portable(const fx_mm_job *job, size_t n0, size_t n1,
                          float *scratch);
/* NULL where the AVX2 code is not compiled in (non-x86). */
fx_mm_range_fn fx_mm_avx2_range(void);
/* AVX2, FMA and F16C present (run-time probe, no state kept). */
bool fx_cpu_has_avx2(void);
/* NULL where the AVX-512 code is not compiled in. */
fx_mm_range_fn fx_mm_avx512_range(void);
/* Two column ranges of one job at once, [a0, a1) and [b0, b1), each
 * starting at a tile: up to FX_MM_DUAL_M x rows of an R12 job read them
 * as two streams (matmul_avx512.c); anything else is done range after
 * range. */
/* Up to this many x rows an R12 job's tasks are two chunks each (two
 * tiles at once: 2 x 2 x 6 accumulators at 2 rows). */
#define FX_MM_DUAL_M 2
typedef void (*fx_mm_dual_fn)(const fx_mm_job *job, size_t a0, size_t a1,
                              size_t b0, size_t b1, float *scratch);
/* NULL where the AVX-512 code is not compiled in. */
fx_mm_dual_fn fx_mm_avx512_dual(void);
/* The AVX2 set plus AVX-512 F, BW, VL and DQ, with the OS saving the zmm
 * state (run-time probe, no state kept). */
bool fx_cpu_has_avx512(void);

/* ---- Q8_0: integer dot products on quantized activations ----
 *
 * fx_matmul quantizes x once per call (kernels.h gives the rule) into a
 * buffer of the context; every Q8_0 path reads it from there. One row of
 * K elements (B = K / 32 blocks), 64-byte aligned:
 *   int8_t  q[K]     at 0       the quants
 *   int32_t nc[B]    at K       -128 * (sum of block b's 32 quants): the
 *                               correction that makes u8 x s8 dot products
 *                               (vpdpbusd) on weights offset by +128 exact
 *   float   d[B]     at K + 4B  the scales dx
 */
static inline size_t fx_xq_row_bytes(size_t k) {
    return (k + k / 4 + 63) & ~(size_t)63;
}

/* Blocks whose largest magnitude is below this quantize to zeros: 127 /
 * amax must stay finite, and no product of such an activation with a
 * weight reaches the float range that matters next to the rest of a row. */
#define FX_XQ_TINY 0x1p-100f

/* The scalar part of quantizing one block of activations, the same in
 * both formats (FX_XQ_32 and quants.h's FX_XQ_256) and every form: from
 * the largest |x| as bits (NaN bits above inf above every finite value)
 * to the scale d and the multiplier id. Returns false when the quants are
 * all zero (then d is 0 for a tiny block, NaN for one holding inf or
 * NaN). */
static inline bool fx_xq_scale(uint32_t amax_bits, float *d, float *id) {
    if (amax_bits >= 0x7f800000u) {
        *d = NAN;
        return false;
    }
    const float amax = fx_bits_f32(amax_bits);
    if (amax < FX_XQ_TINY) {
        *d = 0.0f;
        return false;
    }
    *d = amax / 127.0f;
    *id = 127.0f / amax;
    return true;
}

/* One block of n activations by the rule above, in plain C: q[0..n-1]
 * and the returned scale d. The portable FX_XQ_32 and FX_XQ_256
 * quantizers are this over blocks of 32 and 256. */
float fx_xq_block(const float *xb, size_t n, int8_t *q);

/* Quantizes rows [0, m) of x (row stride ldx) into xq (row stride ld). All
 * forms give the same bytes. */
typedef void (*fx_xq_fn)(const float *x, size_t ldx, size_t m, size_t k,
                         uint8_t *xq, size_t ld);
void fx_xq_portable(const float *x, size_t ldx, size_t m, size_t k,
                    uint8_t *xq, size_t ld);
/* NULL where the AVX2 code is not compiled in. */
fx_xq_fn fx_xq_avx2(void);

/* The Q8_0 matmul on job->xq. Portable: the definition, literally. */
void fx_mm_q8_portable(const fx_mm_job *job, size_t n0, size_t n1,
                       float *scratch);
/* AVX2 (maddubs) and AVX-512 VNNI (vpdpbusd) forms; NULL where not
 * compiled in. */
fx_mm_range_fn fx_mm_q8_avx2_range(void);
fx_mm_range_fn fx_mm_q8_avx512_range(void);
/* The default of fx_kernels_params.q8_prefetch_rows for this CPU
 * (matmul_q8_avx512.c says why). */
uint32_t fx_q8_r16_prefetch_rows(void);
/* The default of fx_kernels_params.x_block_bytes: 1 MiB, see
 * range_groups in matmul_avx2.c. */
#define FX_MM_X_BLOCK_BYTES ((size_t)1 << 20)

/* The default of fx_kernels_params.r12_prefetch_bytes for this CPU
 * (matmul_avx512.c says why); 0: none. */
size_t fx_r12_dual_prefetch_bytes(void);
/* fx_cpu_has_avx512() plus AVX512_VNNI. */
bool fx_cpu_has_avx512_vnni(void);

/* The CPU's family (CPUID leaf 1, base plus extended) if it is AMD's,
 * else 0: 0x19 Zen 3 and 4, 0x1a Zen 5. For tuning only, never for what
 * a path may execute (that is the feature bits above). */
unsigned fx_cpu_amd_family(void);

#endif /* FX_KERNELS_MATMUL_IMPL_H */
