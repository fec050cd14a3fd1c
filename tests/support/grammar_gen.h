/*
 * Generators of GBNF grammars that reach ferrox's grammar limits (the
 * FX_GRAMMAR_* constants of lib/sample/grammar.h): deep, wide and long
 * chains. Each returns a malloc'd, NUL-terminated text (length in *len);
 * the caller frees it.
 */
#ifndef FX_TEST_GRAMMAR_GEN_H
#define FX_TEST_GRAMMAR_GEN_H

#include <stddef.h>

/* Issue 36's chain: root ::= r0, rK ::= rK+1 "a"? for K < n, rn ::= "a".
 * Its start state holds one parse frame per level: 1 to n+1 "a"s. */
char *gg_chain(unsigned n, size_t *len);

/* root ::= r0, rK ::= rK+1 for K < n, rn ::= "a": calls in tail position
 * only, so no frame is kept however long it is. */
char *gg_tail_chain(unsigned n, size_t *len);

/* root ::= "x0" | "x1" | ... | "x<k-1>": k parse stacks at the start. */
char *gg_wide(unsigned k, size_t *len);

/* root ::= ((( ... ("a") ... ))) with `depth` nested groups. */
char *gg_nest(unsigned depth, size_t *len);

/* root ::= "b" | "<n times a>"{count}: the compiled program grows with
 * n * count (the {m,n} copies of the literal's elements; a group in
 * parentheses would be one rule reference, copied count times). */
char *gg_repeat_block(unsigned n, unsigned count, size_t *len);

#endif /* FX_TEST_GRAMMAR_GEN_H */
