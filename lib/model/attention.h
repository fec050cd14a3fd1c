/* Private to lib/model: the inner loops of attention (see attention.c). */
#ifndef FX_MODEL_ATTENTION_H
#define FX_MODEL_ATTENTION_H

#include "../kernels/kernels.h"

typedef struct fx_attn_kernels {
    float (*dot)(const float *q, const float *k, uint32_t n);
    void (*axpy)(float *out, float a, const float *v, uint32_t n);
} fx_attn_kernels;

/* Picks the AVX2 forms when isa is FX_ISA_AVX2; both give the same bits. */
void fx_attn_kernels_init(fx_attn_kernels *ak, fx_isa isa);

#endif
