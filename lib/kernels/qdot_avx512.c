/*
 * The block-quantized types' AVX-512 kernels (quants.h). This table has
 * no kernel yet: NULL is quants.h's "no kernel here", so matmul.c takes
 * the next ISA down, which gives the same bits.
 */
#include "quants.h"

fx_mm_range_fn fx_qmm_avx512(fx_wtype t) {
    (void)t;
    return NULL;
}
