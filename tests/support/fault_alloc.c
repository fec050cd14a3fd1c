#include "fault_alloc.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <cmocka.h>

void fx_fault_plan(fx_fault_alloc *f, long fail_at, int fail_after) {
    f->calls = 0;
    f->fail_at = fail_at;
    f->fail_after = fail_after;
    f->failed = 0;
}

void fx_fault_fail_next(fx_fault_alloc *f, int fail_after) {
    f->fail_at = f->calls + 1;
    f->fail_after = fail_after;
}

void fx_fault_stop(fx_fault_alloc *f) { f->fail_at = 0; }

static int should_fail(fx_fault_alloc *f) {
    f->calls++;
    int fail = f->fail_at > 0 &&
               (f->calls == f->fail_at ||
                (f->fail_after && f->calls > f->fail_at));
    if (fail) f->failed++;
    return fail;
}

/* Sizes of 0 become 1: malloc(0) and realloc(p, 0) may return NULL (or
 * free p) legitimately, which would look like an injected failure or
 * unbalance the live count. */
static void *fa_malloc(void *user, size_t size) {
    fx_fault_alloc *f = user;
    if (should_fail(f)) return NULL;
    void *p = malloc(size ? size : 1);
    if (p) f->live++;
    return p;
}

static void *fa_realloc(void *user, void *ptr, size_t size) {
    fx_fault_alloc *f = user;
    if (should_fail(f)) return NULL;
    void *p = realloc(ptr, size ? size : 1);
    if (p && !ptr) f->live++;
    return p;
}

static void fa_free(void *user, void *ptr) {
    fx_fault_alloc *f = user;
    if (ptr) f->live--;
    free(ptr);
}

fx_allocator fx_fault_allocator(fx_fault_alloc *f) {
    fx_allocator a = {fa_malloc, fa_realloc, fa_free, f};
    return a;
}

long fx_fault_sweep(fx_fault_alloc *f, fx_fault_scenario scenario, void *user) {
    long baseline = f->live;
    fx_fault_plan(f, 0, 0);
    scenario(f, user);
    if (f->live != baseline)
        fail_msg("fault-free run leaked %ld blocks", f->live - baseline);
    long total = f->calls;
    for (int after = 0; after < 2; after++) {
        for (long n = 1; n <= total; n++) {
            fx_fault_plan(f, n, after);
            scenario(f, user);
            if (f->live != baseline)
                fail_msg("allocation %ld of %ld failing (%s): %ld blocks "
                         "leaked",
                         n, total, after ? "and every later one" : "alone",
                         f->live - baseline);
        }
    }
    fx_fault_plan(f, 0, 0);
    return total;
}
