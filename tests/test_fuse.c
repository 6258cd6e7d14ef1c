/* Graph fusions (runtime/fuse.c, session opt_level 2): each model runs at level 1 (unfused) and
 * level 2, at 1 and 2 threads; the outputs must agree and the fused graph must hold the expected
 * number of com.otter nodes and of nodes in all. Error: |a - b| / (1e-4 + |a|), below 1e-6 where
 * fusion only reorders additions, below 1e-3 (the conformance rtol) for BatchNormalization folding
 * (rounded folded weights). Cases: Conv + BN + Relu; Conv without bias + per-channel Add + residual
 * Add + Relu (a ResNet block); Conv + Add of a residual that dies there (the output overwrites it),
 * for each convolution path; Conv + each fused activation (Clip with Constant and initializer bounds,
 * LeakyRelu, HardSigmoid, HardSwish, Sigmoid, Swish as Sigmoid + Mul) on each path, exact but for
 * Sigmoid and Swish (1e-6) and Winograd (5e-2: its rounding, relative to outputs near 0), and a Swish
 * whose Sigmoid is also read elsewhere (no fusion); Conv + Add of a broadcast value; Gemm + Relu;
 * MatMul + Add + Relu (operands also through Identity; W^T made each run and a bias parameter, as in
 * training); MatMul + Add + Gelu (erf, tanh), Gemm + HardSwish, MatMul + Sigmoid (the product's
 * epilogue);
 * chains that must not fuse (an intermediate that is also a graph output or read twice, BN when
 * initializers stay live). MaxPool's standard-op gradient (ConstantOfShape + Reshape +
 * ScatterElements + Reshape, as autodiff writes it) must give the same bits as one com.otter
 * MaxPoolGrad, with disjoint and with overlapping windows, also with the ReluGrad after it, and must
 * not fuse when an intermediate is a graph output or the fill is not zero. Clip's standard-op gradient
 * (Less, Greater, Or, Where) must give the same bits as one com.otter ClipGrad. A channel Concat of
 * convolutions of one input (1x1, 3x3, 5x3 windows) becomes one FusedConv with kernel_parts on AVX-512,
 * whose shapes infer. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "otter/infer.h"
#include "otter/otter.h"
#include "runtime/fuse.h"
#include "runtime/ops/channel_blocks.h"
#include "runtime/ops/conv_direct.h"
#include "runtime/ops/fused_act.h"
#include "testutil.h"

static double worst;
static size_t inplace; /* outputs planned over a dying input in compare's last level-2 session */

static float frand(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static void add_init(otter_model *m, const char *name, int rank, const int64_t *dims, unsigned seed, float lo,
                     float span) {
    otter_tensor *t;
    CHECK_OK(otter_tensor_create(&t, name, OTTER_DTYPE_FLOAT, rank, dims));
    float *d = t->data;
    for (int64_t i = 0; i < otter_tensor_numel(t); i++) d[i] = lo + span * (frand(&seed) + 1.0f) * 0.5f;
    CHECK_OK(otter_graph_add_initializer(m->graph, t));
}

static void node(otter_model *m, const char *op, size_t ni, const char *const *in, const char *out) {
    otter_node *n;
    const char *outs[1] = {out};
    CHECK_OK(otter_node_create(&n, op, out, ni, in, 1, outs));
    if (!strcmp(op, "Conv")) {
        const int64_t pads[4] = {1, 1, 1, 1};
        CHECK_OK(otter_node_set_attr_ints(n, "pads", 4, pads));
    }
    CHECK_OK(otter_graph_add_node(m->graph, n));
}

/* Run m at opt level 1 and 2 and compare; check the fused graph's com.otter and total node counts. */
static void compare(const char *what, const otter_model *m, int rank, const int64_t *xdims, size_t want_fused,
                    size_t want_nodes, bool no_fold, double tol) {
    otter_tensor *x;
    CHECK_OK(otter_tensor_create(&x, "x", OTTER_DTYPE_FLOAT, rank, xdims));
    unsigned seed = 7;
    float *xd = x->data;
    for (int64_t i = 0; i < otter_tensor_numel(x); i++) xd[i] = frand(&seed);
    for (int threads = 1; threads <= 2; threads++) {
        otter_tensor *y[2] = {NULL, NULL};
        size_t fused = 0, nodes = 0;
        for (int lvl = 1; lvl <= 2; lvl++) {
            otter_session *s = NULL;
            otter_session_options o = {
                .n_threads = threads, .opt_level = lvl, .opt_level_set = true, .no_fold_initializers = no_fold};
            CHECK_OK(otter_session_create(&s, m, &o));
            if (!s) return;
            const otter_tensor *in[1] = {x};
            /* twice: the first run sizes the intermediates, the second runs on the arena plan */
            CHECK_OK(otter_session_run(s, 1, NULL, in, 1, NULL, &y[lvl - 1]));
            otter_tensor_free(y[lvl - 1]);
            y[lvl - 1] = NULL;
            CHECK_OK(otter_session_run(s, 1, NULL, in, 1, NULL, &y[lvl - 1]));
            if (lvl == 2) {
                otter_memory_stats st;
                CHECK_OK(otter_session_memory_stats(s, &st));
                inplace = st.n_inplace;
                const otter_graph *g = otter_session_model(s)->graph;
                nodes = g->n_nodes;
                for (size_t k = 0; k < g->n_nodes; k++)
                    fused += g->nodes[k]->domain && !strcmp(g->nodes[k]->domain, "com.otter");
            }
            otter_session_free(s);
        }
        double err = 0;
        bool same_shape = y[0] && y[1] && y[0]->rank == y[1]->rank &&
                          !memcmp(y[0]->dims, y[1]->dims, sizeof(int64_t) * (size_t)y[0]->rank);
        CHECK(same_shape);
        if (same_shape) {
            const float *a = y[0]->data, *b = y[1]->data;
            for (int64_t i = 0; i < otter_tensor_numel(y[0]); i++) {
                err = tu_worse(err, fabs((double)a[i] - b[i]) / (1e-4 + fabs((double)a[i])));
            }
            CHECK(err < tol);
        }
        worst = tu_worse(worst, err);
        CHECK(fused == want_fused);
        CHECK(nodes == want_nodes);
        printf("  %-44s threads %d: %zu fused node(s), %zu nodes, worst relative error %.2e\n", what, threads, fused,
               nodes, err);
        otter_tensor_free(y[0]);
        otter_tensor_free(y[1]);
    }
    otter_tensor_free(x);
}

static otter_model *new_model(int64_t opset, int rank, const int64_t *xd, const char *out) {
    otter_model *m;
    CHECK_OK(otter_model_create(&m, "fuse", opset));
    CHECK_OK(otter_graph_add_input(m->graph, "x", OTTER_DTYPE_FLOAT, rank, xd, NULL));
    CHECK_OK(otter_graph_add_output(m->graph, out, OTTER_DTYPE_FLOAT, -1, NULL, NULL));
    return m;
}

/* dX = Reshape(ScatterElements(Reshape(ConstantOfShape(S, fill), [-1]), Reshape(I, [-1]), Reshape(dY, [-1]),
 * reduction), S) for S = Shape(p), [Y, I] = MaxPool(p) (kernel k x k, stride st), dY = Neg(Y): the pattern
 * src/autodiff/rules_nn.c emits. The pooled p is x, or with conv_w (W's dims) Relu(Conv(x, W, B)) (pads
 * k / 2). The scattered value is also a graph output when `leak` is set. With relu ("x" for p, or "nx" =
 * Neg(x)), the output is com.microsoft ReluGrad(dX, relu). */
static otter_model *maxpool_grad_model(int64_t opset, const int64_t *xd, int64_t k, int64_t st, const char *reduction,
                                       float fill, bool leak, const char *relu, const int64_t *conv_w) {
    otter_model *m = new_model(opset, 4, xd, relu ? "g" : "r");
    if (leak) CHECK_OK(otter_graph_add_output(m->graph, "sc", OTTER_DTYPE_FLOAT, -1, NULL, NULL));
    otter_tensor *flat;
    const int64_t one = 1, minus_one = -1;
    CHECK_OK(otter_tensor_from_data(&flat, "flat", OTTER_DTYPE_INT64, 1, &one, &minus_one));
    CHECK_OK(otter_graph_add_initializer(m->graph, flat));
    otter_node *n;
    const char *p = conv_w ? "cr" : "x";
    if (conv_w) {
        add_init(m, "W", 4, conv_w, 11, -0.5f, 1.0f);
        add_init(m, "B", 1, conv_w, 12, -0.2f, 0.4f);
        int64_t pad = conv_w[2] / 2;
        CHECK_OK(otter_node_create(&n, "Conv", "conv", 3, (const char *[]){"x", "W", "B"}, 1, (const char *[]){"c"}));
        CHECK_OK(otter_node_set_attr_ints(n, "pads", 4, (const int64_t[]){pad, pad, pad, pad}));
        CHECK_OK(otter_graph_add_node(m->graph, n));
        node(m, "Relu", 1, (const char *[]){"c"}, "cr");
    }
    CHECK_OK(otter_node_create(&n, "MaxPool", "pool", 1, (const char *[]){p}, 2, (const char *[]){"y", "i"}));
    CHECK_OK(otter_node_set_attr_ints(n, "kernel_shape", 2, (const int64_t[]){k, k}));
    CHECK_OK(otter_node_set_attr_ints(n, "strides", 2, (const int64_t[]){st, st}));
    CHECK_OK(otter_graph_add_node(m->graph, n));
    node(m, "Neg", 1, (const char *[]){"y"}, "dy");
    node(m, "Shape", 1, (const char *[]){p}, "s");
    CHECK_OK(otter_node_create(&n, "ConstantOfShape", "zeros", 1, (const char *[]){"s"}, 1, (const char *[]){"z"}));
    otter_tensor *v;
    CHECK_OK(otter_tensor_from_data(&v, NULL, OTTER_DTYPE_FLOAT, 1, &one, &fill));
    CHECK_OK(otter_node_set_attr_tensor(n, "value", v));
    CHECK_OK(otter_graph_add_node(m->graph, n));
    node(m, "Reshape", 2, (const char *[]){"z", "flat"}, "zf");
    node(m, "Reshape", 2, (const char *[]){"i", "flat"}, "if");
    node(m, "Reshape", 2, (const char *[]){"dy", "flat"}, "dyf");
    CHECK_OK(otter_node_create(&n, "ScatterElements", "sc", 3, (const char *[]){"zf", "if", "dyf"}, 1,
                               (const char *[]){"sc"}));
    CHECK_OK(otter_node_set_attr_int(n, "axis", 0));
    if (reduction) CHECK_OK(otter_node_set_attr_string(n, "reduction", reduction));
    CHECK_OK(otter_graph_add_node(m->graph, n));
    node(m, "Reshape", 2, (const char *[]){"sc", "s"}, "r");
    if (relu) {
        node(m, "Neg", 1, (const char *[]){"x"}, "nx");
        CHECK_OK(otter_node_create(&n, "ReluGrad", "rg", 2, (const char *[]){"r", strcmp(relu, "x") ? relu : p}, 1,
                                   (const char *[]){"g"}));
        CHECK_OK(otter_node_set_domain(n, "com.microsoft"));
        CHECK_OK(otter_graph_add_node(m->graph, n));
        CHECK_OK(otter_model_set_opset(m, "com.microsoft", 1));
    }
    return m;
}

/* One Slice of x [10, 12] on axes 0 and 1 (steps omitted when both are 1). */
typedef struct slice_part {
    int64_t starts[2], ends[2], steps[2];
} slice_part;

/* r = Sum over the parts of SliceGrad(Neg(Slice(x)), Shape(x), the part's starts, ends, axes, steps), the
 * gradient of slices of one tensor that autodiff writes (q, k and v of one projection; with own_shapes,
 * each part reads a Shape node of its own, as there). */
static otter_model *slices_grad_model(size_t n_parts, const slice_part *parts, bool own_shapes) {
    const int64_t xd[2] = {10, 12}, two = 2, axes[2] = {0, 1};
    otter_model *m = new_model(13, 2, xd, "r");
    char names[4][16], dy[16], g[8][16], shape[8][16];
    const char *sum_in[8];
    otter_tensor *t;
    for (size_t i = 0; i < n_parts; i++) {
        const slice_part *p = &parts[i];
        snprintf(shape[i], sizeof shape[i], "shape%zu", own_shapes ? i : 0);
        if (own_shapes || i == 0) node(m, "Shape", 1, (const char *[]){"x"}, shape[i]);
        const int64_t *vals[4] = {p->starts, p->ends, axes, p->steps};
        const bool steps = p->steps[0] != 1 || p->steps[1] != 1;
        for (int v = 0; v < 4; v++) {
            snprintf(names[v], sizeof names[v], "%c%zu", "seap"[v], i);
            CHECK_OK(otter_tensor_from_data(&t, names[v], OTTER_DTYPE_INT64, 1, &two, vals[v]));
            CHECK_OK(otter_graph_add_initializer(m->graph, t));
        }
        const char *ins[6] = {"x", names[0], names[1], names[2], names[3]};
        snprintf(dy, sizeof dy, "y%zu", i);
        otter_node *n;
        CHECK_OK(otter_node_create(&n, "Slice", dy, steps ? 5 : 4, ins, 1, (const char *[]){dy}));
        CHECK_OK(otter_graph_add_node(m->graph, n));
        char ndy[16];
        snprintf(ndy, sizeof ndy, "dy%zu", i);
        node(m, "Neg", 1, (const char *[]){dy}, ndy);
        snprintf(g[i], sizeof g[i], "g%zu", i);
        const char *gin[6] = {ndy, shape[i], names[0], names[1], names[2], names[3]};
        CHECK_OK(otter_node_create(&n, "SliceGrad", g[i], steps ? 6 : 5, gin, 1, (const char *[]){g[i]}));
        CHECK_OK(otter_node_set_domain(n, "com.microsoft"));
        CHECK_OK(otter_graph_add_node(m->graph, n));
        sum_in[i] = g[i];
    }
    CHECK_OK(otter_model_set_opset(m, "com.microsoft", 1));
    node(m, "Sum", n_parts, sum_in, "r");
    return m;
}

/* A scalar float Constant node writing `out`. */
static void constant(otter_model *m, const char *out, float v) {
    otter_node *n;
    otter_tensor *t;
    CHECK_OK(otter_node_create(&n, "Constant", out, 0, NULL, 1, (const char *[]){out}));
    CHECK_OK(otter_tensor_from_data(&t, "", OTTER_DTYPE_FLOAT, 0, NULL, &v));
    CHECK_OK(otter_node_set_attr_tensor(n, "value", t));
    CHECK_OK(otter_graph_add_node(m->graph, n));
}

static void transpose(otter_model *m, const char *in, const char *out, const int64_t *perm) {
    otter_node *n;
    CHECK_OK(otter_node_create(&n, "Transpose", out, 1, &in, 1, &out));
    CHECK_OK(otter_node_set_attr_ints(n, "perm", 3, perm));
    CHECK_OK(otter_graph_add_node(m->graph, n));
}

/* The gradient of Softmax(qs kt) v as autodiff writes it, from dy and p: dp0 = FusedMatMul(dy, v, transB) ->
 * Identity dp, ds = SoftmaxGrad_13(dp, p), dqs = FusedMatMul(ds, kt, transB, alpha 0.5), dkt =
 * FusedMatMul(qs, ds, transA), and (dv not NULL) dv = FusedMatMul(p, dy, transA). */
static void attention_grad_nodes(otter_model *m, const char *dy, const char *dv) {
    otter_node *n;
    const struct {
        const char *a, *b, *out;
        int ta, tb;
        float alpha;
    } mm[4] = {{dy, "v", "dp0", 0, 1, 1.0f},
               {"ds", "kt", "dqs", 0, 1, 0.5f},
               {"qs", "ds", "dkt", 1, 0, 1.0f},
               {"p", dy, dv, 1, 0, 1.0f}};
    for (int i = 0; i < 4; i++) {
        if (i == 1) {
            node(m, "Identity", 1, (const char *[]){"dp0"}, "dp");
            CHECK_OK(otter_node_create(&n, "SoftmaxGrad_13", "ds", 2, (const char *[]){"dp", "p"}, 1,
                                       (const char *[]){"ds"}));
            CHECK_OK(otter_node_set_domain(n, "com.microsoft"));
            CHECK_OK(otter_node_set_attr_int(n, "axis", -1));
            CHECK_OK(otter_graph_add_node(m->graph, n));
        }
        if (!mm[i].out) break;
        CHECK_OK(otter_node_create(&n, "FusedMatMul", mm[i].out, 2, (const char *[]){mm[i].a, mm[i].b}, 1,
                                   (const char *[]){mm[i].out}));
        CHECK_OK(otter_node_set_domain(n, "com.microsoft"));
        CHECK_OK(otter_node_set_attr_int(n, "transA", mm[i].ta));
        CHECK_OK(otter_node_set_attr_int(n, "transB", mm[i].tb));
        CHECK_OK(otter_node_set_attr_float(n, "alpha", mm[i].alpha));
        CHECK_OK(otter_graph_add_node(m->graph, n));
    }
}

/* Conv(x, W, B) [+ Add(residual Concat(x, x))] -> activation `act` -> "a", then Neg (so the fused value is no
 * graph output), at opt level 1 and 2: one FusedConv, the bits of the unfused graph (tol 1e-300) or
 * within tol. act: an ONNX op with its attributes, "Clip" with Constant-node bounds, "Clip-init" with
 * initializer bounds, "Swish" (Sigmoid and Mul(x, s)), "Swish-rev" (Mul(s, x)). */
static void fused_act_case(const int64_t *xd, const int64_t *wd, const char *act, bool residual, double tol) {
    otter_model *m = new_model(17, 4, xd, "o");
    add_init(m, "W", 4, wd, 1, -0.5f, 1.0f);
    add_init(m, "B", 1, wd, 2, -0.5f, 1.0f); /* wd[0] elements */
    size_t extra = 1;                        /* the Neg */
    otter_node *n;
    CHECK_OK(otter_node_create(&n, "Conv", "conv", 3, (const char *[]){"x", "W", "B"}, 1, (const char *[]){"c"}));
    if (wd[2] == 3) CHECK_OK(otter_node_set_attr_ints(n, "pads", 4, (const int64_t[]){1, 1, 1, 1}));
    CHECK_OK(otter_graph_add_node(m->graph, n));
    const char *v = "c";
    if (residual) {
        CHECK_OK(otter_node_create(&n, "Concat", "z", 2, (const char *[]){"x", "x"}, 1, (const char *[]){"z"}));
        CHECK_OK(otter_node_set_attr_int(n, "axis", 1)); /* W has twice x's channels */
        CHECK_OK(otter_graph_add_node(m->graph, n));
        node(m, "Add", 2, (const char *[]){"c", "z"}, "s");
        v = "s", extra++;
    }
    if (!strncmp(act, "Swish", 5)) {
        node(m, "Sigmoid", 1, (const char *[]){v}, "sg");
        node(m, "Mul", 2, strcmp(act, "Swish") ? (const char *[]){"sg", v} : (const char *[]){v, "sg"}, "a");
    } else if (!strcmp(act, "Clip")) {
        constant(m, "lo", -0.3f), constant(m, "hi", 0.4f);
        node(m, "Clip", 3, (const char *[]){v, "lo", "hi"}, "a");
        extra += 2;
    } else if (!strcmp(act, "Clip-init")) {
        const int64_t one[1] = {1};
        add_init(m, "lo", 0, one, 3, -0.3f, 0.0f), add_init(m, "hi", 0, one, 4, 0.4f, 0.0f);
        node(m, "Clip", 3, (const char *[]){v, "lo", "hi"}, "a");
    } else {
        CHECK_OK(otter_node_create(&n, act, "act", 1, (const char *[]){v}, 1, (const char *[]){"a"}));
        if (!strcmp(act, "LeakyRelu")) CHECK_OK(otter_node_set_attr_float(n, "alpha", 0.3f));
        if (!strcmp(act, "HardSigmoid")) CHECK_OK(otter_node_set_attr_float(n, "alpha", 0.25f));
        CHECK_OK(otter_graph_add_node(m->graph, n));
    }
    node(m, "Neg", 1, (const char *[]){"a"}, "o");
    char what[96];
    snprintf(what, sizeof what, "Conv %lldx%lld on %lldx%lldx%lld%s+%s", (long long)wd[2], (long long)wd[3],
             (long long)xd[0], (long long)xd[2], (long long)xd[3], residual ? "+Add(z)" : "", act);
    compare(what, m, 4, xd, 1, 1 + extra, false, tol);
    otter_model_free(m);
}

/* ReluGrad(FusedMatMul(x, W), G) through an Identity (what a zero-ratio DropoutGrad becomes) -> one
 * com.otter FusedMatMulReluGrad gating the product's tiles by G's sign as they are stored: the
 * unfused graph's bits. G has +0, -0 and NaN among its values; with leak the product is also a
 * graph output, and nothing fuses. */
static void relu_grad_product_case(int rank, const int64_t *xd, int64_t n, bool trans_b, float alpha, bool leak) {
    const int64_t k = xd[rank - 1], wd[2] = {trans_b ? n : k, trans_b ? k : n};
    otter_model *m = new_model(13, rank, xd, "r");
    add_init(m, "w", 2, wd, 11, -1.0f, 2.0f);
    int64_t gd[OTTER_MAX_RANK];
    memcpy(gd, xd, sizeof(int64_t) * (size_t)rank);
    gd[rank - 1] = n;
    otter_tensor *g;
    CHECK_OK(otter_tensor_create(&g, "g", OTTER_DTYPE_FLOAT, rank, gd));
    unsigned seed = 5;
    float *gv = g->data;
    for (int64_t i = 0; i < otter_tensor_numel(g); i++)
        gv[i] = i % 7 == 1 ? 0.0f : i % 11 == 2 ? -0.0f : i % 13 == 3 ? NAN : frand(&seed);
    CHECK_OK(otter_graph_add_initializer(m->graph, g));
    otter_node *nd;
    CHECK_OK(otter_node_create(&nd, "FusedMatMul", "mm", 2, (const char *[]){"x", "w"}, 1, (const char *[]){"dy"}));
    CHECK_OK(otter_node_set_domain(nd, "com.microsoft"));
    if (trans_b) CHECK_OK(otter_node_set_attr_int(nd, "transB", 1));
    if (alpha != 1.0f) CHECK_OK(otter_node_set_attr_float(nd, "alpha", alpha));
    CHECK_OK(otter_graph_add_node(m->graph, nd));
    node(m, "Identity", 1, (const char *[]){"dy"}, "id");
    CHECK_OK(otter_node_create(&nd, "ReluGrad", "rg", 2, (const char *[]){"id", "g"}, 1, (const char *[]){"r"}));
    CHECK_OK(otter_node_set_domain(nd, "com.microsoft"));
    CHECK_OK(otter_graph_add_node(m->graph, nd));
    CHECK_OK(otter_model_set_opset(m, "com.microsoft", 1));
    if (leak) CHECK_OK(otter_graph_add_output(m->graph, "dy", OTTER_DTYPE_FLOAT, -1, NULL, NULL));
    char what[96];
    snprintf(what, sizeof what, "ReluGrad(FusedMatMul) %lld rows x %lld%s%s%s",
             (long long)(xd[0] * (rank > 2 ? xd[1] : 1)), (long long)n, trans_b ? " transB" : "",
             alpha != 1.0f ? " alpha" : "", leak ? ", product kept" : "");
    compare(what, m, rank, xd, leak ? 0 : 1, leak ? 3 : 1, true, 1e-300);
    otter_model_free(m);
}

int main(void) {
    const int64_t xd[4] = {3, 4, 7, 6}, w[4] = {8, 4, 3, 3}, c8[1] = {8}, c811[3] = {8, 1, 1};
    {
        /* Conv + BatchNormalization + Relu: one FusedConv with folded weights */
        otter_model *m = new_model(15, 4, xd, "r");
        add_init(m, "W", 4, w, 1, -0.5f, 1.0f);
        add_init(m, "B", 1, c8, 2, -0.5f, 1.0f);
        add_init(m, "scale", 1, c8, 3, 0.5f, 1.0f);
        add_init(m, "beta", 1, c8, 4, -1.0f, 2.0f);
        add_init(m, "mean", 1, c8, 5, -0.5f, 1.0f);
        add_init(m, "var", 1, c8, 6, 0.2f, 2.0f);
        node(m, "Conv", 3, (const char *[]){"x", "W", "B"}, "c");
        node(m, "BatchNormalization", 5, (const char *[]){"c", "scale", "beta", "mean", "var"}, "bn");
        node(m, "Relu", 1, (const char *[]){"bn"}, "r");
        compare("Conv+BatchNormalization+Relu", m, 4, xd, 1, 1, false, 1e-3);
        /* sessions that keep initializers live (training) don't fold BN, and the chain stops there */
        compare("  same, no_fold_initializers", m, 4, xd, 0, 3, true, 1e-6);
        otter_model_free(m);
    }
    {
        /* ResNet block without conv bias: Conv + Add(per-channel [8,1,1]) + Add(residual) + Relu */
        otter_model *m = new_model(14, 4, xd, "r");
        const int64_t w2[4] = {4, 4, 3, 3};
        add_init(m, "W", 4, w2, 1, -0.5f, 1.0f);
        const int64_t c411[3] = {4, 1, 1};
        add_init(m, "bias", 3, c411, 2, -0.5f, 1.0f);
        node(m, "Relu", 1, (const char *[]){"x"}, "h");
        node(m, "Conv", 2, (const char *[]){"h", "W"}, "c");
        node(m, "Add", 2, (const char *[]){"bias", "c"}, "cb");
        node(m, "Add", 2, (const char *[]){"cb", "h"}, "s");
        node(m, "Relu", 1, (const char *[]){"s"}, "r");
        compare("Conv+Add(bias)+Add(residual)+Relu", m, 4, xd, 1, 2, false, 1e-6);
        otter_model_free(m);
    }
    {
        /* Conv + Add(residual) + Relu [+ MaxPool] where the residual (here Concat(x, x)) dies at the
         * FusedConv: the output is planned over it, and each convolution path (3x3 direct, 1x1 as
         * one product, pooled; a batch large enough to go image by image) must read Z before it
         * is overwritten or copy it first */
        const int64_t x9[4] = {9, 4, 7, 6}, x98[4] = {3, 4, 9, 8}, w1[4] = {8, 4, 1, 1};
        const struct {
            const char *what;
            const int64_t *xd, *wd;
            bool pool;
        } cases[] = {{"Conv 3x3+Add(dying residual)+Relu", xd, w, false},
                     {"  same, batch 9", x9, w, false},
                     {"  same, 9x8 (the direct kernel)", x98, w, false},
                     {"Conv 1x1+Add(dying residual)+Relu", xd, w1, false},
                     {"  same, 9x8 (one product)", x98, w1, false},
                     {"Conv 3x3+Add(dying residual)+Relu+MaxPool", x9, w, true},
                     {"  same, 9x8", x98, w, true}};
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            otter_model *m = new_model(14, 4, cases[c].xd, "o");
            add_init(m, "W", 4, cases[c].wd, 1, -0.5f, 1.0f);
            add_init(m, "B", 1, c8, 2, -0.5f, 1.0f);
            otter_node *n;
            CHECK_OK(otter_node_create(&n, "Concat", "cat", 2, (const char *[]){"x", "x"}, 1, (const char *[]){"xx"}));
            CHECK_OK(otter_node_set_attr_int(n, "axis", 1));
            CHECK_OK(otter_graph_add_node(m->graph, n));
            if (cases[c].wd[2] == 3) {
                node(m, "Conv", 3, (const char *[]){"x", "W", "B"}, "c");
            } else {
                CHECK_OK(
                    otter_node_create(&n, "Conv", "c", 3, (const char *[]){"x", "W", "B"}, 1, (const char *[]){"c"}));
                CHECK_OK(otter_graph_add_node(m->graph, n));
            }
            node(m, "Add", 2, (const char *[]){"c", "xx"}, "s");
            node(m, "Relu", 1, (const char *[]){"s"}, "r");
            if (cases[c].pool) {
                CHECK_OK(otter_node_create(&n, "MaxPool", "mp", 1, (const char *[]){"r"}, 1, (const char *[]){"p"}));
                CHECK_OK(otter_node_set_attr_ints(n, "kernel_shape", 2, (const int64_t[]){2, 2}));
                CHECK_OK(otter_node_set_attr_ints(n, "strides", 2, (const int64_t[]){2, 2}));
                CHECK_OK(otter_graph_add_node(m->graph, n));
            }
            node(m, "Neg", 1, (const char *[]){cases[c].pool ? "p" : "r"},
                 "o"); /* the fused output is no graph output */
            compare(cases[c].what, m, 4, cases[c].xd, 1, 3, false, 1e-6);
            CHECK(inplace >= 1);
            otter_model_free(m);
        }
    }
    {
        /* Conv + Add of a value that broadcasts ([1,8,1,6] computed) and of a bigger one ([2,...]) */
        otter_model *m = new_model(14, 4, xd, "r");
        add_init(m, "W", 4, w, 1, -0.5f, 1.0f);
        add_init(m, "B", 1, c8, 2, -0.5f, 1.0f);
        const int64_t zd[4] = {1, 8, 1, 6};
        add_init(m, "z0", 4, zd, 3, -1.0f, 2.0f);
        node(m, "Neg", 1, (const char *[]){"z0"}, "z");
        node(m, "Conv", 3, (const char *[]){"x", "W", "B"}, "c");
        node(m, "Add", 2, (const char *[]){"c", "z"}, "r");
        compare("Conv+Add(broadcast value)", m, 4, xd, 1, 2, false, 1e-6);
        otter_model_free(m);
        const int64_t x1[4] = {1, 4, 7, 6}, zb[5] = {2, 1, 8, 1, 6};
        m = new_model(14, 4, x1, "r");
        add_init(m, "W", 4, w, 1, -0.5f, 1.0f);
        add_init(m, "z0", 5, zb, 3, -1.0f, 2.0f);
        node(m, "Neg", 1, (const char *[]){"z0"}, "z");
        node(m, "Conv", 2, (const char *[]){"x", "W"}, "c");
        node(m, "Add", 2, (const char *[]){"z", "c"}, "s");
        node(m, "Relu", 1, (const char *[]){"s"}, "r");
        compare("Conv+Add(value broadcast to rank 5)+Relu", m, 4, x1, 1, 2, false, 1e-6);
        otter_model_free(m);
    }
    {
        /* not fused: the Conv output is also a graph output; a Relu output read twice stops the chain */
        otter_model *m = new_model(14, 4, xd, "r");
        CHECK_OK(otter_graph_add_output(m->graph, "c", OTTER_DTYPE_FLOAT, -1, NULL, NULL));
        add_init(m, "W", 4, w, 1, -0.5f, 1.0f);
        node(m, "Conv", 2, (const char *[]){"x", "W"}, "c");
        node(m, "Relu", 1, (const char *[]){"c"}, "r");
        compare("Conv whose output is a graph output", m, 4, xd, 0, 2, false, 1e-6);
        otter_model_free(m);
        m = new_model(14, 4, xd, "r");
        add_init(m, "W", 4, w, 1, -0.5f, 1.0f);
        add_init(m, "bias", 3, c811, 2, -0.5f, 1.0f);
        node(m, "Conv", 2, (const char *[]){"x", "W"}, "c");
        node(m, "Add", 2, (const char *[]){"c", "bias"}, "cb");
        node(m, "Mul", 2, (const char *[]){"cb", "cb"}, "r");
        compare("Conv+Add(bias), then read twice", m, 4, xd, 1, 2, false, 1e-6);
        otter_model_free(m);
    }
    {
        /* Gemm + Relu; MatMul + Add(bias) + Relu; MatMul + Relu on a 3-D input */
        const int64_t x2[2] = {5, 12}, wg[2] = {7, 12}, wm[2] = {12, 9}, b9[1] = {9}, c7[1] = {7};
        otter_model *m = new_model(14, 2, x2, "r");
        add_init(m, "W", 2, wg, 1, -0.5f, 1.0f);
        add_init(m, "C", 1, c7, 2, -0.5f, 1.0f);
        otter_node *n;
        CHECK_OK(otter_node_create(&n, "Gemm", "g", 3, (const char *[]){"x", "W", "C"}, 1, (const char *[]){"g"}));
        CHECK_OK(otter_node_set_attr_int(n, "transB", 1));
        CHECK_OK(otter_node_set_attr_float(n, "alpha", 0.5f));
        CHECK_OK(otter_graph_add_node(m->graph, n));
        node(m, "Relu", 1, (const char *[]){"g"}, "r");
        compare("Gemm+Relu", m, 2, x2, 1, 1, false, 1e-6);
        otter_model_free(m);
        m = new_model(14, 2, x2, "r");
        add_init(m, "W", 2, wm, 1, -0.5f, 1.0f);
        add_init(m, "b", 1, b9, 2, -0.5f, 1.0f);
        node(m, "MatMul", 2, (const char *[]){"x", "W"}, "mm");
        node(m, "Add", 2, (const char *[]){"b", "mm"}, "a");
        node(m, "Relu", 1, (const char *[]){"a"}, "r");
        compare("MatMul+Add(bias)+Relu", m, 2, x2, 1, 1, false, 1e-6);
        otter_model_free(m);
        const int64_t x3[3] = {2, 5, 12};
        m = new_model(14, 3, x3, "r");
        add_init(m, "W", 2, wm, 1, -0.5f, 1.0f);
        node(m, "MatMul", 2, (const char *[]){"x", "W"}, "mm");
        node(m, "Relu", 1, (const char *[]){"mm"}, "r");
        compare("MatMul+Relu (3-D)", m, 3, x3, 1, 1, false, 1e-6);
        otter_model_free(m);
        /* weights and bias shared through Identity (PyTorch's copied TransformerEncoder layers): the
         * MatMul still takes the Add and Relu in; the Identities stay (aliases at run time) */
        m = new_model(14, 2, x2, "r");
        add_init(m, "W", 2, wm, 1, -0.5f, 1.0f);
        add_init(m, "b", 1, b9, 2, -0.5f, 1.0f);
        node(m, "Identity", 1, (const char *[]){"W"}, "W1");
        node(m, "Identity", 1, (const char *[]){"b"}, "b1");
        node(m, "MatMul", 2, (const char *[]){"x", "W1"}, "mm");
        node(m, "Add", 2, (const char *[]){"mm", "b1"}, "a");
        node(m, "Relu", 1, (const char *[]){"a"}, "r");
        compare("MatMul+Add(bias)+Relu, operands via Identity", m, 2, x2, 1, 3, false, 1e-6);
        otter_model_free(m);
        /* a training graph's linear layer: W^T a Transpose made each run (not folded), the bias a
         * graph input (a parameter, here with its initializer as the default): the bias and Relu go
         * into the product, its weights packed on each run; 80 rows over the threads' blocks */
        const int64_t x80r[2] = {80, 12}, wt[2] = {9, 12};
        m = new_model(14, 2, x80r, "r");
        add_init(m, "Wt", 2, wt, 1, -0.5f, 1.0f);
        CHECK_OK(otter_graph_add_input(m->graph, "b", OTTER_DTYPE_FLOAT, 1, b9, NULL));
        add_init(m, "b", 1, b9, 2, -0.5f, 1.0f);
        node(m, "Transpose", 1, (const char *[]){"Wt"}, "W");
        node(m, "MatMul", 2, (const char *[]){"x", "W"}, "mm");
        node(m, "Add", 2, (const char *[]){"mm", "b"}, "a");
        node(m, "Relu", 1, (const char *[]){"a"}, "r");
        compare("MatMul(x, Transpose(W))+Add(bias input)+Relu", m, 2, x80r, 1, 2, true, 1e-6);
        otter_model_free(m);
        /* Transpose(Gemm(A, B)) -> Gemm(B, A) with the transposes swapped and flipped (a weight
         * gradient's Transpose), every transA/transB, alpha 0.5 once; kept when the Gemm's output is
         * also a graph output */
        for (int c = 0; c < 5; c++) {
            const int ta = c & 1, tb = (c >> 1) & 1, leak = c == 4;
            const int64_t K = ta ? 80 : 12, bd[2] = {tb ? 9 : K, tb ? K : 9};
            m = new_model(14, 2, x80r, "r");
            add_init(m, "B", 2, bd, 3, -0.5f, 1.0f);
            CHECK_OK(otter_node_create(&n, "Gemm", "g", 2, (const char *[]){"x", "B"}, 1, (const char *[]){"g"}));
            CHECK_OK(otter_node_set_attr_int(n, "transA", ta));
            CHECK_OK(otter_node_set_attr_int(n, "transB", tb));
            if (c == 3) CHECK_OK(otter_node_set_attr_float(n, "alpha", 0.5f));
            CHECK_OK(otter_graph_add_node(m->graph, n));
            CHECK_OK(otter_node_create(&n, "Transpose", "t", 1, (const char *[]){"g"}, 1, (const char *[]){"r"}));
            CHECK_OK(otter_node_set_attr_ints(n, "perm", 2, (const int64_t[]){1, 0}));
            CHECK_OK(otter_graph_add_node(m->graph, n));
            if (leak) CHECK_OK(otter_graph_add_output(m->graph, "g", OTTER_DTYPE_FLOAT, -1, NULL, NULL));
            char what[64];
            snprintf(what, sizeof what, "Transpose(Gemm transA %d transB %d%s)%s", ta, tb, c == 3 ? " alpha" : "",
                     leak ? " kept" : "");
            compare(what, m, 2, x80r, 0, leak ? 2 : 1, true, 1e-6);
            otter_model_free(m);
        }
        /* the product's tiles gated as they are stored: few rows (no packing), blocked (edge tiles,
         * two K slices), B transposed and alpha (A packed), 3-D x (rows folded), the product kept */
        const int64_t r9[2] = {9, 40}, r130[2] = {130, 300}, r3d[3] = {2, 65, 24};
        relu_grad_product_case(2, r9, 33, false, 1.0f, false);
        relu_grad_product_case(2, r130, 100, false, 1.0f, false);
        relu_grad_product_case(2, r130, 64, true, 0.5f, false);
        relu_grad_product_case(3, r3d, 70, false, 1.0f, false);
        relu_grad_product_case(2, r130, 100, false, 1.0f, true);
        /* Dropout(x, 0, training) and its DropoutGrad (PyTorch's dropout=0.0 layers) become Identity,
         * unless the mask has another reader (here a graph output) */
        for (int mask_out = 0; mask_out < 2; mask_out++) {
            m = new_model(13, 2, x80r, "r");
            constant(m, "ratio", 0.0f);
            otter_tensor *t;
            const uint8_t yes = 1;
            CHECK_OK(otter_tensor_from_data(&t, "", OTTER_DTYPE_BOOL, 0, NULL, &yes));
            CHECK_OK(otter_node_create(&n, "Constant", "train", 0, NULL, 1, (const char *[]){"train"}));
            CHECK_OK(otter_node_set_attr_tensor(n, "value", t));
            CHECK_OK(otter_graph_add_node(m->graph, n));
            CHECK_OK(otter_node_create(&n, "Dropout", "drop", 3, (const char *[]){"x", "ratio", "train"}, 2,
                                       (const char *[]){"y", "mask"}));
            CHECK_OK(otter_graph_add_node(m->graph, n));
            node(m, "Neg", 1, (const char *[]){"y"}, "dy");
            CHECK_OK(otter_node_create(&n, "DropoutGrad", "dx", 4, (const char *[]){"dy", "mask", "ratio", "train"}, 1,
                                       (const char *[]){"dx"}));
            CHECK_OK(otter_node_set_domain(n, "com.microsoft"));
            CHECK_OK(otter_graph_add_node(m->graph, n));
            CHECK_OK(otter_model_set_opset(m, "com.microsoft", 1));
            node(m, "Add", 2, (const char *[]){"dx", "y"}, "r");
            if (mask_out) CHECK_OK(otter_graph_add_output(m->graph, "mask", OTTER_DTYPE_BOOL, -1, NULL, NULL));
            compare(mask_out ? "Dropout(ratio 0), mask a graph output: kept"
                             : "Dropout(ratio 0)+DropoutGrad -> Identity",
                    m, 2, x80r, 0, 6, true, 1e-300);
            otter_session *s = NULL;
            otter_session_options o = {.n_threads = 1, .opt_level = 2, .opt_level_set = true};
            CHECK_OK(otter_session_create(&s, m, &o));
            size_t dropouts = 0;
            const otter_graph *g = s ? otter_session_model(s)->graph : NULL;
            for (size_t k = 0; g && k < g->n_nodes; k++) dropouts += strstr(g->nodes[k]->op_type, "Dropout") != NULL;
            CHECK(dropouts == (mask_out ? 2u : 0u));
            otter_session_free(s);
            otter_model_free(m);
        }
        /* SliceGrads summed -> one SlicesGrad: q, k and v of one projection (parts tile dX: copied),
         * overlapping parts (added), parts tiling dX in reverse (step -1 on either axis), every
         * other column (step 2: zeroed and added); the unfused graph's bits */
        const int64_t x10[2] = {10, 12};
        const slice_part qkv[3] = {{{0, 0}, {10, 4}, {1, 1}}, {{0, 4}, {10, 8}, {1, 1}}, {{0, 8}, {10, 12}, {1, 1}}};
        const slice_part overlap[2] = {{{0, 0}, {10, 6}, {1, 1}}, {{2, 3}, {9, 12}, {1, 1}}};
        const slice_part reverse[3] = {
            {{9, 0}, {-11, 6}, {-1, 1}}, {{0, 11}, {5, 5}, {1, -1}}, {{5, 11}, {10, 5}, {1, -1}}};
        const slice_part strided[2] = {{{0, 0}, {10, 12}, {1, 2}}, {{0, 1}, {10, 12}, {1, 2}}};
        const struct {
            const char *what;
            size_t n;
            const slice_part *p;
        } sg_cases[] = {{"Sum(SliceGrad x3) -> SlicesGrad, q/k/v tiles", 3, qkv},
                        {"Sum(SliceGrad x3) -> SlicesGrad, q/k/v, 3 Shapes", 3, qkv},
                        {"Sum(SliceGrad x2) -> SlicesGrad, overlapping", 2, overlap},
                        {"Sum(SliceGrad x3) -> SlicesGrad, reversed tiles", 3, reverse},
                        {"Sum(SliceGrad x2) -> SlicesGrad, step 2", 2, strided}};
        for (size_t c = 0; c < sizeof sg_cases / sizeof *sg_cases; c++) {
            const bool own_shapes = c == 1;
            m = slices_grad_model(sg_cases[c].n, sg_cases[c].p, own_shapes);
            compare(sg_cases[c].what, m, 2, x10, 1, 2 + 2 * sg_cases[c].n + (own_shapes ? 2 : 0), true, 1e-300);
            otter_model_free(m);
        }
        /* the transcendental activations in the product's epilogue: MatMul + Add + Gelu (both
         * approximations, 80 rows over the threads' blocks), Gemm + HardSwish, MatMul + Sigmoid */
        const int64_t x80[3] = {2, 40, 12};
        for (int tanh_approx = 0; tanh_approx < 2; tanh_approx++) {
            m = new_model(20, 3, x80, "r");
            add_init(m, "W", 2, wm, 1, -0.5f, 1.0f);
            add_init(m, "b", 1, b9, 2, -0.5f, 1.0f);
            node(m, "MatMul", 2, (const char *[]){"x", "W"}, "mm");
            node(m, "Add", 2, (const char *[]){"mm", "b"}, "a");
            CHECK_OK(otter_node_create(&n, "Gelu", "r", 1, (const char *[]){"a"}, 1, (const char *[]){"r"}));
            if (tanh_approx) CHECK_OK(otter_node_set_attr_string(n, "approximate", "tanh"));
            CHECK_OK(otter_graph_add_node(m->graph, n));
            compare(tanh_approx ? "MatMul+Add(bias)+Gelu(tanh)" : "MatMul+Add(bias)+Gelu", m, 3, x80, 1, 1, false,
                    1e-6);
            otter_model_free(m);
        }
        m = new_model(14, 2, x2, "r");
        add_init(m, "W", 2, wg, 1, -0.5f, 1.0f);
        add_init(m, "C", 1, c7, 2, -0.5f, 1.0f);
        CHECK_OK(otter_node_create(&n, "Gemm", "g", 3, (const char *[]){"x", "W", "C"}, 1, (const char *[]){"g"}));
        CHECK_OK(otter_node_set_attr_int(n, "transB", 1));
        CHECK_OK(otter_graph_add_node(m->graph, n));
        node(m, "HardSwish", 1, (const char *[]){"g"}, "r");
        compare("Gemm+HardSwish", m, 2, x2, 1, 1, false, 1e-6);
        otter_model_free(m);
        m = new_model(14, 3, x80, "r");
        add_init(m, "W", 2, wm, 1, -0.5f, 1.0f);
        node(m, "MatMul", 2, (const char *[]){"x", "W"}, "mm");
        node(m, "Sigmoid", 1, (const char *[]){"mm"}, "r");
        compare("MatMul+Sigmoid", m, 3, x80, 1, 1, false, 1e-6);
        otter_model_free(m);
    }
    {
        /* Clip's gradient as autodiff writes it, dX = Where(Or(Less(X, lo), Greater(X, hi)), 0, dY)
         * (X = x, dY = Neg(x)): one ClipGrad, same bits; one bound; X broadcast against dY (X a mean
         * over axis 1); a mask also read by a bound's gradient (it stays, the rest goes); and a Where
         * whose fill is not 0 (no fusion) */
        const int64_t xg[3] = {3, 7, 50}, one[1] = {1};
        for (int c = 0; c < 6; c++) {
            otter_model *m = new_model(13, 3, xg, "dx");
            add_init(m, "lo", 0, one, 3, -0.3f, 0.0f);
            add_init(m, "hi", 0, one, 4, 0.4f, 0.0f);
            add_init(m, "zero", 0, one, 5, c == 5 ? 1.0f : 0.0f, 0.0f);
            const char *X = "x";
            if (c == 3) {
                otter_node *n;
                CHECK_OK(
                    otter_node_create(&n, "ReduceMean", "mean", 1, (const char *[]){"x"}, 1, (const char *[]){"xm"}));
                CHECK_OK(otter_node_set_attr_ints(n, "axes", 1, (const int64_t[]){1}));
                CHECK_OK(otter_graph_add_node(m->graph, n));
                X = "xm";
            }
            node(m, "Neg", 1, (const char *[]){"x"}, "dy");
            const char *mask = "below";
            if (c != 2) node(m, "Less", 2, (const char *[]){X, "lo"}, "below");
            if (c != 1) node(m, "Greater", 2, (const char *[]){X, "hi"}, "above");
            if (c == 1)
                mask = "below";
            else if (c == 2)
                mask = "above";
            else
                node(m, "Or", 2, (const char *[]){"below", "above"}, mask = "outside");
            node(m, "Where", 3, (const char *[]){mask, "zero", "dy"}, c == 4 ? "dxc" : "dx");
            if (c == 4) {
                node(m, "Where", 3, (const char *[]){"below", "dy", "zero"}, "dlo");
                node(m, "Add", 2, (const char *[]){"dxc", "dlo"}, "dx");
            }
            static const char *const what[6] = {"Clip gradient -> ClipGrad",
                                                "Clip gradient, min only",
                                                "Clip gradient, max only",
                                                "Clip gradient, X broadcast",
                                                "Clip gradient, mask read elsewhere",
                                                "Where filling 1: no ClipGrad"};
            static const size_t fused[6] = {1, 1, 1, 1, 1, 0}, nodes[6] = {2, 2, 2, 3, 5, 5};
            compare(what[c], m, 3, xg, fused[c], nodes[c], false, 1e-300);
            otter_model_free(m);
        }
    }
    {
        /* MaxPool's gradient: MaxPool, Neg, Shape and one MaxPoolGrad (192 planes: split over threads);
         * 2x2 stride 2 as autodiff writes it at opset 14, 3x3 stride 1 (overlapping, reduction add) at 16.
         * An odd height: the pooling drops X's last row, so only S gives dX's shape. Same bits. */
        const int64_t xp[4] = {4, 48, 15, 14};
        otter_model *m = maxpool_grad_model(14, xp, 2, 2, NULL, 0.0f, false, NULL, NULL);
        compare("MaxPool gradient (2x2/2) -> MaxPoolGrad", m, 4, xp, 1, 4, false, 1e-300);
        otter_model_free(m);
        m = maxpool_grad_model(16, xp, 3, 1, "add", 0.0f, false, NULL, NULL);
        compare("MaxPool gradient (3x3/1, add) -> MaxPoolGrad", m, 4, xp, 1, 4, false, 1e-300);
        otter_model_free(m);
        /* then ReluGrad at MaxPool's input (x in [-1, 1): windows with no positive value): one node;
         * at another tensor it stays (Neg(x) is left unread when fused) */
        m = maxpool_grad_model(14, xp, 2, 2, NULL, 0.0f, false, "x", NULL);
        compare("MaxPool gradient (2x2/2) + ReluGrad", m, 4, xp, 1, 5, false, 1e-300);
        otter_model_free(m);
        m = maxpool_grad_model(16, xp, 3, 1, "add", 0.0f, false, "x", NULL);
        compare("MaxPool gradient (3x3/1, add) + ReluGrad", m, 4, xp, 1, 5, false, 1e-300);
        otter_model_free(m);
        const int64_t xo[4] = {2, 3, 9, 11}; /* odd width: a column left out, 5 blocks a row */
        m = maxpool_grad_model(14, xo, 2, 2, NULL, 0.0f, false, "x", NULL);
        compare("MaxPool gradient (2x2/2, 9x11) + ReluGrad", m, 4, xo, 1, 5, false, 1e-300);
        otter_model_free(m);
        m = maxpool_grad_model(14, xp, 2, 2, NULL, 0.0f, false, "nx", NULL);
        compare("MaxPool gradient, ReluGrad at another input", m, 4, xp, 1, 6, false, 1e-300);
        otter_model_free(m);
        /* a training graph's Conv, Relu, MaxPool and their gradients: a FusedConv that pools and writes
         * the Indices and the unpooled shape (for the gradient), and the fused MaxPoolGrad; 13 x 18: a
         * pooled row ends in a partial half tile, the last row is left out; 7 channels; 3x3 (the
         * direct kernel) and 1x1 (a matrix product, pooled after) */
        const int64_t xc[4] = {3, 5, 13, 18}, wc3[4] = {7, 5, 3, 3}, wc1[4] = {7, 5, 1, 1};
        m = maxpool_grad_model(14, xc, 2, 2, NULL, 0.0f, false, "x", wc3);
        compare("Conv+Relu+MaxPool and gradient, 3x3", m, 4, xc, 2, 4, false, 1e-300);
        otter_model_free(m);
        m = maxpool_grad_model(14, xc, 2, 2, NULL, 0.0f, false, "x", wc1);
        compare("Conv+Relu+MaxPool and gradient, 1x1", m, 4, xc, 2, 4, false, 1e-300);
        otter_model_free(m);
        /* the Indices themselves (as floats): ties of zeros after the Relu pick the first tap */
        m = new_model(14, 4, xc, "ci");
        add_init(m, "W", 4, wc3, 11, -0.5f, 1.0f);
        add_init(m, "B", 1, wc3, 12, -0.2f, 0.4f);
        node(m, "Conv", 3, (const char *[]){"x", "W", "B"}, "c");
        node(m, "Relu", 1, (const char *[]){"c"}, "cr");
        otter_node *n;
        CHECK_OK(otter_node_create(&n, "MaxPool", "pool", 1, (const char *[]){"cr"}, 2, (const char *[]){"y", "i"}));
        CHECK_OK(otter_node_set_attr_ints(n, "kernel_shape", 2, (const int64_t[]){2, 2}));
        CHECK_OK(otter_node_set_attr_ints(n, "strides", 2, (const int64_t[]){2, 2}));
        CHECK_OK(otter_graph_add_node(m->graph, n));
        CHECK_OK(otter_node_create(&n, "Cast", "cast", 1, (const char *[]){"i"}, 1, (const char *[]){"ci"}));
        CHECK_OK(otter_node_set_attr_int(n, "to", OTTER_DTYPE_FLOAT));
        CHECK_OK(otter_graph_add_node(m->graph, n));
        compare("Conv+Relu+MaxPool's Indices", m, 4, xc, 1, 2, false, 1e-300);
        otter_model_free(m);
        /* without the ReluGrad, the Relu's output is still read by the MaxPool and the Shape only: the
         * same FusedConv; with an unfused ReluGrad (the scattered value an output) it keeps a third
         * reader and the MaxPool stays */
        m = maxpool_grad_model(14, xc, 2, 2, NULL, 0.0f, false, NULL, wc3);
        compare("Conv+Relu+MaxPool and gradient w/o ReluGrad", m, 4, xc, 2, 3, false, 1e-300);
        otter_model_free(m);
        m = maxpool_grad_model(14, xc, 2, 2, NULL, 0.0f, true, "x", wc3);
        compare("Conv+Relu, MaxPool read by a ReluGrad", m, 4, xc, 1, 12, false, 1e-300);
        otter_model_free(m);
        /* not fused: the scattered value is also a graph output; the fill is not zero */
        m = maxpool_grad_model(14, xp, 2, 2, NULL, 0.0f, true, NULL, NULL);
        compare("MaxPool gradient, scattered value an output", m, 4, xp, 0, 9, false, 1e-300);
        otter_model_free(m);
        m = maxpool_grad_model(14, xp, 2, 2, NULL, 1.0f, false, NULL, NULL);
        compare("MaxPool gradient over ones (not a gradient)", m, 4, xp, 0, 9, false, 1e-300);
        otter_model_free(m);
    }
    {
        /* fused activations (fused_act.h) on each Conv path: the small-image product (7x6), the direct
         * 3x3 kernel and the 1x1 product (9x8), a batch the direct kernel runs image by image, Winograd.
         * Piecewise ones give the unfused bits; Sigmoid and Swish run vec_math's functions on other runs
         * of the output than the unfused kernels, whose tails take the scalar path (no FMA): within 1e-6;
         * Winograd's sums round otherwise than the unfused direct kernel's (~1e-6 absolute, relative to
         * outputs near 0 here; up to 5.5e-3 measured): 5e-2, where a wrong activation is off by O(1) */
        const int64_t w1[4] = {8, 4, 1, 1}, x98[4] = {3, 4, 9, 8}, x9[4] = {9, 4, 9, 8}, xw[4] = {2, 16, 16, 16},
                      ww[4] = {32, 16, 3, 3};
        const struct {
            const char *act;
            double tol;
        } acts[] = {{"Clip", 1e-300},      {"Clip-init", 1e-300}, {"LeakyRelu", 1e-300}, {"HardSigmoid", 1e-300},
                    {"HardSwish", 1e-300}, {"Sigmoid", 1e-6},     {"Swish", 1e-6},       {"Swish-rev", 1e-6}};
        for (size_t i = 0; i < sizeof acts / sizeof *acts; i++) {
            fused_act_case(xd, w, acts[i].act, false, acts[i].tol);
            fused_act_case(x98, w, acts[i].act, false, acts[i].tol);
            fused_act_case(x98, w1, acts[i].act, false, acts[i].tol);
        }
        /* the 1x1 product's epilogue on rows of 256+ positions (activation row by row) */
        const int64_t x1617[4] = {2, 4, 16, 17};
        for (size_t i = 0; i < sizeof acts / sizeof *acts; i++)
            fused_act_case(x1617, w1, acts[i].act, false, acts[i].tol);
        fused_act_case(x9, w, "HardSwish", false, 1e-300);
        fused_act_case(xw, ww, "Swish", false, 5e-2);
        fused_act_case(xw, ww, "Clip", true, 5e-2);
        fused_act_case(xd, w, "Swish", true, 1e-6);
        fused_act_case(x98, w, "Swish", true, 1e-6);
        fused_act_case(x98, w1, "Clip", true, 1e-300);
        /* not fused: the Sigmoid's output also read elsewhere (a graph output), as in a training graph */
        otter_model *m = new_model(17, 4, xd, "a");
        add_init(m, "W", 4, w, 1, -0.5f, 1.0f);
        node(m, "Conv", 2, (const char *[]){"x", "W"}, "c");
        node(m, "Sigmoid", 1, (const char *[]){"c"}, "sg");
        node(m, "Mul", 2, (const char *[]){"c", "sg"}, "a");
        CHECK_OK(otter_graph_add_output(m->graph, "sg", OTTER_DTYPE_FLOAT, -1, NULL, NULL));
        compare("Conv+Sigmoid+Mul, Sigmoid an output", m, 4, xd, 0, 3, false, 1e-300);
        otter_model_free(m);
    }
    {
        /* Relu and Clip in ot_fused_act_apply's four-lane steps and scalar tail: the Relu and Clip kernels'
         * bits on NaN, infinities, signed zeros and the bounds themselves (Clip keeps NaN, Relu zeroes it) */
        const float special[] = {NAN, -INFINITY, INFINITY, -0.0f, 0.0f, -0.3f, 0.4f, -0.31f, 0.41f, 1e-38f, -5.0f};
        const size_t n = sizeof special / sizeof *special;
        const ot_fused_act relu = {OT_FUSED_RELU, 0, 0}, clip = {OT_FUSED_CLIP, -0.3f, 0.4f};
        float y[sizeof special / sizeof *special];
        int bad = 0;
        for (int k = 0; k < 2; k++) {
            memcpy(y, special, sizeof y);
            ot_fused_act_apply(k ? &clip : &relu, y, (int64_t)n);
            for (size_t i = 0; i < n; i++) {
                const float x = special[i], lo = x < -0.3f ? -0.3f : x,
                            want = k       ? (lo > 0.4f ? 0.4f : lo)
                                   : x > 0 ? x
                                           : 0;
                if (memcmp(&y[i], &want, sizeof want) != 0) {
                    fprintf(stderr, "FAIL fused %s(%g) = %g, expected %g\n", k ? "Clip" : "Relu", x, y[i], want);
                    bad++;
                }
            }
        }
        CHECK(bad == 0);
        printf("ok   fused Relu/Clip on NaN, infinities, signed zeros and bounds: the kernels' bits\n");
    }
    {
        /* PyTorch's attention export on heads laid out [T, B*H, d]: Q = Transpose(x, [1, 0, 2]) / c,
         * K^T = Transpose(x, [1, 2, 0]), V = Transpose(x, [1, 0, 2]), Softmax(Q K^T) V. Both MatMuls
         * become com.microsoft FusedMatMul reading x where it lies (transBatch, transB, alpha 1 / c):
         * 4 nodes left with the Constant. c = 8 (sqrt(64)) scales exactly: the same bits; c = 5.5
         * rounds once per score instead of once per element of Q, an ulp or two on scores of a few
         * units, which Softmax's exp passes on to the output (4e-6). A Transpose read elsewhere stays. */
        const int64_t ad[3] = {6, 4, 8}; /* T, B*H, d */
        for (int variant = 0; variant < 3; variant++) {
            otter_model *m = new_model(17, 3, ad, "o");
            if (variant == 2) CHECK_OK(otter_graph_add_output(m->graph, "vt", OTTER_DTYPE_FLOAT, -1, NULL, NULL));
            constant(m, "c", variant == 1 ? 5.5f : 8.0f);
            otter_node *t;
            const char *perms_out[3] = {"q", "kt", "vt"};
            const int64_t perms[3][3] = {{1, 0, 2}, {1, 2, 0}, {1, 0, 2}};
            for (int i = 0; i < 3; i++) {
                CHECK_OK(otter_node_create(&t, "Transpose", perms_out[i], 1, (const char *[]){"x"}, 1, &perms_out[i]));
                CHECK_OK(otter_node_set_attr_ints(t, "perm", 3, perms[i]));
                CHECK_OK(otter_graph_add_node(m->graph, t));
            }
            node(m, "Div", 2, (const char *[]){"q", "c"}, "qs");
            node(m, "MatMul", 2, (const char *[]){"qs", "kt"}, "s");
            node(m, "Softmax", 1, (const char *[]){"s"}, "p");
            node(m, "MatMul", 2, (const char *[]){"p", "vt"}, "o");
            const char *what[3] = {"attention heads: MatMul reading Transposes, / 8", "  same, / 5.5",
                                   "  same, V's Transpose also an output"};
            compare(what[variant], m, 3, ad, 0, variant == 2 ? 5 : 4, false, variant == 1 ? 4e-6 : 1e-300);
            otter_model_free(m);
        }
    }
    {
        /* the gradient of Softmax(Qs Kt) V as autodiff writes it, on x [3, 5, 4] as dY, Qs = x * 0.5,
         * Kt = Transpose(x) [3, 4, 5], V = Neg(x) (or, shared by the batches, Neg(ReduceMean(x) over them)),
         * P = Softmax(Qs Kt): dP = FusedMatMul(dY, V, transB) -> Identity, dS = SoftmaxGrad_13(dP, P),
         * dQs = FusedMatMul(dS, Kt, transB, alpha 0.5), dKt = FusedMatMul(Qs, dS, transA), dV =
         * FusedMatMul(P, dY, transA); o = dQs + dV + Transpose(dKt). One AttentionCoreGrad with the
         * unfused bits, writing dKt transposed (layout 2: that Transpose gone); also without dV; not when dS
         * is also a graph output. */
        const int64_t ad[3] = {3, 5, 4};
        for (int variant = 0; variant < 4; variant++) {
            const bool no_dv = variant == 1, leak = variant == 2, shared_v = variant == 3;
            otter_model *m = new_model(17, 3, ad, "o");
            CHECK_OK(otter_model_set_opset(m, "com.microsoft", 1));
            if (leak) CHECK_OK(otter_graph_add_output(m->graph, "ds", OTTER_DTYPE_FLOAT, -1, NULL, NULL));
            constant(m, "half", 0.5f);
            otter_node *n;
            node(m, "Mul", 2, (const char *[]){"x", "half"}, "qs");
            const int64_t swap[3] = {0, 2, 1};
            transpose(m, "x", "kt", swap);
            if (shared_v) {
                CHECK_OK(
                    otter_node_create(&n, "ReduceMean", "xm", 1, (const char *[]){"x"}, 1, (const char *[]){"xm"}));
                CHECK_OK(otter_node_set_attr_ints(n, "axes", 1, (const int64_t[]){0}));
                CHECK_OK(otter_graph_add_node(m->graph, n));
            }
            node(m, "Neg", 1, (const char *[]){shared_v ? "xm" : "x"}, "v");
            node(m, "MatMul", 2, (const char *[]){"qs", "kt"}, "s");
            node(m, "Softmax", 1, (const char *[]){"s"}, "p");
            attention_grad_nodes(m, "x", no_dv ? NULL : "dv");
            transpose(m, "dkt", "dk", swap);
            node(m, "Add", 2, (const char *[]){"dqs", no_dv ? "x" : "dv"}, "a");
            node(m, "Add", 2, (const char *[]){"a", "dk"}, "o");
            const char *what[4] = {"attention gradient -> AttentionCoreGrad", "  same, without dV",
                                   "  same, dS also an output", "  same, V shared by the batches"};
            compare(what[variant], m, 3, ad, leak ? 0 : 1, leak ? 15 : shared_v ? 10 : 9, false, 1e-300);
            otter_model_free(m);
        }
    }
    {
        /* the same gradient on heads laid out as PyTorch's attention export leaves them, x [T, N, d]: dY =
         * Transpose(Relu(x), [1, 0, 2]), Qs = Transpose(x, [1, 0, 2]) * 0.5, Kt = Transpose(x, [1, 2, 0]), V =
         * Transpose(Neg(x), [1, 0, 2]), the forward Y = Softmax(Qs Kt) V; the gradients back to [T, N, d] by
         * Transposes [1, 0, 2] (dQs, dV through an Identity) and [2, 0, 1] (dKt); o = their sum + Y's. The
         * Transposes only AttentionCoreGrad reads or writes go (layouts 1 and 3 both ways): 15 nodes when the
         * forward products read Kt and V too (those stay), 13 when they read Transposes of their own (which
         * fuse_matmul_operands folds into them); the unfused bits (T = 9: the products' packed paths; T = 3
         * with the forward's Transposes shared: their few-rows paths). T = 18 heads of 17: the layout-3
         * heads move in 16 x 16 register blocks and scalar edges. */
        const int64_t sizes[3][3] = {{3, 5, 4}, {9, 3, 16}, {18, 2, 17}};
        for (int v = 0; v < 3; v++) {
            otter_model *m = new_model(17, 3, sizes[v], "o");
            CHECK_OK(otter_model_set_opset(m, "com.microsoft", 1));
            constant(m, "half", 0.5f);
            node(m, "Neg", 1, (const char *[]){"x"}, "xn");
            node(m, "Relu", 1, (const char *[]){"x"}, "xa");
            const int64_t heads[3] = {1, 0, 2}, heads_t[3] = {1, 2, 0}, back_t[3] = {2, 0, 1};
            transpose(m, "x", "q", heads);
            transpose(m, "x", "kt", heads_t);
            transpose(m, "xn", "v", heads);
            transpose(m, "xa", "dy", heads);
            if (v == 1) {
                transpose(m, "x", "kf", heads_t);
                transpose(m, "xn", "vf", heads);
            }
            node(m, "Mul", 2, (const char *[]){"q", "half"}, "qs");
            node(m, "MatMul", 2, (const char *[]){"qs", v == 1 ? "kf" : "kt"}, "s");
            node(m, "Softmax", 1, (const char *[]){"s"}, "p");
            node(m, "MatMul", 2, (const char *[]){"p", v == 1 ? "vf" : "v"}, "y");
            attention_grad_nodes(m, "dy", "dv0");
            node(m, "Identity", 1, (const char *[]){"dv0"}, "dv");
            transpose(m, "dqs", "gq", heads);
            transpose(m, "dkt", "gk", back_t);
            transpose(m, "dv", "gv", heads);
            transpose(m, "y", "yt", heads);
            node(m, "Add", 2, (const char *[]){"gq", "gk"}, "a");
            node(m, "Add", 2, (const char *[]){"a", "gv"}, "b");
            node(m, "Add", 2, (const char *[]){"b", "yt"}, "o");
            const char *what[3] = {"attention gradient on heads [T, N, d]",
                                   "  same, T = 9 heads of 16, forward Transposes apart", "  same, T = 18 heads of 17"};
            compare(what[v], m, 3, sizes[v], 1, v == 1 ? 13 : 15, false, 1e-300);
            otter_model_free(m);
        }
    }
    {
        /* a Concat of convolutions of x (16 channels): 1x1 -> 32, 3x3 pads 1 -> 16 without bias, 5x3
         * pads (2, 1) -> 24 with its bias through an Identity, each + Relu: one FusedConv whose
         * kernel_parts give the channel-lane kernel each window (AVX-512 planar; AVX2 in blocks of 8, a
         * FromChannelBlocks after it; without AVX2 the Concat of three FusedConvs stays). Not when a part is
         * also read elsewhere or the activations differ. With 20 channels from the 5x3, 68 in all, AVX2 can't
         * block it and the three FusedConvs and the Concat come back (fuse.c's split_planar_parts). */
        const int64_t x16[4] = {3, 16, 7, 6};
        const bool lanes = ot_conv_direct_isa() == OT_CONV_ISA_AVX512, avx2 = ot_channel_block() == 8;
        for (int variant = 0; variant < 4; variant++) {
            otter_model *m = new_model(14, 4, x16, "cat");
            if (variant == 1) CHECK_OK(otter_graph_add_output(m->graph, "r1", OTTER_DTYPE_FLOAT, -1, NULL, NULL));
            const int64_t m5 = variant == 3 ? 20 : 24;
            const int64_t w1[4] = {32, 16, 1, 1}, w3[4] = {16, 16, 3, 3}, w5[4] = {m5, 16, 5, 3}, b1[1] = {32},
                          b5[1] = {m5}, pads[3][4] = {{0, 0, 0, 0}, {1, 1, 1, 1}, {2, 1, 2, 1}};
            add_init(m, "W1", 4, w1, 11, -0.3f, 0.6f);
            add_init(m, "B1", 1, b1, 12, -0.3f, 0.6f);
            add_init(m, "W3", 4, w3, 13, -0.3f, 0.6f);
            add_init(m, "W5", 4, w5, 14, -0.3f, 0.6f);
            add_init(m, "B5", 1, b5, 15, -0.3f, 0.6f);
            node(m, "Identity", 1, (const char *[]){"B5"}, "B5i");
            const char *const in[3][3] = {{"x", "W1", "B1"}, {"x", "W3", NULL}, {"x", "W5", "B5i"}};
            const char *conv_out[3] = {"c1", "c3", "c5"}, *relu_out[3] = {"r1", "r3", "r5"};
            for (int i = 0; i < 3; i++) {
                otter_node *n;
                CHECK_OK(otter_node_create(&n, "Conv", conv_out[i], in[i][2] ? 3 : 2, in[i], 1, &conv_out[i]));
                CHECK_OK(otter_node_set_attr_ints(n, "pads", 4, pads[i]));
                CHECK_OK(otter_graph_add_node(m->graph, n));
                node(m, variant == 2 && i == 2 ? "Sigmoid" : "Relu", 1, &conv_out[i], relu_out[i]);
            }
            otter_node *n;
            CHECK_OK(otter_node_create(&n, "Concat", "cat", 3, relu_out, 1, (const char *[]){"cat"}));
            CHECK_OK(otter_node_set_attr_int(n, "axis", 1));
            CHECK_OK(otter_graph_add_node(m->graph, n));
            const char *what[4] = {"Concat of Conv 1x1, 3x3, 5x3 (+ Relu) of x", "  same, a part also an output",
                                   "  same, one part's activation Sigmoid", "  same, 68 channels"};
            const bool one = lanes && (variant == 0 || variant == 3), joined = avx2 && variant == 0;
            /* in blocks of 8 (AVX2: all three channel counts whole blocks) the unjoined convolutions and the
             * Concat run blocked, a FromChannelBlocks after them; not when a part is also an output (two
             * reorders for three blocked edges, runtime/layout.c) */
            const bool blocked = avx2 && variant == 2;
            compare(what[variant], m, 4, x16,
                    one       ? 1
                    : joined  ? 2
                    : blocked ? 4
                              : 3,
                    one       ? 2
                    : joined  ? 3
                    : blocked ? 6
                              : 5,
                    false, 1e-6);      /* + the Identity */
            if (one && variant == 0) { /* the fused graph's shapes infer: 32 + 16 + 24 channels at 7x6 */
                otter_session *s = NULL;
                CHECK_OK(otter_session_create(&s, m, NULL));
                otter_model *c = NULL;
                if (s) CHECK_OK(otter_model_clone(&c, otter_session_model(s)));
                if (c) CHECK_OK(otter_model_infer_shapes(c, NULL));
                const otter_type *t = c ? &c->graph->outputs[0].type : NULL;
                CHECK(t && t->rank == 4 && t->dims[1].value == 72 && t->dims[2].value == 7 && t->dims[3].value == 6);
                otter_model_free(c);
                /* without the channel-lane kernel (the fused node kept, AVX2 kernels): the parts padded into
                 * one kernel, against the unfused graph on the same kernels */
                otter_session *u = NULL;
                const otter_session_options o1 = {.opt_level = 1, .opt_level_set = true};
                CHECK_OK(otter_session_create(&u, m, &o1));
                ot_conv_direct_cap_isa(OT_CONV_ISA_AVX2);
                otter_tensor *x, *y[2] = {NULL, NULL};
                CHECK_OK(otter_tensor_create(&x, "x", OTTER_DTYPE_FLOAT, 4, x16));
                unsigned seed = 3;
                for (int64_t i = 0; i < otter_tensor_numel(x); i++) ((float *)x->data)[i] = frand(&seed);
                const otter_tensor *in[1] = {x};
                if (s && u) CHECK_OK(otter_session_run(s, 1, NULL, in, 1, NULL, &y[0]));
                if (s && u) CHECK_OK(otter_session_run(u, 1, NULL, in, 1, NULL, &y[1]));
                ot_conv_direct_cap_isa(OT_CONV_ISA_AVX512);
                double err = 0;
                for (int64_t i = 0; y[0] && y[1] && i < otter_tensor_numel(y[1]); i++) {
                    const double a = ((const float *)y[1]->data)[i], b = ((const float *)y[0]->data)[i];
                    err = tu_worse(err, fabs(a - b) / (1e-4 + fabs(a)));
                }
                CHECK(y[0] && y[1] && err < 1e-6);
                printf("    same, fused graph on the AVX2 kernels (parts padded into one kernel): worst relative "
                       "error %.2e\n",
                       err);
                otter_tensor_free(x), otter_tensor_free(y[0]), otter_tensor_free(y[1]);
                otter_session_free(u);
                otter_session_free(s);
            }
            otter_model_free(m);
        }
    }
    {
        /* ot_fuse_model directly: the count of removed nodes, and no copy when nothing fuses */
        otter_model *m = new_model(14, 4, xd, "r"), *f = NULL;
        node(m, "Relu", 1, (const char *[]){"x"}, "r");
        size_t n = 99;
        CHECK_OK(ot_fuse_model(m, true, &f, &n));
        CHECK(f == NULL && n == 0);
        otter_model_free(m);
    }
    printf("fusions: worst relative error %.2e\n", worst);
    return tu_finish("test_fuse");
}
