/*
 * The per-row stop matcher: an Aho-Corasick automaton over the stop
 * strings' bytes plus the held-back tail of the text.
 *
 * Why an automaton: a host may send thousands of stop strings (banned
 * phrases, every variant of a role marker), and a matcher that compares
 * each of them at every new byte makes each decode step cost O(stops) per
 * row. Here each byte is one transition plus failure links whose total is
 * bounded by the bytes consumed, so the cost per byte is O(1) amortized
 * whatever the stop set.
 *
 * Why the hold-back is exactly the automaton's depth: the state is the
 * longest suffix of the text that is a prefix of some stop string. Any
 * byte before that suffix can no longer be part of a stop occurrence that
 * is still incomplete, so it is safe to release; any byte in it might be.
 * Releasing less would delay text for nothing; releasing more is how a
 * stop string split across two tokens leaks its first half to the host.
 */
#include <stdlib.h>
#include <string.h>

#include "text.h"

/* Stop strings may total at most this many bytes, so every state and edge
 * index fits in uint32_t and every stop index in int32_t. */
#define FX_STOP_MAX_TOTAL ((size_t)INT32_MAX)

struct fx_stop {
    fx_alloc alloc;
    size_t n_stops;
    uint32_t n_states;    /* the root is state 0 */
    uint32_t *edge_off;   /* [n_states + 1] state s's edges are
                             edge_off[s] .. edge_off[s + 1] - 1 */
    uint8_t *edge_byte;   /* [n_states - 1] ascending within a state */
    uint32_t *edge_to;    /* [n_states - 1] */
    uint32_t *fail;       /* [n_states] longest proper suffix in the trie */
    uint32_t *depth;      /* [n_states] length of the state's string */
    int32_t *match;       /* [n_states] the stop that fires on entering the
                             state (longest stop that is a suffix), or -1 */
    uint32_t *stop_len;   /* [n_stops] */
    uint32_t root_next[256]; /* the root's full transition table: most
                                bytes of ordinary text leave from here */

    /* the stream */
    uint32_t state;
    int64_t matched;
    char *held;           /* [held_cap] the last n_held bytes of the text */
    size_t n_held;
    size_t held_cap;      /* max(longest stop - 1, 3) */
    uint64_t work;
};

/* One stop string while the trie is built. */
typedef struct stop_item {
    const uint8_t *p;
    uint32_t len;
    uint32_t idx;
} stop_item;

/* Lexicographic byte order, a prefix before its extensions, then index:
 * built in this order the trie needs no child search, and the first of
 * identical stop strings (the lowest index) claims the terminal state. */
static int item_cmp(const void *a, const void *b) {
    const stop_item *x = a, *y = b;
    uint32_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->p, y->p, n);
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* The child of s on byte b, or 0 (the root is nobody's child). */
static uint32_t child(const fx_stop *m, uint32_t s, uint8_t b) {
    uint32_t lo = m->edge_off[s], hi = m->edge_off[s + 1];
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        uint8_t e = m->edge_byte[mid];
        if (e == b) return m->edge_to[mid];
        if (e < b) lo = mid + 1;
        else hi = mid;
    }
    return 0;
}

static uint32_t step(fx_stop *m, uint32_t s, uint8_t b) {
    for (;;) {
        m->work++;
        if (s == 0) return m->root_next[b];
        uint32_t t = child(m, s, b);
        if (t) return t;
        s = m->fail[s];
    }
}

void fx_stop_free(fx_stop *m) {
    if (!m) return;
    fx_alloc alloc = m->alloc;
    fx_free(&alloc, m->edge_off);
    fx_free(&alloc, m->edge_byte);
    fx_free(&alloc, m->edge_to);
    fx_free(&alloc, m->fail);
    fx_free(&alloc, m->depth);
    fx_free(&alloc, m->match);
    fx_free(&alloc, m->stop_len);
    fx_free(&alloc, m->held);
    fx_free(&alloc, m);
}

/* Checks the stop strings; fills items, *total and *max_len. */
static fx_status check_stops(const char *const *stops, const size_t *lens,
                             size_t n_stops, stop_item *items, size_t *total,
                             size_t *max_len, fx_error *err) {
    size_t sum = 0, longest = 0;
    for (size_t i = 0; i < n_stops; i++) {
        if (!stops[i])
            return fx_fail(err, FX_ERR_INVALID_ARG, "stop string %zu is NULL", i);
        size_t len = lens ? lens[i] : strlen(stops[i]);
        if (len == 0)
            return fx_fail(err, FX_ERR_INVALID_ARG,
                           "stop string %zu is empty (it would end every "
                           "row before its first token)", i);
        if (len > FX_STOP_MAX_TOTAL - sum)
            return fx_fail(err, FX_ERR_TOO_LARGE,
                           "stop strings total more than %zu bytes",
                           FX_STOP_MAX_TOTAL);
        if (!fx_utf8_valid(stops[i], len))
            return fx_fail(err, FX_ERR_INVALID_ARG,
                           "stop string %zu is not valid UTF-8 (it could "
                           "never match the text a row produces)", i);
        sum += len;
        if (len > longest) longest = len;
        items[i].p = (const uint8_t *)stops[i];
        items[i].len = (uint32_t)len;
        items[i].idx = (uint32_t)i;
    }
    *total = sum;
    *max_len = longest;
    return FX_OK;
}

/* Builds the trie (in preorder, from the sorted items) and its CSR edges.
 * parent and byte are scratch of n_states entries; path of max_len + 1. */
static void build_trie(fx_stop *m, const stop_item *items, size_t n,
                       uint32_t *parent, uint8_t *byte, uint32_t *path) {
    uint32_t n_states = 1;
    m->match[0] = -1;
    m->depth[0] = 0;
    path[0] = 0;
    for (size_t i = 0; i < n; i++) {
        /* Sorted order means the common prefix with the previous string
         * is still on `path`, and a new child always has a larger byte
         * than its older siblings. */
        uint32_t lcp = 0;
        if (i > 0) {
            uint32_t lim = items[i - 1].len < items[i].len ? items[i - 1].len
                                                           : items[i].len;
            while (lcp < lim && items[i - 1].p[lcp] == items[i].p[lcp]) lcp++;
        }
        uint32_t node = path[lcp];
        for (uint32_t k = lcp; k < items[i].len; k++) {
            uint32_t v = n_states++;
            parent[v] = node;
            byte[v] = items[i].p[k];
            m->depth[v] = k + 1;
            m->match[v] = -1;
            path[k + 1] = v;
            node = v;
        }
        if (m->match[node] < 0) m->match[node] = (int32_t)items[i].idx;
    }
    m->n_states = n_states;

    /* Edges grouped by parent; children are visited in id order, which is
     * their byte order within one parent. */
    memset(m->edge_off, 0, (size_t)(n_states + 1) * sizeof *m->edge_off);
    for (uint32_t v = 1; v < n_states; v++) m->edge_off[parent[v] + 1]++;
    for (uint32_t s = 0; s < n_states; s++) m->edge_off[s + 1] += m->edge_off[s];
    /* fail[] is not built yet: use it as each parent's fill cursor. */
    for (uint32_t s = 0; s < n_states; s++) m->fail[s] = m->edge_off[s];
    for (uint32_t v = 1; v < n_states; v++) {
        uint32_t slot = m->fail[parent[v]]++;
        m->edge_byte[slot] = byte[v];
        m->edge_to[slot] = v;
    }
}

/* Failure links and inherited matches, breadth first so a state's fail
 * target (always shallower) is finished before the state. queue has
 * n_states entries. */
static void build_links(fx_stop *m, uint32_t *queue) {
    uint32_t head = 0, tail = 0;
    m->fail[0] = 0;
    queue[tail++] = 0;
    while (head < tail) {
        uint32_t u = queue[head++];
        for (uint32_t e = m->edge_off[u]; e < m->edge_off[u + 1]; e++) {
            uint32_t v = m->edge_to[e];
            uint8_t b = m->edge_byte[e];
            uint32_t f = 0;
            if (u != 0) {
                uint32_t s = m->fail[u];
                for (;;) {
                    uint32_t t = child(m, s, b);
                    if (t) {
                        f = t;
                        break;
                    }
                    if (s == 0) break;
                    s = m->fail[s];
                }
            }
            m->fail[v] = f;
            /* v's own stop is the longest suffix that is a stop; if it has
             * none, the longest one is its fail state's. This is the
             * tie rule: at one end position the longest stop wins. */
            if (m->match[v] < 0) m->match[v] = m->match[f];
            queue[tail++] = v;
        }
    }
    for (unsigned b = 0; b < 256; b++) m->root_next[b] = child(m, 0, (uint8_t)b);
}

fx_status fx_stop_create(const fx_alloc *alloc, const char *const *stops,
                         const size_t *lens, size_t n_stops, fx_stop **out,
                         fx_error *err) {
    if (!out) return fx_fail(err, FX_ERR_INVALID_ARG, "stop matcher: NULL out");
    *out = NULL;
    if (!alloc || (n_stops > 0 && !stops))
        return fx_fail(err, FX_ERR_INVALID_ARG, "stop matcher: NULL argument");
    if (n_stops > FX_STOP_MAX_TOTAL)
        return fx_fail(err, FX_ERR_TOO_LARGE, "too many stop strings (%zu)",
                       n_stops);

    fx_status st = FX_OK;
    stop_item *items = NULL;
    uint32_t *parent = NULL, *path = NULL;
    uint8_t *byte = NULL;
    fx_stop *m = fx_calloc(alloc, 1, sizeof *m);
    if (!m) return fx_fail(err, FX_ERR_NOMEM, "stop matcher: out of memory");
    m->alloc = *alloc;
    m->n_stops = n_stops;
    m->matched = -1;

    items = fx_malloc_array(alloc, n_stops, sizeof *items);
    if (!items) {
        st = fx_fail(err, FX_ERR_NOMEM, "stop matcher: out of memory");
        goto done;
    }
    size_t total = 0, max_len = 0;
    st = check_stops(stops, lens, n_stops, items, &total, &max_len, err);
    if (st != FX_OK) goto done;
    qsort(items, n_stops, sizeof *items, item_cmp);

    /* total <= INT32_MAX, so total + 2 and the products below cannot
     * overflow size_t; fx_malloc_array checks them anyway. */
    size_t cap = total + 1; /* states at most: one per byte, plus the root */
    m->held_cap = max_len > 4 ? max_len - 1 : 3;
    m->edge_off = fx_malloc_array(alloc, cap + 1, sizeof *m->edge_off);
    m->edge_byte = fx_malloc_array(alloc, cap, sizeof *m->edge_byte);
    m->edge_to = fx_malloc_array(alloc, cap, sizeof *m->edge_to);
    m->fail = fx_malloc_array(alloc, cap, sizeof *m->fail);
    m->depth = fx_malloc_array(alloc, cap, sizeof *m->depth);
    m->match = fx_malloc_array(alloc, cap, sizeof *m->match);
    m->stop_len = fx_malloc_array(alloc, n_stops, sizeof *m->stop_len);
    m->held = fx_malloc(alloc, m->held_cap);
    parent = fx_malloc_array(alloc, cap, sizeof *parent);
    byte = fx_malloc_array(alloc, cap, sizeof *byte);
    path = fx_malloc_array(alloc, max_len + 1, sizeof *path);
    if (!m->edge_off || !m->edge_byte || !m->edge_to || !m->fail ||
        !m->depth || !m->match || !m->stop_len || !m->held || !parent ||
        !byte || !path) {
        st = fx_fail(err, FX_ERR_NOMEM,
                     "stop matcher: out of memory for %zu stop bytes", total);
        goto done;
    }
    for (size_t i = 0; i < n_stops; i++) m->stop_len[items[i].idx] = items[i].len;
    build_trie(m, items, n_stops, parent, byte, path);
    build_links(m, parent); /* parent is done with: reuse it as the queue */

done:
    fx_free(alloc, items);
    fx_free(alloc, parent);
    fx_free(alloc, byte);
    fx_free(alloc, path);
    if (st != FX_OK) {
        fx_stop_free(m);
        return st;
    }
    *out = m;
    return FX_OK;
}

size_t fx_stop_push_bound(const fx_stop *m, size_t len) {
    if (len > SIZE_MAX - m->n_held) return 0;
    size_t b = m->n_held + len;
    return b ? b : 1;
}

/* Byte k of the held text followed by the new text. */
static uint8_t joined_at(const fx_stop *m, const char *text, size_t k) {
    return (uint8_t)(k < m->n_held ? m->held[k] : text[k - m->n_held]);
}

/* Copies bytes [0, n) of held + text to out. */
static void copy_joined(const fx_stop *m, const char *text, size_t n, char *out) {
    size_t from_held = n < m->n_held ? n : m->n_held;
    memcpy(out, m->held, from_held);
    if (n > from_held) memcpy(out + from_held, text, n - from_held);
}

/* Length of an incomplete character at the end of held + text (0 if it
 * ends on a boundary). Held back so a caller who splits characters across
 * pushes still never gets half of one. */
static size_t incomplete_tail(const fx_stop *m, const char *text, size_t total) {
    for (size_t k = 1; k <= 4 && k <= total; k++) {
        uint8_t c = joined_at(m, text, total - k);
        if ((c & 0xC0) == 0x80) continue;
        if (c < 0xC0) return 0;
        size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
        return need > k ? k : 0;
    }
    return 0;
}

size_t fx_stop_push(fx_stop *m, const char *text, size_t len, char *out) {
    if (m->matched >= 0 || len == 0) return 0;
    uint32_t s = m->state;
    for (size_t i = 0; i < len; i++) {
        s = step(m, s, (uint8_t)text[i]);
        int32_t k = m->match[s];
        if (k >= 0) {
            /* The stop's start is inside held + text: before this byte
             * the state was at least its length - 1 deep, and that much
             * was held. */
            size_t end = m->n_held + i + 1;
            size_t start = end - m->stop_len[k];
            copy_joined(m, text, start, out);
            m->matched = k;
            m->n_held = 0;
            m->state = 0;
            return start;
        }
    }
    m->state = s;
    size_t total = m->n_held + len;
    size_t keep = m->depth[s];
    size_t tail = incomplete_tail(m, text, total);
    if (tail > keep) keep = tail;
    size_t rel = total - keep;
    copy_joined(m, text, rel, out);
    /* The new held text is the last `keep` bytes of held + text. */
    if (rel < m->n_held) {
        memmove(m->held, m->held + rel, m->n_held - rel);
        memcpy(m->held + (m->n_held - rel), text, len);
    } else {
        memcpy(m->held, text + (rel - m->n_held), keep);
    }
    m->n_held = keep;
    return rel;
}

size_t fx_stop_flush(fx_stop *m, char *out) {
    size_t n = m->n_held;
    memcpy(out, m->held, n);
    m->n_held = 0;
    m->state = 0;
    return n;
}

int64_t fx_stop_matched(const fx_stop *m) { return m->matched; }

size_t fx_stop_held(const fx_stop *m) { return m->n_held; }

uint64_t fx_stop_work(const fx_stop *m) { return m->work; }
