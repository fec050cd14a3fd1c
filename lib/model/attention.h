/* Private to lib/model: the inner loops of attention (see attention.c). */
#ifndef FX_MODEL_ATTENTION_H
#define FX_MODEL_ATTENTION_H

#include "../kernels/kernels.h"

/* Heads that share a KV head (grouped-query attention) go through
 * together, so each key and value row is loaded once for all of them. The
 * results are those of one head at a time, bit for bit. */
typedef struct fx_attn_kernels {
    /* out[h * out_ld + j] = dot(q_h, k_j) * scale for heads h < nh (q_h =
     * q + h * hd) and the n keys k_j = k + j * stride (floats), each of hd
     * elements. */
    void (*scores)(float *out, size_t out_ld, const float *q, uint32_t nh,
                   const float *k, size_t stride, uint32_t n, uint32_t hd,
                   float scale);
    /* For heads h < nh (out_h = out + h * hd, p_h = p + h * p_ld):
     * out_h[i] = fmaf(p_h[j], v_j[i], out_h[i]) for j = 0..n-1 in order,
     * i < hd, v_j = v + j * stride. */
    void (*weighted_sum)(float *out, const float *p, size_t p_ld, uint32_t nh,
                         const float *v, size_t stride, uint32_t n,
                         uint32_t hd);
    /* The same over keys / values stored as halves (an F16 KV cache):
     * widening is exact, so the bits are those of scores and weighted_sum
     * on the rows fx_f16_to_f32 gives. stride counts halves. */
    void (*scores_f16)(float *out, size_t out_ld, const float *q, uint32_t nh,
                       const uint16_t *k, size_t stride, uint32_t n,
                       uint32_t hd, float scale);
    void (*weighted_sum_f16)(float *out, const float *p, size_t p_ld,
                             uint32_t nh, const uint16_t *v, size_t stride,
                             uint32_t n, uint32_t hd);
    /* Each head's scores over its positions: fx_softmax_for (kernels.h). */
    fx_softmax_fn softmax;
} fx_attn_kernels;

/* Picks the AVX2 forms when isa is FX_ISA_AVX2 or FX_ISA_AVX512, and the
 * AVX-512 weighted sums with FX_ISA_AVX512, for F32 and F16 alike; every
 * form gives the same bits (tests/test_attention.c). */
void fx_attn_kernels_init(fx_attn_kernels *ak, fx_isa isa);

#endif
