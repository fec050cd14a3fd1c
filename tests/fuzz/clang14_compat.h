/*
 * Force-included into the instrumented library copy of a FERROX_FUZZ build
 * when the compiler is clang older than 15, whose __builtin_cpu_supports
 * does not know "f16c" (lib/kernels/matmul_avx2.c fails to compile). The
 * fuzz build then runs the portable kernels, which is all the fuzz targets
 * need: they test parsing, tokenizing, text and the batcher's bookkeeping,
 * not the SIMD paths.
 */
#define __builtin_cpu_supports(feature) 0
