/* Build the MNIST DNN (784-200-200-10: Gemm, Relu, Gemm, Relu, Gemm; opset 14) through otter's C
 * editing API and save it.
 *
 *   mnist_dnn [OUT.onnx] [--seed N]
 *
 * Input `input` float32[batch,784] (symbolic batch), output `output` float32[batch,10].
 * Initializers fcK.weight [out,in] and fcK.bias [out] are drawn like PyTorch's default
 * nn.Linear init: uniform(-1/sqrt(in), 1/sqrt(in)) for both, from a seeded PRNG (splitmix64), so
 * the same seed gives the same model bytes. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "otter/otter.h"

static uint64_t rng_state;

static uint64_t splitmix64(void) {
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [-bound, bound). */
static float uniform(float bound) {
    double u = (double)(splitmix64() >> 11) * (1.0 / 9007199254740992.0); /* [0, 1) with 53 bits */
    return (float)((2.0 * u - 1.0) * bound);
}

static int fail(const char *what) {
    fprintf(stderr, "mnist_dnn: %s: %s\n", what, otter_last_error());
    return 1;
}

/* A Linear layer as Gemm(x, W, b) with transB=1, its weight and bias as initializers. */
static otter_status add_linear(otter_graph *g, const char *name, const char *x, const char *y, int64_t in,
                               int64_t out) {
    char wname[64], bname[64];
    snprintf(wname, sizeof wname, "%s.weight", name);
    snprintf(bname, sizeof bname, "%s.bias", name);
    float bound = 1.0f / sqrtf((float)in);
    int64_t wdims[2] = {out, in}, bdims[1] = {out};
    otter_tensor *w = NULL, *b = NULL;
    otter_status s = otter_tensor_create(&w, wname, OTTER_DTYPE_FLOAT, 2, wdims);
    if (s != OTTER_OK) return s;
    for (int64_t i = 0; i < out * in; i++) ((float *)w->data)[i] = uniform(bound);
    /* The graph owns what it is given, even when adding fails. */
    if ((s = otter_graph_add_initializer(g, w)) != OTTER_OK) return s;
    if ((s = otter_tensor_create(&b, bname, OTTER_DTYPE_FLOAT, 1, bdims)) != OTTER_OK) return s;
    for (int64_t i = 0; i < out; i++) ((float *)b->data)[i] = uniform(bound);
    if ((s = otter_graph_add_initializer(g, b)) != OTTER_OK) return s;
    const char *ins[3] = {x, wname, bname};
    otter_node *n = NULL;
    if ((s = otter_node_create(&n, "Gemm", name, 3, ins, 1, &y)) != OTTER_OK) return s;
    if ((s = otter_node_set_attr_int(n, "transB", 1)) != OTTER_OK) {
        otter_node_free(n);
        return s;
    }
    return otter_graph_add_node(g, n);
}

static otter_status add_relu(otter_graph *g, const char *name, const char *x, const char *y) {
    otter_node *n = NULL;
    otter_status s = otter_node_create(&n, "Relu", name, 1, &x, 1, &y);
    if (s != OTTER_OK) return s;
    return otter_graph_add_node(g, n);
}

int main(int argc, char **argv) {
    const char *path = "mnist_dnn.onnx";
    uint64_t seed = 42;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
            char *end = NULL;
            seed = strtoull(argv[++i], &end, 10);
            if (*end) {
                fprintf(stderr, "mnist_dnn: --seed '%s' is not a number\n", argv[i]);
                return 2;
            }
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            printf("usage: mnist_dnn [OUT.onnx] [--seed N]\n");
            return 0;
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "mnist_dnn: unknown option '%s'\nusage: mnist_dnn [OUT.onnx] [--seed N]\n", argv[i]);
            return 2;
        } else {
            path = argv[i];
        }
    }
    rng_state = seed;

    otter_model *m = NULL;
    if (otter_model_create(&m, "mnist_dnn", 14) != OTTER_OK) return fail("creating the model");
    otter_graph *g = m->graph;
    const int64_t in_dims[2] = {-1, 784}, out_dims[2] = {-1, 10};
    const char *batch[2] = {"batch", NULL};
    otter_status s = otter_graph_add_input(g, "input", OTTER_DTYPE_FLOAT, 2, in_dims, batch);
    if (s == OTTER_OK) s = add_linear(g, "fc1", "input", "fc1_out", 784, 200);
    if (s == OTTER_OK) s = add_relu(g, "relu1", "fc1_out", "relu1_out");
    if (s == OTTER_OK) s = add_linear(g, "fc2", "relu1_out", "fc2_out", 200, 200);
    if (s == OTTER_OK) s = add_relu(g, "relu2", "fc2_out", "relu2_out");
    if (s == OTTER_OK) s = add_linear(g, "fc3", "relu2_out", "output", 200, 10);
    if (s == OTTER_OK) s = otter_graph_add_output(g, "output", OTTER_DTYPE_FLOAT, 2, out_dims, batch);
    if (s != OTTER_OK) {
        otter_model_free(m);
        return fail("building the graph");
    }
    if (otter_model_save(m, path, NULL) != OTTER_OK) {
        otter_model_free(m);
        return fail("saving");
    }
    int64_t params = 0;
    for (size_t i = 0; i < g->n_initializers; i++) params += otter_tensor_numel(g->initializers[i]);
    printf("wrote %s: %zu nodes, %zu initializers, %" PRId64 " parameters (seed %" PRIu64 ")\n", path, g->n_nodes,
           g->n_initializers, params, seed);
    otter_model_free(m);
    return 0;
}
