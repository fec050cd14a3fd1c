/*
 * Per-row kernels. Each touches one row of one token, so none can depend
 * on the batch; the reductions (rmsnorm, softmax) are in double, in a
 * fixed order, which makes them more accurate than the f32 they feed.
 * These are O(n) next to the O(n^2) matmuls, so clarity first -- except
 * attention's softmax, which runs over every position for every head and
 * token (a large share of a long prefill): it has an AVX2 form, with its
 * own exp, that gives the same bits.
 */
#include "kernels.h"

#include <math.h>
#include <string.h>

_Static_assert(sizeof(fx_block_q8_0) == 34, "block_q8_0 must be 34 bytes");

/* The AVX2 form of an op for a context on AVX2 or AVX-512, else the
 * portable one: every form gives the same bits. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FX_OPS_PICK(isa, avx2, portable) \
    ((isa) == FX_ISA_AVX2 || (isa) == FX_ISA_AVX512 ? (avx2) : (portable))
#else
#define FX_OPS_PICK(isa, avx2, portable) ((void)(isa), (portable))
#endif

void fx_rmsnorm(float *out, const float *x, const float *w, size_t n,
                float eps) {
    if (n == 0) return;
    /* 8 lanes in registers, not one chain of dependent double adds: this
     * runs serially, the other threads idle. The squares are exact in
     * double. */
    double l0 = 0, l1 = 0, l2 = 0, l3 = 0, l4 = 0, l5 = 0, l6 = 0, l7 = 0;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        l0 += (double)x[i] * (double)x[i];
        l1 += (double)x[i + 1] * (double)x[i + 1];
        l2 += (double)x[i + 2] * (double)x[i + 2];
        l3 += (double)x[i + 3] * (double)x[i + 3];
        l4 += (double)x[i + 4] * (double)x[i + 4];
        l5 += (double)x[i + 5] * (double)x[i + 5];
        l6 += (double)x[i + 6] * (double)x[i + 6];
        l7 += (double)x[i + 7] * (double)x[i + 7];
    }
    double *tail[7] = {&l0, &l1, &l2, &l3, &l4, &l5, &l6};
    for (size_t j = 0; i < n; i++, j++) *tail[j] += (double)x[i] * (double)x[i];
    const double ss = ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7));
    const float s = 1.0f / sqrtf((float)(ss / (double)n) + eps);
    if (w) {
        for (i = 0; i < n; i++) out[i] = (x[i] * s) * w[i];
    } else {
        for (i = 0; i < n; i++) out[i] = x[i] * s;
    }
}

/* The constants of fx_exp_le0: ln 2 split so that n * FX_LN2_HI is exact
 * for |n| < 2^8, and the Taylor-like coefficients of the classic single
 * precision exp (Cephes). */
#define FX_LOG2E 1.44269504088896341f
#define FX_LN2_HI 0.693359375f
#define FX_LN2_LO (-2.12194440e-4f)
#define FX_EXP_P0 1.9875691500e-4f
#define FX_EXP_P1 1.3981999507e-3f
#define FX_EXP_P2 8.3334519073e-3f
#define FX_EXP_P3 4.1665795894e-2f
#define FX_EXP_P4 1.6666665459e-1f
#define FX_EXP_P5 5.0000001201e-1f
#define FX_EXP_MIN (-87.0f)

float fx_exp_le0(float d) {
    if (!(d >= FX_EXP_MIN)) return 0.0f; /* also -inf (masked) and NaN */
    const float n = rintf(d * FX_LOG2E);  /* round to nearest even */
    float r = fmaf(n, -FX_LN2_HI, d);
    r = fmaf(n, -FX_LN2_LO, r);
    float p = FX_EXP_P0;
    p = fmaf(p, r, FX_EXP_P1);
    p = fmaf(p, r, FX_EXP_P2);
    p = fmaf(p, r, FX_EXP_P3);
    p = fmaf(p, r, FX_EXP_P4);
    p = fmaf(p, r, FX_EXP_P5);
    p = fmaf(p, r * r, r) + 1.0f;
    /* n in [-126, 0]: 2^n is a normal float. */
    const uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
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
    double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (size_t i = 0; i < n; i++) {
        const float e = fx_exp_le0(x[i] - mx);
        x[i] = e;
        lane[i % 8] += (double)e;
    }
    const double sum = ((lane[0] + lane[4]) + (lane[2] + lane[6])) +
                       ((lane[1] + lane[5]) + (lane[3] + lane[7]));
    const float inv = (float)(1.0 / sum);
    for (size_t i = 0; i < n; i++) x[i] *= inv;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define FX_OPS_AVX2 __attribute__((target("avx2,fma")))

/* fx_exp_le0 on 8 lanes: the same operations in the same order. */
static inline FX_OPS_AVX2 __m256 exp_le0_8(__m256 d) {
    const __m256 keep = _mm256_cmp_ps(d, _mm256_set1_ps(FX_EXP_MIN), _CMP_GE_OQ);
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(d, _mm256_set1_ps(FX_LOG2E)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-FX_LN2_HI), d);
    r = _mm256_fmadd_ps(n, _mm256_set1_ps(-FX_LN2_LO), r);
    __m256 p = _mm256_set1_ps(FX_EXP_P0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(FX_EXP_P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(FX_EXP_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(FX_EXP_P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(FX_EXP_P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(FX_EXP_P5));
    p = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r),
                      _mm256_set1_ps(1.0f));
    /* Lanes dropped by keep may hold garbage n (NaN, -inf): masked below. */
    const __m256i e = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(_mm256_and_ps(n, keep)),
                         _mm256_set1_epi32(127)),
        23);
    return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), keep);
}

static FX_OPS_AVX2 void softmax_avx2(float *x, size_t n) {
    if (n == 0) return;
    __m256 m8 = _mm256_set1_ps(-INFINITY);
    size_t i = 0;
    /* max_ps(x, m) returns m when x is NaN, as the portable x > mx does. */
    for (; i + 8 <= n; i += 8) m8 = _mm256_max_ps(_mm256_loadu_ps(x + i), m8);
    float m[8];
    _mm256_storeu_ps(m, m8);
    float mx = -INFINITY;
    for (int j = 0; j < 8; j++)
        if (m[j] > mx) mx = m[j];
    for (; i < n; i++)
        if (x[i] > mx) mx = x[i];
    if (mx == -INFINITY) {
        for (i = 0; i < n; i++) x[i] = 0.0f;
        return;
    }
    const __m256 vmx = _mm256_set1_ps(mx);
    __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
    for (i = 0; i + 8 <= n; i += 8) {
        const __m256 e = exp_le0_8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmx));
        _mm256_storeu_ps(x + i, e);
        lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    double lane[8];
    _mm256_storeu_pd(lane, lo);
    _mm256_storeu_pd(lane + 4, hi);
    for (; i < n; i++) {
        const float e = fx_exp_le0(x[i] - mx);
        x[i] = e;
        lane[i % 8] += (double)e;
    }
    const double sum = ((lane[0] + lane[4]) + (lane[2] + lane[6])) +
                       ((lane[1] + lane[5]) + (lane[3] + lane[7]));
    const __m256 inv = _mm256_set1_ps((float)(1.0 / sum));
    for (i = 0; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
    const float inv1 = (float)(1.0 / sum);
    for (; i < n; i++) x[i] *= inv1;
}
#endif

fx_softmax_fn fx_softmax_for(fx_isa isa) { return FX_OPS_PICK(isa, softmax_avx2, fx_softmax); }

/* silu(v) = v * sigmoid(v), with e = exp(-|v|) <= 1 from fx_exp_le0:
 * sigmoid(v) = 1 / (1 + e) for v >= 0 and e / (1 + e) below, so exp never
 * overflows and a vector form can repeat the same operations (libm's
 * expf cannot be vectorized, and this runs thousands of times a layer).
 * NaN gives NaN (e = 0, numerator 0, NaN * 0). */
static float silu1(float v) {
    const float e = fx_exp_le0(-fabsf(v));
    const float num = v >= 0.0f ? 1.0f : e;
    return v * (num / (1.0f + e));
}

void fx_silu(float *out, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = silu1(x[i]);
}

void fx_swiglu(float *out, const float *gate, const float *up, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = silu1(gate[i]) * up[i];
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* silu1 on 8 lanes, the same operations. */
static FX_OPS_AVX2 void swiglu_avx2(float *out, const float *gate,
                                    const float *up, size_t n) {
    const __m256 sign = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(gate + i);
        const __m256 e = exp_le0_8(_mm256_or_ps(v, sign)); /* -|v| */
        const __m256 pos = _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GE_OQ);
        const __m256 num = _mm256_blendv_ps(e, one, pos);
        const __m256 silu =
            _mm256_mul_ps(v, _mm256_div_ps(num, _mm256_add_ps(one, e)));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(silu, _mm256_loadu_ps(up + i)));
    }
    for (; i < n; i++) out[i] = silu1(gate[i]) * up[i];
}
#endif

/* tanh(v) = (1 - e) / (1 + e) with e = fx_exp_le0(-2|v|) <= 1, the sign
 * of v put back: never overflows, and a vector form repeats the same
 * operations. Within ~1e-7 of tanh in absolute terms (the subtraction
 * loses relative accuracy near 0, where GELU adds the result to 1 and a
 * soft cap multiplies it by the cap). NaN stays NaN. */
static float tanh1(float v) {
    if (v != v) return v;
    const float a = fabsf(v);
    const float e = fx_exp_le0(-(a + a));
    return copysignf((1.0f - e) / (1.0f + e), v);
}

/* ggml's tanh GELU: 0.5 x (1 + tanh(sqrt(2/pi) x (1 + 0.044715 x^2))),
 * evaluated left to right as written. */
#define FX_GELU_COEF_A 0.044715f
#define FX_SQRT_2_OVER_PI 0.79788456080286535588f
static float gelu1(float x) {
    const float u = FX_SQRT_2_OVER_PI * x * (1.0f + FX_GELU_COEF_A * x * x);
    return 0.5f * x * (1.0f + tanh1(u));
}

void fx_geglu(float *out, const float *gate, const float *up, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = gelu1(gate[i]) * up[i];
}

void fx_softcap(float *x, size_t n, float cap) {
    const float inv = 1.0f / cap;
    for (size_t i = 0; i < n; i++) x[i] = cap * tanh1(x[i] * inv);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* tanh1 on 8 lanes, the same operations. */
static inline FX_OPS_AVX2 __m256 tanh_8(__m256 v) {
    const __m256 sign = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f);
    const __m256 a = _mm256_andnot_ps(sign, v);
    const __m256 e = exp_le0_8(_mm256_xor_ps(_mm256_add_ps(a, a), sign));
    const __m256 t = _mm256_div_ps(_mm256_sub_ps(one, e), _mm256_add_ps(one, e));
    const __m256 r = _mm256_or_ps(t, _mm256_and_ps(v, sign));
    const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    return _mm256_blendv_ps(r, v, nan);
}

static FX_OPS_AVX2 void geglu_avx2(float *out, const float *gate,
                                   const float *up, size_t n) {
    const __m256 c = _mm256_set1_ps(FX_SQRT_2_OVER_PI);
    const __m256 a = _mm256_set1_ps(FX_GELU_COEF_A);
    const __m256 one = _mm256_set1_ps(1.0f), half = _mm256_set1_ps(0.5f);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(gate + i);
        const __m256 inner =
            _mm256_add_ps(one, _mm256_mul_ps(_mm256_mul_ps(a, x), x));
        const __m256 u = _mm256_mul_ps(_mm256_mul_ps(c, x), inner);
        const __m256 g = _mm256_mul_ps(_mm256_mul_ps(half, x),
                                       _mm256_add_ps(one, tanh_8(u)));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(g, _mm256_loadu_ps(up + i)));
    }
    for (; i < n; i++) out[i] = gelu1(gate[i]) * up[i];
}

static FX_OPS_AVX2 void softcap_avx2(float *x, size_t n, float cap) {
    const float inv = 1.0f / cap;
    const __m256 vinv = _mm256_set1_ps(inv), vcap = _mm256_set1_ps(cap);
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_mul_ps(vcap, tanh_8(_mm256_mul_ps(
                                                   _mm256_loadu_ps(x + i), vinv))));
    for (; i < n; i++) x[i] = cap * tanh1(x[i] * inv);
}
#endif

fx_swiglu_fn fx_geglu_for(fx_isa isa) { return FX_OPS_PICK(isa, geglu_avx2, fx_geglu); }

fx_softcap_fn fx_softcap_for(fx_isa isa) { return FX_OPS_PICK(isa, softcap_avx2, fx_softcap); }

fx_swiglu_fn fx_swiglu_for(fx_isa isa) { return FX_OPS_PICK(isa, swiglu_avx2, fx_swiglu); }

void fx_add(float *out, const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

fx_status fx_rope_cache(float *cs, int64_t pos, size_t n_rot, float freq_base,
                        float freq_scale, float attn_factor,
                        const float *freq_factors) {
    if (!cs || n_rot == 0 || n_rot % 2 != 0 || !(freq_base > 0.0f))
        return FX_ERR_INVALID_ARG;
    if (freq_factors)
        for (size_t i = 0; i < n_rot / 2; i++)
            if (!(freq_factors[i] > 0.0f)) return FX_ERR_INVALID_ARG;
    if (!(freq_scale > 0.0f) || !(attn_factor > 0.0f)) return FX_ERR_INVALID_ARG;
    for (size_t i = 0; i < n_rot / 2; i++) {
        /* In double, rounded once: the angle at large positions is where
         * float error would show (pos * freq loses bits fast). */
        double theta = (double)pos * (double)freq_scale *
                       pow((double)freq_base, -2.0 * (double)i / (double)n_rot);
        if (freq_factors) theta /= (double)freq_factors[i];
        cs[2 * i] = (float)cos(theta) * attn_factor;
        cs[2 * i + 1] = (float)sin(theta) * attn_factor;
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
