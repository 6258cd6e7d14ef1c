/* A small pthread pool for ot_parallel_for: n_threads - 1 workers plus the calling thread.
 *
 * One job at a time: the caller publishes (fn, arg, range, chunking), bumps a generation counter
 * and wakes the workers; everyone (the caller included) takes chunks with an atomic counter until
 * none are left; the caller waits until every chunk is done. Workers spin briefly before sleeping
 * on a condition variable so back-to-back small kernels don't pay a wake-up each. A kernel called
 * from inside a parallel range (nested parallelism) runs its range inline. */
#include "runtime/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#include "core/core.h"

struct ot_pool {
    int n_threads;
    pthread_t *workers;
    int n_workers;
    pthread_mutex_t mu;
    pthread_cond_t wake; /* workers wait here for a new generation */
    pthread_cond_t done; /* the caller waits here for the last chunk */
    atomic_uint_fast64_t generation;
    bool stop;
    /* the current job */
    ot_range_fn fn;
    void *arg;
    int64_t n, chunk, n_chunks;
    atomic_int_fast64_t next;     /* next chunk to take */
    atomic_int_fast64_t finished; /* chunks done */
    atomic_int active;            /* workers inside the current job */
};

static _Thread_local bool tl_in_parallel;

enum { SPIN_ITERS = 4000 };

static void run_chunks(ot_pool *p) {
    for (;;) {
        int64_t c = atomic_fetch_add(&p->next, 1);
        if (c >= p->n_chunks) break;
        int64_t b = c * p->chunk, e = b + p->chunk < p->n ? b + p->chunk : p->n;
        p->fn(p->arg, b, e);
        if (atomic_fetch_add(&p->finished, 1) + 1 == p->n_chunks) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

static void *worker_main(void *arg) {
    ot_pool *p = arg;
    tl_in_parallel = true;
    uint_fast64_t seen = 0;
    for (;;) {
        for (int i = 0; atomic_load(&p->generation) == seen && i < SPIN_ITERS; i++) sched_yield();
        /* Join a job under the lock, so the caller never rewrites a job someone is about to read. */
        pthread_mutex_lock(&p->mu);
        while (atomic_load(&p->generation) == seen && !p->stop) pthread_cond_wait(&p->wake, &p->mu);
        if (p->stop) {
            pthread_mutex_unlock(&p->mu);
            return NULL;
        }
        seen = atomic_load(&p->generation);
        atomic_fetch_add(&p->active, 1);
        pthread_mutex_unlock(&p->mu);
        run_chunks(p);
        atomic_fetch_sub(&p->active, 1);
    }
}

otter_status ot_pool_create(ot_pool **out, int n_threads) {
    *out = NULL;
    if (n_threads < 1) n_threads = 1;
    ot_pool *p = ot_calloc(1, sizeof *p);
    if (!p) return OT_NOMEM();
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    atomic_init(&p->generation, 0);
    atomic_init(&p->next, 0);
    atomic_init(&p->finished, 0);
    atomic_init(&p->active, 0);
    if (n_threads > 1) {
        p->workers = ot_calloc((size_t)n_threads - 1, sizeof *p->workers);
        if (!p->workers) {
            ot_pool_free(p);
            return OT_NOMEM();
        }
        for (int i = 0; i < n_threads - 1; i++) {
            if (pthread_create(&p->workers[i], NULL, worker_main, p) != 0) {
                ot_pool_free(p);
                return ot_error(OTTER_ERR_NOMEM, "could not start thread %d of %d", i + 2, n_threads);
            }
            p->n_workers++;
        }
    }
    *out = p;
    return OTTER_OK;
}

void ot_pool_free(ot_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    atomic_fetch_add(&p->generation, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_workers; i++) pthread_join(p->workers[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    ot_free(p->workers);
    ot_free(p);
}

int ot_pool_threads(const ot_pool *p) { return p ? p->n_threads : 1; }

void ot_pool_run(ot_pool *p, int64_t n, int64_t grain, ot_range_fn fn, void *arg) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (!p || p->n_workers == 0 || n <= grain || tl_in_parallel) {
        fn(arg, 0, n);
        return;
    }
    int64_t max_chunks = (int64_t)p->n_threads * 4;
    int64_t n_chunks = (n + grain - 1) / grain;
    if (n_chunks > max_chunks) n_chunks = max_chunks;
    int64_t chunk = (n + n_chunks - 1) / n_chunks;
    n_chunks = (n + chunk - 1) / chunk;
    /* Workers join under the lock; wait (holding it) until stragglers of the previous job have left
     * run_chunks, then publish the new job. */
    pthread_mutex_lock(&p->mu);
    while (atomic_load(&p->active) != 0) {
        pthread_mutex_unlock(&p->mu);
        sched_yield();
        pthread_mutex_lock(&p->mu);
    }
    p->fn = fn;
    p->arg = arg;
    p->n = n;
    p->chunk = chunk;
    p->n_chunks = n_chunks;
    atomic_store(&p->finished, 0);
    atomic_store(&p->next, 0);
    atomic_fetch_add(&p->generation, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);

    tl_in_parallel = true;
    run_chunks(p);
    tl_in_parallel = false;
    for (int i = 0; atomic_load(&p->finished) < n_chunks && i < SPIN_ITERS; i++) sched_yield();
    if (atomic_load(&p->finished) < n_chunks) {
        pthread_mutex_lock(&p->mu);
        while (atomic_load(&p->finished) < n_chunks) pthread_cond_wait(&p->done, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
}
