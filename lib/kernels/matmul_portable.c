/*
 * The portable matmul path: the definition in kernels.h, written
 * literally, for F32, F16 and BF16 (Q8_0 is fx_mm_q8_portable, in
 * matmul_q8.c). Every ISA path must give exactly these bits.
 */
#include "matmul_impl.h"

#include <math.h>
#include <string.h>

/* The weight whose bytes start at p, as an f32 (exact). */
static float weight_value(fx_wtype t, const uint8_t *p) {
    switch (fx_wtype_unpacked(t)) {
    case FX_WTYPE_F16: {
        uint16_t h;
        memcpy(&h, p, 2);
        return fx_f16_to_f32(h);
    }
    case FX_WTYPE_BF16: {
        uint16_t h;
        memcpy(&h, p, 2);
        return fx_bf16_to_f32(h);
    }
    case FX_WTYPE_F32:
    default: {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    }
}

/* Also the AVX2 form for R12 weights, which it reads element by element
 * through fx_float_r12_at: models repack floats only where the AVX-512
 * path reads them (fx_kernels_prefer_r12). */
void fx_mm_range_portable(const fx_mm_job *job, size_t n0, size_t n1,
                          float *scratch) {
    (void)scratch;
    const bool r12 = fx_wtype_is_r12(job->type);
    const size_t esize = fx_wtype_unpacked(job->type) == FX_WTYPE_F32 ? 4 : 2;
    for (size_t m = 0; m < job->m; m++) {
        const float *x = job->x + m * job->ldx;
        for (size_t n = n0; n < n1; n++) {
            const uint8_t *row = job->w + n * job->row_bytes;
            float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            for (size_t k = 0; k < job->k; k++) {
                const uint8_t *at =
                    r12 ? job->w +
                              fx_float_r12_at(job->n, job->k, esize, n, k / 8) +
                              (k % 8) * esize
                        : row + k * esize;
                acc[k % 8] = fmaf(x[k], weight_value(job->type, at),
                                  acc[k % 8]);
            }
            job->y[m * job->ldy + n] = ((acc[0] + acc[4]) + (acc[2] + acc[6])) +
                                       ((acc[1] + acc[5]) + (acc[3] + acc[7]));
        }
    }
}
