/* Time otter_model_load on a model file: best of N runs, printed as seconds and MB/s.
 *   bench_load MODEL [RUNS]
 * Output (one line, parsed by bench_load.sh): "otter_model_load: <bytes> bytes, best <s> s, <MB/s> MB/s" */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>

#include "otter/otter.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL [RUNS]\n", argv[0]);
        return 2;
    }
    int runs = argc > 2 ? atoi(argv[2]) : 3;
    struct stat st;
    if (stat(argv[1], &st) != 0) {
        perror(argv[1]);
        return 1;
    }
    double best = 1e30;
    size_t n_init = 0, bytes = 0;
    for (int r = 0; r < runs; r++) {
        otter_model *m = NULL;
        double t0 = now();
        otter_status s = otter_model_load(&m, argv[1]);
        double dt = now() - t0;
        if (s != OTTER_OK) {
            fprintf(stderr, "bench_load: %s\n", otter_last_error());
            return 1;
        }
        n_init = m->graph->n_initializers;
        bytes = 0;
        for (size_t i = 0; i < n_init; i++) bytes += otter_tensor_nbytes(m->graph->initializers[i]);
        otter_model_free(m);
        if (dt < best) best = dt;
    }
    printf("otter_model_load: %lld bytes, best %.4f s, %.1f MB/s (%zu initializers, %zu tensor bytes, best of %d)\n",
           (long long)st.st_size, best, (double)st.st_size / best / 1e6, n_init, bytes, runs);
    return 0;
}
