/*
 * The GGUF reader against docs/reliability.md section A: one test per entry,
 * each checking the specific status and that the message names the key or
 * tensor. Buffers are parsed from exactly-sized heap copies so that
 * AddressSanitizer catches a read of even one byte past the end.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "gguf/gguf.h"
#include "gguf_writer.h"
#include "test_util.h"

/* ---- a counting allocator: proves no allocation is sized by a lie ---- */

typedef struct counting {
    size_t live;
    size_t largest;
} counting;

static void *count_malloc(void *user, size_t size) {
    counting *c = user;
    void *p = malloc(size + 16);
    if (!p) return NULL;
    memcpy(p, &size, sizeof size);
    c->live++;
    if (size > c->largest) c->largest = size;
    return (char *)p + 16;
}

static void *count_realloc(void *user, void *ptr, size_t size) {
    counting *c = user;
    if (!ptr) return count_malloc(user, size);
    void *p = realloc((char *)ptr - 16, size + 16);
    if (!p) return NULL;
    memcpy(p, &size, sizeof size);
    if (size > c->largest) c->largest = size;
    return (char *)p + 16;
}

static void count_free(void *user, void *ptr) {
    counting *c = user;
    if (!ptr) return;
    c->live--;
    free((char *)ptr - 16);
}

/* Parses a heap copy of exactly len bytes; checks nothing leaks. */
static fx_status parse_len(const uint8_t *data, size_t len, char *msg,
                           size_t *largest_alloc) {
    counting c = {0, 0};
    fx_allocator hooks = {count_malloc, count_realloc, count_free, &c};
    fx_alloc alloc;
    fx_alloc_init(&alloc, &hooks);
    uint8_t *copy = malloc(len ? len : 1);
    assert_non_null(copy);
    if (len) memcpy(copy, data, len);
    fx_error err;
    fx_error_clear(&err);
    fx_gguf *g = NULL;
    fx_status st = fx_gguf_open_memory(copy, len, &alloc, &g, &err);
    if (st == FX_OK) {
        assert_non_null(g);
        fx_gguf_close(g);
    } else {
        assert_null(g);
        assert_true(err.message[0] != '\0');
    }
    free(copy);
    assert_int_equal(c.live, 0);
    if (msg) strcpy(msg, err.message);
    if (largest_alloc) *largest_alloc = c.largest;
    return st;
}

static fx_status parse_buf(const gw_buf *b, char *msg) {
    return parse_len(b->data, b->len, msg, NULL);
}

static void expect_status(const gw_buf *b, fx_status want, const char *in_msg) {
    char msg[FX_ERRMSG_SIZE];
    fx_status st = parse_buf(b, msg);
    if (st != want || (in_msg && !strstr(msg, in_msg)))
        fail_msg("got %d (%s), want %d mentioning '%s'", st, msg, want,
                 in_msg ? in_msg : "");
}

/* A minimal valid file: two keys and one f32 tensor [8, 2]. */
static void small_file(gw_buf *b, uint32_t version) {
    b->len = 0;
    gw_header(b, version, 1, 2);
    gw_kv_str(b, "general.architecture", "llama");
    gw_kv_u32(b, "answer", 42);
    uint64_t dims[2] = {8, 2};
    gw_tensor_info(b, "w", 2, dims, 0, 0);
    gw_pad(b, 32);
    for (int i = 0; i < 16; i++) gw_f32(b, (float)i);
}

static void test_valid_small_file(void **state) {
    (void)state;
    gw_buf b = {0};
    for (uint32_t v = 2; v <= 3; v++) {
        small_file(&b, v);
        fx_alloc alloc;
        fx_alloc_init(&alloc, NULL);
        fx_gguf *g = NULL;
        fx_error err;
        assert_int_equal(fx_gguf_open_memory(b.data, b.len, &alloc, &g, &err),
                         FX_OK);
        assert_int_equal(g->version, v);
        uint32_t answer = 0;
        assert_int_equal(fx_gguf_get_u32(g, "answer", &answer, &err), FX_OK);
        assert_int_equal(answer, 42);
        const fx_gguf_tensor *t = fx_gguf_find_tensor(g, "w");
        assert_non_null(t);
        assert_int_equal(t->ne[0], 8);
        assert_int_equal(t->ne[1], 2);
        assert_int_equal(t->n_bytes, 64);
        assert_int_equal((uintptr_t)(t->data - g->base) % 32, 0);
        float f;
        memcpy(&f, t->data + 4 * 5, 4);
        assert_true(f == 5.0f);
        assert_null(fx_gguf_find_tensor(g, "x"));
        fx_gguf_close(g);
    }
    gw_free(&b);
}

/* A1: a valid file cut at every byte offset fails, cleanly, every time. */
static void test_truncated_every_offset(void **state) {
    (void)state;
    gw_buf b = {0};
    gw_model_spec spec;
    gw_model_spec_default(&spec);
    spec.n_vocab = 40;
    spec.n_embd = 32;
    spec.n_layer = 1;
    spec.n_head = 2;
    spec.n_head_kv = 1;
    spec.n_ff = 32;
    gw_build_model(&b, &spec);
    assert_int_equal(parse_buf(&b, NULL), FX_OK);
    for (size_t len = 0; len < b.len; len++) {
        fx_status st = parse_len(b.data, len, NULL, NULL);
        if (st == FX_OK) fail_msg("truncated at %zu of %zu parsed", len, b.len);
    }
    gw_free(&b);
}

/* A1 on a real third-party file: every offset of the first 4 KiB (where
 * the structure is dense) and 1500 spread over the rest. */
static void test_truncated_vendored_vocab(void **state) {
    (void)state;
    const char *path = fx_test_data_path("vocab/ggml-vocab-llama-spm.gguf");
    size_t len;
    uint8_t *data = (uint8_t *)fx_test_read_file(path, &len);
    assert_non_null(data);
    assert_int_equal(parse_len(data, len, NULL, NULL), FX_OK);
    for (size_t cut = 0; cut < 4096 && cut < len; cut++)
        assert_int_not_equal(parse_len(data, cut, NULL, NULL), FX_OK);
    for (size_t i = 0; i < 1500; i++) {
        size_t cut = 4096 + (len - 4096) / 1500 * i;
        assert_int_equal(parse_len(data, cut, NULL, NULL), FX_ERR_TRUNCATED);
    }
    free(data);
}

/* A2 */
static void test_bad_magic_and_versions(void **state) {
    (void)state;
    gw_buf b = {0};
    small_file(&b, 3);
    b.data[0] = 'X';
    expect_status(&b, FX_ERR_BAD_MAGIC, "magic");
    small_file(&b, 1);
    expect_status(&b, FX_ERR_BAD_VERSION, "version 1");
    small_file(&b, 4);
    expect_status(&b, FX_ERR_BAD_VERSION, "version 4");
    small_file(&b, 0x03000000u);
    expect_status(&b, FX_ERR_BAD_VERSION, "big-endian");
    gw_free(&b);
}

/* A3: counts near 2^64 are rejected before anything is allocated. */
static void test_huge_counts(void **state) {
    (void)state;
    gw_buf b = {0};
    uint64_t huge[] = {UINT64_MAX, UINT64_MAX / 2, 1ull << 41};
    for (size_t i = 0; i < 3; i++) {
        for (int field = 0; field < 2; field++) {
            small_file(&b, 3);
            gw_put_u64_at(&b, field == 0 ? 8 : 16, huge[i]);
            char msg[FX_ERRMSG_SIZE];
            size_t largest = 0;
            assert_int_equal(parse_len(b.data, b.len, msg, &largest),
                             FX_ERR_TOO_LARGE);
            assert_non_null(strstr(msg, field == 0 ? "tensor count"
                                                   : "metadata count"));
            assert_true(largest < 4096); /* only the handle itself */
        }
        /* Plausible counts in a file too short for them: truncated, and
         * still nothing sized by the count is allocated. */
        small_file(&b, 3);
        gw_put_u64_at(&b, 16, 1000000);
        size_t largest = 0;
        assert_int_equal(parse_len(b.data, b.len, NULL, &largest),
                         FX_ERR_TRUNCATED);
        assert_true(largest < 4096);
    }
    gw_free(&b);
}

/* A4 */
static void test_string_lengths(void **state) {
    (void)state;
    gw_buf b = {0};
    /* The first key's length field is at offset 24. */
    small_file(&b, 3);
    gw_put_u64_at(&b, 24, UINT64_MAX - 3);
    expect_status(&b, FX_ERR_TOO_LARGE, "offset 24");
    small_file(&b, 3);
    gw_put_u64_at(&b, 24, b.len - 32 + 1);
    expect_status(&b, FX_ERR_TRUNCATED, "offset 32");
    /* A string value running past the end. */
    b.len = 0;
    gw_header(&b, 3, 0, 1);
    gw_str(&b, "k");
    gw_u32(&b, 8);
    gw_u64(&b, 40);
    gw_bytes(&b, "short", 5);
    expect_status(&b, FX_ERR_TRUNCATED, "'k'");
    gw_free(&b);
}

/* A5 */
static void test_array_sizes(void **state) {
    (void)state;
    gw_buf b = {0};
    uint32_t elem_types[] = {4, 10, 8}; /* u32, u64, string */
    for (size_t i = 0; i < 3; i++) {
        /* count * element size overflows 64 bits */
        b.len = 0;
        gw_header(&b, 3, 0, 1);
        gw_str(&b, "arr");
        gw_u32(&b, 9);
        gw_u32(&b, elem_types[i]);
        gw_u64(&b, (UINT64_MAX / 4) + 7);
        gw_u64(&b, 0);
        expect_status(&b, FX_ERR_TOO_LARGE, "'arr'");
        /* count fits arithmetic but not the file */
        gw_put_u64_at(&b, 43, 3);
        expect_status(&b, FX_ERR_TRUNCATED, "'arr'");
    }
    /* An array of strings whose last string runs past the end. */
    b.len = 0;
    gw_header(&b, 3, 0, 1);
    const char *words[] = {"a", "bb", "ccc"};
    gw_kv_arr_str(&b, "words", words, 3);
    b.len -= 1;
    expect_status(&b, FX_ERR_TRUNCATED, "'words'");
    gw_free(&b);
}

/* A6 */
static void test_value_types(void **state) {
    (void)state;
    gw_buf b = {0};
    uint32_t bad[] = {13, 255, UINT32_MAX};
    for (size_t i = 0; i < 3; i++) {
        b.len = 0;
        gw_header(&b, 3, 0, 1);
        gw_str(&b, "odd");
        gw_u32(&b, bad[i]);
        gw_u64(&b, 0);
        expect_status(&b, FX_ERR_BAD_TYPE, "'odd'");
        /* the same type as an array element */
        b.len = 0;
        gw_header(&b, 3, 0, 1);
        gw_str(&b, "odd");
        gw_u32(&b, 9);
        gw_u32(&b, bad[i]);
        gw_u64(&b, 0);
        expect_status(&b, FX_ERR_BAD_TYPE, "element type");
    }
    b.len = 0;
    gw_header(&b, 3, 0, 1);
    gw_str(&b, "nest");
    gw_u32(&b, 9);
    gw_u32(&b, 9);
    gw_u64(&b, 1);
    gw_u32(&b, 4);
    gw_u64(&b, 0);
    expect_status(&b, FX_ERR_BAD_TYPE, "nested");
    b.len = 0;
    gw_header(&b, 3, 0, 1);
    gw_str(&b, "flag");
    gw_u32(&b, 7);
    gw_u8(&b, 2);
    expect_status(&b, FX_ERR_BAD_TYPE, "'flag'");
    gw_free(&b);
}

/* A file with one tensor of the given description and room for its data. */
static void one_tensor(gw_buf *b, uint32_t n_dims, const uint64_t *dims,
                       uint32_t type, uint64_t offset, size_t data_bytes) {
    b->len = 0;
    gw_header(b, 3, 1, 0);
    gw_tensor_info(b, "t", n_dims, dims, type, offset);
    gw_pad(b, 32);
    for (size_t i = 0; i < data_bytes; i++) gw_u8(b, 0);
}

/* A7 */
static void test_tensor_dims(void **state) {
    (void)state;
    gw_buf b = {0};
    uint64_t dims[5] = {4, 4, 1, 1, 1};
    one_tensor(&b, 0, dims, 0, 0, 64);
    expect_status(&b, FX_ERR_BAD_TENSOR, "'t'");
    one_tensor(&b, 5, dims, 0, 0, 64);
    expect_status(&b, FX_ERR_BAD_TENSOR, "5 dimensions");
    uint64_t zero[2] = {4, 0};
    one_tensor(&b, 2, zero, 0, 0, 64);
    expect_status(&b, FX_ERR_BAD_TENSOR, "dimension 1 is 0");
    uint64_t big[4] = {1ull << 32, 1ull << 32, 4, 1};
    one_tensor(&b, 4, big, 0, 0, 64);
    expect_status(&b, FX_ERR_TOO_LARGE, "element count");
    gw_free(&b);
}

/* A8 */
static void test_tensor_byte_sizes(void **state) {
    (void)state;
    gw_buf b = {0};
    uint64_t f32_big[1] = {1ull << 62}; /* elements fit, bytes do not */
    one_tensor(&b, 1, f32_big, 0, 0, 64);
    expect_status(&b, FX_ERR_TOO_LARGE, "byte size");
    uint64_t f64_big[2] = {1ull << 61, 2}; /* 2^62 elements, 2^65 bytes */
    one_tensor(&b, 2, f64_big, 28, 0, 64);
    expect_status(&b, FX_ERR_TOO_LARGE, "byte size");
    uint64_t q8_ragged[1] = {33};
    one_tensor(&b, 1, q8_ragged, 8, 0, 64);
    expect_status(&b, FX_ERR_BAD_TENSOR, "block size 32");
    gw_free(&b);
}

/* A9: each tensor is bounded by the data section and no two overlap, so a
 * running total larger than the file is caught as an overlap. */
static void test_tensor_total(void **state) {
    (void)state;
    gw_buf b = {0};
    gw_header(&b, 3, 3, 0);
    uint64_t dims[1] = {16};
    gw_tensor_info(&b, "a", 1, dims, 0, 0);
    gw_tensor_info(&b, "b", 1, dims, 0, 64);
    gw_tensor_info(&b, "c", 1, dims, 0, 0);
    gw_pad(&b, 32);
    for (int i = 0; i < 128; i++) gw_u8(&b, 0);
    expect_status(&b, FX_ERR_BAD_OFFSET, "overlaps");
    gw_free(&b);
}

/* A10 */
static void test_tensor_types_and_offsets(void **state) {
    (void)state;
    gw_buf b = {0};
    uint64_t dims[1] = {32};
    uint32_t bad_types[] = {4, 5, 31, 40, 1000};
    for (size_t i = 0; i < 5; i++) {
        one_tensor(&b, 1, dims, bad_types[i], 0, 256);
        expect_status(&b, FX_ERR_BAD_TENSOR, "unknown tensor type");
    }
    one_tensor(&b, 1, dims, 0, 4, 256);
    expect_status(&b, FX_ERR_BAD_OFFSET, "not a multiple");
    one_tensor(&b, 1, dims, 0, 1ull << 40, 256);
    expect_status(&b, FX_ERR_BAD_OFFSET, "past the end");
    one_tensor(&b, 1, dims, 0, 224, 256); /* 128 bytes at 224 of 256 */
    expect_status(&b, FX_ERR_TRUNCATED, "'t'");
    one_tensor(&b, 1, dims, 0, 128, 256); /* exactly fits */
    expect_status(&b, FX_OK, NULL);
    gw_free(&b);
}

static void aligned_file(gw_buf *b, int align_type, uint64_t align) {
    b->len = 0;
    gw_header(b, 3, 1, 1);
    gw_str(b, "general.alignment");
    gw_u32(b, (uint32_t)align_type);
    if (align_type == 4) gw_u32(b, (uint32_t)align);
    else if (align_type == 10) gw_u64(b, align);
    else gw_str(b, "64");
    uint64_t dims[1] = {4};
    gw_tensor_info(b, "t", 1, dims, 0, 0);
    gw_pad(b, align_type == 4 && align && align <= 4096 ? (size_t)align : 32);
    for (int i = 0; i < 16; i++) gw_u8(b, 0);
}

/* A11 */
static void test_alignment(void **state) {
    (void)state;
    gw_buf b = {0};
    uint64_t bad[] = {0, 3, 48, 1u << 20, 1u << 31};
    for (size_t i = 0; i < 5; i++) {
        aligned_file(&b, 4, bad[i]);
        expect_status(&b, FX_ERR_BAD_ALIGNMENT, "general.alignment");
    }
    aligned_file(&b, 10, 64);
    expect_status(&b, FX_ERR_BAD_ALIGNMENT, "type u64");
    aligned_file(&b, 8, 0);
    expect_status(&b, FX_ERR_BAD_ALIGNMENT, "type string");
    aligned_file(&b, 4, 64);
    expect_status(&b, FX_OK, NULL);
    aligned_file(&b, 4, 1);
    expect_status(&b, FX_OK, NULL);
    gw_free(&b);
}

/* A12 (the parser's part; missing/misshapen tensors are in test_model). */
static void test_duplicates(void **state) {
    (void)state;
    gw_buf b = {0};
    gw_header(&b, 3, 0, 3);
    gw_kv_u32(&b, "a", 1);
    gw_kv_u32(&b, "dup", 1);
    gw_kv_str(&b, "dup", "again");
    expect_status(&b, FX_ERR_DUPLICATE, "'dup' at offsets 41 and 60");
    b.len = 0;
    gw_header(&b, 3, 2, 0);
    uint64_t dims[1] = {8};
    gw_tensor_info(&b, "same", 1, dims, 0, 0);
    gw_tensor_info(&b, "same", 1, dims, 0, 32);
    gw_pad(&b, 32);
    for (int i = 0; i < 64; i++) gw_u8(&b, 0);
    expect_status(&b, FX_ERR_DUPLICATE, "tensor 'same'");
    gw_free(&b);
}

static void test_typed_getters(void **state) {
    (void)state;
    gw_buf b = {0};
    gw_header(&b, 3, 0, 6);
    gw_kv_u32(&b, "u", 7);
    gw_kv_i32(&b, "neg", -3);
    gw_kv_u64(&b, "big", 1ull << 40);
    gw_kv_f32(&b, "f", 0.5f);
    gw_kv_str(&b, "s", "text");
    int32_t ints[3] = {5, -6, 7};
    gw_kv_arr_i32(&b, "ints", ints, 3);
    fx_alloc alloc;
    fx_alloc_init(&alloc, NULL);
    fx_gguf *g;
    fx_error err;
    assert_int_equal(fx_gguf_open_memory(b.data, b.len, &alloc, &g, &err), FX_OK);
    uint32_t u = 0;
    uint64_t u64 = 0;
    float f = 0;
    fx_gguf_str s;
    assert_int_equal(fx_gguf_get_u32(g, "u", &u, &err), FX_OK);
    assert_int_equal(u, 7);
    assert_int_equal(fx_gguf_get_u32(g, "neg", &u, &err), FX_ERR_TOO_LARGE);
    assert_non_null(strstr(err.message, "-3"));
    assert_int_equal(fx_gguf_get_u32(g, "big", &u, &err), FX_ERR_TOO_LARGE);
    assert_int_equal(fx_gguf_get_u64(g, "big", &u64, &err), FX_OK);
    assert_true(u64 == 1ull << 40);
    assert_int_equal(fx_gguf_get_u32(g, "s", &u, &err), FX_ERR_BAD_TYPE);
    assert_non_null(strstr(err.message, "'s'"));
    assert_int_equal(fx_gguf_get_u32(g, "nope", &u, &err), FX_ERR_MISSING);
    u = 99;
    assert_int_equal(fx_gguf_get_u32_opt(g, "nope", &u, &err), FX_OK);
    assert_int_equal(u, 99);
    assert_int_equal(fx_gguf_get_f32(g, "f", &f, &err), FX_OK);
    assert_true(f == 0.5f);
    assert_int_equal(fx_gguf_get_f32(g, "u", &f, &err), FX_ERR_BAD_TYPE);
    assert_int_equal(fx_gguf_get_str(g, "s", &s, &err), FX_OK);
    assert_int_equal(s.len, 4);
    assert_memory_equal(s.ptr, "text", 4);
    const fx_gguf_kv *arr;
    assert_int_equal(fx_gguf_get_array(g, "ints", FX_GGUF_STRING, &arr, &err),
                     FX_ERR_BAD_TYPE);
    assert_int_equal(fx_gguf_get_array(g, "ints", FX_GGUF_I32, &arr, &err), FX_OK);
    assert_int_equal(fx_gguf_array_int(arr, 1), -6);
    char text[64];
    assert_int_equal(fx_gguf_format_value(arr, text, sizeof text),
                     strlen("[i32 x 3: 5, -6, 7]") + 1);
    assert_string_equal(text, "[i32 x 3: 5, -6, 7]");
    /* Truncated formatting still NUL-terminates and reports the need. */
    assert_int_equal(fx_gguf_format_value(arr, text, 5), 20);
    assert_string_equal(text, "[i32");
    fx_gguf_close(g);
    gw_free(&b);
}

/* A44: I/O failures through the file path. */
static void test_io_errors(void **state) {
    (void)state;
    fx_alloc alloc;
    fx_alloc_init(&alloc, NULL);
    fx_gguf *g = NULL;
    fx_error err;
    assert_int_equal(fx_gguf_open("/nonexistent/model.gguf", &alloc, &g, &err),
                     FX_ERR_IO);
    assert_non_null(strstr(err.message, "/nonexistent/model.gguf"));
    assert_int_equal(fx_gguf_open("/", &alloc, &g, &err), FX_ERR_IO);
    const char *empty = fx_test_tmp_path("empty.gguf");
    gw_buf b = {0};
    assert_int_equal(gw_write_file(&b, empty), 0);
    assert_int_equal(fx_gguf_open(empty, &alloc, &g, &err), FX_ERR_TRUNCATED);
    remove(empty);
    assert_null(g);
}

/* fx_gguf_release drops a mapped file's pages, which come back from the
 * file when read again; a host's buffer (open_memory) is never touched --
 * dropping anonymous pages would zero them. */
static void test_release(void **state) {
    (void)state;
    enum { N = 3 * 4096 }; /* floats: 48 KiB, several whole pages */
    gw_buf b = {0};
    gw_header(&b, 3, 1, 0);
    uint64_t dims[1] = {N};
    gw_tensor_info(&b, "big", 1, dims, 0, 0);
    gw_pad(&b, 32);
    for (int i = 0; i < N; i++) gw_f32(&b, (float)i);
    const char *path = fx_test_tmp_path("release.gguf");
    assert_int_equal(gw_write_file(&b, path), 0);
    fx_alloc alloc;
    fx_alloc_init(&alloc, NULL);
    fx_error err;
    for (int mapped = 0; mapped < 2; mapped++) {
        fx_gguf *g = NULL;
        uint8_t *copy = NULL;
        if (mapped) {
            assert_int_equal(fx_gguf_open(path, &alloc, &g, &err), FX_OK);
        } else {
            copy = malloc(b.len);
            assert_non_null(copy);
            memcpy(copy, b.data, b.len);
            assert_int_equal(fx_gguf_open_memory(copy, b.len, &alloc, &g, &err),
                             FX_OK);
        }
        const fx_gguf_tensor *t = fx_gguf_find_tensor(g, "big");
        assert_non_null(t);
        fx_gguf_release(g, t->data, (size_t)t->n_bytes);
        fx_gguf_release(g, t->data, (size_t)g->size * 2); /* past the end */
        fx_gguf_release(g, &alloc, 64);                   /* not ours */
        fx_gguf_release(NULL, t->data, 64);
        for (int i = 0; i < N; i++) {
            float f;
            memcpy(&f, t->data + 4 * (size_t)i, 4);
            if (f != (float)i) fail_msg("mapped %d: float %d reads %g", mapped,
                                        i, (double)f);
        }
        fx_gguf_close(g);
        free(copy);
    }
    remove(path);
    gw_free(&b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_small_file),
        cmocka_unit_test(test_truncated_every_offset),
        cmocka_unit_test(test_truncated_vendored_vocab),
        cmocka_unit_test(test_bad_magic_and_versions),
        cmocka_unit_test(test_huge_counts),
        cmocka_unit_test(test_string_lengths),
        cmocka_unit_test(test_array_sizes),
        cmocka_unit_test(test_value_types),
        cmocka_unit_test(test_tensor_dims),
        cmocka_unit_test(test_tensor_byte_sizes),
        cmocka_unit_test(test_tensor_total),
        cmocka_unit_test(test_tensor_types_and_offsets),
        cmocka_unit_test(test_alignment),
        cmocka_unit_test(test_duplicates),
        cmocka_unit_test(test_typed_getters),
        cmocka_unit_test(test_io_errors),
        cmocka_unit_test(test_release),
    };
    return cmocka_run_group_tests_name("gguf", tests, NULL, NULL);
}
