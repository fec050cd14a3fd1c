/*
 * Gemma's elementwise kernels (lib/kernels/ops.c): the tanh GELU of its
 * gated feed-forward (fx_geglu) and Gemma 2's soft cap (fx_softcap),
 * against double-precision tanh, and every vector form against the
 * portable bits.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "kernels/kernels.h"
#include "test_rng.h"

static double gelu_ref(double x) {
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) * x * (1.0 + 0.044715 * x * x)));
}

/* The tanh within ~1e-7 absolute, so a GELU within that times |x| (plus
 * the float rounding of its inputs), a soft cap within cap times it. */
static void test_accuracy(void **state) {
    (void)state;
    enum { N = 4096 };
    static float g[N], u[N], out[N], x[N];
    uint64_t s = 17;
    for (int i = 0; i < N; i++) {
        g[i] = fx_test_rng_f(&s) * (i % 3 ? 4.0f : 40.0f);
        u[i] = fx_test_rng_f(&s) * 2.0f;
    }
    fx_geglu(out, g, u, N);
    for (int i = 0; i < N; i++) {
        const double want = gelu_ref(g[i]) * u[i];
        const double tol = 4e-7 * fabs(g[i] * u[i]) + 1e-6 * fabs(want) + 1e-30;
        if (!(fabs(out[i] - want) <= tol))
            fail_msg("geglu(%g, %g) = %.9g, want %.9g", (double)g[i],
                     (double)u[i], (double)out[i], want);
    }
    const float caps[] = {50.0f, 30.0f, 1.0f};
    for (int c = 0; c < 3; c++) {
        for (int i = 0; i < N; i++) x[i] = g[i] * 5.0f;
        fx_softcap(x, N, caps[c]);
        for (int i = 0; i < N; i++) {
            const double want = caps[c] * tanh((double)(g[i] * 5.0f) / caps[c]);
            if (!(fabs(x[i] - want) <= 3e-7 * caps[c] + 2e-7 * fabs(want)))
                fail_msg("softcap(%g, %g) = %.9g, want %.9g",
                         (double)(g[i] * 5.0f), (double)caps[c], (double)x[i],
                         want);
            assert_true(fabsf(x[i]) <= caps[c]);
        }
    }
    /* odd, saturating, NaN kept */
    float sp[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-30f, -1e-30f, 1e30f};
    fx_softcap(sp, 8, 30.0f);
    assert_true(sp[0] == 0.0f && !signbit(sp[0]));
    assert_true(sp[1] == 0.0f && signbit(sp[1]));
    assert_true(sp[2] == 30.0f && sp[3] == -30.0f);
    assert_true(isnan(sp[4]));
    /* tanh(v) for |v| below ~3e-8 is within its absolute accuracy of 0:
     * 0 with v's sign */
    assert_true(sp[5] == 0.0f && !signbit(sp[5]));
    assert_true(sp[6] == 0.0f && signbit(sp[6]));
    assert_true(sp[7] == 30.0f);
    float gs[] = {0.0f, -100.0f, 100.0f, NAN}, us[] = {1.0f, 1.0f, 1.0f, 1.0f};
    float go[4];
    fx_geglu(go, gs, us, 4);
    assert_true(go[0] == 0.0f);
    assert_true(go[1] == 0.0f); /* 0.5 x (1 + tanh) = 0.5 x * 0 */
    assert_true(go[2] == 100.0f);
    assert_true(isnan(go[3]));
}

/* Every form gives the portable bits, at every length up to a few
 * vectors (the scalar tails) and on values across fx_exp_le0's cutoff. */
static void test_forms(void **state) {
    (void)state;
    const fx_isa isas[] = {FX_ISA_AVX2, FX_ISA_AVX512};
    static float g[3000], u[3000], a[3000], b[3000];
    uint64_t s = 9;
    for (size_t i = 0; i < 3000; i++) {
        g[i] = fx_test_rng_f(&s) * (i % 4 ? 6.0f : 90.0f);
        u[i] = fx_test_rng_f(&s) * 4.0f;
    }
    const float special[] = {0.0f,  -0.0f, INFINITY, -INFINITY, NAN,   43.5f,
                             -43.5f, 1e-30f, -1e-30f, 1e30f, -1e30f, 43.49f};
    for (size_t i = 0; i < sizeof special / sizeof *special; i++)
        g[100 + 3 * i] = special[i];
    for (int k = 0; k < 2; k++) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
        if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
            continue;
#endif
        fx_swiglu_fn geglu = fx_geglu_for(isas[k]);
        fx_softcap_fn cap = fx_softcap_for(isas[k]);
        for (size_t n = 0; n <= 3000; n += n < 40 ? 1 : 307) {
            fx_geglu(a, g, u, n);
            geglu(b, g, u, n);
            assert_memory_equal(a, b, n * sizeof *a);
            for (size_t i = 0; i < n; i++) a[i] = b[i] = g[i];
            fx_softcap(a, n, 50.0f);
            cap(b, n, 50.0f);
            assert_memory_equal(a, b, n * sizeof *a);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accuracy),
        cmocka_unit_test(test_forms),
    };
    return cmocka_run_group_tests_name("kernels_gelu", tests, NULL, NULL);
}
