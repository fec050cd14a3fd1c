/* dlopen with RTLD_NOLOAD; nanosleep, opendir. */
#define _GNU_SOURCE
/*
 * "Starts no thread you did not ask for" (README, ferrox.h "Threads"),
 * counted: the entries of /proc/self/task are the process's threads.
 *
 * - loading a model starts none; a batcher with n_threads = 1 in the
 *   default (deterministic) mode starts none, not even while it prefills
 *   and decodes a request; with n_threads = 2 there is exactly one worker
 *   while the batcher lives and none after fx_batcher_free (the pool joins
 *   its workers);
 * - FX_BATCHER_FAST, with a prompt long enough that the fast path can be
 *   taken (a step of at least fast_min_m = 64 rows of F32 weights), steps
 *   to completion (its tokens are not compared: they equal the
 *   deterministic run only where the fast path fell back to our kernels),
 *   and once that batcher is freed no thread is left behind.
 *
 * OpenBLAS is loaded by the library only for the fast mode (by
 * fx_batcher_create with FX_BATCHER_FAST, or a kernels context's first
 * fast matmul: lib/kernels/matmul.c). Linked directly, as it once was, its pthreads build started
 * its workers when the program started: this test then saw them before
 * anything was loaded. ctest runs it with OPENBLAS_NUM_THREADS=2
 * (tests/kernels.cmake), so an inherited OPENBLAS_NUM_THREADS=1 cannot
 * hide them; on a one-core machine OpenBLAS starts no worker and the test
 * cannot tell.
 *
 * The INTERNAL build (FX_TEST_NO_THREADS_KERNELS) adds the same counts on
 * one kernels context with FX_FAST_BLAS_ALWAYS: OpenBLAS's workers appear
 * at the first fast matmul, and go when the context is freed.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include <ferrox.h>

#include "gguf_writer.h"
#include "test_rng.h"
#include "test_util.h"

#ifdef FX_TEST_NO_THREADS_KERNELS
#include "kernels/kernels.h"
#endif

static char model_path[4096];

/* ---- counting threads ---- */

/* Threads of this process, or -1 without /proc. */
static int count_threads(void) {
    DIR *d = opendir("/proc/self/task");
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

/* The count once it settles on `want`, or whatever it is after ~2 s: a
 * joined thread has cleared its tid before the kernel drops its task
 * entry, so right after a join it may be listed for a moment. Threads that
 * stay (a pool nobody joins) are still seen. */
static int threads_settled(int want) {
    int n = count_threads();
    for (int i = 0; i < 200 && n != want; i++) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
        n = count_threads();
    }
    return n;
}

#define ASSERT_THREADS(want, where)                                          \
    do {                                                                     \
        int got_ = threads_settled(want);                                    \
        if (got_ != (want))                                                  \
            fail_msg("%s: %d threads, want %d", where, got_, (int)(want));   \
    } while (0)

/* Whether OpenBLAS is in the process now (without loading it). */
static int blas_loaded(void) {
    static const char *const names[] = {"libopenblas.so.0", "libopenblas.so"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        void *h = dlopen(names[i], RTLD_LAZY | RTLD_NOLOAD);
        if (h) {
            dlclose(h);
            return 1;
        }
    }
    return 0;
}

/* Whether OpenBLAS stays loaded on purpose: the library pins a build whose
 * threads it cannot stop at unload (OpenMP: they are libgomp's), and one
 * that cannot say which it is (lib/kernels/matmul.c). Its pthreads and
 * serial builds are unloaded with the last context that used them. */
static int blas_pinned(void) {
    static const char *const names[] = {"libopenblas.so.0", "libopenblas.so"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        void *h = dlopen(names[i], RTLD_LAZY | RTLD_NOLOAD);
        if (!h) continue;
        int (*parallel)(void) =
            (int (*)(void))dlsym(h, "openblas_get_parallel");
        int kind = parallel ? parallel() : -1;
        dlclose(h);
        return kind != 0 && kind != 1;
    }
    return 0;
}

/* ---- a batcher run ---- */

static fx_batcher *make_batcher(fx_model *m, unsigned n_threads,
                                uint32_t flags) {
    fx_batcher_params p;
    fx_batcher_params_init(&p);
    p.max_rows = 2;
    p.max_step_tokens = 128; /* the whole prompt in one step: M = 96 */
    p.n_ctx = 192;
    p.n_threads = n_threads;
    p.flags = flags;
    fx_batcher *b = NULL;
    char err[256];
    if (fx_batcher_create(m, &p, &b, err, sizeof err) != FX_OK)
        fail_msg("create: %s", err);
    return b;
}

typedef struct run_out {
    int32_t ids[64];
    size_t n_ids;
    int done;
    fx_status status;
} run_out;

enum { PROMPT = 96, MAX_TOKENS = 8 };

/* Submits one request of PROMPT tokens and steps it to its end. */
static void run_request(fx_batcher *b, run_out *o) {
    int32_t prompt[PROMPT];
    uint64_t s = 12345;
    for (size_t i = 0; i < PROMPT; i++) /* skip <unk>, <s>, </s> */
        prompt[i] = 3 + (int32_t)fx_test_rng_below(&s, 60);
    fx_request r;
    fx_request_init(&r);
    r.prompt_tokens = prompt;
    r.n_prompt_tokens = PROMPT;
    r.max_tokens = MAX_TOKENS;
    r.temperature = 0;
    r.flags = FX_REQUEST_IGNORE_EOS;
    r.user = o;
    memset(o, 0, sizeof *o);
    fx_row *row = NULL;
    assert_int_equal(fx_submit(b, &r, &row), FX_OK);
    for (int i = 0; i < 1000 && fx_batcher_pending(b) > 0; i++) {
        assert_int_equal(fx_step(b), FX_OK);
        fx_event ev;
        while (fx_poll(b, &ev)) {
            assert_ptr_equal(ev.user, o);
            if (ev.type != FX_EVENT_DONE) continue;
            o->done++;
            o->status = ev.status;
            assert_true(ev.n_tokens <= 64);
            memcpy(o->ids, ev.tokens, ev.n_tokens * sizeof *o->ids);
            o->n_ids = ev.n_tokens;
        }
    }
    assert_int_equal(fx_batcher_pending(b), 0);
    assert_int_equal(o->done, 1);
    assert_int_equal(o->status, FX_OK);
    assert_int_equal(o->n_ids, MAX_TOKENS);
}

/* ---- tests ---- */

static void test_threads_counted(void **state) {
    (void)state;
    if (count_threads() < 0) skip(); /* no /proc */
    /* Before anything: a library that starts threads when it is loaded
     * (OpenBLAS linked in) shows up here already. */
    ASSERT_THREADS(1, "at start");

    fx_model *m = NULL;
    char err[256];
    if (fx_model_load(model_path, NULL, &m, err, sizeof err) != FX_OK)
        fail_msg("load: %s", err);
    ASSERT_THREADS(1, "after fx_model_load");

    /* One thread, deterministic: no thread at all. */
    fx_batcher *b = make_batcher(m, 1, 0);
    ASSERT_THREADS(1, "n_threads 1, after create");
    run_out det;
    run_request(b, &det);
    ASSERT_THREADS(1, "n_threads 1, after a request");
    fx_batcher_free(b);
    ASSERT_THREADS(1, "n_threads 1, after free");

    /* Two threads: exactly one worker, joined at free. */
    b = make_batcher(m, 2, 0);
    ASSERT_THREADS(2, "n_threads 2, after create");
    run_out det2;
    run_request(b, &det2);
    ASSERT_THREADS(2, "n_threads 2, after a request");
    /* The thread count does not change a bit (docs/design.md). */
    assert_int_equal(det2.n_ids, det.n_ids);
    assert_memory_equal(det2.ids, det.ids, det.n_ids * sizeof *det.ids);
    fx_batcher_free(b);
    ASSERT_THREADS(1, "n_threads 2, after free");
    assert_false(blas_loaded());

    /* Fast mode: the step works whether the fast path reached OpenBLAS or
     * fell back; after free nothing is left running or loaded. */
    b = make_batcher(m, 1, FX_BATCHER_FAST);
    /* Create loads OpenBLAS (not the step); it stays loaded, with its
     * threads, only where it is faster than our kernels. */
    if (!blas_loaded()) ASSERT_THREADS(1, "fast, after create");
    run_out fast;
    run_request(b, &fast);
    print_message("fast mode: %d threads after the request, OpenBLAS %s\n",
                  count_threads(), blas_loaded() ? "loaded" : "not loaded");
    fx_batcher_free(b);
    if (!blas_pinned()) {
        ASSERT_THREADS(1, "fast, after free");
        assert_false(blas_loaded());
    }

    /* And the deterministic mode is as it was. */
    b = make_batcher(m, 1, 0);
    run_out again;
    run_request(b, &again);
    assert_memory_equal(again.ids, det.ids, det.n_ids * sizeof *det.ids);
    fx_batcher_free(b);
    fx_model_free(m);
    if (!blas_pinned()) ASSERT_THREADS(1, "at the end");
}

#ifdef FX_TEST_NO_THREADS_KERNELS
/* One kernels context that hands every F32 matmul to OpenBLAS: nothing is
 * loaded at create, OpenBLAS (and its workers, on a machine with more than
 * one core) at the first fast matmul, and all of it goes at free. */
static void test_kernels_fast_loads_late(void **state) {
    (void)state;
    if (count_threads() < 0) skip();
    ASSERT_THREADS(1, "at start");
    fx_alloc alloc;
    assert_int_equal(fx_alloc_init(&alloc, NULL), FX_OK);
    for (int round = 0; round < 3; round++) {
        fx_kernels_params p;
        fx_kernels_params_init(&p);
        p.fast_min_m = 1;
        p.fast_blas = FX_FAST_BLAS_ALWAYS;
        fx_kernels *kc = NULL;
        assert_int_equal(fx_kernels_create(&alloc, &p, &kc, NULL), FX_OK);
        const int pinned = blas_pinned();
        if (!pinned) {
            ASSERT_THREADS(1, "kernels, after create");
            assert_false(blas_loaded());
        }

        enum { M = 64, N = 64, K = 64 };
        static float x[M * K], w[N * K], y[M * N], y0[M * N];
        for (size_t i = 0; i < M * K; i++) x[i] = (float)(i % 13) - 6.0f;
        for (size_t i = 0; i < N * K; i++) w[i] = (float)(i % 7) * 0.25f;
        assert_int_equal(fx_matmul(kc, x, K, M, w, FX_WTYPE_F32, N, K, y0, N,
                                   0), FX_OK);
        if (!pinned) {
            ASSERT_THREADS(1, "kernels, after a deterministic matmul");
            assert_false(blas_loaded());
        }
        assert_int_equal(fx_matmul(kc, x, K, M, w, FX_WTYPE_F32, N, K, y, N,
                                   FX_MATMUL_FAST), FX_OK);
        /* Small integers: every order of summation is exact. */
        assert_memory_equal(y, y0, sizeof y);
        const int used = fx_kernels_fast_uses_blas(kc);
        print_message("round %d: OpenBLAS %s, %d threads\n", round,
                      used ? "in use" : "not available", count_threads());
        if (used) assert_true(blas_loaded());
        fx_kernels_free(kc);
        if (!blas_pinned()) {
            ASSERT_THREADS(1, "kernels, after free");
            assert_false(blas_loaded());
        }
    }
}
#endif

static int setup(void **state) {
    (void)state;
    snprintf(model_path, sizeof model_path, "%s",
             fx_test_tmp_path("no_threads.gguf"));
    return gw_write_tiny_model(model_path, 256, 7) == 0 ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    remove(model_path);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads_counted),
#ifdef FX_TEST_NO_THREADS_KERNELS
        cmocka_unit_test(test_kernels_fast_loads_late),
#endif
    };
    return cmocka_run_group_tests_name("no_threads", tests, setup, teardown);
}
