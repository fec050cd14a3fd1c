/*
 * The vocabulary as a byte trie over token pieces (the exact bytes the
 * batcher streams), built once per vocabulary and then read-only. Nodes
 * are renumbered in preorder and carry subtree summaries (token range,
 * ASCII bytes, UTF-8 validity) so the mask walk can accept a whole subtree
 * without visiting it.
 */
#include "grammar.h"

#include <string.h>

#include "../tokenizer/tokenizer.h"
#include "ferrox.h"

static fx_status trie_child(fx_trie_node **nodes, uint32_t *n, uint32_t *cap,
                            uint32_t node, uint8_t byte, uint32_t *out,
                            const fx_alloc *alloc) {
    uint32_t c = (*nodes)[node].first_child;
    for (; c; c = (*nodes)[c].next_sibling)
        if ((*nodes)[c].byte == byte) {
            *out = c;
            return FX_OK;
        }
    if (*n == *cap) {
        if (*cap > UINT32_MAX / 4) return FX_ERR_TOO_LARGE;
        uint32_t nc = *cap * 2;
        fx_trie_node *p = fx_realloc(alloc, *nodes, (size_t)nc * sizeof *p);
        if (!p) return FX_ERR_NOMEM;
        *nodes = p;
        *cap = nc;
    }
    uint32_t id = (*n)++;
    memset(&(*nodes)[id], 0, sizeof **nodes);
    (*nodes)[id].byte = byte;
    (*nodes)[id].next_sibling = (*nodes)[node].first_child;
    (*nodes)[node].first_child = id;
    *out = id;
    return FX_OK;
}

/* Renumbers the nodes in preorder and fills the subtree summaries. */
static fx_status finish_trie(fx_vocab_trie *t, fx_trie_node *raw,
                             const uint32_t *end, fx_error *err) {
    const fx_alloc *al = &t->alloc;
    uint32_t n = t->n_nodes;
    uint32_t *order = fx_malloc_array(al, n, sizeof *order);
    uint32_t *newid = fx_malloc_array(al, n, sizeof *newid);
    uint32_t *stack = fx_malloc_array(al, n, sizeof *stack);
    uint32_t *parent = fx_malloc_array(al, n, sizeof *parent);
    uint32_t *uval = fx_malloc_array(al, n, sizeof *uval);
    uint32_t *uleft = fx_malloc_array(al, n, sizeof *uleft);
    uint16_t *starts = fx_malloc_array(al, n, sizeof *starts);
    fx_status st = FX_OK;
    if (!order || !newid || !stack || !parent || !uval || !uleft || !starts) {
        st = fx_fail(err, FX_ERR_NOMEM, "out of memory");
        goto out;
    }
    uint32_t k = 0, sp = 0;
    stack[sp++] = 0;
    while (sp) {
        uint32_t v = stack[--sp];
        newid[v] = k;
        order[k++] = v;
        /* Children pushed so the first is visited first. */
        uint32_t first = sp;
        for (uint32_t c = raw[v].first_child; c; c = raw[c].next_sibling) stack[sp++] = c;
        for (uint32_t a = first, b = sp; a + 1 < b; a++, b--) {
            uint32_t x = stack[a];
            stack[a] = stack[b - 1];
            stack[b - 1] = x;
        }
    }
    uint32_t acc = 0;
    for (uint32_t i = 0; i < n; i++) {
        const fx_trie_node *r = &raw[order[i]];
        fx_trie_node *d = &t->nodes[i];
        memset(d, 0, sizeof *d);
        d->byte = r->byte;
        d->first_child = r->first_child ? newid[r->first_child] : 0;
        d->next_sibling = r->next_sibling ? newid[r->next_sibling] : 0;
        d->tok_start = acc;
        d->tok_count = 0;
        acc += r->tok_count;
    }
    /* Parents, then what accumulates along each root path (preorder
     * visits a parent before its children): characters started, and the
     * decoder state. */
    parent[0] = 0;
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t c = t->nodes[i].first_child; c; c = t->nodes[c].next_sibling)
            parent[c] = i;
    starts[0] = 0;
    for (uint32_t i = 1; i < n; i++) {
        uint16_t s = starts[parent[i]];
        starts[i] = (t->nodes[i].byte & 0xC0) == 0x80 || s == UINT16_MAX ? s : (uint16_t)(s + 1);
    }
    for (uint32_t id = 0; id < t->n_vocab; id++)
        if (end[id]) {
            uint32_t node = newid[end[id]];
            fx_trie_node *d = &t->nodes[node];
            t->starts[d->tok_start + d->tok_count] = starts[node];
            t->ids[d->tok_start + d->tok_count++] = (int32_t)id;
        }
    t->n_ids = acc;
    uval[0] = uleft[0] = 0;
    for (uint32_t i = 1; i < n; i++) {
        fx_trie_node *d = &t->nodes[i];
        uint32_t v = uval[parent[i]], l = uleft[parent[i]], cp;
        int valid = uleft[parent[i]] != UINT32_MAX &&
                    fx_gutf8_step(d->byte, &v, &l, &cp) >= 0;
        uval[i] = v;
        uleft[i] = valid ? l : UINT32_MAX; /* poisoned below an error */
        d->flags = valid ? FX_TRIE_VALID : 0;
        if (d->byte >= 0x80) d->flags |= FX_TRIE_NONASCII;
        else d->ascii[d->byte >> 6] |= 1ull << (d->byte & 63);
        d->sub_end = d->tok_start + d->tok_count;
        d->height = 1;
    }
    t->nodes[0].sub_end = t->nodes[0].tok_start + t->nodes[0].tok_count;
    t->nodes[0].height = 0;
    /* Children after parents in preorder: fold upward in reverse. */
    for (uint32_t i = n; i-- > 1;) {
        fx_trie_node *d = &t->nodes[i], *p = &t->nodes[parent[i]];
        if (d->sub_end > p->sub_end) p->sub_end = d->sub_end;
        uint32_t h = d->height + 1u < UINT16_MAX ? d->height + 1u : UINT16_MAX;
        if (parent[i] && h > p->height) p->height = (uint16_t)h;
        p->ascii[0] |= d->ascii[0];
        p->ascii[1] |= d->ascii[1];
        p->flags |= d->flags & FX_TRIE_NONASCII;
        if (!(d->flags & FX_TRIE_VALID)) p->flags &= (uint8_t)~FX_TRIE_VALID;
    }
out:
    fx_free(al, order);
    fx_free(al, newid);
    fx_free(al, stack);
    fx_free(al, parent);
    fx_free(al, uval);
    fx_free(al, uleft);
    fx_free(al, starts);
    return st;
}

fx_status fx_vocab_trie_build(const fx_alloc *alloc, const struct fx_vocab *vocab,
                              fx_vocab_trie **out, fx_error *err) {
    *out = NULL;
    uint32_t nv = fx_vocab_n_tokens(vocab), cap = 1024, n = 1;
    fx_vocab_trie *t = fx_calloc(alloc, 1, sizeof *t);
    if (!t) return fx_fail(err, FX_ERR_NOMEM, "out of memory");
    t->alloc = *alloc;
    t->n_vocab = nv;
    t->eos = fx_vocab_special(vocab, FX_TOKEN_EOS);
    fx_trie_node *raw = fx_malloc_array(alloc, cap, sizeof *raw);
    t->ids = fx_malloc_array(alloc, nv ? nv : 1, sizeof *t->ids);
    t->starts = fx_malloc_array(alloc, nv ? nv : 1, sizeof *t->starts);
    t->eog = fx_malloc_array(alloc, nv ? nv : 1, sizeof *t->eog);
    uint32_t *end = fx_malloc_array(alloc, nv ? nv : 1, sizeof *end);
    char *buf = fx_malloc(alloc, FX_VOCAB_MAX_TOKEN_LEN);
    fx_status st = FX_OK;
    if (!raw || !t->ids || !t->starts || !t->eog || !end || !buf) {
        st = fx_fail(err, FX_ERR_NOMEM, "out of memory");
        goto done;
    }
    memset(&raw[0], 0, sizeof *raw);
    for (uint32_t id = 0; id < nv; id++) {
        end[id] = 0;
        if (fx_vocab_is_eog(vocab, (int32_t)id)) {
            t->eog[t->n_eog++] = (int32_t)id;
            continue;
        }
        size_t len = 0;
        if ((st = fx_vocab_token_to_piece(vocab, (int32_t)id, 0, buf,
                                          FX_VOCAB_MAX_TOKEN_LEN, &len, err)) != FX_OK)
            goto done;
        uint32_t node = 0;
        for (size_t i = 0; i < len; i++)
            if ((st = trie_child(&raw, &n, &cap, node, (uint8_t)buf[i], &node,
                                 alloc)) != FX_OK) {
                st = fx_fail(err, st, "vocabulary trie: out of memory");
                goto done;
            }
        if (len > t->max_depth) t->max_depth = (uint32_t)len;
        end[id] = node; /* 0: an empty piece, never allowed */
        if (node) raw[node].tok_count++;
    }
    t->n_nodes = n;
    t->nodes = fx_malloc_array(alloc, n, sizeof *t->nodes);
    if (!t->nodes) st = fx_fail(err, FX_ERR_NOMEM, "out of memory");
    else st = finish_trie(t, raw, end, err);
done:
    fx_free(alloc, raw);
    fx_free(alloc, end);
    fx_free(alloc, buf);
    if (st != FX_OK) {
        fx_vocab_trie_free(t);
        return st;
    }
    *out = t;
    return FX_OK;
}

void fx_vocab_trie_free(fx_vocab_trie *t) {
    if (!t) return;
    fx_alloc a = t->alloc;
    fx_free(&a, t->nodes);
    fx_free(&a, t->ids);
    fx_free(&a, t->starts);
    fx_free(&a, t->eog);
    fx_free(&a, t);
}
