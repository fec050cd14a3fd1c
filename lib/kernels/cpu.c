/*
 * Which SIMD paths this CPU and OS can run, read from CPUID and XGETBV
 * directly: __builtin_cpu_supports would do, but clang before 15 does not
 * know "f16c" and refuses to compile the library at all.
 *
 * A feature counts only when the OS also saves its registers on a context
 * switch (XCR0): a CPU with AVX-512 under an OS or hypervisor that does not
 * enable the zmm state would fault on the first instruction.
 *
 * Every question about the CPU is answered here, for every target: where
 * the x86 paths are not compiled in (matmul_avx2.c and the others say
 * when), the answer is no, and the portable kernels serve every call.
 */
#include "matmul_impl.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <cpuid.h>
#include <stdint.h>

typedef struct cpu_features {
    int avx2, avx512, avx512_vnni;
} cpu_features;

static uint64_t read_xcr0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static cpu_features detect(void) {
    cpu_features f = {0, 0, 0};
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
    int fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, avx = (c >> 28) & 1,
        f16c = (c >> 29) & 1;
    if (!osxsave || !avx) return f;
    uint64_t xcr0 = read_xcr0();
    int ymm_state = (xcr0 & 0x6) == 0x6;           /* SSE + AVX state */
    int zmm_state = ymm_state && (xcr0 & 0xE0) == 0xE0; /* opmask, zmm */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
    int avx2 = (b >> 5) & 1, avx512f = (b >> 16) & 1, avx512dq = (b >> 17) & 1,
        avx512bw = (b >> 30) & 1, avx512vl = (b >> 31) & 1,
        avx512vnni = (c >> 11) & 1;
    f.avx2 = ymm_state && avx2 && fma && f16c;
    f.avx512 = f.avx2 && zmm_state && avx512f && avx512bw && avx512vl && avx512dq;
    f.avx512_vnni = f.avx512 && avx512vnni;
    return f;
}

bool fx_cpu_has_avx2(void) { return detect().avx2 != 0; }

unsigned fx_cpu_amd_family(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return 0;
    /* "AuthenticAMD" in ebx, edx, ecx */
    if (b != 0x68747541u || d != 0x69746e65u || c != 0x444d4163u) return 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    const unsigned base = (a >> 8) & 0xf, ext = (a >> 20) & 0xff;
    return base == 0xf ? base + ext : base;
}
bool fx_cpu_has_avx512(void) { return detect().avx512 != 0; }
bool fx_cpu_has_avx512_vnni(void) { return detect().avx512_vnni != 0; }

#else /* not x86-64 GCC/Clang: no x86 path exists to choose */

bool fx_cpu_has_avx2(void) { return false; }
bool fx_cpu_has_avx512(void) { return false; }
bool fx_cpu_has_avx512_vnni(void) { return false; }
unsigned fx_cpu_amd_family(void) { return 0; }

#endif
