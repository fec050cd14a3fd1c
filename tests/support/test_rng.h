/*
 * The tests' one pseudo-random generator: splitmix64, so any seed (0
 * included) gives a well-mixed stream from its first value, and a run is
 * the same on every platform. Header-only: every test links it without a
 * build change. (The library's own generator, fx_rng, is what test_sample
 * checks; this one only makes test inputs.)
 */
#ifndef FX_TEST_RNG_H
#define FX_TEST_RNG_H

#include <stddef.h>
#include <stdint.h>

/* The next 64 random bits; advances *state. */
static inline uint64_t fx_test_rng_next(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, n), n > 0 (the modulo bias is irrelevant at test sizes). */
static inline size_t fx_test_rng_below(uint64_t *state, size_t n) {
    return (size_t)(fx_test_rng_next(state) % n);
}

/* Uniform in [0, 1), 53 random bits. */
static inline double fx_test_rng_unit(uint64_t *state) {
    return (double)(fx_test_rng_next(state) >> 11) * 0x1p-53;
}

/* Uniform in [-1, 1). */
static inline float fx_test_rng_f(uint64_t *state) {
    return (float)(fx_test_rng_unit(state) * 2.0 - 1.0);
}

#endif /* FX_TEST_RNG_H */
