/*
 * Private to lib/kernels (and the internal tools and tests): ggml's
 * block-quantized weight types, Q4_0 to Q6_K and IQ4, as one table.
 *
 * Adding a type is a block struct here, a file of its family's formats
 * (quant_legacy.c, quant_kquants.c, quant_iq4.c: exact dequantization and
 * a reference quantizer) and an entry in each ISA's kernel table
 * (qdot_portable.c, qdot_avx2.c, qdot_avx512.c); matmul.c only asks the
 * table.
 *
 * Block layouts are ggml's (ggml-common.h), byte for byte: a GGUF file's
 * tensor data is read in place. Every multi-byte field is little-endian
 * (the only byte order ggml writes and the only one ferrox runs on).
 *
 * ACTIVATIONS. These types multiply quantized activations, as llama.cpp
 * does: integer dot products are exact, so a block's integer work has no
 * order to fix and runs at 32-64 multiply-adds an instruction; only one
 * or two fmas per weight block are floating point, in the order below.
 * Two activation formats (fx_xq_kind):
 *   FX_XQ_32  blocks of 32 (the Q8_0 rule and layout of matmul_impl.h,
 *             fx_xq_row_bytes): for the 32-element types.
 *   FX_XQ_256 blocks of 256 (layout and rule below): for the K-quants
 *             and IQ4_XS, whose scales come per 256-element super-block.
 *
 * THE REDUCTION ORDER of y[m][n] for every type here. qx[i] are row m's
 * activation quants, dx(b) its block's scale; a weight block b gives
 * integers P (and for types with a min, M) computed exactly; then
 *   acc = +0.0f;
 *   for b = 0, 1, ..., K/block - 1 in increasing order:
 *       acc = fmaf(f32(d_b) * dx(b), (float)P_b, acc);
 *       [types with a min:]
 *       acc = fmaf(-(f32(dmin_b) * dx(b)), (float)M_b, acc);
 *   y[m][n] = acc;
 * Each product f32(d) * dx is one rounding; (float)P rounds to nearest
 * even where |P| >= 2^24 (vcvtdq2ps under the default MXCSR does the
 * same). P and M per type, with q the weight's quant as the type's table
 * below gives it and j its sub-block:
 *   Q4_0     P = sum_i (q_i - 8) qx_i
 *   Q4_1     P = sum_i q_i qx_i;  "dmin" = m (the block's min, f16),
 *            M = -sum_i qx_i      (so the second fma adds +m dx sum qx)
 *   Q5_0     P = sum_i (q_i - 16) qx_i
 *   Q5_1     as Q4_1 with 5-bit q
 *   IQ4_NL   P = sum_i kv[q_i] qx_i       (kv: fx_iq4nl_values)
 *   Q2_K     P = sum_j sc_j sum_{i in j} q_i qx_i;
 *            M = sum_j mn_j sum_{i in j} qx_i   (16 sub-blocks of 16)
 *   Q3_K     P = sum_j sc_j sum_{i in j} q_i qx_i, q in -4..3, sc in
 *            -32..31 (16 sub-blocks of 16)
 *   Q4_K     P, M as Q2_K over 8 sub-blocks of 32, 6-bit sc and mn
 *   Q5_K     as Q4_K with 5-bit q
 *   Q6_K     P = sum_j sc_j sum_{i in j} (q_i - 32) qx_i (16 of 16,
 *            int8 sc)
 *   IQ4_XS   P = sum_j (ls_j - 32) sum_{i in j} kv[q_i] qx_i (8 of 32)
 * Every |P| and |M| fits an int32 (the largest, Q6_K: 16 * 128 * 16 * 32
 * * 127 < 2^28). A vector form may sum the integers in any order and any
 * split (q * qx minus 8 * sum qx, for instance): integer addition is
 * exact, so every path gives these bits.
 *
 * FX_XQ_256 row layout, K elements (B = K / 256 blocks), 64-byte aligned:
 *   int8_t  q[K]        at 0          the quants
 *   int16_t bsum[K/16]  at K          each 16 quants' sum
 *   float   d[B]        at K + K/8    the scales dx
 *   int16_t bsum32[K/32] at K + K/8 + K/64
 *                                     each 32 quants' sum (bsum's pairs):
 *                                     one vpmaddwd takes two sub-blocks'
 *                                     mins of Q4_K and Q5_K against them
 * and the rule per block of 256: amax = max |x[i]|; amax inf or NaN: dx =
 * NaN, q = 0; amax < 2^-100: dx = 0, q = 0; else dx = amax / 127, id =
 * 127 / amax (each one f32 division), q[i] = nearbyint(x[i] * id), ties
 * to even (the FX_XQ_32 rule over 256 elements).
 */
#ifndef FX_KERNELS_QUANTS_H
#define FX_KERNELS_QUANTS_H

#include "matmul_impl.h"

#include <string.h>

#define FX_QK32 32   /* elements per block: Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL */
#define FX_QK_K 256  /* elements per super-block: K-quants, IQ4_XS */
#define FX_K_SCALE_SIZE 12

/* In each struct, q_i and sub-block scales as ggml's dequantize_row_*
 * reads them; the quantization files say exactly how in their comments. */

typedef struct fx_block_q4_0 { /* w = d * (q - 8) */
    uint16_t d;
    uint8_t qs[FX_QK32 / 2]; /* q_i (i < 16) low nibble of qs[i], q_{i+16} high */
} fx_block_q4_0;

typedef struct fx_block_q4_1 { /* w = d * q + m */
    uint16_t d, m;
    uint8_t qs[FX_QK32 / 2];
} fx_block_q4_1;

typedef struct fx_block_q5_0 { /* w = d * (q - 16), bit 4 of q_i: qh bit i */
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[FX_QK32 / 2];
} fx_block_q5_0;

typedef struct fx_block_q5_1 { /* w = d * q + m */
    uint16_t d, m;
    uint8_t qh[4];
    uint8_t qs[FX_QK32 / 2];
} fx_block_q5_1;

typedef struct fx_block_iq4_nl { /* w = d * kv[q] */
    uint16_t d;
    uint8_t qs[FX_QK32 / 2];
} fx_block_iq4_nl;

typedef struct fx_block_q2_K { /* w = d * sc * q - dmin * mn */
    uint8_t scales[FX_QK_K / 16]; /* sc low nibble, mn high nibble */
    uint8_t qs[FX_QK_K / 4];
    uint16_t d, dmin;
} fx_block_q2_K;

typedef struct fx_block_q3_K { /* w = d * (sc - 32) * q */
    uint8_t hmask[FX_QK_K / 8];
    uint8_t qs[FX_QK_K / 4];
    uint8_t scales[12];
    uint16_t d;
} fx_block_q3_K;

typedef struct fx_block_q4_K { /* w = d * sc * q - dmin * mn */
    uint16_t d, dmin;
    uint8_t scales[FX_K_SCALE_SIZE];
    uint8_t qs[FX_QK_K / 2];
} fx_block_q4_K;

typedef struct fx_block_q5_K {
    uint16_t d, dmin;
    uint8_t scales[FX_K_SCALE_SIZE];
    uint8_t qh[FX_QK_K / 8];
    uint8_t qs[FX_QK_K / 2];
} fx_block_q5_K;

typedef struct fx_block_q6_K { /* w = d * sc * (q - 32) */
    uint8_t ql[FX_QK_K / 2];
    uint8_t qh[FX_QK_K / 4];
    int8_t scales[FX_QK_K / 16];
    uint16_t d;
} fx_block_q6_K;

typedef struct fx_block_iq4_xs { /* w = d * (ls - 32) * kv[q] */
    uint16_t d;
    uint16_t scales_h;
    uint8_t scales_l[FX_QK_K / 64];
    uint8_t qs[FX_QK_K / 2];
} fx_block_iq4_xs;

/* IQ4_NL's and IQ4_XS's 16 non-linear levels. */
extern const int8_t fx_iq4nl_values[16];

typedef enum fx_xq_kind {
    FX_XQ_NONE = 0, /* the float types: x is read as it is */
    FX_XQ_32 = 1,
    FX_XQ_256 = 2
} fx_xq_kind;

/* FX_XQ_256's bytes per row of k elements (k % 256 == 0). */
static inline size_t fx_xq256_row_bytes(size_t k) {
    return (k + k / 8 + k / 64 + k / 16 + 63) & ~(size_t)63;
}

/* Where a row's bsum32 starts. */
static inline size_t fx_xq256_bsum32_at(size_t k) { return k + k / 8 + k / 64; }

/* Block b's bsum32 from its bsum, in row (|sum| <= 32 * 127). */
static inline void fx_xq256_pair_sums(uint8_t *row, size_t k, size_t b) {
    for (size_t j = 0; j < FX_QK_K / 32; j++) {
        int16_t s[2];
        memcpy(s, row + k + 2 * (FX_QK_K / 16 * b + 2 * j), sizeof s);
        const int16_t t = (int16_t)(s[0] + s[1]);
        memcpy(row + fx_xq256_bsum32_at(k) + 2 * (FX_QK_K / 32 * b + j), &t,
               sizeof t);
    }
}
void fx_xq256_portable(const float *x, size_t ldx, size_t m, size_t k,
                       uint8_t *xq, size_t ld);
/* NULL where the AVX2 code is not compiled in. Same bytes. */
fx_xq_fn fx_xq256_avx2(void);

/* Exact dequantization of k elements (k a multiple of the block), in
 * ggml's float operations and order (dequantize_row_*). */
typedef void (*fx_dequant_fn)(float *out, const void *blocks, size_t k);
/* A reference quantizer of k elements (whole blocks): its error against
 * the input, per tensor, is no worse than llama.cpp's quantize_row_*_ref
 * without an importance matrix. Deterministic: plain scalar code. */
typedef void (*fx_quant_fn)(void *out, const float *in, size_t k);

/* Each family file's functions, one pair per type (the table below
 * names them): quant_legacy.c Q4_0, Q4_1, Q5_0, Q5_1; quant_kquants.c
 * Q2_K to Q6_K; quant_iq4.c IQ4_NL, IQ4_XS. */
#define FX_QUANT_FNS(t)                                                      \
    void fx_dequant_##t(float *out, const void *blocks, size_t k);           \
    void fx_quantize_##t(void *out, const float *in, size_t k);
FX_QUANT_FNS(q4_0)
FX_QUANT_FNS(q4_1)
FX_QUANT_FNS(q5_0)
FX_QUANT_FNS(q5_1)
FX_QUANT_FNS(q2_K)
FX_QUANT_FNS(q3_K)
FX_QUANT_FNS(q4_K)
FX_QUANT_FNS(q5_K)
FX_QUANT_FNS(q6_K)
FX_QUANT_FNS(iq4_nl)
FX_QUANT_FNS(iq4_xs)
#undef FX_QUANT_FNS

typedef struct fx_qtype {
    fx_wtype type;
    const char *name;        /* ggml's: "q4_K" */
    uint32_t block_elems;    /* 32 or 256 */
    uint32_t block_bytes;
    fx_xq_kind xq;
    fx_dequant_fn dequant;
    fx_quant_fn quantize;
} fx_qtype;

/* The entry of a block-quantized type of this file, or NULL (the float
 * types, Q8_0 and anything unknown). */
const fx_qtype *fx_qtype_of(fx_wtype t);

/* ---- 16-row groups (FX_WTYPE_QR16) ----
 *
 * Why: the AVX-512 kernels give each of 16 rows a 32-bit lane, so a
 * block's bytes must arrive as "dword i of rows 0..15" in one vector. In
 * the GGUF layout that is a transpose per block in registers (fx_qt64:
 * as many shuffles as the block has loads, and more), and at one x row
 * the transposes, not memory, set the speed. Stored transposed, the same
 * vectors are plain loads. AVX2 reads a line's two halves as rows 0-7
 * and 8-15 (qdot_avx2_r16.c): its per-row scale decoding and horizontal
 * sums on GGUF rows cost it the same way.
 *
 * Layout, N rows of R bytes: rows in groups of 16, group g at byte 16 g R
 * (where its first row is in GGUF, so the matrix keeps its size); rows
 * after the last full group stay as they are. Each row is cut into units
 * of U bytes (a block; 8 blocks for the 32-element types, so each unit
 * starts on a dword) and a group holds its rows' unit u at 16 u U: the
 * unit's whole dwords w = 0, 4, ... as 64-byte lines (row r's bytes
 * w..w+3 at 16 w + 4 r), then its last U mod 4 bytes of each row in row
 * order (Q6_K's d: 16 halves). So the field at byte o of every row (o a
 * dword of the unit) is the 64 bytes at 16 o from the group, and a unit's
 * tail bytes at 16 o + (U mod 4) r. Q6_K's 192 bytes of quants are
 * also rearranged per block before that, so that three of every four
 * quant vectors are one mask: with q_e the 6-bit quant of element e,
 * byte 64 i + e (i < 3, e < 64) holds q_{64 i + e} in its low 6 bits and
 * bits 2i, 2i + 1 of q_{192 + e} in its top 2 (scales and d stay where
 * they are). Q3_K (its scales straddle a dword)
 * and 32-element rows of blocks not a multiple of 8 are not laid out so
 * (fx_qr16_fits). */

/* Bytes a row's unit spans in 16-row groups of block type t. */
size_t fx_qr16_unit(fx_wtype t);
/* Whether block type t with rows of k elements can be laid out so. */
bool fx_qr16_fits(fx_wtype t, size_t k);
/* Row i of the n-row matrix w (block type t, in 16-row groups) into row,
 * in the GGUF layout. */
void fx_qr16_row(void *row, const void *w, fx_wtype t, size_t n, size_t k,
                 size_t i);
/* The kernel for FX_WTYPE_QR16 jobs on ISAs without their own: each row
 * copied back (fx_qr16_row) into the scratch, then job->qr16_rows on it
 * (a portable or AVX2 kernel, which take no scratch of their own). */
void fx_qr16_range_rows(const fx_mm_job *job, size_t n0, size_t n1,
                        float *scratch);

/* The group kernels prefetch a later group while they read one: rows
 * [at, at + rows) of the matrix w (n rows of rb bytes) as n_slices slices
 * of whole lines, slice i (a block's, or a unit's) at *pf + i * *pf_step.
 * Whole lines run past the rows, so at the matrix's end the slices start
 * that much earlier: every one is inside the matrix. */
static inline void fx_qr16_pf_slices(const uint8_t *w, size_t n, size_t rb,
                                     size_t at, size_t rows, size_t n_slices,
                                     const uint8_t **pf, size_t *pf_step) {
    *pf_step = ((rows * rb + n_slices - 1) / n_slices + 63) & ~(size_t)63;
    const size_t size = n * rb, span = n_slices * *pf_step, start = at * rb;
    *pf = w + (span <= size && start > size - span ? size - span : start);
}

/* At one x row the kernels issue a slice spread over the block's loop,
 * not all at its start (a burst of 36-53 prefetches fills the core's miss
 * queue and the block's own loads wait behind it), as two streams at
 * constant offsets from one pointer, no compare or branch a line: A, the
 * slice's first 32 lines, and B, its last nb. A full group's slice, 16
 * units (blocks) of `unit` bytes, has fx_qr16_pf_past(unit) lines past
 * 32; the streams are the whole slice when fx_qr16_pf_fits. */
static inline int fx_qr16_pf_past(size_t unit) {
    const int past = (int)((16 * unit + 63) / 64) - 32;
    return past > 0 ? past : 0;
}

static inline bool fx_qr16_pf_fits(const uint8_t *pf, size_t pf_step,
                                   int nb) {
    return pf && pf_step >= 32 * 64 && pf_step <= (32 + (size_t)nb) * 64;
}

/* Each ISA's kernel table: the matmul range of type t on job->xq (in
 * fx_qtype_of(t)->xq's format), or NULL where that ISA has no kernel for
 * it (matmul.c then takes the next ISA down; the portable table has them
 * all and is the definition). Same bits on every path. */
fx_mm_range_fn fx_qmm_portable(fx_wtype t);
fx_mm_range_fn fx_qmm_avx2(fx_wtype t);
fx_mm_range_fn fx_qmm_avx512(fx_wtype t);
/* The AVX-512 VNNI kernel of t | FX_WTYPE_QR16, or NULL. */
fx_mm_range_fn fx_qmm_avx512_qr16(fx_wtype t);
/* The AVX2 kernel of t | FX_WTYPE_QR16 (qdot_avx2_r16.c), or NULL. */
fx_mm_range_fn fx_qmm_avx2_qr16(fx_wtype t);

#endif /* FX_KERNELS_QUANTS_H */
