/* Training throughput of one artifacts folder in otter, for bench/bench_training.sh (which runs PyTorch
 * and ONNX Runtime's web training build on the same model, batch and thread count, and prints ratios).
 *
 *   bench_training DIR THREADS STEPS BATCH D0 [D1 D2 ...]
 *
 * DIR holds training/eval/optimizer models and checkpoint (`otter artifacts`); the input of one sample has
 * dims D0 D1 ...; labels are int64 class indices in [0, 10). Synthetic data: 4 batches of uniform [0, 1)
 * inputs (token ids in [0, BENCH_VOCAB) when the model's input is int64) and random labels, cycled. Each step is a
 * train step (forward + backward), an optimizer step and a lazy gradient reset, as `otter train` does. 3 warm-up steps,
 * then STEPS timed steps. Prints one JSON line: samples/s from the median step, median/min/mean ms per step, final
 * loss, peak RSS. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "otter/otter.h"
#include "bench_util.h"

#define NBATCH 4
#define WARMUP 3

static int fail(const char *what) {
    fprintf(stderr, "bench_training: %s: %s\n", what, otter_last_error());
    return 1;
}

/* xorshift64*: reproducible synthetic data */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng_next(void) {
    rng_state ^= rng_state >> 12, rng_state ^= rng_state << 25, rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ull;
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: bench_training DIR THREADS STEPS BATCH D0 [D1 ...]\n");
        return 2;
    }
    const char *dir = argv[1];
    int threads = atoi(argv[2]), steps = atoi(argv[3]);
    int64_t batch = atoll(argv[4]);
    int rank = argc - 5 + 1;
    if (steps < 1 || batch < 1 || rank > OTTER_MAX_RANK) return 2;
    int64_t dims[OTTER_MAX_RANK];
    dims[0] = batch;
    for (int i = 1; i < rank; i++) dims[i] = atoll(argv[4 + i]);

    otter_training_session *s = NULL;
    if (otter_training_session_create_from_dir(&s, dir, NULL, NULL, &(otter_training_options){.n_threads = threads}) !=
        OTTER_OK)
        return fail(dir);

    const otter_type *input_type = otter_training_input_type(s, OTTER_TRAINING_GRAPH, 0);
    bool tokens = input_type && input_type->elem_type == OTTER_DTYPE_INT64;
    otter_tensor *x[NBATCH] = {0}, *y[NBATCH] = {0};
    for (int k = 0; k < NBATCH; k++) {
        if (otter_tensor_create(&x[k], NULL, tokens ? OTTER_DTYPE_INT64 : OTTER_DTYPE_FLOAT, rank, dims) != OTTER_OK ||
            otter_tensor_create(&y[k], NULL, OTTER_DTYPE_INT64, 1, dims) != OTTER_OK)
            return fail("tensor");
        for (int64_t i = 0; i < otter_tensor_numel(x[k]); i++) {
            if (tokens)
                ((int64_t *)x[k]->data)[i] = (int64_t)(rng_next() >> 33) % BENCH_VOCAB;
            else
                ((float *)x[k]->data)[i] = (float)(rng_next() >> 40) / (float)(1 << 24);
        }
        int64_t *yv = y[k]->data;
        for (int64_t i = 0; i < batch; i++) yv[i] = (int64_t)(rng_next() >> 33) % 10;
    }

    double *ms = malloc(sizeof(double) * (size_t)steps);
    otter_tensor *loss = NULL;
    if (!ms) return 1;
    for (int k = 0; k < WARMUP + steps; k++) {
        const otter_tensor *in[2] = {x[k % NBATCH], y[k % NBATCH]};
        double t0 = now_ms();
        if (otter_training_train_step(s, 2, NULL, in, 1, &loss) != OTTER_OK) return fail("train step");
        if (otter_training_optimizer_step(s) != OTTER_OK) return fail("optimizer step");
        if (otter_training_lazy_reset_grad(s) != OTTER_OK) return fail("lazy reset");
        double t1 = now_ms();
        if (k >= WARMUP) ms[k - WARMUP] = t1 - t0;
    }
    double sum = 0;
    for (int k = 0; k < steps; k++) sum += ms[k];
    qsort(ms, (size_t)steps, sizeof *ms, cmp_double);
    double med = ms[steps / 2];
    printf("{\"samples_per_s\": %.2f, \"median_ms\": %.4f, \"min_ms\": %.4f, \"mean_ms\": %.4f, \"loss\": %.6f, "
           "\"params\": %zu, \"peak_rss_kb\": %ld}\n",
           1e3 * (double)batch / med, med, ms[0], sum / steps, ((float *)loss->data)[0],
           otter_training_params_size(s, true), bench_peak_rss_kb());
    otter_tensor_free(loss);
    for (int k = 0; k < NBATCH; k++) otter_tensor_free(x[k]), otter_tensor_free(y[k]);
    free(ms);
    otter_training_session_free(s);
    return 0;
}
