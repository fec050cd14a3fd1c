/*
 * Text to tokens: special-token partitioning, SentencePiece and BPE.
 *
 * Both tokenizers merge over a doubly linked list of symbols with a binary
 * heap of candidate pairs, as llama.cpp does: each merge pushes at most two
 * new pairs, so a text of n symbols costs O(n log n). BPE runs per
 * pre-token, and SentencePiece per word when the vocabulary allows it (see
 * spm_words in vocab_impl.h): the heaps stay small and in cache, and the
 * cost linear in the text, with exactly the tokens of whole-text merging
 * (tests/test_tokenizer_chunks.c checks both).
 * A pair popped after one of its symbols has changed is stale and skipped:
 * symbols only grow and never move, so a changed symbol shows as a length
 * that no longer adds up to the pair's.
 */
#include <string.h>

#include "vocab_impl.h"

#define NONE UINT32_MAX

/* Symbol indices are 32-bit (a word or chunk has fewer than 2^32 - 1
 * symbols, checked) and so is a symbol's length (a merged symbol is a
 * token, at most FX_VOCAB_MAX_TOKEN_LEN bytes): small entries keep the
 * list and heap in cache, which is most of the speed on long text. */
typedef struct sym {
    size_t start;      /* offset in the text being merged */
    uint32_t prev, next; /* neighbours in the list, NONE at the ends */
    uint32_t n;        /* bytes; 0 once merged into its left neighbour */
} sym;

/* A candidate merge of `left` with the symbol after it. prio orders the
 * heap, highest first: the merge's key in the high half (SentencePiece:
 * the merged token's score; BPE: the reversed rank) and the reversed left
 * index below, so that among equal keys the leftmost pair wins (as in
 * llama.cpp). */
typedef struct bigram {
    uint64_t prio;
    uint32_t left;
    uint32_t size; /* bytes of left + right when pushed */
} bigram;

/* A float's bits as an unsigned number with the same order. */
static uint32_t score_key(float f) {
    uint32_t u;
    if (f == 0.0f) f = 0.0f; /* -0 and +0 tie, as they compare */
    memcpy(&u, &f, sizeof u);
    return (u & 0x80000000u) ? ~u : u | 0x80000000u;
}

static bigram make_bigram(uint32_t key, uint32_t left, uint32_t size) {
    bigram b = {((uint64_t)key << 32) | (uint64_t)(UINT32_MAX - left), left, size};
    return b;
}

typedef struct tk_ctx {
    const struct fx_vocab *v;
    const fx_alloc *a;
    fx_error *err;
    int32_t *out; /* the caller's buffer: ids past cap are counted only */
    size_t cap, n;
    sym *syms;
    size_t syms_cap;
    bigram *heap;
    size_t heap_n, heap_cap;
    unsigned char *buf; /* escaped fragment (SPM) / encoded word (BPE) */
    size_t buf_cap;
} tk_ctx;

static void put(tk_ctx *c, int32_t id) {
    if (c->n < c->cap) c->out[c->n] = id;
    c->n++;
}

/* Grows *p to hold need elements of elem bytes (doubling). */
static fx_status reserve(tk_ctx *c, void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return FX_OK;
    size_t want = *cap ? *cap : 64;
    while (want < need) want = want > SIZE_MAX / 2 ? need : want * 2;
    uint64_t bytes;
    if (!fx_mul_u64(want, elem, &bytes) || bytes > SIZE_MAX)
        return fx_fail(c->err, FX_ERR_TOO_LARGE, "tokenize: %zu elements of %zu bytes overflow", want, elem);
    void *q = fx_realloc(c->a, *p, (size_t)bytes);
    if (!q) return fx_fail(c->err, FX_ERR_NOMEM, "tokenize: out of memory (%llu bytes)", (unsigned long long)bytes);
    *p = q;
    *cap = want;
    return FX_OK;
}

/* A 4-ary max-heap: half the depth of a binary one, and the four
 * children of a node share a cache line. */
static fx_status heap_push(tk_ctx *c, bigram b) {
    void *p = c->heap;
    fx_status st = reserve(c, &p, &c->heap_cap, c->heap_n + 1, sizeof(bigram));
    c->heap = p;
    if (st != FX_OK) return st;
    size_t i = c->heap_n++;
    while (i > 0) {
        size_t parent = (i - 1) / 4;
        if (c->heap[parent].prio >= b.prio) break;
        c->heap[i] = c->heap[parent];
        i = parent;
    }
    c->heap[i] = b;
    return FX_OK;
}

static bigram heap_pop(tk_ctx *c) {
    bigram top = c->heap[0], last = c->heap[--c->heap_n];
    size_t i = 0, n = c->heap_n;
    for (;;) {
        size_t first = 4 * i + 1, best = i;
        uint64_t best_prio = last.prio;
        for (size_t k = first; k < first + 4 && k < n; k++)
            if (c->heap[k].prio > best_prio) {
                best = k;
                best_prio = c->heap[k].prio;
            }
        if (best == i) break;
        c->heap[i] = c->heap[best];
        i = best;
    }
    if (n > 0) c->heap[i] = last;
    return top;
}

static fx_status ensure_syms(tk_ctx *c, size_t n) {
    void *p = c->syms;
    fx_status st = reserve(c, &p, &c->syms_cap, n, sizeof(sym));
    c->syms = p;
    return st;
}

static fx_status ensure_buf(tk_ctx *c, size_t n) {
    void *p = c->buf;
    fx_status st = reserve(c, &p, &c->buf_cap, n, 1);
    c->buf = p;
    return st;
}

/* Merges adjacent symbols of buf[0..n) while try_pair finds candidates;
 * the caller has filled c->syms and linked them. */
typedef fx_status (*try_pair_fn)(tk_ctx *c, uint32_t left, uint32_t right);

static fx_status merge_all(tk_ctx *c, uint32_t n_syms, try_pair_fn try_pair) {
    fx_status st = FX_OK;
    c->heap_n = 0;
    for (uint32_t i = 1; i < n_syms && st == FX_OK; i++) st = try_pair(c, i - 1, i);
    while (st == FX_OK && c->heap_n > 0) {
        bigram b = heap_pop(c);
        /* The right symbol is the left one's current neighbour: that
         * changes only if the left one absorbed it, which the size check
         * catches, so the pair need not be stored. */
        sym *l = &c->syms[b.left];
        if (l->n == 0 || l->next == NONE) continue;
        sym *r = &c->syms[l->next];
        if (l->n + r->n != b.size) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next != NONE) c->syms[r->next].prev = b.left;
        if (l->prev != NONE) st = try_pair(c, l->prev, b.left);
        if (st == FX_OK && l->next != NONE) st = try_pair(c, b.left, l->next);
    }
    return st;
}

/* ---- SentencePiece ---- */

static fx_status spm_try(tk_ctx *c, uint32_t left, uint32_t right) {
    const sym *l = &c->syms[left], *r = &c->syms[right];
    int32_t id = fx_vocab_find(c->v, (const char *)c->buf + l->start, (size_t)l->n + r->n);
    if (id < 0) return FX_OK;
    return heap_push(c, make_bigram(score_key(c->v->scores[id]), left, l->n + r->n));
}

/* A byte no token covers: its <0xXX> token, else a token that is the byte
 * itself, else UNK (llama.cpp's byte_to_token, which throws instead). */
static fx_status spm_byte(tk_ctx *c, unsigned char byte) {
    static const char hex[] = "0123456789ABCDEF";
    char name[6] = {'<', '0', 'x', hex[byte >> 4], hex[byte & 15], '>'};
    int32_t id = fx_vocab_find(c->v, name, 6);
    if (id < 0) id = fx_vocab_find(c->v, (const char *)&byte, 1);
    if (id < 0) id = c->v->special[FX_TOKEN_UNK];
    if (id < 0)
        return fx_fail(c->err, FX_ERR_BAD_VOCAB,
                       "tokenize: byte 0x%02X has no token and the vocabulary has no unknown token", byte);
    put(c, id);
    return FX_OK;
}

/* The length a UTF-8 lead byte announces, leniently (invalid bytes are one
 * symbol each): llama.cpp's unicode_len_utf8, so merges see what it sees. */
static size_t lead_len(unsigned char b) {
    static const unsigned char k[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return k[b >> 4];
}

/* Merges and emits the symbols of c->buf[from..to). */
static fx_status spm_run(tk_ctx *c, size_t from, size_t to) {
    fx_status st = ensure_syms(c, to - from);
    if (st != FX_OK) return st;
    uint32_t k = 0;
    for (size_t off = from; off < to; k++) {
        if (k == NONE - 1) return fx_fail(c->err, FX_ERR_TOO_LARGE, "tokenize: too many characters in one word");
        uint32_t l = (uint32_t)lead_len(c->buf[off]);
        if (l > to - off) l = (uint32_t)(to - off);
        c->syms[k] = (sym){off, k ? k - 1 : NONE, NONE, l};
        if (k) c->syms[k - 1].next = k;
        off += l;
    }
    st = merge_all(c, k, spm_try);
    for (uint32_t i = 0; st == FX_OK && k > 0 && i != NONE; i = c->syms[i].next) {
        const sym *s = &c->syms[i];
        int32_t id = fx_vocab_find(c->v, (const char *)c->buf + s->start, s->n);
        if (id >= 0) {
            put(c, id);
            continue;
        }
        for (size_t j = 0; j < s->n && st == FX_OK; j++) st = spm_byte(c, c->buf[s->start + j]);
    }
    return st;
}

/* Writes text[0..len) into c->buf with " " as U+2581 (3 bytes), after one
 * U+2581 when prefix is set; *n gets the length. */
static fx_status spm_escape(tk_ctx *c, const char *text, size_t len, bool prefix, size_t *n) {
    size_t spaces = prefix ? 1 : 0;
    for (size_t i = 0; i < len; i++) spaces += text[i] == ' ';
    uint64_t total;
    if (!fx_add_u64(len, (uint64_t)spaces * 2 + (prefix ? 1 : 0), &total) || total > SIZE_MAX / 4)
        return fx_fail(c->err, FX_ERR_TOO_LARGE, "tokenize: text too large");
    fx_status st = ensure_buf(c, (size_t)total);
    if (st != FX_OK) return st;
    unsigned char *o = c->buf;
    if (prefix) {
        memcpy(o, "\xe2\x96\x81", 3);
        o += 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(o, "\xe2\x96\x81", 3);
            o += 3;
        } else {
            *o++ = (unsigned char)text[i];
        }
    }
    *n = (size_t)(o - c->buf);
    return FX_OK;
}

/* Merges c->buf[0..n) word by word: a cut before each `▁` symbol that
 * follows a non-`▁` one. Symbols are found exactly as over the whole text,
 * so the cuts fall on them. */
static fx_status spm_by_words(tk_ctx *c, size_t n) {
    fx_status st = FX_OK;
    size_t from = 0;
    bool prev_space = false;
    for (size_t off = 0; off < n && st == FX_OK;) {
        size_t l = lead_len(c->buf[off]);
        if (l > n - off) l = n - off;
        bool space = l == 3 && memcmp(c->buf + off, "\xe2\x96\x81", 3) == 0;
        if (space && !prev_space && off > from) {
            st = spm_run(c, from, off);
            from = off;
        }
        prev_space = space;
        off += l;
    }
    if (st == FX_OK) st = spm_run(c, from, n);
    return st;
}

/* Long text is escaped and merged a block at a time, so the buffers stay
 * small. A block ends before a space that follows three printable ASCII
 * bytes: no symbol reaches across (a lead byte announces at most 4 bytes),
 * the symbol before is not `▁`, so the cut is one spm_by_words makes. */
#define SPM_BLOCK 16384

static bool spm_cut(const unsigned char *t, size_t q) {
    if (q < 3 || t[q] != ' ') return false;
    for (size_t k = q - 3; k < q; k++)
        if (t[k] <= 0x20 || t[k] >= 0x7F) return false;
    return true;
}

static size_t spm_block_end(const char *text, size_t from, size_t len) {
    const unsigned char *t = (const unsigned char *)text;
    if (len - from <= SPM_BLOCK) return len;
    for (size_t q = from + SPM_BLOCK; q > from + SPM_BLOCK / 2; q--)
        if (spm_cut(t, q)) return q;
    for (size_t q = from + SPM_BLOCK + 1; q < len; q++)
        if (spm_cut(t, q)) return q;
    return len;
}

static fx_status spm_fragment(tk_ctx *c, const char *text, size_t len, bool prefix) {
    size_t n = 0;
    fx_status st = FX_OK;
    if (!c->v->spm_words) { /* merges may cross words: the whole at once */
        st = spm_escape(c, text, len, prefix, &n);
        return st == FX_OK ? spm_run(c, 0, n) : st;
    }
    for (size_t from = 0; st == FX_OK && from < len;) {
        size_t to = spm_block_end(text, from, len);
        st = spm_escape(c, text + from, to - from, prefix && from == 0, &n);
        if (st == FX_OK) st = spm_by_words(c, n);
        from = to;
    }
    return st;
}

/* ---- BPE ---- */

static fx_status bpe_try(tk_ctx *c, uint32_t left, uint32_t right) {
    const sym *l = &c->syms[left], *r = &c->syms[right];
    int32_t rank = fx_vocab_merge_rank(c->v, (const char *)c->buf + l->start, l->n, (size_t)l->n + r->n);
    if (rank < 0) return FX_OK;
    return heap_push(c, make_bigram(UINT32_MAX - (uint32_t)rank, left, l->n + r->n));
}

static fx_status bpe_word(tk_ctx *c, const unsigned char *w, size_t len) {
    const struct fx_vocab *v = c->v;
    /* worst case: an invalid byte becomes U+FFFD (3 bytes), each of those
     * a 2-byte mapped character */
    if (len > SIZE_MAX / 6 || len > (NONE - 2) / 3)
        return fx_fail(c->err, FX_ERR_TOO_LARGE, "tokenize: a word of %zu bytes is too long", len);
    fx_status st = ensure_buf(c, len * 6);
    if (st == FX_OK) st = ensure_syms(c, len * 3);
    if (st != FX_OK) return st;
    size_t n = 0;
    uint32_t k = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        unsigned char u[4];
        i += fx_utf8_decode(w + i, len - i, &cp);
        size_t ul = fx_utf8_encode(cp, u);
        for (size_t j = 0; j < ul; j++) {
            uint32_t cl = (uint32_t)fx_utf8_encode(v->b2u[u[j]], c->buf + n);
            c->syms[k] = (sym){n, k ? k - 1 : NONE, NONE, cl};
            if (k) c->syms[k - 1].next = k;
            n += cl;
            k++;
        }
    }
    if (k == 0) return FX_OK;
    if (v->ignore_merges) {
        int32_t id = fx_vocab_find(v, (const char *)c->buf, n);
        if (id >= 0) {
            put(c, id);
            return FX_OK;
        }
    }
    st = merge_all(c, k, bpe_try);
    for (uint32_t i = 0; st == FX_OK && i != NONE; i = c->syms[i].next) {
        const sym *s = &c->syms[i];
        int32_t id = fx_vocab_find(v, (const char *)c->buf + s->start, s->n);
        if (id >= 0) {
            put(c, id);
            continue;
        }
        /* llama.cpp's fallback: single-byte tokens where they exist; the
         * rest of the symbol is dropped */
        for (size_t j = 0; j < s->n; j++) {
            id = fx_vocab_find(v, (const char *)c->buf + s->start + j, 1);
            if (id >= 0) put(c, id);
        }
    }
    return st;
}

/* Pre-tokenizes and merges block by block: the workspace then stays small
 * and in cache however long the text is. */
#define BPE_BLOCK 16384

static fx_status bpe_fragment(tk_ctx *c, const char *text, size_t len) {
    fx_pretok_ws ws = {.alloc = c->a};
    fx_status st = FX_OK;
    for (size_t from = 0; st == FX_OK && from < len;) {
        size_t to = fx_pretok_block_end(text, from, len, BPE_BLOCK), n = 0, start = 0;
        const size_t *ends = NULL;
        st = fx_pretok_ws_split(&ws, c->v->pre, text + from, to - from, &ends, &n, c->err);
        for (size_t i = 0; st == FX_OK && i < n; i++) {
            st = bpe_word(c, (const unsigned char *)text + from + start, ends[i] - start);
            start = ends[i];
        }
        from = to;
    }
    fx_pretok_ws_free(&ws);
    return st;
}

/* ---- special tokens ---- */

typedef struct frag {
    size_t off, len;
    int32_t tok; /* -1: text[off..off+len) is text */
} frag;

static const char *find_bytes(const char *hay, size_t n, const char *needle, size_t m) {
    if (m == 0 || m > n) return NULL;
    const char *end = hay + (n - m) + 1;
    for (const char *p = hay; p < end;) {
        p = memchr(p, needle[0], (size_t)(end - p));
        if (!p) return NULL;
        if (memcmp(p, needle, m) == 0) return p;
        p++;
    }
    return NULL;
}

/* Splits the text at every occurrence of every special token, longest
 * tokens first over the whole text (llama.cpp's tokenizer_st_partition),
 * so a long token is never broken by a shorter one inside it. */
/* Without special parsing only the user-defined tokens are cut out: as
 * llama.cpp and the Hugging Face tokenizers do, they are matched before
 * anything else whatever the flags (GPT-NeoX's runs of spaces in mpt,
 * olmo, stablelm). */
static fx_status partition(tk_ctx *c, const char *text, size_t len, bool parse_special, frag **out,
                           size_t *n_out) {
    frag *cur = NULL, *nxt = NULL;
    size_t cur_cap = 0, nxt_cap = 0, n = 1;
    void *p = NULL;
    fx_status st = reserve(c, &p, &cur_cap, 1, sizeof(frag));
    cur = p;
    if (st != FX_OK) return st;
    cur[0] = (frag){0, len, -1};
    for (uint32_t s = 0; s < c->v->n_specials && st == FX_OK; s++) {
        int32_t id = c->v->specials[s];
        if (!parse_special && c->v->types[id] != FX_TOKEN_TYPE_USER_DEFINED) continue;
        size_t tl;
        const char *tt = fx_vocab_token_text(c->v, id, &tl);
        size_t m = 0;
        for (size_t i = 0; i < n && st == FX_OK; i++) {
            frag f = cur[i];
            while (st == FX_OK) {
                const char *hit = f.tok < 0 ? find_bytes(text + f.off, f.len, tt, tl) : NULL;
                /* at most two pieces are added per step */
                p = nxt;
                st = reserve(c, &p, &nxt_cap, m + 2, sizeof(frag));
                nxt = p;
                if (st != FX_OK) break;
                if (!hit) {
                    if (f.len > 0 || f.tok >= 0) nxt[m++] = f;
                    break;
                }
                size_t at = (size_t)(hit - text);
                if (at > f.off) nxt[m++] = (frag){f.off, at - f.off, -1};
                nxt[m++] = (frag){at, tl, id};
                f = (frag){at + tl, f.off + f.len - at - tl, -1};
            }
        }
        frag *t = cur;
        size_t tc = cur_cap;
        cur = nxt;
        cur_cap = nxt_cap;
        nxt = t;
        nxt_cap = tc;
        n = m;
    }
    fx_free(c->a, nxt);
    if (st != FX_OK) {
        fx_free(c->a, cur);
        return st;
    }
    *out = cur;
    *n_out = n;
    return FX_OK;
}

fx_status fx_vocab_tokenize(const struct fx_vocab *v, const fx_alloc *alloc, const char *text, size_t len,
                            uint32_t flags, int32_t *out, size_t cap, size_t *n_out, fx_error *err) {
    *n_out = 0;
    if (len > (size_t)INT32_MAX)
        return fx_fail(err, FX_ERR_TOO_LARGE, "tokenize: %zu bytes of text (at most 2^31 - 1)", len);
    tk_ctx c = {v, alloc, err, out, out ? cap : 0, 0, NULL, 0, NULL, 0, 0, NULL, 0};
    fx_status st = FX_OK;
    bool add = (flags & FX_TOKENIZE_ADD_SPECIAL) != 0;
    if (add && v->add_bos) put(&c, v->special[FX_TOKEN_BOS]);
    frag one = {0, len, -1}, *frags = &one;
    size_t n_frags = len > 0 ? 1 : 0;
    if (len > 0 && v->n_specials > 0)
        st = partition(&c, text, len, (flags & FX_TOKENIZE_PARSE_SPECIAL) != 0, &frags, &n_frags);
    /* SentencePiece puts a space before the text, and again after every
     * special token, as llama.cpp does */
    bool prev_special = true;
    for (size_t i = 0; st == FX_OK && i < n_frags; i++) {
        const frag *f = &frags[i];
        if (f->tok >= 0) {
            put(&c, f->tok);
            prev_special = true;
        } else if (v->kind == FX_VOCAB_SPM) {
            st = spm_fragment(&c, text + f->off, f->len, v->add_space_prefix && prev_special);
            prev_special = false;
        } else {
            st = bpe_fragment(&c, text + f->off, f->len);
        }
    }
    if (st == FX_OK && add && v->add_eos) put(&c, v->special[FX_TOKEN_EOS]);
    if (frags != &one) fx_free(alloc, frags);
    fx_free(alloc, c.syms);
    fx_free(alloc, c.heap);
    fx_free(alloc, c.buf);
    if (st != FX_OK) return st;
    *n_out = c.n;
    if (c.n > c.cap)
        return fx_fail(err, FX_ERR_BUFFER_TOO_SMALL, "tokenize: %zu tokens needed, the buffer holds %zu", c.n,
                       c.cap);
    return FX_OK;
}
