/*
 * Private to lib/kernels: small helpers the block quantizers share.
 * Rounding as ggml's reference quantizers round, and the packed sub-block
 * scales of the K-quants (quants.h gives the layouts).
 */
#ifndef FX_KERNELS_QUANT_UTIL_H
#define FX_KERNELS_QUANT_UTIL_H

#include <stdint.h>
#include <string.h>

/* Nearest integer, ties to even: ggml's nearest_int (which adds 1.5 * 2^23
 * and reads the significand) on its domain |v| <= 4194303. Outside it the
 * value saturates there and NaN gives 0, so a degenerate block yields
 * in-range (clamped) quants rather than undefined behaviour. */
static inline int fx_nearest_int(float v) {
    if (!(v == v)) return 0;
    if (v > 4194303.0f) v = 4194303.0f;
    if (v < -4194303.0f) v = -4194303.0f;
    float t = v + 12582912.0f; /* exact in f32 for |v| < 2^22: rounds v */
    uint32_t u;
    memcpy(&u, &t, sizeof u);
    return (int)(u & 0x007fffffu) - 0x00400000;
}

static inline int fx_clampi(int v, int lo, int hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

/* Q4_K / Q5_K: sub-block j's (0..7) 6-bit scale and min from the 12 scale
 * bytes. Sub-blocks 0-3 hold theirs in the low 6 bits of bytes j and j+4;
 * 4-7 in the nibbles of byte j+4, their top two bits in the top two bits
 * of bytes j-4 (scale) and j (min). */
static inline void fx_k4_scale_get(const uint8_t *s, int j, uint8_t *sc,
                                   uint8_t *mn) {
    if (j < 4) {
        *sc = (uint8_t)(s[j] & 63);
        *mn = (uint8_t)(s[j + 4] & 63);
    } else {
        *sc = (uint8_t)((s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4));
        *mn = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

/* The inverse: all eight (sc, mn), each 0..63, into 12 bytes. */
static inline void fx_k4_scale_set(uint8_t *s, const uint8_t *sc,
                                   const uint8_t *mn) {
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        s[j + 4] = (uint8_t)((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
        s[j + 8] = (uint8_t)((sc[j + 4] & 0x0f) | ((mn[j + 4] & 0x0f) << 4));
    }
}

/* Q3_K: sub-block j's (0..15) 6-bit scale code (the scale is code - 32).
 * Low nibbles: bytes 0-7 (j < 8 low nibble of byte j, else high nibble of
 * byte j-8); the top two bits: byte 8 + j%4, bits 2*(j/4). */
static inline int fx_q3k_scale_get(const uint8_t *s, int j) {
    int lo = j < 8 ? (s[j] & 0x0f) : (s[j - 8] >> 4);
    int hi = (s[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
    return lo | (hi << 4);
}

/* The inverse: all sixteen codes, each 0..63, into 12 bytes. */
static inline void fx_q3k_scale_set(uint8_t *s, const uint8_t *code) {
    memset(s, 0, 12);
    for (int j = 0; j < 16; j++) {
        int c = code[j] & 63;
        if (j < 8) s[j] |= (uint8_t)(c & 0x0f);
        else s[j - 8] |= (uint8_t)((c & 0x0f) << 4);
        s[8 + (j & 3)] |= (uint8_t)((c >> 4) << (2 * (j >> 2)));
    }
}

/* The K-quants' scale searches (quant_kquants_search.c), ggml's
 * make_qx_quants (weights x^2), make_q3_quants and make_qkx2_quants in
 * the same float operations, so a block's choice is ggml's choice.
 * Each takes n values x and writes n level codes to L. */
/* Symmetric, levels -nmax..nmax-1 stored as 0..2nmax-1; returns the
 * scale (0 for an all-zero block). */
float fx_kq_search_sym(int n, int nmax, const float *x, int8_t *L);
/* As above with the coordinate-descent refinement of make_q3_quants. */
float fx_kq_search_q3(int n, int nmax, const float *x, int8_t *L);
/* With a min: x ~ scale * L - *neg_min, L in 0..nmax, weights w; tries
 * nstep + 1 scales (nmax + rmin + rdelta * i) / (max - min); mad: the
 * weighted error is |diff| (else diff^2). Returns the scale. */
float fx_kq_search_min(int n, int nmax, const float *x, const float *w,
                       uint8_t *L, float *neg_min, float rmin, float rdelta,
                       int nstep, int mad);

#endif /* FX_KERNELS_QUANT_UTIL_H */
