/* Attention's gradient: com.otter AttentionGrad (one fused kernel, probabilities recomputed) against the
 * decomposition an exporter without Attention-23 writes (MatMul, Mul by the scale, Softmax, MatMul),
 * differentiated by otter's MatMul / Softmax rules. For bench/bench_attention_grad.sh, which runs both
 * variants as separate processes and prints the ratio.
 *
 *   bench_attention_grad fused|decomposed THREADS STEPS B H L D
 *
 * Q, K, V are [B, H, L, D]; loss = 0.5 * sum(Y^2); one step is one run of the gradient model (forward
 * + backward) returning dQ, dK, dV. 3 warm-up steps, then STEPS timed steps. Prints one JSON line:
 * median / min ms per step and peak RSS. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "otter/otter.h"
#include "bench_util.h"

#define WARMUP 3

static int fail(const char *what) {
    fprintf(stderr, "bench_attention_grad: %s: %s\n", what, otter_last_error());
    return 1;
}

static otter_status add_node(otter_graph *g, const char *op, const char *name, size_t n_in, const char **in,
                             const char *out, otter_node **made) {
    otter_node *n;
    otter_status s = otter_node_create(&n, op, name, n_in, in, 1, &out);
    if (s == OTTER_OK) s = otter_graph_add_node(g, n);
    if (made) *made = s == OTTER_OK ? n : NULL;
    return s;
}

/* The forward graph Y = attention(Q, K, V), loss = 0.5 * sum(Y^2), with its gradients. */
static otter_status build(otter_model **out, bool fused, const int64_t *dims) {
    otter_model *m;
    otter_status s = otter_model_create(&m, "attention_grad", 23);
    if (s != OTTER_OK) return s;
    otter_graph *g = m->graph;
    const char *qkv[3] = {"q", "k", "v"};
    for (int i = 0; i < 3 && s == OTTER_OK; i++) s = otter_graph_add_input(g, qkv[i], OTTER_DTYPE_FLOAT, 4, dims, NULL);
    otter_node *n = NULL;
    if (fused) {
        if (s == OTTER_OK) s = add_node(g, "Attention", "attention", 3, qkv, "y", NULL);
    } else {
        otter_tensor *scale = NULL;
        float sc = 1.0f / sqrtf((float)dims[3]);
        int64_t perm[4] = {0, 1, 3, 2};
        if (s == OTTER_OK) s = otter_tensor_from_data(&scale, "scale", OTTER_DTYPE_FLOAT, 0, NULL, &sc);
        if (s == OTTER_OK) s = otter_graph_add_initializer(g, scale);
        if (s == OTTER_OK) s = add_node(g, "Transpose", "k_t", 1, (const char *[]){"k"}, "kt", &n);
        if (s == OTTER_OK) s = otter_node_set_attr_ints(n, "perm", 4, perm);
        if (s == OTTER_OK) s = add_node(g, "MatMul", "qk", 2, (const char *[]){"q", "kt"}, "qk", NULL);
        if (s == OTTER_OK) s = add_node(g, "Mul", "scaled", 2, (const char *[]){"qk", "scale"}, "scores", NULL);
        if (s == OTTER_OK) s = add_node(g, "Softmax", "softmax", 1, (const char *[]){"scores"}, "p", &n);
        if (s == OTTER_OK) s = otter_node_set_attr_int(n, "axis", -1);
        if (s == OTTER_OK) s = add_node(g, "MatMul", "pv", 2, (const char *[]){"p", "v"}, "y", NULL);
    }
    float h = 0.5f;
    otter_tensor *half = NULL;
    if (s == OTTER_OK) s = add_node(g, "Mul", "square", 2, (const char *[]){"y", "y"}, "y2", NULL);
    if (s == OTTER_OK) s = add_node(g, "ReduceSum", "sum", 1, (const char *[]){"y2"}, "total", &n);
    if (s == OTTER_OK) s = otter_node_set_attr_int(n, "keepdims", 0);
    if (s == OTTER_OK) s = otter_tensor_from_data(&half, "half", OTTER_DTYPE_FLOAT, 0, NULL, &h);
    if (s == OTTER_OK) s = otter_graph_add_initializer(g, half);
    if (s == OTTER_OK) s = add_node(g, "Mul", "loss", 2, (const char *[]){"total", "half"}, "loss", NULL);
    if (s == OTTER_OK) s = otter_graph_add_output(g, "loss", OTTER_DTYPE_FLOAT, 0, NULL, NULL);
    otter_grad_options go = {.loss = "loss", .n_wrt = 3, .wrt = qkv};
    if (s == OTTER_OK) s = otter_model_add_gradients(m, &go);
    const char *grads[3] = {"q_grad", "k_grad", "v_grad"};
    for (int i = 0; i < 3 && s == OTTER_OK; i++)
        s = otter_graph_add_output(g = m->graph, grads[i], OTTER_DTYPE_FLOAT, 4, dims, NULL);
    if (s != OTTER_OK) {
        otter_model_free(m);
        return s;
    }
    *out = m;
    return OTTER_OK;
}

int main(int argc, char **argv) {
    if (argc != 8 || (strcmp(argv[1], "fused") != 0 && strcmp(argv[1], "decomposed") != 0)) {
        fprintf(stderr, "usage: bench_attention_grad fused|decomposed THREADS STEPS B H L D\n");
        return 2;
    }
    bool fused = strcmp(argv[1], "fused") == 0;
    int threads = atoi(argv[2]), steps = atoi(argv[3]);
    int64_t dims[4] = {atoll(argv[4]), atoll(argv[5]), atoll(argv[6]), atoll(argv[7])};
    if (steps < 1 || dims[0] < 1 || dims[1] < 1 || dims[2] < 1 || dims[3] < 1) return 2;
    otter_model *m;
    if (build(&m, fused, dims) != OTTER_OK) return fail("building the model");
    otter_session *s;
    if (otter_session_create(&s, m, &(otter_session_options){.n_threads = threads}) != OTTER_OK) return fail("session");
    otter_tensor *in[3];
    uint64_t r = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < 3; i++) {
        if (otter_tensor_create(&in[i], NULL, OTTER_DTYPE_FLOAT, 4, dims) != OTTER_OK) return fail("tensor");
        float *v = in[i]->data;
        for (int64_t e = 0; e < otter_tensor_numel(in[i]); e++) {
            r ^= r >> 12, r ^= r << 25, r ^= r >> 27;
            v[e] = (float)((r * 2685821657736338717ull) >> 40) / (float)(1 << 23) - 1.0f;
        }
    }
    const char *names[3] = {"q", "k", "v"}, *outs[3] = {"q_grad", "k_grad", "v_grad"};
    double *ms = malloc(sizeof(double) * (size_t)steps);
    if (!ms) return 1;
    for (int k = 0; k < WARMUP + steps; k++) {
        otter_tensor *g[3] = {NULL, NULL, NULL};
        double t0 = now_ms();
        if (otter_session_run(s, 3, names, (const otter_tensor *const *)in, 3, outs, g) != OTTER_OK) return fail("run");
        double t1 = now_ms();
        if (k >= WARMUP) ms[k - WARMUP] = t1 - t0;
        for (int i = 0; i < 3; i++) otter_tensor_free(g[i]);
    }
    qsort(ms, (size_t)steps, sizeof *ms, cmp_double);
    printf("{\"variant\": \"%s\", \"median_ms\": %.4f, \"min_ms\": %.4f, \"peak_rss_kb\": %ld}\n", argv[1],
           ms[steps / 2], ms[0], bench_peak_rss_kb());
    free(ms);
    for (int i = 0; i < 3; i++) otter_tensor_free(in[i]);
    otter_session_free(s);
    otter_model_free(m);
    return 0;
}
