/*
 * Per-row kernels. Each touches one row of one token, so none can depend
 * on the batch; the reductions (rmsnorm, softmax) are sequential in double,
 * which fixes their order and makes them more accurate than the f32 they
 * feed. These are O(n) next to the O(n^2) matmuls: clarity over speed.
 */
#include "kernels.h"

#include <math.h>

_Static_assert(sizeof(fx_block_q8_0) == 34, "block_q8_0 must be 34 bytes");

void fx_rmsnorm(float *out, const float *x, const float *w, size_t n,
                float eps) {
    if (n == 0) return;
    double ss = 0.0;
    for (size_t i = 0; i < n; i++) ss += (double)x[i] * (double)x[i];
    const float s = 1.0f / sqrtf((float)(ss / (double)n) + eps);
    for (size_t i = 0; i < n; i++) {
        float v = x[i] * s;
        out[i] = w ? v * w[i] : v;
    }
}

void fx_softmax(float *x, size_t n) {
    if (n == 0) return;
    float mx = -INFINITY;
    for (size_t i = 0; i < n; i++)
        if (x[i] > mx) mx = x[i];
    if (mx == -INFINITY) {
        /* Everything masked: no valid distribution; zeros, not NaN. */
        for (size_t i = 0; i < n; i++) x[i] = 0.0f;
        return;
    }
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        float e = expf(x[i] - mx);
        x[i] = e;
        sum += e;
    }
    const float inv = (float)(1.0 / sum);
    for (size_t i = 0; i < n; i++) x[i] *= inv;
}

static float silu1(float v) { return v / (1.0f + expf(-v)); }

void fx_silu(float *out, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = silu1(x[i]);
}

void fx_swiglu(float *out, const float *gate, const float *up, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = silu1(gate[i]) * up[i];
}

void fx_add(float *out, const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

fx_status fx_rope_cache(float *cs, int64_t pos, size_t n_rot, float freq_base,
                        const float *freq_factors) {
    if (!cs || n_rot == 0 || n_rot % 2 != 0 || !(freq_base > 0.0f))
        return FX_ERR_INVALID_ARG;
    if (freq_factors)
        for (size_t i = 0; i < n_rot / 2; i++)
            if (!(freq_factors[i] > 0.0f)) return FX_ERR_INVALID_ARG;
    for (size_t i = 0; i < n_rot / 2; i++) {
        /* In double, rounded once: the angle at large positions is where
         * float error would show (pos * freq loses bits fast). */
        double theta = (double)pos *
                       pow((double)freq_base, -2.0 * (double)i / (double)n_rot);
        if (freq_factors) theta /= (double)freq_factors[i];
        cs[2 * i] = (float)cos(theta);
        cs[2 * i + 1] = (float)sin(theta);
    }
    return FX_OK;
}

fx_status fx_rope_apply(float *x, size_t n_head, size_t head_dim,
                        size_t n_rot, const float *cs, fx_rope_mode mode) {
    if (!x || !cs || n_rot % 2 != 0 || n_rot > head_dim)
        return FX_ERR_INVALID_ARG;
    if (mode != FX_ROPE_NORMAL && mode != FX_ROPE_NEOX)
        return FX_ERR_INVALID_ARG;
    const size_t half = n_rot / 2;
    for (size_t h = 0; h < n_head; h++) {
        float *v = x + h * head_dim;
        for (size_t i = 0; i < half; i++) {
            const float c = cs[2 * i], s = cs[2 * i + 1];
            size_t ia = mode == FX_ROPE_NORMAL ? 2 * i : i;
            size_t ib = mode == FX_ROPE_NORMAL ? 2 * i + 1 : i + half;
            const float a = v[ia], b = v[ib];
            /* Separate roundings (no contraction), the same everywhere. */
            float ac = a * c, bs = b * s, as = a * s, bc = b * c;
            v[ia] = ac - bs;
            v[ib] = as + bc;
        }
    }
    return FX_OK;
}
