/*
 * grammar_class: what the parse (grammar_match.c) and the program's
 * indexes (grammar_index.c) both ask of an element: does it end an
 * alternative, does a code point match its class. Internal to lib/sample.
 */
#ifndef FX_GRAMMAR_CLASS_H
#define FX_GRAMMAR_CLASS_H

#include "grammar.h"

static inline bool fx_gis_end(uint32_t type) { return type == FX_G_END || type == FX_G_ALT; }

static inline bool fx_gmatch_char(const fx_gelem *e, uint32_t cp) {
    if (e->type == FX_G_CHAR_ANY) return true;
    bool positive = e->type == FX_G_CHAR, found = false;
    do {
        if (e[1].type == FX_G_CHAR_RNG_UPPER) {
            found = found || (e->value <= cp && cp <= e[1].value);
            e += 2;
        } else {
            found = found || e->value == cp;
            e++;
        }
    } while (e->type == FX_G_CHAR_ALT);
    return found == positive;
}

#endif /* FX_GRAMMAR_CLASS_H */
