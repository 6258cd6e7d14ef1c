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

enum {
    RAND,
    POS,
    INTS,
    BOOLS,
    FIXED,
    PROB,
    MINUS_HALF,
    HALF,
    POS_FIXED,
    RATIO,
    SPREAD,
    WIDE,
    TIES,
    ZEROED,
    FLOATS,
    UNIT,
    ABOVE_ONE,
    CYCLE3,
    LO,
    HI,
    DUP_ROW,
    GRID
};

typedef struct input_spec {
    const char *name;
    int kind; /* RAND / POS: float input differentiated; INTS: int64 initializer; FIXED: float, not differentiated;
                 PROB: float in (0.1, 0.9), not differentiated */
    int rank;
    int64_t dims[5];
    int64_t ints[8];  /* INTS values */
    float floats[8];  /* FLOATS values: a float initializer (Resize's scales) */
    unsigned dynamic; /* bit i: dimension i is declared symbolic ("<name>_<i>"); DYN_RANK: no shape declared */
} input_spec;

#define DYN_RANK (1u << 31)

typedef struct grad_case {
    const char *label;
    const char *op;
    const char *domain;
    int opset;
    int n_in;
    input_spec in[8];
    int n_out;
    void (*attrs)(otter_node *n);
    double tol;      /* 0: the default */
    bool shifted;    /* loss = 0.5 * sum((y - 1)^2), so that dY = y - 1 is not 0 where y is (ReduceProd's zeros) */
    int unused_outs; /* outputs after the n_out ones that the loss leaves out (TopK's Indices) */
    int node_inputs; /* inputs the node reads itself (0: all); the rest are read by its subgraphs */
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
    return s->kind == RAND || s->kind == POS || s->kind == SPREAD || s->kind == WIDE || s->kind == TIES ||
           s->kind == ZEROED || s->kind == UNIT || s->kind == ABOVE_ONE || s->kind == CYCLE3 || s->kind == LO ||
           s->kind == HI || s->kind == DUP_ROW || s->kind == GRID;
}

/* Forward model: the op, then loss = 0.5 * sum over outputs of sum(y*y). */
static otter_model *forward_model(const grad_case *c) {
    otter_model *m;
    CHECK_OK(otter_model_create(&m, c->label, c->opset ? c->opset : 17));
    if (c->domain) CHECK_OK(otter_model_set_opset(m, c->domain, 1));
    otter_graph *g = m->graph;
    const char *names[8];
    for (int i = 0; i < c->n_in; i++) {
        const input_spec *s = &c->in[i];
        names[i] = s->name;
        if (s->kind == INTS) {
            otter_tensor *t;
            CHECK_OK(otter_tensor_from_data(&t, s->name, OTTER_DTYPE_INT64, s->rank, s->dims, s->ints));
            CHECK_OK(otter_graph_add_initializer(g, t));
        } else if (s->kind == FLOATS) {
            otter_tensor *t;
            CHECK_OK(otter_tensor_from_data(&t, s->name, OTTER_DTYPE_FLOAT, s->rank, s->dims, s->floats));
            CHECK_OK(otter_graph_add_initializer(g, t));
        } else if (s->kind == BOOLS) {
            otter_tensor *t;
            CHECK_OK(otter_tensor_create(&t, s->name, OTTER_DTYPE_BOOL, s->rank, s->dims));
            for (int64_t e = 0; e < numel(s); e++) ((uint8_t *)t->data)[e] = s->ints[e] != 0;
            CHECK_OK(otter_graph_add_initializer(g, t));
        } else if (s->name[0]) {
            /* The shapes the gradient builder sees; the values fed at run time have s->dims. */
            static char params[6][5][16];
            const char *declared[5] = {NULL};
            int64_t dims[5];
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
    CHECK_OK(otter_node_create(&n, c->op, "op", (size_t)(c->node_inputs ? c->node_inputs : c->n_in), names,
                               (size_t)(c->n_out + c->unused_outs), outs));
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
        const char *y = outs[j];
        if (c->shifted) {
            snprintf(buf[j][2], 16, "d%d", j);
            const char *sub_in[] = {outs[j], "one"}, *sub_out[] = {buf[j][2]};
            CHECK_OK(otter_node_create(&n, "Sub", buf[j][2], 2, sub_in, 1, sub_out));
            CHECK_OK(otter_graph_add_node(g, n));
            y = buf[j][2];
        }
        const char *in2[] = {y, y}, *o1[] = {buf[j][0]};
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
    otter_tensor *half, *one;
    float h = 0.5f, o = 1.0f;
    CHECK_OK(otter_tensor_from_data(&one, "one", OTTER_DTYPE_FLOAT, 0, NULL, &o));
    CHECK_OK(otter_graph_add_initializer(g, one));
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
    const char *wrt[8];
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
    char gnames[8][64];
    const char *out_names[8];
    for (size_t k = 0; k < n_wrt; k++) {
        snprintf(gnames[k], sizeof gnames[k], "%s_grad", wrt[k]);
        out_names[k] = gnames[k];
        CHECK_OK(otter_graph_add_output(bwd->graph, gnames[k], OTTER_DTYPE_FLOAT, -1, NULL, NULL));
    }
    /* Input values. */
    otter_tensor *vals[8];
    const char *in_names[8];
    size_t n_vals = 0;
    for (int i = 0; i < c->n_in; i++) {
        const input_spec *s = &c->in[i];
        if (s->kind == INTS || s->kind == BOOLS || s->kind == FLOATS || !s->name[0]) continue;
        otter_tensor *t;
        CHECK_OK(otter_tensor_create(&t, s->name, OTTER_DTYPE_FLOAT, s->rank, s->dims));
        float *d = t->data;
        for (int64_t e = 0; e < numel(s); e++)
            /* SPREAD: distinct values 0.1 apart, so a max never changes hands within eps. */
            /* WIDE: -4.45, -4.15, ... 0.3 apart: every piece of HardSigmoid / HardSwish (kinks at ±2.5, ±3)
             * and at least 0.05 from a kink. */
            /* TIES: rows of 4 (row r: 0.1 r + [0.1, 0.9, 0.9, 0.1]), so a max or min along the last axis,
             * or over a whole [R, 4] tensor, is held by exactly two elements: there central differences
             * see the even split (one side moves the extremum, the other doesn't).
             * ZEROED: exact zeros at multiples of 5 and 7 (rows of 4 with none, one and two zeros). */
            /* UNIT: inside (-0.8, 0.8), where Asin, Acos, Atanh and Tan are smooth; ABOVE_ONE: (1.2, 2), for Acosh.
             * CYCLE3: -0.4, 0, 0.4, ... repeating, so inputs of Max / Min tie where their elements line up. */
            /* LO / HI: Clip bounds -0.5 and 0.5, differentiated. */
            /* DUP_ROW: random [M, M] matrices whose last row repeats the first (singular, rank M-1).
             * GRID: GridSample coordinates -1.375 + 0.5 m (m = 0..6, some outside [-1, 1]) +- 0.05: on axes
             * of 5 with align_corners (x = 2 g + 2) or 4 without (x = 2 g + 1.5), the pixel coordinate's
             * fraction stays within 0.1 of 0.25 or 0.75, away from the kinks of interpolation, rounding and
             * padding. As DeformConv offsets, the sampling points' fractions stay within 0.05 of 0.125 or 0.625. */
            d[e] = s->kind == DUP_ROW && (e / s->dims[s->rank - 1]) % s->dims[s->rank - 1] == s->dims[s->rank - 1] - 1
                       ? d[e - (s->dims[s->rank - 1] - 1) * s->dims[s->rank - 1]]
                   : s->kind == TIES       ? 0.1f + 0.1f * (float)(e / 4) + (e % 4 == 1 || e % 4 == 2 ? 0.8f : 0.0f)
                   : s->kind == ZEROED     ? (e % 5 == 0 || e % 7 == 0 ? 0.0f : away_from_kinks())
                   : s->kind == SPREAD     ? (float)((e * 37) % numel(s)) * 0.1f - 1.0f
                   : s->kind == UNIT       ? 0.8f * frand()
                   : s->kind == ABOVE_ONE  ? 1.6f + 0.4f * frand()
                   : s->kind == CYCLE3     ? (float)(e % 3 - 1) * 0.4f
                   : s->kind == LO         ? -0.5f
                   : s->kind == HI         ? 0.5f
                   : s->kind == GRID       ? -1.375f + 0.5f * (float)((e * 3) % 7) + 0.05f * frand()
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
    otter_tensor *grads[8] = {NULL};
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
static void a_conv_depthwise(otter_node *n) {
    int64_t k[2] = {3, 3}, p[4] = {1, 0, 1, 2}, st[2] = {2, 2};
    otter_node_set_attr_ints(n, "kernel_shape", 2, k);
    otter_node_set_attr_ints(n, "pads", 4, p);
    otter_node_set_attr_ints(n, "strides", 2, st);
    otter_node_set_attr_int(n, "group", 3);
}
static void a_conv_depthwise_dil(otter_node *n) {
    int64_t k[2] = {2, 3}, p[4] = {0, 2, 1, 1}, d[2] = {2, 1};
    otter_node_set_attr_ints(n, "kernel_shape", 2, k);
    otter_node_set_attr_ints(n, "pads", 4, p);
    otter_node_set_attr_ints(n, "dilations", 2, d);
    otter_node_set_attr_int(n, "group", 4);
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
static void a_alpha_07(otter_node *n) { otter_node_set_attr_float(n, "alpha", 0.7f); }
static void a_alpha_15(otter_node *n) { otter_node_set_attr_float(n, "alpha", 1.5f); }
static void a_selu(otter_node *n) {
    otter_node_set_attr_float(n, "alpha", 1.2f);
    otter_node_set_attr_float(n, "gamma", 0.8f);
}

/* ---- subgraphs of control-flow cases ---- */
static otter_node *node1(otter_graph *g, const char *op, const char *in0, const char *in1, const char *out) {
    otter_node *n;
    const char *ins[] = {in0, in1}, *outs[] = {out};
    CHECK_OK(otter_node_create(&n, op, out, in1 ? 2 : 1, ins, 1, outs));
    CHECK_OK(otter_graph_add_node(g, n));
    return n;
}
static otter_graph *subgraph(const char *name) {
    otter_graph *g;
    CHECK_OK(otter_graph_create(&g, name));
    return g;
}
/* then: a * b (broadcast); else: tanh(a), so b's gradient is zero there. */
static void a_if(otter_node *n) {
    otter_graph *t = subgraph("then"), *e = subgraph("else");
    node1(t, "Mul", "a", "b", "then_out");
    CHECK_OK(otter_graph_add_output(t, "then_out", OTTER_DTYPE_FLOAT, -1, NULL, NULL));
    node1(e, "Tanh", "a", NULL, "else_out");
    CHECK_OK(otter_graph_add_output(e, "else_out", OTTER_DTYPE_FLOAT, -1, NULL, NULL));
    CHECK_OK(otter_node_set_attr_graph(n, "then_branch", t));
    CHECK_OK(otter_node_set_attr_graph(n, "else_branch", e));
}
/* Loop body: h = tanh(h @ W + 0.1 * i), carried and also scanned out; the condition passes through
 * (or, as PyTorch exports it, an outer constant true does). */
static void loop_body(otter_node *n, const char *cond_source) {
    otter_graph *b = subgraph("body");
    int64_t h_dims[2] = {1, 4};
    CHECK_OK(otter_graph_add_input(b, "i", OTTER_DTYPE_INT64, 0, NULL, NULL));
    CHECK_OK(otter_graph_add_input(b, "cond_in", OTTER_DTYPE_BOOL, 0, NULL, NULL));
    CHECK_OK(otter_graph_add_input(b, "h_in", OTTER_DTYPE_FLOAT, 2, h_dims, NULL));
    otter_tensor *tenth;
    float v = 0.1f;
    CHECK_OK(otter_tensor_from_data(&tenth, "tenth", OTTER_DTYPE_FLOAT, 0, NULL, &v));
    CHECK_OK(otter_graph_add_initializer(b, tenth));
    CHECK_OK(otter_node_set_attr_int(node1(b, "Cast", "i", NULL, "i_f"), "to", OTTER_DTYPE_FLOAT));
    node1(b, "Mul", "i_f", "tenth", "shift");
    node1(b, "MatMul", "h_in", "W", "mm");
    node1(b, "Add", "mm", "shift", "pre");
    node1(b, "Tanh", "pre", NULL, "h_out");
    node1(b, "Identity", cond_source, NULL, "cond_out");
    node1(b, "Identity", "h_out", NULL, "h_scan");
    CHECK_OK(otter_graph_add_output(b, "cond_out", OTTER_DTYPE_BOOL, 0, NULL, NULL));
    CHECK_OK(otter_graph_add_output(b, "h_out", OTTER_DTYPE_FLOAT, 2, h_dims, NULL));
    CHECK_OK(otter_graph_add_output(b, "h_scan", OTTER_DTYPE_FLOAT, 2, h_dims, NULL));
    CHECK_OK(otter_node_set_attr_graph(n, "body", b));
}
static void a_loop(otter_node *n) { loop_body(n, "cond_in"); }
static void a_loop_outer_true(otter_node *n) { loop_body(n, "c"); }
/* Scan body: h = tanh(h @ W + x_t), carried; y_t = h * x_t scanned out. */
static void scan_body(otter_node *n) {
    otter_graph *b = subgraph("body");
    int64_t dims[2] = {2, 4};
    CHECK_OK(otter_graph_add_input(b, "h_in", OTTER_DTYPE_FLOAT, 2, dims, NULL));
    CHECK_OK(otter_graph_add_input(b, "x_t", OTTER_DTYPE_FLOAT, 2, dims, NULL));
    node1(b, "MatMul", "h_in", "W", "mm");
    node1(b, "Add", "mm", "x_t", "pre");
    node1(b, "Tanh", "pre", NULL, "h_out");
    node1(b, "Mul", "h_out", "x_t", "y_t");
    CHECK_OK(otter_graph_add_output(b, "h_out", OTTER_DTYPE_FLOAT, 2, dims, NULL));
    CHECK_OK(otter_graph_add_output(b, "y_t", OTTER_DTYPE_FLOAT, 2, dims, NULL));
    CHECK_OK(otter_node_set_attr_graph(n, "body", b));
    CHECK_OK(otter_node_set_attr_int(n, "num_scan_inputs", 1));
}
static void a_scan(otter_node *n) { scan_body(n); }
/* Over axis 1, backwards, stacking outputs along axis 1 backwards too. */
static void a_scan_axis1_reverse(otter_node *n) {
    int64_t one = 1;
    scan_body(n);
    CHECK_OK(otter_node_set_attr_ints(n, "scan_input_axes", 1, &one));
    CHECK_OK(otter_node_set_attr_ints(n, "scan_input_directions", 1, &one));
    CHECK_OK(otter_node_set_attr_ints(n, "scan_output_axes", 1, &one));
    CHECK_OK(otter_node_set_attr_ints(n, "scan_output_directions", 1, &one));
}

static void a_axes_last_keep0(otter_node *n) {
    int64_t ax = -1;
    otter_node_set_attr_ints(n, "axes", 1, &ax);
    otter_node_set_attr_int(n, "keepdims", 0);
}
static void a_axes_0_2(otter_node *n) {
    int64_t ax[2] = {0, 2};
    otter_node_set_attr_ints(n, "axes", 2, ax);
}
static void a_axes_1_keep0(otter_node *n) {
    int64_t ax = 1;
    otter_node_set_attr_ints(n, "axes", 1, &ax);
    otter_node_set_attr_int(n, "keepdims", 0);
}
static void a_noop(otter_node *n) { otter_node_set_attr_int(n, "noop_with_empty_axes", 1); }
static void a_lp1_axis0(otter_node *n) {
    otter_node_set_attr_int(n, "p", 1);
    otter_node_set_attr_int(n, "axis", 0);
}

static void a_exclusive(otter_node *n) { otter_node_set_attr_int(n, "exclusive", 1); }
static void a_reverse(otter_node *n) { otter_node_set_attr_int(n, "reverse", 1); }
static void a_exclusive_reverse(otter_node *n) {
    a_exclusive(n);
    a_reverse(n);
}
static void a_topk_smallest_axis0(otter_node *n) {
    otter_node_set_attr_int(n, "axis", 0);
    otter_node_set_attr_int(n, "largest", 0);
}
static void a_batch_dims1(otter_node *n) { otter_node_set_attr_int(n, "batch_dims", 1); }
static void a_block2(otter_node *n) { otter_node_set_attr_int(n, "blocksize", 2); }
static void a_block2_crd(otter_node *n) {
    a_block2(n);
    otter_node_set_attr_string(n, "mode", "CRD");
}

static void a_pad_reflect(otter_node *n) { otter_node_set_attr_string(n, "mode", "reflect"); }
static void a_pad_edge(otter_node *n) { otter_node_set_attr_string(n, "mode", "edge"); }
static void a_pad_wrap(otter_node *n) { otter_node_set_attr_string(n, "mode", "wrap"); }
static void a_pad_edge_attr(otter_node *n) {
    int64_t pads[4] = {2, 0, 1, 3};
    a_pad_edge(n);
    otter_node_set_attr_ints(n, "pads", 4, pads);
}
static void a_hidden4(otter_node *n) { otter_node_set_attr_int(n, "hidden_size", 4); }
static void a_dir_reverse(otter_node *n) { otter_node_set_attr_string(n, "direction", "reverse"); }
static void a_bidirectional(otter_node *n) { otter_node_set_attr_string(n, "direction", "bidirectional"); }
static void a_lbr(otter_node *n) { otter_node_set_attr_int(n, "linear_before_reset", 1); }
static void a_reverse_lbr(otter_node *n) {
    a_dir_reverse(n);
    a_lbr(n);
}
static void a_bidirectional_lbr(otter_node *n) {
    a_bidirectional(n);
    a_lbr(n);
}
static void a_layout1(otter_node *n) {
    a_bidirectional(n);
    otter_node_set_attr_int(n, "layout", 1);
}
static void a_lstm_layout1_input_forget(otter_node *n) {
    a_layout1(n);
    otter_node_set_attr_int(n, "input_forget", 1);
}
/* clip: a kink at each bound. The clip cases take SPREAD's fixed values, and these bounds leave the
 * same gates clipped (a third to nine tenths of them) in every finite-difference run. */
static void a_clip(otter_node *n) { otter_node_set_attr_float(n, "clip", 1.0f); }
static void a_clip_min_max(otter_node *n) {
    otter_node_set_attr_float(n, "min", -0.5f);
    otter_node_set_attr_float(n, "max", 0.5f);
}
static void a_clip_lstm(otter_node *n) { otter_node_set_attr_float(n, "clip", 1.2f); }
static void a_clip_bidirectional(otter_node *n) {
    a_clip(n);
    a_bidirectional(n);
}
static void a_gru_activations(otter_node *n) { /* smooth ones, so finite differences hold */
    const char *names[2] = {"Sigmoid", "Softsign"};
    otter_node_set_attr_strings(n, "activations", 2, names);
}
static void a_rnn_activation(otter_node *n) {
    const char *names[1] = {"ScaledTanh"};
    float alpha = 1.5f, beta = 0.7f;
    otter_node_set_attr_strings(n, "activations", 1, names);
    otter_node_set_attr_floats(n, "activation_alpha", 1, &alpha);
    otter_node_set_attr_floats(n, "activation_beta", 1, &beta);
    a_dir_reverse(n);
}
/* normalization, attention, resizing */
static void a_groups2(otter_node *n) { otter_node_set_attr_int(n, "num_groups", 2); }
static void a_rms_axis1(otter_node *n) {
    otter_node_set_attr_int(n, "axis", 1);
    otter_node_set_attr_float(n, "epsilon", 1e-3f);
}
static void resize_attrs(otter_node *n, const char *mode, const char *ct, const char *nm) {
    otter_node_set_attr_string(n, "mode", mode);
    if (ct) otter_node_set_attr_string(n, "coordinate_transformation_mode", ct);
    if (nm) otter_node_set_attr_string(n, "nearest_mode", nm);
}
static void a_nearest_asym_floor(otter_node *n) { resize_attrs(n, "nearest", "asymmetric", "floor"); }
static void a_nearest_half_pixel(otter_node *n) { resize_attrs(n, "nearest", NULL, NULL); }
static void a_nearest_tf_ceil(otter_node *n) {
    resize_attrs(n, "nearest", "tf_half_pixel_for_nn", "round_prefer_ceil");
}
static void a_nearest_align_ceil(otter_node *n) { resize_attrs(n, "nearest", "align_corners", "ceil"); }
static void a_linear_align(otter_node *n) { resize_attrs(n, "linear", "align_corners", NULL); }
static void a_linear_half_pixel(otter_node *n) { resize_attrs(n, "linear", "half_pixel", NULL); }
static void a_linear_pytorch(otter_node *n) { resize_attrs(n, "linear", "pytorch_half_pixel", NULL); }
static void a_cubic_pytorch(otter_node *n) { resize_attrs(n, "cubic", "pytorch_half_pixel", NULL); }
static void a_cubic_align_exclude(otter_node *n) {
    resize_attrs(n, "cubic", "align_corners", NULL);
    otter_node_set_attr_float(n, "cubic_coeff_a", -0.5f);
    otter_node_set_attr_int(n, "exclude_outside", 1);
}
static void a_linear_antialias(otter_node *n) {
    resize_attrs(n, "linear", "half_pixel", NULL);
    otter_node_set_attr_int(n, "antialias", 1);
}
static void a_crop_resize(otter_node *n) {
    resize_attrs(n, "linear", "tf_crop_and_resize", NULL);
    otter_node_set_attr_float(n, "extrapolation_value", 0.5f);
}
static void a_mode_nearest(otter_node *n) { otter_node_set_attr_string(n, "mode", "nearest"); }
static void a_mode_linear(otter_node *n) { otter_node_set_attr_string(n, "mode", "linear"); }
static void a_upsample7(otter_node *n) {
    float sc[4] = {1, 1, 2, 1.5f};
    otter_node_set_attr_string(n, "mode", "linear");
    otter_node_set_attr_floats(n, "scales", 4, sc);
}
static void a_attn_causal_scale(otter_node *n) {
    otter_node_set_attr_int(n, "is_causal", 1);
    otter_node_set_attr_float(n, "scale", 0.7f);
}
static void a_attn_3d_gqa(otter_node *n) {
    otter_node_set_attr_int(n, "q_num_heads", 2);
    otter_node_set_attr_int(n, "kv_num_heads", 1);
}
static void a_attn_3d_softcap(otter_node *n) {
    otter_node_set_attr_int(n, "q_num_heads", 2);
    otter_node_set_attr_int(n, "kv_num_heads", 2);
    otter_node_set_attr_float(n, "softcap", 1.5f);
}
static void a_causal(otter_node *n) { otter_node_set_attr_int(n, "is_causal", 1); }
static void a_convt_groups(otter_node *n) {
    int64_t k[2] = {3, 2}, st[2] = {2, 1}, d[2] = {2, 1}, op[2] = {1, 0}, p[4] = {1, 0, 0, 1};
    otter_node_set_attr_int(n, "group", 2);
    otter_node_set_attr_ints(n, "kernel_shape", 2, k);
    otter_node_set_attr_ints(n, "strides", 2, st);
    otter_node_set_attr_ints(n, "dilations", 2, d);
    otter_node_set_attr_ints(n, "output_padding", 2, op);
    otter_node_set_attr_ints(n, "pads", 4, p);
}
static void a_convt_output_shape(otter_node *n) {
    int64_t st[2] = {2, 2}, os[2] = {6, 7};
    otter_node_set_attr_ints(n, "strides", 2, st);
    otter_node_set_attr_ints(n, "output_shape", 2, os);
    otter_node_set_attr_string(n, "auto_pad", "SAME_LOWER");
}
static void a_convt_1d(otter_node *n) {
    int64_t k[1] = {3}, st[1] = {3}, d[1] = {3}, op[1] = {2};
    otter_node_set_attr_int(n, "group", 3);
    otter_node_set_attr_ints(n, "strides", 1, st);
    otter_node_set_attr_ints(n, "dilations", 1, d);
    otter_node_set_attr_ints(n, "output_padding", 1, op);
    (void)k;
}

/* gradmore: attributes of the cases in the gradmore block. */
static void a_gelu_tanh(otter_node *n) { otter_node_set_attr_string(n, "approximate", "tanh"); }
static void a_alpha_half(otter_node *n) { otter_node_set_attr_float(n, "alpha", 0.5f); }
static void a_transB_alpha_half(otter_node *n) {
    a_transB(n);
    a_alpha_half(n);
}
static void a_transAB_alpha_half(otter_node *n) {
    a_transAB(n);
    a_alpha_half(n);
}
static void a_scale_down(otter_node *n) { otter_node_set_attr_int(n, "scale_down", 1); }
static void a_trilu_lower(otter_node *n) { otter_node_set_attr_int(n, "upper", 0); }
static void a_shrink(otter_node *n) {
    otter_node_set_attr_float(n, "lambd", 0.3f);
    otter_node_set_attr_float(n, "bias", 0.2f);
}
static void a_mvn_axes_last(otter_node *n) { otter_node_set_attr_ints(n, "axes", 1, (const int64_t[]){-1}); }
static void a_lrn3(otter_node *n) {
    otter_node_set_attr_int(n, "size", 3);
    otter_node_set_attr_float(n, "alpha", 0.6f);
    otter_node_set_attr_float(n, "beta", 0.75f);
    otter_node_set_attr_float(n, "bias", 1.5f);
}
static void a_rope_3d_interleaved(otter_node *n) {
    otter_node_set_attr_int(n, "num_heads", 2);
    otter_node_set_attr_int(n, "interleaved", 1);
}
static void a_rope_partial(otter_node *n) { otter_node_set_attr_int(n, "rotary_embedding_dim", 2); }
static void a_time_axis1_batch0(otter_node *n) {
    otter_node_set_attr_int(n, "time_axis", 1);
    otter_node_set_attr_int(n, "batch_axis", 0);
}
static void a_lrn2(otter_node *n) {
    otter_node_set_attr_int(n, "size", 2);
    otter_node_set_attr_float(n, "alpha", 0.8f);
    otter_node_set_attr_float(n, "beta", 0.5f);
    otter_node_set_attr_float(n, "bias", 1.0f);
}

/* math ops */
static void a_p1(otter_node *n) { otter_node_set_attr_int(n, "p", 1); }
static void a_p3(otter_node *n) { otter_node_set_attr_int(n, "p", 3); }
static void a_lppool_pad_p1(otter_node *n) {
    a_avgpool_pad(n);
    a_p1(n);
}
static void a_lppool_dilated_p3(otter_node *n) {
    int64_t k[2] = {2, 2}, d[2] = {2, 1}, st[2] = {1, 2};
    otter_node_set_attr_ints(n, "kernel_shape", 2, k);
    otter_node_set_attr_ints(n, "dilations", 2, d);
    otter_node_set_attr_ints(n, "strides", 2, st);
    a_p3(n);
}
static void a_lppool_ceil(otter_node *n) {
    int64_t k[2] = {3, 3}, st[2] = {2, 2}, p[4] = {1, 0, 0, 1};
    otter_node_set_attr_ints(n, "kernel_shape", 2, k);
    otter_node_set_attr_ints(n, "strides", 2, st);
    otter_node_set_attr_ints(n, "pads", 4, p);
    otter_node_set_attr_int(n, "ceil_mode", 1);
}

static void a_fmod(otter_node *n) { otter_node_set_attr_int(n, "fmod", 1); }
static void a_axes_1_2(otter_node *n) {
    int64_t axes[2] = {1, 2};
    otter_node_set_attr_ints(n, "axes", 2, axes);
}
static void a_axis0(otter_node *n) { otter_node_set_attr_int(n, "axis", 0); }
static void a_axis_minus1(otter_node *n) { otter_node_set_attr_int(n, "axis", -1); }
static void a_unpool2(otter_node *n) {
    int64_t k[2] = {2, 2}, st[2] = {2, 2};
    otter_node_set_attr_ints(n, "kernel_shape", 2, k);
    otter_node_set_attr_ints(n, "strides", 2, st);
}

static void a_inverse(otter_node *n) { otter_node_set_attr_int(n, "inverse", 1); }
static void a_onesided(otter_node *n) { otter_node_set_attr_int(n, "onesided", 1); }
static void a_twosided(otter_node *n) { otter_node_set_attr_int(n, "onesided", 0); }
static void a_irfft(otter_node *n) {
    a_inverse(n);
    a_onesided(n);
}
/* GridSample: mode, padding_mode, align_corners */
static void gs_attrs(otter_node *n, const char *mode, const char *pad, int64_t align) {
    otter_node_set_attr_string(n, "mode", mode);
    otter_node_set_attr_string(n, "padding_mode", pad);
    otter_node_set_attr_int(n, "align_corners", align);
}
static void a_gs_bilinear_border_ac(otter_node *n) { gs_attrs(n, "bilinear", "border", 1); }
static void a_gs_bilinear_reflection(otter_node *n) { gs_attrs(n, "bilinear", "reflection", 0); }
static void a_gs_bilinear_reflection_ac(otter_node *n) { gs_attrs(n, "bilinear", "reflection", 1); }
static void a_gs_nearest_zeros_ac(otter_node *n) { gs_attrs(n, "nearest", "zeros", 1); }
static void a_gs_nearest_border(otter_node *n) { gs_attrs(n, "nearest", "border", 0); }
static void a_gs_nearest_reflection_ac(otter_node *n) { gs_attrs(n, "nearest", "reflection", 1); }
static void a_gs_bicubic_zeros(otter_node *n) { gs_attrs(n, "bicubic", "zeros", 0); }
static void a_gs_bicubic_border_ac(otter_node *n) { gs_attrs(n, "bicubic", "border", 1); }
static void a_gs_bicubic_reflection(otter_node *n) { gs_attrs(n, "bicubic", "reflection", 0); }
static void a_gs_linear_zeros_ac(otter_node *n) { gs_attrs(n, "linear", "zeros", 1); }
static void a_gs_linear_reflection(otter_node *n) { gs_attrs(n, "linear", "reflection", 0); }
static void a_gs_linear_border_ac(otter_node *n) { gs_attrs(n, "linear", "border", 1); }

static void a_align_corners(otter_node *n) { otter_node_set_attr_int(n, "align_corners", 1); }
static void a_col2im_strided(otter_node *n) {
    otter_node_set_attr_ints(n, "strides", 2, (int64_t[]){2, 2});
    otter_node_set_attr_ints(n, "pads", 4, (int64_t[]){1, 1, 1, 1});
}
static void a_col2im_dilated(otter_node *n) { otter_node_set_attr_ints(n, "dilations", 2, (int64_t[]){2, 1}); }

static void a_deform_grouped(otter_node *n) {
    otter_node_set_attr_int(n, "group", 2);
    otter_node_set_attr_int(n, "offset_group", 2);
    otter_node_set_attr_ints(n, "pads", 4, (int64_t[]){1, 1, 1, 1});
    otter_node_set_attr_ints(n, "strides", 2, (int64_t[]){2, 2});
}

static void a_roi(otter_node *n, const char *mode) {
    otter_node_set_attr_string(n, "mode", mode);
    otter_node_set_attr_int(n, "output_height", 2);
    otter_node_set_attr_int(n, "output_width", 3);
    otter_node_set_attr_int(n, "sampling_ratio", 2);
    otter_node_set_attr_float(n, "spatial_scale", 0.5f);
}
static void a_roi_avg(otter_node *n) { a_roi(n, "avg"); }
static void a_roi_max(otter_node *n) { a_roi(n, "max"); }

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
    /* Reductions and LpNormalization (rules_reduce.c): opset 18 takes axes as an input, earlier opsets an
     * attribute (ReduceSum from 13); keepdims 0 / 1, negative axes, noop_with_empty_axes. */
    {"ReduceMax ties axes input keep0",
     "ReduceMax",
     NULL,
     18,
     2,
     {{"x", TIES, SHAPE(3, 4)}, {"ax", INTS, SHAPE(1), {-1}}},
     1,
     a_keep0},
    {"ReduceMax attr axes 0 2", "ReduceMax", NULL, 17, 1, {{"x", SPREAD, SHAPE(2, 3, 2)}}, 1, a_axes_0_2},
    {"ReduceMin ties all axes", "ReduceMin", NULL, 17, 1, {{"x", TIES, SHAPE(3, 4)}}, 1},
    {"ReduceMin ties attr axes -1 keep0", "ReduceMin", NULL, 13, 1, {{"x", TIES, SHAPE(2, 4)}}, 1, a_axes_last_keep0},
    {"ReduceMin noop_with_empty_axes", "ReduceMin", NULL, 18, 1, {{"x", RAND, SHAPE(2, 3)}}, 1, a_noop},
    {"ReduceProd zeros axes input keep0",
     "ReduceProd",
     NULL,
     18,
     2,
     {{"x", ZEROED, SHAPE(5, 4)}, {"ax", INTS, SHAPE(1), {-1}}},
     1,
     a_keep0,
     0,
     true},
    {"ReduceProd zeros attr axes 0 2",
     "ReduceProd",
     NULL,
     13,
     1,
     {{"x", ZEROED, SHAPE(2, 4, 2)}},
     1,
     a_axes_0_2,
     0,
     true},
    {"ReduceProd all axes", "ReduceProd", NULL, 17, 1, {{"x", RAND, SHAPE(2, 3)}}, 1, a_keep0},
    {"ReduceLogSumExp axes input",
     "ReduceLogSumExp",
     NULL,
     18,
     2,
     {{"x", RAND, SHAPE(2, 3, 4)}, {"ax", INTS, SHAPE(2), {0, -1}}},
     1},
    {"ReduceLogSumExp attr keep0", "ReduceLogSumExp", NULL, 11, 1, {{"x", RAND, SHAPE(2, 3, 2)}}, 1, a_axes_1_keep0},
    {"ReduceLogSum axes input",
     "ReduceLogSum",
     NULL,
     18,
     2,
     {{"x", POS, SHAPE(2, 3)}, {"ax", INTS, SHAPE(1), {1}}},
     1,
     a_keep0},
    {"ReduceLogSum all axes", "ReduceLogSum", NULL, 17, 1, {{"x", POS, SHAPE(2, 3)}}, 1},
    {"ReduceL1 axes input keep0",
     "ReduceL1",
     NULL,
     18,
     2,
     {{"x", RAND, SHAPE(2, 3, 2)}, {"ax", INTS, SHAPE(1), {1}}},
     1,
     a_keep0},
    {"ReduceL1 all axes", "ReduceL1", NULL, 17, 1, {{"x", RAND, SHAPE(2, 3)}}, 1},
    {"ReduceL2 axes input", "ReduceL2", NULL, 18, 2, {{"x", RAND, SHAPE(2, 3, 2)}, {"ax", INTS, SHAPE(1), {-2}}}, 1},
    {"ReduceL2 attr axes -1 keep0", "ReduceL2", NULL, 17, 1, {{"x", RAND, SHAPE(2, 3)}}, 1, a_axes_last_keep0},
    {"ReduceSumSquare axes input keep0",
     "ReduceSumSquare",
     NULL,
     18,
     2,
     {{"x", RAND, SHAPE(2, 3, 2)}, {"ax", INTS, SHAPE(1), {1}}},
     1,
     a_keep0},
    {"ReduceSumSquare attr opset 12", "ReduceSumSquare", NULL, 12, 1, {{"x", RAND, SHAPE(2, 3)}}, 1, a_axes_last_keep0},
    {"ReduceMean axes input keep0",
     "ReduceMean",
     NULL,
     18,
     2,
     {{"x", RAND, SHAPE(2, 3, 2)}, {"ax", INTS, SHAPE(2), {-1, 0}}},
     1,
     a_keep0},
    {"ReduceSum noop_with_empty_axes", "ReduceSum", NULL, 13, 1, {{"x", RAND, SHAPE(2, 3)}}, 1, a_noop},
    {"LpNormalization p 2", "LpNormalization", NULL, 0, 1, {{"x", RAND, SHAPE(2, 3, 2)}}, 1, a_axis1},
    {"LpNormalization p 1 axis 0", "LpNormalization", NULL, 0, 1, {{"x", RAND, SHAPE(3, 4)}}, 1, a_lp1_axis0},
    /* Indexing and layout (rules_index.c): scatters of dY through ONNX Runtime's GatherElementsGrad and
     * GatherNDGrad (repeated and negative indices accumulate), inverse rearrangements. */
    {"CumSum", "CumSum", NULL, 0, 2, {{"x", RAND, SHAPE(2, 4)}, {"ax", INTS, 0, {0}, {1}}}, 1},
    {"CumSum exclusive axis -1",
     "CumSum",
     NULL,
     0,
     2,
     {{"x", RAND, SHAPE(2, 4)}, {"ax", INTS, 0, {0}, {-1}}},
     1,
     a_exclusive},
    {"CumSum reverse", "CumSum", NULL, 0, 2, {{"x", RAND, SHAPE(3, 2)}, {"ax", INTS, SHAPE(1), {0}}}, 1, a_reverse},
    {"CumSum exclusive reverse",
     "CumSum",
     NULL,
     0,
     2,
     {{"x", RAND, SHAPE(2, 4)}, {"ax", INTS, 0, {0}, {1}}},
     1,
     a_exclusive_reverse},
    {"TopK", "TopK", NULL, 0, 2, {{"x", SPREAD, SHAPE(3, 5)}, {"k", INTS, SHAPE(1), {2}}}, 1, NULL, 0, false, 1},
    {"TopK smallest axis 0",
     "TopK",
     NULL,
     0,
     2,
     {{"x", SPREAD, SHAPE(4, 3)}, {"k", INTS, SHAPE(1), {3}}},
     1,
     a_topk_smallest_axis0,
     0,
     false,
     1},
    {"GatherElements axis 0",
     "GatherElements",
     NULL,
     0,
     2,
     {{"x", RAND, SHAPE(3, 4)}, {"i", INTS, SHAPE(2, 4), {2, 0, 1, -1, 0, 0, 2, 1}}},
     1},
    {"GatherElements axis 1",
     "GatherElements",
     NULL,
     0,
     2,
     {{"x", RAND, SHAPE(3, 4)}, {"i", INTS, SHAPE(3, 2), {3, 0, 1, 1, -1, 2}}},
     1,
     a_axis1},
    {"GatherND",
     "GatherND",
     NULL,
     0,
     2,
     {{"x", RAND, SHAPE(3, 4, 2)}, {"i", INTS, SHAPE(3, 2), {1, 3, 0, 1, 1, 3}}},
     1},
    {"GatherND batch_dims 1",
     "GatherND",
     NULL,
     0,
     2,
     {{"x", RAND, SHAPE(2, 3, 4)}, {"i", INTS, SHAPE(2, 2, 1), {2, 0, 1, 1}}},
     1,
     a_batch_dims1},
    {"ScatterElements axis 1",
     "ScatterElements",
     NULL,
     0,
     3,
     {{"d", RAND, SHAPE(3, 4)}, {"i", INTS, SHAPE(2, 2), {0, 3, 2, 1}}, {"u", RAND, SHAPE(2, 2)}},
     1,
     a_axis1},
    {"ScatterElements axis 0",
     "ScatterElements",
     NULL,
     0,
     3,
     {{"d", RAND, SHAPE(3, 2)}, {"i", INTS, SHAPE(1, 2), {2, -3}}, {"u", RAND, SHAPE(1, 2)}},
     1},
    {"ScatterND rows",
     "ScatterND",
     NULL,
     0,
     3,
     {{"d", RAND, SHAPE(4, 3)}, {"i", INTS, SHAPE(2, 1), {3, 1}}, {"u", RAND, SHAPE(2, 3)}},
     1},
    {"ScatterND elements",
     "ScatterND",
     NULL,
     0,
     3,
     {{"d", RAND, SHAPE(3, 3)}, {"i", INTS, SHAPE(2, 2), {0, 1, 2, 2}}, {"u", RAND, SHAPE(2)}},
     1},
    {"DepthToSpace DCR", "DepthToSpace", NULL, 0, 1, {{"x", RAND, SHAPE(1, 8, 2, 3)}}, 1, a_block2},
    {"DepthToSpace CRD", "DepthToSpace", NULL, 0, 1, {{"x", RAND, SHAPE(2, 8, 2, 1)}}, 1, a_block2_crd},
    {"SpaceToDepth", "SpaceToDepth", NULL, 0, 1, {{"x", RAND, SHAPE(1, 2, 4, 6)}}, 1, a_block2},
    /* Pad in every mode: reflect, edge and wrap fold the border back (com.otter PadGrad), as do negative
     * pads, opset 18's axes and opset 10's pads attribute. */
    {"Pad reflect",
     "Pad",
     NULL,
     0,
     2,
     {{"x", RAND, SHAPE(3, 4)}, {"p", INTS, SHAPE(4), {1, 2, 2, 3}}},
     1,
     a_pad_reflect},
    {"Pad edge", "Pad", NULL, 0, 2, {{"x", RAND, SHAPE(2, 3)}, {"p", INTS, SHAPE(4), {2, 1, 0, 3}}}, 1, a_pad_edge},
    {"Pad wrap", "Pad", NULL, 19, 2, {{"x", RAND, SHAPE(2, 3)}, {"p", INTS, SHAPE(4), {1, 3, 2, 2}}}, 1, a_pad_wrap},
    {"Pad constant negative pads",
     "Pad",
     NULL,
     0,
     2,
     {{"x", RAND, SHAPE(3, 4)}, {"p", INTS, SHAPE(4), {1, -1, -1, 2}}},
     1},
    {"Pad reflect axes",
     "Pad",
     NULL,
     18,
     4,
     {{"x", RAND, SHAPE(2, 3, 4)}, {"p", INTS, SHAPE(2), {2, 1}}, {"", FIXED, 0, {0}}, {"ax", INTS, SHAPE(1), {-1}}},
     1,
     a_pad_reflect},
    {"Pad edge opset 10 attribute", "Pad", NULL, 10, 1, {{"x", RAND, SHAPE(2, 3)}}, 1, a_pad_edge_attr},
    /* recurrent layers: seq 3, batch 2, input 3, hidden 4 */
    {"LSTM forward",
     "LSTM",
     NULL,
     0,
     4,
     {{"X", RAND, SHAPE(3, 2, 3)},
      {"W", RAND, SHAPE(1, 16, 3)},
      {"R", RAND, SHAPE(1, 16, 4)},
      {"B", RAND, SHAPE(1, 32)}},
     3,
     a_hidden4},
    {"LSTM reverse sequence_lens states",
     "LSTM",
     NULL,
     0,
     7,
     {{"X", RAND, SHAPE(3, 2, 3)},
      {"W", RAND, SHAPE(1, 16, 3)},
      {"R", RAND, SHAPE(1, 16, 4)},
      {"B", RAND, SHAPE(1, 32)},
      {"L", INTS, SHAPE(2), {2, 3}},
      {"H", RAND, SHAPE(1, 2, 4)},
      {"C", RAND, SHAPE(1, 2, 4)}},
     3,
     a_dir_reverse},
    {"LSTM bidirectional peepholes",
     "LSTM",
     NULL,
     0,
     8,
     {{"X", RAND, SHAPE(3, 2, 3)},
      {"W", RAND, SHAPE(2, 16, 3)},
      {"R", RAND, SHAPE(2, 16, 4)},
      {"B", RAND, SHAPE(2, 32)},
      {"", FIXED, 0, {0}},
      {"H", RAND, SHAPE(2, 2, 4)},
      {"C", RAND, SHAPE(2, 2, 4)},
      {"P", RAND, SHAPE(2, 12)}},
     3,
     a_bidirectional},
    {"LSTM sequence_lens Y only",
     "LSTM",
     NULL,
     0,
     5,
     {{"X", RAND, SHAPE(3, 2, 3)},
      {"W", RAND, SHAPE(1, 16, 3)},
      {"R", RAND, SHAPE(1, 16, 4)},
      {"B", RAND, SHAPE(1, 32)},
      {"L", INTS, SHAPE(2), {2, 3}}},
     1,
     a_hidden4},
    {"LSTM layout 1 input_forget",
     "LSTM",
     NULL,
     14,
     7,
     {{"X", RAND, SHAPE(2, 3, 3)},
      {"W", RAND, SHAPE(2, 16, 3)},
      {"R", RAND, SHAPE(2, 16, 4)},
      {"B", RAND, SHAPE(2, 32)},
      {"L", INTS, SHAPE(2), {2, 3}},
      {"H", RAND, SHAPE(2, 2, 4)},
      {"C", RAND, SHAPE(2, 2, 4)}},
     3,
     a_lstm_layout1_input_forget},
    {"LSTM clip",
     "LSTM",
     NULL,
     0,
     4,
     {{"X", SPREAD, SHAPE(3, 2, 3)},
      {"W", SPREAD, SHAPE(1, 16, 3)},
      {"R", SPREAD, SHAPE(1, 16, 4)},
      {"B", SPREAD, SHAPE(1, 32)}},
     3,
     a_clip_lstm},
    {"GRU forward",
     "GRU",
     NULL,
     0,
     4,
     {{"X", RAND, SHAPE(3, 2, 3)},
      {"W", RAND, SHAPE(1, 12, 3)},
      {"R", RAND, SHAPE(1, 12, 4)},
      {"B", RAND, SHAPE(1, 24)}},
     2},
    {"GRU reverse linear_before_reset",
     "GRU",
     NULL,
     0,
     6,
     {{"X", RAND, SHAPE(3, 2, 3)},
      {"W", RAND, SHAPE(1, 12, 3)},
      {"R", RAND, SHAPE(1, 12, 4)},
      {"B", RAND, SHAPE(1, 24)},
      {"L", INTS, SHAPE(2), {2, 3}},
      {"H", RAND, SHAPE(1, 2, 4)}},
     2,
     a_reverse_lbr},
    {"GRU bidirectional linear_before_reset",
     "GRU",
     NULL,
     0,
     6,
     {{"X", RAND, SHAPE(3, 2, 3)},
      {"W", RAND, SHAPE(2, 12, 3)},
      {"R", RAND, SHAPE(2, 12, 4)},
      {"B", RAND, SHAPE(2, 24)},
      {"", FIXED, 0, {0}},
      {"H", RAND, SHAPE(2, 2, 4)}},
     2,
     a_bidirectional_lbr},
    {"GRU bidirectional sequence_lens",
     "GRU",
     NULL,
     0,
     6,
     {{"X", RAND, SHAPE(3, 2, 3)},
      {"W", RAND, SHAPE(2, 12, 3)},
      {"R", RAND, SHAPE(2, 12, 4)},
      {"B", RAND, SHAPE(2, 24)},
      {"L", INTS, SHAPE(2), {2, 3}},
      {"H", RAND, SHAPE(2, 2, 4)}},
     1,
     a_bidirectional},
    {"GRU layout 1 sequence_lens",
     "GRU",
     NULL,
     14,
     6,
     {{"X", RAND, SHAPE(2, 3, 3)},
      {"W", RAND, SHAPE(2, 12, 3)},
      {"R", RAND, SHAPE(2, 12, 4)},
      {"B", RAND, SHAPE(2, 24)},
      {"L", INTS, SHAPE(2), {2, 3}},
      {"H", RAND, SHAPE(2, 2, 4)}},
     2,
     a_layout1},
    {"GRU Softsign",
     "GRU",
     NULL,
     0,
     3,
     {{"X", RAND, SHAPE(3, 2, 3)}, {"W", RAND, SHAPE(1, 12, 3)}, {"R", RAND, SHAPE(1, 12, 4)}},
     2,
     a_gru_activations},
    {"GRU clip bidirectional",
     "GRU",
     NULL,
     0,
     4,
     {{"X", SPREAD, SHAPE(3, 2, 3)},
      {"W", SPREAD, SHAPE(2, 12, 3)},
      {"R", SPREAD, SHAPE(2, 12, 4)},
      {"B", SPREAD, SHAPE(2, 24)}},
     2,
     a_clip_bidirectional},
    {"RNN clip",
     "RNN",
     NULL,
     0,
     4,
     {{"X", SPREAD, SHAPE(3, 2, 3)},
      {"W", SPREAD, SHAPE(1, 4, 3)},
      {"R", SPREAD, SHAPE(1, 4, 4)},
      {"B", SPREAD, SHAPE(1, 8)}},
     2,
     a_clip},
    {"RNN forward",
     "RNN",
     NULL,
     0,
     4,
     {{"X", RAND, SHAPE(3, 2, 3)}, {"W", RAND, SHAPE(1, 4, 3)}, {"R", RAND, SHAPE(1, 4, 4)}, {"B", RAND, SHAPE(1, 8)}},
     2},
    {"RNN reverse ScaledTanh sequence_lens",
     "RNN",
     NULL,
     0,
     6,
     {{"X", RAND, SHAPE(3, 2, 3)},
      {"W", RAND, SHAPE(1, 4, 3)},
      {"R", RAND, SHAPE(1, 4, 4)},
      {"B", RAND, SHAPE(1, 8)},
      {"L", INTS, SHAPE(2), {2, 3}},
      {"H", RAND, SHAPE(1, 2, 4)}},
     2,
     a_rnn_activation},
    {"RNN bidirectional",
     "RNN",
     NULL,
     0,
     6,
     {{"X", RAND, SHAPE(3, 2, 3)},
      {"W", RAND, SHAPE(2, 4, 3)},
      {"R", RAND, SHAPE(2, 4, 4)},
      {"B", RAND, SHAPE(2, 8)},
      {"", FIXED, 0, {0}},
      {"H", RAND, SHAPE(2, 2, 4)}},
     2,
     a_bidirectional},
    {"RNN layout 1",
     "RNN",
     NULL,
     14,
     6,
     {{"X", RAND, SHAPE(2, 3, 3)},
      {"W", RAND, SHAPE(2, 4, 3)},
      {"R", RAND, SHAPE(2, 4, 4)},
      {"B", RAND, SHAPE(2, 8)},
      {"L", INTS, SHAPE(2), {2, 3}},
      {"H", RAND, SHAPE(2, 2, 4)}},
     2,
     a_layout1},
    /* normalization, attention, resizing (rules_norm.c) and ConvTranspose's attributes */
    {"InstanceNormalization",
     "InstanceNormalization",
     NULL,
     0,
     3,
     {{"x", RAND, SHAPE(2, 3, 4)}, {"s", RAND, SHAPE(3)}, {"b", RAND, SHAPE(3)}},
     1},
    {"InstanceNormalization 2-D",
     "InstanceNormalization",
     NULL,
     0,
     3,
     {{"x", RAND, SHAPE(1, 2, 3, 3)}, {"s", RAND, SHAPE(2)}, {"b", RAND, SHAPE(2)}},
     1},
    {"GroupNormalization opset 18 per group",
     "GroupNormalization",
     NULL,
     18,
     3,
     {{"x", RAND, SHAPE(2, 4, 3)}, {"s", RAND, SHAPE(2)}, {"b", RAND, SHAPE(2)}},
     1,
     a_groups2},
    {"GroupNormalization opset 21 per channel",
     "GroupNormalization",
     NULL,
     21,
     3,
     {{"x", RAND, SHAPE(2, 4, 2, 2)}, {"s", RAND, SHAPE(4)}, {"b", RAND, SHAPE(4)}},
     1,
     a_groups2},
    {"GroupNormalization scale and bias only",
     "GroupNormalization",
     NULL,
     21,
     3,
     {{"x", FIXED, SHAPE(2, 4, 3)}, {"s", RAND, SHAPE(4)}, {"b", RAND, SHAPE(4)}},
     1,
     a_groups2},
    {"RMSNormalization", "RMSNormalization", NULL, 23, 2, {{"x", RAND, SHAPE(3, 5)}, {"s", RAND, SHAPE(5)}}, 1},
    {"RMSNormalization axis 1 broadcast scale",
     "RMSNormalization",
     NULL,
     23,
     2,
     {{"x", RAND, SHAPE(2, 3, 4)}, {"s", RAND, SHAPE(1, 4)}},
     1,
     a_rms_axis1},
    {"Resize nearest asymmetric floor",
     "Resize",
     NULL,
     13,
     3,
     {{"x", RAND, SHAPE(1, 2, 3, 2)}, {"", FIXED, 0, {0}}, {"sc", FLOATS, SHAPE(4), {0}, {1, 1, 2, 2}}},
     1,
     a_nearest_asym_floor},
    {"Resize nearest half_pixel sizes",
     "Resize",
     NULL,
     13,
     4,
     {{"x", RAND, SHAPE(1, 1, 3, 4)}, {"", FIXED, 0, {0}}, {"", FIXED, 0, {0}}, {"sz", INTS, SHAPE(4), {1, 1, 5, 3}}},
     1,
     a_nearest_half_pixel},
    {"Resize nearest tf_half_pixel_for_nn ceil",
     "Resize",
     NULL,
     13,
     4,
     {{"x", RAND, SHAPE(1, 1, 3, 4)}, {"", FIXED, 0, {0}}, {"", FIXED, 0, {0}}, {"sz", INTS, SHAPE(4), {1, 1, 7, 6}}},
     1,
     a_nearest_tf_ceil},
    {"Resize nearest align_corners ceil",
     "Resize",
     NULL,
     13,
     4,
     {{"x", RAND, SHAPE(1, 1, 3, 4)}, {"", FIXED, 0, {0}}, {"", FIXED, 0, {0}}, {"sz", INTS, SHAPE(4), {1, 1, 5, 2}}},
     1,
     a_nearest_align_ceil},
    {"Resize linear align_corners",
     "Resize",
     NULL,
     13,
     3,
     {{"x", RAND, SHAPE(1, 2, 3, 4)}, {"", FIXED, 0, {0}}, {"sc", FLOATS, SHAPE(4), {0}, {1, 1, 2, 1.5f}}},
     1,
     a_linear_align},
    {"Resize linear half_pixel",
     "Resize",
     NULL,
     13,
     3,
     {{"x", RAND, SHAPE(1, 1, 3, 4)}, {"", FIXED, 0, {0}}, {"sc", FLOATS, SHAPE(4), {0}, {1, 1, 1.7f, 0.5f}}},
     1,
     a_linear_half_pixel},
    {"Resize linear pytorch_half_pixel sizes",
     "Resize",
     NULL,
     13,
     4,
     {{"x", RAND, SHAPE(1, 1, 4, 4)}, {"", FIXED, 0, {0}}, {"", FIXED, 0, {0}}, {"sz", INTS, SHAPE(4), {1, 1, 1, 6}}},
     1,
     a_linear_pytorch},
    {"Resize cubic pytorch_half_pixel",
     "Resize",
     NULL,
     13,
     3,
     {{"x", RAND, SHAPE(1, 1, 4, 5)}, {"", FIXED, 0, {0}}, {"sc", FLOATS, SHAPE(4), {0}, {1, 1, 2, 1.4f}}},
     1,
     a_cubic_pytorch},
    {"Resize cubic align_corners exclude_outside",
     "Resize",
     NULL,
     13,
     4,
     {{"x", RAND, SHAPE(1, 1, 4, 5)}, {"", FIXED, 0, {0}}, {"", FIXED, 0, {0}}, {"sz", INTS, SHAPE(4), {1, 1, 7, 3}}},
     1,
     a_cubic_align_exclude},
    {"Resize linear antialias opset 18",
     "Resize",
     NULL,
     18,
     3,
     {{"x", RAND, SHAPE(1, 1, 6, 5)}, {"", FIXED, 0, {0}}, {"sc", FLOATS, SHAPE(4), {0}, {1, 1, 0.5f, 0.6f}}},
     1,
     a_linear_antialias},
    {"Resize tf_crop_and_resize roi",
     "Resize",
     NULL,
     13,
     4,
     {{"x", RAND, SHAPE(1, 1, 4, 4)},
      {"roi", FLOATS, SHAPE(8), {0}, {0, 0, -0.2f, 0.1f, 1, 1, 0.9f, 1.3f}},
      {"", FIXED, 0, {0}},
      {"sz", INTS, SHAPE(4), {1, 1, 3, 5}}},
     1,
     a_crop_resize},
    {"Resize opset 10 nearest",
     "Resize",
     NULL,
     10,
     2,
     {{"x", RAND, SHAPE(1, 1, 3, 2)}, {"sc", FLOATS, SHAPE(4), {0}, {1, 1, 2, 3}}},
     1,
     a_mode_nearest},
    {"Upsample opset 9 linear",
     "Upsample",
     NULL,
     9,
     2,
     {{"x", RAND, SHAPE(1, 2, 3, 2)}, {"sc", FLOATS, SHAPE(4), {0}, {1, 1, 2, 2.5f}}},
     1,
     a_mode_linear},
    {"Upsample opset 8 scales attribute", "Upsample", NULL, 8, 1, {{"x", RAND, SHAPE(1, 1, 3, 2)}}, 1, a_upsample7},
    {"Attention 4-D",
     "Attention",
     NULL,
     23,
     3,
     {{"q", RAND, SHAPE(2, 2, 3, 4)}, {"k", RAND, SHAPE(2, 2, 5, 4)}, {"v", RAND, SHAPE(2, 2, 5, 3)}},
     1},
    {"Attention 4-D GQA causal scale",
     "Attention",
     NULL,
     23,
     3,
     {{"q", RAND, SHAPE(1, 4, 3, 2)}, {"k", RAND, SHAPE(1, 2, 4, 2)}, {"v", RAND, SHAPE(1, 2, 4, 3)}},
     1,
     a_attn_causal_scale},
    {"Attention 3-D GQA bool mask",
     "Attention",
     NULL,
     23,
     4,
     {{"q", RAND, SHAPE(2, 3, 4)},
      {"k", RAND, SHAPE(2, 5, 2)},
      {"v", RAND, SHAPE(2, 5, 2)},
      {"m", BOOLS, SHAPE(5), {1, 0, 1, 1, 0}}},
     1,
     a_attn_3d_gqa},
    {"Attention 3-D float mask softcap",
     "Attention",
     NULL,
     23,
     4,
     {{"q", RAND, SHAPE(1, 3, 4)}, {"k", RAND, SHAPE(1, 4, 4)}, {"v", RAND, SHAPE(1, 4, 6)}, {"m", FIXED, SHAPE(3, 3)}},
     1,
     a_attn_3d_softcap},
    {"Attention 4-D batch mask",
     "Attention",
     NULL,
     23,
     4,
     {{"q", RAND, SHAPE(2, 2, 3, 2)},
      {"k", RAND, SHAPE(2, 2, 4, 2)},
      {"v", RAND, SHAPE(2, 2, 4, 2)},
      {"m", FIXED, SHAPE(2, 1, 1, 4)}},
     1},
    {"Attention 4-D learned float mask",
     "Attention",
     NULL,
     23,
     4,
     {{"q", RAND, SHAPE(2, 2, 3, 2)},
      {"k", RAND, SHAPE(2, 2, 4, 2)},
      {"v", RAND, SHAPE(2, 2, 4, 2)},
      {"m", RAND, SHAPE(2, 2, 3, 4)}},
     1},
    {"Attention 3-D broadcast learned mask softcap",
     "Attention",
     NULL,
     23,
     4,
     {{"q", RAND, SHAPE(2, 3, 4)}, {"k", RAND, SHAPE(2, 4, 4)}, {"v", RAND, SHAPE(2, 4, 2)}, {"m", RAND, SHAPE(3, 3)}},
     1,
     a_attn_3d_softcap},
    {"Attention 4-D KV cache causal",
     "Attention",
     NULL,
     23,
     6,
     {{"q", RAND, SHAPE(1, 2, 3, 2)},
      {"k", RAND, SHAPE(1, 2, 2, 2)},
      {"v", RAND, SHAPE(1, 2, 2, 3)},
      {"", FIXED, 0, {0}},
      {"pk", RAND, SHAPE(1, 2, 3, 2)},
      {"pv", RAND, SHAPE(1, 2, 3, 3)}},
     1,
     a_causal},
    {"Attention 3-D GQA KV cache learned mask",
     "Attention",
     NULL,
     23,
     6,
     {{"q", RAND, SHAPE(1, 3, 4)},
      {"k", RAND, SHAPE(1, 2, 2)},
      {"v", RAND, SHAPE(1, 2, 2)},
      {"m", RAND, SHAPE(3, 5)},
      {"pk", RAND, SHAPE(1, 1, 3, 2)},
      {"pv", RAND, SHAPE(1, 1, 3, 2)}},
     1,
     a_attn_3d_gqa},
    {"ConvTranspose groups dilations output_padding",
     "ConvTranspose",
     NULL,
     0,
     3,
     {{"x", RAND, SHAPE(1, 4, 3, 3)}, {"w", RAND, SHAPE(4, 3, 3, 2)}, {"b", RAND, SHAPE(6)}},
     1,
     a_convt_groups},
    {"ConvTranspose 1-D depthwise strided dilated",
     "ConvTranspose",
     NULL,
     0,
     2,
     {{"x", RAND, SHAPE(2, 3, 4)}, {"w", RAND, SHAPE(3, 1, 3)}},
     1,
     a_convt_1d},
    {"ConvTranspose output_shape SAME_LOWER",
     "ConvTranspose",
     NULL,
     0,
     2,
     {{"x", RAND, SHAPE(1, 2, 3, 3)}, {"w", RAND, SHAPE(2, 2, 3, 3)}},
     1,
     a_convt_output_shape},
    /* activations, trigonometric functions, Min / Max, Clip bounds, piecewise-constant ops */
    {"Elu", "Elu", NULL, 0, 1, {{"x", RAND, SHAPE(2, 4)}}, 1},
    {"Elu alpha", "Elu", NULL, 0, 1, {{"x", RAND, SHAPE(2, 4)}}, 1, a_alpha_07},
    {"Selu", "Selu", NULL, 0, 1, {{"x", RAND, SHAPE(2, 4)}}, 1},
    {"Selu alpha gamma", "Selu", NULL, 0, 1, {{"x", RAND, SHAPE(2, 4)}}, 1, a_selu},
    {"Celu", "Celu", NULL, 0, 1, {{"x", RAND, SHAPE(2, 4)}}, 1},
    {"Celu alpha", "Celu", NULL, 0, 1, {{"x", RAND, SHAPE(2, 4)}}, 1, a_alpha_15},
    {"ThresholdedRelu", "ThresholdedRelu", NULL, 0, 1, {{"x", WIDE, SHAPE(30)}}, 1},
    {"ThresholdedRelu alpha", "ThresholdedRelu", NULL, 0, 1, {{"x", WIDE, SHAPE(30)}}, 1, a_alpha_07},
    {"PRelu per channel", "PRelu", NULL, 0, 2, {{"x", RAND, SHAPE(2, 3, 2, 2)}, {"s", RAND, SHAPE(3, 1, 1)}}, 1},
    {"PRelu shared slope", "PRelu", NULL, 0, 2, {{"x", RAND, SHAPE(2, 3)}, {"s", RAND, SHAPE(1)}}, 1},
    {"Softplus", "Softplus", NULL, 0, 1, {{"x", WIDE, SHAPE(30)}}, 1},
    {"Softsign", "Softsign", NULL, 0, 1, {{"x", RAND, SHAPE(2, 4)}}, 1},
    {"Mish", "Mish", NULL, 18, 1, {{"x", WIDE, SHAPE(30)}}, 1},
    {"Swish", "Swish", NULL, 24, 1, {{"x", WIDE, SHAPE(30)}}, 1},
    {"Swish alpha", "Swish", NULL, 24, 1, {{"x", RAND, SHAPE(2, 4)}}, 1, a_alpha_15},
    {"QuickGelu (com.microsoft)", "QuickGelu", "com.microsoft", 0, 1, {{"x", WIDE, SHAPE(30)}}, 1},
    {"QuickGelu alpha (com.microsoft)", "QuickGelu", "com.microsoft", 0, 1, {{"x", RAND, SHAPE(2, 4)}}, 1, a_alpha_07},
    {"Sin", "Sin", NULL, 0, 1, {{"x", RAND, SHAPE(6)}}, 1},
    {"Cos", "Cos", NULL, 0, 1, {{"x", RAND, SHAPE(6)}}, 1},
    {"Tan", "Tan", NULL, 0, 1, {{"x", UNIT, SHAPE(6)}}, 1},
    {"Asin", "Asin", NULL, 0, 1, {{"x", UNIT, SHAPE(6)}}, 1},
    {"Acos", "Acos", NULL, 0, 1, {{"x", UNIT, SHAPE(6)}}, 1},
    {"Atan", "Atan", NULL, 0, 1, {{"x", RAND, SHAPE(6)}}, 1},
    {"Sinh", "Sinh", NULL, 0, 1, {{"x", RAND, SHAPE(6)}}, 1},
    {"Cosh", "Cosh", NULL, 0, 1, {{"x", RAND, SHAPE(6)}}, 1},
    {"Asinh", "Asinh", NULL, 0, 1, {{"x", RAND, SHAPE(6)}}, 1},
    {"Acosh", "Acosh", NULL, 0, 1, {{"x", ABOVE_ONE, SHAPE(6)}}, 1},
    {"Atanh", "Atanh", NULL, 0, 1, {{"x", UNIT, SHAPE(6)}}, 1},
    /* a and b tie at 3 of 6 elements (each gets half, as the central difference at a kink); c never wins */
    {"Max ties broadcast three",
     "Max",
     NULL,
     0,
     3,
     {{"a", CYCLE3, SHAPE(2, 3)}, {"b", CYCLE3, SHAPE(2, 1)}, {"c", SPREAD, SHAPE(3)}},
     1},
    {"Min ties broadcast", "Min", NULL, 0, 2, {{"a", CYCLE3, SHAPE(2, 3)}, {"b", CYCLE3, SHAPE(2, 1)}}, 1},
    {"Min three",
     "Min",
     NULL,
     0,
     3,
     {{"a", WIDE, SHAPE(2, 3)}, {"b", SPREAD, SHAPE(3)}, {"c", CYCLE3, SHAPE(2, 1)}},
     1},
    {"Clip bounds", "Clip", NULL, 0, 3, {{"x", RAND, SHAPE(8)}, {"lo", LO, 0, {0}}, {"hi", HI, 0, {0}}}, 1},
    {"Clip max bound only", "Clip", NULL, 0, 3, {{"x", RAND, SHAPE(2, 4)}, {"", FIXED, 0, {0}}, {"hi", HI, 0, {0}}}, 1},
    {"Floor", "Floor", NULL, 0, 1, {{"x", WIDE, SHAPE(30)}}, 1},
    {"Ceil", "Ceil", NULL, 0, 1, {{"x", WIDE, SHAPE(30)}}, 1},
    {"Round", "Round", NULL, 0, 1, {{"x", WIDE, SHAPE(30)}}, 1},
    {"Sign", "Sign", NULL, 0, 1, {{"x", WIDE, SHAPE(30)}}, 1},
    /* control flow: If (both branches), Loop with a constant trip count, Scan over a sequence axis */
    {"If then",
     "If",
     NULL,
     0,
     3,
     {{"c", BOOLS, 0, {0}, {1}}, {"a", RAND, SHAPE(2, 3)}, {"b", RAND, SHAPE(3)}},
     1,
     a_if,
     .node_inputs = 1},
    {"If else",
     "If",
     NULL,
     0,
     3,
     {{"c", BOOLS, 0, {0}, {0}}, {"a", RAND, SHAPE(2, 3)}, {"b", RAND, SHAPE(3)}},
     1,
     a_if,
     .node_inputs = 1},
    {"Loop M=3 MatMul Tanh",
     "Loop",
     NULL,
     0,
     4,
     {{"M", INTS, 0, {0}, {3}}, {"", FIXED, 0, {0}}, {"h0", RAND, SHAPE(1, 4)}, {"W", RAND, SHAPE(4, 4)}},
     2,
     a_loop,
     .node_inputs = 3},
    {"Loop cond true opset 11",
     "Loop",
     NULL,
     11,
     4,
     {{"M", INTS, 0, {0}, {2}}, {"c", BOOLS, 0, {0}, {1}}, {"h0", RAND, SHAPE(1, 4)}, {"W", RAND, SHAPE(4, 4)}},
     2,
     a_loop,
     .node_inputs = 3},
    {"Loop outer true condition",
     "Loop",
     NULL,
     0,
     4,
     {{"M", INTS, 0, {0}, {2}}, {"c", BOOLS, 0, {0}, {1}}, {"h0", RAND, SHAPE(1, 4)}, {"W", RAND, SHAPE(4, 4)}},
     2,
     a_loop_outer_true,
     .node_inputs = 3},
    {"Scan",
     "Scan",
     NULL,
     0,
     3,
     {{"h0", RAND, SHAPE(2, 4)}, {"xs", RAND, SHAPE(3, 2, 4)}, {"W", RAND, SHAPE(4, 4)}},
     2,
     a_scan,
     .node_inputs = 2},
    {"Scan axis 1 reverse",
     "Scan",
     NULL,
     0,
     3,
     {{"h0", RAND, SHAPE(2, 4)}, {"xs", RAND, SHAPE(2, 3, 4)}, {"W", RAND, SHAPE(4, 4)}},
     2,
     a_scan_axis1_reverse,
     .node_inputs = 2},
    /* Broadcast gradients decided at run time (symbolic dimensions, unknown ranks), and reductions over
     * broadcast axes below opset 13 (ReduceSum's axes an attribute). */
    {"Add dims symbolic",
     "Add",
     NULL,
     0,
     2,
     {{"a", RAND, SHAPE(2, 3), {0}, .dynamic = 1u}, {"b", RAND, SHAPE(1, 3), {0}, .dynamic = 1u}},
     1},
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
     {{"a", RAND, SHAPE(2, 3), {0}, .dynamic = 1u}, {"b", RAND, SHAPE(1, 3), {0}, .dynamic = 1u}},
     1},
    {"Mul rank unknown",
     "Mul",
     NULL,
     0,
     2,
     {{"a", RAND, SHAPE(2, 3), {0}, .dynamic = DYN_RANK}, {"b", RAND, SHAPE(3)}},
     1},
    {"Div rank unknown scalar divisor",
     "Div",
     NULL,
     0,
     2,
     {{"a", RAND, SHAPE(2, 3), {0}, .dynamic = DYN_RANK}, {"b", POS, 0, {0}}},
     1},
    {"Sub leading and inner symbolic",
     "Sub",
     NULL,
     0,
     2,
     {{"a", RAND, SHAPE(2, 1, 3), {0}, .dynamic = 3u}, {"b", RAND, SHAPE(4, 3), {0}, .dynamic = 1u}},
     1},
    {"Pow exponent [1, 1] rank unknown",
     "Pow",
     NULL,
     14,
     2,
     {{"a", POS, SHAPE(2, 3), {0}, .dynamic = DYN_RANK}, {"b", RAND, SHAPE(1, 1)}},
     1},
    {"Where dims symbolic",
     "Where",
     NULL,
     0,
     3,
     {{"c", BOOLS, SHAPE(2, 3), {1, 0, 0, 1, 1, 0}},
      {"a", RAND, SHAPE(2, 1), {0}, .dynamic = 1u},
      {"b", RAND, SHAPE(1, 3), {0}, .dynamic = 2u}},
     1},
    /* gradmore: ai.onnx Gelu, GlobalMaxPool, SimplifiedLayerNormalization, FusedMatMul, BiasGelu, Scale,
     * Trilu, Shrink, Hardmax, MeanVarianceNormalization, LRN,
     * ReverseSequence, RotaryEmbedding, SwiGLU */
    /* The erf and tanh forms' derivatives differ by ~5e-4 at most: a tolerance below that tells which
     * gradient operator the rule chose. */
    {"Gelu opset 20", "Gelu", NULL, 20, 1, {{"x", WIDE, SHAPE(30)}}, 1, .tol = 3e-4},
    {"Gelu opset 20 tanh", "Gelu", NULL, 20, 1, {{"x", WIDE, SHAPE(30)}}, 1, a_gelu_tanh, .tol = 3e-4},
    {"GlobalMaxPool", "GlobalMaxPool", NULL, 0, 1, {{"x", SPREAD, SHAPE(2, 3, 4, 4)}}, 1},
    {"GlobalMaxPool ties", "GlobalMaxPool", NULL, 0, 1, {{"x", TIES, SHAPE(2, 3, 1, 4)}}, 1},
    {"GlobalMaxPool opset 11 ties", "GlobalMaxPool", NULL, 11, 1, {{"x", TIES, SHAPE(1, 2, 1, 4)}}, 1},
    {"SimplifiedLayerNormalization",
     "SimplifiedLayerNormalization",
     NULL,
     0,
     2,
     {{"x", RAND, SHAPE(3, 5)}, {"s", RAND, SHAPE(5)}},
     1},
    {"SimplifiedLayerNormalization axis 1 (com.microsoft)",
     "SimplifiedLayerNormalization",
     "com.microsoft",
     0,
     2,
     {{"x", RAND, SHAPE(2, 3, 4)}, {"s", RAND, SHAPE(3, 4)}},
     1,
     a_axis1},
    {"FusedMatMul alpha (com.microsoft)",
     "FusedMatMul",
     "com.microsoft",
     0,
     2,
     {{"a", RAND, SHAPE(3, 4)}, {"b", RAND, SHAPE(4, 5)}},
     1,
     a_alpha_half},
    {"FusedMatMul transA batch-broadcast A (com.microsoft)",
     "FusedMatMul",
     "com.microsoft",
     0,
     2,
     {{"a", RAND, SHAPE(4, 3)}, {"b", RAND, SHAPE(2, 4, 5)}},
     1,
     a_transA},
    {"FusedMatMul transB alpha batch 1 B (com.microsoft)",
     "FusedMatMul",
     "com.microsoft",
     0,
     2,
     {{"a", RAND, SHAPE(2, 3, 4)}, {"b", RAND, SHAPE(1, 5, 4)}},
     1,
     a_transB_alpha_half},
    {"FusedMatMul transA transB alpha (com.microsoft)",
     "FusedMatMul",
     "com.microsoft",
     0,
     2,
     {{"a", RAND, SHAPE(2, 4, 3)}, {"b", RAND, SHAPE(5, 4)}},
     1,
     a_transAB_alpha_half},
    {"BiasGelu (com.microsoft)",
     "BiasGelu",
     "com.microsoft",
     0,
     2,
     {{"a", RAND, SHAPE(2, 3, 5)}, {"b", RAND, SHAPE(5)}},
     1},
    {"FastGelu bias (com.microsoft)",
     "FastGelu",
     "com.microsoft",
     0,
     2,
     {{"x", RAND, SHAPE(3, 5)}, {"b", RAND, SHAPE(5)}},
     1},
    {"Scale (com.microsoft)",
     "Scale",
     "com.microsoft",
     0,
     2,
     {{"x", RAND, SHAPE(2, 3)}, {"s", POS_FIXED, SHAPE(1)}},
     1},
    {"Scale scale_down (com.microsoft)",
     "Scale",
     "com.microsoft",
     0,
     2,
     {{"x", RAND, SHAPE(2, 3)}, {"s", POS_FIXED, SHAPE(1)}},
     1,
     a_scale_down},
    {"Trilu", "Trilu", NULL, 14, 1, {{"x", RAND, SHAPE(2, 3, 4)}}, 1},
    {"Trilu lower k -1",
     "Trilu",
     NULL,
     14,
     2,
     {{"x", RAND, SHAPE(4, 3)}, {"k", INTS, SHAPE(1), {-1}}},
     1,
     a_trilu_lower},
    {"Shrink", "Shrink", NULL, 9, 1, {{"x", WIDE, SHAPE(30)}}, 1},
    {"Shrink lambd bias", "Shrink", NULL, 9, 1, {{"x", WIDE, SHAPE(30)}}, 1, a_shrink},
    {"Hardmax", "Hardmax", NULL, 13, 1, {{"x", SPREAD, SHAPE(3, 4)}}, 1},
    {"MeanVarianceNormalization", "MeanVarianceNormalization", NULL, 13, 1, {{"x", RAND, SHAPE(2, 3, 2, 2)}}, 1},
    {"MeanVarianceNormalization axes -1 opset 9",
     "MeanVarianceNormalization",
     NULL,
     9,
     1,
     {{"x", RAND, SHAPE(3, 5)}},
     1,
     a_mvn_axes_last},
    {"LRN size 3", "LRN", NULL, 13, 1, {{"x", RAND, SHAPE(2, 5, 2, 2)}}, 1, a_lrn3},
    {"LRN size 2 (uneven window)", "LRN", NULL, 13, 1, {{"x", RAND, SHAPE(1, 4, 3)}}, 1, a_lrn2},
    {"ReverseSequence",
     "ReverseSequence",
     NULL,
     10,
     2,
     {{"x", RAND, SHAPE(4, 2, 3)}, {"l", INTS, SHAPE(2), {4, 2}}},
     1},
    {"ReverseSequence time_axis 1",
     "ReverseSequence",
     NULL,
     10,
     2,
     {{"x", RAND, SHAPE(3, 4, 2)}, {"l", INTS, SHAPE(3), {1, 3, 4}}},
     1,
     a_time_axis1_batch0},
    {"RotaryEmbedding",
     "RotaryEmbedding",
     NULL,
     23,
     3,
     {{"x", RAND, SHAPE(1, 2, 3, 4)}, {"cos", FIXED, SHAPE(1, 3, 2)}, {"sin", FIXED, SHAPE(1, 3, 2)}},
     1},
    {"RotaryEmbedding 3D interleaved position_ids",
     "RotaryEmbedding",
     NULL,
     23,
     4,
     {{"x", RAND, SHAPE(1, 3, 8)},
      {"cos", FIXED, SHAPE(4, 2)},
      {"sin", FIXED, SHAPE(4, 2)},
      {"pos", INTS, SHAPE(1, 3), {2, 0, 3}}},
     1,
     a_rope_3d_interleaved},
    {"SwiGLU", "SwiGLU", NULL, 28, 2, {{"a", WIDE, SHAPE(30)}, {"b", RAND, SHAPE(30)}}, 1},
    {"SwiGLU alpha", "SwiGLU", NULL, 28, 2, {{"a", RAND, SHAPE(2, 4)}, {"b", RAND, SHAPE(2, 4)}}, 1, a_alpha_07},
    {"RotaryEmbedding partial",
     "RotaryEmbedding",
     NULL,
     23,
     3,
     {{"x", RAND, SHAPE(1, 2, 3, 4)}, {"cos", FIXED, SHAPE(1, 3, 1)}, {"sin", FIXED, SHAPE(1, 3, 1)}},
     1,
     a_rope_partial},
    /* math ops */
    {"CumProd zeros",
     "CumProd",
     NULL,
     26,
     2,
     {{"x", ZEROED, SHAPE(5, 4)}, {"ax", INTS, 0, {0}, {-1}}},
     1,
     NULL,
     0,
     true},
    {"CumProd axis 0", "CumProd", NULL, 26, 2, {{"x", RAND, SHAPE(4, 3)}, {"ax", INTS, 0, {0}, {0}}}, 1, NULL, 0, true},
    {"CumProd exclusive zeros",
     "CumProd",
     NULL,
     26,
     2,
     {{"x", ZEROED, SHAPE(5, 4)}, {"ax", INTS, 0, {0}, {1}}},
     1,
     a_exclusive,
     0,
     true},
    {"CumProd reverse zeros",
     "CumProd",
     NULL,
     26,
     2,
     {{"x", ZEROED, SHAPE(5, 4)}, {"ax", INTS, SHAPE(1), {1}}},
     1,
     a_reverse,
     0,
     true},
    {"CumProd exclusive reverse",
     "CumProd",
     NULL,
     26,
     2,
     {{"x", ZEROED, SHAPE(4, 5)}, {"ax", INTS, 0, {0}, {0}}},
     1,
     a_exclusive_reverse,
     0,
     true},
    {"LpPool p 2 strided", "LpPool", NULL, 18, 1, {{"x", RAND, SHAPE(2, 2, 4, 4)}}, 1, a_pool},
    {"LpPool p 1 padded", "LpPool", NULL, 18, 1, {{"x", RAND, SHAPE(1, 2, 4, 4)}}, 1, a_lppool_pad_p1},
    {"LpPool p 3 dilated", "LpPool", NULL, 18, 1, {{"x", RAND, SHAPE(1, 2, 5, 5)}}, 1, a_lppool_dilated_p3},
    {"LpPool ceil_mode", "LpPool", NULL, 18, 1, {{"x", RAND, SHAPE(1, 2, 5, 5)}}, 1, a_lppool_ceil},
    {"GlobalLpPool p 2", "GlobalLpPool", NULL, 0, 1, {{"x", RAND, SHAPE(2, 3, 3, 3)}}, 1},
    {"GlobalLpPool p 1", "GlobalLpPool", NULL, 0, 1, {{"x", RAND, SHAPE(2, 3, 4)}}, 1, a_p1},
    {"GlobalLpPool p 3", "GlobalLpPool", NULL, 0, 1, {{"x", RAND, SHAPE(1, 2, 3, 3)}}, 1, a_p3},
    {"Det", "Det", NULL, 0, 1, {{"x", RAND, SHAPE(3, 3)}}, 1},
    {"Det batched", "Det", NULL, 0, 1, {{"x", RAND, SHAPE(2, 2, 4, 4)}}, 1},
    {"Det singular (rank M-1)", "Det", NULL, 0, 1, {{"x", DUP_ROW, SHAPE(2, 3, 3)}}, 1, NULL, 0, true},
    {"CastLike", "CastLike", NULL, 15, 2, {{"x", RAND, SHAPE(2, 3)}, {"like", FIXED, SHAPE(1)}}, 1},
    {"Mod fmod broadcast", "Mod", NULL, 13, 2, {{"a", RAND, SHAPE(2, 3)}, {"b", POS, SHAPE(3)}}, 1, a_fmod},
    {"MaxUnpool",
     "MaxUnpool",
     NULL,
     11,
     2,
     {{"x", RAND, SHAPE(1, 2, 2, 2)}, {"i", INTS, SHAPE(1, 2, 2, 2), {1, 6, 8, 15, 16, 19, 26, 31}}},
     1,
     a_unpool2},
    {"MaxUnpool output_shape",
     "MaxUnpool",
     NULL,
     11,
     3,
     {{"x", RAND, SHAPE(1, 1, 2, 2)},
      {"i", INTS, SHAPE(1, 1, 2, 2), {0, 3, 9, 14}},
      {"s", INTS, SHAPE(4), {1, 1, 5, 5}}},
     1,
     a_unpool2},
    {"CenterCropPad", "CenterCropPad", NULL, 18, 2, {{"x", RAND, SHAPE(3, 5)}, {"s", INTS, SHAPE(2), {4, 2}}}, 1},
    {"CenterCropPad axes",
     "CenterCropPad",
     NULL,
     18,
     2,
     {{"x", RAND, SHAPE(2, 5, 3)}, {"s", INTS, SHAPE(2), {2, 6}}},
     1,
     a_axes_1_2},
    /* Compress: its output shape depends on the condition's values, so the loss sees it only at run time
     * (declared here by a symbolic batch axis). */
    {"Compress axis 0",
     "Compress",
     NULL,
     0,
     2,
     {{"x", RAND, SHAPE(3, 4), {0}, {0}, 1}, {"c", BOOLS, SHAPE(3), {1, 0, 1}}},
     1,
     a_axis0},
    {"Compress axis -1 opset 10",
     "Compress",
     NULL,
     10,
     2,
     {{"x", RAND, SHAPE(2, 4), {0}, {0}, 1}, {"c", BOOLS, SHAPE(3), {1, 1, 0}}},
     1,
     a_axis_minus1},
    {"Compress flattened",
     "Compress",
     NULL,
     0,
     2,
     {{"x", RAND, SHAPE(3, 4), {0}, {0}, 1}, {"c", BOOLS, SHAPE(5), {0, 1, 1, 0, 1}}},
     1},
    {"Scatter opset 10 (data)",
     "Scatter",
     NULL,
     10,
     3,
     {{"x", RAND, SHAPE(3, 3)}, {"i", INTS, SHAPE(2, 2), {1, 0, 2, 1}}, {"u", FIXED, SHAPE(2, 2)}},
     1,
     a_axis_minus1},
    {"DFT real", "DFT", NULL, 17, 1, {{"x", RAND, SHAPE(2, 5, 1)}}, 1},
    {"DFT complex inverse", "DFT", NULL, 17, 1, {{"x", RAND, SHAPE(2, 4, 2)}}, 1, a_inverse},
    {"DFT onesided", "DFT", NULL, 17, 1, {{"x", RAND, SHAPE(1, 6, 1)}}, 1, a_onesided},
    {"DFT dft_length 7 (pads)", "DFT", NULL, 17, 2, {{"x", RAND, SHAPE(2, 4, 2)}, {"n", INTS, 0, {0}, {7}}}, 1},
    {"DFT dft_length 3 (cuts)",
     "DFT",
     NULL,
     17,
     2,
     {{"x", RAND, SHAPE(1, 5, 1)}, {"n", INTS, 0, {0}, {3}}},
     1,
     a_onesided},
    {"DFT-20 axis 0",
     "DFT",
     NULL,
     20,
     3,
     {{"x", RAND, SHAPE(3, 4, 2)}, {"n", INTS, 0, {0}, {3}}, {"a", INTS, 0, {0}, {0}}},
     1},
    {"DFT-20 irfft", "DFT", NULL, 20, 1, {{"x", RAND, SHAPE(2, 4, 2)}}, 1, a_irfft},
    {"DFT-20 irfft odd length",
     "DFT",
     NULL,
     20,
     3,
     {{"x", RAND, SHAPE(1, 3, 3, 2)}, {"n", INTS, 0, {0}, {5}}, {"a", INTS, 0, {0}, {-3}}},
     1,
     a_irfft},
    {"STFT window (signal, window)",
     "STFT",
     NULL,
     17,
     3,
     {{"x", RAND, SHAPE(2, 10, 1)}, {"step", INTS, 0, {0}, {3}}, {"w", RAND, SHAPE(4)}},
     1},
    {"STFT complex frame_length",
     "STFT",
     NULL,
     17,
     4,
     {{"x", RAND, SHAPE(1, 9, 2)}, {"step", INTS, 0, {0}, {2}}, {"", FIXED, 0}, {"len", INTS, 0, {0}, {5}}},
     1,
     a_twosided},
    /* geometric ops */
    {"GridSample bilinear zeros",
     "GridSample",
     NULL,
     16,
     2,
     {{"x", RAND, SHAPE(1, 2, 4, 4)}, {"grid", GRID, SHAPE(1, 2, 3, 2)}},
     1},
    {"GridSample bilinear border align_corners",
     "GridSample",
     NULL,
     16,
     2,
     {{"x", RAND, SHAPE(1, 2, 5, 5)}, {"grid", GRID, SHAPE(1, 2, 3, 2)}},
     1,
     a_gs_bilinear_border_ac},
    {"GridSample bilinear reflection",
     "GridSample",
     NULL,
     16,
     2,
     {{"x", RAND, SHAPE(1, 2, 4, 4)}, {"grid", GRID, SHAPE(1, 2, 3, 2)}},
     1,
     a_gs_bilinear_reflection},
    {"GridSample bilinear reflection align_corners",
     "GridSample",
     NULL,
     16,
     2,
     {{"x", RAND, SHAPE(1, 2, 5, 5)}, {"grid", GRID, SHAPE(1, 2, 3, 2)}},
     1,
     a_gs_bilinear_reflection_ac},
    {"GridSample nearest zeros align_corners",
     "GridSample",
     NULL,
     16,
     2,
     {{"x", RAND, SHAPE(1, 2, 5, 5)}, {"grid", GRID, SHAPE(1, 2, 3, 2)}},
     1,
     a_gs_nearest_zeros_ac},
    {"GridSample nearest border",
     "GridSample",
     NULL,
     16,
     2,
     {{"x", RAND, SHAPE(1, 2, 4, 4)}, {"grid", GRID, SHAPE(1, 2, 3, 2)}},
     1,
     a_gs_nearest_border},
    {"GridSample nearest reflection align_corners",
     "GridSample",
     NULL,
     16,
     2,
     {{"x", RAND, SHAPE(1, 2, 5, 5)}, {"grid", GRID, SHAPE(1, 2, 3, 2)}},
     1,
     a_gs_nearest_reflection_ac},
    {"GridSample bicubic zeros",
     "GridSample",
     NULL,
     16,
     2,
     {{"x", RAND, SHAPE(1, 2, 4, 4)}, {"grid", GRID, SHAPE(1, 2, 3, 2)}},
     1,
     a_gs_bicubic_zeros},
    {"GridSample bicubic border align_corners",
     "GridSample",
     NULL,
     16,
     2,
     {{"x", RAND, SHAPE(1, 2, 5, 5)}, {"grid", GRID, SHAPE(1, 2, 3, 2)}},
     1,
     a_gs_bicubic_border_ac},
    {"GridSample bicubic reflection",
     "GridSample",
     NULL,
     16,
     2,
     {{"x", RAND, SHAPE(1, 2, 4, 4)}, {"grid", GRID, SHAPE(1, 2, 3, 2)}},
     1,
     a_gs_bicubic_reflection},
    {"GridSample 5-D linear zeros align_corners",
     "GridSample",
     NULL,
     20,
     2,
     {{"x", RAND, SHAPE(1, 2, 5, 5, 5)}, {"grid", GRID, SHAPE(1, 2, 2, 1, 3)}},
     1,
     a_gs_linear_zeros_ac},
    {"GridSample 5-D linear reflection",
     "GridSample",
     NULL,
     20,
     2,
     {{"x", RAND, SHAPE(1, 1, 4, 4, 4)}, {"grid", GRID, SHAPE(1, 1, 2, 2, 3)}},
     1,
     a_gs_linear_reflection},
    {"GridSample 3-D linear border align_corners",
     "GridSample",
     NULL,
     20,
     2,
     {{"x", RAND, SHAPE(2, 2, 5)}, {"grid", GRID, SHAPE(2, 4, 1)}},
     1,
     a_gs_linear_border_ac},
    {"AffineGrid 2-D",
     "AffineGrid",
     NULL,
     20,
     2,
     {{"theta", RAND, SHAPE(2, 2, 3)}, {"size", INTS, SHAPE(4), {2, 1, 3, 4}}},
     1},
    {"AffineGrid 2-D align_corners",
     "AffineGrid",
     NULL,
     20,
     2,
     {{"theta", RAND, SHAPE(1, 2, 3)}, {"size", INTS, SHAPE(4), {1, 3, 4, 2}}},
     1,
     a_align_corners},
    {"AffineGrid 3-D",
     "AffineGrid",
     NULL,
     20,
     2,
     {{"theta", RAND, SHAPE(2, 3, 4)}, {"size", INTS, SHAPE(5), {2, 1, 2, 3, 2}}},
     1},
    {"AffineGrid 3-D align_corners",
     "AffineGrid",
     NULL,
     20,
     2,
     {{"theta", RAND, SHAPE(1, 3, 4)}, {"size", INTS, SHAPE(5), {1, 2, 3, 2, 4}}},
     1,
     a_align_corners},
    {"Col2Im",
     "Col2Im",
     NULL,
     18,
     3,
     {{"x", RAND, SHAPE(1, 8, 4)}, {"image", INTS, SHAPE(2), {3, 3}}, {"block", INTS, SHAPE(2), {2, 2}}},
     1},
    {"Col2Im strides pads",
     "Col2Im",
     NULL,
     18,
     3,
     {{"x", RAND, SHAPE(2, 4, 9)}, {"image", INTS, SHAPE(2), {5, 5}}, {"block", INTS, SHAPE(2), {2, 2}}},
     1,
     a_col2im_strided},
    {"Col2Im dilations",
     "Col2Im",
     NULL,
     18,
     3,
     {{"x", RAND, SHAPE(1, 4, 9)}, {"image", INTS, SHAPE(2), {5, 4}}, {"block", INTS, SHAPE(2), {2, 2}}},
     1,
     a_col2im_dilated},
    {"Col2Im 3-D",
     "Col2Im",
     NULL,
     18,
     3,
     {{"x", RAND, SHAPE(1, 8, 8)}, {"image", INTS, SHAPE(3), {3, 3, 3}}, {"block", INTS, SHAPE(3), {2, 2, 2}}},
     1},
    {"DeformConv mask bias",
     "DeformConv",
     NULL,
     19,
     5,
     {{"x", RAND, SHAPE(1, 2, 4, 4)},
      {"w", RAND, SHAPE(2, 2, 2, 2)},
      {"offset", GRID, SHAPE(1, 8, 3, 3)},
      {"b", RAND, SHAPE(2)},
      {"mask", RAND, SHAPE(1, 4, 3, 3)}},
     1},
    {"DeformConv groups strides pads",
     "DeformConv",
     NULL,
     19,
     4,
     {{"x", RAND, SHAPE(1, 4, 4, 4)},
      {"w", RAND, SHAPE(2, 2, 3, 3)},
      {"offset", GRID, SHAPE(1, 36, 2, 2)},
      {"b", RAND, SHAPE(2)}},
     1,
     a_deform_grouped},
    {"DeformConv 1-D mask",
     "DeformConv",
     NULL,
     19,
     5,
     {{"x", RAND, SHAPE(2, 2, 5)},
      {"w", RAND, SHAPE(3, 2, 2)},
      {"offset", GRID, SHAPE(2, 2, 4)},
      {"", FIXED, 0, {0}},
      {"mask", RAND, SHAPE(2, 2, 4)}},
     1},
    {"RoiAlign avg",
     "RoiAlign",
     NULL,
     16,
     3,
     {{"x", RAND, SHAPE(2, 2, 5, 6)},
      {"rois", FLOATS, SHAPE(2, 4), {0}, {0.6f, 1.2f, 6.4f, 7.8f, 2.2f, 0.8f, 9.6f, 5.4f}},
      {"bi", INTS, SHAPE(2), {1, 0}}},
     1,
     a_roi_avg},
    {"RoiAlign max opset 10",
     "RoiAlign",
     NULL,
     10,
     3,
     {{"x", RAND, SHAPE(2, 2, 5, 6)},
      {"rois", FLOATS, SHAPE(2, 4), {0}, {0.6f, 1.2f, 6.4f, 7.8f, 2.2f, 0.8f, 9.6f, 5.4f}},
      {"bi", INTS, SHAPE(2), {0, 0}}},
     1,
     a_roi_max},
    /* depthwise Conv (ConvGrad's conv_depthwise.c kernels) */
    {"Conv depthwise 2-D strided padded, 2 channels per group",
     "Conv",
     NULL,
     0,
     3,
     {{"x", RAND, SHAPE(2, 3, 5, 6)}, {"w", RAND, SHAPE(6, 1, 3, 3)}, {"b", RAND, SHAPE(6)}},
     1,
     a_conv_depthwise},
    {"Conv depthwise 2-D dilated",
     "Conv",
     NULL,
     0,
     2,
     {{"x", RAND, SHAPE(1, 4, 5, 4)}, {"w", RAND, SHAPE(4, 1, 2, 3)}},
     1,
     a_conv_depthwise_dil},
    /* Clip's dX through com.otter ClipGrad: each bound alone, and the attribute bounds before opset 11 */
    {"Clip min bound only", "Clip", NULL, 0, 2, {{"x", RAND, SHAPE(2, 4)}, {"lo", MINUS_HALF, 0, {0}}}, 1},
    {"Clip opset 10 attributes", "Clip", NULL, 10, 1, {{"x", RAND, SHAPE(8)}}, 1, a_clip_min_max},
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

/* A Loop whose trip count is a graph input can't be unrolled: the error names the node. */
static void check_dynamic_loop_error(void) {
    grad_case c = {"Loop dynamic M",
                   "Loop",
                   NULL,
                   0,
                   4,
                   {{"M", FIXED, 0, {0}}, {"", FIXED, 0, {0}}, {"h0", RAND, SHAPE(1, 4)}, {"W", RAND, SHAPE(4, 4)}},
                   2,
                   a_loop,
                   .node_inputs = 3};
    otter_model *m = forward_model(&c);
    CHECK_OK(otter_graph_change_input(m->graph, "M", OTTER_DTYPE_INT64, 0, NULL, NULL));
    const char *wrt[] = {"W"};
    otter_grad_options go = {.loss = "loss", .n_wrt = 1, .wrt = wrt};
    otter_status st = otter_model_add_gradients(m, &go);
    const char *msg = otter_last_error();
    CHECK(st == OTTER_ERR_UNSUPPORTED && strstr(msg, "'op' (Loop)") && strstr(msg, "trip count"));
    printf("dynamic Loop: %s\n", msg);
    otter_model_free(m);
}

/* A Loop whose trip count comes from the shape of a tensor that depends on W (an integer path, no
 * gradient through it) is not on the gradient path: loss = sum(x @ W) + sum(Loop(M = rows(x @ W),
 * c = c + 1 from c0)) builds, leaving the Loop as it is. */
static void check_shape_driven_loop(void) {
    otter_model *m;
    CHECK_OK(otter_model_create(&m, "shape_loop", 17));
    otter_graph *g = m->graph;
    int64_t xd[2] = {3, 2}, wd[2] = {2, 2}, one = 1;
    CHECK_OK(otter_graph_add_input(g, "x", OTTER_DTYPE_FLOAT, 2, xd, NULL));
    CHECK_OK(otter_graph_add_input(g, "W", OTTER_DTYPE_FLOAT, 2, wd, NULL));
    CHECK_OK(otter_graph_add_input(g, "c0", OTTER_DTYPE_FLOAT, 1, &one, NULL));
    otter_tensor *zero, *inc;
    int64_t z = 0;
    float f1 = 1.0f;
    CHECK_OK(otter_tensor_from_data(&zero, "zero", OTTER_DTYPE_INT64, 0, NULL, &z));
    CHECK_OK(otter_graph_add_initializer(g, zero));
    node1(g, "MatMul", "x", "W", "h");
    node1(g, "Shape", "h", NULL, "h_shape");
    CHECK_OK(otter_node_set_attr_int(node1(g, "Gather", "h_shape", "zero", "M"), "axis", 0));
    otter_graph *b = subgraph("body");
    CHECK_OK(otter_graph_add_input(b, "i", OTTER_DTYPE_INT64, 0, NULL, NULL));
    CHECK_OK(otter_graph_add_input(b, "cond_in", OTTER_DTYPE_BOOL, 0, NULL, NULL));
    CHECK_OK(otter_graph_add_input(b, "c_in", OTTER_DTYPE_FLOAT, 1, &one, NULL));
    CHECK_OK(otter_tensor_from_data(&inc, "inc", OTTER_DTYPE_FLOAT, 0, NULL, &f1));
    CHECK_OK(otter_graph_add_initializer(b, inc));
    node1(b, "Identity", "cond_in", NULL, "cond_out");
    node1(b, "Add", "c_in", "inc", "c_out");
    CHECK_OK(otter_graph_add_output(b, "cond_out", OTTER_DTYPE_BOOL, 0, NULL, NULL));
    CHECK_OK(otter_graph_add_output(b, "c_out", OTTER_DTYPE_FLOAT, 1, &one, NULL));
    otter_node *loop;
    const char *loop_in[] = {"M", "", "c0"}, *loop_out[] = {"c_final"};
    CHECK_OK(otter_node_create(&loop, "Loop", "loop", 3, loop_in, 1, loop_out));
    CHECK_OK(otter_node_set_attr_graph(loop, "body", b));
    CHECK_OK(otter_graph_add_node(g, loop));
    CHECK_OK(otter_node_set_attr_int(node1(g, "ReduceSum", "h", NULL, "sum_h"), "keepdims", 0));
    CHECK_OK(otter_node_set_attr_int(node1(g, "ReduceSum", "c_final", NULL, "sum_c"), "keepdims", 0));
    node1(g, "Add", "sum_h", "sum_c", "loss");
    CHECK_OK(otter_graph_add_output(g, "loss", OTTER_DTYPE_FLOAT, 0, NULL, NULL));
    const char *wrt[] = {"W"};
    otter_grad_options go = {.loss = "loss", .n_wrt = 1, .wrt = wrt};
    otter_status st = otter_model_add_gradients(m, &go);
    CHECK(st == OTTER_OK);
    if (st != OTTER_OK) fprintf(stderr, "shape-driven Loop: %s\n", otter_last_error());
    bool still_a_loop = false;
    for (size_t k = 0; k < m->graph->n_nodes; k++) still_a_loop |= strcmp(m->graph->nodes[k]->op_type, "Loop") == 0;
    CHECK(still_a_loop); /* left as it is: nothing to differentiate through it */
    printf("shape-driven Loop off the gradient path: %s, Loop kept: %s\n", st == OTTER_OK ? "built" : "failed",
           still_a_loop ? "yes" : "no");
    otter_model_free(m);
}

/* Inputs past the 31st get gradients too: a Sum of 33 inputs, and an If whose branch sums 33 outer tensors;
 * loss = sum(y), so d(x32) must be ones. */
static void check_input_33(void) {
    for (int use_if = 0; use_if < 2; use_if++) {
        otter_model *m;
        CHECK_OK(otter_model_create(&m, "many_inputs", 17));
        char names[33][8];
        const char *ins[33];
        int64_t two = 2;
        for (int i = 0; i < 33; i++) {
            snprintf(names[i], sizeof names[i], "x%d", i);
            ins[i] = names[i];
            CHECK_OK(otter_graph_add_input(m->graph, names[i], OTTER_DTYPE_FLOAT, 1, &two, NULL));
        }
        otter_node *n;
        const char *y = "y", *sum_name = use_if ? "branch_sum" : "y";
        otter_graph *body = use_if ? subgraph("then") : m->graph;
        CHECK_OK(otter_node_create(&n, "Sum", sum_name, 33, ins, 1, &sum_name));
        CHECK_OK(otter_graph_add_node(body, n));
        if (use_if) {
            CHECK_OK(otter_graph_add_output(body, sum_name, OTTER_DTYPE_FLOAT, 1, &two, NULL));
            otter_graph *other = subgraph("else");
            node1(other, "Identity", "x0", NULL, "else_out");
            CHECK_OK(otter_graph_add_output(other, "else_out", OTTER_DTYPE_FLOAT, 1, &two, NULL));
            otter_tensor *c;
            uint8_t yes = 1;
            CHECK_OK(otter_tensor_from_data(&c, "c", OTTER_DTYPE_BOOL, 0, NULL, &yes));
            CHECK_OK(otter_graph_add_initializer(m->graph, c));
            const char *cond = "c";
            CHECK_OK(otter_node_create(&n, "If", "if", 1, &cond, 1, &y));
            CHECK_OK(otter_node_set_attr_graph(n, "then_branch", body));
            CHECK_OK(otter_node_set_attr_graph(n, "else_branch", other));
            CHECK_OK(otter_graph_add_node(m->graph, n));
        }
        CHECK_OK(otter_node_set_attr_int(node1(m->graph, "ReduceSum", "y", NULL, "loss"), "keepdims", 0));
        CHECK_OK(otter_graph_add_output(m->graph, "loss", OTTER_DTYPE_FLOAT, 0, NULL, NULL));
        const char *wrt[] = {"x32"};
        otter_grad_options go = {.loss = "loss", .n_wrt = 1, .wrt = wrt};
        CHECK_OK(otter_model_add_gradients(m, &go));
        CHECK_OK(otter_graph_add_output(m->graph, "x32_grad", OTTER_DTYPE_FLOAT, -1, NULL, NULL));
        otter_session *sess;
        otter_session_options so = {.n_threads = 1};
        CHECK_OK(otter_session_create(&sess, m, &so));
        otter_tensor *vals[33], *grad = NULL;
        for (int i = 0; i < 33; i++) {
            CHECK_OK(otter_tensor_create(&vals[i], names[i], OTTER_DTYPE_FLOAT, 1, &two));
            ((float *)vals[i]->data)[0] = ((float *)vals[i]->data)[1] = (float)i;
        }
        const char *out = "x32_grad";
        CHECK_OK(otter_session_run(sess, 33, ins, (const otter_tensor *const *)vals, 1, &out, &grad));
        const float *d = grad ? grad->data : NULL;
        CHECK(d && d[0] == 1.0f && d[1] == 1.0f);
        printf("%s of 33 inputs: d(x32) = [%g, %g]\n", use_if ? "If reading" : "Sum", d ? d[0] : NAN, d ? d[1] : NAN);
        otter_tensor_free(grad);
        for (int i = 0; i < 33; i++) otter_tensor_free(vals[i]);
        otter_session_free(sess);
        otter_model_free(m);
    }
}

/* SiLU exported as Mul(Sigmoid(x), x) becomes QuickGelu(x; alpha 1) with a QuickGeluGrad, so the
 * sigmoid is not kept for the backward pass; a sigmoid something else reads (here a graph output)
 * stays. Either way x's gradient is d(x sigmoid(x)) = s (1 + x (1 - s)). */
static void check_silu_fusion(void) {
    for (int shared = 0; shared < 2; shared++) {
        otter_model *m;
        CHECK_OK(otter_model_create(&m, "silu", 17));
        int64_t dims[2] = {2, 5};
        CHECK_OK(otter_graph_add_input(m->graph, "x", OTTER_DTYPE_FLOAT, 2, dims, NULL));
        node1(m->graph, "Sigmoid", "x", NULL, "s");
        node1(m->graph, "Mul", "s", "x", "y");
        CHECK_OK(otter_node_set_attr_int(node1(m->graph, "ReduceSum", "y", NULL, "loss"), "keepdims", 0));
        CHECK_OK(otter_graph_add_output(m->graph, "loss", OTTER_DTYPE_FLOAT, 0, NULL, NULL));
        if (shared) CHECK_OK(otter_graph_add_output(m->graph, "s", OTTER_DTYPE_FLOAT, 2, dims, NULL));
        const char *wrt[] = {"x"};
        otter_grad_options go = {.loss = "loss", .n_wrt = 1, .wrt = wrt};
        CHECK_OK(otter_model_add_gradients(m, &go));
        bool sigmoid = false, quick_gelu = false, quick_gelu_grad = false;
        for (size_t k = 0; k < m->graph->n_nodes; k++) {
            const otter_node *n = m->graph->nodes[k];
            sigmoid |= strcmp(n->op_type, "Sigmoid") == 0;
            quick_gelu |= strcmp(n->op_type, "QuickGelu") == 0 && otter_node_attr_float(n, "alpha", 0) == 1.0f;
            quick_gelu_grad |= strcmp(n->op_type, "QuickGeluGrad") == 0;
        }
        CHECK(sigmoid == (shared != 0) && quick_gelu == !shared && quick_gelu_grad == !shared);
        CHECK_OK(otter_graph_add_output(m->graph, "x_grad", OTTER_DTYPE_FLOAT, -1, NULL, NULL));
        otter_session *sess;
        otter_session_options so = {.n_threads = 1};
        CHECK_OK(otter_session_create(&sess, m, &so));
        otter_tensor *x, *grad = NULL;
        CHECK_OK(otter_tensor_create(&x, "x", OTTER_DTYPE_FLOAT, 2, dims));
        float *xv = x->data;
        for (int i = 0; i < 10; i++) xv[i] = -4.5f + (float)i;
        const char *in = "x", *out = "x_grad";
        CHECK_OK(otter_session_run(sess, 1, &in, (const otter_tensor *const *)&x, 1, &out, &grad));
        double worst = 0;
        for (int i = 0; grad && i < 10; i++) {
            double sg = 1.0 / (1.0 + exp(-(double)xv[i])), want = sg * (1.0 + xv[i] * (1.0 - sg));
            worst = fmax(worst, fabs(((float *)grad->data)[i] - want));
        }
        CHECK(grad && worst < 1e-6);
        printf("SiLU (%s): fused %d, worst gradient error %.2e\n", shared ? "sigmoid also an output" : "alone",
               quick_gelu, worst);
        otter_tensor_free(grad);
        otter_tensor_free(x);
        otter_session_free(sess);
        otter_model_free(m);
    }
}

/* Relu followed by a training-mode Dropout (a transformer's feed-forward block): ReluGrad reads the
 * Dropout's output, so the Relu's output dies in the forward pass; a Relu output something else
 * reads too (here a graph output) stays what ReluGrad reads. Either way, with loss = sum(c * d),
 * d = Dropout(Relu(x)) at ratio 0.5: dx = 2 c where x > 0 and the mask kept it, else 0. */
static void check_relu_dropout(void) {
    for (int shared = 0; shared < 2; shared++) {
        otter_model *m;
        CHECK_OK(otter_model_create(&m, "relu_dropout", 17));
        int64_t dims[2] = {4, 8};
        CHECK_OK(otter_graph_add_input(m->graph, "x", OTTER_DTYPE_FLOAT, 2, dims, NULL));
        otter_tensor *ratio, *train, *c;
        const float half = 0.5f;
        const uint8_t yes = 1;
        float cv[32];
        for (int i = 0; i < 32; i++) cv[i] = 0.25f + 0.125f * (float)(i % 7);
        CHECK_OK(otter_tensor_from_data(&ratio, "ratio", OTTER_DTYPE_FLOAT, 0, NULL, &half));
        CHECK_OK(otter_tensor_from_data(&train, "training", OTTER_DTYPE_BOOL, 0, NULL, &yes));
        CHECK_OK(otter_tensor_from_data(&c, "c", OTTER_DTYPE_FLOAT, 2, dims, cv));
        CHECK_OK(otter_graph_add_initializer(m->graph, ratio));
        CHECK_OK(otter_graph_add_initializer(m->graph, train));
        CHECK_OK(otter_graph_add_initializer(m->graph, c));
        node1(m->graph, "Relu", "x", NULL, "r");
        otter_node *drop;
        const char *drop_in[] = {"r", "ratio", "training"}, *drop_out[] = {"d", "mask"};
        CHECK_OK(otter_node_create(&drop, "Dropout", "drop", 3, drop_in, 2, drop_out));
        CHECK_OK(otter_node_set_attr_int(drop, "seed", 7));
        CHECK_OK(otter_graph_add_node(m->graph, drop));
        node1(m->graph, "Mul", "d", "c", "y");
        CHECK_OK(otter_node_set_attr_int(node1(m->graph, "ReduceSum", "y", NULL, "loss"), "keepdims", 0));
        CHECK_OK(otter_graph_add_output(m->graph, "loss", OTTER_DTYPE_FLOAT, 0, NULL, NULL));
        CHECK_OK(otter_graph_add_output(m->graph, "mask", OTTER_DTYPE_BOOL, 2, dims, NULL));
        if (shared) CHECK_OK(otter_graph_add_output(m->graph, "r", OTTER_DTYPE_FLOAT, 2, dims, NULL));
        const char *wrt[] = {"x"};
        otter_grad_options go = {.loss = "loss", .n_wrt = 1, .wrt = wrt};
        CHECK_OK(otter_model_add_gradients(m, &go));
        const char *read = NULL;
        for (size_t k = 0; k < m->graph->n_nodes; k++)
            if (strcmp(m->graph->nodes[k]->op_type, "ReluGrad") == 0) read = m->graph->nodes[k]->inputs[1];
        CHECK(read && strcmp(read, shared ? "r" : "d") == 0);
        CHECK_OK(otter_graph_add_output(m->graph, "x_grad", OTTER_DTYPE_FLOAT, -1, NULL, NULL));
        otter_session *sess;
        CHECK_OK(otter_session_create(&sess, m, &(otter_session_options){.n_threads = 1}));
        otter_tensor *x, *outs[2] = {NULL, NULL};
        CHECK_OK(otter_tensor_create(&x, "x", OTTER_DTYPE_FLOAT, 2, dims));
        float *xv = x->data;
        for (int i = 0; i < 32; i++) xv[i] = (float)((i * 5) % 11) - 5.0f; /* negative, zero and positive */
        const char *in = "x", *names[] = {"x_grad", "mask"};
        CHECK_OK(otter_session_run(sess, 1, &in, (const otter_tensor *const *)&x, 2, names, outs));
        int wrong = 0, kept = 0;
        for (int i = 0; outs[0] && outs[1] && i < 32; i++) {
            const bool on = xv[i] > 0 && ((const uint8_t *)outs[1]->data)[i];
            kept += on;
            wrong += ((const float *)outs[0]->data)[i] != (on ? 2.0f * cv[i] : 0.0f);
        }
        CHECK(outs[0] && outs[1] && wrong == 0 && kept > 0);
        printf("Relu + Dropout (%s): ReluGrad reads '%s', %d of 32 elements kept, %d wrong\n",
               shared ? "relu also an output" : "alone", read ? read : "?", kept, wrong);
        for (int i = 0; i < 2; i++) otter_tensor_free(outs[i]);
        otter_tensor_free(x);
        otter_session_free(sess);
        otter_model_free(m);
    }
}

/* Training-mode BatchNormalization followed by SiLU: QuickGeluGrad reads the BN's output recomputed
 * from the BN's input and saved statistics, not the output itself (which then dies in the forward
 * pass). The gradients of x, scale and B through both against central differences of the forward
 * model; loss = sum(w * silu(bn(x))) with w random, so the batch statistics' terms don't cancel. */
static otter_session *bn_silu_session(otter_model *m) {
    otter_session *s = NULL;
    CHECK_OK(otter_session_create(&s, m, &(otter_session_options){.n_threads = 1}));
    return s;
}

static double bn_silu_loss(otter_session *s, otter_tensor *const *in) {
    static const char *const names[] = {"x", "scale", "B"};
    otter_tensor *loss = NULL;
    const char *out = "loss";
    CHECK_OK(otter_session_run(s, 3, names, (const otter_tensor *const *)in, 1, &out, &loss));
    double v = loss ? ((float *)loss->data)[0] : NAN;
    otter_tensor_free(loss);
    return v;
}

static void check_batchnorm_silu_recompute(void) {
    otter_model *m;
    CHECK_OK(otter_model_create(&m, "bn_silu", 17));
    otter_graph *gr = m->graph;
    const int64_t xd[4] = {2, 3, 2, 2}, cd[1] = {3};
    CHECK_OK(otter_graph_add_input(gr, "x", OTTER_DTYPE_FLOAT, 4, xd, NULL));
    CHECK_OK(otter_graph_add_input(gr, "scale", OTTER_DTYPE_FLOAT, 1, cd, NULL));
    CHECK_OK(otter_graph_add_input(gr, "B", OTTER_DTYPE_FLOAT, 1, cd, NULL));
    otter_tensor *mean, *var, *w;
    CHECK_OK(otter_tensor_from_data(&mean, "mean", OTTER_DTYPE_FLOAT, 1, cd, (const float[]){0, 0, 0}));
    CHECK_OK(otter_tensor_from_data(&var, "var", OTTER_DTYPE_FLOAT, 1, cd, (const float[]){1, 1, 1}));
    CHECK_OK(otter_tensor_create(&w, "w", OTTER_DTYPE_FLOAT, 4, xd));
    for (int i = 0; i < 24; i++) ((float *)w->data)[i] = frand();
    CHECK_OK(otter_graph_add_initializer(gr, mean));
    CHECK_OK(otter_graph_add_initializer(gr, var));
    CHECK_OK(otter_graph_add_initializer(gr, w));
    otter_node *bn;
    CHECK_OK(otter_node_create(&bn, "BatchNormalization", "bn", 5, (const char *[]){"x", "scale", "B", "mean", "var"},
                               1, (const char *[]){"y"}));
    CHECK_OK(otter_node_set_attr_int(bn, "training_mode", 1));
    CHECK_OK(otter_graph_add_node(gr, bn));
    node1(gr, "Sigmoid", "y", NULL, "s");
    node1(gr, "Mul", "y", "s", "silu");
    node1(gr, "Mul", "silu", "w", "weighted");
    CHECK_OK(otter_node_set_attr_int(node1(gr, "ReduceSum", "weighted", NULL, "loss"), "keepdims", 0));
    CHECK_OK(otter_graph_add_output(gr, "loss", OTTER_DTYPE_FLOAT, 0, NULL, NULL));
    otter_model *fwd;
    CHECK_OK(otter_model_clone(&fwd, m));
    const char *wrt[] = {"x", "scale", "B"};
    otter_grad_options go = {.loss = "loss", .n_wrt = 3, .wrt = wrt};
    CHECK_OK(otter_model_add_gradients(m, &go));
    bool reads_y = false, has_grad = false;
    for (size_t k = 0; k < m->graph->n_nodes; k++) {
        const otter_node *n = m->graph->nodes[k];
        if (strcmp(n->op_type, "QuickGeluGrad") != 0) continue;
        has_grad = true;
        reads_y |= strcmp(n->inputs[1], "y") == 0;
    }
    CHECK(has_grad && !reads_y);
    const char *grads[] = {"x_grad", "scale_grad", "B_grad"};
    for (int i = 0; i < 3; i++) CHECK_OK(otter_graph_add_output(m->graph, grads[i], OTTER_DTYPE_FLOAT, -1, NULL, NULL));
    otter_tensor *in[3];
    CHECK_OK(otter_tensor_create(&in[0], "x", OTTER_DTYPE_FLOAT, 4, xd));
    CHECK_OK(otter_tensor_create(&in[1], "scale", OTTER_DTYPE_FLOAT, 1, cd));
    CHECK_OK(otter_tensor_create(&in[2], "B", OTTER_DTYPE_FLOAT, 1, cd));
    for (int i = 0; i < 24; i++) ((float *)in[0]->data)[i] = 2.0f * frand();
    for (int c = 0; c < 3; c++)
        ((float *)in[1]->data)[c] = 1.0f + 0.5f * frand(), ((float *)in[2]->data)[c] = 0.5f * frand();
    otter_session *gs = bn_silu_session(m), *fs = bn_silu_session(fwd);
    otter_tensor *got[3] = {0};
    static const char *const in_names[] = {"x", "scale", "B"};
    if (gs) CHECK_OK(otter_session_run(gs, 3, in_names, (const otter_tensor *const *)in, 3, grads, got));
    double worst = 0;
    for (int t = 0; gs && fs && t < 3; t++)
        for (int64_t i = 0; got[t] && i < otter_tensor_numel(in[t]); i++) {
            float *v = &((float *)in[t]->data)[i], keep = *v;
            const float h = 1e-2f;
            *v = keep + h;
            double up = bn_silu_loss(fs, in);
            *v = keep - h;
            double down = bn_silu_loss(fs, in);
            *v = keep;
            double fd = (up - down) / (2.0 * h), an = ((float *)got[t]->data)[i];
            worst = fmax(worst, fabs(fd - an) / fmax(1.0, fabs(fd)));
        }
    printf("BatchNormalization + SiLU: QuickGeluGrad reads the recomputed output; worst gradient error vs FD %.2e\n",
           worst);
    CHECK(got[0] && got[1] && got[2] && worst < 3e-3);
    for (int t = 0; t < 3; t++) otter_tensor_free(got[t]), otter_tensor_free(in[t]);
    otter_session_free(gs), otter_session_free(fs);
    otter_model_free(m), otter_model_free(fwd);
}

/* Building the gradients of the control-flow cases with the Nth allocation failing, N = 1, 2, ...:
 * every run ends in OTTER_OK or OTTER_ERR_NOMEM and leaves no allocation behind. */
static void check_control_flow_allocation_failures(void) {
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        const grad_case *c = &CASES[i];
        if (strcmp(c->op, "If") != 0 && strcmp(c->op, "Loop") != 0 && strcmp(c->op, "Scan") != 0) continue;
        otter_model *fwd = forward_model(c);
        const char *wrt[6];
        size_t n_wrt = 0;
        for (int k = 0; k < c->n_in; k++)
            if (is_wrt(&c->in[k])) wrt[n_wrt++] = c->in[k].name;
        otter_grad_options go = {.loss = "loss", .n_wrt = n_wrt, .wrt = wrt};
        long n;
        int nomem = 0, other = 0, leaks = 0;
        otter_set_allocator(&tu_counting_allocator);
        for (n = 1;; n++) {
            otter_model *m = NULL;
            otter_status s = otter_model_clone(&m, fwd);
            tu_alloc_fail_at(n);
            tu_alloc_live = 0;
            if (s == OTTER_OK) s = otter_model_add_gradients(m, &go);
            tu_alloc_fail_at(0);
            /* A failure leaves the model as it was: everything it allocated is freed. */
            if (s != OTTER_OK && tu_alloc_live != 0) leaks++;
            otter_model_free(m);
            if (s == OTTER_OK) break;
            if (s == OTTER_ERR_NOMEM) {
                nomem++;
            } else {
                other++;
                fprintf(stderr, "%s: failing allocation %ld gave %s: %s\n", c->label, n, otter_status_name(s),
                        otter_last_error());
            }
        }
        otter_set_allocator(NULL);
        printf("%-28s %ld allocation points, %d clean NOMEM, %d other errors, %d leaking runs\n", c->label, n, nomem,
               other, leaks);
        CHECK(other == 0 && leaks == 0 && nomem == n - 1);
        otter_model_free(fwd);
    }
}

int main(int argc, char **argv) {
    const char *only = argc > 1 ? argv[1] : NULL;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++)
        if (!only || strstr(CASES[i].label, only)) run_case(&CASES[i]);
    if (!only) check_every_rule_has_a_case();
    if (!only) check_dynamic_loop_error();
    if (!only) check_input_33();
    if (!only) check_silu_fusion();
    if (!only) check_relu_dropout();
    if (!only) check_batchnorm_silu_recompute();
    if (!only) check_shape_driven_loop();
    if (!only) check_control_flow_allocation_failures();
    return tu_finish("test_grad");
}
