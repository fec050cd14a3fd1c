/*
 * Number formats: the weight types' row sizes and names, IEEE half,
 * bfloat16, ggml's Q8_0; the other block types through their table
 * (quants.h). Plain integer code, so the results are the same
 * on every CPU and match the F16C/AVX2 paths (which only ever widen, and
 * widening is exact).
 */
#include "quants.h"

#include <math.h>
#include <string.h>

size_t fx_wtype_row_bytes(fx_wtype t, size_t k) {
    /* The tiles hold chunks of 8 elements. */
    if (fx_wtype_is_r12(t))
        return k % 8 == 0 ? fx_wtype_row_bytes(fx_wtype_unpacked(t), k) : 0;
    if (fx_wtype_is_qr16(t)) {
        const fx_wtype base = fx_wtype_qr16_base(t);
        return fx_qr16_fits(base, k) ? fx_wtype_row_bytes(base, k) : 0;
    }
    switch (t) {
    case FX_WTYPE_F32: return k <= SIZE_MAX / 4 ? 4 * k : 0;
    case FX_WTYPE_F16:
    case FX_WTYPE_BF16: return k <= SIZE_MAX / 2 ? 2 * k : 0;
    case FX_WTYPE_Q8_0:
    case FX_WTYPE_Q8_0_R16:
        if (k % FX_QK8_0 != 0) return 0;
        return (k / FX_QK8_0) * sizeof(fx_block_q8_0);
    default: {
        const fx_qtype *q = fx_qtype_of(t);
        if (!q || k % q->block_elems != 0) return 0;
        return k / q->block_elems * q->block_bytes;
    }
    }
}

const char *fx_wtype_name(fx_wtype t) {
    switch (t) {
    case FX_WTYPE_F32: return "f32";
    case FX_WTYPE_F16: return "f16";
    case FX_WTYPE_BF16: return "bf16";
    case FX_WTYPE_Q8_0: return "q8_0";
    case FX_WTYPE_Q8_0_R16: return "q8_0_r16";
    case FX_WTYPE_F32_R12: return "f32_r12";
    case FX_WTYPE_F16_R12: return "f16_r12";
    case FX_WTYPE_BF16_R12: return "bf16_r12";
    default: {
        /* 16-row groups are the same weights: the file's name for them */
        const fx_qtype *q = fx_qtype_of(fx_wtype_qr16_base(t));
        return q ? q->name : "unknown";
    }
    }
}

float fx_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu;
    uint32_t m = h & 0x3ffu;
    if (e == 0) {
        if (m == 0) return fx_bits_f32(sign);
        /* Subnormal half: normalize; every one is a normal float. */
        e = 113; /* 127 - 14 */
        while (!(m & 0x400u)) {
            m <<= 1;
            e--;
        }
        return fx_bits_f32(sign | (e << 23) | ((m & 0x3ffu) << 13));
    }
    if (e == 31) {
        /* Inf stays inf; NaN is quieted, as vcvtph2ps does, so the AVX2 and
         * portable paths agree even on signalling NaNs. */
        return fx_bits_f32(sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0));
    }
    return fx_bits_f32(sign | ((e + 112) << 23) | (m << 13));
}

uint16_t fx_f32_to_f16(float f) {
    uint32_t x = fx_f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) {
        if (ax == 0x7f800000u) return sign | 0x7c00u;
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    }
    /* 65520 = halfway between 65504 (max half, odd significand) and 2^16:
     * it and everything above round to inf. */
    if (ax >= 0x477ff000u) return sign | 0x7c00u;
    if (ax < 0x38800000u) {
        /* Below 2^-14: a half subnormal (units of 2^-24) or zero. 2^-25 is
         * the tie between 0 and 2^-24 and goes to even, i.e. 0. */
        if (ax <= 0x33000000u) return sign;
        uint32_t e = ax >> 23;
        uint32_t m = (ax & 0x7fffffu) | 0x800000u; /* value m * 2^(e-150) */
        uint32_t shift = 126 - e;                  /* 14..24 */
        uint32_t q = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return (uint16_t)(sign | q); /* q == 0x400 is the smallest normal */
    }
    /* Normal: round the 13 dropped bits to nearest even; a carry moves into
     * the exponent, which is the correct result. */
    uint32_t r = ax + 0xfffu + ((ax >> 13) & 1u);
    r -= 0x38000000u; /* rebias 127 -> 15 */
    return (uint16_t)(sign | (r >> 13));
}

float fx_bf16_to_f32(uint16_t h) { return fx_bits_f32((uint32_t)h << 16); }

uint16_t fx_f32_to_bf16(float f) {
    uint32_t x = fx_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it one, quiet */
        return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

void fx_f16_to_f32_row(float *out, const uint16_t *in, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = fx_f16_to_f32(in[i]);
}

void fx_f32_to_f16_row(uint16_t *out, const float *in, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = fx_f32_to_f16(in[i]);
}

void fx_bf16_to_f32_row(float *out, const uint16_t *in, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = fx_bf16_to_f32(in[i]);
}

void fx_f32_to_bf16_row(uint16_t *out, const float *in, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = fx_f32_to_bf16(in[i]);
}

fx_status fx_quantize_q8_0(fx_block_q8_0 *out, const float *in, size_t n) {
    if (n % FX_QK8_0 != 0 || (n && (!out || !in))) return FX_ERR_INVALID_ARG;
    for (size_t b = 0; b < n / FX_QK8_0; b++) {
        const float *x = in + b * FX_QK8_0;
        float amax = 0.0f;
        for (int j = 0; j < FX_QK8_0; j++) {
            float a = fabsf(x[j]);
            if (a > amax) amax = a;
        }
        /* As ggml's quantize_row_q8_0_ref: q uses the f32 d, then d is
         * stored rounded to half. */
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        out[b].d = fx_f32_to_f16(d);
        for (int j = 0; j < FX_QK8_0; j++)
            out[b].qs[j] = (int8_t)roundf(x[j] * id);
    }
    return FX_OK;
}

fx_status fx_dequantize_q8_0(float *out, const fx_block_q8_0 *in, size_t n) {
    if (n % FX_QK8_0 != 0 || (n && (!out || !in))) return FX_ERR_INVALID_ARG;
    for (size_t b = 0; b < n / FX_QK8_0; b++) {
        const float d = fx_f16_to_f32(in[b].d);
        for (int j = 0; j < FX_QK8_0; j++)
            out[b * FX_QK8_0 + j] = d * (float)in[b].qs[j];
    }
    return FX_OK;
}

fx_status fx_wtype_row_to_f32(float *out, const void *row, fx_wtype t,
                              size_t k) {
    if (k && (!out || !row)) return FX_ERR_INVALID_ARG;
    if (k && fx_wtype_row_bytes(t, k) == 0) return FX_ERR_INVALID_ARG;
    const uint8_t *p = row;
    switch (t) {
    case FX_WTYPE_F32: memcpy(out, p, k * sizeof(float)); return FX_OK;
    case FX_WTYPE_F16:
    case FX_WTYPE_BF16:
        for (size_t i = 0; i < k; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            out[i] = t == FX_WTYPE_F16 ? fx_f16_to_f32(h) : fx_bf16_to_f32(h);
        }
        return FX_OK;
    case FX_WTYPE_Q8_0:
        for (size_t b = 0; b < k / FX_QK8_0; b++) {
            fx_block_q8_0 blk;
            memcpy(&blk, p + b * sizeof blk, sizeof blk);
            fx_dequantize_q8_0(out + b * FX_QK8_0, &blk, FX_QK8_0);
        }
        return FX_OK;
    default: {
        const fx_qtype *q = fx_qtype_of(t);
        if (!q) return FX_ERR_UNSUPPORTED;
        if (((uintptr_t)p & 1) == 0) {
            q->dequant(out, p, k);
            return FX_OK;
        }
        /* The block structs hold halves: an odd row is read block by
         * block from an aligned copy (GGUF's rows are never odd). */
        _Alignas(8) uint8_t blk[256];
        for (size_t b = 0; b < k / q->block_elems; b++) {
            memcpy(blk, p + b * q->block_bytes, q->block_bytes);
            q->dequant(out + b * q->block_elems, blk, q->block_elems);
        }
        return FX_OK;
    }
    }
}

fx_status fx_q8_0_repack_r16(void *dst, const void *src, size_t n, size_t k) {
    if (k % FX_QK8_0 != 0 || (n && k && (!dst || !src)))
        return FX_ERR_INVALID_ARG;
    const size_t nb = k / FX_QK8_0, rb = nb * sizeof(fx_block_q8_0);
    const uint8_t *in = src;
    uint8_t *out = dst; /* written in order: tile, group, scales, quants */
    for (size_t t = 0; t < n; t += FX_R16_ROWS) {
        const size_t rows = n - t < FX_R16_ROWS ? n - t : FX_R16_ROWS;
        const uint8_t *tile = in + t * rb;
        for (size_t g = 0; g < nb; g += FX_R16_GROUP) {
            const size_t gb = nb - g < FX_R16_GROUP ? nb - g : FX_R16_GROUP;
            for (size_t i = 0; i < gb; i++)
                for (size_t r = 0; r < rows; r++) {
                    memcpy(out, tile + r * rb + (g + i) * sizeof(fx_block_q8_0),
                           2);
                    out += 2;
                }
            for (size_t i = 0; i < gb; i++)
                for (size_t j = 0; j < FX_QK8_0; j += 4)
                    for (size_t r = 0; r < rows; r++) {
                        const uint8_t *q = tile + r * rb +
                                           (g + i) * sizeof(fx_block_q8_0) +
                                           2 + j;
                        /* + 128 on each byte, 4 at a time */
                        uint32_t v;
                        memcpy(&v, q, 4);
                        v ^= 0x80808080u;
                        memcpy(out, &v, 4);
                        out += 4;
                    }
        }
    }
    return FX_OK;
}

fx_status fx_float_repack_r12(void *dst, const void *src, fx_wtype t,
                              size_t n, size_t k) {
    const size_t esize = t == FX_WTYPE_F32                          ? 4
                         : t == FX_WTYPE_F16 || t == FX_WTYPE_BF16 ? 2
                                                                   : 0;
    if (esize == 0 || n % 2 != 0 || k % 8 != 0 || (n && k && (!dst || !src)))
        return FX_ERR_INVALID_ARG;
    const uint8_t *in = src;
    uint8_t *out = dst; /* written in order: tile, chunk, row */
    for (size_t t0 = 0; t0 < n; t0 += FX_R12_ROWS) {
        const size_t rows = n - t0 < FX_R12_ROWS ? n - t0 : FX_R12_ROWS;
        for (size_t c = 0; c < k / 8; c++)
            for (size_t r = 0; r < rows; r++) {
                memcpy(out, in + ((t0 + r) * k + 8 * c) * esize, 8 * esize);
                out += 8 * esize;
            }
    }
    return FX_OK;
}
