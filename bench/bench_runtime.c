/* Inference latency of one model in otter, for bench/bench_runtime.sh (which runs ONNX Runtime on
 * the same file, batch and thread count, and prints the ratio).
 *
 *   bench_runtime --make DIR                      write the benchmark models into DIR
 *   bench_runtime MODEL BATCH THREADS [RUNS]      one JSON line: median/min/p90 ms, arena bytes, peak RSS
 *
 * The input's shape is the model's, with its symbolic dimensions set to BATCH; a float input holds values in
 * [0, 1), an int64 input token ids in [0, BENCH_VOCAB) (bench_util.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "otter/otter.h"
#include "bench_util.h"

static int fail(const char *what) {
    fprintf(stderr, "bench_runtime: %s: %s\n", what, otter_last_error());
    return 1;
}

/* A ResNet-style stack: stem conv, then blocks of conv-relu-conv + skip, relu; global average pool, linear. */
static otter_status resnet_stack(otter_model **out) {
    otter_model *m;
    otter_status s = otter_model_create(&m, "resnet_stack", 14);
    if (s != OTTER_OK) return s;
    otter_builder *b;
    if ((s = otter_builder_create(&b, m, 1)) != OTTER_OK) {
        otter_model_free(m);
        return s;
    }
    int64_t dims[4] = {-1, 3, 32, 32};
    const char *x = otter_block_input(b, "input", OTTER_DTYPE_FLOAT, 4, dims);
    x = otter_block_relu(b, otter_block_conv2d(b, "stem", x, 3, 64, 3, 1, 1));
    for (int i = 0; i < 4; i++) {
        char n1[16], n2[16];
        snprintf(n1, sizeof n1, "block%d.conv1", i);
        snprintf(n2, sizeof n2, "block%d.conv2", i);
        const char *h = otter_block_relu(b, otter_block_conv2d(b, n1, x, 64, 64, 3, 1, 1));
        h = otter_block_conv2d(b, n2, h, 64, 64, 3, 1, 1);
        x = otter_block_relu(b, otter_block_add(b, h, x));
    }
    const int64_t axes[2] = {2, 3};
    x = otter_block_reduce_mean(b, x, 2, axes, 0);
    otter_block_output(b, otter_block_linear(b, "fc", x, 64, 10), "output");
    if ((s = otter_builder_finish(b)) != OTTER_OK) {
        otter_model_free(m);
        return s;
    }
    *out = m;
    return OTTER_OK;
}

static int make_models(const char *dir) {
    struct {
        const char *file;
        otter_status (*make)(otter_model **, uint64_t);
    } zoo[] = {{"mnist_dnn.onnx", otter_model_mnist_dnn}, {"cifar10_cnn.onnx", otter_model_cifar10_cnn}};
    char path[4096];
    for (size_t i = 0; i < 2; i++) {
        otter_model *m;
        if (zoo[i].make(&m, 1) != OTTER_OK) return fail(zoo[i].file);
        snprintf(path, sizeof path, "%s/%s", dir, zoo[i].file);
        otter_status s = otter_model_save(m, path, NULL);
        otter_model_free(m);
        if (s != OTTER_OK) return fail(path);
    }
    otter_model *m;
    if (resnet_stack(&m) != OTTER_OK) return fail("resnet_stack");
    snprintf(path, sizeof path, "%s/resnet_stack.onnx", dir);
    otter_status s = otter_model_save(m, path, NULL);
    otter_model_free(m);
    return s == OTTER_OK ? 0 : fail(path);
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--make") == 0) return make_models(argv[2]);
    if (argc < 4) {
        fprintf(stderr, "usage: bench_runtime --make DIR | bench_runtime MODEL BATCH THREADS [RUNS [OPT_LEVEL]]\n");
        return 2;
    }
    int batch = atoi(argv[2]), threads = atoi(argv[3]), runs = argc > 4 ? atoi(argv[4]) : 100;
    /* default level 2 (fusions, Winograd F(2x2, 3x3): as exact as direct), as ORT runs with
     * graphOptimizationLevel "all"; 3: Winograd F(4x4, 3x3) */
    int level = argc > 5 ? atoi(argv[5]) : 2;
    otter_session_options o = {.n_threads = threads, .opt_level = level, .opt_level_set = true};
    otter_session *s;
    if (otter_session_create_from_file(&s, argv[1], &o) != OTTER_OK) return fail(argv[1]);
    const otter_type *t = otter_session_input_type(s, 0);
    int64_t dims[OTTER_MAX_RANK];
    for (int i = 0; i < t->rank; i++) dims[i] = t->dims[i].value < 0 ? batch : t->dims[i].value;
    otter_tensor *x, *y = NULL;
    if (otter_tensor_create(&x, "input", t->elem_type, t->rank, dims) != OTTER_OK) return fail("input");
    if (bench_fill_input(x) != 0) return fail("input: only float32 and int64 inputs are benchmarked");
    const otter_tensor *in[1] = {x};
    for (int i = 0; i < 5; i++)
        if (otter_session_run(s, 1, NULL, in, 1, NULL, &y) != OTTER_OK) return fail("run");
    double *ms = calloc((size_t)runs, sizeof *ms);
    for (int i = 0; i < runs; i++) {
        double t0 = now_ms();
        otter_session_run(s, 1, NULL, in, 1, NULL, &y);
        ms[i] = now_ms() - t0;
    }
    qsort(ms, (size_t)runs, sizeof *ms, cmp_double);
    otter_memory_stats st;
    otter_session_memory_stats(s, &st);
    printf("{\"median_ms\": %.4f, \"min_ms\": %.4f, \"p90_ms\": %.4f, \"arena_bytes\": %zu, \"peak_rss_kb\": %ld}\n",
           ms[runs / 2], ms[0], ms[runs * 9 / 10], st.arena_bytes, bench_peak_rss_kb());
    free(ms);
    otter_tensor_free(x);
    otter_tensor_free(y);
    otter_session_free(s);
    return 0;
}
