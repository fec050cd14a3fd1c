/*
 * The block types of quants.h in 16-row groups (FX_WTYPE_QR16, the layout
 * is in quants.h): the repack, and the kernel for ISAs without a reader of
 * their own, which copies each row back into the GGUF layout and hands it
 * to the base type's kernel.
 */
#include "quants.h"

#include <string.h>

size_t fx_qr16_unit(fx_wtype base) {
    const fx_qtype *q = fx_qtype_of(base);
    if (!q) return 0;
    return q->block_elems == FX_QK32 ? 8 * (size_t)q->block_bytes
                                     : q->block_bytes;
}

bool fx_qr16_fits(fx_wtype base, size_t k) {
    const fx_qtype *q = fx_qtype_of(base);
    if (!q || base == FX_WTYPE_Q3_K || k == 0 || k % q->block_elems != 0)
        return false;
    const size_t nb = k / q->block_elems;
    /* the 32-element types' units are 8 blocks: whole ones only */
    if (q->block_elems == FX_QK32 && nb % 8 != 0) return false;
    return nb <= SIZE_MAX / 16 / q->block_bytes;
}

/* Q6_K's 192 bytes of quants (ql, qh) in the grouped layout's order
 * (quants.h): q_e the 6-bit quant of element e; dword 16 i + t (i < 3,
 * t < 16) byte c holds q of element 4 (16 i + t) + c in its low 6 bits
 * and bits 2i, 2i + 1 of q of element 4 (48 + t) + c in its top 2. */
static void q6k_quants(const uint8_t *ql_qh, uint8_t q[256]) {
    for (int h = 0; h < 2; h++)
        for (int r = 0; r < 4; r++)
            for (int l = 0; l < 32; l++) {
                const int lo = ql_qh[64 * h + l + 32 * (r & 1)];
                const int hi = ql_qh[128 + 32 * h + l] >> (2 * r) & 3;
                q[128 * h + 32 * r + l] =
                    (uint8_t)((r < 2 ? lo & 0x0f : lo >> 4) | hi << 4);
            }
}

static void q6k_to_groups(uint8_t *blk) {
    uint8_t q[256];
    q6k_quants(blk, q);
    for (int i = 0; i < 3; i++)
        for (int e = 0; e < 64; e++)
            blk[64 * i + e] = (uint8_t)(q[64 * i + e] |
                                        (q[192 + e] >> (2 * i) & 3) << 6);
}

static void q6k_from_groups(uint8_t *blk) {
    uint8_t q[256];
    for (int e = 0; e < 64; e++) {
        q[192 + e] = 0;
        for (int i = 0; i < 3; i++) {
            q[64 * i + e] = blk[64 * i + e] & 0x3f;
            q[192 + e] |= (uint8_t)((blk[64 * i + e] >> 6) << (2 * i));
        }
    }
    memset(blk, 0, 192);
    for (int h = 0; h < 2; h++)
        for (int r = 0; r < 4; r++)
            for (int l = 0; l < 32; l++) {
                const int v = q[128 * h + 32 * r + l];
                blk[64 * h + l + 32 * (r & 1)] |=
                    (uint8_t)((v & 0x0f) << (r < 2 ? 0 : 4));
                blk[128 + 32 * h + l] |= (uint8_t)((v >> 4) << (2 * r));
            }
}

/* Row r's bytes of a full group at g (R16) <-> row (GGUF), by units:
 * to_group copies row into g, else g into row. */
static void move_row(uint8_t *g, uint8_t *row, size_t rb, size_t unit,
                     size_t r, bool to_group) {
    for (size_t u0 = 0; u0 < rb; u0 += unit) {
        const size_t len = rb - u0 < unit ? rb - u0 : unit;
        const size_t whole = len / 4 * 4, tail = len - whole;
        uint8_t *at = g + 16 * u0;
        for (size_t w = 0; w < whole; w += 4) {
            uint8_t *slot = at + 16 * w + 4 * r;
            if (to_group) memcpy(slot, row + u0 + w, 4);
            else memcpy(row + u0 + w, slot, 4);
        }
        uint8_t *slot = at + 16 * whole + tail * r;
        if (to_group) memcpy(slot, row + u0 + whole, tail);
        else memcpy(row + u0 + whole, slot, tail);
    }
}

fx_status fx_qr16_repack(void *dst, const void *src, fx_wtype base,
                         size_t n, size_t k) {
    if (!fx_qr16_fits(base, k)) return FX_ERR_INVALID_ARG;
    const size_t rb = fx_wtype_row_bytes(base, k), unit = fx_qr16_unit(base);
    uint8_t *d = dst;
    const uint8_t *s = src;
    const size_t full = n / 16 * 16;
    const bool q6 = base == FX_WTYPE_Q6_K;
    uint8_t blk[sizeof(fx_block_q6_K)];
    for (size_t g = 0; g < full; g += 16)
        for (size_t r = 0; r < 16; r++) {
            const uint8_t *row = s + (g + r) * rb;
            if (!q6) {
                move_row(d + g * rb, (uint8_t *)(uintptr_t)row, rb, unit, r,
                         true);
                continue;
            }
            /* a Q6_K unit is a block: each rearranged on its own */
            for (size_t u0 = 0; u0 < rb; u0 += unit) {
                memcpy(blk, row + u0, unit);
                q6k_to_groups(blk);
                move_row(d + g * rb + 16 * u0, blk, unit, unit, r, true);
            }
        }
    memcpy(d + full * rb, s + full * rb, (n - full) * rb);
    return FX_OK;
}

void fx_qr16_row(void *row, const void *w, fx_wtype base, size_t n,
                 size_t k, size_t i) {
    const size_t rb = fx_wtype_row_bytes(base, k);
    const uint8_t *m = w;
    if (i >= n / 16 * 16) {
        memcpy(row, m + i * rb, rb);
        return;
    }
    const size_t unit = fx_qr16_unit(base);
    uint8_t *out = row;
    move_row((uint8_t *)(uintptr_t)(m + i / 16 * 16 * rb), out, rb, unit,
             i % 16, false);
    if (base == FX_WTYPE_Q6_K)
        for (size_t u0 = 0; u0 < rb; u0 += unit) q6k_from_groups(out + u0);
}

void fx_qr16_range_rows(const fx_mm_job *job, size_t n0, size_t n1,
                        float *scratch) {
    const fx_wtype base = fx_wtype_qr16_base(job->type);
    const size_t rb = job->row_bytes;
    /* the row, then the base kernel's scratch, both 64-aligned */
    uint8_t *row = (uint8_t *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    float *rest = (float *)(void *)(row + ((rb + 63) & ~(size_t)63));
    fx_mm_job one = *job;
    one.type = base;
    one.n = 1;
    one.w = row;
    for (size_t i = n0; i < n1; i++) {
        fx_qr16_row(row, job->w, base, job->n, job->k, i);
        one.y = job->y + i;
        job->qr16_rows(&one, 0, 1, rest);
    }
}
