/* Timing helpers shared by the benchmark programs. */
#ifndef OTTER_BENCH_UTIL_H
#define OTTER_BENCH_UTIL_H

#include <time.h>

static inline double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* qsort order for doubles (latencies): ascending. */
static inline int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#endif
