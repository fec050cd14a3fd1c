/*
 * A counting allocator for fx_allocator hooks that can fail on demand:
 * docs/reliability.md 43 ("fail the Nth allocation for every N ... once for a
 * single failure, once for every allocation after N"). One copy for every
 * test that injects allocation failures, so each counts and fails the same
 * way.
 */
#ifndef FX_TEST_FAULT_ALLOC_H
#define FX_TEST_FAULT_ALLOC_H

#include <ferrox.h>

typedef struct fx_fault_alloc {
    long calls;     /* malloc/realloc calls so far (frees are not counted:
                       they cannot fail) */
    long fail_at;   /* the call (1-based) to fail; 0: never fail */
    int fail_after; /* 1: also fail every call after fail_at */
    long failed;    /* calls failed so far */
    long live;      /* blocks handed out and not yet freed */
} fx_fault_alloc;

/* Starts counting from zero with a new failure plan (fail_at 0: none).
 * `live` is kept: it belongs to whatever is still allocated. */
void fx_fault_plan(fx_fault_alloc *f, long fail_at, int fail_after);

/* Fails from the next call on: only that one (fail_after 0), or it and
 * every later one (1). Counting continues from where it is. */
void fx_fault_fail_next(fx_fault_alloc *f, int fail_after);

/* Stops failing; counting continues. */
void fx_fault_stop(fx_fault_alloc *f);

/* The hooks, with f as their user pointer. */
fx_allocator fx_fault_allocator(fx_fault_alloc *f);

/* One run of a scenario under f's plan. It must free again everything it
 * allocates through f (the sweep checks that f->live is back where it
 * was) and check its own statuses. */
typedef void (*fx_fault_scenario)(fx_fault_alloc *f, void *user);

/* The whole of docs/reliability.md 43 for one scenario: one run without failures
 * counts its allocations (T); then for every N in 1..T, one run failing
 * only call N and one failing N and every later call. f may already hold
 * blocks (a model loaded through it, say): they are the baseline a run
 * must return to. Fails the test (cmocka) on a leak, naming N and the
 * mode. Leaves f not failing; returns T. */
long fx_fault_sweep(fx_fault_alloc *f, fx_fault_scenario scenario, void *user);

#endif /* FX_TEST_FAULT_ALLOC_H */
