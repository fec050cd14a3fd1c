/*
 * Typed access to GGUF metadata. A getter names the key and its offset in
 * every failure, so a user with a broken file learns which entry to fix.
 */
#include "gguf.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static uint64_t load_le(const uint8_t *p, unsigned bytes) {
    uint64_t v = 0;
    for (unsigned i = 0; i < bytes; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static bool is_int_type(uint32_t t) {
    return t <= FX_GGUF_I32 || t == FX_GGUF_U64 || t == FX_GGUF_I64;
}

static bool is_signed_type(uint32_t t) {
    return t == FX_GGUF_I8 || t == FX_GGUF_I16 || t == FX_GGUF_I32 ||
           t == FX_GGUF_I64;
}

static unsigned int_bytes(uint32_t t) {
    switch (t) {
    case FX_GGUF_U8: case FX_GGUF_I8: return 1;
    case FX_GGUF_U16: case FX_GGUF_I16: return 2;
    case FX_GGUF_U32: case FX_GGUF_I32: return 4;
    default: return 8;
    }
}

/* Reads an integer of any width and signedness at p. *negative tells a
 * negative signed value apart from a huge unsigned one. */
static uint64_t load_int(const uint8_t *p, uint32_t type, bool *negative) {
    unsigned bytes = int_bytes(type);
    uint64_t raw = load_le(p, bytes);
    *negative = false;
    if (is_signed_type(type) && (raw >> (8 * bytes - 1)) & 1) {
        *negative = true;
        if (bytes < 8) raw |= ~(uint64_t)0 << (8 * bytes); /* sign-extend */
    }
    return raw;
}

static double load_float(const uint8_t *p, uint32_t type) {
    if (type == FX_GGUF_F32) {
        uint32_t bits = (uint32_t)load_le(p, 4);
        float f;
        memcpy(&f, &bits, sizeof f);
        return f;
    }
    uint64_t bits = load_le(p, 8);
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

static fx_status find_kv(const fx_gguf *g, const char *key, bool optional,
                         const fx_gguf_kv **out, fx_error *err) {
    *out = fx_gguf_find(g, key);
    if (*out || optional) return FX_OK;
    return fx_fail(err, FX_ERR_MISSING, "required key '%s' is missing", key);
}

static fx_status wrong_type(const fx_gguf_kv *kv, const char *wanted,
                            fx_error *err) {
    return fx_fail(err, FX_ERR_BAD_TYPE,
                   "key '%s' at offset %llu has type %s, expected %s",
                   kv->key, (unsigned long long)kv->offset,
                   kv->type == FX_GGUF_ARRAY ? "array"
                                             : fx_gguf_vtype_name(kv->type),
                   wanted);
}

static fx_status get_uint(const fx_gguf *g, const char *key, uint64_t max,
                          bool optional, uint64_t *out, fx_error *err) {
    const fx_gguf_kv *kv;
    fx_status st = find_kv(g, key, optional, &kv, err);
    if (st != FX_OK || !kv) return st;
    if (!is_int_type(kv->type)) return wrong_type(kv, "an integer", err);
    bool negative;
    uint64_t v = load_int(kv->data, kv->type, &negative);
    if (negative || v > max)
        return fx_fail(err, FX_ERR_TOO_LARGE,
                       "key '%s' at offset %llu: value %s%" PRIu64
                       " is out of range (0 to %" PRIu64 ")",
                       key, (unsigned long long)kv->offset,
                       negative ? "-" : "", negative ? (uint64_t)0 - v : v,
                       max);
    *out = v;
    return FX_OK;
}

fx_status fx_gguf_get_u32(const fx_gguf *g, const char *key, uint32_t *out,
                          fx_error *err) {
    uint64_t v = 0;
    fx_status st = get_uint(g, key, UINT32_MAX, false, &v, err);
    if (st == FX_OK) *out = (uint32_t)v;
    return st;
}

fx_status fx_gguf_get_u32_opt(const fx_gguf *g, const char *key, uint32_t *out,
                              fx_error *err) {
    uint64_t v = *out;
    fx_status st = get_uint(g, key, UINT32_MAX, true, &v, err);
    if (st == FX_OK) *out = (uint32_t)v;
    return st;
}

fx_status fx_gguf_get_u64(const fx_gguf *g, const char *key, uint64_t *out,
                          fx_error *err) {
    return get_uint(g, key, UINT64_MAX, false, out, err);
}

static fx_status get_f32(const fx_gguf *g, const char *key, bool optional,
                         float *out, fx_error *err) {
    const fx_gguf_kv *kv;
    fx_status st = find_kv(g, key, optional, &kv, err);
    if (st != FX_OK || !kv) return st;
    if (kv->type != FX_GGUF_F32 && kv->type != FX_GGUF_F64)
        return wrong_type(kv, "f32", err);
    *out = (float)load_float(kv->data, kv->type);
    return FX_OK;
}

fx_status fx_gguf_get_f32(const fx_gguf *g, const char *key, float *out,
                          fx_error *err) {
    return get_f32(g, key, false, out, err);
}

fx_status fx_gguf_get_f32_opt(const fx_gguf *g, const char *key, float *out,
                              fx_error *err) {
    return get_f32(g, key, true, out, err);
}

fx_status fx_gguf_get_bool_opt(const fx_gguf *g, const char *key, bool *out,
                               fx_error *err) {
    const fx_gguf_kv *kv;
    fx_status st = find_kv(g, key, true, &kv, err);
    if (st != FX_OK || !kv) return st;
    if (kv->type != FX_GGUF_BOOL) return wrong_type(kv, "bool", err);
    *out = kv->data[0] != 0;
    return FX_OK;
}

static fx_status get_str(const fx_gguf *g, const char *key, bool optional,
                         fx_gguf_str *out, fx_error *err) {
    const fx_gguf_kv *kv;
    fx_status st = find_kv(g, key, optional, &kv, err);
    if (st != FX_OK || !kv) return st;
    if (kv->type != FX_GGUF_STRING) return wrong_type(kv, "string", err);
    *out = kv->str;
    return FX_OK;
}

fx_status fx_gguf_get_str(const fx_gguf *g, const char *key, fx_gguf_str *out,
                          fx_error *err) {
    return get_str(g, key, false, out, err);
}

fx_status fx_gguf_get_str_opt(const fx_gguf *g, const char *key,
                              fx_gguf_str *out, fx_error *err) {
    return get_str(g, key, true, out, err);
}

fx_status fx_gguf_get_array(const fx_gguf *g, const char *key,
                            uint32_t elem_type, const fx_gguf_kv **out,
                            fx_error *err) {
    const fx_gguf_kv *kv;
    fx_status st = find_kv(g, key, false, &kv, err);
    if (st != FX_OK) return st;
    if (kv->type != FX_GGUF_ARRAY) return wrong_type(kv, "an array", err);
    if (elem_type != FX_GGUF_VTYPE_COUNT && kv->elem_type != elem_type)
        return fx_fail(err, FX_ERR_BAD_TYPE,
                       "key '%s' at offset %llu is an array of %s, expected "
                       "an array of %s",
                       key, (unsigned long long)kv->offset,
                       fx_gguf_vtype_name(kv->elem_type),
                       fx_gguf_vtype_name(elem_type));
    *out = kv;
    return FX_OK;
}

static unsigned elem_size(uint32_t t) {
    if (t == FX_GGUF_F32) return 4;
    if (t == FX_GGUF_F64) return 8;
    if (t == FX_GGUF_BOOL) return 1;
    return int_bytes(t);
}

int64_t fx_gguf_array_int(const fx_gguf_kv *kv, uint64_t i) {
    bool negative;
    const uint8_t *p = kv->data + i * elem_size(kv->elem_type);
    if (kv->elem_type == FX_GGUF_BOOL) return p[0];
    return (int64_t)load_int(p, kv->elem_type, &negative);
}

double fx_gguf_array_float(const fx_gguf_kv *kv, uint64_t i) {
    return load_float(kv->data + i * elem_size(kv->elem_type), kv->elem_type);
}

void fx_gguf_array_strings(const fx_gguf_kv *kv, fx_gguf_str *out) {
    /* The reader already walked these strings, so every length is known to
     * fit; this walk repeats it without checks. */
    const uint8_t *p = kv->data;
    for (uint64_t i = 0; i < kv->count; i++) {
        uint64_t len = load_le(p, 8);
        out[i].ptr = (const char *)p + 8;
        out[i].len = len;
        p += 8 + len;
    }
}

/* ---- formatting ---- */

typedef struct text_out {
    char *buf;
    size_t size;
    size_t used; /* bytes the full text needs, excluding the NUL */
} text_out;

static void put_bytes(text_out *t, const char *s, size_t n) {
    if (t->used < t->size) {
        size_t room = t->size - t->used;
        memcpy(t->buf + t->used, s, n < room ? n : room);
    }
    t->used += n;
}

static void put_fmt(text_out *t, const char *fmt, ...) FX_PRINTF(2, 3);
static void put_fmt(text_out *t, const char *fmt, ...) {
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0) put_bytes(t, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* Quoted with C escapes; long strings are cut at 80 bytes. */
static void put_quoted(text_out *t, const char *s, uint64_t len) {
    const uint64_t limit = 80;
    put_bytes(t, "\"", 1);
    for (uint64_t i = 0; i < len && i < limit; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') {
            char esc[2] = {'\\', (char)ch};
            put_bytes(t, esc, 2);
        } else if (ch == '\n') {
            put_bytes(t, "\\n", 2);
        } else if (ch < 0x20 || ch == 0x7f) {
            put_fmt(t, "\\x%02x", ch);
        } else {
            put_bytes(t, (const char *)&ch, 1);
        }
    }
    put_bytes(t, "\"", 1);
    if (len > limit) put_fmt(t, "... (%" PRIu64 " bytes)", len);
}

static void put_scalar(text_out *t, uint32_t type, const uint8_t *p) {
    bool negative;
    if (type == FX_GGUF_BOOL) {
        put_fmt(t, "%s", p[0] ? "true" : "false");
    } else if (type == FX_GGUF_F32 || type == FX_GGUF_F64) {
        put_fmt(t, "%.9g", load_float(p, type));
    } else {
        uint64_t v = load_int(p, type, &negative);
        if (negative) put_fmt(t, "%" PRId64, (int64_t)v);
        else put_fmt(t, "%" PRIu64, v);
    }
}

size_t fx_gguf_format_value(const fx_gguf_kv *kv, char *buf, size_t buf_size) {
    text_out t = {buf, buf_size, 0};
    if (kv->type == FX_GGUF_STRING) {
        put_quoted(&t, kv->str.ptr, kv->str.len);
    } else if (kv->type != FX_GGUF_ARRAY) {
        put_scalar(&t, kv->type, kv->data);
    } else {
        /* Arrays are summarized: a vocabulary has 100k+ entries. */
        const uint64_t shown = 3;
        put_fmt(&t, "[%s x %" PRIu64 "", fx_gguf_vtype_name(kv->elem_type),
                kv->count);
        const uint8_t *p = kv->data;
        for (uint64_t i = 0; i < kv->count && i < shown; i++) {
            put_bytes(&t, i == 0 ? ": " : ", ", 2);
            if (kv->elem_type == FX_GGUF_STRING) {
                uint64_t len = load_le(p, 8);
                put_quoted(&t, (const char *)p + 8, len);
                p += 8 + len;
            } else {
                put_scalar(&t, kv->elem_type, p);
                p += elem_size(kv->elem_type);
            }
        }
        if (kv->count > shown) put_bytes(&t, ", ...", 5);
        put_bytes(&t, "]", 1);
    }
    if (buf_size > 0) buf[t.used < buf_size ? t.used : buf_size - 1] = '\0';
    return t.used + 1;
}
