/*
 * Private to the two AVX2 files of the block-quantized types: the table
 * of qdot_avx2_k.c (K-quants and IQ4_XS on FX_XQ_256 activations), which
 * fx_qmm_avx2 (qdot_avx2.c) consults for the types it does not do itself.
 */
#ifndef FX_KERNELS_QDOT_AVX2_H
#define FX_KERNELS_QDOT_AVX2_H

#include "quants.h"

/* NULL for the 32-element types and where AVX2 is not compiled in. */
fx_mm_range_fn fx_qmm_avx2_k(fx_wtype t);

/* One register tile: up to 4 x rows (xr: their quantized rows, yr: their
 * outputs from column n) against weight rows n .. n + nr - 1 (nr <= 4). */
typedef void (*fx_qtile_fn)(const fx_mm_job *job, size_t n, size_t nr,
                            const uint8_t *const *xr, float *const *yr);
/* Columns [n0, n1) of every row, tiles[mr - 1] doing mr x rows at once
 * (AVX2 builds only). */
void fx_qavx2_rows_range(const fx_mm_job *job, size_t n0, size_t n1,
                         const fx_qtile_fn tiles[4]);

#endif /* FX_KERNELS_QDOT_AVX2_H */
