/*
 * The block-quantized types' AVX2 kernels (quants.h). This table has no
 * kernel yet: NULL is quants.h's "no kernel here", so matmul.c takes the
 * portable one, which gives the same bits.
 */
#include "quants.h"

fx_mm_range_fn fx_qmm_avx2(fx_wtype t) {
    (void)t;
    return NULL;
}

fx_xq_fn fx_xq256_avx2(void) { return NULL; }
