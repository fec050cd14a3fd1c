/*
 * A persistent pthread pool. Threads are created once, by fx_pool_create,
 * and wait between runs: a decode step issues about a hundred pool runs
 * (matmuls, attention), and creating threads per call would cost more than
 * a small matmul itself.
 *
 * Hand-off. A run is published with atomics (the run's fields, then a
 * generation counter) and its end is an atomic count of workers still in
 * it; a thread that finds nothing to do polls those for a while and only
 * then sleeps on a condition variable. The mutex and the condition
 * variables are touched only by a thread that sleeps or wakes a sleeper.
 *
 * How long to poll is adaptive (see struct spin), because the right
 * answer depends on the machine's load: a run costs far less when the
 * other thread polls than when it has to be woken, but on a busy machine
 * the other thread is often not running at all, and then polling is
 * wasted; yielding the core instead hands it to another process for a
 * whole time slice. No PAUSE in the poll loop: on a VM it can exit to the
 * hypervisor.
 *
 * Claiming. A run's tasks are cut into one contiguous share per thread;
 * each thread takes its own share front to back, then steals the back half
 * of another's. Consecutive tasks of a matmul are consecutive weight rows,
 * so each thread reads one forward stream, as a plain read pass does
 * (with one shared counter each thread's stream would jump every task and
 * the hardware prefetcher start over). Stealing keeps the balance when a
 * thread starts late or is descheduled.
 *
 * Which thread runs which task still varies; callers make results
 * independent of that by giving each task a fixed slice of the output (the
 * matmul splits N) with a fixed reduction order inside.
 */
#define _POSIX_C_SOURCE 200809L

#include "kernels.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

/* Poll budget bounds. Decode issues its runs a few microseconds apart
 * (norms, RoPE, residuals in between); an idle pool burns at most the
 * budget of a core before sleeping. */
#define FX_POOL_SPIN_MIN_NS 1000u
#define FX_POOL_SPIN_MAX_NS 100000u

/* One waiting thread's poll budget. After a wait that ended in sleep: if
 * the event came within half the maximum budget, polling until then would
 * have been cheaper than the sleep and wake, so the budget
 * grows to twice that gap; if it came later, the poll was wasted, so the
 * budget halves. Waits that the poll covers leave it alone. Owned by one
 * thread; no atomics needed.
 *
 * "When the event came" is the time its producer stamped on it (a run's
 * publication, a run's last task done), not when the sleeper woke up, and
 * the budget grows to the gap, not by doubling against it: otherwise
 * every wait looks long, short gaps never fit the budget, and it sits at
 * its minimum (tests/test_kernels_ops.c counts the sleeps). */
typedef struct spin {
    uint64_t ns;
} spin;

/* A thread's share of the current run: tasks lo..hi-1, packed as
 * lo << 32 | hi so that the owner taking the front and a thief taking the
 * back half agree through one compare-and-swap. Padded so that two
 * threads' shares never sit in one cache line. */
typedef struct share {
    atomic_uint_fast64_t range;
    /* What this share of the next run will read first (fx_pool_prefetch):
     * seq is odd while the caller rewrites addr and bytes, and a reader
     * that sees it change drops what it read. */
    atomic_uint pf_seq;
    atomic_uintptr_t pf_addr;
    atomic_size_t pf_bytes;
    char pad[128 - sizeof(atomic_uint_fast64_t) - sizeof(atomic_uint) -
             sizeof(atomic_uintptr_t) - sizeof(atomic_size_t)];
} share;

/* A thread's progress through one prefetch request. */
typedef struct pf_cursor {
    unsigned seq;   /* the request it belongs to */
    size_t done;    /* bytes prefetched so far */
} pf_cursor;

/* What an idle thread prefetches: its own share of the next run, and
 * thread 1 also the caller's (which is busy with the serial work between
 * runs: norms, RoPE, sampling). */
typedef struct idle_pf {
    struct fx_pool *pool;
    unsigned thread;
    pf_cursor own, caller;
} idle_pf;

/* Lines prefetched per poll of an idle wait: short enough that a new run
 * is still noticed within ~0.1 us. */
#define FX_POOL_PF_LINES 8u

#define FX_POOL_MAX_TASKS UINT32_MAX

typedef struct fx_pool_worker {
    struct fx_pool *pool;
    unsigned index; /* 1..n_threads-1; 0 is the caller of fx_pool_run */
    pthread_t thread;
} fx_pool_worker;

/* Fields in groups by who writes them, each group in cache lines of its
 * own (the pads): a line one thread polls must not be one the other
 * writes for another reason (the caller's prefetch cursor, say, written
 * on every poll of its wait). */
struct fx_pool {
    /* The caller's alone (and the lock's). */
    fx_alloc alloc;
    unsigned n_threads;      /* including the calling thread */
    unsigned n_started;      /* workers successfully created */
    fx_pool_worker *workers; /* [n_threads - 1] */
    share *shares;           /* [n_threads] */
    pthread_mutex_t mu;
    pthread_cond_t wake;     /* a new run (or stop) was published */
    pthread_cond_t done;     /* the last worker finished the run */
    spin caller_spin;        /* the caller's wait for the end of a run */
    idle_pf caller_pf;       /* and what it prefetches meanwhile */
    atomic_bool running;     /* catches a run from inside fn */
    char pad_caller[64];

    /* A run's publication, written by the caller, polled by the workers:
     * fn, ctx and the shares are written before generation is bumped
     * (seq_cst) and read after it is seen. published_ns: when (now_ns),
     * what a sleeping worker adapts its budget to. */
    fx_pool_fn fn;
    void *ctx;
    atomic_uint_fast64_t generation; /* bumped once per run */
    atomic_uint_fast64_t published_ns;
    atomic_bool stop;
    char pad_run[64];

    /* A run's end, written by the workers, polled by the caller:
     * finished_ns is when the last worker finished, for the caller's
     * budget. */
    atomic_uint pending;     /* workers not yet finished with this run */
    atomic_uint_fast64_t finished_ns;
    char pad_end[64];

    /* Sleeping and waking only. */
    atomic_uint sleepers;    /* workers waiting on wake (or about to) */
    atomic_bool caller_sleeping;
    atomic_uint_fast64_t sleeps; /* waits that ended in a sleep */
};

static uint64_t pack_range(uint64_t lo, uint64_t hi) { return lo << 32 | hi; }

/* The front task of this thread's share, if any. */
static bool take_front(share *own, size_t *task) {
    uint_fast64_t v = atomic_load(&own->range);
    for (;;) {
        const uint64_t lo = v >> 32, hi = v & 0xffffffffu;
        if (lo >= hi) return false;
        if (atomic_compare_exchange_weak(&own->range, &v,
                                         pack_range(lo + 1, hi))) {
            *task = (size_t)lo;
            return true;
        }
    }
}

/* Moves the back half (at least one task) of another thread's share into
 * this thread's, which is empty. Work is only ever in one share or being
 * run, so a thread that finds every share empty may leave: the run ends
 * when every thread has (pending). Within a run a share's value never
 * repeats (tasks only leave), so a compare-and-swap cannot be fooled by
 * a value that came back. */
static bool steal(fx_pool *pool, unsigned thread, unsigned n) {
    for (unsigned i = 1; i < n; i++) {
        share *victim = &pool->shares[(thread + i) % n];
        uint_fast64_t v = atomic_load(&victim->range);
        for (;;) {
            const uint64_t lo = v >> 32, hi = v & 0xffffffffu;
            if (lo >= hi) break;
            const uint64_t mid = lo + (hi - lo) / 2;
            if (atomic_compare_exchange_weak(&victim->range, &v,
                                             pack_range(lo, mid))) {
                atomic_store(&pool->shares[thread].range, pack_range(mid, hi));
                return true;
            }
        }
    }
    return false;
}

static void run_tasks(fx_pool *pool, fx_pool_fn fn, void *ctx,
                      unsigned thread) {
    const unsigned n = pool->n_started + 1;
    size_t t;
    for (;;) {
        while (take_front(&pool->shares[thread], &t)) fn(ctx, t, thread);
        if (!steal(pool, thread, n)) break;
    }
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Issues up to FX_POOL_PF_LINES prefetches of share sh's request; false
 * once there is nothing (left) to do. */
static bool prefetch_some(share *sh, pf_cursor *c) {
    const unsigned seq = atomic_load(&sh->pf_seq);
    if (seq & 1u) return false;
    const uintptr_t addr = atomic_load(&sh->pf_addr);
    const size_t bytes = atomic_load(&sh->pf_bytes);
    if (atomic_load(&sh->pf_seq) != seq) return false;
    if (c->seq != seq) {
        c->seq = seq;
        c->done = 0;
    }
    if (c->done >= bytes) return false;
    for (unsigned i = 0; i < FX_POOL_PF_LINES && c->done < bytes; i++) {
        __builtin_prefetch((const char *)(addr + c->done));
        c->done += 64;
    }
    return true;
}

static void idle_prefetch(idle_pf *ip) {
    if (!ip) return;
    if (prefetch_some(&ip->pool->shares[ip->thread], &ip->own)) return;
    if (ip->thread == 1) (void)prefetch_some(&ip->pool->shares[0], &ip->caller);
}

/* Polls until done(pool, arg) or the budget passes; true if done. The
 * clock is read every 64 polls: a poll is a load, the clock a vDSO call.
 * *start is when the wait began. Between polls, ip's prefetches (if any). */
static bool spin_until(const fx_pool *pool, const spin *sp, uint64_t *start,
                       bool (*done)(const fx_pool *, uint64_t), uint64_t arg,
                       idle_pf *ip) {
    *start = now_ns();
    for (unsigned i = 1;; i++) {
        if (done(pool, arg)) return true;
        idle_prefetch(ip);
        if (i % 64 == 0 && now_ns() - *start >= sp->ns) return false;
    }
}

/* After a wait that slept: adapt the budget to when the awaited event
 * happened (see struct spin). */
static void spin_adapt(spin *sp, uint64_t start, uint64_t event_ns) {
    if (event_ns <= start) return; /* a stop, or stamped before the wait */
    const uint64_t gap = event_ns - start;
    if (gap <= FX_POOL_SPIN_MAX_NS / 2) {
        if (2 * gap > sp->ns) sp->ns = 2 * gap;
    } else {
        sp->ns /= 2;
    }
    if (sp->ns < FX_POOL_SPIN_MIN_NS) sp->ns = FX_POOL_SPIN_MIN_NS;
    if (sp->ns > FX_POOL_SPIN_MAX_NS) sp->ns = FX_POOL_SPIN_MAX_NS;
}

static bool new_run(const fx_pool *pool, uint64_t seen) {
    return atomic_load(&pool->generation) != seen || atomic_load(&pool->stop);
}

static bool run_finished(const fx_pool *pool, uint64_t unused) {
    (void)unused;
    return atomic_load(&pool->pending) == 0;
}

static void *worker_main(void *arg) {
    fx_pool_worker *self = arg;
    fx_pool *pool = self->pool;
    uint64_t seen = 0, start;
    spin sp = {20000};
    idle_pf ip = {pool, self->index, {0, 0}, {0, 0}};
    for (;;) {
        if (!spin_until(pool, &sp, &start, new_run, seen, &ip)) {
            /* sleepers is raised before generation is checked under the
             * lock; fx_pool_run bumps generation before reading sleepers.
             * Both seq_cst: either this thread sees the new run, or the
             * caller sees a sleeper and broadcasts under the lock. */
            pthread_mutex_lock(&pool->mu);
            atomic_fetch_add(&pool->sleepers, 1);
            atomic_fetch_add(&pool->sleeps, 1);
            while (!new_run(pool, seen)) pthread_cond_wait(&pool->wake, &pool->mu);
            atomic_fetch_sub(&pool->sleepers, 1);
            pthread_mutex_unlock(&pool->mu);
            spin_adapt(&sp, start, atomic_load(&pool->published_ns));
        }
        if (atomic_load(&pool->stop)) break;
        seen = atomic_load(&pool->generation);
        run_tasks(pool, pool->fn, pool->ctx, self->index);
        /* The same pairing for the end of a run: the caller raises
         * caller_sleeping before checking pending under the lock. The
         * time is stamped before pending can reach 0, so a caller that
         * sees 0 also sees it. */
        atomic_store(&pool->finished_ns, now_ns());
        if (atomic_fetch_sub(&pool->pending, 1) == 1 &&
            atomic_load(&pool->caller_sleeping)) {
            pthread_mutex_lock(&pool->mu);
            pthread_cond_signal(&pool->done);
            pthread_mutex_unlock(&pool->mu);
        }
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
    atomic_init(&pool->sleepers, 0);
    atomic_init(&pool->caller_sleeping, false);
    pool->caller_spin.ns = 20000;
    atomic_init(&pool->generation, 0);
    atomic_init(&pool->pending, 0);
    atomic_init(&pool->published_ns, 0);
    atomic_init(&pool->finished_ns, 0);
    atomic_init(&pool->sleeps, 0);
    atomic_init(&pool->stop, false);
    atomic_init(&pool->running, false);
    pool->shares = fx_calloc(alloc, n_threads, sizeof *pool->shares);
    if (!pool->shares) {
        fx_free(alloc, pool);
        return fx_fail(err, FX_ERR_NOMEM, "pool: out of memory");
    }
    for (unsigned i = 0; i < n_threads; i++) {
        atomic_init(&pool->shares[i].range, 0);
        atomic_init(&pool->shares[i].pf_seq, 0);
        atomic_init(&pool->shares[i].pf_addr, 0);
        atomic_init(&pool->shares[i].pf_bytes, 0);
    }
    pool->caller_pf = (idle_pf){pool, 0, {0, 0}, {0, 0}};
    if (n_threads > 1) {
        pool->workers = fx_calloc(alloc, n_threads - 1, sizeof *pool->workers);
        if (!pool->workers) {
            fx_free(alloc, pool->shares);
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
            fx_free(alloc, pool->shares);
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
    fx_free(alloc, pool->shares);
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
    fx_free(&alloc, pool->shares);
    fx_free(&alloc, pool);
}

void fx_pool_share_of(const fx_pool *pool, size_t n_tasks, unsigned thread,
                      size_t *lo, size_t *hi) {
    const unsigned n = pool && pool->n_started > 0 ? pool->n_started + 1 : 1;
    if (thread >= n) {
        *lo = *hi = n_tasks;
        return;
    }
    *lo = (size_t)((uint64_t)n_tasks * thread / n);
    *hi = (size_t)((uint64_t)n_tasks * (thread + 1) / n);
}

void fx_pool_prefetch(fx_pool *pool, unsigned thread, const void *addr,
                      size_t bytes) {
    if (!pool || thread >= pool->n_threads) return;
    share *sh = &pool->shares[thread];
    /* A seqlock with one writer (the thread that owns the pool's runs):
     * plain stores and a release fence, no locked instruction: the idle
     * thread polls these lines, and a step makes dozens of requests. */
    const unsigned seq = atomic_load_explicit(&sh->pf_seq, memory_order_relaxed);
    atomic_store_explicit(&sh->pf_seq, seq + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&sh->pf_addr, (uintptr_t)addr, memory_order_relaxed);
    atomic_store_explicit(&sh->pf_bytes, addr ? bytes : 0,
                          memory_order_relaxed);
    atomic_store_explicit(&sh->pf_seq, seq + 2, memory_order_release);
}

bool fx_pool_prefetch_request(const fx_pool *pool, unsigned thread,
                              const void **addr, size_t *bytes) {
    if (!pool || thread >= pool->n_threads) return false;
    share *sh = &pool->shares[thread];
    const unsigned seq = atomic_load(&sh->pf_seq);
    *addr = (const void *)atomic_load(&sh->pf_addr);
    *bytes = atomic_load(&sh->pf_bytes);
    return !(seq & 1u) && atomic_load(&sh->pf_seq) == seq;
}

unsigned fx_pool_threads(const fx_pool *pool) {
    return pool ? pool->n_threads : 0;
}

uint64_t fx_pool_sleeps(const fx_pool *pool) {
    return pool ? (uint64_t)atomic_load(&pool->sleeps) : 0;
}

fx_status fx_pool_run(fx_pool *pool, fx_pool_fn fn, void *ctx,
                      size_t n_tasks) {
    if (!pool || !fn) return FX_ERR_INVALID_ARG;
    if (atomic_exchange(&pool->running, true)) return FX_ERR_INVALID_ARG;
    if (n_tasks > FX_POOL_MAX_TASKS) {
        atomic_store(&pool->running, false);
        return FX_ERR_TOO_LARGE;
    }
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
    /* Every worker finished the previous run (pending reached 0 before it
     * returned), so none reads these while they change. */
    pool->fn = fn;
    pool->ctx = ctx;
    for (unsigned i = 0; i <= pool->n_started; i++) {
        size_t lo, hi;
        fx_pool_share_of(pool, n_tasks, i, &lo, &hi);
        atomic_store(&pool->shares[i].range, pack_range(lo, hi));
    }
    atomic_store(&pool->pending, pool->n_started);
    atomic_store(&pool->published_ns, now_ns());
    atomic_fetch_add(&pool->generation, 1);
    if (atomic_load(&pool->sleepers) > 0) {
        pthread_mutex_lock(&pool->mu);
        pthread_cond_broadcast(&pool->wake);
        pthread_mutex_unlock(&pool->mu);
    }

    run_tasks(pool, fn, ctx, 0);

    uint64_t start;
    if (!spin_until(pool, &pool->caller_spin, &start, run_finished, 0,
                    &pool->caller_pf)) {
        pthread_mutex_lock(&pool->mu);
        atomic_store(&pool->caller_sleeping, true);
        atomic_fetch_add(&pool->sleeps, 1);
        while (atomic_load(&pool->pending) > 0)
            pthread_cond_wait(&pool->done, &pool->mu);
        atomic_store(&pool->caller_sleeping, false);
        pthread_mutex_unlock(&pool->mu);
        spin_adapt(&pool->caller_spin, start,
                   atomic_load(&pool->finished_ns));
    }
    atomic_store(&pool->running, false);
    return FX_OK;
}
