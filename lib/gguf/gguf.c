/*
 * Strict GGUF v2/v3 reader.
 *
 * Every parser CVE this class of code has had (llama.cpp: n_kv/n_tensors,
 * string lengths, array counts, tensor sizes, running totals, alignment)
 * came from trusting a number in the file before comparing it with the
 * bytes actually there. So: every read goes through `cursor_take`, which
 * refuses to step past the end; every count is bounded by the bytes left
 * before anything proportional to it is allocated; every product and sum
 * is overflow-checked.
 */
#include "gguf.h"

#include <errno.h>
#include <stdio.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- type tables ---- */

static const char *const vtype_names[FX_GGUF_VTYPE_COUNT] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32",
    "bool", "string", "array", "u64", "i64", "f64",
};

/* Bytes of one value of a fixed-size type; 0 for string and array. */
static const uint8_t vtype_sizes[FX_GGUF_VTYPE_COUNT] = {
    1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8,
};

const char *fx_gguf_vtype_name(uint32_t vtype) {
    return vtype < FX_GGUF_VTYPE_COUNT ? vtype_names[vtype] : "?";
}

typedef struct ggml_layout {
    const char *name;
    uint16_t block_elems; /* 0: id unused or removed from ggml */
    uint16_t block_bytes;
} ggml_layout;

/* ggml's type ids and block layouts. Ids 4, 5, 31-33 and 36-38 were
 * removed from ggml and are rejected like unknown ids. */
static const ggml_layout ggml_layouts[] = {
    [0] = {"f32", 1, 4},        [1] = {"f16", 1, 2},
    [2] = {"q4_0", 32, 18},     [3] = {"q4_1", 32, 20},
    [6] = {"q5_0", 32, 22},     [7] = {"q5_1", 32, 24},
    [8] = {"q8_0", 32, 34},     [9] = {"q8_1", 32, 36},
    [10] = {"q2_k", 256, 84},   [11] = {"q3_k", 256, 110},
    [12] = {"q4_k", 256, 144},  [13] = {"q5_k", 256, 176},
    [14] = {"q6_k", 256, 210},  [15] = {"q8_k", 256, 292},
    [16] = {"iq2_xxs", 256, 66}, [17] = {"iq2_xs", 256, 74},
    [18] = {"iq3_xxs", 256, 98}, [19] = {"iq1_s", 256, 50},
    [20] = {"iq4_nl", 32, 18},  [21] = {"iq3_s", 256, 110},
    [22] = {"iq2_s", 256, 82},  [23] = {"iq4_xs", 256, 136},
    [24] = {"i8", 1, 1},        [25] = {"i16", 1, 2},
    [26] = {"i32", 1, 4},       [27] = {"i64", 1, 8},
    [28] = {"f64", 1, 8},       [29] = {"iq1_m", 256, 56},
    [30] = {"bf16", 1, 2},      [34] = {"tq1_0", 256, 54},
    [35] = {"tq2_0", 256, 66},  [39] = {"mxfp4", 32, 17},
};

#define GGML_TYPE_SLOTS (sizeof ggml_layouts / sizeof ggml_layouts[0])

bool fx_ggml_type_layout(uint32_t type, uint32_t *block_elems,
                         uint32_t *block_bytes) {
    if (type >= GGML_TYPE_SLOTS || ggml_layouts[type].block_elems == 0)
        return false;
    if (block_elems) *block_elems = ggml_layouts[type].block_elems;
    if (block_bytes) *block_bytes = ggml_layouts[type].block_bytes;
    return true;
}

const char *fx_ggml_type_name(uint32_t type) {
    if (!fx_ggml_type_layout(type, NULL, NULL)) return "?";
    return ggml_layouts[type].name;
}

/* ---- little-endian loads from unaligned bytes ---- */

static uint32_t load_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static uint64_t load_u64(const uint8_t *p) {
    return (uint64_t)load_u32(p) | (uint64_t)load_u32(p + 4) << 32;
}

/* ---- cursor ---- */

typedef struct cursor {
    const uint8_t *base;
    uint64_t size;
    uint64_t pos;
    fx_error *err;
} cursor;

static uint64_t cursor_left(const cursor *c) { return c->size - c->pos; }

/* Returns a pointer to the next n bytes and advances, or NULL with a
 * TRUNCATED message saying what was being read. */
static const uint8_t *cursor_take(cursor *c, uint64_t n, const char *what) {
    if (n > cursor_left(c)) {
        fx_fail(c->err, FX_ERR_TRUNCATED,
                "truncated file: %s at offset %llu needs %llu bytes, only "
                "%llu remain",
                what, (unsigned long long)c->pos, (unsigned long long)n,
                (unsigned long long)cursor_left(c));
        return NULL;
    }
    const uint8_t *p = c->base + c->pos;
    c->pos += n;
    return p;
}

static fx_status read_u32(cursor *c, uint32_t *out, const char *what) {
    const uint8_t *p = cursor_take(c, 4, what);
    if (!p) return FX_ERR_TRUNCATED;
    *out = load_u32(p);
    return FX_OK;
}

static fx_status read_u64(cursor *c, uint64_t *out, const char *what) {
    const uint8_t *p = cursor_take(c, 8, what);
    if (!p) return FX_ERR_TRUNCATED;
    *out = load_u64(p);
    return FX_OK;
}

/* Lengths and counts above this are TOO_LARGE whatever the file's size:
 * no real metadata comes near it. Below it, a length that runs past the end
 * is TRUNCATED, so a cut-off download is reported as what it is. */
#define HUGE_BYTES (1ull << 40)

/* A length-prefixed string. */
static fx_status read_str(cursor *c, fx_gguf_str *out, const char *what) {
    uint64_t at = c->pos;
    uint64_t len;
    fx_status st = read_u64(c, &len, what);
    if (st != FX_OK) return st;
    if (len > HUGE_BYTES)
        return fx_fail(c->err, FX_ERR_TOO_LARGE,
                       "%s at offset %llu: string length %llu is absurd",
                       what, (unsigned long long)at, (unsigned long long)len);
    const uint8_t *p = cursor_take(c, len, what);
    if (!p) return FX_ERR_TRUNCATED;
    out->ptr = (const char *)p;
    out->len = len;
    return FX_OK;
}

/* ---- parse ---- */

/* Smallest possible records, used to bound counts by the bytes left before
 * allocating arrays sized by those counts. */
#define MIN_KV_BYTES (8 + 1 + 4 + 1)              /* key len, key, type, u8 */
#define MIN_TENSOR_BYTES (8 + 1 + 4 + 8 + 4 + 8)  /* name, 1 dim, type, off */

typedef struct parser {
    cursor c;
    fx_gguf *g;
    char *names_end; /* next free byte of g->names */
} parser;

static const char *copy_name(parser *p, fx_gguf_str s) {
    char *dst = p->names_end;
    memcpy(dst, s.ptr, s.len);
    dst[s.len] = '\0';
    p->names_end += s.len + 1;
    return dst;
}

/* Validates the value of a key of type `type` at the cursor and fills kv. */
static fx_status parse_value(parser *p, fx_gguf_kv *kv, const char *key) {
    cursor *c = &p->c;
    fx_status st;
    uint64_t at = c->pos;
    char what[256]; /* names the key in truncation messages */
    snprintf(what, sizeof what, "key '%.200s'", key);
    if (kv->type >= FX_GGUF_VTYPE_COUNT)
        return fx_fail(c->err, FX_ERR_BAD_TYPE,
                       "key '%s' at offset %llu: unknown value type %u", key,
                       (unsigned long long)kv->offset, kv->type);
    kv->count = 1;
    kv->elem_type = kv->type;
    if (kv->type == FX_GGUF_STRING) {
        kv->data = c->base + c->pos;
        return read_str(c, &kv->str, what);
    }
    if (kv->type != FX_GGUF_ARRAY) {
        kv->data = cursor_take(c, vtype_sizes[kv->type], what);
        if (!kv->data) return FX_ERR_TRUNCATED;
        if (kv->type == FX_GGUF_BOOL && kv->data[0] > 1)
            return fx_fail(c->err, FX_ERR_BAD_TYPE,
                           "key '%s' at offset %llu: bool value %u is "
                           "neither 0 nor 1",
                           key, (unsigned long long)at, kv->data[0]);
        return FX_OK;
    }

    if ((st = read_u32(c, &kv->elem_type, what)) != FX_OK) return st;
    if (kv->elem_type == FX_GGUF_ARRAY)
        return fx_fail(c->err, FX_ERR_BAD_TYPE,
                       "key '%s' at offset %llu: nested arrays are not "
                       "supported",
                       key, (unsigned long long)at);
    if (kv->elem_type >= FX_GGUF_VTYPE_COUNT)
        return fx_fail(c->err, FX_ERR_BAD_TYPE,
                       "key '%s' at offset %llu: unknown array element type "
                       "%u",
                       key, (unsigned long long)at, kv->elem_type);
    uint64_t count_at = c->pos;
    if ((st = read_u64(c, &kv->count, what)) != FX_OK) return st;
    kv->data = c->base + c->pos;

    uint64_t elem = kv->elem_type == FX_GGUF_STRING ? 8
                                                     : vtype_sizes[kv->elem_type];
    uint64_t min_bytes;
    if (!fx_mul_u64(kv->count, elem, &min_bytes) || min_bytes > HUGE_BYTES)
        return fx_fail(c->err, FX_ERR_TOO_LARGE,
                       "key '%s' at offset %llu: array of %llu %s elements "
                       "is absurdly large",
                       key, (unsigned long long)count_at,
                       (unsigned long long)kv->count,
                       fx_gguf_vtype_name(kv->elem_type));
    if (kv->elem_type != FX_GGUF_STRING)
        return cursor_take(c, min_bytes, what) ? FX_OK : FX_ERR_TRUNCATED;
    if (min_bytes > cursor_left(c))
        return fx_fail(c->err, FX_ERR_TRUNCATED,
                       "truncated file: key '%s' at offset %llu: %llu strings "
                       "need at least %llu bytes, only %llu remain",
                       key, (unsigned long long)count_at,
                       (unsigned long long)kv->count,
                       (unsigned long long)min_bytes,
                       (unsigned long long)cursor_left(c));
    for (uint64_t i = 0; i < kv->count; i++) {
        fx_gguf_str s;
        if ((st = read_str(c, &s, what)) != FX_OK) return st;
    }
    if (kv->elem_type == FX_GGUF_BOOL)
        for (uint64_t i = 0; i < kv->count; i++)
            if (kv->data[i] > 1)
                return fx_fail(c->err, FX_ERR_BAD_TYPE,
                               "key '%s': bool element %llu is %u",
                               key, (unsigned long long)i, kv->data[i]);
    return FX_OK;
}

typedef struct name_ref {
    const char *bytes;
    uint64_t len;
    uint64_t index;
} name_ref;

static int compare_names(const void *a, const void *b) {
    const name_ref *x = a, *y = b;
    uint64_t n = x->len < y->len ? x->len : y->len;
    int r = memcmp(x->bytes, y->bytes, (size_t)n);
    if (r != 0) return r;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return x->index < y->index ? -1 : (x->index > y->index);
}

/* Sorts `count` names into `order` and reports the first duplicate. */
static fx_status sort_names(parser *p, name_ref *refs, uint64_t count,
                            uint64_t *order, const char *what) {
    qsort(refs, (size_t)count, sizeof *refs, compare_names);
    for (uint64_t i = 0; i < count; i++) {
        order[i] = refs[i].index;
        if (i > 0 && refs[i].len == refs[i - 1].len &&
            memcmp(refs[i].bytes, refs[i - 1].bytes, (size_t)refs[i].len) == 0) {
            bool is_kv = what[0] == 'k';
            uint64_t first = refs[i - 1].index, second = refs[i].index;
            const char *name = is_kv ? p->g->kv[first].key
                                     : p->g->tensors[first].name;
            uint64_t off1 = is_kv ? p->g->kv[first].offset
                                  : p->g->tensors[first].info_offset;
            uint64_t off2 = is_kv ? p->g->kv[second].offset
                                  : p->g->tensors[second].info_offset;
            return fx_fail(p->c.err, FX_ERR_DUPLICATE,
                           "duplicate %s '%s' at offsets %llu and %llu", what,
                           name, (unsigned long long)off1,
                           (unsigned long long)off2);
        }
    }
    return FX_OK;
}

static fx_status parse_header(parser *p, uint64_t *n_tensors, uint64_t *n_kv) {
    cursor *c = &p->c;
    fx_status st;
    const uint8_t *magic = cursor_take(c, 4, "magic");
    if (!magic) return FX_ERR_TRUNCATED;
    if (memcmp(magic, "GGUF", 4) != 0)
        return fx_fail(c->err, FX_ERR_BAD_MAGIC,
                       "not a GGUF file: magic at offset 0 is %02x %02x %02x "
                       "%02x, expected \"GGUF\"",
                       magic[0], magic[1], magic[2], magic[3]);
    uint32_t version;
    if ((st = read_u32(c, &version, "version")) != FX_OK) return st;
    if (version == 0x02000000u || version == 0x03000000u)
        return fx_fail(c->err, FX_ERR_BAD_VERSION,
                       "big-endian GGUF files are not supported (version "
                       "field at offset 4)");
    if (version == 1)
        return fx_fail(c->err, FX_ERR_BAD_VERSION,
                       "GGUF version 1 (32-bit counts) is not supported; "
                       "convert the file to version 3");
    if (version != 2 && version != 3)
        return fx_fail(c->err, FX_ERR_BAD_VERSION,
                       "GGUF version %u at offset 4 is not supported (only 2 "
                       "and 3)",
                       version);
    p->g->version = version;
    if ((st = read_u64(c, n_tensors, "tensor count")) != FX_OK) return st;
    if ((st = read_u64(c, n_kv, "metadata count")) != FX_OK) return st;
    /* Checked against the bytes left before the arrays are allocated: a
     * file cannot describe more records than it has room for. */
    if (*n_kv > HUGE_BYTES / MIN_KV_BYTES)
        return fx_fail(c->err, FX_ERR_TOO_LARGE,
                       "metadata count %llu at offset 16 is absurd",
                       (unsigned long long)*n_kv);
    if (*n_tensors > HUGE_BYTES / MIN_TENSOR_BYTES)
        return fx_fail(c->err, FX_ERR_TOO_LARGE,
                       "tensor count %llu at offset 8 is absurd",
                       (unsigned long long)*n_tensors);
    if (*n_kv > cursor_left(c) / MIN_KV_BYTES ||
        *n_tensors > cursor_left(c) / MIN_TENSOR_BYTES)
        return fx_fail(c->err, FX_ERR_TRUNCATED,
                       "truncated file: %llu metadata entries and %llu tensor "
                       "records cannot fit in the %llu bytes after the header",
                       (unsigned long long)*n_kv,
                       (unsigned long long)*n_tensors,
                       (unsigned long long)cursor_left(c));
    return FX_OK;
}

static fx_status parse_kvs(parser *p) {
    fx_gguf *g = p->g;
    cursor *c = &p->c;
    fx_status st;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        fx_gguf_kv *kv = &g->kv[i];
        kv->offset = c->pos;
        fx_gguf_str key;
        if ((st = read_str(c, &key, "metadata key")) != FX_OK) return st;
        if (key.len == 0)
            return fx_fail(c->err, FX_ERR_BAD_TYPE,
                           "metadata key at offset %llu is empty",
                           (unsigned long long)kv->offset);
        kv->key = copy_name(p, key);
        kv->key_len = key.len;
        if ((st = read_u32(c, &kv->type, "metadata value type")) != FX_OK)
            return st;
        if ((st = parse_value(p, kv, kv->key)) != FX_OK) return st;
        kv->end_offset = c->pos;
    }
    return FX_OK;
}

static fx_status read_alignment(parser *p) {
    fx_gguf *g = p->g;
    g->alignment = FX_GGUF_DEFAULT_ALIGNMENT;
    const fx_gguf_kv *kv = fx_gguf_find(g, "general.alignment");
    if (!kv) return FX_OK;
    if (kv->type != FX_GGUF_U32)
        return fx_fail(p->c.err, FX_ERR_BAD_ALIGNMENT,
                       "general.alignment at offset %llu has type %s, "
                       "expected u32",
                       (unsigned long long)kv->offset,
                       fx_gguf_vtype_name(kv->type));
    uint32_t a = load_u32(kv->data);
    if (a == 0 || (a & (a - 1)) != 0 || a > FX_GGUF_MAX_ALIGNMENT)
        return fx_fail(p->c.err, FX_ERR_BAD_ALIGNMENT,
                       "general.alignment at offset %llu is %u; it must be a "
                       "power of two from 1 to %u",
                       (unsigned long long)kv->offset, a,
                       FX_GGUF_MAX_ALIGNMENT);
    g->alignment = a;
    return FX_OK;
}

static fx_status parse_tensor_info(parser *p, fx_gguf_tensor *t) {
    cursor *c = &p->c;
    fx_status st;
    t->info_offset = c->pos;
    fx_gguf_str name;
    if ((st = read_str(c, &name, "tensor name")) != FX_OK) return st;
    if (name.len == 0)
        return fx_fail(c->err, FX_ERR_BAD_TENSOR,
                       "tensor at offset %llu has an empty name",
                       (unsigned long long)t->info_offset);
    if (memchr(name.ptr, '\0', (size_t)name.len))
        return fx_fail(c->err, FX_ERR_BAD_TENSOR,
                       "tensor name at offset %llu contains a NUL byte",
                       (unsigned long long)t->info_offset);
    t->name = copy_name(p, name);
    char what[256];
    snprintf(what, sizeof what, "tensor '%.200s'", t->name);
    if ((st = read_u32(c, &t->n_dims, what)) != FX_OK) return st;
    if (t->n_dims == 0 || t->n_dims > FX_GGUF_MAX_DIMS)
        return fx_fail(c->err, FX_ERR_BAD_TENSOR,
                       "tensor '%s' at offset %llu has %u dimensions; 1 to %d "
                       "are allowed",
                       t->name, (unsigned long long)t->info_offset, t->n_dims,
                       FX_GGUF_MAX_DIMS);
    for (uint32_t d = 0; d < FX_GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    t->n_elements = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        if ((st = read_u64(c, &t->ne[d], what)) != FX_OK) return st;
        if (t->ne[d] == 0)
            return fx_fail(c->err, FX_ERR_BAD_TENSOR,
                           "tensor '%s' at offset %llu: dimension %u is 0",
                           t->name, (unsigned long long)t->info_offset, d);
        /* INT64_MAX, not UINT64_MAX: element counts are signed in ggml
         * and in any consumer that mirrors it. */
        if (!fx_mul_u64(t->n_elements, t->ne[d], &t->n_elements) ||
            t->n_elements > INT64_MAX)
            return fx_fail(c->err, FX_ERR_TOO_LARGE,
                           "tensor '%s' at offset %llu: element count "
                           "overflows",
                           t->name, (unsigned long long)t->info_offset);
    }
    if ((st = read_u32(c, &t->type, what)) != FX_OK) return st;
    uint32_t block_elems, block_bytes;
    if (!fx_ggml_type_layout(t->type, &block_elems, &block_bytes))
        return fx_fail(c->err, FX_ERR_BAD_TENSOR,
                       "tensor '%s' at offset %llu: unknown tensor type id %u",
                       t->name, (unsigned long long)t->info_offset, t->type);
    if (t->ne[0] % block_elems != 0)
        return fx_fail(c->err, FX_ERR_BAD_TENSOR,
                       "tensor '%s' at offset %llu: row length %llu is not a "
                       "multiple of the %s block size %u",
                       t->name, (unsigned long long)t->info_offset,
                       (unsigned long long)t->ne[0],
                       fx_ggml_type_name(t->type), block_elems);
    uint64_t bytes = t->ne[0] / block_elems;
    bool ok = fx_mul_u64(bytes, block_bytes, &bytes);
    for (uint32_t d = 1; ok && d < FX_GGUF_MAX_DIMS; d++)
        ok = fx_mul_u64(bytes, t->ne[d], &bytes);
    if (!ok)
        return fx_fail(c->err, FX_ERR_TOO_LARGE,
                       "tensor '%s' at offset %llu: byte size overflows",
                       t->name, (unsigned long long)t->info_offset);
    t->n_bytes = bytes;
    if ((st = read_u64(c, &t->offset, what)) != FX_OK) return st;
    return FX_OK;
}

static int compare_by_offset(const void *a, const void *b) {
    const fx_gguf_tensor *x = *(const fx_gguf_tensor *const *)a;
    const fx_gguf_tensor *y = *(const fx_gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : (x->offset > y->offset);
}

/* Places the data section and checks every tensor's bytes lie inside it,
 * aligned, without overlapping another tensor. */
static fx_status place_tensors(parser *p) {
    fx_gguf *g = p->g;
    cursor *c = &p->c;
    if (g->n_tensors == 0) {
        /* Vocabulary-only files end right after the metadata. */
        g->data_offset = c->pos;
        return FX_OK;
    }
    if (!fx_align_up_u64(c->pos, g->alignment, &g->data_offset) ||
        g->data_offset > c->size)
        return fx_fail(c->err, FX_ERR_TRUNCATED,
                       "truncated file: the tensor data section would start "
                       "at offset %llu, past the end (%llu bytes)",
                       (unsigned long long)c->pos,
                       (unsigned long long)c->size);
    uint64_t data_size = c->size - g->data_offset;
    uint64_t total = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        fx_gguf_tensor *t = &g->tensors[i];
        if (t->offset % g->alignment != 0)
            return fx_fail(c->err, FX_ERR_BAD_OFFSET,
                           "tensor '%s': data offset %llu is not a multiple "
                           "of the alignment %u",
                           t->name, (unsigned long long)t->offset,
                           g->alignment);
        if (t->offset > data_size)
            return fx_fail(c->err, FX_ERR_BAD_OFFSET,
                           "tensor '%s': data offset %llu is past the end of "
                           "the %llu-byte data section",
                           t->name, (unsigned long long)t->offset,
                           (unsigned long long)data_size);
        if (t->n_bytes > data_size - t->offset)
            return fx_fail(c->err, FX_ERR_TRUNCATED,
                           "truncated file: tensor '%s' needs %llu bytes at "
                           "file offset %llu, only %llu remain",
                           t->name, (unsigned long long)t->n_bytes,
                           (unsigned long long)(g->data_offset + t->offset),
                           (unsigned long long)(data_size - t->offset));
        if (!fx_add_u64(total, t->n_bytes, &total))
            return fx_fail(c->err, FX_ERR_TOO_LARGE,
                           "the total size of the tensors overflows at "
                           "tensor '%s'",
                           t->name);
        t->data = c->base + g->data_offset + t->offset;
    }
    fx_gguf_tensor **by_offset =
        fx_malloc_array(&g->alloc, (size_t)g->n_tensors, sizeof *by_offset);
    if (!by_offset)
        return fx_fail(c->err, FX_ERR_NOMEM, "out of memory sorting tensors");
    for (uint64_t i = 0; i < g->n_tensors; i++) by_offset[i] = &g->tensors[i];
    qsort(by_offset, (size_t)g->n_tensors, sizeof *by_offset, compare_by_offset);
    fx_status st = FX_OK;
    for (uint64_t i = 1; i < g->n_tensors; i++) {
        const fx_gguf_tensor *prev = by_offset[i - 1], *t = by_offset[i];
        if (prev->offset + prev->n_bytes > t->offset) {
            st = fx_fail(c->err, FX_ERR_BAD_OFFSET,
                         "tensor '%s' (data offset %llu) overlaps tensor '%s' "
                         "(data offset %llu, %llu bytes)",
                         t->name, (unsigned long long)t->offset, prev->name,
                         (unsigned long long)prev->offset,
                         (unsigned long long)prev->n_bytes);
            break;
        }
    }
    fx_free(&g->alloc, by_offset);
    return st;
}

static fx_status index_names(parser *p) {
    fx_gguf *g = p->g;
    uint64_t most = g->n_kv > g->n_tensors ? g->n_kv : g->n_tensors;
    name_ref *refs = fx_malloc_array(&g->alloc, (size_t)most, sizeof *refs);
    if (!refs) return fx_fail(p->c.err, FX_ERR_NOMEM, "out of memory");
    for (uint64_t i = 0; i < g->n_kv; i++)
        refs[i] = (name_ref){g->kv[i].key, g->kv[i].key_len, i};
    fx_status st = sort_names(p, refs, g->n_kv, g->kv_sorted, "key");
    if (st == FX_OK) {
        for (uint64_t i = 0; i < g->n_tensors; i++) {
            const fx_gguf_tensor *t = &g->tensors[i];
            refs[i] = (name_ref){t->name, strlen(t->name), i};
        }
        st = sort_names(p, refs, g->n_tensors, g->tensor_sorted, "tensor");
    }
    fx_free(&g->alloc, refs);
    return st;
}

static fx_status parse(parser *p) {
    fx_gguf *g = p->g;
    fx_status st;
    uint64_t n_tensors, n_kv;
    if ((st = parse_header(p, &n_tensors, &n_kv)) != FX_OK) return st;

    /* Every key and name is copied out NUL-terminated; they can total no
     * more than the file's own bytes plus one terminator each. */
    uint64_t arena;
    if (!fx_add_u64(p->c.size, n_kv + n_tensors, &arena) || arena > SIZE_MAX)
        return fx_fail(p->c.err, FX_ERR_TOO_LARGE, "file too large");
    g->names = fx_malloc(&g->alloc, (size_t)arena);
    g->kv = fx_calloc(&g->alloc, (size_t)n_kv, sizeof *g->kv);
    g->kv_sorted = fx_malloc_array(&g->alloc, (size_t)n_kv, sizeof(uint64_t));
    g->tensors = fx_calloc(&g->alloc, (size_t)n_tensors, sizeof *g->tensors);
    g->tensor_sorted =
        fx_malloc_array(&g->alloc, (size_t)n_tensors, sizeof(uint64_t));
    if (!g->names || !g->kv || !g->kv_sorted || !g->tensors ||
        !g->tensor_sorted)
        return fx_fail(p->c.err, FX_ERR_NOMEM,
                       "out of memory for %llu keys and %llu tensors",
                       (unsigned long long)n_kv,
                       (unsigned long long)n_tensors);
    p->names_end = g->names;

    /* Counts are published only as entries are filled, so lookups made
     * during parsing (alignment) see only what was read. */
    g->n_kv = n_kv;
    if ((st = parse_kvs(p)) != FX_OK) return st;
    g->n_tensors = n_tensors;
    for (uint64_t i = 0; i < n_tensors; i++)
        if ((st = parse_tensor_info(p, &g->tensors[i])) != FX_OK) return st;
    if ((st = index_names(p)) != FX_OK) return st;
    if ((st = read_alignment(p)) != FX_OK) return st;
    return place_tensors(p);
}

static fx_status open_parsed(const uint8_t *base, uint64_t size, int mapped,
                             const fx_alloc *alloc, fx_gguf **out,
                             fx_error *err) {
    fx_gguf *g = fx_calloc(alloc, 1, sizeof *g);
    if (!g) {
        if (mapped) munmap((void *)base, (size_t)size);
        return fx_fail(err, FX_ERR_NOMEM, "out of memory");
    }
    g->alloc = *alloc;
    g->base = base;
    g->size = size;
    g->mapped = mapped;
    parser p = {.c = {.base = base, .size = size, .pos = 0, .err = err},
                .g = g};
    fx_status st = parse(&p);
    if (st != FX_OK) {
        fx_gguf_close(g);
        return st;
    }
    *out = g;
    return FX_OK;
}

fx_status fx_gguf_open_memory(const void *data, size_t size,
                              const fx_alloc *alloc, fx_gguf **out,
                              fx_error *err) {
    *out = NULL;
    if (!data && size > 0)
        return fx_fail(err, FX_ERR_INVALID_ARG, "NULL buffer");
    static const uint8_t empty[1] = {0};
    return open_parsed(data ? data : empty, size, 0, alloc, out, err);
}

fx_status fx_gguf_open(const char *path, const fx_alloc *alloc, fx_gguf **out,
                       fx_error *err) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return fx_fail(err, FX_ERR_IO, "cannot open '%s': %s", path,
                       strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return fx_fail(err, FX_ERR_IO, "cannot stat '%s': %s", path,
                       strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return fx_fail(err, FX_ERR_IO, "'%s' is not a regular file", path);
    }
    if (sb.st_size == 0) {
        close(fd);
        return fx_fail(err, FX_ERR_TRUNCATED,
                       "truncated file: '%s' is empty", path);
    }
    if ((uint64_t)sb.st_size > SIZE_MAX) {
        close(fd);
        return fx_fail(err, FX_ERR_TOO_LARGE, "'%s' is too large to map",
                       path);
    }
    void *base = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd); /* the mapping keeps the file alive */
    if (base == MAP_FAILED)
        return fx_fail(err, FX_ERR_IO, "cannot map '%s': %s", path,
                       strerror(e));
    return open_parsed(base, (uint64_t)sb.st_size, 1, alloc, out, err);
}

void fx_gguf_release(const fx_gguf *g, const void *p, size_t len) {
    if (!g || !g->mapped || !p || len == 0) return;
    const uintptr_t base = (uintptr_t)g->base, at = (uintptr_t)p;
    if (at < base || at - base > g->size || len > g->size - (at - base)) return;
    const long page = sysconf(_SC_PAGESIZE);
    if (page <= 0) return;
    /* Whole pages only: the neighbours of a tensor may still be read. */
    const uintptr_t lo = (at + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
    const uintptr_t hi = (at + len) & ~((uintptr_t)page - 1);
    if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

void fx_gguf_close(fx_gguf *g) {
    if (!g) return;
    if (g->mapped) munmap((void *)g->base, (size_t)g->size);
    fx_alloc alloc = g->alloc;
    fx_free(&alloc, g->names);
    fx_free(&alloc, g->kv);
    fx_free(&alloc, g->kv_sorted);
    fx_free(&alloc, g->tensors);
    fx_free(&alloc, g->tensor_sorted);
    fx_free(&alloc, g);
}

/* ---- lookup ---- */

/* Binary search over names sorted by (bytes, length). */
static int compare_query(const char *q, size_t qlen, const char *name,
                         uint64_t len) {
    uint64_t n = qlen < len ? qlen : len;
    int r = memcmp(q, name, (size_t)n);
    if (r != 0) return r;
    return qlen < len ? -1 : (qlen > len);
}

const fx_gguf_kv *fx_gguf_find(const fx_gguf *g, const char *key) {
    size_t qlen = strlen(key);
    uint64_t lo = 0, hi = g->n_kv;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        const fx_gguf_kv *kv = &g->kv[g->kv_sorted[mid]];
        int r = compare_query(key, qlen, kv->key, kv->key_len);
        if (r == 0) return kv;
        if (r < 0) hi = mid;
        else lo = mid + 1;
    }
    return NULL;
}

const fx_gguf_tensor *fx_gguf_find_tensor(const fx_gguf *g, const char *name) {
    size_t qlen = strlen(name);
    uint64_t lo = 0, hi = g->n_tensors;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        const fx_gguf_tensor *t = &g->tensors[g->tensor_sorted[mid]];
        int r = compare_query(name, qlen, t->name, strlen(t->name));
        if (r == 0) return t;
        if (r < 0) hi = mid;
        else lo = mid + 1;
    }
    return NULL;
}
