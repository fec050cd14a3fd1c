/*
 * The block-quantized types as one table (quants.h): what convert.c and
 * matmul.c ask about a type instead of switching on it.
 */
#include "quants.h"

#include <stddef.h>

/* ggml's block sizes (ggml-common.h): the structs must have no padding,
 * since a GGUF file's tensor data is read in place. */
_Static_assert(sizeof(fx_block_q4_0) == 18, "q4_0 block");
_Static_assert(sizeof(fx_block_q4_1) == 20, "q4_1 block");
_Static_assert(sizeof(fx_block_q5_0) == 22, "q5_0 block");
_Static_assert(sizeof(fx_block_q5_1) == 24, "q5_1 block");
_Static_assert(sizeof(fx_block_iq4_nl) == 18, "iq4_nl block");
_Static_assert(sizeof(fx_block_q2_K) == 84, "q2_K block");
_Static_assert(sizeof(fx_block_q3_K) == 110, "q3_K block");
_Static_assert(sizeof(fx_block_q4_K) == 144, "q4_K block");
_Static_assert(sizeof(fx_block_q5_K) == 176, "q5_K block");
_Static_assert(sizeof(fx_block_q6_K) == 210, "q6_K block");
_Static_assert(sizeof(fx_block_iq4_xs) == 136, "iq4_xs block");
/* convert.c copies a block into 256 bytes */
_Static_assert(sizeof(fx_block_q6_K) <= 256, "largest block");

#define FX_QTYPE(T, name, blk, elems, xq)                                    \
    {FX_WTYPE_##T, #name, elems, sizeof(blk), xq, fx_dequant_##name,          \
     fx_quantize_##name}

static const fx_qtype qtypes[] = {
    FX_QTYPE(Q4_0, q4_0, fx_block_q4_0, FX_QK32, FX_XQ_32),
    FX_QTYPE(Q4_1, q4_1, fx_block_q4_1, FX_QK32, FX_XQ_32),
    FX_QTYPE(Q5_0, q5_0, fx_block_q5_0, FX_QK32, FX_XQ_32),
    FX_QTYPE(Q5_1, q5_1, fx_block_q5_1, FX_QK32, FX_XQ_32),
    FX_QTYPE(IQ4_NL, iq4_nl, fx_block_iq4_nl, FX_QK32, FX_XQ_32),
    FX_QTYPE(Q2_K, q2_K, fx_block_q2_K, FX_QK_K, FX_XQ_256),
    FX_QTYPE(Q3_K, q3_K, fx_block_q3_K, FX_QK_K, FX_XQ_256),
    FX_QTYPE(Q4_K, q4_K, fx_block_q4_K, FX_QK_K, FX_XQ_256),
    FX_QTYPE(Q5_K, q5_K, fx_block_q5_K, FX_QK_K, FX_XQ_256),
    FX_QTYPE(Q6_K, q6_K, fx_block_q6_K, FX_QK_K, FX_XQ_256),
    FX_QTYPE(IQ4_XS, iq4_xs, fx_block_iq4_xs, FX_QK_K, FX_XQ_256),
};

const fx_qtype *fx_qtype_of(fx_wtype t) {
    for (size_t i = 0; i < sizeof qtypes / sizeof *qtypes; i++)
        if (qtypes[i].type == t) return &qtypes[i];
    return NULL;
}
