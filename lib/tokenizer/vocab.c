/*
 * Loading and validating a vocabulary from GGUF metadata (docs/reliability.md
 * section B), and the lookups every tokenizer path uses.
 *
 * Everything the file says is checked before it is trusted: array element
 * types and lengths, every special id against the vocabulary size, every
 * byte token's spelling, token lengths. Texts are copied out of the mapping
 * so the vocabulary owns all it points at.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "vocab_impl.h"

/* ---- hash tables (open addressing, linear probing) ---- */

#define SLOT_EMPTY UINT64_MAX
#define SLOT_ID(x) ((int32_t)(uint32_t)(x))
#define SLOT_TAG(h) ((h) & 0xffffffff00000000ull)

static fx_status alloc_slots(const fx_alloc *a, size_t n, uint64_t **slots, size_t *mask, fx_error *err) {
    size_t cap = 16;
    /* load factor <= 1/2 keeps probes short */
    while (cap < n * 2) {
        if (cap > SIZE_MAX / 16) return fx_fail(err, FX_ERR_NOMEM, "vocab: hash table too large");
        cap *= 2;
    }
    *slots = fx_malloc_array(a, cap, sizeof(uint64_t));
    if (!*slots) return fx_fail(err, FX_ERR_NOMEM, "vocab: out of memory (hash table of %zu slots)", cap);
    memset(*slots, 0xff, cap * sizeof(uint64_t));
    *mask = cap - 1;
    return FX_OK;
}

static const char *tok_ptr(const struct fx_vocab *v, int32_t id, size_t *len) {
    *len = v->tok_off[id + 1] - v->tok_off[id];
    return v->text + v->tok_off[id];
}

/* Inserts id under its text; a later id with the same text replaces the
 * earlier one, as llama.cpp's token_to_id map does. */
static void tok_insert(struct fx_vocab *v, int32_t id) {
    size_t len;
    const char *s = tok_ptr(v, id, &len);
    uint64_t h = fx_vocab_hash(s, len, FX_VOCAB_HASH_SEED), entry = SLOT_TAG(h) | (uint32_t)id;
    for (size_t i = (size_t)h & v->tok_mask;; i = (i + 1) & v->tok_mask) {
        uint64_t cur = v->tok_slots[i];
        if (cur == SLOT_EMPTY) {
            v->tok_slots[i] = entry;
            return;
        }
        size_t clen;
        const char *cs = tok_ptr(v, SLOT_ID(cur), &clen);
        if (SLOT_TAG(cur) == SLOT_TAG(h) && clen == len && memcmp(cs, s, len) == 0) {
            v->tok_slots[i] = entry;
            return;
        }
    }
}

int32_t fx_vocab_find(const struct fx_vocab *v, const char *text, size_t len) {
    if (!v || !text || len == 0) return -1;
    uint64_t h = fx_vocab_hash(text, len, FX_VOCAB_HASH_SEED);
    for (size_t i = (size_t)h & v->tok_mask;; i = (i + 1) & v->tok_mask) {
        uint64_t cur = v->tok_slots[i];
        if (cur == SLOT_EMPTY) return -1;
        if (SLOT_TAG(cur) != SLOT_TAG(h)) continue;
        size_t clen;
        const char *cs = tok_ptr(v, SLOT_ID(cur), &clen);
        if (clen == len && memcmp(cs, text, len) == 0) return SLOT_ID(cur);
    }
}

/* A merge is keyed by its two halves: the bytes of both plus where the
 * left one ends ("a bc" and "ab c" are different merges). */
static uint64_t merge_hash(const char *s, size_t left, size_t total) {
    uint64_t h = fx_vocab_hash(s, total, FX_VOCAB_HASH_SEED);
    h ^= (uint64_t)left * 0x9e3779b97f4a7c15ull;
    return h ^ (h >> 29);
}

static bool merge_is(const struct fx_vocab *v, int32_t r, const char *text, size_t left_len, size_t total) {
    size_t off = v->merge_off[r];
    return v->merge_off[r + 1] - off == total && v->merge_left[r] == left_len &&
           memcmp(v->merge_text + off, text, total) == 0;
}

int32_t fx_vocab_merge_rank(const struct fx_vocab *v, const char *text, size_t left_len, size_t total) {
    if (!v->merge_slots) return -1;
    uint64_t h = merge_hash(text, left_len, total);
    for (size_t i = (size_t)h & v->merge_mask;; i = (i + 1) & v->merge_mask) {
        uint64_t cur = v->merge_slots[i];
        if (cur == SLOT_EMPTY) return -1;
        if (SLOT_TAG(cur) == SLOT_TAG(h) && merge_is(v, SLOT_ID(cur), text, left_len, total)) return SLOT_ID(cur);
    }
}

/* The first occurrence of a merge keeps its rank (llama.cpp emplaces). */
static void merge_insert(struct fx_vocab *v, int32_t r) {
    size_t off = v->merge_off[r], total = v->merge_off[r + 1] - off, left = v->merge_left[r];
    const char *s = v->merge_text + off;
    uint64_t h = merge_hash(s, left, total);
    for (size_t i = (size_t)h & v->merge_mask;; i = (i + 1) & v->merge_mask) {
        uint64_t cur = v->merge_slots[i];
        if (cur == SLOT_EMPTY) {
            v->merge_slots[i] = SLOT_TAG(h) | (uint32_t)r;
            return;
        }
        if (SLOT_TAG(cur) == SLOT_TAG(h) && merge_is(v, SLOT_ID(cur), s, left, total)) return;
    }
}

/* ---- getters ---- */

uint32_t fx_vocab_n_tokens(const struct fx_vocab *v) { return v ? v->n_tokens : 0; }

size_t fx_vocab_min_tokens(const struct fx_vocab *v, size_t len) {
    if (!v || !v->bytes_per_token) return 0;
    return len / v->bytes_per_token + (len % v->bytes_per_token != 0);
}

fx_token_type_t fx_vocab_token_type(const struct fx_vocab *v, int32_t id) {
    if (!v || id < 0 || (uint32_t)id >= v->n_tokens) return FX_TOKEN_TYPE_UNDEFINED;
    return (fx_token_type_t)v->types[id]; /* checked at load: 0..6 */
}

const char *fx_vocab_token_text(const struct fx_vocab *v, int32_t id, size_t *len) {
    size_t dummy;
    if (!len) len = &dummy;
    if (!v || id < 0 || (uint32_t)id >= v->n_tokens) {
        *len = 0;
        return NULL;
    }
    return tok_ptr(v, id, len);
}

int32_t fx_vocab_special(const struct fx_vocab *v, int which) {
    if (!v || which < 0 || which >= FX_VOCAB_N_SPECIAL) return -1;
    return v->special[which];
}

bool fx_vocab_is_eog(const struct fx_vocab *v, int32_t id) {
    if (!v || id < 0) return false;
    return id == v->special[FX_TOKEN_EOS] || id == v->special[FX_TOKEN_EOT] ||
           id == v->special[FX_TOKEN_EOM];
}

/* ---- loading ---- */

void fx_vocab_free(struct fx_vocab *v) {
    if (!v) return;
    fx_alloc a = v->alloc;
    fx_free(&a, v->text);
    fx_free(&a, v->tok_off);
    fx_free(&a, v->scores);
    fx_free(&a, v->types);
    fx_free(&a, v->tok_slots);
    fx_free(&a, v->merge_text);
    fx_free(&a, v->merge_off);
    fx_free(&a, v->merge_left);
    fx_free(&a, v->merge_slots);
    fx_free(&a, v->specials);
    fx_free(&a, v);
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves,
 * the other 68 are moved to U+0100.. in byte order, so that every byte has
 * a visible, non-space character. */
static void build_byte_map(struct fx_vocab *v) {
    int n = 0;
    for (int i = 0; i < 324; i++) v->u2b[i] = -1;
    for (int b = 0; b < 256; b++) {
        bool self = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
        v->b2u[b] = (uint16_t)(self ? b : 256 + n++);
        v->u2b[v->b2u[b]] = (int16_t)b;
    }
}

static const struct {
    const char *name;
    fx_pretok kind;
    bool ignore_merges;
    bool add_bos;
} k_pre_names[] = {
    /* names llama.cpp maps to exactly these regexes */
    {"default", FX_PRETOK_DEFAULT, false, false},
    {"gpt-2", FX_PRETOK_GPT2, false, false},
    {"phi-2", FX_PRETOK_GPT2, false, false},
    {"roberta-bpe", FX_PRETOK_GPT2, false, false},
    {"mpt", FX_PRETOK_GPT2, false, false},
    {"olmo", FX_PRETOK_GPT2, false, false},
    {"jais", FX_PRETOK_GPT2, false, false},
    {"llama3", FX_PRETOK_LLAMA3, true, true},
    {"llama-v3", FX_PRETOK_LLAMA3, true, true},
    {"llama-bpe", FX_PRETOK_LLAMA3, true, true},
    {"falcon3", FX_PRETOK_LLAMA3, true, true},
    {"dbrx", FX_PRETOK_LLAMA3, false, false},
    {"smaug-bpe", FX_PRETOK_LLAMA3, false, false},
    {"qwen2", FX_PRETOK_QWEN2, false, false},
    {"stablelm2", FX_PRETOK_QWEN2, false, false},
    {"megrez", FX_PRETOK_QWEN2, false, false},
    {"deepseek-r1-qwen", FX_PRETOK_QWEN2, false, false},
    {"smollm", FX_PRETOK_SMOLLM, false, false},
    {"starcoder", FX_PRETOK_SMOLLM, false, false},
    {"refact", FX_PRETOK_SMOLLM, false, false},
    {"command-r", FX_PRETOK_SMOLLM, false, false},
    {"codeshell", FX_PRETOK_SMOLLM, false, false},
    {"exaone", FX_PRETOK_SMOLLM, false, false},
    {"minerva-7b", FX_PRETOK_SMOLLM, false, false},
    {"chatglm-bpe", FX_PRETOK_LLAMA3, false, false},
    {"falcon", FX_PRETOK_FALCON, false, false},
    {"deepseek-llm", FX_PRETOK_DEEPSEEK_LLM, false, false},
    {"deepseek-coder", FX_PRETOK_DEEPSEEK_CODER, false, false},
    {"deepseek-v3", FX_PRETOK_DEEPSEEK3, false, false},
    {"bloom", FX_PRETOK_BLOOM, false, false},
    {"poro-chat", FX_PRETOK_BLOOM, false, false},
    {"gpt3-finnish", FX_PRETOK_BLOOM, false, false},
    {"viking", FX_PRETOK_VIKING, false, false},
    {"tekken", FX_PRETOK_TEKKEN, true, true},
    /* llama.cpp's LLAMA_VOCAB_PRE_TYPE_GPT4O, and minimax-m2 whose type
     * has the same expression */
    {"gpt-4o", FX_PRETOK_GPT4O, false, false},
    {"llama4", FX_PRETOK_GPT4O, false, false},
    {"kanana2", FX_PRETOK_GPT4O, false, false},
    {"talkie", FX_PRETOK_GPT4O, false, false},
    {"minimax-m2", FX_PRETOK_GPT4O, false, false},
};

static int pre_lookup(const char *name, size_t len) {
    for (size_t i = 0; i < sizeof k_pre_names / sizeof k_pre_names[0]; i++)
        if (strlen(k_pre_names[i].name) == len && memcmp(k_pre_names[i].name, name, len) == 0)
            return (int)i;
    return -1;
}

bool fx_pretok_from_name(const char *name, size_t len, fx_pretok *out) {
    int i = name ? pre_lookup(name, len) : -1;
    if (i < 0) return false;
    if (out) *out = k_pre_names[i].kind;
    return true;
}

static bool is_int_type(uint32_t t) {
    return t == FX_GGUF_U8 || t == FX_GGUF_I8 || t == FX_GGUF_U16 || t == FX_GGUF_I16 ||
           t == FX_GGUF_U32 || t == FX_GGUF_I32 || t == FX_GGUF_U64 || t == FX_GGUF_I64;
}

/* An optional array: NULL when absent; BAD_VOCAB when of the wrong element
 * type or length. */
static fx_status get_opt_array(const fx_gguf *g, const char *key, uint32_t n,
                               bool (*type_ok)(uint32_t), const char *want,
                               const fx_gguf_kv **out, fx_error *err) {
    *out = NULL;
    const fx_gguf_kv *kv = fx_gguf_find(g, key);
    if (!kv) return FX_OK;
    if (kv->type != FX_GGUF_ARRAY || !type_ok(kv->elem_type))
        return fx_fail(err, FX_ERR_BAD_VOCAB, "%s: expected an array of %s, found %s%s", key, want,
                       kv->type == FX_GGUF_ARRAY ? "an array of " : "",
                       fx_gguf_vtype_name(kv->type == FX_GGUF_ARRAY ? kv->elem_type : kv->type));
    if (kv->count != n)
        return fx_fail(err, FX_ERR_BAD_VOCAB, "%s: %llu entries, but the vocabulary has %u tokens", key,
                       (unsigned long long)kv->count, n);
    *out = kv;
    return FX_OK;
}

static bool is_float_type(uint32_t t) { return t == FX_GGUF_F32 || t == FX_GGUF_F64; }

static fx_status load_tokens(struct fx_vocab *v, const fx_gguf *g, fx_error *err) {
    const fx_gguf_kv *kv = fx_gguf_find(g, "tokenizer.ggml.tokens");
    if (!kv) return fx_fail(err, FX_ERR_MISSING, "tokenizer.ggml.tokens is missing");
    if (kv->type != FX_GGUF_ARRAY || kv->elem_type != FX_GGUF_STRING)
        return fx_fail(err, FX_ERR_BAD_VOCAB, "tokenizer.ggml.tokens: expected an array of strings");
    if (kv->count == 0) return fx_fail(err, FX_ERR_BAD_VOCAB, "tokenizer.ggml.tokens: empty vocabulary");
    if (kv->count > INT32_MAX)
        return fx_fail(err, FX_ERR_BAD_VOCAB, "tokenizer.ggml.tokens: %llu tokens (ids are 31-bit)",
                       (unsigned long long)kv->count);
    uint32_t n = (uint32_t)kv->count;
    v->n_tokens = n;
    fx_gguf_str *strs = fx_malloc_array(&v->alloc, n, sizeof *strs);
    if (!strs) return fx_fail(err, FX_ERR_NOMEM, "vocab: out of memory (%u tokens)", n);
    fx_gguf_array_strings(kv, strs);
    uint64_t total = 0;
    fx_status st = FX_OK;
    for (uint32_t i = 0; i < n; i++) {
        if (strs[i].len > FX_VOCAB_MAX_TOKEN_LEN) {
            st = fx_fail(err, FX_ERR_BAD_VOCAB, "tokenizer.ggml.tokens[%u]: %llu bytes (at most %u allowed)", i,
                         (unsigned long long)strs[i].len, FX_VOCAB_MAX_TOKEN_LEN);
            goto done;
        }
        total += strs[i].len; /* <= 2^31 * 2^16: cannot overflow */
    }
    if (total >= SIZE_MAX) {
        st = fx_fail(err, FX_ERR_TOO_LARGE, "tokenizer.ggml.tokens: texts too large");
        goto done;
    }
    v->text = fx_malloc(&v->alloc, (size_t)total + 1);
    v->tok_off = fx_malloc_array(&v->alloc, (size_t)n + 1, sizeof(size_t));
    v->scores = fx_calloc(&v->alloc, n, sizeof(float));
    v->types = fx_malloc(&v->alloc, n);
    if (!v->text || !v->tok_off || !v->scores || !v->types) {
        st = fx_fail(err, FX_ERR_NOMEM, "vocab: out of memory (%u tokens)", n);
        goto done;
    }
    size_t off = 0;
    for (uint32_t i = 0; i < n; i++) {
        v->tok_off[i] = off;
        if (strs[i].len) memcpy(v->text + off, strs[i].ptr, (size_t)strs[i].len);
        off += (size_t)strs[i].len;
        v->types[i] = FX_TOKEN_TYPE_NORMAL; /* llama.cpp's default without types */
    }
    v->tok_off[n] = off;
    st = alloc_slots(&v->alloc, n, &v->tok_slots, &v->tok_mask, err);
    if (st != FX_OK) goto done;
    /* Empty tokens are kept (ids stay dense) but cannot be found by text. */
    for (uint32_t i = 0; i < n; i++)
        if (v->tok_off[i + 1] > v->tok_off[i]) tok_insert(v, (int32_t)i);
done:
    fx_free(&v->alloc, strs);
    return st;
}

static fx_status load_scores_types(struct fx_vocab *v, const fx_gguf *g, fx_error *err) {
    const fx_gguf_kv *kv;
    fx_status st = get_opt_array(g, "tokenizer.ggml.scores", v->n_tokens, is_float_type, "f32", &kv, err);
    if (st != FX_OK) return st;
    for (uint32_t i = 0; kv && i < v->n_tokens; i++) {
        double s = fx_gguf_array_float(kv, i);
        if (isnan(s)) return fx_fail(err, FX_ERR_BAD_VOCAB, "tokenizer.ggml.scores[%u] is NaN", i);
        v->scores[i] = (float)s;
    }
    st = get_opt_array(g, "tokenizer.ggml.token_type", v->n_tokens, is_int_type, "integers", &kv, err);
    if (st != FX_OK) return st;
    for (uint32_t i = 0; kv && i < v->n_tokens; i++) {
        int64_t t = fx_gguf_array_int(kv, i);
        if (t < FX_TOKEN_TYPE_UNDEFINED || t > FX_TOKEN_TYPE_BYTE)
            return fx_fail(err, FX_ERR_BAD_VOCAB, "tokenizer.ggml.token_type[%u] = %lld is not a token type (0..6)",
                           i, (long long)t);
        v->types[i] = (uint8_t)t;
    }
    return FX_OK;
}

/* Byte tokens must be spelled <0xHH>, one per byte value: tokenizing falls
 * back to them and decoding trusts them, so a malformed or second one
 * would silently produce wrong bytes. */
static fx_status load_byte_tokens(struct fx_vocab *v, fx_error *err) {
    for (int b = 0; b < 256; b++) v->byte_tok[b] = -1;
    for (uint32_t i = 0; i < v->n_tokens; i++) {
        if (v->types[i] != FX_TOKEN_TYPE_BYTE) continue;
        size_t len;
        const char *s = tok_ptr(v, (int32_t)i, &len);
        int hi = len == 6 ? hexval(s[3]) : -1, lo = len == 6 ? hexval(s[4]) : -1;
        if (len != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>' || hi < 0 || lo < 0)
            return fx_fail(err, FX_ERR_BAD_VOCAB, "token %u is a byte token but its text '%.*s' is not <0xHH>", i,
                           (int)(len > 32 ? 32 : len), s);
        int b = hi * 16 + lo;
        if (v->byte_tok[b] >= 0)
            return fx_fail(err, FX_ERR_BAD_VOCAB, "tokens %d and %u are both the byte token <0x%02X>",
                           v->byte_tok[b], i, b);
        v->byte_tok[b] = (int32_t)i;
    }
    return FX_OK;
}

static fx_status load_merges(struct fx_vocab *v, const fx_gguf *g, fx_error *err) {
    const fx_gguf_kv *kv = fx_gguf_find(g, "tokenizer.ggml.merges");
    if (!kv) return fx_fail(err, FX_ERR_MISSING, "tokenizer.ggml.merges is missing (required by a gpt2 vocabulary)");
    if (kv->type != FX_GGUF_ARRAY || kv->elem_type != FX_GGUF_STRING)
        return fx_fail(err, FX_ERR_BAD_VOCAB, "tokenizer.ggml.merges: expected an array of strings");
    if (kv->count > INT32_MAX)
        return fx_fail(err, FX_ERR_BAD_VOCAB, "tokenizer.ggml.merges: %llu merges (ranks are 31-bit)",
                       (unsigned long long)kv->count);
    uint32_t n = (uint32_t)kv->count;
    v->n_merges = n;
    fx_gguf_str *strs = fx_malloc_array(&v->alloc, n ? n : 1, sizeof *strs);
    if (!strs) return fx_fail(err, FX_ERR_NOMEM, "vocab: out of memory (%u merges)", n);
    fx_gguf_array_strings(kv, strs);
    fx_status st = FX_OK;
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (strs[i].len > 2 * (uint64_t)FX_VOCAB_MAX_TOKEN_LEN + 1) {
            st = fx_fail(err, FX_ERR_BAD_VOCAB, "tokenizer.ggml.merges[%u]: %llu bytes (too long)", i,
                         (unsigned long long)strs[i].len);
            goto done;
        }
        total += strs[i].len;
    }
    if (total >= SIZE_MAX) {
        st = fx_fail(err, FX_ERR_TOO_LARGE, "tokenizer.ggml.merges: too large");
        goto done;
    }
    v->merge_text = fx_malloc(&v->alloc, (size_t)total + 1);
    v->merge_off = fx_malloc_array(&v->alloc, (size_t)n + 1, sizeof(size_t));
    v->merge_left = fx_malloc_array(&v->alloc, n ? n : 1, sizeof(uint32_t));
    if (!v->merge_text || !v->merge_off || !v->merge_left) {
        st = fx_fail(err, FX_ERR_NOMEM, "vocab: out of memory (%u merges)", n);
        goto done;
    }
    st = alloc_slots(&v->alloc, n, &v->merge_slots, &v->merge_mask, err);
    if (st != FX_OK) goto done;
    size_t off = 0;
    for (uint32_t i = 0; i < n; i++) {
        /* "left right", split at the first space after the first byte (a
         * merge may begin with a space); one without a space can never
         * match two non-empty pieces, so it is kept but inert. */
        const char *s = strs[i].ptr;
        size_t len = (size_t)strs[i].len, sp = 0;
        for (size_t k = 1; k < len; k++)
            if (s[k] == ' ') {
                sp = k;
                break;
            }
        v->merge_off[i] = off;
        if (sp) {
            memcpy(v->merge_text + off, s, sp);
            memcpy(v->merge_text + off + sp, s + sp + 1, len - sp - 1);
            off += len - 1;
        }
        v->merge_left[i] = (uint32_t)sp;
    }
    v->merge_off[n] = off;
    for (uint32_t i = 0; i < n; i++)
        if (v->merge_left[i] > 0 && v->merge_off[i + 1] > v->merge_off[i] + v->merge_left[i])
            merge_insert(v, (int32_t)i);
done:
    fx_free(&v->alloc, strs);
    return st;
}

/* Indexed by fx_special_token. ("seperator" is GGUF's spelling.) */
static const char *const k_special_keys[FX_VOCAB_N_SPECIAL] = {
    "tokenizer.ggml.bos_token_id",     "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.seperator_token_id",
    "tokenizer.ggml.padding_token_id", "tokenizer.ggml.eot_token_id",
    "tokenizer.ggml.eom_token_id",     "tokenizer.ggml.mask_token_id",
};

static fx_status load_specials(struct fx_vocab *v, const fx_gguf *g, fx_error *err) {
    for (int w = 0; w < FX_VOCAB_N_SPECIAL; w++) v->special[w] = -1;
    if (v->kind == FX_VOCAB_SPM) {
        v->special[FX_TOKEN_BOS] = 1;
        v->special[FX_TOKEN_EOS] = 2;
        v->special[FX_TOKEN_UNK] = 0;
    } else {
        v->special[FX_TOKEN_BOS] = 11; /* GPT-2's defaults, as llama.cpp */
        v->special[FX_TOKEN_EOS] = 11;
    }
    for (int w = 0; w < FX_VOCAB_N_SPECIAL; w++) /* a default must exist */
        if (v->special[w] >= (int64_t)v->n_tokens) v->special[w] = -1;
    for (int w = 0; w < FX_VOCAB_N_SPECIAL; w++) {
        const char *key = k_special_keys[w];
        if (!fx_gguf_find(g, key)) continue;
        uint32_t id;
        fx_status st = fx_gguf_get_u32(g, key, &id, err);
        if (st != FX_OK) return st;
        if (id >= v->n_tokens)
            return fx_fail(err, FX_ERR_BAD_VOCAB, "%s = %u, but the vocabulary has only %u tokens", key, id,
                           v->n_tokens);
        v->special[w] = (int32_t)id;
    }
    /* Older conversions name their end-of-turn tokens only by text; such a
     * token must act as a control token even if typed otherwise. */
    static const char *const eot_texts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
                                            "<|endoftext|>", "<EOT>",
                                            /* DeepSeek's <｜end▁of▁sentence｜>; the literal is
                                             * split only so "\x9c" does not swallow "e" */
                                            ("<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>")};
    if (v->special[FX_TOKEN_EOT] < 0) {
        for (size_t k = 0; v->special[FX_TOKEN_EOT] < 0 && k < sizeof eot_texts / sizeof eot_texts[0]; k++)
            v->special[FX_TOKEN_EOT] = fx_vocab_find(v, eot_texts[k], strlen(eot_texts[k]));
        if (v->special[FX_TOKEN_EOT] >= 0) v->types[v->special[FX_TOKEN_EOT]] = FX_TOKEN_TYPE_CONTROL;
    }
    if (v->special[FX_TOKEN_EOM] < 0) {
        v->special[FX_TOKEN_EOM] = fx_vocab_find(v, "<|eom_id|>", 10);
        if (v->special[FX_TOKEN_EOM] >= 0) v->types[v->special[FX_TOKEN_EOM]] = FX_TOKEN_TYPE_CONTROL;
    }
    return FX_OK;
}

typedef struct len_id {
    size_t len;
    int32_t id;
} len_id;

static int by_len_desc(const void *pa, const void *pb) {
    const len_id *a = pa, *b = pb;
    if (a->len != b->len) return a->len > b->len ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id; /* ties in id order */
}

static bool is_special_type(int t) {
    return t == FX_TOKEN_TYPE_CONTROL || t == FX_TOKEN_TYPE_UNKNOWN || t == FX_TOKEN_TYPE_USER_DEFINED;
}

/* Control, unknown and user-defined tokens, longest first: with special
 * parsing on, a longer one wins over a shorter one it contains. */
static fx_status build_special_list(struct fx_vocab *v, fx_error *err) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < v->n_tokens; i++)
        if (is_special_type(v->types[i]) && v->tok_off[i + 1] > v->tok_off[i]) n++;
    v->n_specials = n;
    if (!n) return FX_OK;
    v->specials = fx_malloc_array(&v->alloc, n, sizeof(int32_t));
    len_id *tmp = fx_malloc_array(&v->alloc, n, sizeof *tmp);
    if (!v->specials || !tmp) {
        fx_free(&v->alloc, tmp);
        return fx_fail(err, FX_ERR_NOMEM, "vocab: out of memory (special tokens)");
    }
    n = 0;
    for (uint32_t i = 0; i < v->n_tokens; i++)
        if (is_special_type(v->types[i]) && v->tok_off[i + 1] > v->tok_off[i])
            tmp[n++] = (len_id){v->tok_off[i + 1] - v->tok_off[i], (int32_t)i};
    qsort(tmp, n, sizeof *tmp, by_len_desc);
    for (uint32_t i = 0; i < n; i++) v->specials[i] = tmp[i].id;
    fx_free(&v->alloc, tmp);
    return FX_OK;
}

/* The most bytes of text one token can stand for, if every byte of text
 * ends up in some token. The text a token covers is never longer than its
 * stored form (spaces become 3-byte `▁`, GPT-2 bytes 1- or 2-byte code
 * points, special tokens match their own text), so the longest stored
 * text bounds it. SentencePiece gives every byte a token (its byte token,
 * itself or UNK) or fails; BPE drops a byte whose symbol is not a token,
 * so the bound holds only if every byte's symbol and every merge's result
 * is a token. */
static size_t bytes_per_token(const struct fx_vocab *v) {
    size_t most = 1;
    for (uint32_t i = 0; i < v->n_tokens; i++)
        if (v->tok_off[i + 1] - v->tok_off[i] > most) most = v->tok_off[i + 1] - v->tok_off[i];
    if (v->kind != FX_VOCAB_BPE) return most;
    for (int b = 0; b < 256; b++) {
        unsigned char u[4];
        if (fx_vocab_find(v, (const char *)u, fx_utf8_encode(v->b2u[b], u)) < 0) return 0;
    }
    for (uint32_t i = 0; i < v->n_merges; i++) {
        size_t len = v->merge_off[i + 1] - v->merge_off[i];
        if (v->merge_left[i] > 0 && len > v->merge_left[i] &&
            fx_vocab_find(v, v->merge_text + v->merge_off[i], len) < 0)
            return 0;
    }
    return most;
}

/* True when every `▁` inside every token follows another `▁`: then a
 * token can never span "x|▁" and words are independent (true of Llama's). */
static bool spm_words_independent(const struct fx_vocab *v) {
    for (uint32_t i = 0; i < v->n_tokens; i++) {
        size_t len;
        const char *s = tok_ptr(v, (int32_t)i, &len);
        for (size_t k = 1; k + 3 <= len; k++)
            if (memcmp(s + k, "\xe2\x96\x81", 3) == 0 && (k < 3 || memcmp(s + k - 3, "\xe2\x96\x81", 3) != 0))
                return false;
    }
    return true;
}

static fx_status load_kind(struct fx_vocab *v, const fx_gguf *g, const fx_logger *log, fx_error *err) {
    if (!fx_gguf_find(g, "tokenizer.ggml.model"))
        return fx_fail(err, FX_ERR_MISSING, "tokenizer.ggml.model is missing: the file has no vocabulary");
    fx_gguf_str model;
    fx_status st = fx_gguf_get_str(g, "tokenizer.ggml.model", &model, err);
    if (st != FX_OK) return st;
    if (model.len == 5 && memcmp(model.ptr, "llama", 5) == 0) {
        v->kind = FX_VOCAB_SPM;
        v->pre = FX_PRETOK_NONE;
        v->add_space_prefix = true;
        v->add_bos = true;
        return FX_OK;
    }
    if (!(model.len == 4 && memcmp(model.ptr, "gpt2", 4) == 0))
        return fx_fail(err, FX_ERR_UNSUPPORTED, "tokenizer.ggml.model '%.*s' is not supported (llama, gpt2)",
                       (int)(model.len > 64 ? 64 : model.len), model.ptr);
    v->kind = FX_VOCAB_BPE;
    fx_gguf_str pre = {"", 0};
    st = fx_gguf_get_str_opt(g, "tokenizer.ggml.pre", &pre, err);
    if (st != FX_OK) return st;
    if (pre.len == 0) {
        fx_log(log, FX_LOG_WARN, "tokenizer.ggml.pre is missing: using the 'default' pre-tokenizer");
        v->pre = FX_PRETOK_DEFAULT;
        return FX_OK;
    }
    int i = pre_lookup(pre.ptr, (size_t)pre.len);
    if (i < 0)
        return fx_fail(err, FX_ERR_UNSUPPORTED, "tokenizer.ggml.pre '%.*s' is an unknown pre-tokenizer",
                       (int)(pre.len > 64 ? 64 : pre.len), pre.ptr);
    v->pre = k_pre_names[i].kind;
    v->ignore_merges = k_pre_names[i].ignore_merges;
    v->add_bos = k_pre_names[i].add_bos;
    return FX_OK;
}

fx_status fx_vocab_load(const fx_gguf *g, const fx_alloc *alloc, const fx_logger *log,
                        struct fx_vocab **out, fx_error *err) {
    if (!g || !alloc || !out) return fx_fail(err, FX_ERR_INVALID_ARG, "fx_vocab_load: NULL argument");
    *out = NULL;
    struct fx_vocab *v = fx_calloc(alloc, 1, sizeof *v);
    if (!v) return fx_fail(err, FX_ERR_NOMEM, "vocab: out of memory");
    v->alloc = *alloc;
    build_byte_map(v);
    fx_status st = load_kind(v, g, log, err);
    if (st == FX_OK) st = load_tokens(v, g, err);
    if (st == FX_OK) st = load_scores_types(v, g, err);
    if (st == FX_OK) st = load_byte_tokens(v, err);
    if (st == FX_OK && v->kind == FX_VOCAB_BPE) st = load_merges(v, g, err);
    if (st == FX_OK) st = load_specials(v, g, err);
    if (st == FX_OK) st = fx_gguf_get_bool_opt(g, "tokenizer.ggml.add_bos_token", &v->add_bos, err);
    if (st == FX_OK) st = fx_gguf_get_bool_opt(g, "tokenizer.ggml.add_eos_token", &v->add_eos, err);
    if (st == FX_OK) st = fx_gguf_get_bool_opt(g, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix, err);
    if (st == FX_OK && v->add_bos && v->special[FX_TOKEN_BOS] < 0)
        st = fx_fail(err, FX_ERR_BAD_VOCAB, "the vocabulary asks for a BOS token but has none");
    if (st == FX_OK && v->add_eos && v->special[FX_TOKEN_EOS] < 0)
        st = fx_fail(err, FX_ERR_BAD_VOCAB, "the vocabulary asks for an EOS token but has none");
    if (st == FX_OK) st = build_special_list(v, err);
    if (st == FX_OK && v->kind == FX_VOCAB_SPM) v->spm_words = spm_words_independent(v);
    if (st == FX_OK) v->bytes_per_token = bytes_per_token(v);
    if (st != FX_OK) {
        fx_vocab_free(v);
        return st;
    }
    *out = v;
    return FX_OK;
}
