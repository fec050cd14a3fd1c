#include "gguf_quant.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "gguf_writer.h"
#include "kernels/kernels.h"
#include "kernels/quants.h"

#define GQ_MAX_THREADS 256

typedef struct plan_entry {
    const fx_gguf_tensor *t;
    uint32_t type;     /* the output's */
    int convert;       /* 0: the bytes are copied */
    uint64_t bytes, offset;
} plan_entry;

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static int fail(char *err, size_t size, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, size, fmt, ap);
    va_end(ap);
    return -1;
}

static int is_float(uint32_t type) {
    return type == QR_F32 || type == QR_F16 || type == QR_BF16;
}

/* A count the architecture's key holds; arrays (per-layer values) give
 * their first element. *out untouched when the key is absent. */
static int arch_u32(const fx_gguf *g, const char *arch, const char *suffix,
                    uint32_t *out) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    const fx_gguf_kv *kv = fx_gguf_find(g, key);
    if (!kv) return 0;
    if (kv->type == FX_GGUF_ARRAY) {
        if (kv->count == 0 || kv->elem_type == FX_GGUF_STRING ||
            kv->elem_type == FX_GGUF_ARRAY || kv->elem_type == FX_GGUF_F32 ||
            kv->elem_type == FX_GGUF_F64 || kv->elem_type == FX_GGUF_BOOL)
            return -1;
        int64_t v = fx_gguf_array_int(kv, 0);
        if (v < 0 || v > UINT32_MAX) return -1;
        *out = (uint32_t)v;
        return 0;
    }
    fx_error e;
    return fx_gguf_get_u32(g, key, out, &e) == FX_OK ? 0 : -1;
}

static int read_model(const fx_gguf *g, qr_model *m, char *arch, size_t arch_size,
                      char *err, size_t err_size) {
    fx_gguf_str s;
    fx_error e;
    if (fx_gguf_get_str(g, "general.architecture", &s, &e) != FX_OK)
        return fail(err, err_size, "%s", e.message);
    if (s.len == 0 || s.len >= arch_size || memchr(s.ptr, 0, s.len))
        return fail(err, err_size, "general.architecture is not a usable name");
    memcpy(arch, s.ptr, s.len);
    arch[s.len] = '\0';
    memset(m, 0, sizeof *m);
    m->arch = arch;
    uint32_t n_expert = 0, n_layer = 0;
    char key[160];
    snprintf(key, sizeof key, "%s.block_count", arch);
    if (!fx_gguf_find(g, key))
        return fail(err, err_size, "%s is missing", key);
    if (arch_u32(g, arch, "block_count", &n_layer) != 0 ||
        arch_u32(g, arch, "attention.head_count", &m->n_head) != 0 ||
        arch_u32(g, arch, "expert_count", &n_expert) != 0)
        return fail(err, err_size, "%s's block, head or expert count is not "
                    "a whole number", arch);
    m->n_layer = n_layer;
    m->n_head_kv = m->n_head;
    if (arch_u32(g, arch, "attention.head_count_kv", &m->n_head_kv) != 0)
        return fail(err, err_size, "%s.attention.head_count_kv is not a whole "
                    "number", arch);
    if (n_expert > 1)
        return fail(err, err_size, "a mixture of experts (%u experts): not "
                    "supported", n_expert);
    return 0;
}

/* ---- conversion of one tensor on a few threads ---- */

typedef struct job {
    const fx_gguf_tensor *t;
    uint32_t type;
    uint8_t *out;
    size_t row_bytes, r0, r1;
    int bad;            /* a non-finite input value ... */
    size_t bad_row;     /* ... in this row */
    int oom;
} job;

static void to_f32(float *dst, const uint8_t *src, uint32_t type, size_t n) {
    if (type == QR_F32) {
        memcpy(dst, src, n * sizeof(float));
        return;
    }
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, src + 2 * i, 2);
        dst[i] = type == QR_F16 ? fx_f16_to_f32(h) : fx_bf16_to_f32(h);
    }
}

static void from_f32(void *dst, const float *x, uint32_t type, size_t n) {
    switch (type) {
    case QR_F32: memcpy(dst, x, n * sizeof(float)); break;
    case QR_F16: fx_f32_to_f16_row(dst, x, n); break;
    case QR_BF16: fx_f32_to_bf16_row(dst, x, n); break;
    case QR_Q8_0: (void)fx_quantize_q8_0(dst, x, n); break;
    case QR_Q4_0: fx_quantize_q4_0(dst, x, n); break;
    case QR_Q4_1: fx_quantize_q4_1(dst, x, n); break;
    case QR_Q5_0: fx_quantize_q5_0(dst, x, n); break;
    case QR_Q5_1: fx_quantize_q5_1(dst, x, n); break;
    case QR_Q2_K: fx_quantize_q2_K(dst, x, n); break;
    case QR_Q3_K: fx_quantize_q3_K(dst, x, n); break;
    case QR_Q4_K: fx_quantize_q4_K(dst, x, n); break;
    case QR_Q5_K: fx_quantize_q5_K(dst, x, n); break;
    case QR_Q6_K: fx_quantize_q6_K(dst, x, n); break;
    case QR_IQ4_NL: fx_quantize_iq4_nl(dst, x, n); break;
    case QR_IQ4_XS: fx_quantize_iq4_xs(dst, x, n); break;
    default: break; /* the plan holds only the types above */
    }
}

size_t gq_encode(uint32_t type, const float *x, size_t n, void *out, void *user) {
    (void)user;
    uint32_t be = 0, bb = 0;
    if (qr_block_elems(type) == 0 || !fx_ggml_type_layout(type, &be, &bb) ||
        n % be != 0)
        return 0;
    from_f32(out, x, type, n);
    return n / be * bb;
}

static void *run_job(void *arg) {
    job *j = arg;
    const size_t k = (size_t)j->t->ne[0];
    size_t in_row = k * (j->t->type == QR_F32 ? 4 : 2);
    float *x = malloc(k * sizeof *x);
    if (!x) {
        j->oom = 1;
        return NULL;
    }
    for (size_t r = j->r0; r < j->r1; r++) {
        to_f32(x, j->t->data + r * in_row, j->t->type, k);
        for (size_t i = 0; i < k; i++) {
            if (!isfinite(x[i])) {
                j->bad = 1;
                j->bad_row = r;
                free(x);
                return NULL;
            }
        }
        from_f32(j->out + r * j->row_bytes, x, j->type, k);
    }
    free(x);
    return NULL;
}

/* Converts every row of e->t into out, on up to `threads` threads. */
static int convert(const plan_entry *e, uint8_t *out, unsigned threads,
                   char *err, size_t err_size) {
    const size_t rows = (size_t)(e->t->n_elements / e->t->ne[0]);
    const size_t row_bytes = (size_t)(e->bytes / rows);
    size_t n = threads ? threads : 1;
    if (n > rows) n = rows;
    if (n > GQ_MAX_THREADS) n = GQ_MAX_THREADS;
    job jobs[GQ_MAX_THREADS];
    pthread_t tid[GQ_MAX_THREADS];
    int started[GQ_MAX_THREADS] = {0};
    for (size_t i = 0; i < n; i++) {
        jobs[i] = (job){e->t, e->type, out, row_bytes, rows * i / n,
                        rows * (i + 1) / n, 0, 0, 0};
        /* A thread that cannot start leaves its rows to the caller. */
        if (i > 0) started[i] = pthread_create(&tid[i], NULL, run_job, &jobs[i]) == 0;
    }
    run_job(&jobs[0]);
    for (size_t i = 1; i < n; i++) {
        if (started[i]) pthread_join(tid[i], NULL);
        else run_job(&jobs[i]);
    }
    for (size_t i = 0; i < n; i++) {
        if (jobs[i].oom) return fail(err, err_size, "out of memory");
        if (jobs[i].bad)
            return fail(err, err_size, "%s: row %zu holds inf or NaN",
                        e->t->name, jobs[i].bad_row);
    }
    return 0;
}

/* A float tensor copied as it is is checked as llama.cpp's loader does. */
static int check_finite(const fx_gguf_tensor *t, char *err, size_t err_size) {
    if (!is_float(t->type)) return 0;
    size_t size = t->type == QR_F32 ? 4 : 2;
    for (uint64_t i = 0; i < t->n_elements; i++) {
        float x;
        to_f32(&x, t->data + i * size, t->type, 1);
        if (!isfinite(x))
            return fail(err, err_size, "%s: element %llu is inf or NaN",
                        t->name, (unsigned long long)i);
    }
    return 0;
}

/* ---- the plan and the file ---- */

static int make_plan(const fx_gguf *in, const gq_options *opt, plan_entry *plan,
                     size_t *n_fallback, char *err, size_t err_size) {
    char arch[64];
    qr_model m;
    if (read_model(in, &m, arch, sizeof arch, err, err_size) != 0) return -1;
    size_t n = (size_t)in->n_tensors;
    qr_tensor *ts = calloc(n, sizeof *ts);
    if (!ts) return fail(err, err_size, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const fx_gguf_tensor *t = &in->tensors[i];
        ts[i] = (qr_tensor){t->name, {t->ne[0], t->ne[1], t->ne[2], t->ne[3]},
                            t->type, 0, i};
    }
    char why[256];
    if (qr_plan(&m, opt->preset, opt->pure, ts, n, n_fallback, why, sizeof why) != 0) {
        free(ts);
        return fail(err, err_size, "%s", why);
    }
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        plan_entry *e = &plan[i];
        const fx_gguf_tensor *t = &in->tensors[ts[i].index];
        *e = (plan_entry){t, ts[i].type, ts[i].convert, t->n_bytes, 0};
        if (!e->convert) continue;
        uint32_t be = 0, bb = 0;
        if (!is_float(t->type))
            rc = fail(err, err_size, "%s is %s: only f32, f16 and bf16 "
                      "weights are converted", t->name,
                      fx_ggml_type_name(t->type));
        else if (!fx_ggml_type_layout(e->type, &be, &bb))
            rc = fail(err, err_size, "%s: no layout for %s", t->name,
                      qr_type_name(e->type));
        else
            e->bytes = t->n_elements / be * bb;
    }
    free(ts);
    return rc;
}

static int is_dropped_key(const char *key) {
    static const char *const drop[] = {
        "general.quantization_version", "general.file_type", "split.no",
        "split.count", "split.tensors.count"};
    for (size_t i = 0; i < sizeof drop / sizeof drop[0]; i++)
        if (strcmp(key, drop[i]) == 0) return 1;
    return 0;
}

static void write_header(gw_buf *b, const fx_gguf *in, const gq_options *opt,
                         const plan_entry *plan) {
    uint64_t n_kv = 2;
    for (uint64_t i = 0; i < in->n_kv; i++) n_kv += !is_dropped_key(in->kv[i].key);
    gw_header(b, 3, in->n_tensors, n_kv);
    for (uint64_t i = 0; i < in->n_kv; i++) {
        const fx_gguf_kv *kv = &in->kv[i];
        if (!is_dropped_key(kv->key))
            gw_bytes(b, in->base + kv->offset, (size_t)(kv->end_offset - kv->offset));
    }
    /* llama.cpp sets these last, so they come after the copied ones. */
    gw_kv_u32(b, "general.quantization_version", 2);
    gw_kv_u32(b, "general.file_type", (uint32_t)opt->preset->ftype);
    for (uint64_t i = 0; i < in->n_tensors; i++) {
        const fx_gguf_tensor *t = plan[i].t;
        gw_tensor_info(b, t->name, t->n_dims, t->ne, plan[i].type, plan[i].offset);
    }
    gw_pad(b, in->alignment);
}

static int write_zeros(FILE *f, uint64_t n) {
    static const uint8_t zeros[64];
    while (n) {
        size_t k = n < sizeof zeros ? (size_t)n : sizeof zeros;
        if (fwrite(zeros, 1, k, f) != k) return -1;
        n -= k;
    }
    return 0;
}

int gq_quantize(const fx_gguf *in, const gq_options *opt, FILE *f,
                gq_result *res, char *err, size_t err_size) {
    gq_result r = {0};
    if (in->n_tensors == 0) return fail(err, err_size, "the file has no tensors");
    plan_entry *plan = calloc((size_t)in->n_tensors, sizeof *plan);
    if (!plan) return fail(err, err_size, "out of memory");
    int rc = make_plan(in, opt, plan, &r.n_fallback, err, err_size);
    uint64_t off = 0, align = in->alignment;
    for (uint64_t i = 0; rc == 0 && i < in->n_tensors; i++) {
        plan[i].offset = off;
        off += (plan[i].bytes + align - 1) / align * align;
    }
    gw_buf hdr = {0};
    if (rc == 0) {
        write_header(&hdr, in, opt, plan);
        if (fwrite(hdr.data, 1, hdr.len, f) != hdr.len)
            rc = fail(err, err_size, "write failed");
    }
    gw_free(&hdr);
    for (uint64_t i = 0; rc == 0 && i < in->n_tensors; i++) {
        const plan_entry *e = &plan[i];
        if (opt->progress)
            opt->progress((size_t)i, (size_t)in->n_tensors, e->t, e->type, opt->user);
        r.bytes_in += e->t->n_bytes;
        r.bytes_out += e->bytes;
        if (!e->convert) {
            rc = check_finite(e->t, err, err_size);
            if (rc == 0 && fwrite(e->t->data, 1, (size_t)e->bytes, f) != e->bytes)
                rc = fail(err, err_size, "write failed");
        } else {
            uint8_t *out = malloc(e->bytes ? (size_t)e->bytes : 1);
            if (!out) {
                rc = fail(err, err_size, "out of memory for %s", e->t->name);
                break;
            }
            rc = convert(e, out, opt->threads, err, err_size);
            if (rc == 0 && fwrite(out, 1, (size_t)e->bytes, f) != e->bytes)
                rc = fail(err, err_size, "write failed");
            free(out);
            r.n_converted++;
        }
        if (rc == 0 && write_zeros(f, (align - e->bytes % align) % align) != 0)
            rc = fail(err, err_size, "write failed");
    }
    free(plan);
    if (rc == 0 && fflush(f) != 0) rc = fail(err, err_size, "write failed");
    if (rc == 0 && res) *res = r;
    return rc;
}

int gq_quantize_file(const fx_gguf *in, const gq_options *opt, const char *path,
                     char *err, size_t err_size) {
    FILE *f = fopen(path, "wb");
    if (!f) return fail(err, err_size, "%s: cannot create", path);
    int rc = gq_quantize(in, opt, f, NULL, err, err_size);
    if (fclose(f) != 0 && rc == 0) rc = fail(err, err_size, "%s: write failed", path);
    return rc;
}
