/*
 * grammar: GBNF (as llama.cpp documents it) compiled once into an immutable
 * program that many rows share, and the per-row pushdown parse that masks
 * the vocabulary each step.
 *
 * Included by sample.h; the sample layer's interface is the two headers.
 * A row never holds a parse without its sampler: fx_gstate lives inside
 * fx_sampler (docs/design.md invariant 7).
 *
 * Limits (docs/reliability.md C): every one is a compile error or a row failure
 * with FX_ERR_GRAMMAR, never unbounded time, memory or native stack.
 */
#ifndef FX_GRAMMAR_H
#define FX_GRAMMAR_H

#include "../core/core.h"

struct fx_vocab;

#define FX_GRAMMAR_MAX_TEXT (1u << 20)     /* bytes of GBNF */
#define FX_GRAMMAR_MAX_NESTING 128u        /* nested groups */
#define FX_GRAMMAR_MAX_ELEMS (1u << 20)    /* compiled size, after {m,n} */
#define FX_GRAMMAR_MAX_REPEAT 1000u        /* m and n of {m,n} */
#define FX_GRAMMAR_MAX_STACKS 256u         /* live parse stacks per row */
#define FX_GRAMMAR_ROW_FRAMES 4096u        /* stack frames a row keeps */
#define FX_GRAMMAR_WORK_FRAMES (1u << 16)  /* frames one mask walk may use */
#define FX_GRAMMAR_CHAIN_MAX 32u           /* characters a mask walk follows
                                              a bounded repetition ahead */
#define FX_GRAMMAR_EXPAND_BUDGET 100000u   /* expansion steps per advance */
#define FX_GRAMMAR_CALL_BUDGET 20000000u   /* expansion steps per mask or
                                              accept (~0.1 s): bounds
                                              ambiguous grammars */

typedef enum fx_gtype {
    FX_G_END = 0,       /* end of a rule */
    FX_G_ALT,           /* start of the next alternative */
    FX_G_RULE,          /* reference to rule `value` */
    FX_G_CHAR,          /* a code point class starting with `value` */
    FX_G_CHAR_NOT,      /* a negated class starting with `value` */
    FX_G_CHAR_RNG_UPPER, /* upper bound of the range the previous opened */
    FX_G_CHAR_ALT,      /* another code point of the class */
    FX_G_CHAR_ANY       /* `.`: any code point */
} fx_gtype;

typedef struct fx_gelem {
    uint32_t type;      /* fx_gtype */
    uint32_t value;
} fx_gelem;

/* The compiled program: rule i's alternatives start at alts[alt_start[i]..
 * alt_start[i+1]), each an index into elems running to an ALT or END. */
typedef struct fx_grammar {
    fx_alloc alloc;
    fx_gelem *elems;       /* [n_elems] */
    uint32_t n_elems;
    uint32_t *rule_start;  /* [n_rules] first element of each rule */
    uint32_t *alts;        /* [n_alts] first element of each alternative */
    uint32_t *alt_start;   /* [n_rules + 1] */
    uint32_t n_rules, n_alts;
    uint32_t root;
    uint32_t row_frames;   /* frames a row's parse can ever keep (at most
                              FX_GRAMMAR_ROW_FRAMES): what it allocates */
    /* Per class (at its first element; else 0): the ASCII code points it
     * matches, and whether every code point >= 0x80 does (1), none (0) or
     * some (-1). For the mask walk, which compares classes by the set. */
    uint64_t *class_ascii;   /* [n_elems * 2] */
    int8_t *class_nonascii;  /* [n_elems] */
} fx_grammar;

/* Fills g's class_ascii and class_nonascii (fx_grammar_compile does). */
fx_status fx_grammar_index_classes(fx_grammar *g, fx_error *err);

/* Compiles GBNF text; root names the start rule (NULL: "root"). Errors are
 * FX_ERR_GRAMMAR with "line L, column C: ..." in err. */
fx_status fx_grammar_compile(const fx_alloc *alloc, const char *text,
                             size_t len, const char *root, fx_grammar **out,
                             fx_error *err);
/* The built-in grammar of any JSON value (FX_REQUEST_JSON). */
fx_status fx_grammar_json(const fx_alloc *alloc, fx_grammar **out,
                          fx_error *err);
void fx_grammar_free(fx_grammar *g);
/* Sets g->row_frames: FX_GRAMMAR_MAX_STACKS times the most frames one
 * stack can hold (the longest chain of non-tail calls from the root), or
 * FX_GRAMMAR_ROW_FRAMES when a cycle of rules makes one (recursion that
 * is not a tail call) or the product is larger. FX_ERR_NOMEM only. */
fx_status fx_grammar_size_rows(fx_grammar *g, fx_error *err);

/* ---- the vocabulary as a byte trie, built once per vocabulary ---- */

/* Nodes are numbered in depth-first preorder, so a node's subtree holds
 * the tokens ids[tok_start .. sub_end): a mask can take a whole subtree at
 * once when every byte in it leaves the parse where it was (the inside of
 * a JSON string, say) -- which is what keeps a mask in microseconds. */
typedef struct fx_trie_node {
    uint32_t first_child;  /* node index, 0 = none (0 is the root) */
    uint32_t next_sibling; /* node index, 0 = none */
    uint32_t tok_start;    /* tokens whose piece ends here: */
    uint32_t tok_count;    /*   ids[tok_start .. +tok_count) */
    uint32_t sub_end;      /* end of the subtree's tokens in ids */
    uint64_t ascii[2];     /* ASCII bytes in the subtree, this one included */
    uint8_t byte;
    uint8_t flags;         /* FX_TRIE_* */
    uint16_t height;       /* bytes on the longest path down, this one
                              included (saturates at 65535) */
} fx_trie_node;

#define FX_TRIE_NONASCII 0x1u  /* a byte >= 0x80 in the subtree */
#define FX_TRIE_VALID 0x2u     /* every path through the subtree is valid
                                  UTF-8 (a cut-off last character allowed)
                                  from a character boundary at its parent */

typedef struct fx_vocab_trie {
    fx_alloc alloc;
    fx_trie_node *nodes;   /* [n_nodes], 0 is the root */
    uint32_t n_nodes;
    int32_t *ids;          /* [n_ids] tokens grouped by node */
    uint16_t *starts;      /* [n_ids] characters each piece starts (bytes
                              that are no UTF-8 continuation): how many
                              steps of a repetition the token takes */
    uint32_t n_ids;
    int32_t *eog;          /* [n_eog] end-of-generation tokens */
    uint32_t n_eog;
    int32_t eos;           /* forced when the grammar is complete; -1 none */
    uint32_t max_depth;    /* longest piece */
    uint32_t n_vocab;
} fx_vocab_trie;

/* Tokens with an empty piece that are not end-of-generation (controls,
 * BOS) are never allowed under a grammar: they would not advance it. */
fx_status fx_vocab_trie_build(const fx_alloc *alloc,
                              const struct fx_vocab *vocab,
                              fx_vocab_trie **out, fx_error *err);
void fx_vocab_trie_free(fx_vocab_trie *t);

/* One byte through a UTF-8 decoder whose state is (*value, *left), both 0
 * at a character boundary: 1 a code point is complete in *cp, 0 more bytes
 * are needed, -1 invalid (overlong, surrogate, beyond U+10FFFF). */
int fx_gutf8_step(uint8_t c, uint32_t *value, uint32_t *left, uint32_t *cp);

/* ---- one row's live parse ---- */

typedef struct fx_gframe {
    uint32_t pos;          /* element to continue at after the callee */
    uint32_t parent;       /* frame index; FX_GNONE: bottom */
} fx_gframe;

typedef struct fx_gtop {
    uint32_t pos;          /* terminal element to match; FX_GACCEPT: done */
    uint32_t parent;
} fx_gtop;

#define FX_GNONE 0xFFFFFFFFu
#define FX_GACCEPT 0xFFFFFFFEu

typedef struct fx_gstate {
    const fx_grammar *g;   /* NULL: no grammar */
    fx_gframe *frames;     /* [frames_cap] */
    uint32_t n_frames, frames_cap; /* frames_cap: the grammar's row_frames */
    fx_gtop *tops;         /* [FX_GRAMMAR_MAX_STACKS] one per stack */
    uint32_t n_tops;
    uint32_t utf8_value;   /* a code point cut off between tokens */
    uint32_t utf8_left;    /* decoder state; 0 between characters */
} fx_gstate;

/* Per-batcher scratch for masks: rows are masked one at a time. */
typedef struct fx_gwork {
    fx_gframe *frames;     /* [FX_GRAMMAR_WORK_FRAMES] */
    uint32_t n_frames;
    fx_gtop *sets;         /* [(max_depth + 2) * FX_GRAMMAR_MAX_STACKS] */
    uint32_t sets_cap;
    fx_gtop *todo;         /* [FX_GRAMMAR_EXPAND_BUDGET] expansion list */
    uint32_t *remap;       /* [FX_GRAMMAR_WORK_FRAMES] for compaction */
    uint32_t *hash;        /* [2 * FX_GRAMMAR_WORK_FRAMES] frame index by
                              content, so equal stacks are equal by index */
    uint32_t *hash_stamp;  /* [2 * FX_GRAMMAR_WORK_FRAMES] the call that
                              wrote each entry: older ones are empty, so
                              one row's walk never sees another's */
    uint32_t stamp;
    uint32_t steps;        /* expansion steps in this call */
    struct gwalk_level *levels; /* [max_depth + 2] */
    struct gwalk_chain *chains; /* repetitions a walk followed ahead */
    int32_t *allowed;      /* [n_vocab] the last mask's tokens */
    uint32_t n_allowed;
    int eog_allowed;
    fx_status fail;        /* set when a limit was hit during a walk */
} fx_gwork;

fx_status fx_gwork_init(fx_gwork *w, const fx_alloc *alloc,
                        const fx_vocab_trie *trie, fx_error *err);
void fx_gwork_free(fx_gwork *w, const fx_alloc *alloc);

/* Allocates the row's parse, sized to the grammar, and sets it at the
 * grammar's start, expanding it in w (a batcher's mask scratch: nothing
 * of its size is allocated per row). */
fx_status fx_gstate_init_work(fx_gstate *s, const fx_alloc *alloc,
                              const fx_grammar *g, fx_gwork *w, fx_error *err);
/* The same with scratch of its own, allocated for the call. */
fx_status fx_gstate_init(fx_gstate *s, const fx_alloc *alloc,
                         const fx_grammar *g, fx_error *err);
void fx_gstate_free(fx_gstate *s, const fx_alloc *alloc);

/* Fills w->allowed with every token the grammar lets come next (EOG tokens
 * only when the grammar can be complete). FX_ERR_GRAMMAR if a limit is
 * hit. */
fx_status fx_gstate_mask(const fx_gstate *s, const fx_vocab_trie *trie,
                         fx_gwork *w, fx_error *err);
/* Advances the parse by a token's bytes. FX_ERR_GRAMMAR when they do not
 * fit or a limit is hit; the state is unchanged then. */
fx_status fx_gstate_accept(fx_gstate *s, fx_gwork *w, const char *bytes,
                           size_t len, fx_error *err);
/* The grammar has matched a complete sentence. */
bool fx_gstate_complete(const fx_gstate *s);

#endif /* FX_GRAMMAR_H */
