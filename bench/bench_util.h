/* Timing helpers shared by the benchmark programs. */
#ifndef OTTER_BENCH_UTIL_H
#define OTTER_BENCH_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "otter/tensor.h"

/* Token ids of the benchmarks' int64 inputs are below this: every text model in bench/ (and
 * tools/export_torch_models.py's) has a vocabulary of at least 100. */
#define BENCH_VOCAB 97

static inline double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* Peak resident set of this process in KiB: /proc/self/status's VmHWM, which starts afresh at exec. getrusage's
 * ru_maxrss is the fallback; it keeps the high-water mark of the process that forked us (a driver that has
 * imported PyTorch would make every benchmark look 300 MB bigger). */
static inline long bench_peak_rss_kb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && kb < 0 && fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0) kb = strtol(line + 6, NULL, 10);
    if (f) fclose(f);
    if (kb < 0) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        kb = ru.ru_maxrss;
    }
    return kb;
}

/* qsort order for doubles (latencies): ascending. */
static inline int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Deterministic input data: float32 values in [0, 1), int64 token ids in [0, BENCH_VOCAB). Returns -1 for
 * other element types. */
static inline int bench_fill_input(otter_tensor *x) {
    int64_t n = otter_tensor_numel(x);
    if (x->dtype == OTTER_DTYPE_FLOAT) {
        float *d = x->data;
        for (int64_t i = 0; i < n; i++) d[i] = (float)((i * 7919) % 1000) / 1000.0f;
        return 0;
    }
    if (x->dtype == OTTER_DTYPE_INT64) {
        int64_t *d = x->data;
        for (int64_t i = 0; i < n; i++) d[i] = (i * 7919) % BENCH_VOCAB;
        return 0;
    }
    return -1;
}

#endif
