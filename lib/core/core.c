#include "core.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static void *libc_malloc(void *user, size_t size) {
    (void)user;
    return malloc(size);
}

static void *libc_realloc(void *user, void *ptr, size_t size) {
    (void)user;
    return realloc(ptr, size);
}

static void libc_free(void *user, void *ptr) {
    (void)user;
    free(ptr);
}

fx_status fx_alloc_init(fx_alloc *alloc, const fx_allocator *hooks) {
    int set = 0;
    if (hooks) set = (hooks->malloc_fn != NULL) + (hooks->realloc_fn != NULL) +
                     (hooks->free_fn != NULL);
    if (set != 0 && set != 3) return FX_ERR_INVALID_ARG;
    if (set == 3) {
        alloc->hooks = *hooks;
    } else {
        alloc->hooks.malloc_fn = libc_malloc;
        alloc->hooks.realloc_fn = libc_realloc;
        alloc->hooks.free_fn = libc_free;
        alloc->hooks.user = NULL;
    }
    return FX_OK;
}

void *fx_malloc(const fx_alloc *alloc, size_t size) {
    /* malloc(0) may return NULL, which callers would read as failure. */
    return alloc->hooks.malloc_fn(alloc->hooks.user, size ? size : 1);
}

void *fx_malloc_array(const fx_alloc *alloc, size_t count, size_t size) {
    uint64_t total;
    if (!fx_mul_u64(count, size, &total) || total > SIZE_MAX) return NULL;
    return fx_malloc(alloc, (size_t)total);
}

void *fx_calloc(const fx_alloc *alloc, size_t count, size_t size) {
    void *p = fx_malloc_array(alloc, count, size);
    if (p) memset(p, 0, count * size);
    return p;
}

void *fx_realloc(const fx_alloc *alloc, void *ptr, size_t size) {
    return alloc->hooks.realloc_fn(alloc->hooks.user, ptr, size ? size : 1);
}

void fx_free(const fx_alloc *alloc, void *ptr) {
    if (ptr) alloc->hooks.free_fn(alloc->hooks.user, ptr);
}

char *fx_strndup(const fx_alloc *alloc, const char *s, size_t len) {
    if (len == SIZE_MAX) return NULL;
    char *copy = fx_malloc(alloc, len + 1);
    if (!copy) return NULL;
    memcpy(copy, s, len);
    copy[len] = '\0';
    return copy;
}

fx_status fx_fail(fx_error *err, fx_status status, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return status;
}

void fx_error_clear(fx_error *err) {
    if (err) err->message[0] = '\0';
}

void fx_error_copy(const fx_error *err, char *buf, size_t size) {
    if (!buf || size == 0) return;
    size_t n = strlen(err->message);
    if (n >= size) n = size - 1;
    memcpy(buf, err->message, n);
    buf[n] = '\0';
}

void fx_log(const fx_logger *logger, fx_log_level level, const char *fmt, ...) {
    if (!logger || !logger->fn || level > logger->level) return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    logger->fn(logger->user, level, line);
}

void fx_struct_init(void *p, size_t size) {
    memset(p, 0, size);
    if (size < sizeof(uint32_t)) return; /* no room even for struct_size */
    /* A size past 4 GiB cannot be stored; UINT32_MAX still reads as "newer
     * than this library", whose unknown bytes are all zero. */
    uint32_t v = size > UINT32_MAX ? UINT32_MAX : (uint32_t)size;
    memcpy(p, &v, sizeof v);
}

fx_status fx_params_copy(void *dst, size_t known_size, const void *src,
                         size_t min_size, fx_error *err, const char *what) {
    uint32_t given;
    memcpy(&given, src, sizeof given);
    if (given < min_size)
        return fx_fail(err, FX_ERR_INVALID_ARG,
                       "%s: struct_size %u is smaller than the oldest known "
                       "layout (%zu bytes); call the _init function first",
                       what, given, min_size);
    if (given > known_size) {
        const unsigned char *tail = (const unsigned char *)src + known_size;
        for (size_t i = 0; i < given - known_size; i++)
            if (tail[i] != 0)
                return fx_fail(err, FX_ERR_UNSUPPORTED,
                               "%s: struct_size %u is newer than this library "
                               "(%zu bytes) and sets a field it does not know "
                               "(byte %zu)",
                               what, given, known_size, known_size + i);
        given = (uint32_t)known_size;
    }
    /* struct_size itself stays the library's own. */
    memcpy((char *)dst + sizeof(uint32_t), (const char *)src + sizeof(uint32_t),
           given - sizeof(uint32_t));
    return FX_OK;
}

#define FX_HUGE_PAGE ((size_t)2 << 20)

void *fx_malloc_huge(const fx_alloc *alloc, size_t bytes, void **raw) {
    *raw = NULL;
    if (bytes == 0 || bytes > SIZE_MAX - FX_HUGE_PAGE) return NULL;
    /* Less than a huge page: a cache line boundary is enough. */
    const size_t align = bytes < FX_HUGE_PAGE ? 64 : FX_HUGE_PAGE;
    void *p = fx_malloc(alloc, bytes + align);
    if (!p) return NULL;
    *raw = p;
    uint8_t *at = (uint8_t *)(((uintptr_t)p + align - 1) &
                              ~(uintptr_t)(align - 1));
#ifdef MADV_HUGEPAGE
    if (align == FX_HUGE_PAGE) (void)madvise(at, bytes, MADV_HUGEPAGE);
#endif
    return at;
}

size_t fx_utf8_encode(uint32_t cp, unsigned char *out) {
    if (cp < 0x80) {
        out[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (unsigned char)(0xC0 | (cp >> 6));
        out[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (unsigned char)(0xE0 | (cp >> 12));
        out[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (unsigned char)(0xF0 | (cp >> 18));
    out[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}
