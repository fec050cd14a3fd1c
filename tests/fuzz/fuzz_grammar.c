/*
 * fuzz_grammar: the GBNF compiler and the per-row matcher (docs/reliability.md C
 * 20-26).
 *
 * Input:
 *   byte 0      bit 0: use the built-in JSON grammar (no grammar text);
 *               bits 1-2: chunking of the text; bit 3: generate -- mask the
 *               tiny vocabulary and accept an allowed token chosen by the
 *               input, instead of accepting the text; bit 4: root "start"
 *   bytes 1-2   length of the grammar text (little-endian, cut to fit)
 *   then        the grammar text, then the text to match
 *
 * Checked: compile either succeeds or fails with FX_ERR_GRAMMAR (or
 * NOMEM) and a "line L, column C" message; accept fails only with
 * FX_ERR_GRAMMAR and leaves the state usable; every token the mask allows
 * can then be accepted; an end-of-generation token is allowed only when
 * the parse is complete.
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "sample/grammar.h"
#include "tokenizer/tokenizer.h"

static fx_alloc alloc;
static struct fx_vocab *vocab;
static fx_vocab_trie *trie;
static fx_gwork work;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fx_error err;
    if (fx_alloc_init(&alloc, NULL) != FX_OK) abort();
    vocab = fz_tiny_spm_vocab(&alloc);
    if (!vocab) abort();
    if (fx_vocab_trie_build(&alloc, vocab, &trie, &err) != FX_OK ||
        fx_gwork_init(&work, &alloc, trie, &err) != FX_OK) {
        fprintf(stderr, "fuzz_grammar: %s\n", err.message);
        abort();
    }
    return 0;
}

static void generate(fx_gstate *s, fz_in *in) {
    fx_error err;
    for (int step = 0; step < 16 && in->n > 0; step++) {
        fx_status st = fx_gstate_mask(s, trie, &work, &err);
        if (st != FX_OK) {
            FX_FUZZ_CHECK(st == FX_ERR_GRAMMAR);
            return;
        }
        FX_FUZZ_CHECK(work.n_allowed <= trie->n_vocab);
        if (work.eog_allowed) FX_FUZZ_CHECK(fx_gstate_complete(s));
        if (work.n_allowed == 0) return;
        int32_t id = work.allowed[fz_u16(in) % work.n_allowed];
        FX_FUZZ_CHECK(id >= 0 && (uint32_t)id < trie->n_vocab);
        if (fx_vocab_is_eog(vocab, id)) {
            FX_FUZZ_CHECK(fx_gstate_complete(s));
            return;
        }
        char piece[64];
        size_t n = 0;
        st = fx_vocab_token_to_piece(vocab, id, 0, piece, sizeof piece, &n,
                                     &err);
        FX_FUZZ_CHECK(st == FX_OK);
        FX_FUZZ_CHECK(n > 0);
        st = fx_gstate_accept(s, &work, piece, n, &err);
        /* The mask said this token fits. */
        if (st != FX_OK) fprintf(stderr, "fuzz_grammar: %s\n", err.message);
        FX_FUZZ_CHECK(st == FX_OK);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_in in = {data, size};
    uint8_t flags = fz_u8(&in);
    fx_grammar *g = NULL;
    fx_error err;
    fx_status st;
    if (flags & 1) {
        st = fx_grammar_json(&alloc, &g, &err);
        FX_FUZZ_CHECK(st == FX_OK || st == FX_ERR_NOMEM);
    } else {
        size_t glen = fz_u16(&in), got;
        const char *text = (const char *)fz_take(&in, glen, &got);
        st = fx_grammar_compile(&alloc, text, got,
                                (flags & 0x10) ? "start" : NULL, &g, &err);
        if (st != FX_OK) {
            FX_FUZZ_CHECK(g == NULL);
            FX_FUZZ_CHECK(st == FX_ERR_GRAMMAR || st == FX_ERR_NOMEM ||
                          st == FX_ERR_TOO_LARGE);
            if (st == FX_ERR_GRAMMAR)
                FX_FUZZ_CHECK(strstr(err.message, "line ") != NULL);
        }
    }
    if (!g) return 0;
    FX_FUZZ_CHECK(g->root < g->n_rules);

    fx_gstate s;
    st = fx_gstate_init(&s, &alloc, g, &err);
    if (st != FX_OK) {
        FX_FUZZ_CHECK(st == FX_ERR_NOMEM || st == FX_ERR_GRAMMAR);
        fx_grammar_free(g);
        return 0;
    }
    if (flags & 8) {
        generate(&s, &in);
    } else {
        uint64_t rng = 0x2545F4914F6CDD1Dull ^ flags;
        while (in.n > 0) {
            size_t c;
            switch ((flags >> 1) & 3) {
            case 0: c = 1; break;
            case 1: c = 1 + fz_rand(&rng) % 4; break;
            case 2: c = 1 + fz_rand(&rng) % 16; break;
            default: c = in.n; break;
            }
            size_t got;
            const char *p = (const char *)fz_take(&in, c, &got);
            int was_complete = fx_gstate_complete(&s);
            st = fx_gstate_accept(&s, &work, p, got, &err);
            FX_FUZZ_CHECK(st == FX_OK || st == FX_ERR_GRAMMAR);
            /* Unchanged after a failure. */
            if (st != FX_OK) FX_FUZZ_CHECK(fx_gstate_complete(&s) == was_complete);
        }
        (void)fx_gstate_complete(&s);
        generate(&s, &in);
    }
    fx_gstate_free(&s, &alloc);
    fx_grammar_free(g);
    return 0;
}
