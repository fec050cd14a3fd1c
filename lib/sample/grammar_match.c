/*
 * The live parse: a set of pushdown stacks over the compiled program, and
 * the mask walk that finds every token the grammar allows next by walking
 * the vocabulary's byte trie once, advancing the stacks one byte at a time
 * and pruning a whole subtree the moment no stack survives. Sharing
 * prefixes, rather than testing every token string from scratch, is what
 * makes the walk cheap.
 *
 * Stacks share their lower frames (a frame names its parent), so a set of
 * stacks costs a few frames each. Frames a walk makes live in per-batcher
 * scratch and are dropped as it backtracks; after a token is accepted the
 * frames still reachable are compacted back into the row's own array.
 */
#include "grammar.h"
#include "grammar_class.h"

#include <string.h>


/* A chain: from a level's set, one class of code points moves the parse
 * along a fixed path of sets -- a bounded repetition's counts -- for len
 * characters. cum[k]: the ASCII bytes that may be character k + 1 of such
 * a path (the class, narrowed at each step; na[k]: and every code point
 * >= 0x80). dead: character len + 1 of the class ends every stack (the
 * count is used up and nothing after the repetition takes it), cum[len]
 * the class then. */
typedef struct gwalk_chain {
    uint32_t len;
    int dead;
    uint64_t cum[FX_GRAMMAR_CHAIN_MAX + 1][2];
    uint8_t na[FX_GRAMMAR_CHAIN_MAX + 1];
} gwalk_chain;

/* Chains one level keeps (a level's subtrees may start with different
 * classes: letters, digits, a space), and in one walk's scratch; when
 * they run out, subtrees are walked byte by byte, as without. */
#define LEVEL_CHAINS 4u
#define WALK_CHAINS 256u

typedef struct gwalk_level {
    uint32_t child;        /* next trie child to visit, 0 none */
    uint32_t set_off, set_len;
    uint32_t utf8_value, utf8_left;
    uint32_t frames_top;   /* work frames in use when this level began */
    /* Which bytes leave this level's set exactly as it is (computed on
     * demand): a subtree made only of them is allowed whole. */
    int loop_known;
    uint64_t loop_ascii[2];
    int loop_nonascii;     /* every code point >= 0x80 does */
    /* Chains (gwalk_chain) through this level's set, for the subtrees
     * that need one: computed here on demand into w->chains[chain_next++]
     * (a stack: a child's slots begin after its parent's), or the
     * parent's one step on when the byte that led here followed it. */
    uint32_t chain_next, n_chains;
    struct { uint32_t slot, shift; } chains[LEVEL_CHAINS];
    int taken_known;
    uint64_t taken[2];     /* the ASCII bytes some top takes */
    uint32_t starts;       /* characters started on the path to this level */
} gwalk_level;

#define HASH_CAP (2 * FX_GRAMMAR_WORK_FRAMES)
#define HASH_EMPTY 0xFFFFFFFFu
#define HASH_PROBES 16

/* ---- code point classes ---- */

/* Could a code point in [lo, hi] match? Exact for positive classes; a
 * negated class says no only when one of its ranges covers all of it. */
static bool match_range(const fx_gelem *e, uint32_t lo, uint32_t hi) {
    if (e->type == FX_G_CHAR_ANY) return true;
    bool positive = e->type == FX_G_CHAR;
    do {
        uint32_t a = e->value, b = a;
        if (e[1].type == FX_G_CHAR_RNG_UPPER) {
            b = e[1].value;
            e += 2;
        } else {
            e++;
        }
        if (positive && a <= hi && b >= lo) return true;
        if (!positive && a <= lo && b >= hi) return false;
    } while (e->type == FX_G_CHAR_ALT);
    return !positive;
}

static uint32_t after_char(const fx_gelem *el, uint32_t pos) {
    if (el[pos].type == FX_G_CHAR_ANY) return pos + 1;
    pos++;
    while (el[pos].type == FX_G_CHAR_ALT || el[pos].type == FX_G_CHAR_RNG_UPPER) pos++;
    return pos;
}

/* ---- advancing a set of stacks ---- */

typedef struct gadv {
    const fx_grammar *g;
    fx_gwork *w;
    fx_gtop *out;
    uint32_t n_out;
} gadv;

static bool emit(gadv *a, uint32_t pos, uint32_t parent) {
    for (uint32_t i = 0; i < a->n_out; i++)
        if (a->out[i].pos == pos && a->out[i].parent == parent) return true;
    if (a->n_out == FX_GRAMMAR_MAX_STACKS) {
        a->w->fail = FX_ERR_GRAMMAR;
        return false;
    }
    a->out[a->n_out++] = (fx_gtop){pos, parent};
    return true;
}

static uint32_t frame_hash(uint32_t pos, uint32_t parent) {
    uint64_t h = ((uint64_t)pos << 32 | parent) * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 40) & (HASH_CAP - 1);
}

/* The frame (pos, parent): an equal live one if there is one, so equal
 * stacks are equal by index -- sets do not fill with twins, and a byte
 * that leaves a set unchanged is seen to. Entries of earlier calls count
 * as empty (stamps), so the table never needs clearing and what it holds
 * depends on this row alone (determinism); an entry counts only if it
 * names a live frame with this content. A probe limit bounds the search;
 * a miss only costs a duplicate frame. */
static uint32_t new_frame(gadv *a, uint32_t pos, uint32_t parent) {
    fx_gwork *w = a->w;
    uint32_t h = frame_hash(pos, parent), slot = HASH_EMPTY;
    for (uint32_t k = 0; k < HASH_PROBES; k++) {
        uint32_t i = (h + k) & (HASH_CAP - 1), e = w->hash[i];
        if (w->hash_stamp[i] != w->stamp) e = HASH_EMPTY;
        if (e == HASH_EMPTY || e >= w->n_frames) {
            if (slot == HASH_EMPTY) slot = i;
            if (e == HASH_EMPTY) break;
            continue;
        }
        if (w->frames[e].pos == pos && w->frames[e].parent == parent) return e;
    }
    if (w->n_frames == FX_GRAMMAR_WORK_FRAMES) {
        w->fail = FX_ERR_GRAMMAR;
        return FX_GNONE;
    }
    w->frames[w->n_frames] = (fx_gframe){pos, parent};
    if (slot == HASH_EMPTY) slot = h;
    w->hash[slot] = w->n_frames;
    w->hash_stamp[slot] = w->stamp;
    return w->n_frames++;
}

/* Expands (pos, parent) until every stack's top is a terminal or the stack
 * is empty (the grammar complete). Terminates because left recursion was
 * refused at compile time; the budget bounds ambiguous grammars. */
static bool expand(gadv *a, uint32_t pos, uint32_t parent) {
    const fx_gelem *el = a->g->elems;
    fx_gwork *w = a->w;
    fx_gtop *todo = w->todo;
    uint32_t n = 0, steps = 0;
    todo[n++] = (fx_gtop){pos, parent};
    while (n > 0) {
        if (++steps > FX_GRAMMAR_EXPAND_BUDGET || ++w->steps > FX_GRAMMAR_CALL_BUDGET) {
            w->fail = FX_ERR_GRAMMAR;
            return false;
        }
        fx_gtop t = todo[--n];
        uint32_t type = el[t.pos].type;
        if (fx_gis_end(type)) {
            if (t.parent == FX_GNONE) {
                if (!emit(a, FX_GACCEPT, FX_GNONE)) return false;
            } else {
                todo[n++] = (fx_gtop){w->frames[t.parent].pos, w->frames[t.parent].parent};
            }
        } else if (type == FX_G_RULE) {
            uint32_t r = el[t.pos].value, np = t.parent;
            /* A call in tail position needs no frame: right recursion
             * (what S* becomes) keeps the stack flat. */
            if (!fx_gis_end(el[t.pos + 1].type)) {
                np = new_frame(a, t.pos + 1, t.parent);
                if (np == FX_GNONE) return false;
            }
            uint32_t k0 = a->g->alt_start[r], k1 = a->g->alt_start[r + 1];
            if (n + (k1 - k0) > FX_GRAMMAR_EXPAND_BUDGET) {
                w->fail = FX_ERR_GRAMMAR;
                return false;
            }
            for (uint32_t k = k1; k > k0; k--) todo[n++] = (fx_gtop){a->g->alts[k - 1], np};
        } else {
            if (!emit(a, t.pos, t.parent)) return false;
        }
    }
    return true;
}

/* out = the stacks of `in` that accept code point cp, advanced past it. */
static uint32_t advance(const fx_grammar *g, fx_gwork *w, const fx_gtop *in,
                        uint32_t n_in, uint32_t cp, fx_gtop *out) {
    gadv a = {g, w, out, 0};
    for (uint32_t i = 0; i < n_in; i++) {
        uint32_t pos = in[i].pos;
        if (pos == FX_GACCEPT || !fx_gmatch_char(&g->elems[pos], cp)) continue;
        if (!expand(&a, after_char(g->elems, pos), in[i].parent)) return 0;
    }
    return a.n_out;
}

/* The UTF-8 decoder's state between bytes: `left` packs the continuation
 * bytes still expected (low 2 bits) and the sequence's length (above), so
 * overlong forms -- which would smuggle ASCII past the grammar as invalid
 * UTF-8 -- are refused, partial or complete. */
static const uint32_t utf8_min[5] = {0, 0, 0x80, 0x800, 0x10000};

static bool any_range(const fx_grammar *g, const fx_gtop *in, uint32_t n,
                      uint32_t value, uint32_t left) {
    uint32_t rem = left & 3, len = left >> 2;
    uint32_t lo = value << (6 * rem), hi = lo | ((1u << (6 * rem)) - 1);
    if (lo < utf8_min[len]) lo = utf8_min[len];
    if (hi > 0x10FFFF) hi = 0x10FFFF;
    if (lo > hi) return false;
    for (uint32_t i = 0; i < n; i++)
        if (in[i].pos != FX_GACCEPT && match_range(&g->elems[in[i].pos], lo, hi))
            return true;
    return false;
}

/* One byte through the UTF-8 decoder: 1 a code point is complete in *cp,
 * 0 more bytes are needed, -1 invalid. */
int fx_gutf8_step(uint8_t c, uint32_t *value, uint32_t *left, uint32_t *cp) {
    if (*left == 0) {
        if (c < 0x80) { *cp = c; return 1; }
        if (c >= 0xC2 && c <= 0xDF) { *value = c & 0x1Fu; *left = 2 << 2 | 1; return 0; }
        if ((c & 0xF0) == 0xE0) { *value = c & 0x0Fu; *left = 3 << 2 | 2; return 0; }
        if (c >= 0xF0 && c <= 0xF4) { *value = c & 0x07u; *left = 4 << 2 | 3; return 0; }
        return -1;
    }
    if ((c & 0xC0) != 0x80) return -1;
    *value = *value << 6 | (c & 0x3Fu);
    uint32_t len = *left >> 2, rem = (*left & 3) - 1;
    if (rem > 0) {
        *left = len << 2 | rem;
        /* Refuse as soon as no completion could be valid. */
        uint32_t lo = *value << (6 * rem), hi = lo | ((1u << (6 * rem)) - 1);
        if (hi < utf8_min[len] || lo > 0x10FFFF || (lo >= 0xD800 && hi <= 0xDFFF))
            return -1;
        return 0;
    }
    *left = 0;
    if (*value < utf8_min[len] || *value > 0x10FFFF ||
        (*value >= 0xD800 && *value <= 0xDFFF))
        return -1;
    *cp = *value;
    return 1;
}

/* ---- the row's state ---- */

/* A new call on w: entries of earlier calls in the frame table count as
 * empty from now on. */
static void new_call(fx_gwork *w) {
    w->steps = 0;
    w->fail = FX_OK;
    if (++w->stamp == 0) { /* wrapped: old stamps could match again */
        memset(w->hash_stamp, 0, HASH_CAP * sizeof *w->hash_stamp);
        w->stamp = 1;
    }
}

/* The row keeps only the frames the stacks cur[0..n) reach. A parent is
 * always older than its child, so one ascending pass renumbers. cur may
 * be s->tops itself. */
static fx_status keep_reachable(fx_gstate *s, fx_gwork *w, const fx_gtop *cur,
                                uint32_t n, fx_error *err) {
    uint32_t *remap = w->remap;
    for (uint32_t i = 0; i < w->n_frames; i++) remap[i] = FX_GNONE;
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t f = cur[i].parent; f != FX_GNONE && remap[f] == FX_GNONE;
             f = w->frames[f].parent)
            remap[f] = 0;
    uint32_t kept = 0;
    for (uint32_t i = 0; i < w->n_frames; i++)
        if (remap[i] != FX_GNONE) remap[i] = kept++;
    if (kept > s->frames_cap)
        return fx_fail(err, FX_ERR_GRAMMAR, "grammar: the parse is nested "
                       "deeper than %u frames", s->frames_cap);
    for (uint32_t i = 0; i < w->n_frames; i++)
        if (remap[i] != FX_GNONE) {
            uint32_t p = w->frames[i].parent;
            s->frames[remap[i]] = (fx_gframe){w->frames[i].pos,
                                              p == FX_GNONE ? FX_GNONE : remap[p]};
        }
    s->n_frames = kept;
    for (uint32_t i = 0; i < n; i++)
        s->tops[i] = (fx_gtop){cur[i].pos,
                               cur[i].parent == FX_GNONE ? FX_GNONE : remap[cur[i].parent]};
    s->n_tops = n;
    return FX_OK;
}

fx_status fx_gstate_init_work(fx_gstate *s, const fx_alloc *alloc,
                              const fx_grammar *g, fx_gwork *w, fx_error *err) {
    memset(s, 0, sizeof *s);
    s->frames_cap = g->row_frames;
    s->frames = fx_malloc_array(alloc, s->frames_cap ? s->frames_cap : 1,
                                sizeof *s->frames);
    s->tops = fx_malloc_array(alloc, FX_GRAMMAR_MAX_STACKS, sizeof *s->tops);
    if (!s->frames || !s->tops) {
        fx_gstate_free(s, alloc);
        return fx_fail(err, FX_ERR_NOMEM, "out of memory");
    }
    /* The start: the root rule expanded with an empty stack below it. */
    new_call(w);
    w->n_frames = 0;
    gadv a = {g, w, s->tops, 0};
    uint32_t r = g->root;
    for (uint32_t k = g->alt_start[r]; k < g->alt_start[r + 1] && !w->fail; k++)
        expand(&a, g->alts[k], FX_GNONE);
    fx_status st = FX_OK;
    if (w->fail)
        st = fx_fail(err, FX_ERR_GRAMMAR, "grammar: the start state exceeds the "
                                          "parse limits");
    else if (a.n_out == 0)
        st = fx_fail(err, FX_ERR_GRAMMAR, "grammar: the root rule matches nothing");
    else
        st = keep_reachable(s, w, s->tops, a.n_out, err);
    s->g = g;
    if (st != FX_OK) fx_gstate_free(s, alloc);
    return st;
}

/* The part of a walk's scratch that expanding a parse needs (the mask's
 * sets, levels and allowed list come on top in fx_gwork_init); false if
 * any allocation failed, the rest then freed by fx_gwork_free. */
static bool walk_alloc(fx_gwork *w, const fx_alloc *alloc) {
    w->frames = fx_malloc_array(alloc, FX_GRAMMAR_WORK_FRAMES, sizeof *w->frames);
    w->todo = fx_malloc_array(alloc, FX_GRAMMAR_EXPAND_BUDGET, sizeof *w->todo);
    w->remap = fx_malloc_array(alloc, FX_GRAMMAR_WORK_FRAMES, sizeof *w->remap);
    w->hash = fx_calloc(alloc, 2 * HASH_CAP, sizeof *w->hash);
    if (w->hash) {
        w->hash_stamp = w->hash + HASH_CAP;
        w->stamp = 1;
    }
    return w->frames && w->todo && w->remap && w->hash;
}

fx_status fx_gstate_init(fx_gstate *s, const fx_alloc *alloc,
                         const fx_grammar *g, fx_error *err) {
    fx_gwork w;
    memset(&w, 0, sizeof w);
    memset(s, 0, sizeof *s);
    fx_status st = walk_alloc(&w, alloc)
                       ? fx_gstate_init_work(s, alloc, g, &w, err)
                       : fx_fail(err, FX_ERR_NOMEM, "out of memory");
    fx_gwork_free(&w, alloc);
    return st;
}

void fx_gstate_free(fx_gstate *s, const fx_alloc *alloc) {
    fx_free(alloc, s->frames);
    fx_free(alloc, s->tops);
    memset(s, 0, sizeof *s);
}

bool fx_gstate_complete(const fx_gstate *s) {
    if (s->utf8_left) return false;
    for (uint32_t i = 0; i < s->n_tops; i++)
        if (s->tops[i].pos == FX_GACCEPT) return true;
    return false;
}

static void load(const fx_gstate *s, fx_gwork *w) {
    memcpy(w->frames, s->frames, s->n_frames * sizeof *s->frames);
    w->n_frames = s->n_frames;
    new_call(w);
    for (uint32_t i = 0; i < s->n_frames; i++) {
        uint32_t h = frame_hash(s->frames[i].pos, s->frames[i].parent);
        w->hash[h] = i; /* the first probe: found at once next time */
        w->hash_stamp[h] = w->stamp;
    }
    memcpy(w->sets, s->tops, s->n_tops * sizeof *s->tops);
}

static bool same_set(const fx_gtop *a, uint32_t na, const fx_gtop *b, uint32_t nb) {
    if (na != nb) return false;
    for (uint32_t i = 0; i < na; i++) {
        uint32_t k = 0;
        while (k < nb && (b[k].pos != a[i].pos || b[k].parent != a[i].parent)) k++;
        if (k == nb) return false;
    }
    return true;
}

/* The code points that the tops of `in` accept exactly as `rep` does (so
 * advance alike: advance() depends only on which tops accept): ASCII ones
 * into out, and *nonascii whether all >= 0x80 do; returns how many tops
 * accept rep. From the classes' indexed sets, a few word operations per
 * top. */
static uint32_t alike(const fx_grammar *g, const fx_gtop *in, uint32_t n,
                      uint32_t rep, uint64_t out[2], int *nonascii) {
    uint32_t taken = 0;
    out[0] = out[1] = ~0ull;
    *nonascii = 1;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t pos = in[i].pos;
        if (pos == FX_GACCEPT) continue;
        const uint64_t *m = g->class_ascii + 2 * (size_t)pos;
        int na = g->class_nonascii[pos];
        int takes = rep < 0x80 ? (int)((m[rep >> 6] >> (rep & 63)) & 1)
                               : fx_gmatch_char(&g->elems[pos], rep);
        out[0] &= takes ? m[0] : ~m[0];
        out[1] &= takes ? m[1] : ~m[1];
        if (na != (takes ? 1 : 0)) *nonascii = 0;
        taken += (uint32_t)takes;
    }
    return taken;
}

/* Fills L's loop sets: the bytes whose advance gives back L's set. The
 * trial advances make frames only above the level's mark; a trial that
 * hits a limit just counts as "not a loop". */
static void compute_loops(const fx_grammar *g, fx_gwork *w, gwalk_level *L) {
    const fx_gtop *in = w->sets + L->set_off;
    fx_gtop *tmp = w->sets + L->set_off + L->set_len;
    L->loop_known = 1;
    L->loop_ascii[0] = L->loop_ascii[1] = 0;
    L->loop_nonascii = 0;
    /* advance() depends only on which tops accept the byte, so the bytes
     * that the tops accept alike share one trial (a string's content bytes
     * all do): a handful of advances instead of 128. */
    uint64_t undecided[2] = {~0ull, ~0ull};
    while (undecided[0] | undecided[1]) {
        uint32_t c = undecided[0] ? (uint32_t)__builtin_ctzll(undecided[0])
                                  : 64u + (uint32_t)__builtin_ctzll(undecided[1]);
        uint64_t same[2];
        int na;
        uint32_t taken = alike(g, in, L->set_len, c, same, &na);
        w->n_frames = L->frames_top;
        uint32_t n = taken ? advance(g, w, in, L->set_len, c, tmp) : 0;
        int loop = !w->fail && same_set(in, L->set_len, tmp, n);
        w->fail = FX_OK;
        for (int k = 0; k < 2; k++) {
            same[k] &= undecided[k]; /* c's class, c included */
            if (loop) L->loop_ascii[k] |= same[k];
            undecided[k] &= ~same[k];
        }
    }
    int uniform = 1;
    for (uint32_t i = 0; i < L->set_len && uniform; i++)
        if (in[i].pos != FX_GACCEPT && g->class_nonascii[in[i].pos] < 0) uniform = 0;
    if (uniform) {
        w->n_frames = L->frames_top;
        uint32_t n = advance(g, w, in, L->set_len, 0xE9, tmp);
        L->loop_nonascii = !w->fail && same_set(in, L->set_len, tmp, n);
        w->fail = FX_OK;
    }
    w->n_frames = L->frames_top;
}

/* Fills c from L's set, following code point rep through up to
 * FX_GRAMMAR_CHAIN_MAX advances in scratch above the level, keeping the
 * code points that advance alike at every step. */
static void compute_chain(const fx_grammar *g, fx_gwork *w, const gwalk_level *L,
                          uint32_t rep, gwalk_chain *c) {
    c->dead = 0;
    c->len = 0;
    c->cum[0][0] = c->cum[0][1] = 0;
    c->na[0] = 0;
    uint64_t room = (uint64_t)w->sets_cap - L->set_off - L->set_len;
    if (room < 2u * FX_GRAMMAR_MAX_STACKS) return;
    fx_gtop *buf[2] = {w->sets + L->set_off + L->set_len,
                       w->sets + L->set_off + L->set_len + FX_GRAMMAR_MAX_STACKS};
    const fx_gtop *cur = w->sets + L->set_off;
    uint32_t n = L->set_len;
    uint64_t cum[2] = {~0ull, ~0ull};
    int cum_na = 1;
    w->n_frames = L->frames_top;
    for (uint32_t k = 0; k <= FX_GRAMMAR_CHAIN_MAX; k++) {
        uint64_t same[2];
        int na;
        alike(g, cur, n, rep, same, &na);
        cum[0] &= same[0];
        cum[1] &= same[1];
        cum_na &= na;
        c->cum[k][0] = cum[0];
        c->cum[k][1] = cum[1];
        c->na[k] = (uint8_t)cum_na;
        /* No byte left to go alike (a literal, say): nothing taller fits. */
        if (k == FX_GRAMMAR_CHAIN_MAX || !(cum[0] | cum[1] | (uint64_t)cum_na)) break;
        fx_gtop *next = buf[k & 1];
        uint32_t m = advance(g, w, cur, n, rep, next);
        if (w->fail) break;
        if (m == 0) {
            c->dead = 1;
            break;
        }
        c->len = k + 1;
        cur = next;
        n = m;
    }
    w->fail = FX_OK;
    w->n_frames = L->frames_top;
}

static bool chain_fits(const uint64_t cum[2], int na, const fx_trie_node *nd) {
    return (nd->ascii[0] & ~cum[0]) == 0 && (nd->ascii[1] & ~cum[1]) == 0 &&
           (!(nd->flags & FX_TRIE_NONASCII) || na);
}

/* A chain through L's set whose first class holds every byte of nd's
 * subtree (*shift: the steps it has already gone to reach L): one L has,
 * or a new one following the subtree's first byte (for a non-ASCII one,
 * its lowest ASCII byte or a non-ASCII code point) if may_compute. NULL
 * when none can fit or none can be kept. */
static const gwalk_chain *find_chain(const fx_grammar *g, fx_gwork *w,
                                     gwalk_level *L, const fx_trie_node *nd,
                                     int may_compute, uint32_t *shift) {
    for (uint32_t i = 0; i < L->n_chains; i++) {
        const gwalk_chain *c = &w->chains[L->chains[i].slot];
        *shift = L->chains[i].shift;
        if (chain_fits(c->cum[*shift], c->na[*shift], nd)) return c;
    }
    if (!may_compute || L->n_chains == LEVEL_CHAINS || L->chain_next == WALK_CHAINS)
        return NULL;
    uint32_t rep = nd->byte < 0x80 ? nd->byte
                   : nd->ascii[0] ? (uint32_t)__builtin_ctzll(nd->ascii[0])
                   : nd->ascii[1] ? 64u + (uint32_t)__builtin_ctzll(nd->ascii[1])
                                  : 0xE9u;
    if (!L->taken_known) {
        const fx_gtop *in = w->sets + L->set_off;
        L->taken_known = 1;
        L->taken[0] = L->taken[1] = 0;
        for (uint32_t i = 0; i < L->set_len; i++)
            if (in[i].pos != FX_GACCEPT) {
                L->taken[0] |= g->class_ascii[2 * (size_t)in[i].pos];
                L->taken[1] |= g->class_ascii[2 * (size_t)in[i].pos + 1];
            }
    }
    /* A code point no top takes needs no chain: the walk's first step
     * drops the subtree as fast. */
    if (rep < 0x80 && !((L->taken[rep >> 6] >> (rep & 63)) & 1)) return NULL;
    /* Most subtrees mix classes (a space, then letters or a quote): a
     * look at the first step, a few word operations, spares the advances. */
    uint64_t first[2];
    int na;
    if (!alike(g, w->sets + L->set_off, L->set_len, rep, first, &na) ||
        !chain_fits(first, na, nd))
        return NULL;
    gwalk_chain *c = &w->chains[L->chain_next];
    L->chains[L->n_chains].slot = L->chain_next++;
    L->chains[L->n_chains++].shift = *shift = 0;
    compute_chain(g, w, L, rep, c);
    return c;
}

/* C, entered from L by ASCII byte b: the chains of L that b follows, one
 * step on (b advances the parse as their code point did, so C's set is
 * their next one; their classes from here on are narrowed by b's step,
 * which only errs towards walking). */
static void inherit_chains(const fx_gwork *w, const gwalk_level *L,
                           gwalk_level *C, uint32_t b) {
    for (uint32_t i = 0; i < L->n_chains; i++) {
        const gwalk_chain *c = &w->chains[L->chains[i].slot];
        uint32_t k = L->chains[i].shift;
        if (k < c->len && ((c->cum[k][b >> 6] >> (b & 63)) & 1)) {
            C->chains[C->n_chains].slot = L->chains[i].slot;
            C->chains[C->n_chains++].shift = k + 1;
        }
    }
}

/* Subtrees with fewer tokens are walked unless a chain the level already
 * has takes them: computing a level's loops or a chain costs a few
 * advances, more than walking a handful of leaves. */
#define LOOP_MIN_TOKENS 8u

/* Tokens [start, end) of the trie's preorder: a subtree's are contiguous,
 * one copy (a string step of a 150k vocabulary allows ~140k of them). */
static void allow_range(fx_gwork *w, const fx_vocab_trie *t, uint32_t start,
                        uint32_t end) {
    memcpy(w->allowed + w->n_allowed, t->ids + start,
           (size_t)(end - start) * sizeof *t->ids);
    w->n_allowed += end - start;
}

fx_status fx_gstate_mask(const fx_gstate *s, const fx_vocab_trie *t,
                         fx_gwork *w, fx_error *err) {
    const fx_grammar *g = s->g;
    gwalk_level *lv = w->levels;
    load(s, w);
    w->n_allowed = 0;
    w->eog_allowed = fx_gstate_complete(s);
    if (w->eog_allowed)
        for (uint32_t i = 0; i < t->n_eog; i++) w->allowed[w->n_allowed++] = t->eog[i];
    /* Subtree shortcuts assume the walk starts at a character boundary,
     * as the trie's UTF-8 summaries do. */
    int shortcuts = s->utf8_left == 0;
    memset(&lv[0], 0, sizeof lv[0]);
    lv[0] = (gwalk_level){.child = t->nodes[0].first_child, .set_len = s->n_tops,
                          .utf8_value = s->utf8_value, .utf8_left = s->utf8_left,
                          .frames_top = w->n_frames};
    uint32_t depth = 0;
    for (;;) {
        gwalk_level *L = &lv[depth];
        if (L->child == 0) {
            if (depth == 0) break;
            depth--;
            continue;
        }
        uint32_t node = L->child;
        const fx_trie_node *nd = &t->nodes[node];
        L->child = nd->next_sibling;
        w->n_frames = L->frames_top;
        /* Small subtrees are tried only against chains the level has. */
        const int big = nd->sub_end - nd->tok_start >= LOOP_MIN_TOKENS;
        if (shortcuts && L->utf8_left == 0 && (nd->flags & FX_TRIE_VALID) &&
            (big || L->n_chains)) {
            if (big && !L->loop_known) compute_loops(g, w, L);
            if (big && (nd->ascii[0] & ~L->loop_ascii[0]) == 0 &&
                (nd->ascii[1] & ~L->loop_ascii[1]) == 0 &&
                (!(nd->flags & FX_TRIE_NONASCII) || L->loop_nonascii)) {
                /* Every byte below leaves the parse as it is: all of the
                 * subtree's tokens continue it. */
                allow_range(w, t, nd->tok_start, nd->sub_end);
                continue;
            }
            /* A bounded repetition ([a-z]{0,24}) is no loop, each byte
             * moving it to the next count; but a subtree of bytes it takes
             * is decided by length: what fits in the count left is
             * allowed, and when the chain ends dead, longer is refused. */
            uint32_t sh = 0;
            const gwalk_chain *c = find_chain(g, w, L, nd, big, &sh);
            /* Bytes, not characters: a multi-byte character is one step,
             * so the height only overstates the steps. */
            const uint32_t h = nd->height, len = c ? c->len - sh : 0;
            /* (t->starts saturates at UINT16_MAX: past it, walk.) */
            if (c && (h <= len || c->dead) && L->starts + len < UINT16_MAX) {
                const uint32_t k = sh + (h <= len ? h : len + 1) - 1;
                if (chain_fits(c->cum[k], c->na[k], nd)) {
                    const uint32_t most = L->starts + len;
                    if (h <= len)
                        allow_range(w, t, nd->tok_start, nd->sub_end);
                    else if (len > 0) /* (0: none fits; nothing to scan) */
                        for (uint32_t i = nd->tok_start; i < nd->sub_end; i++)
                            if (t->starts[i] <= most)
                                w->allowed[w->n_allowed++] = t->ids[i];
                    continue;
                }
            }
        }
        uint32_t value = L->utf8_value, left = L->utf8_left, cp = 0;
        int r = fx_gutf8_step(nd->byte, &value, &left, &cp);
        if (r < 0) continue;
        const fx_gtop *in = w->sets + L->set_off;
        uint32_t off = L->set_off, n = L->set_len;
        int same = 0;
        if (r == 1 && L->loop_known &&
            (cp < 0x80 ? ((L->loop_ascii[cp >> 6] >> (cp & 63)) & 1) != 0
                       : L->loop_nonascii != 0)) {
            /* A loop byte gives back this set (compute_loops advanced it):
             * the subtree's walk needs no advance until a byte that is not. */
            same = 1;
        } else if (r == 1) {
            off = L->set_off + L->set_len;
            n = advance(g, w, in, L->set_len, cp, w->sets + off);
            if (w->fail) return fx_fail(err, FX_ERR_GRAMMAR, "grammar: the parse "
                                        "exceeds its limits (stacks, frames or "
                                        "ambiguity)");
            if (n == 0) continue;
            same = L->loop_known && same_set(in, L->set_len, w->sets + off, n);
        } else if (!any_range(g, in, n, value, left)) {
            continue;
        }
        allow_range(w, t, nd->tok_start, nd->tok_start + nd->tok_count);
        if (nd->first_child) {
            gwalk_level *C = &lv[++depth];
            C->child = nd->first_child;
            C->set_off = off;
            C->set_len = n;
            C->utf8_value = value;
            C->utf8_left = left;
            C->frames_top = w->n_frames;
            C->starts = L->starts + ((nd->byte & 0xC0) != 0x80);
            C->chain_next = L->chain_next;
            C->n_chains = 0;
            C->taken_known = 0;
            if (r == 1 && L->utf8_left == 0) inherit_chains(w, L, C, nd->byte);
            C->loop_known = 0;
            if (same) { /* the same set: the same loops */
                C->loop_known = 1;
                C->loop_ascii[0] = L->loop_ascii[0];
                C->loop_ascii[1] = L->loop_ascii[1];
                C->loop_nonascii = L->loop_nonascii;
            }
        }
    }
    return FX_OK;
}

fx_status fx_gstate_accept(fx_gstate *s, fx_gwork *w, const char *bytes,
                           size_t len, fx_error *err) {
    const fx_grammar *g = s->g;
    load(s, w);
    fx_gtop *cur = w->sets, *nxt = w->sets + FX_GRAMMAR_MAX_STACKS;
    uint32_t n = s->n_tops, value = s->utf8_value, left = s->utf8_left;
    for (size_t i = 0; i < len; i++) {
        uint32_t cp = 0;
        int r = fx_gutf8_step((uint8_t)bytes[i], &value, &left, &cp);
        if (r < 0) n = 0;
        else if (r == 1) n = advance(g, w, cur, n, cp, nxt);
        else if (!any_range(g, cur, n, value, left)) n = 0;
        if (w->fail) return fx_fail(err, FX_ERR_GRAMMAR, "grammar: the parse "
                                    "exceeds its limits");
        if (n == 0) return fx_fail(err, FX_ERR_GRAMMAR, "grammar: the token "
                                   "does not continue the grammar");
        if (r == 1) {
            fx_gtop *x = cur;
            cur = nxt;
            nxt = x;
        }
    }
    fx_status st = keep_reachable(s, w, cur, n, err);
    if (st != FX_OK) return st;
    s->utf8_value = value;
    s->utf8_left = left;
    return FX_OK;
}

fx_status fx_gwork_init(fx_gwork *w, const fx_alloc *alloc,
                        const fx_vocab_trie *trie, fx_error *err) {
    memset(w, 0, sizeof *w);
    size_t levels = (size_t)trie->max_depth + 2;
    w->sets_cap = (uint32_t)(levels * FX_GRAMMAR_MAX_STACKS);
    bool walk = walk_alloc(w, alloc);
    w->sets = fx_malloc_array(alloc, w->sets_cap, sizeof *w->sets);
    w->levels = fx_malloc_array(alloc, levels, sizeof *w->levels);
    w->chains = fx_malloc_array(alloc, WALK_CHAINS, sizeof *w->chains);
    w->allowed = fx_malloc_array(alloc, trie->n_vocab ? trie->n_vocab : 1,
                                 sizeof *w->allowed);
    if (!walk || !w->sets || !w->levels || !w->chains || !w->allowed) {
        fx_gwork_free(w, alloc);
        return fx_fail(err, FX_ERR_NOMEM, "out of memory");
    }
    return FX_OK;
}

void fx_gwork_free(fx_gwork *w, const fx_alloc *alloc) {
    fx_free(alloc, w->frames);
    fx_free(alloc, w->sets);
    fx_free(alloc, w->todo);
    fx_free(alloc, w->remap);
    fx_free(alloc, w->hash);
    fx_free(alloc, w->levels);
    fx_free(alloc, w->chains);
    fx_free(alloc, w->allowed);
    memset(w, 0, sizeof *w);
}
