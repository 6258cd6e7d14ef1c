/* The session's thread pool (internal). */
#ifndef OTTER_RUNTIME_THREADPOOL_H
#define OTTER_RUNTIME_THREADPOOL_H

#include <stdint.h>

#include "otter/status.h"
#include "runtime/op.h"

typedef struct ot_pool ot_pool;

/* n_threads counts the caller: n_threads - 1 workers are started (none for 1). */
otter_status ot_pool_create(ot_pool **out, int n_threads);
void ot_pool_free(ot_pool *p);
int ot_pool_threads(const ot_pool *p);
/* fn over [0, n) in chunks of at least grain items, on the workers and the caller; returns when
 * every chunk is done. Inline when p is NULL, has no workers, n <= grain, or when called from
 * inside a range already running on the pool. Not for concurrent callers on one pool. */
void ot_pool_run(ot_pool *p, int64_t n, int64_t grain, ot_range_fn fn, void *arg);

#endif
