/* The session's thread pool (runtime/threadpool.c): every index of a range runs exactly once, whatever
 * the thread count, range and grain, over many jobs back to back (chunks taken by their own thread
 * first, then stolen from the end); a range nested inside a running one runs inline; and a worker's
 * first chunk of a job is the first of its own contiguous share. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/threadpool.h"
#include "testutil.h"

typedef struct count_job {
    atomic_int *hits;
    ot_pool *pool;
    bool nest; /* each range runs a nested job over [0, 3) of nested_hits */
    atomic_int nested_hits[3];
} count_job;

static void count_range(void *arg, int64_t b, int64_t e) {
    count_job *j = arg;
    for (int64_t i = b; i < e; i++) atomic_fetch_add(&j->hits[i], 1);
    if (j->nest) {
        count_job inner = {.hits = j->nested_hits};
        ot_pool_run(j->pool, 3, 1, count_range, &inner);
    }
}

/* The caller is held in its first chunk until a worker has run one, so the worker's first chunk is
 * the one it takes from a full range: the first of its own share under the pool's policy. */
typedef struct order_job {
    pthread_t caller;
    atomic_int worker_runs, timed_out;
    atomic_llong worker_first;
} order_job;

static void order_range(void *arg, int64_t b, int64_t e) {
    order_job *j = arg;
    (void)e;
    if (pthread_equal(pthread_self(), j->caller)) {
        const time_t give_up = time(NULL) + 10;
        while (b == 0 && atomic_load(&j->worker_runs) == 0)
            if (time(NULL) > give_up) {
                atomic_store(&j->timed_out, 1);
                break;
            }
        return;
    }
    if (atomic_fetch_add(&j->worker_runs, 1) == 0) atomic_store(&j->worker_first, b);
}

int main(void) {
    const int64_t sizes[] = {1, 2, 3, 7, 8, 9, 31, 32, 33, 100, 1000};
    const int64_t grains[] = {1, 2, 5, 64};
    for (int threads = 1; threads <= 5; threads++) {
        ot_pool *pool;
        CHECK_OK(ot_pool_create(&pool, threads));
        int bad = 0;
        for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++)
            for (size_t gi = 0; gi < sizeof grains / sizeof *grains; gi++)
                for (int rep = 0; rep < 20; rep++) {
                    const int64_t n = sizes[si];
                    atomic_int *hits = calloc((size_t)n, sizeof *hits);
                    count_job j = {.hits = hits, .pool = pool, .nest = rep == 0};
                    for (int k = 0; k < 3; k++) atomic_init(&j.nested_hits[k], 0);
                    ot_pool_run(pool, n, grains[gi], count_range, &j);
                    for (int64_t i = 0; i < n; i++) bad += atomic_load(&hits[i]) != 1;
                    /* the nested jobs ran inline, once per range of the outer one */
                    if (j.nest && atomic_load(&j.nested_hits[0]) < 1) bad++;
                    for (int k = 1; j.nest && k < 3; k++)
                        bad += atomic_load(&j.nested_hits[k]) != atomic_load(&j.nested_hits[0]);
                    free(hits);
                }
        printf("%d threads: every index once over %zu ranges x %zu grains x 20 jobs: %s\n", threads,
               sizeof sizes / sizeof *sizes, sizeof grains / sizeof *grains, bad ? "NO" : "yes");
        CHECK(bad == 0);
        ot_pool_free(pool);
    }

    /* 2 threads, 8 chunks of 1: the caller's share is chunks 0-3, the worker's 4-7 */
    ot_pool *pool;
    CHECK_OK(ot_pool_create(&pool, 2));
    int own_first = 0, timeouts = 0;
    const int jobs = 20;
    for (int rep = 0; rep < jobs; rep++) {
        order_job j = {.caller = pthread_self()};
        atomic_init(&j.worker_runs, 0), atomic_init(&j.timed_out, 0), atomic_init(&j.worker_first, -1);
        ot_pool_run(pool, 8, 1, order_range, &j);
        own_first += atomic_load(&j.worker_first) == 4;
        timeouts += atomic_load(&j.timed_out);
    }
    printf("2 threads, 8 chunks, %d jobs: the worker's first chunk was the first of its share in %d (%d timeouts)\n",
           jobs, own_first, timeouts);
    CHECK(own_first == jobs && timeouts == 0);
    ot_pool_free(pool);
    return tu_finish("test_threadpool");
}
