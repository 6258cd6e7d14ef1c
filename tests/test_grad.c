/* Every gradient rule against central finite differences.
 *
 * Each case is one operator inside loss = 0.5 * sum(y * y) over its float outputs. otter builds the
 * gradient graph, runs it, and each requested input's gradient is compared element by element
 * with (loss(x + eps) - loss(x - eps)) / (2 eps) computed by running the forward model. Inputs are
 * drawn away from kinks (|x| >= 0.2 for Abs/Relu-like ops; positive where Log/Sqrt/Pow need it).
 * Tolerance: |analytic - numeric| <= 2e-2 + 2e-2 * |numeric| (float32 kernels, eps = 1e-2). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

enum { RAND, POS, INTS, BOOLS, FIXED, PROB, MINUS_HALF, HALF, POS_FIXED, RATIO, SPREAD, WIDE };

typedef struct input_spec {
    const char *name;
    int kind; /* RAND / POS: float input differentiated; INTS: int64 initializer; FIXED: float, not differentiated;
                 PROB: float in (0.1, 0.9), not differentiated */
    int rank;
    int64_t dims[4];
    int64_t ints[8];  /* INTS values */
    unsigned dynamic; /* bit i: dimension i is declared symbolic ("<name>_<i>"); DYN_RANK: no shape declared */
} input_spec;

#define DYN_RANK (1u << 31)

typedef struct grad_case {
    const char *label;
    const char *op;
    const char *domain;
    int opset;
    int n_in;
    input_spec in[6];
    int n_out;
    void (*attrs)(otter_node *n);
    double tol; /* 0: the default */
} grad_case;

static uint64_t rng = 88172645463325252ull;
static float frand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

/* Values away from 0 (kinks of Abs, Relu, Clip at 0 and the Clip bounds ±0.5). */
static float away_from_kinks(void) {
    for (;;) {
        float v = frand() * 1.5f;
        if (fabsf(v) > 0.1f && fabsf(fabsf(v) - 0.5f) > 0.05f) return v;
    }
}

static int64_t numel(const input_spec *s) {
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++) n *= s->dims[i];
    return n;
}

static bool is_wrt(const input_spec *s) {
    return s->kind == RAND || s->kind == POS || s->kind == SPREAD || s->kind == WIDE;
}

/* Forward model: the op, then loss = 0.5 * sum over outputs of sum(y*y). */
static otter_model *forward_model(const grad_case *c) {
    otter_model *m;
    CHECK_OK(otter_model_create(&m, c->label, c->opset ? c->opset : 17));
    if (c->domain) CHECK_OK(otter_model_set_opset(m, c->domain, 1));
    otter_graph *g = m->graph;
    const char *names[6];
    for (int i = 0; i < c->n_in; i++) {
        const input_spec *s = &c->in[i];
        names[i] = s->name;
        if (s->kind == INTS) {
            otter_tensor *t;
            CHECK_OK(otter_tensor_from_data(&t, s->name, OTTER_DTYPE_INT64, s->rank, s->dims, s->ints));
            CHECK_OK(otter_graph_add_initializer(g, t));
        } else if (s->kind == BOOLS) {
            otter_tensor *t;
            CHECK_OK(otter_tensor_create(&t, s->name, OTTER_DTYPE_BOOL, s->rank, s->dims));
            for (int64_t e = 0; e < numel(s); e++) ((uint8_t *)t->data)[e] = s->ints[e] != 0;
            CHECK_OK(otter_graph_add_initializer(g, t));
        } else if (s->name[0]) {
            /* The shapes the gradient builder sees; the values fed at run time have s->dims. */
            static char params[6][4][16];
            const char *declared[4] = {NULL, NULL, NULL, NULL};
            int64_t dims[4];
            for (int d = 0; d < s->rank; d++) {
                dims[d] = s->dims[d];
                if (s->dynamic & (1u << d)) {
                    snprintf(params[i][d], sizeof params[i][d], "%s_%d", s->name, d);
                    declared[d] = params[i][d];
                    dims[d] = -1;
                }
            }
            CHECK_OK(otter_graph_add_input(g, s->name, OTTER_DTYPE_FLOAT, s->dynamic & DYN_RANK ? -1 : s->rank, dims,
                                           s->dynamic ? declared : NULL));
        }
    }
    const char *outs[4] = {"y0", "y1", "y2", "y3"};
    otter_node *n;
    CHECK_OK(otter_node_create(&n, c->op, "op", (size_t)c->n_in, names, (size_t)c->n_out, outs));
    if (c->domain) CHECK_OK(otter_node_set_domain(n, c->domain));
    if (c->attrs) c->attrs(n);
    CHECK_OK(otter_graph_add_node(g, n));
    const char *sums[4];
    static char buf[4][3][16];
    int64_t no_axes = 0;
    (void)no_axes;
    for (int j = 0; j < c->n_out; j++) {
        snprintf(buf[j][0], 16, "sq%d", j);
        snprintf(buf[j][1], 16, "s%d", j);
        const char *in2[] = {outs[j], outs[j]}, *o1[] = {buf[j][0]};
        CHECK_OK(otter_node_create(&n, "Mul", buf[j][0], 2, in2, 1, o1));
        CHECK_OK(otter_graph_add_node(g, n));
        const char *in1[] = {buf[j][0]}, *o2[] = {buf[j][1]};
        CHECK_OK(otter_node_create(&n, "ReduceSum", buf[j][1], 1, in1, 1, o2));
        CHECK_OK(otter_node_set_attr_int(n, "keepdims", 0));
        CHECK_OK(otter_graph_add_node(g, n));
        sums[j] = buf[j][1];
    }
    const char *total = "total";
    CHECK_OK(otter_node_create(&n, "Sum", "total", (size_t)c->n_out, sums, 1, &total));
    CHECK_OK(otter_graph_add_node(g, n));
    otter_tensor *half;
    float h = 0.5f;
    CHECK_OK(otter_tensor_from_data(&half, "half", OTTER_DTYPE_FLOAT, 0, NULL, &h));
    CHECK_OK(otter_graph_add_initializer(g, half));
    const char *lin[] = {"total", "half"}, *lout[] = {"loss"};
    CHECK_OK(otter_node_create(&n, "Mul", "loss", 2, lin, 1, lout));
    CHECK_OK(otter_graph_add_node(g, n));
    CHECK_OK(otter_graph_add_output(g, "loss", OTTER_DTYPE_FLOAT, 0, NULL, NULL));
    return m;
}

static double run_loss(otter_session *s, size_t n, const char **names, const otter_tensor **vals) {
    otter_tensor *out[1] = {NULL};
    const char *on[] = {"loss"};
    otter_status st = otter_session_run(s, n, names, vals, 1, on, out);
    if (st != OTTER_OK) {
        fprintf(stderr, "forward run failed: %s\n", otter_last_error());
        return NAN;
    }
    double v = *(float *)out[0]->data;
    otter_tensor_free(out[0]);
    return v;
}

static void run_case(const grad_case *c) {
    otter_model *fwd = forward_model(c);
    otter_model *bwd;
    CHECK_OK(otter_model_clone(&bwd, fwd));
    const char *wrt[6];
    size_t n_wrt = 0;
    for (int i = 0; i < c->n_in; i++)
        if (is_wrt(&c->in[i])) wrt[n_wrt++] = c->in[i].name;
    otter_grad_options go = {.loss = "loss", .n_wrt = n_wrt, .wrt = wrt};
    otter_status st = otter_model_add_gradients(bwd, &go);
    if (st != OTTER_OK) {
        tu_failures++;
        fprintf(stderr, "%s: building gradients failed: %s\n", c->label, otter_last_error());
        otter_model_free(fwd);
        otter_model_free(bwd);
        return;
    }
    /* Static shapes keep the static reduction: BroadcastGradientArgs only where some input is symbolic. */
    bool symbolic = false;
    for (int i = 0; i < c->n_in; i++) symbolic |= c->in[i].dynamic != 0;
    size_t run_time_reductions = 0;
    for (size_t i = 0; i < bwd->graph->n_nodes; i++)
        run_time_reductions += strcmp(bwd->graph->nodes[i]->op_type, "BroadcastGradientArgs") == 0;
    if (!symbolic && run_time_reductions) {
        tu_failures++;
        fprintf(stderr, "%s: static shapes, yet %zu BroadcastGradientArgs nodes\n", c->label, run_time_reductions);
    }
    char gnames[6][64];
    const char *out_names[6];
    for (size_t k = 0; k < n_wrt; k++) {
        snprintf(gnames[k], sizeof gnames[k], "%s_grad", wrt[k]);
        out_names[k] = gnames[k];
        CHECK_OK(otter_graph_add_output(bwd->graph, gnames[k], OTTER_DTYPE_FLOAT, -1, NULL, NULL));
    }
    /* Input values. */
    otter_tensor *vals[6];
    const char *in_names[6];
    size_t n_vals = 0;
    for (int i = 0; i < c->n_in; i++) {
        const input_spec *s = &c->in[i];
        if (s->kind == INTS || s->kind == BOOLS || !s->name[0]) continue;
        otter_tensor *t;
        CHECK_OK(otter_tensor_create(&t, s->name, OTTER_DTYPE_FLOAT, s->rank, s->dims));
        float *d = t->data;
        for (int64_t e = 0; e < numel(s); e++)
            /* SPREAD: distinct values 0.1 apart, so a max never changes hands within eps. */
            /* WIDE: -4.45, -4.15, ... 0.3 apart: every piece of HardSigmoid / HardSwish (kinks at ±2.5, ±3)
             * and at least 0.05 from a kink. */
            d[e] = s->kind == SPREAD       ? (float)((e * 37) % numel(s)) * 0.1f - 1.0f
                   : s->kind == WIDE       ? (float)((e * 37) % numel(s)) * 0.3f - 4.45f
                   : s->kind == RATIO      ? 0.3f
                   : s->kind == POS_FIXED  ? 0.5f + 0.5f * fabsf(frand())
                   : s->kind == MINUS_HALF ? -0.5f
                   : s->kind == HALF       ? 0.5f
                   : s->kind == POS        ? 0.5f + 0.5f * fabsf(frand())
                   : s->kind == PROB       ? 0.5f + 0.4f * frand()
                                           : away_from_kinks();
        vals[n_vals] = t;
        in_names[n_vals++] = s->name;
    }
    otter_session_options so = {.n_threads = 1};
    otter_session *sb = NULL, *sf = NULL;
    st = otter_session_create(&sb, bwd, &so);
    if (st == OTTER_OK) st = otter_session_create(&sf, fwd, &so);
    if (st != OTTER_OK) {
        tu_failures++;
        fprintf(stderr, "%s: session failed: %s\n", c->label, otter_last_error());
        goto done;
    }
    otter_tensor *grads[6] = {NULL};
    st = otter_session_run(sb, n_vals, in_names, (const otter_tensor *const *)vals, n_wrt, out_names, grads);
    if (st != OTTER_OK) {
        tu_failures++;
        fprintf(stderr, "%s: gradient run failed: %s\n", c->label, otter_last_error());
        goto done;
    }
    double worst = 0, tol = c->tol ? c->tol : 2e-2;
    const float eps = 1e-2f;
    size_t compared = 0;
    bool ok = true;
    for (size_t k = 0; k < n_wrt; k++) {
        size_t vi = 0;
        while (strcmp(in_names[vi], wrt[k]) != 0) vi++;
        float *x = vals[vi]->data;
        int64_t ne = otter_tensor_numel(vals[vi]);
        if (otter_tensor_numel(grads[k]) != ne) {
            fprintf(stderr, "%s: gradient of %s has %lld elements, expected %lld\n", c->label, wrt[k],
                    (long long)otter_tensor_numel(grads[k]), (long long)ne);
            ok = false;
            continue;
        }
        for (int64_t e = 0; e < ne; e++) {
            float keep = x[e];
            x[e] = keep + eps;
            double lp = run_loss(sf, n_vals, in_names, (const otter_tensor **)vals);
            x[e] = keep - eps;
            double lm = run_loss(sf, n_vals, in_names, (const otter_tensor **)vals);
            x[e] = keep;
            double num = (lp - lm) / (2.0 * eps), ana = ((float *)grads[k]->data)[e];
            worst = tu_worse(worst, fabs(ana - num) / (1.0 + fabs(num)));
            if (!(fabs(ana - num) <= tol + tol * fabs(num))) {
                if (ok)
                    fprintf(stderr, "%s: d/d%s[%lld]: analytic %.6f, numeric %.6f\n", c->label, wrt[k], (long long)e,
                            ana, num);
                ok = false;
            }
            compared++;
        }
    }
    tu_checks++;
    if (!ok) tu_failures++;
    printf("%-28s %4zu elements, worst relative error %.2e %s\n", c->label, compared, worst, ok ? "ok" : "FAILED");
    for (size_t k = 0; k < n_wrt; k++) otter_tensor_free(grads[k]);
done:
    otter_session_free(sb);
    otter_session_free(sf);
    for (size_t i = 0; i < n_vals; i++) otter_tensor_free(vals[i]);
    otter_model_free(fwd);
    otter_model_free(bwd);
}

/* ---- attribute setters ---- */
static void a_transA(otter_node *n) { otter_node_set_attr_int(n, "transA", 1); }
static void a_transB(otter_node *n) {
    otter_node_set_attr_int(n, "transB", 1);
    otter_node_set_attr_float(n, "alpha", 0.7f);
    otter_node_set_attr_float(n, "beta", 1.3f);
}
static void a_transAB(otter_node *n) {
    otter_node_set_attr_int(n, "transA", 1);
    otter_node_set_attr_int(n, "transB", 1);
}
static void a_leaky(otter_node *n) { otter_node_set_attr_float(n, "alpha", 0.1f); }
static void a_perm(otter_node *n) {
    int64_t p[3] = {2, 0, 1};
    otter_node_set_attr_ints(n, "perm", 3, p);
}
static void a_axis1(otter_node *n) { otter_node_set_attr_int(n, "axis", 1); }
static void a_keep0(otter_node *n) { otter_node_set_attr_int(n, "keepdims", 0); }
static void a_einsum(otter_node *n) { otter_node_set_attr_string(n, "equation", "bij,bjk->bik"); }
static void a_einsum2(otter_node *n) { otter_node_set_attr_string(n, "equation", "ij,kj->ik"); }
static void a_nll(otter_node *n) { otter_node_set_attr_string(n, "reduction", "mean"); }
static void a_nll_sum_ignore(otter_node *n) {
    otter_node_set_attr_string(n, "reduction", "sum");
    otter_node_set_attr_int(n, "ignore_index", 1);
}

static void a_conv(otter_node *n) {
    int64_t k[2] = {3, 3}, p[4] = {1, 0, 1, 1}, st[2] = {2, 1};
    otter_node_set_attr_ints(n, "kernel_shape", 2, k);
    otter_node_set_attr_ints(n, "pads", 4, p);
    otter_node_set_attr_ints(n, "strides", 2, st);
}
static void a_conv_group(otter_node *n) {
    int64_t k[1] = {3}, d[1] = {2};
    otter_node_set_attr_ints(n, "kernel_shape", 1, k);
    otter_node_set_attr_ints(n, "dilations", 1, d);
    otter_node_set_attr_int(n, "group", 2);
}
static void a_convt(otter_node *n) {
    int64_t k[2] = {3, 3}, st[2] = {2, 2}, p[4] = {1, 1, 0, 0};
    otter_node_set_attr_ints(n, "kernel_shape", 2, k);
    otter_node_set_attr_ints(n, "strides", 2, st);
    otter_node_set_attr_ints(n, "pads", 4, p);
}
static void a_pool(otter_node *n) {
    int64_t k[2] = {2, 2}, st[2] = {2, 2};
    otter_node_set_attr_ints(n, "kernel_shape", 2, k);
    otter_node_set_attr_ints(n, "strides", 2, st);
}
static void a_avgpool_pad(otter_node *n) {
    int64_t k[2] = {3, 3}, p[4] = {1, 1, 1, 1};
    otter_node_set_attr_ints(n, "kernel_shape", 2, k);
    otter_node_set_attr_ints(n, "pads", 4, p);
}
static void a_avgpool_pad_incl(otter_node *n) {
    a_avgpool_pad(n);
    otter_node_set_attr_int(n, "count_include_pad", 1);
}
static void a_cast_float(otter_node *n) { otter_node_set_attr_int(n, "to", OTTER_DTYPE_FLOAT); }
static void a_sce_weight_ignore(otter_node *n) {
    otter_node_set_attr_string(n, "reduction", "mean");
    otter_node_set_attr_int(n, "ignore_index", 1);
}
static void a_axis_last(otter_node *n) { otter_node_set_attr_int(n, "axis", -1); }
static void a_hard_sigmoid(otter_node *n) { /* kinks at x = -1.2 and 0.8, between WIDE's values */
    otter_node_set_attr_float(n, "alpha", 0.5f);
    otter_node_set_attr_float(n, "beta", 0.6f);
}
static void a_bn_train(otter_node *n) {
    otter_node_set_attr_int(n, "training_mode", 1);
    otter_node_set_attr_float(n, "epsilon", 1e-3f);
}
static void a_dropout(otter_node *n) { otter_node_set_attr_int(n, "seed", 5); }
static void a_sce(otter_node *n) { otter_node_set_attr_string(n, "reduction", "mean"); }
static void a_gather(otter_node *n) { otter_node_set_attr_int(n, "axis", 1); }

#define SHAPE(...)                                                                                                     \
    (sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), { __VA_ARGS__ }

static const grad_case CASES[] = {
    {"Add broadcast", "Add", NULL, 0, 2, {{"a", RAND, SHAPE(2, 3)}, {"b", RAND, SHAPE(3)}}, 1},
    {"Add rank-1 dims", "Add", NULL, 0, 2, {{"a", RAND, SHAPE(2, 1, 3)}, {"b", RAND, SHAPE(4, 1)}}, 1},
    {"Sub", "Sub", NULL, 0, 2, {{"a", RAND, SHAPE(2, 3)}, {"b", RAND, SHAPE(1, 3)}}, 1},
    {"Mul broadcast", "Mul", NULL, 0, 2, {{"a", RAND, SHAPE(2, 3)}, {"b", RAND, SHAPE(2, 1)}}, 1},
    {"Div", "Div", NULL, 0, 2, {{"a", RAND, SHAPE(2, 3)}, {"b", POS, SHAPE(3)}}, 1},
    {"Neg", "Neg", NULL, 0, 1, {{"x", RAND, SHAPE(5)}}, 1},
    {"Pow", "Pow", NULL, 0, 2, {{"a", POS, SHAPE(2, 3)}, {"b", RAND, SHAPE(3)}}, 1},
    {"Sqrt", "Sqrt", NULL, 0, 1, {{"x", POS, SHAPE(6)}}, 1},
    {"Exp", "Exp", NULL, 0, 1, {{"x", RAND, SHAPE(6)}}, 1},
    {"Log", "Log", NULL, 0, 1, {{"x", POS, SHAPE(6)}}, 1},
    {"Abs", "Abs", NULL, 0, 1, {{"x", RAND, SHAPE(6)}}, 1},
    {"Reciprocal", "Reciprocal", NULL, 0, 1, {{"x", POS, SHAPE(4)}}, 1},
    {"LeakyRelu", "LeakyRelu", NULL, 0, 1, {{"x", RAND, SHAPE(8)}}, 1, a_leaky},
    {"Erf", "Erf", NULL, 0, 1, {{"x", RAND, SHAPE(6)}}, 1},
    {"HardSigmoid", "HardSigmoid", NULL, 0, 1, {{"x", WIDE, SHAPE(30)}}, 1},
    {"HardSigmoid alpha beta", "HardSigmoid", NULL, 0, 1, {{"x", WIDE, SHAPE(30)}}, 1, a_hard_sigmoid},
    {"HardSwish", "HardSwish", NULL, 14, 1, {{"x", WIDE, SHAPE(30)}}, 1},
    {"Clip", "Clip", NULL, 0, 3, {{"x", RAND, SHAPE(8)}, {"lo", MINUS_HALF, 0, {0}}, {"hi", HALF, 0, {0}}}, 1},
    {"Where",
     "Where",
     NULL,
     0,
     3,
     {{"c", BOOLS, SHAPE(2, 3), {1, 0, 0, 1, 1, 0}}, {"a", RAND, SHAPE(2, 3)}, {"b", RAND, SHAPE(3)}},
     1},
    {"Sum of three", "Sum", NULL, 0, 3, {{"a", RAND, SHAPE(2, 3)}, {"b", RAND, SHAPE(3)}, {"c", RAND, SHAPE(2, 1)}}, 1},
    {"Mean", "Mean", NULL, 0, 2, {{"a", RAND, SHAPE(2, 3)}, {"b", RAND, SHAPE(2, 3)}}, 1},
    {"Identity", "Identity", NULL, 0, 1, {{"x", RAND, SHAPE(3)}}, 1},
    {"Gemm", "Gemm", NULL, 0, 3, {{"a", RAND, SHAPE(3, 4)}, {"b", RAND, SHAPE(4, 2)}, {"c", RAND, SHAPE(2)}}, 1},
    {"Gemm transA",
     "Gemm",
     NULL,
     0,
     3,
     {{"a", RAND, SHAPE(4, 3)}, {"b", RAND, SHAPE(4, 2)}, {"c", RAND, SHAPE(3, 1)}},
     1,
     a_transA},
    {"Gemm transB alpha beta",
     "Gemm",
     NULL,
     0,
     3,
     {{"a", RAND, SHAPE(3, 4)}, {"b", RAND, SHAPE(2, 4)}, {"c", RAND, SHAPE(3, 2)}},
     1,
     a_transB},
    {"Gemm transA transB", "Gemm", NULL, 0, 2, {{"a", RAND, SHAPE(4, 3)}, {"b", RAND, SHAPE(2, 4)}}, 1, a_transAB},
    {"MatMul 2-D", "MatMul", NULL, 0, 2, {{"a", RAND, SHAPE(3, 4)}, {"b", RAND, SHAPE(4, 2)}}, 1},
    {"MatMul 3-D x 2-D", "MatMul", NULL, 0, 2, {{"a", RAND, SHAPE(2, 3, 4)}, {"b", RAND, SHAPE(4, 2)}}, 1},
    {"MatMul batch broadcast", "MatMul", NULL, 0, 2, {{"a", RAND, SHAPE(2, 3, 4)}, {"b", RAND, SHAPE(1, 4, 2)}}, 1},
    {"Reshape", "Reshape", NULL, 0, 2, {{"x", RAND, SHAPE(2, 6)}, {"s", INTS, SHAPE(2), {3, 4}}}, 1},
    {"Flatten", "Flatten", NULL, 0, 1, {{"x", RAND, SHAPE(2, 3, 2)}}, 1},
    {"Squeeze", "Squeeze", NULL, 0, 2, {{"x", RAND, SHAPE(2, 1, 3)}, {"ax", INTS, SHAPE(1), {1}}}, 1},
    {"Unsqueeze", "Unsqueeze", NULL, 0, 2, {{"x", RAND, SHAPE(2, 3)}, {"ax", INTS, SHAPE(1), {0}}}, 1},
    {"Transpose perm", "Transpose", NULL, 0, 1, {{"x", RAND, SHAPE(2, 3, 4)}}, 1, a_perm},
    {"Transpose default", "Transpose", NULL, 0, 1, {{"x", RAND, SHAPE(2, 3)}}, 1},
    {"Concat", "Concat", NULL, 0, 2, {{"a", RAND, SHAPE(2, 3)}, {"b", RAND, SHAPE(2, 2)}}, 1, a_axis1},
    {"Split", "Split", NULL, 0, 2, {{"x", RAND, SHAPE(2, 5)}, {"sp", INTS, SHAPE(2), {2, 3}}}, 2, a_axis1},
    {"Expand", "Expand", NULL, 0, 2, {{"x", RAND, SHAPE(3, 1)}, {"s", INTS, SHAPE(3), {2, 3, 4}}}, 1},
    {"Tile", "Tile", NULL, 0, 2, {{"x", RAND, SHAPE(2, 3)}, {"r", INTS, SHAPE(2), {2, 3}}}, 1},
    {"Pad constant", "Pad", NULL, 0, 2, {{"x", RAND, SHAPE(2, 3)}, {"p", INTS, SHAPE(4), {1, 0, 0, 2}}}, 1},
    {"ReduceSum axes", "ReduceSum", NULL, 0, 2, {{"x", RAND, SHAPE(2, 3, 4)}, {"ax", INTS, SHAPE(1), {1}}}, 1, a_keep0},
    {"ReduceSum all keepdims", "ReduceSum", NULL, 0, 1, {{"x", RAND, SHAPE(2, 3)}}, 1},
    {"ReduceMean axes", "ReduceMean", NULL, 0, 1, {{"x", RAND, SHAPE(2, 3, 4)}}, 1, a_keep0},
    {"Einsum batched matmul",
     "Einsum",
     NULL,
     0,
     2,
     {{"a", RAND, SHAPE(2, 3, 4)}, {"b", RAND, SHAPE(2, 4, 2)}},
     1,
     a_einsum},
    {"Einsum transposed", "Einsum", NULL, 0, 2, {{"a", RAND, SHAPE(3, 4)}, {"b", RAND, SHAPE(2, 4)}}, 1, a_einsum2},
    {"GlobalAveragePool", "GlobalAveragePool", NULL, 0, 1, {{"x", RAND, SHAPE(2, 3, 4, 4)}}, 1},
    {"NegativeLogLikelihoodLoss",
     "NegativeLogLikelihoodLoss",
     NULL,
     0,
     2,
     {{"x", RAND, SHAPE(4, 3)}, {"t", INTS, SHAPE(4), {0, 2, 1, 2}}},
     1,
     a_nll},
    {"NLL sum ignore_index",
     "NegativeLogLikelihoodLoss",
     NULL,
     0,
     2,
     {{"x", RAND, SHAPE(4, 3, 2)}, {"t", INTS, SHAPE(4, 2), {0, 2, 1, 1, 2, 0, 1, 0}}},
     1,
     a_nll_sum_ignore},
    /* Broadcast gradients decided at run time (symbolic dimensions, unknown ranks), and reductions over
     * broadcast axes below opset 13 (ReduceSum's axes an attribute). */
    {"Add dims symbolic", "Add", NULL, 0, 2, {{"a", RAND, SHAPE(2, 3), {0}, 1u}, {"b", RAND, SHAPE(1, 3), {0}, 1u}}, 1},
    {"MatMul batch broadcast opset 12",
     "MatMul",
     NULL,
     12,
     2,
     {{"a", RAND, SHAPE(2, 3, 4)}, {"b", RAND, SHAPE(1, 4, 2)}},
     1},
    {"MatMul 3-D x 2-D opset 12", "MatMul", NULL, 12, 2, {{"a", RAND, SHAPE(2, 3, 4)}, {"b", RAND, SHAPE(4, 2)}}, 1},
    {"Add dims symbolic opset 12 (ReduceSumTraining)",
     "Add",
     NULL,
     12,
     2,
     {{"a", RAND, SHAPE(2, 3), {0}, 1u}, {"b", RAND, SHAPE(1, 3), {0}, 1u}},
     1},
    {"Mul rank unknown", "Mul", NULL, 0, 2, {{"a", RAND, SHAPE(2, 3), {0}, DYN_RANK}, {"b", RAND, SHAPE(3)}}, 1},
    {"Div rank unknown scalar divisor",
     "Div",
     NULL,
     0,
     2,
     {{"a", RAND, SHAPE(2, 3), {0}, DYN_RANK}, {"b", POS, 0, {0}}},
     1},
    {"Sub leading and inner symbolic",
     "Sub",
     NULL,
     0,
     2,
     {{"a", RAND, SHAPE(2, 1, 3), {0}, 3u}, {"b", RAND, SHAPE(4, 3), {0}, 1u}},
     1},
    {"Pow exponent [1, 1] rank unknown",
     "Pow",
     NULL,
     14,
     2,
     {{"a", POS, SHAPE(2, 3), {0}, DYN_RANK}, {"b", RAND, SHAPE(1, 1)}},
     1},
    {"Where dims symbolic",
     "Where",
     NULL,
     0,
     3,
     {{"c", BOOLS, SHAPE(2, 3), {1, 0, 0, 1, 1, 0}},
      {"a", RAND, SHAPE(2, 1), {0}, 1u},
      {"b", RAND, SHAPE(1, 3), {0}, 2u}},
     1},
    /* Rules that emit ONNX Runtime's com.microsoft gradient operators. */
    {"Relu", "Relu", NULL, 0, 1, {{"x", RAND, SHAPE(2, 5)}}, 1},
    {"Sigmoid", "Sigmoid", NULL, 0, 1, {{"x", RAND, SHAPE(2, 5)}}, 1},
    {"Tanh", "Tanh", NULL, 0, 1, {{"x", RAND, SHAPE(2, 5)}}, 1},
    {"Softmax", "Softmax", NULL, 0, 1, {{"x", RAND, SHAPE(2, 3, 4)}}, 1, a_axis1},
    {"LogSoftmax", "LogSoftmax", NULL, 0, 1, {{"x", RAND, SHAPE(3, 4)}}, 1, a_axis_last},
    {"Conv 2-D strided padded",
     "Conv",
     NULL,
     0,
     3,
     {{"x", RAND, SHAPE(2, 2, 5, 4)}, {"w", RAND, SHAPE(3, 2, 3, 3)}, {"b", RAND, SHAPE(3)}},
     1,
     a_conv},
    {"Conv 1-D groups dilations",
     "Conv",
     NULL,
     0,
     2,
     {{"x", RAND, SHAPE(1, 4, 7)}, {"w", RAND, SHAPE(2, 2, 3)}},
     1,
     a_conv_group},
    {"ConvTranspose",
     "ConvTranspose",
     NULL,
     0,
     3,
     {{"x", RAND, SHAPE(1, 2, 3, 3)}, {"w", RAND, SHAPE(2, 3, 3, 3)}, {"b", RAND, SHAPE(3)}},
     1,
     a_convt},
    {"MaxPool", "MaxPool", NULL, 0, 1, {{"x", SPREAD, SHAPE(2, 2, 4, 4)}}, 1, a_pool},
    {"AveragePool padded", "AveragePool", NULL, 0, 1, {{"x", RAND, SHAPE(1, 2, 4, 4)}}, 1, a_avgpool_pad},
    {"AveragePool padded include_pad",
     "AveragePool",
     NULL,
     0,
     1,
     {{"x", RAND, SHAPE(1, 2, 5, 5)}},
     1,
     a_avgpool_pad_incl},
    {"AveragePool strided", "AveragePool", NULL, 0, 1, {{"x", RAND, SHAPE(2, 3, 5, 5)}}, 1, a_pool},
    {"MaxPool overlapping opset 17", "MaxPool", NULL, 17, 1, {{"x", SPREAD, SHAPE(1, 2, 5, 5)}}, 1, a_avgpool_pad},
    {"MaxPool overlapping opset 14", "MaxPool", NULL, 14, 1, {{"x", SPREAD, SHAPE(1, 2, 5, 5)}}, 1, a_avgpool_pad},
    {"MaxPool opset 14", "MaxPool", NULL, 14, 1, {{"x", SPREAD, SHAPE(2, 2, 4, 4)}}, 1, a_pool},
    {"LayerNormalization",
     "LayerNormalization",
     NULL,
     0,
     3,
     {{"x", RAND, SHAPE(3, 4)}, {"s", RAND, SHAPE(4)}, {"b", RAND, SHAPE(4)}},
     1,
     a_axis_last},
    {"BatchNormalization training",
     "BatchNormalization",
     NULL,
     15,
     5,
     {{"x", RAND, SHAPE(4, 2, 3)},
      {"s", RAND, SHAPE(2)},
      {"b", RAND, SHAPE(2)},
      {"m", FIXED, SHAPE(2)},
      {"v", POS_FIXED, SHAPE(2)}},
     1,
     a_bn_train},
    {"Dropout seeded",
     "Dropout",
     NULL,
     0,
     3,
     {{"x", RAND, SHAPE(4, 5)}, {"r", RATIO, 0, {0}}, {"t", BOOLS, 0, {1}}},
     1,
     a_dropout},
    {"SoftmaxCrossEntropyLoss",
     "SoftmaxCrossEntropyLoss",
     NULL,
     0,
     2,
     {{"x", RAND, SHAPE(4, 3)}, {"t", INTS, SHAPE(4), {0, 2, 1, 2}}},
     1,
     a_sce},
    {"Slice",
     "Slice",
     NULL,
     0,
     4,
     {{"x", RAND, SHAPE(4, 5)},
      {"st", INTS, SHAPE(2), {1, 0}},
      {"en", INTS, SHAPE(2), {3, 5}},
      {"ax", INTS, SHAPE(2), {0, 1}}},
     1},
    {"Gelu (com.microsoft)", "Gelu", "com.microsoft", 0, 1, {{"x", RAND, SHAPE(2, 5)}}, 1},
    {"FastGelu (com.microsoft)", "FastGelu", "com.microsoft", 0, 1, {{"x", RAND, SHAPE(2, 5)}}, 1},
    {"BatchNormInternal (com.microsoft)",
     "BatchNormInternal",
     "com.microsoft",
     0,
     5,
     {{"x", RAND, SHAPE(4, 2, 3)},
      {"s", RAND, SHAPE(2)},
      {"b", RAND, SHAPE(2)},
      {"m", FIXED, SHAPE(2)},
      {"v", POS_FIXED, SHAPE(2)}},
     1,
     a_bn_train},
    {"Cast", "Cast", NULL, 0, 1, {{"x", RAND, SHAPE(2, 3)}}, 1, a_cast_float},
    {"SoftmaxCrossEntropyLoss weight ignore_index",
     "SoftmaxCrossEntropyLoss",
     NULL,
     0,
     3,
     {{"x", RAND, SHAPE(5, 3)}, {"t", INTS, SHAPE(5), {0, 2, 1, 2, 1}}, {"w", POS_FIXED, SHAPE(3)}},
     1,
     a_sce_weight_ignore},
    {"Gather", "Gather", NULL, 0, 2, {{"x", RAND, SHAPE(3, 4)}, {"i", INTS, SHAPE(3), {2, 0, 2}}}, 1, a_gather},
};

/* Every gradient rule in the operator registry (otter ops) has a case above. */
static void check_every_rule_has_a_case(void) {
    size_t rules = 0, missing = 0;
    for (size_t i = 0; i < otter_ops_count(); i++) {
        otter_op_info op;
        CHECK_OK(otter_ops_get(i, &op));
        if (!op.gradient) continue;
        rules++;
        bool found = false;
        for (size_t c = 0; c < sizeof CASES / sizeof CASES[0] && !found; c++)
            found = strcmp(CASES[c].op, op.op_type) == 0 &&
                    strcmp(CASES[c].domain ? CASES[c].domain : "ai.onnx", op.domain) == 0;
        if (!found) {
            fprintf(stderr, "the gradient rule of %s %s has no finite-difference case\n", op.domain, op.op_type);
            missing++;
        }
    }
    CHECK(rules > 0 && missing == 0);
    printf("%zu gradient rules in the registry, %zu without a finite-difference case\n", rules, missing);
}

int main(int argc, char **argv) {
    const char *only = argc > 1 ? argv[1] : NULL;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++)
        if (!only || strstr(CASES[i].label, only)) run_case(&CASES[i]);
    if (!only) check_every_rule_has_a_case();
    return tu_finish("test_grad");
}
