/*
 * core: the pieces every layer uses -- allocator hooks, error messages,
 * the log hook, struct_size handling and overflow-checked arithmetic.
 * Nothing here is global; every function takes the state it works on.
 */
#ifndef FX_CORE_H
#define FX_CORE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ferrox.h"

#if defined(__GNUC__) || defined(__clang__)
#  define FX_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#  define FX_PRINTF(fmt, args)
#endif

/* ---- allocation ---- */

/* A handle's allocator, copied from the caller's fx_allocator at create
 * time so later changes by the caller cannot reach in. */
typedef struct fx_alloc {
    fx_allocator hooks; /* all three functions set (the libc ones if the
                           caller gave none) */
} fx_alloc;

/* Validates the caller's hooks (all or none) and fills *alloc. */
fx_status fx_alloc_init(fx_alloc *alloc, const fx_allocator *hooks);

void *fx_malloc(const fx_alloc *alloc, size_t size);
void *fx_calloc(const fx_alloc *alloc, size_t count, size_t size);
/* count * size with an overflow check; NULL on overflow as on failure. */
void *fx_malloc_array(const fx_alloc *alloc, size_t count, size_t size);
void *fx_realloc(const fx_alloc *alloc, void *ptr, size_t size);
void fx_free(const fx_alloc *alloc, void *ptr);
/* `bytes` on a 2 MiB boundary (64 bytes if less than that), not zeroed,
 * with transparent huge pages asked for (madvise MADV_HUGEPAGE) before any of it is touched, for the
 * big buffers a step streams (repacked weights, the KV cache): 512 times
 * fewer page faults while it is first written, fewer TLB misses, and
 * hardware prefetchers that run on across 2 MiB instead of stopping at
 * every 4 KiB page. Only a hint: a host allocator's memory or a system
 * without THP just ignores it. *raw gets what to fx_free; NULL on
 * failure or overflow. */
void *fx_malloc_huge(const fx_alloc *alloc, size_t bytes, void **raw);
/* A NUL-terminated copy of len bytes of s. */
char *fx_strndup(const fx_alloc *alloc, const char *s, size_t len);

/* ---- errors ---- */

#define FX_ERRMSG_SIZE 512

/* The last failure's message for one handle (or one load). */
typedef struct fx_error {
    char message[FX_ERRMSG_SIZE];
} fx_error;

/* Sets err's message (printf-style) and returns status, so a failing path
 * reads `return fx_fail(err, FX_ERR_X, "...", ...);`. err may be NULL. */
fx_status fx_fail(fx_error *err, fx_status status, const char *fmt, ...)
    FX_PRINTF(3, 4);
void fx_error_clear(fx_error *err);
/* The message into a caller's buffer, NUL-terminated and truncated to
 * size; nothing when buf is NULL or size 0. */
void fx_error_copy(const fx_error *err, char *buf, size_t size);

/* ---- logging ---- */

typedef struct fx_logger {
    fx_log_fn fn;
    void *user;
    fx_log_level level;
} fx_logger;

void fx_log(const fx_logger *logger, fx_log_level level, const char *fmt, ...)
    FX_PRINTF(3, 4);

/* ---- versioned parameter structs ---- */

/* Copies a caller's struct whose first field is uint32_t struct_size into
 * dst (already filled with defaults, known_size bytes long).
 *   struct_size < min_size: the caller's struct predates the first public
 *     version -- FX_ERR_INVALID_ARG.
 *   min_size <= struct_size <= known_size: an older caller; the fields it
 *     knows are copied, the rest keep their defaults.
 *   struct_size > known_size: a newer caller; accepted only if every byte
 *     this library does not know is zero (nothing it asks for is ignored),
 *     else FX_ERR_UNSUPPORTED. */
fx_status fx_params_copy(void *dst, size_t known_size, const void *src,
                         size_t min_size, fx_error *err, const char *what);

/* The body of every fx_*_init_sized: zeroes the caller's `size` bytes (all
 * of them, also past this library's sizeof, so a newer host's members this
 * library does not know read as 0 = default) and stores `size` in the
 * leading uint32_t struct_size when it fits. Never writes past `size`: the
 * caller's struct may be an older, smaller layout than ours. */
void fx_struct_init(void *p, size_t size);

/* Writes code point cp (at most U+10FFFF) as UTF-8 into out (4 bytes of
 * room); returns the length. */
size_t fx_utf8_encode(uint32_t cp, unsigned char *out);

/* Sets one member to its default only if the member lies wholly inside the
 * caller's `size` bytes (see fx_struct_init). */
#define FX_INIT_MEMBER(p, size, type, member, value)                        \
    do {                                                                    \
        if (offsetof(type, member) + sizeof(((type *)0)->member) <= (size)) \
            (p)->member = (value);                                          \
    } while (0)


/* ---- checked arithmetic ---- */

static inline bool fx_add_u64(uint64_t a, uint64_t b, uint64_t *out) {
#if defined(__GNUC__) || defined(__clang__)
    return !__builtin_add_overflow(a, b, out);
#else
    if (a > UINT64_MAX - b) return false;
    *out = a + b;
    return true;
#endif
}

static inline bool fx_mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
#if defined(__GNUC__) || defined(__clang__)
    return !__builtin_mul_overflow(a, b, out);
#else
    if (a != 0 && b > UINT64_MAX / a) return false;
    *out = a * b;
    return true;
#endif
}

/* Rounds x up to a multiple of align (a power of two); false on overflow. */
static inline bool fx_align_up_u64(uint64_t x, uint64_t align, uint64_t *out) {
    uint64_t bumped;
    if (!fx_add_u64(x, align - 1, &bumped)) return false;
    *out = bumped & ~(align - 1);
    return true;
}

#endif /* FX_CORE_H */
