/*
 * gguf: a strict reader of GGUF v2/v3 files.
 *
 * The file is mapped read-only; every count, length, size and offset is
 * checked against the bytes actually present before it is used or before
 * anything proportional to it is allocated. Keys and tensor names are
 * copied out NUL-terminated; values and tensor data stay in the mapping.
 * All multi-byte values in the file are little-endian.
 */
#ifndef FX_GGUF_H
#define FX_GGUF_H

#include "../core/core.h"

/* Metadata value types, as numbered by the GGUF format. */
typedef enum fx_gguf_vtype {
    FX_GGUF_U8 = 0,
    FX_GGUF_I8 = 1,
    FX_GGUF_U16 = 2,
    FX_GGUF_I16 = 3,
    FX_GGUF_U32 = 4,
    FX_GGUF_I32 = 5,
    FX_GGUF_F32 = 6,
    FX_GGUF_BOOL = 7,
    FX_GGUF_STRING = 8,
    FX_GGUF_ARRAY = 9,
    FX_GGUF_U64 = 10,
    FX_GGUF_I64 = 11,
    FX_GGUF_F64 = 12,
    FX_GGUF_VTYPE_COUNT
} fx_gguf_vtype;

/* Tensor element types (ggml numbering) that later layers compute with.
 * The reader knows the block layout of every current ggml type so that any
 * model's tensor table can be read; these are the ones named in code. */
typedef enum fx_ggml_type {
    FX_TYPE_F32 = 0,
    FX_TYPE_F16 = 1,
    FX_TYPE_Q4_0 = 2,
    FX_TYPE_Q8_0 = 8,
    FX_TYPE_Q4_K = 12,
    FX_TYPE_BF16 = 30
} fx_ggml_type;

#define FX_GGUF_MAX_DIMS 4
#define FX_GGUF_DEFAULT_ALIGNMENT 32
#define FX_GGUF_MAX_ALIGNMENT 65536

/* A string inside the mapping: not NUL-terminated. */
typedef struct fx_gguf_str {
    const char *ptr;
    uint64_t len;
} fx_gguf_str;

typedef struct fx_gguf_kv {
    const char *key;        /* NUL-terminated copy */
    uint64_t key_len;       /* bytes in the file (a key may hold a NUL) */
    uint64_t offset;        /* file offset of the key's length field */
    uint64_t end_offset;    /* file offset just past the value */
    uint32_t type;          /* fx_gguf_vtype */
    uint32_t elem_type;     /* arrays: element type */
    uint64_t count;         /* arrays: element count; else 1 */
    const uint8_t *data;    /* the value (arrays: the first element),
                               unaligned -- read with the accessors */
    fx_gguf_str str;        /* STRING values */
} fx_gguf_kv;

typedef struct fx_gguf_tensor {
    const char *name;       /* NUL-terminated copy */
    uint64_t info_offset;   /* file offset of the tensor's info record */
    uint32_t type;          /* ggml type id */
    uint32_t n_dims;
    uint64_t ne[FX_GGUF_MAX_DIMS]; /* ne[0] contiguous; unused dims are 1 */
    uint64_t n_elements;
    uint64_t offset;        /* relative to the data section */
    uint64_t n_bytes;
    const uint8_t *data;    /* into the mapping, aligned to `alignment` */
} fx_gguf_tensor;

typedef struct fx_gguf {
    fx_alloc alloc;
    const uint8_t *base;    /* the whole file */
    uint64_t size;
    int mapped;             /* 1 if base is our mmap */
    uint32_t version;
    uint32_t alignment;
    uint64_t n_kv;
    fx_gguf_kv *kv;         /* [n_kv], file order */
    uint64_t n_tensors;
    fx_gguf_tensor *tensors; /* [n_tensors], file order */
    uint64_t *kv_sorted;    /* [n_kv] indices ordered by key bytes */
    uint64_t *tensor_sorted; /* [n_tensors] indices ordered by name bytes */
    uint64_t data_offset;   /* file offset of the data section */
    char *names;            /* arena holding every key and tensor name */
} fx_gguf;

/* The pages of [p, p + len) inside a mapped file are dropped from the
 * process (madvise MADV_DONTNEED; read again from the file if touched):
 * for data that was copied and will not be read again. Does nothing for
 * a buffer from fx_gguf_open_memory, or where madvise fails. */
void fx_gguf_release(const fx_gguf *g, const void *p, size_t len);

/* Maps and parses a file. */
fx_status fx_gguf_open(const char *path, const fx_alloc *alloc, fx_gguf **out,
                       fx_error *err);
/* Parses a buffer the caller keeps alive and unchanged until close. */
fx_status fx_gguf_open_memory(const void *data, size_t size,
                              const fx_alloc *alloc, fx_gguf **out,
                              fx_error *err);
void fx_gguf_close(fx_gguf *gguf);

/* ---- types ---- */

const char *fx_gguf_vtype_name(uint32_t vtype);
/* false for an unknown or removed type id. */
bool fx_ggml_type_layout(uint32_t type, uint32_t *block_elems,
                         uint32_t *block_bytes);
const char *fx_ggml_type_name(uint32_t type); /* "?" when unknown */

/* ---- metadata lookup ----
 * The getters return FX_ERR_MISSING when the key is absent, FX_ERR_BAD_TYPE
 * when it is stored with a type that cannot be read as asked, and
 * FX_ERR_TOO_LARGE when an integer does not fit; the message names the key
 * and its offset. The _opt variants leave *out untouched and return FX_OK
 * when the key is absent. */

const fx_gguf_kv *fx_gguf_find(const fx_gguf *gguf, const char *key);

/* Any integer type whose value fits. */
fx_status fx_gguf_get_u32(const fx_gguf *g, const char *key, uint32_t *out,
                          fx_error *err);
fx_status fx_gguf_get_u32_opt(const fx_gguf *g, const char *key, uint32_t *out,
                              fx_error *err);
fx_status fx_gguf_get_u64(const fx_gguf *g, const char *key, uint64_t *out,
                          fx_error *err);
/* F32 or F64. */
fx_status fx_gguf_get_f32(const fx_gguf *g, const char *key, float *out,
                          fx_error *err);
fx_status fx_gguf_get_f32_opt(const fx_gguf *g, const char *key, float *out,
                              fx_error *err);
fx_status fx_gguf_get_bool_opt(const fx_gguf *g, const char *key, bool *out,
                               fx_error *err);
fx_status fx_gguf_get_str(const fx_gguf *g, const char *key, fx_gguf_str *out,
                          fx_error *err);
fx_status fx_gguf_get_str_opt(const fx_gguf *g, const char *key,
                              fx_gguf_str *out, fx_error *err);
/* An array whose elements are of elem_type (FX_GGUF_VTYPE_COUNT: any). */
fx_status fx_gguf_get_array(const fx_gguf *g, const char *key,
                            uint32_t elem_type, const fx_gguf_kv **out,
                            fx_error *err);

/* Element accessors for arrays of fixed-size elements (the index must be
 * < kv->count; the reader already checked the bytes exist). */
int64_t fx_gguf_array_int(const fx_gguf_kv *kv, uint64_t i);  /* int types */
double fx_gguf_array_float(const fx_gguf_kv *kv, uint64_t i); /* F32/F64 */
/* Fills out[0..kv->count) with the strings of a string array. */
void fx_gguf_array_strings(const fx_gguf_kv *kv, fx_gguf_str *out);

/* Writes the value as text (see fx_model_meta_format in ferrox.h) into buf
 * and returns the size needed including the NUL. */
size_t fx_gguf_format_value(const fx_gguf_kv *kv, char *buf, size_t buf_size);

/* ---- tensors ---- */

const fx_gguf_tensor *fx_gguf_find_tensor(const fx_gguf *gguf,
                                          const char *name);

#endif /* FX_GGUF_H */
