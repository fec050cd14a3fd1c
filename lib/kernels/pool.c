/*
 * A persistent pthread pool. Threads are created once, by fx_pool_create,
 * and sleep on a condition variable between runs: a decode step issues
 * hundreds of matmuls, and creating threads per call would cost more than
 * a small matmul itself.
 *
 * Tasks are claimed from an atomic counter, so which thread runs which task
 * varies; callers make results independent of that by giving each task a
 * fixed slice of the output (the matmul splits N) with a fixed reduction
 * order inside.
 */
#define _POSIX_C_SOURCE 200809L

#include "kernels.h"

#include <pthread.h>
#include <stdatomic.h>

typedef struct fx_pool_worker {
    struct fx_pool *pool;
    unsigned index; /* 1..n_threads-1; 0 is the caller of fx_pool_run */
    pthread_t thread;
} fx_pool_worker;

struct fx_pool {
    fx_alloc alloc;
    unsigned n_threads;      /* including the calling thread */
    unsigned n_started;      /* workers successfully created */
    fx_pool_worker *workers; /* [n_threads - 1] */

    pthread_mutex_t mu;
    pthread_cond_t wake;     /* a new run (or stop) was published */
    pthread_cond_t done;     /* the last worker finished the run */
    /* Written under mu; atomic so the spin phases may read them without
     * it (the sleeping checks still happen under mu: no lost wake-up). */
    atomic_uint_fast64_t generation; /* bumped once per run */
    atomic_uint pending;     /* workers not yet finished with this run */
    atomic_bool stop;

    /* The current run; written under mu before generation is bumped. */
    fx_pool_fn fn;
    void *ctx;
    size_t n_tasks;
    atomic_size_t next_task;
    atomic_bool running;     /* catches a run from inside fn */
};

static void run_tasks(fx_pool *pool, fx_pool_fn fn, void *ctx,
                      size_t n_tasks, unsigned thread) {
    for (;;) {
        size_t t = atomic_fetch_add_explicit(&pool->next_task, 1,
                                             memory_order_relaxed);
        if (t >= n_tasks) break;
        fn(ctx, t, thread);
    }
}

/* Before sleeping on a condition variable, poll for a while: a decode
 * step runs hundreds of matmuls back to back, and a futex wake-up costs
 * more than a small one (measured ~12 us per run with 2 threads without
 * this). Bounded (~10-20 us), so an idle pool does not burn a core. */
#define FX_POOL_SPIN 1000

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void *worker_main(void *arg) {
    fx_pool_worker *self = arg;
    fx_pool *pool = self->pool;
    uint64_t seen = 0;
    for (;;) {
        for (unsigned i = 0; i < FX_POOL_SPIN; i++) {
            if (atomic_load_explicit(&pool->generation,
                                     memory_order_acquire) != seen ||
                atomic_load_explicit(&pool->stop, memory_order_relaxed))
                break;
            cpu_relax();
        }
        pthread_mutex_lock(&pool->mu);
        while (atomic_load(&pool->generation) == seen &&
               !atomic_load(&pool->stop))
            pthread_cond_wait(&pool->wake, &pool->mu);
        if (atomic_load(&pool->stop)) {
            pthread_mutex_unlock(&pool->mu);
            break;
        }
        seen = atomic_load(&pool->generation);
        fx_pool_fn fn = pool->fn;
        void *ctx = pool->ctx;
        size_t n_tasks = pool->n_tasks;
        pthread_mutex_unlock(&pool->mu);

        run_tasks(pool, fn, ctx, n_tasks, self->index);

        pthread_mutex_lock(&pool->mu);
        if (atomic_fetch_sub(&pool->pending, 1) == 1)
            pthread_cond_signal(&pool->done);
        pthread_mutex_unlock(&pool->mu);
    }
    return NULL;
}

static void stop_workers(fx_pool *pool) {
    pthread_mutex_lock(&pool->mu);
    atomic_store(&pool->stop, true);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mu);
    for (unsigned i = 0; i < pool->n_started; i++)
        pthread_join(pool->workers[i].thread, NULL);
    pool->n_started = 0;
}

fx_status fx_pool_create(const fx_alloc *alloc, unsigned n_threads,
                         fx_pool **out, fx_error *err) {
    if (!alloc || !out || n_threads == 0 || n_threads > 1024)
        return fx_fail(err, FX_ERR_INVALID_ARG,
                       "pool: n_threads must be 1..1024 (got %u)", n_threads);
    *out = NULL;
    fx_pool *pool = fx_calloc(alloc, 1, sizeof *pool);
    if (!pool) return fx_fail(err, FX_ERR_NOMEM, "pool: out of memory");
    pool->alloc = *alloc;
    pool->n_threads = n_threads;
    atomic_init(&pool->next_task, 0);
    atomic_init(&pool->running, false);
    atomic_init(&pool->generation, 0);
    atomic_init(&pool->pending, 0);
    atomic_init(&pool->stop, false);
    if (n_threads > 1) {
        pool->workers = fx_calloc(alloc, n_threads - 1, sizeof *pool->workers);
        if (!pool->workers) {
            fx_free(alloc, pool);
            return fx_fail(err, FX_ERR_NOMEM, "pool: out of memory");
        }
    }
    if (pthread_mutex_init(&pool->mu, NULL) != 0) goto fail_mu;
    if (pthread_cond_init(&pool->wake, NULL) != 0) goto fail_wake;
    if (pthread_cond_init(&pool->done, NULL) != 0) goto fail_done;
    for (unsigned i = 0; i + 1 < n_threads; i++) {
        fx_pool_worker *wk = &pool->workers[i];
        wk->pool = pool;
        wk->index = i + 1;
        if (pthread_create(&wk->thread, NULL, worker_main, wk) != 0) {
            stop_workers(pool);
            pthread_cond_destroy(&pool->done);
            pthread_cond_destroy(&pool->wake);
            pthread_mutex_destroy(&pool->mu);
            fx_free(alloc, pool->workers);
            fx_free(alloc, pool);
            return fx_fail(err, FX_ERR_NOMEM,
                           "pool: could not start thread %u of %u", i + 2,
                           n_threads);
        }
        pool->n_started++;
    }
    *out = pool;
    return FX_OK;

fail_done:
    pthread_cond_destroy(&pool->wake);
fail_wake:
    pthread_mutex_destroy(&pool->mu);
fail_mu:
    fx_free(alloc, pool->workers);
    fx_free(alloc, pool);
    return fx_fail(err, FX_ERR_NOMEM, "pool: could not create its lock");
}

void fx_pool_free(fx_pool *pool) {
    if (!pool) return;
    stop_workers(pool);
    pthread_cond_destroy(&pool->done);
    pthread_cond_destroy(&pool->wake);
    pthread_mutex_destroy(&pool->mu);
    fx_alloc alloc = pool->alloc;
    fx_free(&alloc, pool->workers);
    fx_free(&alloc, pool);
}

unsigned fx_pool_threads(const fx_pool *pool) {
    return pool ? pool->n_threads : 0;
}

fx_status fx_pool_run(fx_pool *pool, fx_pool_fn fn, void *ctx,
                      size_t n_tasks) {
    if (!pool || !fn) return FX_ERR_INVALID_ARG;
    if (atomic_exchange(&pool->running, true)) return FX_ERR_INVALID_ARG;
    if (n_tasks == 0) {
        atomic_store(&pool->running, false);
        return FX_OK;
    }
    /* A single task, or no workers: waking threads would only add latency. */
    if (pool->n_started == 0 || n_tasks == 1) {
        for (size_t t = 0; t < n_tasks; t++) fn(ctx, t, 0);
        atomic_store(&pool->running, false);
        return FX_OK;
    }
    pthread_mutex_lock(&pool->mu);
    pool->fn = fn;
    pool->ctx = ctx;
    pool->n_tasks = n_tasks;
    atomic_store_explicit(&pool->next_task, 0, memory_order_relaxed);
    atomic_store(&pool->pending, pool->n_started);
    atomic_fetch_add_explicit(&pool->generation, 1, memory_order_release);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mu);

    run_tasks(pool, fn, ctx, n_tasks, 0);

    for (unsigned i = 0; i < FX_POOL_SPIN; i++) {
        if (atomic_load_explicit(&pool->pending, memory_order_acquire) == 0)
            break;
        cpu_relax();
    }
    pthread_mutex_lock(&pool->mu);
    while (atomic_load(&pool->pending) > 0)
        pthread_cond_wait(&pool->done, &pool->mu);
    pthread_mutex_unlock(&pool->mu);
    atomic_store(&pool->running, false);
    return FX_OK;
}
