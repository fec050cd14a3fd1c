/*
 * What is derived once from a compiled program (fx_grammar_compile calls
 * both): the frames a row's parse can need, and an index of the classes
 * by the code points they match, which the mask walk compares sets by.
 */
#include "grammar.h"
#include "grammar_class.h"

/* ---- how many frames a row needs ---- */

/* A call creates a frame unless it is the last element of its
 * alternative (expand). */
static uint32_t call_weight(const fx_gelem *el, uint32_t e) {
    return fx_gis_end(el[e + 1].type) ? 0u : 1u;
}

static uint32_t rule_end(const fx_grammar *g, uint32_t r) {
    return r + 1 < g->n_rules ? g->rule_start[r + 1] : g->n_elems;
}

/* Tarjan's strongly connected components of the rules the root reaches,
 * iteratively (a rule chain may be as long as the program); each
 * component, finished callees first, gets the most frames a stack can
 * hold below its rules: none bound when a call inside it makes a frame. */
fx_status fx_grammar_size_rows(fx_grammar *g, fx_error *err) {
    const fx_alloc *al = &g->alloc;
    const fx_gelem *el = g->elems;
    const uint32_t nr = g->n_rules, UNBOUNDED = UINT32_MAX;
    uint32_t *idx = fx_calloc(al, nr, sizeof *idx);
    uint32_t *low = fx_malloc_array(al, nr, sizeof *low);
    uint32_t *cur = fx_malloc_array(al, nr, sizeof *cur);
    uint32_t *comp = fx_malloc_array(al, nr, sizeof *comp);
    uint32_t *depth = fx_malloc_array(al, nr, sizeof *depth);
    uint32_t *stk = fx_malloc_array(al, nr, sizeof *stk);
    uint32_t *cs = fx_malloc_array(al, nr, sizeof *cs);
    fx_status st = FX_OK;
    if (!idx || !low || !cur || !comp || !depth || !stk || !cs) {
        st = fx_fail(err, FX_ERR_NOMEM, "grammar: out of memory");
        goto out;
    }
    for (uint32_t r = 0; r < nr; r++) comp[r] = UINT32_MAX;
    uint32_t counter = 0, sp = 0, csp = 0, n_comp = 0;
    const uint32_t root = g->root;
    idx[root] = low[root] = ++counter;
    cur[root] = g->rule_start[root];
    stk[sp++] = root;
    cs[csp++] = root;
    while (csp > 0) {
        uint32_t r = cs[csp - 1], end = rule_end(g, r);
        while (cur[r] < end && el[cur[r]].type != FX_G_RULE) cur[r]++;
        if (cur[r] < end) {
            uint32_t t = el[cur[r]++].value;
            if (!idx[t]) {
                idx[t] = low[t] = ++counter;
                cur[t] = g->rule_start[t];
                stk[sp++] = t;
                cs[csp++] = t;
            } else if (comp[t] == UINT32_MAX && idx[t] < low[r]) {
                low[r] = idx[t]; /* on the stack: same component */
            }
            continue;
        }
        csp--;
        if (csp > 0 && low[r] < low[cs[csp - 1]]) low[cs[csp - 1]] = low[r];
        if (low[r] != idx[r]) continue;
        uint32_t k = sp;
        while (stk[k - 1] != r) k--;
        k--;
        for (uint32_t i = k; i < sp; i++) comp[stk[i]] = n_comp;
        uint32_t d = 0;
        for (uint32_t i = k; i < sp && d != UNBOUNDED; i++)
            for (uint32_t e = g->rule_start[stk[i]]; e < rule_end(g, stk[i]); e++) {
                if (el[e].type != FX_G_RULE) continue;
                uint32_t t = el[e].value, w = call_weight(el, e);
                uint32_t c = comp[t] == n_comp ? (w ? UNBOUNDED : 0)
                             : depth[t] == UNBOUNDED ? UNBOUNDED
                                                     : depth[t] + w;
                if (c > d) d = c;
                if (d == UNBOUNDED) break;
            }
        for (uint32_t i = k; i < sp; i++) depth[stk[i]] = d;
        sp = k;
        n_comp++;
    }
    uint32_t d = depth[root];
    g->row_frames = d == UNBOUNDED ||
                            (uint64_t)d * FX_GRAMMAR_MAX_STACKS > FX_GRAMMAR_ROW_FRAMES
                        ? FX_GRAMMAR_ROW_FRAMES
                        : d * FX_GRAMMAR_MAX_STACKS;
out:
    fx_free(al, idx); fx_free(al, low); fx_free(al, cur); fx_free(al, comp);
    fx_free(al, depth); fx_free(al, stk); fx_free(al, cs);
    return st;
}

/* ---- the classes by code point ---- */

/* Does every code point >= 0x80 match this top's class, or none? (-1:
 * it depends on the code point.) */
static int nonascii_uniform(const fx_gelem *e) {
    if (e->type == FX_G_CHAR_ANY) return 1;
    int positive = e->type == FX_G_CHAR, covers = 0, touches = 0;
    do {
        uint32_t a = e->value, b = a;
        if (e[1].type == FX_G_CHAR_RNG_UPPER) {
            b = e[1].value;
            e += 2;
        } else {
            e++;
        }
        if (a <= 0x80 && b >= 0x10FFFF) covers = 1;
        if (b >= 0x80) touches = 1;
    } while (e->type == FX_G_CHAR_ALT);
    if (covers) return positive;
    if (!touches) return !positive;
    return -1;
}

fx_status fx_grammar_index_classes(fx_grammar *g, fx_error *err) {
    g->class_ascii = fx_calloc(&g->alloc, (size_t)g->n_elems * 2, sizeof(uint64_t));
    g->class_nonascii = fx_calloc(&g->alloc, g->n_elems ? g->n_elems : 1, 1);
    if (!g->class_ascii || !g->class_nonascii)
        return fx_fail(err, FX_ERR_NOMEM, "grammar: out of memory");
    for (uint32_t e = 0; e < g->n_elems; e++) {
        uint32_t ty = g->elems[e].type;
        if (ty != FX_G_CHAR && ty != FX_G_CHAR_NOT && ty != FX_G_CHAR_ANY) continue;
        for (uint32_t c = 0; c < 0x80; c++)
            if (fx_gmatch_char(&g->elems[e], c))
                g->class_ascii[2 * e + (c >> 6)] |= 1ull << (c & 63);
        g->class_nonascii[e] = (int8_t)nonascii_uniform(&g->elems[e]);
    }
    return FX_OK;
}
